//! FI_FENCE (fi_endpoint(3), fi_rma(3)): an operation posted with
//! FI_FENCE, and every operation posted to the same peer after it, waits
//! until every operation posted to that peer before it has completed. The
//! fenced operation is accepted (the call returns 0) and kept with its
//! peer; each progress call posts the kept operations whose turn has come,
//! in the order they were posted. An operation that fails when it is
//! finally posted gets an error completion, as if it had failed on the
//! wire; one the peer's queue cannot take yet (-FI_EAGAIN) stays first in
//! line.

use std::collections::VecDeque;
use std::net::SocketAddr;

use oxmr_ffi as ffi;

use super::{AtomicOp, Engine, RmaOp, TxOp};
use crate::error::Result;
use crate::queues::cq::CqError;

/// An operation waiting for a fence.
pub(super) enum Held {
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

    /// Its completion flags, for an error completion.
    fn cq_flags(&self) -> u64 {
        match self {
            Held::Send(o) => ffi::FI_SEND as u64 | if o.tag.is_some() { ffi::FI_TAGGED } else { ffi::FI_MSG } as u64,
            Held::Rma(o) => (ffi::FI_RMA | if o.read { ffi::FI_READ } else { ffi::FI_WRITE }) as u64,
            Held::Atomic(_) => ffi::FI_ATOMIC as u64,
        }
    }
}

/// The operations kept behind fences, each with its peer, in posting order.
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
}

impl Engine {
    /// Whether an operation to `to` with `flags` must wait: it is fenced
    /// and something posted to that peer before it is still pending, or
    /// something posted to that peer before it waits already.
    pub(super) fn must_wait(&self, to: &SocketAddr, flags: u64) -> bool {
        !self.fences.releasing
            && (self.fences.held.iter().any(|(p, _)| p == to)
                || (flags & ffi::FI_FENCE as u64 != 0 && self.pending.values().any(|p| &p.peer == to)))
    }

    /// Keep an operation for `release_fenced`.
    pub(super) fn hold(&mut self, to: SocketAddr, mut op: Held) -> Result<()> {
        tracing::debug!("holding an operation to {to} behind a fence");
        if op.flags() & (ffi::FI_INJECT as u64 | super::INJECT_CALL) != 0 {
            let src = match &mut op {
                Held::Send(o) => &mut o.iovs,
                Held::Rma(o) => &mut o.iovs,
                Held::Atomic(o) => &mut o.operand,
            };
            let mut copy = Vec::new();
            // SAFETY: an inject's source buffers, readable for this call
            // (fi_inject(3) and the like).
            unsafe { crate::mr::local::gather(src, &mut copy) };
            *src = crate::protocol::Iovs::one(copy.as_ptr() as usize, copy.len());
            self.fences.copies.push_back(copy);
        }
        self.fences.held.push_back((to, op));
        Ok(())
    }

    /// Post the kept operations whose turn has come (a progress call).
    pub(super) fn release_fenced(&mut self) {
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
            let r = match &op {
                Held::Send(o) => self.send(o),
                Held::Rma(o) => self.rma(o.clone()),
                Held::Atomic(o) => self.atomic(o),
            };
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
                Err(e) => {
                    if let Some(cq) = &self.bound.tx_cq {
                        cq.push_error(CqError {
                            op_context: op.ctx(),
                            flags: op.cq_flags(),
                            err: e.code() as i32,
                            prov_errno: e.code() as i32,
                            src: ffi::FI_ADDR_NOTAVAIL,
                            ..Default::default()
                        });
                    }
                }
            }
        }
    }

    /// Whether operations wait behind fences.
    pub(super) fn fenced(&self) -> bool {
        !self.fences.held.is_empty()
    }
}
