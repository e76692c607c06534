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

use crate::mr::local::{gather, scatter, slice, total, STACK_IOVS};

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

/// Up to STACK_IOVS (address, length) pairs as iovecs on the stack.
fn stack_iovs(v: &[(usize, usize)]) -> [libc::iovec; STACK_IOVS] {
    let mut out = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; STACK_IOVS];
    for (d, &(a, n)) in out.iter_mut().zip(v) {
        *d = libc::iovec { iov_base: a as *mut libc::c_void, iov_len: n };
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
            // SAFETY: the local iovs are the caller's own live, writable buffers; `got` <= n bytes.
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

/// One process_vm_readv/writev call (at most IOV_MAX iovs a side).
fn call(pid: u32, l: &[libc::iovec], r: &[libc::iovec], write: bool) -> io::Result<usize> {
    let (nl, nr) = (l.len().min(IOV_MAX) as u64, r.len().min(IOV_MAX) as u64);
    // SAFETY: the local iovs are the caller's own live buffers (its
    // contract); the kernel checks the remote ones in the other process.
    let n = unsafe {
        if write {
            libc::process_vm_writev(pid as i32, l.as_ptr(), nl, r.as_ptr(), nr, 0)
        } else {
            libc::process_vm_readv(pid as i32, l.as_ptr(), nl, r.as_ptr(), nr, 0)
        }
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

fn transfer_direct(pid: u32, local: &[(usize, usize)], remote: &[(usize, usize)], write: bool) -> io::Result<usize> {
    let want = total(local).min(total(remote));
    if want == 0 {
        return Ok(0);
    }
    if local.len() <= STACK_IOVS && remote.len() <= STACK_IOVS {
        // The common case, built on the stack: one call, which moves
        // everything unless the kernel stops short.
        let (l, r) = (stack_iovs(local), stack_iovs(remote));
        let n = call(pid, &l[..local.len()], &r[..remote.len()], write)?;
        if n >= want || n == 0 {
            return Ok(n);
        }
        let rest = want - n;
        return Ok(n + transfer_list(pid, &slice(local, n, rest), &slice(remote, n, rest), write)?);
    }
    transfer_list(pid, local, remote, write)
}

/// `transfer_direct` on vectors of iovs, resuming short copies.
fn transfer_list(pid: u32, local: &[(usize, usize)], remote: &[(usize, usize)], write: bool) -> io::Result<usize> {
    let want = total(local).min(total(remote));
    let mut l = to_iov(local);
    let mut r = to_iov(remote);
    let mut done = 0;
    while done < want {
        let n = call(pid, &l, &r, write)?;
        if n == 0 {
            break;
        }
        done += n;
        advance(&mut l, n);
        advance(&mut r, n);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies within this process (process_vm_readv/writev accept our own
    /// pid) through both ways of building the iovs: on the stack (up to
    /// STACK_IOVS a side) and in vectors, each byte where it belongs.
    #[test]
    fn transfers_move_every_byte_with_few_or_many_iovs() {
        let pid = std::process::id();
        for pieces in [1, 2, STACK_IOVS, STACK_IOVS + 1, 40] {
            let src: Vec<u8> = (0..pieces * 1000).map(|i| (i * 7 + pieces) as u8).collect();
            let mut dst = vec![0u8; src.len() + 1];
            // Local side in `pieces` pieces of 1000, remote side in one or
            // in 3000-byte pieces: the two lists cut the bytes differently.
            let local: Vec<_> = (0..pieces).map(|i| (dst.as_mut_ptr() as usize + i * 1000, 1000)).collect();
            let remote: Vec<_> = (0..src.len().div_ceil(3000))
                .map(|i| (src.as_ptr() as usize + i * 3000, (src.len() - i * 3000).min(3000)))
                .collect();
            assert_eq!(read_from(pid, &local, &remote).unwrap(), src.len(), "{pieces} pieces");
            assert_eq!(&dst[..src.len()], &src[..]);
            assert_eq!(dst[src.len()], 0, "nothing past the end");
            let mut back = vec![0u8; src.len()];
            let far = [(back.as_mut_ptr() as usize, back.len())];
            assert_eq!(write_to(pid, &local, &far).unwrap(), src.len());
            assert_eq!(back, src);
        }
        assert_eq!(read_from(pid, &[], &[]).unwrap(), 0);
    }

    /// A remote side that runs into unmapped memory: the bytes before it
    /// are copied, then the error is returned (not a short success).
    #[test]
    fn a_copy_into_unmapped_memory_fails() {
        let pid = std::process::id();
        // SAFETY: a fresh private mapping of two pages, second one unmapped
        // again, used only through the kernel's checked copies below.
        let base = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            libc::munmap((p as *mut u8).add(4096) as *mut libc::c_void, 4096);
            p as usize
        };
        let src = vec![5u8; 6000];
        for remote in [vec![(base + 96, 6000)], (0..3).map(|i| (base + 96 + 2000 * i, 2000)).collect()] {
            let local = [(src.as_ptr() as usize, src.len())];
            let e = write_to(pid, &local, &remote).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
            // SAFETY: the first page is still mapped; read what landed.
            let landed = unsafe { std::slice::from_raw_parts((base + 96) as *const u8, 4000) };
            assert!(landed.iter().all(|&b| b == 5));
        }
        // SAFETY: the page mapped above.
        unsafe { libc::munmap(base as *mut libc::c_void, 4096) };
    }
}
