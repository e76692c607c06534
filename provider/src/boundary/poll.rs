//! fid_poll: the poll set's C slots (fi_poll(3); the set is
//! `objects::poll`, opened by `boundary::domain`'s `poll_open`).

use std::ffi::{c_int, c_void};

use oxmr_ffi as ffi;

use super::fid::{fid_header, from_fid, FidHeader};
use super::{common, guard_int};
use crate::fail;
use crate::objects::cntr::Cntr;
use crate::objects::cq::Cq;
use crate::objects::poll::{Poll, PollMember};

pub static POLL_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(common::bind),
    control: Some(common::control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

static POLL_OPS: ffi::fi_ops_poll = ffi::fi_ops_poll {
    size: size_of::<ffi::fi_ops_poll>(),
    poll: Some(poll),
    poll_add: Some(add),
    poll_del: Some(del),
};

crate::fid_object!(Poll, hdr, ffi::FI_CLASS_POLL, "poll set", POLL_FI_OPS);

/// The C header of a new poll set (fi_poll_open takes no context).
pub fn header() -> FidHeader<ffi::fid_poll> {
    FidHeader(ffi::fid_poll { fid: fid_header::<Poll>(std::ptr::null_mut()), ops: &POLL_OPS as *const _ as *mut _ })
}

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    // The members it holds are released with it.
    guard_int("fi_close(poll set)", || from_fid!(close Poll, f, |_| Ok(())).map(|_| 0))
}

unsafe extern "C" fn poll(pollset: *mut ffi::fid_poll, context: *mut *mut c_void, count: c_int) -> c_int {
    guard_int("fi_poll", || {
        let p = from_fid!(Poll, pollset)?;
        let Ok(count) = usize::try_from(count) else {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_poll: count {count} is negative; pass the size of the context array"
            ));
        };
        if count > 0 && context.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "fi_poll: NULL context array with count {count}"));
        }
        let n = p.poll(count, |i, ctx| {
            // SAFETY: fi_poll(3): `context` is an array of `count` pointers
            // (non-NULL, checked above, since `poll` hands out at most
            // `count`), and `i` < `count`.
            unsafe { context.add(i).write(ctx as *mut c_void) }
        });
        Ok(n as c_int)
    })
}

unsafe extern "C" fn add(pollset: *mut ffi::fid_poll, event_fid: *mut ffi::fid, flags: u64) -> i32 {
    guard_int("fi_poll_add", || {
        let p = from_fid!(Poll, pollset)?;
        let member = if from_fid!(is Cq, event_fid) {
            PollMember::Cq(from_fid!(retain Cq, event_fid)?)
        } else if from_fid!(is Cntr, event_fid) {
            PollMember::Cntr(from_fid!(retain Cntr, event_fid)?)
        } else {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_poll_add: the fid (class {:?}) is not an oxmr completion queue or counter; a poll set holds only those",
                from_fid!(class event_fid)
            ));
        };
        p.add(member, flags)?;
        Ok(0)
    })
}

unsafe extern "C" fn del(pollset: *mut ffi::fid_poll, event_fid: *mut ffi::fid, flags: u64) -> i32 {
    guard_int("fi_poll_del", || {
        let p = from_fid!(Poll, pollset)?;
        if event_fid.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "fi_poll_del: NULL fid"));
        }
        // Found by address: the fid is never read, so one that is not a
        // member (of any kind) is simply not found.
        p.remove(event_fid as usize, flags)?;
        Ok(0)
    })
}
