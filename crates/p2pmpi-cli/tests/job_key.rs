//! The job key never leaves a process in clear (issue 13, item 2): a capture of every byte
//! the job's processes — and on a grid, the peer daemons that start them — write to sockets,
//! pipes and files, taken with `strace`, holds neither the key nor any 8 bytes of it, while
//! the processes did receive it (in their environment) and did use it (the openings of their
//! data connections and their detector datagrams are in the capture).
#![forbid(unsafe_code)]

mod common;

use common::grid::{self, TestGrid};
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(120);

/// `strace`, if installed (`.ci/run` installs it).
fn strace() -> Option<PathBuf> {
    let ok = Command::new("strace").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status();
    ok.is_ok_and(|s| s.success()).then(|| PathBuf::from("strace"))
}

/// Whether strace can capture here: outside CI a test without it says so and returns; under
/// CI it fails.
fn have_strace() -> bool {
    let lacks = strace().is_none().then(|| "needs `strace` to capture what the job writes".to_string());
    common::require(lacks)
}

/// Arguments for a capture into `out`: every write-like system call with all its bytes (as
/// `\xHH` escapes), and every `execve` with its environment.
fn capture_args(out: &Path) -> Vec<String> {
    [
        "-f",
        "--seccomp-bpf",
        "-qq",
        "-v",
        "-xx",
        "-s",
        "16777216",
        "-e",
        "trace=execve,write,writev,pwrite64,pwritev,sendto,sendmsg,sendmmsg",
        "-o",
        out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A directory for the captures, removed afterwards.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("p2pmpi-jobkey-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn hex_digit(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("not a hex digit: {c}"),
    }
}

/// The strings of one line of the capture, decoded (`-xx` writes every byte as `\xHH`).
fn strings(line: &[u8]) -> Vec<Vec<u8>> {
    let b = line;
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'"' {
            i += 1;
            continue;
        }
        i += 1;
        let mut s = Vec::new();
        while i < b.len() && b[i] != b'"' {
            if b[i] == b'\\' && i + 3 < b.len() && b[i + 1] == b'x' {
                s.push(hex_digit(b[i + 2]) << 4 | hex_digit(b[i + 3]));
                i += 4;
            } else if b[i] == b'\\' && i + 1 < b.len() {
                s.push(b[i + 1]);
                i += 2;
            } else {
                s.push(b[i]);
                i += 1;
            }
        }
        i += 1;
        out.push(s);
    }
    out
}

/// The system call a line of the capture shows (`PID  name(...`).
fn syscall(line: &[u8]) -> &[u8] {
    let start = line.iter().position(|&c| c == b' ').map_or(0, |p| p + 1);
    let rest = &line[start..];
    let rest = &rest[rest.iter().position(|&c| c != b' ').unwrap_or(0)..];
    &rest[..rest.iter().position(|&c| c == b'(').unwrap_or(0)]
}

fn lines(trace: &[u8]) -> impl Iterator<Item = &[u8]> {
    trace.split(|&c| c == b'\n')
}

/// Every job key the capture's `execve`s put in an environment (hex).
fn keys_given(trace: &[u8]) -> Vec<String> {
    let mut keys = Vec::new();
    for line in lines(trace).filter(|l| syscall(l) == b"execve") {
        for s in strings(line) {
            if let Some(k) = s.strip_prefix(b"P2PMPI_JOB_KEY=") {
                keys.push(String::from_utf8(k.to_vec()).unwrap());
            }
        }
    }
    keys
}

/// The bytes of every write-like system call of the capture.
fn written(trace: &[u8]) -> Vec<Vec<u8>> {
    lines(trace).filter(|l| !l.is_empty() && syscall(l) != b"execve").flat_map(strings).collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Asserts that no write holds the key (`hex`, either case) or any 8 consecutive bytes of it.
fn assert_not_written(trace: &[u8], hex: &str) {
    let raw: Vec<u8> =
        (0..32).map(|i| hex_digit(hex.as_bytes()[2 * i]) << 4 | hex_digit(hex.as_bytes()[2 * i + 1])).collect();
    let mut needles: Vec<Vec<u8>> = raw.windows(8).map(<[u8]>::to_vec).collect();
    needles.push(hex.to_lowercase().into_bytes());
    needles.push(hex.to_uppercase().into_bytes());
    let mut first = [false; 256];
    for n in &needles {
        first[n[0] as usize] = true;
    }
    let writes = written(trace);
    assert!(writes.len() > 10, "the capture holds too few writes to mean anything: {}", writes.len());
    for w in &writes {
        for (i, &c) in w.iter().enumerate() {
            if first[c as usize] {
                for n in &needles {
                    assert!(
                        !w[i..].starts_with(n),
                        "the key (or 8 bytes of it) was written: {:?}",
                        String::from_utf8_lossy(n)
                    );
                }
            }
        }
    }
}

/// A data connection's opening of this protocol version was written.
fn assert_hello_seen(trace: &[u8]) {
    let hello = [&b"P2PM"[..], &[p2pmpi_wire::VERSION, 1]].concat();
    assert!(written(trace).iter().any(|w| contains(w, &hello)), "no data connection's Hello in the capture");
}

/// A data connection's opening and a detector datagram of this protocol version were written
/// (for jobs that run several gossip periods).
fn assert_protocol_seen(trace: &[u8]) {
    assert_hello_seen(trace);
    assert!(written(trace).iter().any(|w| w.starts_with(b"PFD\x02")), "no detector datagram in the capture");
}

/// The job every capture runs: 3 processes that gossip every 50 ms for 300 ms.
fn job() -> Vec<String> {
    let p = example("fdwatch");
    ["-n", "3", "--t-gossip", "50", p.to_str().unwrap(), "--hold", "300"].iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_local_job_writes_its_key_nowhere() {
    if !have_strace() {
        return;
    }
    let strace = strace().expect("checked");
    let dir = Dir::new("local");
    let out = dir.0.join("trace");
    let o = run_cmd(
        Command::new(strace)
            .args(capture_args(&out))
            .arg(launcher())
            .args(job())
            .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests"),
        T,
    );
    o.assert_ok();
    let trace = std::fs::read(&out).unwrap();
    let keys = keys_given(&trace);
    assert_eq!(keys.len(), 3, "every process got the key in its environment");
    assert!(keys.iter().all(|k| k == &keys[0] && k.len() == 64), "{} keys", keys.len());
    assert_protocol_seen(&trace);
    assert_not_written(&trace, &keys[0]);
}

/// A grid job: the submitter sends the key to each peer's MPD inside the (encrypted) launch
/// request; the capture of the submitter, of every daemon and of the processes the MPDs
/// start holds it nowhere in what they write, and the remote processes got the submitter's
/// key.
#[test]
fn a_grid_job_writes_its_key_nowhere() {
    if !have_strace() {
        return;
    }
    let strace = strace().expect("checked");
    let cap = Dir::new("grid");
    // The grid's daemons start under the capture (its seccomp filter, inherited, stops them
    // only on the calls it records; attaching to running daemons would stop them on all).
    let g = TestGrid { dir: std::env::temp_dir().join(format!("p2pmpi-grid-jobkey-{}", std::process::id())) };
    let _ = std::fs::remove_dir_all(&g.dir);
    let daemons_out = cap.0.join("daemons");
    let start_out = cap.0.join("start.out");
    let mut daemons = Command::new(&strace)
        .args(capture_args(&daemons_out))
        .arg(grid::bin("p2pmpi"))
        .args(["local-grid", "start", "--peers", "3", "--procs", "1", "--dir", g.dir.to_str().unwrap()])
        .env_remove("P2PMPI_CONF_FILE")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&start_out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + grid::LIMIT;
    while !std::fs::read_to_string(&start_out).unwrap_or_default().contains("Local grid up") {
        assert!(daemons.try_wait().unwrap().is_none(), "the grid did not start under strace");
        assert!(Instant::now() < deadline, "the grid did not start within {:?}", grid::LIMIT);
        std::thread::sleep(Duration::from_millis(50));
    }
    g.wait_hosts(1, 2);
    let out = cap.0.join("submitter");
    let o = run_cmd(
        Command::new(&strace)
            .args(capture_args(&out))
            .arg(grid::bin("p2pmpirun"))
            .args(job())
            .env("P2PMPI_HOME", g.home(1))
            .env_remove("P2PMPI_CONF_FILE"),
        T,
    );
    // Stop the grid: its daemons end, and with them the capture.
    let stop =
        run_cmd(Command::new(grid::bin("p2pmpi")).args(["local-grid", "stop", "--dir", g.dir.to_str().unwrap()]), T);
    if wait_bounded(&mut daemons, Duration::from_secs(30)).is_none() {
        let _ = daemons.kill();
        let _ = daemons.wait();
        panic!("the daemons' capture did not end within 30 s of stopping the grid");
    }
    o.assert_ok();
    stop.assert_ok();
    let submitter = std::fs::read(&out).unwrap();
    let daemons = std::fs::read(&daemons_out).unwrap();
    let here = keys_given(&submitter);
    let there = keys_given(&daemons);
    assert_eq!(here.len(), 1, "rank 0 runs on the submitter");
    assert_eq!(there.len(), 2, "ranks 1 and 2 were started by the MPDs");
    assert!(there.iter().all(|k| k == &here[0]), "the MPDs gave their processes the submitter's key");
    assert_protocol_seen(&daemons);
    assert_not_written(&submitter, &here[0]);
    assert_not_written(&daemons, &here[0]);
}

/// What a capture of `p2p_checks secret` (rank 0 sends a recognisable text to the others)
/// shows: the bytes every process wrote.
fn capture_secret(encrypt: bool) -> Vec<u8> {
    let strace = strace().expect("checked");
    let dir = Dir::new(if encrypt { "sealed" } else { "clear" });
    let out = dir.0.join("trace");
    let mut args = vec!["-n".to_string(), "3".into()];
    if encrypt {
        args.push("--encrypt".into());
    }
    args.extend([example("p2p_checks").to_str().unwrap().to_string(), "secret".into()]);
    let o = run_cmd(
        Command::new(strace)
            .args(capture_args(&out))
            .arg(launcher())
            .args(&args)
            .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests")
            // What is compared is the TCP connections (--encrypt keeps TCP anyway); without
            // it the ranks of one host talk through shared memory, which no trace sees.
            .env("P2PMPI_SHM", "0"),
        T,
    );
    o.assert_ok();
    assert!(o.stdout.contains("OK secret"), "{}", o.stdout);
    std::fs::read(&out).unwrap()
}

/// `--encrypt`: MPI messages, and the frame headers that carry them, are not on the wire in
/// clear (without it they are: the capture sees them); the job key is in neither capture.
#[test]
fn encrypt_hides_the_messages() {
    if !have_strace() {
        return;
    }
    let secret = b"a-recognisable-payload-SECRET";
    let eager = [&b"P2PM"[..], &[p2pmpi_wire::VERSION, p2pmpi_wire::FrameKind::Eager as u8]].concat();
    let clear = capture_secret(false);
    let w = written(&clear);
    assert!(w.iter().any(|w| contains(w, secret)), "the capture does not see messages in clear");
    assert!(w.iter().any(|w| contains(w, &eager)), "the capture does not see frame headers in clear");
    let sealed = capture_secret(true);
    let w = written(&sealed);
    assert!(!w.iter().any(|w| contains(w, secret)), "--encrypt: a message was written in clear");
    assert!(!w.iter().any(|w| contains(w, &eager)), "--encrypt: a frame header was written in clear");
    // `p2p_checks secret` may end before the first gossip round: only the data plane is
    // certain to be in this capture (the detector's datagrams are checked by the other tests).
    assert_hello_seen(&sealed);
    for (trace, what) in [(&clear, "clear"), (&sealed, "sealed")] {
        let keys = keys_given(trace);
        assert_eq!(keys.len(), 3, "{what}");
        assert_not_written(trace, &keys[0]);
    }
}
