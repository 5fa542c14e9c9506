//! The k-monitor detector's driver: the pure [`p2pmpi_core::kmonitor::Node`] over real TCP
//! connections, on a thread of its own.
//!
//! Each process listens on a TCP port (the same port number as its gossip socket, so that
//! `--fd kmonitor` needs no other registration). The thread runs a `mio` poll over the
//! listener and the connections: the loop feeds the node the connections' events and
//! messages, ticks it at its deadline, and carries out its actions (connect, send,
//! disconnect, failed). Heartbeats and timers never wait on the application's thread: a
//! program that computes for minutes without calling MPI keeps its monitors informed.
//!
//! # Connections and frames
//!
//! The side that connects sends a hello (`PKM`, version, its id, the id it wants, a fresh
//! nonce); the side that accepts answers with its own fresh nonce. Every frame after that is
//! a 4-byte length, the encoded message ([`p2pmpi_core::kmonitor::encode`]) and a 16-byte MAC
//! on the job's key ([`JobKey::short_mac`], role `Monitor`) over both nonces, the direction,
//! a per-direction counter, the sender's id and the message. So frames cannot be forged
//! without the key, nor replayed on another connection or out of order; the key is never in
//! the bytes. An accepted connection belongs to a peer only once a first frame verifies; a
//! connection that sends anything that does not verify or decode is closed (and logged with
//! `P2PMPI_FD_DEBUG=1`), and at most [`MAX_UNPROVEN`] accepted connections may wait for
//! their first frame, each for at most `T_to`: a new connection beyond that closes the oldest
//! waiting one, so connections that say nothing never keep a monitor out.
//!
//! Two processes may open connections to each other at once: the node sees one link per
//! peer. The driver sends on the first connection that worked and keeps to it (order
//! within a direction is kept), reads all of them, and reports the link broken only when the
//! last one closes. A disconnect closes all of them after what was written.
//!
//! # Leaving
//!
//! When the program finalizes, [`leave`] makes the node send `Leave` on every connection and
//! waits (at most half a second) until it is written: the others forget the process without
//! reporting it failed.

use p2pmpi_core::kmonitor::{self as km, Action, Input, Node};
pub use p2pmpi_core::kmonitor::{Cause, Config, Directory, Endpoint, NodeId};
use p2pmpi_core::machine::Machine;
pub use p2pmpi_wire::auth::JobKey;
use p2pmpi_wire::auth::{Nonce, Role, DATAGRAM_MAC_LEN, NONCE_LEN};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 4] = b"PKM\x01";
const HELLO_LEN: usize = 4 + 4 + 4 + NONCE_LEN;
const REPLY_LEN: usize = 4 + NONCE_LEN;
const MAC_LEN: usize = DATAGRAM_MAC_LEN;
/// The largest message accepted (a `NodeInfo` of ~40 000 processes).
const MAX_FRAME: usize = 1 << 20;
/// Bytes queued for a peer that does not read them: past this, the link is broken.
const MAX_QUEUED: usize = 4 << 20;
/// Accepted connections waiting for their first verified frame, at most.
pub const MAX_UNPROVEN: usize = 64;
const LISTENER: mio::Token = mio::Token(usize::MAX);
const WAKER: mio::Token = mio::Token(usize::MAX - 1);

/// What the driver reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// `node` failed (or was declared dead by the application).
    Failed { node: NodeId, cause: km::Cause },
    /// This process was declared failed by the others.
    Excluded,
}

/// Counters of one driver.
#[derive(Debug, Default)]
pub struct Counters {
    pub frames_sent: std::sync::atomic::AtomicU64,
    pub bytes_sent: std::sync::atomic::AtomicU64,
    /// Connections closed because what they sent did not verify or decode.
    pub rejected: std::sync::atomic::AtomicU64,
    /// Accepted connections closed unproven to make room for a newer one ([`MAX_UNPROVEN`]).
    pub evicted: std::sync::atomic::AtomicU64,
    /// Failure notices sent (flooding).
    pub failure_msgs: std::sync::atomic::AtomicU64,
    /// This process's monitors (`H`) now.
    pub monitors: std::sync::atomic::AtomicU64,
    /// Its wide-area links (connections to other clusters) now.
    pub wide_links: std::sync::atomic::AtomicU64,
}

/// Asks a running driver to leave, and tells when it has.
#[derive(Debug, Default)]
pub struct Control {
    leave: AtomicBool,
    left: parking_lot::Mutex<bool>,
    left_cv: parking_lot::Condvar,
    waker: std::sync::OnceLock<mio::Waker>,
    /// Nodes the application declared dead, not passed to the node yet.
    declared: parking_lot::Mutex<Vec<NodeId>>,
    /// The driver's thread.
    thread: std::sync::OnceLock<std::thread::ThreadId>,
}

impl Control {
    /// Makes the node leave, and waits up to `limit` until the `Leave` messages are written
    /// (called on the driver's own thread, it does not wait).
    pub fn leave(&self, limit: Duration) {
        self.request_leave();
        if self.thread.get() == Some(&std::thread::current().id()) {
            return;
        }
        let deadline = Instant::now() + limit;
        let mut left = self.left.lock();
        while !*left {
            if self.left_cv.wait_until(&mut left, deadline).timed_out() {
                return;
            }
        }
    }

    /// Makes the node leave, without waiting: the driver's [`Driver::run`] returns once the
    /// `Leave` messages are written.
    pub fn request_leave(&self) {
        self.leave.store(true, Ordering::SeqCst);
        if let Some(w) = self.waker.get() {
            let _ = w.wake();
        }
    }

    /// The application declares `node` dead: the node floods it and stops listening to it.
    pub fn declare(&self, node: NodeId) {
        self.declared.lock().push(node);
        if let Some(w) = self.waker.get() {
            let _ = w.wake();
        }
    }

    fn set_left(&self) {
        *self.left.lock() = true;
        self.left_cv.notify_all();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Outbound, TCP connect in progress.
    Connecting,
    /// Outbound, hello sent, waiting for the acceptor's nonce.
    AwaitReply,
    /// Inbound, waiting for the connector's hello.
    AwaitHello,
    /// Frames flow.
    Up,
}

struct Conn {
    stream: mio::net::TcpStream,
    outbound: bool,
    state: State,
    /// The peer (outbound: the one connected to; inbound: the one its hello names).
    peer: NodeId,
    /// Inbound: a frame from the peer verified.
    proven: bool,
    nc: Nonce,
    na: Nonce,
    send_ctr: u64,
    recv_ctr: u64,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    /// Handshake deadline (connect, hello, reply, first frame).
    deadline: Option<Instant>,
    /// Closing: drop once `wbuf` is written.
    closing: bool,
    /// When it was opened or accepted.
    accepted: Instant,
}

impl Conn {
    /// This side's direction byte: 0 connector → acceptor, 1 acceptor → connector.
    fn dir_out(&self) -> u8 {
        if self.outbound {
            0
        } else {
            1
        }
    }
}

/// Everything the driver needs to run one process's detector.
pub struct Setup {
    pub me: Endpoint,
    pub dir: Arc<Directory>,
    pub cfg: km::Config,
    pub key: JobKey,
    pub seed: u64,
}

/// The driver of one process's k-monitor detector.
pub struct Driver {
    node: Node,
    me: NodeId,
    key: JobKey,
    poll: mio::Poll,
    listener: mio::net::TcpListener,
    conns: HashMap<mio::Token, Conn>,
    next_token: usize,
    /// Connections of each peer (outbound, and inbound once proven).
    links: HashMap<NodeId, Vec<mio::Token>>,
    /// The connection each peer's messages go on.
    send_on: HashMap<NodeId, mio::Token>,
    /// Messages for a peer whose only connections are still opening.
    waiting: HashMap<NodeId, Vec<km::Message>>,
    origin: Instant,
    t_to: Duration,
    ctl: Arc<Control>,
    counters: Arc<Counters>,
    debug: bool,
    /// Identities are ranks (or slots): below the directory's size.
    n: usize,
}

fn debug_enabled() -> bool {
    std::env::var_os("P2PMPI_FD_DEBUG").is_some_and(|v| v != "0")
}

impl Driver {
    /// A driver on `listener` (a bound, listening socket).
    pub fn new(setup: Setup, listener: std::net::TcpListener, ctl: Arc<Control>) -> std::io::Result<Driver> {
        listener.set_nonblocking(true)?;
        let mut listener = mio::net::TcpListener::from_std(listener);
        let poll = mio::Poll::new()?;
        poll.registry().register(&mut listener, LISTENER, mio::Interest::READABLE)?;
        let waker = mio::Waker::new(poll.registry(), WAKER)?;
        let _ = ctl.waker.set(waker);
        let t_to = setup.cfg.t_to;
        let n = setup.dir.len();
        Ok(Driver {
            n,
            me: setup.me.id,
            node: Node::new(setup.me, setup.dir, setup.cfg, setup.seed),
            key: setup.key,
            poll,
            listener,
            conns: HashMap::new(),
            next_token: 0,
            links: HashMap::new(),
            send_on: HashMap::new(),
            waiting: HashMap::new(),
            origin: Instant::now(),
            t_to,
            ctl,
            counters: Arc::new(Counters::default()),
            debug: debug_enabled(),
        })
    }

    /// The driver's counters.
    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Feeds the node one input, now.
    fn feed(&mut self, input: Input) {
        let now = self.now();
        self.feed_at(now, input);
    }

    fn feed_at(&mut self, now: Duration, input: Input) {
        match self.node.handle_input(now, input) {
            Ok(()) => {}
            Err(never) => match never {},
        }
    }

    /// Runs until the node left (see [`Control::leave`]) or `stop` returns true; `report` gets
    /// every failure.
    pub fn run(mut self, mut report: impl FnMut(Report), stop: impl Fn() -> bool) {
        let mut events = mio::Events::with_capacity(256);
        let _ = self.ctl.thread.set(std::thread::current().id());
        self.feed(Input::Start);
        self.drain(&mut report);
        let mut left = false;
        loop {
            if stop() {
                break;
            }
            let declared: Vec<NodeId> = std::mem::take(&mut *self.ctl.declared.lock());
            for d in declared {
                self.feed(Input::Declared(d));
            }
            if !left && self.ctl.leave.load(Ordering::SeqCst) {
                left = true;
                self.feed(Input::Leave);
            }
            self.drain(&mut report);
            if left && self.conns.values().all(|c| c.wbuf.is_empty()) {
                break;
            }
            self.expire_handshakes(&mut report);
            let now = self.now();
            let wait = match self.node.poll_timeout() {
                Some(d) => d.saturating_sub(now),
                None => Duration::from_millis(100),
            };
            let wait = wait.min(Duration::from_millis(100)).max(Duration::from_micros(200));
            let wait = if left { Duration::from_millis(5) } else { wait };
            let before = Instant::now();
            let mut stalled = false;
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != ErrorKind::Interrupted {
                    eprintln!("p2pmpi: k-monitor detector: poll failed: {e}; the detector stops");
                    break;
                }
                // A signal, such as the SIGCONT of a process that was stopped: read first.
                stalled = true;
            }
            // Back much later than asked: this thread did not run for a while (the process was
            // frozen, or starved of CPU). That time does not count in the silences it judges.
            let late = before.elapsed().saturating_sub(wait);
            stalled |= late > self.t_to / 4;
            // Inputs first, then the timers: a process that was itself late (frozen, starved)
            // reads the heartbeats waiting for it before it judges anybody silent.
            let ready: Vec<(mio::Token, bool, bool)> = events
                .iter()
                .map(|e| (e.token(), e.is_readable() || e.is_read_closed() || e.is_error(), e.is_writable()))
                .collect();
            for (t, r, w) in ready {
                match t {
                    LISTENER => self.accept(),
                    WAKER => {}
                    t => self.on_ready(t, r, w, &mut report),
                }
            }
            self.drain(&mut report);
            if late > self.node.config().t_hb {
                self.feed(Input::Stall(late));
            }
            if stalled {
                // Read everything that waits first (perhaps the notice that this process was
                // declared failed meanwhile), then judge the silences: the next poll returns at
                // once with whatever is left.
                continue;
            }
            self.node.handle_timeout(self.now());
            self.drain(&mut report);
            self.counters.failure_msgs.store(self.node.stats().failure_msgs, Ordering::Relaxed);
            self.counters.monitors.store(self.node.monitors().count() as u64, Ordering::Relaxed);
            self.counters.wide_links.store(self.node.wide_peers().count() as u64, Ordering::Relaxed);
        }
        self.ctl.set_left();
    }

    fn token(&mut self) -> mio::Token {
        self.next_token = (self.next_token + 1) % (usize::MAX - 2);
        mio::Token(self.next_token)
    }

    /// Carries out the node's actions.
    fn drain(&mut self, report: &mut impl FnMut(Report)) {
        while let Some(a) = self.node.poll_output() {
            match a {
                Action::Connect { to } => self.connect(to, report),
                Action::Send { to, msg } => self.send(to, &msg, report),
                Action::Disconnect { to } => self.disconnect(to),
                Action::Failed { node, cause } => {
                    if self.debug {
                        eprintln!("p2pmpi-fd: k-monitor {}: {node} failed ({cause:?}) at {:?}", self.me, self.now());
                    }
                    if cause == km::Cause::Excluded {
                        report(Report::Excluded);
                    } else {
                        report(Report::Failed { node, cause });
                    }
                }
            }
        }
    }

    fn usable(&self, t: mio::Token) -> bool {
        self.conns.get(&t).is_some_and(|c| c.state == State::Up && !c.closing && (c.outbound || c.proven))
    }

    fn connect(&mut self, to: Endpoint, report: &mut impl FnMut(Report)) {
        let peer = to.id;
        if self.links.get(&peer).is_some_and(|v| v.iter().any(|&t| self.usable(t))) {
            // A connection is up already (the peer opened one): it serves.
            self.feed(Input::Connected(peer));
            self.drain(report);
            return;
        }
        if self
            .links
            .get(&peer)
            .is_some_and(|v| v.iter().any(|t| self.conns.get(t).is_some_and(|c| c.outbound && !c.closing)))
        {
            return;
        }
        let addr = SocketAddr::new(to.ip, to.port);
        let stream = match mio::net::TcpStream::connect(addr) {
            Ok(s) => s,
            Err(_) => {
                self.feed(Input::ConnectFailed(peer));
                return;
            }
        };
        let t = self.token();
        let mut conn = Conn {
            stream,
            outbound: true,
            state: State::Connecting,
            peer,
            proven: true,
            nc: p2pmpi_wire::auth::nonce(),
            na: [0; NONCE_LEN],
            send_ctr: 0,
            recv_ctr: 0,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            deadline: Some(Instant::now() + self.t_to),
            closing: false,
            accepted: Instant::now(),
        };
        if self
            .poll
            .registry()
            .register(&mut conn.stream, t, mio::Interest::READABLE | mio::Interest::WRITABLE)
            .is_err()
        {
            self.feed(Input::ConnectFailed(peer));
            return;
        }
        self.conns.insert(t, conn);
        self.links.entry(peer).or_default().push(t);
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    self.make_room_for_unproven();
                    let t = self.token();
                    let mut conn = Conn {
                        stream,
                        outbound: false,
                        state: State::AwaitHello,
                        peer: NodeId::MAX,
                        proven: false,
                        nc: [0; NONCE_LEN],
                        na: p2pmpi_wire::auth::nonce(),
                        send_ctr: 0,
                        recv_ctr: 0,
                        rbuf: Vec::new(),
                        wbuf: Vec::new(),
                        deadline: Some(Instant::now() + self.t_to),
                        closing: false,
                        accepted: Instant::now(),
                    };
                    let _ = conn.stream.set_nodelay(true);
                    if self
                        .poll
                        .registry()
                        .register(&mut conn.stream, t, mio::Interest::READABLE | mio::Interest::WRITABLE)
                        .is_ok()
                    {
                        self.conns.insert(t, conn);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // Out of descriptors, or a connection reset before accept: try later.
                Err(_) => return,
            }
        }
    }

    /// Keeps the accepted connections still waiting for their first proof under
    /// [`MAX_UNPROVEN`] by closing the oldest of them. A monitor proves itself within a round
    /// trip of connecting, so the oldest waiting are the ones that say nothing: a client
    /// without the key that holds many connections open loses its own, never a newcomer's
    /// place.
    fn make_room_for_unproven(&mut self) {
        loop {
            let mut count = 0;
            let mut oldest: Option<(Instant, mio::Token)> = None;
            for (&t, c) in &self.conns {
                if c.outbound || c.proven {
                    continue;
                }
                count += 1;
                let since = c.accepted;
                if oldest.is_none_or(|(o, _)| since < o) {
                    oldest = Some((since, t));
                }
            }
            match oldest {
                Some((_, t)) if count >= MAX_UNPROVEN => {
                    if self.debug {
                        eprintln!(
                            "p2pmpi-fd: k-monitor {}: {MAX_UNPROVEN} connections wait for their proof; the oldest is closed",
                            self.me
                        );
                    }
                    self.counters.evicted.fetch_add(1, Ordering::Relaxed);
                    self.drop_conn(t);
                }
                _ => return,
            }
        }
    }

    /// Seals `msg` on connection `t`.
    fn seal(&mut self, t: mio::Token, msg: &km::Message) -> bool {
        let me = self.me;
        let Some(c) = self.conns.get_mut(&t) else { return false };
        let body = km::encode(msg);
        let mac = self.key.short_mac(
            Role::Monitor,
            &[&c.nc, &c.na, &[c.dir_out()], &c.send_ctr.to_le_bytes(), &me.to_le_bytes(), &body],
        );
        c.send_ctr += 1;
        c.wbuf.extend_from_slice(&((body.len() + MAC_LEN) as u32).to_le_bytes());
        c.wbuf.extend_from_slice(&body);
        c.wbuf.extend_from_slice(&mac);
        self.counters.frames_sent.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes_sent.fetch_add((4 + body.len() + MAC_LEN) as u64, Ordering::Relaxed);
        c.wbuf.len() <= MAX_QUEUED
    }

    fn send(&mut self, to: NodeId, msg: &km::Message, report: &mut impl FnMut(Report)) {
        let t = match self.send_on.get(&to).copied().filter(|&t| self.usable(t)) {
            Some(t) => t,
            None => {
                let Some(t) = self.links.get(&to).and_then(|v| v.iter().copied().find(|&t| self.usable(t))) else {
                    if self.links.get(&to).is_some_and(|v| !v.is_empty()) {
                        // Only connections still opening: the message waits for the first.
                        self.waiting.entry(to).or_default().push(msg.clone());
                    }
                    // Else the link went away; its reset is being reported.
                    return;
                };
                self.send_on.insert(to, t);
                t
            }
        };
        if !self.seal(t, msg) {
            // The peer reads nothing: as good as gone.
            self.close(t, report);
            return;
        }
        self.flush(t, report);
    }

    /// A connection to `peer` became usable: what waited for it goes.
    fn link_up(&mut self, peer: NodeId, report: &mut impl FnMut(Report)) {
        for m in self.waiting.remove(&peer).unwrap_or_default() {
            self.send(peer, &m, report);
        }
    }

    fn disconnect(&mut self, to: NodeId) {
        self.send_on.remove(&to);
        self.waiting.remove(&to);
        for t in self.links.remove(&to).unwrap_or_default() {
            if let Some(c) = self.conns.get_mut(&t) {
                c.closing = true;
                c.deadline = Some(Instant::now() + self.t_to);
            }
            if self.conns.get(&t).is_some_and(|c| c.wbuf.is_empty()) {
                self.drop_conn(t);
            }
        }
    }

    fn drop_conn(&mut self, t: mio::Token) {
        if let Some(mut c) = self.conns.remove(&t) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Connection `t` is closed or broken: the node learns it when it was the peer's last.
    fn close(&mut self, t: mio::Token, report: &mut impl FnMut(Report)) {
        let Some(c) = self.conns.get(&t) else { return };
        let (peer, outbound, state, closing, proven) = (c.peer, c.outbound, c.state, c.closing, c.proven);
        self.drop_conn(t);
        if closing || (!outbound && !proven) {
            return;
        }
        let Some(v) = self.links.get_mut(&peer) else { return };
        let before = v.len();
        v.retain(|&x| x != t);
        if v.len() == before {
            return;
        }
        if self.send_on.get(&peer) == Some(&t) {
            self.send_on.remove(&peer);
        }
        let others_up = v.iter().any(|&x| {
            self.conns.get(&x).is_some_and(|c| c.state == State::Up && !c.closing && (c.outbound || c.proven))
        });
        let others = !v.is_empty();
        if !others {
            self.links.remove(&peer);
            self.waiting.remove(&peer);
        }
        let now = self.now();
        if outbound && state != State::Up {
            if others_up {
                // Another connection to the peer works (it opened one meanwhile): it serves.
                self.feed_at(now, Input::Connected(peer));
            } else if !others {
                self.feed_at(now, Input::ConnectFailed(peer));
            }
        } else if !others {
            self.feed_at(now, Input::ConnectionReset(peer));
        }
        self.drain(report);
    }

    fn expire_handshakes(&mut self, report: &mut impl FnMut(Report)) {
        let now = Instant::now();
        let late: Vec<mio::Token> =
            self.conns.iter().filter(|(_, c)| c.deadline.is_some_and(|d| now >= d)).map(|(&t, _)| t).collect();
        for t in late {
            if self.debug {
                eprintln!("p2pmpi-fd: k-monitor {}: a connection's opening timed out", self.me);
            }
            self.close(t, report);
        }
    }

    fn flush(&mut self, t: mio::Token, report: &mut impl FnMut(Report)) {
        let Some(c) = self.conns.get_mut(&t) else { return };
        if c.state == State::Connecting {
            return;
        }
        while !c.wbuf.is_empty() {
            match c.stream.write(&c.wbuf) {
                Ok(0) => break,
                Ok(n) => {
                    c.wbuf.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    // The peer is gone (a reset). What it wrote before may still wait in the
                    // socket: a `Leave` read now makes its exit a departure, not a failure
                    // (processes that end together write to peers that just left).
                    self.read(t, report);
                    if self.conns.contains_key(&t) {
                        self.close(t, report);
                    }
                    return;
                }
            }
        }
        if c.closing && c.wbuf.is_empty() {
            self.drop_conn(t);
        }
    }

    fn on_ready(&mut self, t: mio::Token, readable: bool, writable: bool, report: &mut impl FnMut(Report)) {
        let Some(c) = self.conns.get_mut(&t) else { return };
        if c.state == State::Connecting {
            if !writable && !readable {
                return;
            }
            match c.stream.take_error() {
                Ok(None) => {}
                _ => {
                    self.close(t, report);
                    return;
                }
            }
            if c.stream.peer_addr().is_err() {
                // Not connected yet (a spurious event) or refused.
                if readable {
                    self.close(t, report);
                }
                return;
            }
            let _ = c.stream.set_nodelay(true);
            c.state = State::AwaitReply;
            let mut hello = Vec::with_capacity(HELLO_LEN);
            hello.extend_from_slice(MAGIC);
            hello.extend_from_slice(&self.me.to_le_bytes());
            hello.extend_from_slice(&c.peer.to_le_bytes());
            hello.extend_from_slice(&c.nc);
            c.wbuf.splice(0..0, hello);
        }
        if writable || self.conns.get(&t).is_some_and(|c| !c.wbuf.is_empty()) {
            self.flush(t, report);
        }
        if readable {
            self.read(t, report);
        }
    }

    fn read(&mut self, t: mio::Token, report: &mut impl FnMut(Report)) {
        let mut buf = [0u8; 16 * 1024];
        let mut eof = false;
        loop {
            let Some(c) = self.conns.get_mut(&t) else { return };
            match c.stream.read(&mut buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    c.rbuf.extend_from_slice(&buf[..n]);
                    if c.rbuf.len() > MAX_FRAME + 64 * 1024 {
                        // Parse what is there before reading more.
                        if !self.parse(t, report) {
                            return;
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    eof = true;
                    break;
                }
            }
        }
        if !self.parse(t, report) {
            return;
        }
        if eof {
            self.close(t, report);
        }
    }

    /// Rejects connection `t` for `why`.
    fn reject(&mut self, t: mio::Token, why: &str, report: &mut impl FnMut(Report)) {
        self.counters.rejected.fetch_add(1, Ordering::Relaxed);
        if self.debug {
            eprintln!("p2pmpi-fd: k-monitor {}: closing a connection: {why}", self.me);
        }
        self.close(t, report);
    }

    /// Handles what connection `t` received; false if it was closed.
    fn parse(&mut self, t: mio::Token, report: &mut impl FnMut(Report)) -> bool {
        let n = self.node_count();
        loop {
            let me = self.me;
            let Some(c) = self.conns.get_mut(&t) else { return false };
            match c.state {
                State::Connecting => return true,
                State::AwaitHello => {
                    if c.rbuf.len() < HELLO_LEN {
                        return true;
                    }
                    let from = u32::from_le_bytes(c.rbuf[4..8].try_into().expect("4 bytes"));
                    let to = u32::from_le_bytes(c.rbuf[8..12].try_into().expect("4 bytes"));
                    if &c.rbuf[..4] != MAGIC || to != me || from == me || (from as usize) >= n {
                        self.reject(t, "not a k-monitor hello of this job", report);
                        return false;
                    }
                    c.nc.copy_from_slice(&c.rbuf[12..HELLO_LEN]);
                    c.rbuf.drain(..HELLO_LEN);
                    c.peer = from;
                    c.state = State::Up;
                    let mut reply = Vec::with_capacity(REPLY_LEN);
                    reply.extend_from_slice(MAGIC);
                    reply.extend_from_slice(&c.na);
                    c.wbuf.extend_from_slice(&reply);
                    self.flush(t, report);
                }
                State::AwaitReply => {
                    if c.rbuf.len() < REPLY_LEN {
                        return true;
                    }
                    if &c.rbuf[..4] != MAGIC {
                        self.reject(t, "not a k-monitor answer", report);
                        return false;
                    }
                    c.na.copy_from_slice(&c.rbuf[4..REPLY_LEN]);
                    c.rbuf.drain(..REPLY_LEN);
                    c.state = State::Up;
                    c.deadline = None;
                    let peer = c.peer;
                    let first = !self.send_on.get(&peer).is_some_and(|&x| x != t && self.usable(x));
                    if first {
                        self.send_on.insert(peer, t);
                    }
                    self.feed(Input::Connected(peer));
                    self.drain(report);
                    self.link_up(peer, report);
                    self.flush(t, report);
                }
                State::Up => {
                    if c.rbuf.len() < 4 {
                        return true;
                    }
                    let len = u32::from_le_bytes(c.rbuf[..4].try_into().expect("4 bytes")) as usize;
                    if !(1 + MAC_LEN..=MAX_FRAME).contains(&len) {
                        self.reject(t, "a frame of a bad length", report);
                        return false;
                    }
                    if c.rbuf.len() < 4 + len {
                        return true;
                    }
                    let body = &c.rbuf[4..4 + len - MAC_LEN];
                    let mac = &c.rbuf[4 + len - MAC_LEN..4 + len];
                    let dir_in = 1 - c.dir_out();
                    let ok = self.key.verify_short_mac(
                        Role::Monitor,
                        &[&c.nc, &c.na, &[dir_in], &c.recv_ctr.to_le_bytes(), &c.peer.to_le_bytes(), body],
                        mac,
                    );
                    if !ok {
                        self.reject(t, "a frame whose MAC does not verify", report);
                        return false;
                    }
                    let msg = match km::decode(body) {
                        Ok(m) => m,
                        Err(e) => {
                            let why = format!("{e}");
                            self.reject(t, &why, report);
                            return false;
                        }
                    };
                    c.recv_ctr += 1;
                    c.rbuf.drain(..4 + len);
                    let peer = c.peer;
                    let closing = c.closing;
                    if !c.proven {
                        c.proven = true;
                        c.deadline = None;
                        self.links.entry(peer).or_default().push(t);
                        self.link_up(peer, report);
                    }
                    if closing {
                        continue;
                    }
                    self.feed(Input::Message { from: peer, msg });
                    self.drain(report);
                }
            }
        }
    }

    fn node_count(&self) -> usize {
        self.n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;
    use std::sync::Mutex;

    /// A group of drivers on 127.0.0.1, each on its own thread; reports collected.
    struct Group {
        ctls: Vec<Arc<Control>>,
        counters: Vec<Arc<Counters>>,
        reports: Arc<Mutex<Vec<(usize, Report)>>>,
        addrs: Vec<SocketAddr>,
        stop: Arc<AtomicBool>,
        threads: Vec<std::thread::JoinHandle<()>>,
    }

    fn key() -> JobKey {
        JobKey::from_bytes([7; 32])
    }

    impl Group {
        fn start(n: usize, k: usize) -> Group {
            let listeners: Vec<std::net::TcpListener> =
                (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
            let addrs: Vec<SocketAddr> = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
            let eps: Vec<Endpoint> = addrs
                .iter()
                .enumerate()
                .map(|(i, a)| Endpoint { id: i as u32, ip: a.ip(), prefix: 8, port: a.port() })
                .collect();
            let dir = Arc::new(Directory::new(eps.iter().copied(), false));
            let cfg = km::Config::new(k, Duration::from_millis(20), Duration::from_millis(400));
            let reports = Arc::new(Mutex::new(Vec::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let (mut ctls, mut counters, mut threads) = (Vec::new(), Vec::new(), Vec::new());
            for (i, l) in listeners.into_iter().enumerate() {
                let ctl = Arc::new(Control::default());
                let setup = Setup { me: eps[i], dir: dir.clone(), cfg, key: key(), seed: i as u64 };
                let d = Driver::new(setup, l, ctl.clone()).unwrap();
                counters.push(d.counters());
                ctls.push(ctl);
                let (reports, stop) = (reports.clone(), stop.clone());
                threads.push(std::thread::spawn(move || {
                    d.run(|r| reports.lock().unwrap().push((i, r)), move || stop.load(Ordering::SeqCst))
                }));
            }
            Group { ctls, counters, reports, addrs, stop, threads }
        }

        fn reports(&self) -> Vec<(usize, Report)> {
            self.reports.lock().unwrap().clone()
        }

        /// Waits (bounded) until every node has `m` monitors.
        fn wait_monitored(&self, m: u64) {
            let deadline = Instant::now() + Duration::from_secs(20);
            while !self.counters.iter().all(|c| c.monitors.load(Ordering::Relaxed) >= m) {
                assert!(Instant::now() < deadline, "monitors not set up");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    impl Drop for Group {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            for c in &self.ctls {
                if let Some(w) = c.waker.get() {
                    let _ = w.wake();
                }
            }
            for t in self.threads.drain(..) {
                let _ = t.join();
            }
        }
    }

    fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        f()
    }

    #[test]
    fn processes_that_leave_are_not_reported_and_a_declared_one_is() {
        let g = Group::start(4, 2);
        g.wait_monitored(2);
        g.ctls[3].leave(Duration::from_secs(2));
        g.ctls[1].declare(2);
        assert!(wait_until(Duration::from_secs(5), || {
            [0, 1]
                .iter()
                .all(|&i| g.reports().iter().any(|(o, r)| *o == i && matches!(r, Report::Failed { node: 2, .. })))
        }));
        // Well past T_to: node 3 left, nobody reports it; node 2 (still running, declared)
        // is silenced everywhere.
        std::thread::sleep(Duration::from_millis(600));
        let r = g.reports();
        assert!(!r.iter().any(|(_, r)| matches!(r, Report::Failed { node: 3, .. })), "{r:?}");
        assert!(r.iter().any(|(o, r)| *o == 1 && matches!(r, Report::Failed { node: 2, cause: km::Cause::Declared })));
    }

    /// Garbage, forged frames and connections that say nothing cost the detector nothing: each
    /// is closed, counted, and the group monitors on without a false report.
    #[test]
    fn garbage_forgeries_and_idle_connections_are_closed_and_harmless() {
        let g = Group::start(3, 2);
        g.wait_monitored(2);
        let target = g.addrs[0];
        let mut held = Vec::new();
        // 1. Bytes that are not a hello.
        let mut s = TcpStream::connect(target).unwrap();
        s.write_all(&[0xde; 200]).unwrap();
        held.push(s);
        // 2. A well-formed hello naming rank 1, then a frame sealed with another key.
        let mut s = TcpStream::connect(target).unwrap();
        let mut hello = MAGIC.to_vec();
        hello.extend_from_slice(&1u32.to_le_bytes());
        hello.extend_from_slice(&0u32.to_le_bytes());
        hello.extend_from_slice(&[3; NONCE_LEN]);
        s.write_all(&hello).unwrap();
        let mut reply = [0u8; REPLY_LEN];
        s.read_exact(&mut reply).unwrap();
        let body = km::encode(&km::Message::Failure { node: 2 });
        let wrong = JobKey::from_bytes([8; 32]);
        let mac = wrong.short_mac(
            Role::Monitor,
            &[&[3; NONCE_LEN], &reply[4..], &[0], &0u64.to_le_bytes(), &1u32.to_le_bytes(), &body],
        );
        let mut frame = ((body.len() + MAC_LEN) as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        frame.extend_from_slice(&mac);
        s.write_all(&frame).unwrap();
        held.push(s);
        // 3. Many connections that never say anything: at most MAX_UNPROVEN are kept, each
        // for at most T_to.
        for _ in 0..(MAX_UNPROVEN + 40) {
            if let Ok(s) = TcpStream::connect(target) {
                held.push(s);
            }
        }
        assert!(
            wait_until(Duration::from_secs(5), || g.counters[0].rejected.load(Ordering::Relaxed) >= 2),
            "the garbage and the forgery were not rejected"
        );
        // Every connection is closed by the detector within T_to (+ slack): reads end.
        for s in &mut held {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut b = [0u8; 64];
            loop {
                match s.read(&mut b) {
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        panic!("a connection was still open 5 s later")
                    }
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        }
        // The forged notice did not count, and nobody was reported: the group still works.
        std::thread::sleep(Duration::from_millis(500));
        assert!(g.reports().is_empty(), "{:?}", g.reports());
        assert!(g.counters.iter().all(|c| c.monitors.load(Ordering::Relaxed) == 2));
    }
    /// Connections that never prove themselves cannot keep a monitor out: with
    /// [`MAX_UNPROVEN`] of them held open, a newcomer that knows the key is still answered,
    /// the oldest silent connection making room, and once it proves itself it stays.
    #[test]
    fn a_flood_of_silent_connections_never_keeps_a_monitor_out() {
        let g = Group::start(3, 2);
        g.wait_monitored(2);
        let target = g.addrs[0];
        let mut silent: Vec<TcpStream> = (0..MAX_UNPROVEN).map(|_| TcpStream::connect(target).unwrap()).collect();
        // The newcomer: hello as rank 1 (a second connection of a real peer), reply, one
        // sealed heartbeat.
        let opened = Instant::now();
        let mut s = TcpStream::connect(target).unwrap();
        let nc = [5u8; NONCE_LEN];
        let mut hello = MAGIC.to_vec();
        hello.extend_from_slice(&1u32.to_le_bytes());
        hello.extend_from_slice(&0u32.to_le_bytes());
        hello.extend_from_slice(&nc);
        s.write_all(&hello).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut reply = [0u8; REPLY_LEN];
        s.read_exact(&mut reply).expect("the newcomer was refused: the silent connections keep it out");
        assert_eq!(&reply[..4], MAGIC);
        let body = km::encode(&km::Message::Heartbeat);
        let mac =
            key().short_mac(Role::Monitor, &[&nc, &reply[4..], &[0], &0u64.to_le_bytes(), &1u32.to_le_bytes(), &body]);
        let mut frame = ((body.len() + MAC_LEN) as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        frame.extend_from_slice(&mac);
        s.write_all(&frame).unwrap();
        assert!(g.counters[0].evicted.load(Ordering::Relaxed) >= 1, "no silent connection made room");
        let mut b = [0u8; 8];
        // Every silent connection is closed within T_to; the proven newcomer is not.
        for c in &mut silent {
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            match c.read(&mut b) {
                Ok(0) | Err(_) => {}
                Ok(_) => panic!("a silent connection was sent something"),
            }
        }
        // Well past the newcomer's own handshake deadline (T_to = 400 ms from its accept): it
        // would have been closed had its proof not counted.
        std::thread::sleep(Duration::from_secs(1).saturating_sub(opened.elapsed()));
        s.set_nonblocking(true).unwrap();
        match s.read(&mut b) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!("the proven connection was closed or sent garbage: {other:?}"),
        }
        assert_eq!(g.counters[0].rejected.load(Ordering::Relaxed), 0);
        assert!(g.reports().is_empty(), "{:?}", g.reports());
    }
}
