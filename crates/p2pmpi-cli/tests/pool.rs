//! `p2pmpi pool`: real processes on their own loopback addresses, the registry hosted by a
//! real supernode. Joins (every earlier one too, in the same order everywhere), `kill -9`
//! told as `died` and the election re-converging, a graceful leave on SIGTERM, the
//! supernode's death told once, the distributed implementation, garbage to the supernode.

mod common;

use common::job::Job;
use common::{p2pmpi_tool, run_cmd};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// A supernode on a free port, with its own p2pmpi directory and configuration.
struct Sn {
    dir: PathBuf,
}

impl Sn {
    fn start(name: &str) -> Sn {
        let dir = std::env::temp_dir().join(format!("p2pmpi-pool-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("P2P-MPI.conf");
        std::fs::write(
            &conf,
            "GRID_SECRET=pool tests secret\nSUPERNODE=127.0.0.1:9\nSUPERNODE_PORT=0\nEXTERNAL_IP=127.0.0.1\n",
        )
        .unwrap();
        let sn = Sn { dir };
        let out = run_cmd(&mut sn.cmd(&["supernode", "start"]), LIMIT);
        out.assert_ok();
        sn
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(p2pmpi_tool());
        c.args(args).env("P2PMPI_HOME", &self.dir).env("P2PMPI_CONF_FILE", self.dir.join("P2P-MPI.conf"));
        c
    }

    fn state(&self) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(self.dir.join("supernode.json")).unwrap()).unwrap()
    }

    fn pid(&self) -> u32 {
        self.state()["pid"].as_u64().unwrap() as u32
    }

    fn addr(&self) -> String {
        self.state()["addr"].as_str().unwrap().to_string()
    }

    fn join(&self, pool: &str, ip: &str, extra: &[&str]) -> Member {
        let bind = format!("{ip}:0");
        let mut args = vec!["pool", "join", pool, "--bind", &bind];
        args.extend_from_slice(extra);
        let job = Job::spawn(&mut self.cmd(&args));
        let me = job.wait_for(LIMIT, "the `me` line", |lines| {
            let l = lines.iter().find(|l| !l.stderr)?;
            l.text.strip_prefix("me ").map(str::to_string)
        });
        assert_eq!(me.len(), 16, "an id of 16 hex digits: {me}");
        Member { job, id: me }
    }
}

impl Drop for Sn {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(self.dir.join("supernode.json")) {
            if let Some(pid) = serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["pid"].as_u64()) {
                let _ = p2pmpi_peer::os::signal(pid as u32, libc::SIGKILL);
            }
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

struct Member {
    job: Job,
    id: String,
}

impl Member {
    fn out(&self) -> Vec<String> {
        self.job.lines().into_iter().filter(|l| !l.stderr).map(|l| l.text).collect()
    }

    /// Waits until it printed `line`.
    fn wait_line(&self, line: &str) {
        self.job.wait_for(LIMIT, line, |lines| lines.iter().any(|l| l.text == line).then_some(()));
    }

    /// The members whose join it printed, in order.
    fn joins(&self) -> Vec<String> {
        self.out()
            .iter()
            .filter_map(|l| l.strip_prefix("joined "))
            .map(|r| r.split(' ').next().unwrap().to_string())
            .collect()
    }

    fn wait_joins(&self, n: usize) -> Vec<String> {
        self.job.wait_for(LIMIT, &format!("{n} joins"), |_| {
            let j = self.joins();
            (j.len() >= n).then_some(j)
        })
    }

    fn kill9(&self) {
        common::kill9(self.job.pid());
    }

    fn term(&self) {
        common::terminate(self.job.pid());
    }
}

/// Every line is one of the documented forms.
fn assert_lines_well_formed(m: &Member) {
    for (k, l) in m.out().iter().enumerate() {
        let w: Vec<&str> = l.split(' ').collect();
        let hex = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
        let ok = match w.as_slice() {
            ["me", id] => k == 0 && hex(id),
            ["joined", id, addr] => hex(id) && addr.parse::<std::net::SocketAddr>().is_ok(),
            ["left", id] | ["died", id] => hex(id),
            ["elected", _, id] => hex(id),
            ["registry-lost", addr] => addr.parse::<std::net::SocketAddr>().is_ok(),
            ["excluded"] => true,
            _ => false,
        };
        assert!(ok, "line {k} not in a documented form: {l:?}");
    }
}

#[test]
fn central_pool_joins_kill9_reelection_and_sigterm_leave() {
    let sn = Sn::start("central");
    let a = sn.join("work", "127.0.2.1", &["--elect", "master"]);
    a.wait_line(&format!("elected master {}", a.id));
    let b = sn.join("work", "127.0.2.2", &["--elect", "master", "--dissemination", "tree"]);
    let c = sn.join("work", "127.0.2.3", &[]);
    let order = vec![a.id.clone(), b.id.clone(), c.id.clone()];
    for m in [&a, &b, &c] {
        // Its own join and every earlier one, in the same order everywhere.
        assert_eq!(m.wait_joins(3), order, "{}", m.job.text());
        m.wait_line(&format!("elected master {}", a.id));
        assert!(m.out().iter().any(|l| l.starts_with(&format!("joined {} 127.0.2.", m.id))), "{}", m.job.text());
    }
    let list = run_cmd(&mut sn.cmd(&["pool", "list", "work"]), LIMIT);
    list.assert_ok();
    let listed: Vec<&str> = list.stdout.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(listed, order.iter().map(String::as_str).collect::<Vec<_>>());
    // kill -9 of the winner: told as a death everywhere, and the next candidate wins.
    a.kill9();
    for m in [&b, &c] {
        m.wait_line(&format!("died {}", a.id));
        m.wait_line(&format!("elected master {}", b.id));
    }
    // SIGTERM: a graceful leave, told as `left`; the process ends with status 0.
    c.term();
    b.wait_line(&format!("left {}", c.id));
    let ended = c.job.end(LIMIT);
    assert_eq!(ended.code, 0, "{}", ended.text);
    assert!(!b.out().contains(&format!("died {}", c.id)));
    let list = run_cmd(&mut sn.cmd(&["pool", "list", "work"]), LIMIT);
    assert_eq!(list.stdout.lines().map(|l| l.split(' ').next().unwrap()).collect::<Vec<_>>(), [b.id.as_str()]);
    assert_lines_well_formed(&b);
    b.term();
    assert_eq!(b.job.end(LIMIT).code, 0);
}

#[test]
fn the_supernodes_death_is_told_once_to_every_member() {
    let sn = Sn::start("sndeath");
    let members: Vec<Member> =
        (1..=3).map(|i| sn.join("p", &format!("127.0.3.{i}"), &["--dissemination", "gossip"])).collect();
    for m in &members {
        m.wait_joins(3);
    }
    let addr = sn.addr();
    common::kill9(sn.pid());
    for m in members {
        let id = m.id.clone();
        let ended = m.job.end(LIMIT);
        assert_eq!(ended.code, 1, "{}", ended.text);
        let lost: Vec<&str> = ended.stdout.lines().filter(|l| l.starts_with("registry-lost")).collect();
        assert_eq!(lost, [format!("registry-lost {addr}")], "member {id}: {}", ended.stdout);
    }
}

#[test]
fn distributed_pool_through_the_supernodes_rendezvous() {
    let sn = Sn::start("dist");
    // (A loaded machine must not make live members look dead: 4 s, a round every 0.4 s.)
    let extra = ["--impl", "distributed", "--detect-ms", "4000", "--elect", "leader"];
    let members: Vec<Member> = (1..=4).map(|i| sn.join("d", &format!("127.0.4.{i}"), &extra)).collect();
    let ids: Vec<String> = members.iter().map(|m| m.id.clone()).collect();
    let lowest = ids.iter().min().unwrap().clone();
    for m in &members {
        m.job.wait_for(LIMIT, "every join", |_| {
            let mut j = m.joins();
            j.sort();
            j.dedup();
            let mut want = ids.clone();
            want.sort();
            (j == want).then_some(())
        });
        // Non-uniform: every member ends with the lowest id.
        m.wait_line(&format!("elected leader {lowest}"));
    }
    // `pool list` of a distributed pool: a member found through the rendezvous tells its
    // view, by id; the asker does not join (nobody prints a fifth join).
    let listed = |args: &[&str]| -> Vec<String> {
        let out = run_cmd(&mut sn.cmd(args), LIMIT);
        out.assert_ok();
        out.stdout.lines().map(|l| l.split(' ').next().unwrap().to_string()).collect()
    };
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(listed(&["pool", "list", "d"]), sorted);
    assert_eq!(listed(&["pool", "list", "d", "--impl", "distributed"]), sorted);
    // kill -9 a member that is not the leader; the others pronounce it dead.
    let victim = members.iter().position(|m| m.id != lowest).unwrap();
    members[victim].kill9();
    for (i, m) in members.iter().enumerate() {
        if i != victim {
            m.wait_line(&format!("died {}", members[victim].id));
        }
    }
    // Asked directly (`--bootstrap`, no registry needed), a survivor no longer lists it.
    let survivor = members.iter().position(|m| m.id == lowest).unwrap();
    let boot = format!("127.0.4.{}", survivor + 1);
    let addr = members[survivor]
        .out()
        .iter()
        .find_map(|l| l.strip_prefix(&format!("joined {} ", lowest)).map(str::to_string))
        .unwrap();
    assert!(addr.starts_with(&boot), "{addr}");
    let alive: Vec<String> = sorted.iter().filter(|i| **i != members[victim].id).cloned().collect();
    assert_eq!(listed(&["pool", "list", "d", "--bootstrap", &addr]), alive);
    assert_eq!(listed(&["pool", "list", "d"]), alive);
    for m in &members {
        assert!(m.joins().iter().all(|j| ids.contains(j)), "the lister joined: {}", m.job.text());
    }
    // Kill the leader too: the survivors converge on the next lowest.
    let leader = members.iter().position(|m| m.id == lowest).unwrap();
    members[leader].kill9();
    let mut rest: Vec<&Member> =
        members.iter().enumerate().filter(|(i, _)| *i != victim && *i != leader).map(|x| x.1).collect();
    let next = rest.iter().map(|m| m.id.clone()).min().unwrap();
    for m in &rest {
        m.wait_line(&format!("died {lowest}"));
        m.wait_line(&format!("elected leader {next}"));
    }
    // A graceful leave is told as such.
    let leaving = rest.pop().unwrap();
    leaving.term();
    rest[0].wait_line(&format!("left {}", leaving.id));
    for m in &members {
        assert_lines_well_formed(m);
    }
}

#[test]
fn the_supernode_keeps_serving_pools_after_garbage() {
    let sn = Sn::start("garbage");
    let a = sn.join("g", "127.0.5.1", &[]);
    let addr: std::net::SocketAddr = sn.addr().parse().unwrap();
    for i in 0..50u8 {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let _ = s.write_all(&[i; 40]);
    }
    // Authenticated, then a JEL record that is no message.
    let secret = p2pmpi_wire::secure::GridSecret::from_phrase("pool tests secret");
    let mut c = p2pmpi_wire::secure::SecureConn::connect(addr, &secret, LIMIT).unwrap();
    let hello = p2pmpi_wire::grid::JelHello { pool: "g".into(), addr: c.local_addr().unwrap(), config: None };
    c.send(&p2pmpi_wire::grid::SnRequest::Jel(hello)).unwrap();
    c.set_read_timeout(Some(LIMIT)).unwrap();
    assert_eq!(c.recv::<p2pmpi_wire::grid::JelRecord>().unwrap(), Some(p2pmpi_wire::grid::JelRecord::Attached(Ok(()))));
    c.send(&p2pmpi_wire::grid::JelRecord::Msg(vec![200, 0, 0])).unwrap();
    assert!(matches!(c.recv::<p2pmpi_wire::grid::JelRecord>(), Ok(None) | Err(_)));
    let b = sn.join("g", "127.0.5.2", &[]);
    assert_eq!(a.wait_joins(2), [a.id.clone(), b.id.clone()]);
    // The member's address in its `joined` line is where it listens.
    let mine: HashMap<String, String> = a
        .out()
        .iter()
        .filter_map(|l| l.strip_prefix("joined "))
        .map(|r| {
            let (i, ad) = r.split_once(' ').unwrap();
            (i.to_string(), ad.to_string())
        })
        .collect();
    assert!(mine[&b.id].starts_with("127.0.5.2:"), "{mine:?}");
}

/// The master-worker example (`p2pmpi-examples/examples/jel_master_worker.rs`): a worker
/// killed while it works has its tasks redone, a killed master is replaced by re-election,
/// and every survivor prints the right result.
#[test]
fn master_worker_survives_a_killed_worker_and_a_killed_master() {
    let sn = Sn::start("mw");
    let registry = sn.addr();
    let (tasks, ms) = (400u64, 15u64);
    let expected: u64 = (0..tasks).map(|t| t * t + 1).sum();
    let spawn = |i: u8| {
        let ip = format!("127.0.8.{i}");
        Job::spawn(
            Command::new(common::example("jel_master_worker"))
                .args([registry.as_str(), "mw", ip.as_str(), &tasks.to_string(), &ms.to_string()])
                .env("P2PMPI_JEL_SECRET", "pool tests secret"),
        )
    };
    let did = |j: &Job| j.lines().iter().filter(|l| l.text.starts_with("did ")).count();
    let master = spawn(1);
    master.wait_for(LIMIT, "the first process becomes the master", |l| {
        l.iter().any(|l| l.text.starts_with("master ")).then_some(())
    });
    let workers: Vec<Job> = (2..=4).map(spawn).collect();
    // A worker dies while it works.
    workers[0].wait_for(LIMIT, "worker 2 computed tasks", |_| (did(&workers[0]) >= 5).then_some(()));
    common::kill9(workers[0].pid());
    // Then the master.
    let before = did(&workers[1]);
    workers[1].wait_for(LIMIT, "worker 3 went on", |_| (did(&workers[1]) >= before + 5).then_some(()));
    common::kill9(master.pid());
    let tasks_of = |out: &str| -> std::collections::BTreeSet<u64> {
        out.lines().filter_map(|l| l.strip_prefix("did ")).map(|t| t.parse().unwrap()).collect()
    };
    let mut workers = workers.into_iter();
    let killed = tasks_of(&workers.next().unwrap().end(LIMIT).stdout);
    let mut redone = std::collections::BTreeSet::new();
    let mut new_masters = 0;
    for w in workers {
        let ended = w.end(LIMIT);
        redone.extend(tasks_of(&ended.stdout));
        assert_eq!(ended.code, 0, "{}", ended.text);
        assert!(ended.stdout.lines().any(|l| l == format!("result {expected}")), "{}", ended.stdout);
        new_masters += ended.stdout.lines().filter(|l| l.starts_with("master ")).count();
    }
    assert_eq!(new_masters, 1, "one survivor took the master's place");
    // The killed worker's results died with the master that had them: redone by survivors.
    assert!(killed.len() >= 5 && killed.is_subset(&redone), "killed {killed:?}, survivors {redone:?}");
    let ended = master.end(LIMIT);
    assert!(!ended.stdout.contains("result"), "the killed master had not finished: {}", ended.stdout);
}

/// `maybe_dead` of a frozen member (SIGSTOP: its connection stays open, it answers nothing):
/// the registry pings it and declares it dead after the ping's time-out; resumed, the member
/// learns it was excluded and stops.
#[test]
fn maybe_dead_of_a_frozen_member_is_a_death_and_the_member_is_excluded() {
    use p2pmpi_jel::{Event, GridSecret, Notice, Options, Pool};
    let sn = Sn::start("maybedead");
    // Long leases (the pool's config comes from its first member): only the suspicion acts.
    let frozen = sn.join("md", "127.0.9.1", &["--detect-ms", "60000", "--dissemination", "serial"]);
    let registry: std::net::SocketAddr = sn.addr().parse().unwrap();
    let mut opts = Options::central("md", GridSecret::from_phrase("pool tests secret"), registry)
        .with_bind("127.0.9.2:0".parse().unwrap());
    // (The registry pings with the pool's ping time-out: 5 s, from the first member's config.)
    let cfg = p2pmpi_jel::central::Config::new(p2pmpi_jel::central::Dissemination::Serial);
    opts.implementation = p2pmpi_jel::Implementation::Central { registry, config: cfg };
    let me = Pool::join(opts).unwrap();
    let suspect = u64::from_str_radix(&frozen.id, 16).unwrap();
    frozen.wait_joins(2);
    // Alive: a suspicion changes nothing.
    me.maybe_dead(suspect);
    common::freeze(frozen.job.pid());
    me.maybe_dead(suspect);
    let deadline = std::time::Instant::now() + LIMIT;
    let mut seen = Vec::new();
    while !seen.contains(&Notice::Event(Event::Died { id: suspect })) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        seen.push(me.events().recv_timeout(left).unwrap_or_else(|_| panic!("no death; seen {seen:?}")));
    }
    common::thaw(frozen.job.pid());
    let ended = frozen.job.end(LIMIT);
    assert_eq!(ended.code, 1, "{}", ended.text);
    assert_eq!(ended.stdout.lines().last(), Some("excluded"), "{}", ended.stdout);
    assert_eq!(me.members().iter().map(|m| m.0).collect::<Vec<_>>(), [me.id()]);
}
