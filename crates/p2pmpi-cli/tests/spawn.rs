//! Dynamic processes through the real `p2pmpirun --local`: `spawn_checks` (in
//! `p2pmpi-examples`) spawns children of itself, talks with them across the
//! intercommunicator both ways, merges, and checks every result (a wrong one panics, and the
//! job fails).
#![forbid(unsafe_code)]

mod common;
use common::*;
use std::time::Duration;

/// A spawn that hangs fails here.
const T: Duration = Duration::from_secs(90);

fn spawn_checks(n: usize, mode: &str) -> Outcome {
    let prog = example("spawn_checks");
    run(&["--local", "-n", &n.to_string(), prog.to_str().unwrap(), mode], T)
}

use common::spawn::{assert_collectives, assert_nested, count, kill_and_wait, resume_fault_free};

#[test]
fn two_parents_spawn_two_children_talk_both_ways_and_merge() {
    let o = spawn_checks(2, "basic");
    o.assert_ok();
    // The parents' lines and the children's, all through the launcher's output.
    for r in 0..2 {
        let parent = format!("OK spawn_checks basic: parent {r}, merged rank {r} of 4, sum 6");
        assert!(o.stdout.contains(&parent), "missing {parent:?} in:\n{}", o.stdout);
        let child = format!("child {r} of 2: 2 parents, merged rank {} of 4, sum 6", 2 + r);
        assert!(o.stdout.contains(&child), "missing {child:?} in:\n{}", o.stdout);
    }
    assert_eq!(count(&o.stdout, "OK spawn_checks basic"), 2, "{}", o.stdout);
    assert_eq!(count(&o.stdout, "child "), 2, "{}", o.stdout);
}

#[test]
fn one_parent_spawns_and_merges() {
    let o = spawn_checks(1, "basic");
    o.assert_ok();
    assert!(o.stdout.contains("OK spawn_checks basic: parent 0, merged rank 0 of 3, sum 3"), "{}", o.stdout);
    assert!(o.stdout.contains("child 1 of 2: 1 parents, merged rank 2 of 3, sum 3"), "{}", o.stdout);
}

#[test]
fn spawn_multiple_gives_one_world_with_application_numbers() {
    let o = spawn_checks(2, "multiple");
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks multiple"), 2, "{}", o.stdout);
    assert_eq!(count(&o.stdout, "first child "), 2, "{}", o.stdout);
    assert!(o.stdout.contains("second child 2 of 3 (appnum 1), parent size 2"), "{}", o.stdout);
}

#[test]
fn spawning_a_missing_program_is_an_error_and_the_parents_go_on() {
    let o = spawn_checks(2, "missing");
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks missing"), 2, "{}", o.stdout);
    assert!(
        o.stderr.contains("spawn failed: program '/nonexistent/p2pmpi-spawn-target' not found"),
        "the root names the cause:\n{}",
        o.stderr
    );
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
}

#[test]
fn children_that_die_stop_the_parents_instead_of_hanging() {
    let o = spawn_checks(2, "child_panics");
    assert!(!o.status.success(), "the job succeeded:\n{}\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("panics on purpose"), "the children's panic is shown:\n{}", o.stderr);
    assert!(!o.stdout.contains("received"), "{}", o.stdout);
    assert!(o.elapsed < Duration::from_secs(60), "took {:?}", o.elapsed);
}

#[test]
fn a_merge_where_both_groups_say_low_puts_the_parents_first() {
    let o = spawn_checks(2, "tie");
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks tie"), 2, "{}", o.stdout);
    assert!(o.stdout.contains("tie child 0: merged rank 2"), "{}", o.stdout);
    assert!(o.stdout.contains("tie child 1: merged rank 3"), "{}", o.stdout);
}

/// Children spawn in turn: the grandchild's universe ids follow the children's, and it talks
/// with both children (its parents) across its own intercommunicator.
#[test]
fn children_spawn_a_grandchild() {
    assert_nested(&spawn_checks(2, "nested"));
}

/// With `-r 2` every replica of the root calls `spawn`, the launcher starts one set of
/// children, replicated too (each child rank as 2 replicas): values both ways with their
/// sources, any-source receives, merge and allreduce, every line shown once per logical rank.
#[test]
fn a_replicated_job_spawns_replicated_children_that_talk_both_ways_and_merge() {
    let prog = example("spawn_checks");
    let o = run(&["--local", "-n", "2", "-r", "2", prog.to_str().unwrap(), "basic"], T);
    o.assert_ok();
    for r in 0..2 {
        let parent = format!("OK spawn_checks basic: parent {r}, merged rank {r} of 4, sum 6");
        assert!(o.stdout.contains(&parent), "missing {parent:?} in:\n{}", o.stdout);
        let child = format!("child {r} of 2: 2 parents, merged rank {} of 4, sum 6", 2 + r);
        assert!(o.stdout.contains(&child), "missing {child:?} in:\n{}", o.stdout);
    }
    assert_eq!(count(&o.stdout, "OK spawn_checks basic"), 2, "{}", o.stdout);
    assert_eq!(count(&o.stdout, "child "), 2, "replicas' output is not shown:\n{}", o.stdout);
    assert!(!o.stderr.contains("spawn failed"), "{}", o.stderr);
}

/// `spawn_multiple` and children that spawn a grandchild, from a replicated job (`-r 2`: the
/// children and the grandchild run 2 replicas of each rank too).
#[test]
fn a_replicated_job_s_spawn_multiple_and_grandchildren() {
    let prog = example("spawn_checks");
    let o = run(&["--local", "-n", "2", "-r", "2", prog.to_str().unwrap(), "multiple"], T);
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks multiple"), 2, "{}", o.stdout);
    assert_eq!(count(&o.stdout, "first child "), 2, "{}", o.stdout);
    assert_eq!(count(&o.stdout, "second child 2 of 3 (appnum 1), parent size 2"), 1, "{}", o.stdout);
    let o = run(&["--local", "-n", "2", "-r", "2", prog.to_str().unwrap(), "nested"], T);
    assert_nested(&o);
    assert_eq!(count(&o.stdout, "grandchild of 2 parents"), 1, "{}", o.stdout);
}

/// A spawn that fails in a replicated job: every replica of every parent gets
/// `MpiError::Spawn`, the cause is printed once (by the root's master), the job goes on.
#[test]
fn a_replicated_job_s_failed_spawn_is_an_error_everywhere_and_the_job_goes_on() {
    let prog = example("spawn_checks");
    let o = run(&["--local", "-n", "2", "-r", "2", prog.to_str().unwrap(), "missing"], T);
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks missing"), 2, "{}", o.stdout);
    assert_eq!(
        count(&o.stderr, "spawn failed: program '/nonexistent/p2pmpi-spawn-target' not found"),
        1,
        "{}",
        o.stderr
    );
}

/// The root's master dies in the middle of a spawn (fault injection, the test programs are
/// built with `failpoints`): before it asks its launcher, and after the launcher started the
/// children and answered but before the answer was broadcast. Its replica takes over and
/// makes the same request: the launcher starts one set of children only (no second spawned
/// job), and the job ends with the fault-free output.
#[test]
fn the_root_s_master_dying_mid_spawn_leaves_one_set_of_children() {
    let prog = example("spawn_checks");
    for window in ["spawn_before_request", "spawn_after_answer"] {
        let mut cmd = std::process::Command::new(launcher());
        cmd.args(["--local", "-n", "2", "-r", "2", "--tag-output", prog.to_str().unwrap(), "basic"])
            .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests")
            .env("P2PMPI_FAILPOINTS_SLOT0", format!("{window}=return"));
        let o = run_cmd(&mut cmd, T);
        o.assert_ok();
        assert!(o.stderr.contains(&format!("failpoint {window}: this process dies now")), "{window}: {}", o.stderr);
        assert!(o.stderr.contains("rank 0 goes on with 1 replica(s)"), "{window}: {}", o.stderr);
        for r in 0..2 {
            let parent = format!("[{r}] OK spawn_checks basic: parent {r}, merged rank {r} of 4, sum 6");
            assert!(o.stdout.contains(&parent), "{window}: missing {parent:?} in:\n{}", o.stdout);
            let child = format!("[spawn1.{r}] child {r} of 2: 2 parents, merged rank {} of 4, sum 6", 2 + r);
            assert!(o.stdout.contains(&child), "{window}: missing {child:?} in:\n{}", o.stdout);
        }
        assert_eq!(count(&o.stdout, "child "), 2, "{window}: {}", o.stdout);
        assert_eq!(count(&o.stdout, "[spawn2."), 0, "{window}: a second set of children:\n{}", o.stdout);
    }
}

/// Pids by (child?, slot in its own job).
type Procs = Vec<((bool, usize), u32)>;

/// A job (`--local -n 2` with `opts`) running `spawn_checks pause`, once both children paused
/// half-way: the job, the directory whose `go` file releases them, and the marker in every
/// process's command line.
fn paused_spawn(test: &str, opts: &[&str]) -> (common::job::Job, std::path::PathBuf, String) {
    let marker = marker(test);
    let dir = std::env::temp_dir().join(&marker);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = std::process::Command::new(launcher());
    cmd.args(["--local", "-n", "2"])
        .args(opts)
        .arg(example("spawn_checks"))
        .arg("pause")
        .arg(&dir)
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests");
    let job = common::job::Job::spawn(&mut cmd);
    job.wait_for(T, "both children paused", |lines| {
        let seen = |r: usize| lines.iter().any(|l| !l.stderr && l.text == format!("child {r} paused"));
        (seen(0) && seen(1)).then_some(())
    });
    (job, dir, marker)
}

/// A replicated job (`-n 2 -r 2`) whose children paused half-way (`spawn_checks pause`):
/// the job, the directory whose `go` file releases them, and the pids of the processes by
/// (child?, slot in its own job).
fn paused_replicated_spawn(test: &str) -> (common::job::Job, std::path::PathBuf, Procs) {
    paused_replicated_spawn_with(test, &[])
}

/// [`paused_replicated_spawn`] with more `p2pmpirun` options.
fn paused_replicated_spawn_with(test: &str, opts: &[&str]) -> (common::job::Job, std::path::PathBuf, Procs) {
    let mut all = vec!["-r", "2"];
    all.extend_from_slice(opts);
    let (job, dir, marker) = paused_spawn(test, &all);
    let procs: Procs = processes_with(&marker)
        .into_iter()
        .filter_map(|pid| {
            let slot = env_of(pid, "P2PMPI_RANK")?.parse().ok()?;
            assert_eq!(env_of(pid, "P2PMPI_REPLICAS").as_deref(), Some("2"), "pid {pid}: replicated");
            Some(((env_of(pid, "P2PMPI_SPAWN_BASE").is_some(), slot), pid))
        })
        .collect();
    let mut slots: Vec<(bool, usize)> = procs.iter().map(|p| p.0).collect();
    slots.sort();
    let want: Vec<(bool, usize)> = (0..4).map(|s| (false, s)).chain((0..4).map(|s| (true, s))).collect();
    assert_eq!(slots, want, "2 parents and 2 children, 2 replicas each");
    (job, dir, procs)
}

/// The fault-free run of `pause` with replicas: 4 children processes (2 ranks × 2), rounds
/// both ways, merge and allreduce, each line once.
#[test]
fn replicated_children_run_as_replicas_of_each_rank() {
    let (job, dir, _) = paused_replicated_spawn("spawn-repl-plain");
    resume_fault_free(job, &dir, T);
}

/// Killing the master of a child rank (kill -9) while the children wait half-way: its replica
/// takes over, messages across the intercommunicator go on, and the output is the fault-free
/// one.
#[test]
fn killing_a_replica_of_a_spawned_child_leaves_the_output_fault_free() {
    let (job, dir, procs) = paused_replicated_spawn("spawn-repl-kill-child");
    // Child rank 1's replica 0 (slot 2 of the children's job): its master.
    let pid = procs.iter().find(|p| p.0 == (true, 2)).unwrap().1;
    kill_and_wait(pid, &dir);
    let e = resume_fault_free(job, &dir, T);
    assert!(
        e.text.contains("(spawned job): rank 1 replica 0") && e.text.contains("rank 1 goes on with 1 replica(s)"),
        "{}",
        e.text
    );
}

/// Freezing the master of a child rank (SIGSTOP) while the children wait half-way: the
/// spawned job's own failure detector declares it dead (the parents' detector settings),
/// its replica takes over, and once resumed it learns that it was excluded and exits; the
/// output is the fault-free one. (Before spawned jobs ran a detector, the frozen master kept
/// its replica waiting for its commits at the end.)
#[test]
fn a_frozen_replica_of_a_spawned_child_is_declared_dead_and_the_output_stays_fault_free() {
    let (job, dir, procs) = paused_replicated_spawn_with("spawn-repl-freeze-child", &["--t-gossip", "100"]);
    let pid = procs.iter().find(|p| p.0 == (true, 2)).unwrap().1;
    common::freeze(pid);
    job.wait_for(T, "the frozen child declared failed by its own job", |lines| {
        lines.iter().any(|l| l.stderr && l.text.contains("(spawned job): rank 1 replica 0 failed")).then_some(())
    });
    common::thaw(pid);
    // Resumed, it learns that it was excluded and exits (before the others go on).
    job.wait_for(T, "the resumed child stopped", |lines| {
        lines.iter().any(|l| l.stderr && l.text.contains("it resumed and was stopped")).then_some(())
    });
    let e = resume_fault_free(job, &dir, T);
    assert!(e.text.contains("(spawned job): rank 1 replica 0 failed: no heartbeat"), "{}", e.text);
    assert!(e.text.contains("rank 1 goes on with 1 replica(s)"), "{}", e.text);
    assert!(
        e.text.contains("(spawned job): rank 1 replica 0 was declared dead at")
            && e.text.contains("it resumed and was stopped"),
        "{}",
        e.text
    );
    // Only the frozen child was declared: no parent was taken for it.
    assert_eq!(count(&e.text, "declared dead at"), 1, "{}", e.text);
    assert_eq!(count(&e.text, " failed: "), 1, "{}", e.text);
}

/// Without replicas: a child frozen (SIGSTOP) while the children wait is declared failed by
/// its own job's detector, and the job stops with a message naming it instead of waiting
/// for it forever.
#[test]
fn a_frozen_child_of_an_unreplicated_job_stops_the_job_with_a_clear_error() {
    let (job, dir, marker) = paused_spawn("spawn-freeze-child", &["--t-gossip", "100"]);
    let pid = processes_with(&marker)
        .into_iter()
        .find(|&pid| env_of(pid, "P2PMPI_SPAWN_BASE").is_some() && env_of(pid, "P2PMPI_RANK").as_deref() == Some("1"))
        .expect("child 1's process");
    common::freeze(pid);
    let e = job.end(T);
    // Clean-up, not a fault: the frozen child may already be gone.
    let _ = p2pmpi_peer::os::signal(pid, libc::SIGKILL);
    let _ = std::fs::remove_dir_all(&dir);
    assert_ne!(e.code, 0, "{}", e.text);
    assert!(e.text.contains("(spawned job)") && e.text.contains("no heartbeat"), "{}", e.text);
}

/// Killing the master of parent rank 0 (the spawn's root) while the children wait: the
/// children learn its death from the parents' launcher and go on with its replica.
#[test]
fn killing_the_root_s_master_after_the_spawn_leaves_the_output_fault_free() {
    let (job, dir, procs) = paused_replicated_spawn("spawn-repl-kill-root");
    let pid = procs.iter().find(|p| p.0 == (false, 0)).unwrap().1;
    kill_and_wait(pid, &dir);
    let e = resume_fault_free(job, &dir, T);
    assert!(e.text.contains("rank 0 goes on with 1 replica(s)"), "{}", e.text);
}

/// Children that start but never initialize MPI: the parents' spawn gives up after
/// `P2PMPI_SPAWN_TIMEOUT` with `MpiError::Spawn`, naming the cause, and the parents go on.
#[test]
fn children_that_never_connect_are_an_error_after_the_time_out() {
    let prog = example("spawn_checks");
    let o = run_cmd(
        std::process::Command::new(launcher())
            .args(["--local", "-n", "2", prog.to_str().unwrap(), "missing", "/bin/true"])
            .env("P2PMPI_SPAWN_TIMEOUT", "3"),
        T,
    );
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks missing"), 2, "{}", o.stdout);
    assert!(o.stderr.contains("the spawned process did not connect within 3s"), "{}", o.stderr);
    assert!(o.elapsed >= Duration::from_secs(3) && o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);
}

/// `--tag-output`: the spawned job's lines are told apart from the parents'.
#[test]
fn tagged_output_tells_the_children_apart() {
    let prog = example("spawn_checks");
    let o = run(&["--local", "-n", "2", "--tag-output", prog.to_str().unwrap(), "basic"], T);
    o.assert_ok();
    for r in 0..2 {
        let parent = format!("[{r}] OK spawn_checks basic: parent {r},");
        assert!(o.stdout.contains(&parent), "missing {parent:?} in:\n{}", o.stdout);
        let child = format!("[spawn1.{r}] child {r} of 2:");
        assert!(o.stdout.contains(&child), "missing {child:?} in:\n{}", o.stdout);
    }
}

#[test]
fn the_spawn_command_s_environment_reaches_the_children() {
    // The children check that the variable the parents' `Command` set is there, and that
    // the one it removed is gone although the launcher's environment has it.
    let prog = example("spawn_checks");
    let mut c = std::process::Command::new(launcher());
    c.args(["--local", "-n", "1", prog.to_str().unwrap(), "basic"])
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests")
        .env("SPAWN_CHECKS_GONE", "set in the launcher");
    let o = run_cmd(&mut c, T);
    o.assert_ok();
    assert_eq!(count(&o.stdout, "child "), 2, "{}", o.stdout);
}

fn spawn_collectives(n: usize, mode: &str) -> Outcome {
    let prog = example("spawn_collectives");
    run(&["--local", "-n", &n.to_string(), prog.to_str().unwrap(), mode], T)
}

#[test]
fn collectives_over_an_intercommunicator_take_the_other_group_s_contributions() {
    // 2 parents and 3 children: every group size differs, so a result taken from the wrong
    // group (or from both) has the wrong length or sum; the example checks each.
    assert_collectives(&spawn_collectives(2, ""), 2);
}

#[test]
fn a_rooted_collective_over_an_intercommunicator_is_a_clear_error() {
    let o = spawn_collectives(2, "rooted");
    assert_ne!(o.code(), Some(0), "{}", o.stderr);
    assert!(
        o.stderr.contains("broadcast_into over an intercommunicator is not supported (merge it first"),
        "{}",
        o.stderr
    );
}

#[test]
fn children_start_in_the_working_directory_of_the_spawning_command() {
    let dir = std::env::temp_dir().join(format!("p2pmpi-spawn-cwd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prog = example("spawn_checks");
    let o = run(&["--local", "-n", "2", prog.to_str().unwrap(), "cwd", dir.to_str().unwrap()], T);
    o.assert_ok();
    let here = dir.canonicalize().unwrap();
    assert_eq!(count(&o.stdout, &format!(": in {}", here.display())), 2, "{}", o.stdout);
    assert_eq!(count(&o.stdout, "OK spawn_checks cwd"), 2, "{}", o.stdout);
    // A directory that does not exist: the spawn fails, saying which directory.
    let missing = dir.join("missing");
    let o = run(&["--local", "-n", "2", prog.to_str().unwrap(), "cwd", missing.to_str().unwrap()], T);
    assert_ne!(o.code(), Some(0));
    assert!(o.stderr.contains("is not a directory") && o.stderr.contains("missing"), "{}", o.stderr);
    std::fs::remove_dir_all(&dir).unwrap();
}
