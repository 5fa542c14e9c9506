//! Transparent fault tolerance by replication: the replica coordination protocol (thesis
//! §4.3, SPEC §10) as a state machine without I/O.
//!
//! A *logical process* (rank) runs as several *replicas*; every real process is a *slot* of
//! the job's [`Layout`]. One replica of each rank — the alive one with the lowest index — is
//! the **master**: only it sends the rank's messages over the network. A [`Coordinator`]
//! holds one process's view:
//!
//! * which slots are dead, hence who is master of every rank (election without
//!   communication, algorithm 7);
//! * the **backup table**: messages this replica reached but its master has not committed
//!   yet, in send order (algorithm 4, non-master side);
//! * the **log table**: what the master committed, per channel (communicator, destination,
//!   tag) as a high-water mark. Commits of one channel come in MID order (they follow the
//!   data on FIFO connections), so a mark is the set of committed MIDs in compact form and the
//!   table does not grow with the length of the run; committing a MID also prunes every older
//!   backup entry of its channel.
//!
//! The receiving side (the **history table**) is [`crate::matching::Matcher`]'s per-channel
//! high-water mark. The driver (the library's TCP device) does the I/O: it asks
//! [`Coordinator::on_send`] what to do with a send, transmits to the destinations it is given,
//! sends the commits once every transmission is written, feeds commits and failure notices
//! back, and resends what [`Coordinator::on_failure`] hands it after a takeover.

pub mod endpoint;
pub mod operations;
pub mod seq_table;
pub mod spawn;
pub mod stranded;
pub mod verify;
pub mod wildcards;

pub use endpoint::Endpoint;

use crate::matching::FastMap;
use std::collections::VecDeque;

/// Where the replicas of a job run: `n` ranks, every one `r` times (rank 0 included: its
/// master runs on the submitter). Slots are numbered rank-major: replica `j` of rank `k` is
/// slot `k·r + j`, so slot 0 is rank 0's first replica. With `r = 1` a slot is a rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Logical processes (the program's world size).
    pub n: usize,
    /// Replicas of every rank.
    pub r: usize,
}

impl Layout {
    pub fn new(n: usize, r: usize) -> Layout {
        Layout { n: n.max(1), r: r.max(1) }
    }

    /// Real processes of the job.
    pub fn slots(&self) -> usize {
        self.n * self.r
    }

    /// Replicas of `rank`.
    pub fn replicas(&self, _rank: usize) -> usize {
        self.r
    }

    /// The slot of replica `replica` of `rank`.
    pub fn slot(&self, rank: usize, replica: usize) -> usize {
        rank * self.r + replica
    }

    /// The rank a slot runs.
    pub fn rank_of(&self, slot: usize) -> usize {
        slot / self.r
    }

    /// The replica index of a slot within its rank.
    pub fn replica_of(&self, slot: usize) -> usize {
        slot % self.r
    }

    /// The slots of `rank`, replica 0 first.
    pub fn slots_of(&self, rank: usize) -> std::ops::Range<usize> {
        let first = self.slot(rank, 0);
        first..first + self.r
    }

    /// The layout of a *universe* of `n` ranks (at least this one's): a spawn's children take
    /// the universe ids (ranks) that follow the parents', with as many replicas, so their
    /// slots follow the parents' slots and every existing slot keeps its number.
    pub fn grown(&self, n: usize) -> Layout {
        Layout { n: self.n.max(n), r: self.r }
    }
}

/// The slots declared dead in a job, and the rule that follows from it: a rank's **master** is
/// its alive replica of lowest index (election without communication, thesis §4.3.5). The
/// library's [`Coordinator`], the launcher's fencing supervisor and the output
/// router all hold one, so the rule is written once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadSet {
    layout: Layout,
    dead: Vec<bool>,
}

impl DeadSet {
    /// Nobody dead yet.
    pub fn new(layout: Layout) -> DeadSet {
        DeadSet { layout, dead: vec![false; layout.slots()] }
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Covers the ranks of a universe of `n` ranks ([`Layout::grown`]); the new slots are
    /// alive.
    pub fn grow(&mut self, n: usize) {
        self.layout = self.layout.grown(n);
        self.dead.resize(self.layout.slots(), false);
    }

    /// Whether `slot` is dead (a slot out of range counts as dead).
    pub fn is_dead(&self, slot: usize) -> bool {
        self.dead.get(slot).copied().unwrap_or(true)
    }

    /// Marks `slot` dead; false if it already was (or is out of range).
    pub fn mark(&mut self, slot: usize) -> bool {
        match self.dead.get_mut(slot) {
            Some(d) if !*d => {
                *d = true;
                true
            }
            _ => false,
        }
    }

    /// The alive replicas of `rank`, lowest index first.
    pub fn alive_slots(&self, rank: usize) -> impl Iterator<Item = usize> + '_ {
        self.layout.slots_of(rank).filter(move |&s| !self.dead[s])
    }

    /// How many replicas of `rank` are alive.
    pub fn alive(&self, rank: usize) -> usize {
        self.alive_slots(rank).count()
    }

    /// The master of `rank`: its alive replica with the lowest index.
    pub fn master_of(&self, rank: usize) -> Option<usize> {
        self.alive_slots(rank).next()
    }

    /// The dead slots, in order.
    pub fn slots(&self) -> Vec<usize> {
        (0..self.dead.len()).filter(|&s| self.dead[s]).collect()
    }
}

/// A message identifier, the MID (thesis §4.3.1): communicator, source and destination
/// ranks, tag and the count of earlier messages with the same (communicator, source,
/// destination, tag). It is computed locally by the sender, orders messages and, under
/// replication, detects duplicates. The wire format carries it in every frame header
/// (`p2pmpi_wire::Mid` is this type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MsgId {
    /// Communicator context id.
    pub comm: u32,
    /// Source rank in that communicator.
    pub src: u32,
    /// Destination rank in that communicator.
    pub dst: u32,
    /// Message tag (non-negative for user messages; negative tags are reserved).
    pub tag: i32,
    /// Sequence count for (comm, src, dst, tag).
    pub seq: u64,
}

impl MsgId {
    fn channel(&self) -> (u32, u32, i32) {
        (self.comm, self.dst, self.tag)
    }
}

/// What a rank's master chose at one of its non-deterministic choice points: which message a
/// wildcard receive or a probe matched — its source, tag and sequence — or, for an immediate
/// probe or a test, nothing (`None`). For a test or a wait on several requests, the source is
/// the index of the request that completed.
pub type Outcome = Option<(i32, i32, u64)>;

/// Failure outcomes of fault-aware replicated jobs (`Policy::Notify` with `-r R`).
///
/// Whether an operation fails because a rank was lost (every replica of it failed) or its
/// communicator was revoked depends on when this process heard of it, which differs
/// between the replicas of a rank. So the **master decides** it, like a choice: every
/// replica numbers the operations it posts (sends and receives, in program order: the same
/// numbers on every replica), and when one fails on the master with such an error, the
/// master tells its replicas the outcome at choice point [`failure_point`]`(op)`, with the
/// choice frames' acknowledgements (nothing that depends on it leaves the master before
/// every replica knows it). A non-master never fails an operation on its own for these
/// causes: it fails it when its master's outcome comes. A wildcard receive's choice point
/// may carry a failure outcome too (the master withdrew it with an error), and so does the
/// list of failed ranks a program acknowledges ([`lost_set_outcomes`]).
pub mod failures {
    use super::Outcome;

    /// The bit that marks the choice point of an operation's failure (ordinary choice
    /// points count from 0 and never reach it).
    pub const FAILURE_POINT: u64 = 1 << 63;

    /// Why an operation failed on the master.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Failed {
        /// Every replica of this world rank failed.
        Lost(u32),
        /// Its communicator was revoked.
        Revoked,
    }

    /// The choice point standing for the failure of operation number `op`.
    pub fn failure_point(op: u64) -> u64 {
        FAILURE_POINT | op
    }

    /// The operation number of a failure point (`None`: an ordinary choice point).
    pub fn op_of_point(c: u64) -> Option<u64> {
        (c & FAILURE_POINT != 0).then_some(c & !FAILURE_POINT)
    }

    /// Source value that marks a failure outcome: never a rank nor a request's index, and
    /// not negative (the wire's rank fields are not).
    const FAILED_SRC: i32 = i32::MAX;
    /// Source value that marks a set of failed ranks.
    const LOST_SET_SRC: i32 = i32::MAX - 1;
    /// Failure codes (the outcome's tag); [`AT_POST`] marks a failure at the post itself.
    const LOST: i32 = 1;
    const REVOKED: i32 = 2;
    /// Not a failure: the operation succeeded on the master (told for the operations whose
    /// replicas wait for their master's word either way, [`success_outcome`]).
    const SUCCEEDED: i32 = 3;
    pub const AT_POST: i32 = 0x10;

    /// The outcome telling that an operation succeeded on the master. Told for an immediate
    /// collective's request: its replicas complete it only once their master's word came
    /// (success or failure), so none takes a success its master did not have.
    pub fn success_outcome() -> Outcome {
        Some((FAILED_SRC, SUCCEEDED, 0))
    }

    /// Whether an outcome is [`success_outcome`].
    pub fn outcome_success(o: Outcome) -> bool {
        matches!(o, Some((FAILED_SRC, SUCCEEDED, _)))
    }

    /// What a replica does with an immediate collective that succeeded here.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Word {
        /// Its master's success came: take it (relay it if this process becomes master) and
        /// complete the request.
        Follow,
        /// This process decides (the master): tell [`success_outcome`], then complete.
        Decide,
        /// Not yet: no word from its master, or a failure, which fails the request when
        /// applied.
        Await,
    }

    /// The step for an immediate collective over here with success, given its master's
    /// outcome known at its failure point (`known`) and whether this process decides.
    pub fn collective_word(known: Option<Outcome>, may_decide: bool) -> Word {
        match known {
            // A master's word known already (a new master's predecessor's too) is followed.
            Some(o) if outcome_success(o) => Word::Follow,
            Some(_) => Word::Await,
            None if may_decide => Word::Decide,
            None => Word::Await,
        }
    }

    /// The outcome telling that an operation failed (`at_post`: when it was posted, not
    /// later while pending).
    pub fn failure_outcome(f: Failed, at_post: bool) -> Outcome {
        let post = if at_post { AT_POST } else { 0 };
        Some(match f {
            Failed::Lost(rank) => (FAILED_SRC, LOST | post, u64::from(rank)),
            Failed::Revoked => (FAILED_SRC, REVOKED | post, 0),
        })
    }

    /// The failure an outcome tells, and whether it was at the post (`None`: not a failure).
    pub fn outcome_failure(o: Outcome) -> Option<(Failed, bool)> {
        let (src, code, v) = o?;
        if src != FAILED_SRC {
            return None;
        }
        let at_post = code & AT_POST != 0;
        match code & !AT_POST {
            LOST => Some((Failed::Lost(u32::try_from(v).ok()?), at_post)),
            REVOKED => Some((Failed::Revoked, at_post)),
            _ => None,
        }
    }

    /// The bit that marks the extra choice points of a set of failed ranks
    /// ([`lost_set_outcomes`]): below [`FAILURE_POINT`], far above ordinary points.
    pub const LOST_SET_POINT: u64 = 1 << 62;

    /// Extra point `i` (from 1) of the set of failed ranks told at ordinary point `c`.
    pub fn lost_set_part_point(c: u64, i: usize) -> u64 {
        LOST_SET_POINT | (c << 16) | (i as u64 & 0xffff)
    }

    /// The outcomes naming a set of failed world ranks (the master's view when the program
    /// asks for it) at ordinary choice point `c`: 64 ranks a word (a mask of ranks
    /// `64 w .. 64 w + 63`); the first outcome is `c`'s own (word 0, and the number of extra
    /// parts), then one outcome per other word that has a rank, at
    /// [`lost_set_part_point`]`(c, 1..)`. The parts come first in the list: told in order, a
    /// replica that has `c`'s outcome has its parts too (it waits for them otherwise).
    pub fn lost_set_outcomes(c: u64, ranks: &[u32]) -> Vec<(u64, Outcome)> {
        let mut words: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
        for &r in ranks {
            *words.entry(r / 64).or_default() |= 1 << (r % 64);
        }
        let first = words.remove(&0).unwrap_or(0);
        let mut out: Vec<(u64, Outcome)> = words
            .into_iter()
            .enumerate()
            .map(|(i, (w, mask))| (lost_set_part_point(c, i + 1), Some((LOST_SET_SRC, w as i32, mask))))
            .collect();
        out.push((c, Some((LOST_SET_SRC, -(out.len() as i32) - 1, first))));
        out
    }

    /// How many extra parts the set told by outcome `o` (of its ordinary point) has: `None`
    /// when `o` does not tell a set of failed ranks.
    pub fn lost_set_parts(o: Outcome) -> Option<usize> {
        let (src, tag, _) = o?;
        (src == LOST_SET_SRC && tag < 0).then(|| (-(tag as i64) - 1) as usize)
    }

    /// The failed world ranks told by `main` (the outcome of the ordinary point) and its
    /// `parts` (the outcomes of its extra points, in order), ascending. `None` when they do
    /// not make a set (a part missing, or not a part).
    pub fn outcome_lost_set(main: Outcome, parts: &[Outcome]) -> Option<Vec<u32>> {
        let n = lost_set_parts(main)?;
        if parts.len() != n {
            return None;
        }
        let (_, _, first) = main?;
        let mut words = vec![(0u32, first)];
        for &p in parts {
            let (src, w, mask) = p?;
            if src != LOST_SET_SRC || w <= 0 {
                return None;
            }
            words.push((w as u32, mask));
        }
        words.sort_unstable();
        let mut ranks = Vec::new();
        for (w, mask) in words {
            ranks.extend((0..64u32).filter(|b| mask & (1 << b) != 0).filter_map(|b| w.checked_mul(64)?.checked_add(b)));
        }
        ranks.dedup();
        Some(ranks)
    }
}

/// The choice points of one replica (item: replicas follow their master's choices).
///
/// A program that receives from `ANY_SOURCE`, probes, or tests requests takes a path that
/// depends on arrival order, which differs between replicas. Every replica numbers those
/// points in program order (the same on every replica of a rank); the master decides at each
/// and sends its [`Outcome`] to its replicas in index order, before anything that depends on
/// it; a non-master waits for its master's outcome and follows it. The replicas are told in
/// index order, so when the master dies the lowest alive replica — its successor — knows
/// every choice any survivor knows, and decides the later ones itself.
#[derive(Debug, Default)]
pub struct Choices {
    next: u64,
    known: std::collections::BTreeMap<u64, Outcome>,
    /// The outcomes followed lately ([`FOLLOWED_WINDOW`] points): a replica that takes over
    /// tells them again, since the dead master's frames may have reached some replicas and
    /// not others.
    followed: std::collections::BTreeMap<u64, Outcome>,
    /// The points this replica reached and has not followed yet (a test waiting for its
    /// master's outcome; a wildcard receive deferred, whose outcome may come after those of
    /// thousands of later points, the tests that polled it). A point below `next` and not
    /// here was followed: its outcome is not learned again.
    open: std::collections::BTreeSet<u64>,
}

/// How many followed outcomes a replica keeps to tell again if it takes over.
pub const FOLLOWED_WINDOW: usize = 4096;

impl Choices {
    pub fn new() -> Choices {
        Choices::default()
    }

    /// This replica reached its next choice point: its number.
    pub fn point(&mut self) -> u64 {
        let c = self.next;
        self.next += 1;
        self.open.insert(c);
        c
    }

    /// The master's outcome of choice point `c` arrived (a non-master; it may be ahead of
    /// this replica or behind it: a wildcard receive's outcome comes when it completes, after
    /// the points of the tests that polled it). An outcome already followed is ignored (a
    /// new master tells its recent ones again): a point reached and no longer open, or one
    /// in the followed window (a failure point, numbered apart).
    pub fn learn(&mut self, c: u64, outcome: Outcome) {
        let followed = c < self.next && !self.open.contains(&c);
        if followed || self.followed.contains_key(&c) {
            return;
        }
        self.known.insert(c, outcome);
    }

    /// The master's outcome of point `c`, if known; taken out (each point is followed once).
    pub fn take(&mut self, c: u64) -> Option<Outcome> {
        let o = self.known.remove(&c)?;
        self.followed(c, o);
        Some(o)
    }

    /// This replica followed (or, as master, decided) outcome `o` at point `c`.
    pub fn followed(&mut self, c: u64, o: Outcome) {
        self.open.remove(&c);
        self.followed.insert(c, o);
        while self.followed.len() > FOLLOWED_WINDOW {
            self.followed.pop_first();
        }
    }

    /// Whether the master's outcome of point `c` is known.
    pub fn knows(&self, c: u64) -> Option<Outcome> {
        self.known.get(&c).copied()
    }

    /// The failure outcomes learned and not followed yet ([`failures::failure_point`]s), in
    /// point order.
    pub fn known_failures(&self) -> Vec<(u64, Outcome)> {
        self.known.range(failures::FAILURE_POINT..).map(|(&c, &o)| (c, o)).collect()
    }

    /// Outcomes learned and not followed yet.
    pub fn pending(&self) -> usize {
        self.known.len()
    }

    /// Every outcome this replica knows — followed lately or learned — in point order: what
    /// a new master tells its replicas first.
    pub fn relay(&self) -> Vec<(u64, Outcome)> {
        let mut all: Vec<(u64, Outcome)> =
            self.followed.iter().chain(self.known.iter()).map(|(&c, &o)| (c, o)).collect();
        all.sort_by_key(|x| x.0);
        all
    }
}

/// What to do with a send this process reached (algorithm 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendAction {
    /// This process is the master: transmit to these slots (the alive replicas of the
    /// destination), then, once every transmission is written, commit with
    /// [`Coordinator::commit_targets`].
    Transmit { dests: Vec<usize> },
    /// A non-master whose master already committed this message: nothing to do.
    Committed,
    /// A non-master: the message was kept in the backup table.
    Stored,
}

/// What a failure notice changed (algorithm 7).
#[derive(Debug, PartialEq, Eq)]
pub enum Recovery<P> {
    /// Already known, or it changes nothing for this process's sending.
    Nothing,
    /// A replica died; its rank still runs (`new_master` is its master now).
    Replica { rank: usize, new_master: usize },
    /// This process became its rank's master: transmit and commit every message of the
    /// backup table, in this order.
    TookOver { resend: Vec<(MsgId, P)> },
    /// Every replica of `rank` is dead: the application cannot go on.
    RankLost { rank: usize },
}

/// One replica's view of the replica coordination protocol.
#[derive(Debug)]
pub struct Coordinator<P> {
    layout: Layout,
    me: usize,
    dead: DeadSet,
    /// Log table: per channel (comm, dst, tag), every seq below the mark is committed.
    log: FastMap<(u32, u32, i32), u64>,
    /// Backup table, in send order.
    backup: VecDeque<(MsgId, P)>,
    /// How many distinct messages the master committed (the log table's marks summed).
    committed: u64,
}

impl<P> Coordinator<P> {
    /// The coordinator of slot `me`.
    pub fn new(layout: Layout, me: usize) -> Coordinator<P> {
        Coordinator {
            layout,
            me,
            dead: DeadSet::new(layout),
            log: FastMap::default(),
            backup: VecDeque::new(),
            committed: 0,
        }
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// This process's slot.
    pub fn me(&self) -> usize {
        self.me
    }

    /// Covers the ranks of a universe of `n` ranks (a spawn's children, [`Layout::grown`]).
    pub fn grow(&mut self, n: usize) {
        self.dead.grow(n);
        self.layout = self.dead.layout();
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.layout.rank_of(self.me)
    }

    pub fn is_dead(&self, slot: usize) -> bool {
        self.dead.is_dead(slot)
    }

    /// The alive replicas of `rank`, lowest index first.
    pub fn alive_slots(&self, rank: usize) -> impl Iterator<Item = usize> + '_ {
        self.dead.alive_slots(rank)
    }

    /// The master of `rank`: its alive replica with the lowest index.
    pub fn master_of(&self, rank: usize) -> Option<usize> {
        self.dead.master_of(rank)
    }

    /// Whether this process is its rank's master.
    pub fn is_master(&self) -> bool {
        self.master_of(self.rank()) == Some(self.me)
    }

    /// The slots to send a commit to: the other alive replicas of this process's rank.
    pub fn commit_targets(&self) -> Vec<usize> {
        self.alive_slots(self.rank()).filter(|&s| s != self.me).collect()
    }

    /// Where a message to `dst_rank` goes when this process is master.
    pub fn destinations(&self, dst_rank: usize) -> Vec<usize> {
        self.alive_slots(dst_rank).collect()
    }

    fn committed(&self, mid: &MsgId) -> bool {
        self.log.get(&mid.channel()).is_some_and(|&m| mid.seq < m)
    }

    /// This process reached a send (algorithm 4, part 1). `keep` makes the copy the backup
    /// table holds; it is called only when the message must be kept.
    pub fn on_send(&mut self, mid: MsgId, keep: impl FnOnce() -> P) -> SendAction {
        if self.is_master() {
            return SendAction::Transmit { dests: self.destinations(mid.dst as usize) };
        }
        if self.committed(&mid) {
            return SendAction::Committed;
        }
        self.backup.push_back((mid, keep()));
        SendAction::Stored
    }

    /// A commit arrived from `from` (algorithm 4, part 2). Commits from anything but this
    /// rank's other replicas are refused (returns false). Every backup entry the commit
    /// prunes is handed to `pruned` (a driver that lent the user's buffer instead of copying
    /// it completes the send then).
    pub fn on_commit(&mut self, from: usize, mid: MsgId, mut pruned: impl FnMut(MsgId, P)) -> bool {
        // A dead replica's word counts for nothing (fencing): it may have resumed after the
        // others took over, and its commit could claim a delivery the live ones never saw.
        if from == self.me || self.dead.is_dead(from) || self.layout.rank_of(from) != self.rank() {
            return false;
        }
        let ch = mid.channel();
        let mark = self.log.entry(ch).or_insert(0);
        let before = *mark;
        *mark = (*mark).max(mid.seq + 1);
        self.committed += *mark - before;
        // The master commits a channel in order: every older message of it is delivered.
        // Usually they lead the table (a replica keeps little beyond its master): taken from
        // the front, then the rest of the table is searched. The table is in send order, so a
        // channel's entries are in MID order there: the rest holds one to prune only if the
        // channel's first entry left is one. (Scanning the whole table instead cost a replica
        // that reads its commits late — tens of entries behind — a pass per commit.)
        while self.backup.front().is_some_and(|(m, _)| m.channel() == ch && m.seq <= mid.seq) {
            let (m, p) = self.backup.pop_front().expect("front");
            pruned(m, p);
        }
        if self.backup.iter().find(|(m, _)| m.channel() == ch).is_some_and(|(m, _)| m.seq <= mid.seq) {
            let mut keep = VecDeque::with_capacity(self.backup.len());
            for (m, p) in self.backup.drain(..) {
                if m.channel() == ch && m.seq <= mid.seq {
                    pruned(m, p);
                } else {
                    keep.push_back((m, p));
                }
            }
            self.backup = keep;
        }
        true
    }

    /// How many distinct messages of this rank its masters committed so far (every message
    /// below a channel's mark counts: a channel is committed in order).
    pub fn committed_count(&self) -> u64 {
        self.committed
    }

    /// The backup table's entries, in send order (a driver may swap a lent buffer for a copy
    /// of it).
    pub fn backup_mut(&mut self) -> impl Iterator<Item = &mut (MsgId, P)> {
        self.backup.iter_mut()
    }

    /// A failure of `slot` was notified (algorithm 7).
    pub fn on_failure(&mut self, slot: usize) -> Recovery<P> {
        if self.dead.is_dead(slot) || slot == self.me {
            return Recovery::Nothing;
        }
        let rank = self.layout.rank_of(slot);
        let was_master = self.master_of(rank) == Some(slot);
        self.dead.mark(slot);
        let Some(new_master) = self.master_of(rank) else {
            return Recovery::RankLost { rank };
        };
        if was_master && new_master == self.me {
            return Recovery::TookOver { resend: self.backup.drain(..).collect() };
        }
        Recovery::Replica { rank, new_master }
    }

    /// The backup table's entries, in send order.
    pub fn backup(&self) -> impl Iterator<Item = &(MsgId, P)> {
        self.backup.iter()
    }

    /// Messages waiting for their commit.
    pub fn backup_len(&self) -> usize {
        self.backup.len()
    }

    /// Channels in the log table.
    pub fn log_len(&self) -> usize {
        self.log.len()
    }

    /// The dead slots.
    pub fn dead_slots(&self) -> Vec<usize> {
        self.dead.slots()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mid(dst: u32, tag: i32, seq: u64) -> MsgId {
        MsgId { comm: 0, src: 1, dst, tag, seq }
    }

    #[test]
    fn a_grown_layout_keeps_every_slot_and_adds_alive_ones() {
        let l = Layout::new(2, 2);
        let g = l.grown(5);
        assert_eq!(g.slots(), 10);
        assert_eq!(l.grown(1), l, "never shrinks");
        for s in 0..l.slots() {
            assert_eq!((g.rank_of(s), g.replica_of(s)), (l.rank_of(s), l.replica_of(s)));
        }
        let mut c = Coordinator::<()>::new(l, 1);
        let _ = c.on_failure(0);
        c.grow(4);
        assert_eq!(c.layout(), l.grown(4));
        assert!(c.is_dead(0), "the dead stay dead");
        assert_eq!(c.master_of(0), Some(1));
        assert_eq!(c.master_of(3), Some(6), "a child rank's master is its replica 0");
        assert!(!c.is_dead(7));
        assert!(c.is_dead(8), "beyond the universe counts as dead");
    }

    #[test]
    fn layout_numbers_slots_rank_major() {
        let l = Layout::new(4, 3);
        assert_eq!(l.slots(), 12);
        assert_eq!(l.slots_of(0), 0..3);
        assert_eq!(l.slots_of(1), 3..6);
        assert_eq!(l.slots_of(3), 9..12);
        for s in 0..l.slots() {
            assert_eq!(l.slot(l.rank_of(s), l.replica_of(s)), s);
        }
        let one = Layout::new(5, 1);
        assert!((0..5).all(|s| one.rank_of(s) == s && one.slot(s, 0) == s));
    }

    #[test]
    fn master_transmits_to_alive_destination_replicas_and_commits_to_its_own() {
        // n = 3, r = 3: rank 1 is slots 3, 4, 5; rank 2 is 6, 7, 8.
        let l = Layout::new(3, 3);
        let mut c: Coordinator<Vec<u8>> = Coordinator::new(l, l.slot(1, 0));
        assert!(c.is_master());
        assert_eq!(c.on_send(mid(2, 0, 0), || vec![1]), SendAction::Transmit { dests: vec![6, 7, 8] });
        assert_eq!(c.commit_targets(), vec![4, 5]);
        assert_eq!(c.on_failure(7), Recovery::Replica { rank: 2, new_master: 6 });
        assert_eq!(c.on_send(mid(2, 0, 1), || vec![1]), SendAction::Transmit { dests: vec![6, 8] });
        assert_eq!(c.backup_len(), 0);
    }

    #[test]
    fn replica_keeps_until_commit_and_skips_what_was_committed() {
        let l = Layout::new(3, 2);
        let mut c: Coordinator<u32> = Coordinator::new(l, l.slot(1, 1));
        let master = l.slot(1, 0);
        assert!(!c.is_master());
        assert_eq!(c.on_send(mid(2, 7, 0), || 10), SendAction::Stored);
        assert_eq!(c.on_send(mid(2, 7, 1), || 11), SendAction::Stored);
        assert!(c.on_commit(master, mid(2, 7, 0), |_, _| ()));
        assert_eq!(c.backup_len(), 1);
        // The master is ahead: commits for messages this replica has not reached.
        assert!(c.on_commit(master, mid(2, 7, 1), |_, _| ()));
        assert!(c.on_commit(master, mid(2, 7, 2), |_, _| ()));
        assert_eq!(c.backup_len(), 0);
        assert_eq!(c.on_send(mid(2, 7, 2), || 12), SendAction::Committed);
        assert_eq!(c.on_send(mid(2, 7, 3), || 13), SendAction::Stored);
        // Commits from another rank are refused, and from a dead replica (fencing).
        assert!(!c.on_commit(l.slot(2, 0), mid(2, 7, 3), |_, _| ()));
        assert_eq!(c.backup_len(), 1);
        c.on_failure(master);
        assert!(!c.on_commit(master, mid(2, 7, 4), |_, _| ()));
    }

    #[test]
    fn lowest_alive_replica_takes_over_and_resends_its_backup_in_order() {
        // n = 3, r = 3: rank 0 is slots 0–2, rank 1 is 3–5, rank 2 is 6–8.
        let l = Layout::new(3, 3);
        let mut c: Coordinator<u32> = Coordinator::new(l, l.slot(1, 2));
        for s in 0..4 {
            c.on_send(mid(2, 0, s), || s as u32);
        }
        c.on_commit(3, mid(2, 0, 0), |_, _| ());
        // A non-master dies: nothing to resend.
        assert_eq!(c.on_failure(4), Recovery::Replica { rank: 1, new_master: 3 });
        match c.on_failure(3) {
            Recovery::TookOver { resend } => assert_eq!(resend.iter().map(|x| x.1).collect::<Vec<_>>(), vec![1, 2, 3]),
            other => panic!("{other:?}"),
        }
        assert!(c.is_master());
        assert_eq!(c.on_failure(3), Recovery::Nothing);
        assert_eq!(c.on_failure(6), Recovery::Replica { rank: 2, new_master: 7 });
        assert_eq!(c.on_failure(7), Recovery::Replica { rank: 2, new_master: 8 });
        assert_eq!(c.on_failure(8), Recovery::RankLost { rank: 2 });
        // Rank 0 is replicated too: its master's death is survived.
        assert_eq!(c.on_failure(0), Recovery::Replica { rank: 0, new_master: 1 });
    }

    #[test]
    fn choices_are_numbered_in_program_order_and_followed_once() {
        let mut c = Choices::new();
        // The master's outcomes may arrive before or after the replica reaches the point.
        c.learn(1, Some((3, 7, 0)));
        assert_eq!(c.point(), 0);
        assert_eq!(c.knows(0), None, "not told yet: wait");
        c.learn(0, None);
        assert_eq!(c.take(0), Some(None));
        assert_eq!(c.point(), 1);
        assert_eq!(c.take(1), Some(Some((3, 7, 0))));
        assert_eq!(c.take(1), None);
        assert_eq!(c.pending(), 0);
    }

    proptest! {
        /// Whatever the interleaving of the master's commits and a replica's own progress,
        /// the backup table holds exactly the messages reached and not committed, and it
        /// never exceeds how far the replica is ahead of its master.
        #[test]
        fn backup_is_exactly_the_uncommitted_messages(steps in proptest::collection::vec(any::<bool>(), 1..200)) {
            // Rank 1 is slots 2 (master) and 3 (this replica).
            let l = Layout::new(2, 2);
            let mut c: Coordinator<u64> = Coordinator::new(l, 3);
            let (mut reached, mut committed) = (0u64, 0u64);
            for s in steps {
                if s {
                    let a = c.on_send(mid(0, 0, reached), || reached);
                    prop_assert_eq!(a, if reached < committed { SendAction::Committed } else { SendAction::Stored });
                    reached += 1;
                } else {
                    let mut pruned = Vec::new();
                    prop_assert!(c.on_commit(2, mid(0, 0, committed), |m, _| pruned.push(m.seq)));
                    // What a commit prunes is exactly the entry it commits, if reached.
                    let want: Vec<u64> = if committed < reached { vec![committed] } else { vec![] };
                    prop_assert_eq!(pruned, want);
                    committed += 1;
                }
                prop_assert_eq!(c.backup_len() as u64, reached.saturating_sub(committed));
                prop_assert!(c.log_len() <= 1);
            }
            match c.on_failure(2) {
                Recovery::TookOver { resend } => {
                    let seqs: Vec<u64> = resend.iter().map(|x| x.0.seq).collect();
                    let want: Vec<u64> = (committed.min(reached)..reached).collect();
                    prop_assert_eq!(seqs, want);
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }

        /// With several channels interleaved in the table (two tags), a commit prunes exactly
        /// its channel's reached messages up to it, wherever they sit, and the table keeps
        /// the others in send order.
        #[test]
        fn commits_prune_their_channel_among_others(steps in proptest::collection::vec((any::<bool>(), 0..2i32), 1..300)) {
            let l = Layout::new(2, 2);
            let mut c: Coordinator<u64> = Coordinator::new(l, 3);
            let (mut reached, mut committed) = ([0u64; 2], [0u64; 2]);
            let mut order = 0u64;
            let mut kept: Vec<(i32, u64)> = Vec::new();
            for (send, tag) in steps {
                let t = tag as usize;
                if send {
                    let a = c.on_send(mid(0, tag, reached[t]), || order);
                    if reached[t] >= committed[t] {
                        prop_assert_eq!(a, SendAction::Stored);
                        kept.push((tag, reached[t]));
                    }
                    reached[t] += 1;
                    order += 1;
                } else {
                    let mut pruned = Vec::new();
                    prop_assert!(c.on_commit(2, mid(0, tag, committed[t]), |m, _| pruned.push((m.tag, m.seq))));
                    let want: Vec<(i32, u64)> = kept.iter().copied().filter(|&(g, q)| g == tag && q <= committed[t]).collect();
                    kept.retain(|&(g, q)| !(g == tag && q <= committed[t]));
                    prop_assert_eq!(pruned, want);
                    committed[t] += 1;
                }
                let table: Vec<(i32, u64)> = c.backup_mut().map(|(m, _)| (m.tag, m.seq)).collect();
                prop_assert_eq!(&table, &kept);
            }
        }
    }

    #[test]
    fn failure_outcomes_round_trip_and_never_look_like_a_match() {
        use failures::*;
        for f in [Failed::Lost(0), Failed::Lost(7), Failed::Lost(u32::MAX), Failed::Revoked] {
            for post in [false, true] {
                let o = failure_outcome(f, post);
                assert_eq!(outcome_failure(o), Some((f, post)));
                // Through the wire's fields (source as u32, tag, sequence) and back.
                let (s, t, v) = o.unwrap();
                assert_eq!(outcome_failure(Some(((s as u32) as i32, t, v))), Some((f, post)));
                assert_eq!(outcome_lost_set(o, &[]), None);
                assert_eq!(lost_set_parts(o), None);
            }
        }
        // A match (a source, a rank) or nothing is not a failure.
        assert_eq!(outcome_failure(Some((3, 1, 9))), None);
        assert_eq!(outcome_failure(None), None);
        assert_eq!(op_of_point(failure_point(42)), Some(42));
        assert_eq!(op_of_point(42), None);
        let set = lost_set_outcomes(7, &[2, 0, 63]);
        assert_eq!(set.len(), 1, "below 64: one outcome");
        assert_eq!(set[0].0, 7);
        assert_eq!(outcome_lost_set(set[0].1, &[]), Some(vec![0, 2, 63]));
        assert_eq!(outcome_failure(set[0].1), None);
        assert_eq!(outcome_lost_set(lost_set_outcomes(7, &[])[0].1, &[]), Some(vec![]));
        // A success is neither a failure nor a match nor a set, and no failure is a success.
        assert!(outcome_success(success_outcome()));
        assert_eq!(outcome_failure(success_outcome()), None);
        assert_eq!(outcome_lost_set(success_outcome(), &[]), None);
        let (s, t, v) = success_outcome().unwrap();
        assert!(outcome_success(Some(((s as u32) as i32, t, v))), "through the wire's fields");
        for o in
            [failure_outcome(Failed::Lost(3), false), failure_outcome(Failed::Revoked, true), None, Some((3, 3, 0))]
        {
            assert!(!outcome_success(o), "{o:?}");
        }
    }

    #[test]
    fn an_immediate_collective_completes_on_a_replica_only_with_its_master_s_word() {
        use failures::*;
        // The master decides; a replica waits for its word.
        assert_eq!(collective_word(None, true), Word::Decide);
        assert_eq!(collective_word(None, false), Word::Await);
        // The master's success is followed, by a replica and by a new master alike.
        for may_decide in [false, true] {
            assert_eq!(collective_word(Some(success_outcome()), may_decide), Word::Follow);
            // Its failure is not a completion: the request fails when it is applied.
            for f in [Failed::Lost(2), Failed::Revoked] {
                for post in [false, true] {
                    assert_eq!(collective_word(Some(failure_outcome(f, post)), may_decide), Word::Await);
                }
            }
        }
    }

    #[test]
    fn sets_of_failed_ranks_from_64_on_are_told_in_parts() {
        use failures::*;
        let ranks = [200, 3, 64, 127, 0, 1000, 65];
        let outs = lost_set_outcomes(12, &ranks);
        // Words 1 (64, 65, 127), 3 (200), 15 (1000) in parts, word 0 at the point itself, last.
        assert_eq!(outs.len(), 4);
        let (main_point, main) = *outs.last().unwrap();
        assert_eq!(main_point, 12);
        assert_eq!(lost_set_parts(main), Some(3));
        let points: Vec<u64> = outs[..3].iter().map(|x| x.0).collect();
        assert_eq!(points, (1..=3).map(|i| lost_set_part_point(12, i)).collect::<Vec<_>>());
        for &p in &points {
            assert!((LOST_SET_POINT..FAILURE_POINT).contains(&p) && op_of_point(p).is_none(), "{p:#x}");
        }
        assert_ne!(lost_set_part_point(12, 1), lost_set_part_point(13, 1));
        // Through the wire's fields (source as u32, tag, sequence) and back.
        let wire = |o: Outcome| o.map(|(s, t, v)| ((s as u32) as i32, t, v));
        let parts: Vec<Outcome> = outs[..3].iter().map(|x| wire(x.1)).collect();
        assert_eq!(outcome_lost_set(wire(main), &parts), Some(vec![0, 3, 64, 65, 127, 200, 1000]));
        // A part missing, or something else in its place: not a set.
        assert_eq!(outcome_lost_set(main, &parts[..2]), None);
        assert_eq!(outcome_lost_set(main, &[parts[0], parts[1], failure_outcome(Failed::Revoked, false)]), None);
        assert_eq!(outcome_lost_set(main, &[parts[0], parts[1], None]), None);
        // Neither a set's outcome nor its parts look like a failure, a success or a match's.
        for (_, o) in &outs {
            assert_eq!(outcome_failure(*o), None);
            assert!(!outcome_success(*o));
        }
        assert_eq!(lost_set_parts(outs[0].1), None, "a part is not a set's first outcome");
        // Only ranks from 64 on: word 0 empty, the set still whole.
        let outs = lost_set_outcomes(0, &[64]);
        let parts: Vec<Outcome> = outs[..outs.len() - 1].iter().map(|x| x.1).collect();
        assert_eq!(outcome_lost_set(outs.last().unwrap().1, &parts), Some(vec![64]));
        // The largest world ranks.
        let big = [u32::MAX, u32::MAX - 64];
        let outs = lost_set_outcomes(1, &big);
        let parts: Vec<Outcome> = outs[..outs.len() - 1].iter().map(|x| x.1).collect();
        assert_eq!(outcome_lost_set(outs.last().unwrap().1, &parts), Some(vec![u32::MAX - 64, u32::MAX]));
    }

    #[test]
    fn a_point_reached_long_ago_and_not_followed_still_learns_its_outcome() {
        // A wildcard receive's point: its outcome comes when the master's receive completes,
        // after the outcomes of the tests that polled it meanwhile — which may be more than
        // the followed window holds. It is still this replica's to follow.
        let mut c = Choices::new();
        let recv = c.point();
        let followed_early = c.point();
        c.followed(followed_early, None);
        for _ in 0..(FOLLOWED_WINDOW + 10) {
            let p = c.point();
            c.learn(p, None);
            assert_eq!(c.take(p), Some(None));
        }
        c.learn(recv, Some((2, 7, 35)));
        assert_eq!(c.knows(recv), Some(Some((2, 7, 35))), "the receive's outcome is not forgotten");
        assert_eq!(c.take(recv), Some(Some((2, 7, 35))));
        // A point followed (long ago, or just now) is not learned again: a new master tells
        // its recent outcomes again.
        c.learn(followed_early, Some((1, 0, 0)));
        c.learn(recv, Some((2, 7, 35)));
        assert_eq!(c.pending(), 0);
        // A point not reached yet is learned.
        c.learn(c.next + 3, None);
        assert_eq!(c.pending(), 1);
    }

    #[test]
    fn failure_points_are_learned_and_kept_apart_from_ordinary_points() {
        use failures::*;
        let mut c = Choices::new();
        let p0 = c.point();
        c.learn(failure_point(5), failure_outcome(Failed::Lost(2), false));
        c.learn(p0, Some((1, 0, 0)));
        // Many ordinary points followed later do not push the failure's outcome out.
        for _ in 0..(FOLLOWED_WINDOW + 10) {
            let p = c.point();
            c.followed(p, None);
        }
        assert_eq!(c.known_failures(), vec![(failure_point(5), failure_outcome(Failed::Lost(2), false))]);
        assert_eq!(c.take(failure_point(5)), Some(failure_outcome(Failed::Lost(2), false)));
        assert_eq!(c.take(p0), Some(Some((1, 0, 0))));
        assert!(c.relay().iter().any(|&(p, _)| p == failure_point(5)), "a new master tells it again");
    }
}
