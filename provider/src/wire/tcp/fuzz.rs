//! A seeded random-stream loop over the accepting side's state machine
//! (hello, then length-prefixed frames): garbage, truncated and oversized
//! input, written in random pieces through a real connection. Bounded by
//! a count (`OXMR_FUZZ_ROUNDS`, default 1000) and reproducible from its
//! seed (`OXMR_FUZZ_SEED`, printed).

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use super::inbox::*;
use super::*;

pub(crate) struct Rng(u64);
impl Rng {
    pub(crate) fn seeded(var: &str, default: u64) -> Rng {
        let seed = std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
        println!("{var}={seed}");
        Rng(seed.max(1))
    }
    pub(crate) fn next(&mut self) -> u64 {
        // (xorshift64*)
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn rounds() -> usize {
    std::env::var("OXMR_FUZZ_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

/// One connection's bytes, the frames the inbox must hand up for them
/// (those after a valid hello and before the first thing that is wrong,
/// after which nothing is taken), whether it all holds together, and
/// whether it is a lane (which needs its endpoint's connection open).
fn stream(r: &mut Rng, me: &Hello) -> (Vec<u8>, Vec<Vec<u8>>, bool, bool) {
    let mut b = Vec::new();
    let mut want = Vec::new();
    let lane = match r.below(10) {
        0 => {
            b.extend(r.bytes(HELLO_LEN)); // (garbage: almost surely not the magic)
            b[0] ^= 0x5a;
            return (b, want, false, false);
        }
        1 => {
            let mut h = *me;
            h.version = VERSION + 1 + r.below(1000) as u32;
            b.extend(h.encode(OPEN));
            return (b, want, false, false);
        }
        2 => {
            let n = r.below(HELLO_LEN as u64) as usize;
            b.extend(&me.encode(OPEN)[..n]);
            return (b, want, false, false);
        }
        // (A link's own connection, or one of its lanes: frames alike.)
        _ => {
            let kind = if r.below(2) == 0 { OPEN } else { LANE };
            b.extend(me.encode(kind));
            kind == LANE
        }
    };
    for _ in 0..r.below(6) {
        match r.below(8) {
            0 => {
                // Oversized: the connection closes, nothing after counts.
                let n = TCP_MAX_FRAME as u64 + 1 + r.below(u32::MAX as u64 - TCP_MAX_FRAME as u64);
                b.extend((n as u32).to_le_bytes());
                let k = r.below(64) as usize;
                b.extend(r.bytes(k));
                return (b, want, false, lane);
            }
            1 => {
                // Truncated: a length and fewer bytes, then the end.
                let n = 1 + r.below(FRAME_FLOOR as u64) as usize;
                b.extend((n as u32).to_le_bytes());
                let k = r.below(n as u64) as usize;
                b.extend(r.bytes(k));
                return (b, want, false, lane);
            }
            _ => {
                let n = if r.below(4) == 0 { FRAME_FLOOR } else { r.below(FRAME_FLOOR as u64 + 1) as usize };
                let f = r.bytes(n);
                b.extend((n as u32).to_le_bytes());
                b.extend(&f);
                want.push(f);
            }
        }
    }
    (b, want, true, lane)
}

#[test]
fn random_streams_never_panic_and_only_valid_frames_are_taken() {
    let mut r = Rng::seeded("OXMR_FUZZ_SEED", 0x0c0f_fee5);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = l.local_addr().unwrap();
    let mut inbox =
        Inbox::new(l, tests_hello(&at, 3), std::sync::Arc::new(crate::sys::Epoll::new().unwrap()), Default::default())
            .unwrap();
    let peer: SocketAddr = "127.0.0.1:3".parse().unwrap();
    let me = tests_hello(&peer, 4);
    for round in 0..rounds() {
        let (bytes, want, sound, lane) = stream(&mut r, &me);
        let accepted = inbox.accepted;
        // (A lane belongs to its endpoint's connection: open it first.)
        let main = lane.then(|| {
            let mut m = TcpStream::connect(at).unwrap();
            m.write_all(&me.encode(OPEN)).unwrap();
            for _ in 0..2000 {
                inbox.poll();
                if inbox.conns.iter().any(|c| c.peer.is_some()) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
            assert!(inbox.conns.iter().any(|c| c.peer == Some(peer)), "round {round}: the lane's connection is up");
            m
        });
        let mut s = TcpStream::connect(at).unwrap();
        let mut at_byte = 0;
        let mut got: Vec<Vec<u8>> = Vec::new();
        // Written in random pieces, polled in between.
        while at_byte < bytes.len() {
            let n = (1 + r.below(4096) as usize).min(bytes.len() - at_byte);
            if s.write_all(&bytes[at_byte..at_byte + n]).is_err() {
                break; // (closed by the inbox already: what is wrong was seen)
            }
            at_byte += n;
            inbox.poll();
            while inbox.pop(|f, _, from, _| {
                assert_eq!(from, peer, "round {round}: a frame with another sender");
                got.push(f.to_vec())
            }) {}
        }
        let _ = s.shutdown(std::net::Shutdown::Write);
        // (A lane's end closes its endpoint's connection too.)
        let conns = if main.is_some() { 2 } else { 1 };
        let mut left = 2000;
        while (inbox.accepted < accepted + conns || !inbox.conns.is_empty()) && left > 0 {
            inbox.poll();
            while inbox.pop(|f, _, _, _| got.push(f.to_vec())) {}
            left -= 1;
            std::thread::sleep(Duration::from_micros(50));
        }
        while inbox.pop(|f, _, _, _| got.push(f.to_vec())) {}
        assert!(
            inbox.conns.is_empty() && inbox.accepted == accepted + conns,
            "round {round}: a connection that ended is still kept"
        );
        assert_eq!(got.len(), want.len(), "round {round} (sound {sound}): frames taken");
        assert!(got == want, "round {round}: the frames taken are not the ones sent");
        let _ = inbox.take_hellos();
    }
    assert!(inbox.frames.is_empty());
}
