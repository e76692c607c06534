//! Completion queue: the fid object over a `queues::cq::CqCore`, and the
//! manual progress its reads drive (see the core for ordering and
//! overflow).

use std::sync::Arc;

use oxmr_ffi as ffi;

use super::domain::Domain;
use super::wait_set::WaitSet;
use crate::error::{Error, Result};
use crate::queues::wait::deadline;
use oxmr_ffi::FidHeader;

pub use crate::queues::cq::{CqCore, CqEntry, CqError, CqFormat, Credit};

/// A completion queue.
#[repr(C)]
pub struct Cq {
    pub hdr: FidHeader<ffi::fid_cq>,
    pub domain: Arc<Domain>,
    /// The entries, which the engines complete into.
    pub core: Arc<CqCore>,
    /// Endpoints whose progress a read of this CQ drives.
    pub progress: super::progress::ProgressList,
    /// The wait set it signals (`FI_WAIT_SET`), held while the CQ lives.
    pub wait_set: Option<Arc<WaitSet>>,
}

impl std::ops::Deref for Cq {
    type Target = CqCore;
    fn deref(&self) -> &CqCore {
        &self.core
    }
}

impl Cq {
    /// Build a CQ from `fi_cq_attr` fields.
    pub fn new(hdr: FidHeader<ffi::fid_cq>, domain: Arc<Domain>, attr: &ffi::fi_cq_attr) -> Result<Self> {
        Ok(Cq { hdr, domain, core: Arc::new(CqCore::new(attr)?), progress: Default::default(), wait_set: None })
    }

    /// fi_cq_open: build, and join `wait_set` (`FI_WAIT_SET`: the boundary
    /// resolved `fi_cq_attr.wait_set`).
    pub fn open(
        hdr: FidHeader<ffi::fid_cq>,
        domain: Arc<Domain>,
        attr: &ffi::fi_cq_attr,
        wait_set: Option<Arc<WaitSet>>,
    ) -> Result<Arc<Self>> {
        let cq = Arc::new(Cq { wait_set: wait_set.clone(), ..Cq::new(hdr, domain, attr)? });
        if let Some(s) = wait_set {
            s.join_cq(&cq)?;
        }
        Ok(cq)
    }

    /// Reserve a slot for an operation about to be posted (-FI_EAGAIN when full).
    pub fn reserve(&self) -> Result<Credit> {
        self.core.reserve()
    }

    /// Pop up to `count` successes, handing each to `out(index, entry)`.
    /// -FI_EAGAIN when empty, -FI_EAVAIL when an error is at the head.
    #[inline(always)]
    pub fn read(&self, count: usize, out: impl FnMut(usize, &CqEntry)) -> Result<usize> {
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
        self.core.waiter.unpark();
        let waiting = self.core.pending();
        // As many entries as asked for wait already: hand them out without
        // progress (which on TCP reads every socket, an EAGAIN system call
        // between the application and a completion it could have at once;
        // the next read that finds fewer drives progress). fi_cq_read of
        // one entry while the next ones wait is what a pingpong does after
        // its send completed. Measured, alternating builds, 5 runs each:
        // fi_rdm_pingpong 8 B over TCP 5.55 -> 5.15 us on loopback, 5.65
        // -> 5.32 across veth; on shm, two-way fi_rma_bw 64 KiB 8.9 -> 9.8
        // GB/s, tagged 64 KiB 13.2 -> 13.6, 1 MiB unchanged.
        if count > 0 && waiting >= count {
            return self.core.pop(count, out);
        }
        self.progress.run_with(count == 0 || waiting == 0);
        self.core.pop(count, out)
    }

    /// fi_poll: drive progress as a read would, then whether anything (a
    /// completion or an error) waits to be read.
    pub fn poll_ready(&self) -> bool {
        self.core.waiter.unpark();
        // As in `read`: with completions waiting, the kept copies wait for
        // the next look at an empty queue.
        self.progress.run_with(self.core.pending() == 0);
        self.core.pending() > 0
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
        self.core.waiter.block_until(deadline, || {
            self.progress.run();
            if self.core.take_signal() {
                signaled = true;
                return true;
            }
            self.core.ready(threshold)
        });
        match self.read(count, out) {
            Err(e) if e.code() == ffi::FI_EAGAIN && !signaled => Err(Error::quiet(ffi::FI_EAGAIN)),
            r => r,
        }
    }

    /// fi_trywait: run progress; -FI_EAGAIN if anything is ready, else
    /// clear the fd and, when endpoints feed this CQ, tell them the
    /// application may sleep on it (they wake it on arrival; one that
    /// cannot arms the fd's tick: `Waiter::park`).
    pub fn trywait(&self) -> Result<()> {
        self.core.waiter.unpark();
        self.progress.run();
        self.core.waiter.clear();
        if self.core.ready(1) {
            self.core.waiter.notify();
            return Err(Error::quiet(ffi::FI_EAGAIN));
        }
        if !self.progress.is_empty() {
            self.core.waiter.park();
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
        let fabric = Arc::new(Fabric {
            hdr: crate::boundary::fabric::header(null, 0),
            name: "t".into(),
            config: Default::default(),
        });
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
    fn a_spare_reference_serves_its_own_cq_only_and_slots_count_as_ever() {
        use crate::queues::cq::SpareCq;
        let (cq, other) = (cq(3), cq(3));
        let spare = SpareCq::default();
        let base = Arc::strong_count(&cq.core);
        // A first reservation clones; its completion leaves the reference.
        let a = cq.core.reserve_from(&spare).unwrap();
        assert_eq!(Arc::strong_count(&cq.core), base + 1);
        a.complete_into(CqEntry { op_context: 1, ..Default::default() }, &spare);
        assert_eq!(Arc::strong_count(&cq.core), base + 1, "kept in the spare, not dropped");
        // The next takes it: no new reference.
        let b = cq.core.reserve_from(&spare).unwrap();
        assert_eq!(Arc::strong_count(&cq.core), base + 1, "the spare's reference reused");
        let c = cq.core.reserve_from(&spare).unwrap();
        assert_eq!(Arc::strong_count(&cq.core), base + 2, "an empty spare: a clone");
        assert_eq!(
            cq.core.reserve_from(&spare).err().map(Error::code),
            Some(ffi::FI_EAGAIN),
            "full: one queued, two held"
        );
        b.complete_into(CqEntry { op_context: 2, ..Default::default() }, &spare);
        // Another CQ's reservation does not take this one's reference.
        let d = other.core.reserve_from(&spare).unwrap();
        assert_eq!(Arc::strong_count(&cq.core), base + 1, "the mismatched spare dropped");
        drop(d);
        drop(c); // unused: its slot comes back
        let mut got = vec![];
        assert_eq!(cq.read(8, |_, e| got.push(e.op_context)).unwrap(), 2);
        assert_eq!(got, vec![1, 2]);
        // Every slot free again: three reservations fit, a fourth does not.
        let held = [cq.core.reserve_from(&spare).unwrap(), cq.core.reserve().unwrap(), cq.core.reserve().unwrap()];
        assert!(cq.core.reserve_from(&spare).is_err());
        drop(held);
        assert_eq!(
            other.read(8, |_, _| ()).err().map(Error::code),
            Some(ffi::FI_EAGAIN),
            "nothing reached the other CQ"
        );
    }

    #[test]
    fn slots_taken_and_given_back_by_many_threads_all_come_back() {
        // Posters reserve, complete or drop unused; one reader pops; at the
        // end every slot is free again (`used - freed` is 0).
        let cq = cq(64);
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let posters: Vec<_> = (0..3)
            .map(|t| {
                let cq = cq.clone();
                std::thread::spawn(move || {
                    let mut completed = 0;
                    for i in 0..20_000usize {
                        match cq.reserve() {
                            Ok(c) if (i + t) % 3 == 0 => drop(c),
                            Ok(c) => {
                                c.complete(CqEntry { op_context: i, ..Default::default() });
                                completed += 1;
                            }
                            Err(e) => assert_eq!(e.code(), ffi::FI_EAGAIN),
                        }
                    }
                    completed
                })
            })
            .collect();
        let reader = {
            let (cq, done) = (cq.clone(), done.clone());
            std::thread::spawn(move || {
                let mut n = 0;
                loop {
                    let finished = done.load(std::sync::atomic::Ordering::Acquire);
                    match cq.read(16, |_, _| ()) {
                        Ok(k) => n += k,
                        Err(_) if finished => return n,
                        Err(_) => std::thread::yield_now(),
                    }
                }
            })
        };
        let completed: usize = posters.into_iter().map(|p| p.join().unwrap()).sum();
        done.store(true, std::sync::atomic::Ordering::Release);
        assert_eq!(reader.join().unwrap(), completed, "every completion read once");
        let all: Vec<_> = (0..64).map(|_| cq.reserve().expect("every slot free again")).collect();
        assert_eq!(cq.reserve().err().map(Error::code), Some(ffi::FI_EAGAIN));
        drop(all);
        assert!(cq.reserve().is_ok());
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
