//! Peer-direct identity: which PCIe device a mapping's memory belongs to,
//! proven from what the kernel shows, never from what the caller says.
//!
//! - **A BAR mapped from sysfs** (`<sysfs>/devices/.../<bdf>/resource<N>`
//!   or `resource<N>_wc`): /proc/self/maps names the file (d_path of the
//!   sysfs dentry: the canonical /sys/devices path, not the
//!   /sys/bus/pci/devices symlink) and its offset column is the physical
//!   address of the mapping's first byte: drivers/pci/mmap.c
//!   (`pci_mmap_resource_range`) adds the BAR's start to vm_pgoff before
//!   `io_remap_pfn_range`, so the PFN is known without pagemap. The
//!   device's `resource` file (one `start end flags` line per resource,
//!   pci-sysfs.c `resource_show`) gives the BAR's range; the registration
//!   must lie inside it. `resource<N>` is mapped uncached
//!   (`pgprot_device`), `resource<N>_wc` write-combining; the kernel
//!   creates `_wc` files only for prefetchable BARs.
//! - **A VFIO region** (vfio-pci): the legacy group interface maps an
//!   `anon_inode:[vfio-device]` file, the device-cdev interface
//!   `/dev/vfio/devices/vfio<N>`; either way the offset is the region
//!   index << 40 (VFIO_PCI_OFFSET_SHIFT). What is proven: that it is
//!   memory of a VFIO device, which region, and where in it; for the cdev
//!   form also the device (`<sysfs>/class/vfio-dev/vfio<N>/device`). The
//!   anon-inode form names no device (every VFIO device fd shares that
//!   inode), and the offset is no PFN: physical addresses are unknown.
//! - **P2PDMA memory** (`<bdf>/p2pmem/allocate`, kernel >= 6.2):
//!   ZONE_DEVICE pages in a VM_MIXEDMAP mapping, which get_user_pages
//!   refuses (-EREMOTEIO without FOLL_PCI_P2PDMA): memory of that device.
//!
//! The sysfs root is `/sys`, or `FI_OXMR_SYSFS_ROOT` (as hwloc's
//! HWLOC_FSROOT): tests build a tree there that reproduces what the
//! kernel shows (the `resource` file, the file's path, an offset equal to
//! the physical address). Such a tree is ordinary files, which pinning
//! would take, so with the variable set registration looks for device
//! identity before it pins (with /sys the kernel's refusal to pin a BAR
//! leads here; identity is then looked for only after pinning failed).

use std::path::{Path, PathBuf};

use oxmr_ffi as ffi;

use super::maps::{self, Mapping};
use crate::error::Result;
use crate::fail;

/// Where sysfs is (FI_OXMR_SYSFS_ROOT, else /sys).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sysfs {
    pub root: PathBuf,
    /// Set by FI_OXMR_SYSFS_ROOT: identity is looked for before pinning.
    pub simulated: bool,
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs { root: PathBuf::from("/sys"), simulated: false }
    }
}

impl Sysfs {
    /// FI_OXMR_SYSFS_ROOT's value (None, or empty: /sys).
    pub fn from_var(v: Option<&str>) -> Self {
        match v.map(str::trim) {
            None | Some("") => Sysfs::default(),
            Some(p) => Sysfs { root: PathBuf::from(p.trim_end_matches('/')), simulated: true },
        }
    }
}

/// A PCI function's address, domain:bus:device.function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bdf {
    pub domain: u32,
    pub bus: u8,
    pub dev: u8,
    pub func: u8,
}

impl Bdf {
    /// Parse `dddd:bb:dd.f` (hex), as sysfs names devices.
    pub fn parse(s: &str) -> Option<Bdf> {
        let (domain, rest) = s.split_once(':')?;
        let (bus, rest) = rest.split_once(':')?;
        let (dev, func) = rest.split_once('.')?;
        if domain.len() < 4 || bus.len() != 2 || dev.len() != 2 || func.len() != 1 {
            return None;
        }
        let hex = |t: &str| t.bytes().all(|b| b.is_ascii_hexdigit());
        if !(hex(domain) && hex(bus) && hex(dev) && hex(func)) {
            return None;
        }
        let b = Bdf {
            domain: u32::from_str_radix(domain, 16).ok()?,
            bus: u8::from_str_radix(bus, 16).ok()?,
            dev: u8::from_str_radix(dev, 16).ok()?,
            func: u8::from_str_radix(func, 16).ok()?,
        };
        (b.dev < 32 && b.func < 8).then_some(b)
    }
}

impl std::fmt::Display for Bdf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.dev, self.func)
    }
}

/// How the CPU maps the memory, which decides how oxmr touches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caching {
    /// Uncached (a `resource<N>` BAR, a VFIO region).
    Uncached,
    /// Write-combining (`resource<N>_wc`): stores are fenced.
    WriteCombining,
    /// Whatever the exporter or allocator chose (P2PDMA, dma-buf): treated
    /// as write-combining, the stricter of the two for copies.
    Unknown,
}

/// What a device registration is, as proven at registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Device {
    Bar {
        bdf: Bdf,
        bar: u8,
        /// Offset of the registration's first byte in the BAR.
        offset: u64,
        /// The BAR's bus address range, first and last byte (the `resource` line).
        start: u64,
        end: u64,
        prefetchable: bool,
        caching: Caching,
    },
    Vfio {
        /// Known for the device-cdev interface only.
        bdf: Option<Bdf>,
        region: u32,
        /// Offset of the registration's first byte in the region.
        offset: u64,
    },
    P2p {
        bdf: Bdf,
    },
    DmaBuf {
        /// The buffer's inode (fdinfo `ino`): what the registration is keyed by.
        ino: u64,
        /// The buffer's size, and the registration's offset in it.
        size: u64,
        offset: u64,
        /// The exporter (fdinfo `exp_name`).
        exporter: String,
    },
}

impl Device {
    pub fn caching(&self) -> Caching {
        match self {
            Device::Bar { caching, .. } => *caching,
            Device::Vfio { .. } => Caching::Uncached,
            Device::P2p { .. } | Device::DmaBuf { .. } => Caching::Unknown,
        }
    }

    /// MMIO (a BAR or a VFIO region): registered and accessed 4-byte
    /// aligned, never probed by the kernel's byte copies.
    pub fn is_mmio(&self) -> bool {
        matches!(self, Device::Bar { .. } | Device::Vfio { .. })
    }

    /// For log lines.
    pub fn describe(&self) -> String {
        match self {
            Device::Bar { bdf, bar, offset, start, end, caching, .. } => {
                let wc = if *caching == Caching::WriteCombining { ", write-combining" } else { ", uncached" };
                format!("BAR {bar} of PCI device {bdf} (bus addresses {start:#x}-{end:#x}), offset {offset:#x}{wc}")
            }
            Device::Vfio { bdf: Some(b), region, offset } => format!("VFIO region {region} of {b}, offset {offset:#x}"),
            Device::Vfio { bdf: None, region, offset } => {
                format!("VFIO region {region} (device not named by the mapping), offset {offset:#x}")
            }
            Device::P2p { bdf } => format!("P2PDMA memory of PCI device {bdf}"),
            Device::DmaBuf { ino, exporter, offset, .. } => {
                format!("dma-buf {ino} of exporter {exporter}, offset {offset:#x}")
            }
        }
    }
}

/// `IORESOURCE_*` bits of a `resource` line (include/linux/ioport.h).
const IORESOURCE_MEM: u64 = 0x200;
const IORESOURCE_PREFETCH: u64 = 0x2000;
/// Standard BARs (PCI_STD_NUM_BARS): the kernel makes resource0..5 files.
const STD_BARS: u32 = 6;
/// VFIO_PCI_OFFSET_SHIFT (drivers/vfio/pci/vfio_pci_priv.h).
const VFIO_OFFSET_SHIFT: u32 = 40;

/// What one mapping is, before the range is checked against it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    Bar { bdf: Bdf, bar: u8, start: u64, end: u64, prefetchable: bool, wc: bool },
    Vfio { bdf: Option<Bdf>, region: u32 },
    P2p { bdf: Bdf },
}

/// The BAR's `start end flags` line from `<dir>/resource`.
fn resource_line(dir: &Path, bar: u32, file: &str) -> Result<(u64, u64, u64)> {
    let path = dir.join("resource");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        fail!(
            ffi::FI_EFAULT,
            "fi_mr_reg: {file} is mapped but {} cannot be read ({e}); cannot prove which BAR it is",
            path.display()
        )
    })?;
    let line = text.lines().nth(bar as usize).ok_or_else(|| {
        fail!(ffi::FI_EFAULT, "fi_mr_reg: {} has no line for BAR {bar}, which {file} names", path.display())
    })?;
    let f: Vec<u64> = line
        .split_ascii_whitespace()
        .filter_map(|t| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok())
        .collect();
    match f.as_slice() {
        &[s, e, fl] => Ok((s, e, fl)),
        _ => Err(fail!(ffi::FI_EFAULT, "fi_mr_reg: {} line {bar} is {line:?}, not `start end flags`", path.display())),
    }
}

/// What `m` is, when it is device memory oxmr can name; `Ok(None)` for
/// anything that is not under the sysfs root or VFIO.
fn source_of(sysfs: &Sysfs, m: &Mapping) -> Result<Option<Source>> {
    let p = m.path.as_str();
    if p == "anon_inode:[vfio-device]" {
        return Ok(Some(Source::Vfio { bdf: None, region: (m.offset >> VFIO_OFFSET_SHIFT) as u32 }));
    }
    if let Some(n) = p.strip_prefix("/dev/vfio/devices/vfio").filter(|n| n.bytes().all(|b| b.is_ascii_digit())) {
        let link = sysfs.root.join(format!("class/vfio-dev/vfio{n}/device"));
        let bdf = std::fs::read_link(&link).ok().and_then(|t| t.file_name()?.to_str().and_then(Bdf::parse));
        return Ok(Some(Source::Vfio { bdf, region: (m.offset >> VFIO_OFFSET_SHIFT) as u32 }));
    }
    let Ok(rel) = Path::new(p).strip_prefix(&sysfs.root) else { return Ok(None) };
    if !p.starts_with('/') {
        return Ok(None);
    }
    let not_device = |why: &str| {
        fail!(
            ffi::FI_EFAULT,
            "fi_mr_reg: the range maps {p}, a file under the sysfs root {} that is {why}; oxmr registers sysfs mappings of PCI BARs (resource<N>, resource<N>_wc) and P2PDMA memory (p2pmem/allocate) only",
            sysfs.root.display()
        )
    };
    if p.ends_with(" (deleted)") {
        return Err(not_device("deleted (the device went away)"));
    }
    let parts: Vec<&str> = rel.iter().filter_map(|c| c.to_str()).collect();
    let name = parts.last().copied().unwrap_or("");
    let parent = |up: usize| parts.len().checked_sub(up + 1).and_then(|i| Bdf::parse(parts[i]));
    if let Some(rest) = name.strip_prefix("resource") {
        let (num, wc) = match rest.strip_suffix("_wc") {
            Some(n) => (n, true),
            None => (rest, false),
        };
        let bar = num.parse::<u32>().ok().filter(|&b| b < STD_BARS && !num.is_empty() && num.len() == 1);
        if let (Some(bar), Some(bdf)) = (bar, parent(1)) {
            let dir = Path::new(p).parent().unwrap_or(Path::new("/"));
            let (start, end, flags) = resource_line(dir, bar, p)?;
            if flags & IORESOURCE_MEM == 0 || end <= start {
                return Err(fail!(
                    ffi::FI_EFAULT,
                    "fi_mr_reg: {p} is mapped, but {}/resource says BAR {bar} of {bdf} is not an assigned memory BAR ({start:#x} {end:#x} flags {flags:#x}); the mapping and the device disagree",
                    dir.display()
                ));
            }
            let prefetchable = flags & IORESOURCE_PREFETCH != 0;
            if wc && !prefetchable {
                return Err(fail!(
                    ffi::FI_EFAULT,
                    "fi_mr_reg: {p} is mapped, but {}/resource says BAR {bar} of {bdf} is not prefetchable (flags {flags:#x}), and the kernel makes resource<N>_wc files only for prefetchable BARs; the mapping and the device disagree",
                    dir.display()
                ));
            }
            return Ok(Some(Source::Bar { bdf, bar: bar as u8, start, end, prefetchable, wc }));
        }
        return Err(not_device("not a BAR resource file (resource0 to resource5, or their _wc)"));
    }
    if name == "allocate" && parts.len() >= 3 && parts[parts.len() - 2] == "p2pmem" {
        if let Some(bdf) = parent(2) {
            return Ok(Some(Source::P2p { bdf }));
        }
    }
    Err(not_device("not PCI device memory"))
}

/// A device registration's identity and what goes with it.
pub struct Identified {
    pub device: Device,
    /// The mappings the range lies in, as at registration.
    pub mappings: Vec<Mapping>,
    /// Physical (bus) runs, where the identity gives them (BARs).
    pub runs: Option<Vec<(u64, u64)>>,
}

/// The device identity of `iovs`, when any of it is device memory oxmr can
/// name: `Ok(None)` when none of it is; an error when only part of it is,
/// when it spans two devices or BARs, runs past its BAR, or the mapping
/// and the device's sysfs files disagree.
pub fn identify(sysfs: &Sysfs, iovs: &[(usize, usize)]) -> Result<Option<Identified>> {
    let mut found: Option<(Source, Device)> = None;
    let mut mappings = Vec::new();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut other = None;
    for &(a, l) in iovs.iter().filter(|x| x.1 > 0) {
        let ms = maps::mappings_in(a, l).map_err(|e| fail!(ffi::FI_EIO, "cannot read /proc/self/maps: {e}"))?;
        if let Some((s, e)) = maps::first_gap(&ms, a, l) {
            other.get_or_insert(format!("{s:#x}-{e:#x} is not mapped"));
        }
        for m in ms {
            let Some(src) = source_of(sysfs, &m)? else {
                other.get_or_insert(format!("{:#x}-{:#x} is {}", m.start, m.end, m.describe()));
                continue;
            };
            // The part of this iov inside this mapping.
            let lo = a.max(m.start);
            let hi = (a + l).min(m.end);
            let piece_off = m.offset + (lo - m.start) as u64;
            let dev = match &src {
                Source::Bar { bdf, bar, start, end, prefetchable, wc } => {
                    if m.offset < *start || m.offset > *end {
                        return Err(fail!(
                            ffi::FI_EFAULT,
                            "fi_mr_reg: {} is mapped at physical {:#x} (its offset in /proc/self/maps), but the device's resource file says BAR {bar} of {bdf} is {start:#x}-{end:#x}; the mapping and the device disagree",
                            m.path,
                            m.offset
                        ));
                    }
                    let off = piece_off - start;
                    if piece_off + (hi - lo) as u64 > end + 1 {
                        return Err(fail!(
                            ffi::FI_EFAULT,
                            "fi_mr_reg: {lo:#x}+{} runs past BAR {bar} of {bdf}: it starts {off:#x} into the BAR, which is {} bytes ({start:#x}-{end:#x}); register only memory inside the BAR",
                            hi - lo,
                            end - start + 1
                        ));
                    }
                    match runs.last_mut() {
                        Some(r) if r.0 + r.1 == piece_off => r.1 += (hi - lo) as u64,
                        _ => runs.push((piece_off, (hi - lo) as u64)),
                    }
                    let caching = if *wc { Caching::WriteCombining } else { Caching::Uncached };
                    Device::Bar {
                        bdf: *bdf,
                        bar: *bar,
                        offset: off,
                        start: *start,
                        end: *end,
                        prefetchable: *prefetchable,
                        caching,
                    }
                }
                Source::Vfio { bdf, region } => {
                    Device::Vfio { bdf: *bdf, region: *region, offset: piece_off & ((1 << VFIO_OFFSET_SHIFT) - 1) }
                }
                Source::P2p { bdf } => Device::P2p { bdf: *bdf },
            };
            match &found {
                None => found = Some((src, dev)),
                Some((s, first)) if *s != src => {
                    return Err(fail!(
                        ffi::FI_EINVAL,
                        "fi_mr_regv: the range spans {} and {}; register each device's memory separately",
                        first.describe(),
                        dev.describe()
                    ))
                }
                Some(_) => {}
            }
            mappings.push(m);
        }
    }
    let Some((src, device)) = found else { return Ok(None) };
    if let Some(o) = other {
        return Err(fail!(
            ffi::FI_EFAULT,
            "fi_mr_reg: the range holds {} and other memory ({o}); register the device memory alone",
            device.describe()
        ));
    }
    if device.is_mmio() {
        if let Some(&(a, l)) = iovs.iter().find(|&&(a, l)| a % 4 != 0 || l % 4 != 0) {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_mr_reg: {a:#x}+{l} in {} is not 4-byte aligned; device registers and BARs take aligned 4- and 8-byte accesses only, so register aligned ranges",
                device.describe()
            ));
        }
    }
    let runs = matches!(src, Source::Bar { .. }).then_some(runs);
    Ok(Some(Identified { device, mappings, runs }))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn bdf_parses_what_sysfs_prints() {
        let b = Bdf::parse("0000:3b:1f.7").unwrap();
        assert_eq!((b.domain, b.bus, b.dev, b.func), (0, 0x3b, 0x1f, 7));
        assert_eq!(b.to_string(), "0000:3b:1f.7");
        assert_eq!(Bdf::parse("10000:00:00.0").unwrap().domain, 0x10000);
        for bad in ["0000:3b:20.0", "0000:3b:1f.8", "00:3b:1f.7", "0000:3b:1f", "pci0000:00", "0000:0g:00.0", ""] {
            assert_eq!(Bdf::parse(bad), None, "{bad}");
        }
    }

    /// A synthetic sysfs tree: what the kernel shows for a device with a
    /// 64 KiB uncached BAR 0 at 0xfe000000 and a 1 MiB prefetchable BAR 2
    /// at 0xd0000000 (its `resource` file, `resource0`, `resource2`,
    /// `resource2_wc`, `config`). Simulated: the files are ordinary tmpfs
    /// files, sparse up to the BAR's physical address, so that mapping one
    /// at that file offset makes /proc/self/maps show the offset the kernel
    /// shows for a real BAR mapping (its physical address).
    pub(crate) struct Tree {
        pub root: PathBuf,
        pub dir: PathBuf,
    }

    pub(crate) const BAR0: u64 = 0xfe00_0000;
    pub(crate) const BAR2: u64 = 0xd000_0000;

    impl Tree {
        pub fn new(tag: &str) -> Tree {
            // (tmpfs, as sysfs files are memory: a shared writable mapping
            // of a disk file is not pinnable for write, which would hide
            // what the tests below compare.)
            let root = PathBuf::from(format!("/dev/shm/oxmr-sysfs-{tag}-{}", std::process::id()));
            let dir = root.join("devices/pci0000:00/0000:00:04.0");
            std::fs::create_dir_all(&dir).unwrap();
            let mut lines = String::new();
            for i in 0..13u64 {
                let (s, e, f) = match i {
                    0 => (BAR0, BAR0 + 0xffff, 0x40200u64),
                    2 => (BAR2, BAR2 + 0xf_ffff, 0x14220c),
                    _ => (0, 0, 0),
                };
                lines.push_str(&format!("0x{s:016x} 0x{e:016x} 0x{f:016x}\n"));
            }
            std::fs::write(dir.join("resource"), lines).unwrap();
            for (name, at) in [
                ("resource0", BAR0 + 0x2_0000),
                ("resource2", BAR2 + 0x10_0000),
                ("resource2_wc", BAR2 + 0x10_0000),
                ("config", 0x1000),
            ] {
                let f = std::fs::File::create(dir.join(name)).unwrap();
                f.set_len(at).unwrap();
            }
            Tree { root, dir }
        }

        pub fn sysfs(&self) -> Sysfs {
            Sysfs { root: self.root.clone(), simulated: true }
        }

        /// Map `len` bytes of `name` at file offset `at` (shared, read-write).
        pub fn map(&self, name: &str, at: u64, len: usize) -> Map {
            use std::os::fd::AsRawFd;
            let f = std::fs::OpenOptions::new().read(true).write(true).open(self.dir.join(name)).unwrap();
            // SAFETY: a new shared mapping of our own file.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    f.as_raw_fd(),
                    at as libc::off_t,
                )
            };
            assert_ne!(p, libc::MAP_FAILED, "{name} at {at:#x}");
            Map(p as usize, len)
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    pub(crate) struct Map(pub usize, pub usize);

    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: the test's own mapping.
            unsafe { libc::munmap(self.0 as *mut libc::c_void, self.1) };
        }
    }

    fn code<T>(r: Result<T>) -> Option<u32> {
        r.err().map(|e| e.code())
    }

    #[test]
    fn a_synthetic_bar_is_named_with_its_device_bar_offset_and_bus_range() {
        let t = Tree::new("id");
        let m = t.map("resource0", BAR0 + 0x1000, 0x8000);
        let id = identify(&t.sysfs(), &[(m.0 + 0x100, 0x2000)]).unwrap().unwrap();
        let want = Device::Bar {
            bdf: Bdf::parse("0000:00:04.0").unwrap(),
            bar: 0,
            offset: 0x1100,
            start: BAR0,
            end: BAR0 + 0xffff,
            prefetchable: false,
            caching: Caching::Uncached,
        };
        assert_eq!(id.device, want);
        assert_eq!(id.runs, Some(vec![(BAR0 + 0x1100, 0x2000)]), "physical runs from the offset column");
        let wc = t.map("resource2_wc", BAR2, 0x4000);
        let id = identify(&t.sysfs(), &[(wc.0, 0x4000)]).unwrap().unwrap();
        assert!(matches!(
            id.device,
            Device::Bar { bar: 2, offset: 0, prefetchable: true, caching: Caching::WriteCombining, .. }
        ));
        let uc = t.map("resource2", BAR2 + 0x8000, 0x1000);
        let id = identify(&t.sysfs(), &[(uc.0, 0x1000)]).unwrap().unwrap();
        assert!(matches!(id.device, Device::Bar { bar: 2, offset: 0x8000, caching: Caching::Uncached, .. }));
        // Ordinary memory is not device memory.
        let v = vec![0u8; 4096];
        assert!(identify(&t.sysfs(), &[(v.as_ptr() as usize, 64)]).unwrap().is_none());
    }

    #[test]
    fn bad_bar_mappings_are_refused() {
        let t = Tree::new("bad");
        // Runs past the 64 KiB BAR 0: the mapping goes on into what the
        // file has past it (a real BAR's mmap would refuse that much).
        let m = t.map("resource0", BAR0 + 0xf000, 0x2000);
        assert!(identify(&t.sysfs(), &[(m.0, 0x1000)]).unwrap().is_some(), "the last page is in");
        assert_eq!(code(identify(&t.sysfs(), &[(m.0 + 0x800, 0x1000)])), Some(ffi::FI_EFAULT), "one page past");
        // A file under the root that is not a BAR.
        let c = t.map("config", 0, 0x1000);
        assert_eq!(code(identify(&t.sysfs(), &[(c.0, 64)])), Some(ffi::FI_EFAULT));
        // The resource file disagrees: BAR 0 mapped where BAR 0 is not.
        let off = t.map("resource0", 0xd000_0000, 0x1000);
        assert_eq!(code(identify(&t.sysfs(), &[(off.0, 64)])), Some(ffi::FI_EFAULT));
        // resource2_wc is said to be BAR 2; with BAR 2 made non-prefetchable
        // the kernel would have no _wc file: disagreement.
        let wc = t.map("resource2_wc", BAR2, 0x1000);
        let text = std::fs::read_to_string(t.dir.join("resource")).unwrap();
        std::fs::write(t.dir.join("resource"), text.replace("0x000000000014220c", "0x0000000000040200")).unwrap();
        assert_eq!(code(identify(&t.sysfs(), &[(wc.0, 64)])), Some(ffi::FI_EFAULT));
        // An MMIO range that is not 4-byte aligned.
        let m2 = t.map("resource0", BAR0, 0x1000);
        assert_eq!(code(identify(&t.sysfs(), &[(m2.0 + 2, 64)])), Some(ffi::FI_EINVAL));
        assert_eq!(code(identify(&t.sysfs(), &[(m2.0, 66)])), Some(ffi::FI_EINVAL));
        // Device memory next to ordinary memory, in one registration.
        let v = [0u8; 64];
        assert_eq!(code(identify(&t.sysfs(), &[(m2.0, 64), (v.as_ptr() as usize, 64)])), Some(ffi::FI_EFAULT));
        // Two BARs in one registration.
        let b2 = t.map("resource2", BAR2, 0x1000);
        assert_eq!(code(identify(&t.sysfs(), &[(m2.0, 64), (b2.0, 64)])), Some(ffi::FI_EINVAL));
    }

    #[test]
    fn p2pdma_memory_is_named_by_its_device() {
        let t = Tree::new("p2p");
        std::fs::create_dir_all(t.dir.join("p2pmem")).unwrap();
        std::fs::File::create(t.dir.join("p2pmem/allocate")).unwrap().set_len(0x10000).unwrap();
        let m = t.map("p2pmem/allocate", 0, 0x2000);
        let id = identify(&t.sysfs(), &[(m.0, 0x2000)]).unwrap().unwrap();
        assert_eq!(id.device, Device::P2p { bdf: Bdf::parse("0000:00:04.0").unwrap() });
        assert_eq!(id.runs, None, "P2PDMA runs come from pagemap");
        assert_eq!(id.device.caching(), Caching::Unknown);
    }

    #[test]
    fn vfio_mappings_name_their_region() {
        let sysfs = Sysfs::default();
        let m = Mapping {
            start: 0x7f00_0000_0000,
            end: 0x7f00_0001_0000,
            read: true,
            write: true,
            exec: false,
            shared: true,
            offset: (2 << 40) | 0x3000,
            dev: 13,
            inode: 1041,
            path: "anon_inode:[vfio-device]".into(),
            vm_flags: vec![],
        };
        assert_eq!(source_of(&sysfs, &m).unwrap(), Some(Source::Vfio { bdf: None, region: 2 }));
        let other = Mapping { path: "anon_inode:[perf_event]".into(), ..m.clone() };
        assert_eq!(source_of(&sysfs, &other).unwrap(), None);
        let file = Mapping { path: "/usr/lib/libc.so.6".into(), ..m };
        assert_eq!(source_of(&sysfs, &file).unwrap(), None);
    }
}
