//! The panic guard every C entry point runs inside.
//!
//! A panic must never unwind into libfabric or the application: it is caught
//! here, logged with the entry point's name, and turned into `-FI_EOTHER` (or
//! the slot type's neutral value). The release profile keeps
//! `panic = "unwind"`, or nothing would be caught.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::Result;

/// A value a C slot can return in place of a caught panic or an error.
pub trait CReturn: Sized {
    /// What the slot returns after a panic.
    fn on_panic() -> Self;
}

impl CReturn for i32 {
    fn on_panic() -> Self {
        -(oxmr_ffi::FI_EOTHER as i32)
    }
}

impl CReturn for isize {
    fn on_panic() -> Self {
        -(oxmr_ffi::FI_EOTHER as isize)
    }
}

impl CReturn for u64 {
    fn on_panic() -> Self {
        0
    }
}

impl CReturn for () {
    fn on_panic() -> Self {}
}

impl<T> CReturn for *const T {
    fn on_panic() -> Self {
        std::ptr::null()
    }
}

impl<T> CReturn for *mut T {
    fn on_panic() -> Self {
        std::ptr::null_mut()
    }
}

/// Run `body`, catching any panic. `name` is the libfabric call (`fi_cq_read`).
pub fn guard<R: CReturn>(name: &'static str, body: impl FnOnce() -> R) -> R {
    tracing::trace!("-> {name}");
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(r) => r,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!(
                "{name}: internal error ({what}); returning -FI_EOTHER. This is an oxmr bug: please report it with FI_LOG_LEVEL=debug output"
            );
            R::on_panic()
        }
    }
}

/// `guard` for slots returning `int`: `Ok(v)` gives `v`, `Err(e)` gives `-e`.
pub fn guard_int(name: &'static str, body: impl FnOnce() -> Result<i32>) -> i32 {
    guard(name, || match body() {
        Ok(v) => v,
        Err(e) => e.to_c(),
    })
}

/// `guard` for slots returning `ssize_t`.
pub fn guard_ssize(name: &'static str, body: impl FnOnce() -> Result<isize>) -> isize {
    guard(name, || match body() {
        Ok(v) => v,
        Err(e) => e.to_c() as isize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_becomes_eother() {
        let r = guard_int("test_panic", || panic!("boom"));
        assert_eq!(r, -(oxmr_ffi::FI_EOTHER as i32));
        let r = guard_ssize("test_panic", || panic!("boom {}", 1));
        assert_eq!(r, -(oxmr_ffi::FI_EOTHER as isize));
        let p: *const u8 = guard("test_panic", || panic!("boom"));
        assert!(p.is_null());
    }

    #[test]
    fn errors_become_negative_codes() {
        let r = guard_int("test_err", || Err(super::super::Error::quiet(oxmr_ffi::FI_EINVAL)));
        assert_eq!(r, -22);
        assert_eq!(guard_int("test_ok", || Ok(7)), 7);
    }
}
