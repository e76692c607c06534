//! Endpoint (FI_EP_RDM and FI_EP_MSG): bindings, enable, options, name.
//!
//! An RDM endpoint's name is the address of its TCP listener, bound when the
//! endpoint is created (so fi_getname works before fi_enable, as fabtests
//! expect) at the info's source address. Its shared-memory queue is created
//! at the same time, under that name, so peers can send to it as soon as
//! they know the name; fi_enable starts its engine (protocol::engine).
//!
//! An FI_EP_MSG endpoint is the same endpoint with one peer: it has its own
//! name, queue and engine, and its connection (protocol::conn, driven by its
//! EQ's reads) fills a private one-entry address table with the peer's
//! name, so every data call goes to fi_addr 0 of it (the call's dest_addr
//! is ignored, as fi_msg(3) says for connected endpoints).

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex, MutexGuard};

use super::eq::{CmSource, EqError};
use super::pep::ConnReq;
use crate::protocol::av::AddrTable;
use crate::protocol::conn::{CmEvent, Conn};

use oxmr_ffi as ffi;

use super::av::Av;
use super::cntr::Cntr;
use super::cq::Cq;
use super::domain::Domain;
use super::eq::Eq;
use crate::error::Result;
use crate::fail;
use crate::info::{attrs, Info};
/// What a data call posts (decoded by the boundary), and the flag an
/// inject call adds to its flags.
pub(crate) use crate::protocol::engine::INJECT_CALL;
pub use crate::protocol::engine::{AtomicOp, Held, RmaOp, Trigger, TxOp};
use crate::protocol::engine::{Bindings, Engine};
use crate::protocol::inbox::Inbox;
pub use crate::protocol::AtomicWhat;
pub use crate::protocol::Iovs;
use crate::sys::LockExt;
use oxmr_ffi::FidHeader;

/// Counter bindings, by the event they count.
pub(crate) const CNTR_FLAGS: [u64; 6] = [
    ffi::FI_SEND as u64,
    ffi::FI_RECV as u64,
    ffi::FI_READ as u64,
    ffi::FI_WRITE as u64,
    ffi::FI_REMOTE_READ as u64,
    ffi::FI_REMOTE_WRITE as u64,
];

/// What is bound to an endpoint, and its options.
#[derive(Default)]
pub struct EpState {
    pub enabled: bool,
    pub av: Option<Arc<Av>>,
    pub eq: Option<Arc<Eq>>,
    pub tx_cq: Option<Arc<Cq>>,
    pub tx_selective: bool,
    pub rx_cq: Option<Arc<Cq>>,
    pub rx_selective: bool,
    pub cntrs: [Option<Arc<Cntr>>; 6],
    /// The shared transmit context bound (held while the endpoint lives).
    pub stx: Option<Arc<super::stx::Stx>>,
    /// The shared receive context bound (held while the endpoint lives).
    pub srx: Option<Arc<super::srx::Srx>>,
    pub min_multi_recv: usize,
    pub tx_op_flags: u64,
    pub rx_op_flags: u64,
    pub listener: Option<TcpListener>,
    pub name: Option<SocketAddr>,
    /// MSG, accepted: the address the connector reached (the passive
    /// endpoint's), which fi_getname reports, as for an accepted socket.
    pub cm_name: Option<SocketAddr>,
}

/// An endpoint.
#[repr(C)]
pub struct Ep {
    pub hdr: FidHeader<ffi::fid_ep>,
    pub domain: Arc<Domain>,
    pub info: Info,
    state: Mutex<EpState>,
    /// The shared-memory queue, until fi_enable hands it to the engine.
    rx_region: Mutex<Option<Inbox>>,
    /// The data engine (after fi_enable).
    engine: super::progress::EngineCell,
    /// MSG: the connection, and the table that holds its peer (fi_addr 0).
    conn: Mutex<Conn>,
    peer_av: Arc<AddrTable>,
    /// The connection request this endpoint was opened for (kept so that
    /// its handle stays valid while the endpoint lives).
    request: Mutex<Option<Arc<ConnReq>>>,
    /// The job key its connections prove: its ep_attr `auth_key`, else the
    /// domain's.
    auth_key: Option<crate::auth::JobKey>,
}

/// Default FI_OPT_MIN_MULTI_RECV (bytes left before a multi-recv buffer is released).
pub(crate) const DEFAULT_MIN_MULTI_RECV: usize = 64;

pub(crate) fn listen(at: SocketAddr) -> Result<(TcpListener, SocketAddr)> {
    let l = TcpListener::bind(at).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            fail!(ffi::FI_EADDRINUSE, "address {at} is already in use; pick another service/port")
        }
        std::io::ErrorKind::AddrNotAvailable => {
            fail!(ffi::FI_EADDRNOTAVAIL, "address {at} is not an address of this host")
        }
        _ => fail!(ffi::FI_EIO, "cannot listen at {at}: {e}"),
    })?;
    let name = l.local_addr().map_err(|e| fail!(ffi::FI_EIO, "getsockname on {at}: {e}"))?;
    Ok((l, name))
}

/// The source address for an endpoint: the info's, else the domain's.
pub fn source_of(info: &Info, domain: &Domain) -> SocketAddr {
    info.src
        .or(domain.info.src.map(|mut a| {
            a.set_port(0);
            a
        }))
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
}

impl Drop for Ep {
    fn drop(&mut self) {
        // The progress lists of our CQs, counters and domain share the
        // cell: stop the engine (its queue file goes, its CQ and counter
        // references are released) so that no list runs it again.
        // (Dropped after the lock is released: closing waits for stalled
        // shared copies, and other threads' progress takes this lock.)
        let engine = self.engine.lock().take();
        drop(engine);
        // A queue never handed to an engine (the endpoint was not enabled)
        // goes before the listener (in `state`) releases the port: another
        // endpoint may bind it at once, and its queue file has this name.
        let region = self.rx_region.lock_ok().take();
        drop(region);
    }
}

impl Ep {
    /// Validate the info and build the endpoint (with its listener for RDM).
    pub fn new(hdr: FidHeader<ffi::fid_ep>, domain: Arc<Domain>, info: Info) -> Result<Self> {
        Self::with_listener(hdr, domain, info, None)
    }

    /// `new`, listening on `listener` (a scalable endpoint's context,
    /// `objects::sep`) instead of a new one at the info's source address.
    pub fn with_listener(
        hdr: FidHeader<ffi::fid_ep>,
        domain: Arc<Domain>,
        info: Info,
        listener: Option<TcpListener>,
    ) -> Result<Self> {
        let offered = match info.ep.type_ {
            ffi::FI_EP_RDM => attrs::RDM_CAPS,
            ffi::FI_EP_MSG => attrs::MSG_CAPS,
            ffi::FI_EP_DGRAM => attrs::DGRAM_CAPS,
            t => {
                return Err(fail!(
                    ffi::FI_EINVAL,
                    "fi_endpoint: ep_type {t} not supported; oxmr has FI_EP_RDM, FI_EP_MSG and FI_EP_DGRAM"
                ))
            }
        };
        // (Only what fi_getinfo offers for the type: a cap oxmr does not
        // implement, such as FI_COLLECTIVE, or FI_TRIGGER on FI_EP_DGRAM,
        // is refused here rather than silently ignored later.)
        let extra = info.caps & !offered;
        if extra != 0 {
            return Err(fail!(ffi::FI_EINVAL, "fi_endpoint: caps {extra:#x} are not supported for this endpoint type"));
        }
        if info.caps & ffi::FI_REMOTE_COMM as u64 != 0 && domain.fabric.config.wire == crate::config::Wire::Shm {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_endpoint: FI_REMOTE_COMM asked, but FI_OXMR_WIRE=shm reaches this host only; unset FI_OXMR_WIRE (auto) or set it to tcp"
            ));
        }
        let shared_tx = info.ep.tx_ctx_cnt == ffi::FI_SHARED_CONTEXT as usize;
        let shared_rx = info.ep.rx_ctx_cnt == ffi::FI_SHARED_CONTEXT as usize;
        if (info.ep.tx_ctx_cnt > 1 && !shared_tx) || (info.ep.rx_ctx_cnt > 1 && !shared_rx) {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_endpoint: tx_ctx_cnt {} rx_ctx_cnt {}: an endpoint has one context of each (or a shared one, FI_SHARED_CONTEXT); open several with fi_scalable_ep",
                info.ep.tx_ctx_cnt as isize,
                info.ep.rx_ctx_cnt as isize
            ));
        }
        if info.tx.size > attrs::QUEUE_SIZE || info.rx.size > attrs::QUEUE_SIZE {
            return Err(fail!(ffi::FI_EINVAL, "fi_endpoint: queue size above {}", attrs::QUEUE_SIZE));
        }
        if info.tx.op_flags & !attrs::TX_OP_FLAGS != 0 || info.rx.op_flags & !attrs::RX_OP_FLAGS != 0 {
            return Err(fail!(ffi::FI_EINVAL, "fi_endpoint: unsupported default op_flags"));
        }
        let mut state = EpState {
            min_multi_recv: DEFAULT_MIN_MULTI_RECV,
            tx_op_flags: info.tx.op_flags,
            rx_op_flags: info.rx.op_flags,
            ..Default::default()
        };
        let auth_key = match &info.ep.auth_key {
            Some(_) => super::domain::resolve_key(
                &[(&info.ep.auth_key, "ep_attr")],
                &crate::config::EnvKey::None,
                "fi_endpoint",
            )?,
            None => domain.auth_key.clone(),
        };
        let (l, name) = match listener {
            Some(l) => {
                let name = l.local_addr().map_err(|e| fail!(ffi::FI_EIO, "getsockname: {e}"))?;
                (l, name)
            }
            None => listen(source_of(&info, &domain))?,
        };
        state.listener = Some(l);
        state.name = Some(name);
        let region = Some(Inbox::create(&name, domain.fabric.config.wire, auth_key.as_ref(), "fi_endpoint")?);
        Ok(Ep {
            hdr,
            domain,
            info,
            state: Mutex::new(state),
            rx_region: Mutex::new(region),
            engine: Default::default(),
            peer_av: Arc::new(AddrTable::new(1, false)),
            request: Mutex::new(None),
            conn: Mutex::new({
                let mut c = Conn::default();
                c.set_key(auth_key.clone());
                c
            }),
            auth_key,
        })
    }

    /// Lock the endpoint's state.
    pub fn state(&self) -> MutexGuard<'_, EpState> {
        self.state.lock_ok()
    }

    fn bindable(&self, what: &str) -> Result<MutexGuard<'_, EpState>> {
        let s = self.state();
        if s.enabled {
            return Err(fail!(
                ffi::FI_EOPBADSTATE,
                "fi_ep_bind of {what} after fi_enable; bind everything before enabling"
            ));
        }
        Ok(s)
    }

    fn same_domain(&self, d: &Arc<Domain>, what: &str) -> Result<()> {
        if !Arc::ptr_eq(d, &self.domain) {
            return Err(fail!(ffi::FI_EINVAL, "fi_ep_bind: {what} belongs to another domain"));
        }
        Ok(())
    }

    /// Bind a CQ for FI_TRANSMIT and/or FI_RECV (optionally selective).
    pub fn bind_cq(&self, cq: Arc<Cq>, flags: u64) -> Result<()> {
        let known = ffi::FI_TRANSMIT as u64 | ffi::FI_RECV as u64 | ffi::FI_SELECTIVE_COMPLETION as u64;
        if flags & !known != 0 {
            return Err(fail!(
                ffi::FI_EBADFLAGS,
                "fi_ep_bind(cq) flags {:#x} unknown; use FI_TRANSMIT, FI_RECV, FI_SELECTIVE_COMPLETION",
                flags & !known
            ));
        }
        let tx = flags & ffi::FI_TRANSMIT as u64 != 0;
        let rx = flags & ffi::FI_RECV as u64 != 0;
        if !tx && !rx {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_ep_bind(cq) needs FI_TRANSMIT and/or FI_RECV"));
        }
        self.same_domain(&cq.domain, "the CQ")?;
        let mut s = self.bindable("a CQ")?;
        if (tx && s.tx_cq.is_some()) || (rx && s.rx_cq.is_some()) {
            return Err(fail!(ffi::FI_EINVAL, "fi_ep_bind: a CQ is already bound for that direction"));
        }
        let selective = flags & ffi::FI_SELECTIVE_COMPLETION as u64 != 0;
        if tx {
            s.tx_cq = Some(cq.clone());
            s.tx_selective = selective;
        }
        if rx {
            s.rx_cq = Some(cq);
            s.rx_selective = selective;
        }
        Ok(())
    }

    /// Bind a shared transmit context (`objects::stx`): only to an
    /// endpoint opened with `tx_ctx_cnt = FI_SHARED_CONTEXT`, before
    /// fi_enable, once.
    pub fn bind_stx(&self, stx: Arc<super::stx::Stx>, flags: u64) -> Result<()> {
        if flags != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_ep_bind(stx) takes no flags"));
        }
        if self.info.ep.tx_ctx_cnt != ffi::FI_SHARED_CONTEXT as usize {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_ep_bind: a shared transmit context binds only to an endpoint opened with ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT"
            ));
        }
        self.same_domain(&stx.domain, "the shared transmit context")?;
        let mut s = self.bindable("a shared transmit context")?;
        if s.stx.is_some() {
            return Err(fail!(ffi::FI_EINVAL, "fi_ep_bind: a shared transmit context is already bound"));
        }
        s.stx = Some(stx);
        Ok(())
    }

    /// Bind a shared receive context (`objects::srx`): only to an
    /// endpoint opened with `rx_ctx_cnt = FI_SHARED_CONTEXT`, before
    /// fi_enable, once.
    pub fn bind_srx(&self, srx: Arc<super::srx::Srx>, flags: u64) -> Result<()> {
        if flags != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_ep_bind(srx) takes no flags"));
        }
        if self.info.ep.rx_ctx_cnt != ffi::FI_SHARED_CONTEXT as usize {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_ep_bind: a shared receive context binds only to an endpoint opened with ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT"
            ));
        }
        self.same_domain(&srx.domain, "the shared receive context")?;
        let mut s = self.bindable("a shared receive context")?;
        if s.srx.is_some() {
            return Err(fail!(ffi::FI_EINVAL, "fi_ep_bind: a shared receive context is already bound"));
        }
        s.srx = Some(srx);
        Ok(())
    }

    /// Bind the AV (RDM and DGRAM).
    pub fn bind_av(&self, av: Arc<Av>, flags: u64) -> Result<()> {
        if flags != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_ep_bind(av) takes no flags"));
        }
        if self.is_msg() {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_ep_bind: an AV can only be bound to an FI_EP_RDM or FI_EP_DGRAM endpoint"
            ));
        }
        self.same_domain(&av.domain, "the AV")?;
        let mut s = self.bindable("an AV")?;
        if s.av.is_some() {
            return Err(fail!(ffi::FI_EINVAL, "fi_ep_bind: an AV is already bound"));
        }
        s.av = Some(av);
        Ok(())
    }

    /// Bind an EQ (connection events for MSG endpoints).
    pub fn bind_eq(&self, eq: Arc<Eq>, flags: u64) -> Result<()> {
        if flags != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_ep_bind(eq) takes no flags"));
        }
        if !Arc::ptr_eq(&eq.fabric, &self.domain.fabric) {
            return Err(fail!(ffi::FI_EINVAL, "fi_ep_bind: the EQ belongs to another fabric"));
        }
        let mut s = self.bindable("an EQ")?;
        if s.eq.is_some() {
            return Err(fail!(ffi::FI_EINVAL, "fi_ep_bind: an EQ is already bound"));
        }
        s.eq = Some(eq);
        Ok(())
    }

    /// Bind a counter for the events named in `flags`.
    pub fn bind_cntr(&self, cntr: Arc<Cntr>, flags: u64) -> Result<()> {
        let known: u64 = CNTR_FLAGS.iter().fold(0, |a, b| a | b);
        if flags == 0 || flags & !known != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_ep_bind(cntr) flags {flags:#x}: use FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE"));
        }
        self.same_domain(&cntr.domain, "the counter")?;
        let mut s = self.bindable("a counter")?;
        for (i, f) in CNTR_FLAGS.iter().enumerate() {
            if flags & f != 0 && s.cntrs[i].is_some() {
                return Err(fail!(ffi::FI_EINVAL, "fi_ep_bind: a counter is already bound for {f:#x}"));
            }
        }
        for (i, f) in CNTR_FLAGS.iter().enumerate() {
            if flags & f != 0 {
                s.cntrs[i] = Some(cntr.clone());
            }
        }
        Ok(())
    }

    /// Run the data engine (manual progress).
    pub fn progress(&self) {
        if let Some(e) = self.engine.lock().as_mut() {
            e.progress();
        }
    }

    /// Whether the data engine runs (RDM after fi_enable).
    pub fn is_started(&self) -> bool {
        self.engine.lock().is_some()
    }

    /// Post a send (msg or tagged) on the endpoint's engine.
    pub fn send(&self, o: &TxOp) -> Result<()> {
        if self.info.ep.type_ == ffi::FI_EP_DGRAM {
            let len = o.iovs.iter().map(|x| x.1).sum::<usize>();
            if len > self.info.ep.max_msg_size {
                return Err(fail!(
                    ffi::FI_EMSGSIZE,
                    "a datagram of {len} bytes: an FI_EP_DGRAM endpoint sends at most {} (max_msg_size)",
                    self.info.ep.max_msg_size
                ));
            }
        }
        if self.is_msg() {
            let o = TxOp { dest: self.peer_addr(o.dest, "send")?, ..*o };
            return self.with_engine(|e| e.send(&o));
        }
        self.with_engine(|e| e.send(o))
    }

    /// An inject of `len` bytes at `buf` to `dest` on an RDM endpoint,
    /// the common shape (`Engine::inject`); None: not that shape, for the
    /// general path (`send`).
    #[inline]
    pub fn inject(&self, dest: u64, buf: usize, len: usize, tag: Option<u64>, data: Option<u64>) -> Option<Result<()>> {
        if self.info.ep.type_ != ffi::FI_EP_RDM {
            return None;
        }
        self.engine.lock().as_mut()?.inject(dest, buf, len, tag, data)
    }

    /// -FI_EOPNOTSUPP for what a datagram endpoint does not do.
    fn not_dgram(&self, what: &str) -> Result<()> {
        match self.info.ep.type_ == ffi::FI_EP_DGRAM {
            true => {
                Err(fail!(ffi::FI_EOPNOTSUPP, "{what} on an FI_EP_DGRAM endpoint: it sends and receives messages only"))
            }
            false => Ok(()),
        }
    }

    fn is_msg(&self) -> bool {
        self.info.ep.type_ == ffi::FI_EP_MSG
    }

    /// The destination of a transmit: the connection's peer on MSG.
    fn peer_addr(&self, dest: u64, what: &str) -> Result<u64> {
        if !self.is_msg() {
            return Ok(dest);
        }
        if !self.conn().usable() {
            return Err(fail!(ffi::FI_ENOTCONN, "{what} on an FI_EP_MSG endpoint that is not connected (fi_connect or fi_accept, then wait for FI_CONNECTED)"));
        }
        Ok(0)
    }

    fn conn(&self) -> MutexGuard<'_, Conn> {
        self.conn.lock_ok()
    }

    /// Post a receive: `tag` is (tag, ignore) for tagged receives, `flags`
    /// the call's own (None: the endpoint's rx op_flags).
    #[inline(always)]
    pub fn recv(&self, ctx: usize, iovs: Iovs, src: u64, tag: Option<(u64, u64)>, flags: Option<u64>) -> Result<()> {
        let src = if self.is_msg() { ffi::FI_ADDR_UNSPEC } else { src };
        self.with_engine(|e| e.recv(ctx, iovs, src, tag, flags))
    }

    /// fi_trecvmsg with FI_PEEK, FI_CLAIM or FI_DISCARD (see
    /// `Engine::probe`).
    pub fn probe(&self, ctx: usize, iovs: Iovs, src: u64, tag: (u64, u64), flags: u64) -> Result<()> {
        let src = if self.is_msg() { ffi::FI_ADDR_UNSPEC } else { src };
        self.with_engine(|e| e.probe(ctx, iovs, src, tag, flags))
    }

    /// Post an RMA read or write.
    pub fn rma(&self, mut o: RmaOp) -> Result<()> {
        self.not_dgram("RMA")?;
        o.dest = self.peer_addr(o.dest, if o.read { "RMA read" } else { "RMA write" })?;
        self.with_engine(|e| e.rma(o))
    }

    /// Post an atomic.
    pub fn atomic(&self, mut o: AtomicOp) -> Result<()> {
        self.not_dgram("an atomic")?;
        o.dest = self.peer_addr(o.dest, "atomic")?;
        self.with_engine(|e| e.atomic(&o))
    }

    /// Post a triggered operation (fi_trigger(3)): checked, then armed
    /// until `trigger`'s counter reaches its threshold (posted at once if
    /// it has). `op`'s flags are the call's without FI_TRIGGER.
    pub fn triggered(&self, trigger: Trigger, op: Held) -> Result<()> {
        if self.info.caps & ffi::FI_TRIGGER as u64 == 0 {
            return Err(fail!(
                ffi::FI_EINVAL,
                "FI_TRIGGER on an endpoint opened without the FI_TRIGGER capability (ask for it in fi_getinfo's hints; FI_EP_DGRAM has none)"
            ));
        }
        let op = match op {
            Held::Send(o) => Held::Send(TxOp { dest: self.peer_addr(o.dest, "send")?, ..o }),
            Held::Rma(mut o) => {
                o.dest = self.peer_addr(o.dest, if o.read { "RMA read" } else { "RMA write" })?;
                Held::Rma(o)
            }
            Held::Atomic(mut o) => {
                o.dest = self.peer_addr(o.dest, "atomic")?;
                Held::Atomic(o)
            }
        };
        self.with_engine(|e| e.post_triggered(trigger, op))
    }

    /// fi_cancel of the operation posted with `ctx`: a posted receive, or
    /// a triggered operation not fired yet.
    pub fn cancel(&self, ctx: usize) -> Result<()> {
        self.with_engine(|e| match e.cancel(ctx) {
            Err(x) if x.code() == ffi::FI_ENOENT && e.cancel_triggered(ctx) => Ok(()),
            r => r,
        })
    }

    /// Run `f` on the engine; -FI_EOPBADSTATE before fi_enable.
    fn with_engine<T>(&self, f: impl FnOnce(&mut Engine) -> Result<T>) -> Result<T> {
        let mut g = self.engine.lock();
        match g.as_mut() {
            Some(e) => f(e),
            None => Err(fail!(ffi::FI_EOPBADSTATE, "data operation before fi_enable")),
        }
    }

    /// fi_enable, then start the engine and attach it to its CQs/counters.
    pub fn enable_and_start(self: &Arc<Self>) -> Result<()> {
        self.enable()?;
        let mut eng = self.engine.lock();
        if eng.is_some() {
            return Ok(());
        }
        let Some(mut region) = self.rx_region.lock_ok().take() else {
            return Ok(());
        };
        let s = self.state();
        if self.domain.fabric.config.wire != crate::config::Wire::Shm {
            if let Some(l) = &s.listener {
                region.take_connections(l, self.auth_key.clone(), &self.domain.fabric.config, "fi_enable")?;
            }
        }
        let b = Bindings {
            tx_cq: s.tx_cq.as_ref().map(|c| c.core.clone()),
            rx_cq: s.rx_cq.as_ref().map(|c| c.core.clone()),
            tx_selective: s.tx_selective,
            rx_selective: s.rx_selective,
            cntrs: s.cntrs.clone().map(|c| c.map(|c| c.core.clone())),
            av: if self.is_msg() { Some(self.peer_av.clone()) } else { s.av.as_ref().map(|a| a.table.clone()) },
            tx_op_flags: s.tx_op_flags,
            rx_op_flags: s.rx_op_flags,
            directed: self.info.caps & ffi::FI_DIRECTED_RECV as u64 != 0,
            one_peer: self.is_msg(),
            min_multi_recv: s.min_multi_recv,
            srx: s.srx.as_ref().map(|x| x.shared.clone()),
        };
        if let Some(x) = &s.srx {
            // (A MSG endpoint's table holds its one peer: no source to
            // name there.)
            x.saw_av(if self.is_msg() { None } else { b.av.as_ref() });
        }
        let name = s.name.expect("an endpoint always has a name");
        let cqs: Vec<_> = [&s.tx_cq, &s.rx_cq].into_iter().flatten().cloned().collect();
        let cntrs: Vec<_> = s.cntrs.iter().flatten().cloned().collect();
        drop(s);
        *eng = Some(Engine::new(
            region,
            name,
            self.domain.mr.clone(),
            &self.domain.wires,
            &self.domain.fabric.config,
            b,
            self.auth_key.clone(),
        ));
        // Attached only after the engine's lock is released: a thread
        // reading one of these CQs holds the list while it locks each
        // engine in it, so attaching (which takes the list) while holding
        // ours could deadlock with it.
        drop(eng);
        // (One sleeper per endpoint: a CQ bound for both directions
        // watches its wake fd once.)
        let sleeper: Arc<dyn crate::queues::wait::Sleeper> =
            Arc::new(crate::objects::progress::EngineSleeper(self.engine.clone()));
        for cq in &cqs {
            cq.progress.attach(self.engine.clone());
            cq.core.waiter.attach(sleeper.clone(), self.domain.fabric.config.wait_tick);
        }
        for c in &cntrs {
            c.progress.attach(self.engine.clone());
            c.core.waiter.attach(sleeper.clone(), self.domain.fabric.config.wait_tick);
        }
        self.domain.progress.attach(self.engine.clone());
        Ok(())
    }

    /// fi_enable: check that what the endpoint needs is bound.
    pub fn enable(&self) -> Result<()> {
        let mut s = self.state();
        if s.enabled {
            return Ok(());
        }
        let caps = self.info.caps;
        let dirs =
            (ffi::FI_SEND | ffi::FI_RECV | ffi::FI_READ | ffi::FI_WRITE | ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE)
                as u64;
        // No direction bit at all means every direction (fi_getinfo(3)).
        let implicit = caps & dirs == 0;
        let initiates = implicit || caps & (ffi::FI_SEND | ffi::FI_READ | ffi::FI_WRITE) as u64 != 0;
        let receives =
            (implicit || caps & ffi::FI_RECV as u64 != 0) && caps & (ffi::FI_MSG | ffi::FI_TAGGED) as u64 != 0;
        let tx_cntr = s.cntrs[0].is_some() || s.cntrs[2].is_some() || s.cntrs[3].is_some();
        if initiates && s.tx_cq.is_none() && !tx_cntr {
            return Err(fail!(
                ffi::FI_ENOCQ,
                "fi_enable: no CQ or counter bound for FI_TRANSMIT; bind one with fi_ep_bind first"
            ));
        }
        if receives && s.rx_cq.is_none() && s.cntrs[1].is_none() {
            return Err(fail!(
                ffi::FI_ENOCQ,
                "fi_enable: no CQ or counter bound for FI_RECV; bind one with fi_ep_bind first"
            ));
        }
        if self.info.ep.rx_ctx_cnt == ffi::FI_SHARED_CONTEXT as usize && s.srx.is_none() {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_enable: the endpoint was opened with rx_ctx_cnt FI_SHARED_CONTEXT; bind a shared receive context (fi_srx_context, fi_ep_bind) first"
            ));
        }
        match self.info.ep.type_ {
            ffi::FI_EP_RDM | ffi::FI_EP_DGRAM if s.av.is_none() => {
                return Err(fail!(
                    ffi::FI_ENOAV,
                    "fi_enable: an FI_EP_RDM or FI_EP_DGRAM endpoint needs an AV bound first"
                ))
            }
            ffi::FI_EP_MSG if s.eq.is_none() => {
                return Err(fail!(ffi::FI_ENOEQ, "fi_enable: an FI_EP_MSG endpoint needs an EQ bound first"))
            }
            _ => {}
        }
        s.enabled = true;
        Ok(())
    }

    /// Rebind the endpoint's listener at `addr` (fi_setname, before enable).
    pub fn set_name(&self, addr: SocketAddr) -> Result<()> {
        if self.state().enabled {
            return Err(fail!(ffi::FI_EOPBADSTATE, "fi_setname after fi_enable; set the name before enabling"));
        }
        self.adopt_listener(listen(addr)?.0)
    }

    /// Take `l` as the endpoint's listener (its address, the name).
    pub fn adopt_listener(&self, l: TcpListener) -> Result<()> {
        let mut s = self.state();
        if s.enabled {
            return Err(fail!(ffi::FI_EOPBADSTATE, "an endpoint's address cannot change after fi_enable"));
        }
        let name = l.local_addr().map_err(|e| fail!(ffi::FI_EIO, "getsockname: {e}"))?;
        // Peers find our queue by our name: a new name, a new queue
        // (the old one, unused so far, goes with its file).
        let region =
            Inbox::create(&name, self.domain.fabric.config.wire, self.auth_key.as_ref(), "fi_setname/fi_endpoint")?;
        *self.rx_region.lock_ok() = Some(region);
        s.listener = Some(l);
        s.name = Some(name);
        Ok(())
    }

    /// The endpoint's name (where its peers' frames go).
    pub fn name(&self) -> Option<SocketAddr> {
        self.state().name
    }

    /// What fi_getname reports: the name, or for an accepted MSG endpoint
    /// the address its connector reached.
    pub fn shown_name(&self) -> Option<SocketAddr> {
        let s = self.state();
        s.cm_name.or(s.name)
    }

    /// FI_OPT_MIN_MULTI_RECV.
    pub fn min_multi_recv(&self) -> usize {
        self.state().min_multi_recv
    }

    /// Set FI_OPT_MIN_MULTI_RECV (for the multi-receive buffers posted
    /// after it: fi_endpoint(3)).
    pub fn set_min_multi_recv(&self, v: usize) -> Result<()> {
        self.state().min_multi_recv = v;
        // An enabled endpoint's engine keeps its own copy (the state's
        // lock is released first: lock order, as in `ops_flags`).
        if let Some(e) = self.engine.lock().as_mut() {
            e.set_min_multi_recv(v);
        }
        Ok(())
    }

    /// FI_GETOPSFLAG / FI_SETOPSFLAG: `which` is FI_TRANSMIT or FI_RECV.
    pub fn ops_flags(&self, which: u64, set: Option<u64>) -> Result<u64> {
        let tx = which & ffi::FI_TRANSMIT as u64 != 0;
        let rx = which & ffi::FI_RECV as u64 != 0;
        if tx == rx {
            return Err(fail!(
                ffi::FI_EINVAL,
                "FI_GETOPSFLAG/FI_SETOPSFLAG: name exactly one of FI_TRANSMIT or FI_RECV"
            ));
        }
        let mut s = self.state();
        let dir = which & (ffi::FI_TRANSMIT as u64 | ffi::FI_RECV as u64);
        match set {
            Some(flags) => {
                let flags = flags & !dir;
                let allowed = if tx { attrs::TX_OP_FLAGS } else { attrs::RX_OP_FLAGS };
                if tx && flags & ffi::FI_TRIGGER as u64 != 0 {
                    return Err(fail!(
                        ffi::FI_EINVAL,
                        "FI_SETOPSFLAG: FI_TRIGGER is not an endpoint default in oxmr; post through an alias (fi_ep_alias with FI_TRANSMIT | FI_TRIGGER) or pass it to the *msg calls"
                    ));
                }
                if flags & !allowed != 0 {
                    return Err(fail!(ffi::FI_EINVAL, "FI_SETOPSFLAG: flags {:#x} not supported", flags & !allowed));
                }
                if tx {
                    s.tx_op_flags = flags;
                } else {
                    s.rx_op_flags = flags;
                }
                drop(s);
                // An enabled endpoint's engine keeps its own copy.
                if let Some(e) = self.engine.lock().as_mut() {
                    e.set_op_flags(tx, flags);
                }
                Ok(flags)
            }
            None => Ok(if tx { s.tx_op_flags } else { s.rx_op_flags }),
        }
    }
}

/// FI_EP_MSG: connections (fi_cm(3)).
impl Ep {
    fn msg_only(&self, call: &str) -> Result<()> {
        if !self.is_msg() {
            return Err(fail!(ffi::FI_EINVAL, "{call} applies to FI_EP_MSG endpoints; this one is FI_EP_RDM"));
        }
        Ok(())
    }

    /// Hold the connection request this endpoint was opened for (its
    /// info's `handle`), for fi_accept.
    pub fn take_request(&self, req: Arc<ConnReq>) -> Result<()> {
        self.msg_only("fi_endpoint with a connection request")?;
        let inc = req.take("fi_endpoint")?;
        self.state().cm_name = Some(inc.local());
        *self.conn() = Conn::offered(inc);
        *self.request.lock_ok() = Some(req);
        Ok(())
    }

    fn watch_from_eq(self: &Arc<Self>) -> Result<()> {
        let eq = self.state().eq.clone().ok_or_else(|| fail!(ffi::FI_ENOEQ, "no EQ bound; fi_ep_bind an EQ first"))?;
        let me: Arc<dyn CmSource> = self.clone();
        eq.watch(Arc::downgrade(&me));
        Ok(())
    }

    /// fi_connect to a passive endpoint's name, with cm_data.
    pub fn connect(self: &Arc<Self>, to: SocketAddr, data: &[u8]) -> Result<()> {
        self.msg_only("fi_connect")?;
        if data.len() > attrs::CM_DATA_SIZE {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_connect: {} bytes of cm_data; at most {} (FI_OPT_CM_DATA_SIZE)",
                data.len(),
                attrs::CM_DATA_SIZE
            ));
        }
        self.enable_and_start()?;
        self.conn().connect(to, data, self.domain.fabric.config.cm_timeout)?;
        self.watch_from_eq()
    }

    /// fi_accept the request this endpoint holds, with cm_data.
    pub fn accept(self: &Arc<Self>, data: &[u8]) -> Result<()> {
        self.msg_only("fi_accept")?;
        if data.len() > attrs::CM_DATA_SIZE {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_accept: {} bytes of cm_data; at most {} (FI_OPT_CM_DATA_SIZE)",
                data.len(),
                attrs::CM_DATA_SIZE
            ));
        }
        let peer = self.conn().peer;
        let Some(peer) = peer else {
            return Err(fail!(
                ffi::FI_EOPBADSTATE,
                "fi_accept: this endpoint holds no connection request; open it with the info of an FI_CONNREQ event"
            ));
        };
        self.enable_and_start()?;
        self.know_peer(peer);
        let name = self.name().expect("an endpoint always has a name");
        self.conn().accept(name, data)?;
        self.watch_from_eq()
    }

    /// fi_shutdown: the peer gets FI_SHUTDOWN, and so does our EQ.
    pub fn shutdown(&self, flags: u64) -> Result<()> {
        self.msg_only("fi_shutdown")?;
        if flags != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_shutdown: flags {flags:#x}; pass 0"));
        }
        let ev = self.conn().shutdown()?;
        if let Some(ev) = ev {
            self.post(ev);
        }
        Ok(())
    }

    /// fi_getpeer: the connected peer's name.
    pub fn peer(&self) -> Result<SocketAddr> {
        self.msg_only("fi_getpeer")?;
        let c = self.conn();
        match c.peer {
            Some(p) if c.usable() => Ok(p),
            _ => Err(fail!(ffi::FI_ENOTCONN, "fi_getpeer: the endpoint is not connected")),
        }
    }

    /// Put the peer at fi_addr 0 of our table (once).
    fn know_peer(&self, peer: SocketAddr) {
        if self.peer_av.reverse(&peer).is_none() {
            let _ = self.peer_av.insert(&[Some(peer)]);
        }
    }

    fn post(&self, ev: CmEvent) {
        let Some(eq) = self.state().eq.clone() else { return };
        let fid = self as *const Self as usize;
        let context = self.hdr.0.fid.context as usize;
        let mut head = Vec::with_capacity(16);
        head.extend_from_slice(&fid.to_ne_bytes());
        // (struct fi_eq_cm_entry: fid, info (NULL), data.)
        head.extend_from_slice(&0usize.to_ne_bytes());
        match ev {
            CmEvent::Connected(data) => {
                head.extend_from_slice(&data);
                eq.post(ffi::FI_CONNECTED, head);
            }
            CmEvent::Shutdown => eq.post(ffi::FI_SHUTDOWN, head),
            CmEvent::Error(err, err_data) => {
                eq.post_error(EqError { fid, context, err, err_data, ..Default::default() })
            }
        }
    }
}

impl CmSource for Ep {
    fn cm_wake_fds(&self, out: &mut Vec<crate::sys::WakeFd>) -> bool {
        self.conn().wake_fds(out)
    }

    fn cm_progress(&self) -> bool {
        let Some(name) = self.name() else { return false };
        let mut c = self.conn();
        let ev = c.progress(name, self.domain.fabric.config.cm_timeout);
        // (Under the connection's lock: a send that finds it usable finds
        // the peer in the table.)
        if let (Some(CmEvent::Connected(_)), Some(p)) = (&ev, c.peer) {
            self.know_peer(p);
        }
        let watched = c.watched();
        drop(c);
        if let Some(ev) = ev {
            self.post(ev);
        }
        watched
    }
}
