//! fid_av: the address vector's C slots.

use std::ffi::{c_char, c_void};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use oxmr_ffi as ffi;

use super::fid::{fid_header, from_fid, FidHeader};
use super::{common, guard, guard_int, info::opt_str, write_out};
use crate::fail;
use crate::info::addr;
use crate::objects::{av::Av, eq::Eq};

pub static AV_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(bind),
    control: Some(common::control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

static AV_OPS: ffi::fi_ops_av = ffi::fi_ops_av {
    size: size_of::<ffi::fi_ops_av>(),
    insert: Some(insert),
    insertsvc: Some(insertsvc),
    insertsym: Some(insertsym),
    remove: Some(remove),
    lookup: Some(lookup),
    straddr: Some(straddr),
    av_set: Some(av_set),
    // (API 1.20: authorization keys per address, and user ids.)
    #[cfg(fi_1_20)]
    insert_auth_key: Some(insert_auth_key),
    #[cfg(fi_1_20)]
    lookup_auth_key: Some(lookup_auth_key),
    #[cfg(fi_1_20)]
    set_user_id: Some(set_user_id),
};

#[cfg(fi_1_20)]
crate::enosys!(insert_auth_key, "fi_av_insert_auth_key", (av: *mut ffi::fid_av, auth_key: *const c_void, auth_key_size: usize, fi_addr: *mut ffi::fi_addr_t, flags: u64) -> i32);
#[cfg(fi_1_20)]
crate::enosys!(lookup_auth_key, "fi_av_lookup_auth_key", (av: *mut ffi::fid_av, fi_addr: ffi::fi_addr_t, auth_key: *mut c_void, auth_key_size: *mut usize) -> i32);
#[cfg(fi_1_20)]
crate::enosys!(set_user_id, "fi_av_set_user_id", (av: *mut ffi::fid_av, fi_addr: ffi::fi_addr_t, user_id: ffi::fi_addr_t, flags: u64) -> i32);

crate::fid_object!(Av, hdr, ffi::FI_CLASS_AV, "address vector", AV_FI_OPS);

/// The C header of a new AV.
pub fn header(context: *mut c_void) -> FidHeader<ffi::fid_av> {
    FidHeader(ffi::fid_av { fid: fid_header::<Av>(context), ops: &AV_OPS as *const _ as *mut _ })
}

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    guard_int("fi_close(av)", || from_fid!(close Av, f, |_| Ok(())).map(|_| 0))
}

unsafe extern "C" fn bind(f: *mut ffi::fid, bfid: *mut ffi::fid, flags: u64) -> i32 {
    guard_int("fi_av_bind", || {
        let (av, eq) = (from_fid!(Av, f)?, from_fid!(retain Eq, bfid)?);
        if flags != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_av_bind: flags {flags:#x}; pass 0"));
        }
        av.bind_eq(eq)?;
        Ok(0)
    })
}

/// Report an insert: fi_addr array, FI_SYNC_ERR array, return value.
///
/// # Safety
/// `fi_addr` is NULL or holds one slot per address; with FI_SYNC_ERR,
/// `context` holds one int per address.
unsafe fn report(
    av: &Av,
    addrs: &[Option<SocketAddr>],
    fi_addr: *mut ffi::fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> crate::error::Result<i32> {
    let done = av.insert(addrs, flags)?;
    for (i, r) in done.results.iter().enumerate() {
        // SAFETY: `i` < addrs.len(), and `fi_addr` (when non-NULL) and, with
        // FI_SYNC_ERR, `context` hold one slot per address (this fn's contract).
        unsafe {
            if !fi_addr.is_null() {
                fi_addr.add(i).write(*r.as_ref().unwrap_or(&ffi::FI_ADDR_NOTAVAIL));
            }
            if flags & ffi::FI_SYNC_ERR as u64 != 0 && !context.is_null() {
                (context as *mut i32).add(i).write(r.err().map_or(0, |c| c as i32));
            }
        }
    }
    if done.asynchronous {
        av.complete_insert(&done, context as usize);
        return Ok(0);
    }
    Ok(done.results.iter().filter(|r| r.is_ok()).count() as i32)
}

unsafe extern "C" fn insert(
    av: *mut ffi::fid_av,
    addr_: *const c_void,
    count: usize,
    fi_addr: *mut ffi::fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_av_insert", || {
        let av = from_fid!(Av, av)?;
        if count > 0 && addr_.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "fi_av_insert: NULL address array with count {count}"));
        }
        // Each address is read by its own family: sockaddr_in (16 bytes)
        // or sockaddr_in6 (28); anything else is invalid and taken as 16.
        let mut addrs = Vec::with_capacity(count);
        let mut off = 0usize;
        for _ in 0..count {
            // SAFETY: the application passes `count` packed sockaddrs; we
            // read the 2-byte family before deciding the length.
            let fam = unsafe { std::ptr::read_unaligned((addr_ as *const u8).add(off) as *const u16) };
            let len = if fam == libc::AF_INET6 as u16 { addr::SOCKADDR_IN6_LEN } else { addr::SOCKADDR_IN_LEN };
            // SAFETY: the entry at `off` is a packed sockaddr of this family,
            // so it has `len` bytes (fi_av_insert(3)'s `addr` array).
            let bytes = unsafe { std::slice::from_raw_parts((addr_ as *const u8).add(off), len) };
            addrs.push(addr::parse(bytes));
            off += len;
        }
        // SAFETY: array sizes per the API contract.
        unsafe { report(av, &addrs, fi_addr, flags, context) }
    })
}

fn resolve(node: &str, port: u16) -> Option<SocketAddr> {
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, port));
    }
    (node, port).to_socket_addrs().ok()?.next()
}

unsafe extern "C" fn insertsvc(
    av: *mut ffi::fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut ffi::fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_av_insertsvc", || {
        let av = from_fid!(Av, av)?;
        // SAFETY: fi_av_insertsvc(3)'s node and service are NULL or C strings.
        let (node, service) = unsafe { (opt_str(node), opt_str(service)) };
        let (Some(node), Some(service)) = (node, service) else {
            return Err(fail!(ffi::FI_EINVAL, "fi_av_insertsvc needs a node and a service"));
        };
        let port: u16 = service
            .parse()
            .map_err(|_| fail!(ffi::FI_EINVAL, "fi_av_insertsvc: service \"{service}\" is not a port number"))?;
        let a = resolve(&node, port);
        if a.is_none() {
            tracing::warn!("fi_av_insertsvc: node \"{node}\" does not resolve");
        }
        // SAFETY: one fi_addr slot per the API contract.
        unsafe { report(av, &[a], fi_addr, flags, context) }
    })
}

unsafe extern "C" fn insertsym(
    av: *mut ffi::fid_av,
    node: *const c_char,
    nodecnt: usize,
    service: *const c_char,
    svccnt: usize,
    fi_addr: *mut ffi::fi_addr_t,
    flags: u64,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_av_insertsym", || {
        let av = from_fid!(Av, av)?;
        // SAFETY: fi_av_insertsym(3)'s node and service are NULL or C strings.
        let (node, service) = unsafe { (opt_str(node), opt_str(service)) };
        let (Some(node), Some(service)) = (node, service) else {
            return Err(fail!(ffi::FI_EINVAL, "fi_av_insertsym needs a node and a service"));
        };
        let ip: IpAddr = node
            .parse()
            .map_err(|_| fail!(ffi::FI_EINVAL, "fi_av_insertsym: node \"{node}\" must be a numeric IP address"))?;
        let port: u16 = service
            .parse()
            .map_err(|_| fail!(ffi::FI_EINVAL, "fi_av_insertsym: service \"{service}\" is not a port number"))?;
        // (Node addresses count up from `node` and must not wrap; an AV of
        // more than 2^20 entries from one call is refused rather than
        // allocated.)
        let nodes_fit = match ip {
            IpAddr::V4(v) => (u32::from(v) as u64).checked_add(nodecnt as u64).is_some_and(|e| e <= 1 << 32),
            IpAddr::V6(v) => u128::from(v).checked_add(nodecnt as u128).is_some(),
        };
        let total = nodecnt.checked_mul(svccnt).filter(|&t| t <= 1 << 20);
        if nodecnt == 0 || svccnt == 0 || port as usize + svccnt > 65536 || !nodes_fit || total.is_none() {
            return Err(fail!(ffi::FI_EINVAL, "fi_av_insertsym: nodecnt {nodecnt} / svccnt {svccnt} out of range"));
        }
        let mut addrs = Vec::with_capacity(nodecnt * svccnt);
        for n in 0..nodecnt {
            let ip = match ip {
                IpAddr::V4(v) => IpAddr::V4(u32::from(v).wrapping_add(n as u32).into()),
                IpAddr::V6(v) => IpAddr::V6(u128::from(v).wrapping_add(n as u128).into()),
            };
            for s in 0..svccnt {
                addrs.push(Some(SocketAddr::new(ip, port + s as u16)));
            }
        }
        // SAFETY: nodecnt*svccnt fi_addr slots per the API contract.
        unsafe { report(av, &addrs, fi_addr, flags, context) }
    })
}

unsafe extern "C" fn remove(av: *mut ffi::fid_av, fi_addr: *mut ffi::fi_addr_t, count: usize, flags: u64) -> i32 {
    guard_int("fi_av_remove", || {
        let av = from_fid!(Av, av)?;
        if count > 0 && fi_addr.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "fi_av_remove: NULL fi_addr array with count {count}"));
        }
        let list: &[u64] = if count == 0 {
            &[]
        } else {
            // SAFETY: `count` entries per the API contract.
            unsafe { std::slice::from_raw_parts(fi_addr, count) }
        };
        av.remove(list, flags)?;
        Ok(0)
    })
}

unsafe extern "C" fn lookup(
    av: *mut ffi::fid_av,
    fi_addr: ffi::fi_addr_t,
    out: *mut c_void,
    addrlen: *mut usize,
) -> i32 {
    guard_int("fi_av_lookup", || {
        let av = from_fid!(Av, av)?;
        if addrlen.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "fi_av_lookup: NULL addrlen"));
        }
        let bytes = addr::encode(&av.lookup(fi_addr)?);
        // SAFETY: `addrlen` is valid; `out` has *addrlen bytes.
        unsafe {
            let room = *addrlen;
            if !out.is_null() {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), out as *mut u8, room.min(bytes.len()));
            }
            write_out(addrlen, bytes.len(), "addrlen")?;
        }
        Ok(0)
    })
}

unsafe extern "C" fn straddr(
    av: *mut ffi::fid_av,
    addr_: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    guard("fi_av_straddr", || {
        let _ = av;
        if len.is_null() {
            return std::ptr::null();
        }
        let text = if addr_.is_null() {
            "fi_addr_unspec://".to_string()
        } else {
            // SAFETY: the address is of the AV's format; read the family
            // first, then its full length.
            let fam = unsafe { std::ptr::read_unaligned(addr_ as *const u16) };
            let n = if fam == libc::AF_INET6 as u16 { addr::SOCKADDR_IN6_LEN } else { addr::SOCKADDR_IN_LEN };
            // SAFETY: a sockaddr of family `fam` has `n` bytes (the address
            // is in the AV's format, fi_av_straddr(3)).
            let bytes = unsafe { std::slice::from_raw_parts(addr_ as *const u8, n) };
            addr::parse(bytes).map_or_else(|| format!("fi_addr_unknown://family{fam}"), |a| addr::to_string(&a))
        };
        // SAFETY: `len` is valid; `buf` has *len bytes.
        unsafe {
            let need = super::copy_cstr(&text, buf, *len);
            *len = need;
        }
        buf as *const c_char
    })
}

crate::enosys!(av_set, "fi_av_set", (av: *mut ffi::fid_av, attr: *mut ffi::fi_av_set_attr, av_set: *mut *mut ffi::fid_av_set, context: *mut c_void) -> i32);
