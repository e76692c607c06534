//! Frames to peers: the link to each (opened on first use, with a log
//! line that says why and what to do when nobody is there), sends that
//! answer -FI_EAGAIN when the peer's queue is full, and control frames
//! (answers) that must not be lost, queued per peer until they fit.

use std::net::SocketAddr;

use oxmr_ffi as ffi;

use super::peers::TxPeer;
use super::{peers, Engine, Pending, Stream, TxDone};
use crate::error::{Error, Result};
use crate::fail;
use crate::protocol::{Hdr, Iovs, HDR_MAX};
use crate::queues::cq::Credit;
use crate::wire::{KeyMismatch, Link, LinkState, OpenError, WireError};

impl Engine {
    pub(super) fn peer(&mut self, to: SocketAddr) -> Result<&TxPeer> {
        if let Some(i) = self.peers.find(&to) {
            return Ok(&self.peers.list[i]);
        }
        let wire = self.dial.props(self.dial.route(&to)).name;
        let link = Link::open(&to, &self.dial).map_err(|e| match e {
            // (A connect the kernel refused at once: failed, and said, as
            // one refused later, `link_down`.)
            OpenError::ConnectRefused => {
                fail!(ffi::FI_ECONNREFUSED, "peer {to} {}", peers::unreachable(libc::ECONNREFUSED).1)
            }
            OpenError::Unreachable(e) => fail!(ffi::FI_EHOSTUNREACH, "{}", self.dial.unreachable_why(&to, &e)),
            OpenError::Version { theirs, ours } => fail!(
                ffi::FI_EHOSTUNREACH,
                "the endpoint at {to} speaks {wire} wire version {theirs}, this oxmr speaks version {ours}: run one oxmr build on both sides"
            ),
            OpenError::Refused(why) => fail!(
                ffi::FI_EHOSTUNREACH,
                "the endpoint at {to} cannot be reached over shared memory: {why} (not an endpoint's queue: remove it if no endpoint of this user is at {to})"
            ),
            OpenError::Key(m) => match m {
                KeyMismatch::Keyed => fail!(
                    ffi::FI_EHOSTUNREACH,
                    "the endpoint at {to} on this host holds a job key and this endpoint has none (set the same FI_OXMR_AUTH_KEY on every process)"
                ),
                _ => fail!(
                    ffi::FI_EHOSTUNREACH,
                    "the endpoint at {to} on this host does not hold the job's key (set the same FI_OXMR_AUTH_KEY on every process; {m})"
                ),
            },
            OpenError::Dead { owner } => fail!(
                ffi::FI_EHOSTUNREACH,
                "the endpoint at {to} is gone: its process {owner} exited without closing it"
            ),
        })?;
        Ok(self.peers.insert(TxPeer::new(to, link)))
    }

    /// Push a message to `to`; -FI_EAGAIN when its queue is full.
    pub(super) fn push(&mut self, to: SocketAddr, hdr: Hdr, body: &[&[u8]]) -> Result<()> {
        self.push_once(to, hdr, body, true, false)
    }

    /// `push`; `retry`: once more if the peer's endpoint turns out closed;
    /// `spread`: the frame's order does not matter (`Link::send_spread`).
    pub(super) fn push_once(
        &mut self,
        to: SocketAddr,
        mut hdr: Hdr,
        body: &[&[u8]],
        retry: bool,
        spread: bool,
    ) -> Result<()> {
        hdr.pid = self.pid;
        hdr.name = self.name;
        let p = self.peer(to)?;
        let mut hb = [0u8; HDR_MAX];
        let hlen = hdr.encode(&mut hb);
        let h = &hb[..hlen];
        let send = |parts: &[&[u8]]| if spread { p.link.send_spread(parts) } else { p.link.send(parts) };
        let r = match body {
            [] => send(&[h]),
            [b] => send(&[h, b]),
            _ => {
                let mut parts: Vec<&[u8]> = vec![h];
                parts.extend_from_slice(body);
                send(&parts)
            }
        };
        match r {
            Ok(()) => Ok(()),
            Err(WireError::Full) => Err(Error::quiet(ffi::FI_EAGAIN)),
            Err(WireError::Closed) => {
                // (A connect that failed already: this one fails with it.)
                if let Some(LinkState::Unreachable(errno)) = self.peers.get(&to).map(|p| p.link.state()) {
                    self.link_down(to, LinkState::Unreachable(errno));
                    // (`link_down` says so only for what was pending:
                    // this call's own failure gets its line here.)
                    let (code, why) = peers::unreachable(errno);
                    return Err(fail!(code, "peer {to} {why}"));
                }
                // The endpoint we knew there closed; another may have
                // opened under the same address since.
                self.peer_gone(to, "closed its endpoint");
                if retry {
                    return self.push_once(to, hdr, body, false, spread);
                }
                Err(fail!(ffi::FI_ECONNABORTED, "{to} closed its endpoint"))
            }
            Err(WireError::Io(e)) => Err(fail!(ffi::FI_EIO, "push to {to}: {e}")),
        }
    }

    /// Queue a push of our own memory to its peer (opened if need be, as
    /// any frame to it is).
    pub(super) fn queue_stream(&mut self, st: Stream) {
        if self.peer(st.to).is_ok() {
            self.peers.queue_stream(st);
        }
    }

    /// A control message that must not be lost (ACK): queued if full.
    pub(super) fn push_ctrl(&mut self, to: SocketAddr, hdr: Hdr) {
        self.push_ctrl_body(to, hdr, &[]);
    }

    /// `push_ctrl` with a body after the header. Messages to one peer stay
    /// in order; a peer whose queue is full holds up only its own.
    pub(super) fn push_ctrl_body(&mut self, to: SocketAddr, hdr: Hdr, body: &[u8]) {
        let mut h = hdr;
        h.pid = self.pid;
        h.name = self.name;
        let p = match self.peer(to) {
            Ok(p) => p,
            Err(_) => return,
        };
        let mut hb = [0u8; HDR_MAX];
        let hlen = h.encode(&mut hb);
        if p.outbox.is_empty() {
            match p.link.send(&[&hb[..hlen], body]) {
                Ok(()) => return,
                Err(WireError::Closed) => {
                    // What it answers was the closed endpoint's.
                    return self.peer_gone(to, "closed its endpoint");
                }
                Err(_) => {}
            }
        }
        let mut m = hb[..hlen].to_vec();
        m.extend_from_slice(body);
        if self.peers.queue_ctrl(&to, m, self.outbox_max) {
            // (Its requests make the answers it does not read: stop taking
            // them, so TCP pushes back, until half have gone.)
            tracing::warn!(
                "{to} does not read our answers: more than FI_OXMR_OUTBOX_MAX ({} bytes) wait for it; not reading what it sends until half have gone",
                self.outbox_max
            );
            self.set_paused(to, true);
        }
    }

    /// Write what buffering links (TCP) queued behind a full socket or a
    /// connect in progress; complete what waited for a connect that came
    /// up, and fail what was sent on a link that closed or never connected.
    pub(super) fn flush_links(&mut self) {
        let mut down: Vec<SocketAddr> = Vec::new();
        let mut up: Vec<u64> = Vec::new();
        for p in &mut self.peers.list {
            p.link.flush();
            // (Whether it still connects first: that call moves a connect
            // on, and may find it failed, which `closed` then says. Asked
            // after `closed`, a connect that timed out between the two was
            // taken as up, and what waited for it completed.)
            let connecting = !p.waiting.is_empty() && p.link.connecting();
            if p.link.closed() {
                down.push(p.addr);
            } else if !p.waiting.is_empty() && !connecting {
                up.append(&mut p.waiting);
            }
        }
        for id in up {
            if let Some(p) = self.pending.remove(&id) {
                self.complete_tx(p.ctx, p.kind, p.tagged, p.len, p.credit, p.report);
            }
        }
        for a in down {
            let state = match self.peers.get(&a) {
                Some(p) => p.link.state(),
                None => continue,
            };
            self.link_down(a, state);
        }
    }

    /// Whether the link to `to` is still connecting (frames sent to it
    /// wait behind the connect).
    pub(super) fn connecting(&mut self, to: &SocketAddr) -> bool {
        // (A connect that failed in this very call closed the link and
        // dropped the frame: that send waits too, and fails with the link
        // at the next flush, rather than complete unsent. A link that does
        // not buffer, shm, took the frame into the peer's queue when the
        // send returned Ok: closed since, the peer closed its endpoint,
        // maybe after reading it, and the send is done.)
        // (Only a link that buffers, TCP, connects: shm's answer is the
        // flag, without reading the peer's queue header; with no such
        // link open, the count, without looking the peer up.)
        self.peers.buffering > 0
            && self.peers.get(to).is_some_and(|p| p.link.props().buffers && (p.link.connecting() || p.link.closed()))
    }

    /// A send that would complete now completes once the connection to
    /// `to` is up instead (or fails with it).
    pub(super) fn complete_when_up(&mut self, to: SocketAddr, done: TxDone, credit: Option<Credit>) {
        let id = self.new_id();
        let TxDone { ctx, kind, tagged, len } = done;
        let p =
            Pending { ctx, kind, tagged, len, credit, peer: to, report: true, iovs: Iovs::default(), peer_epoch: 0 };
        self.pending.insert(id, p);
        if let Some(p) = self.peers.get_mut(&to) {
            p.waiting.push(id);
        }
    }

    /// Retry the control messages that found a full queue, in order per
    /// peer. (A dead peer's go with it, `peer_gone`, from the liveness
    /// check.)
    pub(super) fn flush_outbox(&mut self) {
        if self.peers.owed == 0 {
            return;
        }
        let mut closed: Vec<SocketAddr> = Vec::new();
        let mut resumed: Vec<SocketAddr> = Vec::new();
        let mut sent = 0;
        for p in self.peers.list.iter_mut().filter(|p| !p.outbox.is_empty()) {
            while let Some(bytes) = p.outbox.front() {
                match p.link.send(&[bytes]) {
                    Ok(()) => {}
                    Err(WireError::Full) => break,
                    Err(WireError::Closed) => {
                        closed.push(p.addr);
                        break;
                    }
                    Err(WireError::Io(e)) => tracing::warn!("dropping a control message to {}: {e}", p.addr),
                }
                p.outbox_bytes -= bytes.len();
                p.outbox.pop_front();
                sent += 1;
            }
            if p.outbox_paused && p.outbox_bytes <= self.outbox_max / 2 {
                p.outbox_paused = false;
                resumed.push(p.addr);
            }
        }
        self.peers.owed -= sent;
        for a in resumed {
            self.set_paused(a, false);
        }
        for a in closed {
            if self.peers.find(&a).is_some() {
                self.peer_gone(a, "closed its endpoint");
            }
        }
    }
}
