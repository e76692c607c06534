//! The kernel's view of this process's mappings, read from
//! `/proc/self/maps` and `/proc/self/smaps`.
//!
//! Registration uses it to prove that a range is mapped at all (a hole is
//! the caller's bug, reported before any pin is attempted) and to say what
//! kind of memory it is when pinning fails: device memory mapped with
//! `remap_pfn_range` (VM_PFNMAP|VM_IO) may take the physical-address
//! fallback, `memfd_secret` memory must not, and either way the log line
//! names the mapping. This room only reads procfs; it pins nothing.
//!
//! Lines are read as bytes and decoded lossily: a path is whatever bytes the
//! kernel printed (it escapes only `\n`), which need not be UTF-8.

use std::fs::File;
use std::io::{self, BufRead, BufReader};

/// One VMA as the kernel prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    pub read: bool,
    pub write: bool,
    pub exec: bool,
    /// `s` in the permissions (MAP_SHARED), else private.
    pub shared: bool,
    pub offset: u64,
    /// The device of the mapped file, `major << 32 | minor` (0: none).
    pub dev: u64,
    pub inode: u64,
    /// Everything after the inode, spaces included; empty for anonymous memory.
    pub path: String,
    /// The two-letter `VmFlags:` mnemonics; filled only by [`smaps_in`].
    pub vm_flags: Vec<String>,
}

/// What a mapping is, as far as registration cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// No path, or a named anonymous region (`[anon:name]`, `[anon_shmem:name]`).
    Anonymous,
    Heap,
    Stack,
    /// Backed by a file (including memfd and deleted files); the printed path.
    File(String),
    /// VM_PFNMAP or VM_IO (`pf`/`io` in VmFlags): no `struct page` behind
    /// it, so it cannot be pinned. Only [`smaps_in`] can tell.
    DevicePfn,
    /// `memfd_secret(2)` memory: removed from the kernel's direct map, so it
    /// cannot be pinned either, but it is ordinary RAM, not device memory.
    Secret,
    /// Any other kernel-provided mapping: `[vdso]`, `[vvar]`,
    /// `anon_inode:[perf_event]`, ...
    Special(String),
}

/// What `memfd_secret` mappings are called. The file is a pseudo-file on
/// the kernel's internal secretmem mount, and d_path() of its unhashed
/// dentry prints it this way (seen on 6.18, identical in maps and smaps):
/// `7f16922de000-7f16922e0000 rw-s 00000000 00:0e 173297   /secretmem (deleted)`.
/// A real file at `/secretmem`, deleted while mapped, would print the same;
/// treating it as secret memory only makes registration refuse the physical
/// fallback, which a file mapping would not get anyway.
const SECRETMEM_PATH: &str = "/secretmem (deleted)";

impl Mapping {
    /// Classify the mapping. PFN/IO mappings win over everything else,
    /// because what a driver mapped is device memory whatever the path says.
    pub fn kind(&self) -> Kind {
        if self.is_pfn_or_io() {
            return Kind::DevicePfn;
        }
        let p = self.path.as_str();
        // secretmem_mmap() refuses private mappings, so a secret mapping is
        // always shared.
        if p == SECRETMEM_PATH && self.shared {
            return Kind::Secret;
        }
        match p {
            "" => Kind::Anonymous,
            "[heap]" => Kind::Heap,
            // Kernels before 4.5 printed thread stacks as `[stack:TID]`.
            _ if p == "[stack]" || p.starts_with("[stack:") => Kind::Stack,
            _ if p.starts_with("[anon:") || p.starts_with("[anon_shmem:") => Kind::Anonymous,
            _ if p.starts_with('/') => Kind::File(p.to_owned()),
            _ => Kind::Special(p.to_owned()),
        }
    }

    /// A phrase for log lines and error messages, e.g. "anonymous memory" or
    /// "device/PFN-mapped memory (VM_PFNMAP|VM_IO) 0x7f00-0x7f10".
    pub fn describe(&self) -> String {
        match self.kind() {
            Kind::DevicePfn => {
                let flags: Vec<&str> = [("pf", "VM_PFNMAP"), ("io", "VM_IO")]
                    .iter()
                    .filter(|(f, _)| self.has_flag(f))
                    .map(|&(_, name)| name)
                    .collect();
                format!("device/PFN-mapped memory ({}) {:#x}-{:#x}", flags.join("|"), self.start, self.end)
            }
            Kind::Secret => "secret memory (memfd_secret)".to_owned(),
            Kind::File(p) => format!("file-backed memory ({p})"),
            Kind::Anonymous => "anonymous memory".to_owned(),
            Kind::Heap => "heap memory".to_owned(),
            Kind::Stack => "stack memory".to_owned(),
            Kind::Special(p) => format!("special kernel mapping ({p})"),
        }
    }

    fn has_flag(&self, flag: &str) -> bool {
        self.vm_flags.iter().any(|f| f == flag)
    }

    fn is_pfn_or_io(&self) -> bool {
        self.has_flag("pf") || self.has_flag("io")
    }
}

/// Mappings overlapping [addr, addr+len) in address order, from
/// /proc/self/maps. An empty or overflowing range overlaps nothing.
pub fn mappings_in(addr: usize, len: usize) -> io::Result<Vec<Mapping>> {
    scan("/proc/self/maps", addr, len, false)
}

/// Same, from /proc/self/smaps, with `vm_flags` filled. Slower: the kernel
/// walks the page tables of every VMA it prints, so use it to classify
/// memory that could not be pinned, not on every registration.
pub fn smaps_in(addr: usize, len: usize) -> io::Result<Vec<Mapping>> {
    scan("/proc/self/smaps", addr, len, true)
}

/// The first part of [addr, addr+len) that no mapping in `maps` covers, as
/// (start, end). An empty range has no gap; a range that runs past the end
/// of the address space is not mapped memory, so all of it, up to
/// `usize::MAX`, is reported as the gap.
pub fn first_gap(maps: &[Mapping], addr: usize, len: usize) -> Option<(usize, usize)> {
    if len == 0 {
        return None;
    }
    let Some(end) = addr.checked_add(len) else {
        return Some((addr, usize::MAX));
    };
    // Callers pass what mappings_in returned, already in order; sorting a
    // copy of the references keeps this right for any slice.
    let mut sorted: Vec<&Mapping> = maps.iter().collect();
    sorted.sort_by_key(|m| m.start);
    let mut cursor = addr;
    for m in sorted {
        if m.end <= cursor {
            continue;
        }
        if m.start > cursor {
            return Some((cursor, m.start.min(end)));
        }
        cursor = m.end;
        if cursor >= end {
            return None;
        }
    }
    Some((cursor, end))
}

/// Read a maps-format file, keeping the VMAs that overlap [addr, addr+len).
/// The kernel prints VMAs in address order, so reading stops at the first
/// one past the range (for smaps, that also spares the kernel's page walks
/// of everything above it).
fn scan(path: &str, addr: usize, len: usize, with_flags: bool) -> io::Result<Vec<Mapping>> {
    let mut out: Vec<Mapping> = Vec::new();
    let end = match addr.checked_add(len) {
        Some(end) if len > 0 => end,
        _ => return Ok(out),
    };
    let mut reader = BufReader::new(File::open(path)?);
    let mut raw = Vec::new();
    // Whether the smaps attribute lines being read belong to a kept VMA.
    let mut keeping = false;
    loop {
        raw.clear();
        if reader.read_until(b'\n', &mut raw)? == 0 {
            break;
        }
        if raw.last() == Some(&b'\n') {
            raw.pop();
        }
        let line = String::from_utf8_lossy(&raw);
        let first = line.split_ascii_whitespace().next().unwrap_or("");
        if first.ends_with(':') {
            // An smaps attribute line ("Rss:", "VmFlags:", ...).
            if keeping && with_flags && first == "VmFlags:" {
                if let Some(m) = out.last_mut() {
                    m.vm_flags = line.split_ascii_whitespace().skip(1).map(str::to_owned).collect();
                }
            }
            continue;
        }
        let m = parse_header(&line)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("{path}: unexpected line {line:?}")))?;
        if m.start >= end {
            break;
        }
        keeping = m.end > addr;
        if keeping {
            out.push(m);
        }
    }
    Ok(out)
}

/// Parse `start-end perms offset dev inode [path]`. The path is the rest of
/// the line after the padding, so a path with spaces stays whole.
fn parse_header(line: &str) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start_matches(' ');
        let n = t.find(' ').unwrap_or(t.len());
        let (f, r) = t.split_at(n);
        rest = r;
        f
    };
    let (range, perms, offset, dev, inode) = (field(), field(), field(), field(), field());
    let (major, minor) = dev.split_once(':')?;
    let (start, end) = range.split_once('-')?;
    let perms = perms.as_bytes();
    if perms.len() != 4 {
        return None;
    }
    Some(Mapping {
        start: usize::from_str_radix(start, 16).ok()?,
        end: usize::from_str_radix(end, 16).ok()?,
        read: perms[0] == b'r',
        write: perms[1] == b'w',
        exec: perms[2] == b'x',
        shared: perms[3] == b's',
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev: u64::from_str_radix(major, 16).ok()? << 32 | u64::from_str_radix(minor, 16).ok()?,
        inode: inode.parse().ok()?,
        path: rest.trim_start_matches(' ').to_owned(),
        vm_flags: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::ptr;

    fn page() -> usize {
        // SAFETY: sysconf has no memory-safety preconditions.
        unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
    }

    /// A mapping that is unmapped when the test ends, also on failure.
    struct Region {
        addr: usize,
        len: usize,
    }

    impl Region {
        fn map(len: usize, prot: i32, flags: i32, fd: i32) -> io::Result<Region> {
            // SAFETY: a fresh mapping at an address the kernel chooses
            // touches no existing memory.
            let p = unsafe { libc::mmap(ptr::null_mut(), len, prot, flags, fd, 0) };
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            Ok(Region { addr: p as usize, len })
        }

        fn anon(len: usize, prot: i32) -> Region {
            Region::map(len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1).unwrap()
        }
    }

    impl Drop for Region {
        fn drop(&mut self) {
            // SAFETY: this region owns the range; nothing refers to it after
            // the test. munmap of an already-unmapped part is harmless.
            unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
        }
    }

    /// The one mapping covering [addr, addr+len), checked to exist.
    fn covering(maps: &[Mapping], addr: usize, len: usize) -> Mapping {
        let m = maps
            .iter()
            .find(|m| m.start <= addr && m.end >= addr + len)
            .unwrap_or_else(|| panic!("no mapping covers {addr:#x}+{len:#x}: {maps:?}"));
        m.clone()
    }

    #[test]
    fn anonymous_mapping_with_permissions() {
        let ps = page();
        let r = Region::anon(4 * ps, libc::PROT_READ | libc::PROT_WRITE);
        let maps = mappings_in(r.addr, r.len).unwrap();
        let m = covering(&maps, r.addr, r.len);
        assert!(m.read && m.write && !m.exec && !m.shared, "{m:?}");
        assert_eq!(m.kind(), Kind::Anonymous);
        assert_eq!(m.describe(), "anonymous memory");
        assert!(m.vm_flags.is_empty());
        assert_eq!(first_gap(&maps, r.addr, r.len), None);

        let smaps = smaps_in(r.addr, r.len).unwrap();
        let m = covering(&smaps, r.addr, r.len);
        assert!(m.vm_flags.iter().any(|f| f == "rd"), "{m:?}");
        assert!(m.vm_flags.iter().any(|f| f == "wr"), "{m:?}");
        assert_eq!(m.kind(), Kind::Anonymous);
    }

    #[test]
    fn prot_none_is_neither_readable_nor_writable() {
        let r = Region::anon(2 * page(), libc::PROT_NONE);
        let maps = mappings_in(r.addr, r.len).unwrap();
        let m = covering(&maps, r.addr, r.len);
        assert!(!m.read && !m.write && !m.exec, "{m:?}");
    }

    #[test]
    fn unmapped_middle_page_is_the_first_gap() {
        let ps = page();
        let r = Region::anon(3 * ps, libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: the middle page belongs to `r`, which nothing else uses.
        let rc = unsafe { libc::munmap((r.addr + ps) as *mut libc::c_void, ps) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        let maps = mappings_in(r.addr, r.len).unwrap();
        assert_eq!(first_gap(&maps, r.addr, r.len), Some((r.addr + ps, r.addr + 2 * ps)));
        // Each half on its own is fully mapped.
        assert_eq!(first_gap(&maps, r.addr, ps), None);
        let tail = mappings_in(r.addr + 2 * ps, ps).unwrap();
        assert_eq!(first_gap(&tail, r.addr + 2 * ps, ps), None);
        // Starting inside the hole, the gap starts at the start.
        assert_eq!(first_gap(&maps, r.addr + ps + 1, 2 * ps), Some((r.addr + ps + 1, r.addr + 2 * ps)));
    }

    #[test]
    fn empty_and_overflowing_ranges() {
        assert!(mappings_in(usize::MAX - 10, 100).unwrap().is_empty());
        assert!(smaps_in(usize::MAX - 10, 100).unwrap().is_empty());
        assert!(mappings_in(0x1000, 0).unwrap().is_empty());
        assert_eq!(first_gap(&[], usize::MAX - 10, 100), Some((usize::MAX - 10, usize::MAX)));
        assert_eq!(first_gap(&[], 0x1000, 0), None);
        assert_eq!(first_gap(&[], 0x1000, 0x10), Some((0x1000, 0x1010)));
    }

    /// Removes the file when the test ends, also on failure.
    struct TempFile(String);

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn file_mapping_with_spaces_in_its_path() {
        let ps = page();
        let path = format!("/tmp/oxmr maps test {}.bin", std::process::id());
        let tmp = TempFile(path.clone());
        std::fs::write(&tmp.0, vec![7u8; 2 * ps]).unwrap();
        let file = std::fs::File::open(&tmp.0).unwrap();
        let r = Region::map(2 * ps, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd()).unwrap();
        let maps = mappings_in(r.addr, r.len).unwrap();
        let m = covering(&maps, r.addr, r.len);
        assert_eq!(m.kind(), Kind::File(path.clone()));
        assert_eq!(m.describe(), format!("file-backed memory ({path})"));
        assert!(m.read && !m.write && !m.shared, "{m:?}");
        assert_eq!(m.offset, 0);
        use std::os::unix::fs::MetadataExt;
        assert_eq!(m.inode, file.metadata().unwrap().ino());
        let dev = file.metadata().unwrap().dev();
        assert_eq!(m.dev, (libc::major(dev) as u64) << 32 | libc::minor(dev) as u64);
    }

    #[test]
    fn parses_the_lines_the_kernel_prints() {
        let secret = "7f16922de000-7f16922e0000 rw-s 00000000 00:0e 173297                     /secretmem (deleted)";
        let m = parse_header(secret).unwrap();
        assert_eq!((m.start, m.end), (0x7f16922de000, 0x7f16922e0000));
        assert!(m.read && m.write && !m.exec && m.shared);
        assert_eq!(m.inode, 173297);
        assert_eq!(m.dev, 0x0e);
        assert_eq!(m.path, "/secretmem (deleted)");
        assert_eq!(m.kind(), Kind::Secret);

        let anon = "7ffd1c9e0000-7ffd1ca01000 rw-p 00000000 00:00 0";
        let m = parse_header(anon).unwrap();
        assert_eq!(m.path, "");
        assert_eq!(m.kind(), Kind::Anonymous);

        let vdso = "7ffd1cbd9000-7ffd1cbdb000 r-xp 00000000 00:00 0                          [vdso]";
        assert_eq!(parse_header(vdso).unwrap().kind(), Kind::Special("[vdso]".into()));
        assert!(parse_header("Rss:                   4 kB").is_none());
    }

    #[test]
    fn perf_ring_buffer_is_device_pfn() {
        let ps = page();
        // (Disabled, this thread on any CPU, user space only. Where the
        // kernel cannot give the memory, the test fails saying why: a skip
        // would show as a pass.)
        let fd = crate::mr::protwatch::dummy_event(0, -1, 1 | (1 << 5) | (1 << 6)).unwrap_or_else(|e| {
            panic!("cannot run here: perf_event_open(SW_DUMMY) failed: {e} (perf_event_paranoid or no perf support); no real PFN-mapped memory to test on")
        });
        // One control page plus 2^1 data pages.
        let r = Region::map(3 * ps, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd()).unwrap();

        let smaps = smaps_in(r.addr, r.len).unwrap();
        let m = covering(&smaps, r.addr, r.len);
        assert!(m.vm_flags.iter().any(|f| f == "pf"), "{m:?}");
        assert!(m.vm_flags.iter().any(|f| f == "io"), "{m:?}");
        assert_eq!(m.kind(), Kind::DevicePfn);
        assert_eq!(m.describe(), format!("device/PFN-mapped memory (VM_PFNMAP|VM_IO) {:#x}-{:#x}", m.start, m.end));

        // Without VmFlags only the name is known.
        let maps = mappings_in(r.addr, r.len).unwrap();
        let m = covering(&maps, r.addr, r.len);
        assert_eq!(m.kind(), Kind::Special("anon_inode:[perf_event]".into()));
    }

    #[test]
    fn memfd_secret_is_secret() {
        let ps = page();
        // SAFETY: memfd_secret takes only flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_memfd_secret, 0) };
        assert!(
            fd >= 0,
            "cannot run here: memfd_secret failed: {} (kernel without CONFIG_SECRETMEM, or booted with secretmem.enable=0)",
            io::Error::last_os_error()
        );
        // SAFETY: memfd_secret returned a new fd that we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // SAFETY: plain syscall on our own fd.
        let rc = unsafe { libc::ftruncate(fd.as_raw_fd(), (2 * ps) as libc::off_t) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        let r = Region::map(2 * ps, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd()).unwrap();
        // SAFETY: the first byte of our own writable mapping.
        unsafe { *(r.addr as *mut u8) = 1 };

        let maps = mappings_in(r.addr, r.len).unwrap();
        let m = covering(&maps, r.addr, r.len);
        assert_eq!(m.kind(), Kind::Secret, "{m:?}");
        assert_eq!(m.describe(), "secret memory (memfd_secret)");

        let smaps = smaps_in(r.addr, r.len).unwrap();
        let m = covering(&smaps, r.addr, r.len);
        assert_eq!(m.kind(), Kind::Secret, "{m:?}");
        // Locked by the kernel, but not PFN-mapped: the physical fallback
        // must not take it.
        assert!(m.vm_flags.iter().any(|f| f == "lo"), "{m:?}");
        assert!(!m.vm_flags.iter().any(|f| f == "pf" || f == "io"), "{m:?}");
    }

    #[test]
    fn vvar_is_device_pfn_in_smaps() {
        // [vvar] is mapped in every process; it is PFN-mapped kernel data.
        let text = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line =
            text.lines().find(|l| l.ends_with("[vvar]")).expect("cannot run here: this process has no [vvar] mapping");
        let m = parse_header(line).unwrap();
        assert_eq!(m.kind(), Kind::Special("[vvar]".into()));
        let smaps = smaps_in(m.start, m.end - m.start).unwrap();
        let vvar = smaps.iter().find(|s| s.path == "[vvar]").unwrap();
        assert_eq!(vvar.kind(), Kind::DevicePfn);
    }
}
