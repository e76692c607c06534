//! Which connections the inbox keeps: admission (bans, `Bounds::conn_max`),
//! hello deadlines and stuck frames, bans, and the end of a peer's group.

use super::*;

impl Inbox {
    /// Whether a connection just accepted from `from` is kept: not from a
    /// banned source, and within `Bounds::conn_max` (the oldest connection
    /// still without its hello makes room; if none, the new one goes).
    /// Refusals are said, at most once a second.
    pub(super) fn admit(&mut self, from: &SocketAddr) -> bool {
        let now = Instant::now();
        self.banned.retain(|&(_, until)| until > now);
        if self.banned.iter().any(|&(ip, _)| same_ip(ip, from.ip())) {
            self.alarms.say(|| {
                format!("refused a TCP connection from {from}: that source made too many refused accesses and is refused for a while (FI_OXMR_REFUSE_BAN_MS)")
            });
            return false;
        }
        if self.conns.len() < self.bounds.conn_max {
            return true;
        }
        let max = self.bounds.conn_max;
        match self.conns.iter_mut().filter(|c| c.peer.is_none() && !c.closed).min_by_key(|c| c.since) {
            Some(old) => {
                let who = old.sock.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
                self.alarms.say(|| {
                    format!("closing the TCP connection from {who}, which has not said its hello: this endpoint holds {max} connections, the most FI_OXMR_TCP_CONN_MAX allows")
                });
                old.closed = true;
                self.sweep();
                true
            }
            None => {
                self.alarms.say(|| {
                    format!("refused a TCP connection from {from}: this endpoint holds {max} connections, the most FI_OXMR_TCP_CONN_MAX allows")
                });
                false
            }
        }
    }

    /// Close the connections whose hello is overdue (`Bounds::hello_wait`),
    /// and, while the budget for unfinished frames is spent, those whose
    /// frame stayed unfinished as long. (Looked at every few polls, at
    /// most every 100 ms.)
    pub(super) fn sweep_late(&mut self) {
        let now = Instant::now();
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + Duration::from_millis(100);
        let wait = self.bounds.hello_wait;
        let starved = self.partial >= self.bounds.partial_max;
        let mut closed = 0;
        for c in self.conns.iter_mut().filter(|c| !c.closed) {
            let late_hello = c.peer.is_none() && now.duration_since(c.since) >= wait;
            let stuck = starved && c.partial_since.is_some_and(|t| now.duration_since(t) >= wait);
            if late_hello || stuck {
                let who = c.sock.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
                let why = if late_hello {
                    format!("said no hello within {} ms (FI_OXMR_TCP_HELLO_MS)", wait.as_millis())
                } else {
                    format!(
                        "held {} bytes of an unfinished frame for {} ms while the budget for them was spent (FI_OXMR_TCP_PARTIAL_MAX)",
                        c.buf.len(),
                        wait.as_millis()
                    )
                };
                self.alarms.say(|| format!("closing the TCP connection from {who}: it {why}"));
                c.closed = true;
                closed += 1;
            }
        }
        if closed > 0 {
            self.sweep();
        }
    }

    /// Stop (`on`) or resume reading the connections whose hello named
    /// `peer`: what it sent waits in the sockets, and TCP pushes back on
    /// its sender.
    pub fn pause(&mut self, peer: SocketAddr, on: bool) {
        self.paused.retain(|p| *p != peer);
        if on {
            self.paused.push(peer);
        }
    }

    /// Close every connection whose hello named `peer`, drop what they
    /// sent that is not taken yet, and refuse their sources for
    /// `Bounds::ban` (that peer made too many refused accesses: a key
    /// search).
    pub fn ban_peer(&mut self, peer: SocketAddr) {
        let until = Instant::now() + self.bounds.ban;
        let mut ids = Vec::new();
        for c in self.conns.iter_mut().filter(|c| c.peer == Some(peer)) {
            if let Ok(a) = c.sock.peer_addr() {
                self.banned.push((a.ip(), until));
            }
            let _ = c.sock.shutdown(std::net::Shutdown::Both);
            c.closed = true;
            ids.push(c.id);
        }
        let before = self.frames.len();
        self.frames.retain(|f| !ids.contains(&f.2));
        self.popped += (before - self.frames.len()) as u64;
        self.sweep();
    }

    /// Close the connections marked closed: their links learn it (`closed_by_inbox`),
    /// a parked one is no longer taken, and the wake fd lets them go
    /// (a link may hold the socket open a while longer).
    ///
    /// A peer that has lanes to us loses them all, and its other
    /// connections, when any of them ends: a lane carries data of
    /// transfers whose other frames came on another connection, and what
    /// was lost with it would leave those transfers waiting. Closed both
    /// ways (a link of ours may write on one of them), so the peer's own
    /// side fails what is pending too.
    ///
    /// The group is the peer's link: its connection and the lanes it
    /// opened after it, so connections of that endpoint up to its newest
    /// lane (ids count up as connections come). A connection it opened
    /// later (a new link, after the old one was dropped) is spared.
    pub(super) fn sweep(&mut self) {
        let mut ended: Vec<(SocketAddr, u32, u64)> = Vec::new();
        for c in self.conns.iter().filter(|c| c.closed) {
            let Some(p) = c.peer else { continue };
            let top =
                self.conns.iter().filter(|l| l.lane && l.peer == Some(p) && l.epoch == c.epoch).map(|l| l.id).max();
            if let Some(top) = top.filter(|&top| c.id <= top) {
                ended.push((p, c.epoch, top));
            }
        }
        for c in self.conns.iter_mut().filter(|c| !c.closed) {
            if c.peer.is_some_and(|p| ended.iter().any(|&(a, e, top)| (a, e) == (p, c.epoch) && c.id <= top)) {
                tracing::debug!(
                    "a connection of {} with lanes ended: closing its other connections (what is pending with it fails)",
                    c.peer.map_or_else(String::new, |p| p.to_string())
                );
                let _ = c.sock.shutdown(std::net::Shutdown::Both);
                c.closed = true;
            }
        }
        for c in self.conns.iter().filter(|c| c.closed) {
            c.closed_by_inbox.store(true, Ordering::Release);
            self.wake.remove(c.sock.as_raw_fd());
            self.pairs.forget(c.id);
        }
        let before = self.conns.len();
        self.conns.retain(|c| !c.closed);
        if self.conns.len() != before {
            self.index_stale = true;
            let ids: Vec<u64> = self.conns.iter().map(|c| c.id).collect();
            self.held_ids.retain(|id| ids.contains(id));
        }
        self.partial = self.conns.iter().map(|c| c.buf.len()).sum();
    }
}
