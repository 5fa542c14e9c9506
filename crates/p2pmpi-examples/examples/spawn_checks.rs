//! Dynamic processes, written as an rsmpi program: `spawn`, `spawn_multiple`, `parent`,
//! point-to-point across the intercommunicator both ways, `merge`, and a spawn that fails.
//!
//! `p2pmpirun --local -n 2 spawn_checks basic`: the parents spawn 2 children of this program;
//! every parent sends each child a value and receives one back (sources checked), then both
//! groups merge (parents `Low`) and check an allreduce over the 4 processes.
//! `... spawn_checks multiple`: `spawn_multiple` of 2 + 1 children with their own arguments
//! and application numbers. `tie`: both groups merge `Low` (the parents come first). `nested`:
//! the children spawn a grandchild, which talks to both of them. `... spawn_checks missing`: spawning a program that does not
//! exist is an `MpiError::Spawn`, and the parents go on. `... spawn_checks child_panics`: the
//! children panic; the parents waiting for them must stop with an error. `... spawn_checks
//! cwd DIR`: the children start in the working directory the spawning `Command` names.
//! `... spawn_checks pause DIR`: parents and children exchange 6 rounds of values both ways;
//! after 3 the children print `child K paused` and wait until the file `DIR/go` exists (a
//! test kills a child replica meanwhile), then merge and check an allreduce. Every
//! check panics when it fails. The `basic` lines end with `on HOST`: the address the process's peer gave it
//! (`local` without a grid).
#![forbid(unsafe_code)]

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::{InterCommunicator, MergeOrder, SimpleCommunicator};
use mpi::traits::*;
use mpi::Rank;
use std::process::Command;

fn child_command(args: &[&str]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(args).env("SPAWN_CHECKS_FROM", "the parents' Command").env_remove("SPAWN_CHECKS_GONE");
    c
}

/// The address this process's peer gave it (`local` for `p2pmpirun --local`).
fn host() -> String {
    std::env::var("P2PMPI_BIND").unwrap_or_else(|_| "local".into())
}

/// Rounds of the `pause` mode.
const ROUNDS: i32 = 6;

/// Waits (at most 60 s) until `path` exists.
fn wait_for_file(path: &std::path::Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !path.exists() {
        assert!(std::time::Instant::now() < deadline, "{} did not appear within 60 s", path.display());
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn main() -> Result<(), mpi::MpiError> {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("basic");

    if let Some(parent) = world.parent() {
        return child_main(&universe, &world, &parent, mode, &args);
    }
    parent_main(&world, mode, &args)
}

/// A spawned process: runs the child side of `mode`.
fn child_main(
    universe: &Universe,
    world: &SimpleCommunicator,
    parent: &InterCommunicator,
    mode: &str,
    args: &[String],
) -> Result<(), mpi::MpiError> {
    let (rank, size) = (world.rank(), world.size());
    let np = parent.remote_size();
    match mode {
        "child" => child_basic(parent, rank, size),
        "pause_child" => child_pause(parent, rank, size, args),
        "first" | "second" => {
            let appnum = universe.appnum().unwrap_or(-1);
            assert_eq!(appnum, if mode == "first" { 0 } else { 1 });
            assert_eq!(size, 3, "both programs share one world");
            parent.process_at_rank(0).send(&(100 * appnum as i32 + rank));
            println!("{mode} child {rank} of {size} (appnum {appnum}), parent size {np}");
        }
        "panic" => panic!("child {rank} panics on purpose"),
        "tie" => {
            // Both groups say Low: the parents come first.
            let merged = parent.merge(MergeOrder::Low);
            assert_eq!(merged.rank(), np + rank);
            println!("tie child {rank}: merged rank {}", merged.rank());
        }
        "nested_child" => {
            // A child spawns a grandchild from its own world, and relays its value up.
            let grandchild = world.process_at_rank(1).spawn(&child_command(&["grandchild"]), 1)?;
            let (v, st) = grandchild.process_at_rank(0).receive::<i32>();
            assert_eq!((v, st.source_rank()), (300 + rank, 0));
            parent.process_at_rank(0).send(&v);
            println!("nested child {rank} relayed {v}");
        }
        "grandchild" => {
            assert_eq!((np, size), (2, 1), "a grandchild's parents are the children's world");
            for p in 0..np {
                parent.process_at_rank(p).send(&(300 + p));
            }
            println!("grandchild of {np} parents");
        }
        "cwd_child" => {
            // Started in the directory the parents' `Command` named.
            let want = std::path::Path::new(&args[1]).canonicalize().unwrap();
            let here = std::env::current_dir().unwrap().canonicalize().unwrap();
            assert_eq!(here, want, "the spawning Command's working directory");
            parent.merge(MergeOrder::High).barrier();
            println!("cwd child {rank}: in {}", here.display());
        }
        other => panic!("unknown child mode {other}"),
    }
    Ok(())
}

/// The child side of `basic`: values both ways with the parents, then the merged allreduce.
fn child_basic(parent: &InterCommunicator, rank: Rank, size: Rank) {
    let np = parent.remote_size();
    assert_eq!(size, 2, "the children's own world");
    assert_eq!(std::env::var("SPAWN_CHECKS_FROM").as_deref(), Ok("the parents' Command"));
    assert!(std::env::var_os("SPAWN_CHECKS_GONE").is_none(), "removed by the parents' Command");
    for p in 0..np {
        let (v, st) = parent.process_at_rank(p).receive::<i32>();
        assert_eq!(v, 1000 + 10 * p + rank, "value from parent {p}");
        assert_eq!(st.source_rank(), p, "source of the parent's message");
    }
    for p in 0..np {
        parent.process_at_rank(p).send(&(2000 + 10 * rank + p));
    }
    // Received from any process of the remote group by the parents.
    for p in 0..np {
        parent.process_at_rank(p).send_with_tag(&rank, 7);
    }
    assert_eq!(parent.remote_group().size(), np);
    let merged = parent.merge(MergeOrder::High);
    assert_eq!(merged.size(), np + size);
    assert_eq!(merged.rank(), np + rank, "children come after the parents");
    let mut sum = 0;
    merged.all_reduce_into(&merged.rank(), &mut sum, SystemOperation::sum());
    let n = merged.size();
    assert_eq!(sum, n * (n - 1) / 2);
    println!("child {rank} of {size}: {np} parents, merged rank {} of {n}, sum {sum} on {}", merged.rank(), host());
}

/// The child side of `pause`: rounds with the parents, waiting for `DIR/go` halfway.
fn child_pause(parent: &InterCommunicator, rank: Rank, size: Rank, args: &[String]) {
    let np = parent.remote_size();
    let dir = std::path::PathBuf::from(&args[1]);
    for round in 0..ROUNDS {
        if round == ROUNDS / 2 {
            println!("child {rank} paused");
            wait_for_file(&dir.join("go"));
        }
        for p in 0..np {
            let (v, st) = parent.process_at_rank(p).receive::<i32>();
            assert_eq!((v, st.source_rank()), (100 * round + 10 * p + rank, p), "round {round}");
            parent.process_at_rank(p).send(&(5000 + 100 * round + 10 * rank + p));
        }
    }
    let merged = parent.merge(MergeOrder::High);
    let mut sum = 0;
    merged.all_reduce_into(&merged.rank(), &mut sum, SystemOperation::sum());
    let n = merged.size();
    assert_eq!(sum, n * (n - 1) / 2);
    println!("child {rank} of {size}: {ROUNDS} rounds, merged rank {} of {n}, sum {sum}", merged.rank());
}

/// A process of the first job: runs the parent side of `mode`.
fn parent_main(world: &SimpleCommunicator, mode: &str, args: &[String]) -> Result<(), mpi::MpiError> {
    let (rank, size) = (world.rank(), world.size());
    match mode {
        "basic" => parent_basic(world, rank, size)?,
        "pause" => parent_pause(world, rank, args)?,
        "multiple" => {
            let cmds = [child_command(&["first"]), child_command(&["second"])];
            let child = world.process_at_rank(0).spawn_multiple(&cmds, &[2, 1])?;
            assert_eq!(child.remote_size(), 3);
            if rank == 0 {
                let mut got: Vec<i32> = (0..3).map(|c| child.process_at_rank(c).receive::<i32>().0).collect();
                got.sort();
                assert_eq!(got, vec![0, 1, 102]);
            }
            println!("OK spawn_checks multiple: parent {rank}");
        }
        "missing" => {
            // A program that does not exist, or (second argument) one that never starts MPI.
            let cmd = Command::new(args.get(1).map_or("/nonexistent/p2pmpi-spawn-target", String::as_str));
            match world.process_at_rank(0).spawn(&cmd, 2) {
                Err(mpi::MpiError::Spawn(failed, asked)) => assert_eq!((failed, asked), (2, 2)),
                Err(e) => panic!("unexpected error {e}"),
                Ok(_) => panic!("spawning a missing program succeeded"),
            }
            // The parents go on.
            let mut sum = 0;
            world.all_reduce_into(&1, &mut sum, SystemOperation::sum());
            assert_eq!(sum, size);
            println!("OK spawn_checks missing: parent {rank}");
        }
        "tie" => {
            let child = world.process_at_rank(0).spawn(&child_command(&["tie"]), 2)?;
            let merged = child.merge(MergeOrder::Low);
            assert_eq!(merged.rank(), rank);
            println!("OK spawn_checks tie: parent {rank}");
        }
        "nested" => {
            let child = world.process_at_rank(0).spawn(&child_command(&["nested_child"]), 2)?;
            if rank == 0 {
                let mut got: Vec<i32> = (0..2).map(|c| child.process_at_rank(c).receive::<i32>().0).collect();
                got.sort();
                assert_eq!(got, vec![300, 301]);
            }
            println!("OK spawn_checks nested: parent {rank}");
        }
        "child_panics" => {
            // The children die right after start-up: the parents' receive must fail (the job
            // stops naming the cause), never wait forever.
            let child = world.process_at_rank(0).spawn(&child_command(&["panic"]), 2)?;
            let v = child.process_at_rank(0).receive::<i32>().0;
            panic!("received {v} from a child that panicked");
        }
        "cwd" => {
            // The children start in the directory the `Command` names (argument 1).
            let dir = args.get(1).expect("a directory").clone();
            let mut cmd = child_command(&["cwd_child", &dir]);
            cmd.current_dir(&dir);
            let child = world.process_at_rank(0).spawn(&cmd, 2)?;
            child.merge(MergeOrder::Low).barrier();
            println!("OK spawn_checks cwd: parent {rank}");
        }
        other => panic!("unknown mode {other}"),
    }
    Ok(())
}

/// The parent side of `basic`: spawn 2 children, values both ways, any-source receives, merge.
fn parent_basic(world: &SimpleCommunicator, rank: Rank, size: Rank) -> Result<(), mpi::MpiError> {
    let child = world.process_at_rank(0).spawn(&child_command(&["child"]), 2)?;
    assert_eq!(child.remote_size(), 2);
    assert_eq!((child.rank(), child.size()), (rank, size));
    for c in 0..child.remote_size() {
        child.process_at_rank(c).send(&(1000 + 10 * rank + c));
    }
    for c in 0..child.remote_size() {
        let (v, st) = child.process_at_rank(c).receive::<i32>();
        assert_eq!(v, 2000 + 10 * c + rank, "value from child {c}");
        assert_eq!(st.source_rank(), c);
    }
    let mut from: Vec<Rank> = (0..2)
        .map(|_| {
            let (v, st) = child.any_process().receive_with_tag::<i32>(7);
            assert_eq!(v, st.source_rank(), "any-source receive across the intercommunicator");
            v
        })
        .collect();
    from.sort();
    assert_eq!(from, vec![0, 1]);
    let merged = child.merge(MergeOrder::Low);
    assert_eq!(merged.size(), size + 2);
    assert_eq!(merged.rank(), rank, "parents come first");
    let mut sum = 0;
    merged.all_reduce_into(&merged.rank(), &mut sum, SystemOperation::sum());
    let n = merged.size();
    assert_eq!(sum, n * (n - 1) / 2);
    println!("OK spawn_checks basic: parent {rank}, merged rank {} of {n}, sum {sum} on {}", merged.rank(), host());
    Ok(())
}

/// The parent side of `pause`: spawn 2 children, rounds both ways, merge.
fn parent_pause(world: &SimpleCommunicator, rank: Rank, args: &[String]) -> Result<(), mpi::MpiError> {
    let child = world.process_at_rank(0).spawn(&child_command(&["pause_child", &args[1]]), 2)?;
    for round in 0..ROUNDS {
        for c in 0..child.remote_size() {
            child.process_at_rank(c).send(&(100 * round + 10 * rank + c));
            let (v, st) = child.process_at_rank(c).receive::<i32>();
            assert_eq!((v, st.source_rank()), (5000 + 100 * round + 10 * c + rank, c), "round {round}");
        }
    }
    let merged = child.merge(MergeOrder::Low);
    let mut sum = 0;
    merged.all_reduce_into(&merged.rank(), &mut sum, SystemOperation::sum());
    let n = merged.size();
    assert_eq!(sum, n * (n - 1) / 2);
    println!("OK spawn_checks pause: parent {rank}, {ROUNDS} rounds, merged rank {} of {n}, sum {sum}", merged.rank());
    Ok(())
}
