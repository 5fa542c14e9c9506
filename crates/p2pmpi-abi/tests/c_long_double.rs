//! C's `long double` (x87's 80-bit floats in 16 bytes on x86_64) in a C program built by
//! `mpicc.mpich`, run unchanged by `p2pmpirun --local`: `MPI_LONG_DOUBLE`,
//! `MPI_LONG_DOUBLE_INT` and `MPI_C_LONG_DOUBLE_COMPLEX` sent, packed and reduced by every
//! predefined operation MPI defines on them, in 80-bit precision (results a double would
//! round differently), and `MPI_Reduce_local`.

mod common;
use common::*;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

#[cfg(target_arch = "x86_64")]
#[test]
fn long_doubles_are_sent_packed_and_reduced_in_80_bits_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("long_double"), &[], T);
    o.assert_ok();
    let show = format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    for r in 0..3 {
        let mut want = vec![
            // MPICH's sizes: a pair's size is its parts' (16 + 4), its extent the C struct's.
            "sizes 16 20 32 extents 16 32 32".to_string(),
            "sent 1 packed 32 1".to_string(),
            "sum 1 below double 1 prod 1 max 1 min 1".to_string(),
            "maxloc 1 at 1 minloc 1 at 0".to_string(),
            "complex sum 1 prod 1".to_string(),
            "reduce_local sum 1 max 1".to_string(),
        ];
        if r == 2 {
            want.push("reduce at root 1".to_string());
        }
        for w in want {
            let w = format!("ld {r}: {w}");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{show}");
        }
    }
}
