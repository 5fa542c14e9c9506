//! `cargo p2pmpirun`: the subcommand builds with the cargo named by `CARGO` (as cargo itself
//! sets it for its subcommands), then runs what cargo reports having built with p2pmpirun.
//! Here `CARGO` is a stand-in script that records its arguments and reports a real example
//! program, so the test exercises the whole path without rebuilding the workspace.
#![forbid(unsafe_code)]

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

fn subcommand() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cargo-p2pmpirun"))
}

/// A stand-in for cargo in `dir`: writes its arguments to `dir/args`, prints cargo's JSON
/// messages for `exe` (or fails with `code`).
fn fake_cargo(dir: &Path, exe: &Path, code: i32) -> PathBuf {
    let script = dir.join("cargo");
    let artifact = serde_json::json!({
        "reason": "compiler-artifact",
        "target": {"name": "pi", "kind": ["example"]},
        "executable": exe,
    });
    let lib = serde_json::json!({"reason": "compiler-artifact", "target": {"name": "p2pmpi"}, "executable": null});
    let body = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{args}'\necho 'Compiling (fake)' >&2\n\
         if [ {code} -ne 0 ]; then echo 'error: could not compile' >&2; exit {code}; fi\n\
         echo '{lib}'\necho '{artifact}'\necho '{{\"reason\":\"build-finished\",\"success\":true}}'\n",
        args = dir.join("args").display(),
    );
    std::fs::write(&script, body).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("p2pmpi-cargo-sub-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn cargo_p2pmpirun_builds_then_runs_the_example_on_n_processes() {
    let dir = scratch("ok");
    let cargo = fake_cargo(&dir, &example("pi"), 0);
    let o = run_cmd(
        Command::new(subcommand())
            .args(["p2pmpirun", "-n", "3", "--example", "pi", "--release", "-t", "--local", "--", "extra"])
            .env("CARGO", &cargo)
            .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests"),
        T,
    );
    o.assert_ok();
    assert!(o.stdout.contains("Pi is approximately 3.14159265"), "{}", o.stdout);
    // -t (a p2pmpirun option) reached the launcher: lines are tagged with the rank.
    assert!(o.stdout.lines().any(|l| l.starts_with("[0]")), "{}", o.stdout);
    let args = std::fs::read_to_string(dir.join("args")).unwrap();
    let args: Vec<&str> = args.lines().collect();
    assert_eq!(args, ["build", "--message-format=json-render-diagnostics", "--example", "pi", "--release"]);
    assert!(o.stderr.contains("Compiling (fake)"), "cargo's progress reaches the terminal: {}", o.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_build_runs_nothing_and_keeps_cargos_exit_code() {
    let dir = scratch("fail");
    let cargo = fake_cargo(&dir, &example("pi"), 101);
    let o = run_cmd(
        Command::new(subcommand())
            .args(["p2pmpirun", "-n", "2", "--bin", "solver"])
            .env("CARGO", &cargo)
            .env("P2PMPI_HOME", "/nonexistent/p2pmpi-local-tests"),
        T,
    );
    assert_eq!(o.code(), Some(101), "stderr: {}", o.stderr);
    assert!(o.stderr.contains("could not compile"), "{}", o.stderr);
    assert!(!o.stdout.contains("Pi is"), "nothing ran: {}", o.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_prints_usage_and_builds_nothing() {
    let dir = scratch("help");
    let cargo = fake_cargo(&dir, &example("pi"), 0);
    let o = run_cmd(Command::new(subcommand()).args(["p2pmpirun", "--help"]).env("CARGO", &cargo), T);
    o.assert_ok();
    assert!(o.stdout.contains("Usage: cargo p2pmpirun -n N"), "{}", o.stdout);
    assert!(!dir.join("args").exists(), "--help must not build");
    let o = run_cmd(Command::new(subcommand()).args(["p2pmpirun", "--bin"]).env("CARGO", &cargo), T);
    assert_eq!(o.code(), Some(2));
    assert!(o.stderr.contains("option --bin needs a value"), "{}", o.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}
