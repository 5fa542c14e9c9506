//! Fencing's lease, as the writers see it (replicated jobs, thesis §5.4): nothing leaves a
//! replica that holds no valid lease from the launcher. Every frame the engine writes passes
//! [`wait_lease`] first, so the lease is kept in the bottom layer; asking the launcher for a
//! renewal and leaving when excluded are the bootstrap's (`bootstrap::fence`), installed with
//! [`start`] and called only when the lease ran out.

use p2pmpi_core::fencing::Lease;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What the bootstrap does for the lease.
pub(crate) struct Launcher {
    /// Asks the launcher for a renewal stamped `stamp_us` (µs since the fence's origin).
    pub ask_renewal: fn(u64),
    /// Leaves the job: the launcher excluded this process.
    pub excluded: fn() -> !,
}

struct Setup {
    origin: Instant,
    slot: u32,
    lease: Mutex<Lease>,
    launcher: Launcher,
}

/// The lease of this process.
struct Fence {
    /// Set when fencing started.
    setup: OnceLock<Setup>,
    /// Whether fencing runs (the writers' first look).
    on: AtomicBool,
    /// Until when this process may send, µs since the fence's origin (the fast path's copy
    /// of the lease).
    valid_until_us: AtomicU64,
    /// The launcher excluded this process.
    excluded: AtomicBool,
}

// Process-wide because the engine (below the context, which it cannot name) checks it before
// every frame it writes, with one atomic load when fencing is off and two when it runs, and
// the lease's thread and the launcher's watcher renew it without the engine's lock.
static FENCE: Fence = Fence {
    setup: OnceLock::new(),
    on: AtomicBool::new(false),
    valid_until_us: AtomicU64::new(0),
    excluded: AtomicBool::new(false),
};

/// Starts fencing with leases of `length` for `slot`: false if it was started before.
pub(crate) fn start(length: Duration, slot: i32, launcher: Launcher) -> bool {
    let origin = Instant::now();
    let f = Setup { origin, slot: slot as u32, lease: Mutex::new(Lease::new(length, Duration::ZERO)), launcher };
    if FENCE.setup.set(f).is_err() {
        return false;
    }
    FENCE.on.store(true, Ordering::SeqCst);
    true
}

/// Time since the fence's origin, when fencing runs.
pub(crate) fn now() -> Option<Duration> {
    FENCE.setup.get().map(|f| f.origin.elapsed())
}

/// Runs `f` on the lease, when fencing runs.
pub(crate) fn with_lease<R>(f: impl FnOnce(&mut Lease) -> R) -> Option<R> {
    FENCE.setup.get().map(|fence| f(&mut fence.lease.lock()))
}

/// The launcher granted the renewal asked at `stamp_us`.
pub(crate) fn granted(stamp_us: u64) {
    let Some(f) = FENCE.setup.get() else { return };
    let mut l = f.lease.lock();
    l.granted(Duration::from_micros(stamp_us));
    if let Some(v) = l.valid_until() {
        FENCE.valid_until_us.fetch_max(v.as_micros() as u64, Ordering::SeqCst);
    }
}

/// This process's slot, when fencing runs.
pub(crate) fn my_slot() -> Option<u32> {
    FENCE.setup.get().map(|f| f.slot)
}

/// Whether the launcher excluded this process.
pub(crate) fn is_excluded() -> bool {
    FENCE.excluded.load(Ordering::SeqCst)
}

/// Records that the launcher excluded this process.
pub(crate) fn set_excluded() {
    FENCE.excluded.store(true, Ordering::SeqCst);
}

/// Blocks until this process holds a valid lease (replicated jobs; returns at once
/// otherwise). Every frame the device writes passes here first.
#[inline]
pub(crate) fn wait_lease() {
    if !FENCE.on.load(Ordering::Relaxed) {
        return;
    }
    let f = FENCE.setup.get().expect("on");
    if (f.origin.elapsed().as_micros() as u64) < FENCE.valid_until_us.load(Ordering::Relaxed) {
        return;
    }
    wait_slow(f);
}

#[cold]
fn wait_slow(f: &Setup) {
    let mut pause = Duration::from_micros(50);
    loop {
        if FENCE.excluded.load(Ordering::SeqCst) {
            (f.launcher.excluded)();
        }
        if (f.origin.elapsed().as_micros() as u64) < FENCE.valid_until_us.load(Ordering::SeqCst) {
            return;
        }
        // Ask at once rather than at the next period: a process woken from a freeze learns
        // its fate within a round trip.
        (f.launcher.ask_renewal)(f.origin.elapsed().as_micros() as u64);
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}
