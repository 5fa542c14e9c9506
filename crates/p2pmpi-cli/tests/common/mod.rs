//! Shared helpers of the integration tests: locate the launcher and the example programs,
//! run jobs with a bounded time-out, look for leftover processes, decide whether a test that
//! needs root or a tool runs (under CI it must), wait on conditions, and inject faults that
//! are checked to have happened.
#![allow(dead_code)]

pub mod abi;
pub mod ckpt;
pub mod grid;
pub mod job;
pub mod netns;
pub mod spawn;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub fn launcher() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_p2pmpirun"))
}

pub fn p2pmpi_tool() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_p2pmpi"))
}

/// Path of an example program of `p2pmpi-examples`, building the examples once if a test
/// runner did not (they live next to the launcher, in `<target>/<profile>/examples`).
pub fn example(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let dir = launcher().parent().unwrap().join("examples");
    let path = dir.join(name);
    if !path.exists() {
        BUILT.get_or_init(|| {
            let release = launcher().parent().unwrap().ends_with("release");
            let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            cmd.args(["build", "-q", "-p", "p2pmpi-examples", "--examples"]);
            if release {
                cmd.arg("--release");
            }
            let st = cmd.status().expect("run cargo to build the examples");
            assert!(st.success(), "building the examples failed");
        });
    }
    assert!(path.exists(), "example {name} not found at {}", path.display());
    path
}

pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
    pub fn assert_ok(&self) -> &Self {
        assert!(
            self.status.success(),
            "job failed ({:?})\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }
}

/// A marker unique to one job, passed as the program's last argument so its processes can
/// be found in /proc afterwards.
pub fn marker(test: &str) -> String {
    format!("marker-{test}-{}-{}", std::process::id(), Instant::now().elapsed().as_nanos())
}

/// Runs `p2pmpirun ARGS` and waits at most `limit`; a job still running then is killed and
/// the test fails.
/// (No peer daemon is visible to it: the job runs on this host.)
pub fn run(args: &[&str], limit: Duration) -> Outcome {
    run_cmd(Command::new(launcher()).args(args).env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests"), limit)
}

pub fn run_cmd(cmd: &mut Command, limit: Duration) -> Outcome {
    let start = Instant::now();
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let out = reader(child.stdout.take().unwrap());
    let err = reader(child.stderr.take().unwrap());
    let Some(status) = wait_bounded(&mut child, limit) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("job did not finish within {limit:?}: {cmd:?}\nstdout so far:\n{}", out.join().unwrap_or_default());
    };
    Outcome { status, stdout: out.join().unwrap(), stderr: err.join().unwrap(), elapsed: start.elapsed() }
}

pub fn reader(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

pub fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Pids of live processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return found };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if pid == std::process::id() {
            continue;
        }
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd);
            if cmd.contains(needle) {
                // Zombies have an empty cmdline; a live match is a real process.
                if let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) {
                    if stat.split_whitespace().nth(2) == Some("Z") {
                        continue;
                    }
                }
                found.push(pid);
            }
        }
    }
    found
}

/// Waits (bounded) until no process carries `needle`; returns the leftovers if any remain.
pub fn wait_no_processes(needle: &str, limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    loop {
        let left = processes_with(needle);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of `key` in the environment of live process `pid`.
pub fn env_of(pid: u32, key: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{key}=");
    env.split(|&b| b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| kv.strip_prefix(prefix.as_str()).map(str::to_string))
}

// ------------------------------------------------------------------ what a test needs

/// Whether the tests run under CI (`CI=true`, as `.ci/run` is run): there every tool a test
/// needs was installed, so a test that lacks one fails instead of skipping.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}

/// Whether `tool` is an executable file in a directory of `PATH`.
pub fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .any(|d| std::fs::metadata(d.join(tool)).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// What a test lacks of root (when `root`) and `tools` (on `PATH`), said with `why` it needs
/// them; `None` when it lacks nothing.
pub fn lacking(root: bool, tools: &[&str], why: &str) -> Option<String> {
    let mut missing: Vec<String> = Vec::new();
    if root && !p2pmpi_peer::os::is_root() {
        missing.push("root".into());
    }
    missing.extend(tools.iter().filter(|t| !on_path(t)).map(|t| format!("`{t}`")));
    (!missing.is_empty()).then(|| format!("needs {} {why}", missing.join(" and ")))
}

/// The one decision for a test that needs something an install brings (root, a tool): true
/// when it has everything and runs. Outside CI, a test that lacks something says so
/// ("SKIPPED: …") and the caller returns; under CI (`.ci/run` installs every tool and runs
/// as root) it fails, naming what is missing.
pub fn require(lacks: Option<String>) -> bool {
    let Some(why) = lacks else { return true };
    let test = std::thread::current().name().unwrap_or("this test").to_string();
    assert!(!under_ci(), "{test} {why}; under CI (CI=true) it must run: install it (.ci/run does) or run as root");
    eprintln!("SKIPPED: {test} {why}");
    false
}

/// [`require`] of root and `tools`, needed `why`.
pub fn require_root_and(tools: &[&str], why: &str) -> bool {
    require(lacking(true, tools, why))
}

/// [`require`] of `tools` (no root), needed `why`.
pub fn require_tools(tools: &[&str], why: &str) -> bool {
    require(lacking(false, tools, why))
}

// ------------------------------------------------------------------ waiting on conditions

/// Polls `cond` every few milliseconds until it holds; fails the test, naming `what` did not
/// happen, if it still does not after `limit`.
pub fn wait_until(limit: Duration, what: &str, cond: impl FnMut() -> bool) {
    try_wait_until(limit, what, cond).unwrap_or_else(|e| panic!("{e}"))
}

// ------------------------------------------------------------------ faults, checked

/// The state letter of process `pid` (`/proc/PID/stat`: R, S, D, T, t, Z…), or None if it is
/// gone.
pub fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Whether process `pid` is stopped (state `T`).
pub fn is_stopped(pid: u32) -> bool {
    state_of(pid) == Some('T')
}

/// Whether process `pid` is dead: gone, or a zombie its parent has not reaped yet.
pub fn is_dead(pid: u32) -> bool {
    matches!(state_of(pid), None | Some('Z') | Some('X'))
}

/// How long a fault may take to show in `/proc` (a loaded 2-core machine).
const FAULT_SEEN: Duration = Duration::from_secs(10);

/// Sends `sig` to `pid`: an error if the kernel refuses it (no such process, …).
pub fn try_send(pid: u32, sig: i32) -> Result<(), String> {
    p2pmpi_peer::os::signal(pid, sig).map_err(|e| format!("signal {sig} to pid {pid} not delivered: {e}"))
}

/// Polls `cond` (every few ms, at most `limit`): an error naming `what` if it never holds.
pub fn try_wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !cond() {
        if Instant::now() >= deadline {
            return Err(format!("{what}: not within {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// `kill -9 PID`, checked: the signal was delivered and the process is dead (gone or a
/// zombie) within a bound. Returns when it was sent.
pub fn try_kill9(pid: u32) -> Result<Instant, String> {
    let at = Instant::now();
    try_send(pid, libc::SIGKILL)?;
    try_wait_until(FAULT_SEEN, &format!("pid {pid} dead after kill -9"), || is_dead(pid))?;
    Ok(at)
}

/// Freezes `pid` (SIGSTOP), checked: the signal was delivered and the process is seen
/// stopped (state `T`). Returns when it was sent.
pub fn try_freeze(pid: u32) -> Result<Instant, String> {
    let at = Instant::now();
    try_send(pid, libc::SIGSTOP)?;
    let what = format!("pid {pid} stopped (state T) after SIGSTOP");
    try_wait_until(FAULT_SEEN, &what, || is_stopped(pid) || is_dead(pid))?;
    if !is_stopped(pid) {
        return Err(format!("pid {pid} died instead of stopping (state {:?})", state_of(pid)));
    }
    Ok(at)
}

/// Resumes a frozen `pid` (SIGCONT), checked: afterwards it is no longer stopped. A process
/// that died meanwhile (its launcher stopped it) is not stopped either: that counts.
pub fn try_thaw(pid: u32) -> Result<(), String> {
    if let Err(e) = try_send(pid, libc::SIGCONT) {
        return if is_dead(pid) { Ok(()) } else { Err(e) };
    }
    try_wait_until(FAULT_SEEN, &format!("pid {pid} resumed after SIGCONT"), || !is_stopped(pid))
}

/// [`try_kill9`], failing the test if the process was not killed.
pub fn kill9(pid: u32) -> Instant {
    try_kill9(pid).unwrap_or_else(|e| panic!("{e}"))
}

/// [`try_freeze`], failing the test if the process was not seen stopped.
pub fn freeze(pid: u32) -> Instant {
    try_freeze(pid).unwrap_or_else(|e| panic!("{e}"))
}

/// [`try_thaw`], failing the test if the process stays stopped.
pub fn thaw(pid: u32) {
    try_thaw(pid).unwrap_or_else(|e| panic!("{e}"))
}

/// The checked fault for `sig`: [`kill9`] for SIGKILL, [`freeze`] for SIGSTOP, [`thaw`] for
/// SIGCONT, else [`send`]. Returns when it was sent.
pub fn inject(pid: u32, sig: i32) -> Instant {
    match sig {
        libc::SIGKILL => kill9(pid),
        libc::SIGSTOP => freeze(pid),
        _ => {
            let at = Instant::now();
            if sig == libc::SIGCONT {
                thaw(pid)
            } else {
                send(pid, sig)
            }
            at
        }
    }
}

/// Sends `sig` to `pid`, failing the test if it was not delivered (what the process does with
/// it is the test's to check).
pub fn send(pid: u32, sig: i32) {
    try_send(pid, sig).unwrap_or_else(|e| panic!("{e}"))
}

/// Sends SIGTERM to `pid`, failing the test if it was not delivered.
pub fn terminate(pid: u32) {
    send(pid, libc::SIGTERM)
}

/// An nftables table whose input and output chains hold `rules` (a host or a connection cut
/// off by the network, without a TCP reset), checked: `nft` accepted it and lists it with its
/// drops. Removed on drop (the network heals), checked too unless the test already failed.
pub struct Firewall {
    table: String,
}

impl Firewall {
    /// Installs `rules` (nft statements, each ending in `;`) in a table named after `name`.
    pub fn install(name: &str, rules: &str) -> Firewall {
        use std::io::Write;
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let table = format!("p2pmpi_test_{name}_{}_{n}", std::process::id());
        let text = format!(
            "table ip {table} {{\n chain input {{ type filter hook input priority -10; {rules} }}\n chain output {{ type filter hook output priority -10; {rules} }}\n}}\n"
        );
        let mut child = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run nft: {e}"));
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "nft refused the rules:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
        let wall = Firewall { table };
        let listed = wall.listed().unwrap_or_else(|| panic!("nft does not list table {} after adding it", wall.table));
        let drops = rules.matches("drop").count();
        assert_eq!(listed.matches("drop").count(), 2 * drops, "table {} lacks its drops:\n{listed}", wall.table);
        wall
    }

    /// Every packet to or from `ip`.
    pub fn cut(ip: &str) -> Firewall {
        Firewall::install("cut", &format!("ip saddr {ip} drop; ip daddr {ip} drop;"))
    }

    /// TCP between `a` and `b` only (UDP, hence the failure detector, still passes).
    pub fn block_tcp(a: &str, b: &str) -> Firewall {
        Firewall::install(
            "tcp",
            &format!(
                "meta l4proto tcp ip saddr {a} ip daddr {b} drop; meta l4proto tcp ip saddr {b} ip daddr {a} drop;"
            ),
        )
    }

    /// `nft list table`: the table as the kernel holds it, or None if it has none.
    fn listed(&self) -> Option<String> {
        let out = Command::new("nft").args(["list", "table", "ip", &self.table]).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        let _ = Command::new("nft").args(["delete", "table", "ip", &self.table]).stderr(Stdio::null()).status();
        if !std::thread::panicking() {
            assert!(self.listed().is_none(), "nft still lists table {} after deleting it", self.table);
        }
    }
}
