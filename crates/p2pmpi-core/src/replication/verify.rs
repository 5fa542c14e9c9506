//! Replicas that check each other (issue 42): the digest exchange, the comparison and the
//! voting rules, as a state machine without I/O.
//!
//! Replication masks crashes: a rank's replicas compute the same thing and its master alone
//! sends the rank's messages. A replica that keeps running but computes wrong (bad memory, a
//! tampered host) would go unnoticed. Here every replica of a sending rank also announces a
//! **digest** of each message it sends (BLAKE3 of the data as the datatype lays it out, never
//! padding; the driver hashes, this core only compares [`Digest`]s) to every replica of the
//! destination rank; the master alone sends the data, as before. Each receiving process holds
//! a [`Verifier`], which tells its driver when a received message may complete its receive.
//!
//! ## Inputs
//!
//! A message is known by its [`Key`]: the sending rank (world rank, from the sending slot)
//! and its [`MsgId`] (communicator, source, destination, tag and MID — the per-channel
//! sequence number). The driver feeds:
//!
//! * [`Input::Data`]: the data of a message arrived from slot `from` (normally the sender's
//!   master; after a takeover, its successor), with the digest the driver computed on arrival;
//! * [`Input::Digest`]: slot `from`, a replica of the sending rank, announced its digest;
//! * [`Input::Died`]: a failure notice — the slot is no longer waited for, and its word
//!   counts for nothing from now on (as for commits: a dead replica may have resumed after the
//!   others took over).
//!
//! Data and digests arrive in any order, before or after each other. A digest from a slot out
//! of the layout, from a dead or fenced slot, a second digest from the same slot or a second
//! data, and anything for a message already judged and closed, are [`Rejected`] without
//! changing anything (never a panic).
//!
//! ## The rules
//!
//! Let `L` be the number of the sender's replicas this process holds alive, and count only
//! their digests (a replica that dies before the decision is taken out of the count).
//!
//! * **Fewer than 2 alive: nothing to compare against.** With `L = 1`, once the data and the
//!   survivor's digest are in: equal, [`Output::Unverified`] (delivered, not cross-checked);
//!   different, a mismatch. With `L = 0` (the rank is lost), the data is delivered
//!   [`Output::Unverified`]. A lone replica that lies consistently (its data and digest agree)
//!   **cannot be detected**: unverified deliveries are counted ([`Stats::unverified`]) so that
//!   the driver can report them.
//! * **Compare** ([`Rule::Compare`], the rule at r = 2): deliver ([`Output::Deliver`]) only
//!   once every alive replica's digest is in and all equal the data's digest. Any
//!   disagreement among them or with the data is a mismatch.
//! * **Vote** ([`Rule::Vote`], r ≥ 3): the content whose digest a strict majority
//!   (`⌊L/2⌋ + 1`) of the alive replicas announced is delivered: with [`Output::Deliver`] if
//!   the data's digest is it, else with [`Output::DeliverFromBackup`], naming a replica of the
//!   majority that did not send the data (not the current master when another one can, since
//!   the master keeps no backup) — its backup copy holds the content. Every alive replica
//!   whose digest differs, now or when it arrives later (the entry is kept until every alive
//!   replica's digest is in), and the replica whose data was outvoted, is **fenced**
//!   ([`Output::Fence`]): this verifier counts it dead at once, and the driver reports it with
//!   its host to the launcher, which declares it dead to everyone as if it had failed. When
//!   no value can reach a strict majority any more, a mismatch.
//! * **A mismatch** ([`Output::Mismatch`]) carries a [`Report`]: the rank, the message
//!   (destination, tag, MID), the data's sender and digest, what every alive replica announced
//!   and who is still silent. With [`OnMismatch::Stop`] it comes as soon as the mismatch is
//!   certain, and the driver stops the job before the receive completes; with
//!   [`OnMismatch::Report`] it comes once the data is in, and the driver delivers the data as
//!   received after reporting.
//!
//! Every message gets exactly one decision (a delivery of one of the three kinds, or a
//! mismatch). With a single faulty replica and `L ≥ 2`, no wrong content is delivered
//! without a mismatch: a delivery needs the agreement of at least two alive replicas.
//!
//! ## Memory
//!
//! An entry lives from the first word about a message until it is decided and every alive
//! replica's digest is in (or its replica is dead). Then it is dropped, and its channel
//! remembers it as judged by a high-water mark (the MIDs of a channel below the mark, plus
//! the few judged above it out of order), so that a late or replayed word is rejected rather
//! than opening an entry that would never close. A rank that loses every replica before its
//! data came leaves its entries open (the job fails anyway).

use super::{DeadSet, Layout, MsgId};
use crate::machine::{Machine, Time};
use crate::matching::FastMap;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

/// The digest of a message's data (BLAKE3, computed by the driver).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Digest(pub [u8; 32]);

impl fmt::Display for Digest {
    /// The first eight bytes in hexadecimal (enough to tell digests apart in a report).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        f.write_str("…")
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

/// How the digests are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Every alive replica must agree with the data (detects; r = 2).
    Compare,
    /// A strict majority of the alive replicas decides (corrects; r ≥ 3).
    Vote,
}

/// What a mismatch does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMismatch {
    /// Stop the job before the suspect receive completes.
    Stop,
    /// Report, then deliver the data as received.
    Report,
}

/// A verifier's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode {
    pub rule: Rule,
    pub on_mismatch: OnMismatch,
}

impl Mode {
    /// The rule for `r` replicas (compare below 3, vote from 3), stopping on a mismatch.
    pub fn for_degree(r: usize) -> Mode {
        Mode { rule: if r >= 3 { Rule::Vote } else { Rule::Compare }, on_mismatch: OnMismatch::Stop }
    }
}

/// A message: its sending rank (world rank) and its MID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub rank: usize,
    pub mid: MsgId,
}

/// What the driver feeds a [`Verifier`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// The data of `mid` arrived from slot `from`; `digest` is what the driver computed of it.
    Data { from: usize, mid: MsgId, digest: Digest },
    /// Slot `from` announced the digest of its copy of `mid`.
    Digest { from: usize, mid: MsgId, digest: Digest },
    /// `slot` was declared dead.
    Died { slot: usize },
}

/// Why a replica is fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceCause {
    /// It announced this digest, against the majority's.
    Digest(Digest),
    /// The data it sent has this digest, against the majority's.
    Data(Digest),
}

/// What a mismatch shows: enough to name the message and the replicas that disagreed (the
/// driver adds their hosts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub key: Key,
    pub rule: Rule,
    /// The slot the data came from and its digest, if it came.
    pub data: Option<(usize, Digest)>,
    /// What each alive replica of the sender announced, by slot.
    pub announced: Vec<(usize, Digest)>,
    /// Alive replicas not heard from yet.
    pub silent: Vec<usize>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.key.mid;
        write!(
            f,
            "digest mismatch ({:?}) on the message of rank {} to rank {} (communicator {}, tag {}, MID {}):",
            self.rule, self.key.rank, m.dst, m.comm, m.tag, m.seq
        )?;
        match self.data {
            Some((s, d)) => write!(f, " data from slot {s} hashes to {d}")?,
            None => write!(f, " data not received yet")?,
        }
        for (s, d) in &self.announced {
            write!(f, "; slot {s} announced {d}")?;
        }
        if !self.silent.is_empty() {
            write!(f, "; silent: {:?}", self.silent)?;
        }
        Ok(())
    }
}

/// What the driver carries out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// The data received is verified: complete the receive with it.
    Deliver { key: Key },
    /// The data received was outvoted: complete the receive with the content of `slot`'s
    /// backup copy (a replica of the majority).
    DeliverFromBackup { key: Key, slot: usize },
    /// Fewer than two replicas of the sender are alive (`alive`): the data is delivered
    /// without being cross-checked.
    Unverified { key: Key, alive: usize },
    /// `slot` disagreed with the majority on `key`: report it with its host and have it
    /// declared dead. This verifier counts it dead already.
    Fence { slot: usize, key: Key, cause: FenceCause },
    /// The replicas disagree and no majority decides: stop (or report and deliver the data as
    /// received, as `then` says).
    Mismatch { report: Report, then: OnMismatch },
}

/// Why an input was refused (nothing changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// The slot is not in the layout.
    UnknownSlot { slot: usize },
    /// A digest from a dead or fenced slot.
    Dead { slot: usize },
    /// The message was judged and closed already.
    Closed { key: Key },
    /// A second digest from `slot`, or a second data, for `key`.
    Duplicate { key: Key, slot: usize },
}

/// Decisions counted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub verified: u64,
    pub from_backup: u64,
    pub unverified: u64,
    pub mismatches: u64,
    pub fenced: u64,
}

/// What was decided for a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// This content was delivered (a late digest is judged against it).
    Content(Digest),
    Unverified,
    Mismatch,
}

#[derive(Debug)]
struct Entry {
    data: Option<(usize, Digest)>,
    announced: Vec<(usize, Digest)>,
    verdict: Option<Verdict>,
}

/// The judged MIDs of one channel: every one below `mark`, and those in `above`.
#[derive(Debug, Default)]
struct Judged {
    mark: u64,
    above: BTreeSet<u64>,
}

/// A channel as the verifier sees it: the sending rank, communicator, source, destination, tag.
type Channel = (usize, u32, u32, u32, i32);

fn channel(key: &Key) -> Channel {
    (key.rank, key.mid.comm, key.mid.src, key.mid.dst, key.mid.tag)
}

/// The lowest MID (for ranges over one rank's entries).
const MIN_MID: MsgId = MsgId { comm: 0, src: 0, dst: 0, tag: i32::MIN, seq: 0 };

/// A decision: the verdict, the output, the replicas to fence.
type Decision = (Verdict, Output, Vec<(usize, FenceCause)>);

/// One receiving process's side of the digest exchange (see the module docs).
#[derive(Debug)]
pub struct Verifier {
    dead: DeadSet,
    mode: Mode,
    open: BTreeMap<Key, Entry>,
    judged: FastMap<Channel, Judged>,
    /// Ranks whose open entries must be looked at again (a replica of theirs died).
    recheck: Vec<usize>,
    out: VecDeque<Output>,
    stats: Stats,
}

impl Verifier {
    pub fn new(layout: Layout, mode: Mode) -> Verifier {
        Verifier {
            dead: DeadSet::new(layout),
            mode,
            open: BTreeMap::new(),
            judged: FastMap::default(),
            recheck: Vec::new(),
            out: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    pub fn layout(&self) -> Layout {
        self.dead.layout()
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Whether `slot` is dead or fenced here.
    pub fn is_dead(&self, slot: usize) -> bool {
        self.dead.is_dead(slot)
    }

    /// The replicas of `rank` alive here, lowest first.
    pub fn alive_slots(&self, rank: usize) -> Vec<usize> {
        self.dead.alive_slots(rank).collect()
    }

    /// Messages with an open entry (undecided, or waiting for a digest).
    pub fn open_len(&self) -> usize {
        self.open.len()
    }

    /// MIDs judged out of order, remembered beside their channels' marks.
    pub fn judged_backlog(&self) -> usize {
        self.judged.values().map(|j| j.above.len()).sum()
    }

    fn rank_of(&self, slot: usize) -> Result<usize, Rejected> {
        if slot >= self.dead.layout().slots() {
            return Err(Rejected::UnknownSlot { slot });
        }
        Ok(self.dead.layout().rank_of(slot))
    }

    fn is_judged(&self, key: &Key) -> bool {
        self.judged.get(&channel(key)).is_some_and(|j| key.mid.seq < j.mark || j.above.contains(&key.mid.seq))
    }

    fn entry(&mut self, key: Key) -> Result<&mut Entry, Rejected> {
        if self.is_judged(&key) {
            return Err(Rejected::Closed { key });
        }
        let r = self.dead.layout().r;
        Ok(self.open.entry(key).or_insert_with(|| Entry {
            data: None,
            announced: Vec::with_capacity(r),
            verdict: None,
        }))
    }

    fn on_data(&mut self, from: usize, mid: MsgId, digest: Digest) -> Result<(), Rejected> {
        // Data from a dead slot is taken: the data is judged, its sender is not trusted.
        let key = Key { rank: self.rank_of(from)?, mid };
        let e = self.entry(key)?;
        if e.data.is_some() {
            return Err(Rejected::Duplicate { key, slot: from });
        }
        e.data = Some((from, digest));
        self.evaluate(key);
        Ok(())
    }

    fn on_digest(&mut self, from: usize, mid: MsgId, digest: Digest) -> Result<(), Rejected> {
        let key = Key { rank: self.rank_of(from)?, mid };
        if self.dead.is_dead(from) {
            return Err(Rejected::Dead { slot: from });
        }
        let vote = self.mode.rule == Rule::Vote;
        let e = self.entry(key)?;
        if e.announced.iter().any(|a| a.0 == from) {
            return Err(Rejected::Duplicate { key, slot: from });
        }
        e.announced.push((from, digest));
        // A digest after the delivery is judged against what was delivered.
        if let Some(Verdict::Content(m)) = e.verdict {
            if vote && digest != m {
                self.fence(from, key, FenceCause::Digest(digest));
            }
        }
        self.evaluate(key);
        Ok(())
    }

    fn fence(&mut self, slot: usize, key: Key, cause: FenceCause) {
        if self.dead.mark(slot) {
            self.stats.fenced += 1;
            self.out.push_back(Output::Fence { slot, key, cause });
            self.recheck.push(key.rank);
        }
    }

    /// Decides `key` if it can, and closes it once decided and every alive replica spoke.
    fn evaluate(&mut self, key: Key) {
        let Some(e) = self.open.get(&key) else { return };
        if e.verdict.is_none() {
            let alive: Vec<usize> = self.dead.alive_slots(key.rank).collect();
            if let Some((verdict, out, fences)) = decide(self.mode, key, &alive, e) {
                match out {
                    Output::Deliver { .. } => self.stats.verified += 1,
                    Output::DeliverFromBackup { .. } => self.stats.from_backup += 1,
                    Output::Unverified { .. } => self.stats.unverified += 1,
                    Output::Mismatch { .. } => self.stats.mismatches += 1,
                    Output::Fence { .. } => {}
                }
                self.out.push_back(out);
                if let Some(e) = self.open.get_mut(&key) {
                    e.verdict = Some(verdict);
                }
                for (slot, cause) in fences {
                    self.fence(slot, key, cause);
                }
            }
        }
        let Some(e) = self.open.get(&key) else { return };
        let heard = |s: usize| e.announced.iter().any(|a| a.0 == s);
        if e.verdict.is_some() && self.dead.alive_slots(key.rank).all(heard) {
            self.open.remove(&key);
            let j = self.judged.entry(channel(&key)).or_default();
            if key.mid.seq >= j.mark {
                j.above.insert(key.mid.seq);
                while j.above.remove(&j.mark) {
                    j.mark += 1;
                }
            }
        }
    }

    /// Looks again at the open entries of every rank that lost a replica.
    fn settle(&mut self) {
        while let Some(rank) = self.recheck.pop() {
            let lo = Key { rank, mid: MIN_MID };
            let keys: Vec<Key> = self.open.range(lo..).map(|(k, _)| *k).take_while(|k| k.rank == rank).collect();
            for key in keys {
                self.evaluate(key);
            }
        }
    }
}

/// The rules of the module docs for one undecided message; `None`: wait for more.
fn decide(mode: Mode, key: Key, alive: &[usize], e: &Entry) -> Option<Decision> {
    let live: Vec<(usize, Digest)> = e.announced.iter().copied().filter(|a| alive.contains(&a.0)).collect();
    let data = e.data;
    let mismatch = || {
        let silent = alive.iter().copied().filter(|s| !live.iter().any(|a| a.0 == *s)).collect();
        let report = Report { key, rule: mode.rule, data, announced: live.clone(), silent };
        Some((Verdict::Mismatch, Output::Mismatch { report, then: mode.on_mismatch }, Vec::new()))
    };
    // With Stop, a certain mismatch is told at once; with Report, once the data can follow.
    let tell_now = mode.on_mismatch == OnMismatch::Stop || data.is_some();
    match alive.len() {
        0 => return data.map(|_| (Verdict::Unverified, Output::Unverified { key, alive: 0 }, Vec::new())),
        1 => {
            let (_, announced) = *live.first()?;
            let (_, got) = data?;
            if got != announced {
                return mismatch();
            }
            return Some((Verdict::Unverified, Output::Unverified { key, alive: 1 }, Vec::new()));
        }
        _ => {}
    }
    match mode.rule {
        Rule::Compare => {
            let mut all = live.iter().map(|a| a.1).chain(data.map(|d| d.1));
            let first = all.next()?;
            if all.any(|d| d != first) {
                return if tell_now { mismatch() } else { None };
            }
            let (_, got) = data?;
            (live.len() == alive.len()).then(|| (Verdict::Content(got), Output::Deliver { key }, Vec::new()))
        }
        Rule::Vote => {
            let need = alive.len() / 2 + 1;
            let count = |d: Digest| live.iter().filter(|a| a.1 == d).count();
            let best = live.iter().map(|a| (count(a.1), a.1)).max_by_key(|x| x.0);
            let (votes, m) = best.unwrap_or((0, Digest::default()));
            if votes < need {
                let possible = votes + (alive.len() - live.len()) >= need;
                return if !possible && tell_now { mismatch() } else { None };
            }
            let (sender, got) = data?;
            let mut fences: Vec<(usize, FenceCause)> =
                live.iter().filter(|a| a.1 != m).map(|a| (a.0, FenceCause::Digest(a.1))).collect();
            if got == m {
                return Some((Verdict::Content(m), Output::Deliver { key }, fences));
            }
            if alive.contains(&sender) && !fences.iter().any(|f| f.0 == sender) {
                fences.push((sender, FenceCause::Data(got)));
            }
            // A replica of the majority that did not send the data; the master keeps no backup.
            let master = alive.first().copied();
            let majority = || live.iter().filter(|a| a.1 == m && a.0 != sender).map(|a| a.0);
            let Some(slot) = majority().find(|&s| Some(s) != master).or_else(|| majority().next()) else {
                return mismatch();
            };
            Some((Verdict::Content(m), Output::DeliverFromBackup { key, slot }, fences))
        }
    }
}

impl Machine for Verifier {
    type Input = Input;
    type Output = Output;
    type Rejected = Rejected;

    fn handle_input(&mut self, _now: Time, input: Input) -> Result<(), Rejected> {
        match input {
            Input::Data { from, mid, digest } => self.on_data(from, mid, digest)?,
            Input::Digest { from, mid, digest } => self.on_digest(from, mid, digest)?,
            Input::Died { slot } => {
                let rank = self.rank_of(slot)?;
                if self.dead.mark(slot) {
                    self.recheck.push(rank);
                }
            }
        }
        self.settle();
        Ok(())
    }

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
    use proptest::prelude::*;
    use std::time::Duration;

    const T: Duration = Duration::ZERO;

    fn mid(seq: u64) -> MsgId {
        MsgId { comm: 0, src: 1, dst: 0, tag: 5, seq }
    }

    fn dg(v: u8) -> Digest {
        Digest([v; 32])
    }

    fn vote(on: OnMismatch) -> Mode {
        Mode { rule: Rule::Vote, on_mismatch: on }
    }

    fn compare(on: OnMismatch) -> Mode {
        Mode { rule: Rule::Compare, on_mismatch: on }
    }

    fn data(v: &mut Verifier, from: usize, seq: u64, d: u8) -> Vec<Output> {
        v.handle_input(T, Input::Data { from, mid: mid(seq), digest: dg(d) }).expect("data taken");
        v.drain_outputs()
    }

    fn digest(v: &mut Verifier, from: usize, seq: u64, d: u8) -> Vec<Output> {
        v.handle_input(T, Input::Digest { from, mid: mid(seq), digest: dg(d) }).expect("digest taken");
        v.drain_outputs()
    }

    fn died(v: &mut Verifier, slot: usize) -> Vec<Output> {
        v.handle_input(T, Input::Died { slot }).expect("notice taken");
        v.drain_outputs()
    }

    fn key(seq: u64) -> Key {
        Key { rank: 1, mid: mid(seq) }
    }

    #[test]
    fn compare_delivers_once_every_alive_replica_agrees_with_the_data() {
        // n = 2, r = 2: rank 1 is slots 2 (master) and 3.
        let mut v = Verifier::new(Layout::new(2, 2), Mode::for_degree(2));
        assert_eq!(v.mode(), compare(OnMismatch::Stop));
        assert!(digest(&mut v, 3, 0, 1).is_empty(), "a digest before the data");
        assert!(data(&mut v, 2, 0, 1).is_empty(), "the master's digest is still missing");
        assert_eq!(digest(&mut v, 2, 0, 1), vec![Output::Deliver { key: key(0) }]);
        assert_eq!(v.open_len(), 0);
        assert_eq!(v.stats(), Stats { verified: 1, ..Stats::default() });
    }

    #[test]
    fn compare_stops_before_delivery_or_reports_once_the_data_is_in() {
        // The master's copy flipped after its digest: the data disagrees with both digests.
        let mut v = Verifier::new(Layout::new(2, 2), compare(OnMismatch::Stop));
        assert!(digest(&mut v, 2, 0, 1).is_empty());
        let out = data(&mut v, 2, 0, 9);
        let [Output::Mismatch { report, then: OnMismatch::Stop }] = &out[..] else { panic!("{out:?}") };
        assert_eq!(report.data, Some((2, dg(9))));
        assert_eq!(report.announced, vec![(2, dg(1))]);
        assert_eq!(report.silent, vec![3]);
        let text = report.to_string();
        assert!(text.contains("rank 1 to rank 0") && text.contains("tag 5") && text.contains("MID 0"), "{text}");
        assert!(digest(&mut v, 3, 0, 1).is_empty(), "decided once");
        assert_eq!(v.open_len(), 0);
        // Report: two replicas disagree before the data; told once the data can follow.
        let mut v = Verifier::new(Layout::new(2, 2), compare(OnMismatch::Report));
        assert!(digest(&mut v, 2, 0, 1).is_empty());
        assert!(digest(&mut v, 3, 0, 2).is_empty(), "the data is not in: the report waits for it");
        let out = data(&mut v, 2, 0, 1);
        assert!(matches!(&out[..], [Output::Mismatch { then: OnMismatch::Report, .. }]), "{out:?}");
        assert_eq!(v.stats().mismatches, 1);
        assert_eq!(v.stats().fenced, 0, "compare fences nobody");
    }

    #[test]
    fn vote_outvotes_a_lying_master_delivers_from_a_backup_and_fences_it() {
        // n = 2, r = 3: rank 1 is slots 3 (master), 4, 5.
        let mut v = Verifier::new(Layout::new(2, 3), Mode::for_degree(3));
        assert!(data(&mut v, 3, 0, 7).is_empty());
        assert!(digest(&mut v, 3, 0, 7).is_empty());
        assert!(digest(&mut v, 4, 0, 1).is_empty(), "one vote each: the third decides");
        let out = digest(&mut v, 5, 0, 1);
        assert_eq!(
            out,
            vec![
                Output::DeliverFromBackup { key: key(0), slot: 4 },
                Output::Fence { slot: 3, key: key(0), cause: FenceCause::Digest(dg(7)) }
            ]
        );
        assert!(v.is_dead(3));
        assert_eq!(
            v.handle_input(T, Input::Digest { from: 3, mid: mid(1), digest: dg(7) }),
            Err(Rejected::Dead { slot: 3 })
        );
        // The next message's data still comes from the fenced master: two replicas now vote.
        assert!(data(&mut v, 3, 1, 8).is_empty());
        assert!(digest(&mut v, 4, 1, 2).is_empty());
        // Slot 4 is the master now (it keeps no backup): slot 5's copy is asked for.
        assert_eq!(digest(&mut v, 5, 1, 2), vec![Output::DeliverFromBackup { key: key(1), slot: 5 }]);
        assert_eq!(v.open_len(), 0);
    }

    #[test]
    fn vote_fences_a_master_whose_data_is_not_what_it_announced() {
        let mut v = Verifier::new(Layout::new(2, 3), vote(OnMismatch::Stop));
        for s in 3..6 {
            assert!(digest(&mut v, s, 0, 1).is_empty());
        }
        assert_eq!(
            data(&mut v, 3, 0, 9),
            vec![
                Output::DeliverFromBackup { key: key(0), slot: 4 },
                Output::Fence { slot: 3, key: key(0), cause: FenceCause::Data(dg(9)) }
            ]
        );
    }

    #[test]
    fn vote_judges_a_digest_that_comes_after_the_delivery() {
        let mut v = Verifier::new(Layout::new(2, 3), vote(OnMismatch::Stop));
        assert!(data(&mut v, 3, 0, 1).is_empty());
        assert!(digest(&mut v, 3, 0, 1).is_empty());
        assert_eq!(digest(&mut v, 4, 0, 1), vec![Output::Deliver { key: key(0) }], "a strict majority of 3");
        assert_eq!(v.open_len(), 1, "kept until slot 5 spoke");
        assert_eq!(
            digest(&mut v, 5, 0, 2),
            vec![Output::Fence { slot: 5, key: key(0), cause: FenceCause::Digest(dg(2)) }]
        );
        assert_eq!(v.open_len(), 0);
        assert_eq!(
            v.handle_input(T, Input::Data { from: 3, mid: mid(0), digest: dg(1) }),
            Err(Rejected::Closed { key: key(0) })
        );
    }

    #[test]
    fn with_fewer_than_two_alive_the_data_is_delivered_unverified() {
        let mut v = Verifier::new(Layout::new(2, 2), compare(OnMismatch::Stop));
        assert!(data(&mut v, 2, 0, 1).is_empty());
        assert!(digest(&mut v, 2, 0, 1).is_empty());
        assert_eq!(died(&mut v, 3), vec![Output::Unverified { key: key(0), alive: 1 }], "no longer waited for");
        // The survivor's own digest still checks its data.
        assert!(data(&mut v, 2, 1, 5).is_empty());
        let out = digest(&mut v, 2, 1, 6);
        assert!(matches!(&out[..], [Output::Mismatch { .. }]), "{out:?}");
        // Nobody alive: the data is all there is.
        assert!(died(&mut v, 2).is_empty());
        assert_eq!(data(&mut v, 2, 2, 1), vec![Output::Unverified { key: key(2), alive: 0 }]);
        assert_eq!(v.stats().unverified, 2);
    }

    #[test]
    fn a_death_can_leave_no_majority_possible() {
        let mut v = Verifier::new(Layout::new(2, 3), vote(OnMismatch::Stop));
        assert!(data(&mut v, 3, 0, 1).is_empty());
        assert!(digest(&mut v, 3, 0, 1).is_empty());
        assert!(digest(&mut v, 4, 0, 2).is_empty(), "slot 5 may still decide");
        let out = died(&mut v, 5);
        let [Output::Mismatch { report, .. }] = &out[..] else { panic!("{out:?}") };
        assert_eq!(report.announced, vec![(3, dg(1)), (4, dg(2))]);
        assert!(report.silent.is_empty());
        // A dissent whose replica dies no longer counts: the two left decide together.
        let mut v = Verifier::new(Layout::new(2, 3), vote(OnMismatch::Stop));
        assert!(data(&mut v, 3, 0, 1).is_empty());
        assert!(digest(&mut v, 3, 0, 1).is_empty());
        assert!(digest(&mut v, 4, 0, 2).is_empty());
        assert!(died(&mut v, 4).is_empty(), "1 of the 2 alive: slot 5 decides");
        assert_eq!(digest(&mut v, 5, 0, 1), vec![Output::Deliver { key: key(0) }]);
        assert_eq!(v.stats().fenced, 0, "a dead replica is not fenced");
    }

    #[test]
    fn malformed_or_replayed_words_are_refused_and_change_nothing() {
        let mut v = Verifier::new(Layout::new(2, 3), vote(OnMismatch::Stop));
        let bad = |v: &mut Verifier, i: Input| {
            let r = v.handle_input(T, i);
            assert!(v.drain_outputs().is_empty());
            r
        };
        assert_eq!(
            bad(&mut v, Input::Digest { from: 6, mid: mid(0), digest: dg(1) }),
            Err(Rejected::UnknownSlot { slot: 6 })
        );
        assert_eq!(
            bad(&mut v, Input::Data { from: 99, mid: mid(0), digest: dg(1) }),
            Err(Rejected::UnknownSlot { slot: 99 })
        );
        assert_eq!(bad(&mut v, Input::Died { slot: usize::MAX }), Err(Rejected::UnknownSlot { slot: usize::MAX }));
        assert!(digest(&mut v, 4, 0, 1).is_empty());
        assert_eq!(
            bad(&mut v, Input::Digest { from: 4, mid: mid(0), digest: dg(2) }),
            Err(Rejected::Duplicate { key: key(0), slot: 4 })
        );
        assert!(data(&mut v, 3, 0, 1).is_empty());
        assert_eq!(
            bad(&mut v, Input::Data { from: 4, mid: mid(0), digest: dg(1) }),
            Err(Rejected::Duplicate { key: key(0), slot: 4 })
        );
        assert_eq!(v.open_len(), 1);
        assert!(died(&mut v, 4).is_empty(), "its digest no longer counts: 1 of 2");
        assert_eq!(bad(&mut v, Input::Digest { from: 4, mid: mid(1), digest: dg(1) }), Err(Rejected::Dead { slot: 4 }));
        assert!(died(&mut v, 4).is_empty(), "a second notice is harmless");
        assert!(digest(&mut v, 3, 0, 1).is_empty());
        assert_eq!(digest(&mut v, 5, 0, 1), vec![Output::Deliver { key: key(0) }]);
        assert_eq!(
            bad(&mut v, Input::Digest { from: 3, mid: mid(0), digest: dg(1) }),
            Err(Rejected::Closed { key: key(0) })
        );
        assert_eq!((v.open_len(), v.judged_backlog()), (0, 0));
    }

    /// The model's view at a decision: who is alive, what each announced, the data.
    struct Model {
        r: usize,
        alive: Vec<bool>,
        announced: Vec<Option<u8>>,
        data: Option<(usize, u8)>,
    }

    impl Model {
        fn alive(&self) -> Vec<usize> {
            (0..self.r).filter(|&j| self.alive[j]).collect()
        }
        fn count(&self, d: u8) -> usize {
            self.alive().iter().filter(|&&j| self.announced[j] == Some(d)).count()
        }
        fn silent(&self) -> usize {
            self.alive().iter().filter(|&&j| self.announced[j].is_none()).count()
        }
    }

    /// Checks one decision of the verifier against the rules, stated on the model.
    fn check_decision(mode: Mode, m: &Model, out: &Output, base: usize) -> Option<u8> {
        let alive = m.alive();
        let v = |d: Digest| d.0[0];
        match out {
            Output::Deliver { .. } => {
                let (_, d) = m.data.expect("delivered without data");
                assert!(alive.len() >= 2);
                match mode.rule {
                    Rule::Compare => assert!(alive.iter().all(|&j| m.announced[j] == Some(d))),
                    Rule::Vote => assert!(m.count(d) > alive.len() / 2),
                }
                Some(d)
            }
            Output::DeliverFromBackup { slot, .. } => {
                assert_eq!(mode.rule, Rule::Vote);
                let j = slot - base;
                let c = m.announced[j].expect("a backup from a silent replica");
                let (sender, d) = m.data.expect("outvoted data");
                assert!(m.alive[j] && j != sender && d != c && m.count(c) > alive.len() / 2);
                Some(c)
            }
            Output::Unverified { alive: k, .. } => {
                assert_eq!(*k, alive.len());
                assert!(*k <= 1);
                let (_, d) = m.data.expect("unverified without data");
                if *k == 1 {
                    assert_eq!(m.announced[alive[0]], Some(d));
                }
                Some(d)
            }
            Output::Mismatch { report, then } => {
                assert_eq!(*then, mode.on_mismatch);
                assert!(*then == OnMismatch::Stop || m.data.is_some());
                let mut vals: Vec<u8> = report.announced.iter().map(|a| v(a.1)).collect();
                vals.extend(m.data.map(|d| d.1));
                match (alive.len(), mode.rule) {
                    (0, _) => panic!("a mismatch with nobody alive"),
                    (1, _) | (_, Rule::Compare) => assert!(vals.windows(2).any(|w| w[0] != w[1]), "{report}"),
                    (_, Rule::Vote) => {
                        let best = (0..=255).map(|d| m.count(d)).max().unwrap_or(0);
                        assert!(best + m.silent() <= alive.len() / 2, "{report}");
                    }
                }
                None
            }
            Output::Fence { .. } => unreachable!("fences are checked apart"),
        }
    }

    /// One message's inputs in a random order: the data from replica `sender`, each replica's
    /// digest (`values[j]`), and the deaths of `deaths`.
    fn inputs(r: usize, values: &[u8], sender: usize, data: u8, deaths: &[bool], order: &[u32]) -> Vec<Input> {
        let base = r; // rank 1's first slot
        let mut v: Vec<Input> =
            (0..r).map(|j| Input::Digest { from: base + j, mid: mid(0), digest: dg(values[j]) }).collect();
        v.push(Input::Data { from: base + sender, mid: mid(0), digest: dg(data) });
        v.extend((0..r).filter(|&j| deaths[j]).map(|j| Input::Died { slot: base + j }));
        let mut keyed: Vec<(u32, usize, Input)> = v.into_iter().enumerate().map(|(i, x)| (order[i], i, x)).collect();
        keyed.sort_by_key(|x| (x.0, x.1));
        keyed.into_iter().map(|x| x.2).collect()
    }

    proptest! {
        /// Whatever the replicas announce (from three values), whoever dies and in whatever
        /// order the words come, every decision follows the rules at the moment it is taken,
        /// a fence names a replica whose digest or data went against the delivered content,
        /// exactly one decision is taken, and nothing is left open.
        #[test]
        fn every_decision_follows_the_rules(
            r in 2..=5usize,
            vote_rule in any::<bool>(),
            stop in any::<bool>(),
            values in proptest::collection::vec(0..3u8, 5),
            sender in 0..5usize,
            data in 0..3u8,
            deaths in proptest::collection::vec(proptest::bool::weighted(0.3), 5),
            order in proptest::collection::vec(any::<u32>(), 11),
        ) {
            let sender = sender % r;
            let mode = Mode {
                rule: if vote_rule { Rule::Vote } else { Rule::Compare },
                on_mismatch: if stop { OnMismatch::Stop } else { OnMismatch::Report },
            };
            let mut v = Verifier::new(Layout::new(2, r), mode);
            let mut m = Model { r, alive: vec![true; r], announced: vec![None; r], data: None };
            let (mut decisions, mut content) = (0, None);
            for input in inputs(r, &values, sender, data, &deaths, &order) {
                let res = v.handle_input(T, input);
                match input {
                    Input::Digest { from, digest, .. } if m.alive[from - r] => {
                        prop_assert!(res.is_ok());
                        m.announced[from - r] = Some(digest.0[0]);
                    }
                    Input::Digest { from, .. } => prop_assert_eq!(res, Err(Rejected::Dead { slot: from })),
                    Input::Data { from, digest, .. } => {
                        // Refused only when a stop came before the data.
                        if res.is_err() {
                            prop_assert!(decisions == 1 && stop);
                        }
                        m.data = Some((from - r, digest.0[0]));
                    }
                    Input::Died { slot } => m.alive[slot - r] = false,
                }
                for out in v.drain_outputs() {
                    if let Output::Fence { slot, cause, .. } = out {
                        let j = slot - r;
                        prop_assert_eq!(mode.rule, Rule::Vote);
                        prop_assert!(m.alive[j]);
                        let c = content.expect("a fence follows a delivery");
                        match cause {
                            FenceCause::Digest(d) => prop_assert!(m.announced[j] == Some(d.0[0]) && d.0[0] != c),
                            FenceCause::Data(d) => prop_assert!(j == sender && d.0[0] == data && data != c),
                        }
                        m.alive[j] = false;
                    } else {
                        decisions += 1;
                        content = check_decision(mode, &m, &out, r);
                    }
                }
            }
            prop_assert_eq!(decisions, 1);
            prop_assert_eq!(v.open_len(), 0);
        }

        /// One faulty replica among r ≥ 3 that all stay alive, many messages on two channels
        /// in any order: every message gets the true content, the faulty one is fenced once,
        /// nothing is reported. At r = 2 the same faults stop every corrupted message.
        #[test]
        fn one_faulty_replica_is_outvoted_at_three_and_caught_at_two(
            r in 2..=5usize,
            faulty in 0..5usize,
            kind in 0..3u8,
            from in 0..6u64,
            order in proptest::collection::vec(any::<u32>(), 6 * 6),
        ) {
            let faulty = faulty % r;
            let mut v = Verifier::new(Layout::new(2, r), Mode::for_degree(r));
            let (seqs, base) = (6u64, r);
            // Message q of channel (tag 5 + q % 2) has true content q; from message `from` on,
            // the faulty replica corrupts: a lie (data and digest agree), or a flip of the
            // master's data after its digest (kind 1, faulty master only), or of a replica's digest.
            let corrupt = |q: u64| q >= from;
            let lie = |q: u64| q as u8 + 100;
            let mid_of = |q: u64| MsgId { comm: 0, src: 1, dst: 0, tag: 5 + (q % 2) as i32, seq: q / 2 };
            let mut all = Vec::new();
            for q in 0..seqs {
                for j in 0..r {
                    let d = if j == faulty && corrupt(q) && kind != 1 { lie(q) } else { q as u8 };
                    all.push(Input::Digest { from: base + j, mid: mid_of(q), digest: dg(d) });
                }
                let d = if faulty == 0 && corrupt(q) && kind != 2 { lie(q) } else { q as u8 };
                all.push(Input::Data { from: base, mid: mid_of(q), digest: dg(d) });
            }
            let mut keyed: Vec<(u32, usize, Input)> = all.into_iter().enumerate().map(|(i, x)| (order[i % order.len()], i, x)).collect();
            keyed.sort_by_key(|x| (x.0, x.1));
            // A flip of the master's data does nothing on another replica.
            let visible = !(faulty != 0 && kind == 1);
            let (mut fenced, mut mismatches, mut delivered) = (0, 0, 0);
            for (_, _, input) in keyed {
                match v.handle_input(T, input) {
                    Ok(()) => {}
                    Err(Rejected::Dead { slot }) => prop_assert_eq!(slot, base + faulty),
                    // At r = 2 a stop may come before the data, which then finds its message closed.
                    Err(Rejected::Closed { .. }) if r == 2 => {
                        let is_data = matches!(input, Input::Data { .. });
                        prop_assert!(is_data);
                    }
                    Err(e) => prop_assert!(false, "{:?}", e),
                }
                for out in v.drain_outputs() {
                    match out {
                        Output::Fence { slot, .. } => {
                            prop_assert_eq!(slot, base + faulty);
                            fenced += 1;
                        }
                        Output::Deliver { key } => {
                            let q = key.mid.seq * 2 + (key.mid.tag - 5) as u64;
                            prop_assert!(!(faulty == 0 && corrupt(q) && kind != 2), "corrupted data delivered as verified");
                            delivered += 1;
                        }
                        Output::DeliverFromBackup { slot, .. } => {
                            prop_assert!(slot != base + faulty && slot != base);
                            delivered += 1;
                        }
                        Output::Mismatch { .. } => mismatches += 1,
                        Output::Unverified { .. } => prop_assert!(false, "all alive"),
                    }
                }
            }
            if r >= 3 {
                prop_assert_eq!(delivered, seqs);
                prop_assert_eq!(mismatches, 0);
                prop_assert_eq!(fenced, usize::from(visible));
                prop_assert_eq!(v.open_len(), 0);
                prop_assert_eq!(v.judged_backlog(), 0);
            } else {
                let bad = if visible { (0..seqs).filter(|&q| corrupt(q)).count() as u64 } else { 0 };
                prop_assert_eq!(mismatches, bad);
                prop_assert_eq!(delivered, seqs - bad);
                prop_assert_eq!(fenced, 0);
            }
        }
    }
}
