//! The supervision of a job, as one state machine: what the launcher decides while a job runs.
//!
//! The launcher (on the submitter, or the thread following a spawned job) is the job's
//! supervisor. It hears every process on its control connection (registration, finalization,
//! aborts, the failures their detectors report, agreements, spawns), sees their ends, and
//! decides: when to send the communicator table, which processes are excluded and declared
//! dead ([`crate::fencing`]), which agreements are decided ([`crate::agreement`]), which spawn
//! request is performed ([`crate::replication::spawn`]), what is reported, when every process
//! must be stopped, and the job's exit status. [`JobSupervisor`] composes those cores and
//! takes every one of these decisions, with time passed in; the launchers (local, grid,
//! spawned jobs) only carry them out, and the simulator runs whole jobs through it.
//!
//! It speaks the crate's [`Machine`] vocabulary: [`Input`]s in (a process registered, ended,
//! was suspected, contributed to an agreement, asked for a spawn…), [`Output`]s out (the table
//! to send, messages to processes, declarations, stops, lines to report, the verdict), timers
//! through [`Machine::poll_timeout`]. Lease renewals, which the control threads answer at once,
//! are a direct call ([`JobSupervisor::renew`]).
//!
//! The rules, as the launcher has always applied them:
//!
//! * the communicator table goes out once every process registered; start-up fails when one
//!   has not after `startup_timeout` while another has;
//! * without replicas, the first failure (an abnormal exit, an exit without finalizing, an
//!   abort, a failure a detector confirmed, a lost host) is reported with its root cause and
//!   the job is stopped with that process's status, unless the program handles failures
//!   (every process registered as tolerant): then the job goes on;
//! * with replicas, a replica's failure only excludes it ([`crate::fencing`]): it is declared
//!   dead when its end is seen or its lease ran out, and the job goes on while its rank keeps
//!   a replica; a rank that loses its last one stops the job (unless the program handles
//!   failures); a replica declared dead that resumes is told so and reported;
//! * replicas still running once everything else ended and their rank finished are stopped
//!   after a grace; a stopped job's processes that never confirm their end are given up on.

use crate::agreement::{self, Registry};
use crate::fencing::{self, Declaration, Grant};
use crate::machine::{Machine, Time};
use crate::replication::spawn::{Ask, SpawnLedger};
use crate::replication::Layout;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

/// How long an abort caused by a lost peer waits for that peer's own exit to be reported.
pub const ROOT_CAUSE_GRACE: Duration = Duration::from_millis(500);

/// With replicas: how long the replicas still running are waited for once everything else
/// ended and each of their ranks has a replica that finished (frozen, or far behind: their
/// output is already shown and no process needs them any more).
pub const REDUNDANT_GRACE: Duration = Duration::from_secs(1);

/// With replicas: how long the job waits only for replicas that fell behind (every other
/// process is finalizing or ended, and each of their ranks has a replica that is finalizing or
/// finished) before it says which ones it waits for.
pub const LAG_NOTICE: Duration = Duration::from_secs(1);

/// Once the job was stopped, how long the end of its processes is waited for. A process on
/// a host cut off by the network never confirms it: its peer daemon's connection carries
/// nothing, and no error comes until TCP gives up retransmitting the stop (about 15 minutes
/// with Linux's defaults). Past this, the supervisor gives up on it, says so, and ends. The
/// stop sends SIGKILL after 1 s.
pub const STOP_CONFIRM: Duration = Duration::from_secs(5);

/// Once every process has ended, how long the control connections still open are waited for:
/// a process's last word (finalized, abort) may be read after its exit was seen.
pub const CLOSE_WAIT: Duration = Duration::from_millis(500);

/// Exit status of a job stopped by its time limit (as timeout(1)).
pub const TIMEOUT_EXIT: i32 = 124;

/// What the supervisor is told of how a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// It exited with status 0.
    pub success: bool,
    /// The job's exit status if this end is its failure (128 + a signal, or the status).
    pub code: i32,
    /// How it ended, for reports (`exited with status 3`, `was killed by signal 9 (SIGKILL)`).
    pub how: String,
}

impl Exit {
    /// A normal end (status 0).
    pub fn success() -> Exit {
        Exit { success: true, code: 0, how: "exited with status 0".into() }
    }

    /// An end by a signal.
    pub fn signal(sig: i32, name: &str) -> Exit {
        Exit { success: false, code: 128 + sig, how: format!("was killed by signal {sig} ({name})") }
    }

    /// An exit with status `code`.
    pub fn status(code: i32) -> Exit {
        Exit { success: code == 0, code, how: format!("exited with status {code}") }
    }
}

/// How the job starts: given once its processes were launched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Start {
    /// The pids of the processes, by slot, where the launcher knows them (0: it does not; the
    /// process's registration says).
    pub pids: Vec<u32>,
    /// The longest wait for every process to register once one did.
    pub startup_timeout: Duration,
    /// The job's time limit (`--timeout`).
    pub timeout: Option<Duration>,
    /// The universe slot of the job's slot 0 (a spawned job's follow its ancestors'): its
    /// processes name slots of the universe.
    pub slot_base: usize,
    /// The job belongs to a replicated universe (parents and the jobs they spawned): its
    /// declarations go to the other jobs, and suspicions of their processes are passed on.
    pub relay: bool,
    /// Say early why processes may not join (`None`: wait for `startup_timeout` in silence).
    pub join_notice: Option<JoinNotice>,
}

/// The likely cause of a process that does not register, told early: once `after` passed
/// since the first registration, the processes that still run without having registered are
/// named with `cause` (the job still waits for them until `startup_timeout`); a process that
/// exits without registering while others did is reported with it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JoinNotice {
    pub after: Duration,
    pub cause: String,
}

/// What the supervisor is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The processes were launched: the job's clock starts (time limits run from now).
    Start(Start),
    /// A process registered on its control connection (with its data and detector addresses).
    Registered { slot: usize, addr: String, fd_addr: String, tolerant: bool, pid: u32 },
    /// `by`'s failure detector confirmed the failure of `failed` (a universe slot in a
    /// replicated job, a slot of the job otherwise).
    PeerFailed { by: usize, failed: usize, detail: String },
    /// A process finalized MPI.
    Finalized { slot: usize },
    /// A process entered finalization (its output is complete; it may wait for its peers).
    Finalizing { slot: usize },
    /// A process aborted the job (`lost`: because it lost that rank).
    Abort { slot: usize, code: i32, message: String, lost: Option<u32> },
    /// A process's control connection closed.
    ControlClosed { slot: usize },
    /// A process's end was seen (after its output was read).
    Exited { slot: usize, exit: Exit },
    /// A process said it learned of its exclusion (it resumed and leaves).
    Heard { slot: usize },
    /// A fault-aware program's process contributes to an agreement.
    Agree { slot: usize, key: agreement::Key, members: Vec<u32>, flag: u32 },
    /// A fault-aware program's process revokes a communicator.
    Revoke { slot: usize, comm: u64 },
    /// The root of a `spawn` asks for new processes (the request itself stays with the
    /// driver: it performs it on [`Output::Spawn`]).
    Spawn { slot: usize },
    /// The outcome of the spawn [`Output::Spawn`] asked for: the children's first universe
    /// id, or why it failed.
    Spawned { slot: usize, number: u64, outcome: Result<u32, String> },
    /// Slots lost with their host (its peer daemon stopped answering), or refused there.
    Lost { slots: Vec<usize>, why: String },
    /// The grid's owner revoked the member `member` whose host runs these slots: they count
    /// as failed, as if lost with the host (their replicas take over; without one the job
    /// fails), since nothing they say can be trusted any more.
    HostRevoked { slots: Vec<usize>, member: String },
    /// Another job of the universe declared these universe slots dead.
    ForeignDead { slots: Vec<u32> },
    /// A process of another job of the universe suspects this job's slot `slot`.
    ForeignSuspect { slot: usize, why: String },
    /// Nothing more will come (every control thread and watcher is gone): the job ends now.
    Closed,
}

/// A message to one process (or every process) on its control connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToProcess {
    /// The dead set: this job's declared dead slots and other jobs' (universe slots).
    Dead { slots: Vec<u32> },
    /// The process was excluded (declared dead): it must leave quietly.
    Excluded { reason: String },
    /// An agreement's decision.
    Agreed { key: agreement::Key, decision: agreement::Decision },
    /// An agreement contribution refused.
    AgreeRefused { key: agreement::Key, reason: String },
    /// A communicator was revoked.
    Revoked { comm: u64 },
    /// The outcome of a spawn.
    Spawned(Result<u32, String>),
}

/// What a notice to the grid (the job's MPD) is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteKind {
    Failed,
    Takeover,
    Fenced,
}

/// What the supervisor decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A line for the user (the driver prefixes the launcher's name).
    Say(String),
    /// A notice of the job's events for the grid.
    Note { kind: NoteKind, slot: usize, text: String },
    /// The communicator table, to every process (in slot order): data addresses, detector
    /// addresses (every process needs one for the detector to run), lease length (0: no
    /// fencing).
    World { addrs: Vec<String>, fd_addrs: Vec<String>, lease_us: u64 },
    /// A message to one process.
    Send { slot: usize, msg: ToProcess },
    /// A message to every process connected.
    Broadcast(ToProcess),
    /// `slot` was declared dead: its output is no longer shown.
    Declared { slot: usize },
    /// Tell the other jobs of the universe that this universe slot was declared dead.
    RelayDead { slot: u32 },
    /// A process suspects universe slot `slot` of another job: that job decides.
    RelaySuspect { slot: usize, why: String },
    /// Perform spawn request `number` of `slot` (the request the driver holds), then feed
    /// [`Input::Spawned`].
    Spawn { slot: usize, number: u64 },
    /// Stop every remaining process (SIGTERM, then SIGKILL).
    StopAll,
    /// The job ended, with this exit status. Nothing follows.
    Finished(i32),
}

#[derive(Debug, Clone, Default)]
struct Proc {
    pid: u32,
    registered: bool,
    finalizing: bool,
    finalized: bool,
    ctrl_closed: bool,
    exit: Option<Exit>,
    judged: bool,
    /// It stopped because it lost another rank: its exit is a consequence, not a cause.
    lost_peer: Option<u32>,
    /// Its end was never confirmed ([`STOP_CONFIRM`]): it may still run, out of reach.
    unconfirmed: bool,
    /// Reported failed (or excluded): it no longer counts as running.
    reported_failed: bool,
    addr: Option<String>,
    fd_addr: String,
}

/// An abort caused by a lost peer, reported once the peer's own end had a chance to be seen.
#[derive(Debug, Clone)]
struct Provisional {
    deadline: Time,
    slot: usize,
    peer: u32,
    code: i32,
    message: String,
}

/// The supervisor of one job (see the module's documentation).
#[derive(Debug)]
pub struct JobSupervisor {
    layout: Layout,
    replicated: bool,
    settings: Start,
    fencing: fencing::Supervisor,
    agreements: Registry,
    /// The processes (slots) waiting for each agreement's decision.
    waiting: HashMap<agreement::Key, Vec<usize>>,
    revoked: BTreeSet<u64>,
    /// Universe slots other jobs of the universe declared dead.
    foreign: BTreeSet<u32>,
    spawns: SpawnLedger<Result<u32, String>>,
    procs: Vec<Proc>,
    /// The program handles failures itself (every process said so at registration).
    tolerant: bool,
    world_sent: bool,
    failure: Option<i32>,
    start: Time,
    exited: usize,
    stopped_at: Option<Time>,
    provisional: Option<Provisional>,
    close_deadline: Option<Time>,
    redundant_deadline: Option<Time>,
    stragglers_stopped: bool,
    /// When the job will say which replicas it waits for ([`LAG_NOTICE`]), and those it named.
    lag_deadline: Option<Time>,
    lag_said: BTreeSet<usize>,
    /// When the first process registered, and whether the [`JoinNotice`] was given.
    first_registered: Option<Time>,
    join_noticed: bool,
    finished: Option<i32>,
    out: VecDeque<Output>,
}

/// How reports name a process: `rank K`, or `rank K replica J` when its rank is replicated.
pub fn who(layout: Layout, slot: usize) -> String {
    let rank = layout.rank_of(slot);
    if layout.replicas(rank) > 1 {
        format!("rank {rank} replica {}", layout.replica_of(slot))
    } else {
        format!("rank {rank}")
    }
}

/// A failure notice's text without its leading `rank K failed: ` (the report names the
/// process itself).
pub fn failure_detail(detail: &str) -> &str {
    if let Some((head, tail)) = detail.strip_prefix("rank ").and_then(|r| r.split_once(" failed: ")) {
        if head.split(" replica ").all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())) {
            return tail;
        }
    }
    detail
}

/// The panic message of an abort (`panicked at FILE:LINE:COL:` and the message), if it is one.
fn panic_text(why: &str) -> Option<&str> {
    why.starts_with("panicked").then_some(why)
}

/// An abort message without the library's `p2pmpi: rank K: ` (the report names the process).
pub fn abort_text(message: &str, layout: Layout, slot: usize) -> &str {
    let m = message.strip_prefix("p2pmpi: ").unwrap_or(message);
    for p in [format!("{}: ", who(layout, slot)), format!("rank {}: ", layout.rank_of(slot)), format!("rank {slot}: ")]
    {
        if let Some(rest) = m.strip_prefix(p.as_str()) {
            return rest;
        }
    }
    m
}

/// How a declaration is reported: the process, how it failed and who noticed.
fn declaration_text(layout: Layout, d: &Declaration) -> String {
    match d.by {
        Some(by) => {
            format!("{} failed: {} (detected by {})", who(layout, d.slot), failure_detail(&d.why), who(layout, by))
        }
        None if d.why.is_empty() => format!("{} ended", who(layout, d.slot)),
        None => d.why.clone(),
    }
}

/// The end of a process that was given up on or lost: never described.
fn killed() -> Exit {
    Exit::signal(9, "SIGKILL")
}

impl JobSupervisor {
    /// The supervisor of a job laid out as `layout`, granting leases of `lease` (renewals may
    /// come before [`Input::Start`]).
    pub fn new(layout: Layout, lease: Duration) -> JobSupervisor {
        let slots = layout.slots();
        JobSupervisor {
            layout,
            replicated: slots > layout.n,
            settings: Start::default(),
            fencing: fencing::Supervisor::new(layout, lease),
            agreements: Registry::new(),
            waiting: HashMap::new(),
            revoked: BTreeSet::new(),
            foreign: BTreeSet::new(),
            spawns: SpawnLedger::new(layout),
            procs: vec![Proc::default(); slots],
            tolerant: true,
            world_sent: false,
            failure: None,
            start: Time::ZERO,
            exited: 0,
            stopped_at: None,
            provisional: None,
            close_deadline: None,
            redundant_deadline: None,
            stragglers_stopped: false,
            lag_deadline: None,
            lag_said: BTreeSet::new(),
            first_registered: None,
            join_noticed: false,
            finished: None,
            out: VecDeque::new(),
        }
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The lease length the processes are granted.
    pub fn lease(&self) -> Duration {
        self.fencing.lease()
    }

    /// `slot` asks to renew its lease (answered at once by the control threads, the fast
    /// path): refused when it was excluded.
    pub fn renew(&mut self, now: Time, slot: usize) -> Grant {
        match self.fencing.handle_input(now, fencing::Input::Renew(slot)) {
            Ok(()) => Grant::Lease,
            Err(_) => Grant::Excluded,
        }
    }

    /// The fencing core (declared dead set, exclusions).
    pub fn fencing(&self) -> &fencing::Supervisor {
        &self.fencing
    }

    /// Whether `slot` registered.
    pub fn registered(&self, slot: usize) -> bool {
        self.procs.get(slot).is_some_and(|p| p.registered)
    }

    /// The slots whose end was never confirmed (given up on after [`STOP_CONFIRM`]).
    pub fn unconfirmed(&self) -> Vec<usize> {
        (0..self.procs.len()).filter(|&s| self.procs[s].unconfirmed).collect()
    }

    /// The job's exit status, once it ended.
    pub fn finished(&self) -> Option<i32> {
        self.finished
    }

    fn n(&self) -> usize {
        self.procs.len()
    }

    fn who(&self, slot: usize) -> String {
        who(self.layout, slot)
    }

    fn say(&mut self, line: String) {
        self.out.push_back(Output::Say(line));
    }

    fn note(&mut self, kind: NoteKind, slot: usize, text: String) {
        self.out.push_back(Output::Note { kind, slot, text });
    }

    fn send(&mut self, slot: usize, msg: ToProcess) {
        self.out.push_back(Output::Send { slot, msg });
    }

    /// Stops every process, once the job failed with `code`.
    fn fail(&mut self, now: Time, code: i32) {
        self.failure = Some(code);
        self.stop(now);
    }

    fn stop(&mut self, now: Time) {
        self.stopped_at.get_or_insert(now);
        self.out.push_back(Output::StopAll);
    }

    // ---------------------------------------------------------------- the cores

    fn replicated_slot(&self, slot: usize) -> bool {
        self.layout.replicas(self.layout.rank_of(slot)) > 1
    }

    fn fenced(&self, slot: usize) -> bool {
        self.fencing.is_fenced(slot)
    }

    fn master_of(&self, rank: usize) -> Option<usize> {
        self.fencing.dead().master_of(rank)
    }

    /// A message came from `slot`: true if it is fenced (the message is ignored, and the
    /// process is told it was excluded).
    fn heard_from_fenced(&mut self, now: Time, slot: usize) -> bool {
        let fenced = self.fencing.handle_input(now, fencing::Input::Heard(slot)).is_err();
        if fenced {
            self.send(slot, ToProcess::Excluded { reason: "declared dead by the launcher".into() });
        }
        fenced
    }

    /// The fencing core's outputs: exclusions are noted, declarations returned.
    fn fencing_outputs(&mut self) -> Vec<Declaration> {
        let mut declared = Vec::new();
        while let Some(o) = self.fencing.poll_output() {
            match o {
                fencing::Output::Excluded(slot) => {
                    if let Some(p) = self.procs.get_mut(slot) {
                        p.reported_failed = true;
                    }
                }
                fencing::Output::Declared(d) => declared.push(d),
            }
        }
        declared
    }

    fn suspect(&mut self, now: Time, slot: usize, by: Option<usize>, why: String) {
        let _ = self.fencing.handle_input(now, fencing::Input::Suspect { slot, by, why });
        for d in self.fencing_outputs() {
            self.on_declared(now, &d);
        }
    }

    /// `slot`'s process ended: declared at once (`None` if it already was).
    fn ended(&mut self, now: Time, slot: usize, why: &str) -> Option<Declaration> {
        let _ = self.fencing.handle_input(now, fencing::Input::Ended { slot, why: why.to_string() });
        let mut d = self.fencing_outputs();
        let first = (!d.is_empty()).then(|| d.remove(0));
        for other in d {
            self.on_declared(now, &other);
        }
        first
    }

    /// A declaration that the supervisor's own rules made: reported with its cause.
    fn on_declared(&mut self, now: Time, d: &Declaration) {
        if self.failure.is_some() {
            self.declared(d);
        } else {
            let what = declaration_text(self.layout, d);
            self.report_and_judge(now, d, &what, 1);
        }
    }

    /// Reports a declaration and stops the job with `code` if it lost a rank.
    fn report_and_judge(&mut self, now: Time, d: &Declaration, what: &str, code: i32) {
        if self.report(d, what) {
            self.fail(now, code);
        }
    }

    /// Carries out a declaration: the slot's output is no longer shown and every process
    /// learns the dead set. Returns how many replicas its rank has left.
    fn declared(&mut self, d: &Declaration) -> usize {
        self.out.push_back(Output::Declared { slot: d.slot });
        self.tell_dead();
        if self.settings.relay {
            self.out.push_back(Output::RelayDead { slot: (self.settings.slot_base + d.slot) as u32 });
        }
        if d.left == 0 {
            self.rank_failed(self.layout.rank_of(d.slot));
        }
        d.left
    }

    /// Tells every process the dead set: this job's slots and other jobs' (universe slots).
    fn tell_dead(&mut self) {
        let base = self.settings.slot_base;
        let mut slots: Vec<u32> = self.fencing.dead().slots().into_iter().map(|s| (s + base) as u32).collect();
        slots.extend(self.foreign.iter().copied());
        self.out.push_back(Output::Broadcast(ToProcess::Dead { slots }));
    }

    /// Reports a declaration (`what` names the process and says how it failed); true when
    /// the job must stop: its rank lost its last replica.
    fn report(&mut self, d: &Declaration, what: &str) -> bool {
        let rank = self.layout.rank_of(d.slot);
        let left = self.declared(d);
        self.note(NoteKind::Failed, d.slot, what.to_string());
        // The master is the lowest replica not declared dead: one above the dead one means
        // the dead one was master until now (the replicas below it were dead).
        if let Some(m) = self.master_of(rank).filter(|&m| m > d.slot) {
            let text = format!("{} took over from {}", self.who(m), self.who(d.slot));
            self.note(NoteKind::Takeover, m, text);
        }
        if left > 0 {
            self.say(format!("{what}; rank {rank} goes on with {left} replica(s)"));
            false
        } else if self.tolerant {
            self.say(format!(
                "{what}; all replicas of rank {rank} failed; the program handles failures, the job goes on"
            ));
            false
        } else {
            self.say(format!("{what}; all replicas of rank {rank} failed; stopping the other processes"));
            true
        }
    }

    /// Every replica of `rank` failed (or the process of an unreplicated rank): agreements
    /// stop waiting for it.
    fn rank_failed(&mut self, rank: usize) {
        let _ = self.agreements.handle_input(Time::ZERO, agreement::Input::RankFailed(rank as u32));
        self.send_decisions();
    }

    fn send_decisions(&mut self) {
        while let Some(agreement::Output { key, decision }) = self.agreements.poll_output() {
            for slot in self.waiting.remove(&key).unwrap_or_default() {
                self.send(slot, ToProcess::Agreed { key, decision: decision.clone() });
            }
        }
    }

    fn agree(&mut self, now: Time, slot: usize, key: agreement::Key, members: Vec<u32>, flag: u32) {
        let from = self.layout.rank_of(slot) as u32;
        match self.agreements.handle_input(now, agreement::Input::Contribute { key, from, members, flag }) {
            Ok(()) => {
                self.waiting.entry(key).or_default().push(slot);
                self.send_decisions();
            }
            Err(e) => self.send(slot, ToProcess::AgreeRefused { key, reason: e.to_string() }),
        }
    }
}

// -------------------------------------------------------------------- inputs

impl JobSupervisor {
    fn registered_input(&mut self, slot: usize, addr: String, fd_addr: String, tolerant: bool, pid: u32) {
        if slot >= self.n() {
            return;
        }
        if self.procs[slot].registered {
            self.say(format!("warning: {} registered twice; ignoring the second", self.who(slot)));
            return;
        }
        let p = &mut self.procs[slot];
        p.registered = true;
        if p.pid == 0 {
            // A process on another host: its own word is all we know of its pid.
            p.pid = pid;
        }
        p.addr = Some(addr);
        p.fd_addr = fd_addr;
        self.tolerant &= tolerant;
        if self.world_sent || self.procs.iter().any(|p| p.addr.is_none()) {
            return;
        }
        self.world_sent = true;
        // Every process registered: a fault-aware program survives a lost rank.
        self.fencing.set_rank_loss_tolerated(self.tolerant);
        let addrs = self.procs.iter().map(|p| p.addr.clone().unwrap_or_default()).collect();
        let fd_addrs = self.procs.iter().map(|p| p.fd_addr.clone()).collect();
        let lease_us = if self.replicated { self.fencing.lease().as_micros() as u64 } else { 0 };
        self.out.push_back(Output::World { addrs, fd_addrs, lease_us });
        if !self.foreign.is_empty() {
            // Processes of other jobs of the universe declared dead before.
            self.tell_dead();
        }
    }

    /// A process that exited without registering before any other registered went unjudged
    /// then (nobody waited for it yet): once one registers, it fails the start-up as it would
    /// have later.
    fn exited_before_anyone_registered(&mut self, now: Time) {
        if self.world_sent || self.failure.is_some() {
            return;
        }
        let early = (0..self.n()).find_map(|s| {
            let p = &self.procs[s];
            let exit = p.exit.as_ref().filter(|_| p.judged && !p.registered && p.lost_peer.is_none())?;
            self.bad_end(s, exit).map(|(msg, code)| (s, msg, code))
        });
        if let Some((slot, msg, code)) = early {
            self.failed(now, slot, msg, code);
        }
    }

    fn peer_failed(&mut self, now: Time, by: usize, failed: usize, detail: String) {
        let n = self.n();
        // A replicated job's processes name universe slots.
        let failed = if self.replicated {
            match failed.checked_sub(self.settings.slot_base).filter(|&f| f < n) {
                Some(f) => f,
                None => {
                    // Another job's process: its own job decides (fencing).
                    if self.settings.relay && !self.heard_from_fenced(now, by) {
                        self.out.push_back(Output::RelaySuspect { slot: failed, why: detail });
                    }
                    return;
                }
            }
        } else {
            failed
        };
        if failed >= n || by >= n {
            return;
        }
        if self.world_sent && self.replicated {
            // Fencing: an excluded process that woke up suspects everybody (their connections
            // to it were closed); its word counts for nothing. A replica's rank may go on; one
            // that finalized did its work. It is excluded now and declared dead once its lease
            // ran out.
            if self.heard_from_fenced(now, by)
                || self.fenced(failed)
                || self.procs[failed].finalized
                || self.failure.is_some()
            {
                return;
            }
            self.suspect(now, failed, Some(by), detail);
            return;
        }
        if self.procs[failed].reported_failed {
            return;
        }
        self.procs[failed].reported_failed = true;
        let by_who = self.who(by);
        self.note(NoteKind::Failed, failed, format!("{detail} (detected by {by_who})"));
        if self.tolerant {
            self.say(format!("{detail} (detected by {by_who}); the program handles failures, the job goes on"));
            self.rank_failed(self.layout.rank_of(failed));
            return;
        }
        self.procs[by].lost_peer = Some(failed as u32);
        if self.failure.is_none() {
            self.say(format!("{detail} (detected by {by_who}); stopping the other processes"));
            self.fail(now, 1);
        }
    }

    fn spawn(&mut self, now: Time, slot: usize) {
        // Every replica of the root asks: the first performs the spawn, the others get its
        // outcome (one set of children, whoever is master).
        if self.replicated && self.heard_from_fenced(now, slot) {
            return;
        }
        match self.spawns.ask(slot) {
            Some(Ask::Perform(number)) => self.out.push_back(Output::Spawn { slot, number }),
            Some(Ask::Decided(a)) => self.send(slot, ToProcess::Spawned(a)),
            None => {}
        }
    }

    fn spawned(&mut self, slot: usize, number: u64, outcome: Result<u32, String>) {
        self.spawns.decide(slot, number, outcome.clone());
        self.send(slot, ToProcess::Spawned(outcome));
    }

    fn abort(&mut self, now: Time, slot: usize, code: i32, message: String, lost: Option<u32>) {
        if slot >= self.n() || self.replicated && self.heard_from_fenced(now, slot) {
            return;
        }
        let layout = self.layout;
        // A program that handles failures: a process reported failed (a false detection: it
        // ran on, abandoned by the others) that then stops on an error of its own (a peer
        // that no longer talks to it) is not a new failure of the job.
        if self.tolerant && !self.replicated && self.world_sent && self.procs[slot].reported_failed {
            let why = abort_text(&message, layout, slot);
            let why = if why.is_empty() { "aborted" } else { why };
            self.say(format!(
                "{}, reported failed earlier, stopped: {why}; the job goes on without it",
                self.who(slot)
            ));
            self.procs[slot].judged = true;
            return;
        }
        self.procs[slot].lost_peer = lost;
        if self.failure.is_some() {
            return;
        }
        let code = if code == 0 { 1 } else { code & 0xff };
        if let Some(peer) = lost {
            // A consequence of another rank's death: give that rank's own exit a moment to
            // arrive, so the report names the root cause.
            if self.provisional.is_none() {
                self.provisional = Some(Provisional { deadline: now + ROOT_CAUSE_GRACE, slot, peer, code, message });
            }
            return;
        }
        let why = abort_text(&message, layout, slot);
        let not_master = self.replicated_slot(slot) && self.master_of(layout.rank_of(slot)) != Some(slot);
        if self.world_sent && not_master && !self.fencing.is_dead(slot) {
            // A replica that is not its rank's master aborts (a panic where its master did
            // not: it diverged, e.g. on a non-deterministic probe): it is treated as failed,
            // the master goes on.
            let what = if why.is_empty() {
                format!("{} aborted (error code {code})", self.who(slot))
            } else if let Some(p) = panic_text(why) {
                // One line: the report names the process once.
                format!("{} {}", self.who(slot), p.replace('\n', " "))
            } else {
                format!("{} aborted: {why}", self.who(slot))
            };
            // It is ending: nothing more will come from it.
            if let Some(d) = self.ended(now, slot, &what) {
                self.report_and_judge(now, &d, &what, code);
            }
        } else if let Some(text) = panic_text(why) {
            let lines: Vec<String> = text.lines().map(|l| format!("{}: {l}", self.who(slot))).collect();
            self.out.extend(lines.into_iter().map(Output::Say));
            self.say(format!("{} panicked; stopping the other processes", self.who(slot)));
            self.fail(now, code);
        } else {
            if not_master {
                // Only masters are shown: this process's own message was not.
                if !why.is_empty() {
                    self.say(format!("{}: {why}", self.who(slot)));
                }
            } else if !message.is_empty() && !message.contains(&format!("rank {}:", layout.rank_of(slot))) {
                self.say(format!("{}: {message}", self.who(slot)));
            }
            self.say(format!("{} aborted the job (error code {code}); stopping the other processes", self.who(slot)));
            self.fail(now, code);
        }
    }

    fn lost(&mut self, now: Time, lost: Vec<usize>, why: String) {
        let lost: Vec<usize> = lost.into_iter().filter(|&s| s < self.n()).collect();
        // Replicas lost with their host, while the job runs: their ranks may go on.
        let survivable = self.world_sent
            && self.failure.is_none()
            && !lost.is_empty()
            && lost.iter().all(|&s| self.replicated_slot(s));
        for &slot in &lost {
            let p = &mut self.procs[slot];
            if p.exit.is_none() {
                self.exited += 1;
                p.exit = Some(killed());
                p.ctrl_closed = true;
                p.judged = true;
            }
        }
        if survivable {
            // Excluded now, declared dead once their lease ran out (they may still run, cut
            // off from their daemon): each declaration is reported.
            self.say(why);
            for slot in lost {
                if self.fenced(slot) || self.procs[slot].finalized {
                    continue;
                }
                self.procs[slot].reported_failed = true;
                let why = format!("{} was lost with its host", self.who(slot));
                self.suspect(now, slot, None, why);
            }
        } else if self.tolerant && self.world_sent && self.failure.is_none() {
            self.say(format!("{why}; the program handles failures, the job goes on"));
            for slot in lost {
                self.rank_failed(self.layout.rank_of(slot));
            }
        } else if self.failure.is_none() {
            self.say(format!("{why}; stopping the other processes"));
            self.fail(now, 1);
        }
    }

    fn foreign_suspect(&mut self, now: Time, slot: usize, why: String) {
        if slot >= self.n() {
            return;
        }
        if self.world_sent
            && self.replicated
            && self.failure.is_none()
            && !self.fenced(slot)
            && !self.procs[slot].finalized
        {
            // The accuser's text names universe ranks: the report names the process.
            let why =
                format!("{} failed: {} (detected by another job's process)", self.who(slot), failure_detail(&why));
            let _ = self.fencing.handle_input(now, fencing::Input::SuspectFromOutside { slot, why });
            for d in self.fencing_outputs() {
                self.on_declared(now, &d);
            }
        }
    }

    fn input(&mut self, now: Time, input: Input) {
        let n = self.n();
        match input {
            Input::Start(s) => {
                for (p, &pid) in self.procs.iter_mut().zip(&s.pids) {
                    p.pid = pid;
                }
                self.settings = s;
                self.start = now;
            }
            Input::Registered { slot, addr, fd_addr, tolerant, pid } => {
                self.first_registered.get_or_insert(now);
                self.registered_input(slot, addr, fd_addr, tolerant, pid);
                self.exited_before_anyone_registered(now);
            }
            Input::ForeignDead { slots } => {
                self.foreign.extend(slots);
                if self.world_sent {
                    self.tell_dead();
                }
            }
            Input::ForeignSuspect { slot, why } => self.foreign_suspect(now, slot, why),
            Input::PeerFailed { by, failed, detail } => self.peer_failed(now, by, failed, detail),
            Input::Spawn { slot } => self.spawn(now, slot),
            Input::Spawned { slot, number, outcome } => self.spawned(slot, number, outcome),
            Input::Agree { slot, key, members, flag } => {
                if !(self.replicated && self.heard_from_fenced(now, slot)) {
                    self.agree(now, slot, key, members, flag);
                }
            }
            Input::Revoke { slot, comm } => {
                if !(self.replicated && self.heard_from_fenced(now, slot)) && self.revoked.insert(comm) {
                    self.out.push_back(Output::Broadcast(ToProcess::Revoked { comm }));
                }
            }
            Input::Finalized { slot } => {
                if slot < n && !self.heard_from_fenced(now, slot) {
                    self.procs[slot].finalized = true;
                }
            }
            Input::Finalizing { slot } => {
                if slot < n && !self.fenced(slot) {
                    self.procs[slot].finalizing = true;
                }
            }
            Input::Heard { slot } => {
                let _ = self.fencing.handle_input(now, fencing::Input::Heard(slot));
            }
            Input::Abort { slot, code, message, lost } => self.abort(now, slot, code, message, lost),
            Input::ControlClosed { slot } => {
                // (An excluded process is declared when its exit is seen — after its output
                // was read to the end — or when its lease ran out.)
                if let Some(p) = self.procs.get_mut(slot) {
                    p.ctrl_closed = true;
                }
            }
            Input::Exited { slot, exit } => {
                if let Some(p) = self.procs.get_mut(slot).filter(|p| p.exit.is_none()) {
                    p.exit = Some(exit);
                    self.exited += 1;
                }
            }
            Input::Lost { slots, why } => self.lost(now, slots, why),
            Input::HostRevoked { slots, member } => {
                let procs: Vec<String> = slots.iter().filter(|&&x| x < self.n()).map(|&x| self.who(x)).collect();
                let why = format!("member {member} was revoked: its host's {} count as failed", procs.join(", "));
                self.lost(now, slots, why)
            }
            Input::Closed => self.finish(),
        }
    }
}

// -------------------------------------------------------------------- time

impl JobSupervisor {
    /// The job ends: its verdict.
    fn finish(&mut self) {
        if self.finished.is_some() {
            return;
        }
        // Every process ended before a lost-peer abort's grace ran out: it is still the failure.
        if let (None, Some(p)) = (self.failure, self.provisional.take()) {
            self.report_lost(&p);
            self.failure = Some(p.code);
        }
        let code = self.failure.unwrap_or(0);
        self.finished = Some(code);
        self.out.push_back(Output::Finished(code));
    }

    /// Reports that a process stopped because it lost `peer` (its own message says how).
    fn report_lost(&mut self, p: &Provisional) {
        let why = p.message.strip_prefix("p2pmpi: ").unwrap_or(&p.message);
        if !why.is_empty() {
            self.say(format!("{why}; stopping the other processes"));
            return;
        }
        let me = self.who(p.slot);
        let rank = self.layout.rank_of(p.peer as usize);
        if self.layout.replicas(rank) > 1 {
            self.say(format!("{me} lost every replica of rank {rank} and stopped; stopping the other processes"));
        } else {
            self.say(format!("{me} lost contact with rank {rank} and stopped; stopping the other processes"));
        }
    }

    /// The processes a stopped job waited for too long: given up on.
    fn give_up_unconfirmed(&mut self, now: Time) {
        if self.exited >= self.n() || self.stopped_at.is_none_or(|t| now.saturating_sub(t) < STOP_CONFIRM) {
            return;
        }
        for slot in 0..self.n() {
            if self.procs[slot].exit.is_some() {
                continue;
            }
            self.say(format!(
                "warning: {} (pid {}) did not confirm its end within {} s of being stopped (is its host cut off?); \
                 giving up on it: it may still run there",
                self.who(slot),
                self.procs[slot].pid,
                STOP_CONFIRM.as_secs()
            ));
            let p = &mut self.procs[slot];
            p.exit = Some(killed());
            p.ctrl_closed = true;
            p.judged = true;
            p.unconfirmed = true;
            self.exited += 1;
        }
    }

    /// Whether the job is over: every process ended and its last word was read (or waited
    /// for long enough).
    fn over(&mut self, now: Time) -> bool {
        if self.exited < self.n() {
            return false;
        }
        let unread = |p: &Proc| p.exit.is_some() && p.registered && !p.ctrl_closed && !p.judged;
        if !self.procs.iter().any(unread) {
            return true;
        }
        if now < *self.close_deadline.get_or_insert(now + CLOSE_WAIT) {
            return false;
        }
        for p in &mut self.procs {
            p.ctrl_closed = true;
        }
        // Their last word will not come: judged as they are.
        self.judge(now);
        !self.procs.iter().any(unread)
    }

    /// The timers: declarations due, the time limit, a lost-peer abort's grace, start-up.
    fn timers(&mut self, now: Time) {
        // Deaths declared now: suspects whose lease ran out.
        self.fencing.handle_timeout(now);
        for d in self.fencing_outputs() {
            self.on_declared(now, &d);
        }
        let running = self.exited < self.n();
        if let Some(limit) =
            self.settings.timeout.filter(|&t| self.failure.is_none() && running && now >= self.start + t)
        {
            self.say(format!(
                "the job ran longer than --timeout {} s; stopping every process (exit status {TIMEOUT_EXIT})",
                limit.as_secs()
            ));
            self.fail(now, TIMEOUT_EXIT);
        }
        if self.failure.is_none() && self.provisional.as_ref().is_some_and(|p| now >= p.deadline) {
            if let Some(p) = self.provisional.clone() {
                self.report_lost(&p);
                self.fail(now, p.code);
            }
        }
        if !self.world_sent
            && self.failure.is_none()
            && self.procs.iter().any(|p| p.registered)
            && now > self.start + self.settings.startup_timeout
        {
            let missing: Vec<usize> = (0..self.n()).filter(|&s| !self.procs[s].registered).collect();
            let list = if self.replicated {
                missing.iter().map(|&s| self.who(s)).collect::<Vec<_>>().join(", ")
            } else {
                format!("rank(s) {}", missing.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "))
            };
            self.say(format!(
                "start-up timed out after {} s: {list} never initialized MPI",
                self.settings.startup_timeout.as_secs()
            ));
            self.fail(now, 1);
        }
        self.join_notice(now);
    }

    /// The [`JoinNotice`], when due: the processes still running unregistered, named.
    fn join_notice(&mut self, now: Time) {
        let Some(notice) = self.settings.join_notice.clone() else { return };
        let due = self.first_registered.is_some_and(|t| now >= t + notice.after);
        if self.join_noticed || self.world_sent || self.failure.is_some() || !due {
            return;
        }
        self.join_noticed = true;
        let waiting: Vec<String> = (0..self.n())
            .filter(|&s| !self.procs[s].registered && self.procs[s].exit.is_none())
            .map(|s| match self.procs[s].pid {
                0 => self.who(s),
                pid => format!("{} (pid {pid})", self.who(s)),
            })
            .collect();
        if !waiting.is_empty() {
            let (runs, it) = if waiting.len() == 1 { ("runs but has", "it") } else { ("run but have", "them") };
            self.say(format!(
                "{} {runs} not initialized MPI {} s after the first process did: {}; the job waits for {it} until \
                 --startup-timeout ({} s)",
                waiting.join(", "),
                notice.after.as_secs_f64(),
                notice.cause,
                self.settings.startup_timeout.as_secs()
            ));
        }
    }

    /// Judges the processes that are gone and whose control connection is closed.
    fn judge(&mut self, now: Time) {
        for slot in 0..self.n() {
            let p = &self.procs[slot];
            let Some(exit) = p.exit.clone() else { continue };
            if p.judged || (p.registered && !p.ctrl_closed) {
                continue;
            }
            self.procs[slot].judged = true;
            if self.replicated && self.fenced(slot) {
                self.judge_fenced(now, slot);
                continue;
            }
            if self.failure.is_some() || self.procs[slot].lost_peer.is_some() {
                continue;
            }
            if let Some((msg, code)) = self.bad_end(slot, &exit) {
                self.failed(now, slot, msg, code);
            }
        }
    }

    /// An excluded or declared dead process ended, as it should.
    fn judge_fenced(&mut self, now: Time, slot: usize) {
        if !self.fencing.is_dead(slot) {
            if let Some(d) = self.ended(now, slot, "") {
                self.on_declared(now, &d);
            }
        }
        if let Some(at) = self.fencing.declared_at(slot).filter(|_| self.fencing.resumed(slot)) {
            let what = format!(
                "{} was declared dead at {:.1} s; it resumed and was stopped",
                self.who(slot),
                at.as_secs_f64()
            );
            self.say(what.clone());
            self.note(NoteKind::Fenced, slot, what);
        }
    }

    /// Whether `slot`'s end is a failure: the report and the exit status.
    fn bad_end(&self, slot: usize, exit: &Exit) -> Option<(String, i32)> {
        let p = &self.procs[slot];
        if !exit.success {
            Some((format!("{} (pid {}) {}", self.who(slot), p.pid, exit.how), exit.code))
        } else if p.registered && !p.finalized {
            Some((
                format!(
                    "{} (pid {}) exited without finalizing MPI (the Universe was not dropped)",
                    self.who(slot),
                    p.pid
                ),
                1,
            ))
        } else if !p.registered && self.procs.iter().any(|o| o.registered) && !self.world_sent {
            Some((
                format!(
                    "{} (pid {}) exited without initializing MPI while the other ranks wait for it{}",
                    self.who(slot),
                    p.pid,
                    self.settings.join_notice.as_ref().map(|n| format!("; {}", n.cause)).unwrap_or_default()
                ),
                1,
            ))
        } else {
            None
        }
    }

    /// `slot` failed (`msg` says how).
    fn failed(&mut self, now: Time, slot: usize, msg: String, code: i32) {
        // A replica that ended before finalizing: its rank may go on. (One that finalized and
        // then failed reports the program's own status.)
        if self.world_sent && self.replicated_slot(slot) && !self.procs[slot].finalized {
            if let Some(d) = self.ended(now, slot, &msg) {
                self.report_and_judge(now, &d, &msg, 1);
            }
            return;
        }
        self.note(NoteKind::Failed, slot, msg.clone());
        if self.tolerant && self.world_sent {
            self.say(format!("{msg}; the program handles failures, the job goes on"));
            self.rank_failed(self.layout.rank_of(slot));
            return;
        }
        self.say(format!("{msg}; stopping the other processes"));
        self.fail(now, code);
    }

    /// A program that handles failures, or replicas: once every process has ended or was
    /// declared failed, the failed ones (frozen, cut off) are stopped so the job can end.
    /// With replicas, a rank is also done once one of its replicas finalized and ended well:
    /// its other replicas still running (frozen but not detected before every other process
    /// ended, or far behind) are stopped after a grace period.
    fn stragglers(&mut self, now: Time) {
        if !((self.tolerant || self.replicated)
            && self.world_sent
            && !self.stragglers_stopped
            && self.failure.is_none())
        {
            return;
        }
        let n = self.n();
        let layout = self.layout;
        let gone = |s: usize| self.procs[s].reported_failed || self.fenced(s);
        let finished = |k: usize| {
            layout
                .slots_of(k)
                .any(|s| self.procs[s].finalized && self.procs[s].exit.as_ref().is_some_and(|e| e.success))
        };
        let redundant = |s: usize| self.replicated && !gone(s) && finished(layout.rank_of(s));
        let running: Vec<usize> = (0..n).filter(|&s| self.procs[s].exit.is_none()).collect();
        let waiting: Vec<usize> = running.iter().copied().filter(|&s| !gone(s)).collect();
        if running.is_empty() || !waiting.iter().all(|&s| redundant(s)) {
            self.redundant_deadline = None;
            return;
        }
        let stopped: Vec<usize> = (0..n).filter(|&s| gone(s) || waiting.contains(&s)).collect();
        let due = waiting.is_empty() || now >= *self.redundant_deadline.get_or_insert(now + REDUNDANT_GRACE);
        if !due {
            return;
        }
        self.stragglers_stopped = true;
        for &s in &waiting {
            self.say(format!(
                "{} was still running {:.0} s after its rank finished; stopping it",
                self.who(s),
                REDUNDANT_GRACE.as_secs_f64()
            ));
        }
        for s in stopped {
            self.procs[s].judged = true;
        }
        self.stop(now);
    }

    /// With replicas: once the only processes not finalizing are replicas whose rank has
    /// another one finalizing or finished (one frozen for a while, or slower), the job's
    /// output is complete and the others wait for their goodbyes: after [`LAG_NOTICE`] the
    /// job says which ones it waits for (each once).
    fn laggards(&mut self, now: Time) {
        let layout = self.layout;
        let live = |s: usize| {
            let p = &self.procs[s];
            p.exit.is_none() && !p.reported_failed && !self.fenced(s)
        };
        let ahead = |s: usize| {
            let p = &self.procs[s];
            (p.finalizing || p.finalized) && p.exit.as_ref().is_none_or(|e| e.success) && !self.fenced(s)
        };
        let lagging: Vec<usize> = (0..self.n()).filter(|&s| live(s) && !ahead(s)).collect();
        let behind = |s: usize| layout.slots_of(layout.rank_of(s)).any(|o| o != s && ahead(o));
        let waiting = self.replicated
            && self.world_sent
            && self.failure.is_none()
            && !self.stragglers_stopped
            && !lagging.is_empty()
            && lagging.iter().all(|&s| behind(s));
        let new: Vec<usize> = lagging.into_iter().filter(|s| !self.lag_said.contains(s)).collect();
        if !waiting || new.is_empty() {
            self.lag_deadline = None;
            return;
        }
        if now < *self.lag_deadline.get_or_insert(now + LAG_NOTICE) {
            return;
        }
        self.lag_deadline = None;
        let names: Vec<String> = new.iter().map(|&s| format!("{} (pid {})", self.who(s), self.procs[s].pid)).collect();
        self.say(format!("the job's output is complete; waiting for {}, which fell behind", names.join(", ")));
        self.lag_said.extend(new);
    }

    /// Everything that follows an input or the passing of time.
    fn advance(&mut self, now: Time) {
        if self.finished.is_some() {
            return;
        }
        self.judge(now);
        self.stragglers(now);
        self.laggards(now);
        self.give_up_unconfirmed(now);
        if self.over(now) {
            self.finish();
            return;
        }
        self.timers(now);
    }
}

impl Machine for JobSupervisor {
    type Input = Input;
    type Output = Output;
    type Rejected = Infallible;

    fn handle_input(&mut self, now: Time, input: Input) -> Result<(), Infallible> {
        if self.finished.is_none() {
            self.input(now, input);
            self.advance(now);
        }
        Ok(())
    }

    fn handle_timeout(&mut self, now: Time) {
        self.advance(now);
    }

    fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Time> {
        if self.finished.is_some() {
            return None;
        }
        let running = self.exited < self.n();
        let quiet = self.failure.is_none();
        let startup = !self.world_sent && quiet && self.procs.iter().any(|p| p.registered);
        [
            self.stopped_at.filter(|_| running).map(|t| t + STOP_CONFIRM),
            self.close_deadline,
            self.fencing.poll_timeout(),
            self.settings.timeout.filter(|_| quiet && running).map(|t| self.start + t),
            self.provisional.as_ref().filter(|_| quiet).map(|p| p.deadline),
            startup.then(|| self.start + self.settings.startup_timeout + Duration::from_millis(1)),
            self.settings
                .join_notice
                .as_ref()
                .filter(|_| startup && !self.join_noticed)
                .and_then(|n| self.first_registered.map(|t| t + n.after)),
            self.redundant_deadline.filter(|_| quiet && !self.stragglers_stopped),
            self.lag_deadline,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(v: u64) -> Time {
        Duration::from_millis(v)
    }

    const LEASE: Duration = Duration::from_millis(1000);

    /// A job of `n` ranks with `r` replicas each, started at 0 with pids 100 + slot.
    fn job(n: usize, r: usize) -> JobSupervisor {
        let layout = Layout::new(n, r);
        let mut s = JobSupervisor::new(layout, LEASE);
        let pids = (0..layout.slots()).map(|x| 100 + x as u32).collect();
        let start = Start { pids, startup_timeout: Duration::from_secs(10), ..Default::default() };
        s.handle_input(ms(0), Input::Start(start)).unwrap();
        s
    }

    fn feed(s: &mut JobSupervisor, at: u64, i: Input) -> Vec<Output> {
        s.handle_input(ms(at), i).unwrap();
        s.drain_outputs()
    }

    fn tick(s: &mut JobSupervisor, at: u64) -> Vec<Output> {
        s.handle_timeout(ms(at));
        s.drain_outputs()
    }

    fn said(out: &[Output]) -> Vec<String> {
        out.iter()
            .filter_map(|o| match o {
                Output::Say(l) => Some(l.clone()),
                _ => None,
            })
            .collect()
    }

    fn register_all(s: &mut JobSupervisor, at: u64, tolerant: bool) -> Vec<Output> {
        let mut out = Vec::new();
        for slot in 0..s.layout().slots() {
            let reg = Input::Registered { slot, addr: format!("a{slot}"), fd_addr: String::new(), tolerant, pid: 0 };
            out.extend(feed(s, at, reg));
        }
        out
    }

    /// Slot `slot` ends well: finalized, control closed, exit 0.
    fn ends_well(s: &mut JobSupervisor, at: u64, slot: usize) -> Vec<Output> {
        let mut out = feed(s, at, Input::Finalized { slot });
        out.extend(feed(s, at, Input::ControlClosed { slot }));
        out.extend(feed(s, at, Input::Exited { slot, exit: Exit::success() }));
        out
    }

    /// Slot `slot` is killed (SIGKILL): its connection closes, its end is seen.
    fn killed_at(s: &mut JobSupervisor, at: u64, slot: usize) -> Vec<Output> {
        let mut out = feed(s, at, Input::ControlClosed { slot });
        out.extend(feed(s, at, Input::Exited { slot, exit: Exit::signal(9, "SIGKILL") }));
        out
    }

    #[test]
    fn a_revoked_host_fails_its_processes_and_replicas_take_over() {
        // Replicated: rank 1 replica 0 (slot 2) on the revoked host; the job goes on.
        let mut s = job(2, 2);
        register_all(&mut s, 10, false);
        let out = feed(&mut s, 20, Input::HostRevoked { slots: vec![2], member: "bob".into() });
        let lines = said(&out);
        assert!(
            lines.iter().any(|l| l.contains("member bob was revoked") && l.contains("rank 1 replica 0")),
            "{lines:?}"
        );
        assert!(!out.contains(&Output::StopAll), "{out:?}");
        let mut out = Vec::new();
        for slot in [0, 1, 3] {
            out.extend(ends_well(&mut s, 100, slot));
        }
        out.extend(tick(&mut s, 5000));
        assert_eq!(out.last(), Some(&Output::Finished(0)), "{out:?}");
        // Not replicated: the job stops, saying why.
        let mut s = job(2, 1);
        register_all(&mut s, 10, false);
        let out = feed(&mut s, 20, Input::HostRevoked { slots: vec![1], member: "bob".into() });
        assert!(out.contains(&Output::StopAll), "{out:?}");
        assert!(said(&out).iter().any(|l| l.contains("member bob was revoked")), "{out:?}");
    }

    #[test]
    fn processes_are_named_by_rank_and_replica() {
        let one = Layout::new(4, 1);
        assert_eq!(who(one, 3), "rank 3");
        let rep = Layout::new(3, 2);
        assert_eq!(who(rep, 0), "rank 0 replica 0");
        assert_eq!(who(rep, 3), "rank 1 replica 1");
        assert_eq!(who(rep, 4), "rank 2 replica 0");
    }

    #[test]
    fn reports_do_not_repeat_the_process_name() {
        assert_eq!(failure_detail("rank 4 failed: no heartbeat for 9.5 s"), "no heartbeat for 9.5 s");
        assert_eq!(failure_detail("rank 2 replica 1 failed: silent"), "silent");
        assert_eq!(failure_detail("connection closed"), "connection closed");
        let l = Layout::new(3, 2);
        assert_eq!(abort_text("p2pmpi: rank 1: abort(7) called", l, 2), "abort(7) called");
        assert_eq!(abort_text("p2pmpi: rank 2: boom", l, 2), "boom");
        assert_eq!(abort_text("boom", l, 2), "boom");
    }

    #[test]
    fn the_table_goes_out_once_every_process_registered_and_a_clean_job_ends_with_0() {
        let mut s = job(3, 1);
        let out = register_all(&mut s, 10, false);
        let worlds: Vec<_> = out.iter().filter(|o| matches!(o, Output::World { .. })).collect();
        assert_eq!(worlds.len(), 1, "{out:?}");
        assert!(matches!(worlds[0], Output::World { addrs, lease_us: 0, .. } if addrs == &["a0", "a1", "a2"]));
        // A second registration is refused with a warning.
        let again = Input::Registered { slot: 1, addr: "x".into(), fd_addr: String::new(), tolerant: false, pid: 0 };
        assert_eq!(said(&feed(&mut s, 11, again)), ["warning: rank 1 registered twice; ignoring the second"]);
        let mut out = Vec::new();
        for slot in 0..3 {
            out.extend(ends_well(&mut s, 100, slot));
        }
        assert_eq!(out.last(), Some(&Output::Finished(0)));
        assert!(!out.contains(&Output::StopAll));
        assert_eq!(s.poll_timeout(), None);
    }

    #[test]
    fn without_replicas_the_first_failure_stops_the_job_with_its_status() {
        let mut s = job(3, 1);
        register_all(&mut s, 10, false);
        let out = killed_at(&mut s, 50, 1);
        assert_eq!(said(&out), ["rank 1 (pid 101) was killed by signal 9 (SIGKILL); stopping the other processes"]);
        assert!(out.contains(&Output::StopAll));
        // The others end, stopped: not reported.
        let mut out = killed_at(&mut s, 60, 0);
        out.extend(killed_at(&mut s, 60, 2));
        assert!(said(&out).is_empty(), "{out:?}");
        assert_eq!(out.last(), Some(&Output::Finished(137)));
    }

    #[test]
    fn a_process_that_never_registers_times_start_up_out() {
        let mut s = job(2, 1);
        feed(
            &mut s,
            5,
            Input::Registered { slot: 0, addr: "a".into(), fd_addr: String::new(), tolerant: false, pid: 0 },
        );
        let deadline = s.poll_timeout().expect("the start-up deadline");
        assert!(deadline > ms(10_000) && deadline <= ms(10_001), "{deadline:?}");
        assert!(tick(&mut s, 9_999).is_empty());
        let out = tick(&mut s, 10_001);
        assert_eq!(said(&out), ["start-up timed out after 10 s: rank(s) 1 never initialized MPI"]);
        assert!(out.contains(&Output::StopAll));
    }

    #[test]
    fn a_process_that_exited_unregistered_before_any_registered_fails_the_start_up_once_one_does() {
        let mut s = job(2, 1);
        let out = feed(&mut s, 5, Input::Exited { slot: 1, exit: Exit::success() });
        assert!(said(&out).is_empty(), "nobody waits for it yet: {out:?}");
        let reg = Input::Registered { slot: 0, addr: "a".into(), fd_addr: String::new(), tolerant: false, pid: 0 };
        let out = feed(&mut s, 9, reg);
        assert_eq!(
            said(&out),
            ["rank 1 (pid 101) exited without initializing MPI while the other ranks wait for it; stopping the other \
              processes"]
        );
        assert!(out.contains(&Output::StopAll));
    }

    #[test]
    fn a_process_that_does_not_join_is_named_early_with_its_likely_cause() {
        let layout = Layout::new(3, 1);
        let mut s = JobSupervisor::new(layout, LEASE);
        let notice = JoinNotice { after: Duration::from_secs(3), cause: "it loaded another MPI".into() };
        let start = Start {
            pids: vec![100, 101, 102],
            startup_timeout: Duration::from_secs(10),
            join_notice: Some(notice),
            ..Default::default()
        };
        s.handle_input(ms(0), Input::Start(start)).unwrap();
        // Nothing is due before a process registered.
        assert_eq!(s.poll_timeout(), None);
        let reg = Input::Registered { slot: 0, addr: "a".into(), fd_addr: String::new(), tolerant: false, pid: 0 };
        feed(&mut s, 1_000, reg);
        assert_eq!(s.poll_timeout(), Some(ms(4_000)));
        assert!(tick(&mut s, 3_999).is_empty());
        let out = tick(&mut s, 4_000);
        assert_eq!(
            said(&out),
            ["rank 1 (pid 101), rank 2 (pid 102) run but have not initialized MPI 3 s after the first process did: it \
              loaded another MPI; the job waits for them until --startup-timeout (10 s)"]
        );
        assert!(!out.contains(&Output::StopAll), "only a notice");
        // Once: the next deadline is the start-up time-out.
        assert!(s.poll_timeout().is_some_and(|t| t > ms(10_000)));
        // A process that exits unregistered is reported at once, with the likely cause.
        let out = feed(&mut s, 5_000, Input::Exited { slot: 2, exit: Exit::success() });
        assert_eq!(
            said(&out),
            ["rank 2 (pid 102) exited without initializing MPI while the other ranks wait for it; it loaded another MPI; \
              stopping the other processes"]
        );
        assert!(out.contains(&Output::StopAll));
    }

    #[test]
    fn a_killed_master_is_declared_at_once_and_its_rank_goes_on() {
        let mut s = job(2, 2);
        register_all(&mut s, 10, false);
        let out = killed_at(&mut s, 100, 0);
        assert!(out.contains(&Output::Declared { slot: 0 }), "{out:?}");
        assert!(out.contains(&Output::Broadcast(ToProcess::Dead { slots: vec![0] })));
        assert!(out.contains(&Output::Note {
            kind: NoteKind::Takeover,
            slot: 1,
            text: "rank 0 replica 1 took over from rank 0 replica 0".into()
        }));
        assert_eq!(
            said(&out),
            ["rank 0 replica 0 (pid 100) was killed by signal 9 (SIGKILL); rank 0 goes on with 1 replica(s)"]
        );
        assert!(!out.contains(&Output::StopAll));
        let mut out = Vec::new();
        for slot in 1..4 {
            out.extend(ends_well(&mut s, 200, slot));
        }
        assert_eq!(out.last(), Some(&Output::Finished(0)));
    }

    #[test]
    fn a_rank_that_loses_every_replica_stops_the_job_unless_the_program_handles_failures() {
        for tolerant in [false, true] {
            let mut s = job(2, 2);
            register_all(&mut s, 10, tolerant);
            killed_at(&mut s, 100, 2);
            let out = killed_at(&mut s, 110, 3);
            let text = said(&out).join("\n");
            if tolerant {
                assert!(text.ends_with("all replicas of rank 1 failed; the program handles failures, the job goes on"));
                assert!(!out.contains(&Output::StopAll));
            } else {
                assert!(text.ends_with("all replicas of rank 1 failed; stopping the other processes"), "{text}");
                assert!(out.contains(&Output::StopAll));
                killed_at(&mut s, 120, 0);
                let out = killed_at(&mut s, 120, 1);
                assert_eq!(out.last(), Some(&Output::Finished(1)));
            }
        }
    }

    #[test]
    fn a_replica_frozen_past_detection_is_declared_when_its_lease_ran_out_and_fenced_when_it_resumes() {
        let mut s = job(2, 2);
        register_all(&mut s, 10, false);
        for slot in 0..4 {
            assert_eq!(s.renew(ms(20), slot), Grant::Lease);
        }
        // Slot 3 freezes at 20 ms; the others renew; slot 2's detector suspects it at 900 ms.
        for t in [270, 520, 770] {
            for slot in 0..3 {
                s.renew(ms(t), slot);
            }
        }
        let out =
            feed(&mut s, 900, Input::PeerFailed { by: 2, failed: 3, detail: "rank 1 replica 1 failed: silent".into() });
        assert!(out.is_empty(), "excluded, not declared yet: {out:?}");
        let due = s.poll_timeout().expect("its lease's end");
        let out = tick(&mut s, due.as_millis() as u64);
        assert_eq!(
            said(&out),
            ["rank 1 replica 1 failed: silent (detected by rank 1 replica 0); rank 1 goes on with 1 replica(s)"]
        );
        // It resumes: its renewal and its reports are refused; it learns it was excluded.
        assert_eq!(s.renew(ms(3000), 3), Grant::Excluded);
        let out = feed(&mut s, 3001, Input::PeerFailed { by: 3, failed: 2, detail: "connection closed".into() });
        assert_eq!(
            out,
            [Output::Send { slot: 3, msg: ToProcess::Excluded { reason: "declared dead by the launcher".into() } }]
        );
        let out = killed_at(&mut s, 3010, 3);
        let text = said(&out).join("\n");
        assert!(
            text.starts_with("rank 1 replica 1 was declared dead at 1.")
                && text.ends_with("it resumed and was stopped"),
            "{text}"
        );
    }

    #[test]
    fn an_agreement_is_decided_once_a_failed_rank_is_declared() {
        let mut s = job(3, 1);
        register_all(&mut s, 10, true);
        let key = agreement::Key { comm: 1, seq: 0 };
        for slot in [0, 2] {
            let out = feed(&mut s, 20, Input::Agree { slot, key, members: vec![0, 1, 2], flag: 1 });
            assert!(out.is_empty(), "{out:?}");
        }
        let out = killed_at(&mut s, 30, 1);
        let decision = agreement::Decision { flag: 1, failed: vec![1], id: 0 };
        for slot in [0, 2] {
            assert!(
                out.contains(&Output::Send { slot, msg: ToProcess::Agreed { key, decision: decision.clone() } }),
                "{out:?}"
            );
        }
        assert!(!out.contains(&Output::StopAll), "the program handles failures");
    }

    #[test]
    fn a_replicated_spawn_is_performed_once() {
        let mut s = job(1, 2);
        register_all(&mut s, 10, false);
        assert_eq!(feed(&mut s, 20, Input::Spawn { slot: 1 }), [Output::Spawn { slot: 1, number: 0 }]);
        let out = feed(&mut s, 21, Input::Spawned { slot: 1, number: 0, outcome: Ok(5) });
        assert_eq!(out, [Output::Send { slot: 1, msg: ToProcess::Spawned(Ok(5)) }]);
        assert_eq!(
            feed(&mut s, 22, Input::Spawn { slot: 0 }),
            [Output::Send { slot: 0, msg: ToProcess::Spawned(Ok(5)) }]
        );
    }

    #[test]
    fn stragglers_of_a_finished_rank_are_stopped_after_a_grace() {
        let mut s = job(1, 2);
        register_all(&mut s, 10, false);
        ends_well(&mut s, 100, 0);
        assert_eq!(s.poll_timeout(), Some(ms(100) + REDUNDANT_GRACE));
        let out = tick(&mut s, 1100);
        assert_eq!(said(&out), ["rank 0 replica 1 was still running 1 s after its rank finished; stopping it"]);
        assert!(out.contains(&Output::StopAll));
        // It never confirms its end: given up on.
        let out = tick(&mut s, 6100);
        assert!(said(&out)[0].starts_with("warning: rank 0 replica 1 (pid 101) did not confirm its end"), "{out:?}");
        assert_eq!(out.last(), Some(&Output::Finished(0)));
        assert_eq!(s.unconfirmed(), vec![1]);
    }

    #[test]
    fn a_replica_that_fell_behind_is_named_once_its_peers_only_wait_for_it() {
        let mut s = job(3, 2);
        register_all(&mut s, 10, false);
        // Rank 2's replicas (slots 4 and 5) both still compute: nothing to say.
        for slot in 0..4 {
            feed(&mut s, 100, Input::Finalizing { slot });
        }
        assert!(said(&tick(&mut s, 1500)).is_empty());
        assert_eq!(s.poll_timeout(), None);
        // Replica 0 of rank 2 finalizes: replica 1 fell behind, and the job waits only for it.
        assert!(said(&feed(&mut s, 2000, Input::Finalizing { slot: 4 })).is_empty());
        assert_eq!(s.poll_timeout(), Some(ms(2000) + LAG_NOTICE));
        assert!(said(&tick(&mut s, 2999)).is_empty());
        let out = tick(&mut s, 3000);
        assert_eq!(
            said(&out),
            ["the job's output is complete; waiting for rank 2 replica 1 (pid 105), which fell behind"]
        );
        assert!(!out.contains(&Output::StopAll), "it is waited for, not stopped: {out:?}");
        // Said once.
        assert_eq!(s.poll_timeout(), None);
        assert!(said(&tick(&mut s, 5000)).is_empty());
        // It catches up: the job ends well.
        assert!(said(&feed(&mut s, 5100, Input::Finalizing { slot: 5 })).is_empty());
        let mut out = Vec::new();
        for slot in 0..6 {
            out.extend(ends_well(&mut s, 5200, slot));
        }
        out.extend(tick(&mut s, 5200 + CLOSE_WAIT.as_millis() as u64));
        assert_eq!(out.last(), Some(&Output::Finished(0)), "{out:?}");
    }

    #[test]
    fn a_lost_peer_abort_waits_for_the_root_cause() {
        let mut s = job(2, 1);
        register_all(&mut s, 10, false);
        let abort = Input::Abort { slot: 0, code: 1, message: String::new(), lost: Some(1) };
        assert!(said(&feed(&mut s, 50, abort)).is_empty());
        // The root cause arrives within the grace: it is the one reported.
        let out = killed_at(&mut s, 100, 1);
        assert_eq!(said(&out), ["rank 1 (pid 101) was killed by signal 9 (SIGKILL); stopping the other processes"]);
    }

    proptest! {
        /// Whatever happens to a job's processes, in whatever order, the supervisor ends the job
        /// once every process ended, exactly once and last; it declares no slot twice; a job
        /// that failed was stopped, and one that stopped the others failed; and it never waits
        /// for a deadline already past.
        #[test]
        fn every_schedule_ends_once_with_a_consistent_verdict(
            r in 1usize..3,
            tolerant in any::<bool>(),
            ops in proptest::collection::vec((0u8..8, 0usize..6, 0usize..6, 1u64..400), 1..60),
        ) {
            let mut s = job(3, r);
            let slots = s.layout().slots();
            let mut now = 0;
            let mut out = register_all(&mut s, 0, tolerant);
            for (op, a, b, dt) in ops {
                now += dt;
                let (a, b) = (a % slots, b % slots);
                let i = match op {
                    0 => Input::PeerFailed { by: a, failed: b, detail: "silent".into() },
                    1 => Input::Finalized { slot: a },
                    2 => Input::ControlClosed { slot: a },
                    3 => Input::Exited { slot: a, exit: if b % 2 == 0 { Exit::success() } else { Exit::status(3) } },
                    4 => Input::Abort { slot: a, code: 2, message: "boom".into(), lost: None },
                    5 => Input::Lost { slots: vec![a], why: "host lost".into() },
                    6 => Input::Agree { slot: a, key: agreement::Key { comm: 1, seq: 0 }, members: vec![0, 1, 2], flag: 1 },
                    _ => { s.renew(ms(now), a); continue; }
                };
                out.extend(feed(&mut s, now, i));
                if let Some(t) = s.poll_timeout() {
                    prop_assert!(t > ms(now) || t == ms(now), "deadline {t:?} before now {now}");
                }
                out.extend(tick(&mut s, now));
            }
            // Then every process ends.
            for slot in 0..slots {
                now += 10;
                out.extend(killed_at(&mut s, now, slot));
            }
            for _ in 0..20 {
                if s.finished().is_some() { break; }
                now = s.poll_timeout().map_or(now + 100, |t| t.as_millis() as u64 + 1);
                out.extend(tick(&mut s, now));
            }
            let finished: Vec<i32> = out.iter().filter_map(|o| match o { Output::Finished(c) => Some(*c), _ => None }).collect();
            prop_assert_eq!(finished.len(), 1, "{:?}", out);
            let mut declared = std::collections::BTreeSet::new();
            for o in &out {
                if let Output::Declared { slot } = o {
                    prop_assert!(declared.insert(*slot), "slot {} declared twice", slot);
                }
            }
            // A failed job was stopped; a job that said it stops the others failed.
            if finished[0] != 0 {
                prop_assert!(out.contains(&Output::StopAll), "{:?}", out);
            }
            if out.iter().any(|o| matches!(o, Output::Say(l) if l.ends_with("stopping the other processes"))) {
                prop_assert!(finished[0] != 0, "{:?}", out);
            }
            // Nothing follows the verdict.
            prop_assert_eq!(out.last(), Some(&Output::Finished(finished[0])));
        }
    }
}
