//! AES-128 encryption for the registry's key permutation (`registry`'s
//! module doc says why AES there), from RustCrypto's `aes` crate, which
//! uses the CPU's AES instructions (AES-NI). Where the CPU has none (or
//! off x86-64), [`Aes128::new`] answers None and the registry keeps
//! SipHash (the crate's software AES would be slower than that).

use aes::cipher::{BlockEncrypt, KeyInit};

/// An AES-128 key, expanded.
#[derive(Clone)]
pub struct Aes128(aes::Aes128);

/// The 16-byte block whose bytes are `lo`'s then `hi`'s, little-endian.
fn block(lo: u64, hi: u64) -> aes::Block {
    let mut b = aes::Block::default();
    b[..8].copy_from_slice(&lo.to_le_bytes());
    b[8..].copy_from_slice(&hi.to_le_bytes());
    b
}

fn low(b: &aes::Block) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

impl Aes128 {
    /// The key whose 16 bytes are `k0`'s then `k1`'s, little-endian; None
    /// where the CPU has no AES instructions.
    pub fn new(k0: u64, k1: u64) -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        let fast = std::is_x86_feature_detected!("aes");
        #[cfg(not(target_arch = "x86_64"))]
        let fast = false;
        fast.then(|| Aes128(aes::Aes128::new(&block(k0, k1))))
    }

    /// The encryption of the block whose bytes are `lo`'s then `hi`'s
    /// (little-endian), as (low 8 bytes, high 8 bytes).
    #[inline]
    pub fn encrypt(&self, lo: u64, hi: u64) -> (u64, u64) {
        let mut b = block(lo, hi);
        self.0.encrypt_block(&mut b);
        (low(&b), u64::from_le_bytes(b[8..].try_into().expect("8 bytes")))
    }

    /// The low 8 bytes of the encryptions of the blocks (`lo[i]`, `hi`),
    /// computed side by side: one block's 10 rounds are a chain of
    /// dependent instructions, and the crate interleaves 8 blocks where
    /// one would leave the AES unit idle most of the time.
    #[inline]
    pub fn encrypt_lo<const N: usize>(&self, lo: &[u64; N], hi: u64) -> [u64; N] {
        let mut blocks = lo.map(|l| block(l, hi));
        self.0.encrypt_blocks(&mut blocks);
        blocks.map(|b| low(&b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_fips_197_appendix_c1() {
        // Key 00 01 .. 0f, plaintext 00 11 22 .. ff, ciphertext
        // 69 c4 e0 d8 6a 7b 04 30 d8 cd b7 80 70 b4 c5 5a.
        let Some(a) = Aes128::new(0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908) else {
            eprintln!("no AES instructions here: nothing to check");
            return;
        };
        let (lo, hi) = a.encrypt(0x7766_5544_3322_1100, 0xffee_ddcc_bbaa_9988);
        assert_eq!(lo.to_le_bytes(), [0x69, 0xc4, 0xe0, 0xd8, 0x6a, 0x7b, 0x04, 0x30]);
        assert_eq!(hi.to_le_bytes(), [0xd8, 0xcd, 0xb7, 0x80, 0x70, 0xb4, 0xc5, 0x5a]);
        // Side by side, each block as alone.
        let many = a.encrypt_lo(&[1, 0x7766_5544_3322_1100, 3], 0xffee_ddcc_bbaa_9988);
        assert_eq!(many[1], lo);
        assert_eq!(many[0], a.encrypt(1, 0xffee_ddcc_bbaa_9988).0);
        assert_eq!(many[2], a.encrypt(3, 0xffee_ddcc_bbaa_9988).0);
    }
}
