//! Example MPI programs (see `examples/`). Build them with
//! `cargo build --release -p p2pmpi-examples --examples` and run them with
//! `p2pmpirun -n 4 target/release/examples/pi`.
