//! A link: the connection that carries our frames to one peer (ours, or
//! the one it opened to us, adopted: `Pairs`), its out queue in stream
//! order (copied bytes, zero-copy parts), our hello and the peer's answer;
//! and its lanes, the extra connections it opens to the peer for frames
//! whose order does not matter (`Link::send_spread`).

use crate::sys::LockExt;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::inbox::InConn;
use super::pairs::Pair;
use super::*;

/// What waits to go out, in stream order.
enum Seg {
    /// Bytes to write (copied into the link).
    Bytes(VecDeque<u8>),
    /// A frame part in registered memory, sent with SEND_ZC once every
    /// byte before it is out.
    Zc(ZcPart),
}

struct ZcPart {
    addr: usize,
    len: usize,
    slot: u16,
    /// Once submitted (it completes before anything after it goes).
    flight: Option<Arc<Flight>>,
}

/// What an opened link knows, and what it has not sent yet.
pub(super) struct Out {
    /// The connection our frames go on (replaced when we adopt the one the
    /// peer opened, or connect again after a YIELD), and its id (the
    /// inbox's, see `InConn::id`).
    sock: TcpStream,
    id: u64,
    /// What waits behind a full socket, a connect in progress, the peer's
    /// answer or a zero-copy send in flight, and its bytes in all.
    queued: VecDeque<Seg>,
    queued_len: usize,
    /// Our hello's bytes not yet written (they go first, before any frame;
    /// with a job key, then our proof).
    greet: Vec<u8>,
    /// With a job key: the hello we sent (the proofs cover it), until the
    /// peer's challenge came and our proof went into `greet`; then None.
    sent: Option<Box<[u8; HELLO_LEN]>>,
    pub(super) state: LinkState,
    pub(super) setup: Setup,
    /// The peer's hello, once it answered (its first bytes so far).
    pub(super) peer: Option<Hello>,
    got: Vec<u8>,
    /// Whether the inbox reads this connection (then it says, in `closed_by_inbox`,
    /// when the connection ends; we never read it).
    handed: bool,
    closed_by_inbox: ClosedFlag,
    /// Whether the connection comes from our name's IP (the peer adopts
    /// only such a connection: `Pairs::greeted`).
    pub(super) adoptable: bool,
    /// SEND_ZC on this link: the zero-copy sends whose notification we
    /// have not looked at (oldest first, the last `ZC_PROBES`), how many in
    /// a row said the kernel copied, and whether it stopped
    /// (`TcpSend::copied_off` of them).
    zc_probes: VecDeque<Arc<Flight>>,
    zc_copied: u32,
    zc_off: bool,
}

/// A link to one peer: the connection that carries our frames to it.
pub struct Link(Arc<Core>);

pub(super) struct Core {
    to: SocketAddr,
    me: Hello,
    out: Mutex<Out>,
    tx: TcpSend,
    /// The endpoint's table of connections (None: a bare sender of tests,
    /// whose link reads its own connection; or a lane).
    pairs: Option<Arc<Pairs>>,
    /// Whether this is a lane (its hello says LANE; only ACCEPT answers it).
    lane: bool,
    /// The link's lanes (none in a lane).
    lanes: Mutex<Lanes>,
}

/// A link's lanes: extra connections to its peer that carry frames whose
/// order does not matter (DATA answering a PULL: the receiver placed the
/// pull before it asked, and each chunk says where it goes), so that one
/// large transfer moves over several TCP connections at once: for paths
/// where one flow is held back by what a second does not share (a NIC
/// that processes one flow's receives on one core). On loopback and veth
/// they do not pay (docs/benchmarks.md, "Lanes"): off by default. Opened once the link is established
/// (FI_OXMR_TCP_LANES - 1 of them), each answered by the peer before it
/// carries a frame; the peer reads them and never writes on them. Locking:
/// `lanes` before any `out`, never while holding one.
#[derive(Default)]
struct Lanes {
    open: Vec<Core>,
    /// Where the next frame is tried first (round robin over the lanes
    /// and the link's own connection, last).
    next: usize,
    /// The epoch of the peer they must reach (the link's), and when they
    /// were opened (once per link; None: not yet): one not answered
    /// within `CONNECT_WAIT` goes.
    epoch: u32,
    since: Option<Instant>,
}

impl Out {
    /// A link's state on `sock`, established (`fresh` when we opened it).
    fn new(sock: TcpStream) -> Out {
        Out {
            sock,
            id: 0,
            queued: VecDeque::new(),
            queued_len: 0,
            greet: Vec::new(),
            sent: None,
            state: LinkState::Open,
            setup: Setup::Up,
            peer: None,
            got: Vec::new(),
            handed: false,
            closed_by_inbox: ClosedFlag::default(),
            adoptable: false,
            zc_probes: VecDeque::new(),
            zc_copied: 0,
            zc_off: false,
        }
    }

    /// Queue bytes at the back (behind everything queued).
    fn push_bytes(&mut self, b: &[u8]) {
        if b.is_empty() {
            return;
        }
        self.queued_len += b.len();
        if let Some(Seg::Bytes(q)) = self.queued.back_mut() {
            q.extend(b);
        } else {
            self.queued.push_back(Seg::Bytes(b.iter().copied().collect()));
        }
    }

    fn close(&mut self) {
        self.state = LinkState::Closed;
        // (A flight in progress stays owned by the ring's map until its
        // notification: dropping ours leaves nothing dangling.)
        self.queued.clear();
        self.queued_len = 0;
    }

    /// Whether frames go out: connected, and the peer's answer came.
    fn established(&self) -> bool {
        self.state == LinkState::Open && self.setup == Setup::Up && self.peer.is_some()
    }

    /// Write on `sock`, a connection we just opened (connected already if
    /// `up`), our hello (of `kind`: OPEN, or LANE) first, with a fresh
    /// nonce where we hold a job key (`key`; the link closes if the kernel
    /// has no random bytes for it).
    fn start(&mut self, up: bool, id: u64, me: &Hello, kind: u32, key: Option<&crate::auth::JobKey>) {
        let _ = self.sock.set_nodelay(true);
        self.adoptable = match (self.sock.local_addr(), crate::info::addr::parse(&me.name)) {
            (Ok(l), Some(n)) => same_ip(l.ip(), n.ip()),
            _ => false,
        };
        self.id = id;
        self.setup = if up { Setup::Up } else { Setup::Connecting(Instant::now()) };
        self.sent = None;
        match key.map(|_| crate::auth::nonce()) {
            None => {
                unauthenticated();
                self.greet = me.encode(kind).to_vec();
            }
            Some(Some(nonce)) => {
                let h = me.encode_with(kind, true, &nonce, &[0; PROOF_LEN]);
                self.greet = h.to_vec();
                self.sent = Some(Box::new(h));
            }
            Some(None) => {
                tracing::warn!("cannot open a TCP connection: the kernel gave no random bytes for its nonce");
                self.setup = Setup::Failed(libc::EIO);
                self.close();
            }
        }
        self.peer = None;
        self.got.clear();
        self.handed = false;
        self.closed_by_inbox = ClosedFlag::default();
    }

    /// Write on `c`, the connection the peer opened (its hello `h`), which
    /// the inbox reads: our queue goes out on it once we write again.
    pub(super) fn adopt(&mut self, c: &InConn, h: Hello) -> bool {
        let Ok(sock) = c.sock.try_clone() else { return false };
        self.sock = sock;
        self.id = c.id;
        self.setup = Setup::Up;
        self.greet.clear();
        self.sent = None;
        self.peer = Some(h);
        self.got.clear();
        self.handed = true;
        self.closed_by_inbox = c.closed_by_inbox.clone();
        true
    }
}

impl Drop for Link {
    /// The engine is done with this peer: the connection ends both ways
    /// (the inbox holds it too, and reads the peer's end).
    fn drop(&mut self) {
        let o = self.0.out();
        if o.handed {
            let _ = o.sock.shutdown(std::net::Shutdown::Write);
        }
    }
}

impl Link {
    /// Start connecting to the endpoint named `to` (or take the connection
    /// it opened to us, if `pairs` adopted one). Nothing waits: the
    /// connect goes on in the kernel (the peer's listener completes it
    /// without the peer's help), our hello goes once it is up, frames sent
    /// meanwhile queue (within `OUT_MAX`) and go out from `flush` once the
    /// peer answered; a connect that fails, or is not up within
    /// `CONNECT_WAIT`, closes the link (`setup` says why). An error here is
    /// a refusal the kernel knew at once. Frame parts in memory pinned in
    /// `tx`'s ring go out with SEND_ZC.
    pub fn open(to: &SocketAddr, me: &Hello, tx: &TcpSend, pairs: Option<&Arc<Pairs>>) -> Result<Link, OpenError> {
        let tx = TcpSend { ring: tx.ring.clone().filter(|r| r.sends_zc()), ..tx.clone() };
        let mut table = pairs.map(|p| p.table());
        let parked = match table.as_mut().and_then(|t| t.remove(to)) {
            Some(Pair::Parked(c, h)) if !c.closed_by_inbox.load(Ordering::Acquire) => Some((*c, h)),
            _ => None,
        };
        let out = match parked {
            Some((c, h)) => {
                let mut o = Out::new(c.sock);
                o.id = c.id;
                o.peer = Some(h);
                o.handed = true;
                o.closed_by_inbox = c.closed_by_inbox;
                o
            }
            None => {
                let (sock, up) = crate::sys::connect_from(to, me.ip()).map_err(OpenError::Unreachable)?;
                let id = pairs.map_or(0, |p| p.new_id());
                let mut o = Out::new(sock);
                o.start(up, id, me, OPEN, tx.key.as_ref());
                o
            }
        };
        let core = Arc::new(Core {
            to: *to,
            me: *me,
            out: Mutex::new(out),
            tx,
            pairs: pairs.cloned(),
            lane: false,
            lanes: Mutex::default(),
        });
        {
            let mut o = core.out();
            core.step(&mut o);
        }
        if let Some(t) = table.as_mut() {
            t.insert(*to, Pair::Mine(Arc::downgrade(&core)));
        }
        Ok(Link(core))
    }

    /// Send one frame in parts: queued whole, written as far as the socket
    /// takes it now (nothing, while connecting or waiting for the peer's
    /// answer). A part in registered memory (`zc_slots`) queues as itself,
    /// sent with SEND_ZC when its turn comes; the rest is copied ("small
    /// messages are copied").
    pub fn send(&self, parts: &[&[u8]]) -> Result<(), WireError> {
        self.0.send(parts)
    }

    /// Write what waits (connecting on first), on the lanes too; whether
    /// something still does.
    pub fn flush(&self) -> bool {
        let mut waits = {
            let mut o = self.0.out();
            self.0.push_out(&mut o);
            !o.queued.is_empty() && o.state == LinkState::Open
        };
        if self.0.tx.lanes > 1 {
            let mut l = self.0.lanes();
            if !l.open.is_empty() {
                if !self.0.tend_lanes(&mut l) {
                    return false;
                }
                waits |= l.open.iter().any(|lane| !lane.out().queued.is_empty());
            }
        }
        waits
    }

    /// Whether this link spreads frames whose order does not matter over
    /// lanes (FI_OXMR_TCP_LANES above 1).
    pub fn spreads(&self) -> bool {
        self.0.tx.lanes > 1
    }

    /// Send one frame whose order among the link's frames does not matter
    /// on whichever of its connections has nothing queued (the lanes first,
    /// in turn, then its own); `Full` when every one has something queued
    /// (the caller tries again after progress, as for a full socket). The
    /// lanes open at the first such frame once the link is established;
    /// until they are answered, frames go on the link's own connection.
    pub fn send_spread(&self, parts: &[&[u8]]) -> Result<(), WireError> {
        if !self.spreads() {
            return self.0.send(parts);
        }
        let mut l = self.0.lanes();
        let (main_free, epoch) = {
            let mut o = self.0.out();
            self.0.push_out(&mut o);
            if o.state != LinkState::Open {
                return Err(WireError::Closed);
            }
            // (Still connecting, its queue takes the frame as `send` does.)
            (o.queued.is_empty(), o.peer.filter(|_| o.established()).map(|h| h.epoch))
        };
        if let (None, Some(epoch)) = (l.since, epoch) {
            self.0.open_lanes(&mut l, epoch);
        }
        if !self.0.tend_lanes(&mut l) {
            return Err(WireError::Closed);
        }
        let n = l.open.len();
        for k in 0..=n {
            let i = (l.next + k) % (n + 1);
            if i == n {
                if !main_free {
                    continue;
                }
                l.next = 0;
                drop(l);
                return self.0.send(parts);
            }
            let lane = &l.open[i];
            let mut o = lane.out();
            if o.established() && o.queued.is_empty() {
                let r = lane.send_in(&mut o, parts);
                drop(o);
                l.next = i + 1;
                if let Err(WireError::Closed) = r {
                    // (It broke under this frame: the link goes with it.)
                    self.0.tend_lanes(&mut l);
                    return Err(WireError::Closed);
                }
                return r;
            }
        }
        Err(WireError::Full)
    }

    /// Whether every connection of the link that takes frames whose order
    /// does not matter (its own, its answered lanes) has something queued:
    /// `send_spread` would answer `Full` (after writing what it can).
    pub fn spread_full(&self) -> bool {
        let mut l = self.0.lanes();
        let main_busy = {
            let mut o = self.0.out();
            self.0.push_out(&mut o);
            o.state == LinkState::Open && !o.queued.is_empty()
        };
        if !main_busy || !self.0.tend_lanes(&mut l) {
            return false;
        }
        l.open.iter().all(|lane| {
            let o = lane.out();
            !(o.established() && o.queued.is_empty())
        })
    }

    /// The link's lanes answered so far (tests).
    #[cfg(test)]
    pub(super) fn lanes_up(&self) -> usize {
        self.0.lanes().open.iter().filter(|lane| lane.out().established()).count()
    }

    /// Shut a lane's socket down (tests: a lane that breaks).
    #[cfg(test)]
    pub(super) fn break_lane(&self, i: usize) {
        let _ = self.0.lanes().open[i].out().sock.shutdown(std::net::Shutdown::Both);
    }

    /// Where the connection stands (moves a connect in progress on).
    pub fn setup(&self) -> Setup {
        let mut o = self.0.out();
        self.0.step(&mut o);
        o.setup
    }

    /// Whether frames still wait for the connection: a connect in
    /// progress, the peer's answer, or the peer's own connection after it
    /// answered YIELD (false once established, or failed). Established,
    /// what waited is written (as far as the socket takes it): an
    /// operation that completes when this says false has its frame out.
    pub fn connecting(&self) -> bool {
        let mut o = self.0.out();
        self.0.push_out(&mut o);
        o.state == LinkState::Open && !o.established()
    }

    /// The peer's epoch, once its hello arrived (0: not yet).
    pub fn epoch(&self) -> u32 {
        let mut o = self.0.out();
        self.0.step(&mut o);
        o.peer.map_or(0, |h| h.epoch)
    }

    /// The peer's process, as its hello says (0: not yet).
    pub fn owner(&self) -> u32 {
        let mut o = self.0.out();
        self.0.step(&mut o);
        o.peer.map_or(0, |h| h.pid)
    }

    /// Whether the link is known closed (no system call).
    pub fn closed(&self) -> bool {
        let o = self.0.out();
        o.state != LinkState::Open || (o.handed && o.closed_by_inbox.load(Ordering::Acquire))
    }

    /// Where the link stands: a connection the inbox reads ended when the
    /// inbox says so (`closed_by_inbox`); one we read ourselves (a bare sender's) ended
    /// when a read finds its end or an error (the peer writes nothing on it
    /// after its hello); a connect that failed is `Unreachable`.
    pub fn state(&self) -> LinkState {
        let mut o = self.0.out();
        self.0.step(&mut o);
        if o.state == LinkState::Open && o.handed && o.closed_by_inbox.load(Ordering::Acquire) {
            o.state = LinkState::Closed;
        } else if o.state == LinkState::Open && o.peer.is_some() && !o.handed {
            let mut b = [0u8; 1];
            match (&o.sock).read(&mut b) {
                Ok(0) => o.state = LinkState::Closed,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => o.state = LinkState::Closed,
            }
        }
        match o.setup {
            Setup::Failed(errno) => LinkState::Unreachable(errno),
            _ => o.state,
        }
    }

    /// Our socket (tests that shrink its buffers).
    #[cfg(test)]
    pub(super) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.0.out().sock.as_raw_fd()
    }
}

impl Core {
    pub(super) fn out(&self) -> std::sync::MutexGuard<'_, Out> {
        self.out.lock_ok()
    }

    fn lanes(&self) -> std::sync::MutexGuard<'_, Lanes> {
        self.lanes.lock_ok()
    }

    /// Open the link's lanes to the peer whose hello gave `epoch` (once
    /// per link: one whose connect fails is not tried again).
    fn open_lanes(&self, l: &mut Lanes, epoch: u32) {
        l.epoch = epoch;
        l.since = Some(Instant::now());
        for _ in 1..self.tx.lanes.min(LANES_MAX) {
            match crate::sys::connect_from(&self.to, self.me.ip()) {
                Ok((sock, up)) => {
                    let mut o = Out::new(sock);
                    o.start(up, 0, &self.me, LANE, self.tx.key.as_ref());
                    let lane = Core {
                        to: self.to,
                        me: self.me,
                        out: Mutex::new(o),
                        tx: self.tx.clone(),
                        pairs: None,
                        lane: true,
                        lanes: Mutex::default(),
                    };
                    l.open.push(lane);
                }
                Err(e) => tracing::debug!("opening a lane to {} failed: {e}; its frames go on the others", self.to),
            }
        }
    }

    /// Move the lanes on (connect, hello, answer, what they queued). A lane
    /// that ends before its answer came carried nothing: it goes, quietly
    /// (its frames go on the others). One that ended after, or whose
    /// answer came from another endpoint than the link's peer, may have
    /// carried frames the peer now never gets: the link closes, both ways
    /// (the peer closes its side too when it sees a lane end), so that what
    /// is pending with the peer fails instead of waiting. False then.
    fn tend_lanes(&self, l: &mut Lanes) -> bool {
        let mut broke = false;
        let (epoch, late) = (l.epoch, l.since.is_some_and(|t| t.elapsed() >= CONNECT_WAIT));
        l.open.retain(|lane| {
            let mut o = lane.out();
            lane.push_out(&mut o);
            let answered = o.peer.is_some();
            // (Unanswered after `CONNECT_WAIT`: it carried nothing, and
            // each flush would read it again.)
            if o.state == LinkState::Open && o.peer.map_or(!late, |h| h.epoch == epoch) {
                return true;
            }
            if answered {
                tracing::debug!("a lane to {} ended (or reached another endpoint): the link closes", self.to);
                broke = true;
            } else {
                tracing::debug!("a lane to {} did not come up: its frames go on the others", self.to);
            }
            let _ = o.sock.shutdown(std::net::Shutdown::Both);
            false
        });
        if broke {
            let mut o = self.out();
            let _ = o.sock.shutdown(std::net::Shutdown::Both);
            o.close();
            l.open.clear();
        }
        !broke
    }

    /// Move a connect in progress on: up, failed, or out of time; after a
    /// YIELD whose survivor never came, connect again. (System calls only
    /// while connecting.)
    fn advance(&self, o: &mut Out) {
        if let Setup::Yielded(since) = o.setup {
            if since.elapsed() < CONNECT_WAIT {
                return;
            }
            // (The peer's own connection did not come: it failed on the
            // way, or the peer dropped its link. Ours again.)
            tracing::debug!("{} answered YIELD but its connection did not come: connecting again", self.to);
            match crate::sys::connect_from(&self.to, self.me.ip()) {
                Ok((sock, up)) => {
                    let id = self.pairs.as_ref().map_or(0, |p| p.new_id());
                    o.sock = sock;
                    o.start(up, id, &self.me, OPEN, self.tx.key.as_ref());
                }
                Err(e) => {
                    o.setup = Setup::Failed(e.raw_os_error().unwrap_or(libc::EIO));
                    return o.close();
                }
            }
        }
        let Setup::Connecting(since) = o.setup else { return };
        let failed = match o.sock.take_error() {
            Ok(Some(e)) => Some(e.raw_os_error().unwrap_or(libc::EIO)),
            Err(e) => Some(e.raw_os_error().unwrap_or(libc::EIO)),
            Ok(None) if o.sock.peer_addr().is_ok() => {
                o.setup = Setup::Up;
                None
            }
            Ok(None) if since.elapsed() >= CONNECT_WAIT => Some(libc::ETIMEDOUT),
            Ok(None) => None,
        };
        if let Some(errno) = failed {
            // (Debug: the engine logs what fails with it, and what to do.)
            tracing::debug!(
                "connecting to {} over TCP failed: {}{}",
                self.to,
                io::Error::from_raw_os_error(errno),
                if errno == libc::ETIMEDOUT {
                    format!(" (no answer within {} s)", CONNECT_WAIT.as_secs())
                } else {
                    String::new()
                }
            );
            o.setup = Setup::Failed(errno);
            o.close();
        }
    }

    /// Move the connection on as far as it goes without waiting: the
    /// connect, our hello, the peer's answer (read here, exactly its bytes:
    /// what follows is the inbox's to read). With a job key the first
    /// answer is the peer's challenge: its proof is checked, ours written,
    /// and the answer proper read after it.
    fn step(&self, o: &mut Out) {
        self.advance(o);
        if o.state != LinkState::Open || o.setup != Setup::Up {
            return;
        }
        loop {
            while !o.greet.is_empty() {
                match (&o.sock).write(&o.greet) {
                    Ok(0) => return o.close(),
                    Ok(n) => {
                        o.greet.drain(..n);
                        self.tx.stats.copied_bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return o.close(),
                }
            }
            if o.peer.is_some() {
                return;
            }
            let mut b = [0u8; HELLO_LEN];
            let want = HELLO_LEN - o.got.len();
            match (&o.sock).read(&mut b[..want]) {
                Ok(0) => o.state = LinkState::Closed,
                Ok(n) => o.got.extend_from_slice(&b[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => o.state = LinkState::Closed,
            }
            // (A peer of another version may answer with a shorter hello
            // and close: its version is said as soon as it is in.)
            match preamble(&o.got) {
                Preamble::Fine => {}
                Preamble::Foreign => {
                    tracing::warn!("the endpoint at {} does not speak oxmr's TCP wire", self.to);
                    return o.close();
                }
                Preamble::Version(version) => {
                    if !self.lane {
                        tracing::warn!(
                            "the endpoint at {} speaks TCP wire version {version}, this oxmr speaks version {VERSION}: run one oxmr build on both sides",
                            self.to
                        );
                    }
                    return o.close();
                }
            }
            if o.got.len() < HELLO_LEN {
                return;
            }
            if !self.answered(o) {
                return;
            }
        }
    }

    /// Take the peer's answer in `o.got` (whole): true when our proof is to
    /// be written and the answer proper read next.
    fn answered(&self, o: &mut Out) -> bool {
        let Some(g) = Hello::greeting(&o.got) else {
            tracing::warn!("the endpoint at {} does not speak oxmr's TCP wire", self.to);
            o.close();
            return false;
        };
        let key = self.tx.key.as_ref();
        if g.keyed != key.is_some() {
            tracing::warn!(
                "the endpoint at {} {}: set the same FI_OXMR_AUTH_KEY (or auth_key) on every process of the job (docs/security.md)",
                self.to,
                if key.is_some() { "holds no job key and this endpoint has one" } else { "requires a job key and this endpoint has none" }
            );
            o.close();
            return false;
        }
        if let (Some(k), Some(sent)) = (key, o.sent.take()) {
            if g.kind != CHALLENGE {
                tracing::warn!(
                    "the endpoint at {} answered a keyed hello without its challenge (kind {}): not oxmr's TCP wire",
                    self.to,
                    g.kind
                );
                o.close();
                return false;
            }
            let mut ch = [0u8; HELLO_LEN];
            ch.copy_from_slice(&o.got);
            let t = transcript(&sent, &ch);
            if !k.verify(PROOF_ACCEPT, &[&t], &g.proof) {
                tracing::warn!(
                    "the endpoint at {} does not hold this job's key (its proof failed): every process of the job needs the same FI_OXMR_AUTH_KEY (or auth_key); the connection is closed",
                    self.to
                );
                o.close();
                return false;
            }
            tracing::debug!("the endpoint at {} proved the job key", self.to);
            o.greet.extend_from_slice(&k.tag(PROOF_OPEN, &[&t]));
            o.got.clear();
            return true;
        }
        let (h, kind) = (g.hello, g.kind);
        match kind {
            _ if self.lane && kind != ACCEPT => {
                tracing::debug!("the endpoint at {} answered a lane with kind {kind}: the lane closes", self.to);
                o.close();
            }
            YIELD => {
                // (It keeps its own connection to us; this one ends.)
                let _ = o.sock.shutdown(std::net::Shutdown::Both);
                o.got.clear();
                o.setup = Setup::Yielded(Instant::now());
            }
            ACCEPT => {
                o.peer = Some(h);
                if let Some(p) = &self.pairs {
                    match o.sock.try_clone() {
                        Ok(sock) => {
                            p.hand_over(InConn::new(sock, o.id, Some((self.to, h.epoch)), o.closed_by_inbox.clone()));
                            o.handed = true;
                        }
                        Err(_) => o.close(),
                    }
                }
            }
            _ => {
                tracing::warn!("the endpoint at {} answered with hello kind {kind}: not oxmr's TCP wire", self.to);
                o.close();
            }
        }
        false
    }

    /// Write what is queued (once established), in order: bytes as the
    /// socket takes them, a zero-copy part submitted once it is first and
    /// taken off once its completion is reaped; the state after.
    fn push_out(&self, o: &mut Out) {
        self.step(o);
        if !o.established() {
            return;
        }
        while let Some(front) = o.queued.front_mut() {
            match front {
                Seg::Bytes(q) => {
                    while !q.is_empty() {
                        let (a, _) = q.as_slices();
                        match (&o.sock).write(a) {
                            Ok(0) => return o.close(),
                            Ok(n) => {
                                q.drain(..n);
                                o.queued_len -= n;
                                self.tx.stats.copied_bytes.fetch_add(n as u64, Ordering::Relaxed);
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(_) => return o.close(),
                        }
                    }
                }
                Seg::Zc(z) => {
                    let Some(ring) = self.tx.ring.as_ref() else { return o.close() };
                    match &z.flight {
                        Some(_) => ring.reap(),
                        None => {
                            // Buffer lifetime. The kernel reads the part
                            // through the pages the fixed buffer `slot`
                            // pinned (and takes its own reference to them
                            // until the notification), never through our
                            // mapping: an unpin, or an unmap, while the send
                            // is queued or in flight cannot make it touch
                            // memory that is not ours (an emptied or reused
                            // slot fails the range check: EFAULT, and the
                            // link closes). What the peer gets is the
                            // source's bytes at send time: the push path
                            // completes an operation only at the peer's ACK,
                            // after the peer has every byte, so the
                            // application cannot reuse the buffer while the
                            // kernel may still read it.
                            //
                            // SAFETY: `fixed` named `slot` for this range
                            // when the part was queued, and `o.sock`
                            // stays open for this call.
                            match unsafe { ring.send_zc(o.sock.as_raw_fd(), z.addr, z.len as u32, z.slot) } {
                                Ok(Some(f)) => z.flight = Some(f),
                                // (The domain's submission queue is full:
                                // again at the next flush.)
                                Ok(None) => return ring.reap(),
                                Err(e) => {
                                    tracing::warn!(
                                        "submitting a zero-copy send to {} failed: {e}; the link closes",
                                        self.to
                                    );
                                    return o.close();
                                }
                            }
                        }
                    }
                    let Some(res) = z.flight.as_ref().and_then(|f| f.result()) else { return };
                    if res < 0 || res as usize != z.len {
                        // (MSG_WAITALL: a short count means the stream
                        // broke mid-part; nothing after it can follow.)
                        tracing::debug!(
                            "a zero-copy send of {} bytes to {} ended with {}; the link closes",
                            z.len,
                            self.to,
                            if res < 0 {
                                io::Error::from_raw_os_error(-res).to_string()
                            } else {
                                format!("{res} bytes")
                            }
                        );
                        return o.close();
                    }
                    self.tx.stats.zc_sends.fetch_add(1, Ordering::Relaxed);
                    self.tx.stats.zc_bytes.fetch_add(z.len as u64, Ordering::Relaxed);
                    o.queued_len -= z.len;
                    if let Some(f) = z.flight.clone().filter(|_| !o.zc_off) {
                        if o.zc_probes.len() == ZC_PROBES {
                            o.zc_probes.pop_front();
                        }
                        o.zc_probes.push_back(f);
                    }
                }
            }
            o.queued.pop_front();
        }
    }

    /// The slot of each part that goes out with SEND_ZC (`ZC_MIN` bytes
    /// or more, wholly in one slot of the domain's ring); None when no
    /// part does.
    fn zc_slots(&self, o: &mut Out, parts: &[&[u8]]) -> Option<Vec<Option<u16>>> {
        // (The cheap checks first: this runs for every frame.)
        if o.zc_off || !parts.iter().any(|p| p.len() >= ZC_MIN) {
            return None;
        }
        let ring = self.tx.ring.as_ref().filter(|r| r.sends_zc())?;
        // (A notification follows its send's completion closely: look at
        // what the ring holds already.)
        if o.zc_probes.back().is_some_and(|f| f.notified_copied().is_none()) {
            ring.collect();
        }
        while let Some(copied) = o.zc_probes.front().and_then(|f| f.notified_copied()) {
            o.zc_probes.pop_front();
            if !copied {
                o.zc_copied = 0;
                continue;
            }
            o.zc_copied += 1;
            // After `copied_off` copied in a row (a peer on this
            // machine: loopback, veth; msg_zerocopy.rst, "Loopback"),
            // writev: zero copy gains nothing there, and its
            // submission, completions and one send in flight at a time
            // cost (measured, fi_rdm_tagged_bw 1 MiB on loopback, each
            // process on its own core: 3.3 GB/s with SEND_ZC, 4.8 GB/s
            // with writev). On a real NIC the notifications say the
            // pages went out, and SEND_ZC stays.
            if self.tx.copied_off != 0 && o.zc_copied >= self.tx.copied_off {
                tracing::debug!(
                    "the kernel copied {} zero-copy sends to {} in a row (a peer on this machine): the link sends with writev from now on",
                    o.zc_copied,
                    self.to
                );
                o.zc_off = true;
                o.zc_probes.clear();
                return None;
            }
        }
        let slots: Vec<Option<u16>> = parts
            .iter()
            .map(|p| if p.len() >= ZC_MIN { ring.fixed(p.as_ptr() as usize, p.len()) } else { None })
            .collect();
        slots.iter().any(Option::is_some).then_some(slots)
    }

    /// Send one frame in parts: queued whole, written as far as the socket
    /// takes it now (nothing, while connecting). A part in registered
    /// memory (`zc_slots`) queues as itself, sent with SEND_ZC when its
    /// turn comes; the rest is copied ("small messages are copied").
    pub fn send(&self, parts: &[&[u8]]) -> Result<(), WireError> {
        let mut o = self.out();
        self.send_in(&mut o, parts)
    }

    /// `send`, with the link's state locked already.
    fn send_in(&self, o: &mut Out, parts: &[&[u8]]) -> Result<(), WireError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if o.state != LinkState::Open {
            return Err(WireError::Closed);
        }
        if !o.queued.is_empty() {
            self.push_out(o);
        }
        if o.queued_len + len + 4 > OUT_MAX {
            return Err(WireError::Full);
        }
        let prefix = (len as u32).to_le_bytes();
        if let Some(slots) = self.zc_slots(o, parts) {
            o.push_bytes(&prefix);
            for (p, slot) in parts.iter().zip(slots) {
                match slot {
                    Some(slot) => {
                        o.queued_len += p.len();
                        o.queued.push_back(Seg::Zc(ZcPart {
                            addr: p.as_ptr() as usize,
                            len: p.len(),
                            slot,
                            flight: None,
                        }));
                    }
                    None => o.push_bytes(p),
                }
            }
            self.push_out(o);
            return if o.state == LinkState::Open { Ok(()) } else { Err(WireError::Closed) };
        }
        self.tx.stats.copied_frames.fetch_add(1, Ordering::Relaxed);
        // Nothing queued ahead and connected: write the frame straight
        // from its parts (one writev, no gather copy); queue only what the
        // socket did not take.
        let mut sent = 0;
        if o.queued.is_empty() && o.established() {
            // (On the stack for the usual few parts: this runs per frame.)
            let mut few = [io::IoSlice::new(&[]); 8];
            let many: Vec<io::IoSlice<'_>>;
            let slices: &[io::IoSlice<'_>] = if parts.len() < few.len() {
                few[0] = io::IoSlice::new(&prefix);
                for (s, p) in few[1..].iter_mut().zip(parts) {
                    *s = io::IoSlice::new(p);
                }
                &few[..parts.len() + 1]
            } else {
                many = std::iter::once(&prefix[..]).chain(parts.iter().copied()).map(io::IoSlice::new).collect();
                &many
            };
            loop {
                match (&o.sock).write_vectored(slices) {
                    Ok(0) => {
                        o.close();
                        return Err(WireError::Closed);
                    }
                    Ok(n) => sent = n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => {
                        o.close();
                        return Err(WireError::Closed);
                    }
                }
                break;
            }
            self.tx.stats.copied_bytes.fetch_add(sent as u64, Ordering::Relaxed);
        }
        let mut skip = sent;
        for p in std::iter::once(&prefix[..]).chain(parts.iter().copied()) {
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            o.push_bytes(&p[skip..]);
            skip = 0;
        }
        if !o.queued.is_empty() {
            self.push_out(o);
        }
        if o.state != LinkState::Open {
            return Err(WireError::Closed);
        }
        Ok(())
    }
}
