//! One-copy transfers between processes: process_vm_readv/writev (CMA).
//!
//! The caller names the other process by pid and gives both sides' iovs as
//! (address, length) pairs; the kernel copies directly between the two
//! address spaces. Short transfers are resumed; an error (EFAULT for memory
//! CMA cannot reach, ESRCH for a process that is gone, EPERM when ptrace
//! rules forbid it) ends the transfer and is returned with what was copied.

use std::io;

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

fn total(v: &[(usize, usize)]) -> usize {
    v.iter().map(|x| x.1).sum()
}

fn transfer(pid: u32, local: &[(usize, usize)], remote: &[(usize, usize)], write: bool) -> io::Result<usize> {
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
                    l.len().min(1024) as u64,
                    r.as_ptr(),
                    r.len().min(1024) as u64,
                    0,
                )
            } else {
                libc::process_vm_readv(
                    pid as i32,
                    l.as_ptr(),
                    l.len().min(1024) as u64,
                    r.as_ptr(),
                    r.len().min(1024) as u64,
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
        // SAFETY: caller's contract for `a..a+l`; `src` has `n` bytes at `off`.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(off), a as *mut u8, n) };
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
        if l > 0 {
            // SAFETY: caller's contract.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(a as *const u8, l) });
        }
    }
}

/// Our own buffer as a slice.
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
