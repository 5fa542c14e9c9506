//! The TCP device: persistent connections between process pairs and the progress engine.
//!
//! # Design
//!
//! * **One listening port per process** (the seeds' *single-port* device, firewall-friendly),
//!   but with **persistent** connections: a process connects to a peer the first time it has
//!   something to send to it and keeps that connection. A connection accepted from a peer is
//!   also used to send to that peer when none exists yet, so a pair normally shares one
//!   socket. Every connection starts with a `Hello` frame carrying the sender's rank and the
//!   job's secret token; a connection that fails that check, or sends a malformed frame before
//!   it, is closed and logged and the process keeps serving.
//! * **Protocols** (thesis §5.3): messages up to [`EAGER_LIMIT`] travel *eager* (header and
//!   data in one frame); larger ones and synchronous sends use *rendez-vous*: READY_TO_SEND,
//!   READY_TO_RECV when the receive is matched, then the data, which is read from the socket
//!   straight into the receiver's buffer.
//! * **Progress is driven by the calling thread**: there is no progress thread. A blocking
//!   call first polls without sleeping — reading the socket of the peer it waits for directly,
//!   and the others through `epoll_wait(0)` — and only after a spin budget sleeps in
//!   `epoll_wait`. On this kind of VM a thread woken by the kernel pays ≈ 30 µs per message
//!   while a polling one pays ≈ 4 µs. When more processes run on the host than it has cores,
//!   the spin budget drops to zero (spinning would steal the CPU from the peer it waits for).
//! * The matching rules live in the pure [`p2pmpi_core::matching::Matcher`]; this module only
//!   moves bytes and bookkeeping.

mod conn;

use crate::error::{Error, Result};
use conn::{Conn, Out, Payload, RState};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use p2pmpi_core::matching::{Arrival, Body, Envelope, Matcher, Pattern};
use p2pmpi_core::replication::{Choices, Coordinator, Layout, MsgId, Outcome, Recovery, SendAction};
use p2pmpi_wire::{FrameKind, Header, Mid};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// Largest message sent with the eager protocol (the seeds' 128 KB).
pub const EAGER_LIMIT: usize = 128 * 1024;

/// Largest message of a replicated job, where every message travels eager (a receiver must
/// not be made to allocate more on a peer's word).
pub const REPLICATED_MAX_MESSAGE: u64 = 1 << 32;

const LISTENER: Token = Token(usize::MAX);

/// Request handle inside the engine.
pub(crate) type ReqId = usize;

/// What a completed receive learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatusInfo {
    pub source: i32,
    pub tag: i32,
    pub len: u64,
    pub cancelled: bool,
}

#[derive(Debug)]
pub(crate) enum ReqState {
    Pending,
    Done(StatusInfo),
    Failed(Error),
}

#[derive(Debug)]
struct Req {
    /// Receive target (null for sends).
    ptr: *mut u8,
    cap: usize,
    state: ReqState,
    /// A transmission of a replicated send: the fan-out it counts for.
    parent: Option<usize>,
}

/// One replicated send by a master (thesis algorithm 4): transmissions to the alive replicas
/// of the destination still being written; once all are, the MID is committed to this rank's
/// other replicas and the user's request (if any: resends after a takeover have none)
/// completes.
#[derive(Debug)]
struct Fanout {
    pending: usize,
    mid: Mid,
    user: Option<ReqId>,
    subs: Vec<ReqId>,
    /// A synchronous send: the user's request also waits for a destination replica to say
    /// it matched the message.
    sync: bool,
    acked: bool,
    written: bool,
}

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

/// A message in a non-master's backup table (thesis algorithm 4).
#[derive(Debug)]
enum Backup {
    /// A copy (small messages, within [`BACKUP_WINDOW`]).
    Copy(Vec<u8>),
    /// The user's own buffer, valid until request `req` completes.
    Lent { ptr: *const u8, len: usize, req: ReqId },
}

/// The replication state of a process of a job run with `-r R` (R > 1).
struct Replication {
    coord: Coordinator<Backup>,
    /// Bytes of copies in the backup table.
    backup_bytes: usize,
    /// Copies of recently committed messages, oldest first ([`RECENT_WINDOW`]).
    recent: VecDeque<(Mid, Vec<u8>)>,
    recent_bytes: usize,
    fanouts: Vec<Option<Fanout>>,
    free_fanouts: Vec<usize>,
    /// MIDs whose transmissions are all written: to commit.
    commits: VecDeque<Mid>,
    /// The backup table handed over by a takeover: to transmit and commit.
    resends: VecDeque<(Mid, Backup)>,
    /// Messages that arrived before their turn, per (comm, source, tag), by sequence.
    early: HashMap<(u32, i32, i32), EarlyQueue>,
    /// Synchronous messages accepted but not matched yet: (comm, source, tag, seq).
    sync_unmatched: std::collections::HashSet<(u32, i32, i32, u64)>,
    /// Since when messages wait in `early` for an earlier one.
    early_since: Option<Instant>,
    /// Slots this process suspects (reported to the launcher, which alone declares deaths):
    /// nothing more is sent to them or read from them.
    suspected: Vec<bool>,
    /// Choice points of this replica ([`Choices`]): the master's outcomes it learned.
    choices: Choices,
    /// The master's wildcard receives not complete yet: their choice point and communicator.
    choice_of: HashMap<ReqId, (u64, u32)>,
    /// The message a wildcard receive of the master matched: source, tag, sequence.
    matched: HashMap<ReqId, (i32, i32, u64)>,
    /// A non-master's wildcard receives waiting for their master's choice, by choice point.
    deferred_recvs: std::collections::BTreeMap<u64, (ReqId, Pattern)>,
    /// Choices of this master to tell its replicas: communicator, point, outcome.
    choice_out: VecDeque<(u32, u64, Outcome)>,
    /// Choice frames queued but not written yet (their completions): the master transmits
    /// nothing before they are, so that no message depending on a choice leaves before the
    /// choice reached the replicas.
    choice_unwritten: std::collections::HashSet<ReqId>,
    /// Per slot: transmissions to a suspected replica, held until the launcher declares it
    /// dead. They do not count as written before that: a fan-out is committed only once every
    /// live destination has its copy (if the launcher excludes this process instead, its
    /// successor resends them from its backup table).
    held: Vec<Vec<ReqId>>,
}

/// Messages of one channel that came before their turn, by sequence: the envelope, the data
/// and whether it is a synchronous send's.
type EarlyQueue = BTreeMap<u64, (Envelope, Vec<u8>, bool)>;

/// What `P2PMPI_TRACE` records of an accepted message: comm, source, tag, sequence, length.
type TraceEntry = (u32, i32, i32, u64, u64);

fn msg_id(m: &Mid) -> MsgId {
    MsgId { comm: m.comm, src: m.src, dst: m.dst, tag: m.tag, seq: m.seq }
}

fn mid_of(m: &MsgId) -> Mid {
    Mid { comm: m.comm, src: m.src, dst: m.dst, tag: m.tag, seq: m.seq }
}

/// The data of a transmission: the caller's buffer (valid until its request completes) or a
/// copy from the backup table.
enum TxData {
    Raw(*const u8, usize),
    Owned(Vec<u8>),
}

/// A message removed from the queues by a matched probe, waiting for its receive.
#[derive(Debug)]
pub(crate) struct Matched {
    pub env: Envelope,
    body: Body<Vec<u8>>,
}

/// How a send is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendMode {
    /// Eager below the limit, rendez-vous above.
    Standard,
    /// Always rendez-vous: completes once the receiver has matched the message.
    Synchronous,
}

#[derive(Debug, Default)]
struct Peer {
    /// The connection this process sends to the peer on (fixed once chosen: order).
    send_conn: Option<usize>,
    /// Every connection with the peer.
    conns: Vec<usize>,
    /// The peer said `Bye`.
    bye: bool,
}

struct RndvSend {
    req: ReqId,
    ptr: *const u8,
    len: usize,
}

/// The state of one process's device.
pub(crate) struct Engine {
    pub rank: i32,
    pub size: i32,
    /// This process's slot (its index among the job's real processes): the rank, unless
    /// the job runs replicas.
    pub slot: i32,
    layout: Option<Layout>,
    repl: Option<Box<Replication>>,
    /// MIDs accepted (`P2PMPI_TRACE`): comm, source, tag, sequence, length.
    trace: Option<Vec<TraceEntry>>,
    token: u64,
    poll: Poll,
    events: Events,
    listener: Option<TcpListener>,
    addrs: Vec<SocketAddr>,
    peers: Vec<Peer>,
    conns: Vec<Option<Conn>>,
    matcher: Matcher<ReqId, Vec<u8>>,
    reqs: Vec<Option<Req>>,
    free_reqs: Vec<ReqId>,
    rndv_send: HashMap<Mid, RndvSend>,
    rndv_recv: HashMap<Mid, ReqId>,
    /// Frames produced while a connection was checked out, sent afterwards.
    deferred: Vec<(i32, Out)>,
    /// The error that ended communication, if any: every later wait returns it.
    pub fatal: Option<Error>,
    /// How long a blocking call polls before it sleeps.
    pub spin: Duration,
    /// After `spin`, how long it keeps polling with `sched_yield` between polls.
    pub yield_spin: Duration,
    tick: u32,
    /// Reused buffer of ready events.
    ready: Vec<(Token, bool, bool)>,
}

// The raw pointers inside are buffers the API layer guarantees to outlive their requests;
// the engine is only ever used behind the global lock.
unsafe impl Send for Engine {}

impl Engine {
    /// A device for `rank` of `size`, listening on `listener`, with peers at `addrs` (one
    /// per slot). With a `layout` of more than one replica, this process is slot `slot` and
    /// runs the replica coordination protocol.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rank: i32,
        size: i32,
        slot: i32,
        layout: Option<Layout>,
        token: u64,
        listener: Option<std::net::TcpListener>,
        addrs: Vec<SocketAddr>,
        spin: Duration,
    ) -> Result<Engine> {
        let layout = layout.filter(|l| l.r > 1);
        let slots = layout.map_or(size as usize, |l| l.slots());
        let poll = Poll::new()?;
        let listener = match listener {
            Some(l) => {
                l.set_nonblocking(true)?;
                let mut l = TcpListener::from_std(l);
                poll.registry().register(&mut l, LISTENER, Interest::READABLE)?;
                Some(l)
            }
            None => None,
        };
        let repl = layout.map(|l| {
            Box::new(Replication {
                coord: Coordinator::new(l, slot as usize),
                backup_bytes: 0,
                recent: VecDeque::new(),
                recent_bytes: 0,
                fanouts: Vec::new(),
                free_fanouts: Vec::new(),
                commits: VecDeque::new(),
                resends: VecDeque::new(),
                early: HashMap::new(),
                sync_unmatched: Default::default(),
                early_since: None,
                suspected: vec![false; l.slots()],
                held: vec![Vec::new(); l.slots()],
                choices: Choices::new(),
                choice_of: HashMap::new(),
                matched: HashMap::new(),
                deferred_recvs: Default::default(),
                choice_out: VecDeque::new(),
                choice_unwritten: Default::default(),
            })
        });
        let trace = std::env::var_os("P2PMPI_TRACE").map(|_| Vec::new());
        Ok(Engine {
            rank,
            size,
            slot,
            layout,
            repl,
            trace,
            token,
            poll,
            events: Events::with_capacity(256),
            listener,
            addrs,
            peers: (0..slots).map(|_| Peer::default()).collect(),
            conns: Vec::new(),
            matcher: Matcher::new(),
            reqs: Vec::new(),
            free_reqs: Vec::new(),
            rndv_send: HashMap::new(),
            rndv_recv: HashMap::new(),
            deferred: Vec::new(),
            fatal: None,
            spin,
            yield_spin: Duration::ZERO,
            tick: 0,
            ready: Vec::with_capacity(256),
        })
    }

    pub fn debug_state(&self) -> String {
        let conns: Vec<String> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                c.as_ref().map(|c| {
                    format!(
                        "c{i}:peer{:?} outq{} rbuf{} want_w{} eof{}",
                        c.peer,
                        c.outq.len(),
                        c.buffered(),
                        c.want_write,
                        c.read_eof
                    )
                })
            })
            .collect();
        let repl = self.repl.as_ref().map_or(String::new(), |rp| {
            format!(
                " master {} backup {} fanouts {} commits {} resends {} dead {:?}",
                rp.coord.is_master(),
                rp.coord.backup_len(),
                rp.fanouts.iter().flatten().count(),
                rp.commits.len(),
                rp.resends.len(),
                rp.coord.dead_slots()
            )
        });
        format!(
            "posted {} unexpected {} rndv_s {} rndv_r {} deferred {}{repl} conns [{}]",
            self.matcher.posted_len(),
            self.matcher.unexpected_len(),
            self.rndv_send.len(),
            self.rndv_recv.len(),
            self.deferred.len(),
            conns.join(", ")
        )
    }

    /// The address of the listening data port.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    // ----------------------------------------------------------------- requests

    fn new_req(&mut self, ptr: *mut u8, cap: usize, state: ReqState) -> ReqId {
        let r = Req { ptr, cap, state, parent: None };
        match self.free_reqs.pop() {
            Some(id) => {
                self.reqs[id] = Some(r);
                id
            }
            None => {
                self.reqs.push(Some(r));
                self.reqs.len() - 1
            }
        }
    }

    fn req_mut(&mut self, id: ReqId) -> &mut Req {
        self.reqs[id].as_mut().expect("live request")
    }

    /// A request that is already complete (for operations finished on the spot).
    pub fn completed_req(&mut self) -> ReqId {
        let st = StatusInfo { source: -1, tag: -1, len: 0, cancelled: false };
        self.new_req(std::ptr::null_mut(), 0, ReqState::Done(st))
    }

    /// The state of a request, if it has finished (the request stays until [`Self::release`]).
    pub fn is_done(&self, id: ReqId) -> bool {
        !matches!(self.reqs[id].as_ref().expect("live request").state, ReqState::Pending)
    }

    /// Takes a finished request's outcome and frees it; `None` if still pending.
    pub fn take_done(&mut self, id: ReqId) -> Option<Result<StatusInfo>> {
        let r = self.reqs[id].as_ref().expect("live request");
        if matches!(r.state, ReqState::Pending) {
            return None;
        }
        let r = self.reqs[id].take().expect("live request");
        self.free_reqs.push(id);
        Some(match r.state {
            ReqState::Done(s) => Ok(s),
            ReqState::Failed(e) => Err(e),
            ReqState::Pending => unreachable!(),
        })
    }

    fn complete(&mut self, id: ReqId, st: Result<StatusInfo>) {
        if let Some(rp) = self.repl.as_mut() {
            if rp.choice_unwritten.remove(&id) {
                // A choice frame was written (or its replica is gone).
                self.reqs[id] = None;
                self.free_reqs.push(id);
                return;
            }
            // A master's wildcard receive completed: its replicas follow its choice.
            if let Some((c, comm)) = rp.choice_of.remove(&id) {
                if let Some(m) = rp.matched.remove(&id) {
                    rp.choice_out.push_back((comm, c, Some(m)));
                }
            }
        }
        if let Some(f) = self.reqs[id].as_ref().and_then(|r| r.parent) {
            // One transmission of a replicated send is written (or its replica is dead).
            self.reqs[id] = None;
            self.free_reqs.push(id);
            self.fanout_step(f);
            return;
        }
        let r = self.req_mut(id);
        r.state = match st {
            Ok(s) => ReqState::Done(s),
            Err(e) => ReqState::Failed(e),
        };
    }

    /// Withdraws a pending request whose buffer is about to go away. A receive not yet
    /// matched is cancelled; a transfer already under way is finished first (progress is
    /// made until it completes or communication fails), so no write lands in freed memory.
    pub fn cancel(&mut self, id: ReqId) -> bool {
        if self.is_done(id) {
            return false;
        }
        if self.matcher.cancel(&id) {
            let st = StatusInfo { source: -1, tag: -1, len: 0, cancelled: true };
            self.complete(id, Ok(st));
            return true;
        }
        false
    }

    /// Makes sure nothing in the device still points into request `id`'s buffers: a queued
    /// in-place payload becomes an owned copy, a rendez-vous waiting for READY_TO_RECV is
    /// dropped, a receive not matched yet is withdrawn. Used when a wait gives up with an
    /// error, before the caller may free its buffer.
    pub fn detach(&mut self, id: ReqId) {
        for conn in self.conns.iter_mut().flatten() {
            conn.detach(id);
        }
        if let Some(rp) = self.repl.as_mut() {
            // A lent backup whose send is withdrawn: its buffer is about to go; keep a copy.
            let mut copied = 0;
            let mut lent = |b: &mut Backup| {
                if let Backup::Lent { ptr, len, req } = *b {
                    if req == id {
                        // SAFETY: the request is still live, so its buffer (`len` bytes at
                        // `ptr`, lent by the caller of `isend`) is too.
                        let data = if len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(ptr, len) } };
                        *b = Backup::Copy(crate::pool::copy_of(data));
                        copied += len;
                    }
                }
            };
            for (_, b) in rp.coord.backup_mut() {
                lent(b);
            }
            for (_, b) in rp.resends.iter_mut() {
                lent(b);
            }
            rp.backup_bytes += copied;
            for f in rp.fanouts.iter_mut().flatten() {
                if f.user == Some(id) {
                    f.user = None;
                    for sub in f.subs.clone() {
                        for conn in self.conns.iter_mut().flatten() {
                            conn.detach(sub);
                        }
                    }
                }
            }
        }
        self.rndv_send.retain(|_, s| s.req != id);
        if !self.matcher.cancel(&id) {
            // A receive already streaming into its buffer: drop the data instead.
            self.rndv_recv.retain(|_, r| *r != id);
            for conn in self.conns.iter_mut().flatten() {
                if let RState::Stream { req, ref mut discard, .. } = conn.rstate {
                    if req == id {
                        conn.stream_undo = None;
                        *discard = true;
                    }
                }
            }
        }
    }

    // ----------------------------------------------------------------- sending

    fn header(&self, kind: FrameKind, comm: u32, dst: i32, tag: i32, seq: u64, len: u64) -> Header {
        Header::new(kind, Mid { comm, src: self.rank as u32, dst: dst as u32, tag, seq }, len)
    }

    /// Starts a send of `len` bytes at `ptr` to `dst`. The memory must stay valid until the
    /// returned request completes; eager sends copy what they cannot write at once and
    /// complete immediately.
    pub fn isend(
        &mut self,
        comm: u32,
        dst: i32,
        tag: i32,
        ptr: *const u8,
        len: usize,
        mode: SendMode,
    ) -> Result<ReqId> {
        self.check_rank(dst)?;
        if let Some(e) = &self.fatal {
            return Err(e.clone());
        }
        if self.repl.is_some() && len as u64 > REPLICATED_MAX_MESSAGE {
            // Refused before it takes a sequence number (a gap would stall the channel).
            return Err(Error::Protocol {
                rank: dst,
                detail: format!("a message of {len} bytes: replicated jobs send at most 4 GiB per message"),
            });
        }
        let seq = self.matcher.next_send_seq(comm, dst, tag);
        let data = if len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(ptr, len) } };
        if dst == self.rank {
            self.deliver_local(comm, tag, seq, data);
            let st = StatusInfo { source: dst, tag, len: len as u64, cancelled: false };
            return Ok(self.new_req(std::ptr::null_mut(), 0, ReqState::Done(st)));
        }
        if let Some(rp) = self.repl.as_mut() {
            // Algorithm 4: the master transmits, a replica keeps the message until committed.
            let mid = Mid { comm, src: self.rank as u32, dst: dst as u32, tag, seq };
            let st = StatusInfo { source: dst, tag, len: len as u64, cancelled: false };
            let lend = len > BACKUP_COPY_LIMIT || rp.backup_bytes + len > BACKUP_WINDOW;
            let req = self.new_req(std::ptr::null_mut(), 0, ReqState::Pending);
            let rp = self.repl.as_mut().expect("replicated");
            let mut lent = false;
            let action = rp.coord.on_send(msg_id(&mid), || {
                if lend {
                    lent = true;
                    Backup::Lent { ptr, len, req }
                } else {
                    rp.backup_bytes += len;
                    Backup::Copy(crate::pool::copy_of(data))
                }
            });
            return match action {
                SendAction::Stored if lent => Ok(req),
                SendAction::Committed | SendAction::Stored => {
                    self.complete(req, Ok(st));
                    Ok(req)
                }
                SendAction::Transmit { dests } => {
                    let sync = mode == SendMode::Synchronous;
                    self.transmit(mid, TxData::Raw(ptr, len), dests, Some(req), sync);
                    self.flush_deferred();
                    Ok(req)
                }
            };
        }
        let cid = self.send_conn(dst)?;
        if mode == SendMode::Standard && len <= EAGER_LIMIT {
            // Written in place: what the socket does not take now is queued by reference (the
            // caller keeps the buffer until the request completes), never copied, so a sender
            // running ahead of its receiver is held back by TCP instead of growing a queue.
            let h = self.header(FrameKind::Eager, comm, dst, tag, seq, len as u64);
            let req = self.new_req(std::ptr::null_mut(), 0, ReqState::Pending);
            let payload = if len == 0 { Payload::None } else { Payload::Raw(ptr, len) };
            self.push_out(cid, Out::with_completion(h, payload, req))?;
            Ok(req)
        } else {
            let mut h = self.header(FrameKind::ReadyToSend, comm, dst, tag, seq, len as u64);
            if mode == SendMode::Synchronous {
                h.flags |= p2pmpi_wire::frame::flags::SYNCHRONOUS;
            }
            let req = self.new_req(std::ptr::null_mut(), 0, ReqState::Pending);
            self.rndv_send.insert(h.mid, RndvSend { req, ptr, len });
            self.push_out(cid, Out::new(h, Payload::None))?;
            Ok(req)
        }
    }

    /// A message to this very process: matched (and copied) at once or queued.
    fn deliver_local(&mut self, comm: u32, tag: i32, seq: u64, data: &[u8]) {
        let env = Envelope { comm, src: self.rank, tag, seq, len: data.len() as u64 };
        self.accept_eager(env, data, None, false);
    }

    /// An eager message arrived whole: matched, queued, dropped as a duplicate or kept
    /// until its turn. `owned` is the data when the caller already holds a copy.
    fn accept_eager(&mut self, env: Envelope, data: &[u8], owned: Option<Vec<u8>>, sync: bool) {
        match self.matcher.arrive(&env) {
            Arrival::Matched(r) => {
                self.traced(&env);
                if sync {
                    self.ack_sync(&env);
                }
                self.fill(r, &env, data);
                if let Some(v) = owned {
                    crate::pool::give(v);
                }
            }
            Arrival::Unmatched => {
                self.traced(&env);
                if sync {
                    if let Some(rp) = self.repl.as_mut() {
                        rp.sync_unmatched.insert((env.comm, env.src, env.tag, env.seq));
                    }
                }
                let v = owned.unwrap_or_else(|| crate::pool::copy_of(data));
                self.matcher.enqueue(env, Body::Eager(v));
            }
            Arrival::Duplicate => {
                if let Some(v) = owned {
                    crate::pool::give(v);
                }
                return;
            }
            Arrival::Early => {
                let v = owned.unwrap_or_else(|| crate::pool::copy_of(data));
                if let Some(rp) = self.repl.as_mut() {
                    rp.early.entry((env.comm, env.src, env.tag)).or_default().insert(env.seq, (env, v, sync));
                } else {
                    log_warn(self.rank, &format!("message {env:?} arrived out of order; dropped"));
                }
                return;
            }
        }
        self.drain_early(env.comm, env.src, env.tag);
    }

    /// Accepts the messages kept aside that are now next on their channel.
    fn drain_early(&mut self, comm: u32, src: i32, tag: i32) {
        loop {
            let Some(rp) = self.repl.as_mut() else { return };
            if rp.early.is_empty() {
                return;
            }
            let key = (comm, src, tag);
            let next = self.matcher.next_expected(comm, src, tag);
            let Some(q) = rp.early.get_mut(&key) else { return };
            // Anything below `next` arrived meanwhile from another replica: duplicates.
            while q.first_key_value().is_some_and(|(s, _)| *s < next) {
                q.pop_first();
            }
            let Some((env, data, sync)) = q.remove(&next) else {
                if q.is_empty() {
                    rp.early.remove(&key);
                }
                return;
            };
            if q.is_empty() {
                rp.early.remove(&key);
            }
            let ptr = data.as_ptr();
            let n = data.len();
            // `accept_eager` keeps or frees `data`; the slice lives as long as it does.
            let view = unsafe { std::slice::from_raw_parts(ptr, n) };
            self.accept_eager(env, view, Some(data), sync);
        }
    }

    fn traced(&mut self, env: &Envelope) {
        if let Some(t) = self.trace.as_mut() {
            t.push((env.comm, env.src, env.tag, env.seq, env.len));
        }
    }

    /// The messages accepted so far (with `P2PMPI_TRACE` set), one line each:
    /// `comm src tag seq len`.
    pub fn trace_lines(&self) -> Option<String> {
        let t = self.trace.as_ref()?;
        Some(t.iter().map(|(c, s, tg, q, l)| format!("{c} {s} {tg} {q} {l}\n")).collect())
    }

    /// Copies an eager message into a matched receive and completes it.
    fn fill(&mut self, r: ReqId, env: &Envelope, data: &[u8]) {
        self.note_match(r, env);
        let req = self.req_mut(r);
        let st = if data.len() > req.cap {
            Err(Error::Truncated { from_rank: env.src, tag: env.tag, message_bytes: env.len, buffer_bytes: req.cap })
        } else {
            if !data.is_empty() {
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), req.ptr, data.len()) };
            }
            Ok(StatusInfo { source: env.src, tag: env.tag, len: env.len, cancelled: false })
        };
        self.complete(r, st);
    }

    /// A rendez-vous message matched receive `r`: ask for the data.
    fn start_rndv_recv(&mut self, r: ReqId, env: &Envelope) {
        let mid = Mid { comm: env.comm, src: env.src as u32, dst: self.rank as u32, tag: env.tag, seq: env.seq };
        self.rndv_recv.insert(mid, r);
        self.deferred.push((env.src, Out::new(Header::new(FrameKind::ReadyToRecv, mid, 0), Payload::None)));
    }

    // ----------------------------------------------------------------- replication

    /// The rank a slot runs.
    fn rank_of(&self, slot: i32) -> i32 {
        match &self.layout {
            Some(l) if slot >= 0 => l.rank_of(slot as usize) as i32,
            _ => slot,
        }
    }

    /// A master's transmission of `mid` to the replicas `dests` of its destination; the
    /// commit follows once every one is written ([`Self::fanout_step`]).
    fn transmit(&mut self, mid: Mid, data: TxData, dests: Vec<usize>, user: Option<ReqId>, sync: bool) {
        if user.is_some() {
            self.choice_barrier();
        }
        let len = match &data {
            TxData::Raw(_, n) => *n,
            TxData::Owned(v) => v.len(),
        };
        let Some(rp) = self.repl.as_mut() else { return };
        let f = Fanout {
            pending: dests.len() + 1,
            mid,
            user,
            subs: Vec::with_capacity(dests.len()),
            sync: sync && user.is_some(),
            acked: false,
            written: false,
        };
        let fid = match rp.free_fanouts.pop() {
            Some(i) => {
                rp.fanouts[i] = Some(f);
                i
            }
            None => {
                rp.fanouts.push(Some(f));
                rp.fanouts.len() - 1
            }
        };
        for (i, &d) in dests.iter().enumerate() {
            failpoints::before_transmission(i);
            let sub = self.new_req(std::ptr::null_mut(), 0, ReqState::Pending);
            self.reqs[sub].as_mut().expect("new request").parent = Some(fid);
            if let Some(f) = self.repl.as_mut().and_then(|rp| rp.fanouts[fid].as_mut()) {
                f.subs.push(sub);
            }
            let mut h = Header::new(FrameKind::Eager, mid, len as u64);
            if sync {
                h.flags |= p2pmpi_wire::frame::flags::SYNCHRONOUS;
            }
            let payload = match &data {
                _ if len == 0 => Payload::None,
                TxData::Raw(p, n) => Payload::Raw(*p, *n),
                TxData::Owned(v) => Payload::Owned(crate::pool::copy_of(v)),
            };
            let dead = self.repl.as_ref().is_some_and(|rp| rp.coord.is_dead(d));
            if !dead && self.repl.as_ref().is_some_and(|rp| rp.suspected[d]) {
                if let Some(rp) = self.repl.as_mut() {
                    rp.held[d].push(sub);
                }
                continue;
            }
            let cid = if dead { None } else { self.send_conn(d as i32).ok() };
            let cid = cid.filter(|_| self.repl.as_ref().is_some_and(|rp| !rp.suspected[d]));
            if let Some(cid) = cid {
                failpoints::partial_transmission(i, self.conns[cid].as_mut().map(|c| &mut c.stream), &h, &payload);
                let _ = self.push_out(cid, Out::with_completion(h, payload, sub));
                failpoints::written(self, cid);
            }
            // Not queued (its replica is dead or the write failed): it counts as done, unless
            // the replica became suspected meanwhile (then it waits for the verdict).
            let held = self.repl.as_ref().is_some_and(|rp| rp.held[d].contains(&sub));
            if !held
                && self.reqs[sub]
                    .as_ref()
                    .is_some_and(|r| r.parent == Some(fid) && matches!(r.state, ReqState::Pending))
                && !self.conns.iter().flatten().any(|c| c.has_completion(sub))
            {
                self.complete(sub, Ok(StatusInfo { source: d as i32, tag: mid.tag, len: 0, cancelled: false }));
            }
        }
        failpoints::after_transmissions();
        // The extra count taken above: the fan-out completes only once every transmission
        // was queued (a fast one must not commit before the others are even sent).
        self.fanout_step(fid);
    }

    /// Waits until every choice frame is written (or its replica is declared dead): what the
    /// master sends next may depend on those choices, and a replica that takes over must know
    /// them. Written at once unless a replica stopped reading for a long while.
    fn choice_barrier(&mut self) {
        while self.fatal.is_none() && self.repl.as_ref().is_some_and(|rp| !rp.choice_unwritten.is_empty()) {
            self.progress(None, Some(Duration::from_millis(1)));
            if crate::failure::PENDING.load(std::sync::atomic::Ordering::Relaxed) {
                for k in crate::failure::take_pending() {
                    self.peer_failed(k);
                }
            }
            if let Some(limit) = crate::failure::send_timeout() {
                self.check_stalled_sends(limit);
            }
        }
    }

    /// One transmission of fan-out `f` is done; after the last, the MID goes to the commits.
    fn fanout_step(&mut self, f: usize) {
        let Some(rp) = self.repl.as_mut() else { return };
        let Some(fo) = rp.fanouts[f].as_mut() else { return };
        if !fo.written {
            fo.pending -= 1;
            if fo.pending > 0 {
                return;
            }
            fo.written = true;
            rp.commits.push_back(fo.mid);
        }
        if fo.sync && !fo.acked {
            return;
        }
        let fo = rp.fanouts[f].take().expect("live fan-out");
        rp.free_fanouts.push(f);
        if let Some(u) = fo.user {
            let st = StatusInfo { source: fo.mid.dst as i32, tag: fo.mid.tag, len: 0, cancelled: false };
            self.complete(u, Ok(st));
        }
    }

    /// A destination replica matched synchronous message `mid`.
    fn sync_acked(&mut self, mid: Mid) {
        let Some(rp) = self.repl.as_mut() else { return };
        let Some(f) = rp.fanouts.iter().position(|f| f.as_ref().is_some_and(|f| f.sync && f.mid == mid && !f.acked))
        else {
            return;
        };
        let fo = rp.fanouts[f].as_mut().expect("found");
        fo.acked = true;
        if fo.written {
            let fo = rp.fanouts[f].take().expect("found");
            rp.free_fanouts.push(f);
            if let Some(u) = fo.user {
                let st = StatusInfo { source: mid.dst as i32, tag: mid.tag, len: 0, cancelled: false };
                self.complete(u, Ok(st));
            }
        }
    }

    /// A synchronous message was matched by a receive here: tell every alive replica of its
    /// sender (whichever is master now).
    fn ack_sync(&mut self, env: &Envelope) {
        let Some(rp) = self.repl.as_mut() else { return };
        rp.sync_unmatched.remove(&(env.comm, env.src, env.tag, env.seq));
        let mid = Mid { comm: env.comm, src: env.src as u32, dst: self.rank as u32, tag: env.tag, seq: env.seq };
        let to: Vec<usize> = rp.coord.alive_slots(env.src as usize).filter(|&s| !rp.suspected[s]).collect();
        for slot in to {
            self.deferred.push((slot as i32, Out::new(Header::new(FrameKind::ReadyToRecv, mid, 0), Payload::None)));
        }
    }

    /// A non-master's wildcard receives whose master's choice arrived are posted, exact; after
    /// a takeover, the ones still undecided are this master's to decide.
    fn resolve_choices(&mut self) {
        loop {
            let Some(rp) = self.repl.as_mut() else { return };
            let Some((&c, _)) = rp.deferred_recvs.first_key_value() else { return };
            let pat = rp.deferred_recvs[&c].1;
            let o = match rp.choices.take(c) {
                Some(o) => {
                    if rp.coord.is_master() {
                        rp.choice_out.push_back((pat.comm, c, o));
                    }
                    Some(o)
                }
                None if rp.coord.is_master() => None,
                // Points are followed in order: a later one waits for this one.
                None => return,
            };
            let (r, pat) = rp.deferred_recvs.remove(&c).expect("present");
            match o {
                Some(o) => self.post(r, exact(pat, o)),
                None => {
                    rp_choice_of(self, r, c, pat.comm);
                    self.post(r, pat);
                }
            }
        }
    }

    /// Sends the pending commits, and after a takeover transmits the backup table.
    fn flush_replication(&mut self) {
        self.resolve_choices();
        loop {
            let Some(rp) = self.repl.as_mut() else { return };
            if let Some((comm, c, o)) = rp.choice_out.pop_front() {
                // Before anything else: what follows may depend on the choice.
                let mid = match o {
                    Some((src, tag, _)) => Mid { comm, src: src as u32, dst: 0, tag, seq: c },
                    None => Mid { comm, src: 0, dst: 0, tag: 0, seq: c },
                };
                let mut h = Header::new(FrameKind::Choice, mid, o.map_or(0, |m| m.2));
                if o.is_none() {
                    h.flags |= p2pmpi_wire::frame::flags::NOTHING;
                }
                // In index order: the successor of a dying master is told first.
                let targets: Vec<usize> = rp.coord.commit_targets().into_iter().filter(|&t| !rp.suspected[t]).collect();
                for t in targets {
                    if let Ok(cid) = self.send_conn(t as i32) {
                        let req = self.new_req(std::ptr::null_mut(), 0, ReqState::Pending);
                        if let Some(rp) = self.repl.as_mut() {
                            rp.choice_unwritten.insert(req);
                        }
                        if self.push_out(cid, Out::with_completion(h, Payload::None, req)).is_err() {
                            self.complete(req, Ok(StatusInfo { source: t as i32, tag: 0, len: 0, cancelled: false }));
                        }
                    }
                }
                continue;
            }
            if let Some((mid, data)) = rp.resends.pop_front() {
                let dests = rp.coord.destinations(mid.dst as usize);
                match data {
                    Backup::Copy(v) => {
                        rp.backup_bytes -= v.len();
                        self.transmit(mid, TxData::Owned(v), dests, None, false)
                    }
                    // The lent send completes once this replica transmitted it.
                    Backup::Lent { ptr, len, req } => {
                        self.transmit(mid, TxData::Raw(ptr, len), dests, Some(req), false)
                    }
                }
                continue;
            }
            let Some(mid) = rp.commits.pop_front() else { return };
            let targets: Vec<usize> = rp.coord.commit_targets().into_iter().filter(|&t| !rp.suspected[t]).collect();
            for (i, t) in targets.into_iter().enumerate() {
                let h = Header::new(FrameKind::Commit, mid, 0);
                if let Ok(cid) = self.send_conn(t as i32) {
                    failpoints::partial_commit(i, self.conns[cid].as_mut().map(|c| &mut c.stream), &h);
                    let _ = self.push_out(cid, Out::new(h, Payload::None));
                    failpoints::written(self, cid);
                }
            }
            failpoints::after_commits();
        }
    }

    /// A replica was lost (its connection ended without `Bye`, the failure detector
    /// confirmed it, or a send to it stalled): algorithm 7.
    fn slot_failed(&mut self, slot: i32, cause: &str) {
        let Some(rp) = self.repl.as_mut() else {
            self.set_fatal(Error::PeerLost { rank: slot, cause: cause.to_string() });
            return;
        };
        if slot < 0 || slot as usize >= self.peers.len() || self.peers[slot as usize].bye {
            return;
        }
        let rec = rp.coord.on_failure(slot as usize);
        match rec {
            Recovery::Nothing => return,
            Recovery::Replica { .. } => {}
            Recovery::TookOver { resend } => {
                if debug_replication() {
                    eprintln!(
                        "p2pmpi: slot {}: took over as master of rank {}, resending {}",
                        self.slot,
                        self.rank,
                        resend.len()
                    );
                }
                // What the dead master committed lately first (its last writes may have died
                // in its kernel), then what it had not committed.
                let recent = std::mem::take(&mut rp.recent);
                rp.recent_bytes = 0;
                for (m, v) in recent {
                    rp.backup_bytes += v.len();
                    rp.resends.push_back((m, Backup::Copy(v)));
                }
                rp.resends.extend(resend.into_iter().map(|(m, d)| (mid_of(&m), d)));
            }
            Recovery::RankLost { rank } => {
                self.set_fatal(Error::PeerLost {
                    rank: rank as i32,
                    cause: format!("all replicas for that rank failed (the last one: {cause})"),
                });
            }
        }
        if debug_replication() {
            eprintln!("p2pmpi: slot {}: slot {slot} failed: {cause}", self.slot);
        }
        self.drop_peer(slot, false);
        let held = self.repl.as_mut().map(|rp| std::mem::take(&mut rp.held[slot as usize])).unwrap_or_default();
        for r in held {
            self.complete(r, Ok(StatusInfo { source: slot, tag: 0, len: 0, cancelled: false }));
        }
    }

    /// This process suspects `slot` (its connection broke, or a send to it stalled). Only the
    /// launcher declares deaths (fencing, [`p2pmpi_core::fencing`]): the suspicion is reported
    /// to it, and [`Self::slot_failed`] runs when it announces the death. Meanwhile nothing
    /// more goes to the slot or is read from it (the launcher declares every suspect dead, so
    /// nothing is lost for a live process).
    fn suspect_slot(&mut self, slot: i32, cause: &str) {
        let Some(rp) = self.repl.as_mut() else { return };
        if slot < 0 || slot as usize >= rp.suspected.len() || slot == self.slot {
            return;
        }
        let first = !std::mem::replace(&mut rp.suspected[slot as usize], true);
        if first && !rp.coord.is_dead(slot as usize) {
            if debug_replication() {
                eprintln!("p2pmpi: slot {}: suspects slot {slot}: {cause}", self.slot);
            }
            let l = rp.coord.layout();
            let detail =
                format!("rank {} replica {} failed: {cause}", l.rank_of(slot as usize), l.replica_of(slot as usize));
            crate::failure::suspect(self.slot as usize, slot as usize, &detail);
        }
        // A replica that said goodbye has everything it needs: nothing to wait for.
        let hold = !self.peers[slot as usize].bye;
        if !hold {
            let held = self.repl.as_mut().map(|rp| std::mem::take(&mut rp.held[slot as usize])).unwrap_or_default();
            for r in held {
                self.complete(r, Ok(StatusInfo { source: slot, tag: 0, len: 0, cancelled: false }));
            }
        }
        self.drop_peer(slot, hold);
    }

    /// Drops every connection with `slot`: nothing it might still send (a frozen process that
    /// wakes up) is read. Queued transmissions to it count as done, or with `hold` wait for
    /// the launcher's verdict.
    fn drop_peer(&mut self, slot: i32, hold: bool) {
        let p = &mut self.peers[slot as usize];
        p.send_conn = None;
        let cids = std::mem::take(&mut p.conns);
        let mut done = Vec::new();
        for cid in cids {
            if let Some(mut conn) = self.conns[cid].take() {
                let _ = self.poll.registry().deregister(&mut conn.stream);
                done.extend(conn.take_completions());
                self.undo_stream(&mut conn);
            }
        }
        self.deferred.retain(|(p, _)| *p != slot);
        if hold {
            if let Some(rp) = self.repl.as_mut() {
                // Choice frames to a suspect of this very rank are moot: it will be declared.
                let (choices, held): (Vec<ReqId>, Vec<ReqId>) =
                    done.into_iter().partition(|r| rp.choice_unwritten.contains(r));
                rp.held[slot as usize].extend(held);
                for r in choices {
                    self.complete(r, Ok(StatusInfo { source: slot, tag: 0, len: 0, cancelled: false }));
                }
                return;
            }
        }
        for r in done {
            self.complete(r, Ok(StatusInfo { source: slot, tag: 0, len: 0, cancelled: false }));
        }
    }

    /// Writes a connection's queue out, waiting as long as it takes (fault injection only).
    #[cfg(feature = "failpoints")]
    fn flush_blocking(&mut self, cid: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.conns[cid].as_ref().is_some_and(|c| !c.outq.is_empty()) && Instant::now() < deadline {
            self.flush_conn(cid);
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// A connection to a dead replica goes away in the middle of a message streaming into
    /// a receive: the receive waits again for the message, which the sender's successor
    /// will send.
    fn undo_stream(&mut self, conn: &mut Conn) {
        let Some((env, pat, pos)) = conn.stream_undo.take() else { return };
        let RState::Stream { req, .. } = conn.rstate else { return };
        conn.rstate = RState::Header;
        if debug_replication() {
            eprintln!("p2pmpi: slot {}: undoing the match of {env:?} (its sender died mid-message)", self.slot);
        }
        if self.matcher.unarrive(&env, pat, pos, req) {
            if let Some(t) = self.trace.as_mut() {
                if let Some(i) = t.iter().rposition(|m| (m.0, m.1, m.2, m.3) == (env.comm, env.src, env.tag, env.seq)) {
                    t.remove(i);
                }
            }
        } else {
            self.complete(
                req,
                Err(Error::PeerLost {
                    rank: env.src,
                    cause: "it died in the middle of a message whose successors were already received".into(),
                }),
            );
        }
    }

    /// Whether a non-master still waits for commits (it must not leave before its master
    /// committed what it keeps: it might have to take over).
    pub fn backup_pending(&self) -> bool {
        self.repl.as_ref().is_some_and(|rp| !rp.coord.is_master() && rp.coord.backup_len() > 0)
    }

    fn check_rank(&self, r: i32) -> Result<()> {
        if r < 0 || r >= self.size {
            return Err(Error::InvalidRank { rank: r, size: self.size });
        }
        Ok(())
    }

    /// Builds the full mesh at start-up: one connection per pair, initiated by the higher
    /// rank. Connecting both ways at once would give a pair two sockets, each carrying data
    /// one way only, so that every message costs a data segment plus a separate ACK instead of
    /// ACKs riding on replies (measured: +2–3 µs per message on loopback).
    pub fn connect_mesh(&mut self, limit: Duration) -> Result<()> {
        for r in 0..self.slot {
            if let Err(e) = self.send_conn(r) {
                if self.repl.is_none() {
                    return Err(e);
                }
                // A replica that died during start-up: the others go on without it.
                self.suspect_slot(r, &e.to_string());
            }
        }
        let deadline = Instant::now() + limit;
        loop {
            if let Some(e) = &self.fatal {
                return Err(e.clone());
            }
            let slots = self.peers.len() as i32;
            let dead =
                |r: i32| self.repl.as_ref().is_some_and(|rp| rp.coord.is_dead(r as usize) || rp.suspected[r as usize]);
            let missing = (self.slot + 1..slots).find(|&r| self.peers[r as usize].send_conn.is_none() && !dead(r));
            let Some(r) = missing else { return Ok(()) };
            if Instant::now() >= deadline {
                return Err(Error::PeerLost {
                    rank: self.rank_of(r),
                    cause: format!("it did not connect within {limit:?} of start-up"),
                });
            }
            self.progress(None, Some(Duration::from_millis(5)));
        }
    }

    /// The connection used to send to `dst`, connecting if there is none.
    fn send_conn(&mut self, dst: i32) -> Result<usize> {
        if let Some(c) = self.peers[dst as usize].send_conn {
            return Ok(c);
        }
        if self.repl.as_ref().is_some_and(|rp| rp.coord.is_dead(dst as usize) || rp.suspected[dst as usize]) {
            return Err(Error::PeerLost { rank: self.rank_of(dst), cause: format!("slot {dst} failed") });
        }
        let addr = self.addrs[dst as usize];
        let local = self.local_addr().map(|a| a.ip());
        let std_stream = connect_with_retry(local, addr, Duration::from_secs(10)).map_err(|e| Error::PeerLost {
            rank: self.rank_of(dst),
            cause: format!("cannot connect to {addr}: {e}"),
        })?;
        let mut stream = TcpStream::from_std(std_stream);
        let cid = self.conns.iter().position(Option::is_none).unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        self.poll.registry().register(&mut stream, Token(cid), Interest::READABLE)?;
        let mut c = Conn::new(stream, true);
        c.peer = Some(dst);
        if self.repl.is_some() {
            c.max_eager = REPLICATED_MAX_MESSAGE;
        }
        self.conns[cid] = Some(c);
        let p = &mut self.peers[dst as usize];
        p.conns.push(cid);
        p.send_conn = Some(cid);
        let hello =
            Header::new(FrameKind::Hello, Mid { comm: 0, src: self.slot as u32, dst: dst as u32, tag: 0, seq: 0 }, 8);
        self.push_out(cid, Out::new(hello, Payload::Owned(self.token.to_le_bytes().to_vec())))?;
        Ok(cid)
    }

    /// Queues a frame on a connection and writes as much as the socket takes now.
    fn push_out(&mut self, cid: usize, out: Out) -> Result<()> {
        if self.repl.is_some() {
            // Fencing: nothing leaves a replica that holds no valid lease.
            crate::bootstrap::fence::wait_lease();
        }
        let conn = self.conns[cid].as_mut().expect("live connection");
        let peer = conn.peer.unwrap_or(-1);
        let res = conn.push(out);
        let done = match res {
            Ok(done) => done,
            Err(e) => {
                self.conn_failed(cid, peer, e);
                return Err(self
                    .fatal
                    .clone()
                    .unwrap_or(Error::PeerLost { rank: peer, cause: "connection failed".into() }));
            }
        };
        for r in done {
            let st = StatusInfo { source: peer, tag: 0, len: 0, cancelled: false };
            self.complete(r, Ok(st));
        }
        self.update_interest(cid);
        Ok(())
    }

    fn flush_deferred(&mut self) {
        if self.repl.is_some() {
            self.flush_replication();
        }
        while !self.deferred.is_empty() {
            let batch = std::mem::take(&mut self.deferred);
            for (peer, out) in batch {
                if self.fatal.is_some() {
                    return;
                }
                if let Some(rp) = self.repl.as_ref() {
                    // Nothing more for a replica suspected or declared dead.
                    if rp.coord.is_dead(peer as usize) || rp.suspected[peer as usize] {
                        continue;
                    }
                }
                match self.send_conn(peer) {
                    Ok(cid) => {
                        let _ = self.push_out(cid, out);
                    }
                    Err(e) if self.repl.is_some() => self.suspect_slot(peer, &e.to_string()),
                    Err(e) => self.set_fatal(e),
                }
            }
        }
    }

    fn update_interest(&mut self, cid: usize) {
        let Some(conn) = self.conns[cid].as_mut() else { return };
        let want = !conn.outq.is_empty();
        if want != conn.want_write {
            conn.want_write = want;
            let i = if want { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
            let _ = self.poll.registry().reregister(&mut conn.stream, Token(cid), i);
        }
    }

    // ----------------------------------------------------------------- receiving

    /// Posts a receive into `cap` bytes at `ptr` (valid until the request completes).
    pub fn irecv(&mut self, pat: Pattern, ptr: *mut u8, cap: usize) -> Result<ReqId> {
        if let Some(s) = pat.src {
            self.check_rank(s)?;
        }
        let r = self.new_req(ptr, cap, ReqState::Pending);
        if let Some(rp) = self.repl.as_mut() {
            if pat.src.is_none() || pat.tag.is_none() {
                // A wildcard receive is a choice point: the master's match decides.
                let c = rp.choices.point();
                match rp.choices.take(c) {
                    // Decided already (by this replica's master, or by the master it took
                    // over from): followed, and relayed to this process's own replicas.
                    Some(o) => {
                        if rp.coord.is_master() {
                            rp.choice_out.push_back((pat.comm, c, o));
                        }
                        self.post(r, exact(pat, o));
                    }
                    None if rp.coord.is_master() => {
                        rp.choice_of.insert(r, (c, pat.comm));
                        self.post(r, pat);
                    }
                    None => {
                        rp.deferred_recvs.insert(c, (r, pat));
                    }
                }
                self.flush_deferred();
                return Ok(r);
            }
        }
        self.post(r, pat);
        Ok(r)
    }

    fn post(&mut self, r: ReqId, pat: Pattern) {
        if let Some((env, body)) = self.matcher.post(pat, r) {
            self.consume(r, env, body);
        }
    }

    /// Records the message a master's wildcard receive matched (its choice).
    fn note_match(&mut self, r: ReqId, env: &Envelope) {
        if let Some(rp) = self.repl.as_mut() {
            if rp.choice_of.contains_key(&r) {
                rp.matched.insert(r, (env.src, env.tag, env.seq));
            }
        }
    }

    /// A choice point of a probe (`immediate`: an immediate one): its number in a replicated
    /// job when its outcome may differ between replicas (a wildcard, or any immediate probe).
    pub fn probe_point(&mut self, pat: &Pattern, immediate: bool) -> Option<u64> {
        let rp = self.repl.as_mut()?;
        (immediate || pat.src.is_none() || pat.tag.is_none()).then(|| rp.choices.point())
    }

    /// The outcome of probe choice point `c` for this replica: `None` while it must wait (a
    /// non-master not told yet, or the chosen message not here yet; a blocking probe that
    /// found nothing), else what the probe returns. Without a choice point, a plain probe.
    pub fn probe_at(&mut self, c: Option<u64>, pat: Pattern, immediate: bool) -> Option<Option<Envelope>> {
        let Some(c) = c else {
            let found = self.probe(pat);
            return if immediate { Some(found) } else { found.map(Some) };
        };
        let rp = self.repl.as_mut().expect("choice points only with replicas");
        match rp.choices.knows(c) {
            Some(o) => {
                let found = match o {
                    None => None,
                    Some(_) => Some(self.probe(exact(pat, o))?),
                };
                let rp = self.repl.as_mut().expect("replicated");
                rp.choices.take(c);
                if rp.coord.is_master() {
                    rp.choice_out.push_back((pat.comm, c, o));
                    self.flush_deferred();
                }
                Some(found)
            }
            None if rp.coord.is_master() => {
                let found = self.probe(pat);
                if found.is_none() && !immediate {
                    return None;
                }
                let o = found.map(|e| (e.src, e.tag, e.seq));
                self.repl.as_mut().expect("replicated").choice_out.push_back((pat.comm, c, o));
                self.flush_deferred();
                Some(found)
            }
            None => None,
        }
    }

    /// A choice point of a test or a wait on several requests, in a replicated job (which of
    /// them completed depends on timing, which differs between replicas).
    pub fn completion_point(&mut self) -> Option<u64> {
        Some(self.repl.as_mut()?.choices.point())
    }

    /// Which of `ids` (`None`: an inactive slot) count as complete at choice point `c`:
    /// `None` while this replica must wait (its master's outcome not known yet, or a request
    /// the master saw complete not complete here yet; with `block`, nothing complete yet).
    /// Without a choice point, the requests complete now. At most 64 indices from the first
    /// are reported at once.
    pub fn completed_at(&mut self, c: Option<u64>, ids: &[Option<ReqId>], block: bool) -> Option<Vec<usize>> {
        let done_now = |e: &Engine| -> Vec<usize> {
            ids.iter().enumerate().filter_map(|(i, id)| id.filter(|&id| e.is_done(id)).map(|_| i)).collect()
        };
        let Some(c) = c else {
            let d = done_now(self);
            return (!(block && d.is_empty())).then_some(d);
        };
        let rp = self.repl.as_mut().expect("choice points only with replicas");
        let comm = u32::MAX;
        match rp.choices.knows(c) {
            Some(o) => {
                let want = indices_of(o);
                if !want.iter().all(|&i| ids.get(i).copied().flatten().is_some_and(|id| self.is_done(id))) {
                    return None;
                }
                let rp = self.repl.as_mut().expect("replicated");
                rp.choices.take(c);
                if rp.coord.is_master() {
                    rp.choice_out.push_back((comm, c, o));
                    self.flush_deferred();
                }
                Some(want)
            }
            None if rp.coord.is_master() => {
                let d = done_now(self);
                if block && d.is_empty() {
                    return None;
                }
                let o = outcome_of(&d);
                self.repl.as_mut().expect("replicated").choice_out.push_back((comm, c, o));
                self.flush_deferred();
                Some(indices_of(o))
            }
            None => None,
        }
    }

    /// Like [`Self::probe_at`], taking the message out (matched probes).
    pub fn mprobe_at(&mut self, c: Option<u64>, pat: Pattern, immediate: bool) -> Option<Option<Matched>> {
        if c.is_none() {
            let m = self.mprobe(pat);
            return if immediate { Some(m) } else { m.map(Some) };
        }
        let env = self.probe_at(c, pat, immediate)?;
        Some(env.map(|e| {
            let exact = Pattern { comm: e.comm, src: Some(e.src), tag: Some(e.tag) };
            self.mprobe(exact).expect("the probed message is queued")
        }))
    }

    fn consume(&mut self, r: ReqId, env: Envelope, body: Body<Vec<u8>>) {
        match body {
            Body::Eager(data) => {
                if self
                    .repl
                    .as_ref()
                    .is_some_and(|rp| rp.sync_unmatched.contains(&(env.comm, env.src, env.tag, env.seq)))
                {
                    self.ack_sync(&env);
                    self.flush_deferred();
                }
                self.fill(r, &env, &data);
                crate::pool::give(data);
            }
            Body::Rendezvous => {
                self.start_rndv_recv(r, &env);
                self.flush_deferred();
            }
        }
    }

    /// The earliest queued message matching `pat` (MPI_Iprobe).
    pub fn probe(&self, pat: Pattern) -> Option<Envelope> {
        self.matcher.probe(pat).copied()
    }

    /// Removes the earliest queued message matching `pat` (MPI_Improbe).
    pub fn mprobe(&mut self, pat: Pattern) -> Option<Matched> {
        self.matcher.take(pat).map(|(env, body)| Matched { env, body })
    }

    /// Receives a message taken by [`Self::mprobe`].
    pub fn mrecv(&mut self, m: Matched, ptr: *mut u8, cap: usize) -> ReqId {
        let r = self.new_req(ptr, cap, ReqState::Pending);
        self.consume(r, m.env, m.body);
        r
    }

    // ----------------------------------------------------------------- progress

    /// Makes progress: reads and writes what the sockets allow. With `timeout` `None` it
    /// never sleeps; `hint` names the peer a caller waits for, whose sockets are read
    /// directly before asking the kernel which others are ready.
    pub fn progress(&mut self, hint: Option<i32>, timeout: Option<Duration>) {
        self.tick = self.tick.wrapping_add(1);
        if timeout.is_none() {
            if let Some(h) = hint.filter(|h| *h != self.rank && *h >= 0 && *h < self.size) {
                let mut got = false;
                let slots = match &self.layout {
                    Some(l) => l.slots_of(h as usize),
                    None => h as usize..h as usize + 1,
                };
                for slot in slots {
                    let mut i = 0;
                    while let Some(&cid) = self.peers[slot].conns.get(i) {
                        got |= self.read_conn(cid);
                        i += 1;
                    }
                }
                self.flush_deferred();
                if got || self.tick % 64 != 0 {
                    return;
                }
            }
        }
        let t = timeout.unwrap_or(Duration::ZERO);
        if let Err(e) = self.poll.poll(&mut self.events, Some(t)) {
            if e.kind() != io::ErrorKind::Interrupted {
                self.set_fatal(e.into());
            }
            return;
        }
        let mut ready = std::mem::take(&mut self.ready);
        ready.clear();
        ready.extend(
            self.events
                .iter()
                .map(|ev| (ev.token(), ev.is_readable() || ev.is_read_closed() || ev.is_error(), ev.is_writable())),
        );
        for &(tok, readable, writable) in &ready {
            if tok == LISTENER {
                self.accept_all();
                continue;
            }
            let cid = tok.0;
            if writable {
                self.flush_conn(cid);
            }
            if readable {
                self.read_conn(cid);
            }
        }
        self.ready = ready;
        self.flush_deferred();
    }

    fn accept_all(&mut self) {
        loop {
            let Some(l) = self.listener.as_ref() else { return };
            match l.accept() {
                Ok((mut stream, _addr)) => {
                    let _ = stream.set_nodelay(true);
                    let cid = self.conns.iter().position(Option::is_none).unwrap_or_else(|| {
                        self.conns.push(None);
                        self.conns.len() - 1
                    });
                    if self.poll.registry().register(&mut stream, Token(cid), Interest::READABLE).is_ok() {
                        let mut c = Conn::new(stream, false);
                        if self.repl.is_some() {
                            c.max_eager = REPLICATED_MAX_MESSAGE;
                        }
                        self.conns[cid] = Some(c);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log_warn(self.rank, &format!("accept failed: {e}"));
                    return;
                }
            }
        }
    }

    fn flush_conn(&mut self, cid: usize) {
        if self.repl.is_some() {
            crate::bootstrap::fence::wait_lease();
        }
        let Some(conn) = self.conns[cid].as_mut() else { return };
        let peer = conn.peer.unwrap_or(-1);
        match conn.flush() {
            Ok(done) => {
                for r in done {
                    let st = StatusInfo { source: peer, tag: 0, len: 0, cancelled: false };
                    self.complete(r, Ok(st));
                }
                self.update_interest(cid);
            }
            Err(e) => self.conn_failed(cid, peer, e),
        }
    }

    /// Reads everything available on a connection and handles the frames. Returns whether
    /// any byte was read.
    fn read_conn(&mut self, cid: usize) -> bool {
        if self.conns.get(cid).and_then(Option::as_ref).is_none_or(|c| c.read_eof) {
            return false;
        }
        let Some(mut conn) = self.conns.get_mut(cid).and_then(Option::take) else { return false };
        let mut got = false;
        let outcome = loop {
            // Streaming rendez-vous data straight into the receive buffer.
            if let RState::Stream { req, ptr, left, discard } = conn.rstate {
                let mut left = left;
                let res = conn.fill_stream(ptr, &mut left, discard);
                if let RState::Stream { left: l, .. } = &mut conn.rstate {
                    *l = left;
                }
                match res {
                    Ok(n) => {
                        got |= n > 0;
                        if left == 0 {
                            conn.rstate = RState::Header;
                            conn.stream_undo = None;
                            if let Some((env, data)) = conn.stream_unexpected.take() {
                                conn.stream_status = None;
                                if std::mem::take(&mut conn.arrive_when_complete) {
                                    let ptr = data.as_ptr();
                                    let view = unsafe { std::slice::from_raw_parts(ptr, data.len()) };
                                    let sync = std::mem::take(&mut conn.stream_sync);
                                    self.accept_eager(env, view, Some(data), sync);
                                } else if let Some((r, Body::Eager(data))) =
                                    self.matcher.deliver_late(env, Body::Eager(data))
                                {
                                    self.fill(r, &env, &data);
                                    crate::pool::give(data);
                                }
                            } else if !discard {
                                if let Some(st) = conn.stream_status.take() {
                                    self.complete(req, Ok(st));
                                }
                            }
                            continue;
                        }
                        if n == 0 {
                            break Ok(());
                        }
                        continue;
                    }
                    Err(e) => break Err(e),
                }
            }
            // Whole frames already buffered.
            match conn.next_frame() {
                Ok(Some((h, payload_range))) => {
                    got = true;
                    if let Err(e) = self.handle_frame(cid, &mut conn, h, payload_range) {
                        break Err(e);
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => break Err(ConnError::Protocol(e.to_string())),
            }
            match conn.fill() {
                Ok(0) => break Ok(()),
                Ok(_) => got = true,
                Err(e) => break Err(e),
            }
        };
        let peer = conn.peer;
        self.conns[cid] = Some(conn);
        if let Err(e) = outcome {
            self.conn_failed(cid, peer.unwrap_or(-1), e);
        }
        got
    }

    fn handle_frame(
        &mut self,
        cid: usize,
        conn: &mut Conn,
        h: Header,
        payload: std::ops::Range<usize>,
    ) -> std::result::Result<(), ConnError> {
        let Some(peer) = conn.peer else {
            // The first frame must be a valid Hello.
            if h.kind != FrameKind::Hello {
                return Err(ConnError::Protocol(format!("expected Hello, got {:?}", h.kind)));
            }
            let r = h.mid.src as i32;
            let tok = conn.rbuf.get(payload.clone()).filter(|p| p.len() == 8);
            let ok_tok = tok.map(|t| u64::from_le_bytes(t.try_into().unwrap()) == self.token).unwrap_or(false);
            if !ok_tok {
                return Err(ConnError::Protocol("bad job token in Hello".into()));
            }
            if r < 0 || r as usize >= self.peers.len() || r == self.slot || h.mid.dst as i32 != self.slot {
                return Err(ConnError::Protocol(format!("Hello from invalid rank {r}")));
            }
            if self.repl.as_ref().is_some_and(|rp| rp.coord.is_dead(r as usize) || rp.suspected[r as usize]) {
                return Err(ConnError::Protocol(format!("Hello from slot {r}, which failed")));
            }
            conn.peer = Some(r);
            let p = &mut self.peers[r as usize];
            p.conns.push(cid);
            if p.send_conn.is_none() {
                p.send_conn = Some(cid);
            }
            return Ok(());
        };
        let proto = |d: String| ConnError::Protocol(d);
        let mid = h.mid;
        // `peer` is a slot; messages name ranks.
        let slot = peer;
        let peer = self.rank_of(slot);
        let from_peer = mid.src as i32 == peer && mid.dst as i32 == self.rank;
        match h.kind {
            FrameKind::Hello => return Err(proto("second Hello".into())),
            FrameKind::Bye => {
                self.peers[slot as usize].bye = true;
            }
            FrameKind::Commit => {
                let Some(rp) = self.repl.as_mut() else { return Err(proto("commit in a job without replicas".into())) };
                if rp.coord.is_dead(slot as usize) {
                    // Fencing: a declared-dead replica's commit counts for nothing.
                    return Ok(());
                }
                let mut lent_done: Vec<ReqId> = Vec::new();
                let mut freed = 0;
                let mut kept: Vec<(Mid, Vec<u8>)> = Vec::new();
                let ok = rp.coord.on_commit(slot as usize, msg_id(&mid), |m, b| match b {
                    Backup::Copy(v) => {
                        freed += v.len();
                        kept.push((mid_of(&m), v));
                    }
                    Backup::Lent { req, .. } => lent_done.push(req),
                });
                rp.backup_bytes -= freed;
                for (m, v) in kept {
                    rp.recent_bytes += v.len();
                    rp.recent.push_back((m, v));
                }
                while rp.recent_bytes > RECENT_WINDOW || rp.recent.len() > RECENT_MAX {
                    let Some((_, v)) = rp.recent.pop_front() else { break };
                    rp.recent_bytes -= v.len();
                    crate::pool::give(v);
                }
                if !ok {
                    return Err(proto(format!("commit of {mid:?} from slot {slot}, not a replica of this rank")));
                }
                for r in lent_done {
                    let st = StatusInfo { source: mid.dst as i32, tag: mid.tag, len: 0, cancelled: false };
                    self.complete(r, Ok(st));
                }
            }
            FrameKind::Choice => {
                let Some(rp) = self.repl.as_mut() else { return Err(proto("choice in a job without replicas".into())) };
                if rp.coord.is_dead(slot as usize) {
                    return Ok(());
                }
                if rp.coord.layout().rank_of(slot as usize) != rp.coord.rank() {
                    return Err(proto(format!("choice from slot {slot}, not a replica of this rank")));
                }
                let o = (h.flags & p2pmpi_wire::frame::flags::NOTHING == 0).then_some((mid.src as i32, mid.tag, h.len));
                rp.choices.learn(mid.seq, o);
            }
            FrameKind::Eager if self.repl.is_some() && conn::is_streamed(&h) => {
                let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
                let st = StatusInfo { source: peer, tag: mid.tag, len: h.len, cancelled: false };
                // Its turn, and a receive waits for it: straight into the receive's buffer,
                // undone if the sender dies half-way (a replica sends it again).
                if let Some((r, pat, pos)) = self.matcher.arrive_if_matched(&env) {
                    self.traced(&env);
                    self.note_match(r, &env);
                    if h.flags & p2pmpi_wire::frame::flags::SYNCHRONOUS != 0 {
                        self.ack_sync(&env);
                    }
                    self.begin_stream(conn, r, st);
                    if let RState::Stream { discard: false, .. } = conn.rstate {
                        conn.stream_undo = Some((env, pat, pos));
                    }
                    return Ok(());
                }
                // Otherwise kept whole before it is matched: a sender dying mid-message
                // leaves no trace.
                let mut data = crate::pool::zeroed(h.len as usize);
                let ptr = data.as_mut_ptr();
                conn.stream_unexpected = Some((env, data));
                conn.stream_status = Some(StatusInfo { source: peer, tag: mid.tag, len: h.len, cancelled: false });
                conn.arrive_when_complete = true;
                conn.stream_sync = h.flags & p2pmpi_wire::frame::flags::SYNCHRONOUS != 0;
                conn.rstate = RState::Stream { req: usize::MAX, ptr, left: h.len as usize, discard: false };
            }
            FrameKind::Eager | FrameKind::ReadyToSend if !from_peer => {
                return Err(proto(format!("{:?} frame with MID {mid:?} on rank {peer}'s connection", h.kind)))
            }
            FrameKind::Eager if conn::is_streamed(&h) => {
                let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
                let st = StatusInfo { source: peer, tag: mid.tag, len: h.len, cancelled: false };
                match self.matcher.arrive(&env) {
                    Arrival::Matched(r) => {
                        self.traced(&env);
                        self.begin_stream(conn, r, st)
                    }
                    Arrival::Early => return Err(proto(format!("message {mid:?} out of order"))),
                    Arrival::Unmatched => {
                        self.traced(&env);
                        let mut data = crate::pool::zeroed(h.len as usize);
                        let ptr = data.as_mut_ptr();
                        conn.stream_unexpected = Some((env, data));
                        conn.stream_status = Some(st);
                        conn.rstate = RState::Stream { req: usize::MAX, ptr, left: h.len as usize, discard: false };
                    }
                    Arrival::Duplicate => {
                        conn.stream_status = Some(st);
                        conn.rstate = RState::Stream {
                            req: usize::MAX,
                            ptr: std::ptr::null_mut(),
                            left: h.len as usize,
                            discard: true,
                        };
                    }
                }
            }
            FrameKind::Eager if self.repl.is_some() => {
                let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
                let sync = h.flags & p2pmpi_wire::frame::flags::SYNCHRONOUS != 0;
                self.accept_eager(env, &conn.rbuf[payload], None, sync);
            }
            FrameKind::Eager => {
                let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
                match self.matcher.arrive(&env) {
                    Arrival::Matched(r) => {
                        self.traced(&env);
                        self.fill(r, &env, &conn.rbuf[payload])
                    }
                    Arrival::Unmatched => {
                        self.traced(&env);
                        self.matcher.enqueue(env, Body::Eager(conn.rbuf[payload].to_vec()))
                    }
                    Arrival::Duplicate => {}
                    Arrival::Early => return Err(proto(format!("message {mid:?} out of order"))),
                }
            }
            FrameKind::ReadyToSend => {
                let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
                match self.matcher.arrive(&env) {
                    Arrival::Matched(r) => {
                        self.traced(&env);
                        self.start_rndv_recv(r, &env)
                    }
                    Arrival::Unmatched => {
                        self.traced(&env);
                        self.matcher.enqueue(env, Body::Rendezvous)
                    }
                    Arrival::Duplicate => {}
                    Arrival::Early => return Err(proto(format!("message {mid:?} out of order"))),
                }
            }
            FrameKind::ReadyToRecv if self.repl.is_some() => {
                // Replicated jobs send everything eager: this acknowledges a synchronous send.
                if mid.src as i32 == self.rank && mid.dst as i32 == peer {
                    self.sync_acked(mid);
                }
            }
            FrameKind::ReadyToRecv => {
                if mid.src as i32 != self.rank || mid.dst as i32 != peer {
                    return Err(proto(format!("READY_TO_RECV for MID {mid:?} from rank {peer}")));
                }
                let Some(s) = self.rndv_send.remove(&mid) else {
                    return Err(proto(format!("READY_TO_RECV for unknown MID {mid:?}")));
                };
                let data = Header::new(FrameKind::Data, mid, s.len as u64);
                let payload = if s.len == 0 { Payload::None } else { Payload::Raw(s.ptr, s.len) };
                self.deferred.push((peer, Out::with_completion(data, payload, s.req)));
            }
            FrameKind::Data => {
                if !from_peer {
                    return Err(proto(format!("data frame with MID {mid:?} from rank {peer}")));
                }
                let Some(r) = self.rndv_recv.remove(&mid) else {
                    return Err(proto(format!("data for unknown MID {mid:?}")));
                };
                let st = StatusInfo { source: peer, tag: mid.tag, len: h.len, cancelled: false };
                self.begin_stream(conn, r, st);
            }
        }
        Ok(())
    }

    /// Streams the payload announced by a header into receive `r`'s buffer (or drops it,
    /// failing the receive, if it does not fit).
    fn begin_stream(&mut self, conn: &mut Conn, r: ReqId, st: StatusInfo) {
        let (ptr, cap) = {
            let q = self.reqs[r].as_ref().expect("live request");
            (q.ptr, q.cap)
        };
        let len = st.len as usize;
        let discard = len > cap;
        if discard {
            let e = Error::Truncated { from_rank: st.source, tag: st.tag, message_bytes: st.len, buffer_bytes: cap };
            self.complete(r, Err(e));
        }
        conn.stream_status = Some(st);
        conn.rstate = RState::Stream { req: r, ptr, left: len, discard };
        if len == 0 && !discard {
            conn.rstate = RState::Header;
            self.complete(r, Ok(st));
        }
    }

    fn conn_failed(&mut self, cid: usize, peer: i32, e: ConnError) {
        if peer >= 0 && matches!(e, ConnError::Closed) && self.peers[peer as usize].bye {
            // The peer finalized: its side is closed, ours stays open until we finalize too.
            if let Some(c) = self.conns[cid].as_mut() {
                c.read_eof = true;
            }
            return;
        }
        let Some(mut conn) = self.conns[cid].take() else { return };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        if peer >= 0 {
            let p = &mut self.peers[peer as usize];
            p.conns.retain(|c| *c != cid);
            if p.send_conn == Some(cid) {
                p.send_conn = None;
            }
            let clean = p.bye && matches!(e, ConnError::Closed);
            if !clean {
                let cause = match e {
                    ConnError::Closed => "connection closed before it finalized (process died?)".to_string(),
                    ConnError::Io(e) => format!("connection failed: {e}"),
                    ConnError::Protocol(d) => format!("protocol violation: {d}"),
                };
                if self.repl.is_some() {
                    // A replica is gone: the others go on (algorithm 7).
                    self.undo_stream(&mut conn);
                    let done = conn.take_completions();
                    let mut choices = Vec::new();
                    if let Some(rp) = self.repl.as_mut() {
                        let (c, held): (Vec<ReqId>, Vec<ReqId>) =
                            done.into_iter().partition(|r| rp.choice_unwritten.contains(r));
                        rp.held[peer as usize].extend(held);
                        choices = c;
                    }
                    for r in choices {
                        self.complete(r, Ok(StatusInfo { source: peer, tag: 0, len: 0, cancelled: false }));
                    }
                    self.suspect_slot(peer, &cause);
                    return;
                }
                self.set_fatal(Error::PeerLost { rank: peer, cause });
            }
        } else if let ConnError::Protocol(d) = e {
            log_warn(self.rank, &format!("dropped a connection from {}: {d}", conn.peer_addr()));
        }
    }

    /// The failure detector confirmed that `rank` failed and the program handles failures:
    /// communication ends with an error naming it.
    pub(crate) fn peer_failed(&mut self, rank: i32) {
        if self.repl.is_some() {
            // `rank` is a slot: one replica.
            self.slot_failed(rank, "declared dead by the launcher");
            return;
        }
        self.set_fatal(Error::PeerLost { rank, cause: "declared failed by the failure detector".into() });
    }

    /// Gives up when a send has made no progress for `limit` (2·T_cleanup, FM §5.3): the
    /// destination takes no data, although the failure detector may still hear of it (a
    /// firewall that lets only some addresses through).
    pub(crate) fn check_stalled_sends(&mut self, limit: Duration) {
        if let Some(rp) = self.repl.as_mut() {
            // A message kept for 2·T_cleanup waiting for an earlier one of its channel: that
            // one was lost with its sender (see the README's known limits). Say so, no hang.
            if rp.early.is_empty() {
                rp.early_since = None;
            } else if rp.early_since.get_or_insert_with(Instant::now).elapsed() > limit {
                let (&(comm, src, tag), q) = rp.early.iter().next().expect("not empty");
                let first = q.keys().next().copied().unwrap_or(0);
                let next = self.matcher.next_expected(comm, src, tag);
                self.set_fatal(Error::PeerLost {
                    rank: src,
                    cause: format!(
                        "message {next} of its channel (communicator {comm}, tag {tag}) was lost with a dead \
                         replica; message {first} waited {:.1} s for it",
                        limit.as_secs_f64()
                    ),
                });
                return;
            }
        }
        let stalled = self.conns.iter().flatten().find_map(|c| {
            let since = c.stalled_since?;
            (since.elapsed() > limit).then_some((c.peer.unwrap_or(-1), since.elapsed()))
        });
        if let Some((peer, for_)) = stalled {
            if self.repl.is_some() {
                let cause = format!("a send to it made no progress for {:.1} s (2·T_cleanup)", for_.as_secs_f64());
                self.suspect_slot(peer, &cause);
                return;
            }
            self.set_fatal(Error::PeerLost {
                rank: peer,
                cause: format!(
                    "a send to it made no progress for {:.1} s (2·T_cleanup); giving up",
                    for_.as_secs_f64()
                ),
            });
        }
    }

    fn set_fatal(&mut self, e: Error) {
        if self.fatal.is_none() {
            self.fatal = Some(e);
        }
    }

    // ----------------------------------------------------------------- finalization

    /// Whether every queued frame has been written.
    pub fn all_sent(&self) -> bool {
        let repl_idle = self
            .repl
            .as_ref()
            .is_none_or(|rp| rp.commits.is_empty() && rp.resends.is_empty() && rp.fanouts.iter().all(Option::is_none));
        repl_idle
            && self.rndv_send.is_empty()
            && self.deferred.is_empty()
            && self.conns.iter().flatten().all(|c| c.outq.is_empty())
    }

    /// Says `Bye` on every connection to a peer and shuts down the sending side.
    pub fn send_byes(&mut self) {
        for r in 0..self.peers.len() as i32 {
            if r == self.slot || self.peers[r as usize].conns.is_empty() {
                continue;
            }
            let conns = self.peers[r as usize].conns.clone();
            for cid in conns {
                let h = Header::new(
                    FrameKind::Bye,
                    Mid { comm: 0, src: self.rank_of(self.slot) as u32, dst: self.rank_of(r) as u32, tag: 0, seq: 0 },
                    0,
                );
                let _ = self.push_out(cid, Out::new(h, Payload::None));
                if let Some(c) = self.conns[cid].as_mut() {
                    c.shutdown_after_flush = true;
                    if c.outq.is_empty() {
                        let _ = c.stream.shutdown(std::net::Shutdown::Write);
                    }
                }
            }
        }
    }

    /// Whether every peer connection has been closed by the other side after its `Bye`.
    pub fn all_closed(&self) -> bool {
        self.peers
            .iter()
            .flat_map(|p| p.conns.iter())
            .all(|&cid| self.conns[cid].as_ref().is_none_or(|c| c.read_eof && c.outq.is_empty()))
    }
}

/// Why a connection ended.
#[derive(Debug)]
pub(crate) enum ConnError {
    Closed,
    Io(io::Error),
    Protocol(String),
}

/// Connects to `addr` from `local` (this process's own address, so that the peer, its
/// firewall and HOST_DENY see the host it really comes from — on loopback an unbound socket
/// would leave from 127.0.0.1), retrying until `total` has passed.
fn connect_with_retry(local: Option<IpAddr>, addr: SocketAddr, total: Duration) -> io::Result<std::net::TcpStream> {
    let deadline = Instant::now() + total;
    let mut pause = Duration::from_millis(5);
    let connect = || -> io::Result<std::net::TcpStream> {
        // 127.0.0.1 is where an unbound loopback socket leaves from anyway (local runs).
        let own =
            |ip: &IpAddr| !ip.is_unspecified() && *ip != IpAddr::from([127, 0, 0, 1]) && ip.is_ipv4() == addr.is_ipv4();
        let Some(ip) = local.filter(own) else {
            return std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5));
        };
        let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
        sock.bind(&SocketAddr::new(ip, 0).into())?;
        sock.connect_timeout(&addr.into(), Duration::from_secs(5))?;
        Ok(sock.into())
    };
    loop {
        match connect() {
            Ok(s) => {
                s.set_nodelay(true)?;
                s.set_nonblocking(true)?;
                return Ok(s);
            }
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(200));
            }
        }
    }
}

/// `P2PMPI_REPL_DEBUG` set: replication events (failures, takeovers) are printed.
fn debug_replication() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("P2PMPI_REPL_DEBUG").is_some())
}

/// Deterministic fault injection for the tests of the replication protocol: a master dies
/// at a chosen point of a send (thesis figure 4.8). Compiled in with the `failpoints` feature
/// only; the points are armed per process from `P2PMPI_FAILPOINTS_SLOT<k>` (see
/// `crate::environment`). Without the feature every function is empty.
pub(crate) mod failpoints {
    use super::{Engine, Payload};
    use mio::net::TcpStream;
    use p2pmpi_wire::Header;

    #[cfg(feature = "failpoints")]
    fn die(window: &str) -> ! {
        eprintln!("p2pmpi: failpoint {window}: this process dies now");
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        std::process::abort()
    }

    /// Whether any point is armed in this process (set by `environment`).
    #[cfg(feature = "failpoints")]
    pub(crate) static ARMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    #[cfg(feature = "failpoints")]
    fn armed() -> bool {
        ARMED.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[cfg(feature = "failpoints")]
    fn hit(name: &str) -> bool {
        armed() && fail::eval(name, |_| ()).is_some()
    }

    /// Writes half of a frame, blocking, then dies.
    #[cfg(feature = "failpoints")]
    fn half_and_die(window: &str, stream: Option<&mut TcpStream>, h: &Header, payload: &[u8]) -> ! {
        use std::io::Write;
        let mut bytes = h.encode().to_vec();
        bytes.extend_from_slice(payload);
        let half = bytes.len() / 2;
        if let Some(s) = stream {
            let mut off = 0;
            while off < half {
                match s.write(&bytes[off..half]) {
                    Ok(n) => off += n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(std::time::Duration::from_millis(1))
                    }
                    Err(_) => break,
                }
            }
        }
        die(window)
    }

    /// Δ1 (before the first transmission) and Δ3 (between the first and the second).
    #[allow(unused_variables)]
    pub(super) fn before_transmission(i: usize) {
        #[cfg(feature = "failpoints")]
        {
            let name = match i {
                0 => "delta1",
                1 => "delta3",
                _ => return,
            };
            if hit(name) {
                die(name)
            }
        }
    }

    /// Δ2 and Δ4: part of the first (second) transmission written.
    #[allow(unused_variables)]
    pub(super) fn partial_transmission(i: usize, stream: Option<&mut TcpStream>, h: &Header, payload: &Payload) {
        #[cfg(feature = "failpoints")]
        {
            let name = match i {
                0 => "delta2",
                1 => "delta4",
                _ => return,
            };
            if hit(name) {
                half_and_die(name, stream, h, payload.bytes())
            }
        }
    }

    /// Δ5: every transmission written, no commit sent.
    pub(super) fn after_transmissions() {
        #[cfg(feature = "failpoints")]
        if hit("delta5") {
            die("delta5")
        }
    }

    /// Δ6 (part of the first commit written) and Δ7 (between the first and second commit).
    #[allow(unused_variables)]
    pub(super) fn partial_commit(i: usize, stream: Option<&mut TcpStream>, h: &Header) {
        #[cfg(feature = "failpoints")]
        {
            if i == 0 && hit("delta6") {
                half_and_die("delta6", stream, h, &[])
            }
            if i == 1 && hit("delta7") {
                die("delta7")
            }
        }
    }

    /// After every commit.
    pub(super) fn after_commits() {
        #[cfg(feature = "failpoints")]
        if hit("after_commit") {
            die("after_commit")
        }
    }

    /// With failpoints, every frame of the protocol is written out before the next step, so
    /// that a window is exactly what it says.
    #[allow(unused_variables)]
    pub(super) fn written(e: &mut Engine, cid: usize) {
        #[cfg(feature = "failpoints")]
        if armed() {
            e.flush_blocking(cid);
        }
    }
}

/// Writes a warning on standard error (the daemons' log later).
pub(crate) fn log_warn(rank: i32, msg: &str) {
    eprintln!("p2pmpi: rank {rank}: warning: {msg}");
}

/// `pat` narrowed to the message a master chose (`None`: nothing chosen — unchanged).
fn exact(pat: Pattern, o: Outcome) -> Pattern {
    match o {
        Some((src, tag, _)) => Pattern { comm: pat.comm, src: Some(src), tag: Some(tag) },
        None => pat,
    }
}

/// Registers a receive the master now decides (after a takeover).
fn rp_choice_of(e: &mut Engine, r: ReqId, c: u64, comm: u32) {
    if let Some(rp) = e.repl.as_mut() {
        rp.choice_of.insert(r, (c, comm));
    }
}

/// A set of request indices as a choice's outcome: the first, how many, and a mask of the
/// (at most 64) indices from the first. `None`: the empty set.
fn outcome_of(done: &[usize]) -> Outcome {
    let first = *done.first()?;
    let mask = done.iter().filter(|&&i| i - first < 64).fold(0u64, |m, &i| m | 1 << (i - first));
    Some((first as i32, mask.count_ones() as i32, mask))
}

/// The indices an outcome of [`outcome_of`] names.
fn indices_of(o: Outcome) -> Vec<usize> {
    let Some((first, _, mask)) = o else { return Vec::new() };
    let first = first.max(0) as usize;
    (0..64).filter(|k| mask & (1 << k) != 0).map(|k| first + k).collect()
}
