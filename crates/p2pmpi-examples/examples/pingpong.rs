//! Ping-pong between ranks 0 and 1: prints the round-trip time for a few message sizes.
#![forbid(unsafe_code)]
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    assert!(world.size() >= 2, "pingpong needs at least 2 processes");
    let rank = world.rank();
    for size in [0usize, 8, 1024, 64 * 1024, 1 << 20] {
        let mut buf = vec![1u8; size];
        let iters = if size >= 1 << 20 { 20 } else { 1000 };
        let t0 = mpi::time();
        for _ in 0..iters {
            if rank == 0 {
                world.process_at_rank(1).send(&buf[..]);
                world.process_at_rank(1).receive_into(&mut buf[..]);
            } else if rank == 1 {
                world.process_at_rank(0).receive_into(&mut buf[..]);
                world.process_at_rank(0).send(&buf[..]);
            }
        }
        let rtt = (mpi::time() - t0) / iters as f64;
        if rank == 0 {
            println!("{size:>8} bytes: round trip {:>9.2} us", rtt * 1e6);
        }
    }
}
