//! `#[derive(Equivalence)]` on plain structs, nested structs, arrays and tuples: each rank
//! sends a particle to the next one (ring) and checks what it gets.
#![forbid(unsafe_code)]
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

/// Over-aligned: 64 bytes in memory for 5 bytes of data; arrays of it step by 64.
#[derive(Equivalence, Debug, Clone, Copy, PartialEq, Default)]
#[repr(align(64))]
struct Line {
    tag: u8,
    value: f32,
}

/// Packed: 9 bytes in memory, although a u64 alone would pad a struct to 16.
#[derive(Equivalence, Debug, Clone, Copy, PartialEq, Default)]
#[repr(C, packed)]
struct Packed {
    kind: u8,
    value: u64,
}

/// Arrays of tuples whose element is over-aligned: the tuple's extent is its size too.
#[derive(Equivalence, Debug, Clone, Copy, PartialEq, Default)]
struct Lines {
    pairs: [(u8, Line); 3],
}

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

    // The datatype of a derived struct spans exactly its size, whatever its alignment.
    use mpi::datatype::DatatypeInfo;
    assert_eq!(Line::equivalent_datatype().extent(), std::mem::size_of::<Line>() as mpi::Address);
    assert_eq!(Packed::equivalent_datatype().extent(), 9);
    assert_eq!(Lines::equivalent_datatype().extent(), std::mem::size_of::<Lines>() as mpi::Address);
    let line = |i: i32| Line { tag: i as u8, value: i as f32 / 2.0 };
    let lines: Vec<Line> = (0..5).map(|i| line(rank * 10 + i)).collect();
    let packed: Vec<Packed> = (0..5).map(|i| Packed { kind: i as u8, value: (rank * 100 + i) as u64 }).collect();
    let nested = Lines { pairs: [(1, line(rank)), (2, line(rank + 1)), (3, line(rank + 2))] };
    mpi::request::scope(|scope| {
        let _a = mpi::request::WaitGuard::from(next.immediate_send(scope, &lines[..]));
        let _b = mpi::request::WaitGuard::from(next.immediate_send_with_tag(scope, &packed[..], 1));
        let _c = mpi::request::WaitGuard::from(next.immediate_send_with_tag(scope, &nested, 2));
        let p = prev.rank();
        let (got, _) = prev.receive_vec::<Line>();
        assert_eq!(got, (0..5).map(|i| line(p * 10 + i)).collect::<Vec<_>>());
        let (got, _) = prev.receive_vec_with_tag::<Packed>(1);
        assert_eq!(got, (0..5).map(|i| Packed { kind: i as u8, value: (p * 100 + i) as u64 }).collect::<Vec<_>>());
        let (got, _) = prev.receive_with_tag::<Lines>(2);
        assert_eq!(got, Lines { pairs: [(1, line(p)), (2, line(p + 1)), (3, line(p + 2))] });
    });
    world.barrier();
    if rank == 0 {
        println!(
            "derived datatypes: OK across {size} processes (Particle: {} data bytes, {} in memory)",
            world.pack(&particle(0)).len(),
            std::mem::size_of::<Particle>()
        );
    }
}
