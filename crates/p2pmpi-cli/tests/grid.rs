//! The grid with real daemons: local grids of a supernode and peers, each peer on its own
//! loopback address, driven by the commands a user types.
#![forbid(unsafe_code)]

mod common;

use common::grid::{bin, wait_for, TestGrid, LIMIT};
use common::{example, processes_with, run_cmd, wait_no_processes};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// rank → host from `whereami` output.
/// A file of `len` pseudo-random bytes (nothing for compression or the FT cache to save).
fn incompressible_file(path: &std::path::Path, len: usize) -> std::path::PathBuf {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ len as u64;
    for _ in 0..len / 8 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        f.write_all(&x.to_le_bytes()).unwrap();
    }
    path.to_path_buf()
}

fn placement(out: &str) -> BTreeMap<usize, String> {
    out.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("rank ")?;
            let mut w = rest.split_whitespace();
            let rank = w.next()?.parse().ok()?;
            let host = rest.split(" on ").nth(1)?.split_whitespace().next()?.to_string();
            Some((rank, host))
        })
        .collect()
}

fn per_host(p: &BTreeMap<usize, String>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for h in p.values() {
        *m.entry(h.clone()).or_insert(0) += 1;
    }
    m
}

#[test]
fn pi_runs_on_four_peers_found_through_the_supernode() {
    let g = TestGrid::start("pi", 4, &["--procs", "1"]);
    let hosts = g.wait_hosts(1, 3);
    for ip in ["127.0.0.3", "127.0.0.4", "127.0.0.5"] {
        assert!(hosts.contains(ip), "peer 1 discovered {ip} through the supernode:\n{hosts}");
    }
    let sn = g.on_home(&g.dir.join("supernode"), "supernode_stat", &[]);
    sn.assert_ok();
    assert!(sn.stdout.contains("Total : 4 MPD known."), "{}", sn.stdout);

    let pi = example("pi");
    let out = g.run(&["-n", "4", pi.to_str().unwrap()]);
    out.assert_ok();
    assert!(out.stdout.contains("3.14159"), "{}", out.stdout);

    let w = example("whereami");
    let out = g.run(&["-n", "4", w.to_str().unwrap()]);
    out.assert_ok();
    let p = placement(&out.stdout);
    assert_eq!(p.len(), 4, "{}", out.stdout);
    assert_eq!(p[&0], "127.0.0.2", "rank 0 runs on the submitter");
    assert_eq!(per_host(&p).len(), 4, "one process per peer (P = 1): {p:?}");
}

#[test]
fn spread_and_concentrate_place_as_the_thesis_says() {
    let g = TestGrid::start("strategies", 4, &["--procs", "2"]);
    g.wait_hosts(1, 3);
    let w = example("whereami");
    let spread = g.run(&["-n", "4", "-a", "spread", w.to_str().unwrap()]);
    spread.assert_ok();
    let p = placement(&spread.stdout);
    assert_eq!(p[&0], "127.0.0.2");
    assert!(per_host(&p).values().all(|&k| k == 1), "spread: one per host: {p:?}");

    let conc = g.run(&["-n", "4", "-a", "gather", w.to_str().unwrap()]);
    conc.assert_ok();
    let p = placement(&conc.stdout);
    assert_eq!(p[&0], "127.0.0.2");
    let counts = per_host(&p);
    assert_eq!(counts.len(), 2, "concentrate fills hosts up to P = 2: {p:?}");
    assert!(counts.values().all(|&k| k == 2), "{p:?}");
    assert_eq!(counts.get("127.0.0.2"), Some(&2), "the submitter is filled first: {p:?}");

    // -r 2: the two copies of every rank on two different hosts (shown by --dry-run).
    let dry = g.run(&["-n", "3", "-r", "2", "--dry-run", w.to_str().unwrap()]);
    dry.assert_ok();
    let mut copies: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for l in dry.stdout.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        for r in &f[2..] {
            assert!(
                copies.entry(r.to_string()).or_default().insert(f[0].to_string()),
                "two copies on one host: {}",
                dry.stdout
            );
        }
    }
    assert_eq!(copies.len(), 3, "{}", dry.stdout);
    assert!(copies.values().all(|h| h.len() == 2), "{}", dry.stdout);
}

#[test]
fn staging_uses_the_cache_and_input_files_reach_every_process() {
    let g = TestGrid::start("staging", 3, &["--procs", "1"]);
    g.wait_hosts(1, 2);
    let w = example("whereami");
    let input = g.dir.join("input.txt");
    std::fs::write(&input, "hello from the submitter\n").unwrap();
    // Run from the input's directory so rank 0 (on the submitter) finds it too.
    let first = run_cmd(
        Command::new(bin("p2pmpirun"))
            .args(["-v", "-n", "3", "-l", input.to_str().unwrap(), w.to_str().unwrap(), "input.txt"])
            .current_dir(&g.dir)
            .env("P2PMPI_HOME", g.home(1)),
        LIMIT,
    );
    first.assert_ok();
    assert_eq!(first.stdout.matches("read input.txt: hello from the submitter").count(), 3, "{}", first.stdout);
    assert_eq!(first.stderr.matches("0 cached, 2 sent").count(), 2, "{}", first.stderr);
    let second = run_cmd(
        Command::new(bin("p2pmpirun"))
            .args(["-v", "-n", "3", "-l", input.to_str().unwrap(), w.to_str().unwrap(), "input.txt"])
            .current_dir(&g.dir)
            .env("P2PMPI_HOME", g.home(1)),
        LIMIT,
    );
    second.assert_ok();
    assert_eq!(
        second.stderr.matches("2 cached, 0 sent").count(),
        2,
        "unchanged files are not sent again: {}",
        second.stderr
    );
    // Job directories are cleaned up after the job.
    for peer in 2..=3 {
        let jobs = g.home(peer).join("jobs");
        wait_for(|| (std::fs::read_dir(&jobs).map(|d| d.count()).unwrap_or(0) == 0).then_some(()));
    }
}

#[test]
fn reservation_limits_and_cancellation() {
    // J = 1: one application per host at a time; P = 1.
    let g = TestGrid::start("limits", 3, &["--procs", "1", "--max-jobs", "1"]);
    g.wait_hosts(1, 2);
    let w = example("whereami");
    // P = 1 on 3 hosts: 4 processes cannot fit.
    let t = Instant::now();
    let too_many = g.run(&["-n", "4", "-w", "1", w.to_str().unwrap()]);
    assert!(!too_many.status.success());
    assert!(too_many.stderr.contains("not enough peers"), "{}", too_many.stderr);
    assert!(too_many.stderr.contains("3 host(s) accepted"), "{}", too_many.stderr);
    assert!(t.elapsed() < Duration::from_secs(15), "-w 1 gives up soon: {:?}", t.elapsed());

    // Overbooking: -n 2 books every host (2 + 3), keeps 2 and cancels the rest; all are
    // free again at once (a leaked reservation would make the next -n 3 fail under J = 1).
    for _ in 0..2 {
        g.run(&["-n", "2", w.to_str().unwrap()]).assert_ok();
        g.run(&["-n", "3", "-w", "2", w.to_str().unwrap()]).assert_ok();
    }

    // A running job holds its hosts: under J = 1 a second one cannot get them.
    let holder = std::thread::spawn({
        let w = w.clone();
        let home = g.home(1);
        move || {
            run_cmd(
                Command::new(bin("p2pmpirun"))
                    .args(["-n", "3", w.to_str().unwrap(), "--hold", "4000"])
                    .env("P2PMPI_HOME", home),
                LIMIT,
            )
        }
    });
    wait_for(|| {
        let s = g.on(2, "mpistat", &[]);
        s.stdout.contains("Application Name : whereami").then_some(())
    });
    let blocked = g.run(&["-n", "2", "-w", "1", w.to_str().unwrap()]);
    assert!(!blocked.status.success(), "{}", blocked.stdout);
    assert!(
        blocked.stderr.contains("MAX_JOBS (1) reached") || blocked.stderr.contains("not enough peers"),
        "{}",
        blocked.stderr
    );
    holder.join().unwrap().assert_ok();
    g.run(&["-n", "3", "-w", "3", w.to_str().unwrap()]).assert_ok();
}

#[test]
fn host_deny_and_host_allow_are_obeyed() {
    let g = TestGrid::start("deny", 3, &["--procs", "1"]);
    g.wait_hosts(1, 2);
    g.reconfigure(3, &["HOST_DENY=127.0.0.2"]);
    g.wait_hosts(1, 2);
    let w = example("whereami");
    let out = g.run(&["-n", "3", "-w", "1", w.to_str().unwrap()]);
    assert!(!out.status.success(), "peer 3 denies peer 1: {}", out.stdout);
    assert!(out.stderr.contains("2 host(s) accepted"), "{}", out.stderr);
    assert!(g.log(3).contains("127.0.0.2 is denied"), "the RS logs the refusal");
    let ok = g.run(&["-n", "2", w.to_str().unwrap()]);
    ok.assert_ok();
    assert_eq!(placement(&ok.stdout)[&1], "127.0.0.3", "{}", ok.stdout);

    // HOST_ALLOW without peer 1's address refuses it too; with it, accepts.
    g.reconfigure(2, &["HOST_ALLOW=127.0.0.9"]);
    g.wait_hosts(1, 2);
    let out = g.run(&["-n", "2", "-w", "1", w.to_str().unwrap()]);
    assert!(!out.status.success(), "{}", out.stdout);
    g.reconfigure(2, &["HOST_ALLOW=127.0.0.9,127.0.0."]);
    g.wait_hosts(1, 2);
    g.run(&["-n", "2", "-w", "3", w.to_str().unwrap()]).assert_ok();
}

#[test]
fn a_peer_joins_and_one_leaves() {
    let g = TestGrid::start("churn", 2, &["--procs", "1"]);
    g.wait_hosts(1, 1);
    // A third peer, configured like the others on its own address.
    let home3 = g.dir.join("peer3");
    std::fs::create_dir_all(&home3).unwrap();
    let conf =
        std::fs::read_to_string(g.conf(2)).unwrap().replace("127.0.0.3", "127.0.0.4").replace("/peer2/", "/peer3/");
    std::fs::write(home3.join("P2P-MPI.conf"), conf).unwrap();
    let boot = g.on_home(&home3, "mpiboot", &[]);
    boot.assert_ok();
    assert!(boot.stdout.contains("MPD started"), "{}", boot.stdout);
    let hosts = g.wait_hosts(1, 2);
    assert!(hosts.contains("127.0.0.4"), "{hosts}");
    let w = example("whereami");
    g.run(&["-n", "3", w.to_str().unwrap()]).assert_ok();
    // It leaves: the supernode and peer 1 forget it.
    let halt = g.on_home(&home3, "mpihalt", &[]);
    halt.assert_ok();
    assert!(halt.stdout.contains("P2P-MPI Shutdown .. Completed"), "{}", halt.stdout);
    let hosts = g.wait_hosts(1, 1);
    assert!(!hosts.contains("127.0.0.4"), "{hosts}");
    let out = g.run(&["-n", "3", "-w", "1", w.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(out.stderr.contains("2 host(s) accepted"), "{}", out.stderr);
}

#[test]
fn peers_keep_working_from_their_cache_when_the_supernode_is_down() {
    let g = TestGrid::start("sndown", 3, &["--procs", "1"]);
    g.wait_hosts(1, 2);
    g.on_home(&g.dir.join("supernode"), "stopSupernode", &[]).assert_ok();
    let pi = example("pi");
    g.run(&["-n", "3", pi.to_str().unwrap()]).assert_ok();
    // Even a peer restarted meanwhile finds the others in its persisted cache.
    g.on(1, "mpihalt", &[]).assert_ok();
    g.on(1, "mpiboot", &[]).assert_ok();
    let out = g.run(&["-n", "3", pi.to_str().unwrap()]);
    out.assert_ok();
    assert!(out.stdout.contains("3.14159"), "{}", out.stdout);
}

#[test]
fn a_peer_killed_during_start_up_fails_the_launch_cleanly() {
    let g = TestGrid::start("killed", 3, &["--procs", "1", "--max-jobs", "1"]);
    g.wait_hosts(1, 2);
    let w = example("whereami");
    let marker = common::marker("killed");
    let job = std::thread::spawn({
        let (w, home, marker) = (w.clone(), g.home(1), marker.clone());
        move || {
            run_cmd(
                Command::new(bin("p2pmpirun"))
                    .args(["-n", "3", w.to_str().unwrap(), "--pre-init-sleep", "3000", &marker])
                    .env("P2PMPI_HOME", home),
                LIMIT,
            )
        }
    });
    // Once peer 3 started its process, its daemon dies.
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(g.home(3).join("mpd.json")).unwrap()).unwrap();
    let pid3 = st["pid"].as_u64().unwrap() as u32;
    wait_for(|| (processes_with(&marker).len() >= 3).then_some(()));
    common::kill9(pid3);
    let out = job.join().unwrap();
    assert!(!out.status.success());
    assert!(out.stderr.contains("lost contact with host 127.0.0.4"), "{}", out.stderr);
    assert!(wait_no_processes(&marker, Duration::from_secs(10)).is_empty(), "no process left behind");
    // Every reservation was released: peers 1 and 2 take a new job at once (J = 1).
    g.run(&["-n", "2", "-w", "3", w.to_str().unwrap()]).assert_ok();
}

#[test]
fn the_grid_secret_is_required_and_garbage_is_survived() {
    let g = TestGrid::start("secure", 2, &["--procs", "1"]);
    g.wait_hosts(1, 1);
    // A command with the wrong secret is refused.
    let bad = g.dir.join("bad.conf");
    let conf = std::fs::read_to_string(g.conf(1)).unwrap();
    let conf: String = conf
        .lines()
        .map(|l| if l.starts_with("GRID_SECRET") { "GRID_SECRET=not-the-secret".to_string() } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&bad, conf).unwrap();
    let out = run_cmd(Command::new(bin("mpihost")).env("P2PMPI_HOME", g.home(1)).env("P2PMPI_CONF_FILE", &bad), LIMIT);
    assert!(!out.status.success());
    assert!(out.stderr.contains("handshake"), "{}", out.stderr);

    // Garbage on every port of peer 2 and of the supernode.
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(g.home(2).join("mpd.json")).unwrap()).unwrap();
    let sn: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(g.dir.join("supernode/supernode.json")).unwrap()).unwrap();
    let mut ports: Vec<SocketAddr> = ["mpd_port", "rs_port", "ft_port"]
        .iter()
        .map(|k| format!("127.0.0.3:{}", st[k].as_u64().unwrap()).parse().unwrap())
        .collect();
    ports.push(sn["addr"].as_str().unwrap().parse().unwrap());
    for addr in &ports {
        for junk in [&b"GET / HTTP/1.0\r\n\r\n"[..], &[0xff; 70000][..], &[0, 0][..], &[0x00, 0x30, 1, 2, 3][..]] {
            if let Ok(mut s) = TcpStream::connect(addr) {
                let _ = s.write_all(junk);
            }
        }
    }
    // Everything still serves.
    g.wait_hosts(1, 1);
    let pi = example("pi");
    g.run(&["-n", "2", pi.to_str().unwrap()]).assert_ok();
    wait_for(|| g.log(2).contains("refused a connection").then_some(()));
}

#[test]
fn several_supernodes_none_is_a_single_point_of_failure() {
    let g = TestGrid::start("twosn", 2, &["--procs", "1"]);
    g.wait_hosts(1, 1);
    // A second supernode, with the grid's secret.
    let sn2 = g.dir.join("supernode2");
    std::fs::create_dir_all(&sn2).unwrap();
    std::fs::copy(g.dir.join("supernode/P2P-MPI.conf"), sn2.join("P2P-MPI.conf")).unwrap();
    let start = run_cmd(Command::new(env!("CARGO_BIN_EXE_runSupernode")).env("P2PMPI_HOME", &sn2), LIMIT);
    start.assert_ok();
    let sn1: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(g.dir.join("supernode/supernode.json")).unwrap()).unwrap();
    let sn2_state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(sn2.join("supernode.json")).unwrap()).unwrap();
    let both = format!("SUPERNODE={},{}", sn1["addr"].as_str().unwrap(), sn2_state["addr"].as_str().unwrap());
    // Peers 1 and 2 register with both; then the first supernode stops.
    g.reconfigure(1, &[&both]);
    g.reconfigure(2, &[&both]);
    wait_for(|| {
        let o = g.on_home(&sn2, "supernode_stat", &[]);
        o.stdout.contains("Total : 2 MPD known.").then_some(())
    });
    g.on_home(&g.dir.join("supernode"), "stopSupernode", &[]).assert_ok();
    // A newcomer that knows only the second supernode is found through it.
    let home3 = g.dir.join("peer3");
    std::fs::create_dir_all(&home3).unwrap();
    let conf =
        std::fs::read_to_string(g.conf(2)).unwrap().replace("127.0.0.3", "127.0.0.4").replace("/peer2/", "/peer3/");
    std::fs::write(home3.join("P2P-MPI.conf"), format!("{conf}\nSUPERNODE={}\n", sn2_state["addr"].as_str().unwrap()))
        .unwrap();
    g.on_home(&home3, "mpiboot", &[]).assert_ok();
    let hosts = g.wait_hosts(1, 2);
    assert!(hosts.contains("127.0.0.4"), "{hosts}");
    let w = example("whereami");
    g.run(&["-n", "3", w.to_str().unwrap()]).assert_ok();
    g.on_home(&home3, "mpihalt", &[]).assert_ok();
    run_cmd(Command::new(env!("CARGO_BIN_EXE_stopSupernode")).env("P2PMPI_HOME", &sn2), LIMIT).assert_ok();
}

/// Issue 18, item 1: every command parses its arguments with clap. `--help` prints help and
/// never acts (`mpihalt --help` halted the daemon), `--version` works everywhere, and an
/// unknown option is reported as one instead of being ignored.
#[test]
fn every_command_prints_help_and_version_and_never_acts_on_them() {
    let g = TestGrid::start("help", 2, &["--procs", "1"]);
    g.wait_hosts(1, 1);
    let home = g.home(1);
    let classic = [
        "mpiboot",
        "mpihalt",
        "mpihost",
        "mpistat",
        "runSupernode",
        "stopSupernode",
        "supernode_stat",
        "runVisuProxy",
        "runVisu",
    ];
    for c in classic.iter().chain(&["p2pmpirun", "p2pmpi"]) {
        let run = |args: &[&str]| {
            run_cmd(Command::new(bin(c)).args(args).env("P2PMPI_HOME", &home).env_remove("P2PMPI_CONF_FILE"), LIMIT)
        };
        let h = run(&["--help"]);
        assert_eq!(h.code(), Some(0), "{c} --help: {}{}", h.stdout, h.stderr);
        assert!(h.stdout.contains("Usage:"), "{c} --help:\n{}", h.stdout);
        let v = run(&["--version"]);
        assert_eq!(v.code(), Some(0), "{c} --version: {}", v.stderr);
        assert!(v.stdout.starts_with(&format!("{c} ")) && v.stdout.contains(env!("CARGO_PKG_VERSION")), "{}", v.stdout);
        let u =
            if *c == "p2pmpirun" { run(&["-n", "2", "--no-such-option", "prog"]) } else { run(&["--no-such-option"]) };
        assert_eq!(u.code(), Some(2), "{c} --no-such-option: {}{}", u.stdout, u.stderr);
        let said = u.stderr.contains("unexpected argument '--no-such-option'")
            || u.stderr.contains("unknown option '--no-such-option'");
        assert!(said, "{c}: {}", u.stderr);
    }
    // Nothing acted: the daemons still run and know each other.
    g.wait_hosts(1, 1);
    let o = run_cmd(Command::new(bin("mpihost")).env("P2PMPI_HOME", &home).env_remove("P2PMPI_CONF_FILE"), LIMIT);
    assert_eq!(o.code(), Some(0), "the daemon was stopped: {}", o.stderr);
}

/// Issue 18, item 4: `p2pmpi init` writes a private P2P-MPI.conf with a fresh GRID_SECRET,
/// says how to share it, never overwrites one without `--force`, and checks `--supernode` as
/// the configuration file does.
#[test]
fn init_writes_a_private_configuration_with_a_fresh_secret() {
    use std::os::unix::fs::PermissionsExt;
    let home = std::env::temp_dir().join(format!("p2pmpi-init-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    let init =
        |args: &[&str]| run_cmd(Command::new(bin("p2pmpi")).arg("init").args(args).env("P2PMPI_HOME", &home), LIMIT);
    let conf = home.join("P2P-MPI.conf");
    let secret_of = || -> String {
        let text = std::fs::read_to_string(&conf).unwrap();
        let (c, w) = p2pmpi_peer::config::Config::parse(&text, &conf).unwrap();
        assert!(w.is_empty(), "{w:?}");
        c.grid_secret.expect("a GRID_SECRET")
    };
    let o = init(&["--supernode", "sn.example:9701"]);
    assert_eq!(o.code(), Some(0), "{}", o.stderr);
    assert!(o.stdout.contains("GRID_SECRET") && o.stdout.contains("mpiboot"), "{}", o.stdout);
    let mode = std::fs::metadata(&conf).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "mode {mode:o}");
    let first = secret_of();
    assert!(first.len() == 64 && first.chars().all(|c| c.is_ascii_hexdigit()), "{first}");
    assert!(std::fs::read_to_string(&conf).unwrap().contains("SUPERNODE=sn.example:9701"));
    // Not again without --force; the file is untouched.
    let o = init(&[]);
    assert_eq!(o.code(), Some(1));
    assert!(o.stderr.contains("already exists") && o.stderr.contains("--force"), "{}", o.stderr);
    assert_eq!(secret_of(), first);
    // A bad supernode is refused, naming the option.
    let o = init(&["--force", "--supernode", "h:x"]);
    assert_eq!(o.code(), Some(1));
    assert!(o.stderr.contains("--supernode"), "{}", o.stderr);
    assert_eq!(secret_of(), first);
    // --force: a new secret.
    let o = init(&["--force"]);
    assert_eq!(o.code(), Some(0), "{}", o.stderr);
    assert_ne!(secret_of(), first);
    let _ = std::fs::remove_dir_all(&home);
}

/// Issue 18, item 2: mpirun's conventions on the grid. `-x` reaches remote ranks,
/// `--output-filename` writes one file per rank, `--collect` brings back what remote ranks
/// wrote in their job directories, and `--timeout` stops the job everywhere.
#[test]
fn mpirun_options_on_the_grid() {
    let g = TestGrid::start("mpirun", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let w = example("whereami");
    let w = w.to_str().unwrap();
    let work = g.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let submit = |args: &[&str]| {
        run_cmd(Command::new(bin("p2pmpirun")).args(args).current_dir(&work).env("P2PMPI_HOME", g.home(1)), LIMIT)
    };

    // -x, --output-filename, --collect.
    let o = submit(&[
        "-n",
        "3",
        "-x",
        "FOO=bar",
        "--output-filename",
        "outdir",
        "--collect",
        "*",
        w,
        "--env",
        "FOO",
        "--write",
        "out",
    ]);
    o.assert_ok();
    let mut hosts = BTreeSet::new();
    for k in 0..3 {
        let out = std::fs::read_to_string(work.join(format!("outdir/rank.{k}/stdout"))).unwrap();
        assert!(out.starts_with(&format!("rank {k} of 3 on ")) && out.ends_with(" FOO=bar\n"), "rank {k}: {out:?}");
        hosts.insert(out.split(" on ").nth(1).unwrap().split(' ').next().unwrap().to_string());
        let file = std::fs::read_to_string(work.join(format!("out.{k}.txt")))
            .unwrap_or_else(|e| panic!("out.{k}.txt not collected ({e}); stderr:\n{}", o.stderr));
        assert_eq!(file, format!("written by rank {k}\n"));
    }
    assert_eq!(hosts.len(), 3, "spread over the three peers: {hosts:?}");
    assert!(!work.join("whereami").exists(), "the staged program is not collected");
    for peer in 2..=3 {
        let jobs = g.home(peer).join("jobs");
        wait_for(|| (std::fs::read_dir(&jobs).map(|d| d.count()).unwrap_or(0) == 0).then_some(()));
    }

    // --timeout: every process, remote ones too, is stopped.
    let m = common::marker("grid-timeout");
    let o = submit(&["-n", "3", "--timeout", "2", w, "--hold", "60000", &m]);
    assert_eq!(o.code(), Some(124), "{}", o.stderr);
    assert!(o.stderr.contains("ran longer than --timeout 2 s"), "{}", o.stderr);
    assert!(wait_no_processes(&m, Duration::from_secs(10)).is_empty(), "processes left behind");
}

/// Issue 18, items 2 and 3: `-H`/`--hostfile` restrict the peers that may be reserved (an
/// unknown host is named); a request the allowed hosts cannot meet says at once what they give
/// against what it needs, then waits for `-w`.
#[test]
fn hosts_restrict_the_reservation() {
    let g = TestGrid::start("hosts", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let w = example("whereami");
    let w = w.to_str().unwrap();
    let work = g.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let submit = |args: &[&str]| {
        run_cmd(Command::new(bin("p2pmpirun")).args(args).current_dir(&work).env("P2PMPI_HOME", g.home(1)), LIMIT)
    };

    // -H: only 127.0.0.3 besides the submitter.
    let o = submit(&["-n", "3", "-H", "127.0.0.3", w]);
    o.assert_ok();
    let p = placement(&o.stdout);
    assert_eq!(p.len(), 3, "{}", o.stdout);
    assert!(p.values().all(|h| h == "127.0.0.2" || h == "127.0.0.3"), "{p:?}");
    // --hostfile, with a comment and Open MPI's slots=N.
    let hostfile = work.join("hosts");
    std::fs::write(&hostfile, "# the peers\n127.0.0.4 slots=2   # the third peer\n\n").unwrap();
    let o = submit(&["-n", "2", "--hostfile", hostfile.to_str().unwrap(), w]);
    o.assert_ok();
    assert_eq!(placement(&o.stdout).get(&1).map(String::as_str), Some("127.0.0.4"), "{}", o.stdout);
    // A host that is not in the grid.
    let o = submit(&["-n", "2", "-H", "127.0.0.3,127.0.0.99", w]);
    assert_eq!(o.code(), Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("host 127.0.0.99 (given with -H/--host or --hostfile) is not a peer"), "{}", o.stderr);
    // More than the allowed hosts can give: said at once, then -w is waited out.
    let t = Instant::now();
    let o = submit(&["-n", "5", "-w", "3", "-H", "127.0.0.3", w]);
    assert!(!o.status.success(), "{}", o.stderr);
    assert!(
        o.stderr.contains("the grid gives 4 process slot(s) on 2 host(s) allowed by -H/--hostfile, the job needs 5"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("waiting up to 3 s for more peers"), "{}", o.stderr);
    assert!(t.elapsed() >= Duration::from_secs(2), "-w 3 was not waited out: {:?}", t.elapsed());
}

/// Issue 18, item 5: `mpistat` names ranks and replicas (not slots), and does not list a
/// process that ended, even one whose launcher was killed before it could say so.
#[test]
fn mpistat_shows_ranks_and_replicas_and_no_finished_process() {
    let g = TestGrid::start("mpistat", 3, &["--procs", "2"]);
    g.wait_hosts(1, 2);
    let w = example("whereami");
    let m = common::marker("mpistat");
    let mut job = Command::new(bin("p2pmpirun"))
        .args(["-n", "3", "-r", "2", w.to_str().unwrap(), "--hold", "60000", &m])
        .env("P2PMPI_HOME", g.home(1))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The launcher and six processes, two on every peer (staging a debug build on a loaded
    // machine may take a while: the bound is the job's).
    let deadline = Instant::now() + LIMIT;
    while processes_with(&m).len() < 7 {
        assert!(Instant::now() < deadline, "the job's processes did not all start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut seen = BTreeSet::new();
    for peer in 1..=3 {
        let st = g.on(peer, "mpistat", &[]);
        st.assert_ok();
        let ranks: Vec<usize> =
            st.stdout.lines().filter_map(|l| l.strip_prefix("MPI Rank : ")).map(|r| r.parse().unwrap()).collect();
        let replicas: Vec<String> =
            st.stdout.lines().filter_map(|l| l.strip_prefix("Replica : ")).map(str::to_string).collect();
        assert_eq!(ranks.len(), 2, "peer {peer}: {}", st.stdout);
        assert_eq!(replicas.len(), 2, "peer {peer}: {}", st.stdout);
        for (k, j) in ranks.iter().zip(&replicas) {
            assert!(*k < 3, "a rank, not a slot: {}", st.stdout);
            assert!(j.ends_with(" of 2"), "{}", st.stdout);
            assert!(seen.insert((*k, j.clone())), "rank {k} replica {j} twice");
        }
    }
    assert_eq!(seen.len(), 6, "{seen:?}");
    // The launcher is killed: it never retires rank 0, whose process dies with it.
    job.kill().unwrap();
    let _ = job.wait();
    assert!(wait_no_processes(&m, Duration::from_secs(10)).is_empty(), "processes left behind");
    for peer in 1..=3 {
        wait_for(|| {
            let st = g.on(peer, "mpistat", &[]);
            st.stdout.contains("No application is running.").then_some(())
        });
    }
}

/// Issue 18, items 3, 5 and 6: `LOG_LEVEL` sets what daemons log and `RUST_LOG` wins over it;
/// `local-grid stop` stops a peer restarted by hand with `mpiboot`, and one added by hand in
/// the grid's directory; `mpiboot` says when no supernode answers and still starts.
#[test]
fn log_level_restarted_peers_and_a_missing_supernode() {
    let g = TestGrid::start("logs", 2, &["--procs", "1", "--set", "LOG_LEVEL=warn"]);
    g.wait_hosts(1, 1);
    assert!(!g.log(1).contains(" INFO "), "LOG_LEVEL=warn: no INFO line:\n{}", g.log(1));
    // Peer 2 restarted by hand, RUST_LOG in its environment.
    g.on(2, "mpihalt", &[]).assert_ok();
    let boot = run_cmd(
        Command::new(bin("mpiboot"))
            .env("P2PMPI_HOME", g.home(2))
            .env_remove("P2PMPI_CONF_FILE")
            .env("RUST_LOG", "info"),
        LIMIT,
    );
    boot.assert_ok();
    assert!(!boot.stderr.contains("no supernode answered"), "the supernode runs: {}", boot.stderr);
    assert!(g.log(2).contains(" INFO "), "RUST_LOG=info wins over LOG_LEVEL=warn:\n{}", g.log(2));
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(g.home(2).join("mpd.json")).unwrap()).unwrap();
    let pid = state["pid"].as_u64().unwrap() as u32;
    assert!(p2pmpi_peer::home::pid_alive(pid));
    // A third peer added by hand in the grid's directory.
    let home3 = g.dir.join("peer3");
    std::fs::create_dir_all(&home3).unwrap();
    let conf =
        std::fs::read_to_string(g.conf(2)).unwrap().replace("127.0.0.3", "127.0.0.4").replace("/peer2/", "/peer3/");
    std::fs::write(home3.join("P2P-MPI.conf"), conf).unwrap();
    g.on_home(&home3, "mpiboot", &[]).assert_ok();
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(home3.join("mpd.json")).unwrap()).unwrap();
    let pid3 = state["pid"].as_u64().unwrap() as u32;
    let stop =
        run_cmd(Command::new(bin("p2pmpi")).args(["local-grid", "stop", "--dir", g.dir.to_str().unwrap()]), LIMIT);
    stop.assert_ok();
    assert!(stop.stdout.contains("(3 peer(s))"), "{}", stop.stdout);
    let deadline = Instant::now() + Duration::from_secs(10);
    while p2pmpi_peer::home::pid_alive(pid) || p2pmpi_peer::home::pid_alive(pid3) {
        assert!(Instant::now() < deadline, "a peer started by hand still runs");
        std::thread::sleep(Duration::from_millis(50));
    }
    // No supernode now: mpiboot says so on the terminal, and starts all the same.
    let boot = g.on(2, "mpiboot", &[]);
    boot.assert_ok();
    assert!(boot.stderr.contains("mpiboot: warning: no supernode answered"), "{}", boot.stderr);
    assert!(boot.stdout.contains("MPD started"), "{}", boot.stdout);
    g.on(2, "mpihalt", &[]).assert_ok();
}

/// A staging that lasts longer than the reservation hold keeps its reservation: the FT
/// renews it while content arrives (before, the reservation lapsed under a large staging and
/// the launch was refused: "no reservation holds this ticket").
#[test]
fn a_staging_longer_than_the_reservation_hold_keeps_the_reservation() {
    let g = TestGrid::start("longstage", 2, &["--procs", "1", "--set", "RESERVATION_HOLD=1500"]);
    g.wait_hosts(1, 1);
    // 24 MiB that do not compress: with the program, a staging of several seconds in a
    // debug build, while the other steps (hashing, launching) stay well within the hold.
    // (A release build stages them faster than the hold: the test then proves nothing, and
    // passes.)
    let big = incompressible_file(&g.dir.join("big.bin"), 24 << 20);
    let w = example("whereami");
    let o = g.run(&["-v", "-n", "2", "-l", big.to_str().unwrap(), w.to_str().unwrap()]);
    o.assert_ok();
    assert_eq!(placement(&o.stdout).len(), 2, "{}", o.stdout);
}

/// On a terminal, staging shows the bytes sent so far and the rate as they go (issue 18: a
/// 200-300 MB staging used to show nothing for seconds). The job runs under `script`, which
/// gives it a pseudo-terminal, with the spinner's one-second delay set to zero.
#[test]
fn on_a_terminal_staging_shows_the_bytes_sent_as_they_go() {
    let g = TestGrid::start("ttystage", 2, &["--procs", "1"]);
    g.wait_hosts(1, 1);
    let big = incompressible_file(&g.dir.join("big.bin"), 48 << 20);
    let w = example("whereami");
    let line = format!(
        "env P2PMPI_HOME='{}' P2PMPI_PROGRESS_DELAY_MS=0 '{}' -n 2 -l '{}' '{}'",
        g.home(1).display(),
        bin("p2pmpirun").display(),
        big.display(),
        w.display()
    );
    let o = run_cmd(Command::new("script").args(["-qefc", &line, "/dev/null"]).env_remove("P2PMPI_CONF_FILE"), LIMIT);
    o.assert_ok();
    // indicatif redraws its line in place: carriage returns and escape sequences (CSI).
    let mut text = String::new();
    let mut chars = o.stdout.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' if chars.peek() == Some(&'[') => {
                for d in chars.by_ref().skip(1) {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
                text.push('\n');
            }
            '\r' => text.push('\n'),
            c => text.push(c),
        }
    }
    assert_eq!(placement(&text).len(), 2, "{text}");
    let shown: Vec<&str> = text.lines().filter(|l| l.contains(" sent (")).collect();
    assert!(!shown.is_empty(), "no staging progress on the terminal:\n{text}");
    assert!(shown.iter().all(|l| l.contains("staging 2 file(s) to 1 host(s)") && l.contains("/s)")), "{shown:?}");
    let nonzero = shown.iter().filter(|l| l.contains("KiB sent") || l.contains("MiB sent")).count();
    assert!(nonzero > 0, "the byte count never moved: {shown:?}");
    // Without a terminal (the other tests), nothing of it is printed.
    let plain = g.run(&["-n", "2", "-l", big.to_str().unwrap(), w.to_str().unwrap()]);
    plain.assert_ok();
    assert!(!plain.stderr.contains(" sent ("), "{}", plain.stderr);
}

/// `p2pmpi grid status` (issue 19, item 4): every peer of the grid with what its MPD reports,
/// and a running replicated job with each rank's replicas, where they run and which is the
/// master — as JSON and as text.
#[test]
fn grid_status_shows_every_peer_and_the_running_job_with_its_replicas() {
    let g = TestGrid::start("gridstatus", 3, &["--procs", "2", "--max-jobs", "2"]);
    g.wait_hosts(1, 2);
    let mut cmd = Command::new(bin("p2pmpirun"));
    cmd.args(["-n", "3", "-r", "2"])
        .arg(example("fdwatch"))
        .args(["--hold", "20000"])
        .env("P2PMPI_HOME", g.home(1))
        .env_remove("P2PMPI_CONF_FILE");
    let job = common::job::Job::spawn(&mut cmd);
    job.ready(3, LIMIT);
    let o = g.on(2, "p2pmpi", &["grid", "status", "--json"]);
    o.assert_ok();
    let v: serde_json::Value = serde_json::from_str(&o.stdout).expect("JSON");
    let peers = v["peers"].as_array().unwrap();
    assert_eq!(peers.len(), 3, "{}", o.stdout);
    for p in peers {
        assert_eq!(p["status"], "up", "{p}");
        assert_eq!(p["max_procs"], 2, "{p}");
        assert_eq!(p["max_jobs"], 2, "{p}");
        assert_eq!(p["jobs"], 1, "every peer runs a part of the job: {p}");
        assert!(p["cpus"].as_u64().unwrap() >= 1 && p["mem_total_kb"].as_u64().unwrap() > 0, "{p}");
        assert!(p["os"].as_str().unwrap().starts_with("Linux"), "{p}");
    }
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{}", o.stdout);
    assert_eq!(jobs[0]["program"], "fdwatch");
    assert_eq!(jobs[0]["replicas"], 2);
    let procs = jobs[0]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 6, "{}", o.stdout);
    for rank in 0..3u64 {
        let mine: Vec<&serde_json::Value> = procs.iter().filter(|p| p["rank"] == rank).collect();
        assert_eq!(mine.len(), 2, "rank {rank}: {mine:?}");
        assert_ne!(mine[0]["host"], mine[1]["host"], "the replicas of a rank run on different hosts");
        assert_eq!(mine.iter().filter(|p| p["master"] == true).count(), 1, "one master: {mine:?}");
    }
    let text = g.on(1, "p2pmpi", &["grid", "status"]);
    text.assert_ok();
    assert!(text.stdout.contains("3 peer(s)") && text.stdout.contains("3 answering"), "{}", text.stdout);
    assert!(
        text.stdout.contains("— fdwatch (2 replica(s) per rank") && text.stdout.contains("(master)"),
        "{}",
        text.stdout
    );
    common::terminate(job.pid());
    let _ = job.end(LIMIT);
}
