//! Thin safe wrappers over the system calls the objects need (eventfd,
//! epoll, poll, getifaddrs, getrandom, fork detection, a TCP connect that
//! does not wait), the data
//! path's spin lock, and `lock_ok`/`read_ok`/`write_ok` for `std::sync`
//! locks that keep going past poisoning (`lock.rs`). Unsafe code for
//! syscalls lives here; every wrapper returns `std::io::Result` or plain
//! data.

mod files;
mod ifaddrs;
mod lock;
mod net;
mod process;
mod spin;
mod wait;

pub use files::{open_private, read_private_file};
pub use ifaddrs::{ifaddrs, Iface};
pub use lock::{LockExt, RwLockExt};
pub use net::{connect_from, connect_start};
pub use process::{nofile_limit, random_bytes, random_u32, random_u64, token as process_token};
pub use spin::{SpinGuard, SpinLock};
pub use wait::{Epoll, WaitFd, WakeFd};
