//! The central registry's driver: one [`central::Server`] per pool, each on a thread of its
//! own, fed by the members' connections — through the pool's input log: the server is a
//! [`Replica`] fed each input as a committed entry. A registry of its own ([`serve`], or a
//! supernode alone) commits each input at once ([`LocalLog`]); the supernodes of a grid
//! that has several replicate the log with Raft ([`crate::consensus`],
//! [`Registry::replicated`]): the leader's pool threads propose the inputs, every
//! supernode's pool threads apply the committed ones to their replicas, and only the
//! leader's carry the actions out and hold the members' connections. A follower answers a
//! member's hello with [`JelRecord::NotLeader`] (the leader's address when it knows it).
//!
//! A member's connection opens with [`SnRequest::Jel`] (the supernode hands such a
//! connection to its [`Registry`]; [`serve`] runs a registry on a listener of its own). The
//! registry answers [`JelRecord::Attached`], then the connection carries the core's messages
//! both ways: the server's messages to a member go on that member's own connection (the
//! registry opens none). A connection that ends without the member's `Leave` is a death
//! (`Unreachable`: a `kill -9` is told at once); a member the core declares dead (its
//! lease ran out and it did not answer the ping) is told so ([`JelRecord::Closed`]) and its
//! connection closed. A record that does not decode closes its connection, nothing else.

use crate::consensus::{self, Command};
use crate::net::{self, Acceptor, MAX_QUEUED};
use p2pmpi_core::jel::central::{self, Dissemination, Message};
use p2pmpi_core::jel::replica::{self, Replica, Step};
use p2pmpi_core::jel::{Action, Addr, Event, MemberId};
use p2pmpi_core::machine::Machine as _;
use p2pmpi_wire::grid::{JelHello, JelRecord, SnRequest, SnResponse};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

enum Input {
    Attach {
        addr: Addr,
        conn: u64,
        tx: SyncSender<JelRecord>,
    },
    Msg {
        from: Addr,
        conn: u64,
        msg: Message,
    },
    Closed {
        addr: Addr,
        conn: u64,
    },
    /// (replicated) The next committed entry of this pool.
    Committed(replica::Entry),
    /// (replicated) This supernode leads, or stopped leading.
    Leader(bool),
    /// (replicated) The pool was forgotten: the thread ends (a member that attached in the
    /// meantime reconnects and creates it again).
    Forgotten,
}

struct Slot {
    tx: Sender<Input>,
    dissemination: Dissemination,
    /// (replicated) The pool's inputs applied so far (the same count on every supernode).
    applied: u64,
}

/// The registry of every pool, shared by the connections' threads.
#[derive(Clone, Default)]
pub struct Registry {
    pools: Arc<Mutex<HashMap<String, Slot>>>,
    /// Distributed pools: the last members that asked for seeds.
    seeds: Arc<Mutex<HashMap<String, VecDeque<Addr>>>>,
    /// The consensus among the supernodes, if the registry is replicated.
    raft: Arc<OnceLock<Arc<consensus::Node>>>,
    /// (replicated) This supernode leads.
    leading: Arc<std::sync::atomic::AtomicBool>,
}

/// How long a member's hello waits for the pool it creates to be committed.
const CREATE_WAIT: Duration = Duration::from_secs(5);

/// What a supernode does with a committed [`Command::Grid`] record.
pub type GridHook = Box<dyn FnMut(Vec<u8>) + Send>;

/// The registry's side of the consensus: committed commands applied to the pools, and the
/// grid's records to the supernode's hook.
struct Machine {
    registry: Registry,
    grid: GridHook,
}

impl consensus::Apply for Machine {
    fn apply(&mut self, cmd: Command) {
        match cmd {
            Command::Grid(record) => (self.grid)(record),
            cmd => self.registry.apply(cmd),
        }
    }

    fn role(&mut self, leading: bool, leader: Option<SocketAddr>) {
        let r = &self.registry;
        r.leading.store(leading, std::sync::atomic::Ordering::SeqCst);
        debug!("jel registry: leading: {leading}, leader {leader:?}");
        for s in r.pools.lock().values() {
            let _ = s.tx.send(Input::Leader(leading));
        }
    }
}

/// Seeds kept per distributed pool (the most recent).
pub const SEEDS: usize = 16;
/// Distributed pools whose seeds are kept, at most (the oldest forgotten).
const SEED_POOLS: usize = 4096;

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("pools", &self.pools.lock().len()).finish()
    }
}

/// An empty pool is forgotten after this long (its thread ends).
const IDLE_POOL: Duration = Duration::from_secs(30);

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// The registry replicated among the supernodes `peers` (`SUPERNODE`'s list, the same
    /// on every one), this one being `peers[me]`; `local` is the address its connections
    /// to the others leave from, `log` the file keeping its Raft log
    /// ([`consensus::Node::start`]); `grid` receives the committed grid records
    /// ([`Command::Grid`], in the log's order, also those replayed from the log at start).
    pub fn replicated(
        peers: Vec<SocketAddr>,
        me: usize,
        secret: GridSecret,
        local: Option<std::net::IpAddr>,
        log: Option<std::path::PathBuf>,
        grid: GridHook,
    ) -> Result<Registry, String> {
        let registry = Registry::new();
        let sm = Machine { registry: registry.clone(), grid };
        let node = consensus::Node::start(peers, me, secret, local, log, sm)?;
        let _ = registry.raft.set(node);
        Ok(registry)
    }

    /// The consensus, if the registry is replicated.
    pub fn raft(&self) -> Option<&Arc<consensus::Node>> {
        self.raft.get()
    }

    /// Applies a committed command (the consensus's thread, in the log's order).
    fn apply(&self, cmd: Command) {
        let mut pools = self.pools.lock();
        match cmd {
            Command::Create { pool, config, seed } => {
                if pools.contains_key(&pool) {
                    return;
                }
                let (tx, rx) = std::sync::mpsc::channel();
                let (name, registry) = (pool.clone(), self.clone());
                let Some(node) = self.raft.get().cloned() else { return };
                let leading = self.leading.load(std::sync::atomic::Ordering::SeqCst);
                let ok = net::spawn("jel-pool", move || {
                    run_pool(registry, name, config, seed, rx, Mode::Replicated(node), leading)
                });
                if !ok {
                    warn!("jel registry: cannot start the thread of pool {pool:?}: its replica is missing here");
                    return;
                }
                info!("jel registry: pool {pool:?} created ({} dissemination)", config.dissemination);
                pools.insert(pool, Slot { tx, dissemination: config.dissemination, applied: 0 });
            }
            Command::Input { pool, entry } => {
                let Some(slot) = pools.get_mut(&pool) else { return };
                slot.applied += 1;
                match replica::decode(&entry) {
                    Ok(e) => {
                        let _ = slot.tx.send(Input::Committed(e));
                    }
                    Err(e) => warn!("jel registry: an entry of pool {pool:?} does not decode ({e}): skipped"),
                }
            }
            Command::Forget { pool, applied } => {
                if pools.get(&pool).is_some_and(|s| s.applied == applied) {
                    if let Some(s) = pools.remove(&pool) {
                        let _ = s.tx.send(Input::Forgotten);
                    }
                    info!("jel registry: pool {pool:?} is empty: forgotten");
                }
            }
            Command::Grid(_) => {}
        }
    }

    /// The pools served now.
    pub fn pools(&self) -> Vec<String> {
        let mut v: Vec<String> = self.pools.lock().keys().cloned().collect();
        v.sort();
        v
    }

    /// A rendezvous of the distributed implementation (nothing of the pool is served here):
    /// the last [`SEEDS`] members of `pool` that asked, most recent first; `addr` is added.
    pub fn seeds(&self, pool: &str, addr: Option<Addr>) -> Vec<Addr> {
        let mut all = self.seeds.lock();
        if !all.contains_key(pool) && all.len() >= SEED_POOLS {
            if let Some(k) = all.keys().next().cloned() {
                all.remove(&k);
            }
        }
        let list = all.entry(pool.to_string()).or_default();
        let out: Vec<Addr> = list.iter().rev().copied().collect();
        if let Some(a) = addr {
            list.retain(|x| *x != a);
            list.push_back(a);
            if list.len() > SEEDS {
                list.pop_front();
            }
        }
        out
    }

    /// Serves one member's connection whose hello was read (blocks until it ends).
    pub fn serve_conn(&self, mut conn: SecureConn, hello: JelHello) {
        conn.set_max_record(net::MAX_RECORD);
        let _ = conn.set_read_timeout(None);
        if let Some(node) = self.raft.get() {
            if !node.leads() {
                let _ = conn.send(&JelRecord::NotLeader(node.leader_addr()));
                return;
            }
        }
        let tx = match self.attach(&hello) {
            Ok(tx) => tx,
            Err(why) => {
                let _ = conn.send(&JelRecord::Attached(Err(why)));
                return;
            }
        };
        if conn.send(&JelRecord::Attached(Ok(()))).is_err() {
            return;
        }
        let (mut reader, mut writer) = conn.split();
        let id = net::conn_id();
        let (qtx, qrx) = std::sync::mpsc::sync_channel::<JelRecord>(MAX_QUEUED);
        let addr = hello.addr;
        if tx.send(Input::Attach { addr, conn: id, tx: qtx }).is_err() {
            return;
        }
        let wtx = tx.clone();
        let started = net::spawn("jel-registry-out", move || {
            net::write_loop(&mut writer, &qrx, |_| {
                let _ = wtx.send(Input::Closed { addr, conn: id });
            });
        });
        if started {
            loop {
                match reader.recv::<JelRecord>() {
                    Ok(Some(JelRecord::Msg(bytes))) => match central::decode(&bytes) {
                        Ok(msg) => {
                            if tx.send(Input::Msg { from: addr, conn: id, msg }).is_err() {
                                break;
                            }
                        }
                        Err(e) => {
                            debug!("jel registry: {addr} sent a record that does not decode ({e}): closed");
                            break;
                        }
                    },
                    Ok(Some(_)) => {
                        debug!("jel registry: {addr} sent an unexpected record: closed");
                        break;
                    }
                    Ok(None) => break,
                    Err(e) => {
                        debug!("jel registry: connection of {addr} ended: {e}");
                        break;
                    }
                }
            }
        }
        let _ = tx.send(Input::Closed { addr, conn: id });
    }

    /// The pool's input, created with the hello's parameters if it does not exist.
    fn attach(&self, hello: &JelHello) -> Result<Sender<Input>, String> {
        let mut pools = self.pools.lock();
        if let Some(s) = pools.get(&hello.pool) {
            if let Some(c) = &hello.config {
                if c.dissemination != s.dissemination {
                    return Err(format!(
                        "pool {:?} uses the {} dissemination, not {}",
                        hello.pool, s.dissemination, c.dissemination
                    ));
                }
            }
            return Ok(s.tx.clone());
        }
        let Some(cfg) = hello.config else {
            return Err(format!("no pool named {:?}", hello.pool));
        };
        let mut seed = [0u8; 8];
        getrandom::fill(&mut seed).map_err(|e| e.to_string())?;
        let seed = u64::from_le_bytes(seed);
        if let Some(node) = self.raft.get() {
            // Created when the command is committed, on every supernode.
            drop(pools);
            node.propose(&Command::Create { pool: hello.pool.clone(), config: cfg, seed });
            let deadline = Instant::now() + CREATE_WAIT;
            loop {
                if let Some(s) = self.pools.lock().get(&hello.pool) {
                    if let Some(c) = &hello.config {
                        if c.dissemination != s.dissemination {
                            return Err(format!(
                                "pool {:?} uses the {} dissemination, not {}",
                                hello.pool, s.dissemination, c.dissemination
                            ));
                        }
                    }
                    return Ok(s.tx.clone());
                }
                if Instant::now() >= deadline || !node.leads() {
                    return Err(format!("pool {:?} could not be created (no quorum of supernodes)", hello.pool));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (name, registry) = (hello.pool.clone(), self.clone());
        let ok = net::spawn("jel-pool", move || run_pool(registry, name, cfg, seed, rx, Mode::Local, true));
        if !ok {
            return Err("cannot start a thread".into());
        }
        info!("jel registry: pool {:?} created ({} dissemination)", hello.pool, cfg.dissemination);
        pools.insert(hello.pool.clone(), Slot { tx: tx.clone(), dissemination: cfg.dissemination, applied: 0 });
        Ok(tx)
    }
}

/// How a pool's inputs become committed entries.
enum Mode {
    /// At once (a single registry): [`LocalLog`].
    Local,
    /// Through the consensus among the supernodes: proposed (by the leader), applied when
    /// the consensus commits them ([`Input::Committed`]).
    Replicated(Arc<consensus::Node>),
}

/// A pool's input log. The pool's server is a [`Replica`] fed the committed entries, as
/// every supernode's is with the log replicated by Raft among several (docs/jel.md,
/// "Several supernodes"): alone, an input is committed at once; replicated, it is proposed
/// and applied when the consensus commits it.
struct LocalLog {
    replica: Replica,
    index: u64,
    name: String,
    mode: Mode,
    /// The pool's clock: `at` when `base` was read (a new leader continues from the
    /// replica's clock: time does not jump by the difference of two processes' clocks, nor
    /// by the time without a leader).
    base: Instant,
    at: Duration,
    /// (replicated) A tick proposed and not applied yet (then no other is proposed), and
    /// since when.
    tick_sent: Option<Instant>,
}

impl LocalLog {
    fn now(&self) -> Duration {
        self.at + self.base.elapsed()
    }

    fn leads(&self) -> bool {
        self.replica.is_leader()
    }

    /// Applies the committed entry `index`.
    fn step(&mut self, index: u64, entry: replica::Entry) {
        let applied = self.replica.handle_input(entry.now, Step::Committed { index, entry });
        debug_assert!(applied.is_ok(), "entries are committed in order");
    }

    fn set_leader(&mut self, leads: bool) {
        let now = self.now();
        let _ = self.replica.handle_input(now, Step::Leader(leads));
    }

    fn commit(&mut self, now: Duration, input: replica::Input) {
        let e = self.replica.stamp(now, input);
        match &self.mode {
            Mode::Local => {
                self.index += 1;
                self.step(self.index, e);
            }
            Mode::Replicated(node) => {
                if self.replica.is_leader() {
                    node.propose(&Command::Input { pool: self.name.clone(), entry: replica::encode(&e) });
                }
            }
        }
    }

    /// A committed entry (replicated).
    fn apply(&mut self, e: replica::Entry) {
        let index = self.replica.next_index();
        if e.input == replica::Input::Tick {
            self.tick_sent = None;
        }
        self.step(index, e);
    }

    /// Proposes a tick if the server's deadline passed (one at a time when replicated).
    fn tick(&mut self) {
        if self.tick_sent.is_some_and(|t| t.elapsed() < Duration::from_millis(500)) {
            return;
        }
        if let Some(tick) = self.replica.due(self.now()) {
            if matches!(self.mode, Mode::Replicated(_)) {
                self.tick_sent = Some(Instant::now());
            }
            self.commit(tick.now, tick.input);
        }
    }
}

/// A pool's thread: its input log (and server) and the members' connections.
struct Pool {
    registry: Registry,
    name: String,
    rx: Receiver<Input>,
    replicated: bool,
    log: LocalLog,
    conns: HashMap<Addr, (u64, SyncSender<JelRecord>)>,
    addrs: HashMap<MemberId, Addr>,
    members: HashSet<Addr>,
    /// (replicated) The messages for members not connected to this leader (yet): a new
    /// leader's members reconnect within a moment, and the server believes it sent them.
    pending: HashMap<Addr, VecDeque<JelRecord>>,
    /// Events of the server's stream already looked at.
    seen: usize,
    idle_since: Option<Instant>,
}

fn run_pool(
    registry: Registry,
    name: String,
    cfg: central::Config,
    seed: u64,
    rx: Receiver<Input>,
    mode: Mode,
    leading: bool,
) {
    let replicated = matches!(mode, Mode::Replicated(_));
    let mut log = LocalLog {
        replica: Replica::new(cfg, seed),
        index: 0,
        name: name.clone(),
        mode,
        base: Instant::now(),
        at: Duration::ZERO,
        tick_sent: None,
    };
    log.set_leader(leading);
    // The pool's first entry: every replica applies it when the pool is created (the
    // creation is the committed command).
    if replicated {
        log.apply(replica::Entry { now: Duration::ZERO, input: replica::Input::Start });
    } else {
        log.commit(Duration::ZERO, replica::Input::Start);
    }
    let mut pool = Pool {
        registry,
        name,
        rx,
        replicated,
        log,
        conns: HashMap::new(),
        addrs: HashMap::new(),
        members: HashSet::new(),
        pending: HashMap::new(),
        seen: 0,
        idle_since: None,
    };
    loop {
        let now = pool.log.now();
        let wait =
            pool.log.replica.server().poll_timeout().map_or(Duration::from_secs(1), |d| d.saturating_sub(now)).clamp(
                Duration::from_millis(if pool.log.tick_sent.is_some() { 50 } else { 0 }),
                Duration::from_secs(1),
            );
        match pool.rx.recv_timeout(wait) {
            Ok(Input::Forgotten) | Err(RecvTimeoutError::Disconnected) => return,
            Ok(input) => pool.input(input),
            Err(RecvTimeoutError::Timeout) => {}
        }
        pool.log.tick();
        pool.carry_out();
        if pool.idle() {
            return;
        }
    }
}

impl Pool {
    /// What the members' connections and the consensus brought.
    fn input(&mut self, input: Input) {
        let log = &mut self.log;
        match input {
            Input::Attach { addr, conn, tx } => {
                // A newer connection from the same address replaces the older one. A
                // follower holds none (the member asks the leader; the registry's flag is
                // set before this thread is told it leads).
                if log.leads() || self.registry.leading.load(std::sync::atomic::Ordering::SeqCst) || !self.replicated {
                    // What this leader had for it while it was not connected here goes
                    // first, in order.
                    for rec in self.pending.remove(&addr).unwrap_or_default() {
                        if tx.try_send(rec).is_err() {
                            break;
                        }
                    }
                    self.conns.insert(addr, (conn, tx));
                }
            }
            Input::Msg { from, conn, msg } => {
                if self.conns.get(&from).is_some_and(|c| c.0 == conn) {
                    log.commit(log.now(), replica::Input::Message { from, msg });
                }
            }
            Input::Closed { addr, conn } => {
                if self.conns.get(&addr).is_some_and(|c| c.0 == conn) {
                    self.conns.remove(&addr);
                    log.commit(log.now(), replica::Input::Unreachable { addr });
                }
            }
            Input::Committed(e) => log.apply(e),
            Input::Forgotten => {}
            Input::Leader(leads) => {
                if leads && !log.leads() {
                    // Time goes on from the last entry's.
                    log.base = Instant::now();
                    log.at = log.replica.clock();
                    log.tick_sent = None;
                }
                log.set_leader(leads);
                if !leads {
                    // The members find the new leader (dropping the queue closes each
                    // connection once what was queued is written).
                    self.conns.clear();
                    self.pending.clear();
                }
            }
        }
    }

    /// Sends the server's messages; sending may find a member unreachable, which appends
    /// events and sends more.
    fn carry_out(&mut self) {
        loop {
            let mut any = false;
            while let Some(a) = self.log.replica.poll_output() {
                any = true;
                let Action::Send { to, msg } = a else { continue };
                self.send(to, msg);
            }
            any |= self.track_members();
            if !any {
                break;
            }
        }
    }

    fn send(&mut self, to: Addr, msg: Message) {
        let log = &mut self.log;
        let Some(c) = self.conns.get(&to) else {
            if !self.replicated {
                log.commit(log.now(), replica::Input::Unreachable { addr: to });
            } else if self.members.contains(&to) {
                // A member that has not reconnected to this (new) leader yet: kept for it
                // (the oldest dropped beyond a connection's queue: the member fetches a
                // gap); one that never comes back is found by its lease.
                let q = self.pending.entry(to).or_default();
                if q.len() >= MAX_QUEUED {
                    q.pop_front();
                }
                q.push_back(JelRecord::Msg(central::encode(&msg)));
            }
            return;
        };
        let ok = match c.1.try_send(JelRecord::Msg(central::encode(&msg))) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
        };
        if !ok {
            self.conns.remove(&to);
            log.commit(log.now(), replica::Input::Unreachable { addr: to });
        }
    }

    /// Who joined and who went since the last look: the dead are told so and their
    /// connection closed. Whether there was anything new.
    fn track_members(&mut self) -> bool {
        let server = self.log.replica.server();
        let mut any = false;
        for e in &server.log()[self.seen..] {
            match e {
                Event::Joined { id, addr } => {
                    self.addrs.insert(*id, *addr);
                    self.members.insert(*addr);
                }
                Event::Died { id } => {
                    if let Some(a) = self.addrs.remove(id) {
                        self.members.remove(&a);
                        self.pending.remove(&a);
                        if let Some((_, c)) = self.conns.remove(&a) {
                            let _ = c.try_send(JelRecord::Closed("declared dead by the registry".into()));
                        }
                    }
                }
                Event::Left { id } => {
                    if let Some(a) = self.addrs.remove(id) {
                        self.members.remove(&a);
                        self.pending.remove(&a);
                    }
                }
                Event::Elected { .. } => {}
            }
            any = true;
        }
        self.seen = server.log().len();
        any
    }

    /// An empty pool is forgotten after a while. Whether this thread ends.
    fn idle(&mut self) -> bool {
        let name = &self.name;
        let server = self.log.replica.server();
        if !server.members().is_empty() || !self.conns.is_empty() {
            self.idle_since = None;
            return false;
        }
        let since = *self.idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() < IDLE_POOL {
            return false;
        }
        self.idle_since = None;
        if let Mode::Replicated(node) = &self.log.mode {
            // Forgotten everywhere when the command is committed (if nothing came in the
            // meantime); the registry then drops this thread's channel.
            if self.log.leads() {
                let applied = self.registry.pools.lock().get(name).map(|s| s.applied);
                if let Some(applied) = applied {
                    node.propose(&Command::Forget { pool: name.clone(), applied });
                }
            }
            return false;
        }
        // Forgotten under the registry's lock, once no attach is on its way.
        let mut pools = self.registry.pools.lock();
        match self.rx.try_recv() {
            Err(std::sync::mpsc::TryRecvError::Empty) => {
                pools.remove(name);
                info!("jel registry: pool {name:?} is empty: forgotten");
                return true;
            }
            Ok(Input::Attach { addr, conn, tx }) => {
                self.conns.insert(addr, (conn, tx));
            }
            Ok(_) | Err(_) => {}
        }
        false
    }
}

/// A registry on a listener of its own (the supernode hosts one on its port instead).
#[derive(Debug)]
pub struct RegistryServer {
    pub registry: Registry,
    pub addr: SocketAddr,
    acceptor: Acceptor,
}

impl RegistryServer {
    /// Stops accepting (members already attached are served until they go).
    pub fn stop(&self) {
        self.acceptor.stop();
    }
}

/// Serves a registry on `listener`: every connection authenticated by the grid secret (the
/// Noise handshake), at most [`net::MAX_PENDING`] still in their handshake.
pub fn serve(listener: TcpListener, secret: GridSecret) -> std::io::Result<RegistryServer> {
    let addr = listener.local_addr()?;
    let registry = Registry::new();
    let r = registry.clone();
    let acceptor = net::accept_loop(listener, secret, "jel-registry", move |mut conn, peer| {
        let _ = conn.set_read_timeout(Some(net::OPEN_TIMEOUT));
        match conn.recv::<SnRequest>() {
            Ok(Some(SnRequest::Jel(hello))) => r.serve_conn(conn, hello),
            Ok(Some(SnRequest::JelSeeds { pool, addr })) => {
                let _ = conn.send(&SnResponse::JelSeeds(r.seeds(&pool, addr)));
            }
            Ok(Some(_)) => debug!("jel registry: {peer} sent a request that is not for a pool: closed"),
            Ok(None) => {}
            Err(e) => debug!("jel registry: {peer}: {e}"),
        }
    });
    Ok(RegistryServer { registry, addr, acceptor })
}
