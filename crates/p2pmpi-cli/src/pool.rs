//! `p2pmpi pool …`: JEL pools from scripts (SPEC §14, crate `p2pmpi-jel`).
//!
//! * `p2pmpi pool join POOL [--elect NAME] [--impl central|distributed] [--dissemination
//!   serial|bootstrap|tree|gossip|adaptive]` prints `me ID`, then one line per event, flushed
//!   as it happens: `joined ID ADDR` (its own join and every earlier one included), `left ID`,
//!   `died ID`, `elected NAME ID`; and, when it stops without having left, `registry-lost
//!   ADDR` (the supernode is gone) or `excluded` (the pool declared it dead), with status 1.
//!   SIGTERM or SIGINT makes it leave gracefully (status 0).
//! * `p2pmpi pool list POOL` prints the members, `ID ADDR`, in join order.
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
    /// Print the members of POOL (central pools), `ID ADDR` in join order.
    List {
        pool: String,
        /// The registry, HOST:PORT (default: the supernode of P2P-MPI.conf).
        #[arg(long, value_name = "HOST:PORT")]
        registry: Option<String>,
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
    if let Some(r) = given {
        return r.to_socket_addrs()?.next().with_context(|| format!("{r}: no address"));
    }
    crate::commands::supernode_addrs(cfg)
        .into_iter()
        .find_map(|(_, a)| a)
        .context("no supernode address resolves (SUPERNODE in P2P-MPI.conf, or --registry)")
}

fn id(i: u64) -> String {
    format!("{i:016x}")
}

pub fn run(cmd: PoolCmd) -> Result<i32> {
    match cmd {
        PoolCmd::Join(a) => join(a),
        PoolCmd::List { pool, registry } => {
            let cfg = load_config("p2pmpi pool list")?;
            let secret = secret_of(&cfg)?;
            let r = registry_addr(&registry, &cfg)?;
            for (m, addr) in p2pmpi_jel::list(r, &secret, &pool, Duration::from_secs(10))? {
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
    let registry = match (central, a.bootstrap.is_empty()) {
        (false, false) if a.registry.is_none() => None,
        _ => Some(registry_addr(&a.registry, &cfg)?),
    };
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
