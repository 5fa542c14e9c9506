//! Jobs with checkpoints under host failures (issue 41), through the checkpoint coordinator:
//! the simulator against the seeds' formula and the advisor's model, bounded to seconds.
#![forbid(unsafe_code)]

use p2pmpi_core::advisor::checkpoints::CheckpointModel;
use p2pmpi_core::advisor::p_app_replicated;
use p2pmpi_sim::checkpoint::{run, sweep, trial, Failure, Mode, Params};

const THREADS: usize = 2;

/// 16 ranks × 2, hosts failing every 100 000 s on average (exponential), a day of work,
/// checkpoints of 60 s every 3 000 s.
fn day() -> Params {
    Params::new(16, 2, 1.0, 100_000.0, 86_400.0, 3000.0, 60.0)
}

#[test]
fn the_three_modes_against_the_model() {
    let p = day();
    let m = CheckpointModel {
        p: 16,
        r: 2,
        mtbf: 100_000.0,
        shape: 1.0,
        work: 86_400.0,
        cost: 60.0,
        restart: 60.0,
        max_restarts: 100,
    };
    let trials = 600;
    let repl = run(Params { mode: Mode::Replication, ..p }, trials, 1, THREADS);
    let reb = run(Params { mode: Mode::Rebirth, ..p }, trials, 1, THREADS);
    let rst = run(Params { mode: Mode::Restart, ..p }, trials, 1, THREADS);
    eprintln!("replication {repl:?}\nrebirth {reb:?}\nrestart {rst:?}");
    // Replication only: the seeds' P_app with f over the day, 1 − (1 − f²)^16 = 99.85 %.
    let f = 1.0 - (-86_400.0f64 / 100_000.0).exp();
    let expect = 1.0 - p_app_replicated(16, 2, f);
    assert!((repl.probability() - expect).abs() <= repl.margin(), "{repl:?} vs {expect}");
    assert_eq!(repl.mean_rebirths, 0.0);
    // Rebirth: the model's Π(1 − G(S)) at this interval (65.7 %).
    let expect = m.finish_rebirth(3000.0);
    assert!((reb.probability() - expect).abs() <= 2.0 * reb.margin(), "{reb:?} vs {expect}");
    assert!(reb.mean_rebirths > 10.0 && reb.mean_restarts == 0.0, "{reb:?}");
    // Every finished run took the work and 28 checkpoints.
    assert!((reb.mean_time - (86_400.0 + 28.0 * 60.0)).abs() < 1e-6, "{reb:?}");
    // Restart: only an interruption before the first checkpoint is fatal (1.4 %).
    let expect = m.finish_restart(3000.0);
    assert!((rst.probability() - expect).abs() <= 2.0 * rst.margin(), "{rst:?} vs {expect}");
    assert!(rst.mean_restarts > 0.1, "{rst:?}");
    let e = m.expected_time(3000.0);
    assert!((rst.mean_time / e - 1.0).abs() < 0.01, "{rst:?} vs {e}");
}

#[test]
fn failures_are_explained_and_trials_deterministic() {
    let p = Params { mode: Mode::Rebirth, ..day() };
    let ends: Vec<_> = (0..200).map(|i| trial(p, i)).collect();
    assert!(ends.iter().any(|t| t.failure == Some(Failure::Budget)));
    assert!(ends.iter().all(|t| t.finished == t.failure.is_none()));
    assert_eq!(trial(p, 17), trial(p, 17));
    // Without replicas nor checkpoints the first host failure is the end.
    let p = Params { mode: Mode::Replication, degree: 1, ..day() };
    let t = trial(p, 3);
    assert_eq!((t.finished, t.failure, t.checkpoints), (false, Some(Failure::NoCheckpoint), 0));
    assert!(t.host_failures >= 1);
    // With restarts and r = 1 the job survives dozens of failures.
    let p = Params { mode: Mode::Restart, degree: 1, ranks: 8, ..day() };
    let s = run(p, 40, 5, THREADS);
    assert!(s.mean_restarts > 3.0 && s.probability() > 0.8, "{s:?}");
}

/// The advisor's interval is within 10 % of the simulator's optimum: a sweep of 7 intervals
/// from half to twice the advisor's, the same seeds for each, the optimum at the vertex of a
/// least-squares parabola in ln τ. Its mean run times also follow the model's within 2 %.
#[test]
fn the_advisors_interval_is_the_simulators_optimum() {
    for (p, r, mtbf, work, trials) in [(8u32, 1u32, 80_000.0, 40_000.0, 300), (8, 2, 10_000.0, 20_000.0, 200)] {
        let cost = 30.0;
        let m = CheckpointModel { p, r, mtbf, shape: 1.0, work, cost, restart: cost, max_restarts: 100 };
        let a = m.advise().unwrap();
        let grid: Vec<f64> = (-3..=3).map(|i| a.interval * 2f64.powf(f64::from(i) / 3.0)).collect();
        let (means, best) = sweep(Params::new(p, r, 1.0, mtbf, work, 0.0, cost), &grid, trials, 9, THREADS);
        eprintln!("p = {p}, r = {r}: advisor {:.0} s (anchor {:.0} s), simulator {best:.0} s", a.interval, a.anchor);
        assert!((best / a.interval - 1.0).abs() < 0.10, "advisor {} vs simulator {best}: {means:?}", a.interval);
        for (t, mean) in grid.iter().zip(&means) {
            let e = m.expected_time(*t);
            assert!((mean / e - 1.0).abs() < 0.02, "τ = {t}: simulated {mean}, model {e}");
        }
    }
}

/// Hosts that fail young (Weibull shape 0.7): the advisor's renewal model against the
/// simulator's grid, where each failed host is replaced by a new one.
#[test]
fn hosts_failing_young_against_the_model() {
    let p = Params::new(16, 2, 0.7, 100_000.0, 86_400.0, 3000.0, 60.0);
    let m = CheckpointModel {
        p: 16,
        r: 2,
        mtbf: 100_000.0,
        shape: 0.7,
        work: 86_400.0,
        cost: 60.0,
        restart: 60.0,
        max_restarts: 100,
    };
    let exp = CheckpointModel { shape: 1.0, ..m };
    let run_ = m.run();
    for (mode, expect, memoryless) in [
        (Mode::Rebirth, run_.finish_rebirth(3000.0), exp.finish_rebirth(3000.0)),
        (Mode::Restart, run_.finish_restart(3000.0), exp.finish_restart(3000.0)),
    ] {
        let s = run(Params { mode, ..p }, 600, 2, THREADS);
        eprintln!("{mode:?}: sim {s:?}, model {expect}, exponential model {memoryless}");
        assert!((s.probability() - expect).abs() <= 2.0 * s.margin(), "{mode:?}: {s:?} vs {expect}");
        // The exponential model would be wrong here: young hosts fail more.
        assert!(memoryless > expect + 2.0 * s.margin(), "{mode:?}: {memoryless} vs {expect}");
    }
}
