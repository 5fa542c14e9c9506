//! The k-monitor failure detector alone, without MPI: one process of a detector group, for
//! the wide-area tests (network namespaces, NAT) and for trying the detector by hand.
//!
//! `kmnode --id I --key HEX --peers LIST [--k K] [--t-hb MS] [--t-to MS] [--t-hb-wide MS] [--t-to-wide MS]
//! [--refusals N] [--start-at UNIX_MS] [--run MS]`
//!
//! LIST names every process of the group, this one included, as `ID@IP:PORT/PREFIX` separated
//! by commas (PREFIX: the subnet's prefix length; processes of one subnet form a cluster, and
//! clusters keep `k` connections between them, from whichever side can connect). The process
//! listens on its own entry's address, prints `listening ID`, starts the detector at
//! `--start-at` (so that every process of the group listens before anyone connects: a refused
//! connection inside a cluster is a failure), prints `ready ID`, then one line per failure:
//! `failed NODE by ID cause CAUSE at UNIX_MS`, and `links M monitors W wide` whenever the
//! number of its monitors or of its connections to other clusters changes; at the end
//! `sent F frames, B bytes,
//! N failure notices`. It runs `--run` ms (default: until its standard input closes).
#![forbid(unsafe_code)]
use mpi::failure::kmonitor::{Config, Control, Directory, Driver, Endpoint, JobKey, Report, Setup};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn unix_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

fn parse_peer(s: &str) -> Result<Endpoint, String> {
    let (id, rest) = s.split_once('@').ok_or_else(|| format!("{s:?}: want ID@IP:PORT/PREFIX"))?;
    let (addr, prefix) = rest.rsplit_once('/').ok_or_else(|| format!("{s:?}: want ID@IP:PORT/PREFIX"))?;
    let addr: std::net::SocketAddr = addr.parse().map_err(|_| format!("{s:?}: bad address"))?;
    Ok(Endpoint {
        id: id.parse().map_err(|_| format!("{s:?}: bad id"))?,
        ip: addr.ip(),
        prefix: prefix.parse().map_err(|_| format!("{s:?}: bad prefix"))?,
        port: addr.port(),
    })
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut id, mut key, mut peers) = (None, None, Vec::new());
    let (mut k, mut t_hb, mut t_to, mut run, mut start_at) = (4usize, 100u64, 1000u64, None::<u64>, 0u128);
    let (mut wide_hb, mut wide_to, mut refusals) = (None::<u64>, None::<u64>, None::<u32>);
    let value = |a: &str, v: Option<String>| v.unwrap_or_else(|| panic!("{a} needs a value"));
    while let Some(a) = args.next() {
        match a.as_str() {
            "--id" => id = Some(value(&a, args.next()).parse::<u32>().expect("--id N")),
            "--key" => key = Some(JobKey::from_hex(&value(&a, args.next())).expect("--key: 64 hex digits")),
            "--peers" => {
                peers =
                    value(&a, args.next()).split(',').map(parse_peer).collect::<Result<_, _>>().unwrap_or_else(|e| {
                        eprintln!("kmnode: {e}");
                        std::process::exit(2)
                    })
            }
            "--k" => k = value(&a, args.next()).parse().expect("--k K"),
            "--t-hb" => t_hb = value(&a, args.next()).parse().expect("--t-hb MS"),
            "--t-to" => t_to = value(&a, args.next()).parse().expect("--t-to MS"),
            "--run" => run = Some(value(&a, args.next()).parse().expect("--run MS")),
            "--t-hb-wide" => wide_hb = Some(value(&a, args.next()).parse().expect("--t-hb-wide MS")),
            "--t-to-wide" => wide_to = Some(value(&a, args.next()).parse().expect("--t-to-wide MS")),
            "--refusals" => refusals = Some(value(&a, args.next()).parse().expect("--refusals N")),
            "--start-at" => start_at = value(&a, args.next()).parse().expect("--start-at UNIX_MS"),
            other => {
                eprintln!("kmnode: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    let (Some(id), Some(key)) = (id, key) else {
        eprintln!("kmnode: --id and --key are required");
        std::process::exit(2);
    };
    let Some(me) = peers.iter().find(|e| e.id == id).copied() else {
        eprintln!("kmnode: --peers does not name --id {id}");
        std::process::exit(2);
    };
    let listener = std::net::TcpListener::bind((me.ip, me.port)).unwrap_or_else(|e| {
        eprintln!("kmnode: cannot listen on {}:{}: {e}", me.ip, me.port);
        std::process::exit(1)
    });
    println!("listening {id}");
    let _ = std::io::stdout().flush();
    while unix_ms() < start_at {
        std::thread::sleep(Duration::from_millis(((start_at - unix_ms()) as u64).clamp(1, 50)));
    }
    let mut cfg = Config::new(k, Duration::from_millis(t_hb), Duration::from_millis(t_to));
    cfg.wide_t_hb = Duration::from_millis(wide_hb.unwrap_or(t_hb));
    cfg.wide_t_to = Duration::from_millis(wide_to.unwrap_or(t_to));
    cfg.wide_refusals = refusals.unwrap_or(cfg.wide_refusals);
    if cfg.wide_t_to <= cfg.wide_t_hb || cfg.wide_refusals == 0 {
        eprintln!("kmnode: --t-to-wide must be longer than --t-hb-wide, and --refusals at least 1");
        std::process::exit(2);
    }
    let dir = Arc::new(Directory::new(peers.iter().copied(), true));
    let seed = key.seed("kmnode") ^ u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(std::process::id());
    let ctl = Arc::new(Control::default());
    let driver = Driver::new(Setup { me, dir, cfg, key, seed }, listener, ctl.clone()).expect("start the detector");
    let counters = driver.counters();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            driver.run(
                |r| {
                    let line = match r {
                        Report::Failed { node, cause } => {
                            format!("failed {node} by {id} cause {cause:?} at {}", unix_ms())
                        }
                        Report::Excluded => format!("excluded {id} at {}", unix_ms()),
                    };
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{line}");
                    let _ = out.flush();
                },
                move || stop.load(Ordering::SeqCst),
            )
        })
    };
    println!("ready {id}");
    let _ = std::io::stdout().flush();
    match run {
        Some(ms) => {
            let end = Instant::now() + Duration::from_millis(ms);
            let mut shown = (u64::MAX, u64::MAX);
            while Instant::now() < end {
                let now = (counters.monitors.load(Ordering::Relaxed), counters.wide_links.load(Ordering::Relaxed));
                if now != shown {
                    shown = now;
                    println!("links {} monitors {} wide", now.0, now.1);
                    let _ = std::io::stdout().flush();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        None => {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        }
    }
    ctl.leave(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    let _ = thread.join();
    println!(
        "sent {} frames, {} bytes, {} failure notices",
        counters.frames_sent.load(Ordering::Relaxed),
        counters.bytes_sent.load(Ordering::Relaxed),
        counters.failure_msgs.load(Ordering::Relaxed)
    );
}
