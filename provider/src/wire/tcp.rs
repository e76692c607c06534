//! The TCP wire: non-blocking sockets, and io_uring SEND_ZC for frame
//! parts in registered memory (docs/wire.md, "io_uring and SEND_ZC").
//!
//! Sending: a part of at least `ZC_MIN` bytes that lies in one slot of
//! the domain's io_uring table (`TcpSend::ring`, `UringTable::fixed`)
//! goes out with SEND_ZC from that fixed buffer on the domain's ring;
//! everything else is written with writev ("small messages are copied").
//! The out queue holds segments in stream order, and a zero-copy part is
//! submitted only once every byte before it is out, and nothing after it
//! goes until its completion is reaped: at most one SEND_ZC per link in
//! flight, and the socket's bytes are the frames in order. The receiving
//! side (`Inbox`) knows nothing of this.
//!
//! Nothing here waits: a link's connect runs in the kernel while frames
//! queue behind it (bounded, `OUT_MAX`), and fails the link if refused or
//! not up within `CONNECT_WAIT`.
//!
//! One connection per pair of endpoints, carrying frames both ways. The
//! side that sends first opens it to the peer's listener (whose address is
//! the peer's name) and writes its hello: magic, wire version, endpoint
//! name, epoch, pid and a kind (OPEN). The acceptor answers with its own
//! hello, of kind ACCEPT or YIELD, and until the answer comes the opener's
//! frames wait in its queue: no frame ever goes on a connection that may
//! not survive. An accepted connection whose hello names an address at
//! the IP it comes from is adopted (`Pairs`): our frames to that address go
//! on it too, and a later send to that peer opens nothing. When both
//! sides open at once, each sees the other's hello while its own waits
//! for its answer, and both keep the connection opened by the lower
//! address (`SocketAddr` order): the other is answered YIELD and closed,
//! and the yielded side moves its queue onto the survivor when it adopts
//! it (or, if the survivor never comes, connects again after
//! `CONNECT_WAIT`). A connection whose source IP is not its hello's is
//! never adopted (a process elsewhere cannot make us send to it by naming
//! another endpoint): frames to that peer go on a connection of our own,
//! one each way, as a multi-homed host's may. Then each frame is a 4-byte
//! little-endian length and the frame; a length over `TCP_MAX_FRAME`
//! closes the connection (a lying or broken peer cannot make us buffer
//! without bound).
//!
//! The inbox reads every connection, the links' too (handed to it once
//! their answer came); a link learns that its connection ended from the
//! inbox (`Tie`), and shuts its side down when the engine drops it.
//!
//! The wire cannot reach the peer's memory: every copy answers `Push`, and
//! the engine's PULL -> DATA -> ACK path moves rendezvous and RMA data.
//! Every frame is handed up with the name its connection's hello gave, so
//! a frame that claims another sender is dropped (identity from the link).

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::{LinkState, OpenError, WireError, MAX_FRAME};
use crate::mr::uring::{Flight, UringTable};
pub use crate::mr::TcpStats;

const MAGIC: u32 = 0x3154_584f; // "OXT1"
/// This build's TCP wire version (the hello's; the message header has its
/// own, checked above the wire). Version 2: one connection per pair
/// (the hello's kind; frames wait for the answer).
pub(crate) const VERSION: u32 = 2;
const HELLO_LEN: usize = 48;
/// A hello's kind (its last word): the opener's, or the acceptor's answer
/// (this connection carries frames, both ways; or: it does not, the peer
/// keeps the one it opened to us, and closes this).
const OPEN: u32 = 0;
const ACCEPT: u32 = 1;
const YIELD: u32 = 2;
/// Bytes a link queues for a peer whose socket is full before a send
/// answers `Full` (flow control, as a full shm queue).
const OUT_MAX: usize = 4 << 20;
/// The largest frame on a TCP connection: the push path's DATA frames
/// carry up to this much (one frame per 8 KiB, the shared-memory cell,
/// cost a frame header, a queue entry and a wake-up each); a longer
/// length prefix closes the connection.
pub(crate) const TCP_MAX_FRAME: usize = 256 << 10;
const _: () = assert!(TCP_MAX_FRAME >= MAX_FRAME && 2 * TCP_MAX_FRAME <= OUT_MAX);
/// How long a connect may stay in progress before the link fails with
/// ETIMEDOUT (the kernel's own SYN retries take minutes). Nothing waits
/// for it: frames queue meanwhile.
pub(crate) const CONNECT_WAIT: Duration = Duration::from_secs(3);

/// Who an endpoint is, as its hello says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub version: u32,
    pub name: [u8; 28],
    pub epoch: u32,
    pub pid: u32,
}

impl Hello {
    fn encode(&self, kind: u32) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.version.to_le_bytes());
        b[8..36].copy_from_slice(&self.name);
        b[36..40].copy_from_slice(&self.epoch.to_le_bytes());
        b[40..44].copy_from_slice(&self.pid.to_le_bytes());
        b[44..48].copy_from_slice(&kind.to_le_bytes());
        b
    }

    /// The hello and its kind.
    fn decode(b: &[u8]) -> Option<(Hello, u32)> {
        let word = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default());
        if b.len() < HELLO_LEN || word(0) != MAGIC {
            return None;
        }
        let mut name = [0u8; 28];
        name.copy_from_slice(&b[8..36]);
        Some((Hello { version: word(4), name, epoch: word(36), pid: word(40) }, word(44)))
    }
}

/// Where a link's connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setup {
    /// The kernel is still connecting (since then): frames queue.
    Connecting(Instant),
    /// Connected (frames go out once the peer's answer came: `Link::connecting`).
    Up,
    /// The peer answered YIELD (since then): it keeps the connection it
    /// opened to us, which we adopt when its hello arrives; frames queue.
    Yielded(Instant),
    /// The connect failed (the errno: ECONNREFUSED, or ETIMEDOUT after
    /// `CONNECT_WAIT`, EHOSTUNREACH...): the link is closed.
    Failed(i32),
}

/// A hello as it goes on the wire (tests that play a peer).
#[cfg(test)]
pub(crate) fn hello_bytes(h: &Hello) -> [u8; HELLO_LEN] {
    h.encode(OPEN)
}

/// The smallest part of a frame sent with SEND_ZC. Below it, the copy
/// writev does costs less than what zero copy adds: a submission, two
/// completions to reap and the page references the kernel takes and
/// drops (msg_zerocopy.rst: "zerocopy is generally only effective at
/// writes over around 10 KB"); 32 KiB leaves room for the ring's
/// round trip, and the push path's DATA frames (up to `TCP_MAX_FRAME`)
/// are well above it.
pub(crate) const ZC_MIN: usize = 32 << 10;

/// Zero-copy sends whose notification a link keeps to look at (the
/// oldest go first when more complete before any was looked at).
const ZC_PROBES: usize = 16;

/// How a domain's links send: its ring, for frame parts in registered
/// memory (None: plain sockets, FI_OXMR_TCP_IO_URING=0 or no ring), the
/// counters they keep, and after how many zero-copy sends in a row that
/// the kernel copied a link stops using it (FI_OXMR_TCP_ZC_COPIED; 0:
/// never).
#[derive(Clone, Debug, Default)]
pub struct TcpSend {
    pub ring: Option<Arc<UringTable>>,
    pub stats: Arc<TcpStats>,
    pub copied_off: u32,
}

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

/// What a link and the inbox share of the connection the link writes on:
/// set by the inbox when it found the connection ended (or closed it).
type Tie = Arc<AtomicBool>;

/// What an opened link knows, and what it has not sent yet.
struct Out {
    /// The connection our frames go on (replaced when we adopt the one the
    /// peer opened, or connect again after a YIELD), and its id (the
    /// inbox's, see `InConn::id`).
    sock: TcpStream,
    id: u64,
    /// What waits behind a full socket, a connect in progress, the peer's
    /// answer or a zero-copy send in flight, and its bytes in all.
    queued: VecDeque<Seg>,
    queued_len: usize,
    /// Our hello's bytes not yet written (they go first, before any frame).
    greet: Vec<u8>,
    state: LinkState,
    setup: Setup,
    /// The peer's hello, once it answered (its first bytes so far).
    peer: Option<Hello>,
    got: Vec<u8>,
    /// Whether the inbox reads this connection (then it says, in `tie`,
    /// when the connection ends; we never read it).
    handed: bool,
    tie: Tie,
    /// Whether the connection comes from our name's IP (the peer adopts
    /// only such a connection: `Pairs::greeted`).
    adoptable: bool,
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

struct Core {
    to: SocketAddr,
    me: Hello,
    out: Mutex<Out>,
    tx: TcpSend,
    /// The endpoint's table of connections (None: a bare sender of tests,
    /// whose link reads its own connection).
    pairs: Option<Arc<Pairs>>,
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
            state: LinkState::Open,
            setup: Setup::Up,
            peer: None,
            got: Vec::new(),
            handed: false,
            tie: Tie::default(),
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
    /// `up`), our hello first.
    fn start(&mut self, up: bool, id: u64, me: &Hello) {
        let _ = self.sock.set_nodelay(true);
        self.adoptable = match (self.sock.local_addr(), crate::info::addr::parse(&me.name)) {
            (Ok(l), Some(n)) => same_ip(l.ip(), n.ip()),
            _ => false,
        };
        self.id = id;
        self.setup = if up { Setup::Up } else { Setup::Connecting(Instant::now()) };
        self.greet = me.encode(OPEN).to_vec();
        self.peer = None;
        self.got.clear();
        self.handed = false;
        self.tie = Tie::default();
    }

    /// Write on `c`, the connection the peer opened (its hello `h`), which
    /// the inbox reads: our queue goes out on it once we write again.
    fn adopt(&mut self, c: &InConn, h: Hello) -> bool {
        let Ok(sock) = c.sock.try_clone() else { return false };
        self.sock = sock;
        self.id = c.id;
        self.setup = Setup::Up;
        self.greet.clear();
        self.peer = Some(h);
        self.got.clear();
        self.handed = true;
        self.tie = c.tie.clone();
        true
    }
}

/// Whether two addresses are one IP (an IPv4 address and its IPv6-mapped
/// form are).
fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    let v4 = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        ip => ip,
    };
    v4(a) == v4(b)
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
            Some(Pair::Parked(c, h)) if !c.tie.load(Ordering::Acquire) => Some((c, h)),
            _ => None,
        };
        let out = match parked {
            Some((c, h)) => {
                let mut o = Out::new(c.sock);
                o.id = c.id;
                o.peer = Some(h);
                o.handed = true;
                o.tie = c.tie;
                o
            }
            None => {
                let (sock, up) = crate::sys::connect_start(to).map_err(OpenError::Unreachable)?;
                let id = pairs.map_or(0, |p| p.new_id());
                let mut o = Out::new(sock);
                o.start(up, id, me);
                o
            }
        };
        let core = Arc::new(Core { to: *to, me: *me, out: Mutex::new(out), tx, pairs: pairs.cloned() });
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

    /// Write what waits (connecting on first); whether something still does.
    pub fn flush(&self) -> bool {
        let mut o = self.0.out();
        self.0.push_out(&mut o);
        !o.queued.is_empty() && o.state == LinkState::Open
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
        o.state != LinkState::Open || (o.handed && o.tie.load(Ordering::Acquire))
    }

    /// Where the link stands: a connection the inbox reads ended when the
    /// inbox says so (`tie`); one we read ourselves (a bare sender's) ended
    /// when a read finds its end or an error (the peer writes nothing on it
    /// after its hello); a connect that failed is `Unreachable`.
    pub fn state(&self) -> LinkState {
        let mut o = self.0.out();
        self.0.step(&mut o);
        if o.state == LinkState::Open && o.handed && o.tie.load(Ordering::Acquire) {
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
    fn raw_fd(&self) -> std::os::fd::RawFd {
        self.0.out().sock.as_raw_fd()
    }
}

impl Core {
    fn out(&self) -> std::sync::MutexGuard<'_, Out> {
        self.out.lock().unwrap_or_else(|p| p.into_inner())
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
            match crate::sys::connect_start(&self.to) {
                Ok((sock, up)) => {
                    let id = self.pairs.as_ref().map_or(0, |p| p.new_id());
                    o.sock = sock;
                    o.start(up, id, &self.me);
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
    /// what follows is the inbox's to read).
    fn step(&self, o: &mut Out) {
        self.advance(o);
        if o.state != LinkState::Open || o.setup != Setup::Up {
            return;
        }
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
        if o.got.len() < HELLO_LEN {
            return;
        }
        match Hello::decode(&o.got) {
            Some((h, _)) if h.version != VERSION => {
                tracing::warn!(
                    "the endpoint at {} speaks TCP wire version {}, this oxmr speaks version {VERSION}: run one oxmr build on both sides",
                    self.to,
                    h.version
                );
                o.close();
            }
            Some((_, YIELD)) => {
                // (It keeps its own connection to us; this one ends.)
                let _ = o.sock.shutdown(std::net::Shutdown::Both);
                o.got.clear();
                o.setup = Setup::Yielded(Instant::now());
            }
            Some((h, ACCEPT)) => {
                o.peer = Some(h);
                if let Some(p) = &self.pairs {
                    match o.sock.try_clone() {
                        Ok(sock) => {
                            p.hand_over(InConn::new(sock, o.id, Some((self.to, h.epoch)), o.tie.clone()));
                            o.handed = true;
                        }
                        Err(_) => o.close(),
                    }
                }
            }
            _ => {
                tracing::warn!("the endpoint at {} does not speak oxmr's TCP wire", self.to);
                o.close();
            }
        }
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
        let ring = self.tx.ring.as_ref().filter(|r| r.sends_zc())?;
        if o.zc_off || !parts.iter().any(|p| p.len() >= ZC_MIN) {
            return None;
        }
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
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut o = self.out();
        if o.state != LinkState::Open {
            return Err(WireError::Closed);
        }
        if !o.queued.is_empty() {
            self.push_out(&mut o);
        }
        if o.queued_len + len + 4 > OUT_MAX {
            return Err(WireError::Full);
        }
        let prefix = (len as u32).to_le_bytes();
        if let Some(slots) = self.zc_slots(&mut o, parts) {
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
            self.push_out(&mut o);
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
            self.push_out(&mut o);
        }
        if o.state != LinkState::Open {
            return Err(WireError::Closed);
        }
        Ok(())
    }
}

/// A connection the inbox reads: one accepted at our listener, or one a
/// link of ours opened (handed over once the peer answered).
struct InConn {
    sock: TcpStream,
    /// Bytes read and not yet taken as frames.
    buf: Vec<u8>,
    /// The sender, once its hello arrived (and ours went back).
    peer: Option<SocketAddr>,
    /// The epoch its hello gave.
    epoch: u32,
    closed: bool,
    /// Which connection it is (frames carry it, see `Inbox::reject_last`;
    /// one count per endpoint, `Pairs::new_id`).
    id: u64,
    /// The frame whose payload is being read into its landing zone.
    land: Option<Landing>,
    /// Set when the connection ends or is closed here: a link writing on
    /// it learns so.
    tie: Tie,
    /// Cutting stopped at a barrier frame; the bytes after it (in `buf`)
    /// are cut at the next poll, once the engine has taken it.
    held: bool,
}

impl InConn {
    fn new(sock: TcpStream, id: u64, peer: Option<(SocketAddr, u32)>, tie: Tie) -> InConn {
        InConn {
            sock,
            buf: Vec::new(),
            peer: peer.map(|p| p.0),
            epoch: peer.map_or(0, |p| p.1),
            closed: false,
            id,
            land: None,
            tie,
            held: false,
        }
    }
}

/// Who carries our frames to a peer (`Pairs`).
enum Pair {
    /// A connection the peer opened and we adopted, not yet taken by a
    /// link of ours (the inbox reads it: a clone), with the peer's hello.
    Parked(InConn, Hello),
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
enum Answer {
    /// It carries frames (to us; both ways if adopted).
    Accept,
    /// The connection we opened to that peer survives; this one closes.
    Yield,
}

impl Pairs {
    fn new(me: SocketAddr) -> Pairs {
        Pairs {
            me,
            table: Mutex::new(HashMap::new()),
            handoff: Mutex::new(Vec::new()),
            handing: AtomicBool::new(false),
            ids: AtomicU64::new(0),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, Pair>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn new_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn hand_over(&self, c: InConn) {
        self.handoff.lock().unwrap_or_else(|p| p.into_inner()).push(c);
        self.handing.store(true, Ordering::Release);
    }

    fn take_handed(&self) -> Vec<InConn> {
        if !self.handing.swap(false, Ordering::Acquire) {
            return Vec::new();
        }
        std::mem::take(&mut *self.handoff.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The connection `id` ended: a parked one is no longer to be taken.
    fn forget(&self, id: u64) {
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
    fn greeted(&self, c: &InConn, from: SocketAddr, h: &Hello) -> Answer {
        if from == self.me {
            // (Our own link to ourselves: it writes, we read; one way.)
            return Answer::Accept;
        }
        let theirs_ok = c.sock.peer_addr().is_ok_and(|p| same_ip(p.ip(), from.ip()));
        let mut t = self.table();
        let park = |t: &mut HashMap<SocketAddr, Pair>| {
            if let (true, Ok(sock)) = (theirs_ok, c.sock.try_clone()) {
                t.insert(from, Pair::Parked(InConn::new(sock, c.id, Some((from, h.epoch)), c.tie.clone()), *h));
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

/// A frame whose payload goes straight from the socket to its landing
/// zone (`super::land`): its header, the zone's pieces still to fill.
struct Landing {
    head: Vec<u8>,
    key: u64,
    gen: u64,
    dest: Vec<(usize, usize)>,
    left: usize,
    n: usize,
}

/// A frame cut from a connection: its bytes (the header alone when its
/// payload landed), the sender its hello named, the connection's id, and
/// the payload bytes that landed in their zone.
type Frame = (Vec<u8>, SocketAddr, u64, usize);

/// Read from `sock` into `dest` (at most `max` bytes; what `read` would say).
fn read_into(sock: &TcpStream, dest: &[(usize, usize)], max: usize) -> io::Result<usize> {
    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 8];
    let (mut n, mut left) = (0, max);
    for &(a, l) in dest {
        if n == iov.len() || left == 0 {
            break;
        }
        iov[n] = libc::iovec { iov_base: a as *mut libc::c_void, iov_len: l.min(left) };
        left -= l.min(left);
        n += 1;
    }
    // SAFETY: the pieces lie in a landing zone the engine registered
    // (writable memory of ours, valid while the zone is in the table,
    // checked just before this call); readv writes only inside them.
    let r = unsafe { libc::readv(std::os::fd::AsRawFd::as_raw_fd(sock), iov.as_ptr(), n as i32) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `dest` after its first `n` bytes.
fn skip(dest: &mut Vec<(usize, usize)>, mut n: usize) {
    let mut i = 0;
    while n > 0 && i < dest.len() {
        let take = dest[i].1.min(n);
        dest[i] = (dest[i].0 + take, dest[i].1 - take);
        n -= take;
        if dest[i].1 == 0 {
            i += 1;
        }
    }
    dest.drain(..i);
}

/// An endpoint's TCP inbox: its listener, and every connection with its
/// peers (those they opened, those our links opened).
pub struct Inbox {
    listener: TcpListener,
    me: Hello,
    conns: Vec<InConn>,
    /// What the endpoint's links share with us (`Pairs`).
    pairs: Arc<Pairs>,
    /// Frames read and not yet handed up, with their connection's sender
    /// and id.
    frames: VecDeque<Frame>,
    /// Connections accepted so far, and the connection of the frame
    /// handed up last.
    accepted: u64,
    last: Option<u64>,
    /// The hellos of connections accepted (address, epoch), not yet taken
    /// by the engine.
    hellos: Vec<(SocketAddr, u32)>,
    /// (Frames handed up, frames read.)
    popped: u64,
    read: u64,
    /// Polls so far, and when the listener was last asked for new
    /// connections: at most every `ACCEPT_GAP`, the clock read every
    /// `CLOCK_EVERY`th poll (an endpoint that also takes shared memory
    /// polls its TCP side on every empty poll, many millions a second when
    /// it spins, and an accept is a system call).
    polls: u32,
    accepted_at: Instant,
    /// The fds epoll said were readable in this poll (kept: no allocation
    /// per poll).
    readable: Vec<std::os::fd::RawFd>,
    /// Where reads land before they are cut into frames (kept: an array
    /// on the stack would be zeroed on every poll).
    chunk: Box<[u8]>,
    /// Buffers of frames handed up, kept for the next ones (at most
    /// `SPARE_MAX`): a 256 KiB DATA frame freshly allocated per frame
    /// costs the allocator's mmap/trim and a page fault per page.
    spare: Vec<Vec<u8>>,
    /// The endpoint's wake fd (`wire::Inbox::wake_fd`): holds the listener
    /// and every connection accepted (a closed socket leaves it by itself).
    wake: std::sync::Arc<crate::sys::Epoll>,
    /// Where payloads may land straight from the socket (the engine's).
    lands: super::land::Landings,
}

/// See `Inbox::spare`.
const SPARE_MAX: usize = 16;

/// See `Inbox::polls`.
const ACCEPT_GAP: Duration = Duration::from_micros(200);
const CLOCK_EVERY: u32 = 16;

/// Where `cut` puts what it cuts from a connection's stream.
struct Cuts<'a> {
    frames: &'a mut VecDeque<Frame>,
    spare: &'a mut Vec<Vec<u8>>,
    read: &'a mut u64,
    lands: &'a super::land::Landings,
    /// The last frame cut is a barrier (`Landings::barrier`): nothing more
    /// of its connection is cut until the engine has taken it.
    stopped: bool,
}

/// Cut the whole frames at the start of `bytes` (a connection's stream
/// from `from`, connection `id`) into `to.frames`, counting them; the
/// bytes taken, or None for a length over `TCP_MAX_FRAME` (the connection
/// is to be closed; said here). A frame whose payload may land
/// (`super::land`) lands what of it is here, and if the rest is still to
/// come, `land` says where it goes (and every byte was taken).
fn cut(bytes: &[u8], from: SocketAddr, id: u64, to: &mut Cuts<'_>, land: &mut Option<Landing>) -> Option<usize> {
    let mut at = 0;
    let lands = to.lands.any().then(|| to.lands.head_max()).flatten();
    while bytes.len() - at >= 4 {
        let n = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default()) as usize;
        if n > TCP_MAX_FRAME {
            tracing::warn!(
                "closing the TCP connection from {from}: a frame of {n} bytes (the most is {TCP_MAX_FRAME}); a broken or lying peer"
            );
            return None;
        }
        let avail = bytes.len() - at - 4;
        if let Some(head_max) = lands.filter(|_| n >= super::land::LAND_MIN) {
            let need = n.min(head_max);
            if avail < need {
                break;
            }
            let body = &bytes[at + 4..];
            let placed = to
                .lands
                .classify(&body[..need])
                .filter(|h| h.len <= need)
                .and_then(|h| to.lands.place(from, h.key, h.off, n - h.len).map(|(dest, gen)| (h, dest, gen)));
            if let Some((h, mut dest, gen)) = placed {
                let pn = n - h.len;
                let have = (avail - h.len).min(pn);
                let mut head = to.spare.pop().unwrap_or_default();
                head.extend_from_slice(&body[..h.len]);
                // SAFETY: `dest` lies in a live landing zone (just placed),
                // writable memory of ours until the engine forgets it.
                unsafe { crate::mr::local::scatter(&dest, &body[h.len..h.len + have]) };
                at += 4 + h.len + have;
                if have == pn {
                    to.frames.push_back((head, from, id, pn));
                    *to.read += 1;
                    continue;
                }
                skip(&mut dest, have);
                *land = Some(Landing { head, key: h.key, gen, dest, left: pn - have, n: pn });
                return Some(at);
            }
        }
        if avail < n {
            break;
        }
        let body = &bytes[at + 4..at + 4 + n];
        let barrier = to.lands.barrier(body);
        let mut frame = to.spare.pop().unwrap_or_default();
        frame.extend_from_slice(body);
        to.frames.push_back((frame, from, id, 0));
        *to.read += 1;
        at += 4 + n;
        if barrier {
            to.stopped = true;
            break;
        }
    }
    Some(at)
}

impl Inbox {
    /// Receive at `listener` (the endpoint's, bound at its name).
    pub fn new(
        listener: TcpListener,
        me: Hello,
        wake: std::sync::Arc<crate::sys::Epoll>,
        lands: super::land::Landings,
    ) -> io::Result<Inbox> {
        listener.set_nonblocking(true)?;
        wake.add(std::os::fd::AsRawFd::as_raw_fd(&listener))?;
        let pairs = Arc::new(Pairs::new(listener.local_addr()?));
        Ok(Inbox {
            listener,
            me,
            conns: Vec::new(),
            pairs,
            frames: VecDeque::new(),
            accepted: 0,
            last: None,
            hellos: Vec::new(),
            popped: 0,
            read: 0,
            polls: 0,
            accepted_at: Instant::now() - ACCEPT_GAP,
            readable: Vec::with_capacity(64),
            chunk: vec![0u8; 64 << 10].into_boxed_slice(),
            spare: Vec::new(),
            wake,
            lands,
        })
    }

    /// What this endpoint's links share with the inbox (`Dial::pairs`).
    pub fn pairs(&self) -> Arc<Pairs> {
        self.pairs.clone()
    }

    /// Close the connections marked closed: their links learn it (`tie`),
    /// a parked one is no longer taken, and the wake fd lets them go
    /// (a link may hold the socket open a while longer).
    fn sweep(&mut self) {
        for c in self.conns.iter().filter(|c| c.closed) {
            c.tie.store(true, Ordering::Release);
            self.wake.remove(c.sock.as_raw_fd());
            self.pairs.forget(c.id);
        }
        self.conns.retain(|c| !c.closed);
    }

    /// Accept what waits, read what the connections hold, cut frames.
    fn poll(&mut self) {
        // (Our links' connections, once their peer answered: read here.)
        for c in self.pairs.take_handed() {
            // (Not in the wake fd: a sleeper would not wake for its frames;
            // the link learns it closed.)
            if self.wake.add(c.sock.as_raw_fd()).is_ok() {
                self.conns.push(c);
            } else {
                c.tie.store(true, Ordering::Release);
            }
        }
        // With several connections, one epoll_wait says which sockets (and
        // whether the listener) have something: reading every connection on
        // every poll takes each socket's lock, in contention with the
        // kernel delivering to it (measured: ~6% of a spinning 8-byte
        // pingpong in the kernel's lock slow path). With one (a pair of
        // endpoints shares one), it is read directly: one system call on
        // the arrival's path instead of two (measured, fi_rdm_pingpong 8 B
        // over TCP on loopback, alternating builds: 6.46 -> 5.75 us).
        // Without an epoll_wait, or without any connection, the listener
        // is asked by the clock (below), no system call on most polls.
        let direct = self.conns.len() == 1 && self.conns[0].peer.is_some();
        let by_epoll = !direct && !self.conns.is_empty() && self.wake.readable_now(&mut self.readable).is_ok();
        let listener_fd = std::os::fd::AsRawFd::as_raw_fd(&self.listener);
        self.polls = self.polls.wrapping_add(1);
        let mut accept = by_epoll && self.readable.contains(&listener_fd);
        if !by_epoll && self.polls % CLOCK_EVERY == 1 {
            let now = Instant::now();
            accept = now.duration_since(self.accepted_at) >= ACCEPT_GAP;
            if accept {
                self.accepted_at = now;
            }
        }
        while accept {
            match self.listener.accept() {
                Ok((sock, _)) => {
                    // (Not in the wake fd: a sleeper would not wake for
                    // its frames, so the connection is refused.)
                    if sock.set_nonblocking(true).is_ok()
                        && self.wake.add(std::os::fd::AsRawFd::as_raw_fd(&sock)).is_ok()
                    {
                        let _ = sock.set_nodelay(true);
                        self.accepted += 1;
                        self.conns.push(InConn::new(sock, self.pairs.new_id(), None, Tie::default()));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => accept = false,
            }
        }
        if self.conns.is_empty() {
            return;
        }
        // (Connections without their hello yet, new ones among them, are
        // read anyway; the others when epoll said so.)
        let readable = &self.readable;
        // (And those that stopped at a barrier, whose bytes after it wait.)
        let look = |c: &InConn| {
            !by_epoll || c.peer.is_none() || c.held || readable.contains(&std::os::fd::AsRawFd::as_raw_fd(&c.sock))
        };
        // (Kept between polls: an array here would be zeroed on every one.)
        let chunk = &mut self.chunk[..];
        // Connections whose hello arrived in this poll.
        let mut fresh: Vec<(SocketAddr, u32)> = Vec::new();
        let mut to = Cuts {
            frames: &mut self.frames,
            spare: &mut self.spare,
            read: &mut self.read,
            lands: &self.lands,
            stopped: false,
        };
        for c in &mut self.conns {
            if !look(c) {
                continue;
            }
            to.stopped = false;
            // (Bytes held after a barrier are cut first, before any read:
            // the engine has taken the barrier since.)
            if std::mem::take(&mut c.held) && c.land.is_none() {
                if let Some(from) = c.peer {
                    match cut(&c.buf, from, c.id, &mut to, &mut c.land) {
                        Some(at) => {
                            c.buf.drain(..at);
                        }
                        None => c.closed = true,
                    }
                }
                if to.stopped || c.closed {
                    c.held = to.stopped;
                    continue;
                }
            }
            // (A frame too long, cut straight from a read below.)
            let mut refused = false;
            loop {
                // A payload on its way to its landing zone: read straight
                // into it (or, if the engine forgot the zone meanwhile,
                // read it and drop it).
                if let (Some(l), Some(from)) = (&mut c.land, c.peer) {
                    let live = to.lands.live(from, l.key, l.gen);
                    let got = if live {
                        read_into(&c.sock, &l.dest, l.left)
                    } else {
                        let m = l.left.min(chunk.len());
                        (&c.sock).read(&mut chunk[..m])
                    };
                    match got {
                        Ok(0) => {
                            c.closed = true;
                            break;
                        }
                        Ok(k) => {
                            let short = k < l.left;
                            skip(&mut l.dest, k);
                            l.left -= k;
                            if l.left == 0 {
                                let l = c.land.take().expect("matched above");
                                to.frames.push_back((l.head, from, c.id, l.n));
                                *to.read += 1;
                            }
                            // (A short read emptied the socket: the next
                            // poll reads again, no EAGAIN read now.)
                            if short {
                                break;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            c.closed = true;
                            break;
                        }
                    }
                    continue;
                }
                let got = (&c.sock).read(chunk);
                // (A short read emptied the socket: no EAGAIN read after
                // it, the next poll reads again.)
                let short = matches!(got, Ok(n) if n > 0 && n < chunk.len());
                match got {
                    Ok(0) => {
                        c.closed = true;
                        break;
                    }
                    // The hello done: cut the frames from what was read
                    // (straight from the read when nothing is held back),
                    // keep only the rest.
                    Ok(n) => match c.peer {
                        Some(from) if c.buf.is_empty() => match cut(&chunk[..n], from, c.id, &mut to, &mut c.land) {
                            Some(at) => c.buf.extend_from_slice(&chunk[at..n]),
                            None => {
                                refused = true;
                                break;
                            }
                        },
                        Some(from) => {
                            c.buf.extend_from_slice(&chunk[..n]);
                            match cut(&c.buf, from, c.id, &mut to, &mut c.land) {
                                Some(at) => {
                                    c.buf.drain(..at);
                                }
                                None => {
                                    refused = true;
                                    break;
                                }
                            }
                        }
                        None => c.buf.extend_from_slice(&chunk[..n]),
                    },
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        c.closed = true;
                        break;
                    }
                }
                if short || refused || to.stopped {
                    break;
                }
            }
            // (Ended by the peer: said below if it ended in the middle of
            // something, unless the bytes it sent are refused anyway.)
            let ended = std::mem::take(&mut c.closed);
            c.closed = refused;
            let mut at = 0;
            if c.peer.is_none() && c.buf.len() >= HELLO_LEN {
                match Hello::decode(&c.buf[..HELLO_LEN]) {
                    Some((h, OPEN)) if h.version == VERSION => match crate::info::addr::parse(&h.name) {
                        Some(a) => {
                            let answer = self.pairs.greeted(c, a, &h);
                            let kind = if answer == Answer::Yield { YIELD } else { ACCEPT };
                            // (Small, on a fresh socket: taken at once.)
                            let _ = (&c.sock).write_all(&self.me.encode(kind));
                            c.peer = Some(a);
                            c.epoch = h.epoch;
                            fresh.push((a, h.epoch));
                            at = HELLO_LEN;
                            // (A yielded connection carries nothing: the
                            // peer moves to the one we opened.)
                            c.closed = answer == Answer::Yield;
                        }
                        None => {
                            tracing::warn!("refusing a TCP connection whose hello names no valid address");
                            c.closed = true;
                        }
                    },
                    Some((h, OPEN)) => {
                        // (Ours goes back first: the opener says whose
                        // version differs.)
                        tracing::warn!(
                            "refusing a TCP connection of wire version {}; this oxmr speaks version {VERSION}: run one oxmr build on both sides",
                            h.version
                        );
                        let _ = (&c.sock).write_all(&self.me.encode(ACCEPT));
                        c.closed = true;
                    }
                    Some((_, kind)) => {
                        tracing::warn!("refusing a TCP connection that opens with an answer (hello kind {kind}), not a hello of its own");
                        c.closed = true;
                    }
                    None => {
                        tracing::warn!("refusing a TCP connection that does not speak oxmr's TCP wire");
                        c.closed = true;
                    }
                }
            }
            if let (Some(from), false, true, false) = (c.peer, c.closed, c.land.is_none(), to.stopped) {
                match cut(&c.buf[at..], from, c.id, &mut to, &mut c.land) {
                    Some(n) => at += n,
                    None => c.closed = true,
                }
            }
            c.held = to.stopped;
            if c.closed {
                c.buf.clear();
                c.land = None;
            } else {
                c.buf.drain(..at);
            }
            if ended && !c.closed && (!c.buf.is_empty() || c.land.is_some()) {
                match c.peer {
                    None => tracing::warn!(
                        "closing a TCP connection that ended inside its hello ({} of {HELLO_LEN} bytes): not an oxmr peer, or one that stopped while connecting",
                        c.buf.len()
                    ),
                    Some(from) => tracing::warn!(
                        "the TCP connection from {from} ended inside a frame ({} bytes of it): the peer stopped in the middle of a send",
                        c.buf.len() + c.land.as_ref().map_or(0, |l| l.n - l.left)
                    ),
                }
                c.buf.clear();
                c.land = None;
            }
            c.closed |= ended;
        }
        // A hello of another epoch from an address we had a connection
        // from: the endpoint there was replaced (closed and reopened, or
        // its process restarted), and the new connection replaces the old
        // one. Every hello goes up (`take_hellos`): the engine fails what
        // it had pending with an endpoint of another epoch there.
        for (a, epoch) in fresh {
            let mut replaced = false;
            for c in self.conns.iter_mut().filter(|c| c.peer == Some(a) && c.epoch != epoch && !c.closed) {
                c.closed = true;
                replaced = true;
            }
            if replaced {
                tracing::warn!(
                    "a new endpoint (epoch {epoch:#x}) at {a} connected: closing the connection of the one before it"
                );
            }
            self.hellos.push((a, epoch));
        }
        self.sweep();
    }

    /// Whether a frame waits (reads the sockets).
    pub fn ready(&mut self) -> bool {
        if self.frames.is_empty() {
            self.poll();
        }
        !self.frames.is_empty()
    }

    /// Hand one frame to `f(frame, more, sender, landed)`; false when none
    /// waits. `landed`: the payload bytes that went straight to their
    /// landing zone (the frame is then the header alone).
    pub fn pop(&mut self, f: impl FnOnce(&[u8], bool, SocketAddr, usize)) -> bool {
        if !self.ready() {
            return false;
        }
        let Some((mut frame, from, id, landed)) = self.frames.pop_front() else { return false };
        self.popped += 1;
        self.last = Some(id);
        f(&frame, !self.frames.is_empty(), from, landed);
        if self.spare.len() < SPARE_MAX {
            frame.clear();
            self.spare.push(frame);
        }
        true
    }

    /// Close the connection of the frame handed up last, and drop the
    /// frames it sent after it (counted as consumed).
    pub fn reject_last(&mut self) {
        let Some(id) = self.last.take() else { return };
        for c in self.conns.iter_mut().filter(|c| c.id == id) {
            c.closed = true;
        }
        let before = self.frames.len();
        self.frames.retain(|f| f.2 != id);
        self.popped += (before - self.frames.len()) as u64;
        self.sweep();
    }

    /// The hellos that arrived since the last call (the sender's address
    /// and epoch): a peer whose epoch changed was replaced.
    pub fn take_hellos(&mut self) -> Vec<(SocketAddr, u32)> {
        std::mem::take(&mut self.hellos)
    }

    /// (Frames handed up, frames read.)
    pub fn positions(&self) -> (u64, u64) {
        (self.popped, self.read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(addr: &SocketAddr, epoch: u32) -> Hello {
        let mut name = [0u8; 28];
        let e = crate::info::addr::encode(addr);
        name[..e.len()].copy_from_slice(&e);
        Hello { version: VERSION, name, epoch, pid: std::process::id() }
    }

    fn wake() -> std::sync::Arc<crate::sys::Epoll> {
        std::sync::Arc::new(crate::sys::Epoll::new().unwrap())
    }

    /// The test classifier: a frame that starts 0xDA, then the transfer
    /// and the offset (8 bytes each), lands.
    fn test_head(b: &[u8]) -> Option<super::super::land::Head> {
        let word = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        (b.len() >= 17 && b[0] == 0xDA).then(|| super::super::land::Head {
            key: word(1),
            off: word(9) as usize,
            len: 17,
        })
    }

    fn land_frame(key: u64, off: u64, payload: &[u8]) -> Vec<u8> {
        let mut f = ((17 + payload.len()) as u32).to_le_bytes().to_vec();
        f.push(0xDA);
        f.extend_from_slice(&key.to_le_bytes());
        f.extend_from_slice(&off.to_le_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn payloads_land_in_their_zone_straight_from_the_socket_and_nowhere_else() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let lands = super::super::land::Landings::default();
        lands.set_classifier(test_head, 17);
        let mut inbox = Inbox::new(l, hello(&at, 7), wake(), lands.clone()).unwrap();
        let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut dest = vec![0u8; 64 << 10];
        let base = dest.as_mut_ptr() as usize;
        // SAFETY: `dest` outlives the inbox's use of the zone (forgotten
        // below, before `dest` is read or dropped).
        unsafe { lands.expect(me, 42, vec![(base, 32 << 10), (base + (32 << 10), 32 << 10)]) };
        let mut peer = TcpStream::connect(at).unwrap();
        peer.write_all(&hello_bytes(&hello(&me, 9))).unwrap();
        let pattern: Vec<u8> = (0..40000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut stream = land_frame(42, 1000, &pattern);
        stream.extend_from_slice(&6u32.to_le_bytes());
        stream.extend_from_slice(b"small!");
        // Past the zone's end, and for a transfer with no zone: whole frames.
        stream.extend(land_frame(42, (64 << 10) - 100, &[9u8; 10000]));
        stream.extend(land_frame(43, 0, &[8u8; 10000]));
        let mut got: Vec<(Vec<u8>, usize)> = Vec::new();
        let take = |inbox: &mut Inbox, got: &mut Vec<(Vec<u8>, usize)>| {
            for _ in 0..200 {
                while inbox.pop(|f, _, from, landed| {
                    assert_eq!(from, me);
                    got.push((f.to_vec(), landed))
                }) {}
                std::thread::sleep(Duration::from_micros(100));
            }
        };
        // (In dribbles, the inbox reading between them: a payload lands
        // across many reads, part from the read that held its header.)
        for piece in stream.chunks(7001) {
            peer.write_all(piece).unwrap();
            take(&mut inbox, &mut got);
        }
        assert_eq!(got.len(), 4, "{:?}", got.iter().map(|g| (g.0.len(), g.1)).collect::<Vec<_>>());
        assert_eq!((got[0].0.len(), got[0].1), (17, 40000), "the header alone goes up, and what landed");
        assert_eq!(&dest[1000..41000], &pattern[..], "the payload is in the zone, across its two pieces");
        assert!(dest[..1000].iter().chain(&dest[41000..]).all(|&b| b == 0), "nothing outside it");
        assert_eq!(got[1], (b"small!".to_vec(), 0));
        assert_eq!((got[2].0.len(), got[2].1), (17 + 10000, 0), "a payload past the zone's end is not landed");
        assert_eq!((got[3].0.len(), got[3].1), (17 + 10000, 0), "nor one for a transfer without a zone");
        // A zone forgotten while its payload is on the way: the rest is
        // read and dropped, never written.
        let half = land_frame(42, 0, &[5u8; 30000]);
        peer.write_all(&half[..15000]).unwrap();
        take(&mut inbox, &mut got);
        lands.forget(me, 42);
        dest.iter_mut().for_each(|b| *b = 0xEE);
        peer.write_all(&half[15000..]).unwrap();
        peer.write_all(&2u32.to_le_bytes()).unwrap();
        peer.write_all(b"ok").unwrap();
        take(&mut inbox, &mut got);
        assert!(dest.iter().all(|&b| b == 0xEE), "no byte written after the zone was forgotten");
        assert_eq!(got.len(), 6);
        assert_eq!(got[5], (b"ok".to_vec(), 0), "the stream goes on after the dropped payload");
        assert_eq!(inbox.positions(), (6, 6));
    }

    #[test]
    fn nothing_after_a_barrier_is_cut_until_it_was_taken_so_what_follows_can_land() {
        // A streamed write's request (the barrier) and its DATA arrive in
        // one read: the DATA is cut only at the next poll, after the
        // engine took the request and opened the zone, and lands there.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let lands = super::super::land::Landings::default();
        lands.set_classifier(test_head, 17);
        lands.set_barrier(|b| b.first() == Some(&0xBB));
        let mut inbox = Inbox::new(l, hello(&at, 7), wake(), lands.clone()).unwrap();
        let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut peer = TcpStream::connect(at).unwrap();
        peer.write_all(&hello_bytes(&hello(&me, 9))).unwrap();
        let payload: Vec<u8> = (0..20000u32).map(|i| (i % 241) as u8).collect();
        let mut stream = 3u32.to_le_bytes().to_vec();
        stream.extend_from_slice(&[0xBB, 1, 2]);
        stream.extend(land_frame(42, 0, &payload));
        peer.write_all(&stream).unwrap();
        let mut got: Vec<(Vec<u8>, usize)> = Vec::new();
        for _ in 0..2000 {
            inbox.poll();
            if !inbox.frames.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        std::thread::sleep(Duration::from_millis(20));
        while let Some(f) = inbox.frames.pop_front() {
            got.push((f.0, f.3));
        }
        let lens: Vec<usize> = got.iter().map(|g| g.0.len()).collect();
        assert_eq!(lens, vec![3], "the barrier alone, nothing after it");
        assert_eq!(got[0], (vec![0xBB, 1, 2], 0));
        let mut dest = vec![0u8; 20000];
        // SAFETY: `dest` outlives the zone (forgotten below).
        unsafe { lands.expect(me, 42, vec![(dest.as_mut_ptr() as usize, dest.len())]) };
        for _ in 0..2000 {
            inbox.pop(|f, _, _, landed| got.push((f.to_vec(), landed)));
            if got.len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        lands.forget(me, 42);
        assert_eq!((got.len(), got[1].0.len(), got[1].1), (2, 17, 20000), "the DATA's payload landed");
        assert!(dest == payload);
    }

    #[test]
    fn the_wake_fd_is_readable_when_a_connection_or_a_frame_arrives() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let w = wake();
        let mut inbox = Inbox::new(l, hello(&at, 7), w.clone(), Default::default()).unwrap();
        assert!(!w.readable_within(0), "nothing arrived yet");
        let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let link = Link::open(&at, &hello(&me, 9), &TcpSend::default(), None).unwrap();
        link.send(&[b"first"]).unwrap();
        assert!(w.readable_within(5000), "a connection waits at the listener");
        let mut got = 0;
        for _ in 0..2000 {
            link.flush();
            while inbox.pop(|_, _, _, _| got += 1) {}
            if got == 1 {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(got, 1);
        assert!(!w.readable_within(20), "everything read: not readable");
        link.send(&[b"second"]).unwrap();
        link.flush();
        assert!(w.readable_within(5000), "a frame on an accepted connection wakes");
        for _ in 0..2000 {
            while inbox.pop(|_, _, _, _| got += 1) {}
            if got == 2 {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(got, 2);
    }

    #[test]
    fn frames_cross_with_their_senders_name_and_bad_peers_are_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let mut inbox = Inbox::new(l, hello(&at, 7), wake(), Default::default()).unwrap();
        let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
        // (Opening needs nothing of the inbox: the kernel accepts.)
        let link = Link::open(&at, &hello(&me, 9), &TcpSend::default(), None).unwrap();
        link.send(&[b"ab", b"cd"]).unwrap();
        link.send(&[&[5u8; 1000]]).unwrap();
        assert_eq!(link.epoch(), 0, "the peer's hello comes once it polls");
        let mut got = Vec::new();
        for _ in 0..2000 {
            // (Queued behind the connect until it is up: flush sends.)
            link.flush();
            while inbox.pop(|f, _, from, _| got.push((f.to_vec(), from))) {}
            if got.len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], (b"abcd".to_vec(), me));
        assert_eq!(got[1].0, vec![5u8; 1000]);
        assert_eq!(inbox.positions(), (2, 2));
        let mut epoch = 0;
        for _ in 0..2000 {
            epoch = link.epoch();
            if epoch != 0 {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!((epoch, link.owner()), (7, std::process::id()), "the inbox's hello answered ours");
        assert_eq!(link.state(), LinkState::Open);
        // Another wire version: the link closes when the answer comes.
        let l2 = TcpListener::bind("127.0.0.1:0").unwrap();
        let at2 = l2.local_addr().unwrap();
        let mut h = hello(&at2, 3);
        h.version = 99;
        let mut other = Inbox::new(l2, h, wake(), Default::default()).unwrap();
        let bad = Link::open(&at2, &hello(&me, 9), &TcpSend::default(), None).unwrap();
        let mut state = LinkState::Open;
        for _ in 0..2000 {
            bad.flush();
            other.poll();
            state = bad.state();
            if state != LinkState::Open {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!((state, bad.epoch()), (LinkState::Closed, 0), "a peer of wire version 99 stays unopened");
        assert!(bad.send(&[b"x"]).is_err());
        // A frame over TCP_MAX_FRAME: the connection is closed, nothing handed up.
        let mut raw = TcpStream::connect(at).unwrap();
        raw.write_all(&hello(&me, 1).encode(OPEN)).unwrap();
        raw.write_all(&((TCP_MAX_FRAME as u32) + 1).to_le_bytes()).unwrap();
        for _ in 0..200 {
            inbox.poll();
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(!inbox.pop(|_, _, _, _| panic!("a frame over the limit was handed up")));
        // Our peer closing: the link says so.
        drop(inbox);
        let mut state = LinkState::Open;
        for _ in 0..2000 {
            state = link.state();
            if state != LinkState::Open {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(state, LinkState::Closed);
    }

    /// Connect and wait for the setup to settle (a bounded count of polls).
    fn settle(link: &Link) -> Setup {
        for _ in 0..20_000 {
            match link.setup() {
                Setup::Connecting(_) => std::thread::sleep(Duration::from_micros(100)),
                s => return s,
            }
        }
        link.setup()
    }

    #[test]
    fn a_connect_never_waits_and_a_refused_one_fails_the_link() {
        // A port nobody listens on (bound, then closed): the connect starts
        // and returns at once (loopback refuses after connect returned);
        // frames queue behind it; the refusal closes the link.
        let nobody = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
        match Link::open(&nobody, &hello(&me, 1), &TcpSend::default(), None) {
            Ok(link) => {
                let _ = link.send(&[b"queued while connecting"]);
                assert_eq!(settle(&link), Setup::Failed(libc::ECONNREFUSED));
                assert_eq!(link.state(), LinkState::Unreachable(libc::ECONNREFUSED));
                assert!(link.closed() && link.send(&[b"x"]).is_err(), "a failed link takes nothing");
                assert!(!link.flush(), "nothing waits on a failed link");
            }
            Err(OpenError::Unreachable(e)) => assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED)),
            Err(e) => panic!("refused for another reason: {e:?}"),
        }
        // A listener that is there: up, and what queued meanwhile arrives.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let mut inbox = Inbox::new(l, hello(&at, 5), wake(), Default::default()).unwrap();
        let link = Link::open(&at, &hello(&me, 2), &TcpSend::default(), None).unwrap();
        link.send(&[b"first"]).unwrap();
        assert_eq!(settle(&link), Setup::Up);
        let mut got = Vec::new();
        for _ in 0..2000 {
            link.flush();
            while inbox.pop(|f, _, _, _| got.push(f.to_vec())) {}
            if !got.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(got, vec![b"first".to_vec()]);
    }

    #[test]
    fn a_hello_of_a_new_epoch_replaces_the_connection_from_that_address() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let mut inbox = Inbox::new(l, hello(&at, 5), wake(), Default::default()).unwrap();
        let peer: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let mut old = TcpStream::connect(at).unwrap();
        old.write_all(&hello(&peer, 10).encode(OPEN)).unwrap();
        for _ in 0..200 {
            inbox.poll();
            if inbox.conns.iter().any(|c| c.peer.is_some()) {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(inbox.take_hellos(), vec![(peer, 10)]);
        assert_eq!(inbox.conns.len(), 1);
        let mut new = TcpStream::connect(at).unwrap();
        new.write_all(&hello(&peer, 11).encode(OPEN)).unwrap();
        let mut restarts = Vec::new();
        for _ in 0..2000 {
            inbox.poll();
            restarts = inbox.take_hellos();
            if !restarts.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        assert_eq!(restarts, vec![(peer, 11)]);
        assert_eq!(inbox.conns.len(), 1, "the old connection is closed");
        assert_eq!(inbox.conns[0].epoch, 11);
        // The old one sees its end.
        old.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 64];
        let mut n = old.read(&mut b).unwrap_or(0);
        if n == HELLO_LEN {
            n = old.read(&mut b).unwrap_or(0);
        }
        assert_eq!(n, 0, "the replaced connection was closed");
    }

    /// An endpoint of the TCP wire alone: its inbox, and how its links send.
    struct Ep {
        at: SocketAddr,
        me: Hello,
        inbox: Inbox,
    }

    fn ep(ip: &str, epoch: u32) -> Ep {
        let l = TcpListener::bind((ip, 0)).unwrap();
        let at = l.local_addr().unwrap();
        let me = hello(&at, epoch);
        Ep { at, me, inbox: Inbox::new(l, me, wake(), Default::default()).unwrap() }
    }

    impl Ep {
        fn link(&self, to: &Ep) -> Link {
            Link::open(&to.at, &self.me, &TcpSend::default(), Some(&self.inbox.pairs())).unwrap()
        }
    }

    /// Frames `0..n` (4-byte counters) from each link, polled and flushed
    /// alternately until both sides took them all: what each took, with
    /// its senders.
    fn trade(a: &mut Ep, la: &Link, b: &mut Ep, lb: &Link, n: u32) -> [Vec<(u32, SocketAddr)>; 2] {
        let mut got: [Vec<(u32, SocketAddr)>; 2] = Default::default();
        let mut sent = [0u32; 2];
        for _ in 0..20_000 {
            for (k, l) in [la, lb].into_iter().enumerate() {
                while sent[k] < n && l.send(&[&sent[k].to_le_bytes()]).is_ok() {
                    sent[k] += 1;
                }
                l.flush();
            }
            for (k, e) in [&mut *a, &mut *b].into_iter().enumerate() {
                while e.inbox.pop(|f, _, from, _| got[k].push((u32::from_le_bytes(f.try_into().unwrap()), from))) {}
            }
            if got[0].len() == n as usize && got[1].len() == n as usize {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        got
    }

    /// The one connection each side reads: (its local port, its peer's).
    fn conns(e: &Ep) -> Vec<(u16, u16)> {
        e.inbox
            .conns
            .iter()
            .map(|c| (c.sock.local_addr().unwrap().port(), c.sock.peer_addr().unwrap().port()))
            .collect()
    }

    #[test]
    fn two_endpoints_keep_one_connection_whoever_opens_first_and_frames_stay_in_order() {
        // Three orders: both open before either polls (each sees the
        // other's hello while its own waits for its answer: the lower
        // address's connection survives, the other is answered YIELD);
        // one opens, the other polls (and adopts it) before it opens (and
        // takes it: it connects nowhere); and both open, one polls first.
        for order in 0..3 {
            for _ in 0..5 {
                let mut a = ep("127.0.0.1", 1);
                let mut b = ep("127.0.0.1", 2);
                let (la, lb) = match order {
                    0 => (a.link(&b), b.link(&a)),
                    1 => {
                        let la = a.link(&b);
                        la.send(&[&0u32.to_le_bytes()]).unwrap();
                        for _ in 0..2000 {
                            b.inbox.poll();
                            if !b.inbox.pairs.table().is_empty() {
                                break;
                            }
                            la.flush();
                            std::thread::sleep(Duration::from_micros(100));
                        }
                        let lb = b.link(&a);
                        assert!(!lb.connecting(), "b took the connection a opened: nothing to connect");
                        // (Frame 0 went already; trade sends 0.. again.)
                        let mut first = Vec::new();
                        for _ in 0..2000 {
                            la.flush();
                            b.inbox.pop(|f, _, _, _| first.push(f.to_vec()));
                            if !first.is_empty() {
                                break;
                            }
                            std::thread::sleep(Duration::from_micros(100));
                        }
                        assert_eq!(first, vec![0u32.to_le_bytes().to_vec()]);
                        (la, lb)
                    }
                    _ => {
                        let la = a.link(&b);
                        let lb = b.link(&a);
                        for _ in 0..50 {
                            la.flush();
                            b.inbox.poll();
                            std::thread::sleep(Duration::from_micros(50));
                        }
                        (la, lb)
                    }
                };
                let got = trade(&mut a, &la, &mut b, &lb, 300);
                for (k, from) in [(0, b.at), (1, a.at)] {
                    let want: Vec<(u32, SocketAddr)> = (0..300).map(|i| (i, from)).collect();
                    assert!(
                        got[k] == want,
                        "order {order}: side {k} took {} frames, not 0..300 in order",
                        got[k].len()
                    );
                }
                assert!(!la.connecting() && !lb.connecting());
                assert_eq!((la.epoch(), lb.epoch()), (2, 1), "each knows the other's epoch");
                assert_eq!(
                    (a.inbox.accepted + b.inbox.accepted, conns(&a).len(), conns(&b).len()),
                    (if order == 1 { 1 } else { 2 }, 1, 1)
                );
                let (ca, cb) = (conns(&a)[0], conns(&b)[0]);
                assert_eq!((ca.0, ca.1), (cb.1, cb.0), "order {order}: both read the same connection");
                if order != 1 {
                    // (Opened by the lower address: the peer's end is its
                    // listener.)
                    let (low, high) = if a.at < b.at { (&ca, &b.at) } else { (&cb, &a.at) };
                    assert_eq!(low.1, high.port(), "order {order}: the lower address's connection survived");
                }
                // The engine drops a link: the connection ends for both.
                drop(la);
                let mut state = LinkState::Open;
                for _ in 0..2000 {
                    a.inbox.poll();
                    b.inbox.poll();
                    state = lb.state();
                    if state != LinkState::Open {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
                assert_eq!(state, LinkState::Closed, "order {order}: b's link learns the connection ended");
                assert!(b.inbox.conns.is_empty());
                // (b's engine drops its link in turn: a reads the end.)
                drop(lb);
                for _ in 0..2000 {
                    a.inbox.poll();
                    if a.inbox.conns.is_empty() {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
                assert!(a.inbox.conns.is_empty(), "order {order}: a's inbox let the ended connection go");
            }
        }
    }

    #[test]
    fn a_yielded_link_whose_survivor_never_comes_connects_again() {
        // The peer answers YIELD (it says its own connection to us wins)
        // and then never connects: our frame waits, goes on no connection,
        // and after CONNECT_WAIT the link connects again; answered ACCEPT
        // this time, the frame goes out whole on the new connection.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let link = Link::open(&at, &hello(&me, 4), &TcpSend::default(), None).unwrap();
        link.send(&[b"waits for a connection that stays"]).unwrap();
        let (mut first, _) = l.accept().unwrap();
        first.write_all(&hello(&at, 8).encode(YIELD)).unwrap();
        for _ in 0..2000 {
            link.flush();
            if matches!(link.setup(), Setup::Yielded(_)) {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        assert!(matches!(link.setup(), Setup::Yielded(_)), "the YIELD was read");
        assert!(link.connecting(), "its frames wait");
        first.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut all = Vec::new();
        let _ = first.read_to_end(&mut all);
        assert_eq!(all.len(), HELLO_LEN, "nothing but our hello went on the yielded connection");
        l.set_nonblocking(true).unwrap();
        let start = Instant::now();
        let mut second = loop {
            link.flush();
            if let Ok((s, _)) = l.accept() {
                break s;
            }
            assert!(start.elapsed() < CONNECT_WAIT * 3, "no new connection");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(start.elapsed() >= CONNECT_WAIT / 2, "connected again before the survivor could come");
        second.set_nonblocking(false).unwrap();
        second.write_all(&hello(&at, 8).encode(ACCEPT)).unwrap();
        let frame = b"waits for a connection that stays";
        for _ in 0..2000 {
            if !link.connecting() && !link.flush() {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        let mut got = vec![0u8; HELLO_LEN + 4 + frame.len()];
        second.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        second.read_exact(&mut got).unwrap();
        assert_eq!(Hello::decode(&got).map(|h| h.1), Some(OPEN));
        assert_eq!(&got[HELLO_LEN + 4..], frame, "the frame went on the new connection");
        assert_eq!(link.epoch(), 8);
    }

    #[test]
    fn a_connection_from_another_ip_than_its_hello_names_is_never_sent_on() {
        // A process at 127.0.0.1 names an endpoint at 127.0.0.2: taken as
        // that sender's frames (as before), but b's frames to 127.0.0.2 go
        // on a connection of b's own, to the real listener there.
        let mut b = ep("127.0.0.1", 2);
        let real = TcpListener::bind("127.0.0.2:0").unwrap();
        let named = real.local_addr().unwrap();
        let mut liar = TcpStream::connect(b.at).unwrap();
        liar.write_all(&hello(&named, 9).encode(OPEN)).unwrap();
        liar.write_all(&1u32.to_le_bytes()).unwrap();
        liar.write_all(b"x").unwrap();
        let mut got = Vec::new();
        for _ in 0..2000 {
            b.inbox.pop(|f, _, from, _| got.push((f.to_vec(), from)));
            if !got.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        assert_eq!(got, vec![(b"x".to_vec(), named)]);
        let lb = Link::open(&named, &b.me, &TcpSend::default(), Some(&b.inbox.pairs())).unwrap();
        lb.send(&[b"for the real one"]).unwrap();
        real.set_nonblocking(false).unwrap();
        let (mut s, _) = real.accept().unwrap();
        let mut h = [0u8; HELLO_LEN];
        s.read_exact(&mut h).unwrap();
        assert_eq!(Hello::decode(&h).map(|h| (h.0.epoch, h.1)), Some((2, OPEN)), "b connected to the real endpoint");
        liar.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let mut answer = [0u8; HELLO_LEN];
        liar.read_exact(&mut answer).unwrap();
        assert_eq!(Hello::decode(&answer).map(|h| h.1), Some(ACCEPT));
        let mut more = [0u8; 1];
        for _ in 0..10 {
            lb.flush();
            b.inbox.poll();
        }
        assert!(
            matches!(liar.read(&mut more), Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut),
            "nothing of b's went to the liar"
        );
    }
}

/// Zero-copy sends from registered memory, against a plain TCP reader
/// that checks every byte.
#[cfg(test)]
mod zc {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    struct Anon(usize, usize);
    impl Anon {
        fn new(len: usize) -> Anon {
            Anon(crate::mr::uring::tests::anon(len), len)
        }
        fn fill(&mut self, f: impl Fn(usize) -> u8) {
            // SAFETY: our mapping, of this length, borrowed mutably once.
            let b = unsafe { std::slice::from_raw_parts_mut(self.0 as *mut u8, self.1) };
            b.iter_mut().enumerate().for_each(|(i, x)| *x = f(i));
        }
        fn bytes(&self) -> &[u8] {
            // SAFETY: our mapping, of this length, alive while `self` is.
            unsafe { std::slice::from_raw_parts(self.0 as *const u8, self.1) }
        }
    }
    impl Drop for Anon {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`.
            unsafe { libc::munmap(self.0 as *mut _, self.1) };
        }
    }

    /// Send `frames` on a link that sends as `tx` to a plain listener
    /// (`one_by_one`: each written, and the ring reaped, before the next);
    /// the frames the listener read, in order.
    fn run(tx: &TcpSend, frames: &[Vec<&[u8]>], one_by_one: bool) -> Vec<Vec<u8>> {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            // (The answer a peer's inbox gives: frames go after it.)
            s.write_all(&tests_hello(&l.local_addr().unwrap(), 2).encode(ACCEPT)).unwrap();
            let mut all = Vec::new();
            s.read_to_end(&mut all).unwrap();
            all
        });
        let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let link = Link::open(&at, &tests_hello(&me, 1), tx, None).unwrap();
        for f in frames {
            let mut tries = 0;
            loop {
                match link.send(f) {
                    Ok(()) => break,
                    Err(WireError::Full) if tries < 100_000 => {
                        link.flush();
                        tries += 1;
                        std::thread::sleep(Duration::from_micros(20));
                    }
                    Err(e) => panic!("send: {e}"),
                }
            }
            for _ in 0..if one_by_one { 20_000 } else { 0 } {
                let ring = tx.ring.as_ref();
                ring.inspect(|r| r.reap());
                if !link.flush() && ring.is_none_or(|r| r.in_flight() == 0) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        for _ in 0..100_000 {
            if !link.flush() {
                break;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        assert!(!link.flush() && !link.closed(), "everything went out");
        drop(link);
        let all = reader.join().unwrap();
        assert_eq!(Hello::decode(&all).map(|h| (h.0.epoch, h.1)), Some((1, OPEN)), "our hello first");
        let mut got = Vec::new();
        let mut at = HELLO_LEN;
        while at < all.len() {
            let n = u32::from_le_bytes(all[at..at + 4].try_into().unwrap()) as usize;
            got.push(all[at + 4..at + 4 + n].to_vec());
            at += 4 + n;
        }
        assert_eq!(at, all.len(), "the stream ends at a frame's end");
        got
    }

    #[test]
    fn a_link_whose_zero_copy_sends_the_kernel_copies_stops_sending_zero_copy() {
        // On loopback the kernel copies every SEND_ZC (msg_zerocopy.rst,
        // "Loopback"): after `copied_off` notifications in a row say so,
        // the link sends with writev. Frames go one at a time, the ring
        // reaped between them, so each notification is in before the next.
        let Ok(table) = UringTable::new() else { return };
        if !table.sends_zc() {
            return;
        }
        let table = Arc::new(table);
        let mut buf = Anon::new(1 << 20);
        buf.fill(|i| (i * 13 + i / 511) as u8);
        let slots = table.pin(&[(buf.0, 1 << 20)]).unwrap();
        let src = buf.bytes();
        let part = 64 << 10;
        let hdrs: Vec<[u8; 4]> = (0..12u32).map(u32::to_le_bytes).collect();
        let frames: Vec<Vec<&[u8]>> =
            hdrs.iter().enumerate().map(|(i, h)| vec![&h[..], &src[i * part..(i + 1) * part]]).collect();
        let tx = TcpSend { ring: Some(table.clone()), stats: Default::default(), copied_off: 2 };
        let got = run(&tx, &frames, true);
        assert_eq!(got.len(), frames.len());
        assert!(got.iter().zip(&frames).all(|(g, f)| *g == f.concat()), "a frame arrived changed");
        let st = &tx.stats;
        let (zc, copied) = (st.zc_sends.load(Relaxed), table.notes.copied.load(Relaxed));
        println!("zero-copy sends {zc}, of which the kernel copied {copied}");
        assert_eq!(copied, zc, "loopback: the kernel copied every zero-copy send");
        assert_eq!(zc, 2, "two copied in a row, then writev");
        assert_eq!(st.copied_frames.load(Relaxed), frames.len() as u64 - 2);
        table.unpin(&slots);
    }

    #[test]
    fn pinned_parts_go_with_send_zc_in_stream_order_and_the_rest_is_copied() {
        let Ok(table) = UringTable::new() else {
            println!("io_uring unavailable: nothing to test");
            return;
        };
        if !table.sends_zc() {
            println!("this kernel has no SEND_ZC: nothing to test");
            return;
        }
        let table = Arc::new(table);
        let mut buf = Anon::new(2 << 20);
        buf.fill(|i| (i * 7 + i / 4093) as u8);
        // The first MiB pinned, the second not.
        let slots = table.pin(&[(buf.0, 1 << 20)]).unwrap();
        let src = buf.bytes();
        let heap = vec![0xa5u8; 200 << 10];
        let part = 200 << 10;
        let mut frames: Vec<Vec<&[u8]>> = Vec::new();
        let hdrs: Vec<[u8; 4]> = (0..40u32).map(u32::to_le_bytes).collect();
        let mut zc_parts = 0;
        for (i, hdr) in hdrs.iter().enumerate() {
            let off = ((i * 37) << 10) % ((1 << 20) - part);
            match i % 5 {
                // Pinned: header copied, payload zero-copy.
                0 | 1 => {
                    frames.push(vec![&hdr[..], &src[off..off + part]]);
                    zc_parts += 1;
                }
                // Small frames in between (copied, queued behind a send in flight).
                2 => frames.push(vec![&hdr[..], b"small"]),
                // Crossing the pinned piece's end: copied.
                3 => frames.push(vec![&hdr[..], &src[(1 << 20) - 4096..(1 << 20) - 4096 + part]]),
                // Not registered at all, and under ZC_MIN in pinned memory: copied.
                _ => frames.push(vec![&hdr[..], &heap[..], &src[off..off + ZC_MIN - 1]]),
            }
        }
        let tx = TcpSend { ring: Some(table.clone()), stats: Default::default(), copied_off: 0 };
        let got = run(&tx, &frames, false);
        assert_eq!(got.len(), frames.len());
        for (i, (g, f)) in got.iter().zip(&frames).enumerate() {
            assert!(*g == f.concat(), "frame {i} arrived changed or out of order");
        }
        let st = &tx.stats;
        assert_eq!(st.zc_sends.load(Relaxed), zc_parts, "every pinned part went with SEND_ZC");
        assert_eq!(st.zc_bytes.load(Relaxed), zc_parts * part as u64);
        assert_eq!(st.copied_frames.load(Relaxed), frames.len() as u64 - zc_parts);
        let total: usize = frames.iter().map(|f| 4 + f.iter().map(|p| p.len()).sum::<usize>()).sum();
        assert_eq!(
            st.copied_bytes.load(Relaxed) + st.zc_bytes.load(Relaxed),
            (HELLO_LEN + total) as u64,
            "every byte counted once"
        );
        for _ in 0..10_000 {
            table.reap();
            if table.in_flight() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        assert_eq!(table.in_flight(), 0, "every notification arrived; the map keeps nothing");
        assert_eq!(table.notes.notified.load(Relaxed), zc_parts);
        // Loopback delivers to a local socket, which cannot keep the
        // sender's pages: the kernel copies (msg_zerocopy.rst, "Loopback"),
        // and REPORT_USAGE says so in every notification.
        assert_eq!(table.notes.copied.load(Relaxed), zc_parts, "loopback: the kernel copied every one");
        table.unpin(&slots);
    }

    #[test]
    fn a_link_dropped_with_a_send_in_flight_leaves_the_flight_to_the_ring() {
        let Ok(table) = UringTable::new() else { return };
        if !table.sends_zc() {
            return;
        }
        let table = Arc::new(table);
        let mut buf = Anon::new(1 << 20);
        buf.fill(|i| i as u8);
        let slots = table.pin(&[(buf.0, 1 << 20)]).unwrap();
        // A reader that never reads, with a tiny receive window: the send
        // cannot finish (MSG_WAITALL) while it lives.
        let small = |fd: i32, opt: i32| {
            let v: libc::c_int = 4096;
            // SAFETY: setsockopt reads an int of the size given.
            let r = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    (&v as *const libc::c_int).cast(),
                    size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            assert_eq!(r, 0);
        };
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        small(l.as_raw_fd(), libc::SO_RCVBUF);
        let at = l.local_addr().unwrap();
        let tx = TcpSend { ring: Some(table.clone()), stats: Default::default(), copied_off: 0 };
        let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let link = Link::open(&at, &tests_hello(&me, 1), &tx, None).unwrap();
        small(link.raw_fd(), libc::SO_SNDBUF);
        let (mut peer, _) = l.accept().unwrap();
        peer.write_all(&tests_hello(&at, 2).encode(ACCEPT)).unwrap();
        link.send(&[b"hdr", &buf.bytes()[..1 << 20]]).unwrap();
        for _ in 0..100 {
            link.flush();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(link.flush(), "the send is still in flight");
        assert_eq!(table.in_flight(), 1);
        drop(link);
        table.reap();
        assert_eq!(table.in_flight(), 1, "the ring's map owns the flight of a link gone");
        // The reader goes (unread data: a reset): the send fails, its
        // completions come, and the map lets the flight go.
        drop(peer);
        for _ in 0..5000 {
            table.reap();
            if table.in_flight() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(table.in_flight(), 0, "the flight ended with its last completion");
        assert_eq!(tx.stats.zc_sends.load(Relaxed), 0, "a failed send is not counted as sent");
        table.unpin(&slots);
    }

    #[test]
    fn without_the_ring_nothing_goes_with_send_zc() {
        let Ok(table) = UringTable::new() else { return };
        let table = Arc::new(table);
        let mut buf = Anon::new(1 << 20);
        buf.fill(|i| (i % 251) as u8);
        let slots = table.pin(&[(buf.0, 1 << 20)]).unwrap();
        let src = buf.bytes();
        let frames: Vec<Vec<&[u8]>> =
            (0..8).map(|i| vec![&b"hdr"[..], &src[i << 16..(i << 16) + (256 << 10) - 64]]).collect();
        // FI_OXMR_TCP_IO_URING=0: the domain's links get no ring.
        let pinner = crate::mr::pin::Pinner::new(
            crate::mr::pin::PinMode::Uring,
            crate::mr::account::Account::new(None, crate::mr::account::CapSource::Variable),
        );
        let d = crate::mr::MrDomain::new(0, pinner, Default::default()).with_tcp_io_uring(false);
        assert!(d.tcp_ring.is_none(), "FI_OXMR_TCP_IO_URING=0: plain sockets");
        let tx = TcpSend { ring: d.tcp_ring.clone(), stats: d.tcp_stats.clone(), copied_off: 0 };
        let got = run(&tx, &frames, false);
        assert!(got.iter().zip(&frames).all(|(g, f)| *g == f.concat()));
        assert_eq!(d.tcp_stats.zc_sends.load(Relaxed), 0);
        assert_eq!(d.tcp_stats.copied_frames.load(Relaxed), frames.len() as u64);
        assert_eq!(table.in_flight(), 0);
        table.unpin(&slots);
    }
}

/// A seeded random-stream loop over the accepting side's state machine
/// (hello, then length-prefixed frames): garbage, truncated and oversized
/// input, written in random pieces through a real connection. Bounded by
/// a count (`OXMR_FUZZ_ROUNDS`, default 1000) and reproducible from its
/// seed (`OXMR_FUZZ_SEED`, printed).
#[cfg(test)]
mod fuzz {
    use super::*;

    pub(crate) struct Rng(u64);
    impl Rng {
        pub(crate) fn seeded(var: &str, default: u64) -> Rng {
            let seed = std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
            println!("{var}={seed}");
            Rng(seed.max(1))
        }
        pub(crate) fn next(&mut self) -> u64 {
            // (xorshift64*)
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
        pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    fn rounds() -> usize {
        std::env::var("OXMR_FUZZ_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
    }

    /// One connection's bytes, and the frames the inbox must hand up for
    /// them: those after a valid hello and before the first thing that is
    /// wrong (after which nothing is taken).
    fn stream(r: &mut Rng, me: &Hello) -> (Vec<u8>, Vec<Vec<u8>>, bool) {
        let mut b = Vec::new();
        let mut want = Vec::new();
        let valid_hello = match r.below(10) {
            0 => {
                b.extend(r.bytes(HELLO_LEN)); // (garbage: almost surely not the magic)
                b[0] ^= 0x5a;
                false
            }
            1 => {
                let mut h = *me;
                h.version = VERSION + 1 + r.below(1000) as u32;
                b.extend(h.encode(OPEN));
                false
            }
            2 => {
                let n = r.below(HELLO_LEN as u64) as usize;
                b.extend(&me.encode(OPEN)[..n]);
                return (b, want, false);
            }
            _ => {
                b.extend(me.encode(OPEN));
                true
            }
        };
        if !valid_hello {
            return (b, want, false);
        }
        for _ in 0..r.below(6) {
            match r.below(8) {
                0 => {
                    // Oversized: the connection closes, nothing after counts.
                    let n = TCP_MAX_FRAME as u64 + 1 + r.below(u32::MAX as u64 - TCP_MAX_FRAME as u64);
                    b.extend((n as u32).to_le_bytes());
                    let k = r.below(64) as usize;
                    b.extend(r.bytes(k));
                    return (b, want, false);
                }
                1 => {
                    // Truncated: a length and fewer bytes, then the end.
                    let n = 1 + r.below(MAX_FRAME as u64) as usize;
                    b.extend((n as u32).to_le_bytes());
                    let k = r.below(n as u64) as usize;
                    b.extend(r.bytes(k));
                    return (b, want, false);
                }
                _ => {
                    let n = if r.below(4) == 0 { MAX_FRAME } else { r.below(MAX_FRAME as u64 + 1) as usize };
                    let f = r.bytes(n);
                    b.extend((n as u32).to_le_bytes());
                    b.extend(&f);
                    want.push(f);
                }
            }
        }
        (b, want, true)
    }

    #[test]
    fn random_streams_never_panic_and_only_valid_frames_are_taken() {
        let mut r = Rng::seeded("OXMR_FUZZ_SEED", 0x0c0f_fee5);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let at = l.local_addr().unwrap();
        let mut inbox = Inbox::new(
            l,
            tests_hello(&at, 3),
            std::sync::Arc::new(crate::sys::Epoll::new().unwrap()),
            Default::default(),
        )
        .unwrap();
        let peer: SocketAddr = "127.0.0.1:3".parse().unwrap();
        let me = tests_hello(&peer, 4);
        for round in 0..rounds() {
            let (bytes, want, sound) = stream(&mut r, &me);
            let accepted = inbox.accepted;
            let mut s = TcpStream::connect(at).unwrap();
            let mut at_byte = 0;
            let mut got: Vec<Vec<u8>> = Vec::new();
            // Written in random pieces, polled in between.
            while at_byte < bytes.len() {
                let n = (1 + r.below(4096) as usize).min(bytes.len() - at_byte);
                if s.write_all(&bytes[at_byte..at_byte + n]).is_err() {
                    break; // (closed by the inbox already: what is wrong was seen)
                }
                at_byte += n;
                inbox.poll();
                while inbox.pop(|f, _, from, _| {
                    assert_eq!(from, peer, "round {round}: a frame with another sender");
                    got.push(f.to_vec())
                }) {}
            }
            let _ = s.shutdown(std::net::Shutdown::Write);
            let mut left = 2000;
            while (inbox.accepted == accepted || !inbox.conns.is_empty()) && left > 0 {
                inbox.poll();
                while inbox.pop(|f, _, _, _| got.push(f.to_vec())) {}
                left -= 1;
                std::thread::sleep(Duration::from_micros(50));
            }
            while inbox.pop(|f, _, _, _| got.push(f.to_vec())) {}
            assert!(
                inbox.conns.is_empty() && inbox.accepted == accepted + 1,
                "round {round}: a connection that ended is still kept"
            );
            assert_eq!(got.len(), want.len(), "round {round} (sound {sound}): frames taken");
            assert!(got == want, "round {round}: the frames taken are not the ones sent");
            let _ = inbox.take_hellos();
        }
        assert!(inbox.frames.is_empty());
    }
}

#[cfg(test)]
fn tests_hello(addr: &SocketAddr, epoch: u32) -> Hello {
    let mut name = [0u8; 28];
    let e = crate::info::addr::encode(addr);
    name[..e.len()].copy_from_slice(&e);
    Hello { version: VERSION, name, epoch, pid: std::process::id() }
}
