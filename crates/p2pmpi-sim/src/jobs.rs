//! Whole jobs under failures, through the launcher's own supervisor
//! ([`p2pmpi_core::supervisor::JobSupervisor`]).
//!
//! A job of `n` ranks with `r` replicas runs in virtual time: its processes register, renew
//! their leases every quarter lease, work, finalize and exit; a failure detector stands in for
//! the real one (some live process reports a silent or dead process `suspicion` after it went
//! silent); the launcher's side is the very supervisor the launchers drive, fed the same inputs
//! (registrations, ends, suspicions, agreement contributions, spawn requests, the passing of
//! time), and its outputs are carried out as a launcher would (a process told it was excluded,
//! or that it is dead, leaves; a stop kills every process; a spawn is performed). Each
//! [`Scenario`] injects one kind of failure at random times drawn from the seed, and
//! [`check`] says whether the job ended as it must: which slots were declared dead, whether
//! the job was stopped, its verdict, and for agreements and spawns what every survivor got.

use crate::rng::{derive_seed, Rng};
use p2pmpi_core::agreement::{Decision, Key};
use p2pmpi_core::fencing::Grant;
use p2pmpi_core::machine::Machine;
use p2pmpi_core::replication::Layout;
use p2pmpi_core::supervisor::{Exit, Input, JobSupervisor, Output, Start, ToProcess};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::Duration;

/// The failure a job meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// None: every process finalizes and exits.
    Clean,
    /// A rank's master (its replica 0) is killed while the job runs.
    KillMaster,
    /// A replica that is not its rank's master is killed.
    KillReplica,
    /// Every replica of a rank is killed: the job must stop.
    LoseRank,
    /// A replica freezes (SIGSTOP) past detection, and resumes after it was declared dead.
    Freeze,
    /// A fault-aware program (every process tolerant, no replicas) agrees while a rank dies.
    Agreement,
    /// Every replica of rank 0 asks for the same spawn, its master may be killed meanwhile.
    Spawn,
}

impl Scenario {
    pub const ALL: [Scenario; 7] = [
        Scenario::Clean,
        Scenario::KillMaster,
        Scenario::KillReplica,
        Scenario::LoseRank,
        Scenario::Freeze,
        Scenario::Agreement,
        Scenario::Spawn,
    ];

    /// The replicas the scenario's job runs with.
    fn replicas(self) -> usize {
        match self {
            Scenario::Agreement => 1,
            Scenario::Spawn | Scenario::KillMaster | Scenario::KillReplica | Scenario::LoseRank => 2,
            Scenario::Clean | Scenario::Freeze => 3,
        }
    }
}

/// One job's run.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub scenario: Scenario,
    /// Ranks.
    pub n: usize,
    pub seed: u64,
}

/// The lease length (the detector's suspicion time, as `fencing::lease_length` gives it).
const LEASE: Duration = Duration::from_secs(1);
/// How long the processes work before they finalize (plus up to half a second each).
const WORK: Duration = Duration::from_secs(8);
/// The agreement's key.
const AGREEMENT: Key = Key { comm: 1, seq: 0 };

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// How a job ended.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The job's exit status (`None`: the supervisor never ended it).
    pub verdict: Option<i32>,
    /// When it ended.
    pub ended_at: Duration,
    /// The slots declared dead, in order.
    pub declared: Vec<usize>,
    /// How many times every process was stopped.
    pub stops: usize,
    /// The lines reported.
    pub said: Vec<String>,
    /// The slots killed or frozen by the scenario.
    pub victims: Vec<usize>,
    /// The slots told that they were excluded.
    pub excluded: BTreeSet<usize>,
    /// The agreement's decision each slot received (and how many times).
    pub agreed: BTreeMap<usize, (Decision, usize)>,
    /// The slots that contributed to the agreement, and whether the victim did before dying.
    pub contributed: BTreeSet<usize>,
    /// The spawns performed, and the answer each slot got.
    pub performed: usize,
    pub spawned: BTreeMap<usize, Result<u32, String>>,
    /// The slots that asked for the spawn while they ran.
    pub asked: BTreeSet<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Frozen,
    /// Ended (killed, stopped, left, or finished).
    Gone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Register(usize),
    Renew(usize),
    Finish(usize),
    Kill(usize),
    Freeze(usize),
    Resume(usize),
    /// The detector of some live process reports `slot` (silent since the event's cause).
    Detect(usize),
    Agree(usize),
    AskSpawn(usize),
    /// A stop reaches `slot` (SIGTERM, SIGKILL a second later: it ends).
    Stopped(usize),
    /// The supervisor's timer.
    Timer,
}

struct JobSim {
    cfg: Config,
    layout: Layout,
    rng: Rng,
    now: Duration,
    queue: BinaryHeap<Reverse<(Duration, u64, Ev)>>,
    seq: u64,
    sup: JobSupervisor,
    state: Vec<State>,
    out: Outcome,
}

impl JobSim {
    fn new(cfg: Config) -> JobSim {
        let layout = Layout::new(cfg.n, cfg.scenario.replicas());
        let slots = layout.slots();
        JobSim {
            cfg,
            layout,
            rng: Rng::new(derive_seed(cfg.seed, &[cfg.scenario as u64, cfg.n as u64])),
            now: Duration::ZERO,
            queue: BinaryHeap::new(),
            seq: 0,
            sup: JobSupervisor::new(layout, LEASE),
            state: vec![State::Running; slots],
            out: Outcome::default(),
        }
    }

    fn at(&mut self, t: Duration, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((t, self.seq, ev)));
    }

    /// A random time in `[from, from + span)` milliseconds.
    fn within(&mut self, from: u64, span: u64) -> Duration {
        ms(from + self.rng.below(span))
    }

    fn feed(&mut self, input: Input) {
        let _ = self.sup.handle_input(self.now, input);
        self.carry_out();
    }

    /// Carries out the supervisor's outputs as a launcher does, and re-arms its timer.
    fn carry_out(&mut self) {
        while let Some(o) = self.sup.poll_output() {
            match o {
                Output::Say(line) => self.out.said.push(line),
                Output::Declared { slot } => self.out.declared.push(slot),
                Output::Send { slot, msg } => self.deliver(slot, msg),
                Output::Broadcast(ToProcess::Dead { slots }) => {
                    // A process that learns that it is declared dead leaves.
                    for s in slots {
                        self.leave(s as usize);
                    }
                }
                Output::Spawn { slot, number } => {
                    self.out.performed += 1;
                    let outcome = Ok(1000 + self.out.performed as u32);
                    let _ = self.sup.handle_input(self.now, Input::Spawned { slot, number, outcome });
                }
                Output::StopAll => {
                    self.out.stops += 1;
                    for s in 0..self.state.len() {
                        if self.state[s] != State::Gone {
                            let t = self.now + self.within(1, 20);
                            self.at(t, Ev::Stopped(s));
                        }
                    }
                }
                Output::Finished(code) => {
                    self.out.verdict = Some(code);
                    self.out.ended_at = self.now;
                }
                Output::Note { .. }
                | Output::World { .. }
                | Output::Broadcast(_)
                | Output::RelayDead { .. }
                | Output::RelaySuspect { .. } => {}
            }
        }
        if let Some(t) = self.sup.poll_timeout() {
            self.at(t.max(self.now), Ev::Timer);
        }
    }

    fn deliver(&mut self, slot: usize, msg: ToProcess) {
        if self.state[slot] != State::Running {
            return;
        }
        match msg {
            ToProcess::Excluded { .. } => {
                self.out.excluded.insert(slot);
                self.leave(slot);
            }
            ToProcess::Agreed { decision, .. } => {
                let e = self.out.agreed.entry(slot).or_insert((decision.clone(), 0));
                e.1 += 1;
                assert_eq!(e.0, decision, "two decisions for slot {slot}");
            }
            ToProcess::Spawned(a) => {
                self.out.spawned.insert(slot, a);
            }
            ToProcess::Dead { .. } | ToProcess::AgreeRefused { .. } | ToProcess::Revoked { .. } => {}
        }
    }

    /// A running process learned that it was excluded: it says so and exits quietly.
    fn leave(&mut self, slot: usize) {
        if self.state[slot] != State::Running {
            return;
        }
        self.state[slot] = State::Gone;
        let _ = self.sup.handle_input(self.now, Input::Heard { slot });
        let _ = self.sup.handle_input(self.now, Input::ControlClosed { slot });
        let _ = self.sup.handle_input(self.now, Input::Exited { slot, exit: Exit::success() });
    }

    /// Some live process (not `slot`) reports `slot` failed.
    fn detect(&mut self, slot: usize) {
        let live: Vec<usize> =
            (0..self.state.len()).filter(|&s| s != slot && self.state[s] == State::Running).collect();
        if live.is_empty() {
            return;
        }
        let by = live[self.rng.below(live.len() as u64) as usize];
        let detail = format!("{} failed: no heartbeat", p2pmpi_core::supervisor::who(self.layout, slot));
        self.feed(Input::PeerFailed { by, failed: slot, detail });
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Register(s) if self.state[s] == State::Running => {
                let tolerant = self.cfg.scenario == Scenario::Agreement;
                self.feed(Input::Registered {
                    slot: s,
                    addr: format!("10.0.0.{s}:1"),
                    fd_addr: String::new(),
                    tolerant,
                    pid: 0,
                });
                self.at(self.now, Ev::Renew(s));
            }
            Ev::Renew(s) if self.state[s] == State::Running => {
                if self.sup.renew(self.now, s) == Grant::Excluded {
                    self.out.excluded.insert(s);
                    self.leave(s);
                    self.carry_out();
                } else {
                    self.at(self.now + LEASE / 4, Ev::Renew(s));
                }
            }
            Ev::Finish(s) if self.state[s] == State::Running => {
                self.state[s] = State::Gone;
                self.feed(Input::Finalized { slot: s });
                self.feed(Input::ControlClosed { slot: s });
                self.feed(Input::Exited { slot: s, exit: Exit::success() });
            }
            Ev::Kill(s) if self.state[s] == State::Running => {
                self.state[s] = State::Gone;
                self.feed(Input::ControlClosed { slot: s });
                self.feed(Input::Exited { slot: s, exit: Exit::signal(9, "SIGKILL") });
                // Its peers' detectors notice it too.
                let t = self.now + LEASE + self.within(0, 300);
                self.at(t, Ev::Detect(s));
            }
            Ev::Freeze(s) if self.state[s] == State::Running => {
                self.state[s] = State::Frozen;
                let t = self.now + LEASE + self.within(0, 300);
                self.at(t, Ev::Detect(s));
            }
            Ev::Resume(s) if self.state[s] == State::Frozen => {
                // Its lease ran out: it asks again first, and so learns its fate.
                self.state[s] = State::Running;
                self.at(self.now, Ev::Renew(s));
            }
            Ev::Detect(s) if self.state[s] != State::Running || self.cfg.scenario == Scenario::Freeze => self.detect(s),
            Ev::Agree(s) if self.state[s] == State::Running => {
                self.out.contributed.insert(s);
                let members = (0..self.cfg.n as u32).collect();
                self.feed(Input::Agree { slot: s, key: AGREEMENT, members, flag: 1 });
            }
            Ev::AskSpawn(s) if self.state[s] == State::Running => {
                self.out.asked.insert(s);
                self.feed(Input::Spawn { slot: s });
            }
            Ev::Stopped(s) if self.state[s] != State::Gone => {
                self.state[s] = State::Gone;
                self.feed(Input::ControlClosed { slot: s });
                self.feed(Input::Exited { slot: s, exit: Exit::signal(15, "SIGTERM") });
            }
            Ev::Timer => {
                self.sup.handle_timeout(self.now);
                self.carry_out();
            }
            _ => {}
        }
    }

    /// The scenario's failures, at random times while the job works.
    fn inject(&mut self) {
        let (n, r) = (self.cfg.n, self.layout.r);
        let rank = self.rng.below(n as u64) as usize;
        // A frozen replica resumes (2.5 to 3.5 leases later) before the others finish.
        let t = if self.cfg.scenario == Scenario::Freeze { self.within(1000, 3000) } else { self.within(1000, 4000) };
        let victims: Vec<usize> = match self.cfg.scenario {
            Scenario::Clean => vec![],
            Scenario::KillMaster => vec![self.layout.slot(rank, 0)],
            Scenario::KillReplica => vec![self.layout.slot(rank, 1 + self.rng.below(r as u64 - 1) as usize)],
            Scenario::LoseRank => self.layout.slots_of(rank).collect(),
            Scenario::Freeze => vec![self.layout.slot(rank, self.rng.below(r as u64) as usize)],
            Scenario::Agreement => vec![rank],
            Scenario::Spawn => {
                if self.rng.bernoulli(0.5) {
                    vec![0]
                } else {
                    vec![]
                }
            }
        };
        for (i, &v) in victims.iter().enumerate() {
            match self.cfg.scenario {
                Scenario::Freeze => {
                    self.at(t, Ev::Freeze(v));
                    let back = t + 2 * LEASE + self.within(500, 1500);
                    self.at(back, Ev::Resume(v));
                }
                _ => {
                    let tk = t + ms(37 * i as u64);
                    self.at(tk, Ev::Kill(v));
                }
            }
        }
        self.out.victims = victims;
        match self.cfg.scenario {
            Scenario::Agreement => {
                for s in 0..self.layout.slots() {
                    let ta = self.within(1000, 4000);
                    self.at(ta, Ev::Agree(s));
                }
            }
            Scenario::Spawn => {
                for s in self.layout.slots_of(0) {
                    let ta = self.within(1000, 4000);
                    self.at(ta, Ev::AskSpawn(s));
                }
            }
            _ => {}
        }
    }

    fn run(mut self) -> Outcome {
        let slots = self.layout.slots();
        let start = Start { pids: vec![0; slots], startup_timeout: Duration::from_secs(10), ..Default::default() };
        self.feed(Input::Start(start));
        for s in 0..slots {
            let t = self.within(0, 50);
            self.at(t, Ev::Register(s));
            let end = WORK + self.within(0, 500);
            self.at(end, Ev::Finish(s));
        }
        self.inject();
        let horizon = Duration::from_secs(60);
        let mut events = 0u64;
        while let Some(Reverse((t, _, ev))) = self.queue.pop() {
            events += 1;
            if self.out.verdict.is_some() || t > horizon || events > 1_000_000 {
                break;
            }
            self.now = t;
            self.handle(ev);
        }
        self.out
    }
}

/// Runs one job.
pub fn run(cfg: Config) -> Outcome {
    JobSim::new(cfg).run()
}

/// Whether a job ended as its scenario requires; the reason if not.
pub fn check(cfg: Config, o: &Outcome) -> Result<(), String> {
    let layout = Layout::new(cfg.n, cfg.scenario.replicas());
    let fail = |why: String| Err(format!("{:?} n={} seed {}: {why}\n{:#?}", cfg.scenario, cfg.n, cfg.seed, o));
    let Some(verdict) = o.verdict else { return fail("the job never ended".into()) };
    let declared: BTreeSet<usize> = o.declared.iter().copied().collect();
    if declared.len() != o.declared.len() {
        return fail("a slot was declared twice".into());
    }
    let victims: BTreeSet<usize> = o.victims.iter().copied().collect();
    let expect_verdict = if cfg.scenario == Scenario::LoseRank { 1 } else { 0 };
    if verdict != expect_verdict {
        return fail(format!("verdict {verdict}, want {expect_verdict}"));
    }
    match cfg.scenario {
        Scenario::LoseRank => {
            if !victims.is_subset(&declared) {
                return fail("not every replica of the lost rank was declared".into());
            }
            if o.stops == 0 || !o.said.iter().any(|l| l.contains("failed; stopping the other processes")) {
                return fail("the job was not stopped on the lost rank".into());
            }
        }
        Scenario::Agreement => {
            // No replicas: nothing to declare; every survivor got the same decision, once.
            let v = o.victims[0];
            let survivors: Vec<usize> = (0..layout.slots()).filter(|&s| s != v).collect();
            let first = o.agreed.get(&survivors[0]).map(|d| d.0.clone());
            for s in &survivors {
                match o.agreed.get(s) {
                    Some((d, 1)) if Some(d) == first.as_ref() => {
                        if !d.failed.iter().all(|&f| f as usize == v) {
                            return fail(format!("decision names another failure: {d:?}"));
                        }
                        if !o.contributed.contains(&v) && d.failed != [v as u32] {
                            return fail(format!("the rank that died before contributing is not failed: {d:?}"));
                        }
                    }
                    other => return fail(format!("survivor {s} got {other:?}")),
                }
            }
            if o.stops != 0 {
                return fail("a fault-aware job was stopped".into());
            }
        }
        Scenario::Spawn => {
            if o.performed != 1 {
                return fail(format!("{} spawns performed for one request", o.performed));
            }
            let answers: BTreeSet<_> = o.spawned.values().cloned().collect();
            if answers.len() != 1 {
                return fail(format!("the replicas got different answers: {answers:?}"));
            }
            // A replica that asked and stayed alive got its answer.
            for s in &o.asked {
                if !victims.contains(s) && !o.spawned.contains_key(s) {
                    return fail(format!("slot {s} asked and got no answer"));
                }
            }
            if declared != victims {
                return fail(format!("declared {declared:?}, killed {victims:?}"));
            }
        }
        Scenario::Freeze => {
            if declared != victims {
                return fail(format!("declared {declared:?}, frozen {victims:?}"));
            }
            let v = o.victims[0];
            if !o.excluded.contains(&v) {
                return fail("the resumed replica was not told it was excluded".into());
            }
            let who = p2pmpi_core::supervisor::who(layout, v);
            if !o.said.iter().any(|l| {
                l.starts_with(&format!("{who} was declared dead at")) && l.ends_with("it resumed and was stopped")
            }) {
                return fail("its resumption was not reported".into());
            }
            if !o.said.iter().any(|l| l.starts_with(&format!("{who} failed: no heartbeat (detected by "))) {
                return fail("its declaration does not name the detector".into());
            }
        }
        Scenario::Clean | Scenario::KillMaster | Scenario::KillReplica => {
            if declared != victims {
                return fail(format!("declared {declared:?}, killed {victims:?}"));
            }
            if o.stops != 0 {
                return fail("the job was stopped".into());
            }
            for &v in &victims {
                let line = format!(
                    "{} (pid 0) was killed by signal 9 (SIGKILL); rank {} goes on with",
                    p2pmpi_core::supervisor::who(layout, v),
                    layout.rank_of(v)
                );
                if !o.said.iter().any(|l| l.starts_with(&line)) {
                    return fail(format!("no report '{line}'"));
                }
            }
        }
    }
    Ok(())
}

/// Runs `schedules` seeded jobs of every scenario (seeds derived from `seed`); returns the
/// failed checks.
pub fn run_many(seed: u64, schedules: u64) -> Vec<String> {
    let mut failures = Vec::new();
    for scenario in Scenario::ALL {
        for k in 0..schedules {
            let cfg = Config { scenario, n: 2 + (k % 3) as usize, seed: derive_seed(seed, &[k]) };
            if let Err(e) = check(cfg, &run(cfg)) {
                failures.push(e);
            }
        }
    }
    failures
}
