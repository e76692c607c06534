//! The progress loop: one call drains the inbox, retries what waits
//! (answers, streams, stalled copies), serves kept copies and, now and
//! then, looks for peers that closed or died.

use super::*;

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
    pub fn progress_with(&mut self, serve: bool) {
        self.flush_outbox();
        self.run_streams();
        if !self.stalled.is_empty() {
            self.check_stalled(false);
        }
        // Messages are handled in place, in their queue cell (which no
        // producer touches until it is released): no copy out of the queue.
        // (Checked in place first: moving the region out and back costs an
        // empty poll more than the check.)
        if self.peers.buffering > 0 {
            self.flush_links();
        }
        let ready = self.rx.as_mut().is_some_and(|r| r.ready());
        if let Some(mut rx) = self.rx.take_if(|_| ready) {
            // (A panic while handling a message, caught at the C boundary,
            // must not leave the endpoint without its queue: dropping the
            // region would remove its file. The message is consumed.)
            let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut n = 0;
                while n < 64
                    && self.deferred.len() < DEFER_MAX
                    && rx.pop(|msg, more, via| {
                        self.busy = more || !self.deferred.is_empty();
                        if self.sent_by(msg, via) {
                            self.take_message(msg, more)
                        }
                    })
                {
                    n += 1;
                }
            }));
            self.rx = Some(rx);
            if let Err(panic) = handled {
                std::panic::resume_unwind(panic);
            }
        }
        if let Some(hellos) = self.rx.as_mut().map(|r| r.take_hellos()).filter(|h| !h.is_empty()) {
            self.peers_restarted(hellos);
        }
        if serve || self.unserved >= SERVE_EVERY {
            self.unserved = 0;
            self.serve_deferred();
        } else if !self.deferred.is_empty() {
            self.unserved += 1;
        }
        if self.open_job.is_some() || self.kept.is_some() {
            self.open_calls += 1;
            // Nothing to overlap it with, or open for long enough: a stream
            // of messages that start no copy must not hold its completion
            // back for good.
            if (self.deferred.is_empty() && !self.rx.as_mut().is_some_and(|r| r.ready()))
                || self.open_calls > SERVE_EVERY
            {
                self.finish_open_job();
            }
        }
        if !self.gone.is_empty() {
            self.settle_gone();
        }
        if !self.offers.is_empty() {
            self.poll_offers();
        }
        // Idle: no copy of our own waiting, so a peer's shared copy gets
        // our core at once.
        let idle = self.deferred.is_empty();
        if idle != self.idle_shown {
            if let Some(rx) = &self.rx {
                rx.set_idle(idle);
                self.idle_shown = idle;
            }
        }
        self.ticks += 1;
        if self.ticks >= LIVENESS_CALLS {
            self.ticks = 0;
            if self.last_check.elapsed() < LIVENESS_EVERY {
                return;
            }
            self.last_check = Instant::now();
            self.reap_dead_peers();
            if let Some(rx) = self.rx.as_mut() {
                rx.unstick();
            }
            if !self.stalled.is_empty() {
                self.check_stalled(true);
            }
        }
    }
}
