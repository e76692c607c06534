//! Atomic operations on this process's own memory (FI_ATOMIC at the
//! target): which (operation, datatype) pairs oxmr executes, and their
//! execution, element by element, atomic with respect to every other
//! atomic on the same bytes, from any peer or thread.
//!
//! - Elements of 1, 2, 4 or 8 bytes at their natural alignment inside one
//!   piece of the target are changed with the CPU's compare-and-swap, so
//!   they are atomic also against the application's own CPU atomics on
//!   them (MPI's one-sided locks mix the two on the window's owner).
//! - 16-byte elements (double complex, 128-bit integers), misaligned ones
//!   and ones that straddle two pieces of a `fi_mr_regv` region are
//!   changed under one of [`STRIPES`] locks chosen by the element's
//!   address: atomic against oxmr's other atomics, as fi_atomic(3) asks.
//! - Long double and long double complex are not offered (valid calls say
//!   -FI_EOPNOTSUPP): their format is compiler and platform specific
//!   (fi_atomic(3)), and libfabric's own util atomics leave them out too.
//!
//! The table of what is defined follows fi_atomic(3): MIN, MAX and the
//! ordered compares (CSWAP_LE..GT) on integers and reals; SUM, PROD and the
//! logical operations on every type; the bitwise operations and MSWAP on
//! integers; READ, WRITE, CSWAP and CSWAP_NE on every type.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use oxmr_ffi as ffi;

/// Which family of calls an atomic comes from (fi_atomic(3)): the base
/// calls (the result stays at the target), the fetch calls (the old value
/// comes back) and the compare calls (the old value comes back, and a
/// compare operand goes along).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Call {
    Write = 0,
    Fetch = 1,
    Compare = 2,
}

impl Call {
    /// From its number on the wire (None: no such call).
    pub fn from_wire(v: u8) -> Option<Call> {
        [Call::Write, Call::Fetch, Call::Compare].get(v as usize).copied()
    }
}

/// The most operand bytes one atomic carries (`count` × the datatype's
/// size): an operand and a compare operand, with the header, fit the
/// smallest frame of every wire (the shm cell).
pub(crate) const MAX_BYTES: usize = 2048;

/// Locks for the elements that no single CPU instruction changes.
const STRIPES: usize = 64;
static LOCKS: [Mutex<()>; STRIPES] = [const { Mutex::new(()) }; STRIPES];

/// What class of value a datatype is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Int,
    Real,
    Complex,
}

/// A datatype's class and size in bytes (None: not offered).
fn class_of(dt: u32) -> Option<(Class, usize)> {
    Some(match dt {
        ffi::FI_INT8 | ffi::FI_UINT8 => (Class::Int, 1),
        ffi::FI_INT16 | ffi::FI_UINT16 => (Class::Int, 2),
        ffi::FI_INT32 | ffi::FI_UINT32 => (Class::Int, 4),
        ffi::FI_INT64 | ffi::FI_UINT64 => (Class::Int, 8),
        ffi::FI_INT128 | ffi::FI_UINT128 => (Class::Int, 16),
        ffi::FI_FLOAT => (Class::Real, 4),
        ffi::FI_DOUBLE => (Class::Real, 8),
        ffi::FI_FLOAT_COMPLEX => (Class::Complex, 8),
        ffi::FI_DOUBLE_COMPLEX => (Class::Complex, 16),
        _ => return None,
    })
}

/// The size of one element of `dt` when oxmr executes `op` on it through
/// `call` (None: that call does not take that operation, or the operation
/// is not defined on that type, or the type is not offered).
pub fn valid(call: Call, op: u32, dt: u32) -> Option<usize> {
    let (class, size) = class_of(dt)?;
    let in_call = match call {
        Call::Write => op <= ffi::FI_BXOR || op == ffi::FI_ATOMIC_WRITE,
        Call::Fetch => op <= ffi::FI_ATOMIC_WRITE,
        Call::Compare => (ffi::FI_CSWAP..=ffi::FI_MSWAP).contains(&op),
    };
    let on_type = match op {
        ffi::FI_MIN | ffi::FI_MAX => class != Class::Complex,
        ffi::FI_CSWAP_LE | ffi::FI_CSWAP_LT | ffi::FI_CSWAP_GE | ffi::FI_CSWAP_GT => class != Class::Complex,
        ffi::FI_BOR | ffi::FI_BAND | ffi::FI_BXOR | ffi::FI_MSWAP => class == Class::Int,
        _ => true,
    };
    (in_call && on_type).then_some(size)
}

/// Whether `op` takes an operand from the initiator (all but READ).
pub fn has_operand(op: u32) -> bool {
    op != ffi::FI_ATOMIC_READ
}

/// The new value of one element: `old` at the target, `b` the operand,
/// `c` the compare operand (or mask); written into `out` (same size), and
/// whether the target changes at all. Pure: no memory but its arguments.
fn combine(op: u32, dt: u32, old: &[u8], b: &[u8], c: &[u8], out: &mut [u8]) -> bool {
    // (An operand the call does not carry, READ's, reads as zeros.)
    let zeros = [0u8; 16];
    let b = if b.is_empty() { &zeros[..old.len()] } else { b };
    let c = if c.is_empty() { &zeros[..old.len()] } else { c };
    macro_rules! int {
        ($t:ty) => {{
            let get = |x: &[u8]| <$t>::from_ne_bytes(x.try_into().unwrap_or_default());
            let (a, b, c) = (get(old), get(b), get(c));
            let r: Option<$t> = match op {
                ffi::FI_MIN => (b < a).then_some(b),
                ffi::FI_MAX => (b > a).then_some(b),
                ffi::FI_SUM => Some(a.wrapping_add(b)),
                ffi::FI_PROD => Some(a.wrapping_mul(b)),
                ffi::FI_LOR => Some((a != 0 || b != 0) as $t),
                ffi::FI_LAND => Some((a != 0 && b != 0) as $t),
                ffi::FI_LXOR => Some(((a != 0) != (b != 0)) as $t),
                ffi::FI_BOR => Some(a | b),
                ffi::FI_BAND => Some(a & b),
                ffi::FI_BXOR => Some(a ^ b),
                ffi::FI_ATOMIC_WRITE => Some(b),
                ffi::FI_CSWAP => (c == a).then_some(b),
                ffi::FI_CSWAP_NE => (c != a).then_some(b),
                ffi::FI_CSWAP_LE => (c <= a).then_some(b),
                ffi::FI_CSWAP_LT => (c < a).then_some(b),
                ffi::FI_CSWAP_GE => (c >= a).then_some(b),
                ffi::FI_CSWAP_GT => (c > a).then_some(b),
                ffi::FI_MSWAP => Some((b & c) | (a & !c)),
                _ => None,
            };
            r.map(|v| out.copy_from_slice(&v.to_ne_bytes())).is_some()
        }};
    }
    macro_rules! real {
        ($t:ty) => {{
            let get = |x: &[u8]| <$t>::from_ne_bytes(x.try_into().unwrap_or_default());
            let (a, b, c) = (get(old), get(b), get(c));
            let truth = |x: bool| if x { 1.0 } else { 0.0 };
            let r: Option<$t> = match op {
                ffi::FI_MIN => (b < a).then_some(b),
                ffi::FI_MAX => (b > a).then_some(b),
                ffi::FI_SUM => Some(a + b),
                ffi::FI_PROD => Some(a * b),
                ffi::FI_LOR => Some(truth(a != 0.0 || b != 0.0)),
                ffi::FI_LAND => Some(truth(a != 0.0 && b != 0.0)),
                ffi::FI_LXOR => Some(truth((a != 0.0) != (b != 0.0))),
                ffi::FI_ATOMIC_WRITE => Some(b),
                ffi::FI_CSWAP => (c == a).then_some(b),
                ffi::FI_CSWAP_NE => (c != a).then_some(b),
                ffi::FI_CSWAP_LE => (c <= a).then_some(b),
                ffi::FI_CSWAP_LT => (c < a).then_some(b),
                ffi::FI_CSWAP_GE => (c >= a).then_some(b),
                ffi::FI_CSWAP_GT => (c > a).then_some(b),
                _ => None,
            };
            r.map(|v| out.copy_from_slice(&v.to_ne_bytes())).is_some()
        }};
    }
    macro_rules! complex {
        ($t:ty) => {{
            const H: usize = size_of::<$t>();
            let get = |x: &[u8]| {
                let part = |i: usize| <$t>::from_ne_bytes(x[i * H..(i + 1) * H].try_into().unwrap_or_default());
                (part(0), part(1))
            };
            let (a, b, c) = (get(old), get(b), get(c));
            let nz = |x: ($t, $t)| x.0 != 0.0 || x.1 != 0.0;
            let truth = |x: bool| if x { (1.0, 0.0) } else { (0.0, 0.0) };
            let r: Option<($t, $t)> = match op {
                ffi::FI_SUM => Some((a.0 + b.0, a.1 + b.1)),
                ffi::FI_PROD => Some((a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)),
                ffi::FI_LOR => Some(truth(nz(a) || nz(b))),
                ffi::FI_LAND => Some(truth(nz(a) && nz(b))),
                ffi::FI_LXOR => Some(truth(nz(a) != nz(b))),
                ffi::FI_ATOMIC_WRITE => Some(b),
                ffi::FI_CSWAP => (c == a).then_some(b),
                ffi::FI_CSWAP_NE => (c != a).then_some(b),
                _ => None,
            };
            r.map(|v| {
                out[..H].copy_from_slice(&v.0.to_ne_bytes());
                out[H..].copy_from_slice(&v.1.to_ne_bytes());
            })
            .is_some()
        }};
    }
    match dt {
        ffi::FI_INT8 => int!(i8),
        ffi::FI_UINT8 => int!(u8),
        ffi::FI_INT16 => int!(i16),
        ffi::FI_UINT16 => int!(u16),
        ffi::FI_INT32 => int!(i32),
        ffi::FI_UINT32 => int!(u32),
        ffi::FI_INT64 => int!(i64),
        ffi::FI_UINT64 => int!(u64),
        ffi::FI_INT128 => int!(i128),
        ffi::FI_UINT128 => int!(u128),
        ffi::FI_FLOAT => real!(f32),
        ffi::FI_DOUBLE => real!(f64),
        ffi::FI_FLOAT_COMPLEX => complex!(f32),
        ffi::FI_DOUBLE_COMPLEX => complex!(f64),
        _ => false,
    }
}

/// The reference computation of one element, for tests elsewhere: what
/// the target becomes and what a fetch returns, from plain values.
pub fn reference(op: u32, dt: u32, old: &[u8], b: &[u8], c: &[u8]) -> Vec<u8> {
    let mut out = old.to_vec();
    if !combine(op, dt, old, b, c, &mut out) {
        out.copy_from_slice(old);
    }
    out
}

/// Execute `op` on the elements of datatype `dt` at `at` (the target's
/// pieces, in order, as many bytes as `old_out` will get), with the
/// operands `b` and compare operands `c` (each as long as the target, or
/// empty where the call has none), appending each element's old value to
/// `old_out`. Returns the bytes done (the target's length, rounded down to
/// whole elements).
///
/// # Safety
/// Every piece in `at` is readable and writable memory of this process for
/// the call (a registration checked for the access and held), and none is
/// device memory (`phys`), whose bus may not take CPU atomics.
pub unsafe fn execute(op: u32, dt: u32, at: &[(usize, usize)], b: &[u8], c: &[u8], old_out: &mut Vec<u8>) -> usize {
    let Some((_, size)) = class_of(dt) else { return 0 };
    let total: usize = at.iter().map(|x| x.1).sum();
    let n = total / size;
    let mut piece = 0;
    let mut into_piece = 0;
    for i in 0..n {
        let range = i * size..(i + 1) * size;
        let (bi, ci) = (b.get(range.clone()).unwrap_or(&[]), c.get(range).unwrap_or(&[]));
        while at.get(piece).is_some_and(|p| into_piece >= p.1) {
            piece += 1;
            into_piece = 0;
        }
        let Some(&(base, plen)) = at.get(piece) else { break };
        let addr = base + into_piece;
        let mut old = [0u8; 16];
        if plen - into_piece >= size && addr.is_multiple_of(size) && size <= 8 {
            // SAFETY: `addr..addr+size` lies in one piece of `at`, readable and writable (this fn's contract), aligned to `size`.
            unsafe { cas(op, dt, addr, size, bi, ci, &mut old[..size]) };
            into_piece += size;
        } else {
            let _g = LOCKS[(addr / 8) % STRIPES].lock().unwrap_or_else(|e| e.into_inner());
            let mut here = Vec::with_capacity(size);
            let (mut p, mut off) = (piece, into_piece);
            let mut spots = Vec::with_capacity(2);
            while here.len() < size {
                let Some(&(pb, pl)) = at.get(p) else { break };
                let k = (pl - off).min(size - here.len());
                // SAFETY: `pb+off..pb+off+k` lies in piece `p` of `at`, readable (this fn's contract).
                here.extend_from_slice(unsafe { std::slice::from_raw_parts((pb + off) as *const u8, k) });
                spots.push((pb + off, k));
                (p, off) = if off + k == pl { (p + 1, 0) } else { (p, off + k) };
            }
            if here.len() < size {
                break;
            }
            old[..size].copy_from_slice(&here);
            let mut new = [0u8; 16];
            if combine(op, dt, &here, bi, ci, &mut new[..size]) {
                let mut from = 0;
                for (a, k) in spots {
                    // SAFETY: each spot was read above from a writable piece of `at` (this fn's contract); `new` has `size` bytes.
                    unsafe { std::ptr::copy_nonoverlapping(new.as_ptr().add(from), a as *mut u8, k) };
                    from += k;
                }
            }
            (piece, into_piece) = (p, off);
        }
        old_out.extend_from_slice(&old[..size]);
    }
    n * size
}

/// One element of 1, 2, 4 or 8 bytes, changed with compare-and-swap.
///
/// # Safety
/// `addr..addr+size` is readable and writable memory of this process,
/// aligned to `size`, for the call.
unsafe fn cas(op: u32, dt: u32, addr: usize, size: usize, b: &[u8], c: &[u8], old: &mut [u8]) {
    macro_rules! run {
        ($atomic:ty, $u:ty) => {{
            // SAFETY: `addr` is aligned to the size of `$u` and points at memory this process may read and write for the call (this fn's contract); every access to it from here is atomic.
            let cell = unsafe { <$atomic>::from_ptr(addr as *mut $u) };
            let mut cur = cell.load(Ordering::Acquire);
            loop {
                let was = cur.to_ne_bytes();
                let mut new = [0u8; size_of::<$u>()];
                if !combine(op, dt, &was, b, c, &mut new) {
                    old.copy_from_slice(&was);
                    break;
                }
                match cell.compare_exchange_weak(cur, <$u>::from_ne_bytes(new), Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        old.copy_from_slice(&was);
                        break;
                    }
                    Err(now) => cur = now,
                }
            }
        }};
    }
    match size {
        1 => run!(AtomicU8, u8),
        2 => run!(AtomicU16, u16),
        4 => run!(AtomicU32, u32),
        _ => run!(AtomicU64, u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPS: u32 = ffi::FI_ATOMIC_OP_LAST;

    #[test]
    fn the_table_follows_fi_atomic() {
        use ffi::*;
        // Every call takes exactly its operations.
        for op in 0..OPS {
            assert_eq!(valid(Call::Write, op, FI_INT64).is_some(), op <= FI_BXOR || op == FI_ATOMIC_WRITE);
            assert_eq!(valid(Call::Fetch, op, FI_INT64).is_some(), op <= FI_ATOMIC_WRITE);
            assert_eq!(valid(Call::Compare, op, FI_INT64).is_some(), op >= FI_CSWAP);
        }
        assert_eq!(valid(Call::Write, FI_BOR, FI_DOUBLE), None, "bitwise: integers only");
        assert_eq!(valid(Call::Compare, FI_MSWAP, FI_FLOAT), None, "MSWAP: integers only");
        assert_eq!(valid(Call::Write, FI_MIN, FI_FLOAT_COMPLEX), None, "no order on complex");
        assert_eq!(valid(Call::Compare, FI_CSWAP_GT, FI_DOUBLE_COMPLEX), None);
        assert_eq!(valid(Call::Compare, FI_CSWAP, FI_DOUBLE_COMPLEX), Some(16));
        assert_eq!(valid(Call::Write, FI_PROD, FI_FLOAT_COMPLEX), Some(8));
        assert_eq!(valid(Call::Write, FI_SUM, ffi::FI_UINT128), Some(16));
        assert_eq!(valid(Call::Write, FI_SUM, FI_LONG_DOUBLE), None, "long double is not offered");
        assert_eq!(valid(Call::Write, FI_SUM, 99), None);
        assert_eq!(valid(Call::Fetch, OPS, FI_INT8), None);
    }

    #[test]
    fn each_operation_computes_what_the_man_page_says() {
        use ffi::*;
        let i = |v: i32| v.to_ne_bytes().to_vec();
        let r = |op, a, b, c| i32::from_ne_bytes(reference(op, FI_INT32, &i(a), &i(b), &i(c)).try_into().unwrap());
        assert_eq!(r(FI_MIN, 5, 3, 0), 3);
        assert_eq!(r(FI_MIN, 5, 7, 0), 5);
        assert_eq!(r(FI_MAX, 5, 7, 0), 7);
        assert_eq!(r(FI_SUM, i32::MAX, 1, 0), i32::MIN, "wraps");
        assert_eq!(r(FI_PROD, -3, 4, 0), -12);
        assert_eq!(r(FI_LOR, 0, 9, 0), 1);
        assert_eq!(r(FI_LAND, 2, 0, 0), 0);
        assert_eq!(r(FI_LXOR, 2, 3, 0), 0);
        assert_eq!(r(FI_LXOR, 0, 3, 0), 1);
        assert_eq!(r(FI_BXOR, 0b1100, 0b1010, 0), 0b0110);
        assert_eq!(r(FI_ATOMIC_READ, 42, 0, 0), 42);
        assert_eq!(r(FI_ATOMIC_WRITE, 42, 7, 0), 7);
        assert_eq!(r(FI_CSWAP, 42, 7, 42), 7);
        assert_eq!(r(FI_CSWAP, 42, 7, 41), 42);
        assert_eq!(r(FI_CSWAP_NE, 42, 7, 41), 7);
        assert_eq!(r(FI_CSWAP_LE, 42, 7, 42), 7, "compare <= target");
        assert_eq!(r(FI_CSWAP_LT, 42, 7, 42), 42);
        assert_eq!(r(FI_CSWAP_GE, 42, 7, 43), 7);
        assert_eq!(r(FI_CSWAP_GT, 42, 7, 42), 42);
        assert_eq!(r(FI_MSWAP, 0b1111_0000, 0b0000_1111, 0b0011_1100), 0b1100_1100);
        let z = |re: f32, im: f32| [re.to_ne_bytes(), im.to_ne_bytes()].concat();
        let p = reference(FI_PROD, FI_FLOAT_COMPLEX, &z(1.0, 2.0), &z(3.0, 4.0), &[]);
        assert_eq!(p, z(-5.0, 10.0), "(1+2i)(3+4i)");
        let d = |v: f64| v.to_ne_bytes().to_vec();
        assert_eq!(reference(FI_MAX, FI_DOUBLE, &d(1.5), &d(2.5), &[]), d(2.5));
        let w = |v: u128| v.to_ne_bytes().to_vec();
        assert_eq!(reference(FI_SUM, ffi::FI_UINT128, &w(u64::MAX as u128), &w(1), &[]), w(1 << 64));
    }

    #[test]
    fn execute_changes_memory_and_returns_the_old_values() {
        use ffi::*;
        // Aligned elements (CAS), then a misaligned and a straddling one (locks).
        let mut mem = [0u64; 4];
        mem[0] = 10;
        mem[1] = 20;
        let base = mem.as_mut_ptr() as usize;
        let ops: Vec<u8> = [1u64, 2].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut old = Vec::new();
        // SAFETY: `mem` is this test's own, 32 writable bytes.
        let n = unsafe { execute(FI_SUM, FI_UINT64, &[(base, 16)], &ops, &[], &mut old) };
        assert_eq!((n, &mem[..2]), (16, &[11u64, 22][..]));
        assert_eq!(old, [10u64, 20].iter().flat_map(|v| v.to_ne_bytes()).collect::<Vec<u8>>());
        let mut bytes = [0u8; 24];
        bytes[3..11].copy_from_slice(&5u64.to_ne_bytes());
        let b = bytes.as_mut_ptr() as usize;
        let mut old = Vec::new();
        // SAFETY: `bytes` is this test's own; the two pieces split one element (3..7 and 7..11).
        let n = unsafe { execute(FI_SUM, FI_UINT64, &[(b + 3, 4), (b + 7, 4)], &7u64.to_ne_bytes(), &[], &mut old) };
        assert_eq!(n, 8);
        assert_eq!(u64::from_ne_bytes(bytes[3..11].try_into().unwrap()), 12);
        assert_eq!(old, 5u64.to_ne_bytes());
    }

    #[test]
    fn concurrent_sums_lose_nothing() {
        use ffi::*;
        let cell = Box::new([0u64; 2]);
        let base = cell.as_ptr() as usize;
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let mut old = Vec::new();
                        // SAFETY: `cell` outlives the threads (joined below); every access to it here is atomic.
                        unsafe { execute(FI_SUM, FI_UINT64, &[(base, 8)], &1u64.to_ne_bytes(), &[], &mut old) };
                        // (A misaligned 4-byte element: the lock path.)
                        // SAFETY: as above, bytes 9..13 of the cell.
                        unsafe { execute(FI_SUM, FI_UINT32, &[(base + 9, 4)], &1u32.to_ne_bytes(), &[], &mut old) };
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(cell[0], 40_000);
        assert_eq!(u32::from_ne_bytes(cell[1].to_ne_bytes()[1..5].try_into().unwrap()), 40_000);
    }
}
