//! An endpoint's inbox: where its peers' frames arrive, made when the
//! endpoint gets its name (so the name is reserved before it is enabled)
//! and handed to its engine at fi_enable. The objects above hold it
//! without knowing which wire it belongs to (`wire::Inbox`).

use std::net::SocketAddr;

use oxmr_ffi as ffi;

use crate::error::Result;
use crate::fail;

/// An endpoint's queue, not yet handed to an engine.
pub struct Inbox(pub(crate) crate::wire::Inbox);

impl Inbox {
    /// Take frames over connections too, those the endpoint's `listener`
    /// accepts (FI_OXMR_WIRE other than shm), from peers that prove `key`
    /// where there is one, within the bounds `cfg` gives; `call` as for
    /// `create`.
    pub fn take_connections(
        &mut self,
        listener: &crate::wire::Listener,
        key: Option<crate::auth::JobKey>,
        cfg: &crate::config::Config,
        call: &str,
    ) -> Result<()> {
        listener
            .try_clone()
            .and_then(|l| self.0.take_connections(l, key, cfg))
            .map_err(|e| fail!(ffi::FI_EIO, "{call}: cannot take connections at the endpoint's listener: {e}"))
    }

    /// The inbox of the endpoint named `name`, reaching its peers over
    /// `wire`, its shared-memory queue proving `key` where there is one;
    /// `call` names the libfabric call for the log line when it cannot be
    /// made.
    pub fn create(
        name: &SocketAddr,
        wire: crate::config::Wire,
        key: Option<&crate::auth::JobKey>,
        call: &str,
    ) -> Result<Inbox> {
        crate::wire::Inbox::create(name, wire, key)
            .map(Inbox)
            .map_err(|e| fail!(ffi::FI_EIO, "{call}: cannot create {}: {e}", crate::wire::Inbox::place(name)))
    }
}
