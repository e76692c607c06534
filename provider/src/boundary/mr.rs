//! fid_mr and the registration calls (fi_mr_reg, fi_mr_regv,
//! fi_mr_regattr), plus the "oxmr_mr_ops" extension table.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::Ordering;

use oxmr_ffi as ffi;

use super::fid::{self, fid_header, from_fid};
use super::{common, guard_int, write_out};
use crate::ext::{self, oxmr_mr_info, oxmr_mr_ops, oxmr_mr_stats, oxmr_phys_run};
use crate::fail;
use crate::mr::pin::{PinClass, PinMode};
use crate::mr::registry::Ranges;
use crate::mr::Request;
use crate::objects::{cntr::Cntr, domain::Domain, ep::Ep, mr::Mr, mr::MrTail};
use crate::sys::LockExt;

pub static MR_FI_OPS: ffi::fi_ops = ffi::fi_ops {
    size: size_of::<ffi::fi_ops>(),
    close: Some(close),
    bind: Some(bind),
    control: Some(control),
    ops_open: Some(common::ops_open),
    tostr: Some(common::tostr),
    ops_set: Some(common::ops_set),
};

crate::fid_object!(Mr, face, ffi::FI_CLASS_MR, "memory region", MR_FI_OPS);

unsafe extern "C" fn close(f: *mut ffi::fid) -> i32 {
    guard_int("fi_close(mr)", || {
        // The key stops validating, then C's reference goes. (No -FI_EBUSY:
        // what else holds the region, the registry until now and accesses
        // in flight, keeps it, and its pin, until they let go; bindings from
        // an MR are weak, and nothing binds to one.) Once taken, C's
        // reference is the Arc's: whatever follows, the handle is consumed
        // (a panic below, a bug, answers -FI_EOTHER with the MR closed).
        from_fid!(take Mr, f)?.close();
        Ok(0)
    })
}

unsafe extern "C" fn bind(f: *mut ffi::fid, bfid: *mut ffi::fid, flags: u64) -> i32 {
    guard_int("fi_mr_bind", || {
        let mr = from_fid!(Mr, f)?;
        match from_fid!(class bfid) {
            Some(ffi::FI_CLASS_EP) => mr.bind_ep(&from_fid!(retain Ep, bfid)?, flags)?,
            // (A context of a scalable endpoint: its index's endpoint.)
            Some(ffi::FI_CLASS_TX_CTX) => {
                let c = from_fid!(crate::objects::sep::TxCtx, bfid)?;
                mr.bind_ep_of(&c.d.ep, Some(&c.sep), flags)?
            }
            Some(ffi::FI_CLASS_RX_CTX) => {
                let c = from_fid!(crate::objects::sep::RxCtx, bfid)?;
                mr.bind_ep_of(&c.d.ep, Some(&c.sep), flags)?
            }
            Some(ffi::FI_CLASS_CNTR) => mr.bind_cntr(&from_fid!(retain Cntr, bfid)?, flags)?,
            _ => return Err(fail!(ffi::FI_EINVAL, "fi_mr_bind: bind an MR to an endpoint or a counter")),
        }
        Ok(0)
    })
}

unsafe extern "C" fn control(f: *mut ffi::fid, command: i32, _arg: *mut c_void) -> i32 {
    guard_int("fi_control(mr)", || {
        let mr = from_fid!(Mr, f)?;
        match command as u32 {
            ffi::FI_ENABLE => mr.enable().map(|_| 0),
            ffi::FI_REFRESH => mr.refresh().map(|_| 0),
            c => Err(fail!(ffi::FI_ENOSYS, "fi_control command {c} is not supported on an MR")),
        }
    })
}

/// Register and hand the MR out.
///
/// # Safety
/// `out` is NULL or valid for a write. (`domain` is the call's domain fid
/// argument, taken by `from_fid!`.)
unsafe fn reg_common(
    domain: *mut ffi::fid,
    req: &mut Request,
    out: *mut *mut ffi::fid_mr,
    context: *mut c_void,
) -> crate::error::Result<i32> {
    let d = from_fid!(Domain, domain)?;
    if out.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "fi_mr_reg: NULL mr out-parameter"));
    }
    // (The MR holds its domain: a second look at the same fid, which C's
    // reference keeps alive for this call; a parked MR has its own.)
    let mr =
        d.mr.register_with(req, fid_header::<Mr>(context), || Ok(MrTail::new(from_fid!(retain Domain, domain)?)))?;
    // SAFETY: `out` checked non-NULL above.
    unsafe { out.write(fid::publish(mr) as *mut ffi::fid_mr) };
    Ok(0)
}

/// # Safety
/// `iov` is NULL or holds `count` iovecs.
unsafe fn iovs_of(iov: *const ffi::iovec, count: usize) -> crate::error::Result<Vec<(usize, usize)>> {
    if count > 0 && iov.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "fi_mr_regv: NULL iov array with count {count}"));
    }
    if count > 1024 {
        return Err(fail!(ffi::FI_EINVAL, "fi_mr_regv: {count} iovs"));
    }
    // SAFETY: `iov` is non-NULL here when count > 0 and holds `count`
    // iovecs (this fn's contract); `i < count`.
    Ok((0..count).map(|i| unsafe { ((*iov.add(i)).iov_base as usize, (*iov.add(i)).iov_len) }).collect())
}

pub unsafe extern "C" fn reg(
    domain: *mut ffi::fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    out: *mut *mut ffi::fid_mr,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_mr_reg", || {
        let mut req = Request::system(Ranges::One((buf as usize, len)), access, offset, requested_key, flags);
        // SAFETY: fi_mr_reg(3): `mr` (`out`) is NULL (refused) or writable.
        unsafe { reg_common(domain, &mut req, out, context) }
    })
}

pub unsafe extern "C" fn regv(
    domain: *mut ffi::fid,
    iov: *const ffi::iovec,
    count: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    out: *mut *mut ffi::fid_mr,
    context: *mut c_void,
) -> i32 {
    guard_int("fi_mr_regv", || {
        // SAFETY: fi_mr_regv(3): `iov` is NULL or holds `count` iovecs.
        let iovs = unsafe { iovs_of(iov, count) }?;
        let mut req = Request::system(iovs.into(), access, offset, requested_key, flags);
        // SAFETY: fi_mr_regv(3): `out` is NULL (refused) or writable.
        unsafe { reg_common(domain, &mut req, out, context) }
    })
}

pub unsafe extern "C" fn regattr(
    domain: *mut ffi::fid,
    attr: *const ffi::fi_mr_attr,
    flags: u64,
    out: *mut *mut ffi::fid_mr,
) -> i32 {
    guard_int("fi_mr_regattr", || {
        if attr.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "fi_mr_regattr: NULL fi_mr_attr"));
        }
        let d = from_fid!(Domain, domain)?;
        // fi_mr_attr grows with the API (auth_key 1.5, iface and device
        // 1.10, hmem_data 1.19, dmabuf in mr_iov's union 1.20, page_size
        // 1.22, base_mr and sub_mr_cnt 2.0), and an application built
        // against older headers passes the smaller struct: each field is
        // read alone, through the pointer, only when the application's API
        // version has it (as libfabric's ofi_mr_update_attr does).
        macro_rules! field {
            ($($f:tt)+) => {
                // SAFETY: `attr` is non-NULL and points to the application's
                // fi_mr_attr (C contract of fi_mr_regattr), which has this
                // field at its API version (checked by each caller).
                unsafe { std::ptr::addr_of!((*attr).$($f)+).read() }
            };
        }
        if d.fabric.api_at_least(1, 5) && field!(auth_key_size) > 0 {
            return Err(fail!(ffi::FI_ENOSYS, "fi_mr_regattr: authorization keys are not supported"));
        }
        // FI_MR_DMABUF (1.20): the union holds a `struct fi_mr_dmabuf *`.
        #[cfg(fi_1_20)]
        let dmabuf = if flags & ffi::FI_MR_DMABUF != 0 {
            let p = field!(__bindgen_anon_1.dmabuf);
            if p.is_null() {
                return Err(fail!(ffi::FI_EINVAL, "fi_mr_regattr: FI_MR_DMABUF with a NULL dmabuf"));
            }
            // SAFETY: non-NULL fi_mr_dmabuf of the application (C contract).
            let b = unsafe { p.read() };
            Some(crate::mr::dmabuf::Request {
                fd: b.fd,
                offset: b.offset,
                len: b.len as u64,
                base_addr: b.base_addr as u64,
            })
        } else {
            None
        };
        #[cfg(not(fi_1_20))]
        let dmabuf = None;
        let iovs = if dmabuf.is_some() {
            Vec::new()
        } else {
            #[cfg(fi_1_20)]
            let mr_iov = field!(__bindgen_anon_1.mr_iov);
            #[cfg(not(fi_1_20))]
            let mr_iov = field!(mr_iov);
            let count = field!(iov_count);
            // SAFETY: `mr_iov` holds `iov_count` iovecs (C contract).
            unsafe { iovs_of(mr_iov, count) }?
        };
        let iface = if d.fabric.api_at_least(1, 10) { field!(iface) } else { ffi::FI_HMEM_SYSTEM };
        let mut req = Request {
            iovs: iovs.into(),
            access: field!(access),
            offset: field!(offset),
            requested_key: field!(requested_key),
            flags: flags & !DMABUF_FLAG,
            iface,
            dmabuf,
        };
        let context = field!(context);
        // SAFETY: fi_mr_regattr(3): `mr` (`out`) is NULL (refused) or writable.
        unsafe { reg_common(domain, &mut req, out, context) }
    })
}

unsafe extern "C" fn ext_query(mr: *mut c_void, info: *mut oxmr_mr_info) -> i32 {
    guard_int("oxmr_mr_ops.query", || {
        let mr = from_fid!(Mr, mr)?;
        let r = mr;
        // A device registration reports whether its mapping is still there.
        mr.domain().mr.phys_live(r);
        let pin = r.pin.lock_ok();
        let class_ = match pin.class() {
            PinClass::Uring => ext::OXMR_MR_CLASS_PINNED,
            PinClass::Mlock => ext::OXMR_MR_CLASS_LOCKED,
            PinClass::Unpinned => ext::OXMR_MR_CLASS_UNPINNED,
            PinClass::Phys if pin.phys().is_some_and(|p| p.device.is_some()) => ext::OXMR_MR_CLASS_PEER,
            PinClass::Phys => ext::OXMR_MR_CLASS_PHYSICAL,
        };
        let (phys_state, phys_runs) = match pin.phys() {
            None => (ext::OXMR_PHYS_NONE, 0),
            Some(p) if p.revoked() => (ext::OXMR_PHYS_REVOKED, 0),
            Some(p) => match &p.runs {
                Some(runs) => (ext::OXMR_PHYS_AVAILABLE, runs.len() as u32),
                None => (ext::OXMR_PHYS_UNAVAILABLE, 0),
            },
        };
        let v = oxmr_mr_info {
            size: size_of::<oxmr_mr_info>(),
            class_,
            pin_slots: pin.slots(),
            bytes_pinned: pin.bytes(),
            len: r.len as u64,
            key: r.key,
            access: r.access,
            cache_entry: pin.cache_entry().map_or(0, |e| e.id),
            pfn0: r.pfn0,
            phys_state,
            phys_runs,
        };
        // SAFETY: `info` points to a struct starting with its size (API contract).
        unsafe { put_sized(info, &v) }
    })
}

unsafe extern "C" fn ext_phys_runs(mr: *mut c_void, runs: *mut oxmr_phys_run, count: *mut usize) -> i32 {
    guard_int("oxmr_mr_ops.phys_runs", || {
        let mr = from_fid!(Mr, mr)?;
        if count.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "oxmr_mr_ops.phys_runs: NULL count"));
        }
        // (Checked now, as an access would: a mapping replaced since the
        // last access revokes the registration before its runs are told.)
        mr.domain().mr.phys_live(mr);
        let pin = mr.pin.lock_ok();
        let Some(p) = pin.phys() else {
            return Err(fail!(
                ffi::FI_EINVAL,
                "oxmr_mr_ops.phys_runs: key {:#x} is not a physical-address registration",
                mr.key
            ));
        };
        if p.revoked() {
            return Err(fail!(
                ffi::FI_EKEYREJECTED,
                "oxmr_mr_ops.phys_runs: key {:#x} was revoked (its mapping changed)",
                mr.key
            ));
        }
        let Some(list) = &p.runs else {
            return Err(fail!(
                ffi::FI_ENODATA,
                "oxmr_mr_ops.phys_runs: the physical addresses of key {:#x} are unavailable (/proc/self/pagemap does not show them: no CAP_SYS_ADMIN, or a VM_PFNMAP mapping)",
                mr.key
            ));
        };
        // SAFETY: non-NULL count from the caller.
        let cap = unsafe { *count };
        // SAFETY: the same non-NULL `count`, read just above.
        unsafe { *count = list.len() };
        if cap < list.len() {
            return Err(crate::error::Error::quiet(ffi::FI_ETOOSMALL));
        }
        if !list.is_empty() && runs.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "oxmr_mr_ops.phys_runs: NULL runs with room for {cap}"));
        }
        for (i, &(addr, len)) in list.iter().enumerate() {
            // SAFETY: the caller's array holds `cap` >= list.len() runs.
            unsafe { runs.add(i).write(oxmr_phys_run { addr, len }) };
        }
        Ok(0)
    })
}

unsafe extern "C" fn ext_stats(domain: *mut c_void, stats: *mut oxmr_mr_stats) -> i32 {
    guard_int("oxmr_mr_ops.stats", || {
        let d = from_fid!(Domain, domain)?;
        let s = &d.mr.stats;
        let p = &d.mr.pinner;
        let t = &d.wires.tcp_stats;
        let (cache_entries, cache_bytes) = d.mr.cache.as_ref().map_or((0, 0), |c| c.size());
        let cs = d.mr.cache.as_ref().map(|c| &c.stats);
        let c = |f: fn(&crate::mr::cache::CacheStats) -> &std::sync::atomic::AtomicU64| {
            cs.map_or(0, |s| f(s).load(Ordering::Relaxed))
        };
        let v = oxmr_mr_stats {
            size: size_of::<oxmr_mr_stats>(),
            registrations: d.mr.registrations(),
            live: d.mr.registry.len() as u64,
            bytes_pinned: p.acct.pinned(),
            process_bytes_pinned: crate::mr::account::process_pinned(),
            pin_cap: p.acct.cap().unwrap_or(0),
            slots_used: p.slots_used(),
            pin_mode: match p.mode() {
                PinMode::Uring => 1,
                PinMode::Mlock => 2,
                PinMode::None => 3,
            },
            fail_einval: s.fail_einval.load(Ordering::Relaxed),
            fail_efault: s.fail_efault.load(Ordering::Relaxed),
            fail_eacces: s.fail_eacces.load(Ordering::Relaxed),
            fail_enomem: s.fail_enomem.load(Ordering::Relaxed),
            fail_enokey: s.fail_enokey.load(Ordering::Relaxed),
            fail_other: s.fail_other.load(Ordering::Relaxed),
            cache_hits: c(|s| &s.hits),
            cache_misses: c(|s| &s.misses),
            cache_uncached: c(|s| &s.uncached),
            cache_evictions: c(|s| &s.evictions),
            cache_inv_unmap: c(|s| &s.inv_unmap),
            cache_inv_remove: c(|s| &s.inv_remove),
            cache_inv_remap: c(|s| &s.inv_remap),
            cache_entries: cache_entries as u64,
            cache_bytes,
            tcp_zc_sends: t.zc_sends.load(Ordering::Relaxed),
            tcp_zc_bytes: t.zc_bytes.load(Ordering::Relaxed),
            tcp_zc_copied: d.wires.tcp_ring.as_ref().map_or(0, |r| r.notes.copied.load(Ordering::Relaxed)),
            tcp_copied_frames: t.copied_frames.load(Ordering::Relaxed),
            tcp_copied_bytes: t.copied_bytes.load(Ordering::Relaxed),
            cache_parked: d.mr.cache.as_ref().map_or(0, |c| c.parked() as u64),
        };
        // SAFETY: `stats` points to a struct starting with its size (API contract).
        unsafe { put_sized(stats, &v) }
    })
}

/// Write `v` to a caller's struct that starts with its own `size_t size`,
/// copying at most that many bytes, so a caller built against an older,
/// smaller struct is never overrun.
///
/// # Safety
/// `out` is NULL or points to at least `(*out).size` writable bytes.
unsafe fn put_sized<T>(out: *mut T, v: &T) -> crate::error::Result<i32> {
    if out.is_null() {
        return Err(fail!(ffi::FI_EINVAL, "oxmr_mr_ops: NULL output struct"));
    }
    // SAFETY: non-NULL, and every extension struct starts with its `size_t
    // size` (this fn's contract: the oxmr_mr_ops structs of fi_ext_oxmr.h).
    let caller = unsafe { *(out as *const usize) };
    if caller < size_of::<usize>() {
        return Err(fail!(ffi::FI_EINVAL, "oxmr_mr_ops: set the struct's size field to sizeof(the struct) first"));
    }
    let n = caller.min(size_of::<T>());
    // SAFETY: the caller owns `caller` >= n bytes at `out`; `v` is a T.
    unsafe {
        std::ptr::copy_nonoverlapping(v as *const T as *const u8, out as *mut u8, n);
        *(out as *mut usize) = n;
    }
    Ok(0)
}

unsafe extern "C" fn ext_device(mr: *mut c_void, dev: *mut ext::oxmr_mr_device) -> i32 {
    guard_int("oxmr_mr_ops.device", || {
        use crate::mr::device::{Caching, Device};
        let mr = from_fid!(Mr, mr)?;
        mr.domain().mr.phys_live(mr);
        let pin = mr.pin.lock_ok();
        let key = mr.key;
        let Some((p, d)) = pin.phys().and_then(|p| Some((p, p.device.as_ref()?))) else {
            return Err(fail!(
                ffi::FI_ENODATA,
                "oxmr_mr_ops.device: key {key:#x} is not a peer-direct registration (ordinary memory, or device memory registered by the physical-address fallback, whose device oxmr cannot name)"
            ));
        };
        if p.revoked() {
            return Err(fail!(
                ffi::FI_EKEYREJECTED,
                "oxmr_mr_ops.device: key {key:#x} was revoked (its mapping changed)"
            ));
        }
        let mut v = ext::oxmr_mr_device {
            size: size_of::<ext::oxmr_mr_device>(),
            kind: 0,
            caching: match d.caching() {
                Caching::Uncached => ext::OXMR_CACHING_UC,
                Caching::WriteCombining => ext::OXMR_CACHING_WC,
                Caching::Unknown => ext::OXMR_CACHING_UNKNOWN,
            },
            pci_domain: 0,
            pci_bus: 0,
            pci_dev: 0,
            pci_func: 0,
            pci_valid: 0,
            index: 0,
            prefetchable: 0,
            offset: 0,
            bus_start: 0,
            bus_end: 0,
            dmabuf_ino: 0,
            dmabuf_size: 0,
            exporter: [0; 32],
        };
        let mut pci = |b: &crate::mr::device::Bdf| {
            (v.pci_domain, v.pci_bus, v.pci_dev, v.pci_func, v.pci_valid) = (b.domain, b.bus, b.dev, b.func, 1);
        };
        match d {
            Device::Bar { bdf, bar, offset, start, end, prefetchable, .. } => {
                pci(bdf);
                (v.kind, v.index, v.offset, v.bus_start, v.bus_end) =
                    (ext::OXMR_DEV_PCI_BAR, *bar as u32, *offset, *start, *end);
                v.prefetchable = *prefetchable as u32;
            }
            Device::Vfio { bdf, region, offset } => {
                if let Some(b) = bdf {
                    pci(b);
                }
                (v.kind, v.index, v.offset) = (ext::OXMR_DEV_VFIO, *region, *offset);
            }
            Device::P2p { bdf } => {
                pci(bdf);
                v.kind = ext::OXMR_DEV_P2PDMA;
            }
            Device::DmaBuf { ino, size, offset, exporter } => {
                (v.kind, v.offset, v.dmabuf_ino, v.dmabuf_size) = (ext::OXMR_DEV_DMABUF, *offset, *ino, *size);
                let n = exporter.len().min(v.exporter.len() - 1);
                v.exporter[..n].copy_from_slice(&exporter.as_bytes()[..n]);
            }
        }
        // SAFETY: `dev` points to a struct starting with its size (API contract).
        unsafe { put_sized(dev, &v) }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn ext_reg_dmabuf(
    domain: *mut c_void,
    dmabuf: *const ext::oxmr_mr_dmabuf,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    out: *mut *mut c_void,
    context: *mut c_void,
) -> i32 {
    guard_int("oxmr_mr_ops.reg_dmabuf", || {
        if dmabuf.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "oxmr_mr_ops.reg_dmabuf: NULL dmabuf"));
        }
        // SAFETY: non-NULL oxmr_mr_dmabuf of the application.
        let b = unsafe { dmabuf.read() };
        let mut req = Request {
            dmabuf: Some(crate::mr::dmabuf::Request {
                fd: b.fd,
                offset: b.offset,
                len: b.len as u64,
                base_addr: b.base_addr as u64,
            }),
            ..Request::system(Vec::new().into(), access, offset, requested_key, flags)
        };
        // SAFETY: oxmr_mr_ops.reg_dmabuf's `mr` (`out`) is NULL (refused by
        // reg_common) or writable for one pointer (fi_ext_oxmr.h).
        unsafe { reg_common(domain as *mut ffi::fid, &mut req, out as *mut *mut ffi::fid_mr, context) }
    })
}

unsafe extern "C" fn ext_mmio_copy(dst: *mut c_void, src: *const c_void, len: usize, flags: u64) -> i32 {
    guard_int("oxmr_mr_ops.mmio_copy", || {
        if len == 0 {
            return Ok(0);
        }
        if dst.is_null() || src.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "oxmr_mr_ops.mmio_copy: NULL buffer with length {len}"));
        }
        if flags & !(ext::OXMR_MMIO_TO_DEVICE | ext::OXMR_MMIO_WC) != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "oxmr_mr_ops.mmio_copy: unknown flags {flags:#x}"));
        }
        // SAFETY: the caller's buffers, `len` bytes each (its contract,
        // as for memcpy); the device side takes the MMIO-safe accesses.
        unsafe {
            if flags & ext::OXMR_MMIO_TO_DEVICE != 0 {
                let s = std::slice::from_raw_parts(src as *const u8, len);
                crate::mr::phys::copy_to_device(dst as usize, s, flags & ext::OXMR_MMIO_WC != 0);
            } else {
                let d = std::slice::from_raw_parts_mut(dst as *mut u8, len);
                crate::mr::phys::copy_from_device(d, src as usize);
            }
        }
        Ok(0)
    })
}

/// FI_MR_DMABUF's bit (libfabric 1.20): taken off the flags once decoded.
#[cfg(fi_1_20)]
const DMABUF_FLAG: u64 = ffi::FI_MR_DMABUF as u64;
#[cfg(not(fi_1_20))]
const DMABUF_FLAG: u64 = 0;

static MR_EXT_OPS: oxmr_mr_ops = oxmr_mr_ops {
    size: size_of::<oxmr_mr_ops>(),
    version: ext::OXMR_EXT_VERSION,
    query: Some(ext_query),
    stats: Some(ext_stats),
    phys_runs: Some(ext_phys_runs),
    device: Some(ext_device),
    reg_dmabuf: Some(ext_reg_dmabuf),
    mmio_copy: Some(ext_mmio_copy),
};

/// fi_open_ops on a domain.
pub unsafe extern "C" fn domain_ops_open(
    f: *mut ffi::fid,
    name: *const c_char,
    _flags: u64,
    ops: *mut *mut c_void,
    _context: *mut c_void,
) -> i32 {
    guard_int("fi_open_ops(domain)", || {
        from_fid!(Domain, f)?;
        if name.is_null() {
            return Err(fail!(ffi::FI_EINVAL, "fi_open_ops: NULL name"));
        }
        // SAFETY: non-NULL C string from the application.
        let n = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        if n != ext::OXMR_MR_OPS_NAME {
            return Err(fail!(
                ffi::FI_ENOSYS,
                "fi_open_ops: oxmr has no \"{n}\" table on a domain (it has \"{}\")",
                ext::OXMR_MR_OPS_NAME
            ));
        }
        // SAFETY: `ops` valid for a pointer write (API contract).
        unsafe { write_out(ops, &MR_EXT_OPS as *const oxmr_mr_ops as *mut c_void, "ops") }?;
        Ok(0)
    })
}
