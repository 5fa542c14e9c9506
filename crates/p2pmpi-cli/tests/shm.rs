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

/// The pairs (rank, peer) where the rank may copy large messages straight from the peer's
/// memory (`process_vm_readv` probed at the connection's set-up).
fn single_copy_pairs(stderr: &str) -> Vec<(u32, u32)> {
    let mut v: Vec<(u32, u32)> = stderr
        .lines()
        .filter_map(|l| {
            let i = l.find("p2pmpi: rank ")?;
            let rest = &l[i + "p2pmpi: rank ".len()..];
            let (me, rest) = rest.split_once(": single copy from rank ")?;
            let (peer, _) = rest.split_once(" (pid ")?;
            Some((me.trim().parse().ok()?, peer.trim().parse().ok()?))
        })
        .collect();
    v.sort();
    v
}

/// Per rank, the messages it received by a single copy (printed as it finalizes).
fn single_copies(stderr: &str) -> Vec<(u32, u64)> {
    let mut v: Vec<(u32, u64)> = stderr
        .lines()
        .filter_map(|l| {
            let i = l.find("p2pmpi: rank ")?;
            let rest = &l[i + "p2pmpi: rank ".len()..];
            let (me, rest) = rest.split_once(": ")?;
            let (n, _) = rest.split_once(" messages received by single copy")?;
            Some((me.trim().parse().ok()?, n.trim().parse().ok()?))
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
fn a_segment_left_without_its_header_is_reaped_once_old() {
    // A process killed between creating its segment and sizing it leaves an empty file the
    // sweep cannot attribute: once older than a minute, the next job's processes remove it;
    // one just created (its creator writing the header) is left alone.
    let dir = SegDir::new("headerless");
    let old = dir.0.join("p2pmpi-00000000-0123456789abcdef0123456789abcdef");
    let new = dir.0.join("p2pmpi-00000000-fedcba9876543210fedcba9876543210");
    for p in [&old, &new] {
        std::fs::File::create(p).unwrap();
    }
    let then = std::time::SystemTime::now() - Duration::from_secs(120);
    std::fs::File::options().write(true).open(&old).unwrap().set_modified(then).unwrap();
    let o = run_cmd(&mut job("2", &["sizes"], &dir, &[]), T);
    o.assert_ok();
    assert_eq!(dir.leftovers(), vec![new.file_name().unwrap().to_string_lossy().into_owned()]);
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

#[test]
fn large_messages_are_copied_once_across_the_threshold() {
    // np 3: sizes across 64 KiB and the eager limit, standard and synchronous, both ways,
    // then bursts of immediate sends and receives; every byte checked by the program.
    let dir = SegDir::new("single-copy");
    let env = [("P2PMPI_SHM_SINGLE_COPY", "1"), ("P2PMPI_SHM_SINGLE_COPY_MIN", "65536"), ("P2PMPI_SHM_RING", "16384")];
    let o = run_cmd(&mut job("3", &["large"], &dir, &env), T);
    o.assert_ok();
    assert!(o.stdout.contains("OK large"), "{}", o.stdout);
    assert_eq!(shm_pairs(&o.stderr), all_pairs(3), "{}", o.stderr);
    assert_eq!(single_copy_pairs(&o.stderr), all_pairs(3), "every pair may copy once: {}", o.stderr);
    // Ranks 1 and 2 each receive from rank 0 the 8 standard sends above the eager limit and
    // the 13 synchronous ones of 64 KiB or more (not 65 535 B), then 3 bursts of 8 standard
    // ones: 45; rank 0 as many from each of them. The others went through the ring.
    assert_eq!(single_copies(&o.stderr), vec![(0, 90), (1, 45), (2, 45)], "{}", o.stderr);
    assert!(dir.leftovers().is_empty(), "segments left: {:?}", dir.leftovers());
}

#[test]
fn single_copy_is_off_by_default_and_can_be_turned_off() {
    // The same messages pipelined through the ring instead: by default, and with `=0`.
    for (test, env) in [("single-copy-default", None), ("single-copy-off", Some("0"))] {
        let dir = SegDir::new(test);
        let mut cmd = job("2", &["large"], &dir, &[("P2PMPI_SHM_RING", "16384")]);
        match env {
            Some(v) => cmd.env("P2PMPI_SHM_SINGLE_COPY", v),
            None => cmd.env_remove("P2PMPI_SHM_SINGLE_COPY"),
        };
        let o = run_cmd(&mut cmd, T);
        o.assert_ok();
        assert!(o.stdout.contains("OK large"), "{}", o.stdout);
        assert_eq!(shm_pairs(&o.stderr), all_pairs(2), "{}", o.stderr);
        assert!(single_copy_pairs(&o.stderr).is_empty(), "{}", o.stderr);
        assert!(o.stderr.contains("no single copy from rank 1: turned off"), "{}", o.stderr);
        assert!(single_copies(&o.stderr).is_empty(), "{}", o.stderr);
        assert!(dir.leftovers().is_empty(), "segments left: {:?}", dir.leftovers());
    }
}

/// Starts an endless stream of 16 MiB messages from rank 1 to rank 0 (by single copy, or
/// with `ring` through a small ring), kills `victim` with SIGKILL while the data flows, and
/// checks the job ends promptly naming it.
fn kill_mid_stream(victim: u32, test: &str, ring: bool) {
    let dir = SegDir::new(test);
    let m = marker(test);
    let env = [("P2PMPI_SHM_RING", "16384"), ("P2PMPI_SHM_SINGLE_COPY", if ring { "0" } else { "1" })];
    // (16 MiB messages: above the default threshold, so copied once when turned on.)
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
        let copies = single_copy_pairs(&text).len();
        (shm_pairs(&text).len() == 2 && copies == if ring { 0 } else { 2 }).then_some(())
    });
    let killed = Instant::now();
    common::kill9(pid);
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
    kill_mid_stream(1, "kill-writer", true);
}

#[test]
fn reader_killed_mid_stream_is_reported_without_leftovers() {
    kill_mid_stream(0, "kill-reader", true);
}

#[test]
fn sender_killed_while_its_memory_is_copied_is_reported_without_leftovers() {
    kill_mid_stream(1, "kill-sc-sender", false);
}

#[test]
fn receiver_killed_while_copying_is_reported_without_leftovers() {
    kill_mid_stream(0, "kill-sc-receiver", false);
}
