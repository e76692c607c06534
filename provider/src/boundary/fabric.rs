//! fid_fabric: open domains, passive endpoints and EQs; fi_trywait.

use std::ffi::c_void;
use std::sync::Arc;

use oxmr_ffi as ffi;

use super::fid::{self, borrow, fid_header, FidHeader};
use super::{attr, common, guard_int, hand_out, info};
use crate::fail;
use crate::objects::{cq::Cq, domain::Domain, eq::Eq, fabric::Fabric, pep::Pep};

pub static FABRIC_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(common::bind),
    control: Some(common::control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

static FABRIC_OPS: ffi::fi_ops_fabric = ffi::fi_ops_fabric {
    size: size_of::<ffi::fi_ops_fabric>(),
    domain: Some(domain),
    passive_ep: Some(passive_ep),
    eq_open: Some(eq_open),
    wait_open: Some(wait_open),
    trywait: Some(trywait),
    domain2: Some(domain2),
};

crate::fid_object!(Fabric, hdr, ffi::FI_CLASS_FABRIC, "fabric", FABRIC_FI_OPS);

/// The C header of a new fabric.
pub fn header(context: *mut c_void, api_version: u32) -> FidHeader<ffi::fid_fabric> {
    FidHeader(ffi::fid_fabric {
        fid: fid_header::<Fabric>(context),
        ops: &FABRIC_OPS as *const _ as *mut _,
        api_version,
    })
}

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    // SAFETY: libfabric passes the fid it got from us.
    guard_int("fi_close(fabric)", || unsafe { fid::close::<Fabric>(f, |_| Ok(())) }.map(|_| 0))
}

unsafe extern "C" fn domain(
    fabric: *mut ffi::fid_fabric,
    info_: *mut ffi::fi_info,
    out: *mut *mut ffi::fid_domain,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_domain", || {
        // SAFETY: fids and infos come from the application per the API.
        let f = unsafe { fid::retain::<Fabric>(fabric.cast()) }?;
        // SAFETY: as above.
        let i = unsafe { info::info_from(info_) }.ok_or_else(|| fail!(ffi::FI_EINVAL, "fi_domain: NULL info"))?;
        // SAFETY: out pointer from the application.
        unsafe { hand_out(out, "domain", || Ok(Arc::new(Domain::new(super::domain::header(context), f, i)?))) }
    })
}

unsafe extern "C" fn domain2(
    fabric: *mut ffi::fid_fabric,
    info_: *mut ffi::fi_info,
    out: *mut *mut ffi::fid_domain,
    flags: u64,
    context: *mut c_void,
) -> i32 {
    if flags != 0 {
        return guard_int("fi_domain2", || {
            Err(fail!(ffi::FI_ENOSYS, "fi_domain2 flags {flags:#x} (peer domains) are not supported"))
        });
    }
    // SAFETY: same contract as fi_domain.
    unsafe { domain(fabric, info_, out, context) }
}

unsafe extern "C" fn passive_ep(
    fabric: *mut ffi::fid_fabric,
    info_: *mut ffi::fi_info,
    out: *mut *mut ffi::fid_pep,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_passive_ep", || {
        // SAFETY: application-provided fid and info.
        let f = unsafe { fid::retain::<Fabric>(fabric.cast()) }?;
        // SAFETY: as above.
        let i = unsafe { info::info_from(info_) }.ok_or_else(|| fail!(ffi::FI_EINVAL, "fi_passive_ep: NULL info"))?;
        // SAFETY: out pointer from the application.
        unsafe {
            hand_out(out, "pep", || {
                Ok(Arc::new(Pep::new(super::pep::header(context), f, i, super::pep::publish_request)?))
            })
        }
    })
}

unsafe extern "C" fn eq_open(
    fabric: *mut ffi::fid_fabric,
    attr_: *mut ffi::fi_eq_attr,
    out: *mut *mut ffi::fid_eq,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_eq_open", || {
        // SAFETY: application-provided fid and attr.
        let f = unsafe { fid::retain::<Fabric>(fabric.cast()) }?;
        // SAFETY: as above.
        let a = unsafe { attr(attr_, "fi_eq_attr") }?;
        if !a.wait_set.is_null() && a.wait_obj == ffi::FI_WAIT_SET {
            return Err(fail!(ffi::FI_ENOSYS, "wait sets are not supported by oxmr"));
        }
        // SAFETY: out pointer from the application.
        unsafe { hand_out(out, "eq", || Ok(Arc::new(Eq::new(super::eq::header(context), f, a)?))) }
    })
}

crate::enosys!(wait_open, "fi_wait_open", (fabric: *mut ffi::fid_fabric, attr: *mut ffi::fi_wait_attr, waitset: *mut *mut ffi::fid_wait) -> i32);

unsafe extern "C" fn trywait(fabric: *mut ffi::fid_fabric, fids: *mut *mut ffi::fid, count: i32) -> i32 {
    guard_int("fi_trywait", || {
        // SAFETY: application-provided fabric fid.
        unsafe { borrow::<Fabric>(fabric.cast()) }?;
        if count < 0 || (count > 0 && fids.is_null()) {
            return Err(fail!(ffi::FI_EINVAL, "fi_trywait: bad fid array"));
        }
        for i in 0..count as usize {
            // SAFETY: `fids` has `count` entries.
            let f = unsafe { *fids.add(i) };
            // SAFETY: each entry is a fid from the application.
            unsafe {
                if fid::is::<Cq>(f) {
                    borrow::<Cq>(f)?.trywait()?;
                } else if fid::is::<Eq>(f) {
                    borrow::<Eq>(f)?.trywait()?;
                } else if fid::is::<crate::objects::cntr::Cntr>(f) {
                    borrow::<crate::objects::cntr::Cntr>(f)?.trywait();
                } else {
                    return Err(fail!(ffi::FI_EINVAL, "fi_trywait: fid {i} is not an oxmr CQ, EQ or counter"));
                }
            }
        }
        Ok(0)
    })
}
