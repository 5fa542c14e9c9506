//! Replicas that check each other (issue 42, item 4), bounded to seconds: the digest verifier
//! of `p2pmpi_core::replication::verify` in 2 000 schedules that sent a corrupted message (and
//! the honest ones in between), with the invariants of `p2pmpi_sim::verify`.
#![forbid(unsafe_code)]

use p2pmpi_core::replication::verify::{Mode, OnMismatch, Rule};
use p2pmpi_sim::verify::{run, run_until, Config, Fault, FAULTS};

#[test]
fn no_corrupted_receive_goes_unnoticed_and_honest_runs_raise_no_alarm() {
    let t = run_until(1, 2000, None, 30, 2);
    for (i, cfg, why) in &t.failures {
        eprintln!("schedule {i} {cfg:?}: {why:?}");
    }
    assert_eq!(t.violations, 0);
    assert_eq!(t.honest_alarms, 0);
    assert_eq!(t.corrupted(), 2000);
    let honest = &t.by_fault[0];
    assert!(honest.schedules > 600 && honest.corrupt_sent == 0, "{honest:?}");
    // Every fault is caught in every way the rules allow: stopped (compare, or no majority),
    // reported, corrected by the vote; a liar left alone once its honest peers died is
    // delivered unverified (the case that cannot be detected), and counted.
    for (f, x) in FAULTS.iter().zip(&t.by_fault).skip(1) {
        assert!(x.corrupt_sent > 500 && x.corrupt_data > 100, "{f:?} {x:?}");
        assert!(x.stopped > 50 && x.reported > 50 && x.corrected > 100, "{f:?} {x:?}");
    }
    assert!(t.by_fault[2].unverified + t.by_fault[3].unverified > 0, "{t:?}");
    assert!(t.unverified_corrupt > 0 && t.from_backup > 0 && t.fences > 0);
    // r ≥ 3, vote, nobody dying: the true content everywhere and the faulty replica fenced.
    assert!(t.vote_all_alive.0 > 300, "{:?}", t.vote_all_alive);
    assert_eq!(t.vote_all_alive.0, t.vote_all_alive.1);
}

#[test]
fn a_lying_master_at_three_is_outvoted_and_fenced_and_at_two_stops_the_job() {
    let mut fenced = 0;
    for seed in 0..50 {
        let cfg =
            Config { n: 3, r: 3, messages: 30, fault: Fault::LyingMaster, mode: Mode::for_degree(3), deaths: false };
        let o = run(seed, cfg);
        assert!(o.violations.is_empty(), "{seed}: {:?}", o.violations);
        assert_eq!((o.mismatches, o.unverified, o.stopped), (0, 0, false), "{seed}: {o:?}");
        if o.corrupt_data {
            // Each of the 6 receiving replicas fences it at most once (if the launcher's word has not reached it first).
            assert!(o.fenced_faulty && (1..=6).contains(&o.fences) && o.from_backup > 0, "{seed}: {o:?}");
            fenced += 1;
        }
        let cfg = Config { r: 2, mode: Mode { rule: Rule::Compare, on_mismatch: OnMismatch::Stop }, ..cfg };
        let o = run(seed, cfg);
        assert!(o.violations.is_empty(), "{seed}: {:?}", o.violations);
        assert_eq!(o.stopped, o.corrupt_sent, "{seed}: {o:?}");
        assert_eq!((o.fences, o.from_backup), (0, 0));
    }
    assert!(fenced > 30, "{fenced}");
}
