//! Checkpoints kept on peers of the grid (issue 41), for the tests: every rank checkpoints a
//! state holding a marker, then reads its piece back through the store of its run.
//!
//! `ckpt_peers store MARKER KIB GO_FILE`: checkpoints at steps 1 and 2 (KIB KiB of state
//! each), prints `ready` (rank 0) and waits until GO_FILE exists (a test acts on the copies
//! meanwhile), then each rank reads the last complete generation back, checks it and prints
//! `rank R restored step S ok`.
//!
//! `ckpt_peers quota MARKER SMALL_KIB BIG_KIB`: a checkpoint of SMALL_KIB KiB, one of BIG_KIB
//! KiB (beyond the peers' quota: its error is printed and the job goes on), and prints the
//! last complete step the store holds.
#![forbid(unsafe_code)]
use mpi::checkpoint::peers::Peers;
use mpi::checkpoint::store::{split_piece, Store};
use mpi::traits::*;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

#[derive(Serialize, Deserialize, PartialEq, Debug)]
struct State {
    step: u64,
    marker: String,
    data: Vec<u8>,
}

fn state(rank: i32, step: u64, marker: &str, kib: usize) -> State {
    let data = (0..kib * 1024).map(|i| (i as u64 * 31 + step * 7 + rank as u64) as u8).collect();
    State { step, marker: format!("{marker}-rank{rank}-step{step}"), data }
}

/// The last complete generation's step in the store, and this rank's state in it.
fn read_back(rank: i32) -> Result<(u64, State), String> {
    let store = Peers::from_env()?;
    let m = store.latest().map_err(|e| e.to_string())?.ok_or("no complete generation")?;
    let piece = store.get_piece(&m, rank as u32).map_err(|e| e.to_string())?;
    let (_, bytes) = split_piece(&piece)?;
    Ok((m.step, mpi::checkpoint::decode_state(bytes)?))
}

fn main() {
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    println!("rank {rank} host {}", std::env::var("P2PMPI_BIND").unwrap_or_default());
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("store");
    let marker = args.get(2).cloned().unwrap_or_else(|| "MARKER".into());
    let num = |i: usize| args.get(i).and_then(|a| a.parse::<usize>().ok()).unwrap_or(16);
    match mode {
        "store" => {
            let kib = num(3);
            for step in 1..=2 {
                match universe.checkpoint(step, &state(rank, step, &marker, kib)) {
                    Ok(()) => println!("rank {rank} checkpoint {step} ok"),
                    Err(e) => println!("rank {rank} checkpoint {step} failed: {e}"),
                }
            }
            world.barrier();
            if rank == 0 {
                println!("ready");
                let go = std::path::PathBuf::from(args.get(4).expect("GO_FILE"));
                let until = Instant::now() + Duration::from_secs(120);
                while !go.exists() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            world.barrier();
            match read_back(rank) {
                Ok((step, st)) if st == state(rank, step, &marker, kib) => {
                    println!("rank {rank} restored step {step} ok")
                }
                Ok((step, _)) => println!("rank {rank} restored step {step}: WRONG STATE"),
                Err(e) => println!("rank {rank} restore failed: {e}"),
            }
        }
        "quota" => {
            let (small, big) = (num(3), num(4));
            for (step, kib) in [(1, small), (2, big)] {
                match universe.checkpoint(step, &state(rank, step, &marker, kib)) {
                    Ok(()) => println!("rank {rank} checkpoint {step} ok"),
                    Err(e) => println!("rank {rank} checkpoint {step} failed: {e}"),
                }
            }
            match read_back(rank) {
                Ok((step, st)) if st == state(rank, step, &marker, small) => {
                    println!("rank {rank} last complete step {step} ok")
                }
                Ok((step, _)) => println!("rank {rank} last complete step {step}: WRONG STATE"),
                Err(e) => println!("rank {rank} restore failed: {e}"),
            }
        }
        other => panic!("unknown mode {other}"),
    }
}
