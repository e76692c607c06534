//! AES-128 encryption of one block with the CPU's AES instructions
//! (AES-NI), for the registry's key permutation (`registry`'s module doc
//! says why AES there). Where the CPU has none (or off x86-64), [`Aes128::new`]
//! answers None and the registry keeps SipHash.
//!
//! The only unsafe here is calling the `#[target_feature(enable = "aes")]`
//! functions, which is sound once the CPU is known to have the feature: an
//! [`Aes128`] is only made after `is_x86_feature_detected!("aes")` said so.

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::x86_64::{
        __m128i, _mm_aesenc_si128, _mm_aesenclast_si128, _mm_aeskeygenassist_si128, _mm_cvtsi128_si64, _mm_set_epi64x,
        _mm_setzero_si128, _mm_shuffle_epi32, _mm_slli_si128, _mm_unpackhi_epi64, _mm_xor_si128,
    };

    /// An expanded AES-128 key (FIPS-197: the 11 round keys).
    #[derive(Clone, Copy)]
    pub struct Aes128 {
        rk: [__m128i; 11],
    }

    impl Aes128 {
        /// The key whose 16 bytes are `k0`'s then `k1`'s, little-endian;
        /// None where the CPU has no AES instructions.
        pub fn new(k0: u64, k1: u64) -> Option<Self> {
            if !std::is_x86_feature_detected!("aes") {
                return None;
            }
            // SAFETY: the CPU has AES-NI (checked just above); SSE2 is part
            // of x86-64.
            Some(Aes128 { rk: unsafe { expand(k0, k1) } })
        }

        /// The encryption of the block whose bytes are `lo`'s then `hi`'s
        /// (little-endian), as (low 8 bytes, high 8 bytes).
        #[inline]
        pub fn encrypt(&self, lo: u64, hi: u64) -> (u64, u64) {
            // SAFETY: an `Aes128` exists only where `new` found AES-NI.
            unsafe { encrypt(&self.rk, lo, hi) }
        }

        /// The low 8 bytes of the encryptions of the blocks (`lo[i]`,
        /// `hi`), computed side by side: one block's 10 rounds are a chain
        /// of dependent instructions, and N chains keep the AES units busy
        /// where one would leave them idle most of the time.
        #[inline]
        pub fn encrypt_lo<const N: usize>(&self, lo: &[u64; N], hi: u64) -> [u64; N] {
            // SAFETY: an `Aes128` exists only where `new` found AES-NI.
            unsafe { encrypt_lo(&self.rk, lo, hi) }
        }
    }

    #[target_feature(enable = "aes")]
    fn expand(k0: u64, k1: u64) -> [__m128i; 11] {
        let mut k = _mm_set_epi64x(k1 as i64, k0 as i64);
        let mut rk = [_mm_setzero_si128(); 11];
        rk[0] = k;
        // (The key schedule of FIPS-197 5.2, four words at a time: each
        // round key is the previous one prefix-XORed with itself, XOR
        // SubWord(RotWord(last word)) ^ Rcon, which aeskeygenassist makes.)
        macro_rules! next {
            ($i:expr, $rcon:expr) => {{
                let t = _mm_shuffle_epi32::<0xff>(_mm_aeskeygenassist_si128::<$rcon>(k));
                k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
                k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
                k = _mm_xor_si128(k, _mm_slli_si128::<4>(k));
                k = _mm_xor_si128(k, t);
                rk[$i] = k;
            }};
        }
        next!(1, 0x01);
        next!(2, 0x02);
        next!(3, 0x04);
        next!(4, 0x08);
        next!(5, 0x10);
        next!(6, 0x20);
        next!(7, 0x40);
        next!(8, 0x80);
        next!(9, 0x1b);
        next!(10, 0x36);
        rk
    }

    #[target_feature(enable = "aes")]
    fn encrypt(rk: &[__m128i; 11], lo: u64, hi: u64) -> (u64, u64) {
        let mut b = _mm_xor_si128(_mm_set_epi64x(hi as i64, lo as i64), rk[0]);
        for k in &rk[1..10] {
            b = _mm_aesenc_si128(b, *k);
        }
        b = _mm_aesenclast_si128(b, rk[10]);
        (_mm_cvtsi128_si64(b) as u64, _mm_cvtsi128_si64(_mm_unpackhi_epi64(b, b)) as u64)
    }

    #[target_feature(enable = "aes")]
    fn encrypt_lo<const N: usize>(rk: &[__m128i; 11], lo: &[u64; N], hi: u64) -> [u64; N] {
        let mut b = lo.map(|x| _mm_xor_si128(_mm_set_epi64x(hi as i64, x as i64), rk[0]));
        for k in &rk[1..10] {
            for x in b.iter_mut() {
                *x = _mm_aesenc_si128(*x, *k);
            }
        }
        b.map(|x| _mm_cvtsi128_si64(_mm_aesenclast_si128(x, rk[10])) as u64)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod imp {
    /// No AES instructions are used off x86-64: never made.
    #[derive(Clone, Copy)]
    pub enum Aes128 {}

    impl Aes128 {
        pub fn new(_k0: u64, _k1: u64) -> Option<Self> {
            None
        }

        pub fn encrypt(&self, _lo: u64, _hi: u64) -> (u64, u64) {
            match *self {}
        }

        pub fn encrypt_lo<const N: usize>(&self, _lo: &[u64; N], _hi: u64) -> [u64; N] {
            match *self {}
        }
    }
}

pub use imp::Aes128;

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
