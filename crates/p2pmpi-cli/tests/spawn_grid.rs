//! Dynamic processes of grid jobs: `spawn_checks` (in `p2pmpi-examples`) submitted to a local
//! grid of real daemons, each peer on its own loopback address. The children are reserved,
//! staged and launched through the submitter's peer daemon like the job itself; their output
//! comes back to the submitter's terminal.
#![forbid(unsafe_code)]

mod common;

use common::grid::{bin, TestGrid};
use common::job::Job;
use common::{env_of, example, marker, processes_with};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::spawn::{assert_collectives, assert_nested, count, kill_and_wait, resume_fault_free};

/// A replicated grid job that hangs fails here.
const T: Duration = Duration::from_secs(120);

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
/// Then the same missing program from a replicated job: every replica of every parent gets
/// the error, printed once (by the root's master), and the job goes on.
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

    // From a replicated job (each rank's replicas on both peers).
    let o = g.run(&["-n", "2", "-r", "2", prog.to_str().unwrap(), "missing"]);
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks missing"), 2, "{}", o.stdout);
    assert_eq!(
        count(&o.stderr, "spawn failed: program '/nonexistent/p2pmpi-spawn-target' not found"),
        1,
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

/// The processes of a replicated grid job and its children: (child?, slot in its own job)
/// with the pid and the host (`P2PMPI_BIND`, the address its peer gave it).
type Procs = Vec<((bool, usize), (u32, String))>;

/// `-n 2 -r 2 spawn_checks pause` submitted to `g` (3 peers): the parents spawn 2 children,
/// replicated too, which pause half-way. The job, the directory whose `go` file releases the
/// children, and every process (2 parents and 2 children, 2 replicas each) with its host.
fn paused_replicated_grid_spawn(g: &TestGrid, test: &str) -> (Job, PathBuf, Procs) {
    let marker = marker(test);
    let dir = std::env::temp_dir().join(&marker);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = Command::new(bin("p2pmpirun"));
    cmd.args(["-n", "2", "-r", "2"])
        .arg(example("spawn_checks"))
        .arg("pause")
        .arg(&dir)
        .env("P2PMPI_HOME", g.home(1))
        .env_remove("P2PMPI_CONF_FILE");
    let job = Job::spawn(&mut cmd);
    job.wait_for(T, "both children paused", |lines| {
        let seen = |r: usize| lines.iter().any(|l| !l.stderr && l.text == format!("child {r} paused"));
        (seen(0) && seen(1)).then_some(())
    });
    let procs: Procs = processes_with(&marker)
        .into_iter()
        .filter_map(|pid| {
            let slot = env_of(pid, "P2PMPI_RANK")?.parse().ok()?;
            assert_eq!(env_of(pid, "P2PMPI_REPLICAS").as_deref(), Some("2"), "pid {pid}: replicated");
            let host = env_of(pid, "P2PMPI_BIND").unwrap_or_default();
            Some(((env_of(pid, "P2PMPI_SPAWN_BASE").is_some(), slot), (pid, host)))
        })
        .collect();
    let mut slots: Vec<(bool, usize)> = procs.iter().map(|p| p.0).collect();
    slots.sort();
    let want: Vec<(bool, usize)> = (0..4).map(|s| (false, s)).chain((0..4).map(|s| (true, s))).collect();
    assert_eq!(slots, want, "2 parents and 2 children, 2 replicas each:\n{}", job.text());
    (job, dir, procs)
}

/// The host of a process of [`paused_replicated_grid_spawn`].
fn host_of(procs: &Procs, who: (bool, usize)) -> String {
    procs.iter().find(|p| p.0 == who).map(|p| p.1 .1.clone()).unwrap()
}

/// A replicated grid job (`-n 2 -r 2`) spawns: its children are reserved through the grid as
/// replicated ranks (2 replicas of each child rank, on different peers, as the parents'
/// replicas are), messages go both ways across the intercommunicator (6 rounds, each checked
/// with its source), then merge and allreduce; each line reaches the submitter's terminal
/// once.
#[test]
fn a_replicated_grid_job_spawns_replicas_of_each_child_on_different_hosts() {
    let g = TestGrid::start("spawn-repl", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let (job, dir, procs) = paused_replicated_grid_spawn(&g, "grid-spawn-repl");
    for child in [false, true] {
        for k in 0..2 {
            let (a, b) = (host_of(&procs, (child, 2 * k)), host_of(&procs, (child, 2 * k + 1)));
            assert!(a.starts_with("127.0.0.") && b.starts_with("127.0.0."), "{procs:?}");
            assert_ne!(a, b, "the replicas of rank {k} (child: {child}) share a host: {procs:?}");
        }
    }
    let e = resume_fault_free(job, &dir, T);
    assert!(!e.text.contains("spawn failed"), "{}", e.text);
}

/// `spawn_multiple` and a grandchild from a replicated grid job (`-n 2 -r 2`): each program
/// is reserved with 2 replicas of each of its ranks (the second program's rank 0 is rank 2 of
/// the spawned world, its replicas slots 4 and 5), and so is the grandchild the children spawn;
/// every line once per logical rank.
#[test]
fn a_replicated_grid_job_s_spawn_multiple_and_grandchildren() {
    let g = TestGrid::start("spawn-repl-multi", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let prog = example("spawn_checks");
    let o = g.run(&["-n", "2", "-r", "2", prog.to_str().unwrap(), "multiple"]);
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks multiple"), 2, "{}", o.stdout);
    assert_eq!(count(&o.stdout, "first child "), 2, "{}", o.stdout);
    assert_eq!(count(&o.stdout, "second child 2 of 3 (appnum 1), parent size 2"), 1, "{}", o.stdout);
    let o = g.run(&["-n", "2", "-r", "2", prog.to_str().unwrap(), "nested"]);
    assert_nested(&o);
    assert_eq!(count(&o.stdout, "grandchild of 2 parents"), 1, "{}", o.stdout);
}

/// A child replica killed (kill -9) on its peer while the children wait half-way: the
/// master of child rank 1. Its replica takes over, the parents and the other children go on,
/// and the output is the fault-free one.
#[test]
fn killing_a_replica_of_a_grid_spawned_child_leaves_the_output_fault_free() {
    let g = TestGrid::start("spawn-repl-kill", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let (job, dir, procs) = paused_replicated_grid_spawn(&g, "grid-spawn-repl-kill");
    let pid = procs.iter().find(|p| p.0 == (true, 2)).unwrap().1 .0;
    kill_and_wait(pid, &dir);
    let e = resume_fault_free(job, &dir, T);
    assert!(
        e.text.contains("(spawned job): rank 1 replica 0") && e.text.contains("rank 1 goes on with 1 replica(s)"),
        "{}",
        e.text
    );
}

/// The root's master (parent rank 0's replica 0, on the submitter) killed (kill -9) while
/// the children wait: the parents' launcher declares it dead and tells the children's job,
/// whose processes go on with its replica on another peer; the output is the fault-free one.
#[test]
fn killing_the_root_s_master_after_a_grid_spawn_leaves_the_output_fault_free() {
    let g = TestGrid::start("spawn-repl-kill-root", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let (job, dir, procs) = paused_replicated_grid_spawn(&g, "grid-spawn-repl-kill-root");
    let pid = procs.iter().find(|p| p.0 == (false, 0)).unwrap().1 .0;
    kill_and_wait(pid, &dir);
    let e = resume_fault_free(job, &dir, T);
    assert!(e.text.contains("rank 0 goes on with 1 replica(s)"), "{}", e.text);
}

/// The root's master (rank 0's replica 0, on the submitter) dies in the middle of a spawn
/// (fault injection, the test programs are built with `failpoints`): before it asks the
/// launcher, and after the launcher reserved and started the children and answered but before
/// the answer was broadcast. Its replica on another peer takes over and makes the same
/// request: the launcher starts one set of children only, and the job ends with the
/// fault-free output.
#[test]
fn the_root_s_master_dying_mid_spawn_on_the_grid_leaves_one_set_of_children() {
    let g = TestGrid::start("spawn-repl-root", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let prog = example("spawn_checks");
    for window in ["spawn_before_request", "spawn_after_answer"] {
        let mut cmd = Command::new(bin("p2pmpirun"));
        cmd.args(["-n", "2", "-r", "2", "--tag-output", prog.to_str().unwrap(), "basic"])
            .env("P2PMPI_HOME", g.home(1))
            .env_remove("P2PMPI_CONF_FILE")
            .env("P2PMPI_FAILPOINTS_SLOT0", format!("{window}=return"));
        let o = common::run_cmd(&mut cmd, T);
        o.assert_ok();
        assert!(o.stderr.contains(&format!("failpoint {window}: this process dies now")), "{window}: {}", o.stderr);
        assert!(o.stderr.contains("rank 0 goes on with 1 replica(s)"), "{window}: {}", o.stderr);
        for r in 0..2 {
            let parent = format!("[{r}] OK spawn_checks basic: parent {r}, merged rank {r} of 4, sum 6 on ");
            assert!(o.stdout.contains(&parent), "{window}: missing {parent:?} in:\n{}", o.stdout);
            let child = format!("[spawn1.{r}] child {r} of 2: 2 parents, merged rank {} of 4, sum 6 on ", 2 + r);
            assert!(o.stdout.contains(&child), "{window}: missing {child:?} in:\n{}", o.stdout);
        }
        assert_eq!(count(&o.stdout, "child "), 2, "{window}: {}", o.stdout);
        assert_eq!(count(&o.stdout, "[spawn2."), 0, "{window}: a second set of children:\n{}", o.stdout);
        assert!(!o.stderr.contains("spawn failed"), "{window}: {}", o.stderr);
    }
}

/// A grid too small for the children's replicas: 2 peers, the second running one job at most
/// (`MAX_JOBS=1`) and holding the parents' replicas. Each child rank needs 2 different hosts,
/// only the submitter is free: every parent's spawn fails within `-w` with a clear error (how
/// many processes, why), and the job goes on.
#[test]
fn a_grid_without_distinct_hosts_for_the_children_s_replicas_is_a_clear_error() {
    let g = TestGrid::start("spawn-repl-short", 2, &["--procs", "2"]);
    g.reconfigure(2, &["MAX_JOBS=1"]);
    g.wait_hosts(1, 1);
    let prog = example("spawn_checks");
    let o = g.run(&["-n", "1", "-r", "2", "-w", "1", prog.to_str().unwrap(), "missing", prog.to_str().unwrap()]);
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks missing"), 1, "{}", o.stdout);
    assert!(
        o.stderr.contains(
            "spawn failed: cannot reserve 2×2 process(es) (-r 2: the replicas of a rank on different hosts) for \
             spawn_checks on the grid"
        ),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("2 replicas need 2 different hosts"), "why:\n{}", o.stderr);
    assert_eq!(count(&o.stderr, "spawn failed"), 1, "the root's master says it once:\n{}", o.stderr);
    assert!(o.elapsed < Duration::from_secs(40), "took {:?}", o.elapsed);
}
