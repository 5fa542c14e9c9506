//! How much replication: the failure probability of a replicated application and the
//! replication degree that minimises it (SPEC §11, chapter §4.5, FM §3, thesis §4.5).
//!
//! # The model of the seeds
//!
//! Hosts fail independently and equiprobably. A host fails before `t` with the Weibull
//! probability of chapter equation (1) ([`Weibull::failure`]), `λ > 0` the failure rate and
//! `δ > 0` the shape (`δ = 1`: exponential, constant rate):
//!
//! ```text
//! f(t) = 1 − exp(−(λt)^δ)
//! ```
//!
//! An application of `p` processes fails as soon as one process fails ([`p_app`]); replicated
//! `r` times, it fails when all `r` copies of some process failed (chapter equation (2),
//! [`p_app_replicated`]):
//!
//! ```text
//! P_app(p)    = 1 − (1 − f)^p
//! P_app(p, r) = 1 − (1 − f^r)^p
//! ```
//!
//! With `f = 0.05` per host, `p = 128` processes fail with probability 99 % without
//! replication and 27 % with `r = 2` (FM figure 1, thesis §4.5); `P_app(2, 2) = 0.005`
//! (FM §5.2). The seeds write "99 %" for `1 − 0.95^128 = 0.9986`: the percentage truncated,
//! not rounded.
//!
//! When `f` is a fixed figure (FM §3: "the probability that a host fails during a chosen time
//! unit") more replicas always help. But replication lengthens the run, so each host is
//! exposed longer: chapter §4.5 models the duration with Amdahl's law and an overhead linear
//! in `r`, substitutes it for `t` in `f(t)`, and finds `P_app(p, r)` convex in `r` with an
//! optimum (figure 10: `p = 10`, `δ = 1`, `λ = 0.1`, sequential time 10 s, optimum `r ≈ 7`).
//!
//! # The duration (Amdahl's law, overhead linear in r)
//!
//! The chapter names the ingredients — estimated sequential time `S`, parallel portion `α`,
//! number of processes `p`, an overhead linear in `r` — and leaves the formula to its
//! reference 25 (Genaud, Jeannot, Rattanapoka, IJPP 2009). This module uses ([`Amdahl::duration`]):
//!
//! ```text
//! T(p, r) = S·((1 − α) + α/p) · (1 + γ·(r − 1))
//! ```
//!
//! Amdahl's time on `p` processes, `t₁ = S·((1 − α) + α/p)`, stretched by `γ·t₁` per extra
//! copy. Chapter §4.4 measures the replicated run as "a bit less than `r·t₁`" and takes
//! `r·t₁` as the realistic upper bound that feeds the model: that is `γ = 1`, the default.
//! Figure 10 gives no parallel portion; `α = 1` (the default) is the value that reproduces it.
//! Then `T(10, r) = r` seconds, and since `P_app` grows with `f^r`, the optimum minimises
//! `r·ln(1 − e^{−λ r t₁})`, whose continuous minimum is where `f(T) = 1/2`, i.e.
//! `r* = ln 2 / (λ·t₁) = 10·ln 2 ≈ 6.93`: the best integer degree is `r = 7`, with
//! `P_app(10, 7) ≈ 0.079` (`r = 6`: 0.081, `r = 8`: 0.081). With `α = 0.9`, `t₁ = 1.9 s` and the
//! optimum falls to `r = 4`, so the figure's "≈ 7" pins `α = 1`.
//!
//! The seeds' formulas count all `p` processes as replicated, although P2P-MPI does not
//! replicate rank 0 (it runs on the submitter, whose failure is fatal anyway); so does this
//! module.
//!
//! [`advise`] tabulates `r = 1..=max_r` and picks the degree of least failure probability.
//! [`checkpoints`] adds checkpoints: rebirth of replicas, restarts, and the interval.

use std::fmt;

pub mod checkpoints;

/// Weibull host failures: the probability that a host fails before `t` is
/// `f(t) = 1 − exp(−(λt)^δ)` (chapter equation (1), after Nurmi et al.).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weibull {
    /// Failure rate λ > 0, per unit of time (per second when durations are in seconds).
    pub lambda: f64,
    /// Shape δ > 0; δ < 1 (rate decreasing with time) is what traces show, δ = 1 is exponential.
    pub delta: f64,
}

impl Weibull {
    /// A Weibull distribution, checking `λ > 0` and `δ > 0` (both finite).
    pub fn new(lambda: f64, delta: f64) -> Result<Weibull, AdvisorError> {
        if !(lambda.is_finite() && lambda > 0.0) {
            return Err(AdvisorError::Lambda(lambda));
        }
        if !(delta.is_finite() && delta > 0.0) {
            return Err(AdvisorError::Delta(delta));
        }
        Ok(Weibull { lambda, delta })
    }

    /// `f(t) = 1 − exp(−(λt)^δ)`, the probability that a host fails before `t ≥ 0`.
    pub fn failure(&self, t: f64) -> f64 {
        weibull_failure(self.lambda, self.delta, t)
    }
}

/// `f(t) = 1 − exp(−(λt)^δ)` (chapter equation (1)); computed as `−expm1(−(λt)^δ)` so that
/// small probabilities keep their precision. `t ≤ 0` gives 0.
pub fn weibull_failure(lambda: f64, delta: f64, t: f64) -> f64 {
    if t <= 0.0 {
        return 0.0;
    }
    -(-(lambda * t).powf(delta)).exp_m1()
}

/// `P_app(p) = 1 − (1 − f)^p`: the probability that an application of `p` processes without
/// replication fails, each host failing with probability `f`.
pub fn p_app(p: u32, f: f64) -> f64 {
    p_app_replicated(p, 1, f)
}

/// `P_app(p, r) = 1 − (1 − f^r)^p` (chapter equation (2)): `p` processes, each with `r`
/// copies on distinct hosts; the application fails when all copies of some process failed.
/// Computed as `−expm1(p·ln(1 − f^r))` for precision when `f^r` is tiny.
pub fn p_app_replicated(p: u32, r: u32, f: f64) -> f64 {
    let all_copies = f.powi(r as i32);
    if all_copies >= 1.0 {
        return if p == 0 { 0.0 } else { 1.0 };
    }
    -(f64::from(p) * (-all_copies).ln_1p()).exp_m1()
}

/// The duration model of chapter §4.5: Amdahl's law, with an overhead linear in `r`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Amdahl {
    /// Estimated sequential time `S` (same unit as 1/λ; seconds in figure 10).
    pub seq_time: f64,
    /// Parallel portion `α ∈ [0, 1]` of the program; 1 reproduces figure 10.
    pub parallel_fraction: f64,
    /// Overhead `γ ≥ 0` of each extra copy, as a fraction of the unreplicated time `t₁`;
    /// 1 (`T = r·t₁`, the upper bound of chapter §4.4) reproduces figure 10.
    pub replica_overhead: f64,
}

impl Amdahl {
    /// Figure 10's parameters for a sequential time `S`: `α = 1`, `γ = 1`.
    pub fn figure_10(seq_time: f64) -> Amdahl {
        Amdahl { seq_time, parallel_fraction: 1.0, replica_overhead: 1.0 }
    }

    /// A duration model, checking `S > 0`, `α ∈ [0, 1]`, `γ ≥ 0` (all finite).
    pub fn new(seq_time: f64, parallel_fraction: f64, replica_overhead: f64) -> Result<Amdahl, AdvisorError> {
        if !(seq_time.is_finite() && seq_time > 0.0) {
            return Err(AdvisorError::SeqTime(seq_time));
        }
        if !(0.0..=1.0).contains(&parallel_fraction) {
            return Err(AdvisorError::ParallelFraction(parallel_fraction));
        }
        if !(replica_overhead.is_finite() && replica_overhead >= 0.0) {
            return Err(AdvisorError::ReplicaOverhead(replica_overhead));
        }
        Ok(Amdahl { seq_time, parallel_fraction, replica_overhead })
    }

    /// Amdahl's time on `p` processes without replication: `t₁ = S·((1 − α) + α/p)`.
    pub fn unreplicated(&self, p: u32) -> f64 {
        let a = self.parallel_fraction;
        self.seq_time * ((1.0 - a) + a / f64::from(p.max(1)))
    }

    /// `T(p, r) = S·((1 − α) + α/p)·(1 + γ·(r − 1))`.
    pub fn duration(&self, p: u32, r: u32) -> f64 {
        self.unreplicated(p) * (1.0 + self.replica_overhead * f64::from(r.saturating_sub(1)))
    }
}

/// Where the per-host failure probability comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HostModel {
    /// A fixed `f`, the same whatever `r` (FM §3; `f` may be a Weibull `f(t)` at a chosen `t`).
    Fixed(f64),
    /// `f = f(T(p, r))`: Weibull failures over the Amdahl duration (chapter §4.5, figure 10).
    Weibull {
        /// The host failure distribution.
        weibull: Weibull,
        /// The duration of the run.
        duration: Amdahl,
    },
}

/// One replication degree of an [`Advice`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Row {
    /// The replication degree (1: no replication).
    pub r: u32,
    /// `T(p, r)` when the duration model is used.
    pub duration: Option<f64>,
    /// The per-host failure probability `f` (for `T(p, r)` with the duration model).
    pub f: f64,
    /// `P_app(p, r) = 1 − (1 − f^r)^p`.
    pub p_app: f64,
}

/// The failure probability for `r = 1..=max_r` and the best degree.
#[derive(Debug, Clone, PartialEq)]
pub struct Advice {
    /// The number of processes `p`.
    pub p: u32,
    /// One row per degree, `rows[i].r == i + 1`.
    pub rows: Vec<Row>,
    /// The degree of least `P_app` (the smallest such degree on ties: fewer hosts, shorter run).
    pub best: u32,
}

impl Advice {
    /// The row of the best degree.
    pub fn best_row(&self) -> &Row {
        &self.rows[self.best as usize - 1]
    }
}

/// Invalid advisor inputs; each names the parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AdvisorError {
    /// The number of processes must be at least 1.
    Processes,
    /// The largest degree tried must be at least 1.
    MaxR,
    /// A failure probability outside [0, 1].
    Probability(f64),
    /// A failure rate λ that is not > 0.
    Lambda(f64),
    /// A Weibull shape δ that is not > 0.
    Delta(f64),
    /// A sequential time that is not > 0.
    SeqTime(f64),
    /// A parallel fraction outside [0, 1].
    ParallelFraction(f64),
    /// A replica overhead that is negative.
    ReplicaOverhead(f64),
}

impl fmt::Display for AdvisorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AdvisorError::Processes => write!(f, "the number of processes p must be at least 1"),
            AdvisorError::MaxR => write!(f, "the largest replication degree must be at least 1"),
            AdvisorError::Probability(x) => write!(f, "failure probability f = {x} is not in [0, 1]"),
            AdvisorError::Lambda(x) => write!(f, "failure rate λ = {x} must be > 0"),
            AdvisorError::Delta(x) => write!(f, "Weibull shape δ = {x} must be > 0"),
            AdvisorError::SeqTime(x) => write!(f, "sequential time S = {x} must be > 0"),
            AdvisorError::ParallelFraction(x) => write!(f, "parallel fraction α = {x} is not in [0, 1]"),
            AdvisorError::ReplicaOverhead(x) => write!(f, "replica overhead γ = {x} must be ≥ 0"),
        }
    }
}

impl std::error::Error for AdvisorError {}

/// `P_app(p, r)` for `r = 1..=max_r` under `model`, and the degree that minimises it.
pub fn advise(p: u32, model: &HostModel, max_r: u32) -> Result<Advice, AdvisorError> {
    if p == 0 {
        return Err(AdvisorError::Processes);
    }
    if max_r == 0 {
        return Err(AdvisorError::MaxR);
    }
    match *model {
        HostModel::Fixed(f) if !(0.0..=1.0).contains(&f) => return Err(AdvisorError::Probability(f)),
        HostModel::Fixed(_) => {}
        HostModel::Weibull { weibull, duration } => {
            Weibull::new(weibull.lambda, weibull.delta)?;
            Amdahl::new(duration.seq_time, duration.parallel_fraction, duration.replica_overhead)?;
        }
    }
    let rows: Vec<Row> = (1..=max_r)
        .map(|r| {
            let (duration, f) = match *model {
                HostModel::Fixed(f) => (None, f),
                HostModel::Weibull { weibull, duration } => {
                    let t = duration.duration(p, r);
                    (Some(t), weibull.failure(t))
                }
            };
            Row { r, duration, f, p_app: p_app_replicated(p, r, f) }
        })
        .collect();
    let best = rows.iter().fold(&rows[0], |best, row| if row.p_app < best.p_app { row } else { best }).r;
    Ok(Advice { p, rows, best })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64, eps: f64) -> bool {
        (a - b).abs() <= eps
    }

    #[test]
    fn weibull_is_equation_1() {
        let w = Weibull::new(0.1, 1.0).unwrap();
        assert_eq!(w.failure(0.0), 0.0);
        assert!(close(w.failure(10.0), 1.0 - (-1.0f64).exp(), 1e-15));
        // δ = 1 is the exponential distribution.
        assert!(close(w.failure(3.0), 1.0 - (-0.3f64).exp(), 1e-15));
        // δ < 1: f(t) = 1 − exp(−(λt)^δ).
        assert!(close(weibull_failure(0.01, 0.5, 100.0), 1.0 - (-1.0f64).exp(), 1e-15));
        assert!(close(weibull_failure(0.01, 0.5, 25.0), 1.0 - (-0.5f64).exp(), 1e-15));
        assert!(Weibull::new(0.0, 1.0).is_err());
        assert!(Weibull::new(-0.1, 1.0).is_err());
        assert!(Weibull::new(0.1, 0.0).is_err());
        assert!(Weibull::new(f64::NAN, 1.0).is_err());
    }

    #[test]
    fn seeds_figures_for_128_processes() {
        // FM §3 / thesis §4.5: "a 128 processes MPI application with a replication degree of
        // only 2 reduces the failure probability from 99% to 27%" (f = 0.05).
        let without = p_app(128, 0.05);
        assert_eq!((without * 100.0).floor(), 99.0, "{without}");
        assert!(close(without, 1.0 - 0.95f64.powi(128), 1e-12));
        assert!(close(without, 0.9986, 5e-5), "{without}");
        let with = p_app_replicated(128, 2, 0.05);
        assert_eq!(format!("{with:.2}"), "0.27");
        assert!(close(with, 0.2741, 5e-5), "{with}");
        assert_eq!(p_app_replicated(128, 1, 0.05), without);
    }

    #[test]
    fn seeds_figure_for_two_processes_two_copies() {
        // FM §5.2: P_app(2, 2) = 0.005, exactly 1 − (1 − 0.05²)² = 0.00499375.
        let x = p_app_replicated(2, 2, 0.05);
        assert!(close(x, 0.004_993_75, 1e-15), "{x}");
        assert_eq!(format!("{x:.3}"), "0.005");
    }

    #[test]
    fn duration_is_amdahl_with_linear_overhead() {
        let m = Amdahl::new(100.0, 0.8, 0.5).unwrap();
        // t₁ = 100·(0.2 + 0.8/4) = 40; T(4, 3) = 40·(1 + 0.5·2) = 80.
        assert!(close(m.unreplicated(4), 40.0, 1e-12));
        assert!(close(m.duration(4, 1), 40.0, 1e-12));
        assert!(close(m.duration(4, 3), 80.0, 1e-12));
        // Figure 10: S = 10 s, p = 10, α = γ = 1 → T(10, r) = r seconds.
        let fig = Amdahl::figure_10(10.0);
        for r in 1..=10 {
            assert!(close(fig.duration(10, r), f64::from(r), 1e-12));
        }
        assert!(Amdahl::new(0.0, 1.0, 1.0).is_err());
        assert!(Amdahl::new(10.0, 1.5, 1.0).is_err());
        assert!(Amdahl::new(10.0, 1.0, -1.0).is_err());
    }

    #[test]
    fn figure_10_optimum_is_7() {
        // P_app(10, r), δ = 1, λ = 0.1, sequential time 10 s: "reaches a minimum for r ≈ 7".
        let model = HostModel::Weibull { weibull: Weibull::new(0.1, 1.0).unwrap(), duration: Amdahl::figure_10(10.0) };
        let a = advise(10, &model, 10).unwrap();
        assert_eq!(a.best, 7);
        let best = a.best_row();
        assert_eq!(best.duration, Some(7.0));
        assert!(close(best.f, 1.0 - (-0.7f64).exp(), 1e-15));
        assert!(close(best.p_app, 0.0790, 5e-5), "{}", best.p_app);
        // Quickly decreasing, then increasing: convex over r.
        let p: Vec<f64> = a.rows.iter().map(|row| row.p_app).collect();
        assert!(close(p[0], 0.6321, 5e-5), "{}", p[0]);
        assert!(close(p[1], 0.2840, 5e-5), "{}", p[1]);
        for w in p.windows(3) {
            assert!(w[0] + w[2] >= 2.0 * w[1], "not convex: {p:?}");
        }
        assert!(p[..7].windows(2).all(|w| w[1] < w[0]) && p[6..].windows(2).all(|w| w[1] > w[0]), "{p:?}");
        // The continuous optimum is where f(T) = 1/2: r* = ln 2 / (λ·t₁) = 10 ln 2.
        let r_star = std::f64::consts::LN_2 / (0.1 * 1.0);
        assert!(close(r_star, 6.93, 0.005) && r_star.round() == 7.0);
        // A parallel portion of 0.9 would move the optimum to 4: α = 1 is what the figure uses.
        let model = HostModel::Weibull {
            weibull: Weibull::new(0.1, 1.0).unwrap(),
            duration: Amdahl::new(10.0, 0.9, 1.0).unwrap(),
        };
        assert_eq!(advise(10, &model, 10).unwrap().best, 4);
    }

    #[test]
    fn fixed_f_prefers_most_replicas_and_ties_pick_the_fewest() {
        let a = advise(128, &HostModel::Fixed(0.05), 8).unwrap();
        assert_eq!(a.best, 8);
        assert_eq!(a.rows.len(), 8);
        assert!(a.rows.iter().all(|row| row.duration.is_none() && row.f == 0.05));
        assert_eq!(advise(128, &HostModel::Fixed(0.0), 8).unwrap().best, 1);
        assert_eq!(advise(128, &HostModel::Fixed(1.0), 8).unwrap().best, 1);
        assert_eq!(advise(128, &HostModel::Fixed(1.0), 8).unwrap().rows[3].p_app, 1.0);
    }

    #[test]
    fn bad_inputs_are_named() {
        assert_eq!(advise(0, &HostModel::Fixed(0.05), 8), Err(AdvisorError::Processes));
        assert_eq!(advise(4, &HostModel::Fixed(0.05), 0), Err(AdvisorError::MaxR));
        assert_eq!(advise(4, &HostModel::Fixed(1.5), 8), Err(AdvisorError::Probability(1.5)));
        assert!(advise(4, &HostModel::Fixed(f64::NAN), 8).is_err());
        let bad =
            HostModel::Weibull { weibull: Weibull { lambda: -1.0, delta: 1.0 }, duration: Amdahl::figure_10(1.0) };
        assert_eq!(advise(4, &bad, 8), Err(AdvisorError::Lambda(-1.0)));
        assert!(AdvisorError::Lambda(-1.0).to_string().contains("λ"));
    }

    #[test]
    fn tiny_probabilities_keep_their_precision() {
        // f^r = 1e-20: the naive 1 − (1 − f^r)^p would round to 0.
        let x = p_app_replicated(1000, 2, 1e-10);
        assert!(close(x / 1e-17, 1.0, 1e-9), "{x}");
        assert!(close(weibull_failure(1e-12, 1.0, 1.0) / 1e-12, 1.0, 1e-9));
    }

    proptest! {
        #[test]
        fn p_app_is_monotone_in_f(p in 1u32..1000, r in 1u32..10, f1 in 0.0f64..=1.0, f2 in 0.0f64..=1.0) {
            let (lo, hi) = if f1 <= f2 { (f1, f2) } else { (f2, f1) };
            let (a, b) = (p_app_replicated(p, r, lo), p_app_replicated(p, r, hi));
            prop_assert!((0.0..=1.0).contains(&a) && (0.0..=1.0).contains(&b));
            prop_assert!(a <= b, "P_app({}, {}) at f={}: {} > at f={}: {}", p, r, lo, a, hi, b);
        }

        #[test]
        fn p_app_grows_with_p_and_falls_with_r(p in 1u32..1000, r in 1u32..10, f in 0.0f64..=1.0) {
            let x = p_app_replicated(p, r, f);
            prop_assert!(x <= p_app_replicated(p + 1, r, f));
            prop_assert!(p_app_replicated(p, r + 1, f) <= x);
            // With f fixed, replication never hurts: P_app(p, r) ≤ P_app(p).
            prop_assert!(x <= p_app(p, f));
        }

        #[test]
        fn weibull_is_a_distribution(
            lambda in 1e-6f64..10.0, delta in 0.1f64..5.0, t1 in 0.0f64..1e4, t2 in 0.0f64..1e4,
        ) {
            let (lo, hi) = if t1 <= t2 { (t1, t2) } else { (t2, t1) };
            let (a, b) = (weibull_failure(lambda, delta, lo), weibull_failure(lambda, delta, hi));
            prop_assert!((0.0..=1.0).contains(&a) && (0.0..=1.0).contains(&b));
            prop_assert!(a <= b);
        }

        #[test]
        fn best_is_the_least_failure_probability(
            p in 1u32..500, lambda in 1e-4f64..1.0, delta in 0.2f64..3.0,
            s in 0.1f64..1000.0, alpha in 0.0f64..=1.0, gamma in 0.0f64..2.0, max_r in 1u32..16,
        ) {
            let model = HostModel::Weibull {
                weibull: Weibull::new(lambda, delta).unwrap(),
                duration: Amdahl::new(s, alpha, gamma).unwrap(),
            };
            let a = advise(p, &model, max_r).unwrap();
            prop_assert_eq!(a.rows.len(), max_r as usize);
            let best = a.best_row().p_app;
            for row in &a.rows {
                prop_assert!(best <= row.p_app);
                prop_assert!(row.r >= a.best || row.p_app > best);
                // A longer run exposes each host longer.
                prop_assert!(row.duration.unwrap() >= a.rows[0].duration.unwrap());
            }
        }
    }
}
