//! The local launcher: runs the N processes of a job on this host.
//!
//! Start-up follows the seeds' execution preamble: each process binds its data port and
//! registers (rank, address) on the launcher's control port, proving with the job's secret
//! token that it belongs to the job; once all have registered the launcher sends every process
//! the communicator table. The control connections stay open: a process reports `Finalized`
//! or `Abort` on it, and its closing tells that the process is gone.
//!
//! Failure handling: when a process dies (signal, non-zero status, or success without
//! finalizing while it had initialized), the launcher reports which rank and how, stops the
//! others (SIGTERM, then SIGKILL after a grace period) and exits with that process's status.
//! Children are started with `PR_SET_PDEATHSIG`, so they cannot outlive a launcher that is
//! itself killed.

use anyhow::{bail, Context, Result};
use clap::Parser;
use p2pmpi::bootstrap::env;
use p2pmpi_wire::control::{self, Control};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an abort caused by a lost peer waits for that peer's own exit to be reported.
const ROOT_CAUSE_GRACE: Duration = Duration::from_millis(500);

/// Options of `p2pmpirun`.
#[derive(Parser, Debug)]
#[command(about = "Run an MPI program on N processes", override_usage = "p2pmpirun -n N [OPTIONS] PROGRAM [ARGS...]")]
pub struct RunArgs {
    /// Number of MPI processes (also -np).
    #[arg(short = 'n', long = "np", value_name = "N")]
    pub n: Option<i64>,
    /// Prefix every output line with the rank that printed it: `[rank] line`.
    #[arg(short = 't', long = "tag-output")]
    pub tag_output: bool,
    /// Replicas per rank (fault tolerance; rank 0 is not replicated).
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
    /// The failure detector's gossip protocol for this application: DBRR, BRR, RR, RANDOM,
    /// or off (default: GOSSIP_PROTOCOL of the configuration, DBRR).
    #[arg(long = "fd", value_name = "PROTOCOL")]
    pub fd: Option<String>,
    /// The failure detector's gossip period in milliseconds (default: T_GOSSIP, 500).
    #[arg(long = "t-gossip", value_name = "MS")]
    pub t_gossip: Option<u64>,
    /// Extra time before a silent process is suspected, milliseconds (default: T_MAX_HANG, 5000).
    #[arg(long = "t-max-hang", value_name = "MS")]
    pub t_max_hang: Option<u64>,
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
}

impl FdPlan {
    /// The plan from the options, falling back on the configuration's `GOSSIP_PROTOCOL`,
    /// `T_GOSSIP` and `T_MAX_HANG`; `None` with `--fd off`.
    pub fn from_options(opts: &RunArgs, cfg: &p2pmpi_peer::config::Config) -> Result<Option<FdPlan>> {
        let protocol = match opts.fd.as_deref() {
            Some(v) if v.eq_ignore_ascii_case("off") || v.eq_ignore_ascii_case("none") => return Ok(None),
            Some(v) => v.parse().map_err(|e: String| anyhow::anyhow!("--fd: {e}"))?,
            None => cfg.gossip_protocol,
        };
        let t_gossip = opts.t_gossip.unwrap_or(cfg.t_gossip_ms);
        if t_gossip == 0 {
            bail!("--t-gossip must be at least 1 ms");
        }
        Ok(Some(FdPlan {
            protocol,
            t_gossip: Duration::from_millis(t_gossip),
            t_max_hang: Duration::from_millis(opts.t_max_hang.unwrap_or(cfg.t_max_hang_ms)),
        }))
    }

    fn setup(&self, addrs: Vec<String>, delta_t: Duration) -> control::FdSetup {
        control::FdSetup {
            addrs,
            protocol: self.protocol.to_string(),
            t_gossip_us: self.t_gossip.as_micros() as u64,
            t_max_hang_us: self.t_max_hang.as_micros() as u64,
            delta_t_us: delta_t.as_micros() as u64,
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
                    !matches!(l.as_str(), "-n" | "--np" | "--startup-timeout" | "-r" | "-a" | "-l" | "-w")
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

pub(crate) enum Event {
    /// Nothing arrived (the loop re-judges the processes).
    Tick,
    Registered {
        rank: usize,
        addr: String,
        fd_addr: String,
        tolerant: bool,
        conn: TcpStream,
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
    /// Ranks lost with their host (its peer daemon stopped answering), or refused there.
    Lost {
        ranks: Vec<usize>,
        why: String,
    },
}

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

/// Runs a job: on the grid when this host's peer daemon runs (or `--grid`), else locally.
pub fn run(name: &str, opts: RunArgs) -> Result<i32> {
    let n = check_n(name, &opts)?;
    if opts.replicas < 1 {
        bail!("-r must be at least 1 (got {})", opts.replicas);
    }
    if !opts.local {
        if let Some(grid) = crate::grid_run::find_grid(opts.grid)? {
            return crate::grid_run::run(name, &opts, n, grid);
        }
    }
    if opts.replicas > 1 || !opts.files.is_empty() || opts.dry_run {
        bail!("-r, -l and --dry-run need the grid: start a peer daemon with mpiboot (or p2pmpi local-grid start)");
    }
    run_local(name, opts, n)
}

pub(crate) fn check_n(name: &str, opts: &RunArgs) -> Result<usize> {
    Ok(match opts.n {
        None => bail!("the number of processes is missing: use -n N (for example: {name} -n 4 ./program)"),
        Some(n) if n < 1 => bail!("-n must be at least 1 (got {n})"),
        Some(n) if n > 4096 => bail!("-n {n} is more processes than a local run supports (4096)"),
        Some(n) => n as usize,
    })
}

/// Runs a job's N processes on this host.
fn run_local(name: &str, opts: RunArgs, n: usize) -> Result<i32> {
    let program = resolve_program(&opts.command[0])?;
    let fd = FdPlan::from_options(&opts, &crate::grid_run::load_config(name)?)?;
    let prog_args = &opts.command[1..];

    let listener = TcpListener::bind("127.0.0.1:0").context("cannot open the launcher's control port")?;
    let ctrl_addr = listener.local_addr()?;
    let mut tok = [0u8; 8];
    getrandom::fill(&mut tok).map_err(|e| anyhow::anyhow!("no randomness for the job token: {e}"))?;
    let token = u64::from_le_bytes(tok);

    let (tx, rx) = channel::<Event>();
    spawn_control_server(listener, token, n, tx.clone());
    let tag = opts.tag_output;

    let out_lock = Arc::new(Mutex::new(()));
    let mut children: Vec<Child> = Vec::with_capacity(n);
    let mut pumps: Vec<JoinHandle<()>> = Vec::new();
    let mut states: Vec<RankState> = (0..n).map(|_| RankState::default()).collect();
    for rank in 0..n {
        let mut cmd = Command::new(&program);
        cmd.args(prog_args)
            .env(env::RANK, rank.to_string())
            .env(env::SIZE, n.to_string())
            .env(env::CONTROL, ctrl_addr.to_string())
            .env(env::TOKEN, format!("{token:016x}"))
            .env(env::LOCAL_PROCS, n.to_string())
            .stdin(if rank == 0 { Stdio::inherit() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_launcher(&mut cmd);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                kill_all(&mut children);
                bail!("cannot start '{}': {e}", program.display());
            }
        };
        states[rank].pid = child.id();
        let prefix = tag.then(|| format!("[{rank}] "));
        let so = child.stdout.take().expect("piped");
        let se = child.stderr.take().expect("piped");
        pumps.push(pump(so, false, prefix.clone(), out_lock.clone()));
        pumps.push(pump(se, true, prefix, out_lock.clone()));
        children.push(child);
    }
    // Exit watcher: polls children without blocking the event loop.
    let children = Arc::new(Mutex::new(children));
    {
        let children = children.clone();
        let tx = tx.clone();
        std::thread::spawn(move || watch_exits(children, tx));
    }
    drop(tx);

    let stop = || terminate(&children);
    let code = event_loop(name, n, &rx, &mut states, &stop, opts.startup_timeout, fd.as_ref());
    for p in pumps {
        let _ = p.join();
    }
    Ok(code)
}

/// Makes a child die with the launcher (`PR_SET_PDEATHSIG`): no orphan processes.
pub(crate) fn die_with_launcher(cmd: &mut Command) {
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Follows a job to its end: sends the communicator once every rank registered, judges
/// every process's end, and on the first failure reports its root cause and calls `stop_all`
/// (which must make every process end). Returns the job's exit status.
pub(crate) fn event_loop(
    name: &str,
    n: usize,
    rx: &Receiver<Event>,
    states: &mut [RankState],
    stop_all: &dyn Fn(),
    startup_timeout: u64,
    fd: Option<&FdPlan>,
) -> i32 {
    let mut conns: HashMap<usize, TcpStream> = HashMap::new();
    let mut addrs: Vec<Option<String>> = vec![None; n];
    let mut fd_addrs: Vec<String> = vec![String::new(); n];
    // The program handles failures itself (every process said so at registration): a
    // process's death does not stop the job.
    let mut tolerant = true;
    let mut reported_failed: Vec<bool> = vec![false; n];
    let mut stragglers_stopped = false;
    let mut world_sent = false;
    let mut failure: Option<i32> = None;
    let start = Instant::now();
    let mut exited = 0;
    let mut provisional: Option<(Instant, usize, u32, i32, String)> = None;
    // Once every process has ended, wait (bounded) for the control connections still open:
    // a process's last word (Finalized, Abort) may be read after its exit was seen.
    let mut close_deadline: Option<Instant> = None;
    loop {
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
        if failure.is_none() {
            if let Some((deadline, rank, peer, code, message)) = &provisional {
                if Instant::now() >= *deadline {
                    report_lost(name, *rank, *peer, message);
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
                    let missing: Vec<String> =
                        (0..n).filter(|&r| !states[r].registered).map(|r| r.to_string()).collect();
                    eprintln!(
                        "{name}: start-up timed out after {startup_timeout} s: rank(s) {} never initialized MPI",
                        missing.join(", ")
                    );
                    failure = Some(1);
                    stop_all();
                }
                if exited < n {
                    continue;
                }
                Event::Tick
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        match ev {
            Event::Tick => {}
            Event::Registered { rank, addr, fd_addr, tolerant: t, conn } => {
                if states[rank].registered {
                    eprintln!("{name}: warning: rank {rank} registered twice; ignoring the second");
                    continue;
                }
                states[rank].registered = true;
                addrs[rank] = Some(addr);
                fd_addrs[rank] = fd_addr;
                tolerant &= t;
                conns.insert(rank, conn);
                if addrs.iter().all(Option::is_some) && !world_sent {
                    world_sent = true;
                    let table: Vec<String> = addrs.iter().map(|a| a.clone().unwrap()).collect();
                    // Every process needs a detector address for the detector to run.
                    let fd = fd.filter(|_| fd_addrs.iter().all(|a| !a.is_empty()));
                    // The communicator table, sent to every process by a flat tree, with
                    // Δt_i = ts_i − ts_1 for the detector's initial heartbeat (FM eq. 4).
                    let mut first: Option<Instant> = None;
                    for rank in 0..n {
                        let Some(c) = conns.get_mut(&rank) else { continue };
                        let ts = Instant::now();
                        let ts1 = *first.get_or_insert(ts);
                        let msg = Control::World {
                            addrs: table.clone(),
                            fd: fd.map(|p| p.setup(fd_addrs.clone(), ts - ts1)),
                        };
                        let _ = c.write_all(&control::encode(&msg));
                    }
                }
            }
            Event::PeerFailed { rank, failed, detail } => {
                if failed >= n || reported_failed[failed] {
                    continue;
                }
                reported_failed[failed] = true;
                if tolerant {
                    eprintln!(
                        "{name}: {detail} (detected by rank {rank}); the program handles failures, the job goes on"
                    );
                    continue;
                }
                states[rank].lost_peer = Some(failed as u32);
                if failure.is_none() {
                    eprintln!("{name}: {detail} (detected by rank {rank}); stopping the other processes");
                    failure = Some(1);
                    stop_all();
                }
            }
            Event::Finalized { rank } => states[rank].finalized = true,
            Event::Abort { rank, code, message, lost } => {
                states[rank].lost_peer = lost;
                if failure.is_some() {
                    continue;
                }
                let code = if code == 0 { 1 } else { code & 0xff };
                match lost {
                    // A consequence of another rank's death: give that rank's own exit a
                    // moment to arrive, so the report names the root cause.
                    Some(peer) => {
                        if provisional.is_none() {
                            provisional = Some((Instant::now() + ROOT_CAUSE_GRACE, rank, peer, code, message));
                        }
                    }
                    None => {
                        if !message.is_empty() && !message.contains(&format!("rank {rank}:")) {
                            eprintln!("{name}: rank {rank}: {message}");
                        }
                        eprintln!(
                            "{name}: rank {rank} aborted the job (error code {code}); stopping the other processes"
                        );
                        failure = Some(code);
                        stop_all();
                    }
                }
            }
            Event::ControlClosed { rank } => states[rank].ctrl_closed = true,
            Event::Exited { rank, status } => {
                if states[rank].exit.is_some() {
                    continue;
                }
                exited += 1;
                states[rank].exit = Some(status);
            }
            Event::BadClient { detail } => {
                eprintln!("{name}: warning: refused a control connection: {detail}");
            }
            Event::Lost { ranks, why } => {
                for &rank in &ranks {
                    if states[rank].exit.is_none() {
                        exited += 1;
                        states[rank].exit = Some(ExitStatus::from_raw(libc::SIGKILL));
                        states[rank].ctrl_closed = true;
                        states[rank].judged = true;
                    }
                }
                if tolerant && world_sent && failure.is_none() {
                    eprintln!("{name}: {why}; the program handles failures, the job goes on");
                } else if failure.is_none() {
                    eprintln!("{name}: {why}; stopping the other processes");
                    failure = Some(1);
                    stop_all();
                }
            }
        }
        // Judge processes that are gone and whose control connection is closed.
        for rank in 0..n {
            let s = &mut states[rank];
            let Some(status) = s.exit else { continue };
            if s.judged || (s.registered && !s.ctrl_closed) {
                continue;
            }
            s.judged = true;
            if failure.is_some() || s.lost_peer.is_some() {
                continue;
            }
            let bad = if !status.success() {
                Some((format!("rank {rank} (pid {}) {}", s.pid, describe(&status)), exit_code_of(&status)))
            } else if s.registered && !s.finalized {
                Some((
                    format!("rank {rank} (pid {}) exited without finalizing MPI (the Universe was not dropped)", s.pid),
                    1,
                ))
            } else if !s.registered && states.iter().any(|o| o.registered) && !world_sent {
                Some((
                    format!(
                        "rank {rank} (pid {}) exited without initializing MPI while the other ranks wait for it",
                        states[rank].pid
                    ),
                    1,
                ))
            } else {
                None
            };
            if let Some((msg, code)) = bad {
                if tolerant && world_sent {
                    eprintln!("{name}: {msg}; the program handles failures, the job goes on");
                    continue;
                }
                eprintln!("{name}: {msg}; stopping the other processes");
                failure = Some(code);
                stop_all();
            }
        }
        // A program that handles failures: once every process has ended or was declared
        // failed, the failed ones (frozen, cut off) are stopped so the job can end.
        if tolerant && world_sent && !stragglers_stopped && failure.is_none() {
            let all_done = (0..n).all(|r| states[r].exit.is_some() || reported_failed[r]);
            if all_done && (0..n).any(|r| states[r].exit.is_none()) {
                stragglers_stopped = true;
                for r in 0..n {
                    if reported_failed[r] {
                        states[r].judged = true;
                    }
                }
                stop_all();
            }
        }
    }
    // Every process ended before a lost-peer abort's grace ran out: it is still the failure.
    if let (None, Some((_, rank, peer, code, message))) = (failure, &provisional) {
        report_lost(name, *rank, *peer, message);
        failure = Some(*code);
    }
    failure.unwrap_or(0)
}

/// Reports that `rank` stopped because it lost `peer` (its own message says how).
fn report_lost(name: &str, rank: usize, peer: u32, message: &str) {
    let why = message.strip_prefix("p2pmpi: ").unwrap_or(message);
    if why.is_empty() {
        eprintln!("{name}: rank {rank} lost contact with rank {peer} and stopped; stopping the other processes");
    } else {
        eprintln!("{name}: {why}; stopping the other processes");
    }
}

/// Accepts control connections; each is served by its own thread.
pub(crate) fn spawn_control_server(listener: TcpListener, token: u64, n: usize, tx: Sender<Event>) {
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let tx = tx.clone();
            std::thread::spawn(move || serve_control(conn, token, n, tx));
        }
    });
}

fn serve_control(mut conn: TcpStream, token: u64, n: usize, tx: Sender<Event>) {
    let _ = conn.set_nodelay(true);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let (rank, addr, fd_addr, tolerant) = match control::read_msg(&mut conn) {
        Ok(Some(Control::Register { rank, data_addr, pid: _, token: t, fd_addr, tolerant }))
            if t == token && (rank as usize) < n =>
        {
            (rank as usize, data_addr, fd_addr, tolerant)
        }
        Ok(Some(Control::Register { .. })) => {
            let _ = tx.send(Event::BadClient { detail: "wrong job token or rank".into() });
            return;
        }
        Ok(other) => {
            let _ = tx.send(Event::BadClient { detail: format!("expected a registration, got {other:?}") });
            return;
        }
        Err(e) => {
            let _ = tx.send(Event::BadClient { detail: e.to_string() });
            return;
        }
    };
    let _ = conn.set_read_timeout(None);
    let Ok(writer) = conn.try_clone() else { return };
    let _ = tx.send(Event::Registered { rank, addr, fd_addr, tolerant, conn: writer });
    loop {
        match control::read_msg(&mut conn) {
            Ok(Some(Control::Finalized { .. })) => {
                let _ = tx.send(Event::Finalized { rank });
            }
            Ok(Some(Control::Abort { code, message, lost, .. })) => {
                let _ = tx.send(Event::Abort { rank, code, message, lost });
            }
            Ok(Some(Control::PeerFailed { failed, detail, .. })) => {
                let _ = tx.send(Event::PeerFailed { rank, failed: failed as usize, detail });
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                let _ = tx.send(Event::ControlClosed { rank });
                return;
            }
        }
    }
}

/// Copies a child's output to ours, line by line, optionally prefixed.
pub(crate) fn pump(
    src: impl Read + Send + 'static,
    err: bool,
    prefix: Option<String>,
    lock: Arc<Mutex<()>>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::with_capacity(64 * 1024, src);
        let mut line = Vec::with_capacity(256);
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let _g = lock.lock().unwrap_or_else(|p| p.into_inner());
                    let res = if err {
                        let mut o = std::io::stderr().lock();
                        write_line(&mut o, prefix.as_deref(), &line)
                    } else {
                        let mut o = std::io::stdout().lock();
                        write_line(&mut o, prefix.as_deref(), &line)
                    };
                    if res.is_err() {
                        // Our own output is gone (closed pipe): keep draining the child.
                    }
                }
            }
        }
    })
}

pub(crate) fn write_line(o: &mut impl Write, prefix: Option<&str>, line: &[u8]) -> std::io::Result<()> {
    if let Some(p) = prefix {
        o.write_all(p.as_bytes())?;
    }
    o.write_all(line)?;
    if !line.ends_with(b"\n") {
        o.write_all(b"\n")?;
    }
    o.flush()
}

pub(crate) fn watch_exits(children: Arc<Mutex<Vec<Child>>>, tx: Sender<Event>) {
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
                    if tx.send(Event::Exited { rank, status }).is_err() {
                        return;
                    }
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
        unsafe {
            libc::kill(pid as i32, libc::SIGTERM);
            libc::kill(pid as i32, libc::SIGCONT);
        }
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
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    });
}

fn kill_all(children: &mut [Child]) {
    for c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}
