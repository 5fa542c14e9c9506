//! JEL — Join-Elect-Leave resource tracking (Drost et al., SPEC §14) as sans-IO cores.
//!
//! A *pool* is the set of nodes of one computation (any program, not only MPI). Every member
//! is told who **joined** (a newcomer is also told of every earlier member), who **left**
//! gracefully and who **died**; anyone may report a suspicion with `maybe_dead`. **Elections**
//! are by name: `elect(name)` stands and returns the winner, `get_election_result(name)` asks
//! without standing (with a time-out); when a winner leaves or dies a new one is chosen among
//! the remaining candidates.
//!
//! # Consistency ([`Consistency`], chosen when joining)
//!
//! * joins and leaves: [`JoinLeave::Reliable`] — the same events in the same order at every
//!   member (MPI builds ranks from it) — or [`JoinLeave::Unreliable`] — best effort, possibly
//!   out of order or missing; or `None`: not used.
//! * elections: [`Elections::Uniform`] — one winner, known everywhere — or
//!   [`Elections::NonUniform`] — converges to one winner in unbounded time; or `None`.
//!
//! An implementation may give more than was asked (the central one always delivers one
//! totally ordered stream) but never less: the distributed one refuses reliable joins and
//! uniform elections ([`Unsupported`]).
//!
//! # The implementations
//!
//! * [`central`]: a [`central::Server`] orders every change into one numbered stream of
//!   [`Event`]s, grants leases (a silent member is pinged, then declared dead), runs the
//!   elections, and disseminates the stream by one of five [`central::Dissemination`]
//!   strategies — serial send, peer bootstrap, a binomial broadcast tree built from the stream
//!   itself, gossip and adaptive gossip — each backed by a periodic fallback that brings every
//!   member up to date. A [`central::Client`] joins, leaves, stands, delivers the events in
//!   order and fetches the ones it missed.
//! * [`distributed`]: no server. A peer-sampling service (a small random view refreshed by
//!   shuffles, with a fallback cache of peers that answered) feeds a gossip of members and
//!   elections; a silent member is probed, and pronounced dead once enough members witnessed
//!   its silence; a conflicting election resolves to the lowest id.
//!
//! # Driving a core
//!
//! Every core ([`central::Server`], [`central::Client`], [`distributed::Node`], and the
//! server's replicated form [`replica::Replica`]) is a [`Machine`]: it does no I/O, reads no
//! clock and draws no entropy but the seed it was given. The driver passes the time (a
//! [`Time`] since any fixed origin) with every input — a member's are the [`Input`]s: the
//! application's requests (join, leave, `maybe_dead`, elections), the messages, the
//! addresses it could not reach — and drains the outputs, the [`Action`]s:
//!
//! * [`Action::Send`]: write the message (the module's `encode`, framed by the driver, e.g.
//!   with a length prefix) to the node listening at `to`, opening a connection if needed. The
//!   receiving driver `decode`s it and feeds [`Input::Message`] with the sender's *listening*
//!   address `from` (a driver sends its own listening address first on every connection it
//!   opens, so that the receiver knows it). When `to` cannot be reached (refused, reset before
//!   the message was written, connect time-out), feed [`Input::Unreachable`].
//! * [`Action::Deliver`]: an [`Event`] for the application (callback or channel), in order.
//! * [`Action::ElectionResult`]: the answer to [`Input::Elect`] or
//!   [`Input::GetElectionResult`] (`None`: the time-out passed with no winner known).
//! * Call [`Machine::handle_timeout`] at [`Machine::poll_timeout`] (and whenever convenient:
//!   it is cheap).
//!
//! A thin driver thus mirrors the k-monitor's ([`crate::kmonitor`]): one thread, a listening
//! socket, a poll over the connections, and the loop `handle_timeout(now)` → drain outputs →
//! poll with the time-out `poll_timeout() − now` → feed inputs. The simulator (`p2pmpi-sim
//! jel`) drives the very same cores in virtual time with a bandwidth-limited network.
//!
//! [`Machine`]: crate::machine::Machine
//! [`Machine::handle_timeout`]: crate::machine::Machine::handle_timeout
//! [`Machine::poll_timeout`]: crate::machine::Machine::poll_timeout
//! [`Time`]: crate::machine::Time

pub mod central;
pub mod distributed;
mod members;
pub mod replica;
mod wire;

pub use crate::codec::DecodeError;

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::fmt;
// Address values only (where a member can be reached, as data in events): the core opens no
// socket and resolves no name; the driver does all I/O and hands addresses in.
use core::net::SocketAddr;
use std::time::Duration;

/// A member's identity: an opaque number unique in the pool. The distributed implementation
/// draws it at random (the seed's UUIDs) and lets the lowest id win conflicting elections.
pub type MemberId = u64;

/// Where a member (or the server) listens.
pub type Addr = SocketAddr;

/// A change of the pool, as delivered to the application.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Event {
    /// `id` joined; it listens at `addr`.
    Joined { id: MemberId, addr: Addr },
    /// `id` left gracefully.
    Left { id: MemberId },
    /// `id` crashed or became unreachable.
    Died { id: MemberId },
    /// `winner` won the election `name` (first winner, or a replacement of one that went).
    Elected { name: String, winner: MemberId },
}

impl Event {
    /// The member a join, leave or death is about.
    pub fn member(&self) -> Option<MemberId> {
        match self {
            Event::Joined { id, .. } | Event::Left { id } | Event::Died { id } => Some(*id),
            Event::Elected { .. } => None,
        }
    }
}

impl fmt::Display for Event {
    /// The line the command line prints: `joined ID ADDR`, `left ID`, `died ID`,
    /// `elected NAME ID`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Joined { id, addr } => write!(f, "joined {id:016x} {addr}"),
            Event::Left { id } => write!(f, "left {id:016x}"),
            Event::Died { id } => write!(f, "died {id:016x}"),
            Event::Elected { name, winner } => write!(f, "elected {name} {winner:016x}"),
        }
    }
}

/// Consistency of joins and leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JoinLeave {
    /// Every member sees the same events in the same order.
    Reliable,
    /// Best effort: events may arrive out of order or not at all.
    Unreliable,
}

/// Consistency of elections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Elections {
    /// A single winner per election, known at every member.
    Uniform,
    /// Converges to a single winner; before that, members may disagree.
    NonUniform,
}

/// What a member asks for when joining; `None` switches a part off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Consistency {
    pub joins: Option<JoinLeave>,
    pub elections: Option<Elections>,
}

impl Consistency {
    /// Reliable joins and leaves, uniform elections (what MPI needs).
    pub const STRONG: Consistency =
        Consistency { joins: Some(JoinLeave::Reliable), elections: Some(Elections::Uniform) };
    /// Unreliable joins and leaves, non-uniform elections (what the distributed one gives).
    pub const WEAK: Consistency =
        Consistency { joins: Some(JoinLeave::Unreliable), elections: Some(Elections::NonUniform) };
}

impl Default for Consistency {
    fn default() -> Self {
        Consistency::STRONG
    }
}

/// The implementation cannot give the consistency asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsupported(pub &'static str);

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unsupported by this JEL implementation: {}", self.0)
    }
}

impl std::error::Error for Unsupported {}

/// A call for a part that was switched off at join time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartOff;

impl fmt::Display for PartOff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "this part of JEL was switched off when joining")
    }
}

impl std::error::Error for PartOff {}

/// What the driver feeds a member's core ([`central::Client`], [`distributed::Node`]; `M`:
/// the implementation's message type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input<M> {
    /// Join the pool.
    Join,
    /// Leave the pool gracefully (final).
    Leave,
    /// This member may be dead: the implementation checks.
    MaybeDead(MemberId),
    /// Stand for the election `name`; the winner comes as [`Action::ElectionResult`] (and,
    /// to every member, as an [`Event::Elected`]). Rejected ([`PartOff`]) when elections were
    /// switched off at join time.
    Elect(String),
    /// Who won `name`, without standing: answered by [`Action::ElectionResult`] as soon as a
    /// winner is known, with `None` after `timeout`. Rejected ([`PartOff`]) when elections
    /// were switched off at join time.
    GetElectionResult { name: String, timeout: Duration },
    /// A message from the node listening at `from`.
    Message { from: Addr, msg: M },
    /// The driver could not reach the node listening at this address.
    Unreachable(Addr),
}

/// What the driver must do (`M`: the implementation's message type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action<M> {
    /// Write `msg` to the node listening at `to`.
    Send { to: Addr, msg: M },
    /// Tell the application.
    Deliver(Event),
    /// The answer to `elect(name)` or `get_election_result(name)`; `None`: timed out.
    ElectionResult { name: String, winner: Option<MemberId> },
}

// ------------------------------------------------------------------------ helpers

/// One step of SplitMix64: the cores' only source of randomness, seeded by the driver.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    crate::kmonitor::splitmix64(state)
}

/// Actions queued by a core at most, once drained, before its queue gives memory back: a
/// newcomer's state is delivered as one `Joined` per member, and a queue keeping that
/// capacity for the rest of its life made a simulated pool of n members hold n² actions'
/// worth of memory (≈ 100 bytes per pair, 17 GB at 10 000 members).
const KEEP_QUEUED: usize = 64;

/// The next action of a core's queue; an emptied queue that grew large shrinks back.
pub(crate) fn pop_action<M>(out: &mut VecDeque<Action<M>>) -> Option<Action<M>> {
    let a = out.pop_front();
    if a.is_none() && out.capacity() > KEEP_QUEUED {
        out.shrink_to(KEEP_QUEUED / 4);
    }
    a
}

/// Uniform in `0..n` (`n > 0`).
pub(crate) fn below(state: &mut u64, n: usize) -> usize {
    ((splitmix64(state) as u128 * n as u128) >> 64) as usize
}

/// The children of `rank` in a binomial broadcast tree of `n` ranks rooted at 0 (the tree MPI
/// implementations use): `rank + 2^k` for every `2^k > rank` with `rank + 2^k < n`.
pub fn binomial_children(rank: usize, n: usize) -> impl Iterator<Item = usize> {
    let start = if rank == 0 { 1 } else { (rank + 1).next_power_of_two() };
    std::iter::successors(Some(start), |&s| s.checked_mul(2)).map(move |s| rank + s).take_while(move |&c| c < n)
}

/// The next time a periodic task falls due, without a burst when the driver was late.
pub(crate) fn next_period(prev: Duration, period: Duration, now: Duration) -> Duration {
    let next = prev + period;
    if next > now {
        next
    } else {
        now + period
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomial_tree_covers_every_rank_once() {
        for n in 1..70 {
            let mut seen = vec![0u32; n];
            seen[0] = 1;
            for r in 0..n {
                for c in binomial_children(r, n) {
                    assert!(c > r);
                    seen[c] += 1;
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "n = {n}: {seen:?}");
        }
        assert_eq!(binomial_children(0, 9).collect::<Vec<_>>(), vec![1, 2, 4, 8]);
        assert_eq!(binomial_children(1, 9).collect::<Vec<_>>(), vec![3, 5]);
        assert_eq!(binomial_children(3, 9).collect::<Vec<_>>(), vec![7]);
    }

    #[test]
    fn a_drained_queue_gives_its_memory_back() {
        let mut q: VecDeque<Action<()>> = VecDeque::new();
        for id in 0..10_000 {
            q.push_back(Action::Deliver(Event::Left { id }));
        }
        let mut n = 0;
        while pop_action(&mut q).is_some() {
            n += 1;
        }
        assert_eq!(n, 10_000);
        assert!(q.capacity() <= KEEP_QUEUED, "{}", q.capacity());
    }

    #[test]
    fn events_print_as_the_command_line_does() {
        let a: Addr = "10.0.0.1:7000".parse().unwrap();
        assert_eq!(Event::Joined { id: 255, addr: a }.to_string(), "joined 00000000000000ff 10.0.0.1:7000");
        assert_eq!(Event::Elected { name: "master".into(), winner: 1 }.to_string(), "elected master 0000000000000001");
    }
}

/// A small in-memory network for the cores' tests: random latency, crashes (silent, or with
/// the connection refused), every message encoded and decoded on the way.
#[cfg(test)]
pub(crate) mod testnet {
    use super::*;
    use crate::machine::Machine;
    use core::net::{IpAddr, Ipv4Addr};
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, HashMap};

    /// A core the test network drives: a [`Machine`] whose outputs are [`Action`]s.
    pub(crate) trait Core: Machine<Output = Action<Self::Msg>> {
        type Msg: Clone + std::fmt::Debug;
        /// The input that carries a message.
        fn message(&self, from: Addr, msg: Self::Msg) -> Self::Input;
        /// The input that says an address could not be reached.
        fn unreachable(&self, to: Addr) -> Self::Input;
        /// Through the wire: encode, then decode.
        fn wire(msg: &Self::Msg) -> Self::Msg;
    }

    /// Feeds a core one input the network produced (never a refused one).
    pub(crate) fn feed<C: Core>(c: &mut C, now: Duration, input: C::Input) {
        assert!(c.handle_input(now, input).is_ok(), "the network feeds only what a core accepts");
    }

    pub(crate) fn addr(i: usize) -> Addr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, (i >> 8) as u8, i as u8)), 7000)
    }

    pub(crate) fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    pub(crate) struct Net<C: Core> {
        pub nodes: Vec<Option<C>>,
        pub crashed: Vec<bool>,
        /// Messages to a crashed node are refused (the sender is fed `Unreachable`).
        pub refuse: bool,
        pub now: Duration,
        pub delivered: Vec<Vec<(Duration, Event)>>,
        pub results: Vec<Vec<(Duration, String, Option<MemberId>)>>,
        pub messages: u64,
        index: HashMap<Addr, usize>,
        queue: BinaryHeap<Reverse<(Duration, u64)>>,
        items: HashMap<u64, (usize, usize, C::Msg)>,
        seq: u64,
        rng: u64,
    }

    impl<C: Core> Net<C> {
        pub fn new(n: usize, seed: u64) -> Net<C> {
            Net {
                nodes: (0..n).map(|_| None).collect(),
                crashed: vec![false; n],
                refuse: true,
                now: Duration::ZERO,
                delivered: vec![Vec::new(); n],
                results: vec![Vec::new(); n],
                messages: 0,
                index: (0..n).map(|i| (addr(i), i)).collect(),
                queue: BinaryHeap::new(),
                items: HashMap::new(),
                seq: 0,
                rng: seed,
            }
        }

        /// Calls `f` on node `i` at the current time and handles what it asked for.
        pub fn with(&mut self, i: usize, f: impl FnOnce(&mut C, Duration)) {
            if self.crashed[i] {
                return;
            }
            let now = self.now;
            if let Some(c) = self.nodes[i].as_mut() {
                f(c, now);
            }
            self.drain(i);
        }

        fn drain(&mut self, i: usize) {
            while let Some(a) = self.nodes[i].as_mut().and_then(|c| c.poll_output()) {
                match a {
                    Action::Send { to, msg } => {
                        let Some(&j) = self.index.get(&to) else { continue };
                        let lat = ms(1 + below(&mut self.rng, 5) as u64);
                        self.seq += 1;
                        self.messages += 1;
                        self.queue.push(Reverse((self.now + lat, self.seq)));
                        self.items.insert(self.seq, (i, j, C::wire(&msg)));
                    }
                    Action::Deliver(e) => self.delivered[i].push((self.now, e)),
                    Action::ElectionResult { name, winner } => self.results[i].push((self.now, name, winner)),
                }
            }
        }

        pub fn crash(&mut self, i: usize) {
            self.crashed[i] = true;
        }

        /// Forgets the messages node `i` sent that were not delivered yet (a process killed
        /// before its writes left it).
        pub fn drop_in_flight_from(&mut self, i: usize) -> usize {
            let before = self.items.len();
            self.items.retain(|_, m| m.0 != i);
            before - self.items.len()
        }

        pub fn run_until(&mut self, end: Duration) {
            loop {
                let q = self.queue.peek().map(|r| r.0 .0);
                let d = (0..self.nodes.len())
                    .filter(|&i| !self.crashed[i])
                    .filter_map(|i| self.nodes[i].as_ref().and_then(|c| c.poll_timeout()).map(|d| (d.max(self.now), i)))
                    .min();
                let t = match (q, d) {
                    (Some(q), Some((d, _))) => q.min(d),
                    (Some(q), None) => q,
                    (None, Some((d, _))) => d,
                    (None, None) => break,
                };
                if t > end {
                    break;
                }
                self.now = t;
                if q == Some(t) {
                    let Reverse((_, s)) = self.queue.pop().expect("peeked");
                    // (Dropped by `drop_in_flight_from`.)
                    let Some((from, to, msg)) = self.items.remove(&s) else { continue };
                    if self.crashed[to] {
                        if self.refuse && !self.crashed[from] {
                            let now = self.now;
                            if let Some(c) = self.nodes[from].as_mut() {
                                let input = c.unreachable(addr(to));
                                feed(c, now, input);
                            }
                            self.drain(from);
                        }
                        continue;
                    }
                    let now = self.now;
                    if let Some(c) = self.nodes[to].as_mut() {
                        let input = c.message(addr(from), msg);
                        feed(c, now, input);
                    }
                    self.drain(to);
                } else if let Some((_, i)) = d {
                    let now = self.now;
                    if let Some(c) = self.nodes[i].as_mut() {
                        c.handle_timeout(now);
                    }
                    self.drain(i);
                }
            }
            self.now = self.now.max(end);
        }

        /// The members whose join node `i` was told, in order.
        pub fn joins_seen(&self, i: usize) -> Vec<MemberId> {
            self.delivered[i]
                .iter()
                .filter_map(|(_, e)| if let Event::Joined { id, .. } = e { Some(*id) } else { None })
                .collect()
        }

        /// When node `i` was told `e` (first time).
        pub fn told(&self, i: usize, e: &Event) -> Option<Duration> {
            self.delivered[i].iter().find(|(_, x)| x == e).map(|(t, _)| *t)
        }
    }
}
