//! Dynamic processes of grid jobs: `spawn_checks` (in `p2pmpi-examples`) submitted to a local
//! grid of real daemons, each peer on its own loopback address. The children are reserved,
//! staged and launched through the submitter's peer daemon like the job itself; their output
//! comes back to the submitter's terminal.
#![forbid(unsafe_code)]

mod common;

use common::example;
use common::grid::TestGrid;
use std::collections::BTreeSet;
use std::time::Duration;

use common::spawn::{assert_collectives, assert_nested, count};

/// The hosts (`on HOST` at the end) of the lines that contain `pat`.
fn hosts(text: &str, pat: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains(pat))
        .filter_map(|l| l.rsplit(" on ").next().map(|h| h.trim().to_string()))
        .collect()
}

/// One process per host and job (`--procs 1`): two parents on two peers; their two children
/// are reserved at run time, one on the submitter and one on another peer. Both directions of
/// messages, an any-source receive across the intercommunicator, merge and an allreduce over
/// the four processes; the children's lines reach the submitter's terminal, tagged.
#[test]
fn grid_parents_spawn_children_on_other_peers_talk_both_ways_and_merge() {
    let g = TestGrid::start("spawn-basic", 4, &["--procs", "1"]);
    g.wait_hosts(1, 3);
    let prog = example("spawn_checks");
    let o = g.run(&["-n", "2", "--tag-output", prog.to_str().unwrap(), "basic"]);
    o.assert_ok();
    for r in 0..2 {
        let parent = format!("[{r}] OK spawn_checks basic: parent {r}, merged rank {r} of 4, sum 6 on ");
        assert!(o.stdout.contains(&parent), "missing {parent:?} in:\n{}", o.stdout);
        let child = format!("[spawn1.{r}] child {r} of 2: 2 parents, merged rank {} of 4, sum 6 on ", 2 + r);
        assert!(o.stdout.contains(&child), "missing {child:?} in:\n{}", o.stdout);
    }
    let children: BTreeSet<String> = hosts(&o.stdout, "[spawn1.").into_iter().collect();
    assert_eq!(children.len(), 2, "one child per peer (P = 1):\n{}", o.stdout);
    assert!(children.iter().all(|h| h.starts_with("127.0.0.")), "{children:?}");
    assert!(children.iter().any(|h| h != "127.0.0.2"), "a child runs on another peer than the submitter: {children:?}");
}

/// `spawn_multiple` on the grid: two programs (each reserved on its own), one world of 3 with
/// application numbers.
#[test]
fn grid_spawn_multiple_gives_one_world_with_application_numbers() {
    let g = TestGrid::start("spawn-multi", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let prog = example("spawn_checks");
    let o = g.run(&["-n", "2", prog.to_str().unwrap(), "multiple"]);
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks multiple"), 2, "{}", o.stdout);
    assert_eq!(count(&o.stdout, "first child "), 2, "{}", o.stdout);
    assert!(o.stdout.contains("second child 2 of 3 (appnum 1), parent size 2"), "{}", o.stdout);
}

/// A program that does not exist: every parent gets `MpiError::Spawn`, the root names the
/// cause, and the job goes on. Then no free peer (`MAX_JOBS = 1`, the parents hold every
/// host): the reservation fails within `-w`, with the daemon's reason, and the job goes on.
/// Then a spawn from a replicated job, refused on the grid.
#[test]
fn grid_spawn_of_a_missing_program_or_without_free_peers_is_a_clear_error() {
    let g = TestGrid::start("spawn-missing", 2, &["--procs", "2", "--max-jobs", "1"]);
    g.wait_hosts(1, 1);
    let prog = example("spawn_checks");
    let o = g.run(&["-n", "2", prog.to_str().unwrap(), "missing"]);
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks missing"), 2, "{}", o.stdout);
    assert!(
        o.stderr.contains("spawn failed: program '/nonexistent/p2pmpi-spawn-target' not found"),
        "the root names the cause:\n{}",
        o.stderr
    );
    assert!(o.elapsed < Duration::from_secs(30), "took {:?}", o.elapsed);

    let o = g.run(&["-n", "2", "-w", "1", prog.to_str().unwrap(), "missing", prog.to_str().unwrap()]);
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks missing"), 2, "{}", o.stdout);
    assert!(
        o.stderr.contains("spawn failed: cannot reserve 2 process(es) for spawn_checks on the grid"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("MAX_JOBS (1) reached"), "the daemon's reason:\n{}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(40), "took {:?}", o.elapsed);

    // From a replicated job (each rank's replicas on both peers): not on the grid yet, a
    // clear error on every replica of every parent, and the job goes on.
    let o = g.run(&["-n", "2", "-r", "2", prog.to_str().unwrap(), "missing", prog.to_str().unwrap()]);
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks missing"), 2, "{}", o.stdout);
    assert!(
        o.stderr.contains("spawn failed: spawning from a replicated job (-r) is supported with --local only"),
        "{}",
        o.stderr
    );
}

/// Children that die right after start-up, on the grid: the parents waiting for them stop
/// with an error naming the cause, never hang.
#[test]
fn grid_children_that_die_stop_the_parents_instead_of_hanging() {
    let g = TestGrid::start("spawn-panic", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let prog = example("spawn_checks");
    let o = g.run(&["-n", "2", prog.to_str().unwrap(), "child_panics"]);
    assert!(!o.status.success(), "the job succeeded:\n{}\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("panics on purpose"), "the children's panic is shown:\n{}", o.stderr);
    assert!(!o.stdout.contains("received"), "{}", o.stdout);
    assert!(o.elapsed < Duration::from_secs(50), "took {:?}", o.elapsed);
}

/// Children on the grid spawn in turn: the grandchild is reserved like them, and talks with
/// both children (its parents).
#[test]
fn grid_children_spawn_a_grandchild() {
    let g = TestGrid::start("spawn-nested", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let prog = example("spawn_checks");
    assert_nested(&g.run(&["-n", "2", prog.to_str().unwrap(), "nested"]));
}

/// Collectives over the intercommunicator when the 3 children are spread over the grid's
/// peers (`--procs 2`: at least two hosts), each group checking the other's contributions;
/// the children end with `disconnect_parent`.
#[test]
fn grid_collectives_over_an_intercommunicator_take_the_other_group_s_contributions() {
    let g = TestGrid::start("spawn-coll", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let prog = example("spawn_collectives");
    assert_collectives(&g.run(&["-n", "2", prog.to_str().unwrap()]), 2);
}
