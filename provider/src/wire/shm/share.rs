//! Shared copies as the shm wire offers them to the protocol engine: the
//! job slots an endpoint owns ([`Copies`]), one copy in progress
//! ([`SharedCopy`]) and the work on it (claiming, copying and settling
//! chunks, and telling when it is over, its copier's death included).
//!
//! The engine decides *what* to share (which receive, RMA or run of
//! writes, and when) and completes the operations once a copy is over;
//! everything about slots, generations, claim words and the other
//! process's liveness stays here (`jobs` has the slot layout).

use std::cell::Cell;

use super::jobs::{self, JobTable};
use super::region::pid_alive;

/// `SharedCopy::slot` of a copy that has none.
const NO_SLOT: u32 = u32::MAX;

/// The job slots of an endpoint's own queue file: the table, the slots
/// free now and the next generation.
pub struct Copies {
    table: JobTable,
    free: Vec<u32>,
    next_gen: u32,
}

/// One shared copy of `total` bytes between our `local` buffers and the
/// `remote` ones of process `pid`, cut in `chunk`s: a job of ours (its
/// slot in our table) or a sender's job we accepted (its slot in the
/// sender's table).
pub struct SharedCopy {
    pub slot: u32,
    pub gen: u32,
    pub chunk: usize,
    pub total: usize,
    /// Our side of a chunk: process_vm_readv from the peer (send, RMA
    /// write) or process_vm_writev into it (RMA read).
    pub we_read: bool,
    pub pid: u32,
    pub local: Vec<(usize, usize)>,
    pub remote: Vec<(usize, usize)>,
    /// We settled its last chunk, every chunk copied. Otherwise, with
    /// every chunk copied, the helper settled the last one and (for a
    /// send) completed the send itself: a receive's ACK is only ours to
    /// send when this is set (docs/wire-shm.md, "Shared copies").
    settled_last: Cell<bool>,
    /// A chunk we hold already (a sender job's chunk 0), copied first.
    held: Cell<Option<u32>>,
    /// A sender job (docs/wire-shm.md): the slot is in the sender's table.
    foreign: Option<JobTable>,
}

/// What a copy moves: `total` bytes between our `local` buffers and the
/// `remote` ones of process `pid`.
pub struct Span {
    pub total: usize,
    pub pid: u32,
    pub local: Vec<(usize, usize)>,
    pub remote: Vec<(usize, usize)>,
}

impl SharedCopy {
    /// Accept the job `gen` a sender offered in slot `slot` of its table
    /// `t`, for its send of `span` into our buffers, cut in `chunk`s; chunk
    /// 0 is ours at once. None when the slot no longer offers that job or
    /// cannot describe our buffers.
    pub fn accept(t: JobTable, slot: u32, gen: u32, chunk: usize, span: Span) -> Option<SharedCopy> {
        let Span { total, pid, local, remote } = span;
        if !t.accept(slot, gen, total, chunk, &local) {
            return None;
        }
        Some(SharedCopy {
            slot,
            gen,
            chunk,
            total,
            we_read: true,
            pid,
            local,
            remote,
            settled_last: Cell::new(false),
            held: Cell::new(Some(0)),
            foreign: Some(t),
        })
    }

    /// A copy that has no slot (none was free, or the wire offers none):
    /// `finish` frees nothing, and `state` says it failed, so that its
    /// owner copies it alone.
    pub fn alone(span: Span, we_read: bool) -> SharedCopy {
        let Span { total, pid, local, remote } = span;
        SharedCopy {
            slot: NO_SLOT,
            gen: 0,
            chunk: total.max(1),
            total,
            we_read,
            pid,
            local,
            remote,
            settled_last: Cell::new(false),
            held: Cell::new(None),
            foreign: None,
        }
    }

    /// Whether our settle was the last, every chunk copied (see the field).
    pub fn settled_last(&self) -> bool {
        self.settled_last.get()
    }

    /// Whether the job is a sender's (its slot in the sender's table).
    pub fn foreign(&self) -> bool {
        self.foreign.is_some()
    }
}

impl Copies {
    /// Job slots in a table.
    pub(crate) const SLOTS: usize = jobs::JOBS;
    /// The most of our iovs a job describes.
    pub(crate) const MAX_IOVS: usize = jobs::JOB_IOVS;
    /// The most chunks a job has.
    pub(crate) const MAX_CHUNKS: usize = jobs::MAX_CHUNKS;

    pub fn new(table: JobTable) -> Copies {
        Copies { table, free: (0..jobs::JOBS as u32).rev().collect(), next_gen: 1 }
    }

    /// Our own table (the sender's side of offers reads it).
    pub fn table(&self) -> &JobTable {
        &self.table
    }

    /// Whether a slot is free.
    pub fn has_free(&self) -> bool {
        !self.free.is_empty()
    }

    fn take_slot(&mut self) -> Option<(u32, u32)> {
        let slot = self.free.pop()?;
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        Some((slot, gen))
    }

    /// Offer a slot for one of our rendezvous sends of `len` bytes (a
    /// sender job): its slot and generation, None when no slot is free.
    pub fn offer(&mut self, len: usize) -> Option<(u32, u32)> {
        let (slot, gen) = self.take_slot()?;
        self.table.offer(slot, gen, len);
        Some((slot, gen))
    }

    /// An offer's slot is ours again (its send completed or failed).
    pub fn give_back(&mut self, slot: u32) {
        self.free.push(slot);
    }

    /// Publish a job of `span` in `chunk`s in a free slot, `we_read` saying
    /// which way our side copies. The bool is false when no slot was free
    /// or the slot could not take the job: then copy alone, and `finish`
    /// it all the same.
    pub fn open(&mut self, span: Span, chunk: usize, we_read: bool) -> (SharedCopy, bool) {
        let mut c = SharedCopy::alone(span, we_read);
        let Some((slot, gen)) = self.take_slot() else { return (c, false) };
        (c.slot, c.gen, c.chunk) = (slot, gen, chunk);
        // We read from the peer exactly when the peer writes into us.
        let opened = self.table.open(slot, gen, c.total, chunk, we_read, &c.local);
        (c, opened)
    }

    /// A copy is over (no chunk in flight any more, or its copier dead):
    /// its slot, when ours, is free again.
    pub fn finish(&mut self, c: &SharedCopy) {
        if c.foreign.is_none() && c.slot != NO_SLOT {
            self.free.push(c.slot);
        }
    }

    fn table_of<'a>(&'a self, c: &'a SharedCopy) -> &'a JobTable {
        c.foreign.as_ref().unwrap_or(&self.table)
    }

    /// Copy every chunk of `c` nobody has claimed yet (`max`: at most that
    /// many).
    pub fn work(&self, c: &SharedCopy, max: usize) {
        if c.slot == NO_SLOT {
            return;
        }
        let t = self.table_of(c);
        // (Never more than the job has: the claim word is shared memory,
        // and a peer that kept rewriting it must not keep us here.)
        let nchunks = c.total.div_ceil(c.chunk.max(1));
        let max = max.min(nchunks);
        let mut n = 0;
        while n < max {
            let Some(k) = c.held.take().or_else(|| t.claim(c.slot, c.gen, false)) else { break };
            n += 1;
            let ok = jobs::copy_chunk(c.pid, c.we_read, &c.local, &c.remote, c.total, c.chunk, k);
            if t.settle(c.slot, ok) {
                c.settled_last.set(true);
            }
            if !ok {
                // Settle the rest unclaimed: the whole job is redone alone.
                for _ in 0..t.close(c.slot, c.gen, nchunks) {
                    t.settle(c.slot, false);
                }
            }
        }
    }

    /// Whether a copy is over: Some(true) all chunks copied, Some(false)
    /// some chunk failed or (`alive_check`, which reads /proc) its copier
    /// is gone, None still copying.
    pub fn state(&self, c: &SharedCopy, alive_check: bool) -> Option<bool> {
        if c.slot == NO_SLOT {
            return Some(false);
        }
        let t = self.table_of(c);
        let (settled, failed) = t.progress(c.slot);
        // A sender job's slot is the sender's, reused only once the job is
        // over, every chunk copied (a failed one waits for our ACK). Read
        // after the counts: counts from a later job in the slot come after
        // its generation, so with the generation still ours they are ours.
        if c.foreign.is_some() && t.generation(c.slot) != c.gen {
            return Some(true);
        }
        if settled as usize >= c.total.div_ceil(c.chunk) {
            return Some(!failed);
        }
        // A helper killed mid-chunk never settles it. (One that settled
        // the last chunk, completed its send and exited since the load
        // above is not such a helper: look again once it is gone.)
        if alive_check && !pid_alive(c.pid) {
            let (settled, failed) = t.progress(c.slot);
            return Some(settled as usize >= c.total.div_ceil(c.chunk) && !failed);
        }
        None
    }
}
