use super::files::*;
use super::process::*;
use super::*;
use crate::wire::shm::dir::Refused;
use std::net::SocketAddr;

use crate::wire::shm::dir::tests::{mkfifo, Scratch};
use std::os::unix::fs::PermissionsExt;

/// A process that is gone: it exited and was reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    dead
}

fn refusal(e: io::Error) -> String {
    Refused::of(&e).unwrap_or_else(|| panic!("not a refusal: {e}")).to_string()
}

#[test]
fn a_peer_queue_whose_locator_is_not_a_private_file_of_ours_is_refused() {
    let s = Scratch::new("refused");
    let d = s.dir();
    let a: SocketAddr = "127.0.0.1:4001".parse().unwrap();
    let name = queue_names(&a).next().unwrap();
    let at = d.path().join(&name);
    // (Each check alone: a real queue of ours, then one thing wrong.)
    let own = Region::create_in(&d, &a, None).unwrap();
    assert_eq!(own.file_name(), name);
    Region::open_in(&d, &a, None).expect("our own queue, as a peer opens it");
    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o666)).unwrap();
    let why = refusal(Region::open_in(&d, &a, None).err().expect("a world-writable locator"));
    assert!(why.contains(&*at.to_string_lossy()) && why.contains("0666"), "{why}");
    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o600)).unwrap();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::lchown(&at, Some(65534), Some(65534)).unwrap();
        let why = refusal(Region::open_in(&d, &a, None).err().expect("another user's locator"));
        assert!(why.contains("uid 65534"), "{why}");
        std::os::unix::fs::lchown(&at, Some(0), Some(0)).unwrap();
    }
    std::fs::rename(&at, d.path().join("real")).unwrap();
    std::os::unix::fs::symlink(d.path().join("real"), &at).unwrap();
    let why = refusal(Region::open_in(&d, &a, None).err().expect("a link to a real locator"));
    assert!(why.contains("symbolic link"), "{why}");
    std::fs::remove_file(&at).unwrap();
    mkfifo(&at);
    let why = refusal(Region::open_in(&d, &a, None).err().expect("a FIFO"));
    assert!(why.contains("FIFO"), "{why}");
    std::fs::remove_file(&at).unwrap();
    let real = std::fs::read(d.path().join("real")).unwrap();
    std::fs::write(&at, &real[..LOC_SIZE - 1]).unwrap();
    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o600)).unwrap();
    let why = refusal(Region::open_in(&d, &a, None).err().expect("a short locator"));
    assert!(why.contains("fewer than"), "{why}");
    std::fs::write(&at, [0u8; LOC_SIZE]).unwrap();
    let why = refusal(Region::open_in(&d, &a, None).err().expect("a file of zeros"));
    assert!(why.contains("not an oxmr queue"), "{why}");
    // Another endpoint's locator put at this name.
    std::fs::remove_file(&at).unwrap();
    let b: SocketAddr = "127.0.0.1:4002".parse().unwrap();
    let other = Region::create_in(&d, &b, None).unwrap();
    std::fs::hard_link(d.path().join(other.file_name()), &at).unwrap();
    let why = refusal(Region::open_in(&d, &a, None).err().expect("the locator of another address"));
    assert!(why.contains("queue of 127.0.0.1:4002"), "{why}");
    drop(own);
}

#[test]
fn a_locator_naming_anything_but_its_owners_sealed_queue_is_refused() {
    use std::os::fd::AsRawFd;
    let s = Scratch::new("named");
    let d = s.dir();
    let a: SocketAddr = "127.0.0.1:4011".parse().unwrap();
    let own = Region::create_in(&d, &a, None).unwrap();
    let (loc, _) = read_locator(&d, own.file_name()).unwrap();
    let with_fd = |fd: i32| {
        own.rewrite_locator_for_test(|l| l.fd = fd as u32);
        Region::open_in(&d, &a, None)
    };
    // A file of ours that is not sealed: it could be cut short.
    let plain = d.path().join("plain");
    std::fs::write(&plain, vec![0u8; REGION_SIZE]).unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o600)).unwrap();
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&plain).unwrap();
    let why = refusal(with_fd(f.as_raw_fd()).err().expect("an unsealed file"));
    assert!(why.contains("not a memfd sealed against shrinking"), "{why}");
    // A pipe is never opened.
    let (r, w) = std::io::pipe().unwrap();
    let why = refusal(with_fd(r.as_raw_fd()).err().expect("a pipe"));
    assert!(why.contains("FIFO"), "{why}");
    drop((r, w));
    // A memfd as made (mode 0777).
    // SAFETY: a valid C string.
    let m = unsafe { libc::memfd_create(c"oxmr-test".as_ptr(), libc::MFD_CLOEXEC) };
    // SAFETY: our new fd.
    unsafe { libc::ftruncate(m, REGION_SIZE as libc::off_t) };
    let why = refusal(with_fd(m).err().expect("an open memfd"));
    assert!(why.contains("0777"), "{why}");
    // SAFETY: our fd.
    unsafe { libc::close(m) };
    // Another queue of ours, sealed and whole, but another endpoint's.
    let b: SocketAddr = "127.0.0.1:4012".parse().unwrap();
    let other = Region::create_in(&d, &b, None).unwrap();
    let (theirs, _) = read_locator(&d, other.file_name()).unwrap();
    let why = refusal(with_fd(theirs.fd as i32).err().expect("another endpoint's queue"));
    assert!(why.contains("is not the one of process"), "{why}");
    // The queue's fd named under another live process (here pid 1):
    // never taken for that process's queue.
    own.rewrite_locator_for_test(|l| *l = Locator { owner: 1, start: 0, ..loc });
    assert!(Region::open_in(&d, &a, None).is_err(), "a queue lent to another process");
    own.rewrite_locator_for_test(|l| *l = loc);
    Region::open_in(&d, &a, None).expect("the locator as it was");
    // An fd the owner does not have open (closed: its endpoint
    // closed). (Above any fd limit: other tests' threads open fds.)
    let e = with_fd(1 << 30).err().expect("a closed fd");
    assert_eq!(e.raw_os_error(), Some(libc::EPROTO), "{e}");
}

#[test]
fn a_queue_cannot_be_cut_short_or_grown_under_its_peers() {
    let s = Scratch::new("sealed");
    let d = s.dir();
    let a: SocketAddr = "127.0.0.1:4013".parse().unwrap();
    let mut own = Region::create_in(&d, &a, None).unwrap();
    let peer = Region::open_in(&d, &a, None).unwrap();
    peer.push(&[b"before"]).unwrap();
    // What a process of this user can reach: the queue through the
    // owner's /proc entry.
    let (loc, _) = read_locator(&d, own.file_name()).unwrap();
    let path = format!("/proc/{}/fd/{}", loc.owner, loc.fd);
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    for len in [0, 4096, REGION_SIZE as u64 - 1, REGION_SIZE as u64 + 4096] {
        let e = f.set_len(len).expect_err("a sealed queue resized");
        assert_eq!(e.raw_os_error(), Some(libc::EPERM), "set_len({len})");
    }
    let e = std::fs::OpenOptions::new().write(true).truncate(true).open(&path).expect_err("opened with O_TRUNC");
    assert_eq!(e.raw_os_error(), Some(libc::EPERM));
    // (A cut queue would fault here, SIGBUS, instead.)
    peer.push(&[b"after"]).unwrap();
    assert!(own.pop(|m, _| assert_eq!(m, b"before")));
    assert!(own.pop(|m, _| assert_eq!(m, b"after")));
    // The locator is a file of its own: cutting it touches no mapping.
    std::fs::write(d.path().join(own.file_name()), b"").unwrap();
    peer.push(&[b"still"]).unwrap();
    assert!(own.pop(|m, _| assert_eq!(m, b"still")));
}

#[test]
fn the_owner_a_link_vouches_for_is_the_process_holding_the_queue_not_its_header() {
    let s = Scratch::new("owner");
    let d = s.dir();
    let a: SocketAddr = "127.0.0.1:4014".parse().unwrap();
    let own = Region::create_in(&d, &a, None).unwrap();
    let peer = Region::open_in(&d, &a, None).unwrap();
    // Any process of the user can write the header (it maps the
    // queue); what the link says is what the kernel said.
    // SAFETY: our own mapping's header; only this test reads it.
    unsafe { (*(own.base as *mut Header)).owner = 1 };
    assert_eq!(peer.owner(), std::process::id());
    assert!(Region::open_in(&d, &a, None).is_err(), "a queue whose header names another owner than its holder");
}

fn key(b: &[u8]) -> crate::auth::JobKey {
    crate::auth::JobKey::new(b).unwrap()
}

fn mismatch(r: io::Result<Region>) -> KeyMismatch {
    match r {
        Ok(_) => panic!("opened"),
        Err(e) => KeyMismatch::of(&e).unwrap_or_else(|| panic!("refused, but not for its key: {e}")),
    }
}

#[test]
fn a_keyed_queue_opens_under_its_key_alone_and_an_unkeyed_one_without_a_key_alone() {
    let s = Scratch::new("keyed");
    let d = s.dir();
    let (k, other) = (key(b"the job's key, 32 bytes of it..."), key(b"another job's key, as long......"));
    let a: SocketAddr = "127.0.0.1:4021".parse().unwrap();
    let keyed = Region::create_in(&d, &a, Some(&k)).unwrap();
    let peer = Region::open_in(&d, &a, Some(&k)).expect("the same key");
    assert_eq!(peer.owner(), std::process::id());
    assert_eq!(mismatch(Region::open_in(&d, &a, Some(&other))), KeyMismatch::NotOurs);
    assert_eq!(mismatch(Region::open_in(&d, &a, None)), KeyMismatch::Keyed);
    let b: SocketAddr = "127.0.0.1:4022".parse().unwrap();
    let plain = Region::create_in(&d, &b, None).unwrap();
    assert_eq!(mismatch(Region::open_in(&d, &b, Some(&k))), KeyMismatch::NoProof);
    Region::open_in(&d, &b, None).expect("no key on either side, as before keys");
    drop((keyed, plain));
}

#[test]
fn a_proof_made_for_another_queue_or_process_does_not_verify() {
    let s = Scratch::new("copied");
    let d = s.dir();
    let k = key(b"the job's key, 32 bytes of it...");
    let (a, b): (SocketAddr, SocketAddr) = ("127.0.0.1:4023".parse().unwrap(), "127.0.0.1:4024".parse().unwrap());
    let first = Region::create_in(&d, &a, Some(&k)).unwrap();
    let second = Region::create_in(&d, &b, Some(&k)).unwrap();
    let set_proof = |r: &Region, p: [u8; crate::auth::TAG_LEN]| {
        // SAFETY: our own mapping's header; only this test reads it.
        unsafe { (*(r.base as *mut Header)).proof = p };
    };
    // Any process of the user can write a queue's header: a valid
    // proof copied from another queue there is a proof of that queue.
    let (loc, _) = read_locator(&d, second.file_name()).unwrap();
    set_proof(&second, first.header().proof);
    assert_eq!(mismatch(Region::open_in(&d, &b, Some(&k))), KeyMismatch::NotOurs, "another queue's proof");
    // A queue of another process (here pid 1) that looks like this one
    // in every other respect: the kernel says which process holds this
    // one, and the proof names another.
    set_proof(&second, proof(&k, &Locator { owner: 1, ..loc }));
    assert_eq!(mismatch(Region::open_in(&d, &b, Some(&k))), KeyMismatch::NotOurs, "a proof for pid 1");
    set_proof(&second, proof(&k, &Locator { epoch: loc.epoch ^ 1, ..loc }));
    assert_eq!(mismatch(Region::open_in(&d, &b, Some(&k))), KeyMismatch::NotOurs, "a proof for another epoch");
    set_proof(&second, proof(&k, &loc));
    Region::open_in(&d, &b, Some(&k)).expect("the proof of this queue, as its owner made it");
    drop(first);
}

#[test]
fn a_taken_name_moves_the_queue_to_the_next_one_where_peers_find_it() {
    let s = Scratch::new("taken");
    let d = s.dir();
    let a: SocketAddr = "127.0.0.1:4003".parse().unwrap();
    let names: Vec<String> = queue_names(&a).collect();
    // A FIFO and a file that is no queue hold the first two names.
    mkfifo(&d.path().join(&names[0]));
    let bogus = d.path().join(&names[1]);
    std::fs::write(&bogus, vec![0x5au8; REGION_SIZE]).unwrap();
    std::fs::set_permissions(&bogus, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut own = Region::create_in(&d, &a, None).expect("a taken name is no failure");
    assert_eq!(own.file_name(), names[2]);
    let peer = Region::open_in(&d, &a, None).expect("the peer looks under the next names too");
    peer.push(&[b"found"]).unwrap();
    assert!(own.pop(|m, _| assert_eq!(m, b"found")));
    // Neither squatter was touched.
    let fifo = std::fs::symlink_metadata(d.path().join(&names[0])).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&fifo.file_type()));
    assert!(std::fs::read(&bogus).unwrap().iter().all(|&b| b == 0x5a));
    drop(own);
    // Every name taken: an error that lists them, nothing left behind.
    for n in &names[2..] {
        std::fs::create_dir(d.path().join(n)).unwrap();
    }
    let e = Region::create_in(&d, &a, None).err().expect("every name held by something else");
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    let e = e.to_string();
    assert!(e.contains("FIFO") && e.contains("not an oxmr queue") && e.contains(&names[3]), "{e}");
    assert!(!d.names().iter().any(|n| n.starts_with("tmp-")), "the queue built for it is removed");
}

#[test]
fn a_stale_queue_is_replaced_and_stale_leftovers_removed_but_nothing_else() {
    let s = Scratch::new("stale");
    let d = s.dir();
    let a: SocketAddr = "127.0.0.1:4004".parse().unwrap();
    let gone = dead_pid();
    let old = Region::create_in(&d, &a, None).unwrap();
    old.rewrite_locator_for_test(|l| l.owner = gone);
    let old_epoch = old.epoch();
    old.abandon();
    let b: SocketAddr = "127.0.0.1:4005".parse().unwrap();
    let other = Region::create_in(&d, &b, None).unwrap();
    other.rewrite_locator_for_test(|l| l.owner = gone);
    other.abandon();
    std::fs::write(d.path().join(format!("tmp-{gone}-0")), b"").unwrap();
    mkfifo(&d.path().join("q-127.0.0.1-4006"));
    std::os::unix::fs::symlink("/dev/null", d.path().join("q-127.0.0.1-4007")).unwrap();
    // (A new sweep, as in a new process.)
    d.swept_by.store(0, Ordering::Relaxed);
    let new = Region::create_in(&d, &a, None).expect("the stale queue's name");
    assert_eq!(new.file_name(), queue_names(&a).next().unwrap());
    assert_ne!(new.epoch(), old_epoch);
    let mut left = d.names();
    left.sort();
    let bell = bell_name(std::process::id(), new.epoch());
    assert_eq!(left, [&bell, "q-127.0.0.1-4004", "q-127.0.0.1-4006", "q-127.0.0.1-4007"], "only stale files are swept");
}

#[test]
fn of_two_live_queues_for_one_address_a_peer_takes_its_own_namespaces() {
    let s = Scratch::new("netns");
    let d = s.dir();
    let a: SocketAddr = "127.0.0.1:4008".parse().unwrap();
    let names: Vec<String> = queue_names(&a).collect();
    // Ours at the second name, and before it a live endpoint at this
    // address in another network namespace (played by a queue of this
    // process whose locator names another namespace).
    let here = Region::create_in(&d, &a, None).unwrap();
    std::fs::rename(d.path().join(&names[0]), d.path().join(&names[1])).unwrap();
    let there = Region::create_in(&d, &a, None).unwrap();
    assert_eq!(there.file_name(), names[0]);
    there.rewrite_locator_for_test(|l| l.netns = netns() + 1);
    assert_eq!(Region::open_in(&d, &a, None).unwrap().epoch(), here.epoch(), "our namespace's first");
    drop(here);
    std::fs::remove_file(d.path().join(&names[1])).unwrap();
    assert_eq!(Region::open_in(&d, &a, None).unwrap().epoch(), there.epoch(), "the other namespace's, when alone");
}

#[test]
fn a_zombie_is_not_alive() {
    // SAFETY: the child only calls _exit (async-signal-safe), so forking a
    // test process with threads is sound.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(0) };
    }
    assert!(child > 0, "fork");
    let pid = child as u32;
    // (Not reaped yet: it answers kill(0), and /proc says Z.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while owner_alive(pid, 0) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // SAFETY: kill(0) on our own child.
    assert_eq!(unsafe { libc::kill(child, 0) }, 0, "a zombie still exists");
    assert!(!pid_alive(pid), "a zombie never reads its queue again");
    assert!(!owner_alive(pid, 12345), "nor with a start time");
    let mut status = 0;
    // SAFETY: reaping our own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(!pid_alive(pid), "reaped: gone");
}

#[test]
fn a_reused_pid_is_not_the_owner() {
    let me = std::process::id();
    let start = start_time(me).expect("our own /proc/self/stat");
    assert!(owner_alive(me, start));
    assert!(owner_alive(me, 0), "start unknown: the pid decides");
    assert!(!owner_alive(me, start + 1), "another process that had our pid before us");
    // A locator that names another start time for its owner is one a
    // dead process left, even though a live process has that pid now.
    let s = Scratch::new("reused");
    let d = s.dir();
    let addr: SocketAddr = "127.0.0.1:4015".parse().unwrap();
    let own = Region::create_in(&d, &addr, None).unwrap();
    assert!(Region::open_in(&d, &addr, None).unwrap().reachable());
    own.rewrite_locator_for_test(|l| l.start = start + 1);
    let e = Region::open_in(&d, &addr, None).err().expect("a locator of a process that had our pid");
    assert_eq!(OwnerGone::of(&e), Some(me), "{e}");
    own.rewrite_locator_for_test(|l| l.start = start);
    assert!(Region::open_in(&d, &addr, None).unwrap().reachable());
}

#[test]
fn the_doorbell_rings_only_while_the_owner_sleeps() {
    let addr: SocketAddr = "127.0.0.1:5".parse().unwrap();
    let mut own = Region::create(&addr, None).unwrap();
    let peer = Region::open(&addr, None).unwrap();
    let bell = own.bell.as_ref().expect("the owner binds its doorbell");
    let mut b = [0u8; 8];
    let rung = |bell: &UnixDatagram, b: &mut [u8]| bell.recv(b).is_ok();
    peer.push(&[b"awake"]).unwrap();
    assert!(!rung(bell, &mut b), "an awake owner is not rung");
    own.set_sleeping(true);
    peer.push(&[b"asleep"]).unwrap();
    let bell = own.bell.as_ref().unwrap();
    assert!(rung(bell, &mut b), "a sleeping owner is rung");
    own.set_sleeping(false);
    own.set_sleeping(false); // (a wake without a sleep stays at 0)
    assert_eq!(own.header().sleeping.load(Ordering::Relaxed), 0);
    peer.push(&[b"awake again"]).unwrap();
    assert!(!rung(own.bell.as_ref().unwrap(), &mut b), "woken: not rung any more");
    // Two sleepers: one waking leaves the other rung.
    own.set_sleeping(true);
    own.set_sleeping(true);
    own.set_sleeping(false);
    peer.push(&[b"x"]).unwrap();
    assert!(rung(own.bell.as_ref().unwrap(), &mut b), "the other thread still sleeps");
    own.set_sleeping(false);
    for _ in 0..4 {
        assert!(own.pop(|_, _| ()));
    }
}

#[test]
fn the_doorbell_is_a_socket_in_the_directory_removed_at_close_and_swept_when_stale() {
    use std::os::unix::fs::FileTypeExt;
    let s = Scratch::new("bell");
    let d = s.dir();
    let a: SocketAddr = "127.0.0.1:4009".parse().unwrap();
    let own = Region::create_in(&d, &a, None).unwrap();
    let bell = d.path().join(bell_name(std::process::id(), own.epoch()));
    assert!(std::fs::symlink_metadata(&bell).unwrap().file_type().is_socket());
    // No abstract name any user could have taken first or send to
    // (other processes' may be there: none for this address).
    let unix = std::fs::read_to_string("/proc/net/unix").unwrap();
    let abstract_here = unix.lines().filter_map(|l| l.split_once(" @").map(|x| x.1)).find(|n| n.ends_with("-4009"));
    assert_eq!(abstract_here, None, "an abstract doorbell is bound");
    let peer = Region::open_in(&d, &a, None).unwrap();
    own.set_sleeping(true);
    peer.push(&[b"ring"]).unwrap();
    let mut b = [0u8; 8];
    assert!(own.bell.as_ref().unwrap().recv(&mut b).is_ok(), "rung through its path");
    own.set_sleeping(false);
    drop(own);
    assert!(!bell.exists(), "removed at close");
    // A doorbell (and a queue) a dead process left: swept; a live
    // process's doorbell: kept.
    let gone = dead_pid();
    let left = Region::create_in(&d, &a, None).unwrap();
    let left_bell = bell_name(std::process::id(), left.epoch());
    std::fs::rename(d.path().join(&left_bell), d.path().join(bell_name(gone, left.epoch()))).unwrap();
    left.rewrite_locator_for_test(|l| l.owner = gone);
    left.abandon();
    let orphan = UnixDatagram::bind(d.path().join(bell_name(gone, 7))).unwrap();
    let live = UnixDatagram::bind(d.path().join(bell_name(1, 7))).unwrap();
    d.swept_by.store(0, Ordering::Relaxed);
    let b: SocketAddr = "127.0.0.1:4010".parse().unwrap();
    let fresh = Region::create_in(&d, &b, None).unwrap();
    let mut names = d.names();
    names.sort();
    let mine = bell_name(std::process::id(), fresh.epoch());
    assert_eq!(names, [bell_name(1, 7), mine, "q-127.0.0.1-4010".to_string()]);
    drop((orphan, live));
}

#[test]
fn queue_round_trip_and_full() {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let mut own = Region::create(&addr, None).unwrap();
    let peer = Region::open(&addr, None).unwrap();
    assert_eq!(peer.owner(), std::process::id());
    for i in 0..CELLS {
        peer.push(&[&(i as u32).to_le_bytes(), b"xyz"]).unwrap();
    }
    assert_eq!(peer.push(&[b"full"]).unwrap_err().raw_os_error(), Some(libc::EAGAIN));
    for i in 0..CELLS {
        let mut got = Vec::new();
        assert!(own.pop(|b, _| got = b.to_vec()));
        assert_eq!(&got[..4], &(i as u32).to_le_bytes());
    }
    assert!(!own.pop(|_, _| ()));
    peer.push(&[b"again"]).unwrap();
    assert!(own.pop(|b, more| {
        assert_eq!(b, b"again");
        assert!(!more, "nothing after it");
    }));
    // Parts split anywhere around the first cache line come out whole,
    // whether the message fits its slot or goes to its body.
    let all: Vec<u8> = (0..CELL_DATA as u32).map(|i| (i * 7 + 1) as u8).collect();
    for len in [FIRST_LINE + 1, SLOT_DATA - 1, SLOT_DATA, SLOT_DATA + 1, 300, CELL_DATA] {
        let msg = &all[..len];
        for cut in [0, 1, 40, FIRST_LINE - 1, FIRST_LINE, FIRST_LINE + 1, SLOT_DATA, 200, 300] {
            let cut = cut.min(len);
            for cut2 in [cut, (cut + 17).min(len)] {
                peer.push(&[&msg[..cut], &msg[cut..cut2], &msg[cut2..]]).unwrap();
                assert!(own.pop(|b, _| assert_eq!(b, msg, "{len} bytes, parts cut at {cut}, {cut2}")));
            }
        }
    }
    assert_eq!(
        peer.push(&[&all[..], b"!"]).unwrap_err().raw_os_error(),
        Some(libc::EMSGSIZE),
        "a message over CELL_DATA is refused"
    );
    drop(peer);
    drop(own);
    assert!(Region::open(&addr, None).is_err(), "the owner unlinks its file");
}

#[test]
fn a_cell_whose_producer_died_unpublished_is_skipped() {
    let addr: SocketAddr = "127.0.0.1:2".parse().unwrap();
    let mut own = Region::create(&addr, None).unwrap();
    let peer = Region::open(&addr, None).unwrap();
    let pop = |own: &mut Region| {
        let mut got = None;
        own.pop(|b, _| got = Some(b.to_vec()));
        got
    };
    // A process that is gone: it exited and was reaped.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    peer.push(&[b"before"]).unwrap();
    peer.claim_abandoned(dead);
    peer.push(&[b"after"]).unwrap();
    assert_eq!(pop(&mut own).as_deref(), Some(&b"before"[..]));
    assert_eq!(pop(&mut own), None, "the abandoned cell holds the queue");
    assert!(!own.unstick(), "not on first sight");
    assert!(!own.unstick(), "not before STUCK_AFTER");
    own.stuck = own.stuck.map(|(p, t)| (p, t - STUCK_AFTER));
    assert!(own.unstick(), "skipped once its producer is known dead");
    assert_eq!(pop(&mut own).as_deref(), Some(&b"after"[..]));
    // A producer that is alive (stopped, say) is waited for.
    peer.claim_abandoned(std::process::id());
    peer.push(&[b"later"]).unwrap();
    assert!(!own.unstick());
    own.stuck = own.stuck.map(|(p, t)| (p, t - STUCK_AFTER));
    assert!(!own.unstick(), "a live producer's cell is never skipped");
    assert_eq!(pop(&mut own), None);
}

#[test]
fn a_record_of_an_earlier_lap_is_not_the_claimer() {
    let addr: SocketAddr = "127.0.0.1:3".parse().unwrap();
    let mut own = Region::create(&addr, None).unwrap();
    let peer = Region::open(&addr, None).unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    // A dead producer used cell 0 on the first lap (and published).
    peer.push(&[b"lap 1"]).unwrap();
    peer.header().claimers[0].store(dead as u64, Ordering::Relaxed);
    assert!(own.pop(|_, _| ()));
    for _ in 1..CELLS {
        peer.push(&[b"x"]).unwrap();
        assert!(own.pop(|_, _| ()));
    }
    // Lap 2, cell 0: a live producer claimed it and was stopped before
    // recording itself; the record still names the dead one.
    peer.claim_unrecorded();
    assert!(!own.unstick());
    own.stuck = own.stuck.map(|(p, t)| (p, t - STUCK_AFTER));
    assert!(!own.unstick(), "skipped on the strength of an earlier lap's record");
}

#[test]
fn a_length_a_producer_lies_about_keeps_the_message_inside_its_cell() {
    // The producer here is the test writing the shared slot's length
    // itself after publishing, as any process that maps the queue can.
    let addr: SocketAddr = "127.0.0.1:3".parse().unwrap();
    let mut own = Region::create(&addr, None).unwrap();
    let peer = Region::open(&addr, None).unwrap();
    let base = own.base as usize;
    for (i, lie) in
        [0, SLOT_DATA as u32 + 1, CELL_DATA as u32, CELL_DATA as u32 + 1, BODY as u32, u32::MAX].into_iter().enumerate()
    {
        peer.push(&[b"small"]).unwrap();
        // SAFETY: the test's own mapping of the queue; slot i was just
        // published, and nothing reads it concurrently.
        unsafe { (*peer.slot(i)).len = lie };
        let slot = (base + SLOTS_AT + i * size_of::<Slot>(), size_of::<Slot>());
        let body = (base + BODIES_AT + i * BODY, BODY);
        let mut seen = None;
        assert!(own.pop(|b, _| seen = Some((b.as_ptr() as usize, b.len()))));
        let (at, n) = seen.unwrap();
        let within = |(start, size): (usize, usize)| at >= start && at + n <= start + size;
        assert!(n <= CELL_DATA, "length {lie}: {n} bytes handed up");
        assert!(within(slot) || within(body), "length {lie}: [{at:#x}, +{n}) is outside cell {i}");
    }
}
