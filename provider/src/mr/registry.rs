//! Keys and the one remote-access check every wire uses.
//!
//! `check(key, addr, len, access)` answers with the region and the offset
//! into it, or a precise [`AccessError`]. It is a hash lookup in one of 64
//! shards, each under a spin lock held for that one lookup (or, for a
//! registration or a close, one insertion or removal) and released with a
//! plain store: one locked instruction per check, registration or close
//! (a read-write lock takes two, to let readers of one shard overlap for
//! a few nanoseconds). Its cost does not grow with the number of
//! registrations, and threads checking different keys rarely share a
//! cache line (`cargo run --release -p oxmr --example mr_bench` measures
//! it at 10 k live registrations).
//!
//! A provider key is a keyed pseudorandom permutation of a per-domain
//! 64-bit counter: a Feistel network over the counter's two 32-bit halves
//! whose round function is a PRF under a 128-bit secret drawn from the
//! kernel once per domain. A permutation makes every key of a domain's
//! lifetime distinct, so a closed MR's key never validates again, even if
//! a peer still holds it; a pseudorandom one (Luby and Rackoff: three
//! rounds of independent PRFs make a pseudorandom permutation) leaves all
//! 64 bits of every other key unpredictable to a peer that has seen any
//! number of keys (no visible counter: no bit range of consecutive keys
//! moves by a constant).
//!
//! The round function, round `i` on half `x`: the low 32 bits of
//! AES-128 under the secret of the block (x, i) where the CPU has AES
//! instructions (`aes`), else of SipHash-2-4 under the secret of the word
//! (i, x). Both are PRFs with independent rounds, as the construction
//! needs: AES-128 is a pseudorandom permutation of 128-bit blocks (the
//! standard assumption about it, and the one every AES mode rests on),
//! so it is a PRF up to the birthday bound (the PRP/PRF switching lemma:
//! an advantage of at most q^2 / 2^129 after q blocks, nothing for the
//! 2^64 blocks a domain could ask), truncation to 32 bits keeps it one,
//! and the round number in the block makes each round's inputs disjoint
//! from every other round's (so the rounds are independent functions of
//! one key, as with SipHash's round number in the message). SipHash-2-4
//! is a PRF by design (Aumasson and Bernstein, 2012). AES was chosen for
//! cost: two AES-NI encryptions are about a third of the two SipHash
//! calls a key took, which were a tenth of a cache hit. Round 0 reads the
//! counter's high half, which changes once in 2^32 keys, and is kept
//! (`Registry::round0`): a key costs two round functions and no system
//! call (a getrandom per key was the largest cost of a cached
//! registration once).
//! Application-requested keys (no FI_MR_PROV_KEY) are used as given; one
//! in use is -FI_ENOKEY.
//!
//! Every refused remote access answers the initiator [`REFUSED`]
//! (FI_EACCES), whatever was wrong; the precise [`AccessError`] is for the
//! target's log.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::sys::SpinLock;

use oxmr_ffi as ffi;

use super::pin::Pin;

/// Access bits a registration may carry.
pub(crate) const ACCESS_BITS: u64 =
    (ffi::FI_SEND | ffi::FI_RECV | ffi::FI_READ | ffi::FI_WRITE | ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64
        | ffi::FI_COLLECTIVE as u64;

/// A registration's (address, length) ranges: one inline (fi_mr_reg, the
/// common case, allocates nothing), several on the heap (fi_mr_regv).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ranges {
    One((usize, usize)),
    Many(Vec<(usize, usize)>),
}

impl Default for Ranges {
    fn default() -> Self {
        Ranges::Many(Vec::new())
    }
}

impl std::ops::Deref for Ranges {
    type Target = [(usize, usize)];
    fn deref(&self) -> &[(usize, usize)] {
        match self {
            Ranges::One(x) => std::slice::from_ref(x),
            Ranges::Many(v) => v,
        }
    }
}

impl From<Vec<(usize, usize)>> for Ranges {
    fn from(v: Vec<(usize, usize)>) -> Self {
        match v.as_slice() {
            &[x] => Ranges::One(x),
            _ => Ranges::Many(v),
        }
    }
}

/// The handle of a registration of key `key` whose `struct fid` is `fid`
/// (its `mem_desc`, the region's own address, is written once the region
/// is allocated).
pub fn face(fid: ffi::fid, key: u64) -> ffi::FidHeader<ffi::fid_mr> {
    ffi::FidHeader(ffi::fid_mr { fid, mem_desc: std::ptr::null_mut(), key })
}

/// The `struct fid` of a registration no application holds (this
/// layer's own and its tests'): no class, no ops, no context.
pub fn no_fid() -> ffi::fid {
    ffi::fid { fclass: 0, context: std::ptr::null_mut(), ops: std::ptr::null_mut() }
}

/// What a registration carries for the layer that hands it out: the MR
/// object's own state (`objects::mr::MrTail`), or `()` for registrations
/// made without one (this layer's tests).
pub trait Tail: Send + Sync + 'static {}
impl<T: Send + Sync + 'static> Tail for T {}

/// A registered region, and the MR object the application holds: one
/// allocation per registration, which the registry, in-flight accesses
/// and the application's handle share. (`Region` alone is any
/// registration, its tail unsized; `Region<T>` one with a known tail.)
///
/// cbindgen:ignore
#[repr(C)]
pub struct Region<T: ?Sized + Tail = dyn Tail> {
    /// The application's handle, `struct fid_mr`: first, so that the
    /// pointer C holds is the region's own address (its `mem_desc` too).
    /// Written once, before the region is shared.
    pub face: ffi::FidHeader<ffi::fid_mr>,
    pub key: u64,
    /// (virtual address, length) of each registered iov.
    pub iovs: Ranges,
    /// Total bytes.
    pub len: usize,
    /// The address peers name byte 0 with: its virtual address under
    /// FI_MR_VIRT_ADDR, else the registration's `offset`.
    pub iova: u64,
    pub access: u64,
    /// False until fi_mr_enable under FI_MR_ENDPOINT.
    pub enabled: AtomicBool,
    /// The cache entry whose pin it uses, if any: its `revoked` flag is set
    /// for good when the memory was unmapped or moved while registered
    /// (`cache` sees the userfaultfd event): whatever is mapped there now
    /// is not what was registered.
    pub cached: Option<Arc<super::cache::Entry>>,
    /// fi_mr_refresh pinned the pages mapped now: a revoked `cached` entry
    /// no longer speaks for it.
    pub refreshed: AtomicBool,
    /// Revoked for good: its memory was unmapped or moved while it was
    /// open (registrations whose ranges the cache's monitor watches and
    /// that no cache entry speaks for are tracked: see `Cache::track_live`,
    /// which makes this flag and shares it), until fi_mr_refresh. Unset
    /// (a cache hit, an unwatched range): not revoked this way.
    pub revoked: OnceLock<Arc<AtomicBool>>,
    /// Remote accesses (FI_REMOTE_READ / FI_REMOTE_WRITE bits) its memory's
    /// protection no longer allows: mprotect after registration, as the
    /// cache's watch saw it (for a tracked registration; a cache hit's
    /// entry holds its own). Refused at the target, never attempted: a
    /// write into memory the owner made read-only must not fault it.
    pub denied: OnceLock<Arc<AtomicU64>>,
    /// Replaced by fi_mr_refresh (FI_MR_MMU_NOTIFY).
    /// (A Mutex, not a spin lock: a device registration's liveness check
    /// reads the kernel's maps under it.)
    pub pin: Mutex<Pin>,
    /// PFN of the first page as pinned (FI_OXMR_MR_RECORD_PFN), else 0.
    pub pfn0: u64,
    /// Device memory registered by the physical-address fallback or
    /// peer-direct: every access checks that its mapping is still the one
    /// registered.
    pub phys: bool,
    /// MMIO (a BAR, a VFIO region): remote accesses must be 4-byte aligned
    /// in offset and length, so that the owner's copies use 4- and 8-byte
    /// accesses only.
    pub mmio: bool,
    /// Counter bound with fi_mr_bind, and the remote accesses it counts.
    pub cntr: SpinLock<Option<(std::sync::Weak<dyn RmaEvents>, u64)>>,
    /// The owning layer's part (last: it may be unsized).
    pub tail: T,
}

/// What a registration bound to a counter (fi_mr_bind, FI_RMA_EVENT) tells
/// it: a remote access of the kind it was bound for took effect. (A
/// counter implements it; the registration holds it weakly, as a binding,
/// not an owner.)
pub trait RmaEvents: Send + Sync {
    fn remote_access(&self);
}

/// Why a remote access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessError {
    /// No registration has this key (never had, or closed).
    UnknownKey,
    /// Registered but not enabled (FI_MR_ENDPOINT without fi_mr_enable).
    NotEnabled,
    /// Its memory was unmapped or moved while registered.
    Revoked,
    /// addr + len wraps around.
    Overflow,
    /// Outside the region.
    OutOfBounds,
    /// The region was not registered for this access.
    Denied,
    /// Its memory's protection no longer allows this access (mprotect after
    /// registration).
    Protected,
    /// MMIO memory (a BAR, a VFIO region) takes 4-byte aligned accesses
    /// only, and this one's offset or length is not.
    Misaligned,
}

/// The FI_E* code an initiator gets for any refused remote access. One
/// code for every [`AccessError`] and for the target's other refusals (a
/// device mapping gone, a request that does not describe its own
/// buffers), as RDMA hardware reports one remote access error (the verbs
/// provider maps IBV_WC_REM_ACCESS_ERR to FI_EACCES): distinct codes are
/// an oracle, a wrong address answering otherwise than a wrong key, that
/// lets a peer search for a key, then an address, then rights, apart. The
/// precise reason goes to the target's log.
pub(crate) const REFUSED: u32 = ffi::FI_EACCES;

/// A granted access: the region and the byte offset into it.
pub struct Granted {
    pub region: Arc<Region>,
    pub offset: usize,
}

/// Provider keys are 64 pseudorandom bits and application keys are often
/// small integers: one multiply, which carries low bits up, is enough mix
/// for both and keeps the lookup to a few nanoseconds.
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8)) ^ b as u64;
        }
    }
    fn write_u64(&mut self, k: u64) {
        // (hashbrown takes its tags from the high bits: a small key's must
        // reach them.)
        self.0 = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Map = HashMap<u64, Arc<Region>, BuildHasherDefault<KeyHasher>>;

const SHARDS: usize = 64;

/// One shard, alone on its cache lines.
#[repr(align(128))]
#[derive(Default)]
struct Shard(SpinLock<ShardMap>);

/// Registrations a shard holds in its own cache lines, before its map.
const INLINE: usize = 3;

/// A shard's registrations, and how many it has taken in (the domain's
/// registration count: every registration ends with its insertion here,
/// so the count costs no atomic add of its own).
///
/// The first few live keys of a shard sit in the shard itself (`inline`),
/// the rest in its map: up to 3 * SHARDS = 192 live registrations, a
/// registration, a close and a check each touch the shard's two lines
/// only, with no hashing or probing (the map's control bytes and buckets
/// are an allocation of their own, elsewhere: in a cached registration,
/// 4 KiB registered and closed in a loop, the insertion and removal took
/// about a fifth of the time, mostly waiting on those loads).
#[derive(Default)]
struct ShardMap {
    inline: [Option<(u64, Arc<Region>)>; INLINE],
    map: Map,
    inserted: u64,
}

impl ShardMap {
    #[inline]
    fn get(&self, key: u64) -> Option<&Arc<Region>> {
        for (k, r) in self.inline.iter().flatten() {
            if *k == key {
                return Some(r);
            }
        }
        if self.map.is_empty() {
            None
        } else {
            self.map.get(&key)
        }
    }

    /// Add `r` under `key`; handed back if the key is taken.
    #[inline(always)]
    fn insert(&mut self, key: u64, r: Arc<Region>) -> Result<(), Arc<Region>> {
        if self.get(key).is_some() {
            return Err(r);
        }
        match self.inline.iter_mut().find(|s| s.is_none()) {
            Some(s) => *s = Some((key, r)),
            None => {
                self.map.insert(key, r);
            }
        }
        self.inserted += 1;
        Ok(())
    }

    /// Remove `key` if `pred` holds for its region.
    fn remove_if(&mut self, key: u64, pred: impl Fn(&Arc<Region>) -> bool) -> Option<Arc<Region>> {
        for s in self.inline.iter_mut() {
            if s.as_ref().is_some_and(|(k, r)| *k == key && pred(r)) {
                return s.take().map(|(_, r)| r);
            }
        }
        if self.map.is_empty() {
            return None;
        }
        match self.map.entry(key) {
            Entry::Occupied(e) if pred(e.get()) => Some(e.remove()),
            _ => None,
        }
    }

    fn len(&self) -> usize {
        self.inline.iter().flatten().count() + self.map.len()
    }
}

// (A shard, its lock, places and map header, is its two lines.)
const _: () = assert!(std::mem::size_of::<Shard>() == 128);

/// A domain's registrations by key.
pub struct Registry {
    shards: Box<[Shard]>,
    /// Provider keys made ahead (see `KeyPool`).
    keys: SpinLock<KeyPool>,
    /// The key permutation's secret, drawn once (kept for the tests).
    #[cfg(test)]
    secret: (u64, u64),
    /// Its round function under that secret.
    prf: KeyPrf,
    /// Round 0 of the permutation for counters under 2^32 (their high half
    /// is 0): `permute_with`.
    round0: u32,
}

/// Provider keys are made `KEY_BATCH` at a time: one AES encryption is a
/// chain of ten dependent instructions (about 40 cycles), and a key two of
/// them in a row, where eight keys side by side take little longer than
/// one (the CPU's AES units overlap the chains). 32, not 8: the calls
/// around each batch are spread over four times as many keys (a cached
/// registration ~67 -> ~64 ns).
const KEY_BATCH: usize = 32;

/// The keys of counters `next - KEY_BATCH + at ..` not handed out yet.
/// A registry has its own (counters from 0, under its own lock) and
/// gives its cache a second (`KeyPool::second`, counters from 2^63, drawn
/// under the cache's lock when a cache hit takes a parked registration:
/// one lock for the hit and its key). The two never meet, so their keys,
/// images of distinct counters under one permutation, are distinct.
pub struct KeyPool {
    keys: [u64; KEY_BATCH],
    at: usize,
    /// The counter after the batch: the next batch is its image.
    next: u64,
}

impl KeyPool {
    fn from(next: u64) -> Self {
        KeyPool { keys: [0; KEY_BATCH], at: KEY_BATCH, next }
    }

    /// The second pool of a registry (its cache's); `Registry::draw`
    /// draws from it.
    pub fn second() -> Self {
        Self::from(1 << 63)
    }
}

/// Rounds of the key permutation: Luby and Rackoff's construction is a
/// pseudorandom permutation from 3 rounds (a strong one, which stays so to
/// a peer that could also invert it, from 4; a peer sees keys, it never
/// gets a key turned back into a counter, so 3 do).
const ROUNDS: u64 = 3;

/// The round function of the key permutation under a domain's secret (see
/// the module doc).
// (One per domain: the AES key schedule's size costs nothing.)
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum KeyPrf {
    Aes(super::aes::Aes128),
    Sip(u64, u64),
}

impl KeyPrf {
    /// AES where the CPU has it, else SipHash.
    fn new(secret: (u64, u64)) -> Self {
        match super::aes::Aes128::new(secret.0, secret.1) {
            Some(a) => KeyPrf::Aes(a),
            None => KeyPrf::Sip(secret.0, secret.1),
        }
    }
}

/// Round `round` of the key permutation: the PRF of the round number and
/// one 32-bit half, so that every round is an independent PRF.
#[inline]
fn round_fn(prf: &KeyPrf, round: u64, half: u32) -> u32 {
    match prf {
        KeyPrf::Aes(a) => a.encrypt(half as u64, round).0 as u32,
        KeyPrf::Sip(k0, k1) => siphash24(*k0, *k1, round << 32 | half as u64) as u32,
    }
}

/// The key of counter `n`: a balanced Feistel network on its halves, the
/// low half on the left, so round 0 reads the high half, which changes once
/// in 2^32 keys: `f0` is that round's value for it (`Registry::round0`
/// keeps it, so a key costs two round functions, not three). A Feistel
/// network is a bijection whatever its round function (each round can be
/// undone: `tests::unpermute`), so distinct counters give distinct keys.
/// (The reference the batches of `permute_many` are tested against.)
#[cfg(test)]
fn permute_with(prf: &KeyPrf, n: u64, f0: u32) -> u64 {
    let (lo, hi) = (n as u32, (n >> 32) as u32);
    let (mut l, mut r) = (hi, lo ^ f0);
    for round in 1..ROUNDS {
        (l, r) = (r, l ^ round_fn(prf, round, r));
    }
    (l as u64) << 32 | r as u64
}

/// `round_fn` of each half, side by side.
#[inline]
fn round_fn_many<const N: usize>(prf: &KeyPrf, round: u64, half: &[u32; N]) -> [u32; N] {
    match prf {
        KeyPrf::Aes(a) => a.encrypt_lo(&half.map(|x| x as u64), round).map(|x| x as u32),
        KeyPrf::Sip(..) => half.map(|x| round_fn(prf, round, x)),
    }
}

/// `permute_with` of the counters `n .. n + N`, which share their high
/// half (`n` a multiple of N, a power of two), side by side.
fn permute_many<const N: usize>(prf: &KeyPrf, n: u64, f0: u32) -> [u64; N] {
    let mut l = [(n >> 32) as u32; N];
    let mut r: [u32; N] = std::array::from_fn(|i| (n as u32 + i as u32) ^ f0);
    for round in 1..ROUNDS {
        let f = round_fn_many(prf, round, &r);
        (l, r) = (r, std::array::from_fn(|i| l[i] ^ f[i]));
    }
    std::array::from_fn(|i| (l[i] as u64) << 32 | r[i] as u64)
}

/// `permute_with` computing round 0 itself.
#[cfg(test)]
fn permute(prf: &KeyPrf, n: u64) -> u64 {
    permute_with(prf, n, round_fn(prf, 0, (n >> 32) as u32))
}

/// SipHash-2-4 of one 8-byte message under the key (k0, k1) (Aumasson and
/// Bernstein, "SipHash: a fast short-input PRF", 2012).
fn siphash24(k0: u64, k1: u64, m: u64) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    // The message block, then the final block (length 8 in the top byte).
    for b in [m, 8u64 << 56] {
        v[3] ^= b;
        round(&mut v);
        round(&mut v);
        v[0] ^= b;
    }
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Self {
        let shards = (0..SHARDS).map(|_| Shard::default()).collect();
        let secret = (crate::sys::random_u64(), crate::sys::random_u64());
        let prf = KeyPrf::new(secret);
        let round0 = round_fn(&prf, 0, 0);
        Registry {
            shards,
            keys: SpinLock::new(KeyPool::from(0)),
            #[cfg(test)]
            secret,
            prf,
            round0,
        }
    }

    fn shard(&self, key: u64) -> &SpinLock<ShardMap> {
        // Provider keys are uniform in every bit; application keys are
        // usually small integers, which differ in the low bits: folding
        // the high half onto the low spreads both.
        &self.shards[(key ^ (key >> 32)) as usize % SHARDS].0
    }

    /// A fresh provider key (never FI_KEY_NOTAVAIL).
    pub fn new_key(&self) -> u64 {
        self.draw(&mut self.keys.lock())
    }

    /// A fresh provider key from `p`: this registry's own pool, or the
    /// second one (`KeyPool::second`) that its cache holds.
    #[inline]
    pub fn draw(&self, p: &mut KeyPool) -> u64 {
        loop {
            if p.at == KEY_BATCH {
                self.refill(p);
            }
            let k = p.keys[p.at];
            p.at += 1;
            if k != ffi::FI_KEY_NOTAVAIL {
                return k;
            }
        }
    }

    /// The next batch of `p`'s keys. (Out of line: one call in
    /// KEY_BATCH, and `draw`, in line, stays a load.)
    #[cold]
    #[inline(never)]
    fn refill(&self, p: &mut KeyPool) {
        // (`next` is a multiple of KEY_BATCH, which divides 2^32: the
        // batch shares its high half.)
        let n = p.next;
        let f0 = if n >> 32 == 0 { self.round0 } else { round_fn(&self.prf, 0, (n >> 32) as u32) };
        p.keys = permute_many(&self.prf, n, f0);
        p.next = n.wrapping_add(KEY_BATCH as u64);
        p.at = 0;
    }

    /// Whether a key is taken.
    pub fn contains(&self, key: u64) -> bool {
        self.shard(key).lock().get(key).is_some()
    }

    /// Add a region under its key; `Err(())` if the key is taken.
    #[allow(clippy::result_unit_err)]
    #[inline(always)]
    pub fn insert(&self, r: Arc<Region>) -> Result<(), ()> {
        let key = r.key;
        let taken = self.shard(key).lock().insert(key, r);
        // (A refused region is dropped after the lock.)
        taken.map_err(|_| ())
    }

    /// Remove a key: from now on it never validates.
    pub fn remove(&self, key: u64) -> Option<Arc<Region>> {
        self.shard(key).lock().remove_if(key, |_| true)
    }

    /// Remove `r`'s key if it still names `r` (a revoked registration's
    /// key may have been given to a newer one since), handing back the
    /// registry's reference, after the lock: the caller drops it (its last
    /// reference may be this one) or keeps it (`mr::park` keeps both of a
    /// closed registration's references, so that reusing it changes no
    /// count).
    #[inline(always)]
    pub fn remove_region(&self, r: &Region) -> Option<Arc<Region>> {
        self.shard(r.key).lock().remove_if(r.key, |x| std::ptr::addr_eq(Arc::as_ptr(x), r))
    }

    /// Live registrations.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().len()).sum()
    }

    /// Registrations taken in so far (the extension API's count).
    pub fn inserted(&self) -> u64 {
        self.shards.iter().map(|s| s.0.lock().inserted).sum()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The remote-access check: may a peer presenting `key` access `len`
    /// bytes at `addr` with `access` (FI_REMOTE_READ / FI_REMOTE_WRITE)?
    pub fn check(&self, key: u64, addr: u64, len: u64, access: u64) -> Result<Granted, AccessError> {
        let region = {
            let m = self.shard(key).lock();
            m.get(key).cloned().ok_or(AccessError::UnknownKey)?
        };
        if !region.enabled.load(Ordering::Acquire) {
            return Err(AccessError::NotEnabled);
        }
        if region.revoked.get().is_some_and(|f| f.load(Ordering::Acquire))
            || (region.cached.as_ref().is_some_and(|e| e.revoked.load(Ordering::Acquire))
                && !region.refreshed.load(Ordering::Acquire))
        {
            return Err(AccessError::Revoked);
        }
        let end = addr.checked_add(len).ok_or(AccessError::Overflow)?;
        let region_end = region.iova.checked_add(region.len as u64).ok_or(AccessError::Overflow)?;
        if addr < region.iova || end > region_end {
            return Err(AccessError::OutOfBounds);
        }
        if access & !region.access != 0 {
            return Err(AccessError::Denied);
        }
        let denied = region.cached.as_ref().map_or(0, |e| e.denied.load(Ordering::Acquire))
            | region.denied.get().map_or(0, |d| d.load(Ordering::Acquire));
        if access & denied != 0 {
            return Err(AccessError::Protected);
        }
        if region.mmio && !((addr - region.iova) | len).is_multiple_of(4) {
            return Err(AccessError::Misaligned);
        }
        let offset = (addr - region.iova) as usize;
        Ok(Granted { region, offset })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn region(key: u64, iova: u64, len: usize, access: u64) -> Arc<Region<()>> {
        Arc::new(Region {
            face: face(no_fid(), key),
            key,
            iovs: Ranges::One((iova as usize, len)),
            len,
            iova,
            access,
            enabled: AtomicBool::new(true),
            cached: None,
            refreshed: AtomicBool::new(false),
            revoked: OnceLock::new(),
            denied: OnceLock::new(),
            pin: Mutex::new(Pin::None),
            pfn0: 0,
            phys: false,
            mmio: false,
            cntr: SpinLock::new(None),
            tail: (),
        })
    }

    #[test]
    fn mmio_regions_take_aligned_accesses_only() {
        let r = Registry::new();
        let k = r.new_key();
        let rw = ffi::FI_REMOTE_WRITE as u64;
        let mut reg = Arc::into_inner(region(k, 0x1000, 0x100, rw)).unwrap();
        reg.mmio = true;
        // (Offsets count from the region's iova, whatever it is.)
        reg.iova = 0x1002;
        r.insert(Arc::new(reg)).unwrap();
        assert!(r.check(k, 0x1002, 0x100, rw).is_ok());
        assert!(r.check(k, 0x100a, 8, rw).is_ok());
        assert_eq!(r.check(k, 0x1003, 4, rw).err(), Some(AccessError::Misaligned), "offset 1");
        assert_eq!(r.check(k, 0x1006, 6, rw).err(), Some(AccessError::Misaligned), "length 6");
    }

    /// Keys past a shard's inline places go to its map; every one is
    /// found, and removed, wherever it sits, and only its own region
    /// removes it.
    #[test]
    fn keys_in_a_shards_places_and_its_map_alike() {
        let r = Registry::new();
        let rr = ffi::FI_REMOTE_READ as u64;
        // (Application keys 0, 64, 128, ... all fall in shard 0.)
        let regions: Vec<_> = (0..40u64).map(|i| region(i * SHARDS as u64, 0x1000 * (i + 1), 0x100, rr)).collect();
        for x in &regions {
            r.insert(x.clone()).unwrap();
        }
        assert_eq!(r.len(), 40);
        assert_eq!(r.inserted(), 40);
        assert!(r.insert(region(5 * SHARDS as u64, 0, 1, rr)).is_err(), "a key in the map is taken");
        assert!(r.insert(region(0, 0, 1, rr)).is_err(), "a key in a place is taken");
        // Another region under a key does not remove it, in a place or in
        // the map.
        for k in [SHARDS as u64, 5 * SHARDS as u64] {
            let other = region(k, 0x2000, 0x100, rr);
            r.remove_region(&*other);
            assert!(r.contains(k), "key {k} removed by a region that is not its own");
        }
        for x in regions.iter().step_by(2) {
            r.remove_region(&**x);
        }
        assert_eq!(r.len(), 20);
        for (i, x) in regions.iter().enumerate() {
            let found = r.check(x.key, x.iova, 8, rr);
            assert_eq!(found.is_ok(), i % 2 == 1, "key {} after removing the even ones", x.key);
        }
        // With places free again, a key in the map is still taken (the
        // places do not hide the map).
        assert!(r.insert(region(3 * SHARDS as u64, 0, 1, rr)).is_err(), "key 3*SHARDS, in the map, is taken");
        // Places freed in the shard take new keys again.
        r.insert(region(1000 * SHARDS as u64, 0x9000, 0x100, rr)).unwrap();
        assert!(r.check(1000 * SHARDS as u64, 0x9000, 8, rr).is_ok());
        assert_eq!(r.len(), 21);
    }

    #[test]
    fn every_refusal_is_precise() {
        let r = Registry::new();
        let k = r.new_key();
        r.insert(region(k, 0x1000, 0x100, ffi::FI_REMOTE_READ as u64)).unwrap();
        let rr = ffi::FI_REMOTE_READ as u64;
        let rw = ffi::FI_REMOTE_WRITE as u64;
        assert_eq!(r.check(k, 0x1010, 0x10, rr).unwrap().offset, 0x10);
        assert!(r.check(k, 0x1000, 0x100, rr).is_ok(), "the whole region");
        assert_eq!(r.check(k ^ 1, 0x1000, 1, rr).err(), Some(AccessError::UnknownKey));
        assert_eq!(r.check(k, 0xfff, 1, rr).err(), Some(AccessError::OutOfBounds), "one byte before");
        assert_eq!(r.check(k, 0x10ff, 2, rr).err(), Some(AccessError::OutOfBounds), "one byte past");
        assert_eq!(r.check(k, u64::MAX, 2, rr).err(), Some(AccessError::Overflow));
        assert_eq!(r.check(k, 0x1000, 1, rw).err(), Some(AccessError::Denied), "read-only region");
        r.remove(k);
        assert_eq!(r.check(k, 0x1000, 1, rr).err(), Some(AccessError::UnknownKey), "closed key");
    }

    #[test]
    fn closing_a_revoked_registration_leaves_its_keys_new_owner() {
        let r = Registry::new();
        let rw = ffi::FI_REMOTE_WRITE as u64;
        let old = region(7, 0x1000, 0x100, rw);
        r.insert(old.clone()).unwrap();
        // Revoked (its device mapping changed): the key is free again...
        r.remove_region(&*old);
        assert!(r.check(7, 0x1000, 1, rw).is_err());
        // ...and the application registers something else under it.
        r.insert(region(7, 0x9000, 0x100, rw)).unwrap();
        // Closing the old MR must not unregister the new one.
        r.remove_region(&*old);
        assert_eq!(r.check(7, 0x9000, 1, rw).unwrap().offset, 0);
    }

    /// `permute` undone, round by round.
    fn unpermute(prf: &KeyPrf, k: u64) -> u64 {
        let (mut l, mut r) = ((k >> 32) as u32, k as u32);
        for round in (0..ROUNDS).rev() {
            (l, r) = (r ^ round_fn(prf, round, l), l);
        }
        // (Back to the counter's halves: low on the left.)
        (r as u64) << 32 | l as u64
    }

    /// A bit range [lo, hi) of `keys` whose difference (wrapping
    /// subtraction, or XOR) from one key to the next is the same all
    /// along, if there is one: a counter showing through.
    fn constant_difference(keys: &[u64]) -> Option<(u32, u32, &'static str)> {
        for lo in 0..64 {
            for hi in lo + 1..=64 {
                let mask = u64::MAX >> (64 - (hi - lo));
                let bits = |k: u64| (k >> lo) & mask;
                let sub = |w: &[u64]| bits(w[1]).wrapping_sub(bits(w[0])) & mask;
                let xor = |w: &[u64]| bits(w[1] ^ w[0]);
                for (what, diff) in [("difference", &sub as &dyn Fn(&[u64]) -> u64), ("xor", &xor)] {
                    let first = diff(&keys[..2]);
                    if keys.windows(2).all(|w| diff(w) == first) {
                        return Some((lo, hi, what));
                    }
                }
            }
        }
        None
    }

    fn keys(r: &Registry, n: usize) -> Vec<u64> {
        (0..n).map(|_| r.new_key()).collect()
    }

    #[test]
    fn ten_thousand_consecutive_provider_keys_are_distinct() {
        let mut k = keys(&Registry::new(), 10_000);
        k.sort_unstable();
        k.dedup();
        assert_eq!(k.len(), 10_000);
    }

    #[test]
    fn no_bit_range_of_consecutive_provider_keys_moves_by_a_constant() {
        let k = keys(&Registry::new(), 10_000);
        assert_eq!(constant_difference(&k), None, "(lo, hi, kind) of a range that counts");
        // The control: the keys before this scheme, `siphash << 32 | n`,
        // whose low half counts by one.
        let r = Registry::new();
        let old: Vec<u64> = (0..10_000u64).map(|n| siphash24(r.secret.0, r.secret.1, n) << 32 | n).collect();
        assert!(constant_difference(&old).is_some(), "the check misses a visible counter");
    }

    #[test]
    fn the_siphash_round_function_hides_the_counter_too() {
        // (Where the CPU has no AES instructions: the same checks as for
        // the keys `new_key` makes here.)
        let r = Registry::new();
        let prf = KeyPrf::Sip(r.secret.0, r.secret.1);
        let mut k: Vec<u64> = (0..10_000).map(|n| permute(&prf, n)).collect();
        assert_eq!(constant_difference(&k), None, "(lo, hi, kind) of a range that counts");
        k.sort_unstable();
        k.dedup();
        assert_eq!(k.len(), 10_000);
    }

    #[test]
    fn two_domains_make_different_keys() {
        let a = keys(&Registry::new(), 1000);
        let b: std::collections::HashSet<u64> = keys(&Registry::new(), 1000).into_iter().collect();
        // (Two random 1000-key sets meet with p < 2^-44.)
        assert!(a.iter().all(|k| !b.contains(k)), "a key of one domain is also one of another's");
    }

    #[test]
    fn the_key_permutation_undone_gives_back_the_counter() {
        let r = Registry::new();
        let edges = [0, 1, u32::MAX as u64, 1 << 32, u64::MAX - 1, u64::MAX];
        // (Both round functions: the CPU's AES where it has it, SipHash.)
        for prf in [r.prf.clone(), KeyPrf::Sip(r.secret.0, r.secret.1)] {
            for n in (0..10_000).chain(edges) {
                let k = permute(&prf, n);
                assert_eq!(unpermute(&prf, k), n, "key {k:#x}");
            }
        }
        // (Fresh keys are the counter's images, in order, batch after
        // batch, and a batch's are each counter's alone.)
        for n in 0..3 * KEY_BATCH as u64 {
            let fresh = r.new_key();
            assert_eq!(unpermute(&r.prf, fresh), n);
            assert_eq!(fresh, permute(&r.prf, n));
        }
        for prf in [r.prf.clone(), KeyPrf::Sip(r.secret.0, r.secret.1)] {
            for n in [0, 1 << 32, u64::MAX - KEY_BATCH as u64 + 1] {
                let f0 = round_fn(&prf, 0, (n >> 32) as u32);
                let many: [u64; KEY_BATCH] = permute_many(&prf, n, f0);
                assert!(many.iter().enumerate().all(|(i, &k)| k == permute(&prf, n + i as u64)), "batch at {n:#x}");
            }
        }
    }

    #[test]
    fn siphash_matches_the_reference_vector() {
        // The paper's Appendix A: key 00 01 .. 0f, message 00 01 .. 07.
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let m = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(siphash24(k0, k1, m), 0x93f5_f579_9a93_2462);
    }

    #[test]
    fn requested_keys_collide() {
        let r = Registry::new();
        r.insert(region(0xC0DE, 0, 8, 0)).unwrap();
        assert!(r.insert(region(0xC0DE, 0, 8, 0)).is_err());
        r.remove(0xC0DE);
        r.insert(region(0xC0DE, 0, 8, 0)).unwrap();
    }
}
