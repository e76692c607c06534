//! Manual progress: the endpoints a CQ or counter read must drive.

use std::sync::{Mutex, Weak};

use super::ep::Ep;

/// Endpoints attached to a CQ or counter at fi_enable.
#[derive(Default)]
pub struct ProgressList(Mutex<Vec<Weak<Ep>>>);

impl ProgressList {
    /// Attach an endpoint (at fi_enable).
    pub fn attach(&self, ep: Weak<Ep>) {
        let mut v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(ep);
    }

    /// Whether no endpoint was ever attached.
    pub fn is_empty(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Progress every attached endpoint that is still open.
    pub fn run(&self) {
        // Under the list lock: progress never attaches (only fi_enable
        // does), so this cannot deadlock, and it allocates nothing.
        let v = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for w in v.iter() {
            if let Some(ep) = w.upgrade() {
                ep.progress();
            }
        }
    }
}
