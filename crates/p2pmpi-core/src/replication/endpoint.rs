//! One replica's whole side of the replica coordination protocol as a single state machine
//! without I/O (the sans-IO style of [`crate::fd`]): the library's TCP device and the
//! simulator (`p2pmpi-sim`'s `replicated` module) drive this very code.
//!
//! Events go in — a send the program reached, a frame that arrived (commit, choice,
//! synchronous acknowledgement), a transmission written, a suspicion, a death the launcher
//! declared, the time — and outputs come out ([`Output`]): frames to transmit to a slot, user
//! sends that completed, suspicions to report to the launcher, a fatal loss.
//!
//! It is a [`Machine`] like every core: the rare events — a suspicion, a death declared, a
//! commit or another control frame from a replica, the universe growing — are [`Input`]s,
//! the timers run in [`Machine::handle_timeout`], outputs come from [`Machine::poll_output`].
//! The **fast path** stays direct calls, because it runs for every message and carries the
//! payload and the user's request (generic types an input enum would have to carry, and
//! that a match per message would only move around): [`Endpoint::send`],
//! [`Endpoint::written`], [`Endpoint::progress`], [`Endpoint::detach`]; the receiving
//! side's [`Endpoint::park`], [`Endpoint::unpark`], [`Endpoint::pull`], [`Endpoint::have`],
//! [`Endpoint::sync_unmatched`], [`Endpoint::consumed`], [`Endpoint::matched_sync`],
//! [`Endpoint::duplicate`]; and the program's choice points ([`Endpoint::choice_point`],
//! [`Endpoint::take_choice`], [`Endpoint::decided`]), reached by its receives. The settings
//! ([`Endpoint::set_notify`], [`Endpoint::set_stall_limit`]) and the queries (`&self`) are
//! direct too.
//!
//! The endpoint holds:
//!
//! * the [`Coordinator`] (dead set and election, backup and log tables, takeover);
//! * the master's **fan-out and commit accounting**: a send is transmitted to every alive
//!   replica of its destination, and committed to this rank's other replicas once every
//!   transmission is written (thesis algorithm 4); a synchronous send also waits for a
//!   destination replica's acknowledgement;
//! * **suspicions** (fencing, see the fencing module): nothing more is transmitted to a suspect,
//!   and its unwritten transmissions are *held* — they do not count as written until the
//!   launcher declares it dead (or excludes this process instead, whose successor resends);
//! * the non-master's **bounded backups**: small messages are copied, large ones (or past a
//!   window of copies) are lent — the send completes on commit — and a window of recently
//!   committed copies is kept to be sent again on takeover (a killed master's kernel may
//!   drop what it had accepted);
//! * the **reorder queue** of the receiving side: messages that came before their turn (a new
//!   master resends what an old one had partly sent) wait for it, with a time limit;
//! * **choice points** ([`Choices`]): the master tells its replicas, in index order, every
//!   non-deterministic outcome, and transmits nothing new before every replica acknowledged
//!   it; a new master first gathers what its replicas know;
//! * **rendez-vous** for large messages: announced to every destination replica, pulled by
//!   each, committed once each has it whole;
//! * **stall timers**: a destination that takes no byte of an unwritten transmission for the
//!   stall limit is suspected.
//! * **shared receives** (fault-aware jobs only, [`Endpoint::set_share_received`]): the
//!   replicas tell their possible masters each message they have, a master transmits nothing
//!   its program reached after a message before its possible successors have it, and relays
//!   it when its sender is lost whole.
//!
//! The *history table* (what was delivered, per channel) is the driver's
//! [`crate::matching::Matcher`]; the endpoint is told the next expected sequence where it
//! needs it.

use super::seq_table::SeqTable;
use super::{Choices, Coordinator, Layout, MsgId, Outcome, Recovery, SendAction};
use crate::machine::{Machine, Time};
use crate::matching::{FastMap, FastSet};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// What the endpoint needs to know of a payload. The driver picks the representation: the
/// library's device uses the user's buffer (lent, valid until the send completes) or an owned
/// copy; the simulator uses values.
pub trait Payload: Sized {
    /// Bytes of data.
    fn len(&self) -> usize;
    /// Whether it is an empty message.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether this is the user's own buffer (valid only until the send completes).
    fn is_lent(&self) -> bool;
    /// The same bytes, for one more transmission (cheap for a lent buffer).
    fn share(&self) -> Self;
    /// An owned copy (a lent buffer whose send is withdrawn).
    fn to_owned_copy(&self) -> Self;
}

/// Identifies one tracked transmission (an eager data frame, whose write the driver reports
/// with [`Endpoint::written`], or a choice frame or query, which count once answered).
pub type TxId = u64;

/// Sizes and limits.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Messages up to this size are copied into a non-master's backup table; larger ones are
    /// lent (the send completes when the master commits it).
    pub copy_limit: usize,
    /// At most this many bytes of copies in the backup table; past it, sends are lent too.
    pub backup_window: usize,
    /// At most this many bytes of recently committed copies kept for a takeover.
    pub recent_window: usize,
    /// At most this many recently committed copies.
    pub recent_max: usize,
    /// A destination that takes nothing of an unwritten transmission for this long is
    /// suspected; a message waits this long in the reorder queue before the job gives up.
    /// `None`: no limit (no failure detector).
    pub stall_limit: Option<Duration>,
    /// Messages larger than this travel by **rendez-vous**: the master announces them
    /// (`Rts`) to every destination replica, sends the data to each one that matched them
    /// (`Rtr`), and counts a destination done when it says it has the whole message
    /// (`Have`) — not when the write completes, so that a dying master's kernel cannot drop
    /// a committed message. No receiver allocates for an unexpected large message.
    pub rndv_limit: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            copy_limit: 128 << 10,
            backup_window: 4 << 20,
            recent_window: 8 << 20,
            recent_max: 1 << 16,
            stall_limit: None,
            rndv_limit: 128 << 10,
        }
    }
}

/// A frame of the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<P> {
    /// A message, eager (header and data).
    Data { mid: MsgId, payload: P, sync: bool },
    /// A large message's announcement (rendez-vous): `len` bytes.
    Rts { mid: MsgId, len: u64, sync: bool },
    /// A destination replica matched the announced message: send it the data.
    Rtr { mid: MsgId },
    /// The data of a rendez-vous message.
    RndvData { mid: MsgId, payload: P },
    /// A destination replica has the whole message (received, or had it already).
    Have { mid: MsgId },
    /// The master's commit of `mid` to its own replicas. `acked` (on the wire): when the
    /// commit was written, every alive destination replica's kernel had acknowledged
    /// everything this master had written to it (this message and the channel's earlier
    /// ones). The endpoint emits `true` where the flag *may* be set — the driver, which sees
    /// the connections, clears it unless its kernel confirms — and `false` where it must not
    /// (a new master committing again what its predecessor committed).
    Commit { mid: MsgId, acked: bool },
    /// The master's outcome at choice point `point` (communicator `comm`, for the wire).
    Choice { comm: u32, point: u64, outcome: Outcome },
    /// A destination replica matched synchronous message `mid`.
    SyncAck { mid: MsgId },
    /// A replica learned its master's outcome at choice point `point`.
    ChoiceAck { point: u64 },
    /// A new master asks a replica for every outcome it knows (they come back as `Choice`
    /// frames, then `ChoicesTold`).
    ChoiceQuery,
    /// The end of the answer to a `ChoiceQuery`.
    ChoicesTold,
    /// Shared receives ([`Endpoint::set_share_received`]): a replica of this rank has the
    /// message `mid` of another rank whole (told to the replicas of lower index, which may be
    /// or become master before it).
    Received { mid: MsgId },
    /// Shared receives: the master's copy of message `mid` of another rank, lost whole, for a
    /// replica of this rank that does not have it.
    Relay { mid: MsgId, payload: P },
}

/// The point number standing for a new master's query in the acknowledgement table.
const QUERY: u64 = u64::MAX;

/// Where a transmission stands in its fan-out (fault injection hooks on it: the windows
/// Δ1–Δ7 of thesis figure 4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Index of this frame among the fan-out's (or the commit's) frames.
    pub index: usize,
    /// Whether it is the last of them.
    pub last: bool,
}

/// What the driver must do.
#[derive(Debug, PartialEq, Eq)]
pub enum Output<P, U> {
    /// Write `frame` to `to`; with `tx`, report [`Endpoint::written`] once the kernel took it
    /// all (or the connection is gone, see [`Input::Suspect`]).
    Transmit { to: usize, tx: Option<TxId>, frame: Frame<P>, step: Step },
    /// A fan-out's transmissions were all handed out (`mid`), before any was written.
    FannedOut { mid: MsgId },
    /// The commits of `mid` were all handed out.
    Committed { mid: MsgId },
    /// The user's send `U` is complete: its buffer is free.
    Complete(U),
    /// This process suspects `slot`: report it to the launcher, drop its connections and
    /// read nothing more from it.
    Suspect { slot: usize, cause: String },
    /// This process took over as its rank's master and resends `count` messages.
    TookOver { count: usize },
    /// The job cannot go on: every replica of `rank` is lost, or a message was lost with a
    /// dead replica.
    Fatal { rank: usize, cause: String },
    /// A parked message waited too long (the job cannot go on): the driver ends the job
    /// with [`LostChannel::cause`], given its history table's next expected sequence.
    ChannelLost(LostChannel),
    /// Every replica of `rank` is lost, and the program handles failures
    /// ([`Endpoint::set_notify`]): operations involving it fail (the master decides which),
    /// the job goes on.
    RankLost { rank: usize },
}

/// A rare event the driver feeds in ([`Machine::handle_input`]). Control frames name the slot
/// `from` that sent them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// This process suspects `slot` (a broken connection, a stall, the failure detector).
    /// Only the launcher declares deaths: the suspicion is reported ([`Output::Suspect`]),
    /// nothing more goes to the slot, and its unwritten transmissions are held until the
    /// verdict — unless it said goodbye (`bye`: it has everything it needs).
    Suspect { slot: usize, cause: String, bye: bool },
    /// The launcher declared `slot` dead (algorithm 7): its held transmissions count as
    /// written, and if it was this rank's master and this process is the lowest alive
    /// replica, this process takes over ([`Output::TookOver`]).
    DeclaredDead { slot: usize },
    /// A commit of `mid` from a replica of this rank (algorithm 4); `acked`: the master saw
    /// every destination's kernel acknowledge what it had written.
    Commit { from: usize, mid: MsgId, acked: bool },
    /// The master's outcome at choice point `point`.
    Choice { from: usize, point: u64, outcome: Outcome },
    /// A replica acknowledged choice point `point`.
    ChoiceAck { from: usize, point: u64 },
    /// A new master asks what this replica knows of the choices.
    ChoiceQuery { from: usize },
    /// A replica told everything it knows (the end of the answer to a query).
    ChoicesTold { from: usize },
    /// A destination replica matched this rank's synchronous message `mid`.
    SyncAck { from: usize, mid: MsgId },
    /// A destination replica pulled (`have` false: matched the announcement) or has (`have`
    /// true) this rank's rendez-vous message `mid`.
    Pull { from: usize, mid: MsgId, have: bool },
    /// The universe now has `n` ranks (a spawn, see [`Endpoint::grow`]).
    Grow { n: usize },
    /// A replica `from` of higher index has message `mid` of another rank whole (shared
    /// receives, [`Endpoint::set_share_received`]).
    Received { from: usize, mid: MsgId },
}

/// Why an input was refused: a control frame from a slot that may not send it (not an alive
/// replica of the right rank). It changed nothing; the driver treats it as a protocol error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub from: usize,
}

/// A message waited in the reorder queue for the stall limit: the one before it in its
/// channel was lost with a dead replica, and the job cannot go on ([`Output::ChannelLost`]).
/// The driver, which keeps the history table, names the lost message with [`Self::cause`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostChannel {
    /// The rank the channel comes from.
    pub rank: usize,
    pub comm: u32,
    pub tag: i32,
    /// The first parked message's sequence.
    pub first: u64,
    /// How long it waited.
    pub waited: Duration,
}

impl LostChannel {
    /// The cause of the job's end, `want` being the channel's next expected sequence (the
    /// history table's).
    pub fn cause(&self, want: u64) -> String {
        format!(
            "message {want} of its channel (communicator {}, tag {}) was lost with a dead replica; message {} waited \
             {:.1} s for it",
            self.comm,
            self.tag,
            self.first,
            self.waited.as_secs_f64()
        )
    }
}

/// A message of the backup table: its payload, and the user's send when lent (it completes
/// when the message is committed or this replica transmitted it).
#[derive(Debug)]
pub struct Kept<P, U> {
    pub payload: P,
    pub user: Option<U>,
    /// Its place in the rank's program order (every replica numbers its sends alike).
    pub order: u64,
}

#[derive(Debug)]
struct Fanout<P, U> {
    mid: MsgId,
    pending: usize,
    user: Option<U>,
    sync: bool,
    acked: bool,
    written: bool,
    /// A rendez-vous message's data and destinations.
    rndv: Option<Rndv<P>>,
}

#[derive(Debug)]
struct Rndv<P> {
    payload: P,
    /// Destinations that have not pulled the data yet.
    waiting: Vec<usize>,
    /// Destinations that do not have the whole message yet (`pending` of the fan-out).
    undone: Vec<usize>,
}

/// A send the master cannot transmit yet (its choices not acknowledged by every replica).
#[derive(Debug)]
struct Queued<P, U> {
    mid: MsgId,
    payload: P,
    user: Option<U>,
    sync: bool,
    /// Its place in the rank's program order (what a shared receive holds back, see
    /// [`Shared`]).
    order: u64,
}

#[derive(Debug, Clone, Copy)]
enum Tx {
    Data { fanout: u64, slot: usize },
    Choice { slot: usize },
}

type Channel = (u32, u32, i32);

/// The channel of a message this rank sends: communicator, destination, tag.
fn chan(mid: MsgId) -> Channel {
    (mid.comm, mid.dst, mid.tag)
}

/// A message that came before its turn: its data (none yet for an announcement), whether
/// it is a synchronous send's, and for a rendez-vous announcement its length.
#[derive(Debug)]
pub struct Parked<P> {
    pub data: P,
    pub sync: bool,
    pub rts: Option<u64>,
}

/// The bit of `slot`'s replica index in a mask of replicas (shared receives; at most 64
/// replicas of a rank are told apart).
fn replica_bit(layout: Layout, slot: usize) -> u64 {
    1 << (layout.replica_of(slot) % 64)
}

/// One replica's side of the protocol.
#[derive(Debug)]
pub struct Endpoint<P, U> {
    cfg: Config,
    coord: Coordinator<Kept<P, U>>,
    suspected: Vec<bool>,
    fanouts: SeqTable<Fanout<P, U>>,
    /// What destination replicas said of rendez-vous messages this process has not
    /// transmitted yet (a non-master, or a master behind its predecessor): per message, the
    /// slots that pulled it (`false`) or have it (`true`). Pruned by commits.
    pulls: FastMap<MsgId, Vec<(usize, bool)>>,
    next_fanout: u64,
    txs: SeqTable<Tx>,
    next_tx: TxId,
    /// Per slot: unwritten transmissions held while it is suspected.
    held: Vec<Vec<TxId>>,
    /// Per slot: unwritten transmissions, and when it last took something.
    unwritten: Vec<usize>,
    progress_at: Vec<Duration>,
    /// Commits to hand out, and whether they may be flagged acknowledged.
    commits: VecDeque<(MsgId, bool)>,
    queue: VecDeque<Queued<P, U>>,
    backup_bytes: usize,
    /// Recently committed copies by program order: commits come in the master's completion
    /// order (a large message completes after later small ones), and a new master must resend
    /// in program order — a receiver with `ANY_TAG` takes one source's next message.
    recent: BTreeMap<u64, (MsgId, P)>,
    recent_bytes: usize,
    /// The recent copies of each channel (sequence → program order), to drop a channel's
    /// once a commit says every destination's kernel has them.
    recent_chan: FastMap<Channel, BTreeMap<u64, u64>>,
    /// Per channel: one past the highest sequence of an acknowledged commit (a send this
    /// replica reaches after it needs no recent copy).
    acked_below: FastMap<Channel, u64>,
    /// Sends this replica reached (the next one's program order).
    sends: u64,
    early: FastMap<Channel, BTreeMap<u64, Parked<P>>>,
    early_since: Option<Duration>,
    sync_unmatched: FastSet<MsgId>,
    choices: Choices,
    choice_unacked: FastSet<TxId>,
    /// The choice frame of (point, slot) awaiting its acknowledgement.
    choice_tx: FastMap<(u64, usize), TxId>,
    out: VecDeque<Output<P, U>>,
    now: Duration,
    /// Reused lists of slots and of pruned backups (no allocation per message).
    scratch_slots: Vec<usize>,
    scratch_pruned: Vec<(MsgId, Kept<P, U>)>,
    scratch_seqs: Vec<u64>,
    /// The program handles failures: a rank that loses every replica is reported
    /// ([`Output::RankLost`]) instead of ending the job.
    notify: bool,
    /// Shared receives (fault-aware jobs only; `None` otherwise: nothing is kept, told or
    /// held).
    shared: Option<Box<Shared<P>>>,
}

/// Shared receives ([`Endpoint::set_share_received`]): what a fault-aware replicated rank
/// does so that a replica taking over completes every receive its master completed.
///
/// Every replica tells the replicas of lower index (its possible masters) each message of
/// another rank it has whole ([`Frame::Received`]), and keeps a copy of each one it has until
/// every alive replica of higher index (its possible successors) said it has it too. A
/// master transmits no send that its program reached after such a message before then (the
/// sends reached before go): nothing that may depend on a message leaves the rank before
/// every replica that could succeed the master has it. When the sender of a kept message is
/// lost whole, nobody else can give it to a replica that lacks it: the master sends its copy
/// ([`Frame::Relay`]).
#[derive(Debug)]
struct Shared<P> {
    /// Messages this replica has and a replica of higher index may not have yet.
    got: BTreeMap<MsgId, Got<P>>,
    /// Replicas of higher index that said they have a message this replica has not (yet):
    /// a mask of replica indices.
    have: FastMap<MsgId, u64>,
    /// Rendez-vous data relayed by the master for an announcement accepted here and not
    /// matched yet: given to the receive that matches it ([`Endpoint::take_relayed`]).
    relayed: FastMap<MsgId, P>,
}

#[derive(Debug)]
struct Got<P> {
    payload: P,
    /// Replicas of higher index that may not have it (a mask of replica indices).
    missing: u64,
    /// Those it was relayed to.
    relayed: u64,
    /// The sends this replica had reached when it got the message: the ones after wait.
    after: u64,
}

impl<P: Payload, U: Copy + PartialEq> Endpoint<P, U> {
    /// The endpoint of slot `me`.
    pub fn new(layout: Layout, me: usize, cfg: Config) -> Endpoint<P, U> {
        let slots = layout.slots();
        Endpoint {
            cfg,
            coord: Coordinator::new(layout, me),
            suspected: vec![false; slots],
            fanouts: SeqTable::default(),
            pulls: FastMap::default(),
            next_fanout: 0,
            txs: SeqTable::default(),
            next_tx: 0,
            held: vec![Vec::new(); slots],
            unwritten: vec![0; slots],
            progress_at: vec![Duration::ZERO; slots],
            commits: VecDeque::new(),
            queue: VecDeque::new(),
            backup_bytes: 0,
            recent: BTreeMap::new(),
            recent_bytes: 0,
            recent_chan: FastMap::default(),
            acked_below: FastMap::default(),
            sends: 0,
            early: FastMap::default(),
            early_since: None,
            sync_unmatched: FastSet::default(),
            choices: Choices::new(),
            choice_unacked: FastSet::default(),
            choice_tx: FastMap::default(),
            out: VecDeque::new(),
            now: Duration::ZERO,
            scratch_slots: Vec::new(),
            scratch_pruned: Vec::new(),
            scratch_seqs: Vec::new(),
            notify: false,
            shared: None,
        }
    }

    /// Covers the ranks of a universe of `n` ranks: the processes of a spawn (its children,
    /// or the parents and their earlier children seen from a child) are slots of the same
    /// numbering ([`Layout::grown`]), with per-slot state like the job's own.
    fn grow(&mut self, n: usize) {
        self.coord.grow(n);
        let slots = self.coord.layout().slots();
        if slots > self.suspected.len() {
            self.suspected.resize(slots, false);
            self.held.resize_with(slots, Vec::new);
            self.unwritten.resize(slots, 0);
            self.progress_at.resize(slots, self.now);
        }
    }

    /// The program handles failures (`Policy::Notify`): a rank that loses every replica no
    /// longer ends the job ([`Output::RankLost`] instead of [`Output::Fatal`]); synchronous
    /// sends to it complete, and messages of its channels waiting for an earlier one that
    /// died with it are dropped.
    pub fn set_notify(&mut self, on: bool) {
        self.notify = on;
    }

    /// Shared receives ([`Shared`]), for programs that handle failures (`Policy::Notify`):
    /// a receive from a rank lost whole fails there, so a replica taking over must have
    /// every message its master received, or it would fail a receive its master completed
    /// and send other values under the same message ids. The driver then reports every
    /// message of another rank it has whole ([`Self::received`]), carries
    /// [`Frame::Received`] and [`Frame::Relay`], and asks for relayed rendez-vous data
    /// ([`Self::take_relayed`]). Off: nothing is kept, told or held.
    pub fn set_share_received(&mut self, on: bool) {
        self.shared = on
            .then(|| Box::new(Shared { got: BTreeMap::new(), have: FastMap::default(), relayed: FastMap::default() }));
    }

    // ------------------------------------------------------------------ queries

    /// The coordinator (layout, election, tables).
    pub fn coordinator(&self) -> &Coordinator<Kept<P, U>> {
        &self.coord
    }

    pub fn layout(&self) -> Layout {
        self.coord.layout()
    }

    pub fn me(&self) -> usize {
        self.coord.me()
    }

    pub fn rank(&self) -> usize {
        self.coord.rank()
    }

    /// The time of the latest event this endpoint was given: a driver that hands it several
    /// events at once (a send, then the writes it caused) reads its clock once.
    pub fn now(&self) -> Duration {
        self.now
    }

    pub fn is_master(&self) -> bool {
        self.coord.is_master()
    }

    pub fn is_dead(&self, slot: usize) -> bool {
        self.coord.is_dead(slot)
    }

    pub fn is_suspected(&self, slot: usize) -> bool {
        self.suspected.get(slot).copied().unwrap_or(true)
    }

    /// Whether nothing more is exchanged with `slot` (suspected or declared dead).
    pub fn is_cut(&self, slot: usize) -> bool {
        self.is_dead(slot) || self.is_suspected(slot)
    }

    /// Sets the stall limit (known once the failure detector is configured).
    pub fn set_stall_limit(&mut self, limit: Option<Duration>) {
        self.cfg.stall_limit = limit;
    }

    /// Whether a non-master's send of `len` bytes must be lent (the user's buffer is the
    /// backup; the send completes on commit) rather than copied.
    pub fn must_lend(&self, len: usize) -> bool {
        !self.coord.is_master() && (len > self.cfg.copy_limit || self.backup_bytes + len > self.cfg.backup_window)
    }

    /// Recently committed copies kept for a takeover.
    pub fn recent_len(&self) -> usize {
        self.recent.len()
    }

    /// Bytes of copies in the backup table.
    pub fn backup_bytes(&self) -> usize {
        self.backup_bytes
    }

    /// Whether a non-master still waits for commits (it must not leave before its master
    /// committed what it keeps: it might have to take over).
    pub fn backup_pending(&self) -> bool {
        !self.coord.is_master() && self.coord.backup_len() > 0
    }

    /// [`Self::backup_pending`], leaving out the messages that `gone` says nobody will take
    /// (in a program that handles failures: to ranks lost whole, or on a revoked
    /// communicator): their master's send may have failed, so no commit may ever prune them,
    /// and nobody would receive them.
    pub fn backup_pending_beyond(&self, gone: impl Fn(&MsgId) -> bool) -> bool {
        !self.coord.is_master() && self.coord.backup().any(|(m, _)| !gone(m))
    }

    /// Whether the master has nothing left to transmit or commit.
    pub fn idle(&self) -> bool {
        self.fanouts.is_empty() && self.commits.is_empty() && self.queue.is_empty()
    }

    /// Messages waiting in the reorder queue.
    pub fn early_len(&self) -> usize {
        self.early.values().map(|q| q.len()).sum()
    }

    /// A one-line summary for debugging.
    pub fn summary(&self) -> String {
        format!(
            "master {} fanouts {} commits {} queued {} backup {} ({} B) recent {} early {} held {} choices pending {} unacknowledged {}",
            self.is_master(),
            self.fanouts.len(),
            self.commits.len(),
            self.queue.len(),
            self.coord.backup_len(),
            self.backup_bytes,
            self.recent.len(),
            self.early_len(),
            self.held.iter().map(Vec::len).sum::<usize>(),
            self.choices.pending(),
            self.choice_unacked.len()
        )
    }

    // ------------------------------------------------------------------ sending

    /// The program reached a send (algorithm 4). The master transmits it (now, or once its
    /// choices are acknowledged); a non-master keeps it until its master commits it. `user`
    /// completes ([`Output::Complete`]) when the payload is no longer needed.
    pub fn send(&mut self, now: Duration, mid: MsgId, payload: P, sync: bool, user: U) {
        self.now = now;
        let order = self.sends;
        self.sends += 1;
        if self.coord.is_master() {
            self.queue.push_back(Queued { mid, payload, user: Some(user), sync, order });
            self.flush();
            return;
        }
        let lent = payload.is_lent();
        let len = payload.len();
        let mut slot = Some(payload);
        let action = self.coord.on_send(mid, || Kept {
            payload: slot.take().expect("kept once"),
            user: lent.then_some(user),
            order,
        });
        match action {
            SendAction::Stored if lent => {}
            SendAction::Stored => {
                self.backup_bytes += len;
                self.out.push_back(Output::Complete(user));
            }
            SendAction::Committed => {
                // Committed by a master that ran ahead: kept with the recent ones all the
                // same (its kernel may yet drop it if it dies), unless lent or the commit
                // said every destination's kernel had it.
                let acked =
                    len <= self.cfg.rndv_limit && self.acked_below.get(&chan(mid)).is_some_and(|&b| mid.seq < b);
                if let Some(p) = slot.take().filter(|_| !lent && !acked) {
                    self.keep_recent(order, mid, p);
                }
                self.out.push_back(Output::Complete(user));
            }
            SendAction::Transmit { .. } => unreachable!("a non-master does not transmit"),
        }
    }

    /// Transmissions wait for the choices to be acknowledged: what the master sends may
    /// depend on those choices, and a replica that takes over must know them first.
    fn flush(&mut self) {
        let bar =
            self.shared.as_ref().map_or(u64::MAX, |sh| sh.got.values().map(|g| g.after).min().unwrap_or(u64::MAX));
        while self.choice_unacked.is_empty() && self.coord.is_master() && !self.recovering() {
            // Shared receives: a send reached after a message some successor lacks waits.
            if self.queue.front().is_none_or(|q| q.order >= bar) {
                break;
            }
            let Some(q) = self.queue.pop_front() else { break };
            self.transmit(q);
        }
        while let Some((mid, acked)) = self.commits.pop_front() {
            let mut targets = std::mem::take(&mut self.scratch_slots);
            targets.clear();
            let me = self.me();
            targets.extend(self.coord.alive_slots(self.rank()).filter(|&t| t != me && !self.suspected[t]));
            let n = targets.len();
            for (index, &to) in targets.iter().enumerate() {
                let step = Step { index, last: index + 1 == n };
                self.out.push_back(Output::Transmit { to, tx: None, frame: Frame::Commit { mid, acked }, step });
            }
            self.scratch_slots = targets;
            self.out.push_back(Output::Committed { mid });
        }
    }

    fn transmit(&mut self, q: Queued<P, U>) {
        if q.payload.len() > self.cfg.rndv_limit {
            return self.announce(q);
        }
        let mut dests = std::mem::take(&mut self.scratch_slots);
        dests.clear();
        dests.extend(self.coord.alive_slots(q.mid.dst as usize));
        let f = self.next_fanout;
        self.next_fanout += 1;
        let n = dests.len();
        self.fanouts.insert(
            f,
            Fanout {
                mid: q.mid,
                pending: n,
                user: q.user,
                sync: q.sync && q.user.is_some(),
                acked: false,
                written: false,
                rndv: None,
            },
        );
        for (index, &slot) in dests.iter().enumerate() {
            let tx = self.next_tx;
            self.next_tx += 1;
            self.txs.insert(tx, Tx::Data { fanout: f, slot });
            self.track(slot);
            if self.suspected[slot] {
                self.held[slot].push(tx);
                continue;
            }
            let frame = Frame::Data { mid: q.mid, payload: q.payload.share(), sync: q.sync };
            self.out.push_back(Output::Transmit {
                to: slot,
                tx: Some(tx),
                frame,
                step: Step { index, last: index + 1 == n },
            });
        }
        self.scratch_slots = dests;
        self.out.push_back(Output::FannedOut { mid: q.mid });
        if n == 0 {
            self.fanout_done(f);
        }
    }

    /// A large message: announced to the destination replicas that neither pulled it nor
    /// have it yet (what they told a predecessor, or this replica before it was master).
    fn announce(&mut self, q: Queued<P, U>) {
        let dests = self.coord.destinations(q.mid.dst as usize);
        let told = self.pulls.remove(&q.mid).unwrap_or_default();
        let f = self.next_fanout;
        self.next_fanout += 1;
        let n = dests.len();
        let mut undone = Vec::new();
        let mut waiting = Vec::new();
        let mut pull = Vec::new();
        for &slot in &dests {
            match told.iter().find(|t| t.0 == slot) {
                Some((_, true)) => {}
                Some((_, false)) => {
                    undone.push(slot);
                    pull.push(slot);
                }
                None => {
                    undone.push(slot);
                    waiting.push(slot);
                }
            }
        }
        let pending = undone.len();
        let acked = told.iter().any(|_| true);
        let sync = q.sync && q.user.is_some();
        let len = q.payload.len() as u64;
        for (index, &slot) in dests.iter().enumerate() {
            let step = Step { index, last: index + 1 == n };
            if pull.contains(&slot) && !self.suspected[slot] {
                let frame = Frame::RndvData { mid: q.mid, payload: q.payload.share() };
                self.out.push_back(Output::Transmit { to: slot, tx: None, frame, step });
            } else if waiting.contains(&slot) && !self.suspected[slot] {
                let frame = Frame::Rts { mid: q.mid, len, sync: q.sync };
                self.out.push_back(Output::Transmit { to: slot, tx: None, frame, step });
            }
        }
        self.out.push_back(Output::FannedOut { mid: q.mid });
        self.fanouts.insert(
            f,
            Fanout {
                mid: q.mid,
                pending,
                user: q.user,
                sync,
                acked,
                written: false,
                rndv: Some(Rndv { payload: q.payload, waiting, undone }),
            },
        );
        if pending == 0 {
            self.fanout_done(f);
        }
    }

    /// A destination replica `from` pulled (`have` false: matched the announcement) or has
    /// (`have` true) the rendez-vous message `mid` of this rank.
    fn on_pull(&mut self, from: usize, mid: MsgId, have: bool) -> bool {
        if self.coord.is_dead(from)
            || self.layout().rank_of(from) != mid.dst as usize
            || mid.src as usize != self.rank()
        {
            return false;
        }
        let Some((f, _)) = self.fanouts.iter().find(|(_, f)| f.mid == mid && f.rndv.is_some()) else {
            // Not transmitted by this process (yet): remembered, until committed.
            let e = self.pulls.entry(mid).or_default();
            match e.iter_mut().find(|t| t.0 == from) {
                Some(t) => t.1 |= have,
                None => e.push((from, have)),
            }
            return true;
        };
        let fo = self.fanouts.get_mut(f).expect("found");
        fo.acked = true;
        let rv = fo.rndv.as_mut().expect("rendez-vous");
        rv.waiting.retain(|&s| s != from);
        if have {
            // Done with this destination.
            if let Some(i) = rv.undone.iter().position(|&s| s == from) {
                rv.undone.swap_remove(i);
                fo.pending = fo.pending.saturating_sub(1);
            }
            if fo.pending == 0 {
                self.fanout_done(f);
            }
        } else if rv.undone.contains(&from) && !self.suspected[from] {
            let frame = Frame::RndvData { mid, payload: rv.payload.share() };
            self.out.push_back(Output::Transmit { to: from, tx: None, frame, step: Step { index: 0, last: true } });
        }
        // A synchronous send waiting for its acknowledgement only.
        if self.fanouts.get(f).is_some_and(|fo| fo.written) {
            self.fanout_done(f);
        }
        true
    }

    /// Tells every alive replica of the sender of `mid` (whichever is master now) `frame`.
    #[allow(clippy::wrong_self_convention, reason = "named for the frame's recipients, not a conversion")]
    fn to_senders(&mut self, mid: MsgId, frame: impl Fn() -> Frame<P>) {
        let to: Vec<usize> = self.coord.alive_slots(mid.src as usize).filter(|&s| !self.suspected[s]).collect();
        let n = to.len();
        for (index, slot) in to.into_iter().enumerate() {
            self.out.push_back(Output::Transmit {
                to: slot,
                tx: None,
                frame: frame(),
                step: Step { index, last: index + 1 == n },
            });
        }
    }

    /// A receive here matched the announced message `mid`: its sender's replicas are asked
    /// for the data (the master sends it; a replica that takes over knows it was asked).
    pub fn pull(&mut self, mid: MsgId) {
        self.to_senders(mid, || Frame::Rtr { mid });
    }

    /// This process has the whole rendez-vous message `mid` (received, or announced again by a
    /// new master after it was received): its sender's replicas count this destination done.
    pub fn have(&mut self, mid: MsgId) {
        self.to_senders(mid, || Frame::Have { mid });
    }

    fn track(&mut self, slot: usize) {
        if self.unwritten[slot] == 0 {
            self.progress_at[slot] = self.now;
        }
        self.unwritten[slot] += 1;
    }

    /// Transmission `tx` is written (or, for a slot declared dead, dropped).
    pub fn written(&mut self, now: Duration, tx: TxId) {
        self.now = now;
        let Some(t) = self.txs.get(tx).copied() else { return };
        let slot = match t {
            Tx::Data { slot, .. } | Tx::Choice { slot } => slot,
        };
        if self.suspected[slot] && !self.coord.is_dead(slot) {
            // Held until the verdict: a late completion of a dropped connection.
            if !self.held[slot].contains(&tx) {
                self.held[slot].push(tx);
            }
            return;
        }
        if matches!(t, Tx::Choice { .. }) {
            // A choice counts once acknowledged.
            return;
        }
        self.progress_at[slot] = now;
        self.release(tx, slot);
        self.flush();
    }

    /// Bytes of an unwritten transmission to `slot` were taken (the stall timer restarts).
    pub fn progress(&mut self, now: Duration, slot: usize) {
        if let Some(p) = self.progress_at.get_mut(slot) {
            *p = now;
        }
    }

    fn fanout_done(&mut self, f: u64) {
        let Some(fo) = self.fanouts.get_mut(f) else { return };
        if !fo.written {
            fo.written = true;
            self.commits.push_back((fo.mid, true));
        }
        if fo.sync && !fo.acked {
            return;
        }
        let fo = self.fanouts.remove(f).expect("live fan-out");
        if let Some(u) = fo.user {
            self.out.push_back(Output::Complete(u));
        }
        self.flush();
    }

    /// A destination replica `from` matched this rank's synchronous message `mid`.
    fn on_sync_ack(&mut self, from: usize, mid: MsgId) -> bool {
        if self.coord.is_dead(from)
            || self.layout().rank_of(from) != mid.dst as usize
            || mid.src as usize != self.rank()
        {
            return false;
        }
        let Some((f, _)) = self.fanouts.iter().find(|(_, f)| f.sync && f.mid == mid && !f.acked) else {
            return true;
        };
        let fo = self.fanouts.get_mut(f).expect("found");
        fo.acked = true;
        if fo.written {
            self.fanout_done(f);
        }
        true
    }

    /// A commit arrived from `from` (algorithm 4). Refused (false) from anything but an
    /// alive replica of this rank. `acked` (the master saw every destination's kernel
    /// acknowledge what it had written): the committed copies are dropped rather than kept
    /// for a takeover — the destinations have them, and a destination that drops its
    /// connection to a suspect first takes the data its kernel holds.
    fn on_commit(&mut self, from: usize, mid: MsgId, acked: bool) -> bool {
        let mut pruned = std::mem::take(&mut self.scratch_pruned);
        let ok = self.coord.on_commit(from, mid, |m, k| pruned.push((m, k)));
        if ok && !self.pulls.is_empty() {
            self.pulls.retain(|m, _| !(m.comm == mid.comm && m.dst == mid.dst && m.tag == mid.tag && m.seq <= mid.seq));
        }
        for (m, k) in pruned.drain(..) {
            match k.user {
                Some(u) => self.out.push_back(Output::Complete(u)),
                None => {
                    self.backup_bytes -= k.payload.len();
                    // A large message pruned by a later small one's commit was only announced.
                    if !(ok && acked && k.payload.len() <= self.cfg.rndv_limit) {
                        self.keep_recent(k.order, m, k.payload);
                    }
                }
            }
        }
        self.scratch_pruned = pruned;
        if ok && acked {
            let ch = chan(mid);
            let b = self.acked_below.entry(ch).or_insert(0);
            *b = (*b).max(mid.seq + 1);
            self.forget_recent(ch, mid.seq);
        }
        ok
    }

    /// Drops the recent copies of channel `ch` up to sequence `upto`, but for large
    /// messages: a later message's commit says nothing of their data (rendez-vous: pulled
    /// when matched).
    fn forget_recent(&mut self, ch: Channel, upto: u64) {
        let Some(m) = self.recent_chan.get_mut(&ch) else { return };
        let limit = self.cfg.rndv_limit;
        let mut gone = std::mem::take(&mut self.scratch_seqs);
        gone.clear();
        for (&seq, order) in m.range(..=upto) {
            if self.recent.get(order).is_none_or(|(_, p)| p.len() <= limit) {
                gone.push(seq);
            }
        }
        for seq in &gone {
            if let Some(order) = m.remove(seq) {
                if let Some((_, p)) = self.recent.remove(&order) {
                    self.recent_bytes -= p.len();
                }
            }
        }
        self.scratch_seqs = gone;
        if m.is_empty() {
            self.recent_chan.remove(&ch);
        }
    }

    fn keep_recent(&mut self, order: u64, mid: MsgId, p: P) {
        if p.len() > self.cfg.copy_limit {
            return;
        }
        self.recent_bytes += p.len();
        self.recent.insert(order, (mid, p));
        self.recent_chan.entry(chan(mid)).or_default().insert(mid.seq, order);
        while self.recent_bytes > self.cfg.recent_window || self.recent.len() > self.cfg.recent_max {
            let Some((_, (m, p))) = self.recent.pop_first() else { break };
            self.recent_bytes -= p.len();
            if let Some(c) = self.recent_chan.get_mut(&chan(m)) {
                c.remove(&m.seq);
                if c.is_empty() {
                    self.recent_chan.remove(&chan(m));
                }
            }
        }
    }

    /// The user's send `u` is withdrawn (its wait gave up with an error, its buffer is about
    /// to go): a lent backup becomes a copy, and its fan-out completes without it. Returns
    /// the transmissions still carrying its buffer (the driver copies or drops them).
    pub fn detach(&mut self, u: U) -> Vec<TxId> {
        let mut copied = 0;
        let mut own = |k: &mut Kept<P, U>| {
            if k.user == Some(u) {
                k.payload = k.payload.to_owned_copy();
                k.user = None;
                copied += k.payload.len();
            }
        };
        for (_, k) in self.coord.backup_mut() {
            own(k);
        }
        self.backup_bytes += copied;
        for q in self.queue.iter_mut().filter(|q| q.user == Some(u)) {
            q.payload = q.payload.to_owned_copy();
            q.user = None;
        }
        let mut fans = Vec::new();
        for (id, f) in self.fanouts.iter_mut() {
            if f.user == Some(u) {
                f.user = None;
                fans.push(id);
                if let Some(r) = f.rndv.as_mut() {
                    r.payload = r.payload.to_owned_copy();
                }
            }
        }
        self.txs
            .iter()
            .filter(|(_, t)| matches!(t, Tx::Data { fanout, .. } if fans.contains(fanout)))
            .map(|(id, _)| id)
            .collect()
    }

    // ------------------------------------------------------------------ receiving

    /// A synchronous message arrived and was queued unmatched: it is acknowledged when a
    /// receive takes it ([`Self::consumed`]).
    pub fn sync_unmatched(&mut self, mid: MsgId) {
        self.sync_unmatched.insert(mid);
    }

    /// A queued message was taken by a receive: acknowledged if synchronous.
    pub fn consumed(&mut self, mid: MsgId) {
        if self.sync_unmatched.remove(&mid) {
            self.matched_sync(mid);
        }
    }

    /// A synchronous message was matched here: every alive replica of its sender (whichever
    /// is master now) is told.
    pub fn matched_sync(&mut self, mid: MsgId) {
        self.sync_unmatched.remove(&mid);
        let to: Vec<usize> = self.coord.alive_slots(mid.src as usize).filter(|&s| !self.suspected[s]).collect();
        let n = to.len();
        for (index, slot) in to.into_iter().enumerate() {
            self.out.push_back(Output::Transmit {
                to: slot,
                tx: None,
                frame: Frame::SyncAck { mid },
                step: Step { index, last: index + 1 == n },
            });
        }
    }

    /// A message arrived again (a new master resends what its predecessor had sent). A
    /// synchronous one is acknowledged again once matched: the new master, which reached
    /// the send after taking over, waits for an acknowledgement the receiver already gave
    /// its predecessor.
    pub fn duplicate(&mut self, mid: MsgId, sync: bool) {
        if sync && !self.sync_unmatched.contains(&mid) {
            self.matched_sync(mid);
        }
    }

    /// A message came before its turn (a new master resends what the old one had partly
    /// sent): it waits for its predecessors.
    pub fn park(&mut self, now: Duration, mid: MsgId, parked: Parked<P>) {
        self.early_since.get_or_insert(now);
        self.early.entry((mid.comm, mid.src, mid.tag)).or_default().insert(mid.seq, parked);
    }

    /// The first parked message of channel (`comm`, `src`, `tag`) if its turn has come
    /// (`next` is the history table's next expected sequence). One below `next` arrived
    /// meanwhile from another replica: the driver presents it again all the same, and its
    /// history table reports the duplicate (a synchronous one is acknowledged again, an
    /// announcement answered as duplicates are).
    pub fn unpark(&mut self, comm: u32, src: u32, tag: i32, next: u64) -> Option<(MsgId, Parked<P>)> {
        let key = (comm, src, tag);
        let q = self.early.get_mut(&key)?;
        let (&seq, _) = q.first_key_value().filter(|(s, _)| **s <= next)?;
        let p = q.remove(&seq).expect("first");
        if q.is_empty() {
            self.early.remove(&key);
        }
        if self.early.is_empty() {
            self.early_since = None;
        }
        Some((MsgId { comm, src, dst: self.rank() as u32, tag, seq }, p))
    }

    // ------------------------------------------------------------------ choices

    /// This replica reached its next choice point.
    pub fn choice_point(&mut self) -> u64 {
        self.choices.point()
    }

    /// The master's outcome of point `c`, if known (not taken).
    pub fn choice_known(&self, c: u64) -> Option<Outcome> {
        self.choices.knows(c)
    }

    /// Whether this replica's master is ahead of it in their program: it committed more
    /// messages than this replica has reached (a master posts its sends in program order).
    pub fn master_ahead(&self) -> bool {
        !self.coord.is_master() && self.coord.committed_count() > self.sends
    }

    /// The master's failure outcomes learned and not followed yet (see
    /// [`super::failures`]).
    pub fn known_failures(&self) -> Vec<(u64, Outcome)> {
        self.choices.known_failures()
    }

    /// Takes the master's outcome of point `c` (followed once).
    pub fn take_choice(&mut self, c: u64) -> Option<Outcome> {
        self.choices.take(c)
    }

    /// A choice frame from `from`: learned if it is an alive replica of this rank, and
    /// acknowledged.
    fn on_choice(&mut self, from: usize, point: u64, outcome: Outcome) -> bool {
        if !self.from_own_replica(from) {
            return false;
        }
        self.choices.learn(point, outcome);
        if !self.suspected[from] {
            let step = Step { index: 0, last: true };
            self.out.push_back(Output::Transmit { to: from, tx: None, frame: Frame::ChoiceAck { point }, step });
        }
        true
    }

    /// Whether `from` is another alive replica of this process's rank (the only slots whose
    /// choice frames, acknowledgements, queries and answers count).
    #[allow(clippy::wrong_self_convention, reason = "a predicate on a frame's sender, not a constructor")]
    fn from_own_replica(&self, from: usize) -> bool {
        !self.coord.is_dead(from) && from != self.me() && self.layout().rank_of(from) == self.rank()
    }

    /// Registers a choice frame (or, with `point` [`QUERY`], a query) to `slot`, answered when
    /// acknowledged; held if `slot` is suspected. Returns whether to transmit it now.
    fn track_choice(&mut self, point: u64, slot: usize) -> bool {
        let tx = self.next_tx;
        self.next_tx += 1;
        self.txs.insert(tx, Tx::Choice { slot });
        self.track(slot);
        self.choice_unacked.insert(tx);
        self.choice_tx.insert((point, slot), tx);
        if self.suspected[slot] {
            self.held[slot].push(tx);
            return false;
        }
        true
    }

    /// Whether this process may decide a choice point itself: it is the master, and not
    /// still learning what its replicas know after a takeover.
    pub fn may_decide(&self) -> bool {
        self.coord.is_master() && !self.recovering()
    }

    fn recovering(&self) -> bool {
        self.choice_tx.keys().any(|k| k.0 == QUERY)
    }

    fn start_recovery(&mut self) {
        let targets = self.coord.commit_targets();
        let n = targets.len();
        for (index, slot) in targets.into_iter().enumerate() {
            if !self.track_choice(QUERY, slot) {
                continue;
            }
            let step = Step { index, last: index + 1 == n };
            self.out.push_back(Output::Transmit { to: slot, tx: None, frame: Frame::ChoiceQuery, step });
        }
        self.recovered();
    }

    /// Once every replica told what it knows: everything is told again.
    fn recovered(&mut self) {
        if self.recovering() {
            return;
        }
        for (c, o) in self.choices.relay() {
            self.tell_choice(u32::MAX, c, o);
        }
        self.relay_lost();
        self.flush();
    }

    /// A new master (`from`) asks what this replica knows.
    fn on_choice_query(&mut self, from: usize) -> bool {
        if !self.from_own_replica(from) {
            return false;
        }
        if self.suspected[from] {
            return true;
        }
        let step = Step { index: 0, last: false };
        for (point, outcome) in self.choices.relay() {
            self.out.push_back(Output::Transmit {
                to: from,
                tx: None,
                frame: Frame::Choice { comm: u32::MAX, point, outcome },
                step,
            });
        }
        self.out.push_back(Output::Transmit { to: from, tx: None, frame: Frame::ChoicesTold, step });
        true
    }

    /// Replica `from` told everything it knows.
    fn on_choices_told(&mut self, from: usize) -> bool {
        if !self.from_own_replica(from) {
            return false;
        }
        if let Some(tx) = self.choice_tx.remove(&(QUERY, from)) {
            self.progress_at[from] = self.now;
            self.release(tx, from);
            self.recovered();
        }
        true
    }

    /// Replica `from` acknowledged choice point `point`.
    fn on_choice_ack(&mut self, from: usize, point: u64) -> bool {
        if !self.from_own_replica(from) {
            return false;
        }
        if let Some(tx) = self.choice_tx.remove(&(point, from)) {
            self.progress_at[from] = self.now;
            self.release(tx, from);
            self.flush();
        }
        true
    }

    /// The master decided `outcome` at point `c`: its replicas are told, in index order (the
    /// successor of a dying master first), and it transmits nothing new before every one
    /// acknowledged (or is suspected): a frame written is not a frame delivered — a killed
    /// master's kernel drops what it had not sent, a partition holds it — and a message that
    /// depends on a choice must never reach anyone before the replicas that may take over
    /// know the choice. A non-master (following) does nothing.
    pub fn decided(&mut self, comm: u32, c: u64, outcome: Outcome) {
        if !self.coord.is_master() {
            return;
        }
        self.choices.followed(c, outcome);
        self.tell_choice(comm, c, outcome);
    }

    fn tell_choice(&mut self, comm: u32, c: u64, outcome: Outcome) {
        // A suspected replica too: until the launcher's verdict it may be the one that stays
        // (the launcher may exclude this master instead), and it must not take over without
        // the choices behind what this master sent meanwhile. Its frame is held.
        let targets: Vec<usize> = self.coord.commit_targets();
        let n = targets.len();
        for (index, slot) in targets.into_iter().enumerate() {
            if self.choice_tx.contains_key(&(c, slot)) || !self.track_choice(c, slot) {
                continue;
            }
            let frame = Frame::Choice { comm, point: c, outcome };
            self.out.push_back(Output::Transmit {
                to: slot,
                tx: None,
                frame,
                step: Step { index, last: index + 1 == n },
            });
        }
    }

    /// Whether choices are still unacknowledged (the master holds new transmissions back).
    pub fn choices_unacked(&self) -> bool {
        !self.choice_unacked.is_empty()
    }

    // ------------------------------------------------------------------ shared receives

    /// This process has message `mid` of another rank whole (shared receives,
    /// [`Self::set_share_received`]): an eager message accepted in its turn (matched or
    /// queued), a rendez-vous message's data, or a relayed copy. It tells its replicas of
    /// lower index, and keeps a copy (`copy`, called only then) while a replica of higher
    /// index may lack it. Nothing without shared receives, nor for this rank's own messages
    /// (its replicas resend those themselves).
    pub fn received(&mut self, mid: MsgId, copy: impl FnOnce() -> P) {
        let Some(sh) = self.shared.as_mut() else { return };
        let rank = self.coord.rank();
        if mid.src as usize == rank || mid.dst as usize != rank {
            return;
        }
        let me = self.coord.me();
        let layout = self.coord.layout();
        let told = sh.have.remove(&mid).unwrap_or(0);
        let mut missing = 0u64;
        let mut lower = std::mem::take(&mut self.scratch_slots);
        lower.clear();
        for s in self.coord.alive_slots(rank) {
            if s < me {
                lower.push(s);
            } else if s > me {
                missing |= replica_bit(layout, s);
            }
        }
        missing &= !told;
        if missing != 0 && !sh.got.contains_key(&mid) {
            let after = self.sends;
            sh.got.insert(mid, Got { payload: copy(), missing, relayed: 0, after });
        }
        let n = lower.len();
        for (index, &to) in lower.iter().enumerate() {
            if !self.suspected[to] {
                let step = Step { index, last: index + 1 == n };
                self.out.push_back(Output::Transmit { to, tx: None, frame: Frame::Received { mid }, step });
            }
        }
        self.scratch_slots = lower;
        if missing != 0 && !self.coord.alive_slots(mid.src as usize).any(|_| true) {
            // Its sender is lost whole already (a message taken from a dropped connection).
            self.relay_lost();
        }
    }

    /// Replica `from`, of higher index, has message `mid` whole.
    fn on_received(&mut self, from: usize, mid: MsgId) -> bool {
        if !self.from_own_replica(from) || from < self.me() {
            return false;
        }
        let bit = replica_bit(self.coord.layout(), from);
        let Some(sh) = self.shared.as_mut() else { return true };
        match sh.got.get_mut(&mid) {
            Some(g) => {
                g.missing &= !bit;
                if g.missing == 0 {
                    sh.got.remove(&mid);
                    self.flush();
                }
            }
            None => *sh.have.entry(mid).or_insert(0) |= bit,
        }
        true
    }

    /// Replica `slot` is gone (declared dead, or finished): no message waits for it.
    fn forget_replica(&mut self, slot: usize) {
        let layout = self.coord.layout();
        if layout.rank_of(slot) != self.coord.rank() || slot <= self.coord.me() {
            return;
        }
        let Some(sh) = self.shared.as_mut() else { return };
        let bit = replica_bit(layout, slot);
        sh.got.retain(|_, g| {
            g.missing &= !bit;
            g.missing != 0
        });
        for h in sh.have.values_mut() {
            *h &= !bit;
        }
        sh.have.retain(|_, h| *h != 0);
    }

    /// The master relays the messages it keeps whose sender is lost whole to the replicas
    /// that may lack them (in message order: a channel's in sequence order). A new master
    /// does so once it learned what its replicas know (before it decides anything).
    fn relay_lost(&mut self) {
        if !self.may_decide() {
            return;
        }
        let Some(mut sh) = self.shared.take() else { return };
        let layout = self.coord.layout();
        let rank = self.coord.rank();
        for (mid, g) in sh.got.iter_mut() {
            if self.coord.alive_slots(mid.src as usize).next().is_some() {
                continue;
            }
            for to in self.coord.alive_slots(rank) {
                let bit = replica_bit(layout, to);
                if g.missing & bit == 0 || g.relayed & bit != 0 || self.suspected[to] {
                    continue;
                }
                g.relayed |= bit;
                let frame = Frame::Relay { mid: *mid, payload: g.payload.share() };
                self.out.push_back(Output::Transmit { to, tx: None, frame, step: Step { index: 0, last: true } });
            }
        }
        self.shared = Some(sh);
    }

    /// A relayed copy of rendez-vous message `mid` arrived for an announcement accepted here
    /// and not matched yet: kept for the receive that matches it ([`Self::take_relayed`]).
    pub fn keep_relayed(&mut self, mid: MsgId, payload: P) {
        if let Some(sh) = self.shared.as_mut() {
            sh.relayed.insert(mid, payload);
        }
    }

    /// The relayed data of rendez-vous message `mid`, if its master relayed it (a receive
    /// matched the announcement: the data is here, nothing to pull).
    pub fn take_relayed(&mut self, mid: MsgId) -> Option<P> {
        self.shared.as_mut()?.relayed.remove(&mid)
    }

    /// Messages kept for a replica that may lack them (shared receives).
    pub fn unshared(&self) -> usize {
        self.shared.as_ref().map_or(0, |sh| sh.got.len())
    }

    // ------------------------------------------------------------------ failures

    /// This process suspects `slot` (a broken connection, a stall, the failure detector).
    /// Only the launcher declares deaths: the suspicion is reported ([`Output::Suspect`]),
    /// nothing more goes to the slot, and its unwritten transmissions are held until the
    /// verdict — unless it said goodbye (`bye`: it has everything it needs).
    fn suspect(&mut self, now: Duration, slot: usize, cause: &str, bye: bool) {
        self.now = now;
        if slot >= self.suspected.len() || slot == self.me() {
            return;
        }
        let first = !std::mem::replace(&mut self.suspected[slot], true);
        if first && !self.coord.is_dead(slot) {
            self.out.push_back(Output::Suspect { slot, cause: cause.to_string() });
        }
        let mine: Vec<TxId> = self
            .txs
            .iter()
            .filter(|(_, t)| matches!(t, Tx::Data { slot: s, .. } | Tx::Choice { slot: s } if *s == slot))
            .map(|(id, _)| id)
            .collect();
        for tx in mine {
            if bye || self.coord.is_dead(slot) {
                self.release(tx, slot);
            } else if !self.held[slot].contains(&tx) {
                self.held[slot].push(tx);
            }
        }
        if bye {
            self.held[slot].clear();
            // It finished: it needs no message of this process's.
            self.forget_replica(slot);
        }
        self.flush();
    }

    /// Counts an unwritten transmission to a gone slot as done.
    fn release(&mut self, tx: TxId, slot: usize) {
        let Some(t) = self.txs.remove(tx) else { return };
        self.unwritten[slot] = self.unwritten[slot].saturating_sub(1);
        match t {
            Tx::Choice { .. } => {
                self.choice_unacked.remove(&tx);
                let query = self.choice_tx.iter().any(|(k, t)| *t == tx && k.0 == QUERY);
                self.choice_tx.retain(|_, t| *t != tx);
                if query {
                    self.recovered();
                }
            }
            Tx::Data { fanout, .. } => {
                if let Some(f) = self.fanouts.get_mut(fanout) {
                    f.pending = f.pending.saturating_sub(1);
                    if f.pending == 0 {
                        self.fanout_done(fanout);
                    }
                }
            }
        }
    }

    /// The launcher declared `slot` dead (algorithm 7): its held transmissions count as
    /// written, and if it was this rank's master and this process is the lowest alive
    /// replica, it takes over: what the dead master committed lately (its last writes may
    /// have died in its kernel) and then its backup table are transmitted and committed.
    fn declared_dead(&mut self, now: Duration, slot: usize) {
        self.now = now;
        if slot >= self.suspected.len() {
            return;
        }
        self.suspected[slot] = true;
        let rec = self.coord.on_failure(slot);
        match rec {
            Recovery::Nothing => {}
            Recovery::Replica { .. } => {}
            Recovery::TookOver { resend } => {
                // What the dead master committed lately and what it had not: in program
                // order (receivers naming a source with ANY_TAG take its next message).
                let recent = std::mem::take(&mut self.recent);
                self.recent_bytes = 0;
                self.recent_chan.clear();
                let count = recent.len() + resend.len();
                let mut all: Vec<(u64, Queued<P, U>)> = Vec::with_capacity(count);
                for (order, (mid, payload)) in recent {
                    all.push((order, Queued { mid, payload, user: None, sync: false, order }));
                }
                for (mid, k) in resend {
                    if k.user.is_none() {
                        self.backup_bytes -= k.payload.len();
                    }
                    all.push((k.order, Queued { mid, payload: k.payload, user: k.user, sync: false, order: k.order }));
                }
                all.sort_by_key(|x| x.0);
                let mut q: VecDeque<Queued<P, U>> = all.into_iter().map(|x| x.1).collect();
                // Ahead of anything the program sends from now on.
                q.append(&mut self.queue);
                self.queue = q;
                // The dead master's choices may have reached some replicas and not others:
                // this one first learns what the others know, then tells everything again
                // (acknowledged) before the resends, which depend on them, and before it
                // decides anything itself.
                // What the dead master committed acknowledged, this replica dropped: the
                // others may not have seen those commits (their backups would wait for
                // them forever). Committed again, unacknowledged (they say nothing of what
                // this process wrote).
                let rank = self.rank() as u32;
                let mut again: Vec<MsgId> = self
                    .acked_below
                    .iter()
                    .map(|(&(comm, dst, tag), &b)| MsgId { comm, src: rank, dst, tag, seq: b - 1 })
                    .collect();
                again.sort_by_key(|m| (m.comm, m.dst, m.tag));
                self.commits.extend(again.into_iter().map(|m| (m, false)));
                self.start_recovery();
                self.out.push_back(Output::TookOver { count });
            }
            Recovery::RankLost { rank } if self.notify => {
                self.rank_lost(rank);
                self.out.push_back(Output::RankLost { rank });
            }
            Recovery::RankLost { rank } => {
                self.out.push_back(Output::Fatal { rank, cause: "all replicas for that rank failed".into() });
            }
        }
        let held = std::mem::take(&mut self.held[slot]);
        for tx in held {
            self.release(tx, slot);
        }
        // Shared receives wait no more for it.
        self.forget_replica(slot);
        // Rendez-vous messages wait no more for it.
        let rv: Vec<u64> = self
            .fanouts
            .iter_mut()
            .filter_map(|(id, fo)| {
                let r = fo.rndv.as_mut()?;
                r.waiting.retain(|&s| s != slot);
                let i = r.undone.iter().position(|&s| s == slot)?;
                r.undone.swap_remove(i);
                fo.pending = fo.pending.saturating_sub(1);
                (fo.pending == 0).then_some(id)
            })
            .collect();
        for f in rv {
            self.fanout_done(f);
        }
        // Anything still unwritten to it (a connection not dropped yet) is done too.
        let rest: Vec<TxId> = self
            .txs
            .iter()
            .filter(|(_, t)| matches!(t, Tx::Data { slot: s, .. } | Tx::Choice { slot: s } if *s == slot))
            .map(|(id, _)| id)
            .collect();
        for tx in rest {
            self.release(tx, slot);
        }
        self.flush();
    }

    /// Every replica of `rank` is lost (a program that handles failures): nothing more comes
    /// from it and nothing reaches it. Synchronous sends to it wait no more for its
    /// acknowledgement (they complete, like the eager sends to it: MPI lets a send complete
    /// before its receiver has it), and its messages parked for an earlier one that died with
    /// it are dropped.
    fn rank_lost(&mut self, rank: usize) {
        let mut acked = Vec::new();
        for (id, f) in self.fanouts.iter_mut() {
            if f.sync && !f.acked && f.mid.dst as usize == rank {
                f.acked = true;
                if f.written {
                    acked.push(id);
                }
            }
        }
        for f in acked {
            self.fanout_done(f);
        }
        self.early.retain(|&(_, src, _), _| src as usize != rank);
        if self.early.is_empty() {
            self.early_since = None;
        }
        self.relay_lost();
    }

    /// Time passes: a destination that took nothing of an unwritten transmission for the
    /// stall limit is suspected; a message parked for that long waits for one lost with a
    /// dead replica (the job cannot go on: [`Output::ChannelLost`]).
    fn timers(&mut self, now: Duration) {
        self.now = now;
        let Some(limit) = self.cfg.stall_limit else { return };
        if let Some(since) = self.early_since {
            if now.saturating_sub(since) > limit {
                if let Some((&(comm, src, tag), q)) = self.early.iter().next() {
                    let first = q.keys().next().copied().unwrap_or(0);
                    let lost = LostChannel { rank: src as usize, comm, tag, first, waited: limit };
                    self.out.push_back(Output::ChannelLost(lost));
                    self.early_since = None;
                    self.early.clear();
                }
            }
        }
        for slot in 0..self.unwritten.len() {
            if self.unwritten[slot] > 0 && !self.suspected[slot] && now.saturating_sub(self.progress_at[slot]) > limit {
                let cause = format!(
                    "a send to it made no progress for {:.1} s (2·T_cleanup)",
                    now.saturating_sub(self.progress_at[slot]).as_secs_f64()
                );
                self.suspect(now, slot, &cause, false);
            }
        }
    }

    /// A control frame from `from`: whether it was accepted.
    fn control(&mut self, input: Input) -> (usize, bool) {
        match input {
            Input::Commit { from, mid, acked } => (from, self.on_commit(from, mid, acked)),
            Input::Choice { from, point, outcome } => (from, self.on_choice(from, point, outcome)),
            Input::ChoiceAck { from, point } => (from, self.on_choice_ack(from, point)),
            Input::ChoiceQuery { from } => (from, self.on_choice_query(from)),
            Input::ChoicesTold { from } => (from, self.on_choices_told(from)),
            Input::SyncAck { from, mid } => (from, self.on_sync_ack(from, mid)),
            Input::Pull { from, mid, have } => (from, self.on_pull(from, mid, have)),
            Input::Received { from, mid } => (from, self.on_received(from, mid)),
            Input::Suspect { .. } | Input::DeclaredDead { .. } | Input::Grow { .. } => unreachable!("not a frame"),
        }
    }

    /// When [`Self::timers`] should run next (`None`: no timer).
    fn next_deadline(&self) -> Option<Duration> {
        let limit = self.cfg.stall_limit?;
        let stall = (0..self.unwritten.len())
            .filter(|&s| self.unwritten[s] > 0 && !self.suspected[s])
            .map(|s| self.progress_at[s] + limit)
            .min();
        let early = self.early_since.map(|t| t + limit);
        match (stall, early) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl<P: Payload, U: Copy + PartialEq> Machine for Endpoint<P, U> {
    type Input = Input;
    type Output = Output<P, U>;
    type Rejected = Refused;

    /// Feeds a rare event. Control frames from a slot that may not send them are refused
    /// (and change nothing). A control frame takes the time of the latest event unless the
    /// driver reads its clock for it: pass [`Endpoint::now`] to keep it.
    fn handle_input(&mut self, now: Time, input: Input) -> Result<(), Refused> {
        let (from, ok) = match input {
            Input::Suspect { slot, cause, bye } => {
                self.suspect(now, slot, &cause, bye);
                return Ok(());
            }
            Input::DeclaredDead { slot } => {
                self.declared_dead(now, slot);
                return Ok(());
            }
            Input::Grow { n } => {
                self.now = now;
                self.grow(n);
                return Ok(());
            }
            other => {
                self.now = now;
                self.control(other)
            }
        };
        if ok {
            Ok(())
        } else {
            Err(Refused { from })
        }
    }

    fn handle_timeout(&mut self, now: Time) {
        self.timers(now);
    }

    fn poll_output(&mut self) -> Option<Output<P, U>> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.next_deadline()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Machine;

    /// A test payload: a value and a size; `lent` marks a user's buffer.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct V {
        v: u64,
        len: usize,
        lent: bool,
    }

    impl Payload for V {
        fn len(&self) -> usize {
            self.len
        }
        fn is_lent(&self) -> bool {
            self.lent
        }
        fn share(&self) -> V {
            self.clone()
        }
        fn to_owned_copy(&self) -> V {
            V { lent: false, ..self.clone() }
        }
    }

    fn v(v: u64) -> V {
        V { v, len: 8, lent: false }
    }

    fn mid(src: u32, dst: u32, seq: u64) -> MsgId {
        MsgId { comm: 0, src, dst, tag: 0, seq }
    }

    fn drain(e: &mut Endpoint<V, u32>) -> Vec<Output<V, u32>> {
        e.drain_outputs()
    }

    fn txs(a: &[Output<V, u32>]) -> Vec<(usize, TxId)> {
        a.iter()
            .filter_map(|a| match a {
                Output::Transmit { to, tx: Some(tx), .. } => Some((*to, *tx)),
                _ => None,
            })
            .collect()
    }

    const T: Duration = Duration::ZERO;

    #[test]
    fn master_fans_out_then_commits_then_completes() {
        // n = 3, r = 2: rank 1 is slots 2 (master, me) and 3; rank 2 is 4 and 5.
        let l = Layout::new(3, 2);
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 2, Config::default());
        e.send(T, mid(1, 2, 0), v(7), false, 100);
        let a = drain(&mut e);
        let t = txs(&a);
        assert_eq!(t.iter().map(|x| x.0).collect::<Vec<_>>(), vec![4, 5]);
        assert!(!a.iter().any(|a| matches!(a, Output::Complete(_))));
        e.written(T, t[0].1);
        assert!(drain(&mut e).is_empty(), "no commit before every copy is written");
        e.written(T, t[1].1);
        let a = drain(&mut e);
        assert!(a.iter().any(|a| matches!(a, Output::Transmit { to: 3, frame: Frame::Commit { .. }, .. })), "{a:?}");
        assert!(a.contains(&Output::Complete(100)));
        assert!(e.idle());
    }

    #[test]
    fn a_grown_universe_fans_out_to_every_replica_of_a_spawned_rank_and_survives_their_deaths() {
        // Parents n = 2, r = 2 (me: slot 0, rank 0's master); a spawn adds ranks 2 and 3
        // (slots 4..8).
        let mut e: Endpoint<V, u32> = Endpoint::new(Layout::new(2, 2), 0, Config::default());
        e.grow(4);
        assert_eq!(e.layout(), Layout::new(4, 2));
        e.send(T, mid(0, 3, 0), v(5), false, 1);
        let t = txs(&drain(&mut e));
        assert_eq!(t.iter().map(|x| x.0).collect::<Vec<_>>(), vec![6, 7]);
        e.written(T, t[0].1);
        // Child rank 3's master dies: declared by its own job, told to the parents.
        e.suspect(T, 7, "connection closed", false);
        assert_eq!(drain(&mut e), vec![Output::Suspect { slot: 7, cause: "connection closed".into() }]);
        e.declared_dead(T, 7);
        let a = drain(&mut e);
        assert!(a.contains(&Output::Complete(1)), "{a:?}");
        assert!(a.iter().any(|a| matches!(a, Output::Transmit { to: 1, frame: Frame::Commit { .. }, .. })), "{a:?}");
        // Growing again keeps what is known: the dead stay dead, later sends skip them.
        e.grow(3);
        e.send(T, mid(0, 3, 1), v(6), false, 2);
        assert_eq!(txs(&drain(&mut e)).iter().map(|x| x.0).collect::<Vec<_>>(), vec![6]);
    }

    #[test]
    fn a_master_sends_nothing_reached_after_a_message_before_its_replica_has_it() {
        // n = 3, r = 2: me slot 2 (rank 1's master), my replica slot 3; rank 0 sends to rank 1.
        let l = Layout::new(3, 2);
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 2, Config::default());
        e.set_notify(true);
        e.set_share_received(true);
        e.send(T, mid(1, 2, 0), v(1), false, 10);
        assert_eq!(txs(&drain(&mut e)).len(), 2, "a send reached before any receive goes");
        e.received(mid(0, 1, 0), || v(42));
        assert!(drain(&mut e).is_empty(), "the lowest replica tells nobody");
        assert_eq!(e.unshared(), 1);
        e.send(T, mid(1, 2, 1), v(2), false, 11);
        assert!(txs(&drain(&mut e)).is_empty(), "held: the replica may lack the message");
        // Its own messages are not shared (its replicas send them themselves).
        e.received(mid(1, 1, 0), || v(0));
        assert_eq!(e.unshared(), 1);
        // Only a replica of higher index may say it has it.
        assert!(e.handle_input(T, Input::Received { from: 4, mid: mid(0, 1, 0) }).is_err());
        e.handle_input(T, Input::Received { from: 3, mid: mid(0, 1, 0) }).unwrap();
        assert_eq!(e.unshared(), 0);
        assert_eq!(txs(&drain(&mut e)).iter().map(|x| x.0).collect::<Vec<_>>(), vec![4, 5], "released");
        // The replica may say so first: nothing is kept then.
        e.handle_input(T, Input::Received { from: 3, mid: mid(0, 1, 1) }).unwrap();
        e.received(mid(0, 1, 1), || panic!("no copy needed"));
        assert_eq!(e.unshared(), 0);
    }

    #[test]
    fn a_replica_tells_its_master_and_a_master_relays_what_a_lost_rank_sent() {
        // n = 2, r = 2: rank 0 is slots 0 (master) and 1; rank 1 (slots 2, 3) is lost whole.
        let l = Layout::new(2, 2);
        let mut r: Endpoint<V, u32> = Endpoint::new(l, 1, Config::default());
        r.set_share_received(true);
        r.received(mid(1, 0, 0), || panic!("no replica of higher index: no copy"));
        let a = drain(&mut r);
        assert!(matches!(a.as_slice(), [Output::Transmit { to: 0, frame: Frame::Received { .. }, .. }]), "{a:?}");
        let mut m: Endpoint<V, u32> = Endpoint::new(l, 0, Config::default());
        m.set_notify(true);
        m.set_share_received(true);
        m.received(mid(1, 0, 0), || v(5));
        m.received(mid(1, 0, 1), || v(6));
        m.handle_input(T, Input::Received { from: 1, mid: mid(1, 0, 0) }).unwrap();
        m.handle_input(T, Input::DeclaredDead { slot: 2 }).unwrap();
        assert!(!drain(&mut m).iter().any(|a| matches!(a, Output::Transmit { frame: Frame::Relay { .. }, .. })));
        m.handle_input(T, Input::DeclaredDead { slot: 3 }).unwrap();
        let relays: Vec<(usize, MsgId, u64)> = drain(&mut m)
            .into_iter()
            .filter_map(|a| match a {
                Output::Transmit { to, frame: Frame::Relay { mid, payload }, .. } => Some((to, mid, payload.v)),
                _ => None,
            })
            .collect();
        assert_eq!(relays, vec![(1, mid(1, 0, 1), 6)], "only what the replica lacks, once");
        m.handle_input(T, Input::DeclaredDead { slot: 3 }).unwrap();
        assert!(drain(&mut m).is_empty());
        // A replica declared dead is waited for no more.
        m.handle_input(T, Input::DeclaredDead { slot: 1 }).unwrap();
        assert_eq!(m.unshared(), 0);
    }

    #[test]
    fn without_shared_receives_nothing_is_kept_told_or_held() {
        let l = Layout::new(3, 2);
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 3, Config::default());
        e.received(mid(0, 1, 0), || panic!("not kept"));
        assert!(drain(&mut e).is_empty());
        let mut m: Endpoint<V, u32> = Endpoint::new(l, 2, Config::default());
        m.received(mid(0, 1, 0), || panic!("not kept"));
        m.send(T, mid(1, 2, 0), v(1), false, 10);
        assert_eq!(txs(&drain(&mut m)).len(), 2);
        assert!(m.take_relayed(mid(0, 1, 0)).is_none());
    }

    #[test]
    fn messages_to_a_rank_lost_whole_do_not_keep_a_replica_waiting() {
        // n = 3, r = 2: me slot 3 (rank 1's replica); rank 1 sends to ranks 0 and 2.
        let mut e: Endpoint<V, u32> = Endpoint::new(Layout::new(3, 2), 3, Config::default());
        e.send(T, mid(1, 2, 0), v(1), false, 1);
        e.send(T, mid(1, 0, 0), v(2), false, 2);
        assert!(e.backup_pending());
        assert!(e.backup_pending_beyond(|m| m.dst == 2), "the message to rank 0 is still owed");
        // Rank 0's copy is committed; rank 2's never will be (its master's send failed).
        assert!(e.on_commit(2, mid(1, 0, 0), false));
        assert!(e.backup_pending(), "the message to rank 2 stays in the table");
        assert!(!e.backup_pending_beyond(|m| m.dst == 2), "but nobody waits for it");
        assert!(e.backup_pending_beyond(|_| false));
    }

    #[test]
    fn messages_on_a_revoked_communicator_do_not_keep_a_replica_waiting() {
        // n = 3, r = 2: me slot 3 (rank 1's replica). Its master never sent the message on
        // communicator 5 (an immediate collective it gave up once 5 was revoked).
        let mut e: Endpoint<V, u32> = Endpoint::new(Layout::new(3, 2), 3, Config::default());
        let mut on5 = mid(1, 0, 0);
        on5.comm = 5;
        e.send(T, on5, v(1), false, 1);
        e.send(T, mid(1, 2, 0), v(2), false, 2);
        let gone = |m: &MsgId| m.comm == 5;
        assert!(e.backup_pending_beyond(gone), "the message on another communicator is owed");
        assert!(e.on_commit(2, mid(1, 2, 0), false));
        assert!(!e.backup_pending_beyond(gone), "nobody waits for the one on the revoked communicator");
        assert!(e.backup_pending());
    }

    #[test]
    fn rare_events_go_in_as_inputs_and_forged_control_frames_are_refused() {
        // n = 2, r = 2: slot 1 is rank 0's replica, slot 0 its master; slots 2, 3 are rank 1.
        let l = Layout::new(2, 2);
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 1, Config::default());
        e.send(T, mid(0, 1, 0), v(1), false, 1);
        assert_eq!(drain(&mut e), vec![Output::Complete(1)]);
        let forged = Input::Commit { from: 2, mid: mid(0, 1, 0), acked: false };
        assert_eq!(e.handle_input(T, forged), Err(Refused { from: 2 }));
        assert!(e.backup_pending(), "a refused commit changes nothing");
        assert_eq!(e.handle_input(T, Input::Commit { from: 0, mid: mid(0, 1, 0), acked: false }), Ok(()));
        assert!(!e.backup_pending());
        assert_eq!(e.handle_input(T, Input::ChoiceQuery { from: 3 }), Err(Refused { from: 3 }));
        let cause = "connection closed".to_string();
        assert_eq!(e.handle_input(T, Input::Suspect { slot: 0, cause, bye: false }), Ok(()));
        assert!(matches!(&drain(&mut e)[..], [Output::Suspect { slot: 0, .. }]));
        assert_eq!(e.handle_input(T, Input::DeclaredDead { slot: 0 }), Ok(()));
        assert!(e.is_master(), "took over");
        assert!(drain(&mut e).contains(&Output::TookOver { count: 1 }), "the recent copy is sent again");
        assert_eq!(e.handle_input(T, Input::Grow { n: 3 }), Ok(()));
        assert_eq!(e.layout(), Layout::new(3, 2));
        assert_eq!(e.poll_timeout(), None, "no stall limit: no timer");
    }

    #[test]
    fn synchronous_send_waits_for_an_acknowledgement() {
        let l = Layout::new(2, 2);
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 0, Config::default());
        e.send(T, mid(0, 1, 0), v(1), true, 9);
        let t = txs(&drain(&mut e));
        for (_, tx) in &t {
            e.written(T, *tx);
        }
        assert!(!drain(&mut e).contains(&Output::Complete(9)));
        assert!(!e.on_sync_ack(1, mid(0, 1, 0)), "from a replica of the wrong rank");
        assert!(e.on_sync_ack(3, mid(0, 1, 0)));
        assert_eq!(drain(&mut e), vec![Output::Complete(9)]);
    }

    #[test]
    fn suspected_destination_holds_the_commit_until_declared() {
        let l = Layout::new(2, 2);
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 0, Config::default());
        e.send(T, mid(0, 1, 0), v(1), false, 1);
        let t = txs(&drain(&mut e));
        e.written(T, t[0].1);
        e.suspect(T, 3, "connection closed", false);
        let a = drain(&mut e);
        assert_eq!(a, vec![Output::Suspect { slot: 3, cause: "connection closed".into() }]);
        // A late completion of the dropped connection does not count.
        e.written(T, t[1].1);
        assert!(drain(&mut e).is_empty());
        // A new send goes only to the other replica, and is held too (the old one is).
        e.send(T, mid(0, 1, 1), v(2), false, 2);
        let a = drain(&mut e);
        assert_eq!(txs(&a).iter().map(|x| x.0).collect::<Vec<_>>(), vec![2]);
        e.declared_dead(T, 3);
        let a = drain(&mut e);
        assert!(a.contains(&Output::Complete(1)), "{a:?}");
        assert!(a
            .iter()
            .any(|a| matches!(a, Output::Transmit { to: 1, frame: Frame::Commit { mid, .. }, .. } if mid.seq == 0)));
    }

    #[test]
    fn replica_copies_small_lends_large_and_takes_over_in_order() {
        let l = Layout::new(2, 2);
        let cfg = Config { copy_limit: 16, backup_window: 20, ..Config::default() };
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 1, cfg);
        assert!(!e.must_lend(8));
        assert!(e.must_lend(17));
        e.send(T, mid(0, 1, 0), v(0), false, 10);
        assert_eq!(drain(&mut e), vec![Output::Complete(10)], "a copy: complete at once");
        e.send(T, mid(0, 1, 1), V { v: 1, len: 64, lent: true }, false, 11);
        assert!(drain(&mut e).is_empty(), "lent: completes on commit");
        e.send(T, mid(0, 1, 2), v(2), false, 12);
        drain(&mut e);
        assert!(e.must_lend(8), "the window of copies is full");
        assert!(e.on_commit(0, mid(0, 1, 0), false));
        assert!(drain(&mut e).is_empty());
        assert_eq!(e.backup_bytes(), 8);
        e.declared_dead(T, 0);
        let a = drain(&mut e);
        assert!(a.contains(&Output::TookOver { count: 3 }), "{a:?}");
        let sent: Vec<u64> = a
            .iter()
            .filter_map(|a| match a {
                Output::Transmit { frame: Frame::Data { mid, .. }, .. } => Some(mid.seq),
                _ => None,
            })
            .collect();
        assert_eq!(sent, vec![0, 0, 1, 1, 2, 2], "the recent copy, then the backup table, in order");
        for (_, tx) in txs(&a) {
            e.written(T, tx);
        }
        let a = drain(&mut e);
        assert!(a.contains(&Output::Complete(11)), "the lent send completes once transmitted: {a:?}");
    }

    #[test]
    fn acknowledged_commits_drop_the_copies_unacknowledged_ones_keep_them() {
        // n = 2, r = 2: slot 1 is rank 0's replica, slot 0 its master.
        let l = Layout::new(2, 2);
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 1, Config::default());
        for s in 0..4 {
            e.send(T, mid(0, 1, s), v(s), false, s as u32);
        }
        // Another channel (tag 2), committed unacknowledged: kept whatever happens to tag 1.
        e.send(T, MsgId { tag: 2, ..mid(0, 1, 0) }, v(9), false, 9);
        drain(&mut e);
        assert!(e.on_commit(0, mid(0, 1, 0), false));
        assert!(e.on_commit(0, MsgId { tag: 2, ..mid(0, 1, 0) }, false));
        assert!(e.on_commit(0, mid(0, 1, 1), false));
        assert_eq!(e.recent_len(), 3, "unacknowledged commits keep their copies");
        assert!(e.on_commit(0, mid(0, 1, 2), true));
        assert_eq!(e.recent_len(), 1, "an acknowledged commit drops its copy and the channel's older ones");
        // The master ran ahead, acknowledged (another channel, tag 3): the send reached
        // later keeps nothing.
        assert!(e.on_commit(0, MsgId { tag: 3, ..mid(0, 1, 0) }, true));
        e.send(T, MsgId { tag: 3, ..mid(0, 1, 0) }, v(4), false, 4);
        assert_eq!(e.recent_len(), 1);
        // A commit from a non-member of the rank is refused, whatever its flag.
        assert!(!e.on_commit(2, mid(0, 1, 3), true));
        // Takeover: only the unacknowledged channel's copy and the uncommitted send go again.
        e.declared_dead(T, 0);
        let a = drain(&mut e);
        let sent: Vec<(i32, u64)> = a
            .iter()
            .filter_map(|a| match a {
                Output::Transmit { frame: Frame::Data { mid, .. }, .. } => Some((mid.tag, mid.seq)),
                _ => None,
            })
            .collect();
        assert_eq!(sent, vec![(0, 3), (0, 3), (2, 0), (2, 0)], "{a:?}");
    }

    #[test]
    fn a_new_master_commits_again_what_its_predecessor_committed_acknowledged() {
        // n = 2, r = 3: slot 1 takes over rank 0 from slot 0; slot 2 may have missed the
        // commit, and slot 1 no longer has the message to send and commit again.
        let l = Layout::new(2, 3);
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 1, Config::default());
        e.send(T, mid(0, 1, 0), v(0), false, 0);
        drain(&mut e);
        assert!(e.on_commit(0, mid(0, 1, 0), true));
        assert_eq!(e.recent_len(), 0);
        e.declared_dead(T, 0);
        let a = drain(&mut e);
        assert!(
            a.iter().any(|a| matches!(a, Output::Transmit { to: 2, frame: Frame::Commit { mid, acked: false }, .. } if mid.seq == 0)),
            "committed again, never flagged acknowledged: {a:?}"
        );
        assert!(!a.iter().any(|a| matches!(a, Output::Transmit { frame: Frame::Data { .. }, .. })), "{a:?}");
    }

    #[test]
    fn master_holds_new_transmissions_until_choices_are_acknowledged() {
        let l = Layout::new(2, 3);
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 0, Config::default());
        let c = e.choice_point();
        e.decided(0, c, Some((1, 0, 0)));
        let a = drain(&mut e);
        let to: Vec<usize> = a
            .iter()
            .filter_map(|a| match a {
                Output::Transmit { to, frame: Frame::Choice { .. }, .. } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(to, vec![1, 2], "replicas in index order");
        e.send(T, mid(0, 1, 0), v(1), false, 1);
        assert!(txs(&drain(&mut e)).is_empty(), "held behind the choice");
        assert!(e.on_choice_ack(1, c));
        assert!(txs(&drain(&mut e)).is_empty(), "slot 2 has not acknowledged");
        assert!(!e.on_choice_ack(3, c), "not a replica of this rank");
        // A suspected replica is waited for until the verdict (the launcher may keep it and
        // exclude this master instead).
        e.suspect(T, 2, "stalled", false);
        assert!(txs(&drain(&mut e)).is_empty());
        e.declared_dead(T, 2);
        assert_eq!(txs(&drain(&mut e)).len(), 3);

        // The replica's side: learned and acknowledged.
        let mut r: Endpoint<V, u32> = Endpoint::new(l, 1, Config::default());
        assert!(r.on_choice(0, 4, None));
        assert_eq!(r.choice_known(4), Some(None));
        assert!(matches!(&drain(&mut r)[..], [Output::Transmit { to: 0, frame: Frame::ChoiceAck { point: 4 }, .. }]));
    }

    #[test]
    fn stalled_destination_is_suspected_and_parked_messages_time_out() {
        let l = Layout::new(2, 2);
        let cfg = Config { stall_limit: Some(Duration::from_secs(2)), ..Config::default() };
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 0, cfg);
        e.send(T, mid(0, 1, 0), v(1), false, 1);
        let t = txs(&drain(&mut e));
        e.written(Duration::from_secs(1), t[0].1);
        e.progress(Duration::from_secs(1), 3);
        assert_eq!(e.poll_timeout(), Some(Duration::from_secs(3)));
        e.handle_timeout(Duration::from_millis(2500));
        assert!(drain(&mut e).is_empty());
        e.handle_timeout(Duration::from_millis(3100));
        assert!(matches!(&drain(&mut e)[..], [Output::Suspect { slot: 3, .. }]));

        e.park(
            Duration::from_secs(4),
            MsgId { comm: 0, src: 1, dst: 0, tag: 0, seq: 5 },
            Parked { data: v(5), sync: false, rts: None },
        );
        assert!(e.unpark(0, 1, 0, 4).is_none());
        e.handle_timeout(Duration::from_millis(6100));
        let a = drain(&mut e);
        let [Output::ChannelLost(lost)] = &a[..] else { panic!("{a:?}") };
        assert_eq!((lost.rank, lost.first), (1, 5));
        assert!(lost.cause(4).starts_with("message 4 of its channel"), "{}", lost.cause(4));
    }

    #[test]
    fn large_messages_go_by_rendez_vous_and_commit_once_every_destination_has_them() {
        // n = 2, r = 2: rank 0 is slots 0 (master, me) and 1; rank 1 is 2 and 3.
        let l = Layout::new(2, 2);
        let cfg = Config { rndv_limit: 100, ..Config::default() };
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 0, cfg);
        let big = V { v: 9, len: 1000, lent: true };
        let m = mid(0, 1, 0);
        e.send(T, m, big.clone(), false, 5);
        let a = drain(&mut e);
        let rts: Vec<usize> = a
            .iter()
            .filter_map(|a| match a {
                Output::Transmit { to, frame: Frame::Rts { len: 1000, .. }, .. } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(rts, vec![2, 3], "announced, no data yet");
        assert!(e.on_pull(2, m, false));
        let a = drain(&mut e);
        assert!(matches!(&a[..], [Output::Transmit { to: 2, frame: Frame::RndvData { .. }, .. }]), "{a:?}");
        assert!(e.on_pull(2, m, true));
        assert!(drain(&mut e).is_empty(), "slot 3 does not have it yet");
        // Slot 3 dies before pulling: the message is complete without it.
        e.declared_dead(T, 3);
        let a = drain(&mut e);
        assert!(a.iter().any(|a| matches!(a, Output::Transmit { to: 1, frame: Frame::Commit { .. }, .. })), "{a:?}");
        assert!(a.contains(&Output::Complete(5)));

        // A replica that takes over knows who pulled and who has the message.
        let mut r: Endpoint<V, u32> = Endpoint::new(l, 1, cfg);
        r.send(T, m, big, false, 6);
        assert!(r.on_pull(2, m, true));
        assert!(r.on_pull(3, m, false));
        r.declared_dead(T, 0);
        let a = drain(&mut r);
        let data: Vec<usize> = a
            .iter()
            .filter_map(|a| match a {
                Output::Transmit { to, frame: Frame::RndvData { .. }, .. } => Some(*to),
                Output::Transmit { frame: Frame::Rts { .. }, .. } => panic!("announced again: {a:?}"),
                _ => None,
            })
            .collect();
        assert_eq!(data, vec![3], "slot 2 has it; slot 3 pulled it from the dead master");
    }

    #[test]
    fn parked_messages_come_out_in_turn_and_duplicates_go() {
        let l = Layout::new(2, 1);
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 0, Config::default());
        for s in [3, 1, 2] {
            e.park(T, MsgId { comm: 0, src: 1, dst: 0, tag: 0, seq: s }, Parked { data: v(s), sync: false, rts: None });
        }
        assert!(e.unpark(0, 1, 0, 0).is_none());
        assert_eq!(
            e.unpark(0, 1, 0, 2).map(|x| x.1.data.v),
            Some(1),
            "1 was delivered meanwhile: presented as a duplicate"
        );
        assert_eq!(e.unpark(0, 1, 0, 2).map(|x| x.1.data.v), Some(2));
        assert_eq!(e.unpark(0, 1, 0, 3).map(|x| x.1.data.v), Some(3));
        assert_eq!(e.early_len(), 0);
    }

    #[test]
    fn a_rank_lost_whole_is_reported_and_its_synchronous_sends_complete_when_failures_are_handled() {
        // n = 3, r = 2: this is slot 0 (rank 0's master); rank 2 is slots 4 and 5.
        let l = Layout::new(3, 2);
        for notify in [false, true] {
            let mut e: Endpoint<V, u32> = Endpoint::new(l, 0, Config::default());
            e.set_notify(notify);
            e.send(T, mid(0, 2, 0), v(1), true, 100);
            for (_, tx) in txs(&drain(&mut e)) {
                e.written(T, tx);
            }
            // Written everywhere, committed, but a synchronous send waits for a match.
            assert!(!drain(&mut e).iter().any(|a| matches!(a, Output::Complete(100))));
            e.park(T, MsgId { comm: 0, src: 2, dst: 0, tag: 0, seq: 3 }, Parked { data: v(3), sync: false, rts: None });
            e.declared_dead(T, 4);
            assert!(drain(&mut e).iter().all(|a| !matches!(a, Output::RankLost { .. } | Output::Fatal { .. })));
            e.declared_dead(T, 5);
            let a = drain(&mut e);
            if notify {
                assert!(a.contains(&Output::RankLost { rank: 2 }), "{a:?}");
                assert!(a.contains(&Output::Complete(100)), "the synchronous send to the lost rank completes: {a:?}");
                assert!(!a.iter().any(|a| matches!(a, Output::Fatal { .. })));
                assert_eq!(e.early_len(), 0, "what the lost rank's channels waited for never comes");
            } else {
                assert!(matches!(&a[..], [Output::Fatal { rank: 2, .. }]), "{a:?}");
            }
        }
    }

    #[test]
    fn a_replica_knows_when_its_master_is_ahead() {
        // n = 2, r = 2: this is slot 1, rank 0's replica; slot 0 is its master.
        let l = Layout::new(2, 2);
        let mut e: Endpoint<V, u32> = Endpoint::new(l, 1, Config::default());
        e.send(T, mid(0, 1, 0), v(1), false, 1);
        assert!(e.on_commit(0, mid(0, 1, 0), false));
        assert!(!e.master_ahead(), "level");
        assert!(e.on_commit(0, mid(0, 1, 1), false));
        assert!(e.master_ahead(), "the master committed a send this replica has not reached");
        // A commit told again (by a new master) counts once.
        assert!(e.on_commit(0, mid(0, 1, 1), false));
        e.send(T, mid(0, 1, 1), v(2), false, 2);
        assert!(!e.master_ahead());
    }
}
