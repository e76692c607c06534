//! oxmr: a libfabric provider with memory registration done right,
//! carrying its own data: shared memory between processes on one host,
//! TCP between hosts.
//!
//! Rooms, each importing only the ones below it (docs/architecture.md;
//! `tests/layering.rs` checks it): `boundary` is the C ABI (the only place
//! that knows libfabric's C layout, with the panic guard and all fid
//! casts); `objects` are the libfabric objects in safe Rust; `protocol` is
//! the message header, the endpoint engine and the FI_EP_MSG handshake's
//! state; `wire` is how frames reach a peer (`wire::shm`, `wire::tcp`,
//! chosen per peer; the engine asks a link what its wire is, never which
//! it is); `info` answers fi_getinfo; `queues` holds the CQ and counter
//! cores; `config` the parsed FI_OXMR_* values; `auth` the job key; `mr`
//! registration, pinning and the cache; `sys`, `error` and `ext` are
//! leaves (syscalls, the error type, the extension API).
#![deny(unsafe_op_in_unsafe_fn)]
// bindgen gives each FI_* constant the narrowest type its value fits, which
// differs between header versions; the explicit casts keep both building.
#![allow(clippy::unnecessary_cast)]

pub mod auth;
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
