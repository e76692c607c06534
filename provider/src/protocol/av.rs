//! The address table behind an AV: fi_addr -> peer address, and back.
//!
//! An fi_addr_t is an index into the table, for FI_AV_TABLE (consecutive
//! from 0, never reused, as fi_av(3) promises) and for FI_AV_MAP (where
//! oxmr may choose any value; it reuses freed indexes). `objects::Av`
//! wraps it with its fid, its EQ and the checks of the AV calls; the
//! engine resolves destinations and sources through it.

use crate::sys::RwLockExt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use oxmr_ffi as ffi;

use super::hash::FastMap;
use crate::error::Result;
use crate::fail;

#[derive(Default)]
struct Table {
    slots: Vec<Option<SocketAddr>>,
    free: Vec<usize>,
    /// Address -> fi_addr, for reporting the source of received messages.
    rev: FastMap<SocketAddr, u64>,
}

/// An AV's addresses.
pub struct AddrTable {
    /// FI_AV_MAP: freed indexes are reused.
    reuse: bool,
    table: RwLock<Table>,
    /// Bumped after every change to `table`: engines keep the entries they
    /// use most recently and trust them while this is unchanged, so a
    /// message's path reads no lock here (see [`AddrTable::version`]).
    version: AtomicU64,
}

impl AddrTable {
    /// An empty table with room for `count` addresses; `reuse` (FI_AV_MAP)
    /// hands freed indexes out again.
    pub fn new(count: usize, reuse: bool) -> Self {
        let table = Table { slots: Vec::with_capacity(count.min(1 << 16)), free: Vec::new(), rev: Default::default() };
        AddrTable { reuse, table: RwLock::new(table), version: AtomicU64::new(0) }
    }

    /// Insert parsed addresses (`None`: not a valid address): per address,
    /// its fi_addr or the error code.
    pub fn insert(&self, addrs: &[Option<SocketAddr>]) -> Vec<std::result::Result<u64, u32>> {
        let mut t = self.table.write_ok();
        let results = addrs
            .iter()
            .map(|a| match a {
                None => Err(ffi::FI_EINVAL),
                Some(a) => {
                    let idx = match (self.reuse, t.free.pop()) {
                        (true, Some(i)) => {
                            t.slots[i] = Some(*a);
                            i
                        }
                        _ => {
                            t.slots.push(Some(*a));
                            t.slots.len() - 1
                        }
                    };
                    t.rev.insert(*a, idx as u64);
                    Ok(idx as u64)
                }
            })
            .collect();
        self.version.fetch_add(1, Ordering::Release);
        results
    }

    /// Remove entries; all-or-nothing.
    pub fn remove(&self, fi_addrs: &[u64]) -> Result<()> {
        let mut t = self.table.write_ok();
        for &a in fi_addrs {
            if t.slots.get(a as usize).is_none_or(|s| s.is_none()) {
                return Err(fail!(ffi::FI_EINVAL, "fi_av_remove: fi_addr {a} is not in this AV; nothing was removed"));
            }
        }
        for &a in fi_addrs {
            if let Some(old) = t.slots[a as usize].take() {
                if t.rev.get(&old) == Some(&a) {
                    // The same address may sit in another slot too.
                    match t.slots.iter().position(|s| *s == Some(old)) {
                        Some(i) => t.rev.insert(old, i as u64),
                        None => t.rev.remove(&old),
                    };
                }
                // (Inside: an fi_addr listed twice is freed once.)
                if self.reuse {
                    t.free.push(a as usize);
                }
            }
        }
        self.version.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// The table's version: it changes after every insert and remove, so a
    /// copy of an entry read when the version was `v` is still the entry
    /// while `version() == v` (read the version first, then the entry).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The address stored for an fi_addr.
    pub fn lookup(&self, fi_addr: u64) -> Result<SocketAddr> {
        let t = self.table.read_ok();
        match t.slots.get(fi_addr as usize) {
            Some(Some(a)) => Ok(*a),
            _ => Err(fail!(ffi::FI_EINVAL, "fi_av_lookup: fi_addr {fi_addr:#x} is not in this AV")),
        }
    }

    /// The fi_addr of an address, if inserted (for FI_SOURCE reporting).
    pub fn reverse(&self, addr: &SocketAddr) -> Option<u64> {
        let t = self.table.read_ok();
        t.rev.get(addr).copied()
    }
}
