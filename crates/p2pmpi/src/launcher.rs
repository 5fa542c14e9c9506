//! The control connection to the launcher (`p2pmpirun`): what this process tells it. Opened
//! by [`crate::bootstrap`], which also reads it; the failure detector reports through it too.

use crate::context::{try_current, Launcher};
use p2pmpi_wire::control::{self, Control};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The connection's state in the running process's context (`None` before `initialize`: no
/// launcher is known then).
fn st() -> Option<&'static Launcher> {
    try_current().map(|c| &c.launcher)
}

/// Keeps the control connection `conn` (at start-up) for what this process tells the launcher.
pub(crate) fn connect(conn: TcpStream) {
    if let Some(l) = st() {
        *l.conn.lock() = Some(conn);
    }
}

/// Whether a launcher started this process (it has a control connection).
pub(crate) fn connected() -> bool {
    st().is_some_and(|l| l.conn.lock().is_some())
}

/// Sends `msg` to the launcher (nothing without one; a write error is left to the watcher,
/// which sees the connection end).
pub(crate) fn send(msg: &Control) {
    let Some(l) = st() else { return };
    if let Some(c) = l.conn.lock().as_mut() {
        let _ = control::write_msg(c, msg);
    }
}

/// Sends `msg` unless the connection stays locked for `limit` (a thread that froze mid-write
/// holds it).
pub(crate) fn try_send_within(msg: &Control, limit: Duration) {
    let Some(l) = st() else { return };
    if let Some(mut c) = l.conn.try_lock_for(limit) {
        if let Some(c) = c.as_mut() {
            let _ = control::write_msg(c, msg);
        }
    }
}

/// Tells the launcher this process finalized.
pub(crate) fn report_finalized(rank: i32) {
    set_finalizing();
    send(&Control::Finalized { rank: rank as u32 });
}

/// Whether this process is finalizing (or stopping): peers that go away now are not failures.
pub(crate) fn is_finalizing() -> bool {
    st().is_some_and(|l| l.finalizing.load(Ordering::SeqCst))
}

fn set_finalizing() {
    if let Some(l) = st() {
        l.finalizing.store(true, Ordering::SeqCst);
    }
}

/// Marks the start of finalization (launcher loss is then no longer an error).
pub(crate) fn finalizing() {
    set_finalizing();
    send(&Control::Finalizing);
}

/// Tells the launcher this process's detector confirmed the failure of `failed`, before
/// this process stops.
pub(crate) fn report_peer_failed(rank: i32, failed: i32, detail: &str) {
    set_finalizing();
    send(&Control::PeerFailed { rank: rank.max(0) as u32, failed: failed.max(0) as u32, detail: detail.to_string() });
}

/// Tells the launcher of a failure the program handles itself (it keeps running).
pub(crate) fn report_peer_failed_tolerated(rank: i32, failed: i32, detail: &str) {
    send(&Control::PeerFailed { rank: rank.max(0) as u32, failed: failed.max(0) as u32, detail: detail.to_string() });
}
