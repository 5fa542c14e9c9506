//! The local launcher: runs the N processes of a job on this host.
//!
//! Start-up follows the seeds' execution preamble: each process binds its data port and
//! registers (rank, address) on the launcher's control port, proving in a challenge-response
//! on the job's key ([`p2pmpi_wire::auth`]; the key is drawn here and given to the children
//! in their environment, never sent on a socket) that it belongs to the job; once all have
//! registered the launcher sends every process the communicator table. The control connections
//! stay open: a process reports `Finalized` or `Abort` on it, and its closing tells that the
//! process is gone. The job is followed by `supervise::event_loop`, the driver of the
//! pure job supervisor (`p2pmpi_core::supervisor`), as every launcher's is.
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
//! job's supervisor (`p2pmpi_core::fencing`): processes only suspect one another, the launcher declares
//! deaths, and a replica declared dead is out for good (fencing). The death of a replica whose
//! rank keeps another one is reported and the job goes on; the job stops when a rank loses
//! its last replica. Only each rank's master is shown on the output ([`crate::output`]); only
//! rank 0's first replica reads the terminal's input. Run locally, the replicas of a rank
//! share this host: they protect against process crashes only; on the grid they run on
//! different hosts.

use crate::options::{allowed_hosts, extra_env, resolve_program};
pub use crate::options::{cluster_prefix, FdPlan, KmonitorPlan, RunArgs};
use crate::supervise::{
    die_with_launcher, event_loop_with_cause, pump, spawn_control_server, terminate, watch_exits, Job, Shared,
};
use anyhow::{bail, Context, Result};
use clap::Parser;
use p2pmpi::bootstrap::env;
use p2pmpi_core::replication::Layout;
use p2pmpi_core::supervisor::who;
use p2pmpi_wire::auth::JobKey;
use p2pmpi_wire::control;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

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
                            | "--checkpoint-dir"
                            | "--max-restarts"
                            | "--resume"
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

pub use crate::supervise::TIMEOUT_EXIT;

/// Runs a job: on the grid when this host's peer daemon runs (or `--grid`), else locally.
pub fn run(name: &str, mut opts: RunArgs) -> Result<i32> {
    if let Some(dir) = opts.resume.clone() {
        opts = crate::restart::resume(name, &dir, &opts)?;
    }
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
        // A rank is an i32 (MPI's int); the local limit is checked where a job runs locally.
        Some(n) if n > i64::from(i32::MAX) => bail!("-n {n} is more processes than MPI's ranks can number"),
        Some(n) => n as usize,
    })
}

/// The most processes a job runs on this host (`--local`, or no peer daemon).
const MAX_LOCAL: usize = 4096;

/// Runs a job's N processes on this host (with `-r R`, its 1 + (N − 1)·R slots), and again
/// from its last complete checkpoint when a process dies, up to `--max-restarts` times.
fn run_local(name: &str, opts: RunArgs, n: usize, binding: Binding) -> Result<i32> {
    let program = resolve_program(&opts.command[0])?;
    let checkpoints = crate::restart::LocalCheckpoints::new(&opts, &program)?;
    let recorded = crate::restart::LocalCheckpoints::recorded(&opts);
    let _lock = recorded.then(|| checkpoints.lock()).transpose()?;
    let (mut replay, mut restore) = match &opts.resume {
        Some(dir) => (
            crate::output::Journal::read(dir, n)
                .with_context(|| format!("cannot read the journal in {}", dir.display()))?,
            checkpoints.latest()?.map(|m| m.generation),
        ),
        None => (crate::output::Replay::new(n), None),
    };
    if recorded && opts.resume.is_none() {
        checkpoints.record(&opts, &program)?;
    }
    let journal = match recorded {
        true => Some(Arc::new(
            crate::output::Journal::open(checkpoints.dir(), &replay)
                .with_context(|| format!("cannot write the output's journal in {}", checkpoints.dir().display()))?,
        )),
        false => None,
    };
    let mut restarts = 0;
    loop {
        let again = restarts > 0 || opts.resume.is_some();
        let journal = journal.clone();
        let run = crate::restart::Run { dir: checkpoints.dir(), restore, again, replay: &mut replay, journal };
        let (code, cause, killed) = run_local_once(name, &opts, n, &binding, run)?;
        if restarts >= opts.max_restarts || !crate::restart::restartable(code, killed) {
            checkpoints.finish(name, code, false);
            return Ok(code);
        }
        restarts += 1;
        let latest = checkpoints.latest()?;
        crate::restart::report(name, cause.as_deref(), latest.as_ref(), restarts, opts.max_restarts);
        restore = latest.map(|m| m.generation);
    }
}

/// One run of a local job's processes: its exit status, the failure's report, and whether a
/// process was killed by a signal that the launcher did not send.
fn run_local_once(
    name: &str,
    opts: &RunArgs,
    n: usize,
    binding: &Binding,
    run: crate::restart::Run,
) -> Result<(i32, Option<String>, bool)> {
    let layout = Layout::new(n, opts.replicas as usize);
    let slots = layout.slots();
    if slots > MAX_LOCAL {
        let what =
            if layout.r > 1 { format!("-n {n} -r {} is {slots} processes,", layout.r) } else { format!("-n {n} is") };
        bail!(
            "{what} more processes than a local run supports ({MAX_LOCAL}); a grid job has no such limit (start a \
             peer daemon with mpiboot, then p2pmpirun --grid)"
        );
    }
    let program = resolve_program(&opts.command[0])?;
    let abi = crate::abi::setup(&program, &extra_env(opts)?)?;
    let cfg = crate::grid_run::load_config(name)?;
    let fd = FdPlan::from_options(opts, &cfg)?;
    if opts.verbose {
        eprintln!("{name}: failure detector: {}", fd.as_ref().map_or("off".to_string(), |f| f.name()));
    }
    let prog_args = &opts.command[1..];

    let listener = TcpListener::bind("127.0.0.1:0").context("cannot open the launcher's control port")?;
    let ctrl_addr = listener.local_addr()?;
    let key = JobKey::random()?;
    // Dropped at the end (after the processes): its directories are removed.
    let confinement = opts
        .confine
        .then(|| crate::local_confine::LocalConfinement::new(name, &cfg, &program, slots))
        .transpose()?
        .map(Arc::new);

    let (tx, rx) = channel();
    let sup = Shared::new(layout, fd.as_ref());
    spawn_control_server(listener, key.clone(), slots, tx.clone(), sup.clone());

    let output = Arc::new(run.output(layout, opts)?);
    // Every process the same Python settings, and p2pmpi's library with MPICH's ABI first on
    // its library path (the processes of spawns too: they get `extra`).
    let mut extra = extra_env(opts)?;
    extra.extend(crate::abi::python_env(&extra, false)?);
    if let Some(a) = abi.as_ref().filter(|a| a.prepend) {
        extra.push(("LD_LIBRARY_PATH".into(), crate::abi::library_path(&a.dir, &extra)));
    }
    let mut children: Vec<Child> = Vec::with_capacity(slots);
    let mut pumps: Vec<JoinHandle<()>> = Vec::new();
    let mut pids: Vec<u32> = vec![0; slots];
    for (slot, pid) in pids.iter_mut().enumerate() {
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
        // This job's checkpoints (not a spawned job's: those are given `extra` only).
        cmd.envs(run.env());
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
        if let Some(Err(e)) = confinement.as_ref().map(|c| c.apply(&mut cmd, ctrl_addr.port())) {
            kill_all(&mut children);
            return Err(e);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                kill_all(&mut children);
                bail!("cannot start '{}': {e}", program.display());
            }
        };
        *pid = child.id();
        if opts.verbose && *binding != Binding::None {
            eprintln!("{name}: {} (pid {pid}) bound to CPU {}", who(layout, slot), cpus_allowed(*pid));
        } else if opts.verbose {
            eprintln!("{name}: {} started (pid {pid})", who(layout, slot));
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
        crate::spawn::Settings::of_job(
            name,
            &key,
            layout,
            opts,
            &extra,
            crate::spawn::Place::Local(confinement.clone()),
        )
        .with_fd(fd),
    );
    if layout.r > 1 {
        // Its children's declared deaths reach the parents, and the other way round.
        spawner.register_world(0, slots, tx.clone());
    }
    if let Some(a) = &abi {
        let watched = pids.iter().copied().enumerate().collect();
        let limit = Duration::from_secs(opts.startup_timeout);
        crate::abi::watch_foreign(watched, a.lib.clone(), sup.clone(), tx.clone(), limit);
    }
    drop(tx);
    let stopped = crate::restart::Stopped::default();
    let stop = || {
        stopped.note(&children);
        terminate(&children);
        spawner.terminate_all();
    };
    let spawn = |apps: &[control::SpawnApp], parents: &[(u32, String)], ctx: u32| spawner.spawn(apps, parents, ctx);
    let job = Job {
        stop_all: &stop,
        output: &output,
        startup_timeout: opts.startup_timeout,
        timeout: opts.timeout.map(Duration::from_secs),
        fd: fd.as_ref(),
        sup,
        notices: None,
        spawner: Some(&spawn),
        slot_base: 0,
        relay: (layout.r > 1).then_some(&spawner as &dyn crate::supervise::Relay),
        join_notice: abi.as_ref().and_then(|_| crate::abi::join_notice(&program)),
    };
    let (code, cause) = event_loop_with_cause(name, &job, &rx, pids);
    spawner.unregister_world(0);
    for p in pumps {
        let _ = p.join();
    }
    // The spawned jobs end like the parents' (their exit status counts if the parents' is 0).
    let spawned = spawner.wait();
    // A job stopped while its processes connected leaves the shared-memory segments of its
    // openings in /dev/shm (created, not yet mapped by the peer): its processes no longer
    // run, so they are removed now, whatever the end.
    p2pmpi::device::remove_job_segments(&key);
    if let Some(r) = output.replay() {
        *run.replay = r;
    }
    Ok((if code == 0 { spawned } else { code }, cause, stopped.killed_before(&children)))
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
}
