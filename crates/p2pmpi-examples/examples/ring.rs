//! Passes a token around the ring of processes `laps` times; each rank adds its rank to it.
#![forbid(unsafe_code)]
use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let laps: i64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let next = world.process_at_rank((rank + 1) % size);
    let prev = world.process_at_rank((rank + size - 1) % size);
    let mut token: i64 = 0;
    for lap in 0..laps {
        if rank == 0 {
            next.send(&token);
            prev.receive_into(&mut token);
            println!("lap {lap}: token = {token}");
        } else {
            prev.receive_into(&mut token);
            token += rank as i64;
            next.send(&token);
        }
    }
    if rank == 0 {
        let expected = laps * (size as i64 * (size as i64 - 1) / 2);
        assert_eq!(token, expected);
        println!("ring of {size} processes: final token {token} (expected {expected})");
    }
}
