//! The accept loop shared by every grid service: authenticate, then hand the connection to
//! the service, one thread per connection.
//!
//! Why threads and blocking sockets rather than an async runtime: a peer's control plane sees
//! a handful of short request/answer connections per job (reserve, stage, launch, ping), and a
//! launched job's connection mostly waits on its processes. A thread per connection with
//! socket time-outs keeps each service a straight-line function that is easy to read against
//! the thesis' figures, and the connection cap bounds the threads. The hot path of the grid is
//! the MPI data plane, which lives in the library, not here.

use p2pmpi_wire::secure::{GridSecret, SecureConn, HANDSHAKE_TIMEOUT};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;

/// Connections served at once per service; more are closed with a log line.
pub const MAX_CONNECTIONS: usize = 256;
/// Time allowed between two records of a request/answer connection.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(15);

/// Accepts connections on `listener` in a new thread; each authenticated connection is
/// served by `handler` in its own thread. Connections that fail the handshake (no or wrong
/// grid secret, garbage, stall) are logged and closed.
pub fn serve<F>(service: &'static str, listener: TcpListener, secret: GridSecret, handler: F)
where
    F: Fn(SecureConn, SocketAddr) + Send + Sync + 'static,
{
    let handler = Arc::new(handler);
    let slots = Slots::new(MAX_CONNECTIONS);
    std::thread::Builder::new()
        .name(format!("{service}-accept"))
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(stream) = conn else { continue };
                let peer = stream.peer_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
                let Some(slot) = slots.take() else {
                    warn!("{service}: too many connections; closing the one from {peer}");
                    continue;
                };
                let (handler, secret) = (handler.clone(), secret.clone());
                let builder = std::thread::Builder::new().name(format!("{service}-conn"));
                let started = spawn_with_slot(builder, slot, move || {
                    match SecureConn::accept(stream, &secret, HANDSHAKE_TIMEOUT) {
                        Ok(c) => {
                            let _ = c.set_read_timeout(Some(IDLE_TIMEOUT));
                            handler(c, peer)
                        }
                        Err(e) => warn!("{service}: refused a connection from {peer}: {e}"),
                    }
                });
                if let Err(e) = started {
                    warn!("{service}: cannot start a thread for {peer}: {e}; connection closed");
                }
            }
        })
        .expect("cannot start an accept thread");
}

/// The connection slots of one service: at most `max` connections served at once.
#[derive(Debug, Clone)]
pub struct Slots {
    active: Arc<AtomicUsize>,
    max: usize,
}

/// One taken slot, given back when dropped: when its connection's thread ends, also by a
/// panic, or at once if that thread could not start.
#[derive(Debug)]
pub struct Slot(Arc<AtomicUsize>);

impl Slots {
    pub fn new(max: usize) -> Self {
        Slots { active: Arc::new(AtomicUsize::new(0)), max }
    }

    /// Takes a slot, unless all `max` are in use.
    pub fn take(&self) -> Option<Slot> {
        let taken = self.active.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < self.max).then_some(n + 1));
        taken.ok().map(|_| Slot(self.active.clone()))
    }

    /// Slots in use now.
    pub fn in_use(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `work` in a new thread from `builder`, holding `slot` until the thread ends. If the
/// thread cannot start, the slot is given back before this returns the error.
pub fn spawn_with_slot<W>(builder: std::thread::Builder, slot: Slot, work: W) -> std::io::Result<()>
where
    W: FnOnce() + Send + 'static,
{
    builder
        .spawn(move || {
            let _slot = slot;
            work()
        })
        .map(drop)
}

/// Is this address one of this host's own (a local command, not a remote peer)?
pub fn is_local(peer: IpAddr, me: IpAddr) -> bool {
    peer.is_loopback() || peer == me
}

/// Logs why a connection ends, unless it ended cleanly.
pub fn log_end(service: &str, peer: SocketAddr, e: &p2pmpi_wire::secure::SecureError) {
    if e.is_timeout() {
        warn!("{service}: connection from {peer} stalled; closed");
    } else {
        warn!("{service}: dropped connection from {peer}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Waits (bounded) until `slots` has `n` in use.
    fn wait_in_use(slots: &Slots, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while slots.in_use() != n {
            assert!(Instant::now() < deadline, "{} slot(s) in use, expected {n}", slots.in_use());
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn slots_are_capped_and_given_back() {
        let slots = Slots::new(2);
        let (a, b) = (slots.take().unwrap(), slots.take().unwrap());
        assert!(slots.take().is_none(), "a third connection is refused");
        drop(a);
        let c = slots.take().expect("a slot given back is taken again");
        assert_eq!(slots.in_use(), 2);
        drop((b, c));
        assert_eq!(slots.in_use(), 0);
    }

    #[test]
    fn a_thread_that_cannot_start_gives_its_slot_back() {
        let slots = Slots::new(1);
        // No system can map a stack this large: the thread cannot start.
        let builder = std::thread::Builder::new().stack_size(1 << 62);
        let r = spawn_with_slot(builder, slots.take().unwrap(), || unreachable!("the thread never runs"));
        assert!(r.is_err());
        assert_eq!(slots.in_use(), 0, "the slot leaked");
        assert!(slots.take().is_some(), "the service still accepts a connection");
    }

    #[test]
    fn a_panicking_connection_gives_its_slot_back() {
        let slots = Slots::new(1);
        spawn_with_slot(std::thread::Builder::new(), slots.take().unwrap(), || panic!("a bug in a handler")).unwrap();
        wait_in_use(&slots, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        spawn_with_slot(std::thread::Builder::new(), slots.take().unwrap(), move || tx.send(()).unwrap()).unwrap();
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        wait_in_use(&slots, 0);
    }
}
