//! Fabric: the root object; owns nothing but its name.

use oxmr_ffi as ffi;

use crate::boundary::fid::Header;

/// A fabric.
#[repr(C)]
pub struct Fabric {
    pub hdr: Header<ffi::fid_fabric>,
    pub name: String,
}
