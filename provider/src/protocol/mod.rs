//! oxmr's wire protocol: the message header every wire carries, and the
//! endpoint engine that turns libfabric operations into messages and
//! messages into completions (matching, rendezvous, RMA at the target).
//!
//! The engine talks to a wire through `shm::region::Region` today; the TCP
//! wire will carry the same messages. See docs/wire.md for the format.

pub mod engine;
pub mod hash;

/// Bytes of the fixed message header.
pub(crate) const HDR_LEN: usize = 96;

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
}

/// Header flags.
pub mod flag {
    pub(crate) const TAGGED: u8 = 1;
    pub(crate) const CQ_DATA: u8 = 2;
    pub(crate) const NEED_ACK: u8 = 4;
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

impl Hdr {
    pub fn encode(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0] = self.op;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.src_slot.to_le_bytes());
        b[4..6].copy_from_slice(&self.iov_count.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.tag.to_le_bytes());
        b[24..32].copy_from_slice(&self.data.to_le_bytes());
        b[32..40].copy_from_slice(&self.msg_id.to_le_bytes());
        b[40..48].copy_from_slice(&self.rma_addr.to_le_bytes());
        b[48..56].copy_from_slice(&self.rma_key.to_le_bytes());
        b[56..60].copy_from_slice(&self.status.to_le_bytes());
        b[60..64].copy_from_slice(&self.pid.to_le_bytes());
        b[64..92].copy_from_slice(&self.name);
        b
    }

    pub fn decode(b: &[u8]) -> Option<Hdr> {
        if b.len() < HDR_LEN {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        Some(Hdr {
            op: b[0],
            flags: b[1],
            src_slot: u16::from_le_bytes([b[2], b[3]]),
            iov_count: u16::from_le_bytes([b[4], b[5]]),
            len: u64_at(8),
            tag: u64_at(16),
            data: u64_at(24),
            msg_id: u64_at(32),
            rma_addr: u64_at(40),
            rma_key: u64_at(48),
            status: u32::from_le_bytes(b[56..60].try_into().unwrap_or_default()),
            pid: u32::from_le_bytes(b[60..64].try_into().unwrap_or_default()),
            name: b[64..92].try_into().unwrap_or_default(),
        })
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
    fn header_round_trip() {
        let h = Hdr {
            op: op::RTS,
            flags: flag::TAGGED | flag::NEED_ACK,
            src_slot: 7,
            iov_count: 2,
            len: 1 << 40,
            tag: 0xdead_beef,
            data: 5,
            msg_id: 99,
            rma_addr: 0x1000,
            rma_key: u64::MAX - 1,
            status: 13,
            pid: 4242,
            name: [7; 28],
        };
        assert_eq!(Hdr::decode(&h.encode()), Some(h));
        assert_eq!(Hdr::decode(&[0; 10]), None);
        let iovs = vec![(0x1000, 5), (usize::MAX, 0)];
        assert_eq!(decode_iovs(&encode_iovs(&iovs), 2), Some(iovs));
        assert_eq!(decode_iovs(&[0; 8], 1), None);
    }
}
