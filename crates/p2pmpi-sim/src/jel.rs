//! JEL resource tracking ([`p2pmpi_core::jel`]) under simulation: the join test of Drost et al.
//! §6.1 (figures 5 and 6) and the traffic of their table II, with the very cores a driver
//! runs — [`central::Server`] and [`central::Client`] with each dissemination strategy, and
//! the distributed [`Node`] — in virtual time.
//!
//! # The network
//!
//! Every node has an uplink and a downlink of a given bandwidth and sends and receives one
//! message at a time on each, in the order they were sent (store and forward: a message
//! occupies the sender's uplink, then the latency passes, then it occupies the receiver's
//! downlink; it is delivered when it has been received whole). This is what makes the seed's
//! strategies differ: the serial server's uplink carries the whole stream to every member and
//! a newcomer's whole state, the tree spreads that load over the members. The two settings
//! are the seed's: *DAS-2*, 100 Mbit/s for every node and for the server; *DAS-3*, 250 Mbit/s
//! for the nodes and 10 Gbit/s for the server's frontend; 0.1 ms of latency.
//!
//! # Identifier size
//!
//! A member's identity travels with every join (the stream, the bootstrap data, the gossip).
//! Ours is 8 bytes of id and 7 of IPv4 address; an Ibis identifier (pool, location, the
//! SmartSockets address with all its IPs) is an order of magnitude larger. A run charges
//! `id_bytes` per member record carried (see `member_records` in the cores) instead of the 15
//! of ours, so that the seed's conditions can be reproduced (256 by default, our estimate of
//! an Ibis identifier); the traffic table gives both.
//!
//! # The experiment
//!
//! `n` nodes start at uniformly random times within `spread` (all at once for the job
//! scheduler, give or take the start-up of a JVM) and join one pool; the server (central) or
//! the first node (distributed: everyone's bootstrap address, the seed's bootstrap service)
//! is up at time 0. Every second the simulator records the average perceived pool size over
//! the nodes started so far (a node not welcomed yet perceives 0). At `duration` every node
//! leaves, and the run goes on for 30 s. Bytes are counted at every node, sent plus received,
//! with a 4-byte frame per message (TCP/IP headers not counted).

use crate::par::par_map;
use crate::plot::{Chart, Series, PALETTE};
use crate::rng::{derive_seed, Rng};
use crate::table::Table;
use p2pmpi_core::jel::central::{self, Client, Dissemination, Server, ServerInput};
use p2pmpi_core::jel::distributed::{self, Node};
use p2pmpi_core::jel::{Action, Addr, Consistency, Input};
use p2pmpi_core::machine::Machine;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Bytes a driver adds per message (a length prefix).
pub const FRAME_BYTES: usize = 4;
/// Bytes of one member record in our encoding (8-byte id, IPv4 address and port).
pub const OUR_ID_BYTES: usize = 15;

/// Which implementation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Impl {
    Central(Dissemination),
    Distributed,
}

impl Impl {
    /// The seed's six: the five strategies and the distributed implementation.
    pub const ALL: [Impl; 6] = [
        Impl::Central(Dissemination::Serial),
        Impl::Central(Dissemination::Bootstrap),
        Impl::Central(Dissemination::Tree),
        Impl::Central(Dissemination::Gossip),
        Impl::Central(Dissemination::Adaptive),
        Impl::Distributed,
    ];

    /// The seed's name.
    pub fn label(self) -> &'static str {
        match self {
            Impl::Central(Dissemination::Serial) => "central, serial send",
            Impl::Central(Dissemination::Bootstrap) => "central, peer bootstrap",
            Impl::Central(Dissemination::Tree) => "central, broadcast tree",
            Impl::Central(Dissemination::Gossip) => "central, gossip",
            Impl::Central(Dissemination::Adaptive) => "central, adaptive gossip",
            Impl::Distributed => "distributed",
        }
    }
}

impl fmt::Display for Impl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Link speeds (bytes per second) and latency.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Network {
    pub name: &'static str,
    pub node_bw: f64,
    pub server_bw: f64,
    pub latency: Duration,
}

impl Network {
    /// DAS-2 as the seed ran it: about 100 Mbit/s for every node and the server.
    pub const DAS2: Network =
        Network { name: "DAS-2", node_bw: 100e6 / 8.0, server_bw: 100e6 / 8.0, latency: Duration::from_micros(100) };
    /// DAS-3: 250 Mbit/s per node, 10 Gbit/s at the server's frontend.
    pub const DAS3: Network =
        Network { name: "DAS-3", node_bw: 250e6 / 8.0, server_bw: 10e9 / 8.0, latency: Duration::from_micros(100) };
}

/// One run's parameters.
#[derive(Debug, Clone, Copy)]
pub struct JoinParams {
    pub n: usize,
    pub imp: Impl,
    pub net: Network,
    /// Bytes charged per member record.
    pub id_bytes: usize,
    /// Nodes start within this.
    pub spread: Duration,
    /// Everyone leaves then.
    pub duration: Duration,
    pub seed: u64,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct JoinRun {
    pub p: JoinParams,
    /// Every second: (time in s, average perceived pool size, nodes started).
    pub samples: Vec<(f64, f64, usize)>,
    /// First sample where the average reached 50 % / 99 % / 100 % of `n`.
    pub t50: Option<f64>,
    pub t99: Option<f64>,
    pub t_full: Option<f64>,
    /// Bytes sent plus received by the server (central), and per node.
    pub server_bytes: u64,
    pub node_bytes_mean: f64,
    pub node_bytes_max: u64,
    pub messages: u64,
    /// Wall-clock seconds the run took.
    pub wall: f64,
}

enum Peer {
    Server(Box<Server>),
    Client(Box<Client>),
    Dist(Box<Node>),
}

/// Feeds a core an input it cannot refuse (only an election request may be refused; the
/// simulator makes none).
fn feed<M: Machine>(m: &mut M, now: Duration, input: M::Input) {
    assert!(m.handle_input(now, input).is_ok(), "a core refused a join, a leave or a message");
}

impl Peer {
    /// The run starts for it: the server serves, a member joins.
    fn start(&mut self, now: Duration) {
        match self {
            Peer::Server(s) => feed(&mut **s, now, ServerInput::Start),
            Peer::Client(c) => feed(&mut **c, now, Input::Join),
            Peer::Dist(d) => feed(&mut **d, now, Input::Join),
        }
    }

    /// A member leaves (the server never does).
    fn leave(&mut self, now: Duration) {
        match self {
            Peer::Server(_) => {}
            Peer::Client(c) => feed(&mut **c, now, Input::Leave),
            Peer::Dist(d) => feed(&mut **d, now, Input::Leave),
        }
    }

    fn handle_timeout(&mut self, now: Duration) {
        match self {
            Peer::Server(s) => s.handle_timeout(now),
            Peer::Client(c) => c.handle_timeout(now),
            Peer::Dist(d) => d.handle_timeout(now),
        }
    }

    /// A message from the node listening at `from` (one of the peer's kind; others dropped).
    fn message(&mut self, now: Duration, from: Addr, msg: Msg) {
        match (self, msg) {
            (Peer::Server(s), Msg::C(msg)) => feed(&mut **s, now, ServerInput::Message { from, msg }),
            (Peer::Client(c), Msg::C(msg)) => feed(&mut **c, now, Input::Message { from, msg }),
            (Peer::Dist(d), Msg::DWire(b)) => {
                let msg = distributed::decode(&b).expect("what a node encoded decodes");
                feed(&mut **d, now, Input::Message { from, msg })
            }
            _ => {}
        }
    }

    fn unreachable(&mut self, now: Duration, to: Addr) {
        match self {
            Peer::Server(s) => feed(&mut **s, now, ServerInput::Unreachable(to)),
            Peer::Client(c) => feed(&mut **c, now, Input::Unreachable(to)),
            Peer::Dist(d) => feed(&mut **d, now, Input::Unreachable(to)),
        }
    }

    fn poll_timeout(&self) -> Option<Duration> {
        match self {
            Peer::Server(s) => s.poll_timeout(),
            Peer::Client(c) => c.poll_timeout(),
            Peer::Dist(d) => d.poll_timeout(),
        }
    }

    fn poll_output(&mut self) -> Option<Action<Msg>> {
        match self {
            Peer::Server(s) => s.poll_output().map(|a| map(a, Msg::C)),
            Peer::Client(c) => c.poll_output().map(|a| map(a, Msg::C)),
            Peer::Dist(d) => d.poll_output().map(|a| map(a, Msg::D)),
        }
    }
}

enum Msg {
    C(central::Message),
    D(distributed::Message),
    /// A distributed node's message in flight, encoded (18 bytes a member record where the
    /// decoded form takes 80: at 10 000 nodes the messages in flight weighed gigabytes).
    DWire(Box<[u8]>),
}

enum Ev {
    Start(usize),
    Leave(usize),
    Timer(usize),
    Deliver { from: usize, to: usize, msg: Msg },
    Refused { sender: usize, dest: usize },
    Sample,
}

struct Item {
    at: Duration,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

fn addr(i: usize) -> Addr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000u32 + i as u32)), 7000)
}

fn index(a: &Addr) -> Option<usize> {
    match a.ip() {
        IpAddr::V4(ip) => (u32::from(ip) as usize).checked_sub(0x0a00_0000),
        IpAddr::V6(_) => None,
    }
}

struct World {
    p: JoinParams,
    peers: Vec<Option<Peer>>,
    started: Vec<bool>,
    gone: Vec<bool>,
    timer: Vec<Option<Duration>>,
    up_free: Vec<Duration>,
    down_free: Vec<Duration>,
    bytes: Vec<u64>,
    queue: BinaryHeap<Reverse<Item>>,
    seq: u64,
    messages: u64,
    scratch: Vec<u8>,
    /// Bytes the server (central) sent, by message kind.
    server_kinds: std::collections::BTreeMap<&'static str, u64>,
    /// `JEL_DEBUG`: bytes per (node, kind) sent, and per (node + 10⁶, kind) received.
    debug: bool,
    node_kinds: std::collections::BTreeMap<(usize, &'static str), u64>,
    start_at: Vec<Duration>,
    /// Index of the first member (central: 1, the server being 0).
    first: usize,
}

impl World {
    fn push(&mut self, at: Duration, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse(Item { at, seq: self.seq, ev }));
    }

    fn bw(&self, i: usize) -> f64 {
        if self.first == 1 && i == 0 {
            self.p.net.server_bw
        } else {
            self.p.net.node_bw
        }
    }

    fn wire_len(&mut self, msg: &Msg) -> usize {
        self.scratch.clear();
        let records = match msg {
            Msg::C(m) => {
                central::encode_into(m, &mut self.scratch);
                m.member_records()
            }
            Msg::D(m) => {
                distributed::encode_into(m, &mut self.scratch);
                m.member_records()
            }
            Msg::DWire(_) => unreachable!("encoded when sent"),
        };
        let pad = self.p.id_bytes.saturating_sub(OUR_ID_BYTES);
        self.scratch.len() + FRAME_BYTES + records * pad
    }

    fn send(&mut self, from: usize, to: Addr, msg: Msg, now: Duration) {
        let Some(to) = index(&to).filter(|&j| j < self.peers.len()) else { return };
        let b = self.wire_len(&msg);
        let msg = match msg {
            Msg::D(_) => Msg::DWire(self.scratch.as_slice().into()),
            m => m,
        };
        self.messages += 1;
        self.bytes[from] += b as u64;
        if self.debug {
            if let Msg::C(m) = &msg {
                *self.node_kinds.entry((from, m.kind())).or_default() += b as u64;
                *self.node_kinds.entry((to + 1_000_000, m.kind())).or_default() += b as u64;
            }
        }
        if self.first == 1 && from == 0 {
            if let Msg::C(m) = &msg {
                *self.server_kinds.entry(m.kind()).or_default() += b as u64;
            }
        }
        let up = self.up_free[from].max(now) + Duration::from_secs_f64(b as f64 / self.bw(from));
        self.up_free[from] = up;
        let arrive = up + self.p.net.latency;
        if self.gone[to] || !self.started[to] {
            // Refused: the sender learns it after a round trip.
            self.push(arrive + self.p.net.latency, Ev::Refused { sender: from, dest: to });
            return;
        }
        self.bytes[to] += b as u64;
        let down = self.down_free[to].max(arrive) + Duration::from_secs_f64(b as f64 / self.bw(to));
        self.down_free[to] = down;
        self.push(down, Ev::Deliver { from, to, msg });
    }

    fn arm(&mut self, i: usize, now: Duration) {
        let d = self.peers[i].as_ref().and_then(Peer::poll_timeout);
        if let Some(d) = d {
            let d = d.max(now);
            if self.timer[i] != Some(d) {
                self.timer[i] = Some(d);
                self.push(d, Ev::Timer(i));
            }
        } else {
            self.timer[i] = None;
        }
    }

    /// Handles what node `i` asked for, then re-arms its timer.
    fn drain(&mut self, i: usize, now: Duration) {
        loop {
            let a = self.peers[i].as_mut().and_then(Peer::poll_output);
            match a {
                Some(Action::Send { to, msg }) => self.send(i, to, msg, now),
                Some(_) => {}
                None => break,
            }
        }
        self.arm(i, now);
    }

    fn pool_size(&self, i: usize) -> usize {
        match self.peers[i].as_ref() {
            Some(Peer::Client(c)) => c.pool_size(),
            Some(Peer::Dist(d)) => d.pool_size(),
            _ => 0,
        }
    }
}

fn map<M>(a: Action<M>, f: impl FnOnce(M) -> Msg) -> Action<Msg> {
    match a {
        Action::Send { to, msg } => Action::Send { to, msg: f(msg) },
        Action::Deliver(e) => Action::Deliver(e),
        Action::ElectionResult { name, winner } => Action::ElectionResult { name, winner },
    }
}

impl World {
    /// The server (central) and the members, not started, and their starts and leaves
    /// queued.
    fn new(p: JoinParams) -> World {
        let first = usize::from(matches!(p.imp, Impl::Central(_)));
        let total = p.n + first;
        let mut rng = Rng::new(derive_seed(p.seed, &[p.n as u64, p.id_bytes as u64]));
        let mut w = World {
            p,
            peers: (0..total).map(|_| None).collect(),
            started: vec![false; total],
            gone: vec![false; total],
            timer: vec![None; total],
            up_free: vec![Duration::ZERO; total],
            down_free: vec![Duration::ZERO; total],
            bytes: vec![0; total],
            queue: BinaryHeap::new(),
            seq: 0,
            messages: 0,
            scratch: Vec::new(),
            server_kinds: Default::default(),
            debug: std::env::var_os("JEL_DEBUG").is_some(),
            node_kinds: Default::default(),
            start_at: vec![Duration::ZERO; total],
            first,
        };
        let ccfg = match p.imp {
            Impl::Central(d) => central::Config::new(d),
            Impl::Distributed => central::Config::default(),
        };
        let dcfg = distributed::Config::default();
        for i in 0..total {
            let id = rng.next_u64();
            let seed = rng.next_u64();
            w.peers[i] = Some(match p.imp {
                Impl::Central(_) if i == 0 => Peer::Server(Box::new(Server::new(ccfg, seed))),
                Impl::Central(_) => {
                    Peer::Client(Box::new(Client::new(id, addr(i), addr(0), ccfg, Consistency::STRONG, seed)))
                }
                Impl::Distributed => {
                    let boot = if i == 0 { vec![] } else { vec![addr(0)] };
                    Peer::Dist(Box::new(
                        Node::new(id, addr(i), boot, dcfg, Consistency::WEAK, seed).expect("weak consistency"),
                    ))
                }
            });
            let start = if i == 0 { Duration::ZERO } else { p.spread.mul_f64(rng.f64()) };
            w.start_at[i] = start;
            w.push(start, Ev::Start(i));
            let leave = p.duration + Duration::from_secs_f64(rng.f64());
            if i >= first {
                w.push(leave, Ev::Leave(i));
            }
        }
        w
    }
}

/// Simulates one join test.
pub fn join_run(p: JoinParams) -> JoinRun {
    let wall = Instant::now();
    let central = matches!(p.imp, Impl::Central(_));
    let mut w = World::new(p);
    let (first, total) = (w.first, w.peers.len());
    w.push(Duration::ZERO, Ev::Sample);
    let end = p.duration + Duration::from_secs(30);
    let mut samples = Vec::new();
    while let Some(Reverse(item)) = w.queue.pop() {
        let now = item.at;
        if now > end {
            break;
        }
        match item.ev {
            Ev::Start(i) => {
                w.started[i] = true;
                if let Some(peer) = w.peers[i].as_mut() {
                    peer.start(now);
                }
                w.drain(i, now);
            }
            Ev::Leave(i) => {
                if let Some(peer) = w.peers[i].as_mut() {
                    peer.leave(now);
                }
                w.drain(i, now);
                w.gone[i] = true;
            }
            Ev::Timer(i) => {
                if w.timer[i] != Some(now) || w.gone[i] {
                    continue;
                }
                w.timer[i] = None;
                if let Some(peer) = w.peers[i].as_mut() {
                    peer.handle_timeout(now);
                }
                w.drain(i, now);
            }
            Ev::Deliver { from, to, msg } => {
                if w.gone[to] {
                    continue;
                }
                if let Some(peer) = w.peers[to].as_mut() {
                    peer.message(now, addr(from), msg);
                }
                w.drain(to, now);
            }
            Ev::Refused { sender, dest } => {
                if w.gone[sender] {
                    continue;
                }
                if let Some(peer) = w.peers[sender].as_mut() {
                    peer.unreachable(now, addr(dest));
                }
                w.drain(sender, now);
            }
            Ev::Sample => {
                if now <= p.duration {
                    let started: Vec<usize> = (first..total).filter(|&i| w.started[i]).collect();
                    let sum: usize = started.iter().map(|&i| w.pool_size(i)).sum();
                    let avg = if started.is_empty() { 0.0 } else { sum as f64 / started.len() as f64 };
                    let all = started.len() == p.n && started.iter().all(|&i| w.pool_size(i) == p.n);
                    samples.push((now.as_secs_f64(), avg, started.len(), all));
                    w.push(now + Duration::from_secs(1), Ev::Sample);
                }
            }
        }
    }
    let n = p.n as f64;
    type Sample = (f64, f64, usize, bool);
    let first_at = |f: &dyn Fn(&Sample) -> bool| samples.iter().find(|s| f(s)).map(|s| s.0);
    let t50 = first_at(&|s| s.1 >= 0.5 * n);
    let t99 = first_at(&|s| s.1 >= 0.99 * n);
    let t_full = first_at(&|s| s.3);
    let node_bytes: Vec<u64> = w.bytes[first..].to_vec();
    if std::env::var_os("JEL_DEBUG").is_some() {
        debug_report(&w, &samples);
    }
    JoinRun {
        p,
        samples: samples.iter().map(|s| (s.0, s.1, s.2)).collect(),
        t50,
        t99,
        t_full,
        server_bytes: if central { w.bytes[0] } else { 0 },
        node_bytes_mean: node_bytes.iter().sum::<u64>() as f64 / p.n.max(1) as f64,
        node_bytes_max: node_bytes.iter().copied().max().unwrap_or(0),
        messages: w.messages,
        wall: wall.elapsed().as_secs_f64(),
    }
}

/// `JEL_DEBUG`: where the bytes went.
fn debug_report(w: &World, samples: &[(f64, f64, usize, bool)]) {
    let (p, first, total) = (w.p, w.first, w.peers.len());
    eprintln!("{} n={}: server sent by kind {:?}", p.imp, p.n, w.server_kinds);
    let top = (first..total).max_by_key(|&i| w.bytes[i]).unwrap_or(0);
    if let Some(Peer::Client(c)) = w.peers[top].as_ref() {
        eprintln!(
            "  top node {top}: {} bytes, {:?}, next {}, pool {}, log {:?}",
            w.bytes[top],
            c.phase(),
            c.next_seq(),
            c.pool_size(),
            c.log().0
        );
    }
    let sent: Vec<_> = w.node_kinds.iter().filter(|((n, _), _)| *n == top).collect();
    let got: Vec<_> = w.node_kinds.iter().filter(|((n, _), _)| *n == top + 1_000_000).collect();
    eprintln!("  top node sent by kind {sent:?}\n  received {got:?}");
    let mut g: Vec<(u64, usize)> = w
        .node_kinds
        .iter()
        .filter(|((n, k), _)| *n >= 1_000_000 && *k == "gossip")
        .map(|((n, _), b)| (*b, n - 1_000_000))
        .collect();
    g.sort_unstable_by(|a, b| b.cmp(a));
    eprintln!("  most gossiped-to (bytes, node): {:?}; median {:?}", &g[..g.len().min(8)], g.get(g.len() / 2));
    let started: Vec<(usize, f64)> =
        g[..g.len().min(8)].iter().map(|&(_, n)| (n, w.start_at.get(n).map_or(-1.0, |d| d.as_secs_f64()))).collect();
    eprintln!("  their start times {started:?}");
    for t in [10.0, 20.0, 30.0, 60.0] {
        if let Some(s) = samples.iter().find(|s| s.0 >= t) {
            eprintln!("  t={t}: avg {:.1}", s.1);
        }
    }
}

impl std::str::FromStr for Impl {
    type Err = String;
    fn from_str(s: &str) -> Result<Impl, String> {
        if s == "distributed" {
            return Ok(Impl::Distributed);
        }
        s.parse::<Dissemination>().map(Impl::Central).map_err(|e| format!("{e} or distributed"))
    }
}

/// Runs some implementations on one setting, `threads` at a time (results in `imps` order).
#[allow(clippy::too_many_arguments)]
pub fn join_some(
    imps: &[Impl],
    n: usize,
    net: Network,
    id_bytes: usize,
    spread: Duration,
    duration: Duration,
    seed: u64,
    threads: usize,
) -> Vec<JoinRun> {
    par_map(imps.len(), threads, |j| join_run(JoinParams { n, imp: imps[j], net, id_bytes, spread, duration, seed }))
}

/// Runs every implementation on one setting, in parallel (results in [`Impl::ALL`] order).
pub fn join_all(
    n: usize,
    net: Network,
    id_bytes: usize,
    spread: Duration,
    duration: Duration,
    seed: u64,
    threads: usize,
) -> Vec<JoinRun> {
    // The slowest (distributed, serial) first, for balance.
    let order = [5usize, 0, 1, 3, 4, 2];
    let runs = par_map(order.len(), threads, |j| {
        let imp = Impl::ALL[order[j]];
        join_run(JoinParams { n, imp, net, id_bytes, spread, duration, seed })
    });
    let mut out: Vec<Option<JoinRun>> = (0..order.len()).map(|_| None).collect();
    for (j, r) in runs.into_iter().enumerate() {
        out[order[j]] = Some(r);
    }
    out.into_iter().map(|r| r.expect("every implementation ran")).collect()
}

fn secs(t: Option<f64>) -> String {
    t.map_or("—".into(), |t| format!("{t:.0}"))
}

/// Megabytes (10⁶ bytes) with two decimals.
pub fn mb(b: f64) -> String {
    format!("{:.2}", b / 1e6)
}

/// The join test's table: when the average perceived pool size reached 50 %, 99 % and 100 %
/// of the pool (everyone sees everyone), and the traffic.
pub fn join_table(runs: &[JoinRun]) -> Table {
    let mut t = Table::new(&[
        "implementation",
        "t 50 % (s)",
        "t 99 % (s)",
        "t all (s)",
        "server MB",
        "node MB (mean)",
        "node MB (max)",
        "messages",
    ]);
    for r in runs {
        t.row(vec![
            r.p.imp.label().into(),
            secs(r.t50),
            secs(r.t99),
            secs(r.t_full),
            if matches!(r.p.imp, Impl::Central(_)) { mb(r.server_bytes as f64) } else { "n.a.".into() },
            mb(r.node_bytes_mean),
            mb(r.node_bytes_max as f64),
            r.messages.to_string(),
        ]);
    }
    t
}

/// Figures 5 and 6: the average perceived pool size over the first `window` seconds.
pub fn join_chart(runs: &[JoinRun], title: &str, window: f64) -> Chart {
    let mut c = Chart::new(title, "time (s)", "average perceived pool size");
    for (k, r) in runs.iter().enumerate() {
        let pts: Vec<(f64, f64)> = r.samples.iter().filter(|s| s.0 <= window).map(|s| (s.0, s.1)).collect();
        let mut s = Series::new(r.p.imp.label(), PALETTE[k % PALETTE.len()], pts);
        s.markers = false;
        c.add(s);
    }
    if let Some(r) = runs.first() {
        let pts: Vec<(f64, f64)> = r.samples.iter().filter(|s| s.0 <= window).map(|s| (s.0, r.p.n as f64)).collect();
        c.add(Series::new("pool size", plotters::style::RGBColor(120, 120, 120), pts).dashed());
    }
    c
}

/// The seed's table II (2000 nodes on DAS-3): server and node-average megabytes.
pub const SEED_TABLE2: [(f64, f64); 6] =
    [(1521.47, 0.76), (677.23, 0.45), (5.57, 1.32), (9.83, 0.49), (40.36, 0.57), (f64::NAN, 25.37)];

/// Table II: ours with Ibis-sized and with our own identifiers, beside the seed's.
pub fn traffic_table(ibis: &[JoinRun], ours: &[JoinRun]) -> Table {
    let mut t = Table::new(&[
        "implementation",
        "server MB (seed)",
        "node MB (seed)",
        "server MB (sim, Ibis ids)",
        "node MB (sim, Ibis ids)",
        "server MB (sim, our ids)",
        "node MB (sim, our ids)",
    ]);
    for (k, (a, b)) in ibis.iter().zip(ours).enumerate() {
        let (ss, sn) = SEED_TABLE2[k];
        let server = |r: &JoinRun| {
            if matches!(r.p.imp, Impl::Central(_)) {
                mb(r.server_bytes as f64)
            } else {
                "n.a.".into()
            }
        };
        t.row(vec![
            a.p.imp.label().into(),
            if ss.is_nan() { "n.a.".into() } else { format!("{ss:.2}") },
            format!("{sn:.2}"),
            server(a),
            mb(a.node_bytes_mean),
            server(b),
            mb(b.node_bytes_mean),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_pool_converges_with_every_implementation_and_the_tree_spares_the_server() {
        let runs = join_all(40, Network::DAS2, 256, Duration::from_secs(2), Duration::from_secs(60), 3, 2);
        for r in &runs {
            assert!(r.t_full.is_some(), "{}: never everyone sees everyone", r.p.imp);
            assert!(r.samples.last().is_some_and(|s| s.1 == 40.0), "{}", r.p.imp);
        }
        let server = |k: usize| runs[k].server_bytes;
        // Serial send carries every newcomer's state and every event to everyone.
        assert!(server(0) > server(1) && server(1) > server(2), "{} {} {}", server(0), server(1), server(2));
        assert_eq!(runs[5].server_bytes, 0);
        // The same seed gives the same run.
        let again = join_run(runs[2].p);
        assert_eq!((again.messages, again.server_bytes), (runs[2].messages, runs[2].server_bytes));
        assert_eq!(join_table(&runs).rows.len(), 6);
        assert!(join_chart(&runs, "t", 60.0).to_svg().is_ok());
    }
}

#[cfg(test)]
mod gossip_hot_spot {
    use super::*;
    use p2pmpi_core::jel::central::Dissemination;

    /// The gossip's hot spot (found at 3000 nodes: the first member sent 462 MB while the mean
    /// was 4): members that installed a state older than their own join were offered to the
    /// next newcomers as bootstrap peers, so whole waves of newcomers knew only the first
    /// member and all caught up from it. Only members whose state reached their join are
    /// bootstrap peers now; no member carries more than a few times the mean.
    #[test]
    fn no_member_of_a_gossiping_pool_carries_the_joins_of_everyone() {
        for d in [Dissemination::Gossip, Dissemination::Adaptive] {
            let r = join_run(JoinParams {
                n: 1000,
                imp: Impl::Central(d),
                net: Network::DAS3,
                id_bytes: 256,
                spread: Duration::from_secs(5),
                duration: Duration::from_secs(30),
                seed: 1,
            });
            assert!(r.t_full.is_some(), "{d}: never everyone sees everyone");
            let ratio = r.node_bytes_max as f64 / r.node_bytes_mean;
            assert!(ratio < 12.0, "{d}: the busiest member carried {ratio:.1}x the mean ({} B)", r.node_bytes_max);
        }
    }
}
