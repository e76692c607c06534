//! A TCP connect that does not wait: std's `TcpStream::connect` and
//! `connect_timeout` block, and a send to a peer still connecting must not.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::FromRawFd;

/// Start connecting a non-blocking socket to `to`: the stream and whether
/// the connection is already up (`false`: in progress, EINPROGRESS; the
/// kernel finishes it, `TcpStream::take_error` and `peer_addr` tell how).
/// A refusal the kernel knows at once is the error.
pub fn connect_start(to: &SocketAddr) -> io::Result<(TcpStream, bool)> {
    connect_from(to, None)
}

/// `connect_start` from the address `from` (its port 0: any), so that the
/// peer sees the connection come from that IP (a multi-homed host's
/// kernel would otherwise pick the route's); where `from` cannot be bound
/// (not one of this host's addresses, or unspecified), from wherever the
/// kernel picks.
pub fn connect_from(to: &SocketAddr, from: Option<std::net::IpAddr>) -> io::Result<(TcpStream, bool)> {
    let family = if to.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: socket(2) takes no pointers; the fd it returns is owned below.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a socket just opened and owned by nobody else; the
    // stream closes it when dropped (also on the error paths below).
    let sock = unsafe { TcpStream::from_raw_fd(fd) };
    if let Some(ip) = from.filter(|ip| !ip.is_unspecified() && ip.is_ipv4() == to.is_ipv4()) {
        let (ss, len) = sockaddr(&SocketAddr::new(ip, 0));
        // SAFETY: `ss` holds a sockaddr of `len` bytes for the stream's socket.
        let _ = unsafe {
            libc::bind(std::os::fd::AsRawFd::as_raw_fd(&sock), &ss as *const _ as *const libc::sockaddr, len as u32)
        };
    }
    let (ss, len) = sockaddr(to);
    // SAFETY: `ss` holds a sockaddr of `len` bytes for the stream's socket.
    let rc = unsafe {
        libc::connect(std::os::fd::AsRawFd::as_raw_fd(&sock), &ss as *const _ as *const libc::sockaddr, len as u32)
    };
    if rc == 0 {
        return Ok((sock, true));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINPROGRESS) | Some(libc::EINTR) => Ok((sock, false)),
        _ => Err(e),
    }
}

/// `to` as a C sockaddr and its length.
fn sockaddr(to: &SocketAddr) -> (libc::sockaddr_storage, usize) {
    // SAFETY: zeroed sockaddr_storage is a valid value of the C type.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match to {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and aligned for it.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and aligned for it.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len)
}
