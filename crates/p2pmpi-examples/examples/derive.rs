//! `#[derive(Equivalence)]` on plain structs, nested structs, arrays and tuples: each rank
//! sends a particle to the next one (ring) and checks what it gets.
use mpi::traits::*;

#[derive(Equivalence, Debug, Clone, Copy, PartialEq, Default)]
struct Vec3 {
    x: f64,
    y: f64,
    z: f64,
}

#[derive(Equivalence, Debug, Clone, Copy, PartialEq, Default)]
struct Particle {
    id: u8, // padding follows: never read or written
    position: Vec3,
    neighbours: [[i16; 2]; 3],
    flags: (bool, u32),
}

#[derive(Equivalence, Debug, Clone, Copy, PartialEq, Default)]
struct Pair(i32, f32);

fn particle(rank: i32) -> Particle {
    Particle {
        id: rank as u8,
        position: Vec3 { x: rank as f64, y: 2.0 * rank as f64, z: -1.0 },
        neighbours: [[rank as i16, 1], [2, 3], [4, -(rank as i16)]],
        flags: (rank % 2 == 0, 7 * rank as u32),
    }
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let next = world.process_at_rank((rank + 1) % size);
    let prev = world.process_at_rank((rank + size - 1) % size);
    let mine: Vec<Particle> = (0..1000).map(|i| particle(rank + i)).collect();
    mpi::request::scope(|scope| {
        let _s = mpi::request::WaitGuard::from(next.immediate_send(scope, &mine[..]));
        let (theirs, status) = prev.receive_vec::<Particle>();
        assert_eq!(status.count(Particle::equivalent_datatype()), 1000);
        for (i, p) in theirs.iter().enumerate() {
            assert_eq!(*p, particle(prev.rank() + i as i32));
        }
    });
    let (pair, _) = mpi::point_to_point::send_receive::<Pair, _, _, _>(&Pair(rank, 0.5), &next, &prev);
    assert_eq!(pair, Pair(prev.rank(), 0.5));
    world.barrier();
    if rank == 0 {
        println!(
            "derived datatypes: OK across {size} processes (Particle: {} data bytes, {} in memory)",
            world.pack(&particle(0)).len(),
            std::mem::size_of::<Particle>()
        );
    }
}
