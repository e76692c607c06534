//! The physical-address fallback: registration of device memory that a
//! driver mapped with `remap_pfn_range` (VM_PFNMAP|VM_IO), which no pinning
//! registration can take (get_user_pages refuses it; io_uring and
//! process_vm_readv fail with EFAULT).
//!
//! Safety rules (each enforced here, in this order):
//! - opt-in only (`FI_OXMR_MR_PHYS_FALLBACK=1` or the `OXMR_MR_PHYS_FALLBACK`
//!   flag of fi_mr_regattr); the pinner asks this room only after pinning
//!   failed and /proc/self/smaps shows device memory in the range;
//! - every byte of the range lies, now, in a `pf`/`io` mapping of this
//!   process: a hole, ordinary anonymous or file memory, or secret memory
//!   anywhere in the range refuses the whole registration with -FI_EFAULT;
//! - every page is proven readable, and for write access writable, through
//!   the kernel's fault-tolerant user copies (a pipe), so a page the driver
//!   refuses (perf's read-only data pages raise SIGBUS on a store) is an
//!   error at registration, never a signal in the middle of a transfer;
//! - the registration dies with its mapping: each access first asks the
//!   kernel (PROCMAP_QUERY, or /proc/self/maps on kernels before 6.11) for
//!   the mapping at each recorded start and compares start, end, offset,
//!   inode and permissions; any difference (munmap, MAP_FIXED over it,
//!   mremap, a new mapping of something else) revokes the key for good.
//!   userfaultfd cannot watch PFN mappings (UFFDIO_REGISTER returns EINVAL
//!   for them even with WP_ASYNC, seen on 6.18), hence the check per access.
//!   What this cannot tell apart: a new mapping of the *same* object at the
//!   same address, offset and size (for a device file that is the same
//!   device memory; for anon-inode objects such as perf rings, all of which
//!   share one inode, it may not be); docs/registration.md says so.
//!
//! Physical addresses come from /proc/self/pagemap, where the kernel shows
//! them (CAP_SYS_ADMIN). The kernel's page walk skips VM_PFNMAP mappings
//! and reports them as holes (seen on 6.18: not even the present bit), so
//! for remap_pfn_range memory they are unavailable whatever the privilege;
//! the query then says "unavailable", never zeros.
//!
//! The data path reaches such memory only through the owning process's own
//! mapping ([`copy_to_device`], [`copy_from_device`]): naturally aligned
//! accesses, eight bytes wide except at an unaligned head and tail.

use crate::sys::{LockExt, RwLockExt};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use oxmr_ffi as ffi;

use super::device::{Caching, Device, Identified};
use super::maps::{self, Kind, Mapping};
use super::pin::needs_write;
use crate::error::Result;
use crate::fail;

const PAGE: usize = 4096;

/// What a mapping is, for revocation: the kernel's answer must not change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmaId {
    pub start: usize,
    pub end: usize,
    pub offset: u64,
    /// The mapped file's device (`major << 32 | minor`): two device files
    /// on different filesystems may share an inode number.
    pub dev: u64,
    pub inode: u64,
    pub read: bool,
    pub write: bool,
    pub shared: bool,
}

impl VmaId {
    fn of(m: &Mapping) -> Self {
        VmaId {
            start: m.start,
            end: m.end,
            offset: m.offset,
            dev: m.dev,
            inode: m.inode,
            read: m.read,
            write: m.write,
            shared: m.shared,
        }
    }
}

/// `struct procmap_query` (linux/fs.h, 6.11+).
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}
const _: () = assert!(size_of::<ProcmapQuery>() == 104);
/// `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: u64 = 0xC068_6611;
const PROCMAP_QUERY_VMA_READABLE: u64 = 1;
const PROCMAP_QUERY_VMA_WRITABLE: u64 = 2;
const PROCMAP_QUERY_VMA_SHARED: u64 = 8;

/// The process's /proc/self/maps descriptor for PROCMAP_QUERY (reopened in
/// a forked child: the descriptor names the mm it was opened in). `None`
/// inside once the kernel has said it has no PROCMAP_QUERY.
static MAPS_FD: Mutex<Option<(u32, Option<OwnedFd>)>> = Mutex::new(None);

/// The mapping that contains `addr` now, or `None` where nothing is mapped.
pub fn vma_at(addr: usize) -> io::Result<Option<VmaId>> {
    let pid = std::process::id();
    let mut g = MAPS_FD.lock_ok();
    if g.as_ref().is_none_or(|(p, _)| *p != pid) {
        // (A failed open, EMFILE say, is not remembered: only a kernel
        // without PROCMAP_QUERY sends us to the slow path for good.)
        let fd = std::fs::File::open("/proc/self/maps").map(OwnedFd::from)?;
        *g = Some((pid, Some(fd)));
    }
    if let Some((_, Some(fd))) = g.as_ref() {
        let mut q =
            ProcmapQuery { size: size_of::<ProcmapQuery>() as u64, query_addr: addr as u64, ..Default::default() };
        // SAFETY: PROCMAP_QUERY reads and writes one procmap_query; no name
        // or build-id buffers are passed (their sizes are zero).
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), PROCMAP_QUERY as _, &mut q as *mut ProcmapQuery) };
        if r == 0 {
            return Ok(Some(VmaId {
                start: q.vma_start as usize,
                end: q.vma_end as usize,
                offset: q.vma_offset,
                dev: (q.dev_major as u64) << 32 | q.dev_minor as u64,
                inode: q.inode,
                read: q.vma_flags & PROCMAP_QUERY_VMA_READABLE != 0,
                write: q.vma_flags & PROCMAP_QUERY_VMA_WRITABLE != 0,
                shared: q.vma_flags & PROCMAP_QUERY_VMA_SHARED != 0,
            }));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOENT) => return Ok(None),
            Some(libc::ENOTTY) | Some(libc::EINVAL) => {
                tracing::debug!("PROCMAP_QUERY unavailable ({e}); device registrations check /proc/self/maps");
                *g = Some((pid, None));
            }
            _ => return Err(e),
        }
    }
    drop(g);
    Ok(maps::mappings_in(addr, 1)?.first().map(VmaId::of))
}

/// Live device ranges of this process, so that every copy oxmr makes of
/// its own memory can tell device memory from RAM (one atomic load when
/// there is none).
/// (address, length, fenced) of every live device registration's pieces:
/// `fenced` where the memory may be write-combining, so that copies into
/// it end with a store fence.
static LIVE: RwLock<Vec<(usize, usize, bool)>> = RwLock::new(Vec::new());
static LIVE_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Whether any byte of [addr, addr+len) lies in a device registration.
pub fn is_device(addr: usize, len: usize) -> bool {
    device_at(addr, len).is_some()
}

/// `Some(fenced)` when any byte of [addr, addr+len) lies in a device
/// registration (fenced: some of it may be write-combining).
pub fn device_at(addr: usize, len: usize) -> Option<bool> {
    if LIVE_COUNT.load(Ordering::Acquire) == 0 || len == 0 {
        return None;
    }
    let end = addr.saturating_add(len);
    let live = LIVE.read_ok();
    let mut hit = live.iter().filter(|&&(a, l, _)| a < end && addr < a + l).peekable();
    hit.peek()?;
    Some(hit.any(|&(_, _, f)| f))
}

/// What the range is, as far as the fallback cares.
pub enum Class {
    /// No device memory in it (the first part, described).
    NoDevice(String),
    /// Every byte is device memory, in these mappings.
    AllDevice(Vec<Mapping>),
    /// Device memory next to something else (described).
    Mixed(String),
}

/// Classify `iovs` from /proc/self/smaps.
pub fn classify(iovs: &[(usize, usize)]) -> Result<Class> {
    let mut all = Vec::new();
    let mut device = false;
    let mut other = None;
    for &(a, l) in iovs {
        if l == 0 {
            continue;
        }
        let m = maps::smaps_in(a, l).map_err(|e| fail!(ffi::FI_EIO, "cannot read /proc/self/smaps: {e}"))?;
        if let Some((s, e)) = maps::first_gap(&m, a, l) {
            other.get_or_insert(format!("{s:#x}-{e:#x} is not mapped"));
        }
        for x in m {
            if x.kind() == Kind::DevicePfn {
                device = true;
                all.push(x);
            } else {
                other.get_or_insert(format!("{:#x}-{:#x} is {}", x.start, x.end, x.describe()));
            }
        }
    }
    Ok(match (device, other) {
        (false, o) => Class::NoDevice(o.unwrap_or_else(|| "the range is empty".into())),
        (true, None) => Class::AllDevice(all),
        (true, Some(o)) => Class::Mixed(o),
    })
}

/// A registration by physical address.
pub struct PhysPin {
    /// The mappings it covers, as they were at registration.
    pub vmas: Vec<VmaId>,
    /// The registered (address, length) pieces.
    pub ranges: Vec<(usize, usize)>,
    /// (physical address, length) runs, merged where contiguous; `None`
    /// when /proc/self/pagemap does not show them.
    pub runs: Option<Vec<(u64, u64)>>,
    /// Whose memory it is, where that is proven (peer-direct: a BAR, a
    /// VFIO region, P2PDMA memory, a dma-buf); `None` for the fallback.
    pub device: Option<Device>,
    /// The runs come from the identity (a BAR's offset is its physical
    /// address), not from pagemap: the mapping's identity is their check.
    runs_fixed: bool,
    /// A dma-buf's mapping, made and owned by the registration.
    pub dmabuf: Option<super::dmabuf::Mapped>,
    revoked: AtomicBool,
}

/// A pipe for probing pages through the kernel's fault-tolerant copies.
fn probe_pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut p = [0i32; 2];
    // SAFETY: pipe2 writes two fds into `p`.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(fail!(
            ffi::FI_EIO,
            "fi_mr_reg: pipe2 for probing device memory failed: {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: two new fds owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) })
}

/// Prove every page of [a, a+l) readable and, with `write`, writable: the
/// kernel reads a word of each page into a pipe (copy_from_user) and, for
/// writes, stores the same bytes back (copy_to_user). A page that faults
/// gives EFAULT from the syscall instead of a signal.
fn probe(a: usize, l: usize, write: bool) -> Result<()> {
    let (rd, wr) = probe_pipe()?;
    let end = a + l;
    let mut page = a & !(PAGE - 1);
    while page < end {
        let q = page.max(a);
        let n = (page + PAGE).min(end).saturating_sub(q).min(8);
        // SAFETY: the kernel reads `n` bytes at `q` and reports a fault as EFAULT.
        if unsafe { libc::write(wr.as_raw_fd(), q as *const libc::c_void, n) } != n as isize {
            return Err(fail!(
                ffi::FI_EFAULT,
                "fi_mr_reg: device memory at {q:#x} (in {a:#x}+{l}) cannot be read ({}); register only memory the driver lets this process read",
                io::Error::last_os_error()
            ));
        }
        // SAFETY: the kernel writes back the `n` bytes it just read, or
        // reports a fault as EFAULT; without `write` they go to a buffer.
        let got = unsafe {
            if write {
                libc::read(rd.as_raw_fd(), q as *mut libc::c_void, n)
            } else {
                let mut sink = [0u8; 8];
                libc::read(rd.as_raw_fd(), sink.as_mut_ptr().cast(), n)
            }
        };
        if got != n as isize {
            return Err(fail!(
                ffi::FI_EACCES,
                "fi_mr_reg: device memory at {q:#x} (page {} of {a:#x}+{l}) refuses writes ({}); register it without FI_RECV, FI_READ and FI_REMOTE_WRITE",
                (page - (a & !(PAGE - 1))) / PAGE,
                io::Error::last_os_error()
            ));
        }
        page += PAGE;
    }
    Ok(())
}

/// Merge per-page frame numbers of [addr, addr+len) into physical runs;
/// `None` when any page shows no frame (hidden, or not walked).
pub fn runs_of(addr: usize, len: usize, pfns: &[u64]) -> Option<Vec<(u64, u64)>> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let first = addr & !(PAGE - 1);
    let end = addr + len;
    for (i, &pfn) in pfns.iter().enumerate() {
        if pfn == 0 {
            return None;
        }
        let ps = first + i * PAGE;
        let lo = ps.max(addr);
        let hi = (ps + PAGE).min(end);
        if lo >= hi {
            continue;
        }
        let pa = pfn * PAGE as u64 + (lo - ps) as u64;
        let n = (hi - lo) as u64;
        match runs.last_mut() {
            Some(last) if last.0 + last.1 == pa => last.1 += n,
            _ => runs.push((pa, n)),
        }
    }
    Some(runs)
}

/// The page frame numbers backing [addr, addr+len) now (0 where absent or
/// hidden: PFNs are shown to CAP_SYS_ADMIN only), from one read of
/// /proc/self/pagemap.
pub fn pagemap_pfns(addr: usize, len: usize) -> Vec<u64> {
    use std::os::unix::fs::FileExt;
    let first = addr / 4096;
    let pages = (addr + len).div_ceil(4096) - first;
    let Ok(f) = std::fs::File::open("/proc/self/pagemap") else { return vec![0; pages] };
    let mut b = vec![0u8; pages * 8];
    if f.read_exact_at(&mut b, (first * 8) as u64).is_err() {
        return vec![0; pages];
    }
    b.chunks_exact(8)
        .map(|c| {
            let v = u64::from_ne_bytes(c.try_into().unwrap_or_default());
            if v >> 63 == 1 {
                v & ((1 << 55) - 1)
            } else {
                0
            }
        })
        .collect()
}

/// The physical runs of `ranges` from pagemap, `None` where hidden.
fn pagemap_runs(ranges: &[(usize, usize)]) -> Option<Vec<(u64, u64)>> {
    let mut all = Vec::new();
    for &(a, l) in ranges {
        all.extend(runs_of(a, l, &pagemap_pfns(a, l))?);
    }
    Some(all)
}

impl PhysPin {
    /// Register `iovs` (every byte device memory, per `mappings`) for `access`.
    pub fn new(iovs: &[(usize, usize)], access: u64, mappings: &[Mapping]) -> Result<PhysPin> {
        let write = needs_write(access);
        for x in mappings {
            if !x.read {
                return Err(fail!(
                    ffi::FI_EACCES,
                    "fi_mr_reg: device mapping {:#x}-{:#x} is not readable; map it with PROT_READ",
                    x.start,
                    x.end
                ));
            }
            if write && !x.write {
                return Err(fail!(
                    ffi::FI_EACCES,
                    "fi_mr_reg: access {access:#x} needs writable memory but device mapping {:#x}-{:#x} is read-only",
                    x.start,
                    x.end
                ));
            }
        }
        let ranges: Vec<(usize, usize)> = iovs.iter().copied().filter(|&(_, l)| l > 0).collect();
        for &(a, l) in &ranges {
            probe(a, l, write)?;
        }
        let runs = pagemap_runs(&ranges);
        Ok(PhysPin::publish(ranges, mappings, runs, false, None, None))
    }

    /// Register device memory whose identity is proven (`device::identify`),
    /// without opt-in. MMIO (a BAR, a VFIO region) is not probed: the
    /// kernel's probe copies are byte copies that may touch device
    /// registers; such mappings are populated whole at mmap time
    /// (io_remap_pfn_range), so their permissions say all there is.
    pub fn identified(iovs: &[(usize, usize)], access: u64, id: Identified) -> Result<PhysPin> {
        let write = needs_write(access);
        let what = id.device.describe();
        if let Some(x) = id.mappings.iter().find(|x| !x.read || (write && !x.write)) {
            return Err(fail!(
                ffi::FI_EACCES,
                "fi_mr_reg: access {access:#x} needs {} memory, but the mapping {:#x}-{:#x} of {what} is {}; map it with PROT_READ{}",
                if write { "readable and writable" } else { "readable" },
                x.start,
                x.end,
                if x.read { "read-only" } else { "not readable" },
                if write { "|PROT_WRITE" } else { "" }
            ));
        }
        let ranges: Vec<(usize, usize)> = iovs.iter().copied().filter(|&(_, l)| l > 0).collect();
        if !id.device.is_mmio() {
            for &(a, l) in &ranges {
                probe(a, l, write)?;
            }
        }
        let (runs, fixed) = match id.runs {
            Some(r) => (Some(r), true),
            None => (pagemap_runs(&ranges), false),
        };
        tracing::info!(
            "fi_mr_reg: {} bytes at {:#x} are {what}: registered as device memory (not pinned; served through this process's mapping, revoked with it)",
            ranges.iter().map(|r| r.1).sum::<usize>(),
            ranges.first().map_or(0, |r| r.0)
        );
        Ok(PhysPin::publish(ranges, &id.mappings, runs, fixed, Some(id.device), None))
    }

    /// Register a dma-buf through the mapping oxmr made of it.
    pub fn dmabuf(m: super::dmabuf::Mapped, access: u64) -> Result<PhysPin> {
        let (a, l) = m.data();
        let mappings = maps::mappings_in(a, l).map_err(|e| fail!(ffi::FI_EIO, "cannot read /proc/self/maps: {e}"))?;
        let ranges = vec![(a, l)];
        probe(a, l, needs_write(access))?;
        let device = m.device();
        Ok(PhysPin::publish(ranges, &mappings, None, false, Some(device), Some(m)))
    }

    fn publish(
        ranges: Vec<(usize, usize)>,
        mappings: &[Mapping],
        runs: Option<Vec<(u64, u64)>>,
        runs_fixed: bool,
        device: Option<Device>,
        dmabuf: Option<super::dmabuf::Mapped>,
    ) -> PhysPin {
        let mut vmas: Vec<VmaId> = mappings.iter().map(VmaId::of).collect();
        vmas.dedup();
        let fenced = device.as_ref().is_some_and(|d| d.caching() != Caching::Uncached);
        {
            let mut live = LIVE.write_ok();
            live.extend(ranges.iter().map(|&(a, l)| (a, l, fenced)));
            LIVE_COUNT.store(live.len(), Ordering::Release);
        }
        PhysPin { vmas, ranges, runs, device, runs_fixed, dmabuf, revoked: AtomicBool::new(false) }
    }

    /// Whether the mappings are still the ones registered. The first
    /// definite `false` (a mapping that is gone or different, physical
    /// runs that moved) is final; it returns `true` in `newly` once. A
    /// question the kernel could not answer now (an error from
    /// PROCMAP_QUERY or /proc/self/maps, pagemap showing no PFNs at all,
    /// as after dropping privileges) refuses this access but revokes
    /// nothing.
    pub fn check_live(&self) -> (bool, bool) {
        if self.revoked.load(Ordering::Acquire) {
            return (false, false);
        }
        let mut unknown = false;
        let mut same = self.vmas.iter().all(|v| match vma_at(v.start) {
            Ok(Some(now)) => now == *v,
            Ok(None) => false,
            Err(e) => {
                tracing::debug!("device registration check: cannot read the mapping at {:#x} now ({e})", v.start);
                unknown = true;
                true
            }
        });
        if same && !self.runs_fixed {
            if let Some(runs) = &self.runs {
                let mut now = Vec::new();
                for &(a, l) in &self.ranges {
                    let pfns = pagemap_pfns(a, l);
                    if pfns.iter().all(|&p| p == 0) {
                        // (No PFNs shown at all: no answer, not a change.)
                        unknown = true;
                        break;
                    }
                    match runs_of(a, l, &pfns) {
                        Some(r) => now.extend(r),
                        None => {
                            same = false;
                            break;
                        }
                    }
                }
                if same && !unknown && now != *runs {
                    same = false;
                }
            }
        }
        if !same {
            return (false, !self.revoked.swap(true, Ordering::AcqRel));
        }
        (!unknown, false)
    }

    /// Whether a change of the mappings has revoked it.
    pub fn revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }
}

impl Drop for PhysPin {
    fn drop(&mut self) {
        let mut live = LIVE.write_ok();
        for r in &self.ranges {
            if let Some(i) = live.iter().position(|x| (x.0, x.1) == *r) {
                live.swap_remove(i);
            }
        }
        LIVE_COUNT.store(live.len(), Ordering::Release);
    }
}

/// The accesses a device copy of `len` bytes at `addr` makes, as (offset,
/// width): the widest naturally aligned access that fits, so 8 bytes
/// except for at most three narrower ones at each end.
pub fn plan(addr: usize, len: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut off = 0;
    std::iter::from_fn(move || {
        if off >= len {
            return None;
        }
        let a = addr + off;
        let rem = len - off;
        let w = [8, 4, 2, 1].into_iter().find(|&w| a.is_multiple_of(w) && w <= rem).unwrap_or(1);
        let at = off;
        off += w;
        Some((at, w))
    })
}

/// Bytes before `addr` reaches 8-byte alignment (at most `len`).
fn head_len(addr: usize, len: usize) -> usize {
    ((8 - addr % 8) % 8).min(len)
}

/// Copy `src` into device memory at `dst`: general-purpose register
/// stores only (volatile: never merged into SIMD or `rep movs`), each
/// naturally aligned and 8 bytes wide, 4 where the range's edges are only
/// 4-aligned; 2 and 1 only at an edge that is not 4-aligned (a BAR or VFIO
/// registration is 4-aligned, and remote accesses to it must be). With
/// `fenced` (write-combining memory) an `sfence` drains the WC buffers
/// before it returns, so whatever the caller does next (an ACK, a
/// completion) is ordered after the data. Never inlined: a test reads its
/// machine code (`fabtests/unit/mr_peer.c`).
///
/// # Safety
/// `dst..dst+src.len()` is mapped and writable in this process (a live
/// device registration checked by the caller).
#[inline(never)]
pub unsafe fn copy_to_device(dst: usize, src: &[u8], fenced: bool) {
    let head = head_len(dst, src.len());
    let words = (src.len() - head) / 8;
    let tail = head + words * 8;
    // In address order: the head's narrow accesses, the words, the tail's.
    let narrow = |from: usize, to: usize| {
        for (off, w) in plan(dst + from, to - from).map(|(o, w)| (o + from, w)) {
            let s = &src[off..off + w];
            let p = dst + off;
            // SAFETY: `p` is aligned to `w` (plan) and inside the caller's range.
            unsafe {
                match w {
                    4 => std::ptr::write_volatile(p as *mut u32, u32::from_ne_bytes(s.try_into().unwrap_or_default())),
                    2 => std::ptr::write_volatile(p as *mut u16, u16::from_ne_bytes(s.try_into().unwrap_or_default())),
                    _ => std::ptr::write_volatile(p as *mut u8, s[0]),
                }
            }
        }
    };
    narrow(0, head);
    let d = (dst + head) as *mut u64;
    let s = src[head..].as_ptr() as *const u64;
    for i in 0..words {
        // SAFETY: `d` is 8-aligned with `words` words in the caller's range;
        // `s` has as many bytes (read unaligned).
        unsafe { std::ptr::write_volatile(d.add(i), std::ptr::read_unaligned(s.add(i))) };
    }
    narrow(tail, src.len());
    if fenced {
        store_fence();
    }
}

/// Drain write-combining buffers (SDM Vol 3 §11.3: WC stores are weakly
/// ordered until an sfence).
fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions; SSE is baseline on x86_64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// Copy device memory at `src` into `dst`: the same accesses as
/// [`copy_to_device`], loads this time, each byte read once and none
/// outside the range. Never inlined (its machine code is tested).
///
/// # Safety
/// `src..src+dst.len()` is mapped and readable in this process.
#[inline(never)]
pub unsafe fn copy_from_device(dst: &mut [u8], src: usize) {
    let head = head_len(src, dst.len());
    let words = (dst.len() - head) / 8;
    let tail = head + words * 8;
    let len = dst.len();
    // In address order: the head's narrow accesses, the words, the tail's.
    let narrow = |dst: &mut [u8], from: usize, to: usize| {
        for (off, w) in plan(src + from, to - from).map(|(o, w)| (o + from, w)) {
            let p = src + off;
            let d = &mut dst[off..off + w];
            // SAFETY: `p` is aligned to `w` (plan) and inside the caller's range.
            unsafe {
                match w {
                    4 => d.copy_from_slice(&std::ptr::read_volatile(p as *const u32).to_ne_bytes()),
                    2 => d.copy_from_slice(&std::ptr::read_volatile(p as *const u16).to_ne_bytes()),
                    _ => d[0] = std::ptr::read_volatile(p as *const u8),
                }
            }
        }
    };
    narrow(dst, 0, head);
    let s = (src + head) as *const u64;
    let d = dst[head..].as_mut_ptr() as *mut u64;
    for i in 0..words {
        // SAFETY: `s` is 8-aligned with `words` words in the caller's range;
        // `d` has as many bytes (written unaligned).
        unsafe { std::ptr::write_unaligned(d.add(i), std::ptr::read_volatile(s.add(i))) };
    }
    narrow(dst, tail, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_is_aligned_and_word_wide() {
        for addr in 0x1000..0x1010usize {
            for len in 0..70usize {
                let mut next = 0;
                let mut narrow = 0;
                for (off, w) in plan(addr, len) {
                    assert_eq!(off, next, "contiguous");
                    assert_eq!((addr + off) % w, 0, "aligned");
                    if w < 8 {
                        narrow += 1;
                    }
                    next = off + w;
                }
                assert_eq!(next, len, "covers all");
                assert!(narrow <= 6, "at most three narrow accesses each end ({addr:#x}+{len}: {narrow})");
                if addr % 8 == 0 && len % 8 == 0 {
                    assert_eq!(narrow, 0);
                }
            }
        }
    }

    #[test]
    fn device_copies_round_trip() {
        let mut dev = vec![0u8; 64];
        let src: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37).wrapping_add(1)).collect();
        for start in 0..9 {
            for len in 0..(64 - start) {
                dev.fill(0xEE);
                // SAFETY: inside `dev`.
                unsafe { copy_to_device(dev.as_mut_ptr() as usize + start, &src[..len], start % 2 == 0) };
                assert_eq!(&dev[start..start + len], &src[..len]);
                assert!(dev[..start].iter().chain(&dev[start + len..]).all(|&b| b == 0xEE), "no byte outside");
                let mut back = vec![0u8; len];
                // SAFETY: inside `dev`.
                unsafe { copy_from_device(&mut back, dev.as_ptr() as usize + start) };
                assert_eq!(back, &src[..len]);
            }
        }
    }

    #[test]
    fn runs_merge_contiguous_frames() {
        // Pages 10, 11 contiguous, then 20: two runs; offsets inside pages kept.
        let r = runs_of(0x1000 + 100, 3 * PAGE - 200, &[10, 11, 20]).unwrap();
        assert_eq!(r, vec![(10 * 4096 + 100, (2 * PAGE - 100) as u64), (20 * 4096, (PAGE - 100) as u64)]);
        assert_eq!(runs_of(0x1000, PAGE, &[0]), None, "hidden frames are unavailable, not zero");
    }

    #[test]
    fn vma_at_matches_maps() {
        let v = vec![1u8; 3 * PAGE];
        let a = v.as_ptr() as usize + PAGE;
        let q = vma_at(a).unwrap().unwrap();
        let m = maps::mappings_in(a, 1).unwrap();
        assert_eq!(q, VmaId::of(&m[0]));
        // SAFETY: maps one fresh page and unmaps it.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), PAGE, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: our own mapping.
        unsafe { libc::munmap(p, PAGE) };
        assert!(vma_at(p as usize).unwrap().is_none_or(|x| x.start > p as usize || x.end <= p as usize));
    }
}
