//! Operations the engine keeps before posting them: behind an FI_FENCE,
//! or until a counter reaches a threshold (FI_TRIGGER).
//!
//! FI_FENCE (fi_endpoint(3), fi_rma(3)): an operation posted with
//! FI_FENCE, and every operation posted to the same peer after it, waits
//! until every operation posted to that peer before it has completed. The
//! fenced operation is accepted (the call returns 0) and kept with its
//! peer; each progress call posts the kept operations whose turn has come,
//! in the order they were posted. An operation that fails when it is
//! finally posted gets an error completion (and counts an error), as if it
//! had failed on the wire; one the peer's queue cannot take yet
//! (-FI_EAGAIN) stays first in line.
//!
//! FI_TRIGGER (fi_trigger(3), threshold triggers): a triggered operation
//! is checked as any operation is (its peer resolved, an atomic's
//! datatype and sizes), accepted (0) and armed; it is posted when its
//! counter's value reaches the threshold, at once if it already has. Each
//! progress call fires the armed operations whose counters reached their
//! thresholds, in the order they were armed (firing one may complete it
//! at once and count, which fires the next). An armed operation holds
//! nothing up: operations posted after it, to any peer, go as usual (its
//! counter often counts exactly those). Once fired it is posted as if the
//! application posted it at that moment: behind what is kept for its peer
//! and under its own FI_FENCE, if it has one; a peer's full queue keeps it
//! first in line for that peer as above; a failure is an error completion.
//! Its completion reports the triggered context as its op_context.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

use oxmr_ffi as ffi;

use super::{total, AtomicOp, Engine, Kind, RmaOp, TxOp};
use crate::error::Result;
use crate::queues::cntr::Counter;
use crate::queues::cq::CqError;

/// An operation the engine keeps before posting it.
pub enum Held {
    Send(TxOp),
    Rma(RmaOp),
    Atomic(AtomicOp),
}

impl Held {
    fn ctx(&self) -> usize {
        match self {
            Held::Send(o) => o.ctx,
            Held::Rma(o) => o.ctx,
            Held::Atomic(o) => o.ctx,
        }
    }

    fn flags(&self) -> u64 {
        let f = match self {
            Held::Send(o) => o.flags,
            Held::Rma(o) => o.flags,
            Held::Atomic(o) => o.flags,
        };
        f.unwrap_or(0)
    }

    /// Its completion flags and counter slot (as its completion's), and
    /// its length, for an error completion.
    fn report(&self) -> (u64, usize, usize) {
        let (kind, tagged, len) = match self {
            Held::Send(o) => (Kind::Send, o.tag.is_some(), total(&o.iovs)),
            Held::Rma(o) => (if o.read { Kind::Read } else { Kind::Write }, false, total(&o.iovs)),
            Held::Atomic(o) => {
                let fetch = o.what.call != crate::mr::atomic::Call::Write;
                (if fetch { Kind::Fetch } else { Kind::Atomic }, false, total(&o.operand).max(total(&o.result)))
            }
        };
        let (flags, slot) = kind.flags_and_counter(tagged);
        (flags, slot, len)
    }
}

/// A threshold trigger (`struct fi_trigger_threshold`): the operation is
/// posted once `cntr`'s value is at least `threshold`.
pub struct Trigger {
    pub cntr: Arc<Counter>,
    pub threshold: u64,
}

impl Trigger {
    fn reached(&self) -> bool {
        self.cntr.value() >= self.threshold
    }
}

/// A triggered operation waiting for its counter.
struct Armed {
    trigger: Trigger,
    /// Its peer when it was armed (where it waits in line if that peer's
    /// queue is full when it fires).
    to: SocketAddr,
    op: Held,
    /// The copy of an inject's data, which `op` points into.
    _copy: Option<Vec<u8>>,
}

/// The operations kept behind fences, each with its peer, in posting
/// order; and the armed triggered operations.
#[derive(Default)]
pub(super) struct Fences {
    held: VecDeque<(SocketAddr, Held)>,
    /// The copies of held injects' data (their buffers are the
    /// application's again when the call returns), each held operation
    /// pointing into its own (a Vec's data does not move with the Vec).
    copies: VecDeque<Vec<u8>>,
    /// `release_fenced` is posting a kept operation (which then waits no
    /// more).
    releasing: bool,
    /// The trigger of the operation `post_triggered` is posting: its
    /// posting path's `must_wait` answers yes, and `hold` arms it.
    arming: Option<Trigger>,
    /// Triggered operations, in the order they were armed.
    armed: VecDeque<Armed>,
}

/// Point an inject's source at a copy of its data (its buffers are the
/// application's again when the call returns); the copy, or None for
/// another operation.
fn copy_inject(op: &mut Held) -> Option<Vec<u8>> {
    if op.flags() & (ffi::FI_INJECT as u64 | super::INJECT_CALL) == 0 {
        return None;
    }
    let src = match op {
        Held::Send(o) => &mut o.iovs,
        Held::Rma(o) => &mut o.iovs,
        Held::Atomic(o) => &mut o.operand,
    };
    let mut copy = Vec::new();
    // SAFETY: an inject's source buffers, readable for this call
    // (fi_inject(3) and the like), or a copy made by an earlier call.
    unsafe { crate::mr::local::gather(src, &mut copy) };
    *src = crate::protocol::Iovs::one(copy.as_ptr() as usize, copy.len());
    Some(copy)
}

impl Engine {
    /// Whether an operation to `to` with `flags` must wait: it is being
    /// armed (`post_triggered`), or it is fenced and something posted to
    /// that peer before it is still pending, or something posted to that
    /// peer before it waits already.
    #[inline(always)]
    pub(super) fn must_wait(&self, to: &SocketAddr, flags: u64) -> bool {
        // (`held` is asked if empty first: a deque's search costs ~20
        // instructions even then, on every send.)
        self.fences.arming.is_some()
            || (!self.fences.releasing
                && ((!self.fences.held.is_empty() && self.fences.held.iter().any(|(p, _)| p == to))
                    || (flags & ffi::FI_FENCE as u64 != 0 && self.pending.values().any(|p| &p.peer == to))))
    }

    /// Keep an operation: arm it (`post_triggered`), or keep it for
    /// `release_fenced`.
    pub(super) fn hold(&mut self, to: SocketAddr, mut op: Held) -> Result<()> {
        let copy = copy_inject(&mut op);
        if let Some(trigger) = self.fences.arming.take() {
            tracing::debug!("arming an operation to {to} until a counter reaches {}", trigger.threshold);
            self.fences.armed.push_back(Armed { trigger, to, op, _copy: copy });
            return Ok(());
        }
        tracing::debug!("holding an operation to {to} behind a fence");
        self.fences.copies.extend(copy);
        self.fences.held.push_back((to, op));
        Ok(())
    }

    /// Post an operation through its usual path.
    fn post_held(&mut self, op: &Held) -> Result<()> {
        match op {
            Held::Send(o) => self.send(o),
            Held::Rma(o) => self.rma(o.clone()),
            Held::Atomic(o) => self.atomic(o),
        }
    }

    /// A triggered operation (FI_TRIGGER with a threshold trigger; `op`'s
    /// flags without FI_TRIGGER): checked and armed, or posted at once
    /// if the counter has reached the threshold already. Errors are the
    /// posting call's.
    pub fn post_triggered(&mut self, trigger: Trigger, op: Held) -> Result<()> {
        if trigger.reached() {
            return self.post_held(&op);
        }
        self.fences.arming = Some(trigger);
        let r = self.post_held(&op);
        // (Left when the call failed before it reached `must_wait`: every
        // posting path that returns Ok went through it.)
        let left = self.fences.arming.take();
        debug_assert!(r.is_err() || left.is_none(), "a triggered operation was posted without being armed");
        r
    }

    /// fi_cancel of an armed triggered operation: it is dropped and
    /// completes with FI_ECANCELED. Whether one had that context.
    pub fn cancel_triggered(&mut self, ctx: usize) -> bool {
        let Some(i) = self.fences.armed.iter().position(|a| a.op.ctx() == ctx) else { return false };
        let a = self.fences.armed.remove(i).expect("position is in range");
        let (flags, _, len) = a.op.report();
        if let Some(cq) = &self.bound.tx_cq {
            cq.push_error(CqError {
                op_context: ctx,
                flags,
                len,
                err: ffi::FI_ECANCELED as i32,
                prov_errno: ffi::FI_ECANCELED as i32,
                src: ffi::FI_ADDR_NOTAVAIL,
                ..Default::default()
            });
        }
        true
    }

    /// A kept operation failed when it was posted: an error completion
    /// (whether or not one was asked for, as `fail_tx`), and its counter's
    /// error count.
    fn fail_held(&self, op: &Held, code: u32) {
        let (flags, slot, len) = op.report();
        self.count(slot, false);
        if let Some(cq) = &self.bound.tx_cq {
            cq.push_error(CqError {
                op_context: op.ctx(),
                flags,
                len,
                err: code as i32,
                prov_errno: code as i32,
                src: ffi::FI_ADDR_NOTAVAIL,
                ..Default::default()
            });
        }
    }

    /// Post the armed operations whose counters reached their thresholds,
    /// in the order they were armed.
    fn fire_triggered(&mut self) {
        // (From the start again after each: firing one may count, and an
        // earlier one may wait on that counter.)
        while let Some(i) = self.fences.armed.iter().position(|a| a.trigger.reached()) {
            let Some(a) = self.fences.armed.remove(i) else { break };
            tracing::debug!("a counter reached {}: posting its triggered operation", a.trigger.threshold);
            match self.post_held(&a.op) {
                Ok(()) => {}
                // (The peer's queue is full: first in line for that peer,
                // behind what was kept for it before; `hold` copies an
                // inject's data again, from ours.)
                Err(e) if e.code() == ffi::FI_EAGAIN => {
                    let _ = self.hold(a.to, a.op);
                }
                Err(e) => self.fail_held(&a.op, e.code()),
            }
        }
    }

    /// Post the kept operations whose turn has come (a progress call):
    /// the triggered ones whose counters reached their thresholds, then
    /// those behind fences.
    pub(super) fn release_fenced(&mut self) {
        if !self.fences.armed.is_empty() {
            self.fire_triggered();
        }
        let mut i = 0;
        while i < self.fences.held.len() {
            let (to, ref op) = self.fences.held[i];
            // (Only the first kept operation of each peer can go; one of a
            // peer with an earlier operation still kept waits behind it.)
            let first_of_peer = !self.fences.held.iter().take(i).any(|(p, _)| *p == to);
            let blocked = op.flags() & ffi::FI_FENCE as u64 != 0 && self.pending.values().any(|p| p.peer == to);
            if !first_of_peer || blocked {
                i += 1;
                continue;
            }
            let Some((_, op)) = self.fences.held.remove(i) else { break };
            self.fences.releasing = true;
            let r = self.post_held(&op);
            self.fences.releasing = false;
            if self.fences.held.is_empty() {
                // (Every held inject went out: each was copied when sent.)
                self.fences.copies.clear();
            }
            match r {
                Ok(()) => {}
                Err(e) if e.code() == ffi::FI_EAGAIN => {
                    self.fences.held.insert(i, (to, op));
                    i += 1;
                }
                Err(e) => self.fail_held(&op, e.code()),
            }
        }
    }

    /// Whether operations wait behind fences or for their triggers.
    pub(super) fn fenced(&self) -> bool {
        !self.fences.held.is_empty() || !self.fences.armed.is_empty()
    }

    /// Whether triggered operations wait for their counters (a counter
    /// may reach its threshold with no arrival to wake a sleeper: an
    /// application's fi_cntr_add, another endpoint's completion).
    pub(super) fn armed(&self) -> bool {
        !self.fences.armed.is_empty()
    }
}
