//! The local launcher: runs the N processes of a job on this host.
//!
//! Start-up follows the seeds' execution preamble: each process binds its data port and
//! registers (rank, address) on the launcher's control port, proving in a challenge-response
//! on the job's key ([`p2pmpi_wire::auth`]; the key is drawn here and given to the children
//! in their environment, never sent on a socket) that it belongs to the job; once all have
//! registered the launcher sends every process the communicator table. The control connections stay open: a process reports `Finalized`
//! or `Abort` on it, and its closing tells that the process is gone.
//!
//! Failure handling: when a process dies (signal, non-zero status, or success without
//! finalizing while it had initialized), the launcher reports which rank and how, stops the
//! others (SIGTERM, then SIGKILL after a grace period) and exits with that process's status.
//! Children are started with `PR_SET_PDEATHSIG`, so they cannot outlive a launcher that is
//! itself killed.
//!
//! Replication (`-r R`, SPEC §10): every rank, rank 0 included, runs as R replicas, each a
//! process of its own — a *slot* of the job's [`Layout`]. Each process gets its slot as
//! `P2PMPI_RANK`, the number of ranks as `P2PMPI_SIZE` and R as `P2PMPI_REPLICAS`; it registers
//! with its slot, and the communicator table has one address per slot. The launcher is the
//! job's supervisor ([`Fencing`]): processes only suspect one another, the launcher declares
//! deaths, and a replica declared dead is out for good (fencing). The death of a replica whose
//! rank keeps another one is reported and the job goes on; the job stops when a rank loses
//! its last replica. Only each rank's master is shown on the output ([`crate::output`]); only
//! rank 0's first replica reads the terminal's input. Run locally, the replicas of a rank
//! share this host: they protect against process crashes only; on the grid they run on
//! different hosts.

use crate::output::Output;
use anyhow::{bail, Context, Result};
use clap::Parser;
use p2pmpi::bootstrap::env;
use p2pmpi_core::agreement;
use p2pmpi_core::fencing::{Declaration, Grant, Supervisor};
use p2pmpi_core::replication::spawn::{Ask, SpawnLedger};
use p2pmpi_core::replication::Layout;
use p2pmpi_peer::server::{self, Framing, Gate, GateOptions, Limits, Pending, Refusal};
use p2pmpi_wire::auth::JobKey;
use p2pmpi_wire::control::{self, Control};
use p2pmpi_wire::grid::JobNoticeKind;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an abort caused by a lost peer waits for that peer's own exit to be reported.
const ROOT_CAUSE_GRACE: Duration = Duration::from_millis(500);

/// With replicas: how long the replicas still running are waited for once everything else
/// ended and each of their ranks has a replica that finished (frozen, or far behind: their
/// output is already shown and no process needs them any more).
const REDUNDANT_GRACE: Duration = Duration::from_secs(1);

/// Once the job was stopped, how long the end of its processes is waited for. A process on
/// a host cut off by the network never confirms it: its peer daemon's connection carries
/// nothing, and no error comes until TCP gives up retransmitting the stop (about 15 minutes
/// with Linux's defaults). Past this, the launcher gives up on it, says so, and ends. The
/// stop sends SIGKILL after 1 s.
pub(crate) const STOP_CONFIRM: Duration = Duration::from_secs(5);

/// Options of `p2pmpirun`.
#[derive(Parser, Debug, Clone)]
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
    /// The program to run, then its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROGRAM")]
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

    fn setup(&self, addrs: Vec<String>, delta_t: Duration) -> control::FdSetup {
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

/// Entry point shared by `p2pmpirun` and `p2pmpi run`. Returns the exit status.
pub fn main_with_args(name: &str, args: &[String]) -> i32 {
    // Accept Open MPI's `-np N` spelling.
    let mut argv = vec![name.to_string()];
    let mut in_prog = false;
    for a in args {
        if !in_prog && a == "-np" {
            argv.push("--np".into());
        } else {
            if !in_prog
                && !a.starts_with('-')
                && argv.last().is_some_and(|l| {
                    !matches!(
                        l.as_str(),
                        "-n" | "--np"
                            | "--startup-timeout"
                            | "-r"
                            | "-a"
                            | "-l"
                            | "-w"
                            | "--fd"
                            | "--t-gossip"
                            | "--t-max-hang"
                            | "--k"
                            | "--t-hb"
                            | "--t-to"
                            | "--t-hb-wide"
                            | "--t-to-wide"
                            | "--wide-refusals"
                            | "-x"
                            | "--timeout"
                            | "--output-filename"
                            | "-H"
                            | "--host"
                            | "--hostfile"
                            | "--collect"
                    )
                })
            {
                in_prog = true;
            }
            argv.push(a.clone());
        }
    }
    let opts = match RunArgs::try_parse_from(&argv) {
        Ok(o) => o,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    // The program is the first argument that is not an option: one that starts with '-' is
    // an option p2pmpirun does not know, not a program.
    if let Some(first) = opts.command.first().filter(|a| a.starts_with('-')) {
        eprintln!("{name}: error: unknown option '{first}' (see {name} --help)");
        return 2;
    }
    match run(name, opts) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{name}: error: {e:#}");
            2
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

/// What happens to a job's processes. A `rank` here is a slot of the job's [`Layout`] (the
/// rank itself without replicas).
pub(crate) enum Event {
    /// Nothing arrived (the loop re-judges the processes).
    Tick,
    Registered {
        rank: usize,
        addr: String,
        fd_addr: String,
        tolerant: bool,
        /// The pid the process reports (the launcher's own child pid is kept when known).
        pid: u32,
        conn: Writer,
    },
    /// A process's failure detector confirmed the failure of another.
    PeerFailed {
        rank: usize,
        failed: usize,
        detail: String,
    },
    Finalized {
        rank: usize,
    },
    Abort {
        rank: usize,
        code: i32,
        message: String,
        lost: Option<u32>,
    },
    ControlClosed {
        rank: usize,
    },
    Exited {
        rank: usize,
        status: ExitStatus,
    },
    BadClient {
        detail: String,
    },
    /// A fault-aware program's process contributes to an agreement
    /// ([`p2pmpi_core::agreement`]).
    Agree {
        rank: usize,
        key: agreement::Key,
        members: Vec<u32>,
        flag: u32,
    },
    /// A fault-aware program's process revokes a communicator.
    Revoke {
        rank: usize,
        comm: u64,
    },
    /// Slots lost with their host (its peer daemon stopped answering), or refused there.
    Lost {
        ranks: Vec<usize>,
        why: String,
    },
    /// Another job of the universe declared these universe slots dead (replicated spawns).
    ForeignDead {
        slots: Vec<u32>,
    },
    /// A process of another job of the universe suspects this job's slot `slot`.
    ForeignSuspect {
        slot: usize,
        why: String,
    },
    /// The root of a `spawn` asks for new processes ([`Control::Spawn`]).
    Spawn {
        rank: usize,
        apps: Vec<control::SpawnApp>,
        parents: Vec<(u32, String)>,
        ctx: u32,
    },
}

/// Starts the processes a job's `spawn` asks for: the programs, the parents (universe id,
/// data address), the intercommunicator's context; answers the first child's universe id.
pub(crate) type Spawner<'a> =
    dyn Fn(&[control::SpawnApp], &[(u32, String)], u32) -> std::result::Result<u32, String> + 'a;

#[derive(Default)]
pub(crate) struct RankState {
    pub(crate) pid: u32,
    pub(crate) registered: bool,
    finalized: bool,
    ctrl_closed: bool,
    exit: Option<ExitStatus>,
    judged: bool,
    /// It stopped because it lost another rank: its exit is a consequence, not a cause.
    lost_peer: Option<u32>,
    /// Its end was never confirmed ([`STOP_CONFIRM`]): it may still run, out of reach.
    pub(crate) unconfirmed: bool,
}

/// The writing half of a process's control connection, shared by the event loop and the
/// thread that answers the process's lease renewals.
pub(crate) type Writer = Arc<Mutex<TcpStream>>;

/// The job's supervisor (SPEC §10, fencing): the only place where deaths are declared. The
/// event loop feeds it suspicions and ends, the control threads its lease renewals.
pub(crate) struct Fencing {
    pub(crate) sup: Supervisor,
    /// The origin of the supervisor's clock (the job's start).
    pub(crate) origin: Instant,
}

/// Shared between the event loop and the control threads.
pub(crate) type SharedFencing = Arc<Mutex<Fencing>>;

impl Fencing {
    /// The supervisor of a job laid out as `layout`: leases as long as the detector's
    /// suspicion time (at least 1 s; 5 s without a detector).
    pub(crate) fn shared(layout: Layout, fd: Option<&FdPlan>) -> SharedFencing {
        let lease = p2pmpi_core::fencing::lease_length(fd.map(|p| p.suspicion_after(layout.slots())));
        Arc::new(Mutex::new(Fencing { sup: Supervisor::new(layout, lease), origin: Instant::now() }))
    }

    pub(crate) fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn send_to(w: &Writer, msg: &Control) -> bool {
    lock(w).write_all(&control::encode(msg)).is_ok()
}

fn describe(status: &ExitStatus) -> String {
    if let Some(sig) = status.signal() {
        let name = match sig {
            libc::SIGKILL => "SIGKILL",
            libc::SIGTERM => "SIGTERM",
            libc::SIGSEGV => "SIGSEGV",
            libc::SIGABRT => "SIGABRT",
            libc::SIGBUS => "SIGBUS",
            libc::SIGINT => "SIGINT",
            libc::SIGFPE => "SIGFPE",
            libc::SIGILL => "SIGILL",
            libc::SIGPIPE => "SIGPIPE",
            _ => "signal",
        };
        format!("was killed by signal {sig} ({name})")
    } else {
        format!("exited with status {}", status.code().unwrap_or(-1))
    }
}

fn exit_code_of(status: &ExitStatus) -> i32 {
    status.signal().map(|s| 128 + s).or(status.code()).unwrap_or(1)
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

/// The variable that gives `--bind-to` its default.
pub const BIND_TO_ENV: &str = "P2PMPI_BIND_TO";

/// Where `--bind-to` puts the processes of a local job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Binding {
    /// The scheduler places them.
    None,
    /// Slot K runs on `cpus[K % cpus.len()]` only.
    Cpus(Vec<usize>),
}

impl Binding {
    /// The binding of `--bind-to` (else of P2PMPI_BIND_TO); `core` over the CPUs this
    /// launcher may use (`hwthread` and `cpu` are the same here: one logical CPU each).
    pub(crate) fn from_options(opts: &RunArgs) -> Result<Binding> {
        let (value, from) = match &opts.bind_to {
            Some(v) => (v.clone(), "--bind-to".to_string()),
            None => match std::env::var(BIND_TO_ENV) {
                Ok(v) if !v.trim().is_empty() => (v, BIND_TO_ENV.to_string()),
                _ => return Ok(Binding::None),
            },
        };
        match value.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(Binding::None),
            "core" | "hwthread" | "cpu" => {
                let cpus = p2pmpi_peer::os::allowed_cpus()
                    .map_err(|e| anyhow::anyhow!("{from} {value}: cannot read this process's CPUs: {e}"))?;
                if cpus.is_empty() {
                    bail!("{from} {value}: this process may run on no CPU");
                }
                Ok(Binding::Cpus(cpus))
            }
            _ => bail!("{from} {value}: want core or none"),
        }
    }

    /// How many of a job's `slots` processes run on `slot`'s CPU (itself included).
    pub(crate) fn sharing(&self, slot: usize, slots: usize) -> usize {
        match self {
            Binding::None => slots,
            // The CPUs are distinct: the slots congruent to `slot` modulo their number.
            Binding::Cpus(cpus) => (slots - slot % cpus.len()).div_ceil(cpus.len()),
        }
    }

    /// The CPU of `slot`, if bound.
    pub(crate) fn cpu_of(&self, slot: usize) -> Option<usize> {
        match self {
            Binding::None => None,
            Binding::Cpus(cpus) => Some(cpus[slot % cpus.len()]),
        }
    }
}

/// The CPUs a running process may use, as the kernel says (`Cpus_allowed_list` of
/// /proc/PID/status), for `-v`'s report of the binding.
fn cpus_allowed(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:").map(|v| v.trim().to_string())))
        .unwrap_or_else(|| "?".into())
}

/// Exit status of a job stopped by `--timeout` (as timeout(1)).
pub const TIMEOUT_EXIT: i32 = 124;

/// Runs a job: on the grid when this host's peer daemon runs (or `--grid`), else locally.
pub fn run(name: &str, opts: RunArgs) -> Result<i32> {
    let n = check_n(name, &opts)?;
    if opts.replicas < 1 {
        bail!("-r must be at least 1 (got {})", opts.replicas);
    }
    if opts.timeout == Some(0) {
        bail!("--timeout must be at least 1 second");
    }
    for p in &opts.collect {
        if let Err(why) = p2pmpi_peer::collect::check_pattern(p) {
            bail!("--collect {p}: {why}");
        }
    }
    extra_env(&opts)?;
    let binding = Binding::from_options(&opts)?;
    let hosts = allowed_hosts(&opts)?;
    let why_local = if opts.local {
        "--local was given".to_string()
    } else {
        match crate::grid_run::find_grid(opts.grid)? {
            Some(_) if opts.bind_to.is_some() && binding != Binding::None => {
                bail!("--bind-to core binds the processes of a job on this host (--local); on the grid each peer's scheduler places its processes")
            }
            Some(grid) => return crate::grid_run::run(name, &opts, n, grid),
            None => format!(
                "no peer daemon runs here (p2pmpi directory {}; start one with mpiboot, or a local grid with \
                 `p2pmpi local-grid start`)",
                p2pmpi_peer::home::Home::user().dir.display()
            ),
        }
    };
    if !opts.files.is_empty() || opts.dry_run {
        bail!("-l and --dry-run need the grid: start a peer daemon with mpiboot (or p2pmpi local-grid start)");
    }
    if !hosts.is_empty() {
        bail!("-H/--host and --hostfile choose peers of the grid, and this job runs on this host: {why_local}");
    }
    if opts.verbose {
        let slots = Layout::new(n, opts.replicas as usize).slots();
        eprintln!("{name}: running all {slots} process(es) on this host: {why_local}");
        if !opts.collect.is_empty() {
            eprintln!("{name}: --collect: every process runs in the current directory, where its files already are");
        }
    }
    run_local(name, opts, n, binding)
}

pub(crate) fn check_n(name: &str, opts: &RunArgs) -> Result<usize> {
    Ok(match opts.n {
        None => bail!("the number of processes is missing: use -n N (for example: {name} -n 4 ./program)"),
        Some(n) if n < 1 => bail!("-n must be at least 1 (got {n})"),
        Some(n) if n > 4096 => bail!("-n {n} is more processes than a local run supports (4096)"),
        Some(n) => n as usize,
    })
}

/// Runs a job's N processes on this host (with `-r R`, its 1 + (N − 1)·R slots).
fn run_local(name: &str, opts: RunArgs, n: usize, binding: Binding) -> Result<i32> {
    let layout = Layout::new(n, opts.replicas as usize);
    let slots = layout.slots();
    if slots > 4096 {
        bail!("-n {n} -r {} is {slots} processes, more than a local run supports (4096)", layout.r);
    }
    let program = resolve_program(&opts.command[0])?;
    let fd = FdPlan::from_options(&opts, &crate::grid_run::load_config(name)?)?;
    if opts.verbose {
        eprintln!("{name}: failure detector: {}", fd.as_ref().map_or("off".to_string(), |f| f.name()));
    }
    let prog_args = &opts.command[1..];

    let listener = TcpListener::bind("127.0.0.1:0").context("cannot open the launcher's control port")?;
    let ctrl_addr = listener.local_addr()?;
    let key = JobKey::random()?;

    let (tx, rx) = channel::<Event>();
    let fencing = Fencing::shared(layout, fd.as_ref());
    spawn_control_server(listener, key.clone(), slots, tx.clone(), fencing.clone());

    let output = Arc::new(Output::create(layout, opts.tag_output, opts.output_filename.as_deref())?);
    let extra = extra_env(&opts)?;
    let mut children: Vec<Child> = Vec::with_capacity(slots);
    let mut pumps: Vec<JoinHandle<()>> = Vec::new();
    let mut states: Vec<RankState> = (0..slots).map(|_| RankState::default()).collect();
    for (slot, state) in states.iter_mut().enumerate() {
        let mut cmd = Command::new(&program);
        cmd.args(prog_args)
            .env(env::RANK, slot.to_string())
            .env(env::SIZE, n.to_string())
            .env(env::CONTROL, ctrl_addr.to_string())
            .env(env::JOB_KEY, key.to_hex())
            .env(env::LOCAL_PROCS, slots.to_string())
            .stdin(if slot == 0 { Stdio::inherit() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if layout.r > 1 {
            cmd.env(env::REPLICAS, layout.r.to_string());
        }
        if opts.encrypt {
            cmd.env(env::ENCRYPT, "1");
        }
        cmd.envs(extra.iter().cloned());
        die_with_launcher(&mut cmd);
        if let Some(cpu) = binding.cpu_of(slot) {
            // The library compares the job's processes here with the CPUs it may use (one,
            // bound) to choose between polling and yielding: it is told those sharing its CPU.
            cmd.env(env::LOCAL_PROCS, binding.sharing(slot, slots).to_string());
            if let Err(e) = p2pmpi_peer::os::bind_to_cpu(&mut cmd, cpu) {
                kill_all(&mut children);
                bail!("--bind-to: cannot bind {} to CPU {cpu}: {e}", who(layout, slot));
            }
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                kill_all(&mut children);
                bail!("cannot start '{}': {e}", program.display());
            }
        };
        state.pid = child.id();
        if opts.verbose && binding != Binding::None {
            eprintln!("{name}: {} (pid {}) bound to CPU {}", who(layout, slot), state.pid, cpus_allowed(state.pid));
        }
        let so = child.stdout.take().expect("piped");
        let se = child.stderr.take().expect("piped");
        pumps.push(pump(so, slot, false, output.clone()));
        pumps.push(pump(se, slot, true, output.clone()));
        children.push(child);
    }
    // Exit watcher: polls children without blocking the event loop.
    let children = Arc::new(Mutex::new(children));
    {
        let children = children.clone();
        let tx = tx.clone();
        let output = output.clone();
        std::thread::spawn(move || watch_exits(children, tx, output));
    }
    let spawner = crate::spawn::Spawns::new(
        crate::spawn::Settings::of_job(name, &key, layout, &opts, &extra, crate::spawn::Place::Local).with_fd(fd),
    );
    if layout.r > 1 {
        // Its children's declared deaths reach the parents, and the other way round.
        spawner.register_world(0, slots, tx.clone());
    }
    drop(tx);
    let stop = || {
        terminate(&children);
        spawner.terminate_all();
    };
    let spawn = |apps: &[control::SpawnApp], parents: &[(u32, String)], ctx: u32| spawner.spawn(apps, parents, ctx);
    let job = Job {
        layout,
        stop_all: &stop,
        output: &output,
        startup_timeout: opts.startup_timeout,
        timeout: opts.timeout.map(Duration::from_secs),
        fd: fd.as_ref(),
        fencing,
        notices: None,
        spawner: Some(&spawn),
        slot_base: 0,
        relay: (layout.r > 1).then_some(&spawner),
    };
    let code = event_loop(name, &job, &rx, &mut states);
    spawner.unregister_world(0);
    for p in pumps {
        let _ = p.join();
    }
    // The spawned jobs end like the parents' (their exit status counts if the parents' is 0).
    let spawned = spawner.wait();
    Ok(if code == 0 { spawned } else { code })
}

/// Makes a child die with the launcher (`PR_SET_PDEATHSIG`): no orphan processes.
pub(crate) fn die_with_launcher(cmd: &mut Command) {
    p2pmpi_peer::os::die_with_parent(cmd);
}

/// What [`event_loop`] drives besides the control connections.
pub(crate) struct Job<'a> {
    /// The job's ranks and replicas: the loop's states, connections and tables have one
    /// entry per slot.
    pub(crate) layout: Layout,
    /// Makes every remaining process end.
    pub(crate) stop_all: &'a dyn Fn(),
    /// The processes' output (told when a replica is declared dead).
    pub(crate) output: &'a Output,
    pub(crate) startup_timeout: u64,
    /// `--timeout`: the job is stopped when it runs longer.
    pub(crate) timeout: Option<Duration>,
    pub(crate) fd: Option<&'a FdPlan>,
    /// The supervisor that declares deaths (shared with the control threads).
    pub(crate) fencing: SharedFencing,
    /// Where the job's events are reported (its local MPD, on a grid).
    pub(crate) notices: Option<&'a crate::notices::Notifier>,
    /// Starts the processes of a `spawn` (`None`: spawning is not supported here).
    pub(crate) spawner: Option<&'a Spawner<'a>>,
    /// The universe slot of the job's slot 0 (a spawned job's follow its ancestors'): its
    /// processes name slots of the universe, the loop its own.
    pub(crate) slot_base: usize,
    /// A replicated universe (parents and the jobs they spawned): declarations and
    /// suspicions that concern another job's processes go through it.
    pub(crate) relay: Option<&'a crate::spawn::Spawns>,
}

/// How reports name a process: `rank K`, or `rank K replica J` when its rank is replicated.
pub(crate) fn who(layout: Layout, slot: usize) -> String {
    let rank = layout.rank_of(slot);
    if layout.replicas(rank) > 1 {
        format!("rank {rank} replica {}", layout.replica_of(slot))
    } else {
        format!("rank {rank}")
    }
}

/// A failure notice's text without its leading `rank K failed: ` (the report names the
/// process itself).
fn failure_detail(detail: &str) -> &str {
    if let Some((head, tail)) = detail.strip_prefix("rank ").and_then(|r| r.split_once(" failed: ")) {
        if head.split(" replica ").all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
            return tail;
        }
    }
    detail
}

/// The panic message of an abort (`panicked at FILE:LINE:COL:` and the message), if it is one.
fn panic_text(why: &str) -> Option<&str> {
    why.starts_with("panicked").then_some(why)
}

/// An abort message without the library's `p2pmpi: rank K: ` (the report names the process).
fn abort_text(message: &str, layout: Layout, slot: usize) -> &str {
    let m = message.strip_prefix("p2pmpi: ").unwrap_or(message);
    for p in [format!("{}: ", who(layout, slot)), format!("rank {}: ", layout.rank_of(slot)), format!("rank {slot}: ")]
    {
        if let Some(rest) = m.strip_prefix(p.as_str()) {
            return rest;
        }
    }
    m
}

/// The replicas: which ranks still run, as the job's supervisor declared (fencing). A replica
/// declared dead is no longer shown, and every process is told the dead set; one that
/// resumes learns that it was excluded and exits quietly.
struct Replicas<'a> {
    layout: Layout,
    fencing: &'a SharedFencing,
    /// Control connections of the processes, by slot.
    conns: HashMap<usize, Writer>,
    /// Fault-aware programs' agreements, decided here like deaths.
    agreements: std::cell::RefCell<Agreements>,
    /// Communicators (contexts) a fault-aware program revoked.
    revoked: std::cell::RefCell<std::collections::BTreeSet<u64>>,
    /// The universe slot of slot 0 ([`Job::slot_base`]).
    slot_base: usize,
    /// Universe slots other jobs of the universe declared dead (replicated spawns).
    foreign: std::cell::RefCell<std::collections::BTreeSet<u32>>,
    relay: Option<&'a crate::spawn::Spawns>,
}

/// The agreements of fault-aware programs ([`p2pmpi_core::agreement`]): the registry, and
/// the processes (slots) waiting for each decision.
#[derive(Default)]
struct Agreements {
    reg: agreement::Registry,
    waiting: HashMap<agreement::Key, Vec<usize>>,
}

impl Replicas<'_> {
    /// Slot `slot` contributes `flag` to agreement `key` over `members` (world ranks).
    fn agree(&self, slot: usize, key: agreement::Key, members: &[u32], flag: u32) {
        let rank = self.layout.rank_of(slot) as u32;
        let mut a = self.agreements.borrow_mut();
        match a.reg.contribute(key, rank, members, flag) {
            Ok(Some(d)) => {
                let mut to = a.waiting.remove(&key).unwrap_or_default();
                to.push(slot);
                self.send_decision(key, &d, &to);
            }
            Ok(None) => a.waiting.entry(key).or_default().push(slot),
            Err(e) => {
                if let Some(w) = self.conns.get(&slot) {
                    send_to(w, &Control::AgreeRefused { comm: key.comm, seq: key.seq, reason: e.to_string() });
                }
            }
        }
    }

    /// A process revoked communicator `comm`: every process is told, once.
    fn revoke(&self, comm: u64) {
        if self.revoked.borrow_mut().insert(comm) {
            for w in self.conns.values() {
                send_to(w, &Control::Revoked { comm });
            }
        }
    }

    /// Every replica of `rank` failed (or the process of an unreplicated rank): agreements
    /// stop waiting for it.
    fn rank_failed(&self, rank: usize) {
        let mut a = self.agreements.borrow_mut();
        for (key, d) in a.reg.rank_failed(rank as u32) {
            let to = a.waiting.remove(&key).unwrap_or_default();
            self.send_decision(key, &d, &to);
        }
    }

    fn send_decision(&self, key: agreement::Key, d: &agreement::Decision, to: &[usize]) {
        let msg = Control::Agreed { comm: key.comm, seq: key.seq, flag: d.flag, failed: d.failed.clone(), id: d.id };
        for slot in to {
            if let Some(w) = self.conns.get(slot) {
                send_to(w, &msg);
            }
        }
    }

    /// Whether the death of `slot` can be survived: its rank has several replicas.
    fn replicated(&self, slot: usize) -> bool {
        self.layout.replicas(self.layout.rank_of(slot)) > 1
    }

    fn dead(&self, slot: usize) -> bool {
        lock(self.fencing).sup.is_dead(slot)
    }

    /// Whether `slot` was excluded or declared dead: its reports count for nothing.
    fn fenced(&self, slot: usize) -> bool {
        lock(self.fencing).sup.is_fenced(slot)
    }

    /// The replica of `rank` whose output is shown: its first one not declared dead.
    fn master_of(&self, rank: usize) -> Option<usize> {
        lock(self.fencing).sup.dead().master_of(rank)
    }

    /// A message came from `slot`: true if it is fenced (the message is ignored, and the
    /// process is told it was excluded).
    fn heard_from_fenced(&self, slot: usize) -> bool {
        let fenced = lock(self.fencing).sup.heard_from(slot);
        if fenced {
            if let Some(w) = self.conns.get(&slot) {
                send_to(w, &Control::Excluded { reason: "declared dead by the launcher".into() });
            }
        }
        fenced
    }

    /// `by` (or the launcher itself) suspects `slot`: it is excluded now, declared dead once
    /// its lease ran out ([`Self::poll`]).
    /// Returns the slot excluded (the accuser, when the supervisor still hears the suspect
    /// and believing the accusation would lose a rank).
    fn suspect(&self, slot: usize, by: Option<usize>, why: &str) -> Option<usize> {
        let mut f = lock(self.fencing);
        let now = f.now();
        f.sup.suspect(now, slot, by, why)
    }

    /// A process of another job of the universe suspects `slot`
    /// ([`Supervisor::suspect_from_outside`]).
    fn suspect_from_outside(&self, slot: usize, why: &str) -> Option<usize> {
        let mut f = lock(self.fencing);
        let now = f.now();
        f.sup.suspect_from_outside(now, slot, why)
    }

    /// `slot`'s process ended: declared at once.
    fn ended(&self, slot: usize, why: &str) -> Option<Declaration> {
        let mut f = lock(self.fencing);
        let now = f.now();
        f.sup.ended(now, slot, why)
    }

    /// Whether the fenced `slot` was heard from after its exclusion (it resumed).
    fn fenced_resumed(&self, slot: usize) -> bool {
        lock(self.fencing).sup.resumed(slot)
    }

    /// Declarations due now.
    fn poll(&self) -> Vec<Declaration> {
        let mut f = lock(self.fencing);
        let now = f.now();
        f.sup.poll(now)
    }

    /// Carries out a declaration: the slot's output is no longer shown and every process
    /// learns the dead set. Returns how many replicas its rank has left.
    fn declared(&self, job: &Job, d: &Declaration) -> usize {
        job.output.slot_dead(d.slot);
        self.tell_dead();
        if let Some(relay) = self.relay {
            relay.relay_dead(self.slot_base, &[(self.slot_base + d.slot) as u32]);
        }
        if d.left == 0 {
            self.rank_failed(self.layout.rank_of(d.slot));
        }
        d.left
    }

    /// Tells every process the dead set: this job's slots and other jobs' (universe slots).
    fn tell_dead(&self) {
        let mut slots: Vec<u32> =
            lock(self.fencing).sup.dead().slots().into_iter().map(|s| (s + self.slot_base) as u32).collect();
        slots.extend(self.foreign.borrow().iter().copied());
        let msg = Control::Dead { slots };
        for w in self.conns.values() {
            send_to(w, &msg);
        }
    }

    /// Reports a declaration (`what` names the process and says how it failed); true when
    /// the job must stop: its rank lost its last replica.
    fn report(&self, name: &str, job: &Job, d: &Declaration, what: &str, tolerant: bool) -> bool {
        let rank = self.layout.rank_of(d.slot);
        let left = self.declared(job, d);
        if let Some(n) = job.notices {
            n.note(JobNoticeKind::Failed, d.slot, what);
            // The master is the lowest replica not declared dead: one above the dead one
            // means the dead one was master until now (the replicas below it were dead).
            match self.master_of(rank) {
                Some(m) if m > d.slot => n.note(
                    JobNoticeKind::Takeover,
                    m,
                    format!("{} took over from {}", who(self.layout, m), who(self.layout, d.slot)),
                ),
                _ => {}
            }
        }
        if left > 0 {
            eprintln!("{name}: {what}; rank {rank} goes on with {left} replica(s)");
            false
        } else if tolerant {
            eprintln!(
                "{name}: {what}; all replicas of rank {rank} failed; the program handles failures, the job goes on"
            );
            false
        } else {
            eprintln!("{name}: {what}; all replicas of rank {rank} failed; stopping the other processes");
            true
        }
    }
}

/// Follows a job to its end: sends the communicator once every process registered, judges
/// every process's end, and on the first failure reports its root cause and calls
/// `job.stop_all` (which must make every process end). Returns the job's exit status.
///
/// With replicas, the states are per slot; a replica that dies (exits without finalizing,
/// is declared failed by another process's detector, or is lost with its host) is reported
/// and the job goes on while its rank keeps another replica.
pub(crate) fn event_loop(name: &str, job: &Job, rx: &Receiver<Event>, states: &mut [RankState]) -> i32 {
    let layout = job.layout;
    let n = layout.slots();
    let (startup_timeout, fd) = (job.startup_timeout, job.fd);
    // When the job was first told to stop: its processes' ends are awaited for STOP_CONFIRM.
    let stopped_at: std::cell::Cell<Option<Instant>> = std::cell::Cell::new(None);
    let stop_all = || {
        if stopped_at.get().is_none() {
            stopped_at.set(Some(Instant::now()));
        }
        (job.stop_all)();
    };
    let replicated = layout.slots() > layout.n;
    let who = |slot: usize| who(layout, slot);
    // A process that failed outside the replicas' declarations (no replicas): told to the MPD.
    let note_failed = |slot: usize, what: &str| {
        if let Some(n) = job.notices {
            n.note(JobNoticeKind::Failed, slot, what);
        }
    };
    let mut rep = Replicas {
        layout,
        fencing: &job.fencing,
        conns: HashMap::new(),
        agreements: Default::default(),
        revoked: Default::default(),
        slot_base: job.slot_base,
        foreign: Default::default(),
        relay: job.relay,
    };
    // Spawn requests of a replicated job's replicas: performed once per request.
    let mut spawn_ledger = SpawnLedger::<std::result::Result<u32, String>>::new(layout);
    let lease_us = if replicated { lock(&job.fencing).sup.lease().as_micros() as u64 } else { 0 };
    let mut addrs: Vec<Option<String>> = vec![None; n];
    let mut fd_addrs: Vec<String> = vec![String::new(); n];
    // The program handles failures itself (every process said so at registration): a
    // process's death does not stop the job.
    let mut tolerant = true;
    let mut reported_failed: Vec<bool> = vec![false; n];
    let mut stragglers_stopped = false;
    let mut redundant_deadline: Option<Instant> = None;
    let mut world_sent = false;
    let mut failure: Option<i32> = None;
    let start = Instant::now();
    let mut exited = 0;
    let mut provisional: Option<(Instant, usize, u32, i32, String)> = None;
    // Once every process has ended, wait (bounded) for the control connections still open:
    // a process's last word (Finalized, Abort) may be read after its exit was seen.
    let mut close_deadline: Option<Instant> = None;
    loop {
        if exited < n && stopped_at.get().is_some_and(|t| t.elapsed() >= STOP_CONFIRM) {
            let unconfirmed: Vec<usize> = (0..n).filter(|&s| states[s].exit.is_none()).collect();
            for slot in unconfirmed {
                eprintln!(
                    "{name}: warning: {} (pid {}) did not confirm its end within {} s of being stopped (is its host \
                     cut off?); giving up on it: it may still run there",
                    who(slot),
                    states[slot].pid,
                    STOP_CONFIRM.as_secs()
                );
                let s = &mut states[slot];
                s.exit = Some(ExitStatus::from_raw(libc::SIGKILL));
                s.ctrl_closed = true;
                s.judged = true;
                s.unconfirmed = true;
                exited += 1;
            }
        }
        if exited >= n {
            let unread = |s: &RankState| s.exit.is_some() && s.registered && !s.ctrl_closed && !s.judged;
            if !states.iter().any(unread) {
                break;
            }
            if Instant::now() >= *close_deadline.get_or_insert_with(|| Instant::now() + Duration::from_millis(500)) {
                for s in states.iter_mut() {
                    s.ctrl_closed = true;
                }
            }
        }
        // Deaths declared now: suspects whose lease ran out.
        for d in rep.poll() {
            if failure.is_some() {
                rep.declared(job, &d);
            } else if rep.report(name, job, &d, &declaration_text(layout, &d), tolerant) {
                failure = Some(1);
                stop_all();
            }
        }
        if let Some(limit) = job.timeout.filter(|&t| failure.is_none() && exited < n && start.elapsed() >= t) {
            eprintln!(
                "{name}: the job ran longer than --timeout {} s; stopping every process (exit status {TIMEOUT_EXIT})",
                limit.as_secs()
            );
            failure = Some(TIMEOUT_EXIT);
            stop_all();
        }
        if failure.is_none() {
            if let Some((deadline, slot, peer, code, message)) = &provisional {
                if Instant::now() >= *deadline {
                    report_lost(name, layout, *slot, *peer, message);
                    failure = Some(*code);
                    stop_all();
                }
            }
        }
        let ev = match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(ev) => ev,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if !world_sent
                    && failure.is_none()
                    && states.iter().any(|s| s.registered)
                    && start.elapsed() > Duration::from_secs(startup_timeout)
                {
                    let missing: Vec<usize> = (0..n).filter(|&s| !states[s].registered).collect();
                    let list = if replicated {
                        missing.iter().map(|&s| who(s)).collect::<Vec<_>>().join(", ")
                    } else {
                        format!("rank(s) {}", missing.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "))
                    };
                    eprintln!("{name}: start-up timed out after {startup_timeout} s: {list} never initialized MPI");
                    failure = Some(1);
                    stop_all();
                }
                if exited < n && redundant_deadline.is_none() && lock(&job.fencing).sup.next_deadline().is_none() {
                    continue;
                }
                Event::Tick
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        match ev {
            Event::Tick => {}
            Event::Registered { rank: slot, addr, fd_addr, tolerant: t, pid, conn } => {
                if states[slot].registered {
                    eprintln!("{name}: warning: {} registered twice; ignoring the second", who(slot));
                    continue;
                }
                states[slot].registered = true;
                if states[slot].pid == 0 {
                    // A process on another host: its own word is all we know of its pid.
                    states[slot].pid = pid;
                }
                addrs[slot] = Some(addr);
                fd_addrs[slot] = fd_addr;
                tolerant &= t;
                rep.conns.insert(slot, conn);
                if addrs.iter().all(Option::is_some) && !world_sent {
                    world_sent = true;
                    // Every process registered: a fault-aware program survives a lost rank.
                    lock(&job.fencing).sup.set_rank_loss_tolerated(tolerant);
                    let table: Vec<String> = addrs.iter().map(|a| a.clone().unwrap()).collect();
                    // Every process needs a detector address for the detector to run.
                    let fd = fd.filter(|_| fd_addrs.iter().all(|a| !a.is_empty()));
                    // The communicator table, sent to every process by a flat tree, with
                    // Δt_i = ts_i − ts_1 for the detector's initial heartbeat (FM eq. 4).
                    let mut first: Option<Instant> = None;
                    for slot in 0..n {
                        let Some(c) = rep.conns.get(&slot) else { continue };
                        let ts = Instant::now();
                        let ts1 = *first.get_or_insert(ts);
                        let msg = Control::World {
                            addrs: table.clone(),
                            fd: fd.map(|p| p.setup(fd_addrs.clone(), ts - ts1)),
                            lease_us,
                        };
                        send_to(c, &msg);
                    }
                    if !rep.foreign.borrow().is_empty() {
                        // Processes of other jobs of the universe declared dead before.
                        rep.tell_dead();
                    }
                }
            }
            Event::ForeignDead { slots } => {
                rep.foreign.borrow_mut().extend(slots);
                if world_sent {
                    rep.tell_dead();
                }
            }
            Event::ForeignSuspect { slot, why } => {
                if world_sent && replicated && failure.is_none() && !rep.fenced(slot) && !states[slot].finalized {
                    // The accuser's text names universe ranks: the report names the process.
                    let why =
                        format!("{} failed: {} (detected by another job's process)", who(slot), failure_detail(&why));
                    if let Some(out) = rep.suspect_from_outside(slot, &why) {
                        reported_failed[out] = true;
                    }
                }
            }
            Event::PeerFailed { rank: by, failed, detail } => {
                // A replicated job's processes name universe slots.
                let failed = if replicated {
                    match failed.checked_sub(job.slot_base).filter(|&f| f < n) {
                        Some(f) => f,
                        None => {
                            // Another job's process: its own job decides (fencing).
                            if let Some(relay) = job.relay {
                                if !rep.heard_from_fenced(by) {
                                    relay.relay_suspect(failed, &detail);
                                }
                            }
                            continue;
                        }
                    }
                } else {
                    failed
                };
                if failed >= n {
                    continue;
                }
                if world_sent && replicated && rep.heard_from_fenced(by) {
                    // Fencing: an excluded process that woke up suspects everybody (their
                    // connections to it were closed); its word counts for nothing.
                    continue;
                }
                if world_sent && replicated {
                    // A replica: its rank may go on. One that finalized did its work. It is
                    // excluded now and declared dead once its lease ran out.
                    if rep.fenced(failed) || states[failed].finalized || failure.is_some() {
                        continue;
                    }
                    if let Some(out) = rep.suspect(failed, Some(by), &detail) {
                        reported_failed[out] = true;
                    }
                    continue;
                }
                if reported_failed[failed] {
                    continue;
                }
                reported_failed[failed] = true;
                note_failed(failed, &format!("{detail} (detected by {})", who(by)));
                if tolerant {
                    eprintln!(
                        "{name}: {detail} (detected by {}); the program handles failures, the job goes on",
                        who(by)
                    );
                    rep.rank_failed(layout.rank_of(failed));
                    continue;
                }
                states[by].lost_peer = Some(failed as u32);
                if failure.is_none() {
                    eprintln!("{name}: {detail} (detected by {}); stopping the other processes", who(by));
                    failure = Some(1);
                    stop_all();
                }
            }
            Event::Spawn { rank: slot, apps, parents, ctx } => {
                let perform = || match job.spawner {
                    Some(s) => s(&apps, &parents, ctx),
                    None => Err("this job cannot spawn processes".to_string()),
                };
                let answer = if replicated {
                    // Every replica of the root asks: the first performs the spawn, the
                    // others get its outcome (one set of children, whoever is master).
                    if rep.heard_from_fenced(slot) {
                        continue;
                    }
                    match spawn_ledger.ask(slot) {
                        Some(Ask::Perform(k)) => {
                            let a = perform();
                            spawn_ledger.decide(slot, k, a.clone());
                            a
                        }
                        Some(Ask::Decided(a)) => a,
                        None => continue,
                    }
                } else {
                    perform()
                };
                if let Some(c) = rep.conns.get(&slot) {
                    let msg = match answer {
                        Ok(base) => Control::Spawned { base, error: None },
                        Err(e) => Control::Spawned { base: 0, error: Some(e) },
                    };
                    send_to(c, &msg);
                }
            }
            Event::Agree { rank: slot, key, members, flag } => {
                if !(replicated && rep.heard_from_fenced(slot)) {
                    rep.agree(slot, key, &members, flag);
                }
            }
            Event::Revoke { rank: slot, comm } => {
                if !(replicated && rep.heard_from_fenced(slot)) {
                    rep.revoke(comm);
                }
            }
            Event::Finalized { rank: slot } => {
                if !rep.heard_from_fenced(slot) {
                    states[slot].finalized = true;
                }
            }
            Event::Abort { rank: slot, .. } if replicated && rep.heard_from_fenced(slot) => {}
            // A program that handles failures: a process reported failed (a false detection:
            // it ran on, abandoned by the others) that then stops on an error of its own
            // (a peer that no longer talks to it) is not a new failure of the job.
            Event::Abort { rank: slot, message, .. }
                if tolerant && !replicated && world_sent && reported_failed[slot] =>
            {
                let why = abort_text(&message, layout, slot);
                eprintln!(
                    "{name}: {}, reported failed earlier, stopped: {}; the job goes on without it",
                    who(slot),
                    if why.is_empty() { "aborted" } else { why }
                );
                states[slot].judged = true;
            }
            Event::Abort { rank: slot, code, message, lost } => {
                states[slot].lost_peer = lost;
                if failure.is_some() {
                    continue;
                }
                let code = if code == 0 { 1 } else { code & 0xff };
                match lost {
                    // A consequence of another rank's death: give that rank's own exit a
                    // moment to arrive, so the report names the root cause.
                    Some(peer) => {
                        if provisional.is_none() {
                            provisional = Some((Instant::now() + ROOT_CAUSE_GRACE, slot, peer, code, message));
                        }
                    }
                    // A replica that is not its rank's master aborts (a panic where its
                    // master did not: it diverged, e.g. on a non-deterministic probe): it
                    // is treated as failed, the master goes on.
                    None if world_sent
                        && rep.replicated(slot)
                        && !rep.dead(slot)
                        && rep.master_of(layout.rank_of(slot)) != Some(slot) =>
                    {
                        let why = abort_text(&message, layout, slot);
                        let what = if why.is_empty() {
                            format!("{} aborted (error code {code})", who(slot))
                        } else if let Some(p) = panic_text(why) {
                            // One line: the report names the process once.
                            format!("{} {}", who(slot), p.replace('\n', " "))
                        } else {
                            format!("{} aborted: {why}", who(slot))
                        };
                        // It is ending: nothing more will come from it.
                        if let Some(d) = rep.ended(slot, &what) {
                            if rep.report(name, job, &d, &what, tolerant) {
                                failure = Some(code);
                                stop_all();
                            }
                        }
                    }
                    None if panic_text(abort_text(&message, layout, slot)).is_some() => {
                        let text = panic_text(abort_text(&message, layout, slot)).unwrap_or_default();
                        for line in text.lines() {
                            eprintln!("{name}: {}: {line}", who(slot));
                        }
                        eprintln!("{name}: {} panicked; stopping the other processes", who(slot));
                        failure = Some(code);
                        stop_all();
                    }
                    None => {
                        if rep.replicated(slot) && rep.master_of(layout.rank_of(slot)) != Some(slot) {
                            // Only masters are shown: this process's own message was not.
                            let why = abort_text(&message, layout, slot);
                            if !why.is_empty() {
                                eprintln!("{name}: {}: {why}", who(slot));
                            }
                        } else if !message.is_empty() && !message.contains(&format!("rank {}:", layout.rank_of(slot))) {
                            eprintln!("{name}: {}: {message}", who(slot));
                        }
                        eprintln!(
                            "{name}: {} aborted the job (error code {code}); stopping the other processes",
                            who(slot)
                        );
                        failure = Some(code);
                        stop_all();
                    }
                }
            }
            Event::ControlClosed { rank: slot } => {
                // (An excluded process is declared when its exit is seen — after its output
                // was read to the end — or when its lease ran out.)
                states[slot].ctrl_closed = true;
            }
            Event::Exited { rank: slot, status } => {
                if states[slot].exit.is_some() {
                    continue;
                }
                exited += 1;
                states[slot].exit = Some(status);
            }
            Event::BadClient { detail } => {
                eprintln!("{name}: warning: refused a control connection: {detail}");
            }
            Event::Lost { ranks: lost, why } => {
                // Replicas lost with their host, while the job runs: their ranks may go on.
                let survivable =
                    world_sent && failure.is_none() && !lost.is_empty() && lost.iter().all(|&s| rep.replicated(s));
                for &slot in &lost {
                    if states[slot].exit.is_none() {
                        exited += 1;
                        states[slot].exit = Some(ExitStatus::from_raw(libc::SIGKILL));
                        states[slot].ctrl_closed = true;
                        states[slot].judged = true;
                    }
                }
                if survivable {
                    // Excluded now, declared dead once their lease ran out (they may still
                    // run, cut off from their daemon): each declaration is reported.
                    eprintln!("{name}: {why}");
                    for &slot in &lost {
                        if rep.fenced(slot) || states[slot].finalized {
                            continue;
                        }
                        reported_failed[slot] = true;
                        rep.suspect(slot, None, &format!("{} was lost with its host", who(slot)));
                    }
                    continue;
                }
                if tolerant && world_sent && failure.is_none() {
                    eprintln!("{name}: {why}; the program handles failures, the job goes on");
                    for &slot in &lost {
                        rep.rank_failed(layout.rank_of(slot));
                    }
                } else if failure.is_none() {
                    eprintln!("{name}: {why}; stopping the other processes");
                    failure = Some(1);
                    stop_all();
                }
            }
        }
        // Judge processes that are gone and whose control connection is closed.
        for slot in 0..n {
            let s = &mut states[slot];
            let Some(status) = s.exit else { continue };
            if s.judged || (s.registered && !s.ctrl_closed) {
                continue;
            }
            s.judged = true;
            if replicated && rep.fenced(slot) {
                // Excluded or declared dead: it ended as it should.
                let d = if rep.dead(slot) { None } else { rep.ended(slot, "") };
                if let Some(d) = &d {
                    if failure.is_some() {
                        rep.declared(job, d);
                    } else if rep.report(name, job, d, &declaration_text(layout, d), tolerant) {
                        failure = Some(1);
                        stop_all();
                    }
                }
                let at = lock(&job.fencing).sup.declared_at(slot);
                if let Some(at) = at.filter(|_| rep.fenced_resumed(slot)) {
                    let what = format!(
                        "{} was declared dead at {:.1} s; it resumed and was stopped",
                        who(slot),
                        at.as_secs_f64()
                    );
                    eprintln!("{name}: {what}");
                    if let Some(n) = job.notices {
                        n.note(JobNoticeKind::Fenced, slot, what);
                    }
                }
                continue;
            }
            if failure.is_some() || s.lost_peer.is_some() {
                continue;
            }
            let s = &states[slot];
            let bad = if !status.success() {
                Some((format!("{} (pid {}) {}", who(slot), s.pid, describe(&status)), exit_code_of(&status)))
            } else if s.registered && !s.finalized {
                Some((
                    format!(
                        "{} (pid {}) exited without finalizing MPI (the Universe was not dropped)",
                        who(slot),
                        s.pid
                    ),
                    1,
                ))
            } else if !s.registered && states.iter().any(|o| o.registered) && !world_sent {
                Some((
                    format!(
                        "{} (pid {}) exited without initializing MPI while the other ranks wait for it",
                        who(slot),
                        s.pid
                    ),
                    1,
                ))
            } else {
                None
            };
            if let Some((msg, code)) = bad {
                // A replica that ended before finalizing: its rank may go on. (One that
                // finalized and then failed reports the program's own status.)
                if world_sent && rep.replicated(slot) && !states[slot].finalized {
                    if let Some(d) = rep.ended(slot, &msg) {
                        if rep.report(name, job, &d, &msg, tolerant) {
                            failure = Some(1);
                            stop_all();
                        }
                    }
                    continue;
                }
                note_failed(slot, &msg);
                if tolerant && world_sent {
                    eprintln!("{name}: {msg}; the program handles failures, the job goes on");
                    rep.rank_failed(layout.rank_of(slot));
                    continue;
                }
                eprintln!("{name}: {msg}; stopping the other processes");
                failure = Some(code);
                stop_all();
            }
        }
        // A program that handles failures, or replicas: once every process has ended or was
        // declared failed, the failed ones (frozen, cut off) are stopped so the job can end.
        // With replicas, a rank is also done once one of its replicas finalized and ended
        // well: its other replicas still running (frozen but not detected before every
        // other process ended, or far behind) are stopped after a grace period.
        if (tolerant || replicated) && world_sent && !stragglers_stopped && failure.is_none() {
            let gone = |s: usize| reported_failed[s] || rep.fenced(s);
            let finished = |k: usize| {
                layout.slots_of(k).any(|s| states[s].finalized && states[s].exit.is_some_and(|e| e.success()))
            };
            let redundant = |s: usize| replicated && !gone(s) && finished(layout.rank_of(s));
            let running: Vec<usize> = (0..n).filter(|&s| states[s].exit.is_none()).collect();
            let waiting: Vec<usize> = running.iter().copied().filter(|&s| !gone(s)).collect();
            if !running.is_empty() && waiting.iter().all(|&s| redundant(s)) {
                let due = waiting.is_empty()
                    || Instant::now() >= *redundant_deadline.get_or_insert_with(|| Instant::now() + REDUNDANT_GRACE);
                if due {
                    stragglers_stopped = true;
                    for &s in &waiting {
                        eprintln!(
                            "{name}: {} was still running {:.0} s after its rank finished; stopping it",
                            who(s),
                            REDUNDANT_GRACE.as_secs_f64()
                        );
                    }
                    let stopped: Vec<usize> = (0..n).filter(|&s| gone(s) || waiting.contains(&s)).collect();
                    for s in stopped {
                        states[s].judged = true;
                    }
                    stop_all();
                }
            } else {
                redundant_deadline = None;
            }
        }
    }
    // Every process ended before a lost-peer abort's grace ran out: it is still the failure.
    if let (None, Some((_, slot, peer, code, message))) = (failure, &provisional) {
        report_lost(name, layout, *slot, *peer, message);
        failure = Some(*code);
    }
    failure.unwrap_or(0)
}

/// How a declaration is reported: the process, how it failed and who noticed.
fn declaration_text(layout: Layout, d: &Declaration) -> String {
    match d.by {
        Some(by) => {
            format!("{} failed: {} (detected by {})", who(layout, d.slot), failure_detail(&d.why), who(layout, by))
        }
        None if d.why.is_empty() => format!("{} ended", who(layout, d.slot)),
        None => d.why.clone(),
    }
}

/// Reports that `slot` stopped because it lost `peer` (its own message says how).
fn report_lost(name: &str, layout: Layout, slot: usize, peer: u32, message: &str) {
    let why = message.strip_prefix("p2pmpi: ").unwrap_or(message);
    if !why.is_empty() {
        eprintln!("{name}: {why}; stopping the other processes");
        return;
    }
    let me = who(layout, slot);
    let rank = layout.rank_of(peer as usize);
    if layout.replicas(rank) > 1 {
        eprintln!("{name}: {me} lost every replica of rank {rank} and stopped; stopping the other processes");
    } else {
        eprintln!("{name}: {me} lost contact with rank {rank} and stopped; stopping the other processes");
    }
}

/// Time a process has to register once it connected: all of it, not per read, so a
/// connection that trickles bytes cannot hold a thread longer.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// The control port's connection caps for a job of `slots` processes: every process may be
/// connecting at once, all from one address (a local job); once registered, one connection
/// per process (and a few to spare). A connection that did not register yet never takes the
/// place of a registered one; when more are connecting than the job has processes, the
/// oldest is closed to make room (see `p2pmpi_peer::server`).
pub(crate) fn control_limits(slots: usize) -> Limits {
    let pending = slots + 32;
    Limits { authenticated: slots + 8, pending, pending_per_addr: pending }
}

/// Accepts control connections; each is served by its own thread, which also answers the
/// process's lease renewals from `fencing`. Connections are capped ([`control_limits`]).
pub(crate) fn spawn_control_server(
    listener: TcpListener,
    key: JobKey,
    n: usize,
    tx: Sender<Event>,
    fencing: SharedFencing,
) {
    // Refusals are told on the terminal: a few at once, then counted (by the gate).
    let report_tx = Mutex::new(tx.clone());
    let report: server::Report = Box::new(move |_, detail: &str| {
        let _ = lock(&report_tx).send(Event::BadClient { detail: detail.to_string() });
    });
    let options =
        GateOptions { framing: Framing::Control, first_message: REGISTER_TIMEOUT, report: Some(report), burst: 8 };
    let gate = Gate::with_options("control port", control_limits(n), options);
    let g = gate.clone();
    server::accept_loop(listener, gate, move |conn, peer, pending| {
        serve_control(conn, peer, pending, &g, &key, n, tx.clone(), fencing.clone())
    });
}

#[allow(clippy::too_many_arguments)]
fn serve_control(
    mut conn: TcpStream,
    peer: SocketAddr,
    pending: Pending,
    gate: &Gate,
    key: &JobKey,
    n: usize,
    tx: Sender<Event>,
    fencing: SharedFencing,
) {
    let _ = conn.set_nodelay(true);
    // The whole opening (a challenge on the job key) within 10 s: a connection that trickles
    // bytes is dropped all the same.
    let deadline = Instant::now() + REGISTER_TIMEOUT;
    let mut timed = Deadlined { conn: &mut conn, deadline };
    let refused = |why: String| gate.refused(Refusal::Unauthenticated, Some(peer), &why);
    let (rank, addr, fd_addr, tolerant, pid) = match control::accept(&mut timed, key, n) {
        Ok(r) => (r.rank as usize, r.data_addr, r.fd_addr, r.tolerant, r.pid),
        Err(_) if pending.evicted() => return,
        Err(e) => return refused(e.to_string()),
    };
    let Some(_slot) = pending.authenticated(peer) else { return };
    let _ = conn.set_read_timeout(None);
    let Ok(writer) = conn.try_clone() else { return };
    // A process that stopped reading (frozen) must not hold the launcher.
    let _ = writer.set_write_timeout(Some(Duration::from_secs(2)));
    let writer: Writer = Arc::new(Mutex::new(writer));
    let _ = tx.send(Event::Registered { rank, addr, fd_addr, tolerant, pid, conn: writer.clone() });
    loop {
        match control::read_msg(&mut conn) {
            Ok(Some(Control::Renew { stamp_us })) => {
                let grant = {
                    let mut f = lock(&fencing);
                    let now = f.now();
                    f.sup.renew(now, rank)
                };
                let answer = match grant {
                    Grant::Lease => Control::Lease { stamp_us },
                    Grant::Excluded => Control::Excluded { reason: "declared dead by the launcher".into() },
                };
                send_to(&writer, &answer);
            }
            Ok(Some(Control::Excluded { .. })) => {
                // The process learned that it was excluded (it resumed) and leaves.
                lock(&fencing).sup.heard_from(rank);
            }
            Ok(Some(Control::Finalized { .. })) => {
                let _ = tx.send(Event::Finalized { rank });
            }
            Ok(Some(Control::Abort { code, message, lost, .. })) => {
                let _ = tx.send(Event::Abort { rank, code, message, lost });
            }
            Ok(Some(Control::PeerFailed { failed, detail, .. })) => {
                let _ = tx.send(Event::PeerFailed { rank, failed: failed as usize, detail });
            }
            Ok(Some(Control::Agree { comm, seq, members, flag })) => {
                let key = agreement::Key { comm, seq };
                let _ = tx.send(Event::Agree { rank, key, members, flag });
            }
            Ok(Some(Control::Revoke { comm })) => {
                let _ = tx.send(Event::Revoke { rank, comm });
            }
            Ok(Some(Control::Spawn { apps, parents, ctx })) => {
                let _ = tx.send(Event::Spawn { rank, apps, parents, ctx });
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                let _ = tx.send(Event::ControlClosed { rank });
                return;
            }
        }
    }
}

/// A stream whose reads and writes give up at `deadline` (the opening of a control
/// connection: one limit for all of it, not one per read).
struct Deadlined<'a> {
    conn: &'a mut TcpStream,
    deadline: Instant,
}

impl Deadlined<'_> {
    fn arm(&mut self) -> std::io::Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the opening took more than 10 s"));
        }
        self.conn.set_read_timeout(Some(left))?;
        self.conn.set_write_timeout(Some(left))
    }
}

impl Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.arm()?;
        self.conn.read(buf)
    }
}

impl Write for Deadlined<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.arm()?;
        self.conn.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.conn.flush()
    }
}

/// Copies a child's output (slot `slot`) to ours, line by line, through the job's [`Output`].
pub(crate) fn pump(src: impl Read + Send + 'static, slot: usize, err: bool, output: Arc<Output>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::with_capacity(64 * 1024, src);
        let mut line = Vec::with_capacity(256);
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => {
                    output.pipe_closed(slot);
                    return;
                }
                // Our own output may be gone (closed pipe): the child is drained anyway.
                Ok(_) => output.write(slot, err, &line),
            }
        }
    })
}

/// Reports every child's exit (child `i` is slot `i`), once its output was read to the end
/// (at most 500 ms after the exit: a grandchild may keep a pipe open).
pub(crate) fn watch_exits(children: Arc<Mutex<Vec<Child>>>, tx: Sender<Event>, output: Arc<Output>) {
    let n = children.lock().unwrap().len();
    let mut done = vec![false; n];
    let mut left = n;
    while left > 0 {
        {
            let mut ch = children.lock().unwrap();
            for (rank, c) in ch.iter_mut().enumerate() {
                if done[rank] {
                    continue;
                }
                if let Ok(Some(status)) = c.try_wait() {
                    done[rank] = true;
                    left -= 1;
                    let output = output.clone();
                    let tx = tx.clone();
                    std::thread::spawn(move || {
                        let deadline = Instant::now() + Duration::from_millis(500);
                        while !output.drained(rank) && Instant::now() < deadline {
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        let _ = tx.send(Event::Exited { rank, status });
                    });
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Stops every remaining process: SIGTERM, then SIGKILL after a grace period.
pub(crate) fn terminate(children: &Arc<Mutex<Vec<Child>>>) {
    let alive = |children: &Arc<Mutex<Vec<Child>>>| -> Vec<u32> {
        let mut ch = children.lock().unwrap();
        ch.iter_mut().filter_map(|c| matches!(c.try_wait(), Ok(None)).then(|| c.id())).collect()
    };
    for pid in alive(children) {
        // SIGCONT too: a frozen (stopped) process acts on SIGTERM only once continued.
        let _ = p2pmpi_peer::os::signal(pid, libc::SIGTERM);
        let _ = p2pmpi_peer::os::signal(pid, libc::SIGCONT);
    }
    let children = children.clone();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            if alive(&children).is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for pid in alive(&children) {
            let _ = p2pmpi_peer::os::signal(pid, libc::SIGKILL);
        }
    });
}

fn kill_all(children: &mut [Child]) {
    for c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bound_slots_go_round_robin_and_count_who_shares_their_cpu() {
        let b = Binding::Cpus(vec![2, 5, 7]);
        let cpus: Vec<_> = (0..7).map(|s| b.cpu_of(s)).collect();
        assert_eq!(cpus, [2, 5, 7, 2, 5, 7, 2].map(Some));
        let sharing: Vec<_> = (0..7).map(|s| b.sharing(s, 7)).collect();
        assert_eq!(sharing, [3, 2, 2, 3, 2, 2, 3]);
        assert_eq!(b.sharing(1, 2), 1);
        assert_eq!(Binding::None.cpu_of(3), None);
        assert_eq!(Binding::None.sharing(0, 4), 4);
    }

    #[test]
    fn processes_are_named_by_rank_and_replica() {
        let one = Layout::new(4, 1);
        assert_eq!(who(one, 3), "rank 3");
        let rep = Layout::new(3, 2);
        assert_eq!(who(rep, 0), "rank 0 replica 0");
        assert_eq!(who(rep, 3), "rank 1 replica 1");
        assert_eq!(who(rep, 4), "rank 2 replica 0");
    }

    /// Issue 13: the launcher's control port is capped. 200 connections that never register
    /// (each sending a byte now and then) do not keep a process of the job from registering;
    /// those beyond the cap are closed at once, the others when the registration time is up.
    #[test]
    fn the_control_port_is_capped_and_slow_connections_do_not_keep_processes_out() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = channel();
        let layout = Layout::new(2, 1);
        let key = JobKey::from_bytes([7; p2pmpi_wire::auth::KEY_LEN]);
        spawn_control_server(listener, key.clone(), 2, tx, Fencing::shared(layout, None));
        let start = Instant::now();
        let slow: Vec<TcpStream> = (0..200)
            .map(|_| {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(&[64]).unwrap();
                s
            })
            .collect();
        let closed = |s: &TcpStream| {
            s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
            let mut b = [0u8; 1];
            match (&mut &*s).read(&mut b) {
                Ok(0) => true,
                Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
                Ok(_) => false,
            }
        };
        let open = |all: &[TcpStream]| all.iter().filter(|s| !closed(s)).count();
        // Beyond the cap (2 + 32 registering), the oldest were closed at once.
        let deadline = Instant::now() + Duration::from_secs(10);
        while open(&slow) > control_limits(2).pending {
            assert!(Instant::now() < deadline, "{} slow connections still open", open(&slow));
            std::thread::sleep(Duration::from_millis(20));
        }
        // A process of the job registers all the same.
        let mut p = TcpStream::connect(addr).unwrap();
        let reg = control::Registration {
            rank: 1,
            data_addr: "127.0.0.1:1".into(),
            pid: 1,
            fd_addr: String::new(),
            tolerant: false,
        };
        p.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        control::register(&mut p, &key, &reg).unwrap();
        let t = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_secs(5)).expect("the registration was not served") {
                Event::Registered { rank: 1, .. } => break,
                Event::BadClient { .. } => {}
                _ => panic!("unexpected event before the registration"),
            }
        }
        let served = t.elapsed();
        assert!(served < Duration::from_secs(2), "registered after {served:?}");
        // The others are closed when their registration time is up, however they trickle.
        let deadline = start + REGISTER_TIMEOUT + Duration::from_secs(3);
        let mut sent = Instant::now();
        while open(&slow) > 0 {
            assert!(
                Instant::now() < deadline,
                "{} slow connections still open after {:?}",
                open(&slow),
                start.elapsed()
            );
            if sent.elapsed() > Duration::from_secs(2) {
                for mut s in &slow {
                    let _ = s.write_all(&[0]);
                }
                sent = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(start.elapsed() >= REGISTER_TIMEOUT - Duration::from_millis(500), "closed before their time");
        // Refusals were reported, but not one line each.
        let reports = rx.try_iter().filter(|e| matches!(e, Event::BadClient { .. })).count();
        assert!(reports <= 3 * 8, "{reports} reports of refused connections");
        drop(p);
    }

    #[test]
    fn reports_do_not_repeat_the_process_name() {
        assert_eq!(failure_detail("rank 4 failed: no heartbeat for 9.5 s"), "no heartbeat for 9.5 s");
        assert_eq!(failure_detail("rank 2 replica 1 failed: silent"), "silent");
        assert_eq!(failure_detail("connection closed"), "connection closed");
        let l = Layout::new(3, 2);
        assert_eq!(abort_text("p2pmpi: rank 1: abort(7) called", l, 2), "abort(7) called");
        assert_eq!(abort_text("p2pmpi: rank 2: boom", l, 2), "boom");
        assert_eq!(abort_text("boom", l, 2), "boom");
    }
}
