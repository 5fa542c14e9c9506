//! # p2pmpi-cli — the commands
//!
//! * `p2pmpirun -n N [-r R] [-a STRATEGY] [-l FILES] [-w SECONDS] PROG [ARGS…]` and
//!   `p2pmpi run …`: start a job — on the grid through this host's peer daemon when one runs
//!   ([`grid_run`]), else every process on this host ([`launcher`]). With mpirun's
//!   conventions: `-x VAR[=VALUE]`, `--timeout SECONDS`, `--output-filename DIR`,
//!   `--oversubscribe`, `--bind-to core|none` (local jobs: one CPU per process, round-robin),
//!   `-H`/`--host` and `--hostfile` (the peers that may be reserved), and `--collect PATTERN`
//!   (files remote ranks wrote, brought back).
//! * The daemons' commands ([`commands`]): `mpiboot`, `mpihalt`, `mpihost`, `mpistat`,
//!   `runSupernode`, `stopSupernode`, `supernode_stat`, and their `p2pmpi` subcommands.
//! * `p2pmpi mpicc|mpicxx …` and `p2pmpi abi-check PROGRAM` ([`mpicc`]): C and C++ programs
//!   compiled against p2pmpi's library with MPICH's ABI, and what a built one imports that the
//!   library lacks ([`abi`] finds the library and puts it first on the ranks' library path).
//! * `p2pmpi local-grid start|stop` ([`local_grid`]): a supernode and K peers on this machine.
//! * `p2pmpi pool join|list|registry` ([`pool`]): JEL pools (join, elect, leave) from scripts.
//! * `p2pmpi grid create|invite|join|whoami` ([`grid_keys`]): member keys and certificates.
//! * `p2pmpi grid status` ([`grid_status`]) and `p2pmpi monitor` (also `runVisuProxy`;
//!   [`monitor`]): the whole grid, in a terminal or live on a web page; `runVisu` prints
//!   (and on a desktop opens) the monitor's page.
//!
//! Every binary is a thin entry into [`entry`]; a binary started as `<name> __daemon KIND`
//! becomes that daemon (how `mpiboot` and `runSupernode` put daemons in the background).
#![forbid(unsafe_code)]

pub mod abi;
pub mod advise;
pub mod cargo_run;
pub mod commands;
pub mod demo;
pub mod doctor;
pub use p2pmpi_peer::elf;
pub mod grid_checkpoint;
pub mod grid_keys;
pub mod grid_restart;
pub mod grid_run;
pub mod grid_status;
pub mod launcher;
mod local_confine;
pub mod local_grid;
pub mod monitor;
pub mod mpicc;
pub mod notices;
pub mod options;
pub mod output;
pub mod pool;
pub mod restart;
mod revoked_hosts;
pub(crate) mod spawn;
pub(crate) mod supervise;
pub mod watch;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "p2pmpi", version, about = "P2P-MPI in Rust: run MPI programs on computers you do not administer")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run an MPI program (same options as `p2pmpirun`).
    #[command(disable_help_flag = true)]
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Start this host's peer daemon: MPD, RS and FT (`mpiboot`).
    Boot {
        /// Stay in the foreground, logging to standard error.
        #[arg(long)]
        foreground: bool,
    },
    /// Stop this host's peer daemon (`mpihalt`).
    Halt,
    /// The peers this host's MPD knows, with their round-trip times (`mpihost`).
    Host,
    /// MPI applications running on this host (`mpistat`).
    Stat,
    /// Supernode commands.
    Supernode {
        #[command(subcommand)]
        action: SupernodeCmd,
    },
    /// A whole grid on this machine: a supernode and K peers on 127.0.0.2, 127.0.0.3, ...
    LocalGrid {
        #[command(subcommand)]
        action: GridCmd,
    },
    /// JEL pools: join one and print its events, list its members (docs/jel.md).
    Pool {
        #[command(subcommand)]
        action: pool::PoolCmd,
    },
    /// How much replication: P_app(p, r) for r = 1..R and the best degree (the model of "Fault
    /// management in P2P-MPI", cited in docs/references.md).
    Advise(advise::AdviseArgs),
    /// The whole grid: peers, their load and free slots, running jobs with their ranks and
    /// replicas.
    Grid {
        #[command(subcommand)]
        action: GridViewCmd,
    },
    /// The grid monitor (`runVisuProxy`): a live web page and JSON API of the peers, the jobs
    /// and their failures, served on 127.0.0.1:9701 (TLS on any other address); read-only,
    /// the token it prints is required.
    Monitor(monitor::MonitorArgs),
    /// The quick start in one command: a local grid of K peers in a fresh directory, the π
    /// program of the seeds run on it with p2pmpirun -n N, the grid stopped.
    Demo(demo::DemoArgs),
    /// Check this machine: the configuration read (which file), the grid secret, the
    /// supernodes (reached, RTT), this host's peer daemon and its ports, /dev/shm, Landlock;
    /// and what to do about each problem.
    Doctor,
    /// Compile and link a C program with gcc against p2pmpi's mpi.h and library with MPICH's ABI
    /// (gcc's arguments; `-show` prints the command).
    #[command(disable_help_flag = true)]
    Mpicc {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The same for C++, with g++.
    #[command(disable_help_flag = true)]
    Mpicxx {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The MPI functions a program imports that p2pmpi's library with MPICH's ABI lacks or
    /// provides only as stubs (exit status 1 when there are some).
    AbiCheck {
        /// The program (or shared library, such as mpi4py's MPI.mpich*.so).
        program: PathBuf,
    },
    /// Make this peer's member key (once) and write a private (0600) P2P-MPI.conf with a fresh
    /// GRID_SECRET in the p2pmpi directory (P2PMPI_HOME, else ~/.p2pmpi).
    Init {
        /// The supernode(s) of the grid, HOST:PORT (default: 127.0.0.1:9700).
        #[arg(long, value_name = "HOST:PORT")]
        supernode: Option<String>,
        /// Replace an existing configuration (its GRID_SECRET changes).
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
enum GridViewCmd {
    /// Every peer the supernodes know (address, OS, CPUs, load, memory, jobs against
    /// MAX_JOBS, processes per job) and every MPI job running on them.
    Status {
        /// Print JSON instead of tables.
        #[arg(long)]
        json: bool,
        /// Refresh every 2 s until interrupted.
        #[arg(long)]
        watch: bool,
    },
    #[command(flatten)]
    Keys(grid_keys::KeysCmd),
}

#[derive(Subcommand)]
enum SupernodeCmd {
    /// Start a supernode on this host (`runSupernode`).
    Start {
        #[arg(long)]
        foreground: bool,
    },
    /// Stop it (`stopSupernode`).
    Stop,
    /// Peers known to the supernode (`supernode_stat`).
    Stat,
}

#[derive(Subcommand)]
enum GridCmd {
    /// Boot a supernode and K peers, each on its own loopback address.
    Start {
        /// Number of peers.
        #[arg(long, default_value_t = 4)]
        peers: usize,
        /// Directory for the grid's state and logs (default: <p2pmpi dir>/local-grid).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// MAX_PROCESSES_PER_JOB of every peer.
        #[arg(long, default_value_t = 2)]
        procs: u32,
        /// MAX_JOBS of every peer (0: unlimited).
        #[arg(long = "max-jobs", default_value_t = 0)]
        max_jobs: u32,
        /// Extra KEY=VALUE line for every peer's configuration (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Loopback prefix of the peers' addresses: peer i is A.B.C.(i+1).
        #[arg(long, default_value = "127.0.0", value_name = "A.B.C", value_parser = local_grid::parse_net)]
        net: [u8; 3],
        /// Member keys instead of a shared grid secret: peer 1 owns the grid, every daemon has
        /// its own key and certificate.
        #[arg(long)]
        keys: bool,
    },
    /// Stop the grid.
    Stop {
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// `p2pmpi init`: this peer's member key (made once, kept after), and a private configuration
/// with a fresh grid secret.
fn init(supernode: Option<String>, force: bool) -> anyhow::Result<()> {
    use anyhow::Context;
    use p2pmpi_peer::config::{p2pmpi_dir, Config, CONF_FILE_NAME};
    let dir = p2pmpi_dir();
    let path = dir.join(CONF_FILE_NAME);
    let keys = p2pmpi_peer::members::Keys::of(&p2pmpi_peer::home::Home::new(&dir));
    let (key, made) = keys.ensure_member_key()?;
    let how = if made { "new" } else { "existing" };
    println!("member key {} ({how}, {})", key.public().fingerprint(), keys.member_key().display());
    if path.exists() && !force {
        anyhow::bail!(
            "{} already exists; `p2pmpi init --force` replaces it (its GRID_SECRET changes: every machine of the grid then needs the new one)",
            path.display()
        );
    }
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness from the operating system: {e}"))?;
    let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut cfg = Config { grid_secret: Some(secret), ..Config::default() };
    if let Some(sn) = supernode {
        // Checked as the configuration file checks it: the same errors.
        let (parsed, _) = Config::parse(&format!("SUPERNODE={sn}\n"), std::path::Path::new("--supernode"))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        cfg.supernodes = parsed.supernodes;
    }
    p2pmpi_peer::home::write_private(&path, cfg.to_text().as_bytes())?;
    // The written file must read back as written.
    Config::load_file(&path).map_err(|e| anyhow::anyhow!("{e}"))?;
    println!("wrote {} (readable by you only) with a new GRID_SECRET", path.display());
    println!("Every machine of this grid needs the same secret: copy this file (or its GRID_SECRET line)");
    println!("to each machine's p2pmpi directory over a channel you trust (for example scp), never in clear.");
    println!("Then start the supernode on one machine (runSupernode), set SUPERNODE=HOST:9700 to it on the");
    println!("others, and start each machine's peer daemon (mpiboot).");
    println!("With member keys instead of the shared secret: `p2pmpi grid create NAME` on the owner's machine,");
    println!("`p2pmpi grid invite NAME` there and `p2pmpi grid join CODE` on each new machine.");
    Ok(())
}

fn report(name: &str, r: anyhow::Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{name}: error: {}", error_text(&e));
            1
        }
    }
}

/// An error with its causes, `: `-separated as `{:#}` shows them, but a cause whose text the
/// message already ends with is not repeated (`i/o: Connection refused (os error 111)` once,
/// not followed by its own source `Connection refused (os error 111)`).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

/// Entry point of every binary: `name` is the command the user typed.
pub fn entry(name: &str) -> i32 {
    let args: Vec<String> = std::env::args().collect();
    if args.len() >= 3 && args[1] == "__daemon" {
        return commands::daemon_main(&args[2]);
    }
    if args.len() >= 2 && args[1] == demo::PI_ARG {
        return demo::pi_main(args.get(2).map(String::as_str));
    }
    let rest = &args[1..];
    if name == "p2pmpirun" {
        return launcher::main_with_args("p2pmpirun", rest);
    }
    // The classic commands: arguments parsed by clap like everything else, so that `--help`
    // and `--version` print and never act, and an unknown option is an error, not ignored.
    let (cname, about): (&'static str, &'static str) = match name {
        "mpiboot" => (
            "mpiboot",
            "Start this host's peer daemon (MPD, with its RS, FT and FD services) and register it with the supernode",
        ),
        "mpihalt" => ("mpihalt", "Stop this host's peer daemon"),
        "mpihost" => ("mpihost", "List the hosts this host's peer daemon knows (its cached host list)"),
        "mpistat" => ("mpistat", "Show the processes this host's peer daemon runs"),
        "runSupernode" => ("runSupernode", "Start a supernode on this host"),
        "stopSupernode" => ("stopSupernode", "Stop the supernode of this host"),
        "supernode_stat" => ("supernode_stat", "Show the peers the supernode of this host knows"),
        "runVisuProxy" => return visu_proxy_main(rest),
        "runVisu" => (
            "runVisu",
            "Print the grid monitor's page (the one running here, else VISU_PROXY's) and open it on a desktop",
        ),
        _ => return p2pmpi_main(),
    };
    let daemon = matches!(name, "mpiboot" | "runSupernode");
    let mut cmd = clap::Command::new(cname).version(env!("CARGO_PKG_VERSION")).about(about);
    if daemon {
        cmd = cmd.arg(
            clap::Arg::new("foreground")
                .long("foreground")
                .action(clap::ArgAction::SetTrue)
                .help("Stay in the foreground instead of running as a daemon"),
        );
    }
    let m = match cmd.try_get_matches_from(std::iter::once(name.to_string()).chain(rest.iter().cloned())) {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let foreground = daemon && m.get_flag("foreground");
    match name {
        "mpiboot" => report(name, commands::boot(foreground)),
        "mpihalt" => report(name, commands::halt()),
        "mpihost" => report(name, commands::host()),
        "mpistat" => report(name, commands::stat()),
        "runSupernode" => report(name, commands::supernode_start(foreground)),
        "stopSupernode" => report(name, commands::supernode_stop()),
        "supernode_stat" => report(name, commands::supernode_stat()),
        "runVisu" => report(name, monitor::visu()),
        _ => p2pmpi_main(),
    }
}

/// `runVisuProxy [--listen ADDR:PORT] [--interval MS]`: `p2pmpi monitor`.
fn visu_proxy_main(rest: &[String]) -> i32 {
    #[derive(Parser)]
    #[command(name = "runVisuProxy", version, about = "The grid monitor (p2pmpi monitor): a live web page of the grid")]
    struct VisuProxy {
        #[command(flatten)]
        args: monitor::MonitorArgs,
    }
    match VisuProxy::try_parse_from(std::iter::once("runVisuProxy".to_string()).chain(rest.iter().cloned())) {
        Ok(v) => report("runVisuProxy", monitor::run(&v.args)),
        Err(e) => {
            let _ = e.print();
            if e.use_stderr() {
                2
            } else {
                0
            }
        }
    }
}

fn p2pmpi_main() -> i32 {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Run { args } => launcher::main_with_args("p2pmpi run", &args),
        Cmd::Boot { foreground } => report("p2pmpi boot", commands::boot(foreground)),
        Cmd::Halt => report("p2pmpi halt", commands::halt()),
        Cmd::Host => report("p2pmpi host", commands::host()),
        Cmd::Stat => report("p2pmpi stat", commands::stat()),
        Cmd::Supernode { action } => match action {
            SupernodeCmd::Start { foreground } => {
                report("p2pmpi supernode start", commands::supernode_start(foreground))
            }
            SupernodeCmd::Stop => report("p2pmpi supernode stop", commands::supernode_stop()),
            SupernodeCmd::Stat => report("p2pmpi supernode stat", commands::supernode_stat()),
        },
        Cmd::Advise(args) => advise::run(&args),
        Cmd::Grid { action: GridViewCmd::Status { json, watch } } => {
            report("p2pmpi grid status", grid_status::run(json, watch))
        }
        Cmd::Grid { action: GridViewCmd::Keys(k) } => report("p2pmpi grid", grid_keys::run(k)),
        Cmd::Monitor(args) => report("p2pmpi monitor", monitor::run(&args)),
        Cmd::Pool { action } => match pool::run(action) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("p2pmpi pool: error: {}", error_text(&e));
                1
            }
        },
        Cmd::Init { supernode, force } => report("p2pmpi init", init(supernode, force)),
        Cmd::Doctor => doctor::run(),
        Cmd::Mpicc { args } => mpicc::compile("p2pmpi mpicc", false, &args),
        Cmd::Mpicxx { args } => mpicc::compile("p2pmpi mpicxx", true, &args),
        Cmd::AbiCheck { program } => match mpicc::abi_check(&program) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("p2pmpi abi-check: error: {}", error_text(&e));
                2
            }
        },
        Cmd::Demo(args) => match demo::run(&args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("p2pmpi demo: error: {}", error_text(&e));
                1
            }
        },
        Cmd::LocalGrid { action } => match action {
            GridCmd::Start { peers, dir, procs, max_jobs, set, net, keys } => {
                let dir = dir.unwrap_or_else(local_grid::default_dir);
                let opts =
                    local_grid::StartOpts { peers, dir: dir.clone(), procs, max_jobs, extra: set, net, members: keys };
                report(
                    "p2pmpi local-grid start",
                    local_grid::start(&opts).map(|g| println!("{}", local_grid::describe(&g, &dir))),
                )
            }
            GridCmd::Stop { dir } => {
                let dir = dir.unwrap_or_else(local_grid::default_dir);
                report(
                    "p2pmpi local-grid stop",
                    local_grid::stop(&dir).map(|n| println!("Local grid in {} stopped ({n} peer(s)).", dir.display())),
                )
            }
        },
    }
}
