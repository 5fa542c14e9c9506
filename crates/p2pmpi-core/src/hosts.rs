//! Host lists (SPEC §2, thesis §3.1.1, §3.3.1), without I/O.
//!
//! * [`HostList`] is the supernode's *host list*: every registered peer with its info and the
//!   time it was last seen (registration or alive signal); peers silent too long are dropped.
//! * [`PeerCache`] is an MPD's *cached list*: the host list as last fetched from a supernode,
//!   with the round-trip time of its application-level pings, ranked by latency for booking,
//!   and serializable so it survives restarts (`PEER_CACHE`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The supernode's host list (SPEC §2): peers with their info and last-seen time.
#[derive(Debug, Clone)]
pub struct HostList<K, V> {
    peers: BTreeMap<K, (V, u64)>,
}

impl<K, V> Default for HostList<K, V> {
    fn default() -> Self {
        HostList { peers: BTreeMap::new() }
    }
}

impl<K: Clone + Ord, V: Clone> HostList<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Register or re-register: store info, last_seen = now.
    pub fn register(&mut self, now_ms: u64, key: K, info: V) {
        self.peers.insert(key, (info, now_ms));
    }

    /// Keep-alive: returns false if the key is unknown (the peer must register again).
    pub fn alive(&mut self, now_ms: u64, key: &K) -> bool {
        match self.peers.get_mut(key) {
            Some((_, seen)) => {
                *seen = now_ms;
                true
            }
            None => false,
        }
    }

    pub fn unregister(&mut self, key: &K) -> bool {
        self.peers.remove(key).is_some()
    }

    /// Drops peers not seen for more than ttl_ms; returns them (in key order).
    pub fn expire(&mut self, now_ms: u64, ttl_ms: u64) -> Vec<K> {
        let gone: Vec<K> = self
            .peers
            .iter()
            .filter(|(_, (_, seen))| now_ms.saturating_sub(*seen) > ttl_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            self.peers.remove(k);
        }
        gone
    }

    /// (key, info, ms since last seen), sorted by key.
    pub fn list(&self, now_ms: u64) -> Vec<(K, V, u64)> {
        self.peers.iter().map(|(k, (v, seen))| (k.clone(), v.clone(), now_ms.saturating_sub(*seen))).collect()
    }

    pub fn len(&self) -> usize {
        self.peers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }
}

/// One entry of an MPD's cached host list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry<V> {
    /// What the supernode knows of the peer (address, service ports…).
    pub info: V,
    /// Last measured round-trip time of a ping, in µs; None until measured.
    pub rtt_us: Option<u64>,
    /// False once the host failed to answer a ping or a reservation request in time.
    pub alive: bool,
    /// When this entry last changed.
    pub updated_ms: u64,
}

/// An MPD's cached host list (SPEC §2): refreshed from the supernode, RTT measured by pings,
/// persisted (serde) so it survives restarts. Serialized as a list of `(key, entry)` pairs in key
/// order, so that struct keys work with JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(
    serialize = "K: Serialize, V: Serialize",
    deserialize = "K: Deserialize<'de> + Ord, V: Deserialize<'de>"
))]
pub struct PeerCache<K, V> {
    #[serde(with = "pairs")]
    hosts: BTreeMap<K, CacheEntry<V>>,
}

mod pairs {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer, K: Serialize, E: Serialize>(m: &BTreeMap<K, E>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(m.iter())
    }

    pub fn deserialize<'de, D, K, E>(d: D) -> Result<BTreeMap<K, E>, D::Error>
    where
        D: Deserializer<'de>,
        K: Deserialize<'de> + Ord,
        E: Deserialize<'de>,
    {
        Ok(Vec::<(K, E)>::deserialize(d)?.into_iter().collect())
    }
}

impl<K, V> Default for PeerCache<K, V> {
    fn default() -> Self {
        PeerCache { hosts: BTreeMap::new() }
    }
}

impl<K: Clone + Ord, V: Clone> PeerCache<K, V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh list from a supernode: known keys keep their rtt and alive flag (info replaced,
    /// updated = now; only a measurement revives a dead host); new keys are added (rtt None,
    /// alive); keys absent from the list are removed (they left or expired at the supernode).
    /// `me` is never stored.
    pub fn refresh(&mut self, now_ms: u64, me: &K, list: Vec<(K, V)>) {
        let mut old = std::mem::take(&mut self.hosts);
        for (k, info) in list {
            if k == *me {
                continue;
            }
            let entry = match old.remove(&k).or_else(|| self.hosts.remove(&k)) {
                Some(e) => CacheEntry { info, updated_ms: now_ms, ..e },
                None => CacheEntry { info, rtt_us: None, alive: true, updated_ms: now_ms },
            };
            self.hosts.insert(k, entry);
        }
    }

    /// Merge without removing (e.g. from a second supernode or a peer): add or update info.
    pub fn merge(&mut self, now_ms: u64, me: &K, list: Vec<(K, V)>) {
        for (k, info) in list {
            if k == *me {
                continue;
            }
            match self.hosts.get_mut(&k) {
                Some(e) => {
                    e.info = info;
                    e.updated_ms = now_ms;
                }
                None => {
                    self.hosts.insert(k, CacheEntry { info, rtt_us: None, alive: true, updated_ms: now_ms });
                }
            }
        }
    }

    /// A measured round trip: rtt_us set, alive = true, updated = now. Unknown key ignored.
    pub fn measured(&mut self, now_ms: u64, key: &K, rtt_us: u64) {
        if let Some(e) = self.hosts.get_mut(key) {
            e.rtt_us = Some(rtt_us);
            e.alive = true;
            e.updated_ms = now_ms;
        }
    }

    /// The host did not answer (ping or reservation time-out): alive = false, updated = now.
    pub fn mark_dead(&mut self, now_ms: u64, key: &K) {
        if let Some(e) = self.hosts.get_mut(key) {
            e.alive = false;
            e.updated_ms = now_ms;
        }
    }

    /// Alive hosts in increasing RTT order, the order booking asks them in; hosts never measured
    /// come after measured ones (in key order); dead hosts are excluded. Ties keep key order.
    pub fn ranked(&self) -> Vec<K> {
        let mut v: Vec<(&K, Option<u64>)> =
            self.hosts.iter().filter(|(_, e)| e.alive).map(|(k, e)| (k, e.rtt_us)).collect();
        v.sort_by_key(|&(_, rtt)| (rtt.is_none(), rtt)); // stable: ties keep key order
        v.into_iter().map(|(k, _)| k.clone()).collect()
    }

    pub fn get(&self, key: &K) -> Option<&CacheEntry<V>> {
        self.hosts.get(key)
    }

    /// Every entry, in key order.
    pub fn entries(&self) -> Vec<(K, CacheEntry<V>)> {
        self.hosts.iter().map(|(k, e)| (k.clone(), e.clone())).collect()
    }

    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    pub fn remove(&mut self, key: &K) -> bool {
        self.hosts.remove(key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_list_registration_alive_and_expiry() {
        let mut l = HostList::new();
        assert!(l.is_empty());
        l.register(0, "b", 2);
        l.register(100, "a", 1);
        assert_eq!(l.list(150), vec![("a", 1, 50), ("b", 2, 150)]);
        assert!(l.alive(200, &"b"));
        assert!(!l.alive(200, &"zz"), "unknown peers must register again");
        l.register(210, "a", 10); // re-registration replaces the info
        assert_eq!(l.list(250), vec![("a", 10, 40), ("b", 2, 50)]);
        assert_eq!(l.expire(1200, 1000), Vec::<&str>::new(), "not seen for exactly ttl is kept");
        assert_eq!(l.expire(1201, 1000), vec!["b"]);
        assert_eq!(l.len(), 1);
        assert!(l.unregister(&"a") && !l.unregister(&"a"));
        assert!(l.is_empty() && HostList::<u8, u8>::default().is_empty());
    }

    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    struct Peer {
        ip: String,
        port: u16,
    }

    fn peer(i: u16) -> Peer {
        Peer { ip: format!("10.0.0.{i}"), port: 9897 }
    }

    fn list(ids: &[u16]) -> Vec<(Peer, String)> {
        ids.iter().map(|&i| (peer(i), format!("info{i}"))).collect()
    }

    #[test]
    fn refresh_keeps_rtt_skips_me_and_drops_absent_hosts() {
        let mut c = PeerCache::new();
        c.refresh(10, &peer(0), list(&[0, 1, 2, 3]));
        assert_eq!(c.len(), 3, "me is never stored");
        assert!(c.get(&peer(0)).is_none());
        assert_eq!(
            c.get(&peer(1)),
            Some(&CacheEntry { info: "info1".into(), rtt_us: None, alive: true, updated_ms: 10 })
        );
        c.measured(20, &peer(1), 500);
        c.measured(20, &peer(9), 1); // unknown: ignored
        c.mark_dead(25, &peer(2));
        c.mark_dead(25, &peer(9));
        let mut fresh = list(&[1, 2, 4]);
        fresh[0].1 = "new1".into();
        c.refresh(30, &peer(0), fresh);
        assert_eq!(
            c.get(&peer(1)),
            Some(&CacheEntry { info: "new1".into(), rtt_us: Some(500), alive: true, updated_ms: 30 })
        );
        assert!(!c.get(&peer(2)).unwrap().alive, "a refresh does not revive a dead host");
        assert!(c.get(&peer(3)).is_none(), "left the supernode");
        assert_eq!(c.entries().iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), vec![peer(1), peer(2), peer(4)]);
        c.merge(40, &peer(0), list(&[0, 5, 1]));
        assert_eq!(c.len(), 4);
        assert_eq!(c.get(&peer(1)).unwrap().info, "info1");
        assert_eq!(c.get(&peer(1)).unwrap().rtt_us, Some(500));
        assert!(c.remove(&peer(5)) && !c.remove(&peer(5)));
        assert!(!c.is_empty());
    }

    #[test]
    fn ranking_by_rtt_unmeasured_last_dead_excluded() {
        let mut c = PeerCache::new();
        c.refresh(0, &peer(0), list(&[1, 2, 3, 4, 5, 6]));
        c.measured(1, &peer(5), 300);
        c.measured(1, &peer(3), 100);
        c.measured(1, &peer(6), 300);
        c.measured(1, &peer(2), 50);
        c.mark_dead(2, &peer(2));
        assert_eq!(c.ranked(), vec![peer(3), peer(5), peer(6), peer(1), peer(4)]);
        c.measured(3, &peer(2), 70); // answering again revives it
        assert_eq!(c.ranked()[0], peer(2));
    }

    #[test]
    fn cache_round_trips_through_json() {
        let mut c = PeerCache::new();
        c.refresh(5, &peer(0), list(&[2, 1]));
        c.measured(6, &peer(2), 42);
        c.mark_dead(7, &peer(1));
        let json = serde_json::to_string(&c).unwrap();
        let back: PeerCache<Peer, String> = serde_json::from_str(&json).unwrap();
        assert_eq!(back.entries(), c.entries());
        assert_eq!(serde_json::to_string(&back).unwrap(), json, "deterministic");
    }
}
