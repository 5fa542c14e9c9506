//! Programs of MPICH's ABI for the launcher's tests: p2pmpi's library built where `p2pmpirun`
//! looks for it (next to it), the C programs of `tests/c` built by `mpicc.mpich`, and mpi4py's
//! wheel in a virtual environment (the one `crates/p2pmpi-abi`'s tests make, made here too if
//! missing).

use super::launcher;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// `<target>/<profile>`, where `p2pmpirun` is.
pub fn profile_dir() -> PathBuf {
    launcher().parent().unwrap().to_path_buf()
}

/// Builds p2pmpi's library (`cargo build -p p2pmpi-abi --lib`, once per test process): cargo
/// puts it next to `p2pmpirun`, where the launcher finds it.
pub fn build_library() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["build", "-q", "-p", "p2pmpi-abi", "--lib"]);
        if profile_dir().ends_with("release") {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("run cargo to build p2pmpi-abi");
        assert!(st.success(), "building p2pmpi-abi failed");
        assert!(profile_dir().join("libp2pmpi_abi.so").is_file());
    });
}

/// Compiles `tests/c/NAME.c` with `compiler` (e.g. `mpicc.mpich`) and `flags`, once per test
/// process and output name; the executable's path.
pub fn c_program(name: &str, out: &str, compiler: &[&str], flags: &[&str]) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    let dir = profile_dir().join("p2pmpi-cli-c");
    let exe = dir.join(out);
    if built.iter().any(|n| n == out) {
        return exe;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(format!("{name}.c"));
    // Built under a name of this process and renamed: another test process never runs half of it.
    let tmp = dir.join(format!("{out}.{}", std::process::id()));
    let o = Command::new(compiler[0])
        .args(&compiler[1..])
        .args(["-O1", "-Wall", "-Werror"])
        .args(flags)
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("run {compiler:?}: {e}"));
    assert!(o.status.success(), "{compiler:?} {}: {}", src.display(), String::from_utf8_lossy(&o.stderr));
    std::fs::rename(&tmp, &exe).unwrap();
    built.push(out.to_string());
    exe
}

const MPI4PY: &str = "mpi4py==4.1.2";

/// Whether the environment at `dir` has the pinned mpi4py.
fn ready(dir: &Path) -> bool {
    Command::new(dir.join("bin/python3"))
        .args(["-c", "import mpi4py, sys; sys.exit(mpi4py.__version__ != '4.1.2')"])
        .env_remove("LD_LIBRARY_PATH")
        .status()
        .is_ok_and(|s| s.success())
}

/// The virtual environment with the pinned mpi4py wheel: `crates/p2pmpi-abi`'s tests' one
/// (`<profile>/p2pmpi-abi-venv`), made the same way when missing; `Err` says why not.
pub fn venv() -> Result<PathBuf, String> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    VENV.get_or_init(|| {
        let dir = profile_dir().join("p2pmpi-abi-venv");
        if ready(&dir) {
            return Ok(dir);
        }
        let tmp = profile_dir().join(format!("p2pmpi-abi-venv.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        let o = Command::new("python3").args(["-m", "venv"]).arg(&tmp).output().map_err(|e| format!("python3: {e}"))?;
        if !o.status.success() {
            return Err(format!("python3 -m venv: {}", String::from_utf8_lossy(&o.stderr)));
        }
        let o = Command::new(tmp.join("bin/python3"))
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "--only-binary", ":all:", MPI4PY])
            .output()
            .map_err(|e| format!("pip: {e}"))?;
        if !o.status.success() {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(format!("pip install {MPI4PY}: {}", String::from_utf8_lossy(&o.stderr)));
        }
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        if ready(&dir) {
            Ok(dir)
        } else {
            Err(format!("{} has no {MPI4PY} after the install", dir.display()))
        }
    })
    .clone()
}
