//! fid_fabric: open domains, passive endpoints, EQs and wait sets; fi_trywait.

use std::ffi::c_void;
use std::sync::Arc;

use oxmr_ffi as ffi;

use super::fid::{fid_header, from_fid, FidHeader};
use super::{attr, common, guard_int, hand_out, info};
use crate::fail;
use crate::objects::{cq::Cq, domain::Domain, eq::Eq, fabric::Fabric, pep::Pep, wait_set::WaitSet};

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
    guard_int("fi_close(fabric)", || from_fid!(close Fabric, f, |_| Ok(())).map(|_| 0))
}

unsafe extern "C" fn domain(
    fabric: *mut ffi::fid_fabric,
    info_: *mut ffi::fi_info,
    out: *mut *mut ffi::fid_domain,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_domain", || {
        let f = from_fid!(retain Fabric, fabric)?;
        // SAFETY: fi_domain(3)'s `info` is NULL (refused) or an fi_info the
        // application got from fi_getinfo or fi_dupinfo (info_from's contract).
        let i = unsafe { info::info_from(info_) }.ok_or_else(|| fail!(ffi::FI_EINVAL, "fi_domain: NULL info"))?;
        // SAFETY: `out` is the call's out-parameter: NULL (refused by
        // hand_out) or writable for one pointer.
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
    // SAFETY: fi_domain2's `info` and `domain` (`out`) are fi_domain's,
    // which is what `domain` requires of them.
    unsafe { domain(fabric, info_, out, context) }
}

unsafe extern "C" fn passive_ep(
    fabric: *mut ffi::fid_fabric,
    info_: *mut ffi::fi_info,
    out: *mut *mut ffi::fid_pep,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_passive_ep", || {
        let f = from_fid!(retain Fabric, fabric)?;
        // SAFETY: fi_passive_ep(3)'s `info` is NULL (refused) or an fi_info
        // the application got from fi_getinfo or fi_dupinfo (info_from's contract).
        let i = unsafe { info::info_from(info_) }.ok_or_else(|| fail!(ffi::FI_EINVAL, "fi_passive_ep: NULL info"))?;
        // SAFETY: `out` is the call's out-parameter: NULL (refused by
        // hand_out) or writable for one pointer.
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
        let f = from_fid!(retain Fabric, fabric)?;
        // SAFETY: fi_eq_open(3)'s `attr` is NULL (refused by `attr`) or the
        // application's fi_eq_attr.
        let a = unsafe { attr(attr_, "fi_eq_attr") }?;
        // SAFETY: `wait_set` is the application's attr field: NULL or a
        // wait set fid it holds (member_of's contract).
        let set = unsafe { super::wait_set::member_of(a.wait_obj, a.wait_set, "fi_eq_open") }?;
        // SAFETY: `out` is the call's out-parameter: NULL (refused by
        // hand_out) or writable for one pointer.
        unsafe { hand_out(out, "eq", || Eq::open(super::eq::header(context), f, a, set)) }
    })
}

unsafe extern "C" fn wait_open(
    fabric: *mut ffi::fid_fabric,
    attr_: *mut ffi::fi_wait_attr,
    out: *mut *mut ffi::fid_wait,
) -> i32 {
    guard_int("fi_wait_open", || {
        let f = from_fid!(retain Fabric, fabric)?;
        // SAFETY: fi_wait_open(3)'s `attr` is NULL (refused by `attr`) or
        // the application's fi_wait_attr.
        let a = unsafe { attr(attr_, "fi_wait_attr") }?;
        // SAFETY: `out` is the call's out-parameter: NULL (refused by
        // hand_out) or writable for one pointer.
        unsafe {
            hand_out(out, "wait set", || {
                Ok(Arc::new(WaitSet::new(super::wait_set::header(std::ptr::null_mut()), f, a)?))
            })
        }
    })
}

unsafe extern "C" fn trywait(fabric: *mut ffi::fid_fabric, fids: *mut *mut ffi::fid, count: i32) -> i32 {
    guard_int("fi_trywait", || {
        from_fid!(Fabric, fabric)?;
        if count < 0 || (count > 0 && fids.is_null()) {
            return Err(fail!(ffi::FI_EINVAL, "fi_trywait: bad fid array"));
        }
        for i in 0..count as usize {
            // SAFETY: `fids` is non-NULL (count > 0 here) and has `count`
            // entries (fi_trywait(3)); `i < count`.
            let f = unsafe { *fids.add(i) };
            // (Each entry is a fid argument of the call: `from_fid!`'s contract.)
            if from_fid!(is Cq, f) {
                from_fid!(Cq, f)?.trywait()?;
            } else if from_fid!(is Eq, f) {
                from_fid!(Eq, f)?.trywait()?;
            } else if from_fid!(is crate::objects::cntr::Cntr, f) {
                from_fid!(crate::objects::cntr::Cntr, f)?.trywait();
            } else if from_fid!(is WaitSet, f) {
                from_fid!(WaitSet, f)?.trywait()?;
            } else {
                return Err(fail!(ffi::FI_EINVAL, "fi_trywait: fid {i} is not an oxmr CQ, EQ, counter or wait set"));
            }
        }
        Ok(0)
    })
}
