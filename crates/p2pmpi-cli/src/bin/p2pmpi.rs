//! `p2pmpi COMMAND …`: the p2pmpi command-line tool.
#![forbid(unsafe_code)]
fn main() {
    std::process::exit(p2pmpi_cli::entry("p2pmpi"));
}
