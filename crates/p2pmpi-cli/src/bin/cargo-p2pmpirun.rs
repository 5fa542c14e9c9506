//! `cargo p2pmpirun -n N [--example NAME | --bin NAME] [OPTIONS] [-- ARGS…]`: builds with
//! cargo, then runs with `p2pmpirun` ([`p2pmpi_cli::cargo_run`]).
#![forbid(unsafe_code)]
fn main() {
    std::process::exit(p2pmpi_cli::cargo_run::main());
}
