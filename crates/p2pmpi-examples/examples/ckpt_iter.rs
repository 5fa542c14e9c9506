//! An iterative job that checkpoints (issue 41): every rank keeps a vector, exchanges a value
//! with its neighbours on a ring at each step, and every rank prints one line per step; rank 0
//! prints the job's checksum at the end. Started again from a checkpoint, it goes on from it
//! and ends with the checksum of a run without faults.
//!
//! `ckpt_iter STEPS EVERY PACE_MS [MODE] [STATE_KIB]`: a checkpoint every EVERY steps (0: none),
//! PACE_MS milliseconds of sleep per step (so that a test can act between checkpoints). MODE:
//! `normal`; `once` (only the first checkpoint); `inflight` (a checkpoint with a message
//! not received yet: prints the error and receives it); `wrongtype` (asks `restored()` for
//! another type than the one saved); `bench` (writes STEPS checkpoints of STATE_KIB KiB and
//! prints each one's time).
#![forbid(unsafe_code)]
use mpi::traits::*;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

#[derive(Serialize, Deserialize, Clone)]
struct State {
    values: Vec<u64>,
    checksum: u64,
}

fn mix(a: u64, b: u64) -> u64 {
    (a ^ b.rotate_left(17)).wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1)
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (steps, every, pace) = (arg(1, 20), arg(2, 5), arg(3, 0));
    let mode = args.get(4).map(String::as_str).unwrap_or("normal");
    if mode == "bench" {
        return bench(&universe, steps, arg(5, 64 * 1024) as usize);
    }
    if mode == "early" {
        // Communicates before `restored()`: an error in a restarted process.
        world.barrier();
    }
    let restored = if mode == "wrongtype" {
        universe.restored::<Vec<String>>().map(|(s, _)| (s, State { values: Vec::new(), checksum: 0 }))
    } else {
        universe.restored::<State>()
    };
    let (start, mut st) = match restored {
        Some((step, st)) => (step, st),
        None => (0, State { values: (0..8).map(|i| (rank as u64) << 8 | i).collect(), checksum: 0 }),
    };
    let next = world.process_at_rank((rank + 1) % size);
    let prev = world.process_at_rank((rank + size - 1) % size);
    let mut checkpoints = 0;
    for step in start..steps {
        let mine = st.values.iter().fold(step, |a, &v| mix(a, v));
        let (got, _) = mpi::point_to_point::send_receive(&mine, &next, &prev);
        for v in st.values.iter_mut() {
            *v = mix(*v, got);
        }
        let mut sum = 0u64;
        world.all_reduce_into(&(mine % 1_000_003), &mut sum, mpi::collective::SystemOperation::sum());
        st.checksum = mix(st.checksum, sum);
        println!("rank {rank} step {step} value {:016x}", st.values[0]);
        if pace > 0 {
            std::thread::sleep(Duration::from_millis(pace));
        }
        if every > 0 && (step + 1) % every == 0 && !(mode == "once" && checkpoints > 0) {
            if mode == "inflight" && rank == 0 && size > 1 {
                world.process_at_rank(1).send_with_tag(&7u64, 99);
            }
            match universe.checkpoint(step + 1, &st) {
                Ok(()) => checkpoints += 1,
                Err(e) => {
                    println!("rank {rank}: checkpoint failed: {e}");
                    if mode == "inflight" && rank == 1 {
                        let (v, _) = world.process_at_rank(0).receive_with_tag::<u64>(99);
                        assert_eq!(v, 7);
                    }
                    if mode != "inflight" {
                        std::process::exit(3);
                    }
                }
            }
        }
    }
    if rank == 0 {
        println!("checksum {:016x}", st.checksum);
    }
}

/// Writes `count` checkpoints of `kib` KiB of state per rank and prints each one's time
/// (rank 0): `bench KIB SECONDS`.
fn bench(universe: &mpi::environment::Universe, count: u64, kib: usize) {
    let world = universe.world();
    let state: Vec<u8> = (0..kib * 1024).map(|i| (i * 31 + world.rank() as usize) as u8).collect();
    for step in 0..count {
        world.barrier();
        let t = Instant::now();
        universe.checkpoint(step, &state).unwrap();
        let secs = t.elapsed().as_secs_f64();
        if world.rank() == 0 {
            println!("bench {kib} {secs:.6}");
        }
    }
}
