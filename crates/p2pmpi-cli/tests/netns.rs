//! Peers in their own network namespaces (`common/netns.rs`): two sites, one behind NAT.
//! Needs root, `ip` and `nft`; without them every test says so ("SKIPPED: …") and passes.

mod common;

use common::netns::{unavailable, Netns, Site};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A connection attempt that the network drops is given up after this.
const CONNECT: Duration = Duration::from_millis(700);

fn skip() -> bool {
    match unavailable() {
        Some(why) => {
            eprintln!("SKIPPED: {why}");
            true
        }
        None => false,
    }
}

/// Accepts one connection on `l` within `limit` and echoes its first byte: the peer's address.
fn accept_one(l: std::net::TcpListener, limit: Duration) -> std::thread::JoinHandle<Option<SocketAddr>> {
    std::thread::spawn(move || {
        l.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + limit;
        loop {
            match l.accept() {
                Ok((mut c, from)) => {
                    c.set_nonblocking(false).unwrap();
                    let mut b = [0u8; 1];
                    c.read_exact(&mut b).ok()?;
                    c.write_all(&b).ok()?;
                    return Some(from);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(_) => return None,
            }
        }
    })
}

/// A round trip over TCP from host `from` to a listener of host `to`: the address `to` saw
/// the connection come from, or the connection error.
fn tcp_round_trip(net: &Netns, from: &str, to: &str) -> Result<SocketAddr, std::io::Error> {
    let l = net.listen(to, 0);
    let addr = l.local_addr().unwrap();
    let acceptor = accept_one(l, CONNECT + Duration::from_millis(300));
    let mut c = match net.connect(from, addr, CONNECT) {
        Ok(c) => c,
        Err(e) => {
            let got = acceptor.join().unwrap();
            assert!(got.is_none(), "{from} could not connect to {to}, yet {to} accepted a connection from {got:?}");
            return Err(e);
        }
    };
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    c.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    c.read_exact(&mut b).expect("echo");
    Ok(acceptor.join().unwrap().expect("accepted"))
}

/// A datagram from host `from` to a UDP socket of host `to`, and the answer back to where it
/// came from: (the source `to` saw, whether the answer arrived), or None if it never arrived.
fn udp_round_trip(net: &Netns, from: &str, to: &str) -> Option<(SocketAddr, bool)> {
    let (a, b) = (net.udp(from), net.udp(to));
    a.set_read_timeout(Some(CONNECT)).unwrap();
    b.set_read_timeout(Some(CONNECT)).unwrap();
    a.send_to(b"ping", b.local_addr().unwrap()).unwrap();
    let mut buf = [0u8; 16];
    let (_, src) = b.recv_from(&mut buf).ok()?;
    b.send_to(b"pong", src).unwrap();
    Some((src, a.recv_from(&mut buf).is_ok()))
}

/// Retries a TCP round trip from `from` to `to` until it works, at most `limit`: the address
/// `to` saw, and how long it took.
fn reachable_within(net: &Netns, from: &str, to: &str, limit: Duration) -> (SocketAddr, Duration) {
    let t = Instant::now();
    loop {
        match tcp_round_trip(net, from, to) {
            Ok(a) => return (a, t.elapsed()),
            Err(e) => assert!(t.elapsed() < limit, "{from} cannot reach {to} after {limit:?}: {e}"),
        }
    }
}

fn assert_dropped(r: Result<SocketAddr, std::io::Error>, what: &str) {
    match r {
        Err(e) if e.kind() == ErrorKind::TimedOut || e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("{what}: the network should drop the connection silently, got {other:?}"),
    }
}

#[test]
fn nat_site_members_connect_out_but_cannot_be_connected_to() {
    if skip() {
        return;
    }
    let net = Netns::new("nat", &[Site::open(&["a1", "a2"]), Site::nat(&["b1", "b2"])]);
    // Loopback is up in every namespace.
    let ip = net.addr("b1");
    let lo = net.in_ns("b1", move || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std::net::TcpStream::connect(l.local_addr().unwrap()).map(|_| ip)
    });
    assert!(lo.is_ok(), "loopback in b1: {lo:?}");
    // Within a site, both ways, from the hosts' own addresses.
    assert_eq!(tcp_round_trip(&net, "a2", "a1").unwrap().ip(), net.addr("a2"));
    assert_eq!(tcp_round_trip(&net, "b2", "b1").unwrap().ip(), net.addr("b2"));
    // Out of the NAT site: it works, and the other site sees the router's address.
    assert_eq!(tcp_round_trip(&net, "b1", "a1").unwrap().ip(), net.router_addr(1), "masqueraded");
    let (src, answered) = udp_round_trip(&net, "b1", "a1").expect("a datagram out of the NAT site");
    assert_eq!(src.ip(), net.router_addr(1));
    assert!(answered, "the answer to a datagram sent out of the NAT site comes back");
    // Into it: dropped, TCP and UDP alike.
    assert_dropped(tcp_round_trip(&net, "a1", "b1"), "a1 -> b1");
    assert_dropped(tcp_round_trip(&net, "a2", "b2"), "a2 -> b2");
    assert!(udp_round_trip(&net, "a1", "b1").is_none(), "a datagram into the NAT site arrived");
    // Within the open site nothing is rewritten: a2 sees a1's own address.
    let (src, _) = udp_round_trip(&net, "a1", "a2").unwrap();
    assert_eq!(src.ip(), net.addr("a1"));
}

#[test]
fn a_link_taken_down_makes_its_host_unreachable_until_it_comes_back_up() {
    if skip() {
        return;
    }
    let net = Netns::new("link", &[Site::open(&["a1", "a2", "a3"]), Site::nat(&["b1"])]);
    assert!(tcp_round_trip(&net, "a2", "a1").is_ok());
    net.link_down("a1");
    assert_dropped(tcp_round_trip(&net, "a2", "a1"), "to a host whose link is down");
    assert_dropped(tcp_round_trip(&net, "a1", "a2"), "from a host whose link is down");
    assert_dropped(tcp_round_trip(&net, "b1", "a1"), "from the NAT site to a host whose link is down");
    assert!(udp_round_trip(&net, "a3", "a1").is_none(), "a datagram reached a host whose link is down");
    // The others still talk.
    assert!(tcp_round_trip(&net, "a3", "a2").is_ok());
    assert!(tcp_round_trip(&net, "b1", "a2").is_ok());
    net.link_up("a1");
    // Both ways again, within a few attempts: a1's first answer can be lost while it resolves
    // again the address it failed to resolve when its link was down (measured: the first
    // attempt of 700 ms fails now and then, the second gets through).
    let (back, t) = reachable_within(&net, "a2", "a1", Duration::from_secs(5));
    assert_eq!(back.ip(), net.addr("a2"));
    reachable_within(&net, "a1", "a3", Duration::from_secs(5));
    eprintln!("a1 reachable again {t:?} after link_up");
}

#[test]
fn namespaces_are_removed_on_drop_with_their_processes_even_after_a_panic() {
    if skip() {
        return;
    }
    let names = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let pid = std::sync::Arc::new(std::sync::Mutex::new(0u32));
    let (n2, p2) = (names.clone(), pid.clone());
    let r = std::thread::spawn(move || {
        let net = Netns::new("drop", &[Site::open(&["a1"]), Site::nat(&["b1"])]);
        *n2.lock().unwrap() = net.namespaces();
        // A process left running in a namespace.
        let child = net.exec("b1", "sleep").arg("600").spawn().unwrap();
        *p2.lock().unwrap() = child.id();
        std::mem::forget(child);
        panic!("the test failed here");
    })
    .join();
    assert!(r.is_err());
    let names = names.lock().unwrap().clone();
    assert_eq!(names.len(), 3);
    let list =
        String::from_utf8(std::process::Command::new("ip").args(["netns", "list"]).output().unwrap().stdout).unwrap();
    for n in &names {
        assert!(!list.lines().any(|l| l.split_whitespace().next() == Some(n)), "{n} is still there:\n{list}");
    }
    let pid = *pid.lock().unwrap();
    // Killed (a zombie until reaped: this process is its parent).
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z"), "sleep {pid} still runs: {stat}");
}
