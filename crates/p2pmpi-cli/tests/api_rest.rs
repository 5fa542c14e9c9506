//! The rest of rsmpi's API — immediate collectives, Cartesian topologies, attributes,
//! `UnsafeUserOperation`, `DynBufferMut` as a buffer — checked by `api_checks` jobs run
//! through the real `p2pmpirun` (see `p2pmpi-examples/examples/api_checks.rs`: every rank
//! checks its results against the sequential reference and panics on a wrong one).
#![forbid(unsafe_code)]

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;

/// A job that deadlocks (an immediate collective that does not progress) fails here.
const T: Duration = Duration::from_secs(120);

fn api_checks(n: usize, parts: &[&str], env: &[(&str, &str)]) {
    let prog = example("api_checks");
    let ns = n.to_string();
    let mut cmd = Command::new(launcher());
    cmd.args(["--local", "-n", &ns, prog.to_str().unwrap()]).args(parts);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = run_cmd(&mut cmd, T);
    assert!(
        o.status.success(),
        "api_checks n={n} {parts:?} failed ({:?}) after {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        o.elapsed,
        o.stdout,
        o.stderr
    );
    let ok = format!("OK api_checks n={n} ");
    assert!(o.stdout.contains(&ok), "missing {ok:?} in:\n{}", o.stdout);
}

#[test]
fn immediate_collectives_on_1_to_5_processes() {
    for n in 1..=5 {
        api_checks(n, &["immediate"], &[]);
    }
}

/// Immediate collectives advance while their process blocks in another call (a barrier's
/// later rounds, a broadcast's forwarding): no progress thread, no deadlock.
#[test]
fn immediate_collectives_progress_inside_blocking_calls() {
    for n in [2, 3, 4, 5] {
        api_checks(n, &["progress"], &[]);
    }
}

#[test]
fn cartesian_topologies_on_1_to_5_processes() {
    for n in 1..=5 {
        api_checks(n, &["cartesian"], &[]);
    }
}

#[test]
fn attributes_and_universe_size() {
    api_checks(2, &["attributes"], &[]);
    api_checks(3, &["attributes"], &[("P2PMPI_UNIVERSE_SIZE", "16")]);
}

#[test]
fn unsafe_user_operations_and_dyn_buffers() {
    for n in [1, 2, 3] {
        api_checks(n, &["unsafe_op", "dyn_buffer"], &[]);
    }
}

/// With replicas, every copy of a rank runs the same schedules; the job's results are the same.
#[test]
fn immediate_collectives_with_replicas() {
    let prog = example("api_checks");
    let o = run_cmd(
        Command::new(launcher()).args([
            "--local",
            "-n",
            "3",
            "-r",
            "2",
            prog.to_str().unwrap(),
            "immediate",
            "progress",
        ]),
        T,
    );
    assert!(o.status.success(), "replicated api_checks failed ({:?}):\n{}\n{}", o.status, o.stdout, o.stderr);
    assert!(o.stdout.contains("OK api_checks n=3 immediate progress"), "stdout:\n{}", o.stdout);
}
