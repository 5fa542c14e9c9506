//! A plain blocking ping-pong, as a user would write one: no barrier, no warm-up of its own
//! beyond the first batch, `BATCHES` batches of `ITERS` round trips timed one batch at a
//! time, the median batch reported (issue 40: how `bench/replication.sh` was checked).
//!
//! Usage: `p2pmpirun -n 2 [-r R] plain_pingpong [SIZES [ITERS [BATCHES]]]`
//! - SIZES: comma-separated message sizes in bytes (default 1024);
//! - ITERS: round trips per batch (default 1000);
//! - BATCHES: timed batches per size (default 6), after one untimed batch.
//!
//! **Fan-out mode** (`-n 2R`, R > 1, without `-r`): the traffic of `-r R` done by hand.
//! Ranks 0..R-1 are side A's copies, R..2R-1 side B's; a side's first copy sends each message
//! to every copy of the other side and an 8-byte note to its own other copies; the other
//! copies receive the message and the note.
//!
//! Rank 0 prints, per size, `replpp <bytes> <iters> <round_trip_us> <one_way_us> <MB_per_s>
//! <ok|CORRUPT>` (the line of `repl_pingpong`, so that `bench/replication.sh` reads either),
//! the round trip being the median batch's elapsed time / ITERS, then `plainpp <bytes>
//! batches_us <b1,b2,...>` (every batch's round trip).
#![forbid(unsafe_code)]
use mpi::traits::*;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(|s| s.trim()).filter(|s| !s.is_empty());
    let sizes: Vec<usize> = arg(0).map_or(vec![1024], |s| s.split(',').map(|x| x.parse().expect("size")).collect());
    let iters: u64 = arg(1).map_or(1000, |s| s.parse().expect("ITERS"));
    let batches: usize = arg(2).map_or(6, |s| s.parse().expect("BATCHES"));
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, np) = (world.rank(), world.size());
    let r = (np / 2).max(1);
    assert!(np == 2 || np == 2 * r, "run with -n 2, or -n 2R for the fan-out mode");
    let side = rank / r;
    let first = rank % r == 0;
    let other: Vec<_> = (0..r).map(|k| world.process_at_rank((1 - side) * r + k)).collect();
    let own: Vec<_> = (1..r).map(|k| world.process_at_rank(side * r + k)).collect();
    let my_first = world.process_at_rank(side * r);
    let their_first = world.process_at_rank((1 - side) * r);
    for &size in &sizes {
        let mut buf: Vec<u8> = (0..size.max(1)).map(|i| (i % 251) as u8 + 1).collect();
        let want = buf.clone();
        let mut note = [0u64; 1];
        let mut round = |buf: &mut [u8]| {
            for turn in 0..2 {
                if turn != side {
                    their_first.receive_into(&mut buf[..size]);
                } else if first {
                    for o in &other {
                        o.send(&buf[..size]);
                    }
                    note[0] += 1;
                    for o in &own {
                        o.send(&note[..]);
                    }
                } else {
                    my_first.receive_into(&mut note[..]);
                }
            }
        };
        let mut times = Vec::with_capacity(batches);
        for b in 0..=batches {
            let t0 = mpi::time();
            for _ in 0..iters {
                round(&mut buf);
            }
            if b > 0 {
                times.push((mpi::time() - t0) / iters.max(1) as f64 * 1e6);
            }
        }
        if rank == 0 {
            let mut sorted = times.clone();
            sorted.sort_by(f64::total_cmp);
            let rt = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
            let bw = if size == 0 || rt == 0.0 { 0.0 } else { size as f64 / (rt / 2.0) };
            let ok = if buf == want { "ok" } else { "CORRUPT" };
            println!("replpp {size} {iters} {rt:.3} {:.3} {bw:.1} {ok}", rt / 2.0);
            let all: Vec<String> = times.iter().map(|t| format!("{t:.2}")).collect();
            println!("plainpp {size} batches_us {}", all.join(","));
        }
    }
}
