//! Whether a queue's owner lives, and what a queue records of its process.

use std::io;

/// Whether a process is alive: it exists and is not a zombie (a killed
/// process that its parent has not reaped yet answers kill(0) but will
/// never read its queue again).
pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let exists = pid != 0
        && (unsafe { libc::kill(pid as i32, 0) } == 0
            || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM));
    if !exists {
        return false;
    }
    // /proc/<pid>/stat: "pid (comm) S ..."; comm may hold spaces or ')'.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(st) => {
            !matches!(st.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()), Some('Z' | 'X'))
        }
        Err(_) => true,
    }
}

/// A process's start time (/proc/<pid>/stat field 22), None if it cannot
/// be read (no such process).
pub fn start_time(pid: u32) -> Option<u64> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid ...": fields from the state on, after the last ')'
    // (comm may hold spaces or ')'); starttime is field 22, the 20th there.
    st.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process that was `pid` when it started at `start` is
/// alive: `pid_alive`, and (`start` known, not 0) the process now at that
/// pid started then, not a later process that reuses the pid.
pub fn owner_alive(pid: u32, start: u64) -> bool {
    pid_alive(pid) && (start == 0 || start_time(pid).is_none_or(|s| s == start))
}

/// This process's network namespace (`Header::netns`; 0 if unknown).
pub(super) fn netns() -> u64 {
    static NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NS.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino())
    })
}
