//! The inbox: an endpoint's listener and every connection it reads
//! (accepted, or handed over by its links), cut into frames; payloads
//! read straight into their landing zones (`wire::land`).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

use super::pairs::Answer;

/// A connection the inbox reads: one accepted at our listener, or one a
/// link of ours opened (handed over once the peer answered).
pub(super) struct InConn {
    pub(super) sock: TcpStream,
    /// Bytes read and not yet taken as frames.
    buf: Vec<u8>,
    /// The sender, once its hello arrived (and ours went back).
    pub(super) peer: Option<SocketAddr>,
    /// The epoch its hello gave.
    pub(super) epoch: u32,
    closed: bool,
    /// Which connection it is (frames carry it, see `Inbox::reject_last`;
    /// one count per endpoint, `Pairs::new_id`).
    pub(super) id: u64,
    /// The frame whose payload is being read into its landing zone.
    land: Option<Landing>,
    /// Set when the connection ends or is closed here: a link writing on
    /// it learns so.
    pub(super) tie: Tie,
    /// Cutting stopped at a barrier frame; the bytes after it (in `buf`)
    /// are cut at the next poll, once the engine has taken it.
    held: bool,
    /// A lane (its hello said LANE): its end ends every connection with
    /// its peer (`Inbox::sweep`).
    pub(super) lane: bool,
    /// With a job key: the opener's hello and the transcript of the
    /// challenge we answered it with, while its proof is still to come.
    challenged: Option<Box<(Greeting, Transcript)>>,
    /// When it was accepted (its hello is due within `Bounds::hello_wait`).
    since: Instant,
    /// Since when it holds an unfinished frame (None: it holds none).
    partial_since: Option<Instant>,
}

impl InConn {
    /// Bytes read and not yet taken (tests).
    #[cfg(test)]
    pub(super) fn buf_len(&self) -> usize {
        self.buf.len()
    }

    pub(super) fn new(sock: TcpStream, id: u64, peer: Option<(SocketAddr, u32)>, tie: Tie) -> InConn {
        InConn {
            sock,
            buf: Vec::new(),
            peer: peer.map(|p| p.0),
            epoch: peer.map_or(0, |p| p.1),
            closed: false,
            id,
            land: None,
            tie,
            held: false,
            lane: false,
            challenged: None,
            since: Instant::now(),
            partial_since: None,
        }
    }
}

/// A frame whose payload goes straight from the socket to its landing
/// zone (`wire::land`): its header, the zone's pieces still to fill.
struct Landing {
    head: Vec<u8>,
    key: u64,
    gen: u64,
    dest: Vec<(usize, usize)>,
    left: usize,
    n: usize,
}

/// A frame cut from a connection: its bytes (the header alone when its
/// payload landed), the sender its hello named, the connection's id, and
/// the payload bytes that landed in their zone.
type Frame = (Vec<u8>, SocketAddr, u64, usize);

/// Read from `sock` into `dest` (at most `max` bytes; what `read` would say).
fn read_into(sock: &TcpStream, dest: &[(usize, usize)], max: usize) -> io::Result<usize> {
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
fn skip(dest: &mut Vec<(usize, usize)>, mut n: usize) {
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

/// An endpoint's TCP inbox: its listener, and every connection with its
/// peers (those they opened, those our links opened).
pub struct Inbox {
    listener: TcpListener,
    me: Hello,
    pub(super) conns: Vec<InConn>,
    /// What the endpoint's links share with us (`Pairs`).
    pub(super) pairs: Arc<Pairs>,
    /// Frames read and not yet handed up, with their connection's sender
    /// and id.
    pub(super) frames: VecDeque<Frame>,
    /// Connections accepted so far, and the connection of the frame
    /// handed up last.
    pub(super) accepted: u64,
    pub(super) last: Option<u64>,
    /// The hellos of connections accepted (address, epoch), not yet taken
    /// by the engine.
    hellos: Vec<(SocketAddr, u32)>,
    /// (Frames handed up, frames read.)
    popped: u64,
    read: u64,
    /// Polls so far, and when the listener was last asked for new
    /// connections: at most every `ACCEPT_GAP`, the clock read every
    /// `CLOCK_EVERY`th poll (an endpoint that also takes shared memory
    /// polls its TCP side on every empty poll, many millions a second when
    /// it spins, and an accept is a system call).
    polls: u32,
    accepted_at: Instant,
    /// The fds epoll said were readable in this poll (kept: no allocation
    /// per poll).
    readable: Vec<std::os::fd::RawFd>,
    /// Where reads land before they are cut into frames (kept: an array
    /// on the stack would be zeroed on every poll).
    chunk: Box<[u8]>,
    /// Buffers of frames handed up, kept for the next ones (at most
    /// `SPARE_MAX`): a 256 KiB DATA frame freshly allocated per frame
    /// costs the allocator's mmap/trim and a page fault per page.
    spare: Vec<Vec<u8>>,
    /// The endpoint's wake fd (`wire::Inbox::wake_fd`): holds the listener
    /// and every connection accepted (a closed socket leaves it by itself).
    wake: std::sync::Arc<crate::sys::Epoll>,
    /// Where payloads may land straight from the socket (the engine's).
    lands: crate::wire::land::Landings,
    /// The job key every connection must prove (None: not authenticated).
    key: Option<crate::auth::JobKey>,
    /// Refused strangers, said at most once a second.
    alarms: Alarms,
    /// What connections may hold.
    bounds: Bounds,
    /// Sources refused until then (closed for refused accesses).
    banned: Vec<(std::net::IpAddr, Instant)>,
    /// When the hello deadlines and the stuck frames are next looked at.
    next_sweep: Instant,
    /// Bytes of unfinished frames over all connections (as of the last
    /// poll's end).
    partial: usize,
    /// Peers whose connections are not read for now (the engine holds as
    /// much of theirs as it may: `pause`).
    paused: Vec<SocketAddr>,
    /// Where each connection is in `conns`, by fd (rebuilt when `conns`
    /// changed: `index_stale`), the connections stopped at a barrier (by
    /// id), and the positions this poll reads (kept: no allocation per
    /// poll). A poll touches the connections epoll named, not all: a
    /// thousand silent ones cost nothing per poll.
    index: std::collections::HashMap<std::os::fd::RawFd, usize>,
    index_stale: bool,
    held_ids: Vec<u64>,
    order: Vec<usize>,
}

/// See `Inbox::spare`.
const SPARE_MAX: usize = 16;

/// The most bytes one poll reads from one connection into frames (payloads
/// that land straight in their zone do not count: they cost no memory).
const POLL_READ_MAX: usize = 1 << 20;

/// See `Inbox::polls`.
const ACCEPT_GAP: Duration = Duration::from_micros(200);
const CLOCK_EVERY: u32 = 16;

/// Where `cut` puts what it cuts from a connection's stream.
struct Cuts<'a> {
    frames: &'a mut VecDeque<Frame>,
    spare: &'a mut Vec<Vec<u8>>,
    read: &'a mut u64,
    lands: &'a crate::wire::land::Landings,
    /// The last frame cut is a barrier (`Landings::barrier`): nothing more
    /// of its connection is cut until the engine has taken it.
    stopped: bool,
}

/// Cut the whole frames at the start of `bytes` (a connection's stream
/// from `from`, connection `id`) into `to.frames`, counting them; the
/// bytes taken, or None for a length over `TCP_MAX_FRAME` (the connection
/// is to be closed; said here). A frame whose payload may land
/// (`wire::land`) lands what of it is here, and if the rest is still to
/// come, `land` says where it goes (and every byte was taken).
fn cut(bytes: &[u8], from: SocketAddr, id: u64, to: &mut Cuts<'_>, land: &mut Option<Landing>) -> Option<usize> {
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

/// Log lines about strangers (a peer without the job's key), at most one a
/// second, each saying how many were not said since the last: a stranger
/// that connects in a loop must not fill the log.
#[derive(Default)]
pub(super) struct Alarms {
    last: Option<Instant>,
    quiet: u64,
}

impl Alarms {
    pub(super) fn say(&mut self, line: impl FnOnce() -> String) {
        if self.last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
            self.quiet += 1;
            return;
        }
        self.last = Some(Instant::now());
        let quiet = std::mem::take(&mut self.quiet);
        if quiet > 0 {
            tracing::warn!("{} ({quiet} more such refusals since the last line)", line());
        } else {
            tracing::warn!("{}", line());
        }
    }
}

/// What answering a connection's hello needs of the inbox (its fields,
/// borrowed apart from the connection being read).
struct Greeter<'a> {
    me: &'a Hello,
    pairs: &'a Arc<Pairs>,
    key: Option<&'a crate::auth::JobKey>,
    alarms: &'a mut Alarms,
    /// The endpoints we have a connection (not a lane) with.
    mains: &'a [(SocketAddr, u32)],
    /// Connections whose hello was taken in this poll.
    fresh: &'a mut Vec<(SocketAddr, u32)>,
}

impl Greeter<'_> {
    /// Our hello without our epoch and pid (what a peer that has proved
    /// nothing gets).
    fn anonymous(&self) -> Hello {
        Hello { epoch: 0, pid: 0, ..*self.me }
    }

    /// Move `c`'s hello on (its hello, with a job key our challenge and its
    /// proof, then our answer): the bytes of `c.buf` it took. Refusals
    /// close `c` and say why.
    fn step(&mut self, c: &mut InConn) -> usize {
        let mut at = 0;
        if c.challenged.is_none() {
            // (A hello of another version: said as soon as its version is
            // in, whatever its length; every version shares the first 48
            // bytes.)
            match preamble(&c.buf) {
                Preamble::Fine => {}
                Preamble::Foreign => {
                    tracing::warn!("refusing a TCP connection that does not speak oxmr's TCP wire");
                    c.closed = true;
                    return 0;
                }
                Preamble::Version(version) => {
                    tracing::warn!(
                        "refusing a TCP connection of wire version {version}; this oxmr speaks version {VERSION}: run one oxmr build on both sides"
                    );
                    // (Ours goes back first: the opener says whose version
                    // differs.)
                    let _ = (&c.sock).write_all(&self.me.encode(ACCEPT));
                    c.closed = true;
                    return 0;
                }
            }
            if c.buf.len() < HELLO_LEN {
                return 0;
            }
            let Some(g) = Hello::greeting(&c.buf[..HELLO_LEN]) else {
                tracing::warn!("refusing a TCP connection that does not speak oxmr's TCP wire");
                c.closed = true;
                return 0;
            };
            if g.kind != OPEN && g.kind != LANE {
                tracing::warn!(
                    "refusing a TCP connection that opens with an answer (hello kind {}), not a hello of its own",
                    g.kind
                );
                c.closed = true;
                return 0;
            }
            let from = c.sock.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
            match (self.key, g.keyed) {
                (Some(_), false) => {
                    self.alarms.say(|| format!(
                        "refused a TCP connection from {from}: a peer that does not hold the job's key tried to connect (set the same FI_OXMR_AUTH_KEY, or auth_key, on every process of the job)"
                    ));
                    // (Our keyed hello goes back, so the opener says that it
                    // lacks the key; without our epoch and pid: nothing of
                    // us to a stranger.)
                    let _ = (&c.sock).write_all(&self.anonymous().encode_with(
                        ACCEPT,
                        true,
                        &[0; PROOF_LEN],
                        &[0; PROOF_LEN],
                    ));
                    c.closed = true;
                    return 0;
                }
                (None, true) => {
                    self.alarms.say(|| format!(
                        "refused a TCP connection from {from}: the peer holds a job key and this endpoint has none (set the same FI_OXMR_AUTH_KEY, or auth_key, on every process of the job)"
                    ));
                    let _ = (&c.sock).write_all(&self.me.encode(ACCEPT));
                    c.closed = true;
                    return 0;
                }
                (None, false) => {
                    // (Without a key, the kernel's word is all there is: a
                    // hello is believed only from the IP its name gives, so
                    // a process elsewhere can neither speak as another
                    // endpoint nor make us dial a third party.)
                    let src = c.sock.peer_addr().ok().map(|a| a.ip());
                    if !matches!((src, g.hello.ip()), (Some(s), Some(n)) if same_ip(s, n)) {
                        let named = crate::info::addr::parse(&g.hello.name)
                            .map_or_else(|| "no valid address".to_string(), |a| a.to_string());
                        self.alarms.say(|| format!(
                            "refused a TCP connection from {from} whose hello names {named}: without a job key a peer is believed only from the IP its name gives (set the same FI_OXMR_AUTH_KEY on every process to connect across addresses)"
                        ));
                        c.closed = true;
                        return 0;
                    }
                    unauthenticated();
                    return HELLO_LEN + self.answer(c, g, false);
                }
                (Some(k), true) => {
                    let Some(nonce) = crate::auth::nonce() else {
                        tracing::warn!(
                            "refusing a TCP connection from {from}: the kernel gave no random bytes for a nonce"
                        );
                        c.closed = true;
                        return 0;
                    };
                    let mut open = [0u8; HELLO_LEN];
                    open.copy_from_slice(&c.buf[..HELLO_LEN]);
                    // (Our epoch and pid only in the answer after its
                    // proof: a stranger learns nothing of us.)
                    let mut ch = self.anonymous().encode_with(CHALLENGE, true, &nonce, &[0; PROOF_LEN]);
                    let t = transcript(&open, &ch);
                    ch[HELLO_LEN - PROOF_LEN..].copy_from_slice(&k.tag(PROOF_ACCEPT, &[&t]));
                    // (Small, on a fresh socket: taken at once.)
                    let _ = (&c.sock).write_all(&ch);
                    c.challenged = Some(Box::new((g, t)));
                    at = HELLO_LEN;
                }
            }
        }
        // With a job key: the opener's proof, over the same transcript.
        let (Some(k), Some(ch)) = (self.key, c.challenged.as_ref()) else { return at };
        if c.buf.len() - at < PROOF_LEN {
            return at;
        }
        let (g, t) = **ch;
        c.challenged = None;
        if !k.verify(PROOF_OPEN, &[&t], &c.buf[at..at + PROOF_LEN]) {
            let from = c.sock.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
            self.alarms.say(|| format!(
                "refused a TCP connection from {from}: a peer that does not hold the job's key tried to connect (its proof failed: a different FI_OXMR_AUTH_KEY or auth_key?)"
            ));
            c.closed = true;
            return at;
        }
        tracing::debug!(
            "the TCP connection from {} proved the job key",
            c.sock.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string())
        );
        at + PROOF_LEN + self.answer(c, g, true)
    }

    /// Answer the hello `g` of `c` (proven, where a job key is held): the
    /// connection carries frames to us (adopted for ours too where
    /// `Pairs::greeted` says so), or YIELD; a lane if it says it is one.
    /// Takes no bytes of its own (0).
    fn answer(&mut self, c: &mut InConn, g: Greeting, keyed: bool) -> usize {
        let h = g.hello;
        let encode = |kind| self.me.encode_with(kind, keyed, &[0; PROOF_LEN], &[0; PROOF_LEN]);
        let Some(a) = crate::info::addr::parse(&h.name) else {
            tracing::warn!("refusing a TCP connection whose hello names no valid address");
            c.closed = true;
            return 0;
        };
        if g.kind == LANE {
            // (A lane: it carries frames to us alone, is never adopted,
            // and is no new endpoint's hello. It belongs to a link whose
            // connection is up.)
            if !self.mains.contains(&(a, h.epoch)) {
                tracing::warn!(
                    "refusing a TCP lane from {a}: no connection of that endpoint (epoch {:#x}) for it to belong to",
                    h.epoch
                );
                c.closed = true;
                return 0;
            }
            let _ = (&c.sock).write_all(&encode(ACCEPT));
            c.peer = Some(a);
            c.epoch = h.epoch;
            c.lane = true;
            return 0;
        }
        let answer = self.pairs.greeted(c, a, &h);
        let kind = if answer == Answer::Yield { YIELD } else { ACCEPT };
        // (Small, on a fresh socket: taken at once.)
        let _ = (&c.sock).write_all(&encode(kind));
        c.peer = Some(a);
        c.epoch = h.epoch;
        self.fresh.push((a, h.epoch));
        // (A yielded connection carries nothing: the peer moves to the one
        // we opened.)
        c.closed = answer == Answer::Yield;
        0
    }
}

impl Inbox {
    /// Receive at `listener` (the endpoint's, bound at its name).
    pub fn new(
        listener: TcpListener,
        me: Hello,
        wake: std::sync::Arc<crate::sys::Epoll>,
        lands: crate::wire::land::Landings,
    ) -> io::Result<Inbox> {
        listener.set_nonblocking(true)?;
        wake.add(std::os::fd::AsRawFd::as_raw_fd(&listener))?;
        let pairs = Arc::new(Pairs::new(listener.local_addr()?));
        Ok(Inbox {
            listener,
            me,
            conns: Vec::new(),
            pairs,
            frames: VecDeque::new(),
            accepted: 0,
            last: None,
            hellos: Vec::new(),
            popped: 0,
            read: 0,
            polls: 0,
            accepted_at: Instant::now() - ACCEPT_GAP,
            readable: Vec::with_capacity(64),
            chunk: vec![0u8; 64 << 10].into_boxed_slice(),
            spare: Vec::new(),
            wake,
            lands,
            key: None,
            alarms: Alarms::default(),
            bounds: Bounds::default(),
            banned: Vec::new(),
            next_sweep: Instant::now(),
            partial: 0,
            paused: Vec::new(),
            index: std::collections::HashMap::new(),
            index_stale: false,
            held_ids: Vec::new(),
            order: Vec::new(),
        })
    }

    /// The same inbox, its connections held to `bounds`.
    pub fn with_bounds(self, bounds: Bounds) -> Inbox {
        Inbox { bounds, ..self }
    }

    /// The same inbox, taking only connections that prove `key`.
    pub fn with_key(self, key: Option<crate::auth::JobKey>) -> Inbox {
        Inbox { key, ..self }
    }

    /// What this endpoint's links share with the inbox (`Dial::pairs`).
    pub fn pairs(&self) -> Arc<Pairs> {
        self.pairs.clone()
    }

    /// Whether a connection just accepted from `from` is kept: not from a
    /// banned source, and within `Bounds::conn_max` (the oldest connection
    /// still without its hello makes room; if none, the new one goes).
    /// Refusals are said, at most once a second.
    fn admit(&mut self, from: &SocketAddr) -> bool {
        let now = Instant::now();
        self.banned.retain(|&(_, until)| until > now);
        if self.banned.iter().any(|&(ip, _)| same_ip(ip, from.ip())) {
            self.alarms.say(|| {
                format!("refused a TCP connection from {from}: that source made too many refused accesses and is refused for a while (FI_OXMR_REFUSE_BAN_MS)")
            });
            return false;
        }
        if self.conns.len() < self.bounds.conn_max {
            return true;
        }
        let max = self.bounds.conn_max;
        match self.conns.iter_mut().filter(|c| c.peer.is_none() && !c.closed).min_by_key(|c| c.since) {
            Some(old) => {
                let who = old.sock.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
                self.alarms.say(|| {
                    format!("closing the TCP connection from {who}, which has not said its hello: this endpoint holds {max} connections, the most FI_OXMR_TCP_CONN_MAX allows")
                });
                old.closed = true;
                self.sweep();
                true
            }
            None => {
                self.alarms.say(|| {
                    format!("refused a TCP connection from {from}: this endpoint holds {max} connections, the most FI_OXMR_TCP_CONN_MAX allows")
                });
                false
            }
        }
    }

    /// Close the connections whose hello is overdue (`Bounds::hello_wait`),
    /// and, while the budget for unfinished frames is spent, those whose
    /// frame stayed unfinished as long. (Looked at every few polls, at
    /// most every 100 ms.)
    fn sweep_late(&mut self) {
        let now = Instant::now();
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + Duration::from_millis(100);
        let wait = self.bounds.hello_wait;
        let starved = self.partial >= self.bounds.partial_max;
        let mut closed = 0;
        for c in self.conns.iter_mut().filter(|c| !c.closed) {
            let late_hello = c.peer.is_none() && now.duration_since(c.since) >= wait;
            let stuck = starved && c.partial_since.is_some_and(|t| now.duration_since(t) >= wait);
            if late_hello || stuck {
                let who = c.sock.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
                let why = if late_hello {
                    format!("said no hello within {} ms (FI_OXMR_TCP_HELLO_MS)", wait.as_millis())
                } else {
                    format!(
                        "held {} bytes of an unfinished frame for {} ms while the budget for them was spent (FI_OXMR_TCP_PARTIAL_MAX)",
                        c.buf.len(),
                        wait.as_millis()
                    )
                };
                self.alarms.say(|| format!("closing the TCP connection from {who}: it {why}"));
                c.closed = true;
                closed += 1;
            }
        }
        if closed > 0 {
            self.sweep();
        }
    }

    /// Stop (`on`) or resume reading the connections whose hello named
    /// `peer`: what it sent waits in the sockets, and TCP pushes back on
    /// its sender.
    pub fn pause(&mut self, peer: SocketAddr, on: bool) {
        self.paused.retain(|p| *p != peer);
        if on {
            self.paused.push(peer);
        }
    }

    /// Close every connection whose hello named `peer`, drop what they
    /// sent that is not taken yet, and refuse their sources for
    /// `Bounds::ban` (that peer made too many refused accesses: a key
    /// search).
    pub fn ban_peer(&mut self, peer: SocketAddr) {
        let until = Instant::now() + self.bounds.ban;
        let mut ids = Vec::new();
        for c in self.conns.iter_mut().filter(|c| c.peer == Some(peer)) {
            if let Ok(a) = c.sock.peer_addr() {
                self.banned.push((a.ip(), until));
            }
            let _ = c.sock.shutdown(std::net::Shutdown::Both);
            c.closed = true;
            ids.push(c.id);
        }
        let before = self.frames.len();
        self.frames.retain(|f| !ids.contains(&f.2));
        self.popped += (before - self.frames.len()) as u64;
        self.sweep();
    }

    /// Close the connections marked closed: their links learn it (`tie`),
    /// a parked one is no longer taken, and the wake fd lets them go
    /// (a link may hold the socket open a while longer).
    ///
    /// A peer that has lanes to us loses them all, and its other
    /// connections, when any of them ends: a lane carries data of
    /// transfers whose other frames came on another connection, and what
    /// was lost with it would leave those transfers waiting. Closed both
    /// ways (a link of ours may write on one of them), so the peer's own
    /// side fails what is pending too.
    ///
    /// The group is the peer's link: its connection and the lanes it
    /// opened after it, so connections of that endpoint up to its newest
    /// lane (ids count up as connections come). A connection it opened
    /// later (a new link, after the old one was dropped) is spared.
    fn sweep(&mut self) {
        let mut ended: Vec<(SocketAddr, u32, u64)> = Vec::new();
        for c in self.conns.iter().filter(|c| c.closed) {
            let Some(p) = c.peer else { continue };
            let top =
                self.conns.iter().filter(|l| l.lane && l.peer == Some(p) && l.epoch == c.epoch).map(|l| l.id).max();
            if let Some(top) = top.filter(|&top| c.id <= top) {
                ended.push((p, c.epoch, top));
            }
        }
        for c in self.conns.iter_mut().filter(|c| !c.closed) {
            if c.peer.is_some_and(|p| ended.iter().any(|&(a, e, top)| (a, e) == (p, c.epoch) && c.id <= top)) {
                tracing::debug!(
                    "a connection of {} with lanes ended: closing its other connections (what is pending with it fails)",
                    c.peer.map_or_else(String::new, |p| p.to_string())
                );
                let _ = c.sock.shutdown(std::net::Shutdown::Both);
                c.closed = true;
            }
        }
        for c in self.conns.iter().filter(|c| c.closed) {
            c.tie.store(true, Ordering::Release);
            self.wake.remove(c.sock.as_raw_fd());
            self.pairs.forget(c.id);
        }
        let before = self.conns.len();
        self.conns.retain(|c| !c.closed);
        if self.conns.len() != before {
            self.index_stale = true;
            let ids: Vec<u64> = self.conns.iter().map(|c| c.id).collect();
            self.held_ids.retain(|id| ids.contains(id));
        }
        self.partial = self.conns.iter().map(|c| c.buf.len()).sum();
    }

    /// Accept what waits, read what the connections hold, cut frames.
    pub(super) fn poll(&mut self) {
        // (Our links' connections, once their peer answered: read here.)
        for c in self.pairs.take_handed() {
            // (Not in the wake fd: a sleeper would not wake for its frames;
            // the link learns it closed.)
            if self.wake.add(c.sock.as_raw_fd()).is_ok() {
                self.conns.push(c);
                self.index_stale = true;
            } else {
                c.tie.store(true, Ordering::Release);
            }
        }
        // With several connections, one epoll_wait says which sockets (and
        // whether the listener) have something: reading every connection on
        // every poll takes each socket's lock, in contention with the
        // kernel delivering to it (measured: ~6% of a spinning 8-byte
        // pingpong in the kernel's lock slow path). With one (a pair of
        // endpoints shares one), it is read directly: one system call on
        // the arrival's path instead of two (measured, fi_rdm_pingpong 8 B
        // over TCP on loopback, alternating builds: 6.46 -> 5.75 us).
        // Without an epoll_wait, or without any connection, the listener
        // is asked by the clock (below), no system call on most polls.
        let direct = self.conns.len() == 1 && self.conns[0].peer.is_some();
        let by_epoll = !direct && !self.conns.is_empty() && self.wake.readable_now(&mut self.readable).is_ok();
        let listener_fd = std::os::fd::AsRawFd::as_raw_fd(&self.listener);
        self.polls = self.polls.wrapping_add(1);
        let mut accept = by_epoll && self.readable.contains(&listener_fd);
        if !by_epoll && self.polls % CLOCK_EVERY == 1 {
            let now = Instant::now();
            accept = now.duration_since(self.accepted_at) >= ACCEPT_GAP;
            if accept {
                self.accepted_at = now;
            }
        }
        while accept {
            match self.listener.accept() {
                Ok((sock, from)) => {
                    if !self.admit(&from) {
                        continue;
                    }
                    // (Not in the wake fd: a sleeper would not wake for
                    // its frames, so the connection is refused.)
                    if sock.set_nonblocking(true).is_ok()
                        && self.wake.add(std::os::fd::AsRawFd::as_raw_fd(&sock)).is_ok()
                    {
                        let _ = sock.set_nodelay(true);
                        self.accepted += 1;
                        self.conns.push(InConn::new(sock, self.pairs.new_id(), None, Tie::default()));
                        self.index_stale = true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => accept = false,
            }
        }
        if self.conns.is_empty() {
            return;
        }
        if self.polls.is_multiple_of(CLOCK_EVERY) {
            self.sweep_late();
        }
        // (A connection is read when epoll said it is readable, those
        // without their hello too: a stranger that connects and says
        // nothing costs no system call per poll. And those that stopped at
        // a barrier, whose bytes after it wait. Over the budget for
        // unfinished frames, one that holds such a frame waits: TCP pushes
        // back on its sender.)
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        if by_epoll {
            if std::mem::take(&mut self.index_stale) {
                self.index.clear();
                self.index.extend(self.conns.iter().enumerate().map(|(i, c)| (c.sock.as_raw_fd(), i)));
            }
            order.extend(self.readable.iter().filter_map(|fd| self.index.get(fd).copied()));
            for id in &self.held_ids {
                order.extend(self.conns.iter().position(|c| c.id == *id));
            }
            order.sort_unstable();
            order.dedup();
        } else {
            order.extend(0..self.conns.len());
        }
        let paused = &self.paused;
        let look = |c: &InConn| paused.is_empty() || !c.peer.is_some_and(|p| paused.contains(&p));
        // (Bytes of unfinished frames held, kept as the connections are
        // read, and the budget.)
        let mut partial = self.partial;
        let budget = self.bounds.partial_max;
        let mut starved = false;
        // (Kept between polls: an array here would be zeroed on every one.)
        let chunk = &mut self.chunk[..];
        // Connections whose hello arrived in this poll.
        let mut fresh: Vec<(SocketAddr, u32)> = Vec::new();
        // The endpoints we have a connection (not a lane) with, for the
        // lanes' hellos (only when some hello is still to come).
        let mains: Vec<(SocketAddr, u32)> = if order.iter().any(|&i| self.conns[i].peer.is_none()) {
            self.conns.iter().filter(|c| !c.lane && !c.closed).filter_map(|c| c.peer.map(|p| (p, c.epoch))).collect()
        } else {
            Vec::new()
        };
        let mut to = Cuts {
            frames: &mut self.frames,
            spare: &mut self.spare,
            read: &mut self.read,
            lands: &self.lands,
            stopped: false,
        };
        let mut any_closed = false;
        let held_ids = &mut self.held_ids;
        for &i in &order {
            let c = &mut self.conns[i];
            if !look(c) {
                continue;
            }
            held_ids.retain(|id| *id != c.id);
            let held_before = c.buf.len();
            if partial >= budget && held_before > 0 && c.land.is_none() && !c.held {
                starved = true;
                continue;
            }
            to.stopped = false;
            // (Bytes held after a barrier are cut first, before any read:
            // the engine has taken the barrier since.)
            if std::mem::take(&mut c.held) && c.land.is_none() {
                if let Some(from) = c.peer {
                    match cut(&c.buf, from, c.id, &mut to, &mut c.land) {
                        Some(at) => {
                            c.buf.drain(..at);
                        }
                        None => c.closed = true,
                    }
                }
                if to.stopped || c.closed {
                    c.held = to.stopped;
                    if c.held {
                        held_ids.push(c.id);
                    }
                    any_closed |= c.closed;
                    continue;
                }
            }
            // (A frame too long, cut straight from a read below.)
            let mut refused = false;
            // (Bytes read into our buffers from it in this poll.)
            let mut took = 0;
            loop {
                // A payload on its way to its landing zone: read straight
                // into it (or, if the engine forgot the zone meanwhile,
                // read it and drop it).
                if let (Some(l), Some(from)) = (&mut c.land, c.peer) {
                    let live = to.lands.live(from, l.key, l.gen);
                    let got = if live {
                        read_into(&c.sock, &l.dest, l.left)
                    } else {
                        let m = l.left.min(chunk.len());
                        (&c.sock).read(&mut chunk[..m])
                    };
                    match got {
                        Ok(0) => {
                            c.closed = true;
                            break;
                        }
                        Ok(k) => {
                            let short = k < l.left;
                            skip(&mut l.dest, k);
                            l.left -= k;
                            if l.left == 0 {
                                let l = c.land.take().expect("matched above");
                                to.frames.push_back((l.head, from, c.id, l.n));
                                *to.read += 1;
                            }
                            // (A short read emptied the socket: the next
                            // poll reads again, no EAGAIN read now.)
                            if short {
                                break;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            c.closed = true;
                            break;
                        }
                    }
                    continue;
                }
                let got = (&c.sock).read(chunk);
                if let Ok(n) = got {
                    took += n;
                }
                // (A short read emptied the socket: no EAGAIN read after
                // it, the next poll reads again.)
                let short = matches!(got, Ok(n) if n > 0 && n < chunk.len());
                match got {
                    Ok(0) => {
                        c.closed = true;
                        break;
                    }
                    // The hello done: cut the frames from what was read
                    // (straight from the read when nothing is held back),
                    // keep only the rest.
                    Ok(n) => match c.peer {
                        Some(from) if c.buf.is_empty() => match cut(&chunk[..n], from, c.id, &mut to, &mut c.land) {
                            Some(at) => c.buf.extend_from_slice(&chunk[at..n]),
                            None => {
                                refused = true;
                                break;
                            }
                        },
                        Some(from) => {
                            c.buf.extend_from_slice(&chunk[..n]);
                            match cut(&c.buf, from, c.id, &mut to, &mut c.land) {
                                Some(at) => {
                                    c.buf.drain(..at);
                                }
                                None => {
                                    refused = true;
                                    break;
                                }
                            }
                        }
                        None => c.buf.extend_from_slice(&chunk[..n]),
                    },
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        c.closed = true;
                        break;
                    }
                }
                if short || refused || to.stopped {
                    break;
                }
                // (The budget spent: the rest of this connection's bytes
                // wait in its socket.)
                if c.land.is_none() && partial + c.buf.len() >= budget + held_before {
                    starved = true;
                    break;
                }
                // (At most `POLL_READ_MAX` of one connection per poll: the
                // frames cut wait for the engine, which may pause their
                // sender, before anything more is read; a sender as fast as
                // we read must not fill memory in one poll.)
                if took >= POLL_READ_MAX {
                    break;
                }
            }
            // (Ended by the peer: said below if it ended in the middle of
            // something, unless the bytes it sent are refused anyway.)
            let ended = std::mem::take(&mut c.closed);
            c.closed = refused;
            let mut at = 0;
            if c.peer.is_none() && !c.closed {
                let mut g = Greeter {
                    me: &self.me,
                    pairs: &self.pairs,
                    key: self.key.as_ref(),
                    alarms: &mut self.alarms,
                    mains: &mains,
                    fresh: &mut fresh,
                };
                at = g.step(c);
            }
            if let (Some(from), false, true, false) = (c.peer, c.closed, c.land.is_none(), to.stopped) {
                match cut(&c.buf[at..], from, c.id, &mut to, &mut c.land) {
                    Some(n) => at += n,
                    None => c.closed = true,
                }
            }
            c.held = to.stopped;
            if c.closed {
                c.buf.clear();
                c.land = None;
            } else {
                c.buf.drain(..at);
            }
            if ended && c.peer.is_none() && c.challenged.is_some() {
                let from = c.sock.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
                self.alarms.say(|| {
                    format!("a peer at {from} that does not hold the job's key tried to connect: it left without proving it (a different FI_OXMR_AUTH_KEY or auth_key?); refused")
                });
                c.challenged = None;
            }
            if ended && !c.closed && (!c.buf.is_empty() || c.land.is_some()) {
                match c.peer {
                    None => tracing::warn!(
                        "closing a TCP connection that ended inside its hello ({} of {HELLO_LEN} bytes): not an oxmr peer, or one that stopped while connecting",
                        c.buf.len()
                    ),
                    Some(from) => tracing::warn!(
                        "the TCP connection from {from} ended inside a frame ({} bytes of it): the peer stopped in the middle of a send",
                        c.buf.len() + c.land.as_ref().map_or(0, |l| l.n - l.left)
                    ),
                }
                c.buf.clear();
                c.land = None;
            }
            c.closed |= ended;
            match (c.buf.is_empty(), c.partial_since) {
                (true, Some(_)) => c.partial_since = None,
                (false, None) => c.partial_since = Some(Instant::now()),
                _ => {}
            }
            partial = (partial + c.buf.len()).saturating_sub(held_before);
            if c.held {
                held_ids.push(c.id);
            }
            any_closed |= c.closed;
        }
        self.order = order;
        self.partial = partial;
        if starved {
            self.alarms.say(|| {
                format!(
                    "TCP connections hold {partial} bytes of unfinished frames, the most FI_OXMR_TCP_PARTIAL_MAX allows: those that hold one are not read until the others are done"
                )
            });
        }
        // A hello of another epoch from an address we had a connection
        // from: the endpoint there was replaced (closed and reopened, or
        // its process restarted), and the new connection replaces the old
        // one. Every hello goes up (`take_hellos`): the engine fails what
        // it had pending with an endpoint of another epoch there.
        for (a, epoch) in fresh {
            let mut replaced = false;
            for c in self.conns.iter_mut().filter(|c| c.peer == Some(a) && c.epoch != epoch && !c.closed) {
                c.closed = true;
                replaced = true;
            }
            if replaced {
                tracing::warn!(
                    "a new endpoint (epoch {epoch:#x}) at {a} connected: closing the connection of the one before it"
                );
                any_closed = true;
            }
            self.hellos.push((a, epoch));
        }
        // (Nothing closed: nothing to sweep, and no pass over every
        // connection.)
        if any_closed {
            self.sweep();
        }
    }

    /// Whether a frame waits (reads the sockets).
    pub fn ready(&mut self) -> bool {
        if self.next().is_none() {
            self.poll();
        }
        self.next().is_some()
    }

    /// Where the next frame to hand up is: the first whose sender is not
    /// paused (`pause`: what it sent already waits here, its order kept).
    fn next(&self) -> Option<usize> {
        if self.paused.is_empty() {
            return (!self.frames.is_empty()).then_some(0);
        }
        self.frames.iter().position(|f| !self.paused.contains(&f.1))
    }

    /// Hand one frame to `f(frame, more, sender, landed)`; false when none
    /// waits. `landed`: the payload bytes that went straight to their
    /// landing zone (the frame is then the header alone).
    pub fn pop(&mut self, f: impl FnOnce(&[u8], bool, SocketAddr, usize)) -> bool {
        if !self.ready() {
            return false;
        }
        let Some((mut frame, from, id, landed)) = self.next().and_then(|i| self.frames.remove(i)) else {
            return false;
        };
        self.popped += 1;
        self.last = Some(id);
        f(&frame, self.next().is_some(), from, landed);
        if self.spare.len() < SPARE_MAX {
            frame.clear();
            self.spare.push(frame);
        }
        true
    }

    /// Close the connection of the frame handed up last, and drop the
    /// frames it sent after it (counted as consumed).
    pub fn reject_last(&mut self) {
        let Some(id) = self.last.take() else { return };
        for c in self.conns.iter_mut().filter(|c| c.id == id) {
            c.closed = true;
        }
        let before = self.frames.len();
        self.frames.retain(|f| f.2 != id);
        self.popped += (before - self.frames.len()) as u64;
        self.sweep();
    }

    /// The hellos that arrived since the last call (the sender's address
    /// and epoch): a peer whose epoch changed was replaced.
    pub fn take_hellos(&mut self) -> Vec<(SocketAddr, u32)> {
        std::mem::take(&mut self.hellos)
    }

    /// (Frames handed up, frames read.)
    pub fn positions(&self) -> (u64, u64) {
        (self.popped, self.read)
    }
}
