//! # p2pmpi-jel — resource tracking for any program (JEL, SPEC §14)
//!
//! A *pool* is the set of processes of one computation. A member [joins](Pool::join) and is
//! told, as [`Notice`]s, every member that joined (every earlier one too, itself included),
//! every one that left and every one that died; it may report a suspicion
//! ([`Pool::maybe_dead`]); it may stand in an election ([`Pool::elect`], the winner is
//! returned) or ask who won ([`Pool::get_election_result`], with a time-out); a winner that
//! leaves or dies is replaced by the next candidate, told to every member as a new
//! `Elected`. Events arrive through a channel ([`Pool::events`], an iterator too) or a
//! callback ([`Pool::join_with`]). The consistency is chosen when joining
//! ([`Consistency`]: reliable or unreliable joins, uniform or non-uniform elections, either
//! part switched off with `None`).
//!
//! ```no_run
//! use p2pmpi_jel::{Event, GridSecret, Notice, Options, Pool};
//! # fn main() -> Result<(), p2pmpi_jel::Error> {
//! let secret = GridSecret::from_phrase("the grid secret");
//! let pool = Pool::join(Options::central("workers", secret, "10.0.0.1:9700".parse().unwrap()))?;
//! let master = pool.elect("master", std::time::Duration::from_secs(10))?;
//! for n in pool.events() {
//!     match n {
//!         Notice::Event(Event::Died { id }) => println!("{id:016x} died"),
//!         Notice::Event(e) => println!("{e}"),
//!         Notice::RegistryLost(_) | Notice::Excluded => break,
//!     }
//! }
//! # let _ = master; Ok(()) }
//! ```
//!
//! # Implementations
//!
//! This crate is a thin driver of the pure cores of `p2pmpi_core::jel`: it owns the sockets,
//! the clock and the threads, and passes the time and the messages in.
//!
//! * **Central** ([`Implementation::Central`]): a registry ([`registry`]; the supernode hosts
//!   one on its own port, [`registry::serve`] runs one anywhere) orders every change of a
//!   pool into one numbered stream, disseminated by one of the five strategies of
//!   [`central::Dissemination`]. Reliable joins and uniform elections. A member's connection
//!   to the registry is also its lease: when it ends without a leave (a `kill -9`) the
//!   member is declared dead at once; a silent member is pinged, then declared dead. The
//!   registry's own death (its connection ends) is told to every member as one
//!   [`Notice::RegistryLost`]; the member then stops. The supernodes of a grid that has
//!   several replicate the registry with Raft ([`consensus`]): a member given them all
//!   ([`Options::registries`]) follows the leader when one dies, and is told
//!   `RegistryLost` only once none answers.
//! * **Distributed** ([`Implementation::Distributed`]): no server; members gossip over a
//!   peer-sampling service, bootstrapping from the addresses given; deaths are pronounced
//!   after enough witnesses. Unreliable joins and non-uniform elections only (asking for
//!   more is [`Error::Unsupported`]).
//!
//! # Connections and authentication
//!
//! Every connection — member to registry, member to member — is the grid's control channel
//! ([`p2pmpi_wire::secure`]): a Noise `NNpsk0` handshake whose pre-shared key is derived
//! from the grid secret, then records encrypted and authenticated with ChaCha20-Poly1305.
//! A side without the secret cannot complete the handshake, nor read, forge or replay a
//! record; the secret never travels. The first record is a [`JelHello`] (the pool and the
//! sender's listening address, which is its identity in the cores), then each record is one
//! core message in the core's compact encoding; a record that does not decode closes its
//! connection, and the listener keeps serving. An accept loop lets at most
//! [`net::MAX_PENDING`] connections sit in their handshake (a newer one pushes the oldest
//! out, each has [`net::OPEN_TIMEOUT`] at most), so a client without the secret cannot hold
//! a registry or a member busy.
//!
//! # Why threads
//!
//! The grid's secure channel is blocking (`std::net` with deadlines), and a pool's member
//! holds a handful of connections (the registry, a few peers), so each connection gets a
//! reader thread and a writer thread with a bounded queue (a peer that does not read is
//! dropped, it never blocks the driver), and the core gets a thread of its own fed by one
//! channel — no async runtime, and no second, non-blocking implementation of the Noise
//! framing for `mio`. A registry serving hundreds of members runs two small-stack threads
//! per member, which Linux handles easily; tens of thousands would call for `mio`.
#![forbid(unsafe_code)]

pub mod consensus;
mod member;
pub mod net;
pub mod registry;

pub use p2pmpi_core::jel::{
    central, distributed, Addr, Consistency, Elections, Event, JoinLeave, MemberId, PartOff, Unsupported,
};
pub use p2pmpi_wire::grid::JelHello;
pub use p2pmpi_wire::secure::GridSecret;

use member::{Core, Driver, Sink};
use p2pmpi_wire::grid::{JelRecord, SnRequest, SnResponse};
use p2pmpi_wire::secure::SecureConn;
use std::fmt;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::mpsc::{Receiver, Sender};
use std::time::Duration;

/// What a member is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A change of the pool.
    Event(Event),
    /// The registry at this address is gone (central): the member stopped.
    RegistryLost(Addr),
    /// The others declared this member dead: it stopped.
    Excluded,
}

impl fmt::Display for Notice {
    /// The command line's lines: `joined ID ADDR`, `left ID`, `died ID`, `elected NAME ID`,
    /// `registry-lost ADDR`, `excluded`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::Event(e) => e.fmt(f),
            Notice::RegistryLost(a) => write!(f, "registry-lost {a}"),
            Notice::Excluded => f.write_str("excluded"),
        }
    }
}

/// Which implementation, and its parameters.
#[derive(Debug, Clone)]
pub enum Implementation {
    /// Through the registry at `registry` (a supernode's address, or [`registry::serve`]'s).
    /// `config` creates the pool if this member is its first; a pool that exists must use
    /// the same dissemination strategy.
    Central { registry: SocketAddr, config: central::Config },
    /// Among the members, starting from any of `bootstrap` (empty for the first member)
    /// and, with a `rendezvous` (a supernode or registry), from the last members that
    /// joined through it (this member is added to them).
    Distributed { bootstrap: Vec<SocketAddr>, rendezvous: Option<SocketAddr>, config: distributed::Config },
}

/// How to join.
#[derive(Debug, Clone)]
pub struct Options {
    pub pool: String,
    pub secret: GridSecret,
    pub implementation: Implementation,
    pub consistency: Consistency,
    /// Where this member listens (port 0: any). An unspecified IP listens on every address
    /// and advertises the one that reaches the registry (or the first bootstrap address);
    /// a specific IP is also the one its connections leave from.
    pub bind: SocketAddr,
    /// (central) The other supernodes of a registry replicated among several (the grid's
    /// `SUPERNODE` list): when the connection to the registry is lost, the member finds the
    /// one that leads now among these and goes on; [`Notice::RegistryLost`] only once none
    /// answers. Empty: the registry of [`Implementation::Central`] alone.
    pub registries: Vec<SocketAddr>,
    /// How long [`Pool::join`] waits for the pool's state.
    pub join_timeout: Duration,
    pub connect_timeout: Duration,
}

impl Options {
    /// The central implementation through `registry`, tree dissemination, reliable joins and
    /// uniform elections.
    pub fn central(pool: &str, secret: GridSecret, registry: SocketAddr) -> Options {
        Options {
            pool: pool.to_string(),
            secret,
            implementation: Implementation::Central { registry, config: central::Config::default() },
            consistency: Consistency::STRONG,
            bind: SocketAddr::from(([0, 0, 0, 0], 0)),
            registries: Vec::new(),
            join_timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(5),
        }
    }

    /// The distributed implementation from `bootstrap`, unreliable joins and non-uniform
    /// elections.
    pub fn distributed(pool: &str, secret: GridSecret, bootstrap: Vec<SocketAddr>) -> Options {
        Options {
            implementation: Implementation::Distributed {
                bootstrap,
                rendezvous: None,
                config: distributed::Config::default(),
            },
            consistency: Consistency::WEAK,
            ..Options::central(pool, secret, SocketAddr::from(([127, 0, 0, 1], 0)))
        }
    }

    pub fn with_bind(mut self, bind: SocketAddr) -> Options {
        self.bind = bind;
        self
    }

    /// The other supernodes of a replicated registry ([`Options::registries`]).
    pub fn with_registries(mut self, registries: Vec<SocketAddr>) -> Options {
        self.registries = registries;
        self
    }

    pub fn with_consistency(mut self, c: Consistency) -> Options {
        self.consistency = c;
        self
    }
}

/// Errors of the pool's calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot join pool {pool:?}: {why}")]
    Join { pool: String, why: String },
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    #[error(transparent)]
    PartOff(#[from] PartOff),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("this member is no longer in the pool")]
    Gone,
    #[error("pool {0:?}: {1}")]
    Registry(String, String),
}

/// What a driver's thread receives.
pub(crate) enum Input<M> {
    /// A message of the core from the member listening at `from`.
    Msg {
        from: Addr,
        msg: M,
    },
    /// The connection `conn` to `addr` could not be opened or written.
    Unreachable {
        addr: Addr,
        conn: u64,
        why: String,
    },
    /// The connection `conn` to `addr` ended.
    Closed {
        addr: Addr,
        conn: u64,
        why: String,
    },
    /// The connection `conn` to another member could not be opened for a reason that says
    /// nothing sure of it (no thread here, a time-out, a handshake cut short): its messages
    /// are lost, the peer is not suspected.
    Dropped {
        addr: Addr,
        conn: u64,
    },
    /// The connection `conn` to the registry attached, at the supernode `at`.
    Attached {
        conn: u64,
        at: Addr,
    },
    /// The registry's last word before closing.
    Told {
        from: Addr,
        why: String,
    },
    Cmd(Cmd),
}

pub(crate) type Reply = Sender<Result<Option<MemberId>, PartOff>>;

/// The application's calls.
pub(crate) enum Cmd {
    Leave(Sender<()>),
    MaybeDead(MemberId),
    Elect(String, Reply),
    GetElection(String, Duration, Reply),
    Members(Sender<Vec<(MemberId, Addr)>>),
}

/// A member of a pool. Dropping it leaves the pool gracefully.
pub struct Pool {
    id: MemberId,
    addr: Addr,
    pool: String,
    send: Box<dyn Fn(Cmd) -> bool + Send + Sync>,
    events: Receiver<Notice>,
    left: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool").field("pool", &self.pool).field("id", &self.id).field("addr", &self.addr).finish()
    }
}

/// A fresh random member id (never 0).
fn random_id() -> std::io::Result<MemberId> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(u64::from_le_bytes(b).max(1))
}

/// The local address that reaches `to` (no packet is sent).
fn local_ip_towards(to: SocketAddr) -> IpAddr {
    let any: SocketAddr =
        if to.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() };
    std::net::UdpSocket::bind(any)
        .and_then(|s| {
            s.connect(to)?;
            s.local_addr()
        })
        .map(|a| a.ip())
        .unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

impl Pool {
    /// Joins a pool; returns once this member holds the pool's state (its own `Joined`, and
    /// every earlier one, are then among its events).
    pub fn join(opts: Options) -> Result<Pool, Error> {
        let (tx, rx) = std::sync::mpsc::channel();
        Pool::start(opts, Sink::Channel(tx), rx)
    }

    /// [`Pool::join`], the events passed to `callback` (on the driver's thread: it should
    /// not block) rather than to [`Pool::events`].
    pub fn join_with(opts: Options, callback: impl FnMut(Notice) + Send + 'static) -> Result<Pool, Error> {
        let (_, rx) = std::sync::mpsc::channel();
        Pool::start(opts, Sink::Callback(Box::new(callback)), rx)
    }

    fn start(opts: Options, sink: Sink, events: Receiver<Notice>) -> Result<Pool, Error> {
        let target = match &opts.implementation {
            Implementation::Central { registry, .. } => Some(*registry),
            Implementation::Distributed { bootstrap, rendezvous, .. } => {
                bootstrap.first().or(rendezvous.as_ref()).copied()
            }
        };
        let listener = TcpListener::bind(opts.bind)?;
        let mut addr = listener.local_addr()?;
        let local = (!opts.bind.ip().is_unspecified()).then_some(opts.bind.ip());
        if addr.ip().is_unspecified() {
            addr.set_ip(target.map_or(IpAddr::from([127, 0, 0, 1]), local_ip_towards));
        }
        let id = random_id()?;
        let mut seed = [0u8; 8];
        getrandom::fill(&mut seed).map_err(|e| std::io::Error::other(e.to_string()))?;
        let seed = u64::from_le_bytes(seed);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let send = match opts.implementation.clone() {
            Implementation::Central { registry, config } => {
                let core = central::Client::new(id, addr, registry, config, opts.consistency, seed);
                Pool::drive(core, &opts, addr, Some(registry), Some(config), local, listener, sink, ready_tx)
            }
            Implementation::Distributed { mut bootstrap, rendezvous, config } => {
                if let Some(r) = rendezvous {
                    for a in seeds_from(local, r, &opts.secret, &opts.pool, Some(addr), opts.connect_timeout)? {
                        if a != addr && !bootstrap.contains(&a) {
                            bootstrap.push(a);
                        }
                    }
                }
                let core = distributed::Node::new(id, addr, bootstrap, config, opts.consistency, seed)?;
                Pool::drive(core, &opts, addr, None, None, local, listener, sink, ready_tx)
            }
        };
        let pool =
            Pool { id, addr, pool: opts.pool.clone(), send, events, left: std::sync::atomic::AtomicBool::new(false) };
        match ready_rx.recv_timeout(opts.join_timeout) {
            Ok(Ok(())) => Ok(pool),
            Ok(Err(why)) => {
                pool.left.store(true, std::sync::atomic::Ordering::SeqCst);
                Err(Error::Join { pool: opts.pool, why })
            }
            Err(_) => {
                pool.leave();
                Err(Error::Join { pool: opts.pool, why: format!("no answer within {:?}", opts.join_timeout) })
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn drive<C: Core>(
        core: C,
        opts: &Options,
        me: Addr,
        registry: Option<Addr>,
        central_cfg: Option<central::Config>,
        local: Option<IpAddr>,
        listener: TcpListener,
        sink: Sink,
        ready: Sender<Result<(), String>>,
    ) -> Box<dyn Fn(Cmd) -> bool + Send + Sync> {
        let (tx, rx) = std::sync::mpsc::channel::<Input<C::Msg>>();
        let itx = tx.clone();
        let pool = opts.pool.clone();
        let acceptor = net::accept_loop(listener, opts.secret.clone(), "jel-member", move |mut conn, _peer| {
            let _ = conn.set_read_timeout(Some(net::OPEN_TIMEOUT));
            let Ok(Some(hello)) = conn.recv::<JelHello>() else { return };
            if hello.pool != pool {
                return;
            }
            let _ = conn.set_read_timeout(None);
            let (mut reader, _writer) = conn.split();
            let why = net::read_messages(&mut reader, hello.addr, C::decode, &itx);
            tracing::debug!("jel: connection from {} ended: {why}", hello.addr);
        });
        let mut registries: Vec<Addr> = registry.into_iter().collect();
        for r in &opts.registries {
            if !registries.contains(r) {
                registries.push(*r);
            }
        }
        let driver = Driver::new(
            core,
            opts.pool.clone(),
            me,
            registry,
            registries,
            central_cfg,
            opts.secret.clone(),
            local,
            opts.connect_timeout,
            (tx.clone(), rx),
            sink,
            ready,
            acceptor,
        );
        std::thread::Builder::new()
            .name("jel-member".into())
            .spawn(move || driver.run())
            .expect("cannot start the pool's thread");
        Box::new(move |cmd| tx.send(Input::Cmd(cmd)).is_ok())
    }

    /// This member's id.
    pub fn id(&self) -> MemberId {
        self.id
    }

    /// Where it listens (the address the others are told).
    pub fn addr(&self) -> Addr {
        self.addr
    }

    /// The events (joined with [`Pool::join`]; with [`Pool::join_with`] nothing comes here).
    /// The channel ends when the member stopped (it left, was excluded, lost its registry).
    pub fn events(&self) -> &Receiver<Notice> {
        &self.events
    }

    /// Leaves gracefully; returns once the leave is written (at most a few seconds).
    /// Later calls do nothing.
    pub fn leave(&self) {
        if self.left.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        if (self.send)(Cmd::Leave(tx)) {
            let _ = rx.recv_timeout(member::LEAVE_FLUSH + Duration::from_secs(1));
        }
    }

    /// Reports that `suspect` may be dead (central: the registry pings it; distributed: this
    /// member probes it).
    pub fn maybe_dead(&self, suspect: MemberId) {
        (self.send)(Cmd::MaybeDead(suspect));
    }

    /// Stands in the election `name`; returns its winner (this member or an earlier one).
    pub fn elect(&self, name: &str, timeout: Duration) -> Result<MemberId, Error> {
        let (tx, rx) = std::sync::mpsc::channel();
        if !(self.send)(Cmd::Elect(name.to_string(), tx)) {
            return Err(Error::Gone);
        }
        match rx.recv_timeout(timeout) {
            Ok(Ok(Some(w))) => Ok(w),
            Ok(Ok(None)) => Err(Error::Gone),
            Ok(Err(e)) => Err(e.into()),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(Error::Timeout(timeout)),
            Err(_) => Err(Error::Gone),
        }
    }

    /// The winner of `name`, without standing: `None` if none is known within `timeout`.
    pub fn get_election_result(&self, name: &str, timeout: Duration) -> Result<Option<MemberId>, Error> {
        let (tx, rx) = std::sync::mpsc::channel();
        if !(self.send)(Cmd::GetElection(name.to_string(), timeout, tx)) {
            return Err(Error::Gone);
        }
        match rx.recv_timeout(timeout + Duration::from_secs(1)) {
            Ok(Ok(w)) => Ok(w),
            Ok(Err(e)) => Err(e.into()),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(_) => Err(Error::Gone),
        }
    }

    /// The members this member knows alive, in join order (central).
    pub fn members(&self) -> Vec<(MemberId, Addr)> {
        let (tx, rx) = std::sync::mpsc::channel();
        if !(self.send)(Cmd::Members(tx)) {
            return Vec::new();
        }
        rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.leave();
    }
}

/// The members of `pool` as its registry knows them, in join order (a command that only
/// asks: it does not join). A pool nobody joined has no member.
pub fn list(
    registry: SocketAddr,
    secret: &GridSecret,
    pool: &str,
    timeout: Duration,
) -> Result<Vec<(MemberId, Addr)>, Error> {
    list_from(&[registry], secret, pool, timeout)
}

/// [`list`] from a registry replicated among the supernodes `registries`: the leader is
/// found (a follower names it), within `timeout`.
pub fn list_from(
    registries: &[SocketAddr],
    secret: &GridSecret,
    pool: &str,
    timeout: Duration,
) -> Result<Vec<(MemberId, Addr)>, Error> {
    let deadline = std::time::Instant::now() + timeout;
    let mut last = Error::Registry(pool.into(), "no registry address".into());
    let mut queue: std::collections::VecDeque<SocketAddr> = registries.iter().copied().collect();
    let mut asked = 0;
    while let Some(r) = queue.pop_front() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || asked > 4 * registries.len() + 4 {
            break;
        }
        asked += 1;
        match list_at(r, secret, pool, left) {
            Ok(Listed::Members(m)) => return Ok(m),
            Ok(Listed::NotLeader(l)) => {
                last = Error::Registry(pool.into(), format!("{r} does not lead the registry"));
                match l {
                    Some(l) => queue.push_front(l),
                    None => {
                        // An election: ask again a little later.
                        std::thread::sleep(Duration::from_millis(200).min(left));
                        queue.push_back(r);
                    }
                }
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

enum Listed {
    Members(Vec<(MemberId, Addr)>),
    NotLeader(Option<SocketAddr>),
}

fn list_at(registry: SocketAddr, secret: &GridSecret, pool: &str, timeout: Duration) -> Result<Listed, Error> {
    let mut c =
        SecureConn::connect(registry, secret, timeout).map_err(|e| Error::Registry(pool.into(), e.to_string()))?;
    c.set_max_record(net::MAX_RECORD);
    c.set_read_timeout(Some(timeout))?;
    let me = c.local_addr()?;
    let err = |e: p2pmpi_wire::secure::SecureError| Error::Registry(pool.into(), e.to_string());
    c.send(&SnRequest::Jel(JelHello { pool: pool.to_string(), addr: me, config: None })).map_err(err)?;
    match c.recv::<JelRecord>().map_err(err)? {
        Some(JelRecord::Attached(Ok(()))) => {}
        Some(JelRecord::Attached(Err(_))) => return Ok(Listed::Members(Vec::new())),
        Some(JelRecord::NotLeader(l)) => return Ok(Listed::NotLeader(l)),
        _ => return Err(Error::Registry(pool.into(), "unexpected answer".into())),
    }
    c.send(&JelRecord::Msg(central::encode(&central::Message::BootstrapReq))).map_err(err)?;
    loop {
        match c.recv::<JelRecord>().map_err(err)? {
            Some(JelRecord::Msg(b)) => {
                if let Ok(central::Message::Snapshot(s)) = central::decode(&b) {
                    return Ok(Listed::Members(s.members));
                }
            }
            _ => return Err(Error::Registry(pool.into(), "the registry closed the connection".into())),
        }
    }
}

/// Asks members of the distributed pool `pool` for the members they believe alive, without
/// joining: the members at `seeds` are tried in turn (each within what is left of
/// `timeout`), and the first answer is returned, by id. The asker listens on a port of its
/// own, sends `JelHello` and [`distributed::Message::ListReq`] on an authenticated
/// connection, and the member's core answers [`distributed::Message::List`] on the member's
/// own connection back (the way members answer each other); that connection must prove the
/// grid secret and greet for `pool`, anything else is closed. `Ok(None)`: nobody answered.
pub fn list_distributed(
    seeds: &[SocketAddr],
    secret: &GridSecret,
    pool: &str,
    timeout: Duration,
) -> Result<Option<Vec<(MemberId, Addr)>>, Error> {
    let deadline = std::time::Instant::now() + timeout;
    for &seed in seeds {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        match ask_view(seed, secret, pool, left) {
            Ok(v) => return Ok(Some(v)),
            Err(e) => tracing::debug!("jel list: {seed}: {e}"),
        }
    }
    Ok(None)
}

fn ask_view(
    seed: SocketAddr,
    secret: &GridSecret,
    pool: &str,
    timeout: Duration,
) -> Result<Vec<(MemberId, Addr)>, String> {
    let deadline = std::time::Instant::now() + timeout;
    let mut c = SecureConn::connect(seed, secret, timeout).map_err(|e| e.to_string())?;
    let ip = c.local_addr().map_err(|e| e.to_string())?.ip();
    let listener = TcpListener::bind((ip, 0)).map_err(|e| e.to_string())?;
    let me = listener.local_addr().map_err(|e| e.to_string())?;
    c.send(&JelHello { pool: pool.to_string(), addr: me, config: None }).map_err(|e| e.to_string())?;
    c.send(&JelRecord::Msg(distributed::encode(&distributed::Message::ListReq))).map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err("no answer".into());
        }
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // The listener is ours alone and lives for this one answer.
                std::thread::sleep(Duration::from_millis(5).min(left));
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        let _ = stream.set_nonblocking(false);
        // Proven by its first record (the hello), not by the handshake alone: a replayed
        // handshake never gets that far.
        let open = left.min(net::OPEN_TIMEOUT);
        let proof_by = std::time::Instant::now() + open;
        let Ok(mut a) = SecureConn::accept(stream, secret, open) else { continue };
        a.set_max_record(net::MAX_RECORD);
        if a.await_proof(proof_by).is_err() {
            continue;
        }
        if a.set_read_timeout(Some(left)).is_err() {
            continue;
        }
        match a.recv::<JelHello>() {
            Ok(Some(h)) if h.pool == pool => {}
            _ => continue,
        }
        while let Ok(Some(JelRecord::Msg(b))) = a.recv::<JelRecord>() {
            if let Ok(distributed::Message::List { members }) = distributed::decode(&b) {
                return Ok(members);
            }
        }
    }
}

/// Asks the rendezvous at `registry` for the last members of the distributed pool `pool`
/// (most recent first); `me`, if given, is added to them.
pub fn seeds(
    registry: SocketAddr,
    secret: &GridSecret,
    pool: &str,
    me: Option<SocketAddr>,
    timeout: Duration,
) -> Result<Vec<SocketAddr>, Error> {
    seeds_from(None, registry, secret, pool, me, timeout)
}

/// [`seeds`] from the local address `local` (a member speaks from its own address: the
/// registry's limits per address then count it alone).
fn seeds_from(
    local: Option<IpAddr>,
    registry: SocketAddr,
    secret: &GridSecret,
    pool: &str,
    me: Option<SocketAddr>,
    timeout: Duration,
) -> Result<Vec<SocketAddr>, Error> {
    let err = |e: p2pmpi_wire::secure::SecureError| Error::Registry(pool.into(), e.to_string());
    let mut c = SecureConn::connect_from(local, registry, secret, timeout).map_err(err)?;
    c.set_read_timeout(Some(timeout))?;
    match c.call::<_, SnResponse>(&SnRequest::JelSeeds { pool: pool.to_string(), addr: me }).map_err(err)? {
        SnResponse::JelSeeds(v) => Ok(v),
        other => Err(Error::Registry(pool.into(), format!("unexpected answer {other:?}"))),
    }
}

/// Binds a registry of its own on `addr` (see [`registry::serve`]).
pub fn serve_registry(addr: SocketAddr, secret: GridSecret) -> Result<registry::RegistryServer, Error> {
    Ok(registry::serve(TcpListener::bind(addr)?, secret)?)
}
