//! Completions: CQ entries, error entries and counters for the operations
//! that finish, and the receiver's answer to a sender that waits for it.

use std::net::SocketAddr;

use oxmr_ffi as ffi;

use super::{total, Engine, HeldRecv, Kind, Multi, Pending, Posted, C_RECV, SPARE_POSTED};
use crate::protocol::{flag, op, Hdr};
use crate::queues::cq::{CqEntry, CqError, Credit};

/// The order receives are matched and reported in (`Engine::order`): the
/// next place to give, the next to report, and the completions that wait
/// for earlier ones (a receive whose data is pulled completes after
/// receives matched later whose data was inline; it is still reported
/// first).
pub(super) struct RecvOrder {
    pub(super) next_match: u64,
    pub(super) next_report: u64,
    pub(super) held: std::collections::BTreeMap<u64, HeldRecv>,
}

impl Default for RecvOrder {
    fn default() -> Self {
        RecvOrder { next_match: 1, next_report: 1, held: Default::default() }
    }
}

impl Engine {
    pub(super) fn complete_tx(
        &self,
        ctx: usize,
        kind: Kind,
        tagged: bool,
        len: usize,
        credit: Option<Credit>,
        report: bool,
    ) {
        let (cflags, slot) = kind.flags_and_counter(tagged);
        if report {
            self.count(slot, true);
        }
        if let Some(c) = credit {
            c.complete_into(
                CqEntry { op_context: ctx, flags: cflags, len, src: ffi::FI_ADDR_NOTAVAIL, ..Default::default() },
                &self.spare_cq[1],
            );
        }
    }

    pub(super) fn fail_tx(&self, p: Pending, code: u32) {
        let (cflags, slot) = p.kind.flags_and_counter(p.tagged);
        if p.report {
            self.count(slot, false);
        }
        // An operation that fails reports its error to the bound CQ even
        // when it asked for no completion (FI_SELECTIVE_COMPLETION without
        // FI_COMPLETION, or an inject call, whose op_context is NULL):
        // fi_cq(3), "error completions are generated for all operations".
        // (Error entries take no credit: `push_error` is never refused.)
        drop(p.credit);
        if let Some(cq) = &self.bound.tx_cq {
            cq.push_error(CqError {
                op_context: p.ctx,
                flags: cflags,
                len: p.len,
                err: code as i32,
                prov_errno: code as i32,
                src: ffi::FI_ADDR_NOTAVAIL,
                ..Default::default()
            });
        }
    }

    /// Complete a receive whose data is in place (or failed with `status`),
    /// and answer the sender if it waits for us.
    #[inline(always)]
    pub(super) fn finish_recv(&mut self, p: Posted, hdr: &Hdr, from: SocketAddr, status: u32) {
        self.finish_open_job();
        self.complete_recv(p, hdr, from, status);
        if hdr.op == op::RTS || hdr.flags & flag::NEED_ACK != 0 {
            self.push_ctrl(from, Hdr { op: op::ACK, msg_id: hdr.msg_id, status, ..Default::default() });
        }
    }

    /// A place in matching order, for a receive a message just matched.
    pub(super) fn matched(&mut self) -> u64 {
        let s = self.order.next_match;
        self.order.next_match += 1;
        s
    }

    /// The receive completion (or error) of `finish_recv`, without the
    /// answer to the sender: reported in matching order. A receive whose
    /// data is still being pushed to us (a pull: TCP, or memory the shm
    /// wire cannot reach) holds back the reports of receives matched after
    /// it, which wait here (their data is in place, their senders
    /// answered); every held one is reported once the earlier ones are.
    /// (One order for all peers: a pull from one peer holds back another
    /// peer's receives too, for as long as it takes.)
    #[inline(always)]
    pub(super) fn complete_recv(&mut self, p: Posted, hdr: &Hdr, from: SocketAddr, status: u32) {
        if p.seq != self.order.next_report && p.seq != 0 {
            self.order.held.insert(p.seq, (p, *hdr, from, status));
            return;
        }
        if p.seq != 0 {
            self.order.next_report += 1;
        }
        self.report_recv(p, hdr, &from, status);
        while let Some(e) = self.order.held.first_entry().filter(|e| *e.key() == self.order.next_report) {
            let (p, hdr, from, status) = e.remove();
            self.order.next_report += 1;
            self.report_recv(p, &hdr, &from, status);
        }
    }

    /// The error completion of a canceled receive (no counter: nothing
    /// was received).
    pub(super) fn report_canceled(&self, ctx: usize, flags: u64) {
        if let Some(cq) = &self.bound.rx_cq {
            cq.push_error(CqError {
                op_context: ctx,
                flags,
                err: ffi::FI_ECANCELED as i32,
                prov_errno: ffi::FI_ECANCELED as i32,
                src: ffi::FI_ADDR_NOTAVAIL,
                ..Default::default()
            });
        }
    }

    #[inline(always)]
    fn report_recv(&mut self, mut p: Posted, hdr: &Hdr, from: &SocketAddr, status: u32) {
        let room = total(&p.iovs);
        let len = hdr.len as usize;
        let n = len.min(room);
        let tagged = hdr.flags & flag::TAGGED != 0;
        let mut cflags = ffi::FI_RECV as u64 | if tagged { ffi::FI_TAGGED } else { ffi::FI_MSG } as u64;
        if hdr.flags & flag::CQ_DATA != 0 {
            cflags |= ffi::FI_REMOTE_CQ_DATA as u64;
        }
        if p.multi == Multi::Last {
            // (The last completion of a multi-receive buffer: multi.rs.)
            cflags |= ffi::FI_MULTI_RECV as u64;
        }
        if status == ffi::FI_ECANCELED {
            // (A multi-receive buffer's cancel, `cancel_multi`: no message.)
            self.report_canceled(p.ctx, cflags);
            return self.recycle(p);
        }
        let src = self.src_fi_addr(from);
        let buf = p.iovs.first().map_or(0, |x| x.0);
        if status == 0 && len <= room {
            self.count(C_RECV, true);
            if let Some(c) = p.credit.take() {
                c.complete_into(
                    CqEntry { op_context: p.ctx, flags: cflags, len: n, buf, data: hdr.data, tag: hdr.tag, src },
                    &self.spare_cq[0],
                );
            }
        } else {
            let err = if status != 0 { status } else { ffi::FI_ETRUNC };
            self.count(C_RECV, false);
            // (An error completion whether or not one was asked for: see
            // `fail_tx`.)
            drop(p.credit.take());
            if let Some(cq) = &self.bound.rx_cq {
                cq.push_error(CqError {
                    op_context: p.ctx,
                    flags: cflags,
                    len: n,
                    buf,
                    data: hdr.data,
                    tag: hdr.tag,
                    olen: len - n,
                    err: err as i32,
                    prov_errno: err as i32,
                    src,
                });
            }
        }
        self.recycle(p);
    }

    /// Keep a completed receive's box for the next one posted
    /// (`Engine::posted_box`): no allocation per receive.
    #[inline(always)]
    fn recycle(&mut self, p: Posted) {
        if self.spare_posted.len() < SPARE_POSTED {
            self.spare_posted.push(p);
        }
    }
}
