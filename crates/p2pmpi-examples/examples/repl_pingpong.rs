//! Ping-pong with a fixed number of round trips, for the replication benchmark
//! (`bench/replication.sh`, thesis §4.8.2: 1000 round trips per size, `p2pmpirun -n 2 -r R`).
//!
//! Usage: `p2pmpirun -n 2 [-r R] repl_pingpong [SIZES [ITERS [WARMUP [notify]]]]`
//! - SIZES: comma-separated message sizes in bytes (default 1 KiB, 2 KiB, ..., 128 KiB);
//! - ITERS: timed round trips per size (default 1000);
//! - WARMUP: untimed round trips before them (default 50);
//! - `notify`: the program handles failures (`failure::Policy::Notify`), for the cost of
//!   fault-aware replicated programs (with `-r R` every replica's sends and receives are then
//!   numbered, and a non-master's sends wait for its master's commit).
//!
//! `REPLPP_DETAIL=DIR` (environment): every process appends to `DIR/replpp-detail.txt` one line
//! per size with its minor page faults (warm-up, timed part), the deciles of its round
//! trips, each then timed on its own, their 99th and 99.9th percentiles and maximum, the time
//! spent in round trips over 100 µs, its timed part's duration and the wall clock at its end.
//!
//! An empty argument means its default. Per size: a barrier, WARMUP round trips, a barrier,
//! ITERS timed round trips (rank 0 `send` then `receive_into`, rank 1 the reverse, blocking,
//! same buffer), then rank 0 checks the buffer it got back last (untimed) and prints
//! `replpp <bytes> <iters> <round_trip_us> <one_way_us> <MB_per_s> <ok|CORRUPT>`
//! (round trip = elapsed / ITERS, one way = half of it, MB = 10^6 bytes).
//! With `-r R`, both ranks run as R replicas: each rank's master sends each message to every
//! replica of the other rank, then commits it to its own replicas.
//!
//! **Fan-out mode** (`-n 2R` with R > 1, without `-r`): the same traffic done by hand, as a
//! baseline of what R replicas cost the machine without the library's protocol. Ranks 0..R-1
//! are rank A's copies, R..2R-1 rank B's; A's first copy sends each message to every copy of
//! B and an 8-byte "commit" to A's other copies; B's first copy answers to every copy of A and
//! commits to B's other copies; the other copies receive the message and the commit and do
//! nothing else.
#![forbid(unsafe_code)]
use mpi::traits::*;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).map(|s| s.trim()).filter(|s| !s.is_empty());
    let sizes: Vec<usize> = match arg(0) {
        Some(s) => s.split(',').map(|x| x.trim().parse().expect("size")).collect(),
        None => (0..8).map(|k| 1024usize << k).collect(),
    };
    let iters: u64 = arg(1).map_or(1000, |s| s.parse().expect("ITERS"));
    let warmup: u64 = arg(2).map_or(50, |s| s.parse().expect("WARMUP"));
    match arg(3) {
        None => {}
        Some("notify") => mpi::failure::set_policy(mpi::failure::Policy::Notify),
        Some(other) => panic!("unknown mode {other:?} (want notify)"),
    }

    // REPLPP_DETAIL=DIR: every process appends to DIR/replpp-detail.txt, per size, its minor
    // page faults during the warm-up and the timed round trips, and its round trips' deciles
    // (`bench/replication.sh`'s diagnosis of slow runs; replicas' output is not shown).
    let detail = std::env::var_os("REPLPP_DETAIL").map(std::path::PathBuf::from);
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let np = world.size();
    assert!(np >= 2, "run with -n 2 (or more: fan-out mode)");
    // Fan-out mode: R copies of each side (`-n 2R`); plain ping-pong: R = 1.
    let r = (np / 2).max(1);
    assert!(np == 2 || np == 2 * r, "run with -n 2, or -n 2R for the fan-out mode");
    let side = rank / r; // 0: A, 1: B
    let first = rank % r == 0;
    let other: Vec<_> = (0..r).map(|k| world.process_at_rank((1 - side) * r + k)).collect();
    let own: Vec<_> = (1..r).map(|k| world.process_at_rank(side * r + k)).collect();
    let master_a = world.process_at_rank(0);
    let master_b = world.process_at_rank(r);
    let my_master = if side == 0 { &master_a } else { &master_b };
    let other_master = if side == 0 { &master_b } else { &master_a };
    for &size in &sizes {
        let msg = size;
        let mut buf: Vec<u8> = (0..size.max(1)).map(|i| (i % 251) as u8 + 1).collect();
        let want = buf.clone();
        let round = |n: u64, buf: &mut Vec<u8>| {
            let mut commit = [0u64; 1];
            for _ in 0..n {
                // A sends, B answers; each side's first copy transmits to every copy of the
                // other side and commits to its own copies.
                for turn in 0..2 {
                    let sending = turn == side;
                    if sending && first {
                        for o in &other {
                            o.send(&buf[..msg]);
                        }
                        commit[0] += 1;
                        for o in &own {
                            o.send(&commit[..]);
                        }
                    } else if sending {
                        my_master.receive_into(&mut commit[..]);
                    } else {
                        other_master.receive_into(&mut buf[..msg]);
                    }
                }
            }
        };
        let faults0 = detail.as_ref().map(|_| minor_faults());
        world.barrier();
        round(warmup, &mut buf);
        world.barrier();
        let faults1 = detail.as_ref().map(|_| minor_faults());
        let t0 = mpi::time();
        let mut each = Vec::new();
        if detail.is_some() {
            // Each round trip timed on its own (two clock reads more per round trip).
            each.reserve(iters as usize);
            for _ in 0..iters {
                let a = mpi::time();
                round(1, &mut buf);
                each.push(mpi::time() - a);
            }
        } else {
            round(iters, &mut buf);
        }
        let dt = mpi::time() - t0;
        if let (Some(dir), Some(f0), Some(f1)) = (&detail, faults0, faults1) {
            let end = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros());
            write_detail(dir, size, rank, f1 - f0, minor_faults() - f1, &mut each, dt, end);
        }
        if rank == 0 {
            let rt = dt / iters.max(1) as f64;
            let bw = if size == 0 { 0.0 } else { size as f64 / (rt / 2.0) / 1e6 };
            let ok = if buf == want { "ok" } else { "CORRUPT" };
            println!("replpp {size} {iters} {:.3} {:.3} {:.1} {ok}", rt * 1e6, rt / 2.0 * 1e6, bw);
        }
    }
}

/// This process's minor page faults so far (`/proc/self/stat`, field 10).
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) start at the state, field 3.
    stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().nth(7)).and_then(|f| f.parse().ok()).unwrap_or(0)
}

/// One line of REPLPP_DETAIL: size, rank, slot (`P2PMPI_RANK`), faults, and the deciles of the
/// round trips in µs (none if they were not timed one by one).
#[allow(clippy::too_many_arguments)]
fn write_detail(
    dir: &std::path::Path,
    size: usize,
    rank: i32,
    warm: u64,
    timed: u64,
    each: &mut [f64],
    dt: f64,
    end_us: u128,
) {
    use std::io::Write;
    each.sort_by(f64::total_cmp);
    let deciles: Vec<String> =
        (1..10).filter_map(|k| each.get(each.len() * k / 10)).map(|t| format!("{:.1}", t * 1e6)).collect();
    let at = |q: f64| {
        each.get(((each.len() as f64 * q) as usize).min(each.len().saturating_sub(1))).map_or(0.0, |t| t * 1e6)
    };
    let tail = format!("{:.1},{:.1},{:.1}", at(0.99), at(0.999), at(1.0));
    let slow: f64 = each.iter().map(|t| t * 1e6).filter(|&t| t > 100.0).sum();
    let slot = std::env::var("P2PMPI_RANK").unwrap_or_default();
    let line = format!(
        "size {size} rank {rank} slot {slot} faults_warmup {warm} faults_timed {timed} deciles_us {} tail_us {tail} over100_us {slow:.0} timed_s {dt:.6} end_unix_us {end_us}\n",
        deciles.join(",")
    );
    let path = dir.join("replpp-detail.txt");
    // One write per line, appended: the processes of a job share the file.
    let wrote = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = wrote {
        eprintln!("repl_pingpong: REPLPP_DETAIL: cannot write {}: {e}", path.display());
    }
}
