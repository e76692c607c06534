use super::*;
use crate::mr::account::{Account, CapSource};
use crate::mr::phys::pagemap_pfns;
use crate::mr::pin::PinMode;
use crate::mr::registry::Ranges;
use crate::mr::{CacheConfig, MrDomain, Request};

fn domain() -> MrDomain {
    let pinner = Pinner::new(PinMode::Uring, Account::new(None, CapSource::Variable));
    let cc = CacheConfig { enable: true, record_pfn: true, ..CacheConfig::default() };
    let mr_mode = (ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY) as i32;
    MrDomain::new(mr_mode, pinner, cc)
}

fn map(at: usize, len: usize, fill: u8) -> usize {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if at != 0 { libc::MAP_FIXED } else { 0 };
    // SAFETY: anonymous mapping (MAP_FIXED only over our own mapping).
    let p = unsafe { libc::mmap(at as *mut _, len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    assert_ne!(p, libc::MAP_FAILED, "mmap({at:#x}, {len}): {}", std::io::Error::last_os_error());
    // SAFETY: just mapped, writable.
    unsafe { std::ptr::write_bytes(p as *mut u8, fill, len) };
    p as usize
}

fn reg(d: &MrDomain, a: usize, l: usize) -> Arc<crate::mr::registry::Region> {
    let req = Request {
        iovs: Ranges::One((a, l)),
        access: ffi::FI_REMOTE_READ as u64 | ffi::FI_REMOTE_WRITE as u64,
        iface: ffi::FI_HMEM_SYSTEM,
        ..Default::default()
    };
    d.register(req).unwrap()
}

fn entry_of(r: &crate::mr::registry::Region) -> u64 {
    r.pin.lock().unwrap().cache_entry().map_or(0, |e| e.id)
}

#[test]
fn hit_after_close_and_miss_after_remap() {
    let d = domain();
    let c = d.cache.clone().expect("userfaultfd works here");
    let len = 64 << 10;
    let a = map(0, len, 1);
    let r1 = reg(&d, a, len);
    let e1 = entry_of(&r1);
    assert_ne!(e1, 0);
    d.deregister(&r1);
    drop(r1);
    let r2 = reg(&d, a, len);
    assert_eq!(entry_of(&r2), e1, "re-registration is a hit");
    assert_eq!(c.stats.hits.load(Ordering::Relaxed), 1);
    let old_pfn = r2.pfn0;
    d.deregister(&r2);
    drop(r2);
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
    map(a, len, 2);
    let r3 = reg(&d, a, len);
    assert_ne!(entry_of(&r3), e1, "after munmap + mmap: a miss");
    assert!(c.stats.inv_unmap.load(Ordering::Relaxed) >= 1);
    let now = pagemap_pfns(a, 1)[0];
    if now != 0 {
        assert_eq!(r3.pfn0, now, "pins the new page");
        assert_ne!(r3.pfn0, old_pfn);
    }
    d.deregister(&r3);
    drop(r3);
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
}

fn reg_for(d: &MrDomain, a: usize, l: usize, access: u64) -> Result<Arc<crate::mr::registry::Region>> {
    let req = Request { iovs: Ranges::One((a, l)), access, iface: ffi::FI_HMEM_SYSTEM, ..Default::default() };
    d.register(req)
}

fn protect(a: usize, len: usize, prot: i32) {
    // SAFETY: our own mapping.
    assert_eq!(unsafe { libc::mprotect(a as *mut libc::c_void, len, prot) }, 0);
}

/// A cached read-write pin, then mprotect: the next registrations get
/// what a miss gets (FI_EACCES for write on PROT_READ, for anything
/// on PROT_NONE), with mprotect watched (perf) and without (the hit
/// checks its range as a miss does).
fn hit_after_mprotect_answers_as_a_miss(watch: bool) {
    let pinner = Pinner::new(PinMode::Uring, Account::new(None, CapSource::Variable));
    let mr_mode = (ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY) as i32;
    let mut d = MrDomain::new(mr_mode, pinner, CacheConfig { enable: false, ..CacheConfig::default() });
    d.cache = Cache::new_watching(1 << 30, 4096, false, watch);
    let c = d.cache.clone().expect("userfaultfd works here");
    assert_eq!(c.prot.is_some(), watch, "perf_event_open works here (root, or perf_event_paranoid <= 2)");
    let (rw, r, w) =
        ((ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64, ffi::FI_REMOTE_READ as u64, ffi::FI_REMOTE_WRITE as u64);
    let len = 64 << 10;
    let a = map(0, len, 1);
    let r1 = reg_for(&d, a, len, rw).unwrap();
    d.deregister(&r1);
    drop(r1);
    // (Still a hit while nothing changed.)
    let r2 = reg_for(&d, a, len, rw).unwrap();
    assert_eq!(c.stats.hits.load(Ordering::Relaxed), 1);
    d.deregister(&r2);
    drop(r2);
    protect(a, len, libc::PROT_READ);
    let e = reg_for(&d, a, len, w).map(|_| ()).map_err(|e| e.code());
    assert_eq!(e, Err(ffi::FI_EACCES), "FI_REMOTE_WRITE on memory made PROT_READ after it was cached");
    reg_for(&d, a, len, r).expect("FI_REMOTE_READ of PROT_READ memory registers");
    protect(a, len, libc::PROT_NONE);
    let e = reg_for(&d, a, len, r).map(|_| ()).map_err(|e| e.code());
    assert_eq!(e, Err(ffi::FI_EACCES), "FI_REMOTE_READ on memory made PROT_NONE");
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut libc::c_void, len) };
}

#[test]
fn a_hit_after_mprotect_answers_as_a_miss_with_the_watch() {
    hit_after_mprotect_answers_as_a_miss(true);
}

#[test]
fn a_hit_after_mprotect_answers_as_a_miss_without_the_watch() {
    hit_after_mprotect_answers_as_a_miss(false);
}

#[test]
fn an_open_registration_made_read_only_refuses_remote_writes() {
    let d = domain();
    let len = 64 << 10;
    let a = map(0, len, 1);
    let r = reg(&d, a, len);
    assert!(writable(&d, &r).is_ok());
    protect(a, len, libc::PROT_READ);
    d.refresh();
    assert_eq!(writable(&d, &r), Err(crate::mr::registry::AccessError::Protected));
    assert!(d.registry.check(r.key, r.iova, 8, ffi::FI_REMOTE_READ as u64).is_ok(), "reads still allowed");
    protect(a, len, libc::PROT_READ | libc::PROT_WRITE);
    d.refresh();
    assert!(writable(&d, &r).is_ok(), "writable again: writes allowed again");
    d.deregister(&r);
    drop(r);
    // A cache hit (tracked by its entry alone, not on its own): the
    // entry says what the memory allows now.
    let first = reg(&d, a, len);
    d.deregister(&first);
    drop(first);
    let hit = reg(&d, a, len);
    assert!(hit.revoked.get().is_none(), "a hit is not tracked on its own");
    protect(a, len, libc::PROT_READ);
    d.refresh();
    assert_eq!(writable(&d, &hit), Err(crate::mr::registry::AccessError::Protected), "the hit's entry");
    d.deregister(&hit);
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut libc::c_void, len) };
}

fn writable(
    d: &MrDomain,
    r: &crate::mr::registry::Region,
) -> std::result::Result<(), crate::mr::registry::AccessError> {
    d.registry.check(r.key, r.iova, 8, ffi::FI_REMOTE_WRITE as u64).map(|_| ())
}

fn remap(a: usize, len: usize, fill: u8) {
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
    map(a, len, fill);
}

fn discard(a: usize, len: usize) {
    // SAFETY: our mapping; its pages are refilled with zeros on touch.
    assert_eq!(unsafe { libc::madvise(a as *mut _, len, libc::MADV_DONTNEED) }, 0);
}

/// A miss subscribes, pins, then looks in the log from its
/// subscription for an event on its range (`touched_since`): an unmap
/// in between means the pin may hold the old pages, and it is dropped
/// and pinned again. The window is microseconds wide, so the test
/// drives the recheck itself: the subscription's position, an unmap
/// and a new mapping of the range, then the question a miss asks.
#[test]
fn the_recheck_after_pinning_sees_an_unmap_since_the_subscription() {
    let d = domain();
    let c = d.cache.clone().expect("userfaultfd works here");
    let len = 64 << 10;
    let a = map(0, len, 1);
    let since = c.monitor.head();
    c.monitor.watch(a, len).expect("watched");
    assert!(!c.touched_since(since, a, len), "nothing happened yet");
    let other = map(0, len, 2);
    // (More unmaps elsewhere than one read of the log takes, 64.)
    unmap_elsewhere(&c, 70);
    assert!(!c.touched_since(since, a, len), "events elsewhere are none on the range");
    remap(a, len, 3);
    assert!(c.touched_since(since, a, len), "the unmap of the range since the subscription, behind 70 others");
    assert!(!c.touched_since(c.monitor.head(), a, len), "nothing after the unmap");
    // And through a registration: the pin that follows holds the new pages.
    let r = reg(&d, a, len);
    // SAFETY: `a` is mapped, `len` bytes.
    assert_eq!(unsafe { *(a as *const u8) }, 3);
    assert_eq!(r.pfn0, pagemap_pfns(a, 1)[0], "the registration holds the page mapped now");
    d.deregister(&r);
    for x in [a, other] {
        // SAFETY: our mappings.
        unsafe { libc::munmap(x as *mut libc::c_void, len) };
    }
}

/// `n` watched pages unmapped elsewhere: `n` events in the log that
/// touch nothing registered.
fn unmap_elsewhere(c: &Cache, n: usize) {
    for _ in 0..n {
        let x = map(0, 4096, 0);
        c.monitor.watch(x, 4096).expect("watched");
        // SAFETY: our mapping.
        unsafe { libc::munmap(x as *mut libc::c_void, 4096) };
    }
}

/// A registration the cache does not hold is tracked from the log
/// position before its pin (`watch_ranges`, then `track_live`): a move
/// of its memory in between (behind more events than one read of the
/// log takes) revokes it at once; one tracked from after the move is
/// not revoked.
#[test]
fn a_move_between_watch_and_track_revokes_the_registration() {
    let d = domain();
    let c = d.cache.clone().expect("userfaultfd works here");
    let len = 64 << 10;
    let a = map(0, len, 1);
    let r = crate::mr::registry::tests::region(1, a as u64, len, ffi::FI_REMOTE_WRITE as u64);
    let since = c.watch_ranges(&[(a, len)]).expect("watched");
    unmap_elsewhere(&c, 70);
    remap(a, len, 5);
    c.track_live(&*r, since);
    assert!(r.revoked.get().is_some_and(|f| f.load(Ordering::Acquire)), "moved before it was tracked: revoked");
    let r2 = crate::mr::registry::tests::region(2, a as u64, len, ffi::FI_REMOTE_WRITE as u64);
    let since = c.watch_ranges(&[(a, len)]).expect("watched");
    unmap_elsewhere(&c, 3);
    c.track_live(&*r2, since);
    assert!(!r2.revoked.get().is_some_and(|f| f.load(Ordering::Acquire)), "nothing moved since: not revoked");
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut libc::c_void, len) };
}

/// An unmap revokes exactly the tracked registrations whose ranges it
/// touches: not the one on the page before it, nor the one that starts
/// where it ends.
#[test]
fn an_unmap_revokes_only_the_tracked_registrations_it_touches() {
    let pinner = Pinner::new(PinMode::Uring, Account::new(None, CapSource::Variable));
    let cc = CacheConfig { enable: true, explicit: false, ..CacheConfig::default() };
    let d = MrDomain::new((ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY) as i32, pinner, cc);
    let ps = 4096;
    let base = map(0, 3 * ps, 1);
    let (ra, rb, rc) = (reg(&d, base, ps), reg(&d, base + ps, ps), reg(&d, base + 2 * ps, ps));
    assert!(ra.revoked.get().is_some(), "registrations the cache does not hold are tracked");
    remap(base + ps, ps, 2);
    d.refresh();
    assert_eq!(writable(&d, &rb), Err(crate::mr::registry::AccessError::Revoked), "the unmapped page's");
    assert_eq!(writable(&d, &ra), Ok(()), "the page before the unmap");
    assert_eq!(writable(&d, &rc), Ok(()), "the page where the unmap ends");
    for r in [ra, rb, rc] {
        d.deregister(&r);
    }
    // SAFETY: our mapping.
    unsafe { libc::munmap(base as *mut libc::c_void, 3 * ps) };
}

#[test]
fn a_discard_then_an_unmap_revokes_an_open_cached_registration() {
    use crate::mr::registry::AccessError;
    let d = domain();
    let c = d.cache.clone().expect("userfaultfd works here");
    let len = 64 << 10;
    let a = map(0, len, 1);
    let r = reg(&d, a, len);
    assert_ne!(entry_of(&r), 0, "cached");
    // The discard takes the entry out of the index (it is served
    // again to no one) but keeps the registration: same memory.
    discard(a, 4096);
    c.refresh();
    assert_eq!(writable(&d, &r), Ok(()), "a discard keeps the registration");
    remap(a, len, 2);
    c.refresh();
    assert_eq!(writable(&d, &r), Err(AccessError::Revoked), "munmap + mmap after a discard revokes");
    d.deregister(&r);
    drop(r);
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
}

#[test]
fn a_discard_then_an_unmap_revokes_an_open_cache_hit() {
    // A hit is tracked by its entry alone (no `live` element): the
    // discard must leave the entry in the index, detached, so that the
    // unmap still finds it.
    use crate::mr::registry::AccessError;
    let d = domain();
    let c = d.cache.clone().expect("userfaultfd works here");
    let len = 64 << 10;
    let a = map(0, len, 1);
    let r0 = reg(&d, a, len);
    let e0 = entry_of(&r0);
    d.deregister(&r0);
    drop(r0);
    let hits = c.stats.hits.load(Ordering::Relaxed);
    let r = reg(&d, a, len);
    assert_eq!(entry_of(&r), e0, "the same entry");
    assert_eq!(c.stats.hits.load(Ordering::Relaxed), hits + 1, "a hit");
    discard(a, 4096);
    c.refresh();
    assert_eq!(writable(&d, &r), Ok(()), "a discard keeps the registration");
    let r2 = reg(&d, a, len);
    assert_ne!(entry_of(&r2), e0, "a detached entry is served to no new registration");
    d.deregister(&r2);
    drop(r2);
    remap(a, len, 2);
    c.refresh();
    assert_eq!(writable(&d, &r), Err(AccessError::Revoked), "munmap + mmap after a discard revokes the hit");
    d.deregister(&r);
    drop(r);
    assert_eq!(c.size().0, 0, "the detached entry went with its last user, the other with the unmap");
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
}

#[test]
fn an_uncached_registration_after_a_discard_is_revoked_by_an_unmap() {
    use crate::mr::registry::AccessError;
    let d = domain();
    let c = d.cache.clone().expect("userfaultfd works here");
    let len = 64 << 10;
    let a = map(0, len, 1);
    // (Registered and closed first: the monitor watches the range
    // from then on, so it sees the discard.)
    let r0 = reg(&d, a, len);
    d.deregister(&r0);
    drop(r0);
    discard(a, len);
    let before = c.stats.uncached.load(Ordering::Relaxed);
    // (Within the discard's grace: pinned, served, not cached.)
    let r = reg(&d, a, len);
    assert_eq!(entry_of(&r), 0, "not cached right after a discard");
    assert_eq!(c.stats.uncached.load(Ordering::Relaxed), before + 1);
    assert_eq!(writable(&d, &r), Ok(()));
    remap(a, len, 2);
    c.refresh();
    assert_eq!(writable(&d, &r), Err(AccessError::Revoked), "munmap + mmap revokes the uncached registration");
    d.deregister(&r);
    drop(r);
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
}

#[test]
fn a_refreshed_registration_is_revoked_by_the_next_unmap() {
    use crate::mr::registry::AccessError;
    let d = domain();
    let c = d.cache.clone().expect("userfaultfd works here");
    let len = 64 << 10;
    let a = map(0, len, 1);
    let r = reg(&d, a, len);
    let old_entry = entry_of(&r);
    assert_ne!(old_entry, 0, "cached");
    remap(a, len, 2);
    c.refresh();
    assert_eq!(writable(&d, &r), Err(AccessError::Revoked));
    // (Root sees PFNs: the page mapped now is another one than the page
    // pinned at registration, so the refresh has something to do.)
    assert!(pagemap_pfns(a, 1)[0] == 0 || pagemap_pfns(a, 1)[0] != r.pfn0, "munmap + mmap gave a new page");
    d.refresh_region(&r).expect("fi_mr_refresh");
    assert_eq!(writable(&d, &r), Ok(()), "refreshed: it speaks for the memory mapped now");
    {
        let pin = r.pin.lock().unwrap();
        assert_ne!(pin.cache_entry().map_or(0, |e| e.id), old_entry, "the revoked entry's pin is gone");
        assert!(pin.bytes() >= len as u64, "the new pin holds the whole range: {} bytes", pin.bytes());
    }
    remap(a, len, 3);
    c.refresh();
    assert_eq!(writable(&d, &r), Err(AccessError::Revoked), "the new memory's unmap revokes it again");
    d.deregister(&r);
    drop(r);
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
}

#[test]
fn an_uncached_pin_short_of_budget_evicts_the_cache_first() {
    const MB: usize = 1 << 20;
    // A cap 8 MiB above what this process holds pinned now.
    let cap = crate::mr::account::process_pinned() + 8 * MB as u64;
    let pinner = Pinner::new(PinMode::Uring, Account::new(Some(cap), CapSource::Variable));
    let cc = CacheConfig { enable: true, ..CacheConfig::default() };
    let d = MrDomain::new((ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY) as i32, pinner, cc);
    let c = d.cache.clone().expect("userfaultfd works here");
    let a = map(0, 6 * MB, 1);
    let r = reg(&d, a, 6 * MB);
    assert_ne!(entry_of(&r), 0, "cached");
    d.deregister(&r);
    drop(r);
    assert_eq!(c.size(), (1, (6 * MB) as u64), "closed: its pin stays cached");
    // Two pieces: a registration the cache does not hold.
    let (b, e) = (map(0, 2 * MB, 2), map(0, 2 * MB, 3));
    let req = Request {
        iovs: vec![(b, 2 * MB), (e, 2 * MB)].into(),
        access: ffi::FI_REMOTE_READ as u64,
        iface: ffi::FI_HMEM_SYSTEM,
        ..Default::default()
    };
    let r2 = d.register(req.clone()).expect("the cache's unused pin gives way");
    assert_eq!(c.size(), (0, 0), "the unused entry was evicted for it");
    d.deregister(&r2);
    drop(r2);
    for (x, l) in [(a, 6 * MB), (b, 2 * MB), (e, 2 * MB)] {
        // SAFETY: our mappings.
        unsafe { libc::munmap(x as *mut _, l) };
    }
}

#[test]
fn a_range_whose_last_page_wraps_is_refused() {
    let d = domain();
    // (a + l fits; rounded up to a page it does not.)
    let req = Request {
        iovs: Ranges::One((usize::MAX - 0xfff, 0x800)),
        access: ffi::FI_REMOTE_READ as u64,
        iface: ffi::FI_HMEM_SYSTEM,
        ..Default::default()
    };
    match d.register(req.clone()) {
        Ok(_) => panic!("a range at the top of the address space was registered"),
        Err(e) => assert_eq!(e.code(), ffi::FI_EINVAL),
    }
}

/// Register with a sized tail, which `park` takes (`tail` makes it for a
/// new region only; a parked one keeps its own).
fn reg_with<T: crate::mr::registry::Tail>(
    d: &MrDomain,
    a: usize,
    l: usize,
    access: u64,
    tail: impl FnOnce() -> T,
) -> Result<Arc<Region<T>>> {
    let mut req = Request { iovs: Ranges::One((a, l)), access, iface: ffi::FI_HMEM_SYSTEM, ..Default::default() };
    d.register_with(&mut req, crate::mr::registry::no_fid(), || Ok(tail()))
}

/// Register with a unit tail.
fn reg_unit(d: &MrDomain, a: usize, l: usize, access: u64) -> Result<Arc<Region<()>>> {
    reg_with(d, a, l, access, || ())
}

/// Close as the object layer does (`objects::mr`): the key goes, then
/// the region is offered to the park.
fn close<T: crate::mr::registry::Tail>(d: &MrDomain, r: Arc<Region<T>>) {
    let keyed = d.deregister(&*r);
    crate::mr::park(r, keyed, |_| ());
}

const RW: u64 = (ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64;

/// A miss and its close: the range is cached. (A miss's registration is
/// tracked on its own, `track_live`, and is not parked; hits are.)
fn cache_range(d: &MrDomain, c: &Cache, a: usize, l: usize, access: u64) {
    let parked = c.parked();
    close(d, reg_unit(d, a, l, access).unwrap());
    assert_eq!(c.parked(), parked, "a miss's registration is not parked");
}

/// A parking domain: the cache with its mprotect watch (perf), which
/// parking needs.
fn parking_domain(max_count: usize) -> (MrDomain, Arc<Cache>) {
    parking_domain_in((ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY) as i32, max_count)
}

fn parking_domain_in(mr_mode: i32, max_count: usize) -> (MrDomain, Arc<Cache>) {
    let pinner = Pinner::new(PinMode::Uring, Account::new(None, CapSource::Variable));
    let cc = CacheConfig { enable: true, max_count, ..CacheConfig::default() };
    let d = MrDomain::new(mr_mode, pinner, cc);
    let c = d.cache.clone().expect("userfaultfd works here");
    assert!(c.prot.is_some(), "perf_event_open works here (root, or perf_event_paranoid <= 2)");
    (d, c)
}

#[test]
fn a_closed_registration_is_parked_whole_and_handed_out_again_under_a_new_key() {
    let (d, c) = parking_domain(4096);
    let len = 64 << 10;
    let a = map(0, len, 1);
    cache_range(&d, &c, a, len, RW);
    let r1 = reg_unit(&d, a, len, RW).unwrap();
    let (k1, p1, e1) = (r1.key, Arc::as_ptr(&r1) as usize, entry_of(&*r1));
    close(&d, r1);
    assert_eq!(c.parked(), 1, "a closed cached registration nothing else holds is parked");
    assert!(d.registry.check(k1, a as u64, 8, ffi::FI_REMOTE_READ as u64).is_err(), "a parked key validates nothing");
    let r2 = reg_unit(&d, a, len, RW).unwrap();
    assert_eq!(Arc::as_ptr(&r2) as usize, p1, "the same registration, handed out again");
    assert_eq!(c.parked(), 0);
    assert_eq!(c.stats.hits.load(Ordering::Relaxed), 2, "counted as a hit");
    assert_eq!(entry_of(&*r2), e1);
    assert_ne!(r2.key, k1, "under a new key");
    assert_eq!(r2.face.0.key, r2.key, "the application's handle shows the new key");
    assert_eq!(r2.face.0.mem_desc as usize, p1);
    assert!(d.registry.check(r2.key, a as u64, 8, ffi::FI_REMOTE_WRITE as u64).is_ok(), "the new key validates");
    assert!(d.registry.check(k1, a as u64, 8, ffi::FI_REMOTE_READ as u64).is_err(), "the old key still does not");
    // Other access: not the parked one (a hit of its own, new region).
    close(&d, r2);
    let r3 = reg_unit(&d, a, len, ffi::FI_REMOTE_READ as u64).unwrap();
    assert_ne!(Arc::as_ptr(&r3) as usize, p1, "a parked registration serves only its own access");
    assert_eq!(c.parked(), 1);
    assert_eq!(c.stats.hits.load(Ordering::Relaxed), 3);
    close(&d, r3);
    d.unpark_all();
    assert_eq!(c.parked(), 0);
    assert_eq!(c.size(), (1, len as u64), "unparked: the entry is cached, unused");
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
}

/// The park hands a registration back only as the type it was parked as
/// (`Cache::unpark` casts without a downcast, on the park's one recorded
/// type): a registration of another tail type finds nothing parked, and
/// is not parked beside the first type's.
#[test]
fn the_park_holds_one_tail_type_and_hands_back_only_that_type() {
    let (d, c) = parking_domain(4096);
    let len = 64 << 10;
    let a = map(0, len, 1);
    cache_range(&d, &c, a, len, RW);
    // Parked as Region<()>.
    let r1 = reg_unit(&d, a, len, RW).unwrap();
    let p1 = Arc::as_ptr(&r1) as usize;
    close(&d, r1);
    assert_eq!(c.parked(), 1);
    // Asked as Region<u64>: not the parked one (a hit of its own, new region).
    let other = reg_with(&d, a, len, RW, || 7u64).unwrap();
    assert_ne!(Arc::as_ptr(&other) as usize, p1, "a registration of another type is not handed a parked one");
    assert_eq!(other.tail, 7, "its own tail");
    assert_eq!(c.parked(), 1, "the parked one stays");
    // Closed, it is not parked beside the other type's.
    close(&d, other);
    assert_eq!(c.parked(), 1, "a registration of another type is not parked");
    // Asked as Region<()> again: the parked one, whole.
    let r2 = reg_unit(&d, a, len, RW).unwrap();
    assert_eq!(Arc::as_ptr(&r2) as usize, p1, "the parked registration, as its own type");
    assert!(d.registry.check(r2.key, a as u64, 8, ffi::FI_REMOTE_WRITE as u64).is_ok(), "under a key that validates");
    close(&d, r2);
    d.unpark_all();
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
}

/// A tail that counts its drops: a region is freed once, when its last
/// reference goes.
struct Counted(Arc<AtomicU64>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_parked_registration_keeps_both_references_and_every_key_is_new() {
    let (d, c) = parking_domain(4096);
    let len = 64 << 10;
    let a = map(0, len, 1);
    cache_range(&d, &c, a, len, RW);
    let drops = Arc::new(AtomicU64::new(0));
    let reg_counted = |d: &MrDomain| reg_with(d, a, len, RW, || Counted(drops.clone())).unwrap();
    // Keys from the registry's own pool (misses elsewhere) and from the
    // cache's (hits of the parked one), interleaved: all distinct.
    let mut keys = std::collections::HashSet::new();
    let r = reg_counted(&d);
    let p = Arc::as_ptr(&r) as usize;
    keys.insert(r.key);
    close(&d, r);
    for i in 0..200 {
        let r = reg_counted(&d);
        assert_eq!(Arc::as_ptr(&r) as usize, p, "hit {i}: the parked registration");
        assert_eq!(Arc::strong_count(&r), 2, "hit {i}: the handle's and the key's references, as a new one has");
        assert!(keys.insert(r.key), "hit {i}: key {:#x} was handed out before", r.key);
        let other = reg_unit(&d, a, 4096, RW).unwrap();
        assert!(keys.insert(other.key), "a registry key {:#x} was handed out before", other.key);
        close(&d, other);
        close(&d, r);
        assert_eq!(drops.load(Ordering::Relaxed), 0, "parked, not freed");
    }
    d.unpark_all();
    assert_eq!(drops.load(Ordering::Relaxed), 1, "emptying the park frees it, once: no count left behind");
    // Something that could become a reference (a Weak) keeps it out of
    // the park: parking must prove nobody else can reach it.
    let hits = c.stats.hits.load(Ordering::Relaxed);
    let r = reg_counted(&d);
    assert_eq!(c.stats.hits.load(Ordering::Relaxed), hits + 1, "a cache hit, which would be parked");
    let weak = Arc::downgrade(&r);
    close(&d, r);
    assert_eq!(c.parked(), 0, "a region with a Weak is not parked");
    assert_eq!(drops.load(Ordering::Relaxed), 2);
    assert!(weak.upgrade().is_none());
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
}

#[test]
fn a_close_racing_remote_accesses_parks_only_what_nothing_holds() {
    // A thread checks the current key over and over, as a wire checks a
    // peer's remote access (each check holds the region while it looks),
    // while this one registers the same range and closes it: a close that
    // finds an access holding the region leaves it to that access, one
    // that finds none parks it. Every region made is freed exactly once,
    // after the park is emptied; none is freed twice or kept.
    let (d, c) = parking_domain(4096);
    let len = 64 << 10;
    let a = map(0, len, 1);
    cache_range(&d, &c, a, len, RW);
    let (made, drops) = (AtomicU64::new(0), Arc::new(AtomicU64::new(0)));
    let key = AtomicU64::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let granted = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(g) = d.registry.check(key.load(Ordering::Relaxed), a as u64, 8, ffi::FI_REMOTE_READ as u64) {
                    granted.fetch_add(1, Ordering::Relaxed);
                    std::hint::black_box(&g.region);
                }
            }
        });
        // (At least 20 000 rounds, and on until the checker has been let
        // in often: a race needs both threads running.)
        let mut i = 0;
        while i < 20_000 || (granted.load(Ordering::Relaxed) < 2_000 && i < 5_000_000) {
            i += 1;
            let r = reg_with(&d, a, len, RW, || {
                made.fetch_add(1, Ordering::Relaxed);
                Counted(drops.clone())
            })
            .unwrap();
            key.store(r.key, Ordering::Relaxed);
            close(&d, r);
        }
        stop.store(true, Ordering::Relaxed);
    });
    d.unpark_all();
    let (made, dropped) = (made.load(Ordering::Relaxed), drops.load(Ordering::Relaxed));
    assert!(granted.load(Ordering::Relaxed) > 0, "the checker ran against live keys");
    assert_eq!(dropped, made, "every region made freed once ({made} made, {dropped} freed)");
    eprintln!("{made} regions made, {} accesses granted", granted.load(Ordering::Relaxed));
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
}

#[test]
fn an_unmap_takes_a_parked_registration_out_and_revokes_nothing() {
    let (d, c) = parking_domain(4096);
    let len = 64 << 10;
    let a = map(0, len, 1);
    cache_range(&d, &c, a, len, RW);
    let r1 = reg_unit(&d, a, len, RW).unwrap();
    let e1 = r1.cached.clone().expect("a cached pin");
    close(&d, r1);
    assert_eq!(c.parked(), 1);
    remap(a, len, 2);
    c.refresh();
    assert_eq!(c.parked(), 0, "the unmap took it out of the park");
    assert_eq!(c.size(), (0, 0), "and its entry, unused, out of the cache");
    assert!(!e1.revoked.load(Ordering::Acquire), "a closed registration is not revoked (no warning for it)");
    let misses = c.stats.misses.load(Ordering::Relaxed);
    let r2 = reg_unit(&d, a, len, RW).unwrap();
    assert_eq!(c.stats.misses.load(Ordering::Relaxed), misses + 1, "the new memory is a miss");
    assert_ne!(entry_of(&*r2), e1.id);
    close(&d, r2);
    d.unpark_all();
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
}

#[test]
fn a_discard_or_mprotect_takes_a_parked_registration_out() {
    let (d, c) = parking_domain(4096);
    let len = 64 << 10;
    let a = map(0, len, 1);
    cache_range(&d, &c, a, len, RW);
    close(&d, reg_unit(&d, a, len, RW).unwrap());
    assert_eq!(c.parked(), 1);
    discard(a, len);
    c.refresh();
    assert_eq!((c.parked(), c.size()), (0, (0, 0)), "a discard empties the park and the entry goes");
    std::thread::sleep(REMOVE_GRACE * 2);
    cache_range(&d, &c, a, len, RW);
    close(&d, reg_unit(&d, a, len, RW).unwrap());
    assert_eq!(c.parked(), 1);
    protect(a, len, libc::PROT_READ);
    let e = reg_unit(&d, a, len, RW).map(|_| ()).map_err(|e| e.code());
    assert_eq!(e, Err(ffi::FI_EACCES), "after mprotect the parked registration answers as a miss would");
    assert_eq!(c.parked(), 0);
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
}

#[test]
fn a_miss_empties_the_park_so_the_limits_hold() {
    let (d, c) = parking_domain(1);
    let len = 64 << 10;
    let (a, b) = (map(0, len, 1), map(0, len, 2));
    cache_range(&d, &c, a, len, RW);
    close(&d, reg_unit(&d, a, len, RW).unwrap());
    assert_eq!((c.parked(), c.size().0), (1, 1));
    let rb = reg_unit(&d, b, len, RW).unwrap();
    assert_eq!(c.parked(), 0, "a miss empties the park first");
    assert_eq!(c.size(), (1, len as u64), "so the closed entry is evicted for the new one (max_count 1)");
    assert_eq!(c.stats.evictions.load(Ordering::Relaxed), 1);
    close(&d, rb);
    d.unpark_all();
    for x in [a, b] {
        // SAFETY: our mappings.
        unsafe { libc::munmap(x as *mut _, len) };
    }
}

#[test]
fn a_held_registration_is_not_parked_and_the_park_is_bounded() {
    let (d, c) = parking_domain(4096);
    let page = 4096;
    let n = PARKED_MAX + 1;
    let a = map(0, n * page, 1);
    for i in 0..n {
        cache_range(&d, &c, a + i * page, page, RW);
    }
    let r = reg_unit(&d, a, page, RW).unwrap();
    let held = r.clone();
    close(&d, r);
    assert_eq!(c.parked(), 0, "an access in flight still holds it: not parked");
    drop(held);
    assert_eq!(c.size().0, n, "its entry stays cached");
    let rs: Vec<_> = (0..n).map(|i| reg_unit(&d, a + i * page, page, RW).unwrap()).collect();
    for r in rs {
        close(&d, r);
    }
    assert_eq!(c.parked(), PARKED_MAX, "at most PARKED_MAX parked");
    d.unpark_all();
    assert_eq!((c.parked(), c.size().0), (0, n));
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, n * page) };
}

struct Events(AtomicU64);

impl crate::mr::registry::RmaEvents for Events {
    fn remote_access(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the application set on a registration before its close is not
/// on the one handed out again: its counter binding, its offset (without
/// FI_MR_VIRT_ADDR), its key (an application key); a requested key in
/// use is refused before the park is asked, which keeps its registration.
#[test]
fn a_registration_handed_out_again_keeps_nothing_of_the_closed_one() {
    let (d, c) = parking_domain_in(0, 4096);
    let len = 64 << 10;
    let a = map(0, len, 1);
    let req = |offset: u64, key: u64| Request {
        iovs: Ranges::One((a, len)),
        access: RW,
        offset,
        requested_key: key,
        iface: ffi::FI_HMEM_SYSTEM,
        ..Default::default()
    };
    let reg = |offset: u64, key: u64| d.register_with(&mut req(offset, key), crate::mr::registry::no_fid(), || Ok(()));
    // (An application key, 9, taken by another registration; a miss, made
    // first: a miss empties the park.)
    let b = map(0, 4096, 3);
    let mut rb = Request {
        iovs: Ranges::One((b, 4096)),
        access: RW,
        requested_key: 9,
        iface: ffi::FI_HMEM_SYSTEM,
        ..Default::default()
    };
    let held = d.register_with(&mut rb, crate::mr::registry::no_fid(), || Ok(())).unwrap();
    close(&d, reg(0x1000, 7).unwrap());
    let r1 = reg(0x2000, 8).unwrap();
    assert_eq!(r1.iova, 0x2000);
    let ev: Arc<dyn crate::mr::registry::RmaEvents> = Arc::new(Events(AtomicU64::new(0)));
    *r1.cntr.lock() = Some((Arc::downgrade(&ev), RW));
    let p1 = Arc::as_ptr(&r1) as usize;
    close(&d, r1);
    assert_eq!(c.parked(), 1);
    let e = reg(0x3000, 9).map(|_| ()).map_err(|e| e.code());
    assert_eq!(e, Err(ffi::FI_ENOKEY), "a key in use");
    assert_eq!(c.parked(), 1, "a refused registration leaves the park alone");
    let r2 = reg(0x5000, 11).unwrap();
    assert_eq!(Arc::as_ptr(&r2) as usize, p1, "the parked registration");
    assert_eq!((r2.key, r2.face.0.key, r2.iova), (11, 11, 0x5000), "the new key and offset");
    assert!(r2.cntr.lock().is_none(), "the counter binding went with the close");
    assert!(d.registry.check(11, 0x5000, 8, ffi::FI_REMOTE_READ as u64).is_ok());
    assert!(d.registry.check(8, 0x2000, 8, ffi::FI_REMOTE_READ as u64).is_err(), "the closed key");
    close(&d, r2);
    d.deregister(&*held);
    drop(held);
    d.unpark_all();
    for (x, l) in [(a, len), (b, 4096)] {
        // SAFETY: our mappings.
        unsafe { libc::munmap(x as *mut _, l) };
    }
}

/// A registration whose entry left service while it was open (a discard
/// detaches an entry in use) is not parked at its close: the next
/// registration of its range is a miss, which pins the memory as it is.
#[test]
fn a_registration_whose_entry_left_service_is_not_parked() {
    let (d, c) = parking_domain(4096);
    let len = 64 << 10;
    let a = map(0, len, 1);
    cache_range(&d, &c, a, len, RW);
    let r = reg_unit(&d, a, len, RW).unwrap();
    discard(a, len);
    c.refresh();
    close(&d, r);
    assert_eq!(c.parked(), 0, "its entry is detached: not parked");
    std::thread::sleep(REMOVE_GRACE * 2);
    let misses = c.stats.misses.load(Ordering::Relaxed);
    let r2 = reg_unit(&d, a, len, RW).unwrap();
    assert_eq!(c.stats.misses.load(Ordering::Relaxed), misses + 1, "a miss");
    close(&d, r2);
    d.unpark_all();
    // SAFETY: our mapping.
    unsafe { libc::munmap(a as *mut _, len) };
}
