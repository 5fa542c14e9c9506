//! Replicas that check each other (issue 42, item 4): the receiving side's
//! [`p2pmpi_core::replication::verify::Verifier`] (the very code a driver will run) fed in
//! random schedules where one replica may corrupt what it sends.
//!
//! One schedule: `n` ranks of `r` replicas; `m` messages between random pairs of distinct
//! ranks, on two tags, numbered per channel (the MID). Every replica of the sending rank
//! reaches each send at its own pace (replicas drift up to three messages apart) and
//! announces its digest to every replica of the destination rank; the data comes from the
//! sender's master — the lowest replica that reached the send alive (a successor resends when
//! the master died before it). Every word travels with its own random delay, so data and
//! digests arrive in any order at each receiving replica, which runs its own verifier.
//! Deaths (half of the schedules): up to three random replicas, never every replica of a rank,
//! die at random times; a dead replica sends nothing more (what it sent is still delivered)
//! and receives nothing; each living process hears of the death after its own detection delay.
//! A replica fenced by some verifier is declared dead to every process the same way (the
//! launcher's part), but keeps running: a liar does not stop lying when it is found out.
//!
//! The faults (one kind per schedule, in turn):
//! * **honest**: every replica computes right;
//! * **flip**: one bit flipped in one replica's outgoing copy of one random message — if that
//!   replica is the data's sender, the data is flipped after its digest was computed; if not,
//!   its backup copy is flipped and its digest is of the flipped copy;
//! * **liar**: a random replica (the master or not) lies consistently from a random message
//!   of its rank on (its data and digest agree with each other, not with the truth);
//! * **lying master**: the same, by replica 0 of its rank (the master while it lives).
//!
//! The modes: compare at r = 2; at r ≥ 3 vote three schedules in four, compare in the fourth;
//! on a mismatch stop (the job ends there) or report (and go on), one schedule in two each.
//!
//! Checked in every schedule (a violation names the schedule's seed):
//! * no receive completes with corrupted content unless a mismatch flagged it (report mode)
//!   or it was delivered unverified — and then every honest replica of its sender is dead in
//!   that verifier's view (fewer than two replicas left to compare);
//! * an honest run raises no alarm: no mismatch, no fence, no refused word but late ones from
//!   the dead;
//! * no honest replica is ever fenced;
//! * every message gets exactly one decision at every receiving replica that lives, and no
//!   verifier keeps an entry at the end (bounded memory);
//! * at r ≥ 3 under vote with nobody dying, a corrupted message never stops the job: every
//!   receive gets the true content and the faulty replica is fenced.

use crate::par;
use crate::rng::{derive_seed, Rng};
use p2pmpi_core::machine::Machine;
use p2pmpi_core::replication::verify::{Digest, Input, Key, Mode, OnMismatch, Output, Rejected, Rule, Verifier};
use p2pmpi_core::replication::{Layout, MsgId};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

/// What goes wrong in a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    Honest,
    Flip,
    Liar,
    LyingMaster,
}

/// The faults, in the order the schedules take them.
pub const FAULTS: [Fault; 4] = [Fault::Honest, Fault::Flip, Fault::Liar, Fault::LyingMaster];

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::Honest => "honest",
            Fault::Flip => "bit flip",
            Fault::Liar => "liar",
            Fault::LyingMaster => "lying master",
        }
    }
}

/// The (n, r) shapes the schedules cycle through.
pub const SHAPES: [(usize, usize); 8] = [(2, 2), (3, 2), (5, 2), (2, 3), (3, 3), (4, 3), (3, 4), (2, 5)];

/// One schedule's set-up.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub n: usize,
    pub r: usize,
    pub messages: usize,
    pub fault: Fault,
    pub mode: Mode,
    /// Whether replicas die at random.
    pub deaths: bool,
}

/// What one schedule did.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// The faulty replica sent at least one corrupted word (data or digest).
    pub corrupt_sent: bool,
    /// Some receiving replica got corrupted data.
    pub corrupt_data: bool,
    pub deaths: usize,
    pub verified: u64,
    pub from_backup: u64,
    pub unverified: u64,
    /// Corrupted content delivered unverified (every honest replica of its sender dead).
    pub unverified_corrupt: u64,
    pub mismatches: u64,
    /// Corrupted content delivered after a reported mismatch.
    pub flagged_corrupt: u64,
    /// A mismatch stopped the job.
    pub stopped: bool,
    pub fences: u64,
    pub fenced_faulty: bool,
    /// Words refused because their sender was known dead.
    pub late: u64,
    pub events: u64,
    pub violations: Vec<String>,
}

/// What a schedule's corruption came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// A mismatch stopped the job before the corrupted receive completed.
    Stopped,
    /// A mismatch was reported (the data delivered flagged).
    Reported,
    /// Corrupted content was delivered unverified: its sender's honest replicas had all died.
    Unverified,
    /// The vote delivered the true content everywhere and fenced the faulty replica.
    Corrected,
    /// Nothing corrupted reached a verdict: the corrupted words came from a replica already
    /// known dead, or went to receivers that died.
    Masked,
}

impl Outcome {
    /// What the corruption came to (`None`: nothing corrupted was sent).
    pub fn fate(&self) -> Option<Fate> {
        if !self.corrupt_sent {
            return None;
        }
        Some(if self.stopped {
            Fate::Stopped
        } else if self.mismatches > 0 {
            Fate::Reported
        } else if self.unverified_corrupt > 0 {
            Fate::Unverified
        } else if self.fences > 0 || self.from_backup > 0 {
            Fate::Corrected
        } else {
            Fate::Masked
        })
    }
}

/// A message of the schedule.
struct Msg {
    src: usize,
    mid: MsgId,
    truth: u64,
    /// The slot its data comes from, and when.
    sender: usize,
    send_at: u64,
}

/// A schedule's plan: the messages, when each replica reaches each send, who dies when, and
/// what the faulty replica does.
struct Plan {
    layout: Layout,
    msgs: Vec<Msg>,
    /// `reach[slot][i]`: when `slot` reaches message `i` (only its own rank's are used).
    reach: Vec<Vec<u64>>,
    death: Vec<u64>,
    fault: Fault,
    faulty: Option<usize>,
    /// The flipped message and bit, or the first message lied about.
    target: usize,
    bit: u32,
}

const NEVER: u64 = u64::MAX;
/// Time between two sends of the program, in ticks.
const STEP: u64 = 1000;

/// The digest of a content (injective: the first eight bytes are the content).
fn digest(c: u64) -> Digest {
    let mut d = [0u8; 32];
    d[..8].copy_from_slice(&c.to_le_bytes());
    d[8..16].copy_from_slice(&c.rotate_left(17).to_le_bytes());
    Digest(d)
}

fn lie(c: u64) -> u64 {
    c ^ 0x5a5a_0000_0000_00a5
}

impl Plan {
    fn new(cfg: &Config, rng: &mut Rng) -> Plan {
        let layout = Layout::new(cfg.n, cfg.r);
        let slots = layout.slots();
        let m = cfg.messages.max(1);
        let offset: Vec<u64> = (0..slots).map(|_| rng.below(3 * STEP)).collect();
        let reach: Vec<Vec<u64>> =
            (0..slots).map(|s| (0..m as u64).map(|i| i * STEP + offset[s] + rng.below(STEP / 2)).collect()).collect();
        let mut death = vec![NEVER; slots];
        let mut deaths = 0;
        if cfg.deaths && cfg.r > 1 {
            let want = 1 + rng.below(3) as usize;
            for _ in 0..20 {
                let s = rng.below(slots as u64) as usize;
                let rank = layout.rank_of(s);
                let alive = layout.slots_of(rank).filter(|&x| death[x] == NEVER).count();
                if death[s] == NEVER && alive > 1 {
                    death[s] = rng.below(m as u64 * STEP + 3 * STEP);
                    deaths += 1;
                    if deaths == want {
                        break;
                    }
                }
            }
        }
        let mut seqs: HashMap<(usize, usize, i32), u64> = HashMap::new();
        let mut msgs = Vec::with_capacity(m);
        // `i` numbers the message: it indexes each replica's row of `reach`, not one vector.
        #[allow(clippy::needless_range_loop)]
        for i in 0..m {
            let src = rng.below(cfg.n as u64) as usize;
            let dst = (src + 1 + rng.below(cfg.n as u64 - 1) as usize) % cfg.n;
            let tag = rng.below(2) as i32;
            let seq = seqs.entry((src, dst, tag)).or_insert(0);
            let mid = MsgId { comm: 0, src: src as u32, dst: dst as u32, tag, seq: *seq };
            *seq += 1;
            // The master: the lowest replica that reached the send alive; it sends once its
            // predecessors' deaths are known (a successor resends).
            let sender = layout.slots_of(src).find(|&s| reach[s][i] < death[s]).expect("a replica of every rank lives");
            let took_over = layout.slots_of(src).take_while(|&s| s != sender).map(|s| death[s] + 200).max();
            let send_at = reach[sender][i].max(took_over.unwrap_or(0));
            msgs.push(Msg { src, mid, truth: rng.next_u64(), sender, send_at });
        }
        let target = rng.below(m as u64) as usize;
        let faulty = match cfg.fault {
            Fault::Honest => None,
            Fault::Flip | Fault::Liar => Some(layout.slot(msgs[target].src, rng.below(cfg.r as u64) as usize)),
            Fault::LyingMaster => Some(layout.slot(msgs[target].src, 0)),
        };
        let bit = rng.below(64) as u32;
        Plan { layout, msgs, reach, death, fault: cfg.fault, faulty, target, bit }
    }

    /// What `slot` holds of message `i` (its outgoing copy) and the digest it announces.
    fn word(&self, i: usize, slot: usize) -> (u64, Digest) {
        let m = &self.msgs[i];
        let t = m.truth;
        if Some(slot) != self.faulty || self.layout.rank_of(slot) != m.src {
            return (t, digest(t));
        }
        match self.fault {
            Fault::Flip if i == self.target => {
                let c = t ^ (1 << self.bit);
                // The sender's digest was computed before the flip; a replica's is of its copy.
                (c, if slot == m.sender { digest(t) } else { digest(c) })
            }
            Fault::Liar | Fault::LyingMaster if i >= self.target => (lie(t), digest(lie(t))),
            _ => (t, digest(t)),
        }
    }

    fn reached(&self, slot: usize, i: usize) -> bool {
        self.reach[slot][i] < self.death[slot]
    }
}

/// An event of the schedule.
#[derive(Debug, Clone, Copy)]
enum Ev {
    Data { to: usize, msg: usize },
    Digest { to: usize, msg: usize, from: usize },
    Died { to: usize, slot: usize },
}

struct Run<'a> {
    plan: &'a Plan,
    cfg: Config,
    rng: Rng,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: Vec<Ev>,
    verifiers: Vec<Verifier>,
    /// The content each receiving slot got for each message (`slot * m + i`).
    received: Vec<Option<u64>>,
    decided: Vec<u8>,
    keys: HashMap<Key, usize>,
    /// Slots already declared dead everywhere after a fence.
    declared: Vec<bool>,
    out: Outcome,
}

impl Run<'_> {
    fn push(&mut self, at: u64, ev: Ev) {
        self.queue.push(Reverse((at, self.events.len() as u64)));
        self.events.push(ev);
    }

    fn delay(&mut self) -> u64 {
        1 + self.rng.below(2 * STEP)
    }

    fn notice(&mut self) -> u64 {
        100 + self.rng.below(4 * STEP)
    }

    /// Every word of the schedule on the queue.
    fn post(&mut self) {
        let plan = self.plan;
        let l = plan.layout;
        for (i, m) in plan.msgs.iter().enumerate() {
            for to in l.slots_of(m.mid.dst as usize) {
                let at = m.send_at + self.delay();
                self.push(at, Ev::Data { to, msg: i });
                for from in l.slots_of(m.src) {
                    if plan.reached(from, i) {
                        let at = plan.reach[from][i] + self.delay();
                        self.push(at, Ev::Digest { to, msg: i, from });
                    }
                }
            }
            for from in l.slots_of(m.src) {
                if plan.reached(from, i) && plan.word(i, from) != (m.truth, digest(m.truth)) {
                    self.out.corrupt_sent = true;
                }
            }
        }
        for slot in 0..l.slots() {
            if plan.death[slot] != NEVER {
                self.out.deaths += 1;
                for to in 0..l.slots() {
                    let at = plan.death[slot] + self.notice();
                    self.push(at, Ev::Died { to, slot });
                }
            }
        }
    }

    fn violation(&mut self, what: String) {
        if self.out.violations.len() < 5 {
            self.out.violations.push(what);
        }
    }

    /// Feeds one event; false once the job stopped.
    fn step(&mut self, at: u64, ev: Ev) -> bool {
        let plan = self.plan;
        let to = match ev {
            Ev::Data { to, .. } | Ev::Digest { to, .. } | Ev::Died { to, .. } => to,
        };
        if at >= plan.death[to] {
            return true;
        }
        self.out.events += 1;
        let now = Duration::from_micros(at);
        let m = plan.msgs.len();
        let input = match ev {
            Ev::Data { msg, .. } => {
                let (content, _) = plan.word(msg, plan.msgs[msg].sender);
                self.received[to * m + msg] = Some(content);
                if content != plan.msgs[msg].truth {
                    self.out.corrupt_data = true;
                }
                Input::Data { from: plan.msgs[msg].sender, mid: plan.msgs[msg].mid, digest: digest(content) }
            }
            Ev::Digest { msg, from, .. } => {
                Input::Digest { from, mid: plan.msgs[msg].mid, digest: plan.word(msg, from).1 }
            }
            Ev::Died { slot, .. } => Input::Died { slot },
        };
        match self.verifiers[to].handle_input(now, input) {
            Ok(()) => {}
            Err(Rejected::Dead { .. }) => self.out.late += 1,
            Err(e) => self.violation(format!("slot {to} refused {input:?}: {e:?}")),
        }
        while let Some(out) = self.verifiers[to].poll_output() {
            if !self.output(at, to, out) {
                return false;
            }
        }
        true
    }

    /// Checks one output of `to`'s verifier; false once the job stopped.
    fn output(&mut self, at: u64, to: usize, out: Output) -> bool {
        let plan = self.plan;
        let m = plan.msgs.len();
        let honest_run = plan.fault == Fault::Honest;
        let key = match &out {
            Output::Deliver { key }
            | Output::DeliverFromBackup { key, .. }
            | Output::Unverified { key, .. }
            | Output::Fence { key, .. } => *key,
            Output::Mismatch { report, .. } => report.key,
        };
        let Some(&i) = self.keys.get(&key) else {
            self.violation(format!("slot {to}: an output about an unknown message {key:?}"));
            return true;
        };
        let truth = plan.msgs[i].truth;
        let got = self.received[to * m + i];
        if !matches!(out, Output::Fence { .. }) {
            self.decided[to * m + i] += 1;
            if self.decided[to * m + i] > 1 {
                self.violation(format!("slot {to}: message {i} decided twice ({out:?})"));
            }
        }
        let corrupt_delivered = match out {
            Output::Deliver { .. } => {
                self.out.verified += 1;
                got != Some(truth)
            }
            Output::DeliverFromBackup { slot, .. } => {
                self.out.from_backup += 1;
                !plan.reached(slot, i) || plan.word(i, slot).0 != truth
            }
            Output::Unverified { .. } => {
                self.out.unverified += 1;
                if got != Some(truth) {
                    self.out.unverified_corrupt += 1;
                    let alive = self.verifiers[to].alive_slots(plan.msgs[i].src);
                    if alive.iter().any(|&s| Some(s) != plan.faulty) {
                        self.violation(format!("slot {to}: message {i} delivered unverified and corrupted while honest replicas {alive:?} live"));
                    }
                }
                false
            }
            Output::Fence { slot, .. } => {
                self.out.fences += 1;
                if Some(slot) == plan.faulty {
                    self.out.fenced_faulty = true;
                } else {
                    self.violation(format!("slot {to}: honest slot {slot} fenced on message {i}"));
                }
                if !self.declared[slot] {
                    self.declared[slot] = true;
                    for other in 0..plan.layout.slots() {
                        let t = at + self.notice();
                        self.push(t, Ev::Died { to: other, slot });
                    }
                }
                false
            }
            Output::Mismatch { ref report, then } => {
                self.out.mismatches += 1;
                if honest_run {
                    self.violation(format!("slot {to}: an alarm in an honest run: {report}"));
                }
                if then == OnMismatch::Stop {
                    self.out.stopped = true;
                    return false;
                }
                if got != Some(truth) {
                    self.out.flagged_corrupt += 1;
                }
                false
            }
        };
        if corrupt_delivered {
            self.violation(format!("slot {to}: message {i} completed with corrupted content, unnoticed ({out:?})"));
        }
        true
    }

    /// The checks at the end of a schedule that ran to its end.
    fn finish(&mut self) {
        let plan = self.plan;
        let m = plan.msgs.len();
        for to in 0..plan.layout.slots() {
            if plan.death[to] != NEVER {
                continue;
            }
            for (i, msg) in plan.msgs.iter().enumerate() {
                if msg.mid.dst as usize == plan.layout.rank_of(to) && self.decided[to * m + i] != 1 {
                    self.violation(format!("slot {to}: message {i} decided {} times", self.decided[to * m + i]));
                }
            }
            let v = &self.verifiers[to];
            if v.open_len() != 0 || v.judged_backlog() != 0 {
                let (open, backlog) = (v.open_len(), v.judged_backlog());
                self.violation(format!("slot {to}: {open} entries left open, {backlog} judged out of order"));
            }
        }
        let all_alive_vote = self.cfg.r >= 3 && self.cfg.mode.rule == Rule::Vote && !self.cfg.deaths;
        if all_alive_vote && self.out.corrupt_sent {
            if self.out.mismatches > 0 || self.out.unverified > 0 {
                self.violation("r ≥ 3, all alive: the vote did not correct every message".to_string());
            }
            if !self.out.fenced_faulty {
                self.violation("r ≥ 3, all alive: the faulty replica was not fenced".to_string());
            }
        }
    }
}

/// Runs one schedule.
pub fn run(seed: u64, cfg: Config) -> Outcome {
    let mut rng = Rng::new(seed);
    let plan = Plan::new(&cfg, &mut rng);
    let slots = plan.layout.slots();
    let m = plan.msgs.len();
    let keys = plan.msgs.iter().enumerate().map(|(i, x)| (Key { rank: x.src, mid: x.mid }, i)).collect();
    let mut run = Run {
        plan: &plan,
        cfg,
        rng,
        queue: BinaryHeap::new(),
        events: Vec::new(),
        verifiers: (0..slots).map(|_| Verifier::new(plan.layout, cfg.mode)).collect(),
        received: vec![None; slots * m],
        decided: vec![0; slots * m],
        keys,
        declared: vec![false; slots],
        out: Outcome::default(),
    };
    run.post();
    let mut stopped = false;
    while let Some(Reverse((at, id))) = run.queue.pop() {
        let ev = run.events[id as usize];
        if !run.step(at, ev) {
            stopped = true;
            break;
        }
    }
    if !stopped {
        run.finish();
    }
    if plan.fault != Fault::Honest && run.out.corrupt_sent && !run.out.violations.is_empty() {
        let who = plan.faulty.map_or(String::new(), |s| format!(" (faulty slot {s}, target {})", plan.target));
        run.out.violations.push(format!("fault {}{who}", plan.fault.name()));
    }
    run.out
}

/// The set-up of schedule `i`: the fault in turn, the shape in turn (unless given), the mode,
/// the reaction to a mismatch and the deaths drawn from its seed.
pub fn config(i: u64, seed: u64, shape: Option<(usize, usize)>, messages: usize) -> Config {
    let mut rng = Rng::new(derive_seed(seed, &[0x7e41, i]));
    let fault = FAULTS[(i % 4) as usize];
    let (n, r) = shape.unwrap_or(SHAPES[((i / 4) % SHAPES.len() as u64) as usize]);
    let rule = if r >= 3 && rng.below(4) != 0 { Rule::Vote } else { Rule::Compare };
    let on_mismatch = if rng.below(2) == 0 { OnMismatch::Stop } else { OnMismatch::Report };
    Config { n, r, messages, fault, mode: Mode { rule, on_mismatch }, deaths: rng.below(2) == 0 }
}

/// Counts over many schedules.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub schedules: u64,
    /// Per fault (in [`FAULTS`] order): schedules, corrupted sent, and each [`Fate`].
    pub by_fault: [FaultTotals; 4],
    /// Per r (index r − 2, up to r = 5): schedules, corrupted sent.
    pub by_r: [(u64, u64); 4],
    pub verified: u64,
    pub from_backup: u64,
    pub unverified: u64,
    pub unverified_corrupt: u64,
    pub flagged_corrupt: u64,
    pub mismatches: u64,
    pub fences: u64,
    /// Honest schedules that raised an alarm (mismatch or fence).
    pub honest_alarms: u64,
    /// r ≥ 3, vote, nobody dying, a corruption sent: and of those, corrected.
    pub vote_all_alive: (u64, u64),
    pub events: u64,
    /// Schedules with a violation: (seed index, set-up, what).
    pub failures: Vec<(u64, Config, Vec<String>)>,
    pub violations: u64,
}

/// One fault's counts.
#[derive(Debug, Default, Clone, Copy)]
pub struct FaultTotals {
    pub schedules: u64,
    pub corrupt_sent: u64,
    pub corrupt_data: u64,
    pub stopped: u64,
    pub reported: u64,
    pub unverified: u64,
    pub corrected: u64,
    pub masked: u64,
}

impl Totals {
    fn add(&mut self, i: u64, cfg: Config, o: Outcome) {
        self.schedules += 1;
        let f = &mut self.by_fault[FAULTS.iter().position(|&x| x == cfg.fault).unwrap_or(0)];
        f.schedules += 1;
        f.corrupt_sent += u64::from(o.corrupt_sent);
        f.corrupt_data += u64::from(o.corrupt_data);
        match o.fate() {
            Some(Fate::Stopped) => f.stopped += 1,
            Some(Fate::Reported) => f.reported += 1,
            Some(Fate::Unverified) => f.unverified += 1,
            Some(Fate::Corrected) => f.corrected += 1,
            Some(Fate::Masked) => f.masked += 1,
            None => {}
        }
        if let Some(x) = self.by_r.get_mut(cfg.r.saturating_sub(2)) {
            x.0 += 1;
            x.1 += u64::from(o.corrupt_sent);
        }
        self.verified += o.verified;
        self.from_backup += o.from_backup;
        self.unverified += o.unverified;
        self.unverified_corrupt += o.unverified_corrupt;
        self.flagged_corrupt += o.flagged_corrupt;
        self.mismatches += o.mismatches;
        self.fences += o.fences;
        self.events += o.events;
        if cfg.fault == Fault::Honest && (o.mismatches > 0 || o.fences > 0) {
            self.honest_alarms += 1;
        }
        if cfg.r >= 3 && cfg.mode.rule == Rule::Vote && !cfg.deaths && o.corrupt_sent {
            self.vote_all_alive.0 += 1;
            self.vote_all_alive.1 += u64::from(o.fate() == Some(Fate::Corrected) && o.violations.is_empty());
        }
        if !o.violations.is_empty() {
            self.violations += 1;
            if self.failures.len() < 10 {
                self.failures.push((i, cfg, o.violations));
            }
        }
    }

    /// Schedules in which a corrupted word was sent.
    pub fn corrupted(&self) -> u64 {
        self.by_fault.iter().map(|f| f.corrupt_sent).sum()
    }
}

/// Runs schedules from index 0 until `corrupted` of them sent a corrupted word (the honest
/// ones in between are run and counted too), on `threads` threads; the counts do not depend
/// on the number of threads.
pub fn run_until(seed: u64, corrupted: u64, shape: Option<(usize, usize)>, messages: usize, threads: usize) -> Totals {
    let mut t = Totals::default();
    let mut next = 0u64;
    const BATCH: u64 = 4096;
    while t.corrupted() < corrupted {
        let results = par::par_map(BATCH as usize, threads, |j| {
            let i = next + j as u64;
            let cfg = config(i, seed, shape, messages);
            (i, cfg, run(derive_seed(seed, &[0x7e42, i]), cfg))
        });
        for (i, cfg, o) in results {
            if t.corrupted() >= corrupted {
                break;
            }
            t.add(i, cfg, o);
        }
        next += BATCH;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_corrupt_what_they_say() {
        let mut rng = Rng::new(3);
        let cfg =
            Config { n: 3, r: 3, messages: 20, fault: Fault::LyingMaster, mode: Mode::for_degree(3), deaths: false };
        let plan = Plan::new(&cfg, &mut rng);
        let f = plan.faulty.expect("a liar");
        assert_eq!(plan.layout.replica_of(f), 0);
        for (i, m) in plan.msgs.iter().enumerate() {
            let (c, d) = plan.word(i, f);
            let lies = m.src == plan.layout.rank_of(f) && i >= plan.target;
            assert_eq!(c != m.truth, lies);
            assert_eq!(d, digest(c), "a liar's data and digest agree");
            assert_eq!(m.sender, plan.layout.slot(m.src, 0), "nobody dies: replica 0 sends");
        }
        let cfg = Config { fault: Fault::Flip, ..cfg };
        let plan = Plan::new(&cfg, &mut Rng::new(4));
        let f = plan.faulty.expect("a flipper");
        let t = plan.target;
        let (c, d) = plan.word(t, f);
        assert_eq!((c ^ plan.msgs[t].truth).count_ones(), 1);
        assert_eq!(d == digest(plan.msgs[t].truth), f == plan.msgs[t].sender);
        assert!((0..plan.msgs.len()).filter(|&i| i != t).all(|i| plan.word(i, f).0 == plan.msgs[i].truth));
    }
}
