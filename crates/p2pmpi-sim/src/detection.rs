//! Experiment a: detection time vs n for BRR and DBRR, beside the theory `T_cleanup` (the
//! chapter's figure 13, FM figure 6, thesis figure 4.15).

use crate::net::{fmt_duration, NetConfig};
use crate::par::{default_threads, par_map};
use crate::plot::{Chart, Series, PALETTE};
use crate::rng::{derive_seed, Rng};
use crate::sim::{FalseEvents, Sim, SimConfig, StartMode};
use crate::table::{secs, Table};
use p2pmpi_core::fd::{cycle_len, t_cleanup, FdConfig, Protocol};
use std::time::{Duration, Instant};

/// Parameters of the detection-time experiment.
#[derive(Debug, Clone)]
pub struct DetectionParams {
    pub sizes: Vec<usize>,
    pub protocols: Vec<Protocol>,
    /// Independent runs per (protocol, n), each crashing one random process.
    pub trials: usize,
    pub t_gossip: Duration,
    pub t_max_hang: Duration,
    /// The crash happens at `warmup` plus a uniform random time within one gossip cycle.
    pub warmup: Duration,
    pub net: NetConfig,
    pub start: StartMode,
    pub seed: u64,
    pub threads: usize,
}

impl Default for DetectionParams {
    /// The seeds' setting: `T_gossip` = 0.5 s, no `T_MAX_HANG`, a crash after 20 s.
    fn default() -> Self {
        DetectionParams {
            sizes: (2..=10).map(|k| 1usize << k).collect(),
            protocols: vec![Protocol::Brr, Protocol::Dbrr],
            trials: 10,
            t_gossip: Duration::from_millis(500),
            t_max_hang: Duration::ZERO,
            warmup: Duration::from_secs(20),
            net: NetConfig::default(),
            start: StartMode::default(),
            seed: 1,
            threads: default_threads(),
        }
    }
}

/// The outcome of one run.
#[derive(Debug, Clone)]
pub struct Trial {
    pub crashed: usize,
    pub crash_at: Duration,
    /// Per surviving process, the time from the crash to its confirmation (`None`: never).
    pub delays: Vec<Option<Duration>>,
    pub false_events: FalseEvents,
    /// Gossip payload sent per process per second (bytes).
    pub bytes_per_proc_s: f64,
    pub queue_items: u64,
    pub wall: Duration,
}

impl Trial {
    /// The first confirmation.
    pub fn first(&self) -> Option<Duration> {
        self.delays.iter().flatten().min().copied()
    }

    /// The last confirmation (`None` if some process never confirmed).
    pub fn last(&self) -> Option<Duration> {
        self.delays.iter().copied().collect::<Option<Vec<_>>>().and_then(|v| v.into_iter().max())
    }
}

/// One run: `n` processes, one crashes at a random time after the warm-up.
pub fn run_trial(p: &DetectionParams, protocol: Protocol, n: usize, trial: usize) -> Trial {
    let wall = Instant::now();
    let seed = derive_seed(p.seed, &[0xDE7EC7, protocol as u64, n as u64, trial as u64]);
    let fd = FdConfig::new(protocol, p.t_gossip, p.t_max_hang);
    let mut sim = Sim::new(SimConfig { n, fd, net: p.net, start: p.start, seed });
    let mut rng = Rng::new(derive_seed(seed, &[1]));
    let crashed = rng.below(n as u64) as usize;
    let crash_at = p.warmup + (p.t_gossip * cycle_len(protocol, n)).mul_f64(rng.f64());
    sim.crash_at(crashed, crash_at);
    let deadline = crash_at + fd.detection_bound(n) * 2 + p.t_gossip * 4;
    sim.run_until_detected(deadline);
    let delays = sim
        .confirmations_of(crashed)
        .into_iter()
        .enumerate()
        .filter(|&(i, _)| i != crashed)
        .map(|(_, t)| t.map(|t| t.saturating_sub(crash_at)))
        .collect();
    let st = sim.stats();
    let gossip_bytes = st.gossips as f64 * 8.0 * n as f64;
    Trial {
        crashed,
        crash_at,
        delays,
        false_events: sim.false_events(),
        bytes_per_proc_s: gossip_bytes / n as f64 / sim.now().as_secs_f64().max(1e-9),
        queue_items: sim.processed(),
        wall: wall.elapsed(),
    }
}

/// One line of the result: a protocol and a size, over all trials.
#[derive(Debug, Clone)]
pub struct Row {
    pub protocol: Protocol,
    pub n: usize,
    pub trials: usize,
    /// `T_cleanup` of the seeds (the "theoretical" detection time of figure 13).
    pub theory: f64,
    /// `T_cleanup + T_MAX_HANG + ping time` ([`FdConfig::detection_bound`]).
    pub bound: f64,
    /// Mean over trials of the first confirmation.
    pub first_mean: f64,
    /// Mean over every surviving process of every trial (the seeds' plotted value).
    pub mean: f64,
    /// Mean over trials of the last confirmation.
    pub last_mean: f64,
    /// Largest last confirmation.
    pub last_max: f64,
    /// Smallest confirmation of all.
    pub min: f64,
    /// Surviving processes that never confirmed the crash (must be 0).
    pub undetected: usize,
    pub false_events: FalseEvents,
    pub bytes_per_proc_s: f64,
    /// Wall-clock time of one run, mean.
    pub wall_per_trial: f64,
}

/// Runs every (protocol, n, trial) on all threads and aggregates.
pub fn run(p: &DetectionParams) -> Vec<Row> {
    let mut jobs = Vec::new();
    for &protocol in &p.protocols {
        for &n in &p.sizes {
            for t in 0..p.trials {
                jobs.push((protocol, n, t));
            }
        }
    }
    // Largest runs first: better balance across threads.
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&j| std::cmp::Reverse(jobs[j].1));
    let results = par_map(order.len(), p.threads, |k| {
        let (protocol, n, t) = jobs[order[k]];
        run_trial(p, protocol, n, t)
    });
    let mut by_job: Vec<Option<Trial>> = vec![None; jobs.len()];
    for (k, r) in results.into_iter().enumerate() {
        by_job[order[k]] = Some(r);
    }
    let mut rows = Vec::new();
    let mut it = by_job.into_iter().map(|t| t.expect("ran"));
    for &protocol in &p.protocols {
        for &n in &p.sizes {
            let trials: Vec<Trial> = (&mut it).take(p.trials).collect();
            rows.push(aggregate(p, protocol, n, &trials));
        }
    }
    rows
}

fn aggregate(p: &DetectionParams, protocol: Protocol, n: usize, trials: &[Trial]) -> Row {
    let fd = FdConfig::new(protocol, p.t_gossip, p.t_max_hang);
    let s = |d: Duration| d.as_secs_f64();
    let k = trials.len().max(1) as f64;
    let all: Vec<f64> = trials.iter().flat_map(|t| t.delays.iter().flatten().map(|&d| s(d))).collect();
    let lasts: Vec<f64> =
        trials.iter().map(|t| s(t.delays.iter().flatten().max().copied().unwrap_or_default())).collect();
    let mut fe = FalseEvents::default();
    for t in trials {
        fe += t.false_events;
    }
    Row {
        protocol,
        n,
        trials: trials.len(),
        theory: s(t_cleanup(protocol, n, p.t_gossip) + p.t_max_hang),
        bound: s(fd.detection_bound(n)),
        first_mean: trials.iter().map(|t| s(t.first().unwrap_or_default())).sum::<f64>() / k,
        mean: all.iter().sum::<f64>() / all.len().max(1) as f64,
        last_mean: lasts.iter().sum::<f64>() / k,
        last_max: lasts.iter().copied().fold(0.0, f64::max),
        min: all.iter().copied().fold(f64::INFINITY, f64::min),
        undetected: trials.iter().map(|t| t.delays.iter().filter(|d| d.is_none()).count()).sum(),
        false_events: fe,
        bytes_per_proc_s: trials.iter().map(|t| t.bytes_per_proc_s).sum::<f64>() / k,
        wall_per_trial: trials.iter().map(|t| s(t.wall)).sum::<f64>() / k,
    }
}

/// The result table.
pub fn table(rows: &[Row]) -> Table {
    let mut t = Table::new(&[
        "protocol",
        "n",
        "trials",
        "T_cleanup (s)",
        "bound (s)",
        "first mean (s)",
        "all mean (s)",
        "last mean (s)",
        "last max (s)",
        "min (s)",
        "mean − T_cleanup (s)",
        "undetected",
        "false susp.",
        "false det.",
        "gossip B/s/proc",
        "wall/run (s)",
    ]);
    for r in rows {
        t.row(vec![
            r.protocol.to_string(),
            r.n.to_string(),
            r.trials.to_string(),
            secs(r.theory),
            secs(r.bound),
            secs(r.first_mean),
            secs(r.mean),
            secs(r.last_mean),
            secs(r.last_max),
            secs(r.min),
            format!("{:+.3}", r.mean - r.theory),
            r.undetected.to_string(),
            r.false_events.suspicions.to_string(),
            r.false_events.failures.to_string(),
            format!("{:.0}", r.bytes_per_proc_s),
            format!("{:.3}", r.wall_per_trial),
        ]);
    }
    t
}

/// A one-paragraph description of the parameters.
pub fn describe(p: &DetectionParams) -> String {
    format!(
        "T_gossip = {}, T_MAX_HANG = {}, ping time = T_gossip (3 tries), {} trials per point, one random process \
         crashed at {} + U(0, one gossip cycle); network: {}; start: {}; seed {}.",
        fmt_duration(p.t_gossip),
        fmt_duration(p.t_max_hang),
        p.trials,
        fmt_duration(p.warmup),
        p.net,
        describe_start(p.start),
        p.seed
    )
}

/// The start mode in words.
pub fn describe_start(s: StartMode) -> String {
    match s {
        StartMode::Aligned => "aligned (every detector at t = 0, counter 0)".into(),
        StartMode::FlatTree { send_interval, setup } => format!(
            "flat tree (communicator sent every {}, detector started U(0, {}) after receipt, FM eq. 4 counters)",
            fmt_duration(send_interval),
            fmt_duration(setup)
        ),
    }
}

/// The figure: detection times and theory vs n.
pub fn chart(rows: &[Row], p: &DetectionParams) -> Chart {
    let mut c = Chart::new(
        format!(
            "Time to detect a crash (T_gossip = {}, {} start)",
            fmt_duration(p.t_gossip),
            match p.start {
                StartMode::Aligned => "aligned",
                StartMode::FlatTree { .. } => "flat-tree",
            }
        ),
        "number of processes n",
        "seconds after the crash",
    );
    c.x_log2 = true;
    for (i, &proto) in p.protocols.iter().enumerate() {
        let rs: Vec<&Row> = rows.iter().filter(|r| r.protocol == proto).collect();
        let color = PALETTE[i % PALETTE.len()];
        let mut s = Series::new(format!("{proto} simulated (mean; whiskers: min–max)"), color, {
            rs.iter().map(|r| (r.n as f64, r.mean)).collect()
        });
        s.ranges = rs.iter().map(|r| (r.n as f64, r.min, r.last_max)).collect();
        c.add(s);
        c.add(
            Series::new(
                format!("{proto} theory T_cleanup"),
                color,
                rs.iter().map(|r| (r.n as f64, r.theory)).collect(),
            )
            .dashed(),
        );
    }
    c
}
