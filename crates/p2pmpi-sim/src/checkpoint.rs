//! Jobs with checkpoints under Weibull host failures (issue 41): the probability that a job
//! finishes and its expected run time, with replication only, with rebirth at checkpoints, and
//! with rebirth and restarts, driving the very [`p2pmpi_core::checkpoint::Coordinator`] the
//! launcher drives.
//!
//! # The grid and the job
//!
//! A grid of `G = p·r + spare` hosts, each one storage peer (its MPD) and at most one process.
//! Each host fails after a Weibull time of shape `δ` and mean `M` (scale `M/Γ(1 + 1/δ)`),
//! drawn when it joins; a failed host is replaced by a new one (the grid keeps its size: a
//! peer-to-peer grid where machines come and go), which may then take copies and reborn
//! replicas. Processes start on hosts `0..p·r`, rank `i`'s replicas on `i·r..(i+1)·r`.
//!
//! The job needs `W` seconds of work. Every `τ` seconds of work (none in the replication-only
//! mode) every rank saves its piece and the job stops for the checkpoint's cost `C`: each copy
//! the coordinator asks for is stored `C` after it was asked (re-replications too). A failed
//! host's peer goes down first (its copies are gone), then its process dies. The coordinator's
//! decisions are carried out: a rebirth takes a free host (not one of `avoid`) and catches up
//! `catch_up` seconds later (it fetched the checkpoint and replayed); a restart stops every
//! process, starts `p·r` new ones on free hosts at once, and the job computes again from the
//! generation's work after `R` seconds; a failure ends the trial.
//!
//! Every trial has its own seed; trials run on all cores and the results do not depend on
//! their number.

use crate::par::par_map;
use crate::rng::{derive_seed, Rng};
use p2pmpi_core::advisor::checkpoints::gamma;
use p2pmpi_core::checkpoint::{Config, Coordinator, Input, Output};
use p2pmpi_core::machine::Machine;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};
use std::time::Duration;

/// How the job survives failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Replicas only: no checkpoint; a rank losing every replica ends the job.
    Replication,
    /// Checkpoints, replicas reborn at each; no restart.
    Rebirth,
    /// Checkpoints, rebirth, and restarts from the last complete one.
    Restart,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Replication, Mode::Rebirth, Mode::Restart];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Replication => "replication only",
            Mode::Rebirth => "rebirth",
            Mode::Restart => "rebirth + restart",
        }
    }
}

/// One experiment's parameters (times in seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub ranks: u32,
    pub degree: u32,
    pub copies: u32,
    /// Weibull shape δ of host lifetimes.
    pub shape: f64,
    /// Mean time between failures of one host.
    pub mtbf: f64,
    /// Work the job needs, `W`.
    pub work: f64,
    /// Work between checkpoints, `τ`.
    pub interval: f64,
    /// Cost of a checkpoint, `C`.
    pub cost: f64,
    /// Cost of a restart, `R`.
    pub restart: f64,
    /// Time a reborn replica takes to catch up.
    pub catch_up: f64,
    /// Hosts beyond `p·r`.
    pub spare: u32,
    pub max_restarts: u32,
    pub mode: Mode,
}

impl Params {
    /// `ranks × degree`, 2 copies, the other figures as given, restart and catch-up costs
    /// equal to the checkpoint's, `ranks/4 + 4` spare hosts, 100 restarts.
    pub fn new(ranks: u32, degree: u32, shape: f64, mtbf: f64, work: f64, interval: f64, cost: f64) -> Params {
        Params {
            ranks,
            degree,
            copies: 2,
            shape,
            mtbf,
            work,
            interval,
            cost,
            restart: cost,
            catch_up: cost,
            spare: ranks / 4 + 4,
            max_restarts: 100,
            mode: Mode::Restart,
        }
    }
}

/// One trial's end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trial {
    pub finished: bool,
    /// When it finished or failed.
    pub time: f64,
    pub restarts: u32,
    pub rebirths: u32,
    pub host_failures: u32,
    pub checkpoints: u32,
    /// Generations that lost every copy of a piece.
    pub lost: u32,
    /// When the first generation was complete.
    pub first_complete: Option<f64>,
    /// Why it failed: the coordinator's reason.
    pub failure: Option<Failure>,
}

/// Why a trial failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    /// A rank lost every replica before any checkpoint was complete (or restorable).
    NoCheckpoint,
    /// A rank lost every replica and no restart is allowed (or none left).
    Budget,
}

/// A time as the heap's key: the bits of a non-negative float order as the float.
fn key(t: f64) -> u64 {
    debug_assert!(t >= 0.0);
    t.to_bits()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// Host `h` fails.
    HostFails(u32),
    /// A copy is stored.
    Stored { step: u64, rank: u32, peer: u32 },
    /// A reborn replica caught up.
    CaughtUp(usize),
    /// The job reached its next checkpoint or its end (of attempt `epoch`).
    Job { epoch: u32 },
}

struct Run {
    p: Params,
    rng: Rng,
    coord: Coordinator,
    heap: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    now: f64,
    /// Process on each host (by host id, growing).
    proc_on: Vec<Option<usize>>,
    host_of_slot: Vec<u32>,
    free: BTreeSet<u32>,
    next_slot: usize,
    /// Work restored at the start of the current attempt, and when computing resumed.
    base_work: f64,
    resumed: f64,
    epoch: u32,
    /// Checkpoints taken in this attempt (the next step is `base_step + taken + 1`).
    base_step: u64,
    taken: u64,
    trial: Trial,
    ended: bool,
}

impl Run {
    fn new(p: Params, seed: u64) -> Run {
        let cfg = Config {
            ranks: p.ranks,
            degree: p.degree,
            copies: p.copies,
            quota: None,
            rebirth: p.mode != Mode::Replication,
            max_restarts: if p.mode == Mode::Restart { p.max_restarts } else { 0 },
            store_timeout: None,
        };
        let coord = Coordinator::new(cfg).expect("a valid configuration");
        let trial = Trial {
            finished: false,
            time: 0.0,
            restarts: 0,
            rebirths: 0,
            host_failures: 0,
            checkpoints: 0,
            lost: 0,
            first_complete: None,
            failure: None,
        };
        let mut run = Run {
            p,
            rng: Rng::new(seed),
            coord,
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0.0,
            proc_on: Vec::new(),
            host_of_slot: Vec::new(),
            free: BTreeSet::new(),
            next_slot: 0,
            base_work: 0.0,
            resumed: 0.0,
            epoch: 0,
            base_step: 0,
            taken: 0,
            trial,
            ended: false,
        };
        let hosts = p.ranks * p.degree + p.spare;
        for _ in 0..hosts {
            run.new_host();
        }
        for rank in 0..p.ranks {
            for _ in 0..p.degree {
                let host = *run.free.first().expect("a free host");
                run.start(rank, host, true);
            }
        }
        run.schedule_job();
        run
    }

    fn push(&mut self, at: f64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((key(at), self.seq, ev)));
    }

    fn lifetime(&mut self) -> f64 {
        let scale = self.p.mtbf / gamma(1.0 + 1.0 / self.p.shape);
        scale * (-self.rng.f64_open0().ln()).powf(1.0 / self.p.shape)
    }

    fn input(&mut self, input: Input) {
        let _ = self.coord.handle_input(Duration::from_secs_f64(self.now), input);
    }

    fn new_host(&mut self) {
        let h = self.proc_on.len() as u32;
        self.proc_on.push(None);
        self.free.insert(h);
        let at = self.now + self.lifetime();
        self.push(at, Ev::HostFails(h));
        self.input(Input::PeerUp { peer: h, host: h });
    }

    fn start(&mut self, rank: u32, host: u32, joined: bool) -> usize {
        let slot = self.next_slot;
        self.next_slot += 1;
        self.free.remove(&host);
        self.proc_on[host as usize] = Some(slot);
        self.host_of_slot.push(host);
        let input = if joined { Input::Joined { slot, rank, host } } else { Input::Reborn { slot, rank, host } };
        self.input(input);
        slot
    }

    /// The next checkpoint or the end, from `resumed`.
    fn schedule_job(&mut self) {
        let done = self.base_work + self.taken as f64 * self.p.interval;
        let next =
            if self.p.mode == Mode::Replication { self.p.work } else { (done + self.p.interval).min(self.p.work) };
        let at = self.resumed + (next - done);
        let epoch = self.epoch;
        self.push(at, Ev::Job { epoch });
    }

    fn job_event(&mut self) {
        let done = self.base_work + self.taken as f64 * self.p.interval;
        let next =
            if self.p.mode == Mode::Replication { self.p.work } else { (done + self.p.interval).min(self.p.work) };
        if next >= self.p.work {
            self.trial.finished = true;
            self.ended = true;
            return;
        }
        self.taken += 1;
        self.trial.checkpoints += 1;
        let step = self.base_step + self.taken;
        for rank in 0..self.p.ranks {
            self.input(Input::Piece { step, rank, bytes: 1 });
        }
        self.resumed = self.now + self.p.cost;
        self.schedule_job();
    }

    fn host_fails(&mut self, h: u32) {
        self.trial.host_failures += 1;
        self.free.remove(&h);
        self.input(Input::PeerDown { peer: h });
        self.drain();
        if let Some(slot) = self.proc_on[h as usize].take() {
            self.input(Input::Died { slot });
        }
        self.drain();
        self.new_host();
    }

    /// Carries out the coordinator's decisions.
    fn drain(&mut self) {
        let mut queue: VecDeque<Output> = self.coord.drain_outputs().into();
        while let Some(o) = queue.pop_front() {
            match o {
                Output::Store { step, rank, to, .. } => {
                    let at = self.now + self.p.cost;
                    self.push(at, Ev::Stored { step, rank, peer: to });
                }
                Output::Rebirth { rank, avoid, .. } => {
                    let host = self.free.iter().copied().find(|h| !avoid.contains(h));
                    match host {
                        Some(host) => {
                            self.trial.rebirths += 1;
                            let slot = self.start(rank, host, false);
                            let at = self.now + self.p.catch_up;
                            self.push(at, Ev::CaughtUp(slot));
                        }
                        None => self.input(Input::RebirthFailed { rank, reason: "no free host".into() }),
                    }
                }
                Output::Restart { step, .. } => self.restart(step),
                Output::Failed { reason } => {
                    let budget = reason.contains("budget");
                    self.trial.failure = Some(if budget { Failure::Budget } else { Failure::NoCheckpoint });
                    self.ended = true;
                    return;
                }
                Output::Lost { .. } => self.trial.lost += 1,
                Output::Complete { .. } => {
                    self.trial.first_complete.get_or_insert(self.now);
                }
                Output::Delete { .. } | Output::Refused { .. } | Output::Fetch { .. } | Output::Master { .. } => {}
            }
            queue.extend(self.coord.drain_outputs());
        }
    }

    fn restart(&mut self, step: u64) {
        self.trial.restarts += 1;
        for h in 0..self.proc_on.len() {
            if self.proc_on[h].take().is_some() {
                self.free.insert(h as u32);
            }
        }
        // Steps count checkpoints from the start: step k holds k·τ of work.
        self.base_step = step;
        self.base_work = step as f64 * self.p.interval;
        self.taken = 0;
        self.epoch += 1;
        self.resumed = self.now + self.p.restart;
        for rank in 0..self.p.ranks {
            for _ in 0..self.p.degree {
                let host = *self.free.first().expect("a free host");
                self.start(rank, host, true);
            }
        }
        self.schedule_job();
    }

    fn go(mut self) -> Trial {
        while !self.ended {
            let Some(Reverse((t, _, ev))) = self.heap.pop() else { break };
            self.now = f64::from_bits(t);
            match ev {
                Ev::HostFails(h) => self.host_fails(h),
                Ev::Stored { step, rank, peer } => {
                    self.input(Input::Stored { step, rank, peer });
                }
                Ev::CaughtUp(slot) => {
                    let host = self.host_of_slot[slot] as usize;
                    if self.proc_on[host] == Some(slot) {
                        self.input(Input::CaughtUp { slot });
                    }
                }
                Ev::Job { epoch } if epoch == self.epoch => self.job_event(),
                Ev::Job { .. } => {}
            }
            self.drain();
        }
        self.trial.time = self.now;
        self.trial
    }
}

/// One trial of `p` with seed `seed`.
pub fn trial(p: Params, seed: u64) -> Trial {
    Run::new(p, seed).go()
}

/// The summary of many trials.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub trials: u32,
    pub finished: u32,
    /// Mean run time of the trials that finished (NaN if none).
    pub mean_time: f64,
    pub mean_restarts: f64,
    pub mean_rebirths: f64,
    pub mean_host_failures: f64,
    /// Trials failed because a rank lost every replica with no checkpoint to restart from.
    pub no_checkpoint: u32,
    /// Trials failed because no restart was allowed, or none was left.
    pub budget: u32,
}

impl Summary {
    pub fn probability(&self) -> f64 {
        f64::from(self.finished) / f64::from(self.trials.max(1))
    }

    /// Half-width of the 95 % interval of the probability (normal approximation, at least
    /// that of one trial in either direction).
    pub fn margin(&self) -> f64 {
        let n = f64::from(self.trials.max(1));
        let p = self.probability();
        (1.96 * (p * (1.0 - p) / n).sqrt()).max(1.0 / n)
    }
}

/// `trials` trials of `p` (trial `i` seeded from `seed` and `i`), on `threads` threads.
pub fn run(p: Params, trials: u32, seed: u64, threads: usize) -> Summary {
    let results = par_map(trials as usize, threads, |i| trial(p, derive_seed(seed, &[i as u64])));
    summarize(&results)
}

pub fn summarize(results: &[Trial]) -> Summary {
    let n = results.len().max(1) as f64;
    let done: Vec<&Trial> = results.iter().filter(|t| t.finished).collect();
    let mean_time =
        if done.is_empty() { f64::NAN } else { done.iter().map(|t| t.time).sum::<f64>() / done.len() as f64 };
    Summary {
        trials: results.len() as u32,
        finished: done.len() as u32,
        mean_time,
        mean_restarts: results.iter().map(|t| f64::from(t.restarts)).sum::<f64>() / n,
        mean_rebirths: results.iter().map(|t| f64::from(t.rebirths)).sum::<f64>() / n,
        mean_host_failures: results.iter().map(|t| f64::from(t.host_failures)).sum::<f64>() / n,
        no_checkpoint: results.iter().filter(|t| t.failure == Some(Failure::NoCheckpoint)).count() as u32,
        budget: results.iter().filter(|t| t.failure == Some(Failure::Budget)).count() as u32,
    }
}

/// The mean run time of the trials that finished (with restarts) for each interval of `intervals`, the same seeds for all
/// (common random numbers: the host failures are the same whatever the interval, so the
/// differences between intervals are far less noisy than each mean), and the interval of least
/// mean time, from a least-squares parabola in `ln τ` through every point (a sweep's best
/// point alone wanders on a flat optimum).
pub fn sweep(p: Params, intervals: &[f64], trials: u32, seed: u64, threads: usize) -> (Vec<f64>, f64) {
    let jobs = intervals.len() * trials as usize;
    let ends = par_map(jobs, threads, |j| {
        let (i, t) = (j / trials as usize, j % trials as usize);
        trial(Params { interval: intervals[i], mode: Mode::Restart, ..p }, derive_seed(seed, &[t as u64]))
    });
    let means: Vec<f64> = ends.chunks(trials as usize).map(|c| summarize(c).mean_time).collect();
    let xs: Vec<f64> = intervals.iter().map(|t| t.ln()).collect();
    (means.clone(), parabola_vertex(&xs, &means).exp().clamp(intervals[0], intervals[intervals.len() - 1]))
}

/// The vertex of the least-squares parabola `a + b·x + c·x²` through the points (the best
/// point if the fit opens downwards).
pub fn parabola_vertex(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    let mx = xs.iter().sum::<f64>() / n;
    // Centred for conditioning: u = x − mean.
    let (mut s2, mut s3, mut s4, mut sy, mut suy, mut su2y) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        let u = x - mx;
        s2 += u * u;
        s3 += u * u * u;
        s4 += u * u * u * u;
        sy += y;
        suy += u * y;
        su2y += u * u * y;
    }
    // Normal equations for (a, b, c) with Σu = 0.
    let m = [[n, 0.0, s2], [0.0, s2, s3], [s2, s3, s4]];
    let v = [sy, suy, su2y];
    let det = |m: &[[f64; 3]; 3]| {
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    };
    let d = det(&m);
    let solve = |col: usize| {
        let mut mm = m;
        for r in 0..3 {
            mm[r][col] = v[r];
        }
        det(&mm) / d
    };
    let (b, c) = (solve(1), solve(2));
    if c <= 0.0 || d == 0.0 {
        let best = (0..ys.len()).fold(0, |b, i| if ys[i] < ys[b] { i } else { b });
        return xs[best];
    }
    mx - b / (2.0 * c)
}

/// The experiment of `p2pmpi-sim checkpoint`: every size and degree, in every mode.
#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    /// The base parameters (ranks, degree, interval and mode are set per row).
    pub base: Params,
    pub ranks: Vec<u32>,
    pub degrees: Vec<u32>,
    /// Work between checkpoints; `None`: the advisor's interval for each size and degree.
    pub interval: Option<f64>,
    pub trials: u32,
    pub seed: u64,
    /// Also sweep this many intervals (from half to twice the advisor's) for the simulator's
    /// optimum (0: no sweep).
    pub sweep: usize,
}

fn hours(s: f64) -> String {
    if s.is_nan() {
        "-".into()
    } else {
        format!("{:.2}", s / 3600.0)
    }
}

fn percent(x: f64) -> String {
    format!("{:.2} %", 100.0 * x)
}

/// The table: for each size, degree and mode, the simulated probability of finishing (with
/// its 95 % margin) and mean run time beside the advisor's, restarts, rebirths and why trials
/// failed; and, with a sweep, a second table of the advisor's interval and the simulator's
/// optimum.
pub fn experiment(e: &Experiment, threads: usize) -> (crate::table::Table, Option<crate::table::Table>) {
    use crate::table::Table;
    use p2pmpi_core::advisor::checkpoints::CheckpointModel;
    let mut t = Table::new(&[
        "P",
        "r",
        "interval s",
        "mode",
        "P(finish) sim",
        "± 95 %",
        "P(finish) advisor",
        "E[T] h sim",
        "E[T] h advisor",
        "restarts",
        "rebirths",
        "failed: no ckpt",
        "failed: budget",
    ]);
    let mut sw = Table::new(&["P", "r", "anchor s", "advisor s", "simulator s", "ratio"]);
    for &ranks in &e.ranks {
        for &degree in &e.degrees {
            let b = e.base;
            let m = CheckpointModel {
                p: ranks,
                r: degree,
                mtbf: b.mtbf,
                shape: b.shape,
                work: b.work,
                cost: b.cost,
                restart: b.restart,
                max_restarts: b.max_restarts,
            };
            let Some(a) = m.advise() else { continue };
            let interval = e.interval.unwrap_or(a.interval);
            for mode in Mode::ALL {
                let p = Params { ranks, degree, interval, mode, spare: ranks / 4 + 4, ..b };
                let s = run(p, e.trials, derive_seed(e.seed, &[u64::from(ranks), u64::from(degree)]), threads);
                let (advised, time) = match mode {
                    Mode::Replication => (a.finish_replication, b.work),
                    // Without restarts a finished run took the work and its checkpoints.
                    Mode::Rebirth => (m.finish_rebirth(interval), b.work + ((b.work / interval).ceil() - 1.0) * b.cost),
                    Mode::Restart => (m.finish_restart(interval), m.expected_time(interval)),
                };
                t.row(vec![
                    ranks.to_string(),
                    degree.to_string(),
                    if mode == Mode::Replication { "-".into() } else { format!("{interval:.0}") },
                    mode.name().into(),
                    percent(s.probability()),
                    percent(s.margin()),
                    percent(advised),
                    hours(s.mean_time),
                    hours(time),
                    format!("{:.2}", s.mean_restarts),
                    format!("{:.1}", s.mean_rebirths),
                    s.no_checkpoint.to_string(),
                    s.budget.to_string(),
                ]);
            }
            if e.sweep >= 3 {
                let k = e.sweep as f64 - 1.0;
                let grid: Vec<f64> = (0..e.sweep).map(|i| a.interval * 4f64.powf(i as f64 / k - 0.5)).collect();
                let p = Params { ranks, degree, spare: ranks / 4 + 4, ..b };
                let (_, best) = sweep(p, &grid, e.trials, e.seed, threads);
                sw.row(vec![
                    ranks.to_string(),
                    degree.to_string(),
                    format!("{:.0}", a.anchor),
                    format!("{:.0}", a.interval),
                    format!("{best:.0}"),
                    format!("{:.3}", a.interval / best),
                ]);
            }
        }
    }
    (t, (e.sweep >= 3).then_some(sw))
}
