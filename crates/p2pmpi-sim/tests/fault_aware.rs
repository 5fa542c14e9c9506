//! Fault-aware replicated jobs (ULFM with `-r R`, `Policy::Notify`) in virtual time: whole
//! ranks are lost on purpose (every replica crashes mid-run), receives from them fail, the
//! job goes on, and the replicas of every rank follow their master's outcomes through the
//! failure choice points (`p2pmpi_core::replication::failures`, `operations`, `stranded`),
//! over many seeded schedules.
//!
//! What the simulator checks on every schedule (a violation otherwise): the replicas of a rank
//! that finished took the same outcome (success with the same value, or failure) of every
//! operation and sent the same values; every failure names a rank lost whole; every message
//! of a channel is delivered once, in order; every rank that was not lost finishes on some
//! replica (no hang, no fatal error).
#![forbid(unsafe_code)]

use p2pmpi_sim::replicated::{run, JobConfig, RunReport, Verdict};

fn cfg(n: usize, r: usize, lose: usize) -> JobConfig {
    JobConfig { n, r, messages: 40, faults: 0, fault_aware: true, lose, ..JobConfig::default() }
}

fn explain(seed: u64, c: &JobConfig, rep: &RunReport) -> String {
    format!(
        "seed {seed} n {} r {} lose {}: {:?}; faults {:?}\n{}",
        c.n, c.r, c.lose, rep.verdict, rep.faults, rep.state
    )
}

#[test]
fn survivors_finish_and_replicas_take_their_masters_outcomes_over_many_schedules() {
    let shapes = [cfg(3, 2, 1), cfg(4, 2, 1), cfg(3, 3, 1), cfg(4, 2, 2), cfg(5, 3, 2)];
    let mut bad = Vec::new();
    let (mut failed_ops, mut followed, mut left, mut lost, mut runs) = (0, 0, 0, 0, 0);
    for seed in 0..150 {
        for c in shapes {
            let rep = run(seed, c);
            runs += 1;
            if rep.verdict != Verdict::Completed {
                bad.push(explain(seed, &c, &rep));
                continue;
            }
            // Only ranks chosen are lost whole (one may finish its program before its crash).
            let mut lost_here = rep.lost_ranks.clone();
            lost_here.sort_unstable();
            lost_here.dedup();
            if lost_here.len() > c.lose {
                bad.push(format!("seed {seed}: lost ranks {:?}, {} chosen", rep.lost_ranks, c.lose));
            }
            lost += lost_here.len();
            failed_ops += rep.failed_ops;
            followed += rep.followed;
            left += rep.left;
        }
    }
    assert!(bad.is_empty(), "{} of {runs} schedules went wrong; first: {}", bad.len(), bad[0]);
    // The schedules exercise what they are about: receives fail, non-masters follow their
    // master's failures rather than deciding them, and some replicas cannot follow (they took
    // a success, or wait for a message, that their master did not) and leave.
    assert!(lost > runs / 2, "{lost} ranks lost in {runs} schedules");
    assert!(failed_ops > runs, "{failed_ops} failed receives taken in {runs} schedules");
    assert!(followed > runs / 2, "{followed} failures followed in {runs} schedules");
    assert!(left > 0, "no replica ever left");
}

#[test]
fn without_fault_awareness_losing_a_rank_ends_the_job() {
    let mut failed = 0;
    for seed in 0..20 {
        let c = JobConfig { fault_aware: false, ..cfg(3, 2, 1) };
        let rep = run(seed, c);
        match &rep.verdict {
            Verdict::Failed(_) => failed += 1,
            // The rank finished its program before its crash.
            Verdict::Completed => {}
            Verdict::Violation(_) => panic!("{}", explain(seed, &c, &rep)),
        }
        assert_eq!(rep.failed_ops, 0, "no receive fails in a program that does not handle failures");
    }
    assert!(failed >= 15, "only {failed} of 20 jobs ended by the loss of a rank");
}

#[test]
fn a_fault_aware_run_is_a_function_of_its_seed() {
    let a = run(11, cfg(4, 2, 1));
    let b = run(11, cfg(4, 2, 1));
    assert_eq!(
        (a.verdict, a.events, a.failed_ops, a.left, a.lost_ranks),
        (b.verdict, b.events, b.failed_ops, b.left, b.lost_ranks)
    );
}

#[test]
fn a_new_master_completes_the_receives_its_master_completed() {
    // A master receives a message of a rank whose replicas all die before its own replica got
    // it, and crashes. Without shared receives it may have sent what depended on the message
    // already: its successor fails the receive (the sender is lost) and sends other values
    // under the same message ids, which the receivers' replicas deliver (seed 66 is the
    // schedule the exploration found first). With them, the master sends nothing reached
    // after the message before its replica has it too, and relays it when its sender is lost.
    for (seed, n, r) in [(66, 4, 2), (52, 3, 2), (384, 3, 2), (215, 5, 3), (1942, 3, 3)] {
        let c = JobConfig { faults: 1, ..cfg(n, r, 1) };
        let bad = run(seed, JobConfig { share: false, ..c });
        assert!(
            matches!(&bad.verdict, Verdict::Violation(v) if v.contains("diverged") || v.contains("was delivered")),
            "seed {seed} without shared receives: {:?}",
            bad.verdict
        );
        let good = run(seed, c);
        assert_eq!(good.verdict, Verdict::Completed, "{}", explain(seed, &c, &good));
    }
}

#[test]
fn with_other_faults_besides_the_lost_ranks_survivors_still_finish_alike() {
    // Crashes, freezes, partitions and false suspicions on top of the ranks lost whole: the
    // schedules that found the divergence of a new master's receives.
    let shapes = [cfg(3, 2, 1), cfg(4, 2, 1), cfg(3, 3, 1), cfg(4, 2, 2)];
    let mut bad = Vec::new();
    let (mut runs, mut relays) = (0, 0);
    for seed in 0..100 {
        for c in shapes {
            let c = JobConfig { faults: 1 + (seed as usize % 2), ..c };
            let rep = run(seed, c);
            runs += 1;
            relays += rep.relays;
            if rep.verdict != Verdict::Completed {
                bad.push(explain(seed, &c, &rep));
            }
        }
    }
    assert!(bad.is_empty(), "{} of {runs} schedules went wrong; first: {}", bad.len(), bad[0]);
    assert!(relays > 0, "no message was ever relayed in {runs} schedules");
}
