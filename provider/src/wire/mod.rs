//! The wires: how frames reach a peer's endpoint.
//!
//! The protocol engine drives every wire through one interface: a
//! per-endpoint [`Inbox`] (where frames arrive) and a per-peer [`Link`]
//! (where frames to one peer go, and through which the peer's memory is
//! copied). Both are dispatched statically (an enum of wires, no dynamic
//! dispatch on the data path); a send answers a typed [`WireError`], never
//! an errno to match, and a copy of the peer's memory either completes or
//! answers [`Copied::Push`] (the engine's PULL -> DATA -> ACK path).
//!
//! - `shm`: the same-host wire (shared-memory queues, CMA copies, and the
//!   shared copies offload, `shm::share`, which only shm links offer).
//! - `tcp`: TCP to peers on other hosts (and to every peer under
//!   FI_OXMR_WIRE=tcp); copies always push.
//!
//! Which wire reaches a peer is `Dial::route`: by default (FI_OXMR_WIRE=
//! auto) shared memory for a peer whose address is one of this network
//! namespace's own, TCP for any other.
//! - `cm`: the FI_EP_MSG connection handshake, on a TCP connection of its
//!   own whichever wire carries the data.
//! - `loopback` (tests only): in-process queues whose copies always push.

pub mod cm;
pub mod land;
#[cfg(test)]
pub mod loopback;
pub mod shm;
pub mod tcp;
mod types;

use std::io;
use std::net::{IpAddr, SocketAddr};

pub use crate::config::Wire;
pub use land::{Head as LandHead, Landings};
pub use tcp::DomainWires;
pub(crate) use types::FRAME_FLOOR;
pub use types::{Arrival, Copied, LinkState, OpenError, Proof, Props, WireError};

/// The per-user directory this user's processes share files in (the shm
/// wire's queues live there; named AVs keep their tables there too), and
/// its checked-file helpers.
pub use shm::dir as user_dir;
pub use shm::region::KeyMismatch;
pub use shm::share::{Copies, SharedCopy, Span};
/// A listener of connections (an endpoint's, a passive endpoint's): the
/// objects make it, the wires read it.
pub use std::net::TcpListener as Listener;
/// A TCP hello's bytes, for tests that speak the wire by hand.
#[cfg(test)]
pub(crate) use tcp::hello_bytes;
/// What an endpoint's TCP connections may make it hold (`tcp::Bounds`).
pub use tcp::Bounds;
/// How long a TCP connect may stay in progress (the engine says so when one fails).
pub(crate) use tcp::CONNECT_WAIT;
#[cfg(test)]
pub(crate) use tcp::HELLO_LEN;

/// How an endpoint reaches its peers: the wire for each (FI_OXMR_WIRE,
/// and under `auto` this network namespace's own addresses), who it
/// says it is, and what each wire is under its configuration.
#[derive(Clone, Debug)]
pub struct Dial {
    pub wire: Wire,
    pub hello: tcp::Hello,
    /// The addresses of this network namespace's interfaces when the dial
    /// was made (`auto`: a peer at one of them, or at a loopback address,
    /// is on this host and gets shared memory).
    local: std::sync::Arc<[IpAddr]>,
    /// How TCP links send (the domain's ring for SEND_ZC, its counters).
    tcp: tcp::TcpSend,
    /// The endpoint's TCP connections, shared with its inbox (one per pair
    /// of endpoints: `tcp::Pairs`); None without a TCP inbox.
    pairs: Option<std::sync::Arc<tcp::Pairs>>,
    /// What each wire is (its links start from these).
    shm_props: Props,
    tcp_props: Props,
}

impl Dial {
    /// The dial of the endpoint named `name` (its epoch and process), its
    /// wires as the default configuration makes them.
    pub fn new(wire: Wire, name: &SocketAddr, epoch: u32) -> Dial {
        let mut n = [0u8; 28];
        let e = crate::info::addr::encode(name);
        n[..e.len()].copy_from_slice(&e);
        // (Where this process has no shared-memory wire, neither has any
        // process of this user: their directory is the one refused.)
        let wire = match wire {
            Wire::Auto if shm::dir::Dir::user().is_err() => Wire::Tcp,
            w => w,
        };
        let local = match wire {
            Wire::Auto => crate::sys::ifaddrs().into_iter().map(|i| i.ip).collect(),
            _ => std::sync::Arc::from([]),
        };
        Dial {
            wire,
            hello: tcp::Hello { version: tcp::VERSION, name: n, epoch, pid: std::process::id() },
            local,
            tcp: tcp::TcpSend::default(),
            pairs: None,
            shm_props: shm::props(crate::config::EAGER_MAX),
            tcp_props: tcp::props(crate::config::TCP_EAGER_MAX),
        }
    }

    /// The dial of an endpoint's engine: as `new`, its wires as `cfg`
    /// makes them, its TCP links sending on the domain's ring and counting
    /// into its counters (`wires`), and proving `key`.
    pub fn for_endpoint(
        cfg: &crate::config::Config,
        name: &SocketAddr,
        epoch: u32,
        wires: &DomainWires,
        key: Option<crate::auth::JobKey>,
    ) -> Dial {
        let d = Dial::new(cfg.wire, name, epoch).with_tcp(tcp::TcpSend {
            ring: wires.tcp_ring.clone(),
            stats: wires.tcp_stats.clone(),
            copied_off: cfg.tcp_zc_copied,
            lanes: cfg.tcp_lanes,
            key,
        });
        Dial { shm_props: shm::props(cfg.eager_max), tcp_props: tcp::props(cfg.tcp_eager_max), ..d }
    }

    /// The same dial, its TCP links sharing connections with the inbox
    /// whose `pairs` these are (`Inbox::pairs`).
    pub fn with_pairs(self, pairs: Option<std::sync::Arc<tcp::Pairs>>) -> Dial {
        Dial { pairs, ..self }
    }

    /// The same dial, its TCP links sending as `tcp` says.
    pub fn with_tcp(self, tcp: tcp::TcpSend) -> Dial {
        Dial { tcp, ..self }
    }

    /// The job key every link proves and demands, whichever wire carries
    /// it (one key per endpoint: the TCP side's).
    pub fn key(&self) -> Option<&crate::auth::JobKey> {
        self.tcp.key.as_ref()
    }

    /// The wire that carries frames to and from the endpoint named `to`:
    /// shared memory or TCP (never `Auto`). A frame that arrives on the
    /// other wire is not taken as that endpoint's (`Engine::sent_by`).
    #[inline(always)]
    pub fn route(&self, to: &SocketAddr) -> Wire {
        match self.wire {
            Wire::Auto if is_local(to.ip(), &self.local) => Wire::Shm,
            Wire::Auto => Wire::Tcp,
            w => w,
        }
    }

    /// What the wire `w` (a `route`) is.
    pub fn props(&self, w: Wire) -> &Props {
        match w {
            Wire::Tcp => &self.tcp_props,
            Wire::Shm | Wire::Auto => &self.shm_props,
        }
    }

    /// FI_OXMR_WIRE as this dial took it, for log lines.
    pub fn setting(&self) -> &'static str {
        match self.wire {
            Wire::Auto => "auto",
            Wire::Shm => "shm",
            Wire::Tcp => "tcp",
        }
    }

    /// Why opening a link to `to` found no endpoint there (`e`: opening
    /// its queue, or connecting), and what to do about it.
    pub fn unreachable_why(&self, to: &SocketAddr, e: &io::Error) -> String {
        unreachable_why(to, e, self.route(to))
    }
}

/// `Dial::unreachable_why`, over the wire `wire`.
fn unreachable_why(to: &SocketAddr, e: &io::Error, wire: Wire) -> String {
    let local = to.ip().is_loopback()
        || crate::info::addr::local_ifaces(None).iter().any(|i| i.ip == to.ip())
        || crate::info::addr::route_source(to).is_some_and(|ip| ip == to.ip());
    if wire == Wire::Tcp {
        return format!(
            "no oxmr endpoint answers at {to} over TCP ({e}): is the peer running, its endpoint still open, and its address reachable from here (firewall, route)?"
        );
    }
    if !local {
        return format!(
            "no oxmr endpoint at {to}: it is not an address of this host, and FI_OXMR_WIRE=shm reaches only this host's endpoints; unset FI_OXMR_WIRE (auto: TCP to other hosts) or set it to tcp"
        );
    }
    let mut others = shm::region::endpoints_on_port(to.port());
    others.retain(|a| a != &to.to_string());
    if others.is_empty() {
        format!("no oxmr endpoint at {to} on this host ({e}): is the peer running, and its endpoint still open?")
    } else {
        format!(
            "no oxmr endpoint at {to} on this host ({e}), but {} listens on that port: an endpoint is reached only at the address it was opened on; send there, or open the peer's endpoint on {} (fabtests: -s {})",
            others.join(", "),
            to.ip(),
            to.ip()
        )
    }
}

/// Whether `ip` is on this host: a loopback address (all of 127.0.0.0/8
/// and ::1 reach this network namespace) or one of `local`.
fn is_local(ip: IpAddr, local: &[IpAddr]) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    ip.is_loopback() || local.contains(&ip)
}

/// A link to one peer's endpoint: what its wire is (`props`, read from
/// this field on the data path) and the wire's own link.
pub struct Link {
    props: Props,
    via: Carrier,
}

/// The wire's own link.
// (The shm queue inline, not boxed: it is the same-host data path, one
// per peer, and a box would add a pointer chase to every frame.)
#[allow(clippy::large_enum_variant)]
enum Carrier {
    /// The peer's shared-memory queue.
    Shm(shm::region::Region),
    /// The connection that carries our frames to the peer (one per pair of
    /// endpoints: ours, or the one it opened to us).
    Tcp(tcp::Link),
    #[cfg(test)]
    Loop(std::sync::Arc<loopback::Queue>),
}

impl Link {
    /// Open a link to the endpoint named `to`, over the wire `dial` says.
    pub fn open(to: &SocketAddr, dial: &Dial) -> Result<Link, OpenError> {
        #[cfg(test)]
        if let Some(q) = loopback::Queue::find(to) {
            return Ok(Link { props: loopback::PROPS, via: Carrier::Loop(q) });
        }
        let props = *dial.props(dial.route(to));
        if props.wire == Wire::Tcp {
            // (A peer on this host, reached over the kernel's loopback
            // path, is sent larger frames: `tcp::TCP_FRAME`.)
            let max_frame = if is_local(to.ip(), &dial.local) { tcp::LOCAL_FRAME } else { props.max_frame };
            return match tcp::Link::open(to, &dial.hello, &dial.tcp, dial.pairs.as_ref()) {
                Ok(t) => Ok(Link { props: Props { spreads: t.spreads(), max_frame, ..props }, via: Carrier::Tcp(t) }),
                // (Refused at once: nothing listens at the peer's port.)
                Err(OpenError::Unreachable(e)) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    Err(OpenError::ConnectRefused)
                }
                Err(e) => Err(e),
            };
        }
        let region = shm::region::Region::open(to, dial.key()).map_err(|e| {
            if let Some(m) = shm::region::KeyMismatch::of(&e) {
                return OpenError::Key(m);
            }
            if let Some(r) = shm::dir::Refused::of(&e) {
                return OpenError::Refused(r.to_string());
            }
            if let Some(owner) = shm::region::OwnerGone::of(&e) {
                return OpenError::Dead { owner };
            }
            match e.get_ref().and_then(|x| x.downcast_ref::<shm::region::VersionMismatch>()) {
                Some(v) => OpenError::Version { theirs: v.theirs, ours: v.ours },
                None => OpenError::Unreachable(e),
            }
        })?;
        // (A queue left by a process that died without closing it: nobody
        // reads it, and anything pushed there would be lost.)
        if !region.closed() && !region.reachable() {
            return Err(OpenError::Dead { owner: region.owner() });
        }
        Ok(Link { props, via: Carrier::Shm(region) })
    }

    /// What this link's wire is.
    #[inline]
    pub fn props(&self) -> &Props {
        &self.props
    }

    /// Send one frame, given in parts (header, body...): all or nothing.
    #[inline(always)]
    pub fn send(&self, parts: &[&[u8]]) -> Result<(), WireError> {
        match &self.via {
            Carrier::Shm(r) => r.push(parts).map_err(|e| match e.raw_os_error() {
                Some(libc::EAGAIN) => WireError::Full,
                Some(libc::ECONNRESET) => WireError::Closed,
                _ => WireError::Io(e),
            }),
            Carrier::Tcp(t) => t.send(parts),
            #[cfg(test)]
            Carrier::Loop(q) => q.send(parts),
        }
    }

    /// Send one frame whose order among the link's frames does not matter
    /// (DATA answering a PULL): a link that `spreads` may put it on another
    /// connection to the same peer (a lane, FI_OXMR_TCP_LANES), `Full`
    /// when every one has something queued; other links send it as `send`.
    pub fn send_spread(&self, parts: &[&[u8]]) -> Result<(), WireError> {
        match &self.via {
            Carrier::Tcp(t) => t.send_spread(parts),
            _ => self.send(parts),
        }
    }

    /// Whether `send_spread` would answer `Full` now (every connection that
    /// takes such frames has something queued; written as far as it goes).
    pub fn spread_full(&self) -> bool {
        match &self.via {
            Carrier::Tcp(t) => t.spread_full(),
            _ => false,
        }
    }

    /// Copy the peer's `remote` buffers into our `local` ones.
    pub fn read(&self, local: &[(usize, usize)], remote: &[(usize, usize)]) -> Copied {
        match &self.via {
            Carrier::Shm(r) => copied(shm::cma::read_from(r.owner(), local, remote)),
            _ => Copied::Push,
        }
    }

    /// Copy our `local` buffers into the peer's `remote` ones.
    pub fn write(&self, local: &[(usize, usize)], remote: &[(usize, usize)]) -> Copied {
        match &self.via {
            Carrier::Shm(r) => copied(shm::cma::write_to(r.owner(), local, remote)),
            _ => Copied::Push,
        }
    }

    /// The most iovs a side of one `read`/`write` takes in one go (more
    /// still work, in several calls).
    pub fn max_iovs(&self) -> usize {
        shm::cma::IOV_MAX
    }

    /// The epoch of the endpoint this link reached (a new endpoint at the
    /// same address has another).
    pub fn epoch(&self) -> u32 {
        match &self.via {
            Carrier::Shm(r) => r.epoch(),
            Carrier::Tcp(t) => t.epoch(),
            #[cfg(test)]
            Carrier::Loop(q) => q.epoch(),
        }
    }

    /// Whether the peer closed its endpoint (one load of its queue's
    /// header on shm: cheap enough for the data path; `state` also asks
    /// whether its process lives).
    pub fn closed(&self) -> bool {
        match &self.via {
            Carrier::Shm(r) => r.closed(),
            Carrier::Tcp(t) => t.closed(),
            #[cfg(test)]
            Carrier::Loop(q) => q.closed(),
        }
    }

    /// Where the link stands now (a liveness check of the peer's process
    /// on shm: for the periodic sweep, not the data path).
    pub fn state(&self) -> LinkState {
        match &self.via {
            Carrier::Shm(r) if r.closed() => LinkState::Closed,
            Carrier::Shm(r) if !r.reachable() => LinkState::Dead,
            Carrier::Shm(_) => LinkState::Open,
            Carrier::Tcp(t) => t.state(),
            #[cfg(test)]
            Carrier::Loop(q) if q.closed() => LinkState::Closed,
            #[cfg(test)]
            Carrier::Loop(_) => LinkState::Open,
        }
    }

    /// Whether the peer says it has nothing of its own to do (a hint for
    /// sharing work with it: see the shared copies).
    pub fn idle(&self) -> bool {
        match &self.via {
            Carrier::Shm(r) => r.idle(),
            Carrier::Tcp(_) => false,
            #[cfg(test)]
            Carrier::Loop(q) => q.idle(),
        }
    }

    /// The process that owns the peer's endpoint, as the wire itself
    /// records it (shm: the owner in the peer's queue header), not as a
    /// message header claims it: the process every copy reads or writes.
    pub fn owner(&self) -> u32 {
        match &self.via {
            Carrier::Shm(r) => r.owner(),
            Carrier::Tcp(t) => t.owner(),
            #[cfg(test)]
            Carrier::Loop(_) => std::process::id(),
        }
    }

    /// Whether a frame naming process `pid` as its sender may be taken as
    /// this peer's: under `Proof::Owner`, `pid` must own the peer's
    /// endpoint (shm: what its queue file records); under `Proof::Hello`
    /// every frame was checked against its connection's hello already
    /// (`Arrival::via`), and no copy ever uses a pid.
    #[inline]
    pub fn vouches(&self, pid: u32) -> bool {
        match self.props.proof {
            Proof::Hello => true,
            Proof::Owner => self.owner() == pid,
        }
    }

    /// The peer's table of shared copies, where the wire offers them (shm).
    pub fn jobs(&self) -> Option<shm::jobs::JobTable> {
        match &self.via {
            Carrier::Shm(r) => Some(r.jobs()),
            _ => None,
        }
    }

    /// Whether the link's connection is still being set up (TCP: the
    /// connect, or the peer's answer to our hello; frames sent meanwhile
    /// queue; `state` says `Unreachable` if it fails).
    pub fn connecting(&self) -> bool {
        match &self.via {
            Carrier::Tcp(t) => t.connecting(),
            _ => false,
        }
    }

    /// Write what the link queued (a link that `buffers`); whether
    /// something still waits.
    pub fn flush(&self) -> bool {
        match &self.via {
            Carrier::Tcp(t) => t.flush(),
            _ => false,
        }
    }
}

fn copied(r: io::Result<usize>) -> Copied {
    match r {
        Ok(n) => Copied::Done(n),
        // (Memory CMA cannot reach: device/PFN-mapped, secret.)
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Copied::Push,
        Err(e) => Copied::Failed(e),
    }
}

/// An endpoint's inbox, where its peers' frames arrive: its shared-memory
/// queue (the file named after its address) and, when it takes TCP, its
/// listener's connections.
pub struct Inbox {
    shm: Option<shm::region::Region>,
    tcp: Option<tcp::Inbox>,
    #[cfg(test)]
    lo: Option<loopback::Inbox>,
    name: SocketAddr,
    epoch: u32,
    /// The wake fd: readable when a frame (or a TCP connection) may have
    /// arrived; holds the shm doorbell, the TCP listener and its
    /// connections. None when it could not be made.
    wake: Option<std::sync::Arc<crate::sys::Epoll>>,
    /// Whether every wire of this inbox makes `wake` readable on arrival
    /// (false: the loopback wire, an shm queue without a doorbell).
    rings: bool,
    /// Where TCP payloads may land straight from the socket (`land`).
    lands: Landings,
    /// What the queue's wire and the connections' wire are (each frame
    /// `pop` hands up names one).
    shm_props: Props,
    tcp_props: Props,
}

impl Inbox {
    /// Make the inbox of the endpoint named `name`, whose peers are
    /// reached over `wire`: its shared-memory queue, or, where no queue can
    /// be made and the wire is not `shm`, none (the endpoint takes TCP
    /// alone, with a log line: an endpoint never fails for want of its
    /// queue, whose name another process may have taken). With `key`, the
    /// queue proves it to its peers.
    pub fn create(name: &SocketAddr, wire: Wire, key: Option<&crate::auth::JobKey>) -> io::Result<Inbox> {
        let r = match shm::region::Region::create(name, key) {
            Ok(r) => Some(r),
            Err(e) if wire == Wire::Shm => return Err(e),
            Err(e) => {
                // (Without the directory the process said so once, and
                // every peer here is reached over TCP: `Dial::new`.)
                if shm::dir::Dir::user().is_ok() {
                    tracing::warn!(
                        "the endpoint {name} has no shared-memory queue ({e}): it takes TCP alone, and peers on this host reach it only under FI_OXMR_WIRE=tcp"
                    );
                }
                None
            }
        };
        let epoch = r.as_ref().map_or_else(|| crate::sys::random_u32().max(1), |r| r.epoch());
        let wake = crate::sys::Epoll::new().ok().map(std::sync::Arc::new);
        let rings = match (&wake, r.as_ref().map(|r| r.bell_fd())) {
            (Some(w), Some(Some(fd))) => w.add(fd).is_ok(),
            // (TCP alone: its sockets make the wake fd readable.)
            (Some(_), None) => true,
            _ => false,
        };
        Ok(Inbox {
            shm: r,
            tcp: None,
            #[cfg(test)]
            lo: None,
            name: *name,
            epoch,
            wake,
            rings,
            lands: Landings::default(),
            shm_props: shm::props(crate::config::EAGER_MAX),
            tcp_props: tcp::props(crate::config::TCP_EAGER_MAX),
        })
    }

    /// An inbox of the loopback wire alone (tests).
    #[cfg(test)]
    pub fn loopback(name: &SocketAddr) -> io::Result<Inbox> {
        let l = loopback::Inbox::create(name)?;
        let epoch = l.epoch();
        Ok(Inbox {
            shm: None,
            tcp: None,
            lo: Some(l),
            name: *name,
            epoch,
            wake: None,
            rings: false,
            lands: Landings::default(),
            shm_props: loopback::PROPS,
            tcp_props: tcp::props(crate::config::TCP_EAGER_MAX),
        })
    }

    /// An inbox of the TCP wire alone, at `listener` (tests).
    #[cfg(test)]
    pub fn tcp_only(listener: Listener) -> io::Result<Inbox> {
        let name = listener.local_addr()?;
        let epoch = crate::sys::random_u32().max(1);
        let wake = Some(std::sync::Arc::new(crate::sys::Epoll::new()?));
        let mut i = Inbox {
            shm: None,
            tcp: None,
            lo: None,
            name,
            epoch,
            wake,
            rings: true,
            lands: Landings::default(),
            shm_props: shm::props(crate::config::EAGER_MAX),
            tcp_props: tcp::props(crate::config::TCP_EAGER_MAX),
        };
        i.listen(listener, None, tcp::Bounds::default(), crate::config::TCP_EAGER_MAX)?;
        Ok(i)
    }

    /// Take frames over connections too, those `listener` (bound at the
    /// endpoint's name) accepts, from peers that prove `key` where there
    /// is one, within the bounds and limits `cfg` gives.
    pub fn take_connections(
        &mut self,
        listener: Listener,
        key: Option<crate::auth::JobKey>,
        cfg: &crate::config::Config,
    ) -> io::Result<()> {
        self.listen(listener, key, tcp::Bounds::of(cfg), cfg.tcp_eager_max)
    }

    /// `take_connections`, within `bounds`, its TCP frames' eager limit
    /// `eager_max`.
    fn listen(
        &mut self,
        listener: Listener,
        key: Option<crate::auth::JobKey>,
        bounds: tcp::Bounds,
        eager_max: usize,
    ) -> io::Result<()> {
        self.tcp_props = tcp::props(eager_max);
        let hello = Dial::new(Wire::Tcp, &self.name, self.epoch).hello;
        let wake = match &self.wake {
            Some(w) => w.clone(),
            None => std::sync::Arc::new(crate::sys::Epoll::new()?),
        };
        self.tcp = Some(tcp::Inbox::new(listener, hello, wake, self.lands.clone())?.with_key(key).with_bounds(bounds));
        Ok(())
    }

    /// Where the inbox of `name` lives, for log lines.
    pub fn place(name: &SocketAddr) -> String {
        format!("the shared-memory queue {}", shm::region::path_for(name))
    }

    /// This endpoint's epoch (a new one at the same address has another).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Whether a frame waits (one load on shm; TCP reads its sockets).
    pub fn ready(&mut self) -> bool {
        #[cfg(test)]
        if let Some(l) = &self.lo {
            return l.ready();
        }
        self.shm.as_ref().is_some_and(|r| r.ready()) || self.tcp.as_mut().is_some_and(|t| t.ready())
    }

    /// Hand one frame to `f(frame, how)`, `how` saying how it arrived
    /// (`Arrival`: whether another waits behind it, the sender its
    /// connection proved, its payload bytes that landed, its wire); false
    /// when none waits. The frame is consumed even if `f` panics.
    #[inline]
    pub fn pop(&mut self, f: impl FnOnce(&[u8], Arrival<'_>)) -> bool {
        #[cfg(test)]
        if let Some(l) = &mut self.lo {
            let wire = &self.shm_props;
            return l.pop(|m, more| f(m, Arrival { more, last: false, via: None, landed: 0, wire }));
        }
        if let Some(r) = self.shm.as_mut().filter(|r| r.ready()) {
            let wire = &self.shm_props;
            // (Asked before the pop: what the TCP side holds now.)
            let others_idle = self.tcp.as_ref().is_none_or(|t| t.idle());
            return r.pop(|m, more| f(m, Arrival { more, last: !more && others_idle, via: None, landed: 0, wire }));
        }
        match &mut self.tcp {
            Some(t) => {
                let wire = &self.tcp_props;
                t.pop(|m, more, from, landed| f(m, Arrival { more, last: !more, via: Some(&from), landed, wire }))
            }
            None => false,
        }
    }

    /// What the wires this inbox takes frames over are.
    pub fn wires(&self) -> impl Iterator<Item = &Props> {
        [self.shm.as_ref().map(|_| &self.shm_props), self.tcp.as_ref().map(|_| &self.tcp_props)].into_iter().flatten()
    }

    /// The TCP connections this inbox shares with the endpoint's links
    /// (None: it takes no TCP).
    pub fn pairs(&self) -> Option<std::sync::Arc<tcp::Pairs>> {
        self.tcp.as_ref().map(|t| t.pairs())
    }

    /// The landing zones of this inbox's TCP connections (the engine adds
    /// and forgets them: `land`).
    pub fn landings(&self) -> Landings {
        self.lands.clone()
    }

    /// Polls of the TCP inbox that looked at its connections (tests).
    #[cfg(test)]
    pub(crate) fn tcp_reads(&self) -> u64 {
        self.tcp.as_ref().map_or(0, |t| t.reads)
    }

    /// (frames consumed, frames sent so far, over the wires): everything
    /// sent before this call has been consumed once the first reaches the
    /// second.
    pub fn positions(&self) -> (u64, u64) {
        let mut p = self.shm.as_ref().map_or((0, 0), |r| r.positions());
        if let Some(t) = &self.tcp {
            let (a, b) = t.positions();
            p = (p.0 + a, p.1 + b);
        }
        #[cfg(test)]
        if let Some(l) = &self.lo {
            let (a, b) = l.positions();
            p = (p.0 + a, p.1 + b);
        }
        p
    }

    /// Close the connection the frame `pop` handed up last came on (TCP:
    /// it sent a frame that does not hold together, or that names another
    /// sender), dropping what else it sent; nothing on other wires.
    pub fn reject_last(&mut self) {
        if let Some(t) = &mut self.tcp {
            t.reject_last();
        }
    }

    /// Stop (`on`) or resume reading what `peer` sends over TCP, so that
    /// TCP pushes back on it (the engine holds as much of its as it may);
    /// on other wires, nothing.
    pub fn pause(&mut self, peer: SocketAddr, on: bool) {
        if let Some(t) = &mut self.tcp {
            t.pause(peer, on);
        }
    }

    /// Close every TCP connection whose hello named `peer`, dropping what
    /// they sent that was not taken yet, and refuse their sources for a
    /// while (it made too many refused accesses); on other wires, nothing
    /// (a same-host peer is this user's: docs/security.md).
    pub fn ban_peer(&mut self, peer: SocketAddr) {
        if let Some(t) = &mut self.tcp {
            t.ban_peer(peer);
        }
    }

    /// Whether hellos wait for `take_hellos` (one look, no read).
    #[inline]
    pub fn has_hellos(&self) -> bool {
        self.tcp.as_ref().is_some_and(|t| t.has_hellos())
    }

    /// The hellos of TCP connections accepted since the last call (the
    /// sender's address and epoch: a new epoch at an address is a new
    /// endpoint there).
    pub fn take_hellos(&mut self) -> Vec<(SocketAddr, u32)> {
        self.tcp.as_mut().map_or_else(Vec::new, |t| t.take_hellos())
    }

    /// Tell peers whether we have work of our own waiting (see
    /// `Link::idle`).
    pub fn set_idle(&self, idle: bool) {
        if let Some(r) = &self.shm {
            r.set_idle(idle);
        }
        #[cfg(test)]
        if let Some(l) = &self.lo {
            l.set_idle(idle);
        }
    }

    /// The periodic repair of the queue (shm: skip a cell whose producer
    /// died before publishing it).
    pub fn unstick(&mut self) {
        if let Some(r) = &mut self.shm {
            r.unstick();
        }
    }

    /// The fd that becomes readable when a frame may have arrived, if
    /// every wire of this inbox rings it (see `set_sleeping`); None: a
    /// sleeper must poll.
    pub fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        self.wake.as_ref().filter(|_| self.rings).map(|w| w.fd())
    }

    /// A thread is about to sleep on `wake_fd` (`true`; it then looks for
    /// frames once more, `ready`) or woke (`false`). The shm queue's
    /// producers ring its doorbell only while a thread sleeps; TCP sockets
    /// are readable anyway.
    pub fn set_sleeping(&self, on: bool) {
        if let Some(r) = &self.shm {
            r.set_sleeping(on);
        }
    }

    /// Our shared copies, where the wire offers them (shm).
    pub fn copies(&self) -> Option<Copies> {
        self.shm.as_ref().map(|r| Copies::new(r.jobs()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcp::TcpSend;

    #[test]
    fn the_wire_is_chosen_per_peer_by_its_address() {
        let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let auto = Dial::new(Wire::Auto, &me, 1);
        let at = |s: &str| -> SocketAddr { s.parse().unwrap() };
        for local in ["127.0.0.1:9", "127.77.0.1:9", "[::1]:9", "[::ffff:127.0.0.1]:9"] {
            assert_eq!(auto.route(&at(local)), Wire::Shm, "{local} is on this host");
        }
        for iface in crate::sys::ifaddrs() {
            let a = SocketAddr::new(iface.ip, 9);
            assert_eq!(auto.route(&a), Wire::Shm, "{a} is an address of {}", iface.name);
        }
        // (Documentation ranges: never an address of a test machine.)
        for far in ["198.51.100.7:9", "203.0.113.1:9", "[2001:db8::1]:9"] {
            assert_eq!(auto.route(&at(far)), Wire::Tcp, "{far} is another host");
        }
        assert_eq!(Dial::new(Wire::Tcp, &me, 1).route(&at("127.0.0.1:9")), Wire::Tcp, "tcp: even this host");
        assert_eq!(Dial::new(Wire::Shm, &me, 1).route(&at("198.51.100.7:9")), Wire::Shm, "shm: every peer");
    }

    #[test]
    fn an_endpoint_whose_queue_names_are_all_taken_takes_tcp_alone_unless_the_wire_is_shm() {
        let port = Listener::bind("127.0.0.1:0").unwrap();
        let name = port.local_addr().unwrap();
        let dir = shm::dir::Dir::user().expect("this user's directory");
        let names: Vec<String> = shm::region::queue_names(&name).collect();
        for n in &names {
            std::fs::create_dir(dir.path().join(n)).unwrap();
        }
        let auto = Inbox::create(&name, Wire::Auto, None);
        let shm_only = Inbox::create(&name, Wire::Shm, None);
        for n in &names {
            std::fs::remove_dir(dir.path().join(n)).unwrap();
        }
        let mut i = auto.expect("a taken name never fails the endpoint");
        assert!(i.shm.is_none() && i.copies().is_none(), "no queue");
        i.take_connections(port, None, &crate::config::Config::default()).expect("its listener");
        assert!(i.wake_fd().is_some(), "its TCP sockets ring the wake fd");
        assert!(shm_only.is_err(), "FI_OXMR_WIRE=shm: no queue, no endpoint");
    }

    #[test]
    fn a_same_host_link_opens_only_where_both_sides_hold_the_same_key() {
        let k = crate::auth::JobKey::new(b"the job's key, 32 bytes of it...").unwrap();
        let (keyed_at, plain_at): (SocketAddr, SocketAddr) =
            ("127.0.0.1:17".parse().unwrap(), "127.0.0.1:18".parse().unwrap());
        let keyed = shm::region::Region::create(&keyed_at, Some(&k)).unwrap();
        let plain = shm::region::Region::create(&plain_at, None).unwrap();
        let me: SocketAddr = "127.0.0.1:19".parse().unwrap();
        let with_key = Dial::new(Wire::Shm, &me, 1).with_tcp(TcpSend { key: Some(k.clone()), ..TcpSend::default() });
        let without = Dial::new(Wire::Shm, &me, 1);
        assert!(Link::open(&keyed_at, &with_key).is_ok(), "the same key");
        assert!(Link::open(&plain_at, &without).is_ok(), "no key on either side");
        let refused = |to, dial| match Link::open(to, dial) {
            Err(OpenError::Key(m)) => m,
            Err(e) => panic!("refused, but not for the key: {e:?}"),
            Ok(_) => panic!("opened"),
        };
        assert_eq!(refused(&plain_at, &with_key), KeyMismatch::NoProof);
        assert_eq!(refused(&keyed_at, &without), KeyMismatch::Keyed);
        drop((keyed, plain));
    }

    #[test]
    fn a_peer_of_another_wire_version_is_refused_naming_both() {
        let addr: SocketAddr = "127.0.0.1:7".parse().unwrap();
        let own = shm::region::Region::create(&addr, None).unwrap();
        let dial = Dial::new(Wire::Shm, &"127.0.0.1:8".parse().unwrap(), 1);
        let ours = match Link::open(&addr, &dial) {
            Ok(l) => {
                assert!(l.epoch() != 0 && !l.closed(), "same version: open");
                drop(l);
                // (The version this build speaks, read back from a refusal.)
                own.set_version_for_test(99);
                match Link::open(&addr, &dial) {
                    Err(OpenError::Version { theirs, ours }) => {
                        assert_eq!(theirs, 99);
                        ours
                    }
                    Err(e) => panic!("refused, but not for its version: {e:?}"),
                    Ok(_) => panic!("a queue of wire version 99 was opened"),
                }
            }
            Err(e) => panic!("a queue of this build's version was refused: {e:?}"),
        };
        assert_ne!(ours, 99);
        drop(own);
    }

    #[test]
    fn a_send_to_nobody_says_why_and_what_to_do() {
        let e = std::io::Error::from_raw_os_error(libc::ENOENT);
        let there: SocketAddr = "127.0.0.1:40123".parse().unwrap();
        let elsewhere: SocketAddr = "127.0.0.2:40123".parse().unwrap();
        let why = unreachable_why(&elsewhere, &e, Wire::Shm);
        assert!(why.contains("is the peer running"), "{why}");
        let _own = Inbox::create(&there, Wire::Shm, None).unwrap();
        let why = unreachable_why(&elsewhere, &e, Wire::Shm);
        assert!(why.contains("but 127.0.0.1:40123 listens on that port"), "{why}");
        assert!(why.contains("-s 127.0.0.2"), "{why}");
        let far: SocketAddr = "198.51.100.7:40123".parse().unwrap();
        let why = unreachable_why(&far, &e, Wire::Shm);
        assert!(why.contains("not an address of this host") && why.contains("FI_OXMR_WIRE"), "{why}");
        let why = unreachable_why(&far, &e, Wire::Tcp);
        assert!(why.contains("over TCP") && why.contains("reachable"), "{why}");
    }
}
