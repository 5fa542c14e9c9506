//! The classic commands (thesis appendix C.2) and their `p2pmpi` subcommands:
//!
//! | classic | p2pmpi | what |
//! |---|---|---|
//! | `runSupernode` | `p2pmpi supernode start` | start a supernode in the background |
//! | `stopSupernode` | `p2pmpi supernode stop` | stop it |
//! | `supernode_stat` | `p2pmpi supernode stat` | peers known to the supernode, last update |
//! | `mpiboot` | `p2pmpi boot` | start this host's peer daemon (MPD, RS, FT) |
//! | `mpihalt` | `p2pmpi halt` | stop it |
//! | `mpihost` | `p2pmpi host` | the cached host list: RTT, alive, last update |
//! | `mpistat` | `p2pmpi stat` | MPI applications running here |
//! | `p2pmpirun` | `p2pmpi run` | run a program |
//!
//! Daemons run in the background with no administrator rights; their state and logs live in
//! the user's p2pmpi directory (`P2PMPI_HOME`, else `~/.p2pmpi`).

use crate::grid_run::{load_config, secret_of};
use anyhow::{bail, Context, Result};
use p2pmpi_peer::config::Config;
use p2pmpi_peer::home::{self, format_age, Home, SupernodeState};
use p2pmpi_peer::{mpd, os, supernode};
use p2pmpi_wire::grid::*;
use std::io::{BufRead, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The daemons a command can start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Daemon {
    Mpd,
    Supernode,
}

impl Daemon {
    fn arg(self) -> &'static str {
        match self {
            Daemon::Mpd => "mpd",
            Daemon::Supernode => "supernode",
        }
    }
}

/// Entry point of a daemon process (`<any command> __daemon mpd|supernode`): logs go to
/// standard error, which the starter pointed at the log file.
pub fn daemon_main(kind: &str) -> i32 {
    let loaded = Config::load();
    init_logging(loaded.as_ref().ok().and_then(|(c, _)| c.log_level.as_deref()));
    let r = (|| -> Result<()> {
        let (cfg, warnings) = loaded?;
        for w in warnings {
            tracing::warn!("{w}");
        }
        let secret = secret_of(&cfg)?;
        let home = Home::user();
        home.create()?;
        match kind {
            "mpd" => mpd::run(mpd::MpdOpts { config: cfg, home, secret }),
            "supernode" => {
                let ip = cfg.external_ip.unwrap_or(IpAddr::from([0, 0, 0, 0]));
                let supernodes = cfg
                    .supernodes
                    .iter()
                    .filter_map(|s| {
                        use std::net::ToSocketAddrs;
                        s.to_socket_addrs().ok().and_then(|mut a| a.next())
                    })
                    .collect();
                supernode::run(supernode::SupernodeOpts {
                    bind: SocketAddr::new(ip, cfg.supernode_port),
                    secret,
                    peer_ttl_ms: cfg.peer_ttl_ms,
                    home,
                    supernodes,
                })
            }
            other => bail!("unknown daemon {other}"),
        }
    })();
    match r {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("p2pmpi: error: {e:#}");
            1
        }
    }
}

/// The daemons' logging, through `tracing`: the filter of `RUST_LOG` when it is set, else
/// the configuration's `LOG_LEVEL`, else `info`.
fn init_logging(log_level: Option<&str>) {
    use tracing_subscriber::EnvFilter;
    let from_env = std::env::var("RUST_LOG").ok().filter(|v| !v.trim().is_empty());
    let (filter, bad) = match from_env {
        Some(v) => match EnvFilter::try_new(&v) {
            Ok(f) => (f, None),
            Err(e) => (EnvFilter::new("info"), Some(format!("RUST_LOG={v} ignored: {e}"))),
        },
        None => (EnvFilter::try_new(log_level.unwrap_or("info")).unwrap_or_else(|_| EnvFilter::new("info")), None),
    };
    let _ = tracing_subscriber::fmt().with_ansi(false).with_writer(std::io::stderr).with_env_filter(filter).try_init();
    if let Some(bad) = bad {
        tracing::warn!("{bad}");
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let Ok(f) = std::fs::File::open(path) else { return String::new() };
    let all: Vec<String> = std::io::BufReader::new(f).lines().map_while(Result::ok).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Starts a daemon in the background and waits until it publishes its state file.
/// The daemon gets `P2PMPI_HOME` = `home`, and `P2PMPI_CONF_FILE` = `conf` when given.
pub fn spawn_daemon(kind: Daemon, home: &Home, log: &Path, conf: Option<&Path>) -> Result<u32> {
    home.create()?;
    let state = match kind {
        Daemon::Mpd => home.mpd_state(),
        Daemon::Supernode => home.supernode_state(),
    };
    let _ = std::fs::remove_file(&state);
    let logf = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open the log {}", log.display()))?;
    let exe = std::env::current_exe().context("cannot find this program's path")?;
    let mut cmd = Command::new(exe);
    cmd.arg("__daemon").arg(kind.arg()).stdin(Stdio::null()).stdout(logf.try_clone()?).stderr(logf);
    cmd.env("P2PMPI_HOME", &home.dir);
    match conf {
        Some(c) => cmd.env("P2PMPI_CONF_FILE", c),
        None => cmd.env_remove("P2PMPI_CONF_FILE"),
    };
    os::new_session(&mut cmd);
    let mut child = cmd.spawn().context("cannot start the daemon")?;
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            bail!("the daemon stopped at start-up ({st}); its log {} ends with:\n{}", log.display(), tail(log, 5));
        }
        let up = match kind {
            Daemon::Mpd => home::read_json::<home::MpdState>(&state).is_some_and(|s| s.pid == pid),
            Daemon::Supernode => home::read_json::<SupernodeState>(&state).is_some_and(|s| s.pid == pid),
        };
        if up {
            // Reaped by init once we exit; nobody waits for it here.
            std::mem::forget(child);
            return Ok(pid);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("the daemon did not start within 15 s; see {}", log.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn conf_env() -> Option<std::path::PathBuf> {
    std::env::var_os("P2PMPI_CONF_FILE").filter(|v| !v.is_empty()).map(Into::into)
}

pub fn wait_gone(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if !home::pid_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// `mpiboot`: starts this host's peer daemon.
pub fn boot(foreground: bool) -> Result<()> {
    let cfg = load_config("mpiboot")?;
    secret_of(&cfg)?;
    let home = Home::user();
    if let Some(st) = mpd::running(&home) {
        println!("MPD already running (pid {}) at {}. Log is in {}", st.pid, st.mpd_addr(), home.mpd_log().display());
        return Ok(());
    }
    if foreground {
        std::process::exit(daemon_main("mpd"));
    }
    println!("[Booting mpd {}]", mpd::VERSION);
    let pid = spawn_daemon(Daemon::Mpd, &home, &home.mpd_log(), conf_env().as_deref())?;
    println!(".");
    println!("MPD started (pid {pid}). Log is in {}", home.mpd_log().display());
    if let Some(warning) = no_supernode_answers(&cfg) {
        eprintln!("mpiboot: warning: {warning}");
    }
    Ok(())
}

/// `None` when a configured supernode answers; else what the peer does without one.
fn no_supernode_answers(cfg: &Config) -> Option<String> {
    let secret = secret_of(cfg).ok()?;
    let answered = std::thread::scope(|s| {
        let calls: Vec<_> = cfg
            .supernodes
            .iter()
            .map(|name| {
                let secret = secret.clone();
                s.spawn(move || {
                    use std::net::ToSocketAddrs;
                    let Some(addr) = name.to_socket_addrs().ok().and_then(|mut a| a.next()) else { return false };
                    supernode::call(None, addr, &secret, &SnRequest::List, Duration::from_secs(2)).is_ok()
                })
            })
            .collect();
        calls.into_iter().any(|c| c.join().unwrap_or(false))
    });
    if answered {
        return None;
    }
    let cached = home::read_json::<p2pmpi_core::hosts::PeerCache<PeerId, PeerInfo>>(&cfg.peer_cache_path())
        .map_or(0, |c| c.len());
    let tried = if cfg.supernodes.is_empty() {
        "none is configured (SUPERNODE)".to_string()
    } else {
        cfg.supernodes.join(", ")
    };
    Some(format!(
        "no supernode answered (SUPERNODE: {tried}); the peer works from its cached host list ({cached} host(s)) and \
         keeps trying to register"
    ))
}

fn local_mpd(name: &str) -> Result<(home::MpdState, p2pmpi_wire::secure::GridSecret)> {
    let home = Home::user();
    let Some(st) = mpd::running(&home) else {
        bail!("no peer daemon runs here (p2pmpi directory {}); start it with mpiboot", home.dir.display());
    };
    let cfg = load_config(name)?;
    Ok((st, secret_of(&cfg)?))
}

/// `mpihalt`: stops this host's peer daemon.
pub fn halt() -> Result<()> {
    let home = Home::user();
    let Some(st) = mpd::running(&home) else {
        println!("No MPD is running here (p2pmpi directory {}).", home.dir.display());
        return Ok(());
    };
    let cfg = load_config("mpihalt")?;
    let asked = secret_of(&cfg)
        .and_then(|secret| mpd::call(Some(st.ip), st.mpd_addr(), &secret, &MpdRequest::Halt))
        .map(|a| matches!(a, MpdResponse::Halting));
    if !matches!(asked, Ok(true)) || !wait_gone(st.pid, Duration::from_secs(10)) {
        // The daemon does not answer: stop its process.
        let _ = os::signal(st.pid, libc::SIGTERM);
        if !wait_gone(st.pid, Duration::from_secs(3)) {
            let _ = os::signal(st.pid, libc::SIGKILL);
            wait_gone(st.pid, Duration::from_secs(3));
        }
        let _ = std::fs::remove_file(home.mpd_state());
    }
    println!("FT Shutdown ... Done.");
    println!("RS Shutdown ... Done.");
    println!("MPD Shutdown ... Done.");
    println!("P2P-MPI Shutdown .. Completed");
    Ok(())
}

/// `mpihost`: the cached host list of this host's MPD.
pub fn host() -> Result<()> {
    let (st, secret) = local_mpd("mpihost")?;
    let MpdResponse::Hosts { me, hosts } = mpd::call(Some(st.ip), st.mpd_addr(), &secret, &MpdRequest::Hosts)? else {
        bail!("unexpected answer from the MPD");
    };
    println!("Hostcache entry of MPD : {}\n", me.ip);
    println!("{:<20} {:>8} {:>9} {:>6}  Last update", "Host", "MPD Port", "RTT(ms)", "Alive");
    for h in &hosts {
        let rtt = h.rtt_us.map(|us| format!("{:.3}", us as f64 / 1000.0)).unwrap_or_else(|| "-".into());
        println!(
            "{:<20} {:>8} {:>9} {:>6}  {}",
            h.info.id.ip,
            h.info.id.mpd_port,
            rtt,
            h.alive,
            format_age(h.updated_ms)
        );
    }
    println!("\nTotal : {} MPD known.", hosts.len());
    Ok(())
}

/// `mpistat`: MPI applications running on this host.
pub fn stat() -> Result<()> {
    let (st, secret) = local_mpd("mpistat")?;
    println!("Trying to connect to {}...", st.mpd_addr());
    let MpdResponse::Stat { version, apps, .. } = mpd::call(Some(st.ip), st.mpd_addr(), &secret, &MpdRequest::Stat)?
    else {
        bail!("unexpected answer from the MPD");
    };
    println!("=====");
    println!("Gatekeeper (mpd {version}) up and running.");
    for a in &apps {
        println!();
        println!("Application Name : {}", a.app);
        // The MPD records slots: rank k's replica j is slot k·R + j.
        let r = a.replicas.max(1);
        println!("MPI Rank : {}", a.rank / r);
        if r > 1 {
            println!("Replica : {} of {r}", a.rank % r);
        }
        println!("Process ID : {}", a.pid);
        println!("Rank 0 IP : {}", a.root);
    }
    if apps.is_empty() {
        println!("\nNo application is running.");
    }
    println!("=====");
    Ok(())
}

/// `runSupernode`: starts a supernode on this host.
pub fn supernode_start(foreground: bool) -> Result<()> {
    let cfg = load_config("runSupernode")?;
    secret_of(&cfg)?;
    let home = Home::user();
    if let Some(st) = home::read_json::<SupernodeState>(&home.supernode_state()).filter(|s| home::pid_alive(s.pid)) {
        println!("Supernode already running (pid {}) at {}.", st.pid, st.addr);
        return Ok(());
    }
    if foreground {
        std::process::exit(daemon_main("supernode"));
    }
    let pid = spawn_daemon(Daemon::Supernode, &home, &home.supernode_log(), conf_env().as_deref())?;
    let st: SupernodeState = home::read_json(&home.supernode_state()).context("supernode state")?;
    // The address the peers reach it at (SUPERNODE's entry for this host when it listens on all).
    let all = if cfg.external_ip.is_none() { " (listening on every address of this host)" } else { "" };
    println!("Supernode started (pid {pid}) on {}{all}. Log is in {}", st.addr, home.supernode_log().display());
    Ok(())
}

/// The supernodes a command talks to: the one running here, else the configured ones.
pub fn supernode_addrs(cfg: &Config) -> Vec<(String, Option<SocketAddr>)> {
    let home = Home::user();
    if let Some(st) = home::read_json::<SupernodeState>(&home.supernode_state()).filter(|s| home::pid_alive(s.pid)) {
        return vec![(st.addr.to_string(), Some(st.addr))];
    }
    cfg.supernodes
        .iter()
        .map(|s| {
            use std::net::ToSocketAddrs;
            (s.clone(), s.to_socket_addrs().ok().and_then(|mut a| a.next()))
        })
        .collect()
}

/// `stopSupernode`.
pub fn supernode_stop() -> Result<()> {
    let cfg = load_config("stopSupernode")?;
    let secret = secret_of(&cfg)?;
    let home = Home::user();
    let Some(st) = home::read_json::<SupernodeState>(&home.supernode_state()).filter(|s| home::pid_alive(s.pid)) else {
        println!("No supernode is running here (p2pmpi directory {}).", home.dir.display());
        return Ok(());
    };
    let asked = supernode::call(None, st.addr, &secret, &SnRequest::Stop, Duration::from_secs(3));
    if !matches!(asked, Ok(SnResponse::Ok)) || !wait_gone(st.pid, Duration::from_secs(5)) {
        let _ = os::signal(st.pid, libc::SIGKILL);
        wait_gone(st.pid, Duration::from_secs(3));
        let _ = std::fs::remove_file(home.supernode_state());
    }
    println!("Supernode stopped.");
    Ok(())
}

/// `supernode_stat`: peers a supernode knows.
pub fn supernode_stat() -> Result<()> {
    let cfg = load_config("supernode_stat")?;
    let secret = secret_of(&cfg)?;
    let mut any = false;
    for (name, addr) in supernode_addrs(&cfg) {
        let Some(addr) = addr else {
            eprintln!("supernode {name}: address does not resolve");
            continue;
        };
        match supernode::call(None, addr, &secret, &SnRequest::List, Duration::from_secs(3)) {
            Ok(SnResponse::Hosts(hosts)) => {
                any = true;
                println!("Supernode {addr}");
                println!("{:<20} {:>8}  Last update", "Host", "MPD Port");
                for h in &hosts {
                    println!("{:<20} {:>8}  {}", h.info.id.ip, h.info.id.mpd_port, format_age(h.last_seen_ms));
                }
                println!("\nTotal : {} MPD known.", hosts.len());
            }
            Ok(other) => eprintln!("supernode {name}: unexpected answer {other:?}"),
            Err(e) => eprintln!("supernode {name}: {}", crate::error_text(&e)),
        }
    }
    if !any {
        bail!("no supernode answered");
    }
    Ok(())
}

/// Flushes standard output (commands print progressively).
pub fn flush() {
    let _ = std::io::stdout().flush();
}
