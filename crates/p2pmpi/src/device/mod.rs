//! The device: persistent connections between process pairs and the progress engine, in
//! three layers. The transport ([`conn`], [`shm`], [`net`], [`opening`], [`transport`]) moves
//! bytes; the point-to-point
//! engine ([`engine`]) matches messages and carries out eager and rendez-vous transfers, generic
//! over how its process coordinates with others ([`engine::Coordination`]); the replication
//! layer ([`replication`]) is one such coordination. This module chooses one when the job
//! starts ([`Engine::new`]: [`engine::Solo`] without replicas) and moves the immediate
//! collectives' schedules, which need the chosen engine.
//!
//! # Design
//!
//! * **One listening port per process** (the seeds' *single-port* device, firewall-friendly),
//!   with **persistent** connections: the mesh is built when the job starts
//!   (`Engine::connect_mesh`: every pair gets exactly one connection, opened by the higher
//!   slot, used both ways); processes that join later (a spawned job's) connect to those they
//!   talk to. Every connection opens with a challenge-response on the job's key
//!   ([`p2pmpi_wire::auth`]): the connector's `Hello` (its slot, a nonce), the acceptor's
//!   `Challenge` (its nonce and proof), the connector's `Auth` (its proof), exchanged by the
//!   transport's [`opening`]; the engine says which slots may prove it. The key itself is
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
//! * The matching rules live in the pure [`p2pmpi_core::matching::Matcher`]; the engine only
//!   moves bytes and bookkeeping.

pub(crate) mod conn;
pub(crate) mod engine;
pub(crate) mod failpoints;
pub(crate) mod net;
pub(crate) mod opening;
mod replication;
pub(crate) mod revocations;
pub(crate) mod shm;
pub(crate) mod transport;

#[cfg(test)]
mod tests;

pub use conn::EAGER_LIMIT;
pub(crate) use conn::{ReqId, StatusInfo};
pub(crate) use engine::waiting::{self, Waiting};
pub use engine::SINGLE_COPY_MIN;
pub(crate) use engine::{Base, Matched, SendMode, Upcalls, DONE, DONE_STATUS};
pub(crate) use net::load_factor;

use crate::error::Result;
use engine::{Core, Solo, Waits};
use p2pmpi_core::matching::{Envelope, Pattern, SeqEntry};
use p2pmpi_core::replication::Layout;
use p2pmpi_wire::auth::JobKey;
use replication::Replication;
use std::net::SocketAddr;
use std::time::Duration;

/// Removes the shared-memory segments of the job of `key` left behind (a job stopped while
/// its processes connected): its launcher calls it once the job's processes ended. Returns
/// how many.
#[doc(hidden)]
pub fn remove_job_segments(key: &JobKey) -> usize {
    shm::remove_job_segments(key)
}

/// A multi-step operation defined above the device that the progress loop moves forward (an
/// immediate collective's schedule, [`crate::collective`]): the device holds it behind this
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

impl Waits for Box<dyn Schedule> {
    fn waits_for(&self, lost: &[i32]) -> Option<i32> {
        (**self).waits_for(lost)
    }
}

/// The engine of a job without replicas.
type SoloEngine = Core<Solo, Box<dyn Schedule>>;
/// The engine of a process of a job run with `-r R` (R > 1).
type ReplicatedEngine = Core<Replication, Box<dyn Schedule>>;

/// The device of this process: the point-to-point engine with the coordination chosen when
/// the job starts. Every call makes one match here, then runs the engine compiled for that
/// coordination: the engine of a job without replicas has no replication code in it at all.
/// The fields every layer reads ([`Base`]: rank, slot, the fatal error, …) are reached
/// directly (`Deref`).
// Both engines inline: one lives per process (in the context), and neither path pays an
// indirection for the other's size.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Engine {
    Solo(SoloEngine),
    Replicated(ReplicatedEngine),
}

/// `both!(self, c => expr)`: `expr` on the engine, whichever coordination it runs.
macro_rules! both {
    ($s:expr, $c:ident => $e:expr) => {
        match $s {
            Engine::Solo($c) => $e,
            Engine::Replicated($c) => $e,
        }
    };
}

/// As [`both!`], for a call after which the replication layer may have given up schedules:
/// their transfers are withdrawn before the call returns.
macro_rules! settled {
    ($s:expr, $c:ident => $e:expr) => {
        match $s {
            Engine::Solo($c) => $e,
            Engine::Replicated($c) => {
                let r = $e;
                $s.settle();
                r
            }
        }
    };
}

impl std::ops::Deref for Engine {
    type Target = Base;
    #[inline]
    fn deref(&self) -> &Base {
        both!(self, c => &c.base)
    }
}

impl std::ops::DerefMut for Engine {
    #[inline]
    fn deref_mut(&mut self) -> &mut Base {
        both!(self, c => &mut c.base)
    }
}

impl Engine {
    /// A device for `rank` of `size`, listening on `listener`, with peers at `addrs` (one
    /// per slot). With a `layout` of more than one replica, this process is slot `slot` and
    /// runs the replica coordination protocol; otherwise the engine without replication.
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
        Ok(match layout.filter(|l| l.r > 1) {
            None => Engine::Solo(Core::new(Solo, size as usize, rank, size, slot, key, listener, addrs, spin)?),
            Some(l) => {
                let coord = Replication::new(l, slot as usize);
                Engine::Replicated(Core::new(coord, l.slots(), rank, size, slot, key, listener, addrs, spin)?)
            }
        })
    }

    /// Withdraws the transfers of the schedules the replication layer gave up (their
    /// requests failed by the master's outcome).
    #[cold]
    fn settle(&mut self) {
        loop {
            let Engine::Replicated(c) = self else { return };
            if c.aborting.is_empty() {
                return;
            }
            for mut s in c.take_aborted() {
                s.run.abort(self);
            }
        }
    }

    // ----------------------------------------------------------------- schedules

    /// Starts an immediate collective: returns the request that completes with it. Its
    /// first steps are posted at once.
    pub(crate) fn start_schedule(&mut self, run: Box<dyn Schedule>) -> ReqId {
        let id = settled!(self, c => c.push_schedule(run));
        self.advance_schedules();
        id
    }

    /// Moves every immediate collective as far as it goes; completes those that are over.
    fn advance_schedules(&mut self) {
        let mut live = match self {
            Engine::Solo(c) if c.has_schedules() => c.take_schedules(),
            Engine::Replicated(c) if c.has_schedules() => c.take_schedules(),
            _ => return,
        };
        let mut told = false;
        live.retain_mut(|s| {
            if !both!(self, c => c.pending(s.req)) {
                // Failed meanwhile by its master's outcome.
                s.run.abort(self);
                return false;
            }
            match s.run.advance(self) {
                None => true,
                Some(r) => {
                    if let (Ok(_), Some(op)) = (&r, s.op) {
                        // A replicated rank's outcome is its master's.
                        match both!(self, c => c.schedule_word(op)) {
                            None => return true,
                            Some(t) => told |= t,
                        }
                    }
                    both!(self, c => c.complete(s.req, r));
                    false
                }
            }
        });
        both!(self, c => c.put_schedules(live));
        if told {
            settled!(self, c => c.flush_deferred());
        }
        self.settle();
    }

    /// Makes progress: reads and writes what the connections allow, then moves every
    /// immediate collective forward. With `timeout` `None` it never sleeps; `hint` names the
    /// peer a caller waits for, whose connections are read directly before asking the
    /// kernel which others are ready.
    #[inline]
    pub fn progress(&mut self, hint: Option<i32>, timeout: Option<Duration>) -> bool {
        let got = settled!(self, c => c.progress(hint, timeout));
        // (Looked at here, inline: a poll round without immediate collectives makes no call.)
        if both!(self, c => c.has_schedules()) {
            self.advance_schedules();
        }
        got
    }

    /// Makes sure nothing in the device still points into request `id`'s buffers (see
    /// [`Core::detach`]); an immediate collective given up has its transfers withdrawn, and
    /// will never write the user's buffer.
    pub fn detach(&mut self, id: ReqId) {
        if let Some(mut s) = both!(self, c => c.take_schedule(id)) {
            s.run.abort(self);
            return;
        }
        settled!(self, c => c.detach(id))
    }

    // ----------------------------------------------------------------- the engine's calls

    pub fn debug_state(&self) -> String {
        both!(self, c => c.debug_state())
    }

    /// The processes of universe ids `ids` for a spawn's children: every slot (each replica,
    /// in a replicated job) with its data address (empty when unknown).
    pub fn spawn_parents(&self, ids: &[i32]) -> Vec<(u32, String)> {
        both!(self, c => c.spawn_parents(ids))
    }

    /// The address of the listening data port.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        both!(self, c => c.local_addr())
    }

    /// A request that is already complete (for operations finished on the spot).
    #[inline]
    pub fn completed_req(&mut self) -> ReqId {
        DONE
    }

    /// Whether a request has finished (it stays until taken).
    #[cfg(test)]
    pub fn is_done(&self, id: ReqId) -> bool {
        both!(self, c => c.is_done(id))
    }

    /// Takes a finished request's outcome and frees it; `None` if still pending.
    #[inline]
    pub fn take_done(&mut self, id: ReqId) -> Option<Result<StatusInfo>> {
        settled!(self, c => c.take_done(id))
    }

    /// Withdraws a pending receive not matched yet (see [`Core::cancel`]).
    pub fn cancel(&mut self, id: ReqId) -> bool {
        settled!(self, c => c.cancel(id))
    }

    /// Starts a send of `len` bytes at `ptr` to `dst` (see [`Core::isend`]).
    #[inline]
    pub fn isend(
        &mut self,
        comm: u32,
        dst: i32,
        tag: i32,
        ptr: *const u8,
        len: usize,
        mode: SendMode,
    ) -> Result<ReqId> {
        settled!(self, c => c.isend(comm, dst, tag, ptr, len, mode))
    }

    /// Posts a receive into `cap` bytes at `ptr` (see [`Core::irecv`]).
    #[inline]
    pub fn irecv(&mut self, pat: Pattern, ptr: *mut u8, cap: usize) -> Result<ReqId> {
        settled!(self, c => c.irecv(pat, ptr, cap))
    }

    /// The messages accepted so far (with `P2PMPI_TRACE` set), one line each.
    pub fn trace_lines(&self) -> Option<String> {
        both!(self, c => c.trace_lines())
    }

    /// Builds the full mesh at start-up (see [`Core::connect_mesh`]).
    pub fn connect_mesh(&mut self, limit: Duration) -> Result<()> {
        settled!(self, c => c.connect_mesh(limit))
    }

    /// Makes room for universe ids below `n` (see [`Core::grow`]).
    pub fn grow(&mut self, n: usize) {
        settled!(self, c => c.grow(n))
    }

    /// Opens connections to the processes `ids` (outside the world) and waits until each one
    /// proved the job key, or until `limit`.
    pub fn connect_to(&mut self, ids: &[i32], limit: Duration) -> Result<()> {
        settled!(self, c => c.connect_to(ids, limit))
    }

    /// Waits until every process of `ids` connected and proved the job key, or until `limit`.
    pub fn await_connections(&mut self, ids: &[i32], limit: Duration) -> Result<()> {
        settled!(self, c => c.await_connections(ids, limit))
    }

    /// Receives a message taken by [`Self::mprobe`] into `cap` bytes at `ptr`.
    pub fn mrecv(&mut self, m: Matched, ptr: *mut u8, cap: usize) -> ReqId {
        settled!(self, c => c.mrecv(m, ptr, cap))
    }

    /// While a blocking call spins for a message from `hint`: watches that peer's rings (see
    /// [`Core::await_ring`]; a replicated job returns at once).
    #[inline]
    pub fn await_ring(&self, hint: Option<i32>, rounds: u32) {
        if let Engine::Solo(c) = self {
            c.await_ring(hint, rounds)
        }
    }

    /// Whether a wait for `hint` watches shared-memory rings only (see
    /// [`Core::hint_on_rings`]; `false` in a replicated job).
    #[inline]
    pub fn hint_on_rings(&self, hint: Option<i32>) -> bool {
        match self {
            Engine::Solo(c) => c.hint_on_rings(hint),
            Engine::Replicated(_) => false,
        }
    }

    /// Takes a small eager frame straight from `hint`'s ring (see [`Core::ring_poll`]; `None`
    /// in a replicated job).
    #[inline]
    pub fn ring_poll(&mut self, hint: Option<i32>) -> Option<bool> {
        match self {
            Engine::Solo(c) => c.ring_poll(hint),
            Engine::Replicated(_) => None,
        }
    }

    /// Whether every queued frame has been written.
    pub fn all_sent(&self) -> bool {
        both!(self, c => c.all_sent())
    }

    /// The matcher's sequence counters, sends and receives (see
    /// `p2pmpi_core::matching::Matcher::sequences`), and the channels and sequences of the
    /// messages waiting for a receive: what a checkpoint counts and keeps.
    pub(crate) fn sequences_and_queue(&self) -> (Vec<SeqEntry>, Vec<SeqEntry>, Vec<SeqEntry>) {
        both!(self, c => {
            let (send, recv) = c.matcher.sequences();
            (send, recv, c.matcher.unexpected_envelopes().map(|e| (e.comm, e.src, e.tag, e.seq)).collect())
        })
    }

    /// Sets the matcher's sequence counters from a checkpoint's.
    pub(crate) fn restore_sequences(&mut self, send: &[SeqEntry], recv: &[SeqEntry]) {
        both!(self, c => c.matcher.restore_sequences(send, recv))
    }

    /// Says `Bye` on every connection to a peer and shuts down the sending side.
    pub fn send_byes(&mut self) {
        settled!(self, c => c.send_byes())
    }

    /// Whether every peer connection has been closed by the other side after its `Bye`.
    pub fn all_closed(&self) -> bool {
        both!(self, c => c.all_closed())
    }

    /// The failure detector (or, with replicas, the launcher) declared `id` failed.
    pub(crate) fn peer_failed(&mut self, id: i32) {
        settled!(self, c => c.peer_failed(id))
    }

    /// Whether the communicator of MID communicator id `comm` was revoked (revocations told
    /// since the last call are applied first).
    #[inline]
    pub(crate) fn is_revoked(&mut self, comm: u32) -> bool {
        settled!(self, c => c.is_revoked(comm))
    }

    /// Withdraws receive `id` if it is still posted (unmatched) and fails it with `err`.
    pub(crate) fn fail_receive(&mut self, id: ReqId, err: crate::error::Error) -> bool {
        settled!(self, c => c.fail_receive(id, err))
    }

    /// Why world rank `rank` was lost (a program that handles failures goes on without it).
    pub(crate) fn lost_cause(&self, rank: i32) -> Option<String> {
        both!(self, c => c.lost_cause(rank))
    }

    /// Gives up when a send has made no progress for `limit` (see [`Core::check_stalled_sends`]).
    pub(crate) fn check_stalled_sends(&mut self, limit: Duration) {
        settled!(self, c => c.check_stalled_sends(limit))
    }

    // ----------------------------------------------------------------- replication's calls

    /// Whether this process runs as one of several replicas of its rank.
    pub(crate) fn replicated(&self) -> bool {
        matches!(self, Engine::Replicated(_))
    }

    /// Whether this process follows its master's outcomes (a non-master of a replicated
    /// job, or a new master still learning what its replicas know).
    pub(crate) fn follows(&self) -> bool {
        match self {
            Engine::Solo(_) => false,
            Engine::Replicated(c) => c.follows(),
        }
    }

    /// How long a wait with nothing to do sleeps between polls instead of yielding the core
    /// (a host with more of the job's processes than cores): a non-master of a replicated job
    /// naps, so that the masters sharing its core keep it; `None`: yield.
    #[inline]
    pub(crate) fn nap(&mut self) -> Option<Duration> {
        match self {
            Engine::Solo(_) => None,
            Engine::Replicated(c) => c.nap(),
        }
    }

    /// Whether a non-master still waits for commits (it must not leave before its master
    /// committed what it keeps).
    pub fn backup_pending(&self) -> bool {
        match self {
            Engine::Solo(_) => false,
            Engine::Replicated(c) => c.backup_pending(),
        }
    }

    /// A choice point of a probe, in a replicated job (see `Core::probe_point`).
    pub fn probe_point(&mut self, pat: &Pattern, immediate: bool) -> Option<u64> {
        match self {
            Engine::Solo(_) => None,
            Engine::Replicated(c) => c.probe_point(pat, immediate),
        }
    }

    /// The outcome of probe choice point `c` for this replica (see `Core::probe_at`);
    /// without a choice point, a plain probe.
    pub fn probe_at(&mut self, c: Option<u64>, pat: Pattern, immediate: bool) -> Option<Option<Envelope>> {
        match self {
            Engine::Solo(e) => e.probe_now(pat, immediate),
            Engine::Replicated(e) => {
                let r = e.probe_at(c, pat, immediate);
                self.settle();
                r
            }
        }
    }

    /// Like [`Self::probe_at`], taking the message out (matched probes).
    pub fn mprobe_at(&mut self, c: Option<u64>, pat: Pattern, immediate: bool) -> Option<Option<Matched>> {
        match self {
            Engine::Solo(e) => e.mprobe_now(pat, immediate),
            Engine::Replicated(e) => {
                let r = e.mprobe_at(c, pat, immediate);
                self.settle();
                r
            }
        }
    }

    /// A choice point of a test or a wait on several requests, in a replicated job.
    pub fn completion_point(&mut self) -> Option<u64> {
        match self {
            Engine::Solo(_) => None,
            Engine::Replicated(c) => c.completion_point(),
        }
    }

    /// Which of `ids` count as complete at choice point `c` (see `Core::completed_at`);
    /// without a choice point, the requests complete now.
    pub fn completed_at(&mut self, c: Option<u64>, ids: &[Option<ReqId>], block: bool) -> Option<Vec<usize>> {
        match self {
            Engine::Solo(e) => e.completed_now(ids, block),
            Engine::Replicated(e) => {
                let r = e.completed_at(c, ids, block);
                self.settle();
                r
            }
        }
    }

    /// The master's failure outcome of choice point `c` (a probe's), if it told one: taken.
    pub(crate) fn choice_failure(&mut self, c: Option<u64>) -> Option<crate::error::Error> {
        match self {
            Engine::Solo(_) => None,
            Engine::Replicated(e) => e.choice_failure(c),
        }
    }

    /// A master's probe at choice point `c` fails with `err`: its replicas are told.
    pub(crate) fn decide_probe_failure(&mut self, c: Option<u64>, err: &crate::error::Error) {
        if let Engine::Replicated(e) = self {
            e.decide_probe_failure(c, err);
            self.settle();
        }
    }

    /// The master's view of the failed world ranks at choice point `c` (`None` while this
    /// replica waits for its master's, and in a job without replicas).
    pub(crate) fn lost_view_at(&mut self, c: u64) -> Option<Vec<i32>> {
        match self {
            Engine::Solo(_) => None,
            Engine::Replicated(e) => e.lost_view_at(c),
        }
    }
}
