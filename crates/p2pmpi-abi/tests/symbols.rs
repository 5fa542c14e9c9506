//! The library exports every function of MPICH's ABI that Debian's `libmpich.so.12` exports
//! (implemented, or a stub failing with `MPI_ERR_UNSUPPORTED_OPERATION`), and nothing that
//! would make a loader take it for another ABI.

mod common;
use common::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const DEBIAN_LIB: &str = "/usr/lib/x86_64-linux-gnu/libmpich.so.12";

/// The names of the dynamic symbols a library defines, with their `nm` type letters.
fn defined(lib: &Path) -> Vec<(String, String)> {
    let out = Command::new("nm").args(["-D", "--defined-only"]).arg(lib).output().expect("run nm");
    assert!(out.status.success(), "nm {}", lib.display());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| (f[1].to_string(), f[2].to_string()))
        })
        .collect()
}

fn is_mpi(name: &str) -> bool {
    ["MPI_", "PMPI_", "MPIX_", "PMPIX_"].iter().any(|p| name.starts_with(p))
}

#[test]
fn every_function_of_debians_library_is_exported_and_no_other_abis_marker() {
    if !require(&["nm"], true) || !Path::new(DEBIAN_LIB).exists() {
        assert!(!under_ci(), "{DEBIAN_LIB} missing");
        return;
    }
    let theirs: BTreeSet<String> = defined(Path::new(DEBIAN_LIB))
        .into_iter()
        .filter(|(t, n)| (t == "T" || t == "W") && is_mpi(n))
        .map(|(_, n)| n)
        .collect();
    assert!(theirs.len() > 1200, "only {} functions found in {DEBIAN_LIB}", theirs.len());
    let ours_all = defined(&lib_dir().join("libmpi.so.12"));
    let ours: BTreeSet<String> = ours_all.iter().filter(|(t, _)| t == "T").map(|(_, n)| n.clone()).collect();
    let missing: Vec<&String> = theirs.difference(&ours).collect();
    assert!(missing.is_empty(), "{} functions missing: {missing:?}", missing.len());
    // Markers by which mpi4py would take the library for Open MPI's or the standard ABI's.
    for n in ["ompi_mpi_comm_self", "MPI_Abi_get_version", "PMPI_Abi_get_version"] {
        assert!(!ours_all.iter().any(|(_, m)| m == n), "{n} is exported");
    }
    // The data objects C programs name.
    for n in ["MPI_UNWEIGHTED", "MPI_WEIGHTS_EMPTY", "MPI_F_STATUS_IGNORE", "MPI_F_STATUSES_IGNORE"] {
        assert!(ours_all.iter().any(|(_, m)| m == n), "{n} is not exported");
    }
}

#[test]
fn a_function_not_provided_yet_answers_unsupported_or_stops_naming_itself() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("stub"), &[], Duration::from_secs(120));
    assert_eq!(o.stdout.lines().filter(|l| *l == "returned 44").count(), 2, "{}\n{}", o.stdout, o.stderr);
    assert!(!o.stdout.contains("not stopped"), "{}", o.stdout);
    assert_eq!(o.status.code(), Some(44), "{}", o.stderr);
    assert!(
        o.stderr.contains("MPI_Lookup_name: operation not supported (MPI_ERR_UNSUPPORTED_OPERATION)"),
        "{}",
        o.stderr
    );
}
