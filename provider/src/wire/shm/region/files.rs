//! The queue's files.
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
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::super::dir::{Dir, Refused};
use super::process::{netns, owner_alive, pid_alive, start_time};
use super::*;

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
        Err(_) => format!("/dev/shm/{}/{name}", super::super::dir::user_dir_name(unsafe { libc::geteuid() })),
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

fn cvt(r: i32) -> io::Result<i32> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
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

/// A queue's locator: the file at the queue's name. The queue itself is
/// a memfd of its owner, sealed so that nothing can shrink it under its
/// mappers, which peers open as /proc/<owner>/fd/<fd>: the kernel then
/// says which process holds it (the owner a link vouches for is the one
/// whose fd table the queue was taken from, not what its header says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Locator {
    pub(super) version: u32,
    pub(super) owner: u32,
    /// The queue's fd in the owner.
    pub(super) fd: u32,
    pub(super) epoch: u32,
    /// The owner's start time (`start_time`).
    pub(super) start: u64,
    /// The endpoint's address (`addr_bytes`).
    pub(super) addr: [u8; 32],
    /// The owner's network namespace (`netns`).
    pub(super) netns: u64,
}

const LOC_MAGIC: u64 = 0x6f78_6d72_6c6f_6331; // "oxmrloc1"
/// Bytes of a locator file.
pub(super) const LOC_SIZE: usize = 72;

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
pub(super) fn proof(key: &crate::auth::JobKey, loc: &Locator) -> [u8; crate::auth::TAG_LEN] {
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
pub(super) fn read_locator(dir: &Dir, name: &str) -> io::Result<(Locator, libc::stat)> {
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
        super::super::dir::what_is_wrong(st, uid, REGION_SIZE as u64)
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
    if let Some(e) = what(&super::super::dir::fstat(fd.as_raw_fd())?) {
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
        // tmp-<pid>-<random>: a queue being built (a regular file);
        // bell-<pid>-<epoch>: a doorbell (a socket), whose owner unlinks it
        // at close (its pid reused since: its queue's sweep below). Either
        // goes when its pid is dead.
        let owned = [("tmp-", libc::S_IFREG), ("bell-", libc::S_IFSOCK)]
            .into_iter()
            .find_map(|(prefix, kind)| name.strip_prefix(prefix).map(|rest| (rest, kind)));
        if let Some((rest, kind)) = owned {
            let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
            let is_kind = dir.lstat(&name).is_ok_and(|st| st.st_mode & libc::S_IFMT == kind);
            if pid.is_some_and(|p| !pid_alive(p)) && is_kind {
                let _ = dir.unlink(&name);
            }
            continue;
        }
        if !name.starts_with("q-") {
            continue;
        }
        match holder(dir, &name) {
            Ok(Holder::Replaceable { owner, epoch, stale: true, st }) => {
                if dir.unlink_if_same(&name, &st) {
                    tracing::info!("removed {}, left by process {owner} which is gone", dir.file(&name));
                    let bell = bell_name(owner, epoch);
                    if dir.lstat(&bell).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFSOCK) {
                        let _ = dir.unlink(&bell);
                    }
                } else {
                    tracing::debug!("stale sweep: {} changed while being removed; left", dir.file(&name));
                }
            }
            // (What the sweep leaves, and why: for a test that finds a
            // stale file still there.)
            Ok(Holder::Live(pid)) => {
                tracing::debug!("stale sweep: {} left: its owner, process {pid}, lives", dir.file(&name))
            }
            Ok(Holder::Replaceable { owner, .. }) => {
                tracing::debug!("stale sweep: {} left: this process's own (pid {owner})", dir.file(&name))
            }
            Ok(Holder::Other(what)) => tracing::debug!("stale sweep: {} left: {what}", dir.file(&name)),
            Err(e) => tracing::debug!("stale sweep: {} left: {e}", dir.file(&name)),
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
        // SAFETY: ftruncate on the memfd made above, which `memfd` owns.
        cvt(unsafe { libc::ftruncate(fd, REGION_SIZE as libc::off_t) })?;
        // SAFETY: F_ADD_SEALS on the memfd made above; takes integer flags only.
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
            h.cell_size = CELL_SIZE as u32;
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
        r.file = super::super::dir::fstat(lf.as_raw_fd()).ok();
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
        if (h.cells, h.cell_size) != (CELLS as u32, CELL_SIZE as u32) {
            return wrong(format!("says {} cells of {} bytes, not {CELLS} of {CELL_SIZE}", h.cells, h.cell_size));
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

    /// Rewrite our queue's locator file in place (tests: a locator a dead
    /// or another process left, or a lying one).
    #[cfg(test)]
    pub(super) fn rewrite_locator_for_test(&self, f: impl FnOnce(&mut Locator)) {
        let (mut loc, _) = read_locator(&self.dir, &self.name).expect("our own locator");
        f(&mut loc);
        std::fs::write(self.dir.path().join(&self.name), loc.encode()).expect("our own locator");
    }
}
