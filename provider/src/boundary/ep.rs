//! fid_ep: endpoint control, options, names. Data slots: `ep_data`.

use std::ffi::c_void;

use oxmr_ffi as ffi;

use super::ep_atomic::ATOMIC_OPS;
use super::ep_data::{COLL_OPS, MSG_OPS, RMA_OPS, TAGGED_OPS};
use super::fid::{fid_header, from_fid, FidHeader};
use super::{common, guard_int, guard_ssize};
use crate::error::Result;
use crate::fail;
use crate::info::{addr, attrs};
use crate::objects::alias::{EpAlias, OpDefaults};
use crate::objects::sep::{RxCtx, Sep, TxCtx};
use crate::objects::{av::Av, cntr::Cntr, cq::Cq, ep::Ep, eq::Eq};

pub static EP_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(bind),
    control: Some(control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

static EP_OPS: ffi::fi_ops_ep = ffi::fi_ops_ep {
    size: size_of::<ffi::fi_ops_ep>(),
    cancel: Some(cancel),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: Some(tx_ctx),
    rx_ctx: Some(rx_ctx),
    rx_size_left: Some(rx_size_left),
    tx_size_left: Some(tx_size_left),
};

static CM_OPS: ffi::fi_ops_cm = ffi::fi_ops_cm {
    size: size_of::<ffi::fi_ops_cm>(),
    setname: Some(setname),
    getname: Some(getname),
    getpeer: Some(getpeer),
    connect: Some(connect),
    listen: Some(listen),
    accept: Some(accept),
    reject: Some(reject),
    shutdown: Some(shutdown),
    join: Some(join),
};

/// An alias's fid (`objects::alias`): its own close, bind and control;
/// the data and endpoint tables are the endpoint's, whose slots take an
/// alias too (`target`).
static ALIAS_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(alias_close),
    bind: Some(alias_bind),
    control: Some(alias_control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

crate::fid_object!(Ep, hdr, ffi::FI_CLASS_EP, "endpoint", EP_FI_OPS);
crate::fid_object!(EpAlias, hdr, ffi::FI_CLASS_EP, "endpoint alias", ALIAS_FI_OPS);

/// The endpoint behind a data or endpoint slot's own fid argument
/// (`from_fid!`'s contract): an endpoint, or an alias of one (then also
/// the alias, whose default op flags the slot applies).
#[inline(always)]
pub(super) fn target<'a, F>(p: *const F) -> Result<(&'a Ep, Option<&'a OpDefaults>)> {
    if let Some(ep) = from_fid!(try Ep, p) {
        return Ok((ep, None));
    }
    if from_fid!(is EpAlias, p) {
        let a = from_fid!(EpAlias, p)?;
        return Ok((&a.d.ep, Some(&a.d)));
    }
    if from_fid!(is TxCtx, p) {
        let c = from_fid!(TxCtx, p)?;
        return Ok((&c.d.ep, Some(&c.d)));
    }
    if from_fid!(is RxCtx, p) {
        let c = from_fid!(RxCtx, p)?;
        return Ok((&c.d.ep, Some(&c.d)));
    }
    if from_fid!(is crate::objects::srx::Srx, p) {
        return Err(fail!(
            ffi::FI_EOPNOTSUPP,
            "an operation a shared receive context does not take: it takes receives (fi_recv, fi_trecv and their forms, no FI_PEEK) and fi_cancel; transmit through an endpoint"
        ));
    }
    if from_fid!(is Sep, p) {
        return Err(fail!(
            ffi::FI_EINVAL,
            "an operation on a scalable endpoint: post it through one of its contexts (fi_tx_context, fi_rx_context)"
        ));
    }
    Ok((from_fid!(Ep, p)?, None))
}

/// `target`'s endpoint.
fn ep_of<'a, F>(p: *const F) -> Result<&'a Ep> {
    target(p).map(|(ep, _)| ep)
}

/// The C header of a new endpoint.
pub fn header(context: *mut c_void) -> FidHeader<ffi::fid_ep> {
    with_fid(fid_header::<Ep>(context))
}

/// The C header of a new alias of an endpoint: its context is the
/// endpoint's.
fn alias_header(ep: &Ep) -> FidHeader<ffi::fid_ep> {
    with_fid(fid_header::<EpAlias>(ep.hdr.0.fid.context))
}

fn with_fid(fid: ffi::fid) -> FidHeader<ffi::fid_ep> {
    FidHeader(ffi::fid_ep {
        fid,
        ops: &EP_OPS as *const _ as *mut _,
        cm: &CM_OPS as *const _ as *mut _,
        msg: &MSG_OPS as *const _ as *mut _,
        rma: &RMA_OPS as *const _ as *mut _,
        tagged: &TAGGED_OPS as *const _ as *mut _,
        atomic: &ATOMIC_OPS as *const _ as *mut _,
        collective: &COLL_OPS as *const _ as *mut _,
    })
}

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    guard_int("fi_close(ep)", || from_fid!(close Ep, f, |_| Ok(())).map(|_| 0))
}

unsafe extern "C" fn bind(f: *mut ffi::fid, bfid: *mut ffi::fid, flags: u64) -> i32 {
    guard_int("fi_ep_bind", || {
        let ep = from_fid!(Ep, f)?;
        match from_fid!(class bfid) {
            Some(ffi::FI_CLASS_CQ) => ep.bind_cq(from_fid!(retain Cq, bfid)?, flags)?,
            Some(ffi::FI_CLASS_AV) => ep.bind_av(from_fid!(retain Av, bfid)?, flags)?,
            Some(ffi::FI_CLASS_EQ) => ep.bind_eq(from_fid!(retain Eq, bfid)?, flags)?,
            Some(ffi::FI_CLASS_CNTR) => ep.bind_cntr(from_fid!(retain Cntr, bfid)?, flags)?,
            Some(ffi::FI_CLASS_STX_CTX) => ep.bind_stx(from_fid!(retain crate::objects::stx::Stx, bfid)?, flags)?,
            Some(ffi::FI_CLASS_SRX_CTX) => ep.bind_srx(from_fid!(retain crate::objects::srx::Srx, bfid)?, flags)?,
            Some(c) => {
                return Err(fail!(ffi::FI_EINVAL, "fi_ep_bind: cannot bind an object of class {c} to an endpoint"))
            }
            None => return Err(fail!(ffi::FI_EINVAL, "fi_ep_bind: NULL fid")),
        }
        Ok(0)
    })
}

unsafe extern "C" fn control(f: *mut ffi::fid, command: i32, arg: *mut c_void) -> i32 {
    guard_int("fi_control(ep)", || {
        let ep = from_fid!(Ep, f)?;
        match command as u32 {
            // (Retained: the engine keeps weak references to its endpoint.)
            ffi::FI_ENABLE => from_fid!(retain Ep, f)?.enable_and_start().map(|_| 0),
            c @ (ffi::FI_GETOPSFLAG | ffi::FI_SETOPSFLAG) => {
                // SAFETY: both commands take a `uint64_t *` (fi_endpoint(3)).
                unsafe { ops_flags_control(c, arg, |which, set| ep.ops_flags(which, set)) }
            }
            ffi::FI_ALIAS => {
                let ep = from_fid!(retain Ep, f)?;
                // SAFETY: FI_ALIAS takes a `struct fi_alias *` (fi_control(3)).
                unsafe { make_alias(ep, arg) }
            }
            c => Err(fail!(ffi::FI_ENOSYS, "fi_control command {c} is not supported on an endpoint")),
        }
    })
}

/// FI_GETOPSFLAG / FI_SETOPSFLAG: `ops_flags(which, set)` answers.
///
/// # Safety
/// `arg` is NULL or a readable and writable `uint64_t` (both commands'
/// argument, fi_endpoint(3)).
pub(super) unsafe fn ops_flags_control(
    command: u32,
    arg: *mut c_void,
    ops_flags: impl FnOnce(u64, Option<u64>) -> Result<u64>,
) -> Result<i32> {
    if arg.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "FI_GETOPSFLAG/FI_SETOPSFLAG need a uint64_t *"));
    }
    let p = arg as *mut u64;
    // SAFETY: a non-NULL `uint64_t *` (this fn's contract).
    let flags = unsafe { *p };
    let set = (command == ffi::FI_SETOPSFLAG).then_some(flags);
    let v = ops_flags(flags, set)?;
    if command == ffi::FI_GETOPSFLAG {
        // SAFETY: the same non-NULL `uint64_t *`, read above.
        unsafe { *p = v | (flags & (ffi::FI_TRANSMIT as u64 | ffi::FI_RECV as u64)) };
    }
    Ok(0)
}

/// FI_ALIAS (fi_ep_alias): an alias of `ep` with the default op flags
/// the `struct fi_alias` names, handed out through its `fid`.
///
/// # Safety
/// `arg` is NULL or a readable `struct fi_alias` whose `fid` is NULL or a
/// writable `struct fid **` (fi_control(3)).
unsafe fn make_alias(ep: std::sync::Arc<Ep>, arg: *mut c_void) -> Result<i32> {
    // SAFETY: NULL (refused) or a readable `struct fi_alias` (this fn's contract).
    let Some(a) = (unsafe { (arg as *const ffi::fi_alias).as_ref() }) else {
        return Err(fail!(ffi::FI_EINVAL, "FI_ALIAS needs a struct fi_alias * (fi_ep_alias passes one)"));
    };
    let hdr = alias_header(&ep);
    // SAFETY: `a.fid` is NULL (refused) or a writable `struct fid **`
    // (this fn's contract).
    unsafe { super::hand_out(a.fid, "fi_ep_alias", || Ok(std::sync::Arc::new(EpAlias::new(hdr, ep, a.flags)?))) }
}

unsafe extern "C" fn alias_close(f: *mut ffi::fid) -> i32 {
    // (The endpoint stays as it was; the alias's count on it goes.)
    guard_int("fi_close(ep alias)", || from_fid!(close EpAlias, f, |_| Ok(())).map(|_| 0))
}

unsafe extern "C" fn alias_bind(f: *mut ffi::fid, _bfid: *mut ffi::fid, _flags: u64) -> i32 {
    guard_int("fi_ep_bind(alias)", || {
        from_fid!(EpAlias, f)?;
        Err(fail!(
            ffi::FI_EINVAL,
            "fi_ep_bind on an endpoint alias: bind to the endpoint (an alias shares its bindings)"
        ))
    })
}

unsafe extern "C" fn alias_control(f: *mut ffi::fid, command: i32, arg: *mut c_void) -> i32 {
    guard_int("fi_control(ep alias)", || {
        let a = from_fid!(EpAlias, f)?;
        match command as u32 {
            ffi::FI_ENABLE => a.d.ep.enable_and_start().map(|_| 0),
            c @ (ffi::FI_GETOPSFLAG | ffi::FI_SETOPSFLAG) => {
                let call = if c == ffi::FI_SETOPSFLAG { "FI_SETOPSFLAG" } else { "FI_GETOPSFLAG" };
                // SAFETY: both commands take a `uint64_t *` (fi_endpoint(3)).
                unsafe { ops_flags_control(c, arg, |which, set| a.d.ops_flags(call, which, set)) }
            }
            // (An alias of an alias is one of the endpoint.)
            // SAFETY: FI_ALIAS takes a `struct fi_alias *` (fi_control(3)).
            ffi::FI_ALIAS => unsafe { make_alias(a.d.ep.clone(), arg) },
            c => Err(fail!(ffi::FI_ENOSYS, "fi_control command {c} is not supported on an endpoint alias")),
        }
    })
}

unsafe extern "C" fn cancel(f: *mut ffi::fid, _context: *mut c_void) -> isize {
    guard_ssize("fi_cancel", || {
        let (ep, ctx) = target(f)?;
        // (A transmit context has no receives to cancel, and oxmr cancels
        // nothing else.)
        if ctx.is_some_and(|c| c.only() == Some(crate::objects::alias::Only::Transmit)) {
            return Err(crate::error::Error::quiet(ffi::FI_ENOENT));
        }
        if !ep.is_started() {
            // Nothing can be posted before fi_enable.
            return Err(crate::error::Error::quiet(ffi::FI_ENOENT));
        }
        ep.cancel(_context as usize).map(|_| 0)
    })
}

/// Read a `size_t` option value.
///
/// # Safety
/// `optval` is NULL or valid for `optlen` bytes.
unsafe fn opt_usize(optval: *const c_void, optlen: usize) -> crate::error::Result<usize> {
    if optval.is_null() || optlen != size_of::<usize>() {
        return Err(fail!(ffi::FI_EINVAL, "option value must be a size_t (optlen {optlen})"));
    }
    // SAFETY: non-NULL and `optlen` is a size_t's size, so `optval` has
    // that many readable bytes (this fn's contract); read unaligned.
    Ok(unsafe { std::ptr::read_unaligned(optval as *const usize) })
}

/// Write a `size_t` option value.
///
/// # Safety
/// `optlen` is valid; `optval` is NULL or valid for `*optlen` bytes.
pub unsafe fn put_usize(optval: *mut c_void, optlen: *mut usize, v: usize) -> crate::error::Result<i32> {
    if optlen.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "fi_getopt: NULL optlen"));
    }
    // SAFETY: `optlen` is non-NULL and valid (this fn's contract); `optval`
    // is written only when non-NULL with room for a size_t, unaligned.
    unsafe {
        if optval.is_null() || *optlen < size_of::<usize>() {
            *optlen = size_of::<usize>();
            return Err(fail!(ffi::FI_ETOOSMALL, "fi_getopt: option needs a size_t buffer"));
        }
        std::ptr::write_unaligned(optval as *mut usize, v);
        *optlen = size_of::<usize>();
    }
    Ok(0)
}

unsafe extern "C" fn getopt(f: *mut ffi::fid, level: i32, name: i32, optval: *mut c_void, optlen: *mut usize) -> i32 {
    guard_int("fi_getopt", || {
        let ep = ep_of(f)?;
        if level as u32 != ffi::FI_OPT_ENDPOINT {
            return Err(fail!(ffi::FI_ENOPROTOOPT, "fi_getopt: level {level} unknown; oxmr has FI_OPT_ENDPOINT"));
        }
        let v = match name as u32 {
            ffi::FI_OPT_MIN_MULTI_RECV => ep.min_multi_recv(),
            ffi::FI_OPT_CM_DATA_SIZE => attrs::CM_DATA_SIZE,
            ffi::FI_OPT_TX_SIZE => ep.info.tx.size,
            ffi::FI_OPT_RX_SIZE => ep.info.rx.size,
            n => return Err(fail!(ffi::FI_ENOPROTOOPT, "fi_getopt: option {n} is not supported by oxmr")),
        };
        // SAFETY: fi_getopt(3): `optlen` is NULL (refused) or valid, `optval`
        // NULL or `*optlen` writable bytes (put_usize's contract).
        unsafe { put_usize(optval, optlen, v) }
    })
}

unsafe extern "C" fn setopt(f: *mut ffi::fid, level: i32, name: i32, optval: *const c_void, optlen: usize) -> i32 {
    guard_int("fi_setopt", || {
        let (ep, ctx) = target(f)?;
        // (The options are the receive side's: FI_OPT_MIN_MULTI_RECV.)
        if let Some(c) = ctx {
            c.allows(crate::objects::alias::Only::Receive, "fi_setopt")?;
        }
        if level as u32 != ffi::FI_OPT_ENDPOINT {
            return Err(fail!(ffi::FI_ENOPROTOOPT, "fi_setopt: level {level} unknown; oxmr has FI_OPT_ENDPOINT"));
        }
        match name as u32 {
            ffi::FI_OPT_MIN_MULTI_RECV => {
                // SAFETY: fi_setopt(3): `optval` is NULL (refused) or `optlen`
                // readable bytes (opt_usize's contract).
                let v = unsafe { opt_usize(optval, optlen) }?;
                ep.set_min_multi_recv(v)?;
                Ok(0)
            }
            ffi::FI_OPT_CM_DATA_SIZE => Err(fail!(ffi::FI_EINVAL, "FI_OPT_CM_DATA_SIZE is read-only")),
            n => Err(fail!(ffi::FI_ENOPROTOOPT, "fi_setopt: option {n} is not supported by oxmr")),
        }
    })
}

crate::enosys!(tx_ctx, "fi_tx_context", (sep: *mut ffi::fid_ep, index: i32, attr: *mut ffi::fi_tx_attr, tx_ep: *mut *mut ffi::fid_ep, context: *mut c_void) -> i32);
crate::enosys!(rx_ctx, "fi_rx_context", (sep: *mut ffi::fid_ep, index: i32, attr: *mut ffi::fi_rx_attr, rx_ep: *mut *mut ffi::fid_ep, context: *mut c_void) -> i32);
crate::enosys!(rx_size_left, "fi_rx_size_left", (ep: *mut ffi::fid_ep) -> isize);
crate::enosys!(tx_size_left, "fi_tx_size_left", (ep: *mut ffi::fid_ep) -> isize);

/// Write an address as a C name.
///
/// # Safety
/// `addrlen` is valid; `out` is NULL or valid for `*addrlen` bytes.
pub unsafe fn put_name(a: &std::net::SocketAddr, out: *mut c_void, addrlen: *mut usize) -> crate::error::Result<i32> {
    if addrlen.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "fi_getname: NULL addrlen"));
    }
    let bytes = addr::encode(a);
    // SAFETY: `addrlen` is non-NULL and valid, `out` NULL or `*addrlen`
    // bytes (this fn's contract); at most `room` bytes are copied. fi_cm(3): a name that does not fit is
    // truncated into the buffer and -FI_ETOOSMALL returned.
    unsafe {
        let room = *addrlen;
        *addrlen = bytes.len();
        if !out.is_null() {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, room.min(bytes.len()));
        }
        if out.is_null() || room < bytes.len() {
            return Err(crate::error::Error::quiet(ffi::FI_ETOOSMALL));
        }
    }
    Ok(0)
}

/// Parse an address given to fi_setname/fi_connect.
///
/// # Safety
/// `p` is NULL or valid for `len` bytes.
pub unsafe fn get_name(p: *const c_void, len: usize) -> crate::error::Result<std::net::SocketAddr> {
    if p.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "NULL address"));
    }
    if len > size_of::<libc::sockaddr_storage>() {
        return Err(fail!(ffi::FI_EINVAL, "address length {len}: oxmr names are sockaddr_in/sockaddr_in6"));
    }
    // SAFETY: non-NULL, so `len` readable bytes (this fn's contract); `len`
    // is at most a sockaddr_storage.
    let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
    addr::parse(bytes).ok_or_else(|| fail!(ffi::FI_EINVAL, "address is not a sockaddr_in/sockaddr_in6 of {len} bytes"))
}

unsafe extern "C" fn setname(f: *mut ffi::fid, a: *mut c_void, len: usize) -> i32 {
    guard_int("fi_setname", || {
        let ep = from_fid!(Ep, f)?;
        // SAFETY: fi_setname(3)'s `addr` is NULL (refused) or `addrlen` bytes.
        let a = unsafe { get_name(a, len) }?;
        ep.set_name(a)?;
        Ok(0)
    })
}

unsafe extern "C" fn getname(f: *mut ffi::fid, out: *mut c_void, addrlen: *mut usize) -> i32 {
    guard_int("fi_getname", || {
        let ep = ep_of(f)?;
        let name =
            ep.shown_name().ok_or_else(|| fail!(ffi::FI_EADDRNOTAVAIL, "fi_getname: endpoint has no address yet"))?;
        // SAFETY: fi_getname(3): `addrlen` is NULL (refused) or valid, `addr`
        // NULL or `*addrlen` writable bytes (put_name's contract).
        unsafe { put_name(&name, out, addrlen) }
    })
}

unsafe extern "C" fn getpeer(ep: *mut ffi::fid_ep, a: *mut c_void, addrlen: *mut usize) -> i32 {
    guard_int("fi_getpeer", || {
        let ep = from_fid!(Ep, ep)?;
        let peer = ep.peer()?;
        // SAFETY: fi_getpeer(3): `addrlen` is NULL (refused) or valid, `addr`
        // NULL or `*addrlen` writable bytes (put_name's contract).
        unsafe { put_name(&peer, a, addrlen) }
    })
}

/// The cm_data of a CM call (empty for NULL or 0 bytes).
///
/// # Safety
/// `p` is NULL or valid for `len` bytes.
pub unsafe fn cm_data<'a>(call: &str, p: *const c_void, len: usize) -> crate::error::Result<&'a [u8]> {
    if len > attrs::CM_DATA_SIZE {
        return Err(fail!(
            ffi::FI_EINVAL,
            "{call}: {len} bytes of cm_data; at most {} (FI_OPT_CM_DATA_SIZE)",
            attrs::CM_DATA_SIZE
        ));
    }
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "{call}: NULL cm_data with length {len}"));
    }
    // SAFETY: non-NULL and `len` > 0, so `len` readable bytes (this fn's
    // contract: fi_connect/fi_accept/fi_reject's `param` of `paramlen`).
    Ok(unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}

pub(super) unsafe extern "C" fn connect(
    ep: *mut ffi::fid_ep,
    addr: *const c_void,
    param: *const c_void,
    paramlen: usize,
) -> i32 {
    guard_int("fi_connect", || {
        // (Retained for the EQ's weak watch.)
        let ep = from_fid!(retain Ep, ep)?;
        if addr.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "fi_connect: NULL address; pass the passive endpoint's name"));
        }
        // SAFETY: a name (fi_cm(3): in the endpoint's address format)
        // starts with its family, which says how long it is.
        let family = unsafe { std::ptr::read_unaligned(addr as *const libc::sa_family_t) } as i32;
        let len = match family {
            libc::AF_INET => size_of::<libc::sockaddr_in>(),
            libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
            f => return Err(fail!(ffi::FI_EINVAL, "fi_connect: address family {f}; oxmr names are sockaddr_in/in6")),
        };
        // SAFETY: a sockaddr of that family has `len` bytes.
        let to = unsafe { get_name(addr, len) }?;
        // SAFETY: fi_connect(3): `param` is NULL or `paramlen` readable bytes.
        let data = unsafe { cm_data("fi_connect", param, paramlen) }?;
        ep.connect(to, data)?;
        Ok(0)
    })
}

pub(super) unsafe extern "C" fn accept(ep: *mut ffi::fid_ep, param: *const c_void, paramlen: usize) -> i32 {
    guard_int("fi_accept", || {
        let ep = from_fid!(retain Ep, ep)?;
        // SAFETY: fi_accept(3): `param` is NULL or `paramlen` readable bytes.
        let data = unsafe { cm_data("fi_accept", param, paramlen) }?;
        ep.accept(data)?;
        Ok(0)
    })
}

pub(super) unsafe extern "C" fn shutdown(ep: *mut ffi::fid_ep, flags: u64) -> i32 {
    guard_int("fi_shutdown", || {
        let ep = from_fid!(Ep, ep)?;
        ep.shutdown(flags)?;
        Ok(0)
    })
}

crate::enosys!(listen, "fi_listen", (pep: *mut ffi::fid_pep) -> i32);
crate::enosys!(reject, "fi_reject", (pep: *mut ffi::fid_pep, handle: ffi::fid_t, param: *const c_void, paramlen: usize) -> i32);
crate::enosys!(join, "fi_join", (ep: *mut ffi::fid_ep, addr: *const c_void, flags: u64, mc: *mut *mut ffi::fid_mc, context: *mut c_void) -> i32);
