//! Zero-copy sends from registered memory, against a plain TCP reader
//! that checks every byte.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use super::link::*;
use super::*;
use crate::mr::uring::UringTable;
use std::sync::atomic::Ordering::Relaxed;

struct Anon(usize, usize);
impl Anon {
    fn new(len: usize) -> Anon {
        Anon(crate::mr::uring::tests::anon(len), len)
    }
    fn fill(&mut self, f: impl Fn(usize) -> u8) {
        // SAFETY: our mapping, of this length, borrowed mutably once.
        let b = unsafe { std::slice::from_raw_parts_mut(self.0 as *mut u8, self.1) };
        b.iter_mut().enumerate().for_each(|(i, x)| *x = f(i));
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: our mapping, of this length, alive while `self` is.
        unsafe { std::slice::from_raw_parts(self.0 as *const u8, self.1) }
    }
}
impl Drop for Anon {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.0 as *mut _, self.1) };
    }
}

/// Send `frames` on a link that sends as `tx` to a plain listener
/// (`one_by_one`: each written, and the ring reaped, before the next);
/// the frames the listener read, in order.
fn run(tx: &TcpSend, frames: &[Vec<&[u8]>], one_by_one: bool) -> Vec<Vec<u8>> {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        // (The answer a peer's inbox gives: frames go after it.)
        s.write_all(&tests_hello(&l.local_addr().unwrap(), 2).encode(ACCEPT)).unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        all
    });
    let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let link = Link::open(&at, &tests_hello(&me, 1), tx, None).unwrap();
    for f in frames {
        let mut tries = 0;
        loop {
            match link.send(f) {
                Ok(()) => break,
                Err(WireError::Full) if tries < 100_000 => {
                    link.flush();
                    tries += 1;
                    std::thread::sleep(Duration::from_micros(20));
                }
                Err(e) => panic!("send: {e}"),
            }
        }
        for _ in 0..if one_by_one { 20_000 } else { 0 } {
            let ring = tx.ring.as_ref();
            ring.inspect(|r| r.reap());
            if !link.flush() && ring.is_none_or(|r| r.in_flight() == 0) {
                break;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    for _ in 0..100_000 {
        if !link.flush() {
            break;
        }
        std::thread::sleep(Duration::from_micros(20));
    }
    assert!(!link.flush() && !link.closed(), "everything went out");
    drop(link);
    let all = reader.join().unwrap();
    assert_eq!(Hello::decode(&all).map(|h| (h.0.epoch, h.1)), Some((1, OPEN)), "our hello first");
    let mut got = Vec::new();
    let mut at = HELLO_LEN;
    while at < all.len() {
        let n = u32::from_le_bytes(all[at..at + 4].try_into().unwrap()) as usize;
        got.push(all[at + 4..at + 4 + n].to_vec());
        at += 4 + n;
    }
    assert_eq!(at, all.len(), "the stream ends at a frame's end");
    got
}

/// A ring that sends with SEND_ZC. The machines these tests are written
/// for have io_uring and SEND_ZC (Linux 6.0 or later, ../shared/DESIGN.md):
/// without them the test fails, saying so, rather than pass having tested
/// nothing.
fn zc_ring() -> Arc<TcpRing> {
    let table = TcpRing::new(Arc::new(UringTable::new().expect("io_uring (Linux 5.19 or later; ../shared/DESIGN.md)")));
    assert!(
        table.sends_zc(),
        "this kernel has no io_uring SEND_ZC (Linux 6.0 or later): the zero-copy path is untested"
    );
    Arc::new(table)
}

#[test]
fn a_link_whose_zero_copy_sends_the_kernel_copies_stops_sending_zero_copy() {
    // On loopback the kernel copies every SEND_ZC (msg_zerocopy.rst,
    // "Loopback"): after `copied_off` notifications in a row say so,
    // the link sends with writev. Frames go one at a time, the ring
    // reaped between them, so each notification is in before the next.
    let table = zc_ring();
    let mut buf = Anon::new(1 << 20);
    buf.fill(|i| (i * 13 + i / 511) as u8);
    let slots = table.table().pin(&[(buf.0, 1 << 20)]).unwrap();
    let src = buf.bytes();
    let part = 64 << 10;
    let hdrs: Vec<[u8; 4]> = (0..12u32).map(u32::to_le_bytes).collect();
    let frames: Vec<Vec<&[u8]>> =
        hdrs.iter().enumerate().map(|(i, h)| vec![&h[..], &src[i * part..(i + 1) * part]]).collect();
    let tx = TcpSend { ring: Some(table.clone()), stats: Default::default(), copied_off: 2, lanes: 0, key: None };
    let got = run(&tx, &frames, true);
    assert_eq!(got.len(), frames.len());
    assert!(got.iter().zip(&frames).all(|(g, f)| *g == f.concat()), "a frame arrived changed");
    let st = &tx.stats;
    let (zc, copied) = (st.zc_sends.load(Relaxed), table.notes.copied.load(Relaxed));
    println!("zero-copy sends {zc}, of which the kernel copied {copied}");
    assert_eq!(copied, zc, "loopback: the kernel copied every zero-copy send");
    assert_eq!(zc, 2, "two copied in a row, then writev");
    assert_eq!(st.copied_frames.load(Relaxed), frames.len() as u64 - 2);
    table.table().unpin(&slots);
}

#[test]
fn pinned_parts_go_with_send_zc_in_stream_order_and_the_rest_is_copied() {
    let table = zc_ring();
    let mut buf = Anon::new(2 << 20);
    buf.fill(|i| (i * 7 + i / 4093) as u8);
    // The first MiB pinned, the second not.
    let slots = table.table().pin(&[(buf.0, 1 << 20)]).unwrap();
    let src = buf.bytes();
    let heap = vec![0xa5u8; 200 << 10];
    let part = 200 << 10;
    let mut frames: Vec<Vec<&[u8]>> = Vec::new();
    let hdrs: Vec<[u8; 4]> = (0..40u32).map(u32::to_le_bytes).collect();
    let mut zc_parts = 0;
    for (i, hdr) in hdrs.iter().enumerate() {
        let off = ((i * 37) << 10) % ((1 << 20) - part);
        match i % 5 {
            // Pinned: header copied, payload zero-copy.
            0 | 1 => {
                frames.push(vec![&hdr[..], &src[off..off + part]]);
                zc_parts += 1;
            }
            // Small frames in between (copied, queued behind a send in flight).
            2 => frames.push(vec![&hdr[..], b"small"]),
            // Crossing the pinned piece's end: copied.
            3 => frames.push(vec![&hdr[..], &src[(1 << 20) - 4096..(1 << 20) - 4096 + part]]),
            // Not registered at all, and under ZC_MIN in pinned memory: copied.
            _ => frames.push(vec![&hdr[..], &heap[..], &src[off..off + ZC_MIN - 1]]),
        }
    }
    let tx = TcpSend { ring: Some(table.clone()), stats: Default::default(), copied_off: 0, lanes: 0, key: None };
    let got = run(&tx, &frames, false);
    assert_eq!(got.len(), frames.len());
    for (i, (g, f)) in got.iter().zip(&frames).enumerate() {
        assert!(*g == f.concat(), "frame {i} arrived changed or out of order");
    }
    let st = &tx.stats;
    assert_eq!(st.zc_sends.load(Relaxed), zc_parts, "every pinned part went with SEND_ZC");
    assert_eq!(st.zc_bytes.load(Relaxed), zc_parts * part as u64);
    assert_eq!(st.copied_frames.load(Relaxed), frames.len() as u64 - zc_parts);
    let total: usize = frames.iter().map(|f| 4 + f.iter().map(|p| p.len()).sum::<usize>()).sum();
    assert_eq!(
        st.copied_bytes.load(Relaxed) + st.zc_bytes.load(Relaxed),
        (HELLO_LEN + total) as u64,
        "every byte counted once"
    );
    for _ in 0..10_000 {
        table.reap();
        if table.in_flight() == 0 {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(table.in_flight(), 0, "every notification arrived; the map keeps nothing");
    assert_eq!(table.notes.notified.load(Relaxed), zc_parts);
    // Loopback delivers to a local socket, which cannot keep the
    // sender's pages: the kernel copies (msg_zerocopy.rst, "Loopback"),
    // and REPORT_USAGE says so in every notification.
    assert_eq!(table.notes.copied.load(Relaxed), zc_parts, "loopback: the kernel copied every one");
    table.table().unpin(&slots);
}

#[test]
fn a_link_dropped_with_a_send_in_flight_leaves_the_flight_to_the_ring() {
    let table = zc_ring();
    let mut buf = Anon::new(1 << 20);
    buf.fill(|i| i as u8);
    let slots = table.table().pin(&[(buf.0, 1 << 20)]).unwrap();
    // A reader that never reads, with a tiny receive window: the send
    // cannot finish (MSG_WAITALL) while it lives.
    let small = |fd: i32, opt: i32| {
        let v: libc::c_int = 4096;
        // SAFETY: setsockopt reads an int of the size given.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0);
    };
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    small(l.as_raw_fd(), libc::SO_RCVBUF);
    let at = l.local_addr().unwrap();
    let tx = TcpSend { ring: Some(table.clone()), stats: Default::default(), copied_off: 0, lanes: 0, key: None };
    let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let link = Link::open(&at, &tests_hello(&me, 1), &tx, None).unwrap();
    small(link.raw_fd(), libc::SO_SNDBUF);
    let (mut peer, _) = l.accept().unwrap();
    peer.write_all(&tests_hello(&at, 2).encode(ACCEPT)).unwrap();
    link.send(&[b"hdr", &buf.bytes()[..1 << 20]]).unwrap();
    for _ in 0..100 {
        link.flush();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(link.flush(), "the send is still in flight");
    assert_eq!(table.in_flight(), 1);
    drop(link);
    table.reap();
    assert_eq!(table.in_flight(), 1, "the ring's map owns the flight of a link gone");
    // The reader goes (unread data: a reset): the send fails, its
    // completions come, and the map lets the flight go.
    drop(peer);
    for _ in 0..5000 {
        table.reap();
        if table.in_flight() == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(table.in_flight(), 0, "the flight ended with its last completion");
    assert_eq!(tx.stats.zc_sends.load(Relaxed), 0, "a failed send is not counted as sent");
    table.table().unpin(&slots);
}

#[test]
fn without_the_ring_nothing_goes_with_send_zc() {
    let table = Arc::new(TcpRing::new(Arc::new(
        UringTable::new().expect("io_uring (Linux 5.19 or later; ../shared/DESIGN.md)"),
    )));
    let mut buf = Anon::new(1 << 20);
    buf.fill(|i| (i % 251) as u8);
    let slots = table.table().pin(&[(buf.0, 1 << 20)]).unwrap();
    let src = buf.bytes();
    let frames: Vec<Vec<&[u8]>> =
        (0..8).map(|i| vec![&b"hdr"[..], &src[i << 16..(i << 16) + (256 << 10) - 64]]).collect();
    // FI_OXMR_TCP_IO_URING=0: the domain's links get no ring.
    let pinner = crate::mr::pin::Pinner::new(
        crate::mr::pin::PinMode::Uring,
        crate::mr::account::Account::new(None, crate::mr::account::CapSource::Variable),
    );
    let d = crate::mr::MrDomain::new(0, pinner, Default::default());
    let d = DomainWires::new(&d, false);
    assert!(d.tcp_ring.is_none(), "FI_OXMR_TCP_IO_URING=0: plain sockets");
    let tx = TcpSend { ring: d.tcp_ring.clone(), stats: d.tcp_stats.clone(), copied_off: 0, lanes: 0, key: None };
    let got = run(&tx, &frames, false);
    assert!(got.iter().zip(&frames).all(|(g, f)| *g == f.concat()));
    assert_eq!(d.tcp_stats.zc_sends.load(Relaxed), 0);
    assert_eq!(d.tcp_stats.copied_frames.load(Relaxed), frames.len() as u64);
    assert_eq!(table.in_flight(), 0);
    table.table().unpin(&slots);
}
