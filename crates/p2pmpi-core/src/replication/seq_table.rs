//! A table of entries keyed by ids handed out in increasing order (the endpoint's fan-outs and
//! transmissions).
//!
//! A master creates a fan-out and one transmission per destination for every message it
//! sends, and removes them once written: with a hash map that was eight hash operations per
//! message on the master's critical path. Here an entry sits at its id's distance from the
//! oldest live one: inserting appends, finding indexes, removing leaves a hole, and holes at
//! either end are dropped. Entries usually go in the order they came, so the table stays as
//! long as the ids between the oldest live entry and the newest.

use std::collections::VecDeque;

/// Entries keyed by ids that never decrease from one insertion to the next.
#[derive(Debug)]
pub struct SeqTable<T> {
    /// The id of `slots[0]`.
    base: u64,
    slots: VecDeque<Option<T>>,
    live: usize,
}

impl<T> Default for SeqTable<T> {
    fn default() -> SeqTable<T> {
        SeqTable { base: 0, slots: VecDeque::new(), live: 0 }
    }
}

impl<T> SeqTable<T> {
    /// Adds entry `id`, which must be above every id inserted before (panics otherwise: a
    /// bug of the caller's numbering).
    pub fn insert(&mut self, id: u64, value: T) {
        if self.slots.is_empty() {
            self.base = id;
        }
        let end = self.base + self.slots.len() as u64;
        assert!(id >= end, "SeqTable: id {id} inserted after id {}", end - 1);
        for _ in end..id {
            self.slots.push_back(None);
        }
        self.slots.push_back(Some(value));
        self.live += 1;
    }

    fn index(&self, id: u64) -> Option<usize> {
        let i = id.checked_sub(self.base)?;
        (i < self.slots.len() as u64).then_some(i as usize)
    }

    pub fn get(&self, id: u64) -> Option<&T> {
        self.slots.get(self.index(id)?)?.as_ref()
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let i = self.index(id)?;
        self.slots.get_mut(i)?.as_mut()
    }

    pub fn remove(&mut self, id: u64) -> Option<T> {
        let i = self.index(id)?;
        let v = self.slots[i].take()?;
        self.live -= 1;
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        while matches!(self.slots.back(), Some(None)) {
            self.slots.pop_back();
        }
        Some(v)
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The live entries, by id.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> + '_ {
        let base = self.base;
        self.slots.iter().enumerate().filter_map(move |(i, s)| s.as_ref().map(|v| (base + i as u64, v)))
    }

    /// The live entries, by id.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut T)> + '_ {
        let base = self.base;
        self.slots.iter_mut().enumerate().filter_map(move |(i, s)| s.as_mut().map(|v| (base + i as u64, v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        /// Insert with an id this far above the last one.
        Insert(u8),
        /// Remove the live entry at this position (modulo their number), or a missing id.
        Remove(u8),
        Get(u8),
        Bump(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1u8..4).prop_map(Op::Insert),
            3 => any::<u8>().prop_map(Op::Remove),
            1 => any::<u8>().prop_map(Op::Get),
            1 => any::<u8>().prop_map(Op::Bump),
        ]
    }

    proptest! {
        /// The table answers as an ordered map would, whatever the order of removals.
        #[test]
        fn behaves_as_a_map_of_increasing_ids(ops in proptest::collection::vec(op(), 1..200)) {
            let mut t = SeqTable::default();
            let mut m = BTreeMap::new();
            let mut next = 5u64;
            for o in ops {
                match o {
                    Op::Insert(gap) => {
                        next += u64::from(gap);
                        t.insert(next, next * 10);
                        m.insert(next, next * 10);
                    }
                    Op::Remove(k) | Op::Get(k) | Op::Bump(k) => {
                        let id = if m.is_empty() || k % 5 == 0 {
                            u64::from(k) * 3 // often missing, sometimes below the base
                        } else {
                            *m.keys().nth(usize::from(k) % m.len()).expect("live")
                        };
                        match o {
                            Op::Remove(_) => prop_assert_eq!(t.remove(id), m.remove(&id)),
                            Op::Get(_) => prop_assert_eq!(t.get(id), m.get(&id)),
                            _ => {
                                if let Some(v) = t.get_mut(id) {
                                    *v += 1;
                                }
                                if let Some(v) = m.get_mut(&id) {
                                    *v += 1;
                                }
                            }
                        }
                    }
                }
                prop_assert_eq!(t.len(), m.len());
                prop_assert_eq!(t.is_empty(), m.is_empty());
                let seen: Vec<(u64, u64)> = t.iter().map(|(k, v)| (k, *v)).collect();
                let want: Vec<(u64, u64)> = m.iter().map(|(k, v)| (*k, *v)).collect();
                prop_assert_eq!(seen, want);
            }
            // Emptied, the table keeps no holes.
            let ids: Vec<u64> = m.keys().copied().collect();
            for id in ids {
                t.remove(id);
            }
            prop_assert!(t.slots.is_empty());
        }
    }

    #[test]
    fn holes_in_front_go_and_a_late_entry_keeps_the_rest() {
        let mut t = SeqTable::default();
        for id in 10..20 {
            t.insert(id, id);
        }
        assert_eq!(t.remove(10), Some(10));
        assert_eq!(t.slots.len(), 9);
        // An entry held long (a transmission to a suspect) keeps the ones after it indexed.
        for id in 12..20 {
            t.remove(id);
        }
        assert_eq!(t.len(), 1);
        assert_eq!(t.slots.len(), 1);
        assert_eq!(t.get(11), Some(&11));
        assert_eq!(t.iter_mut().map(|(k, _)| k).collect::<Vec<_>>(), vec![11]);
        assert_eq!(t.remove(11), Some(11));
        assert!(t.is_empty() && t.slots.is_empty());
        // A table emptied starts again at the next id.
        t.insert(100, 1);
        assert_eq!(t.get(100), Some(&1));
        assert_eq!(t.get(99), None);
    }

    #[test]
    #[should_panic(expected = "inserted after")]
    fn a_decreasing_id_is_refused() {
        let mut t = SeqTable::default();
        t.insert(7, ());
        t.insert(6, ());
    }
}
