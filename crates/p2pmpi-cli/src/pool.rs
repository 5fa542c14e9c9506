//! `p2pmpi pool …`: JEL pools from scripts (SPEC §14, crate `p2pmpi-jel`).
//!
//! * `p2pmpi pool join POOL [--elect NAME] [--impl central|distributed] [--dissemination
//!   serial|bootstrap|tree|gossip|adaptive]` prints `me ID`, then one line per event, flushed
//!   as it happens: `joined ID ADDR` (its own join and every earlier one included), `left ID`,
//!   `died ID`, `elected NAME ID`; and, when it stops without having left, `registry-lost
//!   ADDR` (the supernode is gone) or `excluded` (the pool declared it dead), with status 1.
//!   SIGTERM or SIGINT makes it leave gracefully (status 0).
//! * `p2pmpi pool list POOL` prints the members, `ID ADDR`: a central pool's in join order
//!   (the registry's), a distributed pool's by id (the view of one live member, found through
//!   `--bootstrap` or the rendezvous and asked without joining; docs/jel.md says why).
//! * `p2pmpi pool registry [--listen ADDR]`: a registry of its own, for pools outside a grid
//!   (the supernode hosts one already).
//!
//! The registry (and the distributed implementation's rendezvous) is the supernode of the
//! `P2P-MPI.conf` (`--registry` overrides it); every connection is authenticated by its
//! `GRID_SECRET`.

use crate::grid_run::{load_config, secret_of};
use anyhow::{bail, Context, Result};
use p2pmpi_jel::{central, distributed, Consistency, Elections, Implementation, JoinLeave, Notice, Options, Pool};
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Impl {
    Central,
    Distributed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum JoinsArg {
    Reliable,
    Unreliable,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ElectionsArg {
    Uniform,
    NonUniform,
    Off,
}

#[derive(Debug, clap::Subcommand)]
pub enum PoolCmd {
    /// Join POOL and print its events, one line each, until SIGTERM or SIGINT (then leave).
    Join(JoinArgs),
    /// Print the members of POOL, `ID ADDR`: a central pool's in join order (the registry's
    /// state), a distributed pool's by id (the view of a member it asks, without joining).
    List {
        pool: String,
        /// The implementation (default: the registry's central pool of that name if it has
        /// members, else the distributed pool).
        #[arg(long = "impl", value_enum)]
        implementation: Option<Impl>,
        /// The registry (and rendezvous), HOST:PORT (default: the supernode of P2P-MPI.conf).
        #[arg(long, value_name = "HOST:PORT")]
        registry: Option<String>,
        /// Distributed: a member to ask (repeatable; tried before the rendezvous's seeds).
        #[arg(long, value_name = "HOST:PORT")]
        bootstrap: Vec<SocketAddr>,
    },
    /// Run a JEL registry of its own (the supernode hosts one already).
    Registry {
        #[arg(long, default_value = "0.0.0.0:9710", value_name = "ADDR:PORT")]
        listen: SocketAddr,
    },
}

#[derive(Debug, clap::Args)]
pub struct JoinArgs {
    pub pool: String,
    /// Stand in the election NAME (repeatable).
    #[arg(long, value_name = "NAME")]
    pub elect: Vec<String>,
    /// The implementation.
    #[arg(long = "impl", value_enum, default_value = "central")]
    pub implementation: Impl,
    /// Central: how the registry's events reach the members.
    #[arg(long, default_value = "tree", value_parser = parse_dissemination)]
    pub dissemination: central::Dissemination,
    /// Joins and leaves: reliable (same order everywhere; central only), unreliable or off.
    /// Default: reliable with the central implementation, unreliable with the distributed.
    #[arg(long, value_enum)]
    pub joins: Option<JoinsArg>,
    /// Elections: uniform (central only), non-uniform or off. Default: uniform with the
    /// central implementation, non-uniform with the distributed.
    #[arg(long, value_enum)]
    pub elections: Option<ElectionsArg>,
    /// The registry (and rendezvous), HOST:PORT (default: the supernode of P2P-MPI.conf).
    #[arg(long, value_name = "HOST:PORT")]
    pub registry: Option<String>,
    /// Distributed: a member to start from (repeatable; the registry's rendezvous is asked
    /// too).
    #[arg(long, value_name = "HOST:PORT")]
    pub bootstrap: Vec<SocketAddr>,
    /// Where to listen (default: every address, a free port; the address that reaches the
    /// registry is advertised).
    #[arg(long, value_name = "IP:PORT")]
    pub bind: Option<SocketAddr>,
    /// How long a member may stay silent before it is checked, in milliseconds (central:
    /// the lease; distributed: the gossip time-out). A `kill -9` closes its connections and
    /// is found at once either way; this bounds a host that vanished.
    #[arg(long, value_name = "MS")]
    pub detect_ms: Option<u64>,
}

fn parse_dissemination(s: &str) -> Result<central::Dissemination, String> {
    s.parse()
}

/// The registry: `--registry`, else the supernode this host runs, else the configuration's.
fn registry_addr(given: &Option<String>, cfg: &p2pmpi_peer::config::Config) -> Result<SocketAddr> {
    Ok(registry_addrs(given, cfg)?[0])
}

/// Every address the registry is served at: `--registry` (a comma list), else the
/// supernode this host runs and then every supernode of the configuration (a registry
/// replicated among them is found at the one that leads).
fn registry_addrs(given: &Option<String>, cfg: &p2pmpi_peer::config::Config) -> Result<Vec<SocketAddr>> {
    let mut all: Vec<SocketAddr> = Vec::new();
    if let Some(r) = given {
        for one in r.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            all.push(one.to_socket_addrs()?.next().with_context(|| format!("{one}: no address"))?);
        }
    } else {
        let local = crate::commands::supernode_addrs(cfg).into_iter().filter_map(|(_, a)| a);
        let configured = cfg.supernodes.iter().filter_map(|s| s.to_socket_addrs().ok().and_then(|mut a| a.next()));
        for a in local.chain(configured) {
            if !all.contains(&a) {
                all.push(a);
            }
        }
    }
    if all.is_empty() {
        bail!("no supernode address resolves (SUPERNODE in P2P-MPI.conf, or --registry)");
    }
    Ok(all)
}

fn id(i: u64) -> String {
    format!("{i:016x}")
}

pub fn run(cmd: PoolCmd) -> Result<i32> {
    match cmd {
        PoolCmd::Join(a) => join(a),
        PoolCmd::List { pool, implementation, registry, bootstrap } => {
            let cfg = load_config("p2pmpi pool list")?;
            let secret = secret_of(&cfg)?;
            for (m, addr) in list(&pool, implementation, &registry, &bootstrap, &cfg, &secret)? {
                println!("{} {addr}", id(m));
            }
            Ok(0)
        }
        PoolCmd::Registry { listen } => {
            let cfg = load_config("p2pmpi pool registry")?;
            let secret = secret_of(&cfg)?;
            let server = p2pmpi_jel::serve_registry(listen, secret)?;
            println!("registry {}", server.addr);
            crate::commands::flush();
            let mut signals =
                signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])?;
            let _ = signals.forever().next();
            server.stop();
            Ok(0)
        }
    }
}

const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// The members: a central pool's from the registry; a distributed pool's from the first
/// member that answers, among `--bootstrap` then the rendezvous's seeds (the latest members
/// that joined through it), asked without registering this process as a seed.
fn list(
    pool: &str,
    implementation: Option<Impl>,
    registry: &Option<String>,
    bootstrap: &[SocketAddr],
    cfg: &p2pmpi_peer::config::Config,
    secret: &p2pmpi_jel::GridSecret,
) -> Result<Vec<(u64, SocketAddr)>> {
    // Given members to ask, no registry is needed.
    let r = match registry_addr(registry, cfg) {
        Ok(r) => Some(r),
        Err(_) if !bootstrap.is_empty() => None,
        Err(e) => return Err(e),
    };
    let central_first = match implementation {
        Some(Impl::Central) => true,
        Some(Impl::Distributed) => false,
        None => bootstrap.is_empty(),
    };
    if central_first {
        r.context("no registry (SUPERNODE in P2P-MPI.conf, or --registry)")?;
        let members = p2pmpi_jel::list_from(&registry_addrs(registry, cfg)?, secret, pool, LIST_TIMEOUT)?;
        if !members.is_empty() || implementation == Some(Impl::Central) {
            return Ok(members);
        }
    }
    let mut seeds = bootstrap.to_vec();
    if let Some(r) = r {
        match p2pmpi_jel::seeds(r, secret, pool, None, LIST_TIMEOUT) {
            Ok(s) => seeds.extend(s.into_iter().filter(|a| !bootstrap.contains(a))),
            Err(e) if bootstrap.is_empty() => return Err(e.into()),
            Err(_) => {}
        }
    }
    if seeds.is_empty() {
        return Ok(Vec::new());
    }
    match p2pmpi_jel::list_distributed(&seeds, secret, pool, LIST_TIMEOUT)? {
        Some(members) => Ok(members),
        // Every member the rendezvous remembers left (nothing listens at its address any
        // more): the pool is empty, as a central pool whose members left.
        None if seeds.iter().all(nobody_listens) => Ok(Vec::new()),
        None => bail!("pool {pool}: none of its {} known members answered", seeds.len()),
    }
}

/// Whether a connection to `addr` is refused (no process listens there: the member left or
/// its process ended), rather than unanswered.
fn nobody_listens(addr: &SocketAddr) -> bool {
    matches!(std::net::TcpStream::connect_timeout(addr, Duration::from_secs(2)),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused)
}

enum Line {
    Notice(Notice),
    Signal,
}

fn join(a: JoinArgs) -> Result<i32> {
    let cfg = load_config("p2pmpi pool join")?;
    let secret = secret_of(&cfg)?;
    let central = a.implementation == Impl::Central;
    let joins = match a.joins {
        None if central => Some(JoinLeave::Reliable),
        None => Some(JoinLeave::Unreliable),
        Some(JoinsArg::Reliable) => Some(JoinLeave::Reliable),
        Some(JoinsArg::Unreliable) => Some(JoinLeave::Unreliable),
        Some(JoinsArg::Off) => None,
    };
    let elections = match a.elections {
        None if central => Some(Elections::Uniform),
        None => Some(Elections::NonUniform),
        Some(ElectionsArg::Uniform) => Some(Elections::Uniform),
        Some(ElectionsArg::NonUniform) => Some(Elections::NonUniform),
        Some(ElectionsArg::Off) => None,
    };
    let registries = match (central, a.bootstrap.is_empty()) {
        (false, false) if a.registry.is_none() => Vec::new(),
        _ => registry_addrs(&a.registry, &cfg)?,
    };
    let registry = registries.first().copied();
    let implementation = if central {
        let mut c = central::Config::new(a.dissemination);
        if let Some(ms) = a.detect_ms {
            let d = Duration::from_millis(ms.max(100));
            c.lease = d;
            c.heartbeat_interval = d / 2;
            c.ping_timeout = (d / 4).min(Duration::from_secs(5));
            c.fallback_interval = d.max(Duration::from_secs(1));
        }
        Implementation::Central { registry: registry.expect("central has a registry"), config: c }
    } else {
        let mut c = distributed::Config::default();
        if let Some(ms) = a.detect_ms {
            let d = Duration::from_millis(ms.max(100));
            c.timeout = d;
            c.probe_timeout = (d / 4).min(Duration::from_secs(5));
            c.interval = (d / 10).min(Duration::from_secs(1));
        }
        Implementation::Distributed { bootstrap: a.bootstrap.clone(), rendezvous: registry, config: c }
    };
    let mut opts = Options::central(&a.pool, secret, SocketAddr::from(([127, 0, 0, 1], 0)));
    opts.implementation = implementation;
    opts.consistency = Consistency { joins, elections };
    if central {
        opts.registries = registries;
    }
    if let Some(b) = a.bind {
        opts.bind = b;
    }
    let (tx, rx) = std::sync::mpsc::channel::<Line>();
    let stx = tx.clone();
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM])?;
    std::thread::spawn(move || {
        for _ in signals.forever() {
            if stx.send(Line::Signal).is_err() {
                break;
            }
        }
    });
    let pool = Pool::join_with(opts, move |n| {
        let _ = tx.send(Line::Notice(n));
    })?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "me {}", id(pool.id()))?;
    out.flush()?;
    for name in &a.elect {
        // The winner comes as an `elected` line too (every member is told).
        if let Err(e) = pool.elect(name, Duration::from_secs(30)) {
            bail!("election {name}: {e}");
        }
    }
    for line in rx {
        match line {
            Line::Notice(n) => {
                writeln!(out, "{n}")?;
                out.flush()?;
                if matches!(n, Notice::RegistryLost(_) | Notice::Excluded) {
                    return Ok(1);
                }
            }
            Line::Signal => {
                pool.leave();
                return Ok(0);
            }
        }
    }
    Ok(1)
}
