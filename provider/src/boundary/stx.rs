//! fid_stx: a shared transmit context's C slots (`objects::stx`; opened by
//! `boundary::domain`'s `stx_ctx`). It takes no operations of its own:
//! endpoints bound to it post theirs.

use std::ffi::c_void;

use oxmr_ffi as ffi;

use super::common;
use super::fid::{fid_header, from_fid, FidHeader};
use super::guard_int;
use crate::objects::stx::Stx;

pub static STX_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(common::bind),
    control: Some(common::control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

crate::enosys!(cancel, "fi_cancel(stx)", (fid: *mut ffi::fid, context: *mut c_void) -> isize);
crate::enosys!(getopt, "fi_getopt(stx)", (fid: *mut ffi::fid, level: i32, optname: i32, optval: *mut c_void, optlen: *mut usize) -> i32);
crate::enosys!(setopt, "fi_setopt(stx)", (fid: *mut ffi::fid, level: i32, optname: i32, optval: *const c_void, optlen: usize) -> i32);
crate::enosys!(tx_ctx, "fi_tx_context(stx)", (sep: *mut ffi::fid_ep, index: i32, attr: *mut ffi::fi_tx_attr, tx_ep: *mut *mut ffi::fid_ep, context: *mut c_void) -> i32);
crate::enosys!(rx_ctx, "fi_rx_context(stx)", (sep: *mut ffi::fid_ep, index: i32, attr: *mut ffi::fi_rx_attr, rx_ep: *mut *mut ffi::fid_ep, context: *mut c_void) -> i32);
crate::enosys!(rx_size_left, "fi_rx_size_left(stx)", (ep: *mut ffi::fid_ep) -> isize);
crate::enosys!(tx_size_left, "fi_tx_size_left(stx)", (ep: *mut ffi::fid_ep) -> isize);

static STX_OPS: ffi::fi_ops_ep = ffi::fi_ops_ep {
    size: size_of::<ffi::fi_ops_ep>(),
    cancel: Some(cancel),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: Some(tx_ctx),
    rx_ctx: Some(rx_ctx),
    rx_size_left: Some(rx_size_left),
    tx_size_left: Some(tx_size_left),
};

crate::fid_object!(Stx, hdr, ffi::FI_CLASS_STX_CTX, "shared transmit context", STX_FI_OPS);

/// The C header of a new shared transmit context.
pub fn header(context: *mut c_void) -> FidHeader<ffi::fid_stx> {
    FidHeader(ffi::fid_stx { fid: fid_header::<Stx>(context), ops: &STX_OPS as *const _ as *mut _ })
}

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    // (Endpoints bound to it hold it until they close.)
    guard_int("fi_close(stx)", || from_fid!(close Stx, f, |_| Ok(())).map(|_| 0))
}
