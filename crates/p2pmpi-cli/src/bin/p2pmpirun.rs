//! `p2pmpirun -n N PROG [ARGS…]`: runs an MPI program.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    std::process::exit(p2pmpi_cli::launcher::main_with_args("p2pmpirun", &args[1..]));
}
