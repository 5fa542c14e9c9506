//! Collectives, communicators and groups, checked by `coll_checks` jobs run through the real
//! `p2pmpirun`: every rank computes the sequential reference of every collective from the
//! seed and asserts its own result (see `p2pmpi-examples/examples/coll_checks.rs`).
//!
//! Seeds are fixed so failures reproduce; `P2PMPI_COLL_SEEDS=1,2,3` runs other ones instead.
//! A failing job's standard error lists every wrong result (collective, root, datatype and
//! operation, round, length, first differing element); rerun one by hand with
//! `p2pmpirun -n N target/debug/examples/coll_checks SEED` (`COLL_CHECKS_TRACE=1` traces).
#![forbid(unsafe_code)]

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);
/// A failing collective must stop the job "at once": generous for a loaded 2-core machine.
const QUICK: Duration = Duration::from_secs(10);

/// Two seeds per process count (different for each count), unless overridden.
fn seeds(n: usize) -> Vec<u64> {
    match std::env::var("P2PMPI_COLL_SEEDS") {
        Ok(s) => {
            s.split(',').map(|x| x.trim().parse().expect("P2PMPI_COLL_SEEDS: integers separated by commas")).collect()
        }
        Err(_) => vec![1000 + n as u64, 7_919 * n as u64 + 17],
    }
}

fn job(n: usize, args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let prog = example("coll_checks");
    let n = n.to_string();
    let mut cmd = Command::new(launcher());
    cmd.args(["-n", &n, prog.to_str().unwrap()]).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_cmd(&mut cmd, T)
}

/// Runs `coll_checks SEED` on `n` processes for each seed and expects every check to pass.
fn checks(n: usize, env: &[(&str, &str)]) {
    checks_with(n, env, &seeds(n));
}

fn checks_with(n: usize, env: &[(&str, &str)], seeds: &[u64]) {
    for seed in seeds {
        let seed = seed.to_string();
        let o = job(n, &[&seed], env);
        let failed: Vec<&str> = o.stderr.lines().filter(|l| l.contains("FAILED") || l.starts_with("p2pmpi")).collect();
        assert!(
            o.status.success(),
            "coll_checks n={n} seed={seed} {env:?} failed ({:?}) after {:?}:\n{}\n\nstdout:\n{}\nfull stderr:\n{}",
            o.status,
            o.elapsed,
            failed.join("\n"),
            o.stdout,
            o.stderr
        );
        let ok = format!("OK coll_checks n={n} seed={seed} rounds=3");
        assert!(o.stdout.contains(&ok), "missing {ok:?} in:\n{}", o.stdout);
        // One host: the flat algorithms only.
        assert_eq!(hierarchical(&o.stdout), vec![0; n], "{}", o.stdout);
    }
}

/// How many collectives each rank ran hierarchically (`coll_checks rank R hierarchical K`),
/// in rank order.
fn hierarchical(stdout: &str) -> Vec<u64> {
    let mut v: Vec<(usize, u64)> = stdout
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("coll_checks rank ")? + "coll_checks rank ".len()..];
            let (r, k) = rest.split_once(" hierarchical ")?;
            Some((r.trim().parse().ok()?, k.trim().parse().ok()?))
        })
        .collect();
    v.sort();
    assert!(v.iter().enumerate().all(|(i, &(r, _))| i == r), "one line per rank: {v:?}");
    v.into_iter().map(|(_, k)| k).collect()
}

/// Ranks on several hosts (a local grid: 3 peers on their own loopback addresses, 2
/// processes each): the collectives run in phases per host and every result still equals
/// the sequential reference, also for the non-commutative operation; replicated jobs keep
/// the flat algorithms.
#[test]
fn collectives_across_hosts_run_hierarchically() {
    use common::grid::TestGrid;
    let g = TestGrid::start("hier", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let prog = example("coll_checks");
    let prog = prog.to_str().unwrap();
    // (n, placement, expect the hierarchical path): concentrate fills the hosts in rank order
    // ({0,1} {2,3} {4,5}, or {0,1} {2,3} {4}); spread deals ranks out ({0,3} {1,4} {2}), so
    // hosts are not rank ranges and the non-commutative operation keeps the flat algorithms.
    for (n, strategy, seed) in [(6, "gather", "61"), (5, "gather", "51"), (5, "spread", "52")] {
        let o = g.run(&["-n", &n.to_string(), "-a", strategy, prog, seed]);
        o.assert_ok();
        let ok = format!("OK coll_checks n={n} seed={seed} rounds=3");
        assert!(o.stdout.contains(&ok), "{strategy}: missing {ok:?} in:\n{}", o.stdout);
        let k = hierarchical(&o.stdout);
        assert_eq!(k.len(), n, "{}", o.stdout);
        assert!(k.iter().all(|&k| k > 0), "{strategy} n={n}: every rank ran hierarchical collectives: {k:?}");
    }
    // -r 2: the replicas of a rank on different hosts, so the flat algorithms.
    let o = g.run(&["-n", "3", "-r", "2", prog, "31"]);
    o.assert_ok();
    assert!(o.stdout.contains("OK coll_checks n=3 seed=31 rounds=3"), "{}", o.stdout);
    assert_eq!(hierarchical(&o.stdout), vec![0; 3], "{}", o.stdout);
}

#[test]
fn collectives_on_1_process() {
    checks(1, &[]);
}

#[test]
fn collectives_on_2_processes() {
    checks(2, &[]);
}

#[test]
fn collectives_on_3_processes() {
    checks(3, &[]);
}

#[test]
fn collectives_on_4_processes() {
    checks(4, &[]);
}

#[test]
fn collectives_on_5_processes() {
    checks(5, &[]);
}

#[test]
fn collectives_on_6_processes() {
    checks(6, &[]);
}

#[test]
fn collectives_on_7_processes() {
    checks(7, &[]);
}

#[test]
fn collectives_on_8_processes() {
    checks(8, &[]);
}

#[test]
fn collectives_on_9_processes() {
    checks(9, &[]);
}

/// The algorithms the defaults do not pick: reduce+bcast allreduce, 4-ary tree barrier,
/// gather+bcast allgather, binomial broadcast of large messages.
#[test]
fn collectives_with_the_thesis_algorithms() {
    let env = [
        ("P2PMPI_COLL_ALLREDUCE", "reduce_bcast"),
        ("P2PMPI_COLL_BARRIER", "tree4"),
        ("P2PMPI_COLL_ALLGATHER", "gather_bcast"),
        ("P2PMPI_COLL_BCAST", "binomial"),
    ];
    checks_with(6, &env, &seeds(6)[..1]);
}

/// Rabenseifner's allreduce and the scatter+allgather broadcast for small messages too, and
/// the ring allgather on a power of two.
#[test]
fn collectives_with_the_bandwidth_algorithms_forced() {
    let env = [
        ("P2PMPI_COLL_ALLREDUCE", "rabenseifner"),
        ("P2PMPI_COLL_ALLGATHER", "ring"),
        ("P2PMPI_COLL_BCAST", "scatter_allgather"),
    ];
    checks_with(4, &env, &seeds(4)[..1]);
}

/// all_gather_varcount_into writes the parts only: what lies between them is the caller's.
#[test]
fn all_gather_varcount_leaves_the_gaps_between_parts_alone() {
    for n in [2, 3] {
        let o = job(n, &["gaps"], &[]);
        assert!(o.status.success() && o.stdout.contains("OK gaps"), "n={n} ({:?}):\n{}", o.status, o.stderr);
    }
}

/// A part of zero elements references no memory: its displacement may be anywhere in the
/// buffer, including where another part starts.
#[test]
fn zero_count_parts_may_share_a_displacement() {
    let mut bad = Vec::new();
    for which in ["gather", "all_gather", "all_to_all"] {
        let o = job(3, &["zero-parts", which], &[]);
        if !(o.status.success() && o.stdout.contains(&format!("OK zero-parts {which}"))) {
            bad.push(format!("{which} ({:?}):\n{}", o.status, o.stderr));
        }
    }
    assert!(bad.is_empty(), "varcount collectives refused a zero-count part:\n{}", bad.join("\n"));
}

/// Ranks calling a collective with different sizes: the job stops quickly, with a message
/// that says the collective's arguments do not match, and leaves no process behind.
fn mismatched(n: usize, kind: &str, collective: &str) {
    let m = marker(&format!("mismatch-{kind}-{n}"));
    let o = job(n, &["mismatch", kind, &m], &[]);
    assert!(!o.status.success(), "mismatched {kind} on {n} processes succeeded:\n{}{}", o.stdout, o.stderr);
    assert!(o.elapsed < QUICK, "mismatched {kind} on {n} processes took {:?}", o.elapsed);
    assert!(
        o.stderr.contains("p2pmpi: rank "),
        "no p2pmpi error for mismatched {kind} on {n} processes:\n{}",
        o.stderr
    );
    assert!(
        o.stderr.contains("mismatched") || o.stderr.contains(collective),
        "mismatched {kind} on {n} processes: the error names neither the collective ({collective}) nor the mismatch:\n{}",
        o.stderr
    );
    assert!(!o.stdout.contains("returned"), "a mismatched {kind} returned:\n{}", o.stdout);
    let left = wait_no_processes(&m, Duration::from_secs(5));
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

#[test]
fn mismatched_all_gather_fails_with_a_clear_message() {
    // Which rank reports first varies: repeat to see every kind of report.
    for n in [2, 3, 4, 5, 9] {
        for _ in 0..3 {
            mismatched(n, "all_gather", "all_gather");
        }
    }
}

#[test]
fn mismatched_broadcast_fails_with_a_clear_message() {
    for n in [2, 3, 5] {
        // The root's buffer is the smallest, then the largest.
        mismatched(n, "broadcast", "broadcast");
        mismatched(n, "broadcast_larger_root", "broadcast");
    }
}

#[test]
fn mismatched_all_reduce_fails_with_a_clear_message() {
    for n in [2, 3, 4, 5, 9] {
        for _ in 0..3 {
            mismatched(n, "all_reduce", "all_reduce");
        }
    }
}
