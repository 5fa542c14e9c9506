//! How often to checkpoint, and what checkpoints buy a replicated job (issue 41).
//!
//! # The model
//!
//! A job of `p` ranks, each with `r` replicas on distinct hosts, needs `W` seconds of
//! failure-free computation. Every `τ` seconds of work it stops for a checkpoint of cost `C`
//! (the last stretch needs none). Hosts fail at the rate `1/M` (`M`: the mean time between
//! failures of one host), or, for a Weibull lifetime of shape `δ ≠ 1`, as a host of the grid
//! renewed at each failure does at that point of the run ([`HostFailures`]: `F` below then
//! depends on where the segment starts too). A segment of work and its
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
    /// Weibull shape `δ` of a host's lifetime (1: exponential, the default; below 1: new hosts
    /// fail more often than old ones).
    pub shape: f64,
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

/// When a host in use fails: `fail(t, s)` is the probability that the host holding a process
/// at time `t` of the run fails before `t + s`.
///
/// Exponential lifetimes have no memory: `1 − exp(−s/M)` whatever `t`. A Weibull of shape
/// `δ ≠ 1` does: every host of the grid joined when the job started, and each failed host is
/// replaced by a new one (the simulator's grid), so what runs at `t` is the current host of a
/// renewal process started at 0, and
///
/// ```text
/// 1 − fail(t, s) = R̄(t + s) + ∫₀ᵗ R̄(t + s − u) dH(u)
/// ```
///
/// with `R̄` the survival of one lifetime and `H` the renewal function (`H = F + H ∗ F`,
/// computed by the Riemann–Stieltjes midpoint rule on a grid of 3 000 steps). A reborn replica
/// or a restarted rank takes such a host too. `fail` is tabulated once on a grid denser near 0
/// in both `t` and `s` (where `δ < 1` changes fastest) and interpolated.
#[derive(Debug, Clone)]
pub struct HostFailures {
    mtbf: f64,
    table: Option<AgeTable>,
}

#[derive(Debug, Clone)]
struct AgeTable {
    t_max: f64,
    s_max: f64,
    /// `fail` at `t_i = t_max·(i/NT)²`, `s_j = s_max·(j/NS)²`, row-major by `i`.
    fail: Vec<f64>,
}

const NT: usize = 64;
const NS: usize = 128;
const FINE: usize = 3000;

impl HostFailures {
    /// The law of a host of mean lifetime `mtbf` and shape `shape`, for times `t ≤ t_max` and
    /// spans `s ≤ s_max` (beyond them the nearest edge of the table is used).
    pub fn new(mtbf: f64, shape: f64, t_max: f64, s_max: f64) -> HostFailures {
        if (shape - 1.0).abs() < 1e-12 || !(shape > 0.0 && shape.is_finite()) {
            return HostFailures { mtbf, table: None };
        }
        let eta = mtbf / gamma(1.0 + 1.0 / shape);
        let survival = |x: f64| (-(x.max(0.0) / eta).powf(shape)).exp();
        let h = (t_max + s_max) / FINE as f64;
        let rbar: Vec<f64> = (0..=FINE).map(|k| survival(k as f64 * h)).collect();
        let rhalf: Vec<f64> = (0..FINE).map(|k| survival((k as f64 + 0.5) * h)).collect();
        // Renewal function on the grid: H_k (1 − ΔF₁/2) = F_k + ΔF₁·H_{k−1}/2
        //                                + Σ_{j≥2} ΔF_j (H_{k−j} + H_{k−j+1})/2.
        let df: Vec<f64> = (0..=FINE).map(|j| if j == 0 { 0.0 } else { rbar[j - 1] - rbar[j] }).collect();
        let mut big_h = vec![0.0f64; FINE + 1];
        for k in 1..=FINE {
            let mut acc = (1.0 - rbar[k]) + df[1] * big_h[k - 1] / 2.0;
            for j in 2..=k {
                acc += df[j] * (big_h[k - j] + big_h[k - j + 1]) / 2.0;
            }
            big_h[k] = acc / (1.0 - df[1] / 2.0);
        }
        let dh: Vec<f64> = (0..=FINE).map(|j| if j == 0 { 0.0 } else { big_h[j] - big_h[j - 1] }).collect();
        // 1 − fail at fine indices (k, m): R̄_{k+m} + Σ_{j=1..k} ΔH_j·R̄((k + m − j + ½)h).
        let stay = |k: usize, m: usize| {
            let mut q = rbar[(k + m).min(FINE)];
            for j in 1..=k {
                q += dh[j] * rhalf[(k + m - j).min(FINE - 1)];
            }
            q.min(1.0)
        };
        let mut fail = Vec::with_capacity((NT + 1) * (NS + 1));
        for i in 0..=NT {
            let t = t_max * (i as f64 / NT as f64).powi(2);
            let k = ((t / h).round() as usize).min(FINE);
            for j in 0..=NS {
                let s = s_max * (j as f64 / NS as f64).powi(2);
                let x = s / h;
                let m = (x.floor() as usize).min(FINE - k);
                let a = (x - m as f64).clamp(0.0, 1.0);
                let q = if m + 1 + k <= FINE { stay(k, m) * (1.0 - a) + stay(k, m + 1) * a } else { stay(k, m) };
                fail.push((1.0 - q).clamp(0.0, 1.0));
            }
        }
        HostFailures { mtbf, table: Some(AgeTable { t_max, s_max, fail }) }
    }

    /// The probability that the host holding a process at `t` fails before `t + s`.
    pub fn fail(&self, t: f64, s: f64) -> f64 {
        let Some(tab) = &self.table else {
            return -(-s / self.mtbf).exp_m1();
        };
        if s <= 0.0 {
            return 0.0;
        }
        // Grid coordinates: the square root undoes the quadratic spacing.
        let at = |x: f64, max: f64, n: usize| {
            let g = (x.clamp(0.0, max) / max).sqrt() * n as f64;
            let i = (g.floor() as usize).min(n - 1);
            (i, g - i as f64)
        };
        let (i, a) = at(t, tab.t_max, NT);
        let (j, b) = at(s, tab.s_max, NS);
        let v = |i: usize, j: usize| tab.fail[i * (NS + 1) + j];
        let lo = v(i, j) * (1.0 - b) + v(i, j + 1) * b;
        let hi = v(i + 1, j) * (1.0 - b) + v(i + 1, j + 1) * b;
        lo * (1.0 - a) + hi * a
    }
}

impl CheckpointModel {
    fn valid(&self) -> bool {
        let pos = |x: f64| x.is_finite() && x > 0.0;
        self.p > 0
            && self.r > 0
            && pos(self.mtbf)
            && pos(self.shape)
            && pos(self.work)
            && pos(self.cost)
            && self.restart.is_finite()
            && self.restart >= 0.0
    }

    /// The hosts' failures over this run (a table for `δ ≠ 1`: build it once and use the
    /// [`Run`]'s methods when evaluating many intervals).
    pub fn hosts(&self) -> HostFailures {
        let w = if self.work.is_finite() { self.work } else { 0.0 };
        HostFailures::new(self.mtbf, self.shape, 2.0 * w + self.restart, w + self.cost + self.restart)
    }

    /// The model with its hosts' law computed.
    pub fn run(&self) -> Run<'_> {
        Run { m: self, hosts: self.hosts() }
    }

    /// `G(s)` for the first segment: some rank loses all its replicas within `s` seconds of
    /// the job's start.
    pub fn interrupted(&self, s: f64) -> f64 {
        self.run().interrupted(0.0, s)
    }

    /// The expected run time with checkpoints every `tau` seconds of work, rebirth and
    /// restarts (without budget).
    pub fn expected_time(&self, tau: f64) -> f64 {
        self.run().expected_time(tau)
    }

    /// The probability of finishing with rebirth and no restart.
    pub fn finish_rebirth(&self, tau: f64) -> f64 {
        self.run().finish_rebirth(tau)
    }

    /// The probability that the interruptions stay within the budget of restarts.
    pub fn finish_restart(&self, tau: f64) -> f64 {
        self.run().finish_restart(tau)
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
        self.run().advise()
    }
}

/// A [`CheckpointModel`] with its hosts' law: segments start at their nominal times (the
/// `i`-th at `i·(τ + C)`; the time restarts add is not counted in the hosts' ages).
#[derive(Debug, Clone)]
pub struct Run<'a> {
    m: &'a CheckpointModel,
    hosts: HostFailures,
}

impl Run<'_> {
    /// `G(t, s)`: some rank loses all its replicas within `s` seconds of full degree from `t`.
    pub fn interrupted(&self, t: f64, s: f64) -> f64 {
        p_app_replicated(self.m.p, self.m.r, self.hosts.fail(t, s))
    }

    /// `L(t, s) = E[T | T < s]`, the time lost by an interrupted segment of length `s`.
    pub fn lost(&self, t: f64, s: f64) -> f64 {
        let g = self.interrupted(t, s);
        if g <= 0.0 {
            return 0.0;
        }
        // Simpson's rule on 64 intervals.
        let n = 64;
        let h = s / f64::from(n);
        let mut sum = 0.0;
        for i in 0..=n {
            let u = h * f64::from(i);
            let w = if i == 0 || i == n {
                1.0
            } else if i % 2 == 1 {
                4.0
            } else {
                2.0
            };
            sum += w * (1.0 - self.interrupted(t, u) / g);
        }
        sum * h / 3.0
    }

    /// The expected time of a segment `s` long from `t`, tried again after each interruption
    /// (each retry after a restart of cost `R`); and its probability of a first interruption.
    fn segment(&self, t: f64, s: f64) -> (f64, f64) {
        let q1 = self.interrupted(t, s);
        let a = self.m.restart + s;
        let q2 = self.interrupted(t, a);
        if q2 >= 1.0 {
            return (f64::INFINITY, q1);
        }
        let retry = a + q2 / (1.0 - q2) * self.lost(t, a);
        (s * (1.0 - q1) + q1 * (self.lost(t, s) + retry), q1)
    }

    /// The segments of the run at interval `tau`: full ones (work `τ` and a checkpoint) and
    /// the last one (no checkpoint).
    fn segments(&self, tau: f64) -> (u64, f64) {
        let work = self.m.work;
        let n = (work / tau).floor();
        let last = work - n * tau;
        if last <= work * 1e-9 {
            ((n as u64).saturating_sub(1), tau)
        } else {
            (n as u64, last)
        }
    }

    /// Where the `i`-th segment starts.
    fn start(&self, tau: f64, i: u64) -> f64 {
        i as f64 * (tau + self.m.cost)
    }

    /// The expected run time with checkpoints every `tau` seconds of work, rebirth and
    /// restarts (without budget).
    pub fn expected_time(&self, tau: f64) -> f64 {
        let (full, last) = self.segments(tau);
        if self.hosts.table.is_none() {
            return full as f64 * self.segment(0.0, tau + self.m.cost).0 + self.segment(0.0, last).0;
        }
        let sum: f64 = (0..full).map(|i| self.segment(self.start(tau, i), tau + self.m.cost).0).sum();
        sum + self.segment(self.start(tau, full), last).0
    }

    /// The smooth form minimised: the full segments' expected times, the last one counted by
    /// the fraction `W/τ − ⌊W/τ⌋` of a full one (`(W/τ)·E_seg(τ + C)` when the hosts have no
    /// memory).
    fn objective(&self, tau: f64) -> f64 {
        let s = tau + self.m.cost;
        let x = self.m.work / tau;
        if self.hosts.table.is_none() {
            return x * self.segment(0.0, s).0;
        }
        let n = x.floor() as u64;
        let sum: f64 = (0..n).map(|i| self.segment(self.start(tau, i), s).0).sum();
        sum + (x - n as f64) * self.segment(self.start(tau, n), s).0
    }

    /// The probability of finishing with rebirth and no restart.
    pub fn finish_rebirth(&self, tau: f64) -> f64 {
        let (full, last) = self.segments(tau);
        let s = tau + self.m.cost;
        let all = if self.hosts.table.is_none() {
            (1.0 - self.interrupted(0.0, s)).powf(full as f64)
        } else {
            (0..full).map(|i| (-self.interrupted(self.start(tau, i), s)).ln_1p()).sum::<f64>().exp()
        };
        all * (1.0 - self.interrupted(self.start(tau, full), last))
    }

    /// The probability that the interruptions stay within the budget of restarts.
    pub fn finish_restart(&self, tau: f64) -> f64 {
        let (full, last) = self.segments(tau);
        let n = self.m.max_restarts as usize;
        let s = tau + self.m.cost;
        // d[k]: probability of k interruptions so far (k ≤ n; more is a failure). Before the
        // first checkpoint is complete there is nothing to restart from: the first segment's
        // interruption ends the job.
        let first = if full > 0 { s } else { last };
        let mut d = vec![0.0; n + 1];
        d[0] = 1.0 - self.interrupted(0.0, first);
        let add = |d: &mut Vec<f64>, t: f64, s: f64| {
            let q1 = self.interrupted(t, s);
            let q2 = self.interrupted(t, self.m.restart + s);
            // One segment: 0 interruptions with 1 − q1, k ≥ 1 with q1·q2^(k−1)·(1 − q2).
            let mut a = 0.0; // Σ_{j<k} d[j]·q2^(k−1−j)
            for dk in d.iter_mut() {
                let was = *dk;
                *dk = was * (1.0 - q1) + q1 * (1.0 - q2) * a;
                a = a * q2 + was;
            }
        };
        for i in 1..full.min(1_000_000) {
            add(&mut d, self.start(tau, i), s);
        }
        if full > 0 {
            add(&mut d, self.start(tau, full), last);
        }
        d.iter().sum::<f64>().clamp(0.0, 1.0)
    }

    fn advise(&self) -> Option<IntervalAdvice> {
        let anchor = self.m.anchor();
        let (mut lo, mut hi) = ((anchor / 30.0).ln(), (anchor * 30.0).min(self.m.work).max(anchor / 29.0).ln());
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
            finish_replication: 1.0 - self.interrupted(0.0, self.m.work),
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
        CheckpointModel {
            p,
            r,
            mtbf: 100_000.0,
            shape: 1.0,
            work: 86_400.0,
            cost: 60.0,
            restart: 60.0,
            max_restarts: 100,
        }
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

    #[test]
    fn a_weibull_host_is_a_renewal_process() {
        let (m, w) = (100_000.0, 86_400.0);
        // Close to shape 1 the table gives the exponential's memoryless law at every t (within 2 %:
        // the table is interpolated).
        let near = HostFailures::new(m, 1.000_001, 2.0 * w, w);
        for (t, s) in [(0.0, 3000.0), (20_000.0, 3000.0), (150_000.0, 60_000.0), (5_000.0, 100.0)] {
            let e = -(-s / m).exp_m1();
            assert!((near.fail(t, s) / e - 1.0).abs() < 0.02, "t {t} s {s}: {} vs {e}", near.fail(t, s));
        }
        // Shape 0.7: at the start every host is new, the Weibull's own law; later the hosts
        // in use are older or renewed, and fail less (new hosts fail more often than old ones).
        let d = 0.7;
        let wb = HostFailures::new(m, d, 2.0 * w, w);
        let eta = m / gamma(1.0 + 1.0 / d);
        let first = -(-(3000.0f64 / eta).powf(d)).exp_m1();
        assert!((wb.fail(0.0, 3000.0) / first - 1.0).abs() < 0.02, "{} vs {first}", wb.fail(0.0, 3000.0));
        let at = |t: f64| wb.fail(t, 3000.0);
        assert!(at(0.0) > at(10_000.0) && at(10_000.0) > at(80_000.0), "{} {} {}", at(0.0), at(10_000.0), at(80_000.0));
        // ... but never below the stationary law, (1/M)·∫₀ˢ R̄ ≈ s/M for s ≪ M.
        assert!(at(150_000.0) > 0.9 * 3000.0 / m, "{}", at(150_000.0));
        assert!(wb.fail(50_000.0, 0.0) == 0.0 && wb.fail(0.0, w) < 1.0);
    }

    #[test]
    fn hosts_that_fail_young_make_jobs_checkpoint_more_often() {
        let exp = model(64, 2);
        let young = CheckpointModel { shape: 0.7, ..exp };
        let (a, b) = (exp.advise().unwrap(), young.advise().unwrap());
        assert!(b.interval < 0.9 * a.interval, "{a:?} {b:?}");
        assert!(b.finish_restart < a.finish_restart && b.finish_rebirth < a.finish_rebirth, "{a:?} {b:?}");
        assert!(b.finish_replication < a.finish_replication && b.expected > a.expected, "{a:?} {b:?}");
        // The model's pieces agree with each other at shape 0.7 too.
        let run = young.run();
        assert!((run.finish_rebirth(3000.0) - young.finish_rebirth(3000.0)).abs() < 1e-12);
        let none = CheckpointModel { max_restarts: 0, ..young };
        assert!((none.finish_restart(3000.0) - none.finish_rebirth(3000.0)).abs() < 1e-9);
        assert!(CheckpointModel { shape: 0.0, ..exp }.advise().is_none());
    }
}
