//! One-sided communication (windows) in C programs built by `mpicc.mpich`, run unchanged by
//! `p2pmpirun --local`: fence epochs with put, get and accumulate, window attributes, and
//! passive-target epochs served while the target waits in a blocking receive.

mod common;
use common::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

#[test]
fn fence_and_passive_target_epochs_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("rma"), &[], T);
    let show = format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    assert!(o.status.success(), "{show}");
    let mut want = vec![
        "rma 0: fence puts 100 200 300 sum 6 max 14 get 1001 strided 3 6 9".to_string(),
        "rma 1: fence puts 100 200 300 sum 6 max 14 get 1002 strided 1 2 3".to_string(),
        "rma 2: fence puts 100 200 300 sum 6 max 14 get 1000 strided 2 4 6".to_string(),
        // MPI_REPLACE writes the previous rank's 100 (r + 1), MPI_NO_OP leaves 0; an origin
        // vector datatype reads the strided values back.
        "rma 0: replace 300 no_op 0 strided get 1 2 3".to_string(),
        "rma 1: replace 100 no_op 0 strided get 2 4 6".to_string(),
        "rma 2: replace 200 no_op 0 strided get 3 6 9".to_string(),
        "rma 1: doubles 3.0 6.0".to_string(),
        // 2 ranks x 20 increments under exclusive locks: none lost.
        "rma 2: counter read 40".to_string(),
        "rma 0: counter told 40 local 40".to_string(),
    ];
    for r in 0..3 {
        want.push(format!("rma {r}: attributes ok"));
        want.push(format!("rma {r}: outside the window refused 1"));
        want.push(format!("rma {r}: lock_all sum 6 group 3"));
    }
    for l in want {
        assert!(o.stdout.lines().any(|x| x == l), "missing {l:?}\n{show}");
    }
    assert!(!o.stdout.contains("FAILED"), "{show}");
}

#[test]
fn windows_are_refused_in_replicated_jobs_without_a_hang() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let mut cmd = std::process::Command::new(launcher());
    cmd.args(["--local", "-r", "2", "-n", "3"]).arg(c_program("rma"));
    cmd.env("LD_LIBRARY_PATH", lib_dir()).env("P2PMPI_HOME", "/nonexistent/p2pmpi-abi-tests");
    let o = run_cmd(&mut cmd, T);
    let show = format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    assert!(!o.status.success(), "{show}");
    // The program's own check of MPI_Win_allocate's answer (MPI_ERRORS_RETURN) stops it.
    assert!(o.stdout.lines().any(|l| l.starts_with("rma ") && l.ends_with(": allocate")), "{show}");
    assert!(!o.stdout.contains("attributes ok"), "{show}");
}

#[test]
fn large_count_forms_and_a_windows_error_handler_name_and_hints_on_two_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("rma_c"), &[], T);
    let show = format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    assert!(o.status.success(), "{show}");
    for r in 0..2 {
        // Each window holds the other's rank + 10, and 100 + 5.
        for l in [
            format!("rank {r}: errhandler return 1"),
            format!("rank {r}: default name length 0 set mywin info ok"),
            format!("rank {r}: put {} accumulated 105 got 105", 11 - r),
            // 105 + 1 + 2 = 108, swapped for 500 by rank 1; rank 0's compare with 7 fails.
            format!("rank {r}: atomics sum ok 1 final 500"),
        ] {
            assert!(o.stdout.lines().any(|x| x == l), "missing {l:?}\n{show}");
        }
    }
}

#[test]
fn attributes_of_windows() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(1, &c_program("win_attr"), &[], T);
    let show = format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    assert!(o.status.success(), "{show}");
    for l in ["unset 0", "set 1 value 7 disp unit 4", "deleted 1 still set 0", "deleted by free 2", "keyval invalid 1"]
    {
        assert!(o.stdout.lines().any(|x| x == l), "missing {l:?}\n{show}");
    }
}

#[test]
fn request_based_operations_dynamic_windows_post_start_complete_wait_ishrink_and_idup_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("rma_more"), &[], T);
    let show = format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    assert!(o.status.success(), "{show}");
    for r in 0..3 {
        let (prev, prev2) = ((r + 2) % 3, (r + 1) % 3);
        let mut want = vec![
            // prev's put, one increment from each of 3, 10 added by prev (fetched 0 before it),
            // next's slot read back, the _c forms' 200 + r and 5.
            format!(
                "rank {r}: requests put {} sum 3 fetched 0 then 10 got {} c forms {} 5",
                100 + prev,
                100 + r,
                200 + r
            ),
            format!("rank {r}: dynamic put {} got {} outside 1 detached twice 1", 300 + prev, 300 + prev2),
            format!("rank {r}: ishrink size 3 rank {r}"),
            format!("rank {r}: idup done 1 congruent 1"),
            format!("rank {r}: attach to an allocated window 1"),
        ];
        want.push(if r == 0 {
            format!("rank 0: pscw ring {} first test 0 all completed 2", 400 + prev)
        } else {
            format!("rank {r}: pscw ring {}", 400 + prev)
        });
        for l in want {
            assert!(o.stdout.lines().any(|x| x == l), "missing {l:?}\n{show}");
        }
    }
    assert!(!o.stdout.contains("FAILED"), "{show}");
}

#[test]
fn shared_memory_windows_on_three_processes_of_one_host() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("rma_shared"), &[], T);
    let show = format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    assert!(o.status.success(), "{show}");
    // Rank q's part holds 10 (q + 1) + i at i = 0..=q: the next part's sum; then prev's put.
    for (r, seen, put) in [(0, 41, 502), (1, 93, 500), (2, 10, 501)] {
        for l in [
            format!("rank {r}: shared contiguous 1 seen {seen} put {put}"),
            format!("rank {r}: query of an allocated window 1"),
            format!("rank {r}: a negative size refused everywhere 1"),
        ] {
            assert!(o.stdout.lines().any(|x| x == l), "missing {l:?}\n{show}");
        }
    }
    assert!(!o.stdout.contains("FAILED"), "{show}");
    // The segment's name was removed once mapped.
    let pid = o.stdout.lines().find_map(|l| l.strip_prefix("rank 0: segment made by ")).expect("rank 0's pid");
    let name = format!("p2pmpi-win-{pid}-");
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    assert!(!left.iter().any(|n| n.starts_with(&name)), "left in /dev/shm: {left:?}");
}

#[test]
fn a_shared_window_over_two_hosts_is_refused_on_every_process() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    // Rank 2 binds its data address to 127.0.0.2: another host to the library.
    let o = run(3, &c_program("rma_shared"), &["hosts"], T);
    let show = format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    assert!(o.status.success(), "{show}");
    for (r, node) in [(0, 2), (1, 2), (2, 1)] {
        let l = format!("rank {r}: node of {node}, over two hosts refused 1 null 1");
        assert!(o.stdout.lines().any(|x| x == l), "missing {l:?}\n{show}");
    }
    assert!(!o.stdout.contains("FAILED"), "{show}");
}
