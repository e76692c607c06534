//! Pairs: which connection carries our frames to each peer, one per pair
//! of endpoints, shared by an endpoint's links and its inbox; the answer
//! to a peer's hello (adopt, park, or YIELD in a simultaneous open).

use crate::sys::LockExt;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, Weak};

use super::*;

use super::inbox::InConn;
use super::link::Core;

/// Who carries our frames to a peer (`Pairs`).
pub(super) enum Pair {
    /// A connection the peer opened and we adopted, not yet taken by a
    /// link of ours (the inbox reads it: a clone), with the peer's hello.
    Parked(Box<InConn>, Hello),
    /// Our link to the peer (gone when the engine dropped it).
    Mine(Weak<Core>),
}

/// What an endpoint's links and its inbox share: which connection carries
/// our frames to each peer, one per pair of endpoints (see the module
/// header), and the connections of our links whose answer came, for the
/// inbox to read. Locking: the table before a link's `out`, never the
/// reverse; `handoff` is taken alone.
pub struct Pairs {
    me: SocketAddr,
    table: Mutex<HashMap<SocketAddr, Pair>>,
    handoff: Mutex<Vec<InConn>>,
    /// Whether `handoff` holds any (one load per poll, no lock).
    handing: AtomicBool,
    ids: AtomicU64,
}

impl std::fmt::Debug for Pairs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pairs").field("me", &self.me).finish_non_exhaustive()
    }
}

/// What an accepted connection's hello is answered.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer {
    /// It carries frames (to us; both ways if adopted).
    Accept,
    /// The connection we opened to that peer survives; this one closes.
    Yield,
}

impl Pairs {
    pub(super) fn new(me: SocketAddr) -> Pairs {
        Pairs {
            me,
            table: Mutex::new(HashMap::new()),
            handoff: Mutex::new(Vec::new()),
            handing: AtomicBool::new(false),
            ids: AtomicU64::new(0),
        }
    }

    pub(super) fn table(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Pair>> {
        self.table.lock_ok()
    }

    pub(super) fn new_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(super) fn hand_over(&self, c: InConn) {
        self.handoff.lock_ok().push(c);
        self.handing.store(true, Ordering::Release);
    }

    /// Whether a connection waits to be handed over (one plain load).
    pub(super) fn handing(&self) -> bool {
        self.handing.load(Ordering::Relaxed)
    }

    pub(super) fn take_handed(&self) -> Vec<InConn> {
        // (A load first: this runs on every poll, and a swap is a locked
        // write to the line even when nothing was handed over.)
        if !self.handing.load(Ordering::Relaxed) || !self.handing.swap(false, Ordering::Acquire) {
            return Vec::new();
        }
        std::mem::take(&mut *self.handoff.lock_ok())
    }

    /// The connection `id` ended: a parked one is no longer to be taken.
    pub(super) fn forget(&self, id: u64) {
        self.table().retain(|_, p| !matches!(p, Pair::Parked(c, _) if c.id == id));
    }

    /// The peer at `from` opened `c` to us, its hello `h`: adopt it for our
    /// frames to `from` (parked for our next link, or moved under the link
    /// we have that still waits), or keep ours and answer YIELD.
    ///
    /// Both sides decide alike from what both know: the connection opened
    /// by the lower address survives, among those that come from their
    /// hello's IP (`adoptable`; if neither does, each side keeps sending on
    /// its own, one each way). A connection from an endpoint we have one
    /// with already is its newest (a peer has one link to us at a time: it
    /// dropped the other, whose end we will read; or it is a restarted
    /// peer, of another epoch, whose old link the engine drops): parked,
    /// for our next link to that address. (The loser of a race seen late is
    /// closed by its opener already: parked, then forgotten at its end.)
    pub(super) fn greeted(&self, c: &InConn, from: SocketAddr, h: &Hello) -> Answer {
        if from == self.me {
            // (Our own link to ourselves: it writes, we read; one way.)
            return Answer::Accept;
        }
        let theirs_ok = c.sock.peer_addr().is_ok_and(|p| same_ip(p.ip(), from.ip()));
        let mut t = self.table();
        let park = |t: &mut HashMap<SocketAddr, Pair>| {
            if let (true, Ok(sock)) = (theirs_ok, c.sock.try_clone()) {
                t.insert(
                    from,
                    Pair::Parked(
                        Box::new(InConn::new(sock, c.id, Some((from, h.epoch)), c.closed_by_inbox.clone())),
                        *h,
                    ),
                );
            }
            Answer::Accept
        };
        let core = match t.get(&from) {
            Some(Pair::Mine(w)) => w.upgrade(),
            _ => None,
        };
        let Some(core) = core else { return park(&mut t) };
        let mut o = core.out();
        if o.state != LinkState::Open {
            return park(&mut t);
        }
        match (o.setup, o.peer) {
            (_, Some(_)) => park(&mut t),
            (Setup::Yielded(_), None) if theirs_ok && o.adopt(c, *h) => Answer::Accept,
            (Setup::Yielded(_), None) => Answer::Accept,
            (_, None) => {
                let ours_wins = if o.adoptable && theirs_ok { self.me < from } else { o.adoptable };
                if ours_wins {
                    Answer::Yield
                } else {
                    // (Ours never carried a frame: it waited for its answer.)
                    if theirs_ok {
                        o.adopt(c, *h);
                    }
                    Answer::Accept
                }
            }
        }
    }
}
