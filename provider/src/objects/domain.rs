//! Domain: one per interface (its name), parent of every data object.

use std::sync::Arc;

use oxmr_ffi as ffi;

use super::fabric::Fabric;
use crate::error::Result;
use crate::fail;
use crate::info::getinfo::effective_mr_mode;
use crate::info::{attrs, Info};
use crate::mr::pin::Pinner;
use crate::mr::{account, MrDomain};
use oxmr_ffi::FidHeader;

/// A domain.
#[repr(C)]
pub struct Domain {
    pub hdr: FidHeader<ffi::fid_domain>,
    pub fabric: Arc<Fabric>,
    pub name: String,
    /// The info the domain was opened with (attrs filled from oxmr's template).
    pub info: Info,
    /// FI_AV_UNSPEC, FI_AV_MAP or FI_AV_TABLE, as the application asked.
    pub av_type: u32,
    /// mr_mode bits in force (FI_MR_BASIC expanded to its three bits).
    pub mr_mode: i32,
    /// Registrations: keys, pins, accounting.
    pub mr: Arc<MrDomain>,
    /// Every enabled endpoint of the domain (a counter bound to an MR has no
    /// endpoint of its own to drive).
    pub progress: super::progress::ProgressList,
}

impl Domain {
    /// Validate the info against what oxmr offers and build the domain.
    pub fn new(hdr: FidHeader<ffi::fid_domain>, fabric: Arc<Fabric>, info: Info) -> Result<Self> {
        let d = &info.domain;
        if d.mr_mode & !(attrs::MR_MODES | ffi::legacy::MR_BASIC | ffi::legacy::MR_SCALABLE) != 0 {
            return Err(fail!(
                ffi::FI_ENODATA,
                "fi_domain: mr_mode {:#x} has bits oxmr cannot honour ({:#x}); pass the mr_mode fi_getinfo returned",
                d.mr_mode,
                d.mr_mode & !attrs::MR_MODES
            ));
        }
        if d.data_progress == ffi::FI_PROGRESS_AUTO || d.control_progress == ffi::FI_PROGRESS_AUTO {
            return Err(fail!(
                ffi::FI_ENODATA,
                "fi_domain: FI_PROGRESS_AUTO is not supported; oxmr uses FI_PROGRESS_MANUAL"
            ));
        }
        if d.auth_key_size > 0 {
            return Err(fail!(ffi::FI_ENOSYS, "fi_domain: authorization keys are not supported"));
        }
        let name = d.name.clone().unwrap_or_else(|| "oxmr".into());
        let mr_mode = effective_mr_mode(d.mr_mode);
        let cfg = fabric.config.clone();
        let (cap, source) = account::default_cap(cfg.max_pinned);
        let mut pinner = Pinner::new(cfg.pin_mode, account::Account::new(cap, source));
        pinner.phys_fallback = cfg.phys_fallback;
        pinner.sysfs = cfg.sysfs.clone();
        Ok(Domain {
            hdr,
            fabric,
            name,
            av_type: d.av_type,
            mr_mode,
            mr: Arc::new(MrDomain::new(mr_mode, pinner, cfg.cache).with_tcp_io_uring(cfg.tcp_io_uring)),
            progress: Default::default(),
            info,
        })
    }
}
