//! Counter: a success count and an error count, with a blocking wait.

use std::sync::Arc;

use oxmr_ffi as ffi;

use super::domain::Domain;
use super::wait_set::WaitSet;
use crate::error::{Error, Result};
use crate::fail;
use crate::queues::cntr::Counter;
use crate::queues::wait::deadline;
use oxmr_ffi::FidHeader;

/// What a poll set remembers of a counter: any change of the values since
/// the last look changes it (values only grow, except through
/// `fi_cntr_set`/`fi_cntr_seterr`, which `resets` counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CntrState {
    pub resets: u64,
    pub value: u64,
    pub errors: u64,
}

/// A counter.
#[repr(C)]
pub struct Cntr {
    pub hdr: FidHeader<ffi::fid_cntr>,
    pub domain: Arc<Domain>,
    /// The values, which the engine and bound registrations count into.
    pub core: Arc<Counter>,
    /// Endpoints whose progress reading this counter drives.
    pub progress: super::progress::ProgressList,
    /// The wait set it signals (`FI_WAIT_SET`), held while the counter lives.
    pub wait_set: Option<Arc<WaitSet>>,
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
            core: Arc::new(Counter::new(attr.wait_obj)?),
            progress: Default::default(),
            wait_set: None,
        })
    }

    /// fi_cntr_open: build, and join `wait_set` (`FI_WAIT_SET`: the
    /// boundary resolved `fi_cntr_attr.wait_set`).
    pub fn open(
        hdr: FidHeader<ffi::fid_cntr>,
        domain: Arc<Domain>,
        attr: &ffi::fi_cntr_attr,
        wait_set: Option<Arc<WaitSet>>,
    ) -> Result<Arc<Self>> {
        let c = Arc::new(Cntr { wait_set: wait_set.clone(), ..Cntr::new(hdr, domain, attr)? });
        if let Some(s) = wait_set {
            s.join_cntr(&c)?;
        }
        Ok(c)
    }

    fn drive(&self) {
        self.core.waiter.unpark();
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
        self.core.value()
    }

    /// fi_cntr_readerr (drives manual progress first).
    pub fn readerr(&self) -> u64 {
        self.drive();
        self.core.errors()
    }

    /// fi_poll: drive manual progress once, then what a poll set compares
    /// with what it saw last (`objects::poll`).
    pub fn poll_state(&self) -> CntrState {
        self.drive();
        // `resets` first: a set between these loads shows in the next look.
        let resets = self.core.resets();
        CntrState { resets, value: self.core.value(), errors: self.core.errors() }
    }

    pub fn add(&self, v: u64) {
        self.core.add(v);
    }

    pub fn set(&self, v: u64) {
        self.core.set(v);
    }

    pub fn adderr(&self, v: u64) {
        self.core.adderr(v);
    }

    pub fn seterr(&self, v: u64) {
        self.core.seterr(v);
    }

    /// `fi_cntr_wait`: until the count reaches `threshold` (0), the error
    /// count changes (-FI_EAVAIL), or the timeout passes (-FI_ETIMEDOUT).
    pub fn wait(&self, threshold: u64, timeout_ms: i32) -> Result<()> {
        // (The error count before any progress: an error that progress
        // counts must end the wait.)
        let errs = self.core.errors();
        let ok =
            self.core.waiter.block_until(deadline(timeout_ms), || self.read() >= threshold || self.readerr() != errs);
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
        self.core.waiter.fd()
    }

    /// fi_trywait: run progress, clear the fd, and tell the endpoints
    /// bound here the application may sleep on it (`Waiter::park`; a
    /// counter bound to MRs only drives the whole domain, whose endpoints
    /// it does not watch: its tick is armed). The application knows the
    /// value it waits for, so nothing here is "ready"; it reads the
    /// counter when the fd wakes it.
    pub fn trywait(&self) {
        self.drive();
        self.core.waiter.clear();
        if !self.progress.is_empty() {
            self.core.waiter.park();
        } else if !self.domain.progress.is_empty() {
            self.core.waiter.tick();
        }
    }
}
