//! The README's two-machine grid with the defaults it shows (issue 39), in network namespaces
//! m1 = 10.0.1.1 and m2 = 10.0.1.2: the supernode prints the address it serves (SUPERNODE's,
//! not 127.0.0.1), the README's `p2pmpirun -n N` fails with the default
//! `MAX_PROCESSES_PER_JOB=1` naming that key and what to change, and runs once the README's
//! setting is made. The job size and the setting are read from README.md itself. Needs root,
//! `ip` and `nft` (skipped otherwise, failing under CI).

mod common;

use common::netns::{available, Daemons, Netns, Site};
use std::path::Path;
use std::time::{Duration, Instant};

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).expect("README.md")
}

/// The text between `before` and the next backquote after it.
fn quoted_after<'a>(text: &'a str, before: &str) -> &'a str {
    let i = text.find(before).unwrap_or_else(|| panic!("README has no {before:?}")) + before.len();
    let rest = &text[i..];
    &rest[..rest.find('`').expect("a closing backquote")]
}

#[test]
fn the_readme_two_machine_example_runs_with_the_settings_it_shows() {
    if !available() {
        return;
    }
    let text = readme();
    // "**Run** from any peer: `p2pmpirun -n 4 ./myprog`", and the setting it needs.
    let run_line = quoted_after(&text, "**Run** from any peer: `");
    let n = run_line.split_whitespace().nth(2).expect("p2pmpirun -n N PROGRAM").to_string();
    let setting = quoted_after(&text, "for\n   `-n 4` below, set `").to_string();
    assert!(setting.starts_with("MAX_PROCESSES_PER_JOB="), "{setting}");
    assert_eq!(n, "4", "{run_line}");

    let net = Netns::new("firsthour", &[Site::open(&["m1", "m2"])]);
    let dir = std::env::temp_dir().join(format!("{}homes", net.prefix));
    let _ = std::fs::remove_dir_all(&dir);
    let home = |h: &str| dir.join(h);
    let _guard = Daemons(vec![home("m1"), home("m2")]);
    let on = |h: &str, cmd: &str, args: &[&str]| {
        let mut c = net.exec(h, common::grid::bin(cmd));
        c.args(args).env("P2PMPI_HOME", home(h)).env_remove("P2PMPI_CONF_FILE");
        common::run_cmd(&mut c, Duration::from_secs(90))
    };
    let sn = format!("{}:9700", net.addr("m1"));
    on("m1", "p2pmpi", &["init", "--supernode", &sn]).assert_ok();
    std::fs::create_dir_all(home("m2")).unwrap();
    std::fs::copy(home("m1").join("P2P-MPI.conf"), home("m2").join("P2P-MPI.conf")).unwrap();

    // The supernode listens on every address and names the one the peers use.
    let started = on("m1", "runSupernode", &[]);
    started.assert_ok();
    assert!(started.stdout.contains(&format!("on {sn} (listening on every address")), "{}", started.stdout);
    let boot = |h: &str| on(h, "mpiboot", &[]).assert_ok().stdout.clone();
    boot("m1");
    boot("m2");
    let stat = on("m1", "supernode_stat", &[]);
    stat.assert_ok();
    assert!(stat.stdout.contains(&format!("Supernode {sn}")), "{}", stat.stdout);
    let both_known = || {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let hosts = on("m2", "mpihost", &[]);
            if hosts.stdout.lines().any(|l| l.starts_with(&net.addr("m1").to_string()) && l.contains(" true ")) {
                return;
            }
            assert!(Instant::now() < deadline, "m2 never listed m1 alive:\n{}", hosts.stdout);
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    both_known();

    // The README's run with the defaults: 2 slots for 4 processes, and the reason said.
    let tool = common::p2pmpi_tool();
    let job = [&["-n", &n][..], &[tool.to_str().unwrap(), "__pi", "1000"][..]].concat();
    let short = on("m2", "p2pmpirun", &job);
    assert_eq!(short.code(), Some(2), "{}", short.stderr);
    assert!(
        short.stderr.contains("the grid gives 2 process slot(s) on 2 host(s), the job needs 4"),
        "{}",
        short.stderr
    );
    assert!(short.stderr.contains("MAX_PROCESSES_PER_JOB process(es) (default 1"), "{}", short.stderr);

    // The README's setting, made on both machines, the daemons restarted: the job runs.
    for h in ["m1", "m2"] {
        let conf = home(h).join("P2P-MPI.conf");
        let text = std::fs::read_to_string(&conf).unwrap();
        let key = setting.split('=').next().unwrap();
        let edited: Vec<String> = text
            .lines()
            .map(|l| if l.starts_with(&format!("{key}=")) { setting.clone() } else { l.to_string() })
            .collect();
        assert!(edited.contains(&setting), "p2pmpi init writes every key:\n{text}");
        std::fs::write(&conf, edited.join("\n") + "\n").unwrap();
        on(h, "mpihalt", &[]).assert_ok();
        boot(h);
    }
    both_known();
    let run = on("m2", "p2pmpirun", &job);
    run.assert_ok();
    assert!(run.stdout.contains("Pi is approximately 3.14159"), "{}\n{}", run.stdout, run.stderr);
    on("m2", "mpihalt", &[]).assert_ok();
    on("m1", "mpihalt", &[]).assert_ok();
    on("m1", "stopSupernode", &[]).assert_ok();
    let _ = std::fs::remove_dir_all(&dir);
}
