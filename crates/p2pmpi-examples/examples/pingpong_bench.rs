//! The benchmark ping-pong of `bench/` (same algorithm as `bench/c/pingpong.c`): prints
//! `pingpong <bytes> <one_way_latency_us> <bandwidth_MB_per_s>` per size.
#![forbid(unsafe_code)]
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let default = [0usize, 1, 8, 64, 512, 4096, 32768, 65536, 131072, 524288, 1048576, 4194304];
    let sizes: Vec<usize> = match std::env::args().nth(1) {
        Some(s) => s.split(',').map(|x| x.trim().parse().expect("size")).collect(),
        None => default.to_vec(),
    };
    let peer = world.process_at_rank(1 - rank);
    for &size in &sizes {
        let mut buf = vec![0u8; size.max(1)];
        let msg = size;
        let round = |n: u64, buf: &mut Vec<u8>| {
            for _ in 0..n {
                if rank == 0 {
                    peer.send(&buf[..msg]);
                    peer.receive_into(&mut buf[..msg]);
                } else {
                    peer.receive_into(&mut buf[..msg]);
                    peer.send(&buf[..msg]);
                }
            }
        };
        // Warm-up: batches of 2, 4, 8, ... round trips until one lasts >= 20 ms.
        let mut n: u64 = 2;
        let iters: u64;
        loop {
            world.barrier();
            let t0 = mpi::time();
            round(n, &mut buf);
            let dt = mpi::time() - t0;
            let mut decision = [0u64; 2];
            if rank == 0 {
                let done = dt >= 0.02;
                let per = dt / n as f64;
                let want = ((0.2 / per) as u64).clamp(20, 1_000_000);
                decision = [done as u64, want];
                peer.send(&decision[..]);
            } else {
                peer.receive_into(&mut decision[..]);
            }
            if decision[0] == 1 {
                iters = decision[1];
                break;
            }
            n *= 2;
        }
        world.barrier();
        let t0 = mpi::time();
        round(iters, &mut buf);
        let dt = mpi::time() - t0;
        if rank == 0 {
            let one_way = dt / iters as f64 / 2.0;
            let bw = if size == 0 { 0.0 } else { size as f64 / one_way / 1e6 };
            println!("pingpong {size} {:.3} {:.1}", one_way * 1e6, bw);
        }
    }
}
