//! The array completions (`MPI_Testall`, `MPI_Waitany`, `MPI_Testany`, `MPI_Waitsome`,
//! `MPI_Testsome`) and `MPI_Cancel` (which cancels them where they lie) on the requests
//! `MPI_Isend`/`MPI_Irecv` hold in their handles, with `MPI_REQUEST_NULL` among them, and
//! mixed with persistent and generalized requests: a C program built by
//! `mpicc.mpich` (`tests/c/direct_arrays.c`), run unchanged by `p2pmpirun --local`, alone and
//! replicated (each array test a choice point the replicas follow).

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// The lines `direct_arrays.c` prints on rank `r` of 3 (the same under Debian's MPICH).
fn lines(r: usize) -> Vec<String> {
    let p = (r + 2) % 3;
    [
        format!(
            "testall early 0 unchanged 1 got {} {} {} tags 1 3 sources {p} {p} null 1 nulls 1",
            p * 10 + 1,
            p * 10 + 2,
            p * 10 + 3
        ),
        format!("waitany 2 tag 12 then 0 got {} {} then undefined 1", 100 + p, 100 + p),
        format!("testany early 0 1 then 1 source {p} got {}; all null 1 1", 200 + p),
        format!("waitsome early 0 seen 7 tags 96 got {} {} {} undefined 1", p * 10 + 1, p * 10 + 2, p * 10 + 3),
        "testsome seen 14 undefined 1".to_string(),
        "cancelled 1 1 1 1 index 0 out 1 at 1".to_string(),
        format!("mixed testall got {} {} greq 77 78 direct null 1 persistent kept 1 greq null 1", 500 + p, 600 + p),
        format!("mixed waitsome seen 7 waitany seen 3 got {} {}", 500 + p, 600 + p),
    ]
    .into_iter()
    .map(|l| format!("arrays {r}: {l}"))
    .collect()
}

fn check(o: &Outcome) {
    o.assert_ok();
    let show = format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    for r in 0..3 {
        for w in lines(r) {
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{show}");
        }
    }
}

#[test]
fn array_completions_and_cancel_of_requests_held_by_the_handles_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    check(&run(3, &c_program("direct_arrays"), &[], T));
}

#[test]
fn array_completions_of_requests_held_by_the_handles_alike_in_a_replicated_job() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let mut cmd = Command::new(launcher());
    cmd.args(["--local", "-r", "2", "-n", "3"]).arg(c_program("direct_arrays"));
    cmd.env("LD_LIBRARY_PATH", lib_dir()).env("P2PMPI_HOME", "/nonexistent/p2pmpi-abi-tests");
    check(&run_cmd(&mut cmd, T));
}
