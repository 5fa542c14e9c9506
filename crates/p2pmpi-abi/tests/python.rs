//! mpi4py's binary wheel from PyPI (pinned `mpi4py==4.1.2`, in a virtual environment kept
//! in the target directory) runs on our library: it loads it as MPICH's (every symbol bound
//! at once) and a program computes with it under `p2pmpirun --local -n 2`.

mod common;
use common::*;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The virtual environment with the pinned mpi4py wheel from PyPI, made once per test process
/// by `scripts/mpi4py-venv.sh` (the tests of this file run in threads of one process, or each in
/// its own process under nextest); `Err` says why it could not be made.
fn venv() -> Result<PathBuf, String> {
    static VENV: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    VENV.get_or_init(|| {
        let dir = profile_dir().join("p2pmpi-abi-venv");
        let o = Command::new("sh")
            .arg(crate_dir().join("../../scripts/mpi4py-venv.sh"))
            .arg(&dir)
            .output()
            .map_err(|e| format!("sh: {e}"))?;
        if o.status.success() {
            Ok(dir)
        } else {
            Err(String::from_utf8_lossy(&o.stderr).into_owned())
        }
    })
    .clone()
}

const PROGRAM: &str = r#"
from array import array
from mpi4py import MPI
comm = MPI.COMM_WORLD
r, s = comm.Get_rank(), comm.Get_size()
a = array('i', [r + 1, 10 * (r + 1)])
b = array('i', [0, 0])
comm.Allreduce(a, b, op=MPI.SUM)
d = array('d', [r * 1.5])
comm.Allreduce(MPI.IN_PLACE, d, op=MPI.MAX)
x = array('l', [7 if r == 0 else 0])
comm.Bcast(x, root=0)
variant = MPI.__file__.rsplit('/', 1)[-1].split('.')[1]
lib = MPI.Get_library_version().split()[0]
print(f"rank {r} of {s}: sum {b[0]} {b[1]} max {d[0]} bcast {x[0]} variant {variant} lib {lib}", flush=True)
# Python objects (pickled; mpi4py keeps a duplicate of the communicator in an attribute).
obj = comm.bcast({"k": [1, 2]} if r == 0 else None, root=0)
total = comm.allreduce(r + 1, op=MPI.SUM)
half = comm.Split(r % 2, r)
print(f"rank {r}: objects {obj['k']} total {total} split {half.Get_size()} dup {comm.Dup().allreduce(2)}", flush=True)
got = comm.gather(r * 2, root=0)
part = comm.scatter([i * 3 for i in range(s)] if r == 0 else None, root=0)
every = comm.allgather(str(r))
swapped = comm.alltoall([r * 10 + i for i in range(s)])
if r == 0:
    comm.send(("hi", 1), dest=1, tag=5)
    answer = comm.recv(source=1, tag=6)
else:
    answer = comm.recv(source=0, tag=5)
    comm.send(answer[0] + "!", dest=0, tag=6)
print(f"rank {r}: gather {got} scatter {part} allgather {every} alltoall {swapped} p2p {answer}", flush=True)
# Derived datatypes (made by the large-count constructors mpi4py calls), decoding,
# Sendrecv_replace, the reduce-scatters.
t = MPI.INT.Create_contiguous(3).Commit()
v = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
kind, how = v.decode()[1:]
y = array('i', [r] * 3)
comm.Sendrecv_replace([y, 1, t], (r + 1) % s, 1, (r - 1) % s, 1)
rsb = array('i', [0])
comm.Reduce_scatter_block(array('i', [r + i for i in range(s)]), rsb, op=MPI.SUM)
rs = array('i', [0, 0])
comm.Reduce_scatter(array('i', [1] * (2 * s)), rs, [2] * s, op=MPI.SUM)
print(f"rank {r}: sizes {t.Get_size()} {v.Get_size()} extent {v.Get_extent()[1]} {kind} {how['stride']} "
      f"replace {y[0]} {y[2]} rsb {rsb[0]} rs {rs[0]} {rs[1]}", flush=True)
t.Free()
v.Free()
"#;

#[test]
fn mpi4py_wheel_computes_on_two_processes() {
    if !require(&["python3"], false) {
        return;
    }
    let dir = match venv() {
        Ok(d) => d,
        Err(why) => {
            assert!(!under_ci(), "mpi4py's wheel is needed under CI: {why}");
            eprintln!("SKIPPED: mpi4py_wheel_computes_on_two_processes: {why}");
            return;
        }
    };
    let script = profile_dir().join(format!("p2pmpi-abi-mpi4py-{}.py", std::process::id()));
    std::fs::write(&script, PROGRAM).unwrap();
    let py = dir.join("bin/python3");
    let o = run(2, &py, &[script.to_str().unwrap()], Duration::from_secs(120));
    let _ = std::fs::remove_file(&script);
    o.assert_ok();
    for r in 0..2 {
        for want in [
            format!("rank {r} of 2: sum 3 30 max 1.5 bcast 7 variant mpich lib p2pmpi"),
            format!("rank {r}: objects [1, 2] total 3 split 1 dup 4"),
            if r == 0 {
                "rank 0: gather [0, 2] scatter 0 allgather ['0', '1'] alltoall [0, 10] p2p hi!".to_string()
            } else {
                "rank 1: gather None scatter 3 allgather ['0', '1'] alltoall [1, 11] p2p ('hi', 1)".to_string()
            },
            // Element r of the reduce-scatter is the sum over q of q + r.
            format!("rank {r}: sizes 12 16 extent 24 VECTOR 2 replace {0} {0} rsb {1} rs 2 2", 1 - r, 1 + 2 * r),
        ] {
            assert!(
                o.stdout.lines().any(|l| l == want),
                "missing {want:?}\nstdout:\n{}\nstderr:\n{}",
                o.stdout,
                o.stderr
            );
        }
    }
}

#[test]
fn mpi4py_benchmarks_helloworld_and_ringtest_run() {
    if !require(&["python3"], false) {
        return;
    }
    let dir = match venv() {
        Ok(d) => d,
        Err(why) => {
            assert!(!under_ci(), "mpi4py's wheel is needed under CI: {why}");
            eprintln!("SKIPPED: mpi4py_benchmarks_helloworld_and_ringtest_run: {why}");
            return;
        }
    };
    let py = dir.join("bin/python3");
    let o = run(3, &py, &["-m", "mpi4py.bench", "helloworld"], Duration::from_secs(120));
    o.assert_ok();
    for r in 0..3 {
        let want = format!("Hello, World! I am process {r} of 3 on ");
        assert!(o.stdout.lines().any(|l| l.starts_with(&want)), "missing {want:?}\n{}", o.stdout);
    }
    let o = run(3, &py, &["-m", "mpi4py.bench", "ringtest", "-l", "5", "-n", "1024"], Duration::from_secs(120));
    o.assert_ok();
    assert!(o.stdout.contains("time for 5 loops = ") && o.stdout.contains("(3 processes, 1024 bytes)"), "{}", o.stdout);
}

/// Modules of mpi4py's own test suite that pass whole on 2 processes (every test of each, on
/// every rank): the bounded subset CI runs; `bench/mpi4py_suite.sh` runs all 64 at -n 1, 2, 3.
const SUITE_SUBSET: [&str; 8] = [
    "test_cco_buf",
    "test_cco_obj",
    "test_group",
    "test_op",
    "test_info",
    "test_environ",
    "test_errhandler",
    "test_exceptions",
];

#[test]
fn a_subset_of_mpi4pys_own_test_suite_passes_on_two_processes() {
    if !require(&["python3"], false) {
        return;
    }
    let dir = venv().unwrap_or_else(|why| panic!("mpi4py's wheel (pinned, from PyPI) is needed: {why}"));
    let py = dir.join("bin/python3");
    let o = Command::new("sh")
        .arg(crate_dir().join("../../scripts/mpi4py-tests.sh"))
        .arg(profile_dir().join("p2pmpi-abi-mpi4py-src"))
        .env("PYTHON", &py)
        .output()
        .expect("run scripts/mpi4py-tests.sh");
    assert!(o.status.success(), "mpi4py's test suite is needed: {}", String::from_utf8_lossy(&o.stderr));
    let tests = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let driver = crate_dir().join("../../bench/mpi4py_driver.py");
    for module in SUITE_SUBSET {
        let out = profile_dir().join(format!("p2pmpi-abi-mpi4py-{module}.{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        let args = [driver.to_str().unwrap(), &tests, out.to_str().unwrap(), module];
        let o = run(2, &py, &args, Duration::from_secs(120));
        o.assert_ok();
        let mut passed = 0;
        for r in 0..2 {
            let text = std::fs::read_to_string(out.join(format!("rank{r}.txt"))).unwrap_or_default();
            let ended: Vec<&str> = text.lines().filter(|l| !l.starts_with("START ")).collect();
            let not_ok: Vec<&&str> = ended.iter().filter(|l| !l.starts_with("ok ")).collect();
            assert!(not_ok.is_empty(), "{module} rank {r}: {not_ok:?}\n{}", o.stderr);
            passed += ended.len();
        }
        let _ = std::fs::remove_dir_all(&out);
        assert!(passed >= 2 * 4, "{module}: only {passed} outcomes\n{}", o.stderr);
    }
}
