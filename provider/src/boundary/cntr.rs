//! fid_cntr: the counter's C slots.

use std::ffi::c_void;

use oxmr_ffi as ffi;

use super::cq::wait_control;
use super::fid::{fid_header, from_fid, FidHeader};
use super::{common, guard, guard_int};
use crate::objects::cntr::Cntr;

pub static CNTR_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(common::bind),
    control: Some(control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

static CNTR_OPS: ffi::fi_ops_cntr = ffi::fi_ops_cntr {
    size: size_of::<ffi::fi_ops_cntr>(),
    read: Some(read),
    readerr: Some(readerr),
    add: Some(add),
    set: Some(set),
    wait: Some(wait),
    adderr: Some(adderr),
    seterr: Some(seterr),
};

crate::fid_object!(Cntr, hdr, ffi::FI_CLASS_CNTR, "counter", CNTR_FI_OPS);

/// The C header of a new counter.
pub fn header(context: *mut c_void) -> FidHeader<ffi::fid_cntr> {
    FidHeader(ffi::fid_cntr { fid: fid_header::<Cntr>(context), ops: &CNTR_OPS as *const _ as *mut _ })
}

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    guard_int("fi_close(cntr)", || from_fid!(close Cntr, f, |_| Ok(())).map(|_| 0))
}

unsafe extern "C" fn control(f: *mut ffi::fid, command: i32, arg: *mut c_void) -> i32 {
    guard_int("fi_control(cntr)", || {
        let c = from_fid!(Cntr, f)?;
        // SAFETY: fi_control(3): `arg` is what `command` names (an `int *`
        // for FI_GETWAIT, an `enum fi_wait_obj *` for FI_GETWAITOBJ), which
        // is wait_control's contract.
        unsafe { wait_control(command, arg, c.wait_fd(), "counter") }
    })
}

/// Run `f` on the counter behind `c`, the slot's own fid argument
/// (`from_fid!`'s contract); a bad fid reads as 0 (the slot's only neutral
/// value) after logging.
fn value(name: &'static str, c: *mut ffi::fid_cntr, f: impl FnOnce(&Cntr) -> u64) -> u64 {
    guard(name, || from_fid!(Cntr, c).map(f).unwrap_or(0))
}

unsafe extern "C" fn read(c: *mut ffi::fid_cntr) -> u64 {
    value("fi_cntr_read", c, Cntr::read)
}

unsafe extern "C" fn readerr(c: *mut ffi::fid_cntr) -> u64 {
    value("fi_cntr_readerr", c, Cntr::readerr)
}

/// Run `f` on the counter behind `c`, the slot's own fid argument
/// (`from_fid!`'s contract).
fn update(name: &'static str, c: *mut ffi::fid_cntr, f: impl FnOnce(&Cntr)) -> i32 {
    guard_int(name, || {
        f(from_fid!(Cntr, c)?);
        Ok(0)
    })
}

unsafe extern "C" fn add(c: *mut ffi::fid_cntr, v: u64) -> i32 {
    update("fi_cntr_add", c, |c| c.add(v))
}

unsafe extern "C" fn set(c: *mut ffi::fid_cntr, v: u64) -> i32 {
    update("fi_cntr_set", c, |c| c.set(v))
}

unsafe extern "C" fn adderr(c: *mut ffi::fid_cntr, v: u64) -> i32 {
    update("fi_cntr_adderr", c, |c| c.adderr(v))
}

unsafe extern "C" fn seterr(c: *mut ffi::fid_cntr, v: u64) -> i32 {
    update("fi_cntr_seterr", c, |c| c.seterr(v))
}

unsafe extern "C" fn wait(c: *mut ffi::fid_cntr, threshold: u64, timeout: i32) -> i32 {
    guard_int("fi_cntr_wait", || {
        from_fid!(Cntr, c)?.wait(threshold, timeout)?;
        Ok(0)
    })
}
