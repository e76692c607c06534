//! Counter: a success count and an error count, with a blocking wait.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use oxmr_ffi as ffi;

use super::domain::Domain;
use super::wait::{deadline, Waiter};
use crate::error::{Error, Result};
use crate::fail;
use oxmr_ffi::FidHeader;

/// A counter.
#[repr(C)]
pub struct Cntr {
    pub hdr: FidHeader<ffi::fid_cntr>,
    pub domain: Arc<Domain>,
    value: AtomicU64,
    errors: AtomicU64,
    waiter: Waiter,
    /// Endpoints whose progress reading this counter drives.
    pub progress: super::progress::ProgressList,
}

impl Cntr {
    /// Build from `fi_cntr_attr` fields.
    pub fn new(hdr: FidHeader<ffi::fid_cntr>, domain: Arc<Domain>, attr: &ffi::fi_cntr_attr) -> Result<Self> {
        if attr.events != ffi::FI_CNTR_EVENTS_COMP {
            return Err(fail!(ffi::FI_ENOSYS, "counter events {} not supported; use FI_CNTR_EVENTS_COMP", attr.events));
        }
        if attr.flags != 0 {
            return Err(fail!(ffi::FI_EINVAL, "fi_cntr_attr flags {:#x} not supported; pass 0", attr.flags));
        }
        Ok(Cntr {
            hdr,
            domain,
            value: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            waiter: Waiter::new(attr.wait_obj)?,
            progress: Default::default(),
        })
    }

    fn drive(&self) {
        if self.progress.is_empty() {
            // Bound to MRs only (remote-access events): drive the domain.
            self.domain.progress.run();
        } else {
            self.progress.run();
        }
    }

    /// fi_cntr_read (drives manual progress first).
    pub fn read(&self) -> u64 {
        self.drive();
        self.value.load(Ordering::Acquire)
    }

    /// fi_cntr_readerr (drives manual progress first).
    pub fn readerr(&self) -> u64 {
        self.drive();
        self.errors.load(Ordering::Acquire)
    }

    pub fn add(&self, v: u64) {
        self.value.fetch_add(v, Ordering::AcqRel);
        self.waiter.notify();
    }

    pub fn set(&self, v: u64) {
        self.value.store(v, Ordering::Release);
        self.waiter.notify();
    }

    pub fn adderr(&self, v: u64) {
        self.errors.fetch_add(v, Ordering::AcqRel);
        self.waiter.notify();
    }

    pub fn seterr(&self, v: u64) {
        self.errors.store(v, Ordering::Release);
        self.waiter.notify();
    }

    /// `fi_cntr_wait`: until the count reaches `threshold` (0), the error
    /// count changes (-FI_EAVAIL), or the timeout passes (-FI_ETIMEDOUT).
    pub fn wait(&self, threshold: u64, timeout_ms: i32) -> Result<()> {
        // (The error count before any progress: an error that progress
        // counts must end the wait.)
        let errs = self.errors.load(Ordering::Acquire);
        let ok = self.waiter.block_until(deadline(timeout_ms), || self.read() >= threshold || self.readerr() != errs);
        if self.read() >= threshold {
            Ok(())
        } else if ok {
            Err(Error::quiet(ffi::FI_EAVAIL))
        } else {
            Err(Error::quiet(ffi::FI_ETIMEDOUT))
        }
    }

    /// The pollable fd (`FI_GETWAIT`).
    pub fn wait_fd(&self) -> Option<i32> {
        self.waiter.fd()
    }

    /// fi_trywait: run progress, clear the fd, and arm its tick (peers
    /// cannot wake it: `Waiter::tick`). The application knows the value
    /// it waits for, so nothing here is "ready"; it reads the counter when
    /// the fd wakes it.
    pub fn trywait(&self) {
        self.drive();
        self.waiter.clear();
        if !self.progress.is_empty() || !self.domain.progress.is_empty() {
            self.waiter.tick();
        }
    }
}
