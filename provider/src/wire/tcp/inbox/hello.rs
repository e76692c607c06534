//! Answering a connection's hello (and, with a job key, checking its
//! proof); strangers said at most once a second.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::pairs::Answer;
use super::super::*;
use super::InConn;

/// Log lines about strangers (a peer without the job's key), at most one a
/// second, each saying how many were not said since the last: a stranger
/// that connects in a loop must not fill the log.
#[derive(Default)]
pub(super) struct Alarms {
    last: Option<Instant>,
    quiet: u64,
}

impl Alarms {
    pub(super) fn say(&mut self, line: impl FnOnce() -> String) {
        if self.last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            self.quiet += 1;
            return;
        }
        self.last = Some(Instant::now());
        let quiet = std::mem::take(&mut self.quiet);
        if quiet > 0 {
            tracing::warn!("{} ({quiet} more such refusals since the last line)", line());
        } else {
            tracing::warn!("{}", line());
        }
    }
}

/// What answering a connection's hello needs of the inbox (its fields,
/// borrowed apart from the connection being read).
pub(super) struct Greeter<'a> {
    pub(super) me: &'a Hello,
    pub(super) pairs: &'a Arc<Pairs>,
    pub(super) key: Option<&'a crate::auth::JobKey>,
    pub(super) alarms: &'a mut Alarms,
    /// The endpoints we have a connection (not a lane) with.
    pub(super) mains: &'a [(SocketAddr, u32)],
    /// Connections whose hello was taken in this poll.
    pub(super) fresh: &'a mut Vec<(SocketAddr, u32)>,
}

impl Greeter<'_> {
    /// Our hello without our epoch and pid (what a peer that has proved
    /// nothing gets).
    fn anonymous(&self) -> Hello {
        Hello { epoch: 0, pid: 0, ..*self.me }
    }

    /// Move `c`'s hello on (its hello, with a job key our challenge and its
    /// proof, then our answer): the bytes of `c.buf` it took. Refusals
    /// close `c` and say why.
    pub(super) fn step(&mut self, c: &mut InConn) -> usize {
        let mut at = 0;
        if c.challenged.is_none() {
            // (A hello of another version: said as soon as its version is
            // in, whatever its length; every version shares the first 48
            // bytes.)
            match preamble(&c.buf) {
                Preamble::Fine => {}
                Preamble::Foreign => {
                    tracing::warn!("refusing a TCP connection that does not speak oxmr's TCP wire");
                    c.closed = true;
                    return 0;
                }
                Preamble::Version(version) => {
                    tracing::warn!(
                        "refusing a TCP connection of wire version {version}; this oxmr speaks version {VERSION}: run one oxmr build on both sides"
                    );
                    // (Ours goes back first: the opener says whose version
                    // differs.)
                    let _ = (&c.sock).write_all(&self.me.encode(ACCEPT));
                    c.closed = true;
                    return 0;
                }
            }
            if c.buf.len() < HELLO_LEN {
                return 0;
            }
            let Some(g) = Hello::greeting(&c.buf[..HELLO_LEN]) else {
                tracing::warn!("refusing a TCP connection that does not speak oxmr's TCP wire");
                c.closed = true;
                return 0;
            };
            if g.kind != OPEN && g.kind != LANE {
                tracing::warn!(
                    "refusing a TCP connection that opens with an answer (hello kind {}), not a hello of its own",
                    g.kind
                );
                c.closed = true;
                return 0;
            }
            let from = c.sock.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
            match (self.key, g.keyed) {
                (Some(_), false) => {
                    self.alarms.say(|| format!(
                        "refused a TCP connection from {from}: a peer that does not hold the job's key tried to connect (set the same FI_OXMR_AUTH_KEY, or auth_key, on every process of the job)"
                    ));
                    // (Our keyed hello goes back, so the opener says that it
                    // lacks the key; without our epoch and pid: nothing of
                    // us to a stranger.)
                    let _ = (&c.sock).write_all(&self.anonymous().encode_with(
                        ACCEPT,
                        true,
                        &[0; PROOF_LEN],
                        &[0; PROOF_LEN],
                    ));
                    c.closed = true;
                    return 0;
                }
                (None, true) => {
                    self.alarms.say(|| format!(
                        "refused a TCP connection from {from}: the peer holds a job key and this endpoint has none (set the same FI_OXMR_AUTH_KEY, or auth_key, on every process of the job)"
                    ));
                    let _ = (&c.sock).write_all(&self.me.encode(ACCEPT));
                    c.closed = true;
                    return 0;
                }
                (None, false) => {
                    // (Without a key, the kernel's word is all there is: a
                    // hello is believed only from the IP its name gives, so
                    // a process elsewhere can neither speak as another
                    // endpoint nor make us dial a third party.)
                    let src = c.sock.peer_addr().ok().map(|a| a.ip());
                    if !matches!((src, g.hello.ip()), (Some(s), Some(n)) if same_ip(s, n)) {
                        let named = crate::info::addr::parse(&g.hello.name)
                            .map_or_else(|| "no valid address".to_string(), |a| a.to_string());
                        self.alarms.say(|| format!(
                            "refused a TCP connection from {from} whose hello names {named}: without a job key a peer is believed only from the IP its name gives (set the same FI_OXMR_AUTH_KEY on every process to connect across addresses)"
                        ));
                        c.closed = true;
                        return 0;
                    }
                    unauthenticated();
                    return HELLO_LEN + self.answer(c, g, false);
                }
                (Some(k), true) => {
                    let Some(nonce) = crate::auth::nonce() else {
                        tracing::warn!(
                            "refusing a TCP connection from {from}: the kernel gave no random bytes for a nonce"
                        );
                        c.closed = true;
                        return 0;
                    };
                    let mut open = [0u8; HELLO_LEN];
                    open.copy_from_slice(&c.buf[..HELLO_LEN]);
                    // (Our epoch and pid only in the answer after its
                    // proof: a stranger learns nothing of us.)
                    let mut ch = self.anonymous().encode_with(CHALLENGE, true, &nonce, &[0; PROOF_LEN]);
                    let t = transcript(&open, &ch);
                    ch[HELLO_LEN - PROOF_LEN..].copy_from_slice(&k.tag(PROOF_ACCEPT, &[&t]));
                    // (Small, on a fresh socket: taken at once.)
                    let _ = (&c.sock).write_all(&ch);
                    c.challenged = Some(Box::new((g, t)));
                    at = HELLO_LEN;
                }
            }
        }
        // With a job key: the opener's proof, over the same transcript.
        let (Some(k), Some(ch)) = (self.key, c.challenged.as_ref()) else { return at };
        if c.buf.len() - at < PROOF_LEN {
            return at;
        }
        let (g, t) = **ch;
        c.challenged = None;
        if !k.verify(PROOF_OPEN, &[&t], &c.buf[at..at + PROOF_LEN]) {
            let from = c.sock.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
            self.alarms.say(|| format!(
                "refused a TCP connection from {from}: a peer that does not hold the job's key tried to connect (its proof failed: a different FI_OXMR_AUTH_KEY or auth_key?)"
            ));
            c.closed = true;
            return at;
        }
        tracing::debug!(
            "the TCP connection from {} proved the job key",
            c.sock.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string())
        );
        at + PROOF_LEN + self.answer(c, g, true)
    }

    /// Answer the hello `g` of `c` (proven, where a job key is held): the
    /// connection carries frames to us (adopted for ours too where
    /// `Pairs::greeted` says so), or YIELD; a lane if it says it is one.
    /// Takes no bytes of its own (0).
    fn answer(&mut self, c: &mut InConn, g: Greeting, keyed: bool) -> usize {
        let h = g.hello;
        let encode = |kind| self.me.encode_with(kind, keyed, &[0; PROOF_LEN], &[0; PROOF_LEN]);
        let Some(a) = crate::info::addr::parse(&h.name) else {
            tracing::warn!("refusing a TCP connection whose hello names no valid address");
            c.closed = true;
            return 0;
        };
        if g.kind == LANE {
            // (A lane: it carries frames to us alone, is never adopted,
            // and is no new endpoint's hello. It belongs to a link whose
            // connection is up.)
            if !self.mains.contains(&(a, h.epoch)) {
                tracing::warn!(
                    "refusing a TCP lane from {a}: no connection of that endpoint (epoch {:#x}) for it to belong to",
                    h.epoch
                );
                c.closed = true;
                return 0;
            }
            let _ = (&c.sock).write_all(&encode(ACCEPT));
            c.peer = Some(a);
            c.epoch = h.epoch;
            c.lane = true;
            return 0;
        }
        let answer = self.pairs.greeted(c, a, &h);
        let kind = if answer == Answer::Yield { YIELD } else { ACCEPT };
        // (Small, on a fresh socket: taken at once.)
        let _ = (&c.sock).write_all(&encode(kind));
        c.peer = Some(a);
        c.epoch = h.epoch;
        self.fresh.push((a, h.epoch));
        // (A yielded connection carries nothing: the peer moves to the one
        // we opened.)
        c.closed = answer == Answer::Yield;
        0
    }
}
