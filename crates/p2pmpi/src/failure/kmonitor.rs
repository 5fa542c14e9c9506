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
//! their first frame, each for at most `T_to`.
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

use p2pmpi_core::kmonitor::{self as km, Action, Node};
pub use p2pmpi_core::kmonitor::{Cause, Config, Directory, Endpoint, NodeId};
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
    /// Failure notices sent (flooding).
    pub failure_msgs: std::sync::atomic::AtomicU64,
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
}

impl Control {
    /// Makes the node leave, and waits up to `limit` until the `Leave` messages are written.
    pub fn leave(&self, limit: Duration) {
        self.leave.store(true, Ordering::SeqCst);
        if let Some(w) = self.waker.get() {
            let _ = w.wake();
        }
        let deadline = Instant::now() + limit;
        let mut left = self.left.lock();
        while !*left {
            if self.left_cv.wait_until(&mut left, deadline).timed_out() {
                return;
            }
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

    /// Runs until the node left (see [`Control::leave`]) or `stop` returns true; `report` gets
    /// every failure.
    pub fn run(mut self, mut report: impl FnMut(Report), stop: impl Fn() -> bool) {
        let mut events = mio::Events::with_capacity(256);
        self.node.on_start(self.now());
        self.drain(&mut report);
        let mut left = false;
        loop {
            if stop() {
                break;
            }
            let declared: Vec<NodeId> = std::mem::take(&mut *self.ctl.declared.lock());
            for d in declared {
                self.node.on_declared(d, self.now());
            }
            if !left && self.ctl.leave.load(Ordering::SeqCst) {
                left = true;
                self.node.leave(self.now());
            }
            self.drain(&mut report);
            if left && self.conns.values().all(|c| c.wbuf.is_empty()) {
                break;
            }
            self.expire_handshakes(&mut report);
            let now = self.now();
            let wait = match self.node.next_deadline() {
                Some(d) => d.saturating_sub(now),
                None => Duration::from_millis(100),
            };
            let wait = wait.min(Duration::from_millis(100)).max(Duration::from_micros(200));
            let wait = if left { Duration::from_millis(5) } else { wait };
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != ErrorKind::Interrupted {
                    eprintln!("p2pmpi: k-monitor detector: poll failed: {e}; the detector stops");
                    break;
                }
            }
            // Inputs first, then the timers: a process that was itself late (frozen, starved)
            // reads the heartbeats waiting for it before it judges anybody silent.
            let ready: Vec<(mio::Token, bool, bool)> =
                events.iter().map(|e| (e.token(), e.is_readable() || e.is_read_closed() || e.is_error(), e.is_writable())).collect();
            for (t, r, w) in ready {
                match t {
                    LISTENER => self.accept(),
                    WAKER => {}
                    t => self.on_ready(t, r, w, &mut report),
                }
            }
            self.drain(&mut report);
            self.node.tick(self.now());
            self.drain(&mut report);
            self.counters.failure_msgs.store(self.node.stats().failure_msgs, Ordering::Relaxed);
        }
        self.ctl.set_left();
    }

    fn token(&mut self) -> mio::Token {
        self.next_token = (self.next_token + 1) % (usize::MAX - 2);
        mio::Token(self.next_token)
    }

    /// Carries out the node's actions.
    fn drain(&mut self, report: &mut impl FnMut(Report)) {
        while let Some(a) = self.node.poll_action() {
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
            self.node.on_connected(peer, self.now());
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
                self.node.on_connect_failed(peer, self.now());
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
        };
        if self
            .poll
            .registry()
            .register(&mut conn.stream, t, mio::Interest::READABLE | mio::Interest::WRITABLE)
            .is_err()
        {
            self.node.on_connect_failed(peer, self.now());
            return;
        }
        self.conns.insert(t, conn);
        self.links.entry(peer).or_default().push(t);
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    let unproven = self.conns.values().filter(|c| !c.outbound && !c.proven).count();
                    if unproven >= MAX_UNPROVEN {
                        // Dropped at once: a client without the key cannot hold the detector busy.
                        continue;
                    }
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
                    // The link went away; its reset is being reported.
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

    fn disconnect(&mut self, to: NodeId) {
        self.send_on.remove(&to);
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
        let others_up = v.iter().any(|&x| self.conns.get(&x).is_some_and(|c| c.state == State::Up && !c.closing && (c.outbound || c.proven)));
        let others = !v.is_empty();
        if !others {
            self.links.remove(&peer);
        }
        let now = self.now();
        if outbound && state != State::Up {
            if !others_up && !others {
                self.node.on_connect_failed(peer, now);
            }
        } else if !others {
            self.node.on_connection_reset(peer, now);
        }
        self.drain(report);
    }

    fn expire_handshakes(&mut self, report: &mut impl FnMut(Report)) {
        let now = Instant::now();
        let late: Vec<mio::Token> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| now >= d))
            .map(|(&t, _)| t)
            .collect();
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
                    self.node.on_connected(peer, self.now());
                    self.drain(report);
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
                    if !c.proven {
                        c.proven = true;
                        c.deadline = None;
                        self.links.entry(peer).or_default().push(t);
                    }
                    if c.closing {
                        continue;
                    }
                    self.node.on_message(peer, msg, self.now());
                    self.drain(report);
                }
            }
        }
    }

    fn node_count(&self) -> usize {
        self.n
    }
}
