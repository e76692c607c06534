//! Copies of this process's own memory, for every wire: scatter a
//! message into posted buffers, gather buffers into a message, and the
//! (address, length) list arithmetic every copy uses.
//!
//! Device memory registered by the physical-address fallback is never
//! touched with memcpy: each copy here asks `phys::is_device` (one atomic
//! load when there is none) and moves such memory with the aligned word
//! copies of `phys`.

/// (Saturating: a peer's lengths may add up past usize::MAX.)
pub(crate) fn total(v: &[(usize, usize)]) -> usize {
    v.iter().fold(0usize, |s, x| s.saturating_add(x.1))
}

/// The most iovs a side of a copy has for it to be built on the stack
/// (`slice_into`, `transfer_direct`): the common one or two buffers take
/// no allocation on the way to the kernel; longer lists take vectors.
pub(crate) const STACK_IOVS: usize = 8;

/// The pieces of `iovs` from byte `offset` for `len` bytes.
fn pieces(iovs: &[(usize, usize)], offset: usize, len: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    // (Stops at the last piece: a long list is not walked to its end.)
    iovs.iter()
        .scan((offset, len), |(offset, len), &(a, l)| {
            if *len == 0 {
                return None;
            }
            if *offset >= l {
                *offset -= l;
                return Some(None);
            }
            let n = (l - *offset).min(*len);
            let at = a + *offset;
            *len -= n;
            *offset = 0;
            Some(Some((at, n)))
        })
        .flatten()
}

/// The pieces of `iovs` from byte `offset` for `len` bytes.
pub fn slice(iovs: &[(usize, usize)], offset: usize, len: usize) -> Vec<(usize, usize)> {
    pieces(iovs, offset, len).collect()
}

/// `slice` into `buf`, without allocating: None when the pieces do not
/// fit in it.
pub fn slice_into<'a>(
    iovs: &[(usize, usize)],
    offset: usize,
    len: usize,
    buf: &'a mut [(usize, usize); STACK_IOVS],
) -> Option<&'a [(usize, usize)]> {
    let mut n = 0;
    for p in pieces(iovs, offset, len) {
        *buf.get_mut(n)? = p;
        n += 1;
    }
    Some(&buf[..n])
}

/// The pieces of `iovs` from byte `offset` for `len` bytes, in `buf` when
/// they fit (`slice_into`), else in `spill`.
pub fn slice_or_spill<'a>(
    iovs: &[(usize, usize)],
    offset: usize,
    len: usize,
    buf: &'a mut [(usize, usize); STACK_IOVS],
    spill: &'a mut Vec<(usize, usize)>,
) -> &'a [(usize, usize)] {
    match slice_into(iovs, offset, len, buf).map(|s| s.len()) {
        Some(n) => &buf[..n],
        None => {
            *spill = slice(iovs, offset, len);
            spill
        }
    }
}

/// Copy `src` into our own buffers `dst` (scatter); returns bytes copied.
///
/// # Safety
/// Every (addr, len) in `dst` is writable memory of this process for the
/// duration of the call (libfabric's contract for posted buffers, or a
/// registration that was checked and is held).
#[inline(always)]
pub unsafe fn scatter(dst: &[(usize, usize)], src: &[u8]) -> usize {
    let mut off = 0;
    for &(a, l) in dst {
        let n = l.min(src.len() - off);
        if let Some(fenced) = crate::mr::phys::device_at(a, n) {
            // SAFETY: `a..a+n` is writable (this fn's contract) device memory, which copy_to_device writes in aligned words.
            unsafe { crate::mr::phys::copy_to_device(a, &src[off..off + n], fenced) };
        } else {
            // SAFETY: `a..a+l` is writable (this fn's contract), n <= l; `src` has `n` bytes at `off`.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(off), a as *mut u8, n) };
        }
        off += n;
        if off == src.len() {
            break;
        }
    }
    off
}

/// Gather our own buffers `src` into a vector.
///
/// # Safety
/// Every (addr, len) in `src` is readable memory of this process.
pub unsafe fn gather(src: &[(usize, usize)], out: &mut Vec<u8>) {
    for &(a, l) in src {
        if l > 0 && crate::mr::phys::is_device(a, l) {
            let at = out.len();
            out.resize(at + l, 0);
            // SAFETY: `a..a+l` is readable (this fn's contract) device memory, read in aligned words; `out[at..]` has l bytes.
            unsafe { crate::mr::phys::copy_from_device(&mut out[at..], a) };
        } else if l > 0 {
            // SAFETY: `a..a+l` is readable memory of this process (this fn's contract), l > 0.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(a as *const u8, l) });
        }
    }
}

/// Our own buffer as a slice (never device memory: callers check
/// `mr::phys::is_device` and gather such buffers instead).
///
/// # Safety
/// `(addr, len)` is readable memory of this process for the lifetime the
/// caller uses the slice (an application buffer during the call).
pub unsafe fn view<'a>((addr, len): (usize, usize)) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: `addr..addr+len` is readable for the slice's lifetime (this fn's contract), len > 0.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_into_gives_what_slice_gives_or_none_past_the_stack_size() {
        let iovs: Vec<(usize, usize)> = (0..12).map(|i| (0x10000 * (i + 1), 100 + 37 * i)).collect();
        let all = total(&iovs);
        for off in [0, 1, 99, 100, 101, 500, all - 1] {
            for len in [0, 1, 63, 200, 1000, all - off].into_iter().filter(|&l| l <= all - off) {
                let want = slice(&iovs, off, len);
                assert_eq!(total(&want), len, "off {off} len {len}");
                let mut buf = [(0, 0); STACK_IOVS];
                match slice_into(&iovs, off, len, &mut buf) {
                    Some(got) => assert_eq!(got, &want[..], "off {off} len {len}"),
                    None => assert!(want.len() > STACK_IOVS, "off {off} len {len}: {} pieces", want.len()),
                }
                let (mut buf, mut spill) = ([(0, 0); STACK_IOVS], Vec::new());
                assert_eq!(slice_or_spill(&iovs, off, len, &mut buf, &mut spill), &want[..], "off {off} len {len}");
            }
        }
    }
}
