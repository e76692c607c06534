//! The job key: the shared secret that proves a peer belongs to this job
//! (docs/security.md).
//!
//! A key comes from libfabric's `auth_key` (`domain_attr`, `ep_attr`), or
//! from `FI_OXMR_AUTH_KEY` / `FI_OXMR_AUTH_KEY_FILE` when the application
//! gives none. The wires use it for one thing: a mutual challenge-response
//! when a connection opens (HMAC-SHA256 from RustCrypto's `hmac` and `sha2`
//! crates over both sides' hellos and fresh nonces; no crypto is written
//! here). Nothing else about it is secret-dependent: the key's bytes never
//! leave this module, and its `Debug` prints only its length.

use std::fmt;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The shortest key oxmr takes: 128 bits, so a key cannot be guessed
/// faster than the MAC broken.
pub(crate) const KEY_MIN: usize = 16;
/// The longest (a sanity bound on what an application or a file hands us).
pub(crate) const KEY_MAX: usize = 4096;
/// Bytes of a nonce and of a proof (an HMAC-SHA256 tag).
pub(crate) const TAG_LEN: usize = 32;

/// A job key (see the module header).
#[derive(Clone)]
pub struct JobKey(Arc<[u8]>);

impl fmt::Debug for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "JobKey({} bytes)", self.0.len())
    }
}

impl PartialEq for JobKey {
    /// Whether two keys are the same bytes (configuration: which key an
    /// endpoint uses; not a check against a peer's, which is `verify`).
    fn eq(&self, other: &JobKey) -> bool {
        self.0 == other.0
    }
}

impl Eq for JobKey {}

impl JobKey {
    /// A key of `bytes`: at least `KEY_MIN` and at most `KEY_MAX` bytes
    /// (else what is wrong, for the caller's log line).
    pub fn new(bytes: &[u8]) -> Result<JobKey, String> {
        if bytes.len() < KEY_MIN {
            return Err(format!(
                "a job key of {} bytes is too short: it must have at least {KEY_MIN} (use 32 random bytes, e.g. `openssl rand -hex 32`)",
                bytes.len()
            ));
        }
        if bytes.len() > KEY_MAX {
            return Err(format!("a job key of {} bytes is longer than the {KEY_MAX} oxmr takes", bytes.len()));
        }
        Ok(JobKey(Arc::from(bytes)))
    }

    /// HMAC-SHA256 under the key of `label` then each of `parts`.
    pub fn tag(&self, label: &[u8], parts: &[&[u8]]) -> [u8; TAG_LEN] {
        self.mac(label, parts).finalize().into_bytes().into()
    }

    /// Whether `tag` is `tag(label, parts)` (compared in constant time).
    pub fn verify(&self, label: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
        self.mac(label, parts).verify_slice(tag).is_ok()
    }

    fn mac(&self, label: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
        // (HMAC takes a key of any length: longer ones are hashed first.)
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        m.update(&(label.len() as u32).to_le_bytes());
        m.update(label);
        for p in parts {
            m.update(&(p.len() as u32).to_le_bytes());
            m.update(p);
        }
        m
    }
}

/// A fresh nonce from the kernel, or None if it has none to give (then no
/// connection is opened or answered: a predictable nonce would let an old
/// proof be replayed).
pub fn nonce() -> Option<[u8; TAG_LEN]> {
    let mut b = [0u8; TAG_LEN];
    crate::sys::random_bytes(&mut b).ok().map(|_| b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_shorter_than_sixteen_bytes_are_refused() {
        assert!(JobKey::new(b"fifteen bytes..").is_err());
        assert!(JobKey::new(b"sixteen bytes...").is_ok());
        assert!(JobKey::new(&vec![7u8; KEY_MAX + 1]).is_err());
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231_test_case_2() {
        // RFC 4231 4.3: key "Jefe", data "what do ya want for nothing?".
        // (Our framing adds lengths, so check the primitive itself.)
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        m.update(b"what do ya want for nothing?");
        let want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        let got: String = m.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_tag_verifies_under_its_key_label_and_parts_only() {
        let k = JobKey::new(b"0123456789abcdef").unwrap();
        let other = JobKey::new(b"0123456789abcdeX").unwrap();
        let t = k.tag(b"open", &[b"a", b"bc"]);
        assert!(k.verify(b"open", &[b"a", b"bc"], &t));
        assert!(!other.verify(b"open", &[b"a", b"bc"], &t), "another key");
        assert!(!k.verify(b"accept", &[b"a", b"bc"], &t), "another label");
        assert!(!k.verify(b"open", &[b"ab", b"c"], &t), "the same bytes split otherwise");
        assert!(!k.verify(b"open", &[b"a", b"bc"], &t[..31]), "a short tag");
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }
}
