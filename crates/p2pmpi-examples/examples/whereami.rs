//! Where does each rank run? For grid tests and demos.
//!
//! `whereami [--pre-init-sleep MS] [--hold MS] [FILE]`: every rank prints
//! `rank R of N on HOST` (HOST: the address its peer gave it, or `local`) and, when FILE is
//! given, the file's first line as read from its working directory (the staged copy).
//! `--pre-init-sleep` waits before `initialize` (a slow start-up); `--hold` keeps the job
//! running for a while after it (a job that holds its hosts).
#![forbid(unsafe_code)]
use mpi::traits::*;
use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut pre, mut hold, mut file) = (0u64, 0u64, None);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--pre-init-sleep" => pre = args.next().and_then(|v| v.parse().ok()).expect("--pre-init-sleep MS"),
            "--hold" => hold = args.next().and_then(|v| v.parse().ok()).expect("--hold MS"),
            _ => file = Some(a),
        }
    }
    std::thread::sleep(Duration::from_millis(pre));
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let host = std::env::var("P2PMPI_BIND").unwrap_or_else(|_| "local".into());
    let mut line = format!("rank {} of {} on {host}", world.rank(), world.size());
    if let Some(f) = file {
        match std::fs::read_to_string(&f) {
            Ok(text) => line.push_str(&format!(" read {f}: {}", text.lines().next().unwrap_or(""))),
            Err(e) => line.push_str(&format!(" cannot read {f}: {e}")),
        }
    }
    println!("{line}");
    std::thread::sleep(Duration::from_millis(hold));
    world.barrier();
}
