//! The driver of a job's supervision: feeds the pure [`JobSupervisor`] what the job's
//! processes say and do, and carries out what it decides.
//!
//! Every launcher — the local one (`launcher`), the grid's (`grid_run`) and the thread
//! following a spawned job (`spawn`) — starts its processes its own way,
//! then hands them to [`event_loop`]: events come from the control connections (each served by
//! a thread of its own, which also answers lease renewals at once), from the watchers of the
//! processes' ends and from the other jobs of a replicated universe; each becomes an
//! [`Input`] of the supervisor, and each [`Output`] becomes a control message, a line on the
//! terminal, a notice to the grid, a stop, or the job's end. Every decision is the
//! supervisor's (`p2pmpi_core::supervisor`), which the simulator runs too.

use crate::options::FdPlan;
use crate::output::Output;
use p2pmpi_core::agreement;
use p2pmpi_core::fencing::Grant;
use p2pmpi_core::machine::Machine;
use p2pmpi_core::replication::Layout;
use p2pmpi_core::supervisor::{self as core, Exit, Input, JobSupervisor, NoteKind, Start, ToProcess};
use p2pmpi_peer::server::{self, Framing, Gate, GateOptions, Limits, Pending, Refusal};
use p2pmpi_wire::auth::JobKey;
use p2pmpi_wire::control::{self, Control};
use p2pmpi_wire::grid::JobNoticeKind;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use p2pmpi_core::supervisor::TIMEOUT_EXIT;

/// What happens to a job's processes. A `rank` here is a slot of the job's [`Layout`] (the
/// rank itself without replicas).
pub(crate) enum Event {
    Registered {
        rank: usize,
        addr: String,
        fd_addr: String,
        tolerant: bool,
        /// The pid the process reports (the launcher's own child pid is kept when known).
        pid: u32,
        conn: Writer,
    },
    /// A process's failure detector confirmed the failure of another.
    PeerFailed {
        rank: usize,
        failed: usize,
        detail: String,
    },
    Finalized {
        rank: usize,
    },
    Finalizing {
        rank: usize,
    },
    Abort {
        rank: usize,
        code: i32,
        message: String,
        lost: Option<u32>,
    },
    ControlClosed {
        rank: usize,
    },
    Exited {
        rank: usize,
        status: ExitStatus,
    },
    BadClient {
        detail: String,
    },
    /// A fault-aware program's process contributes to an agreement
    /// ([`p2pmpi_core::agreement`]).
    Agree {
        rank: usize,
        key: agreement::Key,
        members: Vec<u32>,
        flag: u32,
    },
    /// A fault-aware program's process revokes a communicator.
    Revoke {
        rank: usize,
        comm: u64,
    },
    /// Slots lost with their host (its peer daemon stopped answering), or refused there.
    Lost {
        ranks: Vec<usize>,
        why: String,
    },
    /// The member of the host running these slots was revoked ([`crate::revoked_hosts`]).
    HostRevoked {
        ranks: Vec<usize>,
        member: String,
    },
    /// Another job of the universe declared these universe slots dead (replicated spawns).
    ForeignDead {
        slots: Vec<u32>,
    },
    /// A process of another job of the universe suspects this job's slot `slot`.
    ForeignSuspect {
        slot: usize,
        why: String,
    },
    /// The root of a `spawn` asks for new processes ([`Control::Spawn`]).
    Spawn {
        rank: usize,
        apps: Vec<control::SpawnApp>,
        parents: Vec<(u32, String)>,
        ctx: u32,
    },
}

/// Starts the processes a job's `spawn` asks for: the programs, the parents (universe id,
/// data address), the intercommunicator's context; answers the first child's universe id.
pub(crate) type Spawner<'a> =
    dyn Fn(&[control::SpawnApp], &[(u32, String)], u32) -> std::result::Result<u32, String> + 'a;

/// The writing half of a process's control connection, shared by the event loop and the
/// thread that answers the process's lease renewals.
pub(crate) type Writer = Arc<Mutex<TcpStream>>;

/// The job's supervisor, shared by the event loop and the control threads (which answer
/// lease renewals at once), with the origin of its clock (the job's start).
pub(crate) struct Shared {
    sup: Mutex<JobSupervisor>,
    origin: Instant,
}

/// Shared between the event loop and the control threads.
pub(crate) type SharedSupervisor = Arc<Shared>;

impl Shared {
    /// The supervisor of a job laid out as `layout`: leases as long as the detector's
    /// suspicion time (at least 1 s; 5 s without a detector).
    pub(crate) fn new(layout: Layout, fd: Option<&FdPlan>) -> SharedSupervisor {
        let lease = p2pmpi_core::fencing::lease_length(fd.map(|p| p.suspicion_after(layout.slots())));
        Arc::new(Shared { sup: Mutex::new(JobSupervisor::new(layout, lease)), origin: Instant::now() })
    }

    /// The supervisor's time now.
    pub(crate) fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, JobSupervisor> {
        lock(&self.sup)
    }

    /// Whether `slot` registered.
    pub(crate) fn registered(&self, slot: usize) -> bool {
        self.lock().registered(slot)
    }

    /// The slots whose end was never confirmed: they may still run, out of reach.
    pub(crate) fn unconfirmed(&self) -> Vec<usize> {
        self.lock().unconfirmed()
    }
}

/// The other jobs of a replicated universe (parents and the jobs they spawned): declarations
/// and suspicions that concern another job's processes go through it.
pub(crate) trait Relay {
    /// The job at universe slot `from` declared universe slots `dead`.
    fn relay_dead(&self, from: usize, dead: &[u32]);
    /// A process suspects universe slot `slot` of another job.
    fn relay_suspect(&self, slot: usize, why: &str);
}

/// What [`event_loop`] drives besides the control connections.
pub(crate) struct Job<'a> {
    /// Makes every remaining process end.
    pub(crate) stop_all: &'a dyn Fn(),
    /// The processes' output (told when a replica is declared dead).
    pub(crate) output: &'a Output,
    pub(crate) startup_timeout: u64,
    /// `--timeout`: the job is stopped when it runs longer.
    pub(crate) timeout: Option<Duration>,
    pub(crate) fd: Option<&'a FdPlan>,
    /// The supervisor (shared with the control threads).
    pub(crate) sup: SharedSupervisor,
    /// Where the job's events are reported (its local MPD, on a grid).
    pub(crate) notices: Option<&'a crate::notices::Notifier>,
    /// Starts the processes of a `spawn` (`None`: spawning is not supported here).
    pub(crate) spawner: Option<&'a Spawner<'a>>,
    /// The universe slot of the job's slot 0 (a spawned job's follow its ancestors'): its
    /// processes name slots of the universe, the loop its own.
    pub(crate) slot_base: usize,
    /// A replicated universe: declarations and suspicions that concern another job's
    /// processes go through it.
    pub(crate) relay: Option<&'a dyn Relay>,
    /// Why a process may not join, said early (a program of MPICH's ABI:
    /// [`crate::abi::join_notice`]).
    pub(crate) join_notice: Option<core::JoinNotice>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn send_to(w: &Writer, msg: &Control) -> bool {
    lock(w).write_all(&control::encode(msg)).is_ok()
}

/// How a process ended, for the supervisor.
fn exit_of(status: &ExitStatus) -> Exit {
    if let Some(sig) = status.signal() {
        let name = match sig {
            libc::SIGKILL => "SIGKILL",
            libc::SIGTERM => "SIGTERM",
            libc::SIGSEGV => "SIGSEGV",
            libc::SIGABRT => "SIGABRT",
            libc::SIGBUS => "SIGBUS",
            libc::SIGINT => "SIGINT",
            libc::SIGFPE => "SIGFPE",
            libc::SIGILL => "SIGILL",
            libc::SIGPIPE => "SIGPIPE",
            _ => "signal",
        };
        Exit::signal(sig, name)
    } else {
        Exit::status(status.code().unwrap_or(-1))
    }
}

/// The control message of a supervisor's message to a process.
fn control_of(msg: ToProcess) -> Control {
    match msg {
        ToProcess::Dead { slots } => Control::Dead { slots },
        ToProcess::Excluded { reason } => Control::Excluded { reason },
        ToProcess::Agreed { key, decision: d } => {
            Control::Agreed { comm: key.comm, seq: key.seq, flag: d.flag, failed: d.failed, id: d.id }
        }
        ToProcess::AgreeRefused { key, reason } => Control::AgreeRefused { comm: key.comm, seq: key.seq, reason },
        ToProcess::Revoked { comm } => Control::Revoked { comm },
        ToProcess::Spawned(Ok(base)) => Control::Spawned { base, error: None },
        ToProcess::Spawned(Err(e)) => Control::Spawned { base: 0, error: Some(e) },
    }
}

/// A spawn request as a process made it: the programs, the parents (universe id, data
/// address), the intercommunicator's context.
type SpawnRequest = (Vec<control::SpawnApp>, Vec<(u32, String)>, u32);

/// The event loop's own state: the connections, and the spawn requests being decided.
struct Driver<'a, 'j> {
    name: &'a str,
    job: &'a Job<'j>,
    /// Control connections of the processes, by slot.
    conns: HashMap<usize, Writer>,
    /// The spawn request of a slot, held while the supervisor decides it.
    spawns: HashMap<usize, SpawnRequest>,
    finished: Option<i32>,
    /// The last line said before the job was first stopped: the failure's report.
    cause: Option<String>,
    stopped: bool,
    /// Slots declared dead, killed by a signal, lost with their host, or whose failure a
    /// process's detector confirmed, before the job was stopped (what a restart from
    /// checkpoints is decided on).
    deaths: Vec<usize>,
    /// Slots that processes stopping by themselves said they lost, before the job was stopped.
    lost: Vec<usize>,
}

impl Driver<'_, '_> {
    /// The supervisor's input for an event (`None`: only time passes).
    fn input_of(&mut self, ev: Event) -> Option<Input> {
        Some(match ev {
            Event::Registered { rank, addr, fd_addr, tolerant, pid, conn } => {
                // A second registration is refused by the supervisor: the first connection stays.
                self.conns.entry(rank).or_insert(conn);
                Input::Registered { slot: rank, addr, fd_addr, tolerant, pid }
            }
            Event::PeerFailed { rank, failed, detail } => {
                if !self.stopped {
                    self.deaths.push(failed);
                }
                Input::PeerFailed { by: rank, failed, detail }
            }
            Event::Finalized { rank } => Input::Finalized { slot: rank },
            Event::Finalizing { rank } => Input::Finalizing { slot: rank },
            Event::Abort { rank, code, message, lost } => {
                if let Some(l) = lost.filter(|_| !self.stopped) {
                    self.lost.push(l as usize);
                }
                Input::Abort { slot: rank, code, message, lost }
            }
            Event::ControlClosed { rank } => Input::ControlClosed { slot: rank },
            Event::Exited { rank, status } => {
                // Killed before the job was stopped (also before it registered: not declared).
                if status.signal().is_some() && !self.stopped {
                    self.deaths.push(rank);
                }
                Input::Exited { slot: rank, exit: exit_of(&status) }
            }
            Event::BadClient { detail } => {
                eprintln!("{}: warning: refused a control connection: {detail}", self.name);
                return None;
            }
            Event::Agree { rank, key, members, flag } => Input::Agree { slot: rank, key, members, flag },
            Event::Revoke { rank, comm } => Input::Revoke { slot: rank, comm },
            Event::Lost { ranks, why } => {
                if !self.stopped {
                    self.deaths.extend(&ranks);
                }
                Input::Lost { slots: ranks, why }
            }
            Event::HostRevoked { ranks, member } => Input::HostRevoked { slots: ranks, member },
            Event::ForeignDead { slots } => Input::ForeignDead { slots },
            Event::ForeignSuspect { slot, why } => Input::ForeignSuspect { slot, why },
            Event::Spawn { rank, apps, parents, ctx } => {
                self.spawns.insert(rank, (apps, parents, ctx));
                Input::Spawn { slot: rank }
            }
        })
    }

    /// Feeds an input (or the passing of time) and carries out every decision.
    fn feed(&mut self, input: Option<Input>) {
        let outputs = {
            let mut sup = self.job.sup.lock();
            let now = self.job.sup.now();
            match input {
                Some(i) => {
                    let _ = sup.handle_input(now, i);
                }
                None => sup.handle_timeout(now),
            }
            sup.drain_outputs()
        };
        for o in outputs {
            self.carry_out(o);
        }
    }

    /// How long to wait for the next event: until the supervisor's next deadline, at most
    /// 50 ms.
    fn wait(&self) -> Duration {
        let sup = self.job.sup.lock();
        let left = sup.poll_timeout().map_or(Duration::MAX, |t| t.saturating_sub(self.job.sup.now()));
        left.clamp(Duration::from_millis(2), Duration::from_millis(50))
    }

    fn carry_out(&mut self, o: core::Output) {
        let job = self.job;
        match o {
            core::Output::Say(line) => {
                eprintln!("{}: {line}", self.name);
                if !self.stopped {
                    self.cause = Some(line);
                }
            }
            core::Output::Note { kind, slot, text } => {
                if let Some(n) = job.notices {
                    let kind = match kind {
                        NoteKind::Failed => JobNoticeKind::Failed,
                        NoteKind::Takeover => JobNoticeKind::Takeover,
                        NoteKind::Fenced => JobNoticeKind::Fenced,
                    };
                    n.note(kind, slot, text);
                }
            }
            core::Output::World { addrs, fd_addrs, lease_us } => self.send_world(addrs, fd_addrs, lease_us),
            core::Output::Send { slot, msg } => {
                if let Some(w) = self.conns.get(&slot) {
                    send_to(w, &control_of(msg));
                }
            }
            core::Output::Broadcast(msg) => {
                let msg = control_of(msg);
                for w in self.conns.values() {
                    send_to(w, &msg);
                }
            }
            core::Output::Declared { slot } => {
                if !self.stopped {
                    self.deaths.push(slot);
                }
                job.output.slot_dead(slot)
            }
            core::Output::RelayDead { slot } => {
                if let Some(relay) = job.relay {
                    relay.relay_dead(job.slot_base, &[slot]);
                }
            }
            core::Output::RelaySuspect { slot, why } => {
                if let Some(relay) = job.relay {
                    relay.relay_suspect(slot, &why);
                }
            }
            core::Output::Spawn { slot, number } => {
                let outcome = match (job.spawner, self.spawns.remove(&slot)) {
                    (Some(s), Some((apps, parents, ctx))) => s(&apps, &parents, ctx),
                    _ => Err("this job cannot spawn processes".to_string()),
                };
                self.feed(Some(Input::Spawned { slot, number, outcome }));
            }
            core::Output::StopAll => {
                self.stopped = true;
                (job.stop_all)()
            }
            core::Output::Finished(code) => self.finished = Some(code),
        }
    }

    /// The communicator table, sent to every process by a flat tree, with Δt_i = ts_i − ts_1
    /// for the detector's initial heartbeat (FM eq. 4).
    fn send_world(&self, addrs: Vec<String>, fd_addrs: Vec<String>, lease_us: u64) {
        // Every process needs a detector address for the detector to run.
        let fd = self.job.fd.filter(|_| fd_addrs.iter().all(|a| !a.is_empty()));
        let mut first: Option<Instant> = None;
        for slot in 0..addrs.len() {
            let Some(c) = self.conns.get(&slot) else { continue };
            let ts = Instant::now();
            let ts1 = *first.get_or_insert(ts);
            let msg =
                Control::World { addrs: addrs.clone(), fd: fd.map(|p| p.setup(fd_addrs.clone(), ts - ts1)), lease_us };
            send_to(c, &msg);
        }
    }
}

/// Follows a job to its end: every event becomes an input of the job's supervisor
/// ([`JobSupervisor`]: it sends the communicator once every process registered, judges every
/// process's end, declares deaths, decides agreements and spawns, and on the first failure
/// reports its root cause and stops the job), and every decision is carried out. `pids` are
/// the processes' pids where this launcher started them (0 elsewhere). Returns the job's exit
/// status.
pub(crate) fn event_loop(name: &str, job: &Job, rx: &Receiver<Event>, pids: Vec<u32>) -> i32 {
    event_loop_with_cause(name, job, rx, pids).0
}

/// [`event_loop`], also returning what was reported of the failure that stopped the job.
pub(crate) fn event_loop_with_cause(
    name: &str,
    job: &Job,
    rx: &Receiver<Event>,
    pids: Vec<u32>,
) -> (i32, Option<String>) {
    let e = event_loop_ended(name, job, rx, pids);
    (e.code, e.cause)
}

/// How a job's run ended, for a launcher that may restart it from checkpoints.
pub(crate) struct Ended {
    /// The exit status.
    pub(crate) code: i32,
    /// What was reported of the failure that stopped the job.
    pub(crate) cause: Option<String>,
    /// The slots declared dead, killed by a signal, lost with their host, or whose failure a
    /// process's detector confirmed, before the job was stopped (not those the launcher
    /// stopped).
    pub(crate) deaths: Vec<usize>,
    /// The slots whose loss made a process stop by itself, before the job was stopped (at
    /// `-r R`, the process lost every replica of that slot's rank).
    pub(crate) lost: Vec<usize>,
}

/// [`event_loop`], telling how the job ended ([`Ended`]).
pub(crate) fn event_loop_ended(name: &str, job: &Job, rx: &Receiver<Event>, pids: Vec<u32>) -> Ended {
    let mut driver = Driver {
        name,
        job,
        conns: HashMap::new(),
        spawns: HashMap::new(),
        finished: None,
        cause: None,
        stopped: false,
        deaths: Vec::new(),
        lost: Vec::new(),
    };
    let start = Start {
        pids,
        startup_timeout: Duration::from_secs(job.startup_timeout),
        timeout: job.timeout,
        slot_base: job.slot_base,
        relay: job.relay.is_some(),
        join_notice: job.join_notice.clone(),
    };
    driver.feed(Some(Input::Start(start)));
    loop {
        if let Some(code) = driver.finished {
            return Ended { code, cause: driver.cause, deaths: driver.deaths, lost: driver.lost };
        }
        match rx.recv_timeout(driver.wait()) {
            Ok(ev) => {
                let input = driver.input_of(ev);
                driver.feed(input);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => driver.feed(None),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => driver.feed(Some(Input::Closed)),
        }
    }
}

/// Time a process has to register once it connected: all of it, not per read, so a
/// connection that trickles bytes cannot hold a thread longer.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(10);

/// The control port's connection caps for a job of `slots` processes: every process may be
/// connecting at once, all from one address (a local job); once registered, one connection
/// per process (and a few to spare). A connection that did not register yet never takes the
/// place of a registered one; when more are connecting than the job has processes, the
/// oldest is closed to make room (see `p2pmpi_peer::server`).
pub(crate) fn control_limits(slots: usize) -> Limits {
    let pending = slots + 32;
    Limits { authenticated: slots + 8, pending, pending_per_addr: pending }
}

/// Accepts control connections; each is served by its own thread, which also answers the
/// process's lease renewals from the supervisor `sup`. Connections are capped ([`control_limits`]).
pub(crate) fn spawn_control_server(
    listener: TcpListener,
    key: JobKey,
    n: usize,
    tx: Sender<Event>,
    sup: SharedSupervisor,
) {
    // Refusals are told on the terminal: a few at once, then counted (by the gate).
    let report_tx = Mutex::new(tx.clone());
    let report: server::Report = Box::new(move |_, detail: &str| {
        let _ = lock(&report_tx).send(Event::BadClient { detail: detail.to_string() });
    });
    let options =
        GateOptions { framing: Framing::Control, first_message: REGISTER_TIMEOUT, report: Some(report), burst: 8 };
    let gate = Gate::with_options("control port", control_limits(n), options);
    let g = gate.clone();
    server::accept_loop(listener, gate, move |conn, peer, pending| {
        serve_control(conn, peer, pending, &g, &key, n, tx.clone(), sup.clone())
    });
}

#[allow(clippy::too_many_arguments)]
fn serve_control(
    mut conn: TcpStream,
    peer: SocketAddr,
    pending: Pending,
    gate: &Gate,
    key: &JobKey,
    n: usize,
    tx: Sender<Event>,
    sup: SharedSupervisor,
) {
    let _ = conn.set_nodelay(true);
    // The whole opening (a challenge on the job key) within 10 s: a connection that trickles
    // bytes is dropped all the same.
    let deadline = Instant::now() + REGISTER_TIMEOUT;
    let mut timed = Deadlined { conn: &mut conn, deadline };
    let refused = |why: String| gate.refused(Refusal::Unauthenticated, Some(peer), &why);
    let (rank, addr, fd_addr, tolerant, pid) = match control::accept(&mut timed, key, n) {
        Ok(r) => (r.rank as usize, r.data_addr, r.fd_addr, r.tolerant, r.pid),
        Err(_) if pending.evicted() => return,
        Err(e) => return refused(e.to_string()),
    };
    let Some(_slot) = pending.authenticated(peer) else { return };
    let _ = conn.set_read_timeout(None);
    let Ok(writer) = conn.try_clone() else { return };
    // A process that stopped reading (frozen) must not hold the launcher.
    let _ = writer.set_write_timeout(Some(Duration::from_secs(2)));
    let writer: Writer = Arc::new(Mutex::new(writer));
    let _ = tx.send(Event::Registered { rank, addr, fd_addr, tolerant, pid, conn: writer.clone() });
    loop {
        match control::read_msg(&mut conn) {
            Ok(Some(Control::Renew { stamp_us })) => {
                let grant = sup.lock().renew(sup.now(), rank);
                let answer = match grant {
                    Grant::Lease => Control::Lease { stamp_us },
                    Grant::Excluded => Control::Excluded { reason: "declared dead by the launcher".into() },
                };
                send_to(&writer, &answer);
            }
            Ok(Some(Control::Excluded { .. })) => {
                // The process learned that it was excluded (it resumed) and leaves.
                let _ = sup.lock().handle_input(sup.now(), Input::Heard { slot: rank });
            }
            Ok(Some(Control::Finalized { .. })) => {
                let _ = tx.send(Event::Finalized { rank });
            }
            Ok(Some(Control::Finalizing)) => {
                let _ = tx.send(Event::Finalizing { rank });
            }
            Ok(Some(Control::Abort { code, message, lost, .. })) => {
                let _ = tx.send(Event::Abort { rank, code, message, lost });
            }
            Ok(Some(Control::PeerFailed { failed, detail, .. })) => {
                let _ = tx.send(Event::PeerFailed { rank, failed: failed as usize, detail });
            }
            Ok(Some(Control::Agree { comm, seq, members, flag })) => {
                let key = agreement::Key { comm, seq };
                let _ = tx.send(Event::Agree { rank, key, members, flag });
            }
            Ok(Some(Control::Revoke { comm })) => {
                let _ = tx.send(Event::Revoke { rank, comm });
            }
            Ok(Some(Control::Spawn { apps, parents, ctx })) => {
                let _ = tx.send(Event::Spawn { rank, apps, parents, ctx });
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                let _ = tx.send(Event::ControlClosed { rank });
                return;
            }
        }
    }
}

/// A stream whose reads and writes give up at `deadline` (the opening of a control
/// connection: one limit for all of it, not one per read).
struct Deadlined<'a> {
    conn: &'a mut TcpStream,
    deadline: Instant,
}

impl Deadlined<'_> {
    fn arm(&mut self) -> std::io::Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the opening took more than 10 s"));
        }
        self.conn.set_read_timeout(Some(left))?;
        self.conn.set_write_timeout(Some(left))
    }
}

impl Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.arm()?;
        self.conn.read(buf)
    }
}

impl Write for Deadlined<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.arm()?;
        self.conn.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.conn.flush()
    }
}

/// Copies a child's output (slot `slot`) to ours, line by line, through the job's [`Output`].
pub(crate) fn pump(src: impl Read + Send + 'static, slot: usize, err: bool, output: Arc<Output>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::with_capacity(64 * 1024, src);
        let mut line = Vec::with_capacity(256);
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => {
                    output.pipe_closed(slot);
                    return;
                }
                // Our own output may be gone (closed pipe): the child is drained anyway.
                Ok(_) => output.write(slot, err, &line),
            }
        }
    })
}

/// Reports every child's exit (child `i` is slot `i`), once its output was read to the end
/// (at most 500 ms after the exit: a grandchild may keep a pipe open).
pub(crate) fn watch_exits(children: Arc<Mutex<Vec<Child>>>, tx: Sender<Event>, output: Arc<Output>) {
    let n = children.lock().unwrap().len();
    let mut done = vec![false; n];
    let mut left = n;
    while left > 0 {
        {
            let mut ch = children.lock().unwrap();
            for (rank, c) in ch.iter_mut().enumerate() {
                if done[rank] {
                    continue;
                }
                if let Ok(Some(status)) = c.try_wait() {
                    done[rank] = true;
                    left -= 1;
                    let output = output.clone();
                    let tx = tx.clone();
                    std::thread::spawn(move || {
                        let deadline = Instant::now() + Duration::from_millis(500);
                        while !output.drained(rank) && Instant::now() < deadline {
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        let _ = tx.send(Event::Exited { rank, status });
                    });
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Stops every remaining process: SIGTERM, then SIGKILL after a grace period.
pub(crate) fn terminate(children: &Arc<Mutex<Vec<Child>>>) {
    let alive = |children: &Arc<Mutex<Vec<Child>>>| -> Vec<u32> {
        let mut ch = children.lock().unwrap();
        ch.iter_mut().filter_map(|c| matches!(c.try_wait(), Ok(None)).then(|| c.id())).collect()
    };
    for pid in alive(children) {
        // SIGCONT too: a frozen (stopped) process acts on SIGTERM only once continued.
        let _ = p2pmpi_peer::os::signal(pid, libc::SIGTERM);
        let _ = p2pmpi_peer::os::signal(pid, libc::SIGCONT);
    }
    let children = children.clone();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            if alive(&children).is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for pid in alive(&children) {
            let _ = p2pmpi_peer::os::signal(pid, libc::SIGKILL);
        }
    });
}

/// Makes a child die with the launcher (`PR_SET_PDEATHSIG`): no orphan processes.
pub(crate) fn die_with_launcher(cmd: &mut std::process::Command) {
    p2pmpi_peer::os::die_with_parent(cmd);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    /// Issue 13: the launcher's control port is capped. 200 connections that never register
    /// (each sending a byte now and then) do not keep a process of the job from registering;
    /// those beyond the cap are closed at once, the others when the registration time is up.
    #[test]
    fn the_control_port_is_capped_and_slow_connections_do_not_keep_processes_out() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = channel();
        let layout = Layout::new(2, 1);
        let key = JobKey::from_bytes([7; p2pmpi_wire::auth::KEY_LEN]);
        spawn_control_server(listener, key.clone(), 2, tx, Shared::new(layout, None));
        let start = Instant::now();
        let slow: Vec<TcpStream> = (0..200)
            .map(|_| {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(&[64]).unwrap();
                s
            })
            .collect();
        let closed = |s: &TcpStream| {
            s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
            let mut b = [0u8; 1];
            match (&mut &*s).read(&mut b) {
                Ok(0) => true,
                Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
                Ok(_) => false,
            }
        };
        let open = |all: &[TcpStream]| all.iter().filter(|s| !closed(s)).count();
        // Beyond the cap (2 + 32 registering), the oldest were closed at once.
        let deadline = Instant::now() + Duration::from_secs(10);
        while open(&slow) > control_limits(2).pending {
            assert!(Instant::now() < deadline, "{} slow connections still open", open(&slow));
            std::thread::sleep(Duration::from_millis(20));
        }
        // A process of the job registers all the same.
        let mut p = TcpStream::connect(addr).unwrap();
        let reg = control::Registration {
            rank: 1,
            data_addr: "127.0.0.1:1".into(),
            pid: 1,
            fd_addr: String::new(),
            tolerant: false,
        };
        p.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        control::register(&mut p, &key, &reg).unwrap();
        let t = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_secs(5)).expect("the registration was not served") {
                Event::Registered { rank: 1, .. } => break,
                Event::BadClient { .. } => {}
                _ => panic!("unexpected event before the registration"),
            }
        }
        let served = t.elapsed();
        assert!(served < Duration::from_secs(2), "registered after {served:?}");
        // The others are closed when their registration time is up, however they trickle.
        let deadline = start + REGISTER_TIMEOUT + Duration::from_secs(3);
        let mut sent = Instant::now();
        while open(&slow) > 0 {
            assert!(
                Instant::now() < deadline,
                "{} slow connections still open after {:?}",
                open(&slow),
                start.elapsed()
            );
            if sent.elapsed() > Duration::from_secs(2) {
                for mut s in &slow {
                    let _ = s.write_all(&[0]);
                }
                sent = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(start.elapsed() >= REGISTER_TIMEOUT - Duration::from_millis(500), "closed before their time");
        // Refusals were reported, but not one line each.
        let reports = rx.try_iter().filter(|e| matches!(e, Event::BadClient { .. })).count();
        assert!(reports <= 3 * 8, "{reports} reports of refused connections");
        drop(p);
    }
}
