//! The accept loop shared by every grid service (and the launcher's control port):
//! authenticate, then hand the connection to the service, one thread per connection.
//!
//! Why threads and blocking sockets rather than an async runtime: a peer's control plane sees
//! a handful of short request/answer connections per job (reserve, stage, launch, ping), and a
//! launched job's connection mostly waits on its processes. A thread per connection with
//! socket time-outs keeps each service a straight-line function that is easy to read against
//! the thesis' figures, and the connection caps bound the threads. The hot path of the grid is
//! the MPI data plane, which lives in the library, not here.
//!
//! ## Admission: nobody is locked out without the secret
//!
//! A connection is *pending* from its acceptance until it proved the grid secret, then
//! *authenticated*. A Noise connection proves it with its client's first record after the
//! handshake, not with the handshake's first message, which a recorded copy replays
//! ([`p2pmpi_wire::secure`]); that record is due within the handshake's deadline. The two
//! are counted apart ([`Limits`]):
//!
//! * a pending connection first waits, in the accept thread's poll and without a thread of
//!   its own, until its client sent its whole first message (the Noise handshake's first
//!   message; a launcher's registration); only then does a thread take it, to finish the
//!   handshake (its own deadline: the message is there, the rest waits on this side). The
//!   first message is due within one deadline ([`HANDSHAKE_TIMEOUT`]; the launcher's 10 s), so
//!   a connection that trickles a byte now and then is closed at it, and one whose client
//!   closed it half-way at once; a slow connection costs a descriptor, never a thread. Once
//!   the handshake answered, the connection waits on its client again (for the proof) and
//!   can be pushed out like any other waiting on its client: a replayed first message holds a
//!   thread at most until that deadline, and only among the pending ones;
//! * pending connections are limited per source address and in all; a new connection is
//!   always admitted, and when a limit is reached the **oldest** pending connection of the
//!   same address (else of the address holding the most) is closed to make room
//!   ([`PendingTable`]) — among those still waiting on their *client*: one whose client sent
//!   its whole first message (seen in the kernel's queue, or already read) waits on this
//!   server only and is not pushed out unless every candidate does. An honest client sends
//!   its first message with its connection, so a flood of slow connections, even from its own
//!   address and however busy the machine, never pushes it out;
//! * authenticated connections take a slot of their own cap (long-lived clients: launches,
//!   pools, monitors); pending ones never count against it. Authenticated connections are not
//!   limited per address: the peers of a local grid share loopback addresses;
//! * refusals are logged at most once per [`LOG_PERIOD`] and kind, with the count of the
//!   others ([`Throttle`]), so a flood cannot fill the disk with log lines.

use p2pmpi_wire::secure::{GridSecret, SecureConn, DEFAULT_MAX_RECORD, HANDSHAKE_TIMEOUT};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::warn;

/// Time allowed between two records of a request/answer connection.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(15);
/// Connections the kernel queues for a service's accept thread.
pub const BACKLOG: i32 = 1024;
/// Refusals of one kind are logged at most once per this period.
pub const LOG_PERIOD: Duration = Duration::from_secs(5);

/// How many connections a service serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Authenticated connections served at once (long-lived clients included); more are
    /// closed, with a log line, once authenticated.
    pub authenticated: usize,
    /// Connections still in their handshake, in all.
    pub pending: usize,
    /// Connections still in their handshake from one address.
    pub pending_per_addr: usize,
}

/// The limits of the supernode, the MPD and the RS.
pub const DAEMON_LIMITS: Limits = Limits { authenticated: 1024, pending: 128, pending_per_addr: 32 };
/// Authenticated connections served at once per service ([`DAEMON_LIMITS`]).
pub const MAX_CONNECTIONS: usize = DAEMON_LIMITS.authenticated;

/// Why a pending connection was closed to make room for a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// Its address had `pending_per_addr` connections pending.
    PerAddress,
    /// `pending` connections were pending in all; its address held the most.
    Total,
}

/// The connections of one service still in their handshake, oldest first: which one to close
/// to admit a new one. Pure bookkeeping (the driver is [`Gate`]).
#[derive(Debug, Default)]
pub struct PendingTable {
    next: u64,
    /// (id, address), in order of arrival.
    entries: Vec<(u64, IpAddr)>,
}

impl PendingTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Admits a connection from `addr`: returns its id, and the connection closed to make
    /// room if a limit was reached — the oldest of the same address when that address has
    /// `pending_per_addr` pending, else, when `pending` are pending in all, the oldest of the
    /// addresses holding the most. Only connections `evictable` says still wait on their
    /// client are candidates, unless there is none: then the oldest of all candidates.
    pub fn admit(
        &mut self,
        addr: IpAddr,
        limits: &Limits,
        evictable: &dyn Fn(u64) -> bool,
    ) -> (u64, Option<(u64, Eviction)>) {
        let id = self.next;
        self.next += 1;
        let pick = |cands: Vec<u64>| cands.iter().copied().find(|&i| evictable(i)).or(cands.first().copied());
        let evicted = if self.count(addr) >= limits.pending_per_addr.max(1) {
            let cands = self.entries.iter().filter(|(_, a)| *a == addr).map(|&(i, _)| i).collect();
            pick(cands).map(|old| (old, Eviction::PerAddress))
        } else if self.entries.len() >= limits.pending.max(1) {
            let mut counts: HashMap<IpAddr, usize> = HashMap::new();
            for (_, a) in &self.entries {
                *counts.entry(*a).or_default() += 1;
            }
            // Addresses holding the most first; oldest first within (a stable sort).
            let mut cands: Vec<(u64, IpAddr)> = self.entries.clone();
            cands.sort_by_key(|(_, a)| std::cmp::Reverse(counts[a]));
            pick(cands.into_iter().map(|(i, _)| i).collect()).map(|old| (old, Eviction::Total))
        } else {
            None
        };
        if let Some((old, _)) = evicted {
            self.remove(old);
        }
        self.entries.push((id, addr));
        (id, evicted)
    }

    /// Removes a connection (its handshake ended); false when it is not pending (any more).
    pub fn remove(&mut self, id: u64) -> bool {
        match self.entries.iter().position(|&(i, _)| i == id) {
            Some(k) => {
                self.entries.remove(k);
                true
            }
            None => false,
        }
    }

    pub fn contains(&self, id: u64) -> bool {
        self.entries.iter().any(|&(i, _)| i == id)
    }

    /// Connections pending in all.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Connections pending from `addr`.
    pub fn count(&self, addr: IpAddr) -> usize {
        self.entries.iter().filter(|(_, a)| *a == addr).count()
    }
}

/// Rate limit of one kind of log line: at most `burst` lines per period (the first ones go
/// out at once), the next one telling how many were held back meanwhile. Pure (the caller
/// gives the time).
#[derive(Debug, Clone)]
pub struct Throttle {
    period: Duration,
    burst: u32,
    /// The current period's start and the lines let through in it.
    window: Option<(Instant, u32)>,
    held: u64,
}

impl Throttle {
    pub fn new(period: Duration, burst: u32) -> Self {
        Throttle { period, burst: burst.max(1), window: None, held: 0 }
    }

    /// One more event at `now`: `Some(held back since the last line)` when a line is due.
    pub fn note(&mut self, now: Instant) -> Option<u64> {
        match &mut self.window {
            Some((start, shown)) if now.saturating_duration_since(*start) < self.period => {
                if *shown >= self.burst {
                    self.held += 1;
                    return None;
                }
                *shown += 1;
            }
            _ => self.window = Some((now, 1)),
        }
        Some(std::mem::take(&mut self.held))
    }
}

/// The kinds of refusal, each logged under its own [`Throttle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A pending connection closed to make room for a newer one.
    Evicted,
    /// A handshake that failed (no or wrong secret, garbage, deadline passed), or a
    /// registration that was not one.
    Unauthenticated,
    /// An authenticated connection beyond the cap.
    Full,
    /// The service could not accept or start a thread.
    Resources,
}

const KINDS: usize = 4;

impl Refusal {
    /// What the service did, for its log line.
    fn verb(self) -> &'static str {
        match self {
            Refusal::Evicted => "closed an unauthenticated connection",
            Refusal::Unauthenticated => "refused a connection",
            Refusal::Full => "closed an authenticated connection",
            Refusal::Resources => "could not serve a connection",
        }
    }
}

/// How a connection's first message is framed, to tell whether it arrived whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// A Noise handshake message: a 2-byte big-endian length, then that many bytes.
    Noise,
    /// A control record: a 4-byte little-endian length, then that many bytes.
    Control,
}

/// A pending connection as its gate sees it.
struct Watched {
    /// A handle to close it when it is evicted.
    stream: Option<TcpStream>,
    /// Its first message was read: it waits on this server only.
    received: Arc<AtomicBool>,
}

struct PendingState {
    table: PendingTable,
    conns: HashMap<u64, Watched>,
}

/// Where a gate reports refusals instead of the log (a launcher tells its terminal): the
/// kind, and `from ADDRESS: why`.
pub type Report = Box<dyn Fn(Refusal, &str) + Send + Sync>;

/// How a [`Gate`] admits and reports, beyond its [`Limits`].
pub struct GateOptions {
    /// How a connection's first message is framed.
    pub framing: Framing,
    /// Time a connection has to send its whole first message.
    pub first_message: Duration,
    /// Where refusals go (`None`: the log).
    pub report: Option<Report>,
    /// Refusals of one kind reported at once per [`LOG_PERIOD`], before the others are counted.
    pub burst: u32,
}

impl Default for GateOptions {
    /// A Noise handshake's first message due within [`HANDSHAKE_TIMEOUT`], refusals logged,
    /// one line per kind and period.
    fn default() -> Self {
        GateOptions { framing: Framing::Noise, first_message: HANDSHAKE_TIMEOUT, report: None, burst: 1 }
    }
}

/// The admission of one service's connections (see the module doc).
pub struct Gate {
    service: &'static str,
    report: Option<Report>,
    limits: Limits,
    framing: Framing,
    /// Time a connection has to send its whole first message.
    first_message: Duration,
    pending: Mutex<PendingState>,
    authenticated: Slots,
    throttles: Mutex<[Throttle; KINDS]>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("service", &self.service)
            .field("framing", &self.framing)
            .field("limits", &self.limits)
            .field("pending", &self.pending_count())
            .field("authenticated", &self.authenticated_count())
            .finish()
    }
}

/// A pending connection's place in its [`Gate`]; given back when dropped.
pub struct Pending {
    gate: Arc<Gate>,
    id: u64,
    received: Arc<AtomicBool>,
}

impl Gate {
    /// The gate of a service whose connections start with a Noise handshake: the initiator's
    /// message is due within [`HANDSHAKE_TIMEOUT`].
    pub fn new(service: &'static str, limits: Limits) -> Arc<Gate> {
        Self::with_options(service, limits, GateOptions::default())
    }

    /// The gate of a service with other options (see [`GateOptions`]).
    pub fn with_options(service: &'static str, limits: Limits, options: GateOptions) -> Arc<Gate> {
        let GateOptions { framing, first_message, report, burst } = options;
        Arc::new(Gate {
            service,
            report,
            limits,
            framing,
            first_message,
            pending: Mutex::new(PendingState { table: PendingTable::new(), conns: HashMap::new() }),
            authenticated: Slots::new(limits.authenticated),
            throttles: Mutex::new(std::array::from_fn(|_| Throttle::new(LOG_PERIOD, burst))),
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Admits a connection just accepted as pending; closes another one to make room when a
    /// limit is reached (see [`PendingTable::admit`]).
    pub fn admit(self: &Arc<Self>, stream: &TcpStream, peer: SocketAddr) -> Pending {
        use std::os::unix::io::AsRawFd;
        let mut st = self.pending.lock();
        let PendingState { table, conns } = &mut *st;
        let framing = self.framing;
        // Waits on its client: its first message was neither read nor queued whole.
        let evictable = |id: u64| {
            conns.get(&id).is_some_and(|w| {
                !w.received.load(Ordering::SeqCst)
                    && w.stream
                        .as_ref()
                        .is_some_and(|s| first_message(s.as_raw_fd(), framing) == FirstMessage::Incomplete)
            })
        };
        let (id, evicted) = table.admit(peer.ip(), &self.limits, &evictable);
        let closed = evicted.map(|(old, why)| {
            let s = conns.remove(&old).and_then(|w| w.stream);
            if let Some(s) = &s {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            (s.and_then(|s| s.peer_addr().ok()), why)
        });
        // Without a handle it cannot be evicted early; its handshake deadline still ends it.
        let received = Arc::new(AtomicBool::new(false));
        conns.insert(id, Watched { stream: stream.try_clone().ok(), received: received.clone() });
        drop(st);
        if let Some((who, why)) = closed {
            let why = match why {
                Eviction::PerAddress => format!(
                    "the oldest of {} unauthenticated connections pending from that address, closed to make room",
                    self.limits.pending_per_addr
                ),
                Eviction::Total => format!(
                    "the oldest of {} unauthenticated connections pending, closed to make room",
                    self.limits.pending
                ),
            };
            self.refused(Refusal::Evicted, who, &why);
        }
        Pending { gate: self.clone(), id, received }
    }

    /// Logs (or reports) a refusal of a connection from `peer`, rate-limited per kind:
    /// `SERVICE: refused a connection from ADDRESS: why`.
    pub fn refused(&self, kind: Refusal, peer: Option<SocketAddr>, why: &str) {
        let Some(held) = self.throttles.lock()[kind as usize].note(Instant::now()) else { return };
        let from = peer.map(|p| format!("from {p}: ")).unwrap_or_default();
        let more = match held {
            0 => String::new(),
            n => format!(" ({n} more like it held back, at most {} per {} s)", self.burst(), LOG_PERIOD.as_secs()),
        };
        match &self.report {
            Some(report) => report(kind, &format!("{from}{why}{more}")),
            None => warn!("{}: {} {from}{why}{more}", self.service, kind.verb()),
        }
    }

    fn burst(&self) -> u32 {
        self.throttles.lock()[0].burst
    }

    /// Connections in their handshake now.
    pub fn pending_count(&self) -> usize {
        self.pending.lock().table.len()
    }

    /// Authenticated connections served now.
    pub fn authenticated_count(&self) -> usize {
        self.authenticated.in_use()
    }
}

impl Pending {
    /// Its first message was read: from now on it waits on this server only, and is not
    /// pushed out while there are connections waiting on their clients.
    pub fn received(&self) {
        self.received.store(true, Ordering::SeqCst);
    }

    /// It waits on its client again (the handshake answered, the proof is due): it can be
    /// pushed out to make room from now on.
    pub fn waits_on_client(&self) {
        self.received.store(false, Ordering::SeqCst);
    }

    /// Was this connection closed to make room for a newer one?
    pub fn evicted(&self) -> bool {
        !self.gate.pending.lock().table.contains(self.id)
    }

    /// The connection authenticated: it leaves the pending ones and takes an authenticated
    /// slot (held until the slot is dropped). `None` when it was closed to make room
    /// meanwhile or every authenticated slot is taken: the caller closes it (logged here).
    pub fn authenticated(self, peer: SocketAddr) -> Option<Slot> {
        let was_pending = {
            let mut st = self.gate.pending.lock();
            st.conns.remove(&self.id);
            st.table.remove(self.id)
        };
        if !was_pending {
            return None;
        }
        let slot = self.gate.authenticated.take();
        if slot.is_none() {
            let why = format!("{} connections are served already", self.gate.limits.authenticated);
            self.gate.refused(Refusal::Full, Some(peer), &why);
        }
        slot
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut st = self.gate.pending.lock();
        st.conns.remove(&self.id);
        st.table.remove(self.id);
    }
}

/// Accepts connections on `listener` in a new thread; each is admitted by `gate`, waits
/// there — without a thread of its own — until its client sent its whole first message, and
/// is then handed with its [`Pending`] place to `work`, in a thread of its own. A connection
/// that did not send its first message within the gate's deadline, or that its client closed,
/// or that was pushed out to make room, is closed by the accept thread.
pub fn accept_loop<W>(listener: TcpListener, gate: Arc<Gate>, work: W)
where
    W: Fn(TcpStream, SocketAddr, Pending) + Send + Sync + 'static,
{
    raise_fd_limit();
    {
        use std::os::unix::io::AsRawFd;
        // Linux takes a second listen() as a new backlog: room for a burst of connections
        // while the accept thread waits for the processor (std's is 128).
        // SAFETY: listen only changes the state of a socket this listener owns.
        unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) };
    }
    let service = gate.service;
    std::thread::Builder::new()
        .name(format!("{service}-accept"))
        .spawn(move || {
            if let Err(e) = Waiting::run(listener, gate.clone(), Arc::new(work)) {
                warn!("{service}: the accept loop stopped: {e}");
            }
        })
        .expect("cannot start an accept thread");
}

/// What a waiting connection's first message looks like now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FirstMessage {
    Incomplete,
    Complete,
    /// Closed by its client, reset, or shut down to make room.
    Closed,
}

fn first_message(fd: std::os::unix::io::RawFd, framing: Framing) -> FirstMessage {
    let head_len = match framing {
        Framing::Noise => 2,
        Framing::Control => 4,
    };
    let mut head = [0u8; 4];
    // SAFETY: recv writes at most `head_len` (≤ 4) bytes into `head`, which outlives the
    // call; MSG_PEEK leaves them queued, MSG_DONTWAIT never blocks.
    let got = unsafe { libc::recv(fd, head.as_mut_ptr().cast(), head_len, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    if got == 0 {
        return FirstMessage::Closed;
    }
    if got < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => FirstMessage::Incomplete,
            _ => FirstMessage::Closed,
        };
    }
    if (got as usize) < head_len {
        return FirstMessage::Incomplete;
    }
    let len = match framing {
        // A keyed connection's opening: its label is its first message.
        Framing::Noise if head[0] == p2pmpi_wire::secure::KEYED => head[1] as usize,
        Framing::Noise => u16::from_be_bytes([head[0], head[1]]) as usize,
        Framing::Control => u32::from_le_bytes(head) as usize,
    };
    if framing == Framing::Control && len > p2pmpi_wire::control::MAX_CONTROL_LEN as usize {
        // It can never be whole: its reader refuses it at once, saying why.
        return FirstMessage::Complete;
    }
    let mut queued: libc::c_int = 0;
    // SAFETY: FIONREAD writes one c_int through the pointer, to a local that outlives the call.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut queued) };
    if r == 0 && queued as usize >= head_len + len {
        FirstMessage::Complete
    } else {
        FirstMessage::Incomplete
    }
}

/// The accept thread's connections waiting for their first message.
struct Waiting {
    stream: mio::net::TcpStream,
    peer: SocketAddr,
    pending: Pending,
    deadline: Instant,
}

impl Waiting {
    const LISTENER: mio::Token = mio::Token(usize::MAX);

    fn run<W>(listener: TcpListener, gate: Arc<Gate>, work: Arc<W>) -> std::io::Result<()>
    where
        W: Fn(TcpStream, SocketAddr, Pending) + Send + Sync + 'static,
    {
        use mio::{Events, Interest, Poll, Token};
        use std::os::unix::io::{AsFd, AsRawFd};
        listener.set_nonblocking(true)?;
        let mut listener = mio::net::TcpListener::from_std(listener);
        let mut poll = Poll::new()?;
        poll.registry().register(&mut listener, Self::LISTENER, Interest::READABLE)?;
        let mut events = Events::with_capacity(256);
        let mut waiting: HashMap<usize, Waiting> = HashMap::new();
        let mut next = 0usize;
        let mut accept_again = true;
        loop {
            if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(100))) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            let mut check: Vec<usize> = Vec::new();
            // Connections whose client will send nothing more.
            let mut ended: std::collections::HashSet<usize> = std::collections::HashSet::new();
            for ev in events.iter() {
                if ev.token() == Self::LISTENER {
                    accept_again = true;
                } else {
                    check.push(ev.token().0);
                    if ev.is_read_closed() || ev.is_error() {
                        ended.insert(ev.token().0);
                    }
                }
            }
            // New connections (edge-triggered: until the queue is empty; after an error,
            // such as no descriptor left, again on the next turn).
            while accept_again {
                match listener.accept() {
                    Ok((mut stream, peer)) => {
                        // A handle of its own for the gate, to close it if it is pushed out.
                        let pending = match stream.as_fd().try_clone_to_owned() {
                            Ok(dup) => gate.admit(&TcpStream::from(dup), peer),
                            Err(_) => continue,
                        };
                        let token = next;
                        next = next.wrapping_add(1) % (usize::MAX - 1);
                        if poll.registry().register(&mut stream, Token(token), Interest::READABLE).is_err() {
                            continue;
                        }
                        let deadline = Instant::now() + gate.first_message;
                        waiting.insert(token, Waiting { stream, peer, pending, deadline });
                        // Its first message may be there already.
                        check.push(token);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => accept_again = false,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        // Out of descriptors, typically: try again on the next turn.
                        gate.refused(Refusal::Resources, None, &format!("accept failed: {e}"));
                        break;
                    }
                }
            }
            // Connections that sent something (or were closed).
            for token in check {
                let Some(w) = waiting.get(&token) else { continue };
                match first_message(w.stream.as_raw_fd(), gate.framing) {
                    FirstMessage::Incomplete if ended.contains(&token) => {
                        let w = waiting.remove(&token).expect("present");
                        let why = "its client closed it before its first message was whole".to_string();
                        w.close(&poll, &gate, Some(why));
                    }
                    FirstMessage::Incomplete => {}
                    FirstMessage::Closed => {
                        let w = waiting.remove(&token).expect("present");
                        w.close(&poll, &gate, None);
                    }
                    FirstMessage::Complete => {
                        let mut w = waiting.remove(&token).expect("present");
                        let _ = poll.registry().deregister(&mut w.stream);
                        let stream = TcpStream::from(w.stream);
                        if stream.set_nonblocking(false).is_err() {
                            continue;
                        }
                        // From now on it waits on this side only.
                        w.pending.received();
                        let (work, peer, pending) = (work.clone(), w.peer, w.pending);
                        let started = std::thread::Builder::new()
                            .name(format!("{}-conn", gate.service))
                            .spawn(move || work(stream, peer, pending));
                        if let Err(e) = started {
                            let why = format!("cannot start a thread: {e}; connection closed");
                            gate.refused(Refusal::Resources, Some(peer), &why);
                        }
                    }
                }
            }
            // Deadlines.
            let now = Instant::now();
            let late: Vec<usize> = waiting.iter().filter(|(_, w)| w.deadline <= now).map(|(&t, _)| t).collect();
            for token in late {
                let w = waiting.remove(&token).expect("present");
                let why = format!("no complete first message in {:.0} s", gate.first_message.as_secs_f64());
                w.close(&poll, &gate, Some(why));
            }
        }
    }

    /// Closes a waiting connection; `why` is logged (rate-limited) unless it was pushed out
    /// to make room (logged then) or closed by its client.
    fn close(mut self, poll: &mio::Poll, gate: &Gate, why: Option<String>) {
        let _ = poll.registry().deregister(&mut self.stream);
        if let Some(why) = why {
            if !self.pending.evicted() {
                gate.refused(Refusal::Unauthenticated, Some(self.peer), &why);
            }
        }
    }
}

/// Accepts connections on `listener` in a new thread with the [`DAEMON_LIMITS`]; each
/// authenticated connection is served by `handler` in its own thread. Connections that fail
/// the handshake or do not prove the key with their first record in time (no or wrong grid
/// secret, a replayed handshake, garbage, deadline passed) are logged and closed.
pub fn serve<F>(service: &'static str, listener: TcpListener, secret: GridSecret, handler: F) -> Arc<Gate>
where
    F: Fn(SecureConn, SocketAddr) + Send + Sync + 'static,
{
    serve_with(service, listener, secret, DAEMON_LIMITS, DEFAULT_MAX_RECORD, handler)
}

/// [`serve`] with other limits, and `max_first` the largest first record (the proof of the
/// key) a client may send.
pub fn serve_with<F>(
    service: &'static str,
    listener: TcpListener,
    secret: GridSecret,
    limits: Limits,
    max_first: usize,
    handler: F,
) -> Arc<Gate>
where
    F: Fn(SecureConn, SocketAddr) + Send + Sync + 'static,
{
    serve_keyed(service, listener, secret, Arc::new(|_: &str| None), limits, max_first, move |c, peer, _| {
        handler(c, peer)
    })
}

/// The key of a keyed connection's label, if the service knows it (see
/// [`SecureConn::accept_keyed`]).
pub type KeyLookup = dyn Fn(&str) -> Option<GridSecret> + Send + Sync;

/// [`serve_with`] that also accepts keyed connections (a job's processes with a key of their
/// job's): the handler gets their label.
pub fn serve_keyed<F>(
    service: &'static str,
    listener: TcpListener,
    secret: GridSecret,
    keys: Arc<KeyLookup>,
    limits: Limits,
    max_first: usize,
    handler: F,
) -> Arc<Gate>
where
    F: Fn(SecureConn, SocketAddr, Option<String>) + Send + Sync + 'static,
{
    let gate = Gate::new(service, limits);
    let g = gate.clone();
    accept_loop(listener, gate.clone(), move |stream, peer, pending| {
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        let proven = SecureConn::accept_keyed(stream, &secret, &*keys, HANDSHAKE_TIMEOUT).and_then(|(mut c, label)| {
            pending.waits_on_client();
            c.set_max_record(max_first);
            c.await_proof(deadline).map(|()| (c, label))
        });
        match proven {
            Ok((c, label)) => {
                if let Some(_slot) = pending.authenticated(peer) {
                    let _ = c.set_read_timeout(Some(IDLE_TIMEOUT));
                    handler(c, peer, label)
                }
            }
            // An evicted connection's end was logged with its eviction.
            Err(_) if pending.evicted() => {}
            Err(e) => g.refused(Refusal::Unauthenticated, Some(peer), &e.to_string()),
        }
    });
    gate
}

/// Raises this process's limit of open files to its hard limit (once): a daemon serving
/// hundreds of clients needs more than the usual 1024.
pub fn raise_fd_limit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit and setrlimit only read and write the struct passed, which lives
        // on this stack frame for both calls.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
                r.rlim_cur = r.rlim_max;
                if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                    warn!("cannot raise the limit of open files to {}", r.rlim_max);
                }
            }
        }
    });
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
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};

    const L: Limits = Limits { authenticated: 4, pending: 6, pending_per_addr: 3 };

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    /// Every connection still waits on its client.
    const ANY: fn(u64) -> bool = |_| true;

    /// A connection whose client sent its whole first message is not pushed out while others
    /// wait on their clients, however old it is; when all did, the oldest goes.
    #[test]
    fn connections_waiting_on_this_server_are_spared() {
        let mut t = PendingTable::new();
        let honest = t.admit(ip(9), &L, &ANY).0;
        let slow: Vec<u64> = (0..2).map(|_| t.admit(ip(9), &L, &ANY).0).collect();
        let waits_on_client = |id: u64| id != honest;
        for k in 0..50 {
            let (_, ev) = t.admit(ip(9), &L, &waits_on_client);
            let (gone, why) = ev.expect("the address is full");
            assert_ne!(gone, honest, "round {k}: the connection waiting on the server was pushed out");
            assert_eq!(why, Eviction::PerAddress);
        }
        assert!(t.contains(honest) && !t.contains(slow[0]));
        // Every one of them waits on the server: the oldest goes all the same.
        let (_, ev) = t.admit(ip(9), &L, &|_| false);
        assert_eq!(ev.map(|e| e.0), Some(honest));
    }

    #[test]
    fn a_flood_from_one_address_pushes_out_its_own_oldest_only() {
        let mut t = PendingTable::new();
        let (honest, none) = t.admit(ip(2), &L, &ANY);
        assert_eq!(none, None);
        let flood: Vec<u64> = (0..3).map(|_| t.admit(ip(9), &L, &ANY).0).collect();
        // The 4th from .9 closes the 1st from .9; the honest one stays.
        let (_, ev) = t.admit(ip(9), &L, &ANY);
        assert_eq!(ev, Some((flood[0], Eviction::PerAddress)));
        for _ in 0..100 {
            let (_, ev) = t.admit(ip(9), &L, &ANY);
            assert!(matches!(ev, Some((_, Eviction::PerAddress))));
        }
        assert!(t.contains(honest));
        assert_eq!((t.count(ip(9)), t.count(ip(2)), t.len()), (3, 1, 4));
        assert!(t.remove(honest));
        assert!(!t.remove(flood[0]), "evicted: no longer pending");
    }

    #[test]
    fn when_all_are_taken_the_address_holding_the_most_gives_way() {
        let mut t = PendingTable::new();
        let a: Vec<u64> = (0..2).map(|_| t.admit(ip(10), &L, &ANY).0).collect();
        let b: Vec<u64> = (0..3).map(|_| t.admit(ip(11), &L, &ANY).0).collect();
        let c = t.admit(ip(12), &L, &ANY).0;
        assert_eq!(t.len(), 6);
        // A newcomer from a fourth address: .11 holds the most, its oldest goes.
        let (d, ev) = t.admit(ip(13), &L, &ANY);
        assert_eq!(ev, Some((b[0], Eviction::Total)));
        // Now .10 and .11 hold two each: the older of their oldest (.10's first) goes.
        let (_, ev) = t.admit(ip(14), &L, &ANY);
        assert_eq!(ev, Some((a[0], Eviction::Total)));
        assert!(t.contains(c) && t.contains(d));
        assert_eq!(t.len(), 6);
    }

    /// Attackers spread over many addresses, one connection each: a newcomer still gets in,
    /// pushing out the oldest.
    #[test]
    fn many_addresses_one_each_the_oldest_gives_way() {
        let mut t = PendingTable::new();
        let ids: Vec<u64> = (0..6).map(|k| t.admit(ip(20 + k), &L, &ANY).0).collect();
        let (me, ev) = t.admit(ip(2), &L, &ANY);
        assert_eq!(ev, Some((ids[0], Eviction::Total)));
        assert!(t.contains(me));
    }

    /// The accept thread hands a connection over once its first message is whole, closes one
    /// whose client gave up half-way at once, and one that trickles at its deadline — telling
    /// the reporter, not one line each.
    #[test]
    fn connections_are_handed_over_once_their_first_message_is_whole() {
        let (rtx, reports) = std::sync::mpsc::channel::<String>();
        let rtx = parking_lot::Mutex::new(rtx);
        let report: Report = Box::new(move |_, l: &str| drop(rtx.lock().send(l.to_string())));
        let limits = Limits { authenticated: 8, pending: 8, pending_per_addr: 8 };
        let options =
            GateOptions { first_message: Duration::from_millis(800), report: Some(report), ..Default::default() };
        let gate = Gate::with_options("test", limits, options);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (wtx, handed) = std::sync::mpsc::channel::<(Vec<u8>, Instant)>();
        let wtx = parking_lot::Mutex::new(wtx);
        accept_loop(l, gate.clone(), move |mut s, _, pending| {
            let mut b = [0u8; 5];
            s.read_exact(&mut b).unwrap();
            assert!(pending.authenticated(s.peer_addr().unwrap()).is_some());
            let _ = wtx.lock().send((b.to_vec(), Instant::now()));
        });
        let t = Duration::from_secs(10);
        // Whole at once: handed over.
        let mut whole = TcpStream::connect(addr).unwrap();
        whole.write_all(&[0, 3, 1, 2, 3]).unwrap();
        let (got, _) = handed.recv_timeout(t).unwrap();
        assert_eq!(got, [0, 3, 1, 2, 3]);
        // In two pieces: handed over when the second arrives.
        let mut pieces = TcpStream::connect(addr).unwrap();
        pieces.write_all(&[0, 3, 9]).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(handed.try_recv().is_err(), "handed over before it was whole");
        let sent = Instant::now();
        pieces.write_all(&[9, 9]).unwrap();
        let (got, at) = handed.recv_timeout(t).unwrap();
        assert_eq!(got, [0, 3, 9, 9, 9]);
        assert!(at.duration_since(sent) < Duration::from_millis(500));
        // Half a message, then the client closes: closed at once, and reported.
        let mut half = TcpStream::connect(addr).unwrap();
        half.write_all(&[0, 40, 1]).unwrap();
        drop(half);
        let line = reports.recv_timeout(t).unwrap();
        assert!(line.contains("before its first message was whole"), "{line}");
        // A trickle: closed at the deadline, however it goes on.
        let mut slow = TcpStream::connect(addr).unwrap();
        let start = Instant::now();
        slow.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let mut b = [0u8; 1];
        slow.write_all(&[0, 40]).unwrap();
        let closed_after = loop {
            let _ = slow.write_all(&[1]);
            match slow.read(&mut b) {
                Ok(0) => break start.elapsed(),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break start.elapsed(),
                Ok(_) => panic!("the server answered"),
            }
            assert!(start.elapsed() < t, "never closed");
        };
        assert!(
            closed_after >= Duration::from_millis(700) && closed_after < Duration::from_secs(3),
            "{closed_after:?}"
        );
        assert!(handed.try_recv().is_err());
        assert_eq!(gate.pending_count(), 0);
    }

    #[test]
    fn a_throttle_with_a_burst_lets_that_many_through_per_period() {
        let mut th = Throttle::new(Duration::from_secs(5), 3);
        let t0 = Instant::now();
        let shown: Vec<Option<u64>> = (0..6).map(|k| th.note(t0 + Duration::from_millis(10 * k))).collect();
        assert_eq!(shown, [Some(0), Some(0), Some(0), None, None, None]);
        assert_eq!(th.note(t0 + Duration::from_secs(5)), Some(3));
    }

    #[test]
    fn throttle_lets_one_line_through_per_period_and_counts_the_rest() {
        let mut th = Throttle::new(Duration::from_secs(5), 1);
        let t0 = Instant::now();
        assert_eq!(th.note(t0), Some(0), "the first line goes out");
        for k in 1..=40 {
            assert_eq!(th.note(t0 + Duration::from_millis(100 * k)), None);
        }
        assert_eq!(th.note(t0 + Duration::from_secs(5)), Some(40), "then one with the count held back");
        assert_eq!(th.note(t0 + Duration::from_secs(6)), None);
        assert_eq!(th.note(t0 + Duration::from_secs(60)), Some(1));
    }

    /// The gate closes the evicted connection itself (its thread sees its end at once), and a
    /// connection that authenticated takes a slot of the other cap.
    #[test]
    fn the_gate_closes_evicted_connections_and_caps_authenticated_ones() {
        let gate = Gate::new("test", Limits { authenticated: 1, pending: 8, pending_per_addr: 1 });
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut c1 = TcpStream::connect(addr).unwrap();
        let (s1, p1) = l.accept().unwrap();
        let first = gate.admit(&s1, p1);
        let _c2 = TcpStream::connect(addr).unwrap();
        let (s2, p2) = l.accept().unwrap();
        let second = gate.admit(&s2, p2);
        assert!(first.evicted() && !second.evicted());
        // The first's peer sees the connection end.
        c1.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 1];
        assert!(matches!(c1.read(&mut b), Ok(0) | Err(_)));
        assert!(first.authenticated(p1).is_none(), "an evicted connection is not served");
        let slot = second.authenticated(p2).expect("served");
        assert_eq!((gate.pending_count(), gate.authenticated_count()), (0, 1));
        // The cap of authenticated connections is full: the next one is refused …
        let _c3 = TcpStream::connect(addr).unwrap();
        let (s3, p3) = l.accept().unwrap();
        assert!(gate.admit(&s3, p3).authenticated(p3).is_none());
        // … until a slot is given back.
        drop(slot);
        let mut c4 = TcpStream::connect(addr).unwrap();
        let (s4, p4) = l.accept().unwrap();
        assert!(gate.admit(&s4, p4).authenticated(p4).is_some());
        assert_eq!(gate.pending_count(), 0);
        let _ = c4.write_all(b"x");
    }

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
