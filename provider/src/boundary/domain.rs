//! fid_domain: opens AVs, CQs, counters, poll sets and endpoints; its MR table points
//! at `boundary::mr`.

use std::ffi::c_void;
use std::sync::Arc;

use oxmr_ffi as ffi;

use super::fid::{fid_header, from_fid, FidHeader};
use super::{attr, common, guard_int, hand_out, info};
use crate::fail;
use crate::objects::pep::{ConnReq, Pep};
use crate::objects::{av::Av, cntr::Cntr, cq::Cq, domain::Domain, ep::Ep, poll::Poll, stx::Stx};

pub static DOMAIN_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(common::bind),
    control: Some(common::control),
    ops_open: Some(super::mr::domain_ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

static DOMAIN_OPS: ffi::fi_ops_domain = ffi::fi_ops_domain {
    size: size_of::<ffi::fi_ops_domain>(),
    av_open: Some(av_open),
    cq_open: Some(cq_open),
    endpoint: Some(endpoint),
    scalable_ep: Some(scalable_ep),
    cntr_open: Some(cntr_open),
    poll_open: Some(poll_open),
    stx_ctx: Some(stx_ctx),
    srx_ctx: Some(srx_ctx),
    query_atomic: Some(query_atomic),
    query_collective: Some(query_collective),
    endpoint2: Some(endpoint2),
};

static MR_OPS: ffi::fi_ops_mr = ffi::fi_ops_mr {
    size: size_of::<ffi::fi_ops_mr>(),
    reg: Some(super::mr::reg),
    regv: Some(super::mr::regv),
    regattr: Some(super::mr::regattr),
};

crate::fid_object!(Domain, hdr, ffi::FI_CLASS_DOMAIN, "domain", DOMAIN_FI_OPS);

/// The C header of a new domain.
pub fn header(context: *mut c_void) -> FidHeader<ffi::fid_domain> {
    FidHeader(ffi::fid_domain {
        fid: fid_header::<Domain>(context),
        ops: &DOMAIN_OPS as *const _ as *mut _,
        mr: &MR_OPS as *const _ as *mut _,
    })
}

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    guard_int("fi_close(domain)", || {
        // Closed MRs parked whole in the cache (`mr::park`) hold the
        // domain: they go first, so that only open children make it busy.
        from_fid!(Domain, f)?.mr.unpark_all();
        from_fid!(close Domain, f, |_| Ok(())).map(|_| 0)
    })
}

unsafe extern "C" fn av_open(
    domain: *mut ffi::fid_domain,
    attr_: *mut ffi::fi_av_attr,
    out: *mut *mut ffi::fid_av,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_av_open", || {
        let d = from_fid!(retain Domain, domain)?;
        // SAFETY: fi_av_open(3)'s `attr` is NULL (refused by `attr`) or the
        // application's fi_av_attr.
        let a = unsafe { attr(attr_, "fi_av_attr") }?;
        // SAFETY: `a.name` is NULL or the application's C string (fi_av(3)).
        let name = unsafe { av_name(a.name) }?;
        let (mut chosen, mut map_addr) = (0, None);
        // SAFETY: `out` is the call's out-parameter: NULL (refused by
        // hand_out) or writable for one pointer.
        let r = unsafe {
            hand_out(out, "av", || {
                let av = Av::new(super::av::header(context), d, a, name)?;
                chosen = av.av_type;
                map_addr = av.map_addr();
                Ok(Arc::new(av))
            })
        }?;
        // fi_av(3): with FI_AV_UNSPEC the chosen type is returned in the
        // attr, and a named AV opened with map_addr 0 gets the map_addr
        // oxmr uses (its fi_addr array).
        // SAFETY: `attr_` is the application's attr, checked non-NULL above;
        // the array lives as long as the AV.
        unsafe {
            (*attr_).type_ = chosen;
            if let Some(m) = map_addr.filter(|_| (*attr_).map_addr.is_null()) {
                (*attr_).map_addr = m as *mut c_void;
            }
        }
        Ok(r)
    })
}

/// An AV's name, read with a bound: None for NULL; a name longer than
/// oxmr takes is refused without reading past it.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string, or readable for at least
/// `MAX_NAME + 1` bytes.
unsafe fn av_name<'a>(name: *const std::ffi::c_char) -> crate::error::Result<Option<&'a [u8]>> {
    use crate::objects::av::MAX_NAME;
    if name.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract: strnlen reads at most MAX_NAME + 1
    // bytes, stopping at the NUL.
    let n = unsafe { libc::strnlen(name, MAX_NAME + 1) };
    if n > MAX_NAME {
        return Err(fail!(ffi::FI_EINVAL, "fi_av_open: fi_av_attr.name is longer than oxmr's {MAX_NAME} bytes"));
    }
    // SAFETY: `n` bytes before the NUL were just found readable.
    Ok(Some(unsafe { std::slice::from_raw_parts(name as *const u8, n) }))
}

unsafe extern "C" fn cq_open(
    domain: *mut ffi::fid_domain,
    attr_: *mut ffi::fi_cq_attr,
    out: *mut *mut ffi::fid_cq,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_cq_open", || {
        let d = from_fid!(retain Domain, domain)?;
        // SAFETY: fi_cq_open(3)'s `attr` is NULL (refused by `attr`) or the
        // application's fi_cq_attr.
        let a = unsafe { attr(attr_, "fi_cq_attr") }?;
        // SAFETY: `wait_set` is the application's attr field: NULL or a
        // wait set fid it holds (member_of's contract).
        let set = unsafe { super::wait_set::member_of(a.wait_obj, a.wait_set, "fi_cq_open") }?;
        // SAFETY: `out` is the call's out-parameter: NULL (refused by
        // hand_out) or writable for one pointer.
        unsafe { hand_out(out, "cq", || Cq::open(super::cq::header(context), d, a, set)) }
    })
}

unsafe extern "C" fn cntr_open(
    domain: *mut ffi::fid_domain,
    attr_: *mut ffi::fi_cntr_attr,
    out: *mut *mut ffi::fid_cntr,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_cntr_open", || {
        let d = from_fid!(retain Domain, domain)?;
        // SAFETY: fi_cntr_open(3)'s `attr` is NULL (refused by `attr`) or the
        // application's fi_cntr_attr.
        let a = unsafe { attr(attr_, "fi_cntr_attr") }?;
        // SAFETY: `wait_set` is the application's attr field: NULL or a
        // wait set fid it holds (member_of's contract).
        let set = unsafe { super::wait_set::member_of(a.wait_obj, a.wait_set, "fi_cntr_open") }?;
        // SAFETY: `out` is the call's out-parameter: NULL (refused by
        // hand_out) or writable for one pointer.
        unsafe { hand_out(out, "cntr", || Cntr::open(super::cntr::header(context), d, a, set)) }
    })
}

unsafe extern "C" fn endpoint(
    domain: *mut ffi::fid_domain,
    info_: *mut ffi::fi_info,
    out: *mut *mut ffi::fid_ep,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_endpoint", || {
        let d = from_fid!(retain Domain, domain)?;
        // SAFETY: fi_endpoint(3)'s `info` is NULL (refused) or an fi_info
        // the application got from fi_getinfo or fi_dupinfo (info_from's contract).
        let i = unsafe { info::info_from(info_) }.ok_or_else(|| fail!(ffi::FI_EINVAL, "fi_endpoint: NULL info"))?;
        let handle = i.handle as *const ffi::fid;
        let build = || {
            let ep = Arc::new(Ep::new(super::ep::header(context), d, i)?);
            // (The info's handle is NULL or a fid, fi_getinfo(3); each kind
            // is checked by type before use.)
            match from_fid!(class handle) {
                None => {}
                Some(ffi::FI_CLASS_CONNREQ) => ep.take_request(from_fid!(retain ConnReq, handle)?)?,
                Some(ffi::FI_CLASS_PEP) => ep.adopt_listener(from_fid!(Pep, handle)?.take_listener()?)?,
                Some(c) => {
                    return Err(fail!(
                        ffi::FI_EINVAL,
                        "fi_endpoint: the info's handle is an object of class {c}; pass a connection request or a passive endpoint"
                    ))
                }
            }
            Ok(ep)
        };
        // SAFETY: `out` is the call's out-parameter: NULL (refused by
        // hand_out) or writable for one pointer.
        let r = unsafe { hand_out(out, "ep", build) }?;
        if from_fid!(class handle) == Some(ffi::FI_CLASS_CONNREQ) {
            // The endpoint took the request: the handle is consumed
            // (fi_cm(3)); the endpoint keeps the (now empty) object alive,
            // so a late fi_reject of it is refused, not a use after free.
            from_fid!(release ConnReq, handle)?;
        }
        Ok(r)
    })
}

unsafe extern "C" fn endpoint2(
    domain: *mut ffi::fid_domain,
    info_: *mut ffi::fi_info,
    out: *mut *mut ffi::fid_ep,
    flags: u64,
    context: *mut c_void,
) -> i32 {
    if flags != 0 {
        return guard_int("fi_endpoint2", || {
            Err(fail!(ffi::FI_ENOSYS, "fi_endpoint2 flags {flags:#x} (peer endpoints) are not supported"))
        });
    }
    // SAFETY: fi_endpoint2's `info` and `ep` (`out`) are fi_endpoint's,
    // which is what `endpoint` requires of them.
    unsafe { endpoint(domain, info_, out, context) }
}

unsafe extern "C" fn scalable_ep(
    domain: *mut ffi::fid_domain,
    info_: *mut ffi::fi_info,
    out: *mut *mut ffi::fid_ep,
    context: *mut c_void,
) -> i32 {
    // SAFETY: fi_scalable_ep(3)'s `info` and `sep` (`out`), as `open` requires.
    guard_int("fi_scalable_ep", || unsafe { super::sep::open(domain, info_, out, context) })
}
unsafe extern "C" fn poll_open(
    domain: *mut ffi::fid_domain,
    attr_: *mut ffi::fi_poll_attr,
    out: *mut *mut ffi::fid_poll,
) -> i32 {
    guard_int("fi_poll_open", || {
        let d = from_fid!(retain Domain, domain)?;
        // SAFETY: fi_poll_open(3)'s `attr` is NULL (taken as the defaults:
        // its one field is reserved) or the application's fi_poll_attr.
        let a = unsafe { attr_.as_ref() };
        // SAFETY: `out` is the call's out-parameter: NULL (refused by
        // hand_out) or writable for one pointer.
        unsafe { hand_out(out, "poll set", || Ok(Arc::new(Poll::new(super::poll::header(), d, a)?))) }
    })
}
unsafe extern "C" fn stx_ctx(
    domain: *mut ffi::fid_domain,
    attr_: *mut ffi::fi_tx_attr,
    out: *mut *mut ffi::fid_stx,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_stx_context", || {
        let d = from_fid!(retain Domain, domain)?;
        // SAFETY: fi_stx_context(3)'s `attr` is NULL (the defaults) or the
        // application's fi_tx_attr.
        let a = unsafe { attr_.as_ref() };
        let hdr = super::stx::header(context);
        // SAFETY: `out` is the call's out-parameter: NULL (refused by
        // hand_out) or writable for one pointer.
        unsafe { hand_out(out, "shared transmit context", || Ok(Arc::new(Stx::new(hdr, d, a)?))) }
    })
}
unsafe extern "C" fn srx_ctx(
    domain: *mut ffi::fid_domain,
    attr_: *mut ffi::fi_rx_attr,
    out: *mut *mut ffi::fid_ep,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_srx_context", || {
        let d = from_fid!(retain Domain, domain)?;
        // SAFETY: fi_srx_context(3)'s `attr` is NULL (the defaults) or the
        // application's fi_rx_attr.
        let a = unsafe { attr_.as_ref() };
        let hdr = super::srx::header(context);
        // SAFETY: `out` is the call's out-parameter: NULL (refused by
        // hand_out) or writable for one pointer.
        unsafe { hand_out(out, "shared receive context", || Ok(Arc::new(crate::objects::srx::Srx::new(hdr, d, a)?))) }
    })
}
unsafe extern "C" fn query_atomic(
    _domain: *mut ffi::fid_domain,
    datatype: ffi::fi_datatype,
    op: ffi::fi_op,
    attr: *mut ffi::fi_atomic_attr,
    flags: u64,
) -> i32 {
    super::ep_atomic::query(datatype, op, attr, flags)
}
crate::enosys!(query_collective, "fi_query_collective", (domain: *mut ffi::fid_domain, coll: ffi::fi_collective_op, attr: *mut ffi::fi_collective_attr, flags: u64) -> i32);
