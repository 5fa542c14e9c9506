//! The monitor's connections: served over HTTP/1.1 (plain on loopback, else TLS), each on a
//! task of its own, and bounded so that idle connections cannot make it stop answering its
//! token holders (issue 38).
//!
//! A connection is *unproven* until one of its requests carried the token ([`Proven`] is set
//! by the token check). Unproven connections are closed [`UNPROVEN_TIMEOUT`] after they
//! opened (TLS handshake included), and at most [`MAX_UNPROVEN`] are kept: a newcomer closes
//! the oldest one. Proven connections (an open page's event stream) stay; in all at most
//! [`MAX_CONNECTIONS`] are open, more are closed at once. So a flood of idle connections,
//! which needs no token, costs the monitor at most [`MAX_UNPROVEN`] descriptors for at most
//! [`UNPROVEN_TIMEOUT`] each, and a token holder's new connection is the newest: served.

use axum::Router;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// Connections kept open that have not (yet) made a request with the token.
pub const MAX_UNPROVEN: usize = 128;
/// Connections open in all.
pub const MAX_CONNECTIONS: usize = 512;
/// Time an unproven connection is kept.
pub const UNPROVEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Set once a request of this connection carried the token (a request extension).
#[derive(Clone, Default)]
pub struct Proven(Arc<AtomicBool>);

impl Proven {
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn get(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

struct Entry {
    proven: Proven,
    close: Option<oneshot::Sender<()>>,
}

/// The open connections, oldest first (pure bookkeeping; ids grow).
#[derive(Default)]
struct Table {
    next: u64,
    open: BTreeMap<u64, Entry>,
}

impl Table {
    /// Admits a connection: its id, its flag and what closes it; `None` when all
    /// [`MAX_CONNECTIONS`] are proven ones. Closes the oldest unproven one when needed.
    fn admit(&mut self) -> Option<(u64, Proven, oneshot::Receiver<()>)> {
        let unproven = self.open.values().filter(|e| !e.proven.get()).count();
        if unproven >= MAX_UNPROVEN || self.open.len() >= MAX_CONNECTIONS {
            let oldest = self.open.iter().find(|(_, e)| !e.proven.get()).map(|(&id, _)| id);
            if let Some(mut e) = oldest.and_then(|id| self.open.remove(&id)) {
                if let Some(tx) = e.close.take() {
                    let _ = tx.send(());
                }
            }
        }
        if self.open.len() >= MAX_CONNECTIONS {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let id = self.next;
        self.next += 1;
        let proven = Proven::default();
        self.open.insert(id, Entry { proven: proven.clone(), close: Some(tx) });
        Some((id, proven, rx))
    }
}

/// Leaves the table when its connection's task ends.
struct Admitted {
    table: Arc<Mutex<Table>>,
    id: u64,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.table.lock().unwrap_or_else(|p| p.into_inner()).open.remove(&self.id);
    }
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> anyhow::Result<()> {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let table = Arc::new(Mutex::new(Table::default()));
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors, say: wait a little rather than spin.
                tracing::warn!("monitor: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some((id, proven, close)) = table.lock().unwrap_or_else(|p| p.into_inner()).admit() else {
            drop(tcp);
            continue;
        };
        let admitted = Admitted { table: table.clone(), id };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let _admitted = admitted;
            let app = app.layer(axum::Extension(proven.clone()));
            let work = async move {
                match acceptor {
                    Some(acceptor) => {
                        if let Ok(tls) = acceptor.accept(tcp).await {
                            http(tls, app).await;
                        }
                    }
                    None => http(tcp, app).await,
                }
            };
            tokio::pin!(work);
            let mut close = close;
            tokio::select! {
                _ = &mut work => return,
                _ = &mut close => return,
                _ = tokio::time::sleep(UNPROVEN_TIMEOUT) => {}
            }
            if proven.get() {
                tokio::select! {
                    _ = &mut work => {}
                    _ = close => {}
                }
            }
        });
    }
}

async fn http<I>(io: I, app: Router)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper_util::service::TowerToHyperService::new(app);
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(hyper_util::rt::TokioIo::new(io), svc).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_unproven_connection_makes_room_and_proven_ones_stay() {
        let mut t = Table::default();
        let (first, p0, mut c0) = t.admit().unwrap();
        p0.set();
        let mut closers = Vec::new();
        for _ in 0..=MAX_UNPROVEN {
            closers.push(t.admit().unwrap());
        }
        // The 129th unproven one closed the oldest unproven, not the proven one.
        assert!(closers[0].2.try_recv().is_ok(), "the oldest unproven was not closed");
        assert!(c0.try_recv().is_err());
        assert!(t.open.contains_key(&first));
        assert_eq!(t.open.values().filter(|e| !e.proven.get()).count(), MAX_UNPROVEN);
        // All proven: beyond MAX_CONNECTIONS newcomers are refused.
        for e in t.open.values() {
            e.proven.set();
        }
        while t.open.len() < MAX_CONNECTIONS {
            let (_, p, _) = t.admit().unwrap();
            p.set();
        }
        assert!(t.admit().is_none());
    }
}
