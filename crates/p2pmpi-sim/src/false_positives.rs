//! Experiment c: false suspicions and false detections vs the suspicion time
//! `T_cleanup + T_MAX_HANG` when messages suffer random, heavy-tailed delays and nothing
//! crashes (FM §5.1: "we tolerate unusually long transmission times … thanks to a parameter
//! T_max_hangup").

use crate::detection::describe_start;
use crate::net::{fmt_duration, Jitter, NetConfig};
use crate::par::{default_threads, par_map};
use crate::plot::{Chart, Series, PALETTE};
use crate::rng::derive_seed;
use crate::sim::{FalseEvents, Sim, SimConfig, StartMode};
use crate::table::Table;
use p2pmpi_core::fd::{t_cleanup, FdConfig, Protocol};
use std::time::{Duration, Instant};

/// Parameters of the false-positive experiment.
#[derive(Debug, Clone)]
pub struct FpParams {
    /// Numbers of processes.
    pub sizes: Vec<usize>,
    pub protocols: Vec<Protocol>,
    pub t_gossip: Duration,
    /// The values of `T_MAX_HANG` to try.
    pub hangs: Vec<Duration>,
    /// Ping time (`None`: the default, one `T_gossip`).
    pub ping_timeout: Option<Duration>,
    pub net: NetConfig,
    pub start: StartMode,
    /// Virtual duration of one run.
    pub duration: Duration,
    /// Independent runs per point.
    pub runs: usize,
    pub seed: u64,
    pub threads: usize,
}

impl Default for FpParams {
    /// 8 and 32 processes gossiping every 0.5 s over a network whose delay is 5 ms plus a
    /// Pareto jitter of mean 250 ms (half of `T_gossip`) and shape 1.2 (infinite variance:
    /// 5 % of the messages take longer than `T_gossip`, 1 % longer than 2 s).
    fn default() -> Self {
        let ms = Duration::from_millis;
        FpParams {
            sizes: vec![8, 32],
            protocols: vec![Protocol::Brr, Protocol::Dbrr],
            t_gossip: ms(500),
            hangs: [0, 500, 1000, 1500, 2000, 3000, 4000, 6000, 8000].into_iter().map(ms).collect(),
            ping_timeout: None,
            net: NetConfig::constant(ms(5)).with_jitter(Jitter::Pareto { mean: ms(250), shape: 1.2 }),
            start: StartMode::default(),
            duration: Duration::from_secs(600),
            runs: 24,
            seed: 1,
            threads: default_threads(),
        }
    }
}

/// One line: a protocol and a `T_MAX_HANG`.
#[derive(Debug, Clone)]
pub struct Row {
    pub protocol: Protocol,
    pub n: usize,
    pub t_cleanup: f64,
    pub t_max_hang: f64,
    pub node_hours: f64,
    pub events: FalseEvents,
    /// Messages delayed more than one `T_gossip` (fraction).
    pub late_fraction: f64,
    pub wall: f64,
}

impl Row {
    /// `T_cleanup + T_MAX_HANG`.
    pub fn suspicion_after(&self) -> f64 {
        self.t_cleanup + self.t_max_hang
    }

    /// False suspicions per process-hour.
    pub fn suspicion_rate(&self) -> f64 {
        self.events.suspicions as f64 / self.node_hours
    }

    /// False detections (confirmed failures of live processes) per process-hour.
    pub fn failure_rate(&self) -> f64 {
        self.events.failures as f64 / self.node_hours
    }
}

fn fd_config(p: &FpParams, protocol: Protocol, hang: Duration) -> FdConfig {
    let mut fd = FdConfig::new(protocol, p.t_gossip, hang);
    if let Some(t) = p.ping_timeout {
        fd.ping_timeout = t;
    }
    fd
}

/// One run without crashes; returns the false events and the process-hours observed.
pub fn run_one(p: &FpParams, protocol: Protocol, n: usize, hang: Duration, run: usize) -> (FalseEvents, f64) {
    let seed = derive_seed(p.seed, &[0xFA15E, protocol as u64, n as u64, hang.as_nanos() as u64, run as u64]);
    let mut sim = Sim::new(SimConfig { n, fd: fd_config(p, protocol, hang), net: p.net, start: p.start, seed });
    sim.run_until(p.duration);
    (sim.false_events(), n as f64 * p.duration.as_secs_f64() / 3600.0)
}

/// Runs every point on all threads.
pub fn run(p: &FpParams) -> Vec<Row> {
    let mut jobs = Vec::new();
    for &protocol in &p.protocols {
        for &n in &p.sizes {
            for &hang in &p.hangs {
                for r in 0..p.runs {
                    jobs.push((protocol, n, hang, r));
                }
            }
        }
    }
    let outs = par_map(jobs.len(), p.threads, |j| {
        let (protocol, n, hang, r) = jobs[j];
        let t = Instant::now();
        let (e, h) = run_one(p, protocol, n, hang, r);
        (e, h, t.elapsed().as_secs_f64())
    });
    let late = p.net.jitter.tail(p.t_gossip.saturating_sub(p.net.base));
    let mut rows = Vec::new();
    let mut it = outs.into_iter();
    for &protocol in &p.protocols {
        for &n in &p.sizes {
            for &hang in &p.hangs {
                let mut ev = FalseEvents::default();
                let (mut hours, mut wall) = (0.0, 0.0);
                for (e, h, w) in (&mut it).take(p.runs) {
                    ev += e;
                    hours += h;
                    wall += w;
                }
                rows.push(Row {
                    protocol,
                    n,
                    t_cleanup: t_cleanup(protocol, n, p.t_gossip).as_secs_f64(),
                    t_max_hang: hang.as_secs_f64(),
                    node_hours: hours,
                    events: ev,
                    late_fraction: late,
                    wall,
                });
            }
        }
    }
    rows
}

/// The result table.
pub fn table(rows: &[Row]) -> Table {
    let mut t = Table::new(&[
        "protocol",
        "n",
        "T_cleanup (s)",
        "T_MAX_HANG (s)",
        "suspect after (s)",
        "process-hours",
        "false suspicions",
        "refuted",
        "false detections",
        "suspicions / proc-h",
        "false detections / proc-h",
    ]);
    for r in rows {
        t.row(vec![
            r.protocol.to_string(),
            r.n.to_string(),
            format!("{:.1}", r.t_cleanup),
            format!("{:.1}", r.t_max_hang),
            format!("{:.1}", r.suspicion_after()),
            format!("{:.0}", r.node_hours),
            r.events.suspicions.to_string(),
            r.events.refutations.to_string(),
            r.events.failures.to_string(),
            format!("{:.3}", r.suspicion_rate()),
            format!("{:.3}", r.failure_rate()),
        ]);
    }
    t
}

/// A one-paragraph description of the parameters.
pub fn describe(p: &FpParams) -> String {
    let ping = p.ping_timeout.unwrap_or(p.t_gossip);
    format!(
        "n = {:?}, T_gossip = {}, ping time {} (3 tries), no crash; network: {} (mean {}; P(delay > T_gossip) = {:.2} %, \
         P(> 2 s) = {:.3} %); start: {}; {} runs of {} per point; seed {}.",
        p.sizes,
        fmt_duration(p.t_gossip),
        fmt_duration(ping),
        p.net,
        fmt_duration(p.net.mean()),
        100.0 * p.net.jitter.tail(p.t_gossip.saturating_sub(p.net.base)),
        100.0 * p.net.jitter.tail(Duration::from_secs(2).saturating_sub(p.net.base)),
        describe_start(p.start),
        p.runs,
        fmt_duration(p.duration),
        p.seed
    )
}

/// The figure: rates vs suspicion time, log scale (zero rates are not drawn).
pub fn chart(rows: &[Row], p: &FpParams) -> Chart {
    let mut c = Chart::new(
        format!("False positives under heavy-tailed delays ({})", p.net),
        "suspicion time T_cleanup + T_MAX_HANG (s)",
        "events per process-hour",
    );
    c.y_log = true;
    c.legend_upper_right = true;
    let mut i = 0;
    for &proto in &p.protocols {
        for &n in &p.sizes {
            let rs: Vec<&Row> = rows.iter().filter(|r| r.protocol == proto && r.n == n).collect();
            let color = PALETTE[i % PALETTE.len()];
            i += 1;
            c.add(Series::new(
                format!("{proto} n={n} false suspicions"),
                color,
                rs.iter().map(|r| (r.suspicion_after(), r.suspicion_rate())).collect(),
            ));
            let mut d = Series::new(
                format!("{proto} n={n} false detections"),
                color,
                rs.iter().map(|r| (r.suspicion_after(), r.failure_rate())).collect(),
            )
            .dashed();
            d.markers = true;
            c.add(d);
        }
    }
    c
}
