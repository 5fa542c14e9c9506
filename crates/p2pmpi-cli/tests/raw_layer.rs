//! rsmpi's raw layer on p2pmpi — `mpi::raw` (`as_raw`/`from_raw` of communicators, groups,
//! datatypes, operations, requests, statuses), the C-style functions of `mpi::ffi` on those
//! handles, attribute copy and delete callbacks (overridden in Rust, and C keyvals), and the
//! graph topology placeholders — checked by `raw_checks` jobs run through the real
//! `p2pmpirun` on 2 and 3 processes (see `p2pmpi-examples/examples/raw_checks.rs`: every rank
//! checks its results and panics on a wrong one).
#![forbid(unsafe_code)]

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

fn raw_checks(n: usize, part: &str) {
    raw_checks_with(n, part, &[]);
}

/// `raw_checks PART` on `n` processes, with more launcher options.
fn raw_checks_with(n: usize, part: &str, options: &[&str]) {
    let prog = example("raw_checks");
    let ns = n.to_string();
    let mut cmd = Command::new(launcher());
    cmd.args(["--local", "-n", &ns]).args(options).args([prog.to_str().unwrap(), part]);
    let o = run_cmd(&mut cmd, T);
    assert!(
        o.status.success(),
        "raw_checks n={n} {options:?} {part} failed ({:?}) after {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        o.elapsed,
        o.stdout,
        o.stderr
    );
    let ok = format!("OK raw_checks n={n} {part}");
    assert!(o.stdout.contains(&ok), "missing {ok:?} in:\n{}", o.stdout);
}

#[test]
fn handles_round_trip_on_2_and_3_processes() {
    for n in [2, 3] {
        raw_checks(n, "handles");
    }
}

#[test]
fn ffi_functions_on_2_and_3_processes() {
    for n in [2, 3] {
        raw_checks(n, "ffi");
    }
}

/// The `ffi` part in a replicated job: the C functions' requests, probes and collectives
/// go through the same choice points as the Rust API's, so every replica follows its master.
#[test]
fn ffi_functions_replicated_on_2_and_3_processes() {
    for n in [2, 3] {
        raw_checks_with(n, "ffi", &["-r", "2"]);
    }
}

#[test]
fn attribute_callbacks_on_2_and_3_processes() {
    for n in [2, 3] {
        raw_checks(n, "callbacks");
    }
}

#[test]
fn c_keyvals_on_2_and_3_processes() {
    for n in [2, 3] {
        raw_checks(n, "keyvals");
    }
}

#[test]
fn graph_topology_placeholders() {
    raw_checks(2, "topology");
}

#[test]
fn intercommunicator_handles_with_spawned_children() {
    for n in [2, 3] {
        raw_checks(n, "inter");
    }
}

/// Every part in one job, one after the other (handles and callbacks across parts).
#[test]
fn all_parts_in_one_job() {
    let prog = example("raw_checks");
    let o = run_cmd(Command::new(launcher()).args(["--local", "-n", "3", prog.to_str().unwrap()]), T);
    assert!(o.status.success(), "raw_checks (all parts) failed: {:?}\n{}\n{}", o.status, o.stdout, o.stderr);
    assert!(o.stdout.contains("OK raw_checks n=3 handles ffi callbacks keyvals topology"), "{}", o.stdout);
}
