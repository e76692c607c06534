//! What a stranger can make an endpoint hold: connections (a cap, the
//! oldest silent one making room), time (a hello deadline), memory (a
//! budget for unfinished frames), and what a banned source gets. Raw
//! sockets play the strangers; a real link shows the endpoint still serves.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::inbox::*;
use super::link::*;
use super::*;

struct Ep {
    at: SocketAddr,
    me: Hello,
    inbox: Inbox,
}

fn ep(epoch: u32, bounds: Bounds) -> Ep {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let me = tests_hello(&at, epoch);
    let wake = std::sync::Arc::new(crate::sys::Epoll::new().unwrap());
    Ep { at, me, inbox: Inbox::new(l, me, wake, Default::default()).unwrap().with_bounds(bounds) }
}

/// Poll `e` (and flush `l`) until `done`, at most `ms`.
fn poll_until(e: &mut Ep, l: Option<&Link>, ms: u64, mut done: impl FnMut(&mut Ep) -> bool) -> bool {
    let end = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < end {
        if let Some(l) = l {
            l.flush();
        }
        e.inbox.poll();
        if done(e) {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    false
}

/// A real peer's link to `to` sends `n` frames; whether `to` took them all.
fn real_peer_served(to: &mut Ep) -> bool {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let me = tests_hello(&l.local_addr().unwrap(), 77);
    let link = Link::open(&to.at, &me, &TcpSend::default(), None).unwrap();
    for i in 0..5u32 {
        link.send(&[&i.to_le_bytes()]).unwrap();
    }
    let mut got = 0;
    poll_until(to, Some(&link), 5000, |e| {
        while e.inbox.pop(|_, _, _, _| got += 1) {}
        got == 5
    })
}

#[test]
fn an_endpoint_holds_at_most_its_connection_cap_and_a_real_peer_still_gets_in() {
    let mut e = ep(1, Bounds { conn_max: 8, ..Default::default() });
    let silent: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(e.at).unwrap()).collect();
    poll_until(&mut e, None, 300, |_| false);
    assert!(e.inbox.conns.len() <= 8, "{} connections held, the cap is 8", e.inbox.conns.len());
    assert!(e.inbox.accepted >= 8);
    // (The oldest silent connection makes room for the real peer's.)
    assert!(real_peer_served(&mut e), "a real peer connects and is served at the cap");
    drop(silent);
}

#[test]
fn a_connection_that_says_no_hello_in_time_is_closed_and_one_that_does_is_kept() {
    let mut e = ep(1, Bounds { hello_wait: Duration::from_millis(300), ..Default::default() });
    let _silent = TcpStream::connect(e.at).unwrap();
    let mut half = TcpStream::connect(e.at).unwrap();
    half.write_all(&e.me.encode(OPEN)[..20]).unwrap();
    assert!(poll_until(&mut e, None, 200, |e| e.inbox.conns.len() == 2), "both accepted");
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let me = tests_hello(&l.local_addr().unwrap(), 5);
    let link = Link::open(&e.at, &me, &TcpSend::default(), None).unwrap();
    link.send(&[b"hi"]).unwrap();
    let mut got = 0;
    assert!(poll_until(&mut e, Some(&link), 2000, |e| {
        while e.inbox.pop(|_, _, _, _| got += 1) {}
        got == 1
    }));
    let t = Instant::now();
    assert!(
        poll_until(&mut e, Some(&link), 3000, |e| e.inbox.conns.iter().all(|c| c.peer.is_some())),
        "the two without a hello were closed"
    );
    assert!(t.elapsed() < Duration::from_secs(2), "closed at the deadline, not later");
    assert_eq!(e.inbox.conns.len(), 1, "the real peer's connection is kept");
    link.send(&[b"again"]).unwrap();
    assert!(poll_until(&mut e, Some(&link), 2000, |e| {
        while e.inbox.pop(|_, _, _, _| got += 1) {}
        got == 2
    }));
}

#[test]
fn unfinished_frames_beyond_the_budget_are_not_read_and_stuck_ones_are_closed() {
    let mut e = ep(1, Bounds { partial_max: 1 << 20, hello_wait: Duration::from_millis(500), ..Default::default() });
    // Eight strangers (valid hellos from 127.0.0.1) each start a frame of
    // 256 KiB and send 200 KiB of it: 1.6 MiB held would be over the
    // 1 MiB budget.
    let mut strangers = Vec::new();
    for i in 0..8u16 {
        let mut s = TcpStream::connect(e.at).unwrap();
        let name: SocketAddr = format!("127.0.0.1:{}", 40000 + i).parse().unwrap();
        s.write_all(&tests_hello(&name, 9).encode(OPEN)).unwrap();
        s.write_all(&((256u32 << 10) - 4).to_le_bytes()).unwrap();
        s.set_nonblocking(true).unwrap();
        let _ = s.write(&vec![1u8; 200 << 10]);
        strangers.push(s);
    }
    let mut most = 0;
    poll_until(&mut e, None, 300, |e| {
        let held: usize = e.inbox.conns.iter().map(|c| c.buf_len()).sum();
        most = most.max(held);
        false
    });
    assert!(
        most < (1 << 20) + (256 << 10),
        "held {most} bytes of unfinished frames; the budget is 1 MiB (one read over)"
    );
    assert!(real_peer_served(&mut e), "a real peer is served while the budget is spent");
    assert!(
        poll_until(&mut e, None, 3000, |e| e.inbox.conns.iter().all(|c| c.buf_len() == 0)),
        "the stuck frames' connections were closed"
    );
}

#[test]
fn a_banned_source_is_refused_new_connections_for_a_while() {
    let mut e = ep(1, Bounds { ban: Duration::from_millis(400), ..Default::default() });
    let peer: SocketAddr = "127.0.0.1:41000".parse().unwrap();
    let mut s = TcpStream::connect(e.at).unwrap();
    s.write_all(&tests_hello(&peer, 9).encode(OPEN)).unwrap();
    assert!(poll_until(&mut e, None, 2000, |e| e.inbox.conns.iter().any(|c| c.peer == Some(peer))));
    e.inbox.ban_peer(peer);
    assert!(e.inbox.conns.is_empty(), "its connection is closed");
    let _again = TcpStream::connect(e.at).unwrap();
    poll_until(&mut e, None, 100, |_| false);
    assert!(e.inbox.conns.is_empty(), "a new connection from its source is refused");
    std::thread::sleep(Duration::from_millis(400));
    let _later = TcpStream::connect(e.at).unwrap();
    assert!(poll_until(&mut e, None, 2000, |e| e.inbox.conns.len() == 1), "after the ban, taken again");
}
