//! The atomic slots of an endpoint (fi_atomic(3)): the base, fetch and
//! compare calls with their `v`, `msg` and inject forms decode their C
//! arguments (operands as `fi_ioc` element counts, turned into bytes by the
//! datatype's size) and hand them to the endpoint's engine; the valid calls
//! and `fi_query_atomic` (in `domain`) answer from `mr::atomic::valid`, the
//! table the target executes by.
//!
//! Every atomic names one remote `fi_rma_ioc` (rma_iov_limit 1, as RMA),
//! at most `mr::atomic::MAX_BYTES` of elements (the count the valid calls
//! report), and up to `iov_limit` local iocs per operand array.

use std::ffi::c_void;

use ffi::{fi_addr_t, fid_ep};
use oxmr_ffi as ffi;

use super::ep_data::{buffer_ok, msg_flags, null_msg, post_triggered, triggered, with_ep, INJECT};
use super::guard_int;
use crate::error::{Error, Result};
use crate::fail;
use crate::info::attrs;
use crate::mr::atomic::{self as exec, Call};
use crate::objects::ep::{AtomicOp, AtomicWhat, Held, Iovs};

/// The size of one element, or -FI_EOPNOTSUPP with a log line.
pub(super) fn element(call: Call, op: u32, dt: u32) -> Result<usize> {
    exec::valid(call, op, dt).ok_or_else(|| {
        fail!(
            ffi::FI_EOPNOTSUPP,
            "atomic operation {op} on datatype {dt} is not supported by the {call:?} calls (the valid calls say which are)"
        )
    })
}

/// `count` elements of `size` bytes at `buf`.
fn one(buf: *const c_void, count: usize, size: usize) -> Result<Iovs> {
    let len = count.checked_mul(size).ok_or_else(|| fail!(ffi::FI_EINVAL, "atomic count {count} overflows"))?;
    buffer_ok(buf as usize, len)?;
    Ok(Iovs::one(buf as usize, len))
}

/// `n` iocs of elements of `size` bytes.
///
/// # Safety
/// `ioc` is NULL or holds `n` fi_iocs.
unsafe fn iocs(ioc: *const ffi::fi_ioc, n: usize, size: usize, what: &str) -> Result<Iovs> {
    if n > attrs::IOV_LIMIT {
        return Err(fail!(ffi::FI_EINVAL, "{n} {what} iocs; oxmr takes at most {} (iov_limit)", attrs::IOV_LIMIT));
    }
    if n > 0 && ioc.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "NULL {what} ioc array with count {n}"));
    }
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: `ioc` is non-NULL when n > 0 and holds `n` fi_iocs (this fn's contract); i < n.
        let c = unsafe { &*ioc.add(i) };
        let len = c
            .count
            .checked_mul(size)
            .ok_or_else(|| fail!(ffi::FI_EINVAL, "{what} ioc {i}: count {} overflows", c.count))?;
        buffer_ok(c.addr as usize, len)?;
        v.push((c.addr as usize, len));
    }
    Iovs::collect(v).ok_or_else(|| fail!(ffi::FI_EINVAL, "too many {what} iocs"))
}

/// The remote side of an atomic.
struct Remote {
    dest: u64,
    addr: u64,
    key: u64,
}

/// Build an atomic; for FI_ATOMIC_READ the operand is ignored (fi_atomic(3):
/// it may be NULL).
#[allow(clippy::too_many_arguments)]
fn op(
    ctx: *mut c_void,
    call: Call,
    op: u32,
    dt: u32,
    operand: Iovs,
    compare: Iovs,
    result: Iovs,
    r: Remote,
    data: Option<u64>,
    flags: Option<u64>,
) -> AtomicOp {
    let operand = if exec::has_operand(op) { operand } else { Iovs::default() };
    let what = AtomicWhat { op, dt, call };
    AtomicOp { ctx: ctx as usize, what, operand, compare, result, dest: r.dest, addr: r.addr, key: r.key, data, flags }
}

fn post(name: &'static str, ep: *mut fid_ep, o: impl FnOnce() -> Result<AtomicOp>) -> isize {
    with_ep(name, ep, |ep, alias| {
        let o = o()?;
        if let Some(a) = alias {
            a.allows(crate::objects::alias::Only::Transmit, name)?;
        }
        match triggered(alias, o.flags) {
            (true, flags) => post_triggered(ep, o.ctx, Held::Atomic(AtomicOp { flags, ..o })),
            (false, flags) => ep.atomic(AtomicOp { flags, ..o }),
        }
    })
}

/// The parts of an fi_msg_atomic: its operands (as `call` counts them), the
/// remote side, the datatype and operation, context and flags.
///
/// # Safety
/// `m` is a readable fi_msg_atomic whose `msg_iov` is NULL or holds
/// `iov_count` fi_iocs and whose `rma_iov` is NULL or holds
/// `rma_iov_count` fi_rma_iocs.
unsafe fn from_msg(
    name: &'static str,
    m: &ffi::fi_msg_atomic,
    call: Call,
    flags: u64,
) -> Result<(usize, Iovs, Remote, Option<u64>, u64)> {
    let flags = msg_flags(name, flags)?;
    let size = element(call, m.op, m.datatype)?;
    if m.rma_iov_count != 1 || m.rma_iov.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "{name}: rma_iov_count {}: oxmr takes exactly 1", m.rma_iov_count));
    }
    // SAFETY: one fi_rma_ioc, checked non-NULL.
    let r = unsafe { &*m.rma_iov };
    // SAFETY: `msg_iov` is NULL or holds `iov_count` fi_iocs (this fn's contract).
    let v = unsafe { iocs(m.msg_iov, m.iov_count, size, "operand") }?;
    let remote_len = r.count.saturating_mul(size);
    if exec::has_operand(m.op) && v.iter().map(|x| x.1).sum::<usize>() != remote_len {
        return Err(fail!(ffi::FI_EINVAL, "{name}: local iocs and rma_iov count different numbers of elements"));
    }
    let data = (flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
    Ok((remote_len, v, Remote { dest: m.addr, addr: r.addr, key: r.key }, data, flags))
}

/// A `*msg` call's result iocs hold as many elements as its rma_iov.
fn results_fit(name: &str, res: &Iovs, remote_len: usize) -> Result<()> {
    match res.iter().map(|x| x.1).sum::<usize>() == remote_len {
        true => Ok(()),
        false => Err(fail!(ffi::FI_EINVAL, "{name}: result iocs and rma_iov count different numbers of elements")),
    }
}

// ---- base atomics ----

unsafe extern "C" fn atomic_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: ffi::fi_datatype,
    o: ffi::fi_op,
    ctx: *mut c_void,
) -> isize {
    post("fi_atomic", ep, || {
        let v = one(buf, count, element(Call::Write, o, dt)?)?;
        let r = Remote { dest, addr, key };
        Ok(op(ctx, Call::Write, o, dt, v, Iovs::default(), Iovs::default(), r, None, None))
    })
}

unsafe extern "C" fn atomic_writev(
    ep: *mut fid_ep,
    iov: *const ffi::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: ffi::fi_datatype,
    o: ffi::fi_op,
    ctx: *mut c_void,
) -> isize {
    post("fi_atomicv", ep, || {
        // SAFETY: `iov` holds `count` fi_iocs (fi_atomicv's contract with its caller).
        let v = unsafe { iocs(iov, count, element(Call::Write, o, dt)?, "operand") }?;
        let r = Remote { dest, addr, key };
        Ok(op(ctx, Call::Write, o, dt, v, Iovs::default(), Iovs::default(), r, None, None))
    })
}

unsafe extern "C" fn atomic_writemsg(ep: *mut fid_ep, msg: *const ffi::fi_msg_atomic, flags: u64) -> isize {
    // SAFETY: `msg` is NULL or a readable fi_msg_atomic (fi_atomicmsg's contract).
    let Some(m) = (unsafe { msg.as_ref() }) else { return null_msg("fi_atomicmsg") };
    post("fi_atomicmsg", ep, || {
        // SAFETY: its arrays hold what it counts (fi_atomicmsg's contract).
        let (_, v, r, data, flags) = unsafe { from_msg("fi_atomicmsg", m, Call::Write, flags) }?;
        Ok(op(m.context, Call::Write, m.op, m.datatype, v, Iovs::default(), Iovs::default(), r, data, Some(flags)))
    })
}

unsafe extern "C" fn atomic_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: ffi::fi_datatype,
    o: ffi::fi_op,
) -> isize {
    post("fi_inject_atomic", ep, || {
        let v = one(buf, count, element(Call::Write, o, dt)?)?;
        let r = Remote { dest, addr, key };
        let none = std::ptr::null_mut();
        Ok(op(none, Call::Write, o, dt, v, Iovs::default(), Iovs::default(), r, None, Some(INJECT)))
    })
}

// ---- fetch atomics ----

unsafe extern "C" fn atomic_readwrite(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: ffi::fi_datatype,
    o: ffi::fi_op,
    ctx: *mut c_void,
) -> isize {
    post("fi_fetch_atomic", ep, || {
        let size = element(Call::Fetch, o, dt)?;
        let v = if exec::has_operand(o) { one(buf, count, size)? } else { Iovs::default() };
        let res = one(result, count, size)?;
        let r = Remote { dest, addr, key };
        Ok(op(ctx, Call::Fetch, o, dt, v, Iovs::default(), res, r, None, None))
    })
}

unsafe extern "C" fn atomic_readwritev(
    ep: *mut fid_ep,
    iov: *const ffi::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    resultv: *mut ffi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: ffi::fi_datatype,
    o: ffi::fi_op,
    ctx: *mut c_void,
) -> isize {
    post("fi_fetch_atomicv", ep, || {
        let size = element(Call::Fetch, o, dt)?;
        // SAFETY: `iov` holds `count` fi_iocs and `resultv` `result_count` (fi_fetch_atomicv's contract).
        let (v, res) = unsafe {
            let v = if exec::has_operand(o) { iocs(iov, count, size, "operand")? } else { Iovs::default() };
            (v, iocs(resultv, result_count, size, "result")?)
        };
        let r = Remote { dest, addr, key };
        Ok(op(ctx, Call::Fetch, o, dt, v, Iovs::default(), res, r, None, None))
    })
}

unsafe extern "C" fn atomic_readwritemsg(
    ep: *mut fid_ep,
    msg: *const ffi::fi_msg_atomic,
    resultv: *mut ffi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    // SAFETY: `msg` is NULL or a readable fi_msg_atomic (fi_fetch_atomicmsg's contract).
    let Some(m) = (unsafe { msg.as_ref() }) else { return null_msg("fi_fetch_atomicmsg") };
    post("fi_fetch_atomicmsg", ep, || {
        // SAFETY: its arrays, and `resultv`, hold what they count (fi_fetch_atomicmsg's contract).
        let ((rl, v, r, data, flags), res) = unsafe {
            let parts = from_msg("fi_fetch_atomicmsg", m, Call::Fetch, flags)?;
            let size = element(Call::Fetch, m.op, m.datatype)?;
            (parts, iocs(resultv, result_count, size, "result")?)
        };
        results_fit("fi_fetch_atomicmsg", &res, rl)?;
        Ok(op(m.context, Call::Fetch, m.op, m.datatype, v, Iovs::default(), res, r, data, Some(flags)))
    })
}

// ---- compare atomics ----

unsafe extern "C" fn atomic_compwrite(
    ep: *mut fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    compare: *const c_void,
    _compare_desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: ffi::fi_datatype,
    o: ffi::fi_op,
    ctx: *mut c_void,
) -> isize {
    post("fi_compare_atomic", ep, || {
        let size = element(Call::Compare, o, dt)?;
        let (v, c, res) = (one(buf, count, size)?, one(compare, count, size)?, one(result, count, size)?);
        Ok(op(ctx, Call::Compare, o, dt, v, c, res, Remote { dest, addr, key }, None, None))
    })
}

unsafe extern "C" fn atomic_compwritev(
    ep: *mut fid_ep,
    iov: *const ffi::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    comparev: *const ffi::fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut ffi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    dt: ffi::fi_datatype,
    o: ffi::fi_op,
    ctx: *mut c_void,
) -> isize {
    post("fi_compare_atomicv", ep, || {
        let size = element(Call::Compare, o, dt)?;
        // SAFETY: each array holds the fi_iocs it counts (fi_compare_atomicv's contract).
        let (v, c, res) = unsafe {
            (
                iocs(iov, count, size, "operand")?,
                iocs(comparev, compare_count, size, "compare")?,
                iocs(resultv, result_count, size, "result")?,
            )
        };
        Ok(op(ctx, Call::Compare, o, dt, v, c, res, Remote { dest, addr, key }, None, None))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn atomic_compwritemsg(
    ep: *mut fid_ep,
    msg: *const ffi::fi_msg_atomic,
    comparev: *const ffi::fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut ffi::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    // SAFETY: `msg` is NULL or a readable fi_msg_atomic (fi_compare_atomicmsg's contract).
    let Some(m) = (unsafe { msg.as_ref() }) else { return null_msg("fi_compare_atomicmsg") };
    post("fi_compare_atomicmsg", ep, || {
        // SAFETY: its arrays, `comparev` and `resultv` hold what they count (fi_compare_atomicmsg's contract).
        let ((rl, v, r, data, flags), c, res) = unsafe {
            let parts = from_msg("fi_compare_atomicmsg", m, Call::Compare, flags)?;
            let size = element(Call::Compare, m.op, m.datatype)?;
            (parts, iocs(comparev, compare_count, size, "compare")?, iocs(resultv, result_count, size, "result")?)
        };
        results_fit("fi_compare_atomicmsg", &res, rl)?;
        Ok(op(m.context, Call::Compare, m.op, m.datatype, v, c, res, r, data, Some(flags)))
    })
}

// ---- valid calls ----

/// What a valid call answers: 0 and the most elements one atomic takes,
/// or -FI_EOPNOTSUPP (quietly: applications ask about every pair).
fn valid(name: &'static str, call: Call, dt: u32, o: u32, count: *mut usize) -> i32 {
    guard_int(name, || {
        let Some(size) = exec::valid(call, o, dt) else {
            tracing::debug!("{name}: operation {o} on datatype {dt} is not supported");
            return Err(Error::quiet(ffi::FI_EOPNOTSUPP));
        };
        // SAFETY: `count` is NULL (refused) or writable (the valid call's contract).
        unsafe { super::write_out(count, exec::MAX_BYTES / size, "count") }?;
        Ok(0)
    })
}

unsafe extern "C" fn atomic_writevalid(
    _ep: *mut fid_ep,
    dt: ffi::fi_datatype,
    o: ffi::fi_op,
    count: *mut usize,
) -> i32 {
    valid("fi_atomicvalid", Call::Write, dt, o, count)
}

unsafe extern "C" fn atomic_readwritevalid(
    _ep: *mut fid_ep,
    dt: ffi::fi_datatype,
    o: ffi::fi_op,
    count: *mut usize,
) -> i32 {
    valid("fi_fetch_atomicvalid", Call::Fetch, dt, o, count)
}

unsafe extern "C" fn atomic_compwritevalid(
    _ep: *mut fid_ep,
    dt: ffi::fi_datatype,
    o: ffi::fi_op,
    count: *mut usize,
) -> i32 {
    valid("fi_compare_atomicvalid", Call::Compare, dt, o, count)
}

/// fi_query_atomic: the same table, with the element size; `flags` says
/// which calls (FI_FETCH_ATOMIC, FI_COMPARE_ATOMIC; neither: the base
/// ones). Collective queries (FI_COLLECTIVE) are -FI_EOPNOTSUPP: oxmr has
/// no collectives.
pub(super) fn query(dt: u32, o: u32, attr: *mut ffi::fi_atomic_attr, flags: u64) -> i32 {
    guard_int("fi_query_atomic", || {
        if flags & ffi::FI_COLLECTIVE as u64 != 0 {
            tracing::debug!("fi_query_atomic: collectives are not offered");
            return Err(Error::quiet(ffi::FI_EOPNOTSUPP));
        }
        let call = if flags & ffi::FI_COMPARE_ATOMIC != 0 {
            Call::Compare
        } else if flags & ffi::FI_FETCH_ATOMIC != 0 {
            Call::Fetch
        } else {
            Call::Write
        };
        let Some(size) = exec::valid(call, o, dt) else {
            tracing::debug!("fi_query_atomic: operation {o} on datatype {dt} is not supported ({call:?} calls)");
            return Err(Error::quiet(ffi::FI_EOPNOTSUPP));
        };
        let a = ffi::fi_atomic_attr { count: exec::MAX_BYTES / size, size };
        // SAFETY: `attr` is NULL (refused) or writable (fi_query_atomic's contract).
        unsafe { super::write_out(attr, a, "fi_atomic_attr") }?;
        Ok(0)
    })
}

pub static ATOMIC_OPS: ffi::fi_ops_atomic = ffi::fi_ops_atomic {
    size: size_of::<ffi::fi_ops_atomic>(),
    write: Some(atomic_write),
    writev: Some(atomic_writev),
    writemsg: Some(atomic_writemsg),
    inject: Some(atomic_inject),
    readwrite: Some(atomic_readwrite),
    readwritev: Some(atomic_readwritev),
    readwritemsg: Some(atomic_readwritemsg),
    compwrite: Some(atomic_compwrite),
    compwritev: Some(atomic_compwritev),
    compwritemsg: Some(atomic_compwritemsg),
    writevalid: Some(atomic_writevalid),
    readwritevalid: Some(atomic_readwritevalid),
    compwritevalid: Some(atomic_compwritevalid),
};
