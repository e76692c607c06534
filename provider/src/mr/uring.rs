//! Pinning through an io_uring fixed-buffer table.
//!
//! Registering a buffer with io_uring pins its pages with the kernel's
//! `FOLL_WRITE | FOLL_LONGTERM` pin and charges them to `RLIMIT_MEMLOCK`
//! (unless the process has `CAP_IPC_LOCK`): what `ibv_reg_mr` does. Each
//! domain owns one ring (the `io-uring` crate's `IoUring`) whose buffer
//! table is registered once, sparse, and filled and emptied slot by slot
//! (`register_buffers_update`). A slot holds at most 1 GiB, so a larger
//! region takes several slots; the table records each piece (base, len,
//! slot) so `fixed` can say which slot covers a range.
//!
//! The ring is the domain's, not only the table's: a request whose
//! `buf_index` names a slot must be submitted on the ring that holds the
//! table, so the wires that send from registered memory submit on this
//! one (`ring`, under its mutex; the wire keeps its requests' state
//! itself). Lock order: the caller's own locks, then the ring's (pinning
//! takes only the ring's).
//!
//! Kernel facts relied on: the pin needs a writable mapping (read-only
//! memory fails with EFAULT; the caller pins it with mlock instead);
//! PFN-mapped and secret memory fail with EFAULT; emptying a slot drops
//! the table's pin, while a request that imported the buffer keeps its
//! own reference to the pages until it completes (its notification), so
//! an unpin with a request in flight is safe for the kernel. At fork,
//! pinned anonymous pages are copied for the child, so the parent keeps
//! the pages it pinned; a child, which shares the ring's queues, never
//! submits or reaps on them, nor changes the table (`owned_here`).

use crate::sys::LockExt;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Mutex, MutexGuard};

use io_uring::IoUring;

/// Largest buffer one slot can hold (io_buffer_validate: SZ_1G).
pub(crate) const SLOT_MAX: usize = 1 << 30;
/// Slots in a domain's table (IORING_MAX_REG_BUFFERS).
pub(crate) const TABLE_SLOTS: u32 = 1 << 14;
/// Submission entries of a domain's ring: bounds the requests its users
/// have queued at once (a full queue makes a user wait, it does not fail
/// it).
const RING_ENTRIES: u32 = 256;

/// A domain's ring and its buffer table.
pub struct UringTable {
    ring: Mutex<IoUring>,
    free: Mutex<Vec<u32>>,
    /// Pinned pieces: (base, slot) -> len (two registrations may cover
    /// the same memory, hence the slot in the key).
    pieces: Mutex<BTreeMap<(usize, u32), usize>>,
    /// The process image that created the ring (`sys::process_token`:
    /// no getpid system call on every check).
    token: u64,
}

impl std::fmt::Debug for UringTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UringTable({} slots used)", self.used())
    }
}

impl UringTable {
    /// Create a ring and register its sparse buffer table.
    pub fn new() -> io::Result<Self> {
        // (Not MADV_DONTFORK: a child that drops an inherited domain would then
        // unmap, at the queues' addresses, whatever it mapped there since. The
        // child shares the queues' pages instead and never touches them.)
        let uring = IoUring::builder().build(RING_ENTRIES)?;
        uring.submitter().register_buffers_sparse(TABLE_SLOTS)?;
        let free = (0..TABLE_SLOTS).rev().collect();
        Ok(UringTable {
            ring: Mutex::new(uring),
            free: Mutex::new(free),
            pieces: Mutex::new(BTreeMap::new()),
            token: crate::sys::process_token(),
        })
    }

    /// The ring, locked: for the domain's users that submit requests
    /// naming this table's slots (lock order: theirs, then this one).
    pub fn ring(&self) -> MutexGuard<'_, IoUring> {
        self.ring.lock_ok()
    }

    fn update(&self, slot: u32, base: usize, len: usize) -> io::Result<()> {
        let iov = libc::iovec { iov_base: base as *mut libc::c_void, iov_len: len };
        let ring = self.ring();
        // SAFETY: the slot then refers to [base, base+len), which the
        // kernel pins here (FOLL_LONGTERM) and reads through its own page
        // references, never through our mapping; a zero iovec empties it.
        unsafe { ring.submitter().register_buffers_update(slot, &[iov], None) }
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
            let mut free = self.free.lock_ok();
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
            self.pieces().insert((base, slot), len);
        }
        Ok(slots)
    }

    fn pieces(&self) -> MutexGuard<'_, BTreeMap<(usize, u32), usize>> {
        self.pieces.lock_ok()
    }

    /// Empty the slots (dropping their pins) and free them.
    pub fn unpin(&self, slots: &[u32]) {
        // (Forget the pieces first: no request starts from a slot emptied.)
        self.pieces().retain(|&(_, s), _| !slots.contains(&s));
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
        self.free.lock_ok().extend_from_slice(slots);
    }

    /// The slot whose pinned piece covers [addr, addr+len) wholly, if one
    /// does. (Pieces are at most `SLOT_MAX`, so only those starting within
    /// that distance below `addr` can; the nearest few are looked at.)
    pub fn fixed(&self, addr: usize, len: usize) -> Option<u16> {
        let end = addr.checked_add(len)?;
        let pieces = self.pieces();
        pieces
            .range(..=(addr, u32::MAX))
            .rev()
            .take(8)
            .take_while(|(&(base, _), _)| addr - base < SLOT_MAX)
            .find(|(&(base, _), &l)| base + l >= end)
            .and_then(|(&(_, slot), _)| u16::try_from(slot).ok())
    }

    /// Whether this process created the ring (false in a forked child,
    /// which inherits the fd and must not change the parent's table).
    pub fn owned_here(&self) -> bool {
        crate::sys::process_token() == self.token
    }

    /// Slots in use.
    pub fn used(&self) -> u32 {
        TABLE_SLOTS - self.free.lock_ok().len() as u32
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
pub(crate) mod tests {
    use super::*;

    /// VmPin is process-wide: tests that read it must not overlap.
    pub(crate) static SERIAL: Mutex<()> = Mutex::new(());

    /// A fresh private anonymous read-write mapping (the caller unmaps it).
    pub(crate) fn anon(len: usize) -> usize {
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
        let _g = SERIAL.lock_ok();
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
    fn fixed_names_the_slot_whose_piece_covers_a_range_wholly() {
        let _g = SERIAL.lock_ok();
        let t = UringTable::new().unwrap();
        let len = 16 * 4096;
        let a = anon(len);
        let b = anon(len);
        let sa = t.pin(&[(a, len)]).unwrap();
        let sb = t.pin(&[(b + 4096, 4096)]).unwrap();
        assert_eq!(t.fixed(a, len), Some(sa[0] as u16), "the whole piece");
        assert_eq!(t.fixed(a + 100, 5000), Some(sa[0] as u16), "inside it");
        assert_eq!(t.fixed(a + len - 10, 11), None, "crossing the piece's end");
        assert_eq!(t.fixed(a - 1, 2), None, "starting before it");
        assert_eq!(t.fixed(b + 4096, 4096), Some(sb[0] as u16));
        assert_eq!(t.fixed(b, 4097), None, "memory not pinned, then pinned");
        // The same memory in two registrations: either slot covers it.
        let sa2 = t.pin(&[(a, 4096)]).unwrap();
        let got = t.fixed(a, 4096).unwrap() as u32;
        assert!(got == sa[0] || got == sa2[0]);
        assert_eq!(t.fixed(a, 8192), Some(sa[0] as u16), "only the larger piece covers two pages");
        t.unpin(&sa);
        assert_eq!(t.fixed(a, 8192), None, "removed at unpin");
        assert_eq!(t.fixed(a, 4096), Some(sa2[0] as u16), "the other registration's piece stays");
        t.unpin(&sa2);
        t.unpin(&sb);
        assert_eq!(t.fixed(b + 4096, 1), None);
        // SAFETY: mappings created above.
        unsafe {
            libc::munmap(a as *mut _, len);
            libc::munmap(b as *mut _, len);
        }
    }

    #[test]
    fn read_only_and_unmapped_memory_fail_with_efault_and_leave_nothing() {
        let _g = SERIAL.lock_ok();
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
    #[test]
    fn a_forked_child_does_not_own_the_ring() {
        let t = UringTable::new().unwrap();
        assert!(t.owned_here(), "the process that created it");
        // SAFETY: the child only asks `owned_here` (no lock: the fork token
        // is set already) and leaves with _exit, its answer the status.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: leaves the child without running destructors.
            unsafe { libc::_exit(if t.owned_here() { 1 } else { 0 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child saw the ring as its own");
        assert!(t.owned_here(), "still the parent's");
    }
}
