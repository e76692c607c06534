//! fid_pep: the passive endpoint's C slots.

use std::ffi::c_void;

use oxmr_ffi as ffi;

// The slots a passive endpoint shares with an active one (which refuse a
// passive endpoint's fid, or are -FI_ENOSYS).
use super::ep::{
    accept, cm_data, connect, get_name, join, put_name, put_usize, rx_ctx, rx_size_left, shutdown, tx_ctx, tx_size_left,
};
use super::fid::{self, fid_header, from_fid, FidHeader};
use super::{common, guard_int};
use crate::fail;
use crate::info::{attrs, Info};
use crate::objects::{
    eq::Eq,
    pep::{ConnReq, Incoming, Pep},
};

pub static PEP_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(bind),
    control: Some(common::control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

static PEP_OPS: ffi::fi_ops_ep = ffi::fi_ops_ep {
    size: size_of::<ffi::fi_ops_ep>(),
    cancel: Some(cancel),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: Some(tx_ctx),
    rx_ctx: Some(rx_ctx),
    rx_size_left: Some(rx_size_left),
    tx_size_left: Some(tx_size_left),
};

static PEP_CM_OPS: ffi::fi_ops_cm = ffi::fi_ops_cm {
    size: size_of::<ffi::fi_ops_cm>(),
    setname: Some(setname),
    getname: Some(getname),
    getpeer: Some(getpeer),
    connect: Some(connect),
    listen: Some(listen),
    accept: Some(accept),
    reject: Some(reject),
    shutdown: Some(shutdown),
    join: Some(join),
};

crate::fid_object!(Pep, hdr, ffi::FI_CLASS_PEP, "passive endpoint", PEP_FI_OPS);

pub static CONNREQ_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(connreq_close),
    bind: Some(common::bind),
    control: Some(common::control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

crate::fid_object!(ConnReq, hdr, ffi::FI_CLASS_CONNREQ, "connection request", CONNREQ_FI_OPS);

unsafe extern "C" fn connreq_close(f: *mut ffi::fid) -> i32 {
    guard_int("fi_close(connreq)", || from_fid!(close ConnReq, f, |_| Ok(())).map(|_| 0))
}

/// Turn a connection request into its FI_CONNREQ info (`objects::pep::
/// PublishReq`): the request becomes a fid, the info's `handle`.
pub fn publish_request(req: Incoming, mut info: Info) -> usize {
    let cr = std::sync::Arc::new(ConnReq::new(FidHeader(fid_header::<ConnReq>(std::ptr::null_mut())), req));
    let handle = fid::publish(cr);
    info.handle = handle as usize;
    let c = super::info::list_to_c(std::slice::from_ref(&info));
    if c.is_null() {
        // Just published, and handed to nobody.
        let _ = from_fid!(release ConnReq, handle);
        return 0;
    }
    c as usize
}

/// The C header of a new passive endpoint.
pub fn header(context: *mut c_void) -> FidHeader<ffi::fid_pep> {
    FidHeader(ffi::fid_pep {
        fid: fid_header::<Pep>(context),
        ops: &PEP_OPS as *const _ as *mut _,
        cm: &PEP_CM_OPS as *const _ as *mut _,
    })
}

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    guard_int("fi_close(pep)", || from_fid!(close Pep, f, |_| Ok(())).map(|_| 0))
}

unsafe extern "C" fn bind(f: *mut ffi::fid, bfid: *mut ffi::fid, flags: u64) -> i32 {
    guard_int("fi_pep_bind", || {
        let (pep, eq) = (from_fid!(Pep, f)?, from_fid!(retain Eq, bfid)?);
        pep.bind_eq(eq, flags)?;
        Ok(0)
    })
}

unsafe extern "C" fn cancel(f: *mut ffi::fid, _context: *mut c_void) -> isize {
    super::guard_ssize("fi_cancel(pep)", || {
        from_fid!(Pep, f)?;
        Err(crate::error::Error::quiet(ffi::FI_ENOENT))
    })
}

unsafe extern "C" fn getopt(f: *mut ffi::fid, level: i32, name: i32, optval: *mut c_void, optlen: *mut usize) -> i32 {
    guard_int("fi_getopt(pep)", || {
        from_fid!(Pep, f)?;
        if level as u32 != ffi::FI_OPT_ENDPOINT || name as u32 != ffi::FI_OPT_CM_DATA_SIZE {
            return Err(fail!(ffi::FI_ENOPROTOOPT, "fi_getopt on a passive endpoint: only FI_OPT_CM_DATA_SIZE"));
        }
        // SAFETY: fi_getopt(3): `optlen` is NULL (refused) or valid, `optval`
        // NULL or `*optlen` writable bytes (put_usize's contract).
        unsafe { put_usize(optval, optlen, attrs::CM_DATA_SIZE) }
    })
}

unsafe extern "C" fn setopt(f: *mut ffi::fid, level: i32, name: i32, _optval: *const c_void, _optlen: usize) -> i32 {
    guard_int("fi_setopt(pep)", || {
        from_fid!(Pep, f)?;
        Err(fail!(ffi::FI_ENOPROTOOPT, "fi_setopt on a passive endpoint: level {level} option {name} not supported"))
    })
}

unsafe extern "C" fn setname(f: *mut ffi::fid, a: *mut c_void, len: usize) -> i32 {
    guard_int("fi_setname(pep)", || {
        let pep = from_fid!(Pep, f)?;
        // SAFETY: fi_setname(3)'s `addr` is NULL (refused) or `addrlen` bytes.
        let a = unsafe { get_name(a, len) }?;
        pep.set_name(a)?;
        Ok(0)
    })
}

unsafe extern "C" fn getname(f: *mut ffi::fid, out: *mut c_void, addrlen: *mut usize) -> i32 {
    guard_int("fi_getname(pep)", || {
        let pep = from_fid!(Pep, f)?;
        let name = pep.name().ok_or_else(|| fail!(ffi::FI_EADDRNOTAVAIL, "passive endpoint has no address"))?;
        // SAFETY: fi_getname(3): `addrlen` is NULL (refused) or valid, `addr`
        // NULL or `*addrlen` writable bytes (put_name's contract).
        unsafe { put_name(&name, out, addrlen) }
    })
}

crate::enosys!(getpeer, "fi_getpeer", (ep: *mut ffi::fid_ep, addr: *mut c_void, addrlen: *mut usize) -> i32);

unsafe extern "C" fn listen(pep: *mut ffi::fid_pep) -> i32 {
    guard_int("fi_listen", || {
        // (The retained count is released at return.)
        let pep = from_fid!(retain Pep, pep)?;
        pep.listen()?;
        Ok(0)
    })
}

unsafe extern "C" fn reject(pep: *mut ffi::fid_pep, handle: ffi::fid_t, param: *const c_void, paramlen: usize) -> i32 {
    guard_int("fi_reject", || {
        let pep = from_fid!(Pep, pep)?;
        // SAFETY: fi_reject(3): `param` is NULL or `paramlen` readable bytes.
        let data = unsafe { cm_data("fi_reject", param, paramlen) }?;
        let req = from_fid!(ConnReq, handle)?;
        let (mine, theirs) = (pep.name().map(|a| a.port()), req.port());
        if theirs.is_some() && mine != theirs {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_reject: this connection request arrived at port {} and this passive endpoint listens at {}; reject it on the passive endpoint whose EQ reported it",
                theirs.unwrap_or(0),
                mine.map_or_else(|| "no address".to_string(), |p| p.to_string())
            ));
        }
        let req = req.take("fi_reject")?;
        let from = req.peer;
        req.reject(data);
        tracing::debug!("fi_reject: refused the connection request of {from}");
        // fi_reject consumes the handle (fi_cm(3)).
        from_fid!(release ConnReq, handle)?;
        Ok(0)
    })
}
