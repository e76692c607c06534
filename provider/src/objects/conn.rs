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

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use oxmr_ffi as ffi;

use super::pep::Incoming;
use crate::error::Result;
use crate::fail;
use crate::wire::cm::{self, CmConn, CmError, Dialing, Frame, Kind};

/// How long a last frame (reject, shutdown) may take to write.
const LAST_WRITE: Duration = Duration::from_secs(1);

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
    /// The peer's data name, once known (accept at the acceptor, the
    /// Accept frame at the connector).
    pub peer: Option<SocketAddr>,
    shutdown_posted: bool,
}

impl Default for Conn {
    fn default() -> Self {
        Conn { phase: Phase::Idle, peer: None, shutdown_posted: false }
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
        Conn { peer: Some(req.peer), phase: Phase::Offered(req), shutdown_posted: false }
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

    /// fi_connect.
    pub fn connect(&mut self, to: SocketAddr, data: &[u8], timeout: Duration) -> Result<()> {
        check_len("fi_connect", data)?;
        if !matches!(self.phase, Phase::Idle) {
            return Err(fail!(
                ffi::FI_EISCONN,
                "fi_connect: this endpoint has connected (or tried) already; open a new endpoint for a new connection"
            ));
        }
        let dial = cm::dial(to, timeout).map_err(|e| fail!(ffi::FI_EIO, "fi_connect: cannot start connecting: {e}"))?;
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
            Phase::Dialing { dial, to, data, since } => match dial.poll() {
                None => {
                    self.phase = Phase::Dialing { dial, to, data, since };
                    None
                }
                Some(Err(e)) => {
                    tracing::info!("fi_connect to {to}: {e}");
                    Some(CmEvent::Error(dial_error(&e), Vec::new()))
                }
                Some(Ok(st)) => {
                    let sent = CmConn::new(st).map_err(CmError::Io).and_then(|mut c| {
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
