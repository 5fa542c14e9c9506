//! A fault-aware iterative program (ULFM style, `mpi::ulfm`): it survives ranks killed while
//! it runs, shrinks its communicator to the survivors, redistributes the lost work and still
//! prints the right answer.
//!
//! Usage: `p2pmpirun -n N ft_solver [TASKS [ROUND [HOLD_MS]]]`
//! - TASKS: work items (default 20000); item `t` is worth `h(t)` (a hash of `t`);
//! - ROUND: items per round (default 1000);
//! - HOLD_MS: pause after each round (default 0), so that a test can kill a rank mid-run.
//!
//! Every rank prints `rank R ready pid PID on HOST at 0` at the start. Each round, the
//! items of the round are dealt over the communicator's ranks (`t mod size`); the partial
//! sums go to rank 0 and the round's sum comes back, with `try_` calls that return errors
//! when a rank has failed; then every survivor **agrees** on whether the round went through
//! everywhere. If not, they **shrink** the communicator to the survivors and run the round
//! again over them: the dead ranks' items are redistributed. Rank 0 of the final
//! communicator prints `total HEX over TASKS tasks on K of N ranks: correct` (or `WRONG`),
//! comparing with the sum computed alone.
#![forbid(unsafe_code)]
use mpi::traits::*;
use mpi::ulfm::{FaultError, FaultTolerant};

use p2pmpi_examples::{error_kind, path, work_item as h};

/// One round's reduction to rank 0 and back: the round's sum, or None if a rank failed.
fn reduce_round(comm: &impl Communicator, part: u64, tag: i32) -> Option<u64> {
    let (me, size) = (comm.rank(), comm.size());
    if me == 0 {
        let mut sum = part;
        let mut ok = true;
        for r in 1..size {
            let mut v = [0u64; 1];
            match comm.process_at_rank(r).try_receive_into_with_tag(&mut v[..], tag) {
                Ok(_) => sum = sum.wrapping_add(v[0]),
                Err(e) => {
                    path(format!("receive from {r} failed: {}", error_kind(&e)));
                    ok = false;
                }
            }
        }
        let answer = [u64::from(ok), sum];
        for r in 1..size {
            let _ = comm.process_at_rank(r).try_send_with_tag(&answer[..], tag);
        }
        ok.then_some(sum)
    } else {
        let root = comm.process_at_rank(0);
        root.try_send_with_tag(&[part][..], tag).ok()?;
        let mut answer = [0u64; 2];
        root.try_receive_into_with_tag(&mut answer[..], tag).ok()?;
        (answer[0] == 1).then_some(answer[1])
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(|s| s.trim()).filter(|s| !s.is_empty());
    let tasks: u64 = arg(0).map_or(20_000, |s| s.parse().expect("TASKS"));
    let round: u64 = arg(1).map_or(1000, |s| s.parse().expect("ROUND")).max(1);
    let hold = std::time::Duration::from_millis(arg(2).map_or(0, |s| s.parse().expect("HOLD_MS")));

    mpi::failure::set_policy(mpi::failure::Policy::Notify);
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let n = world.size();
    let host = mpi::environment::processor_name().unwrap_or_default();
    println!("rank {} ready pid {} on {host} at 0", world.rank(), std::process::id());
    world.barrier();

    let mut comm = world.duplicate();
    let (mut total, mut next, mut attempt) = (0u64, 0u64, 0i32);
    while next < tasks {
        let end = (next + round).min(tasks);
        let (me, size) = (comm.rank() as u64, comm.size() as u64);
        let part = (next..end).filter(|t| t % size == me).fold(0u64, |a, t| a.wrapping_add(h(t)));
        let sum = reduce_round(&comm, part, attempt);
        path(format!("attempt {attempt} on {size} ranks: {sum:?}"));
        attempt += 1;
        // Known failures are acknowledged, so that the agreement reports only new ones; the
        // agreed value counts either way.
        comm.failure_ack();
        let agreed = match comm.agree(u32::from(sum.is_some())) {
            Ok(f) => f,
            Err(FaultError::ProcFailed { agreed, .. }) => agreed,
            Err(e) => panic!("agreement: {e}"),
        };
        path(format!("agreed {agreed}, acknowledged {:?}", comm.failure_get_acked()));
        if agreed == 1 {
            total = total.wrapping_add(sum.expect("agreed"));
            next = end;
            if comm.rank() == 0 {
                println!("round {} done on {size} ranks", next / round);
            }
            std::thread::sleep(hold);
        } else {
            let before = comm.size();
            comm = comm.shrink().unwrap_or_else(|e| panic!("shrink: {e}"));
            path(format!("shrunk from {before} to {}: rank {}", comm.size(), comm.rank()));
            if comm.rank() == 0 {
                println!("shrunk from {before} to {} ranks; round {} again", comm.size(), next / round + 1);
            }
        }
    }
    path(format!("total {total:016x}"));
    if comm.rank() == 0 {
        let want = (0..tasks).fold(0u64, |a, t| a.wrapping_add(h(t)));
        let verdict = if total == want { "correct" } else { "WRONG" };
        println!("total {total:016x} over {tasks} tasks on {} of {n} ranks: {verdict}", comm.size());
    }
}
