//! Posting: the application's sends, RMA and receives, turned into frames
//! (inline or rendezvous by size) or posted receives, and fi_cancel.

use super::*;

impl Engine {
    /// An operation just pushed to `to` waits for its answer, with the
    /// epoch of the endpoint it went to (see `Pending::peer_epoch`).
    pub(super) fn await_answer(&mut self, msg_id: u64, op: TxDone, credit: Option<Credit>, to: SocketAddr, iovs: Iovs) {
        let peer_epoch = self.peers.get(&to).map_or(0, |x| x.link.epoch());
        let TxDone { ctx, kind, tagged, len } = op;
        let p = Pending { ctx, kind, tagged, len, credit, peer: to, report: true, iovs, peer_epoch };
        self.pending.insert(msg_id, p);
    }

    /// fi_send / fi_tsend and their variants.
    pub fn send(&mut self, o: TxOp) -> Result<()> {
        let to = self.resolve(o.dest)?;
        let len = total(&o.iovs);
        let flags = o.flags.unwrap_or(self.b.tx_op_flags);
        let tagged = o.tag.is_some();
        let credit = self.credit(true, flags)?;
        let mut hdr = Hdr {
            len: len as u64,
            tag: o.tag.unwrap_or(0),
            data: o.data.unwrap_or(0),
            flags: if tagged { flag::TAGGED } else { 0 } | if o.data.is_some() { flag::CQ_DATA } else { 0 },
            ..Default::default()
        };
        let delivery = flags & ffi::FI_DELIVERY_COMPLETE as u64 != 0;
        // Injects (up to inject_size) always go inline: their buffer is
        // the application's again when the call returns.
        let inject = flags & ffi::FI_INJECT as u64 != 0;
        if len <= self.eager_max || (inject && len <= EAGER_MAX) {
            hdr.op = op::EAGER;
            let mut data = Vec::new();
            let body: &[u8] = match &o.iovs[..] {
                // SAFETY: the application's send buffer, valid for this call.
                [one] if !crate::mr::phys::is_device(one.0, one.1) => unsafe { crate::mr::local::view(*one) },
                many => {
                    // SAFETY: as above, for every iov.
                    unsafe { crate::mr::local::gather(many, &mut data) };
                    &data
                }
            };
            // (Delivery complete: the CQ entry or the counter update waits
            // for the receiver's ACK; with neither there is nothing to
            // report, and no ACK is asked for.)
            if delivery && (credit.is_some() || self.b.cntrs[C_SEND].is_some()) {
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
            if let (Some((slot, _)), Some(c)) = (offer, self.copies.as_mut()) {
                c.give_back(slot);
            }
            return Err(e);
        }
        if let Some((slot, gen)) = offer {
            // (The queue it went to, which the push has opened.)
            let pid = self.peers.get(&to).map_or(0, |x| x.link.owner());
            self.offers.push(Offer { msg_id: hdr.msg_id, slot, gen, pid, helped: 0 });
        }
        self.await_answer(hdr.msg_id, TxDone { ctx: o.ctx, kind: Kind::Send, tagged, len }, credit, to, o.iovs);
        Ok(())
    }

    /// fi_write / fi_read and their variants.
    pub fn rma(&mut self, o: RmaOp) -> Result<()> {
        let to = self.resolve(o.dest)?;
        let len = total(&o.iovs);
        let flags = o.flags.unwrap_or(self.b.tx_op_flags);
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
            self.push(to, hdr, &[&encode_iovs(&o.iovs)])?;
        }
        self.await_answer(hdr.msg_id, TxDone { ctx: o.ctx, kind, tagged: false, len }, credit, to, o.iovs);
        Ok(())
    }

    /// fi_recv / fi_trecv and their variants.
    pub fn recv(
        &mut self,
        ctx: usize,
        iovs: Iovs,
        src: u64,
        tag: Option<(u64, u64)>,
        flags: Option<u64>,
    ) -> Result<()> {
        let flags = flags.unwrap_or(self.b.rx_op_flags);
        let src = if src == ffi::FI_ADDR_UNSPEC || !self.b.directed { None } else { Some(self.resolve(src)?) };
        let credit = self.credit(false, flags)?;
        let tagged = tag.is_some();
        let (t, ignore) = tag.unwrap_or((0, 0));
        let mut p = Posted { ctx, iovs, src, tag: t, ignore, credit, seq: 0 };
        let q = tagged as usize;
        if let Some(i) = self.unexpected[q].iter().position(|u| matches(&p, tagged, u.hdr.tag, &u.from)) {
            // (The application's call, not a progress call: a copy started
            // here is not overlapped with messages behind it.)
            self.busy = false;
            let u = self.unexpected[q].remove(i).expect("position is in range");
            p.seq = self.matched();
            self.deliver(p, u);
            return Ok(());
        }
        self.posted[q].push_back(p);
        Ok(())
    }

    /// fi_cancel of a posted receive.
    pub fn cancel(&mut self, ctx: usize) -> Result<()> {
        for q in 0..2 {
            if let Some(i) = self.posted[q].iter().position(|p| p.ctx == ctx) {
                let p = self.posted[q].remove(i).expect("position is in range");
                let flags = ffi::FI_RECV as u64 | if q == 1 { ffi::FI_TAGGED as u64 } else { ffi::FI_MSG as u64 };
                // (An error completion whether or not one was asked for:
                // see `fail_tx`.)
                drop(p.credit);
                if let Some(cq) = &self.b.rx_cq {
                    cq.push_error(CqError {
                        op_context: ctx,
                        flags,
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
