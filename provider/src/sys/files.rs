//! Files that must be ours alone: opened without following a link or
//! blocking on a FIFO, and checked (regular, our uid, no access for
//! anyone else) through the descriptor, not the path (no window between
//! the check and the use).

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Open `path` for reading and check that it is a regular file owned by
/// this process's effective uid that neither group nor others may read or
/// write (what is wrong otherwise, in words for a log line).
pub fn open_private(path: &Path) -> Result<File, String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "it is a symbolic link (name the file itself)".to_string(),
            _ => format!("cannot open it: {e}"),
        })?;
    let m = f.metadata().map_err(|e| format!("cannot stat it: {e}"))?;
    if !m.file_type().is_file() {
        return Err("it is not a regular file".into());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if m.uid() != me {
        return Err(format!("it belongs to uid {}, not to this process's uid {me}", m.uid()));
    }
    if m.mode() & 0o077 != 0 {
        return Err(format!("its mode {:o} lets others read or write it (chmod 600 it)", m.mode() & 0o777));
    }
    Ok(f)
}

/// The bytes of a private file (`open_private`) of at most `max` bytes.
pub fn read_private_file(path: &Path, max: usize) -> Result<Vec<u8>, String> {
    let f = open_private(path)?;
    let mut b = Vec::new();
    f.take(max as u64 + 1).read_to_end(&mut b).map_err(|e| format!("cannot read it: {e}"))?;
    if b.len() > max {
        return Err(format!("it is longer than {max} bytes"));
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str, mode: u32) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("oxmr-files-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, b"0123456789abcdef\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn a_private_file_is_read_and_others_are_refused_with_the_reason() {
        let ok = scratch("ok", 0o600);
        assert_eq!(read_private_file(&ok, 64).unwrap(), b"0123456789abcdef\n");
        let open = scratch("open", 0o644);
        assert!(read_private_file(&open, 64).unwrap_err().contains("chmod 600"));
        let link = ok.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&ok, &link).unwrap();
        assert!(read_private_file(&link, 64).unwrap_err().contains("symbolic link"));
        assert!(read_private_file(&ok, 4).unwrap_err().contains("longer"));
        let dir = std::env::temp_dir();
        assert!(read_private_file(&dir, 64).is_err(), "a directory");
        for p in [ok, open, link] {
            let _ = std::fs::remove_file(p);
        }
    }
}
