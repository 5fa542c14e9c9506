//! The simulated network: per-message delay = base + a random jitter drawn from a chosen
//! distribution, optional loss, optional per-link FIFO order (TCP), and the duration syntax of
//! the command line.

use crate::rng::Rng;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The distribution of the random part of a message's delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Jitter {
    /// No jitter: every message takes exactly the base delay.
    None,
    /// Uniform in `[0, max]`.
    Uniform { max: Duration },
    /// Exponential with the given mean.
    Exponential { mean: Duration },
    /// Pareto (heavy tail) with the given mean and shape `α > 1` (`α ≤ 2`: infinite variance):
    /// `P(X > x) = (x_m/x)^α` for `x ≥ x_m = mean·(α−1)/α`.
    Pareto { mean: Duration, shape: f64 },
    /// Log-normal with the given mean and `σ` of the underlying normal.
    LogNormal { mean: Duration, sigma: f64 },
}

impl Jitter {
    /// One sample, in seconds.
    pub fn sample_secs(&self, rng: &mut Rng) -> f64 {
        match *self {
            Jitter::None => 0.0,
            Jitter::Uniform { max } => rng.f64() * max.as_secs_f64(),
            Jitter::Exponential { mean } => rng.exponential(mean.as_secs_f64()),
            Jitter::Pareto { mean, shape } => {
                let xm = mean.as_secs_f64() * (shape - 1.0) / shape;
                xm / rng.f64_open0().powf(1.0 / shape)
            }
            Jitter::LogNormal { mean, sigma } => {
                let mu = mean.as_secs_f64().ln() - sigma * sigma / 2.0;
                (mu + sigma * rng.normal()).exp()
            }
        }
    }

    /// The mean of the distribution.
    pub fn mean(&self) -> Duration {
        match *self {
            Jitter::None => Duration::ZERO,
            Jitter::Uniform { max } => max / 2,
            Jitter::Exponential { mean } | Jitter::Pareto { mean, .. } | Jitter::LogNormal { mean, .. } => mean,
        }
    }

    /// `P(jitter > x)`, exactly.
    pub fn tail(&self, x: Duration) -> f64 {
        let x = x.as_secs_f64();
        match *self {
            Jitter::None => (x < 0.0) as u8 as f64,
            Jitter::Uniform { max } => (1.0 - x / max.as_secs_f64()).clamp(0.0, 1.0),
            Jitter::Exponential { mean } => (-x / mean.as_secs_f64()).exp(),
            Jitter::Pareto { mean, shape } => {
                let xm = mean.as_secs_f64() * (shape - 1.0) / shape;
                if x <= xm {
                    1.0
                } else {
                    (xm / x).powf(shape)
                }
            }
            Jitter::LogNormal { mean, sigma } => {
                let mu = mean.as_secs_f64().ln() - sigma * sigma / 2.0;
                if x <= 0.0 {
                    1.0
                } else {
                    0.5 * erfc((x.ln() - mu) / (sigma * std::f64::consts::SQRT_2))
                }
            }
        }
    }
}

/// The complementary error function (Numerical Recipes' erfcc, relative error < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.26551223
            + t * (1.00002368
                + t * (0.37409196
                    + t * (0.09678418
                        + t * (-0.18628806
                            + t * (0.27886807
                                + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

impl fmt::Display for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Jitter::None => f.write_str("none"),
            Jitter::Uniform { max } => write!(f, "uniform:{}", fmt_duration(max)),
            Jitter::Exponential { mean } => write!(f, "exp:{}", fmt_duration(mean)),
            Jitter::Pareto { mean, shape } => write!(f, "pareto:{},{shape}", fmt_duration(mean)),
            Jitter::LogNormal { mean, sigma } => write!(f, "lognormal:{},{sigma}", fmt_duration(mean)),
        }
    }
}

impl FromStr for Jitter {
    type Err = String;
    /// `none`, `uniform:MAX`, `exp:MEAN`, `pareto:MEAN,SHAPE`, `lognormal:MEAN,SIGMA`.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (kind, args) = s.split_once(':').unwrap_or((s, ""));
        let mut it = args.split(',').map(str::trim);
        let mut dur = || -> Result<Duration, String> {
            parse_duration(it.next().filter(|a| !a.is_empty()).ok_or(format!("{s:?}: a duration is missing"))?)
        };
        let j = match kind.to_ascii_lowercase().as_str() {
            "none" | "0" => Jitter::None,
            "uniform" | "u" => Jitter::Uniform { max: dur()? },
            "exp" | "exponential" => Jitter::Exponential { mean: dur()? },
            "pareto" | "lognormal" => {
                let mean = dur()?;
                let p: f64 = args
                    .split(',')
                    .nth(1)
                    .ok_or(format!("{s:?}: the shape (pareto) or sigma (lognormal) is missing"))?
                    .trim()
                    .parse()
                    .map_err(|e| format!("{s:?}: {e}"))?;
                if kind.eq_ignore_ascii_case("pareto") {
                    if p <= 1.0 {
                        return Err(format!("{s:?}: the Pareto shape must be > 1 for a finite mean"));
                    }
                    Jitter::Pareto { mean, shape: p }
                } else {
                    Jitter::LogNormal { mean, sigma: p }
                }
            }
            _ => {
                return Err(format!(
                    "{s:?}: expected none, uniform:MAX, exp:MEAN, pareto:MEAN,SHAPE or lognormal:MEAN,SIGMA"
                ))
            }
        };
        Ok(j)
    }
}

/// Parses `500ms`, `0.5s`, `2s`, `100us`, `3m`, `1h` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("{s:?} is not a duration (e.g. 500ms, 0.5s)"))?;
    let secs = match unit.trim() {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "ns" => v / 1e9,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        u => return Err(format!("{s:?}: unknown unit {u:?}")),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("{s:?} is not a duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A short human form: `500ms`, `2s`, `1.5s`, `250us`.
pub fn fmt_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        "0".into()
    } else if ns % 1_000_000_000 == 0 {
        format!("{}s", ns / 1_000_000_000)
    } else if ns >= 1_000_000_000 {
        format!("{}s", d.as_secs_f64())
    } else if ns % 1_000_000 == 0 {
        format!("{}ms", ns / 1_000_000)
    } else if ns >= 1_000_000 {
        format!("{}ms", ns as f64 / 1e6)
    } else {
        format!("{}us", ns as f64 / 1e3)
    }
}

/// How messages travel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetConfig {
    /// The fixed part of every message's delay (propagation).
    pub base: Duration,
    /// The random part.
    pub jitter: Jitter,
    /// Probability that a message is lost (0 for TCP, which the seeds use).
    pub loss: f64,
    /// Deliver the messages of one directed link in the order they were sent, as TCP does:
    /// a message never overtakes an earlier one, so a long delay also holds back those behind
    /// it (head-of-line blocking).
    pub fifo: bool,
    /// Upper bound of the jitter (a heavy tail would otherwise produce absurd delays; TCP
    /// gives up on a connection after a few minutes anyway).
    pub max_jitter: Duration,
    /// Whether the communicator sent at start-up ([`crate::sim::StartMode::FlatTree`]) also
    /// suffers the jitter (default: only the base delay; see the crate docs).
    pub communicator_jitter: bool,
}

impl NetConfig {
    /// A network with a fixed delay.
    pub fn constant(base: Duration) -> NetConfig {
        NetConfig {
            base,
            jitter: Jitter::None,
            loss: 0.0,
            fifo: true,
            max_jitter: Duration::from_secs(120),
            communicator_jitter: false,
        }
    }

    /// The same with a jitter.
    pub fn with_jitter(self, jitter: Jitter) -> NetConfig {
        NetConfig { jitter, ..self }
    }

    /// One message's delay.
    pub fn sample(&self, rng: &mut Rng) -> Duration {
        let j = self.jitter.sample_secs(rng).min(self.max_jitter.as_secs_f64());
        self.base + Duration::from_secs_f64(j.max(0.0))
    }

    /// The mean delay (ignoring the cap).
    pub fn mean(&self) -> Duration {
        self.base + self.jitter.mean()
    }
}

impl Default for NetConfig {
    /// 2 ms plus an exponential jitter of mean 8 ms: a wide-area grid like the seeds' three
    /// Grid'5000 sites (round trips of 10–20 ms).
    fn default() -> Self {
        NetConfig::constant(Duration::from_millis(2))
            .with_jitter(Jitter::Exponential { mean: Duration::from_millis(8) })
    }
}

impl fmt::Display for NetConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "delay {} + {}", fmt_duration(self.base), self.jitter)?;
        if self.loss > 0.0 {
            write!(f, ", loss {}", self.loss)?;
        }
        if !self.fifo {
            f.write_str(", no FIFO")?;
        }
        if self.communicator_jitter {
            f.write_str(", jittered communicator")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_print() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("0.5s").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("100us").unwrap(), Duration::from_micros(100));
        assert!(parse_duration("x").is_err());
        assert!(parse_duration("-1s").is_err());
        assert_eq!(fmt_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(fmt_duration(Duration::from_secs(2)), "2s");
    }

    #[test]
    fn jitters_parse_and_roundtrip() {
        for s in ["none", "uniform:20ms", "exp:10ms", "pareto:150ms,1.5", "lognormal:100ms,1"] {
            let j: Jitter = s.parse().unwrap();
            assert_eq!(j.to_string().parse::<Jitter>().unwrap(), j, "{s}");
        }
        assert!("pareto:1s,0.9".parse::<Jitter>().is_err());
        assert!("weird:1s".parse::<Jitter>().is_err());
    }

    #[test]
    fn samples_match_the_means_and_tails() {
        let mut rng = Rng::new(3);
        for j in [
            Jitter::Uniform { max: Duration::from_millis(20) },
            Jitter::Exponential { mean: Duration::from_millis(10) },
            Jitter::Pareto { mean: Duration::from_millis(100), shape: 2.5 },
            Jitter::LogNormal { mean: Duration::from_millis(100), sigma: 1.0 },
        ] {
            let k = 400_000;
            let xs: Vec<f64> = (0..k).map(|_| j.sample_secs(&mut rng)).collect();
            let m = xs.iter().sum::<f64>() / k as f64;
            let want = j.mean().as_secs_f64();
            assert!((m - want).abs() < 0.03 * want, "{j}: mean {m} vs {want}");
            let x = j.mean() * 2;
            let tail = xs.iter().filter(|&&v| v > x.as_secs_f64()).count() as f64 / k as f64;
            assert!((tail - j.tail(x)).abs() < 0.005, "{j}: tail {tail} vs {}", j.tail(x));
        }
    }
}
