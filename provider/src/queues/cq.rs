//! A completion queue's core: its entries, its slot credits and how a
//! read blocks. `objects::Cq` wraps it with its fid and the progress a read
//! drives; the engine completes operations into it.
//!
//! Entries are kept in one FIFO of successes and errors in completion
//! order. `pop` returns successes up to the first error; an error at the
//! head makes it answer -FI_EAVAIL until `readerr` takes it.
//!
//! Overflow: a CQ never drops a completion. Operations reserve a slot
//! ([`CqCore::reserve`]) before they are posted; when `size` completions are
//! queued or outstanding the post fails with -FI_EAGAIN (flow control), so
//! the queue can never hold more than `size` successes. Error completions
//! always get in (they are never refused or dropped).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use oxmr_ffi as ffi;

use super::wait::Waiter;
use crate::error::{Error, Result};
use crate::fail;
use crate::sys::SpinLock;

/// A successful completion, with every field any format can show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqEntry {
    pub op_context: usize,
    pub flags: u64,
    pub len: usize,
    pub buf: usize,
    pub data: u64,
    pub tag: u64,
    pub src: u64,
}

/// An error completion (`struct fi_cq_err_entry`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqError {
    pub op_context: usize,
    pub flags: u64,
    pub len: usize,
    pub buf: usize,
    pub data: u64,
    pub tag: u64,
    pub olen: usize,
    pub err: i32,
    pub prov_errno: i32,
    pub src: u64,
}

enum Slot {
    Ok(CqEntry),
    Err(CqError),
}

/// `enum fi_cq_format`, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqFormat {
    Context,
    Msg,
    Data,
    Tagged,
}

impl CqFormat {
    /// Decode; UNSPEC means CONTEXT.
    pub fn from_c(f: u32) -> Result<Self> {
        match f {
            ffi::FI_CQ_FORMAT_UNSPEC | ffi::FI_CQ_FORMAT_CONTEXT => Ok(CqFormat::Context),
            ffi::FI_CQ_FORMAT_MSG => Ok(CqFormat::Msg),
            ffi::FI_CQ_FORMAT_DATA => Ok(CqFormat::Data),
            ffi::FI_CQ_FORMAT_TAGGED => Ok(CqFormat::Tagged),
            other => Err(fail!(ffi::FI_EINVAL, "unknown CQ format {other}; use FI_CQ_FORMAT_CONTEXT/MSG/DATA/TAGGED")),
        }
    }

    /// Size of one entry in the application's buffer.
    pub fn entry_size(self) -> usize {
        match self {
            CqFormat::Context => size_of::<ffi::fi_cq_entry>(),
            CqFormat::Msg => size_of::<ffi::fi_cq_msg_entry>(),
            CqFormat::Data => size_of::<ffi::fi_cq_data_entry>(),
            CqFormat::Tagged => size_of::<ffi::fi_cq_tagged_entry>(),
        }
    }
}

/// Default depth when the application asks for size 0.
pub(crate) const DEFAULT_SIZE: usize = 1024;

/// A completion queue's entries and credits.
pub struct CqCore {
    pub format: CqFormat,
    pub size: usize,
    /// FI_CQ_COND_THRESHOLD: fi_cq_sread's `cond` is a completion count
    /// (otherwise it is not read).
    pub threshold_cond: bool,
    /// How a blocking read sleeps, and the fd `FI_GETWAIT` hands out.
    pub waiter: Waiter,
    /// A spin lock (held for one push or pop; see `sys::SpinLock`).
    queue: SpinLock<VecDeque<Slot>>,
    /// Entries in `queue` (written under its lock): an empty poll, the
    /// common case, reads this instead of taking the lock.
    queued: AtomicUsize,
    /// Slots ever taken: successes queued plus slots reserved by posted
    /// operations, counted up only (locked adds: several threads post).
    used: AtomicUsize,
    /// Slots ever given back (read successes, unused credits), counted up
    /// only, and written only under `queue`'s lock, so a load and a store
    /// (no locked instruction on the read path); `used - freed` is the
    /// queue's occupancy. A reservation that reads an older value only
    /// sees the queue fuller than it is.
    freed: AtomicUsize,
    signaled: AtomicBool,
}

/// A reserved completion slot; gives the slot back if dropped unused.
/// It holds its CQ (None only once completed): an operation's credit can
/// outlive everything else that holds the CQ (an endpoint closed with
/// receives posted).
pub struct Credit {
    cq: Option<Arc<CqCore>>,
}

/// A spare reference to a CQ, kept by whoever posts operations against it
/// (an engine, one per direction): a completed credit's reference goes
/// back there (`Credit::complete_into`) and the next reservation takes it
/// (`CqCore::reserve_from`), so that a posted operation and its completion
/// move no reference count (each move is a locked instruction, ~7 ns on
/// this project's VM: two of the six a completion took). Anything else
/// is the usual clone and drop.
pub type SpareCq = std::cell::Cell<Option<Arc<CqCore>>>;

impl Credit {
    /// Deliver the completion the slot was reserved for.
    pub fn complete(self, e: CqEntry) {
        drop(self.deliver(e));
    }

    /// `complete`, the credit's reference to its CQ kept in `spare` for
    /// the next reservation (`CqCore::reserve_from`).
    #[inline(always)]
    pub fn complete_into(self, e: CqEntry, spare: &SpareCq) {
        if let Some(cq) = self.deliver(e) {
            // (One already there goes: a burst of completions keeps one.)
            drop(spare.replace(Some(cq)));
        }
    }

    #[inline(always)]
    fn deliver(mut self, e: CqEntry) -> Option<Arc<CqCore>> {
        let cq = self.cq.take();
        if let Some(c) = &cq {
            c.push(Slot::Ok(e));
        }
        cq
    }
}

impl Drop for Credit {
    fn drop(&mut self) {
        if let Some(c) = &self.cq {
            c.give_back(1);
        }
    }
}

impl CqCore {
    /// Build from `fi_cq_attr` fields.
    pub fn new(attr: &ffi::fi_cq_attr) -> Result<Self> {
        let format = CqFormat::from_c(attr.format)?;
        if attr.flags & !(ffi::FI_AFFINITY as u64) != 0 {
            return Err(fail!(ffi::FI_EINVAL, "unsupported fi_cq_attr flags {:#x}", attr.flags));
        }
        if !matches!(attr.wait_cond, ffi::FI_CQ_COND_NONE | ffi::FI_CQ_COND_THRESHOLD) {
            return Err(fail!(ffi::FI_EINVAL, "unknown fi_cq_attr wait_cond {}", attr.wait_cond));
        }
        let size = if attr.size == 0 { DEFAULT_SIZE } else { attr.size };
        Ok(CqCore {
            format,
            size,
            threshold_cond: attr.wait_cond == ffi::FI_CQ_COND_THRESHOLD,
            waiter: Waiter::new(attr.wait_obj)?,
            queue: SpinLock::new(VecDeque::new()),
            queued: AtomicUsize::new(0),
            used: AtomicUsize::new(0),
            freed: AtomicUsize::new(0),
            signaled: AtomicBool::new(false),
        })
    }

    /// Reserve a slot for an operation about to be posted (-FI_EAGAIN when full).
    pub fn reserve(self: &Arc<Self>) -> Result<Credit> {
        self.take_slot()?;
        Ok(Credit { cq: Some(self.clone()) })
    }

    /// `reserve`, with the reference to this CQ that `spare` keeps, if it
    /// keeps one (`SpareCq`), instead of a new one.
    #[inline]
    pub fn reserve_from(self: &Arc<Self>, spare: &SpareCq) -> Result<Credit> {
        self.take_slot()?;
        let cq = match spare.take() {
            Some(c) if Arc::ptr_eq(&c, self) => c,
            other => {
                drop(other);
                self.clone()
            }
        };
        Ok(Credit { cq: Some(cq) })
    }

    #[inline]
    fn take_slot(&self) -> Result<()> {
        let mut cur = self.used.load(Ordering::Acquire);
        loop {
            if cur.wrapping_sub(self.freed.load(Ordering::Acquire)) >= self.size {
                return Err(Error::quiet(ffi::FI_EAGAIN));
            }
            match self.used.compare_exchange_weak(cur, cur.wrapping_add(1), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(c) => cur = c,
            }
        }
    }

    /// A slot taken whether or not the queue has room (never refused,
    /// counted like the others): for a message that arrived into a
    /// multi-receive buffer, which cannot be refused (as
    /// `push_unsolicited`); the buffer itself reserved one when posted.
    pub fn reserve_always(self: &Arc<Self>) -> Credit {
        self.used.fetch_add(1, Ordering::AcqRel);
        Credit { cq: Some(self.clone()) }
    }

    /// Entries (successes and errors) waiting to be read.
    pub fn pending(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Queue a completion nobody reserved a slot for (remote CQ data at an
    /// RMA target): never refused, counted like the others.
    pub fn push_unsolicited(&self, e: CqEntry) {
        self.used.fetch_add(1, Ordering::AcqRel);
        self.push(Slot::Ok(e));
    }

    /// Queue an error completion (never refused).
    pub fn push_error(&self, e: CqError) {
        self.push(Slot::Err(e));
    }

    #[inline(always)]
    fn push(&self, s: Slot) {
        let mut q = self.queue.lock();
        q.push_back(s);
        self.queued.store(q.len(), Ordering::Release);
        drop(q);
        self.waiter.notify();
    }

    /// Pop up to `count` successes, handing each to `out(index, entry)`
    /// (no progress: `objects::Cq::read` drives it first).
    /// -FI_EAGAIN when empty, -FI_EAVAIL when an error is at the head.
    #[inline(always)]
    pub fn pop(&self, count: usize, mut out: impl FnMut(usize, &CqEntry)) -> Result<usize> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return Err(Error::quiet(ffi::FI_EAGAIN));
        }
        let mut q = self.queue.lock();
        let mut n = 0;
        while n < count {
            match q.front() {
                Some(Slot::Ok(e)) => {
                    out(n, e);
                    q.pop_front();
                    n += 1;
                }
                Some(Slot::Err(_)) if n == 0 => return Err(Error::quiet(ffi::FI_EAVAIL)),
                _ => break,
            }
        }
        self.queued.store(q.len(), Ordering::Release);
        // (Under the lock: `freed`'s only writers hold it.)
        self.freed.store(self.freed.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
        drop(q);
        if n == 0 {
            return Err(Error::quiet(ffi::FI_EAGAIN));
        }
        Ok(n)
    }

    /// Give back `n` slots not used (a credit dropped unused).
    fn give_back(&self, n: usize) {
        let _q = self.queue.lock();
        self.freed.store(self.freed.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
    }

    /// Pop the error at the head (-FI_EAGAIN if the head is not an error).
    pub fn readerr(&self) -> Result<CqError> {
        let mut q = self.queue.lock();
        match q.front() {
            Some(Slot::Err(e)) => {
                let e = *e;
                q.pop_front();
                self.queued.store(q.len(), Ordering::Release);
                Ok(e)
            }
            _ => Err(Error::quiet(ffi::FI_EAGAIN)),
        }
    }

    /// Whether a blocking read for `threshold` entries may return: an error
    /// is queued, or that many entries are.
    pub fn ready(&self, threshold: usize) -> bool {
        let q = self.queue.lock();
        match q.front() {
            Some(Slot::Err(_)) => true,
            Some(Slot::Ok(_)) => q.len() >= threshold || q.iter().any(|s| matches!(s, Slot::Err(_))),
            None => false,
        }
    }

    /// `fi_cq_signal`: wake one blocked (or the next) sread.
    pub fn signal(&self) {
        self.signaled.store(true, Ordering::Release);
        self.waiter.signal();
    }

    /// Whether `signal` was called since the last look (and forget it).
    pub fn take_signal(&self) -> bool {
        self.signaled.swap(false, Ordering::AcqRel)
    }

    /// The pollable fd (`FI_GETWAIT`), if the wait object has one.
    pub fn wait_fd(&self) -> Option<i32> {
        self.waiter.fd()
    }
}
