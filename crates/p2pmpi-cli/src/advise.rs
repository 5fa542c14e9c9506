//! `p2pmpi advise`: how much replication to ask for (SPEC §11, chapter §4.5, FM §3).
//!
//! ```text
//! p2pmpi advise -n P (-f F | --weibull LAMBDA,DELTA[,T] | --weibull LAMBDA,DELTA --seq-time S
//!               [--parallel-fraction A] [--replica-overhead G]) [--max-r R]
//! p2pmpi advise -n P --mtbf M --run-time W --checkpoint-cost C [--restart-cost R]
//!               [--max-restarts N] [--max-r R]
//! ```
//!
//! Prints, for `r = 1..=R`, the per-host failure probability `f` and the application's failure
//! probability `P_app(p, r) = 1 − (1 − f^r)^p`, then the degree of least failure probability.
//! With `-f`, or a Weibull at a fixed time `T`, `f` does not depend on `r`; with `--seq-time`,
//! `f = 1 − exp(−(λ·T(p, r))^δ)` over the Amdahl duration
//! `T(p, r) = S·((1 − α) + α/p)·(1 + γ·(r − 1))` (see [`p2pmpi_core::advisor`]).
//! With `--mtbf` (the mean time between failures of one host), the job checkpoints: for each
//! `r`, the probability that it finishes with replication only, with replicas reborn at each
//! checkpoint, and with restarts too, the checkpoint interval of least expected run time (beside
//! the first-order one it is anchored on, Young's at `r = 1`) and that run time (see
//! [`p2pmpi_core::advisor::checkpoints`]). Times take a unit (`s`, `m`, `h`, `d`; seconds
//! without). Bad values exit with status 2 and name the option.

use clap::{value_parser, ArgGroup, Args};
use p2pmpi_core::advisor::checkpoints::{CheckpointModel, IntervalAdvice};
use p2pmpi_core::advisor::{self, Advice, Amdahl, HostModel, Weibull};
use std::fmt::Write;

/// The options of `p2pmpi advise`.
#[derive(Args, Debug)]
#[command(group(ArgGroup::new("host").required(true).args(["f", "weibull", "mtbf"])))]
pub struct AdviseArgs {
    /// Number of MPI processes p.
    #[arg(short = 'n', value_name = "P", value_parser = value_parser!(u32).range(1..))]
    pub n: u32,
    /// Probability that a host fails during the run, the same for every r (e.g. 0.05).
    #[arg(short = 'f', value_name = "F", value_parser = parse_probability, allow_hyphen_values = true)]
    pub f: Option<f64>,
    /// Weibull host failures f(t) = 1 − exp(−(λt)^δ). With T, f = f(T) for every r; without T,
    /// t is the run's duration and --seq-time is needed.
    #[arg(long, value_name = "LAMBDA,DELTA[,T]", value_parser = parse_weibull, allow_hyphen_values = true)]
    pub weibull: Option<WeibullArg>,
    /// Estimated sequential time S of the program (same time unit as 1/λ): f is then taken over
    /// the run's duration T(p, r) = S·((1 − α) + α/p)·(1 + γ·(r − 1)).
    #[arg(long = "seq-time", value_name = "S", requires = "weibull",
        conflicts_with = "f", value_parser = parse_seq_time, allow_hyphen_values = true)]
    pub seq_time: Option<f64>,
    /// Parallel portion α of the program, in [0, 1] (Amdahl's law) [default: 1].
    #[arg(
        long = "parallel-fraction",
        value_name = "A",
        requires = "seq_time",
        value_parser = parse_fraction,
        allow_hyphen_values = true
    )]
    pub parallel_fraction: Option<f64>,
    /// Overhead γ of each extra copy, as a fraction of the unreplicated run [default: 1,
    /// i.e. T = r·t₁, the seeds' upper bound].
    #[arg(
        long = "replica-overhead",
        value_name = "G",
        requires = "seq_time",
        value_parser = parse_overhead,
        allow_hyphen_values = true
    )]
    pub replica_overhead: Option<f64>,
    /// Mean time between failures of one host (e.g. 107.55h): the job checkpoints, and the
    /// advice gives the interval and what rebirth and restarts buy. Needs --run-time and
    /// --checkpoint-cost.
    #[arg(long, value_name = "M", value_parser = parse_time, allow_hyphen_values = true, requires_all = ["run_time", "checkpoint_cost"])]
    pub mtbf: Option<f64>,
    /// Weibull shape δ of a host's lifetime (with --mtbf) [default: 1, exponential]. Below 1,
    /// new hosts fail more often than old ones: the grid's hosts are taken as joining when
    /// the job starts and each failed host as replaced by a new one.
    #[arg(long, value_name = "DELTA", value_parser = parse_shape, allow_hyphen_values = true, requires = "mtbf")]
    pub shape: Option<f64>,
    /// The job's failure-free run time (with --mtbf).
    #[arg(long = "run-time", value_name = "W", value_parser = parse_time, allow_hyphen_values = true, requires = "mtbf")]
    pub run_time: Option<f64>,
    /// The cost of one checkpoint (with --mtbf).
    #[arg(long = "checkpoint-cost", value_name = "C", value_parser = parse_time, allow_hyphen_values = true, requires = "mtbf")]
    pub checkpoint_cost: Option<f64>,
    /// The cost of a restart: booking machines again, restoring (with --mtbf) [default: the
    /// checkpoint's cost].
    #[arg(long = "restart-cost", value_name = "R", value_parser = parse_time_or_zero, allow_hyphen_values = true, requires = "mtbf")]
    pub restart_cost: Option<f64>,
    /// Restarts allowed (with --mtbf).
    #[arg(long = "max-restarts", value_name = "N", default_value_t = 100, requires = "mtbf")]
    pub max_restarts: u32,
    /// Largest replication degree to consider.
    #[arg(long = "max-r", value_name = "R", default_value_t = 8, value_parser = value_parser!(u32).range(1..=100))]
    pub max_r: u32,
}

/// `--weibull LAMBDA,DELTA[,T]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeibullArg {
    /// The distribution.
    pub weibull: Weibull,
    /// The fixed time at which f is taken, if given.
    pub t: Option<f64>,
}

fn number(s: &str, what: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(format!("{what} {:?} is not a number", s.trim())),
    }
}

fn parse_shape(s: &str) -> Result<f64, String> {
    let d = number(s, "the shape")?;
    if d > 0.0 {
        Ok(d)
    } else {
        Err(format!("Weibull shape δ = {d} must be > 0"))
    }
}

fn parse_probability(s: &str) -> Result<f64, String> {
    let f = number(s, "f")?;
    if (0.0..=1.0).contains(&f) {
        Ok(f)
    } else {
        Err(format!("f = {f} is not a probability in [0, 1]"))
    }
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    let a = number(s, "α")?;
    if (0.0..=1.0).contains(&a) {
        Ok(a)
    } else {
        Err(format!("α = {a} is not in [0, 1]"))
    }
}

fn parse_seq_time(s: &str) -> Result<f64, String> {
    let x = number(s, "S")?;
    if x > 0.0 {
        Ok(x)
    } else {
        Err(format!("sequential time S = {x} must be > 0"))
    }
}

fn parse_overhead(s: &str) -> Result<f64, String> {
    let x = number(s, "γ")?;
    if x >= 0.0 {
        Ok(x)
    } else {
        Err(format!("γ = {x} must be ≥ 0"))
    }
}

/// A time: a number with an optional unit (`s`, `m`, `h`, `d`; seconds without), `> 0`.
fn parse_time(s: &str) -> Result<f64, String> {
    let t = parse_time_or_zero(s)?;
    if t > 0.0 {
        Ok(t)
    } else {
        Err(format!("{:?} must be > 0", s.trim()))
    }
}

fn parse_time_or_zero(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let split =
        s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == '-' || c == '+')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let x = number(num, "time")?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        u => return Err(format!("{s:?}: unknown unit {u:?} (s, m, h or d)")),
    };
    if x < 0.0 {
        return Err(format!("{s:?} must be ≥ 0"));
    }
    Ok(x * scale)
}

fn parse_weibull(s: &str) -> Result<WeibullArg, String> {
    let parts: Vec<&str> = s.split(',').collect();
    if !(2..=3).contains(&parts.len()) {
        return Err("expected LAMBDA,DELTA or LAMBDA,DELTA,T (e.g. 0.1,1 or 0.001,0.7,3600)".into());
    }
    let lambda = number(parts[0], "λ")?;
    let delta = number(parts[1], "δ")?;
    let weibull = Weibull::new(lambda, delta).map_err(|e| e.to_string())?;
    let t = match parts.get(2) {
        Some(t) => {
            let t = number(t, "T")?;
            if t < 0.0 {
                return Err(format!("T = {t} must be ≥ 0"));
            }
            Some(t)
        }
        None => None,
    };
    Ok(WeibullArg { weibull, t })
}

/// The model the options describe, and the lines that say so.
fn model(args: &AdviseArgs) -> Result<(HostModel, String), String> {
    let p = args.n;
    if let Some(f) = args.f {
        let head = format!("p = {p} processes, host failure probability f = {f} for every r");
        return Ok((HostModel::Fixed(f), head));
    }
    let Some(WeibullArg { weibull: w, t }) = args.weibull else {
        return Err("give -f F or --weibull LAMBDA,DELTA[,T]".into());
    };
    let dist = format!("Weibull host failures f(t) = 1 − exp(−(λt)^δ), λ = {}, δ = {}", w.lambda, w.delta);
    match (t, args.seq_time) {
        (Some(_), Some(_)) => {
            Err("--weibull LAMBDA,DELTA,T fixes the time: drop T to use --seq-time (the run's duration)".into())
        }
        (None, None) => {
            Err("--weibull LAMBDA,DELTA needs a time: give T (--weibull LAMBDA,DELTA,T) or --seq-time S".into())
        }
        (Some(t), None) => {
            let f = w.failure(t);
            let head = format!("p = {p} processes, {dist}\nat t = {t}: f = {} for every r", prob(f));
            Ok((HostModel::Fixed(f), head))
        }
        (None, Some(s)) => {
            let a = args.parallel_fraction.unwrap_or(1.0);
            let g = args.replica_overhead.unwrap_or(1.0);
            let duration = Amdahl::new(s, a, g).map_err(|e| e.to_string())?;
            let amdahl = "T(p, r) = S·((1 − α) + α/p)·(1 + γ·(r − 1))";
            let head =
                format!("p = {p} processes, {dist}\nover the run's duration {amdahl}, S = {s}, α = {a}, γ = {g}");
            Ok((HostModel::Weibull { weibull: w, duration }, head))
        }
    }
}

/// A probability for the f column: four decimals, or scientific when tiny.
fn prob(x: f64) -> String {
    if x == 0.0 || x >= 1e-4 {
        format!("{x:.4}")
    } else {
        format!("{x:.2e}")
    }
}

/// A probability as a percentage: two decimals, or scientific when below 0.01 %.
fn percent(x: f64) -> String {
    let pc = x * 100.0;
    if pc == 0.0 || pc >= 0.01 {
        format!("{pc:.2} %")
    } else {
        format!("{pc:.2e} %")
    }
}

/// The table of an advice, ending with the line `best r = K (P_app = …)`; when `f` does not
/// depend on `r`, every copy helps and no degree is best: the line names the least `r` whose
/// `P_app` is under 1 % instead.
pub fn render(head: &str, advice: &Advice) -> String {
    let with_duration = advice.rows.iter().any(|row| row.duration.is_some());
    let no_best = !with_duration && advice.rows.len() > 1 && advice.best as usize == advice.rows.len();
    let mut out = String::new();
    let _ = writeln!(out, "{head}");
    let _ = writeln!(out, "P_app(p, r) = 1 − (1 − f^r)^p: probability that the application fails");
    let _ = writeln!(out);
    if with_duration {
        let _ = writeln!(out, "{:>4}  {:>12}  {:>10}  {:>12}", "r", "duration", "f", "P_app(p, r)");
    } else {
        let _ = writeln!(out, "{:>4}  {:>10}  {:>12}", "r", "f", "P_app(p, r)");
    }
    for row in &advice.rows {
        let mark = if row.r == advice.best && !no_best { "  <- best" } else { "" };
        match row.duration {
            Some(t) => {
                let _ =
                    writeln!(out, "{:>4}  {:>12.2}  {:>10}  {:>12}{mark}", row.r, t, prob(row.f), percent(row.p_app));
            }
            None => {
                let _ = writeln!(out, "{:>4}  {:>10}  {:>12}{mark}", row.r, prob(row.f), percent(row.p_app));
            }
        }
    }
    let _ = writeln!(out);
    if no_best {
        let _ = writeln!(
            out,
            "f does not grow with r here, so more copies always help (--seq-time weighs the longer run):"
        );
        let _ = match advice.rows.iter().find(|row| row.p_app < 0.01) {
            Some(row) => writeln!(
                out,
                "no best r; the least r with P_app under 1 %: r = {} (P_app = {})",
                row.r,
                percent(row.p_app)
            ),
            None => writeln!(out, "no best r; none up to --max-r {} has P_app under 1 %", advice.rows.len()),
        };
        return out;
    }
    let _ = writeln!(out, "best r = {} (P_app = {})", advice.best, percent(advice.best_row().p_app));
    out
}

/// The advice with checkpoints (`--mtbf`), one row per degree, and the line naming the least
/// degree that finishes with probability ≥ 99 % with rebirth and restarts.
pub fn render_checkpoints(p: u32, rows: &[(u32, IntervalAdvice)], m: &CheckpointModel) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "p = {p} processes, hosts failing every M = {} s on average ({}), run time W = {} s,",
        m.mtbf,
        if (m.shape - 1.0).abs() < 1e-12 { "exponential".to_string() } else { format!("Weibull of shape {}", m.shape) },
        m.work
    );
    let _ = writeln!(
        out,
        "checkpoints of C = {} s, restarts of R = {} s, at most {} restarts",
        m.cost, m.restart, m.max_restarts
    );
    let _ = writeln!(out, "probability that the job finishes: with replication only (no checkpoint), with replicas");
    let _ = writeln!(out, "reborn at each checkpoint, and with restarts from the last checkpoint too");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:>4}  {:>12}  {:>12}  {:>12}  {:>10}  {:>10}  {:>12}",
        "r", "interval s", "1st order s", "replication", "rebirth", "+ restart", "E[T] s"
    );
    for (r, a) in rows {
        let _ = writeln!(
            out,
            "{r:>4}  {:>12.0}  {:>12.0}  {:>12}  {:>10}  {:>10}  {:>12.0}",
            a.interval,
            a.anchor,
            percent(a.finish_replication),
            percent(a.finish_rebirth),
            percent(a.finish_restart),
            a.expected
        );
    }
    let _ = writeln!(out);
    let best = rows.iter().find(|(_, a)| a.finish_restart >= 0.99).or_else(|| {
        rows.iter().fold(None, |b: Option<&(u32, IntervalAdvice)>, x| match b {
            Some(b) if b.1.finish_restart >= x.1.finish_restart => Some(b),
            _ => Some(x),
        })
    });
    if let Some((r, a)) = best {
        let why = if a.finish_restart >= 0.99 {
            "the least r finishing with probability ≥ 99 %"
        } else {
            "none reaches 99 %: the most likely to finish"
        };
        let _ = writeln!(
            out,
            "best r = {r}, checkpoint every {:.0} s ({why}: {}, expected run time {:.0} s)",
            a.interval,
            percent(a.finish_restart),
            a.expected
        );
    }
    out
}

fn run_checkpoints(args: &AdviseArgs, mtbf: f64) -> Result<String, String> {
    let work = args.run_time.ok_or("--mtbf needs --run-time W")?;
    let cost = args.checkpoint_cost.ok_or("--mtbf needs --checkpoint-cost C")?;
    let base = CheckpointModel {
        p: args.n,
        r: 1,
        mtbf,
        shape: args.shape.unwrap_or(1.0),
        work,
        cost,
        restart: args.restart_cost.unwrap_or(cost),
        max_restarts: args.max_restarts,
    };
    let rows: Vec<(u32, IntervalAdvice)> = (1..=args.max_r)
        .map(|r| {
            let m = CheckpointModel { r, ..base };
            m.advise()
                .map(|a| (r, a))
                .ok_or_else(|| format!("no advice for r = {r}: check --mtbf, --run-time, --checkpoint-cost"))
        })
        .collect::<Result<_, _>>()?;
    Ok(render_checkpoints(args.n, &rows, &base))
}

/// Runs `p2pmpi advise`: 0, or 2 on bad input.
pub fn run(args: &AdviseArgs) -> i32 {
    if let Some(mtbf) = args.mtbf {
        return match run_checkpoints(args, mtbf) {
            Ok(text) => {
                print!("{text}");
                0
            }
            Err(e) => {
                eprintln!("p2pmpi advise: error: {e}");
                2
            }
        };
    }
    let result = model(args)
        .and_then(|(m, head)| advisor::advise(args.n, &m, args.max_r).map(|a| (head, a)).map_err(|e| e.to_string()));
    match result {
        Ok((head, advice)) => {
            print!("{}", render(&head, &advice));
            0
        }
        Err(e) => {
            eprintln!("p2pmpi advise: error: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weibull_option_parses() {
        let w = parse_weibull("0.1,1").unwrap();
        assert_eq!((w.weibull.lambda, w.weibull.delta, w.t), (0.1, 1.0, None));
        assert_eq!(parse_weibull(" 0.001, 0.7 ,3600").unwrap().t, Some(3600.0));
        assert!(parse_weibull("0.1").unwrap_err().contains("LAMBDA,DELTA"));
        assert!(parse_weibull("0.1,1,2,3").is_err());
        assert!(parse_weibull("0,1").unwrap_err().contains("λ"));
        assert!(parse_weibull("0.1,-1").unwrap_err().contains("δ"));
        assert!(parse_weibull("x,1").unwrap_err().contains("not a number"));
        assert!(parse_weibull("0.1,1,-5").is_err());
        assert!(parse_probability("1.5").is_err());
        assert!(parse_probability("nan").is_err());
        assert_eq!(parse_probability("0.05"), Ok(0.05));
        assert_eq!(parse_time("90"), Ok(90.0));
        assert_eq!(parse_time("1.5h"), Ok(5400.0));
        assert_eq!(parse_time("2d"), Ok(172_800.0));
        assert_eq!(parse_time("10m"), Ok(600.0));
        assert!(parse_time("0").is_err() && parse_time("-5s").is_err() && parse_time("3w").is_err());
        assert_eq!(parse_time_or_zero("0"), Ok(0.0));
    }

    #[test]
    fn percentages() {
        assert_eq!(percent(0.998_591_9), "99.86 %");
        assert_eq!(percent(0.0), "0.00 %");
        assert_eq!(percent(3.9e-9), "3.90e-7 %");
        assert_eq!(prob(0.05), "0.0500");
        assert_eq!(prob(2.5e-7), "2.50e-7");
    }
}
