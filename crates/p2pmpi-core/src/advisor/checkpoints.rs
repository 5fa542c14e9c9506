//! How often to checkpoint, and what checkpoints buy a replicated job (issue 41).
//!
//! # The model
//!
//! A job of `p` ranks, each with `r` replicas on distinct hosts, needs `W` seconds of
//! failure-free computation. Every `τ` seconds of work it stops for a checkpoint of cost `C`
//! (the last stretch needs none). Hosts fail at the rate `1/M` (`M`: the mean time between
//! failures of one host; for a Weibull of shape `δ ≠ 1` this is the long-run rate of a host
//! and its replacements, the simulator draws the Weibull itself). A segment of work and its
//! checkpoint, `S = τ + C` long, starts with every rank at degree `r` (rebirth restored it at
//! the previous checkpoint) and is interrupted when some rank loses all its replicas before it
//! ends:
//!
//! ```text
//! G(S) = 1 − (1 − F(S)^r)^p,   F(S) = 1 − exp(−S/M)
//! ```
//!
//! Three ways to run:
//!
//! * **replication only**: no checkpoint; the job finishes with probability `1 − G(W)` (the
//!   seeds' `P_app`);
//! * **rebirth**: checkpoints restore the degree; the job finishes if no segment is
//!   interrupted, `Π (1 − G(Sᵢ))`;
//! * **rebirth and restart**: an interrupted segment costs the time lost until the
//!   interruption, `L(S) = E[T | T < S] = ∫₀^S (1 − G(t)/G(S)) dt`, and a restart of cost `R`,
//!   and is tried again (`R + S` long, failures during the restart count); its expected time is
//!
//!   ```text
//!   E_seg(S) = S + G(S)·(L(S) + R + S' − S),   S' = R + S + G(R+S)/(1 − G(R+S))·L(R+S)
//!   ```
//!
//!   and the job finishes unless the first segment is interrupted (no checkpoint to restart
//!   from yet) or the interruptions exceed the budget of restarts (their number's
//!   distribution is computed exactly, segment by segment).
//!
//! # The interval
//!
//! Young's first-order interval `τ = √(2·C·M_job)` comes from minimising the overhead
//! `C/τ + τ/(2·M_job)`. With `r` replicas and rebirth, a segment of length `τ` is interrupted
//! with probability about `p·(τ/M)^r`, and the interruption comes late in it (at `r/(r+1)` of
//! it): minimising `C/τ + p·(τ/M)^r·r/(r+1)` gives the anchor
//!
//! ```text
//! τ₁ = (C·M^r·(r+1) / (p·r²))^(1/(r+1))
//! ```
//!
//! which is Young's `√(2·C·M/p)` at `r = 1`. [`IntervalAdvice::interval`] then minimises the
//! model's expected run time around `τ₁` (a golden-section search on `ln τ`), which is what
//! Daly's higher-order corrections do for `r = 1` (restarts and failures during checkpoints
//! count).

use super::p_app_replicated;

/// A replicated job with checkpoints (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckpointModel {
    /// Ranks `p`.
    pub p: u32,
    /// Replicas per rank `r`.
    pub r: u32,
    /// Mean time between failures of one host `M` (seconds).
    pub mtbf: f64,
    /// Failure-free computation `W` (seconds).
    pub work: f64,
    /// Cost of one checkpoint `C` (seconds).
    pub cost: f64,
    /// Cost of a restart `R` (seconds): booking, restoring.
    pub restart: f64,
    /// Restarts allowed.
    pub max_restarts: u32,
}

/// The model's answers for one degree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IntervalAdvice {
    /// The first-order interval `τ₁` (the anchor).
    pub anchor: f64,
    /// The interval of least expected run time.
    pub interval: f64,
    /// The expected run time at [`interval`](Self::interval), with rebirth and restarts.
    pub expected: f64,
    /// Probability that the job finishes without checkpoints (replication only).
    pub finish_replication: f64,
    /// With checkpoints and rebirth, no restart.
    pub finish_rebirth: f64,
    /// With checkpoints, rebirth and at most `max_restarts` restarts.
    pub finish_restart: f64,
}

impl CheckpointModel {
    fn valid(&self) -> bool {
        let pos = |x: f64| x.is_finite() && x > 0.0;
        self.p > 0
            && self.r > 0
            && pos(self.mtbf)
            && pos(self.work)
            && pos(self.cost)
            && self.restart.is_finite()
            && self.restart >= 0.0
    }

    /// `G(s)`: some rank loses all its replicas within `s` seconds of full degree.
    pub fn interrupted(&self, s: f64) -> f64 {
        let f = -(-s / self.mtbf).exp_m1();
        p_app_replicated(self.p, self.r, f)
    }

    /// `L(s) = E[T | T < s]`, the time lost by an interrupted segment of length `s`.
    pub fn lost(&self, s: f64) -> f64 {
        let g = self.interrupted(s);
        if g <= 0.0 {
            return 0.0;
        }
        // Simpson's rule on 64 intervals.
        let n = 64;
        let h = s / f64::from(n);
        let mut sum = 0.0;
        for i in 0..=n {
            let t = h * f64::from(i);
            let w = if i == 0 || i == n {
                1.0
            } else if i % 2 == 1 {
                4.0
            } else {
                2.0
            };
            sum += w * (1.0 - self.interrupted(t) / g);
        }
        sum * h / 3.0
    }

    /// The expected time of a segment `s` long, tried again after each interruption (each
    /// retry after a restart of cost `R`); and its probability of a first interruption.
    fn segment(&self, s: f64) -> (f64, f64) {
        let q1 = self.interrupted(s);
        let a = self.restart + s;
        let q2 = self.interrupted(a);
        if q2 >= 1.0 {
            return (f64::INFINITY, q1);
        }
        let retry = a + q2 / (1.0 - q2) * self.lost(a);
        (s * (1.0 - q1) + q1 * (self.lost(s) + retry), q1)
    }

    /// The segments of the run at interval `tau`: full ones (work `τ` and a checkpoint) and
    /// the last one (no checkpoint).
    fn segments(&self, tau: f64) -> (u64, f64) {
        let n = (self.work / tau).floor();
        let last = self.work - n * tau;
        if last <= self.work * 1e-9 {
            ((n as u64).saturating_sub(1), tau)
        } else {
            (n as u64, last)
        }
    }

    /// The expected run time with checkpoints every `tau` seconds of work, rebirth and
    /// restarts (without budget).
    pub fn expected_time(&self, tau: f64) -> f64 {
        let (full, last) = self.segments(tau);
        full as f64 * self.segment(tau + self.cost).0 + self.segment(last).0
    }

    /// The smooth form minimised: `(W/τ)·E_seg(τ + C)`.
    fn objective(&self, tau: f64) -> f64 {
        self.work / tau * self.segment(tau + self.cost).0
    }

    /// The probability of finishing with rebirth and no restart.
    pub fn finish_rebirth(&self, tau: f64) -> f64 {
        let (full, last) = self.segments(tau);
        let per = 1.0 - self.interrupted(tau + self.cost);
        per.powf(full as f64) * (1.0 - self.interrupted(last))
    }

    /// The probability that the interruptions stay within the budget of restarts.
    pub fn finish_restart(&self, tau: f64) -> f64 {
        let (full, last) = self.segments(tau);
        let n = self.max_restarts as usize;
        // d[k]: probability of k interruptions so far (k ≤ n; more is a failure). Before the
        // first checkpoint is complete there is nothing to restart from: the first segment's
        // interruption ends the job.
        let first = if full > 0 { tau + self.cost } else { last };
        let mut d = vec![0.0; n + 1];
        d[0] = 1.0 - self.interrupted(first);
        let add = |d: &mut Vec<f64>, s: f64| {
            let q1 = self.interrupted(s);
            let q2 = self.interrupted(self.restart + s);
            // One segment: 0 interruptions with 1 − q1, k ≥ 1 with q1·q2^(k−1)·(1 − q2).
            let mut a = 0.0; // Σ_{j<k} d[j]·q2^(k−1−j)
            for dk in d.iter_mut() {
                let was = *dk;
                *dk = was * (1.0 - q1) + q1 * (1.0 - q2) * a;
                a = a * q2 + was;
            }
        };
        for _ in 1..full.min(1_000_000) {
            add(&mut d, tau + self.cost);
        }
        if full > 0 {
            add(&mut d, last);
        }
        d.iter().sum::<f64>().clamp(0.0, 1.0)
    }

    /// The first-order interval `τ₁ = (C·M^r·(r+1)/(p·r²))^(1/(r+1))`.
    pub fn anchor(&self) -> f64 {
        let r = f64::from(self.r);
        // In logarithms: M^r overflows for long MTBFs and high degrees.
        let ln =
            (self.cost.ln() + r * self.mtbf.ln() + (r + 1.0).ln() - f64::from(self.p).ln() - 2.0 * r.ln()) / (r + 1.0);
        ln.exp()
    }

    /// The interval of least expected run time, searched around the anchor, and the figures
    /// at it. `None` for a model with a non-positive or non-finite parameter.
    pub fn advise(&self) -> Option<IntervalAdvice> {
        if !self.valid() {
            return None;
        }
        let anchor = self.anchor();
        let (mut lo, mut hi) = ((anchor / 30.0).ln(), (anchor * 30.0).min(self.work).max(anchor / 29.0).ln());
        let phi = (5f64.sqrt() - 1.0) / 2.0;
        let f = |x: f64| self.objective(x.exp());
        let (mut x1, mut x2) = (hi - phi * (hi - lo), lo + phi * (hi - lo));
        let (mut f1, mut f2) = (f(x1), f(x2));
        for _ in 0..80 {
            if f1 <= f2 {
                hi = x2;
                (x2, f2) = (x1, f1);
                x1 = hi - phi * (hi - lo);
                f1 = f(x1);
            } else {
                lo = x1;
                (x1, f1) = (x2, f2);
                x2 = lo + phi * (hi - lo);
                f2 = f(x2);
            }
        }
        let interval = ((lo + hi) / 2.0).exp();
        Some(IntervalAdvice {
            anchor,
            interval,
            expected: self.expected_time(interval),
            finish_replication: 1.0 - self.interrupted(self.work),
            finish_rebirth: self.finish_rebirth(interval),
            finish_restart: self.finish_restart(interval),
        })
    }
}

/// `Γ(x)` for `x > 0` (Lanczos, g = 7): the mean of a Weibull of shape `δ` and rate `λ` is
/// `Γ(1 + 1/δ)/λ`.
pub fn gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        return std::f64::consts::PI / ((std::f64::consts::PI * x).sin() * gamma(1.0 - x));
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    (2.0 * std::f64::consts::PI).sqrt() * t.powf(x + 0.5) * (-t).exp() * a
}

/// The Weibull rate `λ` whose mean is `mtbf` at shape `delta`: `Γ(1 + 1/δ)/M`.
pub fn rate_for_mtbf(mtbf: f64, delta: f64) -> f64 {
    gamma(1.0 + 1.0 / delta) / mtbf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(p: u32, r: u32) -> CheckpointModel {
        CheckpointModel { p, r, mtbf: 100_000.0, work: 86_400.0, cost: 60.0, restart: 60.0, max_restarts: 100 }
    }

    #[test]
    fn gamma_and_the_weibull_mean() {
        assert!((gamma(1.0) - 1.0).abs() < 1e-12);
        assert!((gamma(5.0) - 24.0).abs() < 1e-9);
        assert!((gamma(0.5) - std::f64::consts::PI.sqrt()).abs() < 1e-12);
        // Shape 1: exponential, λ = 1/M; shape 2: Γ(1.5) = √π/2.
        assert!((rate_for_mtbf(10.0, 1.0) - 0.1).abs() < 1e-12);
        assert!((rate_for_mtbf(1.0, 2.0) - std::f64::consts::PI.sqrt() / 2.0).abs() < 1e-12);
    }

    #[test]
    fn the_anchor_is_young_at_r_1_and_the_optimum_near_it() {
        let m = model(64, 1);
        let young = (2.0 * 60.0 * 100_000.0 / 64.0f64).sqrt();
        assert!((m.anchor() - young).abs() < 1e-9 * young, "{} vs {young}", m.anchor());
        let a = m.advise().unwrap();
        // Daly: the optimum is a little under Young's when restarts and failures in
        // checkpoints count, never far.
        assert!(a.interval < young && a.interval > 0.7 * young, "{a:?}");
        // 64 hosts of M = 100 000 s: one failure every 26 min, a 40 % overhead.
        assert!(a.expected > 1.3 * m.work && a.expected < 1.5 * m.work, "{a:?}");
        // Expected time is worse away from the optimum.
        assert!(m.expected_time(a.interval / 3.0) > a.expected && m.expected_time(a.interval * 3.0) > a.expected);
    }

    #[test]
    fn replicas_lengthen_the_interval_and_rebirth_and_restart_help() {
        let one = model(64, 1).advise().unwrap();
        let two = model(64, 2).advise().unwrap();
        let m2 = model(64, 2);
        assert!(two.interval > 3.0 * one.interval, "{one:?} {two:?}");
        assert!(two.expected < one.expected);
        // Replication only: the seeds' P_app with f over the whole run.
        let f = 1.0 - (-86_400.0f64 / 100_000.0).exp();
        assert!((two.finish_replication - (1.0 - p_app_replicated(64, 2, f))).abs() < 1e-12);
        assert!(two.finish_replication < two.finish_rebirth && two.finish_rebirth < two.finish_restart, "{two:?}");
        // What restarts cannot save: an interruption before the first checkpoint (1.9 %).
        assert!(two.finish_restart > 0.97, "{two:?}");
        let first = m2.interrupted(two.interval + 60.0);
        assert!((two.finish_restart - (1.0 - first)).abs() < 1e-3, "{two:?}");
        // Without replicas, rebirth does nothing: one segment interrupted is the end.
        // ... and a restart can save everything but an interruption before the first checkpoint.
        let first = model(64, 1).interrupted(one.interval + 60.0);
        // (25 % here; the budget of 100 restarts, about 70 expected, takes 1 % more).
        assert!(one.finish_rebirth < 1e-20, "{one:?}");
        assert!(one.finish_restart <= 1.0 - first && one.finish_restart > 1.0 - first - 0.02, "{one:?}");
    }

    #[test]
    fn the_restart_budget_is_counted() {
        let m = CheckpointModel { max_restarts: 0, ..model(64, 2) };
        let tau = 2000.0;
        assert!((m.finish_restart(tau) - m.finish_rebirth(tau)).abs() < 1e-12);
        let mut last = 0.0;
        for n in [0, 1, 5, 20, 200] {
            let x = CheckpointModel { max_restarts: n, ..m }.finish_restart(tau);
            assert!(x >= last && x <= 1.0, "{n}: {x}");
            last = x;
        }
        // The first segment's interruption is never undone.
        assert!((last - (1.0 - m.interrupted(tau + m.cost))).abs() < 1e-9, "{last}");
        assert!(CheckpointModel { cost: 0.0, ..m }.advise().is_none());
        assert!(CheckpointModel { mtbf: f64::NAN, ..m }.advise().is_none());
    }
}
