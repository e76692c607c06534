//! The lazy-deregistration cache.
//!
//! Closing a cacheable registration keeps its pin in an LRU instead of
//! unpinning; a later registration of the same range, or of a range inside
//! it, with access the entry covers, reuses the pin. What is cached is only
//! the pin: every registration still gets its own fresh key.
//!
//! Policy:
//! - one entry per single-iov registration, exactly its range; overlapping
//!   and adjacent registrations get entries of their own (no merging), and a
//!   lookup uses any valid entry that contains the asked range;
//! - access is part of the match: a hit never grants access the entry was
//!   not validated and pinned for (read-only memory is cached read-only);
//! - bounded by `max_bytes` and `max_count` (FI_OXMR_MR_CACHE_MAX_SIZE /
//!   _MAX_COUNT); only unused entries are evicted, least recently used
//!   first; when pinning fails for lack of memlock budget, every unused entry
//!   is evicted and the pin retried once.
//!
//! Correctness: a range is watched by the userfaultfd monitor *before* it
//! is pinned, and after pinning the monitor's log is checked for an event on
//! it (subscribe, pin, validate). Every lookup first applies the log, after
//! waiting for a read in progress (see `uffd`), so once munmap / mremap /
//! madvise has returned to the thread that called it, no lookup returns an
//! entry for that range. munmap, brk and mremap report after the change, so
//! a pin taken after the event holds the new pages; madvise reports before
//! discarding, so a pin that raced with a discard of its range in the last
//! 50 ms is not cached (see `get`). A range the monitor cannot watch is not
//! cached.
//!
//! Locks, in order: `state` (this cache), then the monitor's log lock. The
//! monitor takes only its log lock and never allocates under it, so code
//! holding `state` may free memory (which may munmap and wait for the
//! monitor) without deadlock. Nothing here patches code or hooks malloc.

use crate::sys::LockExt;
use std::any::{Any, TypeId};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oxmr_ffi as ffi;

use super::pin::{Pin, Pinner};
use super::protwatch::{Change, Drained, ProtWatch};
use super::registry::Region;
use super::uffd::{Cause, Invalidation, Monitor};
use crate::error::Result;
use crate::sys::{SpinGuard, SpinLock};

/// A cached pin.
pub struct Entry {
    pub id: u64,
    pub start: usize,
    pub len: usize,
    /// Access the range was validated and pinned for.
    pub access: u64,
    pub pin: Pin,
    /// PFN of every page as pinned (FI_OXMR_MR_RECORD_PFN), else empty.
    pub pfns: Vec<u64>,
    /// Set for good when its memory was unmapped or moved: the
    /// registrations using it are revoked (`Registry::check` reads this).
    pub revoked: AtomicBool,
    /// The remote accesses (FI_REMOTE_* bits) its memory's protection no
    /// longer allows (mprotect while in use; `Registry::check` reads it).
    pub denied: AtomicU64,
    /// Out of service for good: detached or taken out of the index by an
    /// invalidation (set under the cache's lock). A registration using it
    /// is not parked (`Cache::park` reads it without the index).
    retired: AtomicBool,
}

impl Entry {
    /// The recorded PFN of the page holding `addr` (0 if not recorded).
    pub fn pfn_at(&self, addr: usize) -> u64 {
        let first = self.start / 4096;
        self.pfns.get(addr / 4096 - first.min(addr / 4096)).copied().unwrap_or(0)
    }
}

struct Slot {
    entry: Arc<Entry>,
    users: usize,
    last_use: u64,
    /// Served to no new registration: a discard (or a log overflow) took
    /// it out of service while in use. It stays in the index until its last
    /// user closes, so that a later unmap or remap still finds it and
    /// revokes its registrations (a cache hit is tracked by its entry
    /// alone, not in `live`).
    detached: bool,
}

/// A closed registration kept whole, pin and allocation, for the next
/// registration of exactly its range and access (`Cache::park`).
///
/// A cache hit otherwise builds a registration around the cached pin and
/// takes it apart again at close: the allocation, the region's fields, the
/// entry's use count and LRU element, the domain and cache references.
/// Applications that register the same buffer for every transfer (MPI's
/// ofi components do) pay that each time; a parked registration is handed
/// out again under a fresh key instead. What makes a hit honest is asked
/// of it as of any hit: the fork token, the monitor's log applied first
/// (an unmap, remap, discard or protection change of its range takes it
/// out of the park and gives its pin back to the cache's rules), and the
/// entry still in service. It counts as a user of its entry, so it is
/// never evicted while parked; a miss, a flush and the domain's close
/// empty the park first, so the cache's limits and its LRU see closed
/// registrations as unused again before they act.
#[derive(Default)]
struct Parked {
    start: usize,
    len: usize,
    access: u64,
    /// Its entry's index key.
    slot: (usize, u64),
    /// (None: a free place in `Park`.)
    region: Option<Parkable>,
}

/// The parked registrations, newest last, in places written field by
/// field (a `Vec::push` of the whole struct built it on the stack and
/// copied it back with wider loads than its stores: a store-forwarding
/// stall that was a twentieth of a cached registration).
#[derive(Default)]
struct Park {
    places: [Parked; PARKED_MAX],
    n: usize,
}

impl Park {
    fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Park `region` (the caller checked there is room).
    #[inline(always)]
    fn put(&mut self, start: usize, len: usize, access: u64, slot: (usize, u64), region: Parkable) {
        let p = &mut self.places[self.n];
        p.start = start;
        p.len = len;
        p.access = access;
        p.slot = slot;
        p.region = Some(region);
        self.n += 1;
    }

    /// The newest parked registration of exactly [a, a+l) with `access`,
    /// taken out: its region and entry's index key.
    #[inline(always)]
    fn take(&mut self, a: usize, l: usize, access: u64) -> Option<(Parkable, (usize, u64))> {
        let i = self.places[..self.n].iter().rposition(|p| p.start == a && p.len == l && p.access == access)?;
        Some(self.take_at(i))
    }

    #[inline(always)]
    fn take_at(&mut self, i: usize) -> (Parkable, (usize, u64)) {
        self.n -= 1;
        // (The newest is the usual one: nothing to move.)
        if i != self.n {
            self.places.swap(i, self.n);
        }
        let p = &mut self.places[self.n];
        (p.region.take().expect("a parked place holds a region"), p.slot)
    }
}

/// How many of an entry's users are parked registrations (closed, kept
/// whole: see `Parked`); the others are open. (Asked only when an
/// invalidation touches the entry: a scan of at most PARKED_MAX places,
/// where a count in the slot cost an index descent per park and unpark.)
fn parked_of(park: &Park, slot: (usize, u64)) -> usize {
    park.places[..park.n].iter().filter(|p| p.slot == slot).count()
}

/// A parked registration, as the cache holds it: both references a live
/// registration has (`mr::park`), the application's handle (the owning
/// layer's `Region<T>`, which it gets back by downcasting) and the
/// registry's. Dropped (an invalidation, a flush), both go.
pub struct Parkable {
    handle: Arc<dyn Any + Send + Sync>,
    pub keyed: Arc<Region>,
}

/// Registrations parked per cache at most.
const PARKED_MAX: usize = 16;

struct State {
    /// Valid entries by (start, id).
    index: BTreeMap<(usize, u64), Slot>,
    /// Unused valid entries, least recently used first, as (last use,
    /// index key). Lazily pruned: an element is current only while its
    /// entry is in the index, unused, with that `last_use`; a hit leaves
    /// its element behind (stale) instead of searching for it, and `evict`
    /// skips stale ones (two ordered-map updates per hit and close were a
    /// tenth of a cache hit's cost).
    lru: VecDeque<(u64, (usize, u64))>,
    /// Monitor log position applied.
    seq: u64,
    tick: u64,
    next_id: u64,
    bytes: u64,
    longest: usize,
    /// Recent discards (madvise), kept for `REMOVE_GRACE`.
    removes: VecDeque<(u64, u64, Instant)>,
    /// Closed registrations kept whole (`Parked`).
    parked: Park,
    /// The type every registration in the park was parked as (a domain
    /// parks its one tail type; set by the first `park`): `unpark` compares
    /// it once instead of downcasting each handle, whose virtual `type_id`
    /// call and failure path were ~7 ns of a hit on the AMD EPYC of
    /// 2026-12-07 (docs/registration.md).
    parked_ty: Option<TypeId>,
    /// The registry's second key pool (`KeyPool::second`): a parked
    /// registration's new provider key is drawn under this lock.
    keys: super::registry::KeyPool,
}

/// How long a discard keeps its range from being cached (see `get`).
const REMOVE_GRACE: Duration = Duration::from_millis(50);

/// Counters exported through the extension API.
#[derive(Default)]
pub struct CacheStats {
    /// (Written only under the cache's state lock.)
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub uncached: AtomicU64,
    pub evictions: AtomicU64,
    pub inv_unmap: AtomicU64,
    pub inv_remove: AtomicU64,
    pub inv_remap: AtomicU64,
    pub inv_overflow: AtomicU64,
    /// Entries taken out of service by a protection change (mprotect).
    pub inv_protect: AtomicU64,
}

/// A domain's cache.
pub struct Cache {
    /// (A spin lock: held for map updates, never across a pin; the longest
    /// holds are applying an unmap, which unpins the unused entries it
    /// drops, and waiting for the monitor's read in progress. Waiters yield
    /// and nap after a short spin. It releases with a plain store, one
    /// locked instruction fewer than a Mutex, twice per cache hit.)
    state: SpinLock<State>,
    monitor: &'static Monitor,
    pub max_bytes: u64,
    pub max_count: usize,
    pub record_pfn: bool,
    pub stats: CacheStats,
    /// The process the cache belongs to (a forked child bypasses it):
    /// `sys::process_token`, which tells without a system call.
    process: u64,
    /// The monitor's event count when the log was last applied by
    /// `refresh` (or at creation).
    seen: AtomicU64,
    /// Open registrations, watched so that an unmap or remap of their
    /// memory revokes them: (start, end, region). Every registration whose
    /// ranges the monitor watches is here, cached or not.
    live: Mutex<Vec<Live>>,
    /// mprotect, as perf records it (None: not allowed here; then a hit
    /// validates its range as a miss does, reading /proc/self/maps).
    prot: Option<ProtWatch>,
}

/// A tracked open registration (see `Cache::live`): one range of it, and
/// its revocation flag, which the registration shares (so the cache never
/// holds, and never drops, the registration itself: dropping its last
/// reference under the cache's lock would give a cached pin back and take
/// that lock again).
struct Live {
    start: u64,
    end: u64,
    key: u64,
    revoked: Arc<AtomicBool>,
    /// The registration's `denied` bits (see `Region::denied`).
    denied: Arc<AtomicU64>,
    /// All of the registration's ranges, to read their protection anew.
    ranges: Arc<[(usize, usize)]>,
}

impl Live {
    /// Whether the registration is still open (it holds the flag too).
    fn open(&self) -> bool {
        Arc::strong_count(&self.revoked) > 1
    }
}

/// A registration's use of a cache entry; gives it back on drop.
pub struct CacheRef {
    pub(super) cache: Arc<Cache>,
    pub entry: Arc<Entry>,
}

impl Drop for CacheRef {
    fn drop(&mut self) {
        self.cache.release(&self.entry);
    }
}

/// Whether any part of [a, a+l) is a shared mapping (or cannot be told).
fn shared_in(a: usize, l: usize) -> bool {
    let mut at = a;
    while at < a + l {
        match super::phys::vma_at(at) {
            Ok(Some(v)) if v.start <= at && v.end > at => {
                if v.shared {
                    return true;
                }
                at = v.end;
            }
            // A hole: the pin fails on it anyway.
            Ok(_) => return false,
            Err(_) => return true,
        }
    }
    false
}

/// Revoke an open registration (one warning line, the first time).
fn revoke_live(revoked: &AtomicBool, key: u64, at: u64, why: &str) {
    if !revoked.swap(true, Ordering::AcqRel) {
        tracing::warn!(
            "registration {key:#x} revoked: its memory at {at:#x} was {why} while registered; peers now get FI_EACCES (close it, and register the new memory)"
        );
    }
}

/// Read the protection of `ranges` now and store the remote accesses it
/// no longer allows into `denied` (FI_REMOTE_READ: not readable;
/// FI_REMOTE_WRITE: not writable; both where unmapped). Off the data path:
/// only after a recorded change touches the ranges.
fn set_denied(denied: &AtomicU64, ranges: &[(usize, usize)]) {
    let (r, w) = (ffi::FI_REMOTE_READ as u64, ffi::FI_REMOTE_WRITE as u64);
    let mut bits = 0;
    for &(a, l) in ranges.iter().filter(|x| x.1 > 0) {
        match super::maps::mappings_in(a, l) {
            Ok(m) => {
                if super::maps::first_gap(&m, a, l).is_some() {
                    bits |= r | w;
                }
                for x in &m {
                    if !x.read {
                        bits |= r;
                    }
                    if !x.write {
                        bits |= w;
                    }
                }
            }
            Err(_) => bits |= r | w,
        }
    }
    if denied.swap(bits, Ordering::AcqRel) != bits && bits != 0 {
        tracing::warn!(
            "registered memory at {:#x} had its protection changed (mprotect) while registered: remote {} now refused with FI_EACCES",
            ranges.first().map_or(0, |x| x.0),
            match (bits & r != 0, bits & w != 0) {
                (true, true) => "reads and writes",
                (true, false) => "reads",
                _ => "writes",
            }
        );
    }
}

/// Move the parked registrations of the entry at index key `slot` to `out`.
fn unpark_slot(parked: &mut Park, slot: (usize, u64), out: &mut Vec<Parkable>) {
    let mut i = 0;
    while i < parked.n {
        if parked.places[i].slot == slot {
            out.push(parked.take_at(i).0);
        } else {
            i += 1;
        }
    }
}

fn overlaps(a: usize, alen: usize, i: &Invalidation) -> bool {
    (a as u64) < i.end && i.start < (a + alen) as u64
}

impl Cache {
    /// A cache, if the process monitor is available.
    pub fn new(max_bytes: u64, max_count: usize, record_pfn: bool) -> Option<Arc<Self>> {
        Self::new_watching(max_bytes, max_count, record_pfn, true)
    }

    /// `new`; `watch_prot` false: as where perf is not allowed (tests).
    fn new_watching(max_bytes: u64, max_count: usize, record_pfn: bool, watch_prot: bool) -> Option<Arc<Self>> {
        let monitor = Monitor::get()?;
        let prot = match ProtWatch::open().and_then(|w| {
            if watch_prot {
                Ok(w)
            } else {
                Err(std::io::Error::other("off for this test"))
            }
        }) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::info!(
                    "mprotect cannot be watched here (perf: {e}); cache hits check their range in /proc/self/maps, as misses do (kernel.perf_event_paranoid <= 2 makes hits free of system calls)"
                );
                None
            }
        };
        let seq_events = monitor.events();
        let seq = monitor.head();
        Some(Arc::new(Cache {
            state: SpinLock::new(State {
                index: BTreeMap::new(),
                lru: VecDeque::new(),
                seq,
                tick: 0,
                next_id: 1,
                bytes: 0,
                longest: 0,
                removes: VecDeque::new(),
                parked: Park::default(),
                parked_ty: None,
                keys: super::registry::KeyPool::second(),
            }),
            monitor,
            max_bytes,
            max_count,
            record_pfn,
            stats: CacheStats::default(),
            process: crate::sys::process_token(),
            seen: AtomicU64::new(seq_events),
            live: Mutex::new(Vec::new()),
            prot,
        }))
    }

    fn lock(&self) -> SpinGuard<'_, State> {
        self.state.lock()
    }

    /// Whether the log holds, from `since` on, an event touching [a, a+l)
    /// (or an overflow, after which nothing can be trusted).
    fn touched_since(&self, since: u64, a: usize, l: usize) -> bool {
        self.logged_since(since, |i| i.cause == Cause::Overflow || overlaps(a, l, i))
    }

    /// Whether the log holds, from `since` on, an event for which `hit`
    /// is true (read in batches of 64).
    fn logged_since(&self, since: u64, hit: impl Fn(&Invalidation) -> bool) -> bool {
        if self.monitor.up_to_date(since) {
            return false;
        }
        let mut buf = [Invalidation { start: 0, end: 0, cause: Cause::Unmap }; 64];
        let mut from = since;
        loop {
            let (next, n) = self.monitor.since(from, &mut buf);
            if buf[..n].iter().any(&hit) {
                return true;
            }
            if n < buf.len() {
                return false;
            }
            from = next;
        }
    }

    /// Apply the monitor's log to the index (invalidating what it names),
    /// and the protection changes perf recorded. Parked registrations of
    /// the entries it invalidates go to `out`, which the caller drops after
    /// the lock (each gives its pin back through `release`, which locks):
    /// declared before the guard, it is dropped after it.
    #[inline(always)]
    fn sync(&self, s: &mut State, out: &mut Vec<Parkable>) {
        // (Nothing new in the log, a hit's usual case, asked in line.)
        if !self.monitor.up_to_date(s.seq) {
            self.sync_uffd(s, out);
        }
        // (After the unmaps: the new mapping at an unmapped range is
        // recorded too, and must find the old entry gone, not detach it.)
        if self.prot.as_ref().is_some_and(|w| w.pending()) {
            self.sync_prot(s, out);
        }
    }

    fn sync_uffd(&self, s: &mut State, out: &mut Vec<Parkable>) {
        if self.monitor.up_to_date(s.seq) {
            return;
        }
        let mut buf = [Invalidation { start: 0, end: 0, cause: Cause::Unmap }; 64];
        loop {
            let (next, n) = self.monitor.since(s.seq, &mut buf);
            for inv in &buf[..n] {
                self.invalidate(s, inv, out);
            }
            s.seq = next;
            if n < buf.len() {
                return;
            }
        }
    }

    /// Apply recorded protection changes: an entry they touch serves no new
    /// registration (the next one is a miss, which checks the memory as it
    /// is now, so a hit never grants what a miss would refuse), and the
    /// open registrations they touch learn which remote accesses their
    /// memory allows now (`denied`). New mappings are recorded too; they
    /// touch no entry.
    fn sync_prot(&self, s: &mut State, out: &mut Vec<Parkable>) {
        let Some(w) = &self.prot else { return };
        let changes = match w.drain() {
            Drained::Changes(v) => v,
            Drained::Lost => {
                // (Changes were lost: every entry and registration is
                // looked at anew.)
                vec![Change { start: 0, end: u64::MAX, prot: 0 }]
            }
        };
        for c in &changes {
            let inv = Invalidation { start: c.start, end: c.end, cause: Cause::Protect };
            let lo = (c.start as usize).saturating_sub(s.longest);
            let mut any = false;
            for (_, v) in s.index.range((lo, 0)..).take_while(|(k, _)| (k.0 as u64) < c.end) {
                if overlaps(v.entry.start, v.entry.len.max(1), &inv) {
                    any = true;
                    if v.users > parked_of(&s.parked, (v.entry.start, v.entry.id)) {
                        set_denied(&v.entry.denied, &[(v.entry.start, v.entry.len)]);
                    }
                }
            }
            if any {
                self.invalidate(s, &inv, out);
            }
        }
        if !changes.is_empty() {
            let live = self.live.lock_ok();
            for x in live.iter().filter(|x| changes.iter().any(|c| x.start < c.end && c.start < x.end)) {
                set_denied(&x.denied, &x.ranges);
            }
        }
    }

    fn invalidate(&self, s: &mut State, inv: &Invalidation, out: &mut Vec<Parkable>) {
        if inv.cause == Cause::Remove {
            let now = Instant::now();
            while s.removes.front().is_some_and(|r| now - r.2 > REMOVE_GRACE) || s.removes.len() >= 256 {
                s.removes.pop_front();
            }
            s.removes.push_back((inv.start, inv.end, now));
        }
        let counter = match inv.cause {
            Cause::Unmap => &self.stats.inv_unmap,
            Cause::Remove => &self.stats.inv_remove,
            Cause::Remap => &self.stats.inv_remap,
            Cause::Overflow => &self.stats.inv_overflow,
            Cause::Protect => &self.stats.inv_protect,
        };
        if matches!(inv.cause, Cause::Unmap | Cause::Remap) {
            self.revoke_live_in(inv);
        }
        let lo = (inv.start as usize).saturating_sub(s.longest);
        let victims: Vec<(usize, u64)> = s
            .index
            .range((lo, 0)..)
            .take_while(|(k, _)| (k.0 as u64) < inv.end)
            .filter(|(_, v)| overlaps(v.entry.start, v.entry.len.max(1), inv))
            .map(|(k, _)| *k)
            .collect();
        let moved = matches!(inv.cause, Cause::Unmap | Cause::Remap);
        for k in victims {
            // (Parked registrations are closed: they leave the park, and
            // their pins go with them after the lock; only open ones make
            // an entry in use here.)
            let parked = parked_of(&s.parked, k);
            if parked > 0 {
                unpark_slot(&mut s.parked, k, out);
            }
            let Some(slot) = s.index.get_mut(&k) else { continue };
            let open = slot.users - parked;
            // (Out of service from here on, detached or removed.)
            slot.entry.retired.store(true, Ordering::Relaxed);
            if open > 0 && !moved {
                // In use, discarded (madvise keeps the mapping: the memory
                // is still the registered memory, refilled on touch) or
                // behind an overflow: never served again, but kept in the
                // index, detached, so that a later unmap still finds it.
                if !slot.detached {
                    slot.detached = true;
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            let Some(slot) = s.index.remove(&k) else { continue };
            if !slot.detached {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            s.bytes -= slot.entry.len as u64;
            // (Unused: its LRU element is stale now, and the pin goes.)
            if open > 0 && !slot.entry.revoked.swap(true, Ordering::AcqRel) {
                // In use: what is mapped there now is not what was
                // registered, and remote accesses go by address, so the
                // registrations using it are revoked (`Registry::check`
                // reads the entry's flag; registrations the cache does not
                // hold are tracked in `live` and logged there). The
                // registrations keep the pin until closed.
                let why = if inv.cause == Cause::Unmap { "unmapped" } else { "moved (mremap)" };
                tracing::warn!(
                    "registrations using the cached pin of {:#x}+{} revoked: that memory was {why} while registered; peers now get FI_EACCES (close them, and register the new memory)",
                    slot.entry.start,
                    slot.entry.len
                );
            }
        }
    }

    fn lookup(&self, s: &mut State, a: usize, l: usize, access: u64) -> Option<Arc<Entry>> {
        let lo = a.saturating_sub(s.longest);
        s.tick += 1;
        let tick = s.tick;
        // (One descent: the entry found is the one updated.)
        let (_, slot) = s.index.range_mut((lo, 0)..=(a, u64::MAX)).rev().find(|(_, v)| {
            let e = &v.entry;
            !v.detached && e.start <= a && a + l <= e.start + e.len && access & !e.access == 0
        })?;
        // (An unused entry's LRU element goes stale with this.)
        slot.users += 1;
        slot.last_use = tick;
        Some(slot.entry.clone())
    }

    /// Evict unused entries (LRU first) until within limits, or all of them.
    /// (Within limits, as after most closes: two compares, no call.)
    #[inline]
    fn evict(&self, s: &mut State, all: bool) -> Vec<Arc<Entry>> {
        if all || s.bytes > self.max_bytes || s.index.len() > self.max_count {
            self.evict_lru(s, all)
        } else {
            Vec::new()
        }
    }

    #[cold]
    fn evict_lru(&self, s: &mut State, all: bool) -> Vec<Arc<Entry>> {
        let mut out = Vec::new();
        while all || s.bytes > self.max_bytes || s.index.len() > self.max_count {
            let Some((t, k)) = s.lru.pop_front() else {
                break;
            };
            if !s.index.get(&k).is_some_and(|v| v.users == 0 && v.last_use == t) {
                continue;
            }
            if let Some(slot) = s.index.remove(&k) {
                s.bytes -= slot.entry.len as u64;
                self.stats.evictions.fetch_add(1, Ordering::Relaxed);
                out.push(slot.entry);
            }
        }
        out
    }

    /// A cached pin for [a, a+l) with `access`, if the cache holds one that
    /// needs nothing more (what `get` answers first, without the miss's
    /// machinery; None: ask `get`). Returned in two registers: a hit's
    /// result is not moved through memory. Without the mprotect watch a
    /// hit also reads /proc/self/maps, which `get` does (and a refusal
    /// needs its error): None then.
    #[inline]
    pub fn hit(self: &Arc<Self>, a: usize, l: usize, access: u64) -> Option<CacheRef> {
        if self.prot.is_none() || crate::sys::process_token() != self.process {
            return None;
        }
        let mut out = Vec::new();
        let mut s = self.lock();
        self.sync(&mut s, &mut out);
        let entry = self.lookup(&mut s, a, l, access)?;
        // (Written only under `state`'s lock, held here: a plain load and
        // store, no locked add on the hit path.)
        let hits = self.stats.hits.load(Ordering::Relaxed);
        self.stats.hits.store(hits + 1, Ordering::Relaxed);
        // (As in `get`: an entry in the index is watched and holds its
        // memory as of the log this sync applied, so a hit needs no
        // tracking of its own.)
        Some(CacheRef { cache: self.clone(), entry })
    }

    /// A pin for [a, a+l) with `access`: a cached one, or a new one that is
    /// cached, or (for ranges the monitor cannot watch) an uncached one;
    /// with the log position from which the range is watched and the pin
    /// known to hold its memory, for a pin the registration must track on
    /// its own (None: a cache hit, which its entry speaks for, or a range
    /// that is not watched). The registration passes it to `track_live`,
    /// so that an unmap or remap of its memory revokes it.
    pub fn get(self: &Arc<Self>, pinner: &Pinner, a: usize, l: usize, access: u64) -> Result<(Pin, Option<u64>)> {
        if crate::sys::process_token() != self.process {
            // A forked child: the entries are the parent's pins.
            return Ok((pinner.pin(&[(a, l)], access)?, None));
        }
        // A miss: the cache's limits and LRU see closed registrations as
        // unused again before it pins and inserts.
        self.unpark_all();
        for _ in 0..3 {
            {
                let mut out = Vec::new();
                let mut s = self.lock();
                self.sync(&mut s, &mut out);
                if let Some(entry) = self.lookup(&mut s, a, l, access) {
                    // (Written only under `state`'s lock, held here: a
                    // plain load and store, no locked add on the hit path.)
                    let hits = self.stats.hits.load(Ordering::Relaxed);
                    self.stats.hits.store(hits + 1, Ordering::Relaxed);
                    // (An entry in the index is watched and holds its
                    // memory as of the log this sync applied; it stays in
                    // the index while in use, detached if discarded, so
                    // every later unmap or remap of it revokes it, and
                    // with it this registration: a hit needs no tracking
                    // of its own.)
                    let pin = Pin::Cached(CacheRef { cache: self.clone(), entry });
                    if self.prot.is_none() {
                        // Nothing tells us of mprotect here: the range is
                        // checked as a miss checks it, so a hit never grants
                        // what a miss would refuse. (The pin, given back on
                        // a refusal, takes the lock: released first.)
                        drop(s);
                        super::pin::validate(&[(a, l)], access)?;
                    }
                    return Ok((pin, None));
                }
            }
            // Note the log position, then subscribe, then pin: any change
            // to the range after `since` is in the log from `since` on.
            let since = self.monitor.head();
            if shared_in(a, l) {
                // A file's pages can go (ftruncate, hole punching, another
                // process's MADV_REMOVE) without an event for our mapping.
                tracing::debug!("range {a:#x}+{l} is (partly) a shared mapping; registered uncached");
                self.stats.uncached.fetch_add(1, Ordering::Relaxed);
                return Ok((pinner.pin(&[(a, l)], access)?, None));
            }
            if let Err(e) = self.monitor.watch(a, l) {
                tracing::debug!("range {a:#x}+{l} cannot be watched ({e}); registered uncached");
                self.stats.uncached.fetch_add(1, Ordering::Relaxed);
                return Ok((pinner.pin(&[(a, l)], access)?, None));
            }
            let pin = match pinner.pin(&[(a, l)], access) {
                Err(e) if e.code() == ffi::FI_ENOMEM => {
                    // (The park first: registrations closed meanwhile.)
                    self.flush();
                    pinner.pin(&[(a, l)], access)?
                }
                r => r?,
            };
            let mut out = Vec::new();
            let mut s = self.lock();
            self.sync(&mut s, &mut out);
            // Validate after pinning, from our own `since` (not from the
            // cache's position, which other threads may have moved past an
            // event on this range): any unmap/remap/discard of the range
            // since we subscribed means the pin may hold the old pages.
            if self.touched_since(since, a, l) {
                drop(s);
                drop(pin);
                continue;
            }
            // madvise(DONTNEED/FREE/REMOVE) reports *before* it discards
            // the pages (the kernel completes the event when the monitor
            // reads it, then zaps): a pin taken in between holds pages about
            // to be dropped. Such a registration is served, but not cached;
            // the grace is far longer than the read-to-zap gap.
            let now = Instant::now();
            let raced = s.removes.iter().any(|r| now - r.2 <= REMOVE_GRACE && (a as u64) < r.1 && r.0 < (a + l) as u64);
            if raced {
                drop(s);
                self.stats.uncached.fetch_add(1, Ordering::Relaxed);
                return Ok((pin, Some(since)));
            }
            self.stats.misses.fetch_add(1, Ordering::Relaxed);
            s.tick += 1;
            let tick = s.tick;
            let id = s.next_id;
            s.next_id += 1;
            let pfns = if self.record_pfn { super::phys::pagemap_pfns(a, l) } else { Vec::new() };
            let entry = Arc::new(Entry {
                id,
                start: a,
                len: l,
                access,
                pin,
                pfns,
                revoked: AtomicBool::new(false),
                denied: AtomicU64::new(0),
                retired: AtomicBool::new(false),
            });
            s.index.insert((a, id), Slot { entry: entry.clone(), users: 1, last_use: tick, detached: false });
            s.bytes += l as u64;
            s.longest = s.longest.max(l);
            let victims = self.evict(&mut s, false);
            drop(s);
            drop(victims);
            return Ok((Pin::Cached(CacheRef { cache: self.clone(), entry }), Some(since)));
        }
        // The range kept changing under us: an uncached pin, watched again
        // first (a new mapping there is not watched yet), and tracked from
        // just before it.
        self.stats.uncached.fetch_add(1, Ordering::Relaxed);
        let since = self.monitor.head();
        let watched = self.monitor.watch(a, l).is_ok().then_some(since);
        Ok((pinner.pin(&[(a, l)], access)?, watched))
    }

    /// Park a closed registration (`Parked`): `region`, of one range, whose
    /// pin is its cached entry (`Region::cached`), and which nothing else
    /// holds. Refused (handed back, for the caller to drop) when the park
    /// is full, in a forked child, without the mprotect watch (a hit then
    /// reads /proc/self/maps), or when the entry is out of service.
    #[inline(always)]
    pub fn park<T: super::registry::Tail>(
        &self,
        region: Arc<Region<T>>,
        keyed: Arc<Region>,
    ) -> Option<(Arc<Region<T>>, Arc<Region>)> {
        if self.prot.is_none() || crate::sys::process_token() != self.process {
            return Some((region, keyed));
        }
        let (Some(e), &[(a, l)]) = (&region.cached, &*region.iovs) else { return Some((region, keyed)) };
        let mut s = self.lock();
        // (`retired` is written under this lock: an entry in service now
        // is in the index, not detached, until an invalidation, which
        // takes its parked registrations out.)
        let ty = TypeId::of::<Region<T>>();
        if s.parked.n == PARKED_MAX || e.retired.load(Ordering::Relaxed) || s.parked_ty.is_some_and(|t| t != ty) {
            return Some((region, keyed));
        }
        s.parked_ty = Some(ty);
        let (access, slot) = (region.access, (e.start, e.id));
        s.parked.put(a, l, access, slot, Parkable { handle: region, keyed });
        None
    }

    /// A parked registration of exactly [a, a+l) with `access`, taken out
    /// of the park, after the same checks as a hit (`hit`): the fork token,
    /// the monitor's log applied (what it invalidates leaves the park), the
    /// entry in service (a parked registration's entry always is: leaving
    /// service takes it out of the park). Counted as a hit. `key` makes
    /// its new key, under the same lock, from the key pool the cache holds
    /// (`KeyPool::second`). (In line: its result, returned through
    /// memory, was read back in wider loads than the stores that wrote
    /// it, a stalled store forward worth a tenth of a hit.)
    /// The registration comes back as the `Region<T>` it was parked as,
    /// with the registry's reference; None too when the park holds
    /// another type than `Region<T>`.
    #[inline(always)]
    pub fn unpark<T: super::registry::Tail>(
        &self,
        a: usize,
        l: usize,
        access: u64,
        key: impl FnOnce(&mut super::registry::KeyPool) -> u64,
    ) -> Option<(Arc<Region<T>>, Arc<Region>, u64)> {
        if self.prot.is_none() || crate::sys::process_token() != self.process {
            return None;
        }
        let mut out = Vec::new();
        let mut s = self.lock();
        self.sync(&mut s, &mut out);
        // (Leaving service takes an entry's parked registrations out of
        // the park, `invalidate`, and a retired entry's are never parked:
        // what is in the park has its entry in service. Its last use is
        // set when its last user closes.)
        if s.parked_ty != Some(TypeId::of::<Region<T>>()) {
            return None;
        }
        let (Parkable { handle, keyed }, slot) = s.parked.take(a, l, access)?;
        debug_assert!(s.index.get(&slot).is_some_and(|v| !v.detached), "a parked registration's entry is in service");
        let hits = self.stats.hits.load(Ordering::Relaxed);
        self.stats.hits.store(hits + 1, Ordering::Relaxed);
        let key = key(&mut s.keys);
        let raw = Arc::into_raw(handle).cast::<Region<T>>();
        // SAFETY: every handle in the park was an `Arc<Region<T>>` given to
        // `park` (`parked_ty` is Region<T>'s TypeId), so this is that
        // allocation's own pointer and type, as `Arc::downcast` hands back.
        Some((unsafe { Arc::from_raw(raw) }, keyed, key))
    }

    /// Empty the park: its registrations give their pins back to the
    /// cache's rules (domain close, a miss, a flush).
    pub fn unpark_all(&self) {
        let mut out = Vec::new();
        {
            // (A forked child may have been forked while another thread
            // held the lock, which no thread of the child releases: it
            // leaves the park as it is rather than wait. Its parked
            // registrations hold the domain, so that close answers
            // -FI_EBUSY instead of hanging.)
            let mut s = if crate::sys::process_token() == self.process {
                self.lock()
            } else {
                match self.state.try_lock() {
                    Some(s) => s,
                    None => {
                        tracing::info!(
                            "a forked child closing a domain: its cache's park is locked by a thread of the parent that did not survive the fork, so the closed registrations parked there stay and hold the domain (fi_close answers -FI_EBUSY); the child's memory goes at its exit"
                        );
                        return;
                    }
                }
            };
            if s.parked.is_empty() {
                return;
            }
            while s.parked.n > 0 {
                let last = s.parked.n - 1;
                out.push(s.parked.take_at(last).0);
            }
        }
        drop(out);
    }

    /// Registrations parked now.
    pub fn parked(&self) -> usize {
        self.lock().parked.n
    }

    fn release(&self, entry: &Arc<Entry>) {
        if crate::sys::process_token() != self.process {
            return;
        }
        let mut s = self.lock();
        s.tick += 1;
        let tick = s.tick;
        let key = (entry.start, entry.id);
        // (The entry only, not its slot: a word, not moved through memory.)
        let mut gone: Option<Arc<Entry>> = None;
        if let Some(slot) = s.index.get_mut(&key) {
            slot.users -= 1;
            if slot.users == 0 && slot.detached {
                // (Its pin goes with its last user, after the lock.)
                if let Some(g) = s.index.remove(&key) {
                    s.bytes -= g.entry.len as u64;
                    gone = Some(g.entry);
                }
            } else if slot.users == 0 {
                slot.last_use = tick;
                s.lru.push_back((tick, key));
            }
        }
        // (Stale elements are dropped once they outnumber the entries:
        // amortised O(1) per close, the queue at most about twice the index.)
        if s.lru.len() > 2 * s.index.len() + 64 {
            let State { lru, index, .. } = &mut *s;
            lru.retain(|(t, k)| index.get(k).is_some_and(|v| v.users == 0 && v.last_use == *t));
        }
        let victims = self.evict(&mut s, false);
        drop(s);
        drop(victims);
        drop(gone);
    }

    /// Apply the monitor's log if it has anything new (two atomic loads
    /// when not: see `Monitor::quiet_since`).
    pub fn refresh(&self) {
        let seen = self.seen.load(Ordering::Acquire);
        let prot = self.prot.as_ref().is_some_and(|w| w.pending());
        if (self.monitor.quiet_since(seen) && !prot) || crate::sys::process_token() != self.process {
            return;
        }
        let now = self.monitor.events();
        let mut out = Vec::new();
        self.sync(&mut self.lock(), &mut out);
        self.seen.fetch_max(now, Ordering::AcqRel);
    }

    /// Watch the ranges of a registration the cache does not hold (or one
    /// refreshed: `fi_mr_refresh`), before it is pinned: the log position
    /// to check from (`track_live`), or None when some range cannot be
    /// watched (then it is not tracked).
    pub fn watch_ranges(&self, iovs: &[(usize, usize)]) -> Option<u64> {
        if crate::sys::process_token() != self.process {
            return None;
        }
        let since = self.monitor.head();
        iovs.iter().filter(|x| x.1 > 0).all(|&(a, l)| self.monitor.watch(a, l).is_ok()).then_some(since)
    }

    /// Track an open registration whose ranges `watch_ranges` watched from
    /// log position `since`: an unmap or remap of them revokes it (also
    /// one that happened between the watch and now).
    pub fn track_live(&self, r: &Region, since: u64) {
        {
            let mut live = self.live.lock_ok();
            // (Closed registrations' entries are pruned when the list has
            // doubled since the last pruning: amortised O(1) per insert.)
            if live.len() >= 64 && live.len().is_power_of_two() {
                live.retain(Live::open);
            }
            let flag = r.revoked.get_or_init(|| Arc::new(AtomicBool::new(false)));
            let denied = r.denied.get_or_init(|| Arc::new(AtomicU64::new(0)));
            let ranges: Arc<[(usize, usize)]> = r.iovs.iter().copied().collect();
            for &(a, l) in r.iovs.iter().filter(|x| x.1 > 0) {
                live.push(Live {
                    start: a as u64,
                    end: (a + l) as u64,
                    key: r.key,
                    revoked: flag.clone(),
                    denied: denied.clone(),
                    ranges: ranges.clone(),
                });
            }
        }
        let moved = r.iovs.iter().filter(|x| x.1 > 0).any(|&(a, l)| self.touched_by_move(since, a, l));
        if moved {
            let flag = r.revoked.get_or_init(|| Arc::new(AtomicBool::new(false)));
            revoke_live(flag, r.key, r.iovs.first().map_or(0, |x| x.0 as u64), "unmapped or moved");
        }
    }

    /// Whether the log holds, from `since` on, an unmap or remap of
    /// [a, a+l) (discards do not count: see `invalidate`).
    fn touched_by_move(&self, since: u64, a: usize, l: usize) -> bool {
        self.logged_since(since, |i| matches!(i.cause, Cause::Unmap | Cause::Remap) && overlaps(a, l, i))
    }

    /// Revoke the tracked open registrations an unmap or remap touches.
    fn revoke_live_in(&self, inv: &Invalidation) {
        let mut live = self.live.lock_ok();
        live.retain(Live::open);
        for x in live.iter().filter(|x| x.start < inv.end && inv.start < x.end) {
            let why = if inv.cause == Cause::Unmap { "unmapped" } else { "moved (mremap)" };
            revoke_live(&x.revoked, x.key, x.start, why);
        }
    }

    /// Evict every unused entry (domain close, memlock pressure), parked
    /// registrations first.
    pub fn flush(&self) {
        self.unpark_all();
        let victims = self.evict(&mut self.lock(), true);
        drop(victims);
    }

    /// (entries, bytes) cached now.
    pub fn size(&self) -> (usize, u64) {
        let s = self.lock();
        (s.index.len(), s.bytes)
    }
}

#[cfg(test)]
mod tests;
