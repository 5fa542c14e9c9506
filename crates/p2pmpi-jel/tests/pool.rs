//! Pools over real sockets, members in this process (each on its own loopback address):
//! joins, leaves, elections and re-elections, both implementations; a registry fed garbage
//! and handshake floods keeps serving. (Deaths by `kill -9` are in the command line's tests.)

use p2pmpi_jel::{central, distributed, Event, GridSecret, MemberId, Notice, Options, Pool};
use std::collections::HashSet;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(30);

fn secret() -> GridSecret {
    GridSecret::from_phrase("jel pool tests")
}

fn fast_central(d: central::Dissemination) -> central::Config {
    central::Config {
        heartbeat_interval: Duration::from_millis(500),
        lease: Duration::from_secs(2),
        ping_timeout: Duration::from_secs(1),
        fallback_interval: Duration::from_secs(1),
        gossip_interval: Duration::from_millis(100),
        ..central::Config::new(d)
    }
}

fn fast_distributed() -> distributed::Config {
    distributed::Config {
        interval: Duration::from_millis(100),
        // Nobody dies here: long enough that a loaded machine makes no live member look dead.
        timeout: Duration::from_secs(10),
        probe_timeout: Duration::from_secs(2),
        witnesses: 2,
        ..distributed::Config::default()
    }
}

fn bind(i: u8) -> SocketAddr {
    SocketAddr::from(([127, 0, 1, i], 0))
}

fn central_opts(pool: &str, registry: SocketAddr, d: central::Dissemination, i: u8) -> Options {
    let mut o = Options::central(pool, secret(), registry).with_bind(bind(i));
    o.implementation = p2pmpi_jel::Implementation::Central { registry, config: fast_central(d) };
    o
}

/// Collects a member's notices until `cond` holds on all of them so far (bounded by WAIT).
fn wait_for(rx: &Receiver<Notice>, seen: &mut Vec<Notice>, what: &str, cond: impl Fn(&[Notice]) -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond(seen) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(n) => seen.push(n),
            Err(_) => panic!("timed out waiting for {what}; seen {seen:?}"),
        }
    }
}

fn joins(seen: &[Notice]) -> Vec<MemberId> {
    seen.iter().filter_map(|n| if let Notice::Event(Event::Joined { id, .. }) = n { Some(*id) } else { None }).collect()
}

fn has(seen: &[Notice], e: &Event) -> bool {
    seen.iter().any(|n| n == &Notice::Event(e.clone()))
}

#[test]
fn central_pool_joins_leaves_and_reelects_with_every_dissemination() {
    let reg = p2pmpi_jel::serve_registry("127.0.0.1:0".parse().unwrap(), secret()).unwrap();
    for d in central::Dissemination::ALL {
        let pool = format!("p-{d}");
        let n = 5;
        let members: Vec<Pool> =
            (0..n).map(|i| Pool::join(central_opts(&pool, reg.addr, d, 10 + i as u8)).unwrap()).collect();
        let ids: Vec<MemberId> = members.iter().map(|m| m.id()).collect();
        let mut seen: Vec<Vec<Notice>> = vec![Vec::new(); n];
        // Every member is told every join — the earlier ones too — in the same order.
        for (i, m) in members.iter().enumerate() {
            wait_for(m.events(), &mut seen[i], "every join", |s| joins(s).len() == n);
            assert_eq!(joins(&seen[i]), ids, "{d}: member {i}");
            assert!(seen[i]
                .iter()
                .any(|x| matches!(x, Notice::Event(Event::Joined { id, addr }) if *id == ids[i] && *addr == m.addr())));
        }
        // One winner, the first to stand, known everywhere.
        let w1 = members[1].elect("master", WAIT).unwrap();
        assert_eq!(w1, ids[1]);
        assert_eq!(members[2].elect("master", WAIT).unwrap(), ids[1]);
        assert_eq!(members[3].get_election_result("master", WAIT).unwrap(), Some(ids[1]));
        assert_eq!(members[0].get_election_result("nobody", Duration::from_millis(300)).unwrap(), None);
        // The winner leaves: the next candidate wins, told to every member.
        members[1].leave();
        let left = Event::Left { id: ids[1] };
        let elected = Event::Elected { name: "master".into(), winner: ids[2] };
        for i in [0, 2, 3, 4] {
            wait_for(members[i].events(), &mut seen[i], "the leave and the new winner", |s| {
                has(s, &left) && has(s, &elected)
            });
        }
        assert_eq!(members[4].get_election_result("master", WAIT).unwrap(), Some(ids[2]));
        let list = p2pmpi_jel::list(reg.addr, &secret(), &pool, WAIT).unwrap();
        assert_eq!(list.iter().map(|m| m.0).collect::<Vec<_>>(), [ids[0], ids[2], ids[3], ids[4]]);
        assert_eq!(members[0].members().len(), n - 1);
    }
    assert!(p2pmpi_jel::list(reg.addr, &secret(), "never-joined", WAIT).unwrap().is_empty());
}

#[test]
fn the_callback_gets_the_events() {
    let reg = p2pmpi_jel::serve_registry("127.0.0.1:0".parse().unwrap(), secret()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let a = Pool::join_with(central_opts("cb", reg.addr, central::Dissemination::Serial, 30), move |n| {
        let _ = tx.send(n);
    })
    .unwrap();
    let b = Pool::join(central_opts("cb", reg.addr, central::Dissemination::Serial, 31)).unwrap();
    let mut seen = Vec::new();
    wait_for(&rx, &mut seen, "both joins by callback", |s| joins(s) == [a.id(), b.id()]);
    drop(b);
    wait_for(&rx, &mut seen, "the leave by callback", |s| {
        s.iter().any(|n| matches!(n, Notice::Event(Event::Left { .. })))
    });
    // Nothing goes to the channel of a member joined with a callback.
    assert!(a.events().try_recv().is_err());
}

#[test]
fn a_wrong_secret_and_a_foreign_dissemination_are_refused() {
    let reg = p2pmpi_jel::serve_registry("127.0.0.1:0".parse().unwrap(), secret()).unwrap();
    let mut o = central_opts("s", reg.addr, central::Dissemination::Tree, 40);
    o.secret = GridSecret::from_phrase("another grid");
    o.join_timeout = Duration::from_secs(10);
    assert!(Pool::join(o).is_err());
    let _a = Pool::join(central_opts("s", reg.addr, central::Dissemination::Tree, 41)).unwrap();
    let err = Pool::join(central_opts("s", reg.addr, central::Dissemination::Gossip, 42)).unwrap_err();
    assert!(err.to_string().contains("dissemination"), "{err}");
}

#[test]
fn the_registry_survives_garbage_and_handshake_floods() {
    let reg = p2pmpi_jel::serve_registry("127.0.0.1:0".parse().unwrap(), secret()).unwrap();
    let a = Pool::join(central_opts("g", reg.addr, central::Dissemination::Serial, 50)).unwrap();
    // Raw garbage, a truncated handshake, and many connections that never say anything.
    let mut idle = Vec::new();
    for i in 0..200u32 {
        let mut s = TcpStream::connect(reg.addr).unwrap();
        if i % 3 == 0 {
            let _ = s.write_all(&[0xff; 64]);
        } else if i % 3 == 1 {
            let _ = s.write_all(&[0, 48, 1, 2, 3]);
        }
        idle.push(s);
    }
    // Authenticated, but records that are not JEL messages: the connection is closed.
    {
        let mut c = p2pmpi_wire::secure::SecureConn::connect(reg.addr, &secret(), WAIT).unwrap();
        let hello = p2pmpi_jel::JelHello { pool: "g".into(), addr: c.local_addr().unwrap(), config: None };
        c.send(&p2pmpi_wire::grid::SnRequest::Jel(hello)).unwrap();
        c.set_read_timeout(Some(WAIT)).unwrap();
        let r: Option<p2pmpi_wire::grid::JelRecord> = c.recv().unwrap();
        assert_eq!(r, Some(p2pmpi_wire::grid::JelRecord::Attached(Ok(()))));
        c.send(&p2pmpi_wire::grid::JelRecord::Msg(vec![0xee, 1, 2])).unwrap();
        assert!(matches!(c.recv::<p2pmpi_wire::grid::JelRecord>(), Ok(None) | Err(_)), "closed");
    }
    // The registry still serves, at once, while the idle connections are open.
    let t = Instant::now();
    let b = Pool::join(central_opts("g", reg.addr, central::Dissemination::Serial, 51)).unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "joined in {:?}", t.elapsed());
    let mut seen = Vec::new();
    wait_for(a.events(), &mut seen, "the second join", |s| joins(s) == [a.id(), b.id()]);
    drop(idle);
}

#[test]
fn distributed_pool_joins_leaves_and_converges_on_one_winner() {
    let secret = secret();
    // Members 0..3 bootstrap through the registry's rendezvous, 3 and 4 from a given address.
    let reg = p2pmpi_jel::serve_registry("127.0.0.1:0".parse().unwrap(), secret.clone()).unwrap();
    let mk = |i: u8, boot: Vec<SocketAddr>| {
        let mut o = Options::distributed("d", secret.clone(), boot.clone()).with_bind(bind(60 + i));
        if let p2pmpi_jel::Implementation::Distributed { config, rendezvous, .. } = &mut o.implementation {
            *config = fast_distributed();
            if boot.is_empty() {
                *rendezvous = Some(reg.addr);
            }
        }
        Pool::join(o).unwrap()
    };
    let mut members: Vec<Pool> = Vec::new();
    for i in 0..5u8 {
        let boot = if i < 3 { Vec::new() } else { vec![members[i as usize - 2].addr()] };
        members.push(mk(i, boot));
    }
    assert_eq!(reg.registry.seeds("d", None), [members[2].addr(), members[1].addr(), members[0].addr()]);
    let ids: HashSet<MemberId> = members.iter().map(|m| m.id()).collect();
    let mut seen: Vec<Vec<Notice>> = vec![Vec::new(); members.len()];
    for (i, m) in members.iter().enumerate() {
        wait_for(m.events(), &mut seen[i], "every join", |s| joins(s).into_iter().collect::<HashSet<_>>() == ids);
    }
    // Everyone stands; the lowest id wins everywhere, eventually.
    for m in &members {
        m.elect("leader", WAIT).unwrap();
    }
    let lowest = *ids.iter().min().unwrap();
    for (i, m) in members.iter().enumerate() {
        let e = Event::Elected { name: "leader".into(), winner: lowest };
        if m.id() != lowest {
            wait_for(m.events(), &mut seen[i], "the lowest id elected", |s| has(s, &e));
        }
        assert_eq!(m.get_election_result("leader", WAIT).unwrap(), Some(lowest));
    }
    // Listed without joining: a member's view (every member, by id); a dead address is
    // skipped for the next; without the grid secret nobody answers.
    let mut by_id: Vec<(MemberId, SocketAddr)> = members.iter().map(|m| (m.id(), m.addr())).collect();
    by_id.sort();
    let nobody: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let seeds = [nobody, members[3].addr()];
    assert_eq!(p2pmpi_jel::list_distributed(&seeds, &secret, "d", WAIT).unwrap(), Some(by_id));
    let wrong = GridSecret::from_phrase("not the grid's");
    assert_eq!(p2pmpi_jel::list_distributed(&seeds, &wrong, "d", Duration::from_secs(2)).unwrap(), None);
    assert_eq!(p2pmpi_jel::list_distributed(&seeds, &secret, "other pool", Duration::from_secs(2)).unwrap(), None);
    // A graceful leave is told as a leave.
    let gone = members.remove(4);
    let left = Event::Left { id: gone.id() };
    drop(gone);
    for (i, m) in members.iter().enumerate() {
        wait_for(m.events(), &mut seen[i], "the leave", |s| has(s, &left));
    }
    // Strong consistency is refused.
    let o = Options::distributed("d", secret.clone(), vec![members[0].addr()])
        .with_consistency(p2pmpi_jel::Consistency::STRONG);
    assert!(matches!(Pool::join(o), Err(p2pmpi_jel::Error::Unsupported(_))));
}
