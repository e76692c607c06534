//! Locking a `std::sync` lock that a panicking thread may have poisoned:
//! [`LockExt::lock_ok`], [`RwLockExt::read_ok`] and [`RwLockExt::write_ok`]
//! take the lock and, if it is poisoned, go on with the guard anyway.
//!
//! Why poisoning is ignored: a panic inside oxmr never ends the process. It
//! is caught at the C boundary (`boundary::guard`), logged, and the call
//! returns `-FI_EOTHER`, while the application goes on using its objects.
//! If a lock stayed poisoned, every later call on that object (a CQ read,
//! an endpoint's send, its `fi_close`) would fail or panic in turn, so one
//! bug would become an object that can never be used or closed again (its
//! memory, fds and registrations never freed). The data behind these locks
//! is kept valid step by step (a list pushed to or taken from, a state
//! value replaced whole), so what a panicking holder left is a consistent
//! state, not a torn one; the panic itself is already reported. This is
//! what oxmr did at each lock before (`unwrap_or_else(|p| p.into_inner())`),
//! said once. The data path's [`SpinLock`](super::SpinLock) does not poison
//! at all, for the same reason.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `Mutex::lock` that keeps going past poisoning (see the module doc).
pub trait LockExt<T: ?Sized> {
    /// Lock, taking the guard even if a panicking holder poisoned the lock.
    fn lock_ok(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    #[inline]
    fn lock_ok(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `RwLock::read`/`write` that keep going past poisoning (see the module doc).
pub trait RwLockExt<T: ?Sized> {
    /// Lock for reading, even if a panicking writer poisoned the lock.
    fn read_ok(&self) -> RwLockReadGuard<'_, T>;
    /// Lock for writing, even if a panicking writer poisoned the lock.
    fn write_ok(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    #[inline]
    fn read_ok(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(|p| p.into_inner())
    }

    #[inline]
    fn write_ok(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_mutex_still_locks_with_what_the_holder_left() {
        let m = Mutex::new(vec![1]);
        let r = std::panic::catch_unwind(|| {
            let mut g = m.lock().unwrap();
            g.push(2);
            panic!("holder panics");
        });
        assert!(r.is_err());
        assert!(m.is_poisoned());
        m.lock_ok().push(3);
        assert_eq!(*m.lock_ok(), [1, 2, 3]);
    }

    #[test]
    fn a_poisoned_rwlock_still_reads_and_writes() {
        let l = RwLock::new(1);
        let r = std::panic::catch_unwind(|| {
            let mut g = l.write().unwrap();
            *g = 2;
            panic!("writer panics");
        });
        assert!(r.is_err());
        assert!(l.is_poisoned());
        *l.write_ok() += 1;
        assert_eq!(*l.read_ok(), 3);
    }
}
