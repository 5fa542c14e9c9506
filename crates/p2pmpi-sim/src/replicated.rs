//! Deterministic simulation of whole replicated jobs.
//!
//! A job of `n` ranks × `r` replicas runs a random communication program under a random
//! schedule of faults, in virtual time, with the very state machines the library and the
//! launcher run: every process drives a [`p2pmpi_core::replication::Endpoint`] (fan-out,
//! commits, backups, takeover, reorder queue, choices, stall timers) and a
//! [`p2pmpi_core::matching::Matcher`] (the history table and MPI matching), holds a
//! [`Lease`], and the launcher is a [`Supervisor`]. A run is a pure function of its seed.
//!
//! ## The programs
//!
//! A global list of messages is drawn first (source, destination, kind); every rank's
//! program is its part of that list in order — a send where it is the source, a receive
//! where it is the destination — so the program cannot deadlock whatever the schedule:
//! *exact* messages are received naming their source (some sends synchronous), *wildcard*
//! ones by `ANY_SOURCE` receives on a tag of their own, two successive exact receives from
//! different sources may become a `wait_any` on both, `ANY_SOURCE` probes are sprinkled in,
//! one message in five is large (rendez-vous), and now and then every rank takes part in a
//! collective pattern (a gather to a root, then a broadcast from it). Every value a rank sends is a hash of everything it has seen so far, so a replica that
//! took another path (a different match, probe result or completion order) sends different
//! values and is caught.
//!
//! ## The machine
//!
//! * **Network**: one FIFO link per ordered pair of processes, with a random delay per frame
//!   (never overtaking) and a window of [`WINDOW`] frames: a frame is *written* (the
//!   endpoint is told) once it fits in the window, as a kernel accepts data into its socket
//!   buffer, and a receiver that does not read (frozen, cut off) makes its senders stall.
//!   A frame is still in the sender's kernel or has *arrived* in the receiver's (a partition
//!   holds frames in the sender's). Suspecting a process closes both links with it: the
//!   messages that arrived from it are taken first (eager data, announcements, rendez-vous
//!   data; never control), what the other side's kernel holds stays for it to read, the rest
//!   is lost; the other side sees the broken connection a moment later. A master's commit is
//!   *acknowledged* iff everything it wrote to every alive destination replica arrived.
//! * **Faults** (drawn per run): a process *crashes* (the frames that had not arrived, but a
//!   random prefix already on the wire, are lost, as a reset connection loses them),
//!   *freezes* and resumes, is *cut off* by a partition (its links and its launcher
//!   connection hold everything) and heals, or is *falsely suspected* by another; message
//!   delays vary. The failure detector is an oracle that suspects a frozen or cut-off
//!   process about a second later if it still is.
//! * **Launcher**: suspicions and lease renewals travel to it with a delay (held by a
//!   partition); its declarations are broadcast; it learns of some crashes from the exit
//!   status.
//!
//! ## The checks
//!
//! * every value received for a message is the value its sender computed (whichever replica
//!   sent it), and every replica of a rank computes the same value for the same message;
//! * every process delivers each message of a channel exactly once, in sequence order;
//! * the replicas of a rank that finished have identical outputs;
//! * a job where every rank keeps a replica untouched by faults completes (no hang, no
//!   fatal error); any job ends (completes or fails with a reason) within the time limit.
//!
//! ## Fault-aware jobs
//!
//! With [`JobConfig::fault_aware`] the program handles failures (ULFM, `Policy::Notify`):
//! whole ranks are lost on purpose ([`JobConfig::lose`]: every replica crashes), and a
//! receive from a lost rank fails instead of ending the job. The master of a rank decides
//! which of its receives fail (those pending or posted once it knows the rank is lost); its
//! replicas follow its outcomes through the failure choice points
//! ([`p2pmpi_core::replication::failures`], [`p2pmpi_core::replication::operations`]), and a
//! replica that cannot follow (it took a success its master failed, or waits for a message
//! its master received from the lost rank) leaves, as the library's does. The checks add:
//! the replicas of a rank that finished took the same outcomes (success or failure) of every
//! operation, a failure names a rank that was lost, and every rank not lost finishes.

use crate::rng::Rng;
use p2pmpi_core::fencing::{self, Lease, Supervisor};
use p2pmpi_core::machine::Machine;
use p2pmpi_core::matching::{Arrival, Body, Envelope, Matcher, Pattern};
use p2pmpi_core::replication::endpoint::{Config, Frame, Input, Output, Parked, Payload, TxId};
use p2pmpi_core::replication::operations::Operations;
use p2pmpi_core::replication::wildcards::{exact, Post, Wildcards};
use p2pmpi_core::replication::{Endpoint, Layout, MsgId};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

mod fault_aware;

/// Frames a link holds unread before its sender's writes stall.
pub const WINDOW: usize = 6;
/// The tag of wildcard messages.
const WILD: i32 = 100;

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// A simulated payload: a value standing for the bytes, and their number (large ones go
/// by rendez-vous, above [`RNDV_LIMIT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Val(pub u64, pub usize);

/// The simulated rendez-vous threshold.
pub const RNDV_LIMIT: usize = 100;

impl Payload for Val {
    fn len(&self) -> usize {
        self.1
    }
    fn is_lent(&self) -> bool {
        false
    }
    fn share(&self) -> Val {
        *self
    }
    fn to_owned_copy(&self) -> Val {
        *self
    }
}

/// One operation of a rank's program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `big`: above the rendez-vous threshold.
    Send { dst: usize, tag: i32, sync: bool, big: bool },
    /// `tag` `None`: `ANY_TAG` (only from a source that sends this rank no wildcard
    /// message, so the program cannot deadlock).
    Recv { src: Option<usize>, tag: Option<i32> },
    /// `MPI_Iprobe(ANY_SOURCE, WILD)`.
    Probe,
    /// Two exact receives posted together, `wait_any`, then a wait on the other.
    WaitAny { a: (usize, i32), b: (usize, i32) },
}

/// What a run looks like.
#[derive(Debug, Clone, Copy)]
pub struct JobConfig {
    pub n: usize,
    pub r: usize,
    /// Messages of the program.
    pub messages: usize,
    /// At most this many faults.
    pub faults: usize,
    /// Masters flag a commit *acknowledged* when every destination's kernel has everything
    /// written to it (its replicas then keep no copy for a takeover).
    pub acked_commits: bool,
    /// A process dropping its connection with a slot first takes the data frames its
    /// kernel holds from it (what makes acknowledged commits safe).
    pub drain: bool,
    /// The program handles failures (receives from a rank lost whole fail; the job goes on).
    pub fault_aware: bool,
    /// This many ranks lost whole on purpose (every replica crashes; without
    /// [`Self::fault_aware`], the job fails).
    pub lose: usize,
    /// A fault-aware job's replicas share the messages they receive
    /// (`Endpoint::set_share_received`: what keeps a new master from failing a receive its
    /// predecessor completed); off shows the divergence it prevents.
    pub share: bool,
}

impl Default for JobConfig {
    fn default() -> JobConfig {
        JobConfig {
            n: 3,
            r: 2,
            messages: 40,
            faults: 2,
            acked_commits: true,
            drain: true,
            fault_aware: false,
            lose: 0,
            share: true,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every rank finished on some replica, with consistent outputs.
    Completed,
    /// The job stopped with a reason, and the faults allowed it (a rank lost every
    /// replica it could count on).
    Failed(String),
    /// A check failed.
    Violation(String),
}

/// The result of one run.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub seed: u64,
    pub verdict: Verdict,
    pub faults: Vec<String>,
    pub events: u64,
    pub end: Duration,
    pub takeovers: usize,
    /// Commits written, and how many of them acknowledged.
    pub commits: u64,
    pub acked: u64,
    /// Data frames taken from dropped connections.
    pub drained: u64,
    /// Every process's state at the end (for a violation's diagnosis).
    pub state: String,
    /// Ranks lost whole (every replica declared dead), in the order the launcher saw.
    pub lost_ranks: Vec<usize>,
    /// Failed receives taken by the replicas that finished (a fault-aware job).
    pub failed_ops: usize,
    /// Replicas that left because they could not follow their master (a fault-aware job).
    pub left: usize,
    /// Failures a process took from its master's outcome rather than deciding them.
    pub followed: usize,
    /// Messages of a rank lost whole that a master relayed to a replica lacking them
    /// (shared receives).
    pub relays: usize,
}

/// Draws the programs of a job: one per rank.
pub fn programs(rng: &mut Rng, n: usize, messages: usize) -> Vec<Vec<Op>> {
    let mut progs: Vec<Vec<Op>> = vec![Vec::new(); n];
    if n < 2 {
        return progs;
    }
    // Pairs (source, destination) that carry no wildcard message: their receives may name
    // the source with ANY_TAG (MPI's non-overtaking rule makes them deterministic).
    let quiet: Vec<Vec<bool>> = (0..n).map(|_| (0..n).map(|_| rng.bernoulli(0.5)).collect()).collect();
    let mut left = messages;
    while left > 0 {
        if rng.bernoulli(0.05) && left >= 2 * (n - 1) {
            // A collective pattern: a gather to a root then a broadcast from it (what the
            // library's collectives do over point-to-point), on a tag of their own.
            gather_then_broadcast(&mut progs, rng.below(n as u64) as usize);
            left -= 2 * (n - 1);
            continue;
        }
        left -= 1;
        let src = rng.below(n as u64) as usize;
        let mut dst = rng.below(n as u64 - 1) as usize;
        if dst >= src {
            dst += 1;
        }
        let k = rng.below(100);
        let (tag, sync, wild) =
            if k < 25 && !quiet[src][dst] { (WILD, false, true) } else { (1 + rng.below(3) as i32, k < 40, false) };
        let big = rng.bernoulli(0.2);
        progs[src].push(Op::Send { dst, tag, sync, big });
        let any_tag = quiet[src][dst] && rng.bernoulli(0.5);
        progs[dst].push(Op::Recv { src: (!wild).then_some(src), tag: (!any_tag).then_some(tag) });
        if rng.bernoulli(0.08) {
            progs[dst].push(Op::Probe);
        }
    }
    for p in progs.iter_mut() {
        let mut out = Vec::with_capacity(p.len());
        let mut i = 0;
        while i < p.len() {
            if let (Op::Recv { src: Some(a), tag: Some(ta) }, Some(Op::Recv { src: Some(b), tag: Some(tb) })) =
                (&p[i], p.get(i + 1))
            {
                if a != b && rng.bernoulli(0.4) {
                    out.push(Op::WaitAny { a: (*a, *ta), b: (*b, *tb) });
                    i += 2;
                    continue;
                }
            }
            out.push(p[i].clone());
            i += 1;
        }
        *p = out;
    }
    progs
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Running,
    Frozen,
    Crashed,
    /// Excluded by the launcher (or stopped itself): exited quietly.
    Out,
}

/// What the current operation waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wait {
    /// Not started.
    Start,
    Req(u32),
    Probe(u64),
    Any {
        a: u32,
        b: u32,
        c: u64,
    },
    Other(u32),
    /// End of the program: every send complete.
    Sends,
}

#[derive(Debug)]
enum ToLauncher {
    Suspect { by: usize, slot: usize, why: String },
    Renew { slot: usize, asked_at: Duration },
}

#[derive(Debug, Clone)]
enum FromLauncher {
    Grant { asked_at: Duration },
    Excluded,
    Dead { slot: usize },
}

struct Proc {
    slot: usize,
    rank: usize,
    ep: Endpoint<Val, u32>,
    m: Matcher<u32, Val>,
    pc: usize,
    wait: Wait,
    /// Receives and sends: `None` pending, `Some((source, value))` done.
    reqs: HashMap<u32, Option<(i32, u64)>>,
    next_req: u32,
    open_sends: Vec<u32>,
    out: Vec<u64>,
    hash: u64,
    /// Per channel (comm, source rank, tag): the sequences accepted, to check.
    accepted: HashMap<(u32, i32, i32), u64>,
    /// The value this replica computed for every message it sent.
    computed: HashMap<MsgId, u64>,
    /// Receives matched to a rendez-vous announcement, waiting for the data.
    rndv: HashMap<MsgId, u32>,
    /// What this process accepted, in order (source rank, tag, sequence; for a diagnosis).
    trace: Vec<(u32, i32, u64)>,
    choice_of: HashMap<u32, (u64, u32)>,
    wildcards: Wildcards<u32>,
    status: Status,
    lease: Lease,
    next_renew: Duration,
    inbox: VecDeque<FromLauncher>,
    written: Vec<TxId>,
    broken: Vec<usize>,
    fd_suspects: Vec<usize>,
    done: bool,
    /// A fault-aware job: the numbered operations, the source rank of each pending receive,
    /// the ranks this process heard were lost whole, and the failed receives it took (with
    /// the rank each named).
    ops: Operations<u32>,
    recv_src: HashMap<u32, usize>,
    lost: Vec<usize>,
    failed_taken: Vec<usize>,
}

/// A frame in a link: when it can reach the receiver, the frame, its transmission, and
/// whether it *arrived* — is in the receiver's kernel (acknowledged: the sender's crash does
/// not lose it) rather than still in the sender's.
type InLink = (Duration, Frame<Val>, Option<TxId>, bool);

#[derive(Debug, Default)]
struct Link {
    q: VecDeque<InLink>,
    closed: bool,
    last_at: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fd {
    Faulty,
    Isolated,
    False,
}

#[derive(Debug)]
enum Ev {
    Wake(usize),
    Crash(usize),
    Freeze(usize),
    Resume(usize),
    Cut(usize),
    Heal(usize),
    /// The detector oracle: `by` suspects `slot` if `slot` is still frozen or cut off
    /// ([`Fd::Faulty`]), if `by` itself is still cut off ([`Fd::Isolated`]: its detector hears
    /// nobody), or whatever happens ([`Fd::False`]).
    Fd {
        by: usize,
        slot: usize,
        when: Fd,
    },
    Launcher(ToLauncher),
    ToProc(usize, FromLauncher),
    LauncherPoll,
    Ended(usize),
}

struct Sim {
    rng: Rng,
    now: Duration,
    seq: u64,
    heap: BinaryHeap<Reverse<(Duration, u64)>>,
    evs: HashMap<u64, Ev>,
    procs: Vec<Proc>,
    links: HashMap<(usize, usize), Link>,
    cut: Vec<bool>,
    held_up: Vec<Vec<ToLauncher>>,
    held_down: Vec<Vec<FromLauncher>>,
    sup: Supervisor,
    layout: Layout,
    progs: Vec<Vec<Op>>,
    /// The value of every message, as its first replica computed it.
    values: HashMap<MsgId, u64>,
    violation: Option<String>,
    failed: Option<String>,
    events: u64,
    takeovers: usize,
    lease: Duration,
    up_last: Vec<Duration>,
    down_last: Vec<Duration>,
    log: Vec<String>,
    cfg: JobConfig,
    /// Data frames taken from dropped connections.
    drained: u64,
    commits: u64,
    acked: u64,
    /// Ranks lost whole, as the launcher declared them.
    lost_ranks: Vec<usize>,
    /// Replicas that left, unable to follow their master.
    left: usize,
    followed: usize,
    relays: usize,
}

fn mix(h: u64, v: u64) -> u64 {
    let mut s = h ^ v.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    crate::rng::splitmix64(&mut s)
}

impl Sim {
    fn at(&mut self, t: Duration, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq)));
        self.evs.insert(self.seq, ev);
    }

    fn delay(&mut self) -> Duration {
        // Mostly 1–5 ms, sometimes up to 200 ms.
        if self.rng.bernoulli(0.03) {
            ms(20 + self.rng.below(180))
        } else {
            Duration::from_micros(1000 + self.rng.below(4000))
        }
    }

    fn violate(&mut self, what: String) {
        if self.violation.is_none() {
            self.violation = Some(format!("at {:.3} s: {what}", self.now.as_secs_f64()));
        }
    }

    fn runnable(&self, s: usize) -> bool {
        self.procs[s].status == Status::Running
    }

    // ------------------------------------------------------------- network

    fn push_frame(&mut self, from: usize, to: usize, frame: Frame<Val>, tx: Option<TxId>) {
        let d = self.delay();
        let now = self.now;
        let link = self.links.entry((from, to)).or_default();
        if link.closed {
            // Written into a closed connection: the sender learns it is broken.
            if !self.procs[from].broken.contains(&to) {
                self.procs[from].broken.push(to);
            }
            self.at(now, Ev::Wake(from));
            return;
        }
        let t = (now + d).max(link.last_at);
        link.last_at = t;
        let fits = link.q.len() < WINDOW;
        link.q.push_back((t, frame, tx, false));
        if fits {
            if let Some(tx) = tx {
                self.procs[from].written.push(tx);
            }
        }
        self.at(t, Ev::Wake(to));
    }

    /// Frames of link `from → to` whose time has come reach the receiver's kernel, in order,
    /// unless a partition holds them in the sender's.
    fn settle(&mut self, from: usize, to: usize) {
        let held = self.cut[from] || self.cut[to];
        let now = self.now;
        let Some(l) = self.links.get_mut(&(from, to)) else { return };
        for f in l.q.iter_mut() {
            if f.3 {
                continue;
            }
            if held || f.0 > now || l.closed {
                break;
            }
            f.3 = true;
        }
    }

    /// Whether everything `from` wrote to `to` is in `to`'s kernel (the device's test:
    /// nothing unacknowledged in the connection's send queue, the connection established).
    fn all_arrived(&mut self, from: usize, to: usize) -> bool {
        self.settle(from, to);
        let now = self.now;
        self.links.get(&(from, to)).is_some_and(|l| !l.closed && l.q.iter().all(|f| f.3 && f.0 <= now))
    }

    /// `a` drops its connection with `b` (a suspicion, a death, or `a` crashed). Of the
    /// frames `b` sent, those in `a`'s kernel are taken by `a` — the messages only (eager
    /// data, rendez-vous announcements and data: deterministic copies, duplicates dropped by
    /// the history table), never control (a suspect's word counts for nothing) — and the
    /// rest is lost. Of the
    /// frames `a` sent, those in `b`'s kernel stay there for `b` to read; the rest is lost
    /// (a reset connection). `b` notices the broken connection a moment later.
    fn close(&mut self, a: usize, b: usize) {
        self.settle(b, a);
        self.settle(a, b);
        let now = self.now;
        let take = self.cfg.drain && matches!(self.procs[a].status, Status::Running | Status::Frozen);
        let incoming = {
            let l = self.links.entry((b, a)).or_default();
            l.closed = true;
            std::mem::take(&mut l.q)
        };
        if take {
            for (t, frame, _, arrived) in incoming {
                if arrived && t <= now {
                    self.take_data(a, b, frame);
                }
            }
        }
        let l = self.links.entry((a, b)).or_default();
        l.closed = true;
        l.q.retain(|f| f.3);
        if self.procs[b].status != Status::Crashed && !self.procs[b].broken.contains(&a) {
            self.procs[b].broken.push(a);
            let d = self.delay();
            self.at(self.now + d, Ev::Wake(b));
        }
    }

    /// A frame `s` takes from `from`'s dropped connection if it carries a message: eager
    /// data, a rendez-vous announcement (taking it is taking what the sender's successor
    /// would announce again; skipping it would let a receive naming the source with
    /// `ANY_TAG` take a later message first) or rendez-vous data.
    fn take_data(&mut self, s: usize, from: usize, frame: Frame<Val>) {
        match frame {
            Frame::Data { mid, .. } | Frame::Rts { mid, .. } | Frame::RndvData { mid, .. } => {
                self.drained += 1;
                self.log.push(format!(
                    "{:.3} s: slot {s} takes {mid:?} from slot {from}'s dropped connection",
                    self.now.as_secs_f64()
                ));
                self.deliver(s, from, frame);
            }
            _ => {}
        }
    }

    #[allow(clippy::wrong_self_convention, reason = "named for the direction of the message, not a conversion")]
    fn to_launcher(&mut self, from: usize, m: ToLauncher) {
        if self.cut[from] {
            self.held_up[from].push(m);
            return;
        }
        let d = self.delay();
        let t = (self.now + d).max(self.up_last[from]);
        self.up_last[from] = t;
        self.at(t, Ev::Launcher(m));
    }

    #[allow(clippy::wrong_self_convention, reason = "named for the direction of the message, not a conversion")]
    fn from_launcher(&mut self, to: usize, m: FromLauncher) {
        if self.cut[to] {
            self.held_down[to].push(m);
            return;
        }
        let d = self.delay();
        let t = (self.now + d).max(self.down_last[to]);
        self.down_last[to] = t;
        self.at(t, Ev::ToProc(to, m));
    }

    // ------------------------------------------------------------- launcher

    fn launcher(&mut self, m: ToLauncher) {
        match m {
            ToLauncher::Suspect { by, slot, why } => {
                let _ =
                    self.sup.handle_input(self.now, fencing::Input::Suspect { slot, by: Some(by), why: why.clone() });
                let x = self.sup.drain_outputs().into_iter().find_map(|o| match o {
                    fencing::Output::Excluded(x) => Some(x),
                    fencing::Output::Declared(_) => None,
                });
                self.log.push(format!(
                    "{:.3} s: slot {by} suspects slot {slot} ({why}): excluded {x:?}",
                    self.now.as_secs_f64()
                ));
                // A fault-aware job's launcher defers an accusation against the last replica
                // of a rank: its timer decides.
                if x.is_some() || self.cfg.fault_aware {
                    if let Some(t) = self.sup.poll_timeout() {
                        self.at(t.max(self.now), Ev::LauncherPoll);
                    }
                }
            }
            ToLauncher::Renew { slot, asked_at } => {
                let g = self.sup.handle_input(self.now, fencing::Input::Renew(slot));
                if std::env::var_os("SIM_TRACE_RENEW").is_some() {
                    self.log.push(format!(
                        "{:.3} s: renew {slot} asked {:.3}: {g:?}",
                        self.now.as_secs_f64(),
                        asked_at.as_secs_f64()
                    ));
                }
                let m = match g {
                    Ok(()) => FromLauncher::Grant { asked_at },
                    Err(_) => FromLauncher::Excluded,
                };
                self.from_launcher(slot, m);
            }
        }
    }

    fn launcher_poll(&mut self) {
        self.sup.handle_timeout(self.now);
        for o in self.sup.drain_outputs() {
            if let fencing::Output::Declared(d) = o {
                self.declared(d.slot, d.left);
            }
        }
        if let Some(t) = self.sup.poll_timeout() {
            self.at(t.max(self.now + ms(1)), Ev::LauncherPoll);
        }
    }

    fn declared(&mut self, slot: usize, left: usize) {
        self.log.push(format!("{:.3} s: slot {slot} declared dead", self.now.as_secs_f64()));
        if left == 0 && self.cfg.fault_aware {
            self.lost_ranks.push(self.layout.rank_of(slot));
        } else if left == 0 && self.failed.is_none() {
            self.failed =
                Some(format!("the launcher declared the last replica of rank {} dead", self.layout.rank_of(slot)));
        }
        for s in 0..self.procs.len() {
            self.from_launcher(s, FromLauncher::Dead { slot });
        }
    }

    // ------------------------------------------------------------- processes

    fn wake(&mut self, s: usize) {
        if !self.runnable(s) {
            return;
        }
        let now = self.now;
        // Launcher messages first (they arrive even without a lease).
        while let Some(m) = self.procs[s].inbox.pop_front() {
            match m {
                FromLauncher::Grant { asked_at } => self.procs[s].lease.granted(asked_at),
                FromLauncher::Excluded => {
                    self.exit(s);
                    return;
                }
                FromLauncher::Dead { slot } if slot == s => {
                    self.exit(s);
                    return;
                }
                FromLauncher::Dead { slot } => {
                    self.feed(s, Input::DeclaredDead { slot });
                    self.close(s, slot);
                }
            }
        }
        if now >= self.procs[s].next_renew {
            let every = self.procs[s].lease.renew_every();
            self.procs[s].next_renew = now + every;
            self.to_launcher(s, ToLauncher::Renew { slot: s, asked_at: now });
            self.at(now + every, Ev::Wake(s));
        }
        if self.procs[s].lease.out_of_contact(now) {
            self.exit(s);
            return;
        }
        if !self.procs[s].lease.valid(now) {
            // Nothing is written without a lease: wait for the renewal.
            return;
        }
        // Broken connections and detector suspicions.
        for b in std::mem::take(&mut self.procs[s].broken) {
            let cause = "connection closed".to_string();
            self.feed(s, Input::Suspect { slot: b, cause, bye: false });
        }
        for b in std::mem::take(&mut self.procs[s].fd_suspects) {
            let cause = "the failure detector suspects it".to_string();
            self.feed(s, Input::Suspect { slot: b, cause, bye: false });
        }
        for tx in std::mem::take(&mut self.procs[s].written) {
            self.procs[s].ep.written(now, tx);
        }
        self.actions(s);
        // Frames that arrived, in arrival order.
        loop {
            let mut best: Option<(Duration, usize)> = None;
            for from in 0..self.procs.len() {
                if from == s || self.cut[from] || self.cut[s] {
                    continue;
                }
                self.settle(from, s);
                if let Some(l) = self.links.get(&(from, s)) {
                    if let Some((t, _, _, true)) = l.q.front() {
                        if *t <= now && best.is_none_or(|b| *t < b.0) {
                            best = Some((*t, from));
                        }
                    }
                }
            }
            let Some((_, from)) = best else { break };
            let link = self.links.get_mut(&(from, s)).expect("link");
            let (_, frame, _, _) = link.q.pop_front().expect("front");
            // The frame that now fits in the window is written.
            if let Some((_, _, Some(tx), _)) = link.q.get(WINDOW - 1) {
                let tx = *tx;
                self.procs[from].written.push(tx);
                self.at(now, Ev::Wake(from));
            }
            self.frame(s, from, frame);
            self.actions(s);
            if !self.runnable(s) {
                return;
            }
        }
        self.procs[s].ep.handle_timeout(now);
        self.actions(s);
        if self.cfg.fault_aware {
            self.fault_aware_turn(s);
            self.actions(s);
            if !self.runnable(s) {
                return;
            }
        }
        self.resolve(s);
        self.step(s);
        self.actions(s);
        self.check_done(s);
        // Next wake-ups: the endpoint's timers and the renewal.
        if let Some(t) = self.procs[s].ep.poll_timeout() {
            self.at(t.max(now + ms(1)), Ev::Wake(s));
        }
    }

    /// The process exits (excluded, or out of contact with the launcher for too long); the
    /// launcher sees its exit status a moment later.
    fn exit(&mut self, s: usize) {
        let p = &mut self.procs[s];
        if matches!(p.status, Status::Running | Status::Frozen) {
            p.status = Status::Out;
            let d = ms(50 + self.rng.below(500));
            self.at(self.now + d, Ev::Ended(s));
        }
    }

    /// Handles the endpoint's actions.
    fn actions(&mut self, s: usize) {
        while let Some(a) = self.procs[s].ep.poll_output() {
            match a {
                Output::Transmit { to, tx, frame: Frame::Commit { mid, acked }, .. } => {
                    let acked = acked
                        && self.cfg.acked_commits
                        && self
                            .layout
                            .slots_of(mid.dst as usize)
                            .all(|d| self.procs[s].ep.is_dead(d) || self.all_arrived(s, d));
                    self.commits += 1;
                    self.acked += u64::from(acked);
                    self.push_frame(s, to, Frame::Commit { mid, acked }, tx);
                }
                Output::Transmit { to, tx, frame, .. } => self.push_frame(s, to, frame, tx),
                Output::FannedOut { .. } | Output::Committed { .. } => {}
                Output::Complete(u) => {
                    if let Some(r) = self.procs[s].reqs.get_mut(&u) {
                        *r = Some((-1, 0));
                    }
                }
                Output::Suspect { slot, cause } => {
                    self.close(s, slot);
                    self.to_launcher(s, ToLauncher::Suspect { by: s, slot, why: cause });
                }
                Output::TookOver { .. } => self.takeovers += 1,
                // Only with `set_notify`: fault-aware jobs.
                Output::RankLost { rank } if self.cfg.fault_aware => {
                    if !self.procs[s].lost.contains(&rank) {
                        self.procs[s].lost.push(rank);
                    }
                }
                Output::RankLost { rank } => {
                    if self.failed.is_none() {
                        self.failed = Some(format!("slot {s}: rank {rank} lost"));
                    }
                }
                Output::Fatal { rank, cause } => {
                    if self.failed.is_none() {
                        self.failed = Some(format!("slot {s}: rank {rank}: {cause}"));
                    }
                }
                Output::ChannelLost(lost) => {
                    let want = self.procs[s].accepted.get(&(lost.comm, lost.rank as i32, lost.tag)).copied();
                    if self.failed.is_none() {
                        let cause = lost.cause(want.unwrap_or(0));
                        self.failed = Some(format!("slot {s}: rank {}: {cause}", lost.rank));
                    }
                }
            }
        }
    }

    fn frame(&mut self, s: usize, from: usize, frame: Frame<Val>) {
        if self.procs[s].ep.is_cut(from) {
            return;
        }
        self.deliver(s, from, frame);
    }

    /// An input to process `s`'s endpoint. A refused one (a control frame from a replica
    /// this process no longer trusts) changes nothing.
    fn feed(&mut self, s: usize, input: Input) {
        let now = self.now;
        let _refused = self.procs[s].ep.handle_input(now, input);
    }

    fn deliver(&mut self, s: usize, from: usize, frame: Frame<Val>) {
        let now = self.now;
        match frame {
            Frame::Commit { mid, acked } => {
                if self.procs[s].ep.handle_input(now, Input::Commit { from, mid, acked }).is_err() {
                    self.violate(format!("slot {s}: commit of {mid:?} from slot {from} refused"));
                }
            }
            Frame::Choice { point, outcome, .. } => self.feed(s, Input::Choice { from, point, outcome }),
            Frame::SyncAck { mid } => self.feed(s, Input::SyncAck { from, mid }),
            Frame::ChoiceAck { point } => self.feed(s, Input::ChoiceAck { from, point }),
            Frame::ChoiceQuery => self.feed(s, Input::ChoiceQuery { from }),
            Frame::ChoicesTold => self.feed(s, Input::ChoicesTold { from }),
            Frame::Data { mid, payload, sync } => {
                if self.layout.rank_of(from) != mid.src as usize || mid.dst as usize != self.procs[s].rank {
                    self.violate(format!("slot {s}: data {mid:?} from slot {from}"));
                    return;
                }
                self.accept(s, mid, Some(payload), sync, 0, now);
            }
            Frame::Rts { mid, len, sync } => {
                if self.layout.rank_of(from) != mid.src as usize || mid.dst as usize != self.procs[s].rank {
                    self.violate(format!("slot {s}: announcement {mid:?} from slot {from}"));
                    return;
                }
                self.accept(s, mid, None, sync, len, now);
            }
            Frame::Received { mid } => self.feed(s, Input::Received { from, mid }),
            Frame::Relay { mid, payload } => self.relayed(s, from, mid, payload),
            Frame::Rtr { mid } => self.feed(s, Input::Pull { from, mid, have: false }),
            Frame::Have { mid } => self.feed(s, Input::Pull { from, mid, have: true }),
            Frame::RndvData { mid, payload } => {
                let Some(r) = self.procs[s].rndv.remove(&mid) else { return };
                self.rndv_data(s, r, mid, payload);
            }
        }
    }

    /// Rendez-vous message `mid`'s data completes receive `r`: its sender's replicas are
    /// told, and (shared receives) this rank's replicas of lower index.
    fn rndv_data(&mut self, s: usize, r: u32, mid: MsgId, payload: Val) {
        self.check_value(s, mid, payload);
        let p = &mut self.procs[s];
        p.reqs.insert(r, Some((mid.src as i32, payload.0)));
        p.ep.have(mid);
        p.ep.received(mid, || payload);
    }

    /// Its master relayed message `mid` of a rank lost whole (shared receives): taken like
    /// the message itself — accepted if new here, the data of a rendez-vous receive waiting
    /// for it, kept for the receive that will match its announcement, or had already.
    fn relayed(&mut self, s: usize, from: usize, mid: MsgId, v: Val) {
        let p = &self.procs[s];
        if self.layout.rank_of(from) != p.rank || from >= s || mid.dst as usize != p.rank {
            self.violate(format!("slot {s}: relay of {mid:?} from slot {from}"));
            return;
        }
        self.relays += 1;
        let next = p.m.next_expected(mid.comm, mid.src as i32, mid.tag);
        if next <= mid.seq {
            // Not accepted here yet. Its predecessors not here either the master has, but
            // not whole (it relays the whole ones first, in order): announcements whose data
            // never came, its receives of them fail. They are accepted here as such (their
            // receives follow the master's failures), then the message in its turn.
            let now = self.now;
            for seq in next..mid.seq {
                self.accept(s, MsgId { seq, ..mid }, None, false, 0, now);
            }
            self.accept(s, mid, Some(v), false, 0, now);
            return;
        }
        if let Some(r) = self.procs[s].rndv.remove(&mid) {
            return self.rndv_data(s, r, mid, v);
        }
        let p = &mut self.procs[s];
        let queued =
            p.m.probe(Pattern { comm: mid.comm, src: Some(mid.src as i32), tag: Some(mid.tag) })
                .is_some_and(|e| e.seq <= mid.seq);
        if queued {
            self.check_value(s, mid, v);
            let p = &mut self.procs[s];
            p.ep.keep_relayed(mid, v);
        }
        self.procs[s].ep.received(mid, || v);
    }

    fn check_value(&mut self, s: usize, mid: MsgId, v: Val) {
        match self.values.get(&mid) {
            Some(&want) if want != v.0 => self.violate(format!(
                "slot {s}: message {mid:?} carries {}, but {want} was delivered elsewhere (its sender's replicas diverged)",
                v.0
            )),
            Some(_) => {}
            None => {
                self.values.insert(mid, v.0);
            }
        }
    }

    /// A message arrived: eager (`v`), or a rendez-vous announcement of `len` bytes.
    fn accept(&mut self, s: usize, mid: MsgId, v: Option<Val>, sync: bool, len: u64, now: Duration) {
        let env = Envelope { comm: mid.comm, src: mid.src as i32, tag: mid.tag, seq: mid.seq, len: 8 };
        if let Some(v) = v {
            self.check_value(s, mid, v);
        }
        let p = &mut self.procs[s];
        match p.m.arrive(&env) {
            Arrival::Duplicate => {
                if v.is_some() {
                    p.ep.duplicate(mid, sync);
                } else if p.rndv.contains_key(&mid) {
                    // Announced again by a new master while its data is awaited: pulled
                    // again (the old master may have died before sending it).
                    p.ep.pull(mid);
                } else if p
                    .m
                    .probe(Pattern { comm: mid.comm, src: Some(mid.src as i32), tag: Some(mid.tag) })
                    .is_none_or(|e| e.seq > mid.seq)
                {
                    // Received already (not queued unmatched: then it is pulled when matched).
                    p.ep.have(mid);
                }
                // Parked successors may be in turn.
                self.unpark_all(s, mid, now);
                return;
            }
            Arrival::Early => {
                let rts = v.is_none().then_some(len);
                p.ep.park(now, mid, Parked { data: v.unwrap_or(Val(0, 0)), sync, rts });
                return;
            }
            arr => {
                let key = (mid.comm, mid.src as i32, mid.tag);
                let want = p.accepted.get(&key).copied().unwrap_or(0);
                if mid.seq != want {
                    let msg = format!("slot {s}: accepted {mid:?}, expected sequence {want}");
                    self.violate(msg);
                    return;
                }
                let p = &mut self.procs[s];
                p.accepted.insert(key, want + 1);
                p.trace.push((mid.src, mid.tag, mid.seq));
                if let Some(v) = v {
                    p.ep.received(mid, || v);
                }
                match (arr, v) {
                    (Arrival::Matched(r), Some(v)) => {
                        if sync {
                            p.ep.matched_sync(mid);
                        }
                        p.reqs.insert(r, Some((env.src, v.0)));
                        if let Some((c, comm)) = p.choice_of.remove(&r) {
                            p.ep.decided(comm, c, Some((env.src, env.tag, env.seq)));
                        }
                    }
                    (Arrival::Matched(r), None) => {
                        p.rndv.insert(mid, r);
                        p.ep.pull(mid);
                        debug_assert!(p.ep.take_relayed(mid).is_none(), "relayed only once accepted");
                        if let Some((c, comm)) = p.choice_of.remove(&r) {
                            p.ep.decided(comm, c, Some((env.src, env.tag, env.seq)));
                        }
                    }
                    (_, Some(v)) => {
                        if sync {
                            p.ep.sync_unmatched(mid);
                        }
                        p.m.enqueue(env, Body::Eager(v));
                    }
                    (_, None) => p.m.enqueue(env, Body::Rendezvous),
                }
            }
        }
        self.unpark_all(s, mid, now);
    }

    /// Parked messages of `mid`'s channel now in turn.
    fn unpark_all(&mut self, s: usize, mid: MsgId, now: Duration) {
        let next = self.procs[s].accepted.get(&(mid.comm, mid.src as i32, mid.tag)).copied().unwrap_or(0);
        if let Some((m2, p2)) = self.procs[s].ep.unpark(mid.comm, mid.src, mid.tag, next) {
            let v2 = p2.rts.is_none().then_some(p2.data);
            self.accept(s, m2, v2, p2.sync, p2.rts.unwrap_or(0), now);
        }
    }

    fn new_req(&mut self, s: usize) -> u32 {
        let p = &mut self.procs[s];
        let r = p.next_req;
        p.next_req += 1;
        p.reqs.insert(r, None);
        r
    }

    fn post(&mut self, s: usize, r: u32, pat: Pattern) {
        let p = &mut self.procs[s];
        if let Some((env, body)) = p.m.post(pat, r) {
            let mid = MsgId { comm: env.comm, src: env.src as u32, dst: p.rank as u32, tag: env.tag, seq: env.seq };
            match body {
                Body::Eager(v) => {
                    p.ep.consumed(mid);
                    p.reqs.insert(r, Some((env.src, v.0)));
                }
                Body::Rendezvous => match p.ep.take_relayed(mid) {
                    // Its master relayed the data (its sender is lost whole).
                    Some(v) => {
                        p.reqs.insert(r, Some((env.src, v.0)));
                    }
                    None => {
                        p.rndv.insert(mid, r);
                        p.ep.pull(mid);
                    }
                },
            }
            if let Some((c, comm)) = p.choice_of.remove(&r) {
                p.ep.decided(comm, c, Some((env.src, env.tag, env.seq)));
            }
        }
    }

    fn irecv(&mut self, s: usize, src: Option<usize>, tag: Option<i32>) -> u32 {
        let r = self.new_req(s);
        let pat = Pattern { comm: 0, src: src.map(|x| x as i32), tag };
        if src.is_none() {
            // A wildcard receive: the library's own rule (p2pmpi_core::replication::wildcards).
            let p = &mut self.procs[s];
            if let Some(post) = p.wildcards.receive(&mut p.ep, r, pat) {
                self.post_wildcard(s, post);
            }
            return r;
        }
        self.post(s, r, pat);
        r
    }

    /// A non-master's wildcard receives whose master's choice arrived are posted, exact;
    /// after a takeover, the ones still undecided are this master's to decide.
    fn resolve(&mut self, s: usize) {
        loop {
            let p = &mut self.procs[s];
            let Some(post) = p.wildcards.next(&mut p.ep) else { return };
            self.post_wildcard(s, post);
        }
    }

    /// Posts a wildcard receive of slot `s` as the library does.
    fn post_wildcard(&mut self, s: usize, post: Post<u32>) {
        match post {
            Post::Exact { req, pat } => self.post(s, req, pat),
            Post::Decide { req, pat, point } => {
                self.procs[s].choice_of.insert(req, (point, pat.comm));
                self.post(s, req, pat);
            }
            // The simulated programs handle no failure: no outcome is one.
            Post::Fail { req, .. } => self.violate(format!("slot {s}: receive {req} failed by its master's outcome")),
        }
    }

    fn done_req(&self, s: usize, r: u32) -> Option<(i32, u64)> {
        self.procs[s].reqs.get(&r).copied().flatten()
    }

    fn emit(&mut self, s: usize, v: u64) {
        let p = &mut self.procs[s];
        p.out.push(v);
        p.hash = mix(p.hash, v);
    }

    /// Runs the program until it blocks (a few operations per wake-up, then a pause).
    fn step(&mut self, s: usize) {
        for _ in 0..4 {
            if !self.step_one(s) {
                return;
            }
            self.actions(s);
        }
        let d = Duration::from_micros(self.rng.below(3000));
        self.at(self.now + d, Ev::Wake(s));
    }

    /// The program of slot `s` (rank `rank`, at `pc`) reaches a send: its value computed,
    /// the endpoint told. Returns its request.
    fn start_send(&mut self, s: usize, rank: usize, pc: usize, (dst, tag, sync, big): (usize, i32, bool, bool)) -> u32 {
        let p = &mut self.procs[s];
        let seq = p.m.next_send_seq(0, dst as i32, tag);
        let mid = MsgId { comm: 0, src: rank as u32, dst: dst as u32, tag, seq };
        let v = mix(p.hash, seq ^ ((dst as u64) << 32) ^ pc as u64);
        self.procs[s].computed.insert(mid, v);
        self.emit(s, v);
        let r = self.new_req(s);
        if self.cfg.fault_aware {
            // Sends are numbered too (the same on every replica); they never fail here.
            self.procs[s].ops.next(true);
        }
        let now = self.now;
        self.procs[s].ep.send(now, mid, Val(v, if big { 1000 } else { 8 }), sync, r);
        r
    }

    /// One step: true if the program moved.
    fn step_one(&mut self, s: usize) -> bool {
        let rank = self.procs[s].rank;
        let pc = self.procs[s].pc;
        let wait = self.procs[s].wait.clone();
        let Some(op) = self.progs[rank].get(pc).cloned() else {
            // The end: every send complete.
            let open = std::mem::take(&mut self.procs[s].open_sends);
            let still: Vec<u32> = open.into_iter().filter(|&r| self.done_req(s, r).is_none()).collect();
            let moved = still.is_empty() && self.procs[s].wait != Wait::Sends;
            if still.is_empty() {
                self.procs[s].wait = Wait::Sends;
            }
            self.procs[s].open_sends = still;
            return moved;
        };
        let advance = |sim: &mut Sim| {
            sim.procs[s].pc += 1;
            sim.procs[s].wait = Wait::Start;
        };
        match (op, wait) {
            (Op::Send { dst, tag, sync, big }, Wait::Start) => {
                let r = self.start_send(s, rank, pc, (dst, tag, sync, big));
                if sync {
                    self.procs[s].wait = Wait::Req(r);
                } else {
                    self.procs[s].open_sends.push(r);
                    advance(self);
                }
                true
            }
            (Op::Send { .. }, Wait::Req(r)) => match self.done_req(s, r) {
                Some(_) => {
                    advance(self);
                    true
                }
                None => false,
            },
            (Op::Recv { src: Some(src), tag }, Wait::Start) if self.cfg.fault_aware => {
                let r = self.numbered_recv(s, src, tag);
                self.procs[s].wait = Wait::Req(r);
                true
            }
            (Op::Recv { src, tag }, Wait::Start) => {
                let r = self.irecv(s, src, tag);
                self.procs[s].wait = Wait::Req(r);
                true
            }
            (Op::Recv { .. }, Wait::Req(r)) => match self.done_req(s, r) {
                Some((src, v)) => {
                    if self.cfg.fault_aware {
                        self.took(s, r, src, v);
                    }
                    self.emit(s, mix(src as u64, v));
                    advance(self);
                    true
                }
                None => false,
            },
            (Op::Probe, Wait::Start) => {
                let c = self.procs[s].ep.choice_point();
                self.procs[s].wait = Wait::Probe(c);
                true
            }
            (Op::Probe, Wait::Probe(c)) => {
                let pat = Pattern { comm: 0, src: None, tag: Some(WILD) };
                let p = &mut self.procs[s];
                let found = match p.ep.choice_known(c) {
                    Some(o) => {
                        let f = match o {
                            None => None,
                            Some(_) => match p.m.probe(exact(pat, o)) {
                                Some(e) => Some(*e),
                                None => return false,
                            },
                        };
                        p.ep.take_choice(c);
                        p.ep.decided(0, c, o);
                        f
                    }
                    None if p.ep.may_decide() => {
                        let f = p.m.probe(pat).copied();
                        p.ep.decided(0, c, f.map(|e| (e.src, e.tag, e.seq)));
                        f
                    }
                    None => return false,
                };
                self.emit(s, found.map_or(u64::MAX, |e| e.src as u64));
                advance(self);
                true
            }
            (Op::WaitAny { a, b }, Wait::Start) => {
                let ra = self.irecv(s, Some(a.0), Some(a.1));
                let rb = self.irecv(s, Some(b.0), Some(b.1));
                let c = self.procs[s].ep.choice_point();
                self.procs[s].wait = Wait::Any { a: ra, b: rb, c };
                true
            }
            (Op::WaitAny { .. }, Wait::Any { a, b, c }) => {
                let p = &mut self.procs[s];
                let done = |x: u32| p.reqs.get(&x).copied().flatten().is_some();
                let idx = match p.ep.choice_known(c) {
                    Some(o) => {
                        let i = o.map_or(0, |o| o.0 as usize);
                        if !done(if i == 0 { a } else { b }) {
                            return false;
                        }
                        p.ep.take_choice(c);
                        p.ep.decided(u32::MAX, c, o);
                        i
                    }
                    None if p.ep.may_decide() => {
                        let i = if done(a) {
                            0
                        } else if done(b) {
                            1
                        } else {
                            return false;
                        };
                        p.ep.decided(u32::MAX, c, Some((i as i32, 1, 1)));
                        i
                    }
                    None => return false,
                };
                let (first, other) = if idx == 0 { (a, b) } else { (b, a) };
                let (src, v) = self.done_req(s, first).expect("complete");
                self.emit(s, mix(idx as u64, mix(src as u64, v)));
                self.procs[s].wait = Wait::Other(other);
                true
            }
            (Op::WaitAny { .. }, Wait::Other(r)) => match self.done_req(s, r) {
                Some((src, v)) => {
                    self.emit(s, mix(src as u64, v));
                    advance(self);
                    true
                }
                None => false,
            },
            (op, w) => {
                self.violate(format!("slot {s}: operation {op:?} in state {w:?}"));
                false
            }
        }
    }

    fn check_done(&mut self, s: usize) {
        let p = &self.procs[s];
        let end = p.pc >= self.progs[p.rank].len() && p.wait == Wait::Sends;
        // Messages to a rank lost whole may never be committed (nobody takes them).
        let owed = p.ep.backup_pending_beyond(|m| p.lost.contains(&(m.dst as usize)));
        // A fault-aware master finishes once its replicas acknowledged its outcomes: a
        // replica that took a success its master failed at the end learns it (and leaves).
        let told = !self.cfg.fault_aware || !p.ep.is_master() || !p.ep.choices_unacked();
        self.procs[s].done = end && p.ep.idle() && !owed && p.wildcards.is_empty() && told;
    }

    // ------------------------------------------------------------- faults

    fn crash(&mut self, s: usize) {
        if matches!(self.procs[s].status, Status::Crashed | Status::Out) {
            return;
        }
        self.procs[s].status = Status::Crashed;
        // What reached the receivers' kernels stays; of the rest, a random prefix was on
        // the wire and arrives, the kernel's unsent data is lost (the connection resets).
        for to in 0..self.procs.len() {
            self.settle(s, to);
            if let Some(l) = self.links.get_mut(&(s, to)) {
                let unsent = l.q.iter().filter(|f| !f.3).count();
                let keep = self.rng.below(unsent as u64 + 1) as usize;
                for f in l.q.iter_mut().filter(|f| !f.3).take(keep) {
                    f.3 = true;
                }
            }
        }
        for o in 0..self.procs.len() {
            if o != s {
                self.close(s, o);
            }
        }
        if self.rng.bernoulli(0.5) {
            let d = ms(50 + self.rng.below(500));
            self.at(self.now + d, Ev::Ended(s));
        }
    }

    /// The failure detector: some of the others (at least one) suspect `s` about a second
    /// from now, if it is still frozen or cut off then.
    fn fd_oracle(&mut self, s: usize) {
        let mut any = false;
        for o in 0..self.procs.len() {
            if o != s && self.rng.bernoulli(0.6) {
                any = true;
                let d = ms(800 + self.rng.below(800));
                self.at(self.now + d, Ev::Fd { by: o, slot: s, when: Fd::Faulty });
            }
        }
        if !any {
            let o = (s + 1 + self.rng.below(self.procs.len() as u64 - 1) as usize) % self.procs.len();
            let d = ms(800 + self.rng.below(800));
            self.at(self.now + d, Ev::Fd { by: o, slot: s, when: Fd::Faulty });
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Wake(s) => self.wake(s),
            Ev::Crash(s) => self.crash(s),
            Ev::Freeze(s) => {
                if self.procs[s].status == Status::Running {
                    self.procs[s].status = Status::Frozen;
                    self.fd_oracle(s);
                }
            }
            Ev::Resume(s) => {
                if self.procs[s].status == Status::Frozen {
                    self.procs[s].status = Status::Running;
                    self.at(self.now, Ev::Wake(s));
                }
            }
            Ev::Cut(s) => {
                // What arrived before the cut arrived.
                for o in 0..self.procs.len() {
                    if o != s {
                        self.settle(s, o);
                        self.settle(o, s);
                    }
                }
                self.cut[s] = true;
                self.fd_oracle(s);
                // Its own detector hears nobody.
                let o = self.rng.below(self.procs.len() as u64) as usize;
                if o != s {
                    let d = ms(800 + self.rng.below(800));
                    self.at(self.now + d, Ev::Fd { by: s, slot: o, when: Fd::Isolated });
                }
            }
            Ev::Heal(s) => {
                self.cut[s] = false;
                for m in std::mem::take(&mut self.held_up[s]) {
                    self.to_launcher(s, m);
                }
                for m in std::mem::take(&mut self.held_down[s]) {
                    self.from_launcher(s, m);
                }
                for o in 0..self.procs.len() {
                    self.at(self.now, Ev::Wake(o));
                }
            }
            Ev::Fd { by, slot, when } => {
                let go = match when {
                    Fd::Faulty => self.procs[slot].status == Status::Frozen || self.cut[slot],
                    Fd::Isolated => self.cut[by],
                    Fd::False => true,
                };
                if go && self.procs[by].status == Status::Running {
                    self.procs[by].fd_suspects.push(slot);
                    self.at(self.now, Ev::Wake(by));
                }
            }
            Ev::Launcher(m) => self.launcher(m),
            Ev::ToProc(s, m) => {
                if matches!(self.procs[s].status, Status::Running | Status::Frozen) {
                    self.procs[s].inbox.push_back(m);
                    self.at(self.now, Ev::Wake(s));
                }
            }
            Ev::LauncherPoll => self.launcher_poll(),
            Ev::Ended(s) => {
                let _ = self.sup.handle_input(self.now, fencing::Input::Ended { slot: s, why: "exited".into() });
                for o in self.sup.drain_outputs() {
                    if let fencing::Output::Declared(d) = o {
                        self.declared(d.slot, d.left);
                    }
                }
            }
        }
    }

    fn state(&self) -> String {
        let mut o = String::new();
        for p in &self.procs {
            o += &format!(
                "slot {} rank {} {:?} done {} pc {}/{} at {:?} wait {:?} lease {:?} dead {:?} | {}\n",
                p.slot,
                p.rank,
                p.status,
                p.done,
                p.pc,
                self.progs[p.rank].len(),
                self.progs[p.rank].get(p.pc),
                p.wait,
                p.lease.valid_until(),
                p.ep.coordinator().dead_slots(),
                p.ep.summary()
            );
        }
        for p in &self.procs {
            o += &format!("slot {} accepted {:?}\n", p.slot, p.trace);
            if !p.failed_taken.is_empty() {
                o += &format!("slot {} failed receives naming ranks {:?}\n", p.slot, p.failed_taken);
            }
        }
        o += &format!("launcher dead {:?}; lease {:?}\n", self.sup.dead().slots(), self.lease);
        for l in &self.log {
            o += l;
            o += "\n";
        }
        o
    }

    /// `s` finished its program and is still in the job (an excluded process may have run
    /// to its end cut off from everyone: its output is not the job's).
    fn finished_ok(&self, s: usize) -> bool {
        self.procs[s].done && self.procs[s].status == Status::Running && !self.sup.is_fenced(s)
    }

    fn finished(&self) -> bool {
        self.procs.iter().all(|p| p.done || matches!(p.status, Status::Crashed | Status::Out))
            && (0..self.layout.n)
                .all(|k| self.lost_ranks.contains(&k) || self.layout.slots_of(k).any(|s| self.finished_ok(s)))
    }
}

/// A process of the job at its start.
fn start_proc(layout: Layout, s: usize, ecfg: Config, lease_len: Duration) -> Proc {
    let mut lease = Lease::new(lease_len, Duration::ZERO);
    lease.granted(Duration::ZERO);
    Proc {
        slot: s,
        rank: layout.rank_of(s),
        ep: Endpoint::new(layout, s, ecfg),
        m: Matcher::new(),
        pc: 0,
        wait: Wait::Start,
        reqs: HashMap::new(),
        next_req: 0,
        open_sends: Vec::new(),
        out: Vec::new(),
        hash: layout.rank_of(s) as u64,
        accepted: HashMap::new(),
        computed: HashMap::new(),
        rndv: HashMap::new(),
        trace: Vec::new(),
        choice_of: HashMap::new(),
        wildcards: Wildcards::new(),
        status: Status::Running,
        lease,
        next_renew: lease_len / 4,
        inbox: VecDeque::new(),
        written: Vec::new(),
        broken: Vec::new(),
        fd_suspects: Vec::new(),
        done: false,
        ops: Operations::new(),
        recv_src: HashMap::new(),
        lost: Vec::new(),
        failed_taken: Vec::new(),
    }
}

/// Draws the job's faults (at most `cfg.faults`) and schedules them; returns them in words,
/// and which slots they touch.
fn draw_faults(sim: &mut Sim, cfg: &JobConfig, slots: usize) -> (Vec<String>, Vec<bool>) {
    let nfaults = sim.rng.below(cfg.faults as u64 + 1) as usize;
    let mut faults = Vec::new();
    let mut touched = vec![false; slots];
    for _ in 0..nfaults {
        let s = sim.rng.below(slots as u64) as usize;
        let t = ms(sim.rng.below(1500));
        let k = sim.rng.below(4);
        touched[s] = true;
        match k {
            0 => {
                sim.at(t, Ev::Crash(s));
                faults.push(format!("crash slot {s} at {:.3} s", t.as_secs_f64()));
            }
            1 => {
                let d = ms(200 + sim.rng.below(3000));
                sim.at(t, Ev::Freeze(s));
                sim.at(t + d, Ev::Resume(s));
                faults.push(format!("freeze slot {s} at {:.3} s for {:.3} s", t.as_secs_f64(), d.as_secs_f64()));
            }
            2 => {
                let d = ms(200 + sim.rng.below(3000));
                sim.at(t, Ev::Cut(s));
                sim.at(t + d, Ev::Heal(s));
                faults.push(format!("cut off slot {s} at {:.3} s for {:.3} s", t.as_secs_f64(), d.as_secs_f64()));
            }
            _ => {
                let by = sim.rng.below(slots as u64) as usize;
                if by != s {
                    touched[by] = true;
                    sim.at(t, Ev::Fd { by, slot: s, when: Fd::False });
                    faults.push(format!("slot {by} falsely suspects slot {s} at {:.3} s", t.as_secs_f64()));
                }
            }
        }
    }
    (faults, touched)
}

impl Sim {
    /// Runs the events until the job ends, breaks a rule, or hangs.
    fn run_events(&mut self) {
        let limit = Duration::from_secs(300);
        while let Some(Reverse((t, id))) = self.heap.pop() {
            let ev = self.evs.remove(&id).expect("event");
            if t > limit || self.events > 5_000_000 {
                self.violate("the job hangs: not finished after 300 s of virtual time".into());
                break;
            }
            self.now = t;
            self.events += 1;
            self.handle(ev);
            if self.violation.is_some() || self.failed.is_some() || self.finished() {
                break;
            }
        }
        if self.violation.is_none() && self.failed.is_none() && !self.finished() {
            self.violate(format!("the job hangs: nothing left to happen at {:.3} s", self.now.as_secs_f64()));
        }
    }

    /// The checks at the end: the outputs of the finished replicas of a rank agree, and what a
    /// finished replica sent is what was delivered.
    fn check_outputs(&mut self) {
        let layout = self.layout;
        // Outputs of the finished replicas of a rank agree.
        if self.violation.is_none() && self.failed.is_none() {
            for k in 0..layout.n {
                let outs: Vec<&Vec<u64>> =
                    layout.slots_of(k).filter(|&s| self.finished_ok(s)).map(|s| &self.procs[s].out).collect();
                if outs.windows(2).any(|w| w[0] != w[1]) {
                    self.violate(format!("the replicas of rank {k} that finished disagree"));
                }
            }
        }
        // What a finished replica sent is what was delivered.
        if self.violation.is_none() {
            for p in self.procs.iter().filter(|p| self.finished_ok(p.slot)) {
                if let Some((m, v, w)) =
                    p.computed.iter().find_map(|(m, v)| self.values.get(m).filter(|w| *w != v).map(|w| (m, v, w)))
                {
                    let msg = format!("slot {} computed {v} for {m:?}, but {w} was delivered", p.slot);
                    self.violate(msg);
                    break;
                }
            }
        }
    }
}

/// Runs one job: programs, faults and network drawn from `seed`.
pub fn run(seed: u64, cfg: JobConfig) -> RunReport {
    let mut rng = Rng::new(seed);
    let layout = Layout::new(cfg.n, cfg.r);
    let progs = if cfg.fault_aware {
        fault_aware::programs(&mut rng, layout.n, cfg.messages)
    } else {
        programs(&mut rng, layout.n, cfg.messages)
    };
    let lease_len = Duration::from_secs(1);
    let ecfg = Config { stall_limit: Some(Duration::from_secs(2)), rndv_limit: RNDV_LIMIT, ..Config::default() };
    let slots = layout.slots();
    let procs = (0..slots)
        .map(|s| {
            let mut p = start_proc(layout, s, ecfg, lease_len);
            p.ep.set_notify(cfg.fault_aware);
            p.ep.set_share_received(cfg.fault_aware && cfg.share);
            p
        })
        .collect();
    let mut sim = Sim {
        rng,
        now: Duration::ZERO,
        seq: 0,
        heap: BinaryHeap::new(),
        evs: HashMap::new(),
        procs,
        links: HashMap::new(),
        cut: vec![false; slots],
        held_up: (0..slots).map(|_| Vec::new()).collect(),
        held_down: (0..slots).map(|_| Vec::new()).collect(),
        sup: Supervisor::new(layout, lease_len),
        layout,
        progs,
        values: HashMap::new(),
        violation: None,
        failed: None,
        events: 0,
        takeovers: 0,
        lease: lease_len,
        up_last: vec![Duration::ZERO; slots],
        down_last: vec![Duration::ZERO; slots],
        log: Vec::new(),
        cfg,
        drained: 0,
        commits: 0,
        acked: 0,
        lost_ranks: Vec::new(),
        left: 0,
        followed: 0,
        relays: 0,
    };
    // Start-up: a renewal right away for everyone (the launcher grants it).
    for s in 0..slots {
        let t = Duration::from_micros(sim.rng.below(2000));
        sim.at(t, Ev::Wake(s));
        // The renewals' timer.
        sim.at(lease_len / 4, Ev::Wake(s));
        let _ = sim.sup.handle_input(Duration::ZERO, fencing::Input::Renew(s));
    }
    sim.sup.set_rank_loss_tolerated(cfg.fault_aware);
    let (mut faults, touched) = draw_faults(&mut sim, &cfg, slots);
    let doomed = fault_aware::draw_losses(&mut sim, &mut faults);
    sim.run_events();
    sim.check_outputs();
    if cfg.fault_aware {
        sim.check_outcomes();
    }
    let allowed = (0..layout.n).all(|k| {
        let t = layout.slots_of(k).filter(|&s| touched[s]).count();
        // A rank lost on purpose is one more failure in a fault-aware job; otherwise it ends it.
        if doomed.contains(&k) {
            cfg.fault_aware
        } else {
            t < layout.r
        }
    });
    let verdict = match (sim.violation.take(), sim.failed.take()) {
        (Some(v), _) => Verdict::Violation(v),
        (None, Some(f)) if allowed => {
            Verdict::Violation(format!("the job failed although every rank kept an untouched replica: {f}"))
        }
        (None, Some(f)) => Verdict::Failed(f),
        (None, None) => Verdict::Completed,
    };
    let state = sim.state();
    RunReport {
        seed,
        verdict,
        faults,
        events: sim.events,
        end: sim.now,
        takeovers: sim.takeovers,
        commits: sim.commits,
        acked: sim.acked,
        drained: sim.drained,
        state,
        failed_ops: sim.procs.iter().filter(|p| sim.finished_ok(p.slot)).map(|p| p.failed_taken.len()).sum(),
        lost_ranks: sim.lost_ranks,
        left: sim.left,
        followed: sim.followed,
        relays: sim.relays,
    }
}

/// A gather of every other process's message to `root` (tag 50), then a broadcast from it
/// (tag 51): the pattern the library's collectives make over point-to-point.
pub(crate) fn gather_then_broadcast(progs: &mut [Vec<Op>], root: usize) {
    let n = progs.len();
    for k in (0..n).filter(|&k| k != root) {
        progs[k].push(Op::Send { dst: root, tag: 50, sync: false, big: false });
        progs[root].push(Op::Recv { src: Some(k), tag: Some(50) });
    }
    for k in (0..n).filter(|&k| k != root) {
        progs[root].push(Op::Send { dst: k, tag: 51, sync: false, big: false });
        progs[k].push(Op::Recv { src: Some(root), tag: Some(51) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_pair_every_send_with_a_receive() {
        let mut rng = Rng::new(7);
        let p = programs(&mut rng, 4, 200);
        let sends: usize = p.iter().flatten().filter(|o| matches!(o, Op::Send { .. })).count();
        let recvs: usize = p
            .iter()
            .flatten()
            .map(|o| match o {
                Op::Recv { .. } => 1,
                Op::WaitAny { .. } => 2,
                _ => 0,
            })
            .sum();
        assert_eq!(sends, 200);
        assert_eq!(recvs, 200);
    }

    #[test]
    fn fault_free_jobs_complete() {
        for seed in 0..30 {
            let r = run(seed, JobConfig { faults: 0, ..JobConfig::default() });
            assert_eq!(r.verdict, Verdict::Completed, "seed {seed}: {r:?}");
        }
    }

    #[test]
    fn a_run_is_a_function_of_its_seed() {
        let a = run(42, JobConfig::default());
        let b = run(42, JobConfig::default());
        assert_eq!((a.verdict, a.events, a.end), (b.verdict, b.events, b.end));
    }

    #[test]
    fn acknowledged_commits_are_safe_only_with_the_drain() {
        // Schedules where a destination drops its connection with a master it suspects
        // while its kernel holds data the master's commit called acknowledged (the
        // replicas dropped their copies): without taking that data first, the job hangs
        // once the master is declared dead; with it, or without acknowledged commits, it
        // completes.
        for (seed, n, r) in [(6813, 2, 3), (6903, 3, 3), (7858, 4, 2), (8840, 3, 2)] {
            let cfg = JobConfig { n, r, messages: 30, faults: 3, ..JobConfig::default() };
            let bad = run(seed, JobConfig { drain: false, ..cfg });
            assert!(matches!(bad.verdict, Verdict::Violation(_)), "seed {seed} without the drain: {:?}", bad.verdict);
            let good = run(seed, cfg);
            assert!(
                good.drained > 0 && good.acked > 0,
                "seed {seed}: {} taken, {} acknowledged",
                good.drained,
                good.acked
            );
            assert_eq!(good.verdict, Verdict::Completed, "seed {seed}");
            let plain = run(seed, JobConfig { drain: false, acked_commits: false, ..cfg });
            assert_eq!(plain.verdict, Verdict::Completed, "seed {seed} without acknowledged commits");
        }
    }

    #[test]
    fn replicated_jobs_survive_random_faults() {
        let mut bad = Vec::new();
        for seed in 0..300 {
            for (n, r) in [(3, 2), (2, 3)] {
                let rep = run(seed, JobConfig { n, r, messages: 30, faults: 3, ..JobConfig::default() });
                if let Verdict::Violation(v) = &rep.verdict {
                    bad.push(format!("seed {seed} n {n} r {r}: {v}; faults {:?}\n{}", rep.faults, rep.state));
                }
            }
        }
        assert!(bad.is_empty(), "{} violations, first: {}", bad.len(), bad[0]);
    }
}
