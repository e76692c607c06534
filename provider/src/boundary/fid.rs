//! Every cast between a libfabric `fid` and an oxmr object happens here.
//!
//! Each object is `#[repr(C)]` with its C header (`fid_cq`, `fid_ep`, ...)
//! as the first field, is created as an `Arc`, and is handed to C as the
//! `Arc`'s raw pointer, which is also the address of its `struct fid`.
//!
//! Ownership: C holds exactly one strong count, released by `fi_close`.
//! Children and bindings hold further strong counts (an endpoint holds its
//! CQs, AV and domain), so `fi_close` of an object that is still bound or has
//! children sees a count above one and answers `-FI_EBUSY`; the memory can
//! never be freed under a holder, and is freed exactly once.
//!
//! A fid is recognised by its class and by the address of its `fi_ops`
//! table, which is unique to each oxmr type: a fid of another type (or of
//! another provider) is rejected with `-FI_EINVAL`, never reinterpreted.

use std::sync::Arc;

use oxmr_ffi as ffi;

use crate::error::Result;
use crate::fail;

pub use oxmr_ffi::FidHeader;

/// Ties an oxmr object to its C handle.
///
/// # Safety
/// Implementors are `#[repr(C)]` with a `FidHeader<fid_*>` at offset 0 whose
/// `fid.ops` is `Self::fi_ops()`. Use [`fid_object!`](crate::fid_object).
pub unsafe trait FidObject: Send + Sync + Sized + 'static {
    /// The `FI_CLASS_*` of the object.
    const CLASS: u32;
    /// Human name for log lines ("completion queue").
    const NAME: &'static str;
    /// The object's `struct fi_ops`, unique to this type.
    fn fi_ops() -> *const ffi::fi_ops;
}

/// Implement [`FidObject`] for a `#[repr(C)]` type whose first field is its header.
#[macro_export]
macro_rules! fid_object {
    ($ty:ty, $field:ident, $class:expr, $name:expr, $ops:expr) => {
        const _: () = assert!(::std::mem::offset_of!($ty, $field) == 0);
        // SAFETY: the assertion above puts the header at offset 0, and every
        // constructor of the type sets `fid.ops` to `$ops`.
        unsafe impl $crate::boundary::fid::FidObject for $ty {
            const CLASS: u32 = $class;
            const NAME: &'static str = $name;
            fn fi_ops() -> *const ::oxmr_ffi::fi_ops {
                ::std::ptr::addr_of!($ops)
            }
        }
    };
}

/// Build the `struct fid` that starts every header.
pub fn fid_header<T: FidObject>(context: *mut std::ffi::c_void) -> ffi::fid {
    ffi::fid { fclass: T::CLASS as usize, context, ops: T::fi_ops() as *mut ffi::fi_ops }
}

/// Hand an object to C: one strong count moves to C, released by [`close`].
pub fn publish<T: FidObject>(obj: Arc<T>) -> *mut ffi::fid {
    Arc::into_raw(obj) as *mut ffi::fid
}

/// Class of any fid, oxmr's or not (for dispatching a bind).
///
/// # Safety
/// `fid` is NULL or points to a readable `struct fid`.
pub unsafe fn class_of(fid: *const ffi::fid) -> Option<u32> {
    // SAFETY: the caller guarantees a readable header when non-NULL.
    unsafe { fid.as_ref() }.map(|f| f.fclass as u32)
}

/// Whether `fid` is an oxmr object of type `T`.
///
/// # Safety
/// `fid` is NULL or points to a readable `struct fid`.
pub unsafe fn is<T: FidObject>(fid: *const ffi::fid) -> bool {
    // SAFETY: the caller guarantees a readable header when non-NULL.
    match unsafe { fid.as_ref() } {
        Some(h) => h.fclass == T::CLASS as usize && std::ptr::eq(h.ops, T::fi_ops()),
        None => false,
    }
}

/// Borrow the object behind a fid for the duration of a call.
///
/// # Safety
/// `fid` is NULL or a fid that libfabric handed to the application and that
/// has not been closed (the libfabric contract for every call).
pub unsafe fn borrow<'a, T: FidObject>(fid: *const ffi::fid) -> Result<&'a T> {
    if fid.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "NULL {} passed to oxmr", T::NAME));
    }
    // SAFETY: non-NULL and, by the caller's contract, a live fid.
    if !unsafe { is::<T>(fid) } {
        return Err(fail!(
            ffi::FI_EINVAL,
            "object passed where an oxmr {} was expected is something else (class {}); pass the fid the matching open call returned",
            T::NAME,
            // SAFETY: non-NULL live fid, see above.
            unsafe { (*fid).fclass }
        ));
    }
    // SAFETY: `is` proved this is a T published by `publish`, still alive.
    Ok(unsafe { &*(fid as *const T) })
}

/// Take a new strong reference to the object behind a fid (for a binding).
///
/// # Safety
/// As for [`borrow`].
pub unsafe fn retain<T: FidObject>(fid: *const ffi::fid) -> Result<Arc<T>> {
    // SAFETY: forwarded contract.
    let obj: &T = unsafe { borrow(fid) }?;
    let ptr = obj as *const T;
    // SAFETY: `ptr` came from `Arc::into_raw` in `publish` and C still holds
    // that count, so the allocation is live.
    unsafe {
        Arc::increment_strong_count(ptr);
        Ok(Arc::from_raw(ptr))
    }
}

/// `fi_close`: release C's reference, or `-FI_EBUSY` while others remain.
///
/// `before_free` runs when the close will succeed (with the object still
/// alive) and may refuse; it is where an object detaches itself.
///
/// # Safety
/// As for [`borrow`]; after `Ok`, the fid is dangling.
pub unsafe fn close<T: FidObject>(fid: *mut ffi::fid, before_free: impl FnOnce(&T) -> Result<()>) -> Result<()> {
    // SAFETY: forwarded contract.
    let obj: &T = unsafe { borrow(fid) }?;
    let ptr = obj as *const T;
    // SAFETY: `ptr` came from `Arc::into_raw`; we take C's count back here
    // and give it back below if the close is refused.
    let arc = unsafe { Arc::from_raw(ptr) };
    let holders = Arc::strong_count(&arc) - 1;
    if holders > 0 {
        let _ = Arc::into_raw(arc);
        return Err(fail!(
            ffi::FI_EBUSY,
            "fi_close of {}: still in use by {} bound or child object(s); close endpoints, MRs and other children first",
            T::NAME,
            holders
        ));
    }
    if let Err(e) = before_free(&arc) {
        let _ = Arc::into_raw(arc);
        return Err(e);
    }
    drop(arc);
    Ok(())
}

/// Release C's reference without a close call: for a handle that an API
/// call consumes (a connection request, answered by fi_reject or taken by
/// fi_endpoint, which keeps its own reference).
///
/// # Safety
/// As for [`borrow`]; after `Ok`, C's copy of the fid must not be used
/// again unless another reference keeps the object alive.
pub unsafe fn release<T: FidObject>(fid: *const ffi::fid) -> Result<()> {
    // SAFETY: forwarded contract.
    let obj: &T = unsafe { borrow(fid) }?;
    // SAFETY: `obj` came from `Arc::into_raw` in `publish`; this gives back
    // the count C held.
    unsafe { Arc::decrement_strong_count(obj as *const T) };
    Ok(())
}
