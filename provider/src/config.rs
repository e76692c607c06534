//! The parsed `FI_OXMR_*` values: what each object is configured with.
//!
//! `boundary::params` defines the variables with `fi_param_define` and
//! reads them once (`fi_prov_ini`); a fabric keeps a copy, and passes it
//! down by value to its domains and endpoints. Nothing below reads a
//! global.

/// The most a same-host send carries inline: the data a shared-memory queue
/// cell holds after the largest header (the shm wire checks its cell size
/// against it). Default and ceiling of FI_OXMR_SHM_EAGER_MAX.
pub(crate) const EAGER_MAX: usize = 8080;

/// The values read at load time (by `boundary::params`, once), handed to
/// each fabric, and from it down to its domains and endpoints by value.
#[derive(Clone, Debug)]
pub struct Config {
    /// FI_OXMR_IFACE.
    pub ifaces: Option<Vec<String>>,
    /// FI_OXMR_MR_PIN.
    pub pin_mode: crate::mr::pin::PinMode,
    /// FI_OXMR_MR_MAX_PINNED.
    pub max_pinned: Option<u64>,
    /// FI_OXMR_MR_CACHE_* and FI_OXMR_MR_RECORD_PFN.
    pub cache: crate::mr::CacheConfig,
    /// FI_OXMR_MR_PHYS_FALLBACK.
    pub phys_fallback: bool,
    /// FI_OXMR_SYSFS_ROOT (default /sys).
    pub sysfs: crate::mr::device::Sysfs,
    /// FI_OXMR_SHM_SHARE_MIN (0: off).
    pub share_min: usize,
    /// FI_OXMR_SHM_SHARE_CHUNK (0: automatic).
    pub share_chunk: usize,
    /// FI_OXMR_SHM_EAGER_MAX.
    pub eager_max: usize,
    /// FI_OXMR_SHM_WRITE_BATCH (0: off).
    pub write_batch: usize,
    /// FI_OXMR_SHM_SENDER_JOBS.
    pub sender_jobs: bool,
    /// FI_OXMR_SHM_PAIR_RECV.
    pub pair_recv: bool,
    /// FI_OXMR_WIRE.
    pub wire: Wire,
    /// FI_OXMR_CM_TIMEOUT_MS: how long an FI_EP_MSG connect may take, and
    /// an accepted connection waits for its connector's answer.
    pub cm_timeout: std::time::Duration,
    /// FI_OXMR_WAIT_TICK_MS: how long a thread blocked on a CQ or counter
    /// whose endpoints all ring its fd sleeps at most before it runs
    /// progress anyway (`queues::wait`'s safety tick).
    pub wait_tick: std::time::Duration,
    /// FI_OXMR_TCP_IO_URING: TCP links send frame parts in registered
    /// memory with io_uring SEND_ZC (false: plain sockets only).
    pub tcp_io_uring: bool,
    /// FI_OXMR_TCP_EAGER_MAX: sends over TCP up to this many bytes go
    /// inline (capped by the TCP frame, `Engine::send`).
    pub tcp_eager_max: usize,
    /// FI_OXMR_TCP_ZC_COPIED: after this many zero-copy sends in a row
    /// that the kernel copied anyway, a link sends with writev (0: never).
    pub tcp_zc_copied: u32,
    /// FI_OXMR_TCP_LANES: connections a TCP link keeps to its peer for
    /// the data of large transfers (1: its own alone; at most
    /// `wire::tcp::LANES_MAX`).
    pub tcp_lanes: u32,
    /// FI_OXMR_AUTH_KEY or FI_OXMR_AUTH_KEY_FILE: the job key of domains
    /// whose application gives none (`auth_key`).
    pub auth_key: EnvKey,
    /// FI_OXMR_TCP_CONN_MAX: TCP connections an endpoint holds at once
    /// (default: half the descriptor limit, at least 64).
    pub tcp_conn_max: usize,
    /// FI_OXMR_TCP_HELLO_MS: how long a new TCP connection may take to say
    /// (and prove) who it is.
    pub tcp_hello_wait: std::time::Duration,
    /// FI_OXMR_TCP_PARTIAL_MAX: bytes of unfinished frames an endpoint
    /// holds over all its TCP connections.
    pub tcp_partial_max: usize,
    /// FI_OXMR_REFUSE_MAX: refused remote accesses from one peer before its
    /// TCP connection is closed and its source refused (0: never).
    pub refuse_max: u32,
    /// FI_OXMR_REFUSE_BAN_MS: how long that source is refused.
    pub refuse_ban: std::time::Duration,
    /// FI_OXMR_UNEXP_MAX: bytes an endpoint's unexpected messages hold
    /// before it stops reading the TCP peers that send more.
    pub unexp_max: usize,
    /// FI_OXMR_OUTBOX_MAX: bytes of answers queued for one peer before it
    /// stops reading that peer.
    pub outbox_max: usize,
}

/// Default of FI_OXMR_UNEXP_MAX: 16 Ki eager messages of 64 KiB.
pub(crate) const UNEXP_MAX: usize = 1 << 30;
/// Default of FI_OXMR_OUTBOX_MAX: a million answers.
pub(crate) const OUTBOX_MAX: usize = 64 << 20;

/// Default of FI_OXMR_TCP_HELLO_MS.
pub(crate) const TCP_HELLO_MS: usize = 10_000;
/// Default of FI_OXMR_TCP_PARTIAL_MAX: 256 connections' worth of the
/// largest frame.
pub(crate) const TCP_PARTIAL_MAX: usize = 64 << 20;
/// Default of FI_OXMR_REFUSE_MAX: far more than an application that makes
/// mistakes makes on one connection, far fewer than a key search needs
/// (2^64 keys).
pub(crate) const REFUSE_MAX: usize = 256;
/// Default of FI_OXMR_REFUSE_BAN_MS.
pub(crate) const REFUSE_BAN_MS: usize = 10_000;

/// Default of FI_OXMR_TCP_CONN_MAX: half the soft descriptor limit (the
/// other half is the application's), at least 64.
pub(crate) fn tcp_conn_max_default() -> usize {
    (crate::sys::nofile_limit().unwrap_or(1 << 20) / 2).max(64)
}

/// The job key the environment gives (FI_OXMR_AUTH_KEY, _FILE).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum EnvKey {
    /// Neither variable is set.
    #[default]
    None,
    Key(crate::auth::JobKey),
    /// A variable is set but unusable (too short, a file others may read,
    /// both set): what is wrong. Domains refuse to open rather than run
    /// without the key the user meant to set.
    Bad(String),
}

/// Default of FI_OXMR_TCP_EAGER_MAX: the eager limit TCP stacks commonly
/// use (Open MPI's tcp BTL among them). Measured, fi_rdm_tagged_bw 64 KiB,
/// pinned, alternating builds: inline instead of rendezvous, 2.5 -> 3.7
/// GB/s on loopback and across veth (the tcp provider: 2.3).
pub(crate) const TCP_EAGER_MAX: usize = 64 << 10;
/// The largest frame a TCP connection carries (`wire::tcp`, whose DATA
/// frames to a peer on this host are that large): FI_OXMR_TCP_PARTIAL_MAX
/// is at least this.
pub(crate) const TCP_MAX_FRAME: usize = 1 << 20;

/// Default of FI_OXMR_TCP_ZC_COPIED.
pub(crate) const TCP_ZC_COPIED: usize = 4;

/// Default of FI_OXMR_TCP_LANES.
pub(crate) const TCP_LANES: usize = 1;
/// The most FI_OXMR_TCP_LANES takes: each is a socket, its buffers and,
/// at the peer, one more connection to read.
pub(crate) const TCP_LANES_MAX: usize = 8;

/// Default of FI_OXMR_WAIT_TICK_MS.
pub(crate) const WAIT_TICK_MS: usize = 100;

/// Default of FI_OXMR_CM_TIMEOUT_MS.
pub(crate) const CM_TIMEOUT_MS: usize = 10_000;

/// Which wire carries an endpoint's frames (FI_OXMR_WIRE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// Per peer: shared memory to a peer whose address is one of this
    /// network namespace's own (loopback included), TCP to any other.
    Auto,
    /// Shared memory to every peer (same host only).
    Shm,
    /// TCP to every peer, same host included (both sides set it).
    Tcp,
}

/// Default of FI_OXMR_SHM_SHARE_MIN.
pub(crate) const SHARE_MIN: usize = 256 << 10;
/// Default of FI_OXMR_SHM_WRITE_BATCH.
pub(crate) const WRITE_BATCH: usize = 256 << 10;

impl Default for Config {
    fn default() -> Self {
        Config {
            ifaces: None,
            pin_mode: crate::mr::pin::PinMode::Uring,
            max_pinned: None,
            cache: crate::mr::CacheConfig::default(),
            phys_fallback: false,
            sysfs: Default::default(),
            share_min: SHARE_MIN,
            share_chunk: 0,
            eager_max: EAGER_MAX,
            write_batch: WRITE_BATCH,
            sender_jobs: true,
            pair_recv: true,
            wire: Wire::Auto,
            cm_timeout: std::time::Duration::from_millis(CM_TIMEOUT_MS as u64),
            wait_tick: std::time::Duration::from_millis(WAIT_TICK_MS as u64),
            tcp_io_uring: true,
            tcp_eager_max: TCP_EAGER_MAX,
            tcp_zc_copied: TCP_ZC_COPIED as u32,
            tcp_lanes: TCP_LANES as u32,
            auth_key: EnvKey::None,
            tcp_conn_max: 4096,
            tcp_hello_wait: std::time::Duration::from_millis(TCP_HELLO_MS as u64),
            tcp_partial_max: TCP_PARTIAL_MAX,
            refuse_max: REFUSE_MAX as u32,
            refuse_ban: std::time::Duration::from_millis(REFUSE_BAN_MS as u64),
            unexp_max: UNEXP_MAX,
            outbox_max: OUTBOX_MAX,
        }
    }
}
