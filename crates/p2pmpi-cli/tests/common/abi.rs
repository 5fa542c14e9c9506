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

/// Puts p2pmpi's library where `p2pmpirun` looks for it (next to it), once per test process:
/// the cdylib cargo built for this test build (`p2pmpi-abi` is a dev-dependency, so it is in
/// `deps` with this build's features, fresh), copied over whatever older one lies there.
pub fn build_library() {
    static PLACED: OnceLock<()> = OnceLock::new();
    PLACED.get_or_init(|| {
        let built = profile_dir().join("deps/libp2pmpi_abi.so");
        let placed = profile_dir().join("libp2pmpi_abi.so");
        assert!(built.is_file(), "{} not built (p2pmpi-abi is a dev-dependency of p2pmpi-cli)", built.display());
        let same = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.len() == y.len() && x.modified().ok() == y.modified().ok(),
            _ => false,
        };
        if !same(&built, &placed) {
            // Copied under a name of this process, then renamed: tests placing it side by side
            // never see half a file.
            let tmp = profile_dir().join(format!(".libp2pmpi_abi.so.{}", std::process::id()));
            std::fs::copy(&built, &tmp).expect("copy p2pmpi's library");
            let mtime = std::fs::metadata(&built).and_then(|m| m.modified()).expect("library's time");
            std::fs::File::options()
                .write(true)
                .open(&tmp)
                .and_then(|f| f.set_modified(mtime))
                .expect("set the copy's time");
            std::fs::rename(&tmp, &placed).expect("place p2pmpi's library");
        }
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

/// The virtual environment with the pinned mpi4py wheel: `crates/p2pmpi-abi`'s tests' one
/// (`<profile>/p2pmpi-abi-venv`), made by `scripts/mpi4py-venv.sh` when missing; `Err` says why
/// not.
pub fn venv() -> Result<PathBuf, String> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    VENV.get_or_init(|| make_venv("p2pmpi-abi-venv", None)).clone()
}

/// The same of the system's interpreter (`/usr/bin/python3`, readable by every user: the grid's
/// confined jobs run as users of their own), at `<profile>/p2pmpi-abi-venv-system`.
pub fn system_venv() -> Result<PathBuf, String> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    VENV.get_or_init(|| make_venv("p2pmpi-abi-venv-system", Some(Path::new("/usr/bin/python3")))).clone()
}

fn make_venv(name: &str, python: Option<&Path>) -> Result<PathBuf, String> {
    let dir = profile_dir().join(name);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/mpi4py-venv.sh");
    let mut cmd = Command::new("sh");
    cmd.arg(script).arg(&dir);
    if let Some(p) = python {
        cmd.env("PYTHON", p);
    }
    let o = cmd.output().map_err(|e| format!("sh: {e}"))?;
    if o.status.success() {
        Ok(dir)
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}
