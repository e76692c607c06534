//! The fallback pinner: mlock(2) with page-interval reference counts, for
//! domains where io_uring buffer registration is disabled.
//!
//! The kernel does not count mlocks: a page is locked or not, and one
//! munlock undoes any number of mlocks. Two registrations that share a page
//! (two buffers in one page, or overlapping ranges) would unlock each
//! other's memory on deregistration. So this table counts, per page
//! interval, how many registrations hold it; mlock(2) is called only for
//! pages no registration holds yet and munlock(2) only for pages the last
//! holder releases. mlock is per process, so there is one table for the
//! whole process ([`global`]), shared by every domain; tests make their own.
//!
//! Only pages locked through this table are tracked: an application's own
//! mlock/munlock (or mlockall) of the same pages is outside its knowledge.

use crate::sys::LockExt;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Disjoint intervals `[start, end)` of whole pages, keyed by `start`,
/// with how many locks hold them.
///
/// Invariants: every count is > 0 (a page no lock holds has no interval),
/// and no two adjacent intervals (one's end is the other's start) have the
/// same count, so the map stays as small as the pattern of overlaps allows.
type Intervals = BTreeMap<usize, (usize, u32)>;

/// Page-interval reference counts over mlock(2).
#[derive(Debug)]
pub struct MlockTable {
    /// The kernel calls are made under this mutex, so the table and the
    /// kernel's state never disagree where another thread can see it: a
    /// lock() of pages being released must not mlock them before the
    /// releasing unlock() has munlocked them, or that munlock would undo it.
    held: Mutex<Intervals>,
}

impl Default for MlockTable {
    fn default() -> Self {
        Self::new()
    }
}

static GLOBAL: MlockTable = MlockTable::new();

/// The process-wide table (mlock is per process, shared by every domain).
pub fn global() -> &'static MlockTable {
    &GLOBAL
}

impl MlockTable {
    pub const fn new() -> Self {
        MlockTable { held: Mutex::new(BTreeMap::new()) }
    }

    /// Lock [addr, addr+len) rounded out to whole pages (mlock(2) of the
    /// whole range; the table counts holders per page). All or nothing: if
    /// the mlock fails, the parts no other holder had are unlocked again, the table is
    /// unchanged, and the kernel's error is returned (ENOMEM over
    /// RLIMIT_MEMLOCK or for an unmapped page, EPERM, EAGAIN, ...). A range
    /// past the end of the address space is EINVAL; len 0 is a no-op.
    pub fn lock(&self, addr: usize, len: usize) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (start, end) = page_range(addr, len).ok_or_else(|| errno(libc::EINVAL))?;
        let mut held = self.held();

        // Plan without changing anything: the parts nobody holds yet.
        let mut gaps = Vec::new();
        let mut cursor = start;
        for (s, e, count) in overlapping(&held, start, end) {
            if count == u32::MAX {
                return Err(errno(libc::EOVERFLOW));
            }
            if s > cursor {
                gaps.push((cursor, s));
            }
            cursor = e;
        }
        if cursor < end {
            gaps.push((cursor, end));
        }

        // The whole range, not only the gaps: a part the table holds may
        // have been unmapped and mapped again since (munmap drops the
        // kernel's lock with the mapping, unseen by the table), and mlock
        // of pages already locked changes nothing (nor the accounting).
        if let Err(err) = mlock(start, end) {
            // mlock(2) marks the VMAs of a range locked one after the
            // other and can fail after some of them (a hole further on, a
            // failed fault-in), leaving those locked; so the gaps are
            // unlocked again. No gap holds a page the table holds.
            for &(s, e) in &gaps {
                let _ = munlock(s, e);
            }
            return Err(err);
        }

        split(&mut held, start);
        split(&mut held, end);
        for (_, (_, count)) in held.range_mut(start..end) {
            *count += 1;
        }
        for (s, e) in gaps {
            held.insert(s, (e, 1));
        }
        coalesce(&mut held, start, end);
        Ok(())
    }

    /// Undo one [`lock`](Self::lock) of exactly that range; munlock(2) the
    /// pages whose count reaches 0. Unlocking what is not locked is a logic
    /// error: it asserts in debug builds and is ignored in release builds.
    pub fn unlock(&self, addr: usize, len: usize) {
        if len == 0 {
            return;
        }
        let Some((start, end)) = page_range(addr, len) else {
            debug_assert!(false, "unlock of {addr:#x}+{len:#x}: past the address space");
            return;
        };
        let mut held = self.held();

        // Check before changing anything, so a bad call leaves no trace.
        let mut cursor = start;
        for (s, e, _) in overlapping(&held, start, end) {
            if s > cursor {
                break;
            }
            cursor = e;
        }
        if cursor < end {
            debug_assert!(false, "unlock of {start:#x}-{end:#x}: {cursor:#x} is not locked");
            return;
        }

        split(&mut held, start);
        split(&mut held, end);
        let mut zeroed = Vec::new();
        // Runs of pages that no lock holds any more, merged for munlock.
        let mut released: Vec<(usize, usize)> = Vec::new();
        for (&s, (e, count)) in held.range_mut(start..end) {
            *count -= 1;
            if *count == 0 {
                zeroed.push(s);
                match released.last_mut() {
                    Some(last) if last.1 == s => last.1 = *e,
                    _ => released.push((s, *e)),
                }
            }
        }
        for s in zeroed {
            held.remove(&s);
        }
        coalesce(&mut held, start, end);
        for (s, e) in released {
            // munlock fails (ENOMEM) where part of the range is no longer
            // mapped (the application unmapped it before deregistering; the
            // kernel dropped the lock with the mapping), and then stops at
            // the first hole, leaving what follows locked: unlock what is
            // still mapped, piece by piece.
            if munlock(s, e).is_err() {
                for m in super::maps::mappings_in(s, e - s).unwrap_or_default() {
                    let (ms, me) = (m.start.max(s), m.end.min(e));
                    if ms < me {
                        let _ = munlock(ms, me);
                    }
                }
            }
        }
    }

    /// Bytes currently held (pages with count > 0, times the page size).
    pub fn locked_bytes(&self) -> usize {
        self.held().iter().map(|(s, (e, _))| e - s).sum()
    }

    fn held(&self) -> MutexGuard<'_, Intervals> {
        // Nothing panics between changes of the map while the mutex is held,
        // so a poisoned table is still consistent.
        self.held.lock_ok()
    }
}

fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(ps).unwrap_or(4096)
    })
}

/// [addr, addr+len) rounded out to whole pages; None when it runs past the
/// end of the address space.
fn page_range(addr: usize, len: usize) -> Option<(usize, usize)> {
    let mask = page_size() - 1;
    let end = addr.checked_add(len)?.checked_add(mask)? & !mask;
    Some((addr & !mask, end))
}

/// The intervals that overlap [start, end), in order, as (start, end, count).
fn overlapping(held: &Intervals, start: usize, end: usize) -> impl Iterator<Item = (usize, usize, u32)> + '_ {
    let before = held.range(..start).next_back().filter(|(_, &(e, _))| e > start);
    before.into_iter().chain(held.range(start..end)).map(|(&s, &(e, c))| (s, e, c))
}

/// Make `at` an interval boundary if an interval straddles it.
fn split(held: &mut Intervals, at: usize) {
    if let Some((&s, &(e, c))) = held.range(..at).next_back() {
        if e > at {
            held.insert(s, (at, c));
            held.insert(at, (e, c));
        }
    }
}

/// Merge adjacent intervals with equal counts from the one before `start`
/// through the one starting at `end`: only boundaries in there can have
/// changed.
fn coalesce(held: &mut Intervals, start: usize, end: usize) {
    let from = held.range(..start).next_back().map_or(start, |(&s, _)| s);
    let keys: Vec<usize> = held.range(from..=end).map(|(&s, _)| s).collect();
    let mut keys = keys.into_iter();
    let Some(mut cur) = keys.next() else {
        return;
    };
    for next in keys {
        let (cur_end, cur_count) = held[&cur];
        let (next_end, next_count) = held[&next];
        if cur_end == next && cur_count == next_count {
            held.remove(&next);
            held.insert(cur, (next_end, cur_count));
        } else {
            cur = next;
        }
    }
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn mlock(start: usize, end: usize) -> io::Result<()> {
    // SAFETY: mlock changes only residency and VMA flags, never what memory
    // holds or whether it is mapped; any range is safe to pass.
    if unsafe { libc::mlock(start as *const libc::c_void, end - start) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn munlock(start: usize, end: usize) -> io::Result<()> {
    // SAFETY: as for mlock: only residency and VMA flags change.
    if unsafe { libc::munlock(start as *const libc::c_void, end - start) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pages` read-write pages between two PROT_NONE guard pages, so the
    /// kernel cannot merge the region's VMAs with a neighbour's and the
    /// Locked: sums below count this region only.
    struct Region {
        base: usize,
        total: usize,
        addr: usize,
    }

    impl Region {
        fn new(pages: usize) -> Region {
            let ps = page_size();
            let total = (pages + 2) * ps;
            // SAFETY: a fresh mapping at an address the kernel chooses
            // touches no existing memory.
            let p = unsafe {
                libc::mmap(std::ptr::null_mut(), total, libc::PROT_NONE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
            };
            assert_ne!(p, libc::MAP_FAILED, "{}", io::Error::last_os_error());
            let base = p as usize;
            // SAFETY: the inner pages of the mapping just made.
            let rc = unsafe {
                libc::mprotect((base + ps) as *mut libc::c_void, pages * ps, libc::PROT_READ | libc::PROT_WRITE)
            };
            assert_eq!(rc, 0, "{}", io::Error::last_os_error());
            // Make every page resident: smaps' Locked: counts resident pages
            // of VM_LOCKED VMAs, so an untouched page left marked locked by a
            // failed mlock would otherwise not show.
            for i in 0..pages {
                // SAFETY: a byte of a read-write page of this mapping.
                unsafe { *((base + (i + 1) * ps) as *mut u8) = 1 };
            }
            Region { base, total, addr: base + ps }
        }

        fn page(&self, i: usize) -> usize {
            self.addr + i * page_size()
        }
    }

    impl Drop for Region {
        fn drop(&mut self) {
            // SAFETY: this region owns the range; munmap also drops any lock.
            unsafe { libc::munmap(self.base as *mut libc::c_void, self.total) };
        }
    }

    /// Every VMA in /proc/self/smaps as (start, end, Locked: kB).
    fn vmas() -> Vec<(usize, usize, u64)> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut out: Vec<(usize, usize, u64)> = Vec::new();
        for line in smaps.lines() {
            let mut words = line.split_ascii_whitespace();
            let first = words.next().unwrap_or("");
            if first == "Locked:" {
                out.last_mut().unwrap().2 = words.next().unwrap().parse().unwrap();
            } else if let Some((s, e)) = first.split_once('-') {
                if !first.ends_with(':') {
                    let s = usize::from_str_radix(s, 16).unwrap();
                    let e = usize::from_str_radix(e, 16).unwrap();
                    out.push((s, e, 0));
                }
            }
        }
        out
    }

    /// The kernel's locked kB in the VMAs overlapping [addr, addr+len): the
    /// sum of their smaps `Locked:` lines (mlock splits VMAs, so there may
    /// be several).
    fn locked_kb(addr: usize, len: usize) -> u64 {
        vmas().iter().filter(|&&(s, e, _)| s < addr + len && e > addr).map(|&(_, _, kb)| kb).sum()
    }

    fn kb(pages: usize) -> u64 {
        (pages * page_size() / 1024) as u64
    }

    /// The invariants of [`Intervals`].
    fn check_invariants(t: &MlockTable) {
        let held = t.held();
        let mut prev: Option<(usize, usize, u32)> = None;
        for (&s, &(e, c)) in held.iter() {
            assert!(s < e && c > 0, "bad interval {s:#x}-{e:#x} x{c}");
            assert_eq!(s % page_size(), 0);
            assert_eq!(e % page_size(), 0);
            if let Some((_, pe, pc)) = prev {
                assert!(pe <= s, "overlap at {s:#x}");
                assert!(!(pe == s && pc == c), "unmerged at {s:#x}");
            }
            prev = Some((s, e, c));
        }
    }

    #[test]
    fn overlapping_locks_keep_each_others_pages() {
        let ps = page_size();
        let r = Region::new(5);
        let t = MlockTable::new();
        assert_eq!(locked_kb(r.addr, 5 * ps), 0);

        t.lock(r.page(0), 3 * ps).unwrap(); // A
        t.lock(r.page(2), 3 * ps).unwrap(); // B
        check_invariants(&t);
        assert_eq!(t.locked_bytes(), 5 * ps);
        assert_eq!(locked_kb(r.addr, 5 * ps), kb(5));

        t.unlock(r.page(0), 3 * ps);
        check_invariants(&t);
        assert_eq!(t.locked_bytes(), 3 * ps);
        assert_eq!(locked_kb(r.addr, 5 * ps), kb(3));
        assert_eq!(locked_kb(r.page(2), 3 * ps), kb(3));
        assert_eq!(locked_kb(r.page(0), 2 * ps), 0);

        t.unlock(r.page(2), 3 * ps);
        assert_eq!(t.locked_bytes(), 0);
        assert!(t.held().is_empty());
        assert_eq!(locked_kb(r.addr, 5 * ps), 0);
    }

    #[test]
    fn a_range_mapped_again_is_locked_again() {
        let ps = page_size();
        let r = Region::new(2);
        let t = MlockTable::new();
        t.lock(r.addr, 2 * ps).unwrap();
        assert_eq!(locked_kb(r.addr, 2 * ps), kb(2));
        // The application unmaps and maps again without deregistering: the
        // kernel dropped the lock with the mapping; the table cannot see it.
        // SAFETY: the region's own pages, replaced in place.
        let p = unsafe {
            libc::mmap(
                r.addr as *mut libc::c_void,
                2 * ps,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        assert_eq!(p as usize, r.addr);
        for i in 0..2 {
            // SAFETY: a byte of a page just mapped read-write.
            unsafe { *(r.page(i) as *mut u8) = 1 };
        }
        assert_eq!(locked_kb(r.addr, 2 * ps), 0, "MAP_FIXED dropped the lock");
        t.lock(r.addr, 2 * ps).unwrap();
        assert_eq!(locked_kb(r.addr, 2 * ps), kb(2), "a new registration locks the new pages");
        t.unlock(r.addr, 2 * ps);
        t.unlock(r.addr, 2 * ps);
        assert_eq!(locked_kb(r.addr, 2 * ps), 0);
    }

    #[test]
    fn an_unlock_after_a_hole_was_unmapped_unlocks_the_rest() {
        let ps = page_size();
        let r = Region::new(3);
        let t = MlockTable::new();
        t.lock(r.addr, 3 * ps).unwrap();
        assert_eq!(locked_kb(r.addr, 3 * ps), kb(3));
        // The first page goes: the kernel's munlock of the whole range
        // then fails at once, at the hole, and would leave the rest locked.
        // SAFETY: the region's own first page.
        assert_eq!(unsafe { libc::munmap(r.page(0) as *mut libc::c_void, ps) }, 0);
        t.unlock(r.addr, 3 * ps);
        assert_eq!(t.locked_bytes(), 0);
        assert_eq!(locked_kb(r.page(1), 2 * ps), 0, "the pages after the hole are unlocked");
    }

    #[test]
    fn same_range_twice_needs_two_unlocks() {
        let ps = page_size();
        let r = Region::new(3);
        let t = MlockTable::new();
        t.lock(r.addr, 3 * ps).unwrap();
        t.lock(r.addr, 3 * ps).unwrap();
        assert_eq!(t.held().len(), 1);
        assert_eq!(t.locked_bytes(), 3 * ps);

        t.unlock(r.addr, 3 * ps);
        assert_eq!(t.locked_bytes(), 3 * ps);
        assert_eq!(locked_kb(r.addr, 3 * ps), kb(3));

        t.unlock(r.addr, 3 * ps);
        assert_eq!(t.locked_bytes(), 0);
        assert_eq!(locked_kb(r.addr, 3 * ps), 0);
    }

    #[test]
    fn failed_lock_changes_nothing() {
        let ps = page_size();
        let r = Region::new(5);
        let t = MlockTable::new();
        t.lock(r.page(1), ps).unwrap();
        // SAFETY: page 3 belongs to `r`, which nothing else uses.
        let rc = unsafe { libc::munmap(r.page(3) as *mut libc::c_void, ps) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        let before = t.held().clone();

        // Gaps [0,1) and [2,5): the first locks, the second hits the hole
        // after the kernel has already locked page 2. Both must be undone.
        let err = t.lock(r.page(0), 5 * ps).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOMEM), "{err}");
        assert_eq!(*t.held(), before);
        assert_eq!(t.locked_bytes(), ps);
        assert_eq!(locked_kb(r.addr, 5 * ps), kb(1));
        assert_eq!(locked_kb(r.page(1), ps), kb(1));

        t.unlock(r.page(1), ps);
        assert_eq!(t.locked_bytes(), 0);
        assert_eq!(locked_kb(r.addr, 5 * ps), 0);
    }

    #[test]
    fn ranges_round_out_to_pages() {
        let ps = page_size();
        let r = Region::new(2);
        let t = MlockTable::new();
        t.lock(r.addr + 10, 1).unwrap();
        assert_eq!(t.locked_bytes(), ps);
        t.lock(r.addr + ps - 1, 2).unwrap();
        assert_eq!(t.locked_bytes(), 2 * ps);
        assert_eq!(locked_kb(r.addr, 2 * ps), kb(2));
        t.unlock(r.addr + 10, 1);
        assert_eq!(t.locked_bytes(), 2 * ps);
        t.unlock(r.addr + ps - 1, 2);
        assert_eq!(t.locked_bytes(), 0);
        assert_eq!(locked_kb(r.addr, 2 * ps), 0);
    }

    #[test]
    fn empty_and_overflowing_ranges() {
        let t = MlockTable::new();
        t.lock(0x1000, 0).unwrap();
        t.unlock(0x1000, 0);
        let err = t.lock(usize::MAX - 10, 100).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
        assert_eq!(t.locked_bytes(), 0);
    }

    /// Many overlapping locks and unlocks against a per-page count model:
    /// the table, its invariants and the kernel agree after every step.
    #[test]
    fn matches_a_per_page_model() {
        const PAGES: usize = 16;
        let ps = page_size();
        let r = Region::new(PAGES);
        let t = MlockTable::new();
        let mut counts = [0u32; PAGES];
        let mut live: Vec<(usize, usize)> = Vec::new();
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as usize % n
        };
        for _ in 0..200 {
            if live.is_empty() || next(3) != 0 {
                let first = next(PAGES);
                let n = 1 + next(PAGES - first);
                t.lock(r.page(first), n * ps).unwrap();
                counts[first..first + n].iter_mut().for_each(|c| *c += 1);
                live.push((first, n));
            } else {
                let (first, n) = live.swap_remove(next(live.len()));
                t.unlock(r.page(first), n * ps);
                counts[first..first + n].iter_mut().for_each(|c| *c -= 1);
            }
            check_invariants(&t);
            let pages = counts.iter().filter(|&&c| c > 0).count();
            assert_eq!(t.locked_bytes(), pages * ps);
            assert_eq!(locked_kb(r.addr, PAGES * ps), kb(pages));
            // VM_LOCKED is per VMA, so a page is locked exactly when the VMA
            // holding it reports locked memory.
            let vmas = vmas();
            for (i, &c) in counts.iter().enumerate() {
                let p = r.page(i);
                let &(_, _, locked) = vmas.iter().find(|v| v.0 <= p && p < v.1).unwrap();
                assert_eq!(locked > 0, c > 0, "page {i}: count {c}, VMA Locked: {locked} kB");
            }
        }
        for (first, n) in live {
            t.unlock(r.page(first), n * ps);
        }
        assert_eq!(t.locked_bytes(), 0);
        assert_eq!(locked_kb(r.addr, PAGES * ps), 0);
    }

    #[test]
    fn one_global_table() {
        assert!(std::ptr::eq(global(), global()));
    }
}
