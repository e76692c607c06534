//! Posting: the application's sends, RMA and receives, turned into frames
//! (inline or rendezvous by size) or posted receives, and fi_cancel.

use std::net::SocketAddr;

use oxmr_ffi as ffi;

use super::{
    frame_payload, matches, total, Engine, Kind, Multi, Offer, Pending, PostedRecv, RmaOp, Stream, TxDone, TxOp,
    Unexpected, UnexpectedMsg, C_SEND, EAGER_MAX, SPREAD_WRITE_MIN,
};
use crate::error::{Error, Result};
use crate::fail;
use crate::protocol::{encode_iovs, flag, op, Hdr, Iovs};
use crate::queues::cq::{CqEntry, CqError, Credit};
use crate::wire::Props;

/// What the unexpected messages may hold (`Engine::unexp`): the bytes
/// they hold (`Unexpected::bytes`), the most they may (FI_OXMR_UNEXP_MAX),
/// and the peers whose reading stopped because their message found it
/// spent (resumed below 3/4 of it).
pub(super) struct UnexpectedBudget {
    pub(super) bytes: usize,
    pub(super) max: usize,
    pub(super) paused: Vec<SocketAddr>,
}

impl UnexpectedBudget {
    pub(super) fn new(max: usize) -> UnexpectedBudget {
        UnexpectedBudget { bytes: 0, max, paused: Vec::new() }
    }
}

/// The header of a message of `len` bytes, tagged or not, with remote
/// CQ data or not (its kind, and the sender's pid and name, set where it
/// is pushed).
fn msg_hdr(len: usize, tag: Option<u64>, data: Option<u64>) -> Hdr {
    Hdr {
        len: len as u64,
        tag: tag.unwrap_or(0),
        data: data.unwrap_or(0),
        flags: if tag.is_some() { flag::TAGGED } else { 0 } | if data.is_some() { flag::CQ_DATA } else { 0 },
        ..Default::default()
    }
}

/// The most payload a send over a link of `props` puts inline: its
/// wire's eager limit, within one of its frames.
fn link_eager_max(props: &Props) -> usize {
    props.eager_max.min(frame_payload(props.max_frame))
}

impl Engine {
    /// An operation just pushed to `to` waits for its answer, with the
    /// epoch of the endpoint it went to (see `Pending::peer_epoch`).
    pub(super) fn await_answer(&mut self, msg_id: u64, op: TxDone, credit: Option<Credit>, to: SocketAddr, iovs: Iovs) {
        let peer_epoch = self.peers.get(&to).map_or(0, |x| x.link.epoch());
        let TxDone { ctx, kind, tagged, len } = op;
        let p = Pending { ctx, kind, tagged, len, credit, peer: to, report: true, iovs, peer_epoch };
        self.pending.insert(msg_id, p);
    }

    /// An inject in its common shape, or None for `send`: an inline
    /// message (at most `EAGER_MAX`, as `send` puts every inject of that
    /// size inline) from one application buffer that is not device
    /// memory, to a peer whose link is open and does not buffer (shm),
    /// with nothing held before it (fences, triggered operations). No
    /// completion; the send counter counts it, as `send` does. It pushes
    /// the frame `send` would, answers what `send` would for an address
    /// that resolves to nothing and for a full queue (-FI_EAGAIN), and
    /// leaves any other push failure to `send` (nothing was sent).
    // (In line into `Ep::inject`: a call layer less on the sender's
    // critical path, bench/instr.sh.)
    #[inline]
    pub fn inject(
        &mut self,
        dest: u64,
        buf: usize,
        len: usize,
        tag: Option<u64>,
        data: Option<u64>,
    ) -> Option<Result<()>> {
        if len > EAGER_MAX {
            return None;
        }
        let to = match self.resolve(dest) {
            Ok(to) => to,
            Err(e) => return Some(Err(e)),
        };
        if self.must_wait(&to, ffi::FI_INJECT as u64) || crate::mr::phys::is_device(buf, len) {
            return None;
        }
        let i = self.peers.find(&to)?;
        let p = &self.peers.list[i];
        if p.link.props().buffers {
            return None;
        }
        let hdr = Hdr { op: op::EAGER, pid: self.pid, name: self.name, ..msg_hdr(len, tag, data) };
        let mut hb = [0u8; crate::protocol::HDR_MAX];
        let hlen = hdr.encode(&mut hb);
        // SAFETY: the application's inject buffer, readable for this call
        // (fi_msg(3): it may be reused once the call returns).
        let body = unsafe { crate::mr::local::view((buf, len)) };
        match p.link.send(&[&hb[..hlen], body]) {
            Ok(()) => {}
            Err(crate::wire::WireError::Full) => return Some(Err(Error::quiet(ffi::FI_EAGAIN))),
            Err(_) => return None,
        }
        self.count(C_SEND, true);
        Some(Ok(()))
    }

    /// fi_send / fi_tsend and their variants.
    pub fn send(&mut self, o: &TxOp) -> Result<()> {
        let to = self.resolve(o.dest)?;
        let len = total(&o.iovs);
        let flags = o.flags.unwrap_or(self.bound.tx_op_flags);
        if self.must_wait(&to, flags) {
            return self.hold(to, super::fence::Held::Send(o.clone()));
        }
        let tagged = o.tag.is_some();
        let credit = self.credit(true, flags)?;
        let mut hdr = msg_hdr(len, o.tag, o.data);
        let delivery = flags & ffi::FI_DELIVERY_COMPLETE as u64 != 0;
        // Injects (up to inject_size) always go inline: their buffer is
        // the application's again when the call returns.
        let inject = flags & ffi::FI_INJECT as u64 != 0;
        // (A wire whose eager limit is larger, within its frames, TCP's:
        // one round trip costs more there than a copy of a few dozen KiB.)
        let eager_max = match len > self.eager_max {
            true => self.eager_max.max(link_eager_max(self.peer(to)?.link.props())),
            false => self.eager_max,
        };
        // (`inline_accepted` is the receiving side's mirror of this rule.)
        if len <= eager_max || (inject && len <= EAGER_MAX) {
            hdr.op = op::EAGER;
            let mut data = Vec::new();
            let body: &[u8] = match &o.iovs[..] {
                // SAFETY: the application's send buffer, valid for this call.
                [one] if !crate::mr::phys::is_device(one.0, one.1) => unsafe { crate::mr::local::view(*one) },
                many => {
                    // SAFETY: each iov is the application's send buffer, readable for this call (fi_tsend(3)).
                    unsafe { crate::mr::local::gather(many, &mut data) };
                    &data
                }
            };
            // (Delivery complete: the CQ entry or the counter update waits
            // for the receiver's ACK; with neither there is nothing to
            // report, and no ACK is asked for.)
            if delivery && (credit.is_some() || self.bound.cntrs[C_SEND].is_some()) {
                hdr.flags |= flag::NEED_ACK;
                hdr.msg_id = self.new_id();
            }
            self.push(to, hdr, &[body])?;
            if hdr.msg_id != 0 {
                self.await_answer(
                    hdr.msg_id,
                    TxDone { ctx: o.ctx, kind: Kind::Send, tagged, len },
                    credit,
                    to,
                    Iovs::default(),
                );
            } else if self.connecting(&to) {
                // (Queued behind a TCP connect: done when it is up, failed
                // if it never comes up.)
                self.complete_when_up(to, TxDone { ctx: o.ctx, kind: Kind::Send, tagged, len }, credit);
            } else {
                // Injects have no CQ entry (no credit) but count (fi_cntr(3)).
                self.complete_tx(o.ctx, Kind::Send, tagged, len, credit, true);
            }
            return Ok(());
        }
        if inject {
            return Err(fail!(ffi::FI_EMSGSIZE, "inject of {len} bytes is over inject_size"));
        }
        hdr.op = op::RTS;
        hdr.msg_id = self.new_id();
        hdr.iov_count = o.iovs.len() as u16;
        let offer = self.offer(len, &o.iovs);
        if let Some((slot, gen)) = offer {
            hdr.flags |= flag::SJOB;
            hdr.rma_addr = slot as u64;
            hdr.rma_key = gen as u64;
        }
        if let Err(e) = self.push(to, hdr, &[&encode_iovs(&o.iovs)]) {
            if let (Some((slot, _)), Some(c)) = (offer, self.sharing.copies.as_mut()) {
                c.give_back(slot);
            }
            return Err(e);
        }
        if let Some((slot, gen)) = offer {
            // (The queue it went to, which the push has opened.)
            let pid = self.peers.get(&to).map_or(0, |x| x.link.owner());
            self.sharing.offers.push(Offer { msg_id: hdr.msg_id, slot, gen, pid, helped: 0 });
        }
        self.await_answer(hdr.msg_id, TxDone { ctx: o.ctx, kind: Kind::Send, tagged, len }, credit, to, o.iovs);
        Ok(())
    }

    /// fi_write / fi_read and their variants.
    pub fn rma(&mut self, o: RmaOp) -> Result<()> {
        let to = self.resolve(o.dest)?;
        let len = total(&o.iovs);
        let flags = o.flags.unwrap_or(self.bound.tx_op_flags);
        if self.must_wait(&to, flags) {
            return self.hold(to, super::fence::Held::Rma(o));
        }
        // (FI_INJECT applies to writes only: fi_rma(3).)
        let inject = !o.read && flags & ffi::FI_INJECT as u64 != 0;
        let credit = self.credit(true, flags)?;
        let mut hdr = Hdr {
            len: len as u64,
            data: o.data.unwrap_or(0),
            flags: if o.data.is_some() { flag::CQ_DATA } else { 0 },
            rma_addr: o.addr,
            rma_key: o.key,
            msg_id: self.new_id(),
            ..Default::default()
        };
        let kind = if o.read { Kind::Read } else { Kind::Write };
        if !o.read && len <= EAGER_MAX {
            hdr.op = op::WRITE_INLINE;
            let mut data = Vec::with_capacity(len);
            // SAFETY: the application's source buffers, valid for this call.
            unsafe { crate::mr::local::gather(&o.iovs, &mut data) };
            self.push(to, hdr, &[&data])?;
        } else {
            if inject {
                return Err(fail!(ffi::FI_EMSGSIZE, "inject write of {len} bytes is over inject_size"));
            }
            hdr.op = if o.read { op::READ } else { op::WRITE };
            hdr.iov_count = o.iovs.len() as u16;
            // A wire that cannot reach our memory (TCP): the data follows
            // the request at once, in DATA frames, instead of waiting for
            // the target's PULL (one round trip less per write). The target
            // checks the request first and lands the data only then; it
            // drops the data of a write it refused.
            // A large write over a link with lanes waits for the PULL
            // instead: its chunks then go on every lane at once (streamed,
            // they must follow the request on its connection).
            let link = &self.peer(to)?.link;
            let props = link.props();
            let stream = !o.read && props.streams_writes && !(props.spreads && len >= SPREAD_WRITE_MIN);
            if stream {
                hdr.flags |= flag::STREAM;
            }
            self.push(to, hdr, &[&encode_iovs(&o.iovs)])?;
            if stream {
                self.queue_stream(Stream {
                    to,
                    msg_id: hdr.msg_id,
                    src: o.iovs.to_vec(),
                    off: 0,
                    total: len,
                    after: None,
                    spread: false,
                    _hold: None,
                });
            }
        }
        self.await_answer(hdr.msg_id, TxDone { ctx: o.ctx, kind, tagged: false, len }, credit, to, o.iovs);
        Ok(())
    }

    /// fi_recv / fi_trecv and their variants (with FI_MULTI_RECV, untagged:
    /// `post_multi`).
    #[inline(always)]
    pub fn recv(
        &mut self,
        ctx: usize,
        iovs: Iovs,
        src: u64,
        tag: Option<(u64, u64)>,
        flags: Option<u64>,
    ) -> Result<()> {
        if self.has_srx() {
            return Err(fail!(
                ffi::FI_EOPNOTSUPP,
                "fi_recv on an endpoint bound to a shared receive context: post receives to the context"
            ));
        }
        let flags = flags.unwrap_or(self.bound.rx_op_flags);
        let src = if src == ffi::FI_ADDR_UNSPEC || !self.bound.directed { None } else { Some(self.resolve(src)?) };
        let tagged = tag.is_some();
        if !tagged && flags & ffi::FI_MULTI_RECV as u64 != 0 {
            return self.post_multi(ctx, iovs, src, flags);
        }
        let credit = self.credit(false, flags)?;
        let (t, ignore) = tag.unwrap_or((0, 0));
        let mut p = self.posted_box(ctx, iovs, src, (t, ignore), credit);
        let q = tagged as usize;
        if let Some(i) =
            self.unexpected[q].iter().position(|u| u.claimed.is_none() && matches(&p, tagged, u.hdr.tag, &u.from))
        {
            // (The application's call, not a progress call: a copy started
            // here is not overlapped with messages behind it.)
            self.busy = false;
            let u = self.take_unexpected(q, i);
            p.seq = self.matched();
            self.deliver(p, u);
            return Ok(());
        }
        self.posted[q].push_back(p);
        Ok(())
    }

    /// fi_trecvmsg with FI_PEEK, FI_CLAIM or FI_DISCARD (fi_tagged(3)),
    /// `flags` the call's. FI_PEEK looks for an unexpected tagged message
    /// that a receive of `tag`/`src` would match (after one progress call,
    /// so what has arrived is seen) and reports it without consuming it: a
    /// completion with its length, tag, CQ data and source (no data: `buf`
    /// is NULL), or an error completion FI_ENOMSG. With FI_CLAIM it is
    /// also set aside for the FI_CLAIM receive with the same context (no
    /// other receive or peek sees it); with FI_DISCARD it is dropped
    /// (its sender is answered as if it had been received). FI_CLAIM
    /// alone receives the message claimed with `ctx` into `iovs` (or drops
    /// it, with FI_DISCARD). Every such call gives one completion.
    pub fn probe(&mut self, ctx: usize, iovs: Iovs, src: u64, tag: (u64, u64), flags: u64) -> Result<()> {
        if self.has_srx() {
            return Err(fail!(
                ffi::FI_EOPNOTSUPP,
                "fi_trecvmsg with FI_PEEK/FI_CLAIM on an endpoint bound to a shared receive context: oxmr has no peek there"
            ));
        }
        let peek = flags & ffi::FI_PEEK as u64 != 0;
        let discard = flags & ffi::FI_DISCARD as u64 != 0;
        if !peek && flags & ffi::FI_CLAIM as u64 == 0 {
            return Err(fail!(ffi::FI_EINVAL, "fi_trecvmsg: FI_DISCARD needs FI_PEEK or FI_CLAIM with it"));
        }
        let cq = self.bound.rx_cq.clone().ok_or_else(|| {
            fail!(ffi::FI_ENOCQ, "fi_trecvmsg: FI_PEEK/FI_CLAIM report through a CQ bound for FI_RECV; bind one")
        })?;
        // (-FI_EAGAIN while the CQ has no room: the report must fit.)
        let credit = cq.reserve()?;
        if !peek {
            let Some(i) = self.unexpected[1].iter().position(|u| u.claimed == Some(ctx)) else {
                return Err(fail!(
                    ffi::FI_EINVAL,
                    "fi_trecvmsg(FI_CLAIM): no message is claimed with context {ctx:#x}; claim one with FI_PEEK|FI_CLAIM and the same context first"
                ));
            };
            let u = self.take_unexpected(1, i);
            if discard {
                let e = self.peeked(ctx, u.hdr, u.from);
                self.discard(&u);
                credit.complete(e);
                return Ok(());
            }
            self.busy = false;
            let p = Box::new(PostedRecv {
                ctx,
                iovs,
                src: None,
                tag: u.hdr.tag,
                ignore: 0,
                credit: Some(credit),
                seq: self.matched(),
                multi: Multi::No,
            });
            self.deliver(p, u);
            return Ok(());
        }
        let src = if src == ffi::FI_ADDR_UNSPEC || !self.bound.directed { None } else { Some(self.resolve(src)?) };
        self.progress();
        let want =
            Box::new(PostedRecv { ctx, iovs, src, tag: tag.0, ignore: tag.1, credit: None, seq: 0, multi: Multi::No });
        let Some(i) =
            self.unexpected[1].iter().position(|u| u.claimed.is_none() && matches(&want, true, u.hdr.tag, &u.from))
        else {
            drop(credit);
            cq.push_error(CqError {
                op_context: ctx,
                flags: ffi::FI_RECV as u64 | ffi::FI_TAGGED as u64,
                tag: tag.0,
                err: ffi::FI_ENOMSG as i32,
                prov_errno: ffi::FI_ENOMSG as i32,
                src: ffi::FI_ADDR_NOTAVAIL,
                ..Default::default()
            });
            return Ok(());
        };
        let (hdr, from) = (self.unexpected[1][i].hdr, self.unexpected[1][i].from);
        let e = self.peeked(ctx, hdr, from);
        if discard {
            let u = self.take_unexpected(1, i);
            self.discard(&u);
        } else if flags & ffi::FI_CLAIM as u64 != 0 {
            self.unexpected[1][i].claimed = Some(ctx);
        }
        credit.complete(e);
        Ok(())
    }

    /// The completion of a peek (or discard) that found `u`.
    fn peeked(&mut self, ctx: usize, hdr: Hdr, from: SocketAddr) -> CqEntry {
        let mut flags = ffi::FI_RECV as u64 | ffi::FI_TAGGED as u64;
        if hdr.flags & flag::CQ_DATA != 0 {
            flags |= ffi::FI_REMOTE_CQ_DATA as u64;
        }
        let src = self.src_fi_addr(&from);
        CqEntry { op_context: ctx, flags, len: hdr.len as usize, buf: 0, data: hdr.data, tag: hdr.tag, src }
    }

    /// Drop an unexpected message the application discarded: its sender,
    /// if it waits (rendezvous, delivery complete), is answered as if it
    /// had been received, so its send completes and its buffers are its
    /// own again.
    fn discard(&mut self, u: &UnexpectedMsg) {
        if !u.gone && (u.hdr.op == op::RTS || u.hdr.flags & flag::NEED_ACK != 0) {
            self.push_ctrl(u.from, Hdr { op: op::ACK, msg_id: u.hdr.msg_id, status: 0, ..Default::default() });
        }
    }

    /// fi_cancel of a posted receive (a multi-receive buffer: `cancel_multi`).
    pub fn cancel(&mut self, ctx: usize) -> Result<()> {
        for q in 0..2 {
            if let Some(i) = self.posted[q].iter().position(|p| p.ctx == ctx) {
                let p = self.posted[q].remove(i).expect("position is in range");
                if p.multi != Multi::No {
                    self.cancel_multi(p);
                    return Ok(());
                }
                let flags = ffi::FI_RECV as u64 | if q == 1 { ffi::FI_TAGGED as u64 } else { ffi::FI_MSG as u64 };
                // (An error completion whether or not one was asked for:
                // see `fail_tx`.)
                drop(p.credit);
                self.report_canceled(ctx, flags);
                return Ok(());
            }
        }
        Err(Error::quiet(ffi::FI_ENOENT))
    }
}

impl Engine {
    /// The most payload an oxmr sender puts inline in an EAGER frame over
    /// the wire `came` (`send`: its eager limit, within a frame, which the
    /// wire bounds already; injects up to the shm cell's): a larger one
    /// from a sender its connection proved is refused (`frame_sound`).
    pub(super) fn inline_accepted(came: &Props) -> usize {
        came.eager_max.max(EAGER_MAX)
    }
}

impl Engine {
    /// Keep `u` (no receive matched it) on queue `q`. When the unexpected
    /// messages hold more than `unexp_max`, its sender's connection is
    /// not read until receives take them below three quarters of it: TCP
    /// pushes back on the sender, and nothing is lost (a peer on the
    /// shared-memory wire is this user's and is not held: docs/security.md).
    pub(super) fn keep_unexpected(&mut self, q: usize, u: Unexpected) {
        self.count_unexpected(u.bytes(), u.from);
        self.unexpected[q].push_back(u);
    }

    /// `bytes` more are kept of what `from` sent (here or in a shared
    /// receive context): past the bound, `from` is paused.
    pub(super) fn count_unexpected(&mut self, bytes: usize, from: SocketAddr) {
        self.unexp.bytes += bytes;
        if self.unexp.bytes > self.unexp.max && !self.unexp.paused.contains(&from) {
            tracing::warn!(
                "unexpected messages hold {} bytes, more than FI_OXMR_UNEXP_MAX ({}): not reading what {} sends until receives take some (post receives, or raise the bound)",
                self.unexp.bytes,
                self.unexp.max,
                from
            );
            self.unexp.paused.push(from);
            self.set_paused(from, true);
        }
    }

    /// Take unexpected message `i` of queue `q` (a receive matched or
    /// discarded it).
    pub(super) fn take_unexpected(&mut self, q: usize, i: usize) -> Unexpected {
        let u = self.unexpected[q].remove(i).expect("position is in range");
        self.uncount_unexpected(u.bytes());
        u
    }

    /// `bytes` of unexpected messages were taken: paused senders resume
    /// below three quarters of the bound.
    pub(super) fn uncount_unexpected(&mut self, bytes: usize) {
        self.unexp.bytes -= bytes;
        if !self.unexp.paused.is_empty() && self.unexp.bytes <= self.unexp.max / 4 * 3 {
            for a in std::mem::take(&mut self.unexp.paused) {
                self.set_paused(a, false);
            }
        }
    }

    /// Stop (`on`) or resume reading `peer`'s TCP connections (now, or at
    /// the end of the poll if the inbox is out).
    pub(super) fn set_paused(&mut self, peer: SocketAddr, on: bool) {
        match self.rx.as_mut() {
            Some(rx) => rx.pause(peer, on),
            None => self.to_pause.push((peer, on)),
        }
    }
}
