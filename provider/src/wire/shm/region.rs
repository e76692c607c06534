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
//! Cells    CELLS x { seq: u32, len: u32, data[CELL_DATA] }, 128-byte aligned
//! ```
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
//! Files: the queue itself is a memfd of its owner, sealed against
//! shrinking and growing once sized, so no process can cut it short under
//! a mapper (a SIGBUS in the peer). Peers find it through a locator, the
//! file `q-<ip>-<port>` in this user's directory (`shm::dir`,
//! `/dev/shm/oxmr-u<euid>`), which names the owner's pid, start time and
//! the memfd's fd number; they open `/proc/<pid>/fd/<fd>` (the kernel
//! lets a process of the same uid, as CMA does), check the seals, and take
//! the owner from the kernel (the process whose fd table held the queue),
//! not from anything written in shared memory. The port belongs to the
//! endpoint's TCP listener, so two live endpoints of one network namespace
//! never share a name. A locator is written under a temporary name and
//! published by a rename that never replaces, so a file at a queue name is
//! a whole locator or not one at all. One whose owner is gone is stale and
//! is replaced (its memfd went with its process). Anything else at the
//! name (a file that is no locator, a FIFO, a queue of a live process in
//! another network namespace) is left alone, and the queue takes the next
//! of `NAMES` names (`q-<ip>-<port>~1`, ...), which peers try in the same
//! order: a taken name never fails an endpoint.

use std::io;
use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use super::dir::{Dir, Refused};
use super::jobs::{JobSlot, JobTable, JOBS};
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// Cells in an endpoint's queue.
pub(crate) const CELLS: usize = 256;
/// Bytes of one cell's payload (message header included).
pub(crate) const CELL_DATA: usize = 8192 - 8;

/// Message bytes in a cell's first cache line (after `seq` and `len`).
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
// without checking it.)
const VERSION: u32 = 15;

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

#[repr(C)]
struct Cell {
    /// `pos + 1` (mod 2^32) once the message at `pos` is published.
    seq: AtomicU32,
    len: u32,
    data: [u8; CELL_DATA],
}

const HDR: usize = size_of::<Header>();
const JOBS_AT: usize = HDR.next_multiple_of(128);
// 128-byte alignment: a cell's first line (sequence, message header)
// and its second form one pair for the adjacent-line prefetcher.
const CELLS_AT: usize = (JOBS_AT + JOBS * size_of::<JobSlot>()).next_multiple_of(128);
/// Total bytes of a region.
pub(crate) const REGION_SIZE: usize = CELLS_AT + CELLS * size_of::<Cell>();

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

/// How many names an endpoint's queue may take (`queue_names`).
const NAMES: usize = 4;

/// The names the queue of the endpoint `addr` may have, in the order its
/// owner takes them and its peers look: `q-<ip>-<port>`, then `~1`, `~2`,
/// `~3` after it (when something else holds the name before).
pub(crate) fn queue_names(addr: &SocketAddr) -> impl Iterator<Item = String> {
    let base = format!("q-{}-{}", addr.ip().to_string().replace(':', "_"), addr.port());
    (0..NAMES).map(move |i| if i == 0 { base.clone() } else { format!("{base}~{i}") })
}

/// The path of an endpoint's queue (its first name), for log lines.
pub fn path_for(addr: &SocketAddr) -> String {
    let name = queue_names(addr).next().unwrap_or_default();
    match Dir::user() {
        Ok(d) => d.file(&name),
        // SAFETY: geteuid has no preconditions and cannot fail.
        Err(_) => format!("/dev/shm/{}/{name}", super::dir::user_dir_name(unsafe { libc::geteuid() })),
    }
}

/// The addresses of the endpoints on this host listening on `port` (from
/// the names of their queues; live or not), for error messages.
pub fn endpoints_on_port(port: u16) -> Vec<String> {
    let Ok(dir) = Dir::user() else { return Vec::new() };
    let tail = format!("-{port}");
    let mut found: Vec<String> = dir
        .names()
        .into_iter()
        .filter_map(|name| {
            let name = name.split_once('~').map_or(name.as_str(), |(n, _)| n);
            let ip = name.strip_prefix("q-")?.strip_suffix(&tail)?.replace('_', ":");
            let ip: std::net::IpAddr = ip.parse().ok()?;
            Some(SocketAddr::new(ip, port).to_string())
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

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
// SAFETY: as above.
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

fn cvt(r: i32) -> io::Result<i32> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Whether a process is alive: it exists and is not a zombie (a killed
/// process that its parent has not reaped yet answers kill(0) but will
/// never read its queue again).
pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let exists = pid != 0
        && (unsafe { libc::kill(pid as i32, 0) } == 0
            || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM));
    if !exists {
        return false;
    }
    // /proc/<pid>/stat: "pid (comm) S ..."; comm may hold spaces or ')'.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(st) => {
            !matches!(st.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()), Some('Z' | 'X'))
        }
        Err(_) => true,
    }
}

/// A process's start time (/proc/<pid>/stat field 22), None if it cannot
/// be read (no such process).
pub fn start_time(pid: u32) -> Option<u64> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid ...": fields from the state on, after the last ')'
    // (comm may hold spaces or ')'); starttime is field 22, the 20th there.
    st.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process that was `pid` when it started at `start` is
/// alive: `pid_alive`, and (`start` known, not 0) the process now at that
/// pid started then, not a later process that reuses the pid.
pub fn owner_alive(pid: u32, start: u64) -> bool {
    pid_alive(pid) && (start == 0 || start_time(pid).is_none_or(|s| s == start))
}

fn map(fd: i32) -> io::Result<*mut u8> {
    // SAFETY: maps REGION_SIZE bytes of a file that we sized, or checked
    // through this fd, to hold at least that many.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), REGION_SIZE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p as *mut u8)
}

/// This process's network namespace (`Header::netns`; 0 if unknown).
fn netns() -> u64 {
    static NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NS.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino())
    })
}

/// A queue's locator: the file at the queue's name. The queue itself is
/// a memfd of its owner, sealed so that nothing can shrink it under its
/// mappers, which peers open as /proc/<owner>/fd/<fd>: the kernel then
/// says which process holds it (the owner a link vouches for is the one
/// whose fd table the queue was taken from, not what its header says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Locator {
    version: u32,
    owner: u32,
    /// The queue's fd in the owner.
    fd: u32,
    epoch: u32,
    /// The owner's start time (`start_time`).
    start: u64,
    /// The endpoint's address (`addr_bytes`).
    addr: [u8; 32],
    /// The owner's network namespace (`netns`).
    netns: u64,
}

const LOC_MAGIC: u64 = 0x6f78_6d72_6c6f_6331; // "oxmrloc1"
/// Bytes of a locator file.
const LOC_SIZE: usize = 72;

impl Locator {
    fn encode(&self) -> [u8; LOC_SIZE] {
        let mut b = [0u8; LOC_SIZE];
        b[0..8].copy_from_slice(&LOC_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&self.owner.to_le_bytes());
        b[16..20].copy_from_slice(&self.fd.to_le_bytes());
        b[20..24].copy_from_slice(&self.epoch.to_le_bytes());
        b[24..32].copy_from_slice(&self.start.to_le_bytes());
        b[32..64].copy_from_slice(&self.addr);
        b[64..72].copy_from_slice(&self.netns.to_le_bytes());
        b
    }

    /// None: not a locator (no magic).
    fn decode(b: &[u8; LOC_SIZE]) -> Option<Locator> {
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
        (u64_at(0) == LOC_MAGIC).then(|| Locator {
            version: u32_at(8),
            owner: u32_at(12),
            fd: u32_at(16),
            epoch: u32_at(20),
            start: u64_at(24),
            addr: b[32..64].try_into().unwrap_or_default(),
            netns: u64_at(64),
        })
    }
}

/// An address as a locator and a header record it (`info::addr::encode`,
/// zero-padded).
fn addr_bytes(addr: &SocketAddr) -> [u8; 32] {
    let mut a = [0u8; 32];
    let e = crate::info::addr::encode(addr);
    a[..e.len()].copy_from_slice(&e);
    a
}

/// What a queue's proof binds it to (`proof`).
const PROOF_LABEL: &[u8] = b"oxmr shm queue";

/// The job key's proof for the queue `loc` locates: the tag over
/// everything that tells this queue from any other (the owner's pid and
/// start time, the memfd's fd in it, the epoch, the address, the network
/// namespace, the wire version). A peer checks it against the locator it
/// opened the queue through, whose pid and fd the kernel confirmed
/// (`open_queue`): a tag copied into a queue of another process, or of
/// another endpoint, is a tag of other values, and only a holder of the
/// key makes one for its own (docs/security.md, "The shared-memory
/// wire").
fn proof(key: &crate::auth::JobKey, loc: &Locator) -> [u8; crate::auth::TAG_LEN] {
    key.tag(PROOF_LABEL, &proof_parts(loc).each_ref().map(|p| p.as_slice()))
}

fn proof_parts(loc: &Locator) -> [Vec<u8>; 7] {
    [
        loc.owner.to_le_bytes().to_vec(),
        loc.start.to_le_bytes().to_vec(),
        loc.fd.to_le_bytes().to_vec(),
        loc.epoch.to_le_bytes().to_vec(),
        loc.addr.to_vec(),
        loc.netns.to_le_bytes().to_vec(),
        loc.version.to_le_bytes().to_vec(),
    ]
}

/// A queue refused for its job key: its proof does not fit the key this
/// endpoint holds (or holds none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyMismatch {
    /// We hold a key; the queue carries no proof (its owner has none).
    NoProof,
    /// We hold a key; the queue's proof is not of it (another key, or a
    /// proof made for another queue).
    NotOurs,
    /// We hold none; the queue's owner does.
    Keyed,
}

impl std::fmt::Display for KeyMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeyMismatch::NoProof => "its queue carries no proof of a job key",
            KeyMismatch::NotOurs => "its queue's proof is not of this job's key",
            KeyMismatch::Keyed => "its queue proves a job key, and this endpoint has none",
        })
    }
}

impl std::error::Error for KeyMismatch {}

impl KeyMismatch {
    /// The mismatch an error reports, if it reports one.
    pub fn of(e: &io::Error) -> Option<KeyMismatch> {
        e.get_ref().and_then(|x| x.downcast_ref::<KeyMismatch>()).copied()
    }

    /// Whether the queue of `h`, opened through `loc`, proves `key` (or,
    /// without one, proves none).
    fn check(h: &Header, loc: &Locator, key: Option<&crate::auth::JobKey>) -> Result<(), KeyMismatch> {
        match (key, h.keyed) {
            (None, 0) => Ok(()),
            (None, _) => Err(KeyMismatch::Keyed),
            (Some(_), 0) => Err(KeyMismatch::NoProof),
            (Some(k), _) if k.verify(PROOF_LABEL, &proof_parts(loc).each_ref().map(|p| p.as_slice()), &h.proof) => {
                Ok(())
            }
            (Some(_), _) => Err(KeyMismatch::NotOurs),
        }
    }
}

/// The owner of a queue is gone (the link reports it as dead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerGone {
    pub owner: u32,
}

impl std::fmt::Display for OwnerGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "its process {} is gone", self.owner)
    }
}

impl std::error::Error for OwnerGone {}

impl OwnerGone {
    /// The pid an error says is gone, if it says so.
    pub fn of(e: &io::Error) -> Option<u32> {
        e.get_ref().and_then(|x| x.downcast_ref::<OwnerGone>()).map(|g| g.owner)
    }
}

/// The locator `name` in `dir`, and the file's status: ENOENT when
/// nothing has the name; a `Refused` error for anything that is not a
/// locator, a `VersionMismatch` for one of another wire version. Only a
/// regular file of ours is opened, and it is read, never mapped.
fn read_locator(dir: &Dir, name: &str) -> io::Result<(Locator, libc::stat)> {
    let (fd, st) = dir.open_checked(name, LOC_SIZE as u64, false)?;
    let mut b = [0u8; LOC_SIZE];
    // SAFETY: reading into our buffer from our fd.
    let n = unsafe { libc::pread(fd.as_raw_fd(), b.as_mut_ptr() as *mut libc::c_void, LOC_SIZE, 0) };
    if n != LOC_SIZE as isize {
        return Err(Refused::error(dir.file(name), "it cannot be read whole"));
    }
    let loc = Locator::decode(&b).ok_or_else(|| Refused::error(dir.file(name), "not an oxmr queue's locator"))?;
    if loc.version != VERSION {
        return Err(io::Error::new(io::ErrorKind::InvalidData, VersionMismatch { theirs: loc.version, ours: VERSION }));
    }
    Ok((loc, st))
}

/// What holds a queue name.
enum Holder {
    /// A queue of this version whose owner lives (a process in another
    /// network namespace at the same address: ours cannot be).
    Live(u32),
    /// A queue of this process (an earlier one at this address), or one
    /// whose owner is gone (`stale`): the locator's status, to remove it
    /// only if it is still that file.
    Replaceable { owner: u32, epoch: u32, stale: bool, st: libc::stat },
    /// Anything else: what it is, in words.
    Other(String),
}

/// What holds the queue name `name` in `dir` (ENOENT: nothing).
fn holder(dir: &Dir, name: &str) -> io::Result<Holder> {
    let (loc, st) = match read_locator(dir, name) {
        Ok(x) => x,
        Err(e) => {
            if let Some(r) = Refused::of(&e) {
                return Ok(Holder::Other(r.what.clone()));
            }
            // (One of another version is not ours to judge.)
            if let Some(v) = e.get_ref().and_then(|x| x.downcast_ref::<VersionMismatch>()) {
                return Ok(Holder::Other(format!("a queue of shm wire version {}", v.theirs)));
            }
            return Err(e);
        }
    };
    let (owner, epoch) = (loc.owner, loc.epoch);
    if owner == std::process::id() {
        return Ok(Holder::Replaceable { owner, epoch, stale: false, st });
    }
    if owner_alive(owner, loc.start) {
        return Ok(Holder::Live(owner));
    }
    Ok(Holder::Replaceable { owner, epoch, stale: true, st })
}

/// The queue a locator names, opened through the owner's /proc entry
/// (one fd for the whole check: the process it names cannot be swapped
/// for a later one with its pid between the check and the open); `file`
/// names the locator in errors. OwnerGone when its process is gone (or is
/// another one now), EPROTO when it has closed the queue.
fn open_queue(loc: &Locator, uid: u32, file: &str) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let gone = || io::Error::other(OwnerGone { owner: loc.owner });
    let at = |what: String| Refused::error(file.to_string(), what);
    let dir = std::ffi::CString::new(format!("/proc/{}", loc.owner)).map_err(|_| gone())?;
    // SAFETY: a valid C string; the fd is owned just below.
    let proc = unsafe { libc::open(dir.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC) };
    if proc < 0 {
        return Err(gone());
    }
    // SAFETY: the fd was just opened and is owned by nothing else.
    let proc = unsafe { std::os::fd::OwnedFd::from_raw_fd(proc) };
    // The process behind this fd: alive, not a zombie, and started when
    // the locator says.
    let mut stat = String::new();
    // SAFETY: our directory fd and a valid C string; the fd is owned below.
    let sfd = unsafe { libc::openat(proc.as_raw_fd(), c"stat".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if sfd < 0 {
        return Err(gone());
    }
    // SAFETY: the fd was just opened and is owned by nothing else.
    let mut sf = unsafe { std::fs::File::from_raw_fd(sfd) };
    std::io::Read::read_to_string(&mut sf, &mut stat).map_err(|_| gone())?;
    let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or_default();
    let mut fields = rest.split_whitespace();
    let state = fields.next().unwrap_or("X");
    let start: u64 = fields.nth(18).and_then(|s| s.parse().ok()).unwrap_or(0);
    if matches!(state, "Z" | "X") || (loc.start != 0 && start != loc.start) {
        return Err(gone());
    }
    let link = std::ffi::CString::new(format!("fd/{}", loc.fd)).map_err(|_| gone())?;
    // What the fd is, before anything opens it (a FIFO or a device of the
    // owner's is never opened).
    // SAFETY: an all-zero `struct stat` is a valid value to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: our directory fd, a valid C string, a stat to fill.
    if unsafe { libc::fstatat(proc.as_raw_fd(), link.as_ptr(), &mut st, 0) } < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            // (The owner closed the queue's fd: its endpoint closed.)
            Some(libc::ENOENT) => io::Error::from_raw_os_error(libc::EPROTO),
            Some(libc::EACCES | libc::EPERM) => at(format!(
                "process {} does not let this process read its fds (it must be of this uid and dumpable, as CMA needs)",
                loc.owner
            )),
            _ => e,
        });
    }
    let what = |st: &libc::stat| {
        super::dir::what_is_wrong(st, uid, REGION_SIZE as u64)
            .map(|w| at(format!("the queue it names (fd {} of process {}) is wrong: {w}", loc.fd, loc.owner)))
    };
    if let Some(e) = what(&st) {
        return Err(e);
    }
    // SAFETY: our directory fd and a valid C string; the fd is owned below.
    let fd =
        unsafe { libc::openat(proc.as_raw_fd(), link.as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd was just opened and is owned by nothing else.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    if let Some(e) = what(&super::dir::fstat(fd.as_raw_fd())?) {
        return Err(e);
    }
    // Sealed: no one (the owner included) can shrink it while we map it.
    // SAFETY: fcntl on our fd.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    let needed = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
    if seals < 0 || seals & needed != needed {
        return Err(at(format!(
            "the queue it names (fd {} of process {}) is not a memfd sealed against shrinking",
            loc.fd, loc.owner
        )));
    }
    Ok(fd)
}

/// Remove what processes that died without closing their endpoints left
/// in `dir` (SIGKILL, crash): queues whose owner is gone, and queues
/// being built by a process that is gone. Runs once per process, before
/// its first queue there is made. Nothing but such files is removed, and
/// nothing but a regular file of ours is ever opened.
pub fn reclaim_stale(dir: &Dir) {
    // Once per process: a forked child (which inherits the "done" mark)
    // runs it again, keyed on the pid.
    let me = std::process::id();
    if dir.swept_by.swap(me, Ordering::AcqRel) == me {
        return;
    }
    for name in dir.names() {
        if let Some(rest) = name.strip_prefix("tmp-") {
            // tmp-<pid>-<random>: a queue being built.
            let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
            let regular = dir.lstat(&name).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG);
            if pid.is_some_and(|p| !pid_alive(p)) && regular {
                let _ = dir.unlink(&name);
            }
            continue;
        }
        if let Some(rest) = name.strip_prefix("bell-") {
            // bell-<pid>-<epoch>: a doorbell, whose owner unlinks it at
            // close (its pid reused since: its queue's sweep below).
            let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
            let socket = dir.lstat(&name).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFSOCK);
            if pid.is_some_and(|p| !pid_alive(p)) && socket {
                let _ = dir.unlink(&name);
            }
            continue;
        }
        if !name.starts_with("q-") {
            continue;
        }
        if let Ok(Holder::Replaceable { owner, epoch, stale: true, st }) = holder(dir, &name) {
            if dir.unlink_if_same(&name, &st) {
                tracing::info!("removed {}, left by process {owner} which is gone", dir.file(&name));
                let bell = bell_name(owner, epoch);
                if dir.lstat(&bell).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFSOCK) {
                    let _ = dir.unlink(&bell);
                }
            }
        }
    }
}

impl Region {
    /// Create the queue of the endpoint `addr` in this user's directory,
    /// proving `key` where the endpoint holds one.
    pub fn create(addr: &SocketAddr, key: Option<&crate::auth::JobKey>) -> io::Result<Region> {
        let dir = Dir::user().map_err(|why| io::Error::other(format!("the per-user directory {why}")))?;
        Region::create_in(&dir, addr, key)
    }

    /// Open the queue of the peer `addr` in this user's directory; ENOENT
    /// when no endpoint has this name here; a `KeyMismatch` when its proof
    /// does not fit `key`.
    pub fn open(addr: &SocketAddr, key: Option<&crate::auth::JobKey>) -> io::Result<Region> {
        let dir = Dir::user().map_err(|why| io::Error::other(format!("the per-user directory {why}")))?;
        Region::open_in(&dir, addr, key)
    }

    /// Create the queue of the endpoint `addr` in `dir`, under the first of
    /// its names (`queue_names`) that is free or holds a stale queue; with
    /// `key`, its header carries the key's proof (`proof`).
    pub(crate) fn create_in(
        dir: &Arc<Dir>,
        addr: &SocketAddr,
        key: Option<&crate::auth::JobKey>,
    ) -> io::Result<Region> {
        use std::os::fd::FromRawFd;
        reclaim_stale(dir);
        let me = std::process::id();
        // SAFETY: a valid C string; the fd is owned just below.
        let fd =
            cvt(unsafe { libc::memfd_create(c"oxmr-queue".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) })?;
        // SAFETY: the fd was just made and is owned by nothing else.
        let memfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // (Mode 0600 as every file of the wire: a memfd is made 0777.)
        // SAFETY: our new fd, throughout.
        cvt(unsafe { libc::fchmod(fd, 0o600) })?;
        // SAFETY: as above.
        cvt(unsafe { libc::ftruncate(fd, REGION_SIZE as libc::off_t) })?;
        // SAFETY: as above.
        cvt(unsafe {
            libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL)
        })?;
        let base = map(fd)?;
        let start = start_time(me).unwrap_or(0);
        let mut r = Region {
            base,
            map: Mapping(base).into(),
            dir: dir.clone(),
            name: String::new(),
            file: None,
            _memfd: Some(memfd),
            owner: me,
            owner_start: start,
            owned: true,
            head: 0,
            head_seen: 0.into(),
            pid: me,
            stuck: None,
            bell: None,
            bell_file: None,
            ringer: Default::default(),
        };
        let epoch = crate::sys::random_u32().max(1);
        let loc = Locator {
            version: VERSION,
            owner: me,
            fd: fd as u32,
            epoch,
            start,
            addr: addr_bytes(addr),
            netns: netns(),
        };
        // SAFETY: a fresh zeroed mapping of our own memfd, which no one
        // else can find yet (no locator names it); initialised before
        // `ready`.
        unsafe {
            let h = &mut *(base as *mut Header);
            h.magic = MAGIC;
            h.version = VERSION;
            h.owner = me;
            h.owner_start = start;
            h.cells = CELLS as u32;
            h.cell_size = size_of::<Cell>() as u32;
            h.epoch = epoch;
            h.addr = addr_bytes(addr);
            h.netns = netns();
            if let Some(k) = key {
                h.keyed = 1;
                h.proof = proof(k, &loc);
            }
        }
        r.bind_bell();
        r.header().ready.store(READY, Ordering::Release);
        // The locator, written under a name no peer looks for, then
        // published whole.
        r.name = format!("tmp-{me}-{epoch:08x}");
        let lf = dir.create(&r.name)?;
        r.file = super::dir::fstat(lf.as_raw_fd()).ok();
        let b = loc.encode();
        // SAFETY: writing our buffer to our new fd.
        let n = unsafe { libc::pwrite(lf.as_raw_fd(), b.as_ptr() as *const libc::c_void, LOC_SIZE, 0) };
        if n != LOC_SIZE as isize {
            return Err(io::Error::last_os_error());
        }
        drop(lf);
        let mut taken = Vec::new();
        for (i, name) in queue_names(addr).enumerate() {
            for _ in 0..2 {
                match dir.rename_new(&r.name, &name) {
                    Ok(()) => {
                        r.name = name;
                        if i > 0 {
                            tracing::warn!(
                                "the queue of {addr} is {}, where peers find it: the names before it are taken ({})",
                                r.dir.file(&r.name),
                                taken.join("; ")
                            );
                        }
                        return Ok(r);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                    Err(e) => return Err(e),
                }
                match holder(dir, &name) {
                    Ok(Holder::Replaceable { owner, stale, st, .. }) => {
                        let why = if stale { "stale" } else { "this process's own" };
                        tracing::info!("replacing {} ({why} queue of process {owner})", dir.file(&name));
                        dir.unlink_if_same(&name, &st);
                    }
                    Ok(Holder::Live(owner)) => {
                        taken.push(format!("the live queue of process {owner} (another network namespace at {addr}?)"));
                        break;
                    }
                    Ok(Holder::Other(what)) => {
                        taken.push(format!("{}: {what}", dir.file(&name)));
                        break;
                    }
                    // (Gone since the rename: try again.)
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                    Err(e) => {
                        taken.push(format!("{}: {e}", dir.file(&name)));
                        break;
                    }
                }
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("every name for the queue of {addr} is taken: {}", taken.join("; ")),
        ))
    }

    /// Open the queue of the peer `addr` in `dir`: the first of its names
    /// holding a queue whose owner lives (one of our network namespace
    /// first), else the first holding a closed queue; else the first
    /// whose owner is gone (OwnerGone), else what was wrong with the first
    /// name that held something else, else ENOENT. With `key`, only a
    /// queue that proves it is opened; without, only one that proves none.
    pub(crate) fn open_in(dir: &Arc<Dir>, addr: &SocketAddr, key: Option<&crate::auth::JobKey>) -> io::Result<Region> {
        let (mut live, mut found, mut gone, mut err) = (None, None, None, None);
        for name in queue_names(addr) {
            match Region::open_one(dir, &name, addr, key) {
                Ok((r, ns)) if r.reachable() && ns == netns() => return Ok(r),
                Ok((r, _)) if r.reachable() => {
                    live.get_or_insert(r);
                }
                Ok((r, _)) => {
                    found.get_or_insert(r);
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) if OwnerGone::of(&e).is_some() => {
                    gone.get_or_insert(e);
                }
                Err(e) => {
                    err.get_or_insert(e);
                }
            }
        }
        live.or(found).ok_or_else(|| gone.or(err).unwrap_or_else(|| io::Error::from_raw_os_error(libc::ENOENT)))
    }

    /// Open the queue whose locator is `name` in `dir` as the queue of
    /// `addr`, if it proves `key` (or none without one); and its owner's
    /// network namespace.
    fn open_one(
        dir: &Arc<Dir>,
        name: &str,
        addr: &SocketAddr,
        key: Option<&crate::auth::JobKey>,
    ) -> io::Result<(Region, u64)> {
        let (loc, _) = read_locator(dir, name)?;
        if loc.addr != addr_bytes(addr) {
            let theirs = crate::info::addr::parse(&loc.addr).map_or("no address".to_string(), |x| x.to_string());
            return Err(Refused::error(dir.file(name), format!("it is the queue of {theirs}, not of {addr}")));
        }
        let fd = open_queue(&loc, dir.uid(), &dir.file(name))?;
        let base = map(fd.as_raw_fd())?;
        drop(fd);
        let r = Region {
            base,
            map: Mapping(base).into(),
            dir: dir.clone(),
            name: name.to_string(),
            file: None,
            _memfd: None,
            owner: loc.owner,
            owner_start: loc.start,
            owned: false,
            head: 0,
            head_seen: 0.into(),
            pid: std::process::id(),
            stuck: None,
            bell: None,
            bell_file: None,
            ringer: Default::default(),
        };
        let h = r.header();
        let wrong = |what: String| Err(Refused::error(dir.file(name), format!("the queue it names {what}")));
        if h.magic != MAGIC {
            return wrong("has no oxmr magic in its header".into());
        }
        if h.version != VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                VersionMismatch { theirs: h.version, ours: VERSION },
            ));
        }
        if (h.cells, h.cell_size) != (CELLS as u32, size_of::<Cell>() as u32) {
            return wrong(format!(
                "says {} cells of {} bytes, not {CELLS} of {}",
                h.cells,
                h.cell_size,
                size_of::<Cell>()
            ));
        }
        if h.addr != loc.addr || h.owner != loc.owner || h.epoch != loc.epoch {
            return wrong(format!(
                "is not the one of process {} (its header names process {}, epoch {:08x})",
                loc.owner, h.owner, h.epoch
            ));
        }
        // (Checked against the locator, whose pid and fd the kernel
        // confirmed, not against the header, which any process of the user
        // may write.)
        KeyMismatch::check(h, &loc, key).map_err(|m| io::Error::new(io::ErrorKind::PermissionDenied, m))?;
        if h.ready.load(Ordering::Acquire) != READY {
            return Err(io::Error::from_raw_os_error(libc::EPROTO));
        }
        Ok((r, loc.netns))
    }

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

    /// Rewrite our queue's locator file in place (tests: a locator a dead
    /// or another process left, or a lying one).
    #[cfg(test)]
    fn rewrite_locator_for_test(&self, f: impl FnOnce(&mut Locator)) {
        let (mut loc, _) = read_locator(&self.dir, &self.name).expect("our own locator");
        f(&mut loc);
        std::fs::write(self.dir.path().join(&self.name), loc.encode()).expect("our own locator");
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

    fn cell(&self, i: usize) -> *mut Cell {
        // SAFETY: i < CELLS, inside the mapping.
        unsafe { self.base.add(CELLS_AT + (i % CELLS) * size_of::<Cell>()) as *mut Cell }
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
                    let cell = self.cell(pos as usize);
                    // SAFETY: we own cell `pos` until we publish it: the
                    // consumer freed it (head > pos - CELLS, read with
                    // Acquire) and the CAS gave `pos` to us alone.
                    unsafe {
                        // The bytes past the cell's first cache line first,
                        // then the first line in one go (message start,
                        // length, sequence): the consumer polls that line,
                        // and a second visit to it would mean taking it
                        // back from the consumer once more.
                        let dst = (*cell).data.as_mut_ptr();
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
                        (*cell).len = len as u32;
                        (*cell).seq.store((pos + 1) as u32, Ordering::Release);
                        demote(cell as *const u8, 8 + len);
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
        unsafe { (*self.cell(pos as usize)).seq.load(Ordering::Acquire) == (pos + 1) as u32 }
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
        let cell = self.cell(pos as usize);
        let handled;
        // SAFETY: inside the mapping; the producer published it (`ready`).
        unsafe {
            let len = ((*cell).len as usize).min(CELL_DATA);
            let next = pos + 1;
            let more = (*self.cell(next as usize)).seq.load(Ordering::Relaxed) == (next + 1) as u32;
            // (Consumed even if handling it panics: a message that panics
            // its handler must not be handled again and again.)
            handled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&(&(*cell).data)[..len], more)));
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::wire::shm::dir::tests::{mkfifo, Scratch};
    use std::os::unix::fs::PermissionsExt;

    /// A process that is gone: it exited and was reaped.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        dead
    }

    fn refusal(e: io::Error) -> String {
        Refused::of(&e).unwrap_or_else(|| panic!("not a refusal: {e}")).to_string()
    }

    #[test]
    fn a_peer_queue_whose_locator_is_not_a_private_file_of_ours_is_refused() {
        let s = Scratch::new("refused");
        let d = s.dir();
        let a: SocketAddr = "127.0.0.1:4001".parse().unwrap();
        let name = queue_names(&a).next().unwrap();
        let at = d.path().join(&name);
        // (Each check alone: a real queue of ours, then one thing wrong.)
        let own = Region::create_in(&d, &a, None).unwrap();
        assert_eq!(own.file_name(), name);
        Region::open_in(&d, &a, None).expect("our own queue, as a peer opens it");
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o666)).unwrap();
        let why = refusal(Region::open_in(&d, &a, None).err().expect("a world-writable locator"));
        assert!(why.contains(&*at.to_string_lossy()) && why.contains("0666"), "{why}");
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o600)).unwrap();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::lchown(&at, Some(65534), Some(65534)).unwrap();
            let why = refusal(Region::open_in(&d, &a, None).err().expect("another user's locator"));
            assert!(why.contains("uid 65534"), "{why}");
            std::os::unix::fs::lchown(&at, Some(0), Some(0)).unwrap();
        }
        std::fs::rename(&at, d.path().join("real")).unwrap();
        std::os::unix::fs::symlink(d.path().join("real"), &at).unwrap();
        let why = refusal(Region::open_in(&d, &a, None).err().expect("a link to a real locator"));
        assert!(why.contains("symbolic link"), "{why}");
        std::fs::remove_file(&at).unwrap();
        mkfifo(&at);
        let why = refusal(Region::open_in(&d, &a, None).err().expect("a FIFO"));
        assert!(why.contains("FIFO"), "{why}");
        std::fs::remove_file(&at).unwrap();
        let real = std::fs::read(d.path().join("real")).unwrap();
        std::fs::write(&at, &real[..LOC_SIZE - 1]).unwrap();
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o600)).unwrap();
        let why = refusal(Region::open_in(&d, &a, None).err().expect("a short locator"));
        assert!(why.contains("fewer than"), "{why}");
        std::fs::write(&at, [0u8; LOC_SIZE]).unwrap();
        let why = refusal(Region::open_in(&d, &a, None).err().expect("a file of zeros"));
        assert!(why.contains("not an oxmr queue"), "{why}");
        // Another endpoint's locator put at this name.
        std::fs::remove_file(&at).unwrap();
        let b: SocketAddr = "127.0.0.1:4002".parse().unwrap();
        let other = Region::create_in(&d, &b, None).unwrap();
        std::fs::hard_link(d.path().join(other.file_name()), &at).unwrap();
        let why = refusal(Region::open_in(&d, &a, None).err().expect("the locator of another address"));
        assert!(why.contains("queue of 127.0.0.1:4002"), "{why}");
        drop(own);
    }

    #[test]
    fn a_locator_naming_anything_but_its_owners_sealed_queue_is_refused() {
        use std::os::fd::AsRawFd;
        let s = Scratch::new("named");
        let d = s.dir();
        let a: SocketAddr = "127.0.0.1:4011".parse().unwrap();
        let own = Region::create_in(&d, &a, None).unwrap();
        let (loc, _) = read_locator(&d, own.file_name()).unwrap();
        let with_fd = |fd: i32| {
            own.rewrite_locator_for_test(|l| l.fd = fd as u32);
            Region::open_in(&d, &a, None)
        };
        // A file of ours that is not sealed: it could be cut short.
        let plain = d.path().join("plain");
        std::fs::write(&plain, vec![0u8; REGION_SIZE]).unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o600)).unwrap();
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&plain).unwrap();
        let why = refusal(with_fd(f.as_raw_fd()).err().expect("an unsealed file"));
        assert!(why.contains("not a memfd sealed against shrinking"), "{why}");
        // A pipe is never opened.
        let (r, w) = std::io::pipe().unwrap();
        let why = refusal(with_fd(r.as_raw_fd()).err().expect("a pipe"));
        assert!(why.contains("FIFO"), "{why}");
        drop((r, w));
        // A memfd as made (mode 0777).
        // SAFETY: a valid C string.
        let m = unsafe { libc::memfd_create(c"oxmr-test".as_ptr(), libc::MFD_CLOEXEC) };
        // SAFETY: our new fd.
        unsafe { libc::ftruncate(m, REGION_SIZE as libc::off_t) };
        let why = refusal(with_fd(m).err().expect("an open memfd"));
        assert!(why.contains("0777"), "{why}");
        // SAFETY: our fd.
        unsafe { libc::close(m) };
        // Another queue of ours, sealed and whole, but another endpoint's.
        let b: SocketAddr = "127.0.0.1:4012".parse().unwrap();
        let other = Region::create_in(&d, &b, None).unwrap();
        let (theirs, _) = read_locator(&d, other.file_name()).unwrap();
        let why = refusal(with_fd(theirs.fd as i32).err().expect("another endpoint's queue"));
        assert!(why.contains("is not the one of process"), "{why}");
        // The queue's fd named under another live process (here pid 1):
        // never taken for that process's queue.
        own.rewrite_locator_for_test(|l| *l = Locator { owner: 1, start: 0, ..loc });
        assert!(Region::open_in(&d, &a, None).is_err(), "a queue lent to another process");
        own.rewrite_locator_for_test(|l| *l = loc);
        Region::open_in(&d, &a, None).expect("the locator as it was");
        // An fd the owner does not have open (closed: its endpoint
        // closed). (Above any fd limit: other tests' threads open fds.)
        let e = with_fd(1 << 30).err().expect("a closed fd");
        assert_eq!(e.raw_os_error(), Some(libc::EPROTO), "{e}");
    }

    #[test]
    fn a_queue_cannot_be_cut_short_or_grown_under_its_peers() {
        let s = Scratch::new("sealed");
        let d = s.dir();
        let a: SocketAddr = "127.0.0.1:4013".parse().unwrap();
        let mut own = Region::create_in(&d, &a, None).unwrap();
        let peer = Region::open_in(&d, &a, None).unwrap();
        peer.push(&[b"before"]).unwrap();
        // What a process of this user can reach: the queue through the
        // owner's /proc entry.
        let (loc, _) = read_locator(&d, own.file_name()).unwrap();
        let path = format!("/proc/{}/fd/{}", loc.owner, loc.fd);
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        for len in [0, 4096, REGION_SIZE as u64 - 1, REGION_SIZE as u64 + 4096] {
            let e = f.set_len(len).expect_err("a sealed queue resized");
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "set_len({len})");
        }
        let e = std::fs::OpenOptions::new().write(true).truncate(true).open(&path).expect_err("opened with O_TRUNC");
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        // (A cut queue would fault here, SIGBUS, instead.)
        peer.push(&[b"after"]).unwrap();
        assert!(own.pop(|m, _| assert_eq!(m, b"before")));
        assert!(own.pop(|m, _| assert_eq!(m, b"after")));
        // The locator is a file of its own: cutting it touches no mapping.
        std::fs::write(d.path().join(own.file_name()), b"").unwrap();
        peer.push(&[b"still"]).unwrap();
        assert!(own.pop(|m, _| assert_eq!(m, b"still")));
    }

    #[test]
    fn the_owner_a_link_vouches_for_is_the_process_holding_the_queue_not_its_header() {
        let s = Scratch::new("owner");
        let d = s.dir();
        let a: SocketAddr = "127.0.0.1:4014".parse().unwrap();
        let own = Region::create_in(&d, &a, None).unwrap();
        let peer = Region::open_in(&d, &a, None).unwrap();
        // Any process of the user can write the header (it maps the
        // queue); what the link says is what the kernel said.
        // SAFETY: our own mapping's header; only this test reads it.
        unsafe { (*(own.base as *mut Header)).owner = 1 };
        assert_eq!(peer.owner(), std::process::id());
        assert!(Region::open_in(&d, &a, None).is_err(), "a queue whose header names another owner than its holder");
    }

    fn key(b: &[u8]) -> crate::auth::JobKey {
        crate::auth::JobKey::new(b).unwrap()
    }

    fn mismatch(r: io::Result<Region>) -> KeyMismatch {
        match r {
            Ok(_) => panic!("opened"),
            Err(e) => KeyMismatch::of(&e).unwrap_or_else(|| panic!("refused, but not for its key: {e}")),
        }
    }

    #[test]
    fn a_keyed_queue_opens_under_its_key_alone_and_an_unkeyed_one_without_a_key_alone() {
        let s = Scratch::new("keyed");
        let d = s.dir();
        let (k, other) = (key(b"the job's key, 32 bytes of it..."), key(b"another job's key, as long......"));
        let a: SocketAddr = "127.0.0.1:4021".parse().unwrap();
        let keyed = Region::create_in(&d, &a, Some(&k)).unwrap();
        let peer = Region::open_in(&d, &a, Some(&k)).expect("the same key");
        assert_eq!(peer.owner(), std::process::id());
        assert_eq!(mismatch(Region::open_in(&d, &a, Some(&other))), KeyMismatch::NotOurs);
        assert_eq!(mismatch(Region::open_in(&d, &a, None)), KeyMismatch::Keyed);
        let b: SocketAddr = "127.0.0.1:4022".parse().unwrap();
        let plain = Region::create_in(&d, &b, None).unwrap();
        assert_eq!(mismatch(Region::open_in(&d, &b, Some(&k))), KeyMismatch::NoProof);
        Region::open_in(&d, &b, None).expect("no key on either side, as before keys");
        drop((keyed, plain));
    }

    #[test]
    fn a_proof_made_for_another_queue_or_process_does_not_verify() {
        let s = Scratch::new("copied");
        let d = s.dir();
        let k = key(b"the job's key, 32 bytes of it...");
        let (a, b): (SocketAddr, SocketAddr) = ("127.0.0.1:4023".parse().unwrap(), "127.0.0.1:4024".parse().unwrap());
        let first = Region::create_in(&d, &a, Some(&k)).unwrap();
        let second = Region::create_in(&d, &b, Some(&k)).unwrap();
        let set_proof = |r: &Region, p: [u8; crate::auth::TAG_LEN]| {
            // SAFETY: our own mapping's header; only this test reads it.
            unsafe { (*(r.base as *mut Header)).proof = p };
        };
        // Any process of the user can write a queue's header: a valid
        // proof copied from another queue there is a proof of that queue.
        let (loc, _) = read_locator(&d, second.file_name()).unwrap();
        set_proof(&second, first.header().proof);
        assert_eq!(mismatch(Region::open_in(&d, &b, Some(&k))), KeyMismatch::NotOurs, "another queue's proof");
        // A queue of another process (here pid 1) that looks like this one
        // in every other respect: the kernel says which process holds this
        // one, and the proof names another.
        set_proof(&second, proof(&k, &Locator { owner: 1, ..loc }));
        assert_eq!(mismatch(Region::open_in(&d, &b, Some(&k))), KeyMismatch::NotOurs, "a proof for pid 1");
        set_proof(&second, proof(&k, &Locator { epoch: loc.epoch ^ 1, ..loc }));
        assert_eq!(mismatch(Region::open_in(&d, &b, Some(&k))), KeyMismatch::NotOurs, "a proof for another epoch");
        set_proof(&second, proof(&k, &loc));
        Region::open_in(&d, &b, Some(&k)).expect("the proof of this queue, as its owner made it");
        drop(first);
    }

    #[test]
    fn a_taken_name_moves_the_queue_to_the_next_one_where_peers_find_it() {
        let s = Scratch::new("taken");
        let d = s.dir();
        let a: SocketAddr = "127.0.0.1:4003".parse().unwrap();
        let names: Vec<String> = queue_names(&a).collect();
        // A FIFO and a file that is no queue hold the first two names.
        mkfifo(&d.path().join(&names[0]));
        let bogus = d.path().join(&names[1]);
        std::fs::write(&bogus, vec![0x5au8; REGION_SIZE]).unwrap();
        std::fs::set_permissions(&bogus, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut own = Region::create_in(&d, &a, None).expect("a taken name is no failure");
        assert_eq!(own.file_name(), names[2]);
        let peer = Region::open_in(&d, &a, None).expect("the peer looks under the next names too");
        peer.push(&[b"found"]).unwrap();
        assert!(own.pop(|m, _| assert_eq!(m, b"found")));
        // Neither squatter was touched.
        let fifo = std::fs::symlink_metadata(d.path().join(&names[0])).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&fifo.file_type()));
        assert!(std::fs::read(&bogus).unwrap().iter().all(|&b| b == 0x5a));
        drop(own);
        // Every name taken: an error that lists them, nothing left behind.
        for n in &names[2..] {
            std::fs::create_dir(d.path().join(n)).unwrap();
        }
        let e = Region::create_in(&d, &a, None).err().expect("every name held by something else");
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        let e = e.to_string();
        assert!(e.contains("FIFO") && e.contains("not an oxmr queue") && e.contains(&names[3]), "{e}");
        assert!(!d.names().iter().any(|n| n.starts_with("tmp-")), "the queue built for it is removed");
    }

    #[test]
    fn a_stale_queue_is_replaced_and_stale_leftovers_removed_but_nothing_else() {
        let s = Scratch::new("stale");
        let d = s.dir();
        let a: SocketAddr = "127.0.0.1:4004".parse().unwrap();
        let gone = dead_pid();
        let old = Region::create_in(&d, &a, None).unwrap();
        old.rewrite_locator_for_test(|l| l.owner = gone);
        let old_epoch = old.epoch();
        old.abandon();
        let b: SocketAddr = "127.0.0.1:4005".parse().unwrap();
        let other = Region::create_in(&d, &b, None).unwrap();
        other.rewrite_locator_for_test(|l| l.owner = gone);
        other.abandon();
        std::fs::write(d.path().join(format!("tmp-{gone}-0")), b"").unwrap();
        mkfifo(&d.path().join("q-127.0.0.1-4006"));
        std::os::unix::fs::symlink("/dev/null", d.path().join("q-127.0.0.1-4007")).unwrap();
        // (A new sweep, as in a new process.)
        d.swept_by.store(0, Ordering::Relaxed);
        let new = Region::create_in(&d, &a, None).expect("the stale queue's name");
        assert_eq!(new.file_name(), queue_names(&a).next().unwrap());
        assert_ne!(new.epoch(), old_epoch);
        let mut left = d.names();
        left.sort();
        let bell = bell_name(std::process::id(), new.epoch());
        assert_eq!(
            left,
            [&bell, "q-127.0.0.1-4004", "q-127.0.0.1-4006", "q-127.0.0.1-4007"],
            "only stale files are swept"
        );
    }

    #[test]
    fn of_two_live_queues_for_one_address_a_peer_takes_its_own_namespaces() {
        let s = Scratch::new("netns");
        let d = s.dir();
        let a: SocketAddr = "127.0.0.1:4008".parse().unwrap();
        let names: Vec<String> = queue_names(&a).collect();
        // Ours at the second name, and before it a live endpoint at this
        // address in another network namespace (played by a queue of this
        // process whose locator names another namespace).
        let here = Region::create_in(&d, &a, None).unwrap();
        std::fs::rename(d.path().join(&names[0]), d.path().join(&names[1])).unwrap();
        let there = Region::create_in(&d, &a, None).unwrap();
        assert_eq!(there.file_name(), names[0]);
        there.rewrite_locator_for_test(|l| l.netns = netns() + 1);
        assert_eq!(Region::open_in(&d, &a, None).unwrap().epoch(), here.epoch(), "our namespace's first");
        drop(here);
        std::fs::remove_file(d.path().join(&names[1])).unwrap();
        assert_eq!(Region::open_in(&d, &a, None).unwrap().epoch(), there.epoch(), "the other namespace's, when alone");
    }

    #[test]
    fn a_reused_pid_is_not_the_owner() {
        let me = std::process::id();
        let start = start_time(me).expect("our own /proc/self/stat");
        assert!(owner_alive(me, start));
        assert!(owner_alive(me, 0), "start unknown: the pid decides");
        assert!(!owner_alive(me, start + 1), "another process that had our pid before us");
        // A locator that names another start time for its owner is one a
        // dead process left, even though a live process has that pid now.
        let s = Scratch::new("reused");
        let d = s.dir();
        let addr: SocketAddr = "127.0.0.1:4015".parse().unwrap();
        let own = Region::create_in(&d, &addr, None).unwrap();
        assert!(Region::open_in(&d, &addr, None).unwrap().reachable());
        own.rewrite_locator_for_test(|l| l.start = start + 1);
        let e = Region::open_in(&d, &addr, None).err().expect("a locator of a process that had our pid");
        assert_eq!(OwnerGone::of(&e), Some(me), "{e}");
        own.rewrite_locator_for_test(|l| l.start = start);
        assert!(Region::open_in(&d, &addr, None).unwrap().reachable());
    }

    #[test]
    fn the_doorbell_rings_only_while_the_owner_sleeps() {
        let addr: SocketAddr = "127.0.0.1:5".parse().unwrap();
        let mut own = Region::create(&addr, None).unwrap();
        let peer = Region::open(&addr, None).unwrap();
        let bell = own.bell.as_ref().expect("the owner binds its doorbell");
        let mut b = [0u8; 8];
        let rung = |bell: &UnixDatagram, b: &mut [u8]| bell.recv(b).is_ok();
        peer.push(&[b"awake"]).unwrap();
        assert!(!rung(bell, &mut b), "an awake owner is not rung");
        own.set_sleeping(true);
        peer.push(&[b"asleep"]).unwrap();
        let bell = own.bell.as_ref().unwrap();
        assert!(rung(bell, &mut b), "a sleeping owner is rung");
        own.set_sleeping(false);
        own.set_sleeping(false); // (a wake without a sleep stays at 0)
        assert_eq!(own.header().sleeping.load(Ordering::Relaxed), 0);
        peer.push(&[b"awake again"]).unwrap();
        assert!(!rung(own.bell.as_ref().unwrap(), &mut b), "woken: not rung any more");
        // Two sleepers: one waking leaves the other rung.
        own.set_sleeping(true);
        own.set_sleeping(true);
        own.set_sleeping(false);
        peer.push(&[b"x"]).unwrap();
        assert!(rung(own.bell.as_ref().unwrap(), &mut b), "the other thread still sleeps");
        own.set_sleeping(false);
        for _ in 0..4 {
            assert!(own.pop(|_, _| ()));
        }
    }

    #[test]
    fn the_doorbell_is_a_socket_in_the_directory_removed_at_close_and_swept_when_stale() {
        use std::os::unix::fs::FileTypeExt;
        let s = Scratch::new("bell");
        let d = s.dir();
        let a: SocketAddr = "127.0.0.1:4009".parse().unwrap();
        let own = Region::create_in(&d, &a, None).unwrap();
        let bell = d.path().join(bell_name(std::process::id(), own.epoch()));
        assert!(std::fs::symlink_metadata(&bell).unwrap().file_type().is_socket());
        // No abstract name any user could have taken first or send to
        // (other processes' may be there: none for this address).
        let unix = std::fs::read_to_string("/proc/net/unix").unwrap();
        let abstract_here = unix.lines().filter_map(|l| l.split_once(" @").map(|x| x.1)).find(|n| n.ends_with("-4009"));
        assert_eq!(abstract_here, None, "an abstract doorbell is bound");
        let peer = Region::open_in(&d, &a, None).unwrap();
        own.set_sleeping(true);
        peer.push(&[b"ring"]).unwrap();
        let mut b = [0u8; 8];
        assert!(own.bell.as_ref().unwrap().recv(&mut b).is_ok(), "rung through its path");
        own.set_sleeping(false);
        drop(own);
        assert!(!bell.exists(), "removed at close");
        // A doorbell (and a queue) a dead process left: swept; a live
        // process's doorbell: kept.
        let gone = dead_pid();
        let left = Region::create_in(&d, &a, None).unwrap();
        let left_bell = bell_name(std::process::id(), left.epoch());
        std::fs::rename(d.path().join(&left_bell), d.path().join(bell_name(gone, left.epoch()))).unwrap();
        left.rewrite_locator_for_test(|l| l.owner = gone);
        left.abandon();
        let orphan = UnixDatagram::bind(d.path().join(bell_name(gone, 7))).unwrap();
        let live = UnixDatagram::bind(d.path().join(bell_name(1, 7))).unwrap();
        d.swept_by.store(0, Ordering::Relaxed);
        let b: SocketAddr = "127.0.0.1:4010".parse().unwrap();
        let fresh = Region::create_in(&d, &b, None).unwrap();
        let mut names = d.names();
        names.sort();
        let mine = bell_name(std::process::id(), fresh.epoch());
        assert_eq!(names, [bell_name(1, 7), mine, "q-127.0.0.1-4010".to_string()]);
        drop((orphan, live));
    }

    #[test]
    fn queue_round_trip_and_full() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut own = Region::create(&addr, None).unwrap();
        let peer = Region::open(&addr, None).unwrap();
        assert_eq!(peer.owner(), std::process::id());
        for i in 0..CELLS {
            peer.push(&[&(i as u32).to_le_bytes(), b"xyz"]).unwrap();
        }
        assert_eq!(peer.push(&[b"full"]).unwrap_err().raw_os_error(), Some(libc::EAGAIN));
        for i in 0..CELLS {
            let mut got = Vec::new();
            assert!(own.pop(|b, _| got = b.to_vec()));
            assert_eq!(&got[..4], &(i as u32).to_le_bytes());
        }
        assert!(!own.pop(|_, _| ()));
        peer.push(&[b"again"]).unwrap();
        assert!(own.pop(|b, more| {
            assert_eq!(b, b"again");
            assert!(!more, "nothing after it");
        }));
        // Parts split anywhere around the first cache line come out whole.
        let msg: Vec<u8> = (0..300u32).map(|i| (i * 7 + 1) as u8).collect();
        for cut in [0, 1, 40, FIRST_LINE - 1, FIRST_LINE, FIRST_LINE + 1, 200, 300] {
            for cut2 in [cut, (cut + 17).min(300)] {
                peer.push(&[&msg[..cut], &msg[cut..cut2], &msg[cut2..]]).unwrap();
                assert!(own.pop(|b, _| assert_eq!(b, &msg[..], "parts cut at {cut}, {cut2}")));
            }
        }
        drop(peer);
        drop(own);
        assert!(Region::open(&addr, None).is_err(), "the owner unlinks its file");
    }

    #[test]
    fn a_cell_whose_producer_died_unpublished_is_skipped() {
        let addr: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let mut own = Region::create(&addr, None).unwrap();
        let peer = Region::open(&addr, None).unwrap();
        let pop = |own: &mut Region| {
            let mut got = None;
            own.pop(|b, _| got = Some(b.to_vec()));
            got
        };
        // A process that is gone: it exited and was reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        peer.push(&[b"before"]).unwrap();
        peer.claim_abandoned(dead);
        peer.push(&[b"after"]).unwrap();
        assert_eq!(pop(&mut own).as_deref(), Some(&b"before"[..]));
        assert_eq!(pop(&mut own), None, "the abandoned cell holds the queue");
        assert!(!own.unstick(), "not on first sight");
        assert!(!own.unstick(), "not before STUCK_AFTER");
        own.stuck = own.stuck.map(|(p, t)| (p, t - STUCK_AFTER));
        assert!(own.unstick(), "skipped once its producer is known dead");
        assert_eq!(pop(&mut own).as_deref(), Some(&b"after"[..]));
        // A producer that is alive (stopped, say) is waited for.
        peer.claim_abandoned(std::process::id());
        peer.push(&[b"later"]).unwrap();
        assert!(!own.unstick());
        own.stuck = own.stuck.map(|(p, t)| (p, t - STUCK_AFTER));
        assert!(!own.unstick(), "a live producer's cell is never skipped");
        assert_eq!(pop(&mut own), None);
    }

    #[test]
    fn a_record_of_an_earlier_lap_is_not_the_claimer() {
        let addr: SocketAddr = "127.0.0.1:3".parse().unwrap();
        let mut own = Region::create(&addr, None).unwrap();
        let peer = Region::open(&addr, None).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        // A dead producer used cell 0 on the first lap (and published).
        peer.push(&[b"lap 1"]).unwrap();
        peer.header().claimers[0].store(dead as u64, Ordering::Relaxed);
        assert!(own.pop(|_, _| ()));
        for _ in 1..CELLS {
            peer.push(&[b"x"]).unwrap();
            assert!(own.pop(|_, _| ()));
        }
        // Lap 2, cell 0: a live producer claimed it and was stopped before
        // recording itself; the record still names the dead one.
        peer.claim_unrecorded();
        assert!(!own.unstick());
        own.stuck = own.stuck.map(|(p, t)| (p, t - STUCK_AFTER));
        assert!(!own.unstick(), "skipped on the strength of an earlier lap's record");
    }
}
