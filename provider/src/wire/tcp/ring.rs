//! Zero-copy sends on the domain's io_uring, and the domain's TCP send
//! counters.
//!
//! A SEND_ZC's `buf_index` names a slot of the *submitting* ring's
//! fixed-buffer table, and the domain's registrations sit in the table of
//! its pinner's ring (`mr::uring::UringTable`), so the TCP wire submits on
//! that ring: one per domain, every endpoint of the domain submitting and
//! reaping on it. `TcpRing` is the wire's side of it: the table it reads
//! (`fixed`: which slot covers a frame part) and the sends in flight.
//! Each send is a `Flight` the ring's map owns (by user_data) until its
//! last completion, so a link closed with a send in flight leaves nothing
//! dangling; whoever reaps dispatches every completion to its flight.
//! Lock order: a link's own mutex, then the flights', then the table's
//! ring (reaping never takes a link's; pinning takes only the ring's).
//! A forked child, which shares the ring's queues, never submits or reaps
//! on them (`owned_here`).

use crate::sys::LockExt;
use std::collections::HashMap;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use io_uring::{cqueue, opcode, types, IoUring, Probe};

use crate::mr::uring::UringTable;

/// IORING_SEND_ZC_REPORT_USAGE (zc_flags): the notification says whether
/// the kernel copied after all.
pub(crate) const SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// IORING_NOTIF_USAGE_ZC_COPIED, in a notification's res.
pub(crate) const NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

/// A domain's TCP send counters (reported by the extension's
/// `oxmr_mr_stats`).
#[derive(Debug, Default)]
pub struct TcpStats {
    /// SEND_ZC completions that sent their whole part.
    pub zc_sends: AtomicU64,
    /// The bytes those sent.
    pub zc_bytes: AtomicU64,
    /// Frames that had no zero-copy part (every byte written with writev).
    pub copied_frames: AtomicU64,
    /// Bytes the socket took from write/writev: whole copied frames, and
    /// the length prefixes and headers of zero-copy ones.
    pub copied_bytes: AtomicU64,
}

/// One SEND_ZC in flight: its first completion (the bytes sent, or an
/// errno) and, later, its notification (the kernel is done with the
/// pages). Shared by the link that submitted it and the ring's map.
#[derive(Debug, Default)]
pub struct Flight {
    /// 0 in flight, 1 completed (`res` holds the result).
    state: AtomicU8,
    res: AtomicI32,
    /// The notification arrived, and whether it said the kernel copied.
    notified: AtomicBool,
    copied: AtomicBool,
}

impl Flight {
    /// The first completion's result (bytes sent, or -errno), once in.
    pub fn result(&self) -> Option<i32> {
        (self.state.load(Ordering::Acquire) == 1).then(|| self.res.load(Ordering::Relaxed))
    }

    /// The notification's report: None until it arrived, then whether the
    /// kernel copied the bytes instead of sending the pages.
    pub fn notified_copied(&self) -> Option<bool> {
        self.notified.load(Ordering::Acquire).then(|| self.copied.load(Ordering::Relaxed))
    }
}

/// The sends in flight on the ring.
struct Flights {
    /// Flights by user_data, until their last completion.
    map: HashMap<u64, Arc<Flight>>,
    next: u64,
}

/// Counts of the ring's SEND_ZC notifications.
#[derive(Debug, Default)]
pub struct ZcNotes {
    /// Notifications that arrived.
    pub notified: AtomicU64,
    /// Of those, the ones that reported the kernel copied
    /// (IORING_NOTIF_USAGE_ZC_COPIED): loopback always does.
    pub copied: AtomicU64,
}

/// The TCP wire's use of a domain's ring: SEND_ZC from the slots of its
/// table.
pub struct TcpRing {
    table: Arc<UringTable>,
    flights: Mutex<Flights>,
    /// Whether the kernel has IORING_OP_SEND_ZC (io_uring's probe).
    send_zc: bool,
    pub notes: ZcNotes,
}

impl std::fmt::Debug for TcpRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TcpRing({:?}, send_zc {})", self.table, self.send_zc)
    }
}

impl TcpRing {
    /// Send on `table`'s ring (asking the kernel whether it has SEND_ZC).
    pub fn new(table: Arc<UringTable>) -> TcpRing {
        let mut probe = Probe::new();
        let send_zc =
            table.ring().submitter().register_probe(&mut probe).is_ok() && probe.is_supported(opcode::SendZc::CODE);
        TcpRing {
            table,
            flights: Mutex::new(Flights { map: HashMap::new(), next: 1 }),
            send_zc,
            notes: ZcNotes::default(),
        }
    }

    /// The table (and ring) it sends from.
    pub fn table(&self) -> &Arc<UringTable> {
        &self.table
    }

    fn flights(&self) -> MutexGuard<'_, Flights> {
        self.flights.lock_ok()
    }

    /// The slot whose pinned piece covers [addr, addr+len) wholly, if one
    /// does (`UringTable::fixed`).
    pub fn fixed(&self, addr: usize, len: usize) -> Option<u16> {
        self.table.fixed(addr, len)
    }

    /// Whether this process created the ring (false in a forked child,
    /// which must neither submit nor reap on the parent's queues).
    pub fn owned_here(&self) -> bool {
        self.table.owned_here()
    }

    /// Whether this ring can send zero-copy (the kernel has SEND_ZC, and
    /// this is the process that created it).
    pub fn sends_zc(&self) -> bool {
        self.send_zc && self.owned_here()
    }

    /// Submit `IORING_OP_SEND_ZC` of [addr, addr+len) from `slot` on the
    /// socket `fd`, with MSG_WAITALL (the kernel retries a short send, so
    /// the stream stays whole or the send fails). `Ok(None)`: the
    /// submission queue is full, try again after a reap.
    ///
    /// # Safety
    ///
    /// `fixed(addr, len) == Some(slot)` held when the caller decided on
    /// it, and `fd` is a socket the caller keeps open until this call
    /// returns (the request then holds its own reference to the file).
    pub unsafe fn send_zc(&self, fd: RawFd, addr: usize, len: u32, slot: u16) -> io::Result<Option<Arc<Flight>>> {
        // (A forked child shares the parent's queues: it must not push.)
        if !self.owned_here() {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        let mut flights = self.flights();
        let mut ring = self.table.ring();
        let id = flights.next;
        flights.next += 1;
        let sqe = opcode::SendZc::new(types::Fd(fd), addr as *const u8, len)
            .buf_index(Some(slot))
            .flags(libc::MSG_WAITALL)
            .zc_flags(SEND_ZC_REPORT_USAGE)
            .build()
            .user_data(id);
        // SAFETY: the kernel reads [addr, addr+len) through the pages the
        // fixed buffer `slot` pinned (it checks the range lies in the
        // slot's, else the send fails with EFAULT), never through our
        // mapping, so nothing of ours is touched whatever happens to the
        // mapping meanwhile; the fd is open now (caller's promise).
        if unsafe { ring.submission().push(&sqe) }.is_err() {
            return Ok(None);
        }
        let flight = Arc::new(Flight::default());
        flights.map.insert(id, flight.clone());
        if let Err(e) = ring.submit() {
            // (EBUSY/EAGAIN: the entry stays queued and goes with the
            // next submit; anything else, the ring is broken.)
            if !matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EAGAIN) | Some(libc::EINTR)) {
                flights.map.remove(&id);
                return Err(e);
            }
        }
        Self::drain(&mut ring, &mut flights, &self.notes);
        Ok(Some(flight))
    }

    /// Take every completion the ring has and hand each to its flight
    /// (any endpoint's progress may reap: the flights say whose it was).
    pub fn reap(&self) {
        if !self.owned_here() {
            return;
        }
        let mut flights = self.flights();
        let mut ring = self.table.ring();
        // (Pushes what a busy submit left queued, and flushes completions
        // the kernel kept aside while the queue was full; an error here
        // leaves both for the next reap.)
        let _ = ring.submit();
        Self::drain(&mut ring, &mut flights, &self.notes);
    }

    /// Take the completions already in the ring (no system call: what
    /// `reap` does short of submitting).
    pub fn collect(&self) {
        if self.owned_here() {
            let mut flights = self.flights();
            Self::drain(&mut self.table.ring(), &mut flights, &self.notes);
        }
    }

    fn drain(uring: &mut IoUring, flights: &mut Flights, notes: &ZcNotes) {
        let flights = &mut flights.map;
        for cqe in uring.completion() {
            let id = cqe.user_data();
            let flags = cqe.flags();
            let Some(f) = flights.get(&id) else { continue };
            if cqueue::notif(flags) {
                let copied = cqe.result() as u32 & NOTIF_USAGE_ZC_COPIED != 0;
                f.copied.store(copied, Ordering::Relaxed);
                f.notified.store(true, Ordering::Release);
                notes.notified.fetch_add(1, Ordering::Relaxed);
                notes.copied.fetch_add(copied as u64, Ordering::Relaxed);
                flights.remove(&id);
                continue;
            }
            f.res.store(cqe.result(), Ordering::Relaxed);
            f.state.store(1, Ordering::Release);
            // (No IORING_CQE_F_MORE: no notification follows.)
            if !cqueue::more(flags) {
                flights.remove(&id);
            }
        }
    }

    /// Flights whose last completion has not been reaped.
    pub fn in_flight(&self) -> usize {
        self.flights().map.len()
    }
}

/// What a domain's endpoints share of the wires: the TCP wire's ring for
/// SEND_ZC (None: plain sockets) and its send counters. Made with the
/// domain, handed to each engine.
#[derive(Debug, Default)]
pub struct DomainWires {
    /// The ring the domain's TCP links send registered memory on with
    /// SEND_ZC: the pinner's, whose table holds the registrations a
    /// SEND_ZC names by slot (None: plain sockets; see `new`).
    pub tcp_ring: Option<Arc<TcpRing>>,
    /// The TCP links' send counters.
    pub tcp_stats: Arc<TcpStats>,
}

impl DomainWires {
    /// The wires of a domain whose registrations are `mr`'s.
    /// `tcp_io_uring` (FI_OXMR_TCP_IO_URING): TCP links send registered
    /// memory with SEND_ZC on the pinner's ring, where there is a ring
    /// that can (one log line says why not otherwise); plain sockets when
    /// not.
    pub fn new(mr: &crate::mr::MrDomain, tcp_io_uring: bool) -> Self {
        let on = tcp_io_uring;
        let ring = mr.pinner.uring().filter(|_| on).map(|t| TcpRing::new(t.clone()));
        let tcp_ring = match ring {
            Some(r) if r.sends_zc() => Some(Arc::new(r)),
            Some(_) => {
                tracing::info!(
                    "this kernel has no io_uring SEND_ZC; TCP sends use plain sockets (FI_OXMR_TCP_IO_URING)"
                );
                None
            }
            None if on => {
                let why = match mr.pinner.mode() {
                    crate::mr::pin::PinMode::Uring => "io_uring is unavailable",
                    crate::mr::pin::PinMode::Mlock => "registrations pin with mlock",
                    crate::mr::pin::PinMode::None => "FI_OXMR_MR_PIN=none",
                };
                tracing::info!("the domain has no io_uring ring ({why}); TCP sends use plain sockets");
                None
            }
            None => None,
        };
        DomainWires { tcp_ring, tcp_stats: Default::default() }
    }
}
