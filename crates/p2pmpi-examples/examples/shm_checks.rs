//! Checks of the shared-memory path (tests in p2pmpi-cli/tests/shm.rs): `shm_checks MODE`.
//! Rank 0 prints `OK MODE` at the end of a mode that passed.
//!
//! * `sizes`: rank 0 exchanges messages of many sizes (empty to several MiB, across the ring
//!   capacity and the eager limit) with every other rank, blocking and non-blocking, and
//!   checks every byte and the order.
//! * `anysource`: every rank sends rank 0 a stream of messages of mixed sizes; rank 0 takes
//!   them with `ANY_SOURCE` and checks each source's order and content.
//! * `large`: every size across the single-copy threshold (64 KiB, the eager limit 128 KiB)
//!   both ways with standard and synchronous sends, then bursts of immediate sends and
//!   receives of large messages both ways at once, every byte checked.
//! * `stream MIB`: rank 1 sends rank 0 messages of MIB MiB without end, once a line
//!   `PID <rank> <pid>` of every rank and `STREAMING` are printed (a test kills a rank while
//!   the data flows).
#![forbid(unsafe_code)]
use mpi::traits::*;
use std::io::Write;

fn pattern(n: usize, seed: usize) -> Vec<u8> {
    (0..n).map(|i| ((i * 131 + seed * 7 + i / 251) % 256) as u8).collect()
}

const SIZES: &[usize] = &[
    0,
    1,
    8,
    40,
    1000,
    4095,
    4096,
    4097,
    16383,
    16384,
    65535,
    65536,
    65537,
    128 * 1024,
    128 * 1024 + 1,
    1 << 20,
    (4 << 20) + 7,
];

/// Sizes around the single-copy threshold (64 KiB for synchronous sends, above the eager
/// limit for standard ones) and well above it, odd ones included.
const LARGE: &[usize] = &[
    65535,
    65536,
    65537,
    100_003,
    128 * 1024 - 1,
    128 * 1024,
    128 * 1024 + 1,
    200_000,
    256 * 1024,
    (1 << 20) - 3,
    1 << 20,
    (3 << 20) + 5,
    4 << 20,
    (8 << 20) + 1,
];

fn large(world: &mpi::topology::SimpleCommunicator) {
    let (rank, size) = (world.rank(), world.size());
    // One size after the other, standard then synchronous, there and back.
    for (k, &n) in LARGE.iter().enumerate() {
        for sync in [false, true] {
            let tag = (2 * k + sync as usize) as i32;
            if rank == 0 {
                for peer in 1..size {
                    let p = world.process_at_rank(peer);
                    let data = pattern(n, k * 3 + peer as usize);
                    if sync {
                        p.synchronous_send_with_tag(&data[..], tag);
                    } else {
                        p.send_with_tag(&data[..], tag);
                    }
                    let mut back = vec![0u8; n];
                    let st = p.receive_into_with_tag(&mut back[..], tag);
                    assert_eq!(st.count(u8::equivalent_datatype()) as usize, n);
                    let want: Vec<u8> = data.iter().map(|b| b.wrapping_add(1)).collect();
                    assert!(back == want, "size {n} (sync {sync}) back from {peer}");
                }
            } else {
                let p = world.process_at_rank(0);
                let mut buf = vec![0u8; n];
                let st = p.receive_into_with_tag(&mut buf[..], tag);
                assert_eq!(st.count(u8::equivalent_datatype()) as usize, n);
                assert!(buf == pattern(n, k * 3 + rank as usize), "size {n} (sync {sync}) at rank {rank}");
                for b in buf.iter_mut() {
                    *b = b.wrapping_add(1);
                }
                if sync {
                    p.synchronous_send_with_tag(&buf[..], tag);
                } else {
                    p.send_with_tag(&buf[..], tag);
                }
            }
        }
    }
    // Bursts: every rank posts all its immediate receives and sends at once, both ways
    // (rank 0 with every other rank), every message large; each is checked.
    let others: Vec<i32> = if rank == 0 { (1..size).collect() } else { vec![0] };
    for round in 0..3usize {
        let outgoing: Vec<(i32, usize, Vec<u8>)> = others
            .iter()
            .flat_map(|&p| {
                LARGE.iter().enumerate().map(move |(k, &n)| (p, k, pattern(n, 1000 * round + 10 * rank as usize + k)))
            })
            .collect();
        let mut incoming: Vec<(i32, usize, Vec<u8>)> =
            others.iter().flat_map(|&p| LARGE.iter().enumerate().map(move |(k, &n)| (p, k, vec![0u8; n]))).collect();
        mpi::request::scope(|scope| {
            let mut recvs = Vec::new();
            for (p, k, buf) in incoming.iter_mut() {
                let r = world.process_at_rank(*p).immediate_receive_into_with_tag(scope, &mut buf[..], 500 + *k as i32);
                recvs.push(r);
            }
            let mut sends = Vec::new();
            for (p, k, data) in outgoing.iter() {
                sends.push(world.process_at_rank(*p).immediate_send_with_tag(scope, &data[..], 500 + *k as i32));
            }
            for r in recvs {
                r.wait();
            }
            for s in sends {
                s.wait();
            }
        });
        for (p, k, buf) in &incoming {
            assert!(
                *buf == pattern(buf.len(), 1000 * round + 10 * *p as usize + k),
                "burst {round}: message {k} from {p} at rank {rank}"
            );
        }
    }
    world.barrier();
}

fn sizes(world: &mpi::topology::SimpleCommunicator) {
    let (rank, size) = (world.rank(), world.size());
    for (k, &n) in SIZES.iter().enumerate() {
        if rank == 0 {
            for peer in 1..size {
                let p = world.process_at_rank(peer);
                let data = pattern(n, k + peer as usize);
                p.send_with_tag(&data[..], k as i32);
                let mut back = vec![0u8; n];
                let st = p.receive_into_with_tag(&mut back[..], k as i32);
                assert_eq!(st.count(u8::equivalent_datatype()) as usize, n);
                assert!(back == data.iter().map(|b| b.wrapping_add(1)).collect::<Vec<u8>>(), "size {n} from {peer}");
            }
        } else {
            let p = world.process_at_rank(0);
            let mut buf = vec![0u8; n];
            p.receive_into_with_tag(&mut buf[..], k as i32);
            assert!(buf == pattern(n, k + rank as usize), "size {n} at rank {rank}");
            for b in buf.iter_mut() {
                *b = b.wrapping_add(1);
            }
            p.send_with_tag(&buf[..], k as i32);
        }
    }
    // A burst of non-blocking sends of every size at once: they arrive in order.
    if rank == 0 {
        let bufs: Vec<Vec<u8>> = SIZES.iter().enumerate().map(|(k, &n)| pattern(n, 100 + k)).collect();
        mpi::request::scope(|scope| {
            let mut reqs = Vec::new();
            for peer in 1..size {
                for b in &bufs {
                    reqs.push(world.process_at_rank(peer).immediate_send_with_tag(scope, &b[..], 9));
                }
            }
            for r in reqs {
                r.wait();
            }
        });
    } else {
        for (k, &n) in SIZES.iter().enumerate() {
            let (v, _st) = world.process_at_rank(0).receive_vec_with_tag::<u8>(9);
            assert_eq!(v.len(), n, "burst message {k} in order");
            assert!(v == pattern(n, 100 + k), "burst message {k}");
        }
    }
    world.barrier();
}

fn anysource(world: &mpi::topology::SimpleCommunicator) {
    let (rank, size) = (world.rank(), world.size());
    let per = 60;
    let len = |src: i32, i: i32| [8usize, 3000, 20_000, 200_000][((src + i) % 4) as usize];
    if rank == 0 {
        let mut seen = vec![0; size as usize];
        let mut buf = vec![0u8; 200_000];
        for _ in 0..(size - 1) * per {
            let st = world.any_process().receive_into(&mut buf[..]);
            let src = st.source_rank();
            let i = seen[src as usize];
            let n = st.count(u8::equivalent_datatype()) as usize;
            assert_eq!(st.tag(), i, "per-source order from {src}");
            assert_eq!(n, len(src, i), "length of message {i} from {src}");
            assert!(buf[..n] == pattern(n, (src * 1000 + i) as usize)[..], "content of message {i} from {src}");
            seen[src as usize] += 1;
        }
        assert!(seen[1..].iter().all(|&c| c == per));
    } else {
        for i in 0..per {
            let data = pattern(len(rank, i), (rank * 1000 + i) as usize);
            world.process_at_rank(0).send_with_tag(&data[..], i);
        }
    }
    world.barrier();
}

fn stream(world: &mpi::topology::SimpleCommunicator, mib: usize) {
    let rank = world.rank();
    println!("PID {rank} {}", std::process::id());
    let _ = std::io::stdout().flush();
    world.barrier();
    if rank == 0 {
        println!("STREAMING");
        let _ = std::io::stdout().flush();
    }
    // Until a test kills one of them.
    let mut buf = vec![0u8; mib << 20];
    loop {
        match rank {
            0 => {
                world.process_at_rank(1).receive_into(&mut buf[..]);
            }
            1 => {
                world.process_at_rank(0).send(&buf[..]);
            }
            _ => world.barrier(),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).cloned().unwrap_or_else(|| "sizes".into());
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    match mode.as_str() {
        "sizes" => sizes(&world),
        "anysource" => anysource(&world),
        "large" => large(&world),
        "stream" => stream(&world, args.get(2).and_then(|a| a.parse().ok()).unwrap_or(16)),
        m => panic!("unknown mode {m}"),
    }
    if world.rank() == 0 {
        println!("OK {mode}");
    }
}
