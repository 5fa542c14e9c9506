//! Large messages between two ranks, for the memory benchmark of replicated jobs
//! (`bench/replication_memory.sh`): `bigmsg MIB ROUNDS` — rank 0 and rank 1 exchange a message
//! of MIB MiB back and forth ROUNDS times, in one buffer each; rank 0 prints a checksum.
//!
//! With `BIGMSG_OUT=DIR` every process writes its peak resident memory (`VmHWM`, KiB) to
//! `DIR/slot-<P2PMPI_RANK>.txt` at the end — every replica, not only the masters whose output
//! is shown.
#![forbid(unsafe_code)]
use mpi::traits::*;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (mib, rounds) = (arg(0, 256), arg(1, 2));
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    let mut buf = vec![0u8; mib << 20];
    if rank == 0 {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
    }
    for _ in 0..rounds {
        match rank {
            0 => {
                world.process_at_rank(1).send(&buf[..]);
                world.process_at_rank(1).receive_into(&mut buf[..]);
            }
            1 => {
                world.process_at_rank(0).receive_into(&mut buf[..]);
                for b in buf.iter_mut().step_by(4096) {
                    *b = b.wrapping_add(1);
                }
                world.process_at_rank(0).send(&buf[..]);
            }
            _ => {}
        }
    }
    world.barrier();
    if rank == 0 {
        let sum = buf.iter().fold(0u64, |h, &b| h.wrapping_mul(31).wrapping_add(b as u64));
        println!("{rounds} round trip(s) of {mib} MiB, checksum {sum:016x}");
    }
    drop(universe);
    if let Ok(dir) = std::env::var("BIGMSG_OUT") {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let hwm = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap_or("0 kB").trim().to_string();
        let slot = std::env::var("P2PMPI_RANK").unwrap_or_else(|_| "0".into());
        let _ = std::fs::write(format!("{dir}/slot-{slot}.txt"), hwm.trim_end_matches(" kB").trim());
    }
}
