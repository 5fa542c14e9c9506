//! Experiment b: the probability that the detector itself fails — some process loses every one
//! of its *sources* — when each process fails independently with probability `f` (FM §5.2,
//! FM figure 4, the chapter's figure 12, thesis figure 4.13).
//!
//! Three estimates, side by side:
//!
//! * **exact** ([`exact_detector_failure`] of `p2pmpi-core`, every subset enumerated) for
//!   small `n`;
//! * **crude Monte-Carlo**, as the seeds did it: draw a failure set, apply the test of
//!   [`detector_fails`] (through [`Checker`], an equivalent and faster form), count. Its
//!   relative error is `1/√(trials·P)`: hopeless for the tiny probabilities of large `n` (the
//!   seeds found no DBRR failure beyond n = 16 with 5.8·10⁹ trials);
//! * **conditional Monte-Carlo** (the Karp–Luby–Madras estimator of the probability of a union
//!   of events): the detector fails iff one of the events `A_k` = "every source of `k` failed"
//!   occurs, and `P(A_k) = f^|S_k|` is known. Draw `k` with probability `P(A_k)/Z`,
//!   `Z = Σ P(A_k)`, draw the failure set *conditioned on* `A_k`, count the events `N ≥ 1`
//!   that hold, and average `Z/N`: unbiased, with a relative error bounded however small the
//!   probability (`1/N` lies in `[1/n, 1]`), so 2·10⁵ draws give every `n` to better than
//!   0.1 % here, where events rarely overlap.
//!
//! The seeds' definition counts a process whose sources all failed even when that process
//! failed too (their n = 4 formula includes the 3- and 4-failure cases). The *strict* column
//! counts only a **surviving** process cut from all its sources — the case that really yields
//! false detections.
//!
//! [`detector_fails`]: p2pmpi_core::fd::detector_fails
//! [`exact_detector_failure`]: p2pmpi_core::fd::exact_detector_failure

use crate::par::{default_threads, par_map};
use crate::plot::{Chart, Series, PALETTE};
use crate::rng::{derive_seed, Rng};
use crate::table::{prob, Table};
use p2pmpi_core::fd::{exact_detector_failure, sources_table, Protocol};

/// Parameters of the reliability experiment.
#[derive(Debug, Clone)]
pub struct ReliabilityParams {
    pub sizes: Vec<usize>,
    pub protocols: Vec<Protocol>,
    /// Failure probability of each process.
    pub f: f64,
    /// Crude Monte-Carlo draws per (protocol, n); 0 skips it.
    pub trials: u64,
    /// Conditional Monte-Carlo draws per (protocol, n, definition).
    pub klm_trials: u64,
    /// Exact enumeration up to this n (2^n subsets; at most 24).
    pub exact_max_n: usize,
    pub seed: u64,
    pub threads: usize,
}

impl Default for ReliabilityParams {
    fn default() -> Self {
        ReliabilityParams {
            sizes: (2..=10).map(|k| 1usize << k).collect(),
            protocols: vec![Protocol::Brr, Protocol::Dbrr],
            f: 0.05,
            trials: 4_000_000,
            klm_trials: 200_000,
            exact_max_n: 16,
            seed: 1,
            threads: default_threads(),
        }
    }
}

/// `P_brr(4) = f^4 + 4f^3(1−f) + 4f^2(1−f)^2` (FM §5.2): 0.0095 at f = 0.05.
pub fn p_brr4(f: f64) -> f64 {
    f.powi(4) + 4.0 * f.powi(3) * (1.0 - f) + 4.0 * f.powi(2) * (1.0 - f).powi(2)
}

/// `f` for titles: `0.05`, or `0.0952 (1 − e^−0.1)` for the chapter's λt = 0.1.
pub fn fmt_f(f: f64) -> String {
    if (f - (1.0 - (-0.1f64).exp())).abs() < 1e-12 {
        format!("{f:.4} (1 − e^−0.1)")
    } else if (f * 1e4).fract() == 0.0 {
        format!("{f}")
    } else {
        format!("{f:.4}")
    }
}

/// A failure set and the tests on it, in time proportional to the number of failures.
#[derive(Debug, Clone)]
pub struct Checker {
    n: usize,
    sources: Vec<Vec<u32>>,
    /// `first_of[x]`: the processes whose smallest-numbered source is `x`. A process is cut
    /// off only if its first source failed, so scanning `first_of` of the failed processes
    /// visits each candidate once, and only the plausible ones.
    first_of: Vec<Vec<u32>>,
    failed: Vec<bool>,
    list: Vec<u32>,
    ln_q: f64,
}

impl Checker {
    /// A checker for `protocol` on `n ≥ 2` processes failing with probability `f`.
    pub fn new(protocol: Protocol, n: usize, f: f64) -> Checker {
        assert!(n >= 2, "the detector of one process cannot fail");
        assert!(protocol != Protocol::Random, "random gossip has no fixed sources");
        let sources: Vec<Vec<u32>> =
            sources_table(protocol, n).into_iter().map(|v| v.into_iter().map(|s| s as u32).collect()).collect();
        let mut first_of = vec![Vec::new(); n];
        for (k, src) in sources.iter().enumerate() {
            let first = *src.iter().min().expect("every process has a source when n ≥ 2");
            first_of[first as usize].push(k as u32);
        }
        Checker { n, sources, first_of, failed: vec![false; n], list: Vec::new(), ln_q: (1.0 - f).ln() }
    }

    /// The sources of process `k`.
    pub fn sources(&self, k: usize) -> &[u32] {
        &self.sources[k]
    }

    /// The failure set as flags.
    pub fn failed(&self) -> &[bool] {
        &self.failed
    }

    /// Empties the failure set.
    pub fn clear(&mut self) {
        for &x in &self.list {
            self.failed[x as usize] = false;
        }
        self.list.clear();
    }

    /// Adds `x` to the failure set.
    pub fn fail(&mut self, x: usize) {
        if !self.failed[x] {
            self.failed[x] = true;
            self.list.push(x as u32);
        }
    }

    /// Adds each process independently with probability `f` (geometric skips: O(n·f)).
    pub fn sample(&mut self, rng: &mut Rng) {
        let n = self.n as u64;
        let mut i = rng.geometric_skip(self.ln_q);
        while i < n {
            self.fail(i as usize);
            i = i.saturating_add(1).saturating_add(rng.geometric_skip(self.ln_q));
        }
    }

    fn cut(&self, k: usize, strict: bool) -> bool {
        (!strict || !self.failed[k]) && self.sources[k].iter().all(|&s| self.failed[s as usize])
    }

    /// Whether some process (`strict`: some surviving process) lost all its sources. Without
    /// `strict`, the same answer as `p2pmpi_core::fd::detector_fails`.
    pub fn fails(&self, strict: bool) -> bool {
        self.list.iter().any(|&x| self.first_of[x as usize].iter().any(|&k| self.cut(k as usize, strict)))
    }

    /// How many processes (`strict`: surviving processes) lost all their sources.
    pub fn count_cut(&self, strict: bool) -> u32 {
        self.list
            .iter()
            .map(|&x| self.first_of[x as usize].iter().filter(|&&k| self.cut(k as usize, strict)).count() as u32)
            .sum()
    }
}

/// Crude Monte-Carlo: `trials` draws; returns (failures, strict failures).
pub fn crude(protocol: Protocol, n: usize, f: f64, trials: u64, seed: u64) -> (u64, u64) {
    let mut c = Checker::new(protocol, n, f);
    let mut rng = Rng::new(seed);
    let (mut a, mut b) = (0, 0);
    for _ in 0..trials {
        c.clear();
        c.sample(&mut rng);
        if c.fails(false) {
            a += 1;
            b += c.fails(true) as u64;
        }
    }
    (a, b)
}

/// Running sums of the conditional estimator `Z/N`.
#[derive(Debug, Clone, Copy, Default)]
pub struct KlmSums {
    pub z: f64,
    pub draws: u64,
    pub sum: f64,
    pub sum_sq: f64,
}

impl KlmSums {
    /// The estimate and its standard error.
    pub fn estimate(&self) -> (f64, f64) {
        if self.draws == 0 {
            return (f64::NAN, f64::NAN);
        }
        let m = self.sum / self.draws as f64;
        let var = (self.sum_sq / self.draws as f64 - m * m).max(0.0);
        (self.z * m, self.z * (var / self.draws as f64).sqrt())
    }

    fn merge(&mut self, o: &KlmSums) {
        self.z = o.z;
        self.draws += o.draws;
        self.sum += o.sum;
        self.sum_sq += o.sum_sq;
    }
}

/// Conditional (Karp–Luby–Madras) Monte-Carlo with `draws` draws.
pub fn klm(protocol: Protocol, n: usize, f: f64, strict: bool, draws: u64, seed: u64) -> KlmSums {
    let mut c = Checker::new(protocol, n, f);
    let mut rng = Rng::new(seed);
    // P(A_k) = f^|S_k| (strict: times 1 − f, the probability that k itself survives).
    let weights: Vec<f64> =
        (0..n).map(|k| f.powi(c.sources(k).len() as i32) * if strict { 1.0 - f } else { 1.0 }).collect();
    let mut cum = Vec::with_capacity(n);
    let mut z = 0.0;
    for w in &weights {
        z += w;
        cum.push(z);
    }
    let mut s = KlmSums { z, ..Default::default() };
    for _ in 0..draws {
        let u = rng.f64() * z;
        let k = cum.partition_point(|&x| x <= u).min(n - 1);
        c.clear();
        c.sample(&mut rng);
        if strict && c.failed[k] {
            // Conditioned on k surviving: undo k's draw (draws are independent per process).
            c.failed[k] = false;
            c.list.retain(|&x| x as usize != k);
        }
        for j in 0..c.sources(k).len() {
            let src = c.sources(k)[j] as usize;
            c.fail(src);
        }
        let cnt = c.count_cut(strict);
        debug_assert!(cnt >= 1);
        let v = 1.0 / cnt.max(1) as f64;
        s.draws += 1;
        s.sum += v;
        s.sum_sq += v * v;
    }
    s
}

/// One line of the result.
#[derive(Debug, Clone)]
pub struct Row {
    pub protocol: Protocol,
    pub n: usize,
    /// Fewest sources of a process.
    pub min_sources: usize,
    pub exact: Option<f64>,
    pub crude_trials: u64,
    pub crude_failures: u64,
    pub crude_strict_failures: u64,
    pub klm: (f64, f64),
    pub klm_strict: (f64, f64),
}

impl Row {
    /// The crude estimate.
    pub fn crude(&self) -> f64 {
        if self.crude_trials == 0 {
            f64::NAN
        } else {
            self.crude_failures as f64 / self.crude_trials as f64
        }
    }
}

/// Draws per job, so that jobs (and their seeds) do not depend on the thread count.
const CHUNK: u64 = 1 << 20;
const KLM_CHUNK: u64 = 1 << 15;

/// Runs the experiment on all threads.
pub fn run(p: &ReliabilityParams) -> Vec<Row> {
    #[derive(Clone, Copy)]
    enum Job {
        Crude { pi: usize, ni: usize, chunk: u64, draws: u64 },
        Klm { pi: usize, ni: usize, strict: bool, chunk: u64, draws: u64 },
        Exact { pi: usize, ni: usize },
    }
    enum Out {
        Crude(u64, u64),
        Klm(KlmSums),
        Exact(f64),
    }
    let mut jobs = Vec::new();
    for (pi, _) in p.protocols.iter().enumerate() {
        for (ni, &n) in p.sizes.iter().enumerate() {
            if n <= p.exact_max_n.min(24) {
                jobs.push(Job::Exact { pi, ni });
            }
            let mut left = p.trials;
            let mut chunk = 0;
            while left > 0 {
                let draws = left.min(CHUNK);
                jobs.push(Job::Crude { pi, ni, chunk, draws });
                left -= draws;
                chunk += 1;
            }
            for strict in [false, true] {
                let mut left = p.klm_trials;
                let mut chunk = 0;
                while left > 0 {
                    let draws = left.min(KLM_CHUNK);
                    jobs.push(Job::Klm { pi, ni, strict, chunk, draws });
                    left -= draws;
                    chunk += 1;
                }
            }
        }
    }
    let outs = par_map(jobs.len(), p.threads, |j| match jobs[j] {
        Job::Exact { pi, ni } => Out::Exact(exact_detector_failure(p.protocols[pi], p.sizes[ni], p.f)),
        Job::Crude { pi, ni, chunk, draws } => {
            let (proto, n) = (p.protocols[pi], p.sizes[ni]);
            let (a, b) = crude(proto, n, p.f, draws, derive_seed(p.seed, &[0xC0DE, proto as u64, n as u64, chunk]));
            Out::Crude(a, b)
        }
        Job::Klm { pi, ni, strict, chunk, draws } => {
            let (proto, n) = (p.protocols[pi], p.sizes[ni]);
            let seed = derive_seed(p.seed, &[0x41A, proto as u64, n as u64, strict as u64, chunk]);
            Out::Klm(klm(proto, n, p.f, strict, draws, seed))
        }
    });
    let mut rows: Vec<Row> = Vec::new();
    for &protocol in &p.protocols {
        for &n in &p.sizes {
            let c = Checker::new(protocol, n, p.f);
            let min_sources = (0..n).map(|k| c.sources(k).len()).min().unwrap_or(0);
            rows.push(Row {
                protocol,
                n,
                min_sources,
                exact: None,
                crude_trials: p.trials,
                crude_failures: 0,
                crude_strict_failures: 0,
                klm: (f64::NAN, f64::NAN),
                klm_strict: (f64::NAN, f64::NAN),
            });
        }
    }
    let mut klm_sums = vec![[KlmSums::default(); 2]; rows.len()];
    for (job, out) in jobs.iter().zip(outs) {
        let (pi, ni) = match *job {
            Job::Crude { pi, ni, .. } | Job::Klm { pi, ni, .. } | Job::Exact { pi, ni } => (pi, ni),
        };
        let r = pi * p.sizes.len() + ni;
        match (job, out) {
            (_, Out::Exact(v)) => rows[r].exact = Some(v),
            (_, Out::Crude(a, b)) => {
                rows[r].crude_failures += a;
                rows[r].crude_strict_failures += b;
            }
            (Job::Klm { strict, .. }, Out::Klm(s)) => klm_sums[r][*strict as usize].merge(&s),
            _ => unreachable!(),
        }
    }
    for (r, s) in rows.iter_mut().zip(&klm_sums) {
        r.klm = s[0].estimate();
        r.klm_strict = s[1].estimate();
    }
    rows
}

/// The result table.
pub fn table(rows: &[Row], p: &ReliabilityParams) -> Table {
    let mut t = Table::new(&[
        "protocol",
        "n",
        "min sources",
        "exact",
        "crude MC failures",
        "crude MC P",
        "conditional MC P",
        "± (1 s.e.)",
        "strict P (survivor cut off)",
        "expected failures in 5.8e9 draws",
        "seeds",
    ]);
    for r in rows {
        let seeds = match (r.protocol, r.n) {
            (Protocol::Brr, 4) if (p.f - 0.05).abs() < 1e-12 => "P_brr(4) = 0.0095 (FM §5.2)".to_string(),
            (Protocol::Brr, 4) => format!("FM §5.2 formula: {:.4}", p_brr4(p.f)),
            _ => String::new(),
        };
        let expected = r.klm.0 * 5.8e9;
        let crude = if r.crude_trials == 0 {
            "–".to_string()
        } else if r.crude_failures == 0 {
            format!("< {}", prob(3.0 / r.crude_trials as f64))
        } else {
            prob(r.crude())
        };
        t.row(vec![
            r.protocol.to_string(),
            r.n.to_string(),
            r.min_sources.to_string(),
            r.exact.map(prob).unwrap_or_else(|| "–".into()),
            format!("{} / {:.1e}", r.crude_failures, r.crude_trials as f64),
            crude,
            prob(r.klm.0),
            format!("{:.3} %", 100.0 * r.klm.1 / r.klm.0),
            prob(r.klm_strict.0),
            if expected >= 100.0 { format!("{expected:.2e}") } else { format!("{expected:.3}") },
            seeds,
        ]);
    }
    t
}

/// A one-paragraph description of the parameters.
pub fn describe(p: &ReliabilityParams) -> String {
    format!(
        "f = {}, crude Monte-Carlo: {:.1e} draws per point; conditional Monte-Carlo: {:.1e} draws per point and \
         definition; exact enumeration for n ≤ {}; seed {}. \"< x\" is the 95 % upper bound (3/trials) when no \
         failure was drawn.",
        fmt_f(p.f),
        p.trials as f64,
        p.klm_trials as f64,
        p.exact_max_n,
        p.seed
    )
}

/// The figure: failure probability vs n, log scale.
pub fn chart(rows: &[Row], p: &ReliabilityParams) -> Chart {
    let mut c = Chart::new(
        format!("Failure probability of the detector (f = {})", fmt_f(p.f)),
        "number of processes n",
        "P(some process loses all its sources)",
    );
    c.x_log2 = true;
    c.y_log = true;
    c.legend_upper_right = true;
    for (i, &proto) in p.protocols.iter().enumerate() {
        let rs: Vec<&Row> = rows.iter().filter(|r| r.protocol == proto).collect();
        let color = PALETTE[i % PALETTE.len()];
        c.add(Series::new(
            format!("{proto} conditional MC"),
            color,
            rs.iter().map(|r| (r.n as f64, r.klm.0)).collect(),
        ));
        let crude: Vec<(f64, f64)> =
            rs.iter().filter(|r| r.crude_failures > 0).map(|r| (r.n as f64, r.crude())).collect();
        if !crude.is_empty() {
            c.add_scatter(Series::new(format!("{proto} crude MC ({:.0e} draws)", p.trials as f64), color, crude));
        }
        let exact: Vec<(f64, f64)> = rs.iter().filter_map(|r| r.exact.map(|e| (r.n as f64, e))).collect();
        if !exact.is_empty() {
            c.add(Series::new(format!("{proto} exact"), color, exact).dashed());
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use p2pmpi_core::fd::detector_fails;

    #[test]
    fn the_fast_check_agrees_with_the_core() {
        let mut rng = Rng::new(5);
        for proto in [Protocol::Brr, Protocol::Dbrr, Protocol::RoundRobin] {
            for n in [2usize, 3, 4, 5, 8, 13, 32] {
                let table = sources_table(proto, n);
                let mut c = Checker::new(proto, n, 0.3);
                for _ in 0..2000 {
                    c.clear();
                    c.sample(&mut rng);
                    assert_eq!(c.fails(false), detector_fails(&table, c.failed()), "{proto} n={n}");
                    let strict = (0..n).any(|k| !c.failed()[k] && table[k].iter().all(|&s| c.failed()[s]));
                    assert_eq!(c.fails(true), strict);
                    let cnt = (0..n).filter(|&k| table[k].iter().all(|&s| c.failed()[s])).count() as u32;
                    assert_eq!(c.count_cut(false), cnt);
                    let cnt = (0..n).filter(|&k| !c.failed()[k] && table[k].iter().all(|&s| c.failed()[s])).count();
                    assert_eq!(c.count_cut(true), cnt as u32);
                }
            }
        }
    }

    #[test]
    fn the_conditional_estimator_matches_the_exact_value() {
        for proto in [Protocol::Brr, Protocol::Dbrr] {
            for n in [4usize, 8, 12] {
                let exact = exact_detector_failure(proto, n, 0.05);
                let (est, se) = klm(proto, n, 0.05, false, 40_000, 9).estimate();
                assert!((est - exact).abs() < 4.0 * se + 1e-12, "{proto} n={n}: {est} ± {se} vs {exact}");
                assert!(se < 0.05 * exact, "{proto} n={n}: relative error {}", se / exact);
            }
        }
    }
}
