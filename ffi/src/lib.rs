//! Raw bindings to the libfabric headers installed on the build machine.
//!
//! Nothing but bindgen's output lives here; the provider crate owns every
//! use of these types. `FI_MAJOR_VERSION`/`FI_MINOR_VERSION` are the
//! headers' own and become the provider's `fi_version`.
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case)]
#![allow(clippy::all, missing_docs, unsafe_op_in_unsafe_fn)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

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
