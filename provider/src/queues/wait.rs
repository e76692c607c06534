//! How a CQ, EQ or counter blocks: the application's wait object choice.
//!
//! `FI_WAIT_FD` and `FI_WAIT_UNSPEC` get a pollable fd (see `sys::WaitFd`);
//! `FI_WAIT_YIELD` spins with `sched_yield`; `FI_WAIT_NONE` means the
//! application promised not to block, and if it blocks anyway it spins like
//! YIELD rather than failing (what libfabric's util objects do).
//! `FI_WAIT_SET`: the object keeps a wait fd of its own, as with
//! `FI_WAIT_FD`, and its wait set (`objects::wait_set`, whose own waiter
//! is [`Waiter::for_set`]) watches that fd and attaches the object as one
//! of its sleepers. `FI_WAIT_MUTEX_COND` is refused with -FI_ENOSYS.
//!
//! Progress is manual, so what peers send arrives only when a read runs
//! progress. To sleep anyway, the objects layer attaches a [`Sleeper`]
//! per endpoint bound here (its engine, which this layer cannot name):
//! its wake fd goes into ours, and around a sleep it is told "about to
//! sleep" and "awake" (the shared-memory wire rings its doorbell only
//! while someone sleeps). When every attached endpoint can ring, a sleep
//! waits for its fd with only a long `SAFETY_TICK`; otherwise (the
//! loopback wire of tests, an endpoint without a doorbell, a counter that
//! drives the whole domain) it polls every `TICK` as before.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oxmr_ffi as ffi;

use crate::error::Result;
use crate::fail;
use crate::sys::LockExt;
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
    /// The endpoints that feed this object and can wake it (see the
    /// module header).
    sleepers: Mutex<Vec<Arc<dyn Sleeper>>>,
    /// An attached endpoint cannot ring: sleeps poll every `TICK`.
    polls: AtomicBool,
    /// fi_trywait told the sleepers "about to sleep" (the application may
    /// sleep in poll() on our fd); the next read or trywait tells them
    /// "awake".
    parked: AtomicBool,
    parked_with: Mutex<Vec<Arc<dyn Sleeper>>>,
    /// The safety tick in milliseconds (the shortest its sleepers were
    /// attached with, FI_OXMR_WAIT_TICK_MS; `u64::MAX` until then).
    safety_ms: AtomicU64,
    /// A wait set's waiter: with no sleeper attached (no member yet),
    /// nothing can happen that does not write the fd (a member joins
    /// from another thread, and its events then ring), so a sleep waits
    /// for the fd with the safety tick, not the short one.
    alone_quiet: bool,
}

/// An endpoint that feeds a CQ or counter, as its wait object sees it.
pub trait Sleeper: Send + Sync {
    /// The fd that becomes readable when something may have arrived; None
    /// when the endpoint cannot ring (a sleeper then polls).
    fn wake_fd(&self) -> Option<RawFd>;
    /// A thread is about to sleep: ring from now on. Returns whether the
    /// endpoint is quiet (nothing arrived, no work of its own pending that
    /// only progress moves on); false: sleep only a `TICK`. Always followed
    /// by `awake`.
    fn sleep(&self) -> bool;
    /// The thread that called `sleep` woke.
    fn awake(&self);
    /// Whether it will never feed this object again (a wait set's member
    /// that was closed): `attach` drops it from the list.
    fn retired(&self) -> bool {
        false
    }
}

/// What [`Waiter::doze`] told an object's sleepers: they are told
/// "awake" when it is dropped.
pub struct Doze {
    slept: Vec<Arc<dyn Sleeper>>,
    /// Every endpoint can ring the object's fd and is quiet: a sleep may
    /// wait for the fd with only the safety tick.
    pub quiet: bool,
}

impl Drop for Doze {
    fn drop(&mut self) {
        for s in self.slept.drain(..) {
            s.awake();
        }
    }
}

/// How long a sleep on the fd lasts at most when every endpoint can ring
/// it, unless FI_OXMR_WAIT_TICK_MS says otherwise: not needed for arrivals, but progress also notices peers that died
/// (without a word on any socket) and repairs a queue cell whose producer
/// died mid-write; a sleeper runs it at least this often.
const SAFETY_TICK: Duration = Duration::from_millis(100);

/// How often a sleeper polls when some endpoint cannot ring its fd, or has
/// work of its own pending (a connect in progress, frames queued behind a
/// full socket or queue): its wake-up latency then.
const TICK: Duration = Duration::from_millis(1);

/// How soon the fd of an object that fi_trywait cleared becomes readable
/// by itself when an endpoint cannot ring it (see `Waiter::tick`): the
/// wake-up latency of an application that sleeps in poll() on it then.
const TRYWAIT_TICK: Duration = TICK;

/// The deadline for a libfabric timeout in milliseconds (negative: none).
pub fn deadline(timeout_ms: i32) -> Option<Instant> {
    (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64))
}

impl Waiter {
    /// Decode `wait_obj` from an attr.
    pub fn new(wait_obj: u32) -> Result<Self> {
        match wait_obj {
            ffi::FI_WAIT_NONE => Ok(Waiter::with(None, false)),
            ffi::FI_WAIT_YIELD => Ok(Waiter::with(None, true)),
            // (A wait set's member: an fd of its own, which the set watches.)
            ffi::FI_WAIT_UNSPEC | ffi::FI_WAIT_FD | ffi::FI_WAIT_SET => Ok(Waiter::with(Some(Self::wait_fd()?), false)),
            ffi::FI_WAIT_MUTEX_COND => Err(fail!(
                ffi::FI_ENOSYS,
                "wait_obj FI_WAIT_MUTEX_COND is not supported by oxmr; use FI_WAIT_FD, FI_WAIT_UNSPEC, FI_WAIT_SET, FI_WAIT_YIELD or FI_WAIT_NONE"
            )),
            other => Err(fail!(ffi::FI_EINVAL, "unknown wait_obj {other}")),
        }
    }

    /// A wait set's own waiter (`fi_wait_attr.wait_obj`): FI_WAIT_UNSPEC
    /// and FI_WAIT_FD get a pollable fd, FI_WAIT_YIELD spins with
    /// `sched_yield`.
    pub fn for_set(wait_obj: u32) -> Result<Self> {
        match wait_obj {
            ffi::FI_WAIT_UNSPEC | ffi::FI_WAIT_FD => {
                Ok(Waiter { alone_quiet: true, ..Waiter::with(Some(Self::wait_fd()?), false) })
            }
            ffi::FI_WAIT_YIELD => Ok(Waiter::with(None, true)),
            ffi::FI_WAIT_MUTEX_COND | ffi::FI_WAIT_POLLFD => Err(fail!(
                ffi::FI_ENOSYS,
                "fi_wait_open: wait_obj {wait_obj} (FI_WAIT_MUTEX_COND / FI_WAIT_POLLFD) is not supported by oxmr; use FI_WAIT_FD, FI_WAIT_UNSPEC or FI_WAIT_YIELD"
            )),
            ffi::FI_WAIT_NONE | ffi::FI_WAIT_SET => Err(fail!(
                ffi::FI_EINVAL,
                "fi_wait_open: wait_obj {wait_obj} (FI_WAIT_NONE / FI_WAIT_SET) cannot be a wait set's wait object; use FI_WAIT_FD, FI_WAIT_UNSPEC or FI_WAIT_YIELD"
            )),
            other => Err(fail!(ffi::FI_EINVAL, "fi_wait_open: unknown wait_obj {other}")),
        }
    }

    fn wait_fd() -> Result<WaitFd> {
        WaitFd::new()
            .map_err(|e| fail!(ffi::FI_EMFILE, "cannot create a wait fd: {e}; raise the open-files limit (ulimit -n)"))
    }

    fn with(fd: Option<WaitFd>, yields: bool) -> Waiter {
        Waiter {
            fd,
            yields,
            armed: true.into(),
            sleepers: Mutex::new(Vec::new()),
            polls: false.into(),
            parked: false.into(),
            parked_with: Mutex::new(Vec::new()),
            safety_ms: AtomicU64::new(u64::MAX),
            alone_quiet: false,
        }
    }

    /// Whether a blocking call spins with `sched_yield` (FI_WAIT_YIELD).
    pub fn yields(&self) -> bool {
        self.yields
    }

    /// The longest a sleep lasts when every endpoint can ring the fd.
    fn safety_tick(&self) -> Duration {
        match self.safety_ms.load(Ordering::Acquire) {
            u64::MAX => SAFETY_TICK,
            ms => Duration::from_millis(ms),
        }
    }

    /// An endpoint now feeds this object (fi_enable): watch its wake fd,
    /// or poll from now on if it has none. One attached twice counts once.
    /// `safety_tick`: the endpoint's FI_OXMR_WAIT_TICK_MS (the shortest
    /// of all attached is kept).
    pub fn attach(&self, s: Arc<dyn Sleeper>, safety_tick: Duration) {
        let Some(w) = &self.fd else { return };
        self.safety_ms.fetch_min(safety_tick.as_millis().clamp(1, u64::MAX as u128 - 1) as u64, Ordering::AcqRel);
        let mut v = self.sleepers.lock_ok();
        if v.iter().any(|x| Arc::ptr_eq(x, &s)) {
            return;
        }
        // (A retired sleeper's fd closed with it, which took it out of ours.)
        v.retain(|x| !x.retired());
        match s.wake_fd() {
            Some(fd) if w.watch(fd).is_ok() => v.push(s),
            _ => self.polls.store(true, Ordering::Release),
        }
    }

    /// Tell the sleepers a thread is about to sleep; returns them (to
    /// tell "awake" after) and whether the sleep may be long (every
    /// endpoint rings and is quiet). None: some endpoint cannot ring, or
    /// none is attached: poll.
    fn sleep_all(&self) -> Option<(Vec<Arc<dyn Sleeper>>, bool)> {
        if self.polls.load(Ordering::Acquire) {
            return None;
        }
        let v = self.sleepers.lock_ok().clone();
        if v.is_empty() {
            return self.alone_quiet.then_some((v, true));
        }
        // (Every one is told, quiet or not: each `sleep` pairs with an `awake`.)
        let quiet = v.iter().fold(true, |q, s| s.sleep() & q);
        Some((v, quiet))
    }

    /// A wait set is about to sleep on this object's fd (its member's):
    /// tell the endpoints that feed it, as a sleep of its own would. The
    /// Doze tells them "awake" when dropped. Not quiet where an endpoint
    /// cannot ring; with none attached, quiet (what the set's member
    /// decides beyond that, such as a counter bound only to MRs, is its
    /// own: `objects::wait_set`).
    pub fn doze(&self) -> Doze {
        if self.polls.load(Ordering::Acquire) {
            return Doze { slept: Vec::new(), quiet: false };
        }
        let slept = self.sleepers.lock_ok().clone();
        let quiet = slept.iter().fold(true, |q, s| s.sleep() & q);
        Doze { slept, quiet }
    }

    /// fi_trywait found nothing ready: tell the endpoints the application
    /// may now sleep on the fd, and arm its `SAFETY_TICK`. Where one cannot
    /// ring, or has work of its own pending, arm the short tick instead
    /// (`tick`).
    pub fn park(&self) {
        self.unpark();
        match self.sleep_all() {
            Some((v, quiet)) => {
                *self.parked_with.lock_ok() = v;
                self.parked.store(true, Ordering::Release);
                match (&self.fd, quiet) {
                    (Some(w), true) => w.tick(self.safety_tick()),
                    _ => self.tick(),
                }
            }
            None => self.tick(),
        }
    }

    /// The application woke after fi_trywait (it reads, or tries again):
    /// tell the endpoints parked by `park` that nobody sleeps any more.
    /// One load when nothing is parked (called on every read).
    #[inline]
    pub fn unpark(&self) {
        if self.parked.load(Ordering::Relaxed) {
            self.unpark_now();
        }
    }

    #[inline(never)]
    fn unpark_now(&self) {
        if self.parked.swap(false, Ordering::AcqRel) {
            let v = std::mem::take(&mut *self.parked_with.lock_ok());
            for s in v {
                s.awake();
            }
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

    /// fi_trywait found nothing ready, but an endpoint cannot ring the fd
    /// (or has work pending that only progress moves): make it readable
    /// within `TRYWAIT_TICK`; the application then reads (running
    /// progress) and tries again.
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
        // `ready()` runs manual progress. It is polled busily for the first
        // SPIN, as a blocked MPI rank or fabtests' sread expects
        // microsecond wakeups; then the thread sleeps on the fd, which
        // local events (a completion from another thread, fi_cq_signal)
        // and, when every bound endpoint can ring it, arrivals wake at
        // once (see the module header); otherwise it polls every TICK.
        const SPIN: Duration = Duration::from_micros(2000);
        self.unpark();
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
                // lands between the check and the poll is not lost; tell
                // the endpoints before re-checking, so an arrival after
                // the check rings (their side of the same pattern).
                self.clear();
                let slept = self.sleep_all();
                if ready() {
                    Self::awake_all(slept);
                    return true;
                }
                let nap = match &slept {
                    Some((_, true)) => self.safety_tick(),
                    _ => TICK,
                };
                let until = Instant::now() + nap;
                w.wait(Some(deadline.map_or(until, |d| d.min(until))));
                Self::awake_all(slept);
            }
        }
    }

    fn awake_all(slept: Option<(Vec<Arc<dyn Sleeper>>, bool)>) {
        for s in slept.into_iter().flat_map(|(v, _)| v) {
            s.awake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixDatagram;
    use std::sync::atomic::AtomicI32;

    /// An endpoint whose wake fd is one end of a socket pair.
    struct Fake {
        rx: UnixDatagram,
        rings: bool,
        /// Threads told "about to sleep" and not yet "awake".
        asleep: AtomicI32,
        quiet: bool,
    }

    impl Sleeper for Fake {
        fn wake_fd(&self) -> Option<RawFd> {
            self.rings.then(|| self.rx.as_raw_fd())
        }
        fn sleep(&self) -> bool {
            self.asleep.fetch_add(1, Ordering::SeqCst);
            self.quiet
        }
        fn awake(&self) {
            self.asleep.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn fake(rings: bool, quiet: bool) -> (Arc<Fake>, UnixDatagram) {
        let (tx, rx) = UnixDatagram::pair().unwrap();
        rx.set_nonblocking(true).unwrap();
        (Arc::new(Fake { rx, rings, asleep: 0.into(), quiet }), tx)
    }

    #[test]
    fn a_ringing_endpoint_wakes_a_sleeper_without_ticks() {
        let (f, tx) = fake(true, true);
        let w = Waiter::new(ffi::FI_WAIT_FD).unwrap();
        w.attach(f.clone(), SAFETY_TICK);
        w.attach(f.clone(), SAFETY_TICK); // (counts once)
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            tx.send(&[1]).unwrap();
        });
        let start = Instant::now();
        let spin_end = start + Duration::from_millis(3);
        let mut sleeps = 0;
        let mut b = [0u8; 4];
        let got = w.block_until(Some(start + Duration::from_secs(10)), || {
            if Instant::now() > spin_end {
                sleeps += 1;
            }
            f.rx.recv(&mut b).is_ok()
        });
        t.join().unwrap();
        assert!(got, "the ring woke it");
        assert!(start.elapsed() < Duration::from_secs(5));
        // (Each sleep checks twice: before and after telling the endpoint;
        // safety ticks every 100 ms, then the ring.)
        assert!(sleeps <= 20, "{sleeps} checks after the spin in 300 ms: it ticks");
        assert_eq!(f.asleep.load(Ordering::SeqCst), 0, "every sleep is paired with an awake");
    }

    #[test]
    fn a_sleeper_ticks_where_an_endpoint_cannot_ring_or_is_busy() {
        for (rings, quiet) in [(false, true), (true, false)] {
            let (f, tx) = fake(rings, quiet);
            let w = Waiter::new(ffi::FI_WAIT_FD).unwrap();
            w.attach(f.clone(), SAFETY_TICK);
            // Nothing rings: only the 1 ms tick ends each sleep, so a 50 ms
            // wait sleeps many times.
            let mut sleeps = 0;
            let spin_end = Instant::now() + Duration::from_millis(3);
            let got = w.block_until(Some(Instant::now() + Duration::from_millis(50)), || {
                if Instant::now() > spin_end {
                    sleeps += 1;
                }
                false
            });
            assert!(!got);
            assert!(sleeps > 10, "rings {rings}, quiet {quiet}: {sleeps} wake-ups in 47 ms, expected 1 ms ticks");
            assert_eq!(f.asleep.load(Ordering::SeqCst), 0);
            drop(tx);
        }
    }

    #[test]
    fn trywait_parks_the_endpoints_until_the_next_read() {
        let (f, _tx) = fake(true, true);
        let w = Waiter::new(ffi::FI_WAIT_FD).unwrap();
        w.attach(f.clone(), SAFETY_TICK);
        w.park();
        assert_eq!(f.asleep.load(Ordering::SeqCst), 1, "the application may sleep: ring");
        w.park();
        assert_eq!(f.asleep.load(Ordering::SeqCst), 1, "a second trywait parks once");
        w.unpark();
        assert_eq!(f.asleep.load(Ordering::SeqCst), 0);
        w.unpark();
        assert_eq!(f.asleep.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_doze_tells_the_endpoints_until_dropped() {
        let (f, _tx) = fake(true, true);
        let w = Waiter::new(ffi::FI_WAIT_SET).unwrap();
        assert!(w.fd().is_some(), "a wait set's member has an fd of its own");
        assert!(w.doze().quiet, "nothing attached: quiet");
        w.attach(f.clone(), SAFETY_TICK);
        let d = w.doze();
        assert!(d.quiet);
        assert_eq!(f.asleep.load(Ordering::SeqCst), 1);
        drop(d);
        assert_eq!(f.asleep.load(Ordering::SeqCst), 0);
        let (g, _tx2) = fake(false, true);
        w.attach(g.clone(), SAFETY_TICK);
        let d = w.doze();
        assert!(!d.quiet, "an endpoint that cannot ring: not quiet");
        assert_eq!(f.asleep.load(Ordering::SeqCst), 0, "(and nobody is told: the sleep ticks)");
    }

    #[test]
    fn an_empty_wait_set_sleeps_instead_of_ticking() {
        for (w, long) in
            [(Waiter::for_set(ffi::FI_WAIT_FD).unwrap(), true), (Waiter::new(ffi::FI_WAIT_FD).unwrap(), false)]
        {
            let mut looks = 0;
            let spin_end = Instant::now() + Duration::from_millis(3);
            let got = w.block_until(Some(Instant::now() + Duration::from_millis(50)), || {
                if Instant::now() > spin_end {
                    looks += 1;
                }
                false
            });
            assert!(!got);
            if long {
                assert!(looks <= 4, "{looks} looks in 47 ms: an empty set ticks");
            } else {
                assert!(looks > 10, "{looks} looks in 47 ms: a lone CQ ticks every 1 ms");
            }
        }
        assert!(Waiter::for_set(ffi::FI_WAIT_YIELD).unwrap().yields());
    }
}
