//! The TCP device: persistent connections between process pairs and the progress engine.
//!
//! # Design
//!
//! * **One listening port per process** (the seeds' *single-port* device, firewall-friendly),
//!   with **persistent** connections: the mesh is built when the job starts
//!   (`Engine::connect_mesh`: every pair gets exactly one connection, opened by the higher
//!   slot, used both ways); processes that join later (a spawned job's) connect to those they
//!   talk to. Every connection opens with a challenge-response on the job's key
//!   ([`p2pmpi_wire::auth`]): the connector's `Hello` (its slot, a nonce), the acceptor's
//!   `Challenge` (its nonce and proof), the connector's `Auth` (its proof). The key itself is
//!   never sent. A connection that fails the check, or sends anything else before it, is
//!   closed and logged (at a bounded rate) and the process keeps serving; an accepted
//!   connection has [`HANDSHAKE_LIMIT`] to prove the key, and beyond [`MAX_PENDING`] waiting
//!   ones the oldest are dropped. Frames after the opening are not authenticated one by one,
//!   so the data path costs what it did — unless the job runs with `--encrypt`: then every
//!   byte after the opening travels in sealed records (see `conn::Sec`).
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
//! * **Same host**: a pair of processes on one host sends its frames through shared-memory
//!   rings instead of the socket once the opening is done (see [`shm`] and docs/shm.md);
//!   the socket stays as the pair's liveness channel and doorbell.
//! * The matching rules live in the pure [`p2pmpi_core::matching::Matcher`]; this module only
//!   moves bytes and bookkeeping.

mod conn;
pub use conn::EAGER_LIMIT;
pub(crate) use conn::{ConnError, ReqId, StatusInfo};
pub(crate) mod failpoints;
mod replication;
pub(crate) mod revocations;
pub(crate) mod shm;

use replication::*;

use crate::error::{Error, Result};
use conn::{Auth, Conn, Out, Payload, RState};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use p2pmpi_core::matching::{Arrival, Body, Envelope, Matcher, Pattern};
use p2pmpi_core::replication::endpoint::Parked;
use p2pmpi_core::replication::{Layout, MsgId, Outcome};
use p2pmpi_wire::auth::{self, JobKey, Role};
use p2pmpi_wire::frame::{AUTH_LEN, CHALLENGE_LEN, HELLO_LEN};
use p2pmpi_wire::{FrameKind, Header, Mid};
use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Bytes one call reads from a connection before it returns to its caller.
const READ_BUDGET: usize = 1 << 20;

#[cfg(test)]
mod tests;

const LISTENER: Token = Token(usize::MAX);

/// Accepted connections that may be waiting to prove the job key at once: beyond, the oldest
/// of those waiting for more than [`PENDING_GRACE`] are dropped to make room (the ones just
/// accepted are not: at start-up a process accepts a connection from every higher slot at
/// once, before it reads any).
pub(crate) const MAX_PENDING: usize = 1024;

/// How long an accepted connection may wait to prove the job key before it can be dropped
/// to make room.
pub(crate) const PENDING_GRACE: Duration = Duration::from_secs(1);

/// Longest an accepted connection may take to prove the job key on a host with at most 8 of
/// the job's processes per core ([`load_factor`] times more beyond).
pub(crate) const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

/// How many times longer than on a host with a few processes per core the job's openings may
/// take here: the job's processes on this host (`P2PMPI_LOCAL_PROCS`) per core, by 8, at
/// least 1. At start-up every pair of processes opens a connection and each process polls all
/// of its own, all on this host's cores: 256 processes on 2 cores take some 25 s to connect.
pub(crate) fn load_factor() -> u32 {
    // The launcher's variable (`bootstrap::env::LOCAL_PROCS`, named here by its value: the
    // engine is below bootstrap).
    const LOCAL_PROCS_VAR: &str = "P2PMPI_LOCAL_PROCS";
    static F: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *F.get_or_init(|| {
        let procs = std::env::var(LOCAL_PROCS_VAR).ok().and_then(|v| v.parse::<usize>().ok());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        (procs.unwrap_or(1) / cores / 8).clamp(1, 1000) as u32
    })
}

/// Removes the shared-memory segments of the job of `key` left behind (a job stopped while
/// its processes connected): its launcher calls it once the job's processes ended. Returns
/// how many.
#[doc(hidden)]
pub fn remove_job_segments(key: &JobKey) -> usize {
    shm::remove_job_segments(key)
}

/// The request of every operation finished on the spot (an eager send written whole at
/// once, [`Engine::completed_req`]): a slot of the request table that is never freed, so such
/// an operation costs no allocation of a request, and waiting for it no look at the engine.
pub(crate) const DONE: ReqId = 0;

/// What waiting for [`DONE`] returns.
pub(crate) const DONE_STATUS: StatusInfo = StatusInfo { source: -1, tag: -1, len: 0, cancelled: false };

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
    /// A transmission of the replication protocol: its id for the endpoint.
    parent: Option<usize>,
}

/// What `P2PMPI_TRACE` records of an accepted message: comm, source, tag, sequence, length.
type TraceEntry = (u32, i32, i32, u64, u64);

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
    /// Offered to the receiver for a single copy: the ticket it checks around its reads.
    ticket: Option<&'static AtomicU64>,
}

/// A rendez-vous announcement that offers a single copy: where the receiver reads the data.
#[derive(Debug, Clone, Copy)]
struct ScSource {
    /// The sender's slot and pid (confirmed by the connection's probe).
    slot: i32,
    pid: i32,
    addr: u64,
    ticket: u64,
    value: u64,
}

/// The data of an eager message that arrived whole: borrowed (from a read buffer, or a local
/// sender's memory), or a copy the caller already owns, kept rather than copied again.
enum Eager<'d> {
    Borrowed(&'d [u8]),
    Owned(Vec<u8>),
}

impl Eager<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Eager::Borrowed(b) => b,
            Eager::Owned(v) => v,
        }
    }
    fn into_owned(self) -> Vec<u8> {
        match self {
            Eager::Borrowed(b) => crate::pool::copy_of(b),
            Eager::Owned(v) => v,
        }
    }
    /// Done with it: an owned copy goes back to the pool.
    fn give(self) {
        if let Eager::Owned(v) = self {
            crate::pool::give(v);
        }
    }
}

/// A multi-step operation defined above the engine that the progress loop moves forward (an
/// immediate collective's schedule, [`crate::collective`]): the engine holds it behind this
/// trait, and calls it only while one is under way.
pub(crate) trait Schedule: Send {
    /// Moves it as far as it goes now; `Some` once it is over (successfully or not), when
    /// nothing in the engine refers to its buffers any more.
    fn advance(&mut self, e: &mut Engine) -> Option<Result<StatusInfo>>;
    /// Withdraws every transfer still under way (its buffers are about to go).
    fn abort(&mut self, e: &mut Engine);
    /// The world rank of a peer in `lost` that one of its receives under way waits for.
    fn waits_for(&self, lost: &[i32]) -> Option<i32>;
}

/// A schedule under way, with the request that completes with it.
pub(crate) struct Scheduled {
    /// The request the program's `Request` stands on; completed with the schedule.
    pub req: ReqId,
    /// Its number among the operations of a fault-aware replicated job (set when it starts,
    /// in program order: the same on every replica of the rank); its replicas take their
    /// master's outcome.
    pub op: Option<u64>,
    /// What runs it.
    pub run: Box<dyn Schedule>,
}

/// What the engine asks of the failure layer above it (plain functions, called on failures
/// and start-up waits only), installed when the job starts. The default, for an engine alone
/// (its tests), knows of no failure.
#[derive(Clone, Copy)]
pub(crate) struct Upcalls {
    /// Whether failures were told that the engine has not applied yet.
    pub failures_pending: fn() -> bool,
    /// Takes them: the ranks (in a replicated job, the slots) that failed.
    pub take_failures: fn() -> Vec<i32>,
    /// The engine covers more slots (a spawn's): the failures heard so far are told again.
    pub retell_failures: fn(),
    /// This process (`me`, a slot) suspects `slot` of a replicated job to have failed
    /// (`detail` in words): the launcher is told.
    pub suspect: fn(usize, usize, &str),
    /// Every replica of rank `rank` is lost: the program is told.
    pub rank_lost: fn(i32),
}

impl Default for Upcalls {
    fn default() -> Self {
        Upcalls {
            failures_pending: || false,
            take_failures: Vec::new,
            retell_failures: || {},
            suspect: |_, _, _| {},
            rank_lost: |_| {},
        }
    }
}

/// The state of one process's device.
pub(crate) struct Engine {
    pub rank: i32,
    pub size: i32,
    /// This process's slot (its index among the job's real processes): the rank, unless
    /// the job runs replicas.
    pub slot: i32,
    /// Universe id of this job's world rank 0 and the world's size: the mesh built at
    /// start-up. Spawned processes (and their parents, after a spawn) also reach processes
    /// outside it, by universe id: ids below `world_base` are ancestors, ids from
    /// `world_base + world_size` on are children.
    pub world_base: i32,
    pub world_size: i32,
    layout: Option<Layout>,
    repl: Option<Box<Replication>>,
    /// MIDs accepted (`P2PMPI_TRACE`): comm, source, tag, sequence, length.
    trace: Option<Vec<TraceEntry>>,
    /// The job's key, which every connection's opening proves.
    key: JobKey,
    /// Refused connections: when the current logging window began, lines written in it,
    /// refusals not shown.
    refusals: (Instant, u32, u64),
    poll: Poll,
    events: Events,
    listener: Option<TcpListener>,
    addrs: Vec<SocketAddr>,
    peers: Vec<Peer>,
    /// Boxed: a connection is taken out of the table while its frames are handled, and
    /// moving the whole struct twice per read was a tenth of an 8-byte message's cost.
    conns: Vec<Option<Box<Conn>>>,
    matcher: Matcher<ReqId, Vec<u8>>,
    reqs: Vec<Option<Req>>,
    free_reqs: Vec<ReqId>,
    rndv_send: HashMap<Mid, RndvSend>,
    rndv_recv: HashMap<Mid, ReqId>,
    /// Frames produced while a connection was checked out, sent afterwards.
    deferred: Vec<(i32, Out)>,
    /// The error that ended communication, if any: every later wait returns it.
    pub fatal: Option<Error>,
    /// Peers lost in a program that handles failures (`Policy::Notify`, unreplicated): what
    /// involves them fails with an error naming them, the rest goes on (rank → cause).
    lost: HashMap<i32, String>,
    /// Communicators (contexts) revoked by a member (ULFM): their communication fails.
    revoked: std::collections::HashSet<u32>,
    /// How long a blocking call polls before it sleeps.
    pub spin: Duration,
    /// After `spin`, how long it keeps polling with `sched_yield` between polls.
    pub yield_spin: Duration,
    /// `--encrypt`: every data connection seals what follows its opening (ChaCha20-Poly1305
    /// records under session keys derived from the job key and the opening's nonces).
    pub encrypt: bool,
    tick: u32,
    /// Reused buffer of ready events.
    ready: Vec<(Token, bool, bool)>,
    /// Connections left readable when their read budget ran out (epoll is edge-triggered:
    /// no new event comes for data already there), read again by the next progress call.
    unread: Vec<usize>,
    /// Immediate collectives under way, moved forward by every progress call.
    schedules: Vec<Scheduled>,
    /// What the engine asks of the failure layer above it.
    pub(crate) upcalls: Upcalls,
    /// Which peers on this host may be reached through shared memory.
    shm_policy: ShmPolicy,
    /// Connections whose frames travel through shared memory (polled on every progress).
    shm_conns: Vec<usize>,
    /// A replicated job dropping its connections with this slot takes the data frames its
    /// kernel already holds from them, and nothing else ([`Device::drop_peer`]).
    pub(super) draining: Option<i32>,
    /// Single-copy announcements received, by MID, until a receive takes them.
    sc_in: HashMap<Mid, ScSource>,
    /// Tickets of single-copy sends not in use (never freed: a receiver may still look at a
    /// withdrawn send's ticket; they are few, one per send in flight at most).
    tickets: Vec<&'static AtomicU64>,
    /// The next ticket value (never 0, never reused by this process).
    ticket_next: u64,
    /// Single copies that failed while the sender's connection was still up: the slot, since
    /// when, why. A dying sender's connection ends soon (its receives fail as the TCP
    /// device's do); one still up after [`SC_GRACE`] is failed with this cause.
    sc_broken: Vec<(i32, Instant, String)>,
    /// Messages received by a single copy (`P2PMPI_SHM_DEBUG` prints it at the end).
    sc_count: u64,
    /// A receive was filled since this was last cleared (see `read_conn`).
    filled: bool,
}

/// How long a single copy that failed waits for the sender's connection to end (a sender
/// killed while the receiver read its memory) before it fails the connection itself.
const SC_GRACE: Duration = Duration::from_secs(2);

/// When the shared-memory path is used (see `shm`): `P2PMPI_SHM=0` turns it off;
/// `P2PMPI_SHM_SLOTS=a,b,...` limits it to pairs of those slots (tests mixing transports);
/// `P2PMPI_SHM_DEBUG` prints a line per pair that uses it. `--encrypt` jobs keep TCP
/// ([`Engine::shm_allowed`]); replicated jobs use it too, between their processes on one host
/// (only the single copy of large messages is not used by replicas).
#[derive(Debug, Clone, Default)]
struct ShmPolicy {
    on: bool,
    slots: Option<Vec<i32>>,
    debug: bool,
    ring: usize,
    /// Large messages copied straight from the sender's memory (`process_vm_readv`)
    /// instead of pipelined through the ring: `P2PMPI_SHM_SINGLE_COPY=1` turns it on. Off by
    /// default: measured slower than the ring at every size (docs/shm.md).
    single_copy: bool,
    /// Smallest message sent by a single copy: `P2PMPI_SHM_SINGLE_COPY_MIN` bytes, default
    /// [`SINGLE_COPY_MIN`] (only rendez-vous messages: above the eager limit, or synchronous).
    sc_min: usize,
}

/// Default smallest message sent by a single copy, once it is turned on (`docs/shm.md`).
pub const SINGLE_COPY_MIN: usize = 64 * 1024;

impl ShmPolicy {
    fn from_env() -> ShmPolicy {
        let on = !matches!(std::env::var("P2PMPI_SHM").as_deref(), Ok("0"));
        let slots = std::env::var("P2PMPI_SHM_SLOTS")
            .ok()
            .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect());
        let debug = std::env::var_os("P2PMPI_SHM_DEBUG").is_some();
        let single_copy = matches!(std::env::var("P2PMPI_SHM_SINGLE_COPY").as_deref(), Ok("1"));
        let sc_min = std::env::var("P2PMPI_SHM_SINGLE_COPY_MIN")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(SINGLE_COPY_MIN)
            .max(1);
        ShmPolicy { on, slots, debug, ring: shm::ring_capacity(), single_copy, sc_min }
    }
    fn allows(&self, a: i32, b: i32) -> bool {
        self.on && self.slots.as_ref().is_none_or(|s| s.contains(&a) && s.contains(&b))
    }
}

// SAFETY: the raw pointers inside are the buffers of requests (and payloads queued by
// reference), which the API layer keeps valid until each request completes or is detached
// (see `isend`, `irecv`), whichever thread that happens on; they are not tied to the thread
// that made them. The engine is only ever used behind the global lock, one thread at a time.
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
        key: JobKey,
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
        let repl = layout.map(|l| Box::new(Replication::new(l, slot as usize)));
        let trace = std::env::var_os("P2PMPI_TRACE").map(|_| Vec::new());
        Ok(Engine {
            rank,
            size,
            slot,
            world_base: 0,
            world_size: size,
            layout,
            repl,
            trace,
            key,
            refusals: (Instant::now(), 0, 0),
            poll,
            events: Events::with_capacity(256),
            listener,
            addrs,
            peers: (0..slots).map(|_| Peer::default()).collect(),
            conns: Vec::new(),
            matcher: Matcher::new(),
            reqs: vec![Some(Req {
                ptr: std::ptr::null_mut(),
                cap: 0,
                state: ReqState::Done(DONE_STATUS),
                parent: None,
            })],
            free_reqs: Vec::new(),
            rndv_send: HashMap::new(),
            rndv_recv: HashMap::new(),
            deferred: Vec::new(),
            fatal: None,
            lost: HashMap::new(),
            revoked: std::collections::HashSet::new(),
            spin,
            yield_spin: Duration::ZERO,
            encrypt: false,
            tick: 0,
            ready: Vec::with_capacity(256),
            unread: Vec::new(),
            schedules: Vec::new(),
            upcalls: Upcalls::default(),
            shm_policy: ShmPolicy::from_env(),
            shm_conns: Vec::new(),
            draining: None,
            sc_in: HashMap::new(),
            tickets: Vec::new(),
            ticket_next: 1,
            sc_broken: Vec::new(),
            sc_count: 0,
            filled: false,
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
                        "c{i}:peer{:?} outq{} rbuf{} want_w{} eof{}{}",
                        c.peer,
                        c.outq.len(),
                        c.buffered(),
                        c.want_write,
                        c.read_eof,
                        if c.shm.is_some() { " shm" } else { "" }
                    )
                })
            })
            .collect();
        let repl = self
            .repl
            .as_ref()
            .map_or(String::new(), |rp| format!(" {} dead {:?}", rp.ep.summary(), rp.ep.coordinator().dead_slots()));
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
    /// The data address of universe id `id`, when this process knows it.
    pub fn addr_of(&self, id: i32) -> Option<SocketAddr> {
        if id == self.slot {
            return self.local_addr();
        }
        self.addrs.get(usize::try_from(id).ok()?).copied().filter(|a| a.port() != 0)
    }

    /// The processes of universe ids `ids` for a spawn's children: every slot (each replica,
    /// in a replicated job) with its data address (empty when unknown).
    pub fn spawn_parents(&self, ids: &[i32]) -> Vec<(u32, String)> {
        self.slots_of_ids(ids)
            .into_iter()
            .map(|s| (s as u32, self.addr_of(s).map(|a| a.to_string()).unwrap_or_default()))
            .collect()
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    // ----------------------------------------------------------------- requests

    fn new_req(&mut self, ptr: *mut u8, cap: usize, state: ReqState) -> ReqId {
        alloc_req(&mut self.reqs, &mut self.free_reqs, Req { ptr, cap, state, parent: None })
    }

    fn req_mut(&mut self, id: ReqId) -> &mut Req {
        self.reqs[id].as_mut().expect("live request")
    }

    /// A request that is already complete (for operations finished on the spot).
    pub fn completed_req(&mut self) -> ReqId {
        DONE
    }

    /// The state of a request, if it has finished (the request stays until [`Self::release`]).
    pub fn is_done(&self, id: ReqId) -> bool {
        !matches!(self.reqs[id].as_ref().expect("live request").state, ReqState::Pending)
    }

    /// Takes a finished request's outcome and frees it; `None` if still pending.
    #[inline]
    pub fn take_done(&mut self, id: ReqId) -> Option<Result<StatusInfo>> {
        if id == DONE {
            return Some(Ok(DONE_STATUS));
        }
        if matches!(self.reqs[id].as_ref().expect("live request").state, ReqState::Pending) {
            return None;
        }
        self.take_finished(id)
    }

    fn take_finished(&mut self, id: ReqId) -> Option<Result<StatusInfo>> {
        let r = self.reqs[id].take().expect("live request");
        self.free_reqs.push(id);
        if self.repl.is_some() {
            self.taken(id, matches!(r.state, ReqState::Done(_)));
        }
        Some(match r.state {
            ReqState::Done(s) => Ok(s),
            ReqState::Failed(e) => Err(e),
            ReqState::Pending => unreachable!(),
        })
    }

    fn complete(&mut self, id: ReqId, st: Result<StatusInfo>) {
        if let Some(tx) = self.reqs[id].as_ref().and_then(|r| r.parent) {
            // A frame of the replication protocol is written.
            self.tx_written(id, tx);
            return;
        }
        if self.repl.is_some() {
            // A master's operation failed (a lost rank, a revocation): its replicas follow.
            self.decide_failure(id, &st);
        }
        if let Some(rp) = self.repl.as_mut() {
            // A master's wildcard receive completed: its replicas follow its choice.
            if let Some((c, comm)) = rp.choice_of.remove(&id) {
                if let Some(m) = rp.matched.remove(&id) {
                    rp.ep.decided(comm, c, Some(m));
                }
            }
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
        if let Some(i) = self.schedules.iter().position(|s| s.req == id) {
            // An immediate collective given up: its transfers are withdrawn, and it will
            // never write the user's buffer.
            let mut s = self.schedules.swap_remove(i);
            s.run.abort(self);
            return;
        }
        for conn in self.conns.iter_mut().flatten() {
            conn.detach(id);
        }
        if let Some(rp) = self.repl.as_mut() {
            // A lent backup or a transmission whose send is withdrawn: its buffer is about to
            // go; the endpoint keeps a copy, and queued frames carrying it copy it.
            let subs: Vec<ReqId> = rp.ep.detach(id).iter().filter_map(|t| rp.tx_req.get(t).copied()).collect();
            for sub in subs {
                for conn in self.conns.iter_mut().flatten() {
                    conn.detach(sub);
                }
            }
        }
        let withdrawn: Vec<Mid> = self.rndv_send.iter().filter(|(_, s)| s.req == id).map(|(m, _)| *m).collect();
        for m in withdrawn {
            if let Some(s) = self.rndv_send.remove(&m) {
                self.retire_send(s);
            }
        }
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
        // (The replication's bookkeeping of failure outcomes costs an unreplicated job a test.)
        let op = if self.repl.is_some() { self.next_op() } else { None };
        let revoked = self.is_revoked(comm);
        if revoked || op.is_some() {
            if let Some(e) = self.post_failure(op, revoked.then_some(Error::Revoked)) {
                return Err(e);
            }
        }
        let seq = self.matcher.next_send_seq(comm, dst, tag);
        let data = if len == 0 {
            &[][..]
        } else {
            // SAFETY: this function's contract: `len` initialised bytes at `ptr`, readable until
            // the request completes (and so during this call); the slice does not outlive it.
            unsafe { std::slice::from_raw_parts(ptr, len) }
        };
        if dst == self.rank {
            self.deliver_local(comm, tag, seq, data);
            let st = StatusInfo { source: dst, tag, len: len as u64, cancelled: false };
            return Ok(self.new_req(std::ptr::null_mut(), 0, ReqState::Done(st)));
        }
        if self.repl.is_some() {
            // Algorithm 4: the master transmits, a replica keeps the message until committed.
            let mid = Mid { comm, src: self.rank as u32, dst: dst as u32, tag, seq };
            let r = self.replicated_send(mid, ptr, len, mode == SendMode::Synchronous, op.is_some());
            self.number(r, op);
            return Ok(r);
        }
        let cid = self.send_conn(dst)?;
        if mode == SendMode::Standard && len <= EAGER_LIMIT {
            // Written in place: what the socket does not take now is queued by reference (the
            // caller keeps the buffer until the request completes), never copied, so a sender
            // running ahead of its receiver is held back by TCP instead of growing a queue.
            // A frame written whole at once completes the send on the spot ([`DONE`]).
            let h = self.header(FrameKind::Eager, comm, dst, tag, seq, len as u64);
            let conn = self.conns[cid].as_mut().expect("live connection");
            match conn.ring_write_now(&h, data) {
                Ok(true) => return Ok(DONE),
                Ok(false) => {}
                Err(e) => {
                    let peer = conn.peer.unwrap_or(-1);
                    return Err(self.write_failed(cid, peer, e));
                }
            }
            let payload = if len == 0 { Payload::None } else { Payload::Raw(ptr, len) };
            self.push_eager(cid, Out::new(h, payload))
        } else {
            let mut h = self.header(FrameKind::ReadyToSend, comm, dst, tag, seq, len as u64);
            if mode == SendMode::Synchronous {
                h.flags |= p2pmpi_wire::frame::flags::SYNCHRONOUS;
            }
            let req = self.new_req(std::ptr::null_mut(), 0, ReqState::Pending);
            // Same host, and the receiver may read this process's memory: it copies the data
            // straight from `ptr` (valid until the request completes, which its answer does).
            let sc = self.shm_policy.single_copy
                && len >= self.shm_policy.sc_min
                && self.conns[cid].as_ref().and_then(|c| c.shm.as_deref()).is_some_and(|l| l.peer_reads_me());
            let (ticket, payload) = if sc {
                let (t, value) = self.take_ticket();
                h.flags |= p2pmpi_wire::frame::flags::SINGLE_COPY;
                let mut p = Vec::with_capacity(p2pmpi_wire::frame::SINGLE_COPY_LEN as usize);
                p.extend_from_slice(&(ptr as u64).to_le_bytes());
                p.extend_from_slice(&(t as *const AtomicU64 as u64).to_le_bytes());
                p.extend_from_slice(&value.to_le_bytes());
                (Some(t), Payload::Owned(p))
            } else {
                (None, Payload::None)
            };
            self.rndv_send.insert(h.mid, RndvSend { req, ptr, len, ticket });
            self.push_out(cid, Out::new(h, payload))?;
            Ok(req)
        }
    }

    /// A message to this very process: matched (and copied) at once or queued.
    fn deliver_local(&mut self, comm: u32, tag: i32, seq: u64, data: &[u8]) {
        let env = Envelope { comm, src: self.rank, tag, seq, len: data.len() as u64 };
        self.accept_eager(env, Eager::Borrowed(data), false);
    }

    /// An eager message arrived whole: matched, queued, dropped as a duplicate or kept
    /// until its turn.
    fn accept_eager(&mut self, env: Envelope, data: Eager<'_>, sync: bool) {
        match self.matcher.arrive(&env) {
            Arrival::Matched(r) => {
                self.traced(&env);
                if sync {
                    self.ack_sync(&env);
                }
                self.share_eager(&env, data.bytes());
                self.fill(r, &env, data.bytes());
                data.give();
            }
            Arrival::Unmatched => {
                self.traced(&env);
                self.share_eager(&env, data.bytes());
                if sync {
                    let me = self.rank;
                    if let Some(rp) = self.repl.as_mut() {
                        rp.ep.sync_unmatched(env_mid(&env, me));
                    }
                }
                self.matcher.enqueue(env, Body::Eager(data.into_owned()));
            }
            Arrival::Duplicate => {
                data.give();
                let me = self.rank;
                if let Some(rp) = self.repl.as_mut() {
                    // A new master resending a synchronous message waits for an
                    // acknowledgement its predecessor already had.
                    rp.ep.duplicate(env_mid(&env, me), sync);
                }
                return;
            }
            Arrival::Early => {
                let v = data.into_owned();
                let me = self.rank;
                if let Some(rp) = self.repl.as_mut() {
                    let now = rp.now();
                    rp.ep.park(now, env_mid(&env, me), Parked { data: Bytes::Owned(v), sync, rts: None });
                } else {
                    log_warn(self.rank, &format!("message {env:?} arrived out of order; dropped"));
                }
                return;
            }
        }
        self.drain_early(env.comm, env.src, env.tag);
    }

    /// A rendez-vous announcement of a replicated job arrived: matched (the data is pulled
    /// from the sender's replicas), queued, kept until its turn, or answered as a duplicate.
    fn accept_announcement(&mut self, env: Envelope, sync: bool) {
        let me = self.rank;
        let mid = env_mid(&env, me);
        match self.matcher.arrive(&env) {
            Arrival::Matched(r) => {
                self.traced(&env);
                self.start_rndv_recv(r, &env);
            }
            Arrival::Unmatched => {
                self.traced(&env);
                self.matcher.enqueue(env, Body::Rendezvous);
            }
            Arrival::Duplicate => {
                let wire = mid;
                let queued = self
                    .matcher
                    .probe(Pattern { comm: env.comm, src: Some(env.src), tag: Some(env.tag) })
                    .is_some_and(|e| e.seq <= env.seq);
                let Some(rp) = self.repl.as_mut() else { return };
                if self.rndv_recv.contains_key(&wire) {
                    // Announced again by a new master while the data is awaited: pulled
                    // again (the old master may have died before sending it).
                    rp.ep.pull(mid);
                } else if !queued {
                    // Received already (a queued one is pulled when a receive matches it).
                    rp.ep.have(mid);
                }
            }
            Arrival::Early => {
                if let Some(rp) = self.repl.as_mut() {
                    let now = rp.now();
                    rp.ep.park(now, mid, Parked { data: Bytes::Owned(Vec::new()), sync, rts: Some(env.len) });
                }
                return;
            }
        }
        self.drain_early(env.comm, env.src, env.tag);
    }

    /// Accepts the messages kept aside that are now next on their channel.
    fn drain_early(&mut self, comm: u32, src: i32, tag: i32) {
        loop {
            let next = self.matcher.next_expected(comm, src, tag);
            let Some(rp) = self.repl.as_mut() else { return };
            if rp.ep.early_len() == 0 {
                return;
            }
            let Some((mid, p)) = rp.ep.unpark(comm, src as u32, tag, next) else { return };
            let sync = p.sync;
            let data = p.data.into_vec();
            if let Some(len) = p.rts {
                self.accept_announcement(Envelope { comm, src, tag, seq: mid.seq, len }, sync);
                continue;
            }
            let env = Envelope { comm, src, tag, seq: mid.seq, len: data.len() as u64 };
            self.accept_eager(env, Eager::Owned(data), sync);
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
        self.filled = true;
        self.note_match(r, env);
        let req = self.req_mut(r);
        let st = if data.len() > req.cap {
            Err(Error::Truncated { from_rank: env.src, tag: env.tag, message_bytes: env.len, buffer_bytes: req.cap })
        } else {
            if !data.is_empty() {
                // SAFETY: `req.ptr` is valid for writes of `req.cap >= data.len()` bytes until
                // the request completes (`irecv`'s contract; it completes just below), and
                // `data` is the device's or a sender's memory, not the receive buffer.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), req.ptr, data.len()) };
            }
            Ok(StatusInfo { source: env.src, tag: env.tag, len: env.len, cancelled: false })
        };
        self.complete(r, st);
    }

    /// A rendez-vous message matched receive `r`: ask for the data.
    fn start_rndv_recv(&mut self, r: ReqId, env: &Envelope) {
        // A master's wildcard receive: its choice is told once the data is in.
        self.note_match(r, env);
        let mid = Mid { comm: env.comm, src: env.src as u32, dst: self.rank as u32, tag: env.tag, seq: env.seq };
        self.rndv_recv.insert(mid, r);
        if self.repl.is_some() {
            if self.fill_relayed(r, env, mid) {
                return;
            }
            // Every alive replica of the sender is asked: whichever is master sends the data.
            if let Some(rp) = self.repl.as_mut() {
                rp.ep.pull(mid);
            }
            return;
        }
        if let Some(src) = self.sc_in.remove(&mid) {
            self.single_copy(r, env, mid, src);
            return;
        }
        self.deferred.push((env.src, Out::new(Header::new(FrameKind::ReadyToRecv, mid, 0), Payload::None)));
    }

    /// A single-copy announcement matched receive `r`: the data is copied straight from the
    /// sender's memory into the receive buffer, then the sender is told (its send
    /// completes). If the copy fails, the receive waits for the sender's connection to end
    /// (a sender that died) and fails with it, as with the TCP device; see `sc_broken`.
    fn single_copy(&mut self, r: ReqId, env: &Envelope, mid: Mid, src: ScSource) {
        let (ptr, cap) = {
            let q = self.reqs[r].as_ref().expect("live request");
            (q.ptr, q.cap)
        };
        let len = env.len as usize;
        let st = StatusInfo { source: env.src, tag: env.tag, len: env.len, cancelled: false };
        let res = if len > cap {
            Err(Error::Truncated { from_rank: env.src, tag: env.tag, message_bytes: env.len, buffer_bytes: cap })
        } else {
            // SAFETY: `ptr` is valid for writes of `cap >= len` bytes until the request
            // completes (`irecv`'s contract; it is pending and completes just below).
            match unsafe { shm::copy_from(src.pid, src.addr, len, ptr, src.ticket, src.value) } {
                Ok(()) => {
                    self.sc_count += 1;
                    Ok(st)
                }
                Err(e) => {
                    // Nothing is delivered: the receive waits like one whose data never came.
                    let why = match e {
                        shm::CopyError::Gone => "the sender's process is gone".to_string(),
                        shm::CopyError::Failed(d) => format!("single copy from the sender failed: {d}"),
                        shm::CopyError::Withdrawn => "the sender withdrew a message being copied".to_string(),
                    };
                    self.shm_note(&format!("single copy of {mid:?} from rank {}: {why}", env.src));
                    let gone = self.peers.get(src.slot as usize).is_none_or(|p| p.conns.is_empty());
                    if let Some(cause) = self.lost.get(&env.src).cloned() {
                        Err(Error::PeerLost { rank: env.src, cause })
                    } else if gone {
                        let cause = "connection closed before it finalized (process died?)".to_string();
                        Err(Error::PeerLost { rank: env.src, cause })
                    } else {
                        self.rndv_recv.insert(mid, r);
                        self.sc_broken.push((src.slot, Instant::now(), why));
                        return;
                    }
                }
            }
        };
        self.complete(r, res);
        let mut done = Header::new(FrameKind::ReadyToRecv, mid, 0);
        done.flags |= p2pmpi_wire::frame::flags::SINGLE_COPY;
        self.deferred.push((env.src, Out::new(done, Payload::None)));
    }

    /// A ticket for a single-copy send, and its value.
    fn take_ticket(&mut self) -> (&'static AtomicU64, u64) {
        let t = self.tickets.pop().unwrap_or_else(|| Box::leak(Box::new(AtomicU64::new(0))));
        let value = self.ticket_next;
        self.ticket_next = self.ticket_next.wrapping_add(1).max(1);
        t.store(value, Ordering::SeqCst);
        (t, value)
    }

    /// A rendez-vous send is over (or withdrawn): its ticket, if any, is cleared before the
    /// caller may let the buffer go (a receiver reading it then fails its check) and goes
    /// back to the pool. Returns the send's request.
    fn retire_send(&mut self, s: RndvSend) -> ReqId {
        if let Some(t) = s.ticket {
            t.store(0, Ordering::SeqCst);
            self.tickets.push(t);
        }
        s.req
    }

    /// Fails the connections of senders whose single copy failed and that are still up
    /// after [`SC_GRACE`] (a sender gone closes its connection first: see `single_copy`).
    fn check_single_copies(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.sc_broken.len() {
            let (slot, since, _) = self.sc_broken[i];
            let conns = self.peers.get(slot as usize).map(|p| p.conns.clone()).unwrap_or_default();
            if conns.is_empty() || self.fatal.is_some() {
                self.sc_broken.swap_remove(i);
                continue;
            }
            if now.duration_since(since) < SC_GRACE {
                i += 1;
                continue;
            }
            let (_, _, why) = self.sc_broken.swap_remove(i);
            for cid in conns {
                if self.conns.get(cid).is_some_and(Option::is_some) {
                    self.conn_failed(cid, slot, ConnError::Protocol(why.clone()));
                }
            }
        }
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
        failpoints::at_start();
        let (lo, hi) = if let Some(l) = &self.layout {
            // The world's slots (a spawned job's follow its ancestors').
            let r = l.r as i32;
            (self.world_base * r, (self.world_base + self.world_size) * r)
        } else {
            (self.world_base, self.world_base + self.world_size)
        };
        for r in lo..self.slot {
            self.apply_declared();
            if self.cut(r) {
                continue;
            }
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
            // A replica declared dead while the job starts (frozen, or cut off, before it
            // connected or answered) is not waited for.
            self.apply_declared();
            let slots = hi;
            let dead = |r: i32| self.repl.as_ref().is_some_and(|rp| rp.ep.is_cut(r as usize));
            // Every higher slot connected and proved the key, and every connection this
            // process opened was answered (a lower slot waits for this process's proof: it
            // must be given before the program goes off computing).
            let missing = (self.slot + 1..slots).find(|&r| self.peers[r as usize].send_conn.is_none() && !dead(r));
            let unanswered = (lo..self.slot).find(|&r| {
                !dead(r)
                    && self.peers[r as usize]
                        .conns
                        .iter()
                        .any(|&c| self.conns[c].as_ref().is_some_and(|c| !c.authenticated()))
            });
            let Some(r) = missing.or(unanswered) else { return Ok(()) };
            if Instant::now() >= deadline {
                return Err(Error::PeerLost {
                    rank: self.rank_of(r),
                    cause: format!("it did not connect within {limit:?} of start-up"),
                });
            }
            self.progress(None, Some(Duration::from_millis(5)));
        }
    }

    /// Makes room for universe ids below `n` (processes outside the world: children of a
    /// spawn, whose addresses are unknown until they connect).
    /// In a replicated job the universe's layout grows: every universe id has as many
    /// replicas, numbered after the slots already known ([`Layout::grown`]).
    pub fn grow(&mut self, n: usize) {
        let slots = match self.layout.as_mut() {
            Some(l) => {
                if n > l.n {
                    *l = l.grown(n);
                    if let Some(rp) = self.repl.as_mut() {
                        rp.grow(n);
                    }
                    (self.upcalls.retell_failures)();
                }
                l.slots()
            }
            None => n,
        };
        if slots > self.peers.len() {
            self.peers.resize_with(slots, Peer::default);
            self.addrs.resize(slots, SocketAddr::from(([0, 0, 0, 0], 0)));
        }
        self.size = self.size.max(n as i32);
    }

    /// The slots of universe ids `ids`: their replicas in a replicated job, else the ids.
    fn slots_of_ids(&self, ids: &[i32]) -> Vec<i32> {
        match &self.layout {
            Some(l) => ids.iter().flat_map(|&id| l.slots_of(id as usize).map(|s| s as i32)).collect(),
            None => ids.to_vec(),
        }
    }

    /// A replicated job's deaths the launcher declared since the last look, applied now (the
    /// start-up's waits: the program's calls apply them in [`crate::environment`]'s waits).
    fn apply_declared(&mut self) {
        if self.repl.is_some() && (self.upcalls.failures_pending)() {
            for k in (self.upcalls.take_failures)() {
                self.peer_failed(k);
            }
        }
    }

    /// Opens connections to the processes `ids` (outside the world) and waits until each one
    /// proved the job key, or until `limit`.
    pub fn connect_to(&mut self, ids: &[i32], limit: Duration) -> Result<()> {
        let ids = &self.slots_of_ids(ids)[..];
        for &r in ids {
            // Replicas the launcher declared dead already (a spawn's parent that died before
            // its children started): not waited for.
            self.apply_declared();
            if self.cut(r) {
                continue;
            }
            if let Err(e) = self.send_conn(r) {
                if self.repl.is_none() {
                    return Err(e);
                }
                // A replica that died: the others go on without it.
                self.suspect_slot(r, &e.to_string());
            }
        }
        let deadline = Instant::now() + limit;
        loop {
            if let Some(e) = &self.fatal {
                return Err(e.clone());
            }
            self.apply_declared();
            let pending = ids.iter().copied().find(|&r| {
                !self.cut(r)
                    && self.peers[r as usize]
                        .conns
                        .iter()
                        .any(|&c| self.conns[c].as_ref().is_some_and(|c| !c.authenticated()))
            });
            let Some(r) = pending else { return Ok(()) };
            if Instant::now() >= deadline {
                return Err(Error::PeerLost {
                    rank: self.rank_of(r),
                    cause: format!("it did not answer within {limit:?}"),
                });
            }
            self.progress(None, Some(Duration::from_millis(5)));
        }
    }

    /// Waits until every process of `ids` (spawned children, whose addresses this process
    /// does not know) connected and proved the job key, or until `limit`.
    pub fn await_connections(&mut self, ids: &[i32], limit: Duration) -> Result<()> {
        let slots = self.slots_of_ids(ids);
        self.await_slots(&slots, limit)
    }

    /// Waits until every slot of `ids` connected and proved the job key, or until `limit`.
    fn await_slots(&mut self, ids: &[i32], limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(e) = &self.fatal {
                return Err(e.clone());
            }
            let Some(r) = ids.iter().copied().find(|&r| self.peers[r as usize].send_conn.is_none() && !self.cut(r))
            else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(Error::PeerLost {
                    rank: self.rank_of(r),
                    cause: format!("the spawned process did not connect within {limit:?}"),
                });
            }
            self.progress(None, Some(Duration::from_millis(5)));
        }
    }

    /// Whether slot `slot` is a replica this process no longer counts on (replicated jobs).
    fn cut(&self, slot: i32) -> bool {
        self.repl.as_ref().is_some_and(|rp| rp.ep.is_cut(slot as usize))
    }

    /// The connection used to send to `dst`, connecting if there is none.
    fn send_conn(&mut self, dst: i32) -> Result<usize> {
        if let Some(c) = self.peers[dst as usize].send_conn {
            return Ok(c);
        }
        let id = self.rank_of(dst);
        let outside = id < self.world_base || id >= self.world_base + self.world_size;
        if outside && self.addrs[dst as usize].port() == 0 && !self.cut(dst) {
            // A process outside the world whose address is unknown (a spawned child): it
            // connects itself (see `await_connections`).
            self.await_slots(&[dst], Duration::from_secs(60))?;
            if let Some(c) = self.peers[dst as usize].send_conn {
                return Ok(c);
            }
        }
        if let Some(cause) = self.lost.get(&dst).filter(|_| self.repl.is_none()) {
            return Err(Error::PeerLost { rank: dst, cause: cause.clone() });
        }
        if self.repl.as_ref().is_some_and(|rp| rp.ep.is_cut(dst as usize)) {
            return Err(Error::PeerLost { rank: self.rank_of(dst), cause: format!("slot {dst} failed") });
        }
        let addr = self.addrs[dst as usize];
        let local = self.local_addr().map(|a| a.ip());
        // A replica outside the world (a spawn's parent) listens since before the spawn: a
        // refused connection means it died, and its replicas are there instead.
        let retry = if outside && self.repl.is_some() {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(10) * load_factor()
        };
        let std_stream = connect_with_retry(local, addr, retry).map_err(|e| Error::PeerLost {
            rank: self.rank_of(dst),
            cause: format!("cannot connect to {addr}: {e}"),
        })?;
        let mut stream = TcpStream::from_std(std_stream);
        let cid = self.conns.iter().position(Option::is_none).unwrap_or_else(|| {
            self.conns.push(None);
            self.conns.len() - 1
        });
        self.poll.registry().register(&mut stream, Token(cid), Interest::READABLE)?;
        // The opening: this process's nonce; what it sends waits until the acceptor proves
        // the job key (its `Challenge`), then follows this process's proof.
        let nc = auth::nonce();
        let mut c = Conn::opened(stream, dst, nc);
        let mut hello = Header::new(
            FrameKind::Hello,
            Mid { comm: 0, src: self.slot as u32, dst: dst as u32, tag: 0, seq: 0 },
            HELLO_LEN,
        );
        if self.shm_allowed(dst) && self.same_host(dst) {
            match shm::Link::create(&self.key, &nc, self.shm_policy.ring) {
                Ok(l) => {
                    c.shm_offer = Some(Box::new(l));
                    hello.flags |= p2pmpi_wire::frame::flags::SHM;
                }
                Err(e) => self.shm_note(&format!("no shared memory with slot {dst} (TCP instead): {e}")),
            }
        }
        self.conns[cid] = Some(Box::new(c));
        let p = &mut self.peers[dst as usize];
        p.conns.push(cid);
        p.send_conn = Some(cid);
        self.push_out(cid, Out::handshake(hello, Payload::Owned(nc.to_vec())))?;
        Ok(cid)
    }

    /// Queues a frame on a connection and writes as much as the socket takes now.
    fn push_out(&mut self, cid: usize, out: Out) -> Result<()> {
        if self.repl.is_some() {
            // Fencing: nothing leaves a replica that holds no valid lease.
            crate::lease::wait_lease();
        }
        let conn = self.conns[cid].as_mut().expect("live connection");
        let peer = conn.peer.unwrap_or(-1);
        let res = conn.push(out);
        let done = match res {
            Ok(done) => done,
            Err(e) => return Err(self.write_failed(cid, peer, e)),
        };
        if let Some(r) = done {
            let st = StatusInfo { source: peer, tag: 0, len: 0, cancelled: false };
            self.complete(r, Ok(st));
        }
        self.update_interest(cid);
        Ok(())
    }

    /// A write on connection `cid` (to `peer`) failed: the connection is dropped; returns the
    /// error the send reports.
    fn write_failed(&mut self, cid: usize, peer: i32, e: ConnError) -> Error {
        self.conn_failed(cid, peer, e);
        self.fatal.clone().unwrap_or(Error::PeerLost { rank: peer, cause: "connection failed".into() })
    }

    /// [`Self::push_out`] for an eager send's frame: [`DONE`] if the frame was written whole
    /// at once, else a request that completes when the rest is written.
    fn push_eager(&mut self, cid: usize, out: Out) -> Result<ReqId> {
        let conn = self.conns[cid].as_mut().expect("live connection");
        match conn.push_or_queue(out) {
            Ok(None) => Ok(DONE),
            Ok(Some(queued)) => {
                let r = Req { ptr: std::ptr::null_mut(), cap: 0, state: ReqState::Pending, parent: None };
                let req = alloc_req(&mut self.reqs, &mut self.free_reqs, r);
                queued.done = Some(req);
                self.update_interest(cid);
                Ok(req)
            }
            Err(e) => {
                let peer = conn.peer.unwrap_or(-1);
                Err(self.write_failed(cid, peer, e))
            }
        }
    }

    fn flush_deferred(&mut self) {
        if self.repl.is_some() {
            self.drive();
        }
        while !self.deferred.is_empty() {
            let batch = std::mem::take(&mut self.deferred);
            for (peer, out) in batch {
                if self.fatal.is_some() {
                    return;
                }
                if let Some(rp) = self.repl.as_ref() {
                    // Nothing more for a replica suspected or declared dead.
                    if rp.ep.is_cut(peer as usize) {
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
        let want = conn.wants_write();
        if want != conn.want_write {
            conn.want_write = want;
            let i = if want { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
            let _ = self.poll.registry().reregister(&mut conn.stream, Token(cid), i);
        }
    }

    // ----------------------------------------------------------------- receiving

    /// Posts a receive into `cap` bytes at `ptr`, which must stay valid for writes, and used
    /// by nothing else, until the request completes or is detached ([`Self::detach`]); any
    /// byte values must be valid there.
    pub fn irecv(&mut self, pat: Pattern, ptr: *mut u8, cap: usize) -> Result<ReqId> {
        if let Some(s) = pat.src {
            self.check_rank(s)?;
        }
        // (The replication's bookkeeping of failure outcomes costs an unreplicated job a test.)
        let op = if self.repl.is_some() { self.next_op() } else { None };
        let revoked = self.is_revoked(pat.comm);
        if revoked || op.is_some() {
            if let Some(e) = self.post_failure(op, revoked.then_some(Error::Revoked)) {
                return Err(e);
            }
        }
        let r = self.new_req(ptr, cap, ReqState::Pending);
        if op.is_some() {
            self.number(r, op);
        }
        if let Some(rp) = self.repl.as_mut() {
            if pat.src.is_none() {
                // An ANY_SOURCE receive is a choice point: the master's match decides. (A
                // receive naming its source is not, even with ANY_TAG: one source's messages
                // arrive in its program order — on one connection, and after a takeover the
                // new master resends before it sends anything new — and MPI's non-overtaking
                // rule then makes the match the same on every replica.)
                if let Some(post) = rp.wildcards.receive(&mut rp.ep, r, pat) {
                    self.post_wildcard(post);
                }
                self.flush_deferred();
                return Ok(r);
            }
        }
        self.post(r, pat);
        if let Some(cause) = pat.src.filter(|_| !self.lost.is_empty()).and_then(|s| self.lost.get(&s)) {
            // Nothing more comes from a lost peer (what it sent before is matched above).
            if self.matcher.cancel(&r) {
                let err = Error::PeerLost { rank: pat.src.unwrap_or(-1), cause: cause.clone() };
                self.complete(r, Err(err));
            }
        }
        Ok(r)
    }

    /// A peer is lost (its connection broke, or the failure detector declared it failed).
    /// A program that handles failures (`Policy::Notify`, unreplicated) goes on: what
    /// involves the peer fails with an error naming it — receives naming it, sends and
    /// rendez-vous with it, later operations with it — and the rest of communication goes on.
    /// Otherwise communication ends.
    fn lose_peer(&mut self, rank: i32, cause: String, unsent: Vec<ReqId>) {
        let err = Error::PeerLost { rank, cause: cause.clone() };
        if !self.failure_tolerant() {
            self.set_fatal(err);
            return;
        }
        self.lost.entry(rank).or_insert(cause);
        let mut failed = unsent;
        let posted: Vec<ReqId> = self.matcher.posted().filter(|(p, _)| p.src == Some(rank)).map(|(_, r)| *r).collect();
        for r in posted {
            if self.matcher.cancel(&r) {
                failed.push(r);
            }
        }
        let rr: Vec<Mid> = self.rndv_recv.keys().filter(|m| m.src as i32 == rank).copied().collect();
        failed.extend(rr.iter().filter_map(|m| self.rndv_recv.remove(m)));
        let rs: Vec<Mid> = self.rndv_send.keys().filter(|m| m.dst as i32 == rank).copied().collect();
        for m in rs {
            if let Some(s) = self.rndv_send.remove(&m) {
                failed.push(self.retire_send(s));
            }
        }
        for r in failed {
            if self.reqs.get(r).is_some_and(|q| q.as_ref().is_some_and(|q| matches!(q.state, ReqState::Pending))) {
                self.complete(r, Err(err.clone()));
            }
        }
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

    fn consume(&mut self, r: ReqId, env: Envelope, body: Body<Vec<u8>>) {
        match body {
            Body::Eager(data) => {
                let me = self.rank;
                if let Some(rp) = self.repl.as_mut() {
                    // A synchronous message queued unmatched is acknowledged now.
                    rp.ep.consumed(env_mid(&env, me));
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

    /// Receives a message taken by [`Self::mprobe`] into `cap` bytes at `ptr` (as in
    /// [`Self::irecv`]).
    pub fn mrecv(&mut self, m: Matched, ptr: *mut u8, cap: usize) -> ReqId {
        let r = self.new_req(ptr, cap, ReqState::Pending);
        self.consume(r, m.env, m.body);
        r
    }

    // ----------------------------------------------------------------- progress

    /// Makes progress: reads and writes what the sockets allow, then moves every immediate
    /// collective forward. With `timeout` `None` it never sleeps; `hint` names the peer a
    /// caller waits for, whose sockets are read directly before asking the kernel which
    /// others are ready.
    /// While a blocking call spins for a message from `hint`: watches that peer's
    /// shared-memory rings alone, up to `rounds` looks, until one shows something (or the
    /// peer has other connections, or the job is replicated: then it returns at once). A look
    /// is a load or three, where a progress round is a few hundred instructions: a frame is
    /// seen sooner after it is published.
    pub fn await_ring(&self, hint: Option<i32>, rounds: u32) {
        let Some(h) = hint.filter(|h| *h != self.rank && *h >= 0 && (*h as usize) < self.peers.len()) else { return };
        if self.repl.is_some() || !self.unread.is_empty() || !self.schedules.is_empty() {
            return;
        }
        let conns = &self.peers[h as usize].conns;
        // Quiet both ways: a frame queued for the ring (waiting for room) is written by the
        // progress round, not watched for.
        let quiet = || {
            conns.iter().all(|&c| {
                self.conns[c].as_ref().is_some_and(|c| c.shm.is_some() && c.ring_quiet() && !c.ring_backlog())
            })
        };
        for _ in 0..rounds {
            if conns.is_empty() || !quiet() {
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// The spin phase of a blocking wait for `hint` on shared memory, once [`Self::await_ring`]
    /// saw something: takes a small eager frame straight from that peer's ring, without a
    /// whole progress round (the other connections, queued writes and immediate
    /// collectives are moved by the rounds the caller makes whenever this returns `None`).
    /// `Some(true)`: the frame completed a receive (the caller looks at its request at once);
    /// `Some(false)`: it went to the unexpected queue; `None`: the fast path does not apply
    /// (another kind of frame or none, a replicated job, a peer with several connections or
    /// bytes buffered, work pending elsewhere).
    #[inline]
    pub fn ring_poll(&mut self, hint: Option<i32>) -> Option<bool> {
        let h = hint.filter(|h| *h != self.rank && *h >= 0 && *h < self.size)? as usize;
        if self.repl.is_some() || !self.unread.is_empty() || !self.schedules.is_empty() || !self.sc_broken.is_empty() {
            return None;
        }
        let [cid] = self.peers.get(h)?.conns[..] else { return None };
        let mut conn = self.conns[cid].take()?;
        let ok = conn.shm.is_some() && !conn.read_eof && conn.nothing_buffered() && !conn.ring_backlog();
        let res = if ok { self.ring_eager(&mut conn) } else { Ok(None) };
        let peer = conn.peer;
        self.conns[cid] = Some(conn);
        match res {
            Ok(r) => r,
            Err(e) => {
                self.conn_failed(cid, peer.unwrap_or(-1), e);
                None
            }
        }
    }

    /// Moves every connection forward; returns whether one gave something.
    pub fn progress(&mut self, hint: Option<i32>, timeout: Option<Duration>) -> bool {
        let got = self.progress_io(hint, timeout);
        self.advance_schedules();
        got
    }

    /// Starts an immediate collective: returns the request that completes with it. Its
    /// first steps are posted at once.
    pub(crate) fn start_schedule(&mut self, run: Box<dyn Schedule>) -> ReqId {
        let id = self.new_req(std::ptr::null_mut(), 0, ReqState::Pending);
        // A fault-aware replicated job: the request is numbered (starts are in program order,
        // unlike the posts of its steps), and completes on a replica with its master's outcome.
        let op = if self.repl.is_some() { self.next_op() } else { None };
        self.schedules.push(Scheduled { req: id, op, run });
        // Its master's failure may be known already: then it fails at once.
        self.number(id, op);
        self.advance_schedules();
        id
    }

    /// Gives up the schedule of request `id`, if one runs (its request failed by its master's
    /// outcome): its transfers are withdrawn.
    pub(super) fn drop_schedule(&mut self, id: ReqId) {
        if let Some(i) = self.schedules.iter().position(|s| s.req == id) {
            let mut s = self.schedules.swap_remove(i);
            s.run.abort(self);
        }
    }

    /// Moves every immediate collective as far as it goes; completes those that are over.
    fn advance_schedules(&mut self) {
        if self.schedules.is_empty() {
            return;
        }
        let mut live = std::mem::take(&mut self.schedules);
        if let Some(rp) = self.repl.as_mut() {
            rp.in_schedule = true;
        }
        let mut told = false;
        live.retain_mut(|s| {
            if !self.reqs.get(s.req).and_then(|r| r.as_ref()).is_some_and(|r| matches!(r.state, ReqState::Pending)) {
                // Failed meanwhile by its master's outcome.
                s.run.abort(self);
                return false;
            }
            match s.run.advance(self) {
                None => true,
                Some(r) => {
                    if let (Ok(_), Some(op)) = (&r, s.op) {
                        // A replicated rank's outcome is its master's.
                        match self.schedule_word(op) {
                            None => return true,
                            Some(t) => told |= t,
                        }
                    }
                    self.complete(s.req, r);
                    false
                }
            }
        });
        if let Some(rp) = self.repl.as_mut() {
            rp.in_schedule = false;
        }
        live.append(&mut self.schedules);
        self.schedules = live;
        if told {
            self.flush_deferred();
        }
    }

    /// Returns whether a connection gave something (a frame, or data of one).
    fn progress_io(&mut self, hint: Option<i32>, timeout: Option<Duration>) -> bool {
        self.tick = self.tick.wrapping_add(1);
        if !self.sc_broken.is_empty() {
            self.check_single_copies();
        }
        if !self.shm_conns.is_empty() {
            self.flush_rings();
        }
        if timeout.is_none() {
            if let Some(h) = hint.filter(|h| *h != self.rank && *h >= 0 && *h < self.size) {
                let mut got = false;
                let slots = match (&self.layout, self.repl.as_ref()) {
                    // A replicated rank's data comes from its master alone: its other
                    // replicas send only acknowledgements of this process's own transmissions
                    // (synchronous sends, rendez-vous pulls), awaited only while some are under
                    // way. Reading their sockets on every poll doubled the system calls of a
                    // wait at R = 2; they are read through the kernel's readiness list below.
                    (Some(l), Some(rp)) if rp.ep.idle() => match rp.ep.coordinator().master_of(h as usize) {
                        Some(m) => m..m + 1,
                        None => l.slots_of(h as usize),
                    },
                    (Some(l), _) => l.slots_of(h as usize),
                    (None, _) => h as usize..h as usize + 1,
                };
                // A replica holding backups awaits its master's commits for them: it reads
                // the master's socket too. Left to the readiness list (every 64th poll), the
                // commits piled up there, and their socket buffers, carved from the same
                // page fragments as the master's data, were freed last, by this process on
                // its own core: the master's core then refilled its page lists from the
                // buddy allocator, which a VM's free-page reporting makes slow
                // (docs/benchmarks.md, "The slow phases found: commits read late").
                let master = match self.repl.as_ref() {
                    Some(rp) if !rp.ep.is_master() && rp.ep.coordinator().backup_len() > 0 => {
                        rp.ep.coordinator().master_of(rp.ep.coordinator().rank()).filter(|m| !slots.contains(m))
                    }
                    _ => None,
                };
                for slot in slots.chain(master) {
                    let mut i = 0;
                    while let Some(&cid) = self.peers[slot].conns.get(i) {
                        got |= self.read_conn(cid);
                        i += 1;
                    }
                }
                self.flush_deferred();
                if got || self.tick % 64 != 0 {
                    return got;
                }
            }
        }
        let mut t = if self.unread.is_empty() { timeout.unwrap_or(Duration::ZERO) } else { Duration::ZERO };
        if !self.sc_broken.is_empty() {
            // A failed single copy is looked at again soon (see `check_single_copies`).
            t = t.min(Duration::from_millis(50));
        }
        let mut got = false;
        for cid in std::mem::take(&mut self.unread) {
            got |= self.read_conn(cid);
        }
        let armed = !t.is_zero() && !self.shm_conns.is_empty();
        if armed && self.arm_rings() {
            t = Duration::ZERO;
        }
        let polled = self.poll.poll(&mut self.events, Some(t));
        if armed {
            for &cid in &self.shm_conns {
                if let Some(l) = self.conns[cid].as_ref().and_then(|c| c.shm.as_deref()) {
                    l.disarm();
                }
            }
        }
        if let Err(e) = polled {
            if e.kind() != io::ErrorKind::Interrupted {
                self.set_fatal(e.into());
            }
            return false;
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
                if let Some(c) = self.conns.get_mut(cid).and_then(Option::as_mut) {
                    c.sock_check = true;
                }
                got |= self.read_conn(cid);
            }
        }
        self.ready = ready;
        let mut i = 0;
        while let Some(&cid) = self.shm_conns.get(i) {
            got |= self.read_conn(cid);
            i += 1;
        }
        self.flush_deferred();
        got
    }

    // ----------------------------------------------------------------- shared memory

    /// Whether this process and slot `peer` may use shared memory (the policy, and neither
    /// a replicated nor an encrypted job: those keep TCP).
    fn shm_allowed(&self, peer: i32) -> bool {
        let in_world = peer >= self.world_base && peer < self.world_base + self.world_size;
        in_world && !self.encrypt && self.shm_policy.allows(self.slot, peer)
    }

    /// Whether slot `peer` listens on this process's own address: the host address the
    /// bootstrap knows. (Distinct loopback addresses are distinct hosts: a grid simulated on
    /// one machine gives each peer its own, and tests cut them apart with firewall rules.)
    /// The acceptor's check is the segment itself: on another host it does not exist.
    fn same_host(&self, peer: i32) -> bool {
        let Some(me) = self.local_addr().map(|a| a.ip()) else { return false };
        self.addrs[peer as usize].ip() == me
    }

    fn shm_note(&self, msg: &str) {
        if self.shm_policy.debug {
            eprintln!("p2pmpi: rank {}: {msg}", self.rank);
        }
    }

    /// The opening is done and both sides mapped the segment: every later frame goes
    /// through it.
    fn shm_activate(
        &mut self,
        cid: usize,
        conn: &mut Conn,
        mut link: Box<shm::Link>,
        peer: i32,
    ) -> std::result::Result<(), ConnError> {
        link.unlink();
        if conn.buffered() != 0 {
            return Err(ConnError::Protocol(format!("{} bytes on TCP after the opening", conn.buffered())));
        }
        let rank = self.rank_of(peer);
        if self.repl.is_none() {
            // Replicated jobs send every message through their own protocol (no single copy).
            match link.probe_single_copy(self.shm_policy.single_copy) {
                Ok(pid) => self.shm_note(&format!("single copy from rank {rank} (pid {pid})")),
                Err(e) => self.shm_note(&format!("no single copy from rank {rank}: {e}")),
            }
        }
        conn.shm = Some(link);
        if !self.shm_conns.contains(&cid) {
            self.shm_conns.push(cid);
        }
        self.shm_note(&format!("shared memory with rank {rank}"));
        Ok(())
    }

    /// Writes what the rings take of the frames queued for them.
    fn flush_rings(&mut self) {
        let mut i = 0;
        while let Some(&cid) = self.shm_conns.get(i) {
            if self.conns[cid].as_ref().is_some_and(|c| c.ring_backlog()) {
                self.flush_conn(cid);
            }
            i += 1;
        }
    }

    /// Before sleeping: asks every ring's peer for a doorbell. Returns whether one of them
    /// is ready already (then the poll must not sleep).
    fn arm_rings(&self) -> bool {
        let mut ready = false;
        for &cid in &self.shm_conns {
            if let Some(c) = self.conns[cid].as_ref().filter(|c| !c.read_eof) {
                if let Some(l) = c.shm.as_deref() {
                    ready |= l.arm(c.ring_backlog());
                }
            }
        }
        ready
    }

    fn accept_all(&mut self) {
        loop {
            let Some(l) = self.listener.as_ref() else { return };
            match l.accept() {
                Ok((mut stream, _addr)) => {
                    let _ = stream.set_nodelay(true);
                    conn::tune_loopback_link(socket2::SockRef::from(&stream));
                    self.prune_openings();
                    let cid = self.conns.iter().position(Option::is_none).unwrap_or_else(|| {
                        self.conns.push(None);
                        self.conns.len() - 1
                    });
                    if self.poll.registry().register(&mut stream, Token(cid), Interest::READABLE).is_ok() {
                        self.conns[cid] = Some(Box::new(Conn::accepted(stream)));
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

    /// Drops accepted connections that did not prove the job key within [`HANDSHAKE_LIMIT`],
    /// and the oldest ones beyond [`MAX_PENDING`] - 1 (room for one more) that waited more
    /// than [`PENDING_GRACE`].
    fn prune_openings(&mut self) {
        let mut pending: Vec<(Instant, usize)> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().filter(|c| c.peer.is_none()).map(|c| (c.opened, i)))
            .collect();
        pending.sort();
        let excess = pending.len().saturating_sub(MAX_PENDING - 1);
        for (k, (opened, cid)) in pending.into_iter().enumerate() {
            let late = opened.elapsed() > HANDSHAKE_LIMIT * load_factor();
            if (k < excess && opened.elapsed() > PENDING_GRACE) || late {
                let Some(mut c) = self.conns[cid].take() else { continue };
                let _ = self.poll.registry().deregister(&mut c.stream);
                let why = if late {
                    format!("it did not prove the job key within {} s", (HANDSHAKE_LIMIT * load_factor()).as_secs())
                } else {
                    format!("more than {MAX_PENDING} connections were waiting to prove the job key")
                };
                self.log_refusal(&format!("dropped a connection from {}: {why}", c.peer_addr()));
            }
        }
    }

    /// Logs a refused connection: at most 10 lines per 10 s, then how many were not shown.
    fn log_refusal(&mut self, msg: &str) {
        let (since, lines, hidden) = &mut self.refusals;
        if since.elapsed() > Duration::from_secs(10) {
            if *hidden > 0 {
                log_warn(self.rank, &format!("{hidden} more connection(s) refused and not shown"));
            }
            *since = Instant::now();
            *lines = 0;
            *hidden = 0;
        }
        if *lines < 10 {
            *lines += 1;
            log_warn(self.rank, msg);
        } else {
            *hidden += 1;
        }
    }

    fn flush_conn(&mut self, cid: usize) {
        if self.repl.is_some() {
            crate::lease::wait_lease();
        }
        let Some(conn) = self.conns[cid].as_mut() else { return };
        let peer = conn.peer.unwrap_or(-1);
        if let Some(rp) = self.repl.as_mut().filter(|_| peer >= 0) {
            // The peer takes data: its stall timer starts again.
            let now = rp.now();
            rp.ep.progress(now, peer as usize);
        }
        let Some(conn) = self.conns[cid].as_mut() else { return };
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
        if self.conns.get(cid).and_then(Option::as_ref).is_none_or(|c| c.read_eof || c.ring_quiet()) {
            return false;
        }
        let Some(mut conn) = self.conns.get_mut(cid).and_then(Option::take) else { return false };
        let mut got = false;
        // A sender faster than this process must not keep it here: past the budget it goes
        // back to its caller (whose request may be complete) and reads on at the next call.
        let mut budget = READ_BUDGET;
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
                        budget = budget.saturating_sub(n);
                        if left == 0 {
                            conn.rstate = RState::Header;
                            let streamed = conn.stream_undo.take().map(|u| u.0).map(|env| env_mid(&env, self.rank));
                            if let Some((env, mut data)) = conn.stream_unexpected.take() {
                                // SAFETY: the buffer was created empty with room for `env.len`
                                // bytes (`pool::with_room`), and the stream, now complete
                                // (`left == 0`), wrote all of them through its pointer.
                                unsafe { data.set_len(env.len as usize) };
                                conn.stream_status = None;
                                if std::mem::take(&mut conn.arrive_when_complete) {
                                    let sync = std::mem::take(&mut conn.stream_sync);
                                    if std::mem::take(&mut conn.stream_relay) {
                                        self.relayed(env, Eager::Owned(data));
                                    } else {
                                        self.accept_eager(env, Eager::Owned(data), sync);
                                    }
                                } else if let Some((r, Body::Eager(data))) =
                                    self.matcher.deliver_late(env, Body::Eager(data))
                                {
                                    self.fill(r, &env, &data);
                                    crate::pool::give(data);
                                }
                            } else if !discard {
                                if let Some(st) = conn.stream_status.take() {
                                    self.complete(req, Ok(st));
                                    // Shared receives: a replicated message whole here.
                                    if let Some(m) = streamed.or(conn.rndv_stream.map(|s| s.0)) {
                                        self.share_in(m, req);
                                    }
                                }
                            }
                            if let Some((m, _)) = conn.rndv_stream.take() {
                                // A replicated rendez-vous message is whole here.
                                if let Some(rp) = self.repl.as_mut() {
                                    rp.ep.have(m);
                                }
                            }
                            continue;
                        }
                        if n == 0 {
                            break Ok(());
                        }
                        if budget == 0 {
                            if !self.unread.contains(&cid) {
                                self.unread.push(cid);
                            }
                            break Ok(());
                        }
                        continue;
                    }
                    Err(e) => break Err(e),
                }
            }
            // Whole frames already buffered.
            match if conn.header_buffered() { conn.next_frame() } else { Ok(None) } {
                Ok(Some((h, payload_range))) => {
                    got = true;
                    self.filled = false;
                    if let Err(e) = self.handle_frame(cid, &mut conn, h, payload_range) {
                        break Err(e);
                    }
                    if self.filled && conn.shm.is_some() {
                        // As after `ring_eager`: what is still buffered is read at the next
                        // progress call (a shared-memory connection is looked at on each).
                        break Ok(());
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            if budget == 0 {
                if !self.unread.contains(&cid) {
                    self.unread.push(cid);
                }
                break Ok(());
            }
            if conn.ring_quiet() {
                // A shared-memory connection with nothing more published: no need to look.
                break Ok(());
            }
            if conn.nothing_buffered() && self.repl.is_none() {
                // Nothing buffered: a small eager frame is taken straight from the ring.
                match self.ring_eager(&mut conn) {
                    // A receive completed: back to the caller, who may be waiting for just
                    // that one (reading on would move what follows into the unexpected queue,
                    // to be copied twice, when the caller's next receive could take it
                    // straight from the ring).
                    Ok(Some(true)) => {
                        got = true;
                        break Ok(());
                    }
                    Ok(Some(false)) => {
                        got = true;
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => break Err(e),
                }
            }
            match conn.fill() {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    got = true;
                    budget = budget.saturating_sub(n);
                }
                Err(e) => break Err(e),
            }
        };
        let peer = conn.peer;
        let kick = std::mem::take(&mut conn.kick);
        self.conns[cid] = Some(conn);
        if let Err(e) = outcome {
            self.conn_failed(cid, peer.unwrap_or(-1), e);
        } else if kick {
            // The opening moved on: write its frame, and what waited behind the gate.
            self.flush_conn(cid);
        }
        got
    }

    /// The same-host fast path of an unreplicated job: an eager frame whose header and
    /// payload lie in one piece at the read position of a shared-memory connection is matched
    /// and copied straight from the ring into its receive (or into the unexpected queue),
    /// without passing through the connection's read buffer. Returns whether it took a frame
    /// (`None`: it did not), and whether that frame completed a receive; anything else (other kinds, a frame that wraps around the ring's end or is not whole
    /// yet, a connection still opening or streaming) is left to the general path.
    fn ring_eager(&mut self, conn: &mut Conn) -> std::result::Result<Option<bool>, ConnError> {
        if !matches!(conn.rstate, RState::Header) || !conn.authenticated() {
            return Ok(None);
        }
        let (Some(slot), Some(l)) = (conn.peer, conn.shm.as_deref_mut()) else { return Ok(None) };
        let Some((hb, contiguous)) =
            l.peek_header::<{ p2pmpi_wire::frame::HEADER_LEN }>().map_err(ConnError::Protocol)?
        else {
            return Ok(None);
        };
        let h = Header::decode(&hb, conn.max_eager).map_err(|e| ConnError::Protocol(e.to_string()))?;
        let mid = h.mid;
        let peer = self.rank_of(slot);
        let total = p2pmpi_wire::frame::HEADER_LEN + h.len as usize;
        if h.kind != FrameKind::Eager
            || conn::is_streamed(&h)
            || total > contiguous
            || mid.src as i32 != peer
            || mid.dst as i32 != self.rank
        {
            return Ok(None);
        }
        let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
        let data = l.at_head(p2pmpi_wire::frame::HEADER_LEN);
        let len = h.len as usize;
        let mut matched = false;
        match self.matcher.arrive(&env) {
            Arrival::Matched(r) => {
                matched = true;
                self.traced(&env);
                self.note_match(r, &env);
                let req = self.req_mut(r);
                let st = if len > req.cap {
                    Err(Error::Truncated {
                        from_rank: env.src,
                        tag: env.tag,
                        message_bytes: env.len,
                        buffer_bytes: req.cap,
                    })
                } else {
                    if len != 0 {
                        // SAFETY: `data` points at the `len` payload bytes that `peek_header`
                        // found published in one piece (`total <= contiguous`), ours until
                        // `consume` below; `req.ptr` is valid for writes of `req.cap >= len`
                        // bytes until the request completes (`irecv`'s contract; it completes
                        // just below) and is not the ring's memory.
                        unsafe { std::ptr::copy_nonoverlapping(data, req.ptr, len) };
                    }
                    Ok(StatusInfo { source: env.src, tag: env.tag, len: env.len, cancelled: false })
                };
                self.complete(r, st);
            }
            Arrival::Unmatched => {
                self.traced(&env);
                let mut v = crate::pool::with_room(len);
                // SAFETY: as above for `data`; `v` has room for `len` bytes, all written by the
                // copy before its length is set.
                unsafe {
                    std::ptr::copy_nonoverlapping(data, v.as_mut_ptr(), len);
                    v.set_len(len);
                }
                self.matcher.enqueue(env, Body::Eager(v));
            }
            Arrival::Duplicate => {}
            Arrival::Early => return Err(ConnError::Protocol(format!("message {mid:?} out of order"))),
        }
        if l.consume(total) {
            conn.doorbell();
        }
        Ok(Some(matched))
    }

    fn handle_frame(
        &mut self,
        cid: usize,
        conn: &mut Conn,
        h: Header,
        payload: std::ops::Range<usize>,
    ) -> std::result::Result<(), ConnError> {
        if !conn.authenticated() {
            return self.opening_frame(cid, conn, h, payload);
        }
        let Some(peer) = conn.peer else {
            return Err(ConnError::Protocol("authenticated connection without a peer".into()));
        };
        if self.draining == Some(peer)
            && (!matches!(h.kind, FrameKind::Eager | FrameKind::ReadyToSend | FrameKind::Data)
                || h.flags & p2pmpi_wire::frame::flags::SINGLE_COPY != 0)
        {
            // The connection is being dropped: its messages are taken (eager data,
            // rendez-vous announcements and data: what the sender's successor would send
            // again), its control frames count for nothing (fencing).
            return Ok(());
        }
        let proto = |d: String| ConnError::Protocol(d);
        let mid = h.mid;
        // `peer` is a slot; messages name ranks.
        let slot = peer;
        let peer = self.rank_of(slot);
        let from_peer = mid.src as i32 == peer && mid.dst as i32 == self.rank;
        match h.kind {
            FrameKind::Hello | FrameKind::Challenge | FrameKind::Auth => {
                return Err(proto(format!("{:?} frame after the opening", h.kind)))
            }
            FrameKind::Bye => {
                self.peers[slot as usize].bye = true;
            }
            FrameKind::Commit | FrameKind::Choice => self.replica_control_frame(slot, h)?,
            FrameKind::Data if h.flags & p2pmpi_wire::frame::flags::RELAY != 0 => self.relay_frame(conn, h, slot)?,
            FrameKind::Eager if self.repl.is_some() && conn::is_streamed(&h) => {
                self.replica_streamed_eager(conn, h, peer)
            }
            FrameKind::Eager | FrameKind::ReadyToSend if !from_peer => {
                return Err(proto(format!("{:?} frame with MID {mid:?} on rank {peer}'s connection", h.kind)))
            }
            FrameKind::Eager if conn::is_streamed(&h) => self.streamed_eager(conn, h, peer)?,
            FrameKind::Eager if self.repl.is_some() => {
                let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
                let sync = h.flags & p2pmpi_wire::frame::flags::SYNCHRONOUS != 0;
                self.accept_eager(env, Eager::Borrowed(&conn.rbuf[payload]), sync);
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
            FrameKind::ReadyToSend if self.repl.is_some() && from_peer => {
                let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
                let sync = h.flags & p2pmpi_wire::frame::flags::SYNCHRONOUS != 0;
                self.accept_announcement(env, sync);
            }
            FrameKind::Data if self.repl.is_some() && from_peer => {
                let st = StatusInfo { source: peer, tag: mid.tag, len: h.len, cancelled: false };
                match self.rndv_recv.remove(&mid) {
                    Some(r) => {
                        self.begin_stream(conn, r, st);
                        if matches!(conn.rstate, RState::Stream { .. }) {
                            conn.rndv_stream = Some((mid, r));
                        } else if let Some(rp) = self.repl.as_mut() {
                            rp.ep.have(mid);
                            self.share_in(mid, r);
                        }
                    }
                    // Sent again by a new master after its predecessor's copy arrived whole.
                    None => {
                        conn.skip_payload(st, h.len as usize);
                    }
                }
            }
            FrameKind::ReadyToSend => self.announcement_frame(conn, h, payload, slot, peer)?,
            FrameKind::ReadyToRecv if self.repl.is_some() => {
                // A destination replica pulls a rendez-vous message, has it, or acknowledges a
                // synchronous eager one.
                use p2pmpi_wire::frame::flags;
                if mid.src as i32 == self.rank && mid.dst as i32 == peer {
                    if let Some(rp) = self.repl.as_mut() {
                        if h.flags & (flags::PULL | flags::HAVE) != 0 {
                            rp.on_pull(slot as usize, mid, h.flags & flags::HAVE != 0);
                        } else {
                            rp.on_sync_ack(slot as usize, mid);
                        }
                    }
                } else if peer == self.rank && mid.dst as i32 == self.rank && h.flags & flags::HAVE != 0 {
                    // Shared receives: a replica of this rank has a message of another.
                    if let Some(rp) = self.repl.as_mut() {
                        rp.on_received(slot as usize, mid);
                    }
                }
            }
            FrameKind::ReadyToRecv => self.ready_to_recv_frame(h, peer)?,
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

    /// A commit or a choice frame of a replicated job (from a replica of this rank): the
    /// endpoint takes it.
    fn replica_control_frame(&mut self, slot: i32, h: Header) -> std::result::Result<(), ConnError> {
        let mid = h.mid;
        if h.kind == FrameKind::Commit {
            let Some(rp) = self.repl.as_mut() else {
                return Err(ConnError::Protocol("commit in a job without replicas".into()));
            };
            if rp.ep.is_dead(slot as usize) {
                // Fencing: a declared-dead replica's commit counts for nothing.
                return Ok(());
            }
            let acked = h.flags & p2pmpi_wire::frame::flags::ACKED != 0;
            if !rp.on_commit(slot as usize, mid, acked) {
                return Err(ConnError::Protocol(format!(
                    "commit of {mid:?} from slot {slot}, not a replica of this rank"
                )));
            }
        } else {
            use p2pmpi_wire::frame::flags;
            let Some(rp) = self.repl.as_mut() else {
                return Err(ConnError::Protocol("choice in a job without replicas".into()));
            };
            if rp.ep.is_dead(slot as usize) {
                return Ok(());
            }
            let from = slot as usize;
            let ok = if h.flags & flags::ACK != 0 {
                rp.on_choice_ack(from, mid.seq)
            } else if h.flags & flags::QUERY != 0 {
                rp.on_choice_query(from)
            } else if h.flags & flags::TOLD != 0 {
                rp.on_choices_told(from)
            } else {
                let o = (h.flags & flags::NOTHING == 0).then_some((mid.src as i32, mid.tag, h.len));
                if p2pmpi_core::replication::failures::op_of_point(mid.seq).is_some() {
                    rp.words = true;
                }
                rp.on_choice(from, mid.seq, o)
            };
            if !ok {
                return Err(ConnError::Protocol(format!("choice from slot {slot}, not a replica of this rank")));
            }
        }
        Ok(())
    }

    /// An eager message of a replicated job too large for the connection's buffer: streamed
    /// into the matching receive, or kept whole until it is matched.
    fn replica_streamed_eager(&mut self, conn: &mut Conn, h: Header, peer: i32) {
        let mid = h.mid;
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
            return;
        }
        // Otherwise kept whole before it is matched: a sender dying mid-message
        // leaves no trace.
        // Not zero-filled: the stream writes every byte before the length is set.
        let mut data = crate::pool::with_room(h.len as usize);
        let ptr = data.as_mut_ptr();
        conn.stream_unexpected = Some((env, data));
        conn.stream_status = Some(StatusInfo { source: peer, tag: mid.tag, len: h.len, cancelled: false });
        conn.arrive_when_complete = true;
        conn.stream_sync = h.flags & p2pmpi_wire::frame::flags::SYNCHRONOUS != 0;
        conn.rstate = RState::Stream { req: usize::MAX, ptr, left: h.len as usize, discard: false };
    }

    /// An eager message too large for the connection's buffer: streamed into the matching
    /// receive, or into a buffer of its own until one matches.
    fn streamed_eager(&mut self, conn: &mut Conn, h: Header, peer: i32) -> std::result::Result<(), ConnError> {
        let mid = h.mid;
        let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
        let st = StatusInfo { source: peer, tag: mid.tag, len: h.len, cancelled: false };
        match self.matcher.arrive(&env) {
            Arrival::Matched(r) => {
                self.traced(&env);
                self.begin_stream(conn, r, st)
            }
            Arrival::Early => return Err(ConnError::Protocol(format!("message {mid:?} out of order"))),
            Arrival::Unmatched => {
                self.traced(&env);
                let mut data = crate::pool::with_room(h.len as usize);
                let ptr = data.as_mut_ptr();
                conn.stream_unexpected = Some((env, data));
                conn.stream_status = Some(st);
                conn.rstate = RState::Stream { req: usize::MAX, ptr, left: h.len as usize, discard: false };
            }
            Arrival::Duplicate => {
                conn.skip_payload(st, h.len as usize);
            }
        }
        Ok(())
    }

    /// A rendez-vous announcement (READY_TO_SEND; single-copy ones carry their ticket).
    fn announcement_frame(
        &mut self,
        conn: &mut Conn,
        h: Header,
        payload: std::ops::Range<usize>,
        slot: i32,
        peer: i32,
    ) -> std::result::Result<(), ConnError> {
        let mid = h.mid;
        let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
        if h.flags & p2pmpi_wire::frame::flags::SINGLE_COPY != 0 {
            let Some(pid) = conn.shm.as_deref().and_then(|l| l.peer_pid()) else {
                return Err(ConnError::Protocol(format!(
                    "single-copy announcement of {mid:?} that this process may not read"
                )));
            };
            let b = &conn.rbuf[payload];
            let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
            if b.len() != p2pmpi_wire::frame::SINGLE_COPY_LEN as usize || h.len == 0 {
                return Err(ConnError::Protocol(format!("bad single-copy announcement of {mid:?}")));
            }
            // Taken by the receive that matches it (now or once queued).
            self.sc_in.insert(mid, ScSource { slot, pid, addr: word(0), ticket: word(1), value: word(2) });
        }
        match self.matcher.arrive(&env) {
            Arrival::Matched(r) => {
                self.traced(&env);
                self.start_rndv_recv(r, &env)
            }
            Arrival::Unmatched => {
                self.traced(&env);
                self.matcher.enqueue(env, Body::Rendezvous)
            }
            Arrival::Duplicate => {
                self.sc_in.remove(&mid);
            }
            Arrival::Early => return Err(ConnError::Protocol(format!("message {mid:?} out of order"))),
        }
        Ok(())
    }

    /// The receiver of a rendez-vous message is ready (READY_TO_RECV): its data goes out, or,
    /// single-copy, the send is complete.
    fn ready_to_recv_frame(&mut self, h: Header, peer: i32) -> std::result::Result<(), ConnError> {
        let mid = h.mid;
        if mid.src as i32 != self.rank || mid.dst as i32 != peer {
            return Err(ConnError::Protocol(format!("READY_TO_RECV for MID {mid:?} from rank {peer}")));
        }
        if h.flags & p2pmpi_wire::frame::flags::SINGLE_COPY != 0 {
            // The receiver copied the data: the send is complete. (Unknown: a send
            // withdrawn meanwhile, whose ticket the receiver found cleared.)
            if let Some(s) = self.rndv_send.remove(&mid) {
                let req = self.retire_send(s);
                let st = StatusInfo { source: peer, tag: 0, len: 0, cancelled: false };
                self.complete(req, Ok(st));
            }
            return Ok(());
        }
        let Some(s) = self.rndv_send.remove(&mid) else {
            return Err(ConnError::Protocol(format!("READY_TO_RECV for unknown MID {mid:?}")));
        };
        if s.ticket.is_some() {
            return Err(ConnError::Protocol(format!("READY_TO_RECV for a single-copy send {mid:?}")));
        }
        let data = Header::new(FrameKind::Data, mid, s.len as u64);
        let payload = if s.len == 0 { Payload::None } else { Payload::Raw(s.ptr, s.len) };
        self.deferred.push((peer, Out::with_completion(data, payload, s.req)));
        Ok(())
    }

    /// A frame of a connection's opening (see [`p2pmpi_wire::auth`]): the acceptor answers
    /// `Hello` with its `Challenge` and checks the connector's `Auth`; the connector checks
    /// the `Challenge` and answers with its `Auth`, which opens its gate.
    fn opening_frame(
        &mut self,
        cid: usize,
        conn: &mut Conn,
        h: Header,
        payload: std::ops::Range<usize>,
    ) -> std::result::Result<(), ConnError> {
        let proto = |d: String| ConnError::Protocol(d);
        let bytes = conn.rbuf.get(payload).ok_or_else(|| proto("opening frame outside the buffer".into()))?;
        let me = self.slot;
        let (src, dst) = (h.mid.src as i32, h.mid.dst as i32);
        // (A slot beyond the known ones is not failed: a spawned process, known once it
        // proved the job key.)
        let failed =
            |r: i32| self.repl.as_ref().is_some_and(|rp| (r as usize) < self.peers.len() && rp.ep.is_cut(r as usize));
        match (conn.auth, h.kind) {
            (Auth::AwaitHello, FrameKind::Hello) => {
                // Beyond the known processes: one spawned by this job (or by a child of it),
                // known once it proved the job key (every replica of a universe id, in a
                // replicated job).
                let known = match &self.layout {
                    None => MAX_UNIVERSE as usize,
                    Some(l) => MAX_UNIVERSE as usize * l.r,
                };
                if src < 0 || src as usize >= known || src == me || dst != me {
                    return Err(proto(format!("Hello from invalid slot {src} to slot {dst}")));
                }
                if failed(src) {
                    return Err(proto(format!("Hello from slot {src}, which failed")));
                }
                let nc: auth::Nonce = bytes.try_into().map_err(|_| proto("bad Hello".into()))?;
                let na = auth::nonce();
                let proof = auth::data_proof(&self.key, Role::DataAcceptor, src as u32, me as u32, &nc, &na);
                let mut p = Vec::with_capacity(CHALLENGE_LEN as usize);
                p.extend_from_slice(&na);
                p.extend_from_slice(&proof);
                let mid = Mid { comm: 0, src: me as u32, dst: src as u32, tag: 0, seq: 0 };
                if self.repl.is_some() {
                    crate::lease::wait_lease();
                }
                let mut challenge = Header::new(FrameKind::Challenge, mid, CHALLENGE_LEN);
                if h.flags & p2pmpi_wire::frame::flags::SHM != 0 && self.shm_allowed(src) {
                    // Mapped (and unlinked) now, used once the connector proved the key.
                    match shm::Link::open(&self.key, &nc) {
                        Ok(l) => {
                            conn.shm_offer = Some(Box::new(l));
                            challenge.flags |= p2pmpi_wire::frame::flags::SHM;
                        }
                        Err(e) => self.shm_note(&format!("no shared memory with slot {src} (TCP instead): {e}")),
                    }
                }
                conn.push(Out::handshake(challenge, Payload::Owned(p)))?;
                conn.auth = Auth::AwaitProof { slot: src, nc, na };
                conn.kick = true;
                Ok(())
            }
            (Auth::AwaitProof { slot, nc, na }, FrameKind::Auth) => {
                if src != slot || dst != me {
                    return Err(proto(format!("Auth from slot {src} on slot {slot}'s opening")));
                }
                if bytes.len() != AUTH_LEN as usize
                    || !auth::verify_data_proof(&self.key, Role::DataConnector, slot as u32, me as u32, &nc, &na, bytes)
                {
                    return Err(proto(format!(
                        "a process claiming slot {slot} failed to prove the job key (wrong key or replayed opening)"
                    )));
                }
                if failed(slot) {
                    return Err(proto(format!("Hello from slot {slot}, which failed")));
                }
                conn.auth = Auth::Done;
                conn.grow_rbuf();
                if self.encrypt {
                    let (c2a, a2c) = auth::session_keys(&self.key, slot as u32, me as u32, &nc, &na);
                    conn.seal(&a2c, &c2a);
                }
                conn.peer = Some(slot);
                if let Some(l) = conn.shm_offer.take() {
                    self.shm_activate(cid, conn, l, slot)?;
                }
                self.grow(self.rank_of(slot) as usize + 1);
                let p = &mut self.peers[slot as usize];
                p.conns.push(cid);
                if p.send_conn.is_none() {
                    p.send_conn = Some(cid);
                }
                Ok(())
            }
            (Auth::AwaitChallenge { nc }, FrameKind::Challenge) => {
                let peer = conn.peer.unwrap_or(-1);
                if src != peer || dst != me || bytes.len() != CHALLENGE_LEN as usize {
                    return Err(proto(format!("Challenge from slot {src} on the connection to slot {peer}")));
                }
                let (na, proof) = bytes.split_at(auth::NONCE_LEN);
                let na: auth::Nonce = na.try_into().map_err(|_| proto("bad Challenge".into()))?;
                if !auth::verify_data_proof(&self.key, Role::DataAcceptor, me as u32, peer as u32, &nc, &na, proof) {
                    return Err(proto(format!("the process at slot {peer}'s address failed to prove the job key")));
                }
                if self.encrypt {
                    let (c2a, a2c) = auth::session_keys(&self.key, me as u32, peer as u32, &nc, &na);
                    conn.seal(&c2a, &a2c);
                }
                // Refused (another host, or shared memory off there): TCP, and the segment is
                // removed as the offer drops.
                let offer = conn.shm_offer.take().filter(|_| h.flags & p2pmpi_wire::frame::flags::SHM != 0);
                if let Some(l) = offer {
                    self.shm_activate(cid, conn, l, peer)?;
                }
                let mine = auth::data_proof(&self.key, Role::DataConnector, me as u32, peer as u32, &nc, &na);
                let mid = Mid { comm: 0, src: me as u32, dst: peer as u32, tag: 0, seq: 0 };
                conn.push_handshake_first(Out::handshake(
                    Header::new(FrameKind::Auth, mid, AUTH_LEN),
                    Payload::Owned(mine.to_vec()),
                ));
                conn.auth = Auth::Done;
                conn.gated = false;
                conn.kick = true;
                Ok(())
            }
            (state, kind) => Err(proto(format!(
                "{kind:?} frame during the opening ({})",
                match state {
                    Auth::AwaitHello => "expected Hello",
                    Auth::AwaitProof { .. } => "expected Auth",
                    Auth::AwaitChallenge { .. } => "expected Challenge",
                    Auth::Done => "done",
                }
            ))),
        }
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
        self.shm_conns.retain(|c| *c != cid);
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
                    // A replica is gone: suspected; the launcher decides (fencing).
                    self.undo_stream(&mut conn);
                    let done = conn.take_completions();
                    self.forget_completions(done);
                    self.suspect_slot(peer, &cause);
                    return;
                }
                let unsent = conn.take_completions();
                self.lose_peer(peer, cause, unsent);
            }
        } else if let ConnError::Protocol(d) = e {
            self.log_refusal(&format!("dropped a connection from {}: {d}", conn.peer_addr()));
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
        // Its connections are dropped (a frozen process's would hold queued sends forever).
        let mut unsent = Vec::new();
        if self.failure_tolerant() && rank >= 0 && (rank as usize) < self.peers.len() {
            for cid in std::mem::take(&mut self.peers[rank as usize].conns) {
                if let Some(mut conn) = self.conns[cid].take() {
                    let _ = self.poll.registry().deregister(&mut conn.stream);
                    unsent.extend(conn.take_completions());
                }
                self.shm_conns.retain(|c| *c != cid);
            }
            self.peers[rank as usize].send_conn = None;
        }
        self.lose_peer(rank, "declared failed by the failure detector".into(), unsent);
    }

    /// Whether the communicator of MID communicator id `comm` (point-to-point or collective
    /// traffic of one context) was revoked. Revocations told since the last call are applied
    /// first.
    #[inline]
    pub(crate) fn is_revoked(&mut self, comm: u32) -> bool {
        if revocations::PENDING.load(std::sync::atomic::Ordering::Relaxed) {
            self.apply_revocations();
        }
        !self.revoked.is_empty() && self.comm_revoked(comm)
    }

    #[cold]
    #[inline(never)]
    fn apply_revocations(&mut self) {
        for ctx in revocations::take() {
            match self.repl.as_mut() {
                // A non-master's operations fail when its master says (it applies the
                // revocation itself only if it takes over).
                Some(rp) if !rp.ep.is_master() => rp.unapplied.push(ctx),
                _ => self.revoke(ctx),
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn comm_revoked(&self, comm: u32) -> bool {
        self.revoked.contains(&(comm / 2))
    }

    /// Communicator context `ctx` was revoked (ULFM's `MPIX_Comm_revoke`): its posted
    /// receives and rendez-vous transfers fail with [`Error::Revoked`], and so will anything
    /// posted on it later. Sends already written complete as usual.
    pub(crate) fn revoke(&mut self, ctx: u32) {
        if !self.revoked.insert(ctx) {
            return;
        }
        let of = |comm: u32| comm / 2 == ctx;
        let mut failed = Vec::new();
        let posted: Vec<ReqId> = self.matcher.posted().filter(|(p, _)| of(p.comm)).map(|(_, r)| *r).collect();
        for r in posted {
            if self.matcher.cancel(&r) {
                failed.push(r);
            }
        }
        let rr: Vec<Mid> = self.rndv_recv.keys().filter(|m| of(m.comm)).copied().collect();
        failed.extend(rr.iter().filter_map(|m| self.rndv_recv.remove(m)));
        let rs: Vec<Mid> = self.rndv_send.keys().filter(|m| of(m.comm)).copied().collect();
        for m in rs {
            if let Some(s) = self.rndv_send.remove(&m) {
                failed.push(self.retire_send(s));
            }
        }
        for r in failed {
            if self.reqs.get(r).is_some_and(|q| q.as_ref().is_some_and(|q| matches!(q.state, ReqState::Pending))) {
                self.complete(r, Err(Error::Revoked));
            }
        }
    }

    /// Withdraws receive `id` if it is still posted (unmatched) and fails it with `err`.
    pub(crate) fn fail_receive(&mut self, id: ReqId, err: Error) -> bool {
        if self.is_done(id) || !self.matcher.cancel(&id) {
            return false;
        }
        self.complete(id, Err(err));
        true
    }

    /// Why world rank `rank` was lost (a program that handles failures goes on without it).
    pub(crate) fn lost_cause(&self, rank: i32) -> Option<String> {
        self.lost.get(&rank).cloned()
    }

    /// Whether this process runs as one of several replicas of its rank.
    pub(crate) fn replicated(&self) -> bool {
        self.repl.is_some()
    }

    /// A program that handles failures: a lost peer (with `-r R`, a rank lost whole) does
    /// not end communication.
    fn failure_tolerant(&self) -> bool {
        crate::lifecycle::policy() == crate::lifecycle::Policy::Notify
    }

    /// Gives up when a send has made no progress for `limit` (2·T_cleanup, FM §5.3): the
    /// destination takes no data, although the failure detector may still hear of it (a
    /// firewall that lets only some addresses through).
    pub(crate) fn check_stalled_sends(&mut self, limit: Duration) {
        if let Some(rp) = self.repl.as_mut() {
            // The endpoint's timers: transmissions and choices a replica does not take, a
            // message waiting for an earlier one of its channel lost with a dead replica.
            rp.timers(limit);
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
        let repl_idle = self.repl.as_ref().is_none_or(|rp| rp.ep.idle());
        repl_idle
            && self.rndv_send.is_empty()
            && self.deferred.is_empty()
            && self.conns.iter().flatten().all(|c| c.outq.is_empty())
    }

    /// Says `Bye` on every connection to a peer and shuts down the sending side.
    pub fn send_byes(&mut self) {
        if self.sc_count > 0 {
            self.shm_note(&format!("{} messages received by single copy", self.sc_count));
        }
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

/// Connects to `addr` from `local` (this process's own address, so that the peer, its
/// firewall and HOST_DENY see the host it really comes from — on loopback an unbound socket
/// would leave from 127.0.0.1), retrying until `total` has passed.
/// Universe ids (processes of a job and every process it spawned) accepted in an opening.
const MAX_UNIVERSE: i32 = 1 << 16;

/// A slot of the request table for `r` (a freed one if any).
fn alloc_req(reqs: &mut Vec<Option<Req>>, free: &mut Vec<ReqId>, r: Req) -> ReqId {
    match free.pop() {
        Some(id) => {
            reqs[id] = Some(r);
            id
        }
        None => {
            reqs.push(Some(r));
            reqs.len() - 1
        }
    }
}

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
                conn::tune_loopback_link(socket2::SockRef::from(&s));
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

/// Writes a warning on standard error (the daemons' log later).
pub(crate) fn log_warn(rank: i32, msg: &str) {
    eprintln!("p2pmpi: rank {rank}: warning: {msg}");
}
