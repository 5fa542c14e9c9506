//! `p2pmpi demo`: the quick start in one command. Starts a local grid (a supernode and K peer
//! daemons on 127.0.0.2 …) in a fresh directory, runs the π program of the seeds (the
//! chapter's figure 1, built into this binary as `p2pmpi __pi`) on it with `p2pmpirun -n N`,
//! and stops the grid, whatever the job did. Its exit status is the job's.

use crate::local_grid::{self, StartOpts};
use anyhow::{Context, Result};
use std::path::Path;
use std::process::Command;

/// The options of `p2pmpi demo`.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Number of peer daemons of the local grid.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=250))]
    pub peers: u32,
    /// Number of MPI processes of the job.
    #[arg(short = 'n', default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub n: u32,
    /// Number of intervals of the integration.
    #[arg(long, default_value_t = 1_000_000)]
    pub intervals: u32,
}

/// The argument that makes this binary the π program.
pub const PI_ARG: &str = "__pi";

/// Runs the demo; returns the job's exit status.
pub fn run(args: &DemoArgs) -> Result<i32> {
    let dir = std::env::temp_dir().join(format!("p2pmpi-demo-{}", std::process::id()));
    let peers = args.peers as usize;
    // Enough processes per peer for the job, at least the local grid's usual 2.
    let procs = (args.n.div_ceil(args.peers)).max(2);
    let opts =
        StartOpts { peers, dir: dir.clone(), procs, max_jobs: 0, extra: Vec::new(), net: [127, 0, 0], members: false };
    println!("Starting a local grid: a supernode and {peers} peer daemon(s) on 127.0.0.2 …, in {}", dir.display());
    let grid = local_grid::start(&opts).context("the local grid did not start")?;
    println!("{}", local_grid::describe(&grid, &dir).lines().next().unwrap_or_default());
    let r = job(args, &grid.peers[0].home);
    match local_grid::stop(&dir) {
        Ok(n) => println!("Local grid stopped ({n} peer(s))."),
        Err(e) => eprintln!("p2pmpi demo: stopping the local grid: {}", crate::error_text(&e)),
    }
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// `p2pmpirun -n N p2pmpi __pi`, submitted from peer 1.
fn job(args: &DemoArgs, submit_home: &Path) -> Result<i32> {
    let exe = std::env::current_exe().context("cannot find this program's path")?;
    println!(
        "Running the π program of the seeds (figure 1) on it: P2PMPI_HOME={} p2pmpirun -n {} {} {PI_ARG} {}",
        submit_home.display(),
        args.n,
        exe.display(),
        args.intervals
    );
    crate::commands::flush();
    let status = Command::new(&exe)
        .arg("run")
        .arg("-n")
        .arg(args.n.to_string())
        .arg(&exe)
        .arg(PI_ARG)
        .arg(args.intervals.to_string())
        .env("P2PMPI_HOME", submit_home)
        .env_remove("P2PMPI_CONF_FILE")
        .status()
        .context("cannot start p2pmpirun")?;
    Ok(status.code().unwrap_or(1))
}

/// The π program: rank 0 broadcasts the number of intervals, each rank sums its share of
/// the integral of 4/(1+x²) over [0, 1], and a reduction adds the partial sums at rank 0.
pub fn pi_main(intervals: Option<&str>) -> i32 {
    use p2pmpi::collective::SystemOperation;
    use p2pmpi::traits::*;
    #[allow(clippy::approx_constant, clippy::excessive_precision)] // the figure's own constant
    const PI25DT: f64 = 3.141592653589793238462643;
    let Some(universe) = p2pmpi::initialize() else {
        eprintln!("p2pmpi {PI_ARG}: MPI was already initialized");
        return 1;
    };
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let root = world.process_at_rank(0);
    let mut n: i32 = 0;
    if rank == 0 {
        n = intervals.and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    }
    root.broadcast_into(&mut n);
    let h = 1.0 / f64::from(n.max(1));
    let mut sum = 0.0;
    let mut i = rank + 1;
    while i <= n {
        let x = h * (f64::from(i) - 0.5);
        sum += 4.0 / (1.0 + x * x);
        i += size;
    }
    let mine = h * sum;
    if rank == 0 {
        let mut pi = 0.0f64;
        root.reduce_into_root(&mine, &mut pi, SystemOperation::sum());
        println!("Pi is approximately {pi:.16}, computed by {size} processes");
        println!("Error is {:.3e}", (pi - PI25DT).abs());
    } else {
        root.reduce_into(&mine, SystemOperation::sum());
    }
    0
}
