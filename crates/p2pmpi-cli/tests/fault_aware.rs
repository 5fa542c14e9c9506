//! Fault-aware programs (`mpi::ulfm`: agree, shrink, failure acknowledgement) on real
//! processes: `examples/ft_solver` loses a rank to `kill -9`, shrinks its communicator,
//! redistributes the lost work and prints the right answer.
#![forbid(unsafe_code)]

mod common;
use common::job::Job;
use common::*;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

fn solver(n: usize, args: &[&str]) -> Command {
    let mut c = Command::new(launcher());
    let n = n.to_string();
    c.args(["-n", &n, "--t-gossip", "100", "--t-max-hang", "0"])
        .arg(example("ft_solver"))
        .args(args)
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests");
    c
}

/// The answer line: (ranks at the end, verdict).
fn answer(out: &str) -> Option<(String, String)> {
    let l = out.lines().find(|l| l.starts_with("total "))?;
    let w: Vec<&str> = l.split_whitespace().collect();
    Some((w[6].to_string(), w.last()?.to_string()))
}

#[test]
fn without_failures_the_solver_agrees_every_round_and_is_right() {
    let o = run_cmd(&mut solver(3, &["6000", "1000"]), T);
    o.assert_ok();
    assert_eq!(o.stdout.matches(" done on 3 ranks").count(), 6, "{}", o.stdout);
    assert_eq!(answer(&o.stdout), Some(("3".into(), "correct".into())), "{}", o.stdout);
}

#[test]
fn a_rank_killed_mid_run_is_shrunk_away_and_the_answer_is_still_right() {
    let job = Job::spawn(&mut solver(4, &["20000", "1000", "150"]));
    let ready = job.ready(4, T);
    job.wait_for(T, "round 3", |lines| lines.iter().any(|l| l.text == "round 3 done on 4 ranks").then_some(()));
    let victim = ready[2].0;
    common::kill9(victim);
    let (code, text) = job.finish(T);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("shrunk from 4 to 3 ranks"), "{text}");
    assert!(text.contains("rank 2 (pid") && text.contains("the program handles failures, the job goes on"), "{text}");
    assert!(text.contains(" done on 3 ranks"), "the rounds after the failure ran on the survivors: {text}");
    assert_eq!(answer(&text), Some(("3".into(), "correct".into())), "{text}");
}

#[test]
fn alone_without_a_launcher_agreement_is_immediate() {
    let o = run_cmd(Command::new(example("ft_solver")).args(["3000", "500"]), T);
    o.assert_ok();
    assert_eq!(answer(&o.stdout), Some(("1".into(), "correct".into())), "{}", o.stdout);
}

#[test]
fn a_receive_from_any_source_fails_when_a_worker_dies_and_works_again_once_acknowledged() {
    collect_through_a_worker_death("receive");
}

#[test]
fn blocking_probes_from_any_source_fail_when_a_worker_dies_and_work_again_once_acknowledged() {
    collect_through_a_worker_death("probe");
    // A receive of a vector probes for the message's size first.
    collect_through_a_worker_death("vec");
}

#[test]
fn waiting_for_any_of_several_requests_fails_the_receive_from_any_source_when_a_worker_dies() {
    collect_through_a_worker_death("waitany");
}

fn collect_through_a_worker_death(mode: &str) {
    let mut c = Command::new(launcher());
    c.args(["-n", "4", "--t-gossip", "100", "--t-max-hang", "0"])
        .arg(example("ft_collect"))
        .args(["12", "150", mode])
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests");
    let job = Job::spawn(&mut c);
    let ready = job.ready(4, T);
    job.wait_for(T, "round 2", |lines| lines.iter().any(|l| l.text == "round 2 complete").then_some(()));
    let victim = ready[2].0;
    common::kill9(victim);
    // Without the failure's notice reaching the pending receive, rank 0 would wait forever
    // for rank 2's message of the round: the job would not end.
    let (code, text) = job.finish(T);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains(&format!("{mode} from any source failed: ")) && text.contains("lost rank 2"), "{text}");
    assert!(text.contains("round 11 complete"), "{text}");
    assert!(text.contains("from 2 of 3 workers: correct"), "{text}");
}

#[test]
fn collectives_return_their_errors_and_a_revoke_frees_ranks_that_never_talk_to_the_dead_one() {
    let mut c = Command::new(launcher());
    c.args(["-n", "4", "--t-gossip", "100", "--t-max-hang", "0"])
        .arg(example("ft_revoke"))
        .args(["20", "1000", "150"])
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests");
    let job = Job::spawn(&mut c);
    let ready = job.ready(4, T);
    job.wait_for(T, "round 3", |lines| lines.iter().any(|l| l.text == "round 3 done on 4 ranks").then_some(()));
    let victim = ready[2].0;
    common::kill9(victim);
    // Without the revocation, a rank whose allreduce partner gave up would wait for it
    // forever: the job would not end.
    let (code, text) = job.finish(T);
    assert_eq!(code, 0, "{text}");
    let failed: Vec<&str> = text.lines().filter(|l| l.contains(": round ") && l.contains(" failed: ")).collect();
    assert_eq!(failed.len(), 3, "every survivor saw the round fail: {text}");
    assert!(
        failed.iter().any(|l| l.contains("the communicator was revoked")),
        "a survivor learned it through the revocation: {text}"
    );
    assert!(text.contains("shrunk from 4 to 3 ranks"), "{text}");
    assert!(text.contains("total 00000002534e5ed3 over 20 rounds on 3 of 4 ranks: correct"), "{text}");
}

#[test]
fn immediate_collectives_fail_their_requests_and_the_survivors_shrink() {
    let mut c = Command::new(launcher());
    c.args(["-n", "4", "--t-gossip", "100", "--t-max-hang", "0"])
        .arg(example("ft_immediate"))
        .args(["20", "1000", "150"])
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests");
    let job = Job::spawn(&mut c);
    let ready = job.ready(4, T);
    job.wait_for(T, "round 3", |lines| lines.iter().any(|l| l.text == "round 3 done on 4 ranks").then_some(()));
    kill9(ready[2].0);
    // Without the failure reaching the schedules' requests (`try_wait`, `try_test`), the
    // survivors would stop (the plain forms) or wait for rank 2 forever: the job would not
    // end, or end in error.
    let (code, text) = job.finish(T);
    assert_eq!(code, 0, "{text}");
    let failed: Vec<&str> = text.lines().filter(|l| l.contains(": round ") && l.contains(" failed in ")).collect();
    assert_eq!(failed.len(), 3, "every survivor saw a request of the round fail: {text}");
    assert!(
        failed.iter().all(|l| l.contains("lost rank 2") || l.contains("the communicator was revoked")),
        "the requests name the lost rank or the revocation: {text}"
    );
    assert!(failed.iter().any(|l| l.contains("lost rank 2")), "{text}");
    assert!(text.contains("shrunk from 4 to 3 ranks"), "{text}");
    assert!(text.contains(" done on 3 ranks"), "the rounds after the failure ran on the survivors: {text}");
    assert!(text.contains("total 00000002534e5ed3 over 20 rounds on 3 of 4 ranks: correct"), "{text}");
    // A wrong call is an `Err` of the `try_immediate_` form, not the end of the process.
    let misuse = text
        .lines()
        .filter(|l| l.contains("a wrong call returned its error: ") && l.contains("must not be called on the root"))
        .count();
    assert_eq!(misuse, 4, "{text}");
}

// ------------------------------------------------------------------ replicated jobs (-r R)
//
// `-n 4 -r 2`: replica j of rank k is slot 2k + j (rank 2 is slots 4 and 5). The examples
// record their path (`FT_PATH_DIR`: what each operation gave, the agreements, the shrinks)
// per slot; every replica of a surviving rank must have taken its master's path, although
// only the master's output is shown.

/// `p2pmpirun --local -n 4 -r 2 EXAMPLE ARGS MARKER`, recording the paths in `dir`.
fn replicated(example_name: &str, args: &[&str], marker: &str, dir: &std::path::Path) -> Command {
    let mut c = Command::new(launcher());
    // A detector a little less hasty than the unreplicated tests' (T_cleanup 1.4 s): eight
    // processes on a loaded machine must not be taken for dead; the kills are seen at once
    // anyway (broken connections, exit statuses).
    c.args(["--local", "-n", "4", "-r", "2", "--t-gossip", "100", "--t-max-hang", "500"])
        .arg(example(example_name))
        .args(args)
        // Ignored by the examples: it finds their processes.
        .arg(marker)
        .env("FT_PATH_DIR", dir)
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests");
    c
}

/// The directory of a test's recorded paths, removed when the test passes (kept to look at
/// when it fails).
struct PathDir(std::path::PathBuf);

impl std::ops::Deref for PathDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for PathDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn path_dir(test: &str) -> PathDir {
    let d = std::env::temp_dir().join(format!("p2pmpi-ft-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    PathDir(d)
}

/// Waits (bounded) until the job's 8 processes run; returns slot → pid.
fn slots_of(marker: &str) -> std::collections::HashMap<usize, u32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let found: std::collections::HashMap<usize, u32> = processes_with(marker)
            .into_iter()
            .filter_map(|pid| env_of(pid, "P2PMPI_RANK").and_then(|s| s.parse().ok()).map(|s| (s, pid)))
            .collect();
        if found.len() >= 8 {
            return found;
        }
        assert!(std::time::Instant::now() < deadline, "only {} of 8 processes started", found.len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `example` with `args` as a `-n 4 -r 2` job (its processes found by a marker, their
/// paths recorded in a directory of its own, named after `test`) and waits until it prints
/// `ready`; returns the job, slot → pid, and the paths' directory.
fn start_replicated(
    example: &str,
    args: &[&str],
    test: &str,
    ready: &str,
) -> (Job, std::collections::HashMap<usize, u32>, PathDir) {
    let marker = marker(&format!("ft-{test}"));
    let dir = path_dir(test);
    let job = Job::spawn(&mut replicated(example, args, &marker, &dir));
    let procs = slots_of(&marker);
    job.wait_for(T, ready, |lines| lines.iter().any(|l| l.text == ready).then_some(()));
    (job, procs, dir)
}

/// Each slot's recorded path.
fn paths(dir: &std::path::Path) -> Vec<String> {
    (0..8).map(|s| std::fs::read_to_string(dir.join(format!("path-{s}.txt"))).unwrap_or_default()).collect()
}

/// A recorded path without its last step.
fn but_last(p: &str) -> &str {
    p.trim_end_matches('\n').rsplit_once('\n').map_or("", |(head, _)| &p[..head.len() + 1])
}

/// Both replicas of every rank but those of `killed` (a replica of them was killed) took
/// the same path (and recorded one); those of `killed` took the same path as far as each
/// went. A rank whose replica the launcher declared failed (a replica excluded on a loaded
/// machine, or — with `may_leave` — one that left because a message of the lost rank reached
/// its master and never reached it: its sender's replicas all died between their
/// transmissions) has replicas whose paths agree as far as each went.
fn assert_replicas_took_one_path(p: &[String], killed: &[usize], may_leave: bool, text: &str) {
    for k in 0..4 {
        let (a, b) = (&p[2 * k], &p[2 * k + 1]);
        if killed.contains(&k) {
            let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
            assert!(long.starts_with(short.as_str()), "rank {k}'s replicas parted:\n{a}\n---\n{b}");
            continue;
        }
        assert!(!a.is_empty(), "rank {k} recorded nothing: {text}");
        if a == b {
            continue;
        }
        let lost_one = text.contains(&format!("rank {k} goes on with 1 replica(s)"));
        let prefix = a.starts_with(b.as_str()) || b.starts_with(a.as_str());
        // A replica that could not follow its master (it took a receive's success just before
        // its master failed it: docs/mpi-library.md, "Not yet") sees the error in its program
        // before it leaves, so its last step is its own: the paths agree up to that step.
        let left = may_leave && text.contains("cannot follow its master") && {
            let (ca, cb) = (but_last(a), but_last(b));
            b.starts_with(ca) || a.starts_with(cb)
        };
        assert!(lost_one && (prefix || left), "rank {k}'s replicas took different paths: {text}");
    }
    if !may_leave {
        assert!(!text.contains("cannot follow its master"), "a replica could not follow its master: {text}");
    }
}

#[test]
fn replicated_solver_losing_one_replica_of_a_rank_needs_no_shrink() {
    let (job, procs, dir) =
        start_replicated("ft_solver", &["20000", "1000", "150"], "repl-one", "round 3 done on 4 ranks");
    // Rank 2's master: its replica takes over, and the program sees nothing.
    kill9(procs[&4]);
    let (code, text) = job.finish(T);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("rank 2 replica 0") && text.contains("rank 2 goes on with 1 replica(s)"), "{text}");
    assert!(!text.contains("shrunk") && !text.contains("all replicas"), "{text}");
    assert_eq!(answer(&text), Some(("4".into(), "correct".into())), "{text}");
    let p = paths(&dir);
    assert_replicas_took_one_path(&p, &[2], false, &text);
    assert!(p.iter().all(|s| !s.contains("failed") && !s.contains("None")), "an operation failed: {p:?}");
    assert!(p[5].contains("total "), "rank 2's replica finished the work: {}", p[5]);
}

#[test]
fn replicated_solver_losing_every_replica_of_a_rank_shrinks_and_is_right() {
    let (job, procs, dir) =
        start_replicated("ft_solver", &["20000", "1000", "150"], "repl-both", "round 3 done on 4 ranks");
    kill9(procs[&4]);
    kill9(procs[&5]);
    let (code, text) = job.finish(T);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("all replicas of rank 2 failed; the program handles failures, the job goes on"), "{text}");
    assert!(text.contains("shrunk from 4 to 3 ranks"), "{text}");
    assert!(text.contains(" done on 3 ranks"), "{text}");
    assert_eq!(answer(&text), Some(("3".into(), "correct".into())), "{text}");
    let p = paths(&dir);
    // (Both replicas of rank 2 die at once: a replica may have to leave, see `may_leave`.)
    assert_replicas_took_one_path(&p, &[2], true, &text);
    assert!(p.iter().any(|s| s.contains(": None")), "a round failed somewhere: {p:?}");
    assert!(p[0].contains("shrunk from 4 to 3: rank 0"), "{}", p[0]);
}

#[test]
fn replicated_solver_loses_a_rank_s_master_then_the_replica_that_took_over() {
    let (job, procs, dir) =
        start_replicated("ft_solver", &["20000", "1000", "150"], "repl-seq", "round 3 done on 4 ranks");
    kill9(procs[&4]);
    job.wait_for(T, "the master's death", |lines| {
        lines.iter().any(|l| l.text.contains("rank 2 goes on with 1 replica(s)")).then_some(())
    });
    // Two more rounds with rank 2's new master, then it dies too.
    let rounds = |lines: &[common::job::Line]| lines.iter().filter(|l| l.text.contains(" done on ")).count();
    let seen = rounds(&job.lines());
    job.wait_for(T, "two more rounds", |lines| (rounds(lines) >= seen + 2).then_some(()));
    kill9(procs[&5]);
    let (code, text) = job.finish(T);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("all replicas of rank 2 failed; the program handles failures, the job goes on"), "{text}");
    assert!(text.contains("shrunk from 4 to 3 ranks"), "{text}");
    assert_eq!(answer(&text), Some(("3".into(), "correct".into())), "{text}");
    let p = paths(&dir);
    assert_replicas_took_one_path(&p, &[2], true, &text);
    assert!(p[5].len() > p[4].len(), "rank 2's replica went on after its master: {}\n---\n{}", p[4], p[5]);
}

#[test]
fn replicated_revoke_frees_the_survivors_and_every_replica_follows_its_master() {
    let (job, procs, dir) =
        start_replicated("ft_revoke", &["20", "1000", "150"], "repl-revoke", "round 3 done on 4 ranks");
    kill9(procs[&4]);
    kill9(procs[&5]);
    // Without the revocation (refused before in replicated jobs), a rank whose allreduce
    // partner gave up would wait for it forever.
    let (code, text) = job.finish(T);
    assert_eq!(code, 0, "{text}");
    let failed: Vec<&str> = text.lines().filter(|l| l.contains(": round ") && l.contains(" failed: ")).collect();
    assert_eq!(failed.len(), 3, "every survivor saw the round fail (its master's line): {text}");
    assert!(text.contains("shrunk from 4 to 3 ranks"), "{text}");
    assert!(text.contains("total 00000002534e5ed3 over 20 rounds on 3 of 4 ranks: correct"), "{text}");
    let p = paths(&dir);
    // (Both replicas of rank 2 die at once: a replica may have to leave, see `may_leave`.)
    assert_replicas_took_one_path(&p, &[2], true, &text);
    for k in [0, 1, 3] {
        assert!(p[2 * k].contains(" failed: "), "rank {k}'s replicas both saw the round fail: {}", p[2 * k]);
    }
}

#[test]
fn replicated_collect_from_any_source_fails_on_every_replica_of_the_master_alike() {
    for mode in ["receive", "waitany"] {
        let (job, procs, dir) =
            start_replicated("ft_collect", &["12", "150", mode], &format!("repl-collect-{mode}"), "round 2 complete");
        kill9(procs[&4]);
        kill9(procs[&5]);
        let (code, text) = job.finish(T);
        assert_eq!(code, 0, "{mode}: {text}");
        assert!(text.contains(&format!("{mode} from any source failed: ")) && text.contains("lost rank 2"), "{text}");
        assert!(text.contains("round 11 complete"), "{text}");
        assert!(text.contains("from 2 of 3 workers: correct"), "{text}");
        let p = paths(&dir);
        // (Both replicas of rank 2 die at once: a replica may have to leave, see `may_leave`.)
        assert_replicas_took_one_path(&p, &[2], true, &text);
        assert!(p[0].contains("failed: lost rank 2") && p[0].contains("acknowledged [2]"), "{mode}: {}", p[0]);
    }
}

#[test]
fn replicated_solver_survives_the_root_s_master_dying_with_the_lost_rank() {
    // Rank 0's master decides which of rank 0's receives fail; it dies with both replicas of
    // rank 2, so its replica takes over in the middle of the failure and decides the rest.
    let (job, procs, dir) =
        start_replicated("ft_solver", &["20000", "1000", "150"], "repl-root", "round 3 done on 4 ranks");
    for slot in [4, 5, 0] {
        kill9(procs[&slot]);
    }
    let (code, text) = job.finish(T);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("rank 0 replica 0") && text.contains("rank 0 goes on with 1 replica(s)"), "{text}");
    assert!(text.contains("shrunk from 4 to 3 ranks"), "{text}");
    assert_eq!(answer(&text), Some(("3".into(), "correct".into())), "{text}");
    let p = paths(&dir);
    assert_replicas_took_one_path(&p, &[0, 2], true, &text);
    assert!(p[1].contains("shrunk from 4 to 3: rank 0") && p[1].contains("total "), "{}", p[1]);
}

#[test]
fn replicated_immediate_collectives_fail_alike_on_every_replica() {
    let (job, procs, dir) =
        start_replicated("ft_immediate", &["20", "1000", "150"], "repl-immediate", "round 3 done on 4 ranks");
    kill9(procs[&4]);
    kill9(procs[&5]);
    let (code, text) = job.finish(T);
    assert_eq!(code, 0, "{text}");
    let failed: Vec<&str> = text.lines().filter(|l| l.contains(": round ") && l.contains(" failed in ")).collect();
    assert_eq!(failed.len(), 3, "every survivor saw a request of the round fail (its master's line): {text}");
    assert!(text.contains("shrunk from 4 to 3 ranks"), "{text}");
    assert!(text.contains("total 00000002534e5ed3 over 20 rounds on 3 of 4 ranks: correct"), "{text}");
    let p = paths(&dir);
    // (Both replicas of rank 2 die at once: a replica may have to leave, see `may_leave`.)
    assert_replicas_took_one_path(&p, &[2], true, &text);
    for k in [0, 1, 3] {
        assert!(p[2 * k].contains(" failed in "), "rank {k}'s replicas saw the round's request fail: {}", p[2 * k]);
        assert!(p[2 * k].contains("shrunk from 4 to 3"), "{}", p[2 * k]);
    }
}
