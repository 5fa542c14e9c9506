//! The running process's context: its engine, and the waits that move it. Every layer above
//! reaches the engine here (communicators, requests, collectives), with the failures and
//! revocations told meanwhile applied before each look.

use crate::device::{Engine, ReqId, StatusInfo};
use crate::error::{Error, Result};
use crate::lifecycle::{is_finalized, threading_support, Threading};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// Process-wide because rsmpi's API reaches the engine from values that carry no context
// (`SimpleCommunicator::world()`, requests, datatypes built anywhere), and the C handle
// tables do too; one lock guards it for every thread.
pub(crate) static ENGINE: Mutex<Option<Engine>> = Mutex::new(None);

/// Applies the peer failures and revocations told to this process since the last call
/// (their pending requests fail).
#[inline]
pub(crate) fn apply_notices(e: &mut Engine) {
    if crate::failure::PENDING.load(Ordering::Relaxed) {
        for k in crate::failure::take_pending() {
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
    let mut g = ENGINE.lock();
    match g.as_mut() {
        Some(e) => f(e),
        None => panic!("{}", not_running()),
    }
}

fn not_running() -> &'static str {
    if is_finalized() {
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
const YIELD_EVERY: u32 = 64;

/// While spinning for a peer on this host, looks at its rings this many times between two
/// progress rounds ([`Engine::await_ring`]).
const RING_LOOKS: u32 = 32;

/// A blocking wait reads the clock once every this many polls.
const CLOCK_EVERY: u32 = 8;

/// `P2PMPI_DEBUG` set: blocking waits print the device state (what is posted, queued, …).
fn debug_waits() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("P2PMPI_DEBUG").is_some())
}

/// Makes progress until `check` returns a value. `hint` is the peer whose data is awaited.
/// Polls without sleeping for the spin budget, then sleeps in `epoll_wait`. Returns the first
/// fatal communication error instead of waiting forever.
pub(crate) fn wait_until<T>(hint: Option<i32>, mut check: impl FnMut(&mut Engine) -> Option<Result<T>>) -> Result<T> {
    let mut start: Option<Instant> = None;
    let mut spins: u32 = 0;
    // The clock is read every CLOCK_EVERY rounds: a shared-memory poll costs a few loads,
    // and reading the clock on each round made the loop several times slower.
    let mut rounds: u32 = 0;
    let mut waited = Duration::ZERO;
    loop {
        let mut g = ENGINE.lock();
        let e = g.as_mut().unwrap_or_else(|| panic!("{}", not_running()));
        // Failures and revocations told since are applied before the check: a check that
        // answers at once (a master deciding a test's choice point) must see them, or a
        // program polling with `test` would never learn of them.
        apply_notices(e);
        if let Some(r) = check(e) {
            return r;
        }
        if let Some(f) = &e.fatal {
            return Err(f.clone());
        }
        // The clock starts after a first round: a message already there (the usual case
        // for a receiver behind its sender) is taken without reading it.
        if rounds > 0 {
            let t0 = *start.get_or_insert_with(Instant::now);
            if rounds % CLOCK_EVERY == 0 {
                waited = t0.elapsed();
            }
        }
        rounds = rounds.wrapping_add(1);
        if waited < e.spin {
            e.await_ring(hint, RING_LOOKS);
            match e.ring_poll(hint) {
                // A frame completed a receive: perhaps the awaited one, looked at under the
                // same lock.
                Some(true) => {
                    if let Some(r) = check(e) {
                        return r;
                    }
                }
                Some(false) | None => {
                    e.progress(hint, None);
                }
            }
            spins = spins.wrapping_add(1);
            if spins % YIELD_EVERY == 0 {
                drop(g);
                std::thread::yield_now();
            }
        } else if waited < e.yield_spin {
            // Oversubscribed: poll, and give the core to a runnable peer between polls —
            // unless the poll brought something (a receiver behind its sender takes a frame
            // per poll: it reads on rather than give its turn away after each).
            if !e.progress(hint, None) {
                drop(g);
                std::thread::yield_now();
            }
        } else {
            if debug_waits() {
                eprintln!("rank {} blocking: hint {:?} {}", e.rank, hint, e.debug_state());
            }
            e.progress(hint, Some(block_slice()));
            if let Some(limit) = crate::failure::send_timeout() {
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
    ENGINE.lock().as_ref().and_then(|e| e.fatal.clone())
}

/// The universe size (`MPI_UNIVERSE_SIZE`): the processes the grid could give, at least the
/// job's.
pub(crate) fn universe_size() -> usize {
    let job = with_engine(|e| e.world_size as usize);
    let known = std::env::var(crate::bootstrap::env::UNIVERSE_SIZE).ok().and_then(|v| v.trim().parse::<usize>().ok());
    known.map_or(job, |u| u.max(job))
}

/// The application number (`MPI_APPNUM`): in a process started by `spawn_multiple`, which
/// of its programs it runs; 0 otherwise.
pub(crate) fn appnum() -> isize {
    std::env::var(crate::bootstrap::env::APPNUM).ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

// ------------------------------------------------------------------- ULFM's acknowledgements

// Process-wide for the same reason as the engine: communicators carry no context.
/// The failed ranks (of the communicator) acknowledged per communicator context.
static ACKED: Mutex<Option<HashMap<u32, BTreeSet<i32>>>> = Mutex::new(None);

/// Records that the failures of `failed` (ranks of the communicator) are acknowledged on
/// communicator context `ctx`.
pub(crate) fn acknowledge(ctx: u32, failed: impl IntoIterator<Item = i32>) {
    ACKED.lock().get_or_insert_with(HashMap::new).entry(ctx).or_default().extend(failed);
}

/// The failed ranks acknowledged on communicator context `ctx`.
pub(crate) fn acknowledged(ctx: u32) -> Vec<i32> {
    ACKED.lock().as_ref().and_then(|m| m.get(&ctx)).map_or_else(Vec::new, |s| s.iter().copied().collect())
}

/// A member of communicator `ctx` (world ranks `members`, `None`: the world) that failed and
/// that this process has not acknowledged on it: its world rank.
pub(crate) fn unacked_failure(ctx: u32, members: Option<&[i32]>) -> Option<i32> {
    if !crate::failure::any_failed() {
        return None;
    }
    let failed = crate::failure::failed_ranks();
    let acked = ACKED.lock();
    let acked = acked.as_ref().and_then(|m| m.get(&ctx));
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
