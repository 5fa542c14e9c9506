//! Hardening of the grid's daemons and their files (issue 13), seen from the commands.
#![forbid(unsafe_code)]

mod common;

use common::example;
use common::grid::{bin, wait_for, TestGrid, LIMIT};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode() & 0o777
}

/// `grid.json` and every configuration file of a local grid hold the grid secret: only their
/// owner may read them, and no temporary file is left behind.
#[test]
fn local_grid_files_holding_the_secret_are_private() {
    let g = TestGrid::start("private", 2, &[]);
    let grid = std::fs::read_to_string(g.dir.join("grid.json")).unwrap();
    assert!(grid.contains("\"secret\""), "{grid}");
    for f in [g.dir.join("grid.json"), g.dir.join("supernode/P2P-MPI.conf"), g.conf(1), g.conf(2)] {
        assert_eq!(mode(&f), 0o600, "{} is readable by others", f.display());
    }
    for d in [g.dir.clone(), g.dir.join("supernode"), g.home(1), g.home(2)] {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(!name.contains(".tmp"), "temporary file {name} left in {}", d.display());
        }
    }
}

/// An HTTP/1.1 server for `-l http://…` inputs whose answers wait until `open` is set (at most
/// 60 s); counts the requests it received.
fn gated_http_server(body: &'static [u8]) -> (SocketAddr, Arc<AtomicUsize>, Arc<AtomicBool>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (requests, open) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let (rq, op) = (requests.clone(), open.clone());
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let (rq, op) = (rq.clone(), op.clone());
            std::thread::spawn(move || {
                let mut req = Vec::new();
                let mut b = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&b[..n]),
                    }
                }
                rq.fetch_add(1, Ordering::SeqCst);
                let deadline = Instant::now() + Duration::from_secs(60);
                while !op.load(Ordering::SeqCst) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
                let _ = s.write_all(head.as_bytes());
                let _ = s.write_all(body);
            });
        }
    });
    (addr, requests, open)
}

/// `p2pmpirun ARGS` from peer 1, its standard error read line by line as it comes.
struct LiveRun {
    child: Child,
    lines: Receiver<String>,
    err: Arc<Mutex<String>>,
    out: JoinHandle<String>,
}

impl LiveRun {
    fn start(g: &TestGrid, args: &[&str]) -> LiveRun {
        let mut child = Command::new(bin("p2pmpirun"))
            .args(args)
            .env("P2PMPI_HOME", g.home(1))
            .env_remove("P2PMPI_CONF_FILE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = common::reader(child.stdout.take().unwrap());
        let (tx, lines) = channel();
        let err = Arc::new(Mutex::new(String::new()));
        let (stderr, all) = (child.stderr.take().unwrap(), err.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                all.lock().unwrap().push_str(&format!("{line}\n"));
                let _ = tx.send(line);
            }
        });
        LiveRun { child, lines, err, out }
    }

    /// The first line of standard error that contains `what` (bounded wait).
    fn line_with(&self, what: &str) -> String {
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(what) => return l,
                Ok(_) => {}
                Err(_) => panic!("no line with {what:?} on standard error:\n{}", self.err.lock().unwrap()),
            }
        }
    }

    /// Waits (bounded by `limit`) for the end: (status, stdout, stderr).
    fn finish(mut self, limit: Duration) -> (std::process::ExitStatus, String, String) {
        let Some(status) = common::wait_bounded(&mut self.child, limit) else {
            let _ = self.child.kill();
            let _ = self.child.wait();
            panic!("p2pmpirun did not end within {limit:?}:\n{}", self.err.lock().unwrap());
        };
        let out = self.out.join().unwrap();
        // The reader thread ends with the pipe.
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_ok() {}
        let err = self.err.lock().unwrap().clone();
        (status, out, err)
    }
}

/// The pid of peer `peer`'s daemon.
fn mpd_pid(g: &TestGrid, peer: usize) -> u32 {
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(g.home(peer).join("mpd.json")).unwrap()).unwrap();
    st["pid"].as_u64().unwrap() as u32
}

/// Continues a stopped daemon when dropped, so that the grid can be stopped; checked unless
/// the test already failed.
struct Frozen(u32);

impl Drop for Frozen {
    fn drop(&mut self) {
        let resumed = common::try_thaw(self.0);
        if !std::thread::panicking() {
            resumed.unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// Runs `pi -l <gated URL>` with -v on `g` (`n` processes, `-w 1`), freezes (SIGSTOP) the
/// daemon of one of the reserved remote hosts while both of them are fetching the input —
/// in the middle of staging — then lets the fetches go. Returns the frozen host's address, the
/// time from the freeze to the job's end, and its outcome.
fn freeze_during_staging(g: &TestGrid, n: usize) -> (String, Duration, std::process::ExitStatus, String, String) {
    let (http, requests, open) = gated_http_server(b"input\n");
    let pi = example("pi");
    let url = format!("http://{http}/input.txt");
    let n = n.to_string();
    let run = LiveRun::start(g, &["-v", "-w", "1", "-n", &n, "-l", &url, pi.to_str().unwrap()]);
    // "p2pmpirun: reserved 127.0.0.2:p×1, 127.0.0.4:q×1, 127.0.0.3:r×1 in 40 ms"
    let reserved = run.line_with("reserved ");
    let hosts: Vec<&str> =
        reserved.split("reserved ").nth(1).unwrap().split(" in ").next().unwrap().split(", ").collect();
    let remote: Vec<String> = hosts
        .iter()
        .map(|h| h.split('×').next().unwrap().to_string())
        .filter(|h| !h.starts_with("127.0.0.2:"))
        .collect();
    assert_eq!(remote.len(), 2, "{reserved}");
    let victim = remote[0].clone();
    let last: usize = victim.split(':').next().unwrap().rsplit('.').next().unwrap().parse().unwrap();
    let peer = last - 1; // peer k runs on 127.0.0.(k+1)
                         // Both remote hosts are in the middle of their staging: each fetches the input.
    wait_for(|| (requests.load(Ordering::SeqCst) >= 2).then_some(()));
    let pid = mpd_pid(g, peer);
    common::freeze(pid);
    let frozen = Frozen(pid);
    let at = Instant::now();
    open.store(true, Ordering::SeqCst);
    // Given up within 15 s (the bound), not after the staging's time-outs (minutes).
    run.line_with(&format!("gave up on host {victim}"));
    let gave_up = at.elapsed();
    assert!(gave_up < Duration::from_secs(15), "gave up on the frozen host {gave_up:?} after the freeze");
    let (status, out, err) = run.finish(LIMIT);
    let took = at.elapsed();
    drop(frozen);
    eprintln!("frozen {victim}: given up {gave_up:?} after the freeze, the job ended after {took:?}\n{err}");
    (victim, took, status, out, err)
}

/// Issue 13, item 3: a peer whose daemon freezes during staging (its kernel still accepts and
/// buffers, nothing answers) is given up within seconds, not minutes; the job is reserved
/// again on the other peers and runs there. The terminal says what it waits for (-v).
#[test]
fn a_peer_frozen_during_staging_is_given_up_and_the_job_runs_elsewhere() {
    let g = TestGrid::start("frozen", 4, &["--procs", "1"]);
    g.wait_hosts(1, 3);
    let (victim, took, status, out, err) = freeze_during_staging(&g, 3);
    assert!(status.success(), "the job failed ({status:?}):\n{err}");
    assert!(out.contains("3.14159"), "{out}");
    assert!(took < Duration::from_secs(20), "the job ended {took:?} after the freeze:\n{err}");
    assert!(err.contains(&format!("waiting for host {victim}")), "it did not say what it waited for:\n{err}");
    assert!(err.contains(&format!("gave up on host {victim} during staging: no answer to a ping")), "{err}");
    assert!(err.contains("reserving other hosts instead"), "{err}");
    // The second reservation left the frozen host out.
    let second = err.lines().filter(|l| l.contains(": reserved ")).nth(1).expect("a second reservation").to_string();
    assert!(!second.contains(&victim), "{second}");
}

/// The same with no other peer to take its place: the job stops within seconds, naming the
/// frozen peer and why.
#[test]
fn a_peer_frozen_during_staging_without_a_spare_stops_the_job_naming_it() {
    let g = TestGrid::start("frozen-nospare", 3, &["--procs", "1"]);
    g.wait_hosts(1, 2);
    let (victim, took, status, _, err) = freeze_during_staging(&g, 3);
    assert!(!status.success());
    assert!(took < Duration::from_secs(20), "the job ended {took:?} after the freeze:\n{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.contains("not enough peers"), "{err}");
    assert!(last.contains(&format!("gave up during start-up on host {victim}: no answer to a ping")), "{err}");
}
