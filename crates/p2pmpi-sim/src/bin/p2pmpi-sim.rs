//! `p2pmpi-sim`: the failure-detector simulator's experiments (see the crate docs).
#![forbid(unsafe_code)]

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use p2pmpi_core::fd::{Detector, FdConfig, Protocol, Start};
use p2pmpi_sim::net::{fmt_duration, parse_duration, Jitter, NetConfig};
use p2pmpi_sim::sim::{Sim, SimConfig, StartMode};
use p2pmpi_sim::{detection, false_positives, jel, kmonitor, output, par, reliability};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "p2pmpi-sim",
    version,
    about = "Simulates p2pmpi's gossip failure detector (BRR, DBRR) with virtual time"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Detection time vs n for BRR and DBRR, beside the theory T_cleanup (chapter figure 13).
    Detection(DetectionArgs),
    /// Probability that the detector itself fails vs n (chapter figure 12, FM figure 4).
    Reliability(ReliabilityArgs),
    /// False suspicions and detections per process-hour vs T_cleanup + T_MAX_HANG under random delays.
    FalsePositives(FpArgs),
    /// Runs the three experiments with the defaults of the committed figures and writes them to --out.
    All(AllArgs),
    /// One simulation with chosen crashes; prints what every process saw.
    Run(RunArgs),
    /// How far behind the freshest known counter of a process lags, fault-free (the margin
    /// left before suspicion).
    Lag(LagArgs),
    /// The k-monitor detector (Horita et al.): figures 3, 7, 10 and the traffic vs n.
    #[command(subcommand)]
    Kmonitor(KmCmd),
    /// JEL resource tracking (Drost et al.): the join test (figures 5 and 6), the traffic of
    /// table II, and 10 000 nodes.
    #[command(subcommand)]
    Jel(JelCmd),
    /// Whole replicated jobs (random programs with ANY_SOURCE, probes, wait_any) under random
    /// crashes, freezes, partitions and false suspicions: counts the schedules that pass.
    Replicated(ReplArgs),
    /// Fault-tolerant agreement (agree, then shrink, several rounds) while processes crash,
    /// decided by the launcher's registry: counts the schedules that pass.
    Agree(AgreeArgs),
    /// Jobs with checkpoints under Weibull host failures, through the checkpoint coordinator:
    /// the probability of finishing and the mean run time with replication only, with
    /// rebirth, with rebirth and restarts, beside the advisor's model.
    Checkpoint(CkptArgs),
    /// Replicas that check each other (issue 42): the digest verifier in random schedules with
    /// a flipped bit, a liar or a lying master, random deaths and arrival orders; runs until
    /// --schedules of them sent a corrupted message, and checks that none completed a receive
    /// unnoticed and that no honest run raised an alarm.
    Verify(VerifyArgs),
}

#[derive(Args, Clone)]
struct VerifyArgs {
    /// Run until this many schedules sent a corrupted message (the honest schedules in between
    /// are run too: one in four).
    #[arg(long, default_value_t = 100_000)]
    schedules: u64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Ranks and replicas of every schedule (both, or neither: the schedules cycle through
    /// 2×2, 3×2, 5×2, 2×3, 3×3, 4×3, 3×4 and 2×5).
    #[arg(long, requires = "r")]
    n: Option<usize>,
    #[arg(long, requires = "n")]
    r: Option<usize>,
    /// Messages of each schedule.
    #[arg(long, default_value_t = 30)]
    messages: usize,
    /// Worker threads (default: every core).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Args, Clone)]
struct CkptArgs {
    /// Numbers of ranks.
    #[arg(long, value_delimiter = ',', default_value = "64,1024")]
    ranks: Vec<u32>,
    /// Replication degrees.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    degrees: Vec<u32>,
    /// Weibull shape of host lifetimes (1: exponential).
    #[arg(long, default_value_t = 1.0)]
    shape: f64,
    /// Mean time between failures of one host (e.g. 107.55h).
    #[arg(long, value_parser = parse_duration, default_value = "107.55h")]
    mtbf: Duration,
    /// The job's failure-free run time.
    #[arg(long, value_parser = parse_duration, default_value = "24h")]
    work: Duration,
    /// Cost of one checkpoint.
    #[arg(long, value_parser = parse_duration, default_value = "60s")]
    cost: Duration,
    /// Cost of a restart (default: a checkpoint's).
    #[arg(long, value_parser = parse_duration)]
    restart_cost: Option<Duration>,
    /// Time a reborn replica takes to catch up (default: a checkpoint's cost).
    #[arg(long, value_parser = parse_duration)]
    catch_up: Option<Duration>,
    /// Work between checkpoints (default: the advisor's interval for each size and degree).
    #[arg(long, value_parser = parse_duration)]
    interval: Option<Duration>,
    /// Copies of each checkpoint piece.
    #[arg(long, default_value_t = 2)]
    copies: u32,
    #[arg(long, default_value_t = 100)]
    max_restarts: u32,
    #[arg(long, default_value_t = 200)]
    trials: u32,
    /// Also sweep this many intervals from half to twice the advisor's for the simulator's
    /// optimum (0: none).
    #[arg(long, default_value_t = 0)]
    sweep: usize,
    #[command(flatten)]
    common: Common,
}

fn checkpoint_cmd(a: &CkptArgs) -> Result<()> {
    use p2pmpi_sim::checkpoint::{experiment, Experiment, Mode, Params};
    if !(a.shape.is_finite() && a.shape > 0.0) || a.mtbf.is_zero() || a.work.is_zero() || a.cost.is_zero() {
        bail!("--shape, --mtbf, --work and --cost must be > 0");
    }
    if a.ranks.contains(&0) || a.degrees.contains(&0) || a.copies == 0 || a.trials == 0 {
        bail!("--ranks, --degrees, --copies and --trials must be ≥ 1");
    }
    let cost = a.cost.as_secs_f64();
    let base = Params {
        copies: a.copies,
        restart: a.restart_cost.map_or(cost, |d| d.as_secs_f64()),
        catch_up: a.catch_up.map_or(cost, |d| d.as_secs_f64()),
        max_restarts: a.max_restarts,
        mode: Mode::Restart,
        ..Params::new(1, 1, a.shape, a.mtbf.as_secs_f64(), a.work.as_secs_f64(), 1.0, cost)
    };
    let e = Experiment {
        base,
        ranks: a.ranks.clone(),
        degrees: a.degrees.clone(),
        interval: a.interval.map(|d| d.as_secs_f64()),
        trials: a.trials,
        seed: a.common.seed,
        sweep: a.sweep,
    };
    println!(
        "== checkpoint: Weibull host failures of shape {} and mean {:.0} s, {:.0} s of work, checkpoints of {cost} s, \
         restarts of {} s, {} copies, at most {} restarts; {} trials, seed {}",
        a.shape, base.mtbf, base.work, base.restart, a.copies, a.max_restarts, a.trials, a.common.seed
    );
    let t = Instant::now();
    let (table, sweep) = experiment(&e, a.common.threads());
    print!("{}", table.to_text());
    if let Some(sweep) = sweep {
        println!("\n== the advisor's interval and the simulator's optimum ({} intervals swept)", a.sweep);
        print!("{}", sweep.to_text());
    }
    println!("({:.1} s)", t.elapsed().as_secs_f64());
    Ok(())
}

#[derive(Args, Clone)]
struct AgreeArgs {
    /// How many schedules.
    #[arg(long, default_value_t = 10000)]
    schedules: u64,
    /// Base seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Args, Clone)]
struct ReplArgs {
    /// How many schedules (one seed each).
    #[arg(long, default_value_t = 1000)]
    schedules: u64,
    /// Seed of the first schedule (the others follow).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Ranks and replicas; by default the schedules cycle through 3×2, 2×3, 4×2 and 3×3.
    #[arg(long)]
    n: Option<usize>,
    #[arg(long)]
    r: Option<usize>,
    /// Messages of each program.
    #[arg(long, default_value_t = 30)]
    messages: usize,
    /// At most this many faults per schedule.
    #[arg(long, default_value_t = 3)]
    faults: usize,
    /// Worker threads (default: every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Print every process's state and the launcher's log for each violation.
    #[arg(long)]
    verbose: bool,
    /// Masters never flag a commit acknowledged (replicas keep every copy, as before).
    #[arg(long)]
    no_acked_commits: bool,
    /// A process dropping a connection does not take the data its kernel holds from it
    /// (unsafe with acknowledged commits: shows what the drain is for).
    #[arg(long)]
    no_drain: bool,
    /// Fault-aware jobs (the program handles failures): `--lose` ranks are lost whole on
    /// purpose, receives from them fail; the shapes cycle through 3×2, 4×2, 3×3 and 5×3.
    #[arg(long)]
    fault_aware: bool,
    /// Ranks lost whole in a fault-aware job.
    #[arg(long, default_value_t = 1)]
    lose: usize,
    /// Fault-aware jobs without shared receives (shows the divergence they prevent).
    #[arg(long)]
    no_share: bool,
}

#[derive(Args, Clone)]
struct Common {
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads (default: every core).
    #[arg(long)]
    threads: Option<usize>,
    /// Directory to write NAME.md, NAME.csv and NAME.svg into.
    #[arg(long)]
    out: Option<PathBuf>,
}

impl Common {
    fn threads(&self) -> usize {
        self.threads.unwrap_or_else(par::default_threads).max(1)
    }
}

#[derive(Args, Clone)]
struct NetArgs {
    /// Fixed part of every message's delay.
    #[arg(long, value_parser = parse_duration)]
    base: Option<Duration>,
    /// Random part: none, uniform:MAX, exp:MEAN, pareto:MEAN,SHAPE or lognormal:MEAN,SIGMA.
    #[arg(long)]
    jitter: Option<Jitter>,
    /// Probability that a message is lost.
    #[arg(long)]
    loss: Option<f64>,
    /// Let messages of a link overtake each other (default: FIFO, as TCP).
    #[arg(long)]
    no_fifo: bool,
    /// Delay the start-up communicator with the jitter too (default: base delay only).
    #[arg(long)]
    communicator_jitter: bool,
    /// Start-up: "flat" (FM eq. 4, the default) or "aligned" (every detector at t = 0).
    #[arg(long)]
    start: Option<String>,
    /// Flat tree: interval between the root's sends of the communicator.
    #[arg(long, value_parser = parse_duration)]
    send_interval: Option<Duration>,
    /// Flat tree: a detector starts U(0, SETUP) after its process got the communicator.
    #[arg(long, value_parser = parse_duration)]
    setup: Option<Duration>,
}

impl NetArgs {
    fn net(&self, default: NetConfig) -> Result<NetConfig> {
        let mut n = default;
        if let Some(b) = self.base {
            n.base = b;
        }
        if let Some(j) = self.jitter {
            n.jitter = j;
        }
        if let Some(l) = self.loss {
            if !(0.0..=1.0).contains(&l) {
                bail!("--loss must be a probability");
            }
            n.loss = l;
        }
        if self.no_fifo {
            n.fifo = false;
        }
        if self.communicator_jitter {
            n.communicator_jitter = true;
        }
        Ok(n)
    }

    fn start(&self, default: StartMode) -> Result<StartMode> {
        let (mut si, mut su) = match default {
            StartMode::FlatTree { send_interval, setup } => (send_interval, setup),
            StartMode::Aligned => match StartMode::default() {
                StartMode::FlatTree { send_interval, setup } => (send_interval, setup),
                StartMode::Aligned => unreachable!(),
            },
        };
        if let Some(v) = self.send_interval {
            si = v;
        }
        if let Some(v) = self.setup {
            su = v;
        }
        Ok(match self.start.as_deref() {
            None => match default {
                StartMode::Aligned => StartMode::Aligned,
                StartMode::FlatTree { .. } => StartMode::FlatTree { send_interval: si, setup: su },
            },
            Some("aligned") => StartMode::Aligned,
            Some("flat") | Some("flat-tree") => StartMode::FlatTree { send_interval: si, setup: su },
            Some(s) => bail!("--start {s:?}: expected flat or aligned"),
        })
    }
}

#[derive(Args, Clone)]
struct DetectionArgs {
    /// Numbers of processes.
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<usize>>,
    /// Protocols.
    #[arg(long, value_delimiter = ',')]
    protocols: Option<Vec<Protocol>>,
    /// Runs per (protocol, n).
    #[arg(long)]
    trials: Option<usize>,
    #[arg(long, value_parser = parse_duration)]
    t_gossip: Option<Duration>,
    #[arg(long, value_parser = parse_duration)]
    t_max_hang: Option<Duration>,
    /// The crash comes this long after the start, plus a random part of one gossip cycle.
    #[arg(long, value_parser = parse_duration)]
    warmup: Option<Duration>,
    #[command(flatten)]
    net: NetArgs,
    #[command(flatten)]
    common: Common,
}

impl DetectionArgs {
    fn params(&self) -> Result<detection::DetectionParams> {
        let d = detection::DetectionParams::default();
        Ok(detection::DetectionParams {
            sizes: self.sizes.clone().unwrap_or(d.sizes),
            protocols: self.protocols.clone().unwrap_or(d.protocols),
            trials: self.trials.unwrap_or(d.trials).max(1),
            t_gossip: self.t_gossip.unwrap_or(d.t_gossip),
            t_max_hang: self.t_max_hang.unwrap_or(d.t_max_hang),
            warmup: self.warmup.unwrap_or(d.warmup),
            net: self.net.net(d.net)?,
            start: self.net.start(d.start)?,
            seed: self.common.seed,
            threads: self.common.threads(),
        })
    }
}

#[derive(Args, Clone)]
struct ReliabilityArgs {
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<usize>>,
    #[arg(long, value_delimiter = ',')]
    protocols: Option<Vec<Protocol>>,
    /// Failure probability of each process (the chapter's λt = 0.1 gives 1 − e^−0.1 = 0.0952).
    #[arg(long)]
    f: Option<f64>,
    /// Crude Monte-Carlo draws per (protocol, n); 0 to skip.
    #[arg(long)]
    trials: Option<u64>,
    /// Conditional Monte-Carlo draws per (protocol, n).
    #[arg(long)]
    klm_trials: Option<u64>,
    /// Exact enumeration up to this n (at most 24).
    #[arg(long)]
    exact_max_n: Option<usize>,
    #[command(flatten)]
    common: Common,
}

impl ReliabilityArgs {
    fn params(&self) -> Result<reliability::ReliabilityParams> {
        let d = reliability::ReliabilityParams::default();
        let p = reliability::ReliabilityParams {
            sizes: self.sizes.clone().unwrap_or(d.sizes),
            protocols: self.protocols.clone().unwrap_or(d.protocols),
            f: self.f.unwrap_or(d.f),
            trials: self.trials.unwrap_or(d.trials),
            klm_trials: self.klm_trials.unwrap_or(d.klm_trials).max(1),
            exact_max_n: self.exact_max_n.unwrap_or(d.exact_max_n).min(24),
            seed: self.common.seed,
            threads: self.common.threads(),
        };
        if !(p.f > 0.0 && p.f < 1.0) {
            bail!("--f must be in (0, 1)");
        }
        if p.sizes.iter().any(|&n| n < 2) || p.protocols.contains(&Protocol::Random) {
            bail!("reliability needs n ≥ 2 and a deterministic protocol (BRR, DBRR or RR)");
        }
        Ok(p)
    }
}

#[derive(Args, Clone)]
struct FpArgs {
    /// Numbers of processes.
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<usize>>,
    #[arg(long, value_delimiter = ',')]
    protocols: Option<Vec<Protocol>>,
    #[arg(long, value_parser = parse_duration)]
    t_gossip: Option<Duration>,
    /// Values of T_MAX_HANG.
    #[arg(long, value_delimiter = ',', value_parser = parse_duration)]
    hangs: Option<Vec<Duration>>,
    /// Ping time (default: T_gossip).
    #[arg(long, value_parser = parse_duration)]
    ping_timeout: Option<Duration>,
    /// Virtual duration of one run.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Runs per point.
    #[arg(long)]
    runs: Option<usize>,
    #[command(flatten)]
    net: NetArgs,
    #[command(flatten)]
    common: Common,
}

impl FpArgs {
    fn params(&self) -> Result<false_positives::FpParams> {
        let d = false_positives::FpParams::default();
        Ok(false_positives::FpParams {
            sizes: self.sizes.clone().unwrap_or(d.sizes).into_iter().map(|n| n.max(2)).collect(),
            protocols: self.protocols.clone().unwrap_or(d.protocols),
            t_gossip: self.t_gossip.unwrap_or(d.t_gossip),
            hangs: self.hangs.clone().unwrap_or(d.hangs),
            ping_timeout: self.ping_timeout.or(d.ping_timeout),
            net: self.net.net(d.net)?,
            start: self.net.start(d.start)?,
            duration: self.duration.unwrap_or(d.duration),
            runs: self.runs.unwrap_or(d.runs).max(1),
            seed: self.common.seed,
            threads: self.common.threads(),
        })
    }
}

#[derive(Args, Clone)]
struct AllArgs {
    /// Output directory.
    #[arg(long, default_value = "docs/sim")]
    out: PathBuf,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Args, Clone)]
struct RunArgs {
    #[arg(long, default_value_t = 16)]
    n: usize,
    #[arg(long, default_value = "DBRR")]
    protocol: Protocol,
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    t_gossip: Duration,
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    t_max_hang: Duration,
    /// Crashes as RANK@TIME, comma-separated (e.g. 3@20s,7@20s).
    #[arg(long, value_delimiter = ',')]
    crash: Vec<String>,
    /// How long to simulate (default: until every crash is confirmed everywhere, or 120 s).
    #[arg(long, value_parser = parse_duration)]
    until: Option<Duration>,
    /// Print every event.
    #[arg(long)]
    events: bool,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    net: NetArgs,
}

fn describe_start_short(s: StartMode) -> &'static str {
    match s {
        StartMode::Aligned => "aligned",
        StartMode::FlatTree { .. } => "flat-tree (FM eq. 4)",
    }
}

#[derive(Args, Clone)]
struct LagArgs {
    #[arg(long, value_delimiter = ',', default_value = "16,64,256")]
    sizes: Vec<usize>,
    #[arg(long, value_delimiter = ',', default_value = "BRR,DBRR")]
    protocols: Vec<Protocol>,
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    t_gossip: Duration,
    /// Virtual time of each run (sampled every 37 ms after the first 5 s).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    duration: Duration,
    #[arg(long, default_value_t = 4)]
    runs: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    net: NetArgs,
}

fn lag_cmd(a: &LagArgs) -> Result<()> {
    let net = a.net.net(NetConfig::default())?;
    let start = a.net.start(StartMode::default())?;
    println!("network: {net}; start: {}", detection::describe_start(start));
    let mut table = p2pmpi_sim::table::Table::new(&[
        "protocol",
        "n",
        "cycle (rounds)",
        "suspicion after (rounds)",
        "mean lag",
        "99th pct lag",
        "worst lag",
    ]);
    for &proto in &a.protocols {
        for &n in &a.sizes {
            let fd = FdConfig::new(proto, a.t_gossip, Duration::ZERO);
            let mut hist = vec![0u64; 4096];
            for run in 0..a.runs {
                let mut sim = Sim::new(SimConfig { n, fd, net, start, seed: a.seed.wrapping_add(run) });
                let mut t = Duration::from_secs(5);
                while t < a.duration {
                    sim.run_until(t);
                    for i in (0..n).filter(|&i| sim.is_running(i)) {
                        let h = sim.detector(i).expect("running").heartbeats();
                        let lag = h.iter().map(|&v| h[i].saturating_sub(v)).max().unwrap_or(0);
                        hist[(lag as usize).min(4095)] += 1;
                    }
                    t += Duration::from_millis(37);
                }
            }
            let total: u64 = hist.iter().sum::<u64>().max(1);
            let mean = hist.iter().enumerate().map(|(l, &c)| l as f64 * c as f64).sum::<f64>() / total as f64;
            let mut acc = 0;
            let p99 = hist.iter().position(|&c| {
                acc += c;
                acc as f64 >= 0.99 * total as f64
            });
            let worst = hist.iter().rposition(|&c| c > 0).unwrap_or(0);
            table.row(vec![
                proto.to_string(),
                n.to_string(),
                p2pmpi_core::fd::cycle_len(proto, n).to_string(),
                Detector::new(0, n, fd, Duration::ZERO, Start::at(0), 0).suspicion_rounds().to_string(),
                format!("{mean:.2}"),
                p99.unwrap_or(0).to_string(),
                worst.to_string(),
            ]);
        }
    }
    print!("{}", table.to_text());
    Ok(())
}

fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo run --release -p p2pmpi-sim -- {}", args.join(" "))
}

fn write_out(dir: Option<&Path>, files: Result<Vec<PathBuf>, std::io::Error>) -> Result<()> {
    if let Some(dir) = dir {
        let files = files.with_context(|| format!("writing into {}", dir.display()))?;
        for f in files {
            println!("wrote {}", f.display());
        }
    }
    Ok(())
}

fn detection_cmd(p: &detection::DetectionParams, out: Option<&Path>, command: &str, name: &str) -> Result<f64> {
    println!("== detection: {}", detection::describe(p));
    let t = Instant::now();
    let rows = detection::run(p);
    let secs = t.elapsed().as_secs_f64();
    let table = detection::table(&rows);
    print!("{}", table.to_text());
    println!("({secs:.1} s)\n");
    let bad: usize = rows.iter().map(|r| r.undetected + r.false_events.failures as usize).sum();
    let notes = format!(
        "Columns: *first*, *last*: time from the crash until the first / the last surviving process confirms it; \
         *all mean*: mean over every surviving process of every run (the value the seeds plot); *bound*: \
         `FdConfig::detection_bound` = T_cleanup + T_MAX_HANG + ping time; *false susp.* / *false det.*: \
         suspicions / confirmed failures of live processes over the whole runs. Computed in {secs:.1} s."
    );
    if let Some(dir) = out {
        let files = output::Report {
            name,
            title: &format!("Detection time vs n (chapter figure 13), {} start", describe_start_short(p.start)),
            description: &detection::describe(p),
            command,
            table: &table,
            chart: &detection::chart(&rows, p),
            notes: &notes,
        }
        .write(dir);
        write_out(Some(dir), files)?;
    }
    if bad > 0 {
        eprintln!("warning: {bad} false or missing detections");
    }
    Ok(secs)
}

fn reliability_cmd(p: &reliability::ReliabilityParams, out: Option<&Path>, command: &str, name: &str) -> Result<f64> {
    println!("== reliability: {}", reliability::describe(p));
    let t = Instant::now();
    let rows = reliability::run(p);
    let secs = t.elapsed().as_secs_f64();
    let table = reliability::table(&rows, p);
    print!("{}", table.to_text());
    println!(
        "P_brr(4) = f^4 + 4f^3(1−f) + 4f^2(1−f)^2 = {:.6} (FM §5.2: 0.0095 at f = 0.05); ({secs:.1} s)\n",
        reliability::p_brr4(p.f)
    );
    let notes = format!(
        "*exact*: `exact_detector_failure` of p2pmpi-core (every failure set enumerated). *crude MC*: failures found / \
         draws, as the seeds did it. *conditional MC*: the Karp–Luby–Madras estimator of a union of events (see the \
         crate docs of `p2pmpi_sim::reliability`), with its standard error. *strict*: only a **surviving** process \
         cut off from all its sources counts (the seeds' definition also counts processes that failed themselves). A \
         standard error of 0 means no draw cut off two processes at once: the estimate is then the union bound \
         Σ_k f^|S_k|, exact up to terms of the order of its square. \
         P_brr(4) = f⁴ + 4f³(1−f) + 4f²(1−f)² = {:.6}. Computed in {secs:.1} s.",
        reliability::p_brr4(p.f)
    );
    if let Some(dir) = out {
        let files = output::Report {
            name,
            title: &format!(
                "Failure probability of the detector, f = {} (figure 12 / FM figure 4)",
                reliability::fmt_f(p.f)
            ),
            description: &reliability::describe(p),
            command,
            table: &table,
            chart: &reliability::chart(&rows, p),
            notes: &notes,
        }
        .write(dir);
        write_out(Some(dir), files)?;
    }
    Ok(secs)
}

fn fp_cmd(p: &false_positives::FpParams, out: Option<&Path>, command: &str) -> Result<f64> {
    println!("== false positives: {}", false_positives::describe(p));
    let t = Instant::now();
    let rows = false_positives::run(p);
    let secs = t.elapsed().as_secs_f64();
    let table = false_positives::table(&rows);
    print!("{}", table.to_text());
    println!("({secs:.1} s)\n");
    let notes = format!(
        "*false suspicions*: a live process's counter lagged T_cleanup + T_MAX_HANG and it was pinged; *refuted*: \
         the ping's answer or a fresher heartbeat cleared it; *false detections*: no answer within the ping time, so a \
         live process was declared dead (final). Rates are per process-hour of observation (n × run time). \
         Computed in {secs:.1} s."
    );
    if let Some(dir) = out {
        let files = output::Report {
            name: "false_positives",
            title: "False positives vs T_cleanup under random delays",
            description: &false_positives::describe(p),
            command,
            table: &table,
            chart: &false_positives::chart(&rows, p),
            notes: &notes,
        }
        .write(dir);
        write_out(Some(dir), files)?;
    }
    Ok(secs)
}

fn run_cmd(a: &RunArgs) -> Result<()> {
    let net = a.net.net(NetConfig::default())?;
    let start = a.net.start(StartMode::default())?;
    let fd = FdConfig::new(a.protocol, a.t_gossip, a.t_max_hang);
    let mut sim = Sim::new(SimConfig { n: a.n, fd, net, start, seed: a.seed });
    let mut crashes = Vec::new();
    for c in &a.crash {
        let (rank, at) = c.split_once('@').with_context(|| format!("--crash {c:?}: expected RANK@TIME"))?;
        let rank: usize = rank.trim().parse().with_context(|| format!("--crash {c:?}"))?;
        if rank >= a.n {
            bail!("--crash {c:?}: no process {rank} among {}", a.n);
        }
        let at = parse_duration(at).map_err(anyhow::Error::msg)?;
        sim.crash_at(rank, at);
        crashes.push((rank, at));
    }
    let wall = Instant::now();
    match a.until {
        Some(t) => sim.run_until(t),
        None if crashes.is_empty() => sim.run_until(Duration::from_secs(120)),
        None => {
            let last = crashes.iter().map(|c| c.1).max().unwrap_or_default();
            sim.run_until_detected(last + fd.detection_bound(a.n) * 3 + a.t_gossip * 4);
        }
    }
    println!(
        "{} {} processes, T_gossip {}, T_cleanup {}, bound {}; {}; simulated {} in {:.3} s ({} queue items)",
        a.protocol,
        a.n,
        fmt_duration(a.t_gossip),
        fmt_duration(fd.suspicion_after(a.n)),
        fmt_duration(fd.detection_bound(a.n)),
        net,
        fmt_duration(sim.now()),
        wall.elapsed().as_secs_f64(),
        sim.processed()
    );
    if a.events {
        for r in sim.records() {
            println!("{:>10.3} s  process {:>4}: {:?}", r.at.as_secs_f64(), r.observer, r.event);
        }
    }
    for &(rank, at) in &crashes {
        let conf: Vec<f64> = sim
            .confirmations_of(rank)
            .iter()
            .enumerate()
            .filter(|&(i, _)| sim.crashed_at(i).is_none())
            .filter_map(|(_, t)| t.map(|t| t.saturating_sub(at).as_secs_f64()))
            .collect();
        let alive = (0..a.n).filter(|&i| sim.crashed_at(i).is_none()).count();
        let (mn, mx) = conf.iter().fold((f64::INFINITY, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
        println!(
            "crash of {rank} at {}: confirmed by {}/{} survivors, first after {:.3} s, last after {:.3} s",
            fmt_duration(at),
            conf.len(),
            alive,
            mn,
            mx
        );
    }
    let fe = sim.false_events();
    let st = sim.stats();
    println!(
        "false suspicions {}, refuted {}, false detections {}; messages sent {} (gossip {}, pings {}), lost {}, to crashed {}",
        fe.suspicions, fe.refutations, fe.failures, st.sent, st.gossips, st.pings, st.lost, st.to_crashed
    );
    Ok(())
}

fn replicated_cmd(a: &ReplArgs) -> Result<()> {
    use p2pmpi_sim::replicated::{run, JobConfig, Verdict};
    let shapes = if a.fault_aware { [(3, 2), (4, 2), (3, 3), (5, 3)] } else { [(3, 2), (2, 3), (4, 2), (3, 3)] };
    let threads = a.threads.unwrap_or_else(par::default_threads).max(1);
    let t = Instant::now();
    let shape = |i: u64| match (a.n, a.r) {
        (Some(n), Some(r)) => (n, r),
        (n, r) => {
            let (dn, dr) = shapes[(i % shapes.len() as u64) as usize];
            (n.unwrap_or(dn), r.unwrap_or(dr))
        }
    };
    let results = par::par_map(a.schedules as usize, threads, |i| {
        let seed = a.seed + i as u64;
        let (n, r) = shape(i as u64);
        let cfg = JobConfig {
            n,
            r,
            messages: a.messages,
            faults: a.faults,
            acked_commits: !a.no_acked_commits,
            drain: !a.no_drain,
            fault_aware: a.fault_aware,
            lose: if a.fault_aware { a.lose } else { 0 },
            share: !a.no_share,
        };
        let rep = run(seed, cfg);
        (seed, n, r, rep)
    });
    let (mut ok, mut failed, mut bad, mut takeovers, mut events, mut faults) = (0u64, 0u64, 0u64, 0usize, 0u64, 0usize);
    let (mut commits, mut acked, mut drained) = (0u64, 0u64, 0u64);
    let (mut failed_ops, mut followed, mut left, mut relays) = (0usize, 0usize, 0usize, 0usize);
    for (seed, n, r, rep) in &results {
        relays += rep.relays;
        failed_ops += rep.failed_ops;
        followed += rep.followed;
        left += rep.left;
        commits += rep.commits;
        acked += rep.acked;
        drained += rep.drained;
        takeovers += rep.takeovers;
        events += rep.events;
        faults += rep.faults.len();
        match &rep.verdict {
            Verdict::Completed => ok += 1,
            Verdict::Failed(_) => failed += 1,
            Verdict::Violation(v) => {
                bad += 1;
                if bad <= 10 {
                    println!("VIOLATION seed {seed} ({n} ranks x {r} replicas): {v}");
                    println!("  faults: {:?}", rep.faults);
                    let fa = if a.fault_aware { format!(" --fault-aware --lose {}", a.lose) } else { String::new() };
                    println!("  again: p2pmpi-sim replicated --schedules 1 --seed {seed} --n {n} --r {r} --messages {} --faults {}{fa} --verbose", a.messages, a.faults);
                    if a.verbose {
                        println!("{}", rep.state);
                    }
                }
            }
        }
    }
    println!(
        "replicated jobs: {} schedules ({} faults, {} takeovers, {} events) in {:.1} s: {} completed, {} stopped cleanly (a rank lost every replica), {} violations",
        results.len(),
        faults,
        takeovers,
        events,
        t.elapsed().as_secs_f64(),
        ok,
        failed,
        bad
    );
    println!(
        "commits {commits} ({acked} acknowledged: their copies not kept), data frames taken from dropped connections {drained}"
    );
    if a.fault_aware {
        println!(
            "fault-aware: {failed_ops} failed receives taken, {followed} failures followed, {left} replicas left, {relays} messages relayed"
        );
    }
    println!("passed: {} of {}", ok + failed, results.len());
    if bad > 0 {
        anyhow::bail!("{bad} schedules violated the protocol's guarantees");
    }
    Ok(())
}

#[derive(Subcommand)]
enum KmCmd {
    /// Probability that the monitoring graph is disconnected vs n and k (Horita figure 3).
    Disconnect(KmArgs),
    /// Largest number of simultaneous failures keeping P(disconnected) < 1e-4 (figure 7).
    Tolerance(KmArgs),
    /// Detection latency and flooded notices, 173 processes in two clusters (figure 10).
    Latency(KmArgs),
    /// Bytes per second per process vs n, beside the gossip detector (DBRR).
    Traffic(KmArgs),
    /// All four, written to --out (default docs/sim).
    All(KmArgs),
}

#[derive(Args, Clone)]
struct KmArgs {
    /// Divide the Monte-Carlo draws and protocol runs by this (1: the committed figures).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Crashes simulated for figure 10.
    #[arg(long)]
    runs: Option<usize>,
    /// Largest n of the traffic experiment.
    #[arg(long)]
    max_n: Option<usize>,
    /// Figure 10 with process crashes (connections reset) instead of host crashes.
    #[arg(long)]
    reset: bool,
    #[command(flatten)]
    common: Common,
}

fn kmonitor_cmd(c: &KmCmd, command: &str) -> Result<()> {
    let total = Instant::now();
    let a = match c {
        KmCmd::Disconnect(a) | KmCmd::Tolerance(a) | KmCmd::Latency(a) | KmCmd::Traffic(a) | KmCmd::All(a) => a,
    };
    if a.scale.is_nan() || a.scale < 1.0 {
        bail!("--scale must be ≥ 1");
    }
    let all = matches!(c, KmCmd::All(_));
    let default_out = PathBuf::from("docs/sim");
    let out = a.common.out.as_deref().or(if all { Some(default_out.as_path()) } else { None });
    let threads = a.common.threads();
    if all || matches!(c, KmCmd::Disconnect(_)) {
        km_disconnect(a, out, command)?;
    }
    if all || matches!(c, KmCmd::Tolerance(_)) {
        km_tolerance(a, out, command)?;
    }
    if all || matches!(c, KmCmd::Latency(_)) {
        km_latency(a, all, out, command)?;
    }
    if all || matches!(c, KmCmd::Traffic(_)) {
        km_traffic(a, out, command)?;
    }
    println!("kmonitor: {:.1} s on {threads} threads", total.elapsed().as_secs_f64());
    Ok(())
}

/// `kmonitor disconnect`: Horita figure 3.
fn km_disconnect(a: &KmArgs, out: Option<&Path>, command: &str) -> Result<()> {
    let (threads, seed) = (a.common.threads(), a.common.seed);
    let p = kmonitor::DisconnectParams::new(a.scale, threads, seed);
    let t = Instant::now();
    let rows = kmonitor::disconnect(&p);
    let secs = t.elapsed().as_secs_f64();
    let table = kmonitor::disconnect_table(&rows);
    println!("== k-monitor figure 3 ({} draws per Monte-Carlo point)", p.trials);
    print!("{}", table.to_text());
    println!("({secs:.1} s)\n");
    let notes = format!(
        "*bound*: the expected number of process sets S (k < |S| ≤ n/2) with no monitoring edge to the rest — \
         every member of S chose its k monitors inside S and every other process outside; a disconnected graph \
         has one, so this bounds the probability from above, and is tight while small (exact arithmetic, \
         `disconnect_bound`). *Monte-Carlo*: {} graphs per point drawn with `p2pmpi_core::kmonitor::choose_monitors` \
         (the function a node calls to pick its monitors), disconnected fraction with its 95 % Wilson interval; \
         a count of 0 gives only the interval's upper end, so probabilities below about 4/{} are out of its reach \
         and the bound is the figure. *protocol runs*: {} complete runs of the protocol on the simulated LAN \
         (requests, acks, cancels) whose resulting graph was checked. Computed in {secs:.1} s.",
        p.trials, p.trials, p.protocol_runs
    );
    let chart = kmonitor::disconnect_chart(&rows, &p);
    if let Some(dir) = out {
        let files = output::Report {
            name: "kmonitor_disconnect",
            title: "k-monitor: probability that the monitoring graph is disconnected (Horita figure 3)",
            description: &format!(
                "Each of n processes is monitored by k others chosen uniformly at random; the graph of monitoring \
                 connections (used both ways) must be connected for a failure notice to reach everyone. \
                 Seed {seed}."
            ),
            command,
            table: &table,
            chart: &chart,
            notes: &notes,
        }
        .write(dir);
        write_out(Some(dir), files)?;
    }
    Ok(())
}

/// `kmonitor tolerance`: Horita figure 7.
fn km_tolerance(a: &KmArgs, out: Option<&Path>, command: &str) -> Result<()> {
    let (threads, seed) = (a.common.threads(), a.common.seed);
    let p = kmonitor::ToleranceParams::new(a.scale, threads, seed);
    let t = Instant::now();
    let rows = kmonitor::tolerance(&p);
    let secs = t.elapsed().as_secs_f64();
    let table = kmonitor::tolerance_table(&rows);
    println!("== k-monitor figure 7 ({} draws per point, {} beyond n = 1000)", p.trials, p.trials_large);
    print!("{}", table.to_text());
    println!("({secs:.1} s)\n");
    let notes = format!(
        "*max failures f*: the largest f such that, for every f' ≤ f, fewer than {thr} of the draws (a random \
         monitoring graph, then f' random processes removed at once, before any repair) left the survivors' graph \
         disconnected. One draw serves every f: the processes are put back one by one in a random order into a \
         union-find and the components counted after each. *at f + 1*: the disconnections seen with one more \
         failure, with the 95 % Wilson interval of that probability. With {} draws (n ≤ 1000), the estimate at \
         the threshold rests on about {:.0} events (±{:.0} % at one σ); beyond n = 1000, {} draws \
         ({:.0} events, ±{:.0} %): f is resolved to within the few failures over which the probability crosses \
         10⁻⁴. Computed in {secs:.1} s.",
        p.trials,
        p.trials as f64 * p.threshold,
        100.0 / (p.trials as f64 * p.threshold).sqrt(),
        p.trials_large,
        p.trials_large as f64 * p.threshold,
        100.0 / (p.trials_large as f64 * p.threshold).sqrt(),
        thr = (p.threshold * p.trials as f64).round(),
    );
    let chart = kmonitor::tolerance_chart(&rows, &p);
    if let Some(dir) = out {
        let files = output::Report {
            name: "kmonitor_tolerance",
            title: "k-monitor: simultaneous failures tolerated (Horita figure 7)",
            description: &format!(
                "The largest number of simultaneous process failures for which the monitoring graph of the \
                 survivors stays connected with probability ≥ 1 − 10⁻⁴, vs n and k. Seed {seed}."
            ),
            command,
            table: &table,
            chart: &chart,
            notes: &notes,
        }
        .write(dir);
        write_out(Some(dir), files)?;
    }
    Ok(())
}

/// `kmonitor latency`: Horita figure 10 (both crash kinds with `all`).
fn km_latency(a: &KmArgs, all: bool, out: Option<&Path>, command: &str) -> Result<()> {
    let (threads, seed) = (a.common.threads(), a.common.seed);
    let runs = a.runs.unwrap_or(20).max(1);
    let mut tables = Vec::new();
    let mut first_runs = None;
    let t = Instant::now();
    for reset in [false, true] {
        if !all && reset != a.reset {
            continue;
        }
        let p = kmonitor::LatencyParams { reset, ..kmonitor::LatencyParams::new(runs, threads, seed) };
        let rs = kmonitor::latency(&p);
        let table = kmonitor::latency_table(&rs, p.cfg.k);
        println!("== k-monitor figure 10, {} crashes", if reset { "process (reset)" } else { "host (silent)" });
        print!("{}", table.to_text());
        let all_d: Vec<f64> = rs.iter().flat_map(|r| r.delays.iter().copied()).collect();
        let spread = rs.iter().map(|r| r.delays.last().unwrap_or(&0.0) - r.delays.first().unwrap_or(&0.0));
        let msgs: Vec<u64> = rs.iter().map(|r| r.failure_msgs).collect();
        let summary = format!(
            "{} runs: notified {:.4}–{:.4} s after the crash; spread within a run ≤ {:.2} ms; {}–{} notices \
             (kn = {}, 2kn = {}); {} processes never notified; {} reports about live processes; {}–{} A–C links.",
            rs.len(),
            all_d.iter().copied().fold(f64::INFINITY, f64::min),
            all_d.iter().copied().fold(0.0, f64::max),
            spread.fold(0.0, f64::max) * 1e3,
            msgs.iter().min().unwrap_or(&0),
            msgs.iter().max().unwrap_or(&0),
            p.cfg.k * p.topo.n(),
            2 * p.cfg.k * p.topo.n(),
            rs.iter().map(|r| r.missing).sum::<usize>(),
            rs.iter().map(|r| r.false_reports).sum::<usize>(),
            rs.iter().map(|r| r.wide_links).min().unwrap_or(0),
            rs.iter().map(|r| r.wide_links).max().unwrap_or(0),
        );
        println!("{summary}\n");
        if !reset {
            first_runs = Some(rs.clone());
        }
        tables.push((reset, table, summary, rs));
    }
    let secs = t.elapsed().as_secs_f64();
    if let Some(dir) = out {
        let mut table = p2pmpi_sim::table::Table::new(&[""]);
        let mut notes = String::new();
        for (i, (reset, t, summary, _)) in tables.iter().enumerate() {
            if i == 0 {
                table = t.clone();
                notes.push_str(&format!(
                    "**{}**: {summary}\n\n",
                    if *reset { "Process crashes" } else { "Host crashes" }
                ));
            } else {
                notes.push_str(&format!(
                    "**{}** (connections reset by the operating system):\n\n{}\n{summary}\n\n",
                    if *reset { "Process crashes" } else { "Host crashes" },
                    t.to_markdown()
                ));
            }
        }
        notes.push_str(&format!(
            "Columns: *first* / *median* / *last*: time from the crash until the first / median / last surviving \
             process is notified; *notices*: failure messages flooded; *A–C links*: wide-area connections between \
             the clusters when the crash happened. The plot shows every survivor's latency, sorted, for the first \
             host-crash runs (the seed's figure 10). Computed in {secs:.1} s."
        ));
        let rs = first_runs.unwrap_or_else(|| tables[0].3.clone());
        let chart = kmonitor::latency_chart(&rs, "k-monitor detection latency, n = 173 in 2 clusters (Horita fig. 10)");
        let files = output::Report {
            name: "kmonitor_latency",
            title: "k-monitor: detection latency, 173 processes in two clusters (Horita figure 10)",
            description: &format!(
                "Cluster A: 108 processes; cluster C: 65 behind a NAT (nobody can connect into it); 50 µs one way \
                 inside a cluster, 2.25 ms between them (4.5 ms round trip); k = 3, T_hb = T'_hb = 0.1 s, \
                 T_to = T'_to = 2.1 s, wide-area back-off 1 s. After 10 s of warm-up one random process crashes at \
                 a random phase of T_hb; {runs} runs per crash kind. Seed {seed}."
            ),
            command,
            table: &table,
            chart: &chart,
            notes: &notes,
        }
        .write(dir);
        write_out(Some(dir), files)?;
    }
    Ok(())
}

/// `kmonitor traffic`: bytes per process beside the gossip detector.
fn km_traffic(a: &KmArgs, out: Option<&Path>, command: &str) -> Result<()> {
    let (threads, seed) = (a.common.threads(), a.common.seed);
    let p = kmonitor::TrafficParams::new(a.max_n.unwrap_or(10_000), threads, seed);
    let t = Instant::now();
    let rows = kmonitor::traffic(&p);
    let secs = t.elapsed().as_secs_f64();
    let table = kmonitor::traffic_table(&rows, &p);
    println!("== k-monitor traffic");
    print!("{}", table.to_text());
    println!("({secs:.1} s)\n");
    let notes = format!(
        "*k-monitor*: bytes each process sent per second during a {} window after {} of warm-up (payload of \
         `p2pmpi_core::kmonitor::encode` plus a {}-byte length prefix per message; TCP/IP headers not counted), \
         mean over the processes and the largest; *set-up*: bytes per process during the warm-up (monitor \
         requests, acks, cancels). *DBRR*: the gossip detector sends one table of n 8-byte counters per period to \
         one target, 8n/T_gossip bytes per second per process — what [detection.md](detection.md) measures \
         (its B/s/proc column, T_gossip = 0.5 s). Computed in {secs:.1} s.",
        p2pmpi_sim::net::fmt_duration(p.window),
        p2pmpi_sim::net::fmt_duration(p.warmup),
        kmonitor::FRAME_BYTES
    );
    let chart = kmonitor::traffic_chart(&rows, &p);
    if let Some(dir) = out {
        let files = output::Report {
            name: "kmonitor_traffic",
            title: "k-monitor vs gossip (DBRR): detector traffic per process",
            description: &format!(
                "One LAN of n processes, k = {}, T_hb = {}, T_to = {}; no failure. Seed {seed}.",
                p.cfg.k,
                p2pmpi_sim::net::fmt_duration(p.cfg.t_hb),
                p2pmpi_sim::net::fmt_duration(p.cfg.t_to)
            ),
            command,
            table: &table,
            chart: &chart,
            notes: &notes,
        }
        .write(dir);
        write_out(Some(dir), files)?;
    }
    Ok(())
}

#[derive(Subcommand)]
enum JelCmd {
    /// 1000 nodes on DAS-2 and 2000 on DAS-3 joining one pool: the average perceived pool
    /// size over time for every strategy and the distributed implementation (figures 5, 6).
    Join(JelArgs),
    /// Server and per-node megabytes, 2000 nodes on DAS-3 (table II), with Ibis-sized and
    /// with our own identifiers.
    Traffic(JelArgs),
    /// The large pool: --max-n nodes on DAS-3, the implementations of --only one after the
    /// other (every simulated member holds the whole pool: memory grows as n²).
    Large(JelArgs),
    /// Join, traffic and large, written to --out (default docs/sim).
    All(JelArgs),
}

#[derive(Args, Clone)]
struct JelArgs {
    /// Divide the numbers of nodes by this (1: the seed's scale).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Bytes charged per member identity carried (Ibis identifiers; ours take 15).
    #[arg(long, default_value_t = 256)]
    id_bytes: usize,
    /// Nodes start at random within this.
    #[arg(long, value_parser = parse_duration)]
    spread: Option<Duration>,
    /// Everyone leaves after this (the seed's experiment: 10 min).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// The large run's number of nodes (every simulated member holds the whole pool, so the
    /// memory grows as n²: the tree takes 4.6 GB at 10 000 nodes; the gossips' messages in
    /// flight passed 12 GB there).
    #[arg(long, default_value_t = 3_000)]
    max_n: usize,
    /// The large run's implementations (serial, bootstrap, tree, gossip, adaptive,
    /// distributed). Serial send and peer bootstrap at 5000 nodes held more than 11 GB (every
    /// newcomer's whole state, every event to everyone) and ran for many minutes.
    #[arg(long, value_delimiter = ',', default_value = "tree,gossip,adaptive")]
    only: Vec<jel::Impl>,

    #[command(flatten)]
    common: Common,
}

fn jel_cmd(c: &JelCmd, command: &str) -> Result<()> {
    let total = Instant::now();
    let a = match c {
        JelCmd::Join(a) | JelCmd::Traffic(a) | JelCmd::Large(a) | JelCmd::All(a) => a,
    };
    if a.scale.is_nan() || a.scale < 1.0 {
        bail!("--scale must be ≥ 1");
    }
    let all = matches!(c, JelCmd::All(_));
    let default_out = PathBuf::from("docs/sim");
    let out = a.common.out.as_deref().or(if all { Some(default_out.as_path()) } else { None });
    let (threads, seed) = (a.common.threads(), a.common.seed);
    let spread = a.spread.unwrap_or(Duration::from_secs(5));
    let duration = a.duration.unwrap_or(Duration::from_secs(600));
    let n = |base: usize| ((base as f64 / a.scale).round() as usize).max(2);
    let window = duration.as_secs_f64().min(120.0);
    let setting = |n: usize, net: &jel::Network, ids: usize| {
        format!(
            "{n} nodes start at random within {} and join one pool; {} ({:.0} Mbit/s per node, {:.0} Mbit/s at the \
             server), 0.1 ms latency; {ids} bytes per member identity; everyone leaves at {} (traffic counted until \
             30 s later). Seed {seed}.",
            fmt_duration(spread),
            net.name,
            net.node_bw * 8e-6,
            net.server_bw * 8e-6,
            fmt_duration(duration),
        )
    };
    let notes = |runs: &[jel::JoinRun]| {
        format!(
            "*t 50 % / t 99 %*: first second at which the average perceived pool size (over the nodes started, \
             a node not welcomed yet counting 0) reached that share of the pool; *t all*: every node sees every \
             member. *MB*: bytes sent plus received (10⁶), 4-byte frame per message, TCP/IP headers not counted; \
             *messages*: all sent. The very cores of `p2pmpi_core::jel` with their default parameters (central: \
             flush 20 ms, gossip 1 s, fallback 10 s, heartbeat 30 s; distributed: round 1 s, view 20, up to 512 \
             members per exchange (news, digest differences, 10 at random), timeout 120 s, 3 witnesses). Simulated in {:.1} s.",
            runs.iter().map(|r| r.wall).sum::<f64>()
        )
    };
    let mut das3_runs = None;
    let join_settings: Vec<(usize, jel::Network, String, &str)> = vec![
        (n(1000), jel::Network::DAS2, format!("jel_join_{}", n(1000)), "figure 5"),
        (n(2000), jel::Network::DAS3, format!("jel_join_{}", n(2000)), "figure 6"),
    ];
    if all || matches!(c, JelCmd::Join(_)) {
        for (k, (nn, net, name, fig)) in join_settings.iter().enumerate() {
            let runs = jel::join_all(*nn, *net, a.id_bytes, spread, duration, seed, threads);
            let table = jel::join_table(&runs);
            println!("== JEL join test, {nn} nodes on {} ({fig})", net.name);
            print!("{}", table.to_text());
            println!();
            if let Some(dir) = out {
                let title = format!("JEL join test: {nn} nodes on {} (Drost et al. {fig})", net.name);
                let chart = jel::join_chart(&runs, &title, window);
                let files = output::Report {
                    name,
                    title: &title,
                    description: &setting(*nn, net, a.id_bytes),
                    command,
                    table: &table,
                    chart: &chart,
                    notes: &notes(&runs),
                }
                .write(dir);
                write_out(Some(dir), files)?;
            }
            if k == 1 {
                das3_runs = Some(runs);
            }
        }
    }
    if all || matches!(c, JelCmd::Traffic(_)) {
        let nn = n(2000);
        let net = jel::Network::DAS3;
        let ibis = match das3_runs.take() {
            Some(r) => r,
            None => jel::join_all(nn, net, a.id_bytes, spread, duration, seed, threads),
        };
        let ours = jel::join_all(nn, net, jel::OUR_ID_BYTES, spread, duration, seed, threads);
        let table = jel::traffic_table(&ibis, &ours);
        println!("== JEL traffic, {nn} nodes on DAS-3 (table II)");
        print!("{}", table.to_text());
        println!();
        print!("{}", jel::join_table(&ours).to_text());
        println!();
        if let Some(dir) = out {
            let title = format!("JEL join test with our {}-byte identifiers: {nn} nodes on DAS-3", jel::OUR_ID_BYTES);
            let chart = jel::join_chart(&ours, &title, window);
            let notes = format!(
                "Megabytes (10⁶ bytes) sent plus received over the whole run, by the server and on average by a \
                 node. *seed*: Drost et al. table II (Ibis on DAS-3, a 10-minute run). *Ibis ids*: every member \
                 identity charged {} bytes; *our ids*: the cores' own encoding ({} bytes). The plot is the join test \
                 with our identifiers; its timings:\n\n{}",
                a.id_bytes,
                jel::OUR_ID_BYTES,
                jel::join_table(&ours).to_markdown()
            );
            let files = output::Report {
                name: "jel_traffic",
                title: &format!("JEL traffic: {nn} nodes joining and leaving on DAS-3 (Drost et al. table II)"),
                description: &setting(nn, &net, a.id_bytes),
                command,
                table: &table,
                chart: &chart,
                notes: &notes,
            }
            .write(dir);
            write_out(Some(dir), files)?;
        }
    }
    if all || matches!(c, JelCmd::Large(_)) {
        let nn = n(a.max_n);
        let net = jel::Network::DAS3;
        let runs = jel::join_some(&a.only, nn, net, a.id_bytes, spread, duration, seed, 1);
        let table = jel::join_table(&runs);
        println!("== JEL join test, {nn} nodes on DAS-3");
        print!("{}", table.to_text());
        println!();
        if let Some(dir) = out {
            let title = format!("JEL join test: {nn} nodes on DAS-3");
            let chart = jel::join_chart(&runs, &title, window);
            let files = output::Report {
                name: &format!("jel_join_{nn}"),
                title: &title,
                description: &setting(nn, &net, a.id_bytes),
                command,
                table: &table,
                chart: &chart,
                notes: &notes(&runs),
            }
            .write(dir);
            write_out(Some(dir), files)?;
        }
    }
    println!("jel: {:.1} s on {threads} threads", total.elapsed().as_secs_f64());
    Ok(())
}

fn verify_cmd(a: &VerifyArgs) -> Result<()> {
    use p2pmpi_sim::verify::{run_until, FAULTS, SHAPES};
    let shape = a.n.zip(a.r);
    if shape.is_some_and(|(n, r)| n < 2 || r < 2) || a.messages == 0 || a.schedules == 0 {
        bail!("--n and --r must be ≥ 2, --messages and --schedules ≥ 1");
    }
    let threads = a.threads.unwrap_or_else(par::default_threads).max(1);
    let shapes = match shape {
        Some((n, r)) => format!("{n} ranks × {r} replicas"),
        None => SHAPES.iter().map(|(n, r)| format!("{n}×{r}")).collect::<Vec<_>>().join(", "),
    };
    println!(
        "== verify: {} messages per schedule between random pairs of ranks; n × r: {shapes}; seed {}; until {} schedules sent a corrupted message",
        a.messages, a.seed, a.schedules
    );
    let t0 = Instant::now();
    let t = run_until(a.seed, a.schedules, shape, a.messages, threads);
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "fault         schedules  corrupted sent  corrupted data  stopped  reported  corrected  unverified  masked"
    );
    for (f, x) in FAULTS.iter().zip(&t.by_fault) {
        println!(
            "{:<12} {:>10} {:>15} {:>15} {:>8} {:>9} {:>10} {:>11} {:>7}",
            f.name(),
            x.schedules,
            x.corrupt_sent,
            x.corrupt_data,
            x.stopped,
            x.reported,
            x.corrected,
            x.unverified,
            x.masked
        );
    }
    for (i, (s, c)) in t.by_r.iter().enumerate().filter(|x| x.1 .0 > 0) {
        println!("r = {}: {s} schedules, {c} with a corrupted message sent", i + 2);
    }
    println!(
        "receives: {} verified, {} from a backup (vote), {} unverified ({} corrupted: every honest replica of the sender dead), {} flagged by a reported mismatch and corrupted; {} mismatches, {} fences",
        t.verified, t.from_backup, t.unverified, t.unverified_corrupt, t.flagged_corrupt, t.mismatches, t.fences
    );
    println!(
        "r ≥ 3, vote, nobody dying, a corrupted message sent: {} schedules, {} with the true content delivered everywhere and the faulty replica fenced",
        t.vote_all_alive.0, t.vote_all_alive.1
    );
    println!(
        "verify: {} schedules ({} with a corrupted message sent, {} events) in {secs:.1} s on {threads} threads: {} honest runs with an alarm, {} schedules with a violation",
        t.schedules,
        t.corrupted(),
        t.events,
        t.honest_alarms,
        t.violations
    );
    for (i, cfg, why) in &t.failures {
        println!("  VIOLATION schedule {i} ({cfg:?}):");
        for w in why {
            println!("    {w}");
        }
    }
    if t.violations > 0 || t.honest_alarms > 0 {
        std::process::exit(1);
    }
    Ok(())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let command = command_line();
    match &cli.cmd {
        Cmd::Detection(a) => {
            detection_cmd(&a.params()?, a.common.out.as_deref(), &command, "detection")?;
        }
        Cmd::Reliability(a) => {
            reliability_cmd(&a.params()?, a.common.out.as_deref(), &command, "reliability")?;
        }
        Cmd::FalsePositives(a) => {
            fp_cmd(&a.params()?, a.common.out.as_deref(), &command)?;
        }
        Cmd::Run(a) => run_cmd(a)?,
        Cmd::Lag(a) => lag_cmd(a)?,
        Cmd::Replicated(a) => replicated_cmd(a)?,
        Cmd::Checkpoint(a) => checkpoint_cmd(a)?,
        Cmd::Verify(a) => verify_cmd(a)?,
        Cmd::Agree(a) => {
            let t0 = Instant::now();
            let t = p2pmpi_sim::agreement::run_many(a.seed, a.schedules);
            println!(
                "agreement: {} schedules ({} crashes, {} while an agreement was open, {} contributions refused as fenced, {} decisions) in {:.1} s: {} passed, {} violations",
                t.schedules,
                t.crashed,
                t.during,
                t.refused,
                t.decisions,
                t0.elapsed().as_secs_f64(),
                t.passed,
                t.schedules - t.passed
            );
            for (seed, why) in &t.failures {
                println!("  seed {seed}: {why}");
            }
            if t.passed != t.schedules {
                std::process::exit(1);
            }
        }
        Cmd::Kmonitor(c) => kmonitor_cmd(c, &command)?,
        Cmd::Jel(c) => jel_cmd(c, &command)?,
        Cmd::All(a) => {
            let threads = a.threads.unwrap_or_else(par::default_threads).max(1);
            let t = Instant::now();
            let d = detection::DetectionParams { seed: a.seed, threads, ..Default::default() };
            let t1 = detection_cmd(&d, Some(&a.out), &command, "detection")?;
            // The analysis' ideal: every detector started at the same instant.
            let d = detection::DetectionParams { start: StartMode::Aligned, ..d };
            let t1 = t1 + detection_cmd(&d, Some(&a.out), &command, "detection_aligned")?;
            let r = reliability::ReliabilityParams { seed: a.seed, threads, ..Default::default() };
            let t2 = reliability_cmd(&r, Some(&a.out), &command, "reliability")?;
            // The chapter's figure 12 caption: δ = 1, λt = 0.1, i.e. f = 1 − e^−0.1.
            let r = reliability::ReliabilityParams { f: 1.0 - (-0.1f64).exp(), ..r };
            let t2 = t2 + reliability_cmd(&r, Some(&a.out), &command, "reliability_chapter")?;
            let f = false_positives::FpParams { seed: a.seed, threads, ..Default::default() };
            let t3 = fp_cmd(&f, Some(&a.out), &command)?;
            println!(
                "all: {:.1} s (detection {t1:.1} s, reliability {t2:.1} s, false positives {t3:.1} s) on {threads} threads",
                t.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}
