//! The replica coordination protocol's side of the TCP device (thesis §4.3, SPEC §10). The
//! protocol itself — fan-out and commits, backup/log tables, takeover and resends, held
//! transmissions, synchronous acknowledgements, the reorder queue, choice points and their
//! acknowledgements, stall timers — is the pure [`p2pmpi_core::replication::Endpoint`]
//! (exercised by `p2pmpi-sim`'s whole-job simulation); this module feeds it what the sockets
//! and the program do and carries out its actions: frames written to slots, user sends
//! completed, suspicions reported to the launcher.

mod driver;
mod hooks;
mod shared;

use super::conn::{Conn, ConnError, Out, Payload, RState, ReqId, StatusInfo, EAGER_LIMIT};
use super::engine::Matched;
use super::engine::{alloc_req, Coordination, Core, Eager, Req, ReqState, Waits};
use super::failpoints;
use super::revocations;
use crate::error::{Error, Result};
use p2pmpi_core::machine::Machine;
use p2pmpi_core::matching::FastMap;
use p2pmpi_core::matching::{Arrival, Body, Envelope, Pattern};
use p2pmpi_core::replication::endpoint::Parked;
use p2pmpi_core::replication::endpoint::{self as protocol, Frame, Input, Output, Step, TxId};
use p2pmpi_core::replication::failures::{self, Failed};
use p2pmpi_core::replication::operations::{Follow, Operations};
use p2pmpi_core::replication::stranded::{self, Stranded};
use p2pmpi_core::replication::wildcards::{Post, Wildcards};
use p2pmpi_core::replication::Endpoint;
use p2pmpi_core::replication::{Layout, MsgId, Outcome};
use p2pmpi_wire::{FrameKind, Header, Mid};
use std::ops::Range;
use std::time::{Duration, Instant};

/// Messages up to this size are copied into a non-master's backup table (its send returns at
/// once); larger ones are *lent*: the send completes only when the master commits the message
/// (or, after a takeover, when this replica transmitted it itself), so the user's buffer is
/// the backup and nothing is copied.
pub const BACKUP_COPY_LIMIT: usize = EAGER_LIMIT;

/// At most this many bytes of copies in a non-master's backup table: past it, sends are lent
/// too, so a replica running ahead of its master holds a bounded window of unsent payload.
pub const BACKUP_WINDOW: usize = 4 << 20;

/// At most this many bytes of recently committed messages a non-master keeps (and at most
/// [`RECENT_MAX`] of them), to send again if it takes over: a master's write counts as done
/// once its kernel accepted it, and a master killed with unread input resets its connections,
/// which discards what its kernel had not sent yet — messages it had already committed.
/// Receivers drop what they already have (the history table).
pub const RECENT_WINDOW: usize = 8 << 20;
/// At most this many recently committed messages kept.
pub const RECENT_MAX: usize = 1 << 16;

/// Heap a non-master faults in for its copies at start: twice its two windows (when the
/// message size changes, the recent window still holds the previous size's copies).
const WARM_GOAL: usize = 2 * (RECENT_WINDOW + BACKUP_WINDOW);

/// The data of a protocol message: the user's buffer (valid until its request completes) or
/// an owned copy.
#[derive(Debug)]
pub(super) enum Bytes {
    Lent(*const u8, usize),
    Owned(Vec<u8>),
}

impl Bytes {
    fn view(&self) -> &[u8] {
        match self {
            Bytes::Lent(_, 0) => &[],
            // SAFETY: a lent buffer stays valid until its request completes, and the protocol
            // hands it out only until then (a withdrawn send is copied first, `detach`).
            Bytes::Lent(p, n) => unsafe { std::slice::from_raw_parts(*p, *n) },
            Bytes::Owned(v) => v,
        }
    }

    fn into_payload(mut self) -> Payload {
        match &mut self {
            Bytes::Lent(_, 0) => Payload::None,
            Bytes::Lent(p, n) => Payload::Raw(*p, *n),
            Bytes::Owned(v) if v.is_empty() => Payload::None,
            Bytes::Owned(v) => Payload::Owned(std::mem::take(v)),
        }
    }

    /// The owned copy's buffer (empty for a lent buffer).
    pub(super) fn into_vec(mut self) -> Vec<u8> {
        match &mut self {
            Bytes::Lent(..) => Vec::new(),
            Bytes::Owned(v) => std::mem::take(v),
        }
    }
}

impl Drop for Bytes {
    /// A copy no longer needed (committed and out of the recent window, or written) goes back
    /// to the pool: a non-master copies every small message it sends, and a fresh buffer per
    /// message costs page faults (the pool's reason to be).
    fn drop(&mut self) {
        if let Bytes::Owned(v) = self {
            crate::pool::give(std::mem::take(v));
        }
    }
}

impl protocol::Payload for Bytes {
    fn len(&self) -> usize {
        match self {
            Bytes::Lent(_, n) => *n,
            Bytes::Owned(v) => v.len(),
        }
    }
    fn is_lent(&self) -> bool {
        matches!(self, Bytes::Lent(..))
    }
    fn share(&self) -> Bytes {
        match self {
            Bytes::Lent(p, n) => Bytes::Lent(*p, *n),
            Bytes::Owned(v) => Bytes::Owned(crate::pool::copy_of(v)),
        }
    }
    fn to_owned_copy(&self) -> Bytes {
        Bytes::Owned(crate::pool::copy_of(self.view()))
    }
}

// SAFETY: the raw pointers inside are lent buffers of requests (`Bytes::Lent`), which the API
// layer keeps valid until each request completes or is detached, whichever thread that happens
// on; they are not tied to the thread that made them. The engine holding this state is only
// ever used behind the global lock, one thread at a time.
unsafe impl Send for Replication {}

/// The replication state of a process of a job run with `-r R` (R > 1).
pub(crate) struct Replication {
    /// Which slots run which rank.
    pub(super) layout: Layout,
    pub(super) ep: Endpoint<Bytes, ReqId>,
    /// The origin of the endpoint's clock.
    origin: Instant,
    /// The device request standing for each transmission under way (its completion is the
    /// write).
    pub(super) tx_req: FastMap<TxId, ReqId>,
    /// The master's wildcard receives not complete yet: their choice point and communicator.
    pub(super) choice_of: FastMap<ReqId, (u64, u32)>,
    /// The message a wildcard receive of the master matched: source, tag, sequence.
    pub(super) matched: FastMap<ReqId, (i32, i32, u64)>,
    /// A non-master's wildcard receives waiting for their master's choice.
    pub(super) wildcards: Wildcards<ReqId>,
    /// Fault-aware programs (`Policy::Notify`): the operations posted so far (sends and
    /// receives of the program, numbered alike on every replica of the rank), the request of
    /// each one not taken yet, and the successes the program took.
    pub(super) ops: Operations<ReqId>,
    /// The program handles failures (`Policy::Notify`, set before the job starts): its
    /// operations are numbered.
    pub(super) numbered: bool,
    /// A schedule (immediate collective) is posting: its operations are not numbered (they
    /// are posted when the progress engine runs, which differs between replicas).
    pub(super) in_schedule: bool,
    /// The master told failure outcomes that this process has not applied yet.
    pub(super) words: bool,
    /// Ranks lost whole (every replica declared dead), in the order this process heard.
    pub(super) lost_ranks: Vec<i32>,
    /// Revocations a non-master heard from the launcher: its master applies them and tells
    /// which operations failed; this process applies them itself if it takes over.
    pub(super) unapplied: Vec<u32>,
    /// A send is being carried out: the endpoint's time is that send's (read just before).
    pub(super) sending: bool,
    /// Dropping its connections with this slot, this process takes the data frames its
    /// kernel already holds from them, and nothing else ([`Core::drop_peer`]).
    pub(super) draining: Option<i32>,
    /// The message streaming in on each connection, by connection id: what this layer
    /// keeps about it (the transport's connection knows nothing of replication). An entry is
    /// cleared when its connection id is used again ([`Coordination::conn_opened`]).
    streams: Vec<Streaming>,
    /// A non-master that naps runs its waiting thread (this id) under `SCHED_BATCH` while it
    /// naps: from its first nap until a rendez-vous announcement or a takeover ([`NAP`]).
    pub(super) batched: Option<libc::pid_t>,
    /// When the last rendez-vous announcement arrived ([`AWAKE_AFTER_RNDV`]).
    pub(super) announced: Option<Instant>,
}

/// What the replication layer keeps about the message streaming in on one connection.
#[derive(Debug, Default)]
pub(super) struct Streaming {
    /// The large eager message the connection streams into a buffer of its own is matched
    /// only once complete (a sender that dies mid-message must leave no trace, its
    /// successor sends the message again).
    pub(super) kept: bool,
    /// ... and it is a synchronous send's.
    pub(super) sync: bool,
    /// ... or a relay: its master's copy of a message of a rank lost whole (a fault-aware
    /// job's shared receives).
    pub(super) relay: bool,
    /// A message streaming straight into a receive: how to undo its match if the sender
    /// dies before the end.
    pub(super) undo: Option<(Envelope, Pattern, usize)>,
    /// Rendez-vous data streaming into receive `.1`: on completion the receiver says it has
    /// message `.0`; if the connection goes away first, the receive waits again for the data
    /// (the sender's successor sends it).
    pub(super) rndv: Option<(Mid, ReqId)>,
}

/// How long a non-master waiting on a host with more of the job's processes than cores sleeps
/// between two polls that brought nothing, where a master yields; it also runs under
/// `SCHED_BATCH` (see [`batch_start`]). `P2PMPI_NAP_US` overrides it; 0 turns both off. The
/// masters' round trips do not wait for a non-master but for the rare frames it answers
/// (rendez-vous pulls: see [`AWAKE_AFTER_RNDV`]; choice acknowledgements) and a full ring;
/// polling with `sched_yield`, it took turns of its core from the master sharing it (`-r 2`
/// at 1 KiB on 2 cores: 1.3–1.7× its traffic by hand, about 1.0–1.2× napping).
pub(super) const NAP: Duration = Duration::from_micros(20);

/// A non-master naps only this long after the last rendez-vous announcement it received: a
/// large message's sender waits for every destination replica's pull and for it to take the
/// data out of a full ring, so a napping replica put its sleeps on the masters' path (1 MiB
/// round trips took twice as long).
pub(super) const AWAKE_AFTER_RNDV: Duration = Duration::from_millis(10);

/// [`NAP`], or the setting of `P2PMPI_NAP_US`.
fn nap_setting() -> Option<Duration> {
    static NAP_US: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let us = *NAP_US.get_or_init(|| std::env::var("P2PMPI_NAP_US").ok().and_then(|v| v.trim().parse().ok()));
    let nap = us.map_or(NAP, Duration::from_micros);
    (!nap.is_zero()).then_some(nap)
}

/// Puts the calling thread under `SCHED_BATCH` (a non-master that naps): the same share of
/// the CPU, but its wake-ups from a nap do not preempt the master running on its core — they
/// wait for that master's next yield or the end of its slice. Returns the thread's id, for
/// [`batch_end`]; `None` if the kernel refused.
fn batch_start() -> Option<libc::pid_t> {
    // SAFETY: `gettid` takes nothing and returns the calling thread's id.
    let tid = unsafe { libc::gettid() };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid `sched_param` for the call's duration; the call changes only
    // the scheduling policy of this thread.
    (unsafe { libc::sched_setscheduler(tid, libc::SCHED_BATCH, &param) } == 0).then_some(tid)
}

/// Gives thread `tid` back the normal policy (a large message came, or its process became its
/// rank's master).
fn batch_end(tid: libc::pid_t) {
    if tid <= 0 {
        return;
    }
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: as in `batch_start`: a valid `sched_param`, a policy change of one thread of
    // this process (SCHED_OTHER at the same nice value needs no privilege).
    unsafe { libc::sched_setscheduler(tid, libc::SCHED_OTHER, &param) };
}

/// Whether masters flag commits acknowledged (`P2PMPI_ACKED_COMMITS=1`).
fn acked_commits() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("P2PMPI_ACKED_COMMITS").is_ok_and(|v| v == "1"))
}

impl Replication {
    /// A rendez-vous announcement arrived: no nap for [`AWAKE_AFTER_RNDV`], and the normal
    /// policy again (a batch thread woken by the data would wait for the running master's
    /// turn to end while that master waits for its pull).
    pub(super) fn stay_awake(&mut self) {
        self.announced = Some(Instant::now());
        if let Some(tid) = self.batched.take() {
            batch_end(tid);
        }
    }

    pub(super) fn new(layout: Layout, slot: usize) -> Replication {
        let cfg = protocol::Config {
            copy_limit: BACKUP_COPY_LIMIT,
            backup_window: BACKUP_WINDOW,
            recent_window: RECENT_WINDOW,
            recent_max: RECENT_MAX,
            stall_limit: None,
            rndv_limit: EAGER_LIMIT,
        };
        let mut ep = Endpoint::new(layout, slot, cfg);
        let notify = crate::lifecycle::policy() == crate::lifecycle::Policy::Notify;
        ep.set_notify(notify);
        // A program that handles failures: a new master must have every message its master
        // received (a receive from a rank lost whole fails).
        ep.set_share_received(notify);
        if !ep.is_master() {
            // The memory of its copies, faulted in once before the program sends anything:
            // later, its master would run far ahead of it meanwhile. A page touched per
            // 4 KiB, which keeps the start-up short (taking long to start leaves faults more
            // time to strike while the job starts).
            crate::pool::warm_heap(WARM_GOAL);
        }
        Replication {
            layout,
            ep,
            origin: Instant::now(),
            tx_req: FastMap::default(),
            choice_of: FastMap::default(),
            matched: FastMap::default(),
            wildcards: Wildcards::new(),
            ops: Operations::new(),
            numbered: notify,
            in_schedule: false,
            words: false,
            lost_ranks: Vec::new(),
            unapplied: Vec::new(),
            sending: false,
            draining: None,
            streams: Vec::new(),
            batched: None,
            announced: None,
        }
    }

    /// What is kept about the message streaming in on connection `cid`.
    pub(super) fn stream(&mut self, cid: usize) -> &mut Streaming {
        if cid >= self.streams.len() {
            self.streams.resize_with(cid + 1, Streaming::default);
        }
        &mut self.streams[cid]
    }

    pub(super) fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// A rare event (a suspicion, a death declared, the universe growing): never refused.
    pub(super) fn event(&mut self, now: Duration, input: Input) {
        if let Err(e) = self.ep.handle_input(now, input) {
            debug_assert!(false, "an event refused: {e:?}");
        }
    }

    /// A control frame from replica `from` (a commit, a choice and its acknowledgements, a
    /// pull or a synchronous acknowledgement): whether the endpoint accepted it. It takes the
    /// endpoint's latest time (no clock read per frame).
    fn control(&mut self, input: Input) -> bool {
        let now = self.ep.now();
        self.ep.handle_input(now, input).is_ok()
    }

    pub(super) fn on_commit(&mut self, from: usize, mid: MsgId, acked: bool) -> bool {
        self.control(Input::Commit { from, mid, acked })
    }

    pub(super) fn on_pull(&mut self, from: usize, mid: MsgId, have: bool) -> bool {
        self.control(Input::Pull { from, mid, have })
    }

    /// Shared receives: replica `from` (of higher index) has message `mid` of another rank.
    pub(super) fn on_received(&mut self, from: usize, mid: MsgId) -> bool {
        self.control(Input::Received { from, mid })
    }

    pub(super) fn on_sync_ack(&mut self, from: usize, mid: MsgId) -> bool {
        self.control(Input::SyncAck { from, mid })
    }

    pub(super) fn on_choice(&mut self, from: usize, point: u64, outcome: Outcome) -> bool {
        self.control(Input::Choice { from, point, outcome })
    }

    pub(super) fn on_choice_ack(&mut self, from: usize, point: u64) -> bool {
        self.control(Input::ChoiceAck { from, point })
    }

    pub(super) fn on_choice_query(&mut self, from: usize) -> bool {
        self.control(Input::ChoiceQuery { from })
    }

    pub(super) fn on_choices_told(&mut self, from: usize) -> bool {
        self.control(Input::ChoicesTold { from })
    }

    /// The universe has `n` ranks (a spawn).
    pub(super) fn grow(&mut self, n: usize) {
        let now = self.now();
        self.event(now, Input::Grow { n });
    }

    /// The endpoint's timers (stalled transmissions, parked messages waiting too long),
    /// with the stall limit `limit`.
    pub(super) fn timers(&mut self, limit: Duration) {
        self.ep.set_stall_limit(Some(limit));
        let now = self.now();
        self.ep.handle_timeout(now);
    }
}

/// The MID of a message this process accepted.
pub(super) fn env_mid(env: &Envelope, me: i32) -> MsgId {
    MsgId { comm: env.comm, src: env.src as u32, dst: me as u32, tag: env.tag, seq: env.seq }
}

const DONE: StatusInfo = StatusInfo { source: 0, tag: 0, len: 0, cancelled: false };

/// `P2PMPI_REPL_DEBUG` set: replication events (failures, takeovers) are printed.
fn debug_replication() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("P2PMPI_REPL_DEBUG").is_some())
}

/// What a failure outcome stands for, as an error (`None`: not a failure outcome).
pub(super) fn failure_error(o: Outcome) -> Option<Error> {
    Some(match failures::outcome_failure(o)?.0 {
        Failed::Lost(rank) => Error::PeerLost { rank: rank as i32, cause: "all replicas for that rank failed".into() },
        Failed::Revoked => Error::Revoked,
    })
}

/// The failure outcome an error stands for (`None`: an error the replicas do not follow).
pub(super) fn failed_of(e: &Error) -> Option<Failed> {
    match e {
        Error::PeerLost { rank, .. } if *rank >= 0 => Some(Failed::Lost(*rank as u32)),
        Error::Revoked => Some(Failed::Revoked),
        _ => None,
    }
}

pub(super) use p2pmpi_core::replication::wildcards::exact;

/// A set of request indices as a choice's outcome: the first, how many, and a mask of the
/// (at most 64) indices from the first. `None`: the empty set.
pub(super) fn outcome_of(done: &[usize]) -> Outcome {
    let first = *done.first()?;
    let mask = done.iter().filter(|&&i| i - first < 64).fold(0u64, |m, &i| m | 1 << (i - first));
    Some((first as i32, mask.count_ones() as i32, mask))
}

/// The indices an outcome of [`outcome_of`] names.
pub(super) fn indices_of(o: Outcome) -> Vec<usize> {
    let Some((first, _, mask)) = o else { return Vec::new() };
    let first = first.max(0) as usize;
    (0..64).filter(|k| mask & (1 << k) != 0).map(|k| first + k).collect()
}
