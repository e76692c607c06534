//! oxmr's `FI_OXMR_*` variables: defined with `fi_param_define` (so
//! `fi_info -e` lists them with their help) and read once, in fi_prov_ini.

use std::ffi::{c_char, c_void, CStr};
use std::sync::OnceLock;

use oxmr_ffi as ffi;

use super::provider::provider_ptr;

/// One variable: `name` is the suffix after `FI_OXMR_`, lower case.
pub struct ParamDef {
    pub name: &'static CStr,
    pub kind: ffi::fi_param_type,
    pub help: &'static CStr,
}

/// Every variable oxmr reads. The README's variable table lists the same
/// names (a test checks it).
pub const PARAMS: &[ParamDef] = &[
    ParamDef {
        name: c"iface",
        kind: ffi::FI_PARAM_STRING,
        help: c"Comma-separated network interfaces fi_getinfo offers, e.g. 'lo' or 'eth0,eth1' (default: every interface that is up)",
    },
    ParamDef {
        name: c"mr_pin",
        kind: ffi::FI_PARAM_STRING,
        help: c"How registrations hold their pages: uring (io_uring fixed buffers, a long-term pin like ibv_reg_mr), mlock, or none (default: uring, falling back to mlock where io_uring is unavailable)",
    },
    ParamDef {
        name: c"mr_max_pinned",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"Cap on bytes oxmr keeps pinned in this process (default: the RLIMIT_MEMLOCK soft limit; unlimited when that is unlimited or with CAP_IPC_LOCK)",
    },
];

/// The values read at load time.
#[derive(Debug)]
pub struct Config {
    /// FI_OXMR_IFACE.
    pub ifaces: Option<Vec<String>>,
    /// FI_OXMR_MR_PIN.
    pub pin_mode: crate::mr::pin::PinMode,
    /// FI_OXMR_MR_MAX_PINNED.
    pub max_pinned: Option<u64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ifaces: None,
            pin_mode: crate::mr::pin::PinMode::Uring,
            max_pinned: None,
        }
    }
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The configuration (defaults when oxmr was not loaded by libfabric).
pub fn config() -> &'static Config {
    CONFIG.get_or_init(Config::default)
}

fn get_str(name: &CStr) -> Option<String> {
    let mut v: *mut c_char = std::ptr::null_mut();
    // SAFETY: a string parameter writes a `char *` (owned by libfabric's
    // environment copy) into `v`; we copy it out at once.
    let r = unsafe {
        ffi::fi_param_get(
            provider_ptr(),
            name.as_ptr(),
            (&mut v as *mut *mut c_char).cast::<c_void>(),
        )
    };
    if r != 0 || v.is_null() {
        return None;
    }
    // SAFETY: non-NULL NUL-terminated string from libfabric.
    Some(unsafe { CStr::from_ptr(v) }.to_string_lossy().into_owned())
}

fn get_size(name: &CStr) -> Option<usize> {
    let mut v: usize = 0;
    // SAFETY: a size_t parameter writes one size_t into `v`.
    let r = unsafe {
        ffi::fi_param_get(
            provider_ptr(),
            name.as_ptr(),
            (&mut v as *mut usize).cast::<c_void>(),
        )
    };
    (r == 0).then_some(v)
}

/// Define every variable and read them (fi_prov_ini).
pub fn define_and_load() {
    for p in PARAMS {
        // SAFETY: static NUL-terminated strings; "%s" consumes the one
        // vararg, so help text is never interpreted as a format.
        unsafe {
            ffi::fi_param_define(
                provider_ptr(),
                p.name.as_ptr(),
                p.kind,
                c"%s".as_ptr(),
                p.help.as_ptr(),
            );
        }
    }
    let ifaces = get_str(c"iface").map(|s| {
        s.split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect()
    });
    let pin_mode =
        crate::mr::pin::PinMode::parse(get_str(c"mr_pin").as_deref()).unwrap_or_else(|why| {
            tracing::warn!("{why}; using uring");
            crate::mr::pin::PinMode::Uring
        });
    let max_pinned = get_size(c"mr_max_pinned").map(|v| v as u64);
    let _ = CONFIG.set(Config {
        ifaces,
        pin_mode,
        max_pinned,
    });
}
