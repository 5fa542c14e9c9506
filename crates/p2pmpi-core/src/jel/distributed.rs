//! The distributed JEL implementation (Drost et al. §5.2): no server, unreliable joins and
//! leaves, non-uniform elections.
//!
//! # The protocol
//!
//! * **Peer sampling** ([`Sampler`], after ARRG): every node keeps a small random *view* of
//!   other nodes. Every [`Config::interval`] it sends a random part of it, itself included,
//!   to a random member of the view ([`Message::Shuffle`]); the peer answers with a random
//!   part of its own and both merge, evicting the entries they sent first (Cyclon). Peers
//!   that answered are kept in a *fallback cache*, used when the view is empty or its
//!   members unreachable; the bootstrap addresses given at creation come last.
//! * **Gossip of members and elections.** Every interval a node also sends a random subset of
//!   the members it knows ([`MemberInfo`]: address, the member's own round counter
//!   `version`, its state and the witnesses of its silence) — half of them the latest news
//!   (members learned, gone or newly witnessed), half at random — its own entry and every election to a peer drawn
//!   from the sampler ([`Message::Exchange`]); the peer answers with the same and both merge. A member never heard of before is delivered as
//!   [`Event::Joined`], a `Left` or `Dead` entry as [`Event::Left`] / [`Event::Died`]
//!   (tombstones are final and keep spreading).
//! * **Deaths by witnesses.** An entry whose version did not grow for [`Config::timeout`] is
//!   suspected; the node probes the member ([`Message::Probe`]) — every round it looks at a
//!   few random entries and probes at most [`Config::probes_per_round`] stale ones, so that
//!   the cost stays O(1) per round in a large pool where many entries are stale without
//!   their member being dead. An exchange or shuffle that cannot reach a member counts as
//!   a failed probe. An answer refreshes the entry;
//!   no answer within [`Config::probe_timeout`] (or an unreachable address) and the node adds
//!   itself to the member's witnesses, which travel with the entry (unions at equal version,
//!   the newer version's set otherwise). With [`Config::witnesses`] witnesses (fewer in a
//!   pool too small for that) the member is pronounced dead.
//! * **Elections** ([`Node::elect`]): a node that needs the result of an unknown election
//!   declares itself the winner; merging two different winners keeps the lowest id, so one
//!   winner remains. When a winner leaves or dies the entry is dropped and the candidates
//!   declare themselves again.
//! * **Leaving** ([`Node::leave`]): the node's `Left` entry is sent to
//!   [`Config::leave_fanout`] peers, which gossip it on.
//!
//! See [the module docs](super) for the driving contract.

use super::wire::{put_addr, put_id, put_name, put_var, DecodeError, Reader};
use super::{
    below, next_period, Action, Addr, Consistency, Elections, Event, JoinLeave, MemberId, PartOff, Unsupported,
};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Duration;

/// The parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The period of the shuffle and of the gossip.
    pub interval: Duration,
    /// Entries of the peer-sampling view.
    pub view_size: usize,
    /// Entries sent in a shuffle (the sender included).
    pub shuffle_len: usize,
    /// Peers that answered, kept as a fallback.
    pub fallback_size: usize,
    /// Member entries sent in an exchange, besides the sender's own.
    pub exchange_len: usize,
    /// An entry whose version did not grow for this long is probed.
    pub timeout: Duration,
    /// A probe not answered within this makes the prober a witness.
    pub probe_timeout: Duration,
    /// Stale entries probed per round at most.
    pub probes_per_round: usize,
    /// Witnesses needed to pronounce a member dead.
    pub witnesses: usize,
    /// Peers told directly of a leave.
    pub leave_fanout: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            interval: Duration::from_secs(1),
            view_size: 20,
            shuffle_len: 8,
            fallback_size: 10,
            exchange_len: 20,
            timeout: Duration::from_secs(120),
            probe_timeout: Duration::from_secs(5),
            probes_per_round: 2,
            witnesses: 3,
            leave_fanout: 5,
        }
    }
}

/// A member's state as gossiped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    Alive,
    Left,
    Dead,
}

/// One member as gossiped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberInfo {
    pub id: MemberId,
    pub addr: Addr,
    /// The member's own round counter when last heard of.
    pub version: u64,
    pub state: State,
    /// Nodes that could not reach it since `version`.
    pub witnesses: Vec<MemberId>,
}

/// What the nodes send each other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message {
    /// Peer sampling: part of the sender's view, the sender first.
    Shuffle { entries: Vec<(MemberId, Addr)> },
    /// The answer: part of the receiver's view.
    ShuffleReply { entries: Vec<(MemberId, Addr)> },
    /// Members (the sender's own entry first) and elections; `reply`: an answer.
    Exchange { reply: bool, members: Vec<MemberInfo>, elections: Vec<(String, MemberId)> },
    /// Are you alive?
    Probe,
    /// Yes, at this version.
    ProbeAck { version: u64 },
    /// (observer → node) which members do you believe alive? Answered by any joined node,
    /// to anyone: `p2pmpi pool list` of a distributed pool, without joining it.
    ListReq,
    /// The answer: the members the node believes alive (itself included), by id.
    List { members: Vec<(MemberId, Addr)> },
}

impl Message {
    /// A short name for statistics.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Shuffle { .. } => "shuffle",
            Message::ShuffleReply { .. } => "shuffle_reply",
            Message::Exchange { .. } => "exchange",
            Message::Probe => "probe",
            Message::ProbeAck { .. } => "probe_ack",
            Message::ListReq => "list_req",
            Message::List { .. } => "list",
        }
    }

    /// How many member identities (with their addresses) the message carries.
    pub fn member_records(&self) -> usize {
        match self {
            Message::Shuffle { entries } | Message::ShuffleReply { entries } => entries.len(),
            Message::List { members } => members.len(),
            Message::Exchange { members, elections, .. } => members.len() + elections.len(),
            Message::Probe | Message::ProbeAck { .. } | Message::ListReq => 0,
        }
    }
}

fn put_entries(out: &mut Vec<u8>, entries: &[(MemberId, Addr)]) {
    put_var(out, entries.len() as u64);
    for (id, a) in entries {
        put_id(out, *id);
        put_addr(out, a);
    }
}

/// The compact binary form of a message.
pub fn encode(msg: &Message) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    encode_into(msg, &mut out);
    out
}

/// [`encode`], appending to `out`.
pub fn encode_into(msg: &Message, out: &mut Vec<u8>) {
    match msg {
        Message::Shuffle { entries } => {
            out.push(1);
            put_entries(out, entries);
        }
        Message::ShuffleReply { entries } => {
            out.push(2);
            put_entries(out, entries);
        }
        Message::Exchange { reply, members, elections } => {
            out.push(3);
            out.push(u8::from(*reply));
            put_var(out, members.len() as u64);
            for m in members {
                put_id(out, m.id);
                put_addr(out, &m.addr);
                put_var(out, m.version);
                out.push(match m.state {
                    State::Alive => 0,
                    State::Left => 1,
                    State::Dead => 2,
                });
                put_var(out, m.witnesses.len() as u64);
                for w in &m.witnesses {
                    put_id(out, *w);
                }
            }
            put_var(out, elections.len() as u64);
            for (n, w) in elections {
                put_name(out, n);
                put_id(out, *w);
            }
        }
        Message::Probe => out.push(4),
        Message::ProbeAck { version } => {
            out.push(5);
            put_var(out, *version);
        }
        Message::ListReq => out.push(6),
        Message::List { members } => {
            out.push(7);
            put_entries(out, members);
        }
    }
}

fn read_entries(r: &mut Reader<'_>) -> Result<Vec<(MemberId, Addr)>, DecodeError> {
    let n = r.len()?;
    let mut v = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let id = r.id()?;
        v.push((id, r.addr()?));
    }
    Ok(v)
}

/// Decodes one message ([`encode`]'s form); rejects anything malformed, never panics.
pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    let mut r = Reader::new(bytes);
    let msg = match r.u8()? {
        1 => Message::Shuffle { entries: read_entries(&mut r)? },
        2 => Message::ShuffleReply { entries: read_entries(&mut r)? },
        3 => {
            let reply = r.bool()?;
            let n = r.len()?;
            let mut members = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                let id = r.id()?;
                let addr = r.addr()?;
                let version = r.var()?;
                let state = match r.u8()? {
                    0 => State::Alive,
                    1 => State::Left,
                    2 => State::Dead,
                    _ => return Err(DecodeError::BadField("member state")),
                };
                let k = r.len()?;
                let mut witnesses = Vec::with_capacity(k.min(1024));
                for _ in 0..k {
                    witnesses.push(r.id()?);
                }
                members.push(MemberInfo { id, addr, version, state, witnesses });
            }
            let n = r.len()?;
            let mut elections = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                let name = r.name()?;
                elections.push((name, r.id()?));
            }
            Message::Exchange { reply, members, elections }
        }
        4 => Message::Probe,
        5 => Message::ProbeAck { version: r.var()? },
        6 => Message::ListReq,
        7 => Message::List { members: read_entries(&mut r)? },
        t => return Err(DecodeError::BadTag(t)),
    };
    r.finish()?;
    Ok(msg)
}

// ------------------------------------------------------------------------ peer sampling

/// The peer-sampling service: a random view refreshed by shuffles, a fallback cache of peers
/// that answered, and the bootstrap addresses.
#[derive(Debug, Clone)]
pub struct Sampler {
    me: (MemberId, Addr),
    view: Vec<(MemberId, Addr)>,
    fallback: VecDeque<(MemberId, Addr)>,
    bootstrap: Vec<Addr>,
    next_bootstrap: usize,
    /// The entries sent in the last shuffle (evicted first when the answer comes).
    sent: Vec<MemberId>,
    view_size: usize,
    fallback_size: usize,
}

impl Sampler {
    fn new(me: (MemberId, Addr), bootstrap: Vec<Addr>, cfg: &Config) -> Sampler {
        Sampler {
            me,
            view: Vec::new(),
            fallback: VecDeque::new(),
            bootstrap: bootstrap.into_iter().filter(|a| *a != me.1).collect(),
            next_bootstrap: 0,
            sent: Vec::new(),
            view_size: cfg.view_size.max(1),
            fallback_size: cfg.fallback_size,
        }
    }

    /// The current view.
    pub fn view(&self) -> &[(MemberId, Addr)] {
        &self.view
    }

    /// The fallback cache.
    pub fn fallback(&self) -> impl Iterator<Item = &(MemberId, Addr)> {
        self.fallback.iter()
    }

    /// A random peer: from the view, else the fallback cache, else a bootstrap address.
    pub fn sample(&mut self, rng: &mut u64) -> Option<Addr> {
        if !self.view.is_empty() {
            return Some(self.view[below(rng, self.view.len())].1);
        }
        if !self.fallback.is_empty() {
            return Some(self.fallback[below(rng, self.fallback.len())].1);
        }
        if self.bootstrap.is_empty() {
            return None;
        }
        let a = self.bootstrap[self.next_bootstrap % self.bootstrap.len()];
        self.next_bootstrap += 1;
        Some(a)
    }

    fn subset(&self, rng: &mut u64, k: usize) -> Vec<(MemberId, Addr)> {
        let mut idx: Vec<usize> = (0..self.view.len()).collect();
        let k = k.min(idx.len());
        for i in 0..k {
            let j = i + below(rng, idx.len() - i);
            idx.swap(i, j);
        }
        idx[..k].iter().map(|&i| self.view[i]).collect()
    }

    fn merge(&mut self, entries: &[(MemberId, Addr)], rng: &mut u64) {
        for &(id, a) in entries {
            if id == self.me.0 || self.view.iter().any(|(v, _)| *v == id) {
                continue;
            }
            if self.view.len() >= self.view_size {
                let victim = self
                    .view
                    .iter()
                    .position(|(v, _)| self.sent.contains(v))
                    .unwrap_or_else(|| below(rng, self.view.len()));
                self.sent.retain(|s| *s != self.view[victim].0);
                self.view.swap_remove(victim);
            }
            self.view.push((id, a));
        }
    }

    fn answered(&mut self, peer: (MemberId, Addr)) {
        if self.fallback_size == 0 || peer.0 == self.me.0 {
            return;
        }
        self.fallback.retain(|(id, _)| *id != peer.0);
        self.fallback.push_front(peer);
        self.fallback.truncate(self.fallback_size);
    }

    fn forget(&mut self, addr: Addr) {
        self.view.retain(|(_, a)| *a != addr);
        self.fallback.retain(|(_, a)| *a != addr);
    }

    fn forget_id(&mut self, id: MemberId) {
        self.view.retain(|(v, _)| *v != id);
        self.fallback.retain(|(v, _)| *v != id);
    }
}

// ------------------------------------------------------------------------ the node

#[derive(Debug, Clone)]
struct Entry {
    addr: Addr,
    version: u64,
    state: State,
    witnesses: BTreeSet<MemberId>,
    /// When its version last grew (or it answered a probe).
    refreshed: Duration,
}

/// A node's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub probes: u64,
    pub witnessed: u64,
}

/// One member of a distributed pool.
#[derive(Debug, Clone)]
pub struct Node {
    cfg: Config,
    consistency: Consistency,
    id: MemberId,
    addr: Addr,
    sampler: Sampler,
    entries: BTreeMap<MemberId, Entry>,
    /// Every id in `entries`, for random picks.
    ids: Vec<MemberId>,
    /// News, newest last: members learned, gone, or newly witnessed. Half of an exchange,
    /// so that news spreads as an epidemic rather than by chance.
    recent: VecDeque<MemberId>,
    by_addr: HashMap<Addr, MemberId>,
    /// Members probed, and when the probe times out.
    probes: BTreeMap<MemberId, Duration>,
    alive: usize,
    version: u64,
    elections: BTreeMap<String, MemberId>,
    candidacies: BTreeSet<String>,
    waits: BTreeMap<String, Duration>,
    joined: bool,
    gone: bool,
    next_round: Duration,
    rng: u64,
    out: VecDeque<Action<Message>>,
    stats: Stats,
}

impl Node {
    /// The node `id` listening at `addr`, that will contact `bootstrap` (the address of any
    /// existing member; empty for the first). Reliable joins and uniform elections are not
    /// offered.
    pub fn new(
        id: MemberId,
        addr: Addr,
        bootstrap: Vec<Addr>,
        cfg: Config,
        consistency: Consistency,
        seed: u64,
    ) -> Result<Node, Unsupported> {
        if consistency.joins == Some(JoinLeave::Reliable) {
            return Err(Unsupported("reliable joins and leaves"));
        }
        if consistency.elections == Some(Elections::Uniform) {
            return Err(Unsupported("uniform elections"));
        }
        Ok(Node {
            cfg,
            consistency,
            id,
            addr,
            sampler: Sampler::new((id, addr), bootstrap, &cfg),
            entries: BTreeMap::new(),
            ids: Vec::new(),
            recent: VecDeque::new(),
            by_addr: HashMap::new(),
            probes: BTreeMap::new(),
            alive: 0,
            version: 0,
            elections: BTreeMap::new(),
            candidacies: BTreeSet::new(),
            waits: BTreeMap::new(),
            joined: false,
            gone: false,
            next_round: Duration::ZERO,
            rng: seed ^ id.rotate_left(17),
            out: VecDeque::new(),
            stats: Stats::default(),
        })
    }

    pub fn id(&self) -> MemberId {
        self.id
    }

    pub fn addr(&self) -> Addr {
        self.addr
    }

    pub fn sampler(&self) -> &Sampler {
        &self.sampler
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The perceived pool size: the members it believes alive, itself included.
    pub fn pool_size(&self) -> usize {
        self.alive
    }

    /// The members it believes alive.
    pub fn members(&self) -> impl Iterator<Item = (MemberId, Addr)> + '_ {
        self.entries.iter().filter(|(_, e)| e.state == State::Alive).map(|(id, e)| (*id, e.addr))
    }

    /// Whether it believes `id` dead (pronounced by witnesses).
    pub fn is_dead(&self, id: MemberId) -> bool {
        self.entries.get(&id).is_some_and(|e| e.state == State::Dead)
    }

    /// The winner of `name` as far as this node knows.
    pub fn election(&self, name: &str) -> Option<MemberId> {
        self.elections.get(name).copied()
    }

    /// Left, or pronounced dead by the others.
    pub fn is_gone(&self) -> bool {
        self.gone
    }

    pub fn poll_action(&mut self) -> Option<Action<Message>> {
        super::pop_action(&mut self.out)
    }

    fn send(&mut self, to: Addr, msg: Message) {
        self.out.push_back(Action::Send { to, msg });
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

    /// Joins: the node knows itself and starts gossiping.
    pub fn join(&mut self, now: Duration) {
        if self.joined {
            return;
        }
        self.joined = true;
        let me = MemberInfo { id: self.id, addr: self.addr, version: 0, state: State::Alive, witnesses: Vec::new() };
        self.merge_member(&me, now);
        self.next_round = now;
    }

    /// Leaves gracefully (final): tells a few peers, which gossip it on.
    pub fn leave(&mut self, now: Duration) {
        if !self.joined || self.gone {
            return;
        }
        self.version += 1;
        let me = MemberInfo {
            id: self.id,
            addr: self.addr,
            version: self.version,
            state: State::Left,
            witnesses: Vec::new(),
        };
        self.merge_member(&me, now);
        let mut targets: Vec<Addr> = self.sampler.view.iter().map(|p| p.1).collect();
        targets.extend(self.sampler.fallback.iter().map(|p| p.1));
        targets.dedup();
        let mut sent = BTreeSet::new();
        for a in targets {
            if sent.len() >= self.cfg.leave_fanout {
                break;
            }
            if sent.insert(a) {
                self.send(a, Message::Exchange { reply: false, members: vec![me.clone()], elections: Vec::new() });
            }
        }
        self.gone = true;
        self.waits.clear();
    }

    /// Reports that `suspect` may be dead: it is probed now.
    pub fn maybe_dead(&mut self, suspect: MemberId, now: Duration) {
        if self.gone || suspect == self.id {
            return;
        }
        self.probe(suspect, now);
    }

    /// Stands for `name`: the known winner, or this node if none is known (non-uniform: the
    /// lowest id among the self-declared winners eventually wins, announced as a new
    /// [`Event::Elected`]).
    pub fn elect(&mut self, name: &str, now: Duration) -> Result<(), PartOff> {
        let _ = now;
        if self.consistency.elections.is_none() {
            return Err(PartOff);
        }
        self.candidacies.insert(name.to_string());
        let w = match self.elections.get(name) {
            Some(&w) => w,
            None => {
                self.set_winner(name, self.id);
                self.id
            }
        };
        self.out.push_back(Action::ElectionResult { name: name.to_string(), winner: Some(w) });
        Ok(())
    }

    /// Asks who won `name`: answered as soon as a winner is known, `None` after `timeout`.
    pub fn get_election_result(&mut self, name: &str, timeout: Duration, now: Duration) -> Result<(), PartOff> {
        if self.consistency.elections.is_none() {
            return Err(PartOff);
        }
        match self.elections.get(name) {
            Some(&w) => self.out.push_back(Action::ElectionResult { name: name.to_string(), winner: Some(w) }),
            None if self.gone => self.out.push_back(Action::ElectionResult { name: name.to_string(), winner: None }),
            None => {
                self.waits.insert(name.to_string(), now + timeout);
            }
        }
        Ok(())
    }

    fn set_winner(&mut self, name: &str, w: MemberId) {
        self.elections.insert(name.to_string(), w);
        if self.waits.remove(name).is_some() {
            self.out.push_back(Action::ElectionResult { name: name.to_string(), winner: Some(w) });
        }
        self.deliver(Event::Elected { name: name.to_string(), winner: w });
    }

    fn witnesses_needed(&self) -> usize {
        // The suspect and the witness itself excluded.
        self.cfg.witnesses.min(self.alive.saturating_sub(2)).max(1)
    }

    fn info(&self, id: MemberId) -> MemberInfo {
        let e = &self.entries[&id];
        MemberInfo {
            id,
            addr: e.addr,
            version: e.version,
            state: e.state,
            witnesses: e.witnesses.iter().copied().collect(),
        }
    }

    /// A member went (left or died): its elections are reopened.
    fn gone_member(&mut self, id: MemberId, died: bool) {
        self.alive -= 1;
        self.sampler.forget_id(id);
        self.deliver(if died { Event::Died { id } } else { Event::Left { id } });
        let names: Vec<String> = self.elections.iter().filter(|(_, w)| **w == id).map(|(n, _)| n.clone()).collect();
        for n in names {
            self.elections.remove(&n);
            if self.candidacies.contains(&n) && !self.gone {
                self.set_winner(&n, self.id);
            }
        }
        if id == self.id {
            self.gone = true;
            self.waits.clear();
        }
    }

    fn merge_member(&mut self, m: &MemberInfo, now: Duration) {
        let Some(e) = self.entries.get_mut(&m.id) else {
            self.entries.insert(
                m.id,
                Entry {
                    addr: m.addr,
                    version: m.version,
                    state: m.state,
                    witnesses: m.witnesses.iter().copied().collect(),
                    refreshed: now,
                },
            );
            self.ids.push(m.id);
            self.touch(m.id);
            self.by_addr.insert(m.addr, m.id);
            if m.state == State::Alive {
                self.alive += 1;
                self.deliver(Event::Joined { id: m.id, addr: m.addr });
                self.check_witnesses(m.id);
            }
            return;
        };
        if e.state != State::Alive {
            return;
        }
        if m.id == self.id && m.state == State::Alive {
            // Others' news about this node is never newer than itself; a death is final.
            return;
        }
        match m.state {
            State::Alive => {
                if m.version > e.version {
                    e.version = m.version;
                    e.refreshed = now;
                    e.witnesses = m.witnesses.iter().copied().collect();
                    self.probes.remove(&m.id);
                } else if m.version == e.version {
                    e.witnesses.extend(m.witnesses.iter().copied());
                }
                self.check_witnesses(m.id);
            }
            State::Left | State::Dead => {
                e.state = m.state;
                e.version = e.version.max(m.version);
                e.witnesses.extend(m.witnesses.iter().copied());
                self.probes.remove(&m.id);
                self.touch(m.id);
                self.gone_member(m.id, m.state == State::Dead);
            }
        }
    }

    fn check_witnesses(&mut self, id: MemberId) {
        let need = self.witnesses_needed();
        let Some(e) = self.entries.get_mut(&id) else { return };
        if e.state == State::Alive && id != self.id && e.witnesses.len() >= need {
            e.state = State::Dead;
            self.probes.remove(&id);
            self.gone_member(id, true);
        }
    }

    fn probe(&mut self, id: MemberId, now: Duration) {
        let Some(e) = self.entries.get_mut(&id) else { return };
        if e.state != State::Alive || self.probes.contains_key(&id) {
            return;
        }
        self.probes.insert(id, now + self.cfg.probe_timeout);
        let a = e.addr;
        self.stats.probes += 1;
        self.send(a, Message::Probe);
    }

    fn witness(&mut self, id: MemberId, now: Duration) {
        let me = self.id;
        let Some(e) = self.entries.get_mut(&id) else { return };
        if e.state != State::Alive || id == me {
            return;
        }
        self.probes.remove(&id);
        e.refreshed = now;
        if e.witnesses.insert(me) {
            self.stats.witnessed += 1;
            self.touch(id);
        }
        self.check_witnesses(id);
    }

    /// The driver could not reach `addr`.
    pub fn on_unreachable(&mut self, addr: Addr, now: Duration) {
        self.sampler.forget(addr);
        if let Some(&id) = self.by_addr.get(&addr) {
            self.witness(id, now);
        }
    }

    fn touch(&mut self, id: MemberId) {
        self.recent.push_back(id);
        if self.recent.len() > 2 * self.cfg.exchange_len {
            self.recent.pop_front();
        }
    }

    fn exchange(&mut self, reply: bool) -> Message {
        let mut members = vec![self.info(self.id)];
        let k = self.cfg.exchange_len.min(self.ids.len());
        let mut picked = BTreeSet::new();
        for &id in self.recent.iter().rev() {
            if picked.len() >= k / 2 {
                break;
            }
            if id != self.id && picked.insert(id) {
                members.push(self.info(id));
            }
        }
        for _ in 0..2 * k {
            if picked.len() >= k {
                break;
            }
            let id = self.ids[below(&mut self.rng, self.ids.len())];
            if id != self.id && picked.insert(id) {
                members.push(self.info(id));
            }
        }
        let elections = self.elections.iter().map(|(n, w)| (n.clone(), *w)).collect();
        Message::Exchange { reply, members, elections }
    }

    /// A message from the node listening at `from`.
    pub fn on_message(&mut self, from: Addr, msg: Message, now: Duration) {
        if !self.joined || self.gone {
            return;
        }
        match msg {
            Message::Shuffle { entries } => {
                let mut reply = self.sampler.subset(&mut self.rng, self.cfg.shuffle_len);
                reply.retain(|(id, _)| entries.first().is_none_or(|f| f.0 != *id));
                self.send(from, Message::ShuffleReply { entries: reply });
                self.sampler.merge(&entries, &mut self.rng);
            }
            Message::ShuffleReply { entries } => {
                self.sampler.merge(&entries, &mut self.rng);
                if let Some(&id) = self.by_addr.get(&from) {
                    self.sampler.answered((id, from));
                }
            }
            Message::Exchange { reply, members, elections } => {
                for m in &members {
                    self.merge_member(m, now);
                    if self.gone {
                        return;
                    }
                }
                if let Some(first) = members.first() {
                    if first.addr == from && first.state == State::Alive {
                        self.sampler.answered((first.id, from));
                        if let Some(e) = self.entries.get_mut(&first.id) {
                            e.refreshed = now;
                            self.probes.remove(&first.id);
                        }
                    }
                }
                for (name, w) in elections {
                    if self.entries.get(&w).is_some_and(|e| e.state != State::Alive) {
                        continue;
                    }
                    match self.elections.get(&name) {
                        Some(&cur) if cur <= w => {}
                        _ => self.set_winner(&name, w),
                    }
                }
                if !reply {
                    let m = self.exchange(true);
                    self.send(from, m);
                }
            }
            Message::Probe => {
                let v = self.version;
                self.send(from, Message::ProbeAck { version: v });
            }
            Message::ListReq => {
                let members = self.members().collect();
                self.send(from, Message::List { members });
            }
            // An answer to an observer: a node never asks.
            Message::List { .. } => {}
            Message::ProbeAck { version } => {
                if let Some(&id) = self.by_addr.get(&from) {
                    self.probes.remove(&id);
                    if let Some(e) = self.entries.get_mut(&id) {
                        e.refreshed = now;
                        if version > e.version {
                            e.version = version;
                            e.witnesses.clear();
                        }
                    }
                }
            }
        }
    }

    /// When [`tick`](Self::tick) must be called next.
    pub fn next_deadline(&self) -> Option<Duration> {
        if !self.joined || self.gone {
            return None;
        }
        let mut t = self.next_round;
        if let Some(&w) = self.waits.values().min() {
            t = t.min(w);
        }
        if let Some(&p) = self.probes.values().min() {
            t = t.min(p);
        }
        Some(t)
    }

    /// Runs what is due.
    pub fn tick(&mut self, now: Duration) {
        if !self.joined || self.gone {
            return;
        }
        if now >= self.next_round {
            self.next_round = next_period(self.next_round, self.cfg.interval, now);
            self.version += 1;
            let v = self.version;
            if let Some(e) = self.entries.get_mut(&self.id) {
                e.version = v;
            }
            // Peer sampling: a shuffle.
            if let Some(to) = self.sampler.sample(&mut self.rng) {
                let mut entries = vec![(self.id, self.addr)];
                let sub = self.sampler.subset(&mut self.rng, self.cfg.shuffle_len.saturating_sub(1));
                self.sampler.sent = sub.iter().map(|p| p.0).collect();
                entries.extend(sub);
                self.send(to, Message::Shuffle { entries });
            }
            // Gossip of members and elections.
            if let Some(to) = self.sampler.sample(&mut self.rng) {
                let m = self.exchange(false);
                self.send(to, m);
            }
            // Suspicion: a few random entries whose version did not grow for `timeout` are
            // probed (a bounded rate: with n members, each node does O(1) work per round and
            // a silent member is sampled by some node ~4·probes_per_round times a round).
            let k = self.cfg.probes_per_round;
            let mut probed = 0;
            for _ in 0..4 * k {
                if probed >= k || self.ids.is_empty() {
                    break;
                }
                let id = self.ids[below(&mut self.rng, self.ids.len())];
                let stale = self.entries.get(&id).is_some_and(|e| {
                    id != self.id
                        && e.state == State::Alive
                        && !self.probes.contains_key(&id)
                        && e.refreshed + self.cfg.timeout <= now
                });
                if stale {
                    self.probe(id, now);
                    probed += 1;
                }
            }
        }
        // Probes not answered (checked every tick: at most a round late).
        let expired: Vec<MemberId> = self.probes.iter().filter(|(_, &d)| d <= now).map(|(id, _)| *id).collect();
        for id in expired {
            self.witness(id, now);
        }
        let expired: Vec<String> = self.waits.iter().filter(|(_, &d)| d <= now).map(|(n, _)| n.clone()).collect();
        for name in expired {
            self.waits.remove(&name);
            self.out.push_back(Action::ElectionResult { name, winner: None });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testnet::{addr, ms, Core, Net};
    use super::super::wire::arb;
    use super::*;
    use proptest::prelude::*;

    impl Core for Node {
        type Msg = Message;
        fn on_message(&mut self, from: Addr, msg: Message, now: Duration) {
            Node::on_message(self, from, msg, now)
        }
        fn on_unreachable(&mut self, to: Addr, now: Duration) {
            Node::on_unreachable(self, to, now)
        }
        fn tick(&mut self, now: Duration) {
            Node::tick(self, now)
        }
        fn next_deadline(&self) -> Option<Duration> {
            Node::next_deadline(self)
        }
        fn poll_action(&mut self) -> Option<Action<Message>> {
            Node::poll_action(self)
        }
        fn wire(msg: &Message) -> Message {
            decode(&encode(msg)).expect("what is encoded decodes")
        }
    }

    fn test_cfg() -> Config {
        Config {
            interval: ms(200),
            timeout: ms(3000),
            probe_timeout: ms(500),
            view_size: 8,
            shuffle_len: 4,
            exchange_len: 8,
            ..Config::default()
        }
    }

    /// Ids in a scrambled order, so that the lowest is not the first to join.
    fn id(i: usize) -> MemberId {
        let mut s = i as u64 + 99;
        super::super::splitmix64(&mut s)
    }

    /// `n` nodes, all bootstrapping from node 0, joining over `spread` ms.
    fn pool(n: usize, cfg: Config, seed: u64, spread: u64) -> Net<Node> {
        let mut net = Net::new(n, seed);
        for i in 0..n {
            let boot = if i == 0 { vec![] } else { vec![addr(0)] };
            net.nodes[i] = Some(Node::new(id(i), addr(i), boot, cfg, Consistency::WEAK, seed ^ i as u64).unwrap());
        }
        let mut s = seed;
        let mut times: Vec<(u64, usize)> =
            (0..n).map(|i| (if i == 0 { 0 } else { below(&mut s, spread as usize + 1) as u64 }, i)).collect();
        times.sort();
        for (t, i) in times {
            net.run_until(ms(t));
            net.with(i, |c, now| c.join(now));
        }
        net
    }

    fn node(net: &Net<Node>, i: usize) -> &Node {
        net.nodes[i].as_ref().expect("node")
    }

    #[test]
    fn joins_reach_everyone() {
        let n = 40;
        let mut net = pool(n, test_cfg(), 3, 1000);
        net.run_until(ms(20_000));
        for i in 0..n {
            assert_eq!(node(&net, i).pool_size(), n, "node {i}");
            let mut seen = net.joins_seen(i);
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), n, "node {i}: each join told once");
            assert!(node(&net, i).sampler().view().len() <= test_cfg().view_size);
        }
    }

    #[test]
    fn a_crash_is_pronounced_dead_by_witnesses_and_a_leave_is_told() {
        let n = 20;
        for refuse in [false, true] {
            let mut net = pool(n, test_cfg(), 5, 200);
            net.refuse = refuse;
            net.run_until(ms(6000));
            net.crash(7);
            net.with(3, |c, now| c.leave(now));
            net.run_until(ms(30_000));
            for i in (0..n).filter(|&i| i != 7 && i != 3) {
                assert!(net.told(i, &Event::Died { id: id(7) }).is_some(), "refuse {refuse}: node {i}");
                assert!(net.told(i, &Event::Left { id: id(3) }).is_some(), "node {i}");
                assert!(node(&net, i).is_dead(id(7)));
                assert_eq!(node(&net, i).pool_size(), n - 2);
            }
            // Nobody else was declared dead.
            let deaths: usize = net.delivered.iter().flatten().filter(|(_, e)| matches!(e, Event::Died { .. })).count();
            assert_eq!(deaths, n - 2);
        }
    }

    #[test]
    fn conflicting_elections_resolve_to_the_lowest_id_and_are_redone_when_it_dies() {
        let n = 16;
        let mut net = pool(n, test_cfg(), 9, 100);
        net.run_until(ms(3000));
        // Everyone stands at once: each first declares itself.
        for i in 0..n {
            net.with(i, |c, now| c.elect("master", now).unwrap());
        }
        net.with(0, |c, now| c.get_election_result("other", ms(1000), now).unwrap());
        net.run_until(ms(12_000));
        let lowest = (0..n).map(id).min().unwrap();
        for i in 0..n {
            assert_eq!(node(&net, i).election("master"), Some(lowest), "node {i}");
        }
        assert!(net.results[0].iter().any(|r| r.1 == "other" && r.2.is_none()));
        let w = (0..n).find(|&i| id(i) == lowest).unwrap();
        net.crash(w);
        net.run_until(ms(40_000));
        let next = (0..n).filter(|&i| i != w).map(id).min().unwrap();
        for i in (0..n).filter(|&i| i != w) {
            assert_eq!(node(&net, i).election("master"), Some(next), "node {i}");
            assert!(net.told(i, &Event::Elected { name: "master".into(), winner: next }).is_some());
        }
    }

    #[test]
    fn strong_consistency_is_refused_and_parts_can_be_off() {
        let a = addr(1);
        assert!(Node::new(1, a, vec![], Config::default(), Consistency::STRONG, 0).is_err());
        let off = Consistency { joins: None, elections: None };
        let mut nd = Node::new(1, a, vec![], Config::default(), off, 0).unwrap();
        nd.join(Duration::ZERO);
        assert_eq!(nd.elect("x", Duration::ZERO), Err(PartOff));
        assert!(nd.poll_action().is_none());
        assert_eq!(nd.pool_size(), 1);
    }

    #[test]
    fn an_observer_is_told_the_live_members_without_joining() {
        let mut nd = Node::new(1, addr(1), vec![], test_cfg(), Consistency::WEAK, 0).unwrap();
        // Not joined yet: nothing to say.
        nd.on_message(addr(99), Message::ListReq, Duration::ZERO);
        assert!(nd.poll_action().is_none());
        nd.join(Duration::ZERO);
        let info = |id: u64, state| MemberInfo { id, addr: addr(id as usize), version: 1, state, witnesses: vec![] };
        let members = vec![info(2, State::Alive), info(3, State::Alive), info(4, State::Left)];
        nd.on_message(addr(2), Message::Exchange { reply: true, members, elections: vec![] }, Duration::ZERO);
        while nd.poll_action().is_some() {}
        nd.on_message(addr(99), Message::ListReq, Duration::ZERO);
        let answer = std::iter::from_fn(|| nd.poll_action()).find_map(|a| match a {
            Action::Send { to, msg: Message::List { members } } => Some((to, members)),
            _ => None,
        });
        assert_eq!(answer, Some((addr(99), vec![(1, addr(1)), (2, addr(2)), (3, addr(3))])));
        // The observer is not a member: nobody learned of it.
        assert_eq!(nd.pool_size(), 3);
        assert!(nd.members().all(|(id, _)| id != 99));
    }

    #[test]
    fn the_fallback_cache_and_bootstrap_are_used_when_the_view_empties() {
        let cfg = test_cfg();
        let mut nd = Node::new(1, addr(1), vec![addr(0)], cfg, Consistency::WEAK, 0).unwrap();
        let mut rng = 1;
        assert_eq!(nd.sampler.sample(&mut rng), Some(addr(0)));
        nd.join(Duration::ZERO);
        nd.on_message(addr(2), Message::ShuffleReply { entries: vec![(3, addr(3))] }, Duration::ZERO);
        nd.sampler.answered((2, addr(2)));
        assert_eq!(nd.sampler.sample(&mut rng), Some(addr(3)));
        nd.on_unreachable(addr(3), Duration::ZERO);
        assert_eq!(nd.sampler.sample(&mut rng), Some(addr(2)));
        nd.on_unreachable(addr(2), Duration::ZERO);
        assert_eq!(nd.sampler.sample(&mut rng), Some(addr(0)));
    }

    fn arb_info() -> impl Strategy<Value = MemberInfo> {
        (any::<u64>(), arb::addr(), any::<u64>(), 0u8..3, proptest::collection::vec(any::<u64>(), 0..3)).prop_map(
            |(id, addr, version, s, witnesses)| MemberInfo {
                id,
                addr,
                version,
                state: [State::Alive, State::Left, State::Dead][s as usize],
                witnesses,
            },
        )
    }

    fn arb_message() -> impl Strategy<Value = Message> {
        let entries = || proptest::collection::vec((any::<u64>(), arb::addr()), 0..5);
        prop_oneof![
            entries().prop_map(|entries| Message::Shuffle { entries }),
            entries().prop_map(|entries| Message::ShuffleReply { entries }),
            (
                any::<bool>(),
                proptest::collection::vec(arb_info(), 0..4),
                proptest::collection::vec((arb::name(), any::<u64>()), 0..3)
            )
                .prop_map(|(reply, members, elections)| Message::Exchange { reply, members, elections }),
            Just(Message::Probe),
            any::<u64>().prop_map(|version| Message::ProbeAck { version }),
            Just(Message::ListReq),
            entries().prop_map(|members| Message::List { members }),
        ]
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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(8))]

        /// Random pools with a crash: everyone alive converges on the same members and on the
        /// lowest live candidate.
        #[test]
        fn survivors_converge(n in 4usize..20, seed in any::<u64>(), victim in 1usize..20) {
            let victim = victim % n;
            let mut net = pool(n, test_cfg(), seed, 500);
            net.run_until(ms(2000));
            for i in (0..n).step_by(2) {
                net.with(i, |c, now| { let _ = c.elect("e", now); });
            }
            net.run_until(ms(4000));
            net.crash(victim);
            net.run_until(ms(40_000));
            let live: Vec<usize> = (0..n).filter(|&i| i != victim).collect();
            let want = live.iter().filter(|&&i| i % 2 == 0).map(|&i| id(i)).min();
            for &i in &live {
                prop_assert_eq!(node(&net, i).pool_size(), n - 1);
                prop_assert!(node(&net, i).is_dead(id(victim)));
                prop_assert_eq!(node(&net, i).election("e"), want);
            }
        }
    }
}
