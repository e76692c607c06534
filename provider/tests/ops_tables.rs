//! Drive oxmr through its real C ops tables (as libfabric would), from Rust.
//!
//! These tests call the provider struct's getinfo/fabric entries and then
//! only the function pointers found in the returned fids, so they exercise
//! exactly the slots an application reaches through libfabric's inline
//! wrappers. (The C programs under fabtests/ do the same through the real
//! libfabric loader.)

#![allow(clippy::unnecessary_cast)] // FI_* constant types vary with the header version

use std::ffi::c_void;
use std::ptr::{null, null_mut};

use oxmr_ffi as ffi;

mod common;
use common::{close, open, teardown};

#[test]
fn getinfo_answers_rdm_on_loopback() {
    unsafe {
        let o = open();
        let i = &*o.info;
        assert_eq!((*i.ep_attr).type_, ffi::FI_EP_RDM);
        assert_eq!(i.addr_format, ffi::FI_SOCKADDR_IN);
        assert_eq!(i.src_addrlen, 16);
        let name = std::ffi::CStr::from_ptr((*i.domain_attr).name);
        assert_eq!(name.to_str().unwrap(), "lo");
        teardown(o);
    }
}

#[test]
fn close_order_is_enforced() {
    unsafe {
        let o = open();
        let mut attr = ffi::fi_cq_attr { size: 16, format: ffi::FI_CQ_FORMAT_TAGGED, ..Default::default() };
        let mut cq = null_mut();
        assert_eq!(((*(*o.domain).ops).cq_open.unwrap())(o.domain, &mut attr, &mut cq, null_mut()), 0);
        assert_eq!(close(o.domain.cast()), -(ffi::FI_EBUSY as i32), "domain has a CQ");
        assert_eq!(close(o.fabric.cast()), -(ffi::FI_EBUSY as i32), "fabric has a domain");
        // A CQ's fid handed to the domain's close slot is recognised as
        // something else and refused, never reinterpreted.
        let domain_close = (*(*o.domain).fid.ops).close.unwrap();
        assert_eq!(domain_close(cq.cast()), -(ffi::FI_EINVAL as i32));
        assert_eq!(close(cq.cast()), 0);
        teardown(o);
    }
}

#[test]
fn cq_sread_times_out_and_signal_wakes() {
    unsafe {
        let o = open();
        let mut attr = ffi::fi_cq_attr { size: 4, wait_obj: ffi::FI_WAIT_FD, ..Default::default() };
        let mut cq = null_mut();
        assert_eq!(((*(*o.domain).ops).cq_open.unwrap())(o.domain, &mut attr, &mut cq, null_mut()), 0);
        let ops = &*(*cq).ops;
        let mut buf = [0u8; 64];
        let t = std::time::Instant::now();
        let r = (ops.sread.unwrap())(cq, buf.as_mut_ptr().cast::<c_void>(), 1, null(), 50);
        assert_eq!(r, -(ffi::FI_EAGAIN as isize));
        assert!(t.elapsed() >= std::time::Duration::from_millis(45));
        assert_eq!((ops.signal.unwrap())(cq), 0);
        let r = (ops.sread.unwrap())(cq, buf.as_mut_ptr().cast::<c_void>(), 1, null(), -1);
        assert_eq!(r, -(ffi::FI_EAGAIN as isize), "a latched signal ends an infinite sread");
        let mut fd: i32 = -1;
        let ctl = (*(*cq).fid.ops).control.unwrap();
        assert_eq!(ctl(cq.cast(), ffi::FI_GETWAIT as i32, (&mut fd as *mut i32).cast()), 0);
        assert!(fd >= 0);
        assert_eq!(close(cq.cast()), 0);
        teardown(o);
    }
}

#[test]
fn data_ops_refuse_before_enable_and_collectives_are_enosys() {
    unsafe {
        let o = open();
        let mut ep = null_mut();
        let r = ((*(*o.domain).ops).endpoint.unwrap())(o.domain, o.info, &mut ep, null_mut());
        assert_eq!(r, 0);
        let buf = [0u8; 8];
        let send = (*(*ep).msg).send.unwrap();
        assert_eq!(send(ep, buf.as_ptr().cast(), 8, null_mut(), 0, null_mut()), -(ffi::FI_EOPBADSTATE as isize));
        let write = (*(*ep).rma).write.unwrap();
        assert_eq!(write(ep, buf.as_ptr().cast(), 8, null_mut(), 0, 0, 0, null_mut()), -(ffi::FI_EOPBADSTATE as isize));
        let atomic = (*(*ep).atomic).write.unwrap();
        let r = atomic(ep, buf.as_ptr().cast(), 1, null_mut(), 0, 0, 0, ffi::FI_UINT64, ffi::FI_SUM, null_mut());
        assert_eq!(r, -(ffi::FI_EOPBADSTATE as isize));
        let barrier = (*(*ep).collective).barrier.unwrap();
        assert_eq!(barrier(ep, 0, null_mut()), -(ffi::FI_ENOSYS as isize));
        assert_eq!(close(ep.cast()), 0);
        teardown(o);
    }
}
