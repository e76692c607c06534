//! Scalable endpoints' C slots (`objects::sep`): fi_scalable_ep (the
//! domain's slot calls `open`), the scalable endpoint's close, bind,
//! enable, name and `fi_tx_context`/`fi_rx_context`, and each context's
//! close, bind and control. A context's data slots, cancel and options
//! are the endpoint's (`boundary::ep::target` takes a context as the
//! endpoint of its index, with its defaults and its one direction); the
//! scalable endpoint itself posts nothing.

use std::ffi::c_void;
use std::sync::Arc;

use oxmr_ffi as ffi;

// (The slots no endpoint of oxmr takes: the endpoint's.)
use super::ep::{join, listen, ops_flags_control, put_name, reject, rx_size_left, tx_size_left};
use super::fid::{fid_header, from_fid, FidHeader};
use super::{common, guard_int, hand_out};
use crate::error::Result;
use crate::fail;
use crate::objects::av::Av;
use crate::objects::cntr::Cntr;
use crate::objects::cq::Cq;
use crate::objects::domain::Domain;
use crate::objects::sep::{RxCtx, Sep, SepCtx, TxCtx};

static SEP_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(bind),
    control: Some(control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

crate::enosys!(sep_cancel, "fi_cancel on a scalable endpoint (cancel through its context)", (fid: *mut ffi::fid, context: *mut c_void) -> isize);
crate::enosys!(sep_getopt, "fi_getopt on a scalable endpoint (options are its contexts')", (fid: *mut ffi::fid, level: i32, optname: i32, optval: *mut c_void, optlen: *mut usize) -> i32);
crate::enosys!(sep_setopt, "fi_setopt on a scalable endpoint (options are its contexts')", (fid: *mut ffi::fid, level: i32, optname: i32, optval: *const c_void, optlen: usize) -> i32);

static SEP_OPS: ffi::fi_ops_ep = ffi::fi_ops_ep {
    size: size_of::<ffi::fi_ops_ep>(),
    cancel: Some(sep_cancel),
    getopt: Some(sep_getopt),
    setopt: Some(sep_setopt),
    tx_ctx: Some(tx_ctx),
    rx_ctx: Some(rx_ctx),
    rx_size_left: Some(rx_size_left),
    tx_size_left: Some(tx_size_left),
};

crate::enosys!(setname, "fi_setname on a scalable endpoint (give the address in the info's src_addr)", (fid: *mut ffi::fid, addr: *mut c_void, addrlen: usize) -> i32);
crate::enosys!(getpeer, "fi_getpeer on a scalable endpoint (FI_EP_RDM has no peer)", (ep: *mut ffi::fid_ep, addr: *mut c_void, addrlen: *mut usize) -> i32);
crate::enosys!(connect, "fi_connect on a scalable endpoint (FI_EP_RDM)", (ep: *mut ffi::fid_ep, addr: *const c_void, param: *const c_void, paramlen: usize) -> i32);
crate::enosys!(accept, "fi_accept on a scalable endpoint (FI_EP_RDM)", (ep: *mut ffi::fid_ep, param: *const c_void, paramlen: usize) -> i32);
crate::enosys!(shutdown, "fi_shutdown on a scalable endpoint (FI_EP_RDM)", (ep: *mut ffi::fid_ep, flags: u64) -> i32);

static SEP_CM_OPS: ffi::fi_ops_cm = ffi::fi_ops_cm {
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

static TX_CTX_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(ctx_close::<true>),
    bind: Some(ctx_bind::<true>),
    control: Some(ctx_control::<true>),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

static RX_CTX_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(ctx_close::<false>),
    bind: Some(ctx_bind::<false>),
    control: Some(ctx_control::<false>),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

crate::fid_object!(Sep, hdr, ffi::FI_CLASS_SEP, "scalable endpoint", SEP_FI_OPS);
crate::fid_object!(TxCtx, hdr, ffi::FI_CLASS_TX_CTX, "transmit context", TX_CTX_FI_OPS);
crate::fid_object!(RxCtx, hdr, ffi::FI_CLASS_RX_CTX, "receive context", RX_CTX_FI_OPS);

/// fi_scalable_ep.
///
/// # Safety
/// `info_` is NULL or an fi_info the application got from fi_getinfo or
/// fi_dupinfo; `out` is NULL or writable for one pointer.
pub(super) unsafe fn open(
    domain: *mut ffi::fid_domain,
    info_: *mut ffi::fi_info,
    out: *mut *mut ffi::fid_ep,
    context: *mut c_void,
) -> Result<i32> {
    let d: Arc<Domain> = from_fid!(retain Domain, domain)?;
    // SAFETY: NULL (refused) or an application's fi_info (this fn's contract).
    let i =
        unsafe { super::info::info_from(info_) }.ok_or_else(|| fail!(ffi::FI_EINVAL, "fi_scalable_ep: NULL info"))?;
    let hdr = FidHeader(ffi::fid_ep {
        fid: fid_header::<Sep>(context),
        ops: &SEP_OPS as *const _ as *mut _,
        cm: &SEP_CM_OPS as *const _ as *mut _,
        ..super::ep::header(context).0
    });
    // (Each index's endpoint has a header of its own, never handed out:
    // applications reach it through the contexts.)
    let build = || Ok(Arc::new(Sep::new(hdr, d, i, || super::ep::header(context))?));
    // SAFETY: `out` is NULL (refused by hand_out) or writable for one
    // pointer (this fn's contract).
    unsafe { hand_out(out, "scalable endpoint", build) }
}

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    // (Its contexts hold it: -FI_EBUSY until they are closed.)
    guard_int("fi_close(scalable ep)", || from_fid!(close Sep, f, |_| Ok(())).map(|_| 0))
}

unsafe extern "C" fn bind(f: *mut ffi::fid, bfid: *mut ffi::fid, flags: u64) -> i32 {
    guard_int("fi_scalable_ep_bind", || {
        let sep = from_fid!(Sep, f)?;
        match from_fid!(class bfid) {
            Some(ffi::FI_CLASS_AV) => sep.bind_av(from_fid!(retain Av, bfid)?, flags)?,
            Some(c @ (ffi::FI_CLASS_CQ | ffi::FI_CLASS_CNTR)) => {
                return Err(fail!(
                    ffi::FI_EINVAL,
                    "fi_scalable_ep_bind: a {} binds to a transmit or receive context (fi_ep_bind on it), not to the scalable endpoint",
                    if c == ffi::FI_CLASS_CQ { "CQ" } else { "counter" }
                ))
            }
            Some(c) => {
                return Err(fail!(
                    ffi::FI_EINVAL,
                    "fi_scalable_ep_bind: cannot bind an object of class {c}; a scalable endpoint takes its AV"
                ))
            }
            None => return Err(fail!(ffi::FI_EINVAL, "fi_scalable_ep_bind: NULL fid")),
        }
        Ok(0)
    })
}

unsafe extern "C" fn control(f: *mut ffi::fid, command: i32, _arg: *mut c_void) -> i32 {
    guard_int("fi_control(scalable ep)", || {
        let sep = from_fid!(Sep, f)?;
        match command as u32 {
            ffi::FI_ENABLE => sep.enable().map(|_| 0),
            c => Err(fail!(ffi::FI_ENOSYS, "fi_control command {c} is not supported on a scalable endpoint")),
        }
    })
}

unsafe extern "C" fn getname(f: *mut ffi::fid, out: *mut c_void, addrlen: *mut usize) -> i32 {
    guard_int("fi_getname(scalable ep)", || {
        let sep = from_fid!(Sep, f)?;
        // SAFETY: fi_getname(3): `addrlen` is NULL (refused) or valid, `addr`
        // NULL or `*addrlen` writable bytes (put_name's contract).
        unsafe { put_name(&sep.name(), out, addrlen) }
    })
}

/// fi_tx_context / fi_rx_context.
///
/// # Safety
/// `attr` is NULL or a readable fi_tx_attr (TX) or fi_rx_attr; `out` is
/// NULL or writable for one pointer.
unsafe fn make_ctx<const TX: bool>(
    sep: *mut ffi::fid_ep,
    index: i32,
    op_flags: Option<u64>,
    out: *mut *mut ffi::fid_ep,
    context: *mut c_void,
) -> Result<i32>
where
    SepCtx<TX>: super::fid::FidObject,
{
    let sep = from_fid!(retain Sep, sep)?;
    let hdr = FidHeader(ffi::fid_ep { fid: fid_header::<SepCtx<TX>>(context), ..super::ep::header(context).0 });
    // SAFETY: `out` is NULL (refused by hand_out) or writable for one
    // pointer (this fn's contract).
    unsafe {
        hand_out(out, if TX { "transmit context" } else { "receive context" }, || {
            Ok(Arc::new(SepCtx::<TX>::new(hdr, sep, index, op_flags)?))
        })
    }
}

unsafe extern "C" fn tx_ctx(
    sep: *mut ffi::fid_ep,
    index: i32,
    attr: *mut ffi::fi_tx_attr,
    out: *mut *mut ffi::fid_ep,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_tx_context", || {
        // SAFETY: fi_tx_context(3)'s `attr` is NULL (the scalable
        // endpoint's) or the application's fi_tx_attr.
        let flags = unsafe { attr.as_ref() }.map(|a| a.op_flags);
        // SAFETY: `out` is the call's out-parameter (make_ctx's contract).
        unsafe { make_ctx::<true>(sep, index, flags, out, context) }
    })
}

unsafe extern "C" fn rx_ctx(
    sep: *mut ffi::fid_ep,
    index: i32,
    attr: *mut ffi::fi_rx_attr,
    out: *mut *mut ffi::fid_ep,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_rx_context", || {
        // SAFETY: fi_rx_context(3)'s `attr` is NULL (the scalable
        // endpoint's) or the application's fi_rx_attr.
        let flags = unsafe { attr.as_ref() }.map(|a| a.op_flags);
        // SAFETY: `out` is the call's out-parameter (make_ctx's contract).
        unsafe { make_ctx::<false>(sep, index, flags, out, context) }
    })
}

unsafe extern "C" fn ctx_close<const TX: bool>(f: *mut ffi::fid) -> i32
where
    SepCtx<TX>: super::fid::FidObject,
{
    // (Dropping it tells the scalable endpoint, which releases the index's
    // endpoint with its last open context.)
    guard_int("fi_close(context)", || from_fid!(close SepCtx<TX>, f, |_| Ok(())).map(|_| 0))
}

unsafe extern "C" fn ctx_bind<const TX: bool>(f: *mut ffi::fid, bfid: *mut ffi::fid, flags: u64) -> i32
where
    SepCtx<TX>: super::fid::FidObject,
{
    guard_int("fi_ep_bind(context)", || {
        let c = from_fid!(SepCtx<TX>, f)?;
        match from_fid!(class bfid) {
            Some(ffi::FI_CLASS_CQ) => {
                c.check_bind_flags(flags, true)?;
                c.d.ep.bind_cq(from_fid!(retain Cq, bfid)?, flags)?
            }
            Some(ffi::FI_CLASS_CNTR) => {
                c.check_bind_flags(flags, false)?;
                c.d.ep.bind_cntr(from_fid!(retain Cntr, bfid)?, flags)?
            }
            Some(ffi::FI_CLASS_AV) => {
                return Err(fail!(
                    ffi::FI_EINVAL,
                    "fi_ep_bind: bind the AV to the scalable endpoint (fi_scalable_ep_bind), not to a context"
                ))
            }
            Some(c) => {
                return Err(fail!(ffi::FI_EINVAL, "fi_ep_bind: cannot bind an object of class {c} to a context"))
            }
            None => return Err(fail!(ffi::FI_EINVAL, "fi_ep_bind: NULL fid")),
        }
        Ok(0)
    })
}

unsafe extern "C" fn ctx_control<const TX: bool>(f: *mut ffi::fid, command: i32, arg: *mut c_void) -> i32
where
    SepCtx<TX>: super::fid::FidObject,
{
    guard_int("fi_control(context)", || {
        let c = from_fid!(SepCtx<TX>, f)?;
        match command as u32 {
            ffi::FI_ENABLE => c.enable().map(|_| 0),
            cmd @ (ffi::FI_GETOPSFLAG | ffi::FI_SETOPSFLAG) => {
                // SAFETY: both commands take a `uint64_t *` (fi_endpoint(3)).
                unsafe { ops_flags_control(cmd, arg, |which, set| c.d.ops_flags("fi_control", which, set)) }
            }
            cmd => Err(fail!(ffi::FI_ENOSYS, "fi_control command {cmd} is not supported on a context")),
        }
    })
}
