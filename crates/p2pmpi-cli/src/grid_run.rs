//! `p2pmpirun` on the grid: the submitter's side of job start-up (SPEC §3, thesis §3.2).
//!
//! 1. The local MPD discovers and reserves hosts (its RS books N×R + 3·log2(N×R) hosts by
//!    increasing latency) and returns the placement: hosts with their ranks, this host first
//!    with rank 0.
//! 2. The program and the `-l` input files are staged to every other host's FT, several at
//!    once (`STAGING_FANOUT`); unchanged files are cache hits.
//! 3. Each host's MPD is asked to launch its ranks, presenting the reservation ticket; the
//!    connection then carries the processes' output and exit status back here.
//! 4. Rank 0 (the root process) starts here. Every process registers with the root's control
//!    port (this process), which builds the communicator and sends it to all by a flat tree.
//!
//! A failure at any step releases every reservation and stops every process already started;
//! a peer lost while the job runs stops the job with a message naming it.
//!
//! With `-r R` the reservation places every rank R times on R different hosts, rank 0
//! included, and the j-th copy of rank k, in placement order, is its replica j: slot
//! [`Layout::slot`]`(k, j)`. Rank 0's first copy — its master while it lives — runs here (the
//! reservation places it on the submitter); its other replicas run elsewhere like any rank's.
//! Hosts launch slots; a replica lost with its host is reported and the job goes on while its
//! rank keeps another replica.
//!
//! A running job's `spawn` goes through steps 1–3 again, from this process ([`GridSpawn`]):
//! the children are reserved, staged and launched like the job, as a job of their own whose
//! output and exits come back here. With `-r R` they are reserved like a replicated job (R
//! copies of every child rank on R different hosts) and launched as replica slots.

use crate::options::{self, RunArgs};
use crate::output::Output;
use crate::supervise::{self, Event, Job};
use crate::watch;
use anyhow::{bail, Context, Result};
use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use p2pmpi::bootstrap::env;
use p2pmpi_core::replication::Layout;
use p2pmpi_peer::config::Config;
use p2pmpi_peer::ft::{self, LocalFile};
use p2pmpi_peer::home::{self, Home, MpdState};
use p2pmpi_peer::mpd;
use p2pmpi_wire::control::SpawnApp;
use p2pmpi_wire::grid::*;
use p2pmpi_wire::secure::{GridSecret, SecureConn, SecureWriter};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The grid as seen from this host: its configuration and running peer daemon.
#[derive(Clone)]
pub struct Grid {
    pub cfg: Config,
    pub state: MpdState,
    pub secret: GridSecret,
}

/// Loads the configuration, printing its warnings once.
pub fn load_config(name: &str) -> Result<Config> {
    let (cfg, warnings) = Config::load()?;
    for w in warnings {
        eprintln!("{name}: warning: {w}");
    }
    Ok(cfg)
}

/// The handshake credential: this p2pmpi directory's member key and certificate when it has
/// one (member mode), else the configuration's grid secret (transition mode), else an error
/// saying where to set it.
pub fn secret_of(cfg: &Config) -> Result<GridSecret> {
    let home = p2pmpi_peer::home::Home::user();
    if let Some(member) = p2pmpi_peer::members::credential(&home, p2pmpi_peer::members::unix_now_s())? {
        return Ok(member);
    }
    match &cfg.grid_secret {
        Some(s) if !s.is_empty() => Ok(GridSecret::from_phrase(s)),
        _ => match &cfg.source {
            Some(file) => bail!(
                "GRID_SECRET is not set in {}: every daemon and command of a grid must share one secret. Add the \
                 grid's GRID_SECRET line (copied from the supernode's machine), or write a new file with \
                 `p2pmpi init --force`",
                file.display()
            ),
            None => bail!(
                "GRID_SECRET is not set: there is no configuration file ({} does not exist and P2PMPI_CONF_FILE \
                 is not set). Create one with `p2pmpi init` (`p2pmpi init --supernode HOST:PORT` for a grid of \
                 several machines), or try a grid on this machine with `p2pmpi local-grid start`; `p2pmpi \
                 doctor` checks the rest",
                p2pmpi_peer::config::p2pmpi_dir().join(p2pmpi_peer::config::CONF_FILE_NAME).display()
            ),
        },
    }
}

/// Finds this host's running peer daemon. `None` when there is none and `force` is false.
pub fn find_grid(force: bool) -> Result<Option<Grid>> {
    let home = Home::user();
    let Some(state) = mpd::running(&home) else {
        if force {
            bail!(
                "no peer daemon runs here (p2pmpi directory {}): start one with mpiboot, or a local grid with \
                 `p2pmpi local-grid start`",
                home.dir.display()
            );
        }
        return Ok(None);
    };
    let cfg = load_config("p2pmpirun")?;
    let secret = secret_of(&cfg)?;
    Ok(Some(Grid { cfg, state, secret }))
}

/// A spinner on the terminal, shown only once a step has lasted more than a second
/// (`P2PMPI_PROGRESS_DELAY_MS` changes that delay; 0 shows it at once). Nothing is drawn when
/// standard error is not a terminal.
struct Progress {
    start: Instant,
    bar: Option<ProgressBar>,
    msg: String,
}

fn spinner_delay() -> Duration {
    static DELAY: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| {
        let ms = std::env::var("P2PMPI_PROGRESS_DELAY_MS").ok().and_then(|v| v.trim().parse().ok());
        Duration::from_millis(ms.unwrap_or(1000))
    })
}

impl Progress {
    fn new() -> Self {
        Progress { start: Instant::now(), bar: None, msg: String::new() }
    }
    fn set(&mut self, msg: impl Into<String>) {
        self.msg = msg.into();
        if self.bar.is_none() && self.start.elapsed() >= spinner_delay() {
            let bar = ProgressBar::new_spinner();
            bar.set_style(ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").unwrap());
            bar.enable_steady_tick(Duration::from_millis(120));
            self.bar = Some(bar);
        }
        if let Some(b) = &self.bar {
            b.set_message(self.msg.clone());
        }
    }
    /// Shows the spinner at once (not after a second).
    fn show_now(&mut self) {
        self.start = Instant::now().checked_sub(Duration::from_secs(2)).unwrap_or(self.start);
    }
    fn tick(&mut self) {
        let m = self.msg.clone();
        self.set(m);
    }
    fn done(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// Gives reservations back when dropped (every exit path of a submission).
pub(crate) struct Reservation {
    grid: Grid,
    ticket: Ticket,
    peers: Vec<PeerInfo>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let req = MpdRequest::Release { ticket: self.ticket, peers: std::mem::take(&mut self.peers) };
        let _ = mpd::call(Some(self.grid.state.ip), self.grid.state.mpd_addr(), &self.grid.secret, &req);
    }
}

fn input_files(opts: &RunArgs, program: &Path, app: &str) -> Result<Vec<LocalFile>> {
    let mut files = vec![LocalFile::Path { name: app.to_string(), path: program.to_path_buf(), executable: true }];
    for f in opts.files.iter().filter(|f| !f.trim().is_empty()) {
        let f = f.trim();
        if f.starts_with("http://") || f.starts_with("https://") {
            let name = f.trim_end_matches('/').rsplit('/').next().unwrap_or("input").to_string();
            files.push(LocalFile::Url { name, url: f.to_string(), executable: false });
        } else {
            let path = PathBuf::from(f);
            if !path.is_file() {
                bail!("input file {f} not found (given with -l)");
            }
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| f.to_string());
            let executable = {
                use std::os::unix::fs::PermissionsExt;
                path.metadata().map(|m| m.permissions().mode() & 0o111 != 0).unwrap_or(false)
            };
            files.push(LocalFile::Path { name, path, executable });
        }
    }
    let mut names: Vec<&str> = files
        .iter()
        .map(|f| match f {
            LocalFile::Path { name, .. } | LocalFile::Url { name, .. } => name.as_str(),
        })
        .collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        bail!("two staged files are both named {}", w[0]);
    }
    Ok(files)
}

/// The slots each host of a reservation runs (`placements`: the ranks of each host, this
/// host first). Rank 0 is slot 0, on this host; its other copies are dropped. The j-th
/// occurrence of rank k ≥ 1, in placement order, is replica j. With R = 1 slots are ranks.
pub(crate) fn assign_slots(layout: Layout, placements: &[Vec<u32>]) -> Result<Vec<Vec<u32>>> {
    let mut seen = vec![0usize; layout.n];
    let mut slots: Vec<Vec<u32>> = Vec::with_capacity(placements.len());
    for ranks in placements {
        let mut here = Vec::new();
        for &k in ranks {
            let k = k as usize;
            if k >= layout.n {
                bail!("the reservation placed rank {k} in a job of {} rank(s)", layout.n);
            }
            let j = seen[k];
            seen[k] += 1;
            if j >= layout.r {
                bail!("the reservation placed rank {k} more than {} time(s)", layout.r);
            }
            here.push(layout.slot(k, j) as u32);
        }
        slots.push(here);
    }
    if let Some(k) = (0..layout.n).find(|&k| seen[k] != layout.r) {
        bail!("the reservation placed rank {k} {} time(s) instead of {}", seen[k], layout.r);
    }
    if !slots.first().is_some_and(|s| s.contains(&0)) {
        bail!("the reservation did not place rank 0 on this host");
    }
    Ok(slots)
}

fn addr_of(info: &PeerInfo, port: u16) -> SocketAddr {
    SocketAddr::new(info.id.ip.parse().unwrap_or(IpAddr::from([127, 0, 0, 1])), port)
}

/// Start-up attempts at most: each after the first reserves without the hosts that stopped
/// answering during the previous ones.
const MAX_ATTEMPTS: usize = 4;
/// Longest wait for a staging that makes no progress, while its host answers its pings.
const STAGING_STALL: Duration = Duration::from_secs(120);

/// What to reserve.
#[derive(Clone, Copy)]
struct Ask<'a> {
    n: usize,
    r: usize,
    strategy: p2pmpi_core::allocation::Strategy,
    app: &'a str,
    /// Hosts given up on, with why: not to be reserved again.
    exclude: &'a [(PeerId, String)],
    /// `-H`/`--hostfile`: the only hosts that may be reserved (empty: any).
    only: &'a [String],
}

/// Step 1: discovery and reservation, by the local MPD. (ticket, placements)
fn reserve(
    name: &str,
    grid: &Grid,
    opts: &RunArgs,
    ask: Ask<'_>,
    progress: &mut Progress,
) -> Result<(Ticket, Vec<Placement>)> {
    let Ask { n, r, strategy, app, exclude, only } = ask;
    let mut c =
        SecureConn::connect_from(Some(grid.state.ip), grid.state.mpd_addr(), &grid.secret, Duration::from_secs(5))
            .with_context(|| format!("cannot reach this host's peer daemon at {}", grid.state.mpd_addr()))?;
    c.set_max_record(64 << 20);
    c.send(&MpdRequest::Reserve {
        n: n as u32,
        r: r as u32,
        strategy: strategy.to_string(),
        wait_ms: opts.wait.saturating_mul(1000),
        app: app.to_string(),
        exclude: exclude.iter().map(|(id, _)| id.clone()).collect(),
        only: only.to_vec(),
    })?;
    c.set_read_timeout(Some(Duration::from_millis(200)))?;
    progress.set(format!("reserving hosts for {n}×{r} process(es)"));
    let started = Instant::now();
    // The grid fell short: what it gave, and until when the peer daemon keeps asking.
    let mut short: Option<(String, Instant)> = None;
    // The hosts and slots it gave then.
    let mut last_short = (0, 0);
    loop {
        match c.recv::<MpdResponse>() {
            Ok(Some(MpdResponse::Progress { accepted, needed, .. })) if short.is_none() => {
                progress.set(format!("reserving hosts: {accepted} accepted, {needed} process(es) to place"))
            }
            Ok(Some(MpdResponse::Progress { .. })) => progress.tick(),
            Ok(Some(MpdResponse::Short { hosts, slots, needed, left_ms })) => {
                let found = format!(
                    "the grid gives {slots} process slot(s) on {hosts} host(s){}, the job needs {needed}{}",
                    if only.is_empty() { "" } else { " allowed by -H/--hostfile" },
                    if r > 1 {
                        format!(" (-n {n} × -r {r}, the copies of a rank on different hosts)")
                    } else {
                        String::new()
                    }
                );
                let until = Instant::now() + Duration::from_millis(left_ms);
                progress.done();
                eprintln!(
                    "{name}: {found}; waiting up to {} s for more peers to join (-w {})\n{name}: {}",
                    left_ms.div_ceil(1000),
                    opts.wait,
                    capacity_hint(hosts, slots)
                );
                short = Some((found, until));
                last_short = (hosts, slots);
                *progress = Progress::new();
                progress.show_now();
            }
            Ok(Some(MpdResponse::Reserved { ticket, placements })) => return Ok((ticket, placements)),
            Ok(Some(MpdResponse::Failed(msg))) if short.is_some() => {
                bail!("{msg}; {}", capacity_hint(last_short.0, last_short.1))
            }
            Ok(Some(MpdResponse::Failed(msg))) => bail!("{msg}"),
            Ok(Some(other)) => bail!("unexpected answer from the peer daemon: {other:?}"),
            Ok(None) => bail!("the peer daemon closed the connection during reservation"),
            Err(e) if e.is_timeout() => {
                if let Some((found, until)) = &short {
                    let left = until.saturating_duration_since(Instant::now()).as_secs_f64().ceil();
                    progress.set(format!("{found}; still looking for peers: {left:.0} s left"));
                }
                progress.tick();
                // The MPD gives up at -w itself; allow it a margin before we do.
                if started.elapsed() > Duration::from_secs(opts.wait + 30) {
                    bail!("the peer daemon did not finish the reservation in time");
                }
            }
            Err(e) => bail!("reservation failed: {e}"),
        }
    }
}

/// What a grid short of slots can change: each peer lends a job at most its
/// `MAX_PROCESSES_PER_JOB` processes (default 1), so `hosts` peers give at most `slots`.
fn capacity_hint(hosts: impl std::fmt::Display, slots: impl std::fmt::Display) -> String {
    format!(
        "each peer lends a job at most MAX_PROCESSES_PER_JOB process(es) (default 1; {hosts} host(s) give {slots}): \
         raise it in each peer's P2P-MPI.conf and restart its daemon (mpihalt, mpiboot), add peers, or ask for \
         fewer processes with -n"
    )
}

/// An error of a start-up that gave up on hosts, naming them and why.
fn with_given_up(e: anyhow::Error, given_up: &[(PeerId, String)]) -> anyhow::Error {
    if given_up.is_empty() {
        return e;
    }
    let hosts: Vec<String> = given_up.iter().map(|(id, why)| format!("host {id}: {why}")).collect();
    anyhow::anyhow!("{e:#}; gave up during start-up on {}", hosts.join("; on "))
}

/// Pings a host's peer daemon: `Pong` within [`watch::PING_TIMEOUT`], or why not.
fn pinger(me: IpAddr, secret: &GridSecret) -> watch::Ping {
    let secret = secret.clone();
    Arc::new(move |h: &PeerInfo| {
        let start = Instant::now();
        let addr = addr_of(h, h.id.mpd_port);
        let mut c =
            SecureConn::connect_from(Some(me), addr, &secret, watch::PING_TIMEOUT).map_err(|e| e.to_string())?;
        let left = watch::PING_TIMEOUT.saturating_sub(start.elapsed()).max(Duration::from_millis(100));
        c.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        match c.call::<_, MpdResponse>(&MpdRequest::Ping) {
            Ok(MpdResponse::Pong) => Ok(()),
            Ok(other) => Err(format!("it answered {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    })
}

/// Says what a watched step waits for: on the spinner, and with `-v` a line for each host
/// that is pinged (when standard error is not a terminal, the spinner does not show).
struct Waiter<'a> {
    name: &'a str,
    what: String,
    verbose: bool,
    told: std::collections::HashSet<usize>,
}

impl<'a> Waiter<'a> {
    fn new(name: &'a str, what: impl Into<String>, verbose: bool) -> Self {
        Waiter { name, what: what.into(), verbose, told: Default::default() }
    }

    /// The spinner's message for this turn.
    fn turn(&mut self, hosts: &[PeerInfo], waiting: &[watch::Waiting]) -> String {
        for w in waiting.iter().filter(|w| w.pinging) {
            if self.verbose && self.told.insert(w.host) {
                eprintln!(
                    "{}: {}: waiting for host {} ({} s): checking that it is alive",
                    self.name, self.what, hosts[w.host].id, w.for_s
                );
            }
        }
        let shown: Vec<String> = waiting
            .iter()
            .take(3)
            .map(|w| {
                let ping = if w.pinging { ", pinging" } else { "" };
                format!("{} ({} s{ping})", hosts[w.host].id, w.for_s)
            })
            .collect();
        let more = if waiting.len() > 3 { format!(" and {} more", waiting.len() - 3) } else { String::new() };
        format!("{}: waiting for {}{more}", self.what, shown.join(", "))
    }
}

/// Step 2: stages the files to `targets`, each host watched. Returns the hosts that stopped
/// answering (given up, with why); an error for any other failure.
#[allow(clippy::too_many_arguments)]
fn stage_all(
    name: &str,
    grid: &Grid,
    opts: &RunArgs,
    ticket: Ticket,
    job: &str,
    files: &[LocalFile],
    targets: &[PeerInfo],
    progress: &mut Progress,
) -> Result<Vec<(PeerId, String)>> {
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    let what = format!("staging {} file(s) to {} host(s)", files.len(), targets.len());
    progress.set(what.clone());
    let metas = ft::describe(files)?;
    let mut waiter = Waiter::new(name, format!("staging {} file(s)", files.len()), opts.verbose);
    // Bytes of content sent so far, to every host together: shown as they go.
    let sent = std::sync::atomic::AtomicU64::new(0);
    let started = Instant::now();
    let outcomes = watch::run(
        targets,
        grid.cfg.staging_fanout.max(1) as usize,
        pinger(grid.state.ip, &grid.secret),
        &mut |w| {
            let bytes = sent.load(std::sync::atomic::Ordering::Relaxed);
            let rate = bytes as f64 / started.elapsed().as_secs_f64().max(0.001);
            let mut msg = format!("{what}: {} sent ({}/s)", HumanBytes(bytes), HumanBytes(rate as u64));
            // Hosts slow to answer are named (every host is "waited for" while it stages).
            let turn = waiter.turn(targets, w);
            if w.iter().any(|x| x.pinging) {
                msg = format!("{msg}; {turn}");
            }
            progress.set(msg)
        },
        &|i, cancel| {
            let addr = addr_of(&targets[i], targets[i].ft_port);
            ft::stage_counted(addr, &grid.secret, ticket, job, files, &metas, STAGING_STALL, cancel, &sent)
        },
    );
    if opts.verbose {
        eprintln!(
            "{name}: staging sent {} to {} host(s) in {} ms",
            HumanBytes(sent.load(std::sync::atomic::Ordering::Relaxed)),
            targets.len(),
            started.elapsed().as_millis()
        );
    }
    let mut frozen = Vec::new();
    for (info, outcome) in targets.iter().zip(outcomes) {
        match outcome {
            watch::Outcome::Done(rep) if opts.verbose => eprintln!(
                "{name}: staged to {}: {} cached, {} sent, {} fetched by the peer",
                info.id, rep.cached, rep.received, rep.fetched
            ),
            watch::Outcome::Done(_) => {}
            watch::Outcome::Failed(e) => {
                progress.done();
                bail!("staging to host {} failed: {e:#}", info.id);
            }
            watch::Outcome::Unresponsive(why) => frozen.push((info.id.clone(), why)),
        }
    }
    Ok(frozen)
}

/// A job reserved and staged: the reservation (given back when dropped), the hosts with
/// the ranks the reservation placed there, the slots each host runs, and the job's id.
struct Staged {
    reservation: Reservation,
    placements: Vec<Placement>,
    assigned: Vec<Vec<u32>>,
    job: String,
}

/// Steps 1–2: reservation and staging of `files` to every host that runs a process besides
/// slot 0 (`slot0_staged`: slot 0 too, which then runs in a job directory like the others); a
/// host that stops answering during staging is given up and the job reserved again without it
/// (as the -w loop keeps looking for hosts). `None` after `--dry-run` printed the placement.
fn reserve_and_stage(
    name: &str,
    grid: &Grid,
    opts: &RunArgs,
    ask: Ask<'_>,
    files: &[LocalFile],
    slot0_staged: bool,
    progress: &mut Progress,
) -> Result<Option<Staged>> {
    let layout = Layout::new(ask.n, ask.r);
    let mut given_up: Vec<(PeerId, String)> = ask.exclude.to_vec();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let reserving = Instant::now();
        let (ticket, placements) = match reserve(name, grid, opts, Ask { exclude: &given_up, ..ask }, progress) {
            Ok(t) => t,
            Err(e) => {
                progress.done();
                return Err(with_given_up(e, &given_up));
            }
        };
        if opts.verbose {
            let hosts: Vec<String> = placements.iter().map(|p| format!("{}×{}", p.info.id, p.ranks.len())).collect();
            eprintln!("{name}: reserved {} in {} ms", hosts.join(", "), reserving.elapsed().as_millis());
        }
        let mut reservation =
            Reservation { grid: grid.clone(), ticket, peers: placements.iter().map(|p| p.info.clone()).collect() };
        let assigned = assign_slots(layout, &placements.iter().map(|p| p.ranks.clone()).collect::<Vec<_>>());

        if opts.dry_run {
            progress.done();
            println!("{:<22} {:>5}  ranks", "host", "procs");
            for p in &placements {
                let ranks: Vec<String> = p.ranks.iter().map(|r| r.to_string()).collect();
                println!("{:<22} {:>5}  {}", p.info.id.to_string(), p.ranks.len(), ranks.join(" "));
            }
            if layout.slots() > layout.n {
                // The table above is the reservation as placed (scripts read it); which copy is
                // which replica is told apart, on stderr.
                eprint!("{}", describe_replicas(layout, &placements, &assigned?));
            }
            return Ok(None);
        }
        let assigned = assigned?;

        // 2. Staging to every host that runs a process besides slot 0.
        let job = format!("{:032x}", home::random_u128());
        let targets: Vec<PeerInfo> = placements
            .iter()
            .zip(&assigned)
            .filter(|(_, s)| s.iter().any(|&x| x != 0 || slot0_staged))
            .map(|(p, _)| p.info.clone())
            .collect();
        let frozen = stage_all(name, grid, opts, ticket, &job, files, &targets, progress)?;
        if frozen.is_empty() {
            return Ok(Some(Staged { reservation, placements, assigned, job }));
        }
        progress.done();
        for (id, why) in &frozen {
            eprintln!("{name}: gave up on host {id} during staging: {why}");
        }
        // Its reservation lapses by itself; the others are given back now.
        reservation.peers.retain(|p| !frozen.iter().any(|(id, _)| *id == p.id));
        drop(reservation);
        given_up.extend(frozen);
        if attempt >= MAX_ATTEMPTS {
            bail!("{}", with_given_up(anyhow::anyhow!("giving up after {attempt} start-up attempts"), &given_up));
        }
        eprintln!("{name}: reserving other hosts instead");
    }
}

/// Whether every host that runs a process of the job is on a loopback address (a local grid:
/// all the processes share one machine).
/// On a local grid (every host a loopback address: several MPDs on this one machine) the job's
/// processes run in several sessions, each MPD's and the submitter's, and Linux's autogroup
/// scheduling gives each session its own share of the cores: `sched_yield` in one hands the
/// core to no process of another. Polling with it between waits then only burns the session's
/// share (16 ranks on 16 peers, 2 cores: a barrier took 3.5-5.8 ms, 1.1 ms when each rank
/// sleeps at once, the first barrier 34-41 ms against 2.3-2.7), so such a job's processes sleep
/// as soon as their spin ends (`P2PMPI_YIELD_US=0`, unless the submitter set it).
fn split_sessions_env(all_loopback: bool) -> Option<(String, String)> {
    const YIELD_US: &str = "P2PMPI_YIELD_US";
    (all_loopback && std::env::var_os(YIELD_US).is_none()).then(|| (YIELD_US.to_string(), "0".to_string()))
}

fn all_loopback(placements: &[Placement], assigned: &[Vec<u32>]) -> bool {
    placements
        .iter()
        .zip(assigned)
        .filter(|(_, s)| !s.is_empty())
        .all(|(p, _)| p.info.id.ip.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()))
}

/// Where the launched hosts' events go: their processes' output and exits, the files they
/// send back.
struct FollowAll {
    layout: Layout,
    /// `-v`: the command's name, to report every process started with its pid.
    verbose: Option<String>,
    output: Arc<Output>,
    collector: Option<Arc<Collector>>,
    tx: Sender<Event>,
}

/// What [`launch_hosts`] started: the submitter's ends of the hosts' launch connections (to
/// signal their processes), the threads that follow each host with the slots it runs, and
/// the hosts that did not launch (their slots, and why).
struct Launched {
    remotes: Vec<Arc<Mutex<SecureWriter>>>,
    readers: Vec<(Vec<u32>, std::thread::JoinHandle<()>)>,
    failed: Vec<(Vec<u32>, String)>,
}

/// Step 3: asks every host of `remote` (a placement, the slots it launches, how many
/// processes it runs in all) to launch its slots, all at once, each host watched; `spec_for`
/// writes a host's request from its slots and process count.
fn launch_hosts(
    name: &str,
    grid: &Grid,
    verbose: bool,
    remote: &[(&Placement, Vec<u32>, usize)],
    spec_for: &(dyn Fn(&[u32], usize) -> LaunchSpec + Sync),
    follow: &FollowAll,
    progress: &mut Progress,
) -> Launched {
    let me = grid.state.ip;
    let procs: usize = remote.iter().map(|(_, s, _)| s.len()).sum();
    progress.set(format!("launching {procs} process(es)"));
    let mut remotes: Vec<Arc<Mutex<SecureWriter>>> = Vec::new();
    let mut readers = Vec::new();
    let mut failed = Vec::new();
    let infos: Vec<PeerInfo> = remote.iter().map(|(p, _, _)| p.info.clone()).collect();
    let mut waiter = Waiter::new(name, format!("launching {procs} process(es)"), verbose);
    let launched = watch::run(
        &infos,
        infos.len(),
        pinger(me, &grid.secret),
        &mut |w| progress.set(waiter.turn(&infos, w)),
        &|i, cancel| {
            let (p, ranks, procs) = &remote[i];
            let spec = spec_for(ranks, *procs);
            let addr = addr_of(&p.info, p.info.id.mpd_port);
            let mut c = SecureConn::connect_cancellable(Some(me), addr, &grid.secret, Duration::from_secs(5), cancel)?;
            c.send(&MpdRequest::Launch(spec))?;
            // The first event (started, or refused) tells the launch was taken; the watch
            // gives the host up long before this time-out if it stops answering.
            c.set_max_record(1 << 20);
            c.set_read_timeout(Some(Duration::from_secs(120)))?;
            let first: JobEvent = c.recv()?.ok_or_else(|| anyhow::anyhow!("the peer daemon closed the connection"))?;
            c.set_read_timeout(None)?;
            Ok((c, first))
        },
    );
    let alive = crate::revoked_hosts::token();
    let mut certs = Vec::new();
    for ((p, ranks, _), launch) in remote.iter().zip(launched) {
        let mut lost = |why: String| failed.push((ranks.clone(), why));
        match launch {
            watch::Outcome::Done((_, JobEvent::Refused(why))) => {
                lost(format!("host {} refused the launch: {why}", p.info.id))
            }
            watch::Outcome::Done((conn, first)) => {
                if let Some(c) = conn.peer_member() {
                    certs.push((c.clone(), ranks.clone()));
                }
                let (reader, writer) = conn.split();
                remotes.push(Arc::new(Mutex::new(writer)));
                let f = Follow {
                    peer: p.info.id.clone(),
                    slots: ranks.clone(),
                    layout: follow.layout,
                    verbose: follow.verbose.clone(),
                    output: follow.output.clone(),
                    collector: follow.collector.clone(),
                    alive: alive.clone(),
                };
                readers.push((ranks.clone(), follow_remote(reader, first, f, follow.tx.clone())));
            }
            watch::Outcome::Failed(e) => lost(format!("cannot launch on host {}: {e:#}", p.info.id)),
            watch::Outcome::Unresponsive(why) => {
                lost(format!("host {} stopped answering during the launch: {why}", p.info.id))
            }
        }
    }
    progress.done();
    crate::revoked_hosts::watch(&grid.cfg, &grid.secret, certs, follow.tx.clone(), Arc::downgrade(&alive));
    Launched { remotes, readers, failed }
}

/// `-H`/`--hostfile`: every host named must be a peer this host's daemon knows (by address or
/// host name, or a name that resolves to its address).
fn check_hosts(grid: &Grid, only: &[String]) -> Result<()> {
    if only.is_empty() {
        return Ok(());
    }
    let MpdResponse::Hosts { me, hosts } =
        mpd::call(Some(grid.state.ip), grid.state.mpd_addr(), &grid.secret, &MpdRequest::Hosts)?
    else {
        bail!("unexpected answer from this host's peer daemon");
    };
    let mut known: Vec<(String, String)> = vec![(me.ip.clone(), home::hostname())];
    known.extend(hosts.iter().filter(|h| h.alive).map(|h| (h.info.id.ip.clone(), h.info.name.clone())));
    for h in only {
        let ips: Vec<String> = {
            use std::net::ToSocketAddrs;
            (h.as_str(), 0).to_socket_addrs().into_iter().flatten().map(|a| a.ip().to_string()).collect()
        };
        if !known.iter().any(|(ip, host)| ip == h || host == h || ips.contains(ip)) {
            let list: Vec<&str> = known.iter().map(|(ip, _)| ip.as_str()).collect();
            bail!(
                "host {h} (given with -H/--host or --hostfile) is not a peer of the grid that answers; the peers known \
                 here are {}",
                list.join(", ")
            );
        }
    }
    Ok(())
}

/// Runs a job on the grid. Returns its exit status.
pub fn run(name: &str, opts: &RunArgs, n: usize, grid: Grid) -> Result<i32> {
    let program = options::resolve_program(&opts.command[0])?;
    let app = program.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "program".into());
    let mut files = input_files(opts, &program, &app)?;
    let (host_args, _wrapper_dir) = python_on_hosts(&program, &app, &opts.command[1..], &mut files)?;
    // p2pmpi's library with MPICH's ABI: first on rank 0's library path, and staged to the
    // hosts for a program that needs it (not for p2pmpi's Rust programs: they hold it).
    let abi = crate::abi::setup(&program, &options::extra_env(opts)?)?;
    let stage_abi = abi.as_ref().filter(|_| crate::abi::needs(&program).is_some());
    if let Some(a) = stage_abi {
        let name = format!("{}/{}", crate::abi::STAGED, crate::abi::NAMES[0]);
        files.push(LocalFile::Path { name, path: a.lib.clone(), executable: false });
    }
    let abi_staged = stage_abi.is_some();
    let strategy: p2pmpi_core::allocation::Strategy = opts.strategy.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let r = opts.replicas as usize;
    let layout = Layout::new(n, r);
    let fd = options::FdPlan::from_options(opts, &grid.cfg)?;
    if opts.verbose {
        eprintln!("{name}: failure detector: {}", fd.as_ref().map_or("off".to_string(), |f| f.name()));
    }
    let mut extra = options::extra_env(opts)?;
    extra.extend(crate::abi::python_env(&extra, true)?);
    let only = options::allowed_hosts(opts)?;
    check_hosts(&grid, &only)?;
    let output = Arc::new(Output::create(layout, opts.tag_output, opts.output_filename.as_deref())?);
    let collector = (!opts.collect.is_empty()).then(|| {
        Arc::new(Collector {
            name: name.to_string(),
            base: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            since: std::time::SystemTime::now(),
            written: Mutex::new(Default::default()),
            placing: Mutex::new(()),
        })
    });
    let mut job = GridJob {
        name,
        opts,
        grid: &grid,
        layout,
        program,
        app,
        host_args,
        fd,
        extra,
        only,
        output,
        collector,
        abi,
        abi_staged,
        ckpt_env: Vec::new(),
        checkpoints: Mutex::new(None),
    };
    // 1–2. Reservation and staging (without the hosts given up on by a restart), then 3–4.
    let start = |job: &GridJob, exclude: &[(PeerId, String)]| -> Result<Option<crate::grid_restart::Attempt>> {
        let mut progress = Progress::new();
        let ask = Ask { n, r, strategy, app: &job.app, exclude, only: &job.only };
        let Some(staged) = reserve_and_stage(name, &grid, opts, ask, &files, false, &mut progress)? else {
            return Ok(None);
        };
        job.launch(staged, progress).map(Some)
    };
    if crate::grid_restart::wanted(opts) {
        return crate::grid_restart::run(name, opts, &mut job, &start);
    }
    Ok(start(&job, &[])?.map_or(0, |a| a.ended.code))
}

/// A Python interpreter as the program (`p2pmpirun -n 4 venv/bin/python3 prog.py`): its copy
/// would not be the interpreter of its environment (a venv is found next to the interpreter's
/// path, and its packages with it), so the hosts get, under the program's name, a script that
/// runs the interpreter at the same path (the environment must be there, as on a shared file
/// system, and readable by confined jobs: `JOB_READ_PATHS`); the script it runs, the first
/// argument when it names a file here, is staged with it and given to the hosts by its staged
/// name. Returns the arguments the hosts get (rank 0, here, keeps the user's) and the
/// directory of the script, removed when the job is over.
fn python_on_hosts(
    program: &Path,
    app: &str,
    args: &[String],
    files: &mut Vec<LocalFile>,
) -> Result<(Vec<String>, Option<WrapperDir>)> {
    let mut host_args = args.to_vec();
    if !app.starts_with("python") || !crate::abi::needs(program).is_some_and(|why| why.starts_with("is Python")) {
        return Ok((host_args, None));
    }
    let interpreter = std::path::absolute(program)?;
    let dir = WrapperDir(std::env::temp_dir().join(format!("p2pmpi-python-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0)?;
    let wrapper = dir.0.join(app);
    let quoted = interpreter.to_string_lossy().replace('\'', "'\\''");
    std::fs::write(&wrapper, format!("#!/bin/sh\nexec '{quoted}' \"$@\"\n"))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
    }
    files[0] = LocalFile::Path { name: app.to_string(), path: wrapper, executable: true };
    if let Some(script) = args.first().filter(|a| !a.starts_with('-') && Path::new(a.as_str()).is_file()) {
        let name = Path::new(script).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let taken = files
            .iter()
            .any(|f| matches!(f, LocalFile::Path { name: n, .. } | LocalFile::Url { name: n, .. } if *n == name));
        if !taken {
            files.push(LocalFile::Path { name: name.clone(), path: PathBuf::from(script), executable: false });
        }
        host_args[0] = name;
    }
    Ok((host_args, Some(dir)))
}

/// The directory of the interpreter's script for the hosts; removed with it.
struct WrapperDir(PathBuf);

impl Drop for WrapperDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A grid job once its options were read: what its launch and its supervision need.
pub(crate) struct GridJob<'a> {
    name: &'a str,
    opts: &'a RunArgs,
    grid: &'a Grid,
    layout: Layout,
    program: PathBuf,
    app: String,
    /// The program's arguments on the hosts (a Python script's path given as its staged name).
    host_args: Vec<String>,
    fd: Option<options::FdPlan>,
    extra: Vec<(String, String)>,
    only: Vec<String>,
    output: Arc<Output>,
    collector: Option<Arc<Collector>>,
    /// p2pmpi's library with MPICH's ABI, here (rank 0's library path).
    abi: Option<crate::abi::Setup>,
    /// Whether it was staged to the hosts (their processes get it first on their path).
    abi_staged: bool,
    /// The checkpoints' variables of this run's processes ([`crate::restart::Run::env`]).
    ckpt_env: Vec<(String, String)>,
    /// The job's checkpoints on its hosts, once granted (`--checkpoint-copies`).
    checkpoints: Mutex<Option<crate::grid_checkpoint::GridCheckpoints>>,
}

/// What the hosts of a grid job run, once launched.
struct Running {
    /// The launched hosts' job connections.
    remotes: Vec<Arc<Mutex<SecureWriter>>>,
    /// Their readers, with the slots each serves.
    readers: Vec<(Vec<u32>, std::thread::JoinHandle<()>)>,
    /// Rank 0's process, here.
    root: Child,
}

impl crate::grid_restart::Job for GridJob<'_> {
    fn prepare(&mut self, output: Output, ckpt_env: Vec<(String, String)>) {
        self.output = Arc::new(output);
        self.ckpt_env = ckpt_env;
    }

    fn layout(&self) -> Layout {
        self.layout
    }

    fn output(&self) -> &Output {
        &self.output
    }

    fn program(&self) -> &Path {
        &self.program
    }

    fn pinger(&self) -> watch::Ping {
        pinger(self.grid.state.ip, &self.grid.secret)
    }

    fn peers_store(&self) -> Option<Box<dyn p2pmpi::checkpoint::store::Store>> {
        let held = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner());
        held.as_ref().map(|c| Box::new(c.store()) as Box<dyn p2pmpi::checkpoint::store::Store>)
    }
}

impl GridJob<'_> {
    /// Launches the reserved and staged job (rank 0 here, the other slots on their hosts) and
    /// follows it to its end.
    fn launch(&self, staged: Staged, mut progress: Progress) -> Result<crate::grid_restart::Attempt> {
        let Staged { reservation, placements, assigned, job } = staged;
        let hosts = crate::grid_restart::slot_hosts(self.layout.slots(), &placements, &assigned);
        let (layout, opts, grid) = (self.layout, self.opts, self.grid);
        // Each host with the slots it launches (slot 0 runs here, started by this process) and
        // how many processes it runs in all.
        let remote: Vec<(&Placement, Vec<u32>, usize)> = placements
            .iter()
            .zip(&assigned)
            .map(|(p, s)| (p, s.iter().copied().filter(|&x| x != 0).collect::<Vec<u32>>(), s.len()))
            .filter(|(_, s, _)| !s.is_empty())
            .collect();

        // 3. The root's control port, then the launches (all at once, each host watched).
        let slots = layout.slots();
        let listener = TcpListener::bind((grid.state.ip, 0)).context("cannot open the root's control port")?;
        let root = listener.local_addr()?;
        // The job's key: handed to each host's MPD inside the launch request (over the Noise
        // session, encrypted), and to rank 0 here in its environment; never sent in clear.
        let key = p2pmpi_wire::auth::JobKey::random()?;
        self.grant_checkpoints(&job, reservation.ticket, &placements)?;
        let (tx, rx) = channel::<Event>();
        let sup = supervise::Shared::new(layout, self.fd.as_ref());
        supervise::spawn_control_server(listener, key.clone(), slots, tx.clone(), sup.clone());
        let all_loopback = all_loopback(&placements, &assigned);
        let spec_for = |ranks: &[u32], procs: usize| {
            let local_procs = if all_loopback { slots } else { procs };
            let mut env = vec![(env::LOCAL_PROCS.to_string(), local_procs.to_string())];
            env.extend(split_sessions_env(all_loopback));
            env.extend(self.job_env());
            if self.abi_staged {
                env.push((p2pmpi_peer::mpd::ABI_DIR_ENV.to_string(), crate::abi::STAGED.to_string()));
            }
            LaunchSpec {
                ticket: reservation.ticket,
                job: job.clone(),
                app: self.app.clone(),
                program: self.app.clone(),
                args: self.host_args.clone(),
                ranks: ranks.to_vec(),
                size: layout.n as u32,
                root: root.to_string(),
                job_key: key.clone(),
                env,
                collect: opts.collect.clone(),
            }
        };
        let follow = FollowAll {
            layout,
            verbose: opts.verbose.then(|| self.name.to_string()),
            output: self.output.clone(),
            collector: self.collector.clone(),
            tx: tx.clone(),
        };
        let Launched { remotes, readers, failed } =
            launch_hosts(self.name, grid, opts.verbose, &remote, &spec_for, &follow, &mut progress);
        for (ranks, why) in failed {
            let _ = tx.send(Event::Lost { ranks: ranks.iter().map(|&x| x as usize).collect(), why });
        }
        progress.done();

        // 4. Rank 0, here.
        let local_procs = if all_loopback { slots } else { assigned[0].len() };
        let child = match self.start_root(root, &key, &job, local_procs, split_sessions_env(all_loopback)) {
            Ok(c) => c,
            Err(e) => {
                stop_remotes(&remotes, libc::SIGKILL);
                return Err(e);
            }
        };
        if let Some(a) = &self.abi {
            let limit = Duration::from_secs(opts.startup_timeout);
            crate::abi::watch_foreign(vec![(0, child.id())], a.lib.clone(), sup.clone(), tx.clone(), limit);
        }
        let notifier = self.notifier(&job, &placements, &assigned);
        progress.done();
        let running = Running { remotes, readers, root: child };
        let (mut ended, spawns) = self.supervise(running, &key, tx, &rx, sup, &notifier);
        if ended.code == 0 {
            // A job that ended well needs its checkpoints no more: deleted on every host but
            // those of its processes that died or were cut off (a host that does not answer
            // would hold the launcher for its connect time-out; it keeps a stale key).
            if let Some(c) = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                let gone: Vec<IpAddr> = ended
                    .deaths
                    .iter()
                    .chain(&ended.lost)
                    .filter_map(|&s| hosts.get(s))
                    .map(|h| addr_of(h, 0).ip())
                    .collect();
                c.peers.retain(|a| !gone.contains(&a.ip()));
                let _ = c.store().clear();
            }
        }
        let _ =
            mpd::call(Some(grid.state.ip), grid.state.mpd_addr(), &grid.secret, &MpdRequest::Retire { job, rank: 0 });
        drop(reservation);
        // The spawned jobs end like the parents' (their exit status counts if the parents' is 0).
        let spawned = spawns.wait();
        if ended.code == 0 {
            ended.code = spawned;
        }
        Ok(crate::grid_restart::Attempt { ended, hosts })
    }

    /// The variables every process of the job gets (besides its own).
    fn job_env(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        if self.layout.r > 1 {
            env.push((env::REPLICAS.to_string(), self.layout.r.to_string()));
        }
        if self.opts.encrypt {
            env.push((env::ENCRYPT.to_string(), "1".to_string()));
        }
        env.extend(self.extra.iter().cloned());
        env.extend(self.ckpt_env.iter().cloned());
        if let Some(c) = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            env.extend(c.env());
        }
        env
    }

    /// Grants the job's checkpoints to its hosts (`--checkpoint-copies` K > 0). A job launched
    /// again (a restart) keeps its checkpoints' id and secret, and its new hosts are added.
    fn grant_checkpoints(&self, job: &str, ticket: Ticket, placements: &[Placement]) -> Result<()> {
        if self.opts.checkpoint_copies == 0 {
            return Ok(());
        }
        let mut held = self.checkpoints.lock().unwrap_or_else(|p| p.into_inner());
        let c = match held.as_mut() {
            Some(c) => c,
            None => {
                held.insert(crate::grid_checkpoint::GridCheckpoints::new(job, self.opts.checkpoint_copies as usize)?)
            }
        };
        let hosts: Vec<PeerInfo> = placements.iter().map(|p| p.info.clone()).collect();
        for (host, why) in c.grant(self.grid.state.ip, &self.grid.secret, ticket, &hosts) {
            eprintln!("{}: host {host} keeps no checkpoints of this job: {why}", self.name);
        }
        Ok(())
    }

    /// Starts rank 0 here, and announces it to this host's MPD.
    fn start_root(
        &self,
        root: SocketAddr,
        key: &p2pmpi_wire::auth::JobKey,
        job: &str,
        local_procs: usize,
        split: Option<(String, String)>,
    ) -> Result<Child> {
        let me = self.grid.state.ip;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.opts.command[1..])
            .env(env::RANK, "0")
            .env(env::SIZE, self.layout.n.to_string())
            .env(env::CONTROL, root.to_string())
            .env(env::JOB_KEY, key.to_hex())
            .env(env::BIND, me.to_string())
            // In this host's MIN_PORT..MAX_PORT, like the other ranks: confined ranks elsewhere
            // may connect to the grid's range only (docs/security.md).
            .env(env::PORTS, self.grid.cfg.job_ports())
            .env(env::LOCAL_PROCS, local_procs.to_string())
            .env("P2PMPI_JOB", job)
            .envs(split)
            .stdin(Stdio::inherit())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.envs(self.job_env());
        if let Some(a) = self.abi.as_ref().filter(|a| a.prepend) {
            cmd.env("LD_LIBRARY_PATH", crate::abi::library_path(&a.dir, &self.extra));
        }
        supervise::die_with_launcher(&mut cmd);
        let child = cmd.spawn().map_err(|e| anyhow::anyhow!("cannot start '{}': {e}", self.program.display()))?;
        let announce = AppProcess {
            app: self.app.clone(),
            job: job.to_string(),
            rank: 0,
            replicas: self.layout.r as u32,
            pid: child.id(),
            root: root.to_string(),
        };
        let _ = mpd::call(Some(me), self.grid.state.mpd_addr(), &self.grid.secret, &MpdRequest::Announce(announce));
        if self.opts.verbose {
            let who = p2pmpi_core::supervisor::who(self.layout, 0);
            eprintln!("{}: {who} started here, on host {me} (pid {})", self.name, child.id());
        }
        Ok(child)
    }

    /// The job's events, to this host's MPD (`p2pmpi grid status`, `p2pmpi monitor`).
    fn notifier(&self, job: &str, placements: &[Placement], assigned: &[Vec<u32>]) -> crate::notices::Notifier {
        let mut slot_hosts = vec![String::new(); self.layout.slots()];
        for (p, s) in placements.iter().zip(assigned) {
            for &slot in s {
                if let Some(h) = slot_hosts.get_mut(slot as usize) {
                    h.clone_from(&p.info.id.ip);
                }
            }
        }
        let notifier = crate::notices::Notifier::start(
            job.to_string(),
            self.app.clone(),
            self.layout,
            slot_hosts,
            self.grid.state.ip,
            self.grid.state.mpd_addr(),
            self.grid.secret.clone(),
        );
        notifier.placed();
        notifier
    }

    /// Follows the running job to its end ([`supervise::event_loop`]); returns its exit status
    /// and the jobs it spawned (to wait for).
    fn supervise(
        &self,
        running: Running,
        key: &p2pmpi_wire::auth::JobKey,
        tx: Sender<Event>,
        rx: &std::sync::mpsc::Receiver<Event>,
        sup: supervise::SharedSupervisor,
        notifier: &crate::notices::Notifier,
    ) -> (supervise::Ended, crate::spawn::Spawns) {
        let (layout, opts, output) = (self.layout, self.opts, &self.output);
        let Running { remotes, readers, root: mut child } = running;
        let pumps = vec![
            supervise::pump(child.stdout.take().expect("piped"), 0, false, output.clone()),
            supervise::pump(child.stderr.take().expect("piped"), 0, true, output.clone()),
        ];
        let mut pids = vec![0; layout.slots()];
        pids[0] = child.id();
        let children = Arc::new(Mutex::new(vec![child]));
        {
            let (children, tx, output) = (children.clone(), tx.clone(), output.clone());
            std::thread::spawn(move || supervise::watch_exits(children, tx, output));
        }
        let place = GridSpawn { grid: self.grid.clone(), opts: opts.clone(), only: self.only.clone() };
        let spawns = crate::spawn::Spawns::new(
            crate::spawn::Settings::of_job(
                self.name,
                key,
                layout,
                opts,
                &self.extra,
                crate::spawn::Place::Grid(Arc::new(place)),
            )
            .with_fd(self.fd),
        );
        if layout.r > 1 {
            // Deaths the spawned jobs declare reach the parents, and the other way round.
            spawns.register_world(0, layout.slots(), tx.clone());
        }
        drop(tx);
        let stop = || {
            supervise::terminate(&children);
            stop_hosts(&remotes);
            spawns.terminate_all();
        };
        let spawn = |apps: &[SpawnApp], parents: &[(u32, String)], ctx: u32| spawns.spawn(apps, parents, ctx);
        // A replica declared dead exits when it hears of it (or is stopped with the stragglers).
        let hooks = Job {
            stop_all: &stop,
            output,
            startup_timeout: opts.startup_timeout,
            timeout: opts.timeout.map(Duration::from_secs),
            fd: self.fd.as_ref(),
            sup,
            notices: Some(notifier),
            spawner: Some(&spawn),
            slot_base: 0,
            relay: (layout.r > 1).then_some(&spawns as &dyn supervise::Relay),
            join_notice: self.abi.as_ref().and_then(|_| crate::abi::join_notice(&self.program)),
        };
        let ended = supervise::event_loop_ended(self.name, &hooks, rx, pids);
        let code = ended.code;
        spawns.unregister_world(0);
        notifier.finish(
            if code == 0 { "ended".to_string() } else { format!("ended with exit status {code}") },
            Duration::from_secs(1),
        );
        for p in pumps {
            let _ = p.join();
        }
        let unconfirmed = hooks.sup.unconfirmed();
        for (slots, r) in readers {
            // A host that never confirmed the end of its processes (cut off by the network): its
            // connection carries nothing, its reader is left to end with this process.
            if slots.iter().any(|&s| unconfirmed.contains(&(s as usize))) {
                continue;
            }
            let _ = r.join();
        }
        (ended, spawns)
    }
}

/// Stops the processes of launched hosts: SIGTERM, then SIGKILL a second later.
fn stop_hosts(remotes: &[Arc<Mutex<SecureWriter>>]) {
    stop_remotes(remotes, libc::SIGTERM);
    let remotes = remotes.to_vec();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        stop_remotes(&remotes, libc::SIGKILL);
    });
}

/// p2pmpi's library, to stage with a spawned `program` that needs MPICH's ABI (none for a
/// program that does not, such as p2pmpi's Rust programs); an error if it needs it and the
/// library is not found, or the program would load another MPI library first (an RPATH).
fn spawned_abi(program: &std::path::Path) -> Result<Option<PathBuf>> {
    if crate::abi::needs(program).is_none() {
        return Ok(None);
    }
    Ok(crate::abi::setup(program, &[])?.map(|a| a.lib))
}

fn stop_remotes(remotes: &[Arc<Mutex<SecureWriter>>], sig: i32) {
    for w in remotes {
        let _ = w.lock().unwrap_or_else(|p| p.into_inner()).send(&JobControl::Signal(sig));
    }
}

/// Spawning from a grid job (`spawn`, `spawn_multiple`). The submitter's launcher does it, on
/// behalf of the spawning root wherever that runs: it holds the grid session (this host's peer
/// daemon, the grid secret), the user's terminal where every process's output goes, and the
/// job's options; the children are reserved, staged and launched through this host's peer
/// daemon exactly as the job was (`-w`, `-a`, `-H`, `-l`, `-x`, `-v` apply), each program of
/// a `spawn_multiple` as a reservation of its own (a host launches one program per
/// reservation). Unlike the job's rank 0, no child runs in the launcher's directory: every
/// child, on this host too, runs in a staged job directory started by its host's daemon.
pub(crate) struct GridSpawn {
    pub(crate) grid: Grid,
    pub(crate) opts: RunArgs,
    /// `-H`/`--hostfile`: the only hosts that may be reserved (empty: any).
    pub(crate) only: Vec<String>,
}

impl crate::spawn::RemoteStart for GridSpawn {
    /// This host's grid address (children reach the spawned job's control port there).
    fn address(&self) -> IpAddr {
        self.grid.state.ip
    }

    /// Reserves, stages and launches the processes of `req`; on failure stops what started,
    /// gives back every reservation, and says why.
    fn start(&self, name: &str, req: &crate::spawn::Request<'_>) -> Result<crate::spawn::Started, String> {
        let strategy: p2pmpi_core::allocation::Strategy = self.opts.strategy.parse()?;
        let layout = Layout::new(req.m, req.r);
        let follow = FollowAll {
            layout,
            // (Its ranks are the spawned job's.)
            verbose: self.opts.verbose.then(|| format!("{name}: spawned job")),
            output: req.output.clone(),
            collector: None,
            tx: req.tx.clone(),
        };
        let mut progress = Progress::new();
        let mut reservations = Vec::new();
        let mut remotes: Vec<Arc<Mutex<SecureWriter>>> = Vec::new();
        let mut threads = Vec::new();
        let mut offset = 0u32;
        for (a, app) in req.apps.iter().enumerate() {
            let program = &req.programs[a];
            let app_name = program.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or("program".into());
            // With `-r R` every child rank is reserved R times on R different hosts, as a
            // replicated job's ranks are.
            let ask = Ask { n: app.procs as usize, r: req.r, strategy, app: &app_name, exclude: &[], only: &self.only };
            // A child built against MPICH's ABI (a C or Python program) gets p2pmpi's library
            // staged with it and first on its library path, as the job's own processes do.
            let abi = match spawned_abi(program) {
                Ok(a) => a,
                Err(e) => {
                    progress.done();
                    stop_remotes(&remotes, libc::SIGKILL);
                    return Err(format!("cannot spawn {app_name}: {e:#}"));
                }
            };
            let staged = input_files(&self.opts, program, &app_name).and_then(|mut files| {
                if let Some(lib) = &abi {
                    let name = format!("{}/{}", crate::abi::STAGED, crate::abi::NAMES[0]);
                    files.push(LocalFile::Path { name, path: lib.clone(), executable: false });
                }
                reserve_and_stage(name, &self.grid, &self.opts, ask, &files, true, &mut progress)?
                    .ok_or_else(|| anyhow::anyhow!("a dry run reserves only"))
            });
            let staged = match staged {
                Ok(s) => s,
                Err(e) => {
                    progress.done();
                    // The programs already launched stop; every reservation is given back.
                    stop_remotes(&remotes, libc::SIGKILL);
                    let what = if req.r > 1 {
                        format!(
                            "{}×{} process(es) (-r {}: the replicas of a rank on different hosts)",
                            app.procs, req.r, req.r
                        )
                    } else {
                        format!("{} process(es)", app.procs)
                    };
                    return Err(format!("cannot reserve {what} for {app_name} on the grid: {e:#}"));
                }
            };
            let all_loopback = all_loopback(&staged.placements, &staged.assigned);
            let remote: Vec<(&Placement, Vec<u32>, usize)> = staged
                .placements
                .iter()
                .zip(&staged.assigned)
                .filter(|(_, s)| !s.is_empty())
                .map(|(p, s)| (p, spawned_slots(s, offset, req.r), s.len()))
                .collect();
            let spec_for = |ranks: &[u32], procs: usize| {
                // The spawning program's `Command` variables first; the launcher's own after
                // (the daemon applies them in order), which they cannot override.
                let mut env: Vec<(String, String)> = app
                    .env
                    .iter()
                    .filter(|(k, _)| !crate::spawn::own_variable(k))
                    .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
                    .collect();
                let local_procs = if all_loopback { req.universe } else { procs };
                env.push((env::LOCAL_PROCS.to_string(), local_procs.to_string()));
                env.push((env::APPNUM.to_string(), a.to_string()));
                if req.r > 1 {
                    env.push((env::REPLICAS.to_string(), req.r.to_string()));
                }
                env.extend(req.vars.iter().cloned());
                if abi.is_some() {
                    env.push((p2pmpi_peer::mpd::ABI_DIR_ENV.to_string(), crate::abi::STAGED.to_string()));
                }
                LaunchSpec {
                    ticket: staged.reservation.ticket,
                    job: staged.job.clone(),
                    app: app_name.clone(),
                    program: app_name.clone(),
                    args: app.args.clone(),
                    ranks: ranks.to_vec(),
                    size: req.m as u32,
                    root: req.root.to_string(),
                    job_key: req.key.clone(),
                    env,
                    collect: Vec::new(),
                }
            };
            let launched =
                launch_hosts(name, &self.grid, self.opts.verbose, &remote, &spec_for, &follow, &mut progress);
            remotes.extend(launched.remotes);
            threads.extend(launched.readers.into_iter().map(|(s, t)| (s.iter().map(|&x| x as usize).collect(), t)));
            reservations.push(staged.reservation);
            if !launched.failed.is_empty() {
                stop_remotes(&remotes, libc::SIGKILL);
                let why: Vec<String> = launched.failed.into_iter().map(|(_, why)| why).collect();
                return Err(why.join("; "));
            }
            offset += app.procs;
        }
        let stop = Arc::new(move || stop_hosts(&remotes));
        Ok(crate::spawn::Started { stop, pids: vec![0; req.m * req.r], threads, keep: Box::new(reservations) })
    }
}

/// The slots of a spawned job that a host launches: `app_slots` (of one program's own
/// reservation, as [`assign_slots`] numbers them: replica j of its rank k is slot `k·r + j`)
/// once that program's ranks follow the `first_rank` ranks of the programs before it.
fn spawned_slots(app_slots: &[u32], first_rank: u32, r: usize) -> Vec<u32> {
    app_slots.iter().map(|&x| x + first_rank * r as u32).collect()
}

/// One host's launch, as [`follow_remote`] follows it: the processes it runs (`slots`; the
/// MPD's events name them in their `rank` field).
struct Follow {
    peer: PeerId,
    slots: Vec<u32>,
    layout: Layout,
    /// `-v`: the command's name, to report every process started with its pid.
    verbose: Option<String>,
    output: Arc<Output>,
    /// `--collect`: where the files the host sends back go.
    collector: Option<Arc<Collector>>,
    /// Held while the host is followed (the watch on revoked hosts ends with the last one).
    alive: Arc<()>,
}

/// `--collect`: writes the files remote ranks wrote into the submitter's current directory,
/// under their path in the job directory. A file changed there since the job started (rank 0
/// wrote it, or another host sent the same name) is kept, unless the new one is identical:
/// the other is then left out, with a warning.
struct Collector {
    name: String,
    base: PathBuf,
    since: std::time::SystemTime,
    /// Files being received, by (host, name): where they are written meanwhile.
    written: Mutex<std::collections::HashMap<(String, String), PathBuf>>,
    /// Held while a received file takes its place (hosts sending the same name at once).
    placing: Mutex<()>,
}

impl Collector {
    /// A chunk of `name` from `host`.
    fn chunk(&self, host: &PeerId, name: &str, data: &[u8], last: bool) {
        use std::io::Write;
        let dest = match ft::safe_join(&self.base, name) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{}: --collect: host {host} sent a file that cannot be written here: {e:#}", self.name);
                return;
            }
        };
        let key = (host.to_string(), name.to_string());
        let part = {
            let mut w = self.written.lock().unwrap_or_else(|p| p.into_inner());
            let part = w.entry(key.clone()).or_insert_with(|| {
                let file = dest.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
                dest.with_file_name(format!(".{file}.p2pmpi-{:x}", home::random_u128() as u64))
            });
            part.clone()
        };
        let write = || -> std::io::Result<()> {
            if let Some(d) = part.parent() {
                std::fs::create_dir_all(d)?;
            }
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&part)?;
            f.write_all(data)
        };
        if let Err(e) = write() {
            eprintln!("{}: --collect: cannot write {}: {e}", self.name, dest.display());
        }
        if !last {
            return;
        }
        self.written.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
        let _placing = self.placing.lock().unwrap_or_else(|p| p.into_inner());
        let changed = std::fs::metadata(&dest).and_then(|m| m.modified()).is_ok_and(|t| t >= self.since);
        if changed {
            let same = std::fs::read(&dest).ok() == std::fs::read(&part).ok();
            let _ = std::fs::remove_file(&part);
            if !same {
                eprintln!(
                    "{}: --collect: {name} from host {host} left out: {} was already written during this job (by \
                     rank 0, or another host)",
                    self.name,
                    dest.display()
                );
            }
            return;
        }
        if let Err(e) = std::fs::rename(&part, &dest) {
            eprintln!("{}: --collect: cannot write {}: {e}", self.name, dest.display());
            let _ = std::fs::remove_file(&part);
        }
    }
}

/// Follows one host's launch from its event `first` on: prints its processes' output,
/// reports their exits, and reports the host lost if its connection ends before they all
/// exited.
fn follow_remote(
    mut reader: p2pmpi_wire::secure::SecureReader,
    first: JobEvent,
    f: Follow,
    tx: Sender<Event>,
) -> std::thread::JoinHandle<()> {
    reader.set_max_record(1 << 20);
    std::thread::spawn(move || {
        let Follow { peer, slots, layout, verbose, output, collector, alive } = f;
        let _alive = alive;
        let mut left: Vec<u32> = slots;
        let mut first = Some(first);
        loop {
            let event = match first.take() {
                Some(ev) => Ok(Some(ev)),
                None => reader.recv::<JobEvent>(),
            };
            match event {
                Ok(Some(JobEvent::Output { rank: slot, stderr, data })) => output.write(slot as usize, stderr, &data),
                Ok(Some(JobEvent::Started { rank: slot, pid })) => {
                    if let Some(name) = &verbose {
                        let who = p2pmpi_core::supervisor::who(layout, slot as usize);
                        eprintln!("{name}: {who} started on host {} (pid {pid})", peer.ip);
                    }
                }
                Ok(Some(JobEvent::Collected { name, data, last })) => {
                    if let Some(c) = &collector {
                        c.chunk(&peer, &name, &data, last);
                    }
                }
                Ok(Some(JobEvent::NotCollected { name, why })) => {
                    if let Some(c) = &collector {
                        eprintln!("{}: --collect: host {peer} could not send {name}: {why}", c.name);
                    }
                }
                Ok(Some(JobEvent::Exited { rank: slot, code, signal })) => {
                    let raw = match (code, signal) {
                        (_, Some(sig)) => sig & 0x7f,
                        (Some(c), None) => (c & 0xff) << 8,
                        (None, None) => libc::SIGKILL,
                    };
                    left.retain(|&s| s != slot);
                    if tx.send(Event::Exited { rank: slot as usize, status: ExitStatus::from_raw(raw) }).is_err() {
                        return;
                    }
                    // Its control connection to the root is closed once it exited.
                }
                Ok(Some(JobEvent::Refused(why))) => {
                    let _ = tx.send(Event::Lost {
                        ranks: left.iter().map(|&x| x as usize).collect(),
                        why: format!("host {peer} refused the launch: {why}"),
                    });
                    return;
                }
                Ok(None) | Err(_) => {
                    if !left.is_empty() {
                        let _ = tx.send(Event::Lost {
                            ranks: left.iter().map(|&x| x as usize).collect(),
                            why: format!(
                                "lost contact with host {peer} (its peer daemon), which ran {}",
                                ran(layout, &left)
                            ),
                        });
                    }
                    return;
                }
            }
        }
    })
}

/// `rank(s) 1, 3`, or with replicas `rank 1 replica 0, rank 3 replica 1`.
fn ran(layout: Layout, slots: &[u32]) -> String {
    if layout.slots() == layout.n {
        let list: Vec<String> = slots.iter().map(|r| r.to_string()).collect();
        format!("rank(s) {}", list.join(", "))
    } else {
        slots.iter().map(|&s| p2pmpi_core::supervisor::who(layout, s as usize)).collect::<Vec<_>>().join(", ")
    }
}

/// Where each replica runs, for `--dry-run -r R`: one line per rank, replica 0 first.
fn describe_replicas(layout: Layout, placements: &[Placement], assigned: &[Vec<u32>]) -> String {
    let mut host_of = vec![String::new(); layout.slots()];
    for (p, slots) in placements.iter().zip(assigned) {
        for &s in slots {
            host_of[s as usize] = p.info.id.to_string();
        }
    }
    let mut out = format!("replicas (-r {}): replica 0 of a rank is its master while it runs\n", layout.r);
    for k in 0..layout.n {
        let hosts: Vec<String> =
            layout.slots_of(k).enumerate().map(|(j, s)| format!("{}: {}", j, host_of[s])).collect();
        out += &format!("  rank {k}: replica {}\n", hosts.join(", replica "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job on a local grid (several MPDs, so several sessions, on one machine) sleeps
    /// instead of yielding between polls; one spread over real hosts keeps the library's
    /// choice.
    #[test]
    fn a_job_on_a_local_grid_does_not_yield_across_sessions() {
        assert_eq!(split_sessions_env(false), None);
        if std::env::var_os("P2PMPI_YIELD_US").is_none() {
            assert_eq!(split_sessions_env(true), Some(("P2PMPI_YIELD_US".to_string(), "0".to_string())));
        }
    }

    #[test]
    fn a_spawned_program_s_slots_follow_the_ranks_of_the_programs_before_it() {
        // spawn_multiple of 2 + 1 ranks with r = 2: the second program's rank 0 is rank 2 of
        // the spawned job, its replicas slots 4 and 5, wherever its reservation placed them.
        let second = assign_slots(Layout::new(1, 2), &[vec![0], vec![0]]).unwrap();
        assert_eq!(second, vec![vec![0], vec![1]]);
        assert_eq!(spawned_slots(&second[0], 2, 2), vec![4]);
        assert_eq!(spawned_slots(&second[1], 2, 2), vec![5]);
        // The first program's slots stay as they are; without replicas slots are ranks.
        let first = assign_slots(Layout::new(2, 2), &[vec![0, 1], vec![1, 0]]).unwrap();
        assert_eq!(spawned_slots(&first[0], 0, 2), vec![0, 2]);
        assert_eq!(spawned_slots(&first[1], 0, 2), vec![3, 1]);
        assert_eq!(spawned_slots(&[0, 1], 2, 1), vec![2, 3]);
    }

    #[test]
    fn without_replicas_slots_are_the_ranks() {
        let l = Layout::new(4, 1);
        let a = assign_slots(l, &[vec![0, 2], vec![1], vec![3]]).unwrap();
        assert_eq!(a, vec![vec![0, 2], vec![1], vec![3]]);
    }

    #[test]
    fn replicas_become_slots_in_placement_order_rank_zero_included() {
        // n = 3, r = 2, spread over 3 hosts: 0 1 | 2 0 | 1 2. Rank k's replica j is slot 2k + j.
        let l = Layout::new(3, 2);
        let a = assign_slots(l, &[vec![0, 1], vec![2, 0], vec![1, 2]]).unwrap();
        assert_eq!(a, vec![vec![0, 2], vec![4, 1], vec![3, 5]]);
        let mut all: Vec<u32> = a.concat();
        all.sort_unstable();
        assert_eq!(all, (0..l.slots() as u32).collect::<Vec<_>>());
    }

    #[test]
    fn a_reservation_with_missing_or_extra_copies_is_refused() {
        let l = Layout::new(3, 2);
        assert!(assign_slots(l, &[vec![0, 1], vec![2, 1], vec![0]]).is_err(), "rank 2 once");
        assert!(assign_slots(l, &[vec![0, 1, 2], vec![0, 1, 2], vec![1, 2]]).is_err(), "three copies");
        assert!(assign_slots(l, &[vec![0, 1, 2], vec![0, 1, 5]]).is_err(), "no rank 5");
        assert!(assign_slots(l, &[vec![1, 2], vec![0, 1, 2], vec![0]]).is_err(), "rank 0 elsewhere");
    }

    #[test]
    fn lost_hosts_name_their_processes() {
        assert_eq!(ran(Layout::new(4, 1), &[1, 3]), "rank(s) 1, 3");
        assert_eq!(ran(Layout::new(4, 2), &[2, 5]), "rank 1 replica 0, rank 2 replica 1");
    }
}
