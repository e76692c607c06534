//! oxmr's `FI_OXMR_*` variables: defined with `fi_param_define` (so
//! `fi_info -e` lists them with their help) and read once, in fi_prov_ini.

use std::ffi::{c_char, c_void, CStr};
use std::sync::OnceLock;

use oxmr_ffi as ffi;

use super::provider::provider_ptr;
use crate::config::{
    Config, CM_TIMEOUT_MS, EAGER_MAX, OUTBOX_MAX, REFUSE_BAN_MS, REFUSE_MAX, SHARE_MIN, TCP_EAGER_MAX, TCP_HELLO_MS,
    TCP_LANES, TCP_LANES_MAX, TCP_PARTIAL_MAX, TCP_ZC_COPIED, UNEXP_MAX, WAIT_TICK_MS, WRITE_BATCH,
};

/// One variable: `name` is the suffix after `FI_OXMR_`, lower case.
pub struct ParamDef {
    pub name: &'static CStr,
    pub kind: ffi::fi_param_type,
    pub help: &'static CStr,
}

/// Every variable oxmr reads. The man page (man/fi_oxmr.7) and the table in
/// docs/variables.md describe the same names (a test in ext.rs checks both;
/// ci/manpage.sh checks the page against `fi_info -p oxmr -e`).
pub(crate) const PARAMS: &[ParamDef] = &[
    ParamDef {
        name: c"iface",
        kind: ffi::FI_PARAM_STRING,
        help: c"Comma-separated network interfaces fi_getinfo offers, e.g. 'lo' or 'eth0,eth1' (default: every interface that is up)",
    },
    ParamDef {
        name: c"mr_pin",
        kind: ffi::FI_PARAM_STRING,
        help: c"How registrations hold their pages: uring (io_uring fixed buffers, a long-term pin like ibv_reg_mr), mlock, or none (default: uring, falling back to mlock where io_uring is unavailable)",
    },
    ParamDef {
        name: c"mr_max_pinned",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"Cap on bytes oxmr keeps pinned in this process (default: the RLIMIT_MEMLOCK soft limit; unlimited when that is unlimited or with CAP_IPC_LOCK)",
    },
    ParamDef {
        name: c"mr_cache_enable",
        kind: ffi::FI_PARAM_BOOL,
        help: c"Keep closed registrations pinned in a lazy-deregistration cache that the kernel invalidates through userfaultfd (default: 1)",
    },
    ParamDef {
        name: c"mr_cache_max_size",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"Bytes the registration cache may hold, in use and unused (default: 1073741824); unused entries beyond it are evicted LRU first",
    },
    ParamDef {
        name: c"mr_cache_max_count",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"Entries the registration cache may hold (default: 4096)",
    },
    ParamDef {
        name: c"mr_cache_explicit",
        kind: ffi::FI_PARAM_BOOL,
        help: c"Whether application registrations (fi_mr_reg) use the cache; 0 keeps it to oxmr's internal registrations, for applications with a cache of their own (default: 1)",
    },
    ParamDef {
        name: c"mr_cache_monitor",
        kind: ffi::FI_PARAM_STRING,
        help: c"How the cache learns of unmapped memory: uffd (userfaultfd) or none (then nothing is cached: a range that cannot be watched is never cached) (default: uffd)",
    },
    ParamDef {
        name: c"mr_record_pfn",
        kind: ffi::FI_PARAM_BOOL,
        help: c"Record the page frame number of each registration's first page when it is pinned, reported by the oxmr_mr_ops query (verification aid; PFNs are visible to root only) (default: 0)",
    },
    ParamDef {
        name: c"mr_phys_fallback",
        kind: ffi::FI_PARAM_BOOL,
        help: c"Register device memory that cannot be pinned (VM_PFNMAP/VM_IO mappings from remap_pfn_range) by physical address; only such memory, checked page by page, revoked when its mapping changes (default: 0; per call: OXMR_MR_PHYS_FALLBACK in fi_mr_regattr flags)",
    },
    ParamDef {
        name: c"sysfs_root",
        kind: ffi::FI_PARAM_STRING,
        help: c"Where sysfs is, for proving which PCI device a BAR, VFIO or P2PDMA mapping belongs to (as hwloc's HWLOC_FSROOT); set only to test against a synthetic tree, which makes registration look for device identity before pinning (default: /sys)",
    },
    ParamDef {
        name: c"wait_tick_ms",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"How long a thread blocked in fi_cq_sread, fi_cntr_wait or poll() on a wait fd sleeps at most when every endpoint feeding the queue wakes it on arrival; progress then runs anyway, to notice peers that died without a word (default: 100)",
    },
    ParamDef {
        name: c"tcp_io_uring",
        kind: ffi::FI_PARAM_BOOL,
        help: c"TCP links send each frame part of at least 32 KiB that lies in memory registered (pinned) in the domain's io_uring with io_uring SEND_ZC, on that ring; the rest (length prefixes, headers, small frames, unregistered memory) is copied with writev. 0: plain non-blocking sockets only. Falls back to sockets where the domain has no ring (FI_OXMR_MR_PIN=mlock or none, io_uring unavailable) or the kernel has no SEND_ZC (default: 1)",
    },
    ParamDef {
        name: c"tcp_eager_max",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"Sends over TCP up to this many bytes go inline, right behind their header (the receiver copies them once from its frame buffer, or keeps them if no receive matches yet); larger ones go by rendezvous, their data read straight into the matched receive buffer after one round trip. At most a TCP frame less its header: about 512 KiB to a peer on another host, about 1 MiB on this host (default: 65536)",
    },
    ParamDef {
        name: c"tcp_zc_copied",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"After this many SEND_ZC sends in a row that the kernel reported it copied anyway (a peer on this machine: loopback, veth), a TCP link sends with writev, which costs less there; 0: never stop (default: 4)",
    },
    ParamDef {
        name: c"tcp_lanes",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"How many TCP connections a link keeps to its peer for the data of large transfers: rendezvous sends, and RMA writes of 1 MiB or more (which then wait for the target's pull instead of streaming), go in chunks of up to 256 KiB (1 MiB to a peer on this host), each on whichever connection has nothing queued; the rest of the traffic keeps its one connection per pair of endpoints. The extra connections open at the first such transfer; measured on loopback and veth they carry no more than one. 1: one connection only; at most 8 (default: 1)",
    },
    ParamDef {
        name: c"cm_timeout_ms",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"How long an FI_EP_MSG fi_connect may take before its EQ gets an FI_ETIMEDOUT error event, and how long an accepted connection waits for the connector's answer (default: 10000)",
    },
    ParamDef {
        name: c"shm_eager_max",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"Same-host sends up to this many bytes travel inline through the receiver's queue (two copies); larger ones are copied once by the receiver with process_vm_readv. At most 8080; injects always go inline (default: 8080)",
    },
    ParamDef {
        name: c"shm_share_min",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"Same-host transfers of at least this many bytes (rendezvous sends, RMA) are copied by both processes at once, in chunks claimed from a shared counter; 0 turns shared copies off; a transfer with nothing else queued behind it is shared from a quarter of this (default: 262144)",
    },
    ParamDef {
        name: c"shm_share_chunk",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"Bytes per chunk of a shared copy (default: 0, automatic: half the transfer, between 16 KiB and 1 MiB)",
    },
    ParamDef {
        name: c"shm_sender_jobs",
        kind: ffi::FI_PARAM_BOOL,
        help: c"A rendezvous send large enough to be shared offers the receiver a job in the sender's own queue file, so that the receiver starts the shared copy without a CTS message and nobody sends an ACK on success (docs/wire.md) (default: 1)",
    },
    ParamDef {
        name: c"shm_pair_recv",
        kind: ffi::FI_PARAM_BOOL,
        help: c"Two queued rendezvous receives of equal size (under shm_share_min) from one peer are copied as one shared job: each process copies the same half of both messages with one call (docs/wire.md) (default: 1)",
    },
    ParamDef {
        name: c"wire",
        kind: ffi::FI_PARAM_STRING,
        help: c"Which wire carries RDM endpoints' data, per peer: auto (shared memory to a peer whose address is one of this network namespace's own, loopback included; TCP to any other), shm (shared memory to every peer, same host only) or tcp (TCP to every peer, same host included). Set it alike on both sides (default: auto)",
    },
    ParamDef {
        name: c"auth_key",
        kind: ffi::FI_PARAM_STRING,
        help: c"The job key (at least 16 bytes) for domains whose application gives no auth_key: every TCP connection between endpoints proves both sides hold it before any frame is taken (docs/security.md); set the same on every process of the job, e.g. mpirun -x FI_OXMR_AUTH_KEY (default: none, peers are not authenticated)",
    },
    ParamDef {
        name: c"auth_key_file",
        kind: ffi::FI_PARAM_STRING,
        help: c"A file holding the job key (as FI_OXMR_AUTH_KEY; a trailing newline is dropped); it must be a regular file of this user that no one else may read or write (mode 0600 or 0400) (default: none)",
    },
    ParamDef {
        name: c"tcp_conn_max",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"TCP connections an endpoint holds at once; past it, the oldest one that has not said its hello is closed to make room, or else the new one (log line) (default: half the soft descriptor limit, at least 64)",
    },
    ParamDef {
        name: c"tcp_hello_ms",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"How long a new TCP connection may take to say who it is (and, with a job key, prove it) before it is closed (log line) (default: 10000)",
    },
    ParamDef {
        name: c"tcp_partial_max",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"Bytes of unfinished frames an endpoint holds over all its TCP connections; past it, connections holding one are not read (TCP pushes back on their senders), and one whose frame stays unfinished for FI_OXMR_TCP_HELLO_MS meanwhile is closed (log line); at least 1 MiB, a whole frame (default: 67108864)",
    },
    ParamDef {
        name: c"refuse_max",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"Refused remote accesses (wrong key, bounds or rights) from one peer before the TCP connection it uses is closed and its source refused for FI_OXMR_REFUSE_BAN_MS (log line); 0: never (default: 256)",
    },
    ParamDef {
        name: c"refuse_ban_ms",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"How long a source closed for refused accesses is refused new TCP connections (default: 10000)",
    },
    ParamDef {
        name: c"unexp_max",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"Bytes an endpoint's unexpected messages (sends no posted receive matched yet) may hold; past it, what the TCP peer whose message found it spent sends is not read until receives take them below three quarters (TCP pushes back; nothing is lost) (default: 1073741824)",
    },
    ParamDef {
        name: c"outbox_max",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"Bytes of answers (acknowledgements) queued for one peer whose connection does not take them; past it, what that peer sends is not read until half have gone (default: 67108864)",
    },
    ParamDef {
        name: c"shm_write_batch",
        kind: ffi::FI_PARAM_SIZE_T,
        help: c"A run of one peer's queued RMA writes (each checked as alone) is copied with one process_vm_readv of up to this many bytes; 0 copies each write alone (default: 262144)",
    },
];

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The configuration (defaults when oxmr was not loaded by libfabric).
pub fn config() -> &'static Config {
    CONFIG.get_or_init(Config::default)
}

fn get_str(name: &CStr) -> Option<String> {
    let mut v: *mut c_char = std::ptr::null_mut();
    // SAFETY: a string parameter writes a `char *` (owned by libfabric's
    // environment copy) into `v`; we copy it out at once.
    let r = unsafe { ffi::fi_param_get(provider_ptr(), name.as_ptr(), (&mut v as *mut *mut c_char).cast::<c_void>()) };
    if r != 0 || v.is_null() {
        return None;
    }
    // SAFETY: non-NULL NUL-terminated string from libfabric.
    Some(unsafe { CStr::from_ptr(v) }.to_string_lossy().into_owned())
}

fn get_size(name: &CStr) -> Option<usize> {
    let mut v: usize = 0;
    // SAFETY: a size_t parameter writes one size_t into `v`.
    let r = unsafe { ffi::fi_param_get(provider_ptr(), name.as_ptr(), (&mut v as *mut usize).cast::<c_void>()) };
    (r == 0).then_some(v)
}

fn get_bool(name: &CStr) -> Option<bool> {
    let mut v: i32 = 0;
    // SAFETY: a bool parameter writes one int into `v`.
    let r = unsafe { ffi::fi_param_get(provider_ptr(), name.as_ptr(), (&mut v as *mut i32).cast::<c_void>()) };
    (r == 0).then_some(v != 0)
}

/// Define every variable and read them (fi_prov_ini).
pub fn define_and_load() {
    for p in PARAMS {
        // SAFETY: static NUL-terminated strings; "%s" consumes the one
        // vararg, so help text is never interpreted as a format.
        unsafe {
            ffi::fi_param_define(provider_ptr(), p.name.as_ptr(), p.kind, c"%s".as_ptr(), p.help.as_ptr());
        }
    }
    let ifaces =
        get_str(c"iface").map(|s| s.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect());
    let pin_mode = crate::mr::pin::PinMode::parse(get_str(c"mr_pin").as_deref()).unwrap_or_else(|why| {
        tracing::warn!("{why}; using uring");
        crate::mr::pin::PinMode::Uring
    });
    let max_pinned = get_size(c"mr_max_pinned").map(|v| v as u64);
    let d = crate::mr::CacheConfig::default();
    let monitor = match get_str(c"mr_cache_monitor").as_deref().map(str::trim) {
        None | Some("") | Some("uffd") => true,
        Some("none") => false,
        Some(other) => {
            tracing::warn!("FI_OXMR_MR_CACHE_MONITOR={other} is not uffd or none; using uffd");
            true
        }
    };
    let cache = crate::mr::CacheConfig {
        enable: get_bool(c"mr_cache_enable").unwrap_or(d.enable),
        explicit: get_bool(c"mr_cache_explicit").unwrap_or(d.explicit),
        monitor,
        max_bytes: get_size(c"mr_cache_max_size").map_or(d.max_bytes, |v| v as u64),
        max_count: get_size(c"mr_cache_max_count").unwrap_or(d.max_count),
        record_pfn: get_bool(c"mr_record_pfn").unwrap_or(d.record_pfn),
    };
    let phys_fallback = get_bool(c"mr_phys_fallback").unwrap_or(false);
    let sysfs = crate::mr::device::Sysfs::from_var(get_str(c"sysfs_root").as_deref());
    let share_min = get_size(c"shm_share_min").unwrap_or(SHARE_MIN);
    let share_chunk = get_size(c"shm_share_chunk").unwrap_or(0);
    let eager_max = get_size(c"shm_eager_max").unwrap_or(EAGER_MAX);
    let write_batch = get_size(c"shm_write_batch").unwrap_or(WRITE_BATCH);
    let sender_jobs = get_bool(c"shm_sender_jobs").unwrap_or(true);
    let pair_recv = get_bool(c"shm_pair_recv").unwrap_or(true);
    let wire = match get_str(c"wire").as_deref().map(str::trim) {
        None | Some("") | Some("auto") => crate::config::Wire::Auto,
        Some("shm") => crate::config::Wire::Shm,
        Some("tcp") => crate::config::Wire::Tcp,
        Some(other) => {
            tracing::warn!("FI_OXMR_WIRE={other} is not auto, shm or tcp; using auto");
            crate::config::Wire::Auto
        }
    };
    let cm_timeout =
        std::time::Duration::from_millis(get_size(c"cm_timeout_ms").unwrap_or(CM_TIMEOUT_MS).max(1) as u64);
    let wait_tick = std::time::Duration::from_millis(get_size(c"wait_tick_ms").unwrap_or(WAIT_TICK_MS).max(1) as u64);
    let tcp_io_uring = get_bool(c"tcp_io_uring").unwrap_or(true);
    let tcp_eager_max = get_size(c"tcp_eager_max").unwrap_or(TCP_EAGER_MAX);
    let tcp_zc_copied = get_size(c"tcp_zc_copied").unwrap_or(TCP_ZC_COPIED).min(u32::MAX as usize) as u32;
    let lanes_max = TCP_LANES_MAX;
    let tcp_lanes = match get_size(c"tcp_lanes").unwrap_or(TCP_LANES) {
        0 => {
            tracing::warn!("FI_OXMR_TCP_LANES=0: a link has at least its own connection; using 1");
            1
        }
        n if n > lanes_max => {
            tracing::warn!("FI_OXMR_TCP_LANES={n} is more than {lanes_max} connections per peer; using {lanes_max}");
            lanes_max
        }
        n => n,
    } as u32;
    let auth_key = env_key(get_str(c"auth_key"), get_str(c"auth_key_file"));
    let tcp_conn_max = match get_size(c"tcp_conn_max") {
        None | Some(0) => crate::config::tcp_conn_max_default(),
        Some(n) => n,
    };
    let ms =
        |name: &CStr, default: usize| std::time::Duration::from_millis(get_size(name).unwrap_or(default).max(1) as u64);
    let tcp_hello_wait = ms(c"tcp_hello_ms", TCP_HELLO_MS);
    // (At least one whole frame: a connection whose frame alone filled a
    // smaller budget would never be read to its end.)
    let tcp_partial_max = get_size(c"tcp_partial_max").unwrap_or(TCP_PARTIAL_MAX).max(crate::config::TCP_MAX_FRAME);
    let refuse_max = get_size(c"refuse_max").unwrap_or(REFUSE_MAX).min(u32::MAX as usize) as u32;
    let refuse_ban = ms(c"refuse_ban_ms", REFUSE_BAN_MS);
    let unexp_max = get_size(c"unexp_max").unwrap_or(UNEXP_MAX).max(1);
    let outbox_max = get_size(c"outbox_max").unwrap_or(OUTBOX_MAX).max(1);
    let _ = CONFIG.set(Config {
        ifaces,
        pin_mode,
        max_pinned,
        cache,
        phys_fallback,
        sysfs,
        share_min,
        share_chunk,
        eager_max,
        write_batch,
        sender_jobs,
        pair_recv,
        wire,
        cm_timeout,
        wait_tick,
        tcp_io_uring,
        tcp_eager_max,
        tcp_zc_copied,
        tcp_lanes,
        auth_key,
        tcp_conn_max,
        tcp_hello_wait,
        tcp_partial_max,
        refuse_max,
        refuse_ban,
        unexp_max,
        outbox_max,
    });
}

/// The job key FI_OXMR_AUTH_KEY or FI_OXMR_AUTH_KEY_FILE gives.
fn env_key(inline: Option<String>, file: Option<String>) -> crate::config::EnvKey {
    use crate::config::EnvKey;
    let bytes = match (inline.filter(|s| !s.is_empty()), file.filter(|s| !s.is_empty())) {
        (None, None) => return EnvKey::None,
        (Some(_), Some(_)) => {
            return EnvKey::Bad("both FI_OXMR_AUTH_KEY and FI_OXMR_AUTH_KEY_FILE are set: set one".into())
        }
        (Some(k), None) => k.into_bytes(),
        (None, Some(path)) => {
            match crate::sys::read_private_file(std::path::Path::new(&path), crate::auth::KEY_MAX + 1) {
                Ok(mut b) => {
                    while b.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
                        b.pop();
                    }
                    b
                }
                Err(why) => return EnvKey::Bad(format!("FI_OXMR_AUTH_KEY_FILE={path}: {why}")),
            }
        }
    };
    match crate::auth::JobKey::new(&bytes) {
        Ok(k) => EnvKey::Key(k),
        Err(why) => EnvKey::Bad(format!("FI_OXMR_AUTH_KEY: {why}")),
    }
}
