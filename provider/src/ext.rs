//! oxmr's extension API, as C sees it in `include/rdma/fi_ext_oxmr.h`
//! (generated from this file by cbindgen; CI fails when the header is
//! stale).
//!
//! Conventions, for every table added here: a table is obtained with
//! `fi_open_ops(fid, NAME, 0, (void **)&ops, NULL)` and stays valid while
//! the fid is open; its first field is its size in bytes, so an application
//! built against an older header can check which slots exist; functions
//! return 0 or a negative `FI_E*` code and write out-parameters only on
//! success.
//!
//! Tables: `"oxmr_mr_ops"` on a domain fid ([`oxmr_mr_ops`]).
#![allow(non_camel_case_types)]

use std::ffi::c_void;

/// Version of the extension API described by this header.
pub const OXMR_EXT_VERSION: u32 = 4;

/// Name of the provider, as given to `FI_PROVIDER` and printed by `fi_info`.
pub const OXMR_PROV_NAME: &str = "oxmr";

/// `fi_open_ops` name of the memory-registration extension table.
pub const OXMR_MR_OPS_NAME: &str = "oxmr_mr_ops";

/// Registration pinned through the domain's io_uring fixed-buffer table.
pub const OXMR_MR_CLASS_PINNED: u32 = 1;
/// Registration held with mlock (read-only memory, or FI_OXMR_MR_PIN=mlock).
pub const OXMR_MR_CLASS_LOCKED: u32 = 2;
/// Registration not pinned (FI_OXMR_MR_PIN=none, or zero length).
pub const OXMR_MR_CLASS_UNPINNED: u32 = 3;
/// Device memory (VM_PFNMAP/VM_IO) registered by the physical-address
/// fallback: not pinned, served through the owning process's mapping.
pub const OXMR_MR_CLASS_PHYSICAL: u32 = 4;
/// Peer-direct registration (version 3): device memory whose identity is
/// proven (a PCI BAR, a VFIO region, P2PDMA memory) or a dma-buf;
/// `device` describes it. Not pinned, served through the owning process's
/// mapping with MMIO-safe copies.
pub const OXMR_MR_CLASS_PEER: u32 = 5;

/// `oxmr_mr_device.kind`: a BAR mapped from sysfs (`resource<N>[_wc]`).
pub const OXMR_DEV_PCI_BAR: u32 = 1;
/// A VFIO device region (`index` is the region).
pub const OXMR_DEV_VFIO: u32 = 2;
/// P2PDMA memory (`p2pmem/allocate`).
pub const OXMR_DEV_P2PDMA: u32 = 3;
/// A dma-buf (registered by fd).
pub const OXMR_DEV_DMABUF: u32 = 4;

/// `oxmr_mr_device.caching`: uncached (`resource<N>`, VFIO).
pub const OXMR_CACHING_UC: u32 = 1;
/// Write-combining (`resource<N>_wc`).
pub const OXMR_CACHING_WC: u32 = 2;
/// Chosen by the exporter or allocator (P2PDMA, dma-buf): copied as WC.
pub const OXMR_CACHING_UNKNOWN: u32 = 3;

/// `mmio_copy` flags: the destination is device memory (else the source).
pub const OXMR_MMIO_TO_DEVICE: u64 = 1;
/// The device memory may be write-combining: the copy ends with a store
/// fence.
pub const OXMR_MMIO_WC: u64 = 2;

/// A dma-buf to register (the fields of libfabric 1.20's `struct
/// fi_mr_dmabuf`, for applications built against older headers).
#[repr(C)]
pub struct oxmr_mr_dmabuf {
    /// The dma-buf fd; oxmr keeps its own reference, so it may be closed
    /// after the call.
    pub fd: i32,
    /// Offset of the registered bytes in the buffer.
    pub offset: u64,
    /// Number of bytes registered.
    pub len: usize,
    /// Under FI_MR_VIRT_ADDR, peers address the byte at `offset` as
    /// `base_addr + offset`.
    pub base_addr: *mut c_void,
}

/// What `device` reports about a peer-direct registration (version 3).
#[repr(C)]
pub struct oxmr_mr_device {
    /// Set by the caller to `sizeof(struct oxmr_mr_device)`.
    pub size: usize,
    /// One of `OXMR_DEV_*`.
    pub kind: u32,
    /// One of `OXMR_CACHING_*`.
    pub caching: u32,
    /// The PCI function (domain:bus:device.function), where `pci_valid`.
    pub pci_domain: u32,
    pub pci_bus: u8,
    pub pci_dev: u8,
    pub pci_func: u8,
    /// 1 when the PCI fields name the device (a VFIO group mapping names none).
    pub pci_valid: u8,
    /// BAR index (`OXMR_DEV_PCI_BAR`) or VFIO region index.
    pub index: u32,
    /// 1 for a prefetchable BAR.
    pub prefetchable: u32,
    /// Offset of the registration's first byte in its BAR, region or buffer.
    pub offset: u64,
    /// The BAR's bus address range, first and last byte (`OXMR_DEV_PCI_BAR`).
    pub bus_start: u64,
    pub bus_end: u64,
    /// A dma-buf's inode (what the registration is keyed by) and size.
    pub dmabuf_ino: u64,
    pub dmabuf_size: u64,
    /// A dma-buf's exporter (fdinfo `exp_name`), NUL-terminated, truncated.
    pub exporter: [u8; 32],
}

/// fi_mr_regattr flag: register device memory (VM_PFNMAP/VM_IO mappings,
/// which cannot be pinned) by physical address for this call, as
/// FI_OXMR_MR_PHYS_FALLBACK=1 does for all. Bit 60: libfabric leaves bits
/// 60-63 of operation flags to providers.
pub const OXMR_MR_PHYS_FALLBACK: u64 = 0x1000_0000_0000_0000;

/// `phys_state` of a registration that is not a physical-address one.
pub const OXMR_PHYS_NONE: u32 = 0;
/// Physical runs are known: `phys_runs` returns them.
pub const OXMR_PHYS_AVAILABLE: u32 = 1;
/// Physical addresses are unavailable: /proc/self/pagemap does not show
/// them (no CAP_SYS_ADMIN, or a VM_PFNMAP mapping, which the kernel's page
/// walk skips). The registration works for oxmr's own data path.
pub const OXMR_PHYS_UNAVAILABLE: u32 = 2;
/// The mapping changed or went away; the key no longer validates.
pub const OXMR_PHYS_REVOKED: u32 = 3;

/// One contiguous piece of physical memory behind a registration.
#[repr(C)]
pub struct oxmr_phys_run {
    /// Physical address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
}

/// What `query` reports about one registration.
#[repr(C)]
pub struct oxmr_mr_info {
    /// Set by the caller to `sizeof(struct oxmr_mr_info)`.
    pub size: usize,
    /// One of `OXMR_MR_CLASS_*`.
    pub class_: u32,
    /// io_uring buffer-table slots the registration holds.
    pub pin_slots: u32,
    /// Bytes pinned for it (page-rounded, as the kernel charges them).
    pub bytes_pinned: u64,
    /// Registered length in bytes.
    pub len: u64,
    /// Its key.
    pub key: u64,
    /// Its access bits.
    pub access: u64,
    /// Id of the cache entry whose pin it uses (0: not cached).
    pub cache_entry: u64,
    /// Page frame number of its first page as pinned, recorded when
    /// FI_OXMR_MR_RECORD_PFN=1 and /proc/self/pagemap shows PFNs (root);
    /// else 0. A verification aid: compare it with pagemap after remapping.
    pub pfn0: u64,
    /// One of `OXMR_PHYS_*` (version 2).
    pub phys_state: u32,
    /// Number of physical runs when `phys_state` is `OXMR_PHYS_AVAILABLE`.
    pub phys_runs: u32,
}

/// What `stats` reports about a domain.
#[repr(C)]
pub struct oxmr_mr_stats {
    /// Set by the caller to `sizeof(struct oxmr_mr_stats)`.
    pub size: usize,
    /// Successful registrations since the domain opened.
    pub registrations: u64,
    /// Registrations open now.
    pub live: u64,
    /// Bytes this domain holds pinned.
    pub bytes_pinned: u64,
    /// Bytes all domains of the process hold pinned.
    pub process_bytes_pinned: u64,
    /// The cap on pinned bytes (0: unlimited).
    pub pin_cap: u64,
    /// io_uring buffer-table slots in use.
    pub slots_used: u32,
    /// Pinning in force: 1 io_uring, 2 mlock, 3 none.
    pub pin_mode: u32,
    /// Failed registrations, by cause.
    pub fail_einval: u64,
    pub fail_efault: u64,
    pub fail_eacces: u64,
    pub fail_enomem: u64,
    pub fail_enokey: u64,
    pub fail_other: u64,
    /// Registration cache: registrations served from it, and pinned anew.
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Registrations not cached (range not watchable, cache off, several iovs).
    pub cache_uncached: u64,
    /// Unused entries evicted (limits, memlock pressure).
    pub cache_evictions: u64,
    /// Entries invalidated by the kernel, by cause.
    pub cache_inv_unmap: u64,
    pub cache_inv_remove: u64,
    pub cache_inv_remap: u64,
    /// Entries and bytes cached now (in use and unused).
    pub cache_entries: u64,
    pub cache_bytes: u64,
    /// TCP sends from registered memory (FI_OXMR_TCP_IO_URING): io_uring
    /// SEND_ZC completions that sent their whole frame part, and the
    /// bytes they sent.
    pub tcp_zc_sends: u64,
    pub tcp_zc_bytes: u64,
    /// SEND_ZC notifications that reported the kernel copied the bytes
    /// after all (IORING_NOTIF_USAGE_ZC_COPIED): on loopback, every one.
    pub tcp_zc_copied: u64,
    /// TCP frames with no zero-copy part (every byte copied by writev).
    pub tcp_copied_frames: u64,
    /// Bytes TCP sockets took by copy (write/writev): whole copied
    /// frames, and the length prefixes and headers of zero-copy ones.
    pub tcp_copied_bytes: u64,
    /// Closed cache hits kept whole for the next registration of their
    /// range and access (parked) now (version 4).
    pub cache_parked: u64,
}

/// The table `fi_open_ops(&domain->fid, OXMR_MR_OPS_NAME, 0, &ops, NULL)` returns.
#[repr(C)]
pub struct oxmr_mr_ops {
    /// `sizeof(struct oxmr_mr_ops)` of the provider.
    pub size: usize,
    /// `OXMR_EXT_VERSION` of the provider.
    pub version: u32,
    /// Describe one registration; `mr` is a `struct fid_mr *` of this domain.
    /// Writes at most `info->size` bytes (so an older, smaller struct works).
    pub query: Option<unsafe extern "C" fn(mr: *mut c_void, info: *mut oxmr_mr_info) -> i32>,
    /// Domain statistics; `domain` is the `struct fid_domain *`. Writes at
    /// most `stats->size` bytes.
    pub stats: Option<unsafe extern "C" fn(domain: *mut c_void, stats: *mut oxmr_mr_stats) -> i32>,
    /// Physical runs of a physical-address registration (version 2):
    /// `*count` is the capacity of `runs` on entry and the number of runs
    /// on return. -FI_ETOOSMALL (with `*count` set to the number needed)
    /// when they do not fit, -FI_ENODATA when the addresses are
    /// unavailable, -FI_EKEYREJECTED when the registration was revoked,
    /// -FI_EINVAL for a registration that is not a physical one.
    pub phys_runs: Option<unsafe extern "C" fn(mr: *mut c_void, runs: *mut oxmr_phys_run, count: *mut usize) -> i32>,
    /// The device behind a peer-direct registration (version 3); writes at
    /// most `dev->size` bytes. -FI_ENODATA for a registration of ordinary
    /// memory or of device memory oxmr cannot name (the opt-in fallback),
    /// -FI_EKEYREJECTED when it was revoked.
    pub device: Option<unsafe extern "C" fn(mr: *mut c_void, dev: *mut oxmr_mr_device) -> i32>,
    /// Register a dma-buf (version 3), as fi_mr_regattr with FI_MR_DMABUF
    /// does under libfabric >= 1.20: `domain` a `struct fid_domain *`, `mr`
    /// receives a `struct fid_mr *`; `offset` is the address peers name its
    /// first byte with when the domain is not FI_MR_VIRT_ADDR.
    pub reg_dmabuf: Option<
        unsafe extern "C" fn(
            domain: *mut c_void,
            dmabuf: *const oxmr_mr_dmabuf,
            access: u64,
            offset: u64,
            requested_key: u64,
            flags: u64,
            mr: *mut *mut c_void,
            context: *mut c_void,
        ) -> i32,
    >,
    /// Copy `len` bytes into (`OXMR_MMIO_TO_DEVICE`) or out of device
    /// memory the way oxmr does (version 3): general-purpose register
    /// accesses only, naturally aligned, 8 bytes wide and 4 at 4-aligned
    /// edges (narrower only at an edge that is not 4-aligned), each byte
    /// touched once, and a store fence at the end with `OXMR_MMIO_WC`. For
    /// an application's own accesses to a BAR it registered, as gdrcopy's
    /// copies are.
    pub mmio_copy: Option<unsafe extern "C" fn(dst: *mut c_void, src: *const c_void, len: usize, flags: u64) -> i32>,
}

#[cfg(test)]
mod tests {
    /// cbindgen cannot export string constants, so cbindgen.toml spells
    /// them; this keeps the header and the provider in agreement.
    #[test]
    fn header_strings_match() {
        let h = include_str!("../../include/rdma/fi_ext_oxmr.h");
        assert!(h.contains(&format!("#define OXMR_PROV_NAME \"{}\"", super::OXMR_PROV_NAME)));
        assert!(h.contains(&format!("#define OXMR_MR_OPS_NAME \"{}\"", super::OXMR_MR_OPS_NAME)));
        assert!(h.contains(&format!("#define OXMR_EXT_VERSION {}", super::OXMR_EXT_VERSION)));
    }

    /// The man page and docs/variables.md describe every FI_OXMR_*
    /// variable (ci/manpage.sh also checks the page against a real
    /// `fi_info -e`, and that it names no other).
    #[test]
    fn docs_list_every_variable() {
        let page = include_str!("../../man/fi_oxmr.7");
        let table = include_str!("../../docs/variables.md");
        for p in crate::boundary::params::PARAMS {
            let var = format!("FI_OXMR_{}", p.name.to_str().unwrap().to_uppercase());
            assert!(page.contains(&format!(".B {var}\n")), "man/fi_oxmr.7 misses {var}");
            assert!(table.contains(&format!("| `{var}` |")), "docs/variables.md misses {var}");
        }
    }
}
