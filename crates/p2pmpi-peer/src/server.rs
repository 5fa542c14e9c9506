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
    let active = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name(format!("{service}-accept"))
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(stream) = conn else { continue };
                let peer = stream.peer_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
                if active.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                    warn!("{service}: too many connections; closing the one from {peer}");
                    continue;
                }
                active.fetch_add(1, Ordering::SeqCst);
                let (handler, active, secret) = (handler.clone(), active.clone(), secret.clone());
                let spawned = std::thread::Builder::new().name(format!("{service}-conn")).spawn(move || {
                    match SecureConn::accept(stream, &secret, HANDSHAKE_TIMEOUT) {
                        Ok(c) => {
                            let _ = c.set_read_timeout(Some(IDLE_TIMEOUT));
                            handler(c, peer)
                        }
                        Err(e) => warn!("{service}: refused a connection from {peer}: {e}"),
                    }
                    active.fetch_sub(1, Ordering::SeqCst);
                });
                if spawned.is_err() {
                    warn!("{service}: cannot start a thread for {peer}");
                }
            }
        })
        .expect("cannot start an accept thread");
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
