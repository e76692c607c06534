//! The C boundary: the only room that knows libfabric's C layout.
//!
//! Every function placed in an `fi_ops_*` table is an `unsafe extern "C"
//! fn` here whose body runs inside [`guard`]: C pointers are checked and
//! turned into Rust references or values, the safe object code in
//! `objects/` does the work, and out-parameters are written last, only on
//! success. Unsupported slots point at stubs that log and return
//! `-FI_ENOSYS`; no slot is ever NULL.
#![allow(clippy::missing_safety_doc)]

pub mod av;
pub mod cntr;
pub mod cq;
pub mod domain;
pub mod ep;
pub mod ep_atomic;
pub mod ep_data;
pub mod eq;

pub mod fabric;
pub mod fid;
pub mod guard;
pub mod info;
pub mod log;
pub mod mr;
pub mod params;
pub mod pep;
pub mod poll;
pub mod provider;
pub mod sep;
pub mod srx;
pub mod stx;
pub mod wait_set;

pub use crate::error::{Error, Result};
pub use guard::{guard, guard_int, guard_ssize};

use oxmr_ffi as ffi;

/// Define a slot that is not supported: it logs once per call and returns
/// `-FI_ENOSYS`.
#[macro_export]
macro_rules! enosys {
    ($(#[$m:meta])* $name:ident, $call:literal, ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty) => {
        $(#[$m])*
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            $(let _ = $arg;)*
            $crate::boundary::guard($call, || {
                ::tracing::warn!("{}: not supported by oxmr (see the README's Status section)", $call);
                -(::oxmr_ffi::FI_ENOSYS as $ret)
            })
        }
    };
}

/// Write an out-parameter, refusing NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub unsafe fn write_out<T>(out: *mut T, v: T, what: &str) -> Result<()> {
    if out.is_null() {
        return Err(crate::fail!(ffi::FI_EINVAL, "NULL {what} out-parameter"));
    }
    // SAFETY: non-NULL here, so valid for a write of `T` (this fn's contract).
    unsafe { out.write(v) };
    Ok(())
}

/// Borrow a C attr struct, refusing NULL.
///
/// # Safety
/// `p` is NULL or valid for reads of `T`.
pub unsafe fn attr<'a, T>(p: *const T, what: &str) -> Result<&'a T> {
    // SAFETY: NULL (refused) or valid for reads of `T` (this fn's contract).
    unsafe { p.as_ref() }.ok_or_else(|| crate::fail!(ffi::FI_EINVAL, "NULL {what}"))
}

/// Copy a Rust string into a C buffer of `len` bytes (truncating, always
/// NUL-terminated when len > 0); returns the size needed including the NUL.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes of writes.
pub unsafe fn copy_cstr(s: &str, buf: *mut std::ffi::c_char, len: usize) -> usize {
    let need = s.len() + 1;
    if !buf.is_null() && len > 0 {
        let n = s.len().min(len - 1);
        // SAFETY: `buf` has `len` > n bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
        }
    }
    need
}

/// Build an object and hand it to C through `out` (checked first, written
/// last): no partial success, nothing leaked on failure.
///
/// # Safety
/// `out` is NULL or valid for a pointer write.
pub unsafe fn hand_out<T: fid::FidObject, F>(
    out: *mut *mut F,
    what: &str,
    build: impl FnOnce() -> Result<std::sync::Arc<T>>,
) -> Result<i32> {
    if out.is_null() {
        return Err(crate::fail!(ffi::FI_EINVAL, "NULL {what} out-parameter"));
    }
    let obj = build()?;
    let f = fid::publish(obj) as *mut F;
    // SAFETY: checked non-NULL above, so valid for a pointer write (this
    // fn's contract).
    unsafe { out.write(f) };
    Ok(0)
}

/// fid `tostr`/`ops_set`: not supported on any oxmr object.
pub mod common {
    use std::ffi::{c_char, c_void};

    use oxmr_ffi as ffi;

    crate::enosys!(tostr, "fi_tostr", (fid: *const ffi::fid, buf: *mut c_char, len: usize) -> i32);
    crate::enosys!(ops_set, "fi_set_ops", (fid: *mut ffi::fid, name: *const c_char, flags: u64, ops: *mut c_void, context: *mut c_void) -> i32);
    crate::enosys!(ops_open, "fi_open_ops", (fid: *mut ffi::fid, name: *const c_char, flags: u64, ops: *mut *mut c_void, context: *mut c_void) -> i32);
    crate::enosys!(control, "fi_control", (fid: *mut ffi::fid, command: i32, arg: *mut c_void) -> i32);
    crate::enosys!(bind, "fi_bind", (fid: *mut ffi::fid, bfid: *mut ffi::fid, flags: u64) -> i32);
}
