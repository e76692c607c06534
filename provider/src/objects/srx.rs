//! Shared receive context (fi_srx_context, fi_endpoint(3) "Shared
//! Contexts"): receives posted to it are matched by the arrivals of every
//! endpoint bound to it (opened with `rx_ctx_cnt = FI_SHARED_CONTEXT`,
//! `fi_ep_bind` before `fi_enable`), and complete into the CQ of the
//! endpoint that received the message. The queues and the matching are
//! `protocol::engine::SharedRx`'s.
//!
//! A directed receive (FI_DIRECTED_RECV in the context's attributes)
//! names its source in the AV of the endpoints bound to it (they share
//! one, fi_endpoint(3)): the first bound endpoint's is taken.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use oxmr_ffi as ffi;

use super::domain::Domain;
use crate::error::Result;
use crate::fail;
use crate::info::attrs;
use crate::protocol::av::AddrTable;
use crate::protocol::engine::SharedRx;
use crate::protocol::Iovs;
use crate::sys::LockExt;
use oxmr_ffi::FidHeader;

/// A shared receive context.
#[repr(C)]
pub struct Srx {
    pub hdr: FidHeader<ffi::fid_ep>,
    pub domain: Arc<Domain>,
    pub shared: Arc<SharedRx>,
    /// Its default receive op flags (fi_rx_attr.op_flags).
    op_flags: u64,
    directed: bool,
    /// The AV of the first endpoint bound (directed receives' sources).
    av: Mutex<Option<Arc<AddrTable>>>,
}

impl Srx {
    /// Check the attributes (NULL: the defaults) and build.
    pub fn new(hdr: FidHeader<ffi::fid_ep>, domain: Arc<Domain>, attr: Option<&ffi::fi_rx_attr>) -> Result<Srx> {
        let (mut size, mut op_flags, mut directed) = (attrs::QUEUE_SIZE, 0, false);
        if let Some(a) = attr {
            if a.size > attrs::QUEUE_SIZE {
                return Err(fail!(ffi::FI_EINVAL, "fi_srx_context: size {} above {}", a.size, attrs::QUEUE_SIZE));
            }
            if a.op_flags & !attrs::RX_OP_FLAGS != 0 {
                return Err(fail!(ffi::FI_EINVAL, "fi_srx_context: op_flags {:#x} not supported", a.op_flags));
            }
            if a.op_flags & ffi::FI_MULTI_RECV as u64 != 0 {
                return Err(fail!(
                    ffi::FI_EINVAL,
                    "fi_srx_context: FI_MULTI_RECV in op_flags; oxmr takes multi-receive buffers on an endpoint's own receive context only"
                ));
            }
            if a.caps & !attrs::RX_CAPS != 0 {
                return Err(fail!(
                    ffi::FI_EINVAL,
                    "fi_srx_context: caps {:#x} not supported",
                    a.caps & !attrs::RX_CAPS
                ));
            }
            if a.size > 0 {
                size = a.size;
            }
            op_flags = a.op_flags;
            directed = a.caps & ffi::FI_DIRECTED_RECV as u64 != 0;
        }
        Ok(Srx { hdr, domain, shared: Arc::new(SharedRx::new(size)), op_flags, directed, av: Mutex::new(None) })
    }

    /// An endpoint bound to it was enabled with `av`.
    pub fn saw_av(&self, av: Option<&Arc<AddrTable>>) {
        let mut a = self.av.lock_ok();
        if a.is_none() {
            *a = av.cloned();
        }
    }

    /// fi_recv / fi_trecv (and their v and msg forms) on the context.
    pub fn recv(&self, ctx: usize, iovs: Iovs, src: u64, tag: Option<(u64, u64)>, flags: Option<u64>) -> Result<()> {
        let flags = flags.unwrap_or(self.op_flags);
        let src: Option<SocketAddr> = if src == ffi::FI_ADDR_UNSPEC || !self.directed {
            None
        } else {
            let av = self.av.lock_ok().clone().ok_or_else(|| {
                fail!(
                    ffi::FI_EOPBADSTATE,
                    "a directed receive on a shared receive context with no enabled RDM or DGRAM endpoint bound (their AV names the source)"
                )
            })?;
            Some(av.lookup(src)?)
        };
        self.shared.post(ctx, iovs, src, tag, flags)
    }
}
