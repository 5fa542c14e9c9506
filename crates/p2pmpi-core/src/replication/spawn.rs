//! Spawning from a replicated job (`spawn` with `-r R`): the spawn is a choice the
//! launcher makes, once.
//!
//! Every replica of the spawning root runs the same program, so each reaches the same
//! `spawn` call and asks its launcher. The replicas of a rank number their requests in
//! program order (the same on every replica), so the k-th request of any replica of rank q
//! is *the same* request. The launcher performs it when the first replica asks (the master,
//! normally, but any replica will do) and hands every other replica of that rank the same
//! outcome when it asks in turn: one set of children per spawn, whatever the timing, also
//! when the master dies half-way (before asking, after asking, or after the answer): a
//! replica that takes over asks (or already asked) for the same request number and gets the
//! outcome already decided. The answer then travels through the replicated broadcast like
//! any message.

use super::Layout;
use std::collections::BTreeMap;

/// What the launcher does with a replica's spawn request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask<T> {
    /// The first replica asking for request `number` of its rank: perform it, then
    /// [`SpawnLedger::decide`].
    Perform(u64),
    /// Another replica already asked: answer with this outcome.
    Decided(T),
}

/// The launcher's record of the spawn requests of a replicated job's ranks.
#[derive(Debug, Clone)]
pub struct SpawnLedger<T> {
    layout: Layout,
    /// Requests made so far, per slot.
    asked: Vec<u64>,
    /// Outcomes, by (rank, request number).
    decided: BTreeMap<(usize, u64), T>,
}

impl<T: Clone> SpawnLedger<T> {
    pub fn new(layout: Layout) -> SpawnLedger<T> {
        SpawnLedger { layout, asked: vec![0; layout.slots()], decided: BTreeMap::new() }
    }

    /// Slot `slot` asks for its next spawn. `None` for a slot outside the layout.
    pub fn ask(&mut self, slot: usize) -> Option<Ask<T>> {
        let k = self.asked.get_mut(slot)?;
        let number = *k;
        *k += 1;
        let rank = self.layout.rank_of(slot);
        Some(match self.decided.get(&(rank, number)) {
            Some(t) => Ask::Decided(t.clone()),
            None => Ask::Perform(number),
        })
    }

    /// The outcome of request `number` of `slot`'s rank, performed after [`Ask::Perform`].
    pub fn decide(&mut self, slot: usize, number: u64, outcome: T) {
        let rank = self.layout.rank_of(slot);
        self.decided.entry((rank, number)).or_insert(outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_replica_performs_the_others_get_its_outcome() {
        let mut l = SpawnLedger::<u32>::new(Layout::new(2, 3));
        // Rank 1 (slots 3, 4, 5): replica 1 asks first (its master is slow, or dead).
        assert_eq!(l.ask(4), Some(Ask::Perform(0)));
        l.decide(4, 0, 7);
        assert_eq!(l.ask(3), Some(Ask::Decided(7)));
        assert_eq!(l.ask(5), Some(Ask::Decided(7)));
        // Its second spawn is a new request, the first of rank 0 too.
        assert_eq!(l.ask(3), Some(Ask::Perform(1)));
        assert_eq!(l.ask(0), Some(Ask::Perform(0)));
        l.decide(3, 1, 9);
        assert_eq!(l.ask(5), Some(Ask::Decided(9)));
        assert_eq!(l.ask(4), Some(Ask::Decided(9)));
        assert_eq!(l.ask(6), None);
    }

    #[test]
    fn a_master_that_dies_after_asking_leaves_one_set_of_children() {
        // The master asked and the spawn was performed; it dies before the broadcast. Its
        // successor asks for the same request and gets the same outcome: nothing is
        // performed twice, whatever order the replicas ask in.
        for order in [[0usize, 1, 2], [2, 1, 0], [1, 0, 2]] {
            let mut l = SpawnLedger::<u32>::new(Layout::new(1, 3));
            let mut performed = 0;
            for (i, &slot) in order.iter().enumerate() {
                match l.ask(slot).unwrap() {
                    Ask::Perform(k) => {
                        performed += 1;
                        l.decide(slot, k, 40 + i as u32);
                    }
                    Ask::Decided(v) => assert_eq!(v, 40),
                }
            }
            assert_eq!(performed, 1);
        }
    }

    #[test]
    fn a_failed_spawn_is_decided_too() {
        let mut l = SpawnLedger::<Result<u32, String>>::new(Layout::new(1, 2));
        assert_eq!(l.ask(1), Some(Ask::Perform(0)));
        l.decide(1, 0, Err("no such program".into()));
        assert_eq!(l.ask(0), Some(Ask::Decided(Err("no such program".into()))));
    }
}
