//! `p2pmpirun -n N [-r R] [-a STRATEGY] [-l FILES] [-w SECONDS] PROG [ARGS…]`: runs an MPI program.
#![forbid(unsafe_code)]
fn main() {
    std::process::exit(p2pmpi_cli::entry("p2pmpirun"));
}
