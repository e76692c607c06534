//! Manual progress: the endpoint engines a CQ, counter or domain read must
//! drive.
//!
//! A list holds each engine's cell (not the endpoint), so a poll reaches
//! the engine with one lock and no reference counting; an endpoint empties
//! its cell when it is dropped, and empty cells are pruned at the next
//! attach.

use std::sync::{Arc, Mutex};

use crate::protocol::engine::Engine;

/// An endpoint's engine: `None` before fi_enable and after close.
pub type EngineCell = Arc<Mutex<Option<Engine>>>;

/// Engines attached to a CQ or counter at fi_enable.
#[derive(Default)]
pub struct ProgressList(Mutex<Vec<EngineCell>>);

impl ProgressList {
    /// Attach an endpoint's engine (at fi_enable, whose caller may hold
    /// `cell`'s lock: a locked cell is kept, never waited for).
    pub fn attach(&self, cell: EngineCell) {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|c| c.try_lock().map_or(true, |g| g.is_some()));
        v.push(cell);
    }

    /// Whether no endpoint was ever attached.
    pub fn is_empty(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Progress every attached engine that still runs.
    pub fn run(&self) {
        // Under the list lock: progress never attaches (only fi_enable
        // does), so this cannot deadlock, and it allocates nothing.
        let v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for c in v.iter() {
            if let Some(e) = c.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                e.progress();
            }
        }
    }
}
