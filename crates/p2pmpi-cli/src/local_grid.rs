//! `p2pmpi local-grid start|stop|status`: a whole grid on this machine, for newcomers and tests.
//!
//! A supernode on 127.0.0.1 and K peer daemons, peer *i* on its own loopback address
//! 127.0.0.(i+1), each with its own p2pmpi directory (`DIR/peer<i>`: configuration, state,
//! log, file cache) and a shared, freshly generated grid secret. Every port is chosen by the
//! system (port 0 in the configuration), so several local grids can run side by side. Peer 1
//! is where jobs are submitted from.
//!
//! With `--keys` the grid runs in member mode instead: peer 1 owns it (`DIR/peer1/keys/owner.key`)
//! and every daemon has its own key and a certificate (the supernode `supernode`, peer *i*
//! `peer<i>` with the roles host and submit); the grid secret is then unused.

use crate::commands::{spawn_daemon, wait_gone, Daemon};
use anyhow::{bail, Context, Result};
use p2pmpi_peer::config::Config;
use p2pmpi_peer::home::{self, Home, MpdState, SupernodeState};
use p2pmpi_peer::{mpd, os};
use p2pmpi_wire::grid::{MpdRequest, MpdResponse, SnRequest};
use p2pmpi_wire::secure::GridSecret;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What `start` records in `DIR/grid.json` for `stop` and `status` (it holds the grid secret:
/// written private, mode 0600).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GridFile {
    pub secret: String,
    /// Member mode: the p2pmpi directory whose member key the local-grid commands use (the
    /// owner's, peer 1's).
    #[serde(default)]
    pub keys: Option<PathBuf>,
    pub supernode: SupernodeState,
    pub peers: Vec<PeerRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerRecord {
    pub home: PathBuf,
    pub state: MpdState,
}

/// Options of `local-grid start`.
#[derive(Debug, Clone)]
pub struct StartOpts {
    pub peers: usize,
    pub dir: PathBuf,
    /// MAX_PROCESSES_PER_JOB of every peer.
    pub procs: u32,
    /// MAX_JOBS of every peer.
    pub max_jobs: u32,
    /// Extra `KEY=VALUE` lines for every peer's configuration.
    pub extra: Vec<String>,
    /// The first three bytes of the peers' loopback addresses (peer i is `A.B.C.(i+1)`;
    /// default 127.0.0): grids started side by side, or a test's firewall rule, stay apart.
    pub net: [u8; 3],
    /// Member keys instead of the grid secret (peer 1 owns the grid).
    pub members: bool,
}

/// Parses `--net A.B.C` (a loopback prefix: A = 127).
pub fn parse_net(s: &str) -> Result<[u8; 3], String> {
    let parts: Vec<&str> = s.split('.').collect();
    let bytes: Option<Vec<u8>> = parts.iter().map(|p| p.parse().ok()).collect();
    match bytes {
        Some(b) if b.len() == 3 && b[0] == 127 => Ok([b[0], b[1], b[2]]),
        _ => Err(format!("{s:?} is not a loopback prefix such as 127.0.0 (three numbers, the first 127)")),
    }
}

/// The default directory: `<p2pmpi dir>/local-grid`.
pub fn default_dir() -> PathBuf {
    p2pmpi_peer::config::p2pmpi_dir().join("local-grid")
}

fn grid_file(dir: &Path) -> PathBuf {
    dir.join("grid.json")
}

/// Writes a peer's or the supernode's configuration, which holds the grid secret: private
/// (0600) and atomic.
fn write_conf(path: &Path, cfg: &Config, extra: &[String]) -> Result<()> {
    let mut text = cfg.to_text();
    for line in extra {
        text.push_str(line);
        text.push('\n');
    }
    home::write_private(path, text.as_bytes())
}

/// Starts the grid and waits until peer 1 has measured every other peer.
pub fn start(opts: &StartOpts) -> Result<GridFile> {
    if opts.peers == 0 || opts.peers > 250 {
        bail!("--peers must be between 1 and 250 (one loopback address each)");
    }
    let dir = &std::path::absolute(&opts.dir).with_context(|| format!("bad directory {}", opts.dir.display()))?;
    if let Some(g) = home::read_json::<GridFile>(&grid_file(dir)) {
        if home::pid_alive(g.supernode.pid) || g.peers.iter().any(|p| home::pid_alive(p.state.pid)) {
            bail!(
                "a local grid already runs in {}; stop it with `p2pmpi local-grid stop --dir {}`",
                dir.display(),
                dir.display()
            );
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let secret = format!("{:032x}", home::random_u128());
    let keys = if opts.members { Some(make_member_keys(dir, opts.peers)?) } else { None };

    // The supernode.
    let sn_home = Home::new(dir.join("supernode"));
    sn_home.create()?;
    let sn_conf = sn_home.dir.join("P2P-MPI.conf");
    let cfg = Config {
        supernode_port: 0,
        external_ip: Some(IpAddr::from([127, 0, 0, 1])),
        grid_secret: Some(secret.clone()),
        peer_ttl_ms: 5000,
        ..Config::default()
    };
    write_conf(&sn_conf, &cfg, &[])?;
    spawn_daemon(Daemon::Supernode, &sn_home, &sn_home.supernode_log(), Some(&sn_conf))?;
    let supernode: SupernodeState = home::read_json(&sn_home.supernode_state()).context("supernode state")?;

    // The peers, booted in parallel.
    let results: Vec<Result<PeerRecord>> = std::thread::scope(|s| {
        let handles: Vec<_> = (1..=opts.peers)
            .map(|i| {
                let secret = secret.clone();
                let sn = supernode.addr;
                s.spawn(move || -> Result<PeerRecord> {
                    let home = Home::new(dir.join(format!("peer{i}")));
                    home.create()?;
                    let conf = home.dir.join("P2P-MPI.conf");
                    let cfg = Config {
                        supernodes: vec![sn.to_string()],
                        mpd_port: 0,
                        ft_port: 0,
                        fd_port: 0,
                        rs_port: 0,
                        external_ip: Some(IpAddr::from([opts.net[0], opts.net[1], opts.net[2], (i + 1) as u8])),
                        max_processes_per_job: opts.procs,
                        max_jobs: opts.max_jobs,
                        grid_secret: Some(secret),
                        alive_period_ms: 1000,
                        refresh_period_ms: 1000,
                        ping_period_ms: 2000,
                        reserve_timeout_ms: 1500,
                        peer_cache: Some(home.dir.join("peer-cache.json")),
                        ..Config::default()
                    };
                    write_conf(&conf, &cfg, &opts.extra)?;
                    let _ = std::fs::remove_file(home.dir.join("peer-cache.json"));
                    spawn_daemon(Daemon::Mpd, &home, &home.mpd_log(), None).with_context(|| {
                        format!("peer {i} ({}.{}.{}.{})", opts.net[0], opts.net[1], opts.net[2], i + 1)
                    })?;
                    let state: MpdState = home::read_json(&home.mpd_state()).context("peer state")?;
                    Ok(PeerRecord { home: home.dir.clone(), state })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("boot thread panicked")))).collect()
    });
    let mut peers = Vec::new();
    let mut first_err = None;
    for r in results {
        match r {
            Ok(p) => peers.push(p),
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    let grid = GridFile { secret, keys, supernode, peers };
    home::write_json(&grid_file(dir), &grid)?;
    if let Some(e) = first_err {
        let _ = stop(dir);
        return Err(e.context("the local grid did not start; stopped what had started"));
    }
    wait_ready(&grid, Duration::from_secs(20))?;
    Ok(grid)
}

/// Member mode: peer 1 creates the grid; the supernode and the other peers get their keys
/// and certificates from it. Returns peer 1's directory.
fn make_member_keys(dir: &Path, peers: usize) -> Result<PathBuf> {
    use p2pmpi_peer::members::{unix_now_s, Keys};
    use p2pmpi_wire::identity::{Role, Roles};
    let now = unix_now_s();
    let owner_home = dir.join("peer1");
    let owner = Keys::of(&Home::new(&owner_home));
    // A grid started again in the same directory keeps its owner.
    let grid = match owner.grid()? {
        Some(g) if owner.owner_key().exists() => g,
        _ => owner.create_grid("peer1", now)?.0,
    };
    let member = |d: PathBuf, name: &str, roles: Roles| -> Result<()> {
        let k = Keys::of(&Home::new(d));
        let (key, _) = k.ensure_member_key()?;
        k.install(&owner.issue(name, key.public(), roles, now)?, grid)
    };
    member(dir.join("supernode"), "supernode", Roles::NONE.with(Role::Supernode))?;
    for i in 2..=peers {
        member(dir.join(format!("peer{i}")), &format!("peer{i}"), Roles::NONE.with(Role::Host).with(Role::Submit))?;
    }
    Ok(owner_home)
}

/// The credential the local-grid commands use: peer 1's member key, or the grid secret.
fn credential(grid: &GridFile) -> Result<GridSecret> {
    match &grid.keys {
        Some(h) => p2pmpi_peer::members::credential(&Home::new(h), p2pmpi_peer::members::unix_now_s())?
            .with_context(|| format!("{} has no member certificate", h.display())),
        None => Ok(GridSecret::from_phrase(&grid.secret)),
    }
}

/// Waits until peer 1 knows every other peer alive, with a measured RTT.
pub fn wait_ready(grid: &GridFile, limit: Duration) -> Result<()> {
    let secret = credential(grid)?;
    let Some(first) = grid.peers.first() else { return Ok(()) };
    let want = grid.peers.len() - 1;
    let deadline = Instant::now() + limit;
    loop {
        let seen = match mpd::call(Some(first.state.ip), first.state.mpd_addr(), &secret, &MpdRequest::Hosts) {
            Ok(MpdResponse::Hosts { hosts, .. }) => hosts.iter().filter(|h| h.alive && h.rtt_us.is_some()).count(),
            _ => 0,
        };
        if seen >= want {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("peer 1 knows {seen} of the {want} other peers after {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The peer daemons running for the grid in `dir`: for each peer, the one its directory's
/// state file names now (a peer restarted with `mpiboot` has a new pid) and the one recorded
/// at start if it still runs; and any other peer daemon whose p2pmpi directory is in `dir`
/// (one added by hand, `P2PMPI_HOME=DIR/peer5 mpiboot`).
fn running_peers(grid: &GridFile, dir: &Path) -> Vec<MpdState> {
    let mut homes: Vec<PathBuf> = grid.peers.iter().map(|p| p.home.clone()).collect();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().is_dir() && !homes.contains(&e.path()) {
            homes.push(e.path());
        }
    }
    let recorded = grid.peers.iter().map(|p| p.state.clone());
    let mut out: Vec<MpdState> = Vec::new();
    let now = homes.iter().filter_map(|h| home::read_json::<MpdState>(&Home::new(h.clone()).mpd_state()));
    for st in now.chain(recorded) {
        if home::pid_alive(st.pid) && !out.iter().any(|o| o.pid == st.pid) {
            out.push(st);
        }
    }
    out
}

/// Stops every daemon of the grid in `dir`, however each was started (by `local-grid
/// start`, or by hand with `mpiboot` in a directory of the grid's).
pub fn stop(dir: &Path) -> Result<usize> {
    let Some(grid) = home::read_json::<GridFile>(&grid_file(dir)) else {
        bail!("no local grid in {} (no grid.json)", dir.display());
    };
    let secret = credential(&grid)?;
    let mut stopped = 0;
    let peers = running_peers(&grid, dir);
    std::thread::scope(|s| {
        let hs: Vec<_> = peers
            .iter()
            .map(|st| {
                let secret = secret.clone();
                s.spawn(move || {
                    let _ = mpd::call(Some(st.ip), st.mpd_addr(), &secret, &MpdRequest::Halt);
                    if !wait_gone(st.pid, Duration::from_secs(5)) {
                        let _ = os::signal(st.pid, libc::SIGKILL);
                        wait_gone(st.pid, Duration::from_secs(2));
                    }
                    true
                })
            })
            .collect();
        for h in hs {
            if h.join().unwrap_or(false) {
                stopped += 1;
            }
        }
    });
    // The supernode, likewise: the one recorded, and one restarted in its directory.
    let sn_now = home::read_json::<SupernodeState>(&Home::new(dir.join("supernode")).supernode_state());
    let mut sns: Vec<SupernodeState> = Vec::new();
    for st in sn_now.into_iter().chain(std::iter::once(grid.supernode.clone())) {
        if home::pid_alive(st.pid) && !sns.iter().any(|o| o.pid == st.pid) {
            sns.push(st);
        }
    }
    for st in sns {
        let _ = p2pmpi_peer::supernode::call(None, st.addr, &secret, &SnRequest::Stop, Duration::from_secs(2));
        if !wait_gone(st.pid, Duration::from_secs(3)) {
            let _ = os::signal(st.pid, libc::SIGKILL);
        }
    }
    let _ = std::fs::remove_file(grid_file(dir));
    Ok(stopped)
}

/// Prints how to submit to a started grid.
pub fn describe(grid: &GridFile, dir: &Path) -> String {
    let first = &grid.peers[0];
    let last = &grid.peers[grid.peers.len() - 1];
    format!(
        "Local grid up: supernode {}, {} peer(s) on {} … {}, state and logs in {}.\n\
         Submit from peer 1 ({}):\n  export P2PMPI_HOME={}\n  p2pmpirun -n 4 ./your-program\n\
         Stop it with: p2pmpi local-grid stop --dir {}",
        grid.supernode.addr,
        grid.peers.len(),
        first.state.ip,
        last.state.ip,
        dir.display(),
        first.state.ip,
        first.home.display(),
        dir.display()
    )
}
