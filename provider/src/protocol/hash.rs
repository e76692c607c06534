//! A small, fast hasher for the engine's own tables (peer addresses,
//! operation ids). Their keys are not chosen by an attacker who could
//! aim for collisions: they are our own counters and the addresses of
//! endpoints the application talks to, so SipHash's protection buys
//! nothing on the per-message path and costs tens of nanoseconds.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate hashing of whole words (the scheme of rustc's FxHash).
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        // hashbrown takes its tag from the top bits: fold the low ones up.
        self.0 ^ (self.0 >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            // (Byte by byte: a copy of a variable-length tail would be a
            // memcpy call, longer than the hash itself.)
            self.add(rest.iter().rev().fold(0u64, |w, &b| w << 8 | b as u64));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    fn write_u16(&mut self, i: u16) {
        self.add(i as u64);
    }
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
}

/// A HashMap with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn distinct_addresses_spread() {
        let mut m: FastMap<SocketAddr, u16> = FastMap::default();
        for p in 0..2000u16 {
            let a: SocketAddr = format!("127.0.0.1:{}", 1000 + p).parse().unwrap();
            m.insert(a, p);
        }
        for p in 0..2000u16 {
            let a: SocketAddr = format!("127.0.0.1:{}", 1000 + p).parse().unwrap();
            assert_eq!(m.get(&a), Some(&p));
        }
        // The hashes of neighbouring ports differ in their top 7 bits (the
        // tags hashbrown compares) for most pairs: no clustering.
        let tag = |p: u16| {
            let mut h = FastHasher::default();
            std::hash::Hash::hash(&format!("127.0.0.1:{p}").parse::<SocketAddr>().unwrap(), &mut h);
            h.finish() >> 57
        };
        let same = (0..1000u16).filter(|&p| tag(p) == tag(p + 1)).count();
        assert!(same < 100, "{same} of 1000 neighbours share a tag");
    }
}
