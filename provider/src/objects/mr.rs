//! Memory region object: a registration as the application holds it.
//!
//! Bindings from an MR (to an endpoint under FI_MR_ENDPOINT, to a counter
//! for remote-access events) are weak: libfabric applications (fabtests
//! among them) close endpoints and counters before their MRs, and that must
//! not fail with -FI_EBUSY.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use oxmr_ffi as ffi;

use super::cntr::Cntr;
use super::domain::Domain;
use super::ep::Ep;
use crate::error::Result;
use crate::fail;
use crate::mr::registry::Region;
use crate::sys::{SpinGuard, SpinLock};

/// What an MR is bound to.
#[derive(Default)]
pub struct MrState {
    pub ep: Option<Weak<Ep>>,
    /// Bound through a context of this scalable endpoint: binding it to
    /// another of its contexts is binding it to the same endpoint.
    pub sep: Option<Weak<super::sep::Sep>>,
    pub cntr: Option<Weak<Cntr>>,
}

/// A memory region: the registration itself (`mr::registry::Region`),
/// whose tail holds what the object layer keeps for it. One allocation
/// per registration; C's handle is its `face`.
///
/// cbindgen:ignore
pub type Mr = Region<MrTail>;

/// The object layer's part of an MR.
pub struct MrTail {
    pub domain: Arc<Domain>,
    state: SpinLock<MrState>,
}

impl MrTail {
    pub fn new(domain: Arc<Domain>) -> Self {
        MrTail { domain, state: SpinLock::new(MrState::default()) }
    }

    /// Parked (`mr::park`): closed, its bindings go.
    fn reset(&mut self) {
        *self.state.get_mut() = MrState::default();
    }
}

impl Region<MrTail> {
    /// The domain it was registered in.
    pub fn domain(&self) -> &Arc<Domain> {
        &self.tail.domain
    }

    /// fi_close: the key stops validating now; the region (and its pin)
    /// goes when the last in-flight access lets go of it.
    #[inline(always)]
    pub fn deregister(&self) -> Option<Arc<Region>> {
        self.tail.domain.mr.deregister(self)
    }

    /// fi_close, given C's reference: deregistered, then parked whole for
    /// the next registration of its range if it is a cache hit nothing
    /// else holds (`mr::park`), else dropped.
    #[inline(always)]
    pub fn close(self: Arc<Self>) {
        let keyed = self.deregister();
        crate::mr::park(self, keyed, MrTail::reset);
    }

    fn state(&self) -> SpinGuard<'_, MrState> {
        self.tail.state.lock()
    }

    /// fi_mr_bind to an endpoint (FI_MR_ENDPOINT).
    pub fn bind_ep(&self, ep: &Arc<Ep>, flags: u64) -> Result<()> {
        self.bind_ep_of(ep, None, flags)
    }

    /// fi_mr_bind to an endpoint, or to a context of scalable endpoint
    /// `sep` (whose index's endpoint `ep` is): an MR is bound to one
    /// endpoint, and every context of a scalable endpoint is that one.
    pub fn bind_ep_of(&self, ep: &Arc<Ep>, sep: Option<&Arc<super::sep::Sep>>, flags: u64) -> Result<()> {
        if flags != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_mr_bind(ep): flags {flags:#x}; pass 0"));
        }
        if !Arc::ptr_eq(&ep.domain, &self.tail.domain) {
            return Err(fail!(ffi::FI_EINVAL, "fi_mr_bind: the endpoint belongs to another domain"));
        }
        let mut s = self.state();
        let same_sep = match (&s.sep, sep) {
            (Some(had), Some(now)) => std::ptr::eq(had.as_ptr(), Arc::as_ptr(now)),
            _ => false,
        };
        if same_sep {
            return Ok(());
        }
        if s.ep.is_some() {
            return Err(fail!(ffi::FI_EINVAL, "fi_mr_bind: this MR is already bound to an endpoint"));
        }
        s.ep = Some(Arc::downgrade(ep));
        s.sep = sep.map(Arc::downgrade);
        Ok(())
    }

    /// fi_mr_bind to a counter counting remote accesses.
    pub fn bind_cntr(&self, cntr: &Arc<Cntr>, flags: u64) -> Result<()> {
        let known = (ffi::FI_REMOTE_WRITE | ffi::FI_REMOTE_READ) as u64;
        if flags == 0 || flags & !known != 0 {
            return Err(fail!(
                ffi::FI_EBADFLAGS,
                "fi_mr_bind(cntr): flags {flags:#x}; use FI_REMOTE_WRITE and/or FI_REMOTE_READ"
            ));
        }
        if !Arc::ptr_eq(&cntr.domain, &self.tail.domain) {
            return Err(fail!(ffi::FI_EINVAL, "fi_mr_bind: the counter belongs to another domain"));
        }
        let mut s = self.state();
        if s.cntr.is_some() {
            return Err(fail!(ffi::FI_EINVAL, "fi_mr_bind: this MR already has a counter"));
        }
        s.cntr = Some(Arc::downgrade(cntr));
        let events: Arc<dyn crate::mr::registry::RmaEvents> = cntr.core.clone();
        *self.cntr.lock() = Some((Arc::downgrade(&events), flags));
        Ok(())
    }

    /// fi_mr_enable.
    pub fn enable(&self) -> Result<()> {
        if self.tail.domain.mr_mode & ffi::FI_MR_ENDPOINT as i32 != 0 {
            // (Bound through a context of a scalable endpoint: bound while
            // the scalable endpoint lives, whichever of its contexts.)
            // (Counts, not upgrades: a temporary strong reference dropped
            // under this spin lock could be an endpoint's last, and run
            // its close here.)
            let s = self.state();
            let bound = s.ep.as_ref().is_some_and(|w| w.strong_count() > 0)
                || s.sep.as_ref().is_some_and(|w| w.strong_count() > 0);
            drop(s);
            if !bound {
                return Err(fail!(
                    ffi::FI_EINVAL,
                    "fi_mr_enable: under FI_MR_ENDPOINT an MR must be bound to an endpoint (fi_mr_bind) first"
                ));
            }
        }
        self.enabled.store(true, Ordering::Release);
        Ok(())
    }

    /// fi_mr_refresh (FI_MR_MMU_NOTIFY): pin the pages now mapped there.
    pub fn refresh(&self) -> Result<()> {
        // The memory mapped now is what the application registers: a
        // revocation of the old memory (cache invariant 7) no longer
        // applies, and one of the new memory will (see `refresh_region`).
        self.tail.domain.mr.refresh_region(self)
    }
}
