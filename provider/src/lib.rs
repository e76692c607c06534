//! oxmr: a libfabric provider with memory registration done right.
//!
//! Rooms (DESIGN.md): `boundary` is the C ABI (the only place that knows
//! libfabric's C layout, with the panic guard and all fid casts);
//! `objects` are the libfabric objects in safe Rust; `info` answers
//! fi_getinfo; `sys` wraps the few system calls the objects need.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod boundary;
pub mod info;
pub mod objects;
pub mod sys;

pub use boundary::provider::fi_prov_ini;
