//! Landing zones: where the payload of a TCP frame goes straight from the
//! socket into the buffer it is for.
//!
//! The engine knows, for each transfer it pulls (a rendezvous receive, an
//! RMA write at its target), the buffer the data goes to; the TCP inbox
//! knows the bytes. The engine registers the destination as a zone, keyed
//! by (peer, transfer id), and gives the table a classifier that reads a
//! frame's protocol header (the wire cannot: the header is the engine's).
//! A frame of at least `LAND_MIN` bytes whose header names a zone, with a
//! payload that lies wholly inside it, is read with readv straight into the
//! zone; the inbox then hands up the header alone, saying how many bytes
//! landed. Everything else (small frames, a zone that is gone, a payload
//! that would cross a zone's end) arrives as a whole frame, as before.
//!
//! Invariant: the wire writes into a zone only while it is in the table.
//! The engine forgets a zone the moment its transfer ends (done, failed,
//! the peer gone), and the inbox checks the zone (and its generation, so a
//! new zone under the same key is not written with an old one's pointers)
//! before every read into it. Zones hold host memory only (device memory
//! needs the MMIO-safe copies of `mr::local`, and keeps its frames).

use crate::sys::LockExt;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Frames shorter than this keep their payload (a copy of a few KiB costs
/// less than a table look-up and a read of its own).
pub(crate) const LAND_MIN: usize = 8 << 10;

/// What the classifier reads from a frame's first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The transfer the payload belongs to (with the connection's sender).
    pub key: u64,
    /// Where in the transfer the payload starts.
    pub off: usize,
    /// The header's length: the payload follows it.
    pub len: usize,
}

/// Reads a frame's first bytes (at most the `head_max` given with it, or
/// the whole frame if shorter): Some for a frame whose payload may land.
pub type Classify = fn(&[u8]) -> Option<Head>;

struct Zone {
    dest: Vec<(usize, usize)>,
    total: usize,
    gen: u64,
}

#[derive(Default)]
struct Table {
    zones: HashMap<(SocketAddr, u64), Zone>,
    classify: Option<(Classify, usize)>,
    next_gen: u64,
}

/// Whether a frame is a barrier: the inbox cuts nothing after it from its
/// connection until the engine has taken it (a request whose handling
/// opens the zone that the frames behind it land in).
pub type Barrier = fn(&[u8]) -> bool;

/// An endpoint's landing zones, shared by its engine (which adds and
/// forgets them) and its TCP inbox (which fills them).
#[derive(Clone, Default)]
pub struct Landings {
    /// (Set once, read for every frame cut: no lock.)
    barrier: Arc<std::sync::OnceLock<Barrier>>,
    table: Arc<Mutex<Table>>,
    /// Zones in the table (read without the lock: an endpoint with none,
    /// the usual case for small messages, pays one load per frame).
    count: Arc<AtomicUsize>,
}

impl Landings {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock_ok()
    }

    /// How frame headers are read (set once by the engine), and how many
    /// bytes of a frame the classifier needs at most.
    pub fn set_classifier(&self, f: Classify, head_max: usize) {
        self.table().classify = Some((f, head_max));
    }

    /// Which frames are barriers (set once by the engine).
    pub fn set_barrier(&self, f: Barrier) {
        let _ = self.barrier.set(f);
    }

    /// Whether `frame` is a barrier (see `Barrier`).
    pub(crate) fn barrier(&self, frame: &[u8]) -> bool {
        self.barrier.get().is_some_and(|f| f(frame))
    }

    /// Payload of transfer `key` from `from` may land in `dest`.
    ///
    /// # Safety
    /// `dest` is writable host memory of this process that stays valid,
    /// and may be written by the wire at any time, until `forget(from,
    /// key)`.
    pub unsafe fn expect(&self, from: SocketAddr, key: u64, dest: Vec<(usize, usize)>) {
        let total = dest.iter().map(|d| d.1).sum();
        let mut t = self.table();
        t.next_gen += 1;
        let gen = t.next_gen;
        if t.zones.insert((from, key), Zone { dest, total, gen }).is_none() {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Nothing lands for transfer `key` from `from` any more.
    pub fn forget(&self, from: SocketAddr, key: u64) {
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        if self.table().zones.remove(&(from, key)).is_some() {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether any zone is open (one load).
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// The classifier's verdict on a frame's first bytes, and how many it
    /// needs (None: no classifier).
    pub(crate) fn head_max(&self) -> Option<usize> {
        self.table().classify.map(|c| c.1)
    }

    pub(crate) fn classify(&self, head: &[u8]) -> Option<Head> {
        let c = self.table().classify?;
        (c.0)(head)
    }

    /// Where `n` payload bytes at `off` of transfer `key` from `from` go:
    /// the zone's pieces for them and its generation, if the zone is there
    /// and holds them wholly.
    pub(crate) fn place(&self, from: SocketAddr, key: u64, off: usize, n: usize) -> Option<(Vec<(usize, usize)>, u64)> {
        let t = self.table();
        let z = t.zones.get(&(from, key))?;
        (off.checked_add(n)? <= z.total).then(|| (crate::mr::local::slice(&z.dest, off, n), z.gen))
    }

    /// Whether zone `key` from `from` of generation `gen` is still there.
    pub(crate) fn live(&self, from: SocketAddr, key: u64, gen: u64) -> bool {
        self.table().zones.get(&(from, key)).is_some_and(|z| z.gen == gen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_lands_only_wholly_inside_a_live_zone() {
        let l = Landings::default();
        let from: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut a = vec![0u8; 100];
        let mut b = vec![0u8; 50];
        let (pa, pb) = (a.as_mut_ptr() as usize, b.as_mut_ptr() as usize);
        // SAFETY: both buffers outlive the zone (forgotten below).
        unsafe { l.expect(from, 7, vec![(pa, 100), (pb, 50)]) };
        assert!(l.any());
        let (pieces, gen) = l.place(from, 7, 90, 20).expect("inside");
        assert_eq!(pieces, vec![(pa + 90, 10), (pb, 10)]);
        assert!(l.place(from, 7, 140, 11).is_none(), "past the end");
        assert!(l.place(from, 7, usize::MAX, 2).is_none(), "an offset that overflows");
        assert!(l.place(from, 8, 0, 1).is_none(), "another transfer");
        assert!(l.place("127.0.0.1:10".parse().unwrap(), 7, 0, 1).is_none(), "another sender");
        assert!(l.live(from, 7, gen));
        // SAFETY: `a` (100 bytes) outlives the zone (forgotten below).
        unsafe { l.expect(from, 7, vec![(pa, 100)]) };
        assert!(!l.live(from, 7, gen), "a new zone under the same key is another generation");
        l.forget(from, 7);
        assert!(!l.any());
        assert!(l.place(from, 7, 0, 1).is_none());
    }
}
