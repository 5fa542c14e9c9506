//! The one member table of both implementations: every member a node knows, in the order
//! learned, each with its address, indexed by id.
//!
//! Every member of a pool holds one, so a simulated pool of n members holds n² entries: an
//! entry takes 16 bytes (the id and a packed address) and the index at most 4 bytes per 7/8
//! of a bucket, where a `Vec<(MemberId, SocketAddr)>` and a `HashMap<MemberId, usize>` took
//! about 80, and 10 000 simulated members fit in memory. What each implementation keeps
//! besides (the central client's ranks, the distributed node's versions and states) lives in
//! its own arrays, indexed by the same slot numbers.

use super::{Addr, MemberId};

/// A packed IPv4 address and port.
const PACKED_V4: u64 = 1 << 63;
/// An index into [`MemberTable::wide`].
const PACKED_WIDE: u64 = 1 << 62;
/// A vacated slot (the member was removed).
const VACANT: u64 = 0;

/// Members by slot (the order they were pushed), with an open-addressing index by id
/// (linear probing over `u32` buckets). A slot may be vacated; its bucket keeps pointing at
/// it (no tombstones) until the same id is pushed again, which repoints it to the new slot.
#[derive(Debug, Clone, Default)]
pub(super) struct MemberTable {
    /// Per slot: the id and the packed address ([`VACANT`] once vacated).
    slots: Vec<(MemberId, u64)>,
    /// Addresses that do not fit a packed word (IPv6), referred to by index.
    wide: Vec<Addr>,
    /// Slot + 1 per bucket, 0 for an empty one.
    index: Vec<u32>,
}

impl MemberTable {
    fn pack(&mut self, a: Addr) -> u64 {
        match a {
            Addr::V4(v4) => PACKED_V4 | (u64::from(u32::from(*v4.ip())) << 16) | u64::from(v4.port()),
            Addr::V6(_) => {
                self.wide.push(a);
                PACKED_WIDE | (self.wide.len() as u64 - 1)
            }
        }
    }

    fn unpack(&self, p: u64) -> Addr {
        if p & PACKED_V4 != 0 {
            let ip = core::net::Ipv4Addr::from(((p >> 16) & 0xffff_ffff) as u32);
            Addr::from((ip, (p & 0xffff) as u16))
        } else {
            self.wide[(p & !PACKED_WIDE) as usize]
        }
    }

    fn bucket(&self, id: MemberId) -> usize {
        // Fibonacci hashing: the high bits of the product, as many as the table has.
        let bits = self.index.len().trailing_zeros();
        (id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
    }

    /// The bucket of `id`, or the empty one where it would go.
    fn find(&self, id: MemberId) -> usize {
        let mask = self.index.len() - 1;
        let mut b = self.bucket(id);
        loop {
            match self.index[b] {
                0 => return b,
                k if self.slots[k as usize - 1].0 == id => return b,
                _ => b = (b + 1) & mask,
            }
        }
    }

    /// Slots pushed so far (vacated ones included).
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The id in slot `k`.
    pub(super) fn id(&self, k: usize) -> MemberId {
        self.slots[k].0
    }

    /// The address in slot `k` (not vacated).
    pub(super) fn addr(&self, k: usize) -> Addr {
        self.unpack(self.slots[k].1)
    }

    /// Whether slot `k` was vacated.
    pub(super) fn is_vacant(&self, k: usize) -> bool {
        self.slots[k].1 == VACANT
    }

    /// Vacates slot `k` (the member was removed).
    pub(super) fn vacate(&mut self, k: usize) {
        self.slots[k].1 = VACANT;
    }

    /// The latest slot of `id`, vacated or not.
    pub(super) fn get(&self, id: MemberId) -> Option<usize> {
        if self.index.is_empty() {
            return None;
        }
        match self.index[self.find(id)] {
            0 => None,
            k => Some(k as usize - 1),
        }
    }

    /// Room for `n` more members without growing.
    pub(super) fn reserve(&mut self, n: usize) {
        self.slots.reserve_exact(n);
    }

    /// Appends `id` at `addr` in a new slot (the id's latest), and returns it.
    pub(super) fn push(&mut self, id: MemberId, addr: Addr) -> usize {
        if (self.slots.len() + 1) * 8 > self.index.len() * 7 {
            let size = (self.index.len() * 2).max(16);
            self.index = vec![0; size];
            for k in 0..self.slots.len() {
                // A pushed-again id: its last slot wins.
                let b = self.find(self.slots[k].0);
                self.index[b] = k as u32 + 1;
            }
        }
        if self.slots.len() == self.slots.capacity() {
            // Grow by a quarter, not double: n² slots in a simulated pool.
            self.slots.reserve_exact(self.slots.len() / 4 + 8);
        }
        let packed = self.pack(addr);
        self.slots.push((id, packed));
        let k = self.slots.len() - 1;
        let b = self.find(id);
        self.index[b] = k as u32 + 1;
        k
    }

    /// The members not vacated, in slot order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (MemberId, Addr)> + '_ {
        self.slots.iter().filter(|s| s.1 != VACANT).map(|&(id, p)| (id, self.unpack(p)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{IpAddr, Ipv6Addr, SocketAddr};

    #[test]
    fn slots_keep_their_order_and_ids_their_latest_slot() {
        let mut t = MemberTable::default();
        let v4 = |i: u16| Addr::from(([10, 0, 0, 1], 7000 + i));
        let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 9);
        for i in 0..100u16 {
            assert_eq!(t.push(u64::from(i) * 7919, v4(i)), usize::from(i));
        }
        assert_eq!(t.push(5, v6), 100);
        assert_eq!((t.len(), t.get(7919 * 3), t.addr(3), t.addr(100)), (101, Some(3), v4(3), v6));
        assert_eq!(t.get(1), None);
        t.vacate(3);
        assert!(t.is_vacant(3) && !t.is_vacant(4));
        assert_eq!(t.get(7919 * 3), Some(3), "a vacated slot is still found");
        assert_eq!(t.iter().count(), 100);
        assert_eq!(t.push(7919 * 3, v4(500)), 101, "pushed again: a new slot");
        assert_eq!(t.get(7919 * 3), Some(101));
        assert_eq!(t.iter().map(|m| m.0).collect::<Vec<_>>()[..3], [0, 7919, 7919 * 2]);
    }
}
