//! Example MPI programs (see `examples/`). Build them with
//! `cargo build --release --workspace --bins --examples` and run them with
//! `p2pmpirun -n 4 target/release/examples/pi`.
#![forbid(unsafe_code)]

/// The value of work item `t` in the fault-tolerant examples (`ft_solver`, `ft_revoke`): a
/// hash of `t` below 1 000 003, so that a sum over items shows any lost or doubled item.
pub fn work_item(t: u64) -> u64 {
    let mut z = t.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % 1_000_003
}
