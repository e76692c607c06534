//! RLIMIT_MEMLOCK, for real: a child process runs as an unprivileged user
//! (uid 65534, no capabilities) with a 1 MiB memlock limit (setpriv +
//! prlimit) and shows both oxmr's cap (taken from the limit) and the
//! kernel's own refusal of an io_uring pin past it.

use std::process::Command;

use oxmr::mr::account::{default_cap, Account, CapSource};
use oxmr::mr::pin::{PinMode, Pinner};
use oxmr_ffi as ffi;

const LIMIT: u64 = 1 << 20;

fn anon(len: usize) -> usize {
    // SAFETY: anonymous private mapping, touched; leaked at process exit.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        std::ptr::write_bytes(p as *mut u8, 1, len);
        p as usize
    }
}

/// The child's body: only runs inside the limited child.
#[test]
#[ignore = "run by memlock_limit_is_enforced in a limited child"]
fn memlock_child() {
    assert_eq!(std::env::var("OXMR_MEMLOCK_CHILD").as_deref(), Ok("1"), "run through memlock_limit_is_enforced");
    // SAFETY: getuid has no preconditions.
    assert_ne!(unsafe { libc::getuid() }, 0, "must run unprivileged");
    let access = ffi::FI_REMOTE_WRITE as u64;

    // oxmr's cap comes from RLIMIT_MEMLOCK and refuses before pinning.
    let (cap, src) = default_cap(None);
    assert_eq!((cap, src), (Some(LIMIT), CapSource::Rlimit));
    let p = Pinner::new(PinMode::Uring, Account::new(cap, src));
    assert_eq!(p.mode(), PinMode::Uring, "io_uring usable unprivileged");
    let small = p.pin(&[(anon(512 << 10), 512 << 10)], access).expect("512 KiB fits in 1 MiB");
    let e = p.pin(&[(anon(2 << 20), 2 << 20)], access).err().expect("2 MiB is over the cap");
    assert_eq!(e.code(), ffi::FI_ENOMEM);
    assert_eq!(p.acct.pinned(), 512 << 10, "the refused pin left nothing behind");
    drop(small);

    // Without oxmr's cap, the kernel itself refuses the io_uring pin.
    let p = Pinner::new(PinMode::Uring, Account::new(None, CapSource::Variable));
    let e = p.pin(&[(anon(4 << 20), 4 << 20)], access).err().expect("the kernel enforces RLIMIT_MEMLOCK");
    assert_eq!(e.code(), ffi::FI_ENOMEM);
    // And mlock, the fallback, is held to the same limit.
    let p = Pinner::new(PinMode::Mlock, Account::new(None, CapSource::Variable));
    let e = p.pin(&[(anon(4 << 20), 4 << 20)], access).err().expect("mlock is limited too");
    assert_eq!(e.code(), ffi::FI_ENOMEM);
    println!("CHILD-OK");
}

#[test]
fn memlock_limit_is_enforced() {
    // (A test that cannot run here fails, saying why: a skip would show
    // as a pass. To leave it out on purpose: `-- --skip memlock_limit`.)
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    assert_eq!(uid, 0, "cannot run here: needs root to switch to an unprivileged user (CI runs as root)");
    let exe = std::env::current_exe().unwrap();
    // The test binary must be reachable by uid 65534 (a checkout under a
    // private home directory is not): say so.
    let reachable = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", "test", "-x"])
        .arg(&exe)
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        reachable,
        "cannot run here: {} is not executable by uid 65534 (a checkout under a private directory); check out elsewhere",
        exe.display()
    );
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--"])
        .arg("prlimit")
        .arg(format!("--memlock={LIMIT}:{LIMIT}"))
        .arg(&exe)
        .args(["--exact", "memlock_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env("OXMR_MEMLOCK_CHILD", "1")
        .output()
        .expect("setpriv and prlimit (util-linux) are installed by ci/setup.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stdout.contains("CHILD-OK"), "child failed:\n{stdout}\n{stderr}");
}
