//! Where does each rank run? For grid tests and demos.
//!
//! `whereami [--pre-init-sleep MS] [--hold MS] [FILE]`: every rank prints
//! `rank R of N on HOST` (HOST: the address its peer gave it, or `local`) and, when FILE is
//! given, the file's first line as read from its working directory (the staged copy).
//! `--pre-init-sleep` waits before `initialize` (a slow start-up); `--hold` keeps the job
//! running for a while after it (a job that holds its hosts). `--env VAR` adds ` VAR=VALUE` (or
//! ` VAR unset`) to the line; `--write PREFIX` makes every rank write `PREFIX.<rank>.txt` in its
//! working directory; `--panic RANK` makes that rank panic (a two-line message) after
//! `initialize`; `--affinity` adds ` cpus=LIST`, the CPUs it may run on (`Cpus_allowed_list` of
//! /proc/self/status: what `p2pmpirun --bind-to core` set).
#![forbid(unsafe_code)]
use mpi::traits::*;
use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut pre, mut hold, mut file) = (0u64, 0u64, None);
    let (mut vars, mut write, mut panic_rank, mut affinity) = (Vec::new(), None, None, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--env" => vars.push(args.next().expect("--env VAR")),
            "--write" => write = Some(args.next().expect("--write PREFIX")),
            "--panic" => panic_rank = Some(args.next().and_then(|v| v.parse::<i32>().ok()).expect("--panic RANK")),
            "--pre-init-sleep" => pre = args.next().and_then(|v| v.parse().ok()).expect("--pre-init-sleep MS"),
            "--affinity" => affinity = true,
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
    for v in &vars {
        match std::env::var(v) {
            Ok(val) => line.push_str(&format!(" {v}={val}")),
            Err(_) => line.push_str(&format!(" {v} unset")),
        }
    }
    if affinity {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let cpus = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("?").trim();
        line.push_str(&format!(" cpus={cpus}"));
    }
    if let Some(prefix) = &write {
        let name = format!("{prefix}.{}.txt", world.rank());
        std::fs::write(&name, format!("written by rank {}\n", world.rank())).expect("write the file");
    }
    if panic_rank == Some(world.rank()) {
        panic!("boom from rank {}\nsecond line of the panic", world.rank());
    }
    println!("{line}");
    std::thread::sleep(Duration::from_millis(hold));
    world.barrier();
}
