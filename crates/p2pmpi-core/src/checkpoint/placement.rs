//! The storage peers a coordinator knows, by load: where the next copy goes.

use super::{Host, Peer};
use std::collections::{BTreeMap, BTreeSet};

/// Peers with their host and the bytes of copies they were given.
#[derive(Debug, Clone, Default)]
pub(super) struct Peers {
    info: BTreeMap<Peer, (Host, u64)>,
    /// (load, peer), least loaded first; ties by peer number.
    by_load: BTreeSet<(u64, Peer)>,
}

impl Peers {
    /// A peer joins (or comes back, with no copies); a known peer may change host.
    pub(super) fn insert(&mut self, peer: Peer, host: Host) {
        match self.info.get_mut(&peer) {
            Some(i) => i.0 = host,
            None => {
                self.info.insert(peer, (host, 0));
                self.by_load.insert((0, peer));
            }
        }
    }

    pub(super) fn remove(&mut self, peer: Peer) {
        if let Some((_, load)) = self.info.remove(&peer) {
            self.by_load.remove(&(load, peer));
        }
    }

    pub(super) fn host(&self, peer: Peer) -> Option<Host> {
        self.info.get(&peer).map(|i| i.0)
    }

    /// Adds `delta` bytes to a peer's load (a peer that left is ignored).
    pub(super) fn add_load(&mut self, peer: Peer, delta: i64) {
        if let Some(i) = self.info.get_mut(&peer) {
            self.by_load.remove(&(i.1, peer));
            i.1 = i.1.saturating_add_signed(delta);
            self.by_load.insert((i.1, peer));
        }
    }

    /// The least loaded peer that `fits` (peer, host), if any.
    pub(super) fn pick(&self, fits: impl Fn(Peer, Host) -> bool) -> Option<Peer> {
        self.by_load.iter().map(|&(_, p)| p).find(|p| fits(*p, self.info[p].0))
    }
}
