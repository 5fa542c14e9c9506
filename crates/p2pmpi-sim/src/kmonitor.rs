//! The k-monitor detector of [`p2pmpi_core::kmonitor`] (Horita et al.) under simulation: a
//! network of [`Node`]s with virtual time, clusters, NAT, crashes and resets
//! ([`KNet`]), and the seed's figures:
//!
//! * [`disconnect`] (figure 3): the probability that the monitoring graph is disconnected, vs
//!   n and k. Graphs are drawn with the core's own [`choose_monitors`] (what a node calls to
//!   pick its `k` monitors among the processes it knows), checked against graphs built by the
//!   whole protocol on [`KNet`], and compared with an exact union bound (the expected number
//!   of node sets with no edge to the rest, which is what a disconnection takes).
//! * [`tolerance`] (figure 7): the largest number of simultaneous failures for which the
//!   graph of the survivors stays connected with probability ≥ 1 − 10⁻⁴. One Monte-Carlo draw
//!   gives the answer for every number of failures at once: the processes are revived in a
//!   random order into a union-find, and after each one the components are counted.
//! * [`latency`] (figure 10): 173 processes in two clusters (108 + 65 behind a NAT, 4.5 ms
//!   round trip between them), k = 3, T_hb = 0.1 s, T_to = 2.1 s; one process crashes; when
//!   does every process know, and how many notices were flooded.
//! * [`traffic`]: bytes per second per process in the steady state vs n, up to 10 000, beside
//!   the gossip detector's (DBRR, [`crate::detection`]).

use crate::par::par_map;
use crate::plot::{Chart, Series, PALETTE};
use crate::rng::{derive_seed, Rng};
use crate::table::{prob, Table};
use p2pmpi_core::kmonitor::{
    choose_monitors, encoded_len, Action, Cause, Config, Directory, Endpoint, Input, Message, Node, NodeId,
};
use p2pmpi_core::machine::Machine;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

// ============================================================================ the network

/// Bytes a driver adds per message (a 4-byte length prefix); TCP/IP headers are not counted.
pub const FRAME_BYTES: usize = 4;

#[derive(Debug, Clone)]
enum Ev {
    Tick(usize),
    Deliver { from: usize, to: usize, epoch: u64, msg: Message },
    Connected { a: usize, b: usize, epoch: u64 },
    ConnFail { a: usize, b: usize },
    Closed { to: usize, from: usize, epoch: u64 },
    Crash { node: usize, reset: bool },
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

/// A cluster of the simulated grid.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub size: usize,
    /// One-way latency inside the cluster.
    pub latency: Duration,
    /// Others cannot open connections into it (NAT); its members can connect out.
    pub nat: bool,
}

/// A simulated grid: clusters, and the one-way latency between two clusters.
#[derive(Debug, Clone)]
pub struct Topology {
    pub clusters: Vec<ClusterSpec>,
    pub inter: Duration,
    /// How long a connection attempt into a NAT (or to a dead host) takes to fail.
    pub connect_timeout: Duration,
}

impl Topology {
    /// One LAN of `n` processes, 50 µs apart.
    pub fn lan(n: usize) -> Topology {
        Topology {
            clusters: vec![ClusterSpec { size: n, latency: Duration::from_micros(50), nat: false }],
            inter: Duration::ZERO,
            connect_timeout: Duration::from_secs(1),
        }
    }

    /// The seed's figure-10 set-up: 108 processes in cluster A, 65 in cluster C behind a NAT,
    /// 4.5 ms round trip between them, 50 µs inside each.
    pub fn figure10() -> Topology {
        let lan = Duration::from_micros(50);
        Topology {
            clusters: vec![
                ClusterSpec { size: 108, latency: lan, nat: false },
                ClusterSpec { size: 65, latency: lan, nat: true },
            ],
            inter: Duration::from_micros(2250),
            connect_timeout: Duration::from_secs(1),
        }
    }

    /// Number of processes.
    pub fn n(&self) -> usize {
        self.clusters.iter().map(|c| c.size).sum()
    }

    /// The endpoints: cluster `c` is 10.c.0.0/16.
    pub fn endpoints(&self) -> Vec<Endpoint> {
        let mut v = Vec::new();
        for (c, spec) in self.clusters.iter().enumerate() {
            for i in 0..spec.size {
                let id = v.len() as NodeId;
                v.push(Endpoint::v4(id, [10, c as u8, (i >> 8) as u8, (i & 255) as u8], 16, 7000));
            }
        }
        v
    }
}

/// What a process reported.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    pub observer: usize,
    pub node: NodeId,
    pub cause: Cause,
    pub at: Duration,
}

/// The k-monitor detectors of a simulated grid.
pub struct KNet {
    pub nodes: Vec<Node>,
    cluster: Vec<usize>,
    topo: Topology,
    alive: Vec<bool>,
    now: Duration,
    q: BinaryHeap<Reverse<Item>>,
    seq: u64,
    conns: HashMap<(u32, u32), u64>,
    closed_by: HashMap<u64, usize>,
    epochs: u64,
    armed: Vec<Option<Duration>>,
    pub reports: Vec<Report>,
    /// Per process: bytes sent (payload + [`FRAME_BYTES`]) and messages sent.
    pub bytes: Vec<u64>,
    pub msgs: Vec<u64>,
    /// Failure notices sent, in total.
    pub failure_msgs: u64,
    pub events: u64,
}

fn pair(a: usize, b: usize) -> (u32, u32) {
    (a.min(b) as u32, a.max(b) as u32)
}

impl KNet {
    /// The detectors of `topo`, every one knowing every process, not started.
    pub fn new(topo: Topology, cfg: Config, seed: u64) -> KNet {
        let eps = topo.endpoints();
        let dir = Arc::new(Directory::new(eps.clone(), cfg.wide_area));
        let cluster: Vec<usize> =
            topo.clusters.iter().enumerate().flat_map(|(c, s)| std::iter::repeat_n(c, s.size)).collect();
        let n = eps.len();
        let nodes = eps.iter().map(|e| Node::new(*e, dir.clone(), cfg, derive_seed(seed, &[e.id as u64]))).collect();
        KNet {
            nodes,
            cluster,
            topo,
            alive: vec![true; n],
            now: Duration::ZERO,
            q: BinaryHeap::new(),
            seq: 0,
            conns: HashMap::new(),
            closed_by: HashMap::new(),
            epochs: 0,
            armed: vec![None; n],
            reports: Vec::new(),
            bytes: vec![0; n],
            msgs: vec![0; n],
            failure_msgs: 0,
            events: 0,
        }
    }

    /// The current virtual time.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Whether process `i` has not crashed.
    pub fn is_alive(&self, i: usize) -> bool {
        self.alive[i]
    }

    /// The cluster index of process `i`.
    pub fn cluster_of(&self, i: usize) -> usize {
        self.cluster[i]
    }

    fn lat(&self, a: usize, b: usize) -> Duration {
        if self.cluster[a] == self.cluster[b] {
            self.topo.clusters[self.cluster[a]].latency
        } else {
            self.topo.inter
        }
    }

    fn push(&mut self, at: Duration, ev: Ev) {
        self.seq += 1;
        self.q.push(Reverse(Item { at, seq: self.seq, ev }));
    }

    /// Feeds node `i` one input at `at`, then carries out what it asks for.
    fn feed(&mut self, i: usize, at: Duration, input: Input) {
        match self.nodes[i].handle_input(at, input) {
            Ok(()) => {}
            Err(never) => match never {},
        }
        self.after(i);
    }

    /// Starts every detector now.
    pub fn start_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.feed(i, self.now, Input::Start);
        }
    }

    /// Process `node` crashes at `at`; with `reset` its connections are reset (a process
    /// crash on a live host), otherwise it goes silent (a host crash).
    pub fn crash_at(&mut self, node: usize, at: Duration, reset: bool) {
        self.push(at, Ev::Crash { node, reset });
    }

    fn after(&mut self, i: usize) {
        while let Some(a) = self.nodes[i].poll_output() {
            match a {
                Action::Connect { to } => {
                    let b = to.id as usize;
                    let l = self.lat(i, b);
                    let blocked = self.cluster[i] != self.cluster[b] && self.topo.clusters[self.cluster[b]].nat;
                    if let Some(&e) = self.conns.get(&pair(i, b)) {
                        self.push(self.now + l * 2, Ev::Connected { a: i, b, epoch: e });
                    } else if blocked || !self.alive[b] {
                        let t = self.topo.connect_timeout;
                        self.push(self.now + t, Ev::ConnFail { a: i, b });
                    } else {
                        self.epochs += 1;
                        let e = self.epochs;
                        self.conns.insert(pair(i, b), e);
                        self.push(self.now + l * 2, Ev::Connected { a: i, b, epoch: e });
                    }
                }
                Action::Send { to, msg } => {
                    let b = to as usize;
                    self.bytes[i] += (encoded_len(&msg) + FRAME_BYTES) as u64;
                    self.msgs[i] += 1;
                    if matches!(msg, Message::Failure { .. }) {
                        self.failure_msgs += 1;
                    }
                    match self.conns.get(&pair(i, b)) {
                        Some(&epoch) => {
                            let l = self.lat(i, b);
                            self.push(self.now + l, Ev::Deliver { from: i, to: b, epoch, msg })
                        }
                        None => self.push(self.now, Ev::Closed { to: i, from: b, epoch: 0 }),
                    }
                }
                Action::Disconnect { to } => {
                    let b = to as usize;
                    if let Some(epoch) = self.conns.remove(&pair(i, b)) {
                        self.closed_by.insert(epoch, i);
                        let l = self.lat(i, b);
                        self.push(self.now + l, Ev::Closed { to: b, from: i, epoch });
                    }
                }
                Action::Failed { node, cause } => self.reports.push(Report { observer: i, node, cause, at: self.now }),
            }
        }
        if let Some(d) = self.nodes[i].poll_timeout() {
            let d = d.max(self.now);
            if self.armed[i].is_none_or(|a| d < a) {
                self.armed[i] = Some(d);
                self.push(d, Ev::Tick(i));
            }
        }
    }

    /// Runs every event up to `end`.
    pub fn run_until(&mut self, end: Duration) {
        while let Some(Reverse(it)) = self.q.peek() {
            if it.at > end {
                break;
            }
            let Reverse(Item { at, ev, .. }) = self.q.pop().expect("peeked");
            self.now = at;
            self.events += 1;
            match ev {
                Ev::Tick(i) => {
                    if self.armed[i] != Some(at) {
                        continue;
                    }
                    self.armed[i] = None;
                    if self.alive[i] {
                        self.nodes[i].handle_timeout(at);
                        self.after(i);
                    }
                }
                Ev::Deliver { from, to, epoch, msg } => {
                    let open = self.conns.get(&pair(from, to)) == Some(&epoch);
                    if self.alive[to] && (open || self.closed_by.get(&epoch) == Some(&from)) {
                        self.feed(to, at, Input::Message { from: from as NodeId, msg });
                    }
                }
                Ev::Connected { a, b, epoch } => {
                    if self.alive[a] {
                        let input = if self.conns.get(&pair(a, b)) == Some(&epoch) {
                            Input::Connected(b as NodeId)
                        } else {
                            Input::ConnectFailed(b as NodeId)
                        };
                        self.feed(a, at, input);
                    }
                }
                Ev::ConnFail { a, b } => {
                    if self.alive[a] {
                        self.feed(a, at, Input::ConnectFailed(b as NodeId));
                    }
                }
                Ev::Closed { to, from, epoch } => {
                    let current = self.conns.get(&pair(from, to)).copied();
                    if current.is_some() && current != Some(epoch) || epoch == 0 && current.is_some() {
                        continue;
                    }
                    if self.alive[to] {
                        self.feed(to, at, Input::ConnectionReset(from as NodeId));
                    }
                }
                Ev::Crash { node, reset } => {
                    self.alive[node] = false;
                    if reset {
                        let mut mine: Vec<(u32, u32)> = self
                            .conns
                            .keys()
                            .copied()
                            .filter(|&(a, b)| a as usize == node || b as usize == node)
                            .collect();
                        mine.sort_unstable();
                        for p in mine {
                            let e = self.conns.remove(&p).expect("connection");
                            let other = if p.0 as usize == node { p.1 as usize } else { p.0 as usize };
                            let l = self.lat(node, other);
                            self.push(at + l, Ev::Closed { to: other, from: node, epoch: e });
                        }
                    }
                }
            }
        }
        self.now = self.now.max(end);
    }

    /// The undirected monitoring graph of the live processes: `(p, monitor)` for every
    /// monitor of every live process.
    pub fn monitoring_edges(&self) -> Vec<(usize, usize)> {
        let mut e = Vec::new();
        for (i, x) in self.nodes.iter().enumerate() {
            if self.alive[i] {
                e.extend(x.monitors().map(|m| (i, m as usize)));
            }
        }
        e
    }

    /// Established wide-area connections between clusters `a` and `b` (both ends agree).
    pub fn wide_links(&self, a: usize, b: usize) -> usize {
        let mut n = 0;
        for i in (0..self.nodes.len()).filter(|&i| self.alive[i] && self.cluster[i] == a) {
            for j in self.nodes[i].wide_peers() {
                let j = j as usize;
                if self.alive[j] && self.cluster[j] == b && self.nodes[j].wide_peers().any(|x| x as usize == i) {
                    n += 1;
                }
            }
        }
        n
    }
}

// ============================================================================ graphs

/// A union-find over `0..n` (union by size, path halving).
pub struct Dsu {
    parent: Vec<u32>,
    size: Vec<u32>,
    /// Number of sets.
    pub sets: usize,
}

impl Dsu {
    pub fn new(n: usize) -> Dsu {
        Dsu { parent: (0..n as u32).collect(), size: vec![1; n], sets: n }
    }

    pub fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] as usize != x {
            let p = self.parent[x] as usize;
            self.parent[x] = self.parent[p];
            x = self.parent[x] as usize;
        }
        x
    }

    pub fn union(&mut self, a: usize, b: usize) {
        let (mut a, mut b) = (self.find(a), self.find(b));
        if a == b {
            return;
        }
        if self.size[a] < self.size[b] {
            std::mem::swap(&mut a, &mut b);
        }
        self.parent[b] = a as u32;
        self.size[a] += self.size[b];
        self.sets -= 1;
    }
}

/// A monitoring graph as the detector draws it: process `i` asks `k` distinct others, picked
/// by the core's [`choose_monitors`] with the node's own generator. `out[i*k..(i+1)*k]` are
/// `i`'s monitors.
pub fn random_graph(n: usize, k: usize, state: &mut u64, out: &mut Vec<u32>) {
    out.clear();
    let k = k.min(n.saturating_sub(1));
    for i in 0..n {
        for j in choose_monitors(state, n - 1, k) {
            let m = if j >= i { j + 1 } else { j };
            out.push(m as u32);
        }
    }
}

fn connected(n: usize, k: usize, edges: &[u32], dsu: &mut Dsu) -> bool {
    *dsu = Dsu::new(n);
    let k = k.min(n.saturating_sub(1));
    for i in 0..n {
        for &m in &edges[i * k..(i + 1) * k] {
            dsu.union(i, m as usize);
        }
    }
    dsu.sets == 1
}

/// `ln(i!)` for `i ≤ n`.
fn ln_factorials(n: usize) -> Vec<f64> {
    let mut v = vec![0.0; n + 1];
    for i in 1..=n {
        v[i] = v[i - 1] + (i as f64).ln();
    }
    v
}

fn ln_choose(lf: &[f64], a: usize, b: usize) -> f64 {
    if b > a {
        f64::NEG_INFINITY
    } else {
        lf[a] - lf[b] - lf[a - b]
    }
}

/// The expected number of sets `S` of `k < |S| ≤ n/2` processes with no monitoring edge to
/// the rest: every member of `S` picked its `k` monitors inside `S`, every other process
/// outside (a cut into two halves counted once). A disconnected graph has such a set (its
/// smallest component, or a union of small ones), so this is an upper bound on the
/// probability of disconnection, and a tight one when small.
pub fn disconnect_bound(n: usize, k: usize) -> f64 {
    if n < 2 || k == 0 {
        return if n >= 2 { 1.0 } else { 0.0 };
    }
    let lf = ln_factorials(n);
    let all = ln_choose(&lf, n - 1, k);
    let mut sum = 0.0;
    for s in (k + 1)..=(n / 2) {
        let l = ln_choose(&lf, n, s)
            + s as f64 * (ln_choose(&lf, s - 1, k) - all)
            + (n - s) as f64 * (ln_choose(&lf, n - s - 1, k) - all);
        // With |S| = n/2, S and its complement are the same cut: count it once.
        sum += if 2 * s == n { l.exp() / 2.0 } else { l.exp() };
    }
    sum
}

/// 95 % Wilson interval of a proportion `x/t`.
pub fn wilson(x: u64, t: u64) -> (f64, f64) {
    if t == 0 {
        return (0.0, 1.0);
    }
    let (x, t) = (x as f64, t as f64);
    let z = 1.959_964f64;
    let p = x / t;
    let d = 1.0 + z * z / t;
    let c = (p + z * z / (2.0 * t)) / d;
    let h = z * ((p * (1.0 - p) / t + z * z / (4.0 * t * t)).sqrt()) / d;
    ((c - h).max(0.0), (c + h).min(1.0))
}

/// Splits `trials` into `chunks` jobs run on `threads`, each with its own seed; sums.
fn mc<F: Fn(u64, u64) -> Vec<u64> + Sync>(trials: u64, threads: usize, seed: u64, f: F) -> Vec<u64> {
    let chunks = (threads * 4).max(1) as u64;
    let per = trials.div_ceil(chunks);
    let parts = par_map(chunks as usize, threads, |c| {
        let lo = c as u64 * per;
        let hi = (lo + per).min(trials);
        if lo >= hi {
            Vec::new()
        } else {
            f(derive_seed(seed, &[c as u64]), hi - lo)
        }
    });
    let len = parts.iter().map(|p| p.len()).max().unwrap_or(0);
    let mut out = vec![0u64; len];
    for p in parts {
        for (o, v) in out.iter_mut().zip(p) {
            *o += v;
        }
    }
    out
}

// ============================================================================ figure 3

/// Parameters of the disconnection experiment (figure 3).
#[derive(Debug, Clone)]
pub struct DisconnectParams {
    pub ks: Vec<usize>,
    /// Sizes of the exact bound.
    pub sizes: Vec<usize>,
    /// Sizes also estimated by Monte-Carlo.
    pub mc_sizes: Vec<usize>,
    pub trials: u64,
    /// Graphs built by running the whole protocol, per (k, n) of `protocol_points`.
    pub protocol_runs: usize,
    pub protocol_points: Vec<(usize, usize)>,
    pub seed: u64,
    pub threads: usize,
}

impl DisconnectParams {
    /// The committed figure's parameters, `scale` times fewer trials (1 = full).
    pub fn new(scale: f64, threads: usize, seed: u64) -> DisconnectParams {
        let mut sizes: Vec<usize> = (3..=20).collect();
        sizes.extend([25, 30, 40, 50, 70, 100, 150, 200, 300, 500, 700, 1000]);
        DisconnectParams {
            ks: vec![1, 2, 3, 4, 5],
            sizes,
            mc_sizes: vec![3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 20, 30, 50, 100],
            trials: ((200_000.0 / scale) as u64).max(1000),
            protocol_runs: ((2000.0 / scale) as usize).max(50),
            protocol_points: vec![(1, 8), (1, 20), (2, 6), (2, 10)],
            seed,
            threads,
        }
    }
}

/// One line of figure 3.
#[derive(Debug, Clone)]
pub struct DisconnectRow {
    pub k: usize,
    pub n: usize,
    pub bound: f64,
    /// Monte-Carlo: disconnected graphs among `trials` (None: not estimated).
    pub mc: Option<(u64, u64)>,
    /// Graphs built by the protocol itself: disconnected among runs.
    pub protocol: Option<(u64, u64)>,
}

/// A monitoring graph built by the protocol: `n` processes on a LAN, run 1 s.
pub fn protocol_graph_connected(n: usize, k: usize, seed: u64) -> bool {
    let cfg = Config { wide_area: false, ..Config::new(k, Duration::from_millis(100), Duration::from_millis(2100)) };
    let mut net = KNet::new(Topology::lan(n), cfg, seed);
    net.start_all();
    net.run_until(Duration::from_secs(1));
    let mut d = Dsu::new(n);
    for (a, b) in net.monitoring_edges() {
        d.union(a, b);
    }
    d.sets == 1
}

/// Runs figure 3.
pub fn disconnect(p: &DisconnectParams) -> Vec<DisconnectRow> {
    let mut rows = Vec::new();
    for &k in &p.ks {
        for &n in &p.sizes {
            if n <= k {
                continue;
            }
            let mc = p.mc_sizes.contains(&n).then(|| {
                let c = mc(p.trials, p.threads, derive_seed(p.seed, &[3, k as u64, n as u64]), |s, t| {
                    let mut st = s;
                    let (mut e, mut d) = (Vec::new(), Dsu::new(n));
                    let mut bad = 0;
                    for _ in 0..t {
                        random_graph(n, k, &mut st, &mut e);
                        bad += !connected(n, k, &e, &mut d) as u64;
                    }
                    vec![bad]
                });
                (c[0], p.trials)
            });
            let protocol = p.protocol_points.contains(&(k, n)).then(|| {
                let runs = p.protocol_runs;
                let bad = par_map(runs, p.threads, |r| {
                    !protocol_graph_connected(n, k, derive_seed(p.seed, &[33, k as u64, n as u64, r as u64]))
                });
                (bad.iter().filter(|&&b| b).count() as u64, runs as u64)
            });
            rows.push(DisconnectRow { k, n, bound: disconnect_bound(n, k), mc, protocol });
        }
    }
    rows
}

fn frac(c: Option<(u64, u64)>) -> String {
    match c {
        None => String::new(),
        Some((0, t)) => format!("0 / {t} (< {})", prob(wilson(0, t).1)),
        Some((x, t)) => {
            let (lo, hi) = wilson(x, t);
            format!("{} ({}–{})", prob(x as f64 / t as f64), prob(lo), prob(hi))
        }
    }
}

/// Figure 3's table.
pub fn disconnect_table(rows: &[DisconnectRow]) -> Table {
    let mut t = Table::new(&["k", "n", "bound E[isolated sets]", "Monte-Carlo (95 % CI)", "protocol runs (95 % CI)"]);
    for r in rows {
        t.row(vec![r.k.to_string(), r.n.to_string(), prob(r.bound), frac(r.mc), frac(r.protocol)]);
    }
    t
}

/// Figure 3's chart.
pub fn disconnect_chart(rows: &[DisconnectRow], p: &DisconnectParams) -> Chart {
    let mut c = Chart::new(
        "Probability that the monitoring graph is disconnected (Horita fig. 3)",
        "number of processes n",
        "P(disconnected)",
    );
    c.y_log = true;
    c.x_log2 = true;
    c.legend_upper_right = true;
    for (i, &k) in p.ks.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let rs: Vec<&DisconnectRow> = rows.iter().filter(|r| r.k == k).collect();
        c.add(
            Series::new(format!("k = {k}: bound"), color, rs.iter().map(|r| (r.n as f64, r.bound.min(1.0))).collect())
                .dashed(),
        );
        let pts: Vec<(f64, f64)> = rs
            .iter()
            .filter_map(|r| r.mc.filter(|m| m.0 > 0).map(|(x, t)| (r.n as f64, x as f64 / t as f64)))
            .collect();
        if !pts.is_empty() {
            c.add_scatter(Series::new(format!("k = {k}: Monte-Carlo"), color, pts));
        }
    }
    c
}

// ============================================================================ figure 7

/// Parameters of the tolerance experiment (figure 7).
#[derive(Debug, Clone)]
pub struct ToleranceParams {
    pub ks: Vec<usize>,
    pub sizes: Vec<usize>,
    /// Draws per (k, n) for n ≤ 1000; larger n get `trials_large`.
    pub trials: u64,
    pub trials_large: u64,
    /// The disconnection probability to stay under.
    pub threshold: f64,
    pub seed: u64,
    pub threads: usize,
}

impl ToleranceParams {
    /// The committed figure's parameters, `scale` times fewer draws.
    pub fn new(scale: f64, threads: usize, seed: u64) -> ToleranceParams {
        ToleranceParams {
            ks: vec![2, 3, 4, 5, 6],
            sizes: vec![10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
            trials: ((100_000.0 / scale) as u64).max(2000),
            trials_large: ((20_000.0 / scale) as u64).max(1000),
            threshold: 1e-4,
            seed,
            threads,
        }
    }
}

/// One point of figure 7.
#[derive(Debug, Clone)]
pub struct ToleranceRow {
    pub k: usize,
    pub n: usize,
    pub trials: u64,
    /// Largest f such that every f' ≤ f had an estimated disconnection probability below
    /// the threshold.
    pub f_max: usize,
    /// Disconnections seen at `f_max` and at `f_max + 1`.
    pub at_max: u64,
    pub above: u64,
    pub wall: f64,
}

/// Disconnections of the survivors' graph for every number of failures `f` (index `f`),
/// over `t` draws.
pub fn failures_profile(n: usize, k: usize, seed: u64, t: u64) -> Vec<u64> {
    let mut st = seed;
    let mut rng = Rng::new(seed ^ 0x51ED);
    let mut disc = vec![0u64; n + 1];
    let mut e = Vec::new();
    let kk = k.min(n - 1);
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut present = vec![false; n];
    // Adjacency (both directions) for the incremental insertion.
    let mut deg = vec![0u32; n + 1];
    let mut adj = vec![0u32; 2 * n * kk];
    for _ in 0..t {
        random_graph(n, k, &mut st, &mut e);
        deg.iter_mut().for_each(|d| *d = 0);
        for i in 0..n {
            for &m in &e[i * kk..(i + 1) * kk] {
                deg[i + 1] += 1;
                deg[m as usize + 1] += 1;
            }
        }
        for i in 0..n {
            deg[i + 1] += deg[i];
        }
        let mut fill = deg.clone();
        for i in 0..n {
            for &m in &e[i * kk..(i + 1) * kk] {
                adj[fill[i] as usize] = m;
                fill[i] += 1;
                adj[fill[m as usize] as usize] = i as u32;
                fill[m as usize] += 1;
            }
        }
        for i in (1..n).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        present.iter_mut().for_each(|p| *p = false);
        let mut d = Dsu::new(n);
        let mut comps = 0usize;
        for (m, &v) in order.iter().enumerate() {
            let v = v as usize;
            present[v] = true;
            comps += 1;
            for &w in &adj[deg[v] as usize..deg[v + 1] as usize] {
                let w = w as usize;
                if present[w] && d.find(v) != d.find(w) {
                    d.union(v, w);
                    comps -= 1;
                }
            }
            // m + 1 survivors, n − m − 1 failures.
            if comps > 1 {
                disc[n - m - 1] += 1;
            }
        }
    }
    disc
}

/// Runs figure 7.
pub fn tolerance(p: &ToleranceParams) -> Vec<ToleranceRow> {
    let mut rows = Vec::new();
    for &k in &p.ks {
        for &n in &p.sizes {
            if n <= k + 1 {
                continue;
            }
            let wall = Instant::now();
            let t = if n > 1000 { p.trials_large } else { p.trials };
            let disc =
                mc(t, p.threads, derive_seed(p.seed, &[7, k as u64, n as u64]), |s, t| failures_profile(n, k, s, t));
            let limit = p.threshold * t as f64;
            let mut f_max = 0;
            while f_max + 1 < n && (disc[f_max + 1] as f64) < limit {
                f_max += 1;
            }
            rows.push(ToleranceRow {
                k,
                n,
                trials: t,
                f_max,
                at_max: disc[f_max],
                above: disc.get(f_max + 1).copied().unwrap_or(0),
                wall: wall.elapsed().as_secs_f64(),
            });
        }
    }
    rows
}

/// Figure 7's table.
pub fn tolerance_table(rows: &[ToleranceRow]) -> Table {
    let mut t = Table::new(&[
        "k",
        "n",
        "draws",
        "max failures f",
        "f / n",
        "disconnected at f",
        "at f + 1",
        "P(f+1) 95 % CI",
        "wall (s)",
    ]);
    for r in rows {
        let (lo, hi) = wilson(r.above, r.trials);
        t.row(vec![
            r.k.to_string(),
            r.n.to_string(),
            r.trials.to_string(),
            r.f_max.to_string(),
            format!("{:.3}", r.f_max as f64 / r.n as f64),
            r.at_max.to_string(),
            r.above.to_string(),
            format!("{}–{}", prob(lo), prob(hi)),
            format!("{:.1}", r.wall),
        ]);
    }
    t
}

/// Figure 7's chart.
pub fn tolerance_chart(rows: &[ToleranceRow], p: &ToleranceParams) -> Chart {
    let mut c = Chart::new(
        "Simultaneous failures tolerated with P(disconnected) < 1e-4 (Horita fig. 7)",
        "number of processes n",
        "max failures",
    );
    c.x_log2 = true;
    c.y_log = true;
    for (i, &k) in p.ks.iter().enumerate() {
        let pts = rows.iter().filter(|r| r.k == k).map(|r| (r.n as f64, r.f_max as f64)).collect();
        c.add(Series::new(format!("k = {k}"), PALETTE[i % PALETTE.len()], pts));
    }
    c
}

// ============================================================================ figure 10

/// Parameters of the detection-latency experiment (figure 10).
#[derive(Debug, Clone)]
pub struct LatencyParams {
    pub topo: Topology,
    pub cfg: Config,
    pub runs: usize,
    /// The crash comes after this warm-up (plus a uniform part of one T_hb).
    pub warmup: Duration,
    /// Crash the process (connections reset) instead of its host (silence).
    pub reset: bool,
    pub seed: u64,
    pub threads: usize,
}

impl LatencyParams {
    /// The seed's setting: figure-10 topology, k = 3, T_hb = 0.1 s, T_to = 2.1 s.
    pub fn new(runs: usize, threads: usize, seed: u64) -> LatencyParams {
        LatencyParams {
            topo: Topology::figure10(),
            cfg: Config::new(3, Duration::from_millis(100), Duration::from_millis(2100)),
            runs,
            warmup: Duration::from_secs(10),
            reset: false,
            seed,
            threads,
        }
    }
}

/// One run of figure 10.
#[derive(Debug, Clone)]
pub struct LatencyRun {
    pub victim: usize,
    pub victim_cluster: usize,
    /// Per survivor, from the crash to its notification (sorted; `None` never).
    pub delays: Vec<f64>,
    pub missing: usize,
    pub failure_msgs: u64,
    /// Wide-area connections between the two first clusters when the crash happened.
    pub wide_links: usize,
    /// Reports about live processes.
    pub false_reports: usize,
    pub n: usize,
}

/// Runs one crash.
pub fn latency_run(p: &LatencyParams, run: usize) -> LatencyRun {
    let seed = derive_seed(p.seed, &[10, run as u64, p.reset as u64]);
    let mut net = KNet::new(p.topo.clone(), p.cfg, seed);
    let n = net.nodes.len();
    let mut rng = Rng::new(seed ^ 1);
    let victim = rng.below(n as u64) as usize;
    let crash = p.warmup + p.cfg.t_hb.mul_f64(rng.f64());
    net.start_all();
    net.run_until(crash);
    let wide_links = if p.topo.clusters.len() > 1 { net.wide_links(0, 1) } else { 0 };
    let before = net.failure_msgs;
    net.crash_at(victim, crash, p.reset);
    net.run_until(crash + p.cfg.t_to.max(p.cfg.wide_t_to) + Duration::from_secs(1));
    let mut delays: Vec<f64> = Vec::new();
    let mut missing = 0;
    for i in (0..n).filter(|&i| i != victim) {
        match net.reports.iter().find(|r| r.observer == i && r.node == victim as NodeId) {
            Some(r) => delays.push((r.at - crash).as_secs_f64()),
            None => missing += 1,
        }
    }
    delays.sort_by(f64::total_cmp);
    LatencyRun {
        victim,
        victim_cluster: net.cluster_of(victim),
        delays,
        missing,
        failure_msgs: net.failure_msgs - before,
        wide_links,
        false_reports: net.reports.iter().filter(|r| r.node as usize != victim).count(),
        n,
    }
}

/// Runs figure 10's crashes.
pub fn latency(p: &LatencyParams) -> Vec<LatencyRun> {
    par_map(p.runs, p.threads, |r| latency_run(p, r))
}

/// Figure 10's table: one line per run.
pub fn latency_table(runs: &[LatencyRun], k: usize) -> Table {
    let mut t = Table::new(&[
        "run",
        "victim (cluster)",
        "first (s)",
        "median (s)",
        "last (s)",
        "last − first (ms)",
        "not notified",
        "notices",
        "kn",
        "2kn",
        "A–C links",
        "false reports",
    ]);
    for (i, r) in runs.iter().enumerate() {
        let d = &r.delays;
        let (first, last) = (d.first().copied().unwrap_or(f64::NAN), d.last().copied().unwrap_or(f64::NAN));
        t.row(vec![
            i.to_string(),
            format!("{} ({})", r.victim, ["A", "C", "D", "E"][r.victim_cluster.min(3)]),
            format!("{first:.4}"),
            format!("{:.4}", d.get(d.len() / 2).copied().unwrap_or(f64::NAN)),
            format!("{last:.4}"),
            format!("{:.2}", (last - first) * 1e3),
            r.missing.to_string(),
            r.failure_msgs.to_string(),
            (k * r.n).to_string(),
            (2 * k * r.n).to_string(),
            r.wide_links.to_string(),
            r.false_reports.to_string(),
        ]);
    }
    t
}

/// Figure 10's chart: every survivor's detection latency, sorted, for a few runs.
pub fn latency_chart(runs: &[LatencyRun], title: &str) -> Chart {
    let mut c = Chart::new(title, "processes (sorted by latency)", "seconds after the crash");
    for (i, r) in runs.iter().take(4).enumerate() {
        let pts = r.delays.iter().enumerate().map(|(j, &d)| (j as f64, d)).collect();
        c.add(Series::new(format!("run {i}"), PALETTE[i % PALETTE.len()], pts));
    }
    c
}

// ============================================================================ traffic

/// Parameters of the traffic experiment.
#[derive(Debug, Clone)]
pub struct TrafficParams {
    pub sizes: Vec<usize>,
    pub cfg: Config,
    pub warmup: Duration,
    pub window: Duration,
    /// Gossip periods for the DBRR comparison.
    pub gossip_periods: Vec<Duration>,
    pub seed: u64,
    pub threads: usize,
}

impl TrafficParams {
    /// n up to `max_n`, k = 4, T_hb = 0.1 s (the seed's overhead experiment).
    pub fn new(max_n: usize, threads: usize, seed: u64) -> TrafficParams {
        TrafficParams {
            sizes: [32, 100, 316, 1000, 3162, 10_000].into_iter().filter(|&n| n <= max_n).collect(),
            cfg: Config { wide_area: false, ..Config::new(4, Duration::from_millis(100), Duration::from_millis(2100)) },
            warmup: Duration::from_secs(3),
            window: Duration::from_secs(2),
            gossip_periods: vec![Duration::from_millis(100), Duration::from_millis(500)],
            seed,
            threads,
        }
    }
}

/// One size of the traffic experiment.
#[derive(Debug, Clone)]
pub struct TrafficRow {
    pub n: usize,
    /// Bytes sent per process per second in the window: mean and largest.
    pub mean: f64,
    pub max: f64,
    pub msgs: f64,
    /// Bytes sent per process during the set-up (the warm-up).
    pub setup: f64,
    pub events: u64,
    pub wall: f64,
}

/// Runs the traffic experiment (one simulation per size, largest first).
pub fn traffic(p: &TrafficParams) -> Vec<TrafficRow> {
    let mut order: Vec<usize> = (0..p.sizes.len()).collect();
    order.sort_by_key(|&i| Reverse(p.sizes[i]));
    let res = par_map(order.len(), p.threads, |j| {
        let n = p.sizes[order[j]];
        let wall = Instant::now();
        let mut net = KNet::new(Topology::lan(n), p.cfg, derive_seed(p.seed, &[77, n as u64]));
        net.start_all();
        net.run_until(p.warmup);
        let b0 = net.bytes.clone();
        let m0: u64 = net.msgs.iter().sum();
        net.run_until(p.warmup + p.window);
        let w = p.window.as_secs_f64();
        let per: Vec<f64> = net.bytes.iter().zip(&b0).map(|(a, b)| (a - b) as f64 / w).collect();
        TrafficRow {
            n,
            mean: per.iter().sum::<f64>() / n as f64,
            max: per.iter().copied().fold(0.0, f64::max),
            msgs: (net.msgs.iter().sum::<u64>() - m0) as f64 / w / n as f64,
            setup: b0.iter().sum::<u64>() as f64 / n as f64,
            events: net.events,
            wall: wall.elapsed().as_secs_f64(),
        }
    });
    let mut rows: Vec<Option<TrafficRow>> = vec![None; p.sizes.len()];
    for (j, r) in res.into_iter().enumerate() {
        rows[order[j]] = Some(r);
    }
    rows.into_iter().map(|r| r.expect("ran")).collect()
}

/// Bytes per second per process of the gossip detector: one table of `n` counters of 8
/// bytes per period, as [`crate::detection`] counts it.
pub fn dbrr_bytes(n: usize, period: Duration) -> f64 {
    8.0 * n as f64 / period.as_secs_f64()
}

/// The traffic table.
pub fn traffic_table(rows: &[TrafficRow], p: &TrafficParams) -> Table {
    let mut h: Vec<String> = vec![
        "n".into(),
        "k-monitor B/s/proc (mean)".into(),
        "max".into(),
        "msgs/s/proc".into(),
        "set-up B/proc".into(),
    ];
    for g in &p.gossip_periods {
        h.push(format!("DBRR T_gossip={} B/s/proc", crate::net::fmt_duration(*g)));
    }
    h.push("DBRR(0.1 s) / k-monitor".into());
    h.push("events".into());
    h.push("wall (s)".into());
    let mut t = Table::new(&h);
    for r in rows {
        let mut row = vec![
            r.n.to_string(),
            format!("{:.0}", r.mean),
            format!("{:.0}", r.max),
            format!("{:.1}", r.msgs),
            format!("{:.0}", r.setup),
        ];
        for g in &p.gossip_periods {
            row.push(format!("{:.0}", dbrr_bytes(r.n, *g)));
        }
        row.push(format!("{:.0}", dbrr_bytes(r.n, p.gossip_periods[0]) / r.mean.max(1e-9)));
        row.push(r.events.to_string());
        row.push(format!("{:.1}", r.wall));
        t.row(row);
    }
    t
}

/// The traffic chart.
pub fn traffic_chart(rows: &[TrafficRow], p: &TrafficParams) -> Chart {
    let mut c =
        Chart::new("Detector traffic per process (steady state)", "number of processes n", "bytes/s per process");
    c.x_log2 = true;
    c.y_log = true;
    c.add(Series::new(
        format!("k-monitor, k = {}, T_hb = {} (simulated)", p.cfg.k, crate::net::fmt_duration(p.cfg.t_hb)),
        PALETTE[0],
        rows.iter().map(|r| (r.n as f64, r.mean)).collect(),
    ));
    for (i, g) in p.gossip_periods.iter().enumerate() {
        c.add(
            Series::new(
                format!("DBRR gossip, T_gossip = {} (8n bytes/period)", crate::net::fmt_duration(*g)),
                PALETTE[1 + i],
                rows.iter().map(|r| (r.n as f64, dbrr_bytes(r.n, *g))).collect(),
            )
            .dashed(),
        );
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_matches_the_seed_and_monte_carlo() {
        // Seed §IV-B: for k ≥ 3 the highest probability is at n = 9, below 1e-10.
        let p3: Vec<f64> = (4..=40).map(|n| disconnect_bound(n, 3)).collect();
        let at = p3.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0 + 4;
        assert_eq!(at, 9);
        assert!(p3[9 - 4] < 1e-10 && p3[9 - 4] > 1e-12, "{}", p3[5]);
        // k = 1 at n = 8: the bound against 20 000 draws of the core's selection.
        let (mut s, mut e, mut d) = (1u64, Vec::new(), Dsu::new(8));
        let t = 20_000;
        let bad = (0..t)
            .filter(|_| {
                random_graph(8, 1, &mut s, &mut e);
                !connected(8, 1, &e, &mut d)
            })
            .count() as f64
            / t as f64;
        let b = disconnect_bound(8, 1);
        assert!(bad <= b * 1.05 && bad > b * 0.6, "MC {bad} vs bound {b}");
    }

    #[test]
    fn one_draw_gives_every_failure_count() {
        // With no failure the graph is that of figure 3; with n − 1 failures, one survivor.
        let d = failures_profile(30, 2, 5, 2000);
        assert_eq!(d[29], 0);
        assert!(d[0] < 100, "{}", d[0]);
        assert!(d[25] > d[5], "{d:?}");
    }

    #[test]
    fn figure_10_scenario_notifies_everyone_within_t_to_and_few_ms() {
        let p = LatencyParams::new(1, 1, 3);
        let r = latency_run(&p, 0);
        assert_eq!(r.missing, 0);
        assert_eq!(r.false_reports, 0);
        assert!(r.wide_links >= 3, "{} links", r.wide_links);
        let (first, last) = (r.delays[0], *r.delays.last().unwrap());
        assert!(first > 2.0 - 1e-9 && last < 2.1 + 0.01, "{first} – {last}");
        assert!(last - first < 0.01, "spread {}", last - first);
        assert!(r.failure_msgs as usize <= 2 * 3 * r.n + 4 * r.wide_links, "{}", r.failure_msgs);
    }

    #[test]
    fn protocol_graphs_are_the_sampled_ones() {
        // k = 1, n = 6: P(disconnected) ≈ 0.4; 200 protocol runs agree with the bound.
        let bad = (0..200).filter(|&r| !protocol_graph_connected(6, 1, r)).count() as f64 / 200.0;
        let mut s = 9u64;
        let (mut e, mut d) = (Vec::new(), Dsu::new(6));
        let mc = (0..20_000)
            .filter(|_| {
                random_graph(6, 1, &mut s, &mut e);
                !connected(6, 1, &e, &mut d)
            })
            .count() as f64
            / 20_000.0;
        assert!((bad - mc).abs() < 0.12, "protocol {bad} vs sampled {mc}");
    }
}
