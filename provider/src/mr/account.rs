//! Pinned-byte accounting against a cap, per domain and per process.
//!
//! The cap defaults to the RLIMIT_MEMLOCK soft limit, the budget the kernel
//! enforces on io_uring and mlock pins, and is unlimited when that limit is
//! infinite or the process has CAP_IPC_LOCK. `FI_OXMR_MR_MAX_PINNED`
//! overrides it. oxmr checks before pinning so that going over fails with
//! -FI_ENOMEM and a line naming the limit, never a partial pin. Bytes are
//! counted page-rounded (4 KiB) per registration (overlapping
//! registrations are charged twice, as the kernel does); io_uring charges
//! whole compound pages (huge pages) and per user, so the kernel may refuse
//! before this count reaches the cap (docs/registration.md, "Accounting").

use std::sync::atomic::{AtomicU64, Ordering};

use oxmr_ffi as ffi;

use crate::error::Result;
use crate::fail;

static PROCESS_PINNED: AtomicU64 = AtomicU64::new(0);

/// Bytes oxmr holds pinned in this process, across domains.
pub fn process_pinned() -> u64 {
    PROCESS_PINNED.load(Ordering::Acquire)
}

fn has_cap_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("CapEff:"))?;
            u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// Where the cap came from, for log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapSource {
    Rlimit,
    Variable,
}

/// The cap in force: `None` is unlimited.
pub fn default_cap(variable: Option<u64>) -> (Option<u64>, CapSource) {
    if let Some(v) = variable {
        return (Some(v), CapSource::Variable);
    }
    let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } == 0;
    if !ok || rl.rlim_cur == libc::RLIM_INFINITY || has_cap_ipc_lock() {
        (None, CapSource::Rlimit)
    } else {
        (Some(rl.rlim_cur), CapSource::Rlimit)
    }
}

/// A domain's account.
pub struct Account {
    pinned: AtomicU64,
    cap: Option<u64>,
    source: CapSource,
}

/// Page-rounded size of a range, as the kernel charges it.
pub fn charged(addr: usize, len: usize) -> u64 {
    if len == 0 {
        return 0;
    }
    let page = 4096usize;
    let start = addr & !(page - 1);
    let end = (addr + len).div_ceil(page) * page;
    (end - start) as u64
}

impl Account {
    pub fn new(cap: Option<u64>, source: CapSource) -> Self {
        Account { pinned: AtomicU64::new(0), cap, source }
    }

    /// Bytes this domain holds pinned.
    pub fn pinned(&self) -> u64 {
        self.pinned.load(Ordering::Acquire)
    }

    /// The cap, if any.
    pub fn cap(&self) -> Option<u64> {
        self.cap
    }

    /// Reserve `bytes` before pinning them.
    pub fn reserve(&self, bytes: u64) -> Result<()> {
        let now = PROCESS_PINNED.fetch_add(bytes, Ordering::AcqRel) + bytes;
        if let Some(cap) = self.cap {
            if now > cap {
                PROCESS_PINNED.fetch_sub(bytes, Ordering::AcqRel);
                let how = match self.source {
                    CapSource::Rlimit => "the RLIMIT_MEMLOCK soft limit; raise it (ulimit -l, /etc/security/limits.conf, systemd LimitMEMLOCK) or grant CAP_IPC_LOCK",
                    CapSource::Variable => "FI_OXMR_MR_MAX_PINNED; raise or unset it",
                };
                return Err(fail!(
                    ffi::FI_ENOMEM,
                    "fi_mr_reg: pinning {bytes} more bytes would hold {now} bytes pinned, over the {cap}-byte cap set by {how}; or close registrations first"
                ));
            }
        }
        self.pinned.fetch_add(bytes, Ordering::AcqRel);
        Ok(())
    }

    /// Give back bytes reserved earlier.
    pub fn release(&self, bytes: u64) {
        PROCESS_PINNED.fetch_sub(bytes, Ordering::AcqRel);
        self.pinned.fetch_sub(bytes, Ordering::AcqRel);
    }
}
