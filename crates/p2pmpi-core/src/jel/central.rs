//! The central JEL registry (Drost et al. §5.1): a [`Server`] orders every change of the pool
//! into one numbered stream of [`Event`]s and [`Client`]s deliver that stream in order.
//!
//! # The server
//!
//! * **Requests.** A member joins ([`Message::Join`], answered by [`Message::Welcome`]),
//!   leaves, stands for an election ([`Message::Elect`]), asks for a result
//!   ([`Message::GetElection`]), reports a suspect ([`Message::MaybeDead`]) or fetches the
//!   events it missed ([`Message::Fetch`]). Each becomes at most one event, appended to the
//!   stream with the next sequence number.
//! * **Leases.** Every message from a member renews its lease; a member that has had nothing to
//!   say for [`Config::heartbeat_interval`] sends a heartbeat ([`Message::Ack`]). A member
//!   silent for [`Config::lease`], or reported by `maybe_dead`, is pinged; no answer within
//!   [`Config::ping_timeout`], or a connection the driver reports unreachable, and it is
//!   declared dead ([`Event::Died`]).
//! * **Elections.** The first candidate wins; the others are kept, in order, and when the
//!   winner leaves or dies the next live candidate is elected (a new [`Event::Elected`]). With
//!   no candidate left the election is vacant until someone stands.
//! * **Dissemination** ([`Dissemination`]). *Serial*: every [`Config::flush`], each member is
//!   sent the events it was not sent yet, and a newcomer gets the whole state in its welcome
//!   (the *bootstrap data*). *Peer bootstrap*: the same, but a newcomer is told a few random
//!   members that hold the state ([`Config::bootstrap_peers`]) and asks them first, the server
//!   last. *Tree*: the server sends new events to its children in a binomial tree of rank
//!   0 (itself) and ranks 1.. (the live members in join order, which every member derives from
//!   the stream itself), and every member forwards what it receives to its own children.
//!   *Gossip*: every [`Config::gossip_interval`] the server sends the events created since its
//!   last such push to one random member that holds the stream from before them, and every
//!   member merges its stream with a random peer's (push-pull; events held beyond a gap travel
//!   too); *adaptive gossip* divides the server's interval by `log2(pool size)`. Every
//!   strategy but serial send bootstraps newcomers from peers ([`Config::peer_bootstrap`]), as
//!   the seed's measurements imply. Every strategy is backed by the **fallback**: every
//!   [`Config::fallback_interval`] the server tells every member how long the stream is
//!   ([`Message::Sync`]), the member answers how far it got ([`Message::Ack`]) and the server
//!   sends what it lacks and was not sent to it yet (what was sent is on its way: a connection
//!   delivers in order until it breaks, and then the member is dead).
//!
//! # The client
//!
//! A [`Client`] starts from the state of its welcome or of a peer (delivered as one
//! [`Event::Joined`] per member present, in join order, and one [`Event::Elected`] per
//! election), delivers the events after it strictly in sequence order, holds back those that
//! arrive early, and fetches a gap from the server if it is still open after
//! [`Config::gap_timeout`] (with gossip: after a whole [`Config::fallback_interval`], gossip
//! filling gaps itself). It keeps the last
//! [`Config::log_keep`] events to serve its gossip peers (none with the other strategies).
//! It forwards (tree) or gossips (gossip) the stream as its strategy says. Both consistency
//! models of joins are served by this one ordered stream; a part switched off is not
//! delivered, and [`Input::Elect`] is refused when elections are off.
//!
//! See [the module docs](super) for the driving contract.

use super::members::MemberTable;
use super::wire::{put_addr, put_event, put_id, put_name, put_var, DecodeError, Reader};
use super::{below, binomial_children, next_period, Action, Addr, Consistency, Event, Input, MemberId, PartOff};
use crate::machine::{Machine, Time};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How the server's stream reaches the members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Dissemination {
    /// The server sends every event to every member, and the whole state to a newcomer.
    Serial,
    /// Serial, but newcomers take the state from random members (the server as a backup).
    /// (Every strategy but serial send bootstraps from peers: [`Config::peer_bootstrap`].)
    Bootstrap,
    /// A binomial broadcast tree rooted at the server, built from the stream.
    Tree,
    /// Push-pull gossip among the members, seeded by the server at a fixed interval.
    Gossip,
    /// Gossip, the server seeding `log2(n)` times as often.
    Adaptive,
}

impl Dissemination {
    /// Every strategy, in the seed's order.
    pub const ALL: [Dissemination; 5] = [
        Dissemination::Serial,
        Dissemination::Bootstrap,
        Dissemination::Tree,
        Dissemination::Gossip,
        Dissemination::Adaptive,
    ];

    /// The command line's name.
    pub fn name(self) -> &'static str {
        match self {
            Dissemination::Serial => "serial",
            Dissemination::Bootstrap => "bootstrap",
            Dissemination::Tree => "tree",
            Dissemination::Gossip => "gossip",
            Dissemination::Adaptive => "adaptive",
        }
    }

    fn gossips(self) -> bool {
        matches!(self, Dissemination::Gossip | Dissemination::Adaptive)
    }
}

impl fmt::Display for Dissemination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dissemination {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Dissemination::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| format!("{s:?}: expected serial, bootstrap, tree, gossip or adaptive"))
    }
}

/// The parameters (server and clients must agree on `dissemination`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub dissemination: Dissemination,
    /// Serial, bootstrap, tree: new events are sent out this long after the first of them
    /// (a batch).
    pub flush: Duration,
    /// Gossip: a member's period, and the server's seeding period (divided by `log2(n)` when
    /// adaptive).
    pub gossip_interval: Duration,
    /// The fallback: every member is told the stream's length this often.
    pub fallback_interval: Duration,
    /// A member that sent the server nothing for this long sends a heartbeat.
    pub heartbeat_interval: Duration,
    /// The server pings a member silent for this long.
    pub lease: Duration,
    /// ... and declares it dead if it does not answer within this.
    pub ping_timeout: Duration,
    /// A client fetches a gap in its stream still open after this long (not with gossip,
    /// which fills gaps itself, the fallback being the backstop).
    pub gap_timeout: Duration,
    /// Gossip: events a member keeps to serve its peers (older ones are purged; a member
    /// that needs them gets them from the fallback).
    pub log_keep: usize,
    /// Newcomers take the state from peers (the server as the last resort) rather than from
    /// the server's welcome: on for every strategy but serial send by default, as in the
    /// seed's measurements (table II: the tree's and gossip's servers send a few megabytes,
    /// which no server sending every newcomer the whole state could).
    pub peer_bootstrap: bool,
    /// Peer bootstrap: members a newcomer is told to ask for the state.
    pub bootstrap_peers: usize,
    /// Peer bootstrap: a newcomer asks the next peer (at last the server) after this long.
    pub bootstrap_timeout: Duration,
}

impl Config {
    /// Defaults with this dissemination strategy.
    pub fn new(dissemination: Dissemination) -> Config {
        Config {
            dissemination,
            flush: Duration::from_millis(20),
            gossip_interval: Duration::from_secs(1),
            fallback_interval: Duration::from_secs(60),
            heartbeat_interval: Duration::from_secs(30),
            lease: Duration::from_secs(60),
            ping_timeout: Duration::from_secs(5),
            gap_timeout: Duration::from_secs(2),
            log_keep: 4096,
            peer_bootstrap: dissemination != Dissemination::Serial,
            bootstrap_peers: 3,
            bootstrap_timeout: Duration::from_secs(2),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::new(Dissemination::Tree)
    }
}

/// The state of the pool at one point of the stream: the live members in join order and the
/// elections' winners.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Snapshot {
    /// The sequence number of the first event after this state.
    pub next: u64,
    pub members: Vec<(MemberId, Addr)>,
    pub elections: Vec<(String, MemberId)>,
}

/// What servers, clients and peers send each other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    /// (member → server) join the pool.
    Join { id: MemberId, addr: Addr },
    /// (member → server) leave gracefully.
    Leave,
    /// (member → server) a heartbeat, or the answer to a ping or sync: "I have events up to
    /// `next` (excluded)"; after a sync the server sends what it lacks and was not sent yet.
    Ack { next: u64 },
    /// (member → server) `suspect` may be dead.
    MaybeDead { suspect: MemberId },
    /// (member → server) the sender stands for `name`.
    Elect { name: String },
    /// (member → server) who won `name`?
    GetElection { name: String },
    /// (member → server or peer) send me the events from `from` up to `to` (excluded): a gap.
    Fetch { from: u64, to: u64 },
    /// (server → member) you joined: the state (serial) or peers to take it from (bootstrap);
    /// your own join is event `next − 1`.
    Welcome { next: u64, snapshot: Option<Snapshot>, peers: Vec<Addr> },
    /// Consecutive events, the first numbered `first`.
    Events { first: u64, events: Vec<Event> },
    /// (server → member) the answer to `Elect` or `GetElection`.
    ElectionResult { name: String, winner: Option<MemberId> },
    /// (server → member) are you alive?
    Ping,
    /// (server → member) the fallback: the stream has `next` events.
    Sync { next: u64 },
    /// (newcomer → peer or server) send me the state.
    BootstrapReq,
    /// The state.
    Snapshot(Snapshot),
    /// (member → member) gossip: I have events up to `next`.
    Gossip { next: u64 },
    /// The answer: the replier has events up to `next` and sends those the asker lacks.
    GossipReply { next: u64, first: u64, events: Vec<Event> },
}

impl Message {
    /// A short name for statistics.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Join { .. } => "join",
            Message::Leave => "leave",
            Message::Ack { .. } => "ack",
            Message::MaybeDead { .. } => "maybe_dead",
            Message::Elect { .. } => "elect",
            Message::GetElection { .. } => "get_election",
            Message::Fetch { .. } => "fetch",
            Message::Welcome { .. } => "welcome",
            Message::Events { .. } => "events",
            Message::ElectionResult { .. } => "election_result",
            Message::Ping => "ping",
            Message::Sync { .. } => "sync",
            Message::BootstrapReq => "bootstrap_req",
            Message::Snapshot(_) => "snapshot",
            Message::Gossip { .. } => "gossip",
            Message::GossipReply { .. } => "gossip_reply",
        }
    }

    /// How many member identities (with their addresses) the message carries: what grows
    /// with the pool (the simulator can charge a bigger identifier for each).
    pub fn member_records(&self) -> usize {
        let evs = |e: &[Event]| e.iter().filter(|e| matches!(e, Event::Joined { .. })).count();
        match self {
            Message::Join { .. } => 1,
            Message::Welcome { snapshot, peers, .. } => {
                peers.len() + snapshot.as_ref().map_or(0, |s| s.members.len() + s.elections.len())
            }
            Message::Snapshot(s) => s.members.len() + s.elections.len(),
            Message::Events { events, .. } | Message::GossipReply { events, .. } => evs(events),
            _ => 0,
        }
    }
}

// ------------------------------------------------------------------------ encoding

fn put_events(out: &mut Vec<u8>, first: u64, events: &[Event]) {
    put_var(out, first);
    put_var(out, events.len() as u64);
    for e in events {
        put_event(out, e);
    }
}

fn put_snapshot(out: &mut Vec<u8>, s: &Snapshot) {
    put_var(out, s.next);
    put_var(out, s.members.len() as u64);
    for (id, a) in &s.members {
        put_id(out, *id);
        put_addr(out, a);
    }
    put_var(out, s.elections.len() as u64);
    for (n, w) in &s.elections {
        put_name(out, n);
        put_id(out, *w);
    }
}

/// The compact binary form of a message: a one-byte tag, then the fields (LEB128 integers,
/// 8-byte ids, addresses as their bytes and port).
pub fn encode(msg: &Message) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    encode_into(msg, &mut out);
    out
}

/// [`encode`], appending to `out`.
pub fn encode_into(msg: &Message, out: &mut Vec<u8>) {
    match msg {
        Message::Join { id, addr } => {
            out.push(1);
            put_id(out, *id);
            put_addr(out, addr);
        }
        Message::Leave => out.push(2),
        Message::Ack { next } => {
            out.push(3);
            put_var(out, *next);
        }
        Message::MaybeDead { suspect } => {
            out.push(4);
            put_id(out, *suspect);
        }
        Message::Elect { name } => {
            out.push(5);
            put_name(out, name);
        }
        Message::GetElection { name } => {
            out.push(6);
            put_name(out, name);
        }
        Message::Fetch { from, to } => {
            out.push(7);
            put_var(out, *from);
            put_var(out, *to);
        }
        Message::Welcome { next, snapshot, peers } => {
            out.push(8);
            put_var(out, *next);
            match snapshot {
                None => out.push(0),
                Some(s) => {
                    out.push(1);
                    put_snapshot(out, s);
                }
            }
            put_var(out, peers.len() as u64);
            for a in peers {
                put_addr(out, a);
            }
        }
        Message::Events { first, events } => {
            out.push(9);
            put_events(out, *first, events);
        }
        Message::ElectionResult { name, winner } => {
            out.push(10);
            put_name(out, name);
            match winner {
                None => out.push(0),
                Some(w) => {
                    out.push(1);
                    put_id(out, *w);
                }
            }
        }
        Message::Ping => out.push(11),
        Message::Sync { next } => {
            out.push(12);
            put_var(out, *next);
        }
        Message::BootstrapReq => out.push(13),
        Message::Snapshot(s) => {
            out.push(14);
            put_snapshot(out, s);
        }
        Message::Gossip { next } => {
            out.push(15);
            put_var(out, *next);
        }
        Message::GossipReply { next, first, events } => {
            out.push(16);
            put_var(out, *next);
            put_events(out, *first, events);
        }
    }
}

fn read_events(r: &mut Reader<'_>) -> Result<(u64, Vec<Event>), DecodeError> {
    let first = r.var()?;
    let n = r.len()?;
    if first.checked_add(n as u64).is_none() {
        return Err(DecodeError::BadField("sequence number"));
    }
    let mut events = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        events.push(r.event()?);
    }
    Ok((first, events))
}

fn read_snapshot(r: &mut Reader<'_>) -> Result<Snapshot, DecodeError> {
    let next = r.var()?;
    let n = r.len()?;
    let mut members = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let id = r.member_id()?;
        members.push((id, r.addr()?));
    }
    let n = r.len()?;
    let mut elections = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let name = r.name()?;
        elections.push((name, r.member_id()?));
    }
    Ok(Snapshot { next, members, elections })
}

/// Decodes one message ([`encode`]'s form); rejects anything malformed, never panics.
pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    let mut r = Reader::new(bytes);
    let msg = match r.u8()? {
        1 => {
            let id = r.member_id()?;
            Message::Join { id, addr: r.addr()? }
        }
        2 => Message::Leave,
        3 => Message::Ack { next: r.var()? },
        4 => Message::MaybeDead { suspect: r.member_id()? },
        5 => Message::Elect { name: r.name()? },
        6 => Message::GetElection { name: r.name()? },
        7 => {
            let from = r.var()?;
            Message::Fetch { from, to: r.var()? }
        }
        8 => {
            let next = r.var()?;
            let snapshot = if r.bool()? { Some(read_snapshot(&mut r)?) } else { None };
            let n = r.len()?;
            let mut peers = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                peers.push(r.addr()?);
            }
            Message::Welcome { next, snapshot, peers }
        }
        9 => {
            let (first, events) = read_events(&mut r)?;
            Message::Events { first, events }
        }
        10 => {
            let name = r.name()?;
            let winner = if r.bool()? { Some(r.member_id()?) } else { None };
            Message::ElectionResult { name, winner }
        }
        11 => Message::Ping,
        12 => Message::Sync { next: r.var()? },
        13 => Message::BootstrapReq,
        14 => Message::Snapshot(read_snapshot(&mut r)?),
        15 => Message::Gossip { next: r.var()? },
        16 => {
            let next = r.var()?;
            let (first, events) = read_events(&mut r)?;
            Message::GossipReply { next, first, events }
        }
        t => return Err(DecodeError::BadTag(t)),
    };
    r.finish()?;
    Ok(msg)
}

// ------------------------------------------------------------------------ the server

#[derive(Debug, Clone)]
struct Member {
    addr: Addr,
    /// Last message from it.
    last: Duration,
    /// Events it was sent (or said it has) up to.
    sent: u64,
    /// It said it holds the state (peer bootstrap may point newcomers to it).
    has_state: bool,
    /// A fallback sync was sent to it: its next ack gets what it lacks.
    syncing: bool,
    /// The stream's length when it joined (it holds nothing before).
    joined: u64,
}

#[derive(Debug, Clone, Default)]
struct Election {
    winner: Option<MemberId>,
    /// Live candidates in the order they stood (the winner first).
    candidates: Vec<MemberId>,
}

/// The server's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub joins: u64,
    pub leaves: u64,
    pub deaths: u64,
    pub pings: u64,
    pub fetches: u64,
}

/// The central registry.
#[derive(Debug, Clone)]
pub struct Server {
    cfg: Config,
    log: Vec<Event>,
    members: BTreeMap<MemberId, Member>,
    by_addr: HashMap<Addr, MemberId>,
    /// The live members in join order: rank `i + 1` of the broadcast tree.
    order: Vec<MemberId>,
    elections: BTreeMap<String, Election>,
    /// Pinged members and the deadline of their answer.
    pinged: BTreeMap<MemberId, Duration>,
    flush_at: Option<Duration>,
    /// Events up to this were sent down the tree.
    flushed: u64,
    /// Gossip: events up to this were seeded.
    seeded: u64,
    next_gossip: Duration,
    next_fallback: Duration,
    next_lease_check: Duration,
    started: bool,
    rng: u64,
    out: VecDeque<Action<Message>>,
    stats: ServerStats,
}

impl Server {
    /// A server with no member; `seed` drives its random choices.
    pub fn new(cfg: Config, seed: u64) -> Server {
        Server {
            cfg,
            log: Vec::new(),
            members: BTreeMap::new(),
            by_addr: HashMap::new(),
            order: Vec::new(),
            elections: BTreeMap::new(),
            pinged: BTreeMap::new(),
            flush_at: None,
            flushed: 0,
            seeded: 0,
            next_gossip: Duration::ZERO,
            next_fallback: Duration::ZERO,
            next_lease_check: Duration::ZERO,
            started: false,
            rng: seed,
            out: VecDeque::new(),
            stats: ServerStats::default(),
        }
    }

    /// [`ServerInput::Start`].
    fn start(&mut self, now: Duration) {
        self.started = true;
        self.next_gossip = now + self.gossip_period();
        self.next_fallback = now + self.cfg.fallback_interval;
        self.next_lease_check = now + self.cfg.lease / 4;
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The stream so far.
    pub fn log(&self) -> &[Event] {
        &self.log
    }

    /// The live members in join order.
    pub fn members(&self) -> &[MemberId] {
        &self.order
    }

    /// The winner of `name`, if any.
    pub fn election(&self, name: &str) -> Option<MemberId> {
        self.elections.get(name).and_then(|e| e.winner)
    }

    pub fn stats(&self) -> ServerStats {
        self.stats
    }

    fn send(&mut self, to: Addr, msg: Message) {
        self.out.push_back(Action::Send { to, msg });
    }

    fn gossip_period(&self) -> Duration {
        let base = self.cfg.gossip_interval;
        if self.cfg.dissemination == Dissemination::Adaptive && self.order.len() >= 4 {
            base.div_f64((self.order.len() as f64).log2())
        } else {
            base
        }
    }

    /// The state after the first `next` events of the stream, replayed from the log (a rare
    /// path: a join welcomed again must get the state its own join ends, as the first time,
    /// so that the events after it reach it one by one).
    fn snapshot_at(&self, next: u64) -> Snapshot {
        let mut members: Vec<(MemberId, Addr)> = Vec::new();
        let mut elections: BTreeMap<String, MemberId> = BTreeMap::new();
        for e in &self.log[..(next as usize).min(self.log.len())] {
            match e {
                Event::Joined { id, addr } => members.push((*id, *addr)),
                Event::Left { id } | Event::Died { id } => {
                    members.retain(|m| m.0 != *id);
                    elections.retain(|_, w| w != id);
                }
                Event::Elected { name, winner } => {
                    elections.insert(name.clone(), *winner);
                }
            }
        }
        Snapshot { next, members, elections: elections.into_iter().collect() }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            next: self.log.len() as u64,
            members: self.order.iter().map(|id| (*id, self.members[id].addr)).collect(),
            elections: self.elections.iter().filter_map(|(n, e)| e.winner.map(|w| (n.clone(), w))).collect(),
        }
    }

    fn append(&mut self, e: Event, now: Duration) {
        self.log.push(e);
        if self.flush_at.is_none() {
            self.flush_at = Some(now + self.cfg.flush);
        }
    }

    fn events_from(&self, from: u64) -> Message {
        let from = from.min(self.log.len() as u64);
        Message::Events { first: from, events: self.log[from as usize..].to_vec() }
    }

    /// Removes a member that left or died and re-elects where it had won.
    fn remove(&mut self, id: MemberId, died: bool, now: Duration) {
        let Some(m) = self.members.remove(&id) else { return };
        self.by_addr.remove(&m.addr);
        self.order.retain(|&x| x != id);
        self.pinged.remove(&id);
        if died {
            self.stats.deaths += 1;
            self.append(Event::Died { id }, now);
        } else {
            self.stats.leaves += 1;
            self.append(Event::Left { id }, now);
        }
        let mut elected = Vec::new();
        for (name, e) in self.elections.iter_mut() {
            e.candidates.retain(|&c| c != id);
            if e.winner == Some(id) {
                e.winner = e.candidates.first().copied();
                if let Some(w) = e.winner {
                    elected.push(Event::Elected { name: name.clone(), winner: w });
                }
            }
        }
        for ev in elected {
            self.append(ev, now);
        }
    }

    /// The driver could not reach `addr`: a member there is dead.
    fn on_unreachable(&mut self, addr: Addr, now: Duration) {
        if let Some(&id) = self.by_addr.get(&addr) {
            self.remove(id, true, now);
        }
    }

    /// A message from the node listening at `from`.
    fn on_message(&mut self, from: Addr, msg: Message, now: Duration) {
        if let Message::Join { id, addr } = msg {
            if let Some(m) = self.members.get_mut(&id).filter(|m| m.addr == addr) {
                // Sent again: its welcome was lost (the registry that took the join died
                // before sending it; a replica took over). The same place in the stream.
                let next = m.joined;
                m.has_state = true;
                let snapshot = Some(self.snapshot_at(next));
                self.send(addr, Message::Welcome { next, snapshot, peers: Vec::new() });
                return;
            }
            if self.members.contains_key(&id) || self.by_addr.contains_key(&addr) {
                return;
            }
            self.stats.joins += 1;
            self.append(Event::Joined { id, addr }, now);
            let next = self.log.len() as u64;
            self.members
                .insert(id, Member { addr, last: now, sent: next, has_state: false, syncing: false, joined: next });
            self.by_addr.insert(addr, id);
            self.order.push(id);
            let peers = if self.cfg.peer_bootstrap { self.pick_peers() } else { Vec::new() };
            let snapshot = if peers.is_empty() { Some(self.snapshot()) } else { None };
            self.members.get_mut(&id).expect("member").has_state = snapshot.is_some();
            self.send(addr, Message::Welcome { next, snapshot, peers });
            return;
        }
        if msg == Message::BootstrapReq {
            // Anyone may ask (the last resort of peer bootstrap).
            let s = self.snapshot();
            self.send(from, Message::Snapshot(s));
            return;
        }
        let Some(&id) = self.by_addr.get(&from) else { return };
        if let Some(m) = self.members.get_mut(&id) {
            m.last = now;
        }
        self.pinged.remove(&id);
        match msg {
            Message::Leave => self.remove(id, false, now),
            Message::Ack { next } => {
                // The fallback: what it lacks and was not sent yet (what was sent is on its
                // way: the connection is reliable until it breaks, and then the member is dead).
                let m = self.members.get_mut(&id).expect("member");
                m.sent = m.sent.max(next);
                // It holds the state once its stream reached its own join (the snapshot a
                // member installs may be older than that: it is not a bootstrap peer yet).
                // Gossip only: the tree and the serial strategies bring a stale member up to
                // date at once, and their newcomers' states come from the server otherwise.
                m.has_state |= if self.cfg.dissemination.gossips() { next >= m.joined } else { next > 0 };
                let len = self.log.len() as u64;
                if std::mem::take(&mut m.syncing) && m.sent < len {
                    let first = m.sent;
                    m.sent = len;
                    let msg = self.events_from(first);
                    self.send(from, msg);
                }
            }
            Message::MaybeDead { suspect } => {
                if let Some(m) = self.members.get(&suspect) {
                    if !self.pinged.contains_key(&suspect) {
                        let a = m.addr;
                        self.stats.pings += 1;
                        self.pinged.insert(suspect, now + self.cfg.ping_timeout);
                        self.send(a, Message::Ping);
                    }
                }
            }
            Message::Elect { name } => {
                let e = self.elections.entry(name.clone()).or_default();
                if !e.candidates.contains(&id) {
                    e.candidates.push(id);
                }
                let winner = match e.winner {
                    Some(w) => w,
                    None => {
                        e.winner = Some(id);
                        self.append(Event::Elected { name: name.clone(), winner: id }, now);
                        id
                    }
                };
                self.send(from, Message::ElectionResult { name, winner: Some(winner) });
            }
            Message::GetElection { name } => {
                let winner = self.election(&name);
                self.send(from, Message::ElectionResult { name, winner });
            }
            Message::Fetch { from: first, to } => {
                self.stats.fetches += 1;
                let len = self.log.len() as u64;
                let (first, to) = (first.min(len), to.min(len));
                if first < to {
                    let events = self.log[first as usize..to as usize].to_vec();
                    self.send(from, Message::Events { first, events });
                }
            }
            _ => {}
        }
    }

    /// Up to `bootstrap_peers` random members that hold the state.
    fn pick_peers(&mut self) -> Vec<Addr> {
        let mut out = Vec::new();
        if self.order.is_empty() {
            return out;
        }
        for _ in 0..4 * self.cfg.bootstrap_peers {
            if out.len() >= self.cfg.bootstrap_peers {
                break;
            }
            let id = self.order[below(&mut self.rng, self.order.len())];
            let m = &self.members[&id];
            if m.has_state && !out.contains(&m.addr) {
                out.push(m.addr);
            }
        }
        out
    }

    /// When [`tick`](Self::tick) must be called next.
    fn next_deadline(&self) -> Option<Duration> {
        if !self.started {
            return None;
        }
        let mut t = self.next_lease_check;
        if let Some(f) = self.flush_at {
            t = t.min(f);
        }
        if !self.order.is_empty() {
            t = t.min(self.next_fallback);
            if self.cfg.dissemination.gossips() {
                t = t.min(self.next_gossip);
            }
        }
        if let Some(&d) = self.pinged.values().min() {
            t = t.min(d);
        }
        Some(t)
    }

    /// Runs what is due.
    fn tick(&mut self, now: Duration) {
        if !self.started {
            return;
        }
        let len = self.log.len() as u64;
        if self.flush_at.is_some_and(|f| f <= now) {
            self.flush_at = None;
            match self.cfg.dissemination {
                Dissemination::Serial | Dissemination::Bootstrap => {
                    let mut sends = Vec::new();
                    for m in self.members.values_mut() {
                        if m.sent < len {
                            sends.push((m.addr, m.sent));
                            m.sent = len;
                        }
                    }
                    for (a, from) in sends {
                        let msg = self.events_from(from);
                        self.send(a, msg);
                    }
                }
                Dissemination::Tree => {
                    let first = self.flushed;
                    let children: Vec<usize> = binomial_children(0, self.order.len() + 1).collect();
                    for c in children {
                        let id = self.order[c - 1];
                        let m = self.members.get_mut(&id).expect("member");
                        let from = m.sent.min(first);
                        m.sent = len;
                        let a = m.addr;
                        let msg = self.events_from(from);
                        self.send(a, msg);
                    }
                    self.flushed = len;
                }
                Dissemination::Gossip | Dissemination::Adaptive => {}
            }
        }
        if self.cfg.dissemination.gossips() && now >= self.next_gossip {
            if !self.order.is_empty() && self.seeded < len {
                // The new events only: the members gossip the older ones among themselves. The
                // target must be a member that holds the stream from before them (a younger one
                // could not pass them on): a few random draws.
                // Events before the oldest member's join are in everyone's state already.
                let oldest = self.order[0];
                self.seeded = self.seeded.max(self.members[&oldest].joined);
                let mut id = oldest;
                for _ in 0..8 {
                    let c = self.order[below(&mut self.rng, self.order.len())];
                    if self.members[&c].joined <= self.seeded {
                        id = c;
                        break;
                    }
                }
                let m = self.members.get_mut(&id).expect("member");
                let from = m.sent.max(self.seeded);
                if from == m.sent {
                    // Only a contiguous push moves the mark (the fallback sends what is below).
                    m.sent = len;
                }
                let a = m.addr;
                if m.joined <= self.seeded {
                    self.seeded = len;
                }
                if from < len {
                    let msg = self.events_from(from);
                    self.send(a, msg);
                }
            }
            self.next_gossip = next_period(self.next_gossip, self.gossip_period(), now);
        }
        if now >= self.next_fallback {
            let addrs: Vec<Addr> = self
                .members
                .values_mut()
                .map(|m| {
                    m.syncing = true;
                    m.addr
                })
                .collect();
            for a in addrs {
                self.send(a, Message::Sync { next: len });
            }
            self.next_fallback = next_period(self.next_fallback, self.cfg.fallback_interval, now);
        }
        if now >= self.next_lease_check {
            let silent: Vec<(MemberId, Addr)> = self
                .members
                .iter()
                .filter(|(id, m)| m.last + self.cfg.lease <= now && !self.pinged.contains_key(id))
                .map(|(id, m)| (*id, m.addr))
                .collect();
            for (id, a) in silent {
                self.stats.pings += 1;
                self.pinged.insert(id, now + self.cfg.ping_timeout);
                self.send(a, Message::Ping);
            }
            self.next_lease_check = next_period(self.next_lease_check, self.cfg.lease / 4, now);
        }
        let dead: Vec<MemberId> = self.pinged.iter().filter(|(_, &d)| d <= now).map(|(id, _)| *id).collect();
        for id in dead {
            self.remove(id, true, now);
        }
    }
}

/// What the driver feeds the [`Server`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerInput {
    /// The pool is served from now on: the periodic tasks start.
    Start,
    /// A message from the node listening at `from`.
    Message { from: Addr, msg: Message },
    /// The driver could not reach `addr` (or its connection ended without a `Leave`): a
    /// member there is dead.
    Unreachable(Addr),
}

impl Machine for Server {
    type Input = ServerInput;
    type Output = Action<Message>;
    type Rejected = std::convert::Infallible;

    fn handle_input(&mut self, now: Time, input: ServerInput) -> Result<(), Self::Rejected> {
        match input {
            ServerInput::Start => self.start(now),
            ServerInput::Message { from, msg } => self.on_message(from, msg, now),
            ServerInput::Unreachable(addr) => self.on_unreachable(addr, now),
        }
        Ok(())
    }

    /// Flushes, gossips, the fallback, the leases.
    fn handle_timeout(&mut self, now: Time) {
        self.tick(now);
    }

    fn poll_output(&mut self) -> Option<Action<Message>> {
        super::pop_action(&mut self.out)
    }

    /// `None` before [`ServerInput::Start`].
    fn poll_timeout(&self) -> Option<Time> {
        self.next_deadline()
    }
}

// ------------------------------------------------------------------------ the client

/// The live members in join order, with O(log n) removal, rank and selection: the
/// [`MemberTable`] (a slot per join) and a Fenwick tree over its live slots, so a pool of
/// 10 000 sees 10 000 leaves without quadratic work.
#[derive(Debug, Clone, Default)]
struct Roster {
    members: MemberTable,
    /// Fenwick tree (1-based) of the live slots.
    fen: Vec<u32>,
    alive: usize,
}

impl Roster {
    /// The live slot of `id`.
    fn slot(&self, id: MemberId) -> Option<usize> {
        self.members.get(id).filter(|&k| !self.members.is_vacant(k))
    }

    /// Room for `n` more members without growing.
    fn reserve(&mut self, n: usize) {
        self.members.reserve(n);
        self.fen.reserve_exact(n);
    }

    fn prefix(&self, mut i: usize) -> u32 {
        let mut s = 0;
        while i > 0 {
            s += self.fen[i - 1];
            i &= i - 1;
        }
        s
    }

    fn push(&mut self, id: MemberId, addr: Addr) {
        if self.slot(id).is_some() {
            return;
        }
        let i = self.members.len() + 1;
        let low = i & i.wrapping_neg();
        let v = 1 + self.prefix(i - 1) - self.prefix(i - low);
        self.fen.push(v);
        self.members.push(id, addr);
        self.alive += 1;
    }

    fn remove(&mut self, id: MemberId) {
        let Some(k) = self.slot(id) else { return };
        self.members.vacate(k);
        self.alive -= 1;
        let mut i = k + 1;
        while i <= self.fen.len() {
            self.fen[i - 1] -= 1;
            i += i & i.wrapping_neg();
        }
    }

    fn len(&self) -> usize {
        self.alive
    }

    /// The position of `id` among the live members.
    fn rank(&self, id: MemberId) -> Option<usize> {
        self.slot(id).map(|k| self.prefix(k + 1) as usize - 1)
    }

    /// The live member at position `r` (`r < len`).
    fn select(&self, r: usize) -> (MemberId, Addr) {
        let (mut pos, mut rem) = (0usize, r as u32 + 1);
        let mut step = self.fen.len().next_power_of_two();
        while step > 0 {
            if pos + step <= self.fen.len() && self.fen[pos + step - 1] < rem {
                pos += step;
                rem -= self.fen[pos - 1];
            }
            step /= 2;
        }
        debug_assert!(!self.members.is_vacant(pos), "a live slot");
        (self.members.id(pos), self.members.addr(pos))
    }

    fn iter(&self) -> impl Iterator<Item = (MemberId, Addr)> + '_ {
        self.members.iter()
    }
}

/// Where a client stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Created, not joined yet ([`Input::Join`]).
    Idle,
    /// Join sent, no welcome yet.
    Joining,
    /// Welcomed; asking these peers (then the server) for the state.
    Bootstrapping { peers: Vec<Addr>, deadline: Duration },
    /// A member with the state.
    Member,
    /// Left gracefully.
    Left,
    /// Declared dead by the server (told by its own `Died` event).
    Excluded,
}

/// One member's side of the central registry.
#[derive(Debug, Clone)]
pub struct Client {
    cfg: Config,
    consistency: Consistency,
    id: MemberId,
    addr: Addr,
    server: Addr,
    phase: Phase,
    /// The sequence number of `log[0]`.
    base: u64,
    log: Vec<Event>,
    /// Events that arrived ahead of a gap.
    pending: BTreeMap<u64, Event>,
    gap_since: Option<Duration>,
    /// The welcome's `next`: the state must reach at least this far.
    welcome_next: u64,
    /// The server was told (an `Ack`) that this member's state reached `welcome_next`: from
    /// then on it may be offered to newcomers as a bootstrap peer.
    told_caught_up: bool,
    /// The stream's length the last fallback `Sync` announced.
    synced: u64,
    members: Roster,
    elections: BTreeMap<String, MemberId>,
    /// `get_election_result` calls waiting, with their deadlines.
    waits: BTreeMap<String, Duration>,
    last_server: Duration,
    /// The time of the input being handled (stamps messages to the server).
    now_hint: Duration,
    next_gossip: Duration,
    rng: u64,
    out: VecDeque<Action<Message>>,
}

impl Client {
    /// The client of member `id`, listening at `addr`, of the pool served at `server`. The
    /// central implementation serves every consistency model (one ordered stream).
    pub fn new(id: MemberId, addr: Addr, server: Addr, cfg: Config, consistency: Consistency, seed: u64) -> Client {
        Client {
            cfg,
            consistency,
            id,
            addr,
            server,
            phase: Phase::Idle,
            base: 0,
            log: Vec::new(),
            pending: BTreeMap::new(),
            gap_since: None,
            welcome_next: 0,
            told_caught_up: false,
            synced: 0,
            members: Roster::default(),
            elections: BTreeMap::new(),
            waits: BTreeMap::new(),
            last_server: Duration::ZERO,
            now_hint: Duration::ZERO,
            next_gossip: Duration::ZERO,
            rng: seed ^ id,
            out: VecDeque::new(),
        }
    }

    pub fn id(&self) -> MemberId {
        self.id
    }

    pub fn addr(&self) -> Addr {
        self.addr
    }

    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The live members it knows, in join order (itself included once it has the state).
    pub fn members(&self) -> impl Iterator<Item = (MemberId, Addr)> + '_ {
        self.members.iter()
    }

    /// The perceived pool size.
    pub fn pool_size(&self) -> usize {
        self.members.len()
    }

    /// The winner of `name` as far as this member knows.
    pub fn election(&self, name: &str) -> Option<MemberId> {
        self.elections.get(name).copied()
    }

    /// The stream it holds: the sequence number of its first event, and the events.
    pub fn log(&self) -> (u64, &[Event]) {
        (self.base, &self.log)
    }

    /// The sequence number of the next event it expects.
    pub fn next_seq(&self) -> u64 {
        self.base + self.log.len() as u64
    }

    fn has_state(&self) -> bool {
        matches!(self.phase, Phase::Member | Phase::Left | Phase::Excluded)
    }

    fn active(&self) -> bool {
        !matches!(self.phase, Phase::Idle | Phase::Left | Phase::Excluded)
    }

    fn send(&mut self, to: Addr, msg: Message) {
        if to == self.server {
            self.last_server = self.now_hint;
        }
        self.out.push_back(Action::Send { to, msg });
    }

    /// [`Input::Join`].
    fn join(&mut self, now: Duration) {
        if self.phase != Phase::Idle {
            return;
        }
        self.now_hint = now;
        self.phase = Phase::Joining;
        self.next_gossip = now + self.cfg.gossip_interval;
        let (id, addr) = (self.id, self.addr);
        self.send(self.server, Message::Join { id, addr });
    }

    /// [`Input::Leave`].
    fn leave(&mut self, now: Duration) {
        if self.active() {
            self.now_hint = now;
            self.send(self.server, Message::Leave);
            self.phase = Phase::Left;
            self.waits.clear();
        }
    }

    /// [`Input::MaybeDead`]: the server checks.
    fn maybe_dead(&mut self, suspect: MemberId, now: Duration) {
        if self.active() {
            self.now_hint = now;
            self.send(self.server, Message::MaybeDead { suspect });
        }
    }

    /// [`Input::Elect`].
    fn elect(&mut self, name: &str, now: Duration) -> Result<(), PartOff> {
        if self.consistency.elections.is_none() {
            return Err(PartOff);
        }
        if self.active() {
            self.now_hint = now;
            self.send(self.server, Message::Elect { name: name.to_string() });
        }
        Ok(())
    }

    /// [`Input::GetElectionResult`].
    fn get_election_result(&mut self, name: &str, timeout: Duration, now: Duration) -> Result<(), PartOff> {
        if self.consistency.elections.is_none() {
            return Err(PartOff);
        }
        if let Some(&w) = self.elections.get(name) {
            self.out.push_back(Action::ElectionResult { name: name.to_string(), winner: Some(w) });
            return Ok(());
        }
        if !self.active() {
            self.out.push_back(Action::ElectionResult { name: name.to_string(), winner: None });
            return Ok(());
        }
        self.now_hint = now;
        self.waits.insert(name.to_string(), now + timeout);
        self.send(self.server, Message::GetElection { name: name.to_string() });
        Ok(())
    }

    fn deliver(&mut self, e: Event) {
        let on = match e {
            Event::Elected { .. } => self.consistency.elections.is_some(),
            _ => self.consistency.joins.is_some(),
        };
        if on {
            self.out.push_back(Action::Deliver(e));
        }
    }

    fn apply(&mut self, e: &Event) {
        match e {
            Event::Joined { id, addr } => self.members.push(*id, *addr),
            Event::Left { id } | Event::Died { id } => {
                self.members.remove(*id);
                self.elections.retain(|_, w| w != id);
                if *id == self.id && matches!(e, Event::Died { .. }) && self.phase == Phase::Member {
                    self.phase = Phase::Excluded;
                    self.waits.clear();
                }
            }
            Event::Elected { name, winner } => {
                self.elections.insert(name.clone(), *winner);
                if self.waits.remove(name).is_some() {
                    self.out.push_back(Action::ElectionResult { name: name.clone(), winner: Some(*winner) });
                }
            }
        }
        self.deliver(e.clone());
    }

    fn install(&mut self, s: Snapshot, now: Duration) {
        self.base = s.next;
        self.log.clear();
        self.members.reserve(s.members.len());
        for (id, addr) in s.members {
            self.apply(&Event::Joined { id, addr });
        }
        for (name, winner) in s.elections {
            self.apply(&Event::Elected { name, winner });
        }
        self.phase = Phase::Member;
        self.pending = self.pending.split_off(&s.next);
        self.drain_pending(now);
        self.trim();
        if self.next_seq() < self.welcome_next
            && !self.pending.contains_key(&self.next_seq())
            && !self.cfg.dissemination.gossips()
        {
            // A peer's state older than our join: fetch the events in between at once (gossip
            // brings them anyway).
            let from = self.next_seq();
            let to = self.pending.keys().next().copied().unwrap_or(self.welcome_next).min(self.welcome_next);
            self.send(self.server, Message::Fetch { from, to });
        }
    }

    /// Accepts consecutive events numbered from `first`; returns the range appended.
    fn receive(&mut self, first: u64, events: Vec<Event>, now: Duration) {
        if !self.active() {
            return;
        }
        let before = self.next_seq();
        for (i, e) in events.into_iter().enumerate() {
            let seq = first + i as u64;
            if !self.has_state() || seq > self.next_seq() {
                self.pending.insert(seq, e);
            } else if seq == self.next_seq() {
                self.log.push(e.clone());
                self.apply(&e);
            }
        }
        if self.has_state() {
            self.drain_pending(now);
            self.forward(before);
            self.trim();
        }
    }

    /// Purges old events: gossip keeps the last [`Config::log_keep`] to serve its peers, the
    /// other strategies none (the state is enough for peer bootstrap).
    fn trim(&mut self) {
        let keep = if self.cfg.dissemination.gossips() { self.cfg.log_keep } else { 0 };
        if self.log.len() > keep {
            let k = self.log.len() - keep;
            self.log.drain(..k);
            self.base += k as u64;
        }
    }

    fn drain_pending(&mut self, now: Duration) {
        while let Some(e) = self.pending.remove(&self.next_seq()) {
            self.log.push(e.clone());
            self.apply(&e);
        }
        let next = self.next_seq();
        self.pending = self.pending.split_off(&next);
        if self.pending.is_empty() {
            self.gap_since = None;
        } else if self.gap_since.is_none() {
            self.gap_since = Some(now);
        }
        if !self.told_caught_up
            && self.cfg.dissemination.gossips()
            && self.phase == Phase::Member
            && self.welcome_next > 0
            && next >= self.welcome_next
        {
            // Once only (gossip): the server offers as bootstrap peers only members whose state
            // reached their own join (a member still behind would hand newcomers a stale
            // state, and they would all catch up from the same few old members).
            self.told_caught_up = true;
            self.send(self.server, Message::Ack { next });
        }
    }

    /// Tree: passes the events from `before` on to this member's children.
    fn forward(&mut self, before: u64) {
        if self.cfg.dissemination != Dissemination::Tree || self.phase != Phase::Member {
            return;
        }
        let next = self.next_seq();
        if next <= before {
            return;
        }
        let Some(pos) = self.members.rank(self.id) else { return };
        let events = self.log[(before - self.base) as usize..].to_vec();
        let children: Vec<Addr> =
            binomial_children(pos + 1, self.members.len() + 1).map(|r| self.members.select(r - 1).1).collect();
        for a in children {
            self.send(a, Message::Events { first: before, events: events.clone() });
        }
    }

    /// Gossip: the events held beyond a gap travel too (a member seeded by the server may
    /// hold the only copies while its gap is being filled), one run per message.
    fn send_pending(&mut self, to: Addr) {
        let mut runs: Vec<(u64, Vec<Event>)> = Vec::new();
        // At most a gossip message's worth of them.
        for (&seq, e) in self.pending.iter().take(1024) {
            match runs.last_mut() {
                Some((first, evs)) if *first + evs.len() as u64 == seq => evs.push(e.clone()),
                _ => runs.push((seq, vec![e.clone()])),
            }
        }
        for (first, events) in runs {
            self.send(to, Message::Events { first, events });
        }
    }

    fn events_for(&self, from: u64) -> Option<(u64, Vec<Event>)> {
        let next = self.next_seq();
        if from >= self.base && from < next {
            Some((from, self.log[(from - self.base) as usize..].to_vec()))
        } else {
            None
        }
    }

    /// The driver could not reach `addr`.
    fn on_unreachable(&mut self, addr: Addr, now: Duration) {
        self.now_hint = now;
        if let Phase::Bootstrapping { peers, .. } = &mut self.phase {
            if peers.first() == Some(&addr) {
                peers.remove(0);
                self.ask_next_peer(now);
            }
        }
    }

    fn ask_next_peer(&mut self, now: Duration) {
        let Phase::Bootstrapping { peers, deadline } = &mut self.phase else { return };
        *deadline = now + self.cfg.bootstrap_timeout;
        let to = peers.first().copied().unwrap_or(self.server);
        self.send(to, Message::BootstrapReq);
    }

    /// A message from the node listening at `from`.
    fn on_message(&mut self, from: Addr, msg: Message, now: Duration) {
        self.now_hint = now;
        if !self.active() {
            return;
        }
        match msg {
            Message::Welcome { next, snapshot, peers } => {
                if self.phase != Phase::Joining {
                    return;
                }
                self.welcome_next = next;
                match snapshot {
                    Some(s) => self.install(s, now),
                    None => {
                        self.phase = Phase::Bootstrapping { peers, deadline: now };
                        self.ask_next_peer(now);
                    }
                }
            }
            Message::Snapshot(s) => {
                if matches!(self.phase, Phase::Bootstrapping { .. }) {
                    self.install(s, now);
                    let next = self.next_seq();
                    self.send(self.server, Message::Ack { next });
                }
            }
            Message::BootstrapReq if self.phase == Phase::Member => {
                let s = Snapshot {
                    next: self.next_seq(),
                    members: self.members.iter().collect(),
                    elections: self.elections.iter().map(|(n, w)| (n.clone(), *w)).collect(),
                };
                self.send(from, Message::Snapshot(s));
            }
            Message::Events { first, events } => self.receive(first, events, now),
            Message::Ping => {
                let next = self.next_seq();
                self.send(self.server, Message::Ack { next });
            }
            Message::Sync { next } => {
                if !self.has_state() {
                    return;
                }
                let mine = self.next_seq();
                self.send(self.server, Message::Ack { next: mine });
                let announced = std::mem::replace(&mut self.synced, next);
                if announced > mine && next > mine && self.pending.is_empty() && !self.cfg.dissemination.gossips() {
                    // Events the previous `Sync` announced, a whole fallback interval ago,
                    // never came (sent by a registry that died before writing them; the one
                    // that took over believes they were sent): fetch them. (Events merely
                    // on their way are not fetched twice; with a gap, the gap's own fetch
                    // does it; gossip brings them anyway.)
                    self.send(self.server, Message::Fetch { from: mine, to: next });
                }
            }
            Message::ElectionResult { name, winner: Some(w) } => {
                self.waits.remove(&name);
                self.out.push_back(Action::ElectionResult { name, winner: Some(w) });
            }
            Message::Gossip { next } => {
                if self.phase != Phase::Member {
                    return;
                }
                let mine = self.next_seq();
                let (first, events) = self.events_for(next).unwrap_or((next, Vec::new()));
                self.send(from, Message::GossipReply { next: mine, first, events });
                self.send_pending(from);
            }
            Message::GossipReply { next, first, events } => {
                self.receive(first, events, now);
                if let Some((first, events)) = self.events_for(next) {
                    self.send(from, Message::Events { first, events });
                }
                self.send_pending(from);
            }
            Message::Fetch { from: first, to } => {
                if let Some((first, mut events)) = self.events_for(first) {
                    events.truncate(to.saturating_sub(first).min(usize::MAX as u64) as usize);
                    if !events.is_empty() {
                        self.send(from, Message::Events { first, events });
                    }
                }
            }
            _ => {}
        }
    }

    /// How long a gap in the stream may stay open before the member fetches it from the
    /// server. Gossip fills gaps itself, so it waits a whole fallback interval: a gap that
    /// old is one the gossip cannot fill (its events were purged from the peers' logs), and
    /// the fallback does not fill it either (the server sent those events, as a seeding push
    /// beyond the gap, and counts them as sent).
    fn gap_limit(&self) -> Duration {
        if self.cfg.dissemination.gossips() {
            self.cfg.fallback_interval
        } else {
            self.cfg.gap_timeout
        }
    }

    /// When [`tick`](Self::tick) must be called next.
    fn next_deadline(&self) -> Option<Duration> {
        if !self.active() {
            return None;
        }
        let mut t = self.last_server + self.cfg.heartbeat_interval;
        if let Phase::Bootstrapping { deadline, .. } = self.phase {
            t = t.min(deadline);
        }
        if let Some(g) = self.gap_since {
            t = t.min(g + self.gap_limit());
        }
        if self.cfg.dissemination.gossips() && self.phase == Phase::Member {
            t = t.min(self.next_gossip);
        }
        if let Some(&w) = self.waits.values().min() {
            t = t.min(w);
        }
        Some(t)
    }

    /// Runs what is due.
    fn tick(&mut self, now: Duration) {
        if !self.active() {
            return;
        }
        self.now_hint = now;
        if let Phase::Bootstrapping { peers, deadline } = &mut self.phase {
            if *deadline <= now {
                if !peers.is_empty() {
                    peers.remove(0);
                }
                self.ask_next_peer(now);
            }
        }
        if self.gap_since.is_some_and(|g| g + self.gap_limit() <= now) {
            self.gap_since = Some(now);
            let from = self.next_seq();
            let to = self.pending.keys().next().copied().unwrap_or(from);
            self.send(self.server, Message::Fetch { from, to });
        }
        if self.cfg.dissemination.gossips() && self.phase == Phase::Member && now >= self.next_gossip {
            self.next_gossip = next_period(self.next_gossip, self.cfg.gossip_interval, now);
            let me = self.members.rank(self.id);
            let others = self.members.len().saturating_sub(usize::from(me.is_some()));
            if others > 0 {
                let mut i = below(&mut self.rng, others);
                if me.is_some_and(|p| i >= p) {
                    i += 1;
                }
                let to = self.members.select(i).1;
                let next = self.next_seq();
                self.send(to, Message::Gossip { next });
            }
        }
        let expired: Vec<String> = self.waits.iter().filter(|(_, &d)| d <= now).map(|(n, _)| n.clone()).collect();
        for name in expired {
            self.waits.remove(&name);
            self.out.push_back(Action::ElectionResult { name, winner: None });
        }
        if self.last_server + self.cfg.heartbeat_interval <= now {
            if self.phase == Phase::Joining {
                // No welcome yet: the join (or its welcome) was lost with a registry that
                // died; its replacement welcomes a join it already took again.
                let (id, addr) = (self.id, self.addr);
                self.send(self.server, Message::Join { id, addr });
            } else {
                let next = self.next_seq();
                self.send(self.server, Message::Ack { next });
            }
        }
    }
}

impl Machine for Client {
    type Input = Input<Message>;
    type Output = Action<Message>;
    type Rejected = PartOff;

    fn handle_input(&mut self, now: Time, input: Input<Message>) -> Result<(), PartOff> {
        match input {
            Input::Join => self.join(now),
            Input::Leave => self.leave(now),
            Input::MaybeDead(suspect) => self.maybe_dead(suspect, now),
            Input::Elect(name) => return self.elect(&name, now),
            Input::GetElectionResult { name, timeout } => return self.get_election_result(&name, timeout, now),
            Input::Message { from, msg } => self.on_message(from, msg, now),
            Input::Unreachable(addr) => self.on_unreachable(addr, now),
        }
        Ok(())
    }

    /// Bootstrap and gap time-outs, gossip, election waits, the heartbeat to the server.
    fn handle_timeout(&mut self, now: Time) {
        self.tick(now);
    }

    fn poll_output(&mut self) -> Option<Action<Message>> {
        super::pop_action(&mut self.out)
    }

    /// `None` before [`Input::Join`] and once gone.
    fn poll_timeout(&self) -> Option<Time> {
        self.next_deadline()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testnet::{addr, ms, Core, Net};
    use super::super::wire::arb;
    use super::super::JoinLeave;
    use super::*;
    use proptest::prelude::*;

    /// Node 0 is the server, the others clients.
    #[derive(Debug)]
    enum CNode {
        Server(Box<Server>),
        Client(Box<Client>),
    }

    impl Machine for CNode {
        type Input = Input<Message>;
        type Output = Action<Message>;
        type Rejected = PartOff;
        fn handle_input(&mut self, now: Time, input: Input<Message>) -> Result<(), PartOff> {
            match self {
                CNode::Server(s) => {
                    let input = match input {
                        Input::Message { from, msg } => ServerInput::Message { from, msg },
                        Input::Unreachable(a) => ServerInput::Unreachable(a),
                        other => panic!("a member's input for the server: {other:?}"),
                    };
                    s.handle_input(now, input).map_err(|never| match never {})
                }
                CNode::Client(c) => c.handle_input(now, input),
            }
        }
        fn handle_timeout(&mut self, now: Time) {
            match self {
                CNode::Server(s) => s.handle_timeout(now),
                CNode::Client(c) => c.handle_timeout(now),
            }
        }
        fn poll_output(&mut self) -> Option<Action<Message>> {
            match self {
                CNode::Server(s) => s.poll_output(),
                CNode::Client(c) => c.poll_output(),
            }
        }
        fn poll_timeout(&self) -> Option<Time> {
            match self {
                CNode::Server(s) => s.poll_timeout(),
                CNode::Client(c) => c.poll_timeout(),
            }
        }
    }

    impl Core for CNode {
        type Msg = Message;
        fn message(&self, from: Addr, msg: Message) -> Input<Message> {
            Input::Message { from, msg }
        }
        fn unreachable(&self, to: Addr) -> Input<Message> {
            Input::Unreachable(to)
        }
        fn wire(msg: &Message) -> Message {
            decode(&encode(msg)).expect("what is encoded decodes")
        }
    }

    fn test_cfg(d: Dissemination) -> Config {
        Config {
            heartbeat_interval: ms(1000),
            lease: ms(3000),
            ping_timeout: ms(1000),
            fallback_interval: ms(2000),
            gossip_interval: ms(200),
            ..Config::new(d)
        }
    }

    fn id(i: usize) -> MemberId {
        0x1000 + i as u64 * 7
    }

    /// A server and `n` clients, not joined yet.
    fn pool(n: usize, cfg: Config, consistency: Consistency, seed: u64) -> Net<CNode> {
        let mut net = Net::new(n + 1, seed);
        let mut s = Server::new(cfg, seed);
        s.handle_input(Duration::ZERO, ServerInput::Start).unwrap();
        net.nodes[0] = Some(CNode::Server(Box::new(s)));
        for i in 1..=n {
            let c = Client::new(id(i), addr(i), addr(0), cfg, consistency, seed.wrapping_add(i as u64));
            net.nodes[i] = Some(CNode::Client(Box::new(c)));
        }
        net
    }

    fn client(net: &Net<CNode>, i: usize) -> &Client {
        match net.nodes[i].as_ref() {
            Some(CNode::Client(c)) => c,
            _ => panic!("node {i} is not a client"),
        }
    }

    fn server(net: &Net<CNode>) -> &Server {
        match net.nodes[0].as_ref() {
            Some(CNode::Server(s)) => s,
            _ => panic!("node 0 is the server"),
        }
    }

    fn on_client(net: &mut Net<CNode>, i: usize, f: impl FnOnce(&mut Client, Duration)) {
        net.with(i, |c, now| match c {
            CNode::Client(c) => f(c, now),
            CNode::Server(_) => panic!("node {i} is the server"),
        });
    }

    fn join_all(net: &mut Net<CNode>, n: usize, spread_ms: u64, seed: u64) {
        let mut s = seed;
        let mut times: Vec<(u64, usize)> = (1..=n).map(|i| (below(&mut s, spread_ms as usize + 1) as u64, i)).collect();
        times.sort();
        for (t, i) in times {
            net.run_until(ms(t));
            on_client(net, i, |c, now| c.handle_input(now, Input::Join).unwrap());
        }
    }

    /// Every live client holds the server's stream from its join on, and the same members in
    /// the same order.
    fn assert_consistent(net: &Net<CNode>, n: usize) {
        let s = server(net);
        for i in 1..=n {
            if net.crashed[i] || client(net, i).phase() != &Phase::Member {
                continue;
            }
            let c = client(net, i);
            let (base, log) = c.log();
            assert_eq!(c.next_seq(), s.log().len() as u64, "client {i} is behind");
            assert_eq!(log, &s.log()[base as usize..], "client {i}'s stream differs");
            let ids: Vec<MemberId> = c.members().map(|m| m.0).collect();
            assert_eq!(ids, s.members(), "client {i}'s members differ");
        }
    }

    #[test]
    fn joins_reach_everyone_in_the_same_order_with_every_strategy() {
        let n = 30;
        for d in Dissemination::ALL {
            let mut net = pool(n, test_cfg(d), Consistency::STRONG, 7);
            join_all(&mut net, n, 1500, 3);
            net.run_until(ms(8000));
            let order: Vec<MemberId> = server(&net).members().to_vec();
            assert_eq!(order.len(), n);
            for i in 1..=n {
                assert_eq!(client(&net, i).pool_size(), n, "{d}: client {i}");
                // A newcomer is told every earlier join, then the later ones: the same order
                // everywhere.
                assert_eq!(net.joins_seen(i), order, "{d}: client {i}");
            }
            assert_consistent(&net, n);
        }
    }

    #[test]
    fn a_silent_crash_is_found_by_the_lease_and_told_to_everyone() {
        for d in [Dissemination::Serial, Dissemination::Tree, Dissemination::Adaptive] {
            let n = 12;
            let mut net = pool(n, test_cfg(d), Consistency::STRONG, 11);
            net.refuse = false;
            join_all(&mut net, n, 200, 5);
            net.run_until(ms(2000));
            net.crash(4);
            net.run_until(ms(15_000));
            let died = Event::Died { id: id(4) };
            for i in (1..=n).filter(|&i| i != 4) {
                let t = net.told(i, &died).unwrap_or_else(|| panic!("{d}: client {i} not told"));
                // Lease 3 s (checked every 0.75 s) plus the ping's 1 s, plus dissemination.
                assert!(t <= ms(2000 + 3000 + 750 + 1000 + 2500), "{d}: {t:?}");
                assert_eq!(client(&net, i).pool_size(), n - 1);
            }
            assert_consistent(&net, n);
        }
    }

    #[test]
    fn maybe_dead_and_refused_connections_find_a_crash_quickly() {
        let n = 8;
        let mut net = pool(n, test_cfg(Dissemination::Serial), Consistency::STRONG, 2);
        net.refuse = false;
        join_all(&mut net, n, 100, 1);
        net.run_until(ms(1000));
        net.crash(3);
        on_client(&mut net, 5, |c, now| c.handle_input(now, Input::MaybeDead(id(3))).unwrap());
        net.run_until(ms(2100));
        assert!(net.told(1, &Event::Died { id: id(3) }).is_some());
        // A refused connection is a death at once (the next fallback sync finds it).
        net.refuse = true;
        net.crash(6);
        net.run_until(ms(4500));
        assert!(net.told(1, &Event::Died { id: id(6) }).is_some_and(|t| t <= ms(4100)));
    }

    #[test]
    fn the_winner_is_replaced_when_it_dies_or_leaves() {
        let n = 6;
        let mut net = pool(n, test_cfg(Dissemination::Tree), Consistency::STRONG, 4);
        join_all(&mut net, n, 100, 2);
        net.run_until(ms(500));
        for i in [2, 3, 4] {
            on_client(&mut net, i, |c, now| c.handle_input(now, Input::Elect("master".into())).unwrap());
            net.run_until(net.now + ms(50));
        }
        net.run_until(ms(1000));
        for i in [2, 3, 4] {
            assert_eq!(net.results[i].last().map(|r| r.2), Some(Some(id(2))), "client {i}");
        }
        for i in 1..=n {
            assert_eq!(client(&net, i).election("master"), Some(id(2)));
        }
        net.crash(2);
        net.run_until(ms(9000));
        on_client(&mut net, 3, |c, now| c.handle_input(now, Input::Leave).unwrap());
        net.run_until(ms(10_000));
        for i in [1, 4, 5, 6] {
            assert!(net.told(i, &Event::Elected { name: "master".into(), winner: id(3) }).is_some(), "{i}");
            assert!(net.told(i, &Event::Left { id: id(3) }).is_some());
            assert_eq!(client(&net, i).election("master"), Some(id(4)), "{i}");
        }
        // The last candidate leaves: the election is vacant until someone stands.
        on_client(&mut net, 4, |c, now| c.handle_input(now, Input::Leave).unwrap());
        net.run_until(ms(11_000));
        assert_eq!(client(&net, 1).election("master"), None);
        on_client(&mut net, 1, |c, now| {
            c.handle_input(now, Input::GetElectionResult { name: "master".into(), timeout: ms(2000) }).unwrap()
        });
        net.run_until(ms(12_000));
        on_client(&mut net, 5, |c, now| c.handle_input(now, Input::Elect("master".into())).unwrap());
        net.run_until(ms(12_500));
        assert_eq!(net.results[1].last().map(|r| (r.0 > ms(12_000), r.2)), Some((true, Some(id(5)))));
        on_client(&mut net, 1, |c, now| {
            c.handle_input(now, Input::GetElectionResult { name: "other".into(), timeout: ms(1000) }).unwrap()
        });
        net.run_until(ms(14_000));
        assert_eq!(net.results[1].last().map(|r| (r.1.as_str(), r.2)), Some(("other", None)));
    }

    #[test]
    fn a_join_sent_again_is_welcomed_again_at_its_own_place_in_the_stream() {
        let n = 5;
        let mut net = pool(n, test_cfg(Dissemination::Serial), Consistency::STRONG, 4);
        join_all(&mut net, n, 50, 4);
        net.run_until(ms(200));
        on_client(&mut net, 2, |c, now| c.handle_input(now, Input::Elect("master".into())).unwrap());
        net.run_until(ms(300));
        on_client(&mut net, 2, |c, now| c.handle_input(now, Input::Leave).unwrap());
        on_client(&mut net, 3, |c, now| c.handle_input(now, Input::Leave).unwrap());
        net.run_until(ms(400));
        let s = server(&net);
        // The state replayed to the end is the state kept.
        assert_eq!(s.snapshot_at(s.log().len() as u64), s.snapshot());
        // Member 1 asks again: the state right after its own join, not the current one.
        let before = net.messages;
        net.with(0, |srv, now| {
            srv.handle_input(now, Input::Message { from: addr(1), msg: Message::Join { id: id(1), addr: addr(1) } })
                .unwrap()
        });
        assert_eq!(net.messages, before + 1);
        let s = server(&net);
        let joined = s.log().iter().position(|e| *e == Event::Joined { id: id(1), addr: addr(1) }).unwrap() as u64;
        let at = s.snapshot_at(joined + 1);
        assert_eq!(at.next, joined + 1);
        assert!(at.members.contains(&(id(1), addr(1))));
        assert!(at.members.len() <= n && at.elections.is_empty());
        // A foreign id at a known address, or a known id at another address: ignored.
        net.with(0, |srv, now| {
            srv.handle_input(now, Input::Message { from: addr(9), msg: Message::Join { id: id(1), addr: addr(9) } })
                .unwrap()
        });
        assert_eq!(net.messages, before + 1);
        assert_eq!(server(&net).members().len(), n - 2);
    }

    #[test]
    fn a_member_told_of_a_longer_stream_fetches_its_tail() {
        let cfg = test_cfg(Dissemination::Serial);
        let mut c = Client::new(id(1), addr(1), addr(0), cfg, Consistency::STRONG, 1);
        c.handle_input(ms(0), Input::Join).unwrap();
        let snapshot = Snapshot { next: 1, members: vec![(id(1), addr(1))], elections: vec![] };
        c.handle_input(
            ms(1),
            Input::Message {
                from: addr(0),
                msg: Message::Welcome { next: 1, snapshot: Some(snapshot), peers: vec![] },
            },
        )
        .unwrap();
        while c.poll_output().is_some() {}
        // The registry's replica believes events 1 and 2 were sent (a leader died before
        // writing them): the fallback's length tells the member; still missing at the next
        // fallback, they are fetched (at the first they may be on their way).
        let fetches = |c: &mut Client| -> Vec<Message> {
            std::iter::from_fn(|| c.poll_output())
                .filter_map(|a| match a {
                    Action::Send { msg: m @ Message::Fetch { .. }, .. } => Some(m),
                    _ => None,
                })
                .collect()
        };
        c.handle_input(ms(2), Input::Message { from: addr(0), msg: Message::Sync { next: 3 } }).unwrap();
        assert_eq!(fetches(&mut c), []);
        c.handle_input(ms(2002), Input::Message { from: addr(0), msg: Message::Sync { next: 4 } }).unwrap();
        assert_eq!(fetches(&mut c), [Message::Fetch { from: 1, to: 4 }]);
        // Up to date: nothing to fetch.
        c.handle_input(ms(3), Input::Message { from: addr(0), msg: Message::Sync { next: 1 } }).unwrap();
        assert!(std::iter::from_fn(|| c.poll_output())
            .all(|a| !matches!(a, Action::Send { msg: Message::Fetch { .. }, .. })));
    }

    #[test]
    fn a_gossiping_member_fetches_a_gap_no_peer_filled_after_a_fallback_interval() {
        // Seen at 10 000 nodes with adaptive gossip: a seeding push beyond a member's gap,
        // whose events its peers had already purged; the server counts them as sent, so the
        // fallback never resends them, and the member never saw everyone.
        let cfg = test_cfg(Dissemination::Adaptive);
        let mut c = Client::new(id(1), addr(1), addr(0), cfg, Consistency::STRONG, 1);
        c.handle_input(ms(0), Input::Join).unwrap();
        let snapshot = Snapshot { next: 1, members: vec![(id(1), addr(1))], elections: vec![] };
        c.handle_input(
            ms(1),
            Input::Message {
                from: addr(0),
                msg: Message::Welcome { next: 1, snapshot: Some(snapshot), peers: vec![] },
            },
        )
        .unwrap();
        while c.poll_output().is_some() {}
        let join = |k: usize| Event::Joined { id: id(k), addr: addr(k) };
        c.handle_input(
            ms(10),
            Input::Message { from: addr(0), msg: Message::Events { first: 3, events: vec![join(3)] } },
        )
        .unwrap();
        let fetches = |c: &mut Client, now: Duration| -> Vec<Message> {
            c.handle_timeout(now);
            std::iter::from_fn(|| c.poll_output())
                .filter_map(|a| match a {
                    Action::Send { msg: m @ Message::Fetch { .. }, .. } => Some(m),
                    _ => None,
                })
                .collect()
        };
        // Gossip may still fill it: nothing fetched before a fallback interval.
        assert_eq!(fetches(&mut c, ms(1500)), []);
        assert!(c.poll_timeout().is_some_and(|d| d <= ms(2010)));
        assert_eq!(fetches(&mut c, ms(2010)), [Message::Fetch { from: 1, to: 3 }]);
        c.handle_input(
            ms(2020),
            Input::Message { from: addr(0), msg: Message::Events { first: 1, events: vec![join(2), join(4)] } },
        )
        .unwrap();
        assert_eq!(c.pool_size(), 4, "the gap filled, the held event delivered");
    }

    #[test]
    fn the_roster_ranks_and_selects_live_members_in_join_order() {
        let mut r = Roster::default();
        let mut model: Vec<MemberId> = Vec::new();
        let mut addrs = std::collections::HashMap::new();
        let mut s = 5u64;
        for step in 0..400u64 {
            if below(&mut s, 3) > 0 || model.is_empty() {
                // Now and then an IPv6 address, or an id that was removed coming back.
                let a: Addr =
                    if step % 5 == 0 { format!("[::1]:{step}").parse().unwrap() } else { addr(step as usize) };
                let id = if step % 11 == 0 && !model.contains(&(step / 2)) { step / 2 } else { step };
                r.push(id, a);
                if !model.contains(&id) {
                    model.push(id);
                    addrs.insert(id, a);
                }
            } else {
                let id = model.remove(below(&mut s, model.len()));
                r.remove(id);
            }
            assert_eq!(r.len(), model.len());
            for (k, &id) in model.iter().enumerate().step_by(7) {
                assert_eq!(r.rank(id), Some(k));
                assert_eq!(r.select(k), (id, addrs[&id]));
            }
        }
        assert_eq!(r.iter().map(|m| m.0).collect::<Vec<_>>(), model);
        assert!(r.iter().all(|(id, a)| addrs[&id] == a));
        assert_eq!(r.rank(u64::MAX), None);
    }

    #[test]
    fn parts_switched_off_are_not_delivered() {
        let n = 4;
        let off = Consistency { joins: None, elections: None };
        let mut net = pool(n, test_cfg(Dissemination::Serial), off, 1);
        join_all(&mut net, n, 10, 1);
        net.run_until(ms(1000));
        assert!(net.delivered.iter().all(|d| d.is_empty()));
        assert_eq!(client(&net, 1).pool_size(), n);
        on_client(&mut net, 1, |c, now| assert_eq!(c.handle_input(now, Input::Elect("x".into())), Err(PartOff)));
        let joins_only = Consistency { joins: Some(JoinLeave::Unreliable), elections: None };
        let mut net = pool(n, test_cfg(Dissemination::Serial), joins_only, 1);
        join_all(&mut net, n, 10, 1);
        net.run_until(ms(1000));
        assert_eq!(net.joins_seen(2).len(), n);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
            if let Ok(m) = decode(&bytes) {
                prop_assert_eq!(decode(&encode(&m)), Ok(m));
            }
        }

        #[test]
        fn messages_roundtrip(m in arb_message()) {
            prop_assert_eq!(decode(&encode(&m)), Ok(m.clone()));
        }
    }

    fn arb_snapshot() -> impl Strategy<Value = Snapshot> {
        (
            any::<u64>(),
            proptest::collection::vec((any::<u64>(), arb::addr()), 0..5),
            proptest::collection::vec((arb::name(), any::<u64>()), 0..3),
        )
            .prop_map(|(next, members, elections)| Snapshot { next, members, elections })
    }

    fn arb_message() -> impl Strategy<Value = Message> {
        let events = || proptest::collection::vec(arb::event(), 0..5);
        prop_oneof![
            (any::<u64>(), arb::addr()).prop_map(|(id, addr)| Message::Join { id, addr }),
            Just(Message::Leave),
            any::<u64>().prop_map(|next| Message::Ack { next }),
            any::<u64>().prop_map(|suspect| Message::MaybeDead { suspect }),
            arb::name().prop_map(|name| Message::Elect { name }),
            arb::name().prop_map(|name| Message::GetElection { name }),
            (any::<u64>(), any::<u64>()).prop_map(|(from, to)| Message::Fetch { from, to }),
            (any::<u64>(), proptest::option::of(arb_snapshot()), proptest::collection::vec(arb::addr(), 0..4))
                .prop_map(|(next, snapshot, peers)| Message::Welcome { next, snapshot, peers }),
            (0u64..1 << 40, events()).prop_map(|(first, events)| Message::Events { first, events }),
            (arb::name(), proptest::option::of(any::<u64>()))
                .prop_map(|(name, winner)| Message::ElectionResult { name, winner }),
            Just(Message::Ping),
            any::<u64>().prop_map(|next| Message::Sync { next }),
            Just(Message::BootstrapReq),
            arb_snapshot().prop_map(Message::Snapshot),
            any::<u64>().prop_map(|next| Message::Gossip { next }),
            (any::<u64>(), 0u64..1 << 40, events()).prop_map(|(next, first, events)| Message::GossipReply {
                next,
                first,
                events
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]

        /// Random strategy, joins, crashes and leaves: every survivor ends with the server's
        /// stream and members, every crash is told as a death, every leave as a leave.
        #[test]
        fn survivors_converge_on_the_servers_stream(
            d in 0usize..5, n in 3usize..16, seed in any::<u64>(), crashes in 0usize..3, leaves in 0usize..3
        ) {
            let d = Dissemination::ALL[d];
            let mut net = pool(n, test_cfg(d), Consistency::STRONG, seed);
            net.refuse = seed % 2 == 0;
            join_all(&mut net, n, 1000, seed);
            let mut s = seed;
            let mut gone = BTreeMap::new();
            for k in 0..crashes + leaves {
                let i = 1 + below(&mut s, n);
                if gone.contains_key(&i) || gone.len() + 1 >= n {
                    continue;
                }
                net.run_until(ms(1500 + 700 * k as u64));
                if k < crashes {
                    net.crash(i);
                } else {
                    on_client(&mut net, i, |c, now| c.handle_input(now, Input::Leave).unwrap());
                }
                gone.insert(i, k < crashes);
                if k == 0 {
                    on_client(&mut net, 1 + (i % n), |c, now| { let _ = c.handle_input(now, Input::Elect("e".into())); });
                }
            }
            net.run_until(ms(15_000));
            assert_consistent(&net, n);
            for i in (1..=n).filter(|i| !gone.contains_key(i)) {
                prop_assert_eq!(client(&net, i).pool_size(), n - gone.len());
                for (&g, &crashed) in &gone {
                    let e = if crashed { Event::Died { id: id(g) } } else { Event::Left { id: id(g) } };
                    prop_assert!(net.told(i, &e).is_some(), "{} not told {:?}", i, e);
                }
            }
        }
    }
}
