//! The same-host wire: one shared-memory region per RDM endpoint, named
//! after the endpoint's address, holding a table of shared-copy jobs and a
//! multi-producer, single-consumer queue of fixed-size cells.
//!
//! A sender opens the receiver's region and pushes cells; every message
//! names its sender (pid and address), so the receiver can copy from it
//! with process_vm_readv and answer it. Only the owner pops. Large payloads
//! never pass through the queue: they are copied once between the two
//! processes' buffers with process_vm_readv/writev, by the receiver (or,
//! for RMA, the target, after checking the key) and, for large ones, by
//! both processes at once (`jobs`). See docs/wire-shm.md.

pub mod cma;
pub mod dir;
pub mod jobs;
pub mod region;
pub mod share;

use super::{Proof, Props, Wire};

/// What the shared-memory wire is, sending up to `eager_max` bytes inline
/// (FI_OXMR_SHM_EAGER_MAX; at most a cell's, `config::EAGER_MAX`): frames
/// of one queue cell, pushed or refused `Full` (never queued), copies
/// straight from and into the peer's memory (CMA) and shared by both
/// processes, the sender proven by the process that owns its queue.
pub fn props(eager_max: usize) -> Props {
    Props {
        wire: Wire::Shm,
        name: "shared memory",
        max_frame: super::FRAME_FLOOR,
        eager_max: eager_max.min(crate::config::EAGER_MAX),
        eager_setting: "FI_OXMR_SHM_EAGER_MAX",
        buffers: false,
        spreads: false,
        reaches_memory: true,
        streams_writes: false,
        shares: true,
        proof: Proof::Owner,
    }
}
