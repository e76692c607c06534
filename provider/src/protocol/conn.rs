//! One FI_EP_MSG endpoint's connection: the handshake's state machine
//! (wire::cm carries its frames) and the events it gives.
//!
//! Connector: fi_connect dials the passive endpoint and sends a Request
//! (its data name, cm_data); an Accept (the acceptor's data name, cm_data)
//! makes it connected (FI_CONNECTED with that cm_data) and it answers Ack;
//! a Reject gives an FI_ECONNREFUSED error event with the reject's cm_data
//! as err_data. Acceptor: fi_endpoint with an FI_CONNREQ info holds the
//! request (`Offered`), fi_accept answers it, and the connector's Ack
//! makes it connected (FI_CONNECTED, no data). Either side's fi_shutdown
//! sends Shutdown and closes; the peer sees FI_SHUTDOWN (also when the
//! connection ends without one: its endpoint closed, its process died),
//! and so does the side that shut down (once per endpoint, as fabtests'
//! fi_cm_data expects). Failures during the handshake are error events:
//! refused (no listener, or rejected), timed out, reset.
//!
//! The passive side's part is [`Arrivals`] (connections accepted at a
//! passive endpoint's listener until their Request is read) and
//! [`Incoming`] (a Request, until fi_endpoint takes it or fi_reject
//! answers it).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use oxmr_ffi as ffi;

use crate::error::Result;
use crate::fail;
use crate::sys::WakeFd;
use crate::wire::cm::{self, CmConn, CmError, Dialing, Frame, Kind};
use crate::wire::Listener;

/// How long a last frame (reject, shutdown) may take to write.
const LAST_WRITE: Duration = Duration::from_secs(1);

/// A connection request that arrived: the connection it came on and the
/// connector's data name (where its endpoint's frames are sent).
pub struct Incoming {
    conn: CmConn,
    pub peer: SocketAddr,
}

impl Incoming {
    /// Our address on its connection (the one the connector reached).
    pub fn local(&self) -> SocketAddr {
        self.conn.local()
    }

    /// fi_reject: answer with a Reject carrying `data`, and close.
    pub fn reject(self, data: &[u8]) {
        self.conn.finish(Some(&Frame::new(Kind::Reject, None, data)), LAST_WRITE);
    }
}

/// Connections accepted at a passive endpoint's listener whose Request
/// has not arrived yet.
#[derive(Default)]
pub struct Arrivals {
    waiting: Vec<(CmConn, Instant)>,
    /// The job key connectors must prove before their request is believed
    /// (None: not authenticated).
    key: Option<crate::auth::JobKey>,
}

/// The most connections a passive endpoint holds whose request has not
/// come (past it, the oldest goes): each is a descriptor a stranger could
/// make it hold until `FI_OXMR_CM_TIMEOUT_MS`.
const ARRIVALS_MAX: usize = 1024;

impl Arrivals {
    /// Arrivals whose connectors must prove `key`.
    pub fn with_key(key: Option<crate::auth::JobKey>) -> Arrivals {
        Arrivals { waiting: Vec::new(), key }
    }

    /// The sockets whose readability (or writability, for one with bytes
    /// to write) moves these connections on, into `out`.
    pub fn wake_fds(&self, out: &mut Vec<WakeFd>) -> bool {
        out.extend(self.waiting.iter().map(|(c, _)| c.wake_fd()));
        true
    }

    /// Accept what the (non-blocking) listener has, read what has arrived,
    /// and return the complete requests with their cm_data. A connection
    /// that sends anything but a Request, or nothing for `timeout`, is
    /// closed with a log line.
    pub fn poll(&mut self, l: &Listener, timeout: Duration) -> Vec<(Incoming, Vec<u8>)> {
        for (from, c) in cm::accept(l, self.key.as_ref()) {
            match c {
                Ok(c) => {
                    if self.waiting.len() >= ARRIVALS_MAX {
                        let (old, _) = self.waiting.remove(0);
                        tracing::warn!(
                            "passive endpoint: {ARRIVALS_MAX} connections wait for their request; closing the oldest, from {}",
                            old.peer()
                        );
                    }
                    self.waiting.push((c, Instant::now()))
                }
                Err(e) => tracing::info!("passive endpoint: connection from {from} dropped: {e}"),
            }
        }
        let mut ready = Vec::new();
        let mut keep = Vec::new();
        for (mut c, since) in std::mem::take(&mut self.waiting) {
            match c.poll() {
                Ok(Some(Frame { kind: Kind::Request, name: Some(mut peer), data })) => {
                    if peer.ip().is_unspecified() {
                        peer.set_ip(c.peer().ip());
                    }
                    ready.push((Incoming { conn: c, peer }, data));
                }
                Ok(Some(f)) => tracing::warn!(
                    "passive endpoint: {} sent a {:?} frame before its connection request; connection closed",
                    c.peer(),
                    f.kind
                ),
                Ok(None) if since.elapsed() < timeout => keep.push((c, since)),
                Ok(None) => tracing::info!(
                    "passive endpoint: {} sent no connection request within {timeout:?}; connection closed",
                    c.peer()
                ),
                Err(e) => {
                    tracing::warn!("passive endpoint: connection from {} closed before a valid request: {e}", c.peer())
                }
            }
        }
        self.waiting = keep;
        ready
    }
}

enum Phase {
    Idle,
    /// Connector: the TCP connect is under way.
    Dialing {
        dial: Dialing,
        to: SocketAddr,
        data: Vec<u8>,
        since: Instant,
    },
    /// Connector: Request sent, waiting for Accept or Reject.
    Requested {
        conn: CmConn,
        since: Instant,
    },
    /// Acceptor: holds the request until fi_accept.
    Offered(Incoming),
    /// Acceptor: Accept sent, waiting for the Ack.
    Accepted {
        conn: CmConn,
        since: Instant,
    },
    Connected {
        conn: CmConn,
    },
    /// Shut down, refused or failed: for good (fi_connect once per endpoint).
    Down,
}

/// What the endpoint posts on its EQ.
#[derive(Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// FI_CONNECTED, with the peer's cm_data (none at the acceptor).
    Connected(Vec<u8>),
    /// FI_SHUTDOWN.
    Shutdown,
    /// An error event: a positive FI_E* and err_data.
    Error(i32, Vec<u8>),
}

/// The connection of one MSG endpoint.
pub struct Conn {
    phase: Phase,
    /// The job key this side proves on its handshake connection (set by
    /// the endpoint: `set_key`).
    key: Option<crate::auth::JobKey>,
    /// The peer's data name, once known (accept at the acceptor, the
    /// Accept frame at the connector).
    pub peer: Option<SocketAddr>,
    shutdown_posted: bool,
}

impl Default for Conn {
    fn default() -> Self {
        Conn { phase: Phase::Idle, key: None, peer: None, shutdown_posted: false }
    }
}

fn dial_error(e: &std::io::Error) -> i32 {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => ffi::FI_ECONNREFUSED as i32,
        std::io::ErrorKind::TimedOut => ffi::FI_ETIMEDOUT as i32,
        std::io::ErrorKind::HostUnreachable | std::io::ErrorKind::NetworkUnreachable => ffi::FI_EHOSTUNREACH as i32,
        _ => ffi::FI_ECONNREFUSED as i32,
    }
}

fn check_len(call: &str, data: &[u8]) -> Result<()> {
    if data.len() > cm::CM_DATA_MAX {
        return Err(fail!(
            ffi::FI_EINVAL,
            "{call}: {} bytes of cm_data; at most {} (FI_OPT_CM_DATA_SIZE)",
            data.len(),
            cm::CM_DATA_MAX
        ));
    }
    Ok(())
}

impl Conn {
    /// An acceptor's connection, from its FI_CONNREQ.
    pub fn offered(req: Incoming) -> Conn {
        Conn { peer: Some(req.peer), phase: Phase::Offered(req), key: None, shutdown_posted: false }
    }

    /// The socket whose readability (or writability: a connect under way,
    /// bytes to write) moves this connection on, into `out`; false while
    /// it has work no socket rings for (a connect that failed at once, its
    /// error event not yet posted).
    pub fn wake_fds(&self, out: &mut Vec<WakeFd>) -> bool {
        match &self.phase {
            Phase::Dialing { dial, .. } => match dial.wake_fd() {
                Some(fd) => {
                    out.push((fd, true));
                    true
                }
                None => false,
            },
            Phase::Requested { conn, .. } | Phase::Accepted { conn, .. } | Phase::Connected { conn } => {
                out.push(conn.wake_fd());
                true
            }
            _ => true,
        }
    }

    /// Whether events may still come (the EQ keeps driving it).
    pub fn watched(&self) -> bool {
        matches!(
            self.phase,
            Phase::Dialing { .. } | Phase::Requested { .. } | Phase::Accepted { .. } | Phase::Connected { .. }
        )
    }

    /// Data may go to the peer: accepted by us, or accept seen.
    pub fn usable(&self) -> bool {
        matches!(self.phase, Phase::Accepted { .. } | Phase::Connected { .. })
    }

    /// The job key fi_connect proves to the passive endpoint.
    pub fn set_key(&mut self, key: Option<crate::auth::JobKey>) {
        self.key = key;
    }

    /// fi_connect.
    pub fn connect(&mut self, to: SocketAddr, data: &[u8], timeout: Duration) -> Result<()> {
        check_len("fi_connect", data)?;
        if !matches!(self.phase, Phase::Idle) {
            return Err(fail!(
                ffi::FI_EISCONN,
                "fi_connect: this endpoint has connected (or tried) already; open a new endpoint for a new connection"
            ));
        }
        let dial = cm::dial(to, timeout);
        self.phase = Phase::Dialing { dial, to, data: data.to_vec(), since: Instant::now() };
        Ok(())
    }

    /// fi_accept: answer the held request with our data name.
    pub fn accept(&mut self, name: SocketAddr, data: &[u8]) -> Result<()> {
        check_len("fi_accept", data)?;
        let Phase::Offered(_) = &self.phase else {
            return Err(fail!(
                ffi::FI_EOPBADSTATE,
                "fi_accept: this endpoint holds no connection request; open it with the info of an FI_CONNREQ event"
            ));
        };
        let Phase::Offered(mut req) = std::mem::replace(&mut self.phase, Phase::Down) else { unreachable!() };
        if let Err(e) = req.conn.send(&Frame::new(Kind::Accept, Some(name), data)) {
            return Err(fail!(ffi::FI_ECONNABORTED, "fi_accept: the connector {} went away: {e}", req.peer));
        }
        self.phase = Phase::Accepted { conn: req.conn, since: Instant::now() };
        Ok(())
    }

    /// fi_shutdown: returns the local FI_SHUTDOWN to post (if not yet).
    pub fn shutdown(&mut self) -> Result<Option<CmEvent>> {
        match std::mem::replace(&mut self.phase, Phase::Down) {
            Phase::Requested { conn, .. } | Phase::Accepted { conn, .. } | Phase::Connected { conn } => {
                conn.finish(Some(&Frame::new(Kind::Shutdown, None, &[])), LAST_WRITE);
            }
            Phase::Down => {}
            Phase::Dialing { .. } => {}
            p @ (Phase::Idle | Phase::Offered(_)) => {
                self.phase = p;
                return Err(fail!(ffi::FI_ENOTCONN, "fi_shutdown: the endpoint is not connected"));
            }
        }
        Ok(self.shutdown_event())
    }

    fn shutdown_event(&mut self) -> Option<CmEvent> {
        if self.shutdown_posted {
            return None;
        }
        self.shutdown_posted = true;
        Some(CmEvent::Shutdown)
    }

    /// Move the handshake on; `name` is our data name (for the Request).
    pub fn progress(&mut self, name: SocketAddr, timeout: Duration) -> Option<CmEvent> {
        match std::mem::replace(&mut self.phase, Phase::Down) {
            Phase::Dialing { mut dial, to, data, since } => match dial.poll() {
                None => {
                    self.phase = Phase::Dialing { dial, to, data, since };
                    None
                }
                Some(Err(e)) => {
                    tracing::info!("fi_connect to {to}: {e}");
                    Some(CmEvent::Error(dial_error(&e), Vec::new()))
                }
                Some(Ok(st)) => {
                    let key = self.key.clone();
                    let sent = CmConn::new(st)
                        .map_err(CmError::Io)
                        .and_then(|c| c.with_key(key, cm::Role::Connector))
                        .and_then(|mut c| {
                            c.send(&Frame::new(Kind::Request, Some(name), &data))?;
                            Ok(c)
                        });
                    match sent {
                        Ok(conn) => {
                            self.phase = Phase::Requested { conn, since };
                            self.progress(name, timeout)
                        }
                        Err(e) => {
                            tracing::info!("fi_connect to {to}: {e}");
                            Some(CmEvent::Error(ffi::FI_ECONNRESET as i32, Vec::new()))
                        }
                    }
                }
            },
            Phase::Requested { mut conn, since } => match conn.poll() {
                Ok(None) if since.elapsed() < timeout => {
                    self.phase = Phase::Requested { conn, since };
                    None
                }
                Ok(None) => {
                    tracing::info!("fi_connect to {}: no answer within {timeout:?}", conn.peer());
                    Some(CmEvent::Error(ffi::FI_ETIMEDOUT as i32, Vec::new()))
                }
                Ok(Some(Frame { kind: Kind::Accept, name: Some(mut peer), data })) => {
                    if peer.ip().is_unspecified() {
                        peer.set_ip(conn.peer().ip());
                    }
                    if let Err(e) = conn.send(&Frame::new(Kind::Ack, None, &[])) {
                        tracing::info!("fi_connect to {}: lost after the accept: {e}", conn.peer());
                        return Some(CmEvent::Error(ffi::FI_ECONNRESET as i32, Vec::new()));
                    }
                    self.peer = Some(peer);
                    self.phase = Phase::Connected { conn };
                    Some(CmEvent::Connected(data))
                }
                Ok(Some(Frame { kind: Kind::Reject, data, .. })) => {
                    Some(CmEvent::Error(ffi::FI_ECONNREFUSED as i32, data))
                }
                Ok(Some(f)) => {
                    tracing::warn!("fi_connect to {}: a {:?} frame in answer; connection closed", conn.peer(), f.kind);
                    Some(CmEvent::Error(ffi::FI_ECONNABORTED as i32, Vec::new()))
                }
                Err(e) => {
                    tracing::info!("fi_connect to {}: {e} (is it a passive endpoint?)", conn.peer());
                    Some(CmEvent::Error(ffi::FI_ECONNRESET as i32, Vec::new()))
                }
            },
            Phase::Accepted { mut conn, since } => match conn.poll() {
                Ok(None) if since.elapsed() < timeout => {
                    self.phase = Phase::Accepted { conn, since };
                    None
                }
                Ok(None) => {
                    tracing::info!("fi_accept: {} did not confirm within {timeout:?}", conn.peer());
                    Some(CmEvent::Error(ffi::FI_ETIMEDOUT as i32, Vec::new()))
                }
                Ok(Some(Frame { kind: Kind::Ack, .. })) => {
                    self.phase = Phase::Connected { conn };
                    Some(CmEvent::Connected(Vec::new()))
                }
                Ok(Some(f)) => {
                    tracing::warn!("fi_accept: {} sent a {:?} frame; connection closed", conn.peer(), f.kind);
                    Some(CmEvent::Error(ffi::FI_ECONNABORTED as i32, Vec::new()))
                }
                Err(e) => {
                    tracing::info!("fi_accept: the connector {} went away: {e}", conn.peer());
                    Some(CmEvent::Error(ffi::FI_ECONNRESET as i32, Vec::new()))
                }
            },
            Phase::Connected { mut conn } => match conn.poll() {
                Ok(None) => {
                    self.phase = Phase::Connected { conn };
                    None
                }
                Ok(Some(Frame { kind: Kind::Shutdown, .. })) => self.shutdown_event(),
                Ok(Some(Frame { kind: Kind::Ack, .. })) => {
                    self.phase = Phase::Connected { conn };
                    None
                }
                Ok(Some(f)) => {
                    tracing::warn!("connection to {}: a {:?} frame after connecting; shut down", conn.peer(), f.kind);
                    self.shutdown_event()
                }
                Err(e) => {
                    tracing::info!("connection to {}: {e}; shut down", conn.peer());
                    self.shutdown_event()
                }
            },
            p => {
                self.phase = p;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(5);

    /// Drive `c` (and the passive side) until `c` gives an event.
    fn until_event(c: &mut Conn, name: SocketAddr, mut other: impl FnMut()) -> CmEvent {
        let start = Instant::now();
        while start.elapsed() < T {
            if let Some(e) = c.progress(name, T) {
                return e;
            }
            other();
        }
        panic!("no event within {T:?}");
    }

    /// The next request at `l`, while `c` (the connector) is driven.
    fn request(a: &mut Arrivals, l: &Listener, c: &mut Conn, name: SocketAddr) -> (Incoming, Vec<u8>) {
        let start = Instant::now();
        while start.elapsed() < T {
            assert_eq!(c.progress(name, T), None, "no event before the answer");
            if let Some(r) = a.poll(l, T).pop() {
                return r;
            }
        }
        panic!("no request within {T:?}");
    }

    #[test]
    fn reject_then_accept_ack_and_shutdown() {
        let l = Listener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let to = l.local_addr().unwrap();
        let (me, them): (SocketAddr, SocketAddr) = ("127.0.0.1:11".parse().unwrap(), "127.0.0.1:12".parse().unwrap());
        let mut arrivals = Arrivals::default();

        let mut c = Conn::default();
        c.connect(to, b"knock", T).unwrap();
        assert!(c.connect(to, b"", T).is_err(), "one connect per endpoint");
        let mut req = None;
        let ev = until_event(&mut c, me, || {
            if req.is_none() {
                if let Some(r) = arrivals.poll(&l, T).pop() {
                    assert_eq!(r.0.peer, me);
                    assert_eq!(r.1, b"knock");
                    r.0.reject(b"go away");
                    req = Some(());
                }
            }
        });
        assert_eq!(ev, CmEvent::Error(ffi::FI_ECONNREFUSED as i32, b"go away".to_vec()));
        assert!(!c.watched() && !c.usable());

        let mut c = Conn::default();
        c.connect(to, &[1; cm::CM_DATA_MAX], T).unwrap();
        let (inc, data) = request(&mut arrivals, &l, &mut c, me);
        assert_eq!(data, vec![1; cm::CM_DATA_MAX]);
        let mut acc = Conn::offered(inc);
        assert!(!acc.usable(), "usable only once accepted");
        acc.accept(them, b"welcome").unwrap();
        assert!(acc.usable());
        let ev = until_event(&mut c, me, || {});
        assert_eq!(ev, CmEvent::Connected(b"welcome".to_vec()));
        assert_eq!(c.peer, Some(them));
        assert_eq!(until_event(&mut acc, them, || {}), CmEvent::Connected(Vec::new()));
        assert_eq!(c.shutdown().unwrap(), Some(CmEvent::Shutdown), "our own FI_SHUTDOWN");
        assert_eq!(c.shutdown().unwrap(), None, "once");
        assert_eq!(until_event(&mut acc, them, || {}), CmEvent::Shutdown, "the peer's");
        assert!(!acc.usable());
        assert_eq!(acc.shutdown().unwrap(), None, "once for the peer too");
    }

    #[test]
    fn oversized_cm_data_is_refused_and_a_connect_to_nothing_is_an_error_event() {
        let mut c = Conn::default();
        let e = c.connect("127.0.0.1:1".parse().unwrap(), &[0; cm::CM_DATA_MAX + 1], T).unwrap_err();
        assert_eq!(e.code(), ffi::FI_EINVAL);
        let l = Listener::bind("127.0.0.1:0").unwrap();
        let to = l.local_addr().unwrap();
        drop(l);
        c.connect(to, b"", T).unwrap();
        let ev = until_event(&mut c, "127.0.0.1:11".parse().unwrap(), || {});
        assert_eq!(ev, CmEvent::Error(ffi::FI_ECONNREFUSED as i32, Vec::new()));
        assert_eq!(c.shutdown().unwrap(), Some(CmEvent::Shutdown));
    }
}
