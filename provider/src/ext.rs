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
pub const OXMR_EXT_VERSION: u32 = 2;

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
/// Peer-direct registration (reserved; not implemented yet).
pub const OXMR_MR_CLASS_PEER: u32 = 5;

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

    /// The README's variable table lists every FI_OXMR_* variable.
    #[test]
    fn readme_lists_every_variable() {
        let readme = include_str!("../../README.md");
        for p in crate::boundary::params::PARAMS {
            let var = format!("FI_OXMR_{}", p.name.to_str().unwrap().to_uppercase());
            assert!(readme.contains(&format!("| `{var}` |")), "README misses {var}");
        }
    }
}
