//! dma-buf registration: a buffer another driver exported as an fd.
//!
//! - An fd is taken as a dma-buf only when the kernel says it is one:
//!   `fstatfs` gives the dma-buf filesystem's magic (`DMA_BUF_MAGIC`,
//!   0x444d4142). Anything else (a memfd, a socket, a pipe, a regular file,
//!   a closed fd) is refused with a log line saying what the fd is.
//! - `/proc/self/fdinfo/<fd>` gives the buffer's `size`, `exp_name` (the
//!   exporter) and `ino` (unique per buffer). The registration is keyed by
//!   that inode, and holds its own reference (a duplicate fd) and its own
//!   mapping, so the caller may close or renumber its fd at once.
//! - oxmr reaches the memory through a CPU mapping of the buffer
//!   (`mmap(MAP_SHARED)` of the fd), where the exporter implements mmap
//!   (udmabuf, dma-heaps and DRM PRIME do; CUDA only with recent drivers);
//!   an exporter that does not gets an error naming it and what to try.
//!   Copies through the mapping follow the device rules of `phys` (aligned
//!   words, a store fence: the exporter chose the mapping's caching). Cache
//!   maintenance for a device to see CPU writes (DMA_BUF_IOCTL_SYNC) stays
//!   the application's part, as for its own CPU accesses.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use oxmr_ffi as ffi;

use super::device::Device;
use crate::error::Result;
use crate::fail;

/// `DMA_BUF_MAGIC` (include/uapi/linux/magic.h).
pub const DMA_BUF_MAGIC: i64 = 0x444d_4142;

/// What a dma-buf registration asks for (`struct fi_mr_dmabuf`, or the
/// extension's `struct oxmr_mr_dmabuf` with 1.17 headers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub fd: i32,
    pub offset: u64,
    pub len: u64,
    /// Under FI_MR_VIRT_ADDR, peers address byte 0 of the buffer as this.
    pub base_addr: u64,
}

/// A dma-buf the registration holds a reference to.
pub struct DmaBuf {
    fd: OwnedFd,
    pub ino: u64,
    pub size: u64,
    pub exporter: String,
}

/// What an fd that is not a dma-buf is, for the log line.
fn describe_fd(fd: i32) -> String {
    // SAFETY: an all-zero stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one stat; a bad fd is EBADF.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return format!("not an open file descriptor ({})", io::Error::last_os_error());
    }
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "?".into());
    match st.st_mode & libc::S_IFMT {
        libc::S_IFSOCK => format!("a socket ({link})"),
        libc::S_IFIFO => format!("a pipe ({link})"),
        libc::S_IFDIR => format!("a directory ({link})"),
        libc::S_IFCHR => format!("a character device ({link})"),
        libc::S_IFREG if link.starts_with("/memfd:") => format!("a memfd ({link})"),
        libc::S_IFREG => format!("a regular file ({link})"),
        _ => link,
    }
}

/// The fdinfo fields of a dma-buf: (size, exporter, inode).
fn fdinfo(fd: i32) -> (Option<u64>, Option<String>, Option<u64>) {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap_or_default();
    let field = |name: &str| {
        text.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')).map(|v| v.trim().to_owned()))
    };
    (field("size").and_then(|v| v.parse().ok()), field("exp_name"), field("ino").and_then(|v| v.parse().ok()))
}

/// Take `fd` as a dma-buf: refused unless the kernel says it is one.
pub fn open(fd: i32) -> Result<DmaBuf> {
    // SAFETY: an all-zero statfs is a valid out-parameter.
    let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes one statfs; a bad fd is EBADF.
    if unsafe { libc::fstatfs(fd, &mut sf) } != 0 {
        return Err(fail!(
            ffi::FI_EBADF,
            "fi_mr_regattr(dma-buf): fd {fd} is {}; pass the fd the exporter gave you, open until the call returns",
            describe_fd(fd)
        ));
    }
    if sf.f_type as i64 != DMA_BUF_MAGIC {
        return Err(fail!(
            ffi::FI_EINVAL,
            "fi_mr_regattr(dma-buf): fd {fd} is {}, not a dma-buf (its filesystem magic is {:#x}, a dma-buf's {DMA_BUF_MAGIC:#x}); register ordinary memory by address instead",
            describe_fd(fd),
            sf.f_type
        ));
    }
    take(fd)
}

/// Take a reference to `fd` and read what fdinfo says of it (and fstat,
/// for what an older kernel's fdinfo lacks).
fn take(fd: i32) -> Result<DmaBuf> {
    // SAFETY: F_DUPFD_CLOEXEC makes a new fd for the same open file.
    let own = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if own < 0 {
        return Err(fail!(
            ffi::FI_EMFILE,
            "fi_mr_regattr(dma-buf): cannot take a reference to fd {fd}: {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: `own` is a new fd nobody else owns.
    let fd_owned = unsafe { OwnedFd::from_raw_fd(own) };
    // SAFETY: an all-zero stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one stat of our own fd.
    unsafe { libc::fstat(own, &mut st) };
    let (size, exporter, ino) = fdinfo(own);
    Ok(DmaBuf {
        fd: fd_owned,
        ino: ino.unwrap_or(st.st_ino),
        size: size.unwrap_or(st.st_size as u64),
        exporter: exporter.unwrap_or_else(|| "(unnamed)".into()),
    })
}

/// A unit test's stand-in: a memfd taken as if it were a dma-buf (no
/// magic check; the memfd's size and inode stand in for fdinfo's).
#[cfg(test)]
pub(crate) fn stand_in(fd: i32) -> Result<DmaBuf> {
    let mut b = take(fd)?;
    b.exporter = "memfd stand-in".into();
    Ok(b)
}

/// The registration's mapping of the buffer.
pub struct Mapped {
    buf: DmaBuf,
    base: usize,
    map_len: usize,
    /// The registered bytes: `offset` into the buffer, `len` long.
    offset: u64,
    len: usize,
}

impl Mapped {
    /// (address, length) of the registered bytes in this process.
    pub fn data(&self) -> (usize, usize) {
        (self.base + (self.offset % 4096) as usize, self.len)
    }

    pub fn device(&self) -> Device {
        Device::DmaBuf {
            ino: self.buf.ino,
            size: self.buf.size,
            offset: self.offset,
            exporter: self.buf.exporter.clone(),
        }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: our own mapping, made by `map`, used by nobody once the
        // registration that owns it is dropped.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) };
    }
}

/// Map `len` bytes at `offset` of the buffer, writable when `write`.
pub fn map(buf: DmaBuf, offset: u64, len: u64, write: bool) -> Result<Mapped> {
    if len == 0 || offset.checked_add(len).is_none_or(|e| e > buf.size) {
        return Err(fail!(
            ffi::FI_EINVAL,
            "fi_mr_regattr(dma-buf): offset {offset:#x} + length {len} is not inside dma-buf {} ({} bytes, exporter {}); register a non-empty part of the buffer",
            buf.ino,
            buf.size,
            buf.exporter
        ));
    }
    let first = offset & !4095;
    let map_len = ((offset + len).next_multiple_of(4096) - first) as usize;
    let prot = libc::PROT_READ | if write { libc::PROT_WRITE } else { 0 };
    // SAFETY: a new shared mapping of the buffer; the kernel picks the address.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), map_len, prot, libc::MAP_SHARED, buf.fd.as_raw_fd(), first as libc::off_t)
    };
    if p == libc::MAP_FAILED {
        let e = io::Error::last_os_error();
        return Err(fail!(
            ffi::FI_EOPNOTSUPP,
            "fi_mr_regattr(dma-buf): exporter {} does not let dma-buf {} be mapped by the CPU (mmap {}: {e}); oxmr reaches dma-buf memory through a CPU mapping: export from an allocator whose exporter implements mmap (udmabuf, dma-heaps, DRM PRIME), or map the memory through the device's own API and register that address",
            buf.exporter,
            buf.ino,
            if write { "read-write" } else { "read-only" }
        ));
    }
    Ok(Mapped { buf, base: p as usize, map_len, offset, len: len as usize })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memfd(bytes: &[u8]) -> i32 {
        // SAFETY: a new memfd, closed by the test.
        let fd = unsafe { libc::memfd_create(c"oxmr-dmabuf-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: writes `bytes` to our memfd.
        assert_eq!(unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) }, bytes.len() as isize);
        fd
    }

    #[test]
    fn what_is_not_a_dmabuf_is_refused_and_named() {
        let m = memfd(&[0; 4096]);
        let why = describe_fd(m);
        assert!(why.starts_with("a memfd (/memfd:oxmr-dmabuf-test"), "{why}");
        assert_eq!(open(m).err().map(|e| e.code()), Some(ffi::FI_EINVAL));
        // SAFETY: a new socket, closed below.
        let s = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        assert!(describe_fd(s).starts_with("a socket (socket:["), "{}", describe_fd(s));
        assert_eq!(open(s).err().map(|e| e.code()), Some(ffi::FI_EINVAL));
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        assert!(describe_fd(f.as_raw_fd()).starts_with("a regular file (/"), "{}", describe_fd(f.as_raw_fd()));
        assert_eq!(open(f.as_raw_fd()).err().map(|e| e.code()), Some(ffi::FI_EINVAL));
        // SAFETY: closing our own fds; `s` is then a closed number.
        unsafe {
            libc::close(s);
            libc::close(m);
        }
        assert!(describe_fd(s).starts_with("not an open file descriptor"), "{}", describe_fd(s));
        assert_eq!(open(s).err().map(|e| e.code()), Some(ffi::FI_EBADF));
        assert_eq!(open(-1).err().map(|e| e.code()), Some(ffi::FI_EBADF));
    }

    #[test]
    fn a_mapping_outlives_the_callers_fd_and_lies_inside_the_buffer() {
        let bytes: Vec<u8> = (0..3 * 4096).map(|i| (i % 251) as u8).collect();
        let fd = memfd(&bytes);
        let b = stand_in(fd).unwrap();
        let ino = b.ino;
        assert_eq!(b.size, bytes.len() as u64);
        // SAFETY: closing the caller's fd; the stand-in holds its own.
        unsafe { libc::close(fd) };
        let m = map(b, 4096 + 100, 5000, true).unwrap();
        let (a, l) = m.data();
        assert_eq!(l, 5000);
        // SAFETY: our mapping of 5000 bytes at `a`.
        let seen = unsafe { std::slice::from_raw_parts(a as *const u8, l) };
        assert_eq!(seen, &bytes[4196..4196 + 5000]);
        assert!(matches!(m.device(), Device::DmaBuf { ino: i, offset: 4196, .. } if i == ino));
        let fd2 = memfd(&bytes);
        let b2 = stand_in(fd2).unwrap();
        assert_eq!(map(b2, 3 * 4096 - 10, 11, false).err().map(|e| e.code()), Some(ffi::FI_EINVAL), "one byte past");
        let b3 = stand_in(fd2).unwrap();
        assert_eq!(map(b3, 0, 0, false).err().map(|e| e.code()), Some(ffi::FI_EINVAL), "empty");
        // SAFETY: the test's fd.
        unsafe { libc::close(fd2) };
    }
}
