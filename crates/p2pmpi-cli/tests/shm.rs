//! The shared-memory path between ranks of one host (docs/shm.md): chosen for same-host
//! pairs, TCP for the others in the same job, every message intact across sizes (larger
//! than the ring too), `ANY_SOURCE` across both transports, and a rank killed while data
//! flows: the job reports it, nothing hangs, no segment is left behind.
#![forbid(unsafe_code)]

mod common;
use common::job::Job;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(120);

/// A directory of this test's own for the segments (`P2PMPI_SHM_DIR`), in /dev/shm when
/// there is one (tmpfs, as in production), removed at the end.
struct SegDir(PathBuf);

impl SegDir {
    fn new(test: &str) -> SegDir {
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let d = base.join(format!("p2pmpi-test-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        SegDir(d)
    }
    fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(&self.0).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()
    }
}

impl Drop for SegDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn job(n: &str, args: &[&str], dir: &SegDir, env: &[(&str, &str)]) -> Command {
    let prog = example("shm_checks");
    let mut cmd = Command::new(launcher());
    cmd.args(["-n", n, prog.to_str().unwrap()])
        .args(args)
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests")
        .env("P2PMPI_SHM_DIR", &dir.0)
        .env("P2PMPI_SHM_DEBUG", "1")
        .env_remove("P2PMPI_SHM")
        .env_remove("P2PMPI_SHM_SLOTS")
        .env_remove("P2PMPI_SHM_RING");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// The pairs (rank, peer) that said they use shared memory.
fn shm_pairs(stderr: &str) -> Vec<(u32, u32)> {
    let mut v: Vec<(u32, u32)> = stderr
        .lines()
        .filter_map(|l| {
            let i = l.find("p2pmpi: rank ")?;
            let rest = &l[i + "p2pmpi: rank ".len()..];
            let (me, rest) = rest.split_once(": shared memory with rank ")?;
            Some((me.trim().parse().ok()?, rest.trim().parse().ok()?))
        })
        .collect();
    v.sort();
    v
}

fn all_pairs(n: u32) -> Vec<(u32, u32)> {
    (0..n).flat_map(|a| (0..n).filter(move |b| *b != a).map(move |b| (a, b))).collect()
}

#[test]
fn same_host_ranks_use_shared_memory_for_every_size() {
    // A 4 KiB ring: every message from 4 KiB up crosses it in many pieces.
    let dir = SegDir::new("sizes");
    let o = run_cmd(&mut job("3", &["sizes"], &dir, &[("P2PMPI_SHM_RING", "4096")]), T);
    o.assert_ok();
    assert!(o.stdout.contains("OK sizes"), "{}", o.stdout);
    assert_eq!(shm_pairs(&o.stderr), all_pairs(3), "{}", o.stderr);
    assert!(dir.leftovers().is_empty(), "segments left: {:?}", dir.leftovers());
}

#[test]
fn default_ring_carries_every_size() {
    let dir = SegDir::new("default");
    let o = run_cmd(&mut job("2", &["sizes"], &dir, &[]), T);
    o.assert_ok();
    assert!(o.stdout.contains("OK sizes"), "{}", o.stdout);
    assert_eq!(shm_pairs(&o.stderr), all_pairs(2), "{}", o.stderr);
    assert!(dir.leftovers().is_empty(), "segments left: {:?}", dir.leftovers());
}

#[test]
fn shared_memory_can_be_turned_off() {
    let dir = SegDir::new("off");
    let o = run_cmd(&mut job("2", &["sizes"], &dir, &[("P2PMPI_SHM", "0")]), T);
    o.assert_ok();
    assert!(o.stdout.contains("OK sizes"), "{}", o.stdout);
    assert!(shm_pairs(&o.stderr).is_empty(), "{}", o.stderr);
}

#[test]
fn any_source_mixes_shared_memory_and_tcp_peers() {
    // Only slots 0 and 1 may use shared memory: rank 0 hears rank 1 through it, ranks 2 and
    // 3 through TCP, all in one stream of ANY_SOURCE receives.
    let dir = SegDir::new("mixed");
    let env = [("P2PMPI_SHM_SLOTS", "0,1"), ("P2PMPI_SHM_RING", "8192")];
    let o = run_cmd(&mut job("4", &["anysource"], &dir, &env), T);
    o.assert_ok();
    assert!(o.stdout.contains("OK anysource"), "{}", o.stdout);
    assert_eq!(shm_pairs(&o.stderr), vec![(0, 1), (1, 0)], "{}", o.stderr);
    assert!(dir.leftovers().is_empty(), "segments left: {:?}", dir.leftovers());
}

#[test]
fn encrypted_jobs_keep_tcp_and_replicas_on_one_host_use_shared_memory() {
    let dir = SegDir::new("keep-tcp");
    let prog = example("shm_checks");
    let mut enc = Command::new(launcher());
    enc.args(["--encrypt", "-n", "2", prog.to_str().unwrap(), "anysource"])
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests")
        .env("P2PMPI_SHM_DIR", &dir.0)
        .env("P2PMPI_SHM_DEBUG", "1")
        .env_remove("P2PMPI_SHM")
        .env_remove("P2PMPI_SHM_SLOTS");
    let o = run_cmd(&mut enc, T);
    o.assert_ok();
    assert!(o.stdout.contains("OK anysource"), "{}", o.stdout);
    assert!(shm_pairs(&o.stderr).is_empty(), "--encrypt keeps TCP: {}", o.stderr);
    let mut repl = Command::new(launcher());
    repl.args(["--local", "-n", "2", "-r", "2", prog.to_str().unwrap(), "anysource"])
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests")
        .env("P2PMPI_SHM_DIR", &dir.0)
        .env("P2PMPI_SHM_DEBUG", "1")
        .env_remove("P2PMPI_SHM")
        .env_remove("P2PMPI_SHM_SLOTS");
    let o = run_cmd(&mut repl, T);
    o.assert_ok();
    assert!(o.stdout.contains("OK anysource"), "{}", o.stdout);
    // The four processes (two ranks, two replicas each) are on this host: the pairs that
    // talk (masters to every replica of the other rank, replicas of a rank among themselves)
    // do it through shared memory.
    assert!(!shm_pairs(&o.stderr).is_empty(), "replicas on one host talk through shared memory: {}", o.stderr);
    assert!(dir.leftovers().is_empty(), "segments left: {:?}", dir.leftovers());
}

/// Starts an endless stream from rank 1 to rank 0 through a small ring, kills `victim` with
/// SIGKILL while the data flows, and checks the job ends promptly naming it.
fn kill_mid_stream(victim: u32, test: &str) {
    let dir = SegDir::new(test);
    let m = marker(test);
    let env = [("P2PMPI_SHM_RING", "16384")];
    let job = Job::spawn(&mut job("2", &["stream", "16", &m], &dir, &env));
    let pid = job.wait_for(T, "the victim's pid and the stream", |lines| {
        lines.iter().find(|l| l.text.contains("STREAMING"))?;
        lines.iter().find_map(|l| {
            let w: Vec<&str> = l.text.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "PID")?;
            (w.get(i + 1)?.parse::<u32>().ok()? == victim).then(|| w.get(i + 2)?.parse::<u32>().ok())?
        })
    });
    // Both ranks said they use shared memory before the stream started.
    job.wait_for(T, "shared memory in use", |lines| {
        let text: String = lines.iter().map(|l| format!("{}\n", l.text)).collect();
        (shm_pairs(&text).len() == 2).then_some(())
    });
    let killed = Instant::now();
    let st = Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    assert!(st.success());
    let e = job.end(T);
    let took = killed.elapsed();
    assert_ne!(e.code, 0, "{}", e.text);
    assert!(took < Duration::from_secs(15), "the job took {took:?} to end after the kill:\n{}", e.text);
    assert!(e.text.contains(&format!("rank {victim}")), "{}", e.text);
    assert!(
        e.text.contains("SIGKILL") || e.text.contains("lost") || e.text.contains("died"),
        "the failure is named: {}",
        e.text
    );
    let left = wait_no_processes(&m, Duration::from_secs(10));
    assert!(left.is_empty(), "processes left behind: {left:?}");
    assert!(dir.leftovers().is_empty(), "segments left: {:?}", dir.leftovers());
}

#[test]
fn writer_killed_mid_stream_is_reported_without_leftovers() {
    kill_mid_stream(1, "kill-writer");
}

#[test]
fn reader_killed_mid_stream_is_reported_without_leftovers() {
    kill_mid_stream(0, "kill-reader");
}
