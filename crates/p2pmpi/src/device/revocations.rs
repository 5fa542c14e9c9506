//! Communicator contexts revoked by a member (ULFM's `MPI_Comm_revoke`), as this process heard
//! them: the mailbox through which the layers above (the launcher's watcher, `ulfm`) tell the
//! engine, which applies them at its next look (its requests on them fail).

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

// Process-wide because revocations are told by the launcher's watcher thread, which holds no
// engine, and the engine's per-call check must stay one atomic load.
/// Every communicator context revoked in this job so far (as this process heard).
static REVOKED: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());
/// Those the engine has not applied yet.
static UNAPPLIED: Mutex<Vec<u32>> = Mutex::new(Vec::new());
/// Revocations wait to be applied by the engine.
pub(crate) static PENDING: AtomicBool = AtomicBool::new(false);

/// Communicator context `ctx` was revoked (told by the launcher, or by this process itself).
pub(crate) fn told(ctx: u32) {
    if REVOKED.lock().insert(ctx) {
        UNAPPLIED.lock().push(ctx);
        PENDING.store(true, Ordering::SeqCst);
    }
}

/// Whether communicator context `ctx` was revoked, as this process heard so far.
pub(crate) fn is_revoked(ctx: u32) -> bool {
    REVOKED.lock().contains(&ctx)
}

/// The revocations the engine has not applied yet.
pub(crate) fn take() -> Vec<u32> {
    PENDING.store(false, Ordering::SeqCst);
    std::mem::take(&mut *UNAPPLIED.lock())
}
