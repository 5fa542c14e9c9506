//! Programs for the replication tests (`p2pmpirun -r R`): each prints what it computed, so a
//! run where replicas die can be compared with a fault-free run.
//!
//! * `send K BYTES [MS]` — rank 1 sends K messages of BYTES bytes to rank 2 (exact source
//!   and tag), waiting MS milliseconds before each (so that rank 2's receive is posted when it
//!   arrives); rank 2 prints a checksum of each (thesis figure 4.8's single send, repeated).
//! * `anysource K`    — rank 1 sends K messages with different tags to rank 2, which receives
//!   them with `ANY_SOURCE`/`ANY_TAG` (thesis figures 4.6–4.7).
//! * `random`         — rank 1 draws a number with the replicated generator, sends it to rank 2,
//!   both print it (thesis algorithm 6).
//! * `iterate STEPS MS` — every rank: a ring exchange at every step, an allreduce every 10
//!   steps, MS milliseconds of "computation" per step; rank 0 prints a checksum at the end.
//! * `workers TASKS [test]` — master-worker: rank 0 hands out tasks and collects results in
//!   arrival order (`ANY_SOURCE` receives polled with immediate probes, or with `test`: an
//!   immediate `ANY_SOURCE` receive polled with `test`); with `REPLCHECK_OUT=DIR`,
//!   each replica of rank 0 writes the order it saw (and how many polls missed) to
//!   `DIR/order-<slot>.txt`: replicas must follow their master's choices.
//! * `longpoll ROUNDS POLLS` — rank 0 posts an immediate `ANY_SOURCE` receive and polls it
//!   with `test` POLLS times before it tells a worker (rank 1, 2, … in turn) to send, then
//!   until it completes: the receive's choice is told after thousands of tests' choices.
#![forbid(unsafe_code)]
use mpi::point_to_point as p2p;
use mpi::traits::*;

fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    assert!(size >= 3 || args.first().map(String::as_str) == Some("iterate"), "needs at least 3 ranks");
    match args.first().map(String::as_str).unwrap_or("send") {
        "send" => {
            let (k, bytes, pause) = (arg(1, 5), arg(2, 64) as usize, arg(3, 0));
            if rank == 1 {
                for i in 0..k {
                    std::thread::sleep(std::time::Duration::from_millis(pause));
                    let msg: Vec<u8> = (0..bytes).map(|j| (i as usize * 31 + j * 7) as u8).collect();
                    world.process_at_rank(2).send_with_tag(&msg[..], 5);
                }
                println!("rank 1 sent {k} message(s) of {bytes} B");
            } else if rank == 2 {
                let mut msg = vec![0u8; bytes];
                for i in 0..k {
                    // Posted before the message comes (when rank 1 pauses): received in place.
                    let st = world.process_at_rank(1).receive_into_with_tag(&mut msg[..], 5);
                    println!(
                        "rank 2 got message {i}: {} B from {} checksum {:016x}",
                        msg.len(),
                        st.source_rank(),
                        checksum(&msg)
                    );
                }
            }
        }
        "anysource" => {
            let k = arg(1, 4);
            if rank == 1 {
                for i in 0..k {
                    world.process_at_rank(2).send_with_tag(&(1000 + i), i as i32);
                }
            } else if rank == 2 {
                for _ in 0..k {
                    let (v, st) = world.any_process().receive::<u64>();
                    println!("rank 2 got {v} from rank {} tag {}", st.source_rank(), st.tag());
                }
            }
        }
        "random" => {
            if rank == 1 {
                let r = mpi::random::Rand::new().range(0, 1_000_000);
                world.process_at_rank(2).send(&r);
                println!("rank 1 drew {r}");
            } else if rank == 2 {
                let (r, _) = world.process_at_rank(1).receive::<u64>();
                println!("rank 2 received {r}");
            }
        }
        "iterate" => {
            let (steps, ms) = (arg(1, 100), arg(2, 10));
            let next = world.process_at_rank((rank + 1) % size);
            let prev = world.process_at_rank((rank + size - 1) % size);
            let mut v: u64 = rank as u64 + 1;
            let mut total = 0u64;
            for step in 0..steps {
                // Some work, then the exchange.
                std::thread::sleep(std::time::Duration::from_millis(ms));
                v = v.wrapping_mul(6364136223846793005).wrapping_add(step + 1442695040888963407);
                let (got, _): (u64, _) = p2p::send_receive(&v, &next, &prev);
                v ^= got.rotate_left(17);
                if step % 10 == 9 {
                    let mut sum = 0u64;
                    world.all_reduce_into(&(v % 1_000_003), &mut sum, mpi::collective::SystemOperation::sum());
                    total = total.wrapping_add(sum);
                    if rank == 0 {
                        println!("step {step}: sum {sum}");
                    }
                }
            }
            if rank == 0 {
                println!("checksum {total:016x} after {steps} steps on {size} ranks");
            }
        }
        "workers" => {
            // Master-worker: rank 0 hands out TASKS tasks and collects the results in arrival
            // order (ANY_SOURCE receives, polled with immediate probes): a program whose path
            // depends on arrival order, which replicas must follow from their master.
            let tasks = arg(1, 40);
            const STOP: u64 = u64::MAX;
            if rank == 0 {
                let mut log = String::new();
                let mut next = 0u64;
                for w in 1..size {
                    let t = if next < tasks { next } else { STOP };
                    world.process_at_rank(w).send(&t);
                    next += 1;
                }
                let (mut done, mut sum, mut polls) = (0u64, 0u64, 0u64);
                let with_test = args.get(2).map(String::as_str) == Some("test");
                while done < tasks {
                    let (res, st) = if with_test {
                        // An immediate ANY_SOURCE receive, polled with `test`.
                        let mut res = 0u64;
                        let st = mpi::request::scope(|scope| {
                            let mut req = world.any_process().immediate_receive_into(scope, &mut res);
                            loop {
                                match req.test() {
                                    Ok(st) => break st,
                                    Err(r) => {
                                        req = r;
                                        polls += 1;
                                        std::thread::sleep(std::time::Duration::from_micros(300));
                                    }
                                }
                            }
                        });
                        (res, st)
                    } else {
                        while world.any_process().immediate_probe().is_none() {
                            polls += 1;
                            std::thread::sleep(std::time::Duration::from_micros(300));
                        }
                        world.any_process().receive::<u64>()
                    };
                    let w = st.source_rank();
                    log += &format!("{res} from {w}\n");
                    sum = sum.wrapping_add(res);
                    done += 1;
                    let t = if next < tasks { next } else { STOP };
                    world.process_at_rank(w).send(&t);
                    next += 1;
                }
                log += &format!("polls {polls}\n");
                println!("{tasks} tasks, sum of results {sum}");
                if let Ok(dir) = std::env::var("REPLCHECK_OUT") {
                    let slot = std::env::var("P2PMPI_RANK").unwrap_or_else(|_| "0".into());
                    std::fs::write(format!("{dir}/order-{slot}.txt"), &log).unwrap();
                }
            } else {
                loop {
                    let (t, _) = world.process_at_rank(0).receive::<u64>();
                    if t == STOP {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis((t * 7 + rank as u64 * 3) % 5));
                    world.process_at_rank(0).send(&(t * t));
                }
            }
        }
        "longpoll" => longpoll(&world, arg(1, 3), arg(2, 6000)),
        other => panic!("unknown mode {other}"),
    }
}

/// `longpoll ROUNDS POLLS` (see the module's documentation).
fn longpoll(world: &mpi::topology::SimpleCommunicator, rounds: u64, polls: u64) {
    let (rank, size) = (world.rank(), world.size());
    // The master's choice of the receive comes when its message does, which rank 0
    // asks for only after POLLS tests, each a choice point decided (not yet) at once:
    // a replica of rank 0 follows them all before it learns the receive's choice.
    if rank == 0 {
        let (mut sum, mut tests) = (0u64, 0u64);
        for i in 0..rounds {
            let w = 1 + (i % (size as u64 - 1)) as i32;
            let mut got = 0u64;
            let st = mpi::request::scope(|scope| {
                let mut req = world.any_process().immediate_receive_into(scope, &mut got);
                let mut n = 0u64;
                let st = loop {
                    match req.test() {
                        Ok(st) => break st,
                        Err(r) => req = r,
                    }
                    n += 1;
                    if n == polls {
                        world.process_at_rank(w).send(&i);
                    }
                };
                tests += n;
                st
            });
            assert_eq!((st.source_rank(), got), (w, i * 10 + w as u64), "round {i}");
            sum += got;
        }
        println!("longpoll: {rounds} rounds, sum {sum}, at least {polls} tests each {}", tests >= rounds * polls);
    } else {
        let mine = (0..rounds).filter(|i| 1 + (i % (size as u64 - 1)) as i32 == rank);
        for _ in mine {
            let (i, _) = world.process_at_rank(0).receive::<u64>();
            world.process_at_rank(0).send(&(i * 10 + rank as u64));
        }
    }
}
