//! Fault-tolerant agreement for fault-aware programs (ULFM's `MPIX_Comm_agree` and the
//! agreement under `MPIX_Comm_shrink`), decided in one place.
//!
//! p2pmpi already decides deaths in one place: the job's supervisor (the launcher, see
//! [`crate::fencing`]) declares a process dead, every process applies the declaration, and a
//! declared-dead process is never heard again. Agreement uses the same authority instead of
//! a distributed consensus among the survivors: every member of a communicator sends its
//! contribution (a flag, and the communicator's member list) to the supervisor, which decides
//! once every member has either contributed or been declared failed, and sends the one
//! [`Decision`] to everyone who asks. Because one party decides, every survivor gets the same
//! answer however processes fail during the agreement; because the supervisor waits only for
//! members not declared failed, the agreement ends as soon as the failure detector has
//! spoken. (The supervisor itself failing ends the job: it holds the user's terminal.)
//!
//! This module is the supervisor's side, a pure state machine speaking the crate's
//! [`Machine`] vocabulary: contributions and failures in ([`Input`]), decisions out
//! ([`Output`]), an inconsistent contribution refused ([`Refused`]). Ranks are a communicator's members as world ranks; with replication a rank
//! counts as failed only once every replica of it has (the caller's rule), and a rank's
//! replicas contribute the same value (they follow their master), so the first contribution
//! of a rank counts and the others must agree with it.

use crate::machine::{Machine, Time};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A world rank.
pub type Rank = u32;

/// Which agreement: the communicator's context id and the number of agreements its members
/// ran on it before (each member counts its own calls; they match because agreement is
/// collective).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub comm: u64,
    pub seq: u64,
}

/// The outcome every survivor receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The bitwise AND of the contributed flags.
    pub flag: u32,
    /// The members declared failed when the agreement was decided (sorted): every member
    /// that is not here contributed.
    pub failed: Vec<Rank>,
    /// A number no other decision of this registry has (in the order decisions were taken):
    /// what survivors that shrink name their new communicator by, without talking.
    pub id: u64,
}

impl Decision {
    /// The survivors, in the members' order: what a shrink builds its communicator from.
    pub fn survivors(&self, members: &[Rank]) -> Vec<Rank> {
        members.iter().copied().filter(|r| self.failed.binary_search(r).is_err()).collect()
    }
}

/// A contribution the supervisor refuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The rank was declared failed: its contribution is not taken.
    Failed(Rank),
    /// The rank is not a member of the communicator it agrees on.
    NotMember { rank: Rank },
    /// The rank named other members than those the first contribution named.
    Members { rank: Rank },
    /// A replica of the rank contributed another value than its first replica did.
    Diverged { rank: Rank, first: u32, got: u32 },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Failed(r) => write!(f, "rank {r} was declared failed: its contribution is not taken"),
            Refused::NotMember { rank } => write!(f, "rank {rank} is not a member of the communicator it agrees on"),
            Refused::Members { rank } => {
                write!(f, "rank {rank} agrees on a communicator whose members differ from those the others named")
            }
            Refused::Diverged { rank, first, got } => {
                write!(f, "rank {rank} contributed {got:#x} where its other replica contributed {first:#x}")
            }
        }
    }
}

impl std::error::Error for Refused {}

#[derive(Debug)]
struct Open {
    members: Vec<Rank>,
    values: BTreeMap<Rank, u32>,
}

/// How many decided agreements are kept for members that ask late (older ones are dropped;
/// a member asks for each agreement once, while it runs it).
pub const KEEP_DECIDED: usize = 4096;

/// The supervisor's agreements.
#[derive(Debug, Default)]
pub struct Registry {
    failed: BTreeSet<Rank>,
    open: BTreeMap<Key, Open>,
    decided: BTreeMap<Key, Decision>,
    order: VecDeque<Key>,
    next_id: u64,
    /// Decisions not polled yet.
    out: VecDeque<Output>,
}

/// What the registry is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Rank `from`, a member of `members` (the communicator's world ranks, in its rank
    /// order), contributes `flag` to agreement `key`. A late or repeated contribution gets the
    /// decision as it was taken (an [`Output`] again).
    Contribute { key: Key, from: Rank, members: Vec<Rank>, flag: u32 },
    /// Rank `rank` was declared failed: the agreements waiting for it may be decided.
    RankFailed(Rank),
}

/// A decision to send to the members that contributed to `key` (and to whoever asks later).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub key: Key,
    pub decision: Decision,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Rank `from`, a member of `members` (the communicator's world ranks, in its rank
    /// order), contributes `flag` to agreement `key`. Returns the decision if it is taken now
    /// or was taken before (a late or repeated contribution gets the decision as it was).
    fn contribute(&mut self, key: Key, from: Rank, members: &[Rank], flag: u32) -> Result<Option<Decision>, Refused> {
        if let Some(d) = self.decided.get(&key) {
            return Ok(Some(d.clone()));
        }
        if self.failed.contains(&from) {
            return Err(Refused::Failed(from));
        }
        if !members.contains(&from) {
            return Err(Refused::NotMember { rank: from });
        }
        let open = self.open.entry(key).or_insert_with(|| Open { members: members.to_vec(), values: BTreeMap::new() });
        if open.members != members {
            return Err(Refused::Members { rank: from });
        }
        match open.values.get(&from) {
            Some(&first) if first != flag => return Err(Refused::Diverged { rank: from, first, got: flag }),
            Some(_) => {}
            None => {
                open.values.insert(from, flag);
            }
        }
        Ok(self.try_decide(key))
    }

    /// Rank `rank` was declared failed. Returns the agreements this completes, with their
    /// decisions (to be sent to the members that contributed).
    fn rank_failed(&mut self, rank: Rank) -> Vec<(Key, Decision)> {
        if !self.failed.insert(rank) {
            return Vec::new();
        }
        let keys: Vec<Key> = self.open.iter().filter(|(_, o)| o.members.contains(&rank)).map(|(k, _)| *k).collect();
        keys.into_iter().filter_map(|k| self.try_decide(k).map(|d| (k, d))).collect()
    }

    /// The decision of `key`, if taken (and still kept).
    pub fn decision(&self, key: Key) -> Option<&Decision> {
        self.decided.get(&key)
    }

    /// The ranks declared failed so far.
    pub fn failed(&self) -> &BTreeSet<Rank> {
        &self.failed
    }

    /// The members of `key` the decision still waits for (neither contributed nor failed).
    pub fn waiting_for(&self, key: Key) -> Vec<Rank> {
        self.open.get(&key).map_or_else(Vec::new, |o| {
            o.members.iter().copied().filter(|r| !o.values.contains_key(r) && !self.failed.contains(r)).collect()
        })
    }

    fn try_decide(&mut self, key: Key) -> Option<Decision> {
        let open = self.open.get(&key)?;
        if !self.waiting_for(key).is_empty() {
            return None;
        }
        let flag = open.values.values().fold(u32::MAX, |a, &v| a & v);
        // Failed = members declared failed by now; a member that contributed and then failed
        // is among them too (survivors must learn of every failure they may have waited on).
        let failed: Vec<Rank> = open
            .members
            .iter()
            .copied()
            .filter(|r| self.failed.contains(r))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let d = Decision { flag, failed, id: self.next_id };
        self.next_id += 1;
        self.open.remove(&key);
        self.decided.insert(key, d.clone());
        self.order.push_back(key);
        while self.order.len() > KEEP_DECIDED {
            if let Some(old) = self.order.pop_front() {
                self.decided.remove(&old);
            }
        }
        Some(d)
    }
}

impl Machine for Registry {
    type Input = Input;
    type Output = Output;
    type Rejected = Refused;

    fn handle_input(&mut self, _now: Time, input: Input) -> Result<(), Refused> {
        match input {
            Input::Contribute { key, from, members, flag } => {
                if let Some(decision) = self.contribute(key, from, &members, flag)? {
                    self.out.push_back(Output { key, decision });
                }
            }
            Input::RankFailed(rank) => {
                let done = self.rank_failed(rank);
                self.out.extend(done.into_iter().map(|(key, decision)| Output { key, decision }));
            }
        }
        Ok(())
    }

    /// Agreements wait for contributions and failures only: time changes nothing.
    fn handle_timeout(&mut self, _now: Time) {}

    fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Time> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: Key = Key { comm: 7, seq: 0 };

    #[test]
    fn decided_when_every_member_contributed_flags_anded() {
        let mut r = Registry::new();
        let m = [0, 1, 2];
        assert_eq!(r.contribute(K, 0, &m, 0b111).unwrap(), None);
        assert_eq!(r.contribute(K, 2, &m, 0b101).unwrap(), None);
        assert_eq!(r.waiting_for(K), vec![1]);
        let d = r.contribute(K, 1, &m, 0b110).unwrap().unwrap();
        assert_eq!(d, Decision { flag: 0b100, failed: vec![], id: 0 });
        // A late ask (a replica, a retry) gets the same decision.
        assert_eq!(r.contribute(K, 1, &m, 0b110).unwrap(), Some(d));
    }

    #[test]
    fn a_failure_during_the_agreement_completes_it_and_is_reported() {
        let mut r = Registry::new();
        let m = [0, 1, 2, 3];
        r.contribute(K, 0, &m, 1).unwrap();
        r.contribute(K, 3, &m, 1).unwrap();
        assert!(r.rank_failed(1).is_empty(), "still waiting for 2");
        // 3 contributed, then failed: reported as failed, its value counted.
        assert!(r.rank_failed(3).is_empty());
        let d = r.contribute(K, 2, &m, 1).unwrap().unwrap();
        assert_eq!(d, Decision { flag: 1, failed: vec![1, 3], id: 0 });
        assert_eq!(d.survivors(&m), vec![0, 2]);
        // A contribution from a failed rank is refused, not counted.
        let k2 = Key { comm: 7, seq: 1 };
        assert_eq!(r.contribute(k2, 1, &m, 0), Err(Refused::Failed(1)));
        r.contribute(k2, 0, &m, 1).unwrap();
        let done = r.rank_failed(2);
        assert_eq!(done, vec![(k2, Decision { flag: 1, failed: vec![1, 2, 3], id: 1 })]);
    }

    #[test]
    fn inconsistent_contributions_are_refused() {
        let mut r = Registry::new();
        r.contribute(K, 0, &[0, 1], 1).unwrap();
        assert_eq!(r.contribute(K, 1, &[0, 1, 2], 1), Err(Refused::Members { rank: 1 }));
        assert_eq!(r.contribute(K, 5, &[0, 1], 1), Err(Refused::NotMember { rank: 5 }));
        assert_eq!(r.contribute(K, 0, &[0, 1], 0), Err(Refused::Diverged { rank: 0, first: 1, got: 0 }));
    }

    #[test]
    fn decisions_are_kept_for_late_members_up_to_a_bound() {
        let mut r = Registry::new();
        for seq in 0..(KEEP_DECIDED as u64 + 10) {
            assert!(r.contribute(Key { comm: 1, seq }, 0, &[0], 1).unwrap().is_some());
        }
        assert!(r.decision(Key { comm: 1, seq: 0 }).is_none());
        assert!(r.decision(Key { comm: 1, seq: KEEP_DECIDED as u64 + 9 }).is_some());
    }
}
