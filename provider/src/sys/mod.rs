//! Thin safe wrappers over the system calls the objects need (eventfd,
//! epoll, poll, getifaddrs). Unsafe code for syscalls lives here; every
//! wrapper returns `std::io::Result` or plain data.

mod ifaddrs;
mod wait;

pub use ifaddrs::ifaddrs;
pub use wait::WaitFd;
