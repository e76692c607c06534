//! Thin safe wrappers over the system calls the objects need (eventfd,
//! epoll, poll, getifaddrs), and the data path's spin lock. Unsafe code for
//! syscalls lives here; every wrapper returns `std::io::Result` or plain
//! data.

mod ifaddrs;
mod spin;
mod wait;

pub use ifaddrs::ifaddrs;
pub use spin::{SpinGuard, SpinLock};
pub use wait::WaitFd;
