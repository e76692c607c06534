//! The TCP wire between real sockets in this process: frames, hellos,
//! landing, barriers, one connection per pair, bad peers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::inbox::*;
use super::link::*;
use super::*;

fn hello(addr: &SocketAddr, epoch: u32) -> Hello {
    let mut name = [0u8; 28];
    let e = crate::info::addr::encode(addr);
    name[..e.len()].copy_from_slice(&e);
    Hello { version: VERSION, name, epoch, pid: std::process::id() }
}

fn wake() -> std::sync::Arc<crate::sys::Epoll> {
    std::sync::Arc::new(crate::sys::Epoll::new().unwrap())
}

/// The test classifier: a frame that starts 0xDA, then the transfer
/// and the offset (8 bytes each), lands.
fn test_head(b: &[u8]) -> Option<super::super::land::Head> {
    let word = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    (b.len() >= 17 && b[0] == 0xDA).then(|| super::super::land::Head { key: word(1), off: word(9) as usize, len: 17 })
}

fn land_frame(key: u64, off: u64, payload: &[u8]) -> Vec<u8> {
    let mut f = ((17 + payload.len()) as u32).to_le_bytes().to_vec();
    f.push(0xDA);
    f.extend_from_slice(&key.to_le_bytes());
    f.extend_from_slice(&off.to_le_bytes());
    f.extend_from_slice(payload);
    f
}

#[test]
fn payloads_land_in_their_zone_straight_from_the_socket_and_nowhere_else() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let lands = super::super::land::Landings::default();
    lands.set_classifier(test_head, 17);
    let mut inbox = Inbox::new(l, hello(&at, 7), wake(), lands.clone()).unwrap();
    let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let mut dest = vec![0u8; 64 << 10];
    let base = dest.as_mut_ptr() as usize;
    // SAFETY: `dest` outlives the inbox's use of the zone (forgotten
    // below, before `dest` is read or dropped).
    unsafe { lands.expect(me, 42, vec![(base, 32 << 10), (base + (32 << 10), 32 << 10)]) };
    let mut peer = TcpStream::connect(at).unwrap();
    peer.write_all(&hello_bytes(&hello(&me, 9))).unwrap();
    let pattern: Vec<u8> = (0..40000u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut stream = land_frame(42, 1000, &pattern);
    stream.extend_from_slice(&6u32.to_le_bytes());
    stream.extend_from_slice(b"small!");
    // Past the zone's end, and for a transfer with no zone: whole frames.
    stream.extend(land_frame(42, (64 << 10) - 100, &[9u8; 10000]));
    stream.extend(land_frame(43, 0, &[8u8; 10000]));
    let mut got: Vec<(Vec<u8>, usize)> = Vec::new();
    let take = |inbox: &mut Inbox, got: &mut Vec<(Vec<u8>, usize)>| {
        for _ in 0..200 {
            while inbox.pop(|f, _, from, landed| {
                assert_eq!(from, me);
                got.push((f.to_vec(), landed))
            }) {}
            std::thread::sleep(Duration::from_micros(100));
        }
    };
    // (In dribbles, the inbox reading between them: a payload lands
    // across many reads, part from the read that held its header.)
    for piece in stream.chunks(7001) {
        peer.write_all(piece).unwrap();
        take(&mut inbox, &mut got);
    }
    assert_eq!(got.len(), 4, "{:?}", got.iter().map(|g| (g.0.len(), g.1)).collect::<Vec<_>>());
    assert_eq!((got[0].0.len(), got[0].1), (17, 40000), "the header alone goes up, and what landed");
    assert_eq!(&dest[1000..41000], &pattern[..], "the payload is in the zone, across its two pieces");
    assert!(dest[..1000].iter().chain(&dest[41000..]).all(|&b| b == 0), "nothing outside it");
    assert_eq!(got[1], (b"small!".to_vec(), 0));
    assert_eq!((got[2].0.len(), got[2].1), (17 + 10000, 0), "a payload past the zone's end is not landed");
    assert_eq!((got[3].0.len(), got[3].1), (17 + 10000, 0), "nor one for a transfer without a zone");
    // A zone forgotten while its payload is on the way: the rest is
    // read and dropped, never written.
    let half = land_frame(42, 0, &[5u8; 30000]);
    peer.write_all(&half[..15000]).unwrap();
    take(&mut inbox, &mut got);
    lands.forget(me, 42);
    dest.iter_mut().for_each(|b| *b = 0xEE);
    peer.write_all(&half[15000..]).unwrap();
    peer.write_all(&2u32.to_le_bytes()).unwrap();
    peer.write_all(b"ok").unwrap();
    take(&mut inbox, &mut got);
    assert!(dest.iter().all(|&b| b == 0xEE), "no byte written after the zone was forgotten");
    assert_eq!(got.len(), 6);
    assert_eq!(got[5], (b"ok".to_vec(), 0), "the stream goes on after the dropped payload");
    assert_eq!(inbox.positions(), (6, 6));
}

#[test]
fn nothing_after_a_barrier_is_cut_until_it_was_taken_so_what_follows_can_land() {
    // A streamed write's request (the barrier) and its DATA arrive in
    // one read: the DATA is cut only at the next poll, after the
    // engine took the request and opened the zone, and lands there.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let lands = super::super::land::Landings::default();
    lands.set_classifier(test_head, 17);
    lands.set_barrier(|b| b.first() == Some(&0xBB));
    let mut inbox = Inbox::new(l, hello(&at, 7), wake(), lands.clone()).unwrap();
    let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let mut peer = TcpStream::connect(at).unwrap();
    peer.write_all(&hello_bytes(&hello(&me, 9))).unwrap();
    let payload: Vec<u8> = (0..20000u32).map(|i| (i % 241) as u8).collect();
    let mut stream = 3u32.to_le_bytes().to_vec();
    stream.extend_from_slice(&[0xBB, 1, 2]);
    stream.extend(land_frame(42, 0, &payload));
    peer.write_all(&stream).unwrap();
    let mut got: Vec<(Vec<u8>, usize)> = Vec::new();
    for _ in 0..2000 {
        inbox.poll();
        if !inbox.frames.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    std::thread::sleep(Duration::from_millis(20));
    while let Some(f) = inbox.frames.pop_front() {
        got.push((f.0, f.3));
    }
    let lens: Vec<usize> = got.iter().map(|g| g.0.len()).collect();
    assert_eq!(lens, vec![3], "the barrier alone, nothing after it");
    assert_eq!(got[0], (vec![0xBB, 1, 2], 0));
    let mut dest = vec![0u8; 20000];
    // SAFETY: `dest` outlives the zone (forgotten below).
    unsafe { lands.expect(me, 42, vec![(dest.as_mut_ptr() as usize, dest.len())]) };
    for _ in 0..2000 {
        inbox.pop(|f, _, _, landed| got.push((f.to_vec(), landed)));
        if got.len() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    lands.forget(me, 42);
    assert_eq!((got.len(), got[1].0.len(), got[1].1), (2, 17, 20000), "the DATA's payload landed");
    assert!(dest == payload);
}

#[test]
fn the_wake_fd_is_readable_when_a_connection_or_a_frame_arrives() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let w = wake();
    let mut inbox = Inbox::new(l, hello(&at, 7), w.clone(), Default::default()).unwrap();
    assert!(!w.readable_within(0), "nothing arrived yet");
    let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let link = Link::open(&at, &hello(&me, 9), &TcpSend::default(), None).unwrap();
    link.send(&[b"first"]).unwrap();
    assert!(w.readable_within(5000), "a connection waits at the listener");
    let mut got = 0;
    for _ in 0..2000 {
        link.flush();
        while inbox.pop(|_, _, _, _| got += 1) {}
        if got == 1 {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(got, 1);
    assert!(!w.readable_within(20), "everything read: not readable");
    link.send(&[b"second"]).unwrap();
    link.flush();
    assert!(w.readable_within(5000), "a frame on an accepted connection wakes");
    for _ in 0..2000 {
        while inbox.pop(|_, _, _, _| got += 1) {}
        if got == 2 {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(got, 2);
}

#[test]
fn frames_cross_with_their_senders_name_and_bad_peers_are_refused() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let mut inbox = Inbox::new(l, hello(&at, 7), wake(), Default::default()).unwrap();
    let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
    // (Opening needs nothing of the inbox: the kernel accepts.)
    let link = Link::open(&at, &hello(&me, 9), &TcpSend::default(), None).unwrap();
    link.send(&[b"ab", b"cd"]).unwrap();
    link.send(&[&[5u8; 1000]]).unwrap();
    assert_eq!(link.epoch(), 0, "the peer's hello comes once it polls");
    let mut got = Vec::new();
    for _ in 0..2000 {
        // (Queued behind the connect until it is up: flush sends.)
        link.flush();
        while inbox.pop(|f, _, from, _| got.push((f.to_vec(), from))) {}
        if got.len() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(got.len(), 2);
    assert_eq!(got[0], (b"abcd".to_vec(), me));
    assert_eq!(got[1].0, vec![5u8; 1000]);
    assert_eq!(inbox.positions(), (2, 2));
    let mut epoch = 0;
    for _ in 0..2000 {
        epoch = link.epoch();
        if epoch != 0 {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!((epoch, link.owner()), (7, std::process::id()), "the inbox's hello answered ours");
    assert_eq!(link.state(), LinkState::Open);
    // Another wire version: the link closes when the answer comes.
    let l2 = TcpListener::bind("127.0.0.1:0").unwrap();
    let at2 = l2.local_addr().unwrap();
    let mut h = hello(&at2, 3);
    h.version = 99;
    let mut other = Inbox::new(l2, h, wake(), Default::default()).unwrap();
    let bad = Link::open(&at2, &hello(&me, 9), &TcpSend::default(), None).unwrap();
    let mut state = LinkState::Open;
    for _ in 0..2000 {
        bad.flush();
        other.poll();
        state = bad.state();
        if state != LinkState::Open {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!((state, bad.epoch()), (LinkState::Closed, 0), "a peer of wire version 99 stays unopened");
    assert!(bad.send(&[b"x"]).is_err());
    // A frame over TCP_MAX_FRAME: the connection is closed, nothing handed up.
    let mut raw = TcpStream::connect(at).unwrap();
    raw.write_all(&hello(&me, 1).encode(OPEN)).unwrap();
    raw.write_all(&((TCP_MAX_FRAME as u32) + 1).to_le_bytes()).unwrap();
    for _ in 0..200 {
        inbox.poll();
        std::thread::sleep(Duration::from_micros(200));
    }
    assert!(!inbox.pop(|_, _, _, _| panic!("a frame over the limit was handed up")));
    // Our peer closing: the link says so.
    drop(inbox);
    let mut state = LinkState::Open;
    for _ in 0..2000 {
        state = link.state();
        if state != LinkState::Open {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(state, LinkState::Closed);
}

/// Connect and wait for the setup to settle (a bounded count of polls).
fn settle(link: &Link) -> Setup {
    for _ in 0..20_000 {
        match link.setup() {
            Setup::Connecting(_) => std::thread::sleep(Duration::from_micros(100)),
            s => return s,
        }
    }
    link.setup()
}

#[test]
fn a_connect_never_waits_and_a_refused_one_fails_the_link() {
    // A port nobody listens on (bound, then closed): the connect starts
    // and returns at once (loopback refuses after connect returned);
    // frames queue behind it; the refusal closes the link.
    let nobody = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
    match Link::open(&nobody, &hello(&me, 1), &TcpSend::default(), None) {
        Ok(link) => {
            let _ = link.send(&[b"queued while connecting"]);
            assert_eq!(settle(&link), Setup::Failed(libc::ECONNREFUSED));
            assert_eq!(link.state(), LinkState::Unreachable(libc::ECONNREFUSED));
            assert!(link.closed() && link.send(&[b"x"]).is_err(), "a failed link takes nothing");
            assert!(!link.flush(), "nothing waits on a failed link");
        }
        Err(OpenError::Unreachable(e)) => assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED)),
        Err(e) => panic!("refused for another reason: {e:?}"),
    }
    // A listener that is there: up, and what queued meanwhile arrives.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let mut inbox = Inbox::new(l, hello(&at, 5), wake(), Default::default()).unwrap();
    let link = Link::open(&at, &hello(&me, 2), &TcpSend::default(), None).unwrap();
    link.send(&[b"first"]).unwrap();
    assert_eq!(settle(&link), Setup::Up);
    let mut got = Vec::new();
    for _ in 0..2000 {
        link.flush();
        while inbox.pop(|f, _, _, _| got.push(f.to_vec())) {}
        if !got.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(got, vec![b"first".to_vec()]);
}

#[test]
fn a_hello_of_a_new_epoch_replaces_the_connection_from_that_address() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let mut inbox = Inbox::new(l, hello(&at, 5), wake(), Default::default()).unwrap();
    let peer: SocketAddr = "127.0.0.1:2".parse().unwrap();
    let mut old = TcpStream::connect(at).unwrap();
    old.write_all(&hello(&peer, 10).encode(OPEN)).unwrap();
    for _ in 0..200 {
        inbox.poll();
        if inbox.conns.iter().any(|c| c.peer.is_some()) {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(inbox.take_hellos(), vec![(peer, 10)]);
    assert_eq!(inbox.conns.len(), 1);
    let mut new = TcpStream::connect(at).unwrap();
    new.write_all(&hello(&peer, 11).encode(OPEN)).unwrap();
    let mut restarts = Vec::new();
    for _ in 0..2000 {
        inbox.poll();
        restarts = inbox.take_hellos();
        if !restarts.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(restarts, vec![(peer, 11)]);
    assert_eq!(inbox.conns.len(), 1, "the old connection is closed");
    assert_eq!(inbox.conns[0].epoch, 11);
    // The old one sees its end.
    old.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut b = [0u8; HELLO_LEN];
    let mut n = old.read(&mut b).unwrap_or(0);
    if n == HELLO_LEN {
        n = old.read(&mut b).unwrap_or(0);
    }
    assert_eq!(n, 0, "the replaced connection was closed");
}

/// An endpoint of the TCP wire alone: its inbox, and how its links send.
struct Ep {
    at: SocketAddr,
    me: Hello,
    inbox: Inbox,
}

fn ep(ip: &str, epoch: u32) -> Ep {
    let l = TcpListener::bind((ip, 0)).unwrap();
    let at = l.local_addr().unwrap();
    let me = hello(&at, epoch);
    Ep { at, me, inbox: Inbox::new(l, me, wake(), Default::default()).unwrap() }
}

impl Ep {
    fn link(&self, to: &Ep) -> Link {
        Link::open(&to.at, &self.me, &TcpSend::default(), Some(&self.inbox.pairs())).unwrap()
    }
}

/// Frames `0..n` (4-byte counters) from each link, polled and flushed
/// alternately until both sides took them all: what each took, with
/// its senders.
fn trade(a: &mut Ep, la: &Link, b: &mut Ep, lb: &Link, n: u32) -> [Vec<(u32, SocketAddr)>; 2] {
    let mut got: [Vec<(u32, SocketAddr)>; 2] = Default::default();
    let mut sent = [0u32; 2];
    for _ in 0..20_000 {
        for (k, l) in [la, lb].into_iter().enumerate() {
            while sent[k] < n && l.send(&[&sent[k].to_le_bytes()]).is_ok() {
                sent[k] += 1;
            }
            l.flush();
        }
        for (k, e) in [&mut *a, &mut *b].into_iter().enumerate() {
            while e.inbox.pop(|f, _, from, _| got[k].push((u32::from_le_bytes(f.try_into().unwrap()), from))) {}
        }
        if got[0].len() == n as usize && got[1].len() == n as usize {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    got
}

/// The one connection each side reads: (its local port, its peer's).
fn conns(e: &Ep) -> Vec<(u16, u16)> {
    e.inbox.conns.iter().map(|c| (c.sock.local_addr().unwrap().port(), c.sock.peer_addr().unwrap().port())).collect()
}

#[test]
fn two_endpoints_keep_one_connection_whoever_opens_first_and_frames_stay_in_order() {
    // Three orders: both open before either polls (each sees the
    // other's hello while its own waits for its answer: the lower
    // address's connection survives, the other is answered YIELD);
    // one opens, the other polls (and adopts it) before it opens (and
    // takes it: it connects nowhere); and both open, one polls first.
    for order in 0..3 {
        for _ in 0..5 {
            let mut a = ep("127.0.0.1", 1);
            let mut b = ep("127.0.0.1", 2);
            let (la, lb) = match order {
                0 => (a.link(&b), b.link(&a)),
                1 => {
                    let la = a.link(&b);
                    la.send(&[&0u32.to_le_bytes()]).unwrap();
                    for _ in 0..2000 {
                        b.inbox.poll();
                        if !b.inbox.pairs.table().is_empty() {
                            break;
                        }
                        la.flush();
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    let lb = b.link(&a);
                    assert!(!lb.connecting(), "b took the connection a opened: nothing to connect");
                    // (Frame 0 went already; trade sends 0.. again.)
                    let mut first = Vec::new();
                    for _ in 0..2000 {
                        la.flush();
                        b.inbox.pop(|f, _, _, _| first.push(f.to_vec()));
                        if !first.is_empty() {
                            break;
                        }
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    assert_eq!(first, vec![0u32.to_le_bytes().to_vec()]);
                    (la, lb)
                }
                _ => {
                    let la = a.link(&b);
                    let lb = b.link(&a);
                    for _ in 0..50 {
                        la.flush();
                        b.inbox.poll();
                        std::thread::sleep(Duration::from_micros(50));
                    }
                    (la, lb)
                }
            };
            let got = trade(&mut a, &la, &mut b, &lb, 300);
            for (k, from) in [(0, b.at), (1, a.at)] {
                let want: Vec<(u32, SocketAddr)> = (0..300).map(|i| (i, from)).collect();
                assert!(got[k] == want, "order {order}: side {k} took {} frames, not 0..300 in order", got[k].len());
            }
            assert!(!la.connecting() && !lb.connecting());
            assert_eq!((la.epoch(), lb.epoch()), (2, 1), "each knows the other's epoch");
            assert_eq!(
                (a.inbox.accepted + b.inbox.accepted, conns(&a).len(), conns(&b).len()),
                (if order == 1 { 1 } else { 2 }, 1, 1)
            );
            let (ca, cb) = (conns(&a)[0], conns(&b)[0]);
            assert_eq!((ca.0, ca.1), (cb.1, cb.0), "order {order}: both read the same connection");
            if order != 1 {
                // (Opened by the lower address: the peer's end is its
                // listener.)
                let (low, high) = if a.at < b.at { (&ca, &b.at) } else { (&cb, &a.at) };
                assert_eq!(low.1, high.port(), "order {order}: the lower address's connection survived");
            }
            // The engine drops a link: the connection ends for both.
            drop(la);
            let mut state = LinkState::Open;
            for _ in 0..2000 {
                a.inbox.poll();
                b.inbox.poll();
                state = lb.state();
                if state != LinkState::Open {
                    break;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            assert_eq!(state, LinkState::Closed, "order {order}: b's link learns the connection ended");
            assert!(b.inbox.conns.is_empty());
            // (b's engine drops its link in turn: a reads the end.)
            drop(lb);
            for _ in 0..2000 {
                a.inbox.poll();
                if a.inbox.conns.is_empty() {
                    break;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            assert!(a.inbox.conns.is_empty(), "order {order}: a's inbox let the ended connection go");
        }
    }
}

#[test]
fn a_yielded_link_whose_survivor_never_comes_connects_again() {
    // The peer answers YIELD (it says its own connection to us wins)
    // and then never connects: our frame waits, goes on no connection,
    // and after CONNECT_WAIT the link connects again; answered ACCEPT
    // this time, the frame goes out whole on the new connection.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let link = Link::open(&at, &hello(&me, 4), &TcpSend::default(), None).unwrap();
    link.send(&[b"waits for a connection that stays"]).unwrap();
    let (mut first, _) = l.accept().unwrap();
    first.write_all(&hello(&at, 8).encode(YIELD)).unwrap();
    for _ in 0..2000 {
        link.flush();
        if matches!(link.setup(), Setup::Yielded(_)) {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    assert!(matches!(link.setup(), Setup::Yielded(_)), "the YIELD was read");
    assert!(link.connecting(), "its frames wait");
    first.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut all = Vec::new();
    let _ = first.read_to_end(&mut all);
    assert_eq!(all.len(), HELLO_LEN, "nothing but our hello went on the yielded connection");
    l.set_nonblocking(true).unwrap();
    let start = Instant::now();
    let mut second = loop {
        link.flush();
        if let Ok((s, _)) = l.accept() {
            break s;
        }
        assert!(start.elapsed() < CONNECT_WAIT * 3, "no new connection");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(start.elapsed() >= CONNECT_WAIT / 2, "connected again before the survivor could come");
    second.set_nonblocking(false).unwrap();
    second.write_all(&hello(&at, 8).encode(ACCEPT)).unwrap();
    let frame = b"waits for a connection that stays";
    for _ in 0..2000 {
        if !link.connecting() && !link.flush() {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let mut got = vec![0u8; HELLO_LEN + 4 + frame.len()];
    second.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    second.read_exact(&mut got).unwrap();
    assert_eq!(Hello::decode(&got).map(|h| h.1), Some(OPEN));
    assert_eq!(&got[HELLO_LEN + 4..], frame, "the frame went on the new connection");
    assert_eq!(link.epoch(), 8);
}

#[test]
fn a_connection_from_another_ip_than_its_hello_names_is_refused_without_a_key_and_never_sent_on() {
    // A process at 127.0.0.1 names an endpoint at 127.0.0.2: without a job
    // key its hello is not believed (nothing it sends is taken, nothing is
    // parked for that name), and b's frames to 127.0.0.2 go on a
    // connection of b's own, to the real listener there.
    let mut b = ep("127.0.0.1", 2);
    let real = TcpListener::bind("127.0.0.2:0").unwrap();
    let named = real.local_addr().unwrap();
    let mut liar = TcpStream::connect(b.at).unwrap();
    liar.write_all(&hello(&named, 9).encode(OPEN)).unwrap();
    liar.write_all(&1u32.to_le_bytes()).unwrap();
    liar.write_all(b"x").unwrap();
    let mut got = Vec::new();
    for _ in 0..500 {
        b.inbox.pop(|f, _, from, _| got.push((f.to_vec(), from)));
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(got, vec![], "nothing of the liar's was taken");
    assert!(b.inbox.take_hellos().is_empty(), "its hello was not believed");
    assert!(b.inbox.pairs.table().is_empty(), "nothing parked for the name it gave");
    liar.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    let mut answer = [0u8; HELLO_LEN];
    assert_eq!(liar.read(&mut answer).unwrap_or(0), 0, "no answer: closed");
    let lb = Link::open(&named, &b.me, &TcpSend::default(), Some(&b.inbox.pairs())).unwrap();
    lb.send(&[b"for the real one"]).unwrap();
    real.set_nonblocking(false).unwrap();
    let (mut s, from) = real.accept().unwrap();
    assert_eq!(from.ip(), b.at.ip(), "b's connection comes from the IP of b's name");
    let mut h = [0u8; HELLO_LEN];
    s.read_exact(&mut h).unwrap();
    assert_eq!(Hello::decode(&h).map(|h| (h.0.epoch, h.1)), Some((2, OPEN)), "b connected to the real endpoint");
}

/// Frame `i` of the lane tests: 64 KiB, its number first.
fn numbered(i: u32) -> Vec<u8> {
    let mut f = vec![(i % 251) as u8; 64 << 10];
    f[..4].copy_from_slice(&i.to_le_bytes());
    f
}

#[test]
fn frames_whose_order_does_not_matter_go_over_every_lane_and_a_lane_that_ends_closes_the_pair() {
    let mut a = ep("127.0.0.1", 1);
    let mut b = ep("127.0.0.1", 2);
    let tx = TcpSend { lanes: 3, ..Default::default() };
    // A lane of an endpoint we have no connection with belongs to nothing:
    // refused, its frame not taken.
    let mut stray = TcpStream::connect(b.at).unwrap();
    stray.write_all(&a.me.encode(LANE)).unwrap();
    stray.write_all(&1u32.to_le_bytes()).unwrap();
    stray.write_all(b"s").unwrap();
    stray.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut end = [0u8; HELLO_LEN];
    for _ in 0..2000 {
        b.inbox.poll();
        if b.inbox.accepted == 1 && b.inbox.conns.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    assert!(b.inbox.accepted == 1 && b.inbox.conns.is_empty(), "the stray lane was accepted and closed");
    assert!(!b.inbox.pop(|_, _, _, _| ()), "nothing of the stray lane was taken");
    assert_eq!(stray.read(&mut end).unwrap_or(0), 0, "the stray lane got no answer, only its end");
    let la = Link::open(&b.at, &a.me, &tx, Some(&a.inbox.pairs())).unwrap();
    assert!(la.spreads());
    // (The first frame once the link is established opens the lanes.)
    let mut got: Vec<u32> = Vec::new();
    let mut via = std::collections::BTreeSet::new();
    let mut take = |b: &mut Ep, got: &mut Vec<u32>| {
        while b.inbox.pop(|f, _, from, _| {
            assert_eq!(from, a.at, "every connection's frames are a's");
            let i = u32::from_le_bytes(f[..4].try_into().unwrap());
            assert!(f == numbered(i), "frame {i} arrived whole");
            got.push(i);
        }) {
            via.insert(b.inbox.last.unwrap());
        }
    };
    for _ in 0..20_000 {
        b.inbox.poll();
        if !la.connecting() {
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    la.send_spread(&[&numbered(0)]).unwrap();
    for _ in 0..20_000 {
        la.flush();
        a.inbox.poll();
        take(&mut b, &mut got);
        if la.lanes_up() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    assert_eq!(la.lanes_up(), 2, "two lanes besides the link's own connection");
    let n = 300u32;
    let mut sent = 1;
    for _ in 0..20_000 {
        while sent < n {
            match la.send_spread(&[&numbered(sent)]) {
                Ok(()) => sent += 1,
                Err(WireError::Full) => break,
                Err(e) => panic!("a spread send failed: {e}"),
            }
        }
        la.flush();
        a.inbox.poll();
        take(&mut b, &mut got);
        if got.len() == n as usize {
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    got.sort_unstable();
    assert!(got == (0..n).collect::<Vec<_>>(), "b took {} of {n} frames, each once", got.len());
    let lanes: Vec<u64> = b.inbox.conns.iter().filter(|c| c.lane).map(|c| c.id).collect();
    assert_eq!((b.inbox.conns.len(), lanes.len()), (3, 2), "b reads the link's connection and its two lanes");
    assert!(lanes.iter().all(|id| via.contains(id)), "every lane carried frames ({via:?}, lanes {lanes:?})");
    assert!(b.inbox.take_hellos().len() == 1, "a lane is no new endpoint's hello");

    // One lane breaks (a's side shut it): b closes every connection with
    // a, both ways, so a's link learns it too and nothing waits for what
    // the lane may have lost.
    la.break_lane(0);
    for _ in 0..20_000 {
        b.inbox.poll();
        a.inbox.poll();
        if b.inbox.conns.is_empty() && la.closed() {
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    assert!(b.inbox.conns.is_empty(), "b closed the link's connection and the other lane too");
    assert_eq!(la.state(), LinkState::Closed, "a's link learned that its connection ended");
    assert!(matches!(la.send_spread(&[b"late"]), Err(WireError::Closed)));
}

#[test]
fn a_new_link_after_one_with_lanes_ended_is_not_closed_with_the_old_ones() {
    // a's link with lanes is dropped and a new one opened at once, before
    // b reads anything: b reads the old group's ends and the new hello in
    // one poll, and closes only the old group.
    let mut a = ep("127.0.0.1", 1);
    let mut b = ep("127.0.0.1", 2);
    let tx = TcpSend { lanes: 3, ..Default::default() };
    let la = Link::open(&b.at, &a.me, &tx, Some(&a.inbox.pairs())).unwrap();
    for _ in 0..20_000 {
        b.inbox.poll();
        a.inbox.poll();
        if !la.connecting() {
            let _ = la.send_spread(&[b"open the lanes"]);
        }
        if la.lanes_up() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    assert_eq!(la.lanes_up(), 2);
    while b.inbox.pop(|_, _, _, _| ()) {}
    assert_eq!(b.inbox.conns.len(), 3);
    drop(la);
    let la2 = Link::open(&b.at, &a.me, &tx, Some(&a.inbox.pairs())).unwrap();
    la2.send(&[b"new"]).unwrap();
    let mut got = Vec::new();
    for _ in 0..20_000 {
        la2.flush();
        a.inbox.poll();
        b.inbox.pop(|f, _, _, _| got.push(f.to_vec()));
        if !got.is_empty() && b.inbox.conns.len() == 1 {
            break;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    assert_eq!(got, vec![b"new".to_vec()], "the new link's frame arrived");
    assert_eq!(b.inbox.conns.len(), 1, "b reads the new link's connection alone");
    assert!(!b.inbox.conns[0].lane);
    assert!(!la2.closed(), "the new link was not closed with the old group");
}

/// A listener that plays the peer of a link with lanes: answers the
/// link's own connection ACCEPT with epoch 5, and its lane with `kind`
/// and `epoch`; the link, and the peer's end of its own connection.
fn lane_answered(kind: u32, epoch: u32) -> (Link, TcpStream) {
    let peer = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = peer.local_addr().unwrap();
    let me = hello(&"127.0.0.1:1".parse().unwrap(), 1);
    let tx = TcpSend { lanes: 2, ..Default::default() };
    let link = Link::open(&at, &me, &tx, None).unwrap();
    let (mut main, _) = peer.accept().unwrap();
    let mut h = [0u8; HELLO_LEN];
    main.read_exact(&mut h).unwrap();
    assert_eq!(Hello::decode(&h).map(|h| h.1), Some(OPEN));
    main.write_all(&hello(&at, 5).encode(ACCEPT)).unwrap();
    // (The first spread frame opens the lane once the answer is read.)
    let mut frame = Vec::new();
    for _ in 0..2000 {
        if !link.connecting() {
            link.send_spread(&[b"first"]).unwrap();
            break;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    main.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    frame.resize(4 + 5, 0);
    main.read_exact(&mut frame).unwrap();
    assert_eq!(&frame[4..], b"first", "the frame went on the link's own connection (no lane yet)");
    peer.set_nonblocking(false).unwrap();
    let (mut lane, _) = peer.accept().unwrap();
    lane.read_exact(&mut h).unwrap();
    assert_eq!(Hello::decode(&h).map(|h| (h.0, h.1)), Some((me, LANE)), "the lane says it is one, and whose");
    lane.write_all(&hello(&at, epoch).encode(kind)).unwrap();
    for _ in 0..200 {
        link.flush();
        std::thread::sleep(Duration::from_micros(500));
    }
    (link, main)
}

#[test]
fn a_lane_answered_by_another_endpoint_closes_the_link_and_one_refused_is_dropped() {
    // Another epoch answered the lane: the endpoint at the address is not
    // the link's peer any more. The link closes, its own connection too.
    let (link, mut main) = lane_answered(ACCEPT, 6);
    assert!(link.closed(), "the link closed");
    assert!(matches!(link.send_spread(&[b"x"]), Err(WireError::Closed)));
    let mut b = [0u8; 8];
    assert_eq!(main.read(&mut b).unwrap_or(0), 0, "the peer reads the end of the link's connection");
    // Answered otherwise than ACCEPT (YIELD: not an answer a lane takes):
    // the lane goes, having carried nothing, and the link goes on alone.
    let (link, mut main) = lane_answered(YIELD, 5);
    assert!(!link.closed());
    assert_eq!(link.lanes_up(), 0);
    link.send_spread(&[b"alone"]).unwrap();
    let mut frame = [0u8; 9];
    main.read_exact(&mut frame).unwrap();
    assert_eq!(&frame[4..], b"alone", "frames go on the link's own connection");
}
