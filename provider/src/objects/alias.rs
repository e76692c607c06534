//! Endpoint aliases (fi_ep_alias, the FI_ALIAS command of fi_control on
//! an endpoint; fi_endpoint(3)): another `fid_ep` over the same endpoint,
//! which differs from it only by its default op flags. An alias is made
//! with FI_TRANSMIT or FI_RECV and the op flags for that direction; the
//! other direction's defaults are the endpoint's (whatever they are when
//! an operation is posted), until FI_SETOPSFLAG on the alias sets them.
//! Operations posted through the alias by the calls without flags of
//! their own use the alias's defaults (`Ep`'s `tx_op_flags` otherwise);
//! the `*msg` calls use their own flags, as on the endpoint.
//!
//! An alias's transmit defaults may include FI_TRIGGER (where the
//! endpoint has that capability): every operation posted through it is
//! then a triggered one, its context a `struct fi_triggered_context`. An
//! endpoint's own defaults may not (`attrs::TX_OP_FLAGS`): that is what
//! aliases are for. Triggered receives are not offered.
//!
//! An alias holds its endpoint: fi_close of the endpoint is -FI_EBUSY
//! while an alias is open (fi_endpoint(3): aliases are closed first);
//! closing an alias leaves the endpoint as it was.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use oxmr_ffi as ffi;

use super::ep::Ep;
use crate::error::Result;
use crate::fail;
use crate::info::attrs;
use oxmr_ffi::FidHeader;

/// A direction whose defaults are the endpoint's (no flag value is all
/// ones: libfabric's highest flag is 1 << 59).
const INHERIT: u64 = u64::MAX;

/// An endpoint alias.
#[repr(C)]
pub struct EpAlias {
    pub hdr: FidHeader<ffi::fid_ep>,
    pub d: OpDefaults,
}

impl EpAlias {
    /// An alias of `ep` whose defaults for the direction `flags` names
    /// are the rest of `flags`.
    pub fn new(hdr: FidHeader<ffi::fid_ep>, ep: Arc<Ep>, flags: u64) -> Result<Self> {
        let d = OpDefaults::new(ep, None);
        d.ops_flags("fi_ep_alias", flags, Some(flags))?;
        Ok(EpAlias { hdr, d })
    }
}

/// Which operations a `fid_ep` other than the endpoint's own takes: an
/// alias both directions, a scalable endpoint's transmit context
/// (`objects::sep`) only transmits, its receive context only receives.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Only {
    Transmit,
    Receive,
}

/// What a `fid_ep` over an endpoint adds to it: its own default op flags
/// (an alias's, a scalable endpoint's context's) and, for a context, the
/// one direction it takes operations for.
pub struct OpDefaults {
    pub ep: Arc<Ep>,
    tx: AtomicU64,
    rx: AtomicU64,
    only: Option<Only>,
}

impl OpDefaults {
    /// Defaults that are the endpoint's until set; `only` restricts the
    /// operations to one direction (a context of a scalable endpoint).
    pub fn new(ep: Arc<Ep>, only: Option<Only>) -> Self {
        OpDefaults { ep, tx: AtomicU64::new(INHERIT), rx: AtomicU64::new(INHERIT), only }
    }

    /// The one direction this fid takes operations for (None: both).
    pub fn only(&self) -> Option<Only> {
        self.only
    }

    /// `-FI_EOPNOTSUPP` with a log line when `call`, an operation of
    /// direction `dir`, is posted to a context of the other direction.
    pub fn allows(&self, dir: Only, call: &str) -> Result<()> {
        match self.only {
            Some(o) if o != dir => Err(fail!(
                ffi::FI_EOPNOTSUPP,
                "{call} on a scalable endpoint's {} context: post {} through a {} context (fi_{}_context)",
                if o == Only::Transmit { "transmit" } else { "receive" },
                if dir == Only::Transmit { "transmits" } else { "receives" },
                if dir == Only::Transmit { "transmit" } else { "receive" },
                if dir == Only::Transmit { "tx" } else { "rx" }
            )),
            _ => Ok(()),
        }
    }

    /// The transmit defaults of operations posted through the alias;
    /// None: the endpoint's.
    pub fn tx_flags(&self) -> Option<u64> {
        Some(self.tx.load(Ordering::Relaxed)).filter(|&f| f != INHERIT)
    }

    /// The receive defaults; None: the endpoint's.
    pub fn rx_flags(&self) -> Option<u64> {
        Some(self.rx.load(Ordering::Relaxed)).filter(|&f| f != INHERIT)
    }

    /// FI_GETOPSFLAG / FI_SETOPSFLAG on the alias (and fi_ep_alias's
    /// flags): `which` names FI_TRANSMIT or FI_RECV.
    pub fn ops_flags(&self, call: &str, which: u64, set: Option<u64>) -> Result<u64> {
        let dirs = ffi::FI_TRANSMIT as u64 | ffi::FI_RECV as u64;
        let tx = which & ffi::FI_TRANSMIT as u64 != 0;
        if which & dirs == 0 || which & dirs == dirs {
            return Err(fail!(
                ffi::FI_EINVAL,
                "{call}: name exactly one of FI_TRANSMIT or FI_RECV in the flags (got {which:#x})"
            ));
        }
        let dir = if tx { Only::Transmit } else { Only::Receive };
        if self.only.is_some_and(|o| o != dir) {
            return Err(fail!(
                ffi::FI_EINVAL,
                "{call}: {} flags on a scalable endpoint's {} context",
                if tx { "FI_TRANSMIT" } else { "FI_RECV" },
                if tx { "receive" } else { "transmit" }
            ));
        }
        let slot = if tx { &self.tx } else { &self.rx };
        let Some(flags) = set else {
            return match Some(slot.load(Ordering::Relaxed)).filter(|&f| f != INHERIT) {
                Some(f) => Ok(f),
                None => self.ep.ops_flags(which & dirs, None),
            };
        };
        let flags = flags & !dirs;
        let trigger = ffi::FI_TRIGGER as u64;
        if !tx && flags & trigger != 0 {
            return Err(fail!(
                ffi::FI_ENOSYS,
                "{call}: FI_TRIGGER with FI_RECV: oxmr has no triggered receives (triggered sends, RMA and atomics: FI_TRANSMIT)"
            ));
        }
        if tx && flags & trigger != 0 && self.ep.info.caps & trigger == 0 {
            return Err(fail!(
                ffi::FI_EINVAL,
                "{call}: FI_TRIGGER, but the endpoint was opened without the FI_TRIGGER capability (ask for it in fi_getinfo's hints)"
            ));
        }
        let allowed = if tx { attrs::TX_OP_FLAGS | trigger } else { attrs::RX_OP_FLAGS };
        if flags & !allowed != 0 {
            return Err(fail!(
                ffi::FI_EBADFLAGS,
                "{call}: op flags {:#x} are not supported as {} defaults",
                flags & !allowed,
                if tx { "transmit" } else { "receive" }
            ));
        }
        slot.store(flags, Ordering::Relaxed);
        Ok(flags)
    }
}
