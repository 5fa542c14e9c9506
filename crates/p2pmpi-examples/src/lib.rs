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

/// The fault-tolerant examples' path: with `FT_PATH_DIR=DIR` in the environment, each
/// process appends `line` to `DIR/path-<slot>.txt` (its `P2PMPI_RANK`: with `-r R`, every
/// replica has its own file). Tests compare the files of a rank's replicas: they must have
/// taken the same path — the same operations failing, the same agreements — although only
/// the master's output is shown.
pub fn path(line: impl std::fmt::Display) {
    use std::io::Write;
    let Some(dir) = std::env::var_os("FT_PATH_DIR") else { return };
    let slot = std::env::var("P2PMPI_RANK").unwrap_or_else(|_| "0".into());
    let file = std::path::Path::new(&dir).join(format!("path-{slot}.txt"));
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&file).expect("open the path file");
    writeln!(f, "{line}").expect("write the path file");
}

/// An error as the path records it: what failed ("lost rank 2", "the communicator was
/// revoked …"), without the cause, which depends on how this process learned it.
pub fn error_kind(e: &impl std::fmt::Display) -> String {
    let s = e.to_string();
    s.split(": ").next().unwrap_or_default().to_string()
}
