//! Shared receive contexts (fi_srx_context, fi_endpoint(3) "Shared
//! Contexts"): the receives posted to one, and the messages no receive
//! matched yet, of every endpoint bound to it.
//!
//! An endpoint bound to a shared receive context matches its arrivals
//! against the context's posted receives (`SharedRx::posted`) instead of
//! its own, and keeps what none matched in the context's unexpected
//! queue, tagged with its engine (`owner`): the message's data, its
//! sender's buffers and their liveness stay that engine's to serve. The
//! context's one lock is taken by an engine while it holds its own lock
//! (engine, then context: never the other way round), so a receive posted
//! to the context that matches a message another engine keeps cannot be
//! delivered there and then: it is handed to that engine (`handoff`),
//! which delivers it in its next progress call (`Engine::take_handoffs`),
//! into the CQ bound to it ("completed receive operations are posted to
//! the CQs bound to the endpoint", fi_endpoint(3)). Searching the posted
//! receives and keeping a message is one hold of the lock, as searching
//! the unexpected messages and posting a receive is, so a message and a
//! receive that match always meet.
//!
//! An endpoint that closes drops the messages it kept, and places the
//! receives handed to it again (`Queues::place`, at their place in
//! posting order: they may match another endpoint's message now).
//!
//! A receive's CQ slot is taken when it matches (the context has no CQ of
//! its own): a shared receive's completion is always accepted by its
//! endpoint's CQ, which may so hold up to the context's `size` more than
//! its own. Not on a shared receive context: multi-receive buffers,
//! FI_PEEK/FI_CLAIM (`-FI_EOPNOTSUPP` at the call).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use oxmr_ffi as ffi;

use super::multi::Multi;
use super::{matches, Engine, Posted, PostedRecv, Unexpected};
use crate::error::{Error, Result};
use crate::protocol::{flag, op, Hdr, Iovs};
use crate::queues::cq::{CqCore, CqError};
use crate::sys::LockExt;

/// A receive posted to the context, with the flags it was posted with
/// (whether it wants a completion is its endpoint's call, when it
/// matches).
struct Shared {
    p: Posted,
    flags: u64,
    /// Its place in posting order (a receive handed back by an endpoint
    /// that closed goes back to it).
    seq: u64,
}

#[derive(Default)]
struct Queues {
    posted: [VecDeque<Shared>; 2],
    /// (owner, message)
    unexpected: [VecDeque<(u64, Unexpected)>; 2],
    /// (owner, receive, message): matched at the post, to deliver.
    handoff: Vec<(u64, Shared, Unexpected)>,
    /// The bound endpoints, in binding order, with their receive CQs: a
    /// cancelled receive is reported to the first one's (the context has
    /// no CQ of its own).
    owners: Vec<(u64, Option<Arc<CqCore>>)>,
    next_seq: u64,
}

impl Queues {
    /// A receive into the context: handed to the endpoint that keeps a
    /// message it matches, else among the posted ones in posting order.
    /// A handoff wakes a thread sleeping on that endpoint's receive CQ
    /// (or a wait set or poll() over its fd): no arrival rings it.
    fn place(&mut self, s: Shared, tagged: bool, handoffs: &AtomicUsize) {
        let q = tagged as usize;
        let found = self.unexpected[q]
            .iter()
            .position(|(_, u)| u.claimed.is_none() && matches(&s.p, tagged, u.hdr.tag, &u.from));
        match found {
            Some(i) => {
                let (owner, u) = self.unexpected[q].remove(i).expect("position is in range");
                self.handoff.push((owner, s, u));
                handoffs.fetch_add(1, Ordering::Release);
                if let Some((_, Some(cq))) = self.owners.iter().find(|(o, _)| *o == owner) {
                    cq.waiter.signal();
                }
            }
            None => {
                let at = self.posted[q].iter().position(|x| x.seq > s.seq).unwrap_or(self.posted[q].len());
                self.posted[q].insert(at, s);
            }
        }
    }
}

/// A shared receive context's queues.
#[derive(Default)]
pub struct SharedRx {
    q: Mutex<Queues>,
    /// Handoffs waiting: an engine looks at the queue only when some are.
    handoffs: AtomicUsize,
    next_owner: AtomicU64,
    /// The most receives posted at once (fi_rx_attr.size).
    size: usize,
}

impl SharedRx {
    /// A context holding at most `size` posted receives.
    pub fn new(size: usize) -> Self {
        SharedRx { size, ..Default::default() }
    }

    /// An engine binds: its owner tag; `rx_cq` reports cancelled receives
    /// when it is the first.
    fn join(&self, rx_cq: Option<&Arc<CqCore>>) -> u64 {
        let me = self.next_owner.fetch_add(1, Ordering::Relaxed);
        self.q.lock_ok().owners.push((me, rx_cq.cloned()));
        me
    }

    /// fi_recv / fi_trecv on the context: `src` already resolved (a
    /// directed receive), `tag` None for untagged.
    pub fn post(
        &self,
        ctx: usize,
        iovs: Iovs,
        src: Option<SocketAddr>,
        tag: Option<(u64, u64)>,
        flags: u64,
    ) -> Result<()> {
        if flags & ffi::FI_MULTI_RECV as u64 != 0 {
            return Err(crate::fail!(
                ffi::FI_EOPNOTSUPP,
                "FI_MULTI_RECV on a shared receive context: oxmr takes multi-receive buffers on an endpoint's own receive context"
            ));
        }
        let tagged = tag.is_some();
        let (t, ignore) = tag.unwrap_or((0, 0));
        let p = Box::new(PostedRecv { ctx, iovs, src, tag: t, ignore, credit: None, seq: 0, multi: Multi::No });
        let mut g = self.q.lock_ok();
        let pending = g.posted[0].len() + g.posted[1].len();
        if pending >= self.size {
            return Err(Error::quiet(ffi::FI_EAGAIN));
        }
        let seq = g.next_seq;
        g.next_seq += 1;
        g.place(Shared { p, flags, seq }, tagged, &self.handoffs);
        Ok(())
    }

    /// Messages kept unmatched, and receives handed to an endpoint and not
    /// yet delivered (for tests).
    #[cfg(test)]
    pub(super) fn counts(&self) -> (usize, usize) {
        let g = self.q.lock_ok();
        (g.unexpected[0].len() + g.unexpected[1].len(), self.handoffs.load(Ordering::Acquire))
    }

    /// fi_cancel on the context: the receive posted with `ctx` is
    /// withdrawn and reported (FI_ECANCELED) to the first bound
    /// endpoint's receive CQ.
    pub fn cancel(&self, ctx: usize) -> Result<()> {
        let mut g = self.q.lock_ok();
        let Some(cq) = g.owners.iter().find_map(|(_, c)| c.clone()) else {
            return Err(crate::fail!(
                ffi::FI_EOPBADSTATE,
                "fi_cancel on a shared receive context with no enabled endpoint bound: its cancellation would have no CQ to be reported to"
            ));
        };
        for q in 0..2 {
            if let Some(i) = g.posted[q].iter().position(|s| s.p.ctx == ctx) {
                g.posted[q].remove(i);
                {
                    cq.push_error(CqError {
                        op_context: ctx,
                        flags: ffi::FI_RECV as u64 | if q == 1 { ffi::FI_TAGGED as u64 } else { ffi::FI_MSG as u64 },
                        err: ffi::FI_ECANCELED as i32,
                        prov_errno: ffi::FI_ECANCELED as i32,
                        src: ffi::FI_ADDR_NOTAVAIL,
                        ..Default::default()
                    });
                }
                return Ok(());
            }
        }
        Err(Error::quiet(ffi::FI_ENOENT))
    }
}

impl Engine {
    /// At construction: bind to the shared receive context in the bindings.
    pub(super) fn join_srx(&mut self) {
        if let Some(s) = self.bound.srx.clone() {
            let me = s.join(self.bound.rx_cq.as_ref());
            self.srx_owner = me;
        }
    }

    /// A receive of the context that matched here: its CQ slot, taken now,
    /// and its place in matching order.
    fn adopt(&mut self, s: Shared) -> Posted {
        let mut p = s.p;
        if self.wants(false, s.flags) {
            p.credit = self.bound.rx_cq.as_ref().map(|c| c.reserve_always());
        }
        p.seq = self.matched();
        p
    }

    /// An EAGER or RTS message at an endpoint bound to a shared receive
    /// context: into a receive posted there, or kept in its unexpected
    /// queue (the `on_message` arm for sends, with the context's queues).
    pub(super) fn on_send_shared(&mut self, h: Hdr, body: &[u8], from: SocketAddr, pid: u32) {
        let Some(s) = self.bound.srx.clone() else { return };
        // (Receives handed to us first: they were matched before this
        // message, and complete before it in matching order.)
        self.take_handoffs();
        let tagged = h.flags & flag::TAGGED != 0;
        let q = tagged as usize;
        let take = |g: &mut Queues| {
            let i = g.posted[q].iter().position(|s| matches(&s.p, tagged, h.tag, &from))?;
            g.posted[q].remove(i)
        };
        if h.op == op::EAGER {
            let got = take(&mut s.q.lock_ok());
            if let Some(shared) = got {
                let p = self.adopt(shared);
                self.eager_into(p, &h, body, from);
                return;
            }
        }
        let Some(u) = self.unexpected_of(h, body, from, pid) else { return };
        // (Searched again with the keeping, in one hold of the lock: a
        // receive posted since is found here.)
        let mut g = s.q.lock_ok();
        match take(&mut g) {
            Some(shared) => {
                drop(g);
                let p = self.adopt(shared);
                self.deliver(p, u);
            }
            None => {
                let (bytes, who) = (u.bytes(), u.from);
                g.unexpected[q].push_back((self.srx_owner, u));
                drop(g);
                self.count_unexpected(bytes, who);
            }
        }
    }

    /// Receives of the context matched to messages this endpoint keeps:
    /// delivered now (from progress).
    #[inline]
    pub(super) fn take_handoffs(&mut self) {
        // (Checked in line on every progress call; the taking is apart.)
        if self.handoffs_waiting() {
            self.take_handoffs_now();
        }
    }

    /// Whether the shared receive context handed us receives to take.
    #[inline]
    pub(super) fn handoffs_waiting(&self) -> bool {
        self.bound.srx.as_ref().is_some_and(|s| s.handoffs.load(Ordering::Acquire) != 0)
    }

    #[inline(never)]
    fn take_handoffs_now(&mut self) {
        let Some(s) = self.bound.srx.clone() else { return };
        let mine: Vec<(Shared, Unexpected)> = {
            let mut g = s.q.lock_ok();
            let me = self.srx_owner;
            let (mine, rest) = std::mem::take(&mut g.handoff).into_iter().partition(|(o, _, _)| *o == me);
            g.handoff = rest;
            mine.into_iter().map(|(_, p, u)| (p, u)).collect()
        };
        if mine.is_empty() {
            return;
        }
        s.handoffs.fetch_sub(mine.len(), Ordering::AcqRel);
        for (shared, u) in mine {
            self.uncount_unexpected(u.bytes());
            let p = self.adopt(shared);
            self.deliver(p, u);
        }
    }

    /// A peer gone: its unmatched rendezvous sends kept in the context for
    /// this endpoint are marked (their buffers may be something else now).
    pub(super) fn srx_peer_gone(&self, a: SocketAddr) -> usize {
        let Some(s) = self.bound.srx.as_ref() else { return 0 };
        let mut g = s.q.lock_ok();
        let me = self.srx_owner;
        let mut n = 0;
        for q in g.unexpected.iter_mut() {
            for (_, u) in q.iter_mut().filter(|(o, u)| *o == me && u.from == a && u.hdr.op == op::RTS) {
                u.gone = true;
                n += 1;
            }
        }
        for (_, _, u) in g.handoff.iter_mut().filter(|(o, _, u)| *o == me && u.from == a && u.hdr.op == op::RTS) {
            u.gone = true;
            n += 1;
        }
        n
    }

    /// Closing: what this endpoint kept in the context goes with it, and a
    /// receive handed to it goes back to the context's posted receives
    /// (first, as it was posted before those there now).
    pub(super) fn leave_srx(&mut self) {
        let Some(s) = self.bound.srx.take() else { return };
        let mut g = s.q.lock_ok();
        let me = self.srx_owner;
        for q in g.unexpected.iter_mut() {
            q.retain(|(o, _)| *o != me);
        }
        g.owners.retain(|(o, _)| *o != me);
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut g.handoff).into_iter().partition(|(o, _, _)| *o == me);
        g.handoff = rest;
        s.handoffs.fetch_sub(mine.len(), Ordering::AcqRel);
        // (Each placed again at its place in posting order, as if posted
        // now: it may match a message another endpoint keeps.)
        for (_, shared, u) in mine {
            g.place(shared, u.hdr.flags & flag::TAGGED != 0, &s.handoffs);
        }
    }

    /// Whether receives go to a shared receive context (then a receive
    /// posted to the endpoint itself is refused).
    pub(super) fn has_srx(&self) -> bool {
        self.bound.srx.is_some()
    }

    /// Whether a thread about to sleep on this endpoint must wake within a
    /// tick for the shared receive context: a handoff is waiting, or one
    /// could come that wakes nobody (a handoff signals the receive CQ
    /// only: not a receive counter read instead of it).
    pub(super) fn srx_tick(&self) -> bool {
        let Some(s) = self.bound.srx.as_ref() else { return false };
        self.bound.rx_cq.is_none() || self.bound.cntrs[1].is_some() || s.handoffs.load(Ordering::Acquire) > 0
    }
}
