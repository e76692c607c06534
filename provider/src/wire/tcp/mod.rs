//! The TCP wire: non-blocking sockets, and io_uring SEND_ZC for frame
//! parts in registered memory (docs/wire-tcp.md, "io_uring and SEND_ZC").
//!
//! Sending: a part of at least `ZC_MIN` bytes that lies in one slot of
//! the domain's io_uring table (`TcpSend::ring`, `TcpRing::fixed`)
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
//! inbox (`ClosedFlag`), and shuts its side down when the engine drops it.
//!
//! The wire cannot reach the peer's memory: every copy answers `Push`, and
//! the engine's PULL -> DATA -> ACK path moves rendezvous and RMA data.
//! Every frame is handed up with the name its connection's hello gave, so
//! a frame that claims another sender is dropped (identity from the link).

use std::net::IpAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{LinkState, OpenError, Proof, Props, Wire, WireError, FRAME_FLOOR};
pub use ring::{DomainWires, TcpStats};
use ring::{Flight, TcpRing};

const MAGIC: u32 = 0x3154_584f; // "OXT1"
/// This build's TCP wire version (the hello's; the message header has its
/// own, checked above the wire). Version 2: one connection per pair
/// (the hello's kind; frames wait for the answer). Version 3: lanes (the
/// LANE kind). Version 4: the job key (flags, nonce and proof in the
/// hello; the CHALLENGE kind). Version 5: frames of up to 1 MiB (a
/// version 4 receiver closes the connection on the first).
pub(crate) const VERSION: u32 = 5;
/// A hello: magic, version, name (28), epoch, pid, kind, flags, nonce
/// (32), proof (32).
pub(crate) const HELLO_LEN: usize = 116;
/// A hello's kind (its word at 44): the opener's, or the acceptor's answer
/// (this connection carries frames, both ways; or: it does not, the peer
/// keeps the one it opened to us, and closes this); or a lane's opener's
/// (an extra connection of a link that carries only frames whose order
/// does not matter, `Link::send_spread`: answered ACCEPT, read by the
/// inbox, never adopted or sent on by the acceptor); or, with a job key,
/// the acceptor's challenge (its nonce and its proof), which the opener
/// answers with its own proof before the acceptor answers ACCEPT or
/// YIELD (docs/security.md).
const OPEN: u32 = 0;
const ACCEPT: u32 = 1;
const YIELD: u32 = 2;
const LANE: u32 = 3;
const CHALLENGE: u32 = 4;
/// A hello's flag: its sender holds a job key (both sides must agree).
const KEYED: u32 = 1;
/// Bytes of a proof (HMAC-SHA256) and of a nonce.
const PROOF_LEN: usize = crate::auth::TAG_LEN;
/// The labels of the two proofs, so neither can be replayed as the other.
const PROOF_ACCEPT: &[u8] = b"oxmr tcp v4: the acceptor holds the job key";
const PROOF_OPEN: &[u8] = b"oxmr tcp v4: the opener holds the job key";
/// The most connections a link keeps to one peer.
const LANES_MAX: u32 = crate::config::TCP_LANES_MAX as u32;
/// Bytes a link queues for a peer whose socket is full before a send
/// answers `Full` (flow control, as a full shm queue).
const OUT_MAX: usize = 4 << 20;
/// The largest frame on a TCP connection, which a peer on this host
/// (over the kernel's loopback path) is sent (`LOCAL_FRAME`): the push
/// path's DATA frames carry up to this much (one frame per 8 KiB, the
/// shared-memory cell, cost a frame header, a queue entry and a wake-up
/// each); a longer length prefix closes the connection. What connections
/// hold of unfinished frames is bounded over all of them
/// (FI_OXMR_TCP_PARTIAL_MAX), not by this.
pub(crate) const TCP_MAX_FRAME: usize = crate::config::TCP_MAX_FRAME;
const _: () = assert!(TCP_MAX_FRAME >= FRAME_FLOOR && 2 * TCP_MAX_FRAME <= OUT_MAX);
/// The frames a peer on another host is sent. A stream's next DATA frame
/// is queued once the link's queue is written, and what the socket does
/// not take of it is copied into that queue: over a network path (a veth
/// pair here) 1 MiB frames lost up to half of `fi_rma_bw -o write` at 16
/// MiB (1.75 -> 0.9 GB/s, medians of 5 alternating runs), while on
/// loopback, where the receiver's copy is the limit and fewer frames mean
/// fewer system calls on both sides, they gained 10-25%
/// (docs/wire-tcp.md, "Frame size"). 512 KiB beat 256 KiB across the veth
/// pair in two sittings of 7 alternating runs (1 MiB writes 1.94 -> 2.02
/// and 2.00 -> 2.04 GB/s, 16 MiB 1.71 -> 1.98 and 1.75 -> 1.84), where
/// an earlier sitting had been mixed.
pub(crate) const TCP_FRAME: usize = 512 << 10;
/// The frames a peer on this host is sent (`wire::Link::open`).
pub(crate) const LOCAL_FRAME: usize = TCP_MAX_FRAME;

/// What the TCP wire is, sending up to `eager_max` bytes inline
/// (FI_OXMR_TCP_EAGER_MAX, within a frame): frames of up to
/// `TCP_FRAME` (the push path's DATA; a link to a peer on this host
/// takes `LOCAL_FRAME`), queued behind a full socket,
/// never a copy of the peer's memory (RMA writes stream their data), the
/// sender proven by its connection's hello. A link's `spreads` is its
/// own (lanes: `Link::spreads`).
pub fn props(eager_max: usize) -> Props {
    Props {
        wire: Wire::Tcp,
        name: "TCP",
        max_frame: TCP_FRAME,
        eager_max,
        eager_setting: "FI_OXMR_TCP_EAGER_MAX",
        buffers: true,
        spreads: false,
        reaches_memory: false,
        streams_writes: true,
        shares: false,
        proof: Proof::Hello,
    }
}
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

/// A hello as it came: who, its kind, whether its sender holds a job key,
/// and its proof (zero where it has none; its nonce is in the transcript).
#[derive(Clone, Copy, Debug)]
struct Greeting {
    hello: Hello,
    kind: u32,
    keyed: bool,
    proof: [u8; PROOF_LEN],
}

/// The bytes both proofs of a connection cover: the opener's hello and
/// the acceptor's challenge, each without its proof field (names,
/// epochs, pids, kinds and both nonces).
fn transcript(open: &[u8; HELLO_LEN], challenge: &[u8; HELLO_LEN]) -> Transcript {
    let n = HELLO_LEN - PROOF_LEN;
    let mut t = [0u8; 2 * (HELLO_LEN - PROOF_LEN)];
    t[..n].copy_from_slice(&open[..n]);
    t[n..].copy_from_slice(&challenge[..n]);
    t
}

/// What the first bytes of a hello already tell (a peer of another
/// version may send a shorter hello and close: its version is said as soon
/// as it is in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Preamble {
    /// Not 4 bytes yet, or a hello of our version so far.
    Fine,
    /// Another magic: not oxmr's TCP wire.
    Foreign,
    /// Oxmr's magic, another wire version.
    Version(u32),
}

fn preamble(b: &[u8]) -> Preamble {
    if b.len() >= 4 && b[..4] != MAGIC.to_le_bytes() {
        return Preamble::Foreign;
    }
    match b.get(4..8) {
        Some(v) => match u32::from_le_bytes([v[0], v[1], v[2], v[3]]) {
            VERSION => Preamble::Fine,
            other => Preamble::Version(other),
        },
        None => Preamble::Fine,
    }
}

impl Hello {
    /// The IP its name gives (None: no valid name).
    fn ip(&self) -> Option<IpAddr> {
        crate::info::addr::parse(&self.name).map(|a| a.ip())
    }

    /// This hello as it goes on the wire: of `kind`, with the job-key
    /// flag, a nonce and a proof where given.
    fn encode_with(&self, kind: u32, keyed: bool, nonce: &[u8; PROOF_LEN], proof: &[u8; PROOF_LEN]) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.version.to_le_bytes());
        b[8..36].copy_from_slice(&self.name);
        b[36..40].copy_from_slice(&self.epoch.to_le_bytes());
        b[40..44].copy_from_slice(&self.pid.to_le_bytes());
        b[44..48].copy_from_slice(&kind.to_le_bytes());
        b[48..52].copy_from_slice(&(if keyed { KEYED } else { 0 }).to_le_bytes());
        b[52..84].copy_from_slice(nonce);
        b[84..116].copy_from_slice(proof);
        b
    }

    /// A hello of `kind` without a key.
    fn encode(&self, kind: u32) -> [u8; HELLO_LEN] {
        self.encode_with(kind, false, &[0; PROOF_LEN], &[0; PROOF_LEN])
    }

    /// The hello and its kind.
    #[cfg(test)]
    fn decode(b: &[u8]) -> Option<(Hello, u32)> {
        Self::greeting(b).map(|g| (g.hello, g.kind))
    }

    /// Everything a hello says. (A hello of another version decodes as far
    /// as its first 48 bytes, which every version since 1 shares, so the
    /// log line can name the version.)
    fn greeting(b: &[u8]) -> Option<Greeting> {
        let word = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default());
        if b.len() < HELLO_LEN || word(0) != MAGIC {
            return None;
        }
        let mut name = [0u8; 28];
        name.copy_from_slice(&b[8..36]);
        let mut proof = [0u8; PROOF_LEN];
        proof.copy_from_slice(&b[84..116]);
        Some(Greeting {
            hello: Hello { version: word(4), name, epoch: word(36), pid: word(40) },
            kind: word(44),
            keyed: word(48) & KEYED != 0,
            proof,
        })
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
/// counters they keep, after how many zero-copy sends in a row that
/// the kernel copied a link stops using it (FI_OXMR_TCP_ZC_COPIED; 0:
/// never), and how many connections a link keeps to its peer for the
/// frames whose order does not matter (FI_OXMR_TCP_LANES; 0 or 1: the
/// one it shares with the peer alone), and the job key.
#[derive(Clone, Debug, Default)]
pub struct TcpSend {
    pub ring: Option<Arc<TcpRing>>,
    pub stats: Arc<TcpStats>,
    pub copied_off: u32,
    pub lanes: u32,
    /// The job key every connection proves before it carries a frame
    /// (None: connections are not authenticated; docs/security.md).
    pub key: Option<crate::auth::JobKey>,
}

/// What an endpoint's inbox lets its connections hold (docs/security.md,
/// "Bounds"): each bound an `FI_OXMR_*` variable whose default a real job
/// never reaches; each logs when it bites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Connections at once (FI_OXMR_TCP_CONN_MAX): past it, the oldest
    /// without a hello goes, or else the new one.
    pub conn_max: usize,
    /// How long a connection may take to finish its hello (and, with a
    /// job key, its proof) (FI_OXMR_TCP_HELLO_MS).
    pub hello_wait: Duration,
    /// Bytes of unfinished frames held over all connections
    /// (FI_OXMR_TCP_PARTIAL_MAX): past it, connections holding one are
    /// not read (TCP pushes back), and one whose frame stays unfinished
    /// for `hello_wait` meanwhile is closed.
    pub partial_max: usize,
    /// How long a source that was closed for refused accesses is refused
    /// (FI_OXMR_REFUSE_BAN_MS).
    pub ban: Duration,
}

impl Bounds {
    /// The bounds the configuration sets.
    pub fn of(cfg: &crate::config::Config) -> Bounds {
        Bounds {
            conn_max: cfg.tcp_conn_max,
            hello_wait: cfg.tcp_hello_wait,
            partial_max: cfg.tcp_partial_max,
            ban: cfg.refuse_ban,
        }
    }
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            conn_max: 4096,
            hello_wait: Duration::from_secs(10),
            partial_max: 64 << 20,
            ban: Duration::from_secs(10),
        }
    }
}

/// What a link and the inbox share of the connection the link writes on:
/// set by the inbox when it found the connection ended (or closed it).
type ClosedFlag = Arc<AtomicBool>;

/// The bytes both proofs cover (`transcript`).
type Transcript = [u8; 2 * (HELLO_LEN - PROOF_LEN)];

/// Say once per process that TCP peers are not authenticated (a
/// connection opened or taken without a job key).
fn unauthenticated() {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            "TCP peers are not authenticated: no job key is set, so anyone who can reach this endpoint's port can send to it; set the same FI_OXMR_AUTH_KEY (or auth_key) on every process of the job (docs/security.md)"
        );
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

mod inbox;
mod link;
mod pairs;
mod ring;

pub use inbox::Inbox;
pub use link::Link;
pub use pairs::Pairs;

#[cfg(test)]
mod bounds;
#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod keyed;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod zc;

#[cfg(test)]
fn tests_hello(addr: &std::net::SocketAddr, epoch: u32) -> Hello {
    let mut name = [0u8; 28];
    let e = crate::info::addr::encode(addr);
    name[..e.len()].copy_from_slice(&e);
    Hello { version: VERSION, name, epoch, pid: std::process::id() }
}
