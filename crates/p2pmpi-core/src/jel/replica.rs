//! The central registry as a replicated state machine: what several supernodes run so that
//! a pool survives the death of the one serving it (issue 15 §3).
//!
//! # The idea
//!
//! A [`Server`] is deterministic: the same inputs, at the same times, from the same seed,
//! give the same stream of events and the same actions. So the supernodes do not replicate
//! the stream itself but the **inputs** of the pool's server, as a log of [`Entry`]s — a
//! member's message, a connection that ended ([`Input::Unreachable`]), a timer that fired
//! ([`Input::Tick`]) — each stamped with the time the leader read on its clock. A consensus
//! log (Raft: the leader proposes, an entry is *committed* once a majority stored it) orders
//! them; every supernode applies the committed entries, in order, to its own [`Replica`],
//! and all hold the same pool. Only the leader's replica carries its actions out (it holds
//! the members' connections); a follower's are dropped.
//!
//! Why inputs rather than events: an action is only ever taken on a committed input, so no
//! member can be told an event that a new leader would not have — the event numbered `k` is
//! the same everywhere, whichever supernode computed it. An event the old leader computed
//! but did not send before it died is in the new leader's replica too: the members find the
//! gap (the server's periodic `Sync`, their heartbeats' `Ack`) and fetch it. A member's
//! message that reached the old leader but was not committed is lost as on any broken
//! connection: the member's retries (its heartbeat, its join time-out) send it again.
//!
//! # Time
//!
//! Entries carry the leader's clock; a replica's time is the largest seen so far
//! ([`Replica::clock`]), so that a new leader whose clock is behind continues from there
//! (leases and deadlines never go back). The replica's own clock never fires anything: the
//! leader proposes a [`Input::Tick`] whenever the server's deadline
//! ([`Machine::poll_timeout`] of [`Replica::server`]) has passed ([`Replica::due`]).
//!
//! A [`Replica`] is a [`Machine`] fed [`Step`]s (the committed entries, leadership changes)
//! whose outputs are the server's actions, the leader's only.
//!
//! # Leadership changes
//!
//! The connections of the members end with the old leader: the new one must **not** feed
//! those ends as `Unreachable` (that would be a death); only the leader feeds the ends of
//! its own connections. The members reconnect to the new leader (the driver's business) and
//! go on with their stream where they were; a member that does not come back is found by
//! its lease like any silent member.
//!
//! This module is the pure part; the consensus itself (raft-rs, `p2pmpi_jel::consensus`;
//! docs/jel.md says why) and the connections belong to the supernode's driver.

use super::central::{self, Config, Message, Server, ServerInput};
use super::wire::{put_addr, put_var, DecodeError, Reader};
use super::{Action, Addr};
use crate::machine::{Machine, Time};
use std::collections::VecDeque;
use std::time::Duration;

/// One input of a pool's server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The pool is served from now on ([`ServerInput::Start`]).
    Start,
    /// A member's message ([`ServerInput::Message`]).
    Message { from: Addr, msg: Message },
    /// The leader's connection to this member ended without a `Leave`
    /// ([`ServerInput::Unreachable`]).
    Unreachable { addr: Addr },
    /// A deadline passed (the server's [`Machine::handle_timeout`]).
    Tick,
}

/// One entry of the replicated log: an input and the leader's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub now: Duration,
    pub input: Input,
}

/// The compact form of an entry (a consensus log stores bytes).
pub fn encode(e: &Entry) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    put_var(&mut out, e.now.as_secs());
    put_var(&mut out, u64::from(e.now.subsec_nanos()));
    match &e.input {
        Input::Start => out.push(0),
        Input::Message { from, msg } => {
            out.push(1);
            put_addr(&mut out, from);
            central::encode_into(msg, &mut out);
        }
        Input::Unreachable { addr } => {
            out.push(2);
            put_addr(&mut out, addr);
        }
        Input::Tick => out.push(3),
    }
    out
}

/// Decodes an entry ([`encode`]'s form); rejects anything malformed, never panics.
pub fn decode(bytes: &[u8]) -> Result<Entry, DecodeError> {
    let mut r = Reader::new(bytes);
    let secs = r.var()?;
    let nanos = r.var()?;
    if nanos >= 1_000_000_000 {
        return Err(DecodeError::BadField("nanoseconds"));
    }
    let now = Duration::new(secs, nanos as u32);
    let input = match r.u8()? {
        0 => Input::Start,
        1 => {
            let from = r.addr()?;
            Input::Message { from, msg: central::decode(r.rest())? }
        }
        2 => Input::Unreachable { addr: r.addr()? },
        3 => Input::Tick,
        t => return Err(DecodeError::BadTag(t)),
    };
    r.finish()?;
    Ok(Entry { now, input })
}

/// One supernode's copy of a pool's server, fed the committed entries.
#[derive(Debug, Clone)]
pub struct Replica {
    server: Server,
    /// The index of the next entry to apply (the first is 1, as in Raft).
    next: u64,
    clock: Duration,
    leader: bool,
    out: VecDeque<Action<Message>>,
}

impl Replica {
    /// A replica of a pool created with `cfg`; every replica of the pool must be given the
    /// same `seed` (the pool's creation record carries both).
    pub fn new(cfg: Config, seed: u64) -> Replica {
        Replica { server: Server::new(cfg, seed), next: 1, clock: Duration::ZERO, leader: false, out: VecDeque::new() }
    }

    /// The server as the entries applied so far left it.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// The index of the next entry to apply.
    pub fn next_index(&self) -> u64 {
        self.next
    }

    /// The time of the latest entry applied: a new leader stamps its entries no earlier.
    pub fn clock(&self) -> Duration {
        self.clock
    }

    pub fn is_leader(&self) -> bool {
        self.leader
    }

    fn set_leader(&mut self, leader: bool) {
        self.leader = leader;
        if !leader {
            self.out.clear();
        }
    }

    fn apply(&mut self, index: u64, e: Entry) -> Result<(), Gap> {
        if index < self.next {
            return Ok(());
        }
        if index > self.next {
            return Err(Gap { next: self.next, index });
        }
        self.next += 1;
        self.clock = self.clock.max(e.now);
        let now = self.clock;
        let input = match e.input {
            Input::Start => Some(ServerInput::Start),
            Input::Message { from, msg } => Some(ServerInput::Message { from, msg }),
            Input::Unreachable { addr } => Some(ServerInput::Unreachable(addr)),
            Input::Tick => None,
        };
        match input {
            Some(input) => match self.server.handle_input(now, input) {
                Ok(()) => {}
                Err(never) => match never {},
            },
            None => self.server.handle_timeout(now),
        }
        while let Some(a) = self.server.poll_output() {
            if self.leader {
                self.out.push_back(a);
            }
        }
        Ok(())
    }

    /// The leader's clock reads `now`: the entry to propose, if the server's deadline passed
    /// (stamped no earlier than [`clock`](Self::clock)). `None` for a follower.
    pub fn due(&self, now: Duration) -> Option<Entry> {
        let now = now.max(self.clock);
        (self.leader && self.server.poll_timeout().is_some_and(|d| d <= now))
            .then_some(Entry { now, input: Input::Tick })
    }

    /// The entry that carries a member's message, stamped for the log.
    pub fn stamp(&self, now: Duration, input: Input) -> Entry {
        Entry { now: now.max(self.clock), input }
    }
}

/// What the driver feeds a [`Replica`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The committed entry `index` (the first is 1, as in Raft), applied at its own time (the
    /// replica's clock, not the driver's). An index already applied is ignored (a log replayed
    /// from a snapshot's point); one beyond the next is rejected ([`Gap`]): the entries in
    /// between are missing.
    Committed { index: u64, entry: Entry },
    /// This supernode became the leader (its replica's actions are carried out from now on)
    /// or stopped being it (they are dropped; those still queued too).
    Leader(bool),
}

/// A committed entry beyond the next one: the entries in between are missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// The index the replica expects.
    pub next: u64,
    /// The index it was given.
    pub index: u64,
}

impl Machine for Replica {
    type Input = Step;
    type Output = Action<Message>;
    type Rejected = Gap;

    /// `now` is not used: a committed entry carries its time.
    fn handle_input(&mut self, _now: Time, step: Step) -> Result<(), Gap> {
        match step {
            Step::Committed { index, entry } => self.apply(index, entry),
            Step::Leader(leader) => {
                self.set_leader(leader);
                Ok(())
            }
        }
    }

    /// Nothing: a replica's timers fire only through committed [`Input::Tick`]s (see
    /// [`Replica::due`]), or the replicas would diverge.
    fn handle_timeout(&mut self, _now: Time) {}

    /// The next action to carry out (the leader's only).
    fn poll_output(&mut self) -> Option<Action<Message>> {
        super::pop_action(&mut self.out)
    }

    /// Always `None`: see [`Machine::handle_timeout`]; the leader proposes a tick at the
    /// server's deadline.
    fn poll_timeout(&self) -> Option<Time> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::central::{Client, Dissemination};
    use super::super::testnet::{addr, ms, Core, Net};
    use super::super::wire::arb;
    use super::super::{Consistency, Event, Input as MemberInput, MemberId, PartOff};
    use super::*;
    use proptest::prelude::*;

    /// Three supernodes behind the registry's address: inputs are proposed to a log and
    /// committed `COMMIT` later (a majority stored them); every live replica applies them;
    /// the leader's actions go out. Killing the leader drops what it had not committed, and
    /// the next live replica leads.
    #[derive(Debug)]
    struct Cluster {
        replicas: Vec<Option<Replica>>,
        leader: usize,
        log: Vec<Entry>,
        pending: VecDeque<(Duration, Entry)>,
    }

    const COMMIT: Duration = Duration::from_millis(3);

    impl Cluster {
        fn new(n: usize, cfg: Config, seed: u64) -> Cluster {
            let mut replicas: Vec<Option<Replica>> = (0..n).map(|_| Some(Replica::new(cfg, seed))).collect();
            replicas[0].as_mut().unwrap().handle_input(Duration::ZERO, Step::Leader(true)).unwrap();
            let mut c = Cluster { replicas, leader: 0, log: Vec::new(), pending: VecDeque::new() };
            c.propose(Duration::ZERO, Input::Start);
            c.commit(Duration::ZERO + COMMIT);
            c
        }

        fn lead(&self) -> &Replica {
            self.replicas[self.leader].as_ref().expect("a live leader")
        }

        fn propose(&mut self, now: Duration, input: Input) {
            let e = self.lead().stamp(now, input);
            self.pending.push_back((now + COMMIT, e));
        }

        fn commit(&mut self, now: Duration) {
            while self.pending.front().is_some_and(|p| p.0 <= now) {
                let (_, e) = self.pending.pop_front().unwrap();
                // Through the bytes a consensus log would store.
                let e = decode(&encode(&e)).expect("an entry decodes");
                self.log.push(e.clone());
                let index = self.log.len() as u64;
                for r in self.replicas.iter_mut().flatten() {
                    assert_eq!(r.handle_input(now, Step::Committed { index, entry: e.clone() }), Ok(()));
                }
            }
        }

        /// kill -9 of the leader: what it had not committed is lost; the next live replica,
        /// which applied every committed entry, leads. (`kill` below also drops what it
        /// had sent that was still on its way.)
        fn kill_leader(&mut self) {
            self.replicas[self.leader] = None;
            self.pending.clear();
            self.leader = (0..self.replicas.len()).find(|&i| self.replicas[i].is_some()).expect("a survivor");
            self.replicas[self.leader].as_mut().unwrap().handle_input(Duration::ZERO, Step::Leader(true)).unwrap();
        }
    }

    #[derive(Debug)]
    enum RNode {
        Registry(Box<Cluster>),
        Client(Box<Client>),
    }

    impl Machine for RNode {
        type Input = MemberInput<Message>;
        type Output = Action<Message>;
        type Rejected = PartOff;
        fn handle_input(&mut self, now: Time, input: MemberInput<Message>) -> Result<(), PartOff> {
            match self {
                RNode::Registry(c) => {
                    let input = match input {
                        MemberInput::Message { from, msg } => Input::Message { from, msg },
                        MemberInput::Unreachable(addr) => Input::Unreachable { addr },
                        other => panic!("a member's input for the registry: {other:?}"),
                    };
                    c.propose(now, input);
                    Ok(())
                }
                RNode::Client(c) => c.handle_input(now, input),
            }
        }
        fn handle_timeout(&mut self, now: Time) {
            match self {
                RNode::Registry(c) => {
                    c.commit(now);
                    if c.pending.is_empty() {
                        if let Some(e) = c.lead().due(now) {
                            c.pending.push_back((now + COMMIT, e));
                        }
                    }
                }
                RNode::Client(c) => c.handle_timeout(now),
            }
        }
        fn poll_timeout(&self) -> Option<Time> {
            match self {
                RNode::Registry(c) => match c.pending.front() {
                    Some(p) => Some(p.0),
                    None => c.lead().server().poll_timeout(),
                },
                RNode::Client(c) => c.poll_timeout(),
            }
        }
        fn poll_output(&mut self) -> Option<Action<Message>> {
            match self {
                RNode::Registry(c) => {
                    let l = c.leader;
                    c.replicas[l].as_mut().and_then(Replica::poll_output)
                }
                RNode::Client(c) => c.poll_output(),
            }
        }
    }

    impl Core for RNode {
        type Msg = Message;
        fn message(&self, from: Addr, msg: Message) -> MemberInput<Message> {
            MemberInput::Message { from, msg }
        }
        fn unreachable(&self, to: Addr) -> MemberInput<Message> {
            MemberInput::Unreachable(to)
        }
        fn wire(msg: &Message) -> Message {
            central::decode(&central::encode(msg)).expect("what is encoded decodes")
        }
    }

    fn id(i: usize) -> MemberId {
        0x2000 + i as u64 * 13
    }

    /// Runs on from `at`, a millisecond at a time, until the leader holds inputs it has not
    /// committed (so that the kill loses some), then kills it and drops its messages still
    /// on their way (welcomes and events it computed but had not written). Returns how many
    /// inputs and messages were lost.
    fn kill_leader_busy(net: &mut Net<RNode>, at: Duration) -> (usize, usize) {
        let mut t = at;
        net.run_until(t);
        for _ in 0..5000 {
            if !cluster(net).pending.is_empty() {
                break;
            }
            t += ms(1);
            net.run_until(t);
        }
        let lost = cluster(net).pending.len();
        if let Some(RNode::Registry(c)) = net.nodes[0].as_mut() {
            c.kill_leader();
        }
        (lost, net.drop_in_flight_from(0))
    }

    fn cluster(net: &Net<RNode>) -> &Cluster {
        match net.nodes[0].as_ref() {
            Some(RNode::Registry(c)) => c,
            _ => panic!("node 0 is the registry"),
        }
    }

    /// Reliable joins: every member is told, after its own join, exactly the events of the
    /// stream that follow it, in the stream's order — across leader changes.
    fn assert_streams(net: &Net<RNode>, live: &[usize]) {
        let c = cluster(net);
        let stream = c.lead().server().log();
        for &i in live {
            let me = stream
                .iter()
                .position(|e| matches!(e, Event::Joined { id: x, .. } if *x == id(i)))
                .unwrap_or_else(|| panic!("member {i} never joined"));
            let after = &stream[me + 1..];
            let told: Vec<&Event> = net.delivered[i].iter().map(|(_, e)| e).collect();
            assert!(
                told.len() >= after.len(),
                "member {i} was told {} events, the stream has {}",
                told.len(),
                after.len()
            );
            let tail: Vec<&Event> = told[told.len() - after.len()..].to_vec();
            assert_eq!(tail, after.iter().collect::<Vec<_>>(), "member {i}'s stream differs");
        }
    }

    #[test]
    fn replicas_fed_the_same_entries_hold_the_same_pool_and_only_the_leader_acts() {
        let cfg = Config::new(Dissemination::Serial);
        let (mut a, mut b) = (Replica::new(cfg, 7), Replica::new(cfg, 7));
        a.handle_input(ms(0), Step::Leader(true)).unwrap();
        let entries = [
            Entry { now: ms(0), input: Input::Start },
            Entry { now: ms(5), input: Input::Message { from: addr(1), msg: Message::Join { id: 1, addr: addr(1) } } },
            Entry { now: ms(9), input: Input::Message { from: addr(2), msg: Message::Join { id: 2, addr: addr(2) } } },
            Entry { now: ms(40), input: Input::Tick },
            Entry { now: ms(50), input: Input::Unreachable { addr: addr(1) } },
            // A clock behind: the replica's time does not go back.
            Entry { now: ms(45), input: Input::Tick },
        ];
        for (k, e) in entries.iter().enumerate() {
            let index = k as u64 + 1;
            assert_eq!(a.handle_input(ms(0), Step::Committed { index, entry: e.clone() }), Ok(()));
            assert_eq!(b.handle_input(ms(0), Step::Committed { index, entry: e.clone() }), Ok(()));
            assert!(b.poll_output().is_none(), "a follower acted");
        }
        assert_eq!(a.server().log(), b.server().log());
        assert_eq!(a.server().members(), [2]);
        assert_eq!(a.clock(), ms(50));
        assert!(!a.drain_outputs().is_empty());
        assert_eq!(a.poll_timeout(), None, "a replica's own clock fires nothing");
        // Replayed and out-of-order indexes.
        assert_eq!(a.handle_input(ms(0), Step::Committed { index: 3, entry: entries[2].clone() }), Ok(()));
        let e = entries[3].clone();
        assert_eq!(a.handle_input(ms(0), Step::Committed { index: 9, entry: e }), Err(Gap { next: 7, index: 9 }));
        assert_eq!(a.next_index(), 7);
        // A follower proposes nothing; a leader proposes a tick once a deadline passed.
        assert_eq!(b.due(ms(10_000)), None);
        b.handle_input(ms(0), Step::Leader(true)).unwrap();
        assert_eq!(b.due(ms(10_000)).map(|e| e.input), Some(Input::Tick));
        assert_eq!(b.due(ms(1)).map(|e| e.now).unwrap_or(ms(50)), ms(50));
    }

    #[test]
    fn killing_the_leader_loses_and_reorders_no_event() {
        let cfg = Config {
            heartbeat_interval: ms(500),
            lease: ms(2000),
            ping_timeout: ms(500),
            fallback_interval: ms(1000),
            ..Config::new(Dissemination::Serial)
        };
        let n = 10;
        for seed in 0..6u64 {
            let mut net: Net<RNode> = Net::new(n + 1, seed);
            net.nodes[0] = Some(RNode::Registry(Box::new(Cluster::new(3, cfg, seed))));
            for i in 1..=n {
                let c = Client::new(id(i), addr(i), addr(0), cfg, Consistency::STRONG, seed + i as u64);
                net.nodes[i] = Some(RNode::Client(Box::new(c)));
            }
            // Joins every 10 ms from 10 ms on, the leader killed at a seed-dependent time
            // among them, an election, a leave, a crash, and the new leader killed too.
            let kill_at = ms(25 + seed * 13);
            let mut killed = false;
            let mut losses = (0, 0);
            for step in 0..=60u64 {
                let now = ms(step * 10);
                if !killed && now >= kill_at {
                    losses = kill_leader_busy(&mut net, kill_at);
                    killed = true;
                }
                net.run_until(now.max(net.now));
                if (1..=n as u64).contains(&step) {
                    net.with(step as usize, |c, now| {
                        if let RNode::Client(c) = c {
                            c.handle_input(now, MemberInput::Join).unwrap();
                        }
                    });
                }
                if step == 20 {
                    net.with(2, |c, now| {
                        if let RNode::Client(c) = c {
                            c.handle_input(now, MemberInput::Elect("master".into())).unwrap();
                        }
                    });
                }
            }
            net.with(3, |c, now| {
                if let RNode::Client(c) = c {
                    c.handle_input(now, MemberInput::Leave).unwrap();
                }
            });
            net.crash(4);
            let again = kill_leader_busy(&mut net, ms(1400));
            assert!(
                losses.0 + losses.1 > 0 && again.0 + again.1 > 0,
                "seed {seed}: the kills lost nothing: {losses:?} {again:?}"
            );
            net.run_until(ms(12_000));
            let live: Vec<usize> = (1..=n).filter(|&i| i != 3 && i != 4).collect();
            assert_streams(&net, &live);
            let c = cluster(&net);
            assert_eq!(c.replicas.iter().flatten().count(), 1, "seed {seed}: two of three killed");
            let stream = c.lead().server().log();
            assert!(stream.contains(&Event::Left { id: id(3) }), "seed {seed}: {stream:?}");
            assert!(stream.contains(&Event::Died { id: id(4) }), "seed {seed}: {stream:?}");
            // Every join once.
            for i in 1..=n {
                let joins = stream.iter().filter(|e| matches!(e, Event::Joined { id: x, .. } if *x == id(i))).count();
                assert_eq!(joins, 1, "seed {seed}: member {i} joined {joins} times");
            }
            for &i in &live {
                let RNode::Client(cl) = net.nodes[i].as_ref().unwrap() else { unreachable!() };
                assert_eq!(cl.pool_size(), live.len(), "seed {seed}: member {i}");
                assert_eq!(cl.election("master"), Some(id(2)), "seed {seed}: member {i}");
            }
        }
    }

    fn arb_entry() -> impl Strategy<Value = Entry> {
        let input = prop_oneof![
            Just(Input::Start),
            Just(Input::Tick),
            arb::addr().prop_map(|addr| Input::Unreachable { addr }),
            (arb::addr(), any::<u64>(), arb::addr())
                .prop_map(|(from, id, addr)| Input::Message { from, msg: Message::Join { id, addr } }),
            (arb::addr(), arb::name()).prop_map(|(from, name)| Input::Message { from, msg: Message::Elect { name } }),
            (arb::addr(), any::<u64>()).prop_map(|(from, next)| Input::Message { from, msg: Message::Ack { next } }),
        ];
        (any::<u64>(), 0u32..1_000_000_000, input).prop_map(|(s, n, input)| Entry { now: Duration::new(s, n), input })
    }

    proptest! {
        #[test]
        fn entries_roundtrip(e in arb_entry()) {
            prop_assert_eq!(decode(&encode(&e)), Ok(e.clone()));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(e) = decode(&bytes) {
                prop_assert_eq!(decode(&encode(&e)), Ok(e));
            }
        }
    }
}
