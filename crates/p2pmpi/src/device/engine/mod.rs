//! The point-to-point engine: matching (the pure [`p2pmpi_core::matching::Matcher`]), eager
//! and rendez-vous transfers per MID, requests, single copies, revocations, and the immediate
//! collectives' schedules it keeps for the layer above, over the transport's connections
//! ([`super::conn`], [`super::shm`], [`super::net`]; [`super::opening`]: the handshake of an
//! opening, which reports the slot a connection claims and the slot it proved;
//! [`super::transport`]: the mio poll, the listener and the table of connections by id). The
//! engine keeps the table of peers (which connections reach which slot), and decides which
//! slots an opening may prove and what a proved connection becomes. Its files: this one (requests, sends, receives,
//! failures), `poll` (the progress loop over what the transport reports ready, and the
//! engine's side of the openings), `frames` (the frames of each kind), `coordination` (the
//! hooks of a coordination, and [`Solo`]). What a coordination keeps per connection is its
//! own, by connection id (the hooks that need it are given the id).
//!
//! The engine is generic over how its process coordinates with others
//! ([`Coordination`]): a job without replicas runs [`Solo`], whose hooks vanish when compiled;
//! the layer above implements the trait for replicated jobs. The device's design (one port,
//! persistent connections, the protocols, progress by the calling thread, same-host rings) is
//! described in [`crate::device`].

pub(crate) mod coordination;
mod frames;
mod poll;
pub(crate) mod waiting;

pub(crate) use coordination::{Coordination, Solo};

use super::conn::{self, Conn, ConnError, Out, Payload, RState, ReqId, StatusInfo, EAGER_LIMIT};
use super::net::{connect_with_retry, load_factor, HANDSHAKE_LIMIT, MAX_PENDING, MAX_UNIVERSE, PENDING_GRACE};
use super::opening::{Opened, Opening};
use super::transport::{Conns, Poller};
use super::{failpoints, revocations, shm};
use crate::error::{Error, Result};
use mio::net::TcpStream;
use p2pmpi_core::matching::{Arrival, Body, Envelope, Matcher, Pattern};
use p2pmpi_wire::auth::JobKey;
use p2pmpi_wire::{FrameKind, Header, Mid};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Bytes one call reads from a connection before it returns to its caller.
pub(crate) const READ_BUDGET: usize = 1 << 20;

/// The request of every operation finished on the spot (an eager send written whole at
/// once, `device::Engine::completed_req`): a slot of the request table that is never freed, so such
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
pub(crate) struct Req {
    /// Receive target (null for sends).
    pub(crate) ptr: *mut u8,
    pub(crate) cap: usize,
    pub(crate) state: ReqState,
    /// A frame of the coordination's own (not the program's): its id for the coordination.
    pub(crate) token: Option<usize>,
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
pub(crate) struct Peer {
    /// The connection this process sends to the peer on (fixed once chosen: order).
    pub(crate) send_conn: Option<usize>,
    /// Every connection with the peer.
    pub(crate) conns: Vec<usize>,
    /// The peer said `Bye`.
    pub(crate) bye: bool,
}

pub(crate) struct RndvSend {
    pub(crate) req: ReqId,
    pub(crate) ptr: *const u8,
    pub(crate) len: usize,
    /// Offered to the receiver for a single copy: the ticket it checks around its reads.
    pub(crate) ticket: Option<&'static AtomicU64>,
}

/// A rendez-vous announcement that offers a single copy: where the receiver reads the data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScSource {
    /// The sender's slot and pid (confirmed by the connection's probe).
    pub(crate) slot: i32,
    pub(crate) pid: i32,
    pub(crate) addr: u64,
    pub(crate) ticket: u64,
    pub(crate) value: u64,
}

/// The data of an eager message that arrived whole: borrowed (from a read buffer, or a local
/// sender's memory), or a copy the caller already owns, kept rather than copied again.
pub(crate) enum Eager<'d> {
    Borrowed(&'d [u8]),
    Owned(Vec<u8>),
}

impl Eager<'_> {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Eager::Borrowed(b) => b,
            Eager::Owned(v) => v,
        }
    }
    pub(crate) fn into_owned(self) -> Vec<u8> {
        match self {
            Eager::Borrowed(b) => crate::pool::copy_of(b),
            Eager::Owned(v) => v,
        }
    }
    /// Done with it: an owned copy goes back to the pool.
    pub(crate) fn give(self) {
        if let Eager::Owned(v) = self {
            crate::pool::give(v);
        }
    }
}

/// A multi-step operation defined above the engine that the progress loop moves forward (an
/// immediate collective's schedule): the engine keeps it (`S`, opaque to it) and asks only
/// which lost peer it waits for; the layer above moves it (`crate::device::Schedule`).
pub(crate) trait Waits: Send {
    /// The world rank of a peer in `lost` that one of its receives under way waits for.
    fn waits_for(&self, lost: &[i32]) -> Option<i32>;
}

/// A schedule under way, with the request that completes with it.
pub(crate) struct Scheduled<S> {
    /// The request the program's `Request` stands on; completed with the schedule.
    pub req: ReqId,
    /// Its number among the operations of the coordination (set when it starts, in program
    /// order), if it numbers them ([`Coordination::next_op`]).
    pub op: Option<u64>,
    /// What runs it.
    pub run: S,
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

/// What the layers above read and set of the engine directly (the same in every
/// coordination).
pub(crate) struct Base {
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
    /// The error that ended communication, if any: every later wait returns it.
    pub fatal: Option<Error>,
    /// How long a blocking call polls before it sleeps.
    pub spin: Duration,
    /// After `spin`, how long it keeps polling with `sched_yield` between polls.
    pub yield_spin: Duration,
    /// Whether a wait on a socket spins for `spin` or sleeps at once ([`waiting`]).
    pub waiting: waiting::Waiting,
    /// `--encrypt`: every data connection seals what follows its opening (ChaCha20-Poly1305
    /// records under session keys derived from the job key and the opening's nonces).
    pub encrypt: bool,
    /// What the engine asks of the failure layer above it.
    pub upcalls: Upcalls,
}

/// The point-to-point engine of one process: matching, eager and rendez-vous messages,
/// requests, single copies, revocations, and the connections it moves them on. Generic over
/// the coordination `C` of its process with others ([`Coordination`]: [`Solo`] for a job
/// without replicas, whose hooks are empty and vanish when compiled) and over the schedules
/// `S` of immediate collectives it keeps for the layer above.
pub(crate) struct Core<C, S> {
    pub(crate) base: Base,
    /// The coordination's own state.
    pub(crate) coord: C,
    /// MIDs accepted (`P2PMPI_TRACE`): comm, source, tag, sequence, length.
    pub(crate) trace: Option<Vec<TraceEntry>>,
    /// The job's key, which every connection's opening proves.
    pub(crate) key: JobKey,
    /// Refused connections: when the current logging window began, lines written in it,
    /// refusals not shown.
    pub(crate) refusals: (Instant, u32, u64),
    /// The transport's poll: the listener and the connections' readiness.
    pub(crate) io: Poller,
    pub(crate) addrs: Vec<SocketAddr>,
    pub(crate) peers: Vec<Peer>,
    /// The transport's table of connections (by connection id), with the connections read
    /// whatever the kernel says (left unread, shared memory).
    pub(crate) conns: Conns,
    pub(crate) matcher: Matcher<ReqId, Vec<u8>>,
    pub(crate) reqs: Vec<Option<Req>>,
    pub(crate) free_reqs: Vec<ReqId>,
    pub(crate) rndv_send: HashMap<Mid, RndvSend>,
    pub(crate) rndv_recv: HashMap<Mid, ReqId>,
    /// Frames produced while a connection was checked out, sent afterwards.
    pub(crate) deferred: Vec<(i32, Out)>,
    /// Peers lost in a program that handles failures (`Policy::Notify`, unreplicated): what
    /// involves them fails with an error naming them, the rest goes on (rank → cause).
    pub(crate) lost: HashMap<i32, String>,
    /// Communicators (contexts) revoked by a member (ULFM): their communication fails.
    pub(crate) revoked: std::collections::HashSet<u32>,
    pub(crate) tick: u32,
    /// Immediate collectives under way, moved forward by every progress call.
    pub(crate) schedules: Vec<Scheduled<S>>,
    /// Schedules the coordination gave up, withdrawn by the layer above before it returns.
    pub(crate) aborting: Vec<Scheduled<S>>,
    /// Which peers on this host may be reached through shared memory.
    pub(crate) shm_policy: ShmPolicy,
    /// Single-copy announcements received, by MID, until a receive takes them.
    pub(crate) sc_in: HashMap<Mid, ScSource>,
    /// Tickets of single-copy sends not in use (never freed: a receiver may still look at a
    /// withdrawn send's ticket; they are few, one per send in flight at most).
    pub(crate) tickets: Vec<&'static AtomicU64>,
    /// The next ticket value (never 0, never reused by this process).
    pub(crate) ticket_next: u64,
    /// Single copies that failed while the sender's connection was still up: the slot, since
    /// when, why. A dying sender's connection ends soon (its receives fail as the TCP
    /// device's do); one still up after [`SC_GRACE`] is failed with this cause.
    pub(crate) sc_broken: Vec<(i32, Instant, String)>,
    /// Messages received by a single copy (`P2PMPI_SHM_DEBUG` prints it at the end).
    pub(crate) sc_count: u64,
    /// A receive was filled since this was last cleared (see `read_conn`).
    pub(crate) filled: bool,
}

/// How long a single copy that failed waits for the sender's connection to end (a sender
/// killed while the receiver read its memory) before it fails the connection itself.
const SC_GRACE: Duration = Duration::from_secs(2);

/// When the shared-memory path is used (see `shm`): `P2PMPI_SHM=0` turns it off;
/// `P2PMPI_SHM_SLOTS=a,b,...` limits it to pairs of those slots (tests mixing transports);
/// `P2PMPI_SHM_DEBUG` prints a line per pair that uses it. `--encrypt` jobs keep TCP
/// ([`Core::shm_allowed`]); replicated jobs use it too, between their processes on one host
/// (only the single copy of large messages is not used by replicas).
#[derive(Debug, Clone, Default)]
pub(crate) struct ShmPolicy {
    pub(crate) on: bool,
    pub(crate) slots: Option<Vec<i32>>,
    pub(crate) debug: bool,
    pub(crate) ring: usize,
    /// Large messages copied straight from the sender's memory (`process_vm_readv`)
    /// instead of pipelined through the ring: `P2PMPI_SHM_SINGLE_COPY=1` turns it on. Off by
    /// default: measured slower than the ring at every size (docs/shm.md).
    pub(crate) single_copy: bool,
    /// Smallest message sent by a single copy: `P2PMPI_SHM_SINGLE_COPY_MIN` bytes, default
    /// [`SINGLE_COPY_MIN`] (only rendez-vous messages: above the eager limit, or synchronous).
    pub(crate) sc_min: usize,
}

/// Default smallest message sent by a single copy, once it is turned on (`docs/shm.md`).
pub const SINGLE_COPY_MIN: usize = 64 * 1024;

impl ShmPolicy {
    pub(crate) fn from_env() -> ShmPolicy {
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
    pub(crate) fn allows(&self, a: i32, b: i32) -> bool {
        self.on && self.slots.as_ref().is_none_or(|s| s.contains(&a) && s.contains(&b))
    }
}

// SAFETY: the raw pointers inside are the buffers of requests (and payloads queued by
// reference), which the API layer keeps valid until each request completes or is detached
// (see `isend`, `irecv`), whichever thread that happens on; they are not tied to the thread
// that made them. The engine is only ever used behind the global lock, one thread at a time.
unsafe impl<C: Send, S: Send> Send for Core<C, S> {}

impl<C: Coordination, S: Waits> Core<C, S> {
    /// An engine for `rank` of `size` coordinated by `coord`, listening on `listener`, with
    /// peers at `addrs` (one per slot; `slots` of them): this process is slot `slot`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        coord: C,
        slots: usize,
        rank: i32,
        size: i32,
        slot: i32,
        key: JobKey,
        listener: Option<std::net::TcpListener>,
        addrs: Vec<SocketAddr>,
        spin: Duration,
    ) -> Result<Self> {
        let io = Poller::new(listener)?;
        let trace = std::env::var_os("P2PMPI_TRACE").map(|_| Vec::new());
        let base = Base {
            rank,
            size,
            slot,
            world_base: 0,
            world_size: size,
            fatal: None,
            spin,
            yield_spin: Duration::ZERO,
            waiting: waiting::Waiting::default(),
            encrypt: false,
            upcalls: Upcalls::default(),
        };
        Ok(Core {
            base,
            coord,
            trace,
            key,
            refusals: (Instant::now(), 0, 0),
            io,
            addrs,
            peers: (0..slots).map(|_| Peer::default()).collect(),
            conns: Conns::new(),
            matcher: Matcher::new(),
            reqs: vec![Some(Req {
                ptr: std::ptr::null_mut(),
                cap: 0,
                state: ReqState::Done(DONE_STATUS),
                token: None,
            })],
            free_reqs: Vec::new(),
            rndv_send: HashMap::new(),
            rndv_recv: HashMap::new(),
            deferred: Vec::new(),
            lost: HashMap::new(),
            revoked: std::collections::HashSet::new(),
            tick: 0,
            schedules: Vec::new(),
            aborting: Vec::new(),
            shm_policy: ShmPolicy::from_env(),
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
        let repl = C::describe(self);
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
        if id == self.base.slot {
            return self.local_addr();
        }
        self.addrs.get(usize::try_from(id).ok()?).copied().filter(|a| a.port() != 0)
    }

    /// The processes of universe ids `ids` for a spawn's children: every slot (each replica,
    /// in a replicated job) with its data address (empty when unknown).
    pub fn spawn_parents(&self, ids: &[i32]) -> Vec<(u32, String)> {
        C::slots_of_ids(self, ids)
            .into_iter()
            .map(|s| (s as u32, self.addr_of(s).map(|a| a.to_string()).unwrap_or_default()))
            .collect()
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.io.local_addr()
    }

    // ----------------------------------------------------------------- requests

    pub(crate) fn new_req(&mut self, ptr: *mut u8, cap: usize, state: ReqState) -> ReqId {
        alloc_req(&mut self.reqs, &mut self.free_reqs, Req { ptr, cap, state, token: None })
    }

    pub(crate) fn req_mut(&mut self, id: ReqId) -> &mut Req {
        self.reqs[id].as_mut().expect("live request")
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

    pub(crate) fn take_finished(&mut self, id: ReqId) -> Option<Result<StatusInfo>> {
        let r = self.reqs[id].take().expect("live request");
        self.free_reqs.push(id);
        C::taken(self, id, matches!(r.state, ReqState::Done(_)));
        Some(match r.state {
            ReqState::Done(s) => Ok(s),
            ReqState::Failed(e) => Err(e),
            ReqState::Pending => unreachable!(),
        })
    }

    pub(crate) fn complete(&mut self, id: ReqId, st: Result<StatusInfo>) {
        if C::completing(self, id, &st) {
            // A frame of the coordination's own is written.
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
        // (An immediate collective's schedule is withdrawn by the layer above, which moves it.)
        for conn in self.conns.iter_mut().flatten() {
            conn.detach(id);
        }
        C::detach(self, id);
        let withdrawn: Vec<Mid> = self.rndv_send.iter().filter(|(_, s)| s.req == id).map(|(m, _)| *m).collect();
        for m in withdrawn {
            if let Some(s) = self.rndv_send.remove(&m) {
                self.retire_send(s);
            }
        }
        if !self.matcher.cancel(&id) {
            // A receive already streaming into its buffer: drop the data instead.
            self.rndv_recv.retain(|_, r| *r != id);
            for cid in 0..self.conns.len() {
                let Some(conn) = self.conns[cid].as_mut() else { continue };
                if let RState::Stream { req, ref mut discard, .. } = conn.rstate {
                    if req == id {
                        *discard = true;
                        C::stream_cancelled(self, cid);
                    }
                }
            }
        }
    }

    // ----------------------------------------------------------------- sending

    pub(crate) fn header(&self, kind: FrameKind, comm: u32, dst: i32, tag: i32, seq: u64, len: u64) -> Header {
        Header::new(kind, Mid { comm, src: self.base.rank as u32, dst: dst as u32, tag, seq }, len)
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
        if let Some(e) = &self.base.fatal {
            return Err(e.clone());
        }
        let op = C::next_op(self);
        let revoked = self.is_revoked(comm);
        if revoked || op.is_some() {
            if let Some(e) = C::post_failure(self, op, revoked.then_some(Error::Revoked)) {
                return self.failed_post(op, e);
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
        if dst == self.base.rank {
            if C::PLAIN && mode == SendMode::Synchronous {
                return Ok(self.send_local_sync(comm, tag, seq, ptr, len));
            }
            self.deliver_local(comm, tag, seq, data);
            let st = StatusInfo { source: dst, tag, len: len as u64, cancelled: false };
            return Ok(self.new_req(std::ptr::null_mut(), 0, ReqState::Done(st)));
        }
        let mid = Mid { comm, src: self.base.rank as u32, dst: dst as u32, tag, seq };
        if let Some(r) = C::send(self, mid, ptr, len, mode == SendMode::Synchronous, op) {
            // The coordination carries it out.
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

    /// A synchronous send to this very process: matched (copied and complete) at once, or
    /// queued as a rendez-vous whose data waits at the send, which completes when a receive
    /// takes it ([`Self::take_local_sync`]). (A replicated rank's self-messages are eager,
    /// shared with its replicas: there a synchronous one completes at once.)
    #[cold]
    #[inline(never)]
    fn send_local_sync(&mut self, comm: u32, tag: i32, seq: u64, ptr: *const u8, len: usize) -> ReqId {
        let me = self.base.rank;
        let env = Envelope { comm, src: me, tag, seq, len: len as u64 };
        let done = StatusInfo { source: me, tag, len: len as u64, cancelled: false };
        match self.matcher.arrive(&env) {
            Arrival::Matched(r) => {
                self.traced(&env);
                let data = if len == 0 {
                    &[][..]
                } else {
                    // SAFETY: `isend`'s contract: `len` bytes at `ptr`, readable during this call.
                    unsafe { std::slice::from_raw_parts(ptr, len) }
                };
                self.fill(r, &env, data);
                self.new_req(std::ptr::null_mut(), 0, ReqState::Done(done))
            }
            Arrival::Unmatched => {
                self.traced(&env);
                let req = self.new_req(std::ptr::null_mut(), 0, ReqState::Pending);
                let mid = Mid { comm, src: me as u32, dst: me as u32, tag, seq };
                self.rndv_send.insert(mid, RndvSend { req, ptr, len, ticket: None });
                self.matcher.enqueue(env, Body::Rendezvous);
                req
            }
            // A process's own channel has neither duplicates nor messages out of order.
            Arrival::Duplicate | Arrival::Early => self.new_req(std::ptr::null_mut(), 0, ReqState::Done(done)),
        }
    }

    /// Receive `r` takes the queued synchronous message `env` of this very process: the data
    /// is copied from the send, and both complete. (A send withdrawn meanwhile, its buffer
    /// gone, fails the receive.)
    #[cold]
    #[inline(never)]
    fn take_local_sync(&mut self, r: ReqId, env: &Envelope) {
        let me = self.base.rank;
        let mid = Mid { comm: env.comm, src: me as u32, dst: me as u32, tag: env.tag, seq: env.seq };
        let Some(s) = self.rndv_send.remove(&mid) else {
            let detail = format!("the synchronous send {mid:?} to itself was withdrawn before a receive took it");
            self.complete(r, Err(Error::Protocol { rank: me, detail }));
            return;
        };
        C::matched(self, r, env);
        let data = if s.len == 0 {
            &[][..]
        } else {
            // SAFETY: the send's buffer stays valid until its request completes (`isend`'s
            // contract), which happens just below.
            unsafe { std::slice::from_raw_parts(s.ptr, s.len) }
        };
        self.fill(r, env, data);
        let st = StatusInfo { source: me, tag: env.tag, len: env.len, cancelled: false };
        self.complete(s.req, Ok(st));
    }

    /// A message to this very process: matched (and copied) at once or queued.
    pub(crate) fn deliver_local(&mut self, comm: u32, tag: i32, seq: u64, data: &[u8]) {
        let env = Envelope { comm, src: self.base.rank, tag, seq, len: data.len() as u64 };
        self.accept_eager(env, Eager::Borrowed(data), false);
    }

    /// An eager message arrived whole: matched, queued, dropped as a duplicate or kept
    /// until its turn.
    pub(crate) fn accept_eager(&mut self, env: Envelope, data: Eager<'_>, sync: bool) {
        match self.matcher.arrive(&env) {
            Arrival::Matched(r) => {
                self.traced(&env);
                if sync {
                    C::matched_sync(self, &env);
                }
                C::accepted(self, &env, data.bytes());
                self.fill(r, &env, data.bytes());
                data.give();
            }
            Arrival::Unmatched => {
                self.traced(&env);
                C::accepted(self, &env, data.bytes());
                if sync {
                    C::sync_unmatched(self, &env);
                }
                self.matcher.enqueue(env, Body::Eager(data.into_owned()));
            }
            Arrival::Duplicate => {
                data.give();
                C::duplicate(self, &env, sync);
                return;
            }
            Arrival::Early => {
                C::early(self, env, data.into_owned(), sync);
                return;
            }
        }
        C::drain_early(self, env.comm, env.src, env.tag);
    }

    pub(crate) fn traced(&mut self, env: &Envelope) {
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
    pub(crate) fn fill(&mut self, r: ReqId, env: &Envelope, data: &[u8]) {
        self.filled = true;
        C::matched(self, r, env);
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
    pub(crate) fn start_rndv_recv(&mut self, r: ReqId, env: &Envelope) {
        // A master's wildcard receive: its choice is told once the data is in.
        C::matched(self, r, env);
        let mid = Mid { comm: env.comm, src: env.src as u32, dst: self.base.rank as u32, tag: env.tag, seq: env.seq };
        self.rndv_recv.insert(mid, r);
        if C::rndv_matched(self, r, env, mid) {
            // The coordination asks for the data (or has it).
            return;
        }
        if let Some(src) = self.sc_in.remove(&mid) {
            self.single_copy(r, env, mid, src);
            return;
        }
        self.deferred.push((env.src, Out::new(Header::new(FrameKind::ReadyToRecv, mid, 0), Payload::None)));
    }

    pub(crate) fn check_rank(&self, r: i32) -> Result<()> {
        if r < 0 || r >= self.base.size {
            return Err(Error::InvalidRank { rank: r, size: self.base.size });
        }
        Ok(())
    }

    /// Posts a receive into `cap` bytes at `ptr`, which must stay valid for writes, and used
    /// by nothing else, until the request completes or is detached ([`Self::detach`]); any
    /// byte values must be valid there.
    pub fn irecv(&mut self, pat: Pattern, ptr: *mut u8, cap: usize) -> Result<ReqId> {
        if let Some(s) = pat.src {
            self.check_rank(s)?;
        }
        let op = C::next_op(self);
        let revoked = self.is_revoked(pat.comm);
        if revoked || op.is_some() {
            if let Some(e) = C::post_failure(self, op, revoked.then_some(Error::Revoked)) {
                return self.failed_post(op, e);
            }
        }
        let r = self.new_req(ptr, cap, ReqState::Pending);
        C::number(self, r, op);
        if C::receive(self, r, pat) {
            // The coordination posts it (when it may).
            return Ok(r);
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

    /// A post that fails with `err` here: the error — or, for an operation the coordination
    /// numbers (`op`: a fault-aware replicated rank), a request already failed with it. Every
    /// replica of the rank then takes one path. A replica posts an operation before it hears
    /// that its master failed it at the post, and learns the failure from the request; had
    /// the master's post returned the error instead, the replica's program would go on to
    /// post what its master never posts (the send after a failed receive of a `sendrecv`:
    /// lent, it would wait for ever for its master's commit).
    #[cold]
    #[inline(never)]
    fn failed_post(&mut self, op: Option<u64>, err: Error) -> Result<ReqId> {
        let Some(op) = op else { return Err(err) };
        let r = self.new_req(std::ptr::null_mut(), 0, ReqState::Failed(err));
        C::number(self, r, Some(op));
        Ok(r)
    }

    /// A peer is lost (its connection broke, or the failure detector declared it failed).
    /// A program that handles failures (`Policy::Notify`, unreplicated) goes on: what
    /// involves the peer fails with an error naming it — receives naming it, sends and
    /// rendez-vous with it, later operations with it — and the rest of communication goes on.
    /// Otherwise communication ends.
    pub(crate) fn lose_peer(&mut self, rank: i32, cause: String, unsent: Vec<ReqId>) {
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

    pub(crate) fn post(&mut self, r: ReqId, pat: Pattern) {
        if let Some((env, body)) = self.matcher.post(pat, r) {
            self.consume(r, env, body);
        }
    }

    pub(crate) fn consume(&mut self, r: ReqId, env: Envelope, body: Body<Vec<u8>>) {
        match body {
            Body::Eager(data) => {
                C::consumed(self, &env);
                self.fill(r, &env, &data);
                crate::pool::give(data);
            }
            Body::Rendezvous => {
                if env.src == self.base.rank {
                    // Only a synchronous send to itself announces a rendez-vous here.
                    return self.take_local_sync(r, &env);
                }
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

    /// A probe without a choice point: what is queued now (`immediate`), or `None` while a
    /// blocking probe finds nothing.
    pub(crate) fn probe_now(&self, pat: Pattern, immediate: bool) -> Option<Option<Envelope>> {
        let found = self.probe(pat);
        if immediate {
            Some(found)
        } else {
            found.map(Some)
        }
    }

    /// Like [`Self::probe_now`], taking the message out (matched probes).
    pub(crate) fn mprobe_now(&mut self, pat: Pattern, immediate: bool) -> Option<Option<Matched>> {
        let m = self.mprobe(pat);
        if immediate {
            Some(m)
        } else {
            m.map(Some)
        }
    }

    /// Which of `ids` (`None`: an inactive slot) are complete now; `None` with `block` while
    /// none is.
    pub(crate) fn completed_now(&self, ids: &[Option<ReqId>], block: bool) -> Option<Vec<usize>> {
        let d: Vec<usize> =
            ids.iter().enumerate().filter_map(|(i, id)| id.filter(|&id| self.is_done(id)).map(|_| i)).collect();
        (!(block && d.is_empty())).then_some(d)
    }

    /// Receives a message taken by [`Self::mprobe`] into `cap` bytes at `ptr` (as in
    /// [`Self::irecv`]).
    pub fn mrecv(&mut self, m: Matched, ptr: *mut u8, cap: usize) -> ReqId {
        let r = self.new_req(ptr, cap, ReqState::Pending);
        self.consume(r, m.env, m.body);
        r
    }

    // ----------------------------------------------------------------- progress

    /// Moves every connection forward; returns whether one gave something. (The layer above
    /// moves the schedules after it.)
    pub fn progress(&mut self, hint: Option<i32>, timeout: Option<Duration>) -> bool {
        self.progress_io(hint, timeout)
    }

    /// Keeps an immediate collective's schedule `run` (moved by the layer above): returns the
    /// request that completes with it.
    pub(crate) fn push_schedule(&mut self, run: S) -> ReqId {
        let id = self.new_req(std::ptr::null_mut(), 0, ReqState::Pending);
        // Numbered by a coordination that numbers operations (starts are in program order,
        // unlike the posts of its steps).
        let op = C::next_op(self);
        self.schedules.push(Scheduled { req: id, op, run });
        // Its outcome may be known already: then it fails at once.
        C::number(self, id, op);
        id
    }

    /// Takes out the schedule of request `id`, if one runs.
    pub(crate) fn take_schedule(&mut self, id: ReqId) -> Option<Scheduled<S>> {
        let i = self.schedules.iter().position(|s| s.req == id)?;
        Some(self.schedules.swap_remove(i))
    }

    /// Gives up the schedule of request `id`, if one runs (its request failed by the
    /// coordination): the layer above withdraws its transfers before it returns
    /// ([`Self::take_aborted`]).
    pub(crate) fn drop_schedule(&mut self, id: ReqId) {
        if let Some(s) = self.take_schedule(id) {
            self.aborting.push(s);
        }
    }

    /// The schedules given up, whose transfers the layer above withdraws now.
    pub(crate) fn take_aborted(&mut self) -> Vec<Scheduled<S>> {
        std::mem::take(&mut self.aborting)
    }

    /// Whether request `id` is still pending (a live request).
    pub(crate) fn pending(&self, id: ReqId) -> bool {
        self.reqs.get(id).and_then(|r| r.as_ref()).is_some_and(|r| matches!(r.state, ReqState::Pending))
    }

    /// The schedules under way, taken out to be moved (see [`Self::put_schedules`]);
    /// `scheduling` tells the coordination that their posts are not the program's.
    pub(crate) fn take_schedules(&mut self) -> Vec<Scheduled<S>> {
        C::scheduling(self, true);
        std::mem::take(&mut self.schedules)
    }

    /// Puts back the schedules still under way after they were moved.
    pub(crate) fn put_schedules(&mut self, mut live: Vec<Scheduled<S>>) {
        C::scheduling(self, false);
        live.append(&mut self.schedules);
        self.schedules = live;
    }

    /// Whether schedules are under way.
    pub(crate) fn has_schedules(&self) -> bool {
        !self.schedules.is_empty()
    }

    /// Immediate collective `op` succeeded here: whether its request may complete with that
    /// success (see [`Coordination::schedule_word`]).
    pub(crate) fn schedule_word(&mut self, op: u64) -> Option<bool> {
        C::schedule_word(self, op)
    }

    /// The failure detector confirmed that `rank` failed and the program handles failures:
    /// communication ends with an error naming it.
    pub(crate) fn peer_failed(&mut self, rank: i32) {
        if C::declared_dead(self, rank) {
            // The coordination takes the declaration.
            return;
        }
        // Its connections are dropped (a frozen process's would hold queued sends forever).
        let mut unsent = Vec::new();
        if self.failure_tolerant() && rank >= 0 && (rank as usize) < self.peers.len() {
            for cid in std::mem::take(&mut self.peers[rank as usize].conns) {
                if let Some(mut conn) = self.conns.remove(cid, &self.io) {
                    unsent.extend(conn.take_completions());
                }
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
    pub(crate) fn apply_revocations(&mut self) {
        for ctx in revocations::take() {
            C::revocation(self, ctx);
        }
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn comm_revoked(&self, comm: u32) -> bool {
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

    /// A program that handles failures: a lost peer (with `-r R`, a rank lost whole) does
    /// not end communication.
    pub(crate) fn failure_tolerant(&self) -> bool {
        crate::lifecycle::policy() == crate::lifecycle::Policy::Notify
    }

    /// Gives up when a send has made no progress for `limit` (2·T_cleanup, FM §5.3): the
    /// destination takes no data, although the failure detector may still hear of it (a
    /// firewall that lets only some addresses through).
    pub(crate) fn check_stalled_sends(&mut self, limit: Duration) {
        C::timers(self, limit);
        let stalled = self.conns.iter().flatten().find_map(|c| {
            let since = c.stalled_since?;
            (since.elapsed() > limit).then_some((c.peer.unwrap_or(-1), since.elapsed()))
        });
        if let Some((peer, for_)) = stalled {
            if C::stalled(self, peer, for_) {
                // The coordination takes the stall.
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

    pub(crate) fn set_fatal(&mut self, e: Error) {
        if self.base.fatal.is_none() {
            self.base.fatal = Some(e);
        }
    }

    // ----------------------------------------------------------------- finalization
}

/// A slot of the request table for `r` (a freed one if any).
pub(crate) fn alloc_req(reqs: &mut Vec<Option<Req>>, free: &mut Vec<ReqId>, r: Req) -> ReqId {
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

/// Writes a warning on standard error (the daemons' log later).
pub(crate) fn log_warn(rank: i32, msg: &str) {
    eprintln!("p2pmpi: rank {rank}: warning: {msg}");
}
