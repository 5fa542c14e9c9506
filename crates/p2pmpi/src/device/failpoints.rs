//! Deterministic fault injection for the tests of the replication protocol: a master dies
//! at a chosen point of a send (thesis figure 4.8). Compiled in with the `failpoints` feature
//! only; the points are armed per process from `P2PMPI_FAILPOINTS_SLOT<k>` (see
//! `crate::environment`). Without the feature every function is empty.

use super::conn::Conn;
use super::conn::Payload;
use p2pmpi_wire::Header;

#[cfg(feature = "failpoints")]
fn die(window: &str) -> ! {
    eprintln!("p2pmpi: failpoint {window}: this process dies now");
    // SAFETY: kill and getpid take no pointers; SIGKILL to this very process ends it at once,
    // as a crash would (the tests tell it from an orderly exit by the signal).
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    std::process::abort()
}

/// Whether any point is armed in this process (set by `environment`).
#[cfg(feature = "failpoints")]
pub(crate) static ARMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cfg(feature = "failpoints")]
fn armed() -> bool {
    ARMED.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(feature = "failpoints")]
fn hit(name: &str) -> bool {
    armed() && fail::eval(name, |_| ()).is_some()
}

/// Writes half of a frame, blocking, then dies.
/// Writes the first half of the frame the way the connection's frames go (its shared-memory
/// ring, else its socket), then dies.
#[cfg(feature = "failpoints")]
fn half_and_die(window: &str, conn: Option<&mut Conn>, h: &Header, payload: &[u8]) -> ! {
    let mut bytes = h.encode().to_vec();
    bytes.extend_from_slice(payload);
    let half = bytes.len() / 2;
    if let Some(c) = conn {
        c.write_prefix(&bytes[..half]);
    }
    die(window)
}

/// `start_frozen`: the process stops itself (SIGSTOP) as the job starts, before it connected
/// to anyone, as a machine paused at that moment would; `start_killed`: it dies there.
pub(super) fn at_start() {
    #[cfg(feature = "failpoints")]
    if hit("start_killed") {
        die("start_killed");
    }
    #[cfg(feature = "failpoints")]
    if hit("start_frozen") {
        eprintln!("p2pmpi: failpoint start_frozen: this process freezes now");
        // SAFETY: raise takes no pointer; SIGSTOP stops this process until a SIGCONT.
        unsafe {
            libc::raise(libc::SIGSTOP);
        }
    }
}

/// Δ1 (before the first transmission) and Δ3 (between the first and the second).
#[allow(unused_variables)]
pub(super) fn before_transmission(i: usize) {
    #[cfg(feature = "failpoints")]
    {
        let name = match i {
            0 => "delta1",
            1 => "delta3",
            _ => return,
        };
        if hit(name) {
            die(name)
        }
    }
}

/// Δ2 and Δ4: part of the first (second) transmission written.
#[allow(unused_variables)]
pub(super) fn partial_transmission(i: usize, conn: Option<&mut Conn>, h: &Header, payload: &Payload) {
    #[cfg(feature = "failpoints")]
    {
        let name = match i {
            0 => "delta2",
            1 => "delta4",
            _ => return,
        };
        if hit(name) {
            half_and_die(name, conn, h, payload.bytes())
        }
    }
}

/// Δ5: every transmission written, no commit sent.
pub(super) fn after_transmissions() {
    #[cfg(feature = "failpoints")]
    if hit("delta5") {
        die("delta5")
    }
}

/// Δ6 (part of the first commit written) and Δ7 (between the first and second commit).
#[allow(unused_variables)]
pub(super) fn partial_commit(i: usize, conn: Option<&mut Conn>, h: &Header) {
    #[cfg(feature = "failpoints")]
    {
        if i == 0 && hit("delta6") {
            half_and_die("delta6", conn, h, &[])
        }
        if i == 1 && hit("delta7") {
            die("delta7")
        }
    }
}

/// After every commit.
pub(super) fn after_commits() {
    #[cfg(feature = "failpoints")]
    if hit("after_commit") {
        die("after_commit")
    }
}

/// With failpoints armed, every frame of the protocol is written out before the next step,
/// so that a window is exactly what it says (the caller writes it out when this says so).
pub(super) fn hold_writes() -> bool {
    #[cfg(feature = "failpoints")]
    let on = armed();
    #[cfg(not(feature = "failpoints"))]
    let on = false;
    on
}

/// A spawn's root between the steps of its request: `spawn_before_request` (before it asks
/// its launcher) and `spawn_after_answer` (the launcher started the children and answered;
/// the answer is not broadcast yet).
#[allow(unused_variables)]
pub(crate) fn spawn_window(name: &'static str) {
    #[cfg(feature = "failpoints")]
    if hit(name) {
        die(name)
    }
}
