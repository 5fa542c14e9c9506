//! Shared helpers of the integration tests: locate the launcher and the example programs,
//! run jobs with a bounded time-out, and look for leftover processes.
#![allow(dead_code)]

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
