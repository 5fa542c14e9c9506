//! Issue 38, items 2 and 3: revocation, renewal and roles on a local grid in member mode
//! (`local-grid start --keys`), with real daemons.
#![forbid(unsafe_code)]

mod common;

use common::grid::{bin, TestGrid, LIMIT};
use common::{example, processes_with, wait_bounded, wait_until};
use p2pmpi_peer::home::Home;
use p2pmpi_wire::grid::{MpdRequest, SnRequest, SnResponse};
use p2pmpi_wire::identity::{from_hex, Certificate, KeyPair, PublicKey};
use p2pmpi_wire::secure::GridSecret;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The bound the issue sets, from the revoke command's return.
const BOUND: Duration = Duration::from_secs(5);

fn key_of(path: &std::path::Path) -> KeyPair {
    let hex = std::fs::read_to_string(path).unwrap();
    KeyPair::from_seed(&from_hex(hex.trim()).unwrap().try_into().unwrap())
}

fn cert_of(home: &std::path::Path) -> Certificate {
    Certificate::from_hex(&std::fs::read_to_string(home.join("keys/member.cert")).unwrap()).unwrap()
}

fn owner_of(g: &TestGrid) -> PublicKey {
    PublicKey(
        from_hex(std::fs::read_to_string(g.home(1).join("keys/grid.pub")).unwrap().trim()).unwrap().try_into().unwrap(),
    )
}

/// Peer `peer`'s credential made from its files as they are, without the revocations it
/// learnt (what a revoked machine that ignores its own revocation would present).
fn raw_credential(g: &TestGrid, peer: usize) -> GridSecret {
    let home = g.home(peer);
    GridSecret::member(key_of(&home.join("keys/member.key")), cert_of(&home), owner_of(g))
}

fn supernode(g: &TestGrid) -> SocketAddr {
    let text = std::fs::read_to_string(g.dir.join("supernode/supernode.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["addr"].as_str().unwrap().parse().unwrap()
}

/// The kind of service at an address.
#[derive(Clone, Copy)]
enum Svc {
    Mpd,
    Rs,
    Ft,
    Sn,
}

/// Whether a member-mode connection with `cred` to `addr` is accepted: a request the
/// service answers gets an answer.
fn accepted(cred: &GridSecret, addr: SocketAddr, svc: Svc) -> bool {
    let Ok(mut c) = p2pmpi_wire::secure::SecureConn::connect(addr, cred, Duration::from_secs(3)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(3)));
    let t = p2pmpi_wire::grid::Ticket(0);
    // (postcard is not self-describing: each answer is read as its own type.)
    match svc {
        Svc::Mpd => c.call::<_, p2pmpi_wire::grid::MpdResponse>(&MpdRequest::Ping).is_ok(),
        Svc::Rs => {
            c.call::<_, p2pmpi_wire::grid::RsResponse>(&p2pmpi_wire::grid::RsRequest::Cancel { ticket: t }).is_ok()
        }
        Svc::Ft => c
            .call::<_, p2pmpi_wire::grid::FtResponse>(&p2pmpi_wire::grid::FtRequest::Offer {
                ticket: t,
                job: "00".into(),
                files: vec![],
            })
            .is_ok(),
        Svc::Sn => c.call::<_, SnResponse>(&SnRequest::List).is_ok(),
    }
}

/// Peer `peer`'s MPD, RS and FT.
fn services(g: &TestGrid, peer: usize) -> Vec<(SocketAddr, Svc)> {
    let st = p2pmpi_peer::mpd::running(&Home::new(g.home(peer))).expect("the MPD runs");
    let at = |p| SocketAddr::new(st.ip, p);
    vec![(at(st.mpd_port), Svc::Mpd), (at(st.rs_port), Svc::Rs), (at(st.ft_port), Svc::Ft)]
}

/// Where peer `peer` keeps its jobs' directories (as root, `jobs` links to
/// `/var/lib/p2pmpi/jobs-HASH`: the processes are given the resolved paths).
fn jobs_of(g: &TestGrid, peer: usize) -> std::path::PathBuf {
    let jobs = g.home(peer).join("jobs");
    std::fs::canonicalize(&jobs).unwrap_or(jobs)
}

/// What a member-mode client with `cred` is told when `addr` refuses it (a refusal record
/// after the handshake), `None` if it is not told.
fn told(cred: &GridSecret, addr: SocketAddr) -> Option<String> {
    let mut c = p2pmpi_wire::secure::SecureConn::connect(addr, cred, Duration::from_secs(3)).ok()?;
    let _ = c.set_read_timeout(Some(Duration::from_secs(3)));
    match c.call::<_, p2pmpi_wire::grid::MpdResponse>(&MpdRequest::Ping) {
        Err(p2pmpi_wire::secure::SecureError::RefusedBy(why)) => Some(why),
        _ => None,
    }
}

fn all_accepted(cred: &GridSecret, addrs: &[(SocketAddr, Svc)]) -> Vec<bool> {
    addrs.iter().map(|(a, s)| accepted(cred, *a, *s)).collect()
}

/// A revoked member's running job is stopped and it is refused everywhere within 5 s of
/// `p2pmpi grid revoke` returning; it stays refused after a daemon restarts; a forged
/// revocation is refused.
#[test]
fn a_revoked_member_is_stopped_and_refused_within_5_s() {
    let g = TestGrid::start("revoke", 3, &["--keys", "--procs", "1"]);
    g.wait_hosts(2, 2);
    let w = example("whereami");
    let w = w.to_str().unwrap();
    // Peer 2 submits a job that holds its ranks (one on every peer).
    let mut job = Command::new(bin("p2pmpirun"))
        .args(["-n", "3", w, "--hold", "120000"])
        .env("P2PMPI_HOME", g.home(2))
        .env_remove("P2PMPI_CONF_FILE")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ranks_on = |p: usize| processes_with(&format!("{}/", jobs_of(&g, p).display()));
    wait_until(LIMIT, "peer 2's ranks on peers 1 and 3", || !ranks_on(1).is_empty() && !ranks_on(3).is_empty());

    let peer2 = raw_credential(&g, 2);
    let peer3 = raw_credential(&g, 3);
    let mut addrs = services(&g, 1);
    addrs.extend(services(&g, 3));
    let sn = supernode(&g);
    assert!(all_accepted(&peer2, &addrs).iter().all(|a| *a), "peer 2 is served before");
    assert!(accepted(&peer2, sn, Svc::Sn));

    // A forged revocation (peer 3 signs that peer 2 is revoked) is refused by the supernode.
    let forger = key_of(&g.home(3).join("keys/member.key"));
    let mut forged = forger.revoke("peer2", None, p2pmpi_peer::members::unix_now_s()).unwrap();
    forged.body.grid = owner_of(&g);
    let mut c = p2pmpi_wire::secure::SecureConn::connect(sn, &peer3, LIMIT).unwrap();
    c.set_read_timeout(Some(LIMIT)).unwrap();
    match c.call::<_, SnResponse>(&SnRequest::Revoke(forged)).unwrap() {
        SnResponse::Error(e) => assert!(e.contains("not signed by the grid's owner"), "{e}"),
        other => panic!("a forged revocation was taken: {other:?}"),
    }
    match c.call::<_, SnResponse>(&SnRequest::Revoked).unwrap() {
        SnResponse::Revoked { entries, .. } => assert!(entries.is_empty(), "{entries:?}"),
        other => panic!("{other:?}"),
    }
    drop(c);

    let out = g.on(1, "p2pmpi", &["grid", "revoke", "peer2"]);
    out.assert_ok();
    let t0 = Instant::now();
    assert!(out.stdout.contains("revoked"), "{}", out.stdout);
    // Refused by the MPD, RS and FT of peers 1 and 3, and the supernode.
    let mut refused_at = None;
    let mut stopped_at = None;
    while t0.elapsed() < BOUND * 2 && (refused_at.is_none() || stopped_at.is_none()) {
        if refused_at.is_none() && all_accepted(&peer2, &addrs).iter().all(|a| !*a) && !accepted(&peer2, sn, Svc::Sn) {
            refused_at = Some(t0.elapsed());
        }
        if stopped_at.is_none() && ranks_on(1).is_empty() && ranks_on(3).is_empty() {
            stopped_at = Some(t0.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("revocation: refused everywhere after {refused_at:?}, its ranks stopped after {stopped_at:?}");
    let refused_at = refused_at.expect("peer 2 still served 10 s after its revocation");
    let stopped_at = stopped_at.expect("peer 2's ranks still run 10 s after its revocation");
    assert!(refused_at < BOUND, "refused after {refused_at:?}");
    assert!(stopped_at < BOUND, "stopped after {stopped_at:?}");
    // The others are still served.
    assert!(all_accepted(&peer3, &services(&g, 1)).iter().all(|a| *a));
    let st = wait_bounded(&mut job, LIMIT).expect("the revoked member's job ends");
    assert!(!st.success());
    // Told why, it being a member (its key proven): by the daemons and the supernode.
    for addr in [services(&g, 1)[0].0, sn] {
        assert_eq!(told(&peer2, addr).as_deref(), Some("member peer2 is revoked"), "{addr}");
    }
    // Its own daemon learns it from the supernode's refusal, and says it.
    let said = "supernode";
    wait_until(LIMIT, "peer 2's MPD saying that it is revoked", || {
        g.log(2).lines().any(|l| l.contains(said) && l.contains("refuses this machine: member peer2 is revoked"))
    });
    // Its next submission is refused, saying why: no other host takes it (its own machine, not
    // trusted to stop itself, is the only one that would run its ranks).
    let next = g.on(2, "p2pmpirun", &["-n", "2", "-w", "1", w]);
    assert!(!next.status.success(), "{}", next.stdout);
    assert!(!next.stdout.contains("rank 1 of 2"), "{}", next.stdout);
    assert!(next.stderr.contains("refuses this machine: member peer2 is revoked"), "{}", next.stderr);
    let status = g.on(2, "p2pmpi", &["grid", "status"]);
    let text = format!("{}{}", status.stdout, status.stderr);
    assert!(text.contains("refuses this machine: member peer2 is revoked"), "{text}");
    assert!(t0.elapsed() < BOUND * 4, "{:?}", t0.elapsed());
    assert!(g.log(1).contains("member peer2 is revoked"), "peer 1 logs it");

    // Kept: peer 1 restarted refuses peer 2 at once, and serves peer 3.
    g.on(1, "mpihalt", &[]).assert_ok();
    g.on(1, "mpiboot", &[]).assert_ok();
    assert!(all_accepted(&peer2, &services(&g, 1)).iter().all(|a| !*a), "refused after a restart");
    assert!(all_accepted(&peer3, &services(&g, 1)).iter().all(|a| *a));
}

/// A certificate that expired, or was altered, is refused by every daemon; one about to end
/// is renewed before it ends, through the supernode, by the owner's daemon.
#[test]
fn expired_and_forged_certificates_are_refused_and_renewal_comes_first() {
    // Certificates of 30 s: renewed from 20 s on.
    let dir_env = [("P2PMPI_CERT_LIFETIME", "30")];
    let g = {
        let name = "renew";
        let dir = std::env::temp_dir().join(format!("p2pmpi-grid-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut cmd = Command::new(bin("p2pmpi"));
        cmd.args(["local-grid", "start", "--peers", "2", "--keys", "--procs", "1", "--dir", dir.to_str().unwrap()])
            .env_remove("P2PMPI_CONF_FILE")
            .envs(dir_env);
        common::run_cmd(&mut cmd, LIMIT).assert_ok();
        TestGrid { dir }
    };
    g.wait_hosts(1, 1);
    let first = cert_of(&g.home(2));
    assert_eq!(first.body.not_after_s - first.body.not_before_s, 30);
    let owner_seed = key_of(&g.home(1).join("keys/owner.key"));
    let me = key_of(&g.home(2).join("keys/member.key"));
    let now = p2pmpi_peer::members::unix_now_s();
    let mpd1 = services(&g, 1)[0].0;

    // Expired (signed by the owner, ended 10 s ago) and altered (roles raised): refused.
    let expired = owner_seed.issue("peer2", me.public(), first.body.roles, now - 100, 90).unwrap();
    let cred = GridSecret::member(me.clone(), expired, owner_of(&g));
    assert!(!accepted(&cred, mpd1, Svc::Mpd), "an expired certificate is accepted");
    let why = told(&cred, mpd1).expect("an expired member is told why");
    assert!(why.starts_with("certificate of peer2 expired "), "{why}");
    wait_until(LIMIT, "the refusal logged", || g.log(1).contains("expired"));
    let mut forged = first.clone();
    forged.body.roles = p2pmpi_wire::identity::Roles::ALL;
    let cred = GridSecret::member(me.clone(), forged, owner_of(&g));
    assert!(!accepted(&cred, mpd1, Svc::Mpd), "a forged certificate is accepted");
    assert!(!accepted(&cred, supernode(&g), Svc::Sn), "a forged certificate is accepted by the supernode");
    // Not a member's (the owner did not sign it): not told why.
    assert_eq!(told(&cred, mpd1), None);
    assert!(accepted(&raw_credential(&g, 2), mpd1, Svc::Mpd));

    // Renewal: before the first certificate ends, peer 2 (and the supernode, and the owner's
    // own peer) hold a newer one, for the same key, name and roles.
    let renewed = |home: &std::path::Path| {
        let c = cert_of(home);
        (c.body.not_after_s > first.body.not_after_s + 5).then_some(c)
    };
    wait_until(Duration::from_secs(40), "peer 2's certificate renewed", || renewed(&g.home(2)).is_some());
    let at = p2pmpi_peer::members::unix_now_s();
    let new = renewed(&g.home(2)).unwrap();
    eprintln!("renewed at {} s of a 30 s life", at - first.body.not_before_s);
    assert!(at < first.body.not_after_s, "renewed only after the end");
    assert!(at >= first.body.not_before_s + 19, "renewed before two thirds of the life");
    assert_eq!((new.body.key, new.body.roles, &new.body.name), (first.body.key, first.body.roles, &first.body.name));
    wait_until(Duration::from_secs(40), "the supernode's and the owner's certificates renewed", || {
        renewed(&g.dir.join("supernode")).is_some() && renewed(&g.home(1)).is_some()
    });
    // Past the first certificate's end, the grid still runs jobs (on the renewed ones).
    wait_until(Duration::from_secs(40), "the first certificate's end", || {
        p2pmpi_peer::members::unix_now_s() > first.body.not_after_s
    });
    let w = example("whereami");
    g.on(2, "p2pmpirun", &["-n", "2", w.to_str().unwrap()]).assert_ok();
}

/// Roles: a machine without the supernode role cannot serve as one; one without the host role
/// lends nothing (its MPD does not register), one without submit runs no job.
#[test]
fn roles_are_enforced() {
    let g = TestGrid::start("roles", 2, &["--keys", "--procs", "1"]);
    g.wait_hosts(1, 1);
    // Peer 2 (host, submit) as a supernode: refused at start.
    let out = g.on(2, "runSupernode", &[]);
    assert!(!out.status.success(), "{}", out.stdout);
    assert!(out.stderr.contains("has no supernode role"), "{}", out.stderr);
    // A supernode refuses to register a peer without the host role.
    let owner = key_of(&g.home(1).join("keys/owner.key"));
    let me = key_of(&g.home(2).join("keys/member.key"));
    let now = p2pmpi_peer::members::unix_now_s();
    let submit_only =
        owner.issue("peer2", me.public(), p2pmpi_wire::identity::Roles::parse("submit").unwrap(), now, 600);
    let cred = GridSecret::member(me, submit_only.unwrap(), owner_of(&g));
    let mut c = p2pmpi_wire::secure::SecureConn::connect(supernode(&g), &cred, LIMIT).unwrap();
    c.set_read_timeout(Some(LIMIT)).unwrap();
    let info = p2pmpi_wire::grid::PeerInfo {
        id: p2pmpi_wire::grid::PeerId { ip: "127.0.0.9".into(), mpd_port: 1 },
        rs_port: 2,
        ft_port: 3,
        fd_port: 0,
        capacity: 1,
        name: "x".into(),
    };
    match c.call::<_, SnResponse>(&SnRequest::Register(info)).unwrap() {
        SnResponse::Error(e) => assert!(e.contains("has no host role"), "{e}"),
        other => panic!("registered without the host role: {other:?}"),
    }
    drop(c);
    // Peer 2 with the submit role only: its MPD lends nothing (it does not register), and it
    // still runs jobs on peer 1.
    g.on(2, "mpihalt", &[]).assert_ok();
    std::fs::write(g.home(2).join("keys/member.cert"), submit_only_cert(&g, &owner).to_hex()).unwrap();
    g.on(2, "mpiboot", &[]).assert_ok();
    g.wait_hosts(1, 0);
    let w = example("whereami");
    let out = g.on(2, "p2pmpirun", &["-n", "2", w.to_str().unwrap()]);
    out.assert_ok();
    assert!(out.stdout.contains("127.0.0.2"), "rank 1 on peer 1: {}", out.stdout);
}

fn submit_only_cert(g: &TestGrid, owner: &KeyPair) -> Certificate {
    let me = key_of(&g.home(2).join("keys/member.key"));
    let roles = p2pmpi_wire::identity::Roles::parse("submit").unwrap();
    owner.issue("peer2", me.public(), roles, p2pmpi_peer::members::unix_now_s(), 3600).unwrap()
}

/// The processes of a job that run on a revoked member's host count as failed, and with
/// `-r 2` their replicas take over: the job of another member finishes.
#[test]
fn ranks_on_a_revoked_host_fail_and_replicas_finish_the_job() {
    let g = TestGrid::start("revokehost", 3, &["--keys", "--procs", "2"]);
    g.wait_hosts(1, 2);
    let prog = example("replcheck");
    let mut job = Command::new(bin("p2pmpirun"))
        .args(["-n", "3", "-r", "2", prog.to_str().unwrap(), "iterate", "150", "100"])
        .env("P2PMPI_HOME", g.home(1))
        .env_remove("P2PMPI_CONF_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let out = {
        let (seen, stdout) = (seen.clone(), job.stdout.take().unwrap());
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let mut s = seen.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        })
    };
    let err = common::reader(job.stderr.take().unwrap());
    let ranks_on = |p: usize| processes_with(&format!("{}/", jobs_of(&g, p).display()));
    wait_until(LIMIT, "the job's processes on peer 3", || !ranks_on(3).is_empty());
    // Revoked while the job computes (every process registered: the first steps are done).
    wait_until(LIMIT, "the job's first steps", || seen.lock().unwrap().contains("step 9:"));
    g.on(1, "p2pmpi", &["grid", "revoke", "peer3"]).assert_ok();
    let st = wait_bounded(&mut job, LIMIT * 2).expect("the job ends");
    out.join().unwrap();
    let (out, err) = (seen.lock().unwrap().clone(), err.join().unwrap());
    assert!(err.contains("member peer3 was revoked"), "{err}");
    assert!(st.success(), "{out}\n{err}");
    assert!(out.contains("checksum"), "{out}");
    // The monitor's view (`grid status`) shows it.
    let status = g.on(1, "p2pmpi", &["grid", "status"]);
    assert!(status.stdout.contains("Revoked members: peer3"), "{}", status.stdout);
}

/// With three supernodes, a revocation travels in the Raft log of their replicated registry:
/// every supernode holds it, also one killed (`kill -9`) and restarted afterwards.
#[test]
fn revocations_are_replicated_among_the_supernodes() {
    use p2pmpi_peer::members::{unix_now_s, Keys};
    use p2pmpi_wire::identity::{Role, Roles};
    let dir = std::env::temp_dir().join(format!("p2pmpi-revraft-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let ips: Vec<String> = (1..=3).map(|i| format!("127.0.63.{i}")).collect();
    let port = {
        let l = std::net::TcpListener::bind((ips[0].as_str(), 0)).unwrap();
        l.local_addr().unwrap().port()
    };
    let list = ips.iter().map(|ip| format!("{ip}:{port}")).collect::<Vec<_>>().join(",");
    let owner = dir.join("owner");
    let keys = Keys::of(&Home::new(&owner));
    let grid = keys.create_grid("owner", unix_now_s()).unwrap().0;
    std::fs::write(owner.join("P2P-MPI.conf"), format!("SUPERNODE={list}\n")).unwrap();
    let cmd = |home: &std::path::Path, args: &[&str]| {
        let mut c = Command::new(bin("p2pmpi"));
        c.args(args).env("P2PMPI_HOME", home).env("P2PMPI_CONF_FILE", home.join("P2P-MPI.conf"));
        c
    };
    let homes: Vec<_> = (0..3).map(|i| dir.join(format!("sn{i}"))).collect();
    for (i, home) in homes.iter().enumerate() {
        let k = Keys::of(&Home::new(home));
        let (key, _) = k.ensure_member_key().unwrap();
        let name = format!("sn{i}");
        k.install(&keys.issue(&name, key.public(), Roles::NONE.with(Role::Supernode), unix_now_s()).unwrap(), grid)
            .unwrap();
        let conf = format!("SUPERNODE={list}\nSUPERNODE_PORT={port}\nEXTERNAL_IP={}\n", ips[i]);
        std::fs::write(home.join("P2P-MPI.conf"), conf).unwrap();
        common::run_cmd(&mut cmd(home, &["supernode", "start"]), LIMIT).assert_ok();
    }
    let stop = |home: &std::path::Path| {
        let text = std::fs::read_to_string(home.join("supernode.json")).unwrap_or_default();
        if let Some(pid) = serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["pid"].as_u64()) {
            let _ = p2pmpi_peer::os::signal(pid as u32, libc::SIGKILL);
        }
    };
    struct Guard<F: Fn()>(F);
    impl<F: Fn()> Drop for Guard<F> {
        fn drop(&mut self) {
            (self.0)()
        }
    }
    let _guard = Guard(|| homes.iter().for_each(|h| stop(h)));
    let holds = |home: &std::path::Path, name: &str| {
        let text = std::fs::read_to_string(home.join("revoked-registry")).unwrap_or_default();
        p2pmpi_wire::identity::RevocationList::from_text(grid, &text)
            .is_ok_and(|l| l.revocations().names.contains(name))
    };
    // The command tries the supernodes in turn until the leader records it (an election may
    // still be under way just after the start).
    wait_until(LIMIT, "a revocation recorded", || {
        common::run_cmd(&mut cmd(&owner, &["grid", "revoke", "bob"]), LIMIT).status.success()
    });
    wait_until(LIMIT, "every supernode holds it", || homes.iter().all(|h| holds(h, "bob")));
    // A supernode killed and restarted without its list still has it from its Raft log.
    stop(&homes[2]);
    std::fs::remove_file(homes[2].join("revoked-registry")).unwrap();
    common::run_cmd(&mut cmd(&homes[2], &["supernode", "start"]), LIMIT).assert_ok();
    wait_until(LIMIT, "the restarted supernode holds it", || holds(&homes[2], "bob"));
    common::run_cmd(&mut cmd(&owner, &["grid", "revoke", "carol"]), LIMIT).assert_ok();
    wait_until(LIMIT, "every supernode holds the second", || homes.iter().all(|h| holds(h, "carol")));
    homes.iter().for_each(|h| stop(h));
    let _ = std::fs::remove_dir_all(&dir);
}
