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

struct Fence {
    origin: Instant,
    slot: u32,
    lease: Mutex<Lease>,
    launcher: Launcher,
}

// Process-wide because the lease is renewed by its own thread and by the launcher's watcher,
// which hold no engine, and the writers' check must stay two atomic loads.
static FENCE: OnceLock<Fence> = OnceLock::new();
/// Until when this process may send, µs since the fence's origin (the fast path's copy of the
/// lease).
static VALID_UNTIL_US: AtomicU64 = AtomicU64::new(0);
static EXCLUDED: AtomicBool = AtomicBool::new(false);
static ON: AtomicBool = AtomicBool::new(false);

/// Starts fencing with leases of `length` for `slot`: false if it was started before.
pub(crate) fn start(length: Duration, slot: i32, launcher: Launcher) -> bool {
    let origin = Instant::now();
    let f = Fence { origin, slot: slot as u32, lease: Mutex::new(Lease::new(length, Duration::ZERO)), launcher };
    if FENCE.set(f).is_err() {
        return false;
    }
    ON.store(true, Ordering::SeqCst);
    true
}

/// Time since the fence's origin, when fencing runs.
pub(crate) fn now() -> Option<Duration> {
    FENCE.get().map(|f| f.origin.elapsed())
}

/// Runs `f` on the lease, when fencing runs.
pub(crate) fn with_lease<R>(f: impl FnOnce(&mut Lease) -> R) -> Option<R> {
    FENCE.get().map(|fence| f(&mut fence.lease.lock()))
}

/// The launcher granted the renewal asked at `stamp_us`.
pub(crate) fn granted(stamp_us: u64) {
    let Some(f) = FENCE.get() else { return };
    let mut l = f.lease.lock();
    l.granted(Duration::from_micros(stamp_us));
    if let Some(v) = l.valid_until() {
        VALID_UNTIL_US.fetch_max(v.as_micros() as u64, Ordering::SeqCst);
    }
}

/// This process's slot, when fencing runs.
pub(crate) fn my_slot() -> Option<u32> {
    FENCE.get().map(|f| f.slot)
}

/// Whether the launcher excluded this process.
pub(crate) fn is_excluded() -> bool {
    EXCLUDED.load(Ordering::SeqCst)
}

/// Records that the launcher excluded this process.
pub(crate) fn set_excluded() {
    EXCLUDED.store(true, Ordering::SeqCst);
}

/// Blocks until this process holds a valid lease (replicated jobs; returns at once
/// otherwise). Every frame the device writes passes here first.
#[inline]
pub(crate) fn wait_lease() {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    let f = FENCE.get().expect("on");
    if (f.origin.elapsed().as_micros() as u64) < VALID_UNTIL_US.load(Ordering::Relaxed) {
        return;
    }
    wait_slow(f);
}

#[cold]
fn wait_slow(f: &Fence) {
    let mut pause = Duration::from_micros(50);
    loop {
        if EXCLUDED.load(Ordering::SeqCst) {
            (f.launcher.excluded)();
        }
        if (f.origin.elapsed().as_micros() as u64) < VALID_UNTIL_US.load(Ordering::SeqCst) {
            return;
        }
        // Ask at once rather than at the next period: a process woken from a freeze learns
        // its fate within a round trip.
        (f.launcher.ask_renewal)(f.origin.elapsed().as_micros() as u64);
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}
