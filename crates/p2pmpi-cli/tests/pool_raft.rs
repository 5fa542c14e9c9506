//! `p2pmpi pool` with the JEL registry replicated among three real supernode processes
//! (Raft, `p2pmpi_jel::consensus`): members of a reliable pool, the leading supernode killed
//! with `kill -9` (while a member is joining), then more joins, a graceful leave and a
//! member's death; the killed supernode restarted (it reads its log back and catches up),
//! the second leader killed in turn, and more events again. Every member's event lines
//! are compared: no event missing, the same order everywhere, nothing told twice, no
//! `registry-lost` — until the third leader is killed too: without a majority, each member
//! is told once that the registry is lost.

mod common;

use common::job::Job;
use common::{p2pmpi_tool, run_cmd};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(60);

/// Three supernodes on `NET.1`, `NET.2`, `NET.3` (one port), each with its own p2pmpi
/// directory; `SUPERNODE` lists the three everywhere.
struct Grid {
    dir: PathBuf,
}

/// A port free on every one of `ips` (bound and released: nothing else on this machine
/// picks ports in 127.0.x.y for these addresses).
fn free_port(ips: &[String]) -> u16 {
    for _ in 0..100 {
        let l = TcpListener::bind((ips[0].as_str(), 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let others: Vec<_> = ips[1..].iter().map(|ip| TcpListener::bind((ip.as_str(), port))).collect();
        if others.iter().all(Result::is_ok) {
            return port;
        }
    }
    panic!("no port free on {ips:?}");
}

impl Grid {
    fn start(name: &str, net: &str) -> Grid {
        let dir = std::env::temp_dir().join(format!("p2pmpi-poolraft-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ips: Vec<String> = (1..=3).map(|i| format!("{net}.{i}")).collect();
        let port = free_port(&ips);
        let addrs: Vec<SocketAddr> = ips.iter().map(|ip| format!("{ip}:{port}").parse().unwrap()).collect();
        let list = addrs.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(",");
        let g = Grid { dir };
        for (i, ip) in ips.iter().enumerate() {
            let home = g.home(i);
            std::fs::create_dir_all(&home).unwrap();
            std::fs::write(
                home.join("P2P-MPI.conf"),
                format!("GRID_SECRET=pool raft secret\nSUPERNODE={list}\nSUPERNODE_PORT={port}\nEXTERNAL_IP={ip}\n"),
            )
            .unwrap();
        }
        let members = g.dir.join("members");
        std::fs::create_dir_all(&members).unwrap();
        std::fs::write(members.join("P2P-MPI.conf"), format!("GRID_SECRET=pool raft secret\nSUPERNODE={list}\n"))
            .unwrap();
        for i in 0..3 {
            run_cmd(&mut g.cmd(&g.home(i), &["supernode", "start"]), LIMIT).assert_ok();
        }
        g
    }

    fn home(&self, i: usize) -> PathBuf {
        self.dir.join(format!("sn{i}"))
    }

    fn cmd(&self, home: &std::path::Path, args: &[&str]) -> Command {
        let mut c = Command::new(p2pmpi_tool());
        c.args(args).env("P2PMPI_HOME", home).env("P2PMPI_CONF_FILE", home.join("P2P-MPI.conf"));
        c
    }

    fn json(&self, i: usize, file: &str) -> Option<serde_json::Value> {
        serde_json::from_str(&std::fs::read_to_string(self.home(i).join(file)).ok()?).ok()
    }

    fn addr(&self, i: usize) -> String {
        self.json(i, "supernode.json").unwrap()["addr"].as_str().unwrap().to_string()
    }

    fn pid(&self, i: usize) -> u32 {
        self.json(i, "supernode.json").unwrap()["pid"].as_u64().unwrap() as u32
    }

    /// Waits until every supernode of `alive` names the same leader among `alive`.
    fn leader(&self, alive: &[usize]) -> usize {
        let deadline = Instant::now() + LIMIT;
        loop {
            let seen: Vec<Option<u64>> =
                alive.iter().map(|&i| self.json(i, "jel-raft.json").and_then(|v| v["leader"].as_u64())).collect();
            if let Some(Some(l)) = seen.first() {
                let l = *l as usize;
                if l > 0 && alive.contains(&(l - 1)) && seen.iter().all(|s| *s == Some(l as u64)) {
                    return l - 1;
                }
            }
            assert!(Instant::now() < deadline, "no leader agreed on among {alive:?} within {LIMIT:?}: {seen:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the supernode `i` follows `leader` and committed as far as the leader
    /// had when this was called.
    fn caught_up(&self, i: usize, leader: usize) {
        let deadline = Instant::now() + LIMIT;
        let commit = |j: usize| self.json(j, "jel-raft.json").and_then(|v| v["commit"].as_u64());
        let target = commit(leader).unwrap();
        loop {
            let st = self.json(i, "jel-raft.json");
            let follows = st.as_ref().and_then(|v| v["leader"].as_u64()) == Some(leader as u64 + 1);
            if follows && commit(i).is_some_and(|c| c >= target) {
                return;
            }
            assert!(Instant::now() < deadline, "supernode {i} did not catch up with {leader} (index {target}): {st:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A member started (its `me` line not waited for).
    fn spawn(&self, pool: &str, ip: &str, extra: &[&str]) -> Job {
        let bind = format!("{ip}:0");
        let mut args = vec!["pool", "join", pool, "--bind", &bind, "--detect-ms", "3000"];
        args.extend_from_slice(extra);
        Job::spawn(&mut self.cmd(&self.dir.join("members"), &args))
    }

    fn join(&self, pool: &str, ip: &str, extra: &[&str]) -> Member {
        Member::of(self.spawn(pool, ip, extra))
    }
}

impl Drop for Grid {
    fn drop(&mut self) {
        for i in 0..3 {
            if let Some(pid) = self.json(i, "supernode.json").and_then(|v| v["pid"].as_u64()) {
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
    fn of(job: Job) -> Member {
        let me = job.wait_for(LIMIT, "the `me` line", |lines| {
            let l = lines.iter().find(|l| !l.stderr)?;
            l.text.strip_prefix("me ").map(str::to_string)
        });
        Member { job, id: me }
    }

    /// Its event lines (standard output after `me`).
    fn events(&self) -> Vec<String> {
        self.job.lines().into_iter().filter(|l| !l.stderr).skip(1).map(|l| l.text).collect()
    }

    fn wait_line(&self, line: &str) {
        self.job.wait_for(LIMIT, line, |lines| lines.iter().any(|l| l.text == line).then_some(()));
    }

    fn joins(&self) -> Vec<String> {
        joins(&self.events())
    }

    fn wait_joins(&self, n: usize) -> Vec<String> {
        self.job.wait_for(LIMIT, &format!("{n} joins"), |_| {
            let j = self.joins();
            (j.len() >= n).then_some(j)
        })
    }
}

fn joins(events: &[String]) -> Vec<String> {
    events.iter().filter_map(|l| l.strip_prefix("joined ")).map(|r| r.split(' ').next().unwrap().to_string()).collect()
}

/// What `events` says after the line telling `id`'s join.
fn after_join(events: &[String], id: &str) -> Vec<String> {
    let k = events
        .iter()
        .position(|l| l.starts_with(&format!("joined {id} ")))
        .unwrap_or_else(|| panic!("no join of {id} in {events:#?}"));
    events[k + 1..].to_vec()
}

/// Nothing told twice, no lost registry, no exclusion.
fn assert_clean(name: &str, events: &[String]) {
    for (k, l) in events.iter().enumerate() {
        assert!(!l.starts_with("registry-lost") && l != "excluded", "{name}: {l} in {events:#?}");
        if !l.starts_with("elected ") {
            assert!(!events[k + 1..].contains(l), "{name}: {l} told twice in {events:#?}");
        }
    }
}

#[test]
fn killing_the_leading_supernode_loses_and_reorders_no_event() {
    let g = Grid::start("failover", "127.0.9");
    let first = g.leader(&[0, 1, 2]);
    let a = g.join("work", "127.0.10.1", &["--elect", "master"]);
    a.wait_line(&format!("elected master {}", a.id));
    let b = g.join("work", "127.0.10.2", &["--elect", "master"]);
    let c = g.join("work", "127.0.10.3", &[]);
    for m in [&a, &b, &c] {
        m.wait_joins(3);
    }

    // kill -9 of the leading supernode while a member is joining.
    let f = g.spawn("work", "127.0.10.6", &[]);
    let killed = Instant::now();
    common::kill9(g.pid(first));
    let alive: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    let second = g.leader(&alive);
    let elected_after = killed.elapsed();
    assert_ne!(second, first);
    let f = Member::of(f);
    eprintln!(
        "leader killed: a new one after {elected_after:?}, the member joining then joined after {:?}",
        killed.elapsed()
    );

    // More joins through the new leader, a graceful leave, a death and a re-election.
    let d = g.join("work", "127.0.10.4", &["--elect", "master"]);
    let e = g.join("work", "127.0.10.5", &[]);
    for m in [&a, &b, &c, &f, &d, &e] {
        m.wait_joins(6);
    }
    common::terminate(c.job.pid());
    for m in [&a, &b, &f, &d, &e] {
        m.wait_line(&format!("left {}", c.id));
    }
    common::kill9(a.job.pid());
    for m in [&b, &f, &d, &e] {
        m.wait_line(&format!("died {}", a.id));
        m.wait_line(&format!("elected master {}", b.id));
    }

    // The killed supernode comes back (its log read back from its file) and catches up;
    // then the second leader is killed too: the first and the third go on.
    run_cmd(&mut g.cmd(&g.home(first), &["supernode", "start"]), LIMIT).assert_ok();
    g.caught_up(first, second);
    common::kill9(g.pid(second));
    let alive: Vec<usize> = (0..3).filter(|&i| i != second).collect();
    let third = g.leader(&alive);
    let h = g.join("work", "127.0.10.7", &[]);
    for m in [&b, &f, &d, &e] {
        m.wait_joins(7);
    }
    // A newcomer is told the members alive (a died, c left).
    h.wait_joins(5);
    common::terminate(e.job.pid());
    for m in [&b, &f, &d, &h] {
        m.wait_line(&format!("left {}", e.id));
    }
    common::kill9(b.job.pid());
    for m in [&f, &d, &h] {
        m.wait_line(&format!("died {}", b.id));
        m.wait_line(&format!("elected master {}", d.id));
    }

    // The same joins, in the same order, everywhere.
    let order = f.joins();
    assert_eq!(order.len(), 7, "{:#?}", f.events());
    assert_eq!(&order[..3], [a.id.clone(), b.id.clone(), c.id.clone()]);
    let named: Vec<(&str, &Member)> = vec![("a", &a), ("b", &b), ("c", &c), ("d", &d), ("e", &e), ("f", &f), ("h", &h)];
    for (name, m) in &named {
        let ev = m.events();
        assert_clean(name, &ev);
        let j = joins(&ev);
        let k = order.iter().position(|i| *i == m.id).unwrap();
        // Every join from its own on; before its own, the members alive when it joined.
        let want: Vec<&String> =
            order.iter().enumerate().filter(|(x, i)| *x >= k || j.contains(i)).map(|p| p.1).collect();
        assert_eq!(j.iter().collect::<Vec<_>>(), want[..j.len()], "member {name}'s joins: {ev:#?}");
    }
    // Every member was told, after its own join, what f (the earliest member alive at the
    // end) was told after that join: the same events in the same order (a member that went
    // earlier, a prefix). For the members that joined before f, from f's join on (f
    // learned what came before its join as the pool's state).
    let reference = f.events();
    let f_at = order.iter().position(|i| *i == f.id).unwrap();
    for (name, m) in &named {
        let ev = m.events();
        let k = order.iter().position(|i| *i == m.id).unwrap();
        let from = if k < f_at { &f.id } else { &m.id };
        let mut mine = after_join(&ev, from);
        let mut theirs = after_join(&reference, from);
        if k < f_at {
            // f, a newcomer, was told the winners of the elections so far as part of the
            // pool's state: before or after its own join line, as the leader's failover
            // during that join had it. A member that joined earlier was told them before.
            let before = &ev[..ev.len() - mine.len()];
            while theirs.first().is_some_and(|l| l.starts_with("elected ") && before.contains(l)) {
                theirs.remove(0);
            }
        }
        if k >= f_at {
            // A newcomer is told the pool's state: the members (its own join last), then
            // the winners of the elections so far — which the others were told before its
            // join.
            let before = &reference[..reference.len() - theirs.len()];
            while mine.first().is_some_and(|l| l.starts_with("elected ") && before.contains(l)) {
                mine.remove(0);
            }
        }
        let alive_at_end = ["d", "f", "h"].contains(name);
        if alive_at_end {
            assert_eq!(mine, theirs, "member {name} after the join of {from}; f: {reference:#?}");
        } else {
            assert!(theirs.starts_with(&mine), "member {name}: {mine:#?}\nf after the join of {from}: {theirs:#?}");
        }
    }
    eprintln!("supernode {first} led, then {second}, then {third}; f was told: {reference:#?}");
    let tail: Vec<&String> = reference.iter().filter(|l| !l.starts_with("joined ")).collect();
    let want_end = [
        format!("left {}", c.id),
        format!("died {}", a.id),
        format!("elected master {}", b.id),
        format!("left {}", e.id),
        format!("died {}", b.id),
        format!("elected master {}", d.id),
    ];
    assert_eq!(tail[tail.len() - 6..], want_end.iter().collect::<Vec<_>>(), "{reference:#?}");

    // `pool list` finds the leader through any supernode (a follower names it).
    let list = run_cmd(&mut g.cmd(&g.dir.join("members"), &["pool", "list", "work"]), LIMIT);
    list.assert_ok();
    let listed: Vec<&str> = list.stdout.lines().map(|l| l.split(' ').next().unwrap()).collect();
    let gone = [&a.id, &b.id, &c.id, &e.id];
    let live: Vec<&str> = order.iter().filter(|i| !gone.contains(i)).map(String::as_str).collect();
    assert_eq!(listed, live);

    // Without a majority of the supernodes (the third leader killed too: one is left, which
    // cannot be elected), each member looks for a leader for a while, then is told once
    // that the registry is lost.
    let killed = Instant::now();
    common::kill9(g.pid(third));
    for (name, m) in [("d", d), ("f", f), ("h", h)] {
        let ended = m.job.end(LIMIT);
        eprintln!("member {name} stopped {:?} after the loss of the majority", killed.elapsed());
        assert_eq!(ended.code, 1, "member {name}: {}", ended.text);
        let lost = ended.stdout.lines().filter(|l| l.starts_with("registry-lost ")).count();
        assert_eq!(lost, 1, "member {name}: {}", ended.stdout);
        assert!(ended.stdout.ends_with(&format!("registry-lost {}\n", g.addr(0))), "member {name}: {}", ended.stdout);
    }
}
