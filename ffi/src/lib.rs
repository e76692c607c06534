//! Raw bindings to the libfabric headers installed on the build machine.
//!
//! bindgen's output, the values bindgen cannot evaluate, and the C header
//! wrapper every object embeds; the provider crate owns every use of these
//! types. `FI_MAJOR_VERSION`/`FI_MINOR_VERSION` are the
//! headers' own and become the provider's `fi_version`.
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case)]
#![allow(clippy::all, missing_docs, unsafe_op_in_unsafe_fn)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// The C header of an oxmr object (`fid_cq`, `fid_ep`, ...): the one
/// hand-written type here, because every object embeds it first (its
/// address is the fid's) and objects cross threads. Its pointers refer only
/// to oxmr's static ops tables and the application's opaque context.
#[repr(transparent)]
pub struct FidHeader<F>(pub F);

// SAFETY: a header's pointers are to immutable static ops tables and to the
// application's opaque context, which oxmr never dereferences.
unsafe impl<F> Send for FidHeader<F> {}
// SAFETY: a header is written once, when its object is built, and only
// read after (by C through the fid, and by the fid checks).
unsafe impl<F> Sync for FidHeader<F> {}

/// `FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)`: the API the headers describe.
pub const FI_HEADER_VERSION: u32 = (FI_MAJOR_VERSION << 16) | FI_MINOR_VERSION;

/// `FI_VERSION(major, minor)` from fabric.h (a function-like macro bindgen cannot see).
pub const fn fi_version_of(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

// fabric.h defines these as `((uint64_t) -1)` and `FI_ADDR_NOTAVAIL`; bindgen
// cannot evaluate a cast, so they are spelled here with the same value.
/// `FI_ADDR_NOTAVAIL` from fabric.h.
pub const FI_ADDR_NOTAVAIL: fi_addr_t = u64::MAX;
/// `FI_ADDR_UNSPEC` from fabric.h (an alias of FI_ADDR_NOTAVAIL).
pub const FI_ADDR_UNSPEC: fi_addr_t = FI_ADDR_NOTAVAIL;
/// `FI_KEY_NOTAVAIL` from fabric.h.
pub const FI_KEY_NOTAVAIL: u64 = u64::MAX;

/// Values of the names libfabric 2.0 deprecated. Its headers still define
/// them, but through a `_Pragma` that bindgen cannot evaluate, and
/// libfabric's own utility code keeps them under other names (`OFI_MR_BASIC`,
/// `OFI_MR_SCALABLE`, `OFI_MR_UNSPEC` in include/ofi.h) because applications
/// written for API 1.x still pass them: the values are ABI and never change.
pub mod legacy {
    /// `FI_MR_UNSPEC`: no registration mode asked.
    pub const MR_UNSPEC: i32 = 0;
    /// `FI_MR_BASIC` (1 << 0): the 1.0 mode, `FI_MR_VIRT_ADDR |
    /// FI_MR_ALLOCATED | FI_MR_PROV_KEY` today.
    pub const MR_BASIC: i32 = 1 << 0;
    /// `FI_MR_SCALABLE` (1 << 1): the 1.0 mode with application keys and
    /// offsets.
    pub const MR_SCALABLE: i32 = 1 << 1;
    /// `FI_ORDER_NONE`: no ordering (0).
    pub const ORDER_NONE: u64 = 0;
}
