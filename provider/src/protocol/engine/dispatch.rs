//! Dispatch: every frame read from the inbox, handled by kind, and the
//! order in which they are handled (control frames at once, copies kept
//! and served one per progress call, RMA held behind a stalled job).

use std::net::SocketAddr;

use oxmr_ffi as ffi;

use super::{matches, total, Engine, Job, JobFor, Kind, Unexpected, UnexpectedMsg};
use crate::info::addr;
use crate::protocol::{decode_iovs, flag, op, Hdr};
use crate::wire::Arrival;

impl Engine {
    pub(super) fn on_message(&mut self, msg: &[u8]) {
        let Some((h, hlen)) = Hdr::decode(msg) else {
            match Hdr::version_of(msg) {
                Some(v) if msg.len() >= crate::protocol::HDR_BASE && v != crate::protocol::PROTO_VERSION => {
                    tracing::warn!(
                        "dropping a message of protocol version {v}; this oxmr speaks version {}: run one oxmr build on both sides",
                        crate::protocol::PROTO_VERSION
                    )
                }
                _ => tracing::warn!("dropping a malformed message of {} bytes", msg.len()),
            }
            return;
        };
        let body = &msg[hlen..];
        tracing::debug!("message op {} len {} tag {:#x} msg_id {} from pid {}", h.op, h.len, h.tag, h.msg_id, h.pid);
        let pid = h.pid;
        // (The last sender's frames are known by one word of the frame,
        // `Hdr::sender_key`; the name is parsed for a new one.)
        let key = Hdr::sender_key(msg);
        let from = match key.and_then(|k| self.av_cache.sender_keyed(k)) {
            Some(from) => from,
            None => {
                let Some(from) = self.sender(&h.name) else {
                    tracing::warn!("dropping a message without a valid sender name");
                    return;
                };
                if let Some(k) = key {
                    self.av_cache.keyed(k);
                }
                from
            }
        };
        if !matches!(h.op, op::EAGER | op::RTS | op::ACK | op::ACKS | op::CTS | op::PULL | op::DATA) {
            // RMA and the rest take effect after an open receive's job
            // (sends and receives order themselves in finish_recv).
            self.finish_open_job();
        }
        match h.op {
            op::EAGER | op::RTS => {
                if self.has_srx() {
                    self.on_send_shared(h, body, from, pid);
                    return;
                }
                let tagged = h.flags & flag::TAGGED != 0;
                let q = tagged as usize;
                if h.op == op::EAGER {
                    // The common case: a receive is waiting; copy straight
                    // from the queue's copy into it.
                    if let Some(i) = self.matching_posted(q, tagged, h.tag, &from) {
                        let mut p = self.take_posted(q, i, h.len);
                        p.seq = self.matched();
                        self.eager_into(p, &h, body, from);
                        return;
                    }
                }
                let Some(u) = self.unexpected_of(h, body, from, pid) else { return };
                match self.matching_posted(q, tagged, h.tag, &from) {
                    Some(i) => {
                        let mut p = self.take_posted(q, i, h.len);
                        p.seq = self.matched();
                        self.deliver(p, u);
                    }
                    None => self.keep_unexpected(q, u),
                }
            }
            op::ACK => {
                // (Only our operations with that peer.)
                if self.pending.get(&h.msg_id).is_none_or(|p| p.peer != from) {
                    return;
                }
                if let Some(p) = self.pending.remove(&h.msg_id) {
                    if p.kind == Kind::Write {
                        // (Answered, even early by a lying target: none of
                        // its data is read from the buffer after this.)
                        self.end_stream(from, h.msg_id);
                    }
                    let status = match (h.status, p.kind) {
                        (0, Kind::Fetch) => self.fetched(&p.iovs, p.len, body, &from),
                        // (A small read answered with its data: rma_target.)
                        (0, Kind::Read) if !body.is_empty() => self.fetched(&p.iovs, p.len, body, &from),
                        (s, _) => s,
                    };
                    if status == 0 {
                        self.complete_tx(p.ctx, p.kind, p.tagged, p.len, p.credit, p.report);
                    } else {
                        if p.kind != Kind::Send {
                            tracing::info!(
                                "remote access to {} refused by the target: {}",
                                p.peer,
                                crate::error::errno_name(status)
                            );
                        }
                        self.fail_tx(p, status);
                    }
                }
            }
            op::ACKS => {
                for id in body.chunks_exact(8).take(h.iov_count as usize) {
                    let id = u64::from_le_bytes(id.try_into().unwrap_or_default());
                    // (Only our operations with that peer.)
                    if self.pending.get(&id).is_none_or(|p| p.peer != from) {
                        continue;
                    }
                    // (An ACKS answers writes only: a fetch waits for
                    // the ACK that carries its old values.)
                    if self.pending.get(&id).is_some_and(|p| p.kind == Kind::Fetch) {
                        continue;
                    }
                    if let Some(p) = self.pending.remove(&id) {
                        if p.kind == Kind::Write {
                            self.end_stream(from, id);
                        }
                        self.complete_tx(p.ctx, p.kind, p.tagged, p.len, p.credit, p.report);
                    }
                }
            }
            op::WRITE | op::WRITE_INLINE | op::READ => self.rma_target(h, from, pid, body),
            op::ATOMIC => self.atomic_target(h, from, body),
            op::PULL => self.on_pull(h, from),
            op::CTS => self.help(h, from, body),
            op::DATA => self.on_data(h, from, body),
            other => tracing::warn!("dropping a message of unknown kind {other} from {from}"),
        }
    }

    /// Whether a frame's header names the sender its connection proved
    /// (`how.via`: the name in the connection's hello; None on a wire
    /// whose frames are checked against the sender's queue owner instead,
    /// `owns_its_queue`), and whether it came on the wire we reach that
    /// sender by (`Dial::route`): a frame over shared memory naming an
    /// endpoint we reach over TCP (or the reverse) could not be checked
    /// the way its sender's answers and copies are. A frame claiming
    /// another sender, or on the other wire, is dropped here, before it
    /// can be kept, batched or answered.
    pub(super) fn sent_by(&mut self, msg: &[u8], how: &Arrival<'_>) -> bool {
        if self.bound.one_peer && !self.is_from_our_peer(msg) {
            return false;
        }
        let (via, came) = (how.via.copied(), how.wire.wire);
        // (Every peer is reached over the wire of this unproven frame.)
        if via.is_none() && self.dial.wire == came {
            return true;
        }
        // (The common case first, without decoding the header: a frame
        // in our queue from an IPv4 sender on this host.)
        if via.is_none() {
            if let Some(ip) = crate::protocol::Hdr::sender_v4(msg) {
                if self.dial.route(&SocketAddr::from((ip, 0))) == came {
                    return true;
                }
            }
        }
        let claimed = Hdr::decode(msg).and_then(|(h, _)| self.sender(&h.name));
        match (claimed, via) {
            (Some(c), _) if self.dial.route(&c) != came => {
                tracing::warn!(
                    "dropping a frame from {c} that came over {}: this endpoint reaches {c} over {} (FI_OXMR_WIRE={}); set FI_OXMR_WIRE alike on both sides",
                    how.wire.name,
                    self.dial.props(self.dial.route(&c)).name,
                    self.dial.setting()
                );
                false
            }
            (_, None) => true,
            (Some(c), Some(v)) if c == v => true,
            (_, Some(v)) => {
                tracing::warn!(
                    "dropping a frame from {v} that names {} as its sender, and closing its {} connection: a forged or broken frame",
                    claimed.map_or("nobody valid".to_string(), |c| c.to_string()),
                    how.wire.name
                );
                false
            }
        }
    }

    /// An EAGER message into the receive it matched (`p`, its place in
    /// matching order given), completed.
    #[inline(always)]
    pub(super) fn eager_into(&mut self, p: super::Posted, h: &Hdr, body: &[u8], from: SocketAddr) {
        let n = (h.len as usize).min(total(&p.iovs)).min(body.len());
        // SAFETY: the application's posted receive buffers.
        unsafe { crate::mr::local::scatter(&p.iovs, &body[..n]) };
        self.finish_recv(p, h, from, 0);
    }

    /// The first receive of queue `q` (tagged or not) that a message with
    /// `tag` from `from` matches. (The first posted is the usual match,
    /// asked alone before the deque's search, which costs ~30
    /// instructions even for one element.)
    #[inline(always)]
    fn matching_posted(&self, q: usize, tagged: bool, tag: u64, from: &SocketAddr) -> Option<usize> {
        match self.posted[q].front() {
            None => None,
            Some(p) if matches(p, tagged, tag, from) => Some(0),
            Some(_) => self.posted[q].iter().skip(1).position(|p| matches(p, tagged, tag, from)).map(|i| i + 1),
        }
    }

    /// An EAGER or RTS message no receive matched, as kept: its data, or
    /// its sender's buffers. None: an RTS whose buffers do not hold what
    /// it sends, refused (answered FI_EINVAL, with a log line).
    pub(super) fn unexpected_of(&mut self, h: Hdr, body: &[u8], from: SocketAddr, pid: u32) -> Option<Unexpected> {
        let (data, iovs) = if h.op == op::EAGER {
            (&body[..(h.len as usize).min(body.len())], Vec::new())
        } else {
            match decode_iovs(body, h.iov_count as usize).filter(|v| total(v) >= h.len as usize) {
                Some(v) => (&[][..], v),
                None => {
                    tracing::warn!(
                        "refused a send of {} bytes from {from}: its message does not describe that many bytes of buffers (a malformed or foreign message)",
                        h.len
                    );
                    self.push_ctrl(
                        from,
                        Hdr { op: op::ACK, msg_id: h.msg_id, status: ffi::FI_EINVAL, ..Default::default() },
                    );
                    return None;
                }
            }
        };
        // (Field by field into the spare box: a whole message built and
        // moved in would be one more memcpy call.)
        Some(match self.spare_unexp.take() {
            Some(mut u) => {
                u.hdr = h;
                u.from = from;
                u.pid = pid;
                u.data.clear();
                u.data.extend_from_slice(data);
                u.iovs = iovs;
                u.gone = false;
                u.claimed = None;
                u
            }
            None => {
                Box::new(UnexpectedMsg { hdr: h, from, pid, data: data.to_vec(), iovs, gone: false, claimed: None })
            }
        })
    }

    /// A connected endpoint's frame names its peer (else it is dropped
    /// with a log line: someone else found our name).
    fn is_from_our_peer(&mut self, msg: &[u8]) -> bool {
        let claimed = Hdr::decode(msg).and_then(|(h, _)| self.sender(&h.name));
        let ok = claimed.is_some_and(|c| self.bound.av.as_ref().is_some_and(|av| av.reverse(&c).is_some()));
        if !ok {
            tracing::warn!(
                "dropping a frame from {} at a connected endpoint: it is not the endpoint's peer",
                claimed.map_or("nobody valid".to_string(), |c| c.to_string())
            );
        }
        ok
    }

    /// Handle a message now, or keep it for `serve_deferred`.
    ///
    /// A copy the peer asked for (rendezvous send, RMA) takes microseconds
    /// to milliseconds, and the queue is FIFO: handled in arrival order, a
    /// burst of the peer's requests would hold back the ACKs behind them,
    /// so our own operations would complete (and the application post its
    /// next ones, the work the peer is idle without) only after all of the
    /// peer's copies are done, and two processes writing to each other
    /// would take turns instead of copying at once. So control messages
    /// (ACK, CTS, PULL, DATA: they complete or serve our own operations)
    /// are handled at once, and a copy is kept unless it is the last
    /// message waiting, along with every data message after it (so data
    /// messages from a peer still take effect in the order sent).
    pub(super) fn take_message(&mut self, msg: &[u8], more: bool) {
        // (The kind is the header's first byte; on_message checks the rest.)
        let op = msg.first().copied();
        if self.rma_held(msg) {
            self.deferred.push_back(msg.to_vec());
            return;
        }
        // (A streamed write too: its DATA follows at once, and must find
        // its pull; it copies nothing itself.)
        let control = matches!(op, Some(op::ACK | op::ACKS | op::CTS | op::PULL | op::DATA))
            || (op == Some(op::WRITE) && msg.get(1).is_some_and(|f| f & flag::STREAM != 0));
        // (Not READ: two-way reads copy into the buffer the peer's copy
        // reads from, and overlap less served in order; docs/architecture.md.)
        let copy = matches!(op, Some(op::RTS | op::WRITE))
            && Hdr::decode(msg)
                .is_some_and(|(h, _)| self.sharing.share_min == 0 || (h.len as usize) < self.sharing.share_min);
        if control || (self.deferred.is_empty() && !(copy && more)) {
            return self.on_message(msg);
        }
        self.deferred.push_back(msg.to_vec());
    }

    /// Whether `msg` is an RMA request that waits: one of its sender's
    /// RMA jobs with us is stalled (its helper holds a chunk, `finish_job`),
    /// and a later request must not take effect before that chunk does (a
    /// write over the same bytes would be overwritten by the older chunk, a
    /// read would see a write posted after it). (Nothing is parsed unless
    /// some job is stalled.)
    pub(super) fn rma_held(&self, msg: &[u8]) -> bool {
        !self.sharing.stalled.is_empty()
            && matches!(msg.first(), Some(&(op::WRITE | op::WRITE_INLINE | op::READ | op::ATOMIC)))
            && self.sent_by_stalled(msg)
    }

    /// Whether `msg` comes from a peer (endpoint) one of whose RMA jobs
    /// with us is stalled.
    pub(super) fn sent_by_stalled(&self, msg: &[u8]) -> bool {
        let rma = |j: &Job| matches!(j.what, JobFor::Rma { .. } | JobFor::Writes { .. });
        Hdr::decode(msg)
            .and_then(|(h, _)| addr::parse(&h.name))
            .is_some_and(|from| self.sharing.stalled.iter().any(|j| j.peer == from && rma(j)))
    }

    /// Handle kept messages, up to and including one copy (or one batch of
    /// writes, `write_batch`), so a progress call returns to the
    /// application after at most one peer's copy.
    pub(super) fn serve_deferred(&mut self) {
        loop {
            let m = if self.deferred.front().is_some_and(|m| self.rma_held(m)) {
                // (Everything of that peer's behind it waits too: a peer's
                // data messages take effect in the order sent. Other
                // peers' go past them.)
                let Some(m) = self.take_unheld() else { break };
                m
            } else {
                if self.write_batch() {
                    break;
                }
                let Some(m) = self.deferred.pop_front() else { break };
                m
            };
            let copy = matches!(m.first(), Some(&(op::RTS | op::WRITE | op::READ)));
            self.busy = !self.deferred.is_empty();
            let delivered = self.delivered;
            self.on_message(&m);
            // (A receive kept for pairing has not copied yet: go on to its
            // partner; one that copied another on its way counts.)
            if copy && (self.sharing.unpaired.is_none() || self.delivered != delivered) {
                break;
            }
        }
    }

    /// The first kept message from a peer none of whose RMA jobs with us
    /// is stalled (see `rma_held`): what may be served while a stalled
    /// peer's messages wait, every one of them, in order. (Messages from
    /// different peers have no order between them.)
    pub(super) fn take_unheld(&mut self) -> Option<Vec<u8>> {
        let i = self.deferred.iter().position(|m| Hdr::decode(m).is_some() && !self.sent_by_stalled(m))?;
        self.deferred.remove(i)
    }
}
