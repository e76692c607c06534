//! One-copy transfers between processes: process_vm_readv/writev (CMA).
//!
//! The caller names the other process by pid and gives both sides' iovs as
//! (address, length) pairs; the kernel copies directly between the two
//! address spaces. Short transfers are resumed; an error (EFAULT for memory
//! CMA cannot reach, ESRCH for a process that is gone, EPERM when ptrace
//! rules forbid it) ends the transfer and is returned with what was copied.
//!
//! Device memory registered by the physical-address fallback is never
//! handed to the kernel's copies: CMA cannot reach it as the remote side,
//! and as the local side the kernel would copy it with byte-granular
//! string instructions. Every copy here of our own memory asks
//! `mr::phys::is_device` (one atomic load when there is none) and goes
//! through a bounce buffer and the aligned word copies of `mr::phys`.

use std::io;

/// The most iovs one process_vm_readv/writev call takes (the kernel's
/// UIO_MAXIOV); longer lists take several calls.
pub(crate) const IOV_MAX: usize = 1024;

fn to_iov(v: &[(usize, usize)]) -> Vec<libc::iovec> {
    v.iter().map(|&(a, l)| libc::iovec { iov_base: a as *mut libc::c_void, iov_len: l }).collect()
}

/// Advance an iov list by `n` bytes.
fn advance(v: &mut Vec<libc::iovec>, mut n: usize) {
    while n > 0 && !v.is_empty() {
        if v[0].iov_len <= n {
            n -= v[0].iov_len;
            v.remove(0);
        } else {
            // SAFETY: pointer arithmetic inside the iov the caller gave.
            v[0].iov_base = unsafe { (v[0].iov_base as *mut u8).add(n) } as *mut libc::c_void;
            v[0].iov_len -= n;
            n = 0;
        }
    }
}

/// (Saturating: a peer's lengths may add up past usize::MAX.)
fn total(v: &[(usize, usize)]) -> usize {
    v.iter().fold(0usize, |s, x| s.saturating_add(x.1))
}

/// The pieces of `iovs` from byte `offset` for `len` bytes.
pub fn slice(iovs: &[(usize, usize)], mut offset: usize, mut len: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for &(a, l) in iovs {
        if len == 0 {
            break;
        }
        if offset >= l {
            offset -= l;
            continue;
        }
        let n = (l - offset).min(len);
        out.push((a + offset, n));
        len -= n;
        offset = 0;
    }
    out
}

/// Bounce size for transfers whose local side is device memory.
const BOUNCE: usize = 256 << 10;

fn transfer(pid: u32, local: &[(usize, usize)], remote: &[(usize, usize)], write: bool) -> io::Result<usize> {
    if local.iter().any(|&(a, l)| crate::mr::phys::is_device(a, l)) {
        return transfer_bounced(pid, local, remote, write);
    }
    transfer_direct(pid, local, remote, write)
}

/// A transfer whose local side includes device memory: through a bounce
/// buffer, chunk by chunk.
fn transfer_bounced(pid: u32, local: &[(usize, usize)], remote: &[(usize, usize)], write: bool) -> io::Result<usize> {
    let want = total(local).min(total(remote));
    let mut buf = Vec::with_capacity(BOUNCE.min(want));
    let mut done = 0;
    while done < want {
        let n = (want - done).min(BOUNCE);
        let l = slice(local, done, n);
        let r = slice(remote, done, n);
        let got = if write {
            buf.clear();
            // SAFETY: the local iovs are the caller's own live buffers.
            unsafe { gather(&l, &mut buf) };
            transfer_direct(pid, &[(buf.as_ptr() as usize, n)], &r, true)?
        } else {
            buf.resize(n, 0);
            let got = transfer_direct(pid, &[(buf.as_mut_ptr() as usize, n)], &r, false)?;
            // SAFETY: as above.
            unsafe { scatter(&l, &buf[..got]) };
            got
        };
        done += got;
        if got < n {
            break;
        }
    }
    Ok(done)
}

fn transfer_direct(pid: u32, local: &[(usize, usize)], remote: &[(usize, usize)], write: bool) -> io::Result<usize> {
    let want = total(local).min(total(remote));
    let mut l = to_iov(local);
    let mut r = to_iov(remote);
    let mut done = 0;
    while done < want {
        // SAFETY: the local iovs are the caller's own live buffers (its
        // contract); the kernel checks the remote ones in the other process.
        let n = unsafe {
            if write {
                libc::process_vm_writev(
                    pid as i32,
                    l.as_ptr(),
                    l.len().min(IOV_MAX) as u64,
                    r.as_ptr(),
                    r.len().min(IOV_MAX) as u64,
                    0,
                )
            } else {
                libc::process_vm_readv(
                    pid as i32,
                    l.as_ptr(),
                    l.len().min(IOV_MAX) as u64,
                    r.as_ptr(),
                    r.len().min(IOV_MAX) as u64,
                    0,
                )
            }
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            break;
        }
        done += n as usize;
        advance(&mut l, n as usize);
        advance(&mut r, n as usize);
    }
    Ok(done)
}

/// Copy from `remote` in process `pid` into our `local` buffers.
pub fn read_from(pid: u32, local: &[(usize, usize)], remote: &[(usize, usize)]) -> io::Result<usize> {
    transfer(pid, local, remote, false)
}

/// Copy our `local` buffers into `remote` in process `pid`.
pub fn write_to(pid: u32, local: &[(usize, usize)], remote: &[(usize, usize)]) -> io::Result<usize> {
    transfer(pid, local, remote, true)
}

/// Copy `src` into our own buffers `dst` (scatter); returns bytes copied.
///
/// # Safety
/// Every (addr, len) in `dst` is writable memory of this process for the
/// duration of the call (libfabric's contract for posted buffers, or a
/// registration that was checked and is held).
pub unsafe fn scatter(dst: &[(usize, usize)], src: &[u8]) -> usize {
    let mut off = 0;
    for &(a, l) in dst {
        let n = l.min(src.len() - off);
        if crate::mr::phys::is_device(a, n) {
            // SAFETY: caller's contract; device memory takes aligned words.
            unsafe { crate::mr::phys::copy_to_device(a, &src[off..off + n]) };
        } else {
            // SAFETY: caller's contract for `a..a+l`; `src` has `n` bytes at `off`.
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
            // SAFETY: caller's contract; device memory takes aligned words.
            unsafe { crate::mr::phys::copy_from_device(&mut out[at..], a) };
        } else if l > 0 {
            // SAFETY: caller's contract.
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
    // SAFETY: caller's contract.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
}
