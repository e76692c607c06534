//! What oxmr offers (`attrs`), how hints are matched against it
//! (`getinfo`), and endpoint addresses (`addr`).
//!
//! Everything here is plain Rust over the [`Info`] mirror of `struct
//! fi_info`; `boundary::info` converts from and to the C structs.

pub mod addr;
pub mod attrs;
pub mod getinfo;

use std::net::SocketAddr;

/// `struct fi_tx_attr`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
    pub tclass: u32,
}

/// `struct fi_rx_attr`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: usize,
    pub size: usize,
    pub iov_limit: usize,
}

/// `struct fi_ep_attr`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpAttr {
    pub type_: u32,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
    pub msg_prefix_size: usize,
    pub max_order_raw_size: usize,
    pub max_order_war_size: usize,
    pub max_order_waw_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub auth_key_size: usize,
    /// The `auth_key` bytes (None: NULL or empty; docs/security.md).
    pub auth_key: Option<Vec<u8>>,
}

/// `struct fi_domain_attr`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DomainAttr {
    pub name: Option<String>,
    pub threading: u32,
    pub control_progress: u32,
    pub data_progress: u32,
    pub resource_mgmt: u32,
    pub av_type: u32,
    pub mr_mode: i32,
    pub mr_key_size: usize,
    pub cq_data_size: usize,
    pub cq_cnt: usize,
    pub ep_cnt: usize,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub max_ep_tx_ctx: usize,
    pub max_ep_rx_ctx: usize,
    pub max_ep_stx_ctx: usize,
    pub max_ep_srx_ctx: usize,
    pub cntr_cnt: usize,
    pub mr_iov_limit: usize,
    pub caps: u64,
    pub mode: u64,
    pub auth_key_size: usize,
    /// The `auth_key` bytes (None: NULL or empty; docs/security.md).
    pub auth_key: Option<Vec<u8>>,
    pub max_err_data: usize,
    pub mr_cnt: usize,
    pub tclass: u32,
}

/// `struct fi_fabric_attr`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FabricAttr {
    pub name: Option<String>,
    pub prov_name: Option<String>,
    pub prov_version: u32,
    pub api_version: u32,
}

/// A complete `struct fi_info` as oxmr returns it or receives it back in
/// `fi_domain`/`fi_endpoint`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Info {
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src: Option<SocketAddr>,
    pub dest: Option<SocketAddr>,
    pub tx: TxAttr,
    pub rx: RxAttr,
    pub ep: EpAttr,
    pub domain: DomainAttr,
    pub fabric: FabricAttr,
    /// `handle`: a connection request's fid (FI_CONNREQ infos), 0 otherwise.
    pub handle: usize,
}

/// Application hints: like [`Info`], with each attr optional (NULL in C).
/// Addresses the application passed but oxmr cannot parse are kept as
/// `bad_*` so getinfo can refuse them with a reason.
#[derive(Clone, Debug, Default)]
pub struct Hints {
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src: Option<SocketAddr>,
    pub dest: Option<SocketAddr>,
    pub bad_src: bool,
    pub bad_dest: bool,
    pub tx: Option<TxAttr>,
    pub rx: Option<RxAttr>,
    pub ep: Option<EpAttr>,
    pub domain: Option<DomainAttr>,
    pub fabric: Option<FabricAttr>,
    /// `handle` (a passive endpoint, for FI_EP_MSG).
    pub handle: usize,
}
