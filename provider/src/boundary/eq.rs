//! fid_eq: the event queue's C slots.

use std::ffi::{c_char, c_void};

use oxmr_ffi as ffi;

use super::cq::{strerror_common, wait_control};
use super::fid::{fid_header, from_fid, FidHeader};
use super::{common, guard, guard_int, guard_ssize};
use crate::fail;
use crate::objects::eq::Eq;

pub static EQ_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(common::bind),
    control: Some(control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

static EQ_OPS: ffi::fi_ops_eq = ffi::fi_ops_eq {
    size: size_of::<ffi::fi_ops_eq>(),
    read: Some(read),
    readerr: Some(readerr),
    write: Some(write),
    sread: Some(sread),
    strerror: Some(strerror),
};

crate::fid_object!(Eq, hdr, ffi::FI_CLASS_EQ, "event queue", EQ_FI_OPS);

/// The C header of a new EQ.
pub fn header(context: *mut c_void) -> FidHeader<ffi::fid_eq> {
    FidHeader(ffi::fid_eq { fid: fid_header::<Eq>(context), ops: &EQ_OPS as *const _ as *mut _ })
}

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    guard_int("fi_close(eq)", || from_fid!(close Eq, f, |_| Ok(())).map(|_| 0))
}

unsafe extern "C" fn control(f: *mut ffi::fid, command: i32, arg: *mut c_void) -> i32 {
    guard_int("fi_control(eq)", || {
        let eq = from_fid!(Eq, f)?;
        // SAFETY: fi_control(3): `arg` is what `command` names (an `int *`
        // for FI_GETWAIT, an `enum fi_wait_obj *` for FI_GETWAITOBJ), which
        // is wait_control's contract.
        unsafe { wait_control(command, arg, eq.wait_fd(), "EQ") }
    })
}

fn peek_of(flags: u64, call: &str) -> crate::error::Result<bool> {
    if flags & !(ffi::FI_PEEK as u64) != 0 {
        return Err(fail!(ffi::FI_EBADFLAGS, "{call}: flags {flags:#x}; only FI_PEEK is accepted"));
    }
    Ok(flags & ffi::FI_PEEK as u64 != 0)
}

/// # Safety
/// `buf` is NULL or valid for `len` bytes; `event` NULL or writable.
unsafe fn read_common(
    eq: *mut ffi::fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
    timeout: Option<i32>,
) -> crate::error::Result<isize> {
    let eq = from_fid!(Eq, eq)?;
    let peek = peek_of(flags, "fi_eq_read")?;
    let out: &mut [u8] = if buf.is_null() || len == 0 {
        &mut []
    } else {
        // SAFETY: non-NULL, so `len` writable bytes (this fn's contract).
        unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) }
    };
    let (ev, n) = match timeout {
        None => eq.read(out, peek)?,
        Some(t) => eq.sread(out, t, peek)?,
    };
    if !event.is_null() {
        // SAFETY: non-NULL, so writable (this fn's contract).
        unsafe { event.write(ev) };
    }
    Ok(n as isize)
}

unsafe extern "C" fn read(eq: *mut ffi::fid_eq, event: *mut u32, buf: *mut c_void, len: usize, flags: u64) -> isize {
    // SAFETY: fi_eq_read(3): `buf` is NULL or `len` writable bytes, `event`
    // NULL or writable (read_common's contract).
    guard_ssize("fi_eq_read", || unsafe { read_common(eq, event, buf, len, flags, None) })
}

unsafe extern "C" fn sread(
    eq: *mut ffi::fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: i32,
    flags: u64,
) -> isize {
    // SAFETY: fi_eq_sread(3): `buf` is NULL or `len` writable bytes, `event`
    // NULL or writable (read_common's contract).
    guard_ssize("fi_eq_sread", || unsafe { read_common(eq, event, buf, len, flags, Some(timeout)) })
}

unsafe extern "C" fn readerr(eq: *mut ffi::fid_eq, buf: *mut ffi::fi_eq_err_entry, flags: u64) -> isize {
    guard_ssize("fi_eq_readerr", || {
        let eq = from_fid!(Eq, eq)?;
        let peek = peek_of(flags, "fi_eq_readerr")?;
        if buf.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "fi_eq_readerr: NULL buffer"));
        }
        let e = eq.readerr(peek)?;
        // SAFETY: `buf` points to one fi_eq_err_entry (API contract).
        let b = unsafe { &mut *buf };
        b.fid = e.fid as ffi::fid_t;
        b.context = e.context as *mut c_void;
        b.data = e.data;
        b.err = e.err;
        b.prov_errno = e.prov_errno;
        // (Not there before API 1.5: fi_eq(3). Then err_data_size 0 on
        // input asks for the provider's buffer, valid until the next
        // readerr; otherwise err_data is the caller's buffer of that size.)
        if eq.fabric.api_1_5() {
            if e.err_data.is_empty() {
                b.err_data_size = 0;
            } else if b.err_data_size == 0 || b.err_data.is_null() {
                b.err_data_size = e.err_data.len();
                b.err_data = eq.keep_err_data(e.err_data) as *mut c_void;
            } else {
                let n = b.err_data_size.min(e.err_data.len());
                // SAFETY: the caller's err_data holds err_data_size bytes (fi_eq(3)).
                unsafe { std::ptr::copy_nonoverlapping(e.err_data.as_ptr(), b.err_data as *mut u8, n) };
                b.err_data_size = n;
            }
        }
        Ok(size_of::<ffi::fi_eq_err_entry>() as isize)
    })
}

unsafe extern "C" fn write(eq: *mut ffi::fid_eq, event: u32, buf: *const c_void, len: usize, flags: u64) -> isize {
    guard_ssize("fi_eq_write", || {
        let eq = from_fid!(Eq, eq)?;
        if flags != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_eq_write: flags {flags:#x}; pass 0"));
        }
        if buf.is_null() && len > 0 {
            return Err(fail!(ffi::FI_EINVAL, "fi_eq_write: NULL buffer with length {len}"));
        }
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: `buf` has `len` readable bytes (API contract).
            unsafe { std::slice::from_raw_parts(buf as *const u8, len) }
        };
        Ok(eq.write(event, bytes)? as isize)
    })
}

unsafe extern "C" fn strerror(
    eq: *mut ffi::fid_eq,
    prov_errno: i32,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    let _ = eq;
    // SAFETY: fi_eq_strerror(3): `buf` is NULL or `len` writable bytes.
    guard("fi_eq_strerror", || unsafe { strerror_common(prov_errno, buf, len) })
}
