//! A fault-aware master collecting results with receives from any source (ULFM semantics,
//! `mpi::ulfm`): a worker killed while it runs makes the master's pending receive from any
//! source fail, naming the dead rank, instead of waiting forever for a message that can only
//! have come from it; the master acknowledges the failure, stops expecting that worker and
//! goes on with the others.
//!
//! Usage: `p2pmpirun -n N ft_collect [ROUNDS [HOLD_MS [MODE]]]`
//! - ROUNDS: rounds (default 10); in round `k` every worker `w` sends `w * 1000 + k`, tagged
//!   `k`, and rank 0 receives them from any source;
//! - HOLD_MS: a worker's pause before each round's message (default 0), so that a test can
//!   kill one mid-run;
//! - MODE: how rank 0 takes each message: `receive` (default) from any source, `probe` (a
//!   blocking probe from any source, then a receive from the rank it found) or `vec` (a
//!   receive of a vector, which probes for its size) or `waitany` (an immediate receive from
//!   any source, waited for with `try_wait_any`): each fails the same way.
//!
//! Every rank prints `rank R ready pid PID on HOST at 0`; rank 0 prints `round K complete`
//! after each round, `receive from any source failed: CAUSE` and `lost rank W` when a
//! receive failed, and at the end
//! `collected M messages from K of N-1 workers: correct` (or `WRONG`), checking the sum of
//! what it got against what the workers alive at the end must have sent.
#![forbid(unsafe_code)]
use mpi::traits::*;
use mpi::ulfm::FaultTolerant;
use p2pmpi_examples::{error_kind, path};
use std::collections::BTreeSet;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(|s| s.trim()).filter(|s| !s.is_empty());
    let rounds: i32 = arg(0).map_or(10, |s| s.parse().expect("ROUNDS"));
    let hold = std::time::Duration::from_millis(arg(1).map_or(0, |s| s.parse().expect("HOLD_MS")));
    // How rank 0 takes each message: a receive from any source (`receive`), a blocking probe
    // from any source then a receive from the rank found (`probe`), or a receive of a vector,
    // which probes for its size (`vec`).
    let mode = arg(2).unwrap_or("receive").to_string();
    assert!(["receive", "probe", "vec", "waitany"].contains(&mode.as_str()), "MODE: receive, probe, vec or waitany");

    mpi::failure::set_policy(mpi::failure::Policy::Notify);
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let n = world.size();
    let host = mpi::environment::processor_name().unwrap_or_default();
    println!("rank {} ready pid {} on {host} at 0", world.rank(), std::process::id());

    if world.rank() != 0 {
        let w = world.rank() as u64;
        for k in 0..rounds {
            std::thread::sleep(hold);
            let v = w * 1000 + k as u64;
            if let Err(e) = world.process_at_rank(0).try_send_with_tag(&[v][..], k) {
                path(format!("send {k} failed: {}", error_kind(&e)));
                break;
            }
            path(format!("sent {k}"));
        }
        return;
    }

    let mut alive: BTreeSet<i32> = (1..n).collect();
    let mut lost = BTreeSet::new();
    let mut got: Vec<(i32, i32, u64)> = Vec::new();
    for k in 0..rounds {
        let mut waiting: BTreeSet<i32> = alive.clone();
        while !waiting.is_empty() {
            let mut v = [0u64; 1];
            let got_one = match mode.as_str() {
                "probe" => world
                    .any_process()
                    .try_probe_with_tag(k)
                    .and_then(|st| world.process_at_rank(st.source_rank()).try_receive_into_with_tag(&mut v[..], k)),
                "vec" => world.any_process().try_receive_vec_with_tag::<u64>(k).map(|(m, st)| {
                    v[0] = m.first().copied().unwrap_or(u64::MAX);
                    st
                }),
                "waitany" => mpi::request::multiple_scope(1, |scope, coll| {
                    coll.add(world.any_process().immediate_receive_into_with_tag(scope, &mut v[..], k));
                    coll.try_wait_any().expect("one request").1
                }),
                _ => world.any_process().try_receive_into_with_tag(&mut v[..], k),
            };
            match got_one {
                Ok(st) => {
                    path(format!("round {k}: from {}: {}", st.source_rank(), v[0]));
                    waiting.remove(&st.source_rank());
                    got.push((st.source_rank(), k, v[0]));
                }
                Err(e) => {
                    println!("{mode} from any source failed: {e}");
                    path(format!("round {k}: failed: {}", error_kind(&e)));
                    world.failure_ack();
                    path(format!("acknowledged {:?}", world.failure_get_acked()));
                    for r in world.failed_members() {
                        if alive.remove(&r) {
                            println!("lost rank {r}");
                            lost.insert(r);
                        }
                        waiting.remove(&r);
                    }
                }
            }
        }
        println!("round {k} complete");
    }
    // Every message of a worker alive at the end, and a prefix of rounds of the lost ones.
    let mut ok = true;
    for &w in &alive {
        let mine: Vec<u64> = got.iter().filter(|g| g.0 == w).map(|g| g.2).collect();
        ok &= mine == (0..rounds).map(|k| w as u64 * 1000 + k as u64).collect::<Vec<_>>();
    }
    for &w in &lost {
        let mine: Vec<u64> = got.iter().filter(|g| g.0 == w).map(|g| g.2).collect();
        ok &= mine == (0..mine.len() as u64).map(|k| w as u64 * 1000 + k).collect::<Vec<_>>();
    }
    println!(
        "collected {} messages from {} of {} workers: {}",
        got.len(),
        alive.len(),
        n - 1,
        if ok { "correct" } else { "WRONG" }
    );
}
