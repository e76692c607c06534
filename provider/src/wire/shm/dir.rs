//! The per-user directory of the same-host wire, and the checked opening
//! of the files in it.
//!
//! /dev/shm is writable by every user. With queues at names any user could
//! create, another user could take an endpoint's name first (fi_endpoint
//! failed), place a file that a peer then wrote its messages into, or
//! truncate a queue under its mappers (SIGBUS). So everything of the wire
//! lives in `/dev/shm/oxmr-u<euid>/`, a directory of this uid that group
//! and others cannot enter: only this user's processes (and root) can put
//! anything there, and /dev/shm's sticky bit keeps others from renaming
//! or removing the directory itself.
//!
//! The directory is checked once per process, through its fd (`Dir::user`):
//! one that is not such a directory (another user made it first, or it is
//! a link) is refused with one log line, and the process has no shared-
//! memory wire (its endpoints take TCP: `wire::Dial`). Files in it are
//! still opened without following a link or blocking on a FIFO, and
//! checked through their fd (a regular file of ours, mode 0600, long
//! enough) before anything maps them: the directory keeps other users out,
//! the checks keep a stray or broken file of our own out.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file a peer's queue should be, refused: what is wrong with it (for
/// the log line of the link that could not open).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub file: String,
    pub what: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refusing {}: {}", self.file, self.what)
    }
}

impl std::error::Error for Refused {}

impl Refused {
    pub(super) fn error(file: String, what: impl Into<String>) -> io::Error {
        io::Error::new(io::ErrorKind::PermissionDenied, Refused { file, what: what.into() })
    }

    /// The refusal an error carries, if it is one.
    pub fn of(e: &io::Error) -> Option<&Refused> {
        e.get_ref().and_then(|x| x.downcast_ref::<Refused>())
    }
}

/// An open, checked per-user directory.
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    /// The uid every file in it must belong to (ours).
    uid: u32,
    /// The pid that last swept it for stale files (`region::reclaim_stale`).
    pub(super) swept_by: std::sync::atomic::AtomicU32,
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn cstr(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// What kind of file `mode` names, in words, when it is not a regular one.
fn kind(mode: libc::mode_t) -> Option<&'static str> {
    match mode & libc::S_IFMT {
        libc::S_IFREG => None,
        libc::S_IFIFO => Some("a FIFO, not a regular file"),
        libc::S_IFLNK => Some("a symbolic link, not a regular file"),
        libc::S_IFDIR => Some("a directory, not a regular file"),
        libc::S_IFSOCK => Some("a socket, not a regular file"),
        libc::S_IFCHR | libc::S_IFBLK => Some("a device node, not a regular file"),
        _ => Some("not a regular file"),
    }
}

/// What is wrong with a file of ours that should hold at least `min`
/// bytes (None: nothing): a regular file, of `uid`, mode exactly 0600.
pub fn what_is_wrong(st: &libc::stat, uid: u32, min: u64) -> Option<String> {
    if let Some(k) = kind(st.st_mode) {
        return Some(k.into());
    }
    if st.st_uid != uid {
        return Some(format!("it belongs to uid {}, not to this process's uid {uid}", st.st_uid));
    }
    if st.st_mode & 0o7777 != 0o600 {
        return Some(format!("its mode is {:04o}, not 0600", st.st_mode & 0o7777));
    }
    if (st.st_size as u64) < min {
        return Some(format!("it holds {} bytes, fewer than the {min} a queue needs", st.st_size));
    }
    None
}

/// The directory's name under /dev/shm for the user `uid`.
pub fn user_dir_name(uid: u32) -> String {
    format!("oxmr-u{uid}")
}

impl Dir {
    /// This process's per-user directory (`/dev/shm/oxmr-u<euid>`), made
    /// and checked at the first call; Err (and one log line, at that
    /// call) when it is not ours: the process then has no shared-memory
    /// wire.
    pub fn user() -> Result<Arc<Dir>, String> {
        static USER: std::sync::OnceLock<Result<Arc<Dir>, String>> = std::sync::OnceLock::new();
        USER.get_or_init(|| {
            let name = user_dir_name(euid());
            Dir::open_in(Path::new("/dev/shm"), &name).map(Arc::new).inspect_err(|why| {
                tracing::warn!(
                    "the shared-memory wire is off in this process: /dev/shm/{name} {why}; it must be a directory of uid {} that no one else may enter (another user may have made it first to block or spy on this user's endpoints: ask root to remove it). Endpoints take TCP only (as FI_OXMR_WIRE=tcp)",
                    euid()
                )
            })
        })
        .clone()
    }

    /// Open `parent/name` as a per-user directory, making it (mode 0700)
    /// if absent; Err says what is wrong with one that is there.
    pub fn open_in(parent: &Path, name: &str) -> Result<Dir, String> {
        let uid = euid();
        let p = cstr(&parent.to_string_lossy()).map_err(|e| e.to_string())?;
        // SAFETY: a valid C string; the fd is owned just below.
        let pfd = cvt(unsafe { libc::open(p.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC) })
            .map_err(|e| format!("cannot be made: {} cannot be opened ({e})", parent.display()))?;
        // SAFETY: the fd was just opened and is owned by nothing else.
        let pfd = unsafe { OwnedFd::from_raw_fd(pfd) };
        let n = cstr(name).map_err(|e| e.to_string())?;
        // SAFETY: a directory fd and a valid C string.
        let made = match cvt(unsafe { libc::mkdirat(pfd.as_raw_fd(), n.as_ptr(), 0o700) }) {
            Ok(_) => true,
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => false,
            Err(e) => return Err(format!("cannot be made ({e})")),
        };
        // (O_NOFOLLOW: a link placed at the name is refused, never
        // followed to a directory someone else chose.)
        // SAFETY: a directory fd and a valid C string; the fd is owned below.
        let fd = cvt(unsafe {
            libc::openat(
                pfd.as_raw_fd(),
                n.as_ptr(),
                libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_RDONLY | libc::O_CLOEXEC,
            )
        })
        .map_err(|e| match e.raw_os_error() {
            // (O_NOFOLLOW with O_DIRECTORY answers ENOTDIR for a link.)
            Some(libc::ELOOP | libc::ENOTDIR) => match lstat_at(pfd.as_raw_fd(), &n) {
                Ok(st) => match kind(st.st_mode) {
                    Some(k) => format!("is {}", k.replace("a regular file", "a directory")),
                    None => "is a regular file, not a directory".into(),
                },
                Err(_) => "is not a directory".to_string(),
            },
            _ => format!("cannot be opened ({e})"),
        })?;
        // SAFETY: the fd was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if made {
            // (The umask may have taken bits of our own away.)
            // SAFETY: our directory fd.
            let _ = unsafe { libc::fchmod(fd.as_raw_fd(), 0o700) };
        }
        let st = fstat(fd.as_raw_fd()).map_err(|e| format!("cannot be checked ({e})"))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err("is not a directory".into());
        }
        if st.st_uid != uid {
            return Err(format!("belongs to uid {}, not to this process's uid {uid}", st.st_uid));
        }
        if st.st_mode & 0o077 != 0 {
            return Err(format!("has mode {:04o}: group or others may use it", st.st_mode & 0o7777));
        }
        Ok(Dir { fd, path: parent.join(name), uid, swept_by: 0.into() })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in the directory (for log lines and sockets).
    pub fn file(&self, name: &str) -> String {
        self.path.join(name).to_string_lossy().into_owned()
    }

    /// The uid every file in the directory must have.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// The names in the directory.
    pub fn names(&self) -> Vec<String> {
        std::fs::read_dir(&self.path)
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default()
    }

    /// `name`'s status, the name itself (a link is not followed).
    pub fn lstat(&self, name: &str) -> io::Result<libc::stat> {
        lstat_at(self.fd.as_raw_fd(), &cstr(name)?)
    }

    /// Create `name` (it must not exist), a regular file of mode 0600.
    pub fn create(&self, name: &str) -> io::Result<OwnedFd> {
        let n = cstr(name)?;
        // SAFETY: our directory fd and a valid C string; the fd is owned below.
        let fd = cvt(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                n.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600 as libc::c_uint,
            )
        })?;
        // SAFETY: the fd was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // (Exactly 0600 whatever the umask: peers check for it.)
        // SAFETY: our new fd.
        cvt(unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) })?;
        Ok(fd)
    }

    /// Open `name` (read-write or read-only) as a file of ours of at least
    /// `min` bytes: ENOENT when nothing has the name, a `Refused` error
    /// saying what is wrong with anything else. Nothing but a regular
    /// file is ever opened (a FIFO could block, a device could act on the
    /// open), and the check is made again through the fd.
    pub fn open_checked(&self, name: &str, min: u64, write: bool) -> io::Result<(OwnedFd, libc::stat)> {
        let st = self.lstat(name)?;
        if let Some(what) = what_is_wrong(&st, self.uid, min) {
            return Err(Refused::error(self.file(name), what));
        }
        let n = cstr(name)?;
        let mode = if write { libc::O_RDWR } else { libc::O_RDONLY };
        // SAFETY: our directory fd and a valid C string; the fd is owned below.
        let fd = cvt(unsafe {
            libc::openat(self.fd.as_raw_fd(), n.as_ptr(), mode | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        })
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => Refused::error(self.file(name), "a symbolic link, not a regular file"),
            _ => e,
        })?;
        // SAFETY: the fd was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // (Again through the fd: the name may have been replaced between
        // the two calls.)
        let st = fstat(fd.as_raw_fd())?;
        if let Some(what) = what_is_wrong(&st, self.uid, min) {
            return Err(Refused::error(self.file(name), what));
        }
        Ok((fd, st))
    }

    /// Rename `from` to `to` unless `to` exists (EEXIST then).
    pub fn rename_new(&self, from: &str, to: &str) -> io::Result<()> {
        let (f, t) = (cstr(from)?, cstr(to)?);
        let d = self.fd.as_raw_fd();
        // SAFETY: our directory fd (both sides) and valid C strings.
        cvt(unsafe { libc::renameat2(d, f.as_ptr(), d, t.as_ptr(), libc::RENAME_NOREPLACE) }).map(|_| ())
    }

    /// Remove `name` (not a directory).
    pub fn unlink(&self, name: &str) -> io::Result<()> {
        let n = cstr(name)?;
        // SAFETY: our directory fd and a valid C string.
        cvt(unsafe { libc::unlinkat(self.fd.as_raw_fd(), n.as_ptr(), 0) }).map(|_| ())
    }

    /// Remove `name` if it is still the file `st` describes (another
    /// process may have put a new one there since: removing that would
    /// cut a live endpoint off). Whether it was removed.
    pub fn unlink_if_same(&self, name: &str, st: &libc::stat) -> bool {
        match self.lstat(name) {
            Ok(now) if now.st_ino == st.st_ino && now.st_dev == st.st_dev => self.unlink(name).is_ok(),
            _ => false,
        }
    }
}

/// Take a write lock on the whole file through `fd` (an open file
/// description lock, `F_OFD_SETLK`: held until the last fd of this
/// description closes, so until the holder exits, whatever it does; never
/// blocks). Ok(false): another open file description holds a lock on it.
/// `fd` must be open for writing.
pub fn try_lock_file(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut fl = whole_file_lock();
    // SAFETY: our fd and a valid `struct flock` the call reads.
    match cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) }) {
        Ok(_) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether an open file description other than `fd`'s holds a lock on
/// the file (`F_OFD_GETLK`: asks, takes nothing; works on a read-only fd).
pub fn file_locked_elsewhere(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut fl = whole_file_lock();
    // SAFETY: our fd and a valid `struct flock` the call fills.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) })?;
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// A write lock on the whole file, for the OFD calls (l_pid 0, as they
/// require).
fn whole_file_lock() -> libc::flock {
    // SAFETY: an all-zero `struct flock` is a valid value (every field is
    // an integer).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl
}

/// The status of `name` in the directory `dir`, the name itself.
fn lstat_at(dir: libc::c_int, name: &CString) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `struct stat` is a valid value to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a directory fd, a valid C string, a stat to fill.
    cvt(unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

/// A file's status through its fd.
pub fn fstat(fd: libc::c_int) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `struct stat` is a valid value to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an fd of ours and a stat to fill.
    cvt(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::PermissionsExt;

    /// A parent directory of our own for a test's per-user directory (on
    /// /dev/shm, the file system the wire uses), removed on drop.
    pub(crate) struct Scratch(pub PathBuf);

    impl Scratch {
        pub(crate) fn new(tag: &str) -> Scratch {
            let p = PathBuf::from(format!("/dev/shm/oxmr-test-{}-{tag}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir(&p).unwrap();
            Scratch(p)
        }

        pub(crate) fn dir(&self) -> Arc<Dir> {
            Arc::new(Dir::open_in(&self.0, "u").expect("a fresh per-user directory"))
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(crate) fn mkfifo(p: &Path) {
        let c = CString::new(p.to_string_lossy().as_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo {}", p.display());
    }

    fn chown(p: &Path, uid: u32) -> bool {
        std::os::unix::fs::lchown(p, Some(uid), Some(uid)).is_ok()
    }

    #[test]
    fn a_new_directory_is_made_private_and_reopened_as_is() {
        let s = Scratch::new("dir-new");
        let d = Dir::open_in(&s.0, "u").unwrap();
        let m = std::fs::symlink_metadata(d.path()).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.permissions().mode() & 0o7777, 0o700);
        drop(d);
        Dir::open_in(&s.0, "u").expect("our own directory, again");
    }

    #[test]
    fn a_directory_others_may_enter_or_not_ours_or_not_a_directory_is_refused() {
        let s = Scratch::new("dir-bad");
        let p = s.0.join("u");
        std::fs::create_dir(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        let why = Dir::open_in(&s.0, "u").err().expect("a directory of mode 0755");
        assert!(why.contains("mode 0755"), "{why}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o701)).unwrap();
        assert!(Dir::open_in(&s.0, "u").is_err(), "others may search it");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        if euid() == 0 && chown(&p, 65534) {
            let why = Dir::open_in(&s.0, "u").err().expect("a directory of uid 65534");
            assert!(why.contains("uid 65534"), "{why}");
        }
        std::fs::remove_dir(&p).unwrap();
        let elsewhere = s.0.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &p).unwrap();
        let why = Dir::open_in(&s.0, "u").err().expect("a link to a good directory");
        assert!(why.contains("symbolic link"), "{why}");
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, b"").unwrap();
        let why = Dir::open_in(&s.0, "u").err().expect("a file");
        assert!(why.contains("not a directory"), "{why}");
    }

    #[test]
    fn only_a_regular_private_file_of_ours_long_enough_is_opened() {
        let s = Scratch::new("files");
        let d = s.dir();
        let at = |n: &str| d.path().join(n);
        let refusal = |n: &str, min: u64| match d.open_checked(n, min, true) {
            Ok(_) => panic!("{n} was opened"),
            Err(e) => Refused::of(&e).unwrap_or_else(|| panic!("{n}: not a refusal: {e}")).what.clone(),
        };
        drop(d.create("good").unwrap());
        std::fs::write(at("good"), [0u8; 64]).unwrap();
        d.open_checked("good", 64, true).expect("a private regular file of ours");
        assert!(refusal("good", 65).contains("fewer than"), "a short file");
        assert_eq!(d.open_checked("absent", 0, true).unwrap_err().raw_os_error(), Some(libc::ENOENT));
        mkfifo(&at("fifo"));
        assert!(refusal("fifo", 0).contains("FIFO"));
        std::os::unix::fs::symlink(at("good"), at("link")).unwrap();
        assert!(refusal("link", 0).contains("symbolic link"));
        std::fs::create_dir(at("sub")).unwrap();
        assert!(refusal("sub", 0).contains("directory"));
        let _sock = std::os::unix::net::UnixDatagram::bind(at("sock")).unwrap();
        assert!(refusal("sock", 0).contains("socket"));
        for mode in [0o666, 0o644, 0o400, 0o700, 0o4600] {
            std::fs::write(at("mode"), [0u8; 8]).unwrap();
            std::fs::set_permissions(at("mode"), std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(refusal("mode", 0).contains(&format!("{mode:04o}")), "mode {mode:o}");
            std::fs::remove_file(at("mode")).unwrap();
        }
        if euid() == 0 {
            std::fs::write(at("theirs"), [0u8; 8]).unwrap();
            std::fs::set_permissions(at("theirs"), std::fs::Permissions::from_mode(0o600)).unwrap();
            assert!(chown(&at("theirs"), 65534));
            assert!(refusal("theirs", 0).contains("uid 65534"), "another user's file");
        }
    }

    #[test]
    fn a_file_lock_is_seen_from_another_open_and_goes_with_its_holder() {
        let s = Scratch::new("lock");
        let d = s.dir();
        let a = d.create("f").unwrap();
        let (b, _) = d.open_checked("f", 0, true).unwrap();
        let (r, _) = d.open_checked("f", 0, false).unwrap();
        assert!(!file_locked_elsewhere(r.as_fd()).unwrap(), "no lock yet");
        assert!(try_lock_file(a.as_fd()).unwrap(), "the first lock is taken");
        assert!(try_lock_file(a.as_fd()).unwrap(), "its holder may take it again");
        assert!(file_locked_elsewhere(r.as_fd()).unwrap(), "a read-only open sees it");
        assert!(!try_lock_file(b.as_fd()).unwrap(), "another open cannot take it");
        drop(a);
        assert!(!file_locked_elsewhere(r.as_fd()).unwrap(), "it went with its fd");
        assert!(try_lock_file(b.as_fd()).unwrap());
    }

    #[test]
    fn a_file_is_created_0600_and_never_over_another_or_through_a_link() {
        let s = Scratch::new("create");
        let d = s.dir();
        drop(d.create("q").unwrap());
        let m = std::fs::symlink_metadata(d.path().join("q")).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o600);
        assert_eq!(d.create("q").unwrap_err().raw_os_error(), Some(libc::EEXIST));
        std::os::unix::fs::symlink("/dev/shm/elsewhere", d.path().join("l")).unwrap();
        assert!(d.create("l").is_err(), "a dangling link at the name is not followed");
        assert!(!Path::new("/dev/shm/elsewhere").exists());
    }
}
