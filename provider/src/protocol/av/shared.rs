//! Named AVs (fi_av(3) `fi_av_attr.name`, `FI_READ`): one AV's table in a
//! file of the per-user shared-memory directory, `/dev/shm/oxmr-u<euid>/
//! av-<name>`, that other processes of the user open read-only.
//!
//! One process creates a named AV (no `FI_READ`) and is its only writer;
//! the others open it with `FI_READ` and see its addresses at the same
//! fi_addr values (fi_addr = the entry's index: a named AV never reuses an
//! index, FI_AV_MAP included, so an fi_addr a reader holds never comes to
//! name another address).
//!
//! The file: a 64-byte header, then `capacity` 64-byte entries.
//!
//! ```text
//! header  0 magic "oxmr-av\x01"   8 layout u32 (1)   12 entry size u32 (64)
//!        16 capacity u64         24 used u64 (entries published)
//!        32 seq u64 (odd while the creator changes the file)
//!        40 salt u64 (random, mixed into every entry's check)
//!        48 creator pid u32      52 flags u32 (1: FI_AV_MAP, 2: closed)
//!        56 removes u64 (removals so far)
//! entry   0 state u32 (1 live, 2 removed)   4 address length u32 (16, 28)
//!         8 struct sockaddr_in/in6, zero-padded to 32 bytes
//!        40 its own index u64     48 check u64 (FNV-1a of salt and bytes 0..48)
//! ```
//!
//! Nothing is mapped: every access is a `pread`/`pwrite` of the file, so a
//! file that another process of the user truncated or scribbled on can make
//! a reader's entries wrong, never crash it (a mapping of a truncated file
//! raises SIGBUS). The creator keeps its table in its own memory and only
//! writes the file. A reader reads the header, the entries it has not seen
//! (all of them after a removal) and the header again, and keeps what it
//! read only when the two headers are equal and `seq` is even (the
//! creator's `seq` bumps around every change: a seqlock); each entry is
//! checked (state, length, address family, its index, its check) and one
//! that fails is no address: its fi_addr fails lookups with -FI_EINVAL and
//! a log line. Reads are bounded: at most `capacity` entries, and
//! `capacity` at most [`MAX_ENTRIES`].
//!
//! The creator holds an open-file-description lock on the file
//! (`F_OFD_SETLK`) for as long as it lives: a second creator of a name
//! whose creator lives gets -FI_EBUSY, a file whose creator died (no lock)
//! is replaced by the next creator and refused to readers (-FI_ENOENT).
//! When the creator closes the AV it marks the file closed and removes it;
//! readers keep the entries they had read (the addresses stay usable, no
//! new ones can come) and later `FI_READ` opens of the name get -FI_ENOENT.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use oxmr_ffi as ffi;

use crate::error::Result;
use crate::fail;
use crate::info::addr;
use crate::sys::LockExt;
use crate::wire::user_dir::{self as dir, Dir, Refused};

/// The most entries a named AV holds (its file is then 4 MiB).
pub(crate) const MAX_ENTRIES: usize = 1 << 16;
/// Entries of a named AV opened with `count` 0.
pub(crate) const DEFAULT_ENTRIES: usize = 1024;
/// The longest name, in bytes (its file name, encoded, fits NAME_MAX).
pub(crate) const MAX_NAME: usize = 80;

const HEADER: usize = 64;
const ENTRY: usize = 64;
const MAGIC: [u8; 8] = *b"oxmr-av\x01";
const LAYOUT: u32 = 1;
const FLAG_MAP: u32 = 1;
const FLAG_CLOSED: u32 = 2;
const LIVE: u32 = 1;
const REMOVED: u32 = 2;
/// Reads of a file that keeps changing under the reader before it gives
/// up for this time (keeping what it had).
const TRIES: usize = 32;

/// The file name of the AV named `name` ("av-" and the name, with bytes
/// other than letters, digits, '.', '_' and '-' as %XX).
pub fn file_name(name: &[u8]) -> std::result::Result<String, String> {
    if name.is_empty() {
        return Err("the name is empty".into());
    }
    if name.len() > MAX_NAME {
        return Err(format!("the name is {} bytes long; oxmr takes at most {MAX_NAME}", name.len()));
    }
    let mut s = String::from("av-");
    for &b in name {
        if b.is_ascii_alphanumeric() || b"._-".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(s)
}

/// A name for log lines.
pub fn show(name: &[u8]) -> String {
    format!("\"{}\"", String::from_utf8_lossy(name).escape_debug())
}

/// FNV-1a over the salt and `bytes`.
fn check(salt: u64, bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in salt.to_le_bytes().iter().chain(bytes) {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default())
}

/// The file's header.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
struct Header {
    capacity: u64,
    used: u64,
    seq: u64,
    salt: u64,
    pid: u32,
    flags: u32,
    removes: u64,
}

impl Header {
    fn bytes(&self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&LAYOUT.to_le_bytes());
        b[12..16].copy_from_slice(&(ENTRY as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.capacity.to_le_bytes());
        b[24..32].copy_from_slice(&self.used.to_le_bytes());
        b[32..40].copy_from_slice(&self.seq.to_le_bytes());
        b[40..48].copy_from_slice(&self.salt.to_le_bytes());
        b[48..52].copy_from_slice(&self.pid.to_le_bytes());
        b[52..56].copy_from_slice(&self.flags.to_le_bytes());
        b[56..64].copy_from_slice(&self.removes.to_le_bytes());
        b
    }

    /// Parse and check a header: what is wrong with it, if anything.
    fn parse(b: &[u8; HEADER]) -> std::result::Result<Header, String> {
        if b[0..8] != MAGIC {
            return Err("it does not start with oxmr's named-AV magic".into());
        }
        let (layout, entry) = (u32_at(b, 8), u32_at(b, 12));
        if layout != LAYOUT || entry != ENTRY as u32 {
            return Err(format!(
                "its layout is {layout} with {entry}-byte entries; this oxmr reads layout {LAYOUT}, {ENTRY}-byte entries"
            ));
        }
        let h = Header {
            capacity: u64_at(b, 16),
            used: u64_at(b, 24),
            seq: u64_at(b, 32),
            salt: u64_at(b, 40),
            pid: u32_at(b, 48),
            flags: u32_at(b, 52),
            removes: u64_at(b, 56),
        };
        if h.capacity == 0 || h.capacity > MAX_ENTRIES as u64 {
            return Err(format!("its capacity {} is not in 1..={MAX_ENTRIES}", h.capacity));
        }
        if h.used > h.capacity {
            return Err(format!("it claims {} entries in a capacity of {}", h.used, h.capacity));
        }
        if h.flags & !(FLAG_MAP | FLAG_CLOSED) != 0 {
            return Err(format!("unknown flags {:#x}", h.flags));
        }
        Ok(h)
    }
}

/// An entry's bytes.
fn entry_bytes(salt: u64, index: usize, state: u32, a: &SocketAddr) -> [u8; ENTRY] {
    let mut b = [0u8; ENTRY];
    let sa = addr::encode(a);
    b[0..4].copy_from_slice(&state.to_le_bytes());
    b[4..8].copy_from_slice(&(sa.len() as u32).to_le_bytes());
    b[8..8 + sa.len()].copy_from_slice(&sa);
    b[40..48].copy_from_slice(&(index as u64).to_le_bytes());
    let c = check(salt, &b[..48]);
    b[48..56].copy_from_slice(&c.to_le_bytes());
    b
}

/// What a reader found in one entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slot {
    Live(SocketAddr),
    Removed,
    /// Not an address: what is wrong with it.
    Bad(String),
}

/// Check the entry at `index`.
fn parse_entry(salt: u64, index: usize, b: &[u8]) -> Slot {
    if b.len() != ENTRY {
        return Slot::Bad("it was cut short".into());
    }
    let state = u32_at(b, 0);
    if state == 0 {
        return Slot::Bad("it is empty, below the count of entries the header publishes".into());
    }
    if u64_at(b, 48) != check(salt, &b[..48]) {
        return Slot::Bad("its check does not match its bytes".into());
    }
    if u64_at(b, 40) != index as u64 {
        return Slot::Bad(format!("it names index {}", u64_at(b, 40)));
    }
    let len = u32_at(b, 4) as usize;
    let sa = match len {
        addr::SOCKADDR_IN_LEN | addr::SOCKADDR_IN6_LEN => &b[8..8 + len],
        _ => return Slot::Bad(format!("its address length {len} is neither 16 nor 28")),
    };
    let a = match addr::parse(sa) {
        Some(a) if addr::encode(&a).len() == len => a,
        _ => return Slot::Bad("it holds no sockaddr_in/sockaddr_in6".into()),
    };
    match state {
        LIVE => Slot::Live(a),
        REMOVED => Slot::Removed,
        s => Slot::Bad(format!("its state {s} is unknown")),
    }
}

/// What a reader has read of the file so far.
#[derive(Default)]
pub struct ReadState {
    seq: u64,
    used: usize,
    removes: u64,
    /// Nothing more will come: the creator closed the AV, died, or the
    /// file went bad (said once).
    pub done: bool,
}

/// New entries a reader read: `slots[k]` is the entry at `from + k`
/// (`from` 0: the whole table, replacing what was read before).
pub struct Fresh {
    pub from: usize,
    pub slots: Vec<Slot>,
}

/// The named AV's file, as its creator or a reader holds it.
pub struct SharedFile {
    /// The application's name, for log lines.
    name: String,
    dir: Arc<Dir>,
    file_name: String,
    file: File,
    /// The file's identity, to remove only our own (the creator's).
    st: libc::stat,
    /// The creator: its header (under the AV table's write lock, so
    /// uncontended) and the process image that created it (a forked
    /// child's close removes nothing).
    writer: Option<(Mutex<Header>, u64)>,
    /// The creator has closed it (marked, removed).
    closed: std::sync::atomic::AtomicBool,
    capacity: usize,
    salt: u64,
    map: bool,
}

fn io_fail(what: &str, e: &io::Error) -> crate::error::Error {
    match Refused::of(e) {
        Some(r) => fail!(ffi::FI_EINVAL, "{what}: {r}"),
        None => fail!(ffi::FI_EIO, "{what}: {e}"),
    }
}

fn user_dir(name: &[u8]) -> Result<Arc<Dir>> {
    Dir::user().map_err(|why| {
        fail!(
            ffi::FI_EACCES,
            "fi_av_open: the named AV {} would live in the per-user shared-memory directory, which this process may not use ({why})",
            show(name)
        )
    })
}

fn read_header(file: &File) -> std::result::Result<(Header, [u8; HEADER]), String> {
    let mut b = [0u8; HEADER];
    match file.read_exact_at(&mut b, 0) {
        Ok(()) => Header::parse(&b).map(|h| (h, b)),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err("it was truncated below its header".into()),
        Err(e) => Err(format!("its header cannot be read ({e})")),
    }
}

impl SharedFile {
    /// Create the named AV `name` for `capacity` entries (FI_AV_MAP or
    /// FI_AV_TABLE: `map`); -FI_EBUSY when a live creator holds the name.
    pub fn create(name: &[u8], capacity: usize, map: bool) -> Result<SharedFile> {
        file_name(name).map_err(|why| fail!(ffi::FI_EINVAL, "fi_av_open: name {}: {why}", show(name)))?;
        SharedFile::create_in(user_dir(name)?, name, capacity, map)
    }

    /// `create` in the directory `dir`.
    pub(crate) fn create_in(dir: Arc<Dir>, name: &[u8], capacity: usize, map: bool) -> Result<SharedFile> {
        let shown = show(name);
        let fname = file_name(name).map_err(|why| fail!(ffi::FI_EINVAL, "fi_av_open: name {shown}: {why}"))?;
        if capacity == 0 || capacity > MAX_ENTRIES {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_av_open: a named AV holds 1 to {MAX_ENTRIES} entries, not {capacity}"
            ));
        }
        let tmp = format!("tmp-{}-{:016x}", std::process::id(), crate::sys::random_u64());
        let fd = dir.create(&tmp).map_err(|e| io_fail(&format!("fi_av_open: creating {}", dir.file(&tmp)), &e))?;
        let built = (|| -> io::Result<(File, Header)> {
            // (Locked before it has the name: no one sees it unlocked.)
            if !dir::try_lock_file(fd.as_fd())? {
                return Err(io::Error::other("a file just made is locked by someone else"));
            }
            let file = File::from(fd);
            file.set_len((HEADER + capacity * ENTRY) as u64)?;
            let h = Header {
                capacity: capacity as u64,
                salt: crate::sys::random_u64(),
                pid: std::process::id(),
                flags: if map { FLAG_MAP } else { 0 },
                ..Default::default()
            };
            file.write_all_at(&h.bytes(), 0)?;
            Ok((file, h))
        })();
        let (file, h) = match built {
            Ok(x) => x,
            Err(e) => {
                let _ = dir.unlink(&tmp);
                return Err(io_fail(&format!("fi_av_open: building the named AV {shown} in {}", dir.file(&tmp)), &e));
            }
        };
        // (None: the name kept changing hands through every try.)
        let mut named: Option<Result<()>> = None;
        for _ in 0..4 {
            match dir.rename_new(&tmp, &fname) {
                Ok(()) => {
                    named = Some(Ok(()));
                    break;
                }
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => {
                    named = Some(Err(io_fail(&format!("fi_av_open: naming {}", dir.file(&fname)), &e)));
                    break;
                }
            }
            // The name is taken: by a live creator (it holds the lock),
            // or left by one that died (replace it).
            match dir.open_checked(&fname, 0, false) {
                Ok((fd, st)) => match dir::file_locked_elsewhere(fd.as_fd()) {
                    Ok(true) => {
                        let pid = read_header(&File::from(fd)).map(|(h, _)| h.pid.to_string());
                        named = Some(Err(fail!(
                            ffi::FI_EBUSY,
                            "fi_av_open: the named AV {shown} exists and its creator (process {}) still has it open; open it with FI_READ to share it, or choose another name",
                            pid.unwrap_or_else(|_| "?".into())
                        )));
                        break;
                    }
                    Ok(false) => {
                        if dir.unlink_if_same(&fname, &st) {
                            tracing::info!(
                                "fi_av_open: removed {}, a named AV whose creator is gone",
                                dir.file(&fname)
                            );
                        }
                    }
                    Err(e) => {
                        named = Some(Err(io_fail(&format!("fi_av_open: checking {}", dir.file(&fname)), &e)));
                        break;
                    }
                },
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => {
                    named = Some(Err(match Refused::of(&e) {
                        Some(r) => fail!(
                            ffi::FI_EBUSY,
                            "fi_av_open: the name {shown} is taken by a file that is no named AV of this user ({r}); remove it or choose another name"
                        ),
                        None => io_fail(&format!("fi_av_open: checking {}", dir.file(&fname)), &e),
                    }));
                    break;
                }
            }
        }
        let named = named.unwrap_or_else(|| {
            Err(fail!(ffi::FI_EBUSY, "fi_av_open: the named AV {shown} keeps changing hands; try again"))
        });
        if let Err(e) = named {
            let _ = dir.unlink(&tmp);
            return Err(e);
        }
        let st = dir::fstat(std::os::fd::AsRawFd::as_raw_fd(&file))
            .map_err(|e| io_fail(&format!("fi_av_open: checking {}", dir.file(&fname)), &e))?;
        Ok(SharedFile {
            name: shown,
            dir,
            file_name: fname,
            file,
            st,
            writer: Some((Mutex::new(h), crate::sys::process_token())),
            closed: false.into(),
            capacity,
            salt: h.salt,
            map,
        })
    }

    /// Open the named AV `name` read-only (FI_READ): -FI_ENOENT when no
    /// live creator has it open.
    pub fn open(name: &[u8]) -> Result<SharedFile> {
        file_name(name).map_err(|why| fail!(ffi::FI_EINVAL, "fi_av_open: name {}: {why}", show(name)))?;
        SharedFile::open_in(user_dir(name)?, name)
    }

    /// `open` in the directory `dir`.
    pub(crate) fn open_in(dir: Arc<Dir>, name: &[u8]) -> Result<SharedFile> {
        let shown = show(name);
        let fname = file_name(name).map_err(|why| fail!(ffi::FI_EINVAL, "fi_av_open: name {shown}: {why}"))?;
        let (fd, st) = dir.open_checked(&fname, HEADER as u64, false).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => fail!(
                ffi::FI_ENOENT,
                "fi_av_open with FI_READ: no AV named {shown} exists (its creator opens it first, without FI_READ)"
            ),
            _ => io_fail(&format!("fi_av_open with FI_READ: the named AV {shown}"), &e),
        })?;
        let live = dir::file_locked_elsewhere(fd.as_fd())
            .map_err(|e| io_fail(&format!("fi_av_open: checking {}", dir.file(&fname)), &e))?;
        let file = File::from(fd);
        let (h, _) = read_header(&file).map_err(|why| {
            fail!(ffi::FI_EINVAL, "fi_av_open with FI_READ: {} is not a named AV ({why})", dir.file(&fname))
        })?;
        if h.flags & FLAG_CLOSED != 0 || !live {
            return Err(fail!(
                ffi::FI_ENOENT,
                "fi_av_open with FI_READ: the named AV {shown} is gone (its creator, process {}, {})",
                h.pid,
                if live { "closed it" } else { "exited without closing it" }
            ));
        }
        Ok(SharedFile {
            name: shown,
            dir,
            file_name: fname,
            file,
            st,
            writer: None,
            closed: false.into(),
            capacity: h.capacity as usize,
            salt: h.salt,
            map: h.flags & FLAG_MAP != 0,
        })
    }

    /// The most entries the AV holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether the creator opened it FI_AV_MAP (else FI_AV_TABLE).
    pub fn is_map(&self) -> bool {
        self.map
    }

    /// The application's name of the AV, quoted, for log lines.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The creator: write entries (`Some`: live at that index, `None`:
    /// removed, with the address it had) and publish `used` entries. The
    /// change is bracketed by `seq` (odd while it is written); on an error
    /// the header is still made even again, and the caller keeps its
    /// table as it was.
    pub fn record(&self, entries: &[(usize, u32, SocketAddr)], used: usize, removal: bool) -> io::Result<()> {
        let Some((h, token)) = &self.writer else {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        };
        if *token != crate::sys::process_token() {
            return Err(io::Error::other("a forked child of the creator does not write the creator's AV"));
        }
        let mut h = h.lock_ok();
        h.seq = h.seq.wrapping_add(1) | 1;
        let mut res = self.file.write_all_at(&h.seq.to_le_bytes(), 32);
        if res.is_ok() {
            for &(i, state, a) in entries {
                res = self.file.write_all_at(&entry_bytes(self.salt, i, state, &a), (HEADER + i * ENTRY) as u64);
                if res.is_err() {
                    break;
                }
            }
        }
        if res.is_ok() {
            h.used = used as u64;
            if removal {
                h.removes += 1;
            }
        }
        h.seq = h.seq.wrapping_add(1);
        let head = self.file.write_all_at(&h.bytes(), 0);
        res.and(head)
    }

    /// A live entry's state code, for `record`.
    pub(crate) const LIVE: u32 = LIVE;
    /// A removed entry's state code, for `record`.
    pub(crate) const REMOVED: u32 = REMOVED;

    /// A reader: what the creator published since `st` (None: nothing
    /// new, or nothing usable; a file gone bad is said once and read no
    /// more).
    pub fn read_new(&self, st: &mut ReadState) -> Option<Fresh> {
        if st.done || self.writer.is_some() {
            return None;
        }
        for _ in 0..TRIES {
            let (h1, b1) = match read_header(&self.file) {
                Ok(x) => x,
                Err(why) => return self.give_up(st, &why),
            };
            if h1.capacity != self.capacity as u64 || h1.salt != self.salt {
                return self.give_up(st, "its header was rewritten (another capacity or salt)");
            }
            if h1.seq == st.seq && h1.flags & FLAG_CLOSED == 0 {
                return None;
            }
            if h1.seq & 1 == 1 {
                std::thread::yield_now();
                continue;
            }
            let used = h1.used as usize;
            let from = if h1.removes == st.removes && used >= st.used { st.used } else { 0 };
            let mut buf = vec![0u8; (used - from) * ENTRY];
            if let Err(e) = self.file.read_exact_at(&mut buf, (HEADER + from * ENTRY) as u64) {
                let why = if e.kind() == io::ErrorKind::UnexpectedEof {
                    "it was truncated below the entries its header publishes".to_string()
                } else {
                    format!("its entries cannot be read ({e})")
                };
                return self.give_up(st, &why);
            }
            match read_header(&self.file) {
                Ok((_, b2)) if b2 == b1 => {}
                Ok(_) => {
                    std::thread::yield_now();
                    continue;
                }
                Err(why) => return self.give_up(st, &why),
            }
            let slots = buf.chunks(ENTRY).enumerate().map(|(k, e)| parse_entry(self.salt, from + k, e)).collect();
            (st.seq, st.used, st.removes) = (h1.seq, used, h1.removes);
            if h1.flags & FLAG_CLOSED != 0 {
                st.done = true;
                tracing::info!(
                    "the named AV {} was closed by its creator (process {}): its {used} entries stay as read",
                    self.name,
                    h1.pid
                );
            }
            return Some(Fresh { from, slots });
        }
        // Changing all the time, or left mid-change by a creator that died.
        let gone = dir::file_locked_elsewhere(self.file.as_fd()).is_ok_and(|live| !live);
        if gone {
            return self.give_up(st, "its creator died while changing it");
        }
        None
    }

    fn give_up(&self, st: &mut ReadState, why: &str) -> Option<Fresh> {
        st.done = true;
        tracing::warn!(
            "the named AV {} ({}): {why}; keeping the {} entries read before, and reading it no more",
            self.name,
            self.dir.file(&self.file_name),
            st.used
        );
        None
    }
}

impl SharedFile {
    /// The creator's close (once; nothing for a reader or a forked child
    /// of the creator): mark the file closed (readers keep what they
    /// read) and remove it (the name is free).
    pub fn close(&self) {
        let Some((h, token)) = &self.writer else { return };
        if *token != crate::sys::process_token() || self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let mut h = h.lock_ok();
        h.flags |= FLAG_CLOSED;
        h.seq = h.seq.wrapping_add(2) & !1;
        let _ = self.file.write_all_at(&h.bytes(), 0);
        self.dir.unlink_if_same(&self.file_name, &self.st);
    }
}

impl Drop for SharedFile {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn a(i: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 1000 + i))
    }

    #[test]
    fn names_are_encoded_into_one_file_name() {
        assert_eq!(file_name(b"client_av").unwrap(), "av-client_av");
        assert_eq!(file_name(b"/x y").unwrap(), "av-%2Fx%20y");
        assert_eq!(file_name(b"../..").unwrap(), "av-..%2F..");
        assert!(file_name(b"").is_err());
        assert!(file_name(&[b'%'; MAX_NAME]).unwrap().len() < 255);
        assert!(file_name(&[b'a'; MAX_NAME + 1]).is_err());
    }

    #[test]
    fn entries_round_trip_and_every_damage_is_named() {
        let salt = 0x1234;
        for addr in [a(1), "[fe80::1%3]:7".parse().unwrap()] {
            let b = entry_bytes(salt, 5, LIVE, &addr);
            assert_eq!(parse_entry(salt, 5, &b), Slot::Live(addr));
            assert_eq!(parse_entry(salt, 5, &entry_bytes(salt, 5, REMOVED, &addr)), Slot::Removed);
            let bad = |s: Slot| match s {
                Slot::Bad(why) => why,
                s => panic!("{s:?}"),
            };
            assert!(bad(parse_entry(salt, 6, &b)).contains("check") || bad(parse_entry(salt, 6, &b)).contains("index"));
            assert!(bad(parse_entry(salt + 1, 5, &b)).contains("check"));
            assert!(bad(parse_entry(salt, 5, &[0u8; ENTRY])).contains("empty"));
            assert!(bad(parse_entry(salt, 5, &b[..10])).contains("short"));
            for i in 0..56 {
                let mut c = b;
                c[i] ^= 0x40;
                assert!(matches!(parse_entry(salt, 5, &c), Slot::Bad(_)), "byte {i} flipped");
            }
            // A well-checked entry (a scribbler may compute the check too)
            // with nonsense inside is still refused.
            let mut c = b;
            c[4..8].copy_from_slice(&20u32.to_le_bytes());
            let k = check(salt, &c[..48]);
            c[48..56].copy_from_slice(&k.to_le_bytes());
            assert!(bad(parse_entry(salt, 5, &c)).contains("length"));
            let mut c = b;
            c[8..10].copy_from_slice(&99u16.to_ne_bytes());
            let k = check(salt, &c[..48]);
            c[48..56].copy_from_slice(&k.to_le_bytes());
            assert!(bad(parse_entry(salt, 5, &c)).contains("sockaddr"));
            let mut c = b;
            c[0..4].copy_from_slice(&7u32.to_le_bytes());
            let k = check(salt, &c[..48]);
            c[48..56].copy_from_slice(&k.to_le_bytes());
            assert!(bad(parse_entry(salt, 5, &c)).contains("state"));
        }
    }

    #[test]
    fn a_header_out_of_bounds_is_refused() {
        let h = Header { capacity: 8, used: 3, seq: 2, salt: 9, pid: 1, flags: FLAG_MAP, removes: 0 };
        assert_eq!(Header::parse(&h.bytes()).unwrap(), h);
        for (bad, what) in [
            (Header { capacity: 0, ..h }, "capacity"),
            (Header { capacity: MAX_ENTRIES as u64 + 1, ..h }, "capacity"),
            (Header { used: 9, ..h }, "claims"),
            (Header { flags: 8, ..h }, "flags"),
        ] {
            assert!(Header::parse(&bad.bytes()).unwrap_err().contains(what), "{bad:?}");
        }
        let mut b = h.bytes();
        b[0] = b'X';
        assert!(Header::parse(&b).unwrap_err().contains("magic"));
        let mut b = h.bytes();
        b[12] = 32;
        assert!(Header::parse(&b).unwrap_err().contains("layout"));
    }
}
