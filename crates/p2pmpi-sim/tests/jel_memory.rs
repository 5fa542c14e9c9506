//! The JEL join test's memory, bounded (docs/sim/jel.md, "10 000 nodes"): every simulated
//! member holds the whole pool, so the heap grows as n², and what each (member, member) pair
//! costs decides whether 10 000 nodes fit. The heap's peak is counted by the binary's own
//! allocator (`heap`).

mod heap;

use p2pmpi_core::jel::central::Dissemination;
use p2pmpi_sim::jel::{Impl, JoinParams, Network};
use std::time::Duration;

#[test]
fn the_broadcast_trees_heap_stays_within_64_bytes_per_member_pair() {
    let n = 600;
    let (r, per_pair) = heap::join_run_per_pair(JoinParams {
        n,
        imp: Impl::Central(Dissemination::Tree),
        net: Network::DAS3,
        id_bytes: 256,
        spread: Duration::from_secs(5),
        duration: Duration::from_secs(20),
        seed: 1,
    });
    assert!(r.t_full.is_some(), "everyone must see everyone");
    // Before the compact roster and the drained action queues: ~170 bytes per pair.
    assert!(per_pair < 64.0, "{per_pair:.1} bytes per member pair");
}
