//! Address vector: the fid object over a `protocol::av::AddrTable` (which
//! says how fi_addrs are given out). Addresses are sockaddr_in /
//! sockaddr_in6; each inserted address is parsed by its own family, so one
//! insert may mix both.
//!
//! An AV opened with FI_EVENT is asynchronous (fi_av(3)): inserts need a
//! bound EQ (-FI_ENOEQ before), return 0, and each address that fails
//! produces an error event (data = its index in the call), then one
//! FI_AV_COMPLETE event carries the number inserted. Without FI_EVENT,
//! inserts are synchronous even with an EQ bound.
//!
//! A named AV (`fi_av_attr.name`) is shared with the processes of this
//! user that open the same name (`protocol::av::shared`): the one that
//! opens it without FI_READ creates it and is its only writer (a second
//! creator of a live name gets -FI_EBUSY); FI_READ opens an existing one
//! (-FI_ENOENT otherwise), whose inserts and removes are refused with
//! -FI_EPERM. Its fi_addrs are the same in every process: the index of
//! each address in insertion order, never reused. `map_addr` hands the
//! application an array of `capacity` fi_addr_t, entry i holding the
//! fi_addr of the i-th address inserted (i, as in libfabric's sockets and
//! psm2 providers), valid until fi_close; a map_addr the application
//! passes is ignored (the fi_addrs do not depend on it). FI_SYMMETRIC is
//! a hint oxmr takes and ignores.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use oxmr_ffi as ffi;

use super::domain::Domain;
use super::eq::{eq_entry_bytes, Eq, EqError};
use crate::error::Result;
use crate::fail;
use crate::protocol::av::shared::{self, SharedFile};
use crate::protocol::av::AddrTable;
use crate::sys::LockExt;
use oxmr_ffi::FidHeader;

/// The longest AV name oxmr takes, in bytes.
pub(crate) use crate::protocol::av::shared::MAX_NAME;

/// An address vector.
#[repr(C)]
pub struct Av {
    pub hdr: FidHeader<ffi::fid_av>,
    pub domain: Arc<Domain>,
    /// FI_AV_MAP or FI_AV_TABLE.
    pub av_type: u32,
    /// Opened with FI_EVENT: inserts complete on the bound EQ.
    pub events: bool,
    eq: Mutex<Option<Arc<Eq>>>,
    /// The addresses, which the engines resolve through.
    pub table: Arc<AddrTable>,
    /// A named AV: the array `fi_av_attr.map_addr` points to (entry i is
    /// the fi_addr of the i-th address inserted).
    map: Option<Box<[u64]>>,
}

fn type_name(t: u32) -> &'static str {
    if t == ffi::FI_AV_MAP {
        "FI_AV_MAP"
    } else {
        "FI_AV_TABLE"
    }
}

impl Drop for Av {
    fn drop(&mut self) {
        // (fi_close: the engines of closed endpoints may hold the table a
        // while longer; the name goes now.)
        self.table.close_named();
    }
}

/// What an insert did, for the boundary to report.
pub struct Inserted {
    /// Per address: its fi_addr, or the error code.
    pub results: Vec<std::result::Result<u64, u32>>,
    /// Whether the outcome goes to the bound EQ (the call then returns 0).
    pub asynchronous: bool,
    /// The EQ its events go to (posted by `Av::complete_insert`, after the
    /// caller wrote the fi_addr array: the event publishes it).
    eq: Option<Arc<Eq>>,
}

impl Av {
    /// Build from `fi_av_attr` fields; `name` is the attribute's name
    /// (None: NULL), read by the caller.
    pub fn new(
        hdr: FidHeader<ffi::fid_av>,
        domain: Arc<Domain>,
        attr: &ffi::fi_av_attr,
        name: Option<&[u8]>,
    ) -> Result<Self> {
        let asked = match attr.type_ {
            t @ (ffi::FI_AV_UNSPEC | ffi::FI_AV_MAP | ffi::FI_AV_TABLE) => t,
            t => return Err(fail!(ffi::FI_EINVAL, "unknown av type {t}; use FI_AV_MAP or FI_AV_TABLE")),
        };
        // (fi_rx_addr puts a receive context's index in the top
        // rx_ctx_bits of an fi_addr: what a scalable endpoint has fits
        // in 4, and more than 16 would leave too few for the index.)
        if !(0..=crate::protocol::av::MAX_RX_CTX_BITS as i32).contains(&attr.rx_ctx_bits) {
            return Err(fail!(
                ffi::FI_EINVAL,
                "rx_ctx_bits {} asked: oxmr takes 0 to {} (its scalable endpoints have at most {} receive contexts)",
                attr.rx_ctx_bits,
                crate::protocol::av::MAX_RX_CTX_BITS,
                crate::info::attrs::SEP_MAX_CTX
            ));
        }
        // (FI_SYMMETRIC is a hint about the addresses to come: taken.)
        let known = ffi::FI_EVENT as u64 | ffi::FI_READ as u64 | ffi::FI_SYMMETRIC as u64;
        if attr.flags & !known != 0 {
            return Err(fail!(ffi::FI_EINVAL, "unsupported fi_av_attr flags {:#x}", attr.flags & !known));
        }
        let read_only = attr.flags & ffi::FI_READ as u64 != 0;
        if read_only && name.is_none() {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_av_open: FI_READ opens an existing named AV; set fi_av_attr.name to its name"
            ));
        }
        // A reader takes the type its creator chose.
        let shared = match name {
            Some(n) if read_only => Some(SharedFile::open(n)?),
            _ => None,
        };
        let av_type = match (&shared, asked) {
            (Some(f), _) => {
                let t = if f.is_map() { ffi::FI_AV_MAP } else { ffi::FI_AV_TABLE };
                if asked != ffi::FI_AV_UNSPEC && asked != t {
                    return Err(fail!(
                        ffi::FI_EINVAL,
                        "fi_av_open: the named AV {} is {}, not {}; ask FI_AV_UNSPEC or its type",
                        f.name(),
                        type_name(t),
                        type_name(asked)
                    ));
                }
                t
            }
            (None, ffi::FI_AV_UNSPEC) => match domain.av_type {
                ffi::FI_AV_MAP => ffi::FI_AV_MAP,
                _ => ffi::FI_AV_TABLE,
            },
            (None, t) => t,
        };
        if domain.av_type != ffi::FI_AV_UNSPEC && domain.av_type != av_type {
            return Err(fail!(
                ffi::FI_EINVAL,
                "av type {av_type} differs from the domain's av_type {}",
                domain.av_type
            ));
        }
        let map = av_type == ffi::FI_AV_MAP;
        let (table, map_array) = match (name, shared) {
            (_, Some(f)) => {
                let n = f.capacity();
                (AddrTable::named(f, false), Some((0..n as u64).collect()))
            }
            (Some(n), None) => {
                // (count is a hint: a named AV holds at least the default,
                // in a sparse file.)
                let cap = attr.count.max(shared::DEFAULT_ENTRIES);
                (AddrTable::named(SharedFile::create(n, cap, map)?, true), Some((0..cap as u64).collect()))
            }
            (None, None) => (AddrTable::new(attr.count, map), None),
        };
        let table = table.with_rx_bits(attr.rx_ctx_bits as u32);
        let events = attr.flags & ffi::FI_EVENT as u64 != 0;
        Ok(Av { hdr, domain, av_type, events, eq: Mutex::new(None), table: Arc::new(table), map: map_array })
    }

    /// A named AV: the address of its fi_addr array, for
    /// `fi_av_attr.map_addr` (valid while the AV is open).
    pub fn map_addr(&self) -> Option<usize> {
        self.map.as_ref().map(|m| m.as_ptr() as usize)
    }

    /// Whether this AV was opened with FI_READ (a named AV of another
    /// process's making).
    pub fn read_only(&self) -> bool {
        self.table.read_only()
    }

    /// Bind an EQ: inserts become asynchronous.
    pub fn bind_eq(&self, eq: Arc<Eq>) -> Result<()> {
        let mut slot = self.eq.lock_ok();
        if slot.is_some() {
            return Err(fail!(ffi::FI_EINVAL, "this AV already has an EQ bound"));
        }
        *slot = Some(eq);
        Ok(())
    }

    fn fid_addr(&self) -> usize {
        self as *const Self as usize
    }

    /// Insert parsed addresses (`None`: not a valid address).
    pub fn insert(&self, addrs: &[Option<SocketAddr>], flags: u64) -> Result<Inserted> {
        let known = ffi::FI_MORE as u64 | ffi::FI_SYNC_ERR as u64;
        if flags & !known != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_av_insert flags {:#x} not supported", flags & !known));
        }
        let eq = if self.events {
            let eq = self.eq.lock_ok().clone();
            if eq.is_none() {
                return Err(fail!(
                    ffi::FI_ENOEQ,
                    "fi_av_insert: this AV was opened with FI_EVENT; bind an EQ (fi_av_bind) before inserting"
                ));
            }
            if flags & ffi::FI_SYNC_ERR as u64 != 0 {
                return Err(fail!(
                    ffi::FI_EBADFLAGS,
                    "FI_SYNC_ERR applies to synchronous inserts; this AV was opened with FI_EVENT"
                ));
            }
            eq
        } else {
            None
        };
        if self.read_only() {
            return Err(fail!(
                ffi::FI_EPERM,
                "fi_av_insert: this AV was opened with FI_READ (a named AV of another process); its creator inserts"
            ));
        }
        let results = self.table.insert(addrs);
        let bad = results.iter().filter(|r| **r == Err(ffi::FI_EINVAL)).count();
        if bad > 0 {
            tracing::warn!(
                "fi_av_insert: {bad} of {} addresses are not valid sockaddr_in/sockaddr_in6 and got FI_ADDR_NOTAVAIL",
                addrs.len()
            );
        }
        Ok(Inserted { asynchronous: eq.is_some(), results, eq })
    }

    /// Post an asynchronous insert's events: an error entry per address
    /// that failed, then FI_AV_COMPLETE. Call once the application's
    /// fi_addr array is written (fi_av(3): the event completes the insert).
    pub fn complete_insert(&self, done: &Inserted, context: usize) {
        let results = &done.results;
        let bad = results.iter().filter(|r| r.is_err()).count();
        if let Some(eq) = &done.eq {
            for (i, r) in results.iter().enumerate() {
                if let Err(code) = r {
                    eq.post_error(EqError {
                        fid: self.fid_addr(),
                        context,
                        data: i as u64,
                        err: *code as i32,
                        ..Default::default()
                    });
                }
            }
            let n = (results.len() - bad) as u64;
            eq.post(ffi::FI_AV_COMPLETE, eq_entry_bytes(self.fid_addr(), context, n));
        }
    }

    /// Remove entries; all-or-nothing.
    pub fn remove(&self, fi_addrs: &[u64], flags: u64) -> Result<()> {
        if flags != 0 {
            return Err(fail!(ffi::FI_EBADFLAGS, "fi_av_remove flags {flags:#x}: pass 0"));
        }
        if self.read_only() {
            return Err(fail!(
                ffi::FI_EPERM,
                "fi_av_remove: this AV was opened with FI_READ (a named AV of another process); its creator removes"
            ));
        }
        self.table.remove(fi_addrs)
    }

    /// The table's version (see `AddrTable::version`).
    pub fn version(&self) -> u64 {
        self.table.version()
    }

    /// The address stored for an fi_addr.
    pub fn lookup(&self, fi_addr: u64) -> Result<SocketAddr> {
        // (A named AV's reader reads what its creator changed first.)
        self.table.refresh();
        // (An fi_addr made by fi_rx_addr looks up the address inserted,
        // the scalable endpoint's, whichever receive context it names.)
        self.table.lookup(self.table.base_of(fi_addr))
    }

    /// The fi_addr of an address, if inserted (for FI_SOURCE reporting).
    pub fn reverse(&self, addr: &SocketAddr) -> Option<u64> {
        self.table.reverse(addr)
    }
}
