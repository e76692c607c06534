//! Memory registration: the only room that knows how memory is pinned.
//!
//! - `registry`: keys and the remote-access check every wire uses (`aes`:
//!   the CPU's AES instructions, its key permutation's round function);
//! - `pin`, `uring`, `mlock`: how pages are held (io_uring long-term pins,
//!   mlock fallback with page-interval counts, or none);
//! - `account`: pinned bytes against RLIMIT_MEMLOCK or FI_OXMR_MR_MAX_PINNED;
//! - `maps`: the kernel's view of the mappings, to validate a range and to
//!   say why memory cannot be pinned;
//! - `local`: copies of this process's own memory (device-aware), for
//!   every wire;
//! - `phys`, `device`, `dmabuf`: device memory: the physical-address
//!   fallback (opt-in, for PFN mappings oxmr cannot name; `phys` also
//!   reads /proc/self/pagemap, `pagemap_pfns`, for every PFN), peer-direct
//!   identity (PCI BARs, VFIO regions, P2PDMA memory, proven from procfs
//!   and sysfs, registered without opt-in), dma-buf fds;
//! - `cache`, `uffd`, `protwatch`: the lazy-deregistration cache and what
//!   keeps it honest (userfaultfd for unmaps, remaps and discards; perf's
//!   mmap records for mprotect).
//!
//! Registration order (all-or-nothing): decode and check the request, pin
//! (which validates the range), then publish the key. Close removes the key
//! first (it never validates again), then the region's pin is dropped once
//! no in-flight operation holds the region.

pub mod account;
mod aes;
pub mod atomic;
pub mod cache;
pub mod device;
pub mod dmabuf;
pub mod local;
pub mod maps;
pub mod mlock;
pub mod phys;
pub mod pin;
pub mod protwatch;
pub mod registry;
pub mod uffd;
pub mod uring;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::sys::LockExt;

use oxmr_ffi as ffi;

use crate::error::{Error, Result};
use crate::fail;
use pin::{Pin, Pinner};
use registry::{Ranges, Region, Registry, ACCESS_BITS};

/// Largest iov count per registration.
pub(crate) const MR_IOV_LIMIT: usize = 8;

/// One registration request, decoded from fi_mr_reg/regv/regattr.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub iovs: Ranges,
    pub access: u64,
    pub offset: u64,
    pub requested_key: u64,
    pub flags: u64,
    pub iface: u32,
    /// A dma-buf registration (FI_MR_DMABUF, or the extension's
    /// `reg_dmabuf`): `iovs` is then empty, the buffer is mapped here.
    pub dmabuf: Option<dmabuf::Request>,
}

impl Request {
    /// A registration of host memory (FI_HMEM_SYSTEM), as fi_mr_reg and
    /// fi_mr_regv ask for it.
    pub fn system(iovs: Ranges, access: u64, offset: u64, requested_key: u64, flags: u64) -> Self {
        Request { iovs, access, offset, requested_key, flags, iface: ffi::FI_HMEM_SYSTEM, dmabuf: None }
    }
}

/// Registration failure counters (exported through the extension API;
/// the successes are the registry's count, `MrDomain::registrations`).
#[derive(Default)]
pub struct Stats {
    pub fail_einval: AtomicU64,
    pub fail_efault: AtomicU64,
    pub fail_eacces: AtomicU64,
    pub fail_enomem: AtomicU64,
    pub fail_enokey: AtomicU64,
    pub fail_other: AtomicU64,
}

impl Stats {
    fn count_failure(&self, e: Error) {
        let c = match e.code() {
            ffi::FI_EINVAL | ffi::FI_EBADFLAGS => &self.fail_einval,
            ffi::FI_EFAULT => &self.fail_efault,
            ffi::FI_EACCES => &self.fail_eacces,
            ffi::FI_ENOMEM => &self.fail_enomem,
            ffi::FI_ENOKEY => &self.fail_enokey,
            _ => &self.fail_other,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// A domain's registration state.
pub struct MrDomain {
    pub registry: Registry,
    pub pinner: Pinner,
    pub stats: Stats,
    /// Effective mr_mode bits (FI_MR_BASIC expanded).
    pub mr_mode: i32,
    /// The lazy-deregistration cache, when enabled and the monitor works.
    pub cache: Option<Arc<cache::Cache>>,
    /// Whether application (explicit) registrations use the cache.
    pub cache_explicit: bool,
    /// FI_OXMR_MR_RECORD_PFN.
    pub record_pfn: bool,
}

/// Cache settings (FI_OXMR_MR_CACHE_*).
#[derive(Clone, Copy, Debug)]
pub struct CacheConfig {
    pub enable: bool,
    pub explicit: bool,
    pub monitor: bool,
    pub max_bytes: u64,
    pub max_count: usize,
    pub record_pfn: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enable: true,
            explicit: true,
            monitor: true,
            max_bytes: 1 << 30,
            max_count: 4096,
            record_pfn: false,
        }
    }
}

/// Flags fi_mr_reg* accept.
const REG_FLAGS: u64 = ffi::FI_RMA_EVENT as u64 | crate::ext::OXMR_MR_PHYS_FALLBACK;

impl MrDomain {
    pub fn new(mr_mode: i32, pinner: Pinner, cc: CacheConfig) -> Self {
        let cache =
            if cc.enable && cc.monitor { cache::Cache::new(cc.max_bytes, cc.max_count, cc.record_pfn) } else { None };
        MrDomain {
            registry: Registry::new(),
            pinner,
            stats: Stats::default(),
            mr_mode,
            cache,
            cache_explicit: cc.explicit,
            record_pfn: cc.record_pfn,
        }
    }

    fn mode(&self, bit: u32) -> bool {
        self.mr_mode & bit as i32 != 0
    }

    /// Register: the region, published under its key (with no handle:
    /// this layer's tests and registrations no application holds).
    pub fn register(&self, mut req: Request) -> Result<Arc<Region>> {
        Ok(self.register_with(&mut req, registry::no_fid(), || Ok(()))?)
    }

    /// Register, the region carrying the application's handle (`fid`, the
    /// `struct fid` of its `fid_mr`; the rest of it, key and `mem_desc`,
    /// written here) and its owner's `tail` (made only for a new region: a
    /// parked one keeps its own, see `park`): one allocation, published
    /// under its key.
    pub fn register_with<T: registry::Tail>(
        &self,
        req: &mut Request,
        fid: ffi::fid,
        tail: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<Region<T>>> {
        let r = self.register_inner(req, fid, tail);
        if let Err(e) = &r {
            self.stats.count_failure(*e);
        }
        r
    }

    /// Successful registrations so far (each ends with its key's
    /// insertion into the registry, which counts them under its lock).
    pub fn registrations(&self) -> u64 {
        self.registry.inserted()
    }

    fn register_inner<T: registry::Tail>(
        &self,
        req: &mut Request,
        fid: ffi::fid,
        tail: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<Region<T>>> {
        if req.access & !ACCESS_BITS != 0 {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_mr_reg: unknown access bits {:#x}; use FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE",
                req.access & !ACCESS_BITS
            ));
        }
        if req.flags & !REG_FLAGS != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_mr_reg: flags {:#x} not supported", req.flags & !REG_FLAGS));
        }
        if req.iface != ffi::FI_HMEM_SYSTEM {
            return Err(fail!(
                ffi::FI_ENOSYS,
                "fi_mr_regattr: iface {} is not supported yet; oxmr registers FI_HMEM_SYSTEM memory",
                req.iface
            ));
        }
        // A dma-buf is mapped first: its mapping is the registered memory.
        let mut mapped = None;
        let mut dmabuf_iova = None;
        if let Some(d) = req.dmabuf.take() {
            if !req.iovs.is_empty() {
                return Err(fail!(
                    ffi::FI_EINVAL,
                    "fi_mr_regattr: FI_MR_DMABUF with an iov as well; pass one or the other"
                ));
            }
            let m = dmabuf::map(dmabuf::open(d.fd)?, d.offset, d.len, pin::needs_write(req.access))?;
            req.iovs = Ranges::One(m.data());
            dmabuf_iova = Some(d.base_addr.checked_add(d.offset).ok_or_else(|| {
                fail!(
                    ffi::FI_EINVAL,
                    "fi_mr_regattr: dma-buf base_addr {:#x} + offset {:#x} overflows",
                    d.base_addr,
                    d.offset
                )
            })?);
            mapped = Some(m);
        }
        self.register_checked(req, mapped, dmabuf_iova, fid, tail)
    }

    /// Register what `register_inner` decoded: `mapped` a dma-buf's
    /// mapping (then `iovs` is its data, and `dmabuf_iova` where peers
    /// address it under FI_MR_VIRT_ADDR).
    fn register_checked<T: registry::Tail>(
        &self,
        req: &mut Request,
        mapped: Option<dmabuf::Mapped>,
        dmabuf_iova: Option<u64>,
        fid: ffi::fid,
        tail: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<Region<T>>> {
        if req.iovs.is_empty() || req.iovs.len() > MR_IOV_LIMIT {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_mr_regv: {} iovs; oxmr takes 1 to {} (mr_iov_limit)",
                req.iovs.len(),
                MR_IOV_LIMIT
            ));
        }
        let mut len = 0usize;
        for &(a, l) in req.iovs.iter() {
            if l > 0 && a == 0 {
                return Err(fail!(ffi::FI_EINVAL, "fi_mr_reg: NULL buffer with length {l}"));
            }
            // (Pages are pinned and charged whole: the page-rounded end
            // must not wrap either.)
            if a.checked_add(l).and_then(|e| e.checked_next_multiple_of(4096)).is_none() {
                return Err(fail!(ffi::FI_EINVAL, "fi_mr_reg: buffer {a:#x} + {l} wraps around the address space"));
            }
            len = len.checked_add(l).ok_or_else(|| fail!(ffi::FI_EINVAL, "fi_mr_regv: total length overflows"))?;
        }
        // (A provider key is drawn below: a parked registration's under
        // the cache's lock, which it takes anyway, from the key pool the
        // cache holds; any other's from the registry's own pool.)
        let user_key = if self.mode(ffi::FI_MR_PROV_KEY) {
            None
        } else {
            if req.requested_key == ffi::FI_KEY_NOTAVAIL {
                return Err(fail!(ffi::FI_EKEYREJECTED, "fi_mr_reg: FI_KEY_NOTAVAIL cannot be a key"));
            }
            if self.registry.contains(req.requested_key) {
                return Err(fail!(
                    ffi::FI_ENOKEY,
                    "fi_mr_reg: key {:#x} is already in use in this domain; close that MR or request another key",
                    req.requested_key
                ));
            }
            Some(req.requested_key)
        };
        let iova =
            if self.mode(ffi::FI_MR_VIRT_ADDR) { dmabuf_iova.unwrap_or(req.iovs[0].0 as u64) } else { req.offset };
        if iova.checked_add(len as u64).is_none() {
            return Err(fail!(ffi::FI_EINVAL, "fi_mr_reg: offset {iova:#x} + length {len} overflows"));
        }
        // Every registration the monitor can watch is tracked while open
        // (revoked if its memory is unmapped or moved), from the log
        // position before its pin (or, for a cache hit, before the lookup).
        let mut watch = None;
        // (Under a simulated sysfs tree device files are ordinary files,
        // which pinning would take: identity first. With /sys, the
        // kernel's refusal to pin device memory leads to it.)
        let sim = match self.pinner.sysfs.simulated && mapped.is_none() {
            true => device::identify(&self.pinner.sysfs, &req.iovs)?,
            false => None,
        };
        // A closed registration of exactly this range and access, parked
        // whole (`park`), is handed out again under the new key (as the
        // type it was parked as: a domain parks its one tail type).
        if let (Some(c), &[(a, l)], None, None) = (&self.cache, &*req.iovs, &mapped, &sim) {
            if self.cache_explicit && l > 0 && req.flags & crate::ext::OXMR_MR_PHYS_FALLBACK == 0 {
                let draw = |p: &mut registry::KeyPool| user_key.unwrap_or_else(|| self.registry.draw(p));
                if let Some((r, keyed, key)) = c.unpark::<T>(a, l, req.access, draw) {
                    return self.rekey(r, keyed, fid, key, iova);
                }
            }
        }
        let key = user_key.unwrap_or_else(|| self.registry.new_key());
        let pin = match (&self.cache, &*req.iovs, mapped, sim) {
            (_, _, Some(m), _) => Pin::Phys(Box::new(phys::PhysPin::dmabuf(m, req.access)?)),
            (_, _, None, Some(id)) => Pin::Phys(Box::new(phys::PhysPin::identified(&req.iovs, req.access, id)?)),
            _ if req.flags & crate::ext::OXMR_MR_PHYS_FALLBACK != 0 => self.pinner.phys_only(&req.iovs, req.access)?,
            (Some(c), &[(a, l)], None, None) if self.cache_explicit && l > 0 => match c.hit(a, l, req.access) {
                Some(r) => Pin::Cached(r),
                None => {
                    let (pin, since) = c.get(&self.pinner, a, l, req.access)?;
                    watch = since;
                    pin
                }
            },
            _ => {
                if let Some(c) = &self.cache {
                    c.stats.uncached.fetch_add(1, Ordering::Relaxed);
                    watch = c.watch_ranges(&req.iovs);
                }
                self.pin_evicting(&req.iovs, req.access)?
            }
        };
        let phys = pin.phys().is_some();
        let mmio = pin.phys().and_then(|p| p.device.as_ref()).is_some_and(device::Device::is_mmio);
        let pfn0 = match pin.cache_entry() {
            Some(e) => e.pfn_at(req.iovs[0].0),
            None if self.record_pfn && len > 0 => phys::pagemap_pfns(req.iovs[0].0, 1).first().copied().unwrap_or(0),
            None => 0,
        };
        let mut region = Arc::new(Region {
            face: registry::face(fid, key),
            key,
            iovs: std::mem::take(&mut req.iovs),
            len,
            iova,
            access: req.access,
            enabled: AtomicBool::new(!self.mode(ffi::FI_MR_ENDPOINT)),
            cached: match &pin {
                Pin::Cached(c) => Some(c.entry.clone()),
                _ => None,
            },
            refreshed: AtomicBool::new(false),
            revoked: std::sync::OnceLock::new(),
            denied: std::sync::OnceLock::new(),
            pin: std::sync::Mutex::new(pin),
            pfn0,
            phys,
            mmio,
            cntr: crate::sys::SpinLock::new(None),
            tail: tail()?,
        });
        // (Ours alone until inserted below.)
        let me = Arc::as_ptr(&region) as *mut std::ffi::c_void;
        if let Some(r) = Arc::get_mut(&mut region) {
            r.face.0.mem_desc = me;
        }
        if let (Some(c), Some(since)) = (&self.cache, watch) {
            c.track_live(&*region, since);
        }
        self.registry
            .insert(region.clone())
            .map_err(|_| fail!(ffi::FI_ENOKEY, "fi_mr_reg: key {key:#x} was taken by a concurrent registration"))?;
        Ok(region)
    }

    /// A parked registration (`park`), taken out of the park with both its
    /// references (`handle`, the application's, and `keyed`, the
    /// registry's), handed out again as a new one: the application's handle
    /// `fid`, key `key`, address `iova`, disabled under FI_MR_ENDPOINT until
    /// fi_mr_enable, and published under its key. No reference count
    /// changes: the two references a live registration has are the two
    /// that were parked.
    #[inline(always)]
    fn rekey<T: registry::Tail>(
        &self,
        r: Arc<Region<T>>,
        keyed: Arc<Region>,
        fid: ffi::fid,
        key: u64,
        iova: u64,
    ) -> Result<Arc<Region<T>>> {
        let me = Arc::as_ptr(&r) as *mut Region<T>;
        // SAFETY: a parked pair is every reference to its region (`park`
        // parked it only when its two were the only strong ones, and no
        // Weak<Region> is ever made), taken out of the park under its lock:
        // nothing else can reach the region while this borrow lives.
        let m = unsafe { &mut *me };
        m.face = registry::face(fid, key);
        m.face.0.mem_desc = me as *mut std::ffi::c_void;
        m.key = key;
        m.iova = iova;
        *m.enabled.get_mut() = !self.mode(ffi::FI_MR_ENDPOINT);
        match self.registry.insert(keyed) {
            Ok(()) => Ok(r),
            Err(()) => Err(fail!(ffi::FI_ENOKEY, "fi_mr_reg: key {key:#x} was taken by a concurrent registration")),
        }
    }

    /// Whether a device registration's mapping is still the one registered
    /// (always true for other registrations). The first failure removes
    /// the key for good and logs one line.
    pub fn phys_live(&self, r: &Region) -> bool {
        if !r.phys {
            return true;
        }
        let pin = r.pin.lock_ok();
        let Some(p) = pin.phys() else { return true };
        let (live, newly) = p.check_live();
        drop(pin);
        if newly {
            self.registry.remove_region(r);
            tracing::warn!(
                "registration {:#x} revoked: its device mapping changed or went away (munmap, mremap or a new mapping at {:#x}); register the new mapping",
                r.key,
                r.iovs.first().map_or(0, |x| x.0)
            );
        }
        live
    }

    /// Apply what the memory monitor saw since the last look (cheap when
    /// it saw nothing): registrations whose memory was unmapped or moved
    /// are revoked. Called before remote accesses are checked.
    pub fn refresh(&self) {
        if let Some(c) = &self.cache {
            c.refresh();
        }
    }

    /// Close: the key stops validating now; the pin goes with the last user.
    /// Only `r`'s own key entry goes: a device registration revoked earlier
    /// may have seen its key handed to a newer registration.
    pub fn deregister(&self, r: &Region) -> Option<Arc<Region>> {
        self.registry.remove_region(r)
    }

    /// Empty the cache's park (`park`): domain close, whose parked
    /// registrations hold the domain.
    pub fn unpark_all(&self) {
        if let Some(c) = &self.cache {
            c.unpark_all();
        }
    }

    /// A pin outside the cache; when the memlock budget is short
    /// (`-FI_ENOMEM`), the cache's unused pins are given back and the pin
    /// tried once more, as the cache does for its own misses.
    fn pin_evicting(&self, iovs: &[(usize, usize)], access: u64) -> Result<Pin> {
        match self.pinner.pin(iovs, access) {
            Err(e) if e.code() == ffi::FI_ENOMEM && self.cache.is_some() => {
                if let Some(c) = &self.cache {
                    c.flush();
                }
                self.pinner.pin(iovs, access)
            }
            r => r,
        }
    }

    /// fi_mr_refresh (FI_MR_MMU_NOTIFY): pin the pages mapped at `r`'s
    /// ranges now. The registration then speaks for that memory: its
    /// revocation (of the memory before) is lifted, and it is tracked
    /// again from before the new pin, so that an unmap or remap of the new
    /// memory revokes it in turn.
    pub fn refresh_region(&self, r: &Region) -> Result<()> {
        // A device registration (physical-address fallback) is checked
        // against its mapping on every access and revoked for good when
        // that changes; a registration of ordinary memory never becomes
        // one (its accesses would skip that check): both take a new
        // registration instead.
        if r.phys {
            return Err(fail!(
                ffi::FI_EKEYREJECTED,
                "fi_mr_refresh: key {:#x} is a device registration (physical-address fallback), which is not refreshed; register the new mapping",
                r.key
            ));
        }
        let since = self.cache.as_ref().and_then(|c| c.watch_ranges(&r.iovs));
        let new = self.pin_evicting(&r.iovs, r.access)?;
        if new.phys().is_some() {
            return Err(fail!(
                ffi::FI_EFAULT,
                "fi_mr_refresh: what is mapped at key {:#x}'s range now is device memory; register it anew",
                r.key
            ));
        }
        let old = std::mem::replace(&mut *r.pin.lock_ok(), new);
        // (A cached pin goes back to the cache: not under the lock above.)
        drop(old);
        r.refreshed.store(true, Ordering::Release);
        if let Some(f) = r.revoked.get() {
            f.store(false, Ordering::Release);
        }
        if let (Some(c), Some(since)) = (&self.cache, since) {
            // (After the flag is lifted: an unmap since `since` revokes.)
            c.track_live(r, since);
        }
        Ok(())
    }
}

/// fi_close of a registration whose key is already removed (`deregister`,
/// which handed back the registry's reference, `keyed`): a plain cache hit
/// that nothing else holds (no access in flight) is parked whole in its
/// cache for the next registration of its range and access
/// (`cache::Parked`), with both its references (so that its reuse,
/// `rekey`, changes no count: a locked instruction costs about 7 ns
/// on this project's VM, a ninth of a hit), its owner's part reset by `reset` (bindings
/// go); anything else is dropped, its pin going back to the cache's rules.
#[inline(always)]
pub fn park<T: registry::Tail>(r: Arc<Region<T>>, keyed: Option<Arc<Region>>, reset: impl FnOnce(&mut T)) {
    let Some(keyed) = keyed.filter(|k| std::ptr::addr_eq(Arc::as_ptr(k), Arc::as_ptr(&r))) else { return };
    // Nothing else holds it: its only strong references are these two,
    // and no Weak<Region> is ever made (none could be upgraded). (Plain
    // loads: an in-flight access that let go did so with a release
    // decrement, which the fence orders before what follows.)
    if Arc::strong_count(&r) != 2 || Arc::weak_count(&r) != 0 {
        return;
    }
    std::sync::atomic::fence(Ordering::Acquire);
    // SAFETY: the two references held here are all there are (checked
    // above); the region is out of the registry and its handle closed, so
    // nothing can make another while this borrow lives.
    let m = unsafe { &mut *(Arc::as_ptr(&r) as *mut Region<T>) };
    if m.phys || *m.refreshed.get_mut() || m.revoked.get().is_some() || m.denied.get().is_some() {
        return;
    }
    // (A cached pin is of one range: `Cache::park` takes it from the region.)
    let Pin::Cached(c) = m.pin.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner) else { return };
    let cache = Arc::as_ptr(&c.cache);
    reset(&mut m.tail);
    *m.cntr.get_mut() = None;
    // The application's handle is closed: a call on it (a second close, a
    // bind after close) finds no oxmr MR there and gets -FI_EINVAL, not
    // the parked object (`rekey` writes the whole handle anew).
    m.face = registry::face(registry::no_fid(), m.key);
    // SAFETY: the cache outlives this call without a count of its own: the
    // region moved into its park holds it (through its pin), and `park`
    // uses it only while it holds the region or the park's lock; refused,
    // the region comes back here and holds it still.
    drop(unsafe { &*cache }.park(r, keyed));
}

#[cfg(test)]
mod peer_tests {
    use super::account::{Account, CapSource};
    use super::device::tests::{Tree, BAR0};
    use super::device::Device;
    use super::pin::PinMode;
    use super::*;

    fn domain(sysfs: device::Sysfs) -> MrDomain {
        let mut pinner = Pinner::new(PinMode::Uring, Account::new(None, CapSource::Variable));
        pinner.sysfs = sysfs;
        let mr_mode = (ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY) as i32;
        MrDomain::new(mr_mode, pinner, CacheConfig::default())
    }

    fn req(a: usize, l: usize, access: u64) -> Request {
        Request { iovs: Ranges::One((a, l)), access, ..Default::default() }
    }

    const RW: u64 = (ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64;

    #[test]
    fn a_bar_registers_without_opt_in_and_dies_with_its_mapping() {
        let t = Tree::new("reg");
        let d = domain(t.sysfs());
        let m = t.map("resource0", BAR0, 0x4000);
        let r = d.register(req(m.0 + 0x1000, 0x2000, RW)).unwrap();
        assert!(r.phys && r.mmio, "a BAR registration is a device registration, MMIO");
        {
            let pin = r.pin.lock_ok();
            let p = pin.phys().unwrap();
            assert!(matches!(p.device, Some(Device::Bar { bar: 0, offset: 0x1000, .. })));
            assert_eq!(p.runs, Some(vec![(BAR0 + 0x1000, 0x2000)]));
        }
        assert!(phys::is_device(m.0 + 0x1000, 1) && !phys::is_device(m.0, 0x1000), "only the registered part");
        assert!(d.registry.check(r.key, r.iova, 8, RW).is_ok());
        assert_eq!(d.registry.check(r.key, r.iova + 2, 8, RW).err(), Some(registry::AccessError::Misaligned));
        assert!(d.phys_live(&r));
        // With /sys as the root, the same file is an ordinary file: pinned.
        let plain = domain(device::Sysfs::default());
        let p = plain.register(req(m.0 + 0x1000, 0x2000, RW)).unwrap();
        assert!(!p.phys);
        drop(p);
        drop(m);
        assert!(!d.phys_live(&r), "munmap revokes it");
        assert_eq!(d.registry.check(r.key, r.iova, 8, RW).err(), Some(registry::AccessError::UnknownKey));
    }

    #[test]
    fn a_dmabuf_registration_keeps_its_own_reference_and_mapping() {
        let d = domain(device::Sysfs::default());
        let bytes: Vec<u8> = (0..2 * 4096).map(|i| (i * 7 % 253) as u8).collect();
        // SAFETY: a new memfd, standing in for a dma-buf (no exporter
        // exists on these machines): the magic check is what it skips.
        let fd = unsafe { libc::memfd_create(c"oxmr-dmabuf-standin".as_ptr(), libc::MFD_CLOEXEC) };
        // SAFETY: writing our memfd.
        assert_eq!(unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) }, bytes.len() as isize);
        let buf = dmabuf::stand_in(fd).unwrap();
        let ino = buf.ino;
        let m = dmabuf::map(buf, 100, 4000, true).unwrap();
        let mut r = req(0, 0, RW);
        r.iovs = Ranges::One(m.data());
        let r = d.register_checked(&mut r, Some(m), Some(0x5000_0000 + 100), registry::no_fid(), || Ok(())).unwrap();
        assert_eq!(r.iova, 0x5000_0064, "peers address it at base_addr + offset");
        // The caller closes its fd, and the number is reused for another
        // buffer: the registration still speaks for the first.
        let other: Vec<u8> = vec![0xAB; 8192];
        // SAFETY: a second memfd, duplicated onto the first's number.
        unsafe {
            let fd2 = libc::memfd_create(c"oxmr-other".as_ptr(), libc::MFD_CLOEXEC);
            libc::write(fd2, other.as_ptr().cast(), other.len());
            libc::close(fd);
            assert_eq!(libc::dup2(fd2, fd), fd);
            libc::close(fd2);
        }
        let g = d.registry.check(r.key, 0x5000_0064 + 8, 16, RW).unwrap();
        let mut seen = Vec::new();
        // SAFETY: inside the granted registration, held by `g`.
        unsafe { local::gather(&local::slice(&g.region.iovs, g.offset, 16), &mut seen) };
        assert_eq!(seen, &bytes[108..124]);
        {
            let pin = r.pin.lock_ok();
            assert!(
                matches!(&pin.phys().unwrap().device, Some(Device::DmaBuf { ino: i, offset: 100, .. }) if *i == ino)
            );
        }
        // A write lands in the buffer (seen through a fresh mapping of the
        // first memfd: /proc/self/fd of the registration's reference).
        // SAFETY: inside the granted registration.
        unsafe { local::scatter(&local::slice(&g.region.iovs, g.offset, 4), &[1, 2, 3, 4]) };
        let (a, _) = r.iovs[0];
        // SAFETY: the registration's own mapping, alive while `r` is.
        assert_eq!(unsafe { std::slice::from_raw_parts((a + 8) as *const u8, 4) }, &[1, 2, 3, 4]);
        // (The fd number now names the other buffer; refused as a memfd.)
        assert_eq!(dmabuf::open(fd).err().map(|e| e.code()), Some(ffi::FI_EINVAL));
        d.deregister(&*r);
        drop(g);
        drop(r);
        assert!(!phys::is_device(a, 1), "closing it drops its mapping");
        // SAFETY: the test's fd.
        unsafe { libc::close(fd) };
    }
}
