//! Protection changes of this process's memory (mprotect), as the kernel
//! records them, read without a system call.
//!
//! userfaultfd (`uffd`) reports unmaps, remaps and discards, but not
//! mprotect. perf does: `mprotect_fixup` (mm/mprotect.c) ends with
//! `perf_event_mmap(vma)`, so a perf software event (PERF_COUNT_SW_DUMMY)
//! with `mmap_data` and `mmap2` set gets a PERF_RECORD_MMAP2 (the VMA's new
//! range and protection) for every mprotect of data memory, written into a
//! ring buffer mapped here. Whether anything happened is one load of each
//! ring's `data_head`, so a cache hit stays free of system calls.
//!
//! Coverage: perf events follow tasks, not processes. Every thread that
//! exists when the watch opens gets one event per CPU (`inherit` set, so
//! the threads and processes it creates later are followed too; the
//! thread list is read again after opening, to catch a thread created
//! meanwhile); the events of one CPU share that CPU's ring
//! (PERF_EVENT_IOC_SET_OUTPUT). Records of forked children (inherited
//! events) land in the same rings and are told apart by pid. A ring that
//! overflows says so (PERF_RECORD_LOST), and the reader then answers
//! `Lost`: everything must be taken as changed.
//!
//! Where perf is not allowed (kernel.perf_event_paranoid 3, as Debian sets
//! it for unprivileged users) or there would be too many events, `open`
//! fails and the caller falls back to reading /proc/self/maps.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// The kernel's `struct perf_event_attr` (libc does not define it): the
/// fields set here, then the rest zeroed; 136 bytes is
/// PERF_ATTR_SIZE_VER8, and older kernels accept a larger struct whose
/// bytes past their own size are zero.
#[repr(C)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    rest: [u64; 11],
}
const _: () = assert!(size_of::<PerfEventAttr>() == 136);

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_DUMMY: u64 = 9;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// `_IO('$', 5)`.
const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
// Bits of `flags`.
const INHERIT: u64 = 1 << 1;
const EXCLUDE_KERNEL: u64 = 1 << 5;
const EXCLUDE_HV: u64 = 1 << 6;
const MMAP: u64 = 1 << 8;
const MMAP_DATA: u64 = 1 << 17;
const MMAP2: u64 = 1 << 23;
// Record types.
const PERF_RECORD_MMAP: u32 = 1;
const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_MMAP2: u32 = 10;
/// Offsets in the ring's first page (`struct perf_event_mmap_page`).
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;
/// Data pages per ring (a power of two): room for some 400 records.
const DATA_PAGES: usize = 8;
/// The most events opened (threads x CPUs) before giving up.
const MAX_EVENTS: usize = 512;

/// One CPU's ring buffer.
struct Ring {
    /// The event whose ring it is (the others of its CPU write here).
    _fd: OwnedFd,
    base: *mut u8,
    len: usize,
    /// Bytes consumed (what we last stored into `data_tail`).
    tail: AtomicU64,
}

// SAFETY: the ring is a shared mapping the kernel writes; we read it with
// atomic loads of its head and plain reads of published records, and only
// one reader at a time runs `drain` (the caller holds its lock).
unsafe impl Send for Ring {}
// SAFETY: a shared `&Ring` only calls `pending`, which loads atomics;
// `drain` reads records under the caller's lock.
unsafe impl Sync for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `len` bytes, unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

impl Ring {
    fn head(&self) -> &AtomicU64 {
        // SAFETY: `data_head` is an aligned u64 in the mapped control page.
        unsafe { &*(self.base.add(DATA_HEAD) as *const AtomicU64) }
    }

    fn tail_word(&self) -> &AtomicU64 {
        // SAFETY: `data_tail` is an aligned u64 in the mapped control page.
        unsafe { &*(self.base.add(DATA_TAIL) as *const AtomicU64) }
    }

    /// `n` bytes of the data area from ring offset `at` (wrapping).
    fn read(&self, at: u64, out: &mut [u8]) {
        let size = (DATA_PAGES * page()) as u64;
        let data = page();
        for (i, b) in out.iter_mut().enumerate() {
            let off = data + ((at + i as u64) % size) as usize;
            // SAFETY: `off` lies in the data area of the mapping; the kernel
            // published these bytes before the head we loaded.
            *b = unsafe { std::ptr::read_volatile(self.base.add(off)) };
        }
    }
}

fn page() -> usize {
    // SAFETY: sysconf has no memory effects.
    (unsafe { libc::sysconf(libc::_SC_PAGESIZE) }) as usize
}

/// A protection (or mapping) change the kernel recorded: [start, end) now
/// has `prot` (PROT_* bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    pub start: u64,
    pub end: u64,
    pub prot: u32,
}

/// What `drain` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Drained {
    /// These changes, in order.
    Changes(Vec<Change>),
    /// A ring overflowed: changes were lost.
    Lost,
}

/// The watch: one ring per CPU.
pub struct ProtWatch {
    rings: Vec<Ring>,
    /// Our process, to tell our records from a forked child's.
    pid: u32,
    /// The other events (threads x CPUs), held open.
    _events: Vec<OwnedFd>,
}

fn open_event(tid: i32, cpu: i32) -> io::Result<OwnedFd> {
    dummy_event(tid, cpu, INHERIT | EXCLUDE_KERNEL | EXCLUDE_HV | MMAP | MMAP_DATA | MMAP2)
}

/// A PERF_COUNT_SW_DUMMY event on thread `tid` (0: this one) and `cpu`
/// (-1: any), with the attribute bits `flags` (also for tests that want
/// a perf ring as PFN-mapped memory).
pub(crate) fn dummy_event(tid: i32, cpu: i32, flags: u64) -> io::Result<OwnedFd> {
    let attr = PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: size_of::<PerfEventAttr>() as u32,
        config: PERF_COUNT_SW_DUMMY,
        sample_period: 0,
        sample_type: 0,
        read_format: 0,
        flags,
        rest: [0; 11],
    };
    // SAFETY: `attr` is a valid, fully initialised perf_event_attr of the
    // size it declares; `tid` is a thread of ours, `cpu` an online CPU.
    let fd = unsafe {
        libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfEventAttr, tid, cpu, -1, PERF_FLAG_FD_CLOEXEC)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: perf_event_open returned a new fd that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn threads() -> io::Result<Vec<i32>> {
    let mut v: Vec<i32> =
        std::fs::read_dir("/proc/self/task")?.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    v.sort_unstable();
    Ok(v)
}

fn cpus() -> Vec<i32> {
    // (Online CPUs: "0-3,8-11".)
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
            v.extend(a..=b);
        }
    }
    v
}

impl ProtWatch {
    /// Watch every thread of this process (and what they create).
    pub fn open() -> io::Result<ProtWatch> {
        let cpus = cpus();
        if cpus.is_empty() {
            return Err(io::Error::other("no online CPUs in /sys/devices/system/cpu/online"));
        }
        let ps = page();
        let mut rings = Vec::new();
        for &cpu in &cpus {
            // (The ring's own event: this thread on that CPU.)
            let fd = open_event(0, cpu)?;
            let len = (1 + DATA_PAGES) * ps;
            // SAFETY: maps the event's ring buffer (control page and data
            // pages), shared, at an address the kernel picks.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let r = Ring { _fd: fd, base: base as *mut u8, len, tail: AtomicU64::new(0) };
            r.tail.store(r.head().load(Ordering::Acquire), Ordering::Relaxed);
            rings.push(r);
        }
        let me = std::process::id() as i32;
        let mut watched: Vec<i32> = vec![gettid()];
        let mut events = Vec::new();
        // Twice: a thread created while the first pass opened events (by a
        // thread not yet watched) shows in the second.
        for _ in 0..2 {
            for tid in threads()? {
                if watched.contains(&tid) {
                    continue;
                }
                if (watched.len() + 1) * cpus.len() > MAX_EVENTS {
                    return Err(io::Error::other(format!(
                        "{} threads x {} CPUs would take more than {MAX_EVENTS} perf events",
                        watched.len() + 1,
                        cpus.len()
                    )));
                }
                for (i, &cpu) in cpus.iter().enumerate() {
                    let fd = match open_event(tid, cpu) {
                        Ok(fd) => fd,
                        // (It exited meanwhile.)
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => break,
                        Err(e) => return Err(e),
                    };
                    // SAFETY: redirects this event's records into the ring of
                    // the same CPU's event; both fds are ours and open.
                    let rc = unsafe {
                        libc::ioctl(fd.as_raw_fd(), PERF_EVENT_IOC_SET_OUTPUT as _, rings[i]._fd.as_raw_fd())
                    };
                    if rc != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    events.push(fd);
                }
                watched.push(tid);
            }
        }
        Ok(ProtWatch { rings, pid: me as u32, _events: events })
    }

    /// Whether a record waits (one load per CPU's ring).
    pub fn pending(&self) -> bool {
        self.rings.iter().any(|r| r.head().load(Ordering::Acquire) != r.tail.load(Ordering::Relaxed))
    }

    /// Take every waiting record (the caller serialises calls).
    pub fn drain(&self) -> Drained {
        let mut out = Vec::new();
        let mut lost = false;
        for r in &self.rings {
            let head = r.head().load(Ordering::Acquire);
            let mut at = r.tail.load(Ordering::Relaxed);
            while at < head {
                let mut h = [0u8; 8];
                r.read(at, &mut h);
                let kind = u32::from_ne_bytes(h[0..4].try_into().unwrap_or_default());
                let size = u16::from_ne_bytes(h[6..8].try_into().unwrap_or_default()) as u64;
                if size < 8 {
                    // (A record the kernel would never write: take the rest
                    // as lost rather than loop.)
                    lost = true;
                    at = head;
                    break;
                }
                match kind {
                    PERF_RECORD_MMAP | PERF_RECORD_MMAP2 if size >= 32 => {
                        let mut b = vec![0u8; size.min(72) as usize];
                        r.read(at, &mut b);
                        let word = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap_or_default());
                        let pid = u32::from_ne_bytes(b[8..12].try_into().unwrap_or_default());
                        // (MMAP2 carries the new protection; MMAP does not:
                        // then assume the least.)
                        let prot = if kind == PERF_RECORD_MMAP2 && b.len() >= 68 {
                            u32::from_ne_bytes(b[64..68].try_into().unwrap_or_default())
                        } else {
                            0
                        };
                        if pid == self.pid {
                            let start = word(16);
                            out.push(Change { start, end: start.saturating_add(word(24)), prot });
                        }
                    }
                    PERF_RECORD_LOST => lost = true,
                    _ => {}
                }
                at += size;
            }
            r.tail.store(at, Ordering::Relaxed);
            // Frees the space for the kernel: everything read happens before.
            r.tail_word().store(at, Ordering::Release);
        }
        if lost {
            Drained::Lost
        } else {
            Drained::Changes(out)
        }
    }
}

/// This thread's id.
pub(crate) fn gettid() -> i32 {
    // SAFETY: gettid has no memory effects.
    (unsafe { libc::syscall(libc::SYS_gettid) }) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(len: usize) -> usize {
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as usize
    }

    fn protect(a: usize, len: usize, prot: i32) {
        // SAFETY: our own mapping.
        assert_eq!(unsafe { libc::mprotect(a as *mut libc::c_void, len, prot) }, 0);
    }

    fn changes(w: &ProtWatch) -> Vec<Change> {
        match w.drain() {
            Drained::Changes(v) => v,
            Drained::Lost => panic!("a ring overflowed in a test that makes a few changes"),
        }
    }

    #[test]
    fn mprotect_from_any_thread_is_recorded_with_the_new_protection() {
        // A thread that exists before the watch opens, and one after.
        let (go, wait) = std::sync::mpsc::channel::<usize>();
        let before = std::thread::spawn(move || {
            let a = wait.recv().unwrap();
            protect(a, 4096, libc::PROT_READ);
        });
        let w = ProtWatch::open().expect("perf_event_open works here (root, or perf_event_paranoid <= 2)");
        let (a, b, c) = (map(8192), map(8192), map(8192));
        let _ = changes(&w); // (the three mmaps)
        protect(a, 4096, libc::PROT_READ);
        go.send(b).unwrap();
        before.join().unwrap();
        std::thread::spawn(move || protect(c, 8192, libc::PROT_NONE)).join().unwrap();
        assert!(w.pending(), "three mprotect calls and nothing in the rings");
        let got = changes(&w);
        let has = |x: usize, len: usize, prot: i32| {
            got.iter().any(|g| g.start <= x as u64 && x as u64 + len as u64 <= g.end && g.prot == prot as u32)
        };
        assert!(has(a, 4096, libc::PROT_READ), "this thread's mprotect: {got:?}");
        assert!(has(b, 4096, libc::PROT_READ), "an older thread's mprotect: {got:?}");
        assert!(has(c, 8192, libc::PROT_NONE), "a newer thread's mprotect: {got:?}");
        assert!(!w.pending(), "drained");
        for x in [a, b, c] {
            // SAFETY: our own mappings.
            unsafe { libc::munmap(x as *mut libc::c_void, 8192) };
        }
    }
}
