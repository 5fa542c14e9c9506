//! The discrete-event simulator: `n` [`Detector`]s of `p2pmpi-core`, virtual time, an event
//! queue and a simulated network.

use crate::net::NetConfig;
use crate::rng::{derive_seed, Rng};
use p2pmpi_core::fd::{Detector, Event, FdConfig, Input, Message, Output, Start, Status, Transmit};
use p2pmpi_core::machine::Machine;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

/// How the detectors start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartMode {
    /// Every detector starts at time 0 with every counter at 0: gossip periods (phases) and
    /// round numbers are the same everywhere. The ideal case of the seeds' analysis.
    Aligned,
    /// The start-up of FM §5.3 / figure 5: the root (process 0) sends the communicator to
    /// processes 1…n−1 one after the other, `send_interval` apart (a flat tree); process `i`
    /// receives it one network delay later and starts its detector a uniform random time in
    /// `[0, setup)` after that; the root starts its own after its last send plus such a setup
    /// time. The communicator takes the network's base delay (no jitter unless
    /// [`NetConfig::communicator_jitter`]: equation 4 cannot see the latency of that message,
    /// see the crate docs). Every detector gets its initial counters from FM equation 4 ([`Start::adjusted`]
    /// with `Δt_i = ts_i − ts_1`), so gossip phases and round numbers differ from process to
    /// process, as on a real grid.
    FlatTree { send_interval: Duration, setup: Duration },
}

impl Default for StartMode {
    fn default() -> Self {
        StartMode::FlatTree { send_interval: Duration::from_millis(1), setup: Duration::from_millis(200) }
    }
}

/// Everything a run depends on.
#[derive(Debug, Clone, Copy)]
pub struct SimConfig {
    /// Number of processes.
    pub n: usize,
    /// The detectors' configuration (the same for all, as for one application).
    pub fd: FdConfig,
    /// The network.
    pub net: NetConfig,
    /// How the detectors start.
    pub start: StartMode,
    /// The seed of every random choice (network delays, start-up times, detectors' seeds).
    pub seed: u64,
}

/// An event reported by a detector, with when and by whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub at: Duration,
    pub observer: usize,
    pub event: Event,
}

/// Counters of the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Messages handed to the network.
    pub sent: u64,
    /// Of which gossip messages.
    pub gossips: u64,
    /// Of which pings.
    pub pings: u64,
    /// Messages delivered to a running detector.
    pub delivered: u64,
    /// Messages lost by the network (`NetConfig::loss`).
    pub lost: u64,
    /// Messages that reached a crashed process (dropped).
    pub to_crashed: u64,
    /// Messages that reached a process whose detector had not started yet (dropped).
    pub before_start: u64,
    /// Payload bytes sent (8 bytes per counter of a gossip table, 8 or 16 for a ping or pong).
    pub bytes: u64,
}

enum Kind {
    Start,
    Timer,
    Deliver { from: u32, msg: Message },
    Crash,
}

struct Item {
    at: Duration,
    seq: u64,
    node: u32,
    kind: Kind,
}

impl PartialEq for Item {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Item {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest item must come out first; ties
    /// in time are broken by insertion order, which makes runs deterministic.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

struct Node {
    det: Option<Detector>,
    start: Start,
    seed: u64,
    crashed_at: Option<Duration>,
    /// The time of the one timer that is live in the queue (older ones are stale).
    timer: Option<Duration>,
}

/// A simulation in progress.
pub struct Sim {
    cfg: SimConfig,
    now: Duration,
    seq: u64,
    queue: BinaryHeap<Item>,
    nodes: Vec<Node>,
    rng: Rng,
    /// Per directed link, the delivery time of the last message (FIFO order).
    last_delivery: HashMap<u64, Duration>,
    records: Vec<Record>,
    stats: NetStats,
    /// Set when a crashed process's failure has been confirmed somewhere and the "all
    /// detected" condition should be checked again.
    check_done: bool,
    processed: u64,
    out_buf: Vec<Transmit>,
}

impl Sim {
    /// A simulation whose detectors start as `cfg.start` says (nothing runs before
    /// [`run_until`](Self::run_until) or [`run_until_detected`](Self::run_until_detected)).
    pub fn new(cfg: SimConfig) -> Sim {
        assert!(cfg.n >= 1, "a simulation needs at least one process");
        let n = cfg.n;
        let mut rng = Rng::new(derive_seed(cfg.seed, &[0x5EED]));
        let tg = cfg.fd.t_gossip;
        let mut sim = Sim {
            cfg,
            now: Duration::ZERO,
            seq: 0,
            queue: BinaryHeap::with_capacity(4 * n),
            nodes: Vec::with_capacity(n),
            rng: Rng::new(derive_seed(cfg.seed, &[0xE7])),
            last_delivery: HashMap::new(),
            records: Vec::new(),
            stats: NetStats::default(),
            check_done: false,
            processed: 0,
            out_buf: Vec::new(),
        };
        let mut starts = Vec::with_capacity(n);
        match cfg.start {
            StartMode::Aligned => {
                for _ in 0..n {
                    starts.push((Duration::ZERO, Start::at(0)));
                }
            }
            StartMode::FlatTree { send_interval, setup } => {
                // ts_1 = 0 is the origin of every counter.
                let ts = |i: usize| send_interval * (i as u32).saturating_sub(1);
                let dt_max = ts(n.saturating_sub(1));
                let setup_time = |rng: &mut Rng| setup.mul_f64(rng.f64());
                let t0 = dt_max + setup_time(&mut rng);
                starts.push((t0, Start::adjusted(t0, Duration::ZERO, dt_max, tg)));
                for i in 1..n {
                    // The communicator travels with the base delay only (unless asked): a
                    // jitter here is a latency that equation 4 cannot see (it counts from
                    // receipt), and a heavy-tailed one leaves a process rounds behind for good.
                    let tr = ts(i) + if cfg.net.communicator_jitter { cfg.net.sample(&mut rng) } else { cfg.net.base };
                    let t = tr + setup_time(&mut rng);
                    starts.push((t, Start::adjusted(t - tr, ts(i), dt_max, tg)));
                }
            }
        }
        for (i, (at, start)) in starts.into_iter().enumerate() {
            sim.nodes.push(Node {
                det: None,
                start,
                seed: derive_seed(cfg.seed, &[0xDE7, i as u64]),
                crashed_at: None,
                timer: None,
            });
            sim.push(at, i, Kind::Start);
        }
        sim
    }

    fn push(&mut self, at: Duration, node: usize, kind: Kind) {
        self.seq += 1;
        self.queue.push(Item { at, seq: self.seq, node: node as u32, kind });
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// The current virtual time.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Crashes process `node` at time `at` (≥ now): from then on it neither sends nor
    /// receives, and its pings go unanswered. Messages it sent before are still delivered.
    pub fn crash_at(&mut self, node: usize, at: Duration) {
        assert!(node < self.cfg.n);
        self.push(at.max(self.now), node, Kind::Crash);
    }

    /// When process `node` crashed, if it did.
    pub fn crashed_at(&self, node: usize) -> Option<Duration> {
        self.nodes[node].crashed_at
    }

    /// Whether process `node` has started its detector and not crashed.
    pub fn is_running(&self, node: usize) -> bool {
        self.nodes[node].det.is_some() && self.nodes[node].crashed_at.is_none()
    }

    /// The detector of process `node`, once started.
    pub fn detector(&self, node: usize) -> Option<&Detector> {
        self.nodes[node].det.as_ref()
    }

    /// Every event the detectors reported, in time order.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Network counters.
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// Queue items processed so far (a measure of the simulator's work).
    pub fn processed(&self) -> u64 {
        self.processed
    }

    /// Processes every queue item due at or before `t`; the clock then reads `t`.
    pub fn run_until(&mut self, t: Duration) {
        while self.queue.peek().is_some_and(|it| it.at <= t) {
            self.step();
        }
        self.now = self.now.max(t);
    }

    /// Runs until every running process has confirmed the failure of every crashed process,
    /// or until `deadline`. Returns the time the last confirmation happened, `None` if the
    /// deadline came first (or nothing crashed).
    pub fn run_until_detected(&mut self, deadline: Duration) -> Option<Duration> {
        while self.queue.peek().is_some_and(|it| it.at <= deadline) {
            self.step();
            if self.check_done {
                self.check_done = false;
                if self.all_detected() {
                    return Some(self.now);
                }
            }
        }
        self.now = self.now.max(deadline);
        None
    }

    /// Whether every running process sees every crashed process as dead.
    pub fn all_detected(&self) -> bool {
        let crashed: Vec<usize> = (0..self.cfg.n).filter(|&c| self.nodes[c].crashed_at.is_some()).collect();
        !crashed.is_empty()
            && self.nodes.iter().all(|nd| match (&nd.det, nd.crashed_at) {
                (Some(d), None) => crashed.iter().all(|&c| d.status(c) == Status::Dead),
                (None, None) => false,
                _ => true,
            })
    }

    /// Handles the next queue item. Returns false when the queue is empty.
    pub fn step(&mut self) -> bool {
        let Some(item) = self.queue.pop() else { return false };
        self.processed += 1;
        self.now = item.at;
        let i = item.node as usize;
        match item.kind {
            Kind::Start => {
                if self.nodes[i].crashed_at.is_none() {
                    let nd = &mut self.nodes[i];
                    nd.det = Some(Detector::new(i, self.cfg.n, self.cfg.fd, self.now, nd.start, nd.seed));
                    self.service(i, false);
                }
            }
            Kind::Timer => {
                let nd = &mut self.nodes[i];
                if nd.crashed_at.is_some() || nd.timer != Some(item.at) {
                    return true; // stale
                }
                nd.timer = None;
                if let Some(d) = nd.det.as_mut() {
                    d.handle_timeout(self.now);
                    self.service(i, true);
                }
            }
            Kind::Deliver { from, msg } => {
                let nd = &mut self.nodes[i];
                if nd.crashed_at.is_some() {
                    self.stats.to_crashed += 1;
                } else if let Some(d) = nd.det.as_mut() {
                    self.stats.delivered += 1;
                    d.handle_input(self.now, Input::Message { from: from as usize, msg })
                        .expect("the simulator sends well-formed messages");
                    self.service(i, false);
                } else {
                    self.stats.before_start += 1;
                }
            }
            Kind::Crash => {
                let nd = &mut self.nodes[i];
                if nd.crashed_at.is_none() {
                    nd.crashed_at = Some(self.now);
                    nd.timer = None;
                }
            }
        }
        true
    }

    /// Sends what detector `i` wants to send, records its events and (re)arms its timer.
    fn service(&mut self, i: usize, after_timeout: bool) {
        let n = self.cfg.n as u64;
        let now = self.now;
        let Some(det) = self.nodes[i].det.as_mut() else { return };
        let mut out = std::mem::take(&mut self.out_buf);
        while let Some(o) = det.poll_output() {
            match o {
                Output::Transmit(tx) => out.push(tx),
                Output::Event(event) => {
                    if let Event::Failed(_) = event {
                        self.check_done = true;
                    }
                    self.records.push(Record { at: now, observer: i, event });
                }
            }
        }
        let det = self.nodes[i].det.as_ref().expect("started");
        let due = || det.poll_timeout().expect("a detector's gossip period is always armed");
        match self.nodes[i].timer {
            // A message never brings a detector's deadline forward (handling one creates no
            // ping and does not move the gossip period), so the live timer still holds and
            // the O(n) `poll_timeout` is not needed after each delivery. Debug builds (the
            // tests) check that claim on every message.
            Some(cur) if !after_timeout => {
                let due = due();
                // Either still ahead of the armed timer, or already due and the timer fires
                // in the next nanosecond (the anti-spin nudge after a timeout).
                debug_assert!(
                    due >= cur || (due <= now && cur <= now + Duration::from_nanos(1)),
                    "process {i}: a message moved the deadline forward to {due:?} (timer at {cur:?})"
                )
            }
            _ => {
                let mut wake = due();
                if wake <= now && after_timeout {
                    // The detector has just handled this instant; never spin on it.
                    wake = now + Duration::from_nanos(1);
                }
                let wake = wake.max(now);
                if self.nodes[i].timer.is_none_or(|cur| wake < cur) {
                    self.nodes[i].timer = Some(wake);
                    self.push(wake, i, Kind::Timer);
                }
            }
        }
        for tx in out.drain(..) {
            self.stats.sent += 1;
            match &tx.msg {
                Message::Gossip { heartbeats } => {
                    self.stats.gossips += 1;
                    self.stats.bytes += 8 * heartbeats.len() as u64;
                }
                Message::Ping { .. } => {
                    self.stats.pings += 1;
                    self.stats.bytes += 8;
                }
                Message::Pong { .. } => self.stats.bytes += 16,
            }
            if self.cfg.net.loss > 0.0 && self.rng.bernoulli(self.cfg.net.loss) {
                self.stats.lost += 1;
                continue;
            }
            let mut at = now + self.cfg.net.sample(&mut self.rng);
            if self.cfg.net.fifo {
                let last = self.last_delivery.entry(i as u64 * n + tx.to as u64).or_default();
                at = at.max(*last);
                *last = at;
            }
            self.push(at, tx.to, Kind::Deliver { from: i as u32, msg: tx.msg });
        }
        self.out_buf = out;
    }

    /// For each process, when it confirmed the failure of `k` (`None`: never, or it is `k`).
    pub fn confirmations_of(&self, k: usize) -> Vec<Option<Duration>> {
        let mut out = vec![None; self.cfg.n];
        for r in &self.records {
            if r.event == Event::Failed(k) && out[r.observer].is_none() {
                out[r.observer] = Some(r.at);
            }
        }
        out
    }

    /// Events about processes that had not crashed when the event was raised: (suspicions,
    /// refutations, confirmed failures). Every one of them is a *false* suspicion or a
    /// *false* detection.
    pub fn false_events(&self) -> FalseEvents {
        let mut f = FalseEvents::default();
        for r in &self.records {
            let (k, slot) = match r.event {
                Event::Suspected(k) => (k, &mut f.suspicions),
                Event::Refuted(k) => (k, &mut f.refutations),
                Event::Failed(k) => (k, &mut f.failures),
            };
            if self.nodes[k].crashed_at.is_none_or(|c| c > r.at) {
                *slot += 1;
            }
        }
        f
    }
}

/// Counts of events raised about processes that were alive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FalseEvents {
    pub suspicions: u64,
    pub refutations: u64,
    pub failures: u64,
}

impl std::ops::AddAssign for FalseEvents {
    fn add_assign(&mut self, o: FalseEvents) {
        self.suspicions += o.suspicions;
        self.refutations += o.refutations;
        self.failures += o.failures;
    }
}
