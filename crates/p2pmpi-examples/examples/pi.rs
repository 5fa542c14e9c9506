//! Computes an approximation of π by integrating 4/(1+x²) over [0, 1] — the program of the
//! chapter's figure 1. Rank 0 chooses the number of intervals and sends it to every rank; each
//! rank sums its share of the intervals and rank 0 adds the partial sums.
use mpi::traits::*;

fn main() {
    const PI25DT: f64 = 3.141592653589793238462643;
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let root = world.process_at_rank(0);

    let mut n: i32 = 0;
    if rank == 0 {
        n = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
        for r in 1..size {
            world.process_at_rank(r).send(&n);
        }
    } else {
        root.receive_into(&mut n);
    }
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
        let mut pi = mypi;
        for r in 1..size {
            let (part, _) = world.process_at_rank(r).receive::<f64>();
            pi += part;
        }
        println!("Pi is approximately {pi:.16}");
        println!("Error is {:.3e}", (pi - PI25DT).abs());
    } else {
        root.send(&mypi);
    }
}
