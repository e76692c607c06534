//! Whether a queue's owner lives, and what a queue records of its process.

use std::io;

/// Whether a process is alive: it exists and is not a zombie (a killed
/// process that its parent has not reaped yet answers kill(0) but will
/// never read its queue again).
pub fn pid_alive(pid: u32) -> bool {
    owner_alive(pid, 0)
}

/// Whether `pid` names a process (kill(0): no /proc read).
fn exists(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    pid != 0
        && (unsafe { libc::kill(pid as i32, 0) } == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// /proc/<pid>/stat, None if it cannot be read.
fn stat(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()
}

/// A stat line from the state on: "pid (comm) S ppid ...", after the
/// last ')' (comm may hold spaces or ')').
fn fields(stat: &str) -> Option<&str> {
    stat.rsplit_once(')').map(|(_, rest)| rest.trim_start())
}

/// A process's start time (/proc/<pid>/stat field 22), None if it cannot
/// be read (no such process).
pub fn start_time(pid: u32) -> Option<u64> {
    start_of(fields(&stat(pid)?)?)
}

/// Field 22, starttime: the 20th from the state on.
fn start_of(fields: &str) -> Option<u64> {
    fields.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process that was `pid` when it started at `start` is
/// alive: it exists, is not a zombie, and (`start` known, not 0) the
/// process now at that pid started then, not a later process that reuses
/// the pid. One read of /proc/<pid>/stat answers both (the engines ask
/// this of every peer every 100 ms); one that cannot be read leaves kill(0)
/// to decide.
pub fn owner_alive(pid: u32, start: u64) -> bool {
    if !exists(pid) {
        return false;
    }
    let Some(st) = stat(pid) else { return true };
    let Some(f) = fields(&st) else { return true };
    if matches!(f.chars().next(), Some('Z' | 'X')) {
        return false;
    }
    start == 0 || start_of(f).is_none_or(|s| s == start)
}

/// This process's network namespace (`Header::netns`; 0 if unknown).
pub(super) fn netns() -> u64 {
    static NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NS.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino())
    })
}
