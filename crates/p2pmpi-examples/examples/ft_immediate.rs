//! A fault-aware program built on immediate collectives (`mpi::ulfm`'s `try_immediate_*`
//! forms): each round starts its sum with `try_immediate_all_reduce_into`, computes its
//! next share while the sum runs, and waits with `try_wait`; then rank 0's sum is broadcast
//! with `try_immediate_broadcast_into`, polled with `try_test`, and checked.
//!
//! When a rank is killed, a round's request fails (`try_wait` or `try_test` returns the
//! error) instead of stopping the process. Whoever sees an error revokes the communicator, so
//! every survivor's pending or next request on it fails too; then all agree on whether
//! everyone finished, shrink, agree on the rounds every survivor completed, and go on from
//! there with the work spread over fewer ranks.
//!
//! Usage: `ft_immediate [ROUNDS] [TASKS_PER_ROUND] [HOLD_MS]` (defaults 20, 1000, 0): HOLD_MS
//! pauses after each round, so that a test can kill a rank mid-run.
//!
//! Prints `rank R ready pid PID on HOST at 0` at the start, `rank R: a wrong call returned its
//! error: ERROR` (a gather's non-root form called on the root), `round K done on N ranks` (rank 0
//! of the communicator), `rank R: round K failed in STEP: ERROR` on an error,
//! `shrunk from A to B ranks; round K again`, and at the end
//! `total SUM over ROUNDS rounds on N of M ranks: correct` (or `WRONG`), the sum being the
//! one a single process computes.
#![forbid(unsafe_code)]

use mpi::collective::SystemOperation;
use mpi::traits::*;
use mpi::ulfm::{FaultError, FaultTolerant, TryImmediateCollectives, TryImmediateRoot};

use p2pmpi_examples::{error_kind, path, work_item as h};

/// This rank's share of round `k`: the tasks `t` of the round with `t mod size = rank`.
fn part(k: u64, per_round: u64, rank: u64, size: u64) -> u64 {
    (k * per_round..(k + 1) * per_round).filter(|t| t % size == rank).fold(0u64, |a, t| a.wrapping_add(h(t)))
}

/// One round on `comm`: the sum of every rank's share, then rank 0's sum broadcast and
/// compared. `Err((step, error))` when a request failed.
fn round(comm: &mpi::topology::SimpleCommunicator, mine: u64) -> Result<u64, (&'static str, mpi::CommError)> {
    let mut sum = 0u64;
    mpi::request::scope(|scope| {
        let req = comm
            .try_immediate_all_reduce_into(scope, &mine, &mut sum, SystemOperation::sum())
            .map_err(|e| ("all-reduce", e))?;
        req.try_wait().map_err(|e| ("all-reduce", e))
    })?;
    let mut root_sum = if comm.rank() == 0 { sum } else { 0 };
    mpi::request::scope(|scope| {
        let mut req =
            comm.process_at_rank(0).try_immediate_broadcast_into(scope, &mut root_sum).map_err(|e| ("broadcast", e))?;
        loop {
            match req.try_test() {
                Ok(done) => return done.map_err(|e| ("broadcast", e)),
                Err(pending) => req = pending,
            }
            std::thread::yield_now();
        }
    })?;
    assert_eq!(root_sum, sum, "rank 0's sum differs from this rank's");
    Ok(sum)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(|s| s.trim()).filter(|s| !s.is_empty());
    let rounds: u64 = arg(0).map_or(20, |s| s.parse().expect("ROUNDS"));
    let per_round: u64 = arg(1).map_or(1000, |s| s.parse().expect("TASKS_PER_ROUND")).max(1);
    let hold = std::time::Duration::from_millis(arg(2).map_or(0, |s| s.parse().expect("HOLD_MS")));

    mpi::failure::set_policy(mpi::failure::Policy::Notify);
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let n = world.size();
    let me = world.rank();
    let host = mpi::environment::processor_name().unwrap_or_default();
    println!("rank {me} ready pid {} on {host} at 0", std::process::id());
    // A wrong call returns its error (the plain form would stop the process): the root's
    // own contribution to a gather goes through `try_immediate_gather_into_root`.
    match world.process_at_rank(me).try_immediate_gather_into(mpi::request::StaticScope, &0u64) {
        Ok(_) => panic!("try_immediate_gather_into on the root started"),
        Err(e) => println!("rank {me}: a wrong call returned its error: {e}"),
    }
    world.barrier();

    let mut comm = world.duplicate();
    // The sum of every round completed, in order.
    let mut sums: Vec<u64> = Vec::new();
    loop {
        let mut finished = true;
        while (sums.len() as u64) < rounds {
            let k = sums.len() as u64;
            let mine = part(k, per_round, comm.rank() as u64, comm.size() as u64);
            match round(&comm, mine) {
                Ok(sum) => {
                    path(format!("round {} on {} ranks: {sum:016x}", k + 1, comm.size()));
                    sums.push(sum);
                    if comm.rank() == 0 {
                        println!("round {} done on {} ranks", k + 1, comm.size());
                    }
                    std::thread::sleep(hold);
                }
                Err((step, e)) => {
                    println!("rank {me}: round {} failed in {step}: {e}", k + 1);
                    path(format!("round {} failed in {step}: {}", k + 1, error_kind(&e)));
                    // Everyone else's pending or next request on it fails too.
                    comm.revoke().unwrap_or_else(|e| panic!("revoke: {e}"));
                    finished = false;
                    break;
                }
            }
        }
        comm.failure_ack();
        let all_finished = match comm.agree(u32::from(finished)) {
            Ok(f) => f,
            Err(FaultError::ProcFailed { agreed, .. }) => agreed,
            Err(e) => panic!("agreement: {e}"),
        };
        path(format!("agreed {all_finished}, acknowledged {:?}", comm.failure_get_acked()));
        if all_finished == 1 {
            break;
        }
        let before = comm.size();
        comm.failure_ack();
        comm = comm.shrink().unwrap_or_else(|e| panic!("shrink: {e}"));
        // Go on from the rounds every survivor completed (an immediate reduction too).
        let done = sums.len() as u64;
        let mut least = 0u64;
        mpi::request::scope(|s| comm.immediate_all_reduce_into(s, &done, &mut least, SystemOperation::min()).wait());
        sums.truncate(least as usize);
        path(format!("shrunk from {before} to {}: rank {}, from round {}", comm.size(), comm.rank(), least + 1));
        if comm.rank() == 0 {
            println!("shrunk from {before} to {} ranks; round {} again", comm.size(), least + 1);
        }
    }
    if comm.rank() == 0 {
        let total = sums.iter().fold(0u64, |a, s| a.wrapping_add(*s));
        let want = (0..rounds * per_round).fold(0u64, |a, t| a.wrapping_add(h(t)));
        let verdict = if total == want { "correct" } else { "WRONG" };
        println!("total {total:016x} over {rounds} rounds on {} of {n} ranks: {verdict}", comm.size());
    }
}
