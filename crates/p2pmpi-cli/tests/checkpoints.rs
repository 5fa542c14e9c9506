//! Checkpoints and restarts of a local job (issue 41), on real processes: the example
//! `ckpt_iter` iterates over a ring, prints one line per rank and step, checkpoints every few
//! steps and prints a checksum. A rank killed (kill -9, once a condition holds: a checkpoint
//! is complete, or a line was printed) makes `p2pmpirun --max-restarts` restart every rank
//! from the last complete checkpoint, and the job ends with the checksum of a run without
//! faults and no line shown twice; the errors (messages in flight, a restore into another
//! type, a corrupted piece) are told clearly; `--max-restarts 0` fails as before.
#![forbid(unsafe_code)]

mod common;
use common::ckpt::*;
use common::job::Job;
use common::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);
/// How long a condition of the job may take to come (a loaded 2-core machine).
const SEEN: Duration = Duration::from_secs(60);

/// The output of a run without faults: `ckpt_iter STEPS EVERY 0` on `n` ranks.
fn fault_free(n: usize, steps: &str, every: &str) -> String {
    let prog = example("ckpt_iter");
    let o = run(&["--local", "-n", &n.to_string(), prog.to_str().unwrap(), steps, every, "0"], T);
    o.assert_ok();
    assert!(checksum(&o.stdout).is_some(), "{}", o.stdout);
    o.stdout
}

/// The pid of the process of slot `slot` of the job carrying `marker`.
fn slot_pid(marker: &str, slot: usize) -> u32 {
    let mut pid = None;
    wait_until(SEEN, &format!("slot {slot}'s process"), || {
        pid = processes_with(marker)
            .into_iter()
            .find(|&p| env_of(p, "P2PMPI_RANK").as_deref() == Some(&slot.to_string()) && !is_dead(p));
        pid.is_some()
    });
    pid.unwrap()
}

/// Asserts that the job's output is the fault-free one: the same lines per rank (none
/// twice, none missing) and the same checksum.
fn assert_same_output(got: &str, want: &str, n: usize) {
    for r in 0..n {
        assert_eq!(lines_of(got, r), lines_of(want, r), "rank {r}'s lines differ:\n{got}");
    }
    assert_eq!(checksum(got), checksum(want), "checksum:\n{got}");
    assert_eq!(got.lines().count(), want.lines().count(), "lines:\n{got}");
}

#[test]
fn a_rank_killed_after_a_checkpoint_restarts_from_it_with_the_fault_free_checksum() {
    let want = fault_free(3, "30", "4");
    let s = Scratch::new("ckpt", "kill");
    let m = marker("ckpt-kill");
    let prog = example("ckpt_iter");
    let ck = s.ck();
    let job = Job::spawn(&mut launcher_in(
        &s.0,
        &[
            "-n",
            "3",
            "--checkpoint-dir",
            ck.to_str().unwrap(),
            "--max-restarts",
            "2",
            prog.to_str().unwrap(),
            "30",
            "4",
            "40",
            "normal",
            "0",
            &m,
        ],
    ));
    wait_until(SEEN, "a complete checkpoint", || complete_generation(&ck).is_some_and(|g| g >= 2));
    kill9(slot_pid(&m, 1));
    let e = job.end(T);
    assert_eq!(e.code, 0, "{}", e.text);
    assert!(
        e.text.contains("restart 1 of 2: rank 1") && e.text.contains("killed by signal 9"),
        "the restart names the rank and cause:\n{}",
        e.text
    );
    assert!(e.text.contains("restarting every rank from checkpoint generation"), "{}", e.text);
    assert_same_output(&e.stdout, &want, 3);
    assert!(wait_no_processes(&m, Duration::from_secs(10)).is_empty());
}

#[test]
fn every_replica_of_a_rank_killed_restarts_the_replicated_job() {
    let want = fault_free(3, "30", "4");
    let s = Scratch::new("ckpt", "replicas");
    let m = marker("ckpt-replicas");
    let prog = example("ckpt_iter");
    let ck = s.ck();
    let job = Job::spawn(&mut launcher_in(
        &s.0,
        &[
            "-n",
            "3",
            "-r",
            "2",
            "--checkpoint-dir",
            ck.to_str().unwrap(),
            "--max-restarts",
            "1",
            prog.to_str().unwrap(),
            "30",
            "4",
            "40",
            "normal",
            "0",
            &m,
        ],
    ));
    // Rank 1 is slots 2 and 3: the first death is survived, the second restarts the job.
    wait_until(SEEN, "a complete checkpoint", || complete_generation(&ck).is_some());
    kill9(slot_pid(&m, 2));
    job.wait_for(SEEN, "the first replica's death reported", |l| {
        l.iter().any(|l| l.stderr && l.text.contains("rank 1") && l.text.contains("replica")).then_some(())
    });
    kill9(slot_pid(&m, 3));
    let e = job.end(T);
    assert_eq!(e.code, 0, "{}", e.text);
    assert!(e.text.contains("restart 1 of 1"), "{}", e.text);
    assert_same_output(&e.stdout, &want, 3);
}

#[test]
fn without_a_complete_checkpoint_the_job_restarts_from_the_beginning() {
    let want = fault_free(3, "30", "0");
    let s = Scratch::new("ckpt", "scratch");
    let m = marker("ckpt-scratch");
    let prog = example("ckpt_iter");
    let job = Job::spawn(&mut launcher_in(
        &s.0,
        &["-n", "3", "--max-restarts", "1", prog.to_str().unwrap(), "30", "0", "40", "normal", "0", &m],
    ));
    job.wait_for(SEEN, "rank 1 at step 3", |l| l.iter().any(|l| l.text == lines_of(&want, 1)[3]).then_some(()));
    kill9(slot_pid(&m, 1));
    let e = job.end(T);
    assert_eq!(e.code, 0, "{}", e.text);
    assert!(e.text.contains("from the beginning (no complete checkpoint)"), "{}", e.text);
    assert_same_output(&e.stdout, &want, 3);
    // The launcher's own checkpoint directory is gone with the job's success.
    assert!(!s.0.join("p2pmpi-checkpoints").exists(), "checkpoint directory left behind");
}

#[test]
fn with_max_restarts_0_a_killed_rank_fails_the_job_as_before() {
    let s = Scratch::new("ckpt", "norestart");
    let m = marker("ckpt-norestart");
    let prog = example("ckpt_iter");
    let ck = s.ck();
    let job = Job::spawn(&mut launcher_in(
        &s.0,
        &[
            "-n",
            "3",
            "--checkpoint-dir",
            ck.to_str().unwrap(),
            prog.to_str().unwrap(),
            "30",
            "4",
            "40",
            "normal",
            "0",
            &m,
        ],
    ));
    wait_until(SEEN, "a complete checkpoint", || complete_generation(&ck).is_some());
    kill9(slot_pid(&m, 1));
    let e = job.end(T);
    assert_eq!(e.code, 137, "{}", e.text);
    assert!(e.text.contains("rank 1") && e.text.contains("killed by signal 9"), "{}", e.text);
    assert!(!e.text.contains("restarting every rank"), "{}", e.text);
    assert!(wait_no_processes(&m, Duration::from_secs(10)).is_empty());
}

#[test]
fn a_checkpoint_with_messages_in_flight_is_refused_on_every_rank() {
    let want = fault_free(3, "8", "0");
    let s = Scratch::new("ckpt", "inflight");
    let ck = s.ck();
    let prog = example("ckpt_iter");
    let o = run_cmd(
        &mut launcher_in(
            &s.0,
            &["-n", "3", "--checkpoint-dir", ck.to_str().unwrap(), prog.to_str().unwrap(), "8", "4", "0", "inflight"],
        ),
        T,
    );
    o.assert_ok();
    for r in 0..3 {
        let errs: Vec<&str> =
            o.stdout.lines().filter(|l| l.starts_with(&format!("rank {r}: checkpoint failed"))).collect();
        assert_eq!(errs.len(), 2, "rank {r}: two refusals expected:\n{}", o.stdout);
        // Rank 0 sent one message more than the ranks received.
        let counts: Vec<u64> = errs[0]
            .split_once("in flight (")
            .and_then(|(_, rest)| rest.split_once(" over"))
            .map(|(c, _)| c.split(", ").filter_map(|w| w.split_whitespace().next()?.parse().ok()).collect())
            .unwrap_or_default();
        assert!(counts.len() == 2 && counts[0] == counts[1] + 1, "{}", errs[0]);
    }
    assert_eq!(checksum(&o.stdout), checksum(&want));
    assert_eq!(complete_generation(&ck), None, "no generation may be complete");
}

#[test]
fn a_restore_into_another_type_fails_clearly() {
    let s = Scratch::new("ckpt", "wrongtype");
    let m = marker("ckpt-wrongtype");
    let prog = example("ckpt_iter");
    let ck = s.ck();
    let job = Job::spawn(&mut launcher_in(
        &s.0,
        &[
            "-n",
            "2",
            "--checkpoint-dir",
            ck.to_str().unwrap(),
            "--max-restarts",
            "1",
            prog.to_str().unwrap(),
            "30",
            "4",
            "40",
            "wrongtype",
            "0",
            &m,
        ],
    ));
    wait_until(SEEN, "a complete checkpoint", || complete_generation(&ck).is_some());
    kill9(slot_pid(&m, 1));
    let e = job.end(T);
    assert_eq!(e.code, 1, "{}", e.text);
    assert!(
        e.text.contains("cannot restore checkpoint generation")
            && e.text.contains("the state stored is a ckpt_iter::State, and the program asks for a alloc::vec::Vec<alloc::string::String>"),
        "{}",
        e.text
    );
}

#[test]
fn communicating_before_restored_in_a_restarted_process_is_an_error() {
    let s = Scratch::new("ckpt", "early");
    let m = marker("ckpt-early");
    let prog = example("ckpt_iter");
    let ck = s.ck();
    let args = ["-n", "2", "--checkpoint-dir", ck.to_str().unwrap(), "--max-restarts", "1", prog.to_str().unwrap()];
    let job = Job::spawn(&mut launcher_in(&s.0, &[&args[..], &["30", "4", "40", "early", "0", &m]].concat()));
    wait_until(SEEN, "a complete checkpoint", || complete_generation(&ck).is_some());
    kill9(slot_pid(&m, 1));
    let e = job.end(T);
    assert_ne!(e.code, 0, "{}", e.text);
    assert!(e.text.contains("restart 1 of 1"), "{}", e.text);
    assert!(e.text.contains("call Universe::restored() before communicating"), "{}", e.text);
    assert!(!e.text.contains("restart 2"), "a program error is not restarted:\n{}", e.text);
}

#[test]
fn a_restore_into_another_program_fails_clearly() {
    let s = Scratch::new("ckpt", "otherprog");
    let m = marker("ckpt-otherprog");
    // A copy of the program, replaced once a checkpoint is complete by another build of it
    // (one more byte at its end: it runs the same, its hash differs).
    let prog = s.0.join("prog");
    std::fs::copy(example("ckpt_iter"), &prog).unwrap();
    let ck = s.ck();
    let args = ["-n", "2", "--checkpoint-dir", ck.to_str().unwrap(), "--max-restarts", "1", prog.to_str().unwrap()];
    let job = Job::spawn(&mut launcher_in(&s.0, &[&args[..], &["30", "4", "40", "normal", "0", &m]].concat()));
    wait_until(SEEN, "a complete checkpoint", || complete_generation(&ck).is_some());
    let other = s.0.join("prog.new");
    let mut bytes = std::fs::read(&prog).unwrap();
    bytes.push(0);
    std::fs::write(&other, bytes).unwrap();
    std::fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::rename(&other, &prog).unwrap();
    kill9(slot_pid(&m, 1));
    let e = job.end(T);
    assert_eq!(e.code, 1, "{}", e.text);
    assert!(e.text.contains("it was written by another program (the executable's hash differs)"), "{}", e.text);
}

#[test]
fn a_corrupted_piece_is_detected_at_restore() {
    let s = Scratch::new("ckpt", "corrupt");
    let m = marker("ckpt-corrupt");
    let prog = example("ckpt_iter");
    let ck = s.ck();
    // `once`: a single checkpoint, so the piece corrupted is the one a restart reads.
    let job = Job::spawn(&mut launcher_in(
        &s.0,
        &[
            "-n",
            "2",
            "--checkpoint-dir",
            ck.to_str().unwrap(),
            "--max-restarts",
            "1",
            prog.to_str().unwrap(),
            "30",
            "4",
            "40",
            "once",
            "0",
            &m,
        ],
    ));
    wait_until(SEEN, "a complete checkpoint", || complete_generation(&ck).is_some());
    let piece = ck.join("gen-1").join("rank-1.ckpt");
    let mut bytes = std::fs::read(&piece).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&piece, bytes).unwrap();
    kill9(slot_pid(&m, 1));
    let e = job.end(T);
    assert_eq!(e.code, 1, "{}", e.text);
    assert!(
        e.text.contains("rank 1: cannot restore checkpoint generation 1")
            && e.text.contains("rank-1.ckpt is corrupted: its hash does not match its contents"),
        "{}",
        e.text
    );
}

#[test]
fn checkpoint_write_throughput() {
    // 3 checkpoints of 16 MiB per rank on 2 ranks; rank 0 prints each one's time.
    let s = Scratch::new("ckpt", "bench");
    let prog = example("ckpt_iter");
    let kib = 16 * 1024;
    let o = run_cmd(
        &mut launcher_in(&s.0, &["-n", "2", prog.to_str().unwrap(), "3", "0", "0", "bench", &kib.to_string()]),
        T,
    );
    o.assert_ok();
    let mut secs: Vec<f64> =
        o.stdout.lines().filter_map(|l| l.strip_prefix("bench ")?.split_whitespace().nth(1)?.parse().ok()).collect();
    assert_eq!(secs.len(), 3, "{}", o.stdout);
    secs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mib_s = (kib as f64 / 1024.0) / secs[1];
    eprintln!("checkpoint write: {:.1} MiB/s of state per rank (median of 3, 2 ranks, 16 MiB each)", mib_s);
    assert!(mib_s > 1.0, "{mib_s} MiB/s");
}
