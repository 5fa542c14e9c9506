//! Dynamic processes in C programs built by `mpicc.mpich`, run unchanged by
//! `p2pmpirun --local`: `MPI_Comm_spawn`, `MPI_Comm_spawn_multiple`, `MPI_Comm_get_parent`,
//! with values sent both ways over the intercommunicators.

mod common;
use common::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

#[test]
fn parents_spawn_children_and_talk_with_them() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("spawn"), &[], T);
    let show = format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    assert!(o.status.success(), "{show}");
    for l in [
        "spawn parent 0: child 0 answered 30",
        "spawn parent 1: child 1 answered 60",
        "spawn child 0 of 2: got 10",
        "spawn child 1 of 2: got 20",
        "spawn first 0 of 3 appnum 0",
        "spawn second 1 of 3 appnum 1",
        "spawn second 2 of 3 appnum 1",
        // 100 + 0, 200 + 1, 300 + 1.
        "spawn parent 0: multiple sum 602",
    ] {
        assert!(o.stdout.lines().any(|x| x == l), "missing {l:?}\n{show}");
    }
    assert!(!o.stdout.contains("FAILED"), "{show}");
}

#[test]
fn a_program_that_cannot_start_answers_mpi_err_spawn_everywhere() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("spawn"), &["missing"], T);
    let show = format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    assert!(o.status.success(), "{show}");
    assert_eq!(o.lines_with("spawn missing"), ["spawn missing 0: refused", "spawn missing 1: refused"], "{show}");
}
