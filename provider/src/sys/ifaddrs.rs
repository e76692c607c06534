//! getifaddrs(3): the interfaces that are up, with their addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One address of one local network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Iface {
    /// Interface name ("lo", "eth0"): oxmr's domain name.
    pub name: String,
    /// The address.
    pub ip: IpAddr,
    /// Network prefix length.
    pub prefix: u8,
}

impl Iface {
    /// The subnet in CIDR form ("127.0.0.0/8"): oxmr's fabric name.
    pub fn subnet(&self) -> String {
        match self.ip {
            IpAddr::V4(ip) => {
                let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - self.prefix.min(32)) };
                format!("{}/{}", Ipv4Addr::from(u32::from(ip) & mask), self.prefix)
            }
            IpAddr::V6(ip) => {
                let mask = if self.prefix == 0 { 0 } else { u128::MAX << (128 - self.prefix.min(128)) };
                format!("{}/{}", Ipv6Addr::from(u128::from(ip) & mask), self.prefix)
            }
        }
    }
}

/// Every address of every interface that is up.
pub fn ifaddrs() -> Vec<Iface> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_flags & (libc::IFF_UP as u32) == 0 {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned();
        // SAFETY: ifa_addr is non-NULL and starts with sa_family.
        let family = unsafe { (*ifa.ifa_addr).sa_family } as i32;
        let (ip, prefix) = match family {
            libc::AF_INET => {
                // SAFETY: family AF_INET means the storage is a sockaddr_in;
                // the netmask, when present, has the same family.
                let (a, m) = unsafe {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    let m = (ifa.ifa_netmask as *const libc::sockaddr_in).as_ref();
                    (a.sin_addr.s_addr, m.map(|m| m.sin_addr.s_addr))
                };
                let prefix = m.map(|m| u32::from_be(m).count_ones()).unwrap_or(32) as u8;
                (IpAddr::V4(Ipv4Addr::from(u32::from_be(a))), prefix)
            }
            libc::AF_INET6 => {
                // SAFETY: family AF_INET6 means the storage is a sockaddr_in6.
                let (a, m) = unsafe {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    let m = (ifa.ifa_netmask as *const libc::sockaddr_in6).as_ref();
                    (a.sin6_addr.s6_addr, m.map(|m| m.sin6_addr.s6_addr))
                };
                let prefix = m.map(|m| m.iter().map(|b| b.count_ones()).sum::<u32>()).unwrap_or(128) as u8;
                (IpAddr::V6(Ipv6Addr::from(a)), prefix)
            }
            _ => continue,
        };
        out.push(Iface { name, ip, prefix });
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}
