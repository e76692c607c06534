//! fid_cq: the completion queue's C slots.

use std::ffi::{c_char, c_void};

use oxmr_ffi as ffi;

use super::fid::{fid_header, from_fid, FidHeader};
use super::{common, guard, guard_int, guard_ssize, write_out};
use crate::fail;
use crate::objects::cq::{Cq, CqEntry, CqFormat};

pub static CQ_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(common::bind),
    control: Some(control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

static CQ_OPS: ffi::fi_ops_cq = ffi::fi_ops_cq {
    size: size_of::<ffi::fi_ops_cq>(),
    read: Some(read),
    readfrom: Some(readfrom),
    readerr: Some(readerr),
    sread: Some(sread),
    sreadfrom: Some(sreadfrom),
    signal: Some(signal),
    strerror: Some(strerror),
};

crate::fid_object!(Cq, hdr, ffi::FI_CLASS_CQ, "completion queue", CQ_FI_OPS);

/// The C header of a new CQ.
pub fn header(context: *mut c_void) -> FidHeader<ffi::fid_cq> {
    FidHeader(ffi::fid_cq { fid: fid_header::<Cq>(context), ops: &CQ_OPS as *const _ as *mut _ })
}

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    guard_int("fi_close(cq)", || from_fid!(close Cq, f, |_| Ok(())).map(|_| 0))
}

/// Shared FI_GETWAIT / FI_GETWAITOBJ handling for CQs, EQs and counters.
///
/// # Safety
/// `arg` is NULL or points to the type the command names.
pub unsafe fn wait_control(command: i32, arg: *mut c_void, fd: Option<i32>, what: &str) -> crate::error::Result<i32> {
    match command as u32 {
        ffi::FI_GETWAIT => {
            let fd = fd.ok_or_else(|| {
                fail!(
                    ffi::FI_ENODATA,
                    "FI_GETWAIT on a {what} without a wait fd; open it with FI_WAIT_FD or FI_WAIT_UNSPEC"
                )
            })?;
            // SAFETY: FI_GETWAIT with an fd wait object takes an `int *`.
            unsafe { write_out(arg as *mut i32, fd, "FI_GETWAIT fd") }?;
            Ok(0)
        }
        ffi::FI_GETWAITOBJ => {
            let obj = if fd.is_some() { ffi::FI_WAIT_FD } else { ffi::FI_WAIT_NONE };
            // SAFETY: FI_GETWAITOBJ takes an `enum fi_wait_obj *`.
            unsafe { write_out(arg as *mut ffi::fi_wait_obj, obj, "FI_GETWAITOBJ") }?;
            Ok(0)
        }
        c => Err(fail!(ffi::FI_ENOSYS, "fi_control command {c} is not supported on a {what}")),
    }
}

unsafe extern "C" fn control(f: *mut ffi::fid, command: i32, arg: *mut c_void) -> i32 {
    guard_int("fi_control(cq)", || {
        let cq = from_fid!(Cq, f)?;
        // SAFETY: fi_control(3): `arg` is what `command` names (an `int *`
        // for FI_GETWAIT, an `enum fi_wait_obj *` for FI_GETWAITOBJ), which
        // is wait_control's contract.
        unsafe { wait_control(command, arg, cq.wait_fd(), "CQ") }
    })
}

/// Write entry `i` of a CQ read into the application's buffer.
///
/// # Safety
/// `buf` holds at least `i + 1` entries of `fmt`'s size.
unsafe fn put(buf: *mut c_void, i: usize, fmt: CqFormat, e: &CqEntry) {
    let ctx = e.op_context as *mut c_void;
    // SAFETY: `buf` holds `i + 1` entries of `fmt`'s size (this fn's
    // contract); each arm writes entry `i` as that format's struct.
    unsafe {
        match fmt {
            CqFormat::Context => (buf as *mut ffi::fi_cq_entry).add(i).write(ffi::fi_cq_entry { op_context: ctx }),
            CqFormat::Msg => (buf as *mut ffi::fi_cq_msg_entry).add(i).write(ffi::fi_cq_msg_entry {
                op_context: ctx,
                flags: e.flags,
                len: e.len,
            }),
            CqFormat::Data => (buf as *mut ffi::fi_cq_data_entry).add(i).write(ffi::fi_cq_data_entry {
                op_context: ctx,
                flags: e.flags,
                len: e.len,
                buf: e.buf as *mut c_void,
                data: e.data,
            }),
            CqFormat::Tagged => (buf as *mut ffi::fi_cq_tagged_entry).add(i).write(ffi::fi_cq_tagged_entry {
                op_context: ctx,
                flags: e.flags,
                len: e.len,
                buf: e.buf as *mut c_void,
                data: e.data,
                tag: e.tag,
            }),
        }
    }
}

/// Common body of the four read slots.
///
/// # Safety
/// C contract of fi_cq_read*: `buf` holds `count` entries, `src` is NULL or
/// holds `count` addresses, `cond` is NULL or points to a size_t.
/// (In line in each reading slot: a spinning reader's every call.)
#[inline(always)]
unsafe fn read_common(
    cq: *mut ffi::fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut ffi::fi_addr_t,
    blocking: Option<(*const c_void, i32)>,
) -> crate::error::Result<isize> {
    let cq = from_fid!(Cq, cq)?;
    if count == 0 {
        // "A count value of 0 may be used to drive progress" (fi_cq(3)):
        // then 0 when entries wait, -FI_EAVAIL for an error at the head,
        // -FI_EAGAIN for none (as libfabric's util CQs answer).
        return match cq.read(0, |_, _| {}) {
            Err(e) if e.code() == ffi::FI_EAGAIN && cq.pending() > 0 => Ok(0),
            Err(e) => Err(e),
            Ok(n) => Ok(n as isize),
        };
    }
    if buf.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "fi_cq_read: NULL buffer for {count} entries"));
    }
    let fmt = cq.format;
    let out = |i: usize, e: &CqEntry| {
        // SAFETY: `i < count` (the CQ hands out at most `count`), and the
        // buffers are sized by the caller's contract.
        unsafe {
            put(buf, i, fmt, e);
            if !src.is_null() {
                src.add(i).write(e.src);
            }
        }
    };
    let n = match blocking {
        None => cq.read(count, out)?,
        Some((cond, timeout)) => {
            // SAFETY: with FI_CQ_COND_THRESHOLD, cond points to a size_t;
            // otherwise it means nothing and is not read (fi_cq(3)).
            let threshold =
                if cond.is_null() || !cq.threshold_cond { 1 } else { unsafe { *(cond as *const usize) }.max(1) };
            cq.sread(count, threshold, timeout, out)?
        }
    };
    Ok(n as isize)
}

unsafe extern "C" fn read(cq: *mut ffi::fid_cq, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: fi_cq_read(3): `buf` is NULL or holds `count` entries of the
    // CQ's format (read_common's contract; no `src`, no `cond`).
    guard_ssize("fi_cq_read", || unsafe { read_common(cq, buf, count, std::ptr::null_mut(), None) })
}

unsafe extern "C" fn readfrom(cq: *mut ffi::fid_cq, buf: *mut c_void, count: usize, src: *mut ffi::fi_addr_t) -> isize {
    // SAFETY: fi_cq_readfrom(3): `buf` is NULL or holds `count` entries of
    // the CQ's format, `src` NULL or `count` fi_addr_t (read_common's contract).
    guard_ssize("fi_cq_readfrom", || unsafe { read_common(cq, buf, count, src, None) })
}

unsafe extern "C" fn sread(
    cq: *mut ffi::fid_cq,
    buf: *mut c_void,
    count: usize,
    cond: *const c_void,
    timeout: i32,
) -> isize {
    // SAFETY: fi_cq_sread(3): `buf` is NULL or holds `count` entries of the
    // CQ's format, `cond` NULL or a size_t (read_common's contract).
    guard_ssize("fi_cq_sread", || unsafe { read_common(cq, buf, count, std::ptr::null_mut(), Some((cond, timeout))) })
}

unsafe extern "C" fn sreadfrom(
    cq: *mut ffi::fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut ffi::fi_addr_t,
    cond: *const c_void,
    timeout: i32,
) -> isize {
    // SAFETY: fi_cq_sreadfrom(3): `buf` is NULL or holds `count` entries,
    // `src` NULL or `count` fi_addr_t, `cond` NULL or a size_t (read_common's contract).
    guard_ssize("fi_cq_sreadfrom", || unsafe { read_common(cq, buf, count, src, Some((cond, timeout))) })
}

unsafe extern "C" fn readerr(cq: *mut ffi::fid_cq, buf: *mut ffi::fi_cq_err_entry, flags: u64) -> isize {
    guard_ssize("fi_cq_readerr", || {
        let cq = from_fid!(Cq, cq)?;
        if buf.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "fi_cq_readerr: NULL buffer"));
        }
        if flags != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_cq_readerr: flags {flags:#x}; pass 0"));
        }
        let e = cq.readerr()?;
        // fi_cq_err_entry grows with the API (err_data_size 1.5, src_addr
        // 1.20): an application built against older headers passes the
        // smaller struct, so each field is written alone, through the
        // pointer, never the whole struct. oxmr has no err_data, so it
        // reports none and leaves the caller's err_data buffer untouched;
        // src_addr is left alone (reported only with FI_SOURCE_ERR, which
        // oxmr does not offer).
        macro_rules! put {
            ($f:ident, $v:expr) => {
                // SAFETY: `buf` is non-NULL and points to the application's
                // fi_cq_err_entry (C contract of fi_cq_readerr), which has
                // this field at its API version.
                unsafe { std::ptr::addr_of_mut!((*buf).$f).write($v) }
            };
        }
        put!(op_context, e.op_context as *mut c_void);
        put!(flags, e.flags);
        put!(len, e.len);
        put!(buf, e.buf as *mut c_void);
        put!(data, e.data);
        put!(tag, e.tag);
        put!(olen, e.olen);
        put!(err, e.err);
        put!(prov_errno, e.prov_errno);
        // (Not there before API 1.5: fi_cq(3).)
        if cq.domain.fabric.api_1_5() {
            put!(err_data_size, 0);
        }
        Ok(1)
    })
}

unsafe extern "C" fn signal(cq: *mut ffi::fid_cq) -> i32 {
    guard_int("fi_cq_signal", || {
        from_fid!(Cq, cq)?.signal();
        Ok(0)
    })
}

/// Shared strerror for CQs and EQs: oxmr's prov_errno values are
/// libfabric error codes, so libfabric's own text describes them.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes.
pub unsafe fn strerror_common(prov_errno: i32, buf: *mut c_char, len: usize) -> *const c_char {
    // SAFETY: fi_strerror returns a static string for any value.
    let s = unsafe { ffi::fi_strerror(prov_errno.unsigned_abs().min(i32::MAX as u32) as i32) };
    if buf.is_null() || len == 0 {
        return s;
    }
    // SAFETY: `s` is a static NUL-terminated string.
    let text = unsafe { std::ffi::CStr::from_ptr(s) }.to_string_lossy();
    // SAFETY: `buf` has `len` bytes.
    unsafe { super::copy_cstr(&text, buf, len) };
    buf
}

unsafe extern "C" fn strerror(
    cq: *mut ffi::fid_cq,
    prov_errno: i32,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    let _ = cq;
    // SAFETY: fi_cq_strerror(3): `buf` is NULL or `len` writable bytes.
    guard("fi_cq_strerror", || unsafe { strerror_common(prov_errno, buf, len) })
}
