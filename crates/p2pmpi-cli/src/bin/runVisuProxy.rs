//! `runVisuProxy`: the classic P2P-MPI command (SPEC §17).
#![allow(non_snake_case)]
#![forbid(unsafe_code)]
fn main() {
    std::process::exit(p2pmpi_cli::entry("runVisuProxy"));
}
