//! Deterministic random numbers for replicated programs (the seeds' `MPI.Random`, thesis
//! §4.3.4).
//!
//! With replication (`p2pmpirun -r R`) every replica of a rank must compute the same values:
//! a master that draws 5 and dies after sending it to some receivers would otherwise be
//! replaced by a replica that drew 2 and resends 2 to the others. [`Rand`] is seeded from the
//! job and the rank: identical on every replica of a rank, different between ranks and
//! between jobs. `P2PMPI_SEED=N` in the environment fixes the job's part of the seed (to
//! reproduce a run).
//!
//! The generator is xoshiro256++ from `rand_xoshiro` (the `rand` project's portable
//! generators: the same seed gives the same stream on every platform and version, which
//! `rand`'s `StdRng` does not promise). [`Rand`] implements `rand_core::RngCore`, re-exported
//! as [`rand_core`], so the `rand` crate's distributions work on it.

pub use rand_core;
use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Sets the job's part of the seeds (at initialization, in the context): `P2PMPI_SEED`, else
/// `derived`, a value derived from the job's key (from which the key cannot be recovered).
pub(crate) fn set_job_seed(ctx: &crate::context::Context, derived: u64) {
    let seed = std::env::var("P2PMPI_SEED").ok().and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(derived);
    let _ = ctx.job_seed.set(seed);
}

/// A random generator that gives the same numbers on every replica of a rank.
#[derive(Debug, Clone)]
pub struct Rand(Xoshiro256PlusPlus);

impl Rand {
    /// This rank's generator (stream 0). Call after `initialize()`.
    pub fn new() -> Rand {
        Rand::with_stream(0)
    }

    /// Another independent stream of this rank's numbers.
    pub fn with_stream(stream: u64) -> Rand {
        let rank = crate::lifecycle::own_rank().max(0) as u64;
        let job = crate::context::try_current().and_then(|c| c.job_seed.get().copied()).unwrap_or(0);
        Rand::from_parts(job, rank, stream)
    }

    /// The generator of (`job`, `rank`, `stream`).
    pub fn from_parts(job: u64, rank: u64, stream: u64) -> Rand {
        let mut x = Xoshiro256PlusPlus::seed_from_u64(job ^ rank.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        // Streams are far apart: 2^128 steps each.
        for _ in 0..stream.min(1 << 16) {
            x.jump();
        }
        Rand(x)
    }

    /// A uniform `f64` in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in `lo..hi` (`hi > lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(hi > lo, "empty range {lo}..{hi}");
        let span = hi - lo;
        // Lemire's multiply-shift with rejection: unbiased.
        loop {
            let x = self.0.next_u64();
            let m = (x as u128) * (span as u128);
            if (m as u64) >= span.wrapping_neg() % span {
                return lo + (m >> 64) as u64;
            }
        }
    }
}

impl Default for Rand {
    fn default() -> Self {
        Rand::new()
    }
}

impl RngCore for Rand {
    fn next_u32(&mut self) -> u32 {
        self.0.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.0.fill_bytes(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_parts_same_numbers_other_parts_other_numbers() {
        let draw = |j, r, s| {
            let mut g = Rand::from_parts(j, r, s);
            (0..4).map(|_| g.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(1, 2, 0), draw(1, 2, 0));
        assert_ne!(draw(1, 2, 0), draw(1, 3, 0));
        assert_ne!(draw(1, 2, 0), draw(2, 2, 0));
        assert_ne!(draw(1, 2, 0), draw(1, 2, 1));
        let mut g = Rand::from_parts(7, 1, 0);
        for _ in 0..1000 {
            let x = g.next_f64();
            assert!((0.0..1.0).contains(&x));
            assert!((10..20).contains(&g.range(10, 20)));
        }
    }
}
