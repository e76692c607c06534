//! Pinning through an io_uring fixed-buffer table.
//!
//! Registering a buffer with io_uring pins its pages with the kernel's
//! `FOLL_WRITE | FOLL_LONGTERM` pin and charges them to `RLIMIT_MEMLOCK`
//! (unless the process has `CAP_IPC_LOCK`): what `ibv_reg_mr` does. Each
//! domain owns one ring whose buffer table is registered once, sparse
//! (`IORING_REGISTER_BUFFERS2` + `IORING_RSRC_REGISTER_SPARSE`), and filled
//! and emptied slot by slot with `IORING_REGISTER_BUFFERS_UPDATE`. A slot
//! holds at most 1 GiB, so a larger region takes several slots.
//!
//! Kernel facts relied on: the pin needs a writable mapping (read-only
//! memory fails with EFAULT; the caller pins it with mlock instead);
//! PFN-mapped and secret memory fail with EFAULT; emptying a slot drops the
//! pin once no request uses it (oxmr never submits I/O on this ring before
//! the TCP wire exists). At fork, pinned anonymous pages are copied for the
//! child, so the parent keeps the pages it pinned.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

/// Largest buffer one slot can hold (io_buffer_validate: SZ_1G).
pub(crate) const SLOT_MAX: usize = 1 << 30;
/// Slots in a domain's table (IORING_MAX_REG_BUFFERS).
pub(crate) const TABLE_SLOTS: u32 = 1 << 14;

const IORING_REGISTER_BUFFERS2: u32 = 15;
const IORING_REGISTER_BUFFERS_UPDATE: u32 = 16;
const IORING_RSRC_REGISTER_SPARSE: u32 = 1;

#[repr(C)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    offsets: [u8; 80],
}
const _: () = assert!(size_of::<Params>() == 120);

#[repr(C)]
struct RsrcRegister {
    nr: u32,
    flags: u32,
    resv2: u64,
    data: u64,
    tags: u64,
}

#[repr(C)]
struct RsrcUpdate2 {
    offset: u32,
    resv: u32,
    data: u64,
    tags: u64,
    nr: u32,
    resv2: u32,
}

/// A domain's ring and its buffer table.
pub struct UringTable {
    ring: OwnedFd,
    free: Mutex<Vec<u32>>,
    /// The process that created the ring.
    pid: u32,
}

fn register(fd: i32, op: u32, arg: *const libc::c_void, nr: u32) -> io::Result<i32> {
    // SAFETY: io_uring_register reads `arg` (a live struct of the size the
    // op expects, or an array of `nr`) and touches nothing else of ours.
    let r = unsafe { libc::syscall(libc::SYS_io_uring_register, fd, op, arg, nr) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as i32)
    }
}

impl UringTable {
    /// Create a ring and register its sparse buffer table.
    pub fn new() -> io::Result<Self> {
        // SAFETY: a zeroed Params is the documented "no options" input.
        let mut p: Params = unsafe { std::mem::zeroed() };
        // SAFETY: io_uring_setup writes into `p` and returns a new fd.
        let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4u32, &mut p as *mut Params) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new fd owned by nobody else.
        let ring = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let reg = RsrcRegister { nr: TABLE_SLOTS, flags: IORING_RSRC_REGISTER_SPARSE, resv2: 0, data: 0, tags: 0 };
        register(
            ring.as_raw_fd(),
            IORING_REGISTER_BUFFERS2,
            (&reg as *const RsrcRegister).cast(),
            size_of::<RsrcRegister>() as u32,
        )?;
        let free = (0..TABLE_SLOTS).rev().collect();
        Ok(UringTable { ring, free: Mutex::new(free), pid: std::process::id() })
    }

    fn update(&self, slot: u32, base: usize, len: usize) -> io::Result<()> {
        let iov = libc::iovec { iov_base: base as *mut libc::c_void, iov_len: len };
        let up =
            RsrcUpdate2 { offset: slot, resv: 0, data: &iov as *const libc::iovec as u64, tags: 0, nr: 1, resv2: 0 };
        register(
            self.ring.as_raw_fd(),
            IORING_REGISTER_BUFFERS_UPDATE,
            (&up as *const RsrcUpdate2).cast(),
            size_of::<RsrcUpdate2>() as u32,
        )?;
        Ok(())
    }

    /// Pin every byte of `iovs`; all-or-nothing. Returns the slots used.
    pub fn pin(&self, iovs: &[(usize, usize)]) -> io::Result<Vec<u32>> {
        let pieces: Vec<(usize, usize)> = iovs
            .iter()
            .filter(|(_, len)| *len > 0)
            .flat_map(|&(base, len)| {
                (0..len.div_ceil(SLOT_MAX)).map(move |i| (base + i * SLOT_MAX, (len - i * SLOT_MAX).min(SLOT_MAX)))
            })
            .collect();
        let slots = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            if free.len() < pieces.len() {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let at = free.len() - pieces.len();
            free.split_off(at)
        };
        for (i, (&slot, &(base, len))) in slots.iter().zip(&pieces).enumerate() {
            if let Err(e) = self.update(slot, base, len) {
                self.unpin(&slots[..i]);
                self.release(&slots[i..]);
                return Err(e);
            }
        }
        Ok(slots)
    }

    /// Empty the slots (dropping their pins) and free them.
    pub fn unpin(&self, slots: &[u32]) {
        for &s in slots {
            if let Err(e) = self.update(s, 0, 0) {
                tracing::warn!(
                    "emptying io_uring buffer slot {s} failed: {e}; its pages stay pinned until the domain closes"
                );
            }
        }
        self.release(slots);
    }

    fn release(&self, slots: &[u32]) {
        self.free.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(slots);
    }

    /// Whether this process created the ring (false in a forked child,
    /// which inherits the fd and must not change the parent's table).
    pub fn owned_here(&self) -> bool {
        std::process::id() == self.pid
    }

    /// Slots in use.
    pub fn used(&self) -> u32 {
        TABLE_SLOTS - self.free.lock().unwrap_or_else(|p| p.into_inner()).len() as u32
    }
}

/// `VmPin` of this process (pages pinned with FOLL_PIN|FOLL_LONGTERM), bytes.
pub fn vm_pinned_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmPin:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// VmPin is process-wide: tests that read it must not overlap.
    pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

    fn anon(len: usize) -> usize {
        // SAFETY: anonymous private mapping; unmapped by the caller.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as usize
    }

    #[test]
    fn pins_for_real_and_unpins() {
        let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let t = UringTable::new().expect("io_uring");
        let len = 8 << 20;
        let a = anon(len);
        let before = vm_pinned_bytes();
        let slots = t.pin(&[(a, len)]).unwrap();
        assert_eq!(slots.len(), 1);
        assert_eq!(vm_pinned_bytes() - before, len as u64, "the kernel counts the pin (VmPin)");
        assert_eq!(t.used(), 1);
        t.unpin(&slots);
        assert_eq!(vm_pinned_bytes(), before);
        assert_eq!(t.used(), 0);
        // SAFETY: mapping created above.
        unsafe { libc::munmap(a as *mut _, len) };
    }

    #[test]
    fn read_only_and_unmapped_memory_fail_with_efault_and_leave_nothing() {
        let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let t = UringTable::new().unwrap();
        let a = anon(3 * 4096);
        // SAFETY: our mapping: make the middle page read-only, then unmap the last.
        unsafe {
            libc::mprotect((a + 4096) as *mut _, 4096, libc::PROT_READ);
            libc::munmap((a + 8192) as *mut _, 4096);
        }
        let before = vm_pinned_bytes();
        let e = t.pin(&[(a, 4096), (a + 4096, 4096)]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
        assert_eq!(t.pin(&[(a + 8192, 4096)]).unwrap_err().raw_os_error(), Some(libc::EFAULT));
        assert_eq!(t.used(), 0, "no slot left behind");
        assert_eq!(vm_pinned_bytes(), before, "no page left pinned");
        // SAFETY: our mapping.
        unsafe { libc::munmap(a as *mut _, 8192) };
    }
}
