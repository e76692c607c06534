//! Delivery: a matched message copied into its posted receive (inline,
//! through the link's copy of the sender's memory, as a shared copy, or
//! pulled from the sender when the wire cannot reach its memory).

use std::net::SocketAddr;

use oxmr_ffi as ffi;

use super::{clip, total, Engine, Job, JobFor, Paired, Posted, Pull, PullFor, Unexpected, SPARE_UNEXP_DATA};
use crate::protocol::{flag, op, Hdr};
use crate::wire::{Copied, SharedCopy, Span};

impl Engine {
    /// Put a matched message into a posted receive and complete both ends.
    pub(super) fn deliver(&mut self, p: Posted, u: Unexpected) {
        let room = total(&p.iovs);
        let len = u.hdr.len as usize;
        let n = len.min(room);
        if u.hdr.op == op::EAGER {
            // SAFETY: the application's posted receive buffers.
            unsafe { crate::mr::local::scatter(&p.iovs, &u.data[..n.min(u.data.len())]) };
            self.finish_recv(p, &u.hdr, u.from, 0);
            return self.recycle_unexpected(u);
        }
        // A sender's endpoint that closed (its process may live on) gave up
        // its buffers: its queue says so (one load when we know it).
        if u.gone || self.closed_peer(&u.from, u.hdr.msg_id) {
            return self.sender_closed(p, u.hdr, u.from);
        }
        // (We read the sender's buffers from the process that owns its
        // queue, never from another one the header names.)
        if !self.owns_its_queue(&u.from, u.pid) {
            tracing::warn!(
                "refusing a rendezvous send from {} naming process {}, which does not own its queue; a forged or foreign message",
                u.from,
                u.pid
            );
            return self.finish_recv(p, &u.hdr, u.from, ffi::FI_EINVAL);
        }
        let dest = clip(&p.iovs, n);
        // The sender offered a job in its region: take it when we would
        // share a lone transfer anyway (a busy receiver pipelines its own
        // jobs instead, and the sender's slot goes back on our ACK).
        if u.hdr.flags & flag::SJOB != 0 && !self.busy && self.can_share(n, &dest, &u.from) {
            let (slot, gen) = (u.hdr.rma_addr as u32, u.hdr.rma_key as u32);
            let t = self.peers.get(&u.from).map(|x| x.link.jobs());
            let chunk = self.job_chunk(n, false, dest.first().map_or(0, |l| l.0));
            let remote = clip(&u.iovs, n);
            let taken = t.flatten().and_then(|t| {
                SharedCopy::accept(t, slot, gen, chunk, Span { total: n, pid: u.pid, local: dest.clone(), remote })
            });
            if let Some(copy) = taken {
                let job = Job { copy, peer: u.from, what: JobFor::Recv { p, hdr: u.hdr } };
                self.work(&job, usize::MAX);
                self.finish_open_job();
                return self.finish_job(job);
            }
        }
        let src = clip(&u.iovs, n);
        let r = Box::new(Paired { p, hdr: u.hdr, pid: u.pid, from: u.from, dest, src, gone: false });
        if self.sharing.pair_recv
            && n == len
            && n.is_multiple_of(2)
            && n < self.sharing.share_min
            && 2 * n >= self.share_from(&r.from)
            && (self.busy || self.sharing.unpaired.is_some())
        {
            return self.pair_recv(r);
        }
        self.deliver_rts(*r);
    }

    /// Keep a delivered eager message's box, and its data buffer up to
    /// `SPARE_UNEXP_DATA` bytes, for the next unexpected message
    /// (`unexpected_of`): no allocation per unexpected message.
    fn recycle_unexpected(&mut self, mut u: Unexpected) {
        if u.data.capacity() > SPARE_UNEXP_DATA {
            u.data = Vec::new();
        }
        u.iovs = Vec::new();
        self.spare_unexp = Some(u);
    }

    /// A rendezvous receive whose data is copied alone or in a job of its
    /// own.
    pub(super) fn deliver_rts(&mut self, r: Paired) {
        self.delivered = self.delivered.wrapping_add(1);
        let n = total(&r.dest);
        if self.can_share(n, &r.dest, &r.from) {
            let Paired { p, hdr, pid, from, dest, src, .. } = r;
            return self.share(
                Span { total: n, pid, local: dest, remote: src },
                true,
                from,
                hdr.msg_id,
                JobFor::Recv { p, hdr },
            );
        }
        self.recv_rts(r.p, r.hdr, r.from, &r.src);
    }

    /// A receive kept for pairing, sent its own way: its sender may have
    /// gone or closed its endpoint since it matched.
    pub(super) fn deliver_kept(&mut self, k: Paired) {
        if k.gone || self.closed_peer(&k.from, k.hdr.msg_id) {
            return self.sender_closed(k.p, k.hdr, k.from);
        }
        self.deliver_rts(k);
    }

    /// A receive matched a send whose endpoint has closed since (its
    /// process may live on): its buffers are no longer its to offer.
    pub(super) fn sender_closed(&mut self, p: Posted, hdr: Hdr, from: SocketAddr) {
        tracing::warn!("a receive matched a send from {from}, whose endpoint has closed since; its data is gone");
        self.finish_recv(p, &hdr, from, ffi::FI_EIO);
    }

    /// The receiver's copy of a rendezvous send, alone: process_vm_readv
    /// from the sender, or a pull when the kernel cannot reach its memory.
    pub(super) fn recv_rts(&mut self, p: Posted, hdr: Hdr, from: SocketAddr, src: &[(usize, usize)]) {
        let n = (hdr.len as usize).min(total(&p.iovs));
        // (The sender's process as its link records it; a sender whose
        // endpoint is gone has no buffers to give any more.)
        let copied = match self.peers.get(&from) {
            Some(x) => x.link.read(&clip(&p.iovs, n), src),
            None => Copied::Failed(std::io::Error::from_raw_os_error(libc::ECONNRESET)),
        };
        let status = match copied {
            Copied::Done(got) if got == n => 0,
            Copied::Done(got) => {
                tracing::warn!("receiving {n} bytes from {from}: only {got} could be copied");
                ffi::FI_EIO
            }
            Copied::Push => {
                // Memory the wire cannot reach (shm: device/PFN-mapped,
                // secret): the sender, which owns it, pushes it to us.
                tracing::debug!("pulling {n} bytes from {from}");
                let dest = clip(&p.iovs, n);
                self.start_pull((from, hdr.msg_id), Pull { dest, total: n, got: 0, what: PullFor::Recv { p, hdr } });
                self.push_ctrl(from, Hdr { op: op::PULL, msg_id: hdr.msg_id, len: n as u64, ..Default::default() });
                return;
            }
            Copied::Failed(e) => {
                tracing::warn!("receiving {} bytes from {from}: the copy failed: {e}", hdr.len);
                ffi::FI_EIO
            }
        };
        self.finish_recv(p, &hdr, from, status);
    }
}
