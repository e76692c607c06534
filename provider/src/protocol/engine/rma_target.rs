//! The RMA target: every remote read and write checked against this
//! domain's registrations (key, bounds, rights, the sender's identity)
//! before any copy, then copied, counted and answered; runs of writes
//! copied with one call.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxmr_ffi as ffi;

use super::shared::{halves, runs_apart};
use super::{
    clip, region_slice, total, Engine, JobFor, Kind, Pull, PullFor, QueuedWrite, Stream, ACKS_MAX, C_RREAD, C_RWRITE,
};
use crate::config::Config;
use crate::protocol::hash::FastMap;
use crate::protocol::{decode_iovs, flag, op, Hdr};
use crate::queues::cq::CqEntry;
use crate::wire::{Copied, Span};

/// What remote accesses may do to us, and the refusals so far
/// (`Engine::target`).
pub(super) struct Target {
    /// Refused remote accesses per peer in the current burst window (the
    /// count, when the window opened), the most allowed in one
    /// (FI_OXMR_REFUSE_MAX; 0: no limit), and the peers found over it
    /// while the inbox was out (banned at the end of the poll).
    pub(super) refusals: FastMap<SocketAddr, (u32, Instant)>,
    pub(super) refuse_max: u32,
    pub(super) to_ban: Vec<SocketAddr>,
    /// Most bytes of a peer's RMA writes copied by one call (`write_batch`;
    /// 0: off).
    pub(super) write_batch_max: usize,
}

impl Target {
    pub(super) fn new(cfg: &Config) -> Target {
        Target {
            refusals: FastMap::default(),
            refuse_max: cfg.refuse_max,
            to_ban: Vec::new(),
            write_batch_max: cfg.write_batch,
        }
    }
}
use crate::mr::registry::REFUSED;

/// RMA reads up to this many bytes are answered with their data in the
/// ACK (protocol version 2): a control frame on every wire holds it.
pub(super) const READ_INLINE_MAX: usize = 4096;
const _: () = assert!(READ_INLINE_MAX <= super::EAGER_MAX);

/// The window in which `Engine::refused` counts a peer's refusals.
const REFUSE_WINDOW: Duration = Duration::from_secs(10);

impl Engine {
    /// Serve a peer's RMA: check it against our registrations, copy, ACK.
    pub(super) fn rma_target(&mut self, h: Hdr, from: SocketAddr, pid: u32, body: &[u8]) {
        let read = h.op == op::READ;
        // Every oxmr initiator names its operation, with its endpoint's
        // epoch in the high half: a request without one could not be told
        // from a closed endpoint's (`closed_peer`) and is nobody's to answer.
        if h.msg_id == 0 {
            tracing::warn!(
                "dropping a remote {} from {from} without an operation id (a malformed or foreign message)",
                if read { "read" } else { "write" }
            );
            return;
        }
        let access = if read { ffi::FI_REMOTE_READ } else { ffi::FI_REMOTE_WRITE } as u64;
        let len = h.len as usize;
        // (Memory unmapped or moved under a registration revokes it.)
        self.mr.refresh();
        // (Device memory: the registration dies with its mapping.)
        let checked = match self.mr.registry.check(h.rma_key, h.rma_addr, h.len, access) {
            Err(why) => Err(format!("{why:?}")),
            Ok(g) if !self.mr.phys_live(&g.region) => {
                Err("Revoked (its device mapping changed or went away)".to_string())
            }
            Ok(g) => Ok(g),
        };
        let g = match checked {
            Ok(g) => g,
            Err(why) => {
                tracing::warn!(
                    "refused remote {} from {from}: key {:#x} addr {:#x} len {len}: {why}",
                    if read { "read" } else { "write" },
                    h.rma_key,
                    h.rma_addr
                );
                return self.rma_done(h, from, REFUSED, None);
            }
        };
        let local = region_slice(&g.region.iovs, g.offset, len);
        if h.op == op::WRITE_INLINE {
            // SAFETY: `local` lies inside a registration the check just
            // granted for remote write, held by `g`.
            unsafe { crate::mr::local::scatter(&local, &body[..len.min(body.len())]) };
            return self.rma_done(h, from, 0, Some(&g.region));
        }
        let Some(remote) = decode_iovs(body, h.iov_count as usize).filter(|r| total(r) >= len) else {
            tracing::warn!(
                "refused remote {} of {len} bytes from {from}: its message does not describe that many bytes of its own buffers (a malformed or foreign message)",
                if read { "read" } else { "write" }
            );
            // (Refused as any remote access is, though it is no search for
            // a key, an address or rights: it is found after the access
            // check passed, so a code of its own would tell a peer that
            // its key, address and rights were right, and no oxmr
            // initiator sends such a message.)
            return self.rma_done(h, from, REFUSED, None);
        };
        if self.closed_peer(&from, h.msg_id) {
            // Its buffers are no longer its to offer: a read would write
            // into memory the application may have reused since.
            tracing::warn!(
                "dropping a remote {} from {from}: its endpoint has closed",
                if read { "read" } else { "write" }
            );
            return;
        }
        let remote = clip(&remote, len);
        if !self.request_is_its_senders(&h, &from, pid, &remote, read) {
            return;
        }
        // A write under the shared-copy size with more queued is not shared
        // with an idle initiator, as receives and reads are: a write's job
        // completes in the progress call that starts it, its owner waiting
        // for the helper's chunk, while the writes queued behind it are
        // copied with one call (write_batch). Measured (64 KiB, 6
        // alternating runs, same build, medians): two-way fi_rma_bw -o
        // write 12.7 -> 13.8 GB/s, one-way -o writedata 12.2 -> 13.7.
        if read && len <= READ_INLINE_MAX {
            // A small read is answered with its data in the ACK: no copy
            // into the initiator's memory (a process_vm_writev, or on TCP
            // a DATA frame before the ACK), one frame back. bench/mpi_osc.sh,
            // MPI_Get of 8 B through btl ofi on one host: see
            // docs/benchmarks.md.
            let mut data = Vec::with_capacity(len);
            // SAFETY: `local` lies inside a registration the check just
            // granted for remote read, held by `g`.
            unsafe { crate::mr::local::gather(&local, &mut data) };
            self.rma_took_effect(&h, from, Some(&g.region));
            return self.push_ctrl_body(from, Hdr { op: op::ACK, msg_id: h.msg_id, ..Default::default() }, &data);
        }
        let batched = !read && self.busy && len < self.sharing.share_min;
        if h.msg_id != 0 && !batched && self.can_share(len, &local, &from) {
            let what = JobFor::Rma { hdr: h, hold: g.region };
            return self.share(Span { total: len, pid, local, remote }, !read, from, h.msg_id, what);
        }
        self.rma_copy(h, from, local, remote, g.region);
    }

    /// The target's copy of a checked RMA, alone (or the bounce path when
    /// the kernel cannot reach the initiator's memory).
    pub(super) fn rma_copy(
        &mut self,
        h: Hdr,
        from: SocketAddr,
        local: Vec<(usize, usize)>,
        remote: Vec<(usize, usize)>,
        region: Arc<crate::mr::registry::Region>,
    ) {
        let read = h.op == op::READ;
        let len = h.len as usize;
        let r = match self.peers.get(&from) {
            Some(x) if read => x.link.write(&local, &remote),
            Some(x) => x.link.read(&local, &remote),
            None => Copied::Failed(std::io::Error::from_raw_os_error(libc::ECONNRESET)),
        };
        match r {
            Copied::Done(n) if n == len => self.rma_done(h, from, 0, Some(&region)),
            Copied::Done(n) => {
                tracing::warn!("remote access from {from}: only {n} of {len} bytes could be copied");
                self.rma_done(h, from, ffi::FI_EIO, None);
            }
            Copied::Push => {
                // The wire cannot reach the initiator's buffer (shm: memory
                // CMA cannot reach): the side that owns the data pushes it.
                tracing::debug!("remote {} from {from} through pushed chunks", if read { "read" } else { "write" });
                if read {
                    self.count(C_RREAD, true);
                    let after = (h.msg_id != 0).then_some(Hdr { op: op::ACK, msg_id: h.msg_id, ..Default::default() });
                    self.queue_stream(Stream {
                        to: from,
                        msg_id: h.msg_id,
                        src: local,
                        off: 0,
                        total: len,
                        after,
                        spread: false,
                        _hold: Some(region),
                    });
                } else {
                    self.start_pull(
                        (from, h.msg_id),
                        Pull { dest: local, total: len, got: 0, what: PullFor::Write { hdr: h, _hold: region } },
                    );
                    // (A streamed write's data is on its way already.)
                    if h.flags & flag::STREAM == 0 {
                        self.push_ctrl(
                            from,
                            Hdr { op: op::PULL, msg_id: h.msg_id, len: len as u64, ..Default::default() },
                        );
                    }
                }
            }
            Copied::Failed(e) => {
                tracing::warn!("remote access from {from}: copy failed: {e}");
                self.rma_done(h, from, ffi::FI_EIO, None);
            }
        }
    }

    /// Finish a remote access at the target: count it, raise remote CQ
    /// data, and answer the initiator.
    pub(super) fn rma_done(
        &mut self,
        h: Hdr,
        from: SocketAddr,
        status: u32,
        region: Option<&crate::mr::registry::Region>,
    ) {
        if status == REFUSED {
            self.refused(from);
        }
        if status == 0 {
            self.rma_took_effect(&h, from, region);
        } else if h.op == op::WRITE && h.flags & flag::STREAM != 0 && self.drop_stream(from, h.msg_id, h.len, status) {
            // (Refused: its data is on its way, goes nowhere, and is
            // answered once it has all come, so the initiator's stream
            // has ended when its operation completes.)
            return;
        }
        if h.msg_id != 0 {
            self.push_ctrl(from, Hdr { op: op::ACK, msg_id: h.msg_id, status, ..Default::default() });
        }
    }

    /// One more refused remote access from `from`: past `refuse_max` of
    /// them within `REFUSE_WINDOW` (a key or address search, not an
    /// application's mistake), its TCP connections are closed and its
    /// source refused for a while (`wire::Inbox::ban_peer`).
    fn refused(&mut self, from: SocketAddr) {
        if self.target.refuse_max == 0 {
            return;
        }
        let now = Instant::now();
        let e = self.target.refusals.entry(from).or_insert((0, now));
        if now.duration_since(e.1) >= REFUSE_WINDOW {
            *e = (0, now);
        }
        e.0 += 1;
        if e.0 < self.target.refuse_max {
            return;
        }
        tracing::warn!(
            "{from} made {} refused remote accesses within {} s (a key search?): closing its TCP connections and refusing its source for a while (FI_OXMR_REFUSE_MAX, FI_OXMR_REFUSE_BAN_MS)",
            e.0,
            REFUSE_WINDOW.as_secs()
        );
        self.target.refusals.remove(&from);
        match self.rx.as_mut() {
            Some(rx) => rx.ban_peer(from),
            None => self.target.to_ban.push(from),
        }
    }

    /// A remote access succeeded: count it and raise remote CQ data.
    /// (An atomic too: FI_ATOMIC_READ counts as a remote read, every other
    /// atomic as a remote write, and its CQ data says FI_ATOMIC.)
    pub(super) fn rma_took_effect(&mut self, h: &Hdr, from: SocketAddr, region: Option<&crate::mr::registry::Region>) {
        let atomic = h.op == op::ATOMIC;
        let slot = if atomic {
            super::atomic::target_counter(h)
        } else if h.op == op::READ {
            C_RREAD
        } else {
            C_RWRITE
        };
        let read = slot == C_RREAD;
        self.count(slot, true);
        // A counter bound to the MR itself (fi_mr_bind, FI_RMA_EVENT).
        let access = if read { ffi::FI_REMOTE_READ } else { ffi::FI_REMOTE_WRITE } as u64;
        let bound = region.and_then(|r| r.cntr.lock().clone());
        if let Some(c) = bound.filter(|(_, flags)| flags & access != 0).and_then(|(c, _)| c.upgrade()) {
            c.remote_access();
        }
        // (Remote CQ data comes with writes only, fi_rma(3): a read that
        // claims some is not reported as a write it was not.)
        if h.flags & flag::CQ_DATA != 0 && !read {
            let src = self.src_fi_addr(&from);
            if let Some(cq) = &self.bound.rx_cq {
                let class = if atomic { ffi::FI_ATOMIC } else { ffi::FI_RMA } as u64;
                let flags = class | ffi::FI_REMOTE_WRITE as u64 | ffi::FI_REMOTE_CQ_DATA as u64;
                cq.push_unsolicited(CqEntry { flags, len: h.len as usize, data: h.data, src, ..Default::default() });
            }
        }
    }

    /// Serve a run of one peer's RMA writes kept at the front of
    /// `deferred`, when there are at least two, with one process_vm_readv:
    /// the kernel's per-call work (finding the process, checking access,
    /// the syscall itself) is paid once per run instead of once per write
    /// (bench/cma_ceiling.c-style loop, two-way 64 KiB: 15-16 GB/s one
    /// write per call, 17-20 GB/s four). Each write is checked against our
    /// registrations first, exactly as alone; the run ends before a write
    /// that is refused, would be shared, is on device memory or is not
    /// plain, which is then handled alone, so writes take effect and are
    /// answered in the order sent. Returns whether it copied.
    pub(super) fn write_batch(&mut self) -> bool {
        if self.target.write_batch_max == 0 || self.deferred.len() < 2 {
            return false;
        }
        let Some((first, _)) = self.deferred.front().and_then(|m| Hdr::decode(m)) else { return false };
        if first.op != op::WRITE {
            return false;
        }
        let Some(peer) = self.sender(&first.name) else { return false };
        if self.closed_peer(&peer, first.msg_id) {
            // (Each is dropped alone, by rma_target.)
            return false;
        }
        // (A run names one process, which must own its sender's queue, and
        // writes from this endpoint to itself are checked one by one
        // against its pending operations: `request_is_its_senders`, which
        // rma_target applies to each when they are not batched.)
        if first.name == self.name || !self.owns_its_queue(&peer, first.pid) {
            return false;
        }
        // (More messages wait behind the first.)
        self.busy = true;
        // (Writes under the shared-copy size are batched even when the
        // initiator is idle: see rma_target.)
        let limit = if self.sharing.share_min == 0 { usize::MAX } else { self.sharing.share_min }
            .min(self.target.write_batch_max + 1);
        let batchable = |h: &Hdr| {
            // (One endpoint: same name, process and epoch.)
            h.op == op::WRITE
                && h.msg_id != 0
                && h.msg_id >> 32 == first.msg_id >> 32
                && h.name == first.name
                && h.pid == first.pid
                && (h.len as usize) < limit
        };
        if !batchable(&first) || !self.deferred.get(1).and_then(|m| Hdr::decode(m)).is_some_and(|(h, _)| batchable(&h))
        {
            return false;
        }
        self.finish_open_job();
        self.mr.refresh();
        let mut run = Vec::new();
        let (mut nl, mut nr, mut bytes) = (0, 0, 0);
        let max_iovs = self.peers.get(&peer).map_or(0, |p| p.link.max_iovs());
        // (A run is answered by one ACKS message, which must fit a cell:
        // writes are over EAGER_MAX bytes, so a 256 KiB run holds 33 at
        // most, but the cap holds whatever a peer sends.)
        while bytes < self.target.write_batch_max && run.len() < ACKS_MAX {
            let Some(m) = self.deferred.front() else { break };
            let Some((h, hlen)) = Hdr::decode(m).filter(|(h, _)| batchable(h)) else { break };
            let len = h.len as usize;
            let Some(r) = decode_iovs(&m[hlen..], h.iov_count as usize).filter(|r| total(r) >= len) else { break };
            let access = ffi::FI_REMOTE_WRITE as u64;
            let Ok(g) = self.mr.registry.check(h.rma_key, h.rma_addr, h.len, access) else { break };
            if g.region.phys {
                break;
            }
            let l = region_slice(&g.region.iovs, g.offset, len);
            let r = clip(&r, len);
            if nl + l.len() > max_iovs || nr + r.len() > max_iovs {
                break;
            }
            self.deferred.pop_front();
            (nl, nr, bytes) = (nl + l.len(), nr + r.len(), bytes + len);
            run.push((h, g.region, l, r));
        }
        self.busy = !self.deferred.is_empty();
        if run.len() < 2 {
            let Some((h, region, l, r)) = run.pop() else { return false };
            self.rma_copy(h, peer, l, r, region);
            return true;
        }
        // The initiator says it is idle (it waits for these writes): the
        // run is a job it helps with, each side copying the same half of
        // every write, when no two writes of the run overlap partly (each
        // byte is then written by one side only, in the order sent).
        if self.peers.get(&peer).is_some_and(|p| p.link.idle())
            && runs_apart(&run.iter().map(|w| &w.2[..]).collect::<Vec<_>>())
        {
            let local = halves(&run.iter().map(|w| &w.2[..]).collect::<Vec<_>>());
            if self.can_share(bytes, &local, &peer) {
                let remote = halves(&run.iter().map(|w| &w.3[..]).collect::<Vec<_>>());
                let msg_id = run[0].0.msg_id;
                tracing::debug!("sharing a run of {} writes ({bytes} B) from {peer} with it", run.len());
                self.share(
                    Span { total: bytes, pid: first.pid, local, remote },
                    true,
                    peer,
                    msg_id,
                    JobFor::Writes { run },
                );
                return true;
            }
        }
        let local: Vec<_> = run.iter().flat_map(|w| w.2.iter().copied()).collect();
        let remote: Vec<_> = run.iter().flat_map(|w| w.3.iter().copied()).collect();
        let copied = self.peers.get(&peer).map(|p| p.link.read(&local, &remote));
        if matches!(copied, Some(Copied::Done(n)) if n == bytes) {
            self.writes_done(peer, &run);
        } else {
            // Part of it could not be copied (memory CMA cannot reach, a
            // peer gone): each write alone, with its own bounce path or
            // error. Copying bytes again is harmless: the initiator's
            // buffers stay as they are until our ACK.
            tracing::debug!("a run of {} writes from {peer} could not be copied at once; each alone", run.len());
            for (h, region, l, r) in run {
                self.rma_copy(h, peer, l, r, region);
            }
        }
        true
    }

    /// A run of writes took effect: each one's counters and CQ data, and
    /// one answer for the run (op::ACKS).
    pub(super) fn writes_done(&mut self, peer: SocketAddr, run: &[QueuedWrite]) {
        let mut ids = Vec::with_capacity(run.len() * 8);
        for (h, region, _, _) in run {
            self.rma_took_effect(h, peer, Some(region));
            ids.extend_from_slice(&h.msg_id.to_le_bytes());
        }
        let acks = Hdr { op: op::ACKS, iov_count: run.len() as u16, ..Default::default() };
        self.push_ctrl_body(peer, acks, &ids);
    }

    /// Whether an RMA request may be served as its header says: the process
    /// it names (`pid`, whose memory the copy reads or writes) is the one
    /// that owns the sender's queue (its name's file, whose owner the queue
    /// records: the link the request came on, not the header, says who sent
    /// it); and a request that names this very endpoint as its sender is one
    /// of our own pending operations, with the buffers we posted it with.
    /// Otherwise it is dropped with a log line (a forged frame: a same-user
    /// process writing into our queue could name our pid and make us copy
    /// a registration into our own unregistered memory).
    pub(super) fn request_is_its_senders(
        &mut self,
        h: &Hdr,
        from: &SocketAddr,
        pid: u32,
        remote: &[(usize, usize)],
        read: bool,
    ) -> bool {
        let what = if read { "read" } else { "write" };
        if !self.owns_its_queue(from, pid) {
            tracing::warn!(
                "dropping a remote {what} from {from} naming process {pid}, which does not own {from}'s queue; a forged or foreign message"
            );
            return false;
        }
        if h.name != self.name {
            return true;
        }
        let kind = if read { Kind::Read } else { Kind::Write };
        let ours = self
            .pending
            .get(&h.msg_id)
            .is_some_and(|p| p.kind == kind && clip(&p.iovs, remote.iter().map(|x| x.1).sum()) == remote);
        if !ours {
            tracing::warn!(
                "dropping a remote {what} that names this endpoint as its sender but is none of its pending operations (msg_id {:#x}); a forged message",
                h.msg_id
            );
        }
        ours
    }
}
