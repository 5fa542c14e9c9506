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

use crate::launcher::{self, Event, RankState, RunArgs};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use p2pmpi::bootstrap::env;
use p2pmpi_peer::config::Config;
use p2pmpi_peer::ft::{self, LocalFile};
use p2pmpi_peer::home::{self, Home, MpdState};
use p2pmpi_peer::mpd;
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

/// The grid secret of a configuration, or an error saying where to set it.
pub fn secret_of(cfg: &Config) -> Result<GridSecret> {
    match &cfg.grid_secret {
        Some(s) if !s.is_empty() => Ok(GridSecret::from_phrase(s)),
        _ => bail!(
            "GRID_SECRET is not set in {}: every daemon and command of a grid must share one secret",
            cfg.source.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "the configuration".into())
        ),
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

/// A spinner on the terminal, shown only once a step has lasted more than a second.
struct Progress {
    start: Instant,
    bar: Option<ProgressBar>,
    msg: String,
}

impl Progress {
    fn new() -> Self {
        Progress { start: Instant::now(), bar: None, msg: String::new() }
    }
    fn set(&mut self, msg: impl Into<String>) {
        self.msg = msg.into();
        if self.bar.is_none() && self.start.elapsed() > Duration::from_secs(1) {
            let bar = ProgressBar::new_spinner();
            bar.set_style(ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").unwrap());
            bar.enable_steady_tick(Duration::from_millis(120));
            self.bar = Some(bar);
        }
        if let Some(b) = &self.bar {
            b.set_message(self.msg.clone());
        }
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
struct Reservation<'a> {
    grid: &'a Grid,
    ticket: Ticket,
    peers: Vec<PeerInfo>,
}

impl Drop for Reservation<'_> {
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

fn addr_of(info: &PeerInfo, port: u16) -> SocketAddr {
    SocketAddr::new(info.id.ip.parse().unwrap_or(IpAddr::from([127, 0, 0, 1])), port)
}

/// Runs a job on the grid. Returns its exit status.
pub fn run(name: &str, opts: &RunArgs, n: usize, grid: Grid) -> Result<i32> {
    let program = launcher::resolve_program(&opts.command[0])?;
    let app = program.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "program".into());
    let files = input_files(opts, &program, &app)?;
    let strategy: p2pmpi_core::allocation::Strategy = opts.strategy.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let r = opts.replicas as usize;
    let me = grid.state.ip;
    let fd = launcher::FdPlan::from_options(opts, &grid.cfg)?;
    let mut progress = Progress::new();

    // 1. Discovery and reservation, by the local MPD.
    let mut c = SecureConn::connect_from(Some(me), grid.state.mpd_addr(), &grid.secret, Duration::from_secs(5))
        .with_context(|| format!("cannot reach this host's peer daemon at {}", grid.state.mpd_addr()))?;
    c.set_max_record(64 << 20);
    c.send(&MpdRequest::Reserve {
        n: n as u32,
        r: r as u32,
        strategy: strategy.to_string(),
        wait_ms: opts.wait.saturating_mul(1000),
        app: app.clone(),
    })?;
    c.set_read_timeout(Some(Duration::from_millis(200)))?;
    progress.set(format!("reserving hosts for {n}×{r} process(es)"));
    let (ticket, placements) = loop {
        match c.recv::<MpdResponse>() {
            Ok(Some(MpdResponse::Progress { accepted, needed, .. })) => {
                progress.set(format!("reserving hosts: {accepted} accepted, {needed} process(es) to place"))
            }
            Ok(Some(MpdResponse::Reserved { ticket, placements })) => break (ticket, placements),
            Ok(Some(MpdResponse::Failed(msg))) => {
                progress.done();
                bail!("{msg}");
            }
            Ok(Some(other)) => bail!("unexpected answer from the peer daemon: {other:?}"),
            Ok(None) => bail!("the peer daemon closed the connection during reservation"),
            Err(e) if e.is_timeout() => {
                progress.tick();
                // The MPD gives up at -w itself; allow it a margin before we do.
                if progress.start.elapsed() > Duration::from_secs(opts.wait + 30) {
                    bail!("the peer daemon did not finish the reservation in time");
                }
            }
            Err(e) => bail!("reservation failed: {e}"),
        }
    };
    drop(c);
    if opts.verbose {
        let hosts: Vec<String> = placements.iter().map(|p| format!("{}×{}", p.info.id, p.ranks.len())).collect();
        eprintln!("{name}: reserved {} in {} ms", hosts.join(", "), progress.start.elapsed().as_millis());
    }
    let reservation = Reservation { grid: &grid, ticket, peers: placements.iter().map(|p| p.info.clone()).collect() };

    if opts.dry_run || r > 1 {
        progress.done();
        println!("{:<22} {:>5}  ranks", "host", "procs");
        for p in &placements {
            let ranks: Vec<String> = p.ranks.iter().map(|r| r.to_string()).collect();
            println!("{:<22} {:>5}  {}", p.info.id.to_string(), p.ranks.len(), ranks.join(" "));
        }
        drop(reservation);
        if r > 1 && !opts.dry_run {
            bail!("the hosts above were reserved for -r {r}, but running replicas is not available yet; reservations released");
        }
        return Ok(0);
    }

    // 2. Staging to every host that runs a process besides rank 0.
    let job = format!("{:032x}", home::random_u128());
    let remote: Vec<&Placement> = placements.iter().filter(|p| p.ranks.iter().any(|&x| x != 0)).collect();
    if !remote.is_empty() {
        progress.set(format!("staging {} file(s) to {} host(s)", files.len(), remote.len()));
        let metas = ft::describe(&files)?;
        let targets: Vec<SocketAddr> = remote.iter().map(|p| addr_of(&p.info, p.info.ft_port)).collect();
        let results = ft::stage_many(
            &targets,
            grid.cfg.staging_fanout.max(1) as usize,
            &grid.secret,
            ticket,
            &job,
            &files,
            &metas,
            Duration::from_secs(120),
        );
        for (p, res) in remote.iter().zip(results) {
            match res {
                Err(e) => {
                    progress.done();
                    bail!("staging to host {} failed: {e:#}", p.info.id);
                }
                Ok(rep) if opts.verbose => eprintln!(
                    "{name}: staged to {}: {} cached, {} sent, {} fetched by the peer",
                    p.info.id, rep.cached, rep.received, rep.fetched
                ),
                Ok(_) => {}
            }
        }
    }

    // 3. The root's control port, then the launches.
    progress.set(format!("launching {n} process(es)"));
    let listener = TcpListener::bind((me, 0)).context("cannot open the root's control port")?;
    let root = listener.local_addr()?;
    let token = home::random_u128() as u64;
    let (tx, rx) = channel::<Event>();
    launcher::spawn_control_server(listener, token, n, tx.clone());
    let all_loopback = placements.iter().all(|p| p.info.id.ip.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()));
    let out_lock = Arc::new(Mutex::new(()));
    let mut remotes: Vec<Arc<Mutex<SecureWriter>>> = Vec::new();
    let mut readers = Vec::new();
    for p in &remote {
        let ranks: Vec<u32> = p.ranks.iter().copied().filter(|&x| x != 0).collect();
        let local_procs = if all_loopback { n } else { p.ranks.len() };
        let spec = LaunchSpec {
            ticket,
            job: job.clone(),
            app: app.clone(),
            program: app.clone(),
            args: opts.command[1..].to_vec(),
            ranks: ranks.clone(),
            size: n as u32,
            root: root.to_string(),
            token,
            env: vec![(env::LOCAL_PROCS.to_string(), local_procs.to_string())],
        };
        let conn = SecureConn::connect_from(
            Some(me),
            addr_of(&p.info, p.info.id.mpd_port),
            &grid.secret,
            Duration::from_secs(5),
        )
        .and_then(|mut c| {
            c.send(&MpdRequest::Launch(spec))?;
            Ok(c)
        });
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                progress.done();
                let _ = tx.send(Event::Lost {
                    ranks: ranks.iter().map(|&x| x as usize).collect(),
                    why: format!("cannot launch on host {}: {e}", p.info.id),
                });
                continue;
            }
        };
        let (reader, writer) = conn.split();
        remotes.push(Arc::new(Mutex::new(writer)));
        readers.push(follow_remote(reader, p.info.id.clone(), ranks, tx.clone(), opts.tag_output, out_lock.clone()));
    }

    // 4. Rank 0, here.
    let mut cmd = Command::new(&program);
    cmd.args(&opts.command[1..])
        .env(env::RANK, "0")
        .env(env::SIZE, n.to_string())
        .env(env::CONTROL, root.to_string())
        .env(env::TOKEN, format!("{token:016x}"))
        .env(env::BIND, me.to_string())
        .env(env::LOCAL_PROCS, if all_loopback { n } else { placements[0].ranks.len() }.to_string())
        .env("P2PMPI_JOB", &job)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    launcher::die_with_launcher(&mut cmd);
    let mut child: Child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            stop_remotes(&remotes, libc::SIGKILL);
            bail!("cannot start '{}': {e}", program.display());
        }
    };
    let mut states: Vec<RankState> = (0..n).map(|_| RankState::default()).collect();
    states[0].pid = child.id();
    let prefix = opts.tag_output.then(|| "[0] ".to_string());
    let pumps = vec![
        launcher::pump(child.stdout.take().expect("piped"), false, prefix.clone(), out_lock.clone()),
        launcher::pump(child.stderr.take().expect("piped"), true, prefix, out_lock.clone()),
    ];
    let announce = AppProcess { app: app.clone(), job: job.clone(), rank: 0, pid: child.id(), root: root.to_string() };
    let _ = mpd::call(Some(me), grid.state.mpd_addr(), &grid.secret, &MpdRequest::Announce(announce));
    progress.done();
    let children = Arc::new(Mutex::new(vec![child]));
    {
        let children = children.clone();
        let tx = tx.clone();
        std::thread::spawn(move || launcher::watch_exits(children, tx));
    }
    drop(tx);

    let stop = || {
        launcher::terminate(&children);
        stop_remotes(&remotes, libc::SIGTERM);
        let remotes = remotes.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(1));
            stop_remotes(&remotes, libc::SIGKILL);
        });
    };
    let code = launcher::event_loop(name, n, &rx, &mut states, &stop, opts.startup_timeout, fd.as_ref());
    for p in pumps {
        let _ = p.join();
    }
    for r in readers {
        let _ = r.join();
    }
    let _ = mpd::call(Some(me), grid.state.mpd_addr(), &grid.secret, &MpdRequest::Retire { job, rank: 0 });
    drop(reservation);
    Ok(code)
}

fn stop_remotes(remotes: &[Arc<Mutex<SecureWriter>>], sig: i32) {
    for w in remotes {
        let _ = w.lock().unwrap_or_else(|p| p.into_inner()).send(&JobControl::Signal(sig));
    }
}

/// Follows one host's launch: prints its processes' output, reports their exits, and
/// reports the host lost if its connection ends before they all exited.
fn follow_remote(
    mut reader: p2pmpi_wire::secure::SecureReader,
    peer: PeerId,
    ranks: Vec<u32>,
    tx: Sender<Event>,
    tag: bool,
    lock: Arc<Mutex<()>>,
) -> std::thread::JoinHandle<()> {
    reader.set_max_record(1 << 20);
    std::thread::spawn(move || {
        let mut left: Vec<u32> = ranks;
        loop {
            match reader.recv::<JobEvent>() {
                Ok(Some(JobEvent::Output { rank, stderr, data })) => {
                    let _g = lock.lock().unwrap_or_else(|p| p.into_inner());
                    let prefix = tag.then(|| format!("[{rank}] "));
                    for line in data.split_inclusive(|&c| c == b'\n') {
                        let _ = if stderr {
                            launcher::write_line(&mut std::io::stderr().lock(), prefix.as_deref(), line)
                        } else {
                            launcher::write_line(&mut std::io::stdout().lock(), prefix.as_deref(), line)
                        };
                    }
                }
                Ok(Some(JobEvent::Started { .. })) => {}
                Ok(Some(JobEvent::Exited { rank, code, signal })) => {
                    let raw = match (code, signal) {
                        (_, Some(sig)) => sig & 0x7f,
                        (Some(c), None) => (c & 0xff) << 8,
                        (None, None) => libc::SIGKILL,
                    };
                    left.retain(|&r| r != rank);
                    if tx.send(Event::Exited { rank: rank as usize, status: ExitStatus::from_raw(raw) }).is_err() {
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
                        let list: Vec<String> = left.iter().map(|r| r.to_string()).collect();
                        let _ = tx.send(Event::Lost {
                            ranks: left.iter().map(|&x| x as usize).collect(),
                            why: format!(
                                "lost contact with host {peer} (its peer daemon), which ran rank(s) {}",
                                list.join(", ")
                            ),
                        });
                    }
                    return;
                }
            }
        }
    })
}
