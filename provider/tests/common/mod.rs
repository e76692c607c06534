//! What the tests that drive oxmr through its C ops tables share: a fabric
//! and domain on 127.0.0.1, opened through the provider struct's entries.

#![allow(clippy::unnecessary_cast)] // FI_* constant types vary with the header version

use std::ptr::{null, null_mut};

use oxmr::boundary::provider::provider_ptr;
use oxmr_ffi as ffi;

pub struct Opened {
    pub info: *mut ffi::fi_info,
    pub fabric: *mut ffi::fid_fabric,
    pub domain: *mut ffi::fid_domain,
}

pub unsafe fn close(f: *mut ffi::fid) -> i32 {
    unsafe { ((*(*f).ops).close.unwrap())(f) }
}

pub unsafe fn open() -> Opened {
    unsafe {
        let p = &*provider_ptr();
        let mut info = null_mut();
        let r = (p.getinfo.unwrap())(
            ffi::FI_HEADER_VERSION,
            c"127.0.0.1".as_ptr(),
            c"0".as_ptr(),
            ffi::FI_SOURCE as u64,
            null(),
            &mut info,
        );
        assert_eq!(r, 0, "getinfo");
        assert!(!info.is_null());
        let mut fabric = null_mut();
        assert_eq!((p.fabric.unwrap())((*info).fabric_attr, &mut fabric, null_mut()), 0);
        let mut domain = null_mut();
        let r = ((*(*fabric).ops).domain.unwrap())(fabric, info, &mut domain, null_mut());
        assert_eq!(r, 0, "fi_domain");
        Opened { info, fabric, domain }
    }
}

pub unsafe fn teardown(o: Opened) {
    unsafe {
        assert_eq!(close(o.domain.cast()), 0);
        assert_eq!(close(o.fabric.cast()), 0);
        ffi::fi_freeinfo(o.info);
    }
}
