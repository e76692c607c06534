//! Manual progress: the endpoint engines a CQ, counter or domain read must
//! drive.
//!
//! A list holds each engine's cell (not the endpoint), so a poll reaches
//! the engine with one lock and no reference counting; an endpoint empties
//! its cell when it is dropped.
//!
//! Every CQ read polls this list, so its common shape costs no lock: the
//! first `FIXED` cells attached sit in write-once slots that a poll reads
//! with plain loads (their count is published with Release). Cells past
//! those go to a locked overflow list, which a poll locks only when it is
//! not empty and which drops emptied cells at the next attach. A fixed
//! slot keeps its cell for the list's life: once its endpoint is closed,
//! a poll finds it empty (one uncontended lock) and moves on.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::protocol::engine::Engine;
use crate::sys::LockExt;
use crate::sys::SpinLock;

/// An endpoint's engine: `None` before fi_enable and after close.
pub type EngineCell = Arc<SpinLock<Option<Engine>>>;

/// Cells a poll reaches without taking the list's lock.
const FIXED: usize = 4;

/// Engines attached to a CQ or counter at fi_enable.
#[derive(Default)]
pub struct ProgressList {
    fixed: [OnceLock<EngineCell>; FIXED],
    /// Filled slots of `fixed` (written under `more`'s lock).
    fixed_len: AtomicUsize,
    more: Mutex<Vec<EngineCell>>,
    /// Whether `more` holds anything (written under its lock).
    more_len: AtomicUsize,
}

impl ProgressList {
    /// Attach an endpoint's engine (at fi_enable, whose caller may hold
    /// `cell`'s lock: a locked cell is kept, never waited for). A cell
    /// already attached (one CQ bound for both directions) is not added
    /// twice.
    pub fn attach(&self, cell: EngineCell) {
        let mut v = self.more.lock_ok();
        let n = self.fixed_len.load(Ordering::Relaxed);
        if self.fixed[..n].iter().filter_map(OnceLock::get).chain(v.iter()).any(|c| Arc::ptr_eq(c, &cell)) {
            return;
        }
        if n < FIXED {
            // Only attach writes slots, under `more`'s lock: slot n is empty.
            let _ = self.fixed[n].set(cell);
            self.fixed_len.store(n + 1, Ordering::Release);
            return;
        }
        v.retain(|c| c.try_lock().is_none_or(|g| g.is_some()));
        v.push(cell);
        self.more_len.store(v.len(), Ordering::Release);
    }

    /// Whether no endpoint was ever attached.
    pub fn is_empty(&self) -> bool {
        self.fixed_len.load(Ordering::Acquire) == 0
    }

    /// Progress every attached engine that still runs.
    pub fn run(&self) {
        self.run_with(true);
    }

    /// Run every engine; `serve`: false leaves the copies its peers asked
    /// for and that it kept (see `Engine::progress_with`) for a later call.
    // (Forced in line, as every function a small message's path calls
    // once per message: docs/architecture.md, "The per-message path is
    // one function".)
    #[inline(always)]
    pub fn run_with(&self, serve: bool) {
        let n = self.fixed_len.load(Ordering::Acquire);
        for c in self.fixed[..n].iter().filter_map(OnceLock::get) {
            if let Some(e) = c.lock().as_mut() {
                e.progress_with(serve);
            }
        }
        if self.more_len.load(Ordering::Acquire) == 0 {
            return;
        }
        // Under the list lock: progress never attaches (only fi_enable
        // does), so this cannot deadlock, and it allocates nothing.
        let v = self.more.lock_ok();
        for c in v.iter() {
            if let Some(e) = c.lock().as_mut() {
                e.progress_with(serve);
            }
        }
    }
}

/// An endpoint's engine as the wait object of a CQ or counter it feeds
/// sees it (`queues::wait::Sleeper`): the queues sit below the protocol
/// and cannot name the engine.
pub struct EngineSleeper(pub EngineCell);

impl crate::queues::wait::Sleeper for EngineSleeper {
    fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        self.0.lock().as_ref().and_then(|e| e.wake_fd())
    }

    fn sleep(&self) -> bool {
        // (Closed: nothing arrives for it any more.)
        self.0.lock().as_mut().is_none_or(|e| e.sleep())
    }

    fn awake(&self) {
        if let Some(e) = self.0.lock().as_mut() {
            e.awake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell() -> EngineCell {
        Arc::new(SpinLock::new(None))
    }

    #[test]
    fn attach_keeps_each_cell_once_and_overflows_past_fixed() {
        let l = ProgressList::default();
        assert!(l.is_empty());
        let first = cell();
        l.attach(first.clone());
        l.attach(first.clone());
        assert_eq!(l.fixed_len.load(Ordering::Relaxed), 1, "one CQ bound twice polls its engine once");
        let rest: Vec<_> = (0..FIXED + 1).map(|_| cell()).collect();
        for c in &rest {
            l.attach(c.clone());
        }
        l.attach(rest[FIXED].clone());
        assert_eq!(l.fixed_len.load(Ordering::Relaxed), FIXED);
        // (Test cells are empty, as a closed endpoint's: each attach to
        // the overflow list drops the empty ones already there.)
        assert_eq!(l.more_len.load(Ordering::Relaxed), 1, "cells past the fixed slots go to the locked list");
        assert!(Arc::ptr_eq(&l.more.lock().unwrap()[0], &rest[FIXED]), "the re-attached cell is there once");
        l.run();
    }
}
