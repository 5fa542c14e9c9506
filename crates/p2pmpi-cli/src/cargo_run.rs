//! `cargo p2pmpirun`: build a binary or an example of the current package with cargo, then
//! run it with `p2pmpirun`, in one step (what rsmpi's `cargo mpirun` does for mpiexec).
//!
//! ```text
//! cargo p2pmpirun -n 4 --example pi
//! cargo p2pmpirun -n 2 --local --release --bin solver -- input.dat 100
//! ```
//!
//! The arguments are split three ways: cargo's build options (`--example`, `--bin`,
//! `--release`, `--profile`, `-p/--package`, `-F/--features`, `--all-features`,
//! `--no-default-features`, `--manifest-path`, `--target-dir`, `--offline`, `--locked`,
//! `--frozen`, `-q/--quiet`) go to `cargo build`; everything else before `--` is an option of
//! `p2pmpirun`; what follows `--` is the program's own arguments. The executable is the one
//! cargo reports building (its JSON messages), so workspaces, profiles and target
//! directories need no guessing. Cargo's own diagnostics and progress stay on the terminal.
//!
//! Cargo runs an external subcommand as `cargo-p2pmpirun p2pmpirun ARGS…` with the `CARGO`
//! variable naming itself; that cargo is the one used to build.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// cargo's build options taken by the subcommand: (short, long, takes a value).
const CARGO_OPTIONS: &[(Option<&str>, &str, bool)] = &[
    (None, "--example", true),
    (None, "--bin", true),
    (None, "--release", false),
    (None, "--profile", true),
    (Some("-p"), "--package", true),
    (Some("-F"), "--features", true),
    (None, "--all-features", false),
    (None, "--no-default-features", false),
    (None, "--manifest-path", true),
    (None, "--target-dir", true),
    (None, "--offline", false),
    (None, "--locked", false),
    (None, "--frozen", false),
    (Some("-q"), "--quiet", false),
];

const HELP: &str = "\
Build a binary or an example with cargo, then run it with p2pmpirun

Usage: cargo p2pmpirun -n N [CARGO OPTIONS] [P2PMPIRUN OPTIONS] [-- PROGRAM ARGS...]

Examples:
  cargo p2pmpirun -n 4 --example pi
  cargo p2pmpirun -n 2 --local --release --bin solver -- input.dat 100

Cargo options (passed to `cargo build`):
      --example NAME         Build and run this example
      --bin NAME             Build and run this binary
      --release              Build with the release profile
      --profile NAME         Build with this profile
  -p, --package SPEC         The package to build
  -F, --features FEATURES    Features to activate
      --all-features         Activate every feature
      --no-default-features  Do not activate the default feature
      --manifest-path PATH   The Cargo.toml to use
      --target-dir DIR       The target directory
      --offline, --locked, --frozen
  -q, --quiet                No cargo output but errors

Every other option before `--` is p2pmpirun's (-n, -r, --local, -v, -x, ...: see
`p2pmpirun --help`); the arguments after `--` are the program's.
";

/// The parsed command line.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Arguments for `cargo build`.
    pub cargo: Vec<String>,
    /// Options for `p2pmpirun` (before the program).
    pub run: Vec<String>,
    /// The program's arguments.
    pub program: Vec<String>,
    /// Whether `--example` or `--bin` was given.
    pub target_chosen: bool,
}

/// Splits the arguments (without the program name and cargo's `p2pmpirun` word).
pub fn split(args: &[String]) -> Result<Split, String> {
    let mut s = Split::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            s.program.extend(args[i + 1..].iter().cloned());
            break;
        }
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let known = CARGO_OPTIONS.iter().find(|(short, long, _)| *long == name || *short == Some(name));
        match known {
            Some((_, long, takes_value)) => {
                s.target_chosen |= matches!(*long, "--example" | "--bin");
                if *takes_value {
                    let value = match inline {
                        Some(v) => v,
                        None => {
                            i += 1;
                            args.get(i).cloned().ok_or_else(|| format!("option {long} needs a value"))?
                        }
                    };
                    s.cargo.push(long.to_string());
                    s.cargo.push(value);
                } else if inline.is_some() {
                    return Err(format!("option {long} takes no value"));
                } else {
                    s.cargo.push(long.to_string());
                }
            }
            None => s.run.push(a.clone()),
        }
        i += 1;
    }
    Ok(s)
}

/// The executable cargo built: from its JSON messages (`compiler-artifact` with an
/// `executable`). Several executables and no `--bin`/`--example` is an error naming them.
pub fn executable_from_messages(lines: &[String]) -> Result<String, String> {
    let mut found: Vec<(String, String)> = Vec::new();
    for line in lines {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if v.get("reason").and_then(|r| r.as_str()) != Some("compiler-artifact") {
            continue;
        }
        let Some(exe) = v.get("executable").and_then(|e| e.as_str()) else { continue };
        let name = v.pointer("/target/name").and_then(|n| n.as_str()).unwrap_or("?").to_string();
        found.push((name, exe.to_string()));
    }
    match found.len() {
        0 => Err("cargo built no executable: name one with --bin NAME or --example NAME".into()),
        1 => Ok(found.remove(0).1),
        _ => {
            let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
            Err(format!(
                "cargo built {} executables ({}): choose one with --bin NAME or --example NAME",
                found.len(),
                names.join(", ")
            ))
        }
    }
}

/// The subcommand's entry point: returns the exit code.
pub fn main() -> i32 {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo p2pmpirun …` runs `cargo-p2pmpirun p2pmpirun …`.
    if args.first().map(String::as_str) == Some("p2pmpirun") {
        args.remove(0);
    }
    let before_dashes = args.iter().take_while(|a| *a != "--");
    for a in before_dashes {
        match a.as_str() {
            "-h" | "--help" => {
                print!("{HELP}");
                return 0;
            }
            "-V" | "--version" => {
                println!("cargo-p2pmpirun {}", env!("CARGO_PKG_VERSION"));
                return 0;
            }
            _ => {}
        }
    }
    let split = match split(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cargo p2pmpirun: {e}\n\n{HELP}");
            return 2;
        }
    };
    let exe = match build(&split) {
        Ok(exe) => exe,
        Err((code, msg)) => {
            if !msg.is_empty() {
                eprintln!("cargo p2pmpirun: {msg}");
            }
            return code;
        }
    };
    let mut run = split.run;
    run.push(exe);
    run.extend(split.program);
    crate::launcher::main_with_args("p2pmpirun", &run)
}

/// Runs `cargo build` and returns the executable it built, or (exit code, message).
fn build(split: &Split) -> Result<String, (i32, String)> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(&cargo);
    cmd.arg("build").arg("--message-format=json-render-diagnostics").args(&split.cargo);
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).stdin(Stdio::null());
    let mut child =
        cmd.spawn().map_err(|e| (1, format!("cannot run {}: {e}", std::path::Path::new(&cargo).display())))?;
    let stdout = child.stdout.take().expect("piped");
    let lines: Vec<String> = BufReader::new(stdout).lines().map_while(Result::ok).collect();
    let status = child.wait().map_err(|e| (1, format!("cargo build: {e}")))?;
    if !status.success() {
        return Err((status.code().unwrap_or(1), String::new()));
    }
    let exe = executable_from_messages(&lines).map_err(|e| (2, e))?;
    if !split.target_chosen {
        // One executable built and none named: run it, but say which.
        eprintln!("cargo p2pmpirun: running {exe}");
    }
    Ok(exe)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn arguments_are_split_between_cargo_p2pmpirun_and_the_program() {
        let got = split(&s(&[
            "-n",
            "4",
            "--example",
            "pi",
            "--release",
            "-r",
            "2",
            "--features=fast",
            "-p",
            "demo",
            "--local",
            "--",
            "--release",
            "x",
        ]))
        .unwrap();
        assert_eq!(got.cargo, s(&["--example", "pi", "--release", "--features", "fast", "--package", "demo"]));
        assert_eq!(got.run, s(&["-n", "4", "-r", "2", "--local"]));
        assert_eq!(got.program, s(&["--release", "x"]), "after -- everything is the program's");
        assert!(got.target_chosen);
    }

    #[test]
    fn a_cargo_option_without_its_value_or_with_a_stray_one_is_an_error() {
        assert_eq!(split(&s(&["-n", "2", "--bin"])).unwrap_err(), "option --bin needs a value");
        assert_eq!(split(&s(&["--release=yes"])).unwrap_err(), "option --release takes no value");
    }

    #[test]
    fn the_executable_is_read_from_cargos_messages() {
        let art = |name: &str, exe: Option<&str>| {
            serde_json::json!({"reason": "compiler-artifact", "target": {"name": name}, "executable": exe}).to_string()
        };
        let lines = vec![
            "not json".to_string(),
            serde_json::json!({"reason": "build-finished", "success": true}).to_string(),
            art("p2pmpi", None),
            art("pi", Some("/t/debug/examples/pi")),
        ];
        assert_eq!(executable_from_messages(&lines).unwrap(), "/t/debug/examples/pi");
        let two = vec![art("a", Some("/t/a")), art("b", Some("/t/b"))];
        let e = executable_from_messages(&two).unwrap_err();
        assert!(e.contains("2 executables (a, b)") && e.contains("--bin NAME"), "{e}");
        assert!(executable_from_messages(&[art("lib", None)]).unwrap_err().contains("no executable"));
    }
}
