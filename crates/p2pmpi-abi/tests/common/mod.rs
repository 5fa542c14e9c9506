//! Shared helpers of the tests of the MPICH-ABI library: where the build is, the library
//! directory (`scripts/abi-lib.sh`), C programs compiled by `mpicc.mpich`, jobs run by
//! `p2pmpirun --local` with a bounded time, and whether a test that needs a tool runs (under
//! CI it must).
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Debian's MPICH header directory.
pub const MPICH_INCLUDE: &str = "/usr/include/x86_64-linux-gnu/mpich";

/// This crate's directory.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The directory of our `mpi.h`.
pub fn our_include() -> PathBuf {
    crate_dir().join("include")
}

/// `<target>/<profile>`: the test binary is in its `deps`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.parent().and_then(Path::parent).expect("<target>/<profile>/deps/<test>").to_path_buf()
}

fn cargo_build(args: &[&str]) {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.arg("build").arg("-q").args(args);
    if profile_dir().ends_with("release") {
        cmd.arg("--release");
    }
    let st = cmd.status().expect("run cargo");
    assert!(st.success(), "cargo build {args:?} failed");
}

/// `p2pmpirun`, built once if the test runner did not build it.
pub fn launcher() -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    let path = profile_dir().join("p2pmpirun");
    if !path.exists() {
        BUILT.get_or_init(|| cargo_build(&["-p", "p2pmpi-cli", "--bin", "p2pmpirun"]));
    }
    assert!(path.exists(), "{} not found", path.display());
    path
}

/// The directory with `libmpi.so.12`, `libmpi.so` and `libmpich.so.12`, made once by
/// `scripts/abi-lib.sh` from this build's cdylib.
pub fn lib_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // The cdylib cargo built with this test (in `deps`; `cargo build` copies it one level
        // up, where an older one may lie).
        let fresh = profile_dir().join("deps/libp2pmpi_abi.so");
        let so = if fresh.exists() { fresh } else { profile_dir().join("libp2pmpi_abi.so") };
        if !so.exists() {
            cargo_build(&["-p", "p2pmpi-abi", "--lib"]);
        }
        let dir = profile_dir().join("p2pmpi-abi-lib");
        let script = crate_dir().join("../../scripts/abi-lib.sh");
        let st = Command::new("sh").arg(script).arg(&dir).arg(&so).status().expect("run scripts/abi-lib.sh");
        assert!(st.success(), "scripts/abi-lib.sh failed");
        dir
    })
    .clone()
}

/// Compiles `tests/c/NAME.c` with `mpicc.mpich` (linked against Debian's libmpich.so.12, as
/// any MPICH program), once per test binary; the executable's path.
pub fn c_program(name: &str) -> PathBuf {
    build_program("mpicc.mpich", name, "c")
}

/// Compiles `tests/c/NAME.cpp` with `mpicxx.mpich` (linked against Debian's
/// libmpichcxx.so.12 and libmpich.so.12), once per test binary; the executable's path.
pub fn cxx_program(name: &str) -> PathBuf {
    build_program("mpicxx.mpich", name, "cpp")
}

fn build_program(compiler: &str, name: &str, ext: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    let file = format!("{name}.{ext}");
    if let Some((_, p)) = built.iter().find(|(n, _)| *n == file) {
        return p.clone();
    }
    let src = crate_dir().join("tests/c").join(&file);
    let dir = profile_dir().join("p2pmpi-abi-c");
    std::fs::create_dir_all(&dir).expect("make the programs' directory");
    let exe = dir.join(name);
    // (gcc mistakes `MPI_STATUSES_IGNORE`, the address 1, for an array too small.)
    // Built under a name of this process and renamed: tests running at the same time in other
    // processes never run a half-written program.
    let tmp = dir.join(format!("{name}.{}", std::process::id()));
    let out = Command::new(compiler)
        .args(["-O1", "-Wall", "-Werror", "-Wno-stringop-overflow", "-o"])
        .arg(&tmp)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("run {compiler}: {e}"));
    assert!(out.status.success(), "{compiler} {}: {}", src.display(), String::from_utf8_lossy(&out.stderr));
    std::fs::rename(&tmp, &exe).expect("rename the program");
    built.push((file, exe.clone()));
    exe
}

pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
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

    /// The lines of standard output that start with `prefix`, sorted.
    pub fn lines_with(&self, prefix: &str) -> Vec<String> {
        let mut v: Vec<String> = self.stdout.lines().filter(|l| l.starts_with(prefix)).map(str::to_string).collect();
        v.sort();
        v
    }
}

/// Runs `p2pmpirun --local -n N PROGRAM ARGS` with our library first on the library path;
/// a job still running after `limit` is killed and the test fails.
pub fn run(n: usize, program: &Path, args: &[&str], limit: Duration) -> Outcome {
    let mut cmd = Command::new(launcher());
    cmd.arg("--local").arg("-n").arg(n.to_string()).arg(program).args(args);
    cmd.env("LD_LIBRARY_PATH", lib_dir()).env("P2PMPI_HOME", "/nonexistent/p2pmpi-abi-tests");
    run_cmd(&mut cmd, limit)
}

pub fn run_cmd(cmd: &mut Command, limit: Duration) -> Outcome {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let out = reader(child.stdout.take().unwrap());
    let err = reader(child.stderr.take().unwrap());
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}\nstdout so far:\n{}", out.join().unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Outcome { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}

fn reader(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Whether the tests run under CI (`CI=true`), where every tool was installed.
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

/// Whether a test that needs `tools` (and MPICH's header, when `mpich_header`) runs: outside
/// CI one that lacks something says so ("SKIPPED: …") and returns; under CI it fails, naming
/// what is missing (`.ci/run` installs mpich, libmpich-dev and python3-venv).
pub fn require(tools: &[&str], mpich_header: bool) -> bool {
    let mut missing: Vec<String> = tools.iter().filter(|t| !on_path(t)).map(|t| format!("`{t}`")).collect();
    if mpich_header && !Path::new(MPICH_INCLUDE).join("mpi.h").exists() {
        missing.push(format!("{MPICH_INCLUDE}/mpi.h (libmpich-dev)"));
    }
    if missing.is_empty() {
        return true;
    }
    let test = std::thread::current().name().unwrap_or("this test").to_string();
    let why = format!("needs {}", missing.join(" and "));
    assert!(!under_ci(), "{test} {why}; under CI (CI=true) it must run");
    eprintln!("SKIPPED: {test} {why}");
    false
}
