//! oxmr: a libfabric provider with memory registration done right.
//!
//! Rooms (DESIGN.md): `boundary` is the C ABI (the only place that knows
//! libfabric's C layout, with the panic guard and all fid casts);
//! `objects` are the libfabric objects in safe Rust; `info` answers
//! fi_getinfo; `sys` wraps the few system calls the objects need.
#![deny(unsafe_op_in_unsafe_fn)]
// bindgen gives each FI_* constant the narrowest type its value fits, which
// differs between header versions; the explicit casts keep both building.
#![allow(clippy::unnecessary_cast)]

pub mod boundary;
pub mod config;
pub mod error;
pub mod ext;
pub mod info;
pub mod mr;
pub mod objects;
pub mod protocol;
pub mod queues;
pub mod sys;
pub mod wire;

pub use boundary::provider::fi_prov_ini;
