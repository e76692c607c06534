//! A peer that sends what no oxmr peer would: messages written straight
//! into an endpoint's shared-memory queue (docs/wire-shm.md), bypassing the
//! sender's engine, to an endpoint driven through the real ops tables.
//!
//! The endpoint must answer each malformed request with an error (never
//! report a copy it did not make), never write outside its registration,
//! never panic (these tests build with overflow checks, so an unchecked sum
//! of a peer's lengths would), and keep working afterwards. The "peer" is a
//! queue file this test creates under a port it holds, so that answers
//! come back to it; its process is this one, so the kernel copies are real.

#![allow(clippy::unnecessary_cast)] // FI_* constant types vary with the header version

use std::ffi::c_void;
use std::net::{SocketAddr, TcpListener};
use std::ptr::null_mut;

use oxmr::info::addr;
use oxmr::protocol::{encode_iovs, Hdr};
use oxmr::wire::shm::region::Region;
use oxmr_ffi as ffi;

mod common;
use common::close;

// Message kinds and header flags (docs/wire.md).
const EAGER: u8 = 1;
const RTS: u8 = 2;
const ACK: u8 = 3;
const WRITE: u8 = 4;
const WRITE_INLINE: u8 = 5;
const READ: u8 = 6;
const PULL: u8 = 7;
const CTS: u8 = 9;
const ACKS: u8 = 10;

const PAGE: usize = 4096;
const GUARD: u8 = 0xC3;

struct Target {
    fabric: *mut ffi::fid_fabric,
    domain: *mut ffi::fid_domain,
    info: *mut ffi::fi_info,
    cq: *mut ffi::fid_cq,
    av: *mut ffi::fid_av,
    ep: *mut ffi::fid_ep,
    mr: *mut ffi::fid_mr,
    name: SocketAddr,
    /// Guard page, registered page, guard page.
    mem: Vec<u8>,
    /// The address a peer names byte 0 of the registration with.
    base: u64,
    key: u64,
}

impl Target {
    unsafe fn open() -> Target {
        unsafe {
            let common::Opened { info, fabric, domain } = common::open();
            let d = &*(*domain).ops;
            let mut cq_attr = ffi::fi_cq_attr { size: 64, format: ffi::FI_CQ_FORMAT_TAGGED, ..Default::default() };
            let mut cq = null_mut();
            assert_eq!((d.cq_open.unwrap())(domain, &mut cq_attr, &mut cq, null_mut()), 0);
            let mut av_attr = ffi::fi_av_attr { type_: ffi::FI_AV_TABLE, ..Default::default() };
            let mut av = null_mut();
            assert_eq!((d.av_open.unwrap())(domain, &mut av_attr, &mut av, null_mut()), 0);
            let mut ep = null_mut();
            assert_eq!((d.endpoint.unwrap())(domain, info, &mut ep, null_mut()), 0);
            let bind = (*(*ep).fid.ops).bind.unwrap();
            assert_eq!(bind(ep.cast(), cq.cast(), (ffi::FI_TRANSMIT | ffi::FI_RECV) as u64), 0);
            assert_eq!(bind(ep.cast(), av.cast(), 0), 0);
            let control = (*(*ep).fid.ops).control.unwrap();
            assert_eq!(control(ep.cast(), ffi::FI_ENABLE as i32, null_mut()), 0);
            let mut nb = [0u8; 64];
            let mut len = nb.len();
            assert_eq!(((*(*ep).cm).getname.unwrap())(ep.cast(), nb.as_mut_ptr().cast(), &mut len), 0);
            let name = addr::parse(&nb[..len]).expect("the endpoint's name is a sockaddr");
            let mut mem = vec![GUARD; 3 * PAGE];
            let reg = mem.as_mut_ptr().wrapping_add(PAGE);
            let mut mr = null_mut();
            let access = (ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64;
            let mr_reg = (*(*domain).mr).reg.unwrap();
            assert_eq!(mr_reg(domain.cast(), reg.cast(), PAGE, access, 0, 0, 0, &mut mr, null_mut()), 0);
            let key = (*mr).key;
            let virt = (*(*info).domain_attr).mr_mode & ffi::FI_MR_VIRT_ADDR as i32 != 0;
            let base = if virt { reg as u64 } else { 0 };
            Target { fabric, domain, info, cq, av, ep, mr, name, mem, base, key }
        }
    }

    /// Run progress (a CQ read); the completion if one was there: Ok(ctx)
    /// or Err(code) for an error completion.
    fn poll(&self) -> Option<Result<usize, i32>> {
        unsafe {
            let ops = &*(*self.cq).ops;
            let mut e = ffi::fi_cq_tagged_entry::default();
            let n = (ops.read.unwrap())(self.cq, (&mut e as *mut ffi::fi_cq_tagged_entry).cast::<c_void>(), 1);
            if n == 1 {
                return Some(Ok(e.op_context as usize));
            }
            if n == -(ffi::FI_EAVAIL as isize) {
                let mut err = ffi::fi_cq_err_entry::default();
                assert_eq!((ops.readerr.unwrap())(self.cq, &mut err, 0), 1);
                return Some(Err(err.err));
            }
            assert_eq!(n, -(ffi::FI_EAGAIN as isize), "fi_cq_read failed: {n}");
            None
        }
    }

    /// Run progress until a completion (2 s at most).
    fn completion(&self) -> Option<Result<usize, i32>> {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::time::Instant::now() < until {
            if let Some(c) = self.poll() {
                return Some(c);
            }
        }
        None
    }

    /// Run progress, which must complete nothing, until `done` (2 s at
    /// most).
    fn nothing_until(&self, done: impl Fn() -> bool, why: &str) {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !done() && std::time::Instant::now() < until {
            assert_eq!(self.poll(), None, "{why}");
        }
    }

    /// fi_send of `buf` to `to`.
    fn send(&self, buf: &[u8], to: u64, ctx: usize) {
        unsafe {
            let send = (*(*self.ep).msg).send.unwrap();
            assert_eq!(send(self.ep, buf.as_ptr().cast(), buf.len(), null_mut(), to, ctx as *mut c_void), 0);
        }
    }

    /// fi_write of `buf` to `to` at (`addr`, `key`).
    fn write(&self, buf: &[u8], to: u64, addr: u64, key: u64, ctx: usize) {
        unsafe {
            let write = (*(*self.ep).rma).write.unwrap();
            let r = write(self.ep, buf.as_ptr().cast(), buf.len(), null_mut(), to, addr, key, ctx as *mut c_void);
            assert_eq!(r, 0);
        }
    }

    /// fi_read into `buf` from `to` at (`addr`, `key`).
    fn read(&self, buf: &mut [u8], to: u64, addr: u64, key: u64, ctx: usize) {
        unsafe {
            let read = (*(*self.ep).rma).read.unwrap();
            let r = read(self.ep, buf.as_mut_ptr().cast(), buf.len(), null_mut(), to, addr, key, ctx as *mut c_void);
            assert_eq!(r, 0);
        }
    }

    /// fi_recv into `buf`, from anyone.
    fn post_recv(&self, buf: &mut [u8], ctx: usize) {
        unsafe {
            let recv = (*(*self.ep).msg).recv.unwrap();
            let r = recv(
                self.ep,
                buf.as_mut_ptr().cast(),
                buf.len(),
                null_mut(),
                ffi::FI_ADDR_UNSPEC as u64,
                ctx as *mut c_void,
            );
            assert_eq!(r, 0);
        }
    }

    /// The registered page.
    fn page(&self) -> &[u8] {
        &self.mem[PAGE..2 * PAGE]
    }

    fn guards_intact(&self) -> bool {
        self.mem[..PAGE].iter().chain(&self.mem[2 * PAGE..]).all(|&b| b == GUARD)
    }

    fn insert(&self, a: &SocketAddr) -> u64 {
        let bytes = addr::encode(a);
        let mut fi_addr = 0u64;
        unsafe {
            let insert = (*(*self.av).ops).insert.unwrap();
            assert_eq!(insert(self.av, bytes.as_ptr().cast(), 1, &mut fi_addr, 0, null_mut()), 1);
        }
        fi_addr
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        unsafe {
            assert_eq!(close(self.mr.cast()), 0);
            assert_eq!(close(self.ep.cast()), 0);
            assert_eq!(close(self.av.cast()), 0);
            assert_eq!(close(self.cq.cast()), 0);
            common::teardown(common::Opened { info: self.info, fabric: self.fabric, domain: self.domain });
        }
    }
}

/// The hostile peer: a queue of its own (for the answers) under a port it
/// holds, and the target's queue, written directly.
struct Peer {
    _port: TcpListener,
    name: [u8; 28],
    rx: Region,
    to: Region,
}

impl Peer {
    fn new(target: &SocketAddr) -> Peer {
        let port = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let me = port.local_addr().unwrap();
        let rx = Region::create(&me, None).expect("the peer's queue");
        let mut name = [0u8; 28];
        let e = addr::encode(&me);
        name[..e.len()].copy_from_slice(&e);
        Peer { _port: port, name, rx, to: Region::open(target, None).expect("the target's queue") }
    }

    /// Operation id `n` of this peer: its queue's epoch in the high half,
    /// as an oxmr endpoint's ids (docs/wire.md).
    fn id(&self, n: u64) -> u64 {
        (self.rx.epoch() as u64) << 32 | n
    }

    fn send(&self, mut h: Hdr, body: &[u8]) {
        h.pid = std::process::id();
        h.name = self.name;
        let mut hb = [0u8; 96];
        let n = h.encode(&mut hb);
        self.to.push(&[&hb[..n], body]).expect("room in the target's queue");
    }

    /// A message that claims another sender (`name`) and process (`pid`).
    fn send_as(&self, mut h: Hdr, body: &[u8], name: [u8; 28], pid: u32) {
        h.pid = pid;
        h.name = name;
        let mut hb = [0u8; 96];
        let n = h.encode(&mut hb);
        self.to.push(&[&hb[..n], body]).expect("room in the target's queue");
    }

    /// Raw bytes, not even a header.
    fn send_raw(&self, b: &[u8]) {
        self.to.push(&[b]).expect("room in the target's queue");
    }

    /// Run the target's progress until an answer arrives (2 s at most).
    fn answer(&mut self, t: &Target) -> Option<(Hdr, Vec<u8>)> {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::time::Instant::now() < until {
            let _ = t.poll();
            let mut got = None;
            self.rx.pop(|m, _| got = Hdr::decode(m).map(|(h, n)| (h, m[n..].to_vec())));
            if got.is_some() {
                return got;
            }
        }
        None
    }

    /// Every message waiting in our queue, as headers.
    fn drain(&mut self) -> Vec<Hdr> {
        self.drain_bodies().into_iter().map(|(h, _)| h).collect()
    }

    /// Every message waiting in our queue, with its body.
    fn drain_bodies(&mut self) -> Vec<(Hdr, Vec<u8>)> {
        let mut got = Vec::new();
        while self.rx.pop(|m, _| got.extend(Hdr::decode(m).map(|(h, n)| (h, m[n..].to_vec())))) {}
        got
    }

    /// No answer within 100 ms of progress.
    fn silent(&mut self, t: &Target) -> bool {
        let until = std::time::Instant::now() + std::time::Duration::from_millis(100);
        while std::time::Instant::now() < until {
            let _ = t.poll();
            let mut got = false;
            self.rx.pop(|_, _| got = true);
            if got {
                return false;
            }
        }
        true
    }
}

fn iovs(v: &[(usize, usize)]) -> Vec<u8> {
    encode_iovs(v)
}

/// Wait (until `until`) for a job in a slot of `jobs` whose generation
/// has moved on from `before` (as a helper finds a job it was not told
/// of): its slot, generation and contents.
fn new_job(
    jobs: &oxmr::wire::shm::jobs::JobTable,
    before: &[u32],
    until: std::time::Instant,
) -> Option<(u32, u32, oxmr::wire::shm::jobs::JobView)> {
    while std::time::Instant::now() < until {
        for i in 0..before.len() as u32 {
            let g = jobs.generation(i);
            if g != before[i as usize] {
                if let Some(v) = jobs.view(i, g) {
                    return Some((i, g, v));
                }
            }
        }
    }
    None
}

#[test]
fn malformed_requests_are_refused_and_the_endpoint_keeps_working() {
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let src: Vec<u8> = (0..PAGE).map(|i| (i * 7 + 1) as u8).collect();
    let einval = ffi::FI_EINVAL as u32;
    // (A remote access the target refuses answers FI_EACCES whatever was
    // wrong, a malformed request included; a malformed send, FI_EINVAL.)
    let eacces = ffi::FI_EACCES as u32;

    // A well-formed inline write first: the baseline the rest is held to.
    let h = Hdr { op: WRITE_INLINE, msg_id: p.id(1), len: 64, rma_addr: t.base, rma_key: t.key, ..Default::default() };
    p.send(h, &src[..64]);
    let (a, _) = p.answer(&t).expect("an answer to a good inline write");
    assert_eq!((a.op, a.msg_id, a.status), (ACK, p.id(1), 0));
    assert_eq!(&t.page()[..64], &src[..64]);

    // A write whose header counts 3 iovs but carries 1.
    let before = t.page().to_vec();
    let h = Hdr {
        op: WRITE,
        msg_id: p.id(2),
        len: 2048,
        iov_count: 3,
        rma_addr: t.base,
        rma_key: t.key,
        ..Default::default()
    };
    p.send(h, &iovs(&[(src.as_ptr() as usize, 2048)]));
    let (a, _) = p.answer(&t).expect("an answer to a write with missing iovs");
    assert_eq!((a.op, a.msg_id, a.status), (ACK, p.id(2), eacces), "missing iovs");

    // A write of 4096 bytes whose iovs describe 100.
    let h = Hdr {
        op: WRITE,
        msg_id: p.id(3),
        len: PAGE as u64,
        iov_count: 1,
        rma_addr: t.base,
        rma_key: t.key,
        ..Default::default()
    };
    p.send(h, &iovs(&[(src.as_ptr() as usize, 100)]));
    let (a, _) = p.answer(&t).expect("an answer to a write with short iovs");
    assert_eq!((a.op, a.msg_id, a.status), (ACK, p.id(3), eacces), "iovs shorter than the write");
    assert_eq!(t.page(), &before[..], "a refused write changed the registration");

    // A read into iovs shorter than the read.
    let mut dst = vec![0u8; PAGE];
    let h = Hdr {
        op: READ,
        msg_id: p.id(4),
        len: PAGE as u64,
        iov_count: 1,
        rma_addr: t.base,
        rma_key: t.key,
        ..Default::default()
    };
    p.send(h, &iovs(&[(dst.as_mut_ptr() as usize, 16)]));
    let (a, _) = p.answer(&t).expect("an answer to a read with short iovs");
    assert_eq!((a.op, a.msg_id, a.status), (ACK, p.id(4), eacces), "read into short iovs");
    assert!(dst.iter().all(|&b| b == 0), "a refused read wrote into the peer");

    // Iov lengths whose sum overflows (2^63 + 2^63): the first 2048 bytes
    // are a real buffer, so the write itself is good.
    let huge = 1usize << 63;
    let h = Hdr {
        op: WRITE,
        msg_id: p.id(5),
        len: 2048,
        iov_count: 2,
        rma_addr: t.base,
        rma_key: t.key,
        ..Default::default()
    };
    p.send(h, &iovs(&[(src.as_ptr() as usize, huge), (src.as_ptr() as usize, huge)]));
    let (a, _) = p.answer(&t).expect("an answer to a write with overflowing iov lengths");
    assert_eq!((a.op, a.msg_id, a.status), (ACK, p.id(5), 0));
    assert_eq!(&t.page()[..2048], &src[..2048]);

    // A rendezvous send whose iovs describe less than it says.
    let h = Hdr { op: RTS, msg_id: p.id(6), len: 1 << 20, iov_count: 1, ..Default::default() };
    p.send(h, &iovs(&[(src.as_ptr() as usize, 10)]));
    let (a, _) = p.answer(&t).expect("an answer to a malformed RTS");
    assert_eq!((a.op, a.msg_id, a.status), (ACK, p.id(6), einval), "malformed RTS");

    // A write that names another endpoint's epoch (one that was at this
    // address before and closed): nothing is copied, nothing answered.
    let before = t.page().to_vec();
    let other = [0x77u8; 64];
    let old_id = ((p.rx.epoch() ^ 1) as u64) << 32 | 9;
    let h = Hdr {
        op: WRITE,
        msg_id: old_id,
        len: 64,
        iov_count: 1,
        rma_addr: t.base,
        rma_key: t.key,
        ..Default::default()
    };
    p.send(h, &iovs(&[(other.as_ptr() as usize, 64)]));
    assert!(p.silent(&t), "a closed endpoint's write was answered");
    assert_eq!(t.page(), &before[..], "a closed endpoint's write landed");

    // Not a message at all; a help request for a job that does not exist;
    // an ACKS naming more ids than it carries: nothing to answer.
    p.send_raw(&[1, 2, 3, 4, 5]);
    p.send(Hdr { op: CTS, msg_id: p.id(77), rma_addr: 3, tag: 9, ..Default::default() }, &[]);
    p.send(Hdr { op: ACKS, iov_count: 500, ..Default::default() }, &7u64.to_le_bytes());
    assert!(p.silent(&t), "the endpoint answered junk");

    // Still working: a good write and an eager send into a posted receive.
    let h = Hdr {
        op: WRITE,
        msg_id: p.id(8),
        len: PAGE as u64,
        iov_count: 1,
        rma_addr: t.base,
        rma_key: t.key,
        ..Default::default()
    };
    p.send(h, &iovs(&[(src.as_ptr() as usize, PAGE)]));
    let (a, _) = p.answer(&t).expect("an answer to a good write after the junk");
    assert_eq!((a.op, a.msg_id, a.status), (ACK, p.id(8), 0));
    assert_eq!(t.page(), &src[..]);
    let mut rbuf = [0u8; 32];
    t.post_recv(&mut rbuf, 0x5eed);
    p.send(Hdr { op: EAGER, len: 32, ..Default::default() }, &src[..32]);
    assert_eq!(t.completion(), Some(Ok(0x5eed)), "the receive after the junk");
    assert_eq!(&rbuf[..], &src[..32]);
    assert!(t.guards_intact(), "bytes outside the registration changed");
}

#[test]
fn an_answer_from_another_peer_completes_nothing() {
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let mut other = Peer::new(&t.name);
    let fi_addr = t.insert(&p._port.local_addr().unwrap());
    // A 64 KiB send to the peer: an RTS, complete only on the peer's ACK.
    let buf = vec![5u8; 64 << 10];
    t.send(&buf, fi_addr, 0xabc);
    let (rts, _) = p.answer(&t).expect("the RTS at the peer");
    assert_eq!(rts.op, RTS);
    assert!(rts.msg_id != 0);
    // The same operation id, from someone else.
    other.send(Hdr { op: ACK, msg_id: rts.msg_id, ..Default::default() }, &[]);
    other.send(Hdr { op: ACKS, iov_count: 1, ..Default::default() }, &rts.msg_id.to_le_bytes());
    for _ in 0..1000 {
        assert_eq!(t.poll(), None, "another peer's answer completed the send");
    }
    p.send(Hdr { op: ACK, msg_id: rts.msg_id, ..Default::default() }, &[]);
    assert_eq!(t.completion(), Some(Ok(0xabc)), "the peer's own ACK completes the send");
    assert!(other.silent(&t));
}

/// A shared copy of a send (docs/wire-shm.md, "Shared copies"), with this test
/// as the receiver that owns the job: the sender (the endpoint under test)
/// helps with the chunk it claims; when its settle is the job's last, with
/// every chunk copied, it completes the send with no ACK; when the
/// receiver's is, the send waits for the receiver's ACK.
#[test]
fn a_send_completes_on_its_helpers_last_settle_or_on_the_ack() {
    const N: usize = 64 << 10;
    const HALF: usize = N / 2;
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let fi_addr = t.insert(&p._port.local_addr().unwrap());
    let src: Vec<u8> = (0..N).map(|i| (i * 13 + 5) as u8).collect();
    let jobs = p.rx.jobs();
    let send = |ctx: usize| t.send(&src, fi_addr, ctx);

    // 1. We copy our chunk (the front) first, then ask for help: the
    //    sender's chunk is the last one settled, and that completes it.
    send(0x51);
    let (rts, _) = p.answer(&t).expect("the RTS");
    assert_eq!(rts.op, RTS);
    let mut dst = vec![0u8; N];
    assert!(jobs.open(0, 1, N, HALF, true, &[(dst.as_mut_ptr() as usize, N)]));
    assert_eq!(jobs.claim(0, 1, false), Some(0));
    dst[..HALF].copy_from_slice(&src[..HALF]);
    assert!(!jobs.settle(0, true), "ours is not the last chunk");
    p.send(Hdr { op: CTS, msg_id: rts.msg_id, rma_addr: 0, tag: 1, ..Default::default() }, &[]);
    assert_eq!(t.completion(), Some(Ok(0x51)), "the helper's last settle completes the send, no ACK");
    assert_eq!(jobs.progress(0), (2, false));
    assert!(dst == src, "the helper wrote its half");

    // 2. We claim our chunk, ask for help, and settle ours after the
    //    helper's: the send is not complete until our ACK, however long
    //    the sender runs progress.
    send(0x52);
    let (rts, _) = p.answer(&t).expect("the second RTS");
    let mut dst = vec![0u8; N];
    assert!(jobs.open(1, 2, N, HALF, true, &[(dst.as_mut_ptr() as usize, N)]));
    assert_eq!(jobs.claim(1, 2, false), Some(0));
    p.send(Hdr { op: CTS, msg_id: rts.msg_id, rma_addr: 1, tag: 2, ..Default::default() }, &[]);
    t.nothing_until(|| jobs.progress(1).0 > 0, "the send completed before every chunk was settled");
    assert_eq!(jobs.progress(1), (1, false), "the helper settled its chunk");
    for _ in 0..1000 {
        assert_eq!(t.poll(), None, "the send completed before every chunk was settled");
    }
    dst[..HALF].copy_from_slice(&src[..HALF]);
    assert!(jobs.settle(1, true), "ours is the last chunk");
    for _ in 0..1000 {
        assert_eq!(t.poll(), None, "the send completed without our ACK though we settled last");
    }
    p.send(Hdr { op: ACK, msg_id: rts.msg_id, ..Default::default() }, &[]);
    assert_eq!(t.completion(), Some(Ok(0x52)), "our ACK completes it");
    assert!(dst == src);

    // 3. A chunk that failed (here: ours) keeps the helper from completing
    //    the send even when it settles last: the owner redoes the copy
    //    and answers.
    send(0x53);
    let (rts, _) = p.answer(&t).expect("the third RTS");
    let mut dst = vec![0u8; N];
    assert!(jobs.open(2, 3, N, HALF, true, &[(dst.as_mut_ptr() as usize, N)]));
    assert_eq!(jobs.claim(2, 3, false), Some(0));
    assert!(!jobs.settle(2, false), "a failed chunk");
    p.send(Hdr { op: CTS, msg_id: rts.msg_id, rma_addr: 2, tag: 3, ..Default::default() }, &[]);
    t.nothing_until(|| jobs.progress(2).0 >= 2, "the send completed though a chunk failed");
    assert_eq!(jobs.progress(2), (2, true), "the helper settled the last chunk after a failed one");
    for _ in 0..1000 {
        assert_eq!(t.poll(), None, "the send completed though a chunk failed");
    }
    p.send(Hdr { op: ACK, msg_id: rts.msg_id, ..Default::default() }, &[]);
    assert_eq!(t.completion(), Some(Ok(0x53)));
}

/// The same rule from the other side: the endpoint under test receives
/// and owns the job (16 MiB: sixteen 1 MiB chunks, so this test's
/// thread, the sending peer's helper, spinning before the RTS is sent,
/// claims the last one long before the receiver gets there; should it
/// still miss, the receiver copies all and must ACK, and the next attempt
/// tries again), and the helper settles its chunk only once every other
/// chunk is settled. Its settle is then the last: the receive completes
/// intact and the receiver sends no ACK. A receiver given no help settles
/// last itself and ACKs. (A timing race by nature: it needs a core for the
/// helper thread, as ci/test.sh's one-test-at-a-time run gives it.)
#[test]
fn a_receiver_acks_only_when_it_settled_the_last_chunk() {
    const N: usize = 16 << 20;
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let src: Vec<u8> = (0..N).map(|i| (i * 11 + 3) as u8).collect();
    let (src_at, pid) = (src.as_ptr() as usize, std::process::id());
    let post = |rbuf: &mut Vec<u8>| t.post_recv(rbuf, 0x77);
    let acks_for = |p: &mut Peer, id: u64| {
        let _ = t.poll();
        p.drain().iter().filter(|h| h.op == ACK && h.msg_id == id).count()
    };
    let mut helper_last = 0;
    for attempt in 0..10u64 {
        let mut rbuf = vec![0u8; N];
        post(&mut rbuf);
        let jobs = p.to.jobs();
        let before: Vec<u32> = (0..8).map(|i| jobs.generation(i)).collect();
        let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ready2 = ready.clone();
        let helper = std::thread::spawn(move || {
            let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
            ready2.store(true, std::sync::atomic::Ordering::Release);
            let (i, g, v) = new_job(&jobs, &before, until).expect("a job appeared");
            let k = jobs.claim(i, g, true)?;
            while jobs.progress(i).0 + 1 < v.nchunks && std::time::Instant::now() < until {
                std::hint::spin_loop();
            }
            let ok = oxmr::wire::shm::jobs::copy_chunk(pid, false, &[(src_at, N)], &v.iovs, v.total, v.chunk, k);
            assert!(ok, "the helper's copy");
            Some(jobs.settle(i, ok))
        });
        // (The helper spinning before the RTS goes: the receiver's four
        // chunks take it hundreds of microseconds, the helper's claim far
        // less.)
        while !ready.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::yield_now();
        }
        let id = p.id(100 + attempt);
        p.send(Hdr { op: RTS, msg_id: id, len: N as u64, iov_count: 1, ..Default::default() }, &iovs(&[(src_at, N)]));
        assert_eq!(t.completion(), Some(Ok(0x77)), "the receive completes");
        let helped = helper.join().expect("the helper thread");
        assert!(rbuf == src, "attempt {attempt}: the data arrived intact");
        let acks = acks_for(&mut p, id);
        if let Some(last) = helped {
            assert!(last, "attempt {attempt}: the helper's settle, made after all others, was the last");
            assert_eq!(acks, 0, "attempt {attempt}: the helper settled last, yet the receiver ACKed");
            helper_last += 1;
            if helper_last == 3 {
                break;
            }
        } else {
            assert_eq!(acks, 1, "attempt {attempt}: the receiver copied every chunk and must ACK");
        }
    }
    assert!(helper_last > 0, "the helper thread never got a chunk in 10 transfers of 16 MiB");
    // No help: the receiver copies every chunk, settles last, and ACKs.
    let mut rbuf = vec![0u8; N];
    post(&mut rbuf);
    let id = p.id(200);
    p.send(Hdr { op: RTS, msg_id: id, len: N as u64, iov_count: 1, ..Default::default() }, &iovs(&[(src_at, N)]));
    assert_eq!(t.completion(), Some(Ok(0x77)));
    assert!(rbuf == src);
    assert_eq!(acks_for(&mut p, id), 1, "a receiver that settled last ACKs");
}

const SJOB: u8 = 8;

/// Sender jobs (docs/wire-shm.md), the endpoint under test sending: its RTS
/// offers a job in its own queue file; this test, the receiver, takes it
/// and copies chunk 0, the sender copies chunk 1 once it sees the job
/// taken. With every chunk settled and none failed the send completes
/// with no ACK, whoever settled last; after a failed chunk it waits for
/// the receiver's ACK.
#[test]
fn a_sender_job_completes_once_settled_and_after_a_failure_on_the_ack() {
    const N: usize = 64 << 10;
    const HALF: usize = N / 2;
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let fi_addr = t.insert(&p._port.local_addr().unwrap());
    let src: Vec<u8> = (0..N).map(|i| (i * 17 + 9) as u8).collect();
    let jobs = p.to.jobs();
    let send = |ctx: usize| t.send(&src, fi_addr, ctx);
    let offer = |p: &mut Peer| {
        let (rts, _) = p.answer(&t).expect("the RTS");
        assert_eq!(rts.op, RTS);
        assert_ne!(rts.flags & SJOB, 0, "a 64 KiB send offers a job");
        (rts.msg_id, rts.rma_addr as u32, rts.rma_key as u32)
    };

    // 1. We take the job and settle chunk 0 first: the sender's chunk is
    //    the last, and its send completes.
    send(0x61);
    let (_, slot, gen) = offer(&mut p);
    let mut dst = vec![0u8; N];
    assert!(jobs.accept(slot, gen, N, HALF, &[(dst.as_mut_ptr() as usize, N)]));
    dst[..HALF].copy_from_slice(&src[..HALF]);
    assert!(!jobs.settle(slot, true));
    assert_eq!(t.completion(), Some(Ok(0x61)), "settled by both, no ACK");
    assert!(dst == src);
    assert!(p.silent(&t), "the receiver of a sender job is sent nothing");

    // 2. The sender settles first, we last: complete all the same.
    send(0x62);
    let (_, slot, gen) = offer(&mut p);
    let mut dst = vec![0u8; N];
    assert!(jobs.accept(slot, gen, N, HALF, &[(dst.as_mut_ptr() as usize, N)]));
    t.nothing_until(|| jobs.progress(slot).0 > 0, "complete before our chunk");
    assert_eq!(jobs.progress(slot), (1, false), "the sender copied its chunk");
    assert_eq!(t.poll(), None, "complete before our chunk");
    dst[..HALF].copy_from_slice(&src[..HALF]);
    assert!(jobs.settle(slot, true), "ours is the last");
    assert_eq!(t.completion(), Some(Ok(0x62)));
    assert!(dst == src);

    // 3. Our chunk fails: the sender helps, then waits for our ACK.
    send(0x63);
    let (id, slot, gen) = offer(&mut p);
    let mut dst = vec![0u8; N];
    assert!(jobs.accept(slot, gen, N, HALF, &[(dst.as_mut_ptr() as usize, N)]));
    assert!(!jobs.settle(slot, false));
    for _ in 0..1000 {
        assert_eq!(t.poll(), None, "a job with a failed chunk completed the send");
    }
    assert_eq!(jobs.progress(slot), (2, true));
    p.send(Hdr { op: ACK, msg_id: id, ..Default::default() }, &[]);
    assert_eq!(t.completion(), Some(Ok(0x63)), "the ACK completes it");

    // 4. The slots come back: more sends than a region has slots, each
    //    offering one, each answered by an ACK (as a receiver that
    //    copies alone does).
    for k in 0..3 * 8 {
        send(0x70 + k);
        let (id, _, _) = offer(&mut p);
        p.send(Hdr { op: ACK, msg_id: id, ..Default::default() }, &[]);
        assert_eq!(t.completion(), Some(Ok(0x70 + k)));
    }

    // 5. Sends whose receives are not posted hold their offers: at most
    //    half the slots; the rest go without one.
    let mut ids = Vec::new();
    for k in 0..6 {
        send(0x90 + k);
        let (rts, _) = p.answer(&t).expect("an RTS");
        assert_eq!(rts.flags & SJOB != 0, k < 4, "send {k}: offers only while half the slots are free");
        ids.push(rts.msg_id);
    }
    for (k, id) in ids.into_iter().enumerate() {
        p.send(Hdr { op: ACK, msg_id: id, ..Default::default() }, &[]);
        assert_eq!(t.completion(), Some(Ok(0x90 + k)));
    }
}

/// Sender jobs, the endpoint under test receiving: it takes the job this
/// test's RTS offers, writes its buffer into the offered slot and copies
/// chunk 0 while a thread of this test (the sender) copies chunk 1; the
/// receive completes intact and nothing is sent back. An offer it cannot
/// take (the slot does not hold that generation) is copied as before and
/// ACKed.
#[test]
fn a_receiver_takes_a_sender_job_and_answers_nothing() {
    const N: usize = 64 << 10;
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let src: Vec<u8> = (0..N).map(|i| (i * 5 + 1) as u8).collect();
    let post = |rbuf: &mut Vec<u8>, ctx: usize| t.post_recv(rbuf, ctx);
    let answers = |p: &mut Peer| p.drain().iter().map(|h| h.op).collect::<Vec<u8>>();
    let (slot, gen) = (3u32, 9u32);
    let (src_at, pid) = (src.as_ptr() as usize, std::process::id());

    let mut rbuf = vec![0u8; N];
    post(&mut rbuf, 0x81);
    let jobs = p.rx.jobs();
    jobs.offer(slot, gen, N);
    let helper = std::thread::spawn(move || {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !jobs.accepted(slot, gen) && std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        let v = jobs.view(slot, gen).expect("the job, accepted");
        assert!(v.helper_writes);
        while let Some(k) = jobs.claim(slot, gen, true) {
            let ok = oxmr::wire::shm::jobs::copy_chunk(pid, false, &[(src_at, N)], &v.iovs, v.total, v.chunk, k);
            assert!(ok);
            jobs.settle(slot, ok);
        }
        jobs
    });
    let h = Hdr {
        op: RTS,
        flags: SJOB,
        msg_id: p.id(1),
        len: N as u64,
        iov_count: 1,
        rma_addr: slot as u64,
        rma_key: gen as u64,
        ..Default::default()
    };
    p.send(h, &iovs(&[(src_at, N)]));
    assert_eq!(t.completion(), Some(Ok(0x81)));
    let jobs = helper.join().expect("the sender's thread");
    assert!(rbuf == src, "the data arrived intact");
    assert_eq!(jobs.progress(slot), (2, false), "both chunks settled in the sender's slot");
    let _ = t.poll();
    assert_eq!(answers(&mut p), Vec::<u8>::new(), "a taken sender job is answered with nothing");

    // An offer naming a generation the slot does not hold: copied as
    // without one, and ACKed.
    let mut rbuf = vec![0u8; N];
    post(&mut rbuf, 0x82);
    p.send(Hdr { msg_id: p.id(2), rma_key: gen as u64 + 1, ..h }, &iovs(&[(src_at, N)]));
    assert_eq!(t.completion(), Some(Ok(0x82)));
    assert!(rbuf == src);
    let _ = t.poll();
    assert!(answers(&mut p).contains(&ACK), "an offer not taken: the receiver ACKs");
}

const RUN: u8 = 16;

/// The layout of a job over several operations (docs/wire-shm.md, "Jobs over
/// several operations") over single buffers `(address, length)`: the
/// first half of each (rounded up), then the second halves.
fn halves(bufs: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let first = bufs.iter().map(|&(a, n)| (a, n.div_ceil(2)));
    let second = bufs.iter().map(|&(a, n)| (a + n.div_ceil(2), n - n.div_ceil(2)));
    first.chain(second).filter(|x| x.1 > 0).collect()
}

/// A CTS for a job over the operations `ids` in `slot` at `gen`.
fn run_cts(p: &Peer, ids: &[u64], slot: u32, gen: u32) {
    let h = Hdr {
        op: CTS,
        flags: RUN,
        msg_id: ids[0],
        iov_count: ids.len() as u16,
        rma_addr: slot as u64,
        tag: gen as u64,
        ..Default::default()
    };
    p.send(h, &ids.iter().flat_map(|id| id.to_le_bytes()).collect::<Vec<u8>>());
}

/// The ids in a RUN CTS's body.
fn run_ids(body: &[u8]) -> Vec<u64> {
    body.chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().unwrap())).collect()
}

/// Paired receives, the endpoint under test sending: this test, the
/// receiver, opens one job over two of its sends and asks for help with
/// a RUN CTS; the endpoint copies the back chunk (the second halves of
/// both) and, settling last, completes both sends. A RUN CTS that does
/// not describe two of its sends of the job's half size gets no help: the
/// sends complete only on the receiver's ACKs.
#[test]
fn a_paired_job_gets_both_sends_copied_and_completed() {
    const N: usize = 64 << 10;
    const H: usize = N / 2;
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let fi_addr = t.insert(&p._port.local_addr().unwrap());
    let src1: Vec<u8> = (0..N).map(|i| (i * 7 + 1) as u8).collect();
    let src2: Vec<u8> = (0..N).map(|i| (i * 3 + 2) as u8).collect();
    let short: Vec<u8> = src2[..N - 2].to_vec();
    let jobs = p.rx.jobs();
    let rts = |p: &mut Peer| {
        let (h, _) = p.answer(&t).expect("an RTS");
        assert_eq!(h.op, RTS);
        h.msg_id
    };

    // 1. Two 64 KiB sends; we copy the first halves, the endpoint the
    //    second ones, and its settle, the last, completes both.
    t.send(&src1, fi_addr, 0x61);
    let id1 = rts(&mut p);
    t.send(&src2, fi_addr, 0x62);
    let id2 = rts(&mut p);
    let (mut dst1, mut dst2) = (vec![0u8; N], vec![0u8; N]);
    let layout = halves(&[(dst1.as_mut_ptr() as usize, N), (dst2.as_mut_ptr() as usize, N)]);
    assert!(jobs.open(0, 1, 2 * N, N, true, &layout));
    assert_eq!(jobs.claim(0, 1, false), Some(0));
    dst1[..H].copy_from_slice(&src1[..H]);
    dst2[..H].copy_from_slice(&src2[..H]);
    assert!(!jobs.settle(0, true), "ours is not the last chunk");
    run_cts(&p, &[id1, id2], 0, 1);
    assert_eq!(t.completion(), Some(Ok(0x61)), "the first send completes on the helper's settle");
    assert_eq!(t.completion(), Some(Ok(0x62)), "so does the second");
    assert_eq!(jobs.progress(0), (2, false));
    assert!(dst1 == src1 && dst2 == src2, "the helper wrote both second halves");

    // 2. Jobs that do not fit the sends: one send 2 bytes shorter than
    //    the job's half; the same send named twice; a send that is not
    //    the endpoint's. Nothing is claimed; the ACKs complete the sends.
    t.send(&src1, fi_addr, 0x63);
    let a = rts(&mut p);
    t.send(&short, fi_addr, 0x64);
    let b = rts(&mut p);
    for (k, (x, y)) in [(a, b), (a, a), (a, p.id(999))].into_iter().enumerate() {
        let (slot, gen) = (1 + k as u32, 10 + k as u32);
        let (mut d1, mut d2) = (vec![0u8; N], vec![0u8; N]);
        assert!(jobs.open(
            slot,
            gen,
            2 * N,
            N,
            true,
            &halves(&[(d1.as_mut_ptr() as usize, N), (d2.as_mut_ptr() as usize, N)])
        ));
        run_cts(&p, &[x, y], slot, gen);
        for _ in 0..1000 {
            assert_eq!(t.poll(), None, "case {k}: a send completed from a job that does not fit it");
        }
        assert_eq!(jobs.progress(slot), (0, false), "case {k}: the endpoint copied into a job that does not fit");
        assert_eq!(jobs.claim(slot, gen, true), Some(1), "case {k}: the back chunk is still unclaimed");
        assert!(d1.iter().chain(&d2).all(|&x| x == 0), "case {k}: nothing written");
    }
    for (id, ctx) in [(a, 0x63), (b, 0x64)] {
        p.send(Hdr { op: ACK, msg_id: id, ..Default::default() }, &[]);
        assert_eq!(t.completion(), Some(Ok(ctx)));
    }
}

/// Paired receives, the endpoint under test receiving: two RTSs of equal
/// size queued before it polls are copied as one job (its CTS carries
/// RUN and both ids); this test does not help, so the endpoint copies
/// both chunks, completes both receives in order, intact, and ACKs both.
/// Two RTSs of different sizes are not paired.
#[test]
fn a_receiver_pairs_two_queued_sends_of_equal_size() {
    const N: usize = 64 << 10;
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    // (The sender says it has no copy of its own waiting, as one that
    // only waits for its sends does: the receiver shares from 64 KiB.)
    p.rx.set_idle(true);
    let src1: Vec<u8> = (0..N + 2).map(|i| (i * 9 + 4) as u8).collect();
    let src2: Vec<u8> = (0..N + 2).map(|i| (i * 5 + 7) as u8).collect();
    let rts = |id: u64, src: &[u8], n: usize| {
        let h = Hdr { op: RTS, msg_id: id, len: n as u64, iov_count: 1, ..Default::default() };
        (h, iovs(&[(src.as_ptr() as usize, n)]))
    };
    for (round, n2) in [(0u64, N), (1, N + 2)] {
        let (mut r1, mut r2) = (vec![0u8; N + 2], vec![0u8; N + 2]);
        t.post_recv(&mut r1, 0x71);
        t.post_recv(&mut r2, 0x72);
        let (id1, id2) = (p.id(10 * round + 1), p.id(10 * round + 2));
        let (h1, b1) = rts(id1, &src1, N);
        let (h2, b2) = rts(id2, &src2, n2);
        p.send(h1, &b1);
        p.send(h2, &b2);
        assert_eq!(t.completion(), Some(Ok(0x71)), "round {round}: the first receive completes first");
        assert_eq!(t.completion(), Some(Ok(0x72)), "round {round}: then the second");
        assert!(r1[..N] == src1[..N] && r2[..n2] == src2[..n2], "round {round}: both arrived intact");
        let _ = t.poll();
        let got = p.drain_bodies();
        let pair = got.iter().find(|(h, _)| h.op == CTS && h.flags & RUN != 0);
        if n2 == N {
            let (_, ids) = pair.expect("a RUN CTS for two queued sends of equal size");
            assert_eq!(run_ids(ids), vec![id1, id2], "the CTS names both sends, in order");
        } else {
            assert!(pair.is_none(), "sends of different sizes were paired");
        }
        for id in [id1, id2] {
            let acks = got.iter().filter(|(h, _)| h.op == ACK && h.msg_id == id).count();
            assert_eq!(acks, 1, "round {round}: one ACK each");
        }
    }
}

/// A run of writes shared with their initiator (docs/wire-shm.md, "Jobs over
/// several operations"), the endpoint under test writing: this test, the
/// target, opens one job over three of its queued writes (64 KiB, 40000 B
/// and 65537 B: halves rounded up) and copies the first halves; the
/// endpoint copies the second halves, and its writes still complete only
/// on the target's answer. Jobs that do not fit its writes (a size or a
/// first chunk off by one, an id twice, a single id) get no help.
#[test]
fn a_run_of_writes_gets_its_initiators_help_and_completes_on_the_answer() {
    let sizes = [64 << 10, 40000, 65537];
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let fi_addr = t.insert(&p._port.local_addr().unwrap());
    let srcs: Vec<Vec<u8>> =
        sizes.iter().enumerate().map(|(k, &n)| (0..n).map(|i| (i * (k + 3) + k) as u8).collect()).collect();
    let total: usize = sizes.iter().sum();
    let first: usize = sizes.iter().map(|n| n.div_ceil(2)).sum();
    let jobs = p.rx.jobs();
    let post = |p: &mut Peer, ctx0: usize| -> Vec<u64> {
        (0..sizes.len())
            .map(|k| {
                t.write(&srcs[k], fi_addr, 0x10000, 0x77, ctx0 + k);
                let (h, _) = p.answer(&t).expect("a WRITE request");
                assert_eq!(h.op, WRITE);
                h.msg_id
            })
            .collect()
    };
    let answer = |p: &Peer, ids: &[u64]| {
        let h = Hdr { op: ACKS, iov_count: ids.len() as u16, ..Default::default() };
        p.send(h, &ids.iter().flat_map(|id| id.to_le_bytes()).collect::<Vec<u8>>());
    };

    // 1. We copy the first halves, the endpoint the second ones.
    let ids = post(&mut p, 0xA0);
    let mut dsts: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
    let bufs: Vec<(usize, usize)> = dsts.iter_mut().map(|d| (d.as_mut_ptr() as usize, d.len())).collect();
    assert!(jobs.open(0, 1, total, first, true, &halves(&bufs)));
    assert_eq!(jobs.claim(0, 1, false), Some(0));
    for (d, s) in dsts.iter_mut().zip(&srcs) {
        let a = s.len().div_ceil(2);
        d[..a].copy_from_slice(&s[..a]);
    }
    assert!(!jobs.settle(0, true), "ours is not the last chunk");
    run_cts(&p, &ids, 0, 1);
    t.nothing_until(|| jobs.progress(0).0 == 2, "a write completed before the target's answer");
    assert_eq!(jobs.progress(0), (2, false), "the initiator copied its chunk");
    for _ in 0..1000 {
        assert_eq!(t.poll(), None, "a write completed before the target's answer");
    }
    assert!(dsts == srcs, "the initiator wrote the second halves of all three");
    answer(&p, &ids);
    for k in 0..sizes.len() {
        assert_eq!(t.completion(), Some(Ok(0xA0 + k)), "the answer completes each write");
    }

    // 2. Jobs that do not fit: nothing claimed, nothing written.
    let ids = post(&mut p, 0xB0);
    let cases: [(usize, usize, Vec<u64>); 4] = [
        (total - 1, first, ids.clone()),
        (total, first + 1, ids.clone()),
        (total, first, vec![ids[0], ids[0], ids[1]]),
        (sizes[0], sizes[0].div_ceil(2), vec![ids[0]]),
    ];
    for (k, (size, chunk, named)) in cases.into_iter().enumerate() {
        let (slot, gen) = (1 + k as u32, 20 + k as u32);
        let mut d = vec![0u8; total];
        assert!(jobs.open(slot, gen, size, chunk, true, &[(d.as_mut_ptr() as usize, size)]));
        run_cts(&p, &named, slot, gen);
        for _ in 0..1000 {
            assert_eq!(t.poll(), None, "case {k}: a write completed");
        }
        assert_eq!(jobs.progress(slot), (0, false), "case {k}: the initiator copied into a job that does not fit");
        assert_eq!(jobs.claim(slot, gen, true), Some(1), "case {k}: the back chunk is still unclaimed");
        assert!(d.iter().all(|&x| x == 0), "case {k}: nothing written");
    }
    answer(&p, &ids);
    for k in 0..sizes.len() {
        assert_eq!(t.completion(), Some(Ok(0xB0 + k)));
    }
}

/// A progress call copies at most one peer's transfer before it returns
/// to the application, also when receives are kept for pairing: six 64
/// KiB sends queued from two peers alternately (so no two in a row pair,
/// and each one keeps the next peer's receive waiting) start one copy
/// (one CTS) in the first progress call, not six; all six then complete
/// in order, intact.
#[test]
fn one_progress_call_starts_one_copy_with_receives_kept_for_pairing() {
    const N: usize = 64 << 10;
    let t = unsafe { Target::open() };
    let mut a = Peer::new(&t.name);
    let mut b = Peer::new(&t.name);
    a.rx.set_idle(true);
    b.rx.set_idle(true);
    let srcs: Vec<Vec<u8>> = (0..6).map(|k| (0..N).map(|i| (i * (k + 2) + k) as u8).collect()).collect();
    let mut bufs: Vec<Vec<u8>> = (0..6).map(|_| vec![0u8; N]).collect();
    for (k, buf) in bufs.iter_mut().enumerate() {
        t.post_recv(buf, 0x300 + k);
    }
    for (k, src) in srcs.iter().enumerate() {
        let p = if k % 2 == 0 { &a } else { &b };
        let h = Hdr { op: RTS, msg_id: p.id(k as u64 + 1), len: N as u64, iov_count: 1, ..Default::default() };
        p.send(h, &iovs(&[(src.as_ptr() as usize, N)]));
    }
    let _ = t.poll();
    let ctss = |p: &mut Peer| p.drain().iter().filter(|h| h.op == CTS).count();
    let started = ctss(&mut a) + ctss(&mut b);
    assert!(started <= 1, "one progress call started {started} shared copies");
    let mut got = Vec::new();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while got.len() < 6 && std::time::Instant::now() < until {
        match t.poll() {
            Some(Ok(ctx)) => got.push(ctx),
            Some(Err(e)) => panic!("receive failed: {e}"),
            None => {}
        }
    }
    assert_eq!(got, (0x300..0x306).collect::<Vec<usize>>(), "all six receives, in order");
    assert!(bufs == srcs, "all six intact");
}

/// A peer's RMA waits while one of its RMA jobs with us is stalled (its
/// helper holds a chunk past the owner's wait): a small write over bytes
/// the held chunk covers, sent after the large write, must land after
/// that chunk (the later write's bytes win), not before it and then be
/// overwritten with the older ones. A thread of this test is the
/// initiator's helper: it claims the 16 MiB write's last 1 MiB chunk and
/// holds it for 60 ms. (A timing race by nature: an attempt where the
/// target copied every chunk before the thread claimed one checks nothing
/// and is retried.)
#[test]
fn rma_waits_for_a_stalled_rma_job_of_the_same_peer() {
    const N: usize = 16 << 20;
    const TAIL: usize = 100;
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    // Another peer, whose write goes past the stalled peer's.
    let mut p2 = Peer::new(&t.name);
    let mut mem = vec![0u8; N];
    let (mr, key, base) = unsafe {
        let mut mr = null_mut();
        let mr_reg = (*(*t.domain).mr).reg.unwrap();
        let access = ffi::FI_REMOTE_WRITE as u64;
        assert_eq!(mr_reg(t.domain.cast(), mem.as_mut_ptr().cast(), N, access, 0, 7, 0, &mut mr, null_mut()), 0);
        let virt = (*(*t.info).domain_attr).mr_mode & ffi::FI_MR_VIRT_ADDR as i32 != 0;
        (mr, (*mr).key, if virt { mem.as_ptr() as u64 } else { 0 })
    };
    let src: Vec<u8> = (0..N).map(|i| (i * 7 + 3) as u8).collect();
    let (src_at, pid) = (src.as_ptr() as usize, std::process::id());
    let acked = |p: &mut Peer, ids: &mut Vec<u64>| {
        let _ = t.poll();
        for h in p.drain() {
            assert!(h.op != ACK || h.status == 0, "a write was refused: {}", h.status);
            ids.extend((h.op == ACK).then_some(h.msg_id));
        }
    };
    let mut checked = false;
    for attempt in 0..5u64 {
        let jobs = p.to.jobs();
        let before: Vec<u32> = (0..8).map(|i| jobs.generation(i)).collect();
        let holding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let holding2 = holding.clone();
        let helper = std::thread::spawn(move || {
            let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
            let (i, g, v) = new_job(&jobs, &before, until)?;
            let k = jobs.claim(i, g, true)?;
            holding2.store(true, std::sync::atomic::Ordering::Release);
            std::thread::sleep(std::time::Duration::from_millis(60));
            let ok = oxmr::wire::shm::jobs::copy_chunk(pid, false, &[(src_at, N)], &v.iovs, v.total, v.chunk, k);
            assert!(ok, "the helper's copy");
            jobs.settle(i, ok);
            holding2.store(false, std::sync::atomic::Ordering::Release);
            Some(())
        });
        mem.fill(0);
        let (w1, w2) = (p.id(10 * attempt + 1), p.id(10 * attempt + 2));
        let h = Hdr {
            op: WRITE,
            msg_id: w1,
            len: N as u64,
            iov_count: 1,
            rma_addr: base,
            rma_key: key,
            ..Default::default()
        };
        p.send(h, &iovs(&[(src_at, N)]));
        let until = std::time::Instant::now() + std::time::Duration::from_millis(30);
        while !holding.load(std::sync::atomic::Ordering::Acquire) && std::time::Instant::now() < until {
            let _ = t.poll();
        }
        let held = holding.load(std::sync::atomic::Ordering::Acquire);
        let h = Hdr {
            op: WRITE_INLINE,
            msg_id: w2,
            len: TAIL as u64,
            rma_addr: base + (N - TAIL) as u64,
            rma_key: key,
            ..Default::default()
        };
        p.send(h, &[0xAB; TAIL]);
        let mut ids = Vec::new();
        let mut other = false;
        if held {
            // The helper sleeps: our progress meanwhile must not apply
            // the small write, but another peer's write (to another
            // registration) is served.
            let w3 = p2.id(100 + attempt);
            let h =
                Hdr { op: WRITE_INLINE, msg_id: w3, len: 64, rma_addr: t.base, rma_key: t.key, ..Default::default() };
            p2.send(h, &[0x3C; 64]);
            for _ in 0..2000 {
                acked(&mut p, &mut ids);
                // (Counted only while the chunk is still held.)
                let still = holding.load(std::sync::atomic::Ordering::Acquire);
                other |= p2.drain().iter().any(|a| a.op == ACK && a.msg_id == w3 && a.status == 0) && still;
            }
            assert!(!ids.contains(&w2), "attempt {attempt}: the small write took effect during the stall");
        }
        let got = helper.join().expect("the helper thread");
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !(ids.contains(&w1) && ids.contains(&w2)) && std::time::Instant::now() < until {
            acked(&mut p, &mut ids);
        }
        assert!(ids.contains(&w1) && ids.contains(&w2), "attempt {attempt}: both writes answered");
        assert!(mem[N - TAIL..].iter().all(|&x| x == 0xAB), "attempt {attempt}: the later write's bytes won");
        assert!(mem[..N - TAIL] == src[..N - TAIL], "attempt {attempt}: the large write landed");
        if held && got.is_some() {
            assert!(other, "attempt {attempt}: another peer's write waited for the stalled peer's job");
            assert!(t.page()[..64].iter().all(|&x| x == 0x3C), "attempt {attempt}: the other peer's write landed");
            checked = true;
            break;
        }
    }
    assert!(checked, "the helper thread never held a chunk in 5 attempts");
    unsafe { assert_eq!(close(mr.cast()), 0) };
}

/// A read's buffer is its destination: a PULL for a read (which only a
/// send or a write's source answers) gets nothing back, not the buffer's
/// current contents, and the read still completes on the target's ACK.
#[test]
fn a_pull_for_a_read_sends_nothing_back() {
    const N: usize = 3 * PAGE;
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let fi_addr = t.insert(&p._port.local_addr().unwrap());
    let mut dst = vec![0x5A; N];
    t.read(&mut dst, fi_addr, 0x1000, 77, 0x61);
    let (rd, _) = p.answer(&t).expect("the READ request");
    assert_eq!(rd.op, READ);
    p.send(Hdr { op: PULL, msg_id: rd.msg_id, len: N as u64, ..Default::default() }, &[]);
    assert!(p.silent(&t), "the initiator answered a PULL for its read (its destination buffer's bytes)");
    p.send(Hdr { op: ACK, msg_id: rd.msg_id, ..Default::default() }, &[]);
    assert_eq!(t.completion(), Some(Ok(0x61)), "the read completes on the ACK");
    assert!(p.drain().is_empty(), "nothing more was sent to the peer");
}

/// The claim word of a shared copy is shared memory: a peer that keeps
/// rewriting it (here: re-opening its job of 8 chunks each time the helper
/// settles one, so its chunks are claimable again and again) must not keep
/// the endpoint helping in its progress call. The helper claims at most the
/// job's chunk count, so the progress call returns having settled at most
/// 8 chunks, while the rewriting goes on (1.5 s at most). Without the bound
/// it copied hundreds to thousands of chunks here whenever the rewriting
/// thread kept up (two attempts in three); three attempts.
#[test]
fn a_rewritten_claim_word_does_not_keep_the_helper_copying() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::Arc;
    const N: usize = 1 << 20;
    const CHUNK: usize = 128 << 10;
    const CHUNKS: u32 = (N / CHUNK) as u32;
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let fi_addr = t.insert(&p._port.local_addr().unwrap());
    let src: Vec<u8> = (0..N).map(|i| (i * 11 + 3) as u8).collect();
    let mut dst = vec![0u8; N];
    let dst_iov = [(dst.as_mut_ptr() as usize, N)];
    let jobs = p.rx.jobs();
    for attempt in 0..3u32 {
        let (ctx, gen) = (0x71 + attempt as usize, 1 + attempt);
        t.send(&src, fi_addr, ctx);
        let (rts, _) = p.answer(&t).expect("the RTS");
        assert_eq!(rts.op, RTS);
        assert!(jobs.open(0, gen, N, CHUNK, true, &dst_iov));
        let (stop, stopped) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (started, settled) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU32::new(0)));
        let rewriter = {
            let (jobs, stop, stopped) = (jobs.clone(), stop.clone(), stopped.clone());
            let (started, settled) = (started.clone(), settled.clone());
            std::thread::spawn(move || {
                started.store(true, Ordering::Release);
                let until = std::time::Instant::now() + std::time::Duration::from_millis(1500);
                while !stop.load(Ordering::Acquire) && std::time::Instant::now() < until {
                    let (n, _) = jobs.progress(0);
                    if n > 0 {
                        // Count what the helper settled, and make every
                        // chunk claimable again.
                        settled.fetch_add(n, Ordering::Relaxed);
                        assert!(jobs.open(0, gen, N, CHUNK, true, &dst_iov));
                    }
                }
                stopped.store(true, Ordering::Release);
            })
        };
        while !started.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        p.send(Hdr { op: CTS, msg_id: rts.msg_id, rma_addr: 0, tag: gen as u64, ..Default::default() }, &[]);
        // One progress call: it reads the CTS and helps (and completes the
        // send if its settle was the last of a job).
        let first = t.poll();
        let returned_while_rewriting = !stopped.load(Ordering::Acquire);
        stop.store(true, Ordering::Release);
        rewriter.join().expect("the rewriting thread");
        let n = settled.load(Ordering::Relaxed) + jobs.progress(0).0;
        assert!(
            returned_while_rewriting,
            "attempt {attempt}: the progress call kept copying while the claim word was rewritten"
        );
        assert!(
            (1..=CHUNKS).contains(&n),
            "attempt {attempt}: the helper settled {n} chunks of an {CHUNKS}-chunk job in one progress call"
        );
        // The send still ends: on our ACK (or already, if the helper
        // settled every chunk of the job).
        p.send(Hdr { op: ACK, msg_id: rts.msg_id, ..Default::default() }, &[]);
        let done = first.or_else(|| t.completion());
        assert_eq!(done, Some(Ok(ctx)), "attempt {attempt}: the send completes");
        for _ in 0..1000 {
            assert_eq!(t.poll(), None, "attempt {attempt}: the send completed twice");
        }
        let _ = p.drain();
    }
    assert!(t.guards_intact());
}

/// An RMA read's target writes into the initiator's buffer with no further
/// word from it: fi_close of the initiator with a read outstanding must not
/// return before the read is answered (the application may free the buffer
/// then), within a bound (1 s). Here the target answers 150 ms after the
/// close starts: the close is still waiting at 100 ms, and ends after the
/// answer.
#[test]
fn closing_with_a_read_outstanding_waits_for_its_answer() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    // (Held only to be dropped, in the closing thread.)
    struct Closing(#[allow(dead_code)] Target);
    // SAFETY: the endpoint is FI_THREAD_SAFE; only the closing thread uses it.
    unsafe impl Send for Closing {}
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let fi_addr = t.insert(&p._port.local_addr().unwrap());
    let mut dst = vec![0u8; 64 << 10];
    t.read(&mut dst, fi_addr, 0x1000, 77, 0x81);
    let (rd, _) = p.answer(&t).expect("the READ request");
    assert_eq!(rd.op, READ);
    let closed = Arc::new(AtomicBool::new(false));
    let closer = {
        let (c, closed) = (Closing(t), closed.clone());
        std::thread::spawn(move || {
            let c = c;
            drop(c);
            closed.store(true, Ordering::Release);
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(100));
    let waiting = !closed.load(Ordering::Acquire);
    std::thread::sleep(std::time::Duration::from_millis(50));
    if waiting {
        p.send(Hdr { op: ACK, msg_id: rd.msg_id, ..Default::default() }, &[]);
    }
    closer.join().expect("the closing thread");
    assert!(waiting, "fi_close returned while an RMA read into our buffer was outstanding");
    drop(dst);
}

/// A CTS is served only from the endpoint the send went to. Endpoint O at
/// address X gets a send S and asks for help (its CTS is late: sent after
/// O closed); a new endpoint N opens at X (its job table numbers its first
/// job slot 0, generation 1, as O's did) and publishes a job for a second
/// send S2. O's late CTS for S names slot 0, generation 1: served against
/// N's table it would copy S's bytes into N's receive buffer. It must copy
/// nothing.
#[test]
fn a_late_cts_of_a_closed_endpoint_is_not_served_against_a_new_one() {
    const N: usize = 64 << 10;
    const HALF: usize = N / 2;
    let t = unsafe { Target::open() };
    let port = TcpListener::bind("127.0.0.1:0").expect("a free port");
    let x = port.local_addr().unwrap();
    let mut name = [0u8; 28];
    let e = addr::encode(&x);
    name[..e.len()].copy_from_slice(&e);
    let to_target = Region::open(&t.name, None).expect("the target's queue");
    let push = |mut h: Hdr| {
        h.pid = std::process::id();
        h.name = name;
        let mut hb = [0u8; 96];
        let n = h.encode(&mut hb);
        to_target.push(&[&hb[..n]]).expect("room in the target's queue");
    };
    let fi_addr = t.insert(&x);
    let src: Vec<u8> = (0..N).map(|i| (i * 5 + 9) as u8).collect();

    // O gets S's RTS.
    let mut o = Region::create(&x, None).expect("O's queue");
    t.send(&src, fi_addr, 0x91);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut rts = None;
    while rts.is_none() && std::time::Instant::now() < until {
        let _ = t.poll();
        o.pop(|m, _| rts = Hdr::decode(m).map(|(h, _)| h));
    }
    let rts = rts.expect("S's RTS at O");
    assert_eq!(rts.op, RTS);
    // O's CTS for S (slot 0, generation 1) reaches the target's queue, and
    // O closes before the target reads it.
    push(Hdr { op: CTS, msg_id: rts.msg_id, rma_addr: 0, tag: 1, ..Default::default() });
    drop(o);
    // N opens at X, and publishes a job in its slot 0, generation 1 (as it
    // would for a send S2), its own first half copied.
    let n = Region::create(&x, None).expect("N's queue");
    let mut dst = vec![0u8; N];
    let jobs = n.jobs();
    assert!(jobs.open(0, 1, N, HALF, true, &[(dst.as_mut_ptr() as usize, N)]));
    assert_eq!(jobs.claim(0, 1, false), Some(0));
    dst[..HALF].fill(0x22);
    assert!(!jobs.settle(0, true));
    // The target sends S2 to X: it finds O closed and reaches N; then it
    // reads its queue, O's late CTS first.
    let src2 = vec![0x22u8; N];
    t.send(&src2, fi_addr, 0x92);
    for _ in 0..2000 {
        let _ = t.poll();
    }
    assert_eq!(jobs.progress(0), (1, false), "the late CTS got a chunk of N's job copied");
    assert!(dst[HALF..].iter().all(|&b| b == 0), "S's bytes landed in N's receive buffer");
    drop(n);
}

#[test]
fn an_rma_request_without_an_operation_id_is_dropped() {
    // (Every initiator names its operation, its endpoint's epoch in the
    // high half: without one, a closed endpoint's request cannot be told
    // from a live one's.)
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let src = [0x5au8; 64];
    let before = t.page().to_vec();
    let h = Hdr { op: WRITE, len: 64, iov_count: 1, rma_addr: t.base, rma_key: t.key, ..Default::default() };
    p.send(h, &iovs(&[(src.as_ptr() as usize, 64)]));
    let h = Hdr { op: WRITE_INLINE, len: 64, rma_addr: t.base, rma_key: t.key, ..Default::default() };
    p.send(h, &src);
    let mut dst = vec![0u8; 64];
    let h = Hdr { op: READ, len: 64, iov_count: 1, rma_addr: t.base, rma_key: t.key, ..Default::default() };
    p.send(h, &iovs(&[(dst.as_mut_ptr() as usize, 64)]));
    assert!(p.silent(&t), "a request without an operation id was answered");
    assert_eq!(t.page(), &before[..], "a write without an operation id landed");
    assert!(dst.iter().all(|&b| b == 0), "a read without an operation id was served");
    // The same requests with ids are served.
    let h = Hdr { op: WRITE_INLINE, msg_id: p.id(1), len: 64, rma_addr: t.base, rma_key: t.key, ..Default::default() };
    p.send(h, &src);
    let (a, _) = p.answer(&t).expect("an answer to the write with an id");
    assert_eq!((a.op, a.msg_id, a.status), (ACK, p.id(1), 0));
    assert_eq!(&t.page()[..64], &src[..]);
}

#[test]
fn a_read_that_claims_remote_cq_data_raises_no_completion_at_the_target() {
    // fi_rma(3): remote CQ data comes with writes. A forged READ with the
    // flag set must not be reported to the target as a remote write.
    const CQ_DATA: u8 = 2;
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let mut dst = vec![0u8; 64];
    let h = Hdr {
        op: READ,
        flags: CQ_DATA,
        msg_id: p.id(1),
        len: 64,
        iov_count: 1,
        data: 0xdada,
        rma_addr: t.base,
        rma_key: t.key,
        ..Default::default()
    };
    p.send(h, &iovs(&[(dst.as_mut_ptr() as usize, 64)]));
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let mut answer = None;
    while answer.is_none() && std::time::Instant::now() < until {
        assert_eq!(t.poll(), None, "the target reported a completion for a read");
        p.rx.pop(|m, _| answer = Hdr::decode(m).map(|(h, n)| (h, m[n..].to_vec())));
    }
    let (a, data) = answer.expect("the read is answered");
    assert_eq!((a.op, a.msg_id, a.status), (ACK, p.id(1), 0));
    // (A read this small is answered with its bytes in the ACK.)
    assert_eq!(&data[..], &t.page()[..64], "the read itself was served");
    assert!(dst.iter().all(|&b| b == 0), "nor written into the initiator's memory");
    assert_eq!(t.poll(), None, "no completion at the target after the read either");
}

#[test]
fn a_request_naming_another_process_than_its_queues_owner_is_dropped() {
    // The link a request came on says who sent it: the sender's queue
    // records its owner. A header that names another process (whose memory
    // the copy would read or write) is refused, whatever else it says.
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let mut child = std::process::Command::new("sleep").arg("10").spawn().expect("a child process");
    let other = child.id();
    let h = Hdr {
        op: READ,
        msg_id: p.id(1),
        len: 64,
        iov_count: 1,
        rma_addr: t.base,
        rma_key: t.key,
        ..Default::default()
    };
    p.send_as(h, &iovs(&[(0x10_0000, 64)]), p.name, other);
    let h = Hdr {
        op: WRITE,
        msg_id: p.id(2),
        len: 64,
        iov_count: 1,
        rma_addr: t.base,
        rma_key: t.key,
        ..Default::default()
    };
    p.send_as(h, &iovs(&[(0x10_0000, 64)]), p.name, other);
    let silent = p.silent(&t);
    let _ = child.kill();
    let _ = child.wait();
    assert!(silent, "a request naming process {other}, which does not own the sender's queue, was served");
    // The same read, naming the queue's owner, is served.
    let mut dst = vec![0u8; 64];
    let h = Hdr {
        op: READ,
        msg_id: p.id(3),
        len: 64,
        iov_count: 1,
        rma_addr: t.base,
        rma_key: t.key,
        ..Default::default()
    };
    p.send(h, &iovs(&[(dst.as_mut_ptr() as usize, 64)]));
    let (a, data) = p.answer(&t).expect("an answer to the honest read");
    assert_eq!((a.op, a.msg_id, a.status), (ACK, p.id(3), 0));
    // (A read this small is answered with its bytes in the ACK.)
    assert_eq!(&data[..], &t.page()[..64]);
}

/// A READ written into the target's queue that names the target itself as
/// its sender (its name and pid), operation `msg_id`, the key of its
/// registration and a destination `dst` of 256 bytes; then 200 ms of the
/// target's progress.
fn forge_self_read(t: &Target, p: &Peer, msg_id: u64, dst: &mut [u8]) {
    let mut own = [0u8; 28];
    let e = addr::encode(&t.name);
    own[..e.len()].copy_from_slice(&e);
    let h = Hdr { op: READ, msg_id, len: 256, iov_count: 1, rma_addr: t.base, rma_key: t.key, ..Default::default() };
    p.send_as(h, &iovs(&[(dst.as_mut_ptr() as usize, 256)]), own, std::process::id());
    let until = std::time::Instant::now() + std::time::Duration::from_millis(200);
    while std::time::Instant::now() < until {
        let _ = t.poll();
    }
}

#[test]
fn a_read_that_names_the_target_itself_as_its_sender_is_dropped() {
    // A same-user process writes into the endpoint's queue a READ naming
    // the endpoint itself (its name and pid), the key of its registration,
    // and a destination in its own unregistered memory: served, it would
    // copy the registration there. It is none of the endpoint's pending
    // operations, so it is dropped.
    let t = unsafe { Target::open() };
    let p = Peer::new(&t.name);
    let mut unregistered = vec![0u8; 256];
    // (With the target's own epoch, which its queue's header shows to
    // anyone who can open it: the closed-endpoint check passes.)
    forge_self_read(&t, &p, (p.to.epoch() as u64) << 32 | 5, &mut unregistered);
    assert!(
        unregistered.iter().all(|&b| b == 0),
        "the endpoint copied its registration into its own unregistered memory"
    );
    assert!(t.guards_intact());
}

#[test]
fn a_read_naming_the_target_itself_with_one_of_its_pending_reads_but_other_buffers_is_dropped() {
    // The target has a read of its own pending (to this peer, which never
    // answers it); a forged READ names the target as its sender, with that
    // read's operation id (kind and id match) but a destination that is
    // not the read's buffer: served, it would copy the registration into
    // the target's unregistered memory. Only the very buffers of the
    // pending operation are its own.
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let peer_addr = addr::parse(&p.name).expect("the peer's name");
    let to_p = t.insert(&peer_addr);
    let mut dst = vec![0u8; 256];
    t.read(&mut dst, to_p, 0x1000, 0x77, 0x81);
    let mut req = None;
    for _ in 0..1000 {
        let _ = t.poll();
        if let Some(h) = p.drain().into_iter().find(|h| h.op == READ) {
            req = Some(h);
            break;
        }
    }
    let req = req.expect("the target's read reached the peer");
    let mut unregistered = vec![0u8; 256];
    forge_self_read(&t, &p, req.msg_id, &mut unregistered);
    assert!(
        unregistered.iter().all(|&b| b == 0),
        "a forged read with the id of the target's pending read copied its registration into other memory"
    );
    assert!(dst.iter().all(|&b| b == 0), "nor into the pending read's buffer: the forged request was dropped");
    assert!(t.guards_intact());
}

#[test]
fn an_endpoints_rma_to_itself_is_served() {
    // The other side of the check above: a read and a write this endpoint
    // posts to its own address are its pending operations, and served.
    let t = unsafe { Target::open() };
    let me = t.insert(&t.name);
    let mut dst = vec![0u8; 512];
    t.read(&mut dst, me, t.base, t.key, 0x71);
    assert_eq!(t.completion(), Some(Ok(0x71)), "a read from itself completes");
    assert_eq!(&dst[..], &t.page()[..512]);
    let src: Vec<u8> = (0..512).map(|i| (i * 3 + 1) as u8).collect();
    t.write(&src, me, t.base + 1024, t.key, 0x72);
    assert_eq!(t.completion(), Some(Ok(0x72)), "a write to itself completes");
    assert_eq!(&t.page()[1024..1536], &src[..]);
    assert!(t.guards_intact());
}

#[test]
fn a_rendezvous_send_naming_another_process_fails_its_receive_and_copies_nothing() {
    // An RTS makes the receiver read the sender's buffers: from the process
    // that owns the sender's queue, never another one a header names.
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let mut child = std::process::Command::new("sleep").arg("10").spawn().expect("a child process");
    let mut rbuf = vec![0u8; 64 << 10];
    t.post_recv(&mut rbuf, 0x77);
    let h = Hdr { op: RTS, msg_id: p.id(1), len: 64 << 10, iov_count: 1, ..Default::default() };
    p.send_as(h, &iovs(&[(0x10_0000, 64 << 10)]), p.name, child.id());
    let c = t.completion();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(c, Some(Err(ffi::FI_EINVAL as i32)), "the receive fails");
    assert!(rbuf.iter().all(|&b| b == 0), "nothing was copied into the receive");
    let (a, _) = p.answer(&t).expect("the sender is answered");
    assert_eq!((a.op, a.msg_id, a.status), (ACK, p.id(1), ffi::FI_EINVAL as u32));
}

#[test]
fn forged_atomics_are_refused_and_change_nothing_outside_the_registration() {
    const ATOMIC: u8 = 11;
    // The tag packs the operation (bits 0..8), datatype (8..16) and call
    // (16..24: 0 base, 1 fetch, 2 compare); docs/wire.md.
    let what = |op: u32, dt: u32, call: u64| (op as u64) | (dt as u64) << 8 | call << 16;
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let before = t.page().to_vec();
    let one = 1u64.to_ne_bytes();
    let sum = what(ffi::FI_SUM as u32, ffi::FI_UINT64 as u32, 0);
    let at = |addr: u64, key: u64, len: u64, tag: u64, id: u64| Hdr {
        op: ATOMIC,
        msg_id: id,
        len,
        tag,
        rma_addr: addr,
        rma_key: key,
        ..Default::default()
    };
    // Without an operation id: dropped, unanswered.
    p.send(at(t.base, t.key, 8, sum, 0), &one);
    assert!(p.silent(&t), "an atomic without an operation id was answered");
    // Each malformed or refused one is answered with its error, and the
    // registration (and the guard pages around it) stays as it was.
    let cases: Vec<(&str, Hdr, Vec<u8>, u32)> = vec![
        ("an unknown call", at(t.base, t.key, 8, sum | 7 << 16, p.id(1)), one.to_vec(), ffi::FI_EOPNOTSUPP),
        ("bits past the call", at(t.base, t.key, 8, sum | 1 << 30, p.id(2)), one.to_vec(), ffi::FI_EOPNOTSUPP),
        (
            "a bitwise operation on a double",
            at(t.base, t.key, 8, what(ffi::FI_BOR as u32, ffi::FI_DOUBLE as u32, 0), p.id(3)),
            one.to_vec(),
            ffi::FI_EOPNOTSUPP,
        ),
        (
            "long double",
            at(t.base, t.key, 16, what(ffi::FI_SUM as u32, ffi::FI_LONG_DOUBLE as u32, 0), p.id(4)),
            vec![0; 16],
            ffi::FI_EOPNOTSUPP,
        ),
        ("fewer operand bytes than it says", at(t.base, t.key, 16, sum, p.id(5)), one.to_vec(), ffi::FI_EINVAL),
        ("a partial element", at(t.base, t.key, 7, sum, p.id(6)), vec![1; 7], ffi::FI_EINVAL),
        ("more than the most one atomic takes", at(t.base, t.key, 4096, sum, p.id(7)), vec![1; 4096], ffi::FI_EINVAL),
        ("a wrong key", at(t.base, t.key ^ 0x40, 8, sum, p.id(8)), one.to_vec(), ffi::FI_EACCES),
        (
            "past the registration's end",
            at(t.base + PAGE as u64 - 4, t.key, 8, sum, p.id(9)),
            one.to_vec(),
            ffi::FI_EACCES,
        ),
        (
            "a compare without its compare operands",
            at(t.base, t.key, 8, what(ffi::FI_CSWAP as u32, ffi::FI_UINT64 as u32, 2), p.id(10)),
            one.to_vec(),
            ffi::FI_EINVAL,
        ),
    ];
    for (why, h, body, code) in cases {
        p.send(h, &body);
        let (a, ab) = p.answer(&t).unwrap_or_else(|| panic!("{why}: no answer"));
        assert_eq!((a.op, a.msg_id, a.status), (ACK, h.msg_id, code), "{why}");
        assert!(ab.is_empty(), "{why}: a refusal carries no old values");
        assert_eq!(t.page(), &before[..], "{why}: the registration changed");
        assert!(t.guards_intact(), "{why}: a guard page changed");
    }
    // A well-formed fetch-add at the registration's last element is served,
    // with the old value in its answer.
    let last = t.base + PAGE as u64 - 8;
    let fetch = what(ffi::FI_SUM as u32, ffi::FI_UINT64 as u32, 1);
    p.send(at(last, t.key, 8, fetch, p.id(11)), &5u64.to_ne_bytes());
    let (a, old) = p.answer(&t).expect("an answer to the fetch-add");
    assert_eq!((a.op, a.msg_id, a.status), (ACK, p.id(11), 0));
    assert_eq!(old, before[PAGE - 8..].to_vec(), "the old value comes back");
    let now = u64::from_ne_bytes(t.page()[PAGE - 8..].try_into().unwrap());
    assert_eq!(now, u64::from_ne_bytes(before[PAGE - 8..].try_into().unwrap()).wrapping_add(5));
    assert!(t.guards_intact());
}

#[test]
fn a_fenced_operation_and_those_after_it_wait_for_the_peers_earlier_ones() {
    // fi_endpoint(3), FI_FENCE: the fenced operation, and every one posted
    // to the same peer after it, waits until the earlier ones completed.
    // The "peer" here answers only when told to, so the wait is visible.
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let to = t.insert(&p._port.local_addr().unwrap());
    let first = [7u8; 64];
    t.write(&first, to, 0x1000, 0x77, 1);
    let fenced = [9u8; 16];
    let iov = ffi::iovec { iov_base: fenced.as_ptr() as *mut c_void, iov_len: fenced.len() };
    let rma_iov = ffi::fi_rma_iov { addr: 0x2000, len: fenced.len(), key: 0x77 };
    let msg = ffi::fi_msg_rma {
        msg_iov: &iov,
        desc: null_mut(),
        iov_count: 1,
        addr: to,
        rma_iov: &rma_iov,
        rma_iov_count: 1,
        context: 2 as *mut c_void,
        data: 0,
    };
    unsafe {
        let writemsg = (*(*t.ep).rma).writemsg.unwrap();
        assert_eq!(writemsg(t.ep, &msg, ffi::FI_FENCE as u64), 0, "a fenced write is accepted");
    }
    t.send(&[1u8; 8], to, 3);
    let until = std::time::Instant::now() + std::time::Duration::from_millis(200);
    while std::time::Instant::now() < until {
        assert_eq!(t.poll(), None, "nothing completes before the first write is answered");
    }
    let got = p.drain_bodies();
    assert_eq!(
        got.len(),
        1,
        "only the write before the fence went out: {:?}",
        got.iter().map(|g| g.0.op).collect::<Vec<_>>()
    );
    assert_eq!((got[0].0.op, got[0].0.rma_addr), (WRITE_INLINE, 0x1000));
    p.send(Hdr { op: ACK, msg_id: got[0].0.msg_id, ..Default::default() }, &[]);
    assert_eq!(t.completion(), Some(Ok(1)), "the first write completes on its answer");
    // Now the fenced write, then the send behind it, in that order.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let (mut seen, mut done) = (Vec::new(), Vec::new());
    while (seen.len() < 2 || done.is_empty()) && std::time::Instant::now() < until {
        done.extend(t.poll());
        seen.extend(p.drain_bodies());
    }
    assert_eq!(seen.len(), 2, "the fenced write and the send went out once the fence cleared");
    assert_eq!((seen[0].0.op, seen[0].0.rma_addr), (WRITE_INLINE, 0x2000));
    assert_eq!(seen[0].1, fenced.to_vec());
    assert_eq!(seen[1].0.op, EAGER);
    assert_eq!(done, vec![Ok(3)], "the eager send behind the fence completes when sent");
}

#[test]
fn a_read_answered_with_data_takes_exactly_its_length() {
    // A small read is answered with its bytes in the ACK (docs/wire.md):
    // the initiator takes them into the read's buffer only when the answer
    // carries exactly the bytes asked for; anything else fails the read.
    let t = unsafe { Target::open() };
    let mut p = Peer::new(&t.name);
    let to = t.insert(&p._port.local_addr().unwrap());
    let mut buf = vec![0u8; 64];
    for (ctx, answer, want) in [(1usize, vec![0x5a; 3], Err(ffi::FI_EIO as i32)), (2, vec![0x6b; 64], Ok(2))] {
        buf.iter_mut().for_each(|b| *b = 0);
        t.read(&mut buf, to, 0x1000, 0x77, ctx);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut req = None;
        while req.is_none() && std::time::Instant::now() < until {
            assert_eq!(t.poll(), None);
            req = p.drain().into_iter().find(|h| h.op == READ);
        }
        let req = req.expect("the read's request");
        p.send(Hdr { op: ACK, msg_id: req.msg_id, ..Default::default() }, &answer);
        assert_eq!(t.completion(), Some(want), "an answer of {} bytes", answer.len());
        match want {
            Ok(_) => assert!(buf.iter().all(|&b| b == 0x6b), "the answer's bytes are in the read's buffer"),
            Err(_) => assert!(buf.iter().all(|&b| b == 0), "a short answer wrote nothing"),
        }
    }
}
