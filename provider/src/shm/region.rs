//! The shared-memory region of one endpoint.
//!
//! Layout (all little-endian, fixed at creation):
//!
//! ```text
//! Header   magic, version, owner pid, cell count/size, ready flag, tail
//! Cells    CELLS x { seq: u64, len: u32, pad, data[CELL_DATA] }
//! ```
//!
//! The queue is a bounded MPSC ring in the style of Vyukov's bounded queue:
//! cell `i` starts with `seq = i`; a producer claims position `pos` by CAS
//! on `tail` when `cells[pos % N].seq == pos`, writes, then publishes with
//! `seq = pos + 1`; the consumer takes `pos` when `seq == pos + 1` and frees
//! it with `seq = pos + N`. A full ring answers `EAGAIN` (flow control);
//! nothing blocks. The consumer's position lives in the owner's memory only.
//!
//! Files are `/dev/shm/oxmr-<ip>-<port>`: the port belongs to the
//! endpoint's TCP listener, so two live endpoints can never share a name. A
//! file whose owner pid is gone is stale and is replaced.

use std::ffi::CString;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Cells in an endpoint's queue.
pub(crate) const CELLS: usize = 256;
/// Bytes of one cell's payload (message header included).
pub(crate) const CELL_DATA: usize = 8192 - 16;

const MAGIC: u64 = 0x6f78_6d72_7368_6d31; // "oxmrshm1"
const VERSION: u32 = 1;

#[repr(C)]
struct Header {
    magic: u64,
    version: u32,
    owner: u32,
    cells: u32,
    cell_size: u32,
    ready: AtomicU32,
    _pad: u32,
    tail: AtomicU64,
    _pad2: [u64; 3],
}

#[repr(C)]
struct Cell {
    seq: AtomicU64,
    len: u32,
    _pad: u32,
    data: [u8; CELL_DATA],
}

const HDR: usize = size_of::<Header>();
const CELLS_AT: usize = HDR.next_multiple_of(64);
/// Total bytes of a region.
pub(crate) const REGION_SIZE: usize = CELLS_AT + CELLS * size_of::<Cell>();

/// The file name of an endpoint's region.
pub fn path_for(addr: &SocketAddr) -> String {
    format!("/oxmr-{}-{}", addr.ip().to_string().replace(':', "_"), addr.port())
}

/// A mapped region (own or a peer's).
pub struct Region {
    base: *mut u8,
    name: String,
    owned: bool,
    /// Consumer position (owner only).
    head: u64,
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

fn map(fd: i32) -> io::Result<*mut u8> {
    // SAFETY: maps REGION_SIZE bytes of a file we sized to at least that.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), REGION_SIZE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p as *mut u8)
}

/// Remove region files left by processes that died without closing their
/// endpoints (SIGKILL, crash). Runs once per process, before the first
/// region is created; a file is removed only when its owner pid is gone.
pub fn reclaim_stale() {
    // Once per process: a forked child (which inherits a "done" flag) runs
    // it again, keyed on the pid.
    static DONE_BY: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let me = std::process::id();
    if DONE_BY.swap(me, std::sync::atomic::Ordering::AcqRel) == me {
        return;
    }
    {
        let Ok(dir) = std::fs::read_dir("/dev/shm") else { return };
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("oxmr-") {
                continue;
            }
            let Ok(mut f) = std::fs::File::open(e.path()) else { continue };
            let mut h = [0u8; 16];
            if std::io::Read::read_exact(&mut f, &mut h).is_err() {
                continue;
            }
            let magic = u64::from_le_bytes(h[0..8].try_into().unwrap_or_default());
            let owner = u32::from_le_bytes(h[12..16].try_into().unwrap_or_default());
            if magic == MAGIC && !pid_alive(owner) {
                tracing::info!("removing /dev/shm/{name}, left by process {owner} which is gone");
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

impl Region {
    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header and lives as long as self.
        unsafe { &*(self.base as *const Header) }
    }

    fn cell(&self, i: usize) -> *mut Cell {
        // SAFETY: i < CELLS, inside the mapping.
        unsafe { self.base.add(CELLS_AT + (i % CELLS) * size_of::<Cell>()) as *mut Cell }
    }

    /// Create the region of an endpoint (replacing a stale one).
    pub fn create(addr: &SocketAddr) -> io::Result<Region> {
        reclaim_stale();
        let name = path_for(addr);
        let c = CString::new(name.clone()).expect("no NUL in a formatted address");
        // SAFETY: shm_open with a valid C string; the fd is closed below.
        let mut fd =
            unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o600) };
        if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
            // Stale (its owner is gone) or a live endpoint of another
            // process: the listener port says it cannot be live, but check.
            if let Ok(old) = Region::open(addr) {
                let owner = old.header().owner;
                if pid_alive(owner) && owner != std::process::id() {
                    return Err(io::Error::from_raw_os_error(libc::EADDRINUSE));
                }
            }
            tracing::info!("replacing stale shared-memory file /dev/shm{name}");
            // SAFETY: valid C string.
            unsafe { libc::shm_unlink(c.as_ptr()) };
            // SAFETY: as above.
            fd = unsafe {
                libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o600)
            };
        }
        cvt(fd)?;
        // SAFETY: our new fd.
        let sized = cvt(unsafe { libc::ftruncate(fd, REGION_SIZE as libc::off_t) });
        let base = sized.and_then(|_| map(fd));
        // SAFETY: closing our fd; the mapping stays.
        unsafe { libc::close(fd) };
        let base = base.inspect_err(|_| {
            // SAFETY: valid C string.
            unsafe { libc::shm_unlink(c.as_ptr()) };
        })?;
        let r = Region { base, name, owned: true, head: 0 };
        // SAFETY: freshly zeroed mapping we own; initialise before `ready`.
        unsafe {
            let h = &mut *(base as *mut Header);
            h.magic = MAGIC;
            h.version = VERSION;
            h.owner = std::process::id();
            h.cells = CELLS as u32;
            h.cell_size = size_of::<Cell>() as u32;
            for i in 0..CELLS {
                (*r.cell(i)).seq.store(i as u64, Ordering::Relaxed);
            }
        }
        r.header().ready.store(1, Ordering::Release);
        Ok(r)
    }

    /// Open a peer's region; ENOENT when no endpoint has this name here.
    pub fn open(addr: &SocketAddr) -> io::Result<Region> {
        let name = path_for(addr);
        let c = CString::new(name.clone()).expect("no NUL in a formatted address");
        // SAFETY: shm_open with a valid C string.
        let fd = cvt(unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) })?;
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat into a zeroed stat.
        let ok = cvt(unsafe { libc::fstat(fd, &mut st) });
        let base = ok.and_then(|_| {
            if (st.st_size as usize) < REGION_SIZE {
                Err(io::Error::from_raw_os_error(libc::EPROTO))
            } else {
                map(fd)
            }
        });
        // SAFETY: our fd.
        unsafe { libc::close(fd) };
        let r = Region { base: base?, name, owned: false, head: 0 };
        let h = r.header();
        if h.magic != MAGIC || h.version != VERSION || h.ready.load(Ordering::Acquire) != 1 {
            return Err(io::Error::from_raw_os_error(libc::EPROTO));
        }
        Ok(r)
    }

    /// Pid of the region's owner.
    pub fn owner(&self) -> u32 {
        self.header().owner
    }

    /// Whether the owner is still alive.
    pub fn owner_alive(&self) -> bool {
        pid_alive(self.owner())
    }

    /// Push one message (`parts` concatenated). EAGAIN when full.
    pub fn push(&self, parts: &[&[u8]]) -> io::Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > CELL_DATA {
            return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
        }
        let tail = &self.header().tail;
        let mut pos = tail.load(Ordering::Relaxed);
        loop {
            let cell = self.cell(pos as usize);
            // SAFETY: cells are inside the mapping; seq is atomic.
            let seq = unsafe { (*cell).seq.load(Ordering::Acquire) };
            let dif = seq as i64 - pos as i64;
            if dif == 0 {
                match tail.compare_exchange_weak(pos, pos + 1, Ordering::AcqRel, Ordering::Relaxed) {
                    Ok(_) => {
                        // SAFETY: we own cell `pos` until we publish it.
                        unsafe {
                            let mut off = 0;
                            for p in parts {
                                std::ptr::copy_nonoverlapping(p.as_ptr(), (*cell).data.as_mut_ptr().add(off), p.len());
                                off += p.len();
                            }
                            (*cell).len = len as u32;
                            (*cell).seq.store(pos + 1, Ordering::Release);
                        }
                        return Ok(());
                    }
                    Err(p) => pos = p,
                }
            } else if dif < 0 {
                return Err(io::Error::from_raw_os_error(libc::EAGAIN));
            } else {
                pos = tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Pop one message into `f` (owner only). Returns false when empty.
    pub fn pop(&mut self, f: impl FnOnce(&[u8])) -> bool {
        debug_assert!(self.owned);
        let pos = self.head;
        let cell = self.cell(pos as usize);
        // SAFETY: inside the mapping; the producer published it (seq check).
        unsafe {
            if (*cell).seq.load(Ordering::Acquire) != pos + 1 {
                return false;
            }
            let len = ((*cell).len as usize).min(CELL_DATA);
            f(&(&(*cell).data)[..len]);
            (*cell).seq.store(pos + CELLS as u64, Ordering::Release);
        }
        self.head = pos + 1;
        true
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping of REGION_SIZE bytes.
        unsafe { libc::munmap(self.base as *mut libc::c_void, REGION_SIZE) };
        if self.owned {
            if let Ok(c) = CString::new(self.name.clone()) {
                // SAFETY: valid C string.
                unsafe { libc::shm_unlink(c.as_ptr()) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_round_trip_and_full() {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut own = Region::create(&addr).unwrap();
        let peer = Region::open(&addr).unwrap();
        assert_eq!(peer.owner(), std::process::id());
        for i in 0..CELLS {
            peer.push(&[&(i as u32).to_le_bytes(), b"xyz"]).unwrap();
        }
        assert_eq!(peer.push(&[b"full"]).unwrap_err().raw_os_error(), Some(libc::EAGAIN));
        for i in 0..CELLS {
            let mut got = Vec::new();
            assert!(own.pop(|b| got = b.to_vec()));
            assert_eq!(&got[..4], &(i as u32).to_le_bytes());
        }
        assert!(!own.pop(|_| ()));
        peer.push(&[b"again"]).unwrap();
        assert!(own.pop(|b| assert_eq!(b, b"again")));
        drop(peer);
        drop(own);
        assert!(Region::open(&addr).is_err(), "the owner unlinks its file");
    }
}
