//! Failure detection for the running application: the FD service of each process, and the
//! notices it gives the program.
//!
//! Every process of a job started by `p2pmpirun` runs a failure detector (the seeds' FD
//! service, chapter §5): a thread that drives the pure [`p2pmpi_core::fd::Detector`] over a
//! UDP socket of its own. It gossips its heartbeat table every `T_GOSSIP` to the target the
//! application's protocol (`GOSSIP_PROTOCOL`, default DBRR) names, suspects a process whose
//! counter lags by `T_cleanup + T_MAX_HANG`, pings it, and confirms its failure when the ping
//! goes unanswered. It catches a process that crashes (`kill -9`), a process or host that
//! freezes (`SIGSTOP`: no TCP reset, only silence), a peer whose daemon dies with its
//! processes, and a host cut off by a firewall or a downed link.
//!
//! # Why in the process, over UDP
//!
//! The original ran one FD per host, in the peer daemon, over TCP. Here the detector runs
//! inside each MPI process: a frozen process is then silent even when its host's daemon is
//! fine, the same code serves jobs with and without peer daemons, and the simulator drives
//! the very same state machine. UDP keeps a silent destination from ever blocking a sender
//! (a TCP write to a frozen process eventually blocks) and needs no connection per pair.
//! Datagrams carry their sender's rank and end with a MAC on the job's key
//! ([`p2pmpi_wire::auth::JobKey::datagram_mac`]); one whose MAC does not verify, or that
//! does not come from that rank's address, is dropped.
//!
//! # What the program sees
//!
//! A confirmed failure becomes a [`Notice`]: handlers registered with [`on_failure`] run
//! (on the detector's thread), [`failed_ranks`] lists it, [`wait_for_failure`] returns it.
//! Then the [`Policy`] applies: by default ([`Policy::Stop`]) the process prints an error
//! naming the failed rank, tells its launcher, and exits — so an application without
//! replication stops everywhere within `T_cleanup` plus the ping time instead of hanging. A
//! program that handles failures itself calls [`set_policy`]`(Policy::Notify)` before
//! `initialize()`: it keeps running, its launcher lets the job go on, and communication
//! fails with [`CommError::PeerLost`](crate::CommError::PeerLost) naming the rank.
//!
//! `P2PMPI_FD_DEBUG=1` in a process's environment prints every suspicion, refutation and
//! failure with the heartbeat table.
//!
//! # The k-monitor detector
//!
//! With `p2pmpirun --fd kmonitor` (or `GOSSIP_PROTOCOL=KMONITOR`), the processes run the
//! self-organizing k-monitor detector instead (Horita; [`p2pmpi_core::kmonitor`]): each asks
//! `k` others to monitor it over TCP and sends them a heartbeat every `T_hb`; a monitor
//! reports a failure after `T_to` of silence, at once when the connection is reset (a
//! crash), and the notice is flooded on every connection. Its driver is [`kmonitor`]; its
//! failures become the same [`Notice`]s, with [`Cause::KMonitor`].

pub mod kmonitor;

use crate::launcher;
use p2pmpi_core::fd::{Detector, Event, FdConfig, Input, Message, Output, Protocol, Start};
use p2pmpi_core::machine::Machine;
use p2pmpi_wire::auth::JobKey;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::lifecycle::{policy, set_policy, Policy};

use crate::context::Failures;
pub use crate::context::{Cause, Notice};

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cause {
            Cause::Silent { suspicion_after, protocol } => write!(
                f,
                "rank {} failed: no heartbeat for {:.1} s ({protocol} gossip: T_cleanup + T_MAX_HANG) and no answer to a ping",
                self.rank,
                suspicion_after.as_secs_f64()
            ),
            Cause::KMonitor { how } => write!(f, "rank {} failed: {how}", self.rank),
        }
    }
}

/// What the detector found and told, in the context of the running process.
fn st() -> &'static Failures {
    &crate::context::current().failures
}

/// The same, `None` before `initialize`.
fn try_st() -> Option<&'static Failures> {
    crate::context::try_current().map(|c| &c.failures)
}

/// Whether any rank was reported failed to this process (cheap: no lock).
pub(crate) fn any_failed() -> bool {
    try_st().is_some_and(Failures::any_failed)
}

pub(crate) fn set_layout(f: &Failures, l: p2pmpi_core::replication::Layout) {
    let _ = f.layout.set(l);
}

/// A spawned replicated process: its job's detector indices start at universe slot `base`.
pub(crate) fn set_slot_base(f: &Failures, base: usize) {
    f.slot_base.store(base, Ordering::SeqCst);
}

/// The universe slot of the detector's index `i`.
fn universe_slot(f: &Failures, i: usize) -> usize {
    i + f.slot_base.load(Ordering::Relaxed)
}

/// The replicas' layout, when the job runs replicas.
pub(crate) fn layout() -> Option<p2pmpi_core::replication::Layout> {
    try_st().and_then(Failures::layout)
}

/// The k-monitor driver's control and counters, as the context keeps them.
struct KmonitorHandle(Arc<kmonitor::Control>, Arc<kmonitor::Counters>);

impl crate::context::Detector for KmonitorHandle {
    fn leave(&self, within: Duration) {
        self.0.leave(within);
    }
    fn declare(&self, index: u32) {
        self.0.declare(index);
    }
    fn counts(&self) -> [u64; 4] {
        let c = &self.1;
        [
            c.frames_sent.load(Ordering::Relaxed),
            c.bytes_sent.load(Ordering::Relaxed),
            c.rejected.load(Ordering::Relaxed),
            c.failure_msgs.load(Ordering::Relaxed),
        ]
    }
}

/// What this process's detector has sent so far: datagrams, bytes (UDP payload), and for
/// how long it has run. `None` when no detector runs.
pub fn detector_traffic() -> Option<(u64, u64, Duration)> {
    let f = try_st()?;
    let started = (*f.started.lock())?;
    let (mut n, mut b) = (f.sent_datagrams.load(Ordering::Relaxed), f.sent_bytes.load(Ordering::Relaxed));
    if let Some(k) = f.kmonitor.get() {
        let [frames, bytes, _, _] = k.counts();
        n += frames;
        b += bytes;
    }
    Some((n, b, started.elapsed()))
}

/// The address of this process's failure detector (UDP), when one runs. Not in rsmpi.
pub fn detector_address() -> Option<SocketAddr> {
    try_st()?.address.get().copied()
}

/// Datagrams this process's detector received and dropped so far: malformed, from another
/// job, or forged (their MAC on the job's key did not verify).
pub fn dropped_datagrams() -> u64 {
    try_st().map_or(0, |f| f.dropped_datagrams.load(Ordering::Relaxed) + f.kmonitor.get().map_or(0, |k| k.counts()[2]))
}

/// Failure notices this process's k-monitor detector sent so far (flooding); `None` with
/// gossip or no detector. Not in rsmpi.
pub fn failure_notices_sent() -> Option<u64> {
    try_st()?.kmonitor.get().map(|k| k.counts()[3])
}

/// Which detector this process runs: `"gossip"`, `"kmonitor"`, or `None`. Not in rsmpi.
pub fn detector_kind() -> Option<&'static str> {
    let f = try_st()?;
    f.started.lock().as_ref()?;
    Some(if f.kmonitor.get().is_some() { "kmonitor" } else { "gossip" })
}

/// The program ends (finalize, abort, a fatal error, a stop): a k-monitor detector tells its
/// peers that this process is leaving, not failing, and waits until that is written (at most
/// half a second; not at all on the detector's own thread).
pub(crate) fn leave() {
    if let Some(k) = try_st().and_then(|f| f.kmonitor.get()) {
        k.leave(Duration::from_millis(500));
    }
}

/// Runs `f` for every confirmed failure, on the failure detector's thread, before the
/// policy applies. Panics before `initialize` (the handlers belong to the running process).
pub fn on_failure(f: impl Fn(&Notice) + Send + Sync + 'static) {
    st().handlers.lock().push(Box::new(f));
}

/// The ranks confirmed failed so far.
pub fn failed_ranks() -> Vec<i32> {
    try_st().map_or_else(Vec::new, Failures::failed_ranks)
}

/// The notices so far.
pub fn notices() -> Vec<Notice> {
    try_st().map_or_else(Vec::new, |f| f.notices.lock().clone())
}

/// Waits up to `timeout` for the next failure notice after the `seen` first ones; returns it.
/// Panics before `initialize`.
pub fn wait_for_failure(seen: usize, timeout: Duration) -> Option<Notice> {
    let deadline = Instant::now() + timeout;
    let f = st();
    let mut g = f.notices.lock();
    while g.len() <= seen {
        if f.notice_cv.wait_until(&mut g, deadline).timed_out() {
            return g.get(seen).cloned();
        }
    }
    g.get(seen).cloned()
}

/// `T_cleanup + T_MAX_HANG` of this application, when a detector runs.
pub fn suspicion_after() -> Option<Duration> {
    try_st()?.suspicion_after()
}

// ----------------------------------------------------------------------------- the service

const MAGIC: &[u8; 3] = b"PFD";
const VERSION: u8 = 2;
const HEADER: usize = 3 + 1 + 4;
const MAC_LEN: usize = p2pmpi_wire::auth::DATAGRAM_MAC_LEN;
const MAX_DATAGRAM: usize = 65_507;

/// Encodes one detector message: `PFD`, version, sender rank (LE u32), the postcard-encoded
/// message, then the MAC of all that on the job's key (the key itself is not in the bytes).
pub fn encode(key: &JobKey, from: u32, msg: &Message) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + 16 + MAC_LEN);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&from.to_le_bytes());
    let mut out = postcard::to_extend(msg, out).expect("detector messages always serialize");
    let mac = key.datagram_mac(&out);
    out.extend_from_slice(&mac);
    out
}

/// Decodes a datagram; `None` for anything malformed, from another job or forged (its MAC
/// does not verify with `key`).
pub fn decode(key: &JobKey, bytes: &[u8]) -> Option<(u32, Message)> {
    if bytes.len() < HEADER + MAC_LEN || &bytes[..3] != MAGIC || bytes[3] != VERSION {
        return None;
    }
    let (signed, mac) = bytes.split_at(bytes.len() - MAC_LEN);
    if !key.verify_datagram(signed, mac) {
        return None;
    }
    let from = u32::from_le_bytes(signed[4..8].try_into().ok()?);
    match postcard::take_from_bytes(&signed[HEADER..]) {
        Ok((m, [])) => Some((from, m)),
        _ => None,
    }
}

/// What the launcher told this process about its detector.
pub(crate) struct Setup {
    pub addrs: Vec<SocketAddr>,
    pub config: FdConfig,
    pub delta_t: Duration,
    /// When the communicator was received (`tr_i`).
    pub received: Instant,
    /// The k-monitor detector instead of gossip.
    pub kmonitor: Option<(p2pmpi_core::kmonitor::Config, Vec<u8>)>,
}

/// Parses the launcher's [`p2pmpi_wire::control::FdSetup`].
pub(crate) fn setup_from_wire(
    s: &p2pmpi_wire::control::FdSetup,
    size: usize,
    received: Instant,
) -> Result<Setup, String> {
    if s.addrs.len() != size {
        return Err(format!("failure detector table has {} entries for {size} ranks", s.addrs.len()));
    }
    let addrs = s
        .addrs
        .iter()
        .map(|a| a.parse().map_err(|_| format!("bad failure detector address {a:?}")))
        .collect::<Result<Vec<SocketAddr>, String>>()?;
    let kmonitor = match &s.kmonitor {
        None => None,
        Some(k) => {
            if k.prefixes.len() != size {
                return Err(format!("k-monitor table has {} subnets for {size} ranks", k.prefixes.len()));
            }
            if k.k == 0
                || k.t_hb_us == 0
                || k.t_to_us <= k.t_hb_us
                || k.wide_t_hb_us == 0
                || k.wide_t_to_us <= k.wide_t_hb_us
                || k.wide_refusals == 0
            {
                return Err(format!(
                    "bad k-monitor settings: k = {}, T_hb = {} µs, T_to = {} µs, T'_hb = {} µs, T'_to = {} µs, \
                     {} refusals",
                    k.k, k.t_hb_us, k.t_to_us, k.wide_t_hb_us, k.wide_t_to_us, k.wide_refusals
                ));
            }
            let mut c = p2pmpi_core::kmonitor::Config::new(
                k.k as usize,
                Duration::from_micros(k.t_hb_us),
                Duration::from_micros(k.t_to_us),
            );
            c.confirm = k.confirm;
            c.wide_t_hb = Duration::from_micros(k.wide_t_hb_us);
            c.wide_t_to = Duration::from_micros(k.wide_t_to_us);
            c.wide_refusals = k.wide_refusals;
            Some((c, k.prefixes.clone()))
        }
    };
    let protocol: Protocol = if kmonitor.is_some() { Protocol::Dbrr } else { s.protocol.parse()? };
    if s.t_gossip_us == 0 && kmonitor.is_none() {
        return Err("T_GOSSIP of 0".into());
    }
    let config =
        FdConfig::new(protocol, Duration::from_micros(s.t_gossip_us.max(1)), Duration::from_micros(s.t_max_hang_us));
    Ok(Setup { addrs, config, delta_t: Duration::from_micros(s.delta_t_us), received, kmonitor })
}

/// Starts the detector thread of process `rank` on `socket` (gossip) or `listener` (the
/// k-monitor detector).
pub(crate) fn start(
    rank: usize,
    key: JobKey,
    socket: UdpSocket,
    listener: Option<std::net::TcpListener>,
    setup: Setup,
) -> std::io::Result<()> {
    if let Some((cfg, prefixes)) = setup.kmonitor.clone() {
        let listener = listener.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::AddrInUse, "no TCP port for the k-monitor detector")
        })?;
        return start_kmonitor(rank, key, listener, &setup.addrs, cfg, &prefixes);
    }
    let n = setup.addrs.len();
    let f = st();
    *f.suspicion_after.lock() = Some(setup.config.suspicion_after(n));
    if let Ok(a) = socket.local_addr() {
        let _ = f.address.set(a);
    }
    std::thread::Builder::new().name("p2pmpi-fd".into()).spawn(move || run(f, rank, key, socket, setup))?;
    Ok(())
}

fn run(f: &'static Failures, me: usize, key: JobKey, socket: UdpSocket, setup: Setup) {
    let n = setup.addrs.len();
    let started = Instant::now();
    *f.started.lock() = Some(started);
    let tg = setup.config.t_gossip;
    // FM equation 4, kept exact afterwards: this process's estimate of the instant the root
    // first sent the communicator, ts_1 = tr_i − Δt_i, is the origin of its clock, and its
    // counter is ⌊(t − ts_1)/T_gossip⌋ — equation 4's value at T_i, then one more every period,
    // with gossip sent at the same phase by every process. Counters of different processes
    // then agree to within the transit time of the communicator, so a failure is confirmed
    // between T_cleanup − T_gossip and T_cleanup after the victim's last gossip, plus the ping.
    let origin = setup.received.checked_sub(setup.delta_t).unwrap_or(setup.received);
    // Every process has started by Δt_i + T_gossip: the flat-tree send of the communicator is
    // one write per process to a local socket, far less than a T_gossip.
    let all_started = Start::adjusted(Duration::ZERO, Duration::ZERO, setup.delta_t + tg, tg).all_started;
    let start = Start { heartbeat: 0, all_started };
    let seed = key.seed("fd") ^ (me as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ std::process::id() as u64;
    let mut det = Detector::new(me, n, setup.config, Duration::ZERO, start, seed);
    let suspicion_after = setup.config.suspicion_after(n);
    let protocol = setup.config.protocol.to_string();
    let addrs = Arc::new(setup.addrs);
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        if crate::lifecycle::is_finalized() {
            return;
        }
        let now = origin.elapsed();
        det.handle_timeout(now);
        while let Some(out) = det.poll_output() {
            let ev = match out {
                Output::Transmit(tx) => {
                    let bytes = encode(&key, me as u32, &tx.msg);
                    // A send error (a host that went away: no route) is the silence the
                    // detector judges; nothing else to do.
                    let _ = socket.send_to(&bytes, addrs[tx.to]);
                    f.sent_datagrams.fetch_add(1, Ordering::Relaxed);
                    f.sent_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                    continue;
                }
                Output::Event(ev) => ev,
            };
            if std::env::var_os("P2PMPI_FD_DEBUG").is_some() {
                eprintln!(
                    "p2pmpi-fd: rank {me}: {ev:?} at {:?} (since the origin); heartbeats {:?}",
                    origin.elapsed(),
                    det.heartbeats()
                );
            }
            if let Event::Failed(k) = ev {
                let notice = Notice {
                    rank: k as i32,
                    at: crate::time(),
                    cause: Cause::Silent { suspicion_after, protocol: protocol.clone() },
                };
                deliver(f, me, notice);
            }
        }
        let wait =
            det.poll_timeout().unwrap_or(now + tg).saturating_sub(origin.elapsed()).max(Duration::from_millis(1));
        let _ = socket.set_read_timeout(Some(wait));
        match socket.recv_from(&mut buf) {
            Ok((len, src)) => {
                let Some((from, msg)) = decode(&key, &buf[..len]) else {
                    f.dropped_datagrams.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let from = from as usize;
                if from >= n || addrs[from] != src {
                    continue;
                }
                // Fencing: a process declared dead that wakes up is not heard any more.
                if f.layout().is_some() && is_declared_dead(f, universe_slot(f, from)) {
                    continue;
                }
                let _ = det.handle_input(origin.elapsed(), Input::Message { from, msg });
            }
            Err(_) => continue,
        }
    }
}

fn start_kmonitor(
    me: usize,
    key: JobKey,
    listener: std::net::TcpListener,
    addrs: &[SocketAddr],
    cfg: p2pmpi_core::kmonitor::Config,
    prefixes: &[u8],
) -> std::io::Result<()> {
    use p2pmpi_core::kmonitor::{Directory, Endpoint};
    let after = cfg.t_to * (1 + cfg.confirm as u32) + cfg.t_hb;
    let f = st();
    *f.suspicion_after.lock() = Some(after);
    if let Ok(a) = listener.local_addr() {
        let _ = f.address.set(a);
    }
    let eps: Vec<Endpoint> = addrs
        .iter()
        .zip(prefixes)
        .enumerate()
        .map(|(i, (a, &p))| Endpoint { id: i as u32, ip: a.ip(), prefix: p, port: a.port() })
        .collect();
    let wide = eps.iter().map(Endpoint::cluster).collect::<std::collections::BTreeSet<_>>().len() > 1;
    let dir = Arc::new(Directory::new(eps.iter().copied(), wide));
    let seed = key.seed("kmonitor") ^ (me as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ std::process::id() as u64;
    let setup = kmonitor::Setup { me: eps[me], dir, cfg, key, seed };
    let ctl = Arc::new(kmonitor::Control::default());
    let driver = kmonitor::Driver::new(setup, listener, ctl.clone())?;
    let _ = f.kmonitor.set(Box::new(KmonitorHandle(ctl.clone(), driver.counters())));
    *f.started.lock() = Some(Instant::now());
    let t_to = cfg.t_to;
    std::thread::Builder::new().name("p2pmpi-kmonitor".into()).spawn(move || {
        // A failure that stops this process (policy Stop): the node leaves first, so that the
        // others do not take this process's end for another failure.
        let mut stop = false;
        driver.run(
            |r| match r {
                kmonitor::Report::Failed { node, cause } => {
                    let how = kmonitor_words(f, cause, t_to);
                    let n = Notice { rank: node as i32, at: crate::time(), cause: Cause::KMonitor { how } };
                    if deliver_or_stop(f, me, n) && !stop {
                        stop = true;
                        ctl.request_leave();
                    }
                }
                kmonitor::Report::Excluded => {
                    if std::env::var_os("P2PMPI_FD_DEBUG").is_some() {
                        eprintln!("p2pmpi-fd: rank {me}: the k-monitor detectors declared this process failed");
                    }
                }
            },
            || false,
        );
        if stop {
            crate::fatal::exit(1);
        }
    })?;
    Ok(())
}

/// A k-monitor cause in words (the launcher prints them).
fn kmonitor_words(f: &Failures, cause: p2pmpi_core::kmonitor::Cause, t_to: Duration) -> String {
    use p2pmpi_core::kmonitor::Cause as K;
    let name = |id: u32| match f.layout() {
        Some(l) => format!("rank {} replica {}", l.rank_of(id as usize), l.replica_of(id as usize)),
        None => format!("rank {id}"),
    };
    match cause {
        K::Silent => format!("no heartbeat for {:.1} s (k-monitor T_to)", t_to.as_secs_f64()),
        K::Reset => "its k-monitor connection was reset (the process died)".into(),
        K::Unreachable => "no k-monitor connection could be opened to it".into(),
        K::NoAck => format!("it did not answer a monitor request within {:.1} s (k-monitor T_to)", t_to.as_secs_f64()),
        K::Notice { from } => format!("{} reported it failed (k-monitor notice)", name(from)),
        K::Declared => "declared dead by the launcher".into(),
        K::Excluded => "declared failed by the others".into(),
    }
}

/// This process suspects `slot` (replicated job): its detector confirmed it silent, its
/// connection broke, or a send to it stalled. Only the launcher declares deaths (fencing, see
/// [`p2pmpi_core::fencing`]): the suspicion is reported to it, once; the communication engine
/// acts when the launcher announces the dead set. Also while finalizing: the launcher must
/// learn of a replica that froze at the end (the others finish without it).
pub(crate) fn suspect(me: usize, slot: usize, detail: &str) {
    suspect_in(st(), me, slot, detail);
}

fn suspect_in(f: &Failures, me: usize, slot: usize, detail: &str) {
    {
        let mut s = f.suspected.lock();
        if s.contains(&slot) || f.dead_slots.lock().contains(&slot) {
            return;
        }
        s.push(slot);
    }
    launcher::report_peer_failed_tolerated(me as i32, slot as i32, detail);
}

/// The launcher announced the slots declared dead so far: the engine applies them at its
/// next step (algorithm 7), and the detector no longer listens to them.
pub(crate) fn declared_dead(f: &Failures, slots: &[u32]) {
    let mut dead = f.dead_slots.lock();
    let mut new = false;
    for &s in slots {
        if !dead.contains(&(s as usize)) {
            dead.push(s as usize);
            new = true;
        }
    }
    if new {
        f.pending.store(true, Ordering::SeqCst);
        if let Some(k) = f.kmonitor.get() {
            // The k-monitor driver names this job's processes by index.
            let base = f.slot_base.load(Ordering::Relaxed);
            for &s in slots {
                if let Some(i) = (s as usize).checked_sub(base) {
                    k.declare(i as u32);
                }
            }
        }
    }
}

/// Every replica of world rank `rank` was declared dead (a replicated job whose program
/// handles failures): the program's notices list it.
pub(crate) fn rank_lost(rank: i32) {
    let notice = Notice {
        rank,
        at: crate::lifecycle::time(),
        cause: Cause::KMonitor { how: "every replica of it was declared dead by the launcher".into() },
    };
    let f = st();
    {
        let mut g = f.notices.lock();
        if g.iter().any(|n| n.rank == rank) {
            return;
        }
        g.push(notice);
        f.notice_count.store(g.len(), Ordering::Release);
        f.notice_cv.notify_all();
    }
    // (Handlers are not run: this is the communication engine's thread, under its lock.)
}

/// Whether the launcher declared `slot` dead.
fn is_declared_dead(f: &Failures, slot: usize) -> bool {
    f.dead_slots.lock().contains(&slot)
}

/// A replica failed (replicated job): reported to the launcher as a suspicion.
fn deliver_replica(f: &Failures, me: usize, l: p2pmpi_core::replication::Layout, notice: Notice) {
    let slot = notice.rank as usize;
    let detail = format!(
        "rank {} replica {} failed: {}",
        l.rank_of(slot),
        l.replica_of(slot),
        notice.to_string().split_once(": ").map_or(String::new(), |(_, d)| d.to_string())
    );
    suspect_in(f, me, universe_slot(f, slot), &detail);
}

/// Records a confirmed failure, runs the handlers, and applies the policy.
fn deliver(f: &Failures, me: usize, notice: Notice) {
    if deliver_or_stop(f, me, notice) {
        leave();
        crate::fatal::exit(1);
    }
}

/// [`deliver`], except that it returns true where the process must stop (the caller exits
/// with status 1 once it has done what it must first: the k-monitor driver leaves).
fn deliver_or_stop(f: &Failures, me: usize, notice: Notice) -> bool {
    if let Some(l) = f.layout() {
        deliver_replica(f, me, l, notice);
        return false;
    }
    {
        let mut g = f.notices.lock();
        if g.iter().any(|n| n.rank == notice.rank) {
            return false;
        }
        g.push(notice.clone());
        f.notice_count.store(g.len(), Ordering::Release);
        f.notice_cv.notify_all();
    }
    for h in f.handlers.lock().iter() {
        h(&notice);
    }
    if launcher::is_finalizing() {
        // Peers that end after this process began to finalize are not failures.
        return false;
    }
    f.pending.store(true, Ordering::SeqCst);
    let detail = notice.to_string();
    match policy() {
        Policy::Stop => {
            let msg = format!("p2pmpi: rank {me}: {detail}; stopping");
            eprintln!("{msg}");
            launcher::report_peer_failed(me as i32, notice.rank, &detail);
            true
        }
        Policy::Notify => {
            launcher::report_peer_failed_tolerated(me as i32, notice.rank, &detail);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(b: u8) -> JobKey {
        JobKey::from_bytes([b; 32])
    }

    /// The launcher's k-monitor settings, the wide-area ones included, reach the detector's
    /// configuration; inconsistent ones are refused.
    #[test]
    fn kmonitor_settings_from_the_launcher() {
        let mut k = p2pmpi_wire::control::KmonitorSetup {
            k: 3,
            t_hb_us: 50_000,
            t_to_us: 500_000,
            confirm: true,
            prefixes: vec![8, 24],
            wide_t_hb_us: 300_000,
            wide_t_to_us: 3_000_000,
            wide_refusals: 5,
        };
        let wire = |k: &p2pmpi_wire::control::KmonitorSetup| p2pmpi_wire::control::FdSetup {
            addrs: vec!["127.0.0.1:1".into(), "10.0.0.1:2".into()],
            protocol: "KMONITOR".into(),
            t_gossip_us: 0,
            t_max_hang_us: 0,
            delta_t_us: 0,
            kmonitor: Some(k.clone()),
        };
        let s = setup_from_wire(&wire(&k), 2, Instant::now()).unwrap();
        let (c, prefixes) = s.kmonitor.unwrap();
        assert_eq!((c.k, c.t_hb, c.t_to, c.confirm), (3, Duration::from_millis(50), Duration::from_millis(500), true));
        assert_eq!(
            (c.wide_t_hb, c.wide_t_to, c.wide_refusals),
            (Duration::from_millis(300), Duration::from_secs(3), 5)
        );
        assert_eq!(prefixes, vec![8, 24]);
        k.wide_t_to_us = 300_000;
        assert!(setup_from_wire(&wire(&k), 2, Instant::now()).err().unwrap().contains("T'_to"));
        k.wide_t_to_us = 3_000_000;
        k.wide_refusals = 0;
        assert!(setup_from_wire(&wire(&k), 2, Instant::now()).is_err());
    }

    #[test]
    fn datagrams_roundtrip_and_other_jobs_are_rejected() {
        let m = Message::Gossip { heartbeats: vec![1, 2, 300_000] };
        let b = encode(&key(77), 3, &m);
        assert_eq!(decode(&key(77), &b), Some((3, m)));
        assert_eq!(decode(&key(78), &b), None);
        assert_eq!(decode(&key(77), &b[..10]), None);
        let mut bad = b.clone();
        bad[3] = 9;
        assert_eq!(decode(&key(77), &bad), None);
    }

    #[test]
    fn datagrams_with_a_bad_mac_are_dropped_and_the_key_is_not_in_them() {
        let k = key(0x3c);
        let m = Message::Pong { nonce: 5, heartbeat: 9 };
        let b = encode(&k, 1, &m);
        assert!(!b.windows(8).any(|w| w == [0x3c; 8]), "key bytes in a datagram");
        // Any flipped bit (the rank, the message, the MAC) and the datagram is dropped.
        for i in 0..b.len() {
            for bit in 0..8 {
                let mut f = b.clone();
                f[i] ^= 1 << bit;
                assert_eq!(decode(&k, &f), None, "byte {i} bit {bit}");
            }
        }
        // A forger who changes the sender and recomputes a MAC without the key: dropped.
        let mut forged = b[..b.len() - MAC_LEN].to_vec();
        forged[4] = 2;
        let mac = key(0).datagram_mac(&forged);
        forged.extend_from_slice(&mac);
        assert_eq!(decode(&k, &forged), None);
        // Trailing bytes after the message (inside the MAC) are refused too.
        let mut long = b[..b.len() - MAC_LEN].to_vec();
        long.push(0);
        let mac = k.datagram_mac(&long);
        long.extend_from_slice(&mac);
        assert_eq!(decode(&k, &long), None);
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&key(1), &bytes);
            let mut framed = encode(&key(1), 0, &Message::Ping { nonce: 1 })[..HEADER].to_vec();
            framed.extend_from_slice(&bytes);
            let _ = decode(&key(1), &framed);
            // With a valid MAC, garbage reaches the message decoder.
            let mac = key(1).datagram_mac(&framed);
            framed.extend_from_slice(&mac);
            let _ = decode(&key(1), &framed);
        }
    }
}
