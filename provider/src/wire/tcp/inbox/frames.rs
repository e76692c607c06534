//! Frames cut from a connection's bytes; a payload that may land goes
//! straight from the socket into its landing zone (`wire::land`).

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpStream};

use super::super::*;

/// A frame whose payload goes straight from the socket to its landing
/// zone (`wire::land`): its header, the zone's pieces still to fill.
pub(super) struct Landing {
    pub(super) head: Vec<u8>,
    pub(super) key: u64,
    pub(super) gen: u64,
    pub(super) dest: Vec<(usize, usize)>,
    pub(super) left: usize,
    pub(super) n: usize,
}

/// A frame cut from a connection: its bytes (the header alone when its
/// payload landed), the sender its hello named, the connection's id, and
/// the payload bytes that landed in their zone.
pub(super) type Frame = (Vec<u8>, SocketAddr, u64, usize);

/// Read from `sock` into `dest` (at most `max` bytes; what `read` would say).
pub(super) fn read_into(sock: &TcpStream, dest: &[(usize, usize)], max: usize) -> io::Result<usize> {
    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 8];
    let (mut n, mut left) = (0, max);
    for &(a, l) in dest {
        if n == iov.len() || left == 0 {
            break;
        }
        iov[n] = libc::iovec { iov_base: a as *mut libc::c_void, iov_len: l.min(left) };
        left -= l.min(left);
        n += 1;
    }
    // SAFETY: the pieces lie in a landing zone the engine registered
    // (writable memory of ours, valid while the zone is in the table,
    // checked just before this call); readv writes only inside them.
    let r = unsafe { libc::readv(std::os::fd::AsRawFd::as_raw_fd(sock), iov.as_ptr(), n as i32) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `dest` after its first `n` bytes.
pub(super) fn skip(dest: &mut Vec<(usize, usize)>, mut n: usize) {
    let mut i = 0;
    while n > 0 && i < dest.len() {
        let take = dest[i].1.min(n);
        dest[i] = (dest[i].0 + take, dest[i].1 - take);
        n -= take;
        if dest[i].1 == 0 {
            i += 1;
        }
    }
    dest.drain(..i);
}

/// Where `cut` puts what it cuts from a connection's stream.
pub(super) struct Cuts<'a> {
    pub(super) frames: &'a mut VecDeque<Frame>,
    pub(super) spare: &'a mut Vec<Vec<u8>>,
    pub(super) read: &'a mut u64,
    pub(super) lands: &'a crate::wire::land::Landings,
    /// The last frame cut is a barrier (`Landings::barrier`): nothing more
    /// of its connection is cut until the engine has taken it.
    pub(super) stopped: bool,
}

/// Cut the whole frames at the start of `bytes` (a connection's stream
/// from `from`, connection `id`) into `to.frames`, counting them; the
/// bytes taken, or None for a length over `TCP_MAX_FRAME` (the connection
/// is to be closed; said here). A frame whose payload may land
/// (`wire::land`) lands what of it is here, and if the rest is still to
/// come, `land` says where it goes (and every byte was taken).
pub(super) fn cut(
    bytes: &[u8],
    from: SocketAddr,
    id: u64,
    to: &mut Cuts<'_>,
    land: &mut Option<Landing>,
) -> Option<usize> {
    let mut at = 0;
    let lands = to.lands.any().then(|| to.lands.head_max()).flatten();
    while bytes.len() - at >= 4 {
        let n = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default()) as usize;
        if n > TCP_MAX_FRAME {
            tracing::warn!(
                "closing the TCP connection from {from}: a frame of {n} bytes (the most is {TCP_MAX_FRAME}); a broken or lying peer"
            );
            return None;
        }
        let avail = bytes.len() - at - 4;
        if let Some(head_max) = lands.filter(|_| n >= crate::wire::land::LAND_MIN) {
            let need = n.min(head_max);
            if avail < need {
                break;
            }
            let body = &bytes[at + 4..];
            let placed = to
                .lands
                .classify(&body[..need])
                .filter(|h| h.len <= need)
                .and_then(|h| to.lands.place(from, h.key, h.off, n - h.len).map(|(dest, gen)| (h, dest, gen)));
            if let Some((h, mut dest, gen)) = placed {
                let pn = n - h.len;
                let have = (avail - h.len).min(pn);
                let mut head = to.spare.pop().unwrap_or_default();
                head.extend_from_slice(&body[..h.len]);
                // SAFETY: `dest` lies in a live landing zone (just placed),
                // writable memory of ours until the engine forgets it.
                unsafe { crate::mr::local::scatter(&dest, &body[h.len..h.len + have]) };
                at += 4 + h.len + have;
                if have == pn {
                    to.frames.push_back((head, from, id, pn));
                    *to.read += 1;
                    continue;
                }
                skip(&mut dest, have);
                *land = Some(Landing { head, key: h.key, gen, dest, left: pn - have, n: pn });
                return Some(at);
            }
        }
        if avail < n {
            break;
        }
        let body = &bytes[at + 4..at + 4 + n];
        let barrier = to.lands.barrier(body);
        let mut frame = to.spare.pop().unwrap_or_default();
        frame.extend_from_slice(body);
        to.frames.push_back((frame, from, id, 0));
        *to.read += 1;
        at += 4 + n;
        if barrier {
            to.stopped = true;
            break;
        }
    }
    Some(at)
}
