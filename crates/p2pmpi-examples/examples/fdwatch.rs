//! Watches the failure detector: for tests and demos of failure detection.
//!
//! `fdwatch [--notify] [--hold MS] [--work] [--stream]`
//!
//! With `--work` it computes (rounds of 10⁶ multiply-adds) instead of sleeping, and prints
//! `rank R worked W rounds in T ms` at the end of its hold.
//!
//! Every rank initializes, passes a barrier and prints `rank R ready pid PID on HOST at UNIX_MS`
//! (HOST: the address its peer gave it, or `local`). Then:
//! * without `--notify` (the default policy, Stop): it waits `--hold` ms (computing if
//!   `--work`), enters a barrier and prints `rank R done`. If a process fails meanwhile, the
//!   failure detector stops every process with an error naming the failed rank.
//! * with `--notify` (the program handles failures): every confirmed failure prints
//!   `rank R notified: rank K failed at UNIX_MS`; the process keeps running until `--hold` ms
//!   after start-up and finalizes (without the goodbye handshake once a process failed).
//! * with `--stream`: rank 0 sends 64 KiB messages to rank 1 for `--hold` ms (rank 1 receives
//!   them), then both pass a barrier: a send that the network stops carrying gives up after
//!   2·T_cleanup.
#![forbid(unsafe_code)]
use mpi::traits::*;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn unix_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut notify, mut hold, mut work, mut stream) = (false, 1000u64, false, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--notify" => notify = true,
            "--work" => work = true,
            "--stream" => stream = true,
            "--hold" => hold = args.next().and_then(|v| v.parse().ok()).expect("--hold MS"),
            other => panic!("unknown argument {other:?}"),
        }
    }
    if notify {
        mpi::failure::set_policy(mpi::failure::Policy::Notify);
    }
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let me = world.rank();
    mpi::failure::on_failure(move |n| {
        println!("rank {me} notified: rank {} failed at {}", n.rank, unix_ms());
        let _ = std::io::stdout().flush();
    });
    world.barrier();
    let start = Instant::now();
    let host = std::env::var("P2PMPI_BIND").unwrap_or_else(|_| "local".into());
    println!("rank {me} ready pid {} on {host} at {}", std::process::id(), unix_ms());
    let _ = std::io::stdout().flush();
    let hold = Duration::from_millis(hold);
    let mut x = 0u64;
    let mut rounds = 0u64;
    if stream && world.size() >= 2 && me <= 1 {
        let mut buf = vec![0u8; 64 << 10];
        let mut count = 0u64;
        loop {
            let go = start.elapsed() < hold;
            if me == 0 {
                world.process_at_rank(1).send(&(go as u8));
                if !go {
                    break;
                }
                world.process_at_rank(1).send(&buf[..]);
            } else {
                let (go, _) = world.process_at_rank(0).receive::<u8>();
                if go == 0 {
                    break;
                }
                world.process_at_rank(0).receive_into(&mut buf[..]);
            }
            count += 1;
        }
        println!("rank {me} streamed {count} messages");
    }
    while start.elapsed() < hold {
        if work {
            for i in 0..1_000_000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            }
            rounds += 1;
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if work {
        println!("rank {me} worked {rounds} rounds in {} ms", start.elapsed().as_millis());
    }
    if let Some((datagrams, bytes, ran)) = mpi::failure::detector_traffic() {
        let kind = mpi::failure::detector_kind().unwrap_or("none");
        println!("rank {me} detector sent {datagrams} datagrams, {bytes} bytes in {} ms ({kind})", ran.as_millis());
        if let Some(f) = mpi::failure::failure_notices_sent() {
            println!("rank {me} failure notices sent {f}");
        }
    }
    if notify {
        println!("rank {me} exits (failed: {:?}) {}", mpi::failure::failed_ranks(), x % 2);
        return;
    }
    world.barrier();
    println!("rank {me} done {}", x % 2);
}
