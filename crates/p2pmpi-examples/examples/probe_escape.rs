//! Tries to leave a confined job (for the tests of confined jobs; see docs/security.md).
//!
//! `probe_escape PROBE...`: every rank but 0 (rank 0 is the submitter's own process) runs each
//! probe after `initialize` and prints `rank R PROBE: allowed` or `rank R PROBE: denied
//! (ERROR)`. Probes: `read:PATH`, `list:PATH` (a directory), `write:PATH` (creates the file),
//! `environ:parent` (the daemon's `/proc/PID/environ`), `signal:parent` (signal 0 to the
//! daemon, by `kill`), `alloc:MB` (allocates and touches MB MiB), `own-status` (its own
//! `/proc/self/status`), `write-own` (a file in its directory), `uid` (prints its real user
//! id after `allowed`), `spin` (burns CPU time for ever), `environ:PID`, `signal:PID` (another
//! process), `connect:HOST:PORT` (TCP), `fork:N` (starts N `sleep` processes, then ends
//! them; denied if one could not start), `whoami` (prints `rank R pid PID dir DIR`),
//! `wait-file:NAME` (waits up to 60 s for NAME to appear in its directory).
#![forbid(unsafe_code)]
use mpi::traits::*;
use std::process::Command;

fn probe(p: &str) -> Result<(), String> {
    let e = |e: std::io::Error| e.to_string();
    let parent = std::os::unix::process::parent_id();
    match p.split_once(':').unwrap_or((p, "")) {
        ("read", path) => std::fs::read(path).map(drop).map_err(e),
        ("list", path) => std::fs::read_dir(path).map(drop).map_err(e),
        ("write", path) => std::fs::write(path, b"planted\n").map_err(e),
        ("environ", pid) => {
            let pid = if pid == "parent" { parent.to_string() } else { pid.to_string() };
            std::fs::read(format!("/proc/{pid}/environ")).map(drop).map_err(e)
        }
        ("signal", pid) => {
            let pid = if pid == "parent" { parent.to_string() } else { pid.to_string() };
            let o = Command::new("kill").args(["-0", &pid]).output().map_err(e)?;
            if o.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&o.stderr).trim().to_string())
            }
        }
        ("alloc", mb) => {
            let n: usize = mb.parse::<usize>().map_err(|e| e.to_string())? << 20;
            let mut v: Vec<u8> = Vec::with_capacity(n);
            v.resize(n, 1);
            std::hint::black_box(&v);
            Ok(())
        }
        ("spin", _) => loop {
            std::hint::black_box(std::time::Instant::now());
        },
        ("connect", to) => std::net::TcpStream::connect(to).map(drop).map_err(e),
        ("fork", n) => {
            let n: usize = n.parse().map_err(|e: std::num::ParseIntError| e.to_string())?;
            let mut children = Vec::new();
            let mut error = None;
            for _ in 0..n {
                match Command::new("sleep").arg("20").spawn() {
                    Ok(c) => children.push(c),
                    Err(err) => {
                        error = Some(err);
                        break;
                    }
                }
            }
            let started = children.len();
            for mut c in children {
                let _ = c.kill();
                let _ = c.wait();
            }
            error.map_or(Ok(()), |err| Err(format!("started {started} of {n}: {err}")))
        }
        ("whoami", _) => {
            let dir = std::env::current_dir().map_err(e)?;
            let rank = std::env::var("P2PMPI_RANK").unwrap_or_default();
            println!("rank {rank} pid {} dir {}", std::process::id(), dir.display());
            Ok(())
        }
        ("wait-file", name) => {
            let t = std::time::Instant::now();
            while !std::path::Path::new(name).exists() {
                if t.elapsed() > std::time::Duration::from_secs(60) {
                    return Err(format!("no {name} after 60 s"));
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok(())
        }
        ("own-status", _) => std::fs::read("/proc/self/status").map(drop).map_err(e),
        ("write-own", _) => std::fs::write("own-file.txt", b"mine\n").map_err(e),
        ("uid", _) => {
            let status = std::fs::read_to_string("/proc/self/status").map_err(e)?;
            let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|v| v.split_whitespace().next());
            println!("rank {} uid {}", std::env::var("P2PMPI_RANK").unwrap_or_default(), uid.unwrap_or("?"));
            Ok(())
        }
        _ => Err(format!("unknown probe {p}")),
    }
}

fn main() {
    let probes: Vec<String> = std::env::args().skip(1).collect();
    let universe = mpi::initialize().unwrap();
    let world = universe.world();
    let rank = world.rank();
    if rank != 0 {
        for p in &probes {
            match probe(p) {
                Ok(()) => println!("rank {rank} {p}: allowed"),
                Err(why) => println!("rank {rank} {p}: denied ({why})"),
            }
        }
    }
    world.barrier();
}
