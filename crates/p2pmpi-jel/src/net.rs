//! Connections: the grid's Noise channel ([`SecureConn`], keyed by the grid secret), an
//! accept loop that bounds the connections still in their handshake, and the outbound
//! connections a driver opens (one writer thread and one reader thread each).

use crate::Input;
use p2pmpi_core::jel::{Addr, DecodeError};
use p2pmpi_wire::grid::{JelHello, JelRecord, SnRequest};
use p2pmpi_wire::secure::{GridSecret, SecureConn, SecureError, SecureReader, SecureWriter, HANDSHAKE_TIMEOUT};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::time::Duration;
use tracing::debug;

/// Accepted connections still in their handshake (no grid secret proven yet), at most: a
/// new one pushes the oldest out, so a client without the secret cannot keep a registry or a
/// member from accepting for longer than it keeps sending new connections, and never holds
/// more than this many threads.
pub const MAX_PENDING: usize = 64;
/// Authenticated connections served at once by one listener.
pub const MAX_CONNECTIONS: usize = 4096;
/// The largest record accepted (a snapshot of a pool of ~100 000 members).
pub const MAX_RECORD: usize = 8 << 20;
/// The handshake and the hello, together, must be done within this.
pub const OPEN_TIMEOUT: Duration = HANDSHAKE_TIMEOUT;
/// Messages queued for a connection whose other side does not read: past this the
/// connection counts as broken.
pub const MAX_QUEUED: usize = 4096;
/// Thread stacks: the connection threads only move records.
pub(crate) const STACK: usize = 256 << 10;

static CONN_IDS: AtomicU64 = AtomicU64::new(1);

/// A number naming one connection (so that the end of an old connection is not taken for
/// the end of its replacement).
pub(crate) fn conn_id() -> u64 {
    CONN_IDS.fetch_add(1, Ordering::Relaxed)
}

pub(crate) fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> bool {
    std::thread::Builder::new().name(name.into()).stack_size(STACK).spawn(f).is_ok()
}

/// Stops an accept loop (its thread ends at the next connection, which `stop` makes).
#[derive(Debug)]
pub struct Acceptor {
    stop: Arc<AtomicBool>,
    addr: SocketAddr,
}

impl Acceptor {
    /// Stops accepting. Connections already accepted go on.
    pub fn stop(&self) {
        if !self.stop.swap(true, Ordering::SeqCst) {
            let mut a = self.addr;
            if a.ip().is_unspecified() {
                a.set_ip(IpAddr::from([127, 0, 0, 1]));
            }
            let _ = TcpStream::connect_timeout(&a, Duration::from_secs(1));
        }
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Accepts connections on `listener` in a thread of its own. Each runs the grid's Noise
/// handshake (as responder, within [`OPEN_TIMEOUT`]) on a thread of its own, at most
/// [`MAX_PENDING`] at once (the oldest pushed out), then `handler` on that thread, at most
/// [`MAX_CONNECTIONS`] at once.
pub(crate) fn accept_loop<F>(listener: TcpListener, secret: GridSecret, name: &'static str, handler: F) -> Acceptor
where
    F: Fn(SecureConn, SocketAddr) + Send + Sync + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let addr = listener.local_addr().unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)));
    let acceptor = Acceptor { stop: stop.clone(), addr };
    let handler = Arc::new(handler);
    let pending: Arc<Mutex<VecDeque<(u64, TcpStream)>>> = Arc::default();
    let active = Arc::new(AtomicUsize::new(0));
    spawn(name, move || {
        for stream in listener.incoming() {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let Ok(stream) = stream else { continue };
            let Ok(peer) = stream.peer_addr() else { continue };
            let Ok(clone) = stream.try_clone() else { continue };
            let id = conn_id();
            {
                let mut p = pending.lock();
                while p.len() >= MAX_PENDING {
                    if let Some((_, old)) = p.pop_front() {
                        debug!("{name}: a connection still in its handshake pushed out");
                        let _ = old.shutdown(std::net::Shutdown::Both);
                    }
                }
                p.push_back((id, clone));
            }
            let (secret, handler, active) = (secret.clone(), handler.clone(), active.clone());
            let pending2 = pending.clone();
            let started = spawn(name, move || {
                let pending = pending2;
                // A member is one whose first record decrypted (`await_proof`): a replayed
                // handshake, which cannot send one, never counts as a connection.
                let proof_by = std::time::Instant::now() + OPEN_TIMEOUT;
                let conn = SecureConn::accept(stream, &secret, OPEN_TIMEOUT).and_then(|mut c| {
                    c.set_max_record(MAX_RECORD);
                    c.await_proof(proof_by).map(|()| c)
                });
                let was_pending = {
                    let mut p = pending.lock();
                    let before = p.len();
                    p.retain(|(i, _)| *i != id);
                    p.len() < before
                };
                let mut conn = match conn {
                    Ok(c) if was_pending => c,
                    Ok(_) => return,
                    Err(e) => {
                        debug!("{name}: connection from {peer} refused: {e}");
                        return;
                    }
                };
                if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                    active.fetch_sub(1, Ordering::SeqCst);
                    debug!("{name}: {MAX_CONNECTIONS} connections served: {peer} closed");
                    return;
                }
                conn.set_max_record(MAX_RECORD);
                handler(conn, peer);
                active.fetch_sub(1, Ordering::SeqCst);
            });
            if !started {
                pending.lock().retain(|(i, _)| *i != id);
            }
        }
    });
    acceptor
}

/// Reads the records after the hello of a connection and passes each decoded message on as
/// an [`Input::Msg`] from `from`; ends (and returns why) at the end of the connection or at
/// the first record that is not a message of this core, and then closes it.
pub(crate) fn read_messages<M>(
    reader: &mut SecureReader,
    from: Addr,
    decode: fn(&[u8]) -> Result<M, DecodeError>,
    tx: &Sender<Input<M>>,
) -> String {
    loop {
        match reader.recv::<JelRecord>() {
            Ok(Some(JelRecord::Msg(bytes))) => match decode(&bytes) {
                Ok(msg) => {
                    if tx.send(Input::Msg { from, msg }).is_err() {
                        return "the driver stopped".into();
                    }
                }
                Err(e) => return format!("{e}"),
            },
            Ok(Some(JelRecord::Attached(_) | JelRecord::NotLeader(_))) => return "an unexpected record".into(),
            Ok(Some(JelRecord::Closed(why))) => {
                let _ = tx.send(Input::Told { from, why: why.clone() });
                return why;
            }
            Ok(None) => return "closed".into(),
            Err(e) => return e.to_string(),
        }
    }
}

/// What an outbound connection sends first.
#[derive(Debug, Clone)]
pub(crate) enum Opening {
    /// A registry (a supernode or a standalone one): `SnRequest::Jel(hello)`, then its
    /// `Attached` answer. Tried at each address in turn (a replicated registry's
    /// supernodes, the one to try first first), following the `NotLeader` answers, until
    /// one attaches.
    Registry(JelHello, Vec<SocketAddr>),
    /// Another member: the hello.
    Member(JelHello),
}

/// An outbound connection of a driver: queue encoded messages with `try_send`.
pub(crate) struct Outbound {
    pub conn: u64,
    pub tx: SyncSender<JelRecord>,
    /// When it was last used (the driver's counter): the least recently used is closed
    /// first when a member holds [`MAX_OUTBOUND`].
    pub used: u64,
}

/// Connections a member keeps open to other members, at most (the registry's aside): a
/// gossiping member of a large pool talks to many peers over time, and each connection is a
/// thread here and one at the peer.
pub const MAX_OUTBOUND: usize = 24;

/// Opens a connection to `to` in a thread of its own (the driver never waits for a
/// connection). The writer sends what is queued; to a registry, a reader passes its answers
/// on (`Closed` when the connection ends); a member answers on its own connection to us.
/// `Unreachable` when it cannot be opened or written. `done` is dropped when the writer ends
/// (a leave waits for it).
#[allow(clippy::too_many_arguments)]
pub(crate) fn open<M: Send + 'static>(
    to: Addr,
    local: Option<IpAddr>,
    secret: GridSecret,
    opening: Opening,
    decode: fn(&[u8]) -> Result<M, DecodeError>,
    tx: Sender<Input<M>>,
    done: Sender<()>,
    connect_timeout: Duration,
) -> Outbound {
    let (qtx, qrx) = std::sync::mpsc::sync_channel::<JelRecord>(MAX_QUEUED);
    let conn = conn_id();
    let failed = tx.clone();
    let started = spawn("jel-out", move || {
        let _done = done;
        let r = match &opening {
            Opening::Registry(hello, at) => connect_registry(at, local, &secret, hello, connect_timeout),
            Opening::Member(_) => connect(to, local, &secret, &opening, connect_timeout),
        };
        let c = match r {
            Ok((c, at)) => {
                if matches!(opening, Opening::Registry(..)) {
                    let _ = tx.send(Input::Attached { conn, at });
                }
                c
            }
            Err((why, refused)) => {
                debug!("jel: cannot open a connection to {to}: {why}");
                // Refused: nobody listens there any more (a dead process). A time-out or a
                // handshake cut short says nothing sure (both happen to live peers on a
                // loaded host; a vanished host is found by the cores' own time-outs), and
                // telling the core would make the distributed one forget a live peer.
                let _ = if refused || matches!(opening, Opening::Registry(..)) {
                    tx.send(Input::Unreachable { addr: to, conn, why })
                } else {
                    tx.send(Input::Dropped { addr: to, conn })
                };
                return;
            }
        };
        let (mut reader, mut writer) = c.split();
        if matches!(opening, Opening::Registry(..)) {
            // A registry answers on this connection; a member answers on its own connection
            // to us (this side notices a dead member when a write fails).
            let rtx = tx.clone();
            spawn("jel-in", move || {
                let why = read_messages(&mut reader, to, decode, &rtx);
                let _ = rtx.send(Input::Closed { addr: to, conn, why });
            });
        }
        write_loop(&mut writer, &qrx, |why| {
            let _ = tx.send(Input::Unreachable { addr: to, conn, why });
        });
    });
    if !started {
        // A failure of this process, not of the peer: the core is not told.
        let _ = failed.send(Input::Dropped { addr: to, conn });
    }
    Outbound { conn, tx: qtx, used: 0 }
}

/// Writes the queued records until the queue's sender is dropped (then closes the sending
/// direction after the last one), a [`JelRecord::Closed`] was written (then closes the whole
/// connection) or a write fails (then `failed` is called).
pub(crate) fn write_loop(writer: &mut SecureWriter, rx: &Receiver<JelRecord>, failed: impl FnOnce(String)) {
    while let Ok(rec) = rx.recv() {
        if let Err(e) = writer.send(&rec) {
            failed(e.to_string());
            writer.close();
            return;
        }
        if matches!(rec, JelRecord::Closed(_)) {
            writer.close();
            return;
        }
    }
    writer.shutdown();
}

/// How long a member looks for the leader of a replicated registry (its supernodes answer
/// `NotLeader` while they elect one) before it counts the registry as lost.
pub const FIND_LEADER: Duration = Duration::from_secs(15);

/// Opens and greets; the error says why, and whether the connection was refused.
fn connect(
    to: Addr,
    local: Option<IpAddr>,
    secret: &GridSecret,
    opening: &Opening,
    timeout: Duration,
) -> Result<(SecureConn, Addr), (String, bool)> {
    let mut c = SecureConn::connect_from(local, to, secret, timeout).map_err(|e| {
        let refused = matches!(&e, SecureError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused);
        (e.to_string(), refused)
    })?;
    let opening_err = |e: Greet| match e {
        Greet::Failed(e) | Greet::Refused(e) => (e, false),
        Greet::NotLeader(l) => (format!("not the leader (the leader: {l:?})"), false),
    };
    connect_greet(&mut c, opening, timeout).map_err(opening_err)?;
    Ok((c, to))
}

/// A registry at any of `at`: each in turn, a leader named by a `NotLeader` answer at once;
/// rounds 200 ms apart while some supernode answers `NotLeader` (an election), for
/// [`FIND_LEADER`] at most. Refused everywhere (or a single address that fails): lost.
fn connect_registry(
    at: &[SocketAddr],
    local: Option<IpAddr>,
    secret: &GridSecret,
    hello: &JelHello,
    timeout: Duration,
) -> Result<(SecureConn, Addr), (String, bool)> {
    let deadline = std::time::Instant::now() + FIND_LEADER;
    let opening = Opening::Registry(hello.clone(), Vec::new());
    let mut last = (String::from("no registry address"), false);
    loop {
        let mut queue: VecDeque<SocketAddr> = at.iter().copied().collect();
        let mut tried = Vec::new();
        let mut electing = false;
        while let Some(a) = queue.pop_front() {
            if tried.contains(&a) {
                continue;
            }
            tried.push(a);
            let mut c = match SecureConn::connect_from(local, a, secret, timeout) {
                Ok(c) => c,
                Err(e) => {
                    let refused =
                        matches!(&e, SecureError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused);
                    debug!("jel: registry {a}: {e}");
                    last = (e.to_string(), refused);
                    continue;
                }
            };
            match connect_greet(&mut c, &opening, timeout) {
                Ok(()) => return Ok((c, a)),
                Err(Greet::NotLeader(l)) => {
                    debug!("jel: registry {a} does not lead (leader: {l:?})");
                    electing = true;
                    if let Some(l) = l {
                        queue.push_front(l);
                        tried.retain(|x| *x != l);
                    }
                    last = (format!("{a}: no leader"), false);
                }
                Err(Greet::Refused(e)) => return Err((e, false)),
                Err(Greet::Failed(e)) => {
                    debug!("jel: registry {a}: {e}");
                    last = (e, false);
                    if at.len() == 1 {
                        return Err(last);
                    }
                    electing = true;
                }
            }
        }
        if !electing || std::time::Instant::now() >= deadline {
            return Err(last);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

enum Greet {
    Failed(String),
    /// The registry answered, and refused (a pool of another dissemination, ...).
    Refused(String),
    NotLeader(Option<SocketAddr>),
}

impl From<String> for Greet {
    fn from(e: String) -> Greet {
        Greet::Failed(e)
    }
}

fn connect_greet(c: &mut SecureConn, opening: &Opening, timeout: Duration) -> Result<(), Greet> {
    c.set_max_record(MAX_RECORD);
    match opening {
        Opening::Member(h) => c.send(h).map_err(|e| e.to_string())?,
        Opening::Registry(h, _) => {
            c.send(&SnRequest::Jel(h.clone())).map_err(|e| e.to_string())?;
            c.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
            match c.recv::<JelRecord>() {
                Ok(Some(JelRecord::Attached(Ok(())))) => {}
                Ok(Some(JelRecord::NotLeader(l))) => return Err(Greet::NotLeader(l)),
                Ok(Some(JelRecord::Attached(Err(e)))) => {
                    return Err(Greet::Refused(format!("the registry refused: {e}")))
                }
                Ok(Some(_)) => return Err("the registry answered something else".to_string().into()),
                Ok(None) => return Err("the registry closed the connection".to_string().into()),
                Err(e) => return Err(e.to_string().into()),
            }
            // The registry tells every member the stream's length every fallback interval:
            // three intervals of silence and its host is gone (a `kill -9` or a stop ends the
            // connection at once; this bounds a host that vanished).
            let silence = h.config.map(|c| c.fallback_interval * 3 + c.ping_timeout);
            c.set_read_timeout(silence).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}
