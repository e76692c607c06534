//! The shared-memory region (queue) of one endpoint.
//!
//! Layout (all little-endian, fixed at creation):
//!
//! ```text
//! Header   magic, version, owner pid, cell count/size, ready flag, tail
//!          (producers' line), owner start time, address, network
//!          namespace, the job-key proof (`Proof`), head (the consumer's line), idle and
//!          sleeping (the owner's line: it has no copy of its own
//!          waiting; how many of its threads sleep on its doorbell), claimers
//!          (the pid of the producer that last claimed each cell)
//! Jobs     JOBS x JobSlot (shared copies, see `shm::jobs`)
//! Slots    CELLS x { seq: u32, len: u32, data[SLOT_DATA] }, 128 bytes each
//! Bodies   CELLS x [u8; BODY], from half a page past a page boundary
//! ```
//!
//! Cell `pos` is slot `pos % CELLS` and body `pos % CELLS`. A message of
//! at most `SLOT_DATA` bytes lives in its slot; a longer one (up to
//! `CELL_DATA`) lives whole in its body, its slot holding only the
//! sequence and length. So a small message touches one line of a 32 KiB
//! array that stays in the caches and the TLB from lap to lap, not a new
//! page of a 2 MiB ring each time (see docs/wire-shm.md).
//!
//! The queue is a bounded multi-producer, single-consumer ring. A producer
//! claims position `pos` by CAS on `tail` once it knows the cell is free
//! (`pos < head + CELLS`; it keeps the last `head` it read and reads the
//! shared one again only when that says full), writes the cell, then
//! publishes it with `seq = pos + 1`. The consumer takes `pos` when
//! `seq == pos + 1` and frees it by publishing `head = pos + 1`. The
//! consumer never writes a cell and a producer rarely reads `head`, so a
//! message costs one cache-line transfer each way instead of three. A full
//! ring answers `EAGAIN` (flow control); nothing blocks.
//!
//! The doorbell: the owner binds a unix datagram socket at a path in its
//! queue's directory (`bell_name`: `bell-<pid>-<epoch>`, named after what
//! the header records, so a producer finds it from the queue alone), which
//! its wake fd holds. A thread of the owner
//! about to sleep adds one to `sleeping` (SeqCst), then looks for work once
//! more, then sleeps; a producer, after publishing a cell, fences (SeqCst)
//! and reads `sleeping`, and if it is not 0 sends one byte to the doorbell
//! (non-blocking; a full or absent socket is ignored: a full one is
//! readable already). Either the owner's re-check sees the cell or the
//! producer sees `sleeping` (Dekker's pattern), so no message is left
//! asleep; a busy owner costs producers one load.
//!
//! Submodules: `files` (the queue's files: names, the locator, its
//! proof, making and opening a queue, and the sweep of stale ones),
//! `process` (whether a queue's owner lives).

use std::io;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use super::dir::Dir;
use super::jobs::{JobSlot, JobTable, JOBS};
use std::sync::Arc;

mod files;
mod process;
#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) use files::queue_names;
pub use files::{endpoints_on_port, path_for, reclaim_stale, KeyMismatch, OwnerGone};
pub use process::{owner_alive, pid_alive, start_time};

/// Cells in an endpoint's queue.
pub(crate) const CELLS: usize = 256;
/// The most bytes one message (its header included) takes in a cell.
pub(crate) const CELL_DATA: usize = 8192 - 8;
/// The most bytes of a message held in its slot itself.
const SLOT_DATA: usize = 128 - 8;
/// A body's bytes (a message uses at most `CELL_DATA` of them).
const BODY: usize = 8192;

/// Message bytes in a slot's first cache line (after `seq` and `len`).
const FIRST_LINE: usize = 64 - 8;

const MAGIC: u64 = 0x6f78_6d72_7368_6d31; // "oxmrshm1"
/// `Header::ready`: set once the region is initialised, and to `CLOSED`
/// when its endpoint closes.
const READY: u32 = 1;
const CLOSED: u32 = 2;
// (12: `sleeping` and the doorbell; a version-11 producer would never
// ring, so it is refused. 13: the per-user directory, `addr`, `netns`.
// 14: the queue a sealed memfd, the file at its name a `Locator`.
// 15: `keyed` and `proof`; a version-14 peer would take a keyed queue
// without checking it. 16: slots apart from bodies.)
const VERSION: u32 = 16;

#[repr(C)]
struct Header {
    magic: u64,
    version: u32,
    owner: u32,
    cells: u32,
    cell_size: u32,
    ready: AtomicU32,
    /// A random number of this endpoint's life (its engine's operation ids
    /// carry it in their high half): tells a message of a closed endpoint
    /// from one of a new endpoint under the same address.
    epoch: u32,
    tail: AtomicU64,
    /// The owner's start time (/proc/<pid>/stat field 22, clock ticks
    /// since boot): with `owner`, names the process even after its pid is
    /// reused (`owner_alive`).
    owner_start: u64,
    /// The address of the endpoint the queue serves (`info::addr::encode`,
    /// zero-padded): a queue found under another name is not taken for it.
    addr: [u8; 32],
    /// The owner's network namespace (the inode of /proc/self/ns/net): of
    /// two live queues for one address (endpoints at the same address in
    /// two namespaces, which share /dev/shm), a peer takes the one of its
    /// own namespace.
    netns: u64,
    /// 1 when the owner holds a job key, and then `proof` is its tag over
    /// this queue's identity (`Proof`); 0 without a key.
    keyed: u32,
    _pad2: u32,
    proof: [u8; crate::auth::TAG_LEN],
    /// The consumer's position: every cell before it is free.
    head: AtomicU64,
    _pad3: [u64; 15],
    /// 1 while the owner has no copy of its own waiting (it would help
    /// with a shared copy at once); written by the owner on change only.
    idle: AtomicU32,
    /// How many of the owner's threads sleep and want the doorbell rung
    /// (see the module header).
    sleeping: AtomicU32,
    _pad4: [u32; 30],
    /// The pid of the producer that last claimed each cell, written right
    /// after the claim (read only when a cell stays unpublished: `unstick`).
    /// (`pos << 32 | pid`, pos's low 32 bits: a record of an earlier lap
    /// round the ring is never taken for the current one.)
    claimers: [AtomicU64; CELLS],
}

/// A cell's slot: its sequence and length, and the message itself when
/// it has at most `SLOT_DATA` bytes.
#[repr(C)]
struct Slot {
    /// `pos + 1` (mod 2^32) once the message at `pos` is published.
    seq: AtomicU32,
    len: u32,
    data: [u8; SLOT_DATA],
}

/// Bytes a cell takes (its slot and its body), as the header records.
const CELL_SIZE: usize = size_of::<Slot>() + BODY;

const HDR: usize = size_of::<Header>();
const JOBS_AT: usize = HDR.next_multiple_of(128);
// 128-byte alignment: a slot's first line (sequence, length, the start
// of a small message) and its second form one pair for the adjacent-line
// prefetcher, which then never pulls in a neighbouring slot.
const SLOTS_AT: usize = (JOBS_AT + JOBS * size_of::<JobSlot>()).next_multiple_of(128);
// Bodies start half a page in: a body at a page's start and an
// application's page-aligned buffer share their page offset, and copies
// between them are 4K-aliased (on the AMD EPYC here a 4 KiB ping-pong ran
// 2.2 us instead of 0.7 with bodies page-aligned).
const BODIES_AT: usize = (SLOTS_AT + CELLS * size_of::<Slot>()).next_multiple_of(4096) + 2048;
/// Total bytes of a region.
pub(crate) const REGION_SIZE: usize = BODIES_AT + CELLS * BODY;

/// A peer's queue speaks another version of this wire (`theirs` 0: not an
/// oxmr queue of any version we know).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionMismatch {
    pub theirs: u32,
    pub ours: u32,
}

impl std::fmt::Display for VersionMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "its queue speaks shm wire version {}, this oxmr speaks version {}; run one oxmr build on both sides",
            self.theirs, self.ours
        )
    }
}

impl std::error::Error for VersionMismatch {}

/// The file name of the doorbell of the queue whose owner is `pid` and
/// epoch `epoch`. (A path in the per-user directory, not an abstract
/// name: any user of the network namespace could take an abstract name
/// first, or send to it; and a path reaches an owner in another network
/// namespace too.)
/// (Abstract names belong to the network namespace: an owner in another
/// namespace, reached over shm under FI_OXMR_WIRE=shm, is not rung.)
fn bell_name(pid: u32, epoch: u32) -> String {
    format!("bell-{pid}-{epoch:08x}")
}

/// A region's mapping, unmapped when its last holder (the region, job
/// tables handed out) is gone.
pub(super) struct Mapping(*mut u8);

// SAFETY: process-wide shared memory; everything shared in it is an atomic
// or written by its single owner (see the queue protocol and shm::jobs).
unsafe impl Send for Mapping {}
// SAFETY: `&Mapping` hands out only the base pointer; what is shared
// through it is atomics or owner-written cells (the queue protocol).
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(super) fn base(&self) -> *mut u8 {
        self.0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping of REGION_SIZE bytes, which no
        // holder uses any more.
        unsafe { libc::munmap(self.0 as *mut libc::c_void, REGION_SIZE) };
    }
}

/// A mapped region (own or a peer's).
pub struct Region {
    /// `map`'s address, kept at hand.
    base: *mut u8,
    map: std::sync::Arc<Mapping>,
    /// The directory of the queue's file, and its name there.
    dir: Arc<Dir>,
    name: String,
    /// Owner: the status of its locator file (it removes the name at the
    /// end only if the name is still that file).
    file: Option<libc::stat>,
    /// Owner: the queue's memfd, held open for the endpoint's life: peers
    /// open it through /proc/<pid>/fd.
    _memfd: Option<std::os::fd::OwnedFd>,
    /// The process that owns the queue and when it started: ourselves, or
    /// (a peer's) the process whose fd table the queue was taken from.
    owner: u32,
    owner_start: u64,
    owned: bool,
    /// Consumer position (owner only).
    head: u64,
    /// The owner's `head` as a producer last read it.
    head_seen: std::cell::Cell<u64>,
    /// Our pid (producers record it in `claimers`; getpid is a syscall).
    pid: u32,
    /// The unpublished cell at `head` and when it was first seen (owner
    /// only; see `unstick`).
    stuck: Option<(u64, std::time::Instant)>,
    /// Owner: the doorbell socket (None if it could not be bound: the
    /// endpoint then cannot be rung, and its waiters tick). Producer: the
    /// unbound socket it rings with, made at the first ring.
    bell: Option<UnixDatagram>,
    /// Owner: the doorbell's file (removed at the end if still that one).
    bell_file: Option<(String, libc::stat)>,
    ringer: std::cell::OnceCell<Option<(UnixDatagram, std::os::unix::net::SocketAddr)>>,
}

// SAFETY: the mapping is process-wide memory; all shared fields are
// atomics or written only by their single owner (see the queue protocol).
unsafe impl Send for Region {}

impl Region {
    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header and lives as long as self.
        unsafe { &*(self.base as *const Header) }
    }

    /// Stamp another wire version into our own queue's header, as a queue
    /// made by another oxmr build would carry (tests of the refusal).
    #[cfg(test)]
    pub(crate) fn set_version_for_test(&self, v: u32) {
        assert!(self.owned, "only the owner writes its header");
        // SAFETY: our own mapping starts with a Header; `version` is a
        // plain u32 that only the owner writes (here, before any reader
        // opens the queue).
        unsafe { std::ptr::addr_of_mut!((*(self.base as *mut Header)).version).write_volatile(v) };
    }

    /// Leave our queue's file behind, as a process killed before closing
    /// its endpoint does (tests).
    #[cfg(test)]
    pub(crate) fn abandon(mut self) {
        self.file = None;
    }

    /// The queue file's name in its directory.
    pub fn file_name(&self) -> &str {
        &self.name
    }

    fn slot(&self, i: usize) -> *mut Slot {
        // SAFETY: i % CELLS < CELLS, inside the mapping.
        unsafe { self.base.add(SLOTS_AT + (i % CELLS) * size_of::<Slot>()) as *mut Slot }
    }

    fn body(&self, i: usize) -> *mut u8 {
        // SAFETY: i % CELLS < CELLS, inside the mapping.
        unsafe { self.base.add(BODIES_AT + (i % CELLS) * BODY) }
    }

    /// The region's job table (shared copies, see `shm::jobs`); valid
    /// while this region is.
    pub fn jobs(&self) -> JobTable {
        JobTable::new(self.map.clone(), JOBS_AT)
    }

    /// Pid of the region's owner.
    pub fn owner(&self) -> u32 {
        self.owner
    }

    /// The endpoint's epoch (see `Header::epoch`).
    pub fn epoch(&self) -> u32 {
        self.header().epoch
    }

    /// Whether the owner closed this endpoint (its process may live on,
    /// and may open another endpoint under the same name: a new region).
    pub fn closed(&self) -> bool {
        self.header().ready.load(Ordering::Acquire) != READY
    }

    /// Whether the endpoint is still there: not closed, and its owner
    /// process alive.
    pub fn reachable(&self) -> bool {
        !self.closed() && owner_alive(self.owner, self.owner_start)
    }

    /// Push one message (`parts` concatenated). EAGAIN when full.
    #[inline(always)]
    pub fn push(&self, parts: &[&[u8]]) -> io::Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > CELL_DATA {
            return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
        }
        let h = self.header();
        // (`ready` shares its cache line with `tail`, which we take next.)
        if h.ready.load(Ordering::Acquire) != READY {
            return Err(io::Error::from_raw_os_error(libc::ECONNRESET));
        }
        let mut pos = h.tail.load(Ordering::Relaxed);
        loop {
            if pos >= self.head_seen.get() + CELLS as u64 {
                self.head_seen.set(h.head.load(Ordering::Acquire));
                if pos >= self.head_seen.get() + CELLS as u64 {
                    return Err(io::Error::from_raw_os_error(libc::EAGAIN));
                }
            }
            match h.tail.compare_exchange_weak(pos, pos + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => {
                    h.claimers[pos as usize % CELLS]
                        .store((pos as u32 as u64) << 32 | self.pid as u64, Ordering::Relaxed);
                    let (slot, body) = (self.slot(pos as usize), self.body(pos as usize));
                    // SAFETY: we own cell `pos` (its slot and body) until
                    // we publish it: the consumer freed it (head > pos -
                    // CELLS, read with Acquire) and the CAS gave `pos` to
                    // us alone. A message goes into the slot if it fits
                    // there, else whole into the body (len <= CELL_DATA,
                    // checked above, < BODY).
                    unsafe {
                        let inline = len <= SLOT_DATA;
                        if inline {
                            // The bytes past the slot's first cache line
                            // first, then the first line in one go (message
                            // start, length, sequence): the consumer polls
                            // that line, and a second visit to it would mean
                            // taking it back from the consumer once more.
                            let dst = (*slot).data.as_mut_ptr();
                            let mut off = 0;
                            for p in parts {
                                if off + p.len() > FIRST_LINE {
                                    let skip = FIRST_LINE.saturating_sub(off);
                                    std::ptr::copy_nonoverlapping(
                                        p.as_ptr().add(skip),
                                        dst.add(off + skip),
                                        p.len() - skip,
                                    );
                                }
                                off += p.len();
                            }
                            let mut off = 0;
                            for p in parts {
                                if off >= FIRST_LINE {
                                    break;
                                }
                                let n = p.len().min(FIRST_LINE - off);
                                std::ptr::copy_nonoverlapping(p.as_ptr(), dst.add(off), n);
                                off += p.len();
                            }
                        } else {
                            let mut off = 0;
                            for p in parts {
                                std::ptr::copy_nonoverlapping(p.as_ptr(), body.add(off), p.len());
                                off += p.len();
                            }
                        }
                        (*slot).len = len as u32;
                        (*slot).seq.store((pos + 1) as u32, Ordering::Release);
                        // (Not into our own queue: its consumer is this
                        // process, usually this very thread, whose next
                        // read would fetch the lines back from L3; with
                        // the fence below waiting on them, a one-thread
                        // round trip went 275 -> 490 ns where CLDEMOTE
                        // exists.)
                        if self.owner != self.pid {
                            if inline {
                                demote(slot as *const u8, 8 + len);
                            } else {
                                demote(body, len);
                                demote(slot as *const u8, 8);
                            }
                        }
                    }
                    // (See the doorbell in the module header.)
                    fence(Ordering::SeqCst);
                    if h.sleeping.load(Ordering::Relaxed) != 0 {
                        self.ring();
                    }
                    return Ok(());
                }
                Err(p) => pos = p,
            }
        }
    }

    /// Ring the owner's doorbell (one datagram; a full socket is readable
    /// already, an absent one is an owner that cannot be rung).
    fn ring(&self) {
        let sock = self.ringer.get_or_init(|| {
            let s = UnixDatagram::unbound().and_then(|s| s.set_nonblocking(true).map(|_| s));
            let h = self.header();
            let at = self.dir.path().join(bell_name(self.owner, h.epoch));
            s.and_then(|s| std::os::unix::net::SocketAddr::from_pathname(at).map(|a| (s, a))).ok()
        });
        if let Some((s, at)) = sock {
            let _ = s.send_to_addr(&[1], at);
        }
    }

    /// Bind the doorbell (owner, before the queue is published; without
    /// one, its waiters poll every millisecond).
    fn bind_bell(&mut self) {
        let h = self.header();
        let name = bell_name(self.owner, h.epoch);
        let path = self.dir.path().join(&name);
        // (A file at the name is a leftover of an earlier process with our
        // pid that drew the same epoch: ours to replace.)
        let bound = UnixDatagram::bind(&path).or_else(|e| match e.raw_os_error() {
            Some(libc::EADDRINUSE) => {
                let _ = self.dir.unlink(&name);
                UnixDatagram::bind(&path)
            }
            _ => Err(e),
        });
        match bound.and_then(|b| b.set_nonblocking(true).map(|_| b)) {
            Ok(b) => {
                self.bell_file = self.dir.lstat(&name).ok().map(|st| (name, st));
                self.bell = Some(b);
            }
            Err(e) => {
                tracing::info!("no doorbell at {} ({e}): its waiters poll every millisecond", path.display())
            }
        }
    }

    /// The doorbell's fd (owner only; None: it has none and cannot be rung).
    pub fn bell_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.bell.as_ref().map(|b| b.as_raw_fd())
    }

    /// A thread of the owner is about to sleep (`true`) or woke (`false`):
    /// producers ring the doorbell while any sleeps. Waking drains the
    /// doorbell. After `true`, the caller looks for work once more before
    /// sleeping (see the module header).
    pub fn set_sleeping(&self, on: bool) {
        let s = &self.header().sleeping;
        if on {
            s.fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            return;
        }
        // (Never below 0: a wake without a sleep is a no-op.)
        let _ = s.fetch_update(Ordering::SeqCst, Ordering::Relaxed, |n| n.checked_sub(1));
        if let Some(b) = &self.bell {
            let mut buf = [0u8; 64];
            while b.recv(&mut buf).is_ok() {}
        }
    }

    /// (consumer position, producers' tail) (owner only): every message
    /// pushed before the tail was read has been consumed once the first
    /// reaches the second.
    pub fn positions(&self) -> (u64, u64) {
        (self.head, self.header().tail.load(Ordering::Acquire))
    }

    /// Whether a message waits (owner only): one load, for the empty poll.
    pub fn ready(&self) -> bool {
        let pos = self.head;
        // SAFETY: inside the mapping; an atomic load of a published field.
        unsafe { (*self.slot(pos as usize)).seq.load(Ordering::Acquire) == (pos + 1) as u32 }
    }

    /// Say whether the owner is idle (owner only; see `Header::idle`).
    pub fn set_idle(&self, idle: bool) {
        self.header().idle.store(idle as u32, Ordering::Relaxed);
    }

    /// Whether the region's owner said it is idle (a hint: it may have
    /// become busy since).
    pub fn idle(&self) -> bool {
        self.header().idle.load(Ordering::Relaxed) == 1
    }

    /// Pop one message into `f(message, more)` (owner only); `more` says
    /// whether the next message is already published too (the consumer has
    /// queued work behind this one). Returns false when empty.
    pub fn pop(&mut self, f: impl FnOnce(&[u8], bool)) -> bool {
        debug_assert!(self.owned);
        if !self.ready() {
            return false;
        }
        let pos = self.head;
        let slot = self.slot(pos as usize);
        let handled;
        // SAFETY: inside the mapping; the producer published it (`ready`).
        // The length is read once; whatever a lying producer wrote there,
        // the message handed up stays inside its slot or its body.
        unsafe {
            let len = (*slot).len as usize;
            let msg: &[u8] = if len <= SLOT_DATA {
                &(&(*slot).data)[..len]
            } else {
                let body = self.body(pos as usize);
                let len = len.min(CELL_DATA);
                fetch_ahead(body, len);
                std::slice::from_raw_parts(body, len)
            };
            let next = pos + 1;
            let more = (*self.slot(next as usize)).seq.load(Ordering::Relaxed) == (next + 1) as u32;
            // (Consumed even if handling it panics: a message that panics
            // its handler must not be handled again and again.)
            handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(msg, more)));
        }
        self.head = pos + 1;
        // Frees the cell: everything read from it happens before.
        self.header().head.store(self.head, Ordering::Release);
        if let Err(panic) = handled {
            std::panic::resume_unwind(panic);
        }
        true
    }
}

/// How long a claimed cell may stay unpublished before `unstick` asks
/// whether its producer is alive.
const STUCK_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

impl Region {
    /// Skip the cell at the head if the producer that claimed it died
    /// before publishing it (killed between its claim and its store of
    /// `seq`): otherwise the queue would wait for it forever and, once
    /// full, refuse every producer. Owner only; called from the engine's
    /// liveness check. A cell is skipped only after `STUCK_AFTER` and only
    /// when the pid recorded for it is gone (a stopped producer still
    /// publishes later, into the cell it claimed). Returns whether it
    /// skipped one.
    pub fn unstick(&mut self) -> bool {
        let pos = self.head;
        if self.ready() || self.header().tail.load(Ordering::Acquire) <= pos {
            self.stuck = None;
            return false;
        }
        match self.stuck {
            Some((p, since)) if p == pos && since.elapsed() >= STUCK_AFTER => {
                let rec = self.header().claimers[pos as usize % CELLS].load(Ordering::Relaxed);
                let claimer = rec as u32;
                // (A record of an earlier lap: the claimer had not recorded
                // itself yet; wait.)
                if (rec >> 32) as u32 != pos as u32 || claimer == 0 || pid_alive(claimer) {
                    return false;
                }
                tracing::warn!(
                    "a producer (pid {claimer}) died while writing a message into our queue; skipping its cell"
                );
                self.head = pos + 1;
                self.header().head.store(self.head, Ordering::Release);
                self.stuck = None;
                true
            }
            Some((p, _)) if p == pos => false,
            _ => {
                self.stuck = Some((pos, std::time::Instant::now()));
                false
            }
        }
    }

    /// Claim a cell as a producer stopped right after its claim, before it
    /// recorded itself.
    #[cfg(test)]
    fn claim_unrecorded(&self) {
        self.header().tail.fetch_add(1, Ordering::AcqRel);
    }

    /// Claim a cell as a producer `pid` that dies before publishing it.
    #[cfg(test)]
    fn claim_abandoned(&self, pid: u32) {
        let h = self.header();
        let pos = h.tail.fetch_add(1, Ordering::AcqRel);
        h.claimers[pos as usize % CELLS].store((pos as u32 as u64) << 32 | pid as u64, Ordering::Relaxed);
    }
}

/// Push the cache lines of [p, p+len) from our core's caches to the shared
/// L3 (CLDEMOTE), where the consumer's reads find them sooner than in our
/// L2; a hint, and a NOP on processors without it (its encoding is in the
/// reserved-NOP space).
///
/// # Safety
/// The range is mapped (the hint does not fault, but stays within the cell).
#[cfg(target_arch = "x86_64")]
unsafe fn demote(p: *const u8, len: usize) {
    let mut a = p as usize & !63;
    while a < p as usize + len {
        // SAFETY: CLDEMOTE reads nothing and writes nothing; a hint.
        unsafe { std::arch::asm!("cldemote [{0}]", in(reg) a, options(nostack, preserves_flags)) };
        a += 64;
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn demote(_p: *const u8, _len: usize) {}

/// Ask for every line of [p, p+len) at once (a body's message, about to be
/// read: its lines' misses then overlap instead of following one another).
#[cfg(target_arch = "x86_64")]
fn fetch_ahead(p: *const u8, len: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let mut off = 0;
    while off < len {
        // SAFETY: a prefetch is a hint; it neither faults nor writes.
        unsafe { _mm_prefetch(p.wrapping_add(off) as *const i8, _MM_HINT_T0) };
        off += 64;
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn fetch_ahead(_p: *const u8, _len: usize) {}

impl Drop for Region {
    fn drop(&mut self) {
        // (The mapping goes with the last holder of `map`.)
        if self.owned {
            // Peers that still map it see the endpoint closed (their
            // pushes fail with ECONNRESET) even though our process lives on.
            self.header().ready.store(CLOSED, Ordering::Release);
            if let Some(st) = &self.file {
                self.dir.unlink_if_same(&self.name, st);
            }
            if let Some((name, st)) = &self.bell_file {
                self.dir.unlink_if_same(name, st);
            }
        }
    }
}
