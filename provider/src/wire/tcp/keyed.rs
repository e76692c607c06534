//! The job key on the TCP wire: endpoints that hold the same key connect
//! (whoever opens, lanes too) and trade frames; a raw peer without it, or
//! one with another key, gets no frame taken, is refused, and costs the
//! endpoint its connection only.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use super::inbox::*;
use super::link::*;
use super::*;
use crate::auth::JobKey;

fn key(s: &str) -> Option<JobKey> {
    Some(JobKey::new(s.as_bytes()).unwrap())
}

struct Ep {
    at: SocketAddr,
    me: Hello,
    inbox: Inbox,
    tx: TcpSend,
}

fn ep(epoch: u32, k: Option<JobKey>) -> Ep {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let me = tests_hello(&at, epoch);
    let wake = std::sync::Arc::new(crate::sys::Epoll::new().unwrap());
    let inbox = Inbox::new(l, me, wake, Default::default()).unwrap().with_key(k.clone());
    Ep { at, me, inbox, tx: TcpSend { key: k, lanes: 2, ..Default::default() } }
}

impl Ep {
    fn link(&self, to: &Ep) -> Link {
        Link::open(&to.at, &self.me, &self.tx, Some(&self.inbox.pairs())).unwrap()
    }
}

/// Send `n` 4-byte frames each way, polling both, until both took them
/// all or it is clear they will not: what each took.
fn trade(a: &mut Ep, la: &Link, b: &mut Ep, lb: &Link, n: u32) -> [Vec<u32>; 2] {
    let mut got: [Vec<u32>; 2] = Default::default();
    let mut sent = [0u32; 2];
    for _ in 0..5000 {
        for (k, l) in [la, lb].into_iter().enumerate() {
            while sent[k] < n && l.send(&[&sent[k].to_le_bytes()]).is_ok() {
                sent[k] += 1;
            }
            l.flush();
        }
        for (k, e) in [&mut *a, &mut *b].into_iter().enumerate() {
            while e.inbox.pop(|f, _, _, _| got[k].push(u32::from_le_bytes(f.try_into().unwrap()))) {}
        }
        if got[0].len() == n as usize && got[1].len() == n as usize {
            break;
        }
        if la.closed() || lb.closed() {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    got
}

#[test]
fn endpoints_with_the_same_key_connect_whoever_opens_and_trade_frames() {
    for both_open in [false, true] {
        let mut a = ep(1, key("the job's key, 32 bytes long...."));
        let mut b = ep(2, key("the job's key, 32 bytes long...."));
        let la = a.link(&b);
        if !both_open {
            // (b takes a's connection, proven, before it links back.)
            la.send(&[&0u32.to_le_bytes()]).unwrap();
            let mut first = Vec::new();
            for _ in 0..2000 {
                la.flush();
                while b.inbox.pop(|f, _, _, _| first.push(f.to_vec())) {}
                if !first.is_empty() {
                    break;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            assert_eq!(first, vec![0u32.to_le_bytes().to_vec()]);
        }
        let lb = b.link(&a);
        let n = if both_open { 50 } else { 49 };
        let got = trade(&mut a, &la, &mut b, &lb, n);
        assert_eq!(got, [(0..n).collect::<Vec<u32>>(), (0..n).collect()], "both_open {both_open}");
        assert!(!la.closed() && !lb.closed());
    }
}

#[test]
fn lanes_of_keyed_links_prove_the_key_too_and_carry_spread_frames() {
    let mut a = ep(1, key("0123456789abcdef0123456789abcdef"));
    let mut b = ep(2, key("0123456789abcdef0123456789abcdef"));
    let la = a.link(&b);
    let lb = b.link(&a);
    let got = trade(&mut a, &la, &mut b, &lb, 1);
    assert_eq!(got[1], vec![0], "the link is up");
    let mut sent = 0;
    let mut taken = 0;
    for _ in 0..5000 {
        while sent < 40 && la.send_spread(&[&[7u8; 64 << 10]]).is_ok() {
            sent += 1;
        }
        la.flush();
        lb.flush();
        while b.inbox.pop(|f, _, _, _| {
            assert_eq!(f, &[7u8; 64 << 10][..]);
            taken += 1
        }) {}
        a.inbox.poll();
        if taken == 40 && la.lanes_up() == 1 {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(taken, 40);
    assert_eq!(la.lanes_up(), 1, "the lane came up after its proof");
    assert!(!la.closed());
}

#[test]
fn endpoints_with_different_keys_or_one_without_a_key_never_take_a_frame() {
    for (ka, kb) in [
        (key("the first job's key, 32 bytes.."), key("the other job's key, 32 bytes..")),
        (key("the first job's key, 32 bytes.."), None),
        (None, key("the first job's key, 32 bytes..")),
    ] {
        let mut a = ep(1, ka.clone());
        let mut b = ep(2, kb.clone());
        let la = a.link(&b);
        let got = {
            let lb = b.link(&a);
            trade(&mut a, &la, &mut b, &lb, 5)
        };
        assert_eq!(got, [Vec::<u32>::new(), Vec::new()], "{:?} / {:?}: no frame crossed", ka, kb);
        for _ in 0..2000 {
            la.flush();
            a.inbox.poll();
            b.inbox.poll();
            if la.closed() {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(la.closed(), "{:?} / {:?}: the link failed (its sends fail, nothing waits)", ka, kb);
    }
}

/// A raw peer (not oxmr): connects to `at` and writes `bytes`; what it
/// reads back within a short while.
fn raw(at: SocketAddr, bytes: &[u8], inbox: &mut Inbox) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(at).unwrap();
    s.write_all(bytes).unwrap();
    s.set_nonblocking(true).unwrap();
    let mut back = Vec::new();
    for _ in 0..500 {
        inbox.poll();
        let mut b = [0u8; 512];
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(n) => back.extend_from_slice(&b[..n]),
            Err(_) => {}
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    (s, back)
}

#[test]
fn a_raw_peer_without_the_key_gets_no_frame_taken_whatever_it_sends() {
    let mut a = ep(1, key("0123456789abcdef0123456789abcdef"));
    let claimed: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let frame = |b: &[u8]| {
        let mut f = (b.len() as u32).to_le_bytes().to_vec();
        f.extend_from_slice(b);
        f
    };
    // 1. An unkeyed hello, then frames: refused; its answer says a key is
    //    needed (our hello, keyed) and the connection closes.
    let mut bytes = tests_hello(&claimed, 3).encode(OPEN).to_vec();
    bytes.extend(frame(b"injected"));
    let (_s, back) = raw(a.at, &bytes, &mut a.inbox);
    let g = Hello::greeting(&back).expect("our hello came back");
    assert!(g.keyed && g.kind == ACCEPT, "it says a key is needed");
    assert_eq!((g.hello.epoch, g.hello.pid), (0, 0), "and tells the stranger nothing of us");
    assert_eq!(back.len(), HELLO_LEN, "and nothing more: closed");
    // 2. A keyed hello, then a forged proof (zeros) and frames.
    let mut bytes = tests_hello(&claimed, 3).encode_with(OPEN, true, &[1; PROOF_LEN], &[0; PROOF_LEN]).to_vec();
    bytes.extend([0u8; PROOF_LEN]);
    bytes.extend(frame(b"injected"));
    let (_s, back) = raw(a.at, &bytes, &mut a.inbox);
    let g = Hello::greeting(&back).expect("our challenge came back");
    assert_eq!(g.kind, CHALLENGE);
    assert_eq!((g.hello.epoch, g.hello.pid), (0, 0), "a challenge names no epoch or pid");
    assert_eq!(back.len(), HELLO_LEN, "no answer after the bad proof: closed");
    // 3. Frames straight after a keyed hello (no proof at all).
    let mut bytes = tests_hello(&claimed, 3).encode_with(OPEN, true, &[2; PROOF_LEN], &[0; PROOF_LEN]).to_vec();
    for _ in 0..20 {
        bytes.extend(frame(b"injected"));
    }
    let (_s, _) = raw(a.at, &bytes, &mut a.inbox);
    // 4. A replayed proof: a proof made for another challenge does not
    //    verify against a fresh one (the acceptor's nonce differs).
    let mut taken = 0;
    for _ in 0..100 {
        a.inbox.poll();
        while a.inbox.pop(|_, _, _, _| taken += 1) {}
    }
    assert_eq!(taken, 0, "no frame of a peer without the key was taken");
    assert!(a.inbox.take_hellos().is_empty(), "no hello was believed");
    assert!(a.inbox.pairs.table().is_empty(), "nothing parked or adopted for the claimed name");
    a.inbox.poll();
    assert!(a.inbox.conns.is_empty(), "every stranger's connection is closed");
}

#[test]
fn a_proof_for_one_challenge_does_not_open_another_connection() {
    // A stranger that watched a real handshake replays the opener's hello
    // and proof on a connection of its own: the acceptor's fresh nonce
    // makes the old proof worthless.
    let k = key("0123456789abcdef0123456789abcdef").unwrap();
    let mut a = ep(1, Some(k.clone()));
    let peer: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let open = tests_hello(&peer, 3).encode_with(OPEN, true, &[5; PROOF_LEN], &[0; PROOF_LEN]);
    // The real opener, who holds the key, answers the first challenge.
    let (mut s, back) = raw(a.at, &open, &mut a.inbox);
    let mut ch = [0u8; HELLO_LEN];
    ch.copy_from_slice(&back[..HELLO_LEN]);
    let proof = k.tag(PROOF_OPEN, &[&transcript(&open, &ch)]);
    s.set_nonblocking(false).unwrap();
    s.write_all(&proof).unwrap();
    let mut answered = false;
    for _ in 0..500 {
        a.inbox.poll();
        if !a.inbox.take_hellos().is_empty() {
            answered = true;
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert!(answered, "the key holder's proof is taken");
    // The replay.
    let mut bytes = open.to_vec();
    bytes.extend_from_slice(&proof);
    let (_r, back) = raw(a.at, &bytes, &mut a.inbox);
    assert_eq!(back.len(), HELLO_LEN, "a challenge, then the end: the replayed proof fails");
    assert!(a.inbox.take_hellos().is_empty(), "the replay was not believed");
}
