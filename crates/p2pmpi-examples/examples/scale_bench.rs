//! The scale benchmark of `bench/scale.sh` (same algorithm and output as `bench/c/scale.c`).
//!
//! Usage: `p2pmpirun -n N scale_bench T0_US [ITERS [SIZES]]`
//! - T0_US: the launcher's start, microseconds since the Unix epoch (0: unknown; start-up is
//!   then not reported);
//! - ITERS: timed operations of each kind (default 20);
//! - SIZES: comma-separated all-reduce sizes in bytes per rank (default 8,65536): the sum of
//!   SIZE / 8 (at least 1) `f64`.
//!
//! Every rank notes the time when `main` starts and when `initialize` returns; rank 0 gets the
//! latest of each (a reduction, after the fact). Then: one barrier alone (the first: it may
//! open connections), 2 untimed barriers, ITERS timed back-to-back barriers, and per size 2
//! untimed and ITERS timed back-to-back all-reduces. Every rank times each operation; the time
//! of operation i is the largest over ranks; the median over i is reported. Rank 0 prints:
//! `scale np=N main_ms=M init_ms=I first_barrier_us=F barrier_us=B allreduce_<S>_us=A ... errors=E`
//! (main_ms: launch to the last rank's `main`; init_ms: launch to `initialize` returned
//! everywhere; errors: ranks whose last all-reduce result was wrong, 0 expected).
#![forbid(unsafe_code)]
use mpi::collective::SystemOperation;
use mpi::traits::*;
use std::time::{SystemTime, UNIX_EPOCH};

const WARM: usize = 2;

fn unix_us() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

fn die(rank: i32, msg: &str) -> ! {
    if rank == 0 {
        eprintln!("scale_bench: {msg}");
    }
    std::process::exit(1)
}

fn main() {
    let t_main = unix_us();
    let universe = mpi::initialize().unwrap();
    let t_init = unix_us();
    let world = universe.world();
    let (rank, np) = (world.rank(), world.size());
    let root = world.process_at_rank(0);

    let args: Vec<String> = std::env::args().collect();
    let t0: f64 = args.get(1).map_or(Some(0.0), |s| s.parse().ok()).unwrap_or_else(|| die(rank, "bad T0_US"));
    let iters: usize = args
        .get(2)
        .map_or(Some(20), |s| s.parse().ok())
        .filter(|i| (1..=1_000_000).contains(i))
        .unwrap_or_else(|| die(rank, "bad ITERS"));
    let sizes: Vec<usize> = match args.get(3).filter(|s| !s.is_empty()) {
        Some(s) => s.split(',').map(|x| x.parse().unwrap_or_else(|_| die(rank, "bad SIZES"))).collect(),
        None => vec![8, 65536],
    };

    // The largest of `mine` over ranks, element by element (valid on rank 0).
    let max_at_root = |mine: &[f64]| -> Vec<f64> {
        let mut m = vec![0.0; mine.len()];
        if rank == 0 {
            root.reduce_into_root(mine, &mut m[..], SystemOperation::max());
        } else {
            root.reduce_into(mine, SystemOperation::max());
        }
        m
    };
    let median_of_max = |t: &[f64]| -> f64 {
        let mut m = max_at_root(t);
        m.sort_by(f64::total_cmp);
        let k = m.len();
        if k % 2 == 1 {
            m[k / 2]
        } else {
            (m[k / 2 - 1] + m[k / 2]) / 2.0
        }
    };

    let a = unix_us();
    world.barrier();
    let first = max_at_root(&[unix_us() - a])[0];
    let last = max_at_root(&[t_main, t_init]);

    let mut t = vec![0.0; iters];
    for _ in 0..WARM {
        world.barrier();
    }
    for x in t.iter_mut() {
        let a = unix_us();
        world.barrier();
        *x = unix_us() - a;
    }
    let barrier = median_of_max(&t);

    let mut line = format!("scale np={np}");
    if t0 > 0.0 {
        line += &format!(" main_ms={:.3} init_ms={:.3}", (last[0] - t0) / 1e3, (last[1] - t0) / 1e3);
    }
    line += &format!(" first_barrier_us={first:.1} barrier_us={barrier:.1}");

    let mut bad = 0u32;
    for &size in &sizes {
        let n = (size / 8).max(1);
        let sd = vec![f64::from(rank + 1); n];
        let mut rd = vec![0.0f64; n];
        for _ in 0..WARM {
            world.all_reduce_into(&sd[..], &mut rd[..], SystemOperation::sum());
        }
        for x in t.iter_mut() {
            let a = unix_us();
            world.all_reduce_into(&sd[..], &mut rd[..], SystemOperation::sum());
            *x = unix_us() - a;
        }
        let want = f64::from(np) * f64::from(np + 1) / 2.0;
        if rd.iter().any(|&x| x != want) {
            bad = 1;
        }
        line += &format!(" allreduce_{}_us={:.1}", n * 8, median_of_max(&t));
    }
    let mut nbad = [0u32];
    if rank == 0 {
        root.reduce_into_root(&[bad][..], &mut nbad[..], SystemOperation::sum());
        println!("{line} errors={}", nbad[0]);
    } else {
        root.reduce_into(&[bad][..], SystemOperation::sum());
    }
}
