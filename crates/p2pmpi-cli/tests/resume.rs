//! `p2pmpirun --local --resume DIR` (issue 41, item 4): a job whose launcher itself died
//! (kill -9 of the launcher and of its processes, as the loss of the submitter's machine
//! would take them) is started again from the last complete checkpoint in DIR, with the
//! program, arguments and options recorded there; the lines it showed before are not shown
//! again, and the output, put together, is the fault-free run's. The errors are told: a DIR
//! without a job's record, a program changed since, a DIR held by a launcher still running.
#![forbid(unsafe_code)]

mod common;
use common::ckpt::*;
use common::job::Job;
use common::*;
use std::path::Path;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);
const SEEN: Duration = Duration::from_secs(60);

/// Starts `ckpt_iter 30 4 PACE` on 3 ranks with its checkpoints in `ck`.
fn start(s: &Scratch, prog: &Path, pace: &str, marker: &str) -> Job {
    let ck = s.ck();
    Job::spawn(&mut launcher_in(
        &s.0,
        &[
            "-n",
            "3",
            "--checkpoint-dir",
            ck.to_str().unwrap(),
            prog.to_str().unwrap(),
            "30",
            "4",
            pace,
            "normal",
            "0",
            marker,
        ],
    ))
}

#[test]
fn a_job_whose_launcher_was_killed_resumes_from_its_last_checkpoint_with_the_fault_free_output() {
    let prog = example("ckpt_iter");
    let want = run(&["--local", "-n", "3", prog.to_str().unwrap(), "30", "4", "0"], T);
    want.assert_ok();
    let s = Scratch::new("resume", "killed");
    let m = marker("resume-killed");
    let job = start(&s, &prog, "40", &m);
    let ck = s.ck();
    wait_until(SEEN, "a complete checkpoint and lines shown", || {
        complete_generation(&ck).is_some_and(|g| g >= 2) && lines_of(&job.stdout(), 0).len() >= 9
    });
    // The submitter's machine is lost: the launcher first, then its processes.
    let launcher_pid = job.pid();
    let ranks: Vec<u32> = processes_with(&m).into_iter().filter(|&p| p != launcher_pid).collect();
    assert_eq!(ranks.len(), 3, "the job's processes");
    kill9(launcher_pid);
    for p in ranks {
        let _ = try_kill9(p);
    }
    assert!(wait_no_processes(&m, Duration::from_secs(10)).is_empty());
    let first = job.end(T);
    assert_ne!(first.code, 0, "{}", first.text);
    assert!(checksum(&first.stdout).is_none(), "the job ended before its end:\n{}", first.text);
    assert!(ck.join("launcher.pid").exists(), "the dead launcher's lock stays");

    let o = run_cmd(&mut launcher_in(&s.0, &["--resume", ck.to_str().unwrap()]), T);
    o.assert_ok();
    assert!(
        o.stderr.contains("resuming ")
            && o.stderr.contains("ckpt_iter 30 4 40 normal 0")
            && o.stderr.contains("(-n 3)"),
        "it says what it resumes:\n{}",
        o.stderr
    );
    let g = o.stderr.split("from checkpoint generation ").nth(1).and_then(|t| t.split(' ').next()?.parse::<u64>().ok());
    assert!(g.is_some_and(|g| g >= 2), "from the last complete generation:\n{}", o.stderr);
    let got = format!("{}{}", first.stdout, o.stdout);
    for r in 0..3 {
        assert_eq!(lines_of(&got, r), lines_of(&want.stdout, r), "rank {r}'s lines, shown once each:\n{got}");
    }
    assert_eq!(checksum(&got), checksum(&want.stdout));
    assert_eq!(got.lines().count(), want.stdout.lines().count(), "{got}");
    assert!(!ck.join("launcher.pid").exists(), "the lock is released at the end");
    assert!(wait_no_processes(&m, Duration::from_secs(10)).is_empty());
}

#[test]
fn resume_refuses_a_directory_without_a_record_a_changed_program_and_a_running_launcher() {
    let s = Scratch::new("resume", "refuse");
    // No record.
    let empty = s.0.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = run_cmd(&mut launcher_in(&s.0, &["--resume", empty.to_str().unwrap()]), T);
    assert_eq!(o.code(), Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("no job record there"), "{}", o.stderr);

    // A launcher still running holds the directory.
    let prog = s.0.join("ckpt_iter");
    std::fs::copy(example("ckpt_iter"), &prog).unwrap();
    let m = marker("resume-live");
    let job = start(&s, &prog, "200", &m);
    let ck = s.ck();
    wait_until(SEEN, "a complete checkpoint", || complete_generation(&ck).is_some());
    let o = run_cmd(&mut launcher_in(&s.0, &["--resume", ck.to_str().unwrap()]), T);
    assert_eq!(o.code(), Some(2), "{}", o.stderr);
    let pid = job.pid().to_string();
    assert!(o.stderr.contains("in use by a launcher still running") && o.stderr.contains(&pid), "{}", o.stderr);
    terminate(job.pid());
    let e = job.end(T);
    assert_ne!(e.code, 0);
    assert!(wait_no_processes(&m, Duration::from_secs(10)).is_empty());

    // The program changed since (one byte more: another build).
    let mut f = std::fs::OpenOptions::new().append(true).open(&prog).unwrap();
    std::io::Write::write_all(&mut f, b"\0").unwrap();
    drop(f);
    let o = run_cmd(&mut launcher_in(&s.0, &["--resume", ck.to_str().unwrap()]), T);
    assert_eq!(o.code(), Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("changed since the job started"), "{}", o.stderr);

    // And a program on the command line is refused: the record names it.
    let o = run_cmd(&mut launcher_in(&s.0, &["--resume", ck.to_str().unwrap(), prog.to_str().unwrap()]), T);
    assert_eq!(o.code(), Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("--resume takes no program"), "{}", o.stderr);
}
