//! The inbox: an endpoint's listener and every connection it reads
//! (accepted, or handed over by its links), cut into frames; payloads
//! read straight into their landing zones (`wire::land`).
//!
//! Submodules: `frames` (frames cut from a connection's bytes, payloads
//! landed), `hello` (answering a connection's hello, with its proof),
//! `conns` (which connections are kept: admission, deadlines, bans, and
//! the end of a peer's group).

use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

mod conns;
mod frames;
mod hello;

use frames::{cut, read_into, skip, Cuts, Frame, Landing};
use hello::Alarms;
use hello::Greeter;

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
    pub(super) closed_by_inbox: ClosedFlag,
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

    pub(super) fn new(
        sock: TcpStream,
        id: u64,
        peer: Option<(SocketAddr, u32)>,
        closed_by_inbox: ClosedFlag,
    ) -> InConn {
        InConn {
            sock,
            buf: Vec::new(),
            peer: peer.map(|p| p.0),
            epoch: peer.map_or(0, |p| p.1),
            closed: false,
            id,
            land: None,
            closed_by_inbox,
            held: false,
            lane: false,
            challenged: None,
            since: Instant::now(),
            partial_since: None,
        }
    }
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
    /// Polls that looked at connections (past the idle answer): the
    /// engine's tests count one socket read per progress pass.
    #[cfg(test)]
    pub(crate) reads: u64,
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
const IDLE_CLOCK_EVERY: u32 = 64;

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
            #[cfg(test)]
            reads: 0,
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
    /// Accept what waits, read what the connections hold, cut frames.
    pub(super) fn poll(&mut self) {
        // No connection yet (an endpoint whose peers are all on this host
        // spins here on every empty poll): only the listener can have
        // something, asked by the clock (read every `IDLE_CLOCK_EVERY`th
        // poll: a clock read costs ~30 ns in a VM, as much as the rest of
        // an empty poll); nothing else is touched.
        if self.conns.is_empty() && !self.pairs.handing() {
            self.polls = self.polls.wrapping_add(1);
            if self.polls % IDLE_CLOCK_EVERY == 1 {
                let now = Instant::now();
                if now.duration_since(self.accepted_at) >= ACCEPT_GAP {
                    self.accepted_at = now;
                    if self.listener_pending() {
                        self.accept_waiting();
                    }
                }
            }
            if self.conns.is_empty() {
                return;
            }
        }
        #[cfg(test)]
        {
            self.reads += 1;
        }
        // (Our links' connections, once their peer answered: read here.)
        for c in self.pairs.take_handed() {
            // (Not in the wake fd: a sleeper would not wake for its frames;
            // the link learns it closed.)
            if self.wake.add(c.sock.as_raw_fd()).is_ok() {
                self.conns.push(c);
                self.index_stale = true;
            } else {
                c.closed_by_inbox.store(true, Ordering::Release);
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
                accept = self.listener_pending();
            }
        }
        if accept {
            self.accept_waiting();
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

    /// Whether a connection waits at the listener, asked of epoll (the
    /// wake fd holds the listener): ~150 ns, where an `accept4` that finds
    /// nothing costs ~3.9 us on this VM (the kernel makes the new socket
    /// and its file before it looks, and frees them after), which a
    /// spinning endpoint paid every `ACCEPT_GAP` (2% of a core).
    /// (`readable`: scratch here; a poll that reads it by epoll refills it.)
    fn listener_pending(&mut self) -> bool {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.listener);
        // (An epoll that fails: asked of accept4 itself, as before.)
        self.wake.readable_now(&mut self.readable).is_err() || self.readable.contains(&fd)
    }

    /// Accept the connections waiting at the listener (those it admits).
    fn accept_waiting(&mut self) {
        let mut accept = true;
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
                        self.conns.push(InConn::new(sock, self.pairs.new_id(), None, ClosedFlag::default()));
                        self.index_stale = true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => accept = false,
            }
        }
    }

    /// Whether a frame waits (reads the sockets).
    #[inline]
    /// Whether nothing was read and no connection is open or being handed
    /// over: `ready` would read nothing but its clock.
    pub fn idle(&self) -> bool {
        self.frames.is_empty() && self.conns.is_empty() && !self.pairs.handing()
    }

    pub fn ready(&mut self) -> bool {
        // (In line, the common case of an endpoint whose peers are all on
        // this host: nothing read, no connection, and the clock not due.)
        if self.idle() {
            self.polls = self.polls.wrapping_add(1);
            if self.polls % IDLE_CLOCK_EVERY != 1 {
                return false;
            }
            self.polls = self.polls.wrapping_sub(1);
        }
        if self.next().is_none() {
            self.poll();
        }
        self.next().is_some()
    }

    /// Where the next frame to hand up is: the first whose sender is not
    /// paused (`pause`: what it sent already waits here, its order kept).
    #[inline]
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

    /// Whether hellos arrived since the last `take_hellos`.
    pub fn has_hellos(&self) -> bool {
        !self.hellos.is_empty()
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
