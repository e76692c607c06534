//! Shared copies: a large transfer copied by both processes at once.
//!
//! A single `process_vm_readv` runs on one core while the peer, which is
//! waiting for the same transfer, spins on another. A *job* splits the
//! transfer into chunks that both sides claim from one word in the
//! owner's region, the owner from the front and the peer from the back (so
//! each side copies the same part of a buffer that is sent again, and its
//! cache lines stay with that side): the owner (the receiver of a send, the target of an
//! RMA, which has already matched or checked the access) publishes the
//! job with its own buffers and asks the peer to help (a CTS message); each
//! side copies the chunks it claims with `process_vm_readv/writev`, and the
//! owner completes the transfer once every claimed chunk is settled (it
//! waits for at most the one chunk the peer is copying). The owner never
//! waits for help: a peer that is busy elsewhere just claims nothing, and
//! the owner copies every chunk itself.
//!
//! A slot is reused only after its job is over; every claim compares the
//! generation the helper was told, so a late helper can never copy into a
//! later job's buffers. All fields are atomics: a helper may read a slot
//! while its owner rewrites it for the next job (it then sees a new
//! generation and stops).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use super::region::Mapping;

/// Job slots in a region (a receiver-owned job ends within the progress
/// call that starts it, or soon after when stalled or left open; a sender
/// job's offer holds its slot until its receive is posted, so offers take
/// at most half; more than one slot lets a late helper's generation check
/// meet a slot that has moved on rather than one being rewritten).
pub(crate) const JOBS: usize = 8;
/// The most owner-side iovs a job can describe (more: no shared copy).
pub(crate) const JOB_IOVS: usize = 28;

/// One job, in the owner's region.
#[repr(C, align(128))]
pub struct JobSlot {
    /// `gen << 32 | back << 16 | front`: chunks `front..back` are
    /// unclaimed; the owner takes `front`, the helper `back - 1`.
    claim: AtomicU64,
    /// Chunks settled so far by either side (low 16 bits) and, of them,
    /// the ones that could not be copied (high 16 bits; the owner then
    /// redoes the job): one word, so one settle's result tells its side
    /// everything (once the last chunk is settled the owner may reuse the
    /// slot, so nothing in it may be read after).
    settled: AtomicU32,
    _unused: u32,
    total: AtomicU64,
    chunk: AtomicU64,
    nchunks: AtomicU32,
    /// 1: the helper writes its buffers into the owner's (send, RMA
    /// write); 0: the helper reads the owner's into its own (RMA read).
    helper_writes: AtomicU32,
    niov: AtomicU32,
    _pad: u32,
    iovs: [[AtomicU64; 2]; JOB_IOVS],
}

/// What a helper learns from a slot.
pub struct JobView {
    pub total: usize,
    pub chunk: usize,
    pub nchunks: u32,
    pub helper_writes: bool,
    /// The owner's buffers (addresses in the owner's process).
    pub iovs: Vec<(usize, usize)>,
}

/// The job table of a mapped region (own or a peer's). It holds the
/// mapping, so the slots stay mapped as long as the table exists.
#[derive(Clone)]
pub struct JobTable {
    /// Held, never read: it keeps `slots` mapped.
    _map: Arc<Mapping>,
    slots: *const JobSlot,
}

// SAFETY: the slots are atomics in process-shared memory that `map` keeps
// mapped.
unsafe impl Send for JobTable {}

/// The most chunks a job has (16-bit halves of the claim word).
pub(crate) const MAX_CHUNKS: usize = 0xffff;
/// One failed chunk in `JobSlot::settled`.
const FAILED: u32 = 1 << 16;

/// Which chunk a claim got, with its byte range.
pub fn chunk_range(total: usize, chunk: usize, k: u32) -> (usize, usize) {
    let off = k as usize * chunk;
    (off, chunk.min(total - off))
}

/// Copy chunk `k` of a `total`-byte job cut in `chunk`-byte pieces between
/// our buffers `local` and the other process's `remote` (pid `pid`):
/// reading from it (`read`) or writing into it. True when every byte moved.
pub fn copy_chunk(
    pid: u32,
    read: bool,
    local: &[(usize, usize)],
    remote: &[(usize, usize)],
    total: usize,
    chunk: usize,
    k: u32,
) -> bool {
    // (A chunk past the end: a claim word someone else wrote wrongly.)
    if (k as usize).saturating_mul(chunk) >= total {
        return false;
    }
    let (off, len) = chunk_range(total, chunk, k);
    use super::cma;
    // (On the stack in the common case: a chunk is on the critical path
    // of a lone transfer.)
    let (mut lb, mut rb) = ([(0, 0); crate::mr::local::STACK_IOVS], [(0, 0); crate::mr::local::STACK_IOVS]);
    let (mut lv, mut rv) = (Vec::new(), Vec::new());
    let l = crate::mr::local::slice_or_spill(local, off, len, &mut lb, &mut lv);
    let r = crate::mr::local::slice_or_spill(remote, off, len, &mut rb, &mut rv);
    let got = if read { cma::read_from(pid, l, r) } else { cma::write_to(pid, l, r) };
    matches!(got, Ok(g) if g == len)
}

impl JobTable {
    /// The table at byte `at` of `map` (JOBS slots must fit there).
    pub(super) fn new(map: Arc<Mapping>, at: usize) -> JobTable {
        const { assert!(JOBS * size_of::<JobSlot>() < super::region::REGION_SIZE) };
        // SAFETY: `at` is the region layout's JOBS_AT, inside the mapping.
        let slots = unsafe { map.base().add(at) } as *const JobSlot;
        JobTable { _map: map, slots }
    }

    fn slot(&self, i: u32) -> &JobSlot {
        // SAFETY: index < JOBS; the slots lie inside the mapping that
        // `self._map` keeps alive.
        unsafe { &*self.slots.add(i as usize % JOBS) }
    }

    /// Owner: publish job `gen` in slot `i`. False when the buffers take
    /// more iovs than a slot holds.
    pub fn open(
        &self,
        i: u32,
        gen: u32,
        total: usize,
        chunk: usize,
        helper_writes: bool,
        iovs: &[(usize, usize)],
    ) -> bool {
        if iovs.len() > JOB_IOVS || chunk == 0 || total.div_ceil(chunk) > MAX_CHUNKS {
            return false;
        }
        let nchunks = total.div_ceil(chunk) as u64;
        let s = self.slot(i);
        s.total.store(total as u64, Ordering::Relaxed);
        s.chunk.store(chunk as u64, Ordering::Relaxed);
        s.nchunks.store(total.div_ceil(chunk) as u32, Ordering::Relaxed);
        s.helper_writes.store(helper_writes as u32, Ordering::Relaxed);
        s.niov.store(iovs.len() as u32, Ordering::Relaxed);
        for (d, &(a, l)) in s.iovs.iter().zip(iovs) {
            d[0].store(a as u64, Ordering::Relaxed);
            d[1].store(l as u64, Ordering::Relaxed);
        }
        s.settled.store(0, Ordering::Relaxed);
        // Publishes every field above to a helper that sees this generation.
        s.claim.store((gen as u64) << 32 | nchunks << 16, Ordering::Release);
        true
    }

    /// Sender: offer slot `i` as job `gen` for our rendezvous send of
    /// `total` bytes (a *sender job*, docs/wire-shm.md): nothing is claimable
    /// until the receiver `accept`s it with its buffers.
    pub fn offer(&self, i: u32, gen: u32, total: usize) {
        let s = self.slot(i);
        s.total.store(total as u64, Ordering::Relaxed);
        s.nchunks.store(0, Ordering::Relaxed);
        s.niov.store(0, Ordering::Relaxed);
        s.settled.store(0, Ordering::Relaxed);
        s.claim.store((gen as u64) << 32, Ordering::Release);
    }

    /// Receiver, in the sender's table: take the job `gen` offered in slot
    /// `i`, describe our buffers (`iovs`, `total` bytes cut in `chunk`s,
    /// which the sender writes into) and open its chunks, chunk 0 already
    /// ours (we copy it at once). False when the slot is not offering
    /// `gen`, or the job cannot be described.
    ///
    /// The fields are written before the claim word says so: the sender
    /// reads them only once it does, and reuses the slot only once its
    /// send is over, which no one but us (its only receiver) can bring
    /// about while we are here. Written in one go, the line the sender
    /// polls moves to us once rather than once per field.
    pub fn accept(&self, i: u32, gen: u32, total: usize, chunk: usize, iovs: &[(usize, usize)]) -> bool {
        if iovs.len() > JOB_IOVS || chunk == 0 || total == 0 || total.div_ceil(chunk) > MAX_CHUNKS {
            return false;
        }
        let s = self.slot(i);
        let offered = (gen as u64) << 32;
        if s.claim.load(Ordering::Acquire) != offered {
            return false;
        }
        let nchunks = total.div_ceil(chunk);
        s.total.store(total as u64, Ordering::Relaxed);
        s.chunk.store(chunk as u64, Ordering::Relaxed);
        s.nchunks.store(nchunks as u32, Ordering::Relaxed);
        s.helper_writes.store(1, Ordering::Relaxed);
        s.niov.store(iovs.len() as u32, Ordering::Relaxed);
        for (d, &(a, l)) in s.iovs.iter().zip(iovs) {
            d[0].store(a as u64, Ordering::Relaxed);
            d[1].store(l as u64, Ordering::Relaxed);
        }
        let open = offered | (nchunks as u64) << 16 | 1;
        s.claim.compare_exchange(offered, open, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// Sender: whether the job `gen` offered in slot `i` has been
    /// accepted (its chunks opened; false while offered or being filled).
    pub fn accepted(&self, i: u32, gen: u32) -> bool {
        let c = self.slot(i).claim.load(Ordering::Acquire);
        (c >> 32) as u32 == gen && c & 0xffff_ffff != 0
    }

    /// The generation of the job in slot `i` (0: none yet).
    pub fn generation(&self, i: u32) -> u32 {
        (self.slot(i).claim.load(Ordering::Acquire) >> 32) as u32
    }

    /// Helper: the job in slot `i` if it is still generation `gen`.
    pub fn view(&self, i: u32, gen: u32) -> Option<JobView> {
        let s = self.slot(i);
        if (s.claim.load(Ordering::Acquire) >> 32) as u32 != gen {
            return None;
        }
        let niov = (s.niov.load(Ordering::Relaxed) as usize).min(JOB_IOVS);
        let v = JobView {
            total: s.total.load(Ordering::Relaxed) as usize,
            chunk: s.chunk.load(Ordering::Relaxed) as usize,
            nchunks: s.nchunks.load(Ordering::Relaxed),
            helper_writes: s.helper_writes.load(Ordering::Relaxed) == 1,
            iovs: s.iovs[..niov]
                .iter()
                .map(|d| (d[0].load(Ordering::Relaxed) as usize, d[1].load(Ordering::Relaxed) as usize))
                .collect(),
        };
        // Still the same job: what we read is the owner's, not a rewrite.
        let consistent = (s.claim.load(Ordering::Acquire) >> 32) as u32 == gen
            && v.chunk > 0
            && v.nchunks as usize == v.total.div_ceil(v.chunk);
        consistent.then_some(v)
    }

    /// The helper's side of job `slot` (generation `gen`, as `v` shows
    /// it): claim chunks from the back and copy each between our `local`
    /// buffers and the owner's (`read`: from them), until none is left or
    /// one fails (the owner then redoes the job). Whether our settle was
    /// the last one, with every chunk copied.
    pub fn help(&self, slot: u32, gen: u32, pid: u32, read: bool, local: &[(usize, usize)], v: &JobView) -> bool {
        let mut done = false;
        // (At most the job's chunk count: the claim word is shared memory,
        // and a peer that kept rewriting it must not keep us here.)
        for _ in 0..v.nchunks {
            let Some(k) = self.claim(slot, gen, true) else { break };
            let ok = copy_chunk(pid, read, local, &v.iovs, v.total, v.chunk, k);
            done = self.settle(slot, ok);
            if !ok {
                tracing::debug!("shared copy chunk {k} in slot {slot} failed; its owner redoes the job");
                return false;
            }
        }
        done
    }

    /// Claim a chunk of job `gen`: the owner the first unclaimed one, the
    /// helper (`from_back`) the last (None: all claimed, or the slot moved
    /// on to another job).
    pub fn claim(&self, i: u32, gen: u32, from_back: bool) -> Option<u32> {
        let s = self.slot(i);
        let mut cur = s.claim.load(Ordering::Acquire);
        loop {
            let (front, back) = ((cur & 0xffff) as u32, ((cur >> 16) & 0xffff) as u32);
            if (cur >> 32) as u32 != gen || front >= back {
                return None;
            }
            let (next, k) = if from_back { (cur - (1 << 16), back - 1) } else { (cur + 1, front) };
            match s.claim.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(k),
                Err(c) => cur = c,
            }
        }
    }

    /// Either side: a claimed chunk is done (`ok`) or could not be copied.
    /// True when this was the job's last chunk and every chunk was
    /// copied: the job is over, done, and this side knows it first (the
    /// helper of a send then completes the send itself, docs/wire-shm.md).
    pub fn settle(&self, i: u32, ok: bool) -> bool {
        let s = self.slot(i);
        // (Read before our chunk is settled: until then the job is live.)
        let n = s.nchunks.load(Ordering::Relaxed);
        let add = if ok { 1 } else { 1 + FAILED };
        let now = s.settled.fetch_add(add, Ordering::AcqRel).wrapping_add(add);
        now & 0xffff == n && now < FAILED
    }

    /// Owner: (chunks settled, whether one failed).
    pub fn progress(&self, i: u32) -> (u32, bool) {
        let v = self.slot(i).settled.load(Ordering::Acquire);
        (v & 0xffff, v >= FAILED)
    }

    /// Owner: claim every chunk not yet claimed (the job is being given up
    /// or redone alone), at most `nchunks` (the job's count, from the
    /// owner's own record: the claim word is shared memory); returns how
    /// many were still unclaimed.
    pub fn close(&self, i: u32, gen: u32, nchunks: usize) -> u32 {
        let mut n = 0;
        while (n as usize) < nchunks && self.claim(i, gen, false).is_some() {
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> (super::super::region::Region, JobTable) {
        let r = super::super::region::Region::create(&"127.0.0.1:3".parse().unwrap(), None).unwrap();
        let t = r.jobs();
        (r, t)
    }

    #[test]
    fn an_offered_job_opens_only_once_accepted_and_only_for_its_generation() {
        let (_keep, t) = table();
        t.offer(2, 5, 1000);
        assert!(!t.accepted(2, 5));
        assert_eq!(t.claim(2, 5, true), None, "nothing to claim while offered");
        assert!(!t.accept(2, 4, 1000, 500, &[(0x1000, 1000)]), "another generation");
        assert!(t.accept(2, 5, 1000, 600, &[(0x1000, 1000)]));
        assert!(!t.accept(2, 5, 1000, 600, &[(0x1000, 1000)]), "taken once");
        assert!(t.accepted(2, 5));
        let v = t.view(2, 5).unwrap();
        assert_eq!((v.total, v.chunk, v.nchunks, v.helper_writes), (1000, 600, 2, true));
        assert_eq!(&v.iovs[..], &[(0x1000, 1000)]);
        assert_eq!(t.claim(2, 5, true), Some(1), "chunk 0 is the receiver's from the start");
        assert_eq!(t.claim(2, 5, false), None);
        assert!(!t.settle(2, true));
        assert!(t.settle(2, true));
        t.offer(2, 6, 10);
        assert_eq!(t.progress(2), (0, false), "a new offer starts from nothing");
        assert!(!t.accept(2, 6, 10, 1, &vec![(0, 1); JOB_IOVS + 1]), "too many iovs");
        assert!(!t.accepted(2, 6), "a refused accept leaves the offer");
    }

    #[test]
    fn claims_are_unique_and_generations_fence_late_helpers() {
        let (_keep, t) = table();
        assert!(t.open(3, 7, 100, 30, true, &[(0x1000, 60), (0x9000, 40)]));
        let v = t.view(3, 7).unwrap();
        assert_eq!((v.total, v.chunk, v.nchunks, v.helper_writes), (100, 30, 4, true));
        assert_eq!(v.iovs, vec![(0x1000, 60), (0x9000, 40)]);
        assert_eq!(chunk_range(100, 30, 3), (90, 10));
        assert_eq!(t.claim(3, 7, false), Some(0), "the owner from the front");
        assert_eq!(t.claim(3, 7, true), Some(3), "the helper from the back");
        assert_eq!(t.claim(3, 7, false), Some(1));
        assert!(!t.settle(3, true));
        assert!(!t.settle(3, false));
        assert_eq!(t.progress(3), (2, true));
        assert_eq!(t.close(3, 7, 4), 1, "chunk 2 was left");
        assert!(!t.settle(3, true));
        assert!(!t.settle(3, true), "the last chunk of a job with a failed chunk: not done");
        assert_eq!(t.claim(3, 7, true), None, "all claimed");
        // Reused for generation 8: a helper told generation 7 gets nothing.
        assert!(t.open(3, 8, 10, 10, false, &[(0x2000, 10)]));
        assert!(t.view(3, 7).is_none());
        assert_eq!(t.claim(3, 7, true), None);
        assert_eq!(t.claim(3, 8, true), Some(0));
        assert_eq!(t.claim(3, 8, false), None);
        assert_eq!(t.progress(3), (0, false));
        assert!(t.settle(3, true), "the last chunk, every chunk copied");
        assert!(t.open(3, 9, 20, 10, false, &[(0x2000, 20)]));
        assert_eq!((t.claim(3, 9, false), t.claim(3, 9, true)), (Some(0), Some(1)));
        assert!(!t.settle(3, true), "the first of two");
        assert!(t.settle(3, true), "whichever side settles last learns it");
        assert!(!t.open(5, 1, MAX_CHUNKS + 1, 1, true, &[(0, 1)]), "more chunks than a claim word counts");
        assert!(t.open(6, 1, 40, 10, false, &[(0x2000, 40)]));
        assert_eq!(t.close(6, 1, 3), 3, "close claims no more than it is told the job has");
        assert_eq!(t.claim(6, 1, false), Some(3), "the fourth chunk is still unclaimed");
        let many = vec![(0usize, 1usize); JOB_IOVS + 1];
        assert!(!t.open(4, 1, JOB_IOVS + 1, 1, true, &many), "too many iovs for a slot");
    }
}
