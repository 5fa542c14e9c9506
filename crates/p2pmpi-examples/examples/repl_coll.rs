//! A collective-heavy loop with a fixed amount of work, for the replication benchmark
//! (`bench/replication.sh`: `p2pmpirun -n 4 -r R repl_coll`, the job's wall time per R).
//!
//! Usage: `p2pmpirun -n N [-r R] repl_coll [STEPS [BYTES]]`
//! - STEPS: iterations (default 1000);
//! - BYTES: size of the broadcast buffer (default 1024).
//!
//! An empty argument means its default. Every step: an allreduce (sum) of one `u64` that
//! depends on the rank, the step and the previous results; a broadcast of BYTES bytes from
//! root `step % N` (the root rotates, so nothing pipelines across steps); a barrier.
//! Rank 0 times the loop (from a barrier before it to the end of the last barrier) and
//! prints `replcoll <np> <steps> <bytes> <loop_ms> <us_per_step> <checksum>`; the checksum
//! (hex) depends on every result, so runs with different R must print the same one.
#![forbid(unsafe_code)]
use mpi::collective::SystemOperation;
use mpi::traits::*;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(|s| s.trim()).filter(|s| !s.is_empty());
    let steps: u64 = arg(0).map_or(1000, |s| s.parse().expect("STEPS"));
    let bytes: usize = arg(1).map_or(1024, |s| s.parse().expect("BYTES"));

    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, np) = (world.rank(), world.size());
    let mut buf = vec![0u8; bytes.max(1)];
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mix = |h: &mut u64, x: u64| *h = (*h ^ x).wrapping_mul(0x100_0000_01b3);

    world.barrier();
    let t0 = mpi::time();
    for step in 0..steps {
        let v = (rank as u64 + 1).wrapping_mul(step + 1) ^ ((h >> 7) % 1_000_003);
        let mut sum = 0u64;
        world.all_reduce_into(&v, &mut sum, SystemOperation::sum());
        mix(&mut h, sum);
        let root = (step % np as u64) as i32;
        if rank == root {
            for (i, b) in buf.iter_mut().enumerate() {
                *b = (i as u64 ^ sum ^ step) as u8;
            }
        }
        world.process_at_rank(root).broadcast_into(&mut buf[..bytes]);
        mix(&mut h, buf[..bytes].iter().fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(b as u64)));
        world.barrier();
    }
    let dt = mpi::time() - t0;
    if rank == 0 {
        let per = dt / steps.max(1) as f64 * 1e6;
        println!("replcoll {np} {steps} {bytes} {:.3} {per:.3} {h:016x}", dt * 1e3);
    }
}
