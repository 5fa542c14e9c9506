//! The central registry's driver: one [`central::Server`] per pool, each on a thread of its
//! own, fed by the members' connections — through the pool's input log: the server is a
//! [`Replica`] fed each input as a committed entry (at once here; the seam where a log
//! replicated among several supernodes goes).
//!
//! A member's connection opens with [`SnRequest::Jel`] (the supernode hands such a
//! connection to its [`Registry`]; [`serve`] runs a registry on a listener of its own). The
//! registry answers [`JelRecord::Attached`], then the connection carries the core's messages
//! both ways: the server's messages to a member go on that member's own connection (the
//! registry opens none). A connection that ends without the member's `Leave` is a death
//! (`on_unreachable`: a `kill -9` is told at once); a member the core declares dead (its
//! lease ran out and it did not answer the ping) is told so ([`JelRecord::Closed`]) and its
//! connection closed. A record that does not decode closes its connection, nothing else.

use crate::net::{self, Acceptor, MAX_QUEUED};
use p2pmpi_core::jel::central::{self, Dissemination, Message};
use p2pmpi_core::jel::replica::{self, Replica};
use p2pmpi_core::jel::{Action, Addr, Event, MemberId};
use p2pmpi_wire::grid::{JelHello, JelRecord, SnRequest, SnResponse};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info};

enum Input {
    Attach { addr: Addr, conn: u64, tx: SyncSender<JelRecord> },
    Msg { from: Addr, conn: u64, msg: Message },
    Closed { addr: Addr, conn: u64 },
}

struct Slot {
    tx: Sender<Input>,
    dissemination: Dissemination,
}

/// The registry of every pool, shared by the connections' threads.
#[derive(Clone, Default)]
pub struct Registry {
    pools: Arc<Mutex<HashMap<String, Slot>>>,
    /// Distributed pools: the last members that asked for seeds.
    seeds: Arc<Mutex<HashMap<String, VecDeque<Addr>>>>,
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
        let (tx, rx) = std::sync::mpsc::channel();
        let mut seed = [0u8; 8];
        getrandom::fill(&mut seed).map_err(|e| e.to_string())?;
        let (name, registry) = (hello.pool.clone(), self.clone());
        let ok = net::spawn("jel-pool", move || run_pool(registry, name, cfg, u64::from_le_bytes(seed), rx));
        if !ok {
            return Err("cannot start a thread".into());
        }
        info!("jel registry: pool {:?} created ({} dissemination)", hello.pool, cfg.dissemination);
        pools.insert(hello.pool.clone(), Slot { tx: tx.clone(), dissemination: cfg.dissemination });
        Ok(tx)
    }
}

/// A pool's input log, committed here at once (a single registry). The pool's server is a
/// [`Replica`] fed the committed entries, as every supernode's would be with the log
/// replicated by Raft among several (docs/jel.md, "Several supernodes"): this is the seam
/// where a consensus log goes.
struct LocalLog {
    replica: Replica,
    index: u64,
}

impl LocalLog {
    fn commit(&mut self, now: Duration, input: replica::Input) {
        let e = self.replica.stamp(now, input);
        self.index += 1;
        let applied = self.replica.apply(self.index, &e);
        debug_assert!(applied, "entries are committed in order");
    }
}

fn run_pool(registry: Registry, name: String, cfg: central::Config, seed: u64, rx: Receiver<Input>) {
    let start = Instant::now();
    let mut replica = Replica::new(cfg, seed);
    replica.set_leader(true);
    let mut log = LocalLog { replica, index: 0 };
    log.commit(Duration::ZERO, replica::Input::Start);
    let mut conns: HashMap<Addr, (u64, SyncSender<JelRecord>)> = HashMap::new();
    let mut addrs: HashMap<MemberId, Addr> = HashMap::new();
    let mut seen = 0usize;
    let mut idle_since: Option<Instant> = None;
    loop {
        let now = start.elapsed();
        let wait = log
            .replica
            .next_deadline()
            .map_or(Duration::from_secs(1), |d| d.saturating_sub(now))
            .min(Duration::from_secs(1));
        match rx.recv_timeout(wait) {
            Ok(Input::Attach { addr, conn, tx }) => {
                // A newer connection from the same address replaces the older one.
                conns.insert(addr, (conn, tx));
            }
            Ok(Input::Msg { from, conn, msg }) => {
                if conns.get(&from).is_some_and(|c| c.0 == conn) {
                    log.commit(start.elapsed(), replica::Input::Message { from, msg });
                }
            }
            Ok(Input::Closed { addr, conn }) => {
                if conns.get(&addr).is_some_and(|c| c.0 == conn) {
                    conns.remove(&addr);
                    log.commit(start.elapsed(), replica::Input::Unreachable { addr });
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if let Some(tick) = log.replica.due(start.elapsed()) {
            log.commit(tick.now, tick.input);
        }
        // Sending may find a member unreachable, which appends events and sends more.
        loop {
            let mut any = false;
            while let Some(a) = log.replica.poll_action() {
                any = true;
                let Action::Send { to, msg } = a else { continue };
                let ok = conns.get(&to).is_some_and(|c| match c.1.try_send(JelRecord::Msg(central::encode(&msg))) {
                    Ok(()) => true,
                    Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
                });
                if !ok {
                    conns.remove(&to);
                    log.commit(start.elapsed(), replica::Input::Unreachable { addr: to });
                }
            }
            // Who joined and who went: the dead are told so and their connection closed.
            let server = log.replica.server();
            for e in &server.log()[seen..] {
                match e {
                    Event::Joined { id, addr } => {
                        addrs.insert(*id, *addr);
                    }
                    Event::Died { id } => {
                        if let Some(a) = addrs.remove(id) {
                            if let Some((_, c)) = conns.remove(&a) {
                                let _ = c.try_send(JelRecord::Closed("declared dead by the registry".into()));
                            }
                        }
                    }
                    Event::Left { id } => {
                        addrs.remove(id);
                    }
                    Event::Elected { .. } => {}
                }
                any = true;
            }
            seen = server.log().len();
            if !any {
                break;
            }
        }
        let server = log.replica.server();
        if server.members().is_empty() && conns.is_empty() {
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= IDLE_POOL {
                // Forgotten under the registry's lock, once no attach is on its way.
                let mut pools = registry.pools.lock();
                match rx.try_recv() {
                    Err(std::sync::mpsc::TryRecvError::Empty) => {
                        pools.remove(&name);
                        info!("jel registry: pool {name:?} is empty: forgotten");
                        return;
                    }
                    Ok(Input::Attach { addr, conn, tx }) => {
                        conns.insert(addr, (conn, tx));
                    }
                    Ok(_) | Err(_) => {}
                }
                idle_since = None;
            }
        } else {
            idle_since = None;
        }
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
