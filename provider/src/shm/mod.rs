//! The same-host wire: one shared-memory region per RDM endpoint, named
//! after the endpoint's address, holding a table of peers and a
//! multi-producer, single-consumer queue of fixed-size cells.
//!
//! A sender opens the receiver's region, claims a peer slot (recording its
//! pid and name, so the receiver can copy from it with process_vm_readv and
//! answer it), and pushes cells. Only the owner pops. Large payloads never
//! pass through the queue: the receiver (or, for RMA, the target, after
//! checking the key) copies them once between the two processes' buffers
//! with process_vm_readv/writev. See docs/wire.md.

pub mod cma;
pub mod region;
