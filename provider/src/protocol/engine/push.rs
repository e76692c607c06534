//! The push path (PULL -> DATA -> ACK): transfers whose owner pushes its
//! own bytes because the other side cannot reach them (device memory on
//! shm; every large transfer on a wire without remote copies).

use std::net::SocketAddr;

use oxmr_ffi as ffi;

use super::{clip, frame_payload, region_slice, total, Engine, Kind, Pull, PullFor, Stream, EAGER_MAX};
use crate::protocol::hash::FastMap;
use crate::protocol::{op, Hdr};

/// The transfers peers push to us because we could not reach their
/// memory, where their DATA may land, and the streamed writes whose DATA
/// we drop (`Engine::pulls`).
pub(super) struct Pulls {
    /// Each pull, by (peer, our operation's id).
    pub(super) open: FastMap<(SocketAddr, u64), Pull>,
    /// Where a pull's DATA may land straight from a TCP socket (each pull
    /// of host memory has its zone while it is in `open`: `start_pull`,
    /// `take_pull`), and the payload bytes of the frame being handled that
    /// landed so (`on_data`).
    pub(super) lands: crate::wire::Landings,
    pub(super) landed: usize,
    /// Streamed writes we refused (or stopped midway): how many of their
    /// bytes are still to come in DATA frames, which we drop, and the
    /// status we answer once they have (at most `DROPPING_MAX` of them;
    /// past that, a refusal is answered at once, and its DATA logged as
    /// unknown).
    pub(super) dropping: FastMap<(SocketAddr, u64), (u64, u32)>,
}

/// While pulls of ours are open (bulk data coming in too), one progress
/// pass pushes at most this many bytes of streams to one TCP peer before
/// the pass goes on to read. Without it, a pass pushed every stream as far
/// as the socket took, megabytes while the peer's data piled up unread in
/// ours (`ss`: 11-13 MB in its receive queue, drops and retransmits), and
/// in two-way `fi_rma_bw -o write` the side whose socket took its writes
/// kept writing while the other waited: one direction ran at twice the
/// other's speed (docs/wire-tcp.md, "Fair to both directions"). Not for an
/// endpoint whose application sleeps waiting (`Pace::slept`): between its
/// passes it may sleep up to a tick, and bounded passes cost it 29% in
/// the same run under `-c sread` (1658 -> 1175 MB/s, the slower side).
pub(super) const SEND_PASS_MAX: usize = 1 << 20;

impl Pulls {
    pub(super) fn new(lands: crate::wire::Landings) -> Pulls {
        Pulls { open: FastMap::default(), lands, landed: 0, dropping: FastMap::default() }
    }
}

impl Engine {
    /// Pull `key`'s data into `pull.dest`: its zone, if host memory, lets
    /// DATA over TCP land there straight from the socket.
    pub(super) fn start_pull(&mut self, key: (SocketAddr, u64), pull: Pull) {
        if pull.dest.iter().all(|&(a, l)| l == 0 || !crate::mr::phys::is_device(a, l)) {
            // SAFETY: `dest` is a posted receive buffer or a registration
            // checked for this write and held by the pull; the zone is
            // forgotten (`take_pull`) before either is given back.
            unsafe { self.pulls.lands.expect(key.0, key.1, pull.dest.clone()) };
        }
        self.pulls.open.insert(key, pull);
    }

    /// Take pull `key` out (done, failed, its peer gone): nothing lands
    /// for it any more.
    pub(super) fn take_pull(&mut self, key: &(SocketAddr, u64)) -> Option<Pull> {
        self.pulls.lands.forget(key.0, key.1);
        self.pulls.open.remove(key)
    }
}

impl Engine {
    /// The owner's side of a pull: push our own bytes of operation `msg_id`.
    pub(super) fn on_pull(&mut self, h: Hdr, from: SocketAddr) {
        let Some(p) = self.pending.get(&h.msg_id).filter(|p| p.peer == from) else {
            tracing::warn!("pull from {from} for an operation {} that is not one of ours with it", h.msg_id);
            return;
        };
        // A read's buffers are its destination: the target writes them and
        // never reads them back (it pushes a read's data; docs/wire.md).
        if p.kind == Kind::Read {
            tracing::warn!("pull from {from} for our read {}: a read's buffer is only written; ignored", h.msg_id);
            return;
        }
        if !p.kind.peer_copies() {
            tracing::warn!("pull from {from} for our atomic {}: its operands went inline; ignored", h.msg_id);
            return;
        }
        let src = clip(&p.iovs, h.len as usize);
        self.queue_stream(Stream {
            to: from,
            msg_id: h.msg_id,
            total: total(&src),
            src,
            off: 0,
            after: None,
            spread: true,
            _hold: None,
        });
    }

    /// A chunk of a pushed transfer.
    pub(super) fn on_data(&mut self, h: Hdr, from: SocketAddr, body: &[u8]) {
        let off = h.rma_addr as usize;
        let chunk = &body[..(h.len as usize).min(body.len())];
        // (Bytes the TCP inbox read straight into the pull's zone, which
        // holds them wholly: nothing left to copy.)
        let landed = std::mem::take(&mut self.pulls.landed);
        if let Some(pull) = self.pulls.open.get_mut(&(from, h.msg_id)) {
            if let PullFor::Write { hdr, _hold } = &pull.what {
                if !self.mr.phys_live(_hold) {
                    tracing::warn!(
                        "stopped remote write from {from}: key {:#x} addr {:#x}: Revoked (its device mapping changed or went away midway)",
                        hdr.rma_key,
                        hdr.rma_addr
                    );
                    let mut hdr = *hdr;
                    // (A streamed write: what of it is still to come.)
                    hdr.len = pull.total.saturating_sub(pull.got + chunk.len().max(landed)) as u64;
                    self.take_pull(&(from, h.msg_id));
                    return self.rma_done(hdr, from, crate::mr::registry::REFUSED, None);
                }
            }
            if landed > 0 {
                pull.got += landed;
            } else {
                let dest = region_slice(&pull.dest, off, chunk.len());
                // SAFETY: `dest` lies in a posted receive buffer or in a
                // registration checked for this access and held by the pull.
                unsafe { crate::mr::local::scatter(&dest, chunk) };
                pull.got += chunk.len();
            }
            if pull.got >= pull.total {
                let pull = self.take_pull(&(from, h.msg_id)).expect("present above");
                match pull.what {
                    PullFor::Recv { p, hdr } => self.finish_recv(p, &hdr, from, 0),
                    PullFor::Write { hdr, _hold } => self.rma_done(hdr, from, 0, Some(&_hold)),
                }
            }
        } else if let Some(p) = self.pending.get(&h.msg_id).filter(|p| p.kind == Kind::Read && p.peer == from) {
            // Our RMA read, pushed by its target (only a read's buffers are
            // ever written by DATA, and only by the peer it went to).
            let dest = region_slice(&p.iovs, off, chunk.len());
            // SAFETY: the destination buffers of our pending read.
            unsafe { crate::mr::local::scatter(&dest, chunk) };
        } else if let Some((left, status)) = self.pulls.dropping.get_mut(&(from, h.msg_id)) {
            // A streamed write we refused or stopped: its data goes
            // nowhere; answered once the last of it came.
            *left = left.saturating_sub(chunk.len().max(landed) as u64);
            if *left == 0 {
                let status = *status;
                self.pulls.dropping.remove(&(from, h.msg_id));
                self.push_ctrl(from, Hdr { op: op::ACK, msg_id: h.msg_id, status, ..Default::default() });
            }
        } else {
            tracing::warn!("data from {from} for unknown transfer {}", h.msg_id);
        }
    }

    /// (See `Engine::dropping`.)
    const DROPPING_MAX: usize = 1024;

    /// Drop the `left` bytes still to come of the streamed write `msg_id`
    /// from `from` (refused, or stopped midway), and answer `status` once
    /// they came; false when it is answered now instead (nothing to come,
    /// or too many such writes already).
    pub(super) fn drop_stream(&mut self, from: SocketAddr, msg_id: u64, left: u64, status: u32) -> bool {
        if left == 0 || self.pulls.dropping.len() >= Self::DROPPING_MAX {
            return false;
        }
        self.pulls.dropping.insert((from, msg_id), (left, status));
        true
    }

    /// Our streamed write `msg_id` to `to` was answered: push none of it
    /// any more (its buffer is the application's again).
    pub(super) fn end_stream(&mut self, to: SocketAddr, msg_id: u64) {
        if self.peers.owed == 0 {
            return;
        }
        if let Some(p) = self.peers.get_mut(&to) {
            let before = p.streams.len();
            p.streams.retain(|s| s.msg_id != msg_id);
            let gone = before - p.streams.len();
            self.peers.owed -= gone;
        }
    }

    /// Push what we can of our outgoing streams (a peer whose queue is full
    /// holds up only the streams to it).
    pub(super) fn run_streams(&mut self) {
        if self.peers.owed == 0 {
            return;
        }
        let to: Vec<SocketAddr> = self.peers.list.iter().filter(|p| !p.streams.is_empty()).map(|p| p.addr).collect();
        // (Bulk data coming in too, and a spinning application: see
        // `SEND_PASS_MAX`.)
        let receiving = !self.pulls.open.is_empty() && !self.pace.slept;
        for a in to {
            // (One pass over the streams there now; a peer that goes on the
            // way takes the rest of its streams with it.)
            let mut n = self.peers.get(&a).map_or(0, |p| p.streams.len());
            let mut budget = if receiving { SEND_PASS_MAX } else { usize::MAX };
            while n > 0 {
                n -= 1;
                let Some(mut st) = self.peers.get_mut(&a).and_then(|p| p.streams.pop_front()) else { break };
                self.peers.owed -= 1;
                if !self.run_stream(&mut st, &mut budget) {
                    if let Some(p) = self.peers.get_mut(&a) {
                        p.streams.push_front(st);
                        self.peers.owed += 1;
                    }
                    break;
                }
                if let Some(h) = st.after.take() {
                    self.push_ctrl(st.to, h);
                }
            }
        }
    }

    /// Push the rest of one stream; false when its peer's queue is full
    /// or `budget` (this pass's bytes to that peer: `SEND_PASS_MAX`) is
    /// spent.
    fn run_stream(&mut self, st: &mut Stream, budget: &mut usize) -> bool {
        if let Some(r) = st._hold.as_ref().filter(|r| !self.mr.phys_live(r)) {
            // A device registration revoked mid-read: no more of it.
            tracing::warn!(
                "stopped remote read by {}: key {:#x}: Revoked (its device mapping changed or went away midway)",
                st.to,
                r.key
            );
            st.off = st.total;
            if let Some(a) = st.after.as_mut() {
                a.status = crate::mr::registry::REFUSED;
            }
        }
        // (As much as one frame of the link takes: 8 KiB cells on shared
        // memory, larger frames on TCP.)
        let props = self.peers.get(&st.to).map(|p| *p.link.props());
        let chunk = props.map_or(EAGER_MAX, |p| frame_payload(p.max_frame));
        let buffers = props.is_some_and(|p| p.buffers);
        let spread = st.spread && props.is_some_and(|p| p.spreads);
        while st.off < st.total {
            // A link that queues behind a full socket (TCP) takes the next
            // chunk only once its queue is written: data queued there
            // would be copied, and every control frame to that peer (the
            // PULLs and ACKs of the other direction's transfers) would wait
            // behind megabytes of it. (Measured, two-way fi_rma_bw 1 MiB
            // over veth: see docs/wire-tcp.md.)
            // (Spread over lanes: once every one has a chunk queued.)
            if buffers
                && self.peers.get(&st.to).is_some_and(|p| if spread { p.link.spread_full() } else { p.link.flush() })
            {
                return false;
            }
            if buffers && *budget == 0 {
                return false;
            }
            let n = (st.total - st.off).min(chunk);
            let src = region_slice(&st.src, st.off, n);
            // The wire copies the frame's parts itself (a shared-memory
            // cell, or the socket): host memory goes to it as it is; only
            // device memory is gathered first, with its MMIO-safe copy.
            let mut data = Vec::new();
            let parts: Vec<&[u8]> = if src.iter().any(|&(a, l)| l > 0 && crate::mr::phys::is_device(a, l)) {
                data.reserve(n);
                // SAFETY: our own buffers of a pending operation (valid
                // until it completes) or a registration held by the stream.
                unsafe { crate::mr::local::gather(&src, &mut data) };
                vec![&data[..]]
            } else {
                // SAFETY: host memory of a pending operation or of a
                // registration the stream holds, read only during the send.
                src.iter().map(|&io| unsafe { crate::mr::local::view(io) }).collect()
            };
            let hdr =
                Hdr { op: op::DATA, msg_id: st.msg_id, rma_addr: st.off as u64, len: n as u64, ..Default::default() };
            // (No retry at a new endpoint under its address: it is not the
            // one this was for.)
            match self.push_once(st.to, hdr, &parts, false, spread) {
                Ok(()) => {
                    st.off += n;
                    if buffers {
                        *budget = budget.saturating_sub(n);
                    }
                }
                Err(e) if e.code() == ffi::FI_EAGAIN => return false,
                Err(_) => {
                    st.off = st.total;
                    st.after = None;
                }
            }
        }
        true
    }
}
