//! The progress loop: one call drains the inbox, retries what waits
//! (answers, streams, stalled copies), serves kept copies and, now and
//! then, looks for peers that closed or died.

use std::net::SocketAddr;
use std::time::Instant;

use super::{Engine, DEFER_MAX, LIVENESS_CALLS, LIVENESS_EVERY, SERVE_EVERY};
use crate::protocol::{op, Hdr};
use crate::wire::Props;

/// When the progress loop last did its periodic work (`Engine::pace`).
pub(super) struct Pace {
    /// The last liveness check, and the progress calls since (the clock
    /// is read only every `LIVENESS_CALLS` calls: it costs more than a
    /// poll).
    pub(super) last_liveness: Instant,
    pub(super) ticks: u32,
    /// Progress calls in a row that left `deferred` unserved.
    pub(super) unserved: u32,
    /// What our region's `idle` word says (written on change only).
    pub(super) idle_shown: bool,
    /// A thread has slept waiting for this endpoint (`sleep`): its
    /// application waits in fi_cq_sread or on the fd, not spinning, and a
    /// pass's pushes are not bounded (`push::SEND_PASS_MAX`).
    pub(super) slept: bool,
}

impl Default for Pace {
    fn default() -> Self {
        Pace { last_liveness: Instant::now(), ticks: 0, unserved: 0, idle_shown: false, slept: false }
    }
}

/// Whether a frame that came over the wire `came` from the connection
/// that proved `via` (`Proof::Hello`) holds together (its header decodes,
/// its body is what the header says, an eager message carries at most
/// what an oxmr sender puts inline over that wire, `inline_accepted`, so a
/// peer cannot make us keep larger unexpected messages than we
/// advertise); if not, one log line says what was wrong.
fn frame_sound(msg: &[u8], via: &SocketAddr, came: &Props) -> bool {
    let eager_max = Engine::inline_accepted(came);
    let why = match Hdr::decode(msg) {
        None => match Hdr::version_of(msg) {
            Some(v) if msg.len() >= crate::protocol::HDR_BASE && v != crate::protocol::PROTO_VERSION => format!(
                "a message of protocol version {v} (this oxmr speaks {}: run one oxmr build on both sides)",
                crate::protocol::PROTO_VERSION
            ),
            _ => format!("a malformed message of {} bytes (its header does not decode)", msg.len()),
        },
        Some((h, hlen)) => match crate::protocol::frame_lies(&h, &msg[hlen..]) {
            None if h.op == op::EAGER && msg.len() - hlen > eager_max => format!(
                "an eager message of {} bytes, over this endpoint's eager limit of {eager_max} ({}: set it alike on both sides)",
                msg.len() - hlen,
                came.eager_setting
            ),
            None => return true,
            Some(why) => why,
        },
    };
    tracing::warn!("closing the {} connection from {via}: it sent {why}; a broken or hostile peer", came.name);
    false
}

impl Engine {
    /// Run the protocol: drain our queue, resend queued ACKs, notice dead peers.
    pub fn progress(&mut self) {
        self.progress_with(true);
    }

    /// `progress`; `serve` false: handle what arrives, but leave the kept
    /// copies (`deferred`) for a later call (the CQ being read has
    /// completions waiting, `Cq::read`); every `SERVE_EVERY`th such call
    /// serves them anyway, so an application whose queue never runs dry
    /// cannot starve its peers.
    // (In line: `ProgressList::run_with`.)
    #[inline(always)]
    pub fn progress_with(&mut self, serve: bool) {
        // The call of a spinning reader, most of them: nothing arrived and
        // nothing of our own waits. Asked first, in line, so that it costs
        // the looks and the tick, not the whole pass below (each empty poll
        // is time between a peer's message landing and its reader seeing
        // it). Everything `progress_full` would act on is in the condition.
        // (An endpoint with TCP links, `buffering`, is never quiet: its
        // pass does the one read of its sockets. Otherwise the inbox is
        // asked first, and a pass after an empty look does not ask again:
        // a TCP inbox with connections reads its sockets in `ready`.)
        let empty = self.peers.buffering == 0 && self.rx.as_mut().is_some_and(|rx| !rx.ready());
        if empty && self.quiet() {
            self.pace.ticks += 1;
            if self.pace.ticks < LIVENESS_CALLS {
                return;
            }
            self.pace.ticks -= 1;
        }
        self.progress_full(serve, empty);
    }

    /// Whether a progress pass whose inbox was just found empty would find
    /// nothing to do but its tick: no hello arrived, and none of what the
    /// pass serves is waiting (an srx handoff, owed frames or streams,
    /// stalled, kept or open copies, peers to pause, ban or settle, fences,
    /// offers, the idle flag to show).
    #[inline]
    fn quiet(&self) -> bool {
        self.peers.owed == 0
            && self.deferred.is_empty()
            && self.pace.idle_shown
            && self.sharing.stalled.is_empty()
            && self.sharing.open_job.is_none()
            && self.sharing.unpaired.is_none()
            && self.sharing.offers.is_empty()
            && self.to_pause.is_empty()
            && self.target.to_ban.is_empty()
            && self.gone.is_empty()
            && !self.fenced()
            && !self.handoffs_waiting()
            && !self.rx.as_ref().is_some_and(|rx| rx.has_hellos())
    }

    /// The pass; `empty`: the inbox was looked at just now and held no
    /// frame (not asked again).
    #[inline(never)]
    fn progress_full(&mut self, serve: bool, empty: bool) {
        self.take_handoffs();
        self.flush_outbox();
        self.run_streams();
        if !self.sharing.stalled.is_empty() {
            self.check_stalled(false);
        }
        // Messages are handled in place, in their queue cell (which no
        // producer touches until it is released): no copy out of the queue.
        // (Checked in place first: moving the region out and back costs an
        // empty poll more than the check.)
        if self.peers.buffering > 0 {
            self.flush_links();
        }
        let ready = !empty && self.rx.as_mut().is_some_and(|r| r.ready());
        if let Some(mut rx) = self.rx.take_if(|_| ready) {
            // (A panic while handling a message, caught at the C boundary,
            // must not leave the endpoint without its queue: dropping the
            // region would remove its file. The message is consumed.)
            let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut n = 0;
                // (A TCP frame that is malformed, lies about its body or
                // names another sender closes the connection it came on.)
                let mut reject = false;
                // (The last frame the inbox had (`Arrival::last`): another
                // pop would only look again, on TCP an EAGAIN system call
                // on the arrival's path before its completion is seen, on
                // shared memory ~35 instructions on every completing read;
                // the next progress looks.)
                let mut drained = false;
                // (A peer to pause or ban stops the loop: the inbox, out of
                // our hands meanwhile, learns it before it hands up more.)
                while n < 64
                    && !drained
                    && self.deferred.len() < DEFER_MAX
                    && self.to_pause.is_empty()
                    && self.target.to_ban.is_empty()
                    && rx.pop(|msg, how| {
                        drained = how.last;
                        self.busy = how.more || !self.deferred.is_empty();
                        if how.via.is_some_and(|v| !frame_sound(msg, v, how.wire)) {
                            reject = true;
                        } else if self.sent_by(msg, &how) {
                            // (A DATA frame whose payload landed: on_data
                            // counts it; DATA is never kept for later.)
                            self.pulls.landed = how.landed;
                            self.take_message(msg, how.more);
                            self.pulls.landed = 0;
                        } else {
                            reject = how.via.is_some();
                        }
                    })
                {
                    if std::mem::take(&mut reject) {
                        rx.reject_last();
                    }
                    n += 1;
                }
            }));
            self.rx = Some(rx);
            if let Err(panic) = handled {
                std::panic::resume_unwind(panic);
            }
        }
        if !self.to_pause.is_empty() {
            if let Some(rx) = self.rx.as_mut() {
                for (a, on) in self.to_pause.drain(..) {
                    rx.pause(a, on);
                }
            }
        }
        if !self.target.to_ban.is_empty() {
            if let Some(rx) = self.rx.as_mut() {
                for a in self.target.to_ban.drain(..) {
                    rx.ban_peer(a);
                }
            }
        }
        if let Some(hellos) = self.rx.as_mut().map(|r| r.take_hellos()).filter(|h| !h.is_empty()) {
            self.peers_restarted(hellos);
        }
        if serve || self.pace.unserved >= SERVE_EVERY {
            self.pace.unserved = 0;
            self.serve_deferred();
        } else if !self.deferred.is_empty() {
            self.pace.unserved += 1;
        }
        if self.sharing.open_job.is_some() || self.sharing.unpaired.is_some() {
            self.sharing.open_calls += 1;
            // Nothing to overlap it with, or open for long enough: a stream
            // of messages that start no copy must not hold its completion
            // back for good.
            if (self.deferred.is_empty() && !self.rx.as_mut().is_some_and(|r| r.ready()))
                || self.sharing.open_calls > SERVE_EVERY
            {
                self.finish_open_job();
            }
        }
        if !self.gone.is_empty() {
            self.settle_gone();
        }
        if self.fenced() {
            self.release_fenced();
        }
        if !self.sharing.offers.is_empty() {
            self.poll_offers();
        }
        // Idle: no copy of our own waiting, so a peer's shared copy gets
        // our core at once.
        let idle = self.deferred.is_empty();
        if idle != self.pace.idle_shown {
            if let Some(rx) = &self.rx {
                rx.set_idle(idle);
                self.pace.idle_shown = idle;
            }
        }
        self.pace.ticks += 1;
        if self.pace.ticks >= LIVENESS_CALLS {
            self.pace.ticks = 0;
            if self.pace.last_liveness.elapsed() < LIVENESS_EVERY {
                return;
            }
            self.pace.last_liveness = Instant::now();
            self.reap_dead_peers();
            if let Some(rx) = self.rx.as_mut() {
                rx.unstick();
            }
            if !self.sharing.stalled.is_empty() {
                self.check_stalled(true);
            }
        }
    }
}

impl Engine {
    /// The fd that becomes readable when a frame may have arrived (see
    /// `wire::Inbox::wake_fd`); None: this endpoint cannot ring a sleeper.
    pub fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        self.rx.as_ref().and_then(|r| r.wake_fd())
    }

    /// A thread is about to sleep on `wake_fd`: peers ring from now on.
    /// Whether the engine is quiet: nothing arrived, and nothing of its
    /// own waits that only progress moves on (frames queued for a peer, a
    /// connect in progress, kept or stalled copies, offers, peers going,
    /// armed triggered operations, whose counter may move with no arrival).
    /// Always followed by `awake`.
    pub fn sleep(&mut self) -> bool {
        self.pace.slept = true;
        let Some(rx) = self.rx.as_mut() else { return true };
        rx.set_sleeping(true);
        // (After the flag: a frame pushed before it was set is seen here.)
        if rx.ready() {
            return false;
        }
        // (A receive posted to a shared receive context and handed to us
        // signals our receive CQ; where that wakes nobody, or one is
        // waiting: a tick.)
        !self.srx_tick()
            && self.peers.owed == 0
            && self.deferred.is_empty()
            && self.sharing.stalled.is_empty()
            && self.sharing.open_job.is_none()
            && self.sharing.unpaired.is_none()
            && self.gone.is_empty()
            && self.sharing.offers.is_empty()
            && !self.armed()
            && (self.peers.buffering == 0
                || !self.peers.list.iter().any(|p| !p.waiting.is_empty() || p.link.connecting() || p.link.flush()))
    }

    /// The thread that called `sleep` woke.
    pub fn awake(&mut self) {
        if let Some(rx) = &self.rx {
            rx.set_sleeping(false);
        }
    }
}
