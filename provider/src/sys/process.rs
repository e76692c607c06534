//! Who we are, without a system call on the hot path: a token that names
//! this process image (it changes in a forked child), and random bytes
//! from the kernel for seeding.
//!
//! glibc no longer caches getpid (2.25), so `std::process::id()` is a
//! system call every time; the registration cache asked it twice per
//! fi_mr_reg + fi_close. Here the token lives in one page marked
//! MADV_WIPEONFORK (Linux 4.14): the kernel hands a forked child that page
//! zero-filled, whatever the child was forked with (fork, vfork+exec,
//! clone without CLONE_VM), and no atfork handler has to run. The first
//! call in a process (or in a child, seeing zero) draws a fresh random
//! token; every later call is one atomic load. Where madvise refuses the
//! flag (kernels before 4.14), the token is the pid, read each time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The token's page: `None` where the kernel has no MADV_WIPEONFORK.
static PAGE: OnceLock<Option<&'static AtomicU64>> = OnceLock::new();

fn page() -> Option<&'static AtomicU64> {
    *PAGE.get_or_init(|| {
        // SAFETY: a new private anonymous page, never unmapped (it lives as
        // long as the process, as a static would).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: `p` is the page just mapped; the advice changes only what
        // a child inherits.
        if unsafe { libc::madvise(p, 4096, libc::MADV_WIPEONFORK) } != 0 {
            // SAFETY: our own page, not shared with anything yet.
            unsafe { libc::munmap(p, 4096) };
            return None;
        }
        // SAFETY: the page is mapped read-write for good, zero-filled and
        // page-aligned, so its first 8 bytes are a valid AtomicU64.
        Some(unsafe { &*(p as *const AtomicU64) })
    })
}

/// A value that names this process image: equal for every call in one
/// process, different in a forked child (and never 0).
#[inline(always)]
pub fn token() -> u64 {
    let Some(t) = page() else { return std::process::id() as u64 | 1 << 63 };
    let now = t.load(Ordering::Acquire);
    if now != 0 {
        return now;
    }
    // A new process (or a child whose page the kernel wiped): draw one.
    // Two threads racing here agree on whichever stored first.
    let fresh = random_u64() | 1;
    match t.compare_exchange(0, fresh, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => fresh,
        Err(won) => won,
    }
}

/// 8 random bytes from the kernel (getrandom). On the rare failure (a
/// kernel without getrandom, or a seccomp filter), a mix of the clock and
/// the pid: unique enough for tokens and epochs, not secret.
pub fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into the 8-byte buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == b.len() as isize {
        return u64::from_ne_bytes(b);
    }
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    t.rotate_left(17) ^ (std::process::id() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Fill `b` from the kernel's random pool (getrandom), with no fallback:
/// for secrets and nonces, where a guessable value would be worse than
/// none.
pub fn random_bytes(b: &mut [u8]) -> std::io::Result<()> {
    let mut at = 0;
    while at < b.len() {
        // SAFETY: getrandom writes at most `b.len() - at` bytes into the
        // rest of `b`, which is ours and that long.
        let n = unsafe { libc::getrandom(b[at..].as_mut_ptr().cast(), b.len() - at, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
            continue;
        }
        at += n as usize;
    }
    Ok(())
}

/// The soft limit on this process's file descriptors (None: unlimited or
/// unknown).
pub fn nofile_limit() -> Option<usize> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into `r`, ours.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0;
    (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur as usize)
}

/// 4 random bytes from the kernel (see `random_u64`).
pub fn random_u32() -> u32 {
    random_u64() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_stable_here_and_new_in_a_forked_child() {
        let mine = token();
        assert_ne!(mine, 0);
        assert_eq!(token(), mine, "two calls in one process");
        assert!(page().is_some(), "this kernel (>= 4.14) has MADV_WIPEONFORK");
        let mut fds = [0i32; 2];
        // SAFETY: a pipe for the child's answer.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only computes the token, writes it and exits
        // with _exit (no destructors, no allocation from a lock another
        // thread held: `token` takes no lock once PAGE is set).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let t = token().to_ne_bytes();
            // SAFETY: writes the 8 bytes to the pipe and leaves.
            unsafe {
                libc::write(fds[1], t.as_ptr().cast(), 8);
                libc::_exit(0);
            }
        }
        let mut b = [0u8; 8];
        // SAFETY: reads the child's 8 bytes; waits for it.
        unsafe {
            assert_eq!(libc::read(fds[0], b.as_mut_ptr().cast(), 8), 8);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        let child = u64::from_ne_bytes(b);
        assert_ne!(child, 0);
        assert_ne!(child, mine, "a forked child gets a token of its own");
        assert_eq!(token(), mine, "the parent's is unchanged");
    }
}
