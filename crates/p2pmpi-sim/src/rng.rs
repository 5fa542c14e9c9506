//! A small, seedable, portable random generator (xoshiro256++ seeded by SplitMix64) and the
//! few distributions the simulator needs. Written here rather than taken from a crate so that a
//! seed gives the same results on every platform and with every dependency version.

/// xoshiro256++: fast, 256 bits of state, good statistical quality.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

/// One step of SplitMix64 (also a good 64-bit mixer for deriving seeds).
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seed derived from a base seed and a list of labels (experiment, protocol, n, trial…), so
/// that every trial has its own independent stream whatever the order trials run in.
pub fn derive_seed(base: u64, labels: &[u64]) -> u64 {
    let mut s = base;
    let mut out = splitmix64(&mut s);
    for &l in labels {
        s ^= l.wrapping_mul(0xD6E8_FEB8_6659_FD93);
        out ^= splitmix64(&mut s);
        out = out.rotate_left(23);
    }
    out
}

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut sm = seed;
        let s = [splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm), splitmix64(&mut sm)];
        Rng { s }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)` (53 bits).
    #[inline]
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `(0, 1]`: safe to take the logarithm of.
    #[inline]
    pub fn f64_open0(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in `[0, n)` (Lemire's multiply-shift; `n > 0`).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// `true` with probability `p`.
    #[inline]
    pub fn bernoulli(&mut self, p: f64) -> bool {
        self.f64() < p
    }

    /// Exponential with the given mean.
    #[inline]
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -mean * self.f64_open0().ln()
    }

    /// Standard normal (Box–Muller; one of the pair is dropped for simplicity).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.f64_open0();
        let u2 = self.f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// The number of failures before the next success of a Bernoulli(`p`) sequence, by
    /// inversion: `⌊ln U / ln(1 − p)⌋`. `ln_q` is `ln(1 − p)` (negative), precomputed.
    #[inline]
    pub fn geometric_skip(&mut self, ln_q: f64) -> u64 {
        let g = self.f64_open0().ln() / ln_q;
        if g >= u64::MAX as f64 {
            u64::MAX
        } else {
            g as u64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let mut c = Rng::new(43);
        let xa: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let xb: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        let xc: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
        assert_eq!(xa, xb);
        assert_ne!(xa, xc);
        assert_ne!(derive_seed(1, &[2, 3]), derive_seed(1, &[3, 2]));
    }

    #[test]
    fn distributions_have_the_right_means() {
        let mut r = Rng::new(7);
        let k = 200_000;
        let m: f64 = (0..k).map(|_| r.f64()).sum::<f64>() / k as f64;
        assert!((m - 0.5).abs() < 0.01, "{m}");
        let m: f64 = (0..k).map(|_| r.exponential(3.0)).sum::<f64>() / k as f64;
        assert!((m - 3.0).abs() < 0.05, "{m}");
        let m: f64 = (0..k).map(|_| r.normal()).sum::<f64>() / k as f64;
        assert!(m.abs() < 0.02, "{m}");
        let p = 0.05f64;
        let lq = (1.0 - p).ln();
        let m: f64 = (0..k).map(|_| r.geometric_skip(lq) as f64).sum::<f64>() / k as f64;
        assert!((m - (1.0 - p) / p).abs() < 0.3, "{m}");
        let hits = (0..k).filter(|_| r.below(10) == 3).count() as f64 / k as f64;
        assert!((hits - 0.1).abs() < 0.005, "{hits}");
    }
}
