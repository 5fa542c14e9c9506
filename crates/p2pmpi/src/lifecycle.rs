//! Where this process stands in the library's life (not initialized, running, finalized), its
//! clock (`MPI_Wtime`), its rank and the thread that initialized: what every layer may ask, so
//! kept in the bottom layer. [`crate::environment`] moves it along.

use std::os::raw::c_double;
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::thread::ThreadId;
use std::time::Instant;

const UNINIT: u8 = 0;
const RUNNING: u8 = 1;
const FINALIZED: u8 = 2;

const STOP: u8 = 0;
const NOTIFY: u8 = 1;

/// Where the library stands in its life.
struct Life {
    state: AtomicU8,
    own_rank: AtomicI32,
    init_thread: OnceLock<ThreadId>,
    epoch: OnceLock<Instant>,
    threading: AtomicU8,
    /// The failure policy the program chose (it may change it at any time, from any thread).
    policy: AtomicU8,
}

// Process-wide because MPI's own calls are: `is_initialized`, `is_finalized`, `time` and
// `set_policy` take no argument and answer before a universe exists (the policy is chosen
// before `initialize`) and after it is gone, from any thread (the panic hook, the detector's
// and the launcher's threads); and the bottom layer (`fatal`'s messages), which cannot name
// the context, names the rank.
static LIFE: Life = Life {
    state: AtomicU8::new(UNINIT),
    own_rank: AtomicI32::new(-1),
    init_thread: OnceLock::new(),
    epoch: OnceLock::new(),
    threading: AtomicU8::new(0),
    policy: AtomicU8::new(STOP),
};

/// Starts the library's life (on the calling thread): false if it was started before.
pub(crate) fn begin() -> bool {
    if LIFE.state.compare_exchange(UNINIT, RUNNING, Ordering::SeqCst, Ordering::SeqCst).is_err() {
        return false;
    }
    LIFE.epoch.get_or_init(Instant::now);
    let _ = LIFE.init_thread.set(std::thread::current().id());
    true
}

/// Ends a running library's life: false if it was not running.
pub(crate) fn end() -> bool {
    LIFE.state.compare_exchange(RUNNING, FINALIZED, Ordering::SeqCst, Ordering::SeqCst).is_ok()
}

/// Whether the library runs (initialized, not finalized).
pub(crate) fn is_running() -> bool {
    LIFE.state.load(Ordering::SeqCst) == RUNNING
}

/// Whether `initialize` was called (still true after finalization, as in MPI).
pub fn is_initialized() -> bool {
    LIFE.state.load(Ordering::SeqCst) != UNINIT
}

/// Whether the universe was finalized.
pub fn is_finalized() -> bool {
    LIFE.state.load(Ordering::SeqCst) == FINALIZED
}

/// Sets this process's world rank (at initialization).
pub(crate) fn set_own_rank(rank: i32) {
    LIFE.own_rank.store(rank, Ordering::SeqCst);
}

/// This process's world rank (-1 before initialization), for messages.
pub(crate) fn own_rank() -> i32 {
    LIFE.own_rank.load(Ordering::Relaxed)
}

/// Whether the current thread is the one that initialized.
pub(crate) fn is_init_thread() -> bool {
    LIFE.init_thread.get().is_some_and(|t| *t == std::thread::current().id())
}

/// Seconds elapsed since an arbitrary point in the past (`MPI_Wtime`).
pub fn time() -> c_double {
    LIFE.epoch.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// Resolution of [`time`] in seconds (`MPI_Wtick`).
pub fn time_resolution() -> c_double {
    1e-9
}

/// Thread support levels, as in MPI.
#[derive(Copy, Clone, PartialEq, Eq, Debug, PartialOrd, Ord, Hash)]
pub enum Threading {
    /// Only one thread exists.
    Single,
    /// Only the initializing thread makes MPI calls.
    Funneled,
    /// Any thread may call, one at a time.
    Serialized,
    /// Any thread, concurrently.
    Multiple,
}

/// Records the thread support given at initialization.
pub(crate) fn set_threading(t: Threading) {
    LIFE.threading.store(t as u8, Ordering::SeqCst);
}

/// The level of thread support provided.
pub fn threading_support() -> Threading {
    match LIFE.threading.load(Ordering::SeqCst) {
        0 => Threading::Single,
        1 => Threading::Funneled,
        2 => Threading::Serialized,
        _ => Threading::Multiple,
    }
}

/// What the library does when the failure detector confirms that a process failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Print an error naming the failed rank and stop this process (the default: the job
    /// stops everywhere).
    Stop,
    /// Tell the program (handlers, [`failed_ranks`](crate::failure::failed_ranks), [`wait_for_failure`](crate::failure::wait_for_failure)) and keep running:
    /// communication with the failed rank then fails with an error naming it (`try_*` calls
    /// return it; plain calls stop the process with it), communication among the others goes
    /// on, and [`crate::ulfm`] agrees and shrinks communicators around the failure.
    Notify,
}

/// Chooses what happens on a confirmed failure (call before `initialize()`: the launcher
/// learns at registration whether the program handles failures).
pub fn set_policy(p: Policy) {
    LIFE.policy.store(if p == Policy::Notify { NOTIFY } else { STOP }, Ordering::SeqCst);
}

/// The current policy.
pub fn policy() -> Policy {
    if LIFE.policy.load(Ordering::SeqCst) == NOTIFY {
        Policy::Notify
    } else {
        Policy::Stop
    }
}

/// The name of this host.
pub fn processor_name() -> std::result::Result<String, std::string::FromUtf8Error> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`, which outlives the call
    // (no std API gives the host name).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return Ok("localhost".into());
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec())
}
