//! A newcomer's first hour (issue 39): the README's quick start run as written (read from
//! README.md itself), what a machine without configuration is told, the supernode's printed
//! address, a grid short of slots, `-v`'s pids, the local limit kept local, `--help`'s links,
//! errors said once, an empty distributed pool, and `p2pmpi doctor`.

mod common;

use common::grid::{bin, TestGrid, LIMIT};
use common::{p2pmpi_tool, run_cmd, Outcome};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).expect("README.md")
}

/// The fenced blocks of `lang` in the README section that starts with `heading` (to the next
/// `## `).
fn blocks(readme: &str, heading: &str, lang: &str) -> Vec<String> {
    let start = readme.find(heading).unwrap_or_else(|| panic!("README has no {heading:?}"));
    let rest = &readme[start + heading.len()..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    let fence = format!("```{lang}\n");
    let mut out = Vec::new();
    let mut at = section;
    while let Some(i) = at.find(&fence) {
        let body = &at[i + fence.len()..];
        let end = body.find("```").expect("a closed block");
        out.push(body[..end].to_string());
        at = &body[end..];
    }
    out
}

/// A fresh, empty p2pmpi directory.
fn empty_home(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("p2pmpi-first-hour-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn in_home(home: &Path, cmd: &str, args: &[&str], limit: Duration) -> Outcome {
    run_cmd(Command::new(bin(cmd)).args(args).env("P2PMPI_HOME", home).env_remove("P2PMPI_CONF_FILE"), limit)
}

/// The quick start's two commands: on their own lines, the second the test suite's, and the
/// first one `cargo run` of the `p2pmpi` binary (found by cargo wherever `CARGO_TARGET_DIR`
/// puts it). Its arguments, run with the binary the tests built, with and without
/// `CARGO_TARGET_DIR` set, print the README's expected π lines. No command of the README
/// names `target/` but through `${CARGO_TARGET_DIR:-target}`.
#[test]
fn the_quick_start_runs_as_written_wherever_the_target_dir_is() {
    let text = readme();
    let quick = blocks(&text, "## Quick start", "sh");
    let lines: Vec<&str> = quick[0].lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 2, "two commands, one a line: {lines:?}");
    assert_eq!(lines[1], "cargo nextest run --workspace");
    let (cargo, args) = lines[0].split_once(" -- ").expect("cargo run … -- ARGS");
    let words: Vec<&str> = cargo.split_whitespace().collect();
    assert_eq!(&words[..2], ["cargo", "run"], "{cargo}");
    assert!(words.contains(&"--locked"), "{cargo}");
    let after = |flag: &str| words.iter().position(|w| *w == flag).map(|i| words[i + 1]);
    assert_eq!(after("-p"), Some("p2pmpi-cli"), "{cargo}");
    assert_eq!(after("--bin"), Some("p2pmpi"), "{cargo}");
    assert!(p2pmpi_tool().ends_with("p2pmpi"));
    for block in ["sh", "console", "text"].iter().flat_map(|l| blocks(&text, "# p2pmpi", l)) {
        let cleaned = block.replace("${CARGO_TARGET_DIR:-target}/", "");
        assert!(!cleaned.contains("target/"), "a command names target/ directly:\n{block}");
    }
    // The README's expected output: the π lines.
    let expected: Vec<String> = blocks(&text, "## Quick start", "text")[0]
        .lines()
        .filter(|l| l.starts_with("Pi is") || l.starts_with("Error is") || l.starts_with("Local grid stopped"))
        .map(str::to_string)
        .collect();
    assert_eq!(expected.len(), 3, "{expected:?}");
    let args: Vec<&str> = args.split_whitespace().collect();
    for target_dir in [None, Some("/nonexistent/elsewhere")] {
        let home = empty_home("quick");
        let mut cmd = Command::new(p2pmpi_tool());
        cmd.args(&args).env("P2PMPI_HOME", &home).env_remove("P2PMPI_CONF_FILE");
        match target_dir {
            Some(d) => cmd.env("CARGO_TARGET_DIR", d),
            None => cmd.env_remove("CARGO_TARGET_DIR"),
        };
        let out = run_cmd(&mut cmd, Duration::from_secs(120));
        out.assert_ok();
        for line in &expected {
            assert!(out.stdout.lines().any(|l| l == line), "{line:?} not printed:\n{}\n{}", out.stdout, out.stderr);
        }
        let _ = std::fs::remove_dir_all(&home);
    }
    // Installing the commands: the tested versions, the quick start's build reused.
    let install = blocks(&text, "## Your own program", "sh");
    assert!(install[0].trim().starts_with("cargo install --locked --path crates/p2pmpi-cli"), "{}", install[0]);
}

/// Without a configuration, the commands that need the grid secret name the file they looked
/// for and the command that writes it.
#[test]
fn no_configuration_names_the_file_and_p2pmpi_init() {
    let home = empty_home("noconf");
    let file = home.join("P2P-MPI.conf").display().to_string();
    for (cmd, args) in [("mpiboot", &[][..]), ("p2pmpi", &["grid", "status"][..]), ("p2pmpi", &["monitor"][..])] {
        let out = in_home(&home, cmd, args, Duration::from_secs(30));
        assert_eq!(out.code(), Some(1), "{cmd} {args:?}: {}", out.stderr);
        assert!(out.stderr.contains(&file) && out.stderr.contains("`p2pmpi init`"), "{cmd} {args:?}: {}", out.stderr);
    }
    // A file without the secret: named, with what to add.
    std::fs::write(home.join("P2P-MPI.conf"), "MAX_PROCESS_PER_JOB=2\n").unwrap();
    let out = in_home(&home, "mpiboot", &[], Duration::from_secs(30));
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("did you mean MAX_PROCESSES_PER_JOB?"), "{}", out.stderr);
    assert!(out.stderr.contains(&format!("GRID_SECRET is not set in {file}")), "{}", out.stderr);
    assert!(out.stderr.contains("p2pmpi init --force"), "{}", out.stderr);
    let _ = std::fs::remove_dir_all(&home);
}

/// A free TCP port on every address.
fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port()
}

/// A supernode listening on every address (no `EXTERNAL_IP`) prints, logs and answers with
/// its address in `SUPERNODE` (the one the peers use), not 127.0.0.1.
#[test]
fn the_supernode_names_the_address_it_serves() {
    let home = empty_home("snaddr");
    let port = free_port();
    let me = format!("127.0.0.7:{port}");
    std::fs::write(
        home.join("P2P-MPI.conf"),
        format!("GRID_SECRET=first hour tests secret\nSUPERNODE={me}\nSUPERNODE_PORT={port}\n"),
    )
    .unwrap();
    let start = in_home(&home, "runSupernode", &[], LIMIT);
    start.assert_ok();
    let stat = in_home(&home, "supernode_stat", &[], LIMIT);
    let log = std::fs::read_dir(home.join("tmp"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect::<String>();
    in_home(&home, "stopSupernode", &[], LIMIT).assert_ok();
    assert!(start.stdout.contains(&format!("on {me} (listening on every address")), "{}", start.stdout);
    stat.assert_ok();
    assert!(stat.stdout.contains(&format!("Supernode {me}")), "{}", stat.stdout);
    assert!(log.contains(&format!("reachable as {me}")), "{log}");
    let _ = std::fs::remove_dir_all(&home);
}

/// A grid with fewer slots than the job needs says that MAX_PROCESSES_PER_JOB is what limits
/// it, and what to change.
#[test]
fn a_grid_short_of_slots_names_max_processes_per_job() {
    let g = TestGrid::start("short", 2, &["--procs", "1"]);
    let tool = p2pmpi_tool();
    let out = g.run(&["-n", "4", "-w", "1", tool.to_str().unwrap(), "__pi"]);
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("the grid gives 2 process slot(s) on 2 host(s), the job needs 4"), "{}", out.stderr);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(last.contains("MAX_PROCESSES_PER_JOB process(es) (default 1; 2 host(s) give 2)"), "{}", out.stderr);
    assert!(last.contains("restart its daemon (mpihalt, mpiboot)"), "{}", out.stderr);
}

/// `-v` prints the pid of every process it starts, by rank and replica, on the grid and here.
#[test]
fn verbose_prints_every_process_pid_by_rank_and_replica() {
    let g = TestGrid::start("verbose", 2, &[]);
    let tool = p2pmpi_tool();
    let out = g.run(&["-v", "-n", "2", "-r", "2", tool.to_str().unwrap(), "__pi", "1000"]);
    out.assert_ok();
    assert!(out.stdout.contains("Pi is approximately 3.14159"), "{}", out.stdout);
    let started: Vec<&str> = out.stderr.lines().filter(|l| l.contains(" started ") && l.contains("(pid ")).collect();
    for who in ["rank 0 replica 0", "rank 0 replica 1", "rank 1 replica 0", "rank 1 replica 1"] {
        assert_eq!(
            started.iter().filter(|l| l.contains(&format!("p2pmpirun: {who} started "))).count(),
            1,
            "{who}: {started:?}"
        );
    }
    assert!(started.iter().any(|l| l.contains("rank 0 replica 0 started here")), "{started:?}");
    let local = common::run(&["--local", "-v", "-n", "2", tool.to_str().unwrap(), "__pi", "1000"], LIMIT);
    local.assert_ok();
    for who in ["rank 0", "rank 1"] {
        assert!(local.stderr.contains(&format!("p2pmpirun: {who} started (pid ")), "{}", local.stderr);
    }
}

/// The local limit (4096 processes) applies to local jobs only: `--grid -n 5000` is refused
/// for the want of a peer daemon, not because of it.
#[test]
fn the_local_process_limit_stays_local() {
    let out = common::run(&["--grid", "-n", "5000", "/bin/true"], LIMIT);
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(!out.stderr.contains("local run supports"), "{}", out.stderr);
    assert!(out.stderr.contains("no peer daemon runs here"), "{}", out.stderr);
    let out = common::run(&["--local", "-n", "5000", "/bin/true"], LIMIT);
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("-n 5000 is more processes than a local run supports (4096)"), "{}", out.stderr);
    assert!(out.stderr.contains("a grid job has no such limit"), "{}", out.stderr);
}

/// `p2pmpi --help` points at files of the repository, not at a map kept elsewhere.
#[test]
fn help_links_point_into_the_repository() {
    let out = run_cmd(Command::new(p2pmpi_tool()).arg("--help"), LIMIT);
    out.assert_ok();
    assert!(!out.stdout.contains("SPEC"), "{}", out.stdout);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let docs: Vec<&str> =
        out.stdout.split(|c: char| c.is_whitespace() || "(),".contains(c)).filter(|w| w.starts_with("docs/")).collect();
    assert!(docs.len() >= 2, "{}", out.stdout);
    for d in docs {
        assert!(root.join(d).exists(), "{d} named by --help does not exist");
    }
}

/// An error is said once: no `Connection refused (os error 111): Connection refused …`.
#[test]
fn a_refused_connection_is_said_once() {
    let home = empty_home("refused");
    let port = free_port();
    std::fs::write(
        home.join("P2P-MPI.conf"),
        format!("GRID_SECRET=first hour tests secret\nSUPERNODE=127.0.0.1:{port}\n"),
    )
    .unwrap();
    let out = in_home(&home, "supernode_stat", &[], LIMIT);
    assert_eq!(out.code(), Some(1), "{}", out.stderr);
    let line = out.stderr.lines().find(|l| l.contains("refused")).unwrap_or_else(|| panic!("{}", out.stderr));
    assert_eq!(line.matches("Connection refused").count(), 1, "{line}");
    let _ = std::fs::remove_dir_all(&home);
}

/// A distributed pool whose members all left lists nothing and exits 0, as a central one.
#[test]
fn an_empty_distributed_pool_lists_nothing() {
    let home = empty_home("pool");
    let conf = home.join("P2P-MPI.conf");
    std::fs::write(
        &conf,
        "GRID_SECRET=first hour tests secret\nSUPERNODE=127.0.0.1:9\nSUPERNODE_PORT=0\nEXTERNAL_IP=127.0.0.1\n",
    )
    .unwrap();
    let tool = |args: &[&str]| {
        let mut c = Command::new(p2pmpi_tool());
        c.args(args).env("P2PMPI_HOME", &home).env("P2PMPI_CONF_FILE", &conf);
        c
    };
    run_cmd(&mut tool(&["supernode", "start"]), LIMIT).assert_ok();
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home.join("supernode.json")).unwrap()).unwrap();
    let sn = state["addr"].as_str().unwrap().to_string();
    let sn_pid = state["pid"].as_u64().unwrap() as u32;
    let registry = ["--registry", &sn];
    let member = common::job::Job::spawn(&mut tool(
        &[&["pool", "join", "gone", "--impl", "distributed", "--bind", "127.0.5.1:0"][..], &registry[..]].concat(),
    ));
    member.wait_for(LIMIT, "its `me` line", |lines| lines.iter().any(|l| l.text.starts_with("me ")).then_some(()));
    let listed =
        run_cmd(&mut tool(&[&["pool", "list", "gone", "--impl", "distributed"][..], &registry[..]].concat()), LIMIT);
    p2pmpi_peer::os::signal(member.pid(), libc::SIGTERM).unwrap();
    let (code, _) = member.finish(LIMIT);
    let after =
        run_cmd(&mut tool(&[&["pool", "list", "gone", "--impl", "distributed"][..], &registry[..]].concat()), LIMIT);
    let _ = p2pmpi_peer::os::signal(sn_pid, libc::SIGKILL);
    listed.assert_ok();
    assert_eq!(listed.stdout.lines().count(), 1, "{}", listed.stdout);
    assert_eq!(code, 0);
    after.assert_ok();
    assert_eq!(after.stdout, "", "{}", after.stderr);
    let _ = std::fs::remove_dir_all(&home);
}

/// `p2pmpi doctor` on a peer of a local grid finds nothing wrong and says what it read; on a
/// machine without configuration it says what to do.
#[test]
fn doctor_checks_the_configuration_supernodes_daemon_and_host() {
    let g = TestGrid::start("doctor", 2, &[]);
    let out = g.on(1, "p2pmpi", &["doctor"]);
    assert_eq!(out.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    let conf = g.conf(1).display().to_string();
    for want in [
        format!("configuration {conf}"),
        "GRID_SECRET is set".to_string(),
        "answers in".to_string(),
        "this one among them".to_string(),
        "peer daemon   running (pid".to_string(),
        "MPD port".to_string(),
        "/dev/shm".to_string(),
        "landlock".to_string(),
        "No problem found.".to_string(),
    ] {
        assert!(out.stdout.contains(&want), "{want:?} not in\n{}", out.stdout);
    }
    let home = empty_home("doctor");
    let out = in_home(&home, "p2pmpi", &["doctor"], LIMIT);
    assert_eq!(out.code(), Some(1), "{}", out.stdout);
    assert!(out.stdout.contains("PROBLEM configuration"), "{}", out.stdout);
    assert!(out.stdout.contains("-> create it with `p2pmpi init`"), "{}", out.stdout);
    let _ = std::fs::remove_dir_all(&home);
}
