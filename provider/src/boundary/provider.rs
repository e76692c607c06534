//! The provider struct libfabric loads, and its three entry points.

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_void};

use oxmr_ffi as ffi;

use super::{attr, guard_int, info, params, write_out};
use crate::info::{addr, getinfo};
use crate::objects::fabric::Fabric;

/// The provider name (`FI_PROVIDER=oxmr`).
pub(crate) const NAME: &std::ffi::CStr = c"oxmr";

/// `struct fi_provider`, in mutable static storage: the core writes its
/// bookkeeping into `context`.
struct ProviderCell(UnsafeCell<ffi::fi_provider>);

// SAFETY: oxmr never writes the struct after load; libfabric writes
// `context` under its own init lock before any other thread can use oxmr.
unsafe impl Sync for ProviderCell {}

static PROVIDER: ProviderCell = ProviderCell(UnsafeCell::new(ffi::fi_provider {
    version: crate::info::attrs::PROVIDER_VERSION,
    fi_version: ffi::FI_HEADER_VERSION,
    context: ffi::fi_context { internal: [std::ptr::null_mut(); 4] },
    name: NAME.as_ptr(),
    getinfo: Some(oxmr_getinfo),
    fabric: Some(oxmr_fabric),
    cleanup: Some(oxmr_cleanup),
}));

/// The provider struct's address (for fi_log, fi_param_*).
pub fn provider_ptr() -> *mut ffi::fi_provider {
    PROVIDER.0.get()
}

/// The entry point libfabric calls after dlopen.
///
/// It runs under the core's init lock: it only defines and reads
/// parameters and installs the log bridge.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut ffi::fi_provider {
    super::guard("fi_prov_ini", || {
        disable_util_layering();
        super::log::install();
        params::define_and_load();
        provider_ptr()
    })
}

/// Keep libfabric's utility providers (ofi_rxm, ofi_rxd) from stacking over
/// oxmr's MSG endpoints and hiding oxmr's own RDM endpoints behind
/// "oxmr;ofi_rxm" entries.
///
/// libfabric keeps per-provider flags in `fi_provider::context` as
/// `struct ofi_prov_context { enum ofi_prov_type type; bool
/// disable_logging; bool disable_layering; }` (include/ofi.h, unchanged from
/// 1.17 to 2.6) and sets `disable_layering` itself for shm, sockets, efa and
/// psm3, which have native RDM endpoints like oxmr. It never clears the
/// flag. An application can still ask for layering explicitly
/// (`FI_PROVIDER="oxmr;ofi_rxm"`).
fn disable_util_layering() {
    const DISABLE_LAYERING_OFFSET: usize = 5;
    const _: () = assert!(size_of::<ffi::fi_context>() > DISABLE_LAYERING_OFFSET);
    // SAFETY: the context is 32 bytes of storage owned by this static;
    // libfabric reads byte 5 as `bool disable_layering` (see above), and
    // fi_prov_ini runs before libfabric registers (reads) the provider.
    unsafe {
        let ctx = std::ptr::addr_of_mut!((*provider_ptr()).context) as *mut u8;
        ctx.add(DISABLE_LAYERING_OFFSET).write(1);
    }
}

unsafe extern "C" fn oxmr_getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const ffi::fi_info,
    out: *mut *mut ffi::fi_info,
) -> i32 {
    guard_int("fi_getinfo", || {
        // SAFETY: libfabric passes NULL or valid strings and hints.
        let (node, service, hints) = unsafe { (info::opt_str(node), info::opt_str(service), info::hints_from(hints)) };
        let ifaces = addr::local_ifaces(params::config().ifaces.as_deref());
        let req = getinfo::Request {
            version,
            node: node.as_deref(),
            service: service.as_deref(),
            flags,
            hints: hints.as_ref(),
            remote: params::config().wire != crate::config::Wire::Shm,
        };
        let list = getinfo::getinfo(&req, &ifaces)?;
        let c = info::list_to_c(&list);
        if c.is_null() {
            return Err(crate::fail!(ffi::FI_ENOMEM, "fi_getinfo: out of memory building the answer"));
        }
        // SAFETY: libfabric passes a valid out pointer.
        unsafe { write_out(out, c, "info") }?;
        Ok(0)
    })
}

unsafe extern "C" fn oxmr_fabric(
    attr_: *mut ffi::fi_fabric_attr,
    out: *mut *mut ffi::fid_fabric,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_fabric", || {
        // SAFETY: libfabric passes the application's attr.
        let a = unsafe { attr(attr_, "fi_fabric_attr") }?;
        // SAFETY: NULL or a C string.
        let name = unsafe { info::opt_str(a.name) }.unwrap_or_else(|| "oxmr".into());
        let api_version = a.api_version;
        // SAFETY: libfabric passes a valid out pointer.
        unsafe {
            super::hand_out(out, "fabric", || {
                let hdr = super::fabric::header(context, api_version);
                Ok(std::sync::Arc::new(Fabric { hdr, name, config: params::config().clone() }))
            })
        }
    })
}

unsafe extern "C" fn oxmr_cleanup() {
    super::guard("cleanup", || ())
}
