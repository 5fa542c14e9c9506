//! Storms against real daemons of a local grid (issue 13, item 9): reservation requests by the
//! thousand and jobs competing for hosts. Each checks that `MAX_JOBS` (J) and
//! `MAX_PROCESSES_PER_JOB` (P) were never exceeded and that no ticket, process or file was
//! left behind. `bench/soak.sh` repeats them (`P2PMPI_SOAK_STORMS=N` storms per test).
#![forbid(unsafe_code)]

mod common;

use common::grid::{TestGrid, LIMIT};
use common::{example, run_cmd};
use p2pmpi_cli::local_grid::GridFile;
use p2pmpi_peer::home::MpdState;
use p2pmpi_peer::mpd;
use p2pmpi_wire::grid::{AppProcess, MpdRequest, MpdResponse, RsRequest, RsResponse, Ticket};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Requests of one reservation storm, all released at once.
const STORM: usize = 1000;
/// The storm's clients speak from this many loopback addresses (a daemon admits at most 32
/// connections in their handshake per address; a real storm comes from many hosts).
const SOURCES: usize = 40;
/// How long one storm client keeps trying to get an answer (its connection may be closed
/// while still in its handshake, to admit others: it then tries again).
const PATIENCE: Duration = Duration::from_secs(120);

fn storms() -> usize {
    std::env::var("P2PMPI_SOAK_STORMS").ok().and_then(|v| v.parse().ok()).unwrap_or(1)
}

struct Grid {
    file: GridFile,
    secret: GridSecret,
}

impl Grid {
    fn read(g: &TestGrid) -> Grid {
        let text = std::fs::read_to_string(g.dir.join("grid.json")).expect("grid.json");
        let file: GridFile = serde_json::from_str(&text).expect("grid.json parses");
        let secret = GridSecret::from_phrase(&file.secret);
        Grid { file, secret }
    }

    fn peer(&self, i: usize) -> &MpdState {
        &self.file.peers[i - 1].state
    }

    fn rs(&self, i: usize) -> SocketAddr {
        let st = self.peer(i);
        SocketAddr::new(st.mpd_addr().ip(), st.rs_port)
    }

    /// The application processes peer `i` runs (`mpistat`).
    fn apps(&self, i: usize) -> Vec<AppProcess> {
        match mpd::call(None, self.peer(i).mpd_addr(), &self.secret, &MpdRequest::Stat) {
            Ok(MpdResponse::Stat { apps, .. }) => apps,
            other => panic!("peer {i}: Stat answered {other:?}"),
        }
    }
}

/// Pause before attempt `n` of a client whose connection failed: exponential, from 20 ms up
/// to 1 s, with jitter (`seed` tells the clients apart), as a client should behave in a storm.
fn backoff(n: u32, seed: u64) -> Duration {
    let base = 20u64 << n.min(6);
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(n as u64 + 1);
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 32;
    Duration::from_millis(base.min(1000) / 2 + x % base.min(1000))
}

/// One reservation request, from `source`, tried again (with [`backoff`]) while the
/// connection fails before an answer (a daemon closes connections still in their handshake to
/// make room for newer ones); the answer and the attempts, or `None` within [`PATIENCE`].
fn reserve(rs: SocketAddr, secret: &GridSecret, source: IpAddr, ticket: Ticket) -> (Option<RsResponse>, u32) {
    let deadline = Instant::now() + PATIENCE;
    let mut n = 0;
    while Instant::now() < deadline {
        n += 1;
        if let Ok(mut c) = SecureConn::connect_from(Some(source), rs, secret, Duration::from_secs(10)) {
            let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
            let req = RsRequest::Reserve { ticket, app: "storm".into(), submitter: source.to_string() };
            if let Ok(a) = c.call::<_, RsResponse>(&req) {
                return (Some(a), n);
            }
        }
        std::thread::sleep(backoff(n, ticket.0 as u64));
    }
    (None, n)
}

fn cancel(rs: SocketAddr, secret: &GridSecret, ticket: Ticket) {
    let deadline = Instant::now() + PATIENCE;
    let mut n = 0;
    loop {
        n += 1;
        if let Ok(mut c) = SecureConn::connect(rs, secret, Duration::from_secs(10)) {
            let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
            if let Ok(a) = c.call::<_, RsResponse>(&RsRequest::Cancel { ticket }) {
                assert_eq!(a, RsResponse::Cancelled, "cancel of ticket {ticket}");
                return;
            }
        }
        assert!(Instant::now() < deadline, "ticket {ticket}: no answer to its cancel within {PATIENCE:?}");
        std::thread::sleep(backoff(n, ticket.0 as u64 ^ 1));
    }
}

fn source(k: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 61, 1 + (k % SOURCES) as u8))
}

fn ticket(storm: usize, k: usize) -> Ticket {
    Ticket(0x5107_0000_0000 + (storm as u128) * 1_000_000 + k as u128)
}

/// Open file descriptors and threads of a process.
fn footprint(pid: u32) -> (usize, usize) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let threads =
        status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    (fds, threads)
}

/// Waits (bounded) until `pid` holds no more descriptors and threads than `base` (plus a
/// little: a log file rotating, a cache being written).
fn wait_footprint_back(pid: u32, base: (usize, usize), what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = footprint(pid);
        if now.0 <= base.0 + 2 && now.1 <= base.1 + 2 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the daemon (pid {pid}) still holds {} descriptors and {} threads, {} and {} before",
            now.0,
            now.1,
            base.0,
            base.1
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 13, item 9: 1000 reservation requests released at once against one peer's RS, then
/// 1000 that reserve and cancel at once. Every request is answered; at no time do more than J
/// reservations hold the host; every accepted one offers P; afterwards the host takes exactly J
/// new reservations (no ticket leaked or lost) and the daemon is back to its descriptors and
/// threads of before.
#[test]
fn a_storm_of_1000_concurrent_reservations_keeps_max_jobs_and_leaks_nothing() {
    const J: usize = 3;
    const P: u32 = 2;
    let g = TestGrid::start(
        "storm",
        2,
        &["--procs", "2", "--max-jobs", "3", "--net", "127.0.60", "--set", "RESERVATION_HOLD=600000"],
    );
    g.wait_hosts(1, 1);
    let grid = Grid::read(&g);
    let rs = grid.rs(2);
    let pid = grid.peer(2).pid;
    let base = footprint(pid);
    for storm in 0..storms() {
        // Wave 1: every request at once, nothing released during the wave.
        let gate = Arc::new(Barrier::new(STORM));
        let handles: Vec<_> = (0..STORM)
            .map(|k| {
                let (gate, secret) = (gate.clone(), grid.secret.clone());
                std::thread::Builder::new()
                    .stack_size(128 << 10)
                    .spawn(move || {
                        gate.wait();
                        (k, reserve(rs, &secret, source(k), ticket(2 * storm, k)))
                    })
                    .expect("thread")
            })
            .collect();
        let mut held = Vec::new();
        let mut reasons = BTreeSet::new();
        let mut tries = 0;
        for h in handles {
            let (k, (answer, n)) = h.join().expect("storm client");
            tries += n;
            match answer {
                Some(RsResponse::Ok { p, .. }) => {
                    assert_eq!(p, P, "an accepted reservation offers P");
                    held.push(ticket(2 * storm, k));
                }
                Some(RsResponse::Nok { reason }) => {
                    reasons.insert(reason);
                }
                other => panic!("storm {storm}, request {k}: {other:?}"),
            }
        }
        assert_eq!(held.len(), J, "storm {storm}: {} reservations accepted with MAX_JOBS={J}", held.len());
        assert_eq!(reasons, BTreeSet::from([format!("MAX_JOBS ({J}) reached")]), "storm {storm}");
        for &t in &held {
            cancel(rs, &grid.secret, t);
        }
        // Wave 2: reserve and cancel at once; `inside` counts the reservations a client holds
        // between its OK and its cancel (counted after the OK, uncounted before the cancel:
        // never more than the daemon holds).
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Barrier::new(STORM));
        let handles: Vec<_> = (0..STORM)
            .map(|k| {
                let (gate, secret) = (gate.clone(), grid.secret.clone());
                let (inside, most, accepted) = (inside.clone(), most.clone(), accepted.clone());
                std::thread::Builder::new()
                    .stack_size(128 << 10)
                    .spawn(move || {
                        gate.wait();
                        let t = ticket(2 * storm + 1, k);
                        match reserve(rs, &secret, source(k), t).0 {
                            Some(RsResponse::Ok { .. }) => {
                                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                                most.fetch_max(now, Ordering::SeqCst);
                                accepted.fetch_add(1, Ordering::SeqCst);
                                inside.fetch_sub(1, Ordering::SeqCst);
                                cancel(rs, &secret, t);
                                Ok(())
                            }
                            Some(RsResponse::Nok { .. }) => Ok(()),
                            other => Err(format!("request {k}: {other:?}")),
                        }
                    })
                    .expect("thread")
            })
            .collect();
        for h in handles {
            if let Err(e) = h.join().expect("storm client") {
                panic!("storm {storm}, wave 2: {e}");
            }
        }
        let (most, accepted) = (most.load(Ordering::SeqCst), accepted.load(Ordering::SeqCst));
        assert!(most <= J, "storm {storm}: {most} reservations held at once with MAX_JOBS={J}");
        assert!(accepted >= J, "storm {storm}: only {accepted} of {STORM} reserve-and-cancel requests accepted");
        // Nothing leaked, nothing lost: exactly J fresh reservations, then a refusal.
        let fresh: Vec<Ticket> = (0..=J).map(|k| Ticket(0x0F0F_0000 + (storm * 10 + k) as u128)).collect();
        for (k, &t) in fresh.iter().enumerate() {
            let a = reserve(rs, &grid.secret, IpAddr::V4(Ipv4Addr::new(127, 0, 60, 1)), t).0;
            if k < J {
                assert!(matches!(a, Some(RsResponse::Ok { .. })), "storm {storm}: fresh reservation {k}: {a:?}");
            } else {
                assert!(matches!(a, Some(RsResponse::Nok { .. })), "storm {storm}: reservation J+1: {a:?}");
            }
        }
        for &t in &fresh[..J] {
            cancel(rs, &grid.secret, t);
        }
        wait_footprint_back(pid, base, &format!("storm {storm}"));
        eprintln!(
            "storm {storm}: wave 1 {J} of {STORM} accepted ({tries} connections for {STORM} answers), wave 2 {accepted} \
             accepted (at most {most} at once); daemon back to {:?} descriptors and threads",
            footprint(pid)
        );
    }
    eprintln!("reservation storms: {} of {} passed", storms(), storms());
}

/// Issue 13, item 9: jobs submitted at once from every peer onto hosts with `MAX_JOBS=1` and
/// P=2. Each waits its turn (`-w`) and finishes; sampled all along, no host ever runs more than
/// J jobs or more than P processes of one job; afterwards no process, job directory or
/// reservation is left.
#[test]
fn concurrent_jobs_never_exceed_max_jobs_or_p_and_leave_nothing_behind() {
    const J: usize = 1;
    const P: usize = 2;
    const JOBS: usize = 6;
    let g = TestGrid::start("jobstorm", 3, &["--procs", "2", "--max-jobs", "1", "--net", "127.0.62"]);
    for peer in 1..=3 {
        g.wait_hosts(peer, 2);
    }
    let grid = Arc::new(Grid::read(&g));
    let program = example("whereami");
    for storm in 0..storms() {
        let marker = common::marker(&format!("jobstorm-{storm}"));
        let done = Arc::new(AtomicUsize::new(0));
        // The sampler: every host's applications, grouped by job, until every job ended.
        let sampler = {
            let (grid, done) = (grid.clone(), done.clone());
            std::thread::spawn(move || {
                let mut worst = (0usize, 0usize, String::new());
                let mut samples = 0;
                while done.load(Ordering::SeqCst) < JOBS {
                    for peer in 1..=3 {
                        let mut jobs: BTreeMap<String, usize> = BTreeMap::new();
                        for a in grid.apps(peer) {
                            *jobs.entry(a.job).or_default() += 1;
                        }
                        let most = jobs.values().copied().max().unwrap_or(0);
                        if jobs.len() > worst.0 || most > worst.1 {
                            worst = (worst.0.max(jobs.len()), worst.1.max(most), format!("peer {peer}: {jobs:?}"));
                        }
                    }
                    samples += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                (worst, samples)
            })
        };
        let jobs: Vec<_> = (0..JOBS)
            .map(|k| {
                let home = g.home(1 + k % 3);
                let (program, marker, done) = (program.clone(), marker.clone(), done.clone());
                std::thread::spawn(move || {
                    let out = run_cmd(
                        Command::new(common::grid::bin("p2pmpirun"))
                            .args(["-n", "4", "-w", "120"])
                            .arg(&program)
                            .args(["--hold", "300", &marker])
                            .env("P2PMPI_HOME", home)
                            .env_remove("P2PMPI_CONF_FILE"),
                        Duration::from_secs(180),
                    );
                    done.fetch_add(1, Ordering::SeqCst);
                    out
                })
            })
            .collect();
        for (k, h) in jobs.into_iter().enumerate() {
            let out = h.join().expect("job thread");
            assert_eq!(out.code(), Some(0), "storm {storm}, job {k}:\n{}\n{}", out.stdout, out.stderr);
            assert_eq!(out.stdout.lines().filter(|l| l.contains(" on ")).count(), 4, "job {k}:\n{}", out.stdout);
        }
        let ((most_jobs, most_procs, at), samples) = sampler.join().expect("sampler");
        assert!(samples > 10, "only {samples} samples of the hosts were taken");
        assert!(most_jobs <= J, "storm {storm}: {most_jobs} jobs on one host at once (MAX_JOBS={J}): {at}");
        assert!(most_procs <= P, "storm {storm}: {most_procs} processes of one job on one host (P={P}): {at}");
        assert!(most_procs > 0, "storm {storm}: the sampler never saw a job running");
        // Nothing left: processes, applications, job directories, reservations.
        let left = common::wait_no_processes(&marker, LIMIT);
        assert!(left.is_empty(), "storm {storm}: processes left: {left:?}");
        for peer in 1..=3 {
            assert!(grid.apps(peer).is_empty(), "peer {peer} still lists applications");
            let jobs = g.home(peer).join("jobs");
            let entries: Vec<_> =
                std::fs::read_dir(&jobs).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
            assert!(entries.is_empty(), "peer {peer}: job directories left: {entries:?}");
        }
        for peer in 1..=3 {
            let t = Ticket(0x0B0B_0000 + (storm * 10 + peer) as u128);
            let a = reserve(grid.rs(peer), &grid.secret, IpAddr::V4(Ipv4Addr::new(127, 0, 62, 1)), t).0;
            assert!(matches!(a, Some(RsResponse::Ok { .. })), "peer {peer}: a reservation left behind? {a:?}");
            cancel(grid.rs(peer), &grid.secret, t);
        }
        eprintln!("job storm {storm}: {JOBS} jobs done; at most {most_jobs} job(s) and {most_procs} process(es) of one job per host ({samples} samples)");
    }
    eprintln!("job storms: {} of {} passed", storms(), storms());
}
