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

/// The object behind a fid pointer that came in through the C ABI, checked
/// (NULL, class and `fi_ops` table) and typed; a NULL or foreign fid is
/// `Err(-FI_EINVAL)` with a log line (as [`borrow`] answers), never a
/// reinterpretation. The forms, each on a pointer to any `fid_*` (or a
/// `void *` that the API says is a fid):
///
/// | form | gives | does |
/// |---|---|---|
/// | `from_fid!(T, p)` | `Result<&T>` | [`borrow`] for the call |
/// | `from_fid!(retain T, p)` | `Result<Arc<T>>` | [`retain`]: a strong count of its own (a binding, a child) |
/// | `from_fid!(close T, p, before_free)` | `Result<()>` | [`close`]: C's count released, or `-FI_EBUSY` |
/// | `from_fid!(release T, p)` | `Result<()>` | [`release`]: C's count given back by a call that consumes the handle |
/// | `from_fid!(take T, p)` | `Result<Arc<T>>` | [`take`]: C's count as an `Arc` (an MR's close, which may keep the object) |
/// | `from_fid!(is T, p)` | `bool` | [`is`]: whether it is an oxmr `T` |
/// | `from_fid!(class p)` | `Option<u32>` | [`class_of`]: the class of any provider's fid |
///
/// # The contract, said once
///
/// The unsafe block inside is sound for a pointer that libfabric passed
/// into one of oxmr's slots as a fid (the slot's own first argument, or a
/// fid argument such as `fi_ep_bind`'s `bfid`, `fi_endpoint`'s domain, an
/// `fi_info`'s `handle`), and for nothing else; it is visible to
/// `boundary/` only (the layering test keeps every other room from naming
/// `crate::boundary`), and each use sits in a slot or a helper a slot
/// calls with its own argument. For such a pointer:
///
/// - it is NULL (checked: `-FI_EINVAL`) or a live fid of some provider.
///   Libfabric's calls (`fi_close`, `fi_cq_read`, ... are inline wrappers
///   of `fid->ops->slot(fid, ...)`) only reach an oxmr slot through the
///   `fi_ops_*` tables of the objects oxmr published, so the slot's own fid
///   is one oxmr created with [`publish`]; a fid argument is one that an
///   open call (of oxmr or another provider) returned to the application.
///   Either way its `struct fid` header is readable, which is all that the
///   class and `fi_ops` checks read before trusting it.
/// - An oxmr fid is still alive: C holds one strong count from [`publish`]
///   until `fi_close`, after which the application may not pass the fid
///   again (fi_close(3); using a closed fid is the application's bug, as
///   for any provider). [`close`] refuses with `-FI_EBUSY` while a binding
///   or a child holds a further count, so a fid in use is never freed under
///   another call; and a borrow lasts only for the call, during which C's
///   count keeps the object alive. (An MR's close takes C's count with
///   [`take`] and removes its key: its other holders, the registry and
///   accesses in flight, are not bindings, and nothing binds to an MR. A
///   closed MR the cache keeps whole, `mr::park`, has its handle cleared,
///   so the closed fid no longer passes the class and `fi_ops` checks.)
/// - It is the `T` it says: [`borrow`] casts only after the class and the
///   `fi_ops` table address (unique to each oxmr type, [`FidObject`]) match,
///   so another type or another provider's object is refused, never read
///   as a `T`.
macro_rules! from_fid {
    (retain $ty:ty, $fid:expr) => {
        // SAFETY: a fid that came in through the C ABI (`from_fid!`'s contract).
        unsafe { $crate::boundary::fid::retain::<$ty>($crate::boundary::fid::fid_ptr($fid)) }
    };
    (close $ty:ty, $fid:expr, $before_free:expr) => {
        // SAFETY: a fid that came in through the C ABI (`from_fid!`'s
        // contract); libfabric's fi_close passes it once, and C's copy is
        // not used after Ok.
        unsafe { $crate::boundary::fid::close::<$ty>($crate::boundary::fid::fid_ptr($fid).cast_mut(), $before_free) }
    };
    (release $ty:ty, $fid:expr) => {
        // SAFETY: a fid that came in through the C ABI (`from_fid!`'s
        // contract), given to a call that consumes the handle (fi_cm(3)).
        unsafe { $crate::boundary::fid::release::<$ty>($crate::boundary::fid::fid_ptr($fid)) }
    };
    (take $ty:ty, $fid:expr) => {
        // SAFETY: a fid that came in through the C ABI (`from_fid!`'s
        // contract), given to a call that consumes the handle (fi_close).
        unsafe { $crate::boundary::fid::take::<$ty>($crate::boundary::fid::fid_ptr($fid)) }
    };
    (try $ty:ty, $fid:expr) => {
        // SAFETY: a fid that came in through the C ABI (`from_fid!`'s contract).
        unsafe { $crate::boundary::fid::borrow_if::<$ty>($crate::boundary::fid::fid_ptr($fid)) }
    };
    (is $ty:ty, $fid:expr) => {
        // SAFETY: a fid that came in through the C ABI (`from_fid!`'s contract).
        unsafe { $crate::boundary::fid::is::<$ty>($crate::boundary::fid::fid_ptr($fid)) }
    };
    (class $fid:expr) => {
        // SAFETY: a fid that came in through the C ABI (`from_fid!`'s contract).
        unsafe { $crate::boundary::fid::class_of($crate::boundary::fid::fid_ptr($fid)) }
    };
    ($ty:ty, $fid:expr) => {
        // SAFETY: a fid that came in through the C ABI (`from_fid!`'s contract).
        unsafe { $crate::boundary::fid::borrow::<$ty>($crate::boundary::fid::fid_ptr($fid)) }
    };
}
pub(crate) use from_fid;

/// Any C fid pointer (`*mut fid_cq`, `*const fid`, a `void *` the API says
/// is a fid) as the `struct fid *` at its start (every `fid_*` begins with
/// its `struct fid`).
pub fn fid_ptr<F>(p: *const F) -> *const ffi::fid {
    p.cast()
}

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
    // SAFETY: NULL (None) or a readable `struct fid` (this fn's contract).
    unsafe { fid.as_ref() }.map(|f| f.fclass as u32)
}

/// Whether `fid` is an oxmr object of type `T`.
///
/// # Safety
/// `fid` is NULL or points to a readable `struct fid`.
#[inline]
pub unsafe fn is<T: FidObject>(fid: *const ffi::fid) -> bool {
    // SAFETY: NULL (false) or a readable `struct fid` (this fn's contract).
    match unsafe { fid.as_ref() } {
        Some(h) => h.fclass == T::CLASS as usize && std::ptr::eq(h.ops, T::fi_ops()),
        None => false,
    }
}

/// The object behind a fid if it is a `T` (None: NULL or another
/// class), for the duration of a call: `is` and the borrow in one look.
///
/// # Safety
/// As for [`borrow`].
#[inline]
pub unsafe fn borrow_if<'a, T: FidObject>(fid: *const ffi::fid) -> Option<&'a T> {
    // SAFETY: NULL (false) or a live fid (this fn's contract); when `is`
    // holds, a T published by `publish`, still alive.
    unsafe { is::<T>(fid).then(|| &*(fid as *const T)) }
}

/// Borrow the object behind a fid for the duration of a call.
///
/// # Safety
/// `fid` is NULL or a fid that libfabric handed to the application and that
/// has not been closed (the libfabric contract for every call).
#[inline(always)]
pub unsafe fn borrow<'a, T: FidObject>(fid: *const ffi::fid) -> Result<&'a T> {
    if fid.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "NULL {} passed to oxmr", T::NAME));
    }
    // SAFETY: non-NULL here, so a live fid of some provider (this fn's
    // contract), whose `struct fid` header `is` reads.
    if !unsafe { is::<T>(fid) } {
        return Err(fail!(
            ffi::FI_EINVAL,
            "object passed where an oxmr {} was expected is something else (class {}); pass the fid the matching open call returned",
            T::NAME,
            // SAFETY: the same non-NULL live fid, its header's class.
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
    // SAFETY: `fid` is NULL or a live fid (this fn's contract, borrow's).
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
    // SAFETY: `fid` is NULL or a live fid (this fn's contract, borrow's).
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

/// Take C's reference back as an `Arc` (an MR's close, which may keep the
/// object: `mr::park`).
///
/// # Safety
/// As for [`borrow`]; after `Ok`, C's copy of the fid must not be used
/// again unless another reference keeps the object alive.
pub unsafe fn take<T: FidObject>(fid: *const ffi::fid) -> Result<Arc<T>> {
    // SAFETY: `fid` is NULL or a live fid (this fn's contract, borrow's).
    let obj: &T = unsafe { borrow(fid) }?;
    // SAFETY: `obj` came from `Arc::into_raw` in `publish`; C's count
    // becomes the returned Arc's.
    Ok(unsafe { Arc::from_raw(obj as *const T) })
}

/// Release C's reference without a close call: for a handle that an API
/// call consumes (a connection request, answered by fi_reject or taken by
/// fi_endpoint, which keeps its own reference).
///
/// # Safety
/// As for [`borrow`]; after `Ok`, C's copy of the fid must not be used
/// again unless another reference keeps the object alive.
pub unsafe fn release<T: FidObject>(fid: *const ffi::fid) -> Result<()> {
    // SAFETY: `fid` is NULL or a live fid (this fn's contract, borrow's).
    let obj: &T = unsafe { borrow(fid) }?;
    // SAFETY: `obj` came from `Arc::into_raw` in `publish`; this gives back
    // the count C held.
    unsafe { Arc::decrement_strong_count(obj as *const T) };
    Ok(())
}
