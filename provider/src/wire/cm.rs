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
//! closed. With a job key, both sides prove it on the connection
//! (`CmConn::with_key`) before the connector's request goes out or is
//! handed up on the passive side.

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
    /// With a job key (docs/security.md): the connector's first frame, its
    /// nonce; the passive side's answer, its nonce and proof; the
    /// connector's proof. Consumed by `CmConn::poll`, never handed up.
    KeyHello = 6,
    KeyChallenge = 7,
    KeyProof = 8,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Request,
            2 => Kind::Accept,
            3 => Kind::Reject,
            4 => Kind::Ack,
            5 => Kind::Shutdown,
            6 => Kind::KeyHello,
            7 => Kind::KeyChallenge,
            8 => Kind::KeyProof,
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
    /// With a job key: the proof exchange, until both sides proved it.
    auth: Option<Box<Auth>>,
}

/// Which side of a handshake connection we are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// fi_connect's side: it opened the connection.
    Connector,
    /// The passive endpoint's side.
    Acceptor,
}

/// A connection's proof exchange with a job key: the connector sends its
/// nonce, the acceptor answers its own and a proof over both, the connector
/// checks it and answers its proof. No frame of the caller's is handed up
/// (acceptor) or sent (connector: `held`) before it is done.
struct Auth {
    key: crate::auth::JobKey,
    role: Role,
    mine: [u8; crate::auth::TAG_LEN],
    theirs: Option<[u8; crate::auth::TAG_LEN]>,
    done: bool,
    held: Vec<u8>,
}

const PROOF_ACCEPT: &[u8] = b"oxmr cm: the passive endpoint holds the job key";
const PROOF_CONNECT: &[u8] = b"oxmr cm: the connector holds the job key";

/// The connections the (non-blocking) listener `l` has waiting, each with
/// the address it came from, made a `CmConn` proving `key` (if any) as the
/// acceptor, or why it could not be; stops when none waits, or at an
/// accept error (with a log line).
pub fn accept(l: &super::Listener, key: Option<&crate::auth::JobKey>) -> Vec<(SocketAddr, Result<CmConn, CmError>)> {
    let mut out = Vec::new();
    loop {
        match l.accept() {
            Ok((st, from)) => out.push((
                from,
                CmConn::new(st).map_err(CmError::Io).and_then(|c| c.with_key(key.cloned(), Role::Acceptor)),
            )),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!("passive endpoint: accept failed: {e}");
                break;
            }
        }
    }
    out
}

impl CmConn {
    /// Wrap a connected stream (made non-blocking).
    pub fn new(stream: TcpStream) -> io::Result<CmConn> {
        stream.set_nonblocking(true)?;
        let _ = stream.set_nodelay(true);
        let peer = stream.peer_addr()?;
        let local = stream.local_addr()?;
        Ok(CmConn { stream, peer, local, rbuf: Vec::new(), wbuf: Vec::new(), auth: None })
    }

    /// The same connection, proving `key` (if any) as `role` before any
    /// frame of ours goes or any of the peer's is handed up.
    pub fn with_key(mut self, key: Option<crate::auth::JobKey>, role: Role) -> Result<CmConn, CmError> {
        let Some(key) = key else { return Ok(self) };
        let mine =
            crate::auth::nonce().ok_or_else(|| CmError::Bad("the kernel gave no random bytes for a nonce".into()))?;
        let auth = Auth { key, role, mine, theirs: None, done: false, held: Vec::new() };
        if role == Role::Connector {
            self.wbuf.extend_from_slice(&Frame::new(Kind::KeyHello, None, &mine).encode());
        }
        self.auth = Some(Box::new(auth));
        self.flush()?;
        Ok(self)
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

    /// Queue a frame and write what the socket takes now (a connector
    /// with a job key holds it until the passive side proved the key).
    pub fn send(&mut self, f: &Frame) -> Result<(), CmError> {
        match self.auth.as_mut().filter(|a| !a.done) {
            Some(a) => a.held.extend_from_slice(&f.encode()),
            None => self.wbuf.extend_from_slice(&f.encode()),
        }
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
    /// (Ok(None): nothing complete yet). With a job key, the proof
    /// exchange runs first; a peer that fails it, or sends anything else
    /// before it is done, is an error.
    pub fn poll(&mut self) -> Result<Option<Frame>, CmError> {
        loop {
            let Some(f) = self.poll_frame()? else { return Ok(None) };
            let auth_kind = matches!(f.kind, Kind::KeyHello | Kind::KeyChallenge | Kind::KeyProof);
            let Some(a) = self.auth.as_mut() else {
                if auth_kind {
                    return Err(CmError::Bad(
                        "the peer holds a job key and this endpoint has none: set the same FI_OXMR_AUTH_KEY (or auth_key) on every process".into(),
                    ));
                }
                return Ok(Some(f));
            };
            if a.done {
                if auth_kind {
                    return Err(CmError::Bad(format!("a {:?} frame after the proofs", f.kind)));
                }
                return Ok(Some(f));
            }
            let stranger = || {
                CmError::Bad(
                    "a peer that does not hold the job's key tried to connect (set the same FI_OXMR_AUTH_KEY, or auth_key, on every process)"
                        .into(),
                )
            };
            let tag = crate::auth::TAG_LEN;
            match (a.role, f.kind, a.theirs) {
                (Role::Acceptor, Kind::KeyHello, None) if f.data.len() == tag => {
                    let mut theirs = [0u8; crate::auth::TAG_LEN];
                    theirs.copy_from_slice(&f.data);
                    let proof = a.key.tag(PROOF_ACCEPT, &[&theirs, &a.mine]);
                    let mut body = a.mine.to_vec();
                    body.extend_from_slice(&proof);
                    a.theirs = Some(theirs);
                    self.wbuf.extend_from_slice(&Frame::new(Kind::KeyChallenge, None, &body).encode());
                    self.flush()?;
                }
                (Role::Acceptor, Kind::KeyProof, Some(theirs)) => {
                    if !a.key.verify(PROOF_CONNECT, &[&theirs, &a.mine], &f.data) {
                        return Err(stranger());
                    }
                    a.done = true;
                }
                (Role::Connector, Kind::KeyChallenge, None) if f.data.len() == 2 * tag => {
                    let (theirs, proof) = f.data.split_at(tag);
                    if !a.key.verify(PROOF_ACCEPT, &[&a.mine, theirs], proof) {
                        return Err(CmError::Bad(
                            "the passive endpoint does not hold this job's key (its proof failed): every process of the job needs the same FI_OXMR_AUTH_KEY (or auth_key)".into(),
                        ));
                    }
                    let mine = a.key.tag(PROOF_CONNECT, &[&a.mine, theirs]);
                    self.wbuf.extend_from_slice(&Frame::new(Kind::KeyProof, None, &mine).encode());
                    self.wbuf.append(&mut a.held);
                    a.done = true;
                    self.flush()?;
                }
                (Role::Connector, _, _) => {
                    return Err(CmError::Bad(
                        "the passive endpoint answered without proving a job key: it has none, and this endpoint has one (set the same FI_OXMR_AUTH_KEY on every process)".into(),
                    ))
                }
                _ => return Err(stranger()),
            }
        }
    }

    /// `poll` without the proof exchange: the next frame as it came.
    fn poll_frame(&mut self) -> Result<Option<Frame>, CmError> {
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

    fn keyed_pair(ck: Option<&str>, ak: Option<&str>) -> (CmConn, CmConn) {
        let key = |k: Option<&str>| k.map(|k| crate::auth::JobKey::new(k.as_bytes()).unwrap());
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let client = CmConn::new(c).unwrap().with_key(key(ck), Role::Connector).unwrap();
        let server = CmConn::new(s).unwrap().with_key(key(ak), Role::Acceptor).unwrap();
        (client, server)
    }

    /// Poll both until `side` (0 client, 1 server) yields a frame or an
    /// error, or 2 s pass (Ok(None)).
    fn run(pair: &mut (CmConn, CmConn), side: usize) -> Result<Option<Frame>, CmError> {
        let end = Instant::now() + Duration::from_secs(2);
        while Instant::now() < end {
            let other = if side == 0 { pair.1.poll() } else { pair.0.poll() };
            let _ = other;
            let r = if side == 0 { pair.0.poll() } else { pair.1.poll() };
            if !matches!(r, Ok(None)) {
                return r;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(None)
    }

    #[test]
    fn with_the_same_key_a_request_and_its_answer_cross_after_the_proofs() {
        let mut p = keyed_pair(Some("the job's key, 32 bytes long...."), Some("the job's key, 32 bytes long...."));
        let n: SocketAddr = "127.0.0.1:5".parse().unwrap();
        p.0.send(&Frame::new(Kind::Request, Some(n), b"hello")).unwrap();
        let got = run(&mut p, 1).unwrap().expect("the request");
        assert_eq!((got.kind, got.data.as_slice()), (Kind::Request, &b"hello"[..]), "proof frames are not handed up");
        p.1.send(&Frame::new(Kind::Accept, Some(n), b"yes")).unwrap();
        let got = run(&mut p, 0).unwrap().expect("the accept");
        assert_eq!((got.kind, got.data.as_slice()), (Kind::Accept, &b"yes"[..]));
    }

    #[test]
    fn a_connector_without_the_passive_sides_key_never_has_its_request_believed() {
        let n: SocketAddr = "127.0.0.1:5".parse().unwrap();
        // Another key: both sides refuse, each saying why.
        let mut p = keyed_pair(Some("one job's key, 32 bytes long...."), Some("the other job's key, 32 bytes..."));
        p.0.send(&Frame::new(Kind::Request, Some(n), b"hello")).unwrap();
        let r = run(&mut p, 0);
        assert!(matches!(&r, Err(CmError::Bad(why)) if why.contains("does not hold this job's key")), "{r:?}");
        let r = run(&mut p, 1);
        assert!(!matches!(r, Ok(Some(_))), "the passive side handed up nothing: {r:?}");
        // No key against a key: the request is refused, not handed up.
        let mut p = keyed_pair(None, Some("the job's key, 32 bytes long...."));
        p.0.send(&Frame::new(Kind::Request, Some(n), b"hello")).unwrap();
        let r = run(&mut p, 1);
        assert!(matches!(&r, Err(CmError::Bad(why)) if why.contains("does not hold the job's key")), "{r:?}");
        // A key against none: refused by the passive side.
        let mut p = keyed_pair(Some("the job's key, 32 bytes long...."), None);
        p.0.send(&Frame::new(Kind::Request, Some(n), b"hello")).unwrap();
        let r = run(&mut p, 1);
        assert!(matches!(&r, Err(CmError::Bad(why)) if why.contains("has none")), "{r:?}");
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
