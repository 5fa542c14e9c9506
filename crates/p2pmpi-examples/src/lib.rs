//! Example MPI programs (see `examples/`). Build them with
//! `cargo build --release --workspace --bins --examples` and run them with
//! `p2pmpirun -n 4 target/release/examples/pi`.
#![forbid(unsafe_code)]
