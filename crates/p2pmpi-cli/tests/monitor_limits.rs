//! Issue 38, item 5: idle connections (no token needed) cannot make the grid monitor stop
//! answering its token holders.
//!
//! The monitor runs with the usual limit of 1 024 open files (`ulimit -n 1024`, as on the
//! machine of the issue). 1 100 connections are opened to it and send nothing. Before, the
//! monitor kept every one (no cap, no time-out) and, out of descriptors, answered nobody;
//! now a token holder is served while they are held, a token holder's event stream stays
//! open, and every idle connection is closed within the monitor's time-out for connections
//! without the token (10 s) plus a margin.
#![forbid(unsafe_code)]

mod common;

use common::grid::bin;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const IDLE: usize = 1100;
/// The bound on an idle connection's life (the monitor's 10 s, and a margin for this
/// machine's load).
const CLOSED_WITHIN: Duration = Duration::from_secs(15);

struct Monitor {
    child: Child,
    _home: std::path::PathBuf,
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._home);
    }
}

/// Starts a monitor (no grid: it serves, saying no supernode answered) with at most 1 024
/// open files; its address and token.
fn start() -> (Monitor, SocketAddr, String) {
    let home = std::env::temp_dir().join(format!("p2pmpi-monitor-limits-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).unwrap();
    let init = Command::new(bin("p2pmpi"))
        .args(["init", "--supernode", "127.0.0.1:1"])
        .env("P2PMPI_HOME", &home)
        .env_remove("P2PMPI_CONF_FILE")
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    let mut child = Command::new("sh")
        .args(["-c", "ulimit -n 1024 && exec \"$0\" monitor --listen 127.0.0.1:0 --interval 500"])
        .arg(bin("p2pmpi"))
        .env("P2PMPI_HOME", &home)
        .env_remove("P2PMPI_CONF_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the monitor");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(30)).expect("the monitor printed its address");
    let url = first.strip_prefix("monitor: http://").unwrap_or_else(|| panic!("first line: {first}"));
    let (hostport, token) = url.split_once("/?token=").unwrap();
    let addr: SocketAddr = hostport.parse().unwrap();
    (Monitor { child, _home: home }, addr, token.to_string())
}

/// A GET with the token: its status, or why there was none.
fn get(addr: SocketAddr, path: &str) -> Result<u16, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    text.strip_prefix("HTTP/1.1 ").and_then(|r| r.get(..3)).and_then(|c| c.parse().ok()).ok_or(format!("{text:?}"))
}

/// Has the server closed this (non-blocking) connection?
fn closed(s: &TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match (&*s).read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

#[test]
fn idle_connections_do_not_silence_the_monitor() {
    let (_m, addr, token) = start();
    assert_eq!(get(addr, &format!("/api/grid?token={token}")), Ok(200));
    // A token holder's open page: its event stream.
    let mut events = TcpStream::connect(addr).unwrap();
    write!(events, "GET /api/events?token={token} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    events.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = [0u8; 12];
    events.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    events.set_nonblocking(true).unwrap();

    let start = Instant::now();
    let mut idle: Vec<(TcpStream, Instant)> = Vec::new();
    for _ in 0..IDLE {
        // The kernel accepts for the monitor whether or not it takes the connection.
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        s.set_nonblocking(true).unwrap();
        idle.push((s, Instant::now()));
    }
    // Served while they are held.
    let served = Instant::now();
    let status = get(addr, &format!("/api/peers?token={token}"));
    assert_eq!(status, Ok(200), "a token holder was not served beside {IDLE} idle connections");
    let took = served.elapsed();
    assert!(took < Duration::from_secs(5), "a token holder waited {took:?}");
    assert_eq!(get(addr, "/api/peers"), Ok(401), "no token, no answer");

    // Every idle connection is closed within the bound.
    let mut lives = Vec::new();
    while !idle.is_empty() && start.elapsed() < CLOSED_WITHIN + Duration::from_secs(5) {
        let now = Instant::now();
        idle.retain(|(s, opened)| {
            let gone = closed(s);
            if gone {
                lives.push(now - *opened);
            }
            !gone
        });
        std::thread::sleep(Duration::from_millis(100));
    }
    let longest = lives.iter().max().copied().unwrap_or_default();
    eprintln!(
        "{IDLE} idle connections: {} closed by the monitor (longest life {longest:?}), {} still open; \
         token holder served in {took:?}",
        lives.len(),
        idle.len()
    );
    assert!(idle.is_empty(), "{} idle connections still open after {:?}", idle.len(), start.elapsed());
    assert!(longest < CLOSED_WITHIN, "an idle connection lived {longest:?}");
    // The token holder's stream outlived them all.
    assert!(!closed(&events), "the token holder's event stream was closed");
    assert_eq!(get(addr, &format!("/api/grid?token={token}")), Ok(200));
}
