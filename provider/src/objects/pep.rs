//! Passive endpoint (FI_EP_MSG listener) and the connection requests it
//! hands out.
//!
//! The listening socket is bound at creation so fi_getname reports a real
//! address. After fi_listen, every read of the bound EQ accepts what has
//! arrived on it and reads each connection's request (protocol::conn); a
//! complete request becomes an FI_CONNREQ event whose info carries a
//! [`ConnReq`] as its `handle`: fi_endpoint with that info takes the
//! connection (then fi_accept answers it), fi_reject answers it with a
//! refusal.

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex, MutexGuard};

use oxmr_ffi as ffi;

use super::eq::{eq_entry_bytes, CmSource, Eq};
use super::fabric::Fabric;
use crate::error::Result;
use crate::fail;
use crate::info::Info;
use crate::protocol::conn::Arrivals;
pub use crate::protocol::conn::Incoming;
use crate::sys::LockExt;
use oxmr_ffi::FidHeader;

/// The `handle` of an FI_CONNREQ info: the request until fi_endpoint
/// takes it or fi_reject answers it.
#[repr(C)]
pub struct ConnReq {
    pub hdr: FidHeader<ffi::fid>,
    req: Mutex<Option<Incoming>>,
}

impl ConnReq {
    pub fn new(hdr: FidHeader<ffi::fid>, req: Incoming) -> Self {
        ConnReq { hdr, req: Mutex::new(Some(req)) }
    }

    /// The port the request arrived at (its passive endpoint's), while it
    /// is unanswered.
    pub fn port(&self) -> Option<u16> {
        self.req.lock_ok().as_ref().map(|r| r.local().port())
    }

    /// Take the request (once).
    pub fn take(&self, call: &str) -> Result<Incoming> {
        self.req.lock_ok().take().ok_or_else(|| {
            fail!(
                ffi::FI_EINVAL,
                "{call}: this connection request was already accepted or rejected; each FI_CONNREQ is answered once"
            )
        })
    }
}

/// How the boundary turns a request into the FI_CONNREQ info: it publishes
/// a [`ConnReq`] and returns the C `fi_info` (0 when out of memory).
pub type PublishReq = fn(Incoming, Info) -> usize;

/// What a passive endpoint holds.
#[derive(Default)]
pub struct PepState {
    pub eq: Option<Arc<Eq>>,
    pub listener: Option<TcpListener>,
    pub name: Option<SocketAddr>,
    listening: bool,
    /// Accepted connections whose request has not arrived yet.
    arriving: Arrivals,
}

/// A passive endpoint.
#[repr(C)]
pub struct Pep {
    pub hdr: FidHeader<ffi::fid_pep>,
    pub fabric: Arc<Fabric>,
    pub info: Info,
    state: Mutex<PepState>,
    publish: PublishReq,
}

fn bind_at(at: SocketAddr) -> Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(at).map_err(|e| fail!(ffi::FI_EADDRINUSE, "fi_passive_ep: cannot bind {at}: {e}"))?;
    let name = l.local_addr().map_err(|e| fail!(ffi::FI_EIO, "getsockname: {e}"))?;
    Ok((l, name))
}

impl Pep {
    /// Build the passive endpoint, bound at the info's source address.
    pub fn new(hdr: FidHeader<ffi::fid_pep>, fabric: Arc<Fabric>, info: Info, publish: PublishReq) -> Result<Self> {
        if info.ep.type_ != ffi::FI_EP_MSG {
            return Err(fail!(ffi::FI_EINVAL, "fi_passive_ep needs an FI_EP_MSG info"));
        }
        let key = super::domain::resolve_key(
            &[(&info.ep.auth_key, "ep_attr"), (&info.domain.auth_key, "domain_attr")],
            &fabric.config.auth_key,
            "fi_passive_ep",
        )?;
        let at = info.src.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let (l, name) = bind_at(at)?;
        let state =
            PepState { listener: Some(l), name: Some(name), arriving: Arrivals::with_key(key), ..Default::default() };
        Ok(Pep { hdr, fabric, info, state: Mutex::new(state), publish })
    }

    /// Lock the state.
    pub fn state(&self) -> MutexGuard<'_, PepState> {
        self.state.lock_ok()
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

    /// fi_setname: rebind the listening socket (before fi_listen).
    pub fn set_name(&self, addr: SocketAddr) -> Result<()> {
        if self.state().listening {
            return Err(fail!(
                ffi::FI_EOPBADSTATE,
                "fi_setname on a listening passive endpoint; set it before fi_listen"
            ));
        }
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

    /// Give the listening socket to an active endpoint opened with this
    /// passive endpoint as its info's handle (it takes over the address).
    pub fn take_listener(&self) -> Result<TcpListener> {
        let mut s = self.state();
        if s.listening {
            return Err(fail!(
                ffi::FI_EBUSY,
                "fi_endpoint: the passive endpoint in the info's handle is listening; its address cannot be taken"
            ));
        }
        s.listener.take().ok_or_else(|| {
            fail!(
                ffi::FI_EINVAL,
                "fi_endpoint: the passive endpoint in the info's handle gave its address away already"
            )
        })
    }

    /// fi_listen: take connection requests, reported on the bound EQ.
    pub fn listen(self: &Arc<Self>) -> Result<()> {
        let mut s = self.state();
        let eq = s.eq.clone().ok_or_else(|| fail!(ffi::FI_ENOEQ, "fi_listen: no EQ bound; fi_pep_bind an EQ first"))?;
        if s.listening {
            return Ok(());
        }
        let l = s.listener.as_ref().ok_or_else(|| {
            fail!(ffi::FI_EOPBADSTATE, "fi_listen: this passive endpoint gave its address to an active endpoint")
        })?;
        l.set_nonblocking(true).map_err(|e| fail!(ffi::FI_EIO, "fi_listen: {e}"))?;
        s.listening = true;
        drop(s);
        let me: Arc<dyn CmSource> = self.clone();
        eq.watch(Arc::downgrade(&me));
        Ok(())
    }

    /// The fid address events name.
    fn fid_addr(&self) -> usize {
        self as *const Self as usize
    }
}

impl CmSource for Pep {
    fn cm_wake_fds(&self, out: &mut Vec<crate::sys::WakeFd>) -> bool {
        let s = self.state();
        if !s.listening {
            return true;
        }
        if let Some(l) = &s.listener {
            out.push((std::os::fd::AsRawFd::as_raw_fd(l), false));
        }
        s.arriving.wake_fds(out)
    }

    fn cm_progress(&self) -> bool {
        let mut s = self.state();
        let (Some(eq), true) = (s.eq.clone(), s.listening) else {
            return false;
        };
        let timeout = self.fabric.config.cm_timeout;
        let st = &mut *s;
        let ready = match &st.listener {
            Some(l) => st.arriving.poll(l, timeout),
            None => Vec::new(),
        };
        let here = s.name;
        drop(s);
        for (req, data) in ready {
            let mut info = self.info.clone();
            // The accepting endpoint gets its own data name at the address
            // the connector reached us at (any port), and knows its peer.
            info.src = Some(SocketAddr::new(req.local().ip(), 0));
            info.dest = Some(req.peer);
            info.handle = 0;
            let from = req.peer;
            let ptr = (self.publish)(req, info);
            if ptr == 0 {
                tracing::warn!("passive endpoint {here:?}: no memory for the connection request of {from}; dropped");
                continue;
            }
            let mut bytes = eq_entry_bytes(self.fid_addr(), ptr, 0);
            bytes.truncate(2 * size_of::<usize>());
            bytes.extend_from_slice(&data);
            eq.post(ffi::FI_CONNREQ, bytes);
        }
        true
    }
}
