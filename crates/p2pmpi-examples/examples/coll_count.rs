//! A fixed number of back-to-back operations of one collective (or a plain send and receive),
//! for counting instructions per operation with callgrind (bench/coll_count.sh).
//!
//! Usage: `p2pmpirun -n N coll_count NAME BYTES ITERS`
//! - NAME: barrier, bcast, reduce, allreduce, gather, scatter, allgather, alltoall,
//!   reduce_scatter_block, scan (as in coll_bench), or `send` (rank 0 sends BYTES to rank 1,
//!   which receives them: the cost of one eager message, for comparison);
//! - BYTES: per process, as in coll_bench (doubles for the reductions);
//! - ITERS: operations in the counted loop.
//!
//! The counted loop is the function `counted` (`--toggle-collect='*counted*'`); a barrier
//! before and after keeps start-up and finalization out of it. Rank 0 prints `ok NAME`
//! when the last operation's result is right on every rank.
//!
//! `COLL_COUNT_LAG=R`: rank R starts its loop a second late. For an operation whose messages
//! all flow one way (bcast, scatter, scan, send towards R; gather, reduce from R's partner
//! at np 2), every message is then waiting when R looks, and no rank spins: the counts are
//! the work per operation of each side, the same from run to run.
#![forbid(unsafe_code)]
use mpi::collective::SystemOperation;
use mpi::traits::*;

#[inline(never)]
fn counted<C: Communicator>(
    world: &C,
    name: &str,
    n: usize,
    iters: u64,
    b: &mut (Vec<u8>, Vec<u8>, Vec<f64>, Vec<f64>),
) {
    let rank = world.rank();
    let np = world.size() as usize;
    let root = world.process_at_rank(0);
    let (sb, rb, sd, rd) = b;
    let sum = SystemOperation::sum;
    for _ in 0..iters {
        match name {
            "barrier" => world.barrier(),
            "bcast" => root.broadcast_into(&mut rb[..n]),
            "reduce" if rank == 0 => root.reduce_into_root(&sd[..n], &mut rd[..n], sum()),
            "reduce" => root.reduce_into(&sd[..n], sum()),
            "allreduce" => world.all_reduce_into(&sd[..n], &mut rd[..n], sum()),
            "gather" if rank == 0 => root.gather_into_root(&sb[..n], &mut rb[..n * np]),
            "gather" => root.gather_into(&sb[..n]),
            "scatter" if rank == 0 => root.scatter_into_root(&sb[..n * np], &mut rb[..n]),
            "scatter" => root.scatter_into(&mut rb[..n]),
            "allgather" => world.all_gather_into(&sb[..n], &mut rb[..n * np]),
            "alltoall" => world.all_to_all_into(&sb[..n * np], &mut rb[..n * np]),
            "reduce_scatter_block" => world.reduce_scatter_block_into(&sd[..n * np], &mut rd[..n], sum()),
            "scan" => world.scan_into(&sd[..n], &mut rd[..n], sum()),
            "send" if rank == 0 => world.process_at_rank(1).send(&sb[..n]),
            "send" if rank == 1 => {
                world.process_at_rank(0).receive_into(&mut rb[..n]);
            }
            "send" => {}
            other => panic!("coll_count: unknown operation {other}"),
        }
    }
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank() as usize;
    let np = world.size() as usize;
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("bcast", |s| s.as_str()).to_string();
    let bytes: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(8);
    let iters: u64 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let lag: Option<usize> = std::env::var("COLL_COUNT_LAG").ok().and_then(|s| s.parse().ok());
    let doubles = matches!(name.as_str(), "reduce" | "allreduce" | "reduce_scatter_block" | "scan");
    let n = if doubles { (bytes / 8).max(1) } else { bytes };
    let mut b = (
        (0..n * np).map(|i| (i % 251 + 1) as u8).collect::<Vec<u8>>(),
        vec![0u8; n * np],
        vec![(rank + 1) as f64; n * np],
        vec![0.0f64; n * np],
    );
    if rank == 0 && name == "bcast" {
        b.1.iter_mut().enumerate().for_each(|(i, x)| *x = (i % 251 + 1) as u8);
    }
    // Which process is which rank, for telling the counts of each apart.
    eprintln!("coll_count rank {rank} pid {}", std::process::id());
    world.barrier();
    if lag == Some(rank) {
        // This rank starts late: every message the others send it is there when it looks.
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    counted(&world, &name, n, iters, &mut b);
    world.barrier();
    let tri = (np * (np + 1) / 2) as f64;
    let ok = match name.as_str() {
        "bcast" => b.1[..n].iter().enumerate().all(|(i, &x)| x == (i % 251 + 1) as u8),
        "allreduce" => b.3[..n].iter().all(|&x| x == tri),
        "reduce" if rank == 0 => b.3[..n].iter().all(|&x| x == tri),
        "scan" => b.3[..n].iter().all(|&x| x == ((rank + 1) * (rank + 2) / 2) as f64),
        _ => true,
    };
    let mut all_ok = [0u32];
    world.all_reduce_into(&[u32::from(ok)][..], &mut all_ok[..], SystemOperation::sum());
    if rank == 0 {
        println!("{} {name}", if all_ok[0] as usize == np { "ok" } else { "WRONG" });
    }
}
