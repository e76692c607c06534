//! Atomics (fi_atomic(3)), both sides. The initiator sends one ATOMIC
//! message with its operands inline (at most `mr::atomic::MAX_BYTES` of
//! elements, and as many of compare operands); the target checks it
//! against its registrations exactly as an RMA (key, bounds, rights: a
//! remote write for every call, a remote read too for the fetch and
//! compare calls, a remote read alone for FI_ATOMIC_READ), executes it on
//! its own memory (`mr::atomic::execute`: atomic against every other
//! atomic on the same bytes), and answers with an ACK that carries the old
//! values for fetch and compare calls. The operation completes on that
//! ACK (delivery complete, and the result is in the result buffer).
//!
//! Atomics on one peer take effect in the order sent (they are data
//! messages, ordered with the RMA behind a stalled job as RMA is,
//! `rma_held`); getinfo still advertises no FI_ORDER_ATOMIC_* bit.

use std::net::SocketAddr;

use oxmr_ffi as ffi;

use super::{region_slice, total, Engine, Kind, TxDone, C_RREAD, C_RWRITE};
use crate::error::Result;
use crate::fail;
use crate::mr::atomic::{self as exec, Call};
use crate::mr::registry::REFUSED;
use crate::protocol::{flag, op, AtomicWhat, Hdr, Iovs};

/// An atomic operation, decoded from the C call.
#[derive(Clone)]
pub struct AtomicOp {
    pub ctx: usize,
    pub what: AtomicWhat,
    /// The operands (empty for FI_ATOMIC_READ), the compare operands
    /// (compare calls) and the result buffers (fetch and compare calls),
    /// each the same number of bytes.
    pub operand: Iovs,
    pub compare: Iovs,
    pub result: Iovs,
    pub dest: u64,
    pub addr: u64,
    pub key: u64,
    pub data: Option<u64>,
    /// As for [`super::TxOp::flags`].
    pub flags: Option<u64>,
}

/// The rights an atomic needs on the target's registration.
fn access(w: &AtomicWhat) -> u64 {
    let (r, wr) = (ffi::FI_REMOTE_READ as u64, ffi::FI_REMOTE_WRITE as u64);
    match w.call {
        Call::Write => wr,
        _ if w.op == ffi::FI_ATOMIC_READ => r,
        _ => r | wr,
    }
}

impl Engine {
    /// fi_atomic, fi_fetch_atomic, fi_compare_atomic and their variants.
    pub fn atomic(&mut self, o: &AtomicOp) -> Result<()> {
        let w = o.what;
        let Some(size) = exec::valid(w.call, w.op, w.dt) else {
            return Err(fail!(
                ffi::FI_EOPNOTSUPP,
                "atomic operation {} on datatype {} is not supported by this call (fi_atomicvalid, fi_fetch_atomicvalid and fi_compare_atomicvalid say which are)",
                w.op,
                w.dt
            ));
        };
        let len = if exec::has_operand(w.op) { total(&o.operand) } else { total(&o.result) };
        if len == 0 || !len.is_multiple_of(size) || len > exec::MAX_BYTES {
            return Err(fail!(
                ffi::FI_EINVAL,
                "atomic of {len} bytes: must be 1 to {} elements of {size} bytes (the count fi_atomicvalid reports)",
                exec::MAX_BYTES / size
            ));
        }
        let fetch = w.call != Call::Write;
        if fetch && total(&o.result) != len {
            return Err(fail!(
                ffi::FI_EINVAL,
                "atomic result buffers hold {} bytes for {len} bytes of operands",
                total(&o.result)
            ));
        }
        if w.call == Call::Compare && total(&o.compare) != len {
            return Err(fail!(
                ffi::FI_EINVAL,
                "atomic compare buffers hold {} bytes for {len} bytes of operands",
                total(&o.compare)
            ));
        }
        let to = self.resolve(o.dest)?;
        let flags = o.flags.unwrap_or(self.bound.tx_op_flags);
        if self.must_wait(&to, flags) {
            return self.hold(to, super::fence::Held::Atomic(o.clone()));
        }
        if fetch && flags & ffi::FI_INJECT as u64 != 0 {
            return Err(fail!(ffi::FI_EINVAL, "FI_INJECT on a fetch or compare atomic (it has a result to wait for)"));
        }
        let credit = self.credit(true, flags)?;
        let mut body = Vec::with_capacity(len * w.operands());
        // SAFETY: the application's operand and compare buffers, readable
        // for this call (fi_atomic(3)); their lengths were checked above.
        unsafe {
            if exec::has_operand(w.op) {
                crate::mr::local::gather(&o.operand, &mut body);
            }
            crate::mr::local::gather(&o.compare, &mut body);
        }
        let hdr = Hdr {
            op: op::ATOMIC,
            len: len as u64,
            tag: w.pack(),
            data: o.data.unwrap_or(0),
            flags: if o.data.is_some() { flag::CQ_DATA } else { 0 },
            rma_addr: o.addr,
            rma_key: o.key,
            msg_id: self.new_id(),
            ..Default::default()
        };
        self.push(to, hdr, &[&body])?;
        let kind = if fetch { Kind::Fetch } else { Kind::Atomic };
        let result = if fetch { o.result } else { Iovs::default() };
        self.await_answer(hdr.msg_id, TxDone { ctx: o.ctx, kind, tagged: false, len }, credit, to, result);
        Ok(())
    }

    /// Serve a peer's atomic: check it against our registrations, execute
    /// it, answer (with the old values for fetch and compare calls).
    pub(super) fn atomic_target(&mut self, h: Hdr, from: SocketAddr, body: &[u8]) {
        if h.msg_id == 0 {
            tracing::warn!("dropping an atomic from {from} without an operation id (a malformed or foreign message)");
            return;
        }
        let answer = |s: &mut Engine, status: u32, old: &[u8]| {
            s.push_ctrl_body(from, Hdr { op: op::ACK, msg_id: h.msg_id, status, ..Default::default() }, old)
        };
        let what = AtomicWhat::unpack(h.tag);
        let size = what.and_then(|w| exec::valid(w.call, w.op, w.dt));
        let (Some(w), Some(size)) = (what, size) else {
            tracing::warn!(
                "refused an atomic from {from}: operation/datatype/call {:#x} is not one oxmr executes",
                h.tag
            );
            return answer(self, ffi::FI_EOPNOTSUPP, &[]);
        };
        let len = h.len as usize;
        if len == 0 || !len.is_multiple_of(size) || len > exec::MAX_BYTES || body.len() != len * w.operands() {
            tracing::warn!(
                "refused an atomic from {from}: {len} bytes of {size}-byte elements with {} bytes of operands (a malformed or foreign message)",
                body.len()
            );
            return answer(self, ffi::FI_EINVAL, &[]);
        }
        self.mr.refresh();
        let g = match self.mr.registry.check(h.rma_key, h.rma_addr, h.len, access(&w)) {
            Ok(g) => g,
            Err(why) => {
                tracing::warn!(
                    "refused remote atomic from {from}: key {:#x} addr {:#x} len {len}: {why:?}",
                    h.rma_key,
                    h.rma_addr
                );
                return self.rma_done(h, from, REFUSED, None);
            }
        };
        let local = region_slice(&g.region.iovs, g.offset, len);
        if g.region.phys || local.iter().any(|&(a, l)| crate::mr::phys::is_device(a, l)) {
            tracing::warn!(
                "refused remote atomic from {from} on device memory (key {:#x}): oxmr executes atomics on host memory only",
                h.rma_key
            );
            return answer(self, ffi::FI_EOPNOTSUPP, &[]);
        }
        let (operand, compare) = match exec::has_operand(w.op) {
            true => body.split_at(len),
            false => (&[][..], body),
        };
        let mut old = Vec::with_capacity(len);
        // SAFETY: `local` lies inside a host-memory registration the check
        // just granted for this call's remote rights, held by `g`.
        let done = unsafe { exec::execute(w.op, w.dt, &local, operand, compare, &mut old) };
        if done != len {
            tracing::warn!("remote atomic from {from}: only {done} of {len} bytes could be reached");
            return answer(self, ffi::FI_EIO, &[]);
        }
        self.rma_took_effect(&h, from, Some(&g.region));
        answer(self, 0, if w.call == Call::Write { &[] } else { &old });
    }

    /// An answer that carries data: a fetch or compare atomic's old values
    /// into its result buffers, or a small read's bytes into its
    /// destination. Returns the status it completes with (an answer of
    /// the wrong length is an error: the target lied or broke).
    pub(super) fn fetched(&self, result: &Iovs, len: usize, body: &[u8], from: &SocketAddr) -> u32 {
        if body.len() != len {
            tracing::warn!(
                "an atomic's answer from {from} carries {} bytes of old values for {len} bytes: failing it",
                body.len()
            );
            return ffi::FI_EIO;
        }
        // SAFETY: the application's result buffers of this operation,
        // writable until it completes (fi_atomic(3)), `len` bytes in all.
        unsafe { crate::mr::local::scatter(result, body) };
        0
    }
}

/// The counter an atomic that took effect at this target counts in:
/// FI_ATOMIC_READ a remote read, every other one a remote write.
pub(super) fn target_counter(h: &Hdr) -> usize {
    match AtomicWhat::unpack(h.tag) {
        Some(w) if w.op == ffi::FI_ATOMIC_READ => C_RREAD,
        _ => C_RWRITE,
    }
}
