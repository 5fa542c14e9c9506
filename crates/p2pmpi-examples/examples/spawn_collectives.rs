//! Collectives over an intercommunicator, written as an rsmpi program: the parents (`-n P`)
//! spawn 3 children of this program, and both groups run, over the intercommunicator,
//! `barrier`, `all_gather_into`, `all_reduce_into`, `all_to_all_into` and
//! `reduce_scatter_block_into`; each group checks that its results come from the *other*
//! group's contributions. `p2pmpirun --local -n 2 spawn_collectives` prints one `OK` line per
//! process; `... spawn_collectives rooted`: the parents try a broadcast over the
//! intercommunicator, which p2pmpi refuses with a clear error (rsmpi cannot name MPI's
//! `MPI_ROOT`), so the job fails with that message. The children end with
//! `disconnect_parent`, after which they have no parent. Every check panics when it fails.
#![forbid(unsafe_code)]

use mpi::collective::SystemOperation;
use mpi::topology::{InterCommunicator, MergeOrder};
use mpi::traits::*;
use mpi::Rank;
use std::process::Command;

const CHILDREN: Rank = 3;

/// A process's contribution: its group (0 parents, 1 children) and rank.
fn value(group: Rank, rank: Rank) -> i64 {
    1000 * (group as i64 + 1) + rank as i64
}

/// The same program on both sides: `group` is this side's, `local` its size.
fn exercise(ic: &InterCommunicator, group: Rank, local: Rank) {
    let (rank, remote) = (ic.rank(), ic.remote_size());
    let other = 1 - group;
    assert_eq!(ic.size(), local);
    assert!(ic.test_inter(), "test_inter of an intercommunicator");
    let merged = ic.merge(if group == 0 { MergeOrder::Low } else { MergeOrder::High });
    assert!(!merged.test_inter(), "test_inter of an intracommunicator (the merged one)");

    ic.barrier();

    // all_gather: every remote process's value, in remote rank order.
    let mut all = vec![0i64; remote as usize];
    ic.all_gather_into(&value(group, rank), &mut all[..]);
    let want: Vec<i64> = (0..remote).map(|r| value(other, r)).collect();
    assert_eq!(all, want, "all_gather_into over the intercommunicator");

    // all_reduce: the sum of the remote group's values, two elements each.
    let mine = [value(group, rank), 1];
    let mut sum = [0i64; 2];
    ic.all_reduce_into(&mine[..], &mut sum[..], SystemOperation::sum());
    let want = [(0..remote).map(|r| value(other, r)).sum::<i64>(), remote as i64];
    assert_eq!(sum, want, "all_reduce_into over the intercommunicator");

    // all_to_all: block j to remote rank j; from remote rank j, its block for us.
    let out: Vec<i64> = (0..remote).map(|j| 100_000 * (group as i64 + 1) + 100 * rank as i64 + j as i64).collect();
    let mut inp = vec![0i64; remote as usize];
    ic.all_to_all_into(&out[..], &mut inp[..]);
    let want: Vec<i64> = (0..remote).map(|j| 100_000 * (other as i64 + 1) + 100 * j as i64 + rank as i64).collect();
    assert_eq!(inp, want, "all_to_all_into over the intercommunicator");

    // reduce_scatter_block: each process gives one element per *remote* rank; remote rank i
    // gets the sum over this group of element i.
    let contrib: Vec<i64> = (0..remote).map(|i| value(group, rank) * (i as i64 + 1)).collect();
    let mut got = 0i64;
    ic.reduce_scatter_block_into(&contrib[..], &mut got, SystemOperation::sum());
    let want = (0..remote).map(|r| value(other, r)).sum::<i64>() * (rank as i64 + 1);
    assert_eq!(got, want, "reduce_scatter_block_into over the intercommunicator");

    ic.barrier();
    println!(
        "OK spawn_collectives: {} {rank} of {local}, remote group of {remote}",
        if group == 0 { "parent" } else { "child" }
    );
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let mode = std::env::args().nth(1).unwrap_or_default();
    if let Some(parent) = world.parent() {
        if mode != "rooted" {
            exercise(&parent, 1, world.size());
        }
        let mut universe = universe;
        universe.disconnect_parent();
        assert!(world.parent().is_none(), "no parent after disconnect_parent");
        return;
    }
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.arg(&mode);
    let ic = world.process_at_rank(0).spawn(&cmd, CHILDREN).expect("spawn");
    if mode == "rooted" {
        let mut x = 0i32;
        ic.process_at_rank(0).broadcast_into(&mut x);
        unreachable!("a broadcast over an intercommunicator must be refused");
    }
    exercise(&ic, 0, world.size());
}
