//! Data-transfer slots of an endpoint. Message, tagged and RMA operations
//! decode their C arguments and hand them to the endpoint's engine
//! (through `objects::ep`; atomics are in `ep_atomic`); collectives are not
//! implemented yet and return -FI_ENOSYS (never a silent success). No slot
//! is NULL.
//!
//! Flags: the plain calls use the endpoint's default op_flags (an
//! alias's, `objects::alias`, through an alias); the `*msg` calls use
//! exactly the flags they are given (fi_msg(3)). A transmit whose flags
//! include FI_TRIGGER is a triggered operation: its context is a
//! `struct fi_triggered_context` (`trigger_of`), and it is armed
//! (`protocol/engine/fence.rs`).

use std::ffi::c_void;

use ffi::{fi_addr_t, fid_ep, iovec};
use oxmr_ffi as ffi;

use super::fid::from_fid;
use super::guard_ssize;
use crate::error::Result;
use crate::fail;
use crate::info::attrs;
use crate::objects::alias::{Only, OpDefaults};
use crate::objects::cntr::Cntr;
use crate::objects::ep::Ep;
use crate::objects::ep::{Held, Iovs, RmaOp, Trigger, TxOp, INJECT_CALL};
use crate::objects::srx::Srx;

/// # Safety
/// `iov` is NULL or holds `count` iovecs.
unsafe fn iovs(iov: *const iovec, count: usize) -> Result<Iovs> {
    if count > attrs::IOV_LIMIT {
        return Err(fail!(ffi::FI_EINVAL, "{count} iovs; oxmr takes at most {} (iov_limit)", attrs::IOV_LIMIT));
    }
    if count > 0 && iov.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "NULL iov array with count {count}"));
    }
    // SAFETY: `iov` is non-NULL here (checked above when count > 0) and
    // holds `count` iovecs (this fn's contract); `i < count`.
    let all = (0..count).map(|i| unsafe { ((*iov.add(i)).iov_base as usize, (*iov.add(i)).iov_len) });
    let v = Iovs::collect(all)
        .ok_or_else(|| fail!(ffi::FI_EINVAL, "{count} iovs; oxmr takes at most {}", attrs::IOV_LIMIT))?;
    let mut sum = 0usize;
    for (i, &(base, len)) in v.iter().enumerate() {
        buffer_ok(base, len).inspect_err(|_| tracing::warn!("(iov {i} of {count})"))?;
        sum = sum
            .checked_add(len)
            .ok_or_else(|| fail!(ffi::FI_EINVAL, "the lengths of {count} iovs add up past SIZE_MAX"))?;
    }
    Ok(v)
}

/// A buffer the application names: not NULL unless empty, and not
/// wrapping around the end of the address space.
#[inline(always)]
pub(super) fn buffer_ok(base: usize, len: usize) -> Result<()> {
    if base == 0 && len > 0 {
        return Err(fail!(ffi::FI_EINVAL, "NULL buffer with length {len}"));
    }
    if base.checked_add(len).is_none() {
        return Err(fail!(ffi::FI_EINVAL, "buffer {base:#x} of {len} bytes wraps around the address space"));
    }
    Ok(())
}

#[inline(always)]
fn one(buf: *const c_void, len: usize) -> Result<Iovs> {
    buffer_ok(buf as usize, len)?;
    Ok(Iovs::one(buf as usize, len))
}

/// The flags of a `*msg` call: refused when they ask for what oxmr does
/// not offer (rather than ignored: a multi-receive buffer taken as a plain
/// one would never be reported consumed), and never oxmr's own internal
/// bit. FI_MULTI_RECV is for fi_recvmsg alone (`recv_msg_flags`).
pub(super) fn msg_flags(name: &'static str, flags: u64) -> Result<u64> {
    if flags & ffi::FI_MULTI_RECV as u64 != 0 {
        return Err(fail!(
            ffi::FI_EBADFLAGS,
            "{name}: flags {:#x} include FI_MULTI_RECV (untagged receives only: fi_recvmsg)",
            flags
        ));
    }
    Ok(flags & !INJECT_CALL)
}

/// `msg_flags` of a receive (fi_recvmsg, fi_trecvmsg): FI_TRIGGER is
/// refused (no triggered receives).
fn rx_msg_flags(name: &'static str, flags: u64) -> Result<u64> {
    if flags & ffi::FI_TRIGGER as u64 != 0 {
        return Err(fail!(
            ffi::FI_ENOSYS,
            "{name}: FI_TRIGGER: oxmr has no triggered receives (triggered sends, RMA and atomics are offered)"
        ));
    }
    msg_flags(name, flags)
}

/// `rx_msg_flags` of fi_recvmsg, which takes FI_MULTI_RECV (a
/// multi-receive buffer: protocol/engine/multi.rs).
fn recv_msg_flags(name: &'static str, flags: u64) -> Result<u64> {
    let multi = flags & ffi::FI_MULTI_RECV as u64;
    rx_msg_flags(name, flags & !multi).map(|f| f | multi)
}

/// Whether a transmit's flags make it a triggered operation.
fn triggers(flags: Option<u64>) -> bool {
    flags.is_some_and(|f| f & ffi::FI_TRIGGER as u64 != 0)
}

/// The flags a transmit posted through `alias` takes: its own (a `*msg`
/// call's, an inject's), else the alias's defaults, else None (the
/// endpoint's).
fn tx_flags(alias: Option<&OpDefaults>, own: Option<u64>) -> Option<u64> {
    own.or_else(|| alias.and_then(OpDefaults::tx_flags))
}

/// The threshold trigger a triggered operation's context holds
/// (fi_trigger(3)): -FI_EINVAL with a log line for a NULL context, a NULL
/// counter or one that is not an oxmr counter, or an unknown event type;
/// -FI_ENOSYS for FI_TRIGGER_XPU.
///
/// # Safety
/// `ctx` is NULL or a readable `struct fi_triggered_context` (the
/// context of an operation posted with FI_TRIGGER, fi_trigger(3)), whose
/// threshold counter is NULL or a counter the application opened.
unsafe fn trigger_of(ctx: usize) -> Result<Trigger> {
    if ctx == 0 {
        return Err(fail!(
            ffi::FI_EINVAL,
            "FI_TRIGGER: the operation's context is NULL; pass a struct fi_triggered_context"
        ));
    }
    // SAFETY: a non-NULL context of a triggered operation, a readable
    // `struct fi_triggered_context` (this fn's contract); read unaligned
    // (an application's context needs no alignment of ours).
    let t = unsafe { std::ptr::read_unaligned(ctx as *const ffi::fi_triggered_context) };
    match t.event_type {
        ffi::FI_TRIGGER_THRESHOLD => {
            // SAFETY: the union's member for FI_TRIGGER_THRESHOLD (fi_trigger.h).
            let th = unsafe { t.trigger.threshold };
            if th.cntr.is_null() {
                return Err(fail!(ffi::FI_EINVAL, "FI_TRIGGER: the fi_triggered_context's threshold counter is NULL"));
            }
            // (The counter is a fid the application opened: `from_fid!`'s
            // contract, as a fid argument of a call.)
            let c = from_fid!(Cntr, th.cntr)
                .inspect_err(|_| tracing::warn!("(the threshold counter of an fi_triggered_context)"))?;
            Ok(Trigger { cntr: c.core.clone(), threshold: th.threshold as u64 })
        }
        ffi::FI_TRIGGER_XPU => Err(fail!(
            ffi::FI_ENOSYS,
            "FI_TRIGGER: event type FI_TRIGGER_XPU (device-triggered operations) is not supported by oxmr; use FI_TRIGGER_THRESHOLD"
        )),
        e => Err(fail!(
            ffi::FI_EINVAL,
            "FI_TRIGGER: unknown event type {e} in the fi_triggered_context (oxmr takes FI_TRIGGER_THRESHOLD)"
        )),
    }
}

/// Post `op` as a triggered operation: `flags` include FI_TRIGGER, and
/// its context is a `struct fi_triggered_context` (`trigger_of`'s
/// contract, the caller's word).
pub(super) fn post_triggered(ep: &Ep, ctx: usize, op: Held) -> Result<()> {
    // SAFETY: the context of an operation posted with FI_TRIGGER (this
    // fn's contract).
    let t = unsafe { trigger_of(ctx) }?;
    let op = match op {
        Held::Send(o) => Held::Send(TxOp { flags: o.flags.map(untrigger), ..o }),
        Held::Rma(o) => Held::Rma(RmaOp { flags: o.flags.map(untrigger), ..o }),
        Held::Atomic(o) => Held::Atomic(crate::objects::ep::AtomicOp { flags: o.flags.map(untrigger), ..o }),
    };
    ep.triggered(t, op)
}

fn untrigger(f: u64) -> u64 {
    f & !(ffi::FI_TRIGGER as u64)
}

/// Whether a transmit posts as a triggered operation, with its flags
/// (`tx_flags`).
pub(super) fn triggered(alias: Option<&OpDefaults>, own: Option<u64>) -> (bool, Option<u64>) {
    let f = tx_flags(alias, own);
    (triggers(f), f)
}

/// The `-FI_EINVAL` of a `*msg` call given a NULL message, with its log line.
pub(super) fn null_msg(name: &'static str) -> isize {
    guard_ssize(name, || Err(fail!(ffi::FI_EINVAL, "{name}: NULL message")))
}

/// Run `f` on the endpoint behind `ep`, the slot's own fid argument
/// (`from_fid!`'s contract: the slots below pass theirs and nothing else),
/// an endpoint or an alias of one (`boundary::ep::target`).
pub(super) fn with_ep(
    name: &'static str,
    ep: *mut fid_ep,
    f: impl FnOnce(&Ep, Option<&OpDefaults>) -> Result<()>,
) -> isize {
    guard_ssize(name, || {
        let (ep, alias) = super::ep::target(ep)?;
        f(ep, alias).map(|_| 0)
    })
}

fn send_common(name: &'static str, ep: *mut fid_ep, o: Result<TxOp>) -> isize {
    with_ep(name, ep, |ep, alias| {
        // (By reference from here on: an operation is ~150 bytes, and each
        // move by value is a memmove on the per-message path.)
        // (Borrowed, not moved out of the `Result`: a move is a copy.)
        let o = match &o {
            Ok(o) => o,
            Err(e) => return Err(*e),
        };
        let Some(a) = alias else {
            if !triggers(o.flags) {
                return ep.send(o);
            }
            return post_triggered(ep, o.ctx, Held::Send(o.clone()));
        };
        a.allows(Only::Transmit, name)?;
        match triggered(alias, o.flags) {
            (true, flags) => post_triggered(ep, o.ctx, Held::Send(TxOp { flags, ..o.clone() })),
            (false, flags) => ep.send(&TxOp { flags, ..o.clone() }),
        }
    })
}

/// The four inject calls: the common shape (an RDM endpoint itself, not
/// an alias, a buffer given) goes straight to the engine's lean path
/// (`Ep::inject`, `Engine::inject`: an inline frame to a peer whose shm
/// queue is open, nothing held before it); the rest, and whatever that
/// path does not take, goes the general way (`send_common`), which checks
/// and answers as for any send. Both push the same frame.
// (In line in each of the four slots, as their bodies were.)
#[inline(always)]
fn inject_common(
    name: &'static str,
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    tag: Option<u64>,
    data: Option<u64>,
) -> isize {
    // (The lean attempt in a guard of its own, kept small: in line, as
    // a general send's is. `GENERAL`: not taken, nothing done.)
    const GENERAL: isize = 1;
    let lean = guard_ssize(name, || {
        let (e, alias) = super::ep::target(ep)?;
        if alias.is_some() || buf.is_null() {
            return Ok(GENERAL);
        }
        match e.inject(dest, buf as usize, len, tag, data) {
            Some(r) => r.map(|_| 0),
            None => Ok(GENERAL),
        }
    });
    if lean != GENERAL {
        return lean;
    }
    send_common(name, ep, tx(std::ptr::null_mut(), one(buf, len), dest, tag, data, Some(INJECT)))
}

#[inline(always)]
fn recv_common(
    name: &'static str,
    ep: *mut fid_ep,
    ctx: *mut c_void,
    v: Result<Iovs>,
    src: fi_addr_t,
    tag: Option<(u64, u64)>,
    flags: Option<u64>,
) -> isize {
    if let Some(srx) = from_fid!(try Srx, ep) {
        return guard_ssize(name, || srx.recv(ctx as usize, v?, src, tag, flags).map(|_| 0));
    }
    with_ep(name, ep, |ep, alias| {
        if let Some(a) = alias {
            a.allows(Only::Receive, name)?;
        }
        // (An alias's receive defaults never hold FI_TRIGGER.)
        let flags = flags.or_else(|| alias.and_then(OpDefaults::rx_flags));
        ep.recv(ctx as usize, v?, src, tag, flags)
    })
}

fn rma_common(name: &'static str, ep: *mut fid_ep, o: Result<RmaOp>) -> isize {
    with_ep(name, ep, |ep, alias| {
        let o = o?;
        if let Some(a) = alias {
            a.allows(Only::Transmit, name)?;
        }
        match triggered(alias, o.flags) {
            (true, flags) => post_triggered(ep, o.ctx, Held::Rma(RmaOp { flags, ..o })),
            (false, flags) => ep.rma(RmaOp { flags, ..o }),
        }
    })
}

fn tx(
    ctx: *mut c_void,
    iovs: Result<Iovs>,
    dest: u64,
    tag: Option<u64>,
    data: Option<u64>,
    flags: Option<u64>,
) -> Result<TxOp> {
    Ok(TxOp { ctx: ctx as usize, iovs: iovs?, dest, tag, data, flags })
}

/// Flags of the fi_inject* calls: FI_INJECT, and no completion.
pub(super) const INJECT: u64 = ffi::FI_INJECT as u64 | INJECT_CALL;

// ---- FI_MSG ----

unsafe extern "C" fn msg_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    recv_common("fi_recv", ep, ctx, one(buf, len), src, None, None)
}

unsafe extern "C" fn msg_recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: fi_recvv(3): `iov` is NULL or holds `count` iovecs (iovs
    // refuses NULL with a count).
    recv_common("fi_recvv", ep, ctx, unsafe { iovs(iov, count) }, src, None, None)
}

unsafe extern "C" fn msg_recvmsg(ep: *mut fid_ep, msg: *const ffi::fi_msg, flags: u64) -> isize {
    const NAME: &str = "fi_recvmsg";
    // SAFETY: fi_recvmsg(3): `msg` is NULL (refused) or a readable message.
    let Some(m) = (unsafe { msg.as_ref() }) else { return null_msg(NAME) };
    let flags = match recv_msg_flags(NAME, flags) {
        Ok(f) => f,
        Err(e) => return e.to_c() as isize,
    };
    if flags & PROBE_FLAGS != 0 {
        return guard_ssize(NAME, || {
            Err(fail!(
                ffi::FI_EBADFLAGS,
                "{NAME}: FI_PEEK, FI_CLAIM and FI_DISCARD apply to tagged receives only (fi_trecvmsg)"
            ))
        });
    }
    // SAFETY: the message's `msg_iov` is NULL or holds `iov_count` iovecs
    // (fi_msg(3); iovs refuses NULL with a count).
    recv_common(NAME, ep, m.context, unsafe { iovs(m.msg_iov, m.iov_count) }, m.addr, None, Some(flags))
}

unsafe extern "C" fn msg_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    send_common("fi_send", ep, tx(ctx, one(buf, len), dest, None, None, None))
}

unsafe extern "C" fn msg_sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: fi_sendv(3): `iov` is NULL or holds `count` iovecs (iovs
    // refuses NULL with a count).
    send_common("fi_sendv", ep, tx(ctx, unsafe { iovs(iov, count) }, dest, None, None, None))
}

unsafe extern "C" fn msg_sendmsg(ep: *mut fid_ep, msg: *const ffi::fi_msg, flags: u64) -> isize {
    const NAME: &str = "fi_sendmsg";
    // SAFETY: fi_sendmsg(3): `msg` is NULL (refused) or a readable message.
    let Some(m) = (unsafe { msg.as_ref() }) else { return null_msg(NAME) };
    let data = (flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
    // SAFETY: the message's `msg_iov` is NULL or holds `iov_count` iovecs
    // (fi_msg(3); iovs refuses NULL with a count).
    let o = msg_flags(NAME, flags)
        .and_then(|f| tx(m.context, unsafe { iovs(m.msg_iov, m.iov_count) }, m.addr, None, data, Some(f)));
    send_common(NAME, ep, o)
}

unsafe extern "C" fn msg_inject(ep: *mut fid_ep, buf: *const c_void, len: usize, dest: fi_addr_t) -> isize {
    inject_common("fi_inject", ep, buf, len, dest, None, None)
}

unsafe extern "C" fn msg_senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    send_common("fi_senddata", ep, tx(ctx, one(buf, len), dest, None, Some(data), None))
}

unsafe extern "C" fn msg_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
) -> isize {
    inject_common("fi_injectdata", ep, buf, len, dest, None, Some(data))
}

pub static MSG_OPS: ffi::fi_ops_msg = ffi::fi_ops_msg {
    size: size_of::<ffi::fi_ops_msg>(),
    recv: Some(msg_recv),
    recvv: Some(msg_recvv),
    recvmsg: Some(msg_recvmsg),
    send: Some(msg_send),
    sendv: Some(msg_sendv),
    sendmsg: Some(msg_sendmsg),
    inject: Some(msg_inject),
    senddata: Some(msg_senddata),
    injectdata: Some(msg_injectdata),
};

// ---- FI_TAGGED ----

unsafe extern "C" fn tagged_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    recv_common("fi_trecv", ep, ctx, one(buf, len), src, Some((tag, ignore)), None)
}

unsafe extern "C" fn tagged_recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: fi_trecvv(3): `iov` is NULL or holds `count` iovecs (iovs
    // refuses NULL with a count).
    recv_common("fi_trecvv", ep, ctx, unsafe { iovs(iov, count) }, src, Some((tag, ignore)), None)
}

unsafe extern "C" fn tagged_recvmsg(ep: *mut fid_ep, msg: *const ffi::fi_msg_tagged, flags: u64) -> isize {
    const NAME: &str = "fi_trecvmsg";
    // SAFETY: fi_trecvmsg(3): `msg` is NULL (refused) or a readable message.
    let Some(m) = (unsafe { msg.as_ref() }) else { return null_msg(NAME) };
    if flags & ffi::FI_MULTI_RECV as u64 != 0 {
        return guard_ssize(NAME, || {
            Err(fail!(
                ffi::FI_EBADFLAGS,
                "{NAME}: FI_MULTI_RECV: libfabric's tagged API has no multi-receive buffers; post one with fi_recvmsg (untagged)"
            ))
        });
    }
    let flags = match rx_msg_flags(NAME, flags) {
        Ok(f) => f,
        Err(e) => return e.to_c() as isize,
    };
    if flags & PROBE_FLAGS != 0 {
        if flags & ffi::FI_CLAIM as u64 != 0 && m.context.is_null() {
            return guard_ssize(NAME, || {
                Err(fail!(
                    ffi::FI_EINVAL,
                    "{NAME}: FI_CLAIM needs a struct fi_context as the message's context (it names the claimed message); it is NULL"
                ))
            });
        }
        // SAFETY: the message's `msg_iov` is NULL or holds `iov_count` iovecs
        // (fi_msg(3); iovs refuses NULL with a count).
        let v = unsafe { iovs(m.msg_iov, m.iov_count) };
        return with_ep(NAME, ep, |ep, a| {
            a.map_or(Ok(()), |a| a.allows(Only::Receive, NAME))?;
            ep.probe(m.context as usize, v?, m.addr, (m.tag, m.ignore), flags)
        });
    }
    // SAFETY: the message's `msg_iov` is NULL or holds `iov_count` iovecs
    // (fi_msg(3); iovs refuses NULL with a count).
    let v = unsafe { iovs(m.msg_iov, m.iov_count) };
    recv_common(NAME, ep, m.context, v, m.addr, Some((m.tag, m.ignore)), Some(flags))
}

/// fi_trecvmsg's flags that look for an unexpected message rather than
/// post a receive (fi_tagged(3)).
const PROBE_FLAGS: u64 = ffi::FI_PEEK as u64 | ffi::FI_CLAIM as u64 | ffi::FI_DISCARD as u64;

unsafe extern "C" fn tagged_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    send_common("fi_tsend", ep, tx(ctx, one(buf, len), dest, Some(tag), None, None))
}

unsafe extern "C" fn tagged_sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: fi_tsendv(3): `iov` is NULL or holds `count` iovecs (iovs
    // refuses NULL with a count).
    send_common("fi_tsendv", ep, tx(ctx, unsafe { iovs(iov, count) }, dest, Some(tag), None, None))
}

unsafe extern "C" fn tagged_sendmsg(ep: *mut fid_ep, msg: *const ffi::fi_msg_tagged, flags: u64) -> isize {
    const NAME: &str = "fi_tsendmsg";
    // SAFETY: fi_tsendmsg(3): `msg` is NULL (refused) or a readable message.
    let Some(m) = (unsafe { msg.as_ref() }) else { return null_msg(NAME) };
    let data = (flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
    // SAFETY: the message's `msg_iov` is NULL or holds `iov_count` iovecs
    // (fi_msg(3); iovs refuses NULL with a count).
    let o = msg_flags(NAME, flags)
        .and_then(|f| tx(m.context, unsafe { iovs(m.msg_iov, m.iov_count) }, m.addr, Some(m.tag), data, Some(f)));
    send_common(NAME, ep, o)
}

unsafe extern "C" fn tagged_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    inject_common("fi_tinject", ep, buf, len, dest, Some(tag), None)
}

unsafe extern "C" fn tagged_senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    send_common("fi_tsenddata", ep, tx(ctx, one(buf, len), dest, Some(tag), Some(data), None))
}

unsafe extern "C" fn tagged_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    inject_common("fi_tinjectdata", ep, buf, len, dest, Some(tag), Some(data))
}

pub static TAGGED_OPS: ffi::fi_ops_tagged = ffi::fi_ops_tagged {
    size: size_of::<ffi::fi_ops_tagged>(),
    recv: Some(tagged_recv),
    recvv: Some(tagged_recvv),
    recvmsg: Some(tagged_recvmsg),
    send: Some(tagged_send),
    sendv: Some(tagged_sendv),
    sendmsg: Some(tagged_sendmsg),
    inject: Some(tagged_inject),
    senddata: Some(tagged_senddata),
    injectdata: Some(tagged_injectdata),
};

// ---- FI_RMA ----

/// The remote side of an RMA call: the peer, and the address and key it
/// registered.
struct Remote {
    dest: u64,
    addr: u64,
    key: u64,
}

fn rma(
    ctx: *mut c_void,
    v: Result<Iovs>,
    r: Remote,
    data: Option<u64>,
    flags: Option<u64>,
    read: bool,
) -> Result<RmaOp> {
    Ok(RmaOp { ctx: ctx as usize, iovs: v?, dest: r.dest, addr: r.addr, key: r.key, data, flags, read })
}

/// # Safety
/// `msg` is NULL or a readable fi_msg_rma whose `msg_iov` holds `iov_count`
/// iovecs and whose `rma_iov` is NULL or one fi_rma_iov.
unsafe fn rma_msg(msg: *const ffi::fi_msg_rma, flags: u64, read: bool) -> Result<RmaOp> {
    // SAFETY: `msg` is NULL (refused) or readable (this fn's contract).
    let m = unsafe { msg.as_ref() }.ok_or_else(|| fail!(ffi::FI_EINVAL, "NULL fi_msg_rma"))?;
    let flags = msg_flags(if read { "fi_readmsg" } else { "fi_writemsg" }, flags)?;
    if m.rma_iov_count != 1 || m.rma_iov.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "rma_iov_count {}: oxmr takes exactly 1 (rma_iov_limit)", m.rma_iov_count));
    }
    // SAFETY: one fi_rma_iov, checked non-NULL.
    let r = unsafe { &*m.rma_iov };
    // SAFETY: the message's `msg_iov` is NULL or holds `iov_count` iovecs
    // (this fn's contract; iovs refuses NULL with a count).
    let v = unsafe { iovs(m.msg_iov, m.iov_count) }?;
    // (`iovs` checked that the lengths add up without overflow.)
    if v.iter().map(|x| x.1).sum::<usize>() != r.len {
        return Err(fail!(ffi::FI_EINVAL, "local iovs and rma_iov lengths differ"));
    }
    // (FI_REMOTE_CQ_DATA applies to writes only: fi_rma(3). A read with it
    // raises nothing at the target.)
    let data = (!read && flags & ffi::FI_REMOTE_CQ_DATA as u64 != 0).then_some(m.data);
    Ok(RmaOp {
        ctx: m.context as usize,
        iovs: v,
        dest: m.addr,
        addr: r.addr,
        key: r.key,
        data,
        flags: Some(flags),
        read,
    })
}

unsafe extern "C" fn rma_read(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    rma_common("fi_read", ep, rma(ctx, one(buf, len), Remote { dest: src, addr, key }, None, None, true))
}

unsafe extern "C" fn rma_readv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: fi_readv(3): `iov` is NULL or holds `count` iovecs (iovs
    // refuses NULL with a count).
    rma_common("fi_readv", ep, rma(ctx, unsafe { iovs(iov, count) }, Remote { dest: src, addr, key }, None, None, true))
}

unsafe extern "C" fn rma_readmsg(ep: *mut fid_ep, msg: *const ffi::fi_msg_rma, flags: u64) -> isize {
    // SAFETY: fi_readmsg(3): `msg` is NULL (refused) or a readable fi_msg_rma
    // whose arrays hold their counts (rma_msg's contract).
    rma_common("fi_readmsg", ep, unsafe { rma_msg(msg, flags, true) })
}

unsafe extern "C" fn rma_write(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    rma_common("fi_write", ep, rma(ctx, one(buf, len), Remote { dest, addr, key }, None, None, false))
}

unsafe extern "C" fn rma_writev(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: fi_writev(3): `iov` is NULL or holds `count` iovecs (iovs
    // refuses NULL with a count).
    rma_common("fi_writev", ep, rma(ctx, unsafe { iovs(iov, count) }, Remote { dest, addr, key }, None, None, false))
}

unsafe extern "C" fn rma_writemsg(ep: *mut fid_ep, msg: *const ffi::fi_msg_rma, flags: u64) -> isize {
    // SAFETY: fi_writemsg(3): `msg` is NULL (refused) or a readable fi_msg_rma
    // whose arrays hold their counts (rma_msg's contract).
    rma_common("fi_writemsg", ep, unsafe { rma_msg(msg, flags, false) })
}

unsafe extern "C" fn rma_inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    rma_common(
        "fi_inject_write",
        ep,
        rma(std::ptr::null_mut(), one(buf, len), Remote { dest, addr, key }, None, Some(INJECT), false),
    )
}

unsafe extern "C" fn rma_writedata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    rma_common("fi_writedata", ep, rma(ctx, one(buf, len), Remote { dest, addr, key }, Some(data), None, false))
}

unsafe extern "C" fn rma_injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    rma_common(
        "fi_inject_writedata",
        ep,
        rma(std::ptr::null_mut(), one(buf, len), Remote { dest, addr, key }, Some(data), Some(INJECT), false),
    )
}

pub static RMA_OPS: ffi::fi_ops_rma = ffi::fi_ops_rma {
    size: size_of::<ffi::fi_ops_rma>(),
    read: Some(rma_read),
    readv: Some(rma_readv),
    readmsg: Some(rma_readmsg),
    write: Some(rma_write),
    writev: Some(rma_writev),
    writemsg: Some(rma_writemsg),
    inject: Some(rma_inject),
    writedata: Some(rma_writedata),
    injectdata: Some(rma_injectdata),
};

// ---- not implemented yet: collectives ----
crate::enosys!(coll_barrier, "fi_coll_barrier", (ep: *mut fid_ep, coll_addr: fi_addr_t, context: *mut c_void) -> isize);
crate::enosys!(coll_broadcast, "fi_coll_broadcast", (ep: *mut fid_ep, buf: *mut c_void, count: usize, desc: *mut c_void, coll_addr: fi_addr_t, root_addr: fi_addr_t, datatype: ffi::fi_datatype, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_alltoall, "fi_coll_alltoall", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, datatype: ffi::fi_datatype, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_allreduce, "fi_coll_allreduce", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, datatype: ffi::fi_datatype, op: ffi::fi_op, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_allgather, "fi_coll_allgather", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, datatype: ffi::fi_datatype, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_reduce_scatter, "fi_coll_reduce_scatter", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, datatype: ffi::fi_datatype, op: ffi::fi_op, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_reduce, "fi_coll_reduce", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, root_addr: fi_addr_t, datatype: ffi::fi_datatype, op: ffi::fi_op, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_scatter, "fi_coll_scatter", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, root_addr: fi_addr_t, datatype: ffi::fi_datatype, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_gather, "fi_coll_gather", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, root_addr: fi_addr_t, datatype: ffi::fi_datatype, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_msg, "fi_coll_msg", (ep: *mut fid_ep, msg: *const ffi::fi_msg_collective, resultv: *mut ffi::fi_ioc, result_desc: *mut *mut c_void, result_count: usize, flags: u64) -> isize);
crate::enosys!(coll_barrier2, "fi_coll_barrier2", (ep: *mut fid_ep, coll_addr: fi_addr_t, flags: u64, context: *mut c_void) -> isize);

pub static COLL_OPS: ffi::fi_ops_collective = ffi::fi_ops_collective {
    size: size_of::<ffi::fi_ops_collective>(),
    barrier: Some(coll_barrier),
    broadcast: Some(coll_broadcast),
    alltoall: Some(coll_alltoall),
    allreduce: Some(coll_allreduce),
    allgather: Some(coll_allgather),
    reduce_scatter: Some(coll_reduce_scatter),
    reduce: Some(coll_reduce),
    scatter: Some(coll_scatter),
    gather: Some(coll_gather),
    msg: Some(coll_msg),
    barrier2: Some(coll_barrier2),
};
