//! Shared copies (docs/wire-shm.md, "Shared copies", "Sender jobs", "Jobs over
//! several operations"): the jobs this endpoint owns (a receive's or an
//! RMA target's copy, published in its region and worked on by both
//! processes), the ones it helps with (a peer's job over its own sends or
//! writes), the jobs its sends offer, and receives kept to be paired.
//! Everything here runs inside the engine's progress or posting calls,
//! under the endpoint's lock, like the rest of `Engine`.

use std::net::SocketAddr;
use std::time::Instant;

use super::{clip, region_slice, total, Engine, Job, JobFor, Kind, Offer, Paired, Pending, JOB_WAIT, LONE_SKEW};
use crate::config::Config;
use crate::protocol::{flag, op, Hdr};
use crate::wire::{Copies, SharedCopy, Span};

/// The shared copies (an offload of the shm wire: both processes copy
/// chunks of one transfer) and what decides them (`Engine::sharing`).
pub(super) struct Sharing {
    /// Our shared copies' slots, when our wire offers them (shm).
    pub(super) copies: Option<Copies>,
    /// Jobs our pending sends offer (FI_OXMR_SHM_SENDER_JOBS).
    pub(super) offers: Vec<Offer>,
    pub(super) sender_jobs: bool,
    /// The jobs whose peer did not settle its chunk in time.
    pub(super) stalled: Vec<Job>,
    /// A receive's shared copy whose helper may still hold a chunk, left
    /// open while the next copy starts (see `share`), and the progress
    /// calls since it was opened.
    pub(super) open_job: Option<Job>,
    pub(super) open_calls: u32,
    /// A rendezvous receive kept for the next one to pair with (see
    /// `pair_recv`, FI_OXMR_SHM_PAIR_RECV, `pair_recv` here); it completes
    /// before anything matched after it.
    pub(super) unpaired: Option<Box<Paired>>,
    pub(super) pair_recv: bool,
    /// Transfers of at least `share_min` bytes are shared, in chunks of
    /// `share_chunk` (FI_OXMR_SHM_SHARE_MIN, _CHUNK).
    pub(super) share_min: usize,
    pub(super) share_chunk: usize,
}

impl Sharing {
    pub(super) fn new(copies: Option<Copies>, cfg: &Config) -> Sharing {
        Sharing {
            copies,
            offers: Vec::new(),
            sender_jobs: cfg.sender_jobs,
            stalled: Vec::new(),
            open_job: None,
            open_calls: 0,
            unpaired: None,
            pair_recv: cfg.pair_recv,
            share_min: cfg.share_min,
            share_chunk: cfg.share_chunk,
        }
    }
}

/// The byte layout of a job over several operations (a pair of
/// receives, a run of writes; docs/wire-shm.md "Jobs over several
/// operations"): the first half of each one's bytes (rounded up), in
/// order, then the second halves. Its first chunk is the first halves.
pub(super) fn halves(parts: &[&[(usize, usize)]]) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    for x in parts {
        v.extend(region_slice(x, 0, total(x).div_ceil(2)));
    }
    for x in parts {
        let n = total(x);
        v.extend(region_slice(x, n.div_ceil(2), n - n.div_ceil(2)));
    }
    v
}

/// The chunk of a two-chunk job of `n` bytes, moved (by less than a page)
/// so that the second chunk starts at a page boundary of the owner's
/// buffer at `base`: each process_vm_* call walks the pages of its range
/// one by one (pinning each), and a split inside a page gives that page to
/// both calls. Jobs of more chunks, and moves that would change the number
/// of chunks, keep `chunk`. Measured (64 KiB `fi_rdm_pingpong`, whose
/// buffers start 16 bytes into a page, so 32/32 KiB halves take 9 pages
/// each and 36 KiB - 16 / 28 KiB + 16 take 9 and 8; 10 alternating runs,
/// same build, medians): 5.43 -> 4.76 us, and 5.50 -> 5.33 in a slower
/// spell; no change at 128 KiB; a C model of the copy alone (two
/// processes, CMA halves, flags): 3.93 -> 3.72 us.
pub(super) fn page_split(n: usize, chunk: usize, base: usize) -> usize {
    const PAGE: usize = 4096;
    if n.div_ceil(chunk) != 2 {
        return chunk;
    }
    let over = (base + chunk) % PAGE;
    let down = chunk - over.min(chunk);
    let up = chunk + (PAGE - over) % PAGE;
    let two = |c: usize| c > 0 && c < n && n.div_ceil(c) == 2;
    match (two(down), two(up)) {
        (true, true) if over <= PAGE / 2 => down,
        (_, true) => up,
        (true, false) => down,
        (false, false) => chunk,
    }
}

/// The first chunk of `halves` over operations of these sizes.
pub(super) fn first_halves(lens: impl Iterator<Item = usize>) -> usize {
    lens.map(|n| n.div_ceil(2)).sum()
}

/// Whether the writes of a run (each one's buffers in our memory) may be
/// copied by both sides at once in halves: each writes one piece of our
/// memory, and any two pieces are apart or the very same (then both sides
/// write their half of it in the order sent).
pub(super) fn runs_apart(writes: &[&[(usize, usize)]]) -> bool {
    let spans: Option<Vec<(usize, usize)>> = writes.iter().map(|w| (w.len() == 1).then(|| w[0])).collect();
    let Some(spans) = spans else { return false };
    spans
        .iter()
        .enumerate()
        .all(|(i, &(a, n))| spans[..i].iter().all(|&(b, m)| (a, n) == (b, m) || a + n <= b || b + m <= a))
}

impl Engine {
    /// Pair rendezvous receives of equal size from one peer: keep one
    /// while more messages wait, and copy it together with the next in
    /// one job, each side copying the same half of both messages with one
    /// call (process_vm_readv/writev of two pieces costs little more than
    /// one: the per-call work is paid once for both).
    pub(super) fn pair_recv(&mut self, r: Box<Paired>) {
        let n = total(&r.dest);
        match self.sharing.unpaired.take() {
            // (One sender endpoint: address, process and epoch.)
            Some(k)
                if k.from == r.from
                    && k.pid == r.pid
                    && k.hdr.msg_id >> 32 == r.hdr.msg_id >> 32
                    && !k.gone
                    && total(&k.dest) == n =>
            {
                let local = halves(&[&k.dest, &r.dest]);
                if self.can_share(2 * n, &local, &r.from) {
                    let remote = halves(&[&k.src, &r.src]);
                    let (pid, from, msg_id) = (r.pid, r.from, k.hdr.msg_id);
                    tracing::debug!(
                        "pairing the receives of sends {msg_id} and {} from {from}, {n} B each",
                        r.hdr.msg_id
                    );
                    let span = Span { total: 2 * n, pid, local, remote };
                    return self.share(span, true, from, msg_id, JobFor::Pair { first: k, second: r });
                }
                self.deliver_kept(*k);
                self.deliver_rts(*r);
            }
            Some(k) => {
                self.deliver_kept(*k);
                self.pair_recv(r);
            }
            None if self.busy => {
                if self.sharing.open_job.is_none() {
                    self.sharing.open_calls = 0;
                }
                self.sharing.unpaired = Some(r);
            }
            None => self.deliver_rts(*r),
        }
    }

    /// Offer a job in our region for a rendezvous send of `len` bytes from
    /// `iovs` (a sender job, docs/wire-shm.md): the slot and generation, or
    /// None when the send is too small to share, no slot is free, or its
    /// buffers are device memory (only our own word copies touch it).
    pub(super) fn offer(&mut self, len: usize, iovs: &[(usize, usize)]) -> Option<(u32, u32)> {
        // (At most half the slots: an offer holds its slot until the
        // receive is posted, and our own receives and RMA need the rest.)
        if !self.sharing.sender_jobs
            || self.sharing.share_min == 0
            || len < self.sharing.share_min / 4
            || self.sharing.offers.len() >= Copies::SLOTS / 2
        {
            return None;
        }
        if iovs.iter().any(|&(a, l)| crate::mr::phys::is_device(a, l)) {
            return None;
        }
        self.sharing.copies.as_mut()?.offer(len)
    }

    /// Our side of the jobs our pending sends offered: once a receiver
    /// has accepted one, copy the chunks we can claim (from the back) into
    /// the buffers it wrote into the slot; a send whose every chunk is
    /// settled, none failed, is complete (no ACK comes). A send completed
    /// or failed by any other way (an ACK: the receiver copied alone or
    /// redid a failed job; its peer gone) gives its slot back.
    pub(super) fn poll_offers(&mut self) {
        let mut i = 0;
        while i < self.sharing.offers.len() {
            let o = self.sharing.offers[i];
            let Some(c) = self.sharing.copies.as_mut() else { return };
            let Some(p) = self.pending.get(&o.msg_id) else {
                self.sharing.offers.swap_remove(i);
                c.give_back(o.slot);
                continue;
            };
            let t = c.table();
            let mut done = false;
            if o.helped == 0 {
                // (Then, until the receiver settles its chunks, only the
                // counts are read: one load per call.)
                if !t.accepted(o.slot, o.gen) {
                    i += 1;
                    continue;
                }
                let Some(v) = t.view(o.slot, o.gen) else {
                    i += 1;
                    continue;
                };
                self.sharing.offers[i].helped = v.nchunks;
                if !v.helper_writes || v.total > total(&p.iovs) {
                    tracing::warn!("the receiver of send {} filled its job wrongly; not helping", o.msg_id);
                } else {
                    done = t.help(o.slot, o.gen, o.pid, false, &p.iovs, &v);
                }
            }
            if !done {
                let (settled, failed) = t.progress(o.slot);
                done = !failed && settled == self.sharing.offers[i].helped;
            }
            if done {
                // Every chunk copied: the data is in the posted receive.
                self.sharing.offers.swap_remove(i);
                if let Some(c) = self.sharing.copies.as_mut() {
                    c.give_back(o.slot);
                }
                if let Some(p) = self.pending.remove(&o.msg_id) {
                    self.complete_tx(p.ctx, p.kind, p.tagged, p.len, p.credit, p.report);
                }
                continue;
            }
            i += 1;
        }
    }

    /// The chunk size of a shared copy of `n` bytes: FI_OXMR_SHM_SHARE_CHUNK
    /// when set, else halves (16 KiB to 1 MiB); never more chunks than a
    /// claim word counts. `skew` (a lone receive in a job of ours): a copy
    /// of two chunks gives us, the owner, `LONE_SKEW` more. The helper
    /// starts about 0.35 us after us (our CTS reaching it), some 4 KiB of
    /// copying, so both end together (64 KiB pingpong, traced: the
    /// receiver waited 0.4 us for the helper's half at 32/32, nothing at
    /// 36/28; medians of 6 alternating runs 4.8 -> 4.45 us). A lone job of
    /// two chunks is then split at a page boundary of the owner's buffer at
    /// `base` (`page_split`).
    pub(super) fn job_chunk(&self, n: usize, skew: bool, base: usize) -> usize {
        let half = n.div_ceil(2).clamp(16 << 10, 1 << 20);
        let chunk = if self.sharing.share_chunk != 0 {
            return self.sharing.share_chunk.max(n.div_ceil(Copies::MAX_CHUNKS));
        } else if skew && n <= 2 * half && n / 2 >= 16 << 10 {
            half + LONE_SKEW
        } else {
            half
        };
        let chunk = chunk.max(n.div_ceil(Copies::MAX_CHUNKS));
        if self.busy {
            // (A pipelined job: its owner copies one chunk and moves on,
            // and a first chunk grown to a page boundary is more of the
            // owner's time; no gain measured there: one-way 64 KiB sends
            // 16.6 GB/s with halves, 16.4 with the split moved, medians
            // of 8 alternating runs.)
            return chunk;
        }
        page_split(n, chunk, base)
    }

    /// Whether a copy of `n` bytes into/out of our `local` buffers is
    /// shared with the peer: large enough, a wire that offers shared
    /// copies on both sides, a free job slot, buffers a slot can describe,
    /// and none of them device memory (which only its owner's word copies
    /// may touch).
    pub(super) fn can_share(&mut self, n: usize, local: &[(usize, usize)], peer: &SocketAddr) -> bool {
        n >= self.share_from(peer)
            && self.sharing.copies.as_ref().is_some_and(|c| c.has_free())
            && self.peers.get(peer).is_some_and(|p| p.link.props().shares)
            && local.len() <= Copies::MAX_IOVS
            && !local.iter().any(|&(a, l)| crate::mr::phys::is_device(a, l))
    }

    /// The smallest copy shared with `peer` now (usize::MAX: none).
    pub(super) fn share_from(&mut self, peer: &SocketAddr) -> usize {
        // Sharing costs a message and a wait for the peer's half; it pays
        // from `share_min`, and from `share_min / 4` when nothing else is
        // queued (a lone transfer: the latency case, where our core has
        // nothing better to do than wait for it) or when the peer says it
        // is idle (one-way streams: its core would only spin; when both
        // sides have copies of their own, as in two-way RMA, splitting
        // 64 KiB copies only adds messages and waits).
        if self.sharing.share_min == 0 {
            usize::MAX
        } else if !self.busy || self.peers.get(peer).is_some_and(|p| p.link.idle()) {
            self.sharing.share_min / 4
        } else {
            self.sharing.share_min
        }
    }

    /// Start a shared copy of `span` with `peer` (`we_read`: from its
    /// buffers into ours), ask it (operation `msg_id`) to help, and copy
    /// our share now.
    pub(super) fn share(&mut self, span: Span, we_read: bool, peer: SocketAddr, msg_id: u64, what: JobFor) {
        let n = span.total;
        // A receive with more queued is pipelined (see below).
        let pipelined = self.busy && matches!(what, JobFor::Recv { .. } | JobFor::Pair { .. });
        // A lone receive's owner copies 4 KiB more (`job_chunk`); a
        // pipelined receive is cut in halves: there we copy one chunk
        // while the helper copies the last and the next is queued. RMA
        // too, whose helper is often busy with its own copies (two-way
        // fi_rma_bw; the skew was not measurably better either way).
        let lone = !pipelined && matches!(what, JobFor::Recv { .. });
        // (A pair: one chunk of each side's halves.)
        let chunk = match &what {
            JobFor::Pair { first, second } => {
                first_halves([first.hdr.len, second.hdr.len].map(|l| l as usize).into_iter())
            }
            JobFor::Writes { run } => first_halves(run.iter().map(|w| w.0.len as usize)),
            _ => self.job_chunk(n, lone, span.local.first().map_or(0, |l| l.0)),
        };
        let (copy, opened) = match self.sharing.copies.as_mut() {
            Some(c) => c.open(span, chunk, we_read),
            None => (SharedCopy::alone(span, we_read), false),
        };
        let (slot, gen) = (copy.slot, copy.gen);
        let job = Job { copy, peer, what };
        if !opened {
            // (can_share checked what a slot holds; should it still not
            // take the job, copy alone rather than trust the slot.)
            return self.complete_job(job, false);
        }
        let mut cts = Hdr { op: op::CTS, msg_id, rma_addr: slot as u64, tag: gen as u64, ..Default::default() };
        let ids: Vec<u64> = match &job.what {
            JobFor::Pair { first, second } => vec![first.hdr.msg_id, second.hdr.msg_id],
            JobFor::Writes { run } => run.iter().map(|w| w.0.msg_id).collect(),
            _ => Vec::new(),
        };
        if ids.is_empty() {
            self.push_ctrl(peer, cts);
        } else {
            // (A job over several operations: their ids in the body.)
            cts.flags |= flag::RUN;
            cts.iov_count = ids.len() as u16;
            let body: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
            self.push_ctrl_body(peer, cts, &body);
        }
        if pipelined {
            // More is queued: rather than copy our share and wait for the
            // helper's now (its CTS latency and its copy on our critical
            // path), copy one chunk and start the next transfer; the
            // helper's chunks of this one overlap it, and what it has not
            // claimed by then we copy when the job completes. (Taking every
            // chunk the late helper had not claimed yet, as a lone job
            // does, left it idle: one-way 64 KiB sends 14 -> 16.9 GB/s
            // medians of 6 alternating runs, by taking one.) Only
            // receives: each has its own buffer, so their copies may
            // overlap; RMA writes to one region must not.
            self.work(&job, 1);
            // The previous receive's job completes first: receives
            // complete in matching order.
            self.finish_open_job();
            self.sharing.open_job = Some(job);
            self.sharing.open_calls = 0;
        } else {
            self.work(&job, usize::MAX);
            self.finish_open_job();
            self.finish_job(job);
        }
    }

    /// Complete the receive job left open by `share`, if any (copy what
    /// its helper has not claimed, wait for the chunks it holds), then the
    /// receive kept for pairing (`pair_recv`), if any, alone. Called
    /// before any other receive completes and before any other data
    /// message takes effect.
    #[inline]
    pub(super) fn finish_open_job(&mut self) {
        // (Asked in line on every receive completed: most find nothing
        // open.)
        if self.sharing.open_job.is_some() || self.sharing.unpaired.is_some() {
            self.finish_open_job_now();
        }
    }

    #[inline(never)]
    fn finish_open_job_now(&mut self) {
        // (A kept receive, when there is an open job too, was matched after
        // it: taken first, so that the job's own completion, which
        // completes what came before it, does not deliver it.)
        let kept = self.sharing.unpaired.take();
        if let Some(j) = self.sharing.open_job.take() {
            self.work(&j, usize::MAX);
            self.finish_job(j);
        }
        if let Some(k) = kept {
            // (Alone, and completed now: nothing may stay open.)
            let busy = std::mem::replace(&mut self.busy, false);
            self.deliver_kept(*k);
            self.busy = busy;
        }
    }

    /// Copy every chunk of `j` nobody has claimed yet (`max`: at most that
    /// many).
    pub(super) fn work(&self, j: &Job, max: usize) {
        if let Some(c) = &self.sharing.copies {
            c.work(&j.copy, max);
        }
    }

    /// Wait for the chunks the peer is still copying (at most one each,
    /// since we claimed the rest), then complete the transfer. Completing
    /// here, not later, keeps receive completions in matching order. A peer
    /// that does not settle within `JOB_WAIT` (stopped, descheduled) leaves
    /// the job stalled: it completes from a later progress call, and this
    /// one returns rather than hang.
    pub(super) fn finish_job(&mut self, j: Job) {
        // Our settle was the job's last, every chunk copied (`work` saw
        // it): over, with nothing more to read from the slot, which the
        // peer's core may hold.
        if j.copy.settled_last() {
            return self.complete_job(j, true);
        }
        let start = Instant::now();
        loop {
            match self.job_state(&j, false) {
                Some(ok) => return self.complete_job(j, ok),
                None if start.elapsed() >= JOB_WAIT => {
                    if let Some(ok) = self.job_state(&j, true) {
                        return self.complete_job(j, ok);
                    }
                    break;
                }
                None => std::hint::spin_loop(),
            }
        }
        tracing::debug!("shared copy with {} stalled (its peer holds a chunk); completing it later", j.peer);
        self.sharing.stalled.push(j);
    }

    /// Whether a job is over: Some(true) all chunks copied, Some(false)
    /// some chunk failed or (`alive_check`) its copier is gone, None still
    /// copying.
    pub(super) fn job_state(&self, j: &Job, alive_check: bool) -> Option<bool> {
        self.sharing.copies.as_ref().map_or(Some(false), |c| c.state(&j.copy, alive_check))
    }

    /// Complete stalled jobs that are over (`alive_check`: also those whose
    /// peer died; on the liveness tick).
    pub(super) fn check_stalled(&mut self, alive_check: bool) {
        let mut i = 0;
        while i < self.sharing.stalled.len() {
            match self.job_state(&self.sharing.stalled[i], alive_check) {
                Some(ok) => {
                    let j = self.sharing.stalled.swap_remove(i);
                    self.complete_job(j, ok);
                }
                None => i += 1,
            }
        }
    }

    /// A job is over: free its slot (no chunk is in flight any more, or its
    /// copier is dead) and complete the transfer, or redo it alone.
    pub(super) fn complete_job(&mut self, j: Job, ok: bool) {
        let Job { copy, peer, what } = j;
        if let Some(c) = self.sharing.copies.as_mut() {
            c.finish(&copy);
        }
        // (The helper settled the last chunk, or the job was a sender's.)
        let helper_done = copy.foreign() || !copy.settled_last();
        match what {
            JobFor::Recv { p, hdr } if ok && helper_done => {
                // The helper settled the last chunk and so completed its
                // send itself, or the job was the sender's, which sees it
                // done in its own slot: no ACK.
                self.finish_open_job();
                self.complete_recv(p, &hdr, peer, 0);
            }
            JobFor::Recv { p, hdr } if ok => self.finish_recv(p, &hdr, peer, 0),
            JobFor::Recv { p, hdr } => self.recv_rts(p, hdr, peer, &copy.remote),
            JobFor::Pair { first, second } if ok && helper_done => {
                self.finish_open_job();
                self.complete_recv(first.p, &first.hdr, peer, 0);
                self.complete_recv(second.p, &second.hdr, peer, 0);
            }
            JobFor::Pair { first, second } if ok => {
                self.finish_recv(first.p, &first.hdr, peer, 0);
                self.finish_recv(second.p, &second.hdr, peer, 0);
            }
            JobFor::Pair { first, second } => {
                self.recv_rts(first.p, first.hdr, peer, &first.src);
                self.recv_rts(second.p, second.hdr, peer, &second.src);
            }
            JobFor::Writes { run } if ok => self.writes_done(peer, &run),
            JobFor::Writes { run } => {
                for (h, region, l, r) in run {
                    self.rma_copy(h, peer, l, r, region);
                }
            }
            JobFor::Rma { hdr, hold } if ok => self.rma_done(hdr, peer, 0, Some(&hold)),
            JobFor::Rma { hdr, hold } => {
                // (Redone alone: unless the initiator closed meanwhile, whose
                // buffers are no longer its to give.)
                if self.closed_peer(&peer, hdr.msg_id) {
                    tracing::debug!("an RMA from {} whose shared copy failed: its endpoint closed; dropped", peer);
                    return;
                }
                self.rma_copy(hdr, peer, copy.local, copy.remote, hold)
            }
        }
    }

    /// The peer's side of a shared copy: claim and copy chunks of the job
    /// the owner (`from`) published for our operation `h.msg_id`.
    pub(super) fn help(&mut self, h: Hdr, from: SocketAddr, body: &[u8]) {
        if h.flags & flag::RUN != 0 {
            return self.help_run(h, from, body);
        }
        let (slot, gen) = (h.rma_addr as u32, h.tag as u32);
        // Only the peer the operation went to may ask us to copy its data.
        let Some(p) = self.pending.get(&h.msg_id).filter(|p| p.peer == from) else { return };
        // (The endpoint the operation went to, not a later one at its
        // address: a closed endpoint's late CTS names a slot and
        // generation of its own table, which a new endpoint's may reuse.)
        // (The helper copies to or from the process its link records, not
        // the one a header names.)
        let Some((t, owner)) = self
            .peers
            .get(&from)
            .filter(|x| x.link.epoch() == p.peer_epoch)
            .and_then(|x| Some((x.link.jobs()?, x.link.owner())))
        else {
            return;
        };
        if p.iovs.iter().any(|&(a, l)| crate::mr::phys::is_device(a, l)) {
            return; // only our own word copies touch device memory
        }
        let Some(v) = t.view(slot, gen) else { return };
        // The helper writes its buffers into the owner's for a send or a
        // write, and reads into them for a read; never the other way.
        if !p.kind.peer_copies() || v.helper_writes != (p.kind != Kind::Read) {
            tracing::warn!("shared copy from {from} for operation {} goes the wrong way; not helping", h.msg_id);
            return;
        }
        if v.total > total(&p.iovs) {
            tracing::warn!("shared copy from {from} for operation {} is larger than it; not helping", h.msg_id);
            return;
        }
        let send = p.kind == Kind::Send;
        let done = t.help(slot, gen, owner, !v.helper_writes, &p.iovs, &v);
        // We settled the last chunk of a send's job, every chunk copied:
        // the data is in the receiver's posted buffer and ours is no
        // longer read, so the send is complete (delivery complete too);
        // the receiver, which sees it settled by us, sends no ACK.
        if done && send {
            if let Some(p) = self.pending.remove(&h.msg_id) {
                self.complete_tx(p.ctx, p.kind, p.tagged, p.len, p.credit, p.report);
            }
        }
    }

    /// Help with a job over several of our operations (a CTS with flag
    /// RUN, their ids in `body`): all sends or all writes to `from`, laid
    /// out in halves (`halves`) exactly as the job's size and first chunk
    /// say. Our last settle completes sends, as for one; writes complete
    /// on the owner's answer.
    pub(super) fn help_run(&mut self, h: Hdr, from: SocketAddr, body: &[u8]) {
        let (slot, gen) = (h.rma_addr as u32, h.tag as u32);
        let n = h.iov_count as usize;
        let ids: Vec<u64> =
            body.chunks_exact(8).take(n).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default())).collect();
        let mut distinct = ids.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let Some(peer) = self.peers.get(&from) else { return };
        let (Some(t), epoch, owner) = (peer.link.jobs(), peer.link.epoch(), peer.link.owner()) else { return };
        let Some(v) = t.view(slot, gen) else { return };
        let mine: Option<Vec<&Pending>> = ids.iter().map(|id| self.pending.get(id)).collect();
        // (Each sent to the endpoint at `from` now: see `help`.)
        if mine.as_ref().is_some_and(|m| m.iter().any(|p| p.peer_epoch != epoch)) {
            return;
        }
        let kind = mine.as_ref().and_then(|m| m.first()).map(|p| p.kind);
        let fits = mine.as_ref().is_some_and(|m| {
            m.iter().all(|p| p.peer == from && Some(p.kind) == kind && p.kind.peer_copies())
                && m.iter().map(|p| p.len).sum::<usize>() == v.total
                && first_halves(m.iter().map(|p| p.len)) == v.chunk
        });
        if n < 2 || ids.len() != n || distinct.len() != n || !fits || kind == Some(Kind::Read) || !v.helper_writes {
            tracing::warn!("a shared copy from {from} over operations {ids:?} does not match them; not helping");
            return;
        }
        let mine = mine.unwrap_or_default();
        if mine.iter().any(|p| p.iovs.iter().any(|&(a, l)| crate::mr::phys::is_device(a, l))) {
            return; // only our own word copies touch device memory
        }
        let parts: Vec<Vec<(usize, usize)>> = mine.iter().map(|p| clip(&p.iovs, p.len)).collect();
        let local = halves(&parts.iter().map(|x| &x[..]).collect::<Vec<_>>());
        if t.help(slot, gen, owner, false, &local, &v) && kind == Some(Kind::Send) {
            for id in ids {
                if let Some(p) = self.pending.remove(&id) {
                    self.complete_tx(p.ctx, p.kind, p.tagged, p.len, p.credit, p.report);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{first_halves, halves, page_split, runs_apart};

    #[test]
    fn halves_put_every_first_half_before_the_second_halves() {
        // 10 bytes in one piece and 7 in two: halves rounded up (5, 4).
        let a: &[(usize, usize)] = &[(1000, 10)];
        let b: &[(usize, usize)] = &[(2000, 3), (3000, 4)];
        let v = halves(&[a, b]);
        assert_eq!(v, vec![(1000, 5), (2000, 3), (3000, 1), (1005, 5), (3001, 3)]);
        let first = first_halves([10, 7].into_iter());
        assert_eq!(first, 9);
        assert_eq!(v.iter().map(|x| x.1).sum::<usize>(), 17);
        // The first chunk (the first `first` bytes) is exactly the first halves.
        let mut at = 0;
        let cut: Vec<_> = v
            .iter()
            .take_while(|x| {
                at += x.1;
                at <= first
            })
            .collect();
        assert_eq!(cut.iter().map(|x| x.1).sum::<usize>(), first);
    }

    #[test]
    fn two_chunk_jobs_split_at_a_page_boundary_of_the_owners_buffer() {
        // fabtests' buffers start 16 bytes into a page: 32/32 KiB halves
        // would share a page; the first chunk grows to the boundary (a
        // skewed one shrinks to it), and the job keeps two chunks.
        assert_eq!(page_split(65536, 32768, 0x7f00_0010), 36848);
        assert_eq!(page_split(65536, 36864, 0x7f00_0010), 36848);
        // Already on a boundary; more than two chunks: unchanged.
        assert_eq!(page_split(65536, 32768, 0x7f00_0000), 32768);
        assert_eq!(page_split(3 << 20, 1 << 20, 0x10), 1 << 20);
        // A move down would make three chunks: up instead.
        assert_eq!(page_split(40000, 20000, 0), 20480);
        for base in [0usize, 16, 2048, 4000, 4095] {
            for n in [32768usize, 40000, 65536, 65537, 131072, 200000] {
                let chunk = n.div_ceil(2);
                let c = page_split(n, chunk, base);
                assert_eq!(n.div_ceil(c), 2, "n {n} base {base}: {c}");
                assert!(c.abs_diff(chunk) < 4096, "n {n} base {base}: {c}");
                assert!(c == chunk || (base + c).is_multiple_of(4096), "n {n} base {base}: {c}");
            }
        }
    }

    #[test]
    fn only_runs_of_single_pieces_apart_or_identical_are_split() {
        let one = |a, n| vec![(a, n)];
        let (x, y, same, part) = (one(0, 100), one(100, 50), one(0, 100), one(50, 100));
        assert!(runs_apart(&[&x, &y]), "apart");
        assert!(runs_apart(&[&x, &same, &y]), "the very same range twice");
        assert!(!runs_apart(&[&x, &part]), "overlapping in part");
        assert!(!runs_apart(&[&y, &x, &part]), "overlapping in part, not next to each other");
        let two = vec![(500, 10), (600, 10)];
        assert!(!runs_apart(&[&x, &two]), "a write in two pieces");
    }
}
