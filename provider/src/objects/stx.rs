//! Shared transmit context (fi_stx_context, fi_endpoint(3) "Shared
//! Contexts"). Endpoints opened with `tx_ctx_cnt = FI_SHARED_CONTEXT` bind
//! one (`fi_ep_bind`) and transmit as ever: oxmr accepts the shared context
//! for applications written to it, and each endpoint keeps its own transmit
//! queue and engine (no resources are pooled, so nothing an endpoint posts
//! waits for another's; its completions go to its own bound CQ and
//! counters, as fi_endpoint(3) says). Shared *receive* contexts are not
//! offered (`fi_srx_context` is -FI_ENOSYS, getinfo refuses
//! `rx_ctx_cnt = FI_SHARED_CONTEXT`).

use std::sync::Arc;

use oxmr_ffi as ffi;

use super::domain::Domain;
use crate::error::Result;
use crate::fail;
use crate::info::attrs;
use oxmr_ffi::FidHeader;

/// A shared transmit context.
#[repr(C)]
pub struct Stx {
    pub hdr: FidHeader<ffi::fid_stx>,
    pub domain: Arc<Domain>,
}

impl Stx {
    /// Check the attributes (NULL: the defaults) and build.
    pub fn new(hdr: FidHeader<ffi::fid_stx>, domain: Arc<Domain>, attr: Option<&ffi::fi_tx_attr>) -> Result<Stx> {
        if let Some(a) = attr {
            if a.size > attrs::QUEUE_SIZE {
                return Err(fail!(ffi::FI_EINVAL, "fi_stx_context: size {} above {}", a.size, attrs::QUEUE_SIZE));
            }
            if a.op_flags & !attrs::TX_OP_FLAGS != 0 {
                return Err(fail!(ffi::FI_EINVAL, "fi_stx_context: op_flags {:#x} not supported", a.op_flags));
            }
        }
        Ok(Stx { hdr, domain })
    }
}
