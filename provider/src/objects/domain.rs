//! Domain: one per interface (its name), parent of every data object.

use std::sync::Arc;

use oxmr_ffi as ffi;

use super::fabric::Fabric;
use crate::config::EnvKey;
use crate::error::Result;
use crate::fail;
use crate::info::getinfo::effective_mr_mode;
use crate::info::{attrs, Info};
use crate::mr::pin::Pinner;
use crate::mr::{account, MrDomain};
use crate::protocol::engine::DomainWires;
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
    /// What its endpoints share of the wires: the TCP wire's io_uring
    /// (SEND_ZC from registered memory) and send counters.
    pub wires: DomainWires,
    /// The job key its endpoints' connections prove (its `auth_key`, else
    /// FI_OXMR_AUTH_KEY/_FILE; None: peers are not authenticated).
    pub auth_key: Option<crate::auth::JobKey>,
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
        let auth_key = resolve_key(&[(&d.auth_key, "domain_attr")], &fabric.config.auth_key, "fi_domain")?;
        if auth_key.is_none() {
            tracing::info!(
                "fi_domain: no job key (auth_key, FI_OXMR_AUTH_KEY): cross-host peers of this domain's endpoints are not authenticated (docs/security.md)"
            );
        }
        let name = d.name.clone().unwrap_or_else(|| "oxmr".into());
        let mr_mode = effective_mr_mode(d.mr_mode);
        let cfg = fabric.config.clone();
        let (cap, source) = account::default_cap(cfg.max_pinned);
        let mut pinner = Pinner::new(cfg.pin_mode, account::Account::new(cap, source));
        pinner.phys_fallback = cfg.phys_fallback;
        pinner.sysfs = cfg.sysfs.clone();
        let mr = Arc::new(MrDomain::new(mr_mode, pinner, cfg.cache));
        let wires = DomainWires::new(&mr, cfg.tcp_io_uring);
        Ok(Domain {
            hdr,
            fabric,
            name,
            av_type: d.av_type,
            mr_mode,
            mr,
            wires,
            auth_key,
            progress: Default::default(),
            info,
        })
    }
}

/// The job key of an object: the first `auth_key` of `given` the
/// application passed (each with the attr's name for the log line), else
/// the environment's (`env`); an unusable one fails `call` with
/// -FI_EINVAL, never opening without the key the user meant to set.
pub(crate) fn resolve_key(
    given: &[(&Option<Vec<u8>>, &str)],
    env: &EnvKey,
    call: &str,
) -> Result<Option<crate::auth::JobKey>> {
    if let Some((k, what)) = given.iter().find_map(|(k, what)| k.as_ref().map(|k| (k, what))) {
        return crate::auth::JobKey::new(k)
            .map(Some)
            .map_err(|why| fail!(ffi::FI_EINVAL, "{call}: {what} auth_key: {why}"));
    }
    match env {
        EnvKey::Key(k) => Ok(Some(k.clone())),
        EnvKey::Bad(why) => Err(fail!(
            ffi::FI_EINVAL,
            "{call}: {why}; nothing opens with a job key it cannot use (fix or unset the variable)"
        )),
        EnvKey::None => Ok(None),
    }
}
