//! The one place where the library ends its process: every `std::process::exit` (and `_exit`)
//! of the crate is here (the test `tests/layers.rs` checks it).
//!
//! This module is in the bottom layer, so it names nothing of the crate: what must be done
//! before the end (tell the launcher, leave the failure detectors) is a [`Farewell`] that the
//! program-interface layer installs at initialization. Until it is installed (a failure while
//! starting), the process ends with its message only.

use std::fmt::Display;
use std::sync::OnceLock;

/// What the higher layers do before this process ends.
pub(crate) struct Farewell {
    /// Tells the launcher that this process stops: (rank or slot, status, message, the lost
    /// rank that caused it).
    pub report_abort: fn(i32, i32, &str, Option<i32>),
    /// Tells the launcher that this rank finished (a replica with nothing left to do).
    pub report_finalized: fn(i32),
    /// Leaves the failure detectors, so that peers do not take this end for a failure.
    pub leave: fn(),
}

// Process-wide because the process ends once, from whichever thread finds the cause (the
// program's, a failure detector's, the launcher's watcher), before a universe exists or after
// it is gone.
static FAREWELL: OnceLock<Farewell> = OnceLock::new();

/// Installs what is done before the process ends (at initialization; the first one stays).
pub(crate) fn install(f: Farewell) {
    let _ = FAREWELL.set(f);
}

thread_local! {
    /// The rank whose loss made this thread's last call fail (a `PeerLost` answered as an
    /// error code through the C layer): an abort for that code names it to the launcher, which
    /// then reports the root cause rather than this process.
    static LOST: std::cell::Cell<Option<i32>> = const { std::cell::Cell::new(None) };
}

/// Notes that this thread's last call failed because rank `rank` was lost.
pub(crate) fn note_lost(rank: i32) {
    LOST.with(|l| l.set(Some(rank)));
}

/// The rank noted by [`note_lost`], forgotten.
pub(crate) fn take_lost() -> Option<i32> {
    LOST.with(|l| l.take())
}

/// Ends the process with `status`; the caller has said and done what it must first.
pub(crate) fn exit(status: i32) -> ! {
    std::process::exit(status)
}

/// Ends the process with `status` at once, without running destructors or exit handlers (a
/// process excluded from the job: a lock held by a thread that froze mid-write must not be
/// waited for).
pub(crate) fn exit_at_once(status: i32) -> ! {
    // SAFETY: `_exit` ends the process at once, without running destructors or atexit
    // handlers that could block on locks held by the threads it ends.
    unsafe { libc::_exit(status) }
}

/// Stops this process because of `cause`: prints `p2pmpi: rank R: cause` on standard error,
/// tells the launcher (`lost`: the rank whose loss caused it), leaves the detectors, and exits
/// with status 1.
pub(crate) fn stop(cause: &dyn Display, lost: Option<i32>) -> ! {
    let rank = crate::lifecycle::own_rank();
    let msg = format!("p2pmpi: rank {rank}: {cause}");
    stop_with(rank, 1, &msg, lost, 1)
}

/// Prints `msg` on standard error, tells the launcher that `who` (a rank, or a slot for a
/// replica) stops with `code`, leaves the detectors, and exits with `status`.
pub(crate) fn stop_with(who: i32, code: i32, msg: &str, lost: Option<i32>, status: i32) -> ! {
    eprintln!("{msg}");
    if let Some(f) = FAREWELL.get() {
        (f.report_abort)(who, code, msg, lost);
        (f.leave)();
    }
    exit(status)
}

/// Ends a replica that has nothing left to do (its master finished the program): the launcher
/// is told that its rank finished, and the process exits with status 0.
pub(crate) fn finished() -> ! {
    if let Some(f) = FAREWELL.get() {
        (f.report_finalized)(crate::lifecycle::own_rank());
        (f.leave)();
    }
    exit(0)
}
