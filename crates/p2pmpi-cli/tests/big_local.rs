//! A large local job on a small host: `-n 256` on however few cores the machine has (2 in
//! CI) connects its full mesh and runs, however long the openings take there; a job of that
//! size made to fail reports its root cause and leaves no shared-memory segment behind.
//! (In nextest's `fault-timing` group: it loads every core for half a minute.)
#![forbid(unsafe_code)]

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const N: &str = "256";
const LIMIT: Duration = Duration::from_secs(300);

/// A directory of this test's own for the job's segments (`P2PMPI_SHM_DIR`), in /dev/shm
/// when there is one (tmpfs, as in production), removed at the end.
struct SegDir(PathBuf);

impl SegDir {
    fn new(test: &str) -> SegDir {
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let d = base.join(format!("p2pmpi-test-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        SegDir(d)
    }
    fn files(&self) -> Vec<String> {
        std::fs::read_dir(&self.0).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()
    }
}

impl Drop for SegDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn job(segs: &SegDir, marker: &str) -> Command {
    let mut cmd = Command::new(launcher());
    cmd.args(["--local", "-n", N])
        .arg(example("pi"))
        .args(["1000000", marker])
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests")
        .env("P2PMPI_SHM_DIR", &segs.0);
    cmd
}

#[test]
fn two_hundred_fifty_six_processes_run_on_this_host() {
    let segs = SegDir::new("big");
    let marker = marker("big-local");
    let out = run_cmd(&mut job(&segs, &marker), LIMIT);
    out.assert_ok();
    assert!(out.stdout.contains("Pi is approximately 3.14159"), "{}", out.stdout);
    // No opening was given up on: every pair connected, however loaded the host.
    assert!(!out.stderr.contains("did not prove the job key"), "{}", out.stderr);
    assert!(!out.stderr.contains("lost rank"), "{}", out.stderr);
    assert_eq!(segs.files(), Vec::<String>::new(), "segments left behind");
    assert!(wait_no_processes(&marker, Duration::from_secs(10)).is_empty(), "processes left");
}

#[test]
fn a_rank_killed_while_the_mesh_connects_is_the_cause_reported_and_nothing_is_left() {
    let segs = SegDir::new("big-killed");
    let marker = marker("big-killed");
    let mut child =
        job(&segs, &marker).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let out = reader(child.stdout.take().unwrap());
    let err = reader(child.stderr.take().unwrap());
    // The mesh is being built: segments of openings not yet mapped by their peers are there.
    wait_until(Duration::from_secs(120), "openings under way", || segs.files().len() >= 100);
    let victim = processes_with(&marker)
        .into_iter()
        .find(|&p| env_of(p, "P2PMPI_RANK").as_deref() == Some("200"))
        .expect("rank 200 runs");
    kill9(victim);
    let status = wait_bounded(&mut child, LIMIT);
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    let status = status.unwrap_or_else(|| panic!("the job did not end:\n{stderr}"));
    assert_eq!(status.code(), Some(137), "{stdout}\n{stderr}");
    // The launcher names the root cause, once, first.
    let said: Vec<&str> = stderr.lines().filter(|l| l.starts_with("p2pmpirun: ")).collect();
    let cause =
        format!("p2pmpirun: rank 200 (pid {victim}) was killed by signal 9 (SIGKILL); stopping the other processes");
    assert_eq!(said.first().copied(), Some(cause.as_str()), "{stderr}");
    assert_eq!(stderr.matches("was killed by signal").count(), 1, "{stderr}");
    // Whatever the processes were doing, the job's segments are gone with it.
    assert_eq!(segs.files(), Vec::<String>::new(), "segments left behind");
    assert!(wait_no_processes(&marker, Duration::from_secs(10)).is_empty(), "processes left");
}
