//! The libfabric objects: fabric, domain, endpoints, CQ, EQ, AV, counters,
//! poll sets, wait sets.
//!
//! Safe Rust: each object is `#[repr(C)]` with its C header first (so the
//! boundary can hand it to C), holds `Arc`s to what it is bound to or
//! created from, and validates every attribute it is given. The C slots
//! that drive them live in `boundary/`.

pub mod alias;
pub mod av;
pub mod cntr;
pub mod cq;
pub mod domain;
pub mod ep;
pub mod eq;
pub mod fabric;
pub mod mr;
pub mod pep;
pub mod poll;
pub mod progress;
pub mod sep;
pub mod srx;
pub mod stx;
pub mod wait_set;
