//! How a registration's pages are held: the domain's pinner and the pin a
//! region owns (released when the region is dropped, i.e. after its fid is
//! closed and the last in-flight user lets go).

use std::sync::Arc;

use oxmr_ffi as ffi;

use super::account::{charged, Account};
use super::cache::CacheRef;
use super::maps::{self, Kind, Mapping};
use super::mlock;
use super::phys::{self, PhysPin};
use super::uring::UringTable;
use crate::error::Result;
use crate::fail;

/// `FI_OXMR_MR_PIN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinMode {
    Uring,
    Mlock,
    None,
}

impl PinMode {
    /// Decode the variable (default: uring).
    pub fn parse(s: Option<&str>) -> std::result::Result<Self, String> {
        match s.map(str::trim) {
            None | Some("") | Some("uring") => Ok(PinMode::Uring),
            Some("mlock") => Ok(PinMode::Mlock),
            Some("none") => Ok(PinMode::None),
            Some(other) => Err(format!("FI_OXMR_MR_PIN={other} is not one of uring, mlock, none")),
        }
    }
}

/// How a region is held, for queries and statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinClass {
    /// Pinned with io_uring (FOLL_LONGTERM).
    Uring,
    /// Locked with mlock (read-only memory, or FI_OXMR_MR_PIN=mlock).
    Mlock,
    /// Not pinned (FI_OXMR_MR_PIN=none, or zero length).
    Unpinned,
    /// Device memory registered by the physical-address fallback.
    Phys,
}

/// The pin a region owns. (Three words: what a miss pins is boxed, so
/// that a cache hit moves little.)
pub enum Pin {
    None,
    Uring(Box<UringPin>),
    Mlock(Box<MlockPin>),
    /// A pin kept by the registration cache, shared with later hits.
    Cached(CacheRef),
    /// Device memory nothing can pin (the physical-address fallback).
    Phys(Box<PhysPin>),
}

const _: () = assert!(std::mem::size_of::<Pin>() <= 24);

/// Pages pinned in io_uring buffer slots; unpinned on drop.
pub struct UringPin {
    table: Arc<UringTable>,
    slots: Vec<u32>,
    bytes: u64,
    acct: Arc<Account>,
}

/// Ranges held with mlock; unlocked on drop.
pub struct MlockPin {
    iovs: Vec<(usize, usize)>,
    bytes: u64,
    acct: Arc<Account>,
}

impl Pin {
    pub fn class(&self) -> PinClass {
        match self {
            Pin::None => PinClass::Unpinned,
            Pin::Uring(_) => PinClass::Uring,
            Pin::Mlock(_) => PinClass::Mlock,
            Pin::Cached(c) => c.entry.pin.class(),
            Pin::Phys(_) => PinClass::Phys,
        }
    }

    pub fn bytes(&self) -> u64 {
        match self {
            Pin::None | Pin::Phys(_) => 0,
            Pin::Uring(p) => p.bytes,
            Pin::Mlock(p) => p.bytes,
            Pin::Cached(c) => c.entry.pin.bytes(),
        }
    }

    pub fn slots(&self) -> u32 {
        match self {
            Pin::Uring(p) => p.slots.len() as u32,
            Pin::Cached(c) => c.entry.pin.slots(),
            _ => 0,
        }
    }

    /// The physical-address registration, if this is one.
    pub fn phys(&self) -> Option<&PhysPin> {
        match self {
            Pin::Phys(p) => Some(p),
            _ => None,
        }
    }

    /// The cache entry this pin is shared through, if any.
    pub fn cache_entry(&self) -> Option<&super::cache::Entry> {
        match self {
            Pin::Cached(c) => Some(&c.entry),
            _ => None,
        }
    }
}

impl Drop for UringPin {
    fn drop(&mut self) {
        // A forked child shares the parent's ring (inherited fd):
        // emptying its slots would unpin the parent's pages.
        if self.table.owned_here() {
            self.table.unpin(&self.slots);
        }
        self.acct.release(self.bytes);
    }
}

impl Drop for MlockPin {
    fn drop(&mut self) {
        for &(a, l) in self.iovs.iter() {
            mlock::global().unlock(a, l);
        }
        self.acct.release(self.bytes);
    }
}

/// Whether the access needs the memory to be writable by oxmr or a peer.
pub fn needs_write(access: u64) -> bool {
    access & (ffi::FI_RECV | ffi::FI_READ | ffi::FI_REMOTE_WRITE) as u64 != 0
}

/// Why a failed pin failed, in words: the kernel's view of the range.
pub fn explain_unpinnable(iovs: &[(usize, usize)]) -> String {
    let mut parts = Vec::new();
    for &(a, l) in iovs {
        match maps::smaps_in(a, l) {
            Ok(m) => {
                if let Some((s, e)) = maps::first_gap(&m, a, l) {
                    parts.push(format!("{s:#x}-{e:#x} is not mapped"));
                }
                for x in &m {
                    if !matches!(x.kind(), Kind::Anonymous | Kind::Heap | Kind::Stack) || !x.write {
                        parts.push(x.describe());
                    }
                }
            }
            Err(e) => parts.push(format!("cannot read /proc/self/smaps: {e}")),
        }
    }
    if parts.is_empty() {
        "the kernel refused to pin it".into()
    } else {
        parts.join("; ")
    }
}

/// Refuse memory that mlock "succeeds" on without holding anything
/// (PFN-mapped device memory) or cannot fault in (secret memory): the
/// fallback must not claim to hold what it does not.
pub fn refuse_unholdable(iovs: &[(usize, usize)]) -> Result<()> {
    for &(a, l) in iovs {
        if l == 0 {
            continue;
        }
        let m = maps::smaps_in(a, l).map_err(|e| fail!(ffi::FI_EIO, "cannot read /proc/self/smaps: {e}"))?;
        if let Some(x) = m.iter().find(|x| matches!(x.kind(), Kind::DevicePfn | Kind::Secret)) {
            return Err(fail!(
                ffi::FI_EFAULT,
                "fi_mr_reg: the kernel cannot pin {a:#x}+{l}: it is {}, which cannot be registered",
                x.describe()
            ));
        }
    }
    Ok(())
}

/// Check a range against the mappings: mapped, and accessible as asked.
/// Returns whether some mapping is of a kind that may be device or secret
/// memory (a kernel special mapping or a file under /dev or secretmem),
/// which only /proc/self/smaps can settle.
pub fn validate(iovs: &[(usize, usize)], access: u64) -> Result<bool> {
    let mut special = false;
    for &(a, l) in iovs {
        if l == 0 {
            continue;
        }
        let m = maps::mappings_in(a, l).map_err(|e| fail!(ffi::FI_EIO, "cannot read /proc/self/maps: {e}"))?;
        if let Some((s, e)) = maps::first_gap(&m, a, l) {
            return Err(fail!(
                ffi::FI_EFAULT,
                "fi_mr_reg: {s:#x}-{e:#x} of the buffer {a:#x}+{l} is not mapped; register only memory the process has mapped"
            ));
        }
        for x in &m {
            special |= match x.kind() {
                Kind::Special(_) | Kind::DevicePfn | Kind::Secret => true,
                // (Device files, and the PCI resource files of sysfs and
                // procfs, which map BARs VM_IO | VM_PFNMAP.)
                Kind::File(p) => ["/dev/", "/secretmem", "/sys/", "/proc/"].iter().any(|x| p.starts_with(x)),
                _ => false,
            };
            if !x.read && !x.write {
                return Err(fail!(
                    ffi::FI_EACCES,
                    "fi_mr_reg: {:#x}-{:#x} is PROT_NONE; make it readable (mprotect) before registering",
                    x.start,
                    x.end
                ));
            }
            if needs_write(access) && !x.write {
                return Err(fail!(
                    ffi::FI_EACCES,
                    "fi_mr_reg: access {access:#x} needs writable memory but {:#x}-{:#x} is read-only; register it for FI_SEND/FI_WRITE/FI_REMOTE_READ only, or make it writable",
                    x.start,
                    x.end
                ));
            }
        }
    }
    Ok(special)
}

/// A domain's pinner.
pub struct Pinner {
    mode: PinMode,
    uring: Option<Arc<UringTable>>,
    pub acct: Arc<Account>,
    /// FI_OXMR_MR_PHYS_FALLBACK: device memory may take the
    /// physical-address fallback without the per-call flag.
    pub phys_fallback: bool,
    /// Where device identity is read from (FI_OXMR_SYSFS_ROOT).
    pub sysfs: super::device::Sysfs,
}

impl Pinner {
    /// Set up for `mode`; io_uring that cannot be set up falls back to mlock.
    pub fn new(mode: PinMode, acct: Account) -> Self {
        let (mode, uring) = match mode {
            PinMode::Uring => match UringTable::new() {
                Ok(t) => (PinMode::Uring, Some(Arc::new(t))),
                Err(e) => {
                    tracing::info!("io_uring unavailable ({e}); registrations pin with mlock");
                    (PinMode::Mlock, None)
                }
            },
            m => (m, None),
        };
        Pinner { mode, uring, acct: Arc::new(acct), phys_fallback: false, sysfs: Default::default() }
    }

    /// The mode in force.
    pub fn mode(&self) -> PinMode {
        self.mode
    }

    /// The domain's ring (uring mode, where io_uring could be set up).
    pub fn uring(&self) -> Option<&Arc<UringTable>> {
        self.uring.as_ref()
    }

    /// io_uring slots in use.
    pub fn slots_used(&self) -> u32 {
        self.uring.as_ref().map_or(0, |t| t.used())
    }

    /// Pin `iovs` for `access`: all-or-nothing; device memory takes the
    /// physical-address fallback when FI_OXMR_MR_PHYS_FALLBACK allows it.
    pub fn pin(&self, iovs: &[(usize, usize)], access: u64) -> Result<Pin> {
        let phys_ok = self.phys_fallback;
        let bytes: u64 = iovs.iter().map(|&(a, l)| charged(a, l)).sum();
        if bytes == 0 || self.mode == PinMode::None {
            if validate(iovs, access)? && bytes > 0 {
                if let Some(p) = self.device(iovs, access, phys_ok)? {
                    return Ok(p);
                }
                refuse_unholdable(iovs)?;
            }
            return Ok(Pin::None);
        }
        // A forked child inherits the parent's ring fd: its pins must not
        // land in the parent's buffer table; it holds its pages with mlock.
        let uring = self.uring.as_ref().filter(|t| t.owned_here());
        if let (PinMode::Uring, Some(t)) = (self.mode, uring) {
            self.acct.reserve(bytes)?;
            match t.pin(iovs) {
                Ok(slots) => {
                    return Ok(Pin::Uring(Box::new(UringPin {
                        table: t.clone(),
                        slots,
                        bytes,
                        acct: self.acct.clone(),
                    })))
                }
                Err(e) => {
                    self.acct.release(bytes);
                    match e.raw_os_error() {
                        // Read-only memory cannot take a FOLL_WRITE pin;
                        // when the access needs no write, mlock holds it.
                        Some(libc::EFAULT) => {
                            validate(iovs, access)?;
                            if let Some(p) = self.device(iovs, access, phys_ok)? {
                                return Ok(p);
                            }
                            if needs_write(access) {
                                return Err(self.unpinnable(iovs));
                            }
                        }
                        // io_uring takes no long-term pin on page-cache
                        // file mappings; mlock holds them.
                        Some(libc::EOPNOTSUPP) => {
                            if validate(iovs, access)? {
                                if let Some(p) = self.device(iovs, access, phys_ok)? {
                                    return Ok(p);
                                }
                            }
                        }
                        // P2PDMA pages: get_user_pages without
                        // FOLL_PCI_P2PDMA refuses them.
                        Some(libc::EREMOTEIO) => {
                            validate(iovs, access)?;
                            if let Some(p) = self.device(iovs, access, phys_ok)? {
                                return Ok(p);
                            }
                            return Err(self.unpinnable(iovs));
                        }
                        Some(libc::ENOMEM) => return Err(self.kernel_enomem(bytes)),
                        Some(libc::ENOSPC) => {
                            return Err(fail!(
                                ffi::FI_ENOSPC,
                                "fi_mr_reg: the domain's {} io_uring buffer slots are all in use; close registrations",
                                super::uring::TABLE_SLOTS
                            ))
                        }
                        _ => return Err(fail!(ffi::FI_EIO, "fi_mr_reg: io_uring buffer registration failed: {e}")),
                    }
                }
            }
        } else if validate(iovs, access)? {
            if let Some(p) = self.device(iovs, access, phys_ok)? {
                return Ok(p);
            }
        }
        refuse_unholdable(iovs)?;
        self.acct.reserve(bytes)?;
        for (i, &(a, l)) in iovs.iter().enumerate() {
            if let Err(e) = mlock::global().lock(a, l) {
                for &(a2, l2) in &iovs[..i] {
                    mlock::global().unlock(a2, l2);
                }
                self.acct.release(bytes);
                return Err(match e.raw_os_error() {
                    Some(libc::ENOMEM) | Some(libc::EAGAIN) | Some(libc::EPERM) => self.kernel_enomem(bytes),
                    _ => self.unpinnable(iovs),
                });
            }
        }
        Ok(Pin::Mlock(Box::new(MlockPin { iovs: iovs.to_vec(), bytes, acct: self.acct.clone() })))
    }

    /// The per-call flag (OXMR_MR_PHYS_FALLBACK): the caller says the range
    /// is device memory; anything else is refused, so a bad address can
    /// never register something else by physical address.
    pub fn phys_only(&self, iovs: &[(usize, usize)], access: u64) -> Result<Pin> {
        match phys::classify(iovs)? {
            phys::Class::AllDevice(m) => Ok(Pin::Phys(Box::new(PhysPin::new(iovs, access, &m)?))),
            phys::Class::NoDevice(what) => Err(fail!(
                ffi::FI_EFAULT,
                "fi_mr_regattr: OXMR_MR_PHYS_FALLBACK registers device/PFN-mapped memory only, but {what}; register ordinary memory without the flag"
            )),
            phys::Class::Mixed(other) => Err(fail!(
                ffi::FI_EFAULT,
                "fi_mr_regattr: OXMR_MR_PHYS_FALLBACK covers device/PFN-mapped memory only, but the range also holds other memory ({other})"
            )),
        }
    }

    /// Device memory in the range: the physical-address fallback when
    /// allowed, else -FI_EFAULT naming the mapping and the opt-in. `None`
    /// when the range holds no device memory.
    fn device(&self, iovs: &[(usize, usize)], access: u64, phys_ok: bool) -> Result<Option<Pin>> {
        // Memory of a device oxmr can name registers without opt-in.
        if let Some(id) = super::device::identify(&self.sysfs, iovs)? {
            // (Under the real /sys, a BAR or VFIO mapping is VM_IO|VM_PFNMAP:
            // the kernel must say so too. A simulated tree is plain files.)
            if id.device.is_mmio() && !self.sysfs.simulated {
                let mut sm = Vec::new();
                for &(a, l) in iovs.iter().filter(|x| x.1 > 0) {
                    sm.extend(
                        maps::smaps_in(a, l).map_err(|e| fail!(ffi::FI_EIO, "cannot read /proc/self/smaps: {e}"))?,
                    );
                }
                if let Some(x) = sm.iter().find(|x| x.kind() != Kind::DevicePfn) {
                    return Err(fail!(
                        ffi::FI_EFAULT,
                        "fi_mr_reg: {:#x}-{:#x} maps {}, but /proc/self/smaps does not show it as device memory (no io/pf flags): not registered as {}",
                        x.start,
                        x.end,
                        x.path,
                        id.device.describe()
                    ));
                }
            }
            return Ok(Some(Pin::Phys(Box::new(PhysPin::identified(iovs, access, id)?))));
        }
        match phys::classify(iovs)? {
            phys::Class::NoDevice(_) => Ok(None),
            phys::Class::Mixed(other) => Err(fail!(
                ffi::FI_EFAULT,
                "fi_mr_reg: the range mixes device/PFN-mapped memory with other memory ({other}); nothing can register it as one region (the physical-address fallback covers device memory only): register the parts separately"
            )),
            phys::Class::AllDevice(m) if phys_ok => Ok(Some(Pin::Phys(Box::new(PhysPin::new(iovs, access, &m)?)))),
            phys::Class::AllDevice(m) => Err(fail!(
                ffi::FI_EFAULT,
                "fi_mr_reg: the kernel cannot pin {}; set FI_OXMR_MR_PHYS_FALLBACK=1 or pass OXMR_MR_PHYS_FALLBACK in fi_mr_regattr's flags to register it by physical address",
                m.iter().map(Mapping::describe).collect::<Vec<_>>().join(", ")
            )),
        }
    }

    fn kernel_enomem(&self, bytes: u64) -> crate::error::Error {
        let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes one rlimit.
        unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
        fail!(
            ffi::FI_ENOMEM,
            "fi_mr_reg: the kernel refused to pin {bytes} more bytes: RLIMIT_MEMLOCK is {} bytes (soft), and the kernel charges whole huge pages and counts every process of the user; raise it (ulimit -l, limits.conf, systemd LimitMEMLOCK) or grant CAP_IPC_LOCK",
            rl.rlim_cur
        )
    }

    fn unpinnable(&self, iovs: &[(usize, usize)]) -> crate::error::Error {
        fail!(ffi::FI_EFAULT, "fi_mr_reg: the kernel cannot pin this memory: {}", explain_unpinnable(iovs))
    }
}

#[cfg(test)]
mod tests {
    use super::super::account::CapSource;
    use super::super::device::tests::{Tree, BAR0};
    use super::*;

    #[test]
    fn under_the_real_sysfs_a_bar_must_be_device_memory_to_the_kernel_too() {
        // The synthetic tree taken as the real /sys (not simulated): its
        // files are tmpfs, which smaps does not show as io/pf, so what
        // names a BAR by path alone is refused.
        let t = Tree::new("real");
        let mut p = Pinner::new(PinMode::Uring, Account::new(None, CapSource::Variable));
        p.sysfs = super::super::device::Sysfs { root: t.root.clone(), simulated: false };
        let m = t.map("resource0", BAR0, 0x1000);
        let rw = (ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64;
        assert_eq!(p.device(&[(m.0, 0x1000)], rw, false).err().map(|e| e.code()), Some(ffi::FI_EFAULT));
        p.sysfs.simulated = true;
        assert!(
            matches!(p.device(&[(m.0, 0x1000)], rw, false), Ok(Some(Pin::Phys(_)))),
            "simulated: the path is enough"
        );
    }
}
