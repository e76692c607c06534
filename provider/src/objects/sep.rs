//! Scalable endpoints (fi_scalable_ep, fi_endpoint(3) "Scalable
//! Endpoints"): an RDM endpoint with several transmit and receive
//! contexts, each a `fid_ep` of its own (`fi_tx_context`,
//! `fi_rx_context`) with its own CQs and counters, so that threads can
//! post and complete on their own context without sharing a queue.
//!
//! Context index i of both directions is one endpoint of its own
//! (`Ep`: its engine, its queue, its listener), and the endpoints of a
//! scalable endpoint listen at consecutive ports: the scalable endpoint's
//! name is the first one's, and a peer reaches receive context k at that
//! name's port + k. An AV opened with `rx_ctx_bits` resolves
//! `fi_rx_addr(fi_addr, k, bits)` to it (`protocol::av::AddrTable`), so
//! a peer needs nothing but the scalable endpoint's name, and a plain
//! endpoint is receive context 0 of itself. Transmit context k sends
//! from the same endpoint as receive context k, at the name's port + k:
//! a peer sees its messages come (FI_SOURCE) from the scalable endpoint's
//! entry for k = 0, and for another k from the entry of that context's
//! own address (`fi_getname` of the context) if it inserted it, else
//! FI_ADDR_NOTAVAIL: nothing a peer proves says that an address k ports
//! above an entry is that entry's context.
//!
//! The contexts of an index are bound to its endpoint (CQs and counters
//! for their direction), the AV to the scalable endpoint (every index's
//! endpoint takes it). Index i's endpoint starts when the scalable
//! endpoint is enabled and each context it has (transmit if i <
//! tx_ctx_cnt, receive if i < rx_ctx_cnt) was made and enabled, in any
//! order. Contexts are made before `fi_enable` of the scalable endpoint
//! (after it: -FI_EOPBADSTATE), each at most once; closing the last open
//! context of an index releases its endpoint (its bindings, its port).
//! A context holds the scalable endpoint (`fi_close` of it is -FI_EBUSY
//! while one is open).

use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

use oxmr_ffi as ffi;

use super::alias::{Only, OpDefaults};
use super::av::Av;
use super::domain::Domain;
use super::ep::Ep;
use crate::error::Result;
use crate::fail;
use crate::info::{attrs, Info};
use crate::sys::LockExt;
use oxmr_ffi::FidHeader;

/// How many times a scalable endpoint without a fixed port tries another
/// run of consecutive free ports before it gives up.
const PORT_TRIES: usize = 64;

/// Where a context of one index and direction is.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
enum Ctx {
    #[default]
    NotMade,
    Open {
        enabled: bool,
    },
    Closed,
}

/// One index: its endpoint (None once released), and its two contexts.
struct Slot {
    ep: Option<Arc<Ep>>,
    tx: Ctx,
    rx: Ctx,
}

struct SepState {
    slots: Vec<Slot>,
    av: Option<Arc<Av>>,
    enabled: bool,
}

/// A scalable endpoint.
#[repr(C)]
pub struct Sep {
    pub hdr: FidHeader<ffi::fid_ep>,
    pub domain: Arc<Domain>,
    pub info: Info,
    tx_cnt: usize,
    rx_cnt: usize,
    /// The name (index 0's listener); index k's is this port + k.
    name: SocketAddr,
    state: Mutex<SepState>,
}

/// Bind `n` listeners at consecutive ports from `at` (a port of 0: any
/// run of free ones).
fn listen_run(at: SocketAddr, n: usize) -> Result<Vec<TcpListener>> {
    let tries = if at.port() == 0 { PORT_TRIES } else { 1 };
    for _ in 0..tries {
        let (first, name) = super::ep::listen(at)?;
        let mut run = vec![first];
        for k in 1..n {
            let Some(port) = name.port().checked_add(k as u16) else { break };
            let mut a = name;
            a.set_port(port);
            match TcpListener::bind(a) {
                Ok(l) => run.push(l),
                Err(_) => break,
            }
        }
        if run.len() == n {
            return Ok(run);
        }
    }
    Err(fail!(
        ffi::FI_EADDRINUSE,
        "fi_scalable_ep: no {n} consecutive free ports from {at} (a scalable endpoint's contexts listen at its port + k); pick another port, or fewer contexts"
    ))
}

/// A context count from ep_attr (0: one).
fn count(n: usize, what: &str) -> Result<usize> {
    if n == ffi::FI_SHARED_CONTEXT as usize {
        return Err(fail!(
            ffi::FI_EINVAL,
            "fi_scalable_ep: {what} FI_SHARED_CONTEXT; a scalable endpoint has contexts of its own (shared receive contexts are not offered)"
        ));
    }
    if n > attrs::SEP_MAX_CTX {
        return Err(fail!(
            ffi::FI_EINVAL,
            "fi_scalable_ep: {what} {n}; oxmr's scalable endpoints have at most {} (domain_attr max_ep_tx_ctx/max_ep_rx_ctx)",
            attrs::SEP_MAX_CTX
        ));
    }
    Ok(n.max(1))
}

impl Sep {
    /// Check the info and build the endpoints of every index, listening
    /// at consecutive ports. `header` makes the (never published) header
    /// of each index's endpoint.
    pub fn new(
        hdr: FidHeader<ffi::fid_ep>,
        domain: Arc<Domain>,
        info: Info,
        header: impl Fn() -> FidHeader<ffi::fid_ep>,
    ) -> Result<Sep> {
        if info.ep.type_ != ffi::FI_EP_RDM {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_scalable_ep: ep_type {}; oxmr's scalable endpoints are FI_EP_RDM",
                info.ep.type_
            ));
        }
        let tx_cnt = count(info.ep.tx_ctx_cnt, "tx_ctx_cnt")?;
        let rx_cnt = count(info.ep.rx_ctx_cnt, "rx_ctx_cnt")?;
        let n = tx_cnt.max(rx_cnt);
        let listeners = listen_run(super::ep::source_of(&info, &domain), n)?;
        let name = listeners[0].local_addr().map_err(|e| fail!(ffi::FI_EIO, "getsockname: {e}"))?;
        let mut slots = Vec::with_capacity(n);
        for (i, l) in listeners.into_iter().enumerate() {
            let mut each = info.clone();
            each.ep.tx_ctx_cnt = 1;
            each.ep.rx_ctx_cnt = 1;
            each.caps = roles(info.caps, i < tx_cnt, i < rx_cnt);
            let ep = Ep::with_listener(header(), domain.clone(), each, Some(l))?;
            slots.push(Slot { ep: Some(Arc::new(ep)), tx: Ctx::NotMade, rx: Ctx::NotMade });
        }
        Ok(Sep {
            hdr,
            domain,
            info,
            tx_cnt,
            rx_cnt,
            name,
            state: Mutex::new(SepState { slots, av: None, enabled: false }),
        })
    }

    /// The name (fi_getname): where receive context 0 listens.
    pub fn name(&self) -> SocketAddr {
        self.name
    }

    /// fi_scalable_ep_bind: the AV (each index's endpoint takes it).
    pub fn bind_av(&self, av: Arc<Av>, flags: u64) -> Result<()> {
        if flags != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_scalable_ep_bind(av) takes no flags"));
        }
        let mut s = self.state.lock_ok();
        if s.enabled {
            return Err(fail!(ffi::FI_EOPBADSTATE, "fi_scalable_ep_bind after fi_enable; bind the AV first"));
        }
        if s.av.is_some() {
            return Err(fail!(ffi::FI_EINVAL, "fi_scalable_ep_bind: an AV is already bound"));
        }
        for ep in s.slots.iter().filter_map(|x| x.ep.as_ref()) {
            ep.bind_av(av.clone(), 0)?;
        }
        s.av = Some(av);
        Ok(())
    }

    /// fi_tx_context / fi_rx_context: the endpoint of context `index` of
    /// direction `dir`, which the context wraps.
    pub fn context(&self, dir: Only, index: i32) -> Result<Arc<Ep>> {
        let (call, cnt) = match dir {
            Only::Transmit => ("fi_tx_context", self.tx_cnt),
            Only::Receive => ("fi_rx_context", self.rx_cnt),
        };
        let i = usize::try_from(index).ok().filter(|&i| i < cnt).ok_or_else(|| {
            fail!(ffi::FI_EINVAL, "{call}: index {index}; this scalable endpoint has {cnt} (0 to {})", cnt - 1)
        })?;
        let mut s = self.state.lock_ok();
        if s.enabled {
            return Err(fail!(
                ffi::FI_EOPBADSTATE,
                "{call} {i} after fi_enable of the scalable endpoint; make every context before enabling it"
            ));
        }
        let slot = &mut s.slots[i];
        let c = if dir == Only::Transmit { &mut slot.tx } else { &mut slot.rx };
        if *c != Ctx::NotMade {
            return Err(fail!(ffi::FI_EALREADY, "{call} {i}: that context was already made (each is made once)"));
        }
        let ep = slot.ep.clone().ok_or_else(|| {
            fail!(ffi::FI_EOPBADSTATE, "{call} {i}: the index's other context was closed, which released it")
        })?;
        *c = Ctx::Open { enabled: false };
        Ok(ep)
    }

    /// fi_enable of a context: its index's endpoint starts if it is ready.
    pub fn enable_context(&self, dir: Only, index: usize) -> Result<()> {
        let mut s = self.state.lock_ok();
        let slot = &mut s.slots[index];
        let c = if dir == Only::Transmit { &mut slot.tx } else { &mut slot.rx };
        *c = Ctx::Open { enabled: true };
        self.start_ready(&mut s)
    }

    /// fi_enable of the scalable endpoint.
    pub fn enable(&self) -> Result<()> {
        let mut s = self.state.lock_ok();
        if s.av.is_none() {
            return Err(fail!(
                ffi::FI_ENOAV,
                "fi_enable: a scalable endpoint needs an AV bound first (fi_scalable_ep_bind)"
            ));
        }
        s.enabled = true;
        self.start_ready(&mut s)
    }

    /// Start each index's endpoint whose contexts are all made and
    /// enabled, once the scalable endpoint is.
    fn start_ready(&self, s: &mut SepState) -> Result<()> {
        if !s.enabled {
            return Ok(());
        }
        for (i, slot) in s.slots.iter().enumerate() {
            let ready = |c: Ctx, has: bool| !has || c == Ctx::Open { enabled: true };
            if let Some(ep) = &slot.ep {
                if ready(slot.tx, i < self.tx_cnt) && ready(slot.rx, i < self.rx_cnt) && !ep.is_started() {
                    ep.enable_and_start()?;
                }
            }
        }
        Ok(())
    }

    /// A context that could not be made after all (its attributes were
    /// refused): it may be made again.
    fn unmake(&self, dir: Only, index: usize) {
        let mut s = self.state.lock_ok();
        let slot = &mut s.slots[index];
        *(if dir == Only::Transmit { &mut slot.tx } else { &mut slot.rx }) = Ctx::NotMade;
    }

    /// A context closed: its index's endpoint goes with the last open one.
    pub fn close_context(&self, dir: Only, index: usize) {
        let mut s = self.state.lock_ok();
        let slot = &mut s.slots[index];
        let c = if dir == Only::Transmit { &mut slot.tx } else { &mut slot.rx };
        *c = Ctx::Closed;
        let open = |c: Ctx| matches!(c, Ctx::Open { .. });
        if !open(slot.tx) && !open(slot.rx) {
            let ep = slot.ep.take();
            // (Dropped after the lock: closing an engine waits for copies
            // under way.)
            drop(s);
            drop(ep);
        }
    }
}

/// An index's capabilities: the scalable endpoint's, with the directions
/// of the contexts it has (so its endpoint asks CQs for those only).
fn roles(caps: u64, tx: bool, rx: bool) -> u64 {
    let tx_dirs = (ffi::FI_SEND | ffi::FI_READ | ffi::FI_WRITE) as u64;
    let rx_dirs = (ffi::FI_RECV | ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64;
    let dirs = tx_dirs | rx_dirs;
    // (No direction bit at all is every direction, fi_getinfo(3).)
    let asked = if caps & dirs == 0 { dirs } else { caps & dirs };
    let keep = (if tx { tx_dirs } else { 0 }) | (if rx { rx_dirs } else { 0 });
    // (The target side of RMA stays with every index: a peer's RMA may
    // name any context's endpoint, and is checked by its keys.)
    let kept = asked & (keep | ffi::FI_REMOTE_READ as u64 | ffi::FI_REMOTE_WRITE as u64);
    (caps & !dirs) | kept
}

/// A context of a scalable endpoint (`fi_tx_context` when `TX`, else
/// `fi_rx_context`): its endpoint and default op flags, for its one
/// direction.
#[repr(C)]
pub struct SepCtx<const TX: bool> {
    pub hdr: FidHeader<ffi::fid_ep>,
    pub d: OpDefaults,
    pub sep: Arc<Sep>,
    pub index: usize,
}

/// A transmit context.
pub type TxCtx = SepCtx<true>;
/// A receive context.
pub type RxCtx = SepCtx<false>;

impl<const TX: bool> SepCtx<TX> {
    /// The direction of this context.
    pub const DIR: Only = if TX { Only::Transmit } else { Only::Receive };

    /// Context `index` of `sep`, with the attributes given (NULL: the
    /// scalable endpoint's).
    pub fn new(hdr: FidHeader<ffi::fid_ep>, sep: Arc<Sep>, index: i32, op_flags: Option<u64>) -> Result<Self> {
        let ep = sep.context(Self::DIR, index)?;
        let d = OpDefaults::new(ep, Some(Self::DIR));
        let which = if TX { ffi::FI_TRANSMIT as u64 } else { ffi::FI_RECV as u64 };
        let call = if TX { "fi_tx_context" } else { "fi_rx_context" };
        let made = match op_flags {
            Some(f) => d.ops_flags(call, which | f, Some(which | f)).map(|_| ()),
            None => Ok(()),
        };
        let index = index as usize;
        if let Err(e) = made {
            sep.unmake(Self::DIR, index);
            return Err(e);
        }
        Ok(SepCtx { hdr, d, sep, index })
    }

    /// fi_ep_bind of a CQ or counter: to the index's endpoint, for this
    /// context's direction only.
    pub fn check_bind_flags(&self, flags: u64, cq: bool) -> Result<()> {
        let own = if cq {
            if TX {
                ffi::FI_TRANSMIT as u64
            } else {
                ffi::FI_RECV as u64
            }
        } else if TX {
            (ffi::FI_SEND | ffi::FI_READ | ffi::FI_WRITE) as u64
        } else {
            (ffi::FI_RECV | ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE) as u64
        };
        let other_dirs = if cq {
            (ffi::FI_TRANSMIT | ffi::FI_RECV) as u64 & !own
        } else {
            (ffi::FI_SEND | ffi::FI_RECV | ffi::FI_READ | ffi::FI_WRITE | ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE)
                as u64
                & !own
        };
        if flags & other_dirs != 0 {
            return Err(fail!(
                ffi::FI_EBADFLAGS,
                "fi_ep_bind on a {} context: flags {:#x} are the other direction's; bind those to a {} context",
                if TX { "transmit" } else { "receive" },
                flags & other_dirs,
                if TX { "receive" } else { "transmit" }
            ));
        }
        Ok(())
    }

    /// fi_enable of the context.
    pub fn enable(&self) -> Result<()> {
        self.sep.enable_context(Self::DIR, self.index)
    }
}

impl<const TX: bool> Drop for SepCtx<TX> {
    fn drop(&mut self) {
        self.sep.close_context(Self::DIR, self.index);
    }
}
