//! The engine over the in-process loopback wire (`wire::loopback`): two
//! (or three) endpoints in this test's process, driven by hand, with real
//! registrations, completion queues and address tables. The loopback
//! wire's copies always answer "push", so every rendezvous send and RMA
//! here goes RTS/READ/WRITE -> PULL -> DATA -> ACK, the path TCP will
//! use. What the tests cover: matching (tags, ignore bits, directed
//! receives, unexpected messages), truncation, rendezvous through the
//! push path, RMA writes and reads, every refusal of the RMA target
//! (wrong key, out of bounds, wrong rights, closed key, a registration
//! not enabled under FI_MR_ENDPOINT, batched writes), each answered with
//! the one code that tells a peer nothing of why, forged frames,
//! cancel, a peer that goes away with operations pending, and remote
//! writes into memory its owner made read-only after registering it.

use std::sync::atomic::{AtomicU16, Ordering};

use super::*;
use crate::mr::account::{Account, CapSource};
use crate::mr::pin::{PinMode, Pinner};
use crate::mr::registry::Ranges;
use crate::mr::{CacheConfig, Request};
use crate::protocol::av::AddrTable;
use crate::protocol::encode_iovs;
use crate::queues::cq::{CqEntry, CqError};
use crate::wire::loopback;
use crate::wire::{Link, LinkState};

/// A fresh address for each endpoint (loopback inboxes of one process
/// must not share one; tests run in parallel).
fn fresh_addr() -> SocketAddr {
    static NEXT: AtomicU16 = AtomicU16::new(20000);
    let port = NEXT.fetch_add(1, Ordering::Relaxed);
    SocketAddr::from(([127, 77, 0, 1], port))
}

/// The wire the tests' endpoints use (each test thread sets its own).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Via {
    Loop,
    Tcp,
}

thread_local! {
    static VIA: std::cell::Cell<Via> = const { std::cell::Cell::new(Via::Loop) };
}

/// Run `test` with endpoints on wire `v`.
fn with_wire(v: Via, test: fn()) {
    VIA.with(|c| c.set(v));
    test();
}

/// One endpoint: its engine and what it is bound to.
struct Side {
    eng: Engine,
    addr: SocketAddr,
    cq: Arc<CqCore>,
    av: Arc<AddrTable>,
    mr: Arc<MrDomain>,
}

fn side_with(mr_mode: u32, cfg: &Config) -> Side {
    side_pinned(mr_mode, cfg, false)
}

/// `cached`: registrations pinned (io_uring) through the cache, which
/// watches the memory (userfaultfd, perf), as in a domain by default.
fn side_pinned(mr_mode: u32, cfg: &Config, cached: bool) -> Side {
    side_bound(mr_mode, cfg, cached, None)
}

/// `side_pinned`, its receives posted to `srx` when given.
fn side_bound(mr_mode: u32, cfg: &Config, cached: bool, srx: Option<Arc<super::SharedRx>>) -> Side {
    let via = VIA.with(|c| c.get());
    let (addr, rx, cfg) = if via == Via::Tcp {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a TCP listener");
        let addr = l.local_addr().expect("its address");
        let cfg = Config { wire: crate::config::Wire::Tcp, ..cfg.clone() };
        (addr, Inbox::tcp_only(l).expect("a TCP inbox"), cfg)
    } else {
        let addr = fresh_addr();
        (addr, Inbox::loopback(&addr).expect("a loopback inbox"), cfg.clone())
    };
    let cfg = &cfg;
    let mode = if cached { PinMode::Uring } else { PinMode::None };
    let pinner = Pinner::new(mode, Account::new(None, CapSource::Variable));
    let cc = CacheConfig { enable: cached, ..CacheConfig::default() };
    let mr = Arc::new(MrDomain::new(mr_mode as i32, pinner, cc));
    let attr = ffi::fi_cq_attr { format: ffi::FI_CQ_FORMAT_TAGGED, ..Default::default() };
    let cq = Arc::new(CqCore::new(&attr).expect("a CQ"));
    let av = Arc::new(AddrTable::new(8, false));
    let b = Bindings {
        tx_cq: Some(cq.clone()),
        rx_cq: Some(cq.clone()),
        tx_selective: false,
        rx_selective: false,
        cntrs: Default::default(),
        av: Some(av.clone()),
        tx_op_flags: 0,
        rx_op_flags: 0,
        directed: true,
        one_peer: false,
        min_multi_recv: 64,
        srx,
    };
    let inbox = crate::protocol::inbox::Inbox(rx);
    let eng = Engine::new(inbox, addr, mr.clone(), &Default::default(), cfg, b, None);
    Side { eng, addr, cq, av, mr }
}

fn side() -> Side {
    side_with(ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY, &Config::default())
}

/// Two endpoints, each with the other in its AV (fi_addr 0).
fn pair() -> (Side, Side) {
    let (a, b) = (side(), side());
    a.av.insert(&[Some(b.addr)]);
    b.av.insert(&[Some(a.addr)]);
    (a, b)
}

/// Progress both sides until `done` or a bound (no timing: a count).
fn run(a: &mut Side, b: &mut Side, mut done: impl FnMut(&mut Side, &mut Side) -> bool) {
    for _ in 0..10_000 {
        if done(a, b) {
            return;
        }
        a.eng.progress();
        b.eng.progress();
    }
    panic!("the two endpoints did not get there in 10000 progress rounds");
}

/// What a CQ read gives: a success or an error entry.
#[derive(Debug)]
enum Got {
    Ok(CqEntry),
    Err(CqError),
}

fn read(s: &Side) -> Option<Got> {
    let mut e = None;
    match s.cq.pop(1, |_, x| e = Some(*x)) {
        Ok(_) => e.map(Got::Ok),
        Err(x) if x.code() == ffi::FI_EAVAIL => s.cq.readerr().ok().map(Got::Err),
        Err(_) => None,
    }
}

/// Progress both sides until `s` (0: `a`, 1: `b`) has a completion.
fn next(a: &mut Side, b: &mut Side, which: usize) -> Got {
    let mut got = None;
    run(a, b, |a, b| {
        got = read(if which == 0 { a } else { b });
        got.is_some()
    });
    got.expect("run returned with one")
}

fn ok(g: Got) -> CqEntry {
    match g {
        Got::Ok(e) => e,
        Got::Err(e) => panic!("expected a completion, got error {} ({:?})", crate::error::errno_name(e.err as u32), e),
    }
}

fn err(g: Got) -> CqError {
    match g {
        Got::Err(e) => e,
        Got::Ok(e) => panic!("expected an error completion, got {e:?}"),
    }
}

/// The iov of a buffer the engine only reads.
fn iov(b: &[u8]) -> Iovs {
    Iovs::one(b.as_ptr() as usize, b.len())
}

/// The iov of a buffer the engine writes into (through its address).
fn iov_mut(b: &mut [u8]) -> Iovs {
    Iovs::one(b.as_mut_ptr() as usize, b.len())
}

fn send(s: &mut Side, ctx: usize, b: &[u8], tag: Option<u64>) {
    let o = TxOp { ctx, iovs: iov(b), dest: 0, tag, data: None, flags: None };
    s.eng.send(&o).expect("send posted");
}

fn recv(s: &mut Side, ctx: usize, b: &mut [u8], src: u64, tag: Option<(u64, u64)>) {
    s.eng.recv(ctx, iov_mut(b), src, tag, None).expect("receive posted");
}

/// Register `b` on `s` for `access`; its key.
fn register(s: &Side, b: &[u8], access: u64) -> (Arc<crate::mr::registry::Region>, u64) {
    let req = Request {
        iovs: Ranges::One((b.as_ptr() as usize, b.len())),
        access,
        iface: ffi::FI_HMEM_SYSTEM,
        ..Default::default()
    };
    let r = s.mr.register(req).expect("registered");
    let key = r.key;
    (r, key)
}

fn rma(s: &mut Side, ctx: usize, b: &mut [u8], addr: usize, key: u64, read: bool) {
    let o = RmaOp { ctx, iovs: iov_mut(b), dest: 0, addr: addr as u64, key, data: None, flags: None, read };
    s.eng.rma(o).expect("RMA posted");
}

const RW: u64 = (ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64;
/// A send that goes by rendezvous on every wire (over the TCP eager limit).
const RNDV: usize = crate::config::TCP_EAGER_MAX + 3 * EAGER_MAX;
const RO: u64 = ffi::FI_REMOTE_READ as u64;

fn tagged_receives_match_by_tag_ignore_bits_and_source() {
    let (mut a, mut b) = pair();
    let mut c = side();
    c.av.insert(&[Some(b.addr)]);
    b.av.insert(&[Some(c.addr)]); // fi_addr 1 at b
                                  // b: one receive for tag 0x10 from c only, one for 0x2? from anyone.
    let (mut from_c, mut any) = ([0u8; 8], [0u8; 8]);
    recv(&mut b, 1, &mut from_c, 1, Some((0x10, 0)));
    recv(&mut b, 2, &mut any, ffi::FI_ADDR_UNSPEC, Some((0x20, 0xf)));
    // a sends tag 0x10 first: not from c, so it goes to neither; then 0x2a.
    send(&mut a, 11, b"from-a10", Some(0x10));
    send(&mut a, 12, b"from-a2a", Some(0x2a));
    assert_eq!(ok(next(&mut a, &mut b, 1)).op_context, 2);
    assert_eq!(&any, b"from-a2a");
    send(&mut c, 21, b"from-c10", Some(0x10));
    let mut got = None;
    for _ in 0..1000 {
        a.eng.progress();
        c.eng.progress();
        b.eng.progress();
        got = read(&b);
        if got.is_some() {
            break;
        }
    }
    let e = ok(got.expect("c's send completes b's directed receive"));
    assert_eq!((e.op_context, e.tag, e.src), (1, 0x10, 1));
    assert_eq!(&from_c, b"from-c10");
    // a's 0x10 is still unexpected: a later receive from anyone takes it.
    let mut late = [0u8; 8];
    recv(&mut b, 3, &mut late, ffi::FI_ADDR_UNSPEC, Some((0x10, 0)));
    let e = ok(read(&b).expect("matched at post time"));
    assert_eq!((e.op_context, e.src), (3, 0));
    assert_eq!(&late, b"from-a10");
}

fn a_rendezvous_send_goes_through_pull_and_data_and_completes_both_sides() {
    let (mut a, mut b) = pair();
    let n = RNDV + 123;
    let src: Vec<u8> = (0..n).map(|i| (i * 7 % 251) as u8).collect();
    let mut dst = vec![0u8; n];
    recv(&mut b, 1, &mut dst, 0, None);
    send(&mut a, 2, &src, None);
    let e = ok(next(&mut a, &mut b, 1));
    assert_eq!((e.op_context, e.len), (1, n));
    assert!(dst == src, "the receive holds the sender's bytes");
    assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 2, "the send completes on the ACK");
    let tcp = VIA.with(|c| c.get()) == Via::Tcp;
    assert!(a.eng.peers.list.iter().all(|p| p.link.props().buffers == tcp), "the links are of the wire asked for");
    // A send over the shm cell but under FI_OXMR_TCP_EAGER_MAX: inline over
    // TCP (complete as soon as it is written, before b has even looked),
    // rendezvous elsewhere (complete at b's ACK).
    let mid = vec![5u8; 3 * EAGER_MAX];
    send(&mut a, 3, &mid, None);
    a.eng.progress();
    assert_eq!(
        read(&a).is_some(),
        tcp,
        "a {} byte send over {} goes inline only over TCP",
        mid.len(),
        if tcp { "TCP" } else { "loopback" }
    );
    let mut got = vec![0u8; mid.len()];
    recv(&mut b, 4, &mut got, 0, None);
    assert_eq!(ok(next(&mut a, &mut b, 1)).op_context, 4);
    assert!(got == mid);
    if !tcp {
        assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 3);
    }
}

fn truncated_receives_report_etrunc_with_the_overflow_inline_and_rendezvous() {
    let (mut a, mut b) = pair();
    for n in [100usize, RNDV] {
        let src = vec![7u8; n];
        let mut dst = [0u8; 64 + 8];
        recv(&mut b, 1, &mut dst[..64], 0, None);
        send(&mut a, 2, &src, None);
        let e = err(next(&mut a, &mut b, 1));
        assert_eq!(e.err as u32, ffi::FI_ETRUNC, "{n} bytes into 64");
        assert_eq!((e.len, e.olen), (64, n - 64));
        assert!(dst[..64].iter().all(|&x| x == 7), "the part that fits is delivered");
        assert!(dst[64..].iter().all(|&x| x == 0), "nothing past the posted buffer");
        // (The sender's completion: a truncated send is still sent.)
        let _ = next(&mut a, &mut b, 0);
    }
}

fn rma_writes_and_reads_land_in_the_registration() {
    let (mut a, mut b) = pair();
    let streams = VIA.with(|v| v.get()) == Via::Tcp;
    let mut target = vec![0u8; 4 * EAGER_MAX];
    let base = target.as_mut_ptr() as usize;
    let (_r, key) = register(&b, &target, RW);
    // Inline write, large write (pulled), large read (pushed by the target).
    let mut small = [9u8; 100];
    rma(&mut a, 1, &mut small, base, key, false);
    assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 1);
    let mut big: Vec<u8> = (0..2 * EAGER_MAX).map(|i| (i % 253) as u8).collect();
    rma(&mut a, 2, &mut big, base + EAGER_MAX, key, false);
    // (Over TCP the data follows the request at once: it is queued to go
    // before the target has even seen the request.)
    assert_eq!(a.eng.peers.owed, streams as usize, "a large write over TCP streams its data");
    assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 2);
    assert_eq!(&target[..100], &small[..]);
    assert!(target[EAGER_MAX..3 * EAGER_MAX] == big[..]);
    let mut back = vec![0u8; 2 * EAGER_MAX];
    rma(&mut a, 3, &mut back, base + EAGER_MAX, key, true);
    assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 3);
    assert!(back == big, "the read brings the written bytes back");
}

/// An RMA that the target must refuse: the initiator's error, and the
/// target's memory unchanged.
/// One access an initiator asks for.
#[derive(Clone, Copy)]
struct Ask {
    addr: usize,
    key: u64,
    read: bool,
    len: usize,
}

/// Ask for `ask`, which the target must refuse: its error completion's
/// code, once the refusal is seen to have changed nothing on either side.
fn refusal(a: &mut Side, b: &mut Side, target: &[u8], ask: Ask) -> u32 {
    let Ask { addr, key, read, len } = ask;
    let before = target.to_vec();
    let mut buf = vec![0x5au8; len];
    rma(a, 7, &mut buf, addr, key, read);
    let e = err(next(a, b, 0));
    assert_eq!(e.op_context, 7, "{} of {len} at {addr:#x} key {key:#x}", if read { "read" } else { "write" });
    assert!(target == before, "a refused access changed the target's memory");
    // (Over TCP a large write streams its data with the request: the
    // target drops all of it and answers once it came, so nothing of it
    // is still expected there, nor still pushed here.)
    assert!(b.eng.pulls.dropping.is_empty(), "the target still waits for a refused write's data");
    assert_eq!(a.eng.peers.owed, 0, "the initiator still pushes a refused write's data");
    if read {
        assert!(buf.iter().all(|&x| x == 0x5a), "a refused read wrote into the initiator's buffer");
    }
    e.err as u32
}

/// Ask for `ask`, which the target must refuse with the one code every
/// refused remote access gets (`registry::REFUSED`).
fn refused(a: &mut Side, b: &mut Side, target: &[u8], ask: Ask) {
    let code = refusal(a, b, target, ask);
    assert_eq!(
        code,
        crate::mr::registry::REFUSED,
        "{} of {} at {:#x} key {:#x}: {}",
        if ask.read { "read" } else { "write" },
        ask.len,
        ask.addr,
        ask.key,
        crate::error::errno_name(code)
    );
}

fn the_rma_target_refuses_wrong_keys_bounds_rights_and_closed_keys() {
    let (mut a, mut b) = pair();
    let mut target = vec![1u8; 2 * EAGER_MAX];
    let base = target.as_mut_ptr() as usize;
    let (r, key) = register(&b, &target, RW);
    let (ro, ro_key) = register(&b, &target[..EAGER_MAX], RO);
    for len in [64, 2 * EAGER_MAX] {
        // Wrong key.
        refused(&mut a, &mut b, &target, Ask { addr: base, key: key ^ 0x5555, read: false, len });
        refused(&mut a, &mut b, &target, Ask { addr: base, key: key ^ 0x5555, read: true, len });
        // Out of bounds: one byte past the end, and before the start.
        let end = base + target.len();
        refused(&mut a, &mut b, &target, Ask { addr: end - len + 1, key, read: false, len });
        refused(&mut a, &mut b, &target, Ask { addr: base - 1, key, read: true, len });
        // Wrong rights: a write into a read-only registration.
        if len <= EAGER_MAX {
            refused(&mut a, &mut b, &target, Ask { addr: base, key: ro_key, read: false, len });
        }
    }
    // A closed key.
    b.mr.deregister(&ro);
    refused(&mut a, &mut b, &target, Ask { addr: base, key: ro_key, read: true, len: 64 });
    b.mr.deregister(&r);
    refused(&mut a, &mut b, &target, Ask { addr: base, key, read: false, len: 2 * EAGER_MAX });
}

fn a_refused_access_completes_with_one_code_whatever_was_wrong() {
    // A peer that searches for a registration must not learn which part
    // of its guess was right: a known key at a wrong address, an unknown
    // key, and a read of a write-only region are three reasons at the
    // target and one answer at the initiator.
    let (mut a, mut b) = pair();
    let mut target = vec![1u8; 2 * EAGER_MAX];
    let base = target.as_mut_ptr() as usize;
    let wo = ffi::FI_REMOTE_WRITE as u64;
    let (_r, key) = register(&b, &target, RW);
    let (_wo, wo_key) = register(&b, &target, wo);
    let past = base + target.len();
    let unknown = key ^ 0x5555;
    let rr = ffi::FI_REMOTE_READ as u64;
    let reasons = [
        b.mr.registry.check(key, past as u64, 64, rr).err(),
        b.mr.registry.check(unknown, base as u64, 64, rr).err(),
        b.mr.registry.check(wo_key, base as u64, 64, rr).err(),
    ];
    use crate::mr::registry::AccessError::*;
    assert_eq!(reasons, [Some(OutOfBounds), Some(UnknownKey), Some(Denied)], "the target's reasons");
    for len in [64, 2 * EAGER_MAX] {
        let wrong_address = refusal(&mut a, &mut b, &target, Ask { addr: past, key, read: true, len });
        let wrong_key = refusal(&mut a, &mut b, &target, Ask { addr: base, key: unknown, read: true, len });
        let wrong_rights = refusal(&mut a, &mut b, &target, Ask { addr: base, key: wo_key, read: true, len });
        let codes = [wrong_address, wrong_key, wrong_rights].map(crate::error::errno_name);
        assert_eq!(codes, ["FI_EACCES"; 3], "wrong address, wrong key, wrong rights; {len} bytes");
    }
}

fn a_registration_not_enabled_under_fi_mr_endpoint_is_refused() {
    let mode = ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY | ffi::FI_MR_ENDPOINT;
    let (mut a, mut b) = (side(), side_with(mode, &Config::default()));
    a.av.insert(&[Some(b.addr)]);
    b.av.insert(&[Some(a.addr)]);
    let mut target = vec![3u8; 256];
    let base = target.as_mut_ptr() as usize;
    let (r, key) = register(&b, &target, RW);
    refused(&mut a, &mut b, &target, Ask { addr: base, key, read: false, len: 64 });
    refused(&mut a, &mut b, &target, Ask { addr: base, key, read: true, len: 64 });
    // (fi_mr_enable, as objects::mr does it: then it serves.)
    r.enabled.store(true, std::sync::atomic::Ordering::Release);
    rma(&mut a, 8, &mut [4u8; 64], base, key, false);
    assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 8);
    assert!(target[..64].iter().all(|&x| x == 4));
}

fn batched_writes_are_each_checked_for_key_and_rights() {
    // Writes queued before the target runs are served as a run
    // (`write_batch`), which must refuse exactly what a lone write would.
    let (mut a, mut b) = pair();
    let mut target = vec![0u8; 8 * EAGER_MAX];
    let base = target.as_mut_ptr() as usize;
    let (_ro, ro_key) = register(&b, &target, RO);
    let (_rw, rw_key) = register(&b, &target[..4 * EAGER_MAX], RW);
    let n = EAGER_MAX + 1;
    let mut bufs: Vec<Vec<u8>> = (0..4).map(|i| vec![0x10 + i as u8; n]).collect();
    // Three writes under a read-only key, then two allowed ones, all in
    // b's queue before b runs.
    for (i, buf) in bufs.iter_mut().enumerate().take(3) {
        rma(&mut a, 100 + i, buf, base + i * n, ro_key, false);
    }
    rma(&mut a, 200, &mut bufs[3], base, rw_key, false);
    rma(&mut a, 201, &mut bufs[3], base + n, rw_key, false);
    let mut seen = Vec::new();
    run(&mut a, &mut b, |a, _| {
        while let Some(g) = read(a) {
            seen.push(g);
        }
        seen.len() == 5
    });
    for g in seen {
        match g {
            Got::Err(e) => {
                assert!((100..103).contains(&e.op_context), "{e:?}");
                assert_eq!(e.err as u32, ffi::FI_EACCES);
            }
            Got::Ok(e) => assert!(e.op_context == 200 || e.op_context == 201, "{e:?}"),
        }
    }
    assert!(target[..2 * n].iter().all(|&x| x == 0x13), "the allowed writes landed");
    assert!(target[2 * n..].iter().all(|&x| x == 0), "the refused writes changed nothing");
}

#[test]
fn an_inject_in_its_common_shape_delivers_what_the_general_path_does() {
    let (mut a, mut b) = pair();
    let (m1, m2) = (*b"first 8b", *b"second 8");
    let (mut r1, mut r2) = ([0u8; 8], [0u8; 8]);
    // No link to b yet: the lean path leaves it to `send`, which opens it.
    assert!(a.eng.inject(0, m1.as_ptr() as usize, 8, Some(7), Some(0x55)).is_none(), "no link: the general path");
    let o = TxOp {
        ctx: 0,
        iovs: iov(&m1),
        dest: 0,
        tag: Some(7),
        data: Some(0x55),
        flags: Some(ffi::FI_INJECT as u64 | INJECT_CALL),
    };
    a.eng.send(&o).expect("the general inject posted");
    recv(&mut b, 1, &mut r1, 0, Some((7, 0)));
    let general = ok(next(&mut a, &mut b, 1));
    // Linked now: the lean path takes it, and b sees the same completion.
    recv(&mut b, 2, &mut r2, 0, Some((7, 0)));
    let r = a.eng.inject(0, m2.as_ptr() as usize, 8, Some(7), Some(0x66));
    assert!(matches!(r, Some(Ok(()))), "the lean path took the inject: {:?}", r.map(|x| x.err().map(|e| e.code())));
    let lean = ok(next(&mut a, &mut b, 1));
    assert_eq!((r1, r2), (m1, m2), "both payloads landed");
    assert_eq!((lean.op_context, lean.len, lean.tag, lean.data), (2, 8, 7, 0x66));
    assert_eq!(lean.flags, general.flags, "the same kind of completion (tagged, remote CQ data)");
    assert_ne!(lean.flags & ffi::FI_REMOTE_CQ_DATA as u64, 0);
    assert_eq!(lean.src, general.src);
    // Neither inject leaves a completion of its own on the sender.
    assert!(read(&a).is_none(), "an inject has no completion");
    // An address that names nobody: the answer `send` gives.
    let bad = TxOp { dest: 5, ..o };
    let want = a.eng.send(&bad).expect_err("no such fi_addr").code();
    match a.eng.inject(5, m2.as_ptr() as usize, 8, Some(7), None) {
        Some(Err(e)) => assert_eq!(e.code(), want),
        other => panic!("expected -{want}, got {:?}", other.map(|x| x.map_err(|e| e.code()))),
    }
    // Larger than any inline frame: not this path's.
    let big = vec![0u8; EAGER_MAX + 1];
    assert!(a.eng.inject(0, big.as_ptr() as usize, big.len(), None, None).is_none());
}

#[test]
fn a_forged_request_naming_another_process_is_dropped() {
    let (a, mut b) = pair();
    let target = vec![0u8; 256];
    let (_r, key) = register(&b, &target, RW);
    let mut dst = vec![0u8; 256];
    // A READ request "from a" (its name, its epoch), naming `pid` as the
    // process to write into; only b runs, and a's inbox shows what b sent.
    let mut forged = |pid: u32| {
        let mut h = Hdr {
            op: op::READ,
            len: 64,
            rma_addr: target.as_ptr() as u64,
            rma_key: key,
            msg_id: (a.eng.next_id >> 32) << 32 | 5,
            iov_count: 1,
            ..Default::default()
        };
        h.pid = pid;
        h.name = a.eng.name;
        let mut hb = [0u8; HDR_MAX];
        let hl = h.encode(&mut hb);
        let link = Link::open(&b.addr, &a.eng.dial).expect("b's inbox");
        link.send(&[&hb[..hl], &encode_iovs(&[(dst.as_mut_ptr() as usize, 64)])]).expect("queued");
    };
    let to_a = loopback::Queue::find(&a.addr).expect("a's inbox");
    // Naming process 1: the link a's frames come on records this process
    // as a's owner, so b serves nothing and answers nothing.
    forged(1);
    for _ in 0..100 {
        b.eng.progress();
    }
    assert_eq!(to_a.waiting(), 0, "b answered a forged request");
    // (The control: the same request naming a's real process is served:
    // an ACK carrying the 64 bytes goes to a.)
    forged(std::process::id());
    for _ in 0..100 {
        b.eng.progress();
    }
    assert!(to_a.waiting() >= 1, "the same request, not forged, was not served");
}

fn cancel_gives_ecanceled_and_a_peer_that_closes_fails_what_it_owed() {
    let (mut a, b) = pair();
    let mut buf = [0u8; 16];
    recv(&mut a, 42, &mut buf, ffi::FI_ADDR_UNSPEC, None);
    a.eng.cancel(42).expect("found");
    let e = err(read(&a).expect("the cancel's entry"));
    assert_eq!((e.op_context, e.err as u32), (42, ffi::FI_ECANCELED));
    assert_eq!(a.eng.cancel(42).map_err(|e| e.code()).err(), Some(ffi::FI_ENOENT));
    // A large send to b, then b goes away before answering.
    let big = vec![1u8; RNDV];
    send(&mut a, 43, &big, None);
    drop(b);
    let mut got = None;
    for _ in 0..100_000 {
        a.eng.progress();
        got = read(&a);
        if got.is_some() {
            break;
        }
        // (The liveness sweep looks every LIVENESS_EVERY.)
        std::thread::sleep(Duration::from_micros(20));
    }
    let e = err(got.expect("the send fails once its peer is gone"));
    assert_eq!((e.op_context, e.err as u32), (43, ffi::FI_ECONNABORTED));
}

fn remote_writes_into_memory_made_read_only_are_refused_and_the_owner_lives() {
    // (A page-aligned mapping of the target's own, registered read-write
    // through the cache, then mprotect(PROT_READ): the loopback wire makes
    // every large write a pushed one, copied by the target itself, and
    // inline writes are copied by it too: without the check, both would
    // fault this process.)
    let mode = ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY;
    let (mut a, mut b) = (side(), side_pinned(mode, &Config::default(), true));
    a.av.insert(&[Some(b.addr)]);
    b.av.insert(&[Some(a.addr)]);
    let len = 4 * EAGER_MAX;
    // SAFETY: a fresh anonymous mapping, ours.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    } as usize;
    assert_ne!(base, libc::MAP_FAILED as usize);
    // SAFETY: the mapping just made, `len` bytes.
    let target = unsafe { std::slice::from_raw_parts(base as *const u8, len) };
    let (_r, key) = register(&b, target, RW);
    rma(&mut a, 1, &mut [7u8; 64], base, key, false);
    assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 1, "writable: served");
    // SAFETY: our own mapping.
    assert_eq!(unsafe { libc::mprotect(base as *mut libc::c_void, len, libc::PROT_READ) }, 0);
    for n in [64, 2 * EAGER_MAX] {
        refused(&mut a, &mut b, target, Ask { addr: base, key, read: false, len: n });
    }
    rma(&mut a, 2, &mut [0u8; 64], base, key, true);
    assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 2, "reads of read-only memory: served");
    assert!(target[..64].iter().all(|&x| x == 7));
    // SAFETY: our own mapping.
    unsafe { libc::munmap(base as *mut libc::c_void, len) };
}

/// Progress one endpoint until it has a completion (a bound, not a time).
fn next1(a: &mut Side) -> Got {
    for _ in 0..10_000 {
        if let Some(g) = read(a) {
            return g;
        }
        a.eng.progress();
    }
    panic!("no completion in 10000 progress calls");
}

fn an_endpoint_writes_into_and_reads_its_own_registration() {
    // (Its own address in its AV: the request names this very endpoint,
    // and is served because it is one of its pending operations.)
    let mut a = side();
    a.av.insert(&[Some(a.addr)]);
    let mut target = vec![0u8; 3 * EAGER_MAX];
    let base = target.as_mut_ptr() as usize;
    let (_r, key) = register(&a, &target, RW);
    let mut small = [4u8; 100];
    rma(&mut a, 1, &mut small, base, key, false);
    assert_eq!(ok(next1(&mut a)).op_context, 1);
    let mut big = vec![6u8; 2 * EAGER_MAX];
    rma(&mut a, 2, &mut big, base + EAGER_MAX, key, false);
    assert_eq!(ok(next1(&mut a)).op_context, 2);
    let mut back = vec![0u8; 2 * EAGER_MAX];
    rma(&mut a, 3, &mut back, base + EAGER_MAX, key, true);
    assert_eq!(ok(next1(&mut a)).op_context, 3);
    assert!(target[..100].iter().all(|&x| x == 4) && back == big);
}

fn remote_cq_data_of_a_write_reaches_the_target_cq() {
    // (b's AV holds another address first: a is fi_addr 1 there.)
    let (mut a, mut b) = (side(), side());
    a.av.insert(&[Some(b.addr)]);
    b.av.insert(&[Some("127.0.0.1:9".parse().unwrap()), Some(a.addr)]);
    let mut target = vec![0u8; 2 * EAGER_MAX];
    let base = target.as_mut_ptr() as usize;
    let (_r, key) = register(&b, &target, RW);
    for (n, data) in [(64usize, 0xfeed_u64), (2 * EAGER_MAX, 0xbeef)] {
        let mut buf = vec![1u8; n];
        let o = RmaOp {
            ctx: 9,
            iovs: iov_mut(&mut buf),
            dest: 0,
            addr: base as u64,
            key,
            data: Some(data),
            flags: None,
            read: false,
        };
        a.eng.rma(o).expect("posted");
        assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 9);
        let e = ok(next(&mut a, &mut b, 1));
        let want = (ffi::FI_RMA | ffi::FI_REMOTE_WRITE) as u64 | ffi::FI_REMOTE_CQ_DATA as u64;
        assert_eq!((e.flags, e.len, e.data, e.src), (want, n, data, 1), "the target's entry for a writedata of {n} B");
    }
}

const PEEK: u64 = ffi::FI_PEEK as u64;
const CLAIM: u64 = ffi::FI_CLAIM as u64;
const DISCARD: u64 = ffi::FI_DISCARD as u64;

/// b's peek (`flags`) for `tag` from anyone, repeated (as MPI_Probe does)
/// until it finds a message or a bound: its completion, None if every
/// try said FI_ENOMSG. Each try gives exactly one completion.
fn peek(a: &mut Side, b: &mut Side, ctx: usize, tag: u64, flags: u64) -> Option<CqEntry> {
    for _ in 0..2000 {
        b.eng.probe(ctx, Iovs::default(), ffi::FI_ADDR_UNSPEC, (tag, 0), flags).expect("peek posted");
        match read(b).expect("a peek completes at once") {
            Got::Ok(e) => {
                assert!(read(b).is_none(), "one completion per peek");
                return Some(e);
            }
            Got::Err(e) => assert_eq!((e.err as u32, e.op_context, e.tag), (ffi::FI_ENOMSG, ctx, tag), "{e:?}"),
        }
        a.eng.progress();
    }
    None
}

fn peek_claim_and_discard_find_unexpected_messages_without_consuming_them() {
    let (mut a, mut b) = pair();
    let tagged_recv = (ffi::FI_RECV | ffi::FI_TAGGED) as u64;
    // Nothing sent: FI_ENOMSG.
    assert!(peek(&mut a, &mut b, 1, 5, PEEK).is_none(), "found a message nobody sent");
    // A peek reports length, tag and source, and leaves the message.
    send(&mut a, 100, b"hello", Some(5));
    assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 100);
    let e = peek(&mut a, &mut b, 2, 5, PEEK).expect("the peek finds the send");
    assert_eq!((e.op_context, e.len, e.tag, e.flags, e.buf), (2, 5, 5, tagged_recv, 0));
    assert_eq!(e.src, 0, "FI_SOURCE: a is fi_addr 0 at b");
    assert!(peek(&mut a, &mut b, 3, 6, PEEK).is_none(), "another tag is not found");
    let e = peek(&mut a, &mut b, 4, 5, PEEK).expect("not consumed by the first peek");
    assert_eq!(e.op_context, 4);
    let mut buf = [0u8; 5];
    recv(&mut b, 5, &mut buf, ffi::FI_ADDR_UNSPEC, Some((5, 0)));
    assert_eq!(ok(read(&b).expect("matched at post time")).op_context, 5);
    assert_eq!(&buf, b"hello");
    assert!(peek(&mut a, &mut b, 6, 5, PEEK).is_none(), "received: gone");

    // FI_PEEK|FI_CLAIM sets a rendezvous send aside for the FI_CLAIM
    // receive with the same context: no other receive or peek sees it.
    let big: Vec<u8> = (0..RNDV).map(|i| (i * 7 + 1) as u8).collect();
    send(&mut a, 101, &big, Some(6));
    let e = peek(&mut a, &mut b, 10, 6, PEEK | CLAIM).expect("the claim finds the rendezvous send");
    assert_eq!((e.op_context, e.len, e.tag), (10, big.len(), 6));
    assert!(peek(&mut a, &mut b, 11, 6, PEEK).is_none(), "a claimed message is not peeked again");
    let mut other = [0u8; 6];
    recv(&mut b, 12, &mut other, ffi::FI_ADDR_UNSPEC, Some((6, 0)));
    assert!(read(&b).is_none(), "a receive took the claimed message");
    send(&mut a, 102, b"second", Some(6));
    assert_eq!(ok(next(&mut a, &mut b, 1)).op_context, 12);
    assert_eq!(&other, b"second");
    assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 102);
    let wrong = b.eng.probe(13, Iovs::default(), ffi::FI_ADDR_UNSPEC, (6, 0), CLAIM);
    assert_eq!(wrong.map_err(|e| e.code()).err(), Some(ffi::FI_EINVAL), "FI_CLAIM with a context that claimed nothing");
    let mut got = vec![0u8; big.len()];
    b.eng.probe(10, iov_mut(&mut got), ffi::FI_ADDR_UNSPEC, (0, 0), CLAIM).expect("the claimed receive");
    let e = ok(next(&mut a, &mut b, 1));
    assert_eq!((e.op_context, e.len, e.tag), (10, big.len(), 6));
    assert!(got == big, "the claimed receive's data");
    assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 101, "the claimed send completes");

    // FI_PEEK|FI_DISCARD drops a rendezvous send; its sender completes.
    send(&mut a, 103, &big, Some(7));
    let e = peek(&mut a, &mut b, 20, 7, PEEK | DISCARD).expect("found");
    assert_eq!((e.op_context, e.len), (20, big.len()));
    assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 103, "a discarded send completes");
    assert!(peek(&mut a, &mut b, 21, 7, PEEK).is_none(), "discarded: gone");
    // FI_CLAIM|FI_DISCARD drops a claimed one.
    send(&mut a, 104, b"claimed", Some(8));
    assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 104);
    assert_eq!(peek(&mut a, &mut b, 30, 8, PEEK | CLAIM).expect("found").op_context, 30);
    b.eng.probe(30, Iovs::default(), ffi::FI_ADDR_UNSPEC, (0, 0), CLAIM | DISCARD).expect("discarded");
    let e = ok(read(&b).expect("the discard completes"));
    assert_eq!((e.op_context, e.len, e.tag), (30, 7, 8));
    assert!(peek(&mut a, &mut b, 31, 8, PEEK).is_none(), "claimed and discarded: gone");
    let wrong = b.eng.probe(32, Iovs::default(), ffi::FI_ADDR_UNSPEC, (0, 0), DISCARD);
    assert_eq!(wrong.map_err(|e| e.code()).err(), Some(ffi::FI_EINVAL), "FI_DISCARD alone");
}

#[test]
fn a_tcp_frame_naming_another_sender_is_dropped() {
    // b receives over TCP; a connection whose hello names a carries a
    // send whose header names c: dropped and the connection closed, the
    // receive stays posted. The same frame naming a, on a new connection,
    // is delivered (the control).
    VIA.with(|c| c.set(Via::Tcp));
    let (mut a, mut b) = pair();
    let c: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut buf = [0u8; 8];
    recv(&mut b, 1, &mut buf, ffi::FI_ADDR_UNSPEC, None);
    let link = Link::open(&b.addr, &a.eng.dial).expect("b's listener");
    let frame = |name: &SocketAddr| {
        let mut h = Hdr { op: op::EAGER, len: 8, ..Default::default() };
        let e = crate::info::addr::encode(name);
        h.name[..e.len()].copy_from_slice(&e);
        h.pid = std::process::id();
        let mut hb = [0u8; HDR_MAX];
        let hl = h.encode(&mut hb);
        let mut f = hb[..hl].to_vec();
        f.extend_from_slice(b"8 bytes!");
        f
    };
    link.send(&[&frame(&c)]).expect("sent");
    for _ in 0..200 {
        b.eng.progress();
        link.flush();
    }
    assert!(read(&b).is_none(), "a frame naming c on a's connection was delivered");
    let mut state = LinkState::Open;
    for _ in 0..2000 {
        b.eng.progress();
        // (a's inbox reads the connection its link opened, and tells it.)
        a.eng.progress();
        state = link.state();
        if state != LinkState::Open {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    assert_eq!(state, LinkState::Closed, "b closed the connection that carried the forged frame");
    let link = Link::open(&b.addr, &a.eng.dial).expect("b's listener");
    link.send(&[&frame(&a.addr)]).expect("sent");
    let mut got = None;
    for _ in 0..2000 {
        b.eng.progress();
        link.flush();
        got = read(&b);
        if got.is_some() {
            break;
        }
    }
    assert_eq!(ok(got.expect("the same frame naming a is delivered")).op_context, 1);
    assert_eq!(&buf, b"8 bytes!");
}

#[test]
fn a_shared_memory_frame_naming_a_peer_reached_over_tcp_is_dropped() {
    // Under FI_OXMR_WIRE=auto, b reaches 198.51.100.7 (not an address of
    // this host) over TCP, so a frame that names it but came through b's
    // local queue is not its: dropped. The same frame naming a (on
    // 127.77.0.1, loopback: shared memory) is delivered (the control).
    VIA.with(|c| c.set(Via::Loop));
    let (a, mut b) = pair();
    assert_eq!(b.eng.dial.wire, crate::config::Wire::Auto, "the default wire");
    let far: SocketAddr = "198.51.100.7:4000".parse().unwrap();
    let mut buf = [0u8; 8];
    recv(&mut b, 1, &mut buf, ffi::FI_ADDR_UNSPEC, None);
    let link = Link::open(&b.addr, &a.eng.dial).expect("b's inbox");
    let frame = |name: &SocketAddr| {
        let mut h = Hdr { op: op::EAGER, len: 8, ..Default::default() };
        let e = crate::info::addr::encode(name);
        h.name[..e.len()].copy_from_slice(&e);
        h.pid = std::process::id();
        let mut hb = [0u8; HDR_MAX];
        let hl = h.encode(&mut hb);
        let mut f = hb[..hl].to_vec();
        f.extend_from_slice(b"8 bytes!");
        f
    };
    link.send(&[&frame(&far)]).expect("sent");
    for _ in 0..200 {
        b.eng.progress();
    }
    assert!(read(&b).is_none(), "a local frame naming a TCP peer was delivered");
    link.send(&[&frame(&a.addr)]).expect("sent");
    for _ in 0..200 {
        b.eng.progress();
    }
    assert_eq!(ok(read(&b).expect("the same frame naming a is delivered")).op_context, 1);
    assert_eq!(&buf, b"8 bytes!");
}

/// Each test above (but the forged-frame one, which writes into a loopback
/// queue), over the loopback wire and over TCP (real sockets on 127.0.0.1,
/// in this process): the engine must behave the same on both.
macro_rules! over_both {
    ($($t:ident),* $(,)?) => {
        $(
            mod $t {
                #[test]
                fn loopback() {
                    super::with_wire(super::Via::Loop, super::$t)
                }
                #[test]
                fn tcp() {
                    super::with_wire(super::Via::Tcp, super::$t)
                }
            }
        )*
    };
}

over_both!(
    peek_claim_and_discard_find_unexpected_messages_without_consuming_them,
    an_endpoint_writes_into_and_reads_its_own_registration,
    remote_cq_data_of_a_write_reaches_the_target_cq,
    tagged_receives_match_by_tag_ignore_bits_and_source,
    a_rendezvous_send_goes_through_pull_and_data_and_completes_both_sides,
    truncated_receives_report_etrunc_with_the_overflow_inline_and_rendezvous,
    rma_writes_and_reads_land_in_the_registration,
    the_rma_target_refuses_wrong_keys_bounds_rights_and_closed_keys,
    a_refused_access_completes_with_one_code_whatever_was_wrong,
    a_registration_not_enabled_under_fi_mr_endpoint_is_refused,
    batched_writes_are_each_checked_for_key_and_rights,
    cancel_gives_ecanceled_and_a_peer_that_closes_fails_what_it_owed,
    remote_writes_into_memory_made_read_only_are_refused_and_the_owner_lives,
);

/// Progress `s` alone until it has a completion (a bounded count).
fn next_alone(s: &mut Side) -> Got {
    for _ in 0..100_000 {
        s.eng.progress();
        if let Some(g) = read(s) {
            return g;
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    panic!("no completion in 100000 progress calls");
}

#[test]
fn a_target_that_answers_a_streamed_write_early_stops_its_stream_before_it_completes() {
    // A lying target (a raw socket speaking the TCP wire) answers a's
    // 16 MiB write with a success ACK as soon as the request arrives, and
    // reads nothing more: a completes the write, and by then has dropped
    // what was left of its stream (its buffer is the application's again:
    // nothing is read from it after the completion).
    use std::io::{Read, Write};
    VIA.with(|c| c.set(Via::Tcp));
    let mut a = side();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let liar = l.local_addr().unwrap();
    a.av.insert(&[Some(liar)]);
    let mut buf = vec![7u8; 16 << 20];
    rma(&mut a, 9, &mut buf, 0x1000, 0x42, false);
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut name = [0u8; 28];
    let e = crate::info::addr::encode(&liar);
    name[..e.len()].copy_from_slice(&e);
    // (a's own hello, this build's version, with the liar's name.)
    let mut hello = a.eng.dial.hello;
    hello.name = name;
    hello.epoch = 77;
    let mut answer = crate::wire::hello_bytes(&hello);
    answer[44] = 1; // (ACCEPT)
    s.write_all(&answer).unwrap();
    // Its hello, then the WRITE request (a length, the frame).
    let mut theirs = [0u8; crate::wire::HELLO_LEN];
    let mut len = [0u8; 4];
    let mut req = Vec::new();
    for _ in 0..20_000 {
        a.eng.progress();
        if s.set_nonblocking(true).is_ok() && req.is_empty() {
            if theirs[0] == 0 && s.read_exact(&mut theirs).is_err() {
                continue;
            }
            if s.read_exact(&mut len).is_ok() {
                req = vec![0u8; u32::from_le_bytes(len) as usize];
                s.set_nonblocking(false).unwrap();
                s.read_exact(&mut req).unwrap();
                break;
            }
        }
    }
    let (h, _) = Hdr::decode(&req).expect("a's WRITE request");
    assert_eq!((h.op, h.flags & flag::STREAM != 0), (op::WRITE, true), "a streamed write");
    assert_eq!(a.eng.peers.owed, 1, "its data is still to go");
    let ack = Hdr { op: op::ACK, msg_id: h.msg_id, pid: 1, name, ..Default::default() };
    let mut hb = [0u8; HDR_MAX];
    let n = ack.encode(&mut hb);
    s.write_all(&(n as u32).to_le_bytes()).unwrap();
    s.write_all(&hb[..n]).unwrap();
    let got = next_alone(&mut a);
    assert_eq!(ok(got).op_context, 9, "the write completes at the (early) answer");
    assert_eq!(a.eng.peers.owed, 0, "nothing of the stream is left to read from the buffer");
    drop(buf);
}

#[test]
fn operations_queued_behind_a_refused_connect_fail_with_econnrefused() {
    // a (TCP) posts an eager send, a rendezvous send and an RMA write to a
    // port nobody listens on: none waits for the connect; each fails
    // with an error completion FI_ECONNREFUSED once the refusal is known
    // (or, had the kernel refused inside connect, the call itself does).
    VIA.with(|c| c.set(Via::Tcp));
    let mut a = side();
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    a.av.insert(&[Some(nobody)]);
    let small = [1u8; 16];
    let big = vec![2u8; 64 << 10];
    let mut w = vec![3u8; 64];
    let posted = [
        a.eng.send(&TxOp { ctx: 1, iovs: iov(&small), dest: 0, tag: None, data: None, flags: None }),
        a.eng.send(&TxOp { ctx: 2, iovs: iov(&big), dest: 0, tag: Some(5), data: None, flags: None }),
        a.eng.rma(RmaOp {
            ctx: 3,
            iovs: iov_mut(&mut w),
            dest: 0,
            addr: 0,
            key: 0,
            data: None,
            flags: None,
            read: false,
        }),
    ];
    let mut failed = Vec::new();
    for (i, r) in posted.into_iter().enumerate() {
        match r {
            Ok(()) => {
                let e = err(next_alone(&mut a));
                assert_eq!(e.err as u32, ffi::FI_ECONNREFUSED, "operation {}", e.op_context);
                failed.push(e.op_context);
            }
            Err(e) => {
                assert_eq!(e.code(), ffi::FI_ECONNREFUSED, "operation {}", i + 1);
                failed.push(i + 1);
            }
        }
    }
    failed.sort();
    assert_eq!(failed, vec![1, 2, 3], "every operation failed once");
    assert!(read(&a).is_none(), "nothing more");
}

#[test]
fn a_peer_restarted_at_its_address_fails_what_was_pending_with_the_old_one() {
    // a's rendezvous send waits for b's ACK (b has posted no receive);
    // then a hello of a new epoch arrives at a from b's address (a new
    // endpoint there): the send fails with FI_ECONNABORTED, and a's next
    // send opens a new link.
    VIA.with(|c| c.set(Via::Tcp));
    let (mut a, mut b) = pair();
    let big = vec![2u8; RNDV];
    a.eng.send(&TxOp { ctx: 7, iovs: iov(&big), dest: 0, tag: None, data: None, flags: None }).expect("posted");
    run(&mut a, &mut b, |a, b| !b.eng.unexpected[0].is_empty() && a.eng.peers.list.iter().any(|p| p.link.epoch() != 0));
    let old = a.eng.peers.list[0].link.epoch();
    let mut h = a.eng.dial.hello;
    let e = crate::info::addr::encode(&b.addr);
    h.name = [0u8; 28];
    h.name[..e.len()].copy_from_slice(&e);
    h.epoch = old.wrapping_add(1).max(1);
    let mut raw = std::net::TcpStream::connect(a.addr).expect("a's listener");
    std::io::Write::write_all(&mut raw, &crate::wire::hello_bytes(&h)).expect("hello sent");
    let e = err(next_alone(&mut a));
    assert_eq!((e.op_context, e.err as u32), (7, ffi::FI_ECONNABORTED));
    assert!(a.eng.peers.list.is_empty(), "the old link is gone");
}

/// Whether the raw connection `s` was closed by the other side (reads
/// what is there without waiting; the peer's hello answer is skipped).
fn closed_by_peer(s: &mut std::net::TcpStream) -> bool {
    let mut b = [0u8; 256];
    loop {
        match std::io::Read::read(s, &mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

/// A progress pass reads an endpoint's sockets once. The sender has a TCP
/// link (its frames buffer, so its calls are never quiet), the receiver
/// only the connection it accepted (its calls are quiet when nothing came):
/// each idle call of either is one read, not one to ask and one to take.
#[test]
fn an_idle_progress_call_reads_the_sockets_once() {
    with_wire(Via::Tcp, || {
        let (mut a, mut b) = pair();
        let mut buf = [0u8; 8];
        recv(&mut b, 1, &mut buf, 0, Some((7, 0)));
        send(&mut a, 2, b"12345678", Some(7));
        assert_eq!(ok(next(&mut a, &mut b, 1)).op_context, 1);
        assert_eq!(ok(next(&mut a, &mut b, 0)).op_context, 2);
        assert_eq!(&buf, b"12345678");
        let reads = |s: &Side| s.eng.rx.as_ref().map_or(0, |r| r.tcp_reads());
        for s in [&mut a, &mut b] {
            let before = reads(s);
            for _ in 0..100 {
                s.eng.progress();
            }
            assert_eq!(reads(s) - before, 100, "socket reads in 100 idle progress calls");
        }
    });
}

#[test]
fn random_frames_over_tcp_never_panic_and_an_unsound_one_closes_its_connection() {
    // A seeded loop (OXMR_FUZZ_SEED, OXMR_FUZZ_ROUNDS): a raw connection
    // to b says it is a (a valid hello), then sends frames built from
    // random headers (every kind, unknown kinds, random flags, counts,
    // lengths, ids, keys), bodies that fit the header or not, and random
    // corruptions. b must never panic; a frame that does not decode, lies
    // about its body or names another sender closes the connection, and
    // nothing after it is taken; sound frames keep it open.
    VIA.with(|c| c.set(Via::Tcp));
    let (mut a, mut b) = pair();
    let seed: u64 = std::env::var("OXMR_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_f00d);
    let rounds: usize = std::env::var("OXMR_FUZZ_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000) / 5;
    println!("OXMR_FUZZ_SEED={seed}");
    let mut x = seed.max(1);
    let mut rnd = move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let name_of = |s: &SocketAddr| {
        let mut n = [0u8; 28];
        let e = crate::info::addr::encode(s);
        n[..e.len()].copy_from_slice(&e);
        n
    };
    let other: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let (mut sound_seen, mut unsound_seen) = (0, 0);
    for round in 0..rounds {
        let mut raw = std::net::TcpStream::connect(b.addr).expect("b's listener");
        // (a's own hello: its name and epoch.)
        let hello = a.eng.dial.hello;
        std::io::Write::write_all(&mut raw, &crate::wire::hello_bytes(&hello)).unwrap();
        raw.set_nonblocking(true).unwrap();
        for _ in 0..1 + rnd() % 6 {
            let small = |v: u64, m: u64| match v % 3 {
                0 => 0,
                _ => v % m,
            };
            let mut h = Hdr {
                op: (rnd() % 12) as u8,
                flags: rnd() as u8,
                iov_count: (rnd() % 4) as u16,
                len: if rnd() % 4 == 0 { rnd() } else { rnd() % 9000 },
                tag: rnd(),
                data: small(rnd(), u64::MAX),
                msg_id: small(rnd(), u64::MAX),
                rma_addr: small(rnd(), u64::MAX),
                rma_key: small(rnd(), u64::MAX),
                status: small(rnd(), 300) as u32,
                pid: rnd() as u32,
                ..Default::default()
            };
            h.name = if rnd() % 8 == 0 { name_of(&other) } else { name_of(&a.addr) };
            let body: Vec<u8> = if rnd() % 2 == 0 {
                match h.op {
                    op::EAGER | op::WRITE_INLINE => {
                        h.len %= 4000;
                        (0..h.len).map(|_| rnd() as u8).collect()
                    }
                    op::RTS | op::WRITE | op::READ => {
                        let mut v = Vec::new();
                        for i in 0..h.iov_count as u64 {
                            v.extend((rnd() & !7).to_le_bytes());
                            v.extend((if i == 0 { h.len % (1 << 20) } else { rnd() % 100 }).to_le_bytes());
                        }
                        h.len %= 1 << 20;
                        v
                    }
                    _ => (0..rnd() % 64).map(|_| rnd() as u8).collect(),
                }
            } else {
                (0..rnd() % 300).map(|_| rnd() as u8).collect()
            };
            let mut hb = [0u8; HDR_MAX];
            let hl = h.encode(&mut hb);
            let mut f = hb[..hl].to_vec();
            f.extend_from_slice(&body);
            if rnd() % 5 == 0 {
                let i = (rnd() as usize) % f.len();
                f[i] ^= 1 << (rnd() % 8);
            }
            f.truncate(FRAME_FLOOR);
            let sound = Hdr::decode(&f).is_some_and(|(h, hl)| {
                crate::protocol::frame_lies(&h, &f[hl..]).is_none() && crate::info::addr::parse(&h.name) == Some(a.addr)
            });
            let mut framed = (f.len() as u32).to_le_bytes().to_vec();
            framed.extend_from_slice(&f);
            std::io::Write::write_all(&mut raw, &framed).unwrap();
            if sound {
                sound_seen += 1;
                for _ in 0..20 {
                    b.eng.progress();
                    a.eng.progress();
                }
                continue;
            }
            unsound_seen += 1;
            let mut closed = false;
            for _ in 0..4000 {
                b.eng.progress();
                a.eng.progress();
                if closed_by_peer(&mut raw) {
                    closed = true;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            assert!(closed, "round {round}: an unsound frame did not close its connection: {:?}", Hdr::decode(&f));
            break;
        }
        // Every message b kept as unexpected holds together.
        for q in &b.eng.unexpected {
            for u in q {
                assert!(
                    u.hdr.op != op::EAGER || u.data.len() as u64 == u.hdr.len,
                    "round {round}: a lying eager send was kept"
                );
            }
        }
    }
    println!("{sound_seen} sound and {unsound_seen} unsound frames");
    assert!(sound_seen > 0 && unsound_seen > 0, "the loop made both kinds");
}

#[test]
fn a_connected_endpoint_takes_frames_from_its_peer_only() {
    let (mut a, mut b) = pair();
    b.eng.bound.one_peer = true;
    let mut c = side();
    c.av.insert(&[Some(b.addr)]);
    let mut buf = [0u8; 8];
    recv(&mut b, 1, &mut buf, ffi::FI_ADDR_UNSPEC, None);
    send(&mut c, 2, b"stranger", None);
    for _ in 0..100 {
        c.eng.progress();
        b.eng.progress();
    }
    assert!(read(&b).is_none(), "a stranger's message was taken");
    send(&mut a, 3, b"the peer", None);
    let e = ok(next(&mut a, &mut b, 1));
    assert_eq!(e.op_context, 1);
    assert_eq!(&buf, b"the peer");
}

#[test]
fn an_eager_frame_over_the_eager_limit_closes_its_connection_and_is_never_kept() {
    // A raw peer (a's own hello) sends b an eager message of the limit's
    // size, which b keeps as unexpected, then one a byte over it: b closes
    // the connection, and keeps nothing of it (nor of what follows).
    VIA.with(|c| c.set(Via::Tcp));
    let (a, mut b) = pair();
    let rx = b.eng.rx.as_ref().expect("b's inbox");
    let proven = rx.wires().find(|w| w.proof == crate::wire::Proof::Hello).expect("b takes connections");
    let max = Engine::inline_accepted(proven);
    let mut raw = std::net::TcpStream::connect(b.addr).expect("b's listener");
    std::io::Write::write_all(&mut raw, &crate::wire::hello_bytes(&a.eng.dial.hello)).unwrap();
    let frame = |len: usize, tag: u64| {
        let h =
            Hdr { op: op::EAGER, flags: flag::TAGGED, len: len as u64, tag, name: a.eng.name, ..Default::default() };
        let mut hb = [0u8; HDR_MAX];
        let n = h.encode(&mut hb);
        let mut f = ((n + len) as u32).to_le_bytes().to_vec();
        f.extend_from_slice(&hb[..n]);
        f.extend(std::iter::repeat_n(7u8, len));
        f
    };
    std::io::Write::write_all(&mut raw, &frame(max, 1)).unwrap();
    std::io::Write::write_all(&mut raw, &frame(max + 1, 2)).unwrap();
    std::io::Write::write_all(&mut raw, &frame(8, 3)).unwrap();
    raw.set_nonblocking(true).unwrap();
    let mut closed = false;
    for _ in 0..20_000 {
        b.eng.progress();
        if closed_by_peer(&mut raw) {
            closed = true;
            break;
        }
    }
    assert!(closed, "the connection that sent the oversized eager frame was closed");
    for _ in 0..100 {
        b.eng.progress();
    }
    let kept: Vec<(u64, u64)> = b.eng.unexpected[1].iter().map(|u| (u.hdr.tag, u.hdr.len)).collect();
    assert_eq!(kept, vec![(1, max as u64)], "only the message within the limit is kept");
}

#[test]
fn a_burst_of_refused_accesses_closes_the_connection_and_bans_its_source_for_a_while() {
    // b closes a's TCP connection at its 5th refused access within the
    // window (FI_OXMR_REFUSE_MAX=5) and refuses a's source: the refusals
    // before it complete with the one refusal code, and the operation
    // after it fails for the connection (a key search stops there), while
    // b never answered it.
    VIA.with(|c| c.set(Via::Tcp));
    let cfg = Config { refuse_max: 5, refuse_ban: Duration::from_secs(30), ..Config::default() };
    let mut a = side();
    let mut b = side_with(ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY, &cfg);
    a.av.insert(&[Some(b.addr)]);
    b.av.insert(&[Some(a.addr)]);
    let target = vec![1u8; 4096];
    let base = target.as_ptr() as usize;
    let (_r, key) = register(&b, &target, RW);
    for i in 0..5 {
        refused(&mut a, &mut b, &target, Ask { addr: base, key: key ^ (i + 1), read: true, len: 64 });
    }
    let mut buf = vec![0x5au8; 64];
    rma(&mut a, 8, &mut buf, base, key, true);
    let e = err(next(&mut a, &mut b, 0));
    assert_eq!(e.op_context, 8);
    assert_ne!(e.err as u32, crate::mr::registry::REFUSED, "the 6th was not answered: the connection was closed");
    assert!(buf.iter().all(|&x| x == 0x5a), "nothing was read for it");
    // A good access from the banned source finds no way in either.
    rma(&mut a, 9, &mut buf, base, key, true);
    let e = err(next(&mut a, &mut b, 0));
    assert_eq!(e.op_context, 9, "refused while banned: {}", crate::error::errno_name(e.err as u32));
}

#[test]
fn unexpected_messages_past_their_bound_hold_the_sender_back_and_none_is_lost() {
    // a sends b 64 tagged messages of 16 KiB that b has no receive for;
    // b's unexpected messages may hold 128 KiB (FI_OXMR_UNEXP_MAX): past
    // it b stops reading a (what a sent waits in a's link and the
    // socket), and once b posts receives, every message arrives, in
    // order, whole.
    VIA.with(|c| c.set(Via::Tcp));
    let cfg = Config { unexp_max: 128 << 10, ..Config::default() };
    let mut a = side();
    let mut b = side_with(ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY, &cfg);
    a.av.insert(&[Some(b.addr)]);
    b.av.insert(&[Some(a.addr)]);
    const N: usize = 64;
    const LEN: usize = 16 << 10;
    let msgs: Vec<Vec<u8>> = (0..N).map(|i| vec![i as u8; LEN]).collect();
    // (Message i tagged i, as many as a takes now.)
    let post_more = |a: &mut Side, posted: &mut usize| {
        while *posted < N {
            let o = TxOp {
                ctx: 1000 + *posted,
                iovs: iov(&msgs[*posted]),
                dest: 0,
                tag: Some(*posted as u64),
                data: None,
                flags: None,
            };
            if a.eng.send(&o).is_err() {
                break;
            }
            *posted += 1;
        }
    };
    let mut posted = 0;
    let mut most = 0;
    for _ in 0..5000 {
        post_more(&mut a, &mut posted);
        a.eng.progress();
        b.eng.progress();
        most = most.max(b.eng.unexp.bytes);
    }
    assert!(b.eng.unexp.bytes > 0, "some messages are kept");
    assert!(
        most <= (128 << 10) + LEN + 2 * size_of::<UnexpectedMsg>(),
        "b kept {most} bytes of unexpected messages; the bound is 128 KiB (one message over)"
    );
    assert!(b.eng.unexpected[1].len() < N, "not every message was taken: the rest waits at a");
    let mut bufs: Vec<Vec<u8>> = (0..N).map(|_| vec![0u8; LEN]).collect();
    for (i, buf) in bufs.iter_mut().enumerate() {
        b.eng.recv(i, iov_mut(buf), 0, Some((i as u64, 0)), None).expect("receive posted");
    }
    let mut got = 0;
    for _ in 0..20_000 {
        post_more(&mut a, &mut posted);
        a.eng.progress();
        b.eng.progress();
        while read(&b).is_some() {
            got += 1;
        }
        while read(&a).is_some() {}
        if got == N && posted == N {
            break;
        }
    }
    assert_eq!(got, N, "every message arrived");
    for (i, buf) in bufs.iter().enumerate() {
        assert!(buf.iter().all(|&x| x == i as u8), "message {i} whole");
    }
    assert_eq!(b.eng.unexp.bytes, 0);
}

#[test]
fn a_peer_that_never_reads_our_answers_is_held_back_past_the_outbox_bound() {
    // A raw peer (not oxmr) sends b RMA reads that b refuses (each answered
    // with an ACK) and never reads its socket: b's answers fill the
    // connection, then its link's queue, then the outbox, which may hold
    // 64 KiB for it (FI_OXMR_OUTBOX_MAX); past it b stops reading the
    // peer: the outbox stops growing and the raw sender's writes block.
    VIA.with(|c| c.set(Via::Tcp));
    let cfg = Config { outbox_max: 64 << 10, refuse_max: 0, ..Config::default() };
    let mut b = side_with(ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY, &cfg);
    let spare = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let me = spare.local_addr().unwrap();
    let mut raw = std::net::TcpStream::connect(b.addr).expect("b's listener");
    let mut hello = b.eng.dial.hello;
    let e = crate::info::addr::encode(&me);
    hello.name = [0u8; 28];
    hello.name[..e.len()].copy_from_slice(&e);
    hello.epoch = 0x77;
    std::io::Write::write_all(&mut raw, &crate::wire::hello_bytes(&hello)).unwrap();
    raw.set_nonblocking(true).unwrap();
    let req = |id: u64| {
        let h = Hdr {
            op: op::READ,
            len: 8,
            iov_count: 1,
            msg_id: 0x77 << 32 | id,
            rma_addr: 0x1000,
            rma_key: 0xdead,
            name: hello.name,
            pid: 1,
            ..Default::default()
        };
        let mut hb = [0u8; HDR_MAX];
        let n = h.encode(&mut hb);
        let mut f = ((n + 16) as u32).to_le_bytes().to_vec();
        f.extend_from_slice(&hb[..n]);
        f.extend_from_slice(&0x2000u64.to_le_bytes());
        f.extend_from_slice(&8u64.to_le_bytes());
        f
    };
    let (mut id, mut most, mut blocked) = (1u64, 0usize, 0);
    let mut pending: Vec<u8> = Vec::new();
    for _ in 0..400_000 {
        if pending.is_empty() {
            for _ in 0..64 {
                pending.extend(req(id));
                id += 1;
            }
        }
        match std::io::Write::write(&mut raw, &pending) {
            Ok(n) => {
                pending.drain(..n);
                blocked = 0;
            }
            Err(_) => blocked += 1,
        }
        b.eng.progress();
        most = most.max(b.eng.peers.list.iter().map(|p| p.outbox_bytes).max().unwrap_or(0));
        if blocked > 2000 {
            break;
        }
    }
    assert!(blocked > 2000, "the raw sender was held back (its writes block) after {id} requests");
    assert!(most > 0, "answers did queue in the outbox");
    assert!(most <= (64 << 10) + 256, "the outbox held {most} bytes; its bound is 64 KiB (one answer over)");
    drop(spare);
}

/// Post `b` as a multi-receive buffer (fi_recvmsg with FI_MULTI_RECV).
fn recv_multi(s: &mut Side, ctx: usize, b: &mut [u8]) {
    let flags = Some(ffi::FI_MULTI_RECV as u64);
    s.eng.recv(ctx, iov_mut(b), ffi::FI_ADDR_UNSPEC, None, flags).expect("buffer posted");
}

/// A byte pattern per message (`seed`).
fn pattern(n: usize, seed: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 13 + seed) as u8).collect()
}

const MULTI: u64 = ffi::FI_MULTI_RECV as u64;

fn a_multi_receive_buffer_takes_messages_at_successive_offsets_and_flags_the_last() {
    let (mut a, mut b) = pair();
    // Inline, inline, rendezvous (pulled), inline; then 255 bytes are
    // left, under the minimum of 256: the buffer goes with the fourth.
    b.eng.set_min_multi_recv(256);
    let sizes = [8usize, 1024, RNDV, 100];
    let mut buf = vec![0u8; sizes.iter().sum::<usize>() + 255];
    let mut next_buf = vec![0u8; 4096];
    recv_multi(&mut b, 1, &mut buf);
    recv_multi(&mut b, 2, &mut next_buf);
    let msgs: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| pattern(n, i)).collect();
    for (i, m) in msgs.iter().enumerate() {
        send(&mut a, 10 + i, m, None);
    }
    let base = buf.as_ptr() as usize;
    let mut off = 0;
    for (i, m) in msgs.iter().enumerate() {
        let e = ok(next(&mut a, &mut b, 1));
        assert_eq!((e.op_context, e.len, e.buf), (1, m.len(), base + off), "message {i}");
        assert_eq!(e.flags & MULTI != 0, i == 3, "FI_MULTI_RECV on the last message only ({i})");
        assert!(e.flags & ffi::FI_RECV as u64 != 0 && e.flags & ffi::FI_MSG as u64 != 0);
        assert!(buf[off..off + m.len()] == m[..], "message {i}'s bytes at its offset");
        off += m.len();
    }
    assert!(buf[off..].iter().all(|&x| x == 0), "nothing past the last message");
    // The next buffer takes over.
    send(&mut a, 20, b"the next one", None);
    let e = ok(next(&mut a, &mut b, 1));
    assert_eq!((e.op_context, e.len, e.buf, e.flags & MULTI), (2, 12, next_buf.as_ptr() as usize, 0));
    assert_eq!(&next_buf[..12], b"the next one");
    // The first one, posted again, takes messages again from its start.
    buf.fill(0);
    b.eng.cancel(2).expect("the second buffer is still posted");
    assert_eq!(err(read(&b).expect("its cancel")).op_context, 2);
    recv_multi(&mut b, 1, &mut buf);
    send(&mut a, 21, b"again", None);
    let e = ok(next(&mut a, &mut b, 1));
    assert_eq!((e.op_context, e.len, e.buf), (1, 5, base));
    assert_eq!(&buf[..5], b"again");
}

fn unexpected_messages_fill_a_multi_receive_buffer_when_it_is_posted() {
    let (mut a, mut b) = pair();
    for i in 0..3 {
        send(&mut a, i, &pattern(40, i), None);
    }
    run(&mut a, &mut b, |_, b| b.eng.unexpected[0].len() == 3);
    // 130 bytes, minimum 64: two messages fit with 50 left, under it.
    let mut buf = vec![0u8; 130];
    recv_multi(&mut b, 7, &mut buf);
    let base = buf.as_ptr() as usize;
    for i in 0..2 {
        let e = ok(read(&b).expect("matched when posted"));
        assert_eq!((e.op_context, e.len, e.buf), (7, 40, base + 40 * i));
        assert_eq!(e.flags & MULTI != 0, i == 1);
        assert!(buf[40 * i..40 * (i + 1)] == pattern(40, i)[..]);
    }
    assert!(read(&b).is_none());
    assert_eq!(b.eng.unexpected[0].len(), 1, "the third waits for the next buffer");
}

fn a_message_longer_than_the_space_left_is_truncated_and_releases_the_buffer() {
    let (mut a, mut b) = pair();
    b.eng.set_min_multi_recv(16);
    let mut buf = vec![0u8; 200 + 8];
    recv_multi(&mut b, 3, &mut buf[..200]);
    send(&mut a, 1, &pattern(150, 1), None);
    let e = ok(next(&mut a, &mut b, 1));
    assert_eq!((e.len, e.flags & MULTI), (150, 0));
    for n in [100usize, RNDV] {
        if n == RNDV {
            recv_multi(&mut b, 3, &mut buf[..200]);
            send(&mut a, 2, &pattern(150, 1), None);
            assert_eq!(ok(next(&mut a, &mut b, 1)).len, 150);
        }
        // (Kept until the send completes: a rendezvous send is read late.)
        let src = pattern(n, 2);
        send(&mut a, 2, &src, None);
        let e = err(next(&mut a, &mut b, 1));
        assert_eq!(e.err as u32, ffi::FI_ETRUNC, "{n} bytes into the 50 left");
        assert_eq!((e.op_context, e.len, e.olen, e.buf), (3, 50, n - 50, buf.as_ptr() as usize + 150));
        assert!(e.flags & MULTI != 0, "the truncated message released the buffer");
        assert!(buf[150..200] == src[..50], "what fits is delivered");
        assert!(buf[200..].iter().all(|&x| x == 0), "nothing past the buffer");
        while read(&a).is_none() {
            a.eng.progress();
            b.eng.progress();
        }
    }
}

fn cancelling_a_multi_receive_buffer_waits_for_the_message_in_flight_into_it() {
    let (mut a, mut b) = pair();
    let mut buf = vec![0u8; 2 * RNDV];
    recv_multi(&mut b, 5, &mut buf);
    let big = pattern(RNDV, 5);
    send(&mut a, 1, &big, None);
    // b matches the rendezvous send (its part carved, the data pulled) ...
    run(&mut a, &mut b, |_, b| b.eng.posted[0].front().is_some_and(|p| p.iovs[0].1 == RNDV));
    // ... and the cancel comes before the data: it waits for that message.
    b.eng.cancel(5).expect("the buffer is posted");
    assert!(read(&b).is_none(), "the cancel is not reported before the message in flight");
    let e = ok(next(&mut a, &mut b, 1));
    assert_eq!((e.op_context, e.len, e.flags & MULTI), (5, RNDV, 0));
    assert!(buf[..RNDV] == big[..]);
    let e = err(next(&mut a, &mut b, 1));
    assert_eq!((e.op_context, e.err as u32), (5, ffi::FI_ECANCELED));
    assert!(e.flags & MULTI != 0, "the cancel releases the buffer: FI_MULTI_RECV");
    assert_eq!(b.eng.cancel(5).map_err(|e| e.code()).err(), Some(ffi::FI_ENOENT));
    // With nothing in flight: at once.
    recv_multi(&mut b, 6, &mut buf);
    b.eng.cancel(6).expect("posted");
    let e = err(read(&b).expect("the cancel, at once"));
    assert_eq!((e.op_context, e.err as u32, e.flags & MULTI != 0), (6, ffi::FI_ECANCELED, true));
}

fn under_selective_completion_a_multi_receive_buffer_reports_its_release_alone() {
    let (mut a, mut b) = pair();
    b.eng.bound.rx_selective = true;
    // Without FI_COMPLETION: three messages, the third releases the
    // buffer (100 left, minimum 128); only its completion is written.
    b.eng.set_min_multi_recv(128);
    let mut buf = vec![0u8; 400];
    recv_multi(&mut b, 1, &mut buf);
    for i in 0..3 {
        send(&mut a, i, &pattern(100, i), None);
    }
    let e = ok(next(&mut a, &mut b, 1));
    assert_eq!((e.op_context, e.len, e.buf), (1, 100, buf.as_ptr() as usize + 200));
    assert!(e.flags & MULTI != 0);
    assert!(buf[..300] == [pattern(100, 0), pattern(100, 1), pattern(100, 2)].concat()[..]);
    for _ in 0..100 {
        a.eng.progress();
        b.eng.progress();
    }
    assert!(read(&b).is_none(), "the other two wrote no completion");
    // With FI_COMPLETION: each.
    let flags = Some(MULTI | ffi::FI_COMPLETION as u64);
    b.eng.recv(2, iov_mut(&mut buf), ffi::FI_ADDR_UNSPEC, None, flags).expect("posted");
    for i in 0..3 {
        send(&mut a, i, &pattern(100, i), None);
    }
    for i in 0..3 {
        let e = ok(next(&mut a, &mut b, 1));
        assert_eq!((e.op_context, e.len, e.flags & MULTI != 0), (2, 100, i == 2));
    }
}

over_both!(
    under_selective_completion_a_multi_receive_buffer_reports_its_release_alone,
    a_multi_receive_buffer_takes_messages_at_successive_offsets_and_flags_the_last,
    unexpected_messages_fill_a_multi_receive_buffer_when_it_is_posted,
    a_message_longer_than_the_space_left_is_truncated_and_releases_the_buffer,
    cancelling_a_multi_receive_buffer_waits_for_the_message_in_flight_into_it,
);

/// A counter of the tests' own (a trigger's).
fn counter() -> Arc<Counter> {
    Arc::new(Counter::new(ffi::FI_WAIT_NONE).expect("a counter"))
}

/// Arm a send of `b` to fi_addr 0 until `c` reaches `threshold`.
fn triggered_send(s: &mut Side, c: &Arc<Counter>, threshold: u64, ctx: usize, b: &[u8]) {
    let o = TxOp { ctx, iovs: iov(b), dest: 0, tag: None, data: None, flags: None };
    s.eng.post_triggered(fence::Trigger { cntr: c.clone(), threshold }, fence::Held::Send(o)).expect("armed");
}

fn triggered_sends_wait_for_their_counters_and_hold_nothing_up() {
    let (mut a, mut b) = pair();
    let c = counter();
    let mut bufs = [[0u8; 8]; 3];
    for (i, x) in bufs.iter_mut().enumerate() {
        recv(&mut b, 10 + i, x, 0, None);
    }
    triggered_send(&mut a, &c, 2, 1, b"second!!");
    triggered_send(&mut a, &c, 1, 2, b"first!!!");
    // (Posted after two armed sends to the same peer, it goes at once.)
    send(&mut a, 3, b"at once!", None);
    assert_eq!(ok(next(&mut a, &mut b, 1)).op_context, 10);
    assert_eq!(ok(next1(&mut a)).op_context, 3);
    for _ in 0..200 {
        a.eng.progress();
        b.eng.progress();
    }
    assert!(read(&a).is_none() && read(&b).is_none(), "an armed send went before its counter reached its threshold");
    c.add(1);
    assert_eq!(ok(next(&mut a, &mut b, 1)).op_context, 11);
    assert_eq!(ok(next1(&mut a)).op_context, 2);
    for _ in 0..200 {
        a.eng.progress();
        b.eng.progress();
    }
    assert!(read(&b).is_none(), "the send armed until 2 went at 1");
    c.add(1);
    assert_eq!(ok(next(&mut a, &mut b, 1)).op_context, 12);
    assert_eq!(ok(next1(&mut a)).op_context, 1);
    assert_eq!(&bufs, &[*b"at once!", *b"first!!!", *b"second!!"]);
}

fn a_triggered_send_that_cannot_be_posted_when_it_fires_completes_with_an_error() {
    let (mut a, mut b) = pair();
    let c = counter();
    triggered_send(&mut a, &c, 1, 7, b"nowhere!");
    // (Its peer leaves the AV while it is armed.)
    a.av.remove(&[0]).expect("removed");
    c.add(1);
    let e = err(next(&mut a, &mut b, 0));
    assert_eq!(e.op_context, 7);
    assert!(e.flags & ffi::FI_SEND as u64 != 0, "flags {:#x}", e.flags);
    assert!(read(&a).is_none());
}

over_both!(
    triggered_sends_wait_for_their_counters_and_hold_nothing_up,
    a_triggered_send_that_cannot_be_posted_when_it_fires_completes_with_an_error,
);

#[test]
fn a_shared_receive_context_takes_both_endpoints_messages_and_hands_a_late_receive_to_the_keeper() {
    let srx = Arc::new(super::SharedRx::new(8));
    let shared =
        || side_bound(ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY, &Config::default(), false, Some(srx.clone()));
    let (mut a, mut b, mut t) = (shared(), shared(), side());
    t.av.insert(&[Some(a.addr), Some(b.addr)]);
    a.av.insert(&[Some(t.addr)]);
    b.av.insert(&[Some(t.addr)]);
    let (m1, m2) = ([1u8; 40], [2u8; 24]);
    let (mut r1, mut r2) = ([0u8; 64], [0u8; 64]);
    // Posted first: b's message takes it, completing at b.
    srx.post(11, iov_mut(&mut r1), None, None, 0).expect("posted to the context");
    t.eng.send(&TxOp { ctx: 1, iovs: iov(&m1), dest: 1, tag: None, data: None, flags: None }).expect("sent");
    let e = ok(next(&mut t, &mut b, 1));
    assert_eq!((e.op_context, e.len), (11, 40));
    assert_eq!(r1[..40], m1);
    // The message first: a keeps it; the receive posted later is handed
    // to a, which delivers it at its next progress.
    t.eng.send(&TxOp { ctx: 2, iovs: iov(&m2), dest: 0, tag: None, data: None, flags: None }).expect("sent");
    run(&mut t, &mut a, |_, a| srx.counts().0 == 1 && read(a).is_none());
    srx.post(12, iov_mut(&mut r2), None, None, 0).expect("posted to the context");
    assert_eq!(srx.counts(), (0, 1));
    let e = ok(next(&mut t, &mut a, 1));
    assert_eq!((e.op_context, e.len), (12, 24));
    assert_eq!(r2[..24], m2);
    assert!(read(&b).is_none(), "b reported a's message");
    // Receives go to the context, not the endpoint.
    assert!(a.eng.recv(13, iov_mut(&mut r1), ffi::FI_ADDR_UNSPEC, None, None).is_err());
}

#[test]
fn messages_a_shared_receive_context_keeps_count_in_their_endpoints_unexpected_budget() {
    // (What a peer's unmatched sends make an endpoint hold is bounded by
    // FI_OXMR_UNEXP_MAX also when they are kept in a shared context.)
    let srx = Arc::new(super::SharedRx::new(8));
    let cfg = Config { unexp_max: 100, ..Config::default() };
    let mut a = side_bound(ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_PROV_KEY, &cfg, false, Some(srx.clone()));
    let mut t = side();
    t.av.insert(&[Some(a.addr)]);
    a.av.insert(&[Some(t.addr)]);
    let m = [7u8; 64];
    for i in 0..3 {
        send(&mut t, 10 + i, &m, None);
    }
    run(&mut t, &mut a, |_, _| srx.counts().0 == 3);
    assert!(a.eng.unexp.bytes >= 3 * 64, "kept {} bytes for 3 messages of 64", a.eng.unexp.bytes);
    assert!(a.eng.unexp.bytes > a.eng.unexp.max && a.eng.unexp.paused == [t.addr], "the sender is held past the bound");
    let mut r = [[0u8; 64]; 3];
    for (i, b) in r.iter_mut().enumerate() {
        srx.post(20 + i, iov_mut(b), None, None, 0).expect("posted to the context");
    }
    for _ in 0..3 {
        ok(next(&mut t, &mut a, 1));
    }
    assert_eq!((a.eng.unexp.bytes, a.eng.unexp.paused.len()), (0, 0), "taken, released, the sender resumed");
    assert_eq!(r, [m; 3]);
}

#[test]
fn unexpected_messages_reuse_one_box_and_each_arrives_whole() {
    // Unexpected eager messages of shrinking and growing sizes, and a
    // rendezvous send among them, each taken by a receive posted after it
    // arrived: each receive gets exactly its message (a reused box
    // carries nothing of the one before), and the spare box keeps no
    // more than SPARE_UNEXP_DATA bytes of buffer.
    let (mut a, mut b) = pair();
    let big = EAGER_MAX.min(3 * SPARE_UNEXP_DATA / 2);
    assert!(big > SPARE_UNEXP_DATA, "a message the spare does not keep the buffer of");
    let sizes = [3000, 8, 0, big, 8, EAGER_MAX + 4096, 40];
    for (i, &n) in sizes.iter().enumerate() {
        let msg = pattern(n, i);
        send(&mut a, 100 + i, &msg, Some(i as u64));
        run(&mut a, &mut b, |_, b| b.eng.unexpected[1].len() == 1);
        let mut buf = vec![0xeeu8; n + 64];
        recv(&mut b, i, &mut buf, ffi::FI_ADDR_UNSPEC, Some((i as u64, 0)));
        let e = ok(next(&mut a, &mut b, 1));
        assert_eq!((e.op_context, e.len, e.tag), (i, n, i as u64), "message {i}");
        assert!(buf[..n] == msg[..], "message {i} arrived whole");
        assert!(buf[n..].iter().all(|&x| x == 0xee), "message {i} wrote nothing past its length");
        run(&mut a, &mut b, |a, _| read(a).is_some_and(|g| ok(g).op_context == 100 + i));
        if n <= EAGER_MAX {
            let spare = b.eng.spare_unexp.as_ref().expect("the delivered message's box is kept");
            assert!(spare.data.capacity() <= SPARE_UNEXP_DATA, "message {i}: the spare keeps a bounded buffer");
        }
    }
}

#[test]
fn a_message_takes_the_first_posted_receive_it_matches_wherever_it_is() {
    // Receives tagged 1, 2, 2, 3 posted in that order; messages tagged 2,
    // 3, 1, 2 arrive: each completes the earliest posted receive its tag
    // matches (the first in the queue, or one behind it), and its data
    // lands in that receive's buffer.
    let (mut a, mut b) = pair();
    let tags = [1u64, 2, 2, 3];
    let mut bufs: Vec<Vec<u8>> = tags.iter().map(|_| vec![0u8; 8]).collect();
    for (i, (&t, buf)) in tags.iter().zip(bufs.iter_mut()).enumerate() {
        recv(&mut b, i, buf, ffi::FI_ADDR_UNSPEC, Some((t, 0)));
    }
    for (n, (&t, want)) in [2u64, 3, 1, 2].iter().zip([1usize, 3, 0, 2]).enumerate() {
        let msg = pattern(8, 10 + n);
        send(&mut a, 100 + n, &msg, Some(t));
        let e = ok(next(&mut a, &mut b, 1));
        assert_eq!((e.op_context, e.tag), (want, t), "message {n} tagged {t}");
        assert!(bufs[want] == msg, "message {n} landed in receive {want}'s buffer");
    }
}

#[test]
fn a_pass_that_also_receives_bulk_pushes_at_most_its_share_and_both_directions_finish() {
    // Two endpoints over TCP write 16 MiB into each other at once (as
    // two-way fi_rma_bw does). While a has a pull of b's data open, one
    // progress pass of a pushes at most `SEND_PASS_MAX` of its own stream
    // (plus the chunk that crossed it) before it reads: without that, a
    // pass pushed as far as the socket took, megabytes, while b's data
    // waited unread. Both writes land whole.
    VIA.with(|c| c.set(Via::Tcp));
    let (mut a, mut b) = pair();
    const LEN: usize = 16 << 20;
    let mut at_a = vec![0u8; LEN];
    let mut at_b = vec![0u8; LEN];
    let (_ra, ka) = register(&a, &at_a, RW);
    let (_rb, kb) = register(&b, &at_b, RW);
    let mut from_a: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
    let mut from_b: Vec<u8> = (0..LEN).map(|i| (i % 241) as u8).collect();
    rma(&mut a, 1, &mut from_a, at_b.as_mut_ptr() as usize, kb, false);
    rma(&mut b, 2, &mut from_b, at_a.as_mut_ptr() as usize, ka, false);
    let left = |s: &Side| -> usize {
        s.eng.peers.list.iter().flat_map(|p| p.streams.iter()).map(|st| st.total - st.off).sum()
    };
    let (mut most, mut measured, mut done) = (0, 0, [false; 2]);
    for _ in 0..200_000 {
        let receiving = !a.eng.pulls.open.is_empty();
        let before = left(&a);
        a.eng.progress();
        if receiving {
            most = most.max(before - left(&a));
            measured += 1;
        }
        b.eng.progress();
        for s in [&a, &b] {
            while let Some(g) = read(s) {
                done[ok(g).op_context - 1] = true;
            }
        }
        if done == [true, true] {
            break;
        }
    }
    assert_eq!(done, [true, true], "both writes completed");
    assert!(measured > 0, "a pass of a ran with b's write coming in");
    let frame = frame_payload(a.eng.peers.list[0].link.props().max_frame);
    assert!(most <= super::push::SEND_PASS_MAX + frame, "one pass pushed {most} bytes while receiving");
    assert!(at_a == from_b && at_b == from_a, "both writes landed whole");
}
