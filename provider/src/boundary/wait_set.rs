//! fid_wait: the wait set's C slots (fi_poll(3); the set is
//! `objects::wait_set`, opened by `boundary::fabric`'s `wait_open`), and
//! how an attr's `wait_set` is resolved for the CQs, counters and EQs
//! opened with `FI_WAIT_SET`.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use oxmr_ffi as ffi;

use super::fid::{fid_header, from_fid, FidHeader};
use super::{common, guard_int, write_out};
use crate::fail;
use crate::objects::wait_set::WaitSet;

pub static WAIT_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(common::bind),
    control: Some(control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

static WAIT_OPS: ffi::fi_ops_wait = ffi::fi_ops_wait { size: size_of::<ffi::fi_ops_wait>(), wait: Some(wait) };

crate::fid_object!(WaitSet, hdr, ffi::FI_CLASS_WAIT, "wait set", WAIT_FI_OPS);

/// The C header of a new wait set (fi_wait_open takes no context).
pub fn header(context: *mut c_void) -> FidHeader<ffi::fid_wait> {
    FidHeader(ffi::fid_wait { fid: fid_header::<WaitSet>(context), ops: &WAIT_OPS as *const _ as *mut _ })
}

/// The wait set an object opened with `wait_obj` joins: its `wait_set`
/// when `wait_obj` is FI_WAIT_SET (NULL or not an oxmr wait set:
/// -FI_EINVAL), else none (the field is ignored, fi_cq(3)).
///
/// # Safety
/// `wait_set` is what the application put in its attr: NULL or a fid
/// libfabric handed it and it has not closed (`from_fid!`'s contract).
pub unsafe fn member_of(
    wait_obj: u32,
    wait_set: *mut ffi::fid_wait,
    what: &str,
) -> crate::error::Result<Option<Arc<WaitSet>>> {
    if wait_obj != ffi::FI_WAIT_SET {
        return Ok(None);
    }
    if wait_set.is_null() {
        return Err(fail!(
            ffi::FI_EINVAL,
            "{what}: wait_obj FI_WAIT_SET with a NULL wait_set; open one with fi_wait_open and pass it"
        ));
    }
    Ok(Some(from_fid!(retain WaitSet, wait_set)?))
}

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    // (A member holds the set: -FI_EBUSY while one is open, fi_poll(3).)
    guard_int("fi_close(wait set)", || from_fid!(close WaitSet, f, |_| Ok(())).map(|_| 0))
}

unsafe extern "C" fn control(f: *mut ffi::fid, command: i32, arg: *mut c_void) -> i32 {
    guard_int("fi_control(wait set)", || {
        let s = from_fid!(WaitSet, f)?;
        if command as u32 == ffi::FI_GETWAITOBJ {
            // SAFETY: FI_GETWAITOBJ takes an `enum fi_wait_obj *` (fi_control(3)).
            unsafe { write_out(arg as *mut ffi::fi_wait_obj, s.wait_obj(), "FI_GETWAITOBJ") }?;
            return Ok(0);
        }
        // SAFETY: fi_control(3): `arg` is what `command` names (an `int *`
        // for FI_GETWAIT), which is wait_control's contract.
        unsafe { super::cq::wait_control(command, arg, s.wait_fd(), "wait set") }
    })
}

unsafe extern "C" fn wait(waitset: *mut ffi::fid_wait, timeout: c_int) -> c_int {
    guard_int("fi_wait", || {
        from_fid!(WaitSet, waitset)?.wait(timeout)?;
        Ok(0)
    })
}
