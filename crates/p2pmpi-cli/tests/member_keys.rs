//! Issue 38, item 2: a key per member. A local grid in member mode, a machine invited and
//! joined with a one-time code, and the MPDs deciding from the certificates' roles and
//! `SUBMIT_ALLOW` whether to run a job.
#![forbid(unsafe_code)]

mod common;

use common::grid::{bin, TestGrid, LIMIT};
use common::{example, wait_bounded};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

/// rank → host from `whereami` output.
fn hosts_of(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.strip_prefix("rank "))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("127.")).map(str::to_string))
        .collect()
}

/// Starts `p2pmpi grid invite NAME` on peer 1 (the owner) and returns it with the code it
/// printed.
fn invite(g: &TestGrid, name: &str, roles: &str) -> (std::process::Child, String) {
    let mut child = Command::new(bin("p2pmpi"))
        .args(["grid", "invite", name, "--roles", roles, "--wait", "60"])
        .env("P2PMPI_HOME", g.home(1))
        .env_remove("P2PMPI_CONF_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + LIMIT;
    let code = loop {
        assert!(Instant::now() < deadline, "no code printed");
        let line = lines.next().expect("invite ended before printing its code").unwrap();
        if let Some(rest) = line.split("grid join ").nth(1) {
            break rest.trim().to_string();
        }
    };
    // Keep reading (and so never block the inviter) in the background.
    std::thread::spawn(move || for _ in lines {});
    (child, code)
}

#[test]
fn invite_join_and_roles_on_a_member_grid() {
    let g = TestGrid::start("keys", 2, &["--keys", "--procs", "1"]);
    g.wait_hosts(1, 1);
    let w = example("whereami");
    let w = w.to_str().unwrap();
    // Member mode end to end: supernode, MPD, RS, FT and launch all on member keys.
    g.run(&["-n", "2", w]).assert_ok();
    let who = g.on(2, "p2pmpi", &["grid", "whoami"]);
    who.assert_ok();
    assert!(who.stdout.contains("member \"peer2\"") && who.stdout.contains("host,submit"), "{}", who.stdout);

    // A new machine: `init` makes its key; its configuration is peer 2's on its own address.
    let home3 = g.dir.join("peer3");
    let init = g.on_home(&home3, "p2pmpi", &["init"]);
    init.assert_ok();
    assert!(init.stdout.contains("member key"), "{}", init.stdout);
    let conf =
        std::fs::read_to_string(g.conf(2)).unwrap().replace("127.0.0.3", "127.0.0.4").replace("/peer2/", "/peer3/");
    std::fs::write(home3.join("P2P-MPI.conf"), conf).unwrap();
    let (mut inviter, code) = invite(&g, "peer3", "host");
    let joined = g.on_home(&home3, "p2pmpi", &["grid", "join", &code]);
    joined.assert_ok();
    assert!(joined.stdout.contains("as \"peer3\" with roles host"), "{}", joined.stdout);
    let st = wait_bounded(&mut inviter, LIMIT).expect("the inviter ends after one join");
    assert!(st.success());
    // A code is good once.
    let again = g.on_home(&home3, "p2pmpi", &["grid", "join", &code]);
    assert!(!again.status.success());
    assert!(again.stderr.contains("good once"), "{}", again.stderr);

    // The new member boots and runs ranks of peer 1's jobs.
    g.on_home(&home3, "mpiboot", &[]).assert_ok();
    let hosts = g.wait_hosts(1, 2);
    assert!(hosts.contains("127.0.0.4"), "{hosts}");
    let ok = g.run(&["-n", "3", w]);
    ok.assert_ok();
    assert!(hosts_of(&ok.stdout).iter().any(|h| h == "127.0.0.4"), "{}", ok.stdout);

    // Peer 3 has no submit role: no MPD runs its job, itself included.
    let out = g.on_home(&home3, "p2pmpirun", &["-n", "2", "-w", "1", w]);
    assert!(!out.status.success(), "{}", out.stdout);
    let logs = g.log(1) + &g.log(2);
    assert!(logs.contains("member peer3 has no submit role"), "the RSs log the refusal");
    assert!(out.stderr.contains("member peer3 has no submit role"), "and it is told:\n{}", out.stderr);

    // SUBMIT_ALLOW on peer 2 without peer 1: peer 2 no longer runs peer 1's jobs.
    g.reconfigure(2, &["SUBMIT_ALLOW=peer3"]);
    g.wait_hosts(1, 2);
    let out = g.run(&["-n", "3", "-w", "1", w]);
    assert!(!out.status.success(), "{}", out.stdout);
    assert!(g.log(2).contains("member peer1 is not in this peer's SUBMIT_ALLOW"));
    assert!(out.stderr.contains("member peer1 is not in this peer's SUBMIT_ALLOW"), "{}", out.stderr);
    g.run(&["-n", "2", w]).assert_ok();
    g.on_home(&home3, "mpihalt", &[]).assert_ok();
}

/// A peer whose certificate was altered (roles raised) or has expired is refused: its
/// commands and its daemon do not start with it.
#[test]
fn a_forged_or_expired_certificate_is_refused() {
    let g = TestGrid::start("keysbad", 2, &["--keys", "--procs", "1"]);
    g.wait_hosts(1, 1);
    let cert_path = g.home(2).join("keys").join("member.cert");
    let good = std::fs::read_to_string(&cert_path).unwrap();
    let mut cert = p2pmpi_wire::identity::Certificate::from_hex(&good).unwrap();
    // Forged: every role, signature unchanged. A daemon or command checks its own
    // certificate before using it (the other sides' refusal of a forged or expired one in
    // the handshake is tested in p2pmpi-wire's secure::tests::members).
    cert.body.roles = p2pmpi_wire::identity::Roles::ALL;
    std::fs::write(&cert_path, cert.to_hex()).unwrap();
    let out = g.on(2, "mpihost", &[]);
    assert!(!out.status.success(), "{}", out.stdout);
    assert!(out.stderr.contains("not signed by the grid's owner"), "{}", out.stderr);
    // Expired: a certificate that ended an hour ago; the daemon will not start with it.
    cert.body.roles = p2pmpi_wire::identity::Roles::parse("host,submit").unwrap();
    std::fs::write(&cert_path, good).unwrap();
    g.on(2, "mpihalt", &[]).assert_ok();
    let owner_seed = std::fs::read_to_string(g.home(1).join("keys").join("owner.key")).unwrap();
    let owner = p2pmpi_wire::identity::KeyPair::from_seed(
        &p2pmpi_wire::identity::from_hex(owner_seed.trim()).unwrap().try_into().unwrap(),
    );
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let expired = owner.issue("peer2", cert.body.key, cert.body.roles, now - 7200, 3600).unwrap();
    std::fs::write(&cert_path, expired.to_hex()).unwrap();
    let boot = g.on(2, "mpiboot", &[]);
    assert!(!boot.status.success(), "{}", boot.stdout);
    assert!(boot.stderr.contains("certificate of peer2 expired 60 min ago"), "{}", boot.stderr);
    assert!(boot.stderr.contains("must be invited again (`p2pmpi grid invite NAME`"), "{}", boot.stderr);
    // The commands that use the certificate say it too.
    let status = g.on(2, "p2pmpi", &["grid", "status"]);
    assert!(!status.status.success(), "{}", status.stdout);
    let said = "certificate of peer2 expired 60 min ago: this machine must be invited";
    assert!(status.stderr.contains(said), "{}", status.stderr);
}
