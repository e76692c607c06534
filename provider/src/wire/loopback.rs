//! An in-process wire, for tests: endpoints of one process reach each
//! other through frame queues in memory, so the protocol engine's
//! matching, truncation, RMA checks, error completions and peer failure
//! are tested in one process, fast, without /dev/shm files or child
//! processes. Its copies of remote memory always answer "push", so every
//! rendezvous send and RMA takes the PULL -> DATA -> ACK path that the TCP
//! wire uses for every large transfer. It is built for tests only: no
//! application can reach it.

use crate::sys::LockExt;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Proof, Props, Wire, WireError};

/// What the loopback wire is: shm's frames and proof (so the engine's
/// same-host rules are the ones tested), copies that always push, and no
/// eager limit of its own (the endpoint's, FI_OXMR_SHM_EAGER_MAX, holds).
pub(crate) const PROPS: Props = Props {
    wire: Wire::Shm,
    name: "loopback",
    max_frame: super::FRAME_FLOOR,
    eager_max: 0,
    eager_setting: "FI_OXMR_SHM_EAGER_MAX",
    buffers: false,
    spreads: false,
    reaches_memory: false,
    streams_writes: false,
    shares: false,
    proof: Proof::Owner,
};

/// Frames a queue holds before a send to it answers `Full`.
pub(crate) const DEPTH: usize = 64;

/// One endpoint's frames, shared by its inbox and every link to it.
pub struct Queue {
    frames: Mutex<VecDeque<Vec<u8>>>,
    closed: AtomicBool,
    idle: AtomicBool,
    epoch: u32,
    /// Frames pushed and popped so far (`Inbox::positions`).
    pushed: AtomicU64,
    popped: AtomicU64,
}

/// The open queues of this process, by address.
static QUEUES: Mutex<Vec<(SocketAddr, Arc<Queue>)>> = Mutex::new(Vec::new());

fn queues() -> MutexGuard<'static, Vec<(SocketAddr, Arc<Queue>)>> {
    QUEUES.lock_ok()
}

impl Queue {
    fn frames(&self) -> MutexGuard<'_, VecDeque<Vec<u8>>> {
        self.frames.lock_ok()
    }

    /// The open queue at `addr`, if an inbox there is open.
    pub fn find(addr: &SocketAddr) -> Option<Arc<Queue>> {
        queues().iter().find(|(a, _)| a == addr).map(|(_, q)| q.clone())
    }

    /// Send one frame in parts: all or nothing.
    pub fn send(&self, parts: &[&[u8]]) -> Result<(), WireError> {
        if self.closed() {
            return Err(WireError::Closed);
        }
        let mut f = self.frames();
        if f.len() >= DEPTH {
            return Err(WireError::Full);
        }
        f.push_back(parts.concat());
        self.pushed.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Frames waiting to be popped.
    pub fn waiting(&self) -> usize {
        self.frames().len()
    }

    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub fn idle(&self) -> bool {
        self.idle.load(Ordering::Relaxed)
    }

    pub fn epoch(&self) -> u32 {
        self.epoch
    }
}

/// An endpoint's inbox on the loopback wire.
pub struct Inbox {
    addr: SocketAddr,
    q: Arc<Queue>,
}

impl Inbox {
    /// The inbox at `addr` (in use while another one there is open).
    pub fn create(addr: &SocketAddr) -> io::Result<Inbox> {
        let mut all = queues();
        if all.iter().any(|(a, _)| a == addr) {
            return Err(io::Error::new(io::ErrorKind::AddrInUse, format!("a loopback inbox at {addr} is open")));
        }
        let q = Arc::new(Queue {
            frames: Mutex::new(VecDeque::new()),
            closed: AtomicBool::new(false),
            idle: AtomicBool::new(false),
            epoch: crate::sys::random_u32().max(1),
            pushed: AtomicU64::new(0),
            popped: AtomicU64::new(0),
        });
        all.push((*addr, q.clone()));
        Ok(Inbox { addr: *addr, q })
    }

    pub fn epoch(&self) -> u32 {
        self.q.epoch
    }

    pub fn ready(&self) -> bool {
        !self.q.frames().is_empty()
    }

    /// Pop one frame into `f(frame, more)`; false when empty.
    pub fn pop(&mut self, f: impl FnOnce(&[u8], bool)) -> bool {
        let (frame, more) = {
            let mut fr = self.q.frames();
            let Some(frame) = fr.pop_front() else { return false };
            (frame, !fr.is_empty())
        };
        self.q.popped.fetch_add(1, Ordering::Release);
        f(&frame, more);
        true
    }

    /// (frames popped, frames pushed), as `shm::region::Region::positions`.
    pub fn positions(&self) -> (u64, u64) {
        (self.q.popped.load(Ordering::Acquire), self.q.pushed.load(Ordering::Acquire))
    }

    pub fn set_idle(&self, idle: bool) {
        self.q.idle.store(idle, Ordering::Relaxed);
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        self.q.closed.store(true, Ordering::Release);
        queues().retain(|(a, q)| !(a == &self.addr && Arc::ptr_eq(q, &self.q)));
    }
}
