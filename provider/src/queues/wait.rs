//! How a CQ, EQ or counter blocks: the application's wait object choice.
//!
//! `FI_WAIT_FD` and `FI_WAIT_UNSPEC` get a pollable fd (see `sys::WaitFd`);
//! `FI_WAIT_YIELD` spins with `sched_yield`; `FI_WAIT_NONE` means the
//! application promised not to block, and if it blocks anyway it spins like
//! YIELD rather than failing (what libfabric's util objects do).
//! `FI_WAIT_MUTEX_COND` and `FI_WAIT_SET` are refused with -FI_ENOSYS: oxmr
//! does not advertise wait sets.

use std::time::{Duration, Instant};

use oxmr_ffi as ffi;

use crate::error::Result;
use crate::fail;
use crate::sys::WaitFd;

/// A blocking strategy with its fd, if any.
pub struct Waiter {
    fd: Option<WaitFd>,
    yields: bool,
    /// Whether the next notification must write the eventfd. Cleared by a
    /// notification, set again when the fd is cleared (fi_trywait, or a
    /// blocking call about to sleep): between the two the fd is already
    /// readable, so further writes (a system call per completion) are
    /// skipped. Applications that sleep on the fd call fi_trywait first, as
    /// fi_trywait(3) requires.
    armed: std::sync::atomic::AtomicBool,
}

/// How soon the fd of an object that fi_trywait cleared becomes readable
/// by itself (see `Waiter::tick`): the wake-up latency of an application
/// that sleeps in poll() on it, as `block_until`'s TICK is for sread.
const TRYWAIT_TICK: Duration = Duration::from_millis(1);

/// The deadline for a libfabric timeout in milliseconds (negative: none).
pub fn deadline(timeout_ms: i32) -> Option<Instant> {
    (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64))
}

impl Waiter {
    /// Decode `wait_obj` from an attr.
    pub fn new(wait_obj: u32) -> Result<Self> {
        match wait_obj {
            ffi::FI_WAIT_NONE => Ok(Waiter { fd: None, yields: false, armed: true.into() }),
            ffi::FI_WAIT_YIELD => Ok(Waiter { fd: None, yields: true, armed: true.into() }),
            ffi::FI_WAIT_UNSPEC | ffi::FI_WAIT_FD => {
                let fd = WaitFd::new()
                    .map_err(|e| fail!(ffi::FI_EMFILE, "cannot create a wait fd: {e}; raise the open-files limit (ulimit -n)"))?;
                Ok(Waiter { fd: Some(fd), yields: false, armed: true.into() })
            }
            ffi::FI_WAIT_SET | ffi::FI_WAIT_MUTEX_COND => Err(fail!(
                ffi::FI_ENOSYS,
                "wait_obj {wait_obj} (wait set / mutex+cond) is not supported by oxmr; use FI_WAIT_FD, FI_WAIT_UNSPEC, FI_WAIT_YIELD or FI_WAIT_NONE"
            )),
            other => Err(fail!(ffi::FI_EINVAL, "unknown wait_obj {other}")),
        }
    }

    /// The application-visible fd (`FI_GETWAIT`), when there is one.
    pub fn fd(&self) -> Option<i32> {
        self.fd.as_ref().map(|w| w.fd())
    }

    /// Something became ready: wake waiters and make the fd readable.
    pub fn notify(&self) {
        if let Some(w) = &self.fd {
            if self.armed.swap(false, std::sync::atomic::Ordering::AcqRel) {
                w.notify();
            }
        }
    }

    /// Wake waiters unconditionally (fi_cq_signal).
    pub fn signal(&self) {
        if let Some(w) = &self.fd {
            self.armed.store(false, std::sync::atomic::Ordering::Release);
            w.notify();
        }
    }

    /// Nothing is ready any more: make the fd unreadable (fi_trywait) and
    /// let the next notification write it again.
    pub fn clear(&self) {
        if let Some(w) = &self.fd {
            w.clear();
            self.armed.store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// fi_trywait found nothing ready: the application may now sleep on
    /// the fd, but peers cannot write it (manual progress; the
    /// shared-memory wire), so make it readable within `TRYWAIT_TICK`; the
    /// application then reads (running progress) and tries again.
    pub fn tick(&self) {
        if let Some(w) = &self.fd {
            w.tick(TRYWAIT_TICK);
        }
    }

    /// Block until `ready()` holds or the deadline passes; returns the last
    /// `ready()` value. `ready` is re-checked after every wakeup, so a
    /// spurious wakeup or a notification consumed by another thread only
    /// costs a loop.
    pub fn block_until(&self, deadline: Option<Instant>, mut ready: impl FnMut() -> bool) -> bool {
        // Peers on the shared-memory wire cannot write our eventfd, so
        // `ready()` (which runs manual progress) is polled: busily for the
        // first SPIN, as a blocked MPI rank or fabtests' sread expects
        // microsecond wakeups, then at least every TICK while sleeping on the
        // fd (which local events - a completion from another thread,
        // fi_cq_signal - wake at once).
        const SPIN: Duration = Duration::from_micros(2000);
        const TICK: Duration = Duration::from_millis(1);
        let start = Instant::now();
        loop {
            if ready() {
                return true;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return false;
            }
            if now - start < SPIN || self.fd.is_none() {
                if self.yields || self.fd.is_none() {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            if let Some(w) = &self.fd {
                // Clear (and re-arm) before re-checking, so a notify that
                // lands between the check and the poll is not lost.
                self.clear();
                if ready() {
                    return true;
                }
                let tick = Instant::now() + TICK;
                w.wait(Some(deadline.map_or(tick, |d| d.min(tick))));
            }
        }
    }
}
