//! oxmr's wire protocol: the message header every wire carries, and the
//! endpoint engine that turns libfabric operations into messages and
//! messages into completions (matching, rendezvous, RMA at the target);
//! and the FI_EP_MSG connection handshake (`conn`, over `wire::cm`).
//!
//! The engine talks to a wire through `wire::Link` (and, for the
//! shared-memory offloads, the shm queue itself); the TCP wire will carry
//! the same messages. See docs/wire.md for the format.
//!
//! Versions: every header carries the protocol version ([`PROTO_VERSION`],
//! the high nibble of byte 26), and a header of another version does not
//! decode ([`Hdr::decode`]; [`Hdr::version_of`] says which it was, for the
//! log line). A wire also refuses a peer of another wire version when the
//! link opens (`wire::OpenError::Version`).

pub mod av;
pub mod conn;
pub mod engine;
pub mod hash;
pub mod inbox;

/// The version of the message format this build speaks (1..=15). Bump it
/// with every change to the header or to a message's meaning.
/// (2: ATOMIC messages and ACKs that carry data: a fetch's old values, a
/// small read's bytes; a version-1 peer would drop the one and complete a
/// read without its data on the other.)
pub(crate) const PROTO_VERSION: u8 = 2;

/// Bytes of the fixed part of a message header.
pub(crate) const HDR_BASE: usize = 32;
/// The most bytes a message header takes (every optional field, IPv6).
pub(crate) const HDR_MAX: usize = HDR_BASE + 5 * 8 + 24;

/// Message kinds.
pub mod op {
    /// Payload inline (send / tagged send).
    pub(crate) const EAGER: u8 = 1;
    /// Request to send: payload stays in the sender; iovs follow.
    pub(crate) const RTS: u8 = 2;
    /// Answer to RTS, RMA, or an eager send that asked for one.
    pub(crate) const ACK: u8 = 3;
    /// RMA write; the initiator's iovs follow (the target copies).
    pub(crate) const WRITE: u8 = 4;
    /// RMA write with the data inline.
    pub(crate) const WRITE_INLINE: u8 = 5;
    /// RMA read; the initiator's destination iovs follow.
    pub(crate) const READ: u8 = 6;
    /// "I cannot reach your memory (process_vm_* said EFAULT): push it":
    /// sent to the owner of the data, naming its operation (msg_id) and the
    /// number of bytes wanted (len).
    pub(crate) const PULL: u8 = 7;
    /// A chunk of a pushed transfer: msg_id, offset in `rma_addr`, bytes
    /// inline.
    pub(crate) const DATA: u8 = 8;
    /// "Help copy": sent by the owner of a shared copy (receiver of an
    /// RTS, target of an RMA) to the peer whose operation it is: msg_id is
    /// the peer's operation, rma_addr the job slot in the owner's region,
    /// tag the job's generation (see shm::jobs).
    pub(crate) const CTS: u8 = 9;
    /// Successful answers to several RMA writes at once (a run the target
    /// copied together): `iov_count` operation ids follow, 8 bytes each.
    pub(crate) const ACKS: u8 = 10;
    /// An atomic (fi_atomic(3)) on the target's memory at `rma_addr` under
    /// `rma_key`: `len` bytes of elements, the call, datatype and
    /// operation in `tag` ([`super::AtomicWhat`]), then the operands
    /// inline (`len` bytes, none for FI_ATOMIC_READ) and the compare
    /// operands (`len` bytes, compare calls). Answered by an ACK that
    /// carries the old values (`len` bytes) for fetch and compare calls.
    pub(crate) const ATOMIC: u8 = 11;
}

/// What an ATOMIC message asks, packed in its header's `tag`: the
/// operation (bits 0..8), the datatype (8..16) and the call (16..24).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicWhat {
    pub op: u32,
    pub dt: u32,
    pub call: crate::mr::atomic::Call,
}

impl AtomicWhat {
    pub fn pack(&self) -> u64 {
        (self.op as u64 & 0xff) | (self.dt as u64 & 0xff) << 8 | (self.call as u64) << 16
    }

    /// None: a call that does not exist, or bits set past the call.
    pub fn unpack(tag: u64) -> Option<AtomicWhat> {
        if tag >> 24 != 0 {
            return None;
        }
        let call = crate::mr::atomic::Call::from_wire((tag >> 16) as u8)?;
        Some(AtomicWhat { op: (tag & 0xff) as u32, dt: (tag >> 8 & 0xff) as u32, call })
    }

    /// How many operand arrays of `len` bytes its message carries.
    pub fn operands(&self) -> usize {
        crate::mr::atomic::has_operand(self.op) as usize + (self.call == crate::mr::atomic::Call::Compare) as usize
    }
}

/// Header flags.
pub mod flag {
    pub(crate) const TAGGED: u8 = 1;
    pub(crate) const CQ_DATA: u8 = 2;
    pub(crate) const NEED_ACK: u8 = 4;
    /// RTS: the sender offers a job in its own region (`rma_addr` the
    /// slot, `rma_key` the generation; docs/wire-shm.md).
    pub(crate) const SJOB: u8 = 8;
    /// CTS: the job covers several of our operations, their ids in the
    /// body (`iov_count` of them), each one's first half in the first
    /// chunk (docs/wire-shm.md, "Jobs over several operations").
    pub(crate) const RUN: u8 = 16;
    /// WRITE over a wire that cannot reach the initiator's memory (TCP):
    /// its data follows at once in DATA frames; the target asks for it
    /// with no PULL (docs/wire-tcp.md, "Streamed writes").
    pub(crate) const STREAM: u8 = 32;
}

/// The fixed header (little-endian on the wire).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hdr {
    pub op: u8,
    pub flags: u8,
    /// Reserved (0).
    pub src_slot: u16,
    /// Number of (addr, len) pairs after the header.
    pub iov_count: u16,
    /// Total payload bytes of the message (inline or described by iovs).
    pub len: u64,
    pub tag: u64,
    /// Remote CQ data.
    pub data: u64,
    /// The initiator's operation id (echoed by ACK).
    pub msg_id: u64,
    pub rma_addr: u64,
    pub rma_key: u64,
    /// ACK status: 0 or a positive FI_E* code.
    pub status: u32,
    /// The sender's pid (for process_vm_readv/writev).
    pub pid: u32,
    /// The sender's endpoint name (sockaddr, zero-padded): every message
    /// says who sent it, so nothing depends on state the sender may have
    /// released by the time the message is read.
    pub name: [u8; 28],
}

/// Optional header fields, present when their bit is set (in this order).
mod opt {
    pub(super) const DATA: u8 = 1;
    pub(super) const MSG_ID: u8 = 2;
    pub(super) const RMA_ADDR: u8 = 4;
    pub(super) const RMA_KEY: u8 = 8;
    pub(super) const STATUS: u8 = 16;
}

const AF_INET: u16 = libc::AF_INET as u16;
const AF_INET6: u16 = libc::AF_INET6 as u16;

impl Hdr {
    /// Encode into `b`; returns the header's length. The fixed part
    /// (op, flags, iov count, pid, len, tag, the sender's port, family and
    /// IPv4 address) is 32 bytes; fields that are zero are left out
    /// (a bit each), and an IPv6 sender adds 24 bytes. An eager send from
    /// an IPv4 endpoint thus has a 32-byte header, and with the queue
    /// cell's 8 bytes and up to 24 bytes of payload fits one cache line.
    #[inline(always)]
    pub fn encode(&self, b: &mut [u8; HDR_MAX]) -> usize {
        b[0] = self.op;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.iov_count.to_le_bytes());
        b[4..8].copy_from_slice(&self.pid.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.tag.to_le_bytes());
        // The sender's sockaddr: family (host order), port (network order),
        // then sin_addr, or sin6_flowinfo, sin6_addr, sin6_scope_id.
        let n = &self.name;
        let fam = u16::from_ne_bytes([n[0], n[1]]);
        b[24..26].copy_from_slice(&n[2..4]);
        b[26] = PROTO_VERSION << 4 | if fam == AF_INET6 { 6 } else { 4 };
        b[28..32].copy_from_slice(&n[4..8]);
        let mut at = HDR_BASE;
        let mut put = |v: &[u8], at: &mut usize| {
            b[*at..*at + v.len()].copy_from_slice(v);
            *at += v.len();
        };
        let mut present = 0u8;
        // (Most frames carry none of the optional fields: an inject, an
        // eager send without CQ data.)
        if self.data | self.msg_id | self.rma_addr | self.rma_key | self.status as u64 != 0 {
            for (bit, v) in [
                (opt::DATA, self.data),
                (opt::MSG_ID, self.msg_id),
                (opt::RMA_ADDR, self.rma_addr),
                (opt::RMA_KEY, self.rma_key),
                (opt::STATUS, self.status as u64),
            ] {
                if v != 0 {
                    present |= bit;
                    put(&v.to_le_bytes(), &mut at);
                }
            }
        }
        if fam == AF_INET6 {
            put(&n[8..28], &mut at);
            put(&[0; 4], &mut at);
        }
        b[27] = present;
        at
    }

    /// The IPv4 address of a header's sender, read in place (None: an
    /// IPv6 sender, or too short to tell).
    pub fn sender_v4(b: &[u8]) -> Option<std::net::Ipv4Addr> {
        let a = b.get(28..32)?;
        (b.get(26)? & 0xf == 4).then(|| std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]))
    }

    /// The bytes of a header that name an IPv4 sender (its port, version
    /// and family, address), as one word: equal words, equal senders.
    /// None: an IPv6 sender, or too short to tell. (One load from the
    /// frame, where comparing decoded names reads back the small stores
    /// that built them.)
    #[inline]
    pub fn sender_key(b: &[u8]) -> Option<u64> {
        let w = u64::from_le_bytes(b.get(24..32)?.try_into().ok()?);
        // (Byte 27, which optional fields are present, is not the sender.)
        let k = w & !(0xff << 24);
        ((k >> 16) & 0xf == 4).then_some(k)
    }

    /// The protocol version a header was written in (None: too short to
    /// tell).
    pub fn version_of(b: &[u8]) -> Option<u8> {
        b.get(26).map(|x| x >> 4)
    }

    /// Decode a header; returns it and its length (None: malformed, or of
    /// another protocol version).
    #[inline]
    pub fn decode(b: &[u8]) -> Option<(Hdr, usize)> {
        // (The fixed part as one array: its fields are read without a
        // bounds check each.)
        let f: &[u8; HDR_BASE] = b.get(..HDR_BASE)?.try_into().ok()?;
        if f[26] >> 4 != PROTO_VERSION {
            return None;
        }
        let u64_of = |x: &[u8]| u64::from_le_bytes(x.try_into().unwrap_or_default());
        let mut h = Hdr {
            op: f[0],
            flags: f[1],
            src_slot: 0,
            iov_count: u16::from_le_bytes([f[2], f[3]]),
            len: u64_of(&f[8..16]),
            tag: u64_of(&f[16..24]),
            pid: u32::from_le_bytes([f[4], f[5], f[6], f[7]]),
            ..Default::default()
        };
        let present = f[27];
        let mut at = HDR_BASE;
        // (Most frames carry none of the optional fields: an inject, an
        // eager send without CQ data.)
        if present != 0 {
            for bit in [opt::DATA, opt::MSG_ID, opt::RMA_ADDR, opt::RMA_KEY, opt::STATUS] {
                if present & bit != 0 {
                    let v = u64_of(b.get(at..at + 8)?);
                    at += 8;
                    match bit {
                        opt::DATA => h.data = v,
                        opt::MSG_ID => h.msg_id = v,
                        opt::RMA_ADDR => h.rma_addr = v,
                        opt::RMA_KEY => h.rma_key = v,
                        _ => h.status = v as u32,
                    }
                }
            }
        }
        let n = &mut h.name;
        n[2..4].copy_from_slice(&f[24..26]);
        n[4..8].copy_from_slice(&f[28..32]);
        match f[26] & 0xf {
            4 => n[0..2].copy_from_slice(&AF_INET.to_ne_bytes()),
            6 => {
                n[0..2].copy_from_slice(&AF_INET6.to_ne_bytes());
                n[8..28].copy_from_slice(b.get(at..at + 20)?);
                at += 24;
            }
            _ => return None,
        }
        (b.len() >= at).then_some((h, at))
    }
}

/// The (address, length) pairs of one operation, held inline: an
/// operation takes at most `iov_limit` (4) of them, so posting one
/// allocates nothing.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Iovs {
    n: u8,
    v: [(usize, usize); crate::info::attrs::IOV_LIMIT],
}

impl Iovs {
    /// One buffer.
    pub fn one(addr: usize, len: usize) -> Iovs {
        let mut i = Iovs::default();
        i.v[0] = (addr, len);
        i.n = 1;
        i
    }

    /// Up to `iov_limit` pairs (None: more).
    pub fn collect(it: impl IntoIterator<Item = (usize, usize)>) -> Option<Iovs> {
        let mut i = Iovs::default();
        for x in it {
            *i.v.get_mut(i.n as usize)? = x;
            i.n += 1;
        }
        Some(i)
    }
}

impl std::ops::Deref for Iovs {
    type Target = [(usize, usize)];
    fn deref(&self) -> &[(usize, usize)] {
        &self.v[..self.n as usize]
    }
}

/// Encode (addr, len) pairs.
pub fn encode_iovs(iovs: &[(usize, usize)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(iovs.len() * 16);
    for &(a, l) in iovs {
        v.extend_from_slice(&(a as u64).to_le_bytes());
        v.extend_from_slice(&(l as u64).to_le_bytes());
    }
    v
}

/// What is wrong with a frame whose header decoded as `h` and whose body
/// is `body`, judged by the frame alone (None: nothing this can tell).
/// Every kind whose body the header describes is checked: inline data as
/// long as the header's length, iovs exactly `iov_count` pairs that name
/// at least that length, ACKS ids as many as it counts; an unknown kind
/// is wrong too. (The shm wire's queue is written by local processes,
/// which the engine answers with FI_EINVAL instead; a TCP connection that
/// sends such a frame is closed.)
pub fn frame_lies(h: &Hdr, body: &[u8]) -> Option<String> {
    let n = h.iov_count as usize;
    match h.op {
        op::EAGER | op::WRITE_INLINE if body.len() as u64 != h.len => {
            Some(format!("a message of kind {} says {} bytes and carries {}", h.op, h.len, body.len()))
        }
        op::RTS | op::WRITE | op::READ if body.len() != n * 16 => {
            Some(format!("a request of kind {} counts {n} iovs and carries {} bytes of them", h.op, body.len()))
        }
        op::RTS | op::WRITE | op::READ => {
            let named = decode_iovs(body, n)?.iter().fold(0u64, |s, x| s.saturating_add(x.1 as u64));
            (named < h.len).then(|| format!("a request of {} bytes whose iovs name {named}", h.len))
        }
        op::ACKS if body.len() < n * 8 => Some(format!("an ACKS that counts {n} ids and carries {} bytes", body.len())),
        op::ATOMIC => match AtomicWhat::unpack(h.tag) {
            None => Some(format!("an atomic of unknown call {:#x}", h.tag)),
            Some(w) if body.len() as u64 != h.len.saturating_mul(w.operands() as u64) => Some(format!(
                "an atomic of {} bytes that carries {} bytes of operands ({} expected)",
                h.len,
                body.len(),
                h.len.saturating_mul(w.operands() as u64)
            )),
            Some(_) => None,
        },
        op::EAGER..=op::ACKS => None,
        other => Some(format!("a message of unknown kind {other}")),
    }
}

/// Decode `n` (addr, len) pairs.
pub fn decode_iovs(b: &[u8], n: usize) -> Option<Vec<(usize, usize)>> {
    if b.len() < n * 16 {
        return None;
    }
    Some(
        (0..n)
            .map(|i| {
                let a = u64::from_le_bytes(b[i * 16..i * 16 + 8].try_into().unwrap_or_default());
                let l = u64::from_le_bytes(b[i * 16 + 8..i * 16 + 16].try_into().unwrap_or_default());
                (a as usize, l as usize)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ipv4_sender_is_read_in_place() {
        for (a, want) in [("10.1.2.3:4567", Some([10, 1, 2, 3])), ("[::1]:9", None)] {
            let name = crate::info::addr::encode(&a.parse().unwrap());
            let mut h = Hdr { op: op::EAGER, len: 8, msg_id: 3, ..Default::default() };
            h.name[..name.len()].copy_from_slice(&name);
            let mut b = [0u8; HDR_MAX];
            let n = h.encode(&mut b);
            assert_eq!(Hdr::sender_v4(&b[..n]), want.map(std::net::Ipv4Addr::from), "{a}");
            assert_eq!(Hdr::sender_v4(&b[..20]), None, "too short");
        }
    }

    #[test]
    fn a_header_of_another_version_does_not_decode() {
        let name = crate::info::addr::encode(&"10.1.2.3:4567".parse().unwrap());
        let mut h = Hdr { op: op::EAGER, len: 8, ..Default::default() };
        h.name[..name.len()].copy_from_slice(&name);
        let mut b = [0u8; HDR_MAX];
        let n = h.encode(&mut b);
        assert_eq!(Hdr::version_of(&b[..n]), Some(PROTO_VERSION));
        assert!(Hdr::decode(&b[..n]).is_some());
        b[26] = (PROTO_VERSION + 1) << 4 | (b[26] & 0xf);
        assert_eq!(Hdr::version_of(&b[..n]), Some(PROTO_VERSION + 1));
        assert!(Hdr::decode(&b[..n]).is_none(), "another version's header is refused");
        b[26] &= 0xf;
        assert!(Hdr::decode(&b[..n]).is_none(), "a header without a version (0) is refused");
    }

    #[test]
    fn header_round_trip() {
        let v4 = crate::info::addr::encode(&"10.1.2.3:4567".parse().unwrap());
        let v6 = crate::info::addr::encode(&"[fe80::1:2]:9".parse().unwrap());
        for (name_bytes, want_len) in [(&v4, HDR_MAX - 24), (&v6, HDR_MAX)] {
            let mut name = [0u8; 28];
            name[..name_bytes.len()].copy_from_slice(name_bytes);
            let h = Hdr {
                op: op::RTS,
                flags: flag::TAGGED | flag::NEED_ACK,
                src_slot: 0,
                iov_count: 2,
                len: 1 << 40,
                tag: 0xdead_beef,
                data: 5,
                msg_id: 99,
                rma_addr: 0x1000,
                rma_key: u64::MAX - 1,
                status: 13,
                pid: 4242,
                name,
            };
            let mut b = [0u8; HDR_MAX];
            let n = h.encode(&mut b);
            assert_eq!(n, want_len);
            assert_eq!(Hdr::decode(&b[..n]), Some((h, n)));
            assert_eq!(Hdr::decode(&b[..n - 1]), None, "a cut header is malformed");
        }
        // The common eager send: fixed part only.
        let mut name = [0u8; 28];
        name[..v4.len()].copy_from_slice(&v4);
        let h = Hdr { op: op::EAGER, len: 8, pid: 1, name, ..Default::default() };
        let mut b = [0u8; HDR_MAX];
        assert_eq!(h.encode(&mut b), HDR_BASE);
        assert_eq!(Hdr::decode(&b[..HDR_BASE]).map(|x| x.0), Some(h));
        assert_eq!(Hdr::decode(&[0; 10]), None);
        let iovs = vec![(0x1000, 5), (usize::MAX, 0)];
        assert_eq!(decode_iovs(&encode_iovs(&iovs), 2), Some(iovs));
        assert_eq!(decode_iovs(&[0; 8], 1), None);
    }

    #[test]
    fn the_sender_key_names_the_sender_whatever_else_the_header_says() {
        let frame = |addr: &str, data: u64, tag: u64| {
            let a = crate::info::addr::encode(&addr.parse().unwrap());
            let mut name = [0u8; 28];
            name[..a.len()].copy_from_slice(&a);
            let h = Hdr { op: op::EAGER, len: 8, tag, data, pid: 7, name, ..Default::default() };
            let mut b = [0u8; HDR_MAX];
            let n = h.encode(&mut b);
            b[..n].to_vec()
        };
        let k = |f: &[u8]| Hdr::sender_key(f);
        let a = frame("10.1.2.3:4567", 0, 1);
        // The same sender, other optional fields and other tags: one key.
        assert!(k(&a).is_some());
        assert_eq!(k(&a), k(&frame("10.1.2.3:4567", 99, 2)), "optional fields are not the sender");
        // Another port, another address: another key.
        assert_ne!(k(&a), k(&frame("10.1.2.3:4568", 0, 1)));
        assert_ne!(k(&a), k(&frame("10.1.2.4:4567", 0, 1)));
        assert_ne!(k(&a), k(&frame("3.2.1.10:4567", 0, 1)));
        // An IPv6 sender has none (its address follows the optional
        // fields), nor has a frame too short to hold one.
        assert_eq!(k(&frame("[fe80::1:2]:9", 0, 1)), None);
        assert_eq!(k(&a[..31]), None);
    }

    #[test]
    fn an_atomic_frame_carries_exactly_its_operands() {
        use crate::mr::atomic::Call;
        let w = |call| AtomicWhat { op: oxmr_ffi::FI_SUM, dt: oxmr_ffi::FI_UINT64, call };
        for (what, operands) in [(w(Call::Write), 1), (w(Call::Fetch), 1), (w(Call::Compare), 2)] {
            assert_eq!(AtomicWhat::unpack(what.pack()), Some(what));
            let h = Hdr { op: op::ATOMIC, len: 16, tag: what.pack(), ..Default::default() };
            assert_eq!(frame_lies(&h, &vec![0; 16 * operands]), None, "{what:?}");
            assert!(frame_lies(&h, &vec![0; 16 * operands - 1]).is_some(), "{what:?}: one byte short");
        }
        let read = AtomicWhat { op: oxmr_ffi::FI_ATOMIC_READ, dt: oxmr_ffi::FI_UINT64, call: Call::Fetch };
        let h = Hdr { op: op::ATOMIC, len: 16, tag: read.pack(), ..Default::default() };
        assert_eq!(frame_lies(&h, &[]), None, "a read carries no operand");
        let h = Hdr { op: op::ATOMIC, len: 8, tag: 3 << 16, ..Default::default() };
        assert!(frame_lies(&h, &[0; 8]).is_some(), "no such call");
        assert_eq!(AtomicWhat::unpack(1 << 24), None, "bits past the call");
    }

    #[test]
    fn iovs_hold_up_to_the_limit_inline() {
        assert_eq!(&Iovs::one(0x10, 3)[..], &[(0x10, 3)]);
        let four = Iovs::collect((0..4).map(|i| (i * 0x100, i + 1))).unwrap();
        assert_eq!(four.len(), 4);
        assert_eq!(four.iter().map(|x| x.1).sum::<usize>(), 10);
        assert_eq!(Iovs::collect((0..5).map(|i| (i, 1))), None, "more than iov_limit");
        assert!(Iovs::default().is_empty());
    }
}
