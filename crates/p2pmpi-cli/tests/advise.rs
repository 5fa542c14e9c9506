//! `p2pmpi advise`: the seeds' figures on "how much replication" (SPEC §11, chapter §4.5,
//! FM §3) from the built binary, and bad input rejected with exit status 2.
#![forbid(unsafe_code)]

use std::process::{Command, Output};

fn advise(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_p2pmpi")).arg("advise").args(args).output().expect("run p2pmpi advise")
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{:?}\nstdout: {}\nstderr: {}", out.status, text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The row of degree `r` in the table (its first column is r).
fn row(out: &str, r: u32) -> &str {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(&r.to_string()))
        .unwrap_or_else(|| panic!("no row r = {r} in\n{out}"))
}

#[test]
fn figures_for_128_processes_at_five_percent() {
    // "a 128 processes MPI application with a replication degree of only 2 reduces the failure
    // probability from 99% to 27%" (f = 0.05).
    let out = stdout(&advise(&["-n", "128", "-f", "0.05", "--max-r", "4"]));
    let r1 = row(&out, 1);
    let r2 = row(&out, 2);
    assert!(r1.contains("0.0500") && r1.contains("99.86 %"), "{out}");
    assert!(r2.contains("0.0500") && r2.contains("27.41 %"), "{out}");
    assert!(row(&out, 4).contains("0.0500") && !out.lines().any(|l| l.trim_start().starts_with("5 ")), "{out}");
    // With f fixed, more copies always help: no degree is "best" (the largest tried would be),
    // the least one under 1 % is named instead.
    assert!(!out.contains("best r =") && !out.contains("<- best"), "{out}");
    assert!(
        out.trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("no best r; the least r with P_app under 1 %: r = 4 (P_app = "),
        "{out}"
    );
}

#[test]
fn two_processes_two_copies() {
    // FM §5.2: P_app(2, 2) = 0.005 (1 − (1 − 0.05²)² = 0.499 %).
    let out = stdout(&advise(&["-n", "2", "-f", "0.05", "--max-r", "2"]));
    assert!(row(&out, 2).contains("0.50 %"), "{out}");
}

#[test]
fn figure_10_optimum_is_seven() {
    // P_app(10, r), δ = 1, λ = 0.1, sequential time 10 s: a minimum for r ≈ 7.
    let out = stdout(&advise(&["-n", "10", "--weibull", "0.1,1", "--seq-time", "10", "--max-r", "10"]));
    assert!(out.contains("duration"), "{out}");
    let r1 = row(&out, 1);
    assert!(r1.contains("1.00") && r1.contains("0.0952") && r1.contains("63.21 %"), "{out}");
    let r7 = row(&out, 7);
    assert!(r7.contains("7.00") && r7.contains("0.5034") && r7.contains("7.90 %") && r7.contains("best"), "{out}");
    assert_eq!(out.trim_end().lines().last().unwrap(), "best r = 7 (P_app = 7.90 %)", "{out}");
}

#[test]
fn weibull_at_a_fixed_time() {
    // f = 1 − exp(−(0.1·0.5)^1) = 0.0488 for every r.
    let out = stdout(&advise(&["-n", "16", "--weibull", "0.1,1,0.5", "--max-r", "3"]));
    assert!(row(&out, 1).contains("0.0488") && row(&out, 3).contains("0.0488"), "{out}");
    assert!(!out.contains("duration"), "{out}");
}

/// Runs with bad input: exit status 2 and `needle` (the option) in the error message.
fn rejected(args: &[&str], needle: &str) {
    let out = advise(args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {:?}\nstderr: {err}", out.status);
    assert!(err.contains(needle), "{args:?}: {needle:?} not in\n{err}");
    assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
}

#[test]
fn bad_input_exits_2_naming_the_option() {
    rejected(&["-n", "128", "-f", "1.5"], "-f");
    rejected(&["-n", "128", "-f", "-0.1"], "-f");
    rejected(&["-n", "128", "-f", "abc"], "-f");
    rejected(&["-n", "10", "--weibull", "0,1", "--seq-time", "10"], "--weibull");
    rejected(&["-n", "10", "--weibull", "-0.1,1", "--seq-time", "10"], "λ");
    rejected(&["-n", "10", "--weibull", "0.1", "--seq-time", "10"], "--weibull");
    rejected(&["-n", "10", "--weibull", "0.1,1,2,3"], "--weibull");
    rejected(&["-n", "10", "--weibull", "0.1;1", "--seq-time", "10"], "--weibull");
    rejected(&["-n", "10", "--weibull", "0.1,1"], "--seq-time");
    rejected(&["-n", "10", "--weibull", "0.1,1,5", "--seq-time", "10"], "--seq-time");
    rejected(&["-n", "10", "--weibull", "0.1,1", "--seq-time", "0"], "--seq-time");
    rejected(
        &["-n", "10", "--weibull", "0.1,1", "--seq-time", "10", "--parallel-fraction", "2"],
        "--parallel-fraction",
    );
    rejected(&["-n", "10", "-f", "0.05", "--seq-time", "10"], "--seq-time");
    rejected(&["-n", "10", "-f", "0.05", "--weibull", "0.1,1,1"], "--weibull");
    rejected(&["-n", "10"], "-f");
    rejected(&["-n", "0", "-f", "0.05"], "-n");
    rejected(&["-n", "10", "-f", "0.05", "--max-r", "0"], "--max-r");
}
