//! Peers and their failure: the peers an engine sends to (a link each,
//! the last one used at hand, so that a run of messages to one peer
//! compares one address instead of hashing it), who a frame comes from
//! (the link's record of its owner, not the header's word), and what
//! happens when a peer's endpoint closes or its process dies.

use std::collections::VecDeque;
use std::net::SocketAddr;

use oxmr_ffi as ffi;

use super::{Engine, Gone, Pull, PullFor, Stream};
use crate::protocol::hash::FastMap;
use crate::protocol::op;
use crate::wire::{Link, LinkState};

/// A peer we send to: its address, our link to it (which knows its epoch
/// and its owner), and what we still owe it: the control frames that found
/// its queue full, and our pushes of our own memory to it (streams), each
/// in order. A peer that goes is one removal: what we owed it goes with
/// it. (What it owes us, its answers to our pending operations and its
/// pushes into our pulls, stays until our queue has been read past its
/// last frames: `peer_gone`.)
pub(super) struct TxPeer {
    pub(super) addr: SocketAddr,
    pub(super) link: Link,
    pub(super) outbox: VecDeque<Vec<u8>>,
    /// The bytes `outbox` holds, and whether reading the peer stopped
    /// because they passed `Engine::outbox_max`.
    pub(super) outbox_bytes: usize,
    pub(super) outbox_paused: bool,
    pub(super) streams: VecDeque<Stream>,
    /// Operations that complete once the link's connection is up (sends
    /// that would complete when written, queued behind a TCP connect in
    /// progress: ids in `Engine::pending`); failed with it if it fails.
    pub(super) waiting: Vec<u64>,
}

impl TxPeer {
    pub(super) fn new(addr: SocketAddr, link: Link) -> TxPeer {
        TxPeer {
            addr,
            link,
            outbox: VecDeque::new(),
            outbox_bytes: 0,
            outbox_paused: false,
            streams: VecDeque::new(),
            waiting: Vec::new(),
        }
    }
}

/// The peers whose queues we opened, the last one used first: a run of
/// messages to one peer compares one address instead of hashing it.
#[derive(Default)]
pub(super) struct Peers {
    pub(super) list: Vec<TxPeer>,
    index: FastMap<SocketAddr, usize>,
    last: usize,
    /// Frames and streams queued over all peers (0: the progress loop
    /// looks at no peer).
    pub(super) owed: usize,
    /// Links that queue behind a full socket (TCP), which progress flushes.
    pub(super) buffering: usize,
}

impl Peers {
    #[inline(always)]
    pub(super) fn find(&mut self, to: &SocketAddr) -> Option<usize> {
        if self.list.get(self.last).is_some_and(|p| p.addr == *to) {
            return Some(self.last);
        }
        let i = *self.index.get(to)?;
        self.last = i;
        Some(i)
    }

    pub(super) fn get(&mut self, to: &SocketAddr) -> Option<&TxPeer> {
        self.find(to).map(|i| &self.list[i])
    }

    pub(super) fn insert(&mut self, p: TxPeer) -> &TxPeer {
        self.buffering += p.link.props().buffers as usize;
        self.index.insert(p.addr, self.list.len());
        self.list.push(p);
        self.last = self.list.len() - 1;
        &self.list[self.last]
    }

    pub(super) fn get_mut(&mut self, to: &SocketAddr) -> Option<&mut TxPeer> {
        self.find(to).map(|i| &mut self.list[i])
    }

    /// Queue a control frame for `to` (an open peer): whether its outbox
    /// now holds more than `max` bytes and reading it is to stop (once).
    pub(super) fn queue_ctrl(&mut self, to: &SocketAddr, frame: Vec<u8>, max: usize) -> bool {
        let Some(p) = self.get_mut(to) else { return false };
        p.outbox_bytes += frame.len();
        p.outbox.push_back(frame);
        let stop = p.outbox_bytes > max && !p.outbox_paused;
        p.outbox_paused |= stop;
        self.owed += 1;
        stop
    }

    /// Queue a stream for its peer (an open one).
    pub(super) fn queue_stream(&mut self, st: Stream) {
        if let Some(p) = self.get_mut(&st.to) {
            p.streams.push_back(st);
            self.owed += 1;
        }
    }

    pub(super) fn remove(&mut self, to: &SocketAddr) {
        if let Some(i) = self.index.remove(to) {
            let gone = self.list.swap_remove(i);
            self.buffering -= gone.link.props().buffers as usize;
            self.owed -= gone.outbox.len() + gone.streams.len();
            if let Some(moved) = self.list.get(i) {
                self.index.insert(moved.addr, i);
            }
        }
    }
}

/// What operations on a link whose connect failed with `errno` fail with
/// (FI_ECONNREFUSED or FI_EHOSTUNREACH), and why, for the log line.
pub(super) fn unreachable(errno: i32) -> (u32, String) {
    if errno == libc::ECONNREFUSED {
        let why =
            "refused the TCP connection: nothing listens at that address; is the peer running and its endpoint open?";
        (ffi::FI_ECONNREFUSED, why.to_string())
    } else {
        let why = format!(
            "could not be connected to over TCP ({}; a connect is given {} s): is the address right and reachable from here (route, firewall)?",
            std::io::Error::from_raw_os_error(errno),
            crate::wire::CONNECT_WAIT.as_secs()
        );
        (ffi::FI_EHOSTUNREACH, why)
    }
}

impl Engine {
    /// Fail what gone peers left pending once our queue has been read past
    /// everything they sent (see `peer_gone`).
    pub(super) fn settle_gone(&mut self) {
        // A send whose sender job the peer finished before it went away
        // is complete: its answer is in our slot, not our queue.
        if !self.sharing.offers.is_empty() {
            self.poll_offers();
        }
        let Some(rx) = &self.rx else { return };
        let (head, tail) = rx.positions();
        let mut i = 0;
        while i < self.gone.len() {
            let until = *self.gone[i].until.get_or_insert(tail);
            if head < until {
                i += 1;
                continue;
            }
            let g = self.gone.swap_remove(i);
            for id in g.ids {
                if let Some(p) = self.pending.remove(&id) {
                    self.fail_tx(p, g.err);
                }
            }
            for k in g.pulls {
                if let Some(Pull { what: PullFor::Recv { p, hdr }, .. }) = self.take_pull(&k) {
                    self.finish_open_job();
                    self.complete_recv(p, &hdr, k.0, ffi::FI_EIO);
                }
            }
        }
    }

    /// Forget peers whose endpoint closed or whose process died.
    pub(super) fn reap_dead_peers(&mut self) {
        let dead: Vec<(SocketAddr, LinkState)> =
            self.peers.list.iter().map(|p| (p.addr, p.link.state())).filter(|(_, s)| *s != LinkState::Open).collect();
        for (a, state) in dead {
            self.link_down(a, state);
        }
    }

    /// The link to `a` is no longer open (`state`): fail what waits on it,
    /// with the error that says why.
    pub(super) fn link_down(&mut self, a: SocketAddr, state: LinkState) {
        match state {
            LinkState::Open => {}
            LinkState::Closed => self.peer_gone(a, "closed its endpoint (or its connection was reset)"),
            LinkState::Dead => self.peer_gone(a, "is gone (its process exited)"),
            LinkState::Unreachable(errno) => {
                let (err, what) = unreachable(errno);
                // (Nothing reached it: no answer of its can be on its way.)
                self.peer_failed(a, &what, err, Some(0));
            }
        }
    }

    /// Hellos of peers that connected to us (address, epoch): one of
    /// another epoch than our link to that address reached means the
    /// endpoint there was replaced (a restarted process): what we sent to
    /// the old one fails, and our next frame to that address opens a link
    /// to the new one. (A link whose hello has not come yet may already
    /// reach the new endpoint: it stays.)
    pub(super) fn peers_restarted(&mut self, hellos: Vec<(SocketAddr, u32)>) {
        for (a, epoch) in hellos {
            let old = self.peers.get(&a).map_or(0, |p| p.link.epoch());
            if old != 0 && old != epoch {
                self.peer_gone(a, &format!("was replaced by a new endpoint (epoch {old:#x} -> {epoch:#x}: restarted)"));
            }
        }
    }

    /// Whether process `pid` owns the queue of the endpoint named `from`
    /// (the sender's link, opened by `closed_peer` before any copy): what
    /// a header says of its sender is checked against what its queue file
    /// records.
    pub(super) fn owns_its_queue(&mut self, from: &SocketAddr, pid: u32) -> bool {
        self.peers.get(from).is_some_and(|p| p.link.vouches(pid))
    }

    /// Whether `a`'s endpoint has closed (or its queue is gone): checked
    /// before copying into or out of its buffers. One load of its queue's
    /// header when we know it (we are about to answer it anyway).
    ///
    /// `msg_id` (an operation id of the sender's, 0: none) names the
    /// endpoint that sent the message: its high half is that endpoint's
    /// epoch, so a message of a closed endpoint is told from one of a new
    /// endpoint that opened under the same address since.
    pub(super) fn closed_peer(&mut self, a: &SocketAddr, msg_id: u64) -> bool {
        match self.peer(*a) {
            // (Epoch 0: not known yet, TCP before the peer's hello arrived.)
            Ok(p) if !p.link.closed() => msg_id != 0 && p.link.epoch() != 0 && (msg_id >> 32) as u32 != p.link.epoch(),
            Ok(_) => {
                self.peer_gone(*a, "closed its endpoint");
                true
            }
            // (No endpoint there any more.)
            Err(_) => true,
        }
    }

    /// A peer's endpoint is gone: closed (its process may live on, and may
    /// open a new endpoint under the same address) or its process died.
    /// Forget its queue, fail our operations with it (FI_ECONNABORTED),
    /// drop what we still owed it (control messages, pushed chunks), fail
    /// the receives it was pushing to us (FI_EIO), and mark its sends that
    /// no receive has matched yet: their buffers are no longer its to
    /// give. Nothing of this answers the peer, so no message meant for it
    /// reaches a new endpoint at its address.
    ///
    /// What the peer sent before it went is in our queue (its pushes came
    /// before its close or its death): its operations and pulls are failed
    /// only once we have read our queue past them (`settle_gone`), so an
    /// answer already on its way still completes what it answers.
    pub(super) fn peer_gone(&mut self, a: SocketAddr, why: &str) {
        self.peer_failed(a, why, ffi::FI_ECONNABORTED, None);
    }

    /// `peer_gone`, failing our operations with `err`, once our queue's
    /// consumer passes `until` (None: its tail now, as `peer_gone`).
    pub(super) fn peer_failed(&mut self, a: SocketAddr, why: &str, err: u32, until: Option<u64>) {
        let ids: Vec<u64> = self.pending.iter().filter(|(_, p)| p.peer == a).map(|(id, _)| *id).collect();
        self.peers.remove(&a);
        self.pulls.dropping.retain(|k, _| k.0 != a);
        let pulls: Vec<(SocketAddr, u64)> = self.pulls.open.keys().filter(|k| k.0 == a).copied().collect();
        // (A peer that goes with nothing pending is the usual end of a
        // job, every rank closing: no warning for it. A rendezvous of its
        // still unmatched is something: its receive will fail.)
        let rts = self.unexpected.iter().flat_map(|q| q.iter()).filter(|u| u.from == a && u.hdr.op == op::RTS).count()
            + self.srx_peer_gone(a);
        if ids.is_empty() && pulls.is_empty() && rts == 0 {
            tracing::debug!("peer {a} {why}; nothing was pending with it");
        } else {
            tracing::warn!(
                "peer {a} {why}; failing the {} operations and {} incoming transfers pending with it ({rts} of its rendezvous sends unmatched)",
                ids.len(),
                pulls.len()
            );
        }
        if !ids.is_empty() || !pulls.is_empty() {
            self.gone.push(Gone { ids, pulls, until, err });
        }
        for q in &mut self.unexpected {
            for u in q.iter_mut().filter(|u| u.from == a && u.hdr.op == op::RTS) {
                u.gone = true;
            }
        }
        if let Some(k) = self.sharing.unpaired.as_mut().filter(|k| k.from == a) {
            k.gone = true;
        }
    }
}
