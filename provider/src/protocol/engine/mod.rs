//! An RDM endpoint's data engine: posts operations as messages, and turns
//! the messages it receives into matches, copies, checks and completions.
//! It drives every wire through `wire::Link` and `wire::Inbox`, and decides
//! by what a link's wire is (`Link::props`: its largest frame, eager limit,
//! whether it buffers, spreads, reaches the peer's memory, shares copies,
//! how it proves a sender), never by which wire it is (docs/wire.md).
//!
//! Protocol by size:
//! - sends up to the link's eager limit go inline in one frame (a queue
//!   cell on shared memory, `EAGER_MAX`; larger over TCP); larger ones
//!   send an RTS naming the sender's buffers, and the receiver copies them
//!   once when a receive matches (process_vm_readv, where the wire reaches
//!   the peer's memory), or asks the sender to push them (PULL -> DATA),
//!   then ACKs;
//! - RMA writes up to `EAGER_MAX` carry their data inline; larger writes
//!   and all reads name the initiator's buffers (a wire that never reaches
//!   the peer's memory streams a write's data behind it). The *target*
//!   checks every access against its registrations (key, bounds, rights)
//!   before it copies, on every path, and ACKs with the result; RMA
//!   completes on that ACK, so a refused access is an error completion at
//!   the initiator.
//! - on shared memory, large copies are shared by both processes
//!   (`shared.rs`, the wire's `Copies`).
//!
//! Completion levels: an inline send completes when its frame is written
//! (the data has left the buffer: inject/transmit complete) unless
//! FI_DELIVERY_COMPLETE asks for the receiver's ACK; RTS sends and RMA
//! complete on the ACK (delivery complete).
//!
//! State: the `Engine` holds the endpoint's own fields and one struct per
//! file that manages a part of it (see `Engine`).
//!
//! Manual progress: `progress` runs from CQ and counter reads.
//! Locking: the engine's lock (a `sys::SpinLock` in its cell) is taken
//! first, CQ queue locks second; the AV, registration and counter locks
//! taken under an engine are leaves (they call back into no engine), and no
//! progress list runs while an engine is held, so no engine is locked twice.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxmr_ffi as ffi;

use super::hash::FastMap;
use super::{flag, op, Hdr, Iovs, HDR_MAX};
use crate::config::Config;
use crate::error::Result;
use crate::info::addr;
use crate::mr::MrDomain;
use crate::queues::cntr::Counter;
use crate::queues::cq::{CqCore, Credit, SpareCq};
use crate::wire::{Dial, Inbox, SharedCopy, FRAME_FLOOR};

mod addressing;
mod atomic;
mod completion;
mod delivery;
mod dispatch;
mod fence;
mod links;
mod multi;
mod peers;
mod posting;
mod progress;
mod push;
mod rma_target;
mod shared;
mod srx;
#[cfg(test)]
mod tests;
use addressing::AvCache;
pub use atomic::AtomicOp;
pub use fence::{Held, Trigger};
use multi::Multi;
use peers::Peers;
pub use srx::SharedRx;

/// Marks an operation posted by an fi_inject* call (no CQ entry). A bit
/// above every flag libfabric defines (its highest is 1 << 59).
pub(crate) const INJECT_CALL: u64 = 1 << 63;

/// Largest payload sent inline (docs/wire.md; a cell holds the largest
/// header and this).
pub(crate) use crate::config::EAGER_MAX;
const _: () = assert!(EAGER_MAX + HDR_MAX <= FRAME_FLOOR);
const _: () = assert!(frame_payload(FRAME_FLOOR) == EAGER_MAX);

/// The payload one frame of `max_frame` bytes carries behind the largest
/// header, in whole 16-byte units (a stream's chunks keep their
/// alignment): a queue cell's is `EAGER_MAX`.
const fn frame_payload(max_frame: usize) -> usize {
    (max_frame - HDR_MAX) & !15
}
/// RMA writes of at least this many bytes over a link with lanes wait for
/// the target's PULL instead of streaming their data behind the request
/// (`Stream::spread`): one round trip more, then every lane at once.
const SPREAD_WRITE_MIN: usize = 1 << 20;
const LIVENESS_EVERY: Duration = Duration::from_millis(100);
/// How much larger the receiver's chunk of a lone two-chunk shared copy
/// is than its helper's (`Engine::share`).
const LONE_SKEW: usize = 4 << 10;
/// How long a shared copy's owner waits for the peer's chunk in flight
/// before leaving the job to a later progress call.
const JOB_WAIT: Duration = Duration::from_millis(5);
/// How long closing an endpoint waits for a peer's chunk of a stalled
/// shared copy.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
/// Progress calls between two looks at the clock for the liveness check.
const LIVENESS_CALLS: u32 = 64;
/// The most operation ids one ACKS message carries (it fits a queue cell).
const ACKS_MAX: usize = (FRAME_FLOOR - HDR_MAX) / 8;
const _: () = assert!(HDR_MAX + ACKS_MAX * 8 <= FRAME_FLOOR);
/// Progress calls that may leave kept copies unserved in a row (see
/// `Engine::progress_with`).
const SERVE_EVERY: u32 = 64;

/// Counter slots, as `objects::ep::CNTR_FLAGS`.
const C_SEND: usize = 0;
const C_RECV: usize = 1;
const C_READ: usize = 2;
const C_WRITE: usize = 3;
const C_RREAD: usize = 4;
const C_RWRITE: usize = 5;

/// What an endpoint is bound to, fixed at fi_enable.
pub struct Bindings {
    pub tx_cq: Option<Arc<CqCore>>,
    pub rx_cq: Option<Arc<CqCore>>,
    pub tx_selective: bool,
    pub rx_selective: bool,
    pub cntrs: [Option<Arc<Counter>>; 6],
    pub av: Option<Arc<crate::protocol::av::AddrTable>>,
    pub tx_op_flags: u64,
    pub rx_op_flags: u64,
    /// FI_DIRECTED_RECV granted: receives honour their source address
    /// (otherwise fi_endpoint(3) says it is ignored).
    pub directed: bool,
    /// A connected (FI_EP_MSG) endpoint: frames are taken only from the
    /// peers in `av` (its one peer, inserted before the connection can
    /// carry anything).
    pub one_peer: bool,
    /// FI_OPT_MIN_MULTI_RECV: a multi-receive buffer posted from now on is
    /// released when less than this is left (`multi.rs`).
    pub min_multi_recv: usize,
    /// The shared receive context its receives are posted to (`srx.rs`).
    pub srx: Option<Arc<SharedRx>>,
}

/// A posted receive, boxed: it moves from the posted queue to a match, a
/// job, a held completion and the CQ entry, and as a box each move is a
/// pointer (inline, ~170 bytes, each was a memcpy call on the per-message
/// path: 13% of an 8-byte round trip's software cost, bench/self_pp.c).
type Posted = Box<PostedRecv>;

impl Engine {
    /// A plain receive being posted, in a completed receive's box
    /// (`recycle`) or a new one. (Field by field: a whole `PostedRecv`
    /// built and moved in would be one more memcpy call.)
    #[inline(always)]
    fn posted_box(
        &mut self,
        ctx: usize,
        iovs: Iovs,
        src: Option<SocketAddr>,
        tag: (u64, u64),
        credit: Option<Credit>,
    ) -> Posted {
        match self.spare_posted.pop() {
            Some(mut b) => {
                b.ctx = ctx;
                b.iovs = iovs;
                b.src = src;
                (b.tag, b.ignore) = tag;
                b.credit = credit;
                b.seq = 0;
                b.multi = Multi::No;
                b
            }
            None => {
                Box::new(PostedRecv { ctx, iovs, src, tag: tag.0, ignore: tag.1, credit, seq: 0, multi: Multi::No })
            }
        }
    }
}

struct PostedRecv {
    ctx: usize,
    iovs: Iovs,
    src: Option<SocketAddr>,
    tag: u64,
    ignore: u64,
    credit: Option<Credit>,
    /// Its place in matching order, given when a message matches it
    /// (`Engine::matched`; 0 before): its completion is reported after
    /// those of every receive matched before it.
    seq: u64,
    /// A multi-receive buffer, or a receive carved out of one (`multi.rs`).
    multi: Multi,
}

/// A receive completion held back until the receives matched before it
/// have completed (see `Engine::complete_recv`).
type HeldRecv = (Posted, Hdr, SocketAddr, u32);

/// A kept unexpected message, boxed: it moves between the lists, the
/// matching receive and its delivery as a pointer (whole, each move was a
/// memcpy call of ~200 bytes, seven of them per message), and its box
/// and data buffer are reused (`Engine::spare_unexp`).
type Unexpected = Box<UnexpectedMsg>;

struct UnexpectedMsg {
    hdr: Hdr,
    from: SocketAddr,
    pid: u32,
    /// Inline data (EAGER) or the sender's iovs (RTS).
    data: Vec<u8>,
    iovs: Vec<(usize, usize)>,
    /// An RTS whose sender's endpoint closed before a receive matched it:
    /// its buffers may belong to something else now (see `peer_gone`).
    gone: bool,
    /// The context of the FI_PEEK|FI_CLAIM that claimed it: then only an
    /// FI_CLAIM receive with that context takes it (fi_tagged(3)).
    claimed: Option<usize>,
}

impl UnexpectedMsg {
    /// What it costs to keep (`Engine::unexp_bytes`).
    fn bytes(&self) -> usize {
        // (Capacities: a reused box's buffer may be larger than its data.)
        size_of::<UnexpectedMsg>() + self.data.capacity() + self.iovs.capacity() * size_of::<(usize, usize)>()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    Write,
    Read,
    /// A base atomic (its result stays at the target).
    Atomic,
    /// A fetch or compare atomic: the old values come back in its ACK,
    /// into its result buffers (`Pending::iovs`).
    Fetch,
}

impl Kind {
    /// Completion flags of a transmit operation, and its counter slot.
    fn flags_and_counter(self, tagged: bool) -> (u64, usize) {
        match self {
            Kind::Send => (ffi::FI_SEND as u64 | if tagged { ffi::FI_TAGGED } else { ffi::FI_MSG } as u64, C_SEND),
            Kind::Write => ((ffi::FI_RMA | ffi::FI_WRITE) as u64, C_WRITE),
            Kind::Read => ((ffi::FI_RMA | ffi::FI_READ) as u64, C_READ),
            Kind::Atomic => ((ffi::FI_ATOMIC | ffi::FI_WRITE) as u64, C_WRITE),
            Kind::Fetch => ((ffi::FI_ATOMIC | ffi::FI_READ) as u64, C_READ),
        }
    }

    /// Whether a peer may copy to or from the operation's buffers (a
    /// PULL, a shared copy): sends and RMA. An atomic's operands went
    /// inline, and its result buffers are written only from its ACK.
    fn peer_copies(self) -> bool {
        matches!(self, Kind::Send | Kind::Write | Kind::Read)
    }
}

/// What a transmit operation's completion reports: its context, kind,
/// whether it was tagged, and its length.
#[derive(Clone, Copy)]
struct TxDone {
    ctx: usize,
    kind: Kind,
    tagged: bool,
    len: usize,
}

struct Pending {
    ctx: usize,
    kind: Kind,
    tagged: bool,
    len: usize,
    credit: Option<Credit>,
    peer: SocketAddr,
    report: bool,
    /// The application's buffers of the operation (source of a send or
    /// write, destination of a read), for an owner-side push.
    iovs: Iovs,
    /// The epoch of the peer endpoint the request went to: a CTS for it
    /// is served only from that endpoint, not from a later one at the same
    /// address (whose job table numbers its jobs alike).
    peer_epoch: u32,
}

/// What a pulled transfer fills when its DATA has all arrived.
enum PullFor {
    Recv { p: Posted, hdr: Hdr },
    Write { hdr: Hdr, _hold: Arc<crate::mr::registry::Region> },
}

/// A transfer the owner pushes to us because we could not reach its memory.
struct Pull {
    dest: Vec<(usize, usize)>,
    total: usize,
    got: usize,
    what: PullFor,
}

/// A transfer we push from our own memory, chunk by chunk.
struct Stream {
    to: SocketAddr,
    msg_id: u64,
    src: Vec<(usize, usize)>,
    off: usize,
    total: usize,
    /// Sent after the last chunk (the ACK of a pushed RMA read).
    after: Option<Hdr>,
    /// Whether its chunks may go in any order, on any connection to the
    /// peer (`Link::send_spread`): the DATA answering a PULL, whose
    /// receiver placed the pull before it asked. Not a streamed write's
    /// (its request, before it, opens the pull) nor a pushed read's (its
    /// ACK, after it, completes the read).
    spread: bool,
    _hold: Option<Arc<crate::mr::registry::Region>>,
}

/// What a gone peer left pending (see `Engine::peer_gone`): failed once our
/// queue's consumer passes `until` (our queue's tail when first seen after
/// the peer went).
struct Gone {
    ids: Vec<u64>,
    pulls: Vec<(SocketAddr, u64)>,
    until: Option<u64>,
    /// What the operations fail with (FI_ECONNABORTED: the peer went;
    /// FI_ECONNREFUSED, FI_EHOSTUNREACH: it was never reached).
    err: u32,
}

/// What a shared copy completes when every chunk is in place.
enum JobFor {
    Recv {
        p: Posted,
        hdr: Hdr,
    },
    /// Two receives of equal-size sends from one peer in one job (see
    /// `pair_recv`): each message's first half in the first chunk, its
    /// second half in the second; `src` is each send's buffers.
    Pair {
        first: Box<Paired>,
        second: Box<Paired>,
    },
    /// A run of one peer's queued writes (see `write_batch`), each with
    /// its registration, our buffers and the initiator's.
    Writes {
        run: Vec<QueuedWrite>,
    },
    Rma {
        hdr: Hdr,
        hold: Arc<crate::mr::registry::Region>,
    },
}

/// A checked RMA write waiting to be copied in a run: its header, the
/// registration it writes into (held), our buffers and the initiator's.
type QueuedWrite = (Hdr, Arc<crate::mr::registry::Region>, Vec<(usize, usize)>, Vec<(usize, usize)>);

/// One receive of a paired job, or one kept for pairing.
struct Paired {
    p: Posted,
    hdr: Hdr,
    pid: u32,
    from: SocketAddr,
    dest: Vec<(usize, usize)>,
    src: Vec<(usize, usize)>,
    /// Its sender went away (`peer_gone`) while it was kept.
    gone: bool,
}

/// A shared copy (`wire::SharedCopy`, an offload of the shm wire): ours
/// (we matched the receive or checked the remote access, published the
/// job and asked the peer to help) or a sender job we accepted; with the
/// peer it is shared with and what it completes.
struct Job {
    copy: SharedCopy,
    peer: SocketAddr,
    what: JobFor,
}

/// A job we offered with one of our rendezvous sends, in our own region.
#[derive(Clone, Copy)]
struct Offer {
    msg_id: u64,
    slot: u32,
    gen: u32,
    /// The receiver's process (its region's owner when we sent).
    pid: u32,
    /// We copied what we could claim once the receiver accepted it: the
    /// job's chunk count (0: not yet).
    helped: u32,
}

/// A transmit operation, decoded from the C call.
#[derive(Clone)]
pub struct TxOp {
    pub ctx: usize,
    pub iovs: Iovs,
    pub dest: u64,
    pub tag: Option<u64>,
    pub data: Option<u64>,
    /// The operation's flags (`*msg` calls); `None`: the endpoint's op_flags.
    pub flags: Option<u64>,
}

/// An RMA operation.
#[derive(Clone)]
pub struct RmaOp {
    pub ctx: usize,
    pub iovs: Iovs,
    pub dest: u64,
    pub addr: u64,
    pub key: u64,
    pub data: Option<u64>,
    /// As for [`TxOp::flags`].
    pub flags: Option<u64>,
    pub read: bool,
}

/// Messages kept for later (see `Engine::take_message`) before the queue
/// is left to fill (and the peer to see -FI_EAGAIN: flow control).
const DEFER_MAX: usize = 256;

/// The engine of one RDM endpoint. The state each file manages is its
/// own struct, defined there: `sharing` (shared.rs), `target`
/// (rma_target.rs), `pulls` (push.rs), `order` (completion.rs), `unexp`
/// (posting.rs), `pace` (progress.rs), `peers` (peers.rs), `av_cache`
/// (addressing.rs); the rest is the endpoint's own.
pub struct Engine {
    /// Our queue; `None` only while `progress` reads it. (Boxed: progress
    /// moves it out and back for every batch of messages, and the inbox,
    /// both wires' state inline, is over a KiB: two large copies per
    /// message, measured 6% of an 8-byte ping-pong.)
    rx: Option<Box<Inbox>>,
    name: [u8; 28],
    pid: u32,
    /// How we reach peers (the wire for each, our hello, what each wire
    /// is).
    dial: Dial,
    /// The domain's registrations, which every remote access is checked
    /// against.
    mr: Arc<MrDomain>,
    /// What the endpoint is bound to (CQs, counters, AV, op flags).
    bound: Bindings,
    /// A spare reference to the receive CQ (0) and the transmit CQ (1),
    /// which completed credits leave and the next post takes
    /// (`queues::cq::SpareCq`).
    spare_cq: [SpareCq; 2],
    peers: Peers,
    /// What a remote access may do to us, and the refusals so far.
    target: rma_target::Target,
    /// The unexpected messages' budget.
    unexp: posting::UnexpectedBudget,
    /// The most bytes of answers queued for one peer that does not read
    /// them (FI_OXMR_OUTBOX_MAX; past it, that peer's reading stops until
    /// half have gone).
    outbox_max: usize,
    /// Pauses (and resumes) found while the inbox was out, for it.
    to_pause: Vec<(SocketAddr, bool)>,
    posted: [VecDeque<Posted>; 2],
    unexpected: [VecDeque<Unexpected>; 2],
    pending: FastMap<u64, Pending>,
    next_id: u64,
    /// The transfers the peers push to us, and the streamed writes we drop.
    pulls: push::Pulls,
    /// Gone peers' operations, failed once their last messages are read.
    gone: Vec<Gone>,
    /// The shared copies (shm's offload) and what decides them.
    sharing: shared::Sharing,
    /// Rendezvous receives sent their way so far (`deliver_rts`): tells
    /// `serve_deferred` whether a message it handled started a copy.
    delivered: u64,
    /// More messages wait behind the one being handled.
    busy: bool,
    /// Sends up to this many bytes go inline over every link
    /// (FI_OXMR_SHM_EAGER_MAX: every wire's frames hold that much); a link
    /// whose wire allows more sends more inline (`Props::eager_max`,
    /// within its frame).
    eager_max: usize,
    av_cache: AvCache,
    /// Messages taken from the queue, to handle after the control messages
    /// behind them (see `take_message`).
    deferred: VecDeque<Vec<u8>>,
    /// The order receives are matched and reported in.
    order: completion::RecvOrder,
    /// When the progress loop last did its periodic work.
    pace: progress::Pace,
    /// Operations kept behind an FI_FENCE, and triggered operations
    /// waiting for their counters (FI_TRIGGER).
    fences: fence::Fences,
    /// Boxes of completed receives, for the next ones posted.
    spare_posted: Vec<Posted>,
    /// The box of the last unexpected message delivered, with its data
    /// buffer (at most `SPARE_UNEXP_DATA` bytes of it), for the next one.
    spare_unexp: Option<Unexpected>,
    /// Its tag in the shared receive context's queues (`srx.rs`).
    srx_owner: u64,
}

/// The most boxes of completed receives kept for reuse.
const SPARE_POSTED: usize = 64;
/// The most data buffer a spare unexpected box keeps (`spare_unexp`).
const SPARE_UNEXP_DATA: usize = 4096;

/// A frame's landing head (`wire::land`): a DATA frame's transfer (our
/// pull's id, with the connection's sender), offset and header length.
fn land_head(b: &[u8]) -> Option<crate::wire::LandHead> {
    let (h, len) = Hdr::decode(b)?;
    (h.op == op::DATA).then_some(crate::wire::LandHead { key: h.msg_id, off: h.rma_addr as usize, len })
}

/// Bytes an iov list names (saturating: a peer's lengths may add up past
/// usize::MAX; such a list names more than any buffer and is refused where
/// it matters).
fn total(iovs: &[(usize, usize)]) -> usize {
    iovs.iter().fold(0usize, |s, x| s.saturating_add(x.1))
}

/// The first `len` bytes of `iovs`.
fn clip(iovs: &[(usize, usize)], mut len: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for &(a, l) in iovs {
        if len == 0 {
            break;
        }
        let n = l.min(len);
        out.push((a, n));
        len -= n;
    }
    out
}

/// The (address, length) pieces of a region from `offset` for `len` bytes.
fn region_slice(iovs: &[(usize, usize)], offset: usize, len: usize) -> Vec<(usize, usize)> {
    crate::mr::local::slice(iovs, offset, len)
}

#[inline(always)]
fn matches(p: &Posted, tagged: bool, tag: u64, from: &SocketAddr) -> bool {
    (!tagged || (p.tag | p.ignore) == (tag | p.ignore)) && p.src.is_none_or(|s| s == *from)
}

impl Drop for Engine {
    fn drop(&mut self) {
        // (What it keeps in a shared receive context goes first: no
        // receive is handed to it any more.)
        self.leave_srx();
        // An RMA read's target writes into our buffer with no further word
        // from us, and may be doing so now: the application may free that
        // buffer once fi_close returns, so reads still pending are given
        // their answers first (progress as usual, for a bounded time; a
        // dead target's are failed by the liveness check).
        let start = Instant::now();
        while self.pending.values().any(|p| p.kind == Kind::Read) && start.elapsed() < CLOSE_WAIT {
            self.progress_with(true);
            std::hint::spin_loop();
        }
        if self.pending.values().any(|p| p.kind == Kind::Read) {
            tracing::warn!(
                "closing with RMA reads unanswered (target stopped?); their targets may still write into their buffers"
            );
        }
        // A receive left open completes (its helper may still be writing
        // into the application's buffer).
        self.finish_open_job();
        // So do stalled jobs: their helper may still be copying into (or
        // out of) a receive buffer or a registration, which the
        // application may free once fi_close returns. We copy what is
        // unclaimed and wait, for a bounded time, for the chunks in flight.
        let start = Instant::now();
        for j in &self.sharing.stalled {
            self.work(j, usize::MAX);
        }
        while !self.sharing.stalled.is_empty() {
            self.check_stalled(start.elapsed() >= Duration::from_millis(10));
            if self.sharing.stalled.is_empty() {
                break;
            }
            if start.elapsed() >= CLOSE_WAIT {
                tracing::warn!(
                    "closing with {} shared copies whose peer still holds a chunk (stopped?); it may still write into their buffers",
                    self.sharing.stalled.len()
                );
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// What a domain's endpoints share of the wires (its TCP ring and send
/// counters): the domain makes it, each engine's links send with it.
pub use crate::wire::DomainWires;

impl Engine {
    pub fn new(
        inbox: crate::protocol::inbox::Inbox,
        name: SocketAddr,
        mr: Arc<MrDomain>,
        wires: &DomainWires,
        cfg: &Config,
        b: Bindings,
        key: Option<crate::auth::JobKey>,
    ) -> Self {
        let crate::protocol::inbox::Inbox(rx) = inbox;
        let epoch = rx.epoch();
        let lands = rx.landings();
        lands.set_classifier(land_head, HDR_MAX);
        // (A streamed write's DATA follows it at once: the inbox waits for
        // us to open its zone before it cuts them, so they land.)
        lands.set_barrier(|b| b.first() == Some(&op::WRITE) && b.get(1).is_some_and(|f| f & flag::STREAM != 0));
        let mut e = Engine {
            dial: Dial::for_endpoint(cfg, &name, epoch, wires, key).with_pairs(rx.pairs()),
            sharing: shared::Sharing::new(rx.copies(), cfg),
            delivered: 0,
            busy: false,
            eager_max: cfg.eager_max.min(EAGER_MAX),
            rx: Some(Box::new(rx)),
            name: {
                let mut n = [0u8; 28];
                let e = addr::encode(&name);
                n[..e.len()].copy_from_slice(&e);
                n
            },
            pid: std::process::id(),
            mr,
            bound: b,
            spare_cq: Default::default(),
            peers: Peers::default(),
            target: rma_target::Target::new(cfg),
            unexp: posting::UnexpectedBudget::new(cfg.unexp_max),
            outbox_max: cfg.outbox_max,
            to_pause: Vec::new(),
            posted: [VecDeque::new(), VecDeque::new()],
            unexpected: [VecDeque::new(), VecDeque::new()],
            pending: FastMap::default(),
            // The region's random epoch in the high half: an endpoint
            // opened again at the same address never reuses the ids of the
            // one before, so a late answer meant for that one completes
            // nothing here, and peers tell our messages from its
            // (`closed_peer`).
            next_id: (epoch as u64) << 32 | 1,
            av_cache: AvCache::default(),
            deferred: VecDeque::new(),
            order: completion::RecvOrder::default(),
            pace: progress::Pace::default(),
            fences: Default::default(),
            spare_posted: Vec::new(),
            spare_unexp: None,
            pulls: push::Pulls::new(lands),
            gone: Vec::new(),
            srx_owner: 0,
        };
        e.join_srx();
        e
    }

    /// FI_OPT_MIN_MULTI_RECV set on an enabled endpoint: for the
    /// multi-receive buffers posted from now on (fi_endpoint(3)).
    pub fn set_min_multi_recv(&mut self, min: usize) {
        self.bound.min_multi_recv = min;
    }

    /// FI_SETOPSFLAG on an enabled endpoint: the flags that calls without
    /// their own (every call but the `*msg` ones) use from now on.
    pub fn set_op_flags(&mut self, tx: bool, flags: u64) {
        if tx {
            self.bound.tx_op_flags = flags;
        } else {
            self.bound.rx_op_flags = flags;
        }
    }

    fn wants(&self, tx: bool, flags: u64) -> bool {
        // fi_inject* calls never complete into a CQ; FI_INJECT given to a
        // *msg call only frees the buffer at once (fi_msg(3)).
        if flags & INJECT_CALL != 0 {
            return false;
        }
        let (cq, sel) = if tx {
            (&self.bound.tx_cq, self.bound.tx_selective)
        } else {
            (&self.bound.rx_cq, self.bound.rx_selective)
        };
        cq.is_some() && (!sel || flags & ffi::FI_COMPLETION as u64 != 0)
    }

    fn credit(&self, tx: bool, flags: u64) -> Result<Option<Credit>> {
        if !self.wants(tx, flags) {
            return Ok(None);
        }
        let cq = if tx { &self.bound.tx_cq } else { &self.bound.rx_cq };
        cq.as_ref().map(|c| c.reserve_from(&self.spare_cq[tx as usize])).transpose()
    }

    #[inline(always)]
    fn count(&self, slot: usize, ok: bool) {
        if let Some(c) = &self.bound.cntrs[slot] {
            if ok {
                c.add(1);
            } else {
                c.adderr(1);
            }
        }
    }

    /// Forget cached AV entries if the AV changed since they were read.
    #[inline(always)]
    fn resolve(&mut self, fi_addr: u64) -> Result<SocketAddr> {
        self.av_cache.resolve(self.bound.av.as_deref(), fi_addr)
    }

    /// The address a message's sender name encodes (None: malformed).
    fn sender(&mut self, name: &[u8; 28]) -> Option<SocketAddr> {
        self.av_cache.sender(name)
    }

    fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The fi_addr of a sender (FI_SOURCE), FI_ADDR_NOTAVAIL if not in the AV.
    #[inline(always)]
    fn src_fi_addr(&mut self, from: &SocketAddr) -> u64 {
        self.av_cache.src_fi_addr(self.bound.av.as_deref(), from)
    }
}
