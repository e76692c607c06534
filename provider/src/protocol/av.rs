//! The address table behind an AV: fi_addr -> peer address, and back.
//!
//! An fi_addr_t is an index into the table, for FI_AV_TABLE (consecutive
//! from 0, never reused, as fi_av(3) promises) and for FI_AV_MAP (where
//! oxmr may choose any value; it reuses freed indexes, except in a named
//! AV). `objects::Av` wraps it with its fid, its EQ and the checks of the
//! AV calls; the engine resolves destinations and sources through it.
//!
//! A named AV (`shared`) keeps its table in a file other processes of
//! the user read: its creator writes every change there before it takes
//! effect here; a reader (FI_READ) fills its table from the file, re-read
//! when an fi_addr it does not hold is looked up, when `refresh` is asked
//! (fi_av_lookup), and at most every [`REREAD`] on other lookups.

use crate::sys::RwLockExt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use oxmr_ffi as ffi;

use super::hash::FastMap;
pub mod shared;

use crate::error::Result;
use crate::fail;
use shared::{ReadState, SharedFile, Slot};

/// How stale a reader's table may be on a lookup that finds its entry (a
/// removal by the creator reaches it then).
pub const REREAD: Duration = Duration::from_millis(1);

#[derive(Default)]
struct Table {
    slots: Vec<Option<SocketAddr>>,
    free: Vec<usize>,
    /// Address -> fi_addr, for reporting the source of received messages.
    rev: FastMap<SocketAddr, u64>,
    /// A reader's entries that are no address, and what is wrong with each.
    bad: FastMap<u64, String>,
    /// A reader: what it has read of the file, and when it last looked.
    read: ReadState,
    read_at: Option<Instant>,
}

/// A named AV's file, as its creator or a reader holds it.
enum Named {
    Creator(SharedFile),
    Reader(SharedFile),
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
    named: Option<Named>,
    /// `fi_av_attr.rx_ctx_bits`: the top bits of an fi_addr that name a
    /// receive context of a scalable endpoint (`fi_rx_addr`); 0: none.
    rx_bits: u32,
}

/// The most `rx_ctx_bits` an AV takes.
pub(crate) const MAX_RX_CTX_BITS: u32 = 16;

impl AddrTable {
    /// The same table, whose fi_addrs carry a receive context's index in
    /// their top `bits` (at most `MAX_RX_CTX_BITS`).
    pub fn with_rx_bits(mut self, bits: u32) -> Self {
        self.rx_bits = bits.min(MAX_RX_CTX_BITS);
        self
    }

    /// An fi_addr's entry and the receive context it names (0 without
    /// rx_ctx_bits).
    fn split(&self, fi_addr: u64) -> (u64, u16) {
        match self.rx_bits {
            0 => (fi_addr, 0),
            b => (fi_addr & (u64::MAX >> b), (fi_addr >> (64 - b)) as u16),
        }
    }

    /// The fi_addr of the entry an fi_addr names, without its receive
    /// context.
    pub fn base_of(&self, fi_addr: u64) -> u64 {
        self.split(fi_addr).0
    }

    /// An empty table with room for `count` addresses; `reuse` (FI_AV_MAP)
    /// hands freed indexes out again.
    pub fn new(count: usize, reuse: bool) -> Self {
        let table = Table { slots: Vec::with_capacity(count.min(1 << 16)), ..Default::default() };
        AddrTable { reuse, table: RwLock::new(table), version: AtomicU64::new(0), named: None, rx_bits: 0 }
    }

    /// The table of a named AV: its creator's (`creator`: it writes the
    /// file) or a reader's (filled from the file now).
    pub fn named(file: SharedFile, creator: bool) -> Self {
        let table = Table { slots: Vec::with_capacity(file.capacity().min(1 << 12)), ..Default::default() };
        let named = if creator { Named::Creator(file) } else { Named::Reader(file) };
        let t = AddrTable {
            reuse: false,
            table: RwLock::new(table),
            version: AtomicU64::new(0),
            named: Some(named),
            rx_bits: 0,
        };
        t.refresh();
        t
    }

    /// Whether this is a reader's table (FI_READ): no inserts or removes.
    pub fn read_only(&self) -> bool {
        matches!(self.named, Some(Named::Reader(_)))
    }

    /// A named AV's file.
    pub fn shared_file(&self) -> Option<&SharedFile> {
        match &self.named {
            Some(Named::Creator(f) | Named::Reader(f)) => Some(f),
            None => None,
        }
    }

    /// A named AV's creator: mark its file closed and remove it (at
    /// fi_close of the AV, whoever still holds the table).
    pub fn close_named(&self) {
        if let Some(Named::Creator(f)) = &self.named {
            f.close();
        }
    }

    /// Insert parsed addresses (`None`: not a valid address): per address,
    /// its fi_addr or the error code (FI_EINVAL: not an address;
    /// FI_ENOSPC: a named AV is full; FI_EIO: its file could not be
    /// written; FI_EPERM: a reader's table).
    pub fn insert(&self, addrs: &[Option<SocketAddr>]) -> Vec<std::result::Result<u64, u32>> {
        match &self.named {
            None => {}
            Some(Named::Reader(_)) => return addrs.iter().map(|_| Err(ffi::FI_EPERM)).collect(),
            Some(Named::Creator(f)) => return self.insert_named(f, addrs),
        }
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

    /// The creator's insert: each address at the next index, written to
    /// the file first; kept here only once the file holds it.
    fn insert_named(&self, f: &SharedFile, addrs: &[Option<SocketAddr>]) -> Vec<std::result::Result<u64, u32>> {
        let mut t = self.table.write_ok();
        let mut next = t.slots.len();
        let mut entries = Vec::new();
        let mut results: Vec<_> = addrs
            .iter()
            .map(|a| match a {
                None => Err(ffi::FI_EINVAL),
                Some(_) if next >= f.capacity() => Err(ffi::FI_ENOSPC),
                Some(a) => {
                    entries.push((next, SharedFile::LIVE, *a));
                    next += 1;
                    Ok(next as u64 - 1)
                }
            })
            .collect();
        let full = results.iter().filter(|r| **r == Err(ffi::FI_ENOSPC)).count();
        if full > 0 {
            tracing::warn!(
                "fi_av_insert: {full} addresses did not fit the named AV {}, which holds {} (its count at fi_av_open); open it with a larger count",
                f.name(),
                f.capacity()
            );
        }
        if entries.is_empty() {
            return results;
        }
        if let Err(e) = f.record(&entries, next, false) {
            tracing::warn!(
                "fi_av_insert: the named AV {}'s file could not be written ({e}); {} addresses were not inserted",
                f.name(),
                entries.len()
            );
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(ffi::FI_EIO);
            }
            return results;
        }
        for (i, _, a) in entries {
            t.slots.push(Some(a));
            t.rev.insert(a, i as u64);
        }
        self.version.fetch_add(1, Ordering::Release);
        results
    }

    /// Remove entries; all-or-nothing.
    pub fn remove(&self, fi_addrs: &[u64]) -> Result<()> {
        if let Some(Named::Reader(f)) = &self.named {
            return Err(fail!(ffi::FI_EPERM, "fi_av_remove: the named AV {} was opened with FI_READ", f.name()));
        }
        let mut t = self.table.write_ok();
        for &a in fi_addrs {
            if t.slots.get(a as usize).is_none_or(|s| s.is_none()) {
                return Err(fail!(ffi::FI_EINVAL, "fi_av_remove: fi_addr {a} is not in this AV; nothing was removed"));
            }
        }
        if let Some(Named::Creator(f)) = &self.named {
            let mut entries: Vec<_> = fi_addrs
                .iter()
                .filter_map(|&a| t.slots[a as usize].map(|s| (a as usize, SharedFile::REMOVED, s)))
                .collect();
            entries.sort_by_key(|e| e.0);
            entries.dedup_by_key(|e| e.0);
            f.record(&entries, t.slots.len(), true).map_err(|e| {
                fail!(
                    ffi::FI_EIO,
                    "fi_av_remove: the named AV {}'s file could not be written ({e}); nothing was removed",
                    f.name()
                )
            })?;
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

    /// A reader's table: read what the creator published since the last
    /// read (nothing for any other table).
    pub fn refresh(&self) {
        if self.read_only() {
            let mut t = self.table.write_ok();
            self.reread(&mut t);
        }
    }

    /// A reader: re-read if `fi_addr` (Some) is beyond what was read, or
    /// the last read is older than [`REREAD`].
    fn reread_if_due(&self, fi_addr: Option<u64>) {
        if !self.read_only() {
            return;
        }
        let due = {
            let t = self.table.read_ok();
            fi_addr.is_some_and(|a| a >= t.slots.len() as u64) || t.read_at.is_none_or(|at| at.elapsed() >= REREAD)
        };
        if due {
            self.refresh();
        }
    }

    fn reread(&self, t: &mut Table) {
        let Some(Named::Reader(f)) = &self.named else { return };
        t.read_at = Some(Instant::now());
        let Some(fresh) = f.read_new(&mut t.read) else { return };
        let known_bad = if fresh.from == 0 {
            t.slots.clear();
            t.rev.clear();
            std::mem::take(&mut t.bad)
        } else {
            t.slots.truncate(fresh.from);
            FastMap::default()
        };
        for (k, slot) in fresh.slots.into_iter().enumerate() {
            let i = (fresh.from + k) as u64;
            match slot {
                Slot::Live(a) => {
                    t.slots.push(Some(a));
                    t.rev.insert(a, i);
                }
                Slot::Removed => t.slots.push(None),
                Slot::Bad(why) => {
                    if known_bad.get(&i) != Some(&why) {
                        tracing::warn!(
                            "the named AV {}: entry {i} of its file is malformed ({why}); fi_addr {i} is no address here",
                            f.name()
                        );
                    }
                    t.slots.push(None);
                    t.bad.insert(i, why);
                }
            }
        }
        self.version.fetch_add(1, Ordering::Release);
    }

    /// The address an fi_addr sends to: the one stored for its entry, or
    /// with rx_ctx_bits, that of the receive context it names: a scalable
    /// endpoint's receive context k listens at its name's port + k
    /// (`objects::sep`).
    pub fn lookup(&self, fi_addr: u64) -> Result<SocketAddr> {
        let (fi_addr, rx) = self.split(fi_addr);
        self.reread_if_due(Some(fi_addr));
        let t = self.table.read_ok();
        match t.slots.get(fi_addr as usize) {
            Some(Some(a)) if rx == 0 => Ok(*a),
            Some(Some(a)) => match a.port().checked_add(rx) {
                Some(p) => {
                    let mut to = *a;
                    to.set_port(p);
                    Ok(to)
                }
                None => Err(fail!(
                    ffi::FI_EINVAL,
                    "fi_addr {fi_addr:#x} names receive context {rx} of {a}, past port 65535: it is no scalable endpoint's context"
                )),
            },
            _ => match (t.bad.get(&fi_addr), self.shared_file()) {
                (Some(why), Some(f)) => Err(fail!(
                    ffi::FI_EINVAL,
                    "fi_addr {fi_addr:#x}: entry {fi_addr} of the named AV {} is malformed ({why}); it is no address",
                    f.name()
                )),
                _ => Err(fail!(ffi::FI_EINVAL, "fi_av_lookup: fi_addr {fi_addr:#x} is not in this AV")),
            },
        }
    }

    /// The fi_addr of an address, if inserted (for FI_SOURCE reporting).
    /// Only the address itself: a scalable endpoint's transmit context k
    /// sends from its name's port + k, and nothing a peer can prove says
    /// that an address k ports above an entry is that entry's context
    /// (it may be any other endpoint), so such a sender is found only if
    /// its own address (fi_getname of the context) was inserted.
    pub fn reverse(&self, addr: &SocketAddr) -> Option<u64> {
        self.reread_if_due(None);
        let t = self.table.read_ok();
        t.rev.get(addr).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::av::shared::{SharedFile, MAX_ENTRIES};
    use crate::wire::user_dir::tests::Scratch;
    use std::os::unix::fs::FileExt;

    fn a(i: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 2000 + i))
    }

    fn code<T>(r: Result<T>) -> u32 {
        match r {
            Ok(_) => panic!("expected an error"),
            Err(e) => e.code(),
        }
    }

    /// A creator's and a reader's table of the AV `name` in `s`.
    fn pair(s: &Scratch, name: &[u8], cap: usize) -> (AddrTable, AddrTable) {
        let d = s.dir();
        let c = AddrTable::named(SharedFile::create_in(d.clone(), name, cap, true).unwrap(), true);
        let r = AddrTable::named(SharedFile::open_in(d, name).unwrap(), false);
        (c, r)
    }

    /// `fi_rx_addr(fi_addr, rx, bits)` of fi_endpoint(3).
    fn rx_addr(fi_addr: u64, rx: u64, bits: u32) -> u64 {
        fi_addr | (rx << (64 - bits))
    }

    #[test]
    fn with_rx_ctx_bits_an_fi_addr_names_a_receive_context_at_its_port_and_a_source_only_itself() {
        let t = AddrTable::new(4, false).with_rx_bits(2);
        let top: SocketAddr = "127.0.0.1:65535".parse().unwrap();
        assert_eq!(t.insert(&[Some(a(0)), Some(a(10)), Some(top)]), [Ok(0), Ok(1), Ok(2)]);
        assert_eq!(t.lookup(rx_addr(1, 0, 2)).unwrap(), a(10));
        assert_eq!(t.lookup(rx_addr(1, 3, 2)).unwrap(), a(13));
        assert_eq!(t.lookup(rx_addr(0, 2, 2)).unwrap(), a(2));
        // (Past port 65535 is nobody's context; an index never inserted is
        // no address, whatever context it names.)
        assert_eq!(code(t.lookup(rx_addr(2, 1, 2))), ffi::FI_EINVAL);
        assert_eq!(code(t.lookup(rx_addr(3, 1, 2))), ffi::FI_EINVAL);
        assert_eq!(t.base_of(rx_addr(1, 3, 2)), 1);
        // A sender is found by its own address only (an address k ports
        // above an entry may be any endpoint).
        assert_eq!(t.reverse(&a(10)), Some(1));
        assert_eq!(t.reverse(&a(12)), None);
        assert_eq!(t.reverse(&a(1)), None);
        // Without rx_ctx_bits the top bits are part of the index.
        let plain = AddrTable::new(4, false);
        assert_eq!(plain.insert(&[Some(a(0))]), [Ok(0)]);
        assert_eq!(code(plain.lookup(rx_addr(0, 1, 2))), ffi::FI_EINVAL);
        assert_eq!(plain.reverse(&a(1)), None);
    }

    #[test]
    fn a_reader_sees_the_creators_addresses_at_the_same_fi_addrs_also_those_inserted_later() {
        let s = Scratch::new("sav-rt");
        let v6: SocketAddr = "[fe80::7%2]:9".parse().unwrap();
        let d = s.dir();
        let c = AddrTable::named(SharedFile::create_in(d.clone(), b"rt", 8, true).unwrap(), true);
        assert_eq!(c.insert(&[Some(a(0)), None, Some(v6)]), [Ok(0), Err(ffi::FI_EINVAL), Ok(1)]);
        let r = AddrTable::named(SharedFile::open_in(d.clone(), b"rt").unwrap(), false);
        assert!(r.read_only() && !c.read_only());
        assert_eq!(r.shared_file().map(|f| (f.capacity(), f.is_map())), Some((8, true)));
        assert_eq!((r.lookup(0).unwrap(), r.lookup(1).unwrap()), (a(0), v6));
        assert_eq!(r.reverse(&v6), Some(1));
        // Inserted after the reader opened: a lookup of the new fi_addr
        // reads it.
        assert_eq!(c.insert(&[Some(a(2)), Some(a(3))]), [Ok(2), Ok(3)]);
        let v = r.version();
        assert_eq!(r.lookup(3).unwrap(), a(3));
        assert_ne!(r.version(), v, "the engines' cached entries are dropped");
        assert_eq!(r.lookup(2).unwrap(), a(2));
        // A removal, and an index never reused (FI_AV_MAP too).
        c.remove(&[1]).unwrap();
        assert_eq!(c.insert(&[Some(a(4))]), [Ok(4)]);
        r.refresh();
        assert_eq!(code(r.lookup(1)), ffi::FI_EINVAL);
        assert_eq!(r.reverse(&v6), None);
        assert_eq!(r.lookup(4).unwrap(), a(4));
        for i in [0, 2, 3, 4] {
            assert_eq!(r.lookup(i).unwrap(), c.lookup(i).unwrap(), "fi_addr {i}");
        }
        // A reader neither inserts nor removes.
        assert_eq!(r.insert(&[Some(a(9))]), [Err(ffi::FI_EPERM)]);
        assert_eq!(code(r.remove(&[0])), ffi::FI_EPERM);
        // A second reader at once sees the whole table.
        let r2 = AddrTable::named(SharedFile::open_in(d, b"rt").unwrap(), false);
        assert_eq!((r2.lookup(4).unwrap(), code(r2.lookup(1))), (a(4), ffi::FI_EINVAL));
    }

    #[test]
    fn one_live_creator_per_name_readers_need_one_and_its_close_removes_the_file() {
        let s = Scratch::new("sav-own");
        let d = s.dir();
        assert_eq!(code(SharedFile::open_in(d.clone(), b"x")), ffi::FI_ENOENT, "FI_READ of a name no one made");
        let (c, r) = pair(&s, b"x", 4);
        assert_eq!(code(SharedFile::create_in(d.clone(), b"x", 4, false)), ffi::FI_EBUSY, "a second creator");
        assert!(!d.names().iter().any(|n| n.starts_with("tmp-")), "the second creator's file is gone");
        assert_eq!(c.insert(&[Some(a(0))]), [Ok(0)]);
        let file = d.path().join("av-x");
        assert!(file.exists());
        drop(c);
        assert!(!file.exists(), "the creator's close removes the file");
        // A reader keeps what it had read, and reads what the creator
        // published before it closed.
        assert_eq!(r.lookup(0).unwrap(), a(0));
        assert_eq!(code(r.lookup(1)), ffi::FI_EINVAL);
        assert_eq!(code(SharedFile::open_in(d.clone(), b"x")), ffi::FI_ENOENT, "a closed AV");
        // The name is free again.
        SharedFile::create_in(d, b"x", 4, false).expect("a new creator");
    }

    #[test]
    fn a_file_left_by_a_creator_that_died_is_refused_to_readers_and_replaced_by_a_creator() {
        let s = Scratch::new("sav-stale");
        let d = s.dir();
        let c = SharedFile::create_in(d.clone(), b"st", 4, false).unwrap();
        let bytes = std::fs::read(d.path().join("av-st")).unwrap();
        // Its copy, as a dead creator would leave it: no lock.
        std::mem::forget(c);
        d.unlink("av-st").unwrap();
        std::fs::write(d.path().join("av-st"), &bytes).unwrap();
        std::fs::set_permissions(d.path().join("av-st"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        assert_eq!(code(SharedFile::open_in(d.clone(), b"st")), ffi::FI_ENOENT);
        let c = AddrTable::named(SharedFile::create_in(d.clone(), b"st", 4, false).unwrap(), true);
        assert_eq!(c.insert(&[Some(a(1))]), [Ok(0)]);
        let r = AddrTable::named(SharedFile::open_in(d, b"st").unwrap(), false);
        assert_eq!(r.lookup(0).unwrap(), a(1));
    }

    #[test]
    fn a_scribbled_entry_is_no_address_and_the_others_stay() {
        let s = Scratch::new("sav-bad");
        let (c, r) = pair(&s, b"b", 8);
        assert_eq!(c.insert(&[Some(a(0)), Some(a(1)), Some(a(2))]), [Ok(0), Ok(1), Ok(2)]);
        let f = std::fs::OpenOptions::new().write(true).open(s.dir().path().join("av-b")).unwrap();
        // Entry 1's port bytes.
        f.write_all_at(&[0xee, 0xee], 64 + 64 + 8 + 2).unwrap();
        assert_eq!(r.lookup(0).unwrap(), a(0));
        assert_eq!(code(r.lookup(1)), ffi::FI_EINVAL);
        assert_eq!(r.lookup(2).unwrap(), a(2));
        assert_eq!(r.reverse(&a(1)), None);
        // An entry the header publishes but no one wrote (zeros).
        f.write_all_at(&[0u8; 64], 64 + 2 * 64).unwrap();
        c.remove(&[0]).unwrap();
        r.refresh();
        assert_eq!((code(r.lookup(0)), code(r.lookup(2))), (ffi::FI_EINVAL, ffi::FI_EINVAL));
        assert_eq!(c.lookup(2).unwrap(), a(2), "the creator's own table is its memory");
    }

    #[test]
    fn a_truncated_or_out_of_bounds_file_stops_the_reader_without_harm() {
        let s = Scratch::new("sav-trunc");
        let path = s.dir().path().join("av-t");
        let (c, r) = pair(&s, b"t", 8);
        assert_eq!(c.insert(&[Some(a(0)), Some(a(1))]), [Ok(0), Ok(1)]);
        assert_eq!(r.lookup(0).unwrap(), a(0));
        // Cut below the entries the header publishes: the reader keeps
        // what it read and reads no more.
        assert_eq!(c.insert(&[Some(a(2))]), [Ok(2)]);
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(64 + 64 + 10).unwrap();
        assert_eq!(code(r.lookup(2)), ffi::FI_EINVAL);
        assert_eq!(r.lookup(1).unwrap(), a(1));
        // Cut to nothing, and a header that claims more than the file
        // could hold: refused the same way by a new reader.
        let (c2, r2) = pair(&s, b"u", 8);
        let p2 = s.dir().path().join("av-u");
        std::fs::OpenOptions::new().write(true).open(&p2).unwrap().set_len(0).unwrap();
        assert_eq!(c2.insert(&[Some(a(0))]), [Ok(0)], "the creator writes on (the file grows again)");
        std::fs::OpenOptions::new().write(true).open(&p2).unwrap().set_len(0).unwrap();
        assert_eq!(code(r2.lookup(0)), ffi::FI_EINVAL);
        let (c3, r3) = pair(&s, b"v", 8);
        let p3 = s.dir().path().join("av-v");
        let f = std::fs::OpenOptions::new().write(true).open(&p3).unwrap();
        f.write_all_at(&(MAX_ENTRIES as u64 * 4).to_le_bytes(), 24).unwrap();
        f.write_all_at(&6u64.to_le_bytes(), 32).unwrap();
        assert_eq!(code(r3.lookup(0)), ffi::FI_EINVAL, "used above capacity: nothing is read");
        drop((c, c2, c3));
    }

    #[test]
    fn a_named_av_is_bounded() {
        let s = Scratch::new("sav-bounds");
        let d = s.dir();
        assert_eq!(code(SharedFile::create_in(d.clone(), b"z", 0, false)), ffi::FI_EINVAL);
        assert_eq!(code(SharedFile::create_in(d.clone(), b"z", MAX_ENTRIES + 1, false)), ffi::FI_EINVAL);
        assert_eq!(code(SharedFile::create_in(d.clone(), b"", 4, false)), ffi::FI_EINVAL);
        let c = AddrTable::named(SharedFile::create_in(d.clone(), b"z", 2, false).unwrap(), true);
        assert_eq!(c.insert(&[Some(a(0)), Some(a(1)), Some(a(2))]), [Ok(0), Ok(1), Err(ffi::FI_ENOSPC)]);
        let len = std::fs::metadata(d.path().join("av-z")).unwrap().len();
        assert_eq!(len, 64 + 2 * 64);
        let big = SharedFile::create_in(d, b"big", MAX_ENTRIES, false).unwrap();
        assert_eq!(big.capacity(), MAX_ENTRIES);
    }
}
