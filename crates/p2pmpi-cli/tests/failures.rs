//! What happens when things go wrong: bad arguments, dying ranks, errors in the program.
//! Every case must end with a message naming the rank and cause, the right exit status,
//! within a few seconds, and with no process left behind.
#![forbid(unsafe_code)]

mod common;
use common::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);
/// "Within a couple of seconds": generous for a loaded 2-core CI machine.
const QUICK: Duration = Duration::from_secs(10);

fn failing(n: &str, mode: &str, test: &str) -> Outcome {
    let m = marker(test);
    let prog = example("p2p_checks");
    let o = run(&["-n", n, prog.to_str().unwrap(), mode, &m], T);
    assert!(!o.status.success(), "job should fail: {}", o.stderr);
    assert!(o.elapsed < QUICK, "took {:?}", o.elapsed);
    let left = wait_no_processes(&m, Duration::from_secs(5));
    assert!(left.is_empty(), "processes left behind: {left:?}");
    o
}

#[test]
fn rank_exiting_early_stops_the_job_with_its_status() {
    let o = failing("4", "exit-early", "exit-early");
    assert_eq!(o.code(), Some(3));
    assert!(o.stderr.contains("rank 1") && o.stderr.contains("exited with status 3"), "{}", o.stderr);
}

#[test]
fn rank_killed_by_a_signal_is_reported() {
    let o = failing("4", "crash", "crash");
    assert_eq!(o.code(), Some(128 + 9));
    assert!(o.stderr.contains("rank 3") && o.stderr.contains("signal 9 (SIGKILL)"), "{}", o.stderr);
}

#[test]
fn abort_stops_everyone_with_the_code() {
    let o = failing("3", "abort", "abort");
    assert_eq!(o.code(), Some(7));
    assert!(o.stderr.contains("rank 1 aborted the job (error code 7)"), "{}", o.stderr);
}

#[test]
fn exiting_without_finalizing_is_an_error() {
    let o = failing("3", "no-finalize", "nofin");
    assert!(o.stderr.contains("rank 1") && o.stderr.contains("without finalizing"), "{}", o.stderr);
}

#[test]
fn truncated_receive_stops_with_a_clear_message() {
    let o = failing("2", "truncate-fatal", "trunc");
    assert!(
        o.stderr.contains("p2pmpi: rank 1: message truncated: 512 bytes from rank 0 (tag 0) do not fit in a receive buffer of 64 bytes"),
        "{}",
        o.stderr
    );
}

#[test]
fn value_from_a_short_message_stops_with_a_clear_message() {
    let o = failing("2", "short-fatal", "short");
    assert!(o.stderr.contains("p2pmpi: rank 1: expected a message of 4 bytes, received 2 bytes"), "{}", o.stderr);
}

#[test]
fn killed_launcher_leaves_no_orphans() {
    let m = marker("orphans");
    let prog = example("p2p_checks");
    let mut child = std::process::Command::new(launcher())
        .args(["-n", "3", prog.to_str().unwrap(), "hang", &m])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait (bounded) until the three ranks run.
    let deadline = std::time::Instant::now() + T;
    while processes_with(&m).len() < 4 {
        assert!(std::time::Instant::now() < deadline, "job did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let left = wait_no_processes(&m, Duration::from_secs(5));
    assert!(left.is_empty(), "orphans: {left:?}");
}

#[test]
fn missing_program_is_a_clear_error() {
    let o = run(&["-n", "2", "./no/such/program"], T);
    assert_eq!(o.code(), Some(2));
    assert!(o.stderr.contains("program './no/such/program' not found"), "{}", o.stderr);
    let o = run(&["-n", "2", "no-such-program-anywhere"], T);
    assert!(o.stderr.contains("not found in PATH"), "{}", o.stderr);
}

#[test]
fn zero_or_missing_process_count_is_a_clear_error() {
    let prog = example("pi");
    let o = run(&["-n", "0", prog.to_str().unwrap()], T);
    assert_eq!(o.code(), Some(2));
    assert!(o.stderr.contains("-n must be at least 1 (got 0)"), "{}", o.stderr);
    let o = run(&[prog.to_str().unwrap()], T);
    assert_eq!(o.code(), Some(2));
    assert!(o.stderr.contains("number of processes is missing"), "{}", o.stderr);
    let o = run(&["-n", "two", prog.to_str().unwrap()], T);
    assert_eq!(o.code(), Some(2));
    assert!(o.stderr.contains("invalid value 'two'"), "{}", o.stderr);
    let o = run(&["-n", "2"], T);
    assert_eq!(o.code(), Some(2));
}

#[test]
fn non_executable_program_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("p2pmpi-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("data.txt");
    std::fs::write(&f, "not a program").unwrap();
    let o = run(&["-n", "1", f.to_str().unwrap()], T);
    assert_eq!(o.code(), Some(2));
    assert!(o.stderr.contains("is not an executable file"), "{}", o.stderr);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn derived_datatype_before_initialize_panics_like_rsmpi() {
    let prog = example("p2p_checks");
    let o = run_cmd(std::process::Command::new(prog).arg("preinit"), T);
    assert!(!o.status.success());
    assert!(o.stderr.contains("RSMPI PANIC: Pre-MPI_Init datatype initialization"), "{}", o.stderr);
    assert!(o.stderr.contains("`Tagged`"), "{}", o.stderr);
}

#[test]
fn request_dropped_before_completion_stops_the_process() {
    let o = failing("2", "drop-request", "droprq");
    assert!(o.stderr.contains("request was dropped without being completed"), "{}", o.stderr);
}

#[test]
fn a_panicking_rank_stops_the_job_instead_of_hanging_it() {
    let o = failing("3", "panic", "panic");
    assert!(o.stderr.contains("deliberate panic in rank 1"), "{}", o.stderr);
    assert!(o.stderr.contains("rank 1"), "{}", o.stderr);
}
