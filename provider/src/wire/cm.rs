//! FI_EP_MSG connection management: the handshake between a connecting
//! endpoint and a passive endpoint, on a TCP connection of its own.
//!
//! Whichever wire carries a connection's data (shared memory for a peer on
//! this host, TCP otherwise: `Dial::route`), its handshake runs on a TCP
//! connection from the connecting endpoint to the passive endpoint's
//! listener (a passive endpoint's name is that listener's address on both
//! wires), and that connection stays open for as long as the endpoints are
//! connected: it carries the shutdown, and its end (a killed peer's kernel
//! closes it) tells the other side the connection is gone. docs/wire.md,
//! "Connections (FI_EP_MSG)", has the frames.
//!
//! Everything here is non-blocking: `dial` connects on a short-lived
//! thread (std has no non-blocking connect) and `Dialing::poll` collects
//! its result; `CmConn::poll` writes what is queued and reads what has
//! arrived, a frame at a time. Frames are checked before use (magic,
//! version, kind, length): a connection that sends anything else is
//! closed.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::info::addr;

/// Bytes before a frame's cm_data: magic, version, kind, cm_data length,
/// the sender's data name (a 28-byte sockaddr, zero when absent).
const HDR: usize = 4 + 1 + 1 + 2 + 28;
const MAGIC: &[u8; 4] = b"OXCM";
/// Version of the handshake frames (a peer of another is refused).
pub(crate) const CM_VERSION: u8 = 1;
/// The most cm_data a frame carries (FI_OPT_CM_DATA_SIZE).
pub(crate) const CM_DATA_MAX: usize = crate::info::attrs::CM_DATA_SIZE;

/// What a frame asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// fi_connect: the connector's data name and cm_data.
    Request = 1,
    /// fi_accept: the acceptor's data name and cm_data.
    Accept = 2,
    /// fi_reject: cm_data.
    Reject = 3,
    /// The connector saw the accept (the acceptor's FI_CONNECTED).
    Ack = 4,
    /// fi_shutdown.
    Shutdown = 5,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Request,
            2 => Kind::Accept,
            3 => Kind::Reject,
            4 => Kind::Ack,
            5 => Kind::Shutdown,
            _ => return None,
        })
    }
}

/// One handshake frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub kind: Kind,
    /// The sender's data name (Request, Accept).
    pub name: Option<SocketAddr>,
    pub data: Vec<u8>,
}

impl Frame {
    pub fn new(kind: Kind, name: Option<SocketAddr>, data: &[u8]) -> Frame {
        Frame { kind, name, data: data.to_vec() }
    }

    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HDR + self.data.len());
        b.extend_from_slice(MAGIC);
        b.push(CM_VERSION);
        b.push(self.kind as u8);
        b.extend_from_slice(&(self.data.len().min(CM_DATA_MAX) as u16).to_le_bytes());
        let mut name = [0u8; 28];
        if let Some(n) = &self.name {
            let e = addr::encode(n);
            name[..e.len()].copy_from_slice(&e);
        }
        b.extend_from_slice(&name);
        b.extend_from_slice(&self.data[..self.data.len().min(CM_DATA_MAX)]);
        b
    }

    /// Decode the frame at the start of `b`: Ok(None) while incomplete,
    /// Ok(Some((frame, bytes used))), or Err(why) for anything else.
    fn decode(b: &[u8]) -> Result<Option<(Frame, usize)>, String> {
        if b.len() < HDR {
            return Ok(None);
        }
        if &b[..4] != MAGIC {
            return Err("not an oxmr connection request (bad magic)".into());
        }
        if b[4] != CM_VERSION {
            return Err(format!("handshake version {} (this oxmr speaks {CM_VERSION})", b[4]));
        }
        let kind = Kind::from_u8(b[5]).ok_or_else(|| format!("unknown handshake frame kind {}", b[5]))?;
        let len = u16::from_le_bytes([b[6], b[7]]) as usize;
        if len > CM_DATA_MAX {
            return Err(format!("cm_data of {len} bytes (at most {CM_DATA_MAX})"));
        }
        if b.len() < HDR + len {
            return Ok(None);
        }
        let raw = &b[8..36];
        let name = if raw.iter().all(|&x| x == 0) {
            None
        } else {
            Some(addr::parse(raw).ok_or_else(|| "a name that is not a sockaddr_in/in6".to_string())?)
        };
        if matches!(kind, Kind::Request | Kind::Accept) && name.is_none() {
            return Err(format!("{kind:?} without the sender's name"));
        }
        Ok(Some((Frame { kind, name, data: b[HDR..HDR + len].to_vec() }, HDR + len)))
    }
}

/// Why a handshake connection stopped.
#[derive(Debug)]
pub enum CmError {
    /// The peer closed it (end of stream).
    Closed,
    /// The peer sent something that is not a handshake frame.
    Bad(String),
    /// The kernel said so (a reset, ...).
    Io(io::Error),
}

impl std::fmt::Display for CmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmError::Closed => write!(f, "the peer closed the connection"),
            CmError::Bad(why) => write!(f, "{why}"),
            CmError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// A handshake connection (either side).
pub struct CmConn {
    stream: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
}

impl CmConn {
    /// Wrap a connected stream (made non-blocking).
    pub fn new(stream: TcpStream) -> io::Result<CmConn> {
        stream.set_nonblocking(true)?;
        let _ = stream.set_nodelay(true);
        let peer = stream.peer_addr()?;
        let local = stream.local_addr()?;
        Ok(CmConn { stream, peer, local, rbuf: Vec::new(), wbuf: Vec::new() })
    }

    /// The address at the other end.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// Our address on this connection (the one the peer reached).
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// The socket, readable when a frame (or the end) arrives, and whether
    /// bytes still wait to be written (which only a later poll writes).
    pub fn wake_fd(&self) -> (std::os::fd::RawFd, bool) {
        (std::os::fd::AsRawFd::as_raw_fd(&self.stream), !self.wbuf.is_empty())
    }

    /// Queue a frame and write what the socket takes now.
    pub fn send(&mut self, f: &Frame) -> Result<(), CmError> {
        self.wbuf.extend_from_slice(&f.encode());
        self.flush()
    }

    fn flush(&mut self) -> Result<(), CmError> {
        while !self.wbuf.is_empty() {
            match self.stream.write(&self.wbuf) {
                Ok(0) => return Err(CmError::Closed),
                Ok(n) => {
                    self.wbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(CmError::Io(e)),
            }
        }
        Ok(())
    }

    /// Write what is queued, then return the next frame that has arrived
    /// (Ok(None): nothing complete yet).
    pub fn poll(&mut self) -> Result<Option<Frame>, CmError> {
        self.flush()?;
        if let Some((f, n)) = Frame::decode(&self.rbuf).map_err(CmError::Bad)? {
            self.rbuf.drain(..n);
            return Ok(Some(f));
        }
        let mut chunk = [0u8; HDR + CM_DATA_MAX];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(CmError::Closed),
                Ok(n) => {
                    self.rbuf.extend_from_slice(&chunk[..n]);
                    if let Some((f, used)) = Frame::decode(&self.rbuf).map_err(CmError::Bad)? {
                        self.rbuf.drain(..used);
                        return Ok(Some(f));
                    }
                    // A peer can hold back at most one frame's worth.
                    if self.rbuf.len() > HDR + CM_DATA_MAX {
                        return Err(CmError::Bad("an oversized handshake frame".into()));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(CmError::Io(e)),
            }
        }
    }

    /// Send a last frame and close: writes for at most `wait` (a frame is a
    /// few hundred bytes on a fresh socket; this does not block in practice).
    pub fn finish(mut self, last: Option<&Frame>, wait: Duration) {
        if let Some(f) = last {
            self.wbuf.extend_from_slice(&f.encode());
        }
        if self.wbuf.is_empty() {
            return;
        }
        let _ = self.stream.set_nonblocking(false);
        let _ = self.stream.set_write_timeout(Some(wait));
        let _ = self.stream.write_all(&self.wbuf);
    }
}

/// A connect under way, on a non-blocking socket (no thread waits for it).
pub struct Dialing {
    /// The socket while it connects (None once handed out), or why the
    /// connect failed at once (handed out by the next `poll`, as a failure
    /// found later is: the EQ's error event either way).
    sock: Option<io::Result<TcpStream>>,
    since: Instant,
    timeout: Duration,
}

/// Start connecting to `to`, for at most `timeout`. Nothing waits: the
/// kernel connects (`sys::connect_start`), and `poll` says how it went.
pub fn dial(to: SocketAddr, timeout: Duration) -> Dialing {
    let sock = crate::sys::connect_start(&to).map(|(s, _)| s);
    Dialing { sock: Some(sock), since: Instant::now(), timeout }
}

impl Dialing {
    /// The connect's outcome, once there is one (the stream, connected;
    /// or the error: refused, unreachable, or TimedOut after `timeout`).
    pub fn poll(&mut self) -> Option<io::Result<TcpStream>> {
        // (take_error clears the socket's error: read once.)
        let failed = match self.sock.as_ref()? {
            Err(_) => None,
            Ok(s) => match s.take_error() {
                Ok(Some(e)) | Err(e) => Some(e),
                Ok(None) if s.peer_addr().is_ok() => None,
                Ok(None) if self.since.elapsed() >= self.timeout => {
                    Some(io::Error::new(io::ErrorKind::TimedOut, format!("not connected within {:?}", self.timeout)))
                }
                Ok(None) => return None,
            },
        };
        let r = self.sock.take()?;
        Some(match failed {
            Some(e) => Err(e),
            None => r,
        })
    }

    /// The socket to watch: a connect completes writable, and fails
    /// with an error (both wake an epoll that asks for writability).
    pub fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        match &self.sock {
            Some(Ok(s)) => Some(std::os::fd::AsRawFd::as_raw_fd(s)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_garbage_is_refused() {
        let n: SocketAddr = "127.0.0.1:4711".parse().unwrap();
        let f = Frame::new(Kind::Request, Some(n), &[7; 200]);
        let b = f.encode();
        assert_eq!(Frame::decode(&b[..b.len() - 1]).unwrap(), None, "incomplete");
        assert_eq!(Frame::decode(&b).unwrap(), Some((f, b.len())));
        let mut bad = b.clone();
        bad[0] = b'X';
        assert!(Frame::decode(&bad).is_err());
        let mut bad = b.clone();
        bad[4] = 9;
        assert!(Frame::decode(&bad).unwrap_err().contains("version 9"));
        let mut bad = b.clone();
        bad[5] = 77;
        assert!(Frame::decode(&bad).is_err());
        let mut bad = b.clone();
        bad[6..8].copy_from_slice(&1000u16.to_le_bytes());
        assert!(Frame::decode(&bad).is_err(), "oversized cm_data");
        let nameless = Frame::new(Kind::Accept, None, &[]).encode();
        assert!(Frame::decode(&nameless).is_err(), "an accept names its endpoint");
        let shut = Frame::new(Kind::Shutdown, None, &[]).encode();
        assert_eq!(Frame::decode(&shut).unwrap().unwrap().0.kind, Kind::Shutdown);
    }

    #[test]
    fn a_connection_carries_frames_both_ways_and_reports_its_end() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut d = dial(l.local_addr().unwrap(), Duration::from_secs(2));
        // (No thread waits for the connect: its socket, watched for
        // writability, says when it is done; the listener's kernel
        // completes it before any accept.)
        let ep = crate::sys::Epoll::new().unwrap();
        assert!(ep.watch((d.wake_fd().expect("a socket connecting"), true)));
        assert!(ep.readable_within(5000), "the connect's end wakes an epoll watching its socket");
        let (s, _) = l.accept().unwrap();
        let mut server = CmConn::new(s).unwrap();
        let mut client = loop {
            if let Some(r) = d.poll() {
                break CmConn::new(r.unwrap()).unwrap();
            }
            std::thread::yield_now();
        };
        let n: SocketAddr = "127.0.0.1:5".parse().unwrap();
        client.send(&Frame::new(Kind::Request, Some(n), b"hello")).unwrap();
        let got = loop {
            if let Some(f) = server.poll().unwrap() {
                break f;
            }
        };
        assert_eq!(got.data, b"hello");
        assert_eq!(got.name, Some(n));
        client.finish(Some(&Frame::new(Kind::Shutdown, None, &[])), Duration::from_secs(1));
        let got = loop {
            if let Some(f) = server.poll().unwrap() {
                break f;
            }
        };
        assert_eq!(got.kind, Kind::Shutdown);
        let end = loop {
            match server.poll() {
                Ok(None) => continue,
                other => break other,
            }
        };
        assert!(matches!(end, Err(CmError::Closed)));
    }

    #[test]
    fn a_connect_to_nothing_is_refused() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        drop(l);
        let mut d = dial(a, Duration::from_secs(2));
        let r = loop {
            if let Some(r) = d.poll() {
                break r;
            }
            std::thread::yield_now();
        };
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::ConnectionRefused);
    }
}
