//! The running process's context: one value holding what a running process knows (its engine,
//! what its failure detector told it, its connection to the launcher, the agreements and
//! spawns it awaits, the communicator contexts it numbered, …), created by `initialize` and
//! finalized with the [`Universe`](crate::environment::Universe) that owns it, and the waits
//! that move the engine. Every layer above reaches it with [`current`]; the failure detector,
//! the launcher's watcher and the lease's thread are handed it.
//!
//! This module holds data and the engine's waits only: the failure detector, the bootstrap and
//! the launcher's messages (the layer above) keep their logic and find their state here.

use crate::device::waiting::{self, Seen};
use crate::device::{Engine, ReqId, StatusInfo};
use crate::error::{Error, Result};
use crate::lifecycle::{is_finalized, threading_support, Threading};
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeSet, HashMap};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The state of a running process.
pub(crate) struct Context {
    /// The communication engine; `None` once finalized.
    engine: Mutex<Option<Engine>>,
    /// In a process restarted from a checkpoint, the engine until the program called
    /// `Universe::restored` (communicating before is an error, `not_running`'s).
    held: Mutex<Option<Engine>>,
    /// What the failure detector found and told.
    pub(crate) failures: Failures,
    /// The control connection to the launcher.
    pub(crate) launcher: Launcher,
    /// The answers the launcher sends back on the control connection.
    pub(crate) answers: Answers,
    /// The failed ranks (of the communicator) acknowledged per communicator context (ULFM).
    acked: Mutex<HashMap<u32, BTreeSet<i32>>>,
    /// Agreements run so far per communicator context (each member counts its own calls; they
    /// match because agreement is collective).
    pub(crate) agreement_seq: Mutex<HashMap<u32, u64>>,
    /// The next communicator context id this process may use (0 and 1 are the world's).
    pub(crate) next_ctx: AtomicU32,
    /// In a spawned process: the parents' communicator context and universe ids.
    pub(crate) parent: OnceLock<(u32, Vec<i32>)>,
    /// The program disconnected from its parents.
    pub(crate) parent_disconnected: AtomicBool,
    /// The first universe id of this process's world, and the host number of every rank of
    /// that world, or `None` when the hierarchical algorithms are off (see `hosts`).
    pub(crate) world_hosts: OnceLock<Option<(i32, Arc<[u32]>)>>,
    /// Collectives this process ran hierarchically.
    pub(crate) hier_runs: AtomicU64,
    /// The job's part of the seeds of `random::Rand`.
    pub(crate) job_seed: OnceLock<u64>,
    /// The predefined attributes whose address `MPI_Comm_get_attr` hands out.
    pub(crate) attr_values: AttrValues,
    /// Buffered sends (`Universe::set_buffer_size`).
    pub(crate) buffered: Mutex<Buffered>,
    /// The message of a panic of the thread that initialized the library, kept by the panic
    /// hook for the launcher.
    pub(crate) panic_text: Mutex<Option<String>>,
}

// Process-wide because rsmpi's API reaches the running process from values that carry no
// context (`SimpleCommunicator::world()`, requests, datatypes built anywhere, the C handle
// tables, the detector's and the launcher's threads): the one pointer to the current context.
// It is set by `initialize` and never freed: MPI initializes once per process, and a value
// that outlives the `Universe` (a request, a C handle) must find a finalized context, not
// freed memory; what the universe's end finalizes is the context's contents (the engine is
// dropped with it).
static CURRENT: OnceLock<Context> = OnceLock::new();

impl Context {
    fn new() -> Context {
        Context {
            engine: Mutex::new(None),
            held: Mutex::new(None),
            failures: Failures::default(),
            launcher: Launcher::default(),
            answers: Answers::default(),
            acked: Mutex::new(HashMap::new()),
            agreement_seq: Mutex::new(HashMap::new()),
            next_ctx: AtomicU32::new(2),
            parent: OnceLock::new(),
            parent_disconnected: AtomicBool::new(false),
            world_hosts: OnceLock::new(),
            hier_runs: AtomicU64::new(0),
            job_seed: OnceLock::new(),
            attr_values: AttrValues::default(),
            buffered: Mutex::new(Buffered::default()),
            panic_text: Mutex::new(None),
        }
    }

    /// Starts running with `engine` (the end of `initialize`).
    pub(crate) fn run(&self, engine: Engine) {
        *self.engine.lock() = Some(engine);
    }

    /// Holds the engine aside (a process restarted from a checkpoint, until it restored it).
    pub(crate) fn hold_engine(&self) {
        let e = self.engine.lock().take();
        *self.held.lock() = e;
    }

    /// Puts back an engine held aside (none held: nothing to do).
    pub(crate) fn release_engine(&self) {
        let held = self.held.lock().take();
        if let Some(e) = held {
            *self.engine.lock() = Some(e);
        }
    }

    /// Finalization: drops the engine (its connections close) and the program's failure
    /// handlers. What the launcher is told afterwards (that this process finalized) still goes
    /// through the context's connection.
    pub(crate) fn close(&self) {
        *self.engine.lock() = None;
        self.failures.handlers.lock().clear();
    }
}

/// Creates the context of this process (at the start of `initialize`; once per process).
pub(crate) fn create() -> &'static Context {
    if CURRENT.set(Context::new()).is_err() {
        panic!("p2pmpi: the context was created twice");
    }
    current()
}

/// The context of the running process. Panics before `initialize`.
#[inline]
pub(crate) fn current() -> &'static Context {
    match CURRENT.get() {
        Some(c) => c,
        None => panic!("{}", not_running()),
    }
}

/// The context, once `initialize` created it.
pub(crate) fn try_current() -> Option<&'static Context> {
    CURRENT.get()
}

// ------------------------------------------------------------------- what the detector told

/// The detector of failures that runs besides the program, as the context sees it.
pub(crate) trait Detector: Send + Sync {
    /// The program ends: tell the peers that this process is leaving, not failing (waiting
    /// at most `within`).
    fn leave(&self, within: Duration);
    /// The launcher declared the process of detector index `index` dead.
    fn declare(&self, index: u32);
    /// (frames sent, bytes sent, frames rejected, failure notices sent).
    fn counts(&self) -> [u64; 4];
}

/// A confirmed failure of a process of this application.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// The failed process's rank in the world communicator.
    pub rank: i32,
    /// When it was confirmed, as [`crate::time`] (seconds).
    pub at: f64,
    /// How.
    pub cause: Cause,
}

/// How a failure was established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// Its heartbeat stopped for `T_cleanup + T_MAX_HANG` and it did not answer a ping.
    Silent {
        /// The time its counter was allowed to lag (`T_cleanup + T_MAX_HANG`).
        suspicion_after: Duration,
        /// The gossip protocol.
        protocol: String,
    },
    /// The k-monitor detector established it.
    KMonitor {
        /// How, in words.
        how: String,
    },
}

/// A program's handler of failures.
pub(crate) type Handler = Box<dyn Fn(&Notice) + Send + Sync>;

/// What the failure detector found and told (the logic is `failure`'s).
#[derive(Default)]
pub(crate) struct Failures {
    pub(crate) handlers: Mutex<Vec<Handler>>,
    pub(crate) notices: Mutex<Vec<Notice>>,
    /// How many notices `notices` holds (read without its lock by waits that poll it).
    pub(crate) notice_count: AtomicUsize,
    pub(crate) notice_cv: Condvar,
    /// Set when a notice arrived that the communication engine has not seen yet.
    pub(crate) pending: AtomicBool,
    pub(crate) suspicion_after: Mutex<Option<Duration>>,
    pub(crate) sent_datagrams: AtomicU64,
    pub(crate) sent_bytes: AtomicU64,
    /// Datagrams received and dropped: malformed, or their MAC did not verify.
    pub(crate) dropped_datagrams: AtomicU64,
    pub(crate) address: OnceLock<SocketAddr>,
    pub(crate) started: Mutex<Option<Instant>>,
    /// The k-monitor detector, when it runs.
    pub(crate) kmonitor: OnceLock<Box<dyn Detector>>,
    /// The replicas' layout of a job run with `-r R > 1`: the detector then watches slots.
    pub(crate) layout: OnceLock<p2pmpi_core::replication::Layout>,
    /// Slots confirmed failed (replicated jobs).
    pub(crate) dead_slots: Mutex<Vec<usize>>,
    /// Slots this process already reported as suspected (replicated jobs).
    pub(crate) suspected: Mutex<Vec<usize>>,
    /// The universe slot of this job's detector index 0: a spawned replicated job's detector
    /// watches its own processes (indices `0..n`), while the launcher and the engine name them
    /// by universe slot (`base·R + index`); 0 in the parents' job.
    pub(crate) slot_base: AtomicUsize,
}

impl Failures {
    /// Whether any rank was reported failed to this process (cheap: no lock).
    pub(crate) fn any_failed(&self) -> bool {
        self.notice_count.load(Ordering::Acquire) > 0
    }

    /// The ranks confirmed failed so far.
    pub(crate) fn failed_ranks(&self) -> Vec<i32> {
        self.notices.lock().iter().map(|n| n.rank).collect()
    }

    /// The replicas' layout, when the job runs replicas.
    pub(crate) fn layout(&self) -> Option<p2pmpi_core::replication::Layout> {
        self.layout.get().copied()
    }

    /// `T_cleanup + T_MAX_HANG` of this application, when a detector runs.
    pub(crate) fn suspicion_after(&self) -> Option<Duration> {
        *self.suspicion_after.lock()
    }

    /// The time after which a send that makes no progress gives up: 2·T_cleanup (FM §5.3),
    /// the detector's `T_cleanup + T_MAX_HANG`. `None` when no detector runs.
    pub(crate) fn send_timeout(&self) -> Option<Duration> {
        self.suspicion_after().map(|t| 2 * t)
    }

    /// Whether notices arrived that the engine has not seen yet.
    #[inline]
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed)
    }

    /// The engine covers more slots (a spawn's processes): the declarations heard so far are
    /// applied again at its next step, those about slots it did not know yet included.
    pub(crate) fn renotify(&self) {
        if !self.dead_slots.lock().is_empty() {
            self.pending.store(true, Ordering::SeqCst);
        }
    }

    /// Ranks (slots, in a replicated job) notified since the engine last looked.
    pub(crate) fn take_pending(&self) -> Vec<i32> {
        if self.pending.swap(false, Ordering::SeqCst) {
            if self.layout().is_some() {
                return self.dead_slots.lock().iter().map(|&s| s as i32).collect();
            }
            self.failed_ranks()
        } else {
            Vec::new()
        }
    }
}

/// Buffered sends: the attached buffer's size, and the sends still in it (request id, world
/// rank of the peer, the data).
#[derive(Default)]
pub(crate) struct Buffered {
    pub(crate) capacity: usize,
    pub(crate) pending: Vec<(ReqId, Option<i32>, Vec<u8>)>,
}

/// The values of the predefined attributes (`MPI_UNIVERSE_SIZE`, `MPI_APPNUM`), made on first
/// use; `MPI_Comm_get_attr` hands out their address.
#[derive(Default)]
pub(crate) struct AttrValues {
    pub(crate) universe_size: OnceLock<std::os::raw::c_int>,
    pub(crate) appnum: OnceLock<std::os::raw::c_int>,
}

// ------------------------------------------------------------------------------ the launcher

/// The control connection to the launcher (what is said on it is `launcher`'s).
#[derive(Default)]
pub(crate) struct Launcher {
    pub(crate) conn: Mutex<Option<TcpStream>>,
    /// This process is finalizing (or stopping): peers that go away now are not failures.
    pub(crate) finalizing: AtomicBool,
}

/// A decision of an agreement: (AND of the flags, failed members as world ranks, its number),
/// or why the launcher refused the contribution.
pub(crate) type Outcome = std::result::Result<(u32, Vec<u32>, u64), String>;

/// The answers of the launcher that the program waits for (kept by `bootstrap`'s watcher).
#[derive(Default)]
pub(crate) struct Answers {
    /// The answer to this process's spawn request.
    pub(crate) spawned: Mutex<Option<std::result::Result<u32, String>>>,
    pub(crate) spawned_cv: Condvar,
    /// Decided agreements, by (communicator, sequence number).
    pub(crate) decided: Mutex<HashMap<(u64, u64), Outcome>>,
    /// Agreements decided here, in a process started alone.
    pub(crate) alone: AtomicU64,
}

// ------------------------------------------------------------------------------ the engine

/// Applies the peer failures and revocations told to this process since the last call
/// (their pending requests fail).
#[inline]
pub(crate) fn apply_notices(e: &mut Engine) {
    notices_to(&current().failures, e);
}

#[inline(always)]
fn notices_to(f: &Failures, e: &mut Engine) {
    // (Two loads, inline: a blocking wait looks on every round, and almost never finds any.)
    if f.pending() || crate::device::revocations::PENDING.load(Ordering::Relaxed) {
        apply_told(f, e);
    }
}

#[inline(never)]
fn apply_told(f: &Failures, e: &mut Engine) {
    if f.pending() {
        for k in f.take_pending() {
            e.peer_failed(k);
        }
    }
    if crate::device::revocations::PENDING.load(Ordering::Relaxed) {
        e.is_revoked(0);
    }
}

/// The address of this process's data port (`None` for a one-process world). Not in rsmpi.
pub fn data_address() -> Option<std::net::SocketAddr> {
    with_engine(|e| e.local_addr())
}

/// Runs `f` on the engine. Panics when used before `initialize` or after finalization.
pub(crate) fn with_engine<R>(f: impl FnOnce(&mut Engine) -> R) -> R {
    let mut g = current().engine.lock();
    match g.as_mut() {
        Some(e) => f(e),
        None => panic!("{}", not_running()),
    }
}

fn not_running() -> &'static str {
    if CURRENT.get().is_some_and(|c| c.held.lock().is_some()) {
        "p2pmpi: this process was restarted from a checkpoint: call Universe::restored() before communicating"
    } else if is_finalized() {
        "p2pmpi: MPI was already finalized (the Universe was dropped)"
    } else {
        "p2pmpi: MPI is not initialized (call mpi::initialize() first)"
    }
}

/// How long one sleep in the kernel may last before conditions are checked again.
fn block_slice() -> Duration {
    if threading_support() == Threading::Multiple {
        Duration::from_millis(2)
    } else {
        Duration::from_millis(50)
    }
}

/// While spinning, give the core away every this many polls: the kernel finishes some TCP
/// transmissions in softirq context (autocorked small segments are pushed when the previous
/// one is freed), and two processes polling on two cores can starve it for milliseconds.
/// Not while waiting on a peer reached through shared-memory rings alone: nothing of the
/// kernel's is waited for there, and on a machine with other work a yield hands the core
/// to that work for a whole time slice.
const YIELD_EVERY: u32 = 64;

/// While spinning for a peer on this host, looks at its rings this many times between two
/// progress rounds ([`Engine::await_ring`]).
const RING_LOOKS: u32 = 32;

/// A blocking wait reads the clock once every this many polls.
const CLOCK_EVERY: u32 = 8;

/// `P2PMPI_DEBUG` set: blocking waits print the device state (what is posted, queued, …).
fn debug_waits() -> bool {
    // Process-wide because it is a setting of the process's environment, read once.
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("P2PMPI_DEBUG").is_some())
}

/// A wait that did not end at its first round: its spin budget (the waiting policy's,
/// [`waiting`]), and what it tells the policy when it ends.
struct Watch {
    /// When the clock started (after the first round).
    t0: Instant,
    budget: Duration,
}

impl Watch {
    /// The wait ends, `waited` after `t0`: (every few milliseconds) the thread's run-queue
    /// delay.
    #[inline]
    fn end(&self, e: &mut Engine, waited: Duration) {
        let now = self.t0 + waited;
        let delay = if e.waiting.wants_delay(now) { waiting::run_delay() } else { None };
        e.waiting.seen(Seen { delay }, now);
    }
}

/// Makes progress until `check` returns a value. `hint` is the peer whose data is awaited.
/// Polls without sleeping for the spin budget, then sleeps in `epoll_wait`; on a socket the
/// budget is the waiting policy's ([`waiting`]: none on a machine whose cores are taken by
/// other work), on shared-memory rings alone the whole spin. Returns the first fatal communication error instead of
/// waiting forever.
pub(crate) fn wait_until<T>(hint: Option<i32>, mut check: impl FnMut(&mut Engine) -> Option<Result<T>>) -> Result<T> {
    let mut spins: u32 = 0;
    // The clock is read every CLOCK_EVERY rounds: a shared-memory poll costs a few loads,
    // and reading the clock on each round made the loop several times slower.
    let mut rounds: u32 = 0;
    let mut waited = Duration::ZERO;
    // Whether `hint` is reached through shared-memory rings alone, found at the first spin:
    // a wait on a socket skips the looks at rings (two calls that find nothing, on every
    // round). Only the speed depends on it: a progress round moves rings and sockets alike.
    let mut on_rings: Option<bool> = None;
    // The clock's start and the spin budget, fixed after the first round (which spins in
    // any case).
    let mut watch: Option<Watch> = None;
    let ctx = current();
    loop {
        let mut g = ctx.engine.lock();
        let e = g.as_mut().unwrap_or_else(|| panic!("{}", not_running()));
        // Failures and revocations told since are applied before the check: a check that
        // answers at once (a master deciding a test's choice point) must see them, or a
        // program polling with `test` would never learn of them.
        notices_to(&ctx.failures, e);
        if let Some(r) = check(e) {
            if let Some(w) = &watch {
                w.end(e, waited);
            }
            return r;
        }
        if let Some(f) = &e.fatal {
            return Err(f.clone());
        }
        // The clock starts after a first round: a message already there (the usual case
        // for a receiver behind its sender) is taken without reading it.
        if rounds > 0 {
            let w = watch.get_or_insert_with(|| {
                let (t0, full) = (Instant::now(), e.spin);
                // A wait on shared-memory rings alone keeps its spin: under the standard load
                // (a busy loop per core) a spinner keeps its core by the scheduler's fair share,
                // and sleeping on the doorbell cost 8 B 0.36 → 6.8 µs, collectives far more.
                let budget = if on_rings == Some(true) { full } else { e.waiting.budget(full, t0) };
                Watch { t0, budget }
            });
            if rounds % CLOCK_EVERY == 0 {
                waited = w.t0.elapsed();
            }
        }
        rounds = rounds.wrapping_add(1);
        if waited < watch.as_ref().map_or(e.spin, |w| w.budget) {
            let rings = *on_rings.get_or_insert_with(|| e.hint_on_rings(hint));
            if !rings {
                e.progress(hint, None);
            } else {
                e.await_ring(hint, RING_LOOKS);
                match e.ring_poll(hint) {
                    // A frame completed a receive: perhaps the awaited one, looked at under
                    // the same lock.
                    Some(true) => {
                        if let Some(r) = check(e) {
                            if let Some(w) = &watch {
                                w.end(e, waited);
                            }
                            return r;
                        }
                    }
                    Some(false) | None => {
                        e.progress(hint, None);
                    }
                }
            }
            spins = spins.wrapping_add(1);
            if spins % YIELD_EVERY == 0 && !rings {
                drop(g);
                std::thread::yield_now();
            }
        } else if waited < e.yield_spin {
            // Oversubscribed: poll, and give the core to a runnable peer between polls —
            // unless the poll brought something (a receiver behind its sender takes a frame
            // per poll: it reads on rather than give its turn away after each).
            if !e.progress(hint, None) {
                // A non-master sleeps a little instead: the masters' round trips do not
                // wait for it, and its yields took turns of the core from them.
                let nap = e.nap();
                drop(g);
                match nap {
                    Some(d) => std::thread::sleep(d),
                    None => std::thread::yield_now(),
                }
            }
        } else {
            if debug_waits() {
                eprintln!("rank {} blocking ({:?}): hint {:?} {}", e.rank, e.waiting.mode(), hint, e.debug_state());
            }
            e.progress(hint, Some(block_slice()));
            if let Some(limit) = ctx.failures.send_timeout() {
                e.check_stalled_sends(limit);
            }
        }
    }
}

/// Waits for one request and frees it.
pub(crate) fn wait_req(id: ReqId, hint: Option<i32>) -> Result<StatusInfo> {
    wait_until(hint, |e| e.take_done(id))
}

pub(crate) fn fatal_error() -> Option<Error> {
    try_current()?.engine.lock().as_ref().and_then(|e| e.fatal.clone())
}

// ------------------------------------------------------------------- ULFM's acknowledgements

/// Records that the failures of `failed` (ranks of the communicator) are acknowledged on
/// communicator context `ctx`.
pub(crate) fn acknowledge(ctx: u32, failed: impl IntoIterator<Item = i32>) {
    current().acked.lock().entry(ctx).or_default().extend(failed);
}

/// The failed ranks acknowledged on communicator context `ctx`.
pub(crate) fn acknowledged(ctx: u32) -> Vec<i32> {
    current().acked.lock().get(&ctx).map_or_else(Vec::new, |s| s.iter().copied().collect())
}

/// A member of communicator `ctx` (world ranks `members`, `None`: the world) that failed and
/// that this process has not acknowledged on it: its world rank.
pub(crate) fn unacked_failure(ctx: u32, members: Option<&[i32]>) -> Option<i32> {
    let c = current();
    if !c.failures.any_failed() {
        return None;
    }
    let failed = c.failures.failed_ranks();
    let acked = c.acked.lock();
    let acked = acked.get(&ctx);
    failed.into_iter().find(|&w| {
        let rank = match members {
            Some(m) => m.iter().position(|&x| x == w).map(|r| r as i32),
            None => Some(w),
        };
        rank.is_some_and(|r| !acked.is_some_and(|a| a.contains(&r)))
    })
}

/// Waits for receive `id` from `ANY_SOURCE` on communicator `ctx`: it fails with
/// [`Error::PeerLost`](crate::error::Error::PeerLost) naming a failed member while one is not
/// acknowledged ([`FaultTolerant::failure_ack`](crate::ulfm::FaultTolerant::failure_ack) makes such receives possible again), unless a
/// message already matched it. ULFM's `MPI_ERR_PROC_FAILED_PENDING`, made final: the receive
/// is withdrawn, and the program posts it again after acknowledging.
pub(crate) fn wait_any_source(
    id: crate::device::ReqId,
    ctx: u32,
    members: Option<&[i32]>,
) -> crate::error::Result<crate::device::StatusInfo> {
    wait_until(None, |e| {
        if let Some(done) = e.take_done(id) {
            return Some(done);
        }
        if e.follows() {
            // A replica that follows its master: the master withdraws the receive or not,
            // and says so (the receive's choice point).
            return None;
        }
        let w = unacked_failure(ctx, members)?;
        // Withdrawn only if nothing matched it yet (a message on its way in is delivered);
        // a master's replicas are told.
        let err = crate::error::Error::PeerLost {
            rank: w,
            cause: "failed, and not acknowledged on this communicator (a receive from any source cannot tell whether its message would have come from it; acknowledge with failure_ack and receive again)".into(),
        };
        if !e.fail_receive(id, err) {
            return None;
        }
        e.take_done(id)
    })
}
