//! An endpoint's inbox: where its peers' frames arrive, made when the
//! endpoint gets its name (so the name is reserved before it is enabled)
//! and handed to its engine at fi_enable. Today that is the shared-memory
//! queue file of its address; the objects above hold it without knowing
//! which wire it belongs to.

use std::net::SocketAddr;

use oxmr_ffi as ffi;

use crate::error::Result;
use crate::fail;
use crate::wire::shm::region::{path_for, Region};

/// An endpoint's queue, not yet handed to an engine.
pub struct Inbox(pub(crate) Region);

impl Inbox {
    /// The inbox of the endpoint named `name`; `call` names the libfabric
    /// call for the log line when it cannot be made.
    pub fn create(name: &SocketAddr, call: &str) -> Result<Inbox> {
        Region::create(name).map(Inbox).map_err(|e| {
            fail!(ffi::FI_EIO, "{call}: cannot create the shared-memory queue /dev/shm{}: {e}", path_for(name))
        })
    }
}
