//! The self-organizing k-monitor failure detector (Horita et al., SPEC §13): each process asks
//! `k` random others to monitor it, sends them heartbeats, and failures are flooded on the
//! established connections.
//!
//! # The protocol (Horita §IV, figure 1)
//!
//! * **Monitoring.** Every process `p` keeps `H`, the processes that monitor it (at most `k`),
//!   `A`, those it asked and that have not answered yet, and `M`, those it monitors. It asks a
//!   process with [`Message::MonitorReq`]; the asked one answers [`Message::MonitorAck`] and
//!   starts monitoring. Every `T_hb`, `p` sends [`Message::Heartbeat`] to every member of `H`.
//!   A monitor declares `p` failed when `T_to` passes without hearing from it, or when their
//!   connection is reset (a process crash: the operating system closes its sockets). An asked
//!   process that does not answer within `T_to`, or to which no connection can be opened, is
//!   failed too.
//! * **Choosing monitors.** When `p` learns a new process of its cluster it asks it with
//!   probability `k/j` (`j`: the live processes it knows, the new one included), and an ack
//!   that brings `H` above `k` makes it cancel ([`Message::MonitorCancel`]) one of the *older*
//!   monitors, chosen at random: reservoir sampling, so that `H` is a uniform random `k`-subset
//!   of the processes `p` knows however they were learned. (Figure 1 picks the cancelled one
//!   among all of `H`, the new one included, which favours early acquaintances.) Processes
//!   known from the start are sampled in one go ([`choose_monitors`]): `k` distinct uniform
//!   picks, no request wasted.
//! * **Discovery.** A monitor request carries the requester's endpoint and a digest of the
//!   processes it knows; the asked process sends back the list of the processes it knows
//!   ([`Message::NodeInfo`]) when the digests differ, and floods the requester's endpoint if it
//!   is new. Learned processes are flooded in turn.
//! * **Failure notices** ([`Message::Failure`]) are flooded on every established connection
//!   (monitors, monitored, wide-area) except the one they came from, once per failed process:
//!   at most one message per direction of each connection, so `≤ 2kn` messages for `n`
//!   processes and `k` monitors each (plus the wide-area connections). A process that loses a
//!   monitor (or an asked process) asks a replacement, so the set is repaired.
//! * **A cut that heals.** A process cut off from the network (its link down, no reset) is
//!   declared failed by its monitors, and in its own view declares failed the processes it
//!   monitors and those it asks to replace them. Its notices are lost in the cut; once the
//!   link is back nobody listens to it (a failed process is not heard), so it might never
//!   learn that it is out. So a *quiet* process — one that has heard nothing from a process
//!   it believes alive for `T_to` — *probes*, every `T_to`, one of the members of its
//!   cluster it declared failed with a monitor request. A process that is not quiet and
//!   receives a monitor request from a process it declared failed answers
//!   [`Message::Fenced`], and the prober heeds it from the one it probed: it is excluded
//!   ([`Cause::Excluded`]), as a frozen process that resumes is. Quiet processes
//!   never answer probes, so a process cut off cannot exclude one that stayed (one that
//!   monitors nobody is quiet too: it probes, harmlessly). Nothing a process concluded while
//!   cut off ever reaches the others.
//!
//! # The wide-area extension (Horita §V, figure 4)
//!
//! An [`Endpoint`] carries its address and its subnet prefix length; a *cluster* is a subnet
//! ([`ClusterKey`]). The basic protocol runs inside each cluster. Besides, the members of a
//! cluster cooperatively keep at least `k` connections to every other cluster: a process that
//! sees fewer than `k` known connections to cluster `c` (its own and those announced by
//! [`Message::WconnInfo`], flooded inside the cluster) opens one to a random member of `c`
//! after a random back-off (so that not every member of the cluster does at once). A
//! wide-area connection is monitored by both ends (`T'_hb`, `T'_to`). When a connection cannot
//! be opened (NAT, firewall) the process tries another member and gives up on `c` after a few
//! refusals: the members of `c` see too few connections as well and connect from their side,
//! so one direction is enough.
//!
//! # Confirmation (optional, [`Config::confirm`])
//!
//! SWIM-style detectors (memberlist, Consul) suffer from false positives when one overloaded
//! monitor stops processing heartbeats in time and accuses healthy peers. With `confirm`, a
//! monitored process tells its monitors who its other monitors are
//! ([`Message::MonitorSet`]); a monitor whose `T_to` expires asks one of them
//! ([`Message::ConfirmReq`]). The failure is flooded only if that monitor has not heard from
//! the suspect for [`Config::confirm_silence`] either ([`Verdict::Silent`]); an
//! [`Verdict::Alive`] answer restarts the timeout. A co-monitor that does not monitor the
//! suspect ([`Verdict::Unknown`]) or does not answer within `T_to` is skipped; when nobody
//! is left to ask, the failure is declared (missing a crash is worse). Resets are never
//! confirmed: they are the operating system's word.
//!
//! # Driving it
//!
//! [`Node`] is a [`Machine`]: it does no I/O, reads no clock and draws no entropy. The driver
//! feeds it [`Input`]s with the time (a [`Time`] since any fixed origin), starting with
//! [`Input::Start`], and polls its outputs, the [`Action`]s:
//!
//! * [`Action::Connect`]: open a TCP connection to that endpoint; report
//!   [`Input::Connected`] or [`Input::ConnectFailed`] (after the driver's own retries:
//!   inside a cluster, a refused connection means a failed process).
//! * [`Action::Send`]: write the message ([`encode`]) on the connection to that peer, in the
//!   order given. The node only sends on connections it opened and that are up, or on which
//!   the peer spoke first. Incoming bytes are [`decode`]d and fed as [`Input::Message`]
//!   (a connection accepted from a peer is known by its first message, a monitor request).
//! * [`Action::Disconnect`]: close the connection once the messages before it are written
//!   (nothing uses it any more). A connection that breaks (reset, EOF) is reported with
//!   [`Input::ConnectionReset`]; one the node does not use any more is ignored.
//! * [`Action::Failed`]: tell the application; final.
//! * Call [`Machine::handle_timeout`] at [`Machine::poll_timeout`] (and whenever convenient:
//!   it is cheap).
//!
//! The runtime driver (`p2pmpi::failure::kmonitor`) mirrors the gossip detector's thread:
//! one thread per process with a listening socket and a poll over the connections, a
//! length-prefixed framing of [`encode`]d messages, and a loop `handle_timeout(now)` → drain
//! outputs → poll with the time-out `poll_timeout() − now` → feed inputs. The launcher hands
//! every process the same [`Directory`] (the ranks' endpoints with their subnet masks);
//! failures become `p2pmpi::failure::Notice`s as the gossip detector's do.

use crate::machine::{Machine, Time};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
// Address values only (an endpoint's address, its subnet arithmetic, their encoding): the core
// opens no socket and resolves no name; the driver does all I/O and hands addresses in.
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

/// A process's identity (its rank, or any number unique in the system).
pub type NodeId = u32;

/// How to reach a process: its identity, address, subnet prefix length and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Endpoint {
    pub id: NodeId,
    pub ip: IpAddr,
    /// The subnet's prefix length (24 for a /24, i.e. mask 255.255.255.0).
    pub prefix: u8,
    pub port: u16,
}

impl Endpoint {
    /// An IPv4 endpoint.
    pub fn v4(id: NodeId, ip: [u8; 4], prefix: u8, port: u16) -> Endpoint {
        Endpoint { id, ip: IpAddr::V4(Ipv4Addr::from(ip)), prefix, port }
    }

    /// The cluster (subnet) of this endpoint.
    pub fn cluster(&self) -> ClusterKey {
        match self.ip {
            IpAddr::V4(a) => {
                let p = self.prefix.min(32);
                let mask = if p == 0 { 0 } else { u32::MAX << (32 - p) };
                ClusterKey { net: IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask)), prefix: p }
            }
            IpAddr::V6(a) => {
                let p = self.prefix.min(128);
                let mask = if p == 0 { 0 } else { u128::MAX << (128 - p) };
                ClusterKey { net: IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask)), prefix: p }
            }
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {}/{}:{}", self.id, self.ip, self.prefix, self.port)
    }
}

/// A cluster: the network address (masked) and the prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ClusterKey {
    pub net: IpAddr,
    pub prefix: u8,
}

impl ClusterKey {
    /// The one cluster of a detector run without the wide-area extension.
    pub const ALL: ClusterKey = ClusterKey { net: IpAddr::V4(Ipv4Addr::UNSPECIFIED), prefix: 0 };
}

impl fmt::Display for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

/// The detector's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Monitors per process (and connections kept between two clusters).
    pub k: usize,
    /// `T_hb`: the heartbeat period inside a cluster.
    pub t_hb: Duration,
    /// `T_to`: silence after which a monitored process is failed (`> T_hb`).
    pub t_to: Duration,
    /// `T'_hb`: the heartbeat period on wide-area connections.
    pub wide_t_hb: Duration,
    /// `T'_to`: silence after which the other end of a wide-area connection is failed.
    pub wide_t_to: Duration,
    /// Group processes into clusters by subnet (the wide-area extension); off: one cluster.
    pub wide_area: bool,
    /// A process that sees too few connections to a cluster connects after `U(0, this)`.
    pub wide_backoff: Duration,
    /// Refused connections to members of a cluster after which a process stops trying to
    /// connect to that cluster itself (the other side connects).
    pub wide_refusals: u32,
    /// Ask a second monitor before flooding a failure detected by a timeout.
    pub confirm: bool,
    /// With `confirm`: a co-monitor vouches for the suspect if it heard from it this recently.
    pub confirm_silence: Duration,
}

impl Config {
    /// The seed's figure-10 setting: `k` monitors, `T_hb` and `T_to` (the same on wide-area
    /// connections), wide-area extension on, back-off 1 s, no confirmation.
    pub fn new(k: usize, t_hb: Duration, t_to: Duration) -> Config {
        Config {
            k,
            t_hb,
            t_to,
            wide_t_hb: t_hb,
            wide_t_to: t_to,
            wide_area: true,
            wide_backoff: Duration::from_secs(1),
            wide_refusals: 3,
            confirm: false,
            confirm_silence: t_to / 2,
        }
    }
}

impl Default for Config {
    /// k = 4, T_hb = 0.1 s, T_to = 2.1 s (the seed's experiments).
    fn default() -> Self {
        Config::new(4, Duration::from_millis(100), Duration::from_millis(2100))
    }
}

/// A digest of the processes a node knows (failed ones included): their number and the xor
/// of a hash of their identities. Equal digests mean (with high probability) equal views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ViewDigest {
    pub count: u32,
    pub hash: u64,
}

impl ViewDigest {
    fn add(&mut self, id: NodeId) {
        self.count = self.count.wrapping_add(1);
        let mut s = id as u64;
        self.hash ^= splitmix64(&mut s);
    }
}

/// A co-monitor's answer to a confirmation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// It heard from the suspect within `confirm_silence`.
    Alive,
    /// It monitors the suspect and has not heard from it for `confirm_silence`, or knows it
    /// failed.
    Silent,
    /// It does not monitor the suspect.
    Unknown,
}

/// What the detectors send each other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    /// "Monitor me": the sender's endpoint (with its mask: the receiver learns its cluster) and
    /// a digest of the processes it knows.
    MonitorReq { from: Endpoint, view: ViewDigest },
    /// "I monitor you from now on."
    MonitorAck,
    /// "Stop monitoring me."
    MonitorCancel,
    /// Processes the receiver may not know.
    NodeInfo { nodes: Vec<Endpoint> },
    /// "I am alive."
    Heartbeat,
    /// `node` failed.
    Failure { node: NodeId },
    /// A wide-area connection between `local` (of the sender's cluster) and `remote`.
    WconnInfo { local: NodeId, remote: Endpoint },
    /// (Confirmation) the sender's monitors.
    MonitorSet { monitors: Vec<NodeId> },
    /// (Confirmation) "have you heard from `suspect` lately?"
    ConfirmReq { suspect: NodeId },
    /// (Confirmation) the answer.
    ConfirmAns { suspect: NodeId, verdict: Verdict },
    /// "I am leaving (my program ended): what follows is not a failure."
    Leave,
    /// "You were declared failed": the answer to a monitor request from a process the
    /// sender declared failed (a probe after a cut, see the module's documentation). Never
    /// sent by a quiet process, and apart from [`Message::Failure`] so that a failure notice
    /// a process wrote while cut off, delivered when the cut heals, is never taken for it.
    Fenced,
}

impl Message {
    /// A short name for statistics.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::MonitorReq { .. } => "monitor_req",
            Message::MonitorAck => "monitor_ack",
            Message::MonitorCancel => "monitor_cancel",
            Message::NodeInfo { .. } => "node_info",
            Message::Heartbeat => "heartbeat",
            Message::Failure { .. } => "failure",
            Message::WconnInfo { .. } => "wconn_info",
            Message::MonitorSet { .. } => "monitor_set",
            Message::ConfirmReq { .. } => "confirm_req",
            Message::ConfirmAns { .. } => "confirm_ans",
            Message::Leave => "leave",
            Message::Fenced => "fenced",
        }
    }
}

/// How a failure was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cause {
    /// No heartbeat for `T_to` (or `T'_to`) from a monitored process or wide-area peer.
    Silent,
    /// The connection to a monitored, monitoring or asked process was reset.
    Reset,
    /// No connection could be opened to a process of this cluster.
    Unreachable,
    /// An asked process did not acknowledge within `T_to`.
    NoAck,
    /// A failure notice from this peer.
    Notice { from: NodeId },
    /// This process was declared failed by others (it then stops).
    Excluded,
    /// The application declared it dead ([`Input::Declared`]: e.g. the job's supervisor).
    Declared,
}

/// What the driver feeds a [`Node`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Start the detector: pick `k` monitors among the processes of its cluster known from
    /// the start, and schedule the connections to the other clusters. Nothing happens before.
    Start,
    /// A message from `from` arrived.
    Message { from: NodeId, msg: Message },
    /// The connection this node asked for ([`Action::Connect`]) to this peer is open.
    Connected(NodeId),
    /// No connection could be opened to this peer: inside the cluster it has failed; in
    /// another cluster it may be behind a NAT or firewall, and another member is tried.
    ConnectFailed(NodeId),
    /// The connection to this peer broke (reset, or closed by the peer).
    ConnectionReset(NodeId),
    /// This process did not run for this long (its thread starved of CPU, the whole machine
    /// stalled, the process stopped): silence measured while it was not running says nothing
    /// of the others, which may not have been scheduled again yet either. Every silence it
    /// measures (the processes it monitors, wide-area peers, requests and confirmations in
    /// flight) is shortened by the stall, so it accuses nobody for less than `T_to` of its own
    /// running time. Feed it after what waited for the process, before
    /// [`handle_timeout`](Machine::handle_timeout). A real failure is then reported up to the
    /// stall later; stalls shorter than a heartbeat period are not worth it.
    Stall(Duration),
    /// This process leaves (its program ended): every connection gets [`Message::Leave`] and
    /// is closed, and the node stops (no heartbeat, no time-out, no failure any more). The
    /// others forget it without declaring it failed.
    Leave,
    /// The application declares this process dead (for instance the job's supervisor did): it
    /// is failed from now on, the notice is flooded and the monitor set repaired, as for a
    /// failure this process detected ([`Cause::Declared`]).
    Declared(NodeId),
}

/// What the driver must do (a [`Node`]'s output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Open a connection to this endpoint, then report [`Input::Connected`] /
    /// [`Input::ConnectFailed`].
    Connect { to: Endpoint },
    /// Write this message on the connection to `to`.
    Send { to: NodeId, msg: Message },
    /// Close the connection to `to` (after what was sent before).
    Disconnect { to: NodeId },
    /// `node` failed: tell the application.
    Failed { node: NodeId, cause: Cause },
}

// ------------------------------------------------------------------------ randomness

/// One step of SplitMix64: the node's only source of randomness, seeded by the driver.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn below(state: &mut u64, n: usize) -> usize {
    ((splitmix64(state) as u128 * n as u128) >> 64) as usize
}

/// `min(k, n)` distinct indices drawn uniformly from `0..n` (Floyd's algorithm), in the order
/// drawn: how a node picks its monitors among the `n` candidates it knows from the start (and
/// what the simulator's monitoring-graph experiments call, so that they sample the very graph
/// the detector builds).
pub fn choose_monitors(state: &mut u64, n: usize, k: usize) -> Vec<usize> {
    let k = k.min(n);
    let mut out: Vec<usize> = Vec::with_capacity(k);
    for j in n - k..n {
        let t = below(state, j + 1);
        if out.contains(&t) {
            out.push(j);
        } else {
            out.push(t);
        }
    }
    out
}

// ------------------------------------------------------------------------ directory

/// The processes known from the start, shared by every node of a process (or of a
/// simulation): endpoints, and the members of each cluster.
#[derive(Debug, Clone)]
pub struct Directory {
    endpoints: Vec<Endpoint>,
    by_id: HashMap<NodeId, usize>,
    clusters: BTreeMap<ClusterKey, Vec<NodeId>>,
    digest: ViewDigest,
    wide_area: bool,
}

impl Directory {
    /// The directory of these endpoints (duplicated identities are kept once); with
    /// `wide_area` false every endpoint is in [`ClusterKey::ALL`].
    pub fn new(endpoints: impl IntoIterator<Item = Endpoint>, wide_area: bool) -> Directory {
        let mut d = Directory {
            endpoints: Vec::new(),
            by_id: HashMap::new(),
            clusters: BTreeMap::new(),
            digest: ViewDigest::default(),
            wide_area,
        };
        for e in endpoints {
            if d.by_id.contains_key(&e.id) {
                continue;
            }
            d.by_id.insert(e.id, d.endpoints.len());
            d.endpoints.push(e);
            d.clusters.entry(d.key(&e)).or_default().push(e.id);
            d.digest.add(e.id);
        }
        d
    }

    fn key(&self, e: &Endpoint) -> ClusterKey {
        if self.wide_area {
            e.cluster()
        } else {
            ClusterKey::ALL
        }
    }

    /// The endpoint of `id`.
    pub fn get(&self, id: NodeId) -> Option<&Endpoint> {
        self.by_id.get(&id).map(|&i| &self.endpoints[i])
    }

    /// Every endpoint, in the order given.
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The clusters and their members.
    pub fn clusters(&self) -> impl Iterator<Item = (&ClusterKey, &[NodeId])> {
        self.clusters.iter().map(|(k, v)| (k, v.as_slice()))
    }

    /// Number of processes.
    pub fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// No process.
    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }
}

// ------------------------------------------------------------------------ the node

#[derive(Debug, Clone)]
enum Conn {
    /// Connecting; messages wait.
    Opening(Vec<Message>),
    Up,
}

#[derive(Debug, Clone)]
struct Confirm {
    asked: NodeId,
    tried: Vec<NodeId>,
    deadline: Duration,
}

/// Counters of one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Failure notices sent (flooding).
    pub failure_msgs: u64,
    /// Monitor requests sent.
    pub requests: u64,
    /// Monitor cancels sent.
    pub cancels: u64,
    /// Heartbeats sent.
    pub heartbeats: u64,
    /// Timeouts that a co-monitor refuted (confirmation).
    pub refuted: u64,
    /// Monitor requests an isolated process sent to processes it declared failed.
    pub probes: u64,
    /// Stalls of this process ([`Input::Stall`]).
    pub stalls: u64,
}

/// The k-monitor detector of one process.
#[derive(Debug, Clone)]
pub struct Node {
    me: Endpoint,
    cluster: ClusterKey,
    cfg: Config,
    dir: Arc<Directory>,
    /// Processes learned after the start, by cluster, and their endpoints.
    learned: BTreeMap<NodeId, Endpoint>,
    learned_by_cluster: BTreeMap<ClusterKey, Vec<NodeId>>,
    view: ViewDigest,
    failed: BTreeSet<NodeId>,
    failed_per_cluster: BTreeMap<ClusterKey, usize>,
    /// `H`: monitors of this process.
    monitors: BTreeSet<NodeId>,
    /// `A`: asked, not acknowledged yet (since when).
    asked: BTreeMap<NodeId, Duration>,
    /// `M`: monitored processes and when they were last heard from.
    monitored: BTreeMap<NodeId, Duration>,
    /// `H_w`: wide-area peers and when they were last heard from.
    wide: BTreeMap<NodeId, Duration>,
    /// Wide-area requests not acknowledged yet (since when).
    wide_asked: BTreeMap<NodeId, Duration>,
    /// `W(c)`: known connections (member of this cluster, member of `c`).
    wconns: BTreeMap<ClusterKey, BTreeSet<(NodeId, NodeId)>>,
    /// Members of other clusters that refused a connection from this process.
    refused: BTreeSet<NodeId>,
    refusals: BTreeMap<ClusterKey, u32>,
    /// Scheduled attempts to connect to a cluster.
    wide_attempt: BTreeMap<ClusterKey, Duration>,
    conns: BTreeMap<NodeId, Conn>,
    /// (Confirmation) the other monitors of each monitored process.
    co_monitors: BTreeMap<NodeId, Vec<NodeId>>,
    confirms: BTreeMap<NodeId, Confirm>,
    /// Peers this process answers a confirmation to (kept connected until answered).
    next_hb: Duration,
    next_wide_hb: Duration,
    started: bool,
    /// When a quiet process probes next (see the module's documentation: a cut that heals).
    next_probe: Duration,
    /// The last message from a process not failed.
    last_heard: Duration,
    /// The process probed last, while its answer may come.
    probing: Option<NodeId>,
    excluded: bool,
    /// This process left ([`Input::Leave`]).
    left: bool,
    /// Processes that left (also in `failed`, which silences them, but never reported).
    departed: BTreeSet<NodeId>,
    rng: u64,
    out: VecDeque<Action>,
    stats: Stats,
}

impl Node {
    /// The detector of process `me`, knowing the processes of `dir` from the start (`me` may
    /// or may not be among them). `seed` drives every random choice. Nothing happens before
    /// [`Input::Start`].
    pub fn new(me: Endpoint, dir: Arc<Directory>, cfg: Config, seed: u64) -> Node {
        let cluster = dir.key(&me);
        let mut view = dir.digest;
        let mut learned = BTreeMap::new();
        let mut learned_by_cluster: BTreeMap<ClusterKey, Vec<NodeId>> = BTreeMap::new();
        if dir.get(me.id).is_none() {
            view.add(me.id);
            learned.insert(me.id, me);
            learned_by_cluster.entry(cluster).or_default().push(me.id);
        }
        let cfg = Config { wide_area: dir.wide_area, ..cfg };
        Node {
            me,
            cluster,
            cfg,
            dir,
            learned,
            learned_by_cluster,
            view,
            failed: BTreeSet::new(),
            failed_per_cluster: BTreeMap::new(),
            monitors: BTreeSet::new(),
            asked: BTreeMap::new(),
            monitored: BTreeMap::new(),
            wide: BTreeMap::new(),
            wide_asked: BTreeMap::new(),
            wconns: BTreeMap::new(),
            refused: BTreeSet::new(),
            refusals: BTreeMap::new(),
            wide_attempt: BTreeMap::new(),
            conns: BTreeMap::new(),
            co_monitors: BTreeMap::new(),
            confirms: BTreeMap::new(),
            next_hb: Duration::ZERO,
            next_wide_hb: Duration::ZERO,
            started: false,
            next_probe: Duration::ZERO,
            last_heard: Duration::ZERO,
            probing: None,
            excluded: false,
            left: false,
            departed: BTreeSet::new(),
            rng: seed ^ 0xA076_1D64_78BD_642F ^ ((me.id as u64) << 29),
            out: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    // ---------------------------------------------------------------- queries

    /// This process.
    pub fn me(&self) -> &Endpoint {
        &self.me
    }

    /// Its cluster.
    pub fn cluster(&self) -> ClusterKey {
        self.cluster
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// `H`: the processes monitoring this one.
    pub fn monitors(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.monitors.iter().copied()
    }

    /// `A`: the processes asked to monitor this one, not acknowledged yet.
    pub fn asked(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.asked.keys().copied()
    }

    /// `M`: the processes this one monitors.
    pub fn monitored(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.monitored.keys().copied()
    }

    /// `H_w`: the wide-area peers.
    pub fn wide_peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.wide.keys().copied()
    }

    /// `F`: the processes known failed (not those that left).
    pub fn failed(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.failed.iter().copied().filter(|id| !self.departed.contains(id))
    }

    /// Whether `id` is known failed.
    pub fn is_failed(&self, id: NodeId) -> bool {
        self.failed.contains(&id) && !self.departed.contains(&id)
    }

    /// Whether `id` left ([`Message::Leave`]).
    pub fn has_left(&self, id: NodeId) -> bool {
        self.departed.contains(&id)
    }

    /// `W(c)`: the known connections between this cluster and `c`.
    pub fn wide_connections(&self, c: &ClusterKey) -> impl Iterator<Item = (NodeId, NodeId)> + '_ {
        self.wconns.get(c).into_iter().flatten().copied()
    }

    /// The clusters this process knows.
    pub fn clusters(&self) -> Vec<ClusterKey> {
        let mut v: BTreeSet<ClusterKey> = self.dir.clusters.keys().copied().collect();
        v.extend(self.learned_by_cluster.keys().copied());
        v.into_iter().collect()
    }

    /// Processes known (failed ones included).
    pub fn known(&self) -> usize {
        self.view.count as usize
    }

    /// Whether this process was declared failed by the others.
    pub fn is_excluded(&self) -> bool {
        self.excluded
    }

    /// Whether a connection to `peer` is open (or opening).
    pub fn is_connected(&self, peer: NodeId) -> bool {
        self.conns.contains_key(&peer)
    }

    /// The peers with an open (or opening) connection.
    pub fn connections(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.conns.keys().copied()
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// When [`tick`](Self::tick) must be called next (`None`: nothing scheduled).
    fn next_deadline(&self) -> Option<Duration> {
        if !self.started || self.excluded || self.left {
            return None;
        }
        let mut t: Option<Duration> = None;
        let mut at = |d: Duration| t = Some(t.map_or(d, |t: Duration| t.min(d)));
        if !self.monitors.is_empty() {
            at(self.next_hb);
        }
        if !self.wide.is_empty() {
            at(self.next_wide_hb);
        }
        for (id, &last) in &self.monitored {
            if !self.confirms.contains_key(id) {
                at(last + self.cfg.t_to);
            }
        }
        for &since in self.asked.values() {
            at(since + self.cfg.t_to);
        }
        for &last in self.wide.values() {
            at(last + self.cfg.wide_t_to);
        }
        for &since in self.wide_asked.values() {
            at(since + self.cfg.wide_t_to);
        }
        for &a in self.wide_attempt.values() {
            at(a);
        }
        for c in self.confirms.values() {
            at(c.deadline);
        }
        if self.may_probe() {
            at(self.next_probe.max(self.last_heard + self.cfg.t_to));
        }
        t
    }

    /// Heard nothing from a process it believes alive for `T_to`.
    fn quiet(&self, now: Duration) -> bool {
        now >= self.last_heard + self.cfg.t_to
    }

    /// Members of its cluster are failed in its view (not those that left).
    fn may_probe(&self) -> bool {
        self.failed_per_cluster.get(&self.cluster).is_some_and(|&f| f > 0) && {
            let (a, b) = self.members(&self.cluster);
            a.iter().chain(b).any(|&id| id != self.me.id && self.is_failed(id))
        }
    }

    /// A quiet process asks one of the processes it declared failed to monitor it: if it was
    /// cut off and the cut healed, the answer is its own failure notice.
    fn probe(&mut self, now: Duration) {
        self.next_probe = now + self.cfg.t_to;
        if let Some(prev) = self.probing.take() {
            // Unanswered: given up.
            if self.conns.remove(&prev).is_some() {
                self.out.push_back(Action::Disconnect { to: prev });
            }
        }
        let me = self.me.id;
        let c = self.cluster;
        let Some(q) = self.pick(&c, |n, id| id != me && n.is_failed(id) && !n.conns.contains_key(&id)) else {
            return;
        };
        self.stats.probes += 1;
        self.probing = Some(q);
        let msg = Message::MonitorReq { from: self.me, view: self.view };
        self.send(q, msg);
    }

    // ---------------------------------------------------------------- helpers

    fn endpoint(&self, id: NodeId) -> Option<Endpoint> {
        self.dir.get(id).copied().or_else(|| self.learned.get(&id).copied())
    }

    fn key(&self, e: &Endpoint) -> ClusterKey {
        self.dir.key(e)
    }

    fn cluster_of(&self, id: NodeId) -> Option<ClusterKey> {
        self.endpoint(id).map(|e| self.key(&e))
    }

    fn members(&self, c: &ClusterKey) -> (&[NodeId], &[NodeId]) {
        (
            self.dir.clusters.get(c).map_or(&[][..], |v| v.as_slice()),
            self.learned_by_cluster.get(c).map_or(&[][..], |v| v.as_slice()),
        )
    }

    /// Live known members of `c` other than this process.
    fn live_others(&self, c: &ClusterKey) -> usize {
        let (a, b) = self.members(c);
        let mine = (*c == self.cluster && !self.failed.contains(&self.me.id)) as usize;
        (a.len() + b.len()).saturating_sub(self.failed_per_cluster.get(c).copied().unwrap_or(0) + mine)
    }

    /// A random member of `c` for which `ok` holds (rejection sampling, then a scan).
    fn pick(&mut self, c: &ClusterKey, ok: impl Fn(&Node, NodeId) -> bool) -> Option<NodeId> {
        let (a, b) = self.members(c);
        let total = a.len() + b.len();
        if total == 0 {
            return None;
        }
        let at = |i: usize| if i < a.len() { a[i] } else { b[i - a.len()] };
        let mut s = self.rng;
        let mut found = None;
        for _ in 0..32 {
            let id = at(below(&mut s, total));
            if ok(self, id) {
                found = Some(id);
                break;
            }
        }
        if found.is_none() {
            let start = below(&mut s, total);
            found = (0..total).map(|i| at((start + i) % total)).find(|&id| ok(self, id));
        }
        self.rng = s;
        found
    }

    fn has_relation(&self, id: NodeId) -> bool {
        self.monitors.contains(&id)
            || self.asked.contains_key(&id)
            || self.monitored.contains_key(&id)
            || self.wide.contains_key(&id)
            || self.wide_asked.contains_key(&id)
            || self.confirms.values().any(|c| c.asked == id)
    }

    /// Sends `msg` to `to`, opening a connection first if none is open.
    fn send(&mut self, to: NodeId, msg: Message) {
        if matches!(msg, Message::Failure { .. }) {
            self.stats.failure_msgs += 1;
        }
        match self.conns.get_mut(&to) {
            Some(Conn::Up) => self.out.push_back(Action::Send { to, msg }),
            Some(Conn::Opening(q)) => q.push(msg),
            None => {
                let Some(ep) = self.endpoint(to) else { return };
                self.conns.insert(to, Conn::Opening(vec![msg]));
                self.out.push_back(Action::Connect { to: ep });
            }
        }
    }

    /// Closes the connection to `id` when nothing uses it any more.
    fn maybe_disconnect(&mut self, id: NodeId) {
        if !self.has_relation(id) && self.conns.remove(&id).is_some() {
            self.out.push_back(Action::Disconnect { to: id });
        }
    }

    /// Every established connection's peer (monitors, monitored, wide), except `but`.
    fn flood_targets(&self, but: Option<NodeId>, intra_only: bool) -> Vec<NodeId> {
        let mut t: BTreeSet<NodeId> = self.monitors.iter().copied().collect();
        t.extend(self.monitored.keys().copied());
        if !intra_only {
            t.extend(self.wide.keys().copied());
        }
        t.into_iter().filter(|&q| Some(q) != but && !self.failed.contains(&q)).collect()
    }

    fn flood(&mut self, msg: &Message, but: Option<NodeId>, intra_only: bool) {
        for q in self.flood_targets(but, intra_only) {
            self.send(q, msg.clone());
        }
    }

    fn request(&mut self, q: NodeId, now: Duration) {
        self.asked.insert(q, now);
        self.stats.requests += 1;
        let msg = Message::MonitorReq { from: self.me, view: self.view };
        self.send(q, msg);
    }

    /// Asks enough new monitors to have `min(k, live others)` in `H ∪ A`.
    fn fill_monitors(&mut self, now: Duration) {
        let c = self.cluster;
        let want = self.cfg.k.min(self.live_others(&c));
        while self.monitors.len() + self.asked.len() < want {
            let me = self.me.id;
            let Some(q) = self.pick(&c, |n, id| {
                id != me && !n.failed.contains(&id) && !n.monitors.contains(&id) && !n.asked.contains_key(&id)
            }) else {
                break;
            };
            self.request(q, now);
        }
    }

    fn send_monitor_set(&mut self) {
        if !self.cfg.confirm {
            return;
        }
        let set: Vec<NodeId> = self.monitors.iter().copied().collect();
        for &m in &set {
            self.send(m, Message::MonitorSet { monitors: set.clone() });
        }
    }

    // ---------------------------------------------------------------- learning processes

    /// Records processes learned from a peer; returns the new ones.
    fn learn(&mut self, nodes: &[Endpoint], now: Duration) -> Vec<Endpoint> {
        let mut new = Vec::new();
        for e in nodes {
            if e.id == self.me.id || self.endpoint(e.id).is_some() {
                continue;
            }
            self.learned.insert(e.id, *e);
            let c = self.key(e);
            self.learned_by_cluster.entry(c).or_default().push(e.id);
            self.view.add(e.id);
            new.push(*e);
        }
        for e in &new {
            let c = self.key(e);
            if c == self.cluster {
                self.add_node(e.id, now);
            } else {
                self.schedule_wide(c, now);
            }
        }
        new
    }

    /// Figure 1's `add_node`, as reservoir sampling: ask the new process with probability
    /// `k/j`; the ack will make this process cancel an older monitor.
    fn add_node(&mut self, q: NodeId, now: Duration) {
        if !self.started || self.excluded {
            return;
        }
        let j = self.live_others(&self.cluster).max(1);
        let have = self.monitors.len() + self.asked.len();
        if have < self.cfg.k || below(&mut self.rng, j) < self.cfg.k {
            self.request(q, now);
        }
    }

    // ---------------------------------------------------------------- wide area

    fn wide_count(&self, c: &ClusterKey) -> usize {
        self.wconns.get(c).map_or(0, |s| s.len())
            + self.wide_asked.keys().filter(|&&q| self.cluster_of(q).as_ref() == Some(c)).count()
    }

    fn wide_candidate(&self, c: &ClusterKey, id: NodeId) -> bool {
        !self.failed.contains(&id)
            && !self.wide.contains_key(&id)
            && !self.wide_asked.contains_key(&id)
            && !self.refused.contains(&id)
            && self.cluster_of(id).as_ref() == Some(c)
    }

    fn wants_wide(&self, c: &ClusterKey) -> bool {
        self.cfg.wide_area
            && *c != self.cluster
            && self.wide_count(c) < self.cfg.k
            && self.refusals.get(c).copied().unwrap_or(0) < self.cfg.wide_refusals
            && self.live_others(c) > 0
    }

    fn schedule_wide(&mut self, c: ClusterKey, now: Duration) {
        if self.started && !self.excluded && self.wants_wide(&c) && !self.wide_attempt.contains_key(&c) {
            let b = self.cfg.wide_backoff.as_nanos() as u64;
            let d = if b == 0 { 0 } else { splitmix64(&mut self.rng) % b };
            self.wide_attempt.insert(c, now + Duration::from_nanos(d));
        }
    }

    fn schedule_all_wide(&mut self, now: Duration) {
        for c in self.clusters() {
            self.schedule_wide(c, now);
        }
    }

    /// Figure 4's `ensure_connectivity(c)`.
    fn ensure_connectivity(&mut self, c: ClusterKey, now: Duration) {
        if !self.wants_wide(&c) {
            return;
        }
        if let Some(q) = self.pick(&c, |n, id| n.wide_candidate(&c, id)) {
            self.wide_asked.insert(q, now);
            self.stats.requests += 1;
            let msg = Message::MonitorReq { from: self.me, view: self.view };
            self.send(q, msg);
        }
    }

    /// Figure 4's `add_wconn`: records the connection and floods it inside the cluster.
    fn add_wconn(&mut self, local: NodeId, remote: NodeId, from: Option<NodeId>) {
        let Some(rep) = self.endpoint(remote) else { return };
        let c = self.key(&rep);
        if self.wconns.entry(c).or_default().insert((local, remote)) {
            self.flood(&Message::WconnInfo { local, remote: rep }, from, true);
        }
    }

    /// A new wide-area link: the failures this cluster knows go over it. The notices flooded
    /// while the two clusters had no link (the members that held them failed, and the new
    /// ones wait out their back-off) would be lost otherwise; each side ignores what it knows.
    fn send_failed_set(&mut self, to: NodeId) {
        let known: Vec<NodeId> =
            self.failed.iter().copied().filter(|f| !self.departed.contains(f) && *f != to).collect();
        for node in known {
            self.send(to, Message::Failure { node });
        }
    }

    fn refused_by(&mut self, q: NodeId, now: Duration) {
        self.wide_asked.remove(&q);
        self.refused.insert(q);
        if let Some(c) = self.cluster_of(q) {
            *self.refusals.entry(c).or_default() += 1;
            self.schedule_wide(c, now);
        }
        self.maybe_disconnect(q);
    }

    // ---------------------------------------------------------------- failures

    /// Figure 1's / figure 4's `detect_failure`: records, reports, floods, repairs.
    fn detect_failure(&mut self, f: NodeId, cause: Cause, now: Duration) {
        if self.failed.contains(&f) || self.excluded || self.left {
            return;
        }
        if f == self.me.id {
            // Declared failed by the others: a false positive (or a late process). Stop
            // taking part; the application decides what to do.
            self.excluded = true;
            self.out.push_back(Action::Failed { node: f, cause: Cause::Excluded });
            return;
        }
        self.failed.insert(f);
        if let Some(c) = self.cluster_of(f) {
            *self.failed_per_cluster.entry(c).or_default() += 1;
        }
        self.out.push_back(Action::Failed { node: f, cause });
        let from = if let Cause::Notice { from } = cause { Some(from) } else { None };
        self.flood(&Message::Failure { node: f }, from, false);
        let was_monitor = self.monitors.remove(&f) | self.asked.remove(&f).is_some();
        self.monitored.remove(&f);
        self.wide.remove(&f);
        self.wide_asked.remove(&f);
        self.co_monitors.remove(&f);
        self.confirms.remove(&f);
        // A confirmation that waited for `f`'s answer asks someone else.
        let waiting: Vec<NodeId> = self.confirms.iter().filter(|(_, c)| c.asked == f).map(|(&s, _)| s).collect();
        for s in waiting {
            self.confirm_next(s, now);
        }
        for set in self.co_monitors.values_mut() {
            set.retain(|&m| m != f);
        }
        let mut touched = Vec::new();
        for (c, set) in self.wconns.iter_mut() {
            let before = set.len();
            set.retain(|&(a, b)| a != f && b != f);
            if set.len() != before {
                touched.push(*c);
            }
        }
        // The failed process itself is told, last thing on the connection: one that was only
        // late (frozen, starved) reads it when it runs again, knows it is out, and accuses
        // nobody for the silence and the closed connections it then finds.
        match self.conns.remove(&f) {
            Some(Conn::Up) => {
                self.out.push_back(Action::Send { to: f, msg: Message::Failure { node: f } });
                self.out.push_back(Action::Disconnect { to: f });
            }
            Some(Conn::Opening(_)) => self.out.push_back(Action::Disconnect { to: f }),
            None => {}
        }
        if was_monitor {
            self.send_monitor_set();
        }
        self.fill_monitors(now);
        for c in touched {
            self.schedule_wide(c, now);
        }
    }

    fn timeout_monitored(&mut self, s: NodeId, now: Duration) {
        if !self.cfg.confirm {
            self.detect_failure(s, Cause::Silent, now);
            return;
        }
        self.confirms.insert(s, Confirm { asked: self.me.id, tried: Vec::new(), deadline: now });
        self.confirm_next(s, now);
    }

    /// Asks the next co-monitor about `s`, or declares it when nobody is left.
    fn confirm_next(&mut self, s: NodeId, now: Duration) {
        let Some(mut c) = self.confirms.remove(&s) else { return };
        let prev = c.asked;
        let me = self.me.id;
        let cands: Vec<NodeId> = self
            .co_monitors
            .get(&s)
            .map(|v| {
                v.iter().copied().filter(|&m| m != me && !c.tried.contains(&m) && !self.failed.contains(&m)).collect()
            })
            .unwrap_or_default();
        if prev != me {
            self.maybe_disconnect(prev);
        }
        if cands.is_empty() {
            self.detect_failure(s, Cause::Silent, now);
            return;
        }
        let m = cands[below(&mut self.rng, cands.len())];
        c.asked = m;
        c.tried.push(m);
        c.deadline = now + self.cfg.t_to;
        self.confirms.insert(s, c);
        self.send(m, Message::ConfirmReq { suspect: s });
    }

    /// `f` left: forgotten without a notice. Its place among the monitors is not refilled:
    /// processes leave when their program ends, and so do the others soon.
    fn departed_peer(&mut self, f: NodeId) {
        if !self.failed.insert(f) {
            return;
        }
        self.departed.insert(f);
        if let Some(c) = self.cluster_of(f) {
            *self.failed_per_cluster.entry(c).or_default() += 1;
        }
        let was_monitor = self.monitors.remove(&f) | self.asked.remove(&f).is_some();
        self.monitored.remove(&f);
        self.wide.remove(&f);
        self.wide_asked.remove(&f);
        self.co_monitors.remove(&f);
        self.confirms.remove(&f);
        for set in self.co_monitors.values_mut() {
            set.retain(|&m| m != f);
        }
        for set in self.wconns.values_mut() {
            set.retain(|&(a, b)| a != f && b != f);
        }
        if self.conns.remove(&f).is_some() {
            self.out.push_back(Action::Disconnect { to: f });
        }
        if was_monitor {
            self.send_monitor_set();
        }
    }

    // ---------------------------------------------------------------- inputs

    /// [`Input::Stall`].
    fn on_stall(&mut self, now: Duration, stalled: Duration) {
        if !self.started || self.excluded || self.left {
            return;
        }
        self.stats.stalls += 1;
        let shift = |t: &mut Duration| *t = (*t + stalled).min(now).max(*t);
        for t in self.monitored.values_mut().chain(self.wide.values_mut()) {
            shift(t);
        }
        for t in self.asked.values_mut().chain(self.wide_asked.values_mut()) {
            shift(t);
        }
        for c in self.confirms.values_mut() {
            c.deadline += stalled;
        }
        shift(&mut self.last_heard);
    }

    /// [`Input::Leave`].
    fn leave(&mut self) {
        if !self.started || self.excluded || self.left {
            return;
        }
        self.left = true;
        let peers: Vec<NodeId> = self.conns.keys().copied().collect();
        for p in peers {
            match self.conns.remove(&p) {
                Some(Conn::Up) => {
                    self.out.push_back(Action::Send { to: p, msg: Message::Leave });
                    self.out.push_back(Action::Disconnect { to: p });
                }
                Some(Conn::Opening(_)) => self.out.push_back(Action::Disconnect { to: p }),
                None => {}
            }
        }
    }

    /// [`Input::Declared`].
    fn on_declared(&mut self, node: NodeId, now: Duration) {
        if node != self.me.id {
            self.detect_failure(node, Cause::Declared, now);
        }
    }

    /// [`Input::Start`].
    fn on_start(&mut self, now: Duration) {
        if self.started {
            return;
        }
        self.started = true;
        self.last_heard = now;
        self.next_hb = now + self.cfg.t_hb;
        self.next_wide_hb = now + self.cfg.wide_t_hb;
        let me = self.me.id;
        let c = self.cluster;
        let (a, b) = self.members(&c);
        let cands: Vec<NodeId> = a.iter().chain(b).copied().filter(|&id| id != me).collect();
        for i in choose_monitors(&mut self.rng, cands.len(), self.cfg.k) {
            self.request(cands[i], now);
        }
        self.schedule_all_wide(now);
    }

    /// [`Input::Connected`] (also a first message on a connection being opened).
    fn on_connected(&mut self, peer: NodeId, now: Duration) {
        if let Some(Conn::Opening(q)) = self.conns.get_mut(&peer) {
            let q = std::mem::take(q);
            self.conns.insert(peer, Conn::Up);
            // `T_to` for the answer counts from when the request can go out.
            if let Some(t) = self.asked.get_mut(&peer) {
                *t = now;
            }
            if let Some(t) = self.wide_asked.get_mut(&peer) {
                *t = now;
            }
            for msg in q {
                self.out.push_back(Action::Send { to: peer, msg });
            }
        }
    }

    /// [`Input::ConnectFailed`].
    fn on_connect_failed(&mut self, peer: NodeId, now: Duration) {
        if !matches!(self.conns.get(&peer), Some(Conn::Opening(_))) {
            return;
        }
        self.conns.remove(&peer);
        if self.failed.contains(&peer) || self.excluded {
            return;
        }
        if self.cluster_of(peer) == Some(self.cluster) {
            if self.has_relation(peer) {
                self.detect_failure(peer, Cause::Unreachable, now);
            }
        } else if self.wide_asked.contains_key(&peer) {
            self.refused_by(peer, now);
        } else if let Some((&s, _)) = self.confirms.iter().find(|(_, c)| c.asked == peer) {
            self.confirm_next(s, now);
        }
    }

    /// [`Input::ConnectionReset`].
    fn on_connection_reset(&mut self, peer: NodeId, now: Duration) {
        if self.conns.remove(&peer).is_none() || self.failed.contains(&peer) || self.excluded || self.left {
            return;
        }
        if self.monitors.contains(&peer) || self.monitored.contains_key(&peer) || self.wide.contains_key(&peer) {
            self.detect_failure(peer, Cause::Reset, now);
        } else if self.asked.contains_key(&peer) {
            // Only a request in flight: the peer may have closed a connection it no longer
            // needed just as the request left. Ask again on a new connection; a dead peer
            // refuses it (`on_connect_failed`) or never answers (`T_to`).
            let msg = Message::MonitorReq { from: self.me, view: self.view };
            self.send(peer, msg);
        } else if self.wide_asked.contains_key(&peer) {
            self.refused_by(peer, now);
        } else if let Some((&s, _)) = self.confirms.iter().find(|(_, c)| c.asked == peer) {
            self.confirm_next(s, now);
        }
    }

    /// A message from a process this one declared failed. Fencing: it is not heard any more.
    /// For a cut that healed (see the module's documentation): the probed process's answer is
    /// heeded, and a prober is told it failed.
    fn fenced_message(&mut self, from: NodeId, msg: &Message, now: Duration) {
        if self.probing == Some(from) && *msg == Message::Fenced {
            self.probing = None;
            self.detect_failure(self.me.id, Cause::Notice { from }, now);
        } else if matches!(msg, Message::MonitorReq { .. })
            && !self.departed.contains(&from)
            && !self.conns.contains_key(&from)
            && !self.quiet(now)
        {
            // On the connection it opened, closed after what was written.
            self.out.push_back(Action::Send { to: from, msg: Message::Fenced });
            self.out.push_back(Action::Disconnect { to: from });
        }
    }

    /// A monitor request from `from` (its endpoint `ep`, its view digest).
    fn on_monitor_req(&mut self, from: NodeId, ep: Endpoint, view: ViewDigest, now: Duration) {
        let new = self.learn(&[ep], now);
        if view != self.view {
            let mut nodes: Vec<Endpoint> = self.dir.endpoints.clone();
            nodes.extend(self.learned.values().copied());
            nodes.retain(|e| !self.failed.contains(&e.id));
            self.send(from, Message::NodeInfo { nodes });
        }
        self.send(from, Message::MonitorAck);
        if self.key(&ep) == self.cluster {
            self.monitored.insert(from, now);
        } else {
            self.wide.insert(from, now);
            self.add_wconn(self.me.id, from, None);
            self.send_failed_set(from);
        }
        if !new.is_empty() {
            self.flood(&Message::NodeInfo { nodes: new }, Some(from), false);
        }
    }

    /// `from` acknowledged a monitor request (or a wide-area one).
    fn on_monitor_ack(&mut self, from: NodeId, now: Duration) {
        if self.asked.remove(&from).is_some() {
            self.monitors.insert(from);
            if self.monitors.len() > self.cfg.k {
                let old: Vec<NodeId> = self.monitors.iter().copied().filter(|&m| m != from).collect();
                let q = old[below(&mut self.rng, old.len())];
                self.monitors.remove(&q);
                self.stats.cancels += 1;
                self.send(q, Message::MonitorCancel);
                self.maybe_disconnect(q);
            }
            self.send_monitor_set();
        } else if self.wide_asked.remove(&from).is_some() {
            self.wide.insert(from, now);
            self.add_wconn(self.me.id, from, None);
            self.send_failed_set(from);
            if let Some(c) = self.cluster_of(from) {
                self.schedule_wide(c, now);
            }
        } else if !self.monitors.contains(&from) && !self.wide.contains_key(&from) {
            // An ack nobody waits for (the request was given up): withdraw it.
            self.send(from, Message::MonitorCancel);
            self.maybe_disconnect(from);
        }
    }

    /// (Confirmation) `from` asks whether this process heard from `suspect` lately.
    fn on_confirm_req(&mut self, from: NodeId, suspect: NodeId, now: Duration) {
        let heard = self.monitored.get(&suspect).or_else(|| self.wide.get(&suspect)).copied();
        let verdict = if self.failed.contains(&suspect) {
            Verdict::Silent
        } else {
            match heard {
                Some(t) if now.saturating_sub(t) < self.cfg.confirm_silence => Verdict::Alive,
                Some(_) => Verdict::Silent,
                None => Verdict::Unknown,
            }
        };
        self.send(from, Message::ConfirmAns { suspect, verdict });
        self.maybe_disconnect(from);
    }

    /// (Confirmation) the answer of `from`, the co-monitor asked about `suspect`.
    fn on_confirm_ans(&mut self, from: NodeId, suspect: NodeId, verdict: Verdict, now: Duration) {
        match verdict {
            Verdict::Silent => {
                self.confirms.remove(&suspect);
                self.maybe_disconnect(from);
                self.detect_failure(suspect, Cause::Silent, now);
            }
            Verdict::Alive => {
                self.confirms.remove(&suspect);
                self.stats.refuted += 1;
                if let Some(t) = self.monitored.get_mut(&suspect) {
                    *t = now;
                }
                self.maybe_disconnect(from);
            }
            Verdict::Unknown => self.confirm_next(suspect, now),
        }
    }

    /// [`Input::Message`]: a message from `from` arrived.
    fn on_message(&mut self, from: NodeId, msg: Message, now: Duration) {
        if self.excluded || self.left || from == self.me.id {
            return;
        }
        if self.failed.contains(&from) {
            self.fenced_message(from, &msg, now);
            return;
        }
        self.last_heard = now;
        // A message on a connection the peer opened makes the connection known.
        match self.conns.get(&from) {
            Some(Conn::Up) => {}
            Some(Conn::Opening(_)) => self.on_connected(from, now),
            None => {
                self.conns.insert(from, Conn::Up);
            }
        }
        // Any message is a sign of life.
        if let Some(t) = self.monitored.get_mut(&from) {
            *t = now;
        }
        if let Some(t) = self.wide.get_mut(&from) {
            *t = now;
        }
        match msg {
            Message::MonitorReq { from: ep, view } => {
                if ep.id != from {
                    return;
                }
                self.on_monitor_req(from, ep, view, now);
            }
            Message::MonitorAck => self.on_monitor_ack(from, now),
            Message::MonitorCancel => {
                self.monitored.remove(&from);
                self.co_monitors.remove(&from);
                self.confirms.remove(&from);
                self.maybe_disconnect(from);
            }
            Message::NodeInfo { nodes } => {
                let new = self.learn(&nodes, now);
                if !new.is_empty() {
                    self.flood(&Message::NodeInfo { nodes: new }, Some(from), false);
                }
            }
            Message::Heartbeat => {}
            Message::Leave => {
                self.departed_peer(from);
                return;
            }
            // From a process this one believes alive: it knows better.
            Message::Fenced => self.detect_failure(self.me.id, Cause::Notice { from }, now),
            Message::Failure { node } => self.detect_failure(node, Cause::Notice { from }, now),
            Message::WconnInfo { local, remote } => {
                if self.failed.contains(&local) || self.failed.contains(&remote.id) {
                    return;
                }
                self.learn(&[remote], now);
                self.add_wconn(local, remote.id, Some(from));
            }
            Message::MonitorSet { monitors } => {
                if self.monitored.contains_key(&from) {
                    let me = self.me.id;
                    self.co_monitors.insert(from, monitors.into_iter().filter(|&m| m != me).take(64).collect());
                }
            }
            Message::ConfirmReq { suspect } => self.on_confirm_req(from, suspect, now),
            Message::ConfirmAns { suspect, verdict } => {
                if !matches!(self.confirms.get(&suspect), Some(c) if c.asked == from) {
                    return;
                }
                self.on_confirm_ans(from, suspect, verdict, now);
            }
        }
        self.maybe_disconnect(from);
    }

    /// Advances time: heartbeats, timeouts, wide-area attempts, confirmations.
    fn tick(&mut self, now: Duration) {
        if !self.started || self.excluded || self.left {
            return;
        }
        if now >= self.next_hb {
            let hs: Vec<NodeId> = self.monitors.iter().copied().collect();
            for q in hs {
                self.stats.heartbeats += 1;
                self.send(q, Message::Heartbeat);
            }
            self.next_hb = next_period(self.next_hb, self.cfg.t_hb, now);
        }
        if now >= self.next_wide_hb {
            let ws: Vec<NodeId> = self.wide.keys().copied().collect();
            for q in ws {
                self.stats.heartbeats += 1;
                self.send(q, Message::Heartbeat);
            }
            self.next_wide_hb = next_period(self.next_wide_hb, self.cfg.wide_t_hb, now);
        }
        let silent: Vec<NodeId> = self
            .monitored
            .iter()
            .filter(|(id, &t)| now >= t + self.cfg.t_to && !self.confirms.contains_key(id))
            .map(|(&id, _)| id)
            .collect();
        for s in silent {
            self.timeout_monitored(s, now);
        }
        let noack: Vec<NodeId> =
            self.asked.iter().filter(|(_, &t)| now >= t + self.cfg.t_to).map(|(&id, _)| id).collect();
        for q in noack {
            self.detect_failure(q, Cause::NoAck, now);
        }
        let wsilent: Vec<NodeId> =
            self.wide.iter().filter(|(_, &t)| now >= t + self.cfg.wide_t_to).map(|(&id, _)| id).collect();
        for q in wsilent {
            self.detect_failure(q, Cause::Silent, now);
        }
        let wnoack: Vec<NodeId> =
            self.wide_asked.iter().filter(|(_, &t)| now >= t + self.cfg.wide_t_to).map(|(&id, _)| id).collect();
        for q in wnoack {
            // Figure 4: no answer across clusters is not a failure; try another member.
            self.refused_by(q, now);
        }
        let due: Vec<ClusterKey> = self.wide_attempt.iter().filter(|(_, &t)| now >= t).map(|(&c, _)| c).collect();
        for c in due {
            self.wide_attempt.remove(&c);
            self.ensure_connectivity(c, now);
        }
        let expired: Vec<NodeId> = self.confirms.iter().filter(|(_, c)| now >= c.deadline).map(|(&s, _)| s).collect();
        for s in expired {
            self.confirm_next(s, now);
        }
        if now >= self.next_probe && self.quiet(now) && self.may_probe() {
            self.probe(now);
        }
    }
}

impl Machine for Node {
    type Input = Input;
    type Output = Action;
    type Rejected = std::convert::Infallible;

    fn handle_input(&mut self, now: Time, input: Input) -> Result<(), Self::Rejected> {
        match input {
            Input::Start => self.on_start(now),
            Input::Message { from, msg } => self.on_message(from, msg, now),
            Input::Connected(peer) => self.on_connected(peer, now),
            Input::ConnectFailed(peer) => self.on_connect_failed(peer, now),
            Input::ConnectionReset(peer) => self.on_connection_reset(peer, now),
            Input::Stall(stalled) => self.on_stall(now, stalled),
            Input::Leave => self.leave(),
            Input::Declared(node) => self.on_declared(node, now),
        }
        Ok(())
    }

    /// Heartbeats, time-outs, wide-area attempts, confirmations.
    fn handle_timeout(&mut self, now: Time) {
        self.tick(now);
    }

    fn poll_output(&mut self) -> Option<Action> {
        self.out.pop_front()
    }

    /// `None` before [`Input::Start`], after [`Input::Leave`] or once excluded.
    fn poll_timeout(&self) -> Option<Time> {
        self.next_deadline()
    }
}

fn next_period(prev: Duration, period: Duration, now: Duration) -> Duration {
    let next = prev + period;
    if next > now {
        next
    } else {
        // The driver was late: no burst to catch up.
        now + period
    }
}

// ------------------------------------------------------------------------ encoding

pub use crate::codec::DecodeError;
use crate::codec::Reader;

use crate::codec::put_var;

fn put_endpoint(out: &mut Vec<u8>, e: &Endpoint) {
    put_var(out, e.id as u64);
    match e.ip {
        IpAddr::V4(a) => {
            out.push(4);
            out.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            out.push(6);
            out.extend_from_slice(&a.octets());
        }
    }
    out.push(e.prefix);
    out.extend_from_slice(&e.port.to_be_bytes());
}

/// The compact binary form of a message: a one-byte tag, then the fields (LEB128 integers,
/// addresses as their bytes). A heartbeat is one byte.
pub fn encode(msg: &Message) -> Vec<u8> {
    let mut out = Vec::with_capacity(8);
    encode_into(msg, &mut out);
    out
}

/// [`encode`], appending to `out`.
pub fn encode_into(msg: &Message, out: &mut Vec<u8>) {
    match msg {
        Message::MonitorReq { from, view } => {
            out.push(1);
            put_endpoint(out, from);
            put_var(out, view.count as u64);
            out.extend_from_slice(&view.hash.to_le_bytes());
        }
        Message::MonitorAck => out.push(2),
        Message::MonitorCancel => out.push(3),
        Message::NodeInfo { nodes } => {
            out.push(4);
            put_var(out, nodes.len() as u64);
            for e in nodes {
                put_endpoint(out, e);
            }
        }
        Message::Heartbeat => out.push(5),
        Message::Failure { node } => {
            out.push(6);
            put_var(out, *node as u64);
        }
        Message::WconnInfo { local, remote } => {
            out.push(7);
            put_var(out, *local as u64);
            put_endpoint(out, remote);
        }
        Message::MonitorSet { monitors } => {
            out.push(8);
            put_var(out, monitors.len() as u64);
            for m in monitors {
                put_var(out, *m as u64);
            }
        }
        Message::ConfirmReq { suspect } => {
            out.push(9);
            put_var(out, *suspect as u64);
        }
        Message::Leave => out.push(11),
        Message::Fenced => out.push(12),
        Message::ConfirmAns { suspect, verdict } => {
            out.push(10);
            put_var(out, *suspect as u64);
            out.push(match verdict {
                Verdict::Alive => 0,
                Verdict::Silent => 1,
                Verdict::Unknown => 2,
            });
        }
    }
}

/// The encoded size of a message.
pub fn encoded_len(msg: &Message) -> usize {
    match msg {
        Message::MonitorAck | Message::MonitorCancel | Message::Heartbeat | Message::Leave | Message::Fenced => 1,
        _ => encode(msg).len(),
    }
}

/// The k-monitor detector's fields.
impl Reader<'_> {
    fn node_id(&mut self) -> Result<NodeId, DecodeError> {
        NodeId::try_from(self.var()?).map_err(|_| DecodeError::BadField("process id"))
    }

    fn endpoint(&mut self) -> Result<Endpoint, DecodeError> {
        let id = self.node_id()?;
        let (ip, max) = match self.u8()? {
            4 => (IpAddr::V4(Ipv4Addr::from(self.bytes::<4>()?)), 32),
            6 => (IpAddr::V6(Ipv6Addr::from(self.bytes::<16>()?)), 128),
            _ => return Err(DecodeError::BadField("address family")),
        };
        let prefix = self.u8()?;
        if prefix > max {
            return Err(DecodeError::BadField("prefix length"));
        }
        let port = u16::from_be_bytes(self.bytes::<2>()?);
        Ok(Endpoint { id, ip, prefix, port })
    }
}

/// Decodes one message ([`encode`]'s form); rejects anything malformed, never panics.
pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    let mut r = Reader::new(bytes);
    let msg = match r.u8()? {
        1 => {
            let from = r.endpoint()?;
            let count = u32::try_from(r.var()?).map_err(|_| DecodeError::BadField("view count"))?;
            let hash = u64::from_le_bytes(r.bytes::<8>()?);
            Message::MonitorReq { from, view: ViewDigest { count, hash } }
        }
        2 => Message::MonitorAck,
        3 => Message::MonitorCancel,
        4 => {
            let n = r.len()?;
            let mut nodes = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                nodes.push(r.endpoint()?);
            }
            Message::NodeInfo { nodes }
        }
        5 => Message::Heartbeat,
        6 => Message::Failure { node: r.node_id()? },
        7 => {
            let local = r.node_id()?;
            Message::WconnInfo { local, remote: r.endpoint()? }
        }
        8 => {
            let n = r.len()?;
            let mut monitors = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                monitors.push(r.node_id()?);
            }
            Message::MonitorSet { monitors }
        }
        9 => Message::ConfirmReq { suspect: r.node_id()? },
        10 => {
            let suspect = r.node_id()?;
            let verdict = match r.u8()? {
                0 => Verdict::Alive,
                1 => Verdict::Silent,
                2 => Verdict::Unknown,
                _ => return Err(DecodeError::BadField("verdict")),
            };
            Message::ConfirmAns { suspect, verdict }
        }
        11 => Message::Leave,
        12 => Message::Fenced,
        t => return Err(DecodeError::BadTag(t)),
    };
    r.finish()?;
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, HashMap};

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[derive(Debug, Clone)]
    enum Ev {
        Tick(usize),
        Deliver { from: usize, to: usize, epoch: u64, msg: Message },
        Connected { a: usize, b: usize, epoch: u64 },
        ConnFail { a: usize, b: usize },
        Closed { to: usize, from: usize, epoch: u64 },
        Crash { node: usize, reset: bool },
    }

    /// A small deterministic network for the tests: constant latency per link (so FIFO),
    /// connections with epochs, crashes with or without resets, and connections that only
    /// one side may open (`blocked(a, b)`: `a` cannot connect to `b`).
    struct Net {
        nodes: Vec<Node>,
        alive: Vec<bool>,
        now: Duration,
        q: BinaryHeap<Reverse<(Duration, u64, usize)>>,
        evs: HashMap<usize, Ev>,
        seq: u64,
        conns: HashMap<(usize, usize), u64>,
        /// Connections closed, and by whom: what the closer wrote before is still delivered.
        closed_by: HashMap<u64, usize>,
        epochs: u64,
        armed: Vec<Option<Duration>>,
        /// What arrives for this node waits until then (an overloaded process whose
        /// timers still fire but that reads its sockets late).
        frozen_until: Vec<Duration>,
        /// This node's link is down until then: nothing reaches it or leaves it (TCP holds
        /// what was written and delivers it after, unless the connection was closed), and
        /// connections to or from it time out after `T_to`. Its timers run.
        cut_until: Vec<Duration>,
        intra: Duration,
        inter: Duration,
        blocked: Box<dyn Fn(usize, usize) -> bool>,
        reports: Vec<(usize, NodeId, Cause, Duration)>,
        failure_msgs: u64,
        trace: Vec<String>,
    }

    fn pair(a: usize, b: usize) -> (usize, usize) {
        (a.min(b), a.max(b))
    }

    impl Net {
        fn new(eps: Vec<Endpoint>, dirs: Vec<Arc<Directory>>, cfg: Config, seed: u64) -> Net {
            let n = eps.len();
            let nodes = eps.iter().zip(dirs).map(|(e, d)| Node::new(*e, d, cfg, seed ^ e.id as u64)).collect();
            Net {
                nodes,
                alive: vec![true; n],
                now: Duration::ZERO,
                q: BinaryHeap::new(),
                evs: HashMap::new(),
                seq: 0,
                conns: HashMap::new(),
                closed_by: HashMap::new(),
                epochs: 0,
                armed: vec![None; n],
                frozen_until: vec![Duration::ZERO; n],
                cut_until: vec![Duration::ZERO; n],
                intra: Duration::from_micros(100),
                inter: Duration::from_micros(2250),
                blocked: Box::new(|_, _| false),
                reports: Vec::new(),
                failure_msgs: 0,
                trace: Vec::new(),
            }
        }

        /// `n` processes in one /16, every one knowing every other.
        fn lan(n: usize, cfg: Config, seed: u64) -> Net {
            let eps: Vec<Endpoint> = (0..n)
                .map(|i| Endpoint::v4(i as u32, [10, 1, (i / 250) as u8, (i % 250) as u8 + 1], 16, 7000))
                .collect();
            let dir = Arc::new(Directory::new(eps.clone(), cfg.wide_area));
            Net::new(eps, vec![dir; n], cfg, seed)
        }

        /// Clusters of the given sizes (10.c.0.0/16 each), every process knowing every other.
        fn clusters(sizes: &[usize], cfg: Config, seed: u64) -> Net {
            let mut eps = Vec::new();
            for (c, &m) in sizes.iter().enumerate() {
                for i in 0..m {
                    let id = eps.len() as u32;
                    eps.push(Endpoint::v4(id, [10, c as u8 + 1, (i / 250) as u8, (i % 250) as u8 + 1], 16, 7000));
                }
            }
            let dir = Arc::new(Directory::new(eps.clone(), true));
            let n = eps.len();
            Net::new(eps, vec![dir; n], cfg, seed)
        }

        fn lat(&self, a: usize, b: usize) -> Duration {
            if self.nodes[a].cluster() == self.nodes[b].cluster() {
                self.intra
            } else {
                self.inter
            }
        }

        fn push(&mut self, at: Duration, ev: Ev) {
            self.seq += 1;
            self.evs.insert(self.seq as usize, ev);
            self.q.push(Reverse((at, self.seq, self.seq as usize)));
        }

        fn start_all(&mut self) {
            for i in 0..self.nodes.len() {
                self.nodes[i].handle_input(self.now, Input::Start).unwrap();
                self.after(i);
            }
        }

        fn crash_at(&mut self, node: usize, at: Duration, reset: bool) {
            self.push(at, Ev::Crash { node, reset });
        }

        /// Drains node `i`'s actions and re-arms its timer.
        fn after(&mut self, i: usize) {
            while let Some(a) = self.nodes[i].poll_output() {
                self.trace.push(format!("{:?} {i} {a:?}", self.now));
                match a {
                    Action::Connect { to } => {
                        let b = to.id as usize;
                        let l = self.lat(i, b);
                        if self.now < self.cut_until[i].max(self.cut_until[b]) {
                            let t_to = self.nodes[i].config().t_to;
                            self.push(self.now + t_to, Ev::ConnFail { a: i, b });
                        } else if let Some(&e) = self.conns.get(&pair(i, b)) {
                            // The peer opened one meanwhile: it is reused.
                            self.push(self.now + l * 2, Ev::Connected { a: i, b, epoch: e });
                        } else if (self.blocked)(i, b) || !self.alive[b] {
                            self.push(self.now + l * 2, Ev::ConnFail { a: i, b });
                        } else {
                            self.epochs += 1;
                            let e = self.epochs;
                            self.conns.insert(pair(i, b), e);
                            self.push(self.now + l * 2, Ev::Connected { a: i, b, epoch: e });
                        }
                    }
                    Action::Send { to, msg } => {
                        let b = to as usize;
                        if matches!(msg, Message::Failure { .. }) {
                            self.failure_msgs += 1;
                        }
                        assert_eq!(decode(&encode(&msg)).as_ref(), Ok(&msg));
                        match self.conns.get(&pair(i, b)) {
                            Some(&epoch) => {
                                let l = self.lat(i, b);
                                self.push(self.now + l, Ev::Deliver { from: i, to: b, epoch, msg })
                            }
                            None => {
                                // Written on a connection the peer closed: a reset.
                                self.push(self.now, Ev::Closed { to: i, from: b, epoch: 0 });
                            }
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
                    Action::Failed { node, cause } => self.reports.push((i, node, cause, self.now)),
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

        fn run_until(&mut self, end: Duration) {
            while let Some(&Reverse((at, _, key))) = self.q.peek() {
                if at > end {
                    break;
                }
                self.q.pop();
                self.now = at;
                let ev = self.evs.remove(&key).expect("event");
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
                    Ev::Deliver { from, to, epoch, msg } if at < self.cut_until[from].max(self.cut_until[to]) => {
                        let t = self.cut_until[from].max(self.cut_until[to]);
                        self.push(t, Ev::Deliver { from, to, epoch, msg });
                    }
                    Ev::Deliver { from, to, epoch, msg } if at < self.frozen_until[to] => {
                        let t = self.frozen_until[to];
                        self.push(t, Ev::Deliver { from, to, epoch, msg });
                    }
                    Ev::Deliver { from, to, epoch, msg } => {
                        let open = self.conns.get(&pair(from, to)) == Some(&epoch);
                        if self.alive[to] && (open || self.closed_by.get(&epoch) == Some(&from)) {
                            self.nodes[to].handle_input(at, Input::Message { from: from as NodeId, msg }).unwrap();
                            self.after(to);
                        }
                    }
                    Ev::Connected { a, b, epoch } => {
                        if !self.alive[a] {
                            continue;
                        }
                        if self.conns.get(&pair(a, b)) == Some(&epoch) {
                            self.nodes[a].handle_input(at, Input::Connected(b as NodeId)).unwrap();
                        } else {
                            self.nodes[a].handle_input(at, Input::ConnectFailed(b as NodeId)).unwrap();
                        }
                        self.after(a);
                    }
                    Ev::ConnFail { a, b } => {
                        if self.alive[a] {
                            self.nodes[a].handle_input(at, Input::ConnectFailed(b as NodeId)).unwrap();
                            self.after(a);
                        }
                    }
                    Ev::Closed { to, from, epoch } if at < self.cut_until[from].max(self.cut_until[to]) => {
                        let t = self.cut_until[from].max(self.cut_until[to]);
                        self.push(t, Ev::Closed { to, from, epoch });
                    }
                    Ev::Closed { to, from, epoch } if at < self.frozen_until[to] => {
                        let t = self.frozen_until[to];
                        self.push(t, Ev::Closed { to, from, epoch });
                    }
                    Ev::Closed { to, from, epoch } => {
                        let current = self.conns.get(&pair(from, to)).copied();
                        if epoch != 0 && current.is_some() && current != Some(epoch) {
                            continue;
                        }
                        if epoch == 0 && current.is_some() {
                            continue;
                        }
                        if self.alive[to] {
                            self.nodes[to].handle_input(at, Input::ConnectionReset(from as NodeId)).unwrap();
                            self.after(to);
                        }
                    }
                    Ev::Crash { node, reset } => {
                        self.alive[node] = false;
                        if reset {
                            let mine: Vec<(usize, usize)> =
                                self.conns.keys().copied().filter(|&(a, b)| a == node || b == node).collect();
                            for p in mine {
                                let e = self.conns.remove(&p).expect("conn");
                                let other = if p.0 == node { p.1 } else { p.0 };
                                let l = self.lat(node, other);
                                self.push(at + l, Ev::Closed { to: other, from: node, epoch: e });
                            }
                        }
                    }
                }
            }
            self.now = end;
        }

        fn live(&self) -> Vec<usize> {
            (0..self.nodes.len()).filter(|&i| self.alive[i]).collect()
        }

        /// Every live node has `min(k, live others of its cluster)` live monitors, nothing
        /// pending, and each monitor monitors it.
        fn assert_monitored(&self, k: usize) {
            for i in self.live() {
                let c = self.nodes[i].cluster();
                let others = self.live().into_iter().filter(|&j| j != i && self.nodes[j].cluster() == c).count();
                let h: Vec<NodeId> = self.nodes[i].monitors().collect();
                assert_eq!(h.len(), k.min(others), "node {i} monitors {h:?}");
                assert_eq!(self.nodes[i].asked().count(), 0, "node {i} still asking");
                for m in h {
                    assert!(self.alive[m as usize], "node {i} monitored by dead {m}");
                    assert!(self.nodes[m as usize].monitored().any(|x| x == i as NodeId), "{m} does not monitor {i}");
                }
            }
            // And nobody monitors a process that does not count it as a monitor.
            for i in self.live() {
                for m in self.nodes[i].monitored() {
                    if self.alive[m as usize] {
                        assert!(
                            self.nodes[m as usize].monitors().any(|x| x == i as NodeId),
                            "{i} monitors {m} unasked"
                        );
                    }
                }
            }
        }

        /// The live processes that reported `node` failed.
        fn reported(&self, node: NodeId) -> Vec<usize> {
            let mut v: Vec<usize> =
                self.reports.iter().filter(|r| r.1 == node && self.alive[r.0]).map(|r| r.0).collect();
            v.sort_unstable();
            v.dedup();
            v
        }
    }

    fn cfg(k: usize) -> Config {
        Config { wide_area: false, ..Config::new(k, ms(100), ms(2100)) }
    }

    fn every_message() -> Vec<Message> {
        let e = Endpoint::v4(7, [192, 168, 3, 4], 24, 4242);
        let e6 = Endpoint { id: u32::MAX, ip: "fe80::1".parse().unwrap(), prefix: 64, port: 1 };
        vec![
            Message::MonitorReq { from: e, view: ViewDigest { count: 300, hash: u64::MAX } },
            Message::MonitorAck,
            Message::MonitorCancel,
            Message::NodeInfo { nodes: vec![e, e6] },
            Message::NodeInfo { nodes: vec![] },
            Message::Heartbeat,
            Message::Failure { node: 1 << 20 },
            Message::WconnInfo { local: 3, remote: e6 },
            Message::MonitorSet { monitors: vec![1, 2, 300] },
            Message::ConfirmReq { suspect: 9 },
            Message::ConfirmAns { suspect: 9, verdict: Verdict::Alive },
            Message::ConfirmAns { suspect: 9, verdict: Verdict::Silent },
            Message::ConfirmAns { suspect: 9, verdict: Verdict::Unknown },
            Message::Leave,
            Message::Fenced,
        ]
    }

    #[test]
    fn messages_roundtrip_compactly() {
        for m in every_message() {
            let b = encode(&m);
            assert_eq!(decode(&b), Ok(m.clone()), "{m:?}");
            assert_eq!(encoded_len(&m), b.len());
            // Every strict prefix is refused, and so is a trailing byte.
            for cut in 0..b.len() {
                assert!(decode(&b[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            let mut long = b.clone();
            long.push(0);
            assert_eq!(decode(&long), Err(DecodeError::Trailing(1)));
        }
        assert_eq!(encode(&Message::Heartbeat), vec![5]);
        assert_eq!(decode(&[13]), Err(DecodeError::BadTag(13)));
        // Overlong integers (found by fuzzing): one encoding per message.
        assert_eq!(decode(&[6, 0x81, 0x00]), Err(DecodeError::BadField("integer")));
        assert_eq!(decode(&[8, 1, 174, 165, 234, 0]), Err(DecodeError::BadField("integer")));
        assert_eq!(decode(&[6, 0xff, 0xff, 0xff, 0xff, 0x10]), Err(DecodeError::BadField("process id")));
        // An endpoint with a /33 is refused.
        let mut b = encode(&Message::WconnInfo { local: 1, remote: Endpoint::v4(2, [1, 2, 3, 4], 32, 5) });
        let at = b.len() - 3;
        b[at] = 33;
        assert_eq!(decode(&b), Err(DecodeError::BadField("prefix length")));
    }

    #[test]
    fn clusters_are_subnets() {
        let a = Endpoint::v4(1, [192, 168, 1, 77], 24, 1);
        let b = Endpoint::v4(2, [192, 168, 1, 200], 24, 1);
        let c = Endpoint::v4(3, [192, 168, 2, 1], 24, 1);
        let d = Endpoint::v4(4, [192, 168, 2, 1], 16, 1);
        assert_eq!(a.cluster(), b.cluster());
        assert_ne!(a.cluster(), c.cluster());
        assert_eq!(a.cluster().to_string(), "192.168.1.0/24");
        assert_eq!(d.cluster().to_string(), "192.168.0.0/16");
        let dir = Directory::new([a, b, c, d, a], true);
        assert_eq!(dir.len(), 4);
        assert_eq!(dir.clusters().count(), 3);
        assert_eq!(Directory::new([a, b, c, d], false).clusters().count(), 1);
    }

    #[test]
    fn choose_monitors_is_uniform_and_distinct() {
        let mut s = 5u64;
        let mut hits = [0u32; 10];
        for _ in 0..20_000 {
            let v = choose_monitors(&mut s, 10, 3);
            assert_eq!(v.len(), 3);
            let set: BTreeSet<usize> = v.iter().copied().collect();
            assert_eq!(set.len(), 3);
            for i in v {
                hits[i] += 1;
            }
        }
        // Each index is picked with probability 3/10: 6000 ± a few σ (σ ≈ 65).
        assert!(hits.iter().all(|&h| (5700..6300).contains(&h)), "{hits:?}");
        assert_eq!(choose_monitors(&mut s, 2, 5).len(), 2);
        assert!(choose_monitors(&mut s, 0, 5).is_empty());
    }

    #[test]
    fn every_node_gets_k_monitors() {
        for (n, k) in [(2, 3), (4, 3), (5, 4), (30, 3), (100, 5)] {
            let mut net = Net::lan(n, cfg(k), n as u64);
            net.start_all();
            net.run_until(ms(3000));
            net.assert_monitored(k);
            assert!(net.reports.is_empty(), "{:?}", net.reports);
            // Heartbeats flow: each node sent about k per T_hb.
            let hb: u64 = net.nodes.iter().map(|x| x.stats().heartbeats).sum();
            let want = (n * k.min(n - 1) * 29) as u64;
            assert!(hb >= want, "{hb} heartbeats < {want}");
        }
    }

    fn crash_run(n: usize, k: usize, reset: bool, seed: u64) -> Net {
        let mut net = Net::lan(n, cfg(k), seed);
        net.start_all();
        let victim = (seed as usize * 7 + 3) % n;
        net.crash_at(victim, ms(5000), reset);
        net.run_until(ms(12_000));
        net
    }

    #[test]
    fn a_crash_is_reported_by_every_live_node_within_t_to() {
        for reset in [false, true] {
            let n = 60;
            let net = crash_run(n, 3, reset, 11);
            let victim = (11 * 7 + 3) % n;
            assert_eq!(net.reported(victim as NodeId), net.live(), "reset {reset}");
            assert!(net.reports.iter().all(|r| r.1 == victim as NodeId), "{:?}", net.reports);
            let last = net.reports.iter().map(|r| r.3).max().unwrap() - ms(5000);
            let bound = if reset { ms(10) } else { ms(2100 + 10) };
            assert!(last <= bound, "last notice {last:?} after the crash (reset {reset})");
            // ≤ 2kn flooded notices.
            assert!(net.failure_msgs <= (2 * 3 * n) as u64, "{} notices", net.failure_msgs);
            net.assert_monitored(3);
        }
    }

    /// Processes that leave one after the other (a job ending) are never reported failed,
    /// not even when the last ones see every connection close.
    #[test]
    fn processes_that_leave_are_never_reported_failed() {
        let n = 20;
        let mut net = Net::lan(n, cfg(3), 5);
        net.start_all();
        net.run_until(ms(3000));
        for i in 0..n {
            let at = ms(3000 + 7 * i as u64);
            net.run_until(at);
            net.nodes[i].handle_input(at, Input::Leave).unwrap();
            net.after(i);
            // Leaving is final: no timer, and messages are ignored.
            assert_eq!(net.nodes[i].poll_timeout(), None);
        }
        // The processes are gone (their sockets reset) once every one left.
        for i in 0..n {
            net.crash_at(i, ms(3000 + 7 * n as u64 + 1), true);
        }
        net.run_until(ms(10_000));
        assert!(net.reports.is_empty(), "{:?}", net.reports);
        assert!(net.nodes[n - 1].has_left(0) && !net.nodes[n - 1].is_failed(0));
    }

    /// A process frozen past `T_to` is declared failed by the others; when it runs again it
    /// reads its own failure notice before anything else and accuses nobody (without it, it
    /// took the silence and the closed connections for failures of all its peers).
    #[test]
    fn a_process_declared_failed_while_frozen_accuses_nobody_when_it_resumes() {
        let n = 12;
        let mut net = Net::lan(n, cfg(3), 21);
        net.start_all();
        net.run_until(ms(2000));
        let frozen = 4;
        // Frozen: nothing it sends leaves, nothing it receives is read, no timer runs, until
        // 6 s (well past T_to = 2.1 s).
        net.alive[frozen] = false;
        net.frozen_until[frozen] = ms(6000);
        net.run_until(ms(5990));
        assert_eq!(net.reported(frozen as NodeId).len(), n - 1, "{:?}", net.reports);
        net.alive[frozen] = true;
        net.run_until(ms(12_000));
        net.nodes[frozen].handle_timeout(ms(12_000));
        net.after(frozen);
        let accused: Vec<(usize, NodeId, Cause)> =
            net.reports.iter().filter(|r| r.0 == frozen).map(|r| (r.0, r.1, r.2)).collect();
        assert_eq!(accused, vec![(frozen, frozen as NodeId, Cause::Excluded)], "{:?}", net.reports);
        assert!(net.nodes[frozen].is_excluded());
        assert!(net.reports.iter().all(|r| r.1 == frozen as NodeId), "{:?}", net.reports);
    }

    /// A process cut off from the network (no reset) past `T_to` is declared failed by the
    /// others, and declares its whole cluster failed in its own view. When the cut heals,
    /// its probe is answered with its own failure notice: it is excluded, and nothing it
    /// concluded while cut off reaches anyone. Without the probe it stayed, alive and
    /// unaware, with no monitor.
    #[test]
    fn a_process_cut_off_learns_it_is_out_when_the_cut_heals() {
        let n = 12;
        let mut probed = 0;
        for seed in 0..40u64 {
            let mut net = Net::lan(n, cfg(3), 31 + seed);
            net.start_all();
            net.run_until(ms(2000));
            let cut = 5;
            net.cut_until[cut] = ms(9000);
            net.run_until(ms(8990));
            assert_eq!(net.reported(cut as NodeId).len(), n - 1, "{:?}", net.reports);
            // Cut off, it took the processes it monitors (and the replacements it asked), if
            // any, for failed; it cannot know it is out.
            assert!(!net.nodes[cut].is_excluded());
            // The cut heals: within two probe periods (and a round trip) it knows it is out.
            net.run_until(ms(9000 + 2 * 2100 + 10));
            assert!(net.nodes[cut].is_excluded(), "seed {seed}: not told it is out: {:?}", net.reports);
            probed += (net.nodes[cut].stats().probes > 0) as usize;
            assert!(
                net.reports.iter().any(|r| r.0 == cut && r.1 == cut as NodeId && r.2 == Cause::Excluded),
                "{:?}",
                net.reports
            );
            // Nobody else was accused, and the others are still monitored.
            assert!(
                net.reports.iter().filter(|r| r.0 != cut).all(|r| r.1 == cut as NodeId),
                "seed {seed}: {:?}",
                net.reports
            );
            let probes = net.nodes[cut].stats().probes;
            net.alive[cut] = false;
            net.run_until(ms(20_000));
            net.assert_monitored(3);
            // Excluded, it probes no more.
            assert_eq!(net.nodes[cut].stats().probes, probes);
        }
        // Some learned it from a monitor request of theirs (a replacement, answered
        // `Fenced`); the others only by probing.
        assert!(probed > 0);
    }

    /// A monitor that did not run for a while (starved, the machine stalled) and resumes
    /// before the processes it monitors accuses none of them: the stall does not count in
    /// their silence. One that really died meanwhile is reported one `T_to` later.
    #[test]
    fn a_monitor_that_stalled_gives_the_others_a_fresh_time_out() {
        let n = 10;
        let mut net = Net::lan(n, cfg(3), 7);
        net.start_all();
        net.run_until(ms(2000));
        // The whole machine stalls 3 s (well past T_to = 2.1 s): nothing runs, nothing is
        // delivered. Node 0 resumes first and ticks before anybody else has run.
        for i in 0..n {
            net.frozen_until[i] = ms(5000);
            net.alive[i] = false;
        }
        net.run_until(ms(5000));
        net.alive[0] = true;
        net.nodes[0].handle_input(ms(5000), Input::Stall(ms(3000))).unwrap();
        net.nodes[0].handle_timeout(ms(5000));
        net.after(0);
        assert!(net.reports.is_empty(), "accused after its own stall: {:?}", net.reports);
        // Without the stall notice, the same tick accuses every process it monitors.
        let mut copy = Net::lan(n, cfg(3), 7);
        copy.start_all();
        copy.run_until(ms(2000));
        let watched = copy.nodes[0].monitored().count();
        assert!(watched > 0);
        copy.nodes[0].handle_timeout(ms(5000));
        copy.after(0);
        assert_eq!(copy.reports.iter().filter(|r| r.2 == Cause::Silent).count(), watched, "{:?}", copy.reports);
        // The others resume; one of them (node 3) is dead after all: known within T_to + ε.
        for i in 1..n {
            net.alive[i] = i != 3;
        }
        for i in 1..n {
            if i != 3 {
                net.nodes[i].handle_input(ms(5000), Input::Stall(ms(3000))).unwrap();
                net.after(i);
            }
        }
        net.run_until(ms(5000 + 2100 + 200));
        let r: Vec<NodeId> = net.reports.iter().map(|r| r.1).collect();
        assert!(r.iter().all(|&x| x == 3), "{:?}", net.reports);
        if net.nodes.iter().any(|m| m.monitored().any(|x| x == 3)) {
            assert!(!r.is_empty(), "the dead node was not reported: {:?}", net.reports);
        }
    }

    /// A process the application declares dead is failed everywhere (flooded) and the monitor
    /// sets are repaired.
    #[test]
    fn a_declared_death_is_flooded_and_repaired() {
        let n = 15;
        let mut net = Net::lan(n, cfg(3), 4);
        net.start_all();
        net.run_until(ms(2000));
        net.nodes[1].handle_input(ms(2000), Input::Declared(6)).unwrap();
        net.after(1);
        net.alive[6] = false;
        net.run_until(ms(2050));
        let mut want: Vec<usize> = net.live();
        want.retain(|&i| i != 1);
        let mut got = net.reported(6);
        got.retain(|&i| i != 1);
        assert_eq!(got, want);
        assert!(net.reports.iter().any(|r| r.0 == 1 && r.1 == 6 && r.2 == Cause::Declared));
        net.run_until(ms(6000));
        net.assert_monitored(3);
    }

    #[test]
    fn monitor_sets_are_repaired_after_many_failures() {
        let n = 40;
        let mut net = Net::lan(n, cfg(4), 3);
        net.start_all();
        // 10 crashes, some simultaneous, some with resets.
        for (j, v) in [5usize, 6, 7, 13, 21, 22, 30, 31, 32, 39].into_iter().enumerate() {
            net.crash_at(v, ms(4000 + 1000 * (j as u64 / 3)), j % 2 == 0);
        }
        net.run_until(ms(20_000));
        for v in [5, 6, 7, 13, 21, 22, 30, 31, 32, 39] {
            assert_eq!(net.reported(v), net.live(), "victim {v}");
        }
        net.assert_monitored(4);
        for i in net.live() {
            assert!(net.nodes[i].monitors().all(|m| net.alive[m as usize]));
        }
    }

    #[test]
    fn late_joiners_are_discovered_and_extra_monitors_cancelled() {
        // 30 processes know each other; 10 more each know only themselves and process 0.
        let k = 3;
        let c = cfg(k);
        let eps: Vec<Endpoint> = (0..40).map(|i| Endpoint::v4(i, [10, 0, 0, i as u8 + 1], 24, 1)).collect();
        let first = Arc::new(Directory::new(eps[..30].iter().copied(), false));
        let mut dirs = vec![first; 30];
        for e in &eps[30..] {
            dirs.push(Arc::new(Directory::new([eps[0], *e], false)));
        }
        let mut net = Net::new(eps, dirs, c, 9);
        for i in 0..30 {
            net.nodes[i].handle_input(Duration::ZERO, Input::Start).unwrap();
            net.after(i);
        }
        net.run_until(ms(1000));
        for i in 30..40 {
            net.nodes[i].handle_input(net.now, Input::Start).unwrap();
            net.after(i);
            let t = net.now + ms(300);
            net.run_until(t);
        }
        net.run_until(net.now + ms(3000));
        for x in &net.nodes {
            let missing: Vec<u32> = (0..40).filter(|&i| x.endpoint(i).is_none()).collect();
            assert!(missing.is_empty(), "node {} misses {missing:?}", x.me().id);
            assert_eq!(x.known(), 40, "node {} knows {}", x.me().id, x.known());
        }
        net.assert_monitored(k);
        let cancels: u64 = net.nodes.iter().map(|x| x.stats().cancels).sum();
        assert!(cancels > 0, "reservoir sampling must have cancelled extra monitors");
        assert!(net.reports.is_empty(), "{:?}", net.reports);
        assert!(net.reports.is_empty(), "{:?}", net.reports);
    }

    /// Wide-area: the number of actual connections between clusters `a` and `b`.
    fn wide_links(net: &Net, a: ClusterKey, b: ClusterKey) -> usize {
        let mut links = BTreeSet::new();
        for x in net.live() {
            let x = &net.nodes[x];
            if x.cluster() != a {
                continue;
            }
            for y in x.wide_peers() {
                if net.nodes[y as usize].cluster() == b && net.nodes[y as usize].wide_peers().any(|z| z == x.me().id) {
                    links.insert((x.me().id, y));
                }
            }
        }
        links.len()
    }

    #[test]
    fn clusters_keep_k_connections_even_through_a_nat() {
        let k = 3;
        let c = Config::new(k, ms(100), ms(2100));
        let mut net = Net::clusters(&[50, 30, 20], c, 4);
        // Nobody can connect into cluster 1 (NAT); cluster 2 cannot connect out (firewall).
        let cl: Vec<ClusterKey> = net.nodes.iter().map(|x| x.cluster()).collect();
        let keys: Vec<ClusterKey> = {
            let mut v = cl.clone();
            v.dedup();
            v
        };
        let (c1, c2) = (keys[1], keys[2]);
        let cl2 = cl.clone();
        net.blocked = Box::new(move |a, b| (cl2[b] == c1 && cl2[a] != c1) || (cl2[a] == c2 && cl2[b] != c2));
        net.start_all();
        net.run_until(ms(8000));
        let check = |net: &Net| {
            for &a in &keys {
                for &b in &keys {
                    if a != b {
                        let l = wide_links(net, a, b);
                        assert!(l >= k, "{a} – {b}: {l} connections");
                        assert!(l <= 4 * k, "{a} – {b}: {l} connections");
                    }
                }
            }
            for i in net.live() {
                for &b in &keys {
                    if b != net.nodes[i].cluster() {
                        assert!(net.nodes[i].wide_connections(&b).count() >= k, "node {i} knows too few links to {b}");
                    }
                }
            }
        };
        check(&net);
        net.assert_monitored(k);
        assert!(net.reports.is_empty(), "{:?}", net.reports);
        // Crash the ends of the wide-area connections of cluster 1: they are replaced.
        let ends: BTreeSet<usize> =
            net.live().into_iter().filter(|&i| cl[i] == c1 && net.nodes[i].wide_peers().next().is_some()).collect();
        for (j, &e) in ends.iter().enumerate() {
            net.crash_at(e, ms(9000 + 10 * j as u64), j % 2 == 0);
        }
        net.run_until(ms(20_000));
        for &e in &ends {
            assert_eq!(net.reported(e as NodeId), net.live(), "victim {e}");
        }
        check(&net);
        net.assert_monitored(k);
    }

    /// The members of a NAT cluster that held its links to the other cluster crash, and a
    /// process of the other cluster crashes before new links are up: its notice, flooded
    /// while no link existed, reaches the NAT cluster over the new links (found on real
    /// processes in namespaces).
    #[test]
    fn a_failure_flooded_while_two_clusters_have_no_link_crosses_once_they_relink() {
        let k = 2;
        let mut net = Net::clusters(&[6, 6], Config::new(k, ms(100), ms(2100)), 8);
        let cl: Vec<ClusterKey> = net.nodes.iter().map(|x| x.cluster()).collect();
        let c1 = cl[6];
        let cl2 = cl.clone();
        net.blocked = Box::new(move |a, b| cl2[b] == c1 && cl2[a] != c1);
        net.start_all();
        net.run_until(ms(8000));
        let ends: Vec<usize> = (6..12).filter(|&i| net.nodes[i].wide_peers().next().is_some()).collect();
        assert!(!ends.is_empty());
        for &e in &ends {
            net.crash_at(e, ms(9000), true);
        }
        let victim = 3;
        net.crash_at(victim, ms(9050), true);
        net.run_until(ms(20_000));
        assert_eq!(net.reported(victim as NodeId), net.live(), "ends {ends:?}");
        for &e in &ends {
            assert_eq!(net.reported(e as NodeId), net.live(), "end {e}");
        }
    }

    #[test]
    fn no_failure_without_a_missed_timeout_or_a_reset() {
        // A minute without crashes, then the network slows down to 1.9 s per message: a gap
        // of 2.0 s between two heartbeats (< T_to), silence.
        let mut net = Net::lan(25, cfg(3), 5);
        net.start_all();
        net.run_until(ms(30_000));
        net.intra = ms(1900);
        net.run_until(ms(60_000));
        assert!(net.reports.is_empty(), "{:?}", net.reports);
        net.assert_monitored(3);
        // The same with 2.1 s: a gap of 2.2 s > T_to, everybody gets accused.
        let mut net = Net::lan(25, cfg(3), 5);
        net.start_all();
        net.run_until(ms(30_000));
        net.intra = ms(2100);
        net.run_until(ms(60_000));
        assert!(!net.reports.is_empty());
    }

    #[test]
    fn confirmation_spares_a_process_that_an_overloaded_monitor_accuses() {
        for confirm in [false, true] {
            let c = Config { confirm, ..cfg(3) };
            let mut net = Net::lan(20, c, 8);
            net.start_all();
            net.run_until(ms(3000));
            // Process 0 is overloaded for 3 s (> T_to): its heartbeats still leave on time,
            // but what it receives waits in its socket buffers, so its timeouts expire.
            assert!(net.nodes[0].monitored().count() > 0);
            net.frozen_until[0] = ms(6000);
            net.run_until(ms(15_000));
            let accused: BTreeSet<NodeId> = net.reports.iter().map(|r| r.1).collect();
            if confirm {
                // Its co-monitors vouch for the processes it monitors: nobody is accused.
                assert!(accused.is_empty(), "accused {accused:?}");
                assert!(net.nodes[0].stats().refuted > 0);
            } else {
                // Without confirmation it accuses the processes it monitors, healthy ones, and
                // everyone believes it.
                let monitored_by_0 = net.reports.iter().filter(|r| r.0 == 0 && r.2 == Cause::Silent).count();
                assert!(monitored_by_0 > 0 && accused.iter().any(|&a| a != 0), "{accused:?}");
            }
        }
        // A real crash is still reported by everybody with confirmation.
        let c = Config { confirm: true, ..cfg(3) };
        let mut net = Net::lan(30, c, 2);
        net.start_all();
        net.crash_at(17, ms(4000), false);
        net.run_until(ms(10_000));
        assert_eq!(net.reported(17), net.live());
        assert!(net.reports.iter().all(|r| r.1 == 17));
    }

    #[test]
    fn same_inputs_same_outputs() {
        let run = |seed| {
            let mut net = Net::clusters(&[20, 15], Config::new(3, ms(100), ms(2100)), seed);
            net.start_all();
            net.crash_at(4, ms(3000), false);
            net.crash_at(30, ms(3500), true);
            net.run_until(ms(8000));
            net.trace
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    fn arb_endpoint() -> impl Strategy<Value = Endpoint> {
        (any::<u32>(), any::<[u8; 4]>(), 0u8..=32, any::<u16>(), any::<bool>(), any::<[u8; 16]>()).prop_map(
            |(id, a, p, port, v6, b)| {
                if v6 {
                    Endpoint { id, ip: IpAddr::V6(Ipv6Addr::from(b)), prefix: p * 4, port }
                } else {
                    Endpoint::v4(id, a, p, port)
                }
            },
        )
    }

    fn arb_message() -> impl Strategy<Value = Message> {
        prop_oneof![
            (arb_endpoint(), any::<u32>(), any::<u64>())
                .prop_map(|(from, count, hash)| Message::MonitorReq { from, view: ViewDigest { count, hash } }),
            Just(Message::MonitorAck),
            Just(Message::MonitorCancel),
            proptest::collection::vec(arb_endpoint(), 0..8).prop_map(|nodes| Message::NodeInfo { nodes }),
            Just(Message::Heartbeat),
            Just(Message::Leave),
            Just(Message::Fenced),
            any::<u32>().prop_map(|node| Message::Failure { node }),
            (any::<u32>(), arb_endpoint()).prop_map(|(local, remote)| Message::WconnInfo { local, remote }),
            proptest::collection::vec(any::<u32>(), 0..8).prop_map(|monitors| Message::MonitorSet { monitors }),
            any::<u32>().prop_map(|suspect| Message::ConfirmReq { suspect }),
            (any::<u32>(), 0u8..3).prop_map(|(suspect, v)| Message::ConfirmAns {
                suspect,
                verdict: [Verdict::Alive, Verdict::Silent, Verdict::Unknown][v as usize]
            }),
        ]
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(m) = decode(&bytes) {
                // What decodes re-encodes to the same bytes (the encoding is canonical
                // except for overlong integers, which decode but re-encode shorter).
                prop_assert_eq!(decode(&encode(&m)), Ok(m));
            }
        }

        #[test]
        fn messages_roundtrip(m in arb_message()) {
            prop_assert_eq!(decode(&encode(&m)), Ok(m.clone()));
            let json = serde_json::to_string(&m).unwrap();
            prop_assert_eq!(serde_json::from_str::<Message>(&json).unwrap(), m);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]

        #[test]
        fn random_crashes_are_reported_by_all_and_sets_repaired(
            n in 6usize..40, k in 3usize..6, seed in any::<u64>(), crashes in 1usize..4, reset in any::<bool>()
        ) {
            let mut net = Net::lan(n, cfg(k), seed);
            net.start_all();
            let mut s = seed;
            let mut victims = BTreeSet::new();
            while victims.len() < crashes.min(n - 2) {
                victims.insert(below(&mut s, n));
            }
            // One at a time (the repair needs T_to): simultaneous failures of all k
            // monitors may go unnoticed, which the simulator quantifies (figure 7).
            for (j, &v) in victims.iter().enumerate() {
                net.crash_at(v, ms(3000 + 3000 * j as u64), reset);
            }
            net.run_until(ms(3000 + 3000 * victims.len() as u64 + 4000));
            for &v in &victims {
                prop_assert_eq!(net.reported(v as NodeId), net.live());
            }
            prop_assert!(net.reports.iter().all(|r| victims.contains(&(r.1 as usize))));
            net.assert_monitored(k);
            // Each failure floods at most one notice per direction of each connection.
            let bound = (victims.len() * 2 * k * n) as u64;
            prop_assert!(net.failure_msgs <= bound, "{} > {}", net.failure_msgs, bound);
        }
    }
}
