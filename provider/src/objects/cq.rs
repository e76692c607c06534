//! Completion queue.
//!
//! Entries are kept in one FIFO of successes and errors in completion
//! order. `read` returns successes up to the first error; an error at the
//! head makes `read` answer -FI_EAVAIL until `readerr` takes it.
//!
//! Overflow: a CQ never drops a completion. Operations reserve a slot
//! ([`Cq::reserve`]) before they are posted; when `size` completions are
//! queued or outstanding the post fails with -FI_EAGAIN (flow control), so
//! the queue can never hold more than `size` successes. Error completions
//! always get in (they are never refused or dropped).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use oxmr_ffi as ffi;

use super::domain::Domain;
use super::wait::{deadline, Waiter};
use crate::error::{Error, Result};
use crate::fail;
use crate::sys::SpinLock;
use oxmr_ffi::FidHeader;

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

/// A completion queue.
#[repr(C)]
pub struct Cq {
    pub hdr: FidHeader<ffi::fid_cq>,
    pub domain: Arc<Domain>,
    pub format: CqFormat,
    pub size: usize,
    /// FI_CQ_COND_THRESHOLD: fi_cq_sread's `cond` is a completion count
    /// (otherwise it is not read).
    pub threshold_cond: bool,
    waiter: Waiter,
    /// A spin lock (held for one push or pop; see `sys::SpinLock`).
    queue: SpinLock<VecDeque<Slot>>,
    /// Entries in `queue` (written under its lock): an empty poll, the
    /// common case, reads this instead of taking the lock.
    queued: AtomicUsize,
    /// Successes queued plus slots reserved by posted operations.
    used: AtomicUsize,
    signaled: AtomicBool,
    /// Endpoints whose progress a read of this CQ drives.
    pub progress: super::progress::ProgressList,
}

/// A reserved completion slot; gives the slot back if dropped unused.
pub struct Credit {
    cq: Arc<Cq>,
    used: bool,
}

impl Credit {
    /// Deliver the completion the slot was reserved for.
    pub fn complete(mut self, e: CqEntry) {
        self.used = true;
        self.cq.push(Slot::Ok(e));
    }
}

impl Drop for Credit {
    fn drop(&mut self) {
        if !self.used {
            self.cq.used.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Cq {
    /// Build a CQ from `fi_cq_attr` fields.
    pub fn new(hdr: FidHeader<ffi::fid_cq>, domain: Arc<Domain>, attr: &ffi::fi_cq_attr) -> Result<Self> {
        let format = CqFormat::from_c(attr.format)?;
        if attr.flags & !(ffi::FI_AFFINITY as u64) != 0 {
            return Err(fail!(ffi::FI_EINVAL, "unsupported fi_cq_attr flags {:#x}", attr.flags));
        }
        if !matches!(attr.wait_cond, ffi::FI_CQ_COND_NONE | ffi::FI_CQ_COND_THRESHOLD) {
            return Err(fail!(ffi::FI_EINVAL, "unknown fi_cq_attr wait_cond {}", attr.wait_cond));
        }
        let size = if attr.size == 0 { DEFAULT_SIZE } else { attr.size };
        Ok(Cq {
            hdr,
            domain,
            format,
            size,
            threshold_cond: attr.wait_cond == ffi::FI_CQ_COND_THRESHOLD,
            waiter: Waiter::new(attr.wait_obj)?,
            queue: SpinLock::new(VecDeque::new()),
            queued: AtomicUsize::new(0),
            used: AtomicUsize::new(0),
            signaled: AtomicBool::new(false),
            progress: Default::default(),
        })
    }

    /// Reserve a slot for an operation about to be posted (-FI_EAGAIN when full).
    pub fn reserve(self: &Arc<Self>) -> Result<Credit> {
        let mut cur = self.used.load(Ordering::Acquire);
        loop {
            if cur >= self.size {
                return Err(Error::quiet(ffi::FI_EAGAIN));
            }
            match self.used.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(Credit { cq: self.clone(), used: false }),
                Err(c) => cur = c,
            }
        }
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

    fn push(&self, s: Slot) {
        let mut q = self.queue.lock();
        q.push_back(s);
        self.queued.store(q.len(), Ordering::Release);
        drop(q);
        self.waiter.notify();
    }

    /// Pop up to `count` successes, handing each to `out(index, entry)`.
    /// -FI_EAGAIN when empty, -FI_EAVAIL when an error is at the head.
    pub fn read(&self, count: usize, mut out: impl FnMut(usize, &CqEntry)) -> Result<usize> {
        // Manual progress: the endpoints bound here move data now. While
        // completions wait here, the copies the engines kept for their
        // peers (RMA writes and rendezvous sends under the shared-copy
        // size, docs/architecture.md) wait for the next read: the
        // application reads these first and posts its next operations,
        // the work its peers wait for. Otherwise an application that
        // reads one completion per call serves one peer copy per
        // completion, and two processes writing to each other take
        // turns, both cores on one direction (two-way 64 KiB RMA writes,
        // traced). Messages are still handled (ACKs, a peer's request to
        // help with a shared copy), and the next read of an empty queue
        // serves the kept copies.
        self.progress.run_with(count == 0 || self.queued.load(Ordering::Acquire) == 0);
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
        drop(q);
        if n == 0 {
            return Err(Error::quiet(ffi::FI_EAGAIN));
        }
        self.used.fetch_sub(n, Ordering::AcqRel);
        Ok(n)
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

    fn ready(&self, threshold: usize) -> bool {
        let q = self.queue.lock();
        match q.front() {
            Some(Slot::Err(_)) => true,
            Some(Slot::Ok(_)) => q.len() >= threshold || q.iter().any(|s| matches!(s, Slot::Err(_))),
            None => false,
        }
    }

    /// Blocking read: waits up to `timeout_ms` (negative: forever) for
    /// `threshold` entries (or an error, or a signal).
    pub fn sread(
        &self,
        count: usize,
        threshold: usize,
        timeout_ms: i32,
        out: impl FnMut(usize, &CqEntry),
    ) -> Result<usize> {
        let threshold = threshold.clamp(1, count.max(1));
        let deadline = deadline(timeout_ms);
        let mut signaled = false;
        self.waiter.block_until(deadline, || {
            self.progress.run();
            if self.signaled.swap(false, Ordering::AcqRel) {
                signaled = true;
                return true;
            }
            self.ready(threshold)
        });
        match self.read(count, out) {
            Err(e) if e.code() == ffi::FI_EAGAIN && !signaled => Err(Error::quiet(ffi::FI_EAGAIN)),
            r => r,
        }
    }

    /// `fi_cq_signal`: wake one blocked (or the next) sread.
    pub fn signal(&self) {
        self.signaled.store(true, Ordering::Release);
        self.waiter.signal();
    }

    /// The pollable fd (`FI_GETWAIT`), if the wait object has one.
    pub fn wait_fd(&self) -> Option<i32> {
        self.waiter.fd()
    }

    /// fi_trywait: run progress; -FI_EAGAIN if anything is ready, else
    /// clear the fd and, when endpoints feed this CQ, arm its tick (peers
    /// cannot wake it: `Waiter::tick`).
    pub fn trywait(&self) -> Result<()> {
        self.progress.run();
        self.waiter.clear();
        if self.ready(1) {
            self.waiter.notify();
            return Err(Error::quiet(ffi::FI_EAGAIN));
        }
        if !self.progress.is_empty() {
            self.waiter.tick();
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::objects::fabric::Fabric;

    pub(crate) fn domain() -> Arc<Domain> {
        let null = std::ptr::null_mut();
        let fabric = Arc::new(Fabric { hdr: crate::boundary::fabric::header(null, 0), name: "t".into() });
        let info = crate::info::attrs::template(ffi::FI_EP_RDM);
        Arc::new(Domain::new(crate::boundary::domain::header(null), fabric, info).unwrap())
    }

    fn cq(size: usize) -> Arc<Cq> {
        let attr = ffi::fi_cq_attr { size, format: ffi::FI_CQ_FORMAT_TAGGED, ..Default::default() };
        Arc::new(Cq::new(crate::boundary::cq::header(std::ptr::null_mut()), domain(), &attr).unwrap())
    }

    #[test]
    fn overflow_is_flow_control_never_loss() {
        let cq = cq(2);
        let a = cq.reserve().unwrap();
        let b = cq.reserve().unwrap();
        assert_eq!(cq.reserve().err().map(Error::code), Some(ffi::FI_EAGAIN), "full: posting must wait");
        a.complete(CqEntry { op_context: 1, ..Default::default() });
        drop(b); // an operation that failed to post gives its slot back
        let c = cq.reserve().unwrap();
        c.complete(CqEntry { op_context: 2, ..Default::default() });
        let mut got = vec![];
        assert_eq!(cq.read(8, |_, e| got.push(e.op_context)).unwrap(), 2);
        assert_eq!(got, vec![1, 2]);
        assert_eq!(cq.read(8, |_, _| ()).err().map(Error::code), Some(ffi::FI_EAGAIN));
        cq.reserve().unwrap();
        cq.reserve().unwrap();
    }

    #[test]
    fn errors_keep_their_place_in_order() {
        let cq = cq(8);
        cq.reserve().unwrap().complete(CqEntry { op_context: 1, ..Default::default() });
        cq.push_error(CqError { op_context: 2, err: ffi::FI_ETRUNC as i32, ..Default::default() });
        cq.reserve().unwrap().complete(CqEntry { op_context: 3, ..Default::default() });
        let mut got = vec![];
        assert_eq!(cq.read(8, |_, e| got.push(e.op_context)).unwrap(), 1, "stops before the error");
        assert_eq!(cq.read(8, |_, _| ()).err().map(Error::code), Some(ffi::FI_EAVAIL));
        assert_eq!(cq.readerr().unwrap().op_context, 2);
        assert_eq!(cq.read(8, |_, e| got.push(e.op_context)).unwrap(), 1);
        assert_eq!(got, vec![1, 3]);
    }

    #[test]
    fn sread_threshold_and_threads() {
        let cq = cq(8);
        let cq2 = cq.clone();
        let h = std::thread::spawn(move || {
            for i in 0..3 {
                std::thread::sleep(std::time::Duration::from_millis(5));
                cq2.reserve().unwrap().complete(CqEntry { op_context: i, ..Default::default() });
            }
        });
        // Waits for 3 entries (the threshold), not just the first.
        let n = cq.sread(8, 3, 10_000, |_, _| ()).unwrap();
        h.join().unwrap();
        assert_eq!(n, 3);
    }
}
