//! A local grid of real daemons for the tests: `p2pmpi local-grid start`, commands typed on
//! a peer, and a guard that stops every daemon.

use super::run_cmd;
use super::Outcome;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub const LIMIT: Duration = Duration::from_secs(60);

pub fn bin(name: &str) -> PathBuf {
    match name {
        "p2pmpi" => env!("CARGO_BIN_EXE_p2pmpi").into(),
        "p2pmpirun" => env!("CARGO_BIN_EXE_p2pmpirun").into(),
        "mpiboot" => env!("CARGO_BIN_EXE_mpiboot").into(),
        "mpihalt" => env!("CARGO_BIN_EXE_mpihalt").into(),
        "mpihost" => env!("CARGO_BIN_EXE_mpihost").into(),
        "mpistat" => env!("CARGO_BIN_EXE_mpistat").into(),
        "runSupernode" => env!("CARGO_BIN_EXE_runSupernode").into(),
        "stopSupernode" => env!("CARGO_BIN_EXE_stopSupernode").into(),
        "supernode_stat" => env!("CARGO_BIN_EXE_supernode_stat").into(),
        "runVisuProxy" => env!("CARGO_BIN_EXE_runVisuProxy").into(),
        "runVisu" => env!("CARGO_BIN_EXE_runVisu").into(),
        other => panic!("no binary {other}"),
    }
}

pub struct TestGrid {
    pub dir: PathBuf,
}

impl TestGrid {
    pub fn start(name: &str, peers: usize, extra: &[&str]) -> TestGrid {
        let dir = std::env::temp_dir().join(format!("p2pmpi-grid-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let g = TestGrid { dir };
        let peers = peers.to_string();
        let mut args = vec!["local-grid", "start", "--peers", &peers, "--dir", g.dir.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = run_cmd(Command::new(bin("p2pmpi")).args(&args).env_remove("P2PMPI_CONF_FILE"), LIMIT);
        out.assert_ok();
        assert!(out.stdout.contains("Local grid up"), "{}", out.stdout);
        g
    }

    pub fn home(&self, peer: usize) -> PathBuf {
        self.dir.join(format!("peer{peer}"))
    }

    /// A command as a user on peer `peer` types it.
    pub fn on(&self, peer: usize, cmd: &str, args: &[&str]) -> Outcome {
        self.on_home(&self.home(peer), cmd, args)
    }

    pub fn on_home(&self, home: &Path, cmd: &str, args: &[&str]) -> Outcome {
        run_cmd(Command::new(bin(cmd)).args(args).env("P2PMPI_HOME", home).env_remove("P2PMPI_CONF_FILE"), LIMIT)
    }

    /// `p2pmpirun ARGS` submitted from peer 1.
    pub fn run(&self, args: &[&str]) -> Outcome {
        self.on(1, "p2pmpirun", args)
    }

    pub fn conf(&self, peer: usize) -> PathBuf {
        self.home(peer).join("P2P-MPI.conf")
    }

    pub fn log(&self, peer: usize) -> String {
        let mut all = String::new();
        if let Ok(d) = std::fs::read_dir(self.home(peer).join("tmp")) {
            for e in d.flatten() {
                all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
        all
    }

    /// Restarts peer `peer` with extra configuration lines.
    pub fn reconfigure(&self, peer: usize, lines: &[&str]) {
        self.on(peer, "mpihalt", &[]).assert_ok();
        let mut f = std::fs::OpenOptions::new().append(true).open(self.conf(peer)).unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
        self.on(peer, "mpiboot", &[]).assert_ok();
    }

    pub fn wait_hosts(&self, peer: usize, want: usize) -> String {
        wait_for(|| {
            let o = self.on(peer, "mpihost", &[]);
            let ok = o.stdout.contains(&format!("Total : {want} MPD known."))
                && o.stdout.lines().filter(|l| l.contains(" true ")).count() == want;
            ok.then_some(o.stdout)
        })
    }
}

impl Drop for TestGrid {
    fn drop(&mut self) {
        let _ = run_cmd(
            Command::new(bin("p2pmpi")).args(["local-grid", "stop", "--dir", self.dir.to_str().unwrap()]),
            LIMIT,
        );
        // Daemons a test started by hand (extra peers, a second supernode).
        for e in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            for state in ["mpd.json", "supernode.json"] {
                if let Ok(text) = std::fs::read_to_string(e.path().join(state)) {
                    if let Some(pid) =
                        serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["pid"].as_u64())
                    {
                        let _ = p2pmpi_peer::os::signal(pid as u32, libc::SIGKILL);
                    }
                }
            }
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Polls `f` until it returns a value (at most 20 s).
pub fn wait_for<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "condition not met within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}
