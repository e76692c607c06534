//! The userfaultfd monitor: the kernel tells oxmr when watched memory is
//! unmapped (munmap, MAP_FIXED over it, brk shrink, mremap shrink), moved
//! (mremap) or discarded (madvise DONTNEED/FREE/REMOVE).
//!
//! One monitor per process (userfaultfd is per process), opened with
//! `UFFD_USER_MODE_ONLY` so it works unprivileged. Ranges are registered in
//! write-protect mode without ever write-protecting a page, so the kernel
//! never delivers a page fault to oxmr (nothing can hang on it): only the
//! non-cooperative events above. Those events are synchronous: the thread
//! that calls munmap is held in the kernel until the monitor has *read* the
//! event.
//!
//! Ordering argument (what the cache relies on): the monitor sets
//! `READING` before it calls read(2) and clears it after the events are in
//! the log. A munmap that has returned was released by that read, so the
//! read started after `READING` was set; a cache lookup that afterwards
//! waits for `READING == 0` and then reads the log sees the event. The log
//! is a fixed ring (no allocation while its lock is held, so freeing memory
//! can never wait on the monitor while the monitor waits on us); a cache
//! that falls more than the ring's size behind invalidates everything.
//!
//! Without UFFD_FEATURE_EVENT_FORK, a forked child's mappings are not
//! watched by the parent's monitor; the child never uses the parent's cache
//! (each cache remembers the process that created it). A cache the child
//! creates gets a monitor of the child's own: the parent's thread did not
//! survive the fork, and the userfaultfd it read belongs to the parent's
//! memory (registering the child's ranges there would watch the parent's).

use crate::sys::LockExt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

const UFFD_USER_MODE_ONLY: i32 = 1;
const UFFD_API: u64 = 0xAA;
const UFFD_FEATURE_EVENT_REMAP: u64 = 1 << 2;
const UFFD_FEATURE_EVENT_REMOVE: u64 = 1 << 3;
const UFFD_FEATURE_EVENT_UNMAP: u64 = 1 << 6;
const UFFDIO_API: u64 = 0xC018_AA3F;
const UFFDIO_REGISTER: u64 = 0xC020_AA00;
const UFFDIO_REGISTER_MODE_WP: u64 = 2;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFD_EVENT_REMAP: u8 = 0x14;
const UFFD_EVENT_REMOVE: u8 = 0x15;
const UFFD_EVENT_UNMAP: u8 = 0x16;
const UFFDIO_WAKE: u64 = 0x8010_AA02;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct UffdMsg {
    event: u8,
    _r1: u8,
    _r2: u16,
    _r3: u32,
    a: u64,
    b: u64,
    c: u64,
}
const _: () = assert!(size_of::<UffdMsg>() == 32);

/// Why a range became invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    Unmap,
    Remove,
    Remap,
    /// The cache fell behind the log: everything is suspect.
    Overflow,
    /// Its protection changed (mprotect; from `protwatch`, not userfaultfd).
    Protect,
}

/// One invalidation: [start, end) and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Invalidation {
    pub start: u64,
    pub end: u64,
    pub cause: Cause,
}

const LOG_SLOTS: usize = 4096;

struct Log {
    ring: [Invalidation; LOG_SLOTS],
    /// Sequence number of the next entry.
    head: u64,
}

/// The process's monitor.
pub struct Monitor {
    fd: OwnedFd,
    log: Mutex<Log>,
    reading: AtomicU32,
    events: AtomicU64,
    /// `log.head`, published (under the log's lock, before `reading` is
    /// cleared) so that "nothing new since `from`" is two loads, not a lock.
    head: AtomicU64,
}

/// The first monitor, with the pid of the process that started it.
static MONITOR: OnceLock<(u32, Option<&'static Monitor>)> = OnceLock::new();
/// A forked child's own monitor (see the module notes), with its pid.
static CHILD_MONITOR: Mutex<Option<(u32, Option<&'static Monitor>)>> = Mutex::new(None);

fn ioctl(fd: i32, req: u64, arg: *mut libc::c_void) -> io::Result<()> {
    // SAFETY: `arg` points to the struct `req` expects, alive for the call.
    if unsafe { libc::ioctl(fd, req as _, arg) } < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Monitor {
    /// The process's monitor, started on first use; `None` when
    /// userfaultfd is unavailable (the cache is then not used).
    pub fn get() -> Option<&'static Monitor> {
        let me = std::process::id();
        let (pid, m) = *MONITOR.get_or_init(|| (me, Monitor::start_or_log()));
        if pid == me {
            return m;
        }
        let mut child = CHILD_MONITOR.lock_ok();
        match *child {
            Some((p, m)) if p == me => m,
            _ => {
                let m = Monitor::start_or_log();
                *child = Some((me, m));
                m
            }
        }
    }

    fn start_or_log() -> Option<&'static Monitor> {
        match Monitor::start() {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::info!("userfaultfd unavailable ({e}); registrations are not cached");
                None
            }
        }
    }

    fn start() -> io::Result<&'static Monitor> {
        // SAFETY: plain syscall; on success a new fd we own.
        let fd =
            unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: new fd owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let mut api = UffdioApi {
            api: UFFD_API,
            features: UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP,
            ioctls: 0,
        };
        ioctl(fd.as_raw_fd(), UFFDIO_API, (&mut api as *mut UffdioApi).cast())?;
        let empty = Invalidation { start: 0, end: 0, cause: Cause::Unmap };
        let m: &'static Monitor = Box::leak(Box::new(Monitor {
            fd,
            log: Mutex::new(Log { ring: [empty; LOG_SLOTS], head: 0 }),
            reading: AtomicU32::new(0),
            events: AtomicU64::new(0),
            head: AtomicU64::new(0),
        }));
        std::thread::Builder::new().name("oxmr-uffd".into()).spawn(move || m.run())?;
        Ok(m)
    }

    /// Watch [addr, addr+len) (rounded out to pages). Fails (EBUSY) when the
    /// application watches the range with its own userfaultfd, and (EINVAL)
    /// for mappings userfaultfd cannot watch (PFN-mapped, some file
    /// mappings): such ranges are registered uncached.
    pub fn watch(&self, addr: usize, len: usize) -> io::Result<()> {
        let page = 4096u64;
        let start = addr as u64 & !(page - 1);
        let end = (addr as u64 + len as u64).div_ceil(page) * page;
        let mut reg =
            UffdioRegister { range: UffdioRange { start, len: end - start }, mode: UFFDIO_REGISTER_MODE_WP, ioctls: 0 };
        ioctl(self.fd.as_raw_fd(), UFFDIO_REGISTER, (&mut reg as *mut UffdioRegister).cast())
    }

    /// Sequence number of the next event.
    pub fn head(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    /// Whether the log holds nothing from sequence `from` on, and no read
    /// is in progress (the registration-cache hit path asks this: two
    /// loads, no lock). Same reasoning as `quiet_since`: once a munmap has
    /// returned, `reading` is set or the published head has moved.
    pub fn up_to_date(&self, from: u64) -> bool {
        self.reading.load(Ordering::SeqCst) == 0 && self.head.load(Ordering::Acquire) == from
    }

    /// Events read since start.
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Acquire)
    }

    /// Whether no event was read since the count was `seen` and no read
    /// is in progress. The thread reads an event (which lets the munmap
    /// return), logs it, counts it, then clears `reading`: once a munmap
    /// has returned, either `reading` is set or the count has moved.
    pub fn quiet_since(&self, seen: u64) -> bool {
        self.reading.load(Ordering::SeqCst) == 0 && self.events.load(Ordering::Acquire) == seen
    }

    /// Copy the invalidations with sequence >= `from` into `out`, waiting
    /// first for a read in progress to land in the log. Returns the next
    /// sequence number and how many were copied (or Overflow if `from` fell
    /// out of the ring). Call again while it returns a full `out`.
    pub fn since(&self, from: u64, out: &mut [Invalidation]) -> (u64, usize) {
        while self.reading.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        let log = self.log.lock_ok();
        if log.head.saturating_sub(from) > LOG_SLOTS as u64 {
            out[0] = Invalidation { start: 0, end: u64::MAX, cause: Cause::Overflow };
            return (log.head, 1);
        }
        let n = ((log.head - from) as usize).min(out.len());
        for (i, slot) in out.iter_mut().enumerate().take(n) {
            *slot = log.ring[((from + i as u64) % LOG_SLOTS as u64) as usize];
        }
        (from + n as u64, n)
    }

    fn append(&self, inv: &[Invalidation]) {
        let mut log = self.log.lock_ok();
        for &i in inv {
            let h = log.head;
            log.ring[(h % LOG_SLOTS as u64) as usize] = i;
            log.head = h + 1;
        }
        self.head.store(log.head, Ordering::Release);
    }

    fn run(&self) {
        let fd = self.fd.as_raw_fd();
        let mut msgs = [UffdMsg { event: 0, _r1: 0, _r2: 0, _r3: 0, a: 0, b: 0, c: 0 }; 64];
        let mut inv = [Invalidation { start: 0, end: 0, cause: Cause::Unmap }; 64];
        loop {
            let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd. EINTR and spurious wakeups loop.
            unsafe { libc::poll(&mut pfd, 1, -1) };
            self.reading.store(1, Ordering::SeqCst);
            // SAFETY: reads whole uffd_msg records into our buffer.
            let r = unsafe { libc::read(fd, msgs.as_mut_ptr().cast(), size_of_val(&msgs)) };
            if r > 0 {
                let n = r as usize / size_of::<UffdMsg>();
                let mut k = 0;
                for m in &msgs[..n] {
                    let (start, end, cause) = match m.event {
                        UFFD_EVENT_UNMAP => (m.a, m.b, Cause::Unmap),
                        UFFD_EVENT_REMOVE => (m.a, m.b, Cause::Remove),
                        UFFD_EVENT_REMAP => (m.a, m.a.saturating_add(m.c), Cause::Remap),
                        UFFD_EVENT_PAGEFAULT => {
                            // Never expected (no page is write-protected);
                            // wake the faulting thread rather than hang it.
                            let mut range = UffdioRange { start: m.b & !4095, len: 4096 };
                            let _ = ioctl(fd, UFFDIO_WAKE, (&mut range as *mut UffdioRange).cast());
                            continue;
                        }
                        _ => continue,
                    };
                    inv[k] = Invalidation { start, end, cause };
                    k += 1;
                }
                self.append(&inv[..k]);
                self.events.fetch_add(n as u64, Ordering::Release);
            }
            self.reading.store(0, Ordering::SeqCst);
        }
    }
}
