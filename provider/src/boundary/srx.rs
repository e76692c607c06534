//! fid_ep of a shared receive context (`objects::srx`; opened by
//! `boundary::domain`'s `srx_ctx`): its close, bind, control and cancel.
//! Its receive slots are the endpoint's (`ep_data`'s receive calls take a
//! shared receive context and post there, `recv_on_srx`); its transmit
//! slots refuse (`boundary::ep::target`).

use std::ffi::c_void;

use oxmr_ffi as ffi;

use super::ep::{rx_size_left, tx_size_left};
use super::fid::{fid_header, from_fid, FidHeader};
use super::{common, guard_int, guard_ssize};
use crate::fail;
use crate::objects::srx::Srx;

static SRX_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(bind),
    control: Some(control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

crate::enosys!(getopt, "fi_getopt on a shared receive context", (fid: *mut ffi::fid, level: i32, optname: i32, optval: *mut c_void, optlen: *mut usize) -> i32);
crate::enosys!(setopt, "fi_setopt on a shared receive context", (fid: *mut ffi::fid, level: i32, optname: i32, optval: *const c_void, optlen: usize) -> i32);
crate::enosys!(tx_ctx, "fi_tx_context on a shared receive context", (sep: *mut ffi::fid_ep, index: i32, attr: *mut ffi::fi_tx_attr, tx_ep: *mut *mut ffi::fid_ep, context: *mut c_void) -> i32);
crate::enosys!(rx_ctx, "fi_rx_context on a shared receive context", (sep: *mut ffi::fid_ep, index: i32, attr: *mut ffi::fi_rx_attr, rx_ep: *mut *mut ffi::fid_ep, context: *mut c_void) -> i32);

static SRX_OPS: ffi::fi_ops_ep = ffi::fi_ops_ep {
    size: size_of::<ffi::fi_ops_ep>(),
    cancel: Some(cancel),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: Some(tx_ctx),
    rx_ctx: Some(rx_ctx),
    rx_size_left: Some(rx_size_left),
    tx_size_left: Some(tx_size_left),
};

crate::fid_object!(Srx, hdr, ffi::FI_CLASS_SRX_CTX, "shared receive context", SRX_FI_OPS);

/// The C header of a new shared receive context: the endpoint's data
/// tables (their receive slots post to it), its own fid and ep ops.
pub fn header(context: *mut c_void) -> FidHeader<ffi::fid_ep> {
    FidHeader(ffi::fid_ep {
        fid: fid_header::<Srx>(context),
        ops: &SRX_OPS as *const _ as *mut _,
        ..super::ep::header(context).0
    })
}

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    // (Endpoints bound to it hold it until they close.)
    guard_int("fi_close(srx)", || from_fid!(close Srx, f, |_| Ok(())).map(|_| 0))
}

unsafe extern "C" fn bind(f: *mut ffi::fid, _bfid: *mut ffi::fid, _flags: u64) -> i32 {
    guard_int("fi_ep_bind(srx)", || {
        from_fid!(Srx, f)?;
        Err(fail!(
            ffi::FI_EINVAL,
            "fi_ep_bind on a shared receive context: it takes no CQ, counter or AV; bind it to endpoints (fi_ep_bind(ep, srx)), whose CQs its receives complete into"
        ))
    })
}

unsafe extern "C" fn control(f: *mut ffi::fid, command: i32, _arg: *mut c_void) -> i32 {
    guard_int("fi_control(srx)", || {
        from_fid!(Srx, f)?;
        match command as u32 {
            // (Usable from the start: enabling it changes nothing.)
            ffi::FI_ENABLE => Ok(0),
            c => Err(fail!(ffi::FI_ENOSYS, "fi_control command {c} is not supported on a shared receive context")),
        }
    })
}

unsafe extern "C" fn cancel(f: *mut ffi::fid, context: *mut c_void) -> isize {
    guard_ssize("fi_cancel(srx)", || from_fid!(Srx, f)?.shared.cancel(context as usize).map(|_| 0))
}
