//! fi_getinfo: match an application's hints against what oxmr offers.
//!
//! libfabric's core does no hint matching for an out-of-tree provider, so
//! this module does what `ofi_check_info`/`ofi_alter_info` do for built-in
//! ones: every hint oxmr cannot honour makes that answer disappear (and, if
//! nothing is left, the call fails with `-FI_ENODATA`); every hint it can
//! honour is reflected in the answer. The reason for each refusal is logged
//! at INFO level (`FI_LOG_LEVEL=info FI_LOG_PROV=oxmr`).
//!
//! Choices where libfabric leaves room:
//! - one answer per endpoint type (RDM first, then MSG) per local interface
//!   address; non-loopback interfaces first. The domain name is the
//!   interface name, the fabric name its subnet (as libfabric's tcp does).
//! - mr_mode is the set of modes the application allows that oxmr can honour
//!   (FI_MR_RAW, FI_MR_HMEM are never granted); the legacy FI_MR_BASIC and
//!   FI_MR_SCALABLE are answered in kind.
//! - default op_flags are the hints' (never more), queue sizes are the
//!   hints' when given, ordering and limits are oxmr's own.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use oxmr_ffi as ffi;

use super::addr::{self, Iface};
use super::attrs::{self, MR_BASIC_MAP, MR_MODES, PRIMARY_CAPS, SECONDARY_CAPS};
use super::{Hints, Info};
use crate::error::{Error, Result};
use crate::fail;

/// One fi_getinfo call, decoded.
#[derive(Clone, Debug, Default)]
pub struct Request<'a> {
    pub version: u32,
    pub node: Option<&'a str>,
    pub service: Option<&'a str>,
    pub flags: u64,
    pub hints: Option<&'a Hints>,
    /// Whether peers on other hosts can be reached (the TCP wire is in
    /// use: FI_OXMR_WIRE is auto or tcp): FI_REMOTE_COMM is offered and a
    /// destination elsewhere is resolved.
    pub remote: bool,
}

fn nodata(why: impl AsRef<str>) -> Error {
    tracing::info!("no oxmr info: {}", why.as_ref());
    Error::quiet(ffi::FI_ENODATA)
}

/// Where an answer's source address comes from.
enum Source {
    /// A specific local address.
    Addr(SocketAddr),
    /// Any local interface, with this port.
    AnyIface(u16),
    /// The interface that routes to the destination.
    Route,
}

/// Answer a getinfo request; `ifaces` are the local interfaces to offer.
pub fn getinfo(req: &Request<'_>, ifaces: &[Iface]) -> Result<Vec<Info>> {
    let default = Hints::default();
    let hints = req.hints.unwrap_or(&default);

    let ep_types: &[u32] = match hints.ep.as_ref().map_or(ffi::FI_EP_UNSPEC, |e| e.type_) {
        ffi::FI_EP_UNSPEC => &[ffi::FI_EP_RDM, ffi::FI_EP_MSG, ffi::FI_EP_DGRAM],
        ffi::FI_EP_RDM => &[ffi::FI_EP_RDM],
        ffi::FI_EP_MSG => &[ffi::FI_EP_MSG],
        ffi::FI_EP_DGRAM => &[ffi::FI_EP_DGRAM],
        t => return Err(nodata(format!("ep_type {t} asked; oxmr offers FI_EP_RDM, FI_EP_MSG and FI_EP_DGRAM"))),
    };
    let format = hints.addr_format;
    if !matches!(format, ffi::FI_FORMAT_UNSPEC | ffi::FI_SOCKADDR | ffi::FI_SOCKADDR_IN | ffi::FI_SOCKADDR_IN6) {
        return Err(nodata(format!("addr_format {format} asked; oxmr uses FI_SOCKADDR_IN and FI_SOCKADDR_IN6")));
    }
    if hints.bad_src || hints.bad_dest {
        return Err(nodata(
            "hints carry a src_addr/dest_addr that is not a sockaddr_in/sockaddr_in6 of the right length",
        ));
    }

    if req.flags & ffi::FI_PROV_ATTR_ONLY as u64 != 0 {
        // "All providers will return exactly one fi_info struct"
        // (fi_getinfo(3)): the first endpoint type asked (RDM when any),
        // named after the first interface offered (libfabric's name
        // filters compare the names it returns).
        let mut info = attrs::template(ep_types[0]);
        if let Some(iface) = ifaces.first() {
            info.domain.name = Some(iface.name.clone());
            info.fabric.name = Some(iface.subnet());
        }
        return Ok(vec![info]);
    }

    let numeric = req.flags & ffi::FI_NUMERICHOST as u64 != 0;
    let port = match req.service {
        None => 0,
        Some(s) => s.trim().parse::<u16>().map_err(|_| nodata(format!("service \"{s}\" is not a port number")))?,
    };
    let (source, dest) = if req.flags & ffi::FI_SOURCE as u64 != 0 {
        if req.node.is_none() && req.service.is_none() {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_getinfo with FI_SOURCE needs a node or a service to use as the source"
            ));
        }
        let src = match req.node {
            Some(n) => Source::Addr(resolve(n, port, numeric, format)?),
            None => Source::AnyIface(port),
        };
        (src, hints.dest)
    } else if req.node.is_some() || req.service.is_some() {
        let dest = match req.node {
            Some(n) => resolve(n, port, numeric, format)?,
            None if format == ffi::FI_SOCKADDR_IN6 => (Ipv6Addr::LOCALHOST, port).into(),
            None => (Ipv4Addr::LOCALHOST, port).into(),
        };
        let src = hints.src.map_or(Source::Route, source_of);
        (src, Some(dest))
    } else {
        let src = match (hints.src, hints.dest) {
            (Some(s), _) => source_of(s),
            (None, Some(_)) => Source::Route,
            (None, None) => Source::AnyIface(0),
        };
        (src, hints.dest)
    };

    // Same host only without the TCP wire (no FI_REMOTE_COMM): a
    // destination elsewhere is refused here rather than on every send.
    if let Some(d) = dest.filter(|_| !req.remote) {
        if !d.ip().is_loopback() && !d.ip().is_unspecified() && addr::route_source(&d) != Some(d.ip()) {
            return Err(nodata(format!(
                "destination {d} is not on this host, and FI_OXMR_WIRE=shm carries data between processes of one host only; unset FI_OXMR_WIRE (auto: TCP to other hosts) or set it to tcp"
            )));
        }
    }

    let candidates: Vec<(&Iface, SocketAddr)> = match source {
        Source::Addr(a) => {
            // (Any 127/8 address is this host's loopback, as Debian's
            // /etc/hosts names the host 127.0.1.1: the lo interface.)
            let iface = ifaces
                .iter()
                .find(|i| i.ip == a.ip())
                .or_else(|| {
                    ifaces.iter().find(|i| a.ip().is_loopback() && i.ip.is_loopback() && i.ip.is_ipv4() == a.is_ipv4())
                })
                .ok_or_else(|| nodata(format!("source {} is not an address of an offered local interface", a.ip())))?;
            vec![(iface, a)]
        }
        Source::AnyIface(port) => ifaces.iter().map(|i| (i, SocketAddr::new(i.ip, port))).collect(),
        Source::Route => {
            let d = dest.expect("Route is only chosen with a destination");
            let ip = addr::route_source(&d).ok_or_else(|| nodata(format!("no route from this host to {d}")))?;
            let iface = ifaces
                .iter()
                .find(|i| i.ip == ip)
                .ok_or_else(|| nodata(format!("{d} is reached through {ip}, which is not offered")))?;
            vec![(iface, SocketAddr::new(ip, 0))]
        }
    };

    let mut out = Vec::new();
    let mut first_refusal = None;
    for &ep_type in ep_types {
        for (iface, src) in &candidates {
            if !addr::fits_format(src, format) {
                continue;
            }
            if let Some(d) = dest {
                if d.is_ipv4() != src.is_ipv4() {
                    continue;
                }
            }
            let mut info = attrs::template(ep_type);
            if !req.remote {
                info.caps &= !(ffi::FI_REMOTE_COMM as u64);
                info.domain.caps &= !(ffi::FI_REMOTE_COMM as u64);
            }
            info.addr_format = addr::format_of(src);
            info.src = Some(*src);
            info.dest = dest;
            info.domain.name = Some(iface.name.clone());
            info.fabric.name = Some(iface.subnet());
            match fit(info, hints, req.version) {
                Ok(i) => out.push(i),
                Err(why) => {
                    first_refusal.get_or_insert(why);
                }
            }
        }
    }
    if out.is_empty() {
        return Err(nodata(first_refusal.unwrap_or_else(|| "no local interface fits the address hints".into())));
    }
    Ok(out)
}

fn source_of(a: SocketAddr) -> Source {
    if a.ip().is_unspecified() {
        Source::AnyIface(a.port())
    } else {
        Source::Addr(a)
    }
}

fn resolve(node: &str, port: u16, numeric: bool, format: u32) -> Result<SocketAddr> {
    if let Ok(ip) = node.parse::<IpAddr>() {
        let a = SocketAddr::new(ip, port);
        if !addr::fits_format(&a, format) {
            return Err(nodata(format!("{node} does not fit the asked addr_format {format}")));
        }
        return Ok(a);
    }
    if numeric {
        return Err(nodata(format!("FI_NUMERICHOST given but \"{node}\" is not a numeric address")));
    }
    let all: Vec<SocketAddr> = (node, port)
        .to_socket_addrs()
        .map_err(|e| nodata(format!("node \"{node}\" does not resolve: {e}")))?
        .filter(|a| addr::fits_format(a, format))
        .collect();
    all.iter()
        .find(|a| a.is_ipv4())
        .or(all.first())
        .copied()
        .ok_or_else(|| nodata(format!("node \"{node}\" has no address of the asked format")))
}

fn exceeds(asked: usize, ours: usize) -> bool {
    asked > ours
}

/// The mr_mode oxmr answers for the mode bits an application allows.
pub fn mr_mode_for(allowed: Option<i32>, version: u32) -> std::result::Result<i32, String> {
    let m = allowed.unwrap_or(ffi::legacy::MR_UNSPEC);
    let basic = m & ffi::legacy::MR_BASIC != 0;
    let scalable = m & ffi::legacy::MR_SCALABLE != 0;
    if basic && scalable {
        return Err("mr_mode asks both FI_MR_BASIC and FI_MR_SCALABLE".into());
    }
    if version < ffi::fi_version_of(1, 5) && m == ffi::legacy::MR_UNSPEC {
        return Ok(ffi::legacy::MR_BASIC);
    }
    let extra = m & MR_MODES & !MR_BASIC_MAP;
    if basic {
        return Ok(ffi::legacy::MR_BASIC | extra);
    }
    if scalable {
        return Ok(ffi::legacy::MR_SCALABLE | extra);
    }
    Ok(m & MR_MODES)
}

/// The effective mode bits of an answered mr_mode (legacy names expanded).
pub fn effective_mr_mode(mr_mode: i32) -> i32 {
    if mr_mode & ffi::legacy::MR_BASIC != 0 {
        (mr_mode & !(ffi::legacy::MR_BASIC)) | MR_BASIC_MAP
    } else {
        mr_mode & !(ffi::legacy::MR_SCALABLE)
    }
}

macro_rules! refuse_if {
    ($cond:expr, $($arg:tt)+) => {
        if $cond {
            return Err(format!($($arg)+));
        }
    };
}

/// Apply hints to one offered info: the adjusted answer, or why not.
pub fn fit(mut info: Info, h: &Hints, version: u32) -> std::result::Result<Info, String> {
    let offered = info.caps;
    refuse_if!(h.caps & !offered != 0, "caps {:#x} are not offered for this endpoint type", h.caps & !offered);
    if h.caps != 0 {
        info.caps = (h.caps & PRIMARY_CAPS) | (offered & SECONDARY_CAPS);
    }
    // A passive endpoint named as the hints' handle is the one whose
    // address an active endpoint of this info takes (fi_endpoint).
    if info.ep.type_ == ffi::FI_EP_MSG {
        info.handle = h.handle;
    }

    if let Some(f) = &h.fabric {
        if let Some(n) = &f.name {
            refuse_if!(Some(n) != info.fabric.name.as_ref(), "fabric name \"{n}\" is not {:?}", info.fabric.name);
        }
    }

    if let Some(e) = &h.ep {
        refuse_if!(
            e.protocol != ffi::FI_PROTO_UNSPEC && e.protocol != info.ep.protocol,
            "protocol {} asked; oxmr speaks its own protocol (FI_PROTO_UNSPEC)",
            e.protocol
        );
        refuse_if!(e.protocol_version > info.ep.protocol_version, "protocol_version {} too new", e.protocol_version);
        refuse_if!(exceeds(e.max_msg_size, info.ep.max_msg_size), "max_msg_size {} too large", e.max_msg_size);
        refuse_if!(
            exceeds(e.max_order_raw_size, info.ep.max_order_raw_size)
                || exceeds(e.max_order_war_size, info.ep.max_order_war_size)
                || exceeds(e.max_order_waw_size, info.ep.max_order_waw_size),
            "RMA ordering sizes asked beyond oxmr's (it orders send-after-send only)"
        );
        let shared_tx = e.tx_ctx_cnt == ffi::FI_SHARED_CONTEXT as usize;
        let shared_rx = e.rx_ctx_cnt == ffi::FI_SHARED_CONTEXT as usize;
        refuse_if!(
            (e.tx_ctx_cnt > info.domain.max_ep_tx_ctx && !shared_tx)
                || (e.rx_ctx_cnt > info.domain.max_ep_rx_ctx && !shared_rx),
            "tx_ctx_cnt {} rx_ctx_cnt {} asked; oxmr's scalable endpoints (FI_EP_RDM) have at most {} of each, other endpoints one",
            e.tx_ctx_cnt as isize,
            e.rx_ctx_cnt as isize,
            info.domain.max_ep_tx_ctx
        );
        if shared_tx || e.tx_ctx_cnt > 1 {
            info.ep.tx_ctx_cnt = e.tx_ctx_cnt;
        }
        if shared_rx || e.rx_ctx_cnt > 1 {
            info.ep.rx_ctx_cnt = e.rx_ctx_cnt;
        }
        refuse_if!(key_unfit(e.auth_key.as_deref(), e.auth_key_size), "ep_attr {}", key_rule(e.auth_key_size));
        if e.auth_key.is_some() {
            info.ep.auth_key_size = e.auth_key_size;
            info.ep.auth_key = e.auth_key.clone();
        }
        if e.mem_tag_format != 0 && info.ep.type_ == ffi::FI_EP_RDM {
            info.ep.mem_tag_format = e.mem_tag_format;
        }
    }

    let tx_default = info.caps & attrs::TX_CAPS;
    info.tx.caps = tx_default;
    if let Some(t) = &h.tx {
        refuse_if!(t.caps & !offered != 0, "tx caps {:#x} not offered", t.caps & !offered);
        refuse_if!(
            t.op_flags & !attrs::TX_OP_FLAGS != 0,
            "tx op_flags {:#x} not supported",
            t.op_flags & !attrs::TX_OP_FLAGS
        );
        refuse_if!(
            t.msg_order & !info.tx.msg_order != 0,
            "tx msg_order {:#x} not guaranteed (oxmr: FI_ORDER_SAS)",
            t.msg_order
        );
        refuse_if!(t.comp_order & !info.tx.comp_order != 0, "tx comp_order {:#x} not guaranteed", t.comp_order);
        refuse_if!(
            exceeds(t.inject_size, info.tx.inject_size),
            "inject_size {} above {}",
            t.inject_size,
            info.tx.inject_size
        );
        refuse_if!(exceeds(t.size, info.tx.size), "tx size {} above {}", t.size, info.tx.size);
        refuse_if!(exceeds(t.iov_limit, info.tx.iov_limit), "tx iov_limit {} above {}", t.iov_limit, info.tx.iov_limit);
        refuse_if!(
            exceeds(t.rma_iov_limit, info.tx.rma_iov_limit),
            "rma_iov_limit {} above {}",
            t.rma_iov_limit,
            info.tx.rma_iov_limit
        );
        if t.caps != 0 {
            // (A subset of the info's caps, as fi_getinfo(3) requires,
            // whatever the hints' tx caps ask beyond them.)
            info.tx.caps = (t.caps & PRIMARY_CAPS & tx_default) | (tx_default & SECONDARY_CAPS);
        }
        info.tx.op_flags = t.op_flags;
        if t.size != 0 {
            info.tx.size = t.size;
        }
    }

    let rx_default = info.caps & attrs::RX_CAPS;
    info.rx.caps = rx_default;
    if let Some(r) = &h.rx {
        refuse_if!(r.caps & !offered != 0, "rx caps {:#x} not offered", r.caps & !offered);
        refuse_if!(
            r.op_flags & !attrs::RX_OP_FLAGS != 0,
            "rx op_flags {:#x} not supported",
            r.op_flags & !attrs::RX_OP_FLAGS
        );
        refuse_if!(
            r.msg_order & !info.rx.msg_order != 0,
            "rx msg_order {:#x} not guaranteed (oxmr: FI_ORDER_SAS)",
            r.msg_order
        );
        refuse_if!(r.comp_order & !info.rx.comp_order != 0, "rx comp_order {:#x} not guaranteed", r.comp_order);
        refuse_if!(exceeds(r.size, info.rx.size), "rx size {} above {}", r.size, info.rx.size);
        refuse_if!(exceeds(r.iov_limit, info.rx.iov_limit), "rx iov_limit {} above {}", r.iov_limit, info.rx.iov_limit);
        if r.caps != 0 {
            // (A subset of the info's caps: see tx above.)
            info.rx.caps = (r.caps & PRIMARY_CAPS & rx_default) | (rx_default & SECONDARY_CAPS);
        }
        info.rx.op_flags = r.op_flags;
        if r.size != 0 {
            info.rx.size = r.size;
        }
    }

    let d = h.domain.as_ref();
    info.domain.mr_mode = mr_mode_for(d.map(|d| d.mr_mode), version)?;
    if let Some(d) = d {
        let o = &info.domain;
        if let Some(n) = &d.name {
            refuse_if!(Some(n) != o.name.as_ref(), "domain name \"{n}\" is not {:?}", o.name);
        }
        refuse_if!(d.threading > ffi::FI_THREAD_ENDPOINT, "unknown threading {}", d.threading);
        for (what, p) in [("control", d.control_progress), ("data", d.data_progress)] {
            refuse_if!(
                p == ffi::FI_PROGRESS_AUTO,
                "FI_PROGRESS_AUTO {what} progress asked; oxmr progresses when the application reads CQs and counters (FI_PROGRESS_MANUAL)"
            );
            refuse_if!(p > ffi::FI_PROGRESS_MANUAL + 1, "unknown {what} progress {p}");
        }
        refuse_if!(d.resource_mgmt > ffi::FI_RM_ENABLED, "unknown resource_mgmt {}", d.resource_mgmt);
        refuse_if!(
            !matches!(d.av_type, ffi::FI_AV_UNSPEC | ffi::FI_AV_MAP | ffi::FI_AV_TABLE),
            "av_type {} not supported",
            d.av_type
        );
        refuse_if!(exceeds(d.mr_key_size, o.mr_key_size), "mr_key_size {} above 8", d.mr_key_size);
        refuse_if!(exceeds(d.cq_data_size, o.cq_data_size), "cq_data_size {} above 8", d.cq_data_size);
        for (what, asked, ours) in [
            ("cq_cnt", d.cq_cnt, o.cq_cnt),
            ("ep_cnt", d.ep_cnt, o.ep_cnt),
            ("tx_ctx_cnt", d.tx_ctx_cnt, o.tx_ctx_cnt),
            ("rx_ctx_cnt", d.rx_ctx_cnt, o.rx_ctx_cnt),
            ("max_ep_tx_ctx", d.max_ep_tx_ctx, o.max_ep_tx_ctx),
            ("max_ep_rx_ctx", d.max_ep_rx_ctx, o.max_ep_rx_ctx),
            ("max_ep_stx_ctx", d.max_ep_stx_ctx, o.max_ep_stx_ctx),
            ("max_ep_srx_ctx", d.max_ep_srx_ctx, o.max_ep_srx_ctx),
            ("cntr_cnt", d.cntr_cnt, o.cntr_cnt),
            ("mr_iov_limit", d.mr_iov_limit, o.mr_iov_limit),
            ("mr_cnt", d.mr_cnt, o.mr_cnt),
            ("max_err_data", d.max_err_data, o.max_err_data),
        ] {
            refuse_if!(exceeds(asked, ours), "domain {what} {asked} above oxmr's {ours}");
        }
        refuse_if!(
            d.caps & !info.domain.caps & !offered != 0,
            "domain caps {:#x} not offered",
            d.caps & !info.domain.caps & !offered
        );
        refuse_if!(key_unfit(d.auth_key.as_deref(), d.auth_key_size), "domain_attr {}", key_rule(d.auth_key_size));
        if d.auth_key.is_some() {
            info.domain.auth_key_size = d.auth_key_size;
            info.domain.auth_key = d.auth_key.clone();
        }
        if d.threading != ffi::FI_THREAD_UNSPEC {
            info.domain.threading = d.threading;
        }
        if d.control_progress == ffi::FI_PROGRESS_MANUAL + 1 {
            info.domain.control_progress = d.control_progress;
        }
        if d.resource_mgmt != ffi::FI_RM_UNSPEC {
            info.domain.resource_mgmt = d.resource_mgmt;
        }
        info.domain.av_type = d.av_type;
        if d.caps != 0 {
            info.domain.caps = d.caps & (info.domain.caps | offered);
        }
    }
    Ok(info)
}

/// Whether an `auth_key` hint of `size` bytes is one oxmr cannot take as a
/// job key: not present, or of a length `JobKey::new` refuses.
fn key_unfit(key: Option<&[u8]>, size: usize) -> bool {
    size > 0 && !(key.is_some() && (crate::auth::KEY_MIN..=crate::auth::KEY_MAX).contains(&size))
}

/// What the refusal of an unfit `auth_key` of `size` bytes says.
fn key_rule(size: usize) -> String {
    format!(
        "auth_key of {size} bytes: a job key has {} to {} bytes and auth_key must point to them (docs/security.md)",
        crate::auth::KEY_MIN,
        crate::auth::KEY_MAX
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::info::{DomainAttr, EpAttr, TxAttr};

    const V: u32 = ffi::FI_HEADER_VERSION;

    fn lo() -> Vec<Iface> {
        vec![Iface { name: "lo".into(), ip: "127.0.0.1".parse().unwrap(), prefix: 8 }]
    }

    fn ask(node: Option<&str>, service: Option<&str>, flags: u64, hints: Option<&Hints>) -> Result<Vec<Info>> {
        getinfo(&Request { version: V, node, service, flags, hints, remote: true }, &lo())
    }

    #[test]
    fn no_hints_offers_rdm_then_msg_then_dgram() {
        let l = ask(None, None, 0, None).unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].ep.type_, ffi::FI_EP_RDM);
        assert_eq!(l[1].ep.type_, ffi::FI_EP_MSG);
        assert_eq!(l[2].ep.type_, ffi::FI_EP_DGRAM);
        assert_eq!(l[2].ep.max_msg_size, crate::config::EAGER_MAX, "a datagram is one frame");
        let not_dgram = (ffi::FI_RMA | ffi::FI_ATOMIC | ffi::FI_TAGGED) as u64;
        assert_eq!(l[2].caps & not_dgram, 0, "a datagram endpoint has messages only");
        assert_ne!(l[2].caps & ffi::FI_MSG as u64, 0);
        assert_eq!(l[0].domain.name.as_deref(), Some("lo"));
        assert_eq!(l[0].fabric.name.as_deref(), Some("127.0.0.0/8"));
        assert_eq!(l[0].src, Some("127.0.0.1:0".parse().unwrap()));
    }

    #[test]
    fn any_loopback_address_is_a_source() {
        let l = ask(Some("127.0.1.1"), Some("9228"), ffi::FI_SOURCE as u64, None).unwrap();
        assert_eq!(l[0].src, Some("127.0.1.1:9228".parse().unwrap()));
        assert_eq!(l[0].domain.name.as_deref(), Some("lo"));
    }

    #[test]
    fn prov_attr_only_is_one_info() {
        // fi_getinfo(3): "All providers will return exactly one fi_info".
        let l = ask(None, None, ffi::FI_PROV_ATTR_ONLY as u64, None).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].ep.type_, ffi::FI_EP_RDM);
        // Named, as every other answer (libfabric's name filters read them).
        assert_eq!(l[0].domain.name.as_deref(), Some("lo"));
        assert_eq!(l[0].fabric.name.as_deref(), Some("127.0.0.0/8"));
    }

    #[test]
    fn caps_outside_offer_are_refused() {
        let h = Hints { caps: ffi::FI_COLLECTIVE as u64, ..Default::default() };
        assert_eq!(ask(None, None, 0, Some(&h)).unwrap_err().code(), ffi::FI_ENODATA);
        let h = Hints { caps: (ffi::FI_ATOMIC | ffi::FI_RMA) as u64, ..Default::default() };
        assert!(ask(None, None, 0, Some(&h)).is_ok(), "atomics are offered");
        let h = Hints { caps: ffi::FI_TAGGED as u64, ..Default::default() };
        let l = ask(None, None, 0, Some(&h)).unwrap();
        assert!(l.iter().any(|i| i.ep.type_ == ffi::FI_EP_MSG), "MSG has FI_TAGGED");
        assert_eq!(l[0].caps & PRIMARY_CAPS, ffi::FI_TAGGED as u64);
        let h = Hints { caps: ffi::FI_DIRECTED_RECV as u64, ..Default::default() };
        let l = ask(None, None, 0, Some(&h)).unwrap();
        assert!(l.iter().all(|i| i.ep.type_ != ffi::FI_EP_MSG), "MSG has one source: no FI_DIRECTED_RECV");
        assert_ne!(l[0].caps & ffi::FI_SOURCE as u64, 0, "secondary caps are added");
    }

    #[test]
    fn shared_avs_are_offered_where_an_endpoint_has_an_av() {
        let sav = ffi::FI_SHARED_AV as u64;
        let l = ask(None, None, 0, None).unwrap();
        for i in &l {
            let want = if i.ep.type_ == ffi::FI_EP_MSG { 0 } else { sav };
            assert_eq!((i.caps & sav, i.domain.caps & sav), (want, want), "ep type {}", i.ep.type_);
        }
        // fi_rdm_shared_av's hints.
        let h = Hints { caps: ffi::FI_MSG as u64 | sav, ..Default::default() };
        let l = ask(None, None, 0, Some(&h)).unwrap();
        assert!(l.iter().all(|i| i.ep.type_ != ffi::FI_EP_MSG && i.caps & sav == sav));
        let d = Hints { domain: Some(DomainAttr { caps: sav, ..Default::default() }), ..Default::default() };
        assert!(ask(None, None, 0, Some(&d)).unwrap().iter().all(|i| i.domain.caps & sav == sav));
    }

    #[test]
    fn remote_comm_and_other_hosts_only_with_the_tcp_wire() {
        let h = Hints { caps: ffi::FI_TAGGED as u64 | ffi::FI_REMOTE_COMM as u64, ..Default::default() };
        let l = ask(None, None, 0, Some(&h)).unwrap();
        let both = ffi::FI_LOCAL_COMM as u64 | ffi::FI_REMOTE_COMM as u64;
        assert!(l.iter().all(|i| i.caps & both == both), "RDM and MSG offer both");
        assert!(l.iter().all(|i| i.domain.caps & both == both), "so does their domain");
        let msg = Hints { ep: Some(EpAttr { type_: ffi::FI_EP_MSG, ..Default::default() }), ..h.clone() };
        let l = ask(None, None, 0, Some(&msg)).unwrap();
        assert!(l.iter().all(|i| i.ep.type_ == ffi::FI_EP_MSG && i.caps & both == both), "MSG connects across hosts");
        // A destination on another host (TEST-NET-2), from an explicit
        // source (no routing lookup): resolved and handed back.
        let from = Hints { src: Some("127.0.0.1:0".parse().unwrap()), ..Default::default() };
        let l = ask(Some("198.51.100.1"), Some("4000"), 0, Some(&from)).unwrap();
        assert_eq!(l[0].dest, Some("198.51.100.1:4000".parse().unwrap()));
        // Without the TCP wire (FI_OXMR_WIRE=shm): neither.
        let shm = |node, hints| {
            getinfo(&Request { version: V, node, service: Some("4000"), flags: 0, hints, remote: false }, &lo())
        };
        assert_eq!(shm(None, Some(&h)).unwrap_err().code(), ffi::FI_ENODATA);
        assert_eq!(shm(Some("198.51.100.1"), Some(&from)).unwrap_err().code(), ffi::FI_ENODATA);
        let l = shm(Some("127.0.0.1"), None).unwrap();
        assert!(l
            .iter()
            .all(|i| i.caps & both == ffi::FI_LOCAL_COMM as u64 && i.domain.caps & both == ffi::FI_LOCAL_COMM as u64));
    }

    #[test]
    fn source_resolution() {
        let l = ask(Some("127.0.0.1"), Some("9228"), ffi::FI_SOURCE as u64, None).unwrap();
        assert_eq!(l[0].src, Some("127.0.0.1:9228".parse().unwrap()));
        assert_eq!(l[0].dest, None);
        assert_eq!(ask(None, None, ffi::FI_SOURCE as u64, None).unwrap_err().code(), ffi::FI_EINVAL);
        let l = ask(Some("127.0.0.1"), Some("9228"), 0, None).unwrap();
        assert_eq!(l[0].dest, Some("127.0.0.1:9228".parse().unwrap()));
        assert_eq!(l[0].src.unwrap().ip(), "127.0.0.1".parse::<IpAddr>().unwrap());
        let e = ask(Some("g00n13s.invalid"), Some("9228"), 0, None).unwrap_err();
        assert_eq!(e.code(), ffi::FI_ENODATA);
        let e = ask(Some("localhost"), None, ffi::FI_NUMERICHOST as u64, None).unwrap_err();
        assert_eq!(e.code(), ffi::FI_ENODATA);
        let e = ask(Some("10.255.255.254"), Some("1"), ffi::FI_SOURCE as u64, None).unwrap_err();
        assert_eq!(e.code(), ffi::FI_ENODATA, "not a local address");
    }

    #[test]
    fn formats() {
        let h = Hints { addr_format: ffi::FI_SOCKADDR_IB, ..Default::default() };
        assert_eq!(ask(None, None, 0, Some(&h)).unwrap_err().code(), ffi::FI_ENODATA);
        let h = Hints { addr_format: ffi::FI_SOCKADDR_IN6, ..Default::default() };
        assert!(ask(None, None, 0, Some(&h)).is_err(), "lo() has no IPv6 address");
        let h = Hints { addr_format: ffi::FI_SOCKADDR, ..Default::default() };
        assert_eq!(ask(None, None, 0, Some(&h)).unwrap()[0].addr_format, ffi::FI_SOCKADDR_IN);
    }

    #[test]
    fn mr_modes() {
        let all = MR_MODES | ffi::FI_MR_RAW as i32 | ffi::FI_MR_HMEM as i32;
        assert_eq!(mr_mode_for(Some(all), V).unwrap(), MR_MODES);
        assert_eq!(mr_mode_for(Some(0), V).unwrap(), 0);
        assert_eq!(mr_mode_for(Some(ffi::legacy::MR_BASIC), V).unwrap(), ffi::legacy::MR_BASIC);
        assert_eq!(mr_mode_for(Some(ffi::legacy::MR_SCALABLE), V).unwrap(), ffi::legacy::MR_SCALABLE);
        assert!(mr_mode_for(Some(3), V).is_err());
        assert_eq!(mr_mode_for(None, ffi::fi_version_of(1, 4)).unwrap(), ffi::legacy::MR_BASIC);
        assert_eq!(effective_mr_mode(ffi::legacy::MR_BASIC), MR_BASIC_MAP);
    }

    #[test]
    fn limits_and_progress() {
        let mut h = Hints { tx: Some(TxAttr { size: 4096, ..Default::default() }), ..Default::default() };
        assert!(ask(None, None, 0, Some(&h)).is_err());
        h.tx = Some(TxAttr { size: 64, op_flags: ffi::FI_DELIVERY_COMPLETE as u64, ..Default::default() });
        let l = ask(None, None, 0, Some(&h)).unwrap();
        assert_eq!(l[0].tx.size, 64);
        assert_eq!(l[0].tx.op_flags, ffi::FI_DELIVERY_COMPLETE as u64);
        h.domain = Some(DomainAttr { data_progress: ffi::FI_PROGRESS_AUTO, ..Default::default() });
        assert!(ask(None, None, 0, Some(&h)).is_err());
        h.domain = Some(DomainAttr { threading: ffi::FI_THREAD_DOMAIN, ..Default::default() });
        assert_eq!(ask(None, None, 0, Some(&h)).unwrap()[0].domain.threading, ffi::FI_THREAD_DOMAIN);
        h.ep = Some(EpAttr { type_: ffi::FI_EP_SOCK_DGRAM, ..Default::default() });
        assert!(ask(None, None, 0, Some(&h)).is_err());
    }
}
