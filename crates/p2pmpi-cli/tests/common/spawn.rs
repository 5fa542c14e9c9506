//! What the spawn examples print when they pass, checked the same way for local and grid
//! jobs.

use super::job::{Ended, Job};
use super::{processes_with, Outcome};
use std::path::Path;
use std::time::Duration;

/// Lines of `text` that contain `pat`.
pub fn count(text: &str, pat: &str) -> usize {
    text.lines().filter(|l| l.contains(pat)).count()
}

/// `spawn_checks nested` with 2 parents: both passed, the grandchild talked to both children.
pub fn assert_nested(o: &Outcome) {
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks nested"), 2, "{}", o.stdout);
    assert!(o.stdout.contains("grandchild of 2 parents"), "{}", o.stdout);
    assert!(o.stdout.contains("nested child 0 relayed 300"), "{}", o.stdout);
    assert!(o.stdout.contains("nested child 1 relayed 301"), "{}", o.stdout);
}

/// `spawn_collectives` with `parents` parents and its 3 children: every process passed.
pub fn assert_collectives(o: &Outcome, parents: usize) {
    o.assert_ok();
    for r in 0..parents {
        let l = format!("OK spawn_collectives: parent {r} of {parents}, remote group of 3");
        assert!(o.stdout.contains(&l), "missing {l:?} in:\n{}", o.stdout);
    }
    for r in 0..3 {
        let l = format!("OK spawn_collectives: child {r} of 3, remote group of {parents}");
        assert!(o.stdout.contains(&l), "missing {l:?} in:\n{}", o.stdout);
    }
}

/// What `spawn_checks pause` prints at `-n 2` (with its 2 children), sorted.
pub fn pause_output() -> Vec<String> {
    let mut v: Vec<String> = vec![
        "child 0 paused".into(),
        "child 1 paused".into(),
        "child 0 of 2: 6 rounds, merged rank 2 of 4, sum 6".into(),
        "child 1 of 2: 6 rounds, merged rank 3 of 4, sum 6".into(),
        "OK spawn_checks pause: parent 0, 6 rounds, merged rank 0 of 4, sum 6".into(),
        "OK spawn_checks pause: parent 1, 6 rounds, merged rank 1 of 4, sum 6".into(),
    ];
    v.sort();
    v
}

/// The lines of `text`, sorted.
pub fn sorted_lines(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// Kills `pid` (kill -9), checked: delivered, and within a bound it is dead and no longer a
/// process carrying `marker_dir` in its command line.
pub fn kill_and_wait(pid: u32, marker_dir: &Path) {
    super::kill9(pid);
    let needle = marker_dir.to_string_lossy().to_string();
    super::wait_until(Duration::from_secs(10), &format!("pid {pid} gone after kill -9"), || {
        !processes_with(&needle).contains(&pid)
    });
}

/// Lets the paused children of a `spawn_checks pause` job go on (the `go` file in `dir`), and
/// checks that the job ends well within `limit` with the fault-free output (each line once);
/// removes the pause directory.
pub fn resume_fault_free(job: Job, dir: &Path, limit: Duration) -> Ended {
    std::fs::write(dir.join("go"), b"").unwrap();
    let e = job.end(limit);
    assert_eq!(e.code, 0, "{}", e.text);
    assert_eq!(sorted_lines(&e.stdout), pause_output(), "{}", e.text);
    let _ = std::fs::remove_dir_all(dir);
    e
}
