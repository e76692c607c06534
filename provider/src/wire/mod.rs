//! The wires: how frames reach a peer's endpoint.
//!
//! The protocol engine drives every wire through one interface: a
//! per-endpoint inbox (`protocol::inbox`, where frames arrive) and a
//! per-peer [`Link`] (where frames to one peer go). A link is dispatched
//! statically (an enum of wires, no dynamic dispatch on the data path) and
//! answers a send with a typed [`WireError`], never an errno to match.
//!
//! - `shm`: the same-host wire (shared-memory queues, CMA, the shared-copy
//!   offloads).
//!
//! Still shared-memory specific above this room (to be moved behind the
//! interface as the TCP wire arrives): the engine reads its shm inbox, job
//! table and copies (`protocol::engine::shared`) directly.

pub mod shm;

use std::io;
use std::net::SocketAddr;

/// Why a frame was not sent.
#[derive(Debug)]
pub enum WireError {
    /// The peer's queue (or socket buffer) is full: try again after
    /// progress (flow control, -FI_EAGAIN to the application).
    Full,
    /// The endpoint this link reached has closed (another may have opened
    /// at its address since).
    Closed,
    /// Anything else the kernel said.
    Io(io::Error),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Full => write!(f, "the peer's queue is full"),
            WireError::Closed => write!(f, "the peer's endpoint closed"),
            WireError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Why a link could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// Nothing listens at the address (the error, for the log line).
    Unreachable(io::Error),
    /// An endpoint was there, but its process exited without closing it.
    Dead { owner: u32 },
    /// The endpoint there speaks another version of the wire.
    Version { theirs: u32, ours: u32 },
}

/// Where a link stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// The peer's endpoint is there and reads its frames.
    Open,
    /// The peer closed its endpoint.
    Closed,
    /// The peer's process is gone (it exited without closing).
    Dead,
}

/// A link to one peer's endpoint.
pub enum Link {
    /// The peer's shared-memory queue.
    Shm(shm::region::Region),
}

impl Link {
    /// Open a link to the endpoint named `to`.
    pub fn open(to: &SocketAddr) -> Result<Link, OpenError> {
        let region = shm::region::Region::open(to).map_err(|e| {
            match e.get_ref().and_then(|x| x.downcast_ref::<shm::region::VersionMismatch>()) {
                Some(v) => OpenError::Version { theirs: v.theirs, ours: v.ours },
                None => OpenError::Unreachable(e),
            }
        })?;
        // (A queue left by a process that died without closing it: nobody
        // reads it, and anything pushed there would be lost.)
        if !region.closed() && !region.reachable() {
            return Err(OpenError::Dead { owner: region.owner() });
        }
        Ok(Link::Shm(region))
    }

    /// Send one frame, given in parts (header, body...): all or nothing.
    pub fn send(&self, parts: &[&[u8]]) -> Result<(), WireError> {
        match self {
            Link::Shm(r) => r.push(parts).map_err(|e| match e.raw_os_error() {
                Some(libc::EAGAIN) => WireError::Full,
                Some(libc::ECONNRESET) => WireError::Closed,
                _ => WireError::Io(e),
            }),
        }
    }

    /// The epoch of the endpoint this link reached (a new endpoint at the
    /// same address has another).
    pub fn epoch(&self) -> u32 {
        match self {
            Link::Shm(r) => r.epoch(),
        }
    }

    /// Whether the peer closed its endpoint (one load of its queue's
    /// header on shm: cheap enough for the data path; `state` also asks
    /// whether its process lives).
    pub fn closed(&self) -> bool {
        match self {
            Link::Shm(r) => r.closed(),
        }
    }

    /// Where the link stands now (a liveness check of the peer's process
    /// on shm: for the periodic sweep, not the data path).
    pub fn state(&self) -> LinkState {
        match self {
            Link::Shm(r) if r.closed() => LinkState::Closed,
            Link::Shm(r) if !r.reachable() => LinkState::Dead,
            Link::Shm(_) => LinkState::Open,
        }
    }

    /// Whether the peer says it has nothing of its own to do (a hint for
    /// sharing work with it: see the shared copies).
    pub fn idle(&self) -> bool {
        match self {
            Link::Shm(r) => r.idle(),
        }
    }

    /// The largest frame a send takes.
    pub fn max_frame(&self) -> usize {
        match self {
            Link::Shm(_) => shm::region::CELL_DATA,
        }
    }

    /// The process that owns the peer's endpoint, as the wire itself
    /// records it (shm: the owner in the peer's queue header), not as a
    /// message header claims it.
    pub fn owner(&self) -> u32 {
        match self {
            Link::Shm(r) => r.owner(),
        }
    }

    /// The peer's table of shared copies (an offload only the shm wire has).
    pub fn jobs(&self) -> shm::jobs::JobTable {
        match self {
            Link::Shm(r) => r.jobs(),
        }
    }
}

/// An endpoint's own queue, where its peers' frames arrive (shm: the
/// queue file named after its address).
pub struct Inbox(pub(crate) shm::region::Region);

impl Inbox {
    /// Make the inbox of the endpoint named `name`.
    pub fn create(name: &SocketAddr) -> io::Result<Inbox> {
        shm::region::Region::create(name).map(Inbox)
    }

    /// Where the inbox of `name` lives, for log lines.
    pub fn place(name: &SocketAddr) -> String {
        format!("the shared-memory queue /dev/shm{}", shm::region::path_for(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_of_another_wire_version_is_refused_naming_both() {
        let addr: SocketAddr = "127.0.0.1:7".parse().unwrap();
        let own = shm::region::Region::create(&addr).unwrap();
        let ours = match Link::open(&addr) {
            Ok(l) => {
                assert!(l.epoch() != 0 && !l.closed(), "same version: open");
                drop(l);
                // (The version this build speaks, read back from a refusal.)
                own.set_version_for_test(99);
                match Link::open(&addr) {
                    Err(OpenError::Version { theirs, ours }) => {
                        assert_eq!(theirs, 99);
                        ours
                    }
                    Err(e) => panic!("refused, but not for its version: {e:?}"),
                    Ok(_) => panic!("a queue of wire version 99 was opened"),
                }
            }
            Err(e) => panic!("a queue of this build's version was refused: {e:?}"),
        };
        assert_ne!(ours, 99);
        drop(own);
    }
}
