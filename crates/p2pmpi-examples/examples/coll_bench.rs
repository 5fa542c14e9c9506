//! The collectives benchmark of `bench/` (same algorithm and output as
//! `bench/c/collectives.c`; run by `bench/collectives.sh`).
//!
//! Usage: `p2pmpirun -n N coll_bench [NAMES [SIZES [TARGET_S]]]`
//! - NAMES: comma-separated subset of barrier, bcast, reduce, allreduce, gather, scatter,
//!   allgather, alltoall, reduce_scatter_block, scan (default: all, in that order);
//! - SIZES: comma-separated sizes in bytes (default 8,65536);
//! - TARGET_S: seconds of timed loop per (collective, size) (default 0.2).
//!
//! An empty argument means its default. Rank 0 prints `coll <name> <np> <bytes> <us_per_op>`
//! per (collective, size), and `error <name> <np> <bytes> <ranks_with_wrong_result>` if the
//! last operation left a wrong result somewhere. Byte collectives use `u8` buffers (`bytes` is
//! the block per process; bcast: the whole buffer), reduce/allreduce/scan/reduce_scatter_block
//! use `bytes / 8` (at least 1) `f64` per process with `SystemOperation::sum()` (for
//! reduce_scatter_block: the block each process receives). Rooted collectives use root 0.
//!
//! Per (collective, size): warm-up batches of 1, 2, 4, ... operations until the slowest rank's
//! batch lasts >= 20 ms (max over ranks by a reduce to rank 0); rank 0 then picks the number
//! of timed operations (about TARGET_S in total, clamped to 5..1,000,000) and broadcasts it;
//! a barrier; the timed loop of back-to-back operations; the reported time is the maximum
//! over ranks of elapsed / iterations. The result of the last operation is checked (untimed).
#![forbid(unsafe_code)]
use mpi::collective::SystemOperation;
use mpi::traits::*;

const WARM_S: f64 = 0.02;
const DEFAULT_TARGET_S: f64 = 0.2;
const MIN_ITERS: u64 = 5;
const MAX_ITERS: u64 = 1_000_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Coll {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Gather,
    Scatter,
    Allgather,
    Alltoall,
    ReduceScatterBlock,
    Scan,
}

const ALL: [(Coll, &str); 10] = [
    (Coll::Barrier, "barrier"),
    (Coll::Bcast, "bcast"),
    (Coll::Reduce, "reduce"),
    (Coll::Allreduce, "allreduce"),
    (Coll::Gather, "gather"),
    (Coll::Scatter, "scatter"),
    (Coll::Allgather, "allgather"),
    (Coll::Alltoall, "alltoall"),
    (Coll::ReduceScatterBlock, "reduce_scatter_block"),
    (Coll::Scan, "scan"),
];

fn is_double(c: Coll) -> bool {
    matches!(c, Coll::Reduce | Coll::Allreduce | Coll::ReduceScatterBlock | Coll::Scan)
}

/// The byte pattern (same as the C program): depends on (a, b), never 0.
fn pat(a: usize, b: usize) -> u8 {
    ((a * 31 + b * 7) % 251 + 1) as u8
}

/// Send/receive buffers: bytes (np * max size) and doubles (np * max count).
struct Bufs {
    sb: Vec<u8>,
    rb: Vec<u8>,
    sd: Vec<f64>,
    rd: Vec<f64>,
}

/// Fill the send buffers (and clear the receive buffers) for collective `c`, `n` elements.
fn prepare(c: Coll, n: usize, rank: usize, np: usize, b: &mut Bufs) {
    match c {
        Coll::Barrier => {}
        Coll::Bcast => {
            b.rb[..n].fill(0);
            if rank == 0 {
                for i in 0..n {
                    b.rb[i] = pat(i, 0);
                }
            }
        }
        Coll::Gather | Coll::Allgather => {
            for i in 0..n {
                b.sb[i] = pat(rank, i);
            }
            b.rb[..n * np].fill(0);
        }
        Coll::Scatter => {
            if rank == 0 {
                for j in 0..np {
                    for i in 0..n {
                        b.sb[j * n + i] = pat(j, i);
                    }
                }
            }
            b.rb[..n].fill(0);
        }
        Coll::Alltoall => {
            // Block j of rank r goes to rank j.
            for j in 0..np {
                for i in 0..n {
                    b.sb[j * n + i] = pat(rank * np + j, i);
                }
            }
            b.rb[..n * np].fill(0);
        }
        Coll::Reduce | Coll::Allreduce | Coll::Scan => {
            b.sd[..n].fill((rank + 1) as f64);
            b.rd[..n].fill(0.0);
        }
        Coll::ReduceScatterBlock => {
            // Element of block j on rank r: (r + 1) * (j + 1).
            for j in 0..np {
                b.sd[j * n..(j + 1) * n].fill(((rank + 1) * (j + 1)) as f64);
            }
            b.rd[..n].fill(0.0);
        }
    }
}

/// Whether the last operation of collective `c` (`n` elements) left the right result here.
fn check(c: Coll, n: usize, rank: usize, np: usize, b: &Bufs) -> bool {
    let tri = (np * (np + 1) / 2) as f64;
    match c {
        Coll::Barrier => true,
        Coll::Bcast => (0..n).all(|i| b.rb[i] == pat(i, 0)),
        Coll::Gather if rank != 0 => true,
        Coll::Gather | Coll::Allgather => (0..np).all(|j| (0..n).all(|i| b.rb[j * n + i] == pat(j, i))),
        Coll::Scatter => (0..n).all(|i| b.rb[i] == pat(rank, i)),
        // Block j received from rank j.
        Coll::Alltoall => (0..np).all(|j| (0..n).all(|i| b.rb[j * n + i] == pat(j * np + rank, i))),
        Coll::Reduce if rank != 0 => true,
        Coll::Reduce | Coll::Allreduce => b.rd[..n].iter().all(|&x| x == tri),
        Coll::Scan => {
            let want = ((rank + 1) * (rank + 2) / 2) as f64;
            b.rd[..n].iter().all(|&x| x == want)
        }
        Coll::ReduceScatterBlock => {
            let want = (rank + 1) as f64 * tri;
            b.rd[..n].iter().all(|&x| x == want)
        }
    }
}

fn parse_list<T>(arg: Option<&String>, what: &str, parse: impl Fn(&str) -> Option<T>) -> Option<Vec<T>> {
    let s = arg.filter(|s| !s.is_empty())?;
    Some(
        s.split(',')
            .map(|x| {
                parse(x.trim()).unwrap_or_else(|| {
                    eprintln!("coll_bench: bad {what} '{x}'");
                    std::process::exit(1)
                })
            })
            .collect(),
    )
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank() as usize;
    let np = world.size() as usize;
    let root = world.process_at_rank(0);

    let args: Vec<String> = std::env::args().collect();
    let mut colls: Vec<(Coll, &str)> =
        parse_list(args.get(1), "collective", |x| ALL.iter().copied().find(|&(_, name)| name == x))
            .unwrap_or_else(|| ALL.to_vec());
    let mut seen = Vec::new();
    colls.retain(|&(c, _)| {
        if seen.contains(&c) {
            false
        } else {
            seen.push(c);
            true
        }
    });
    let sizes: Vec<usize> = parse_list(args.get(2), "size", |x| x.parse().ok().filter(|&v: &usize| v <= 1 << 28))
        .unwrap_or_else(|| vec![8, 65536]);
    let target_s: f64 = match args.get(3).filter(|s| !s.is_empty()) {
        Some(s) => s.parse().ok().filter(|&t: &f64| t > 0.0).unwrap_or_else(|| {
            eprintln!("coll_bench: bad TARGET_S '{s}'");
            std::process::exit(1)
        }),
        None => DEFAULT_TARGET_S,
    };

    let maxsize = sizes.iter().copied().max().unwrap_or(0).max(8);
    let mut b = Bufs {
        sb: vec![0u8; maxsize * np],
        rb: vec![0u8; maxsize * np],
        sd: vec![0.0f64; (maxsize / 8 + 1) * np],
        rd: vec![0.0f64; (maxsize / 8 + 1) * np],
    };

    // `iters` back-to-back operations of collective `c` with `n` elements per process.
    let run = |c: Coll, n: usize, iters: u64, b: &mut Bufs| {
        let Bufs { sb, rb, sd, rd } = b;
        for _ in 0..iters {
            match c {
                Coll::Barrier => world.barrier(),
                Coll::Bcast => root.broadcast_into(&mut rb[..n]),
                Coll::Reduce => {
                    if rank == 0 {
                        root.reduce_into_root(&sd[..n], &mut rd[..n], SystemOperation::sum());
                    } else {
                        root.reduce_into(&sd[..n], SystemOperation::sum());
                    }
                }
                Coll::Allreduce => world.all_reduce_into(&sd[..n], &mut rd[..n], SystemOperation::sum()),
                Coll::Gather => {
                    if rank == 0 {
                        root.gather_into_root(&sb[..n], &mut rb[..n * np]);
                    } else {
                        root.gather_into(&sb[..n]);
                    }
                }
                Coll::Scatter => {
                    if rank == 0 {
                        root.scatter_into_root(&sb[..n * np], &mut rb[..n]);
                    } else {
                        root.scatter_into(&mut rb[..n]);
                    }
                }
                Coll::Allgather => world.all_gather_into(&sb[..n], &mut rb[..n * np]),
                Coll::Alltoall => world.all_to_all_into(&sb[..n * np], &mut rb[..n * np]),
                Coll::ReduceScatterBlock => {
                    world.reduce_scatter_block_into(&sd[..n * np], &mut rd[..n], SystemOperation::sum())
                }
                Coll::Scan => world.scan_into(&sd[..n], &mut rd[..n], SystemOperation::sum()),
            }
        }
    };

    // Maximum of `x` over all ranks, valid on rank 0 only.
    let max_at_root = |x: f64| -> f64 {
        let mut m = [0.0f64];
        if rank == 0 {
            root.reduce_into_root(&[x][..], &mut m[..], SystemOperation::max());
        } else {
            root.reduce_into(&[x][..], SystemOperation::max());
        }
        m[0]
    };

    for &(c, name) in &colls {
        let these: &[usize] = if c == Coll::Barrier { &[0] } else { &sizes };
        for &bytes in these {
            let n = if is_double(c) { (bytes / 8).max(1) } else { bytes };
            let shown = if c == Coll::Barrier {
                0
            } else if is_double(c) {
                n * 8
            } else {
                bytes
            };
            prepare(c, n, rank, np, &mut b);

            // Warm-up: batches of 1, 2, 4, ... until the slowest rank's batch lasts WARM_S;
            // rank 0 decides and broadcasts [done, iters].
            let mut batch: u64 = 1;
            let iters = loop {
                world.barrier();
                let t0 = mpi::time();
                run(c, n, batch, &mut b);
                let dt = max_at_root(mpi::time() - t0);
                let mut ctl = [0u64; 2];
                if rank == 0 {
                    let per_op = dt / batch as f64;
                    let it = if per_op > 0.0 { (target_s / per_op) as u64 } else { MAX_ITERS };
                    ctl = [(dt >= WARM_S || batch >= MAX_ITERS) as u64, it.clamp(MIN_ITERS, MAX_ITERS)];
                }
                root.broadcast_into(&mut ctl[..]);
                if ctl[0] == 1 {
                    break ctl[1];
                }
                batch *= 2;
            };

            prepare(c, n, rank, np, &mut b);
            world.barrier();
            let t0 = mpi::time();
            run(c, n, iters, &mut b);
            let per = max_at_root((mpi::time() - t0) / iters as f64);

            let bad = [u32::from(!check(c, n, rank, np, &b))];
            let mut nbad = [0u32];
            if rank == 0 {
                root.reduce_into_root(&bad[..], &mut nbad[..], SystemOperation::sum());
                println!("coll {name} {np} {shown} {:.3}", per * 1e6);
                if nbad[0] != 0 {
                    println!("error {name} {np} {shown} {}", nbad[0]);
                }
            } else {
                root.reduce_into(&bad[..], SystemOperation::sum());
            }
        }
    }
}
