//! Computes an approximation of π by integrating 4/(1+x²) over [0, 1] — the program of the
//! chapter's figure 1: rank 0 broadcasts the number of intervals, each rank sums its share,
//! and a reduction adds the partial sums at rank 0.
#![forbid(unsafe_code)]
use mpi::collective::SystemOperation;
use mpi::traits::*;

fn main() {
    #[allow(clippy::approx_constant, clippy::excessive_precision)] // the figure's own constant
    const PI25DT: f64 = 3.141592653589793238462643;
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let root = world.process_at_rank(0);

    let mut n: i32 = 0;
    if rank == 0 {
        // The number of intervals.
        n = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    }
    root.broadcast_into(&mut n);
    let h = 1.0 / n as f64;
    let mut sum = 0.0;
    let mut i = rank + 1;
    while i <= n {
        let x = h * (i as f64 - 0.5);
        sum += 4.0 / (1.0 + x * x);
        i += size;
    }
    let mypi = h * sum;
    if rank == 0 {
        let mut pi = 0.0f64;
        root.reduce_into_root(&mypi, &mut pi, SystemOperation::sum());
        println!("Pi is approximately {pi:.16}");
        println!("Error is {:.3e}", (pi - PI25DT).abs());
    } else {
        root.reduce_into(&mypi, SystemOperation::sum());
    }
}
