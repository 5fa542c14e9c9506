//! Jobs run through the real `p2pmpirun` with real processes and sockets.
#![forbid(unsafe_code)]

mod common;
use common::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

fn checks(n: usize, mode: &str) -> Outcome {
    let prog = example("p2p_checks");
    let n = n.to_string();
    run(&["-n", &n, prog.to_str().unwrap(), mode], T)
}

#[test]
fn pi_on_four_processes() {
    let o = run(&["-n", "4", example("pi").to_str().unwrap()], T);
    o.assert_ok();
    assert!(o.stdout.contains("Pi is approximately 3.14159265"), "{}", o.stdout);
    let err: f64 = o.stdout.lines().find_map(|l| l.strip_prefix("Error is ")).unwrap().trim().parse().unwrap();
    assert!(err < 1e-10);
}

#[test]
fn pi_runs_without_launcher_as_one_process() {
    let o = run_cmd(&mut std::process::Command::new(example("pi")), T);
    o.assert_ok();
    assert!(o.stdout.contains("Pi is approximately 3.14159265"));
}

#[test]
fn ring_of_seven() {
    let o = run(&["-n", "7", example("ring").to_str().unwrap(), "4"], T);
    o.assert_ok();
    assert!(o.stdout.contains("final token 84 (expected 84)"), "{}", o.stdout);
}

#[test]
fn point_to_point_suite_on_one_process() {
    let o = checks(1, "all");
    o.assert_ok();
    assert!(o.stdout.contains("OK truncate"));
}

#[test]
fn point_to_point_suite_on_two_processes() {
    let o = checks(2, "all");
    o.assert_ok();
    for m in [
        "order",
        "wildcard",
        "probe",
        "immediate",
        "multiple",
        "zero",
        "self",
        "sendrecv",
        "sync",
        "object",
        "datatypes",
        "truncate",
        "values",
    ] {
        assert!(o.stdout.contains(&format!("OK {m}\n")), "mode {m} missing:\n{}", o.stdout);
    }
}

#[test]
fn point_to_point_suite_on_five_processes() {
    checks(5, "all").assert_ok();
}

#[test]
fn oversubscribed_nine_processes() {
    // More processes than cores: the device must stop spinning and still make progress.
    let o = checks(9, "wildcard");
    o.assert_ok();
    let o = run(&["-n", "9", example("ring").to_str().unwrap(), "20"], T);
    o.assert_ok();
}

#[test]
fn derived_datatypes() {
    let o = run(&["-n", "3", example("derive").to_str().unwrap()], T);
    o.assert_ok();
    assert!(o.stdout.contains("derived datatypes: OK across 3 processes"));
}

#[test]
fn buffered_sends() {
    checks(3, "buffered").assert_ok();
}

#[test]
fn one_gibibyte_message() {
    let o = checks(2, "large");
    o.assert_ok();
    assert!(o.stdout.contains("large: 1024 MiB round trip"), "{}", o.stdout);
}

#[test]
fn output_is_tagged_by_rank_on_request() {
    let o = run(&["--tag-output", "-n", "2", example("p2p_checks").to_str().unwrap(), "noinit"], T);
    o.assert_ok();
    assert!(o.stdout.contains("[0] no MPI here") && o.stdout.contains("[1] no MPI here"), "{}", o.stdout);
}

#[test]
fn np_spelling_and_p2pmpi_run() {
    let prog = example("ring");
    run(&["-np", "3", prog.to_str().unwrap(), "1"], T).assert_ok();
    let o = run_cmd(std::process::Command::new(p2pmpi_tool()).args(["run", "-n", "3", prog.to_str().unwrap(), "1"]), T);
    o.assert_ok();
    assert!(o.stdout.contains("final token"));
}

#[test]
fn program_that_never_initializes_is_not_an_error() {
    let o = checks(3, "noinit");
    o.assert_ok();
    assert_eq!(o.stdout.matches("no MPI here").count(), 3);
}

#[test]
fn environment_queries() {
    let o = checks(2, "env");
    o.assert_ok();
    assert!(o.stdout.contains("MPI 3.1"), "{}", o.stdout);
}

#[test]
fn garbage_on_data_and_control_ports_is_refused_and_the_job_goes_on() {
    let o = checks(3, "garbage");
    o.assert_ok();
    assert!(o.stdout.contains("OK garbage"));
    // Every rank refused a forged opening with a wrong key and a replayed one.
    assert_eq!(
        o.stderr.matches("failed to prove the job key (wrong key or replayed opening)").count(),
        6,
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("before the connection was authenticated"), "{}", o.stderr);
    assert!(o.stderr.contains("refused a control connection"), "{}", o.stderr);
    assert_eq!(o.stderr.matches("registration does not prove the job key").count(), 3, "{}", o.stderr);
    assert_eq!(o.stdout.matches("forged detector datagrams dropped").count(), 3, "{}", o.stdout);
}

/// `--encrypt`: the point-to-point suite, and forged openings refused, over sealed
/// connections.
#[test]
fn encrypted_connections_pass_the_point_to_point_suite_and_refuse_forgeries() {
    let prog = example("p2p_checks");
    let o = run(&["--encrypt", "-n", "3", prog.to_str().unwrap(), "all"], T);
    o.assert_ok();
    assert!(o.stdout.contains("OK truncate"), "{}", o.stdout);
    let o = run(&["--encrypt", "-n", "3", prog.to_str().unwrap(), "garbage"], T);
    o.assert_ok();
    assert_eq!(o.stderr.matches("failed to prove the job key").count(), 6, "{}", o.stderr);
    let o = run(&["--encrypt", "-n", "3", "-r", "2", prog.to_str().unwrap(), "sendrecv"], T);
    o.assert_ok();
}

#[test]
fn threads_communicate_concurrently_with_threading_multiple() {
    let o = checks(3, "threads");
    o.assert_ok();
    assert!(o.stdout.contains("OK threads"));
}

#[test]
fn max_loc_and_min_loc_on_pairs() {
    for n in ["1", "4"] {
        let o = run(&["-n", n, example("p2p_checks").to_str().unwrap(), "maxloc"], T);
        o.assert_ok();
        assert!(o.stdout.contains("OK maxloc"));
    }
}

/// Issue 18: `-x` sets variables in every process, `--output-filename` writes one file per
/// rank and stream, and `-v` says why the job runs on this host.
#[test]
fn x_variables_and_output_files_on_a_local_run() {
    let dir = std::env::temp_dir().join(format!("p2pmpi-outfiles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let w = example("whereami");
    let o = run_cmd(
        std::process::Command::new(launcher())
            .args(["-v", "-n", "2", "-x", "FOO=bar baz", "-x", "FROM_HERE", "--output-filename"])
            .arg(&dir)
            .args([w.to_str().unwrap(), "--env", "FOO", "--env", "FROM_HERE"])
            .env("FROM_HERE", "here")
            .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests"),
        T,
    );
    o.assert_ok();
    assert!(
        o.stderr.contains("running all 2 process(es) on this host: no peer daemon runs here"),
        "-v says why the job runs here: {}",
        o.stderr
    );
    assert!(!o.stdout.contains("rank "), "the output went to the files: {}", o.stdout);
    for k in 0..2 {
        let out = std::fs::read_to_string(dir.join(format!("rank.{k}/stdout"))).unwrap();
        assert_eq!(out, format!("rank {k} of 2 on local FOO=bar baz FROM_HERE=here\n"));
        assert!(dir.join(format!("rank.{k}/stderr")).is_file());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 18: `--timeout` stops the job with a clear message and status 124; no process is
/// left behind.
#[test]
fn timeout_stops_a_local_job() {
    let m = marker("timeout");
    let w = example("whereami");
    let o = run(&["--timeout", "1", "-n", "2", w.to_str().unwrap(), "--hold", "60000", &m], T);
    assert_eq!(o.code(), Some(124), "stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("ran longer than --timeout 1 s"), "{}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(20), "{:?}", o.elapsed);
    assert!(wait_no_processes(&m, Duration::from_secs(10)).is_empty(), "processes left behind");
}

/// Issue 18: a rank that panics is reported as a panic, its rank on every line of the
/// message (and the message is not printed bare).
#[test]
fn a_panicking_rank_is_reported_with_its_rank_on_each_line() {
    let w = example("whereami");
    // (Without RUST_BACKTRACE, which adds the program's own report: the test runner sets it.)
    let o = run_cmd(
        std::process::Command::new(launcher())
            .args(["-n", "3", w.to_str().unwrap(), "--panic", "1"])
            .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests")
            .env_remove("RUST_BACKTRACE"),
        T,
    );
    assert!(!o.status.success(), "{}", o.stderr);
    let panic_lines: Vec<&str> =
        o.stderr.lines().filter(|l| l.contains("boom from rank 1") || l.contains("second line of the panic")).collect();
    assert_eq!(panic_lines.len(), 2, "{}", o.stderr);
    for l in &panic_lines {
        assert!(l.starts_with("p2pmpirun: rank 1: "), "line without its rank: {l:?}\n{}", o.stderr);
    }
    assert!(o.stderr.contains("p2pmpirun: rank 1: panicked at "), "{}", o.stderr);
    assert!(o.stderr.contains("rank 1 panicked; stopping the other processes"), "{}", o.stderr);
}

/// Issue 18: the mpirun options are checked before anything starts, each error naming its
/// option; `--oversubscribe` is accepted.
#[test]
fn mpirun_options_are_checked_and_oversubscribe_is_accepted() {
    let w = example("whereami");
    let w = w.to_str().unwrap();
    for (args, says) in [
        (vec!["-x", "P2PMPI_RANK=3"], "-x P2PMPI_RANK=3"),
        (vec!["-x", "P2PMPI_TEST_SURELY_UNSET"], "-x P2PMPI_TEST_SURELY_UNSET"),
        (vec!["-x", "NO_SUCH_VAR_FOR_P2PMPI_TESTS"], "NO_SUCH_VAR_FOR_P2PMPI_TESTS is not set here"),
        (vec!["--collect", "../up.txt"], "--collect ../up.txt"),
        (vec!["--collect", "/etc/passwd"], "--collect /etc/passwd"),
        (vec!["--timeout", "0"], "--timeout"),
        (vec!["-H", "127.0.0.3"], "-H/--host and --hostfile"),
    ] {
        let mut all = args.clone();
        all.extend(["-n", "2", w]);
        let o = run(&all, T);
        assert_eq!(o.code(), Some(2), "{all:?} must fail: {}", o.stderr);
        assert!(o.stderr.contains(says), "{all:?}: {}", o.stderr);
    }
    let o = run(&["--oversubscribe", "-n", "3", w], T);
    o.assert_ok();
    assert_eq!(o.stdout.lines().count(), 3, "{}", o.stdout);
}

/// The CPUs this test may run on (`Cpus_allowed_list` of /proc/self/status, ranges expanded):
/// those the launcher it starts may use.
fn own_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim();
    let mut cpus = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

/// `--bind-to core` pins process K of a local job (slot K: rank K / R, replica K % R) to the
/// K-th CPU the launcher may use, round-robin: each process reads its own affinity, and `-v`
/// reports the kernel's view of every process, replicas included. `none` (the default) leaves
/// them every CPU; P2PMPI_BIND_TO gives the default; a wrong value is refused.
#[test]
fn bind_to_core_pins_each_process_round_robin() {
    let cpus = own_cpus();
    let all = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:").map(|v| v.trim().to_string()))
        .unwrap();
    let w = example("whereami");
    let w = w.to_str().unwrap();
    let rank_cpus = |o: &Outcome| -> Vec<(usize, String)> {
        let mut v: Vec<(usize, String)> = o
            .stdout
            .lines()
            .map(|l| {
                let rank = l.split_whitespace().nth(1).unwrap().parse().unwrap();
                (rank, l.rsplit_once(" cpus=").expect(l).1.to_string())
            })
            .collect();
        v.sort();
        v
    };

    let o = run(&["--bind-to", "core", "-n", "3", w, "--env", "P2PMPI_LOCAL_PROCS", "--affinity"], T);
    o.assert_ok();
    let want: Vec<(usize, String)> = (0..3).map(|k| (k, cpus[k % cpus.len()].to_string())).collect();
    assert_eq!(rank_cpus(&o), want, "{}", o.stdout);
    // Each is told how many of the job's processes share its CPU (its polling policy).
    for k in 0..3 {
        let sharing = (3 - k % cpus.len()).div_ceil(cpus.len());
        let line = o.stdout.lines().find(|l| l.starts_with(&format!("rank {k} "))).unwrap();
        assert!(line.contains(&format!(" P2PMPI_LOCAL_PROCS={sharing} ")), "{line}");
    }

    // Replicated: slot = rank * R + replica; the masters (replica 0) print, -v reports all.
    let o = run(&["--bind-to", "core", "-v", "-n", "2", "-r", "2", w, "--affinity"], T);
    o.assert_ok();
    let want: Vec<(usize, String)> = (0..2).map(|r| (r, cpus[(2 * r) % cpus.len()].to_string())).collect();
    assert_eq!(rank_cpus(&o), want, "{}", o.stdout);
    for slot in 0..4 {
        let line = format!("rank {} replica {} (pid ", slot / 2, slot % 2);
        let report = o.stderr.lines().find(|l| l.contains(&line)).unwrap_or_else(|| panic!("{line}: {}", o.stderr));
        assert!(report.ends_with(&format!("bound to CPU {}", cpus[slot % cpus.len()])), "{report}");
    }

    let o = run(&["--bind-to", "none", "-n", "2", w, "--affinity"], T);
    o.assert_ok();
    assert!(rank_cpus(&o).iter().all(|(_, c)| *c == all), "{}", o.stdout);

    let mut cmd = std::process::Command::new(launcher());
    cmd.args(["-n", "2", w, "--affinity"]).env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests");
    let o = run_cmd(cmd.env("P2PMPI_BIND_TO", "core"), T);
    o.assert_ok();
    let want: Vec<(usize, String)> = (0..2).map(|k| (k, cpus[k % cpus.len()].to_string())).collect();
    assert_eq!(rank_cpus(&o), want, "{}", o.stdout);
    let o = run_cmd(cmd.env("P2PMPI_BIND_TO", "socket"), T);
    assert_eq!(o.code(), Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("P2PMPI_BIND_TO socket: want core or none"), "{}", o.stderr);
    let o = run(&["--bind-to", "sockets", "-n", "2", w], T);
    assert_eq!(o.code(), Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("--bind-to sockets: want core or none"), "{}", o.stderr);
}
