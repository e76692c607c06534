//! The wires: how frames reach a peer's endpoint.
//!
//! The protocol engine drives every wire through one interface: a
//! per-endpoint [`Inbox`] (where frames arrive) and a per-peer [`Link`]
//! (where frames to one peer go, and through which the peer's memory is
//! copied). Both are dispatched statically (an enum of wires, no dynamic
//! dispatch on the data path); a send answers a typed [`WireError`], never
//! an errno to match, and a copy of the peer's memory either completes or
//! answers [`Copied::Push`] (the engine's PULL -> DATA -> ACK path).
//!
//! - `shm`: the same-host wire (shared-memory queues, CMA copies, and the
//!   shared copies offload, `shm::share`, which only shm links offer).
//! - `loopback` (tests only): in-process queues whose copies always push.

#[cfg(test)]
pub mod loopback;
pub mod shm;

use std::io;
use std::net::SocketAddr;

pub use shm::share::{Copies, SharedCopy, Span};

/// The largest frame any wire carries (the shm queue's cell): the
/// protocol sizes its inline payloads and batched answers by it.
pub(crate) const MAX_FRAME: usize = shm::region::CELL_DATA;

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

/// What a copy of the peer's memory did.
#[derive(Debug)]
pub enum Copied {
    /// This many bytes moved (all of them, unless the peer's buffers are
    /// shorter than they said).
    Done(usize),
    /// This wire cannot reach the peer's memory (shm: memory CMA cannot
    /// reach, such as device or secret memory; TCP: never): the side that
    /// owns it must push it (PULL -> DATA, or DATA chunks for a read).
    Push,
    /// The copy failed otherwise (the peer's process gone, ptrace rules).
    Failed(io::Error),
}

/// A link to one peer's endpoint.
pub enum Link {
    /// The peer's shared-memory queue.
    Shm(shm::region::Region),
    #[cfg(test)]
    Loop(std::sync::Arc<loopback::Queue>),
}

impl Link {
    /// Open a link to the endpoint named `to`.
    pub fn open(to: &SocketAddr) -> Result<Link, OpenError> {
        #[cfg(test)]
        if let Some(q) = loopback::Queue::find(to) {
            return Ok(Link::Loop(q));
        }
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
            #[cfg(test)]
            Link::Loop(q) => q.send(parts),
        }
    }

    /// Copy the peer's `remote` buffers into our `local` ones.
    pub fn read(&self, local: &[(usize, usize)], remote: &[(usize, usize)]) -> Copied {
        match self {
            Link::Shm(r) => copied(shm::cma::read_from(r.owner(), local, remote)),
            #[cfg(test)]
            Link::Loop(_) => Copied::Push,
        }
    }

    /// Copy our `local` buffers into the peer's `remote` ones.
    pub fn write(&self, local: &[(usize, usize)], remote: &[(usize, usize)]) -> Copied {
        match self {
            Link::Shm(r) => copied(shm::cma::write_to(r.owner(), local, remote)),
            #[cfg(test)]
            Link::Loop(_) => Copied::Push,
        }
    }

    /// The most iovs a side of one `read`/`write` takes in one go (more
    /// still work, in several calls).
    pub fn max_iovs(&self) -> usize {
        shm::cma::IOV_MAX
    }

    /// The epoch of the endpoint this link reached (a new endpoint at the
    /// same address has another).
    pub fn epoch(&self) -> u32 {
        match self {
            Link::Shm(r) => r.epoch(),
            #[cfg(test)]
            Link::Loop(q) => q.epoch(),
        }
    }

    /// Whether the peer closed its endpoint (one load of its queue's
    /// header on shm: cheap enough for the data path; `state` also asks
    /// whether its process lives).
    pub fn closed(&self) -> bool {
        match self {
            Link::Shm(r) => r.closed(),
            #[cfg(test)]
            Link::Loop(q) => q.closed(),
        }
    }

    /// Where the link stands now (a liveness check of the peer's process
    /// on shm: for the periodic sweep, not the data path).
    pub fn state(&self) -> LinkState {
        match self {
            Link::Shm(r) if r.closed() => LinkState::Closed,
            Link::Shm(r) if !r.reachable() => LinkState::Dead,
            Link::Shm(_) => LinkState::Open,
            #[cfg(test)]
            Link::Loop(q) if q.closed() => LinkState::Closed,
            #[cfg(test)]
            Link::Loop(_) => LinkState::Open,
        }
    }

    /// Whether the peer says it has nothing of its own to do (a hint for
    /// sharing work with it: see the shared copies).
    pub fn idle(&self) -> bool {
        match self {
            Link::Shm(r) => r.idle(),
            #[cfg(test)]
            Link::Loop(q) => q.idle(),
        }
    }

    /// The largest frame a send takes.
    pub fn max_frame(&self) -> usize {
        MAX_FRAME
    }

    /// The process that owns the peer's endpoint, as the wire itself
    /// records it (shm: the owner in the peer's queue header), not as a
    /// message header claims it: the process every copy reads or writes.
    pub fn owner(&self) -> u32 {
        match self {
            Link::Shm(r) => r.owner(),
            #[cfg(test)]
            Link::Loop(_) => std::process::id(),
        }
    }

    /// Whether the wire offers shared copies with this peer (shm).
    pub fn shares(&self) -> bool {
        matches!(self, Link::Shm(_))
    }

    /// The peer's table of shared copies, where the wire offers them (shm).
    pub fn jobs(&self) -> Option<shm::jobs::JobTable> {
        match self {
            Link::Shm(r) => Some(r.jobs()),
            #[cfg(test)]
            Link::Loop(_) => None,
        }
    }
}

fn copied(r: io::Result<usize>) -> Copied {
    match r {
        Ok(n) => Copied::Done(n),
        // (Memory CMA cannot reach: device/PFN-mapped, secret.)
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Copied::Push,
        Err(e) => Copied::Failed(e),
    }
}

/// An endpoint's own queue, where its peers' frames arrive (shm: the
/// queue file named after its address).
pub enum Inbox {
    Shm(shm::region::Region),
    #[cfg(test)]
    Loop(loopback::Inbox),
}

impl Inbox {
    /// Make the inbox of the endpoint named `name`.
    pub fn create(name: &SocketAddr) -> io::Result<Inbox> {
        shm::region::Region::create(name).map(Inbox::Shm)
    }

    /// Where the inbox of `name` lives, for log lines.
    pub fn place(name: &SocketAddr) -> String {
        format!("the shared-memory queue /dev/shm{}", shm::region::path_for(name))
    }

    /// The addresses of this host's endpoints on `port` (for the log line
    /// of a send that found nobody at its address).
    pub fn others_on_port(port: u16) -> Vec<String> {
        shm::region::endpoints_on_port(port)
    }

    /// This endpoint's epoch (a new one at the same address has another).
    pub fn epoch(&self) -> u32 {
        match self {
            Inbox::Shm(r) => r.epoch(),
            #[cfg(test)]
            Inbox::Loop(l) => l.epoch(),
        }
    }

    /// Whether a frame waits (one load on shm: for the empty poll).
    pub fn ready(&self) -> bool {
        match self {
            Inbox::Shm(r) => r.ready(),
            #[cfg(test)]
            Inbox::Loop(l) => l.ready(),
        }
    }

    /// Hand one frame to `f(frame, more)`, `more` saying whether another
    /// waits behind it; false when none waits. The frame is consumed even
    /// if `f` panics.
    pub fn pop(&mut self, f: impl FnOnce(&[u8], bool)) -> bool {
        match self {
            Inbox::Shm(r) => r.pop(f),
            #[cfg(test)]
            Inbox::Loop(l) => l.pop(f),
        }
    }

    /// (frames consumed, frames sent so far): everything sent before this
    /// call has been consumed once the first reaches the second.
    pub fn positions(&self) -> (u64, u64) {
        match self {
            Inbox::Shm(r) => r.positions(),
            #[cfg(test)]
            Inbox::Loop(l) => l.positions(),
        }
    }

    /// Tell peers whether we have work of our own waiting (see
    /// `Link::idle`).
    pub fn set_idle(&self, idle: bool) {
        match self {
            Inbox::Shm(r) => r.set_idle(idle),
            #[cfg(test)]
            Inbox::Loop(l) => l.set_idle(idle),
        }
    }

    /// The periodic repair of the queue (shm: skip a cell whose producer
    /// died before publishing it).
    pub fn unstick(&mut self) {
        match self {
            Inbox::Shm(r) => {
                r.unstick();
            }
            #[cfg(test)]
            Inbox::Loop(_) => {}
        }
    }

    /// Our shared copies, where the wire offers them (shm).
    pub fn copies(&self) -> Option<Copies> {
        match self {
            Inbox::Shm(r) => Some(Copies::new(r.jobs())),
            #[cfg(test)]
            Inbox::Loop(_) => None,
        }
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
