//! The README's "Your own program", as written: a crate outside this repository with the
//! README's dependency lines (a path to the clone, then a git URL of it) and the README's
//! program must compile. The lines and the program are read from README.md itself, with the
//! example location `/home/me/src/p2pmpi` replaced by this clone's.
#![forbid(unsafe_code)]

mod common;
use common::run_cmd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(900);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The fenced blocks of `lang` in the README section that starts with `heading`.
fn blocks(readme: &str, heading: &str, lang: &str) -> Vec<String> {
    let start = readme.find(heading).unwrap_or_else(|| panic!("README has no {heading:?}"));
    let section = &readme[start..];
    let section = &section[..section[heading.len()..].find("\n## ").map_or(section.len(), |i| i + heading.len())];
    let mut out = Vec::new();
    let mut rest = section;
    let fence = format!("```{lang}\n");
    while let Some(i) = rest.find(&fence) {
        let body = &rest[i + fence.len()..];
        let end = body.find("```").expect("closed block");
        out.push(body[..end].to_string());
        rest = &body[end..];
    }
    out
}

fn check(dir: &Path, dependency: &str, program: &str, target: &Path) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"myprog\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n{dependency}\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("src/main.rs"), program).unwrap();
    // The clone's lock file: the same versions as the workspace, nothing to fetch.
    std::fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Offline for the path line (every dependency is in the lock file and cargo's cache);
    // cargo cannot check a git repository out offline, even a local one, so the git line
    // may reach the registry's index.
    let mut cmd = Command::new(cargo);
    cmd.args(["check", "--quiet"]).current_dir(dir).env("CARGO_TARGET_DIR", target);
    if !dependency.contains("git = ") {
        cmd.arg("--offline");
    }
    let o = run_cmd(&mut cmd, T);
    assert!(o.status.success(), "{dependency}\nstdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
}

#[test]
fn the_readme_dependency_lines_and_program_compile_outside_the_repository() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let toml = blocks(&readme, "## Your own program", "toml");
    let rust = blocks(&readme, "## Your own program", "rust");
    assert_eq!((toml.len(), rust.len()), (1, 1), "one dependency block and one program in the section");
    let lines: Vec<&str> = toml[0].lines().filter(|l| l.starts_with("mpi = ")).collect();
    assert_eq!(lines.len(), 2, "a path line and a git line: {}", toml[0]);
    let here = root().display().to_string();
    // The crates outside the repository; their build directory under this one's target
    // directory (kept between runs).
    let scratch = std::env::temp_dir().join(format!("p2pmpi-readme-dependency-{}", std::process::id()));
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("readme-dependency");
    for (i, line) in lines.iter().enumerate() {
        let line = line.replace("/home/me/src/p2pmpi", &here);
        let not_a_clone = !root().join(".git").exists();
        if line.contains("git = ") && !common::require(not_a_clone.then(|| "a git clone for the git line".to_string()))
        {
            continue;
        }
        check(&scratch.join(format!("crate{i}")), &line, &rust[0], &target);
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
