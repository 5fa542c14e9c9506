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

use common::spawn::{assert_collectives, assert_nested, count};

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

/// Not supported yet with replicas: every replica of the root gets `MpiError::Spawn`, the cause
/// is printed, and the job goes on.
#[test]
fn spawn_in_a_replicated_job_is_a_clear_error() {
    let prog = example("spawn_checks");
    let o = run(&["--local", "-n", "2", "-r", "2", prog.to_str().unwrap(), "missing"], T);
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks missing"), 2, "{}", o.stdout);
    assert!(o.stderr.contains("spawn is not supported in replicated jobs (-r) yet"), "{}", o.stderr);
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
