//! Who an engine talks to, by address: the AV entries and sender name it
//! used last, so that a run of messages to or from one peer reads no AV
//! lock and parses no name. The name -> address part is pure; the fi_addr
//! parts hold while the AV's version is `version` (checked on every use,
//! see `AddrTable::version`).

use std::net::SocketAddr;

use oxmr_ffi as ffi;

use crate::error::Result;
use crate::fail;
use crate::info::addr;
use crate::protocol::av::AddrTable;

#[derive(Default)]
pub(super) struct AvCache {
    version: u64,
    /// The last fi_addr resolved, and its address.
    to: Option<(u64, SocketAddr)>,
    /// The last sender: its name bytes, address and fi_addr (None: not
    /// looked up since the AV last changed, or not in it).
    from: Option<([u8; 28], SocketAddr, Option<u64>)>,
    /// `Hdr::sender_key` of the frames that name `from` (0: not known).
    from_key: u64,
}

impl AvCache {
    /// Forget the fi_addr parts when the AV changed since.
    fn check(&mut self, av: Option<&AddrTable>) {
        let v = av.map_or(0, |av| av.version());
        if v != self.version {
            self.version = v;
            self.to = None;
            if let Some(f) = &mut self.from {
                f.2 = None;
            }
        }
    }

    /// The address of a destination fi_addr.
    #[inline(always)]
    pub(super) fn resolve(&mut self, av: Option<&AddrTable>, fi_addr: u64) -> Result<SocketAddr> {
        self.check(av);
        if let Some((a, to)) = self.to {
            if a == fi_addr {
                return Ok(to);
            }
        }
        let av = av.ok_or_else(|| fail!(ffi::FI_ENOAV, "no AV bound"))?;
        let to = av.lookup(fi_addr)?;
        self.to = Some((fi_addr, to));
        Ok(to)
    }

    /// The address a message's sender name encodes (None: malformed).
    pub(super) fn sender(&mut self, name: &[u8; 28]) -> Option<SocketAddr> {
        if let Some((n, from, _)) = &self.from {
            if n == name {
                return Some(*from);
            }
        }
        let from = addr::parse(name)?;
        self.from = Some((*name, from, None));
        self.from_key = 0;
        Some(from)
    }

    /// The last sender, if `key` (`Hdr::sender_key`) names it.
    #[inline]
    pub(super) fn sender_keyed(&self, key: u64) -> Option<SocketAddr> {
        self.from.as_ref().filter(|_| key == self.from_key).map(|f| f.1)
    }

    /// Frames whose `Hdr::sender_key` is `key` name the last sender.
    pub(super) fn keyed(&mut self, key: u64) {
        self.from_key = key;
    }

    /// The fi_addr of a sender (FI_ADDR_NOTAVAIL when not in the AV), for
    /// FI_SOURCE.
    #[inline(always)]
    pub(super) fn src_fi_addr(&mut self, av: Option<&AddrTable>, from: &SocketAddr) -> u64 {
        self.check(av);
        if let Some((_, a, Some(fi))) = &self.from {
            if a == from {
                return *fi;
            }
        }
        let fi = av.and_then(|av| av.reverse(from));
        if let Some(f) = &mut self.from {
            if f.1 == *from {
                f.2 = fi;
            }
        }
        fi.unwrap_or(ffi::FI_ADDR_NOTAVAIL)
    }
}
