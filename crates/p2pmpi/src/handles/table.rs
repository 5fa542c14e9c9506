//! The process-wide tables behind the raw handles of [`crate::ffi`].
//!
//! A handle is a small integer. The predefined objects have fixed numbers below
//! [`FIRST_USER`]; others get the lowest free slot of their table from `FIRST_USER` on. A slot
//! either *owns* its object (made through `mpi::ffi`, e.g. `MPI_Comm_dup`, until
//! `MPI_Comm_free` or until a Rust object takes it over with `from_raw`) or only *names* an
//! object owned by Rust code (`as_raw`), which it does not keep alive: once the Rust object
//! is gone the handle is dead and every function given it answers an error.

use std::collections::HashMap;
use std::hash::Hash;
use std::os::raw::c_int;

/// The first handle number given to an object that is not predefined.
pub(crate) const FIRST_USER: c_int = 16;

/// Slots of one kind of handle. `K` identifies an object (an address), `V` is what a slot
/// holds.
pub(crate) struct Table<K, V> {
    slots: Vec<Option<(Option<K>, V)>>,
    free: Vec<usize>,
    by_key: HashMap<K, usize>,
}

impl<K: Copy + Eq + Hash, V> Default for Table<K, V> {
    fn default() -> Self {
        Table { slots: Vec::new(), free: Vec::new(), by_key: HashMap::new() }
    }
}

impl<K: Copy + Eq + Hash, V> Table<K, V> {
    fn index(h: c_int) -> Option<usize> {
        (h >= FIRST_USER).then(|| (h - FIRST_USER) as usize)
    }

    /// Stores `v` (known by `key`, if any) in a free slot; returns its handle.
    pub fn insert(&mut self, key: Option<K>, v: V) -> c_int {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.slots[i] = Some((key, v));
        if let Some(k) = key {
            self.by_key.insert(k, i);
        }
        c_int::try_from(i).ok().and_then(|i| i.checked_add(FIRST_USER)).expect("too many MPI handles")
    }

    /// The handle of the object known by `key`, if one is stored.
    pub fn find(&self, key: K) -> Option<c_int> {
        self.by_key.get(&key).map(|&i| i as c_int + FIRST_USER)
    }

    pub fn get(&self, h: c_int) -> Option<&V> {
        self.slots.get(Self::index(h)?)?.as_ref().map(|(_, v)| v)
    }

    pub fn get_mut(&mut self, h: c_int) -> Option<&mut V> {
        self.slots.get_mut(Self::index(h)?)?.as_mut().map(|(_, v)| v)
    }

    /// Frees the slot of `h`, returning what it held.
    pub fn remove(&mut self, h: c_int) -> Option<V> {
        let i = Self::index(h)?;
        let (key, v) = self.slots.get_mut(i)?.take()?;
        if let Some(k) = key {
            if self.by_key.get(&k) == Some(&i) {
                self.by_key.remove(&k);
            }
        }
        self.free.push(i);
        Some(v)
    }

    /// Frees every slot for which `dead` says so (called before the table grows).
    pub fn sweep(&mut self, mut dead: impl FnMut(&V) -> bool) {
        let doomed: Vec<usize> =
            self.slots.iter().enumerate().filter_map(|(i, s)| s.as_ref().filter(|(_, v)| dead(v)).map(|_| i)).collect();
        for i in doomed {
            self.remove(i as c_int + FIRST_USER);
        }
    }

    /// Number of occupied slots.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_start_above_the_predefined_ones_and_reuse_freed_slots() {
        let mut t: Table<usize, &str> = Table::default();
        let a = t.insert(Some(100), "a");
        let b = t.insert(None, "b");
        assert_eq!((a, b), (FIRST_USER, FIRST_USER + 1));
        assert_eq!(t.get(a), Some(&"a"));
        assert_eq!(t.find(100), Some(a));
        assert_eq!(t.get(0), None, "predefined numbers are not in the table");
        assert_eq!(t.get(FIRST_USER + 7), None);
        assert_eq!(t.remove(a), Some("a"));
        assert_eq!(t.find(100), None, "a freed slot is no longer found by its key");
        assert_eq!(t.get(a), None);
        assert_eq!(t.remove(a), None, "a handle is freed once");
        let c = t.insert(Some(200), "c");
        assert_eq!(c, a, "the freed slot is reused");
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_key_moved_to_a_new_slot_is_not_lost_when_the_old_slot_is_freed() {
        let mut t: Table<usize, u32> = Table::default();
        let old = t.insert(Some(7), 1);
        let new = t.insert(Some(7), 2);
        assert_eq!(t.find(7), Some(new));
        t.remove(old);
        assert_eq!(t.find(7), Some(new));
    }

    #[test]
    fn sweep_frees_dead_slots_only() {
        let mut t: Table<usize, u32> = Table::default();
        let hs: Vec<c_int> = (0..6).map(|i| t.insert(Some(i as usize), i)).collect();
        t.sweep(|v| v % 2 == 1);
        assert_eq!(t.len(), 3);
        for (i, h) in hs.iter().enumerate() {
            assert_eq!(t.get(*h).is_some(), i % 2 == 0);
            assert_eq!(t.find(i).is_some(), i % 2 == 0);
        }
        *t.get_mut(hs[0]).expect("a live slot") = 40;
        assert_eq!(t.get(hs[0]), Some(&40));
    }
}
