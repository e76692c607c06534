//! Fabric: the root object; owns nothing but its name.

use oxmr_ffi as ffi;

use oxmr_ffi::FidHeader;

/// A fabric.
#[repr(C)]
pub struct Fabric {
    pub hdr: FidHeader<ffi::fid_fabric>,
    pub name: String,
    /// The FI_OXMR_* values this fabric's objects use.
    pub config: crate::config::Config,
}

impl Fabric {
    /// Whether the application asked for API 1.5 or later (`fi_getinfo`'s
    /// version, kept in the fabric fid): older structures end before the
    /// fields 1.5 added (`err_data_size` of the error entries).
    pub fn api_1_5(&self) -> bool {
        self.api_at_least(1, 5)
    }

    /// Whether the application's API version is `major.minor` or later.
    pub fn api_at_least(&self, major: u32, minor: u32) -> bool {
        self.hdr.0.api_version >= ffi::fi_version_of(major, minor)
    }
}
