//! A large job on a small local grid: 64 ranks over 4 peers (16 each, all on this host's few
//! cores) start, pass barriers and all-reduces (`scale_bench`, the program of bench/scale.sh),
//! and get the right sums. (In nextest's `fault-timing` group: 64 processes load every core.)
#![forbid(unsafe_code)]

mod common;

use common::example;
use common::grid::TestGrid;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Far more than the job needs (a few seconds on 2 cores), bounded all the same.
const LIMIT: Duration = Duration::from_secs(180);

#[test]
fn sixty_four_ranks_on_four_peers_reduce_correctly() {
    let g = TestGrid::start("scale", 4, &["--procs", "16"]);
    // (The examples may be built here: the launch time is taken after.)
    let program = example("scale_bench");
    let t0 = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros().to_string();
    let out = common::run_cmd(
        std::process::Command::new(common::grid::bin("p2pmpirun"))
            .args(["-n", "64"])
            .arg(program)
            .args([&t0, "3", "8,65536"])
            .env("P2PMPI_HOME", g.home(1))
            .env_remove("P2PMPI_CONF_FILE"),
        LIMIT,
    );
    out.assert_ok();
    let line = out.stdout.lines().find(|l| l.starts_with("scale ")).unwrap_or_else(|| panic!("{}", out.stdout));
    let field = |k: &str| -> f64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {line}"))
    };
    assert!(line.starts_with("scale np=64 "), "{line}");
    // Every rank's last all-reduce (8 B and 64 KiB) summed 1..=64.
    assert_eq!(field("errors"), 0.0, "{line}");
    // Start-up measured from before the launch: positive, and within the job's lifetime.
    let init = field("init_ms");
    assert!(init > 0.0 && init < out.elapsed.as_secs_f64() * 1e3, "{line}");
    for k in ["barrier_us", "allreduce_8_us", "allreduce_65536_us"] {
        assert!(field(k) > 0.0, "{line}");
    }
}
