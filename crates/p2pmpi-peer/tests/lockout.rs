//! Issue 13, item 1: nobody without the grid secret can lock the daemons.
//!
//! A real supernode and two real peer daemons (MPD with its RS and FT) run in this test
//! process on loopback addresses. An attacker without the secret holds 256 slow connections
//! to each of the victim's services and to the supernode — each sends one byte every 4 s and
//! is opened again whenever it is closed. Meanwhile a client with the secret must be served
//! promptly by each service (`mpihost`'s request to its own MPD, a reservation, an offer to the
//! FT, the supernode's list), the other peer must keep the victim alive in its cache, every
//! slow connection must be closed within 10 s, and the refusals must not flood the log.
#![forbid(unsafe_code)]

mod common;

use common::Tmp;
use p2pmpi_peer::config::Config;
use p2pmpi_peer::home::{self, Home, MpdState, SupernodeState};
use p2pmpi_peer::{mpd, supernode};
use p2pmpi_wire::grid::{
    FtRequest, FtResponse, MpdRequest, MpdResponse, RsRequest, RsResponse, SnRequest, SnResponse, Ticket,
};
use p2pmpi_wire::secure::{connect_tcp, GridSecret, SecureConn};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);
const VICTIM: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
const OTHER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));
/// The bound on each answer to the client with the secret. The grid's own commands allow 2 s
/// (`mpihost`, a peer's ping, a reservation); the test allows more, as other jobs share this
/// machine's two cores — a locked-out service fails outright, or answers only once slow
/// connections expire. The answers' times are reported (typically tens of milliseconds).
const PROMPT: Duration = Duration::from_secs(5);
/// Slow connections per service.
const SLOW: usize = 256;
/// The bound the issue sets on a slow connection's life.
const DROPPED_WITHIN: Duration = Duration::from_secs(10);

fn secret() -> GridSecret {
    GridSecret::from_phrase("lockout test grid")
}

/// Waits (bounded) for a daemon's state file.
fn wait_state<S: for<'de> serde::Deserialize<'de>>(
    path: &std::path::Path,
    done: &std::sync::mpsc::Receiver<anyhow::Result<()>>,
) -> S {
    let deadline = Instant::now() + T;
    loop {
        if let Some(st) = home::read_json::<S>(path) {
            return st;
        }
        if let Ok(r) = done.try_recv() {
            panic!("the daemon stopped at start: {r:?}");
        }
        assert!(Instant::now() < deadline, "no {} within {T:?}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Supernode {
    addr: SocketAddr,
    done: std::sync::mpsc::Receiver<anyhow::Result<()>>,
    _dir: Tmp,
}

impl Supernode {
    fn start() -> Supernode {
        let dir = Tmp::new("lockout-sn");
        let home = Home::new(dir.0.join("sn"));
        home.create().unwrap();
        let opts = supernode::SupernodeOpts {
            bind: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            secret: secret(),
            peer_ttl_ms: 60_000,
            home: home.clone(),
            supernodes: Vec::new(),
        };
        let (tx, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(supernode::run(opts));
        });
        let st: SupernodeState = wait_state(&home.supernode_state(), &done);
        Supernode { addr: st.addr, done, _dir: dir }
    }
}

impl Drop for Supernode {
    fn drop(&mut self) {
        if supernode::call(None, self.addr, &secret(), &SnRequest::Stop, T).is_ok() {
            let _ = self.done.recv_timeout(T);
        }
    }
}

/// A peer daemon on `ip`, registered with the supernode `sn`, pinging its peers every 500 ms.
struct Daemon {
    state: MpdState,
    done: std::sync::mpsc::Receiver<anyhow::Result<()>>,
    _dir: Tmp,
}

impl Daemon {
    fn start(ip: IpAddr, sn: SocketAddr) -> Daemon {
        let dir = Tmp::new("lockout-mpd");
        let home = Home::new(dir.0.join("p2pmpi"));
        let config = Config {
            supernodes: vec![sn.to_string()],
            mpd_port: 0,
            rs_port: 0,
            ft_port: 0,
            external_ip: Some(ip),
            peer_cache: Some(dir.0.join("peer-cache.json")),
            alive_period_ms: 1000,
            refresh_period_ms: 500,
            ping_period_ms: 500,
            ..Config::default()
        };
        let (tx, done) = std::sync::mpsc::channel();
        let opts = mpd::MpdOpts { config, home: home.clone(), secret: secret() };
        std::thread::spawn(move || {
            let _ = tx.send(mpd::run(opts));
        });
        let state: MpdState = wait_state(&home.mpd_state(), &done);
        Daemon { state, done, _dir: dir }
    }

    fn addr(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.state.ip, port)
    }

    /// The cached hosts, as `mpihost` asks them.
    fn hosts(&self) -> anyhow::Result<Vec<p2pmpi_wire::grid::CachedHost>> {
        match mpd::call(Some(self.state.ip), self.state.mpd_addr(), &secret(), &MpdRequest::Hosts)? {
            MpdResponse::Hosts { hosts, .. } => Ok(hosts),
            other => anyhow::bail!("unexpected answer {other:?}"),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let r = mpd::call(Some(self.state.ip), self.state.mpd_addr(), &secret(), &MpdRequest::Halt);
        if matches!(r, Ok(MpdResponse::Halting)) {
            let _ = self.done.recv_timeout(T);
        }
    }
}

/// What the attacker saw.
#[derive(Debug, Default)]
struct AttackReport {
    /// Connections opened in all.
    opened: usize,
    /// Lifetimes of the connections the daemons closed.
    lifetimes: Vec<Duration>,
    /// Ages of the connections still open when the attack stopped.
    open_ages: Vec<Duration>,
}

struct Slow {
    stream: TcpStream,
    opened: Instant,
    last: Instant,
    sent: usize,
}

/// `per_target` slow connections to each target, from `sources` in turn: each sends one byte
/// every `every` (a frame length announcing a 48-byte handshake message, then its bytes) and
/// is opened again 1 s after the daemon closed it, until `stop`. `opened` counts connections.
fn attack(
    targets: Vec<SocketAddr>,
    per_target: usize,
    sources: Vec<IpAddr>,
    every: Duration,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<AttackReport> {
    std::thread::spawn(move || {
        let mut report = AttackReport::default();
        let n = targets.len() * per_target;
        let mut conns: Vec<Option<Slow>> = (0..n).map(|_| None).collect();
        let mut next_open = vec![Instant::now(); n];
        let bytes = [0u8, 48, 7];
        while !stop.load(Ordering::SeqCst) {
            for (k, slot) in conns.iter_mut().enumerate() {
                let now = Instant::now();
                match slot {
                    None if now >= next_open[k] => {
                        let target = targets[k % targets.len()];
                        let source = sources[(k / targets.len()) % sources.len()];
                        match connect_tcp(Some(source), target, Duration::from_secs(1)) {
                            Ok(s) => {
                                s.set_nonblocking(true).unwrap();
                                let _ = (&s).write(&bytes[..1]);
                                report.opened += 1;
                                opened.fetch_add(1, Ordering::SeqCst);
                                *slot = Some(Slow { stream: s, opened: now, last: now, sent: 1 });
                            }
                            Err(_) => next_open[k] = now + Duration::from_secs(1),
                        }
                    }
                    None => {}
                    Some(c) => {
                        let mut buf = [0u8; 256];
                        let closed = match (&c.stream).read(&mut buf) {
                            Ok(0) => true,
                            Ok(_) => false,
                            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
                            Err(_) => true,
                        };
                        if closed {
                            report.lifetimes.push(now - c.opened);
                            *slot = None;
                            next_open[k] = now + Duration::from_secs(1);
                        } else if now - c.last >= every {
                            let _ = (&c.stream).write(&bytes[c.sent.min(2)..c.sent.min(2) + 1]);
                            c.sent += 1;
                            c.last = now;
                        }
                    }
                }
            }
            // The scenario: the attack's pace (a slowloris trickles), not a barrier.
            std::thread::sleep(Duration::from_millis(200));
        }
        let now = Instant::now();
        report.open_ages = conns.iter().flatten().map(|c| now - c.opened).collect();
        report
    })
}

/// Log lines of this test process, to count the refusals logged.
#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuf {
    fn install() -> LogBuf {
        let buf = LogBuf::default();
        let w = buf.clone();
        tracing_subscriber::fmt().with_ansi(false).with_writer(move || w.clone()).init();
        buf
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// The slowest answer to each kind of request, over the rounds run during the attack, and
/// the median of all.
#[derive(Debug, Default)]
struct Served {
    mpihost: Duration,
    reserve: Duration,
    ft: Duration,
    supernode: Duration,
    rounds: usize,
    all: Vec<Duration>,
}

impl Served {
    fn median(&self) -> Duration {
        let mut v = self.all.clone();
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or_default()
    }
}

/// One round of requests with the secret to every service of the victim and to the supernode,
/// each on a fresh connection with the time-outs of the grid's own commands; panics naming the
/// service that did not serve in time.
fn one_round(victim: &Daemon, sn: SocketAddr, served: &mut Served) {
    let s = secret();
    let timed = |what: &str, f: &mut dyn FnMut() -> anyhow::Result<()>| -> Duration {
        let start = Instant::now();
        if let Err(e) = f() {
            panic!("{what} was not served under attack: {e:#}");
        }
        let took = start.elapsed();
        assert!(took < PROMPT, "{what} took {took:?} under attack");
        took
    };
    let t = timed("mpihost (the local MPD's host list)", &mut || {
        // `mpihost`'s request, from the victim's own address (a local user).
        let mut c = SecureConn::connect_from(Some(VICTIM), victim.state.mpd_addr(), &s, PROMPT)?;
        c.set_read_timeout(Some(PROMPT))?;
        c.set_max_record(64 << 20);
        match c.call::<_, MpdResponse>(&MpdRequest::Hosts)? {
            MpdResponse::Hosts { .. } => Ok(()),
            other => anyhow::bail!("unexpected answer {other:?}"),
        }
    });
    served.mpihost = served.mpihost.max(t);
    served.all.push(t);
    let t = timed("a reservation at the RS", &mut || {
        let mut c = SecureConn::connect_from(Some(OTHER), victim.addr(victim.state.rs_port), &s, PROMPT)?;
        c.set_read_timeout(Some(PROMPT))?;
        let ticket = Ticket(home::random_u128());
        let req = RsRequest::Reserve { ticket, app: "lockout".into(), submitter: OTHER.to_string() };
        match c.call::<_, RsResponse>(&req)? {
            RsResponse::Ok { .. } => {}
            other => anyhow::bail!("unexpected answer {other:?}"),
        }
        match c.call::<_, RsResponse>(&RsRequest::Cancel { ticket })? {
            RsResponse::Cancelled => Ok(()),
            other => anyhow::bail!("unexpected answer {other:?}"),
        }
    });
    served.reserve = served.reserve.max(t);
    served.all.push(t);
    let t = timed("an offer to the FT", &mut || {
        let mut c = SecureConn::connect_from(Some(OTHER), victim.addr(victim.state.ft_port), &s, PROMPT)?;
        c.set_read_timeout(Some(PROMPT))?;
        let offer = FtRequest::Offer { ticket: Ticket(1), job: "00aa".into(), files: vec![] };
        match c.call::<_, FtResponse>(&offer)? {
            // Served: the made-up ticket is refused, as it should.
            FtResponse::Error(e) if e.contains("ticket") => Ok(()),
            other => anyhow::bail!("unexpected answer {other:?}"),
        }
    });
    served.ft = served.ft.max(t);
    served.all.push(t);
    let t =
        timed(
            "the supernode's host list",
            &mut || match supernode::call(Some(OTHER), sn, &s, &SnRequest::List, PROMPT)? {
                SnResponse::Hosts(h) if h.len() == 2 => Ok(()),
                other => anyhow::bail!("unexpected answer {other:?}"),
            },
        );
    served.supernode = served.supernode.max(t);
    served.all.push(t);
    served.rounds += 1;
}

/// The whole scenario: `per_service` slow connections to each service, coming from
/// `sources`; returns what the attacker saw.
fn lockout_scenario(per_service: usize, sources: Vec<IpAddr>) -> AttackReport {
    let log = LogBuf::install();
    let sn = Supernode::start();
    let victim = Daemon::start(VICTIM, sn.addr);
    let other = Daemon::start(OTHER, sn.addr);
    // Both peers know each other and the victim is alive in the other's cache.
    let deadline = Instant::now() + T;
    let victim_alive = |other: &Daemon| {
        other.hosts().is_ok_and(|h| {
            h.iter().any(|e| e.info.id.mpd_port == victim.state.mpd_port && e.alive && e.rtt_us.is_some())
        })
    };
    while !victim_alive(&other) {
        assert!(Instant::now() < deadline, "the other peer never saw the victim alive");
        std::thread::sleep(Duration::from_millis(50));
    }

    let targets =
        vec![victim.state.mpd_addr(), victim.addr(victim.state.rs_port), victim.addr(victim.state.ft_port), sn.addr];
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let attacker = attack(targets, per_service, sources, Duration::from_secs(4), stop.clone(), opened.clone());
    // The attack in place: every slow connection opened once.
    let deadline = Instant::now() + T;
    while opened.load(Ordering::SeqCst) < 4 * per_service {
        assert!(Instant::now() < deadline, "the attack could not open its connections");
        std::thread::sleep(Duration::from_millis(20));
    }
    let start = Instant::now();
    // Served all along: more than 10 s, so that a slow connection kept past the bound shows.
    let mut served = Served::default();
    while start.elapsed() < DROPPED_WITHIN + Duration::from_secs(2) {
        one_round(&victim, sn.addr, &mut served);
        // The scenario: a user's request every 300 ms during the attack, not a barrier.
        std::thread::sleep(Duration::from_millis(300));
    }
    // The other peer kept pinging the victim: it never marked it dead.
    let seen = other.hosts().unwrap();
    let v = seen.iter().find(|e| e.info.id.mpd_port == victim.state.mpd_port).expect("the victim is cached");
    assert!(v.alive, "the other peer marked the victim dead under attack: {v:?}");
    assert!(v.updated_ms < 3000, "the other peer's pings to the victim failed for {} ms", v.updated_ms);
    stop.store(true, Ordering::SeqCst);
    let report = attacker.join().unwrap();

    let longest = report.lifetimes.iter().chain(&report.open_ages).max().copied().unwrap_or_default();
    let mut lifetimes = report.lifetimes.clone();
    lifetimes.sort();
    let median = lifetimes.get(lifetimes.len() / 2).copied().unwrap_or_default();
    eprintln!(
        "under attack ({} slow connections opened, {} closed by the daemons, median life {median:?}, longest \
         {longest:?}): {} rounds of 4 requests, median answer {:?}, slowest: \
         mpihost {:?}, reservation {:?}, FT offer {:?}, supernode list {:?}",
        report.opened,
        report.lifetimes.len(),
        served.rounds,
        served.median(),
        served.mpihost,
        served.reserve,
        served.ft,
        served.supernode
    );
    assert!(report.opened >= 4 * per_service, "the attack opened only {} connections", report.opened);
    assert!(longest < DROPPED_WITHIN, "a slow connection stayed open {longest:?}");
    // Refusals are logged, but rate-limited: a handful of lines for thousands of refusals.
    let text = log.text();
    let lines = text.lines().filter(|l| l.contains("unauthenticated") || l.contains("refused a connection")).count();
    eprintln!("{lines} log line(s) about {} refused connections", report.lifetimes.len());
    assert!(lines > 0, "refusals are logged");
    assert!(lines <= 4 * 4 * 5, "{lines} log lines about refusals: not rate-limited\n{text}");
    report
}

/// The attacker shares the address of the victim's own submitter (a local user without the
/// secret, or a NAT): the limit per address must not lock the honest client out.
#[test]
fn slow_connections_from_the_submitters_own_address_lock_nobody_out() {
    lockout_scenario(SLOW, vec![VICTIM]);
}

/// The attacker spreads its connections over 256 addresses, one each: the limit per address
/// never applies, the limit of pending connections in all does.
#[test]
fn slow_connections_from_many_addresses_lock_nobody_out() {
    let sources =
        (0..SLOW).map(|k| IpAddr::V4(Ipv4Addr::new(127, 0, 1 + (k / 250) as u8, 1 + (k % 250) as u8))).collect();
    lockout_scenario(SLOW, sources);
}

/// A few slow connections, within every limit (none is pushed out to make room): each is
/// closed by the handshake's deadline — not later, although it sends a byte every 4 s.
#[test]
fn a_slow_connection_within_the_limits_is_closed_by_the_handshake_deadline() {
    let sources = (0..16).map(|k| IpAddr::V4(Ipv4Addr::new(127, 0, 3, 1 + k as u8))).collect();
    let report = lockout_scenario(16, sources);
    let deadline = p2pmpi_wire::secure::HANDSHAKE_TIMEOUT;
    assert!(!report.lifetimes.is_empty());
    for life in &report.lifetimes {
        assert!(*life >= deadline - Duration::from_millis(200), "closed after {life:?}, before the deadline");
        assert!(*life < deadline + Duration::from_secs(2), "closed after {life:?}, long after the deadline");
    }
}
