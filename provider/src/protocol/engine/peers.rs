//! The peers an engine sends to: a link each, the last one used at hand,
//! so that a run of messages to one peer compares one address instead of
//! hashing it.

use std::net::SocketAddr;

use crate::protocol::hash::FastMap;
use crate::wire::Link;

/// A peer we send to: its address and our link to it.
pub(super) struct TxPeer {
    pub(super) addr: SocketAddr,
    pub(super) link: Link,
}

/// The peers whose queues we opened, the last one used first: a run of
/// messages to one peer compares one address instead of hashing it.
#[derive(Default)]
pub(super) struct Peers {
    pub(super) list: Vec<TxPeer>,
    index: FastMap<SocketAddr, usize>,
    last: usize,
}

impl Peers {
    pub(super) fn find(&mut self, to: &SocketAddr) -> Option<usize> {
        if self.list.get(self.last).is_some_and(|p| p.addr == *to) {
            return Some(self.last);
        }
        let i = *self.index.get(to)?;
        self.last = i;
        Some(i)
    }

    pub(super) fn get(&mut self, to: &SocketAddr) -> Option<&TxPeer> {
        self.find(to).map(|i| &self.list[i])
    }

    pub(super) fn insert(&mut self, p: TxPeer) -> &TxPeer {
        self.index.insert(p.addr, self.list.len());
        self.list.push(p);
        self.last = self.list.len() - 1;
        &self.list[self.last]
    }

    pub(super) fn remove(&mut self, to: &SocketAddr) {
        if let Some(i) = self.index.remove(to) {
            self.list.swap_remove(i);
            if let Some(moved) = self.list.get(i) {
                self.index.insert(moved.addr, i);
            }
        }
    }
}
