//! A member's driver: one thread owning the core ([`central::Client`] or
//! [`distributed::Node`]), fed by the connections' threads and the application's commands
//! through one channel, ticked at the core's deadlines.

use crate::net::{self, Acceptor, Opening, Outbound};
use crate::{Cmd, Input, Notice, Reply};

type Channel<M> = (Sender<Input<M>>, Receiver<Input<M>>);
use p2pmpi_core::jel::{central, distributed, Action, Addr, DecodeError, Input as CoreInput, MemberId, PartOff};
use p2pmpi_core::machine::Machine;
use p2pmpi_wire::grid::{JelHello, JelRecord};
use p2pmpi_wire::secure::GridSecret;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TrySendError};
use std::time::{Duration, Instant};
use tracing::debug;

/// What the driver needs of a core besides the [`Machine`] every core is (both member cores
/// have this shape; see `p2pmpi_core::jel`).
pub(crate) trait Core:
    Machine<Input = CoreInput<Self::Msg>, Output = Action<Self::Msg>, Rejected = PartOff> + Send + 'static
{
    type Msg: Send + 'static;
    fn encode(msg: &Self::Msg) -> Vec<u8>;
    fn decode(bytes: &[u8]) -> Result<Self::Msg, DecodeError>;
    fn members(&self) -> Vec<(MemberId, Addr)>;
    /// It holds the pool's state (the join is complete).
    fn ready(&self) -> bool;
    /// The others declared it dead.
    fn excluded(&self) -> bool;
}

impl Core for central::Client {
    type Msg = central::Message;
    fn encode(msg: &Self::Msg) -> Vec<u8> {
        central::encode(msg)
    }
    fn decode(bytes: &[u8]) -> Result<Self::Msg, DecodeError> {
        central::decode(bytes)
    }
    fn members(&self) -> Vec<(MemberId, Addr)> {
        central::Client::members(self).collect()
    }
    fn ready(&self) -> bool {
        matches!(self.phase(), central::Phase::Member | central::Phase::Left)
    }
    fn excluded(&self) -> bool {
        *self.phase() == central::Phase::Excluded
    }
}

impl Core for distributed::Node {
    type Msg = distributed::Message;
    fn encode(msg: &Self::Msg) -> Vec<u8> {
        distributed::encode(msg)
    }
    fn decode(bytes: &[u8]) -> Result<Self::Msg, DecodeError> {
        distributed::decode(bytes)
    }
    fn members(&self) -> Vec<(MemberId, Addr)> {
        distributed::Node::members(self).collect()
    }
    fn ready(&self) -> bool {
        true
    }
    fn excluded(&self) -> bool {
        self.is_gone()
    }
}

/// Where the events go.
pub(crate) enum Sink {
    Channel(Sender<Notice>),
    Callback(Box<dyn FnMut(Notice) + Send>),
}

impl Sink {
    fn put(&mut self, n: Notice) {
        match self {
            Sink::Channel(tx) => {
                let _ = tx.send(n);
            }
            Sink::Callback(f) => f(n),
        }
    }
}

/// How long a leave waits for its messages to be written, at most.
pub(crate) const LEAVE_FLUSH: Duration = Duration::from_secs(3);

pub(crate) struct Driver<C: Core> {
    pub core: C,
    pub pool: String,
    pub me: Addr,
    /// The registry (central), as the core knows it (its messages come from this address,
    /// whichever supernode serves them): its connection's end is the registry's death —
    /// unless it is replicated: then the member reconnects to the supernode that leads.
    pub registry: Option<Addr>,
    /// Where the registry is served: `registry` first, then the other supernodes of a
    /// replicated registry.
    registries: Vec<Addr>,
    /// The supernode that served the last connection (tried first by the next).
    prefer: Addr,
    /// The connection to the registry that attached (a reconnection follows its end).
    attached: Option<u64>,
    pub central_cfg: Option<central::Config>,
    pub secret: GridSecret,
    pub local: Option<IpAddr>,
    pub connect_timeout: Duration,
    pub rx: Receiver<Input<C::Msg>>,
    pub tx: Sender<Input<C::Msg>>,
    pub sink: Sink,
    pub ready: Option<Sender<Result<(), String>>>,
    pub acceptor: Acceptor,
    start: Instant,
    out: HashMap<Addr, Outbound>,
    done_tx: Option<Sender<()>>,
    done_rx: Option<Receiver<()>>,
    elect_waits: HashMap<String, Vec<Reply>>,
    get_waits: HashMap<String, Vec<Reply>>,
    left: bool,
    stopped: bool,
    /// Messages sent so far (the connections' clock for closing the least recently used).
    uses: u64,
}

impl<C: Core> Driver<C> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        core: C,
        pool: String,
        me: Addr,
        registry: Option<Addr>,
        registries: Vec<Addr>,
        central_cfg: Option<central::Config>,
        secret: GridSecret,
        local: Option<IpAddr>,
        connect_timeout: Duration,
        (tx, rx): Channel<C::Msg>,
        sink: Sink,
        ready: Sender<Result<(), String>>,
        acceptor: Acceptor,
    ) -> Self {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        Driver {
            core,
            pool,
            me,
            registry,
            prefer: registries.first().copied().unwrap_or(me),
            registries,
            attached: None,
            central_cfg,
            secret,
            local,
            connect_timeout,
            rx,
            tx,
            sink,
            ready: Some(ready),
            acceptor,
            start: Instant::now(),
            out: HashMap::new(),
            done_tx: Some(done_tx),
            done_rx: Some(done_rx),
            elect_waits: HashMap::new(),
            get_waits: HashMap::new(),
            left: false,
            stopped: false,
            uses: 0,
        }
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Feeds the core one input that it cannot refuse (not an election request).
    fn feed(&mut self, now: Duration, input: CoreInput<C::Msg>) {
        // Only an election request is refused (elections switched off).
        let _ = self.core.handle_input(now, input);
    }

    /// Runs until the member left, was excluded, or lost its registry.
    pub(crate) fn run(mut self) {
        let now = self.now();
        self.feed(now, CoreInput::Join);
        self.drain();
        while !self.stopped {
            let now = self.now();
            let wait = self
                .core
                .poll_timeout()
                .map_or(Duration::from_secs(1), |d| d.saturating_sub(now))
                .min(Duration::from_secs(1));
            match self.rx.recv_timeout(wait) {
                Ok(input) => self.handle(input),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if self.stopped {
                break;
            }
            let now = self.now();
            self.core.handle_timeout(now);
            self.drain();
        }
        self.finish();
    }

    fn handle(&mut self, input: Input<C::Msg>) {
        let now = self.now();
        let unreachable = matches!(input, Input::Unreachable { .. });
        match input {
            Input::Msg { from, msg } => {
                if !self.left {
                    self.feed(now, CoreInput::Message { from, msg });
                }
            }
            Input::Unreachable { addr, conn, why } | Input::Closed { addr, conn, why } => {
                if self.out.get(&addr).is_some_and(|o| o.conn == conn) {
                    self.out.remove(&addr);
                } else if self.registry != Some(addr) || self.registries.len() > 1 {
                    // The end of a connection already replaced.
                    return;
                }
                if self.registry == Some(addr) {
                    self.registry_ended(addr, conn, why);
                } else if unreachable && !self.left {
                    // A member's connection that ends is only forgotten (a member that left
                    // closes its connections too): the next message opens a new one, and a
                    // dead member is found when that cannot be opened or written.
                    self.feed(now, CoreInput::Unreachable(addr));
                }
            }
            Input::Dropped { addr, conn } => {
                if self.out.get(&addr).is_some_and(|o| o.conn == conn) {
                    self.out.remove(&addr);
                }
                if self.registry == Some(addr) {
                    self.registry_gone(addr, "cannot start a thread for the registry's connection".into());
                }
            }
            Input::Attached { conn, at } => {
                if self.registry.is_some_and(|r| self.out.get(&r).is_some_and(|o| o.conn == conn)) {
                    if self.attached.is_some() {
                        debug!("jel: the registry is served by {at} now");
                    }
                    self.attached = Some(conn);
                    self.prefer = at;
                }
            }
            Input::Told { from, why } => {
                if self.registry == Some(from) && !self.left {
                    debug!("jel: the registry closed our connection: {why}");
                    self.notify(Notice::Excluded);
                    self.stopped = true;
                }
            }
            Input::Cmd(cmd) => self.command(cmd, now),
        }
        self.drain();
    }

    /// The connection `conn` to the registry ended: a replicated registry's member
    /// reconnects if that connection had attached (the next one looks for the leader; if
    /// it finds none, the registry is lost); otherwise the registry is lost.
    fn registry_ended(&mut self, addr: Addr, conn: u64, why: String) {
        if self.registries.len() > 1 && self.attached == Some(conn) && !self.left && !self.stopped {
            debug!("jel: the connection to the registry at {} ended ({why}): looking for its leader", self.prefer);
            self.attached = None;
            self.out.remove(&addr);
            self.open(addr);
            return;
        }
        self.registry_gone(addr, why);
    }

    fn registry_gone(&mut self, addr: Addr, why: String) {
        if self.left || self.stopped {
            return;
        }
        if let Some(r) = self.ready.take() {
            let _ = r.send(Err(why));
        } else {
            debug!("jel: lost the registry {addr}: {why}");
            self.notify(Notice::RegistryLost(addr));
        }
        self.stopped = true;
    }

    fn command(&mut self, cmd: Cmd, now: Duration) {
        match cmd {
            Cmd::Leave(reply) => {
                if !self.left {
                    self.feed(now, CoreInput::Leave);
                    self.left = true;
                    self.drain();
                }
                self.stopped = true;
                self.finish();
                let _ = reply.send(());
            }
            Cmd::MaybeDead(id) => self.feed(now, CoreInput::MaybeDead(id)),
            Cmd::Elect(name, reply) => match self.core.handle_input(now, CoreInput::Elect(name.clone())) {
                Ok(()) if self.left => {
                    let _ = reply.send(Ok(None));
                }
                Ok(()) => self.elect_waits.entry(name).or_default().push(reply),
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            Cmd::GetElection(name, timeout, reply) => {
                match self.core.handle_input(now, CoreInput::GetElectionResult { name: name.clone(), timeout }) {
                    Ok(()) => self.get_waits.entry(name).or_default().push(reply),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            Cmd::Members(reply) => {
                let _ = reply.send(self.core.members());
            }
        }
    }

    fn notify(&mut self, n: Notice) {
        self.sink.put(n);
    }

    /// Carries out what the core asked for.
    fn drain(&mut self) {
        while let Some(a) = self.core.poll_output() {
            match a {
                Action::Send { to, msg } => self.send(to, C::encode(&msg)),
                Action::Deliver(e) => self.notify(Notice::Event(e)),
                Action::ElectionResult { name, winner } => {
                    let mut waits = self.get_waits.remove(&name).unwrap_or_default();
                    if winner.is_some() {
                        waits.extend(self.elect_waits.remove(&name).unwrap_or_default());
                    }
                    for w in waits {
                        let _ = w.send(Ok(winner));
                    }
                }
            }
        }
        if self.core.ready() {
            if let Some(r) = self.ready.take() {
                let _ = r.send(Ok(()));
            }
        }
        if self.core.excluded() && !self.left && !self.stopped {
            self.notify(Notice::Excluded);
            self.stopped = true;
        }
    }

    fn send(&mut self, to: Addr, bytes: Vec<u8>) {
        if self.stopped && !self.left {
            return;
        }
        self.uses += 1;
        if !self.out.contains_key(&to) && !self.open(to) {
            return;
        }
        let o = self.out.get_mut(&to).expect("opened");
        o.used = self.uses;
        let conn = o.conn;
        match o.tx.try_send(JelRecord::Msg(bytes)) {
            Ok(()) => {}
            Err(TrySendError::Disconnected(_)) => {
                // Its writer ended: why (unreachable, or a failure of this process) is
                // reported by its own input; the next message opens a new connection (never
                // to a registry alone: the connection is the membership).
                self.out.remove(&to);
                if self.registry == Some(to) {
                    self.registry_ended(to, conn, "the connection to the registry ended".into());
                }
            }
            Err(TrySendError::Full(_)) => {
                // It does not read.
                self.out.remove(&to);
                if self.registry == Some(to) {
                    self.registry_ended(to, conn, "the registry does not read".into());
                } else if !self.left {
                    let now = self.now();
                    self.feed(now, CoreInput::Unreachable(to));
                }
            }
        }
    }

    /// Opens a connection to `to` (the registry: at the supernodes, the last that served
    /// first).
    fn open(&mut self, to: Addr) -> bool {
        {
            let members = self.out.keys().filter(|a| Some(**a) != self.registry).count();
            if members >= net::MAX_OUTBOUND && Some(to) != self.registry {
                // Closed after what was queued on it is written.
                let lru = self.out.iter().filter(|(a, _)| Some(**a) != self.registry).min_by_key(|(_, o)| o.used);
                if let Some(a) = lru.map(|(a, _)| *a) {
                    self.out.remove(&a);
                }
            }
            let hello = JelHello { pool: self.pool.clone(), addr: self.me, config: None };
            let opening = if Some(to) == self.registry {
                let mut at = vec![self.prefer];
                at.extend(self.registries.iter().filter(|a| **a != self.prefer));
                Opening::Registry(JelHello { config: self.central_cfg, ..hello }, at)
            } else {
                Opening::Member(hello)
            };
            let Some(done) = self.done_tx.clone() else { return false };
            let o = net::open(
                to,
                self.local,
                self.secret.clone(),
                opening,
                C::decode,
                self.tx.clone(),
                done,
                self.connect_timeout,
            );
            self.out.insert(to, o);
        }
        true
    }

    /// Closes everything, after what was queued is written (bounded by [`LEAVE_FLUSH`]).
    fn finish(&mut self) {
        self.acceptor.stop();
        self.out.clear();
        self.done_tx = None;
        if let Some(done) = self.done_rx.take() {
            // Nothing is sent on it: it ends (disconnected) when the last writer ended.
            let _ = done.recv_timeout(LEAVE_FLUSH);
        }
        if let Some(r) = self.ready.take() {
            let _ = r.send(Err("stopped before the join completed".into()));
        }
        for (_, w) in self.elect_waits.drain().chain(self.get_waits.drain()) {
            for w in w {
                let _ = w.send(Ok(None));
            }
        }
    }
}
