//! The options of a job (`p2pmpirun`'s arguments) and what follows from them alone: the
//! program to run, the failure detector's plan, the `-x` variables, the allowed hosts. Every
//! launcher reads them (local, grid, spawned jobs).

use anyhow::{bail, Context, Result};
use clap::Parser;
use p2pmpi_wire::control;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `--checkpoint-copies`' default (a job's record written before the option has none).
fn default_checkpoint_copies() -> u32 {
    2
}

/// Options of `p2pmpirun` (kept in a job's record for `--resume`).
#[derive(Parser, Debug, Clone, serde::Serialize, serde::Deserialize)]
#[command(
    name = "p2pmpirun",
    version,
    about = "Run an MPI program on N processes",
    override_usage = "p2pmpirun -n N [OPTIONS] PROGRAM [ARGS...]"
)]
pub struct RunArgs {
    /// Number of MPI processes (also -np).
    #[arg(short = 'n', long = "np", value_name = "N")]
    pub n: Option<i64>,
    /// Prefix every output line with the rank that printed it: `[rank] line`.
    #[arg(short = 't', long = "tag-output")]
    pub tag_output: bool,
    /// Replicas per rank, for fault tolerance: every rank (rank 0 too) runs as R processes,
    /// only one of which (its master) is shown on the output; the job goes on as long as every
    /// rank keeps a replica. On the grid the replicas of a rank run on R different hosts; with
    /// --local they all run on this host and protect against process crashes only.
    #[arg(short = 'r', value_name = "R", default_value_t = 1)]
    pub replicas: u32,
    /// Allocation strategy: spread (also: scatter) or concentrate (also: gather).
    #[arg(short = 'a', value_name = "STRATEGY", default_value = "spread")]
    pub strategy: String,
    /// Input files to stage with the program (comma-separated, repeatable; http:// URLs are
    /// fetched by each peer itself).
    #[arg(short = 'l', value_name = "FILES", value_delimiter = ',')]
    pub files: Vec<String>,
    /// Seconds to keep looking for enough peers.
    #[arg(short = 'w', value_name = "SECONDS", default_value_t = 10)]
    pub wait: u64,
    /// Run every process on this host, without the peer daemon.
    #[arg(long, conflicts_with = "grid")]
    pub local: bool,
    /// Run on the grid through this host's peer daemon (the default when one is running).
    #[arg(long)]
    pub grid: bool,
    /// Run a local job's processes confined as a peer confines a grid job (Landlock: read the
    /// system, write only the current directory and the job's own temporary and segment
    /// directories; the limits JOB_* of the configuration; no_new_privs). Grid jobs are
    /// always confined by the peers that run them.
    #[arg(long)]
    pub confine: bool,
    /// Report each start-up step (reservation, staging with cache hits, launch) on stderr.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Reserve and show where the processes would run, then release the hosts.
    #[arg(long = "dry-run")]
    pub dry_run: bool,
    /// Seconds to wait for every process to register before giving up.
    #[arg(long = "startup-timeout", default_value_t = 60, value_name = "SECONDS")]
    pub startup_timeout: u64,
    /// The failure detector for this application: gossip with DBRR, BRR, RR or RANDOM, the
    /// k-monitor detector (kmonitor), or off (default: GOSSIP_PROTOCOL of the configuration,
    /// DBRR).
    #[arg(long = "fd", value_name = "PROTOCOL")]
    pub fd: Option<String>,
    /// k-monitor detector: monitors per process (default: K_MONITORS, 4).
    #[arg(long = "k", value_name = "K")]
    pub k: Option<u32>,
    /// k-monitor detector: heartbeat period in milliseconds (default: T_HB, 100).
    #[arg(long = "t-hb", value_name = "MS")]
    pub t_hb: Option<u64>,
    /// k-monitor detector: silence after which a monitored process has failed, milliseconds
    /// (default: T_TO, 1000).
    #[arg(long = "t-to", value_name = "MS")]
    pub t_to: Option<u64>,
    /// k-monitor detector: a monitor whose time-out expires asks a second monitor before it
    /// reports the failure (fewer false detections under load, up to one T_TO later).
    #[arg(long = "confirm")]
    pub confirm: bool,
    /// k-monitor detector: heartbeat period between clusters (subnets), milliseconds
    /// (default: T_HB_WIDE, else --t-hb).
    #[arg(long = "t-hb-wide", value_name = "MS")]
    pub t_hb_wide: Option<u64>,
    /// k-monitor detector: time-out between clusters, milliseconds (default: T_TO_WIDE, else
    /// --t-to).
    #[arg(long = "t-to-wide", value_name = "MS")]
    pub t_to_wide: Option<u64>,
    /// k-monitor detector: connections to another cluster refused (NAT, firewall) before a
    /// process leaves it to that cluster to connect (default: WIDE_REFUSALS, 3).
    #[arg(long = "wide-refusals", value_name = "N")]
    pub wide_refusals: Option<u32>,
    /// The failure detector's gossip period in milliseconds (default: T_GOSSIP, 500).
    #[arg(long = "t-gossip", value_name = "MS")]
    pub t_gossip: Option<u64>,
    /// Extra time before a silent process is suspected, milliseconds (default: T_MAX_HANG, 5000).
    #[arg(long = "t-max-hang", value_name = "MS")]
    pub t_max_hang: Option<u64>,
    /// Encrypt the MPI messages: every data connection seals what follows its opening with
    /// ChaCha20-Poly1305 (keys derived from the job key), so that whoever sees the traffic
    /// can neither read nor alter it. Costs latency and bandwidth (see the README).
    #[arg(long)]
    pub encrypt: bool,
    /// Set an environment variable in every process, remote ones included: `-x VAR=VALUE`,
    /// or `-x VAR` for its value here (repeatable).
    #[arg(short = 'x', value_name = "VAR[=VALUE]")]
    pub env: Vec<String>,
    /// Stop the job when it runs longer than SECONDS (counted from the start of its processes):
    /// every process is stopped and p2pmpirun exits with status 124.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<u64>,
    /// Write each rank's output to DIR/rank.N/stdout and DIR/rank.N/stderr instead of the
    /// terminal (DIR is created; files of an earlier run are replaced).
    #[arg(long = "output-filename", value_name = "DIR")]
    pub output_filename: Option<PathBuf>,
    /// Accepted for mpirun compatibility. A local run may always start more processes than
    /// this host has cores; on the grid a peer never runs more than its owner's
    /// MAX_PROCESSES_PER_JOB.
    #[arg(long)]
    pub oversubscribe: bool,
    /// With --local, pin each process to one CPU: `core` binds process K (slot K: rank
    /// K / R, replica K % R) to the K-th CPU this launcher may use, round-robin; `none` (the
    /// default) leaves placement to the scheduler. Default: P2PMPI_BIND_TO, else none.
    #[arg(long = "bind-to", value_name = "core|none")]
    pub bind_to: Option<String>,
    /// Only these peers of the grid may be reserved (addresses or host names, comma-separated,
    /// repeatable); this host runs rank 0 all the same.
    #[arg(short = 'H', long = "host", value_name = "HOSTS", value_delimiter = ',')]
    pub hosts: Vec<String>,
    /// Like -H, the peers read from FILE: one host per line (`#` starts a comment; words after
    /// the host, such as slots=4, are ignored).
    #[arg(long, value_name = "FILE")]
    pub hostfile: Option<PathBuf>,
    /// Bring back the files that remote ranks wrote in their job directory and whose path
    /// matches PATTERN (relative; `*` and `?` within a name, `**` for any depth; repeatable)
    /// into the current directory, before the job directory is removed.
    #[arg(long, value_name = "PATTERN")]
    pub collect: Vec<String>,
    /// Keep the job's checkpoints (`Universe::checkpoint`) in DIR (its earlier generations are
    /// deleted at the start; on a grid, a directory every host reaches, such as a local grid's).
    /// Default: a directory of its own under ./p2pmpi-checkpoints, removed when the job succeeds.
    #[arg(long = "checkpoint-dir", value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// When a rank loses every copy (killed by a signal: at -r 1 its process, at -r R every
    /// replica; on a grid also frozen, or lost with its host), stop the others and restart
    /// every rank from the last complete checkpoint, up to N times (with --local from the
    /// beginning without one; on a grid on hosts reserved again); the output goes on without
    /// repeating lines. 0 (the default): the job fails.
    #[arg(long = "max-restarts", value_name = "N", default_value_t = 0)]
    pub max_restarts: u32,
    /// On the grid: keep each process's checkpoint (`Universe::checkpoint`) on K of the job's
    /// hosts other than its own, through their FT service, encrypted with a key of the job's
    /// (0: no checkpoints on the grid).
    #[arg(long = "checkpoint-copies", value_name = "K", default_value_t = 2)]
    #[serde(default = "default_checkpoint_copies")]
    pub checkpoint_copies: u32,
    /// Restart the local or grid job whose checkpoints are in DIR (started with
    /// --checkpoint-dir or --max-restarts, its launcher dead) from its last complete
    /// checkpoint, with the program, arguments and options it was started with; the lines
    /// it already showed are not shown again. No program is given.
    #[arg(long, value_name = "DIR", conflicts_with = "checkpoint_dir")]
    #[serde(default)]
    pub resume: Option<PathBuf>,
    /// The program to run, then its arguments.
    #[arg(
        required_unless_present = "resume",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    pub command: Vec<String>,
}

/// The failure detector's settings for one application (sent to every process with the
/// communicator).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdPlan {
    pub protocol: p2pmpi_core::fd::Protocol,
    pub t_gossip: Duration,
    pub t_max_hang: Duration,
    /// The k-monitor detector instead of gossip.
    pub kmonitor: Option<KmonitorPlan>,
}

/// The k-monitor detector's settings for one application (`--fd kmonitor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KmonitorPlan {
    pub k: u32,
    pub t_hb: Duration,
    pub t_to: Duration,
    pub confirm: bool,
    /// `T'_hb`, `T'_to` and the refusals between clusters (Horita's wide-area extension).
    pub wide_t_hb: Duration,
    pub wide_t_to: Duration,
    pub wide_refusals: u32,
}

/// The subnet prefix length the k-monitor detector gives an address (its cluster: Horita's
/// wide-area extension): loopback addresses are one cluster (/8), other IPv4 addresses are
/// grouped by /24, IPv6 addresses by /64.
pub fn cluster_prefix(addr: &str) -> u8 {
    match addr.parse::<std::net::SocketAddr>().map(|a| a.ip()) {
        Ok(std::net::IpAddr::V4(ip)) if ip.is_loopback() => 8,
        Ok(std::net::IpAddr::V4(_)) => 24,
        Ok(std::net::IpAddr::V6(_)) => 64,
        Err(_) => 24,
    }
}

impl FdPlan {
    /// The plan from the options, falling back on the configuration's `GOSSIP_PROTOCOL`,
    /// `T_GOSSIP` and `T_MAX_HANG`; `None` with `--fd off`.
    pub fn from_options(opts: &RunArgs, cfg: &p2pmpi_peer::config::Config) -> Result<Option<FdPlan>> {
        let (protocol, kmonitor) = match opts.fd.as_deref() {
            Some(v) if v.eq_ignore_ascii_case("off") || v.eq_ignore_ascii_case("none") => return Ok(None),
            Some(v) if v.eq_ignore_ascii_case("kmonitor") || v.eq_ignore_ascii_case("k-monitor") => {
                (cfg.gossip_protocol, true)
            }
            Some(v) => (v.parse().map_err(|e: String| anyhow::anyhow!("--fd: {e}, KMONITOR or off"))?, false),
            None => (cfg.gossip_protocol, cfg.kmonitor),
        };
        let kmonitor = if kmonitor {
            let k = opts.k.unwrap_or(cfg.k_monitors);
            let t_hb = opts.t_hb.unwrap_or(cfg.t_hb_ms);
            let t_to = opts.t_to.unwrap_or(cfg.t_to_ms);
            if k == 0 {
                bail!("--k must be at least 1");
            }
            if t_hb == 0 {
                bail!("--t-hb must be at least 1 ms");
            }
            if t_to <= t_hb {
                bail!("--t-to ({t_to} ms) must be longer than --t-hb ({t_hb} ms)");
            }
            let wide_t_hb = opts.t_hb_wide.or(cfg.t_hb_wide_ms).unwrap_or(t_hb);
            let wide_t_to = opts.t_to_wide.or(cfg.t_to_wide_ms).unwrap_or(t_to);
            let wide_refusals = opts.wide_refusals.unwrap_or(cfg.wide_refusals);
            if wide_t_hb == 0 {
                bail!("--t-hb-wide must be at least 1 ms");
            }
            if wide_t_to <= wide_t_hb {
                bail!("--t-to-wide ({wide_t_to} ms) must be longer than --t-hb-wide ({wide_t_hb} ms)");
            }
            if wide_refusals == 0 {
                bail!("--wide-refusals must be at least 1");
            }
            Some(KmonitorPlan {
                k,
                t_hb: Duration::from_millis(t_hb),
                t_to: Duration::from_millis(t_to),
                confirm: opts.confirm,
                wide_t_hb: Duration::from_millis(wide_t_hb),
                wide_t_to: Duration::from_millis(wide_t_to),
                wide_refusals,
            })
        } else {
            if opts.k.is_some()
                || opts.t_hb.is_some()
                || opts.t_to.is_some()
                || opts.confirm
                || opts.t_hb_wide.is_some()
                || opts.t_to_wide.is_some()
                || opts.wide_refusals.is_some()
            {
                bail!(
                    "--k, --t-hb, --t-to, --confirm, --t-hb-wide, --t-to-wide and --wide-refusals are options of \
                     the k-monitor detector: add --fd kmonitor"
                );
            }
            None
        };
        let t_gossip = opts.t_gossip.unwrap_or(cfg.t_gossip_ms);
        if t_gossip == 0 {
            bail!("--t-gossip must be at least 1 ms");
        }
        Ok(Some(FdPlan {
            protocol,
            t_gossip: Duration::from_millis(t_gossip),
            t_max_hang: Duration::from_millis(opts.t_max_hang.unwrap_or(cfg.t_max_hang_ms)),
            kmonitor,
        }))
    }

    /// The time after which a silent process is reported: `T_cleanup + T_MAX_HANG` for `n`
    /// processes with gossip; `T_to + T_hb` with the k-monitor detector (twice `T_to` with
    /// confirmation).
    pub fn suspicion_after(&self, n: usize) -> Duration {
        match self.kmonitor {
            Some(k) => k.t_to * (1 + k.confirm as u32) + k.t_hb,
            None => p2pmpi_core::fd::FdConfig::new(self.protocol, self.t_gossip, self.t_max_hang).suspicion_after(n),
        }
    }

    /// The detector's name for messages.
    pub fn name(&self) -> String {
        match self.kmonitor {
            Some(k) if (k.wide_t_hb, k.wide_t_to) != (k.t_hb, k.t_to) => format!(
                "k-monitor (k = {}, T_hb = {:?}, T_to = {:?}; between subnets T'_hb = {:?}, T'_to = {:?})",
                k.k, k.t_hb, k.t_to, k.wide_t_hb, k.wide_t_to
            ),
            Some(k) => format!("k-monitor (k = {}, T_hb = {:?}, T_to = {:?})", k.k, k.t_hb, k.t_to),
            None => format!("{} gossip (T_gossip = {:?})", self.protocol, self.t_gossip),
        }
    }

    pub(crate) fn setup(&self, addrs: Vec<String>, delta_t: Duration) -> control::FdSetup {
        let kmonitor = self.kmonitor.map(|k| control::KmonitorSetup {
            k: k.k,
            t_hb_us: k.t_hb.as_micros() as u64,
            t_to_us: k.t_to.as_micros() as u64,
            confirm: k.confirm,
            prefixes: addrs.iter().map(|a| cluster_prefix(a)).collect(),
            wide_t_hb_us: k.wide_t_hb.as_micros() as u64,
            wide_t_to_us: k.wide_t_to.as_micros() as u64,
            wide_refusals: k.wide_refusals,
        });
        control::FdSetup {
            addrs,
            protocol: if kmonitor.is_some() { "KMONITOR".into() } else { self.protocol.to_string() },
            t_gossip_us: self.t_gossip.as_micros() as u64,
            t_max_hang_us: self.t_max_hang.as_micros() as u64,
            delta_t_us: delta_t.as_micros() as u64,
            kmonitor,
        }
    }
}

/// Finds the program: a path, or a name looked up in `PATH`.
pub(crate) fn resolve_program(prog: &str) -> Result<PathBuf> {
    let is_exec = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        p.is_file() && p.metadata().map(|m| m.permissions().mode() & 0o111 != 0).unwrap_or(false)
    };
    if prog.contains('/') {
        let p = PathBuf::from(prog);
        if !p.exists() {
            bail!("program '{prog}' not found");
        }
        if !is_exec(&p) {
            bail!("program '{prog}' is not an executable file");
        }
        return Ok(p);
    }
    for dir in std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default() {
        let cand = dir.join(prog);
        if is_exec(&cand) {
            return Ok(cand);
        }
    }
    bail!("program '{prog}' not found in PATH (give a path such as ./{prog})")
}

/// The variables of `-x`: `VAR=VALUE`, or `VAR` with its value in this environment.
pub(crate) fn extra_env(opts: &RunArgs) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for x in &opts.env {
        let (k, v) = match x.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => match std::env::var(x) {
                Ok(v) => (x.clone(), v),
                Err(_) => bail!("-x {x}: {x} is not set here (give its value: -x {x}=VALUE)"),
            },
        };
        if k.is_empty() || k.contains('\0') || v.contains('\0') {
            bail!("-x {x}: not a variable (want VAR=VALUE or VAR)");
        }
        if k.starts_with("P2PMPI_") {
            bail!("-x {x}: the P2PMPI_ variables are set by the launcher");
        }
        out.retain(|(o, _)| *o != k);
        out.push((k, v));
    }
    Ok(out)
}

/// The hosts of `-H` and `--hostfile` (empty: any peer of the grid).
pub(crate) fn allowed_hosts(opts: &RunArgs) -> Result<Vec<String>> {
    let mut hosts: Vec<String> = Vec::new();
    for h in &opts.hosts {
        let h = h.trim();
        if h.is_empty() || h.contains(char::is_whitespace) {
            bail!("-H/--host: {h:?} is not a host name or address");
        }
        hosts.push(h.to_string());
    }
    if let Some(file) = &opts.hostfile {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("--hostfile: cannot read {}", file.display()))?;
        let before = hosts.len();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            if let Some(h) = line.split_whitespace().next() {
                hosts.push(h.to_string());
            }
        }
        if hosts.len() == before {
            bail!("--hostfile {}: no host in it", file.display());
        }
    }
    hosts.sort();
    hosts.dedup();
    Ok(hosts)
}
