//! Endpoint addresses: `FI_SOCKADDR_IN` / `FI_SOCKADDR_IN6` in C byte form,
//! and the local interfaces getinfo offers.
//!
//! An endpoint's name is the address of its TCP listener (docs/wire.md). The
//! byte layouts are Linux's `struct sockaddr_in` (16 bytes) and
//! `struct sockaddr_in6` (28 bytes); parsing them needs no unsafe code.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};

use oxmr_ffi as ffi;

/// `sizeof(struct sockaddr_in)`.
pub(crate) const SOCKADDR_IN_LEN: usize = 16;
/// `sizeof(struct sockaddr_in6)`.
pub(crate) const SOCKADDR_IN6_LEN: usize = 28;

const AF_INET: u16 = libc::AF_INET as u16;
const AF_INET6: u16 = libc::AF_INET6 as u16;

/// Parse a C socket address. `None` for another family or a short buffer.
pub fn parse(bytes: &[u8]) -> Option<SocketAddr> {
    if bytes.len() < 2 {
        return None;
    }
    let family = u16::from_ne_bytes([bytes[0], bytes[1]]);
    match family {
        AF_INET if bytes.len() >= SOCKADDR_IN_LEN => {
            let port = u16::from_be_bytes([bytes[2], bytes[3]]);
            let ip = Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7]);
            Some(SocketAddr::V4(SocketAddrV4::new(ip, port)))
        }
        AF_INET6 if bytes.len() >= SOCKADDR_IN6_LEN => {
            let port = u16::from_be_bytes([bytes[2], bytes[3]]);
            let flow = u32::from_be_bytes(bytes[4..8].try_into().ok()?);
            let ip: [u8; 16] = bytes[8..24].try_into().ok()?;
            let scope = u32::from_ne_bytes(bytes[24..28].try_into().ok()?);
            Some(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, flow, scope)))
        }
        _ => None,
    }
}

/// Encode as a C socket address.
pub fn encode(addr: &SocketAddr) -> Vec<u8> {
    match addr {
        SocketAddr::V4(a) => {
            let mut b = vec![0u8; SOCKADDR_IN_LEN];
            b[0..2].copy_from_slice(&AF_INET.to_ne_bytes());
            b[2..4].copy_from_slice(&a.port().to_be_bytes());
            b[4..8].copy_from_slice(&a.ip().octets());
            b
        }
        SocketAddr::V6(a) => {
            let mut b = vec![0u8; SOCKADDR_IN6_LEN];
            b[0..2].copy_from_slice(&AF_INET6.to_ne_bytes());
            b[2..4].copy_from_slice(&a.port().to_be_bytes());
            b[4..8].copy_from_slice(&a.flowinfo().to_be_bytes());
            b[8..24].copy_from_slice(&a.ip().octets());
            b[24..28].copy_from_slice(&a.scope_id().to_ne_bytes());
            b
        }
    }
}

/// The `FI_SOCKADDR_*` format of an address.
pub fn format_of(addr: &SocketAddr) -> u32 {
    match addr {
        SocketAddr::V4(_) => ffi::FI_SOCKADDR_IN,
        SocketAddr::V6(_) => ffi::FI_SOCKADDR_IN6,
    }
}

/// Whether an address of `addr`'s family may be used where `format` is asked.
pub fn fits_format(addr: &SocketAddr, format: u32) -> bool {
    match format {
        ffi::FI_FORMAT_UNSPEC | ffi::FI_SOCKADDR => true,
        f => f == format_of(addr),
    }
}

/// libfabric's textual form, as `fi_av_straddr` prints it:
/// `fi_sockaddr_in://127.0.0.1:9228`, `fi_sockaddr_in6://[::1]:9228`.
pub fn to_string(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("fi_sockaddr_in://{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("fi_sockaddr_in6://[{}]:{}", a.ip(), a.port()),
    }
}

pub use crate::sys::Iface;

/// The local interfaces getinfo may offer, non-loopback first.
///
/// IPv6 link-local addresses are left out: their names are only usable with
/// a scope id, which peers on other hosts cannot share.
pub fn local_ifaces(allowed: Option<&[String]>) -> Vec<Iface> {
    let mut list: Vec<Iface> = crate::sys::ifaddrs()
        .into_iter()
        .filter(|i| match i.ip {
            IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
            IpAddr::V4(_) => true,
        })
        .filter(|i| allowed.is_none_or(|names| names.contains(&i.name)))
        .collect();
    list.sort_by_key(|i| (i.ip.is_loopback(), i.ip.is_ipv6()));
    list
}

/// The local address the kernel would use to reach `dest` (routing lookup,
/// no packet is sent).
pub fn route_source(dest: &SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = match dest {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let sock = UdpSocket::bind(any).ok()?;
    let mut probe = *dest;
    if probe.port() == 0 {
        probe.set_port(9);
    }
    sock.connect(probe).ok()?;
    sock.local_addr().ok().map(|a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trip() {
        for a in ["127.0.0.1:9228", "[::1]:4000", "198.18.0.2:1"] {
            let a: SocketAddr = a.parse().unwrap();
            let b = encode(&a);
            assert_eq!(parse(&b), Some(a));
        }
        assert_eq!(parse(&[0u8; 16]), None, "AF_UNSPEC is not an address");
        assert_eq!(parse(&encode(&"[::1]:1".parse().unwrap())[..16]), None, "short IPv6");
    }

    #[test]
    fn straddr_forms() {
        assert_eq!(to_string(&"10.1.2.3:9228".parse().unwrap()), "fi_sockaddr_in://10.1.2.3:9228");
        assert_eq!(to_string(&"[fe80::1]:7".parse().unwrap()), "fi_sockaddr_in6://[fe80::1]:7");
    }

    #[test]
    fn subnets() {
        let i = Iface { name: "lo".into(), ip: "127.0.0.1".parse().unwrap(), prefix: 8 };
        assert_eq!(i.subnet(), "127.0.0.0/8");
        let i = Iface { name: "x".into(), ip: "2001:db8::5".parse().unwrap(), prefix: 64 };
        assert_eq!(i.subnet(), "2001:db8::/64");
    }

    #[test]
    fn loopback_is_listed_last_and_routes_to_itself() {
        let l = local_ifaces(None);
        assert!(l.iter().any(|i| i.name == "lo"), "lo must be up on any Linux host: {l:?}");
        assert!(l.last().unwrap().ip.is_loopback());
        assert_eq!(route_source(&"127.0.0.1:9".parse().unwrap()), Some("127.0.0.1".parse().unwrap()));
    }
}
