//! A spin lock for the short, hot critical sections of the data path (an
//! engine's progress call, a CQ's queue).
//!
//! `std::sync::Mutex` releases with an atomic swap (it must learn whether a
//! waiter sleeps), and on x86 every locked instruction waits for the store
//! buffer to drain: after a message is written into a peer's queue (a
//! cache line the peer's core holds), that unlock stalls until the line
//! arrives. This lock releases with a plain release store, so a lock and
//! unlock cost one locked instruction instead of two (what that bought is in
//! docs/benchmarks.md, "Spin lock").
//!
//! Waiters spin briefly, then yield, then sleep in short naps: nothing here
//! is held for long except an engine copying a large transfer (at most a
//! few milliseconds), and a waiting thread must not burn a core forever if
//! the holder is descheduled. There is no poisoning: a panic is caught at
//! the C boundary, and the guard's drop releases the lock while unwinding.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Spins before the first yield, and yields before the first nap.
const SPINS: u32 = 128;
const YIELDS: u32 = 1024;
const NAP: Duration = Duration::from_micros(20);

/// A mutual-exclusion lock that releases with a plain store.
#[derive(Default)]
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and one guard exists
// at a time (the `locked` flag, acquired with Acquire, released with
// Release), exactly as for a Mutex.
unsafe impl<T: Send> Sync for SpinLock<T> {}
// SAFETY: moving the lock moves the value; no guard can be alive then.
unsafe impl<T: Send> Send for SpinLock<T> {}

/// Access to a locked value; unlocks when dropped.
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> SpinLock<T> {
    pub const fn new(value: T) -> Self {
        SpinLock { locked: AtomicBool::new(false), value: UnsafeCell::new(value) }
    }

    /// Lock, waiting as long as it takes.
    #[inline]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_contended();
        }
        SpinGuard { lock: self }
    }

    /// The value, through exclusive access to the lock (no locking).
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// Lock if free now.
    pub fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then_some(SpinGuard { lock: self })
    }

    #[cold]
    fn lock_contended(&self) {
        let mut tries = 0u32;
        loop {
            // Wait with plain loads (the line stays shared), then try.
            while self.locked.load(Ordering::Relaxed) {
                if tries < SPINS {
                    std::hint::spin_loop();
                } else if tries < SPINS + YIELDS {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(NAP);
                }
                tries = tries.saturating_add(1);
            }
            if self.locked.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return;
            }
        }
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock (see `Sync` above).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard holds the lock, and `&mut self` makes this the
        // only reference through it.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn excludes_across_threads() {
        // Each thread adds in two steps with a yield between: without
        // mutual exclusion increments are lost.
        let l = Arc::new(SpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        let mut g = l.lock();
                        let v = *g;
                        std::thread::yield_now();
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*l.lock(), 8000);
    }

    #[test]
    fn try_lock_fails_while_held_and_unwinding_releases() {
        let l = Arc::new(SpinLock::new(1));
        {
            let _g = l.lock();
            assert!(l.try_lock().is_none(), "held: try_lock must fail");
        }
        assert!(l.try_lock().is_some(), "released when the guard dropped");
        let l2 = l.clone();
        let r = std::thread::spawn(move || {
            let _g = l2.lock();
            panic!("while holding the lock");
        })
        .join();
        assert!(r.is_err());
        assert_eq!(*l.try_lock().expect("a panic while held releases the lock"), 1);
    }
}
