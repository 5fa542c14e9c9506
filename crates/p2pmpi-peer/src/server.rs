//! The accept loop shared by every grid service: authenticate, then hand the connection to
//! the service, one thread per connection.
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
//! A connection is *pending* from its acceptance until its handshake succeeded, then
//! *authenticated*. The two are counted apart ([`Limits`]):
//!
//! * the handshake has one deadline for all of it ([`HANDSHAKE_TIMEOUT`]), so a connection
//!   that trickles a byte now and then is closed within it;
//! * pending connections are limited per source address and in all; a new connection is
//!   always admitted, and when a limit is reached the **oldest** pending connection of the
//!   same address (else of the address holding the most) is closed to make room
//!   ([`PendingTable`]). A handshake takes one round trip, so an honest client's connection
//!   is young and completes long before an attacker's stale ones are due: to push it out an
//!   attacker would have to open connections faster than a round trip, not merely keep them;
//! * authenticated connections take a slot of their own cap (long-lived clients: launches,
//!   pools, monitors); pending ones never count against it. Authenticated connections are not
//!   limited per address: the peers of a local grid share loopback addresses;
//! * refusals are logged at most once per [`LOG_PERIOD`] and kind, with the count of the
//!   others ([`Throttle`]), so a flood cannot fill the disk with log lines.

use p2pmpi_wire::secure::{GridSecret, SecureConn, HANDSHAKE_TIMEOUT};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::warn;

/// Time allowed between two records of a request/answer connection.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(15);
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
    /// address holding the most (on a tie, the address whose oldest is the oldest).
    pub fn admit(&mut self, addr: IpAddr, limits: &Limits) -> (u64, Option<(u64, Eviction)>) {
        let id = self.next;
        self.next += 1;
        let evicted = if self.count(addr) >= limits.pending_per_addr.max(1) {
            self.oldest_of(addr).map(|old| (old, Eviction::PerAddress))
        } else if self.entries.len() >= limits.pending.max(1) {
            let mut counts: HashMap<IpAddr, usize> = HashMap::new();
            for (_, a) in &self.entries {
                *counts.entry(*a).or_default() += 1;
            }
            let most = counts.values().copied().max().unwrap_or(0);
            // Entries are oldest first: the first of an address holding `most` is the answer.
            self.entries.iter().find(|(_, a)| counts[a] == most).map(|&(old, _)| (old, Eviction::Total))
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

    fn oldest_of(&self, addr: IpAddr) -> Option<u64> {
        self.entries.iter().find(|(_, a)| *a == addr).map(|&(i, _)| i)
    }
}

/// Rate limit of one kind of log line: the first goes out, then at most one per period,
/// telling how many were held back meanwhile. Pure (the caller gives the time).
#[derive(Debug, Clone)]
pub struct Throttle {
    period: Duration,
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    pub fn new(period: Duration) -> Self {
        Throttle { period, last: None, held: 0 }
    }

    /// One more event at `now`: `Some(held back since the last line)` when a line is due.
    pub fn note(&mut self, now: Instant) -> Option<u64> {
        if self.last.is_some_and(|t| now.saturating_duration_since(t) < self.period) {
            self.held += 1;
            return None;
        }
        self.last = Some(now);
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

struct PendingState {
    table: PendingTable,
    /// A handle on each pending connection, to close it when it is evicted.
    streams: HashMap<u64, TcpStream>,
}

/// The admission of one service's connections (see the module doc).
pub struct Gate {
    service: &'static str,
    limits: Limits,
    pending: Mutex<PendingState>,
    authenticated: Slots,
    throttles: Mutex<[Throttle; KINDS]>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("service", &self.service)
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
}

impl Gate {
    pub fn new(service: &'static str, limits: Limits) -> Arc<Gate> {
        Arc::new(Gate {
            service,
            limits,
            pending: Mutex::new(PendingState { table: PendingTable::new(), streams: HashMap::new() }),
            authenticated: Slots::new(limits.authenticated),
            throttles: Mutex::new(std::array::from_fn(|_| Throttle::new(LOG_PERIOD))),
        })
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Admits a connection just accepted as pending; closes another one to make room when a
    /// limit is reached (see [`PendingTable::admit`]).
    pub fn admit(self: &Arc<Self>, stream: &TcpStream, peer: SocketAddr) -> Pending {
        let mut st = self.pending.lock();
        let (id, evicted) = st.table.admit(peer.ip(), &self.limits);
        let closed = evicted.map(|(old, why)| {
            let s = st.streams.remove(&old);
            if let Some(s) = &s {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            (s.and_then(|s| s.peer_addr().ok()), why)
        });
        // Without a handle it cannot be evicted early; its handshake deadline still ends it.
        if let Ok(s) = stream.try_clone() {
            st.streams.insert(id, s);
        }
        drop(st);
        if let Some((who, why)) = closed {
            let who = who.map(|a| a.to_string()).unwrap_or_else(|| "?".into());
            let why = match why {
                Eviction::PerAddress => {
                    format!("{} unauthenticated connections pending from that address", self.limits.pending_per_addr)
                }
                Eviction::Total => format!("{} unauthenticated connections pending in all", self.limits.pending),
            };
            self.refused(Refusal::Evicted, &format!("closed the oldest unauthenticated connection, from {who}: {why}"));
        }
        Pending { gate: self.clone(), id }
    }

    /// One more refusal of this kind: `Some(held back since the last report)` when it is to
    /// be reported (at most one per [`LOG_PERIOD`]), for callers that report elsewhere than
    /// the log.
    pub fn note(&self, kind: Refusal) -> Option<u64> {
        self.throttles.lock()[kind as usize].note(Instant::now())
    }

    /// Logs a refusal, rate-limited per kind.
    pub fn refused(&self, kind: Refusal, what: &str) {
        match self.note(kind) {
            Some(0) => warn!("{}: {what}", self.service),
            Some(n) => warn!(
                "{}: {what} ({n} more like it since the last such line, at most one per {} s)",
                self.service,
                LOG_PERIOD.as_secs()
            ),
            None => {}
        }
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
            st.streams.remove(&self.id);
            st.table.remove(self.id)
        };
        if !was_pending {
            return None;
        }
        let slot = self.gate.authenticated.take();
        if slot.is_none() {
            self.gate.refused(
                Refusal::Full,
                &format!(
                    "closed an authenticated connection from {peer}: {} connections are served already",
                    self.gate.limits.authenticated
                ),
            );
        }
        slot
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut st = self.gate.pending.lock();
        st.streams.remove(&self.id);
        st.table.remove(self.id);
    }
}

/// Accepts connections on `listener` in a new thread; each is admitted by `gate` and handed
/// with its [`Pending`] place to `work`, in its own thread.
pub fn accept_loop<W>(listener: TcpListener, gate: Arc<Gate>, work: W)
where
    W: Fn(TcpStream, SocketAddr, Pending) + Send + Sync + 'static,
{
    raise_fd_limit();
    let work = Arc::new(work);
    let service = gate.service;
    std::thread::Builder::new()
        .name(format!("{service}-accept"))
        .spawn(move || {
            for conn in listener.incoming() {
                let stream = match conn {
                    Ok(s) => s,
                    Err(e) => {
                        // Out of descriptors, typically: wait for some to be given back.
                        gate.refused(Refusal::Resources, &format!("accept failed: {e}"));
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                };
                let peer = stream.peer_addr().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
                let pending = gate.admit(&stream, peer);
                let work = work.clone();
                let started = std::thread::Builder::new()
                    .name(format!("{service}-conn"))
                    .spawn(move || work(stream, peer, pending));
                if let Err(e) = started {
                    gate.refused(
                        Refusal::Resources,
                        &format!("cannot start a thread for {peer}: {e}; connection closed"),
                    );
                }
            }
        })
        .expect("cannot start an accept thread");
}

/// Accepts connections on `listener` in a new thread with the [`DAEMON_LIMITS`]; each
/// authenticated connection is served by `handler` in its own thread. Connections that fail
/// the handshake (no or wrong grid secret, garbage, deadline passed) are logged and closed.
pub fn serve<F>(service: &'static str, listener: TcpListener, secret: GridSecret, handler: F) -> Arc<Gate>
where
    F: Fn(SecureConn, SocketAddr) + Send + Sync + 'static,
{
    serve_with(service, listener, secret, DAEMON_LIMITS, handler)
}

/// [`serve`] with other limits.
pub fn serve_with<F>(
    service: &'static str,
    listener: TcpListener,
    secret: GridSecret,
    limits: Limits,
    handler: F,
) -> Arc<Gate>
where
    F: Fn(SecureConn, SocketAddr) + Send + Sync + 'static,
{
    let gate = Gate::new(service, limits);
    let g = gate.clone();
    accept_loop(listener, gate.clone(), move |stream, peer, pending| {
        match SecureConn::accept(stream, &secret, HANDSHAKE_TIMEOUT) {
            Ok(c) => {
                if let Some(_slot) = pending.authenticated(peer) {
                    let _ = c.set_read_timeout(Some(IDLE_TIMEOUT));
                    handler(c, peer)
                }
            }
            // An evicted connection's end was logged with its eviction.
            Err(_) if pending.evicted() => {}
            Err(e) => g.refused(Refusal::Unauthenticated, &format!("refused a connection from {peer}: {e}")),
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

    #[test]
    fn a_flood_from_one_address_pushes_out_its_own_oldest_only() {
        let mut t = PendingTable::new();
        let (honest, none) = t.admit(ip(2), &L);
        assert_eq!(none, None);
        let flood: Vec<u64> = (0..3).map(|_| t.admit(ip(9), &L).0).collect();
        // The 4th from .9 closes the 1st from .9; the honest one stays.
        let (_, ev) = t.admit(ip(9), &L);
        assert_eq!(ev, Some((flood[0], Eviction::PerAddress)));
        for _ in 0..100 {
            let (_, ev) = t.admit(ip(9), &L);
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
        let a: Vec<u64> = (0..2).map(|_| t.admit(ip(10), &L).0).collect();
        let b: Vec<u64> = (0..3).map(|_| t.admit(ip(11), &L).0).collect();
        let c = t.admit(ip(12), &L).0;
        assert_eq!(t.len(), 6);
        // A newcomer from a fourth address: .11 holds the most, its oldest goes.
        let (d, ev) = t.admit(ip(13), &L);
        assert_eq!(ev, Some((b[0], Eviction::Total)));
        // Now .10 and .11 hold two each: the older of their oldest (.10's first) goes.
        let (_, ev) = t.admit(ip(14), &L);
        assert_eq!(ev, Some((a[0], Eviction::Total)));
        assert!(t.contains(c) && t.contains(d));
        assert_eq!(t.len(), 6);
    }

    /// Attackers spread over many addresses, one connection each: a newcomer still gets in,
    /// pushing out the oldest.
    #[test]
    fn many_addresses_one_each_the_oldest_gives_way() {
        let mut t = PendingTable::new();
        let ids: Vec<u64> = (0..6).map(|k| t.admit(ip(20 + k), &L).0).collect();
        let (me, ev) = t.admit(ip(2), &L);
        assert_eq!(ev, Some((ids[0], Eviction::Total)));
        assert!(t.contains(me));
    }

    #[test]
    fn throttle_lets_one_line_through_per_period_and_counts_the_rest() {
        let mut th = Throttle::new(Duration::from_secs(5));
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
