//! The control connection to the launcher (`p2pmpirun`): what this process tells it. Opened
//! by [`crate::bootstrap`], which also reads it; the failure detector reports through it too.

use p2pmpi_wire::control::{self, Control};
use parking_lot::Mutex;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

// Process-wide because the launcher is told from every thread (the program's, the detector's,
// the lease's, the launcher watcher's), before a universe exists and after it is gone.
static CONTROL_CONN: Mutex<Option<TcpStream>> = Mutex::new(None);
static FINALIZING: AtomicBool = AtomicBool::new(false);

/// Keeps the control connection `conn` (at start-up) for what this process tells the launcher.
pub(crate) fn connect(conn: TcpStream) {
    *CONTROL_CONN.lock() = Some(conn);
}

/// Whether a launcher started this process (it has a control connection).
pub(crate) fn connected() -> bool {
    CONTROL_CONN.lock().is_some()
}

/// Sends `msg` to the launcher (nothing without one; a write error is left to the watcher,
/// which sees the connection end).
pub(crate) fn send(msg: &Control) {
    if let Some(c) = CONTROL_CONN.lock().as_mut() {
        let _ = control::write_msg(c, msg);
    }
}

/// Sends `msg` unless the connection stays locked for `limit` (a thread that froze mid-write
/// holds it).
pub(crate) fn try_send_within(msg: &Control, limit: Duration) {
    if let Some(mut c) = CONTROL_CONN.try_lock_for(limit) {
        if let Some(c) = c.as_mut() {
            let _ = control::write_msg(c, msg);
        }
    }
}

/// Tells the launcher this process finalized.
pub(crate) fn report_finalized(rank: i32) {
    FINALIZING.store(true, Ordering::SeqCst);
    send(&Control::Finalized { rank: rank as u32 });
}

/// Whether this process is finalizing (or stopping): peers that go away now are not failures.
pub(crate) fn is_finalizing() -> bool {
    FINALIZING.load(Ordering::SeqCst)
}

/// Marks the start of finalization (launcher loss is then no longer an error).
pub(crate) fn finalizing() {
    FINALIZING.store(true, Ordering::SeqCst);
    send(&Control::Finalizing);
}

/// Tells the launcher this process's detector confirmed the failure of `failed`, before
/// this process stops.
pub(crate) fn report_peer_failed(rank: i32, failed: i32, detail: &str) {
    FINALIZING.store(true, Ordering::SeqCst);
    send(&Control::PeerFailed { rank: rank.max(0) as u32, failed: failed.max(0) as u32, detail: detail.to_string() });
}

/// Tells the launcher of a failure the program handles itself (it keeps running).
pub(crate) fn report_peer_failed_tolerated(rank: i32, failed: i32, detail: &str) {
    send(&Control::PeerFailed { rank: rank.max(0) as u32, failed: failed.max(0) as u32, detail: detail.to_string() });
}
