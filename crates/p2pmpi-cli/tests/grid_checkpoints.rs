//! Restarts of a grid job from its checkpoints (issue 41, item 4), on a local grid of real
//! daemons: `ckpt_iter` (one line per rank and step, a checkpoint every 4 steps, a checksum at
//! the end) submitted with `--max-restarts`; every copy of a rank killed (kill -9: at `-r 2`
//! both replicas, at `-r 1` the process) after a complete checkpoint makes the launcher stop
//! the others, reserve hosts again and start every rank from that checkpoint, and the job
//! ends with the checksum of a fault-free run and no line shown twice; more losses than
//! `--max-restarts` fail with the coordinator's reason; `p2pmpirun --resume DIR` restarts a
//! grid job whose launcher was killed.
#![forbid(unsafe_code)]

mod common;
use common::ckpt::*;
use common::grid::{bin, TestGrid};
use common::job::Job;
use common::*;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(180);
/// How long a condition of the job may take to come (a loaded 2-core machine).
const SEEN: Duration = Duration::from_secs(90);

/// The output of a run without faults: `ckpt_iter STEPS 4 0` on `n` ranks (on this host: the
/// output does not depend on where the ranks run).
fn fault_free(n: usize, steps: &str) -> String {
    let prog = example("ckpt_iter");
    let o = run(&["--local", "-n", &n.to_string(), prog.to_str().unwrap(), steps, "4", "0"], T);
    o.assert_ok();
    assert!(checksum(&o.stdout).is_some(), "{}", o.stdout);
    o.stdout
}

/// `p2pmpirun ARGS` submitted from peer 1 of `grid`, in `dir`.
fn submit(grid: &TestGrid, dir: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin("p2pmpirun"));
    c.current_dir(dir).env("P2PMPI_HOME", grid.home(1)).env_remove("P2PMPI_CONF_FILE").args(args);
    c
}

/// `-n N -r R --checkpoint-dir CK --max-restarts M ckpt_iter STEPS 4 PACE normal 0 MARKER`.
fn ckpt_job(grid: &TestGrid, s: &Scratch, nrm: [&str; 3], steps: &str, pace: &str, marker: &str) -> Job {
    let ck = s.ck();
    let prog = example("ckpt_iter");
    let [n, r, m] = nrm;
    Job::spawn(&mut submit(
        grid,
        &s.0,
        &[
            "-n",
            n,
            "-r",
            r,
            "--checkpoint-dir",
            ck.to_str().unwrap(),
            "--max-restarts",
            m,
            prog.to_str().unwrap(),
            steps,
            "4",
            pace,
            "normal",
            "0",
            marker,
        ],
    ))
}

/// The pid of the live process of slot `slot` of the job carrying `marker`, other than `not`.
fn slot_pid(marker: &str, slot: usize, not: &[u32]) -> u32 {
    let mut pid = None;
    wait_until(SEEN, &format!("slot {slot}'s process"), || {
        pid = processes_with(marker).into_iter().find(|&p| {
            env_of(p, "P2PMPI_RANK").as_deref() == Some(&slot.to_string()) && !is_dead(p) && !not.contains(&p)
        });
        pid.is_some()
    });
    pid.unwrap()
}

/// Asserts that the job's output is the fault-free one: the same lines per rank (none
/// twice, none missing) and the same checksum.
fn assert_same_output(got: &str, want: &str, n: usize, all: &str) {
    for r in 0..n {
        assert_eq!(lines_of(got, r), lines_of(want, r), "rank {r}'s lines differ:\n{all}");
    }
    assert_eq!(checksum(got), checksum(want), "checksum:\n{all}");
    assert_eq!(got.lines().count(), want.lines().count(), "lines:\n{all}");
}

/// A grid of 4 peers, 3 processes of a job each at most, whose jobs may write the checkpoint
/// directory (the directory store, until checkpoints are kept on peers: Landlock lets a
/// confined job write its own directory only).
fn grid(name: &str) -> TestGrid {
    let unconfined = ["--set", "JOB_LANDLOCK_ABI=0", "--set", "ALLOW_UNCONFINED_JOBS=yes"];
    let g = TestGrid::start(name, 4, &[&["--procs", "3"][..], &unconfined[..]].concat());
    g.wait_hosts(1, 3);
    g
}

/// Kills every copy of rank 1 (slots `slots`) once a checkpoint is complete; the job restarts
/// from it and ends as a fault-free run would.
fn every_copy_killed(name: &str, r: &str, slots: &[usize]) {
    let want = fault_free(3, "30");
    let g = grid(name);
    let s = Scratch::new("gridckpt", name);
    let m = marker(name);
    let job = ckpt_job(&g, &s, ["3", r, "2"], "30", "150", &m);
    let ck = s.ck();
    wait_until(SEEN, "a complete checkpoint", || complete_generation(&ck).is_some_and(|g| g >= 2));
    for &slot in slots {
        kill9(slot_pid(&m, slot, &[]));
    }
    let e = job.end(T);
    assert_eq!(e.code, 0, "{}", e.text);
    assert!(
        e.text.contains("restart 1 of 2: rank 1 (")
            && e.text.contains("lost every copy; restarting every rank from checkpoint generation"),
        "the launcher says what happened:\n{}",
        e.text
    );
    assert_same_output(&e.stdout, &want, 3, &e.text);
    assert!(wait_no_processes(&m, Duration::from_secs(10)).is_empty(), "processes left");
}

#[test]
fn both_replicas_of_a_rank_killed_restart_the_grid_job_from_its_checkpoint() {
    // n = 3, r = 2: rank 1 is slots 2 and 3.
    every_copy_killed("r2", "2", &[2, 3]);
}

#[test]
fn a_rank_killed_at_r1_restarts_the_grid_job_from_its_checkpoint() {
    every_copy_killed("r1", "1", &[1]);
}

#[test]
fn more_losses_than_max_restarts_fail_the_grid_job_with_the_reason() {
    let g = grid("budget");
    let s = Scratch::new("gridckpt", "budget");
    let m = marker("gridckpt-budget");
    let job = ckpt_job(&g, &s, ["3", "1", "1"], "60", "150", &m);
    let ck = s.ck();
    wait_until(SEEN, "a complete checkpoint", || complete_generation(&ck).is_some());
    let first = slot_pid(&m, 1, &[]);
    kill9(first);
    job.wait_for(SEEN, "the restart", |l| l.iter().any(|l| l.text.contains("restart 1 of 1")).then_some(()));
    // The restarted rank 1, killed in its turn.
    kill9(slot_pid(&m, 1, &[first]));
    let e = job.end(T);
    assert_ne!(e.code, 0, "{}", e.text);
    assert!(
        e.text.contains("the job cannot restart: rank 1 lost every replica and the restart budget is spent")
            && e.text.contains("--max-restarts 1"),
        "{}",
        e.text
    );
    assert!(checksum(&e.stdout).is_none(), "{}", e.text);
    assert!(e.text.contains("--resume"), "the checkpoints are named for a resume:\n{}", e.text);
    assert!(wait_no_processes(&m, Duration::from_secs(10)).is_empty(), "processes left");
}

#[test]
fn a_grid_job_whose_launcher_was_killed_resumes_from_its_last_checkpoint() {
    let want = fault_free(3, "30");
    let g = grid("resume");
    let s = Scratch::new("gridckpt", "resume");
    let m = marker("gridckpt-resume");
    let job = ckpt_job(&g, &s, ["3", "1", "0"], "30", "150", &m);
    let ck = s.ck();
    wait_until(SEEN, "a complete checkpoint and lines shown", || {
        complete_generation(&ck).is_some_and(|g| g >= 2) && lines_of(&job.stdout(), 0).len() >= 9
    });
    // The submitter is lost: the launcher first, then the job's processes.
    let launcher_pid = job.pid();
    kill9(launcher_pid);
    for p in processes_with(&m).into_iter().filter(|&p| p != launcher_pid) {
        let _ = try_kill9(p);
    }
    assert!(wait_no_processes(&m, Duration::from_secs(20)).is_empty());
    let first = job.end(T);
    assert!(checksum(&first.stdout).is_none(), "the job ended before its end:\n{}", first.text);

    let o = run_cmd(&mut submit(&g, &s.0, &["--resume", ck.to_str().unwrap()]), T);
    o.assert_ok();
    assert!(o.stderr.contains("resuming ") && o.stderr.contains("from checkpoint generation"), "{}", o.stderr);
    let got = format!("{}{}", first.stdout, o.stdout);
    assert_same_output(&got, &want, 3, &format!("{}\n{}\n{}", first.text, o.stdout, o.stderr));
    assert!(!ck.join("launcher.pid").exists(), "the lock is released at the end");
}

/// A fault of the soak's random failure process.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// kill -9 of a rank's process.
    Kill,
    /// SIGSTOP for good.
    Freeze,
    /// SIGSTOP, then SIGCONT after this many milliseconds.
    FreezeResume(u64),
    /// kill -9 of the peer daemon of a host that runs a rank (never the submitter's).
    Daemon,
}

/// The soak's checkpoint part (`bench/soak.sh`, part `checkpoints`): `P2PMPI_CKPT_TRIALS`
/// trials (default 1) of a job of `P2PMPI_CKPT_JOB_SECONDS` seconds (default 20) on a local
/// grid of 8 peers, `-n 4`, a checkpoint every 10 steps of 100 ms, under a random failure
/// process (a fault every `P2PMPI_CKPT_FAULT_SECONDS`, default a third of the job, on
/// average: kill -9 of a rank, SIGSTOP for good, SIGSTOP then SIGCONT, a peer daemon killed);
/// with `P2PMPI_CKPT_CONTROL=1` each trial's faults are also dealt to the same job without
/// checkpoints. `P2PMPI_CKPT_SEED` (default 41) seeds the first trial. Prints the counts;
/// fails if a trial with checkpoints did not finish with the fault-free checksum.
#[test]
fn checkpoint_soak_on_a_local_grid() {
    let var = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let trials = var("P2PMPI_CKPT_TRIALS", 1);
    let secs = var("P2PMPI_CKPT_JOB_SECONDS", 20);
    let every = var("P2PMPI_CKPT_FAULT_SECONDS", (secs / 3).max(1));
    let control = std::env::var("P2PMPI_CKPT_CONTROL").is_ok_and(|v| v == "1");
    let seed = var("P2PMPI_CKPT_SEED", 41);
    let steps = (secs * 10).to_string();
    let want = {
        let prog = example("ckpt_iter");
        let o = run(&["--local", "-n", "4", prog.to_str().unwrap(), &steps, "10", "0"], T);
        o.assert_ok();
        checksum(&o.stdout).expect("a checksum")
    };
    let (mut good, mut control_failed) = (0, 0);
    let mut failures = Vec::new();
    for t in 0..trials {
        let seed = seed + t;
        match soak_trial(seed, &steps, every, true, &want) {
            Ok((faults, restarts)) => {
                good += 1;
                eprintln!(
                    "checkpoints trial {seed}: finished with the right checksum after {faults:?} ({restarts} restart(s))"
                );
            }
            Err(e) => {
                eprintln!("checkpoints trial failed (seed {seed}): {e}");
                failures.push(seed);
            }
        }
        if control {
            match soak_trial(seed, &steps, every, false, &want) {
                Ok(_) => eprintln!("control trial {seed}: finished without checkpoints"),
                Err(e) => {
                    control_failed += 1;
                    eprintln!("control trial {seed}: failed: {}", e.lines().next().unwrap_or(""));
                }
            }
        }
    }
    println!("checkpoints: {good} of {trials} trials finished with the right checksum");
    if control {
        println!("control: {control_failed} of {trials} trials without checkpoints failed");
    }
    assert!(failures.is_empty(), "trials {failures:?} failed");
}

/// One soak trial on a fresh grid of 8 peers: the job (with checkpoints and `--max-restarts
/// 20`, or without) under faults at random moments (exponential gaps of mean `every` s,
/// seeded). Ok with the faults dealt and the restarts made if the job printed the checksum
/// `want`.
fn soak_trial(seed: u64, steps: &str, every: u64, ckpt: bool, want: &str) -> Result<(Vec<Fault>, usize), String> {
    let mut rng = p2pmpi::random::Rand::from_parts(seed, 41, 7);
    let name = format!("soak{}{seed}", if ckpt { "c" } else { "n" });
    let unconfined = ["--set", "JOB_LANDLOCK_ABI=0", "--set", "ALLOW_UNCONFINED_JOBS=yes"];
    let g = TestGrid::start(&name, 8, &[&["--procs", "1"][..], &unconfined[..]].concat());
    g.wait_hosts(1, 7);
    let s = Scratch::new("ckptsoak", &name);
    let m = marker(&name);
    let prog = example("ckpt_iter");
    let ck = s.ck();
    // A detector that a loaded 2-core machine does not fool (suspicion after about 4 s): a
    // faster one took processes restarting from a checkpoint for dead, again and again.
    let mut args = vec!["-n", "4", "--t-gossip", "500", "--t-max-hang", "1000"];
    if ckpt {
        args.extend(["--checkpoint-dir", ck.to_str().unwrap(), "--max-restarts", "20"]);
    }
    // The control takes no checkpoint (its checksum is the same).
    let ckpt_every = if ckpt { "10" } else { "0" };
    args.extend([prog.to_str().unwrap(), steps, ckpt_every, "100", "normal", "0", &m]);
    let job = Job::spawn(&mut submit(&g, &s.0, &args));
    let mut dealt = Vec::new();
    let mut resumes = Vec::new();
    loop {
        // Exponential gaps: the scenario's failure process.
        let u = (rng.range(1, 1_000_000) as f64) / 1e6;
        let gap = Duration::from_secs_f64(-(every as f64) * u.ln());
        let until = std::time::Instant::now() + gap;
        while std::time::Instant::now() < until && job_running(&job) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if !job_running(&job) {
            break;
        }
        let f = match rng.range(0, 4) {
            0 => Fault::Kill,
            1 => Fault::Freeze,
            2 => Fault::FreezeResume(rng.range(300, 3000)),
            _ => Fault::Daemon,
        };
        // A rank's process (rank 0, here on the submitter, for all but a daemon's loss).
        let procs: Vec<(u32, usize)> = processes_with(&m)
            .into_iter()
            .filter(|&p| p != job.pid() && !is_dead(p) && !is_stopped(p))
            .filter_map(|p| Some((p, env_of(p, "P2PMPI_RANK")?.parse().ok()?)))
            .filter(|&(_, slot)| !matches!(f, Fault::Daemon) || slot != 0)
            .collect();
        if procs.is_empty() {
            continue;
        }
        let (pid, _) = procs[rng.range(0, procs.len() as u64) as usize];
        let done = match f {
            Fault::Kill => try_kill9(pid).map(|_| ()),
            Fault::Freeze => try_freeze(pid).map(|_| ()),
            Fault::FreezeResume(ms) => try_freeze(pid).map(|_| {
                resumes.push(std::thread::spawn(move || {
                    // The scenario: frozen this long, then resumed.
                    std::thread::sleep(Duration::from_millis(ms));
                    let _ = try_thaw(pid);
                }))
            }),
            Fault::Daemon => kill_daemon_of(&g, pid),
        };
        if done.is_ok() {
            dealt.push(f);
        }
    }
    for r in resumes {
        let _ = r.join();
    }
    let e = job.end(Duration::from_secs(30));
    for p in processes_with(&m) {
        let _ = try_kill9(p);
    }
    match checksum(&e.stdout) {
        Some(c) if c == want && e.code == 0 => {
            let dup = duplicated(&e.stdout);
            if dup.is_empty() {
                Ok((dealt, e.text.lines().filter(|l| l.starts_with("p2pmpirun: restart ")).count()))
            } else {
                Err(format!("lines shown twice after {dealt:?}: {dup:?}"))
            }
        }
        _ => Err(format!("after {dealt:?}: exit {}:\n{}", e.code, tail(&e.text, 15))),
    }
}

fn job_running(job: &Job) -> bool {
    !is_dead(job.pid())
}

/// Lines shown more than once.
fn duplicated(stdout: &str) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    stdout.lines().filter(|l| !seen.insert(*l)).map(str::to_string).collect()
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Kills (kill -9) the peer daemon of the host where process `pid` runs (its bind address).
fn kill_daemon_of(g: &TestGrid, pid: u32) -> Result<(), String> {
    let ip = env_of(pid, "P2PMPI_BIND").ok_or("no bind address")?;
    for i in 2..=8 {
        let state = std::fs::read_to_string(g.home(i).join("mpd.json")).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&state).unwrap_or_default();
        if v["ip"].as_str() == Some(ip.as_str()) {
            let mpd = v["pid"].as_u64().ok_or("no pid")? as u32;
            return try_kill9(mpd).map(|_| ());
        }
    }
    Err(format!("no peer daemon on {ip}"))
}

/// Every file below `dir` (none when it does not exist).
fn files_below(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// The default on the grid: no `--checkpoint-dir`, the jobs confined (Landlock, as peers run
/// them unless told otherwise); the processes keep their checkpoints on K = 2 of the job's
/// other hosts through their FT, and the restart reads the last complete generation from them.
#[test]
fn a_confined_grid_job_restarts_from_checkpoints_kept_on_its_peers() {
    let want = fault_free(3, "30");
    let g = TestGrid::start("peers", 4, &["--procs", "1"]);
    g.wait_hosts(1, 3);
    let s = Scratch::new("gridckpt", "peers");
    let m = marker("gridckpt-peers");
    let prog = example("ckpt_iter");
    let job = Job::spawn(&mut submit(
        &g,
        &s.0,
        &["-n", "3", "--max-restarts", "2", prog.to_str().unwrap(), "30", "4", "150", "normal", "0", &m],
    ));
    // Steps 8 and on shown by every rank: generation 2 (step 8) is complete.
    wait_until(SEEN, "step 10 shown by every rank", || (0..3).all(|r| lines_of(&job.stdout(), r).len() >= 11));
    let homes: usize = (1..=4).map(|p| files_below(&g.home(p).join("checkpoints")).len()).sum();
    assert!(homes > 0, "no checkpoint on any peer");
    let dir = files_below(&s.0.join("p2pmpi-checkpoints"));
    assert!(
        dir.iter().all(|f| !f.to_string_lossy().contains("gen")),
        "pieces in the launcher's directory, not on the peers: {dir:?}"
    );
    kill9(slot_pid(&m, 1, &[]));
    let e = job.end(T);
    assert_eq!(e.code, 0, "{}", e.text);
    assert!(
        e.text.contains("restart 1 of 2: rank 1 (")
            && e.text.contains("restarting every rank from checkpoint generation"),
        "{}",
        e.text
    );
    assert_same_output(&e.stdout, &want, 3, &e.text);
    assert!(wait_no_processes(&m, Duration::from_secs(10)).is_empty(), "processes left");
}
