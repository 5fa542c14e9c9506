//! Whole jobs through the launcher's supervisor (`p2pmpi_core::supervisor`) in virtual time,
//! with failures: which slots are declared dead, whether the job is stopped, its verdict, and
//! what agreements and spawns give every survivor, over many seeded schedules.
#![forbid(unsafe_code)]

use p2pmpi_sim::jobs::{check, run, run_many, Config, Scenario};

/// Every scenario, 40 seeded schedules each (n = 2 to 4 ranks): the job ends as it must.
#[test]
fn every_scenario_ends_as_it_must_over_many_schedules() {
    let failures = run_many(36, 40);
    assert!(failures.is_empty(), "{} failed schedules; first:\n{}", failures.len(), failures[0]);
}

/// The outcomes the checks rely on, spelled out for one schedule of each failure.
#[test]
fn failures_give_the_declarations_stops_and_verdicts_of_the_launcher() {
    let at = |scenario| run(Config { scenario, n: 3, seed: 5 });
    // A killed master: declared at once, its rank goes on, the job ends well.
    let o = at(Scenario::KillMaster);
    assert_eq!(o.declared, o.victims);
    assert_eq!((o.verdict, o.stops), (Some(0), 0));
    // A rank losing every replica: both declared, the job stopped, status 1.
    let o = at(Scenario::LoseRank);
    assert_eq!(o.declared.len(), 2);
    assert_eq!(o.verdict, Some(1));
    assert!(o.stops >= 1);
    // A freeze past detection: declared by the detector's report, told when it resumes.
    let o = at(Scenario::Freeze);
    assert_eq!(o.declared, o.victims);
    assert!(o.excluded.contains(&o.victims[0]));
    assert_eq!(o.verdict, Some(0));
    // A spawn asked by every replica of the root: performed once.
    let o = at(Scenario::Spawn);
    assert_eq!(o.performed, 1);
    for scenario in Scenario::ALL {
        let cfg = Config { scenario, n: 3, seed: 5 };
        check(cfg, &run(cfg)).unwrap();
    }
}

/// A run is a function of its seed.
#[test]
fn runs_are_deterministic() {
    for scenario in Scenario::ALL {
        let cfg = Config { scenario, n: 4, seed: 11 };
        let (a, b) = (run(cfg), run(cfg));
        assert_eq!((a.verdict, a.ended_at, &a.declared, &a.said), (b.verdict, b.ended_at, &b.declared, &b.said));
    }
}
