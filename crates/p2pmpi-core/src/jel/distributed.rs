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
//! * **Gossip of members and elections.** Every interval a node also sends its own entry,
//!   every election and members it knows ([`MemberInfo`]: address, the member's incarnation
//!   `version`, its state and the witnesses of its silence) to a peer drawn from the sampler
//!   ([`Message::Exchange`]); the peer answers with the same and both merge. While the
//!   node's table fits in [`Config::exchange_max`] entries an exchange carries all of it (a
//!   pool of a few hundred converges in a few rounds); beyond, it carries the *news* — each
//!   member learned, gone, newly witnessed or refuted goes out in the next ~ln n + 3
//!   exchanges (rumor mongering: an epidemic that reaches everyone in O(log n) rounds) — and
//!   [`Config::exchange_len`] entries at random (anti-entropy). A newcomer asks for a whole
//!   table (`want_all`) until it got one; each node gives at most one a round. A member never
//!   heard of before is delivered as [`Event::Joined`], a `Left` or `Dead` entry as
//!   [`Event::Left`] / [`Event::Died`] (tombstones are final and keep spreading).
//! * **Deaths by witnesses.** A member not heard from directly (an exchange or a shuffle from
//!   it, a probe answered) for [`Config::timeout`] is suspected and probed
//!   ([`Message::Probe`]): a scan goes round the table once per `timeout` and probes at most
//!   [`Config::probes_per_round`] members a round, so that the cost stays O(1) messages per
//!   round whatever the pool's size. An exchange or shuffle that cannot reach a member counts
//!   as a failed probe. An answer refreshes the entry; no answer within
//!   [`Config::probe_timeout`] (or an unreachable address) and the node adds itself to the
//!   member's witnesses, which travel with the entry as news (unions at equal version, the
//!   newer version's set otherwise). A node that learns of witnesses probes the suspect
//!   itself before it accuses it; the suspect, told of witnesses against its current
//!   version, refutes them with a new version. With [`Config::witnesses`] witnesses (fewer
//!   in a pool too small for that) the member is pronounced dead. The version is not a
//!   heartbeat (it grows only to refute): nothing changes in a quiet pool, so the exchanges
//!   carry nothing new, and no time-out depends on how fast n entries can be refreshed.
//! * **Elections** ([`Input::Elect`]): a node that needs the result of
//!   an unknown election declares itself the winner; merging two different winners keeps
//!   the lowest id, so one winner remains. When a winner leaves or dies the entry is dropped and the candidates
//!   declare themselves again.
//! * **Leaving** ([`Input::Leave`]): the node's `Left` entry is sent to
//!   [`Config::leave_fanout`] peers, which gossip it on.
//!
//! See [the module docs](super) for the driving contract.

use super::members::MemberTable;
use super::wire::{put_addr, put_id, put_name, put_var, DecodeError, Reader};
use super::{
    below, next_period, Action, Addr, Consistency, Elections, Event, Input, JoinLeave, MemberId, PartOff, Unsupported,
};
use crate::machine::{Machine, Time};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
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
    /// Member entries drawn at random for an exchange (anti-entropy), besides the news.
    pub exchange_len: usize,
    /// Member entries an exchange carries at most, besides the sender's own: the whole table
    /// while it fits, else the news still to be spread and `exchange_len` at random. A
    /// newcomer gets one whole table whatever its size.
    pub exchange_max: usize,
    /// A member not heard from directly (an exchange, a shuffle, a probe's answer) for this
    /// long is probed.
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
            exchange_len: 10,
            exchange_max: 512,
            timeout: Duration::from_secs(120),
            probe_timeout: Duration::from_secs(5),
            probes_per_round: 1,
            witnesses: 3,
            leave_fanout: 20,
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
    /// Members (the sender's own entry first) and elections; `reply`: an answer; `want_all`:
    /// the sender never got a whole table (a newcomer); `whole`: `members` is the sender's
    /// whole table; `digest`: a summary of the ids the sender knows (a request's; empty in
    /// an answer), per [`DIGEST_BUCKETS`] ranges of ids the count and the XOR of its ids,
    /// answered with the entries of the ranges where the receiver's differ.
    Exchange {
        reply: bool,
        want_all: bool,
        whole: bool,
        members: Vec<MemberInfo>,
        elections: Vec<(String, MemberId)>,
        digest: Vec<(u32, u64)>,
    },
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
        Message::Exchange { reply, want_all, whole, members, elections, digest } => {
            out.push(3);
            out.push(u8::from(*reply) | u8::from(*want_all) << 1 | u8::from(*whole) << 2);
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
            put_var(out, digest.len() as u64);
            for (c, x) in digest {
                put_var(out, u64::from(*c));
                put_id(out, *x);
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
        let id = r.member_id()?;
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
            let flags = r.u8()?;
            if flags > 7 {
                return Err(DecodeError::BadField("exchange flags"));
            }
            let (reply, want_all, whole) = (flags & 1 != 0, flags & 2 != 0, flags & 4 != 0);
            let n = r.len()?;
            let mut members = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                let id = r.member_id()?;
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
                    witnesses.push(r.member_id()?);
                }
                members.push(MemberInfo { id, addr, version, state, witnesses });
            }
            let n = r.len()?;
            let mut elections = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                let name = r.name()?;
                elections.push((name, r.member_id()?));
            }
            let n = r.len()?;
            let mut digest = Vec::with_capacity(n.min(DIGEST_BUCKETS));
            for _ in 0..n {
                let c = u32::try_from(r.var()?).map_err(|_| DecodeError::BadField("digest count"))?;
                digest.push((c, r.member_id()?));
            }
            Message::Exchange { reply, want_all, whole, members, elections, digest }
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

// ------------------------------------------------------------------------ the member table

/// Ranges of ids in an exchange's digest (by the ids' top 8 bits; ids are random).
pub const DIGEST_BUCKETS: usize = 256;

fn bucket_of(id: MemberId) -> usize {
    (id >> 56) as usize
}

/// What an entry adds (XOR) to its range's digest: its id, version and state, mixed.
fn digest_word(id: MemberId, version: u32, state: u8) -> u64 {
    let mut x = id ^ (u64::from(version) << 2 | u64::from(state)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    super::splitmix64(&mut x)
}
const ALIVE: u8 = 0;
const LEFT: u8 = 1;
const DEAD: u8 = 2;

fn state_code(s: State) -> u8 {
    match s {
        State::Alive => ALIVE,
        State::Left => LEFT,
        State::Dead => DEAD,
    }
}

fn code_state(c: u8) -> State {
    match c {
        ALIVE => State::Alive,
        LEFT => State::Left,
        _ => State::Dead,
    }
}

/// What a node keeps of a member besides its id and address: 8 bytes, next to the
/// [`MemberTable`]'s 16 (a simulated pool of n nodes holds n² of them).
#[derive(Debug, Clone, Copy, Default)]
struct Meta {
    /// The member's incarnation, raised by the member itself to refute witnesses.
    version: u32,
    /// The state (2 high bits) and when the member was last heard from directly, in tenths
    /// of a second (30 bits: three years).
    meta: u32,
}

impl Meta {
    fn state(&self) -> u8 {
        (self.meta >> 30) as u8
    }
    fn alive(&self) -> bool {
        self.state() == ALIVE
    }
    fn refreshed(&self) -> Duration {
        Duration::from_millis(u64::from(self.meta & 0x3fff_ffff) * 100)
    }
    fn set_state(&mut self, s: u8) {
        self.meta = (self.meta & 0x3fff_ffff) | (u32::from(s) << 30);
    }
    fn refresh(&mut self, now: Duration) {
        let t = (now.as_millis() / 100).min(0x3fff_ffff) as u32;
        self.meta = (self.meta & !0x3fff_ffff) | t;
    }
}

/// Every member a node heard of (tombstones of the gone included), in the order learned: the
/// [`MemberTable`] (never vacated here), each slot's [`Meta`], and the digest of the ranges
/// of ids that exchanges compare.
#[derive(Debug, Clone, Default)]
struct Table {
    members: MemberTable,
    /// Per slot (as `members`).
    meta: Vec<Meta>,
    /// Per digest range: its slots, and the count and XOR of its ids.
    ranges: Vec<Vec<u32>>,
    digest: Vec<(u32, u64)>,
}

impl Table {
    fn get(&self, id: MemberId) -> Option<usize> {
        self.members.get(id)
    }

    fn len(&self) -> usize {
        self.members.len()
    }

    fn id(&self, k: usize) -> MemberId {
        self.members.id(k)
    }

    fn addr(&self, k: usize) -> Addr {
        self.members.addr(k)
    }

    /// Sets slot `k`'s version and state, keeping the digest up to date.
    fn set(&mut self, k: usize, version: u32, state: u8) {
        let id = self.members.id(k);
        let s = &mut self.meta[k];
        let r = bucket_of(id);
        self.digest[r].1 ^= digest_word(id, s.version, s.state()) ^ digest_word(id, version, state);
        s.version = version;
        s.set_state(state);
    }

    fn push(&mut self, id: MemberId, addr: Addr, version: u32, state: u8, now: Duration) -> usize {
        if self.meta.len() == self.meta.capacity() {
            // Grow by a quarter, not double: n² slots in a simulated pool.
            self.meta.reserve_exact(self.meta.len() / 4 + 8);
        }
        if self.ranges.is_empty() {
            self.ranges = vec![Vec::new(); DIGEST_BUCKETS];
            self.digest = vec![(0, 0); DIGEST_BUCKETS];
        }
        let r = bucket_of(id);
        let range = &mut self.ranges[r];
        if range.len() == range.capacity() {
            range.reserve_exact(range.len() / 4 + 2);
        }
        range.push(self.meta.len() as u32);
        self.digest[r].0 += 1;
        self.digest[r].1 ^= digest_word(id, version, state);
        let mut m = Meta { version, meta: 0 };
        m.set_state(state);
        m.refresh(now);
        self.meta.push(m);
        let k = self.members.push(id, addr);
        debug_assert_eq!(k + 1, self.meta.len(), "one meta per slot");
        k
    }
}

// ------------------------------------------------------------------------ the node

/// A node's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub probes: u64,
    pub witnessed: u64,
    /// Members this node pronounced dead itself (the last witness).
    pub pronounced: u64,
    /// Whole tables sent to newcomers.
    pub whole_sent: u64,
}

/// One member of a distributed pool.
#[derive(Debug, Clone)]
pub struct Node {
    cfg: Config,
    consistency: Consistency,
    id: MemberId,
    addr: Addr,
    sampler: Sampler,
    table: Table,
    /// The witnesses of live members (few have any), sorted.
    witnesses: BTreeMap<MemberId, Vec<MemberId>>,
    /// News (members learned, gone, newly witnessed or refuted): slots, each with the
    /// number of exchanges it is still to be sent in (rumor mongering, ~ln n times each).
    news: VecDeque<(u32, u8)>,
    /// Members probed: the probe's deadline and the address probed.
    probes: BTreeMap<MemberId, (Duration, Addr)>,
    /// Members with enough witnesses, and when they are pronounced dead if nothing (a new
    /// version, a leave) came in the meantime.
    doomed: BTreeMap<MemberId, Duration>,
    /// The last peers sent to, with their ids (to name an unreachable address).
    sent_to: VecDeque<(Addr, MemberId)>,
    /// Where the scan for members not heard from for `timeout` resumes.
    cursor: usize,
    alive: usize,
    version: u64,
    /// Whether it ever got a whole table (a newcomer asks for one until then).
    synced: bool,
    /// When it last sent a whole table to a newcomer (at most one per round).
    last_whole: Option<Duration>,
    /// Rounds since it joined.
    rounds: u64,
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
        let synced = bootstrap.iter().all(|a| *a == addr);
        Ok(Node {
            cfg,
            consistency,
            id,
            addr,
            sampler: Sampler::new((id, addr), bootstrap, &cfg),
            table: Table::default(),
            witnesses: BTreeMap::new(),
            news: VecDeque::new(),
            probes: BTreeMap::new(),
            doomed: BTreeMap::new(),
            sent_to: VecDeque::new(),
            cursor: 0,
            alive: 0,
            version: 0,
            synced,
            last_whole: None,
            rounds: 0,
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

    /// The members it believes alive, by id.
    pub fn members(&self) -> impl Iterator<Item = (MemberId, Addr)> + '_ {
        let mut v: Vec<(MemberId, Addr)> = (0..self.table.len())
            .filter(|&k| self.table.meta[k].alive())
            .map(|k| (self.table.id(k), self.table.addr(k)))
            .collect();
        v.sort_unstable_by_key(|m| m.0);
        v.into_iter()
    }

    /// Whether it believes `id` dead (pronounced by witnesses).
    pub fn is_dead(&self, id: MemberId) -> bool {
        self.table.get(id).is_some_and(|k| self.table.meta[k].state() == DEAD)
    }

    /// The winner of `name` as far as this node knows.
    pub fn election(&self, name: &str) -> Option<MemberId> {
        self.elections.get(name).copied()
    }

    /// Left, or pronounced dead by the others.
    pub fn is_gone(&self) -> bool {
        self.gone
    }

    fn send(&mut self, to: Addr, msg: Message) {
        self.out.push_back(Action::Send { to, msg });
    }

    /// Sends to a member whose id is known (so that its address can be named if unreachable).
    fn send_to(&mut self, to: Addr, msg: Message) {
        if let Some(id) = self.id_near(to) {
            self.sent_to.retain(|(a, _)| *a != to);
            self.sent_to.push_back((to, id));
            if self.sent_to.len() > 32 {
                self.sent_to.pop_front();
            }
        }
        self.send(to, msg);
    }

    /// The member listening at `a`, among the peers this node deals with (probed, sampled,
    /// sent to lately), else any it knows.
    fn id_of(&self, a: Addr) -> Option<MemberId> {
        self.id_near(a)
            .or_else(|| (0..self.table.len()).rev().find(|&k| self.table.addr(k) == a).map(|k| self.table.id(k)))
    }

    /// [`Node::id_of`] among the peers this node deals with only (no scan of the table).
    fn id_near(&self, a: Addr) -> Option<MemberId> {
        if let Some((id, _)) = self.probes.iter().find(|(_, p)| p.1 == a) {
            return Some(*id);
        }
        if let Some(p) = self.sampler.view.iter().chain(self.sampler.fallback.iter()).find(|p| p.1 == a) {
            return Some(p.0);
        }
        self.sent_to.iter().rev().find(|p| p.0 == a).map(|p| p.1)
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
    fn join(&mut self, now: Duration) {
        if self.joined {
            return;
        }
        self.joined = true;
        let me = MemberInfo { id: self.id, addr: self.addr, version: 0, state: State::Alive, witnesses: Vec::new() };
        self.merge_member(&me, now);
        self.next_round = now;
    }

    /// Leaves gracefully (final): tells a few peers, which gossip it on.
    fn leave(&mut self, now: Duration) {
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
        let mut sent = BTreeSet::new();
        for a in targets {
            if sent.len() >= self.cfg.leave_fanout {
                break;
            }
            if sent.insert(a) {
                let m = Message::Exchange {
                    reply: false,
                    want_all: false,
                    whole: false,
                    members: vec![me.clone()],
                    elections: Vec::new(),
                    digest: Vec::new(),
                };
                self.send(a, m);
            }
        }
        self.gone = true;
        self.waits.clear();
    }

    /// Reports that `suspect` may be dead: it is probed now.
    fn maybe_dead(&mut self, suspect: MemberId, now: Duration) {
        if self.gone || suspect == self.id {
            return;
        }
        self.probe(suspect, now);
    }

    /// Stands for `name`: the known winner, or this node if none is known (non-uniform: the
    /// lowest id among the self-declared winners eventually wins, announced as a new
    /// [`Event::Elected`]).
    fn elect(&mut self, name: &str, now: Duration) -> Result<(), PartOff> {
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
    fn get_election_result(&mut self, name: &str, timeout: Duration, now: Duration) -> Result<(), PartOff> {
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

    fn info(&self, k: usize) -> MemberInfo {
        let (id, s) = (self.table.id(k), self.table.meta[k]);
        MemberInfo {
            id,
            addr: self.table.addr(k),
            version: if id == self.id { self.version } else { u64::from(s.version) },
            state: code_state(s.state()),
            witnesses: self.witnesses.get(&id).cloned().unwrap_or_default(),
        }
    }

    /// A member went (left or died): its elections are reopened.
    fn gone_member(&mut self, id: MemberId, died: bool) {
        self.alive -= 1;
        self.doomed.remove(&id);
        self.witnesses.remove(&id);
        self.probes.remove(&id);
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

    /// How many exchanges a piece of news goes out in: ~ln n + 3, enough for a push-pull
    /// epidemic to reach every node with high probability (the random part of the exchanges
    /// and the whole tables of newcomers catch the rest).
    fn news_sends(&self) -> u8 {
        ((self.alive.max(2) as f64).ln().ceil() as u8).saturating_add(3)
    }

    fn touch(&mut self, k: usize) {
        let n = self.news_sends();
        self.news.push_back((k as u32, n));
    }

    fn merge_member(&mut self, m: &MemberInfo, now: Duration) {
        let version = m.version.min(u64::from(u32::MAX)) as u32;
        let Some(k) = self.table.get(m.id) else {
            let k = self.table.push(m.id, m.addr, version, state_code(m.state), now);
            self.touch(k);
            if m.state == State::Alive {
                self.alive += 1;
                self.deliver(Event::Joined { id: m.id, addr: m.addr });
                if !m.witnesses.is_empty() && m.id != self.id {
                    let mut w = m.witnesses.clone();
                    w.sort_unstable();
                    w.dedup();
                    self.witnesses.insert(m.id, w);
                    self.suspect(m.id, now);
                    self.check_witnesses(m.id, now);
                }
            }
            return;
        };
        if !self.table.meta[k].alive() {
            // Tombstones are final; two of them converge on the greater (version, state), so
            // that the digests of the nodes agree.
            let (v, st) = (self.table.meta[k].version, self.table.meta[k].state());
            let code = state_code(m.state);
            if m.state != State::Alive && (version, code) > (v, st) {
                self.table.set(k, version, code);
            }
            return;
        }
        if m.id == self.id {
            match m.state {
                // Others' news about this node is never newer than itself; but witnesses of
                // its current incarnation are refuted with a new one.
                State::Alive => {
                    if !m.witnesses.is_empty() && m.version >= self.version {
                        self.version = m.version + 1;
                        self.table.set(k, self.version.min(u64::from(u32::MAX)) as u32, ALIVE);
                        self.touch(k);
                    }
                }
                // A death (or a leave) is final.
                State::Left | State::Dead => {
                    let v = self.version.max(m.version).min(u64::from(u32::MAX)) as u32;
                    self.table.set(k, v, state_code(m.state));
                    self.touch(k);
                    self.gone_member(m.id, m.state == State::Dead);
                }
            }
            return;
        }
        match m.state {
            State::Alive => {
                let cur = self.table.meta[k].version;
                if version > cur {
                    self.table.set(k, version, ALIVE);
                    self.table.meta[k].refresh(now);
                    self.probes.remove(&m.id);
                    if m.witnesses.is_empty() {
                        self.witnesses.remove(&m.id);
                    } else {
                        let mut w = m.witnesses.clone();
                        w.sort_unstable();
                        w.dedup();
                        self.witnesses.insert(m.id, w);
                    }
                    self.touch(k);
                } else if version == cur && !m.witnesses.is_empty() {
                    let set = self.witnesses.entry(m.id).or_default();
                    let before = set.len();
                    set.extend(m.witnesses.iter().copied());
                    set.sort_unstable();
                    set.dedup();
                    if set.len() > before {
                        self.touch(k);
                        self.suspect(m.id, now);
                    }
                }
                self.check_witnesses(m.id, now);
            }
            State::Left | State::Dead => {
                let v = self.table.meta[k].version.max(version);
                self.table.set(k, v, state_code(m.state));
                self.touch(k);
                self.gone_member(m.id, m.state == State::Dead);
            }
        }
    }

    /// Others witnessed `id`'s silence: this node checks for itself before it accuses.
    fn suspect(&mut self, id: MemberId, now: Duration) {
        let mine = self.witnesses.get(&id).is_some_and(|w| w.binary_search(&self.id).is_ok());
        if !mine {
            self.probe(id, now);
        }
    }

    /// Enough witnesses: the member is pronounced dead a probe time-out later, unless it
    /// refuted them or its leave came in the meantime (a member that left is refused like
    /// a dead one until its `Left` reached everyone).
    fn check_witnesses(&mut self, id: MemberId, now: Duration) {
        if self.doomed_now(id) {
            self.doomed.entry(id).or_insert(now + self.cfg.probe_timeout);
        }
    }

    fn doomed_now(&self, id: MemberId) -> bool {
        let need = self.witnesses_needed();
        let Some(k) = self.table.get(id) else { return false };
        let n = self.witnesses.get(&id).map_or(0, Vec::len);
        self.table.meta[k].alive() && id != self.id && n >= need
    }

    fn pronounce(&mut self, id: MemberId) {
        self.doomed.remove(&id);
        if !self.doomed_now(id) {
            return;
        }
        if let Some(k) = self.table.get(id) {
            let v = self.table.meta[k].version;
            self.table.set(k, v, DEAD);
            self.stats.pronounced += 1;
            self.touch(k);
            self.gone_member(id, true);
        }
    }

    fn probe(&mut self, id: MemberId, now: Duration) {
        let Some(k) = self.table.get(id) else { return };
        if !self.table.meta[k].alive() || id == self.id || self.probes.contains_key(&id) {
            return;
        }
        let a = self.table.addr(k);
        self.probes.insert(id, (now + self.cfg.probe_timeout, a));
        self.stats.probes += 1;
        self.send(a, Message::Probe);
    }

    fn witness(&mut self, id: MemberId, now: Duration) {
        let me = self.id;
        let Some(k) = self.table.get(id) else { return };
        if !self.table.meta[k].alive() || id == me {
            return;
        }
        self.probes.remove(&id);
        self.table.meta[k].refresh(now);
        let set = self.witnesses.entry(id).or_default();
        if let Err(p) = set.binary_search(&me) {
            set.insert(p, me);
            self.stats.witnessed += 1;
            self.touch(k);
        }
        self.check_witnesses(id, now);
    }

    /// Heard from `id` directly: its entry is fresh.
    fn heard(&mut self, id: MemberId, now: Duration) {
        if let Some(k) = self.table.get(id) {
            self.table.meta[k].refresh(now);
        }
    }

    /// A live member other than this node, at random (a few tries).
    fn random_member(&mut self) -> Option<(MemberId, Addr)> {
        let n = self.table.len();
        for _ in 0..4 {
            if n < 2 {
                return None;
            }
            let k = below(&mut self.rng, n);
            let id = self.table.id(k);
            if id != self.id && self.table.meta[k].alive() {
                return Some((id, self.table.addr(k)));
            }
        }
        None
    }

    /// The driver could not reach `addr`.
    fn on_unreachable(&mut self, addr: Addr, now: Duration) {
        let id = self.id_of(addr);
        self.sampler.forget(addr);
        if let Some(id) = id {
            self.witness(id, now);
        }
    }

    /// An exchange: this node's own entry first, the elections, and either the whole table
    /// (when it fits in [`Config::exchange_max`], or for a newcomer that asks) or the news
    /// still to be spread plus [`Config::exchange_len`] entries at random.
    fn exchange(&mut self, reply: bool, whole: bool, theirs: &[(u32, u64)]) -> Message {
        let me = self.table.get(self.id).expect("a joined node knows itself");
        let mut members = vec![self.info(me)];
        let n = self.table.len();
        let max = self.cfg.exchange_max;
        if whole {
            members.reserve_exact(n - 1);
            members.extend((0..n).filter(|&k| k != me).map(|k| self.info(k)));
            // Every piece of news went out once more.
            for _ in 0..self.news.len() {
                let Some((k, left)) = self.news.pop_front() else { break };
                if left > 1 {
                    self.news.push_back((k, left - 1));
                }
            }
        } else {
            let mut picked = BTreeSet::new();
            picked.insert(me as u32);
            let budget = max.saturating_sub(self.cfg.exchange_len);
            // The freshest news first (it goes out in the next exchanges until its count is
            // spent); the oldest is dropped beyond `4 * exchange_max` (anti-entropy below
            // makes up for it).
            let mut again = Vec::new();
            while members.len() <= budget {
                let Some((k, left)) = self.news.pop_back() else { break };
                if picked.insert(k) {
                    members.push(self.info(k as usize));
                }
                if left > 1 {
                    again.push((k, left - 1));
                }
            }
            self.news.extend(again.into_iter().rev());
            while self.news.len() > 4 * max {
                self.news.pop_front();
            }
            // Anti-entropy: the ranges of ids where the asker's digest differs from ours,
            // those where we know more ids first.
            if theirs.len() == DIGEST_BUCKETS && !self.table.digest.is_empty() {
                let mut ranges: Vec<(i64, usize)> = (0..DIGEST_BUCKETS)
                    .filter(|&r| self.table.digest[r] != theirs[r] && self.table.digest[r].0 > 0)
                    .map(|r| (i64::from(theirs[r].0) - i64::from(self.table.digest[r].0), r))
                    .collect();
                let shift = below(&mut self.rng, DIGEST_BUCKETS);
                ranges.sort_unstable_by_key(|&(d, r)| (d, (r + shift) % DIGEST_BUCKETS));
                for (_, r) in ranges {
                    if members.len() > max {
                        break;
                    }
                    for i in 0..self.table.ranges[r].len() {
                        if members.len() > max {
                            break;
                        }
                        let k = self.table.ranges[r][i];
                        if picked.insert(k) {
                            members.push(self.info(k as usize));
                        }
                    }
                }
            }
            let want = (members.len() + self.cfg.exchange_len).min(n).min(max + 1);
            for _ in 0..2 * self.cfg.exchange_len {
                if members.len() >= want {
                    break;
                }
                let k = below(&mut self.rng, n);
                if picked.insert(k as u32) {
                    members.push(self.info(k));
                }
            }
            if self.news.capacity() > 4 * self.news.len().max(64) {
                self.news.shrink_to(self.news.len() * 2);
            }
        }
        let elections = self.elections.iter().map(|(n, w)| (n.clone(), *w)).collect();
        let digest = if reply { Vec::new() } else { self.table.digest.clone() };
        Message::Exchange { reply, want_all: !self.synced, whole, members, elections, digest }
    }

    /// A message from the node listening at `from`.
    fn on_message(&mut self, from: Addr, msg: Message, now: Duration) {
        if !self.joined || self.gone {
            return;
        }
        match msg {
            Message::Shuffle { entries } => {
                let mut reply = self.sampler.subset(&mut self.rng, self.cfg.shuffle_len);
                reply.retain(|(id, _)| entries.first().is_none_or(|f| f.0 != *id));
                self.send(from, Message::ShuffleReply { entries: reply });
                if let Some(f) = entries.first().filter(|f| f.1 == from) {
                    self.heard(f.0, now);
                }
                self.sampler.merge(&entries, &mut self.rng);
            }
            Message::ShuffleReply { entries } => {
                self.sampler.merge(&entries, &mut self.rng);
                let peer = self
                    .sampler
                    .view
                    .iter()
                    .chain(self.sampler.fallback.iter())
                    .chain(self.sent_to.iter().map(|p| (p.1, p.0)).collect::<Vec<_>>().iter())
                    .find(|p| p.1 == from)
                    .copied();
                if let Some(p) = peer {
                    self.sampler.answered(p);
                    self.heard(p.0, now);
                }
            }
            Message::Exchange { reply, want_all, whole, members, elections, digest } => {
                for m in &members {
                    self.merge_member(m, now);
                    if self.gone {
                        return;
                    }
                }
                if whole {
                    self.synced = true;
                }
                if let Some(first) = members.first() {
                    if first.addr == from && first.state == State::Alive {
                        self.sampler.answered((first.id, from));
                        self.heard(first.id, now);
                        if self.probes.remove(&first.id).is_some() {
                            // It answered: a probe's worth.
                        }
                    }
                }
                for (name, w) in elections {
                    if self.table.get(w).is_some_and(|k| !self.table.meta[k].alive()) {
                        continue;
                    }
                    match self.elections.get(&name) {
                        Some(&cur) if cur <= w => {}
                        _ => self.set_winner(&name, w),
                    }
                }
                if !reply {
                    // A newcomer's first whole table: at most one a round from each node.
                    let give = want_all && self.last_whole.is_none_or(|t| t + self.cfg.interval <= now);
                    if give {
                        self.last_whole = Some(now);
                        self.stats.whole_sent += 1;
                    }
                    let m = self.exchange(true, give, &digest);
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
                let Some(id) = self.probes.iter().find(|(_, p)| p.1 == from).map(|(id, _)| *id) else { return };
                self.probes.remove(&id);
                if let Some(k) = self.table.get(id) {
                    self.table.meta[k].refresh(now);
                    let v = version.min(u64::from(u32::MAX)) as u32;
                    if v > self.table.meta[k].version {
                        self.table.set(k, v, ALIVE);
                        self.witnesses.remove(&id);
                        self.touch(k);
                    }
                }
            }
        }
    }

    /// When [`tick`](Self::tick) must be called next.
    fn next_deadline(&self) -> Option<Duration> {
        if !self.joined || self.gone {
            return None;
        }
        let mut t = self.next_round;
        if let Some(&w) = self.waits.values().min() {
            t = t.min(w);
        }
        if let Some(p) = self.probes.values().map(|p| p.0).min() {
            t = t.min(p);
        }
        if let Some(&d) = self.doomed.values().min() {
            t = t.min(d);
        }
        Some(t)
    }

    /// Runs what is due.
    fn tick(&mut self, now: Duration) {
        if !self.joined || self.gone {
            return;
        }
        if now >= self.next_round {
            self.next_round = next_period(self.next_round, self.cfg.interval, now);
            self.rounds += 1;
            // Peer sampling: a shuffle; a newcomer's first ones go to each bootstrap address
            // in turn (two members that started at once, each alone, given to the next
            // newcomers as seeds, would otherwise stay two pools).
            let boot = self.sampler.bootstrap.get(self.rounds as usize - 1).copied();
            if let Some(to) = boot.or_else(|| self.sampler.sample(&mut self.rng)) {
                let mut entries = vec![(self.id, self.addr)];
                let sub = self.sampler.subset(&mut self.rng, self.cfg.shuffle_len.saturating_sub(1));
                self.sampler.sent = sub.iter().map(|p| p.0).collect();
                entries.extend(sub);
                self.send_to(to, Message::Shuffle { entries });
            }
            // Gossip of members and elections; a newcomer's first round only shuffles with
            // the bootstrap address, which answers with peers to gossip with (else in a large
            // pool every newcomer's first exchange, and its answer, crowd that one link).
            // Every fourth round the peer is any member known (views that happen to hold only
            // part of the pool do not keep the member tables apart).
            let first = self.rounds == 1 && self.sampler.view.is_empty() && !self.synced;
            let any = if self.rounds % 4 == 0 { self.random_member() } else { None };
            if let Some((id, a)) = any {
                self.sent_to.push_back((a, id));
            }
            if let Some(to) = any.map(|p| p.1).or_else(|| self.sampler.sample(&mut self.rng)).filter(|_| !first) {
                let m = self.exchange(false, false, &[]);
                self.send_to(to, m);
            }
            // Suspicion: the members not heard from directly for `timeout` are probed, at
            // most `probes_per_round` a round (O(1) messages a round whatever the pool's
            // size), found by a scan that goes round the table once per `timeout`.
            let n = self.table.len();
            let per_timeout = (self.cfg.timeout.as_secs_f64() / self.cfg.interval.as_secs_f64().max(1e-3)).max(1.0);
            let scan = ((n as f64 / per_timeout).ceil() as usize).max(4 * self.cfg.probes_per_round).min(n);
            let mut probed = 0;
            for _ in 0..scan {
                if probed >= self.cfg.probes_per_round {
                    break;
                }
                self.cursor = (self.cursor + 1) % n;
                let (id, s) = (self.table.id(self.cursor), self.table.meta[self.cursor]);
                if id != self.id
                    && s.alive()
                    && !self.probes.contains_key(&id)
                    && s.refreshed() + self.cfg.timeout <= now
                {
                    self.probe(id, now);
                    probed += 1;
                }
            }
        }
        // Probes not answered (checked every tick: at most a round late).
        let expired: Vec<MemberId> = self.probes.iter().filter(|(_, p)| p.0 <= now).map(|(id, _)| *id).collect();
        for id in expired {
            self.witness(id, now);
        }
        let due: Vec<MemberId> = self.doomed.iter().filter(|(_, &d)| d <= now).map(|(id, _)| *id).collect();
        for id in due {
            self.pronounce(id);
        }
        let expired: Vec<String> = self.waits.iter().filter(|(_, &d)| d <= now).map(|(n, _)| n.clone()).collect();
        for name in expired {
            self.waits.remove(&name);
            self.out.push_back(Action::ElectionResult { name, winner: None });
        }
    }
}

impl Machine for Node {
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

    /// A round (shuffle, exchange, the suspicion scan), probes, pronouncements, election
    /// waits.
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
    use super::*;
    use proptest::prelude::*;

    impl Core for Node {
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
            net.with(i, |c, now| c.handle_input(now, Input::Join).unwrap());
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
            net.with(3, |c, now| c.handle_input(now, Input::Leave).unwrap());
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
            net.with(i, |c, now| c.handle_input(now, Input::Elect("master".into())).unwrap());
        }
        net.with(0, |c, now| {
            c.handle_input(now, Input::GetElectionResult { name: "other".into(), timeout: ms(1000) }).unwrap()
        });
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

    /// A pool of `n` under the default configuration (1 s rounds, probes after 120 s):
    /// every join seen everywhere within `join_bound` seconds, no live member ever
    /// pronounced dead; then the winner of an election is killed (its address refused, as
    /// `kill -9` makes it), seen dead and replaced everywhere within 15 s, and a leave is
    /// seen everywhere within 10 s.
    fn default_pool_converges(n: usize, join_bound: u64, seed: u64) {
        let cfg = Config::default();
        let mut net = pool(n, cfg, seed, 5000);
        let mut t = 5000;
        while (0..n).any(|i| node(&net, i).pool_size() != n) {
            t += 1000;
            assert!(t <= join_bound * 1000, "n {n}: not every join everywhere after {t} ms");
            net.run_until(ms(t));
        }
        eprintln!("n {n}: every join everywhere at {t} ms");
        for i in 0..n {
            let mut seen = net.joins_seen(i);
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), n, "node {i}: each join told once");
        }
        for i in 0..n {
            net.with(i, |c, now| c.handle_input(now, Input::Elect("master".into())).unwrap());
        }
        net.run_until(ms(t + 10_000));
        let lowest = (0..n).map(id).min().unwrap();
        assert!((0..n).all(|i| node(&net, i).election("master") == Some(lowest)));
        let w = (0..n).find(|&i| id(i) == lowest).unwrap();
        let killed = t + 10_000;
        net.crash(w);
        let next = (0..n).filter(|&i| i != w).map(id).min().unwrap();
        let leaver = (0..n).find(|&i| i != w && id(i) != next).unwrap();
        let mut t = killed;
        while (0..n)
            .filter(|&i| i != w)
            .any(|i| !node(&net, i).is_dead(id(w)) || node(&net, i).election("master") != Some(next))
        {
            t += 500;
            assert!(
                t <= killed + 15_000,
                "n {n}: the killed winner not dead and replaced everywhere after {} ms",
                t - killed
            );
            net.run_until(ms(t));
        }
        eprintln!("n {n}: died and re-elected everywhere {} ms after the kill", t - killed);
        net.with(leaver, |c, now| c.handle_input(now, Input::Leave).unwrap());
        let left_at = t;
        while (0..n).filter(|&i| i != w && i != leaver).any(|i| net.told(i, &Event::Left { id: id(leaver) }).is_none())
        {
            t += 500;
            assert!(t <= left_at + 10_000, "n {n}: the leave not seen everywhere after {} ms", t - left_at);
            net.run_until(ms(t));
        }
        // Only the killed member was ever pronounced dead, by anyone.
        for i in 0..n {
            for (_, e) in &net.delivered[i] {
                if let Event::Died { id: d } = e {
                    assert_eq!(*d, id(w), "node {i} was told a live member died");
                }
            }
        }
    }

    #[test]
    fn two_hundred_members_converge_fast_with_the_default_config_and_no_live_one_dies() {
        // The whole table fits an exchange. (Before: 20 entries an exchange, ~60 s.)
        default_pool_converges(200, 20, 11);
    }

    #[test]
    fn six_hundred_members_converge_fast_by_news_and_no_live_one_dies() {
        // Beyond `exchange_max`: news, random entries and newcomers' whole tables.
        default_pool_converges(600, 30, 12);
    }

    #[test]
    fn strong_consistency_is_refused_and_parts_can_be_off() {
        let a = addr(1);
        assert!(Node::new(1, a, vec![], Config::default(), Consistency::STRONG, 0).is_err());
        let off = Consistency { joins: None, elections: None };
        let mut nd = Node::new(1, a, vec![], Config::default(), off, 0).unwrap();
        nd.handle_input(Duration::ZERO, Input::Join).unwrap();
        assert_eq!(nd.handle_input(Duration::ZERO, Input::Elect("x".into())), Err(PartOff));
        assert!(nd.poll_output().is_none());
        assert_eq!(nd.pool_size(), 1);
    }

    #[test]
    fn an_observer_is_told_the_live_members_without_joining() {
        let mut nd = Node::new(1, addr(1), vec![], test_cfg(), Consistency::WEAK, 0).unwrap();
        // Not joined yet: nothing to say.
        nd.handle_input(Duration::ZERO, Input::Message { from: addr(99), msg: Message::ListReq }).unwrap();
        assert!(nd.poll_output().is_none());
        nd.handle_input(Duration::ZERO, Input::Join).unwrap();
        let info = |id: u64, state| MemberInfo { id, addr: addr(id as usize), version: 1, state, witnesses: vec![] };
        let members = vec![info(2, State::Alive), info(3, State::Alive), info(4, State::Left)];
        nd.handle_input(
            Duration::ZERO,
            Input::Message {
                from: addr(2),
                msg: Message::Exchange {
                    reply: true,
                    want_all: false,
                    whole: false,
                    members,
                    elections: vec![],
                    digest: vec![],
                },
            },
        )
        .unwrap();
        while nd.poll_output().is_some() {}
        nd.handle_input(Duration::ZERO, Input::Message { from: addr(99), msg: Message::ListReq }).unwrap();
        let answer = std::iter::from_fn(|| nd.poll_output()).find_map(|a| match a {
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
        nd.handle_input(Duration::ZERO, Input::Join).unwrap();
        nd.handle_input(
            Duration::ZERO,
            Input::Message { from: addr(2), msg: Message::ShuffleReply { entries: vec![(3, addr(3))] } },
        )
        .unwrap();
        nd.sampler.answered((2, addr(2)));
        assert_eq!(nd.sampler.sample(&mut rng), Some(addr(3)));
        nd.handle_input(Duration::ZERO, Input::Unreachable(addr(3))).unwrap();
        assert_eq!(nd.sampler.sample(&mut rng), Some(addr(2)));
        nd.handle_input(Duration::ZERO, Input::Unreachable(addr(2))).unwrap();
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
                (any::<bool>(), any::<bool>(), any::<bool>()),
                proptest::collection::vec(arb_info(), 0..4),
                proptest::collection::vec((arb::name(), any::<u64>()), 0..3),
                proptest::collection::vec((any::<u32>(), any::<u64>()), 0..3)
            )
                .prop_map(|((reply, want_all, whole), members, elections, digest)| Message::Exchange {
                    reply,
                    want_all,
                    whole,
                    members,
                    elections,
                    digest
                }),
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
                net.with(i, |c, now| { let _ = c.handle_input(now, Input::Elect("e".into())); });
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
