//! An RDM endpoint's data engine: posts operations as messages, and turns
//! the messages it receives into matches, copies, checks and completions.
//!
//! Protocol by size (docs/wire.md):
//! - sends up to `EAGER_MAX` bytes go inline in one queue cell; larger ones
//!   send an RTS naming the sender's buffers, and the receiver copies them
//!   once with process_vm_readv when a receive matches, then ACKs;
//! - RMA writes up to `EAGER_MAX` carry their data inline; larger writes and
//!   all reads name the initiator's buffers. The *target* checks every access
//!   against its registrations (key, bounds, rights) before it copies, on
//!   every path, and ACKs with the result; RMA completes on that ACK, so a
//!   refused access is an error completion at the initiator.
//!
//! Completion levels: an inline send completes when its cell is written
//! (the data has left the buffer: inject/transmit complete) unless
//! FI_DELIVERY_COMPLETE asks for the receiver's ACK; RTS sends and RMA
//! complete on the ACK (delivery complete).
//!
//! Manual progress: `progress` runs from CQ and counter reads.
//! Locking: the engine's lock (a `sys::SpinLock` in its cell) is taken
//! first, CQ queue locks second; the AV, registration and counter locks
//! taken under an engine are leaves (they call back into no engine), and no
//! progress list runs while an engine is held, so no engine is locked twice.

use std::cell::Cell;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxmr_ffi as ffi;

use super::hash::FastMap;
use super::{decode_iovs, encode_iovs, flag, op, Hdr, Iovs, HDR_MAX};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::fail;
use crate::info::addr;
use crate::mr::MrDomain;
use crate::queues::cntr::Counter;
use crate::queues::cq::{CqCore, CqEntry, CqError, Credit};
use crate::wire::shm::cma;
use crate::wire::shm::jobs::{self, JobTable};
use crate::wire::shm::region::{Region, CELL_DATA};
use crate::wire::{Link, LinkState, OpenError, WireError};

mod addressing;
mod peers;
mod shared;
use addressing::AvCache;
use peers::{Peers, TxPeer};
use shared::{halves, runs_apart};

/// Marks an operation posted by an fi_inject* call (no CQ entry). A bit
/// above every flag libfabric defines (its highest is 1 << 59).
pub(crate) const INJECT_CALL: u64 = 1 << 63;

/// Largest payload sent inline (docs/wire.md; a cell holds the largest
/// header and this).
pub(crate) use crate::config::EAGER_MAX;
const _: () = assert!(EAGER_MAX + HDR_MAX <= CELL_DATA);
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
const ACKS_MAX: usize = (CELL_DATA - HDR_MAX) / 8;
const _: () = assert!(HDR_MAX + ACKS_MAX * 8 <= CELL_DATA);
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
}

struct Posted {
    ctx: usize,
    iovs: Iovs,
    src: Option<SocketAddr>,
    tag: u64,
    ignore: u64,
    credit: Option<Credit>,
}

struct Unexpected {
    hdr: Hdr,
    from: SocketAddr,
    pid: u32,
    /// Inline data (EAGER) or the sender's iovs (RTS).
    data: Vec<u8>,
    iovs: Vec<(usize, usize)>,
    /// An RTS whose sender's endpoint closed before a receive matched it:
    /// its buffers may belong to something else now (see `peer_gone`).
    gone: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    Write,
    Read,
}

impl Kind {
    /// Completion flags of a transmit operation, and its counter slot.
    fn flags_and_counter(self, tagged: bool) -> (u64, usize) {
        match self {
            Kind::Send => (ffi::FI_SEND as u64 | if tagged { ffi::FI_TAGGED } else { ffi::FI_MSG } as u64, C_SEND),
            Kind::Write => ((ffi::FI_RMA | ffi::FI_WRITE) as u64, C_WRITE),
            Kind::Read => ((ffi::FI_RMA | ffi::FI_READ) as u64, C_READ),
        }
    }
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
    _hold: Option<Arc<crate::mr::registry::Region>>,
}

/// What a gone peer left pending (see `Engine::peer_gone`): failed once our
/// queue's consumer passes `until` (our queue's tail when first seen after
/// the peer went).
struct Gone {
    ids: Vec<u64>,
    pulls: Vec<(SocketAddr, u64)>,
    until: Option<u64>,
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

/// A shared copy we own (shm::jobs): we matched the receive or checked the
/// remote access, published the job in our region and asked the peer to
/// help.
struct Job {
    slot: u32,
    gen: u32,
    chunk: usize,
    total: usize,
    /// Our side of a chunk: process_vm_readv from the peer (send, RMA
    /// write) or process_vm_writev into it (RMA read).
    we_read: bool,
    pid: u32,
    peer: SocketAddr,
    /// Our buffers and the peer's, for the job's bytes.
    local: Vec<(usize, usize)>,
    remote: Vec<(usize, usize)>,
    what: JobFor,
    /// We settled its last chunk, every chunk copied. Otherwise, with
    /// every chunk copied, the helper settled the last one and (for a
    /// send) completed the send itself: a receive's ACK is only ours to
    /// send when this is set (docs/wire.md, "Shared copies").
    settled_last: Cell<bool>,
    /// A chunk we hold already (a sender job's chunk 0), copied first.
    held: Cell<Option<u32>>,
    /// A sender job (docs/wire.md): the slot is in the sender's region
    /// (this is its job table), not ours.
    foreign: Option<JobTable>,
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

/// The engine of one RDM endpoint.
pub struct Engine {
    /// Our queue; `None` only while `progress` reads it.
    rx: Option<Region>,
    name: [u8; 28],
    pid: u32,
    /// The domain's registrations, which every remote access is checked
    /// against.
    mr: Arc<MrDomain>,
    b: Bindings,
    peers: Peers,
    posted: [VecDeque<Posted>; 2],
    unexpected: [VecDeque<Unexpected>; 2],
    pending: FastMap<u64, Pending>,
    next_id: u64,
    outbox: VecDeque<(SocketAddr, Vec<u8>)>,
    last_check: Instant,
    /// Progress calls since the last liveness check (the clock is read
    /// only every `LIVENESS_CALLS` calls: it costs more than a poll).
    ticks: u32,
    pulls: FastMap<(SocketAddr, u64), Pull>,
    streams: VecDeque<Stream>,
    /// Gone peers' operations, failed once their last messages are read.
    gone: Vec<Gone>,
    /// Our region's job table, free slots, the next generation, and jobs
    /// whose peer did not settle its chunk in time.
    job_table: JobTable,
    free_slots: Vec<u32>,
    /// Jobs our pending sends offer (FI_OXMR_SHM_SENDER_JOBS).
    offers: Vec<Offer>,
    sender_jobs: bool,
    next_gen: u32,
    stalled: Vec<Job>,
    /// A receive's shared copy whose helper may still hold a chunk, left
    /// open while the next copy starts (see `share`), and the progress
    /// calls since it was opened.
    open_job: Option<Job>,
    open_calls: u32,
    /// A rendezvous receive kept for the next one to pair with (see
    /// `pair_recv`); it completes before anything matched after it.
    kept: Option<Box<Paired>>,
    pair_recv: bool,
    /// Rendezvous receives sent their way so far (`deliver_rts`): tells
    /// `serve_deferred` whether a message it handled started a copy.
    delivered: u64,
    /// More messages wait behind the one being handled.
    busy: bool,
    /// What our region's `idle` word says (written on change only).
    idle_shown: bool,
    share_min: usize,
    share_chunk: usize,
    /// Most bytes of a peer's RMA writes copied by one call (`write_batch`;
    /// 0: off).
    write_batch_max: usize,
    /// Sends up to this many bytes go inline (FI_OXMR_SHM_EAGER_MAX).
    eager_max: usize,
    avc: AvCache,
    /// Messages taken from the queue, to handle after the control messages
    /// behind them (see `take_message`).
    deferred: VecDeque<Vec<u8>>,
    /// Progress calls in a row that left `deferred` unserved.
    unserved: u32,
}

/// Why a send to `to` found no endpoint there (`e`: opening its region),
/// and what to do about it.
fn unreachable_why(to: &SocketAddr, e: &std::io::Error) -> String {
    let local = to.ip().is_loopback()
        || crate::info::addr::local_ifaces(None).iter().any(|i| i.ip == to.ip())
        || crate::info::addr::route_source(to).is_some_and(|ip| ip == to.ip());
    if !local {
        return format!(
            "no oxmr endpoint at {to}: it is not an address of this host, and cross-host transfers need the TCP wire, which is not implemented yet"
        );
    }
    let mut others = crate::wire::shm::region::endpoints_on_port(to.port());
    others.retain(|a| a != &to.to_string());
    if others.is_empty() {
        format!("no oxmr endpoint at {to} on this host ({e}): is the peer running, and its endpoint still open?")
    } else {
        format!(
            "no oxmr endpoint at {to} on this host ({e}), but {} listens on that port: an endpoint is reached only at the address it was opened on; send there, or open the peer's endpoint on {} (fabtests: -s {})",
            others.join(", "),
            to.ip(),
            to.ip()
        )
    }
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

fn matches(p: &Posted, tagged: bool, tag: u64, from: &SocketAddr) -> bool {
    (!tagged || (p.tag | p.ignore) == (tag | p.ignore)) && p.src.is_none_or(|s| s == *from)
}

impl Drop for Engine {
    fn drop(&mut self) {
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
        for j in &self.stalled {
            self.work(j, usize::MAX);
        }
        while !self.stalled.is_empty() {
            self.check_stalled(start.elapsed() >= Duration::from_millis(10));
            if self.stalled.is_empty() {
                break;
            }
            if start.elapsed() >= CLOSE_WAIT {
                tracing::warn!(
                    "closing with {} shared copies whose peer still holds a chunk (stopped?); it may still write into their buffers",
                    self.stalled.len()
                );
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

impl Engine {
    pub fn new(
        inbox: crate::protocol::inbox::Inbox,
        name: SocketAddr,
        mr: Arc<MrDomain>,
        cfg: &Config,
        b: Bindings,
    ) -> Self {
        let crate::protocol::inbox::Inbox(crate::wire::Inbox(rx)) = inbox;
        let epoch = rx.epoch();
        Engine {
            job_table: rx.jobs(),
            free_slots: (0..jobs::JOBS as u32).rev().collect(),
            offers: Vec::new(),
            sender_jobs: cfg.sender_jobs,
            next_gen: 1,
            stalled: Vec::new(),
            open_job: None,
            open_calls: 0,
            kept: None,
            pair_recv: cfg.pair_recv,
            delivered: 0,
            busy: false,
            idle_shown: false,
            share_min: cfg.share_min,
            share_chunk: cfg.share_chunk,
            write_batch_max: cfg.write_batch,
            eager_max: cfg.eager_max.min(EAGER_MAX),
            rx: Some(rx),
            name: {
                let mut n = [0u8; 28];
                let e = addr::encode(&name);
                n[..e.len()].copy_from_slice(&e);
                n
            },
            pid: std::process::id(),
            mr,
            b,
            peers: Peers::default(),
            posted: [VecDeque::new(), VecDeque::new()],
            unexpected: [VecDeque::new(), VecDeque::new()],
            pending: FastMap::default(),
            // The region's random epoch in the high half: an endpoint
            // opened again at the same address never reuses the ids of the
            // one before, so a late answer meant for that one completes
            // nothing here, and peers tell our messages from its
            // (`closed_peer`).
            next_id: (epoch as u64) << 32 | 1,
            outbox: VecDeque::new(),
            last_check: Instant::now(),
            avc: AvCache::default(),
            deferred: VecDeque::new(),
            unserved: 0,
            ticks: 0,
            pulls: FastMap::default(),
            streams: VecDeque::new(),
            gone: Vec::new(),
        }
    }

    /// FI_SETOPSFLAG on an enabled endpoint: the flags that calls without
    /// their own (every call but the `*msg` ones) use from now on.
    pub fn set_op_flags(&mut self, tx: bool, flags: u64) {
        if tx {
            self.b.tx_op_flags = flags;
        } else {
            self.b.rx_op_flags = flags;
        }
    }

    fn wants(&self, tx: bool, flags: u64) -> bool {
        // fi_inject* calls never complete into a CQ; FI_INJECT given to a
        // *msg call only frees the buffer at once (fi_msg(3)).
        if flags & INJECT_CALL != 0 {
            return false;
        }
        let (cq, sel) = if tx { (&self.b.tx_cq, self.b.tx_selective) } else { (&self.b.rx_cq, self.b.rx_selective) };
        cq.is_some() && (!sel || flags & ffi::FI_COMPLETION as u64 != 0)
    }

    fn credit(&self, tx: bool, flags: u64) -> Result<Option<Credit>> {
        if !self.wants(tx, flags) {
            return Ok(None);
        }
        let cq = if tx { &self.b.tx_cq } else { &self.b.rx_cq };
        cq.as_ref().map(|c| c.reserve()).transpose()
    }

    fn count(&self, slot: usize, ok: bool) {
        if let Some(c) = &self.b.cntrs[slot] {
            if ok {
                c.add(1);
            } else {
                c.adderr(1);
            }
        }
    }

    /// Forget cached AV entries if the AV changed since they were read.
    fn resolve(&mut self, fi_addr: u64) -> Result<SocketAddr> {
        self.avc.resolve(self.b.av.as_deref(), fi_addr)
    }

    /// The address a message's sender name encodes (None: malformed).
    fn sender(&mut self, name: &[u8; 28]) -> Option<SocketAddr> {
        self.avc.sender(name)
    }

    fn peer(&mut self, to: SocketAddr) -> Result<&TxPeer> {
        if let Some(i) = self.peers.find(&to) {
            return Ok(&self.peers.list[i]);
        }
        let link = Link::open(&to).map_err(|e| match e {
            OpenError::Unreachable(e) => fail!(ffi::FI_EHOSTUNREACH, "{}", unreachable_why(&to, &e)),
            OpenError::Version { theirs, ours } => fail!(
                ffi::FI_EHOSTUNREACH,
                "the endpoint at {to} speaks shm wire version {theirs}, this oxmr speaks version {ours}: run one oxmr build on both sides"
            ),
            OpenError::Dead { owner } => fail!(
                ffi::FI_EHOSTUNREACH,
                "the endpoint at {to} is gone: its process {owner} exited without closing it"
            ),
        })?;
        Ok(self.peers.insert(TxPeer { addr: to, link }))
    }

    /// An operation just pushed to `to` waits for its answer, with the
    /// epoch of the endpoint it went to (see `Pending::peer_epoch`).
    #[allow(clippy::too_many_arguments)]
    fn await_answer(
        &mut self,
        msg_id: u64,
        ctx: usize,
        kind: Kind,
        tagged: bool,
        len: usize,
        credit: Option<Credit>,
        to: SocketAddr,
        iovs: Iovs,
    ) {
        let peer_epoch = self.peers.get(&to).map_or(0, |x| x.link.epoch());
        let p = Pending { ctx, kind, tagged, len, credit, peer: to, report: true, iovs, peer_epoch };
        self.pending.insert(msg_id, p);
    }

    /// Push a message to `to`; -FI_EAGAIN when its queue is full.
    fn push(&mut self, to: SocketAddr, hdr: Hdr, body: &[&[u8]]) -> Result<()> {
        self.push_once(to, hdr, body, true)
    }

    /// `push`; `retry`: once more if the peer's endpoint turns out closed.
    fn push_once(&mut self, to: SocketAddr, mut hdr: Hdr, body: &[&[u8]], retry: bool) -> Result<()> {
        hdr.pid = self.pid;
        hdr.name = self.name;
        let p = self.peer(to)?;
        let mut hb = [0u8; HDR_MAX];
        let hlen = hdr.encode(&mut hb);
        let h = &hb[..hlen];
        let r = match body {
            [] => p.link.send(&[h]),
            [b] => p.link.send(&[h, b]),
            _ => {
                let mut parts: Vec<&[u8]> = vec![h];
                parts.extend_from_slice(body);
                p.link.send(&parts)
            }
        };
        match r {
            Ok(()) => Ok(()),
            Err(WireError::Full) => Err(Error::quiet(ffi::FI_EAGAIN)),
            Err(WireError::Closed) => {
                // The endpoint we knew there closed; another may have
                // opened under the same address since.
                self.peer_gone(to, "closed its endpoint");
                if retry {
                    return self.push_once(to, hdr, body, false);
                }
                Err(fail!(ffi::FI_ECONNABORTED, "{to} closed its endpoint"))
            }
            Err(WireError::Io(e)) => Err(fail!(ffi::FI_EIO, "push to {to}: {e}")),
        }
    }

    /// A control message that must not be lost (ACK): queued if full.
    fn push_ctrl(&mut self, to: SocketAddr, hdr: Hdr) {
        self.push_ctrl_body(to, hdr, &[]);
    }

    /// `push_ctrl` with a body after the header. Messages to one peer stay
    /// in order; a peer whose queue is full holds up only its own.
    fn push_ctrl_body(&mut self, to: SocketAddr, hdr: Hdr, body: &[u8]) {
        let queued = !self.outbox.is_empty() && self.outbox.iter().any(|(t, _)| *t == to);
        let mut h = hdr;
        h.pid = self.pid;
        h.name = self.name;
        let p = match self.peer(to) {
            Ok(p) => p,
            Err(_) => return,
        };
        let mut hb = [0u8; HDR_MAX];
        let hlen = h.encode(&mut hb);
        if !queued {
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
        self.outbox.push_back((to, m));
    }

    /// Retry the control messages that found a full queue, in order per
    /// peer. (A dead peer's are dropped by `peer_gone`, from the liveness
    /// check.)
    fn flush_outbox(&mut self) {
        if self.outbox.is_empty() {
            return;
        }
        let mut blocked: Vec<SocketAddr> = Vec::new();
        let mut closed: Vec<SocketAddr> = Vec::new();
        for _ in 0..self.outbox.len() {
            let Some((to, bytes)) = self.outbox.pop_front() else { break };
            if blocked.contains(&to) {
                self.outbox.push_back((to, bytes));
                continue;
            }
            let Some(p) = self.peers.get(&to) else { continue };
            match p.link.send(&[&bytes]) {
                Ok(()) => {}
                Err(WireError::Full) => {
                    blocked.push(to);
                    self.outbox.push_back((to, bytes));
                }
                Err(WireError::Closed) => closed.push(to),
                Err(WireError::Io(e)) => tracing::warn!("dropping a control message to {to}: {e}"),
            }
        }
        for a in closed {
            if self.peers.find(&a).is_some() {
                self.peer_gone(a, "closed its endpoint");
            }
        }
    }

    fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// fi_send / fi_tsend and their variants.
    pub fn send(&mut self, o: TxOp) -> Result<()> {
        let to = self.resolve(o.dest)?;
        let len = total(&o.iovs);
        let flags = o.flags.unwrap_or(self.b.tx_op_flags);
        let tagged = o.tag.is_some();
        let credit = self.credit(true, flags)?;
        let mut hdr = Hdr {
            len: len as u64,
            tag: o.tag.unwrap_or(0),
            data: o.data.unwrap_or(0),
            flags: if tagged { flag::TAGGED } else { 0 } | if o.data.is_some() { flag::CQ_DATA } else { 0 },
            ..Default::default()
        };
        let delivery = flags & ffi::FI_DELIVERY_COMPLETE as u64 != 0;
        // Injects (up to inject_size) always go inline: their buffer is
        // the application's again when the call returns.
        let inject = flags & ffi::FI_INJECT as u64 != 0;
        if len <= self.eager_max || (inject && len <= EAGER_MAX) {
            hdr.op = op::EAGER;
            let mut data = Vec::new();
            let body: &[u8] = match &o.iovs[..] {
                // SAFETY: the application's send buffer, valid for this call.
                [one] if !crate::mr::phys::is_device(one.0, one.1) => unsafe { crate::mr::local::view(*one) },
                many => {
                    // SAFETY: as above, for every iov.
                    unsafe { crate::mr::local::gather(many, &mut data) };
                    &data
                }
            };
            // (Delivery complete: the CQ entry or the counter update waits
            // for the receiver's ACK; with neither there is nothing to
            // report, and no ACK is asked for.)
            if delivery && (credit.is_some() || self.b.cntrs[C_SEND].is_some()) {
                hdr.flags |= flag::NEED_ACK;
                hdr.msg_id = self.new_id();
            }
            self.push(to, hdr, &[body])?;
            if hdr.msg_id != 0 {
                self.await_answer(hdr.msg_id, o.ctx, Kind::Send, tagged, len, credit, to, Iovs::default());
            } else {
                // Injects have no CQ entry (no credit) but count (fi_cntr(3)).
                self.complete_tx(o.ctx, Kind::Send, tagged, len, credit, true);
            }
            return Ok(());
        }
        if inject {
            return Err(fail!(ffi::FI_EMSGSIZE, "inject of {len} bytes is over inject_size"));
        }
        hdr.op = op::RTS;
        hdr.msg_id = self.new_id();
        hdr.iov_count = o.iovs.len() as u16;
        let offer = self.offer(len, &o.iovs);
        if let Some((slot, gen)) = offer {
            hdr.flags |= flag::SJOB;
            hdr.rma_addr = slot as u64;
            hdr.rma_key = gen as u64;
        }
        if let Err(e) = self.push(to, hdr, &[&encode_iovs(&o.iovs)]) {
            if let Some((slot, _)) = offer {
                self.free_slots.push(slot);
            }
            return Err(e);
        }
        if let Some((slot, gen)) = offer {
            // (The queue it went to, which the push has opened.)
            let pid = self.peers.get(&to).map_or(0, |x| x.link.owner());
            self.offers.push(Offer { msg_id: hdr.msg_id, slot, gen, pid, helped: 0 });
        }
        self.await_answer(hdr.msg_id, o.ctx, Kind::Send, tagged, len, credit, to, o.iovs);
        Ok(())
    }

    /// fi_write / fi_read and their variants.
    pub fn rma(&mut self, o: RmaOp) -> Result<()> {
        let to = self.resolve(o.dest)?;
        let len = total(&o.iovs);
        let flags = o.flags.unwrap_or(self.b.tx_op_flags);
        // (FI_INJECT applies to writes only: fi_rma(3).)
        let inject = !o.read && flags & ffi::FI_INJECT as u64 != 0;
        let credit = self.credit(true, flags)?;
        let mut hdr = Hdr {
            len: len as u64,
            data: o.data.unwrap_or(0),
            flags: if o.data.is_some() { flag::CQ_DATA } else { 0 },
            rma_addr: o.addr,
            rma_key: o.key,
            msg_id: self.new_id(),
            ..Default::default()
        };
        let kind = if o.read { Kind::Read } else { Kind::Write };
        if !o.read && len <= EAGER_MAX {
            hdr.op = op::WRITE_INLINE;
            let mut data = Vec::with_capacity(len);
            // SAFETY: the application's source buffers, valid for this call.
            unsafe { crate::mr::local::gather(&o.iovs, &mut data) };
            self.push(to, hdr, &[&data])?;
        } else {
            if inject {
                return Err(fail!(ffi::FI_EMSGSIZE, "inject write of {len} bytes is over inject_size"));
            }
            hdr.op = if o.read { op::READ } else { op::WRITE };
            hdr.iov_count = o.iovs.len() as u16;
            self.push(to, hdr, &[&encode_iovs(&o.iovs)])?;
        }
        self.await_answer(hdr.msg_id, o.ctx, kind, false, len, credit, to, o.iovs);
        Ok(())
    }

    /// fi_recv / fi_trecv and their variants.
    pub fn recv(
        &mut self,
        ctx: usize,
        iovs: Iovs,
        src: u64,
        tag: Option<(u64, u64)>,
        flags: Option<u64>,
    ) -> Result<()> {
        let flags = flags.unwrap_or(self.b.rx_op_flags);
        let src = if src == ffi::FI_ADDR_UNSPEC || !self.b.directed { None } else { Some(self.resolve(src)?) };
        let credit = self.credit(false, flags)?;
        let tagged = tag.is_some();
        let (t, ignore) = tag.unwrap_or((0, 0));
        let p = Posted { ctx, iovs, src, tag: t, ignore, credit };
        let q = tagged as usize;
        if let Some(i) = self.unexpected[q].iter().position(|u| matches(&p, tagged, u.hdr.tag, &u.from)) {
            // (The application's call, not a progress call: a copy started
            // here is not overlapped with messages behind it.)
            self.busy = false;
            let u = self.unexpected[q].remove(i).expect("position is in range");
            self.deliver(p, u);
            return Ok(());
        }
        self.posted[q].push_back(p);
        Ok(())
    }

    /// fi_cancel of a posted receive.
    pub fn cancel(&mut self, ctx: usize) -> Result<()> {
        for q in 0..2 {
            if let Some(i) = self.posted[q].iter().position(|p| p.ctx == ctx) {
                let p = self.posted[q].remove(i).expect("position is in range");
                let flags = ffi::FI_RECV as u64 | if q == 1 { ffi::FI_TAGGED as u64 } else { ffi::FI_MSG as u64 };
                // (An error completion whether or not one was asked for:
                // see `fail_tx`.)
                drop(p.credit);
                if let Some(cq) = &self.b.rx_cq {
                    cq.push_error(CqError {
                        op_context: ctx,
                        flags,
                        err: ffi::FI_ECANCELED as i32,
                        prov_errno: ffi::FI_ECANCELED as i32,
                        src: ffi::FI_ADDR_NOTAVAIL,
                        ..Default::default()
                    });
                }
                return Ok(());
            }
        }
        Err(Error::quiet(ffi::FI_ENOENT))
    }

    fn complete_tx(&self, ctx: usize, kind: Kind, tagged: bool, len: usize, credit: Option<Credit>, report: bool) {
        let (cflags, slot) = kind.flags_and_counter(tagged);
        if report {
            self.count(slot, true);
        }
        if let Some(c) = credit {
            c.complete(CqEntry {
                op_context: ctx,
                flags: cflags,
                len,
                src: ffi::FI_ADDR_NOTAVAIL,
                ..Default::default()
            });
        }
    }

    fn fail_tx(&self, p: Pending, code: u32) {
        let (cflags, slot) = p.kind.flags_and_counter(p.tagged);
        if p.report {
            self.count(slot, false);
        }
        // An operation that fails reports its error to the bound CQ even
        // when it asked for no completion (FI_SELECTIVE_COMPLETION without
        // FI_COMPLETION, or an inject call, whose op_context is NULL):
        // fi_cq(3), "error completions are generated for all operations".
        // (Error entries take no credit: `push_error` is never refused.)
        drop(p.credit);
        if let Some(cq) = &self.b.tx_cq {
            cq.push_error(CqError {
                op_context: p.ctx,
                flags: cflags,
                len: p.len,
                err: code as i32,
                prov_errno: code as i32,
                src: ffi::FI_ADDR_NOTAVAIL,
                ..Default::default()
            });
        }
    }

    /// The fi_addr of a sender (FI_SOURCE), FI_ADDR_NOTAVAIL if not in the AV.
    fn src_fi_addr(&mut self, from: &SocketAddr) -> u64 {
        self.avc.src_fi_addr(self.b.av.as_deref(), from)
    }

    /// Put a matched message into a posted receive and complete both ends.
    fn deliver(&mut self, p: Posted, u: Unexpected) {
        let room = total(&p.iovs);
        let len = u.hdr.len as usize;
        let n = len.min(room);
        if u.hdr.op == op::EAGER {
            // SAFETY: the application's posted receive buffers.
            unsafe { crate::mr::local::scatter(&p.iovs, &u.data[..n.min(u.data.len())]) };
            return self.finish_recv(p, u.hdr, u.from, 0);
        }
        // A sender's endpoint that closed (its process may live on) gave up
        // its buffers: its queue says so (one load when we know it).
        if u.gone || self.closed_peer(&u.from, u.hdr.msg_id) {
            return self.sender_closed(p, u.hdr, u.from);
        }
        // (We read the sender's buffers from the process that owns its
        // queue, never from another one the header names.)
        if !self.owns_its_queue(&u.from, u.pid) {
            tracing::warn!(
                "refusing a rendezvous send from {} naming process {}, which does not own its queue; a forged or foreign message",
                u.from,
                u.pid
            );
            return self.finish_recv(p, u.hdr, u.from, ffi::FI_EINVAL);
        }
        let dest = clip(&p.iovs, n);
        // The sender offered a job in its region: take it when we would
        // share a lone transfer anyway (a busy receiver pipelines its own
        // jobs instead, and the sender's slot goes back on our ACK).
        if u.hdr.flags & flag::SJOB != 0 && !self.busy && self.can_share(n, &dest, &u.from) {
            let (slot, gen) = (u.hdr.rma_addr as u32, u.hdr.rma_key as u32);
            let t = self.peers.get(&u.from).map(|x| x.link.jobs());
            let chunk = self.job_chunk(n, false, dest.first().map_or(0, |l| l.0));
            if let Some(t) = t.filter(|t| t.accept(slot, gen, n, chunk, &dest)) {
                let remote = clip(&u.iovs, n);
                let what = JobFor::Recv { p, hdr: u.hdr };
                let job = Job {
                    slot,
                    gen,
                    chunk,
                    total: n,
                    we_read: true,
                    pid: u.pid,
                    peer: u.from,
                    local: dest,
                    remote,
                    what,
                    settled_last: Cell::new(false),
                    held: Cell::new(Some(0)),
                    foreign: Some(t),
                };
                self.work(&job, usize::MAX);
                self.finish_open_job();
                return self.finish_job(job);
            }
        }
        let src = clip(&u.iovs, n);
        let r = Box::new(Paired { p, hdr: u.hdr, pid: u.pid, from: u.from, dest, src, gone: false });
        if self.pair_recv
            && n == len
            && n.is_multiple_of(2)
            && n < self.share_min
            && 2 * n >= self.share_from(&r.from)
            && (self.busy || self.kept.is_some())
        {
            return self.pair_recv(r);
        }
        self.deliver_rts(r);
    }

    /// A rendezvous receive whose data is copied alone or in a job of its
    /// own.
    fn deliver_rts(&mut self, r: Box<Paired>) {
        self.delivered = self.delivered.wrapping_add(1);
        let n = total(&r.dest);
        if self.can_share(n, &r.dest, &r.from) {
            let Paired { p, hdr, pid, from, dest, src, .. } = *r;
            return self.share(n, true, dest, src, pid, from, hdr.msg_id, JobFor::Recv { p, hdr });
        }
        self.recv_rts(r.p, r.hdr, r.from, r.pid, &r.src);
    }

    /// A receive kept for pairing, sent its own way: its sender may have
    /// gone or closed its endpoint since it matched.
    fn deliver_kept(&mut self, k: Box<Paired>) {
        if k.gone || self.closed_peer(&k.from, k.hdr.msg_id) {
            return self.sender_closed(k.p, k.hdr, k.from);
        }
        self.deliver_rts(k);
    }

    /// A receive matched a send whose endpoint has closed since (its
    /// process may live on): its buffers are no longer its to offer.
    fn sender_closed(&mut self, p: Posted, hdr: Hdr, from: SocketAddr) {
        tracing::warn!("a receive matched a send from {from}, whose endpoint has closed since; its data is gone");
        self.finish_recv(p, hdr, from, ffi::FI_EIO);
    }

    /// The receiver's copy of a rendezvous send, alone: process_vm_readv
    /// from the sender, or a pull when the kernel cannot reach its memory.
    fn recv_rts(&mut self, p: Posted, hdr: Hdr, from: SocketAddr, pid: u32, src: &[(usize, usize)]) {
        let n = (hdr.len as usize).min(total(&p.iovs));
        let status = match cma::read_from(pid, &clip(&p.iovs, n), src) {
            Ok(got) if got == n => 0,
            Ok(got) => {
                tracing::warn!("receiving {n} bytes from {from}: only {got} could be copied");
                ffi::FI_EIO
            }
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {
                // Memory CMA cannot reach (device/PFN-mapped, secret): the
                // sender, which owns it, pushes it through the queue.
                tracing::debug!("pulling {n} bytes from {from} (process_vm_readv: {e})");
                let dest = clip(&p.iovs, n);
                self.pulls.insert((from, hdr.msg_id), Pull { dest, total: n, got: 0, what: PullFor::Recv { p, hdr } });
                self.push_ctrl(from, Hdr { op: op::PULL, msg_id: hdr.msg_id, len: n as u64, ..Default::default() });
                return;
            }
            Err(e) => {
                tracing::warn!("receiving {} bytes from {from}: process_vm_readv failed: {e}", hdr.len);
                ffi::FI_EIO
            }
        };
        self.finish_recv(p, hdr, from, status);
    }

    /// Complete a receive whose data is in place (or failed with `status`),
    /// and answer the sender if it waits for us.
    fn finish_recv(&mut self, p: Posted, hdr: Hdr, from: SocketAddr, status: u32) {
        self.finish_open_job();
        self.complete_recv(p, hdr, from, status);
        if hdr.op == op::RTS || hdr.flags & flag::NEED_ACK != 0 {
            self.push_ctrl(from, Hdr { op: op::ACK, msg_id: hdr.msg_id, status, ..Default::default() });
        }
    }

    /// The receive completion (or error) of `finish_recv`, without the
    /// answer to the sender.
    fn complete_recv(&mut self, p: Posted, hdr: Hdr, from: SocketAddr, status: u32) {
        let room = total(&p.iovs);
        let len = hdr.len as usize;
        let n = len.min(room);
        let tagged = hdr.flags & flag::TAGGED != 0;
        let mut cflags = ffi::FI_RECV as u64 | if tagged { ffi::FI_TAGGED } else { ffi::FI_MSG } as u64;
        if hdr.flags & flag::CQ_DATA != 0 {
            cflags |= ffi::FI_REMOTE_CQ_DATA as u64;
        }
        let src = self.src_fi_addr(&from);
        let buf = p.iovs.first().map_or(0, |x| x.0);
        if status == 0 && len <= room {
            self.count(C_RECV, true);
            if let Some(c) = p.credit {
                c.complete(CqEntry {
                    op_context: p.ctx,
                    flags: cflags,
                    len: n,
                    buf,
                    data: hdr.data,
                    tag: hdr.tag,
                    src,
                });
            }
        } else {
            let err = if status != 0 { status } else { ffi::FI_ETRUNC };
            self.count(C_RECV, false);
            // (An error completion whether or not one was asked for: see
            // `fail_tx`.)
            drop(p.credit);
            if let Some(cq) = &self.b.rx_cq {
                cq.push_error(CqError {
                    op_context: p.ctx,
                    flags: cflags,
                    len: n,
                    buf,
                    data: hdr.data,
                    tag: hdr.tag,
                    olen: len - n,
                    err: err as i32,
                    prov_errno: err as i32,
                    src,
                });
            }
        }
    }

    /// The owner's side of a pull: push our own bytes of operation `msg_id`.
    fn on_pull(&mut self, h: Hdr, from: SocketAddr) {
        let Some(p) = self.pending.get(&h.msg_id).filter(|p| p.peer == from) else {
            tracing::warn!("pull from {from} for an operation {} that is not one of ours with it", h.msg_id);
            return;
        };
        // A read's buffers are its destination: the target writes them and
        // never reads them back (it pushes a read's data; docs/wire.md).
        if p.kind == Kind::Read {
            tracing::warn!("pull from {from} for our read {}: a read's buffer is only written; ignored", h.msg_id);
            return;
        }
        let src = clip(&p.iovs, h.len as usize);
        self.streams.push_back(Stream {
            to: from,
            msg_id: h.msg_id,
            total: total(&src),
            src,
            off: 0,
            after: None,
            _hold: None,
        });
    }

    /// A chunk of a pushed transfer.
    fn on_data(&mut self, h: Hdr, from: SocketAddr, body: &[u8]) {
        let off = h.rma_addr as usize;
        let chunk = &body[..(h.len as usize).min(body.len())];
        if let Some(pull) = self.pulls.get_mut(&(from, h.msg_id)) {
            if let PullFor::Write { hdr, _hold } = &pull.what {
                if !self.mr.phys_live(_hold) {
                    let hdr = *hdr;
                    self.pulls.remove(&(from, h.msg_id));
                    return self.rma_done(hdr, from, ffi::FI_EKEYREJECTED, None);
                }
            }
            let dest = region_slice(&pull.dest, off, chunk.len());
            // SAFETY: `dest` lies in a posted receive buffer or in a
            // registration checked for this access and held by the pull.
            unsafe { crate::mr::local::scatter(&dest, chunk) };
            pull.got += chunk.len();
            if pull.got >= pull.total {
                let pull = self.pulls.remove(&(from, h.msg_id)).expect("present above");
                match pull.what {
                    PullFor::Recv { p, hdr } => self.finish_recv(p, hdr, from, 0),
                    PullFor::Write { hdr, _hold } => self.rma_done(hdr, from, 0, Some(&_hold)),
                }
            }
        } else if let Some(p) = self.pending.get(&h.msg_id).filter(|p| p.kind == Kind::Read && p.peer == from) {
            // Our RMA read, pushed by its target (only a read's buffers are
            // ever written by DATA, and only by the peer it went to).
            let dest = region_slice(&p.iovs, off, chunk.len());
            // SAFETY: the destination buffers of our pending read.
            unsafe { crate::mr::local::scatter(&dest, chunk) };
        } else {
            tracing::warn!("data from {from} for unknown transfer {}", h.msg_id);
        }
    }

    /// Push what we can of our outgoing streams (a peer whose queue is full
    /// holds up only the streams to it).
    fn run_streams(&mut self) {
        let mut blocked: Vec<SocketAddr> = Vec::new();
        'streams: for _ in 0..self.streams.len() {
            let Some(mut st) = self.streams.pop_front() else { break };
            if blocked.contains(&st.to) {
                self.streams.push_back(st);
                continue;
            }
            if st._hold.as_ref().is_some_and(|r| !self.mr.phys_live(r)) {
                // A device registration revoked mid-read: no more of it.
                st.off = st.total;
                if let Some(a) = st.after.as_mut() {
                    a.status = ffi::FI_EKEYREJECTED;
                }
            }
            while st.off < st.total {
                let n = (st.total - st.off).min(EAGER_MAX);
                let mut data = Vec::with_capacity(n);
                // SAFETY: our own buffers of a pending operation (valid until
                // it completes) or a registration held by the stream.
                unsafe { crate::mr::local::gather(&region_slice(&st.src, st.off, n), &mut data) };
                let hdr = Hdr {
                    op: op::DATA,
                    msg_id: st.msg_id,
                    rma_addr: st.off as u64,
                    len: n as u64,
                    ..Default::default()
                };
                // (No retry at a new endpoint under its address: it is not the
                // one this was for.)
                match self.push_once(st.to, hdr, &[&data], false) {
                    Ok(()) => st.off += n,
                    Err(e) if e.code() == ffi::FI_EAGAIN => {
                        blocked.push(st.to);
                        self.streams.push_back(st);
                        continue 'streams;
                    }
                    Err(_) => {
                        st.off = st.total;
                        st.after = None;
                    }
                }
            }
            if let Some(h) = st.after.take() {
                self.push_ctrl(st.to, h);
            }
        }
    }

    fn on_message(&mut self, msg: &[u8]) {
        let Some((h, hlen)) = Hdr::decode(msg) else {
            match Hdr::version_of(msg) {
                Some(v) if msg.len() >= crate::protocol::HDR_BASE && v != crate::protocol::PROTO_VERSION => {
                    tracing::warn!(
                        "dropping a message of protocol version {v}; this oxmr speaks version {}: run one oxmr build on both sides",
                        crate::protocol::PROTO_VERSION
                    )
                }
                _ => tracing::warn!("dropping a malformed message of {} bytes", msg.len()),
            }
            return;
        };
        let body = &msg[hlen..];
        tracing::debug!("message op {} len {} tag {:#x} msg_id {} from pid {}", h.op, h.len, h.tag, h.msg_id, h.pid);
        let pid = h.pid;
        let Some(from) = self.sender(&h.name) else {
            tracing::warn!("dropping a message without a valid sender name");
            return;
        };
        if !matches!(h.op, op::EAGER | op::RTS | op::ACK | op::ACKS | op::CTS | op::PULL | op::DATA) {
            // RMA and the rest take effect after an open receive's job
            // (sends and receives order themselves in finish_recv).
            self.finish_open_job();
        }
        match h.op {
            op::EAGER | op::RTS => {
                let tagged = h.flags & flag::TAGGED != 0;
                let q = tagged as usize;
                if h.op == op::EAGER {
                    // The common case: a receive is waiting; copy straight
                    // from the queue's copy into it.
                    if let Some(i) = self.posted[q].iter().position(|p| matches(p, tagged, h.tag, &from)) {
                        let p = self.posted[q].remove(i).expect("position is in range");
                        let n = (h.len as usize).min(total(&p.iovs)).min(body.len());
                        // SAFETY: the application's posted receive buffers.
                        unsafe { crate::mr::local::scatter(&p.iovs, &body[..n]) };
                        self.finish_recv(p, h, from, 0);
                        return;
                    }
                }
                let (data, iovs) = if h.op == op::EAGER {
                    (body[..(h.len as usize).min(body.len())].to_vec(), Vec::new())
                } else {
                    match decode_iovs(body, h.iov_count as usize).filter(|v| total(v) >= h.len as usize) {
                        Some(v) => (Vec::new(), v),
                        None => {
                            tracing::warn!(
                                "refused a send of {} bytes from {from}: its message does not describe that many bytes of buffers (a malformed or foreign message)",
                                h.len
                            );
                            self.push_ctrl(
                                from,
                                Hdr { op: op::ACK, msg_id: h.msg_id, status: ffi::FI_EINVAL, ..Default::default() },
                            );
                            return;
                        }
                    }
                };
                let u = Unexpected { hdr: h, from, pid, data, iovs, gone: false };
                match self.posted[q].iter().position(|p| matches(p, tagged, h.tag, &from)) {
                    Some(i) => {
                        let p = self.posted[q].remove(i).expect("position is in range");
                        self.deliver(p, u);
                    }
                    None => self.unexpected[q].push_back(u),
                }
            }
            op::ACK => {
                // (Only our operations with that peer.)
                if self.pending.get(&h.msg_id).is_none_or(|p| p.peer != from) {
                    return;
                }
                if let Some(p) = self.pending.remove(&h.msg_id) {
                    if h.status == 0 {
                        self.complete_tx(p.ctx, p.kind, p.tagged, p.len, p.credit, p.report);
                    } else {
                        if p.kind != Kind::Send {
                            tracing::info!(
                                "remote access to {} refused by the target: {}",
                                p.peer,
                                crate::error::errno_name(h.status)
                            );
                        }
                        self.fail_tx(p, h.status);
                    }
                }
            }
            op::ACKS => {
                for id in body.chunks_exact(8).take(h.iov_count as usize) {
                    let id = u64::from_le_bytes(id.try_into().unwrap_or_default());
                    // (Only our operations with that peer.)
                    if self.pending.get(&id).is_none_or(|p| p.peer != from) {
                        continue;
                    }
                    if let Some(p) = self.pending.remove(&id) {
                        self.complete_tx(p.ctx, p.kind, p.tagged, p.len, p.credit, p.report);
                    }
                }
            }
            op::WRITE | op::WRITE_INLINE | op::READ => self.rma_target(h, from, pid, body),
            op::PULL => self.on_pull(h, from),
            op::CTS => self.help(h, from, body),
            op::DATA => self.on_data(h, from, body),
            other => tracing::warn!("dropping a message of unknown kind {other} from {from}"),
        }
    }

    /// Serve a peer's RMA: check it against our registrations, copy, ACK.
    fn rma_target(&mut self, h: Hdr, from: SocketAddr, pid: u32, body: &[u8]) {
        let read = h.op == op::READ;
        // Every oxmr initiator names its operation, with its endpoint's
        // epoch in the high half: a request without one could not be told
        // from a closed endpoint's (`closed_peer`) and is nobody's to answer.
        if h.msg_id == 0 {
            tracing::warn!(
                "dropping a remote {} from {from} without an operation id (a malformed or foreign message)",
                if read { "read" } else { "write" }
            );
            return;
        }
        let access = if read { ffi::FI_REMOTE_READ } else { ffi::FI_REMOTE_WRITE } as u64;
        let len = h.len as usize;
        // (Memory unmapped or moved under a registration revokes it.)
        self.mr.refresh();
        let g = match self.mr.registry.check(h.rma_key, h.rma_addr, h.len, access) {
            Err(why) => {
                tracing::warn!(
                    "refused remote {} from {from}: key {:#x} addr {:#x} len {len}: {why:?}",
                    if read { "read" } else { "write" },
                    h.rma_key,
                    h.rma_addr
                );
                return self.rma_done(h, from, why.code(), None);
            }
            Ok(g) => g,
        };
        // Device memory: the registration dies with its mapping.
        if !self.mr.phys_live(&g.region) {
            return self.rma_done(h, from, ffi::FI_EKEYREJECTED, None);
        }
        let local = region_slice(&g.region.iovs, g.offset, len);
        if h.op == op::WRITE_INLINE {
            // SAFETY: `local` lies inside a registration the check just
            // granted for remote write, held by `g`.
            unsafe { crate::mr::local::scatter(&local, &body[..len.min(body.len())]) };
            return self.rma_done(h, from, 0, Some(&g.region));
        }
        let Some(remote) = decode_iovs(body, h.iov_count as usize).filter(|r| total(r) >= len) else {
            tracing::warn!(
                "refused remote {} of {len} bytes from {from}: its message does not describe that many bytes of its own buffers (a malformed or foreign message)",
                if read { "read" } else { "write" }
            );
            return self.rma_done(h, from, ffi::FI_EINVAL, None);
        };
        if self.closed_peer(&from, h.msg_id) {
            // Its buffers are no longer its to offer: a read would write
            // into memory the application may have reused since.
            tracing::warn!(
                "dropping a remote {} from {from}: its endpoint has closed",
                if read { "read" } else { "write" }
            );
            return;
        }
        let remote = clip(&remote, len);
        if !self.request_is_its_senders(&h, &from, pid, &remote, read) {
            return;
        }
        // A write under the shared-copy size with more queued is not shared
        // with an idle initiator, as receives and reads are: a write's job
        // completes in the progress call that starts it, its owner waiting
        // for the helper's chunk, while the writes queued behind it are
        // copied with one call (write_batch). Measured (64 KiB, 6
        // alternating runs, same build, medians): two-way fi_rma_bw -o
        // write 12.7 -> 13.8 GB/s, one-way -o writedata 12.2 -> 13.7.
        let batched = !read && self.busy && len < self.share_min;
        if h.msg_id != 0 && !batched && self.can_share(len, &local, &from) {
            let what = JobFor::Rma { hdr: h, hold: g.region };
            return self.share(len, !read, local, remote, pid, from, h.msg_id, what);
        }
        self.rma_copy(h, from, pid, local, remote, g.region);
    }

    /// The target's copy of a checked RMA, alone (or the bounce path when
    /// the kernel cannot reach the initiator's memory).
    fn rma_copy(
        &mut self,
        h: Hdr,
        from: SocketAddr,
        pid: u32,
        local: Vec<(usize, usize)>,
        remote: Vec<(usize, usize)>,
        region: Arc<crate::mr::registry::Region>,
    ) {
        let read = h.op == op::READ;
        let len = h.len as usize;
        let r = if read { cma::write_to(pid, &local, &remote) } else { cma::read_from(pid, &local, &remote) };
        match r {
            Ok(n) if n == len => self.rma_done(h, from, 0, Some(&region)),
            Ok(n) => {
                tracing::warn!("remote access from {from}: only {n} of {len} bytes could be copied");
                self.rma_done(h, from, ffi::FI_EIO, None);
            }
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {
                // The initiator's buffer is memory CMA cannot reach: the
                // side that owns the data moves it through the queue.
                tracing::debug!(
                    "remote {} from {from} through bounce chunks ({e})",
                    if read { "read" } else { "write" }
                );
                if read {
                    self.count(C_RREAD, true);
                    let after = (h.msg_id != 0).then_some(Hdr { op: op::ACK, msg_id: h.msg_id, ..Default::default() });
                    self.streams.push_back(Stream {
                        to: from,
                        msg_id: h.msg_id,
                        src: local,
                        off: 0,
                        total: len,
                        after,
                        _hold: Some(region),
                    });
                } else {
                    self.pulls.insert(
                        (from, h.msg_id),
                        Pull { dest: local, total: len, got: 0, what: PullFor::Write { hdr: h, _hold: region } },
                    );
                    self.push_ctrl(from, Hdr { op: op::PULL, msg_id: h.msg_id, len: len as u64, ..Default::default() });
                }
            }
            Err(e) => {
                tracing::warn!("remote access from {from}: copy failed: {e}");
                self.rma_done(h, from, ffi::FI_EIO, None);
            }
        }
    }

    /// Finish a remote access at the target: count it, raise remote CQ
    /// data, and answer the initiator.
    fn rma_done(&mut self, h: Hdr, from: SocketAddr, status: u32, region: Option<&crate::mr::registry::Region>) {
        if status == 0 {
            self.rma_took_effect(&h, from, region);
        }
        if h.msg_id != 0 {
            self.push_ctrl(from, Hdr { op: op::ACK, msg_id: h.msg_id, status, ..Default::default() });
        }
    }

    /// A remote access succeeded: count it and raise remote CQ data.
    fn rma_took_effect(&mut self, h: &Hdr, from: SocketAddr, region: Option<&crate::mr::registry::Region>) {
        let read = h.op == op::READ;
        self.count(if read { C_RREAD } else { C_RWRITE }, true);
        // A counter bound to the MR itself (fi_mr_bind, FI_RMA_EVENT).
        let access = if read { ffi::FI_REMOTE_READ } else { ffi::FI_REMOTE_WRITE } as u64;
        let bound = region.and_then(|r| r.cntr.lock().unwrap_or_else(|p| p.into_inner()).clone());
        if let Some(c) = bound.filter(|(_, flags)| flags & access != 0).and_then(|(c, _)| c.upgrade()) {
            c.remote_access();
        }
        // (Remote CQ data comes with writes only, fi_rma(3): a read that
        // claims some is not reported as a write it was not.)
        if h.flags & flag::CQ_DATA != 0 && !read {
            let src = self.src_fi_addr(&from);
            if let Some(cq) = &self.b.rx_cq {
                let flags = (ffi::FI_RMA | ffi::FI_REMOTE_WRITE) as u64 | ffi::FI_REMOTE_CQ_DATA as u64;
                cq.push_unsolicited(CqEntry { flags, len: h.len as usize, data: h.data, src, ..Default::default() });
            }
        }
    }

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
        let ready = self.rx.as_ref().is_some_and(|r| r.ready());
        if let Some(mut rx) = self.rx.take_if(|_| ready) {
            // (A panic while handling a message, caught at the C boundary,
            // must not leave the endpoint without its queue: dropping the
            // region would remove its file. The message is consumed.)
            let handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut n = 0;
                while n < 64
                    && self.deferred.len() < DEFER_MAX
                    && rx.pop(|msg, more| {
                        self.busy = more || !self.deferred.is_empty();
                        self.take_message(msg, more)
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
            if (self.deferred.is_empty() && !self.rx.as_ref().is_some_and(|r| r.ready()))
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

    /// Handle a message now, or keep it for `serve_deferred`.
    ///
    /// A copy the peer asked for (rendezvous send, RMA) takes microseconds
    /// to milliseconds, and the queue is FIFO: handled in arrival order, a
    /// burst of the peer's requests would hold back the ACKs behind them,
    /// so our own operations would complete (and the application post its
    /// next ones, the work the peer is idle without) only after all of the
    /// peer's copies are done, and two processes writing to each other
    /// would take turns instead of copying at once. So control messages
    /// (ACK, CTS, PULL, DATA: they complete or serve our own operations)
    /// are handled at once, and a copy is kept unless it is the last
    /// message waiting, along with every data message after it (so data
    /// messages from a peer still take effect in the order sent).
    fn take_message(&mut self, msg: &[u8], more: bool) {
        // (The kind is the header's first byte; on_message checks the rest.)
        let op = msg.first().copied();
        if self.rma_held(msg) {
            self.deferred.push_back(msg.to_vec());
            return;
        }
        let control = matches!(op, Some(op::ACK | op::ACKS | op::CTS | op::PULL | op::DATA));
        // (Not READ: two-way reads copy into the buffer the peer's copy
        // reads from, and overlap less served in order; docs/architecture.md.)
        let copy = matches!(op, Some(op::RTS | op::WRITE))
            && Hdr::decode(msg).is_some_and(|(h, _)| self.share_min == 0 || (h.len as usize) < self.share_min);
        if control || (self.deferred.is_empty() && !(copy && more)) {
            return self.on_message(msg);
        }
        self.deferred.push_back(msg.to_vec());
    }

    /// Whether `msg` is an RMA request that waits: one of its sender's
    /// RMA jobs with us is stalled (its helper holds a chunk, `finish_job`),
    /// and a later request must not take effect before that chunk does (a
    /// write over the same bytes would be overwritten by the older chunk, a
    /// read would see a write posted after it). (Nothing is parsed unless
    /// some job is stalled.)
    fn rma_held(&self, msg: &[u8]) -> bool {
        !self.stalled.is_empty()
            && matches!(msg.first(), Some(&(op::WRITE | op::WRITE_INLINE | op::READ)))
            && self.sent_by_stalled(msg)
    }

    /// Whether `msg` comes from a peer (endpoint) one of whose RMA jobs
    /// with us is stalled.
    fn sent_by_stalled(&self, msg: &[u8]) -> bool {
        let rma = |j: &Job| matches!(j.what, JobFor::Rma { .. } | JobFor::Writes { .. });
        Hdr::decode(msg)
            .and_then(|(h, _)| addr::parse(&h.name))
            .is_some_and(|from| self.stalled.iter().any(|j| j.peer == from && rma(j)))
    }

    /// Handle kept messages, up to and including one copy (or one batch of
    /// writes, `write_batch`), so a progress call returns to the
    /// application after at most one peer's copy.
    fn serve_deferred(&mut self) {
        loop {
            let m = if self.deferred.front().is_some_and(|m| self.rma_held(m)) {
                // (Everything of that peer's behind it waits too: a peer's
                // data messages take effect in the order sent. Other
                // peers' go past them.)
                let Some(m) = self.take_unheld() else { break };
                m
            } else {
                if self.write_batch() {
                    break;
                }
                let Some(m) = self.deferred.pop_front() else { break };
                m
            };
            let copy = matches!(m.first(), Some(&(op::RTS | op::WRITE | op::READ)));
            self.busy = !self.deferred.is_empty();
            let delivered = self.delivered;
            self.on_message(&m);
            // (A receive kept for pairing has not copied yet: go on to its
            // partner; one that copied another on its way counts.)
            if copy && (self.kept.is_none() || self.delivered != delivered) {
                break;
            }
        }
    }

    /// The first kept message from a peer none of whose RMA jobs with us
    /// is stalled (see `rma_held`): what may be served while a stalled
    /// peer's messages wait, every one of them, in order. (Messages from
    /// different peers have no order between them.)
    fn take_unheld(&mut self) -> Option<Vec<u8>> {
        let i = self.deferred.iter().position(|m| Hdr::decode(m).is_some() && !self.sent_by_stalled(m))?;
        self.deferred.remove(i)
    }

    /// Serve a run of one peer's RMA writes kept at the front of
    /// `deferred`, when there are at least two, with one process_vm_readv:
    /// the kernel's per-call work (finding the process, checking access,
    /// the syscall itself) is paid once per run instead of once per write
    /// (bench/cma_ceiling.c-style loop, two-way 64 KiB: 15-16 GB/s one
    /// write per call, 17-20 GB/s four). Each write is checked against our
    /// registrations first, exactly as alone; the run ends before a write
    /// that is refused, would be shared, is on device memory or is not
    /// plain, which is then handled alone, so writes take effect and are
    /// answered in the order sent. Returns whether it copied.
    fn write_batch(&mut self) -> bool {
        if self.write_batch_max == 0 || self.deferred.len() < 2 {
            return false;
        }
        let Some((first, _)) = self.deferred.front().and_then(|m| Hdr::decode(m)) else { return false };
        if first.op != op::WRITE {
            return false;
        }
        let Some(peer) = self.sender(&first.name) else { return false };
        if self.closed_peer(&peer, first.msg_id) {
            // (Each is dropped alone, by rma_target.)
            return false;
        }
        // (A run names one process, which must own its sender's queue, and
        // writes from this endpoint to itself are checked one by one
        // against its pending operations: `request_is_its_senders`, which
        // rma_target applies to each when they are not batched.)
        if first.name == self.name || !self.owns_its_queue(&peer, first.pid) {
            return false;
        }
        // (More messages wait behind the first.)
        self.busy = true;
        // (Writes under the shared-copy size are batched even when the
        // initiator is idle: see rma_target.)
        let limit = if self.share_min == 0 { usize::MAX } else { self.share_min }.min(self.write_batch_max + 1);
        let batchable = |h: &Hdr| {
            // (One endpoint: same name, process and epoch.)
            h.op == op::WRITE
                && h.msg_id != 0
                && h.msg_id >> 32 == first.msg_id >> 32
                && h.name == first.name
                && h.pid == first.pid
                && (h.len as usize) < limit
        };
        if !batchable(&first) || !self.deferred.get(1).and_then(|m| Hdr::decode(m)).is_some_and(|(h, _)| batchable(&h))
        {
            return false;
        }
        self.finish_open_job();
        self.mr.refresh();
        let mut run = Vec::new();
        let (mut nl, mut nr, mut bytes) = (0, 0, 0);
        // (A run is answered by one ACKS message, which must fit a cell:
        // writes are over EAGER_MAX bytes, so a 256 KiB run holds 33 at
        // most, but the cap holds whatever a peer sends.)
        while bytes < self.write_batch_max && run.len() < ACKS_MAX {
            let Some(m) = self.deferred.front() else { break };
            let Some((h, hlen)) = Hdr::decode(m).filter(|(h, _)| batchable(h)) else { break };
            let len = h.len as usize;
            let Some(r) = decode_iovs(&m[hlen..], h.iov_count as usize).filter(|r| total(r) >= len) else { break };
            let access = ffi::FI_REMOTE_WRITE as u64;
            let Ok(g) = self.mr.registry.check(h.rma_key, h.rma_addr, h.len, access) else { break };
            if g.region.phys {
                break;
            }
            let l = region_slice(&g.region.iovs, g.offset, len);
            let r = clip(&r, len);
            if nl + l.len() > cma::IOV_MAX || nr + r.len() > cma::IOV_MAX {
                break;
            }
            self.deferred.pop_front();
            (nl, nr, bytes) = (nl + l.len(), nr + r.len(), bytes + len);
            run.push((h, g.region, l, r));
        }
        self.busy = !self.deferred.is_empty();
        if run.len() < 2 {
            let Some((h, region, l, r)) = run.pop() else { return false };
            self.rma_copy(h, peer, first.pid, l, r, region);
            return true;
        }
        // The initiator says it is idle (it waits for these writes): the
        // run is a job it helps with, each side copying the same half of
        // every write, when no two writes of the run overlap partly (each
        // byte is then written by one side only, in the order sent).
        if self.peers.get(&peer).is_some_and(|p| p.link.idle())
            && runs_apart(&run.iter().map(|w| &w.2[..]).collect::<Vec<_>>())
        {
            let local = halves(&run.iter().map(|w| &w.2[..]).collect::<Vec<_>>());
            if self.can_share(bytes, &local, &peer) {
                let remote = halves(&run.iter().map(|w| &w.3[..]).collect::<Vec<_>>());
                let msg_id = run[0].0.msg_id;
                tracing::debug!("sharing a run of {} writes ({bytes} B) from {peer} with it", run.len());
                self.share(bytes, true, local, remote, first.pid, peer, msg_id, JobFor::Writes { run });
                return true;
            }
        }
        let local: Vec<_> = run.iter().flat_map(|w| w.2.iter().copied()).collect();
        let remote: Vec<_> = run.iter().flat_map(|w| w.3.iter().copied()).collect();
        if cma::read_from(first.pid, &local, &remote).is_ok_and(|n| n == bytes) {
            self.writes_done(peer, &run);
        } else {
            // Part of it could not be copied (memory CMA cannot reach, a
            // peer gone): each write alone, with its own bounce path or
            // error. Copying bytes again is harmless: the initiator's
            // buffers stay as they are until our ACK.
            tracing::debug!("a run of {} writes from {peer} could not be copied at once; each alone", run.len());
            for (h, region, l, r) in run {
                self.rma_copy(h, peer, first.pid, l, r, region);
            }
        }
        true
    }

    /// Fail what gone peers left pending once our queue has been read past
    /// everything they sent (see `peer_gone`).
    /// A run of writes took effect: each one's counters and CQ data, and
    /// one answer for the run (op::ACKS).
    fn writes_done(&mut self, peer: SocketAddr, run: &[QueuedWrite]) {
        let mut ids = Vec::with_capacity(run.len() * 8);
        for (h, region, _, _) in run {
            self.rma_took_effect(h, peer, Some(region));
            ids.extend_from_slice(&h.msg_id.to_le_bytes());
        }
        let acks = Hdr { op: op::ACKS, iov_count: run.len() as u16, ..Default::default() };
        self.push_ctrl_body(peer, acks, &ids);
    }

    fn settle_gone(&mut self) {
        // A send whose sender job the peer finished before it went away
        // is complete: its answer is in our slot, not our queue.
        if !self.offers.is_empty() {
            self.poll_offers();
        }
        let Some(rx) = &self.rx else { return };
        let (head, tail) = rx.positions();
        let mut i = 0;
        while i < self.gone.len() {
            let until = *self.gone[i].until.get_or_insert(tail);
            if head < until {
                i += 1;
                continue;
            }
            let g = self.gone.swap_remove(i);
            for id in g.ids {
                if let Some(p) = self.pending.remove(&id) {
                    self.fail_tx(p, ffi::FI_ECONNABORTED);
                }
            }
            for k in g.pulls {
                if let Some(Pull { what: PullFor::Recv { p, hdr }, .. }) = self.pulls.remove(&k) {
                    self.finish_open_job();
                    self.complete_recv(p, hdr, k.0, ffi::FI_EIO);
                }
            }
        }
    }

    /// Forget peers whose endpoint closed or whose process died.
    fn reap_dead_peers(&mut self) {
        let dead: Vec<(SocketAddr, LinkState)> =
            self.peers.list.iter().map(|p| (p.addr, p.link.state())).filter(|(_, s)| *s != LinkState::Open).collect();
        for (a, state) in dead {
            let why = if state == LinkState::Closed { "closed its endpoint" } else { "is gone (its process exited)" };
            self.peer_gone(a, why);
        }
    }

    /// Whether process `pid` owns the queue of the endpoint named `from`
    /// (the sender's link, opened by `closed_peer` before any copy): what
    /// a header says of its sender is checked against what its queue file
    /// records.
    fn owns_its_queue(&mut self, from: &SocketAddr, pid: u32) -> bool {
        self.peers.get(from).is_some_and(|p| p.link.owner() == pid)
    }

    /// Whether an RMA request may be served as its header says: the process
    /// it names (`pid`, whose memory the copy reads or writes) is the one
    /// that owns the sender's queue (its name's file, whose owner the queue
    /// records: the link the request came on, not the header, says who sent
    /// it); and a request that names this very endpoint as its sender is one
    /// of our own pending operations, with the buffers we posted it with.
    /// Otherwise it is dropped with a log line (a forged frame: a same-user
    /// process writing into our queue could name our pid and make us copy
    /// a registration into our own unregistered memory).
    fn request_is_its_senders(
        &mut self,
        h: &Hdr,
        from: &SocketAddr,
        pid: u32,
        remote: &[(usize, usize)],
        read: bool,
    ) -> bool {
        let what = if read { "read" } else { "write" };
        if !self.owns_its_queue(from, pid) {
            tracing::warn!(
                "dropping a remote {what} from {from} naming process {pid}, which does not own {from}'s queue; a forged or foreign message"
            );
            return false;
        }
        if h.name != self.name {
            return true;
        }
        let kind = if read { Kind::Read } else { Kind::Write };
        let ours = self
            .pending
            .get(&h.msg_id)
            .is_some_and(|p| p.kind == kind && clip(&p.iovs, remote.iter().map(|x| x.1).sum()) == remote);
        if !ours {
            tracing::warn!(
                "dropping a remote {what} that names this endpoint as its sender but is none of its pending operations (msg_id {:#x}); a forged message",
                h.msg_id
            );
        }
        ours
    }

    /// Whether `a`'s endpoint has closed (or its queue is gone): checked
    /// before copying into or out of its buffers. One load of its queue's
    /// header when we know it (we are about to answer it anyway).
    ///
    /// `msg_id` (an operation id of the sender's, 0: none) names the
    /// endpoint that sent the message: its high half is that endpoint's
    /// epoch, so a message of a closed endpoint is told from one of a new
    /// endpoint that opened under the same address since.
    fn closed_peer(&mut self, a: &SocketAddr, msg_id: u64) -> bool {
        match self.peer(*a) {
            Ok(p) if !p.link.closed() => msg_id != 0 && (msg_id >> 32) as u32 != p.link.epoch(),
            Ok(_) => {
                self.peer_gone(*a, "closed its endpoint");
                true
            }
            // (No endpoint there any more.)
            Err(_) => true,
        }
    }

    /// A peer's endpoint is gone: closed (its process may live on, and may
    /// open a new endpoint under the same address) or its process died.
    /// Forget its queue, fail our operations with it (FI_ECONNABORTED),
    /// drop what we still owed it (control messages, pushed chunks), fail
    /// the receives it was pushing to us (FI_EIO), and mark its sends that
    /// no receive has matched yet: their buffers are no longer its to
    /// give. Nothing of this answers the peer, so no message meant for it
    /// reaches a new endpoint at its address.
    ///
    /// What the peer sent before it went is in our queue (its pushes came
    /// before its close or its death): its operations and pulls are failed
    /// only once we have read our queue past them (`settle_gone`), so an
    /// answer already on its way still completes what it answers.
    fn peer_gone(&mut self, a: SocketAddr, why: &str) {
        tracing::warn!("peer {a} {why}; failing the operations with it");
        self.peers.remove(&a);
        let ids: Vec<u64> = self.pending.iter().filter(|(_, p)| p.peer == a).map(|(id, _)| *id).collect();
        let pulls: Vec<(SocketAddr, u64)> = self.pulls.keys().filter(|k| k.0 == a).copied().collect();
        if !ids.is_empty() || !pulls.is_empty() {
            self.gone.push(Gone { ids, pulls, until: None });
        }
        self.outbox.retain(|(to, _)| *to != a);
        self.streams.retain(|st| st.to != a);
        for q in &mut self.unexpected {
            for u in q.iter_mut().filter(|u| u.from == a && u.hdr.op == op::RTS) {
                u.gone = true;
            }
        }
        if let Some(k) = self.kept.as_mut().filter(|k| k.from == a) {
            k.gone = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_to_nobody_says_why_and_what_to_do() {
        let e = std::io::Error::from_raw_os_error(libc::ENOENT);
        let there: SocketAddr = "127.0.0.1:40123".parse().unwrap();
        let elsewhere: SocketAddr = "127.0.0.2:40123".parse().unwrap();
        let why = unreachable_why(&elsewhere, &e);
        assert!(why.contains("is the peer running"), "{why}");
        let _own = Region::create(&there).unwrap();
        let why = unreachable_why(&elsewhere, &e);
        assert!(why.contains("but 127.0.0.1:40123 listens on that port"), "{why}");
        assert!(why.contains("-s 127.0.0.2"), "{why}");
        let far: SocketAddr = "198.51.100.7:40123".parse().unwrap();
        let why = unreachable_why(&far, &e);
        assert!(why.contains("not an address of this host"), "{why}");
    }
}
