//! Multi-receive buffers (FI_MULTI_RECV, fi_msg(3)): one posted buffer
//! that takes successive untagged messages, each at its next free offset.
//!
//! A buffer waits in the untagged posted queue like any receive, its
//! `iovs` the space still free. A message that matches it gets a receive
//! of its own, carved from the front of that space (`Engine::take_posted`),
//! which then goes every way a plain receive goes (inline copy,
//! rendezvous read, shared copy, pull) and completes on its own: `buf`
//! where the message landed, `len` its length. Choices:
//!
//! - Release: when the space left after a message is below the
//!   FI_OPT_MIN_MULTI_RECV the endpoint had when the buffer was posted
//!   (fi_endpoint(3): a new value applies to receives posted after it), or
//!   is none at all, the buffer leaves the posted queue and that message's
//!   receive (`Multi::Last`) carries FI_MULTI_RECV. It is the buffer's
//!   last completion even when an earlier message's data is still in
//!   flight (a pull, a shared copy): receives report in matching order
//!   (`completion::RecvOrder`) and it matched after every other message
//!   into the buffer. No separate release entry is written.
//! - A message longer than the space left is truncated to it (an FI_ETRUNC
//!   error completion with `olen`, as a plain receive gives, and as
//!   libfabric's util srx and rxm do); it leaves no space, so it releases
//!   the buffer. An application that must not lose data sets
//!   FI_OPT_MIN_MULTI_RECV to its largest message.
//! - Completions: every message's, unless the buffer was posted under
//!   FI_SELECTIVE_COMPLETION without FI_COMPLETION; the releasing one
//!   always (fi_msg(3): an entry "will always be generated when the buffer
//!   has been consumed"). The buffer reserves a CQ slot when posted (for
//!   that one); every other message takes one past the CQ's size if it
//!   must (an arrival cannot be refused, as remote CQ data).
//! - fi_cancel of a buffer: an FI_ECANCELED error completion with
//!   FI_MULTI_RECV, reported in matching order after the buffer's messages
//!   still in flight, so it is the buffer's last.
//! - A buffer is one iov (its messages are contiguous at `buf`).
//!   libfabric 1.17's tagged API has no multi-receive buffers:
//!   fi_trecvmsg with FI_MULTI_RECV is refused at the boundary, and
//!   FI_MULTI_RECV among the endpoint's default rx op_flags applies to
//!   untagged receives only.

use std::net::SocketAddr;
use std::sync::Arc;

use oxmr_ffi as ffi;

use super::{matches, Engine, Posted, PostedRecv};
use crate::error::Result;
use crate::fail;
use crate::protocol::{Hdr, Iovs};
use crate::queues::cq::CqCore;

/// What a posted receive is, for multi-receive buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Multi {
    /// A plain receive (or a message's receive carved out of a buffer
    /// that stays posted).
    #[default]
    No,
    /// A multi-receive buffer: released when less than `min` bytes (or
    /// none) are left; `each`: every message completes (else only the one
    /// that releases it).
    Buffer { min: usize, each: bool },
    /// The receive that released its buffer (or the buffer's cancel): its
    /// completion carries FI_MULTI_RECV.
    Last,
}

/// A message of `len` bytes into a buffer with `left` bytes free, which
/// is released below `min`: the bytes it gets (the rest is truncated), and
/// whether the buffer is released after it (less than `min` left, or
/// nothing).
pub(super) fn carve(left: usize, len: u64, min: usize) -> (usize, bool) {
    let n = usize::try_from(len).unwrap_or(usize::MAX).min(left);
    let rest = left - n;
    (n, rest == 0 || rest < min)
}

/// The sender a buffer's cancel names (none: it is not a message).
const NOBODY: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0));

impl PostedRecv {
    /// The receive of a message of `len` bytes, carved from the front of
    /// this buffer's free space (which shrinks by it), and whether that
    /// released the buffer (the carved receive then takes the buffer's CQ
    /// slot and reports FI_MULTI_RECV). `cq`: the endpoint's receive CQ.
    fn carve_part(&mut self, len: u64, cq: Option<&Arc<CqCore>>) -> (Posted, bool) {
        // (Called on buffers only; anything else would take one message.)
        let (min, each) = match self.multi {
            Multi::Buffer { min, each } => (min, each),
            _ => (usize::MAX, true),
        };
        let (base, left) = self.iovs.first().copied().unwrap_or((0, 0));
        let (n, released) = carve(left, len, min);
        self.iovs = Iovs::one(base + n, left - n);
        let credit = match (released, each) {
            (true, _) => self.credit.take(),
            (false, true) => cq.map(|c| c.reserve_always()),
            (false, false) => None,
        };
        let part = Box::new(PostedRecv {
            ctx: self.ctx,
            iovs: Iovs::one(base, n),
            src: self.src,
            tag: 0,
            ignore: 0,
            credit,
            seq: 0,
            multi: if released { Multi::Last } else { Multi::No },
        });
        (part, released)
    }
}

impl Engine {
    /// Take posted receive `i` of queue `q` for a message of `len` bytes:
    /// the receive itself, or for a multi-receive buffer the receive
    /// carved out of it (the buffer stays posted until it is released).
    #[inline(always)]
    pub(super) fn take_posted(&mut self, q: usize, i: usize, len: u64) -> Posted {
        if self.posted[q][i].multi == Multi::No {
            // (The first, nearly always: no shifting to consider.)
            let p = if i == 0 { self.posted[q].pop_front() } else { self.posted[q].remove(i) };
            return p.expect("position is in range");
        }
        let cq = self.bound.rx_cq.clone();
        let (part, released) = self.posted[q][i].carve_part(len, cq.as_ref());
        if released {
            self.posted[q].remove(i);
        }
        part
    }

    /// Post a multi-receive buffer (fi_recvmsg with FI_MULTI_RECV, or an
    /// untagged receive under the endpoint's default FI_MULTI_RECV):
    /// unexpected messages that match it go into it first, in order.
    pub(super) fn post_multi(&mut self, ctx: usize, iovs: Iovs, src: Option<SocketAddr>, flags: u64) -> Result<()> {
        if iovs.len() != 1 {
            return Err(fail!(
                ffi::FI_EINVAL,
                "FI_MULTI_RECV: a multi-receive buffer is one iov, not {}; post each buffer on its own",
                iovs.len()
            ));
        }
        let each = self.wants(false, flags);
        // (The releasing completion's slot: it is written even under
        // FI_SELECTIVE_COMPLETION.)
        let credit = self.bound.rx_cq.as_ref().map(|c| c.reserve()).transpose()?;
        let min = self.bound.min_multi_recv;
        let mut b = Box::new(PostedRecv {
            ctx,
            iovs,
            src,
            tag: 0,
            ignore: 0,
            credit,
            seq: 0,
            multi: Multi::Buffer { min, each },
        });
        while let Some(i) =
            self.unexpected[0].iter().position(|u| u.claimed.is_none() && matches(&b, false, 0, &u.from))
        {
            // (The application's call: see `recv`.)
            self.busy = false;
            let u = self.take_unexpected(0, i);
            let (mut part, released) = b.carve_part(u.hdr.len, self.bound.rx_cq.as_ref());
            part.seq = self.matched();
            self.deliver(part, u);
            if released {
                return Ok(());
            }
        }
        self.posted[0].push_back(b);
        Ok(())
    }

    /// fi_cancel of a multi-receive buffer `b`, taken from the posted
    /// queue: an FI_ECANCELED error completion with FI_MULTI_RECV, after
    /// those of the messages still in flight into it (matching order).
    pub(super) fn cancel_multi(&mut self, mut b: Posted) {
        // (Error entries take no slot.)
        drop(b.credit.take());
        b.iovs = Iovs::default();
        b.multi = Multi::Last;
        b.seq = self.matched();
        self.complete_recv(b, &Hdr::default(), NOBODY, ffi::FI_ECANCELED);
    }
}

#[cfg(test)]
mod tests {
    use super::carve;

    #[test]
    fn a_message_takes_what_it_needs_and_the_buffer_goes_below_its_minimum() {
        // (space left, message, minimum) -> (bytes it gets, released)
        assert_eq!(carve(1000, 8, 64), (8, false));
        assert_eq!(carve(1000, 936, 64), (936, false), "exactly the minimum left: kept");
        assert_eq!(carve(1000, 937, 64), (937, true), "one byte under it: released");
        assert_eq!(carve(1000, 1000, 64), (1000, true), "filled");
        assert_eq!(carve(1000, 0, 64), (0, false), "a zero-length message takes no space");
    }

    #[test]
    fn a_message_longer_than_the_space_left_is_cut_to_it_and_releases_the_buffer() {
        assert_eq!(carve(100, 1 << 20, 64), (100, true));
        assert_eq!(carve(100, u64::MAX, 0), (100, true), "a length past usize");
        assert_eq!(carve(0, 5, 64), (0, true), "a buffer posted empty");
    }

    #[test]
    fn a_minimum_of_zero_keeps_a_buffer_until_it_is_full() {
        assert_eq!(carve(100, 99, 0), (99, false));
        assert_eq!(carve(1, 1, 0), (1, true));
        assert_eq!(carve(100, 0, 0), (0, false));
        assert_eq!(carve(0, 0, 0), (0, true));
    }

    #[test]
    fn a_minimum_larger_than_the_buffer_releases_it_after_one_message() {
        assert_eq!(carve(32, 8, 64), (8, true));
    }
}
