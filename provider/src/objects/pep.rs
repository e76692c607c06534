//! Passive endpoint (FI_EP_MSG listener).
//!
//! The listening socket is bound at creation so fi_getname reports a real
//! address; accepting connections (fi_listen) waits for the MSG data path
//! and returns -FI_ENOSYS until then.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex, MutexGuard};

use oxmr_ffi as ffi;

use super::eq::Eq;
use super::fabric::Fabric;
use crate::error::Result;
use crate::fail;
use crate::info::Info;
use oxmr_ffi::FidHeader;

/// What a passive endpoint holds.
#[derive(Default)]
pub struct PepState {
    pub eq: Option<Arc<Eq>>,
    pub listener: Option<TcpListener>,
    pub name: Option<SocketAddr>,
}

/// A passive endpoint.
#[repr(C)]
pub struct Pep {
    pub hdr: FidHeader<ffi::fid_pep>,
    pub fabric: Arc<Fabric>,
    pub info: Info,
    state: Mutex<PepState>,
}

fn bind_at(at: SocketAddr) -> Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(at).map_err(|e| fail!(ffi::FI_EADDRINUSE, "fi_passive_ep: cannot bind {at}: {e}"))?;
    let name = l.local_addr().map_err(|e| fail!(ffi::FI_EIO, "getsockname: {e}"))?;
    Ok((l, name))
}

impl Pep {
    /// Build the passive endpoint, bound at the info's source address.
    pub fn new(hdr: FidHeader<ffi::fid_pep>, fabric: Arc<Fabric>, info: Info) -> Result<Self> {
        if info.ep.type_ != ffi::FI_EP_MSG {
            return Err(fail!(ffi::FI_EINVAL, "fi_passive_ep needs an FI_EP_MSG info"));
        }
        let at = info.src.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let (l, name) = bind_at(at)?;
        let state = PepState { eq: None, listener: Some(l), name: Some(name) };
        Ok(Pep { hdr, fabric, info, state: Mutex::new(state) })
    }

    /// Lock the state.
    pub fn state(&self) -> MutexGuard<'_, PepState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bind the EQ that will receive FI_CONNREQ events.
    pub fn bind_eq(&self, eq: Arc<Eq>, flags: u64) -> Result<()> {
        if flags != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_pep_bind(eq) takes no flags"));
        }
        if !Arc::ptr_eq(&eq.fabric, &self.fabric) {
            return Err(fail!(ffi::FI_EINVAL, "fi_pep_bind: the EQ belongs to another fabric"));
        }
        let mut s = self.state();
        if s.eq.is_some() {
            return Err(fail!(ffi::FI_EINVAL, "fi_pep_bind: an EQ is already bound"));
        }
        s.eq = Some(eq);
        Ok(())
    }

    /// fi_setname: rebind the listening socket.
    pub fn set_name(&self, addr: SocketAddr) -> Result<()> {
        let (l, name) = bind_at(addr)?;
        let mut s = self.state();
        s.listener = Some(l);
        s.name = Some(name);
        Ok(())
    }

    /// The bound address.
    pub fn name(&self) -> Option<SocketAddr> {
        self.state().name
    }
}
