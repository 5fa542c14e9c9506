//! Simulator runs of the real detector (`p2pmpi_core::fd`): detection within the bound, no
//! false detection, determinism, several crashes at once, and the Monte-Carlo reliability
//! estimate against the seeds' exact n = 4 value.
#![forbid(unsafe_code)]

use p2pmpi_core::fd::{exact_detector_failure, t_cleanup, Event, FdConfig, Protocol, Status};
use p2pmpi_sim::detection::{run_trial, DetectionParams};
use p2pmpi_sim::reliability::{crude, klm, p_brr4};
use p2pmpi_sim::{Jitter, NetConfig, Sim, SimConfig, StartMode};
use std::time::Duration;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// A LAN-like network: 1 ms plus up to 20 ms of uniform jitter.
fn small_jitter() -> NetConfig {
    NetConfig::constant(ms(1)).with_jitter(Jitter::Uniform { max: ms(20) })
}

fn params(start: StartMode, trials: usize) -> DetectionParams {
    DetectionParams {
        sizes: vec![4, 8, 16, 32, 64],
        trials,
        net: small_jitter(),
        start,
        warmup: Duration::from_secs(8),
        threads: 1,
        seed: 7,
        ..Default::default()
    }
}

/// Every surviving process confirms the crash within `T_cleanup` + one `T_gossip` (the ping
/// time: `FdConfig::detection_bound`) when the detectors start together, and nothing else is
/// ever suspected.
#[test]
fn every_survivor_confirms_a_crash_within_t_cleanup_plus_one_t_gossip() {
    let p = params(StartMode::Aligned, 3);
    for proto in [Protocol::Brr, Protocol::Dbrr] {
        for &n in &p.sizes {
            let fd = FdConfig::new(proto, p.t_gossip, p.t_max_hang);
            let bound = fd.detection_bound(n);
            assert_eq!(bound, t_cleanup(proto, n, p.t_gossip) + p.t_gossip);
            for trial in 0..p.trials {
                let t = run_trial(&p, proto, n, trial);
                assert_eq!(t.delays.len(), n - 1);
                for (i, d) in t.delays.iter().enumerate() {
                    let d = d.unwrap_or_else(|| panic!("{proto} n={n} trial {trial}: survivor #{i} never confirmed"));
                    assert!(d <= bound, "{proto} n={n}: confirmed after {d:?} > {bound:?}");
                    // The last heartbeat is at most one period old at the crash.
                    assert!(d + p.t_gossip >= t_cleanup(proto, n, p.t_gossip), "{proto} n={n}: too early ({d:?})");
                }
                assert_eq!(t.false_events.suspicions, 0, "{proto} n={n}: a live process was suspected");
                assert_eq!(t.false_events.failures, 0, "{proto} n={n}: false detection");
            }
        }
    }
}

/// With the start-up of FM §5.3 (flat tree, counters from equation 4), the rounding of
/// equation 4 may put a process up to one period behind or ahead: one more `T_gossip`.
#[test]
fn with_the_equation_4_start_detection_is_within_one_more_t_gossip() {
    let p = params(StartMode::default(), 2);
    for proto in [Protocol::Brr, Protocol::Dbrr] {
        for &n in &p.sizes {
            let bound = FdConfig::new(proto, p.t_gossip, p.t_max_hang).detection_bound(n) + p.t_gossip;
            for trial in 0..p.trials {
                let t = run_trial(&p, proto, n, trial);
                assert!(t.delays.iter().all(|d| d.is_some_and(|d| d <= bound)), "{proto} n={n}: {:?}", t.delays);
                assert_eq!((t.false_events.suspicions, t.false_events.failures), (0, 0), "{proto} n={n}");
            }
        }
    }
}

/// Two minutes of fault-free running with small jitter: no suspicion at all.
#[test]
fn no_false_detection_without_crashes() {
    for proto in [Protocol::Brr, Protocol::Dbrr] {
        for n in [5usize, 32] {
            let fd = FdConfig::new(proto, ms(500), Duration::ZERO);
            let mut sim = Sim::new(SimConfig { n, fd, net: small_jitter(), start: StartMode::default(), seed: 3 });
            sim.run_until(Duration::from_secs(120));
            assert!(sim.records().is_empty(), "{proto} n={n}: {:?}", &sim.records()[..3.min(sim.records().len())]);
            let st = sim.stats();
            assert!(st.gossips >= n as u64 * 239, "{proto} n={n}: only {} gossips", st.gossips);
            assert_eq!((st.lost, st.to_crashed, st.pings), (0, 0, 0));
            assert!(st.delivered + st.before_start <= st.sent);
        }
    }
}

fn fingerprint(seed: u64) -> (Vec<p2pmpi_sim::Record>, p2pmpi_sim::NetStats, Vec<u64>) {
    let fd = FdConfig::new(Protocol::Dbrr, ms(500), Duration::ZERO);
    let net = NetConfig::constant(ms(2)).with_jitter(Jitter::Pareto { mean: ms(100), shape: 1.5 });
    let mut sim = Sim::new(SimConfig { n: 24, fd, net, start: StartMode::default(), seed });
    sim.crash_at(5, Duration::from_secs(10));
    sim.crash_at(17, Duration::from_millis(12_345));
    sim.run_until(Duration::from_secs(40));
    let hb = sim.detector(0).unwrap().heartbeats().to_vec();
    (sim.records().to_vec(), sim.stats(), hb)
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let a = fingerprint(11);
    let b = fingerprint(11);
    assert_eq!(a, b);
    let c = fingerprint(12);
    assert_ne!(a.1, c.1, "another seed should give other delays");
    // And an experiment is deterministic whatever the thread count.
    let mut p = params(StartMode::default(), 2);
    p.sizes = vec![8, 16];
    let one = p2pmpi_sim::detection::run(&p);
    p.threads = 3;
    let three = p2pmpi_sim::detection::run(&p);
    let key = |rows: &[p2pmpi_sim::detection::Row]| {
        rows.iter().map(|r| (r.protocol, r.n, r.mean.to_bits(), r.last_max.to_bits())).collect::<Vec<_>>()
    };
    assert_eq!(key(&one), key(&three));
}

/// Several processes crash at the same instant: every survivor confirms every one of them,
/// within the bound, and no survivor is declared dead.
#[test]
fn several_simultaneous_crashes_are_all_detected() {
    for proto in [Protocol::Brr, Protocol::Dbrr] {
        let n = 32;
        let fd = FdConfig::new(proto, ms(500), Duration::ZERO);
        let mut sim = Sim::new(SimConfig { n, fd, net: small_jitter(), start: StartMode::Aligned, seed: 5 });
        let crash_at = ms(9_250);
        let victims = [0usize, 1, 2, 13, 30];
        for &v in &victims {
            sim.crash_at(v, crash_at);
        }
        let done = sim.run_until_detected(crash_at + fd.detection_bound(n) * 2);
        assert!(done.is_some(), "{proto}: not every crash was confirmed everywhere");
        for &v in &victims {
            for (i, t) in sim.confirmations_of(v).into_iter().enumerate() {
                if victims.contains(&i) {
                    continue;
                }
                let t = t.unwrap_or_else(|| panic!("{proto}: {i} never confirmed {v}"));
                assert!(t - crash_at <= fd.detection_bound(n), "{proto}: {i} confirmed {v} after {:?}", t - crash_at);
            }
        }
        let fe = sim.false_events();
        assert_eq!(fe.failures, 0, "{proto}: a survivor was declared dead");
        for i in (0..n).filter(|i| !victims.contains(i)) {
            let d = sim.detector(i).unwrap();
            assert_eq!(d.dead().collect::<Vec<_>>(), victims.to_vec(), "{proto}: view of {i}");
        }
    }
}

/// FM §5.2's example: with BRR on 4 processes, the failure of 0 and 1 (both sources of 2)
/// leaves 2 without gossip, so 2 suspects 3. The ping procedure saves it: 3 answers, and once
/// 3 has confirmed 0 and 1 dead its gossip skips them and reaches 2 (dead targets are
/// skipped to the next rank). No live process is declared dead.
#[test]
fn losing_all_sources_leads_to_suspicion_but_the_ping_refutes_it() {
    let fd = FdConfig::new(Protocol::Brr, ms(500), Duration::ZERO);
    let mut sim = Sim::new(SimConfig { n: 4, fd, net: small_jitter(), start: StartMode::Aligned, seed: 9 });
    sim.crash_at(0, ms(5_100));
    sim.crash_at(1, ms(5_100));
    sim.run_until(Duration::from_secs(60));
    let fe = sim.false_events();
    assert_eq!(fe.failures, 0, "{:?}", sim.records());
    for i in [2, 3] {
        let d = sim.detector(i).unwrap();
        assert_eq!(d.status(0), Status::Dead);
        assert_eq!(d.status(1), Status::Dead);
        assert_ne!(d.status(5 - i), Status::Dead, "{i} declared its live peer dead");
    }
    let suspected_3 = sim.records().iter().any(|r| r.observer == 2 && r.event == Event::Suspected(3));
    let refuted_3 = sim.records().iter().any(|r| r.observer == 2 && r.event == Event::Refuted(3));
    assert!(suspected_3, "2 lost both its sources and should have suspected 3: {:?}", sim.records());
    assert!(refuted_3, "3 answered the ping");
}

/// The Monte-Carlo estimate for BRR at n = 4 agrees with the exact value of FM §5.2.
#[test]
fn monte_carlo_matches_the_exact_brr_value_for_four_processes() {
    let f = 0.05;
    let exact = exact_detector_failure(Protocol::Brr, 4, f);
    assert!((exact - 0.0095).abs() < 5e-5, "{exact}");
    assert!((p_brr4(f) - exact).abs() < 1e-12);
    let trials = 1_000_000;
    let (fails, _) = crude(Protocol::Brr, 4, f, trials, 2024);
    let est = fails as f64 / trials as f64;
    let sigma = (exact * (1.0 - exact) / trials as f64).sqrt();
    assert!((est - exact).abs() < 5.0 * sigma, "crude {est} vs exact {exact} (σ = {sigma})");
    let (est, se) = klm(Protocol::Brr, 4, f, false, 50_000, 2024).estimate();
    assert!((est - exact).abs() < 5.0 * se + 1e-9, "conditional {est} ± {se} vs exact {exact}");
    // DBRR keeps two-way links: 20 times more robust at n = 4.
    assert!(exact_detector_failure(Protocol::Dbrr, 4, f) < exact / 15.0);
}

/// Lost messages (UDP) and a heavy tail: the detector still confirms the crash.
#[test]
fn a_crash_is_detected_despite_message_loss() {
    let fd = FdConfig::new(Protocol::Dbrr, ms(500), Duration::ZERO);
    let mut net = small_jitter();
    net.loss = 0.05;
    let mut sim = Sim::new(SimConfig { n: 16, fd, net, start: StartMode::default(), seed: 4 });
    sim.crash_at(7, ms(10_300));
    let done = sim.run_until_detected(ms(10_300) + fd.detection_bound(16) * 3);
    assert!(done.is_some());
    assert!(sim.stats().lost > 0);
}
