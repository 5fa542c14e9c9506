//! Fault-aware C programs (ULFM under MPICH's `MPIX_` names), built by `mpicc.mpich` and run
//! unchanged by `p2pmpirun --local` with `MPIR_CVAR_ENABLE_FT=1`: a process dies mid-run and
//! the survivors revoke, agree, acknowledge, shrink and finish the work on 3.

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// `p2pmpirun --local -n N` with a fast failure detector, our library first, and MPICH's
/// switch of fault tolerance set to `ft`.
fn fault_aware(n: usize, prog: &str, ft: &str) -> Outcome {
    let mut cmd = Command::new(launcher());
    cmd.args(["--local", "-n", &n.to_string(), "--t-gossip", "100", "--t-max-hang", "0"]).arg(c_program(prog));
    cmd.env("LD_LIBRARY_PATH", lib_dir())
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-abi-tests")
        .env("MPIR_CVAR_ENABLE_FT", ft);
    run_cmd(&mut cmd, T)
}

#[test]
fn survivors_revoke_agree_shrink_and_finish_on_three() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = fault_aware(4, "ulfm", "1");
    let show = format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    assert!(o.status.success(), "{show}");
    // Sum of i*i for i < 1000.
    let want = 332_833_500;
    for r in 0..4 {
        assert!(o.stdout.lines().any(|l| l == format!("ulfm {r}: round 1 on 4 sum {want}")), "{show}");
    }
    for r in 0..3 {
        let round2 = format!("ulfm {r}: round 2 failed ");
        assert!(o.stdout.lines().any(|l| l.starts_with(&round2)), "{show}");
        for l in [
            format!("ulfm {r}: revoked barrier 1"),
            format!("ulfm {r}: acked rank 3 agreed 0x5"),
            format!("ulfm {r}: shrunk rank {r} of 3 sum {want} correct"),
        ] {
            assert!(o.stdout.lines().any(|x| x == l), "missing {l:?}\n{show}");
        }
    }
    assert!(!o.stdout.contains("FAILED"), "{show}");
    assert!(!o.stdout.contains("ulfm 3: round 2"), "rank 3 died: {show}");
}

#[test]
fn without_the_switch_a_failure_stops_the_job() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = fault_aware(4, "ulfm", "0");
    let show = format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    assert!(!o.status.success(), "{show}");
    assert!(!o.stdout.contains("shrunk"), "{show}");
}
