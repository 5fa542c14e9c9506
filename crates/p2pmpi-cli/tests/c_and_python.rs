//! C and Python programs of MPICH's ABI under `p2pmpirun`, unchanged and with no setting of
//! the user (issue 37): the launcher finds p2pmpi's library (built next to it) and puts it first
//! on every rank's library path, locally and on a grid (staged); replicated jobs survive a
//! killed master or replica and print every line once; Python runs alike in every replica; a
//! program that loads another MPI library is stopped, named; `p2pmpi mpicc` builds programs
//! that run, and `p2pmpi abi-check` lists what a program imports that the library only stubs.
#![forbid(unsafe_code)]

mod common;

use common::abi::{build_library, c_program, profile_dir, system_venv, venv};
use common::grid::{TestGrid, LIMIT};
use common::job::Job;
use common::{env_of, kill9, launcher, p2pmpi_tool, processes_with, require_tools, run_cmd, under_ci, Outcome};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A fast failure detector: T_gossip 100 ms, no extra hang time.
const FD: [&str; 4] = ["--t-gossip", "100", "--t-max-hang", "0"];

/// `p2pmpirun ARGS` as a user without any setting types it: no `LD_LIBRARY_PATH`, no
/// `P2PMPI_ABI_LIB`, no peer daemon (the job runs on this host).
fn plain(args: &[&str]) -> Command {
    let mut cmd = Command::new(launcher());
    cmd.args(args)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("P2PMPI_ABI_LIB")
        .env_remove("PYTHONHASHSEED")
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-abi-launch-tests");
    cmd
}

/// The lines `steps K` prints on N ranks, sorted (step s: the sum over the ranks of rank + s).
fn steps_output(n: usize, k: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..k)
        .flat_map(|s| (0..n).map(move |r| format!("step {s} rank {r} of {n}: sum {}", n * (n - 1) / 2 + n * s)))
        .collect();
    v.sort();
    v
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// Waits until `count` processes carry `marker`; slot → pid.
fn slots_of(marker: &str, count: usize) -> HashMap<usize, u32> {
    let mut found = HashMap::new();
    common::wait_until(Duration::from_secs(30), &format!("{count} processes of the job"), || {
        found = processes_with(marker)
            .into_iter()
            .filter_map(|pid| env_of(pid, "P2PMPI_RANK").and_then(|s| s.parse().ok()).map(|s| (s, pid)))
            .collect();
        found.len() >= count
    });
    found
}

/// Whether the C tests run (they need Debian's `mpicc.mpich`); builds the library.
fn with_mpich() -> bool {
    if !require_tools(&["mpicc.mpich"], "(Debian's MPICH builds the C programs: apt install mpich libmpich-dev)") {
        return false;
    }
    build_library();
    true
}

fn mpich_program(name: &str) -> PathBuf {
    c_program(name, name, &["mpicc.mpich"], &[])
}

#[test]
fn a_program_built_by_mpicc_mpich_runs_unchanged_under_plain_p2pmpirun() {
    if !with_mpich() {
        return;
    }
    let prog = mpich_program("steps");
    let o = run_cmd(plain(&["--local", "-n", "4"]).arg(&prog).args(["3", "0"]), LIMIT);
    o.assert_ok();
    assert_eq!(sorted_lines(&o.stdout), steps_output(4, 3), "{}", o.stderr);
    // The library missing: the job does not start, and the error says where it was looked for.
    let missing = "/nonexistent/p2pmpi-abi-launch-tests/libp2pmpi_abi.so";
    let o = run_cmd(plain(&["--local", "-n", "2"]).arg(&prog).env("P2PMPI_ABI_LIB", missing), LIMIT);
    assert_eq!(o.code(), Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("needs libmpich.so.12") && o.stderr.contains(missing), "{}", o.stderr);
}

#[test]
fn a_replicated_c_job_survives_its_killed_master_and_prints_every_line_once() {
    if !with_mpich() {
        return;
    }
    let prog = mpich_program("steps");
    let marker = common::marker("c-takeover");
    let job = Job::spawn(plain(&["--local", "-n", "3", "-r", "2"]).args(FD).arg(&prog).args(["30", "30", &marker]));
    let slots = slots_of(&marker, 6);
    job.wait_for(LIMIT, "step 4 printed", |l| l.iter().any(|l| l.text.starts_with("step 4 ")).then_some(()));
    // Slot 2 is rank 1's first replica, its master: its successor takes over where the shown
    // output stopped (standard output is line-buffered from MPI_Init).
    kill9(slots[&2]);
    let e = job.end(LIMIT);
    assert_eq!(e.code, 0, "{}", e.text);
    assert_eq!(sorted_lines(&e.stdout), steps_output(3, 30), "a line lost or printed twice:\n{}", e.text);
    assert!(e.text.contains("rank 1 replica 0"), "no report of the killed master:\n{}", e.text);
    assert!(e.text.contains("rank 1 goes on with 1 replica(s)"), "{}", e.text);
}

const PYTHON: &str = r#"
import os, sys, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
r = comm.Get_rank()
for s in range(20):
    total = comm.allreduce(r + s)
    seed, unbuffered = os.environ["PYTHONHASHSEED"], os.environ["PYTHONUNBUFFERED"]
    print(f"step {s} rank {r}: sum {total} seed {seed} unbuffered {unbuffered} lib {MPI.Get_library_version().split()[0]}")
    time.sleep(0.04)
"#;

#[test]
fn an_mpi4py_program_runs_replicated_through_a_killed_replica() {
    if !require_tools(&["python3"], "(mpi4py's wheel runs in a virtual environment)") {
        return;
    }
    build_library();
    let dir = match venv() {
        Ok(d) => d,
        Err(why) => {
            assert!(!under_ci(), "mpi4py's wheel is needed under CI: {why}");
            eprintln!("SKIPPED: an_mpi4py_program_runs_replicated_through_a_killed_replica: {why}");
            return;
        }
    };
    let marker = common::marker("mpi4py");
    let script = profile_dir().join(format!("{marker}.py"));
    std::fs::write(&script, PYTHON).unwrap();
    let py = dir.join("bin/python3");
    let job = Job::spawn(plain(&["--local", "-n", "3", "-r", "2"]).args(FD).arg(&py).arg(&script));
    let slots = slots_of(&marker, 6);
    // One PYTHONHASHSEED for every process of the job, replicas included; unbuffered output.
    let seeds: Vec<Option<String>> = slots.values().map(|&p| env_of(p, "PYTHONHASHSEED")).collect();
    assert!(seeds[0].is_some() && seeds.iter().all(|s| *s == seeds[0]), "{seeds:?}");
    let seed = seeds[0].clone().unwrap();
    job.wait_for(LIMIT, "step 3 printed", |l| l.iter().any(|l| l.text.starts_with("step 3 ")).then_some(()));
    // Slot 3: rank 1's second replica.
    kill9(slots[&3]);
    let e = job.end(LIMIT);
    let _ = std::fs::remove_file(&script);
    assert_eq!(e.code, 0, "{}", e.text);
    let mut want: Vec<String> = (0..20)
        .flat_map(|s| {
            let seed = seed.clone();
            (0..3).map(move |r| format!("step {s} rank {r}: sum {} seed {seed} unbuffered 1 lib p2pmpi", 3 + 3 * s))
        })
        .collect();
    want.sort();
    assert_eq!(sorted_lines(&e.stdout), want, "{}", e.text);
    assert!(e.text.contains("rank 1 replica 1"), "no report of the killed replica:\n{}", e.text);
}

/// The directory of Debian's `libmpich.so.12`.
fn debian_mpich_dir() -> PathBuf {
    ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"]
        .iter()
        .map(PathBuf::from)
        .find(|d| d.join("libmpich.so.12").exists())
        .expect("mpicc.mpich is installed, but no libmpich.so.12 was found")
}

#[test]
fn a_program_that_loads_another_mpi_library_is_stopped_named() {
    if !with_mpich() {
        return;
    }
    let rpath = format!("-Wl,-rpath,{}", debian_mpich_dir().display());
    let prog = c_program("alone", "alone-rpath", &["mpicc.mpich"], &[&rpath, "-Wl,--disable-new-dtags"]);
    // Seen in the program before it starts: refused.
    let o = run_cmd(plain(&["--local", "-n", "2"]).arg(&prog), LIMIT);
    assert_eq!(o.code(), Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("would load") && o.stderr.contains("libmpich.so.12"), "{}", o.stderr);
    assert!(o.stderr.contains("RPATH"), "{}", o.stderr);
    // Started by a shell (the launcher cannot see through it): the rank that mapped Debian's
    // library is stopped, named, long before the program's own minute of waiting.
    let exec = format!("exec {}", prog.display());
    let o: Outcome = run_cmd(&mut plain(&["--local", "-n", "2", "sh", "-c", &exec]), Duration::from_secs(30));
    assert!(!o.status.success(), "{}", o.stderr);
    assert!(o.stderr.contains("loaded another MPI library") && o.stderr.contains("libmpich.so"), "{}", o.stderr);
    assert!(o.stderr.contains("rank 0") || o.stderr.contains("rank 1"), "{}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(20), "stopped after {:?}", o.elapsed);
}

#[test]
fn p2pmpi_mpicc_builds_a_program_that_runs() {
    if !require_tools(&["gcc"], "(p2pmpi mpicc runs gcc)") {
        return;
    }
    build_library();
    let tool = p2pmpi_tool();
    let mpicc = [tool.to_str().unwrap(), "mpicc"];
    let prog = c_program("steps", "steps-p2pmpi-mpicc", &mpicc, &[]);
    let o = run_cmd(plain(&["--local", "-n", "3"]).arg(&prog).args(["2", "0"]), LIMIT);
    o.assert_ok();
    assert_eq!(sorted_lines(&o.stdout), steps_output(3, 2), "{}", o.stderr);
}

#[test]
fn abi_check_lists_the_imported_functions_that_are_only_stubs() {
    if !with_mpich() {
        return;
    }
    let tool = p2pmpi_tool();
    let check = |p: &Path| run_cmd(Command::new(&tool).arg("abi-check").arg(p), LIMIT);
    let o = check(&mpich_program("steps"));
    assert_eq!(o.code(), Some(0), "{}{}", o.stdout, o.stderr);
    assert!(!o.stdout.contains("stub") && !o.stdout.contains("absent"), "{}", o.stdout);
    // Ports of dynamic processes: declared by MPICH's header, a stub in p2pmpi's library.
    let ports = mpich_program("ports");
    let o = check(&ports);
    assert_eq!(o.code(), Some(1), "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.lines().any(|l| l.trim() == "MPI_Open_port: stub (fails with MPI_ERR_UNSUPPORTED_OPERATION)"));
    assert!(!o.stdout.contains("MPI_Init:"), "{}", o.stdout);
}

#[test]
fn a_c_program_runs_replicated_on_a_local_grid_with_the_library_staged() {
    if !with_mpich() {
        return;
    }
    let prog = mpich_program("steps");
    let g = TestGrid::start("abi-launch", 2, &["--procs", "3"]);
    let o = g.run(&["-n", "3", "-r", "2", prog.to_str().unwrap(), "3", "0"]);
    o.assert_ok();
    assert_eq!(sorted_lines(&o.stdout), steps_output(3, 3), "{}", o.stderr);
}

#[test]
fn a_c_program_spawns_children_on_a_local_grid_with_the_library_staged_for_them() {
    if !with_mpich() {
        return;
    }
    let prog = mpich_program("spawner");
    let g = TestGrid::start("abi-spawn", 2, &["--procs", "2"]);
    let o = g.run(&["-n", "2", prog.to_str().unwrap()]);
    o.assert_ok();
    let want =
        ["child 0 of 2: got 1", "child 1 of 2: got 2", "parent 0: child answered 10", "parent 1: child answered 20"];
    assert_eq!(sorted_lines(&o.stdout), want.map(String::from).to_vec(), "{}", o.stderr);
}

#[test]
fn a_replicated_c_job_on_a_local_grid_under_kmonitor_survives_a_killed_replica() {
    if !with_mpich() {
        return;
    }
    let prog = mpich_program("steps");
    let g = TestGrid::start("abi-km", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let marker = common::marker("c-kmonitor");
    let mut cmd = Command::new(launcher());
    cmd.args(["-n", "3", "-r", "2", "--fd", "kmonitor", "--t-hb", "200", "--t-to", "600"])
        .arg(&prog)
        .args(["30", "30", &marker])
        .env("P2PMPI_HOME", g.home(1))
        .env_remove("P2PMPI_CONF_FILE");
    let job = Job::spawn(&mut cmd);
    let slots = slots_of(&marker, 6);
    job.wait_for(LIMIT, "step 4 printed", |l| l.iter().any(|l| l.text.starts_with("step 4 ")).then_some(()));
    // Slot 5: rank 2's second replica, on a peer of the grid (not the submitter's rank 0).
    kill9(slots[&5]);
    let e = job.end(LIMIT);
    assert_eq!(e.code, 0, "{}", e.text);
    assert_eq!(sorted_lines(&e.stdout), steps_output(3, 30), "a line lost or printed twice:\n{}", e.text);
    assert!(e.text.contains("rank 2 replica 1"), "no report of the killed replica:\n{}", e.text);
}

#[test]
fn an_mpi4py_program_runs_on_a_local_grid_replicated_through_a_killed_replica() {
    if !require_tools(&["/usr/bin/python3"], "(the system's Python: apt install python3-venv)") {
        return;
    }
    build_library();
    let dir = system_venv().unwrap_or_else(|why| panic!("mpi4py's wheel (pinned, from PyPI) is needed: {why}"));
    // The hosts' confined processes read the environment (`JOB_READ_PATHS`, as a grid member
    // would set for a shared one), besides the system's interpreter.
    let py = dir.join("bin/python3");
    let g = TestGrid::start("abi-py", 3, &["--procs", "2"]);
    for peer in 1..=3 {
        // Added to the paths the test grid already lets its jobs read.
        let conf = std::fs::read_to_string(g.conf(peer)).unwrap();
        let given = conf.lines().rev().find_map(|l| l.strip_prefix("JOB_READ_PATHS=")).unwrap_or("");
        let venv = dir.display().to_string();
        let all: Vec<&str> = [given, &venv].into_iter().filter(|p| !p.is_empty()).collect();
        g.reconfigure(peer, &[&format!("JOB_READ_PATHS={}", all.join(","))]);
    }
    g.wait_hosts(1, 2);
    let marker = common::marker("py-grid");
    let script = profile_dir().join(format!("{marker}.py"));
    std::fs::write(&script, PYTHON).unwrap();
    let mut cmd = Command::new(launcher());
    cmd.args(["-n", "3", "-r", "2"]).arg(&py).arg(&script).env("P2PMPI_HOME", g.home(1)).env_remove("P2PMPI_CONF_FILE");
    let job = Job::spawn(&mut cmd);
    job.wait_for(LIMIT, "step 3 printed", |l| l.iter().any(|l| l.text.starts_with("step 3 ")).then_some(()));
    // The interpreter's script for the hosts: there while the job runs, removed after it.
    let wrapper = std::env::temp_dir().join(format!("p2pmpi-python-{}", job.pid()));
    assert!(wrapper.join("python3").is_file(), "no script for the hosts at {}", wrapper.display());
    let slots = slots_of(&marker, 6);
    // Slot 5: rank 2's second replica, on a peer of the grid.
    kill9(slots[&5]);
    let e = job.end(LIMIT);
    let _ = std::fs::remove_file(&script);
    assert_eq!(e.code, 0, "{}", e.text);
    assert!(!wrapper.exists(), "{} left behind", wrapper.display());
    let lines = sorted_lines(&e.stdout);
    assert_eq!(lines.len(), 60, "every step of every rank printed once:\n{}", e.text);
    for s in 0..20 {
        for r in 0..3 {
            let want = format!("step {s} rank {r}: sum {} seed ", 3 + 3 * s);
            assert!(
                lines.iter().any(|l| l.starts_with(&want) && l.ends_with("unbuffered 1 lib p2pmpi")),
                "{want}\n{}",
                e.text
            );
        }
    }
    let seeds: std::collections::BTreeSet<&str> =
        lines.iter().filter_map(|l| l.split(" seed ").nth(1)?.split(' ').next()).collect();
    assert_eq!(seeds.len(), 1, "one PYTHONHASHSEED on every host: {seeds:?}");
    assert!(e.text.contains("rank 2 replica 1"), "no report of the killed replica:\n{}", e.text);
}

/// Runs `cmd` (a compiler), failing the test with its words when it fails.
fn build(cmd: &mut Command) {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// `tests/c/NAME.c`.
fn c_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(format!("{name}.c"))
}

/// A program whose MPI calls are in its library `libin_lib.so`, built by `mpicc.mpich` with
/// `lib_flags` (an RPATH, or not) in `<dir>/lib`; the program finds it through its RUNPATH
/// `$ORIGIN/lib`. Its path.
fn program_with_mpi_in_its_library(dir: &str, lib_flags: &[&str]) -> PathBuf {
    let dir = profile_dir().join("p2pmpi-cli-c").join(format!("{dir}-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    build(
        Command::new("mpicc.mpich")
            .args(["-shared", "-fPIC", "-Wall", "-Werror"])
            .args(lib_flags)
            .arg("-o")
            .arg(dir.join("lib/libin_lib.so"))
            .arg(c_source("in_lib")),
    );
    let prog = dir.join("prog");
    build(
        Command::new("gcc")
            .args(["-Wall", "-Werror", "-o"])
            .arg(&prog)
            .arg(c_source("in_lib_main"))
            .arg(format!("-L{}", dir.join("lib").display()))
            .args(["-lin_lib", "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN/lib"]),
    );
    prog
}

#[test]
fn a_library_with_an_rpath_to_mpich_or_an_ld_preload_of_it_is_refused_before_any_rank_starts() {
    if !with_mpich() || !require_tools(&["gcc"], "(the programs' main parts are built by gcc)") {
        return;
    }
    let mpich = debian_mpich_dir();
    // The program's own search path is a RUNPATH (searched after ours); its library's is an
    // RPATH to Debian's MPICH, and the loader searches it first for that library's needs.
    let rpath = format!("-Wl,-rpath,{}", mpich.display());
    let prog = program_with_mpi_in_its_library("in-lib-rpath", &["-Wl,--disable-new-dtags", &rpath]);
    let o = run_cmd(plain(&["--local", "-n", "2"]).arg(&prog), LIMIT);
    assert_eq!(o.code(), Some(2), "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("would load another MPI library") && o.stderr.contains("libmpich.so.12"), "{}", o.stderr);
    assert!(o.stderr.contains("the RPATH of") && o.stderr.contains("libin_lib.so"), "{}", o.stderr);
    assert!(o.stderr.contains("--enable-new-dtags"), "{}", o.stderr);
    assert!(o.stdout.is_empty(), "no rank ran: {}", o.stdout);
    assert!(o.elapsed < Duration::from_secs(10), "refused after {:?}", o.elapsed);
    // The same library with a RUNPATH: p2pmpi's library is found first, the job runs.
    let runpath = format!("-Wl,-rpath,{}", mpich.display());
    let fixed = program_with_mpi_in_its_library("in-lib-runpath", &["-Wl,--enable-new-dtags", &runpath]);
    let o = run_cmd(plain(&["--local", "-n", "2"]).arg(&fixed), LIMIT);
    o.assert_ok();
    assert_eq!(sorted_lines(&o.stdout), ["rank 0 of 2", "rank 1 of 2"], "{}", o.stderr);
    // LD_PRELOAD of Debian's library (given with -x): refused, named.
    let steps = mpich_program("steps");
    let preload = format!("LD_PRELOAD={}", mpich.join("libmpich.so.12").display());
    let o = run_cmd(plain(&["--local", "-n", "2", "-x", &preload]).arg(&steps).args(["1", "0"]), LIMIT);
    assert_eq!(o.code(), Some(2), "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("would load another MPI library") && o.stderr.contains("LD_PRELOAD"), "{}", o.stderr);
    // abi-check says what p2pmpirun would.
    let tool = p2pmpi_tool();
    let o = run_cmd(Command::new(&tool).arg("abi-check").arg(&prog).env_remove("LD_LIBRARY_PATH"), LIMIT);
    assert_eq!(o.code(), Some(1), "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("refused by p2pmpirun") && o.stdout.contains("the RPATH of"), "{}", o.stdout);
    let o = run_cmd(Command::new(&tool).arg("abi-check").arg(&fixed).env_remove("LD_LIBRARY_PATH"), LIMIT);
    assert_eq!(o.code(), Some(0), "{}{}", o.stdout, o.stderr);
}

#[test]
fn a_rank_that_does_not_join_is_named_with_its_likely_cause_before_the_start_up_time_out() {
    if !with_mpich() {
        return;
    }
    let prog = mpich_program("late");
    // Rank 1 exits without initializing MPI: reported at once, with the likely cause.
    let o = run_cmd(plain(&["--local", "-n", "2"]).arg(&prog).arg("exit"), LIMIT);
    assert!(!o.status.success(), "{}", o.stderr);
    assert!(o.stderr.contains("rank 1 (pid") && o.stderr.contains("exited without initializing MPI"), "{}", o.stderr);
    assert!(o.stderr.contains("likely cause: its process loaded another MPI library"), "{}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(10), "stopped after {:?}", o.elapsed);
    // Rank 1 runs without joining: named 5 s after rank 0 joined, long before the start-up
    // time-out, which then stops the job.
    let o = run_cmd(plain(&["--local", "-n", "2", "--startup-timeout", "9"]).arg(&prog), LIMIT);
    assert_eq!(o.code(), Some(1), "{}", o.stderr);
    let notice = "rank 1 (pid ";
    let at = o.stderr.find(notice).unwrap_or_else(|| panic!("no notice: {}", o.stderr));
    let line = o.stderr[at..].lines().next().unwrap();
    assert!(line.contains("runs but has not initialized MPI 5 s after the first process did"), "{line}");
    assert!(line.contains("likely cause") && line.contains("--startup-timeout (9 s)"), "{line}");
    let timed_out = o.stderr.find("start-up timed out after 9 s: rank(s) 1 never initialized MPI");
    assert!(timed_out.is_some_and(|t| t > at), "{}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(30), "stopped after {:?}", o.elapsed);
}

#[test]
fn a_grid_job_that_would_load_another_mpi_library_is_refused_by_the_launcher_or_by_its_host() {
    if !with_mpich() {
        return;
    }
    let mpich = debian_mpich_dir();
    let g = TestGrid::start("abi-foreign", 2, &["--procs", "2"]);
    // Seen by the launcher (an RPATH to Debian's MPICH): refused before anything is reserved.
    let rpath = format!("-Wl,-rpath,{}", mpich.display());
    let prog = c_program("alone", "alone-rpath", &["mpicc.mpich"], &[&rpath, "-Wl,--disable-new-dtags"]);
    let o = g.run(&["-n", "2", prog.to_str().unwrap()]);
    assert_eq!(o.code(), Some(2), "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("would load another MPI library") && o.stderr.contains("the RPATH of"), "{}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(10), "refused after {:?}", o.elapsed);
    // Seen by the hosts only: an RPATH of $ORIGIN, and Debian's library staged beside the
    // program (-l). Here, rank 0 finds none there and loads p2pmpi's; the hosts' peer daemons
    // refuse to start the others, saying why.
    let prog = c_program("alone", "alone-origin", &["mpicc.mpich"], &["-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN"]);
    assert!(!prog.with_file_name("libmpich.so.12").exists());
    let beside = profile_dir().join("p2pmpi-cli-c").join(format!("mpich-copy-{}", std::process::id()));
    std::fs::create_dir_all(&beside).unwrap();
    let lib = beside.join("libmpich.so.12");
    let _ = std::fs::remove_file(&lib);
    std::os::unix::fs::symlink(mpich.join("libmpich.so.12"), &lib).unwrap();
    let o = g.run(&["-n", "2", "-l", lib.to_str().unwrap(), prog.to_str().unwrap()]);
    assert!(!o.status.success(), "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("refused the launch: alone-origin would load another MPI library"), "{}", o.stderr);
    assert!(o.stderr.contains("libmpich.so.12") && o.stderr.contains("the RPATH of"), "{}", o.stderr);
    assert!(!o.stdout.contains("size 1"), "no rank ran alone: {}", o.stdout);
    assert!(o.elapsed < Duration::from_secs(40), "stopped after {:?}", o.elapsed);
    let _ = std::fs::remove_dir_all(&beside);
}

#[test]
fn a_rank_that_dlopens_another_mpi_library_is_stopped_named_locally_and_by_its_host_on_a_grid() {
    if !with_mpich() {
        return;
    }
    let prog = mpich_program("dlopens");
    let mpich = debian_mpich_dir().join("libmpich.so.12");
    let mpich = mpich.to_str().unwrap();
    // Here: the launcher reads the ranks' memory maps.
    let o = run_cmd(plain(&["--local", "-n", "2"]).arg(&prog).arg(mpich), LIMIT);
    assert!(!o.status.success(), "{}", o.stderr);
    assert!(
        o.stderr.contains("rank 1: it loaded another MPI library") && o.stderr.contains("libmpich.so"),
        "{}",
        o.stderr
    );
    assert!(o.elapsed < Duration::from_secs(15), "stopped after {:?}", o.elapsed);
    // On a grid: rank 1's peer daemon does, stops it and says why, long before the start-up
    // time-out.
    let g = TestGrid::start("abi-dlopen", 2, &["--procs", "2"]);
    let o = g.run(&["-n", "2", prog.to_str().unwrap(), mpich]);
    assert!(!o.status.success(), "{}", o.stderr);
    let said = "p2pmpi: rank 1 stopped: it loaded another MPI library";
    assert!(o.stderr.contains(said) && o.stderr.contains("libmpich.so"), "{}", o.stderr);
    assert!(o.stderr.contains("rank 1 (pid"), "the launcher names the rank: {}", o.stderr);
    assert!(!o.stderr.contains("start-up timed out"), "{}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(30), "stopped after {:?}", o.elapsed);
}
