//! The wait object behind CQs, EQs and counters: an epoll instance holding
//! an eventfd and a timerfd.
//!
//! `fi_control(FI_GETWAIT)` hands the epoll fd to the application, which may
//! poll or epoll it. It becomes readable when the eventfd is signalled (a
//! new entry, `fi_cq_signal`), when the timer armed by [`WaitFd::tick`]
//! fires, and when any fd registered with [`WaitFd::watch`] is readable:
//! the wake fds of the endpoints bound to the object (`wire::Wake`: their
//! TCP sockets and shared-memory doorbell), so data arriving wakes a
//! sleeper although progress is manual. The timer is the fallback where
//! an endpoint cannot ring (or has work of its own pending): `fi_trywait`
//! arms it, the application wakes, reads (running progress) and calls
//! `fi_trywait` again.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// An epoll fd with one eventfd and one timerfd inside.
pub struct WaitFd {
    epoll: OwnedFd,
    event: OwnedFd,
    timer: OwnedFd,
}

fn cvt(r: i32) -> io::Result<i32> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl WaitFd {
    /// Create the pair.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; `cvt` passes only a
        // non-negative return, a new fd that nothing else owns.
        let event = unsafe { OwnedFd::from_raw_fd(cvt(libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK))?) };
        // SAFETY: epoll_create1 takes no pointers; `cvt` passes only a
        // non-negative return, a new fd that nothing else owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(cvt(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
        // SAFETY: timerfd_create takes no pointers; `cvt` passes only a
        // non-negative return, a new fd that nothing else owns.
        let timer = unsafe {
            OwnedFd::from_raw_fd(cvt(libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_CLOEXEC | libc::TFD_NONBLOCK,
            ))?)
        };
        let w = WaitFd { epoll, event, timer };
        w.watch(w.event.as_raw_fd())?;
        w.watch(w.timer.as_raw_fd())?;
        Ok(w)
    }

    /// Add an fd whose readability should wake waiters.
    pub fn watch(&self, fd: RawFd) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
        // SAFETY: both fds are open; `ev` is a valid epoll_event.
        cvt(unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        Ok(())
    }

    /// Wake every waiter (idempotent until [`clear`](Self::clear)).
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd. A full
        // counter (EAGAIN) still leaves the fd readable, which is all we need.
        unsafe { libc::write(self.event.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Make the eventfd (and a fired timer) unreadable again.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN when already clear.
        unsafe { libc::read(self.event.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        // SAFETY: reads 8 bytes into the same live u64, from our timerfd
        // (EAGAIN when it has not fired).
        unsafe { libc::read(self.timer.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    /// Make the fd readable once `after` has passed (one shot; a later call
    /// moves it).
    pub fn tick(&self, after: Duration) {
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                tv_nsec: after.subsec_nanos().max(1) as libc::c_long,
            },
        };
        // SAFETY: our timerfd and a valid itimerspec; the old value is not wanted.
        unsafe { libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    }

    /// The fd the application may poll.
    pub fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Block until readable or `deadline` passes (None: forever).
    /// Returns whether it became readable. Interrupted sleeps resume.
    pub fn wait(&self, deadline: Option<Instant>) -> bool {
        loop {
            let ms = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        0
                    } else {
                        // Round up so a 1 µs remainder still sleeps.
                        (left + Duration::from_micros(999)).as_millis().min(i32::MAX as u128) as i32
                    }
                }
            };
            let mut pfd = libc::pollfd { fd: self.epoll.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r > 0 {
                return true;
            }
            if r == 0 {
                return false;
            }
            if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return false;
            }
        }
    }
}

/// An fd to watch, and whether its writability counts too (`Epoll::watch`).
pub type WakeFd = (RawFd, bool);

/// A bare epoll instance: an endpoint's wake fd (see `wire::Wake`),
/// readable when any fd added to it is. Closing an added fd removes it.
pub struct Epoll(OwnedFd);

impl Epoll {
    /// A new, empty epoll instance.
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; on success it returns a new fd we own.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(cvt(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) }))
    }

    /// Add an fd (level-triggered, readable).
    pub fn add(&self, fd: RawFd) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
        // SAFETY: both fds are open; `ev` is a valid epoll_event.
        cvt(unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        Ok(())
    }

    /// Watch `fd` for readability, and for writability too when
    /// `writable` (a connect under way completes writable; bytes waiting
    /// to be written go when it is): added, or its interest changed if it
    /// is there already. False when it cannot be watched.
    pub fn watch(&self, (fd, writable): WakeFd) -> bool {
        let events = (libc::EPOLLIN | if writable { libc::EPOLLOUT } else { 0 }) as u32;
        let mut ev = libc::epoll_event { events, u64: fd as u64 };
        // SAFETY: both fds are open; `ev` is a valid epoll_event.
        let added = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } == 0;
        if added || io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return added;
        }
        // SAFETY: EEXIST said `fd` is open and in this epoll; `ev` is a valid epoll_event.
        unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_MOD, fd, &mut ev) == 0 }
    }

    /// Add an fd, or find it there already (true either way).
    pub fn add_again(&self, fd: RawFd) -> bool {
        match self.add(fd) {
            Ok(()) => true,
            Err(e) => e.raw_os_error() == Some(libc::EEXIST),
        }
    }

    /// Take an fd out (one closed since has left by itself).
    pub fn remove(&self, fd: RawFd) {
        // SAFETY: epoll_ctl DEL reads no event; a stale fd number only
        // fails (ENOENT/EBADF), which is what "already gone" means here.
        unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
    }

    /// The fds readable now (none waited for), into `out` (cleared
    /// first; at most 64, the rest on the next call: level-triggered).
    pub fn readable_now(&self, out: &mut Vec<RawFd>) -> io::Result<()> {
        out.clear();
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // SAFETY: `evs` is a writable array of 64 epoll_events, its length
        // passed; a zero timeout never sleeps.
        let n = cvt(unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, 0) })?;
        out.extend(evs[..n as usize].iter().map(|e| e.u64 as RawFd));
        Ok(())
    }

    /// The epoll fd (for another epoll, or poll).
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Whether it is readable within `ms` milliseconds (tests).
    #[cfg(test)]
    pub fn readable_within(&self, ms: i32) -> bool {
        let mut p = libc::pollfd { fd: self.0.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd on our own open epoll fd.
        unsafe { libc::poll(&mut p, 1, ms) == 1 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_wakes_and_clear_resets() {
        let w = WaitFd::new().unwrap();
        let t = Instant::now();
        assert!(!w.wait(Some(t + Duration::from_millis(20))));
        assert!(t.elapsed() >= Duration::from_millis(20));
        w.notify();
        assert!(w.wait(Some(Instant::now())));
        w.clear();
        assert!(!w.wait(Some(Instant::now())));
        // The tick makes it readable by itself, once; clear resets it.
        let t = Instant::now();
        w.tick(Duration::from_millis(5));
        assert!(w.wait(Some(t + Duration::from_secs(10))));
        assert!(t.elapsed() >= Duration::from_millis(5));
        w.clear();
        assert!(!w.wait(Some(Instant::now() + Duration::from_millis(20))));
    }

    #[test]
    fn notify_from_another_thread() {
        let w = std::sync::Arc::new(WaitFd::new().unwrap());
        let w2 = w.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            w2.notify();
        });
        assert!(w.wait(Some(Instant::now() + Duration::from_secs(10))));
        h.join().unwrap();
    }

    #[test]
    fn a_watched_epoll_wakes_the_wait_fd() {
        let w = WaitFd::new().unwrap();
        let inner = Epoll::new().unwrap();
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        inner.add(b.as_raw_fd()).unwrap();
        w.watch(inner.fd()).unwrap();
        assert!(!w.wait(Some(Instant::now() + Duration::from_millis(10))));
        a.send(&[1]).unwrap();
        assert!(w.wait(Some(Instant::now() + Duration::from_secs(10))));
    }
}
