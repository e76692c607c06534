//! oxmr's capabilities and limits: the template every getinfo answer starts
//! from. Change a capability here only together with the code that makes
//! it work (README "Status" lists what is live).

use oxmr_ffi as ffi;

use super::{DomainAttr, EpAttr, FabricAttr, Info, RxAttr, TxAttr};

const fn b(x: u32) -> u64 {
    x as u64
}

/// Capabilities a returned info takes from the hints when they are asked
/// (libfabric's "primary" capabilities).
pub(crate) const PRIMARY_CAPS: u64 = b(ffi::FI_MSG)
    | b(ffi::FI_RMA)
    | b(ffi::FI_TAGGED)
    | b(ffi::FI_ATOMIC)
    | ffi::FI_MULTICAST as u64
    | ffi::FI_NAMED_RX_CTX as u64
    | ffi::FI_DIRECTED_RECV as u64
    | b(ffi::FI_READ)
    | b(ffi::FI_WRITE)
    | b(ffi::FI_RECV)
    | b(ffi::FI_SEND)
    | b(ffi::FI_REMOTE_READ)
    | b(ffi::FI_REMOTE_WRITE)
    | ffi::FI_VARIABLE_MSG as u64
    | ffi::FI_HMEM as u64
    | b(ffi::FI_COLLECTIVE);

/// Capabilities oxmr adds to every answer that it supports ("secondary").
pub(crate) const SECONDARY_CAPS: u64 = ffi::FI_MULTI_RECV as u64
    | ffi::FI_SOURCE as u64
    | ffi::FI_RMA_EVENT as u64
    | ffi::FI_SHARED_AV as u64
    | ffi::FI_TRIGGER as u64
    | ffi::FI_FENCE as u64
    | ffi::FI_LOCAL_COMM as u64
    | ffi::FI_REMOTE_COMM as u64
    | ffi::FI_SOURCE_ERR as u64
    | ffi::FI_RMA_PMEM as u64;

/// Capabilities that concern the transmit side.
pub(crate) const TX_CAPS: u64 = b(ffi::FI_MSG)
    | b(ffi::FI_RMA)
    | b(ffi::FI_TAGGED)
    | b(ffi::FI_ATOMIC)
    | b(ffi::FI_READ)
    | b(ffi::FI_WRITE)
    | b(ffi::FI_SEND)
    | ffi::FI_MULTICAST as u64
    | ffi::FI_NAMED_RX_CTX as u64
    | ffi::FI_FENCE as u64
    | ffi::FI_TRIGGER as u64
    | ffi::FI_HMEM as u64
    | ffi::FI_VARIABLE_MSG as u64
    | b(ffi::FI_COLLECTIVE);

/// Capabilities that concern the receive side.
pub(crate) const RX_CAPS: u64 = b(ffi::FI_MSG)
    | b(ffi::FI_RMA)
    | b(ffi::FI_TAGGED)
    | b(ffi::FI_ATOMIC)
    | b(ffi::FI_RECV)
    | b(ffi::FI_REMOTE_READ)
    | b(ffi::FI_REMOTE_WRITE)
    | ffi::FI_DIRECTED_RECV as u64
    | ffi::FI_MULTI_RECV as u64
    | ffi::FI_SOURCE as u64
    | ffi::FI_RMA_EVENT as u64
    | ffi::FI_SOURCE_ERR as u64
    | ffi::FI_HMEM as u64
    | ffi::FI_VARIABLE_MSG as u64
    | b(ffi::FI_COLLECTIVE);

/// Domain-level capabilities: peers on this host (shared memory) and on
/// others (TCP). getinfo takes FI_REMOTE_COMM away where the TCP wire is
/// not used (FI_OXMR_WIRE=shm): an application that needs it gets
/// -FI_ENODATA, not an endpoint whose sends all fail.
pub(crate) const DOMAIN_CAPS: u64 = ffi::FI_LOCAL_COMM as u64 | ffi::FI_REMOTE_COMM as u64;

/// Named AVs shared by the processes of a user on one host
/// (`protocol::av::shared`): for the endpoint types that use an AV (RDM,
/// DGRAM), in their info's caps and their domain's.
pub(crate) const SHARED_AV: u64 = ffi::FI_SHARED_AV as u64;

/// The most transmit and receive contexts a scalable endpoint has
/// (`objects::sep`: each is an endpoint of its own, at consecutive ports).
pub(crate) const SEP_MAX_CTX: usize = 16;

/// What an RDM endpoint of oxmr can do (FI_NAMED_RX_CTX: a scalable
/// endpoint's receive contexts are named with fi_rx_addr).
pub(crate) const RDM_CAPS: u64 = b(ffi::FI_MSG)
    | ffi::FI_NAMED_RX_CTX as u64
    | b(ffi::FI_TAGGED)
    | b(ffi::FI_RMA)
    | b(ffi::FI_ATOMIC)
    | b(ffi::FI_SEND)
    | b(ffi::FI_RECV)
    | b(ffi::FI_READ)
    | b(ffi::FI_WRITE)
    | b(ffi::FI_REMOTE_READ)
    | b(ffi::FI_REMOTE_WRITE)
    | ffi::FI_SOURCE as u64
    | ffi::FI_DIRECTED_RECV as u64
    | ffi::FI_RMA_EVENT as u64
    | ffi::FI_FENCE as u64
    | ffi::FI_TRIGGER as u64
    | ffi::FI_MULTI_RECV as u64
    | SHARED_AV
    | DOMAIN_CAPS;

/// What a MSG (connected) endpoint of oxmr can do: the RDM engine with its
/// one peer (no FI_DIRECTED_RECV or FI_SOURCE: there is one source).
pub(crate) const MSG_CAPS: u64 = b(ffi::FI_MSG)
    | b(ffi::FI_TAGGED)
    | b(ffi::FI_RMA)
    | b(ffi::FI_ATOMIC)
    | b(ffi::FI_SEND)
    | b(ffi::FI_RECV)
    | b(ffi::FI_READ)
    | b(ffi::FI_WRITE)
    | b(ffi::FI_REMOTE_READ)
    | b(ffi::FI_REMOTE_WRITE)
    | ffi::FI_RMA_EVENT as u64
    | ffi::FI_FENCE as u64
    | ffi::FI_TRIGGER as u64
    | ffi::FI_MULTI_RECV as u64
    | DOMAIN_CAPS;

/// What a datagram (FI_EP_DGRAM) endpoint of oxmr can do: untagged
/// messages of at most [`DGRAM_MAX_MSG`] bytes between RDM-like endpoints
/// (the same engine and wires; delivery is reliable and in order, which
/// fi_endpoint(3) allows a DGRAM endpoint to be). No RMA, atomics or tags.
pub(crate) const DGRAM_CAPS: u64 = b(ffi::FI_MSG)
    | b(ffi::FI_SEND)
    | b(ffi::FI_RECV)
    | ffi::FI_SOURCE as u64
    | ffi::FI_DIRECTED_RECV as u64
    | SHARED_AV
    | DOMAIN_CAPS;

/// A datagram's largest size: one frame on every wire (the shm cell's
/// payload), never a rendezvous.
pub(crate) const DGRAM_MAX_MSG: usize = crate::config::EAGER_MAX;

/// Transmit op flags an application may set as an endpoint's defaults.
/// (Not FI_TRIGGER: an endpoint alias takes it, `objects::alias`.)
pub(crate) const TX_OP_FLAGS: u64 = ffi::FI_INJECT as u64
    | ffi::FI_COMPLETION as u64
    | ffi::FI_INJECT_COMPLETE as u64
    | ffi::FI_TRANSMIT_COMPLETE as u64
    | ffi::FI_DELIVERY_COMPLETE as u64;

/// Receive op flags an application may set as defaults (FI_MULTI_RECV:
/// untagged receives post multi-receive buffers).
pub(crate) const RX_OP_FLAGS: u64 = ffi::FI_COMPLETION as u64 | ffi::FI_MULTI_RECV as u64;

/// Message ordering oxmr guarantees: send-after-send only, for now.
pub(crate) const MSG_ORDER: u64 = ffi::FI_ORDER_SAS as u64;

/// mr_mode bits oxmr can honour when an application allows them.
pub(crate) const MR_MODES: i32 = (ffi::FI_MR_LOCAL
    | ffi::FI_MR_VIRT_ADDR
    | ffi::FI_MR_ALLOCATED
    | ffi::FI_MR_PROV_KEY
    | ffi::FI_MR_ENDPOINT
    | ffi::FI_MR_MMU_NOTIFY) as i32;

/// The three bits FI_MR_BASIC stands for.
pub(crate) const MR_BASIC_MAP: i32 = (ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_ALLOCATED | ffi::FI_MR_PROV_KEY) as i32;

/// `FI_TAG_GENERIC` from fi_endpoint(3): any 64-bit tag.
pub(crate) const MEM_TAG_FORMAT: u64 = 0xAAAA_AAAA_AAAA_AAAA;

/// Largest inline (inject) payload.
pub(crate) const INJECT_SIZE: usize = 4096;
/// Default and largest transmit/receive queue depth.
pub(crate) const QUEUE_SIZE: usize = 1024;
/// Largest iov count per operation.
pub(crate) const IOV_LIMIT: usize = 4;
/// Largest rma_iov count per RMA operation.
pub(crate) const RMA_IOV_LIMIT: usize = 1;
pub(crate) use crate::mr::MR_IOV_LIMIT;
/// Bytes of remote CQ data.
pub(crate) const CQ_DATA_SIZE: usize = 8;
/// Per-domain object limits.
pub(crate) const OBJ_LIMIT: usize = 256;
/// Registrations per domain.
pub(crate) const MR_CNT: usize = 1 << 16;
/// Largest CM data carried by connect/accept/reject on MSG endpoints.
pub(crate) const CM_DATA_SIZE: usize = 256;
/// oxmr's protocol version on the wire.
pub(crate) const PROTOCOL_VERSION: u32 = 1;

/// oxmr's own version as `FI_VERSION(major, minor)`, from Cargo.toml.
pub(crate) const PROVIDER_VERSION: u32 = {
    const fn parse(s: &str) -> u32 {
        let b = s.as_bytes();
        let mut i = 0;
        let mut v = 0;
        while i < b.len() {
            v = v * 10 + (b[i] - b'0') as u32;
            i += 1;
        }
        v
    }
    ffi::fi_version_of(parse(env!("CARGO_PKG_VERSION_MAJOR")), parse(env!("CARGO_PKG_VERSION_MINOR")))
};

/// The info oxmr offers for an endpoint type, before hints and addresses.
pub fn template(ep_type: u32) -> Info {
    let caps = match ep_type {
        ffi::FI_EP_MSG => MSG_CAPS,
        ffi::FI_EP_DGRAM => DGRAM_CAPS,
        _ => RDM_CAPS,
    };
    Info {
        caps,
        mode: 0,
        addr_format: ffi::FI_SOCKADDR_IN,
        src: None,
        dest: None,
        tx: TxAttr {
            caps: caps & TX_CAPS,
            mode: 0,
            op_flags: 0,
            msg_order: MSG_ORDER,
            comp_order: ffi::legacy::ORDER_NONE,
            inject_size: INJECT_SIZE,
            size: QUEUE_SIZE,
            iov_limit: IOV_LIMIT,
            rma_iov_limit: RMA_IOV_LIMIT,
            tclass: 0,
        },
        rx: RxAttr {
            caps: caps & RX_CAPS,
            mode: 0,
            op_flags: 0,
            msg_order: MSG_ORDER,
            comp_order: ffi::legacy::ORDER_NONE,
            total_buffered_recv: 0,
            size: QUEUE_SIZE,
            iov_limit: IOV_LIMIT,
        },
        ep: EpAttr {
            type_: ep_type,
            protocol: ffi::FI_PROTO_UNSPEC,
            protocol_version: PROTOCOL_VERSION,
            max_msg_size: if ep_type == ffi::FI_EP_DGRAM { DGRAM_MAX_MSG } else { usize::MAX },
            msg_prefix_size: 0,
            max_order_raw_size: 0,
            max_order_war_size: 0,
            max_order_waw_size: 0,
            mem_tag_format: MEM_TAG_FORMAT,
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            auth_key_size: 0,
            auth_key: None,
        },
        domain: DomainAttr {
            name: None,
            threading: ffi::FI_THREAD_SAFE,
            control_progress: ffi::FI_PROGRESS_MANUAL,
            data_progress: ffi::FI_PROGRESS_MANUAL,
            resource_mgmt: ffi::FI_RM_ENABLED,
            av_type: ffi::FI_AV_UNSPEC,
            mr_mode: 0,
            mr_key_size: 8,
            cq_data_size: CQ_DATA_SIZE,
            cq_cnt: OBJ_LIMIT,
            ep_cnt: OBJ_LIMIT,
            tx_ctx_cnt: OBJ_LIMIT,
            rx_ctx_cnt: OBJ_LIMIT,
            max_ep_tx_ctx: if ep_type == ffi::FI_EP_RDM { SEP_MAX_CTX } else { 1 },
            max_ep_rx_ctx: if ep_type == ffi::FI_EP_RDM { SEP_MAX_CTX } else { 1 },
            max_ep_stx_ctx: 1,
            max_ep_srx_ctx: 1,
            cntr_cnt: OBJ_LIMIT,
            mr_iov_limit: MR_IOV_LIMIT,
            caps: caps & (DOMAIN_CAPS | SHARED_AV),
            mode: 0,
            auth_key_size: 0,
            auth_key: None,
            max_err_data: CM_DATA_SIZE,
            mr_cnt: MR_CNT,
            tclass: 0,
        },
        fabric: FabricAttr {
            name: None,
            prov_name: None,
            prov_version: PROVIDER_VERSION,
            api_version: ffi::FI_HEADER_VERSION,
        },
        handle: 0,
    }
}
