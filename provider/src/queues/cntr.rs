//! A counter's core: its value and error count, and how a wait on it
//! blocks. `objects::Cntr` wraps it with its fid and the progress a read
//! drives; the engine and registrations bound with FI_RMA_EVENT count into
//! it.

use std::sync::atomic::{AtomicU64, Ordering};

use super::wait::Waiter;
use crate::error::Result;

/// A counter's values.
pub struct Counter {
    value: AtomicU64,
    errors: AtomicU64,
    /// `fi_cntr_set`/`fi_cntr_seterr` calls: the only way a value can go
    /// back, so a poll set that compares (resets, value, errors) never
    /// misses a change (`objects::poll`), and the data path's counting
    /// costs nothing more.
    resets: AtomicU64,
    /// How `fi_cntr_wait` blocks, and the fd `FI_GETWAIT` hands out.
    pub waiter: Waiter,
}

impl Counter {
    /// A counter at zero, blocking as `wait_obj` (`enum fi_wait_obj`) says.
    pub fn new(wait_obj: u32) -> Result<Self> {
        Ok(Counter {
            value: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            waiter: Waiter::new(wait_obj)?,
        })
    }

    /// The count now (no progress).
    pub fn value(&self) -> u64 {
        self.value.load(Ordering::Acquire)
    }

    /// The error count now (no progress).
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Acquire)
    }

    /// How many times a value was set (`set`, `seterr`); read it before
    /// the values (each set bumps it after its store).
    pub fn resets(&self) -> u64 {
        self.resets.load(Ordering::Acquire)
    }

    pub fn add(&self, v: u64) {
        self.value.fetch_add(v, Ordering::AcqRel);
        self.waiter.notify();
    }

    pub fn set(&self, v: u64) {
        self.value.store(v, Ordering::Release);
        self.resets.fetch_add(1, Ordering::AcqRel);
        self.waiter.notify();
    }

    pub fn adderr(&self, v: u64) {
        self.errors.fetch_add(v, Ordering::AcqRel);
        self.waiter.notify();
    }

    pub fn seterr(&self, v: u64) {
        self.errors.store(v, Ordering::Release);
        self.resets.fetch_add(1, Ordering::AcqRel);
        self.waiter.notify();
    }
}

/// A registration bound to a counter (fi_mr_bind with FI_REMOTE_READ /
/// FI_REMOTE_WRITE, FI_RMA_EVENT) counts each remote access that took
/// effect.
impl crate::mr::registry::RmaEvents for Counter {
    fn remote_access(&self) {
        self.add(1);
    }
}
