//! The peer daemon: MPD, hosting the RS and FT services (SPEC §2–§4, thesis §3.1–§3.3).
//!
//! * **MPD** (membership and launch): registers with every configured supernode and keeps
//!   itself alive there; keeps the *cached host list* ([`PeerCache`]), refreshed from the
//!   supernodes and persisted to `PEER_CACHE`, so the peer keeps working from it while no
//!   supernode answers; measures the round-trip time of an application-level ping to each
//!   cached host; for a local submitter, runs discovery and reservation ([`Booking`]); and
//!   launches the processes of jobs whose reservation ticket its RS holds, streaming their
//!   output and exit status back to the submitter.
//! * **RS** (reservation service): the host's gatekeeper ([`Gatekeeper`]): `MAX_JOBS`,
//!   `MAX_PROCESSES_PER_JOB`, `HOST_DENY`/`HOST_ALLOW`, tickets, expiry of reservations never
//!   used.
//! * **FT** (file transfer): [`crate::ft`], staging into per-job directories.
//!
//! The decisions are the pure state machines of `p2pmpi-core`; this module is their driver
//! (sockets, threads, clock).

use crate::config::Config;
use crate::ft::{self, FtContext};
use crate::home::{self, Home, MpdState};
use crate::members;
use crate::server;
use crate::supernode;
use anyhow::{bail, Context, Result};
use p2pmpi_core::allocation::{booking_count, Strategy};
use p2pmpi_core::hosts::PeerCache;
use p2pmpi_core::machine::Machine;
use p2pmpi_core::reservation::{
    Answer, Booking, BookingError, ClaimError, Decision, Gatekeeper, HostFilter, Plan, Policy, Reply, Request,
};
use p2pmpi_wire::grid::*;
use p2pmpi_wire::secure::{GridSecret, SecureConn, SecureError, SecureWriter};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// Version shown by `mpistat` and `mpiboot`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The job directory's subdirectory where a launcher stages p2pmpi's library with MPICH's ABI
/// (as `libmpi.so.12`; docs/mpich-abi.md), naming it in [`ABI_DIR_ENV`] of the launch.
pub const ABI_DIR: &str = ".p2pmpi-abi";
/// The launch's variable naming [`ABI_DIR`]: its processes get that directory first on
/// `LD_LIBRARY_PATH`, with the library's other names (`libmpi.so`, `libmpich.so.12`) made there.
pub const ABI_DIR_ENV: &str = "P2PMPI_ABI_DIR";
/// Time allowed to reach another peer's service.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Time allowed for a supernode request.
const SUPERNODE_TIMEOUT: Duration = Duration::from_secs(2);

/// How a peer daemon runs.
pub struct MpdOpts {
    pub config: Config,
    pub home: Home,
    pub secret: GridSecret,
}

type Cache = PeerCache<PeerId, PeerInfo>;

struct Mpd {
    start: Instant,
    cfg: Config,
    home: Home,
    secret: GridSecret,
    me: PeerInfo,
    ip: IpAddr,
    supernodes: Vec<(String, Option<SocketAddr>)>,
    cache: Mutex<Cache>,
    gate: Mutex<Gatekeeper>,
    apps: Mutex<Vec<AppProcess>>,
    /// Recent events of the jobs submitted from here (`MpdRequest::JobNotices`), newest job
    /// last; bounded by [`HISTORY_JOBS`] and [`HISTORY_NOTICES`].
    history: Mutex<VecDeque<JobHistory>>,
    /// Processes started here, by job: pids to kill at halt.
    jobs: Mutex<HashMap<String, Vec<u32>>>,
    /// Jobs staged here, by reservation ticket: their directories go with a reservation that
    /// lapses or is cancelled before any launch (a launch removes its own at its end).
    staged: Mutex<HashMap<u128, HashSet<String>>>,
    halting: AtomicBool,
    last_refresh: Mutex<Option<Instant>>,
    registered: Mutex<HashSet<SocketAddr>>,
    /// How the processes of the jobs started here are confined (see [`crate::confine`]).
    confiner: crate::confine::Confiner,
    /// Member mode: the revoked members this peer knows ([`mpd_members`]).
    revoked: Option<members::Revoked>,
    /// Member mode: the submitter's certificate of each job running here, by job id.
    submitters: Mutex<HashMap<String, p2pmpi_wire::identity::Certificate>>,
    /// Member mode: a supernode refused this machine's certificate and said why (revoked,
    /// expired), at the last poll: jobs submitted here are refused with these words.
    refused_by: Mutex<Option<String>>,
    /// The last reason each host gave for refusing a reservation, and when: a reservation
    /// that fails names those given since it started.
    refusals: Mutex<HashMap<String, (Instant, String)>>,
}

#[path = "mpd_members.rs"]
mod mpd_members;

fn resolve(addr: &str) -> Option<SocketAddr> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs().ok()?.next()
}

/// A job's directory of shared-memory segments, removed when empty at the end of the
/// launch (another daemon of this host may still use it: the last one removes it).
struct ShmDir(std::path::PathBuf);

impl Drop for ShmDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Says at start how the jobs started here are confined, and what cannot be enforced.
fn announce_confinement(c: &crate::confine::Confiner) {
    if c.abi == 0 {
        if c.allow_unconfined {
            warn!("no Landlock in this kernel: other members' jobs run unconfined (ALLOW_UNCONFINED_JOBS=yes)");
        } else {
            warn!("no Landlock in this kernel: other members' jobs are refused (set ALLOW_UNCONFINED_JOBS=yes to run them unconfined)");
        }
    } else {
        info!("jobs run confined (Landlock ABI {}, limits {:?})", c.abi, c.limits);
    }
    if let Some((first, last)) = c.uids {
        info!("jobs run as user ids {first}-{last} (JOB_UIDS), one per job, never as root");
    } else {
        info!("jobs run as this daemon's user: a daemon that is not root cannot give them users of their own");
    }
    if c.cgroups.available() {
        info!("each job's processes and memory are counted apart, in a control group of its own");
    }
    for what in c.unenforced() {
        warn!("confined jobs: not enforced here: {what}");
    }
}

/// Where a daemon as root keeps its jobs' directories when its own directory is closed to
/// other users (as `/root` is): `/var/lib/p2pmpi/jobs-HASH`, HASH from the daemon's directory.
const RELOCATED_JOBS: &str = "/var/lib/p2pmpi";

/// Whether every directory above `dir` lets other users through (search permission).
fn reachable(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    dir.ancestors().skip(1).all(|a| std::fs::metadata(a).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

/// Lets the jobs' users reach their directories: `home`'s `jobs` becomes mode 711 (search
/// without listing); if a directory above it is closed to other users, `jobs` becomes a link
/// to a directory of [`RELOCATED_JOBS`] (the daemon's directory, its configuration and keys
/// keep their modes). The processes are given the resolved paths. Returns the directory of
/// [`RELOCATED_JOBS`] used, if any: the daemon removes it when it stops
/// ([`remove_relocated`]).
fn open_to_job_users(home: &Home) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let jobs = home.jobs();
    let resolved = std::fs::canonicalize(&jobs).unwrap_or_else(|_| jobs.clone());
    let mut relocated = None;
    let target = if reachable(&resolved) {
        resolved
    } else {
        let name = blake3::hash(home.dir.to_string_lossy().as_bytes()).to_hex();
        let target = std::path::Path::new(RELOCATED_JOBS).join(format!("jobs-{}", &name[..16]));
        let linked = std::fs::create_dir_all(&target).and_then(|()| {
            if std::fs::symlink_metadata(&jobs).is_ok_and(|m| !m.file_type().is_symlink()) {
                std::fs::remove_dir_all(&jobs)?;
            }
            if std::fs::read_link(&jobs).ok().as_deref() != Some(target.as_path()) {
                let _ = std::fs::remove_file(&jobs);
                std::os::unix::fs::symlink(&target, &jobs)?;
            }
            Ok(())
        });
        match linked {
            Ok(()) => info!(
                "{} is closed to other users: the jobs' directories are in {}",
                home.dir.display(),
                target.display()
            ),
            Err(e) => warn!("cannot move the jobs' directories to {}: {e}", target.display()),
        }
        relocated = Some(target.clone());
        target
    };
    let _ = std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o711));
    if !reachable(&target) {
        warn!("{} cannot be reached by the jobs' users: jobs will be refused here", target.display());
    }
    relocated
}

/// When the daemon stops: removes the relocated jobs' directory `target` (its jobs are
/// killed) and the `jobs` link of `home` to it, so that a stopped daemon leaves nothing in
/// [`RELOCATED_JOBS`]; the next start makes both again.
fn remove_relocated(home: &Home, target: &std::path::Path) {
    let jobs = home.jobs();
    if std::fs::read_link(&jobs).ok().as_deref() == Some(target) {
        let _ = std::fs::remove_file(&jobs);
    }
    if let Err(e) = std::fs::remove_dir_all(target) {
        if e.kind() != std::io::ErrorKind::NotFound {
            warn!("cannot remove {}: {e}", target.display());
        }
    }
}

/// The directory of the shared-memory segments of job `job` (`P2PMPI_SHM_DIR` of its
/// processes): `/dev/shm/p2pmpi-JOB` (the same for every daemon of this host, so that two
/// processes of the job started by two daemons of one host find each other's segments).
fn shm_dir_of(job: &str) -> std::path::PathBuf {
    let base = std::env::var_os("P2PMPI_SHM_DIR").map(std::path::PathBuf::from).unwrap_or_else(|| {
        if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm".into()
        } else {
            std::env::temp_dir()
        }
    });
    base.join(format!("p2pmpi-{job}"))
}

/// The address other hosts reach us at: EXTERNAL_IP, else the interface that routes to the
/// first supernode, else loopback.
pub fn advertised_ip(cfg: &Config, supernodes: &[(String, Option<SocketAddr>)]) -> IpAddr {
    if let Some(ip) = cfg.external_ip {
        return ip;
    }
    for (_, sn) in supernodes {
        let Some(sn) = sn else { continue };
        if let Ok(s) = UdpSocket::bind(("0.0.0.0", 0)) {
            if s.connect(sn).is_ok() {
                if let Ok(a) = s.local_addr() {
                    return a.ip();
                }
            }
        }
    }
    IpAddr::from([127, 0, 0, 1])
}

/// Feeds the RS one request at `now` and takes its answer (none for `Finish`).
fn ask_gate(gate: &mut Gatekeeper, now: Duration, request: Request) -> Option<Reply> {
    match gate.handle_input(now, request) {
        Ok(()) => {}
        Err(never) => match never {},
    }
    gate.poll_output()
}

/// [`Request::Reserve`] at `now`.
fn gate_reserve(gate: &mut Gatekeeper, now: Duration, ticket: u128, requester_ip: String, app: &str) -> Decision {
    match ask_gate(gate, now, Request::Reserve { ticket, requester_ip, app: app.to_string() }) {
        Some(Reply::Reserved { decision, .. }) => decision,
        r => unreachable!("the RS answers a reservation request with its decision, not {r:?}"),
    }
}

/// [`Request::Claim`] at `now`.
fn gate_claim(gate: &mut Gatekeeper, now: Duration, ticket: u128) -> Result<u32, ClaimError> {
    match ask_gate(gate, now, Request::Claim(ticket)) {
        Some(Reply::Claimed { result, .. }) => result,
        r => unreachable!("the RS answers a claim with its result, not {r:?}"),
    }
}

impl Mpd {
    fn now(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// The RS's time (its [`Gatekeeper`]'s): since the MPD started.
    fn clock(&self) -> Duration {
        self.start.elapsed()
    }

    fn connect(&self, addr: SocketAddr) -> Result<SecureConn, SecureError> {
        SecureConn::connect_from(Some(self.ip), addr, &self.secret, CONNECT_TIMEOUT)
    }

    fn persist_cache(&self) {
        let path = self.cfg.peer_cache_path();
        let cache = self.cache.lock().clone();
        if let Err(e) = home::write_json(&path, &cache) {
            warn!("cannot persist the host cache: {e:#}");
        }
    }

    fn supernode_call(&self, sn: SocketAddr, req: &SnRequest) -> Result<SnResponse> {
        supernode::call(Some(self.ip), sn, &self.secret, req, SUPERNODE_TIMEOUT)
    }

    /// Registers with supernodes not yet registered, keeps the others alive. A member
    /// without the host role lends nothing: it does not register (it still uses the lists).
    fn keep_alive(&self) {
        if self.secret.member_info().is_some_and(|m| !m.cert().body.roles.has(p2pmpi_wire::identity::Role::Host)) {
            return;
        }
        for (name, sn) in &self.supernodes {
            let Some(sn) = *sn else { continue };
            let registered = self.registered.lock().contains(&sn);
            let req =
                if registered { SnRequest::Alive(self.me.id.clone()) } else { SnRequest::Register(self.me.clone()) };
            match self.supernode_call(sn, &req) {
                Ok(SnResponse::Ok) => {
                    if !registered {
                        info!("registered with supernode {name}");
                        self.registered.lock().insert(sn);
                    }
                }
                Ok(SnResponse::UnknownPeer) => {
                    info!("supernode {name} forgot us; registering again");
                    self.registered.lock().remove(&sn);
                    if matches!(self.supernode_call(sn, &SnRequest::Register(self.me.clone())), Ok(SnResponse::Ok)) {
                        self.registered.lock().insert(sn);
                    }
                }
                Ok(other) => warn!("supernode {name} answered {other:?}"),
                Err(e) => {
                    if self.registered.lock().remove(&sn) || !registered {
                        warn!("supernode {name} unreachable: {e:#}");
                    }
                }
            }
        }
    }

    /// Fetches the host list from every reachable supernode. Returns false when none
    /// answered (the cache is then kept as it is).
    fn refresh(&self) -> bool {
        *self.last_refresh.lock() = Some(Instant::now());
        let mut lists = Vec::new();
        for (name, sn) in &self.supernodes {
            let Some(sn) = *sn else { continue };
            match self.supernode_call(sn, &SnRequest::List) {
                Ok(SnResponse::Hosts(h)) => lists.push(h),
                Ok(other) => warn!("supernode {name} answered {other:?} to a list request"),
                Err(e) => warn!("supernode {name} unreachable for the host list: {e:#}"),
            }
        }
        if lists.is_empty() {
            return false;
        }
        let now = self.now();
        {
            let mut cache = self.cache.lock();
            for (i, list) in lists.into_iter().enumerate() {
                let entries: Vec<(PeerId, PeerInfo)> = list.into_iter().map(|h| (h.info.id.clone(), h.info)).collect();
                if i == 0 {
                    cache.refresh(now, &self.me.id, entries);
                } else {
                    cache.merge(now, &self.me.id, entries);
                }
            }
        }
        self.persist_cache();
        true
    }

    /// Measures the round-trip time of an application-level ping to every cached host.
    fn ping_all(self: &Arc<Self>) {
        let hosts: Vec<PeerInfo> = self.cache.lock().entries().into_iter().map(|(_, e)| e.info).collect();
        for chunk in hosts.chunks(32) {
            std::thread::scope(|s| {
                for h in chunk {
                    let me = self.clone();
                    s.spawn(move || {
                        let addr =
                            SocketAddr::new(h.id.ip.parse().unwrap_or(IpAddr::from([127, 0, 0, 1])), h.id.mpd_port);
                        let r = me.connect(addr).and_then(|mut c| {
                            c.set_read_timeout(Some(CONNECT_TIMEOUT))?;
                            let t = Instant::now();
                            match c.call::<_, MpdResponse>(&MpdRequest::Ping)? {
                                MpdResponse::Pong => Ok(t.elapsed()),
                                _ => Err(SecureError::Malformed("not a pong".into())),
                            }
                        });
                        let now = me.now();
                        match r {
                            Ok(rtt) => me.cache.lock().measured(now, &h.id, rtt.as_micros().max(1) as u64),
                            Err(e) => {
                                let was_alive = me.cache.lock().get(&h.id).is_some_and(|e| e.alive);
                                if was_alive {
                                    warn!("host {} does not answer pings: {e}", h.id);
                                }
                                me.cache.lock().mark_dead(now, &h.id)
                            }
                        }
                    });
                }
            });
        }
    }

    fn info_of(&self, id: &PeerId) -> Option<PeerInfo> {
        if *id == self.me.id {
            return Some(self.me.clone());
        }
        self.cache.lock().get(id).map(|e| e.info.clone())
    }

    fn peer_addr(info: &PeerInfo, port: u16) -> SocketAddr {
        SocketAddr::new(info.id.ip.parse().unwrap_or(IpAddr::from([127, 0, 0, 1])), port)
    }

    /// Asks one host's RS for a reservation.
    fn ask_rs(&self, info: &PeerInfo, ticket: Ticket, app: &str) -> Answer {
        if info.id == self.me.id {
            return match gate_reserve(&mut self.gate.lock(), self.clock(), ticket.0, self.ip.to_string(), app) {
                Decision::Ok { p, .. } => Answer::Ok { p },
                Decision::Nok(reason) => {
                    info!("own RS refused ticket {ticket}: {reason}");
                    Answer::Nok
                }
            };
        }
        let timeout = Duration::from_millis(self.cfg.reserve_timeout_ms);
        let deadline = Instant::now() + timeout;
        let addr = Self::peer_addr(info, info.rs_port);
        // A connection closed before the answer is tried again within the time-out: a host
        // in a storm of requests closes connections still in their handshake to make room
        // (see `server`), and is busy, not dead. Only silence until the time-out is.
        let mut attempt = 0u32;
        let r = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let r = SecureConn::connect_from(Some(self.ip), addr, &self.secret, left).and_then(|mut c| {
                c.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
                c.call::<_, RsResponse>(&RsRequest::Reserve {
                    ticket,
                    app: app.to_string(),
                    submitter: self.ip.to_string(),
                })
            });
            attempt += 1;
            let pause = Duration::from_millis((10u64 << attempt.min(5)) + (home::random_u128() % 20) as u64);
            match r {
                Err(e) if closed_early(&e) && Instant::now() + pause < deadline => std::thread::sleep(pause),
                r => break r,
            }
        };
        match r {
            Ok(RsResponse::Ok { p, .. }) => Answer::Ok { p },
            Ok(RsResponse::Nok { reason }) => {
                info!("host {} refused the reservation: {reason}", info.id);
                self.refusals.lock().insert(info.id.to_string(), (Instant::now(), reason));
                Answer::Nok
            }
            Ok(other) => {
                warn!("host {} answered {other:?} to a reservation", info.id);
                Answer::Nok
            }
            Err(SecureError::RefusedBy(why)) => {
                let words = members::refused_words(&format!("host {}", info.id), &why);
                warn!("{words}");
                self.refusals.lock().insert(info.id.to_string(), (Instant::now(), words));
                Answer::Nok
            }
            Err(e) => {
                warn!("host {} did not answer the reservation: {e}", info.id);
                Answer::NoAnswer
            }
        }
    }

    /// Releases reservations (unused ones, or a job's at its end).
    fn cancel_on(&self, hosts: &[PeerInfo], ticket: Ticket) {
        std::thread::scope(|s| {
            for h in hosts {
                s.spawn(move || {
                    if h.id == self.me.id {
                        self.cancel_here(ticket);
                        return;
                    }
                    let addr = Self::peer_addr(h, h.rs_port);
                    let r = self.connect(addr).and_then(|mut c| {
                        c.set_read_timeout(Some(CONNECT_TIMEOUT))?;
                        c.call::<_, RsResponse>(&RsRequest::Cancel { ticket })
                    });
                    if let Err(e) = r {
                        warn!("could not cancel reservation {ticket} on {}: {e} (it will expire)", h.id);
                    }
                });
            }
        });
    }

    /// Discovery and reservation for a local submitter (thesis §3.3.2, figure 3.4).
    /// Asks the RS of every host of `ask` at once and records their answers in `booking`,
    /// telling the submitter the progress; a host that did not answer is marked dead.
    fn ask_round(
        &self,
        conn: &mut SecureConn,
        booking: &mut Booking<PeerId>,
        ask: &[PeerId],
        ticket: Ticket,
        app: &str,
        needed: u32,
    ) {
        let (tx, rx) = channel();
        std::thread::scope(|s| {
            for id in ask {
                let tx = tx.clone();
                s.spawn(move || {
                    let ans = match self.info_of(id) {
                        Some(info) => self.ask_rs(&info, ticket, app),
                        None => Answer::NoAnswer,
                    };
                    let _ = tx.send((id.clone(), ans));
                });
            }
            drop(tx);
            for (id, ans) in rx {
                booking.on_answer(&id, ans);
                if ans == Answer::NoAnswer {
                    self.cache.lock().mark_dead(self.now(), &id);
                }
                let _ = conn.send(&MpdResponse::Progress {
                    accepted: booking.accepted() as u32,
                    needed,
                    asked: ask.len() as u32,
                });
            }
        });
    }

    /// The booking succeeded: the hosts beyond *slist* are cancelled and the placements go
    /// to the submitter.
    fn send_plan(&self, conn: &mut SecureConn, plan: Plan<PeerId>, ticket: Ticket) -> Result<()> {
        let cancel: Vec<PeerInfo> = plan.cancel.iter().filter_map(|id| self.info_of(id)).collect();
        self.cancel_on(&cancel, ticket);
        let placements: Vec<Placement> = plan
            .placements
            .into_iter()
            .filter_map(|(id, ranks)| {
                self.info_of(&id).map(|info| Placement { info, ranks: ranks.into_iter().map(|x| x as u32).collect() })
            })
            .collect();
        info!("reservation {ticket}: {} host(s) kept, {} cancelled", placements.len(), cancel.len());
        conn.send(&MpdResponse::Reserved { ticket, placements })?;
        Ok(())
    }

    /// Why a reservation failed, in words. `allowed`: the hosts `-H`/`--hostfile` allowed, if
    /// it was given.
    fn booking_failed(
        &self,
        e: BookingError,
        booking: &Booking<PeerId>,
        wait_ms: u64,
        allowed: Option<usize>,
    ) -> String {
        match e {
            BookingError::SubmitterRefused => format!("this host's RS refused the job: {}", self.gate_refusal()),
            BookingError::Infeasible(why) => format!(
                "not enough peers after waiting {:.0} s: {} host(s) accepted ({} known{}, {} did not answer, {} \
                 busy); {why}",
                wait_ms as f64 / 1000.0,
                booking.accepted(),
                self.cache.lock().len() + 1,
                allowed.map_or(String::new(), |a| format!(", {a} allowed by -H/--hostfile")),
                booking.dead().len(),
                booking.refused().len(),
            ),
        }
    }

    /// The reasons hosts gave for refusing reservations since `t` (at most three, the same
    /// reason once): `; refused by 10.0.0.2:9897: member m3 has no submit role`.
    fn refusals_since(&self, t: Instant) -> String {
        let mut seen: Vec<(String, String)> = Vec::new();
        for (host, (at, why)) in self.refusals.lock().iter() {
            if *at >= t && !seen.iter().any(|(_, w)| w == why) {
                seen.push((host.clone(), why.clone()));
            }
        }
        seen.sort();
        seen.truncate(3);
        seen.iter().map(|(h, w)| format!("; refused by {h}: {w}")).collect()
    }

    fn reserve(&self, conn: &mut SecureConn, ask: Ask<'_>) -> Result<()> {
        let Ask { n, r, strategy, wait_ms, app, exclude, only } = ask;
        let started = Instant::now();
        let strategy: Strategy = match strategy.parse() {
            Ok(s) => s,
            Err(e) => {
                conn.send(&MpdResponse::Failed(e))?;
                return Ok(());
            }
        };
        if let Some(why) = self.refused_by.lock().clone() {
            conn.send(&MpdResponse::Failed(why))?;
            return Ok(());
        }
        let (n, r) = (n as usize, r as usize);
        if n == 0 || r == 0 {
            conn.send(&MpdResponse::Failed("-n and -r must be at least 1".into()))?;
            return Ok(());
        }
        let mut ticket = Ticket(home::random_u128());
        let deadline = Instant::now() + Duration::from_millis(wait_ms);
        let mut booking = Booking::new(n, r, strategy, self.me.id.clone());
        let allowed = allowed_hosts(only);
        let permitted = |id: &PeerId| {
            allowed.is_empty()
                || allowed.contains(&id.ip)
                || self.cache.lock().get(id).is_some_and(|e| allowed.contains(&e.info.name))
        };
        // Said once: what the grid gave against what the job needs.
        let mut told_short = false;
        // Hosts that did not answer, not asked again by a later round of this reservation.
        let mut gone: Vec<PeerId> = Vec::new();
        let want = booking_count(n, r);
        info!("reservation {ticket} for {app}: n={n} r={r} {strategy}, booking {want} host(s)");
        if !exclude.is_empty() {
            let list: Vec<String> = exclude.iter().map(|id| id.to_string()).collect();
            info!("reservation {ticket}: not asking {} (the submitter gave up on them)", list.join(", "));
        }
        loop {
            // Enough known hosts? Otherwise ask the supernodes first.
            let known = self.cache.lock().ranked().len() + 1;
            let stale = self.last_refresh.lock().is_none_or(|t| t.elapsed() > Duration::from_millis(200));
            if known < want && stale {
                self.refresh();
            }
            let mut candidates = vec![self.me.id.clone()];
            let ranked = self.cache.lock().ranked();
            candidates
                .extend(ranked.into_iter().filter(|id| !exclude.contains(id) && !gone.contains(id) && permitted(id)));
            let ask = booking.next_requests(&candidates);
            if !ask.is_empty() {
                self.ask_round(conn, &mut booking, &ask, ticket, app, (n * r) as u32);
            }
            match booking.decide() {
                Ok(plan) => return self.send_plan(conn, plan, ticket),
                Err(e @ (BookingError::SubmitterRefused | BookingError::Infeasible(_))) => {
                    // Busy: this host refused, or others did and every candidate was asked.
                    let busy = matches!(e, BookingError::SubmitterRefused)
                        || (!booking.refused().is_empty() && candidates.iter().all(|c| booking.was_asked(c)));
                    if Instant::now() >= deadline || (busy && wait_ms == 0) {
                        self.release_all(&booking, ticket);
                        let allowed = (!only.is_empty()).then_some(candidates.len());
                        let msg = self.booking_failed(e, &booking, wait_ms, allowed) + &self.refusals_since(started);
                        info!("reservation {ticket} failed: {msg}");
                        conn.send(&MpdResponse::Failed(msg))?;
                        return Ok(());
                    }
                    if busy {
                        // Hosts are busy (this one included, maybe): give back what this round
                        // holds (jobs booking at once would otherwise each keep part of the
                        // hosts and wait for the rest until their deadlines) and try them all
                        // again after a pause of random length, under a new ticket.
                        self.release_all(&booking, ticket);
                        gone.extend(booking.dead());
                        booking = Booking::new(n, r, strategy, self.me.id.clone());
                        ticket = Ticket(home::random_u128());
                        let jitter = Duration::from_millis(250 + (home::random_u128() % 500) as u64);
                        std::thread::sleep(jitter.min(deadline.saturating_duration_since(Instant::now())));
                        let _ = conn.send(&MpdResponse::Progress { accepted: 0, needed: (n * r) as u32, asked: 0 });
                        continue;
                    }
                    // Every candidate answered and the grid falls short: say so once, then wait
                    // for new peers (ask the supernodes again shortly).
                    if !told_short && booking.pending().is_empty() && candidates.iter().all(|c| booking.was_asked(c)) {
                        told_short = true;
                        let _ = conn.send(&MpdResponse::Short {
                            hosts: booking.accepted() as u32,
                            slots: booking.capacity() as u32,
                            needed: (n * r) as u32,
                            left_ms: deadline.saturating_duration_since(Instant::now()).as_millis() as u64,
                        });
                    }
                    let pause = Duration::from_millis(250).min(deadline.saturating_duration_since(Instant::now()));
                    std::thread::sleep(pause);
                    self.refresh();
                    let _ = conn.send(&MpdResponse::Progress {
                        accepted: booking.accepted() as u32,
                        needed: (n * r) as u32,
                        asked: 0,
                    });
                }
            }
        }
    }

    fn release_all(&self, booking: &Booking<PeerId>, ticket: Ticket) {
        let all: Vec<PeerInfo> = booking.all_accepted().iter().filter_map(|id| self.info_of(id)).collect();
        self.cancel_on(&all, ticket);
    }

    /// Why the member on `conn` may not run a job here (roles, `SUBMIT_ALLOW`; see
    /// [`members::may_run`]), `None` if it may.
    fn member_refusal(&self, conn: &SecureConn) -> Option<String> {
        let own = self.secret.member_info().map(|m| m.cert());
        let peer = conn.peer_member();
        // Revoked since this connection opened.
        if let (Some(r), Some(c)) = (&self.revoked, peer) {
            if r.revocations().is_revoked(&c.body) {
                return Some(format!("member {} is revoked", c.body.name));
            }
        }
        members::may_run(own.as_ref(), peer, &self.cfg.submit_allow).err()
    }

    fn gate_refusal(&self) -> String {
        let gate = self.gate.lock();
        let p = gate.policy();
        if p.max_jobs > 0 && gate.active() >= p.max_jobs as usize {
            format!("MAX_JOBS ({}) reached", p.max_jobs)
        } else {
            "this host is not permitted by its own HOST_DENY/HOST_ALLOW".into()
        }
    }
}

/// The operating system and its release, from `/proc` (`Linux 6.1.0`).
fn host_os() -> String {
    let read = |f: &str| std::fs::read_to_string(f).map(|s| s.trim().to_string()).unwrap_or_default();
    let (ty, rel) = (read("/proc/sys/kernel/ostype"), read("/proc/sys/kernel/osrelease"));
    if ty.is_empty() {
        std::env::consts::OS.to_string()
    } else {
        format!("{ty} {rel}")
    }
}

/// The one-minute load average (`/proc/loadavg`), 0 if unknown.
fn load_average() -> f32 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|w| w.parse().ok()))
        .unwrap_or(0.0)
}

/// (MemTotal, MemAvailable) in KiB from `/proc/meminfo`, zeros if unknown.
fn host_memory() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        text.lines().find_map(|l| l.strip_prefix(name)?.trim().trim_end_matches("kB").trim().parse().ok()).unwrap_or(0)
    };
    (field("MemTotal:"), field("MemAvailable:"))
}

/// A local submitter's reservation request.
/// `-H`/`--hostfile`: the hosts that may be reserved (by address, host name, or a name that
/// resolves to the address), this one aside.
fn allowed_hosts(only: &[String]) -> HashSet<String> {
    only.iter()
        .flat_map(|h| {
            use std::net::ToSocketAddrs;
            let mut names = vec![h.clone()];
            names.extend((h.as_str(), 0).to_socket_addrs().into_iter().flatten().map(|a| a.ip().to_string()));
            names
        })
        .collect()
}

struct Ask<'a> {
    n: u32,
    r: u32,
    strategy: &'a str,
    wait_ms: u64,
    app: &'a str,
    /// Hosts not to ask (the submitter gave up on them).
    exclude: &'a [PeerId],
    /// The only hosts that may be asked besides this one (`-H`/`--hostfile`; empty: any).
    only: &'a [String],
}

/// Runs a peer daemon in the foreground until `mpihalt`.
pub fn run(opts: MpdOpts) -> Result<()> {
    let MpdOpts { config: cfg, home, secret } = opts;
    home.create()?;
    let supernodes: Vec<(String, Option<SocketAddr>)> =
        cfg.supernodes.iter().map(|s| (s.clone(), resolve(s))).collect();
    for (s, _) in supernodes.iter().filter(|(_, a)| a.is_none()) {
        warn!("supernode address {s} does not resolve");
    }
    let ip = advertised_ip(&cfg, &supernodes);
    let bind_ip = cfg.external_ip.unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let bind = |port: u16, what: &str| {
        TcpListener::bind((bind_ip, port)).with_context(|| format!("cannot listen on {bind_ip}:{port} for the {what}"))
    };
    let mpd_l = bind(cfg.mpd_port, "MPD (MPD_PORT)")?;
    let rs_l = bind(cfg.rs_port, "RS (RS_PORT)")?;
    let ft_l = bind(cfg.ft_port, "FT (FT_PORT)")?;
    let port = |l: &TcpListener| l.local_addr().map(|a| a.port()).unwrap_or(0);
    let me = PeerInfo {
        id: PeerId { ip: ip.to_string(), mpd_port: port(&mpd_l) },
        rs_port: port(&rs_l),
        ft_port: port(&ft_l),
        fd_port: 0,
        capacity: cfg.max_processes_per_job,
        name: home::hostname(),
    };
    let cache: Cache = home::read_json(&cfg.peer_cache_path()).unwrap_or_default();
    if !cache.is_empty() {
        info!("loaded {} cached host(s) from {}", cache.len(), cfg.peer_cache_path().display());
    }
    let policy = Policy {
        max_jobs: cfg.max_jobs,
        max_procs: cfg.max_processes_per_job,
        filter: HostFilter::new(cfg.host_deny.clone(), cfg.host_allow.clone()),
        hold: Duration::from_millis(cfg.reservation_hold_ms),
    };
    let mut confiner = crate::confine::Confiner::from_config(&cfg);
    confiner.service_ports.extend([me.id.mpd_port, me.rs_port, me.ft_port]);
    let relocated = if confiner.uids.is_some() { open_to_job_users(&home) } else { None };
    announce_confinement(&confiner);
    let (revoked, owner) = mpd_members::member_state(&secret, &home)?;
    let mpd = Arc::new(Mpd {
        confiner,
        revoked,
        submitters: Mutex::new(HashMap::new()),
        refused_by: Mutex::new(None),
        refusals: Mutex::new(HashMap::new()),
        start: Instant::now(),
        home: home.clone(),
        secret: secret.clone(),
        me: me.clone(),
        ip,
        supernodes,
        cache: Mutex::new(cache),
        gate: Mutex::new(Gatekeeper::new(policy)),
        apps: Mutex::new(Vec::new()),
        history: Mutex::new(VecDeque::new()),
        jobs: Mutex::new(HashMap::new()),
        staged: Mutex::new(HashMap::new()),
        halting: AtomicBool::new(false),
        last_refresh: Mutex::new(None),
        registered: Mutex::new(HashSet::new()),
        cfg,
    });
    {
        let m = mpd.clone();
        server::serve("mpd", mpd_l, secret.clone(), move |c, peer| m.serve_mpd(c, peer));
        let m = mpd.clone();
        server::serve("rs", rs_l, secret.clone(), move |c, peer| m.serve_rs(c, peer));
        let m = mpd.clone();
        let mut ctx = FtContext::new(home.ft_cache(), home.jobs(), secret.clone(), move |t, job| {
            let live = matches!(
                ask_gate(&mut m.gate.lock(), m.clock(), Request::Touch(t.0)),
                Some(Reply::Touched { live: true, .. })
            );
            if live {
                m.staged.lock().entry(t.0).or_default().insert(job.to_string());
            }
            live
        });
        ctx.cache_max = mpd.cfg.ft_cache_max;
        ctx.fetch_max = mpd.cfg.ft_fetch_max;
        (ctx.job_max, ctx.ckpt_max) = (mpd.cfg.ft_job_max, mpd.cfg.checkpoint_max);
        ft::serve(ft_l, Arc::new(ctx));
    }
    home::write_json(
        &home.mpd_state(),
        &MpdState {
            pid: std::process::id(),
            ip,
            mpd_port: me.id.mpd_port,
            rs_port: me.rs_port,
            ft_port: me.ft_port,
            fd_port: me.fd_port,
            version: VERSION.into(),
        },
    )?;
    info!(
        "MPD {} up (RS port {}, FT port {}, P={}, J={}); supernodes: {}",
        me.id,
        me.rs_port,
        me.ft_port,
        mpd.cfg.max_processes_per_job,
        mpd.cfg.max_jobs,
        mpd.cfg.supernodes.join(", ")
    );
    mpd.start_member_poll(owner);
    // Membership: keep-alive, cache refresh, latency, reservation expiry.
    let tick = Duration::from_millis(50);
    let mut next_alive = Instant::now();
    let mut next_refresh = Instant::now();
    let mut next_ping = Instant::now();
    let mut first = true;
    while !mpd.halting.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= next_alive {
            mpd.keep_alive();
            next_alive = Instant::now() + Duration::from_millis(mpd.cfg.alive_period_ms);
        }
        if now >= next_refresh {
            let due = mpd.last_refresh.lock().is_none_or(|t| t.elapsed() >= Duration::from_millis(100));
            if due {
                mpd.refresh();
            }
            next_refresh = Instant::now() + Duration::from_millis(mpd.cfg.refresh_period_ms);
            if first {
                next_ping = Instant::now();
                first = false;
            }
        }
        if now >= next_ping {
            mpd.ping_all();
            next_ping = Instant::now() + Duration::from_millis(mpd.cfg.ping_period_ms);
        }
        mpd.release_lapsed();
        std::thread::sleep(tick);
    }
    // Halt: stop local processes, leave the supernodes, remove the state file.
    let pids: Vec<u32> = mpd.jobs.lock().values().flatten().copied().collect();
    for pid in pids {
        let _ = crate::os::signal(pid, libc::SIGKILL);
    }
    for (name, sn) in &mpd.supernodes {
        if let Some(sn) = sn {
            if let Err(e) = mpd.supernode_call(*sn, &SnRequest::Unregister(mpd.me.id.clone())) {
                warn!("could not unregister from supernode {name}: {e:#}");
            }
        }
    }
    mpd.persist_cache();
    relocated.iter().for_each(|target| remove_relocated(&home, target));
    let _ = std::fs::remove_file(home.mpd_state());
    info!("MPD halted");
    Ok(())
}

impl Mpd {
    fn serve_rs(self: &Arc<Self>, mut conn: SecureConn, peer: SocketAddr) {
        loop {
            let req: RsRequest = match conn.recv() {
                Ok(Some(r)) => r,
                Ok(None) => return,
                Err(e) => return server::log_end("rs", peer, &e),
            };
            let now = self.clock();
            let answer = match req {
                RsRequest::Reserve { ticket, app, submitter } => {
                    let d = match self.member_refusal(&conn) {
                        Some(why) => Decision::Nok(why),
                        None => gate_reserve(&mut self.gate.lock(), now, ticket.0, peer.ip().to_string(), &app),
                    };
                    match d {
                        Decision::Ok { p, expires_at } => {
                            info!("reserved for {app} from {submitter} ({peer}): ticket {ticket}, P={p}");
                            RsResponse::Ok { p, expires_ms: expires_at.saturating_sub(now).as_millis() as u64 }
                        }
                        Decision::Nok(reason) => {
                            info!("refused a reservation for {app} from {peer}: {reason}");
                            RsResponse::Nok { reason }
                        }
                    }
                }
                RsRequest::Cancel { ticket } => {
                    if self.cancel_here(ticket) {
                        info!("reservation {ticket} cancelled by {peer}");
                    }
                    RsResponse::Cancelled
                }
            };
            if let Err(e) = conn.send(&answer) {
                return server::log_end("rs", peer, &e);
            }
        }
    }

    fn serve_mpd(self: &Arc<Self>, mut conn: SecureConn, peer: SocketAddr) {
        let local = server::is_local(peer.ip(), self.ip);
        loop {
            let req: MpdRequest = match conn.recv() {
                Ok(Some(r)) => r,
                Ok(None) => return,
                Err(e) => return server::log_end("mpd", peer, &e),
            };
            let local_only = matches!(
                req,
                MpdRequest::Halt
                    | MpdRequest::Reserve { .. }
                    | MpdRequest::Release { .. }
                    | MpdRequest::Announce(_)
                    | MpdRequest::Retire { .. }
                    | MpdRequest::JobNotices { .. }
            );
            if local_only && !local {
                warn!("mpd: refused {req:?} from remote host {peer}");
                let _ =
                    conn.send(&MpdResponse::Failed("this request is accepted from the peer's own host only".into()));
                return;
            }
            let answer = match req {
                MpdRequest::Ping => MpdResponse::Pong,
                MpdRequest::Hosts => {
                    let now = self.now();
                    let hosts = self
                        .cache
                        .lock()
                        .entries()
                        .into_iter()
                        .map(|(_, e)| CachedHost {
                            info: e.info,
                            rtt_us: e.rtt_us,
                            alive: e.alive,
                            updated_ms: now.saturating_sub(e.updated_ms),
                        })
                        .collect();
                    MpdResponse::Hosts { me: self.me.id.clone(), hosts }
                }
                MpdRequest::Stat => {
                    // A process that ended is no longer shown, however it ended (a submitter
                    // interrupted before it could retire its rank 0, say).
                    self.apps.lock().retain(|a| home::pid_alive(a.pid));
                    MpdResponse::Stat {
                        me: self.me.id.clone(),
                        version: VERSION.into(),
                        apps: self.apps.lock().clone(),
                    }
                }
                MpdRequest::Report => {
                    self.apps.lock().retain(|a| home::pid_alive(a.pid));
                    let (max_jobs, max_procs, jobs) = {
                        let gate = self.gate.lock();
                        let p = gate.policy();
                        (p.max_jobs, p.max_procs, gate.active() as u32)
                    };
                    let (mem_total_kb, mem_available_kb) = host_memory();
                    MpdResponse::Report(HostReport {
                        me: self.me.id.clone(),
                        name: self.me.name.clone(),
                        os: host_os(),
                        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
                        load1: load_average(),
                        mem_total_kb,
                        mem_available_kb,
                        max_jobs,
                        max_procs,
                        jobs,
                        apps: self.apps.lock().clone(),
                        version: VERSION.into(),
                        history: self.history.lock().iter().cloned().collect(),
                    })
                }
                MpdRequest::Halt => {
                    info!("halt requested from {peer}");
                    self.halting.store(true, Ordering::SeqCst);
                    MpdResponse::Halting
                }
                MpdRequest::Reserve { n, r, strategy, wait_ms, app, exclude, only } => {
                    let _ = conn.set_read_timeout(None);
                    let ask = Ask { n, r, strategy: &strategy, wait_ms, app: &app, exclude: &exclude, only: &only };
                    if let Err(e) = self.reserve(&mut conn, ask) {
                        warn!("reservation for {app}: the submitter went away: {e:#}");
                    }
                    continue;
                }
                MpdRequest::Release { ticket, peers } => {
                    self.cancel_on(&peers, ticket);
                    MpdResponse::Ok
                }
                MpdRequest::Announce(p) => {
                    self.apps.lock().push(p);
                    MpdResponse::Ok
                }
                MpdRequest::Retire { job, rank } => {
                    self.apps.lock().retain(|a| !(a.job == job && a.rank == rank));
                    MpdResponse::Ok
                }
                MpdRequest::Launch(spec) => {
                    match self.member_refusal(&conn) {
                        Some(why) => {
                            warn!("launch of {} for {peer} refused: {why}", spec.app);
                            let _ = conn.send(&JobEvent::Refused(why));
                        }
                        None => {
                            let job = spec.job.clone();
                            if let Some(c) = conn.peer_member() {
                                self.submitters.lock().insert(job.clone(), c.clone());
                            }
                            self.launch(conn, peer, spec);
                            self.submitters.lock().remove(&job);
                        }
                    }
                    return;
                }
                MpdRequest::JobNotices { job, app, notices } => {
                    record_notices(&mut self.history.lock(), job, app, notices);
                    MpdResponse::Ok
                }
            };
            if let Err(e) = conn.send(&answer) {
                return server::log_end("mpd", peer, &e);
            }
        }
    }

    /// Starts a job's processes here and streams their output and exit to the submitter
    /// (thesis §3.2 steps 5–9). The connection's end means the submitter is gone: the
    /// processes are killed, so nothing is left behind.
    fn launch(self: &Arc<Self>, conn: SecureConn, peer: SocketAddr, spec: LaunchSpec) {
        let (mut reader, writer) = conn.split();
        let writer = Arc::new(Mutex::new(writer));
        let send = |w: &Arc<Mutex<SecureWriter>>, ev: &JobEvent| {
            let _ = w.lock().send(ev);
        };
        let refuse = |why: String| {
            warn!("launch of {} for {peer} refused: {why}", spec.app);
            send(&writer, &JobEvent::Refused(why));
        };
        // From here on every way out (refusal, a process that cannot start, a panic, the
        // job's end) releases the reservation, and once the job id is valid, removes what the
        // job left here: `claim` does it when dropped.
        let (p, mut claim) = match self.claim(spec.ticket) {
            Ok(c) => c,
            Err(why) => return refuse(why),
        };
        let dir = match ft::job_dir(&self.home.jobs(), &spec.job) {
            // Resolved: the job's user may not pass through the daemon's directory.
            Ok(d) => std::fs::canonicalize(&d).unwrap_or(d),
            Err(e) => return refuse(format!("{e:#}")),
        };
        claim.job = Some(spec.job.clone());
        if spec.ranks.len() > p as usize {
            return refuse(format!("{} processes asked, MAX_PROCESSES_PER_JOB is {p}", spec.ranks.len()));
        }
        let program = match ft::safe_join(&dir, &spec.program) {
            Ok(p) if p.is_file() => p,
            Ok(_) => return refuse(format!("program {} was not staged", spec.program)),
            Err(e) => return refuse(format!("{e:#}")),
        };
        info!("launching {} rank(s) {:?} of {} (job {}) for {peer}", spec.ranks.len(), spec.ranks, spec.app, spec.job);
        for (k, _) in &spec.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return refuse(format!("invalid environment variable name {k:?}"));
            }
        }
        if let Some(why) = self.confiner.refusal() {
            return refuse(why);
        }
        if self.confiner.uid_for(&spec.job).is_none() {
            // As the daemon's user the job may write its staged files: copies of its own, not
            // the FT cache's inodes that other jobs share.
            if let Err(e) = crate::confine::unshare_files(&dir) {
                return refuse(format!("cannot copy the staged files: {e}"));
            }
        }
        // What the job directory holds before the processes run (staged files): not collected
        // unless they change it.
        let before = if spec.collect.is_empty() { HashMap::new() } else { crate::collect::snapshot(&dir) };
        let replicas = spec
            .env
            .iter()
            .find(|(k, _)| k == "P2PMPI_REPLICAS")
            .and_then(|(_, v)| v.parse::<u32>().ok())
            .unwrap_or(1)
            .max(1);
        let shm = ShmDir(shm_dir_of(&spec.job));
        // Dropped after the processes (declared after `shm`): what the job left running dies.
        let cgroup = match self.confiner.job_cgroup(&spec.job, spec.ranks.len()) {
            Ok(c) => c,
            Err(e) => {
                warn!("job {}: no control group of its own ({e}): its processes are counted per user", spec.job);
                None
            }
        };
        let children = match self.spawn_ranks(&spec, &dir, &program, &shm.0, cgroup.as_ref()) {
            Ok(c) => c,
            Err(why) => return refuse(why),
        };
        let pids: Vec<u32> = children.iter().map(|(_, c)| c.id()).collect();
        self.jobs.lock().insert(spec.job.clone(), pids.clone());
        for (rank, c) in &children {
            send(&writer, &JobEvent::Started { rank: *rank, pid: c.id() });
            self.apps.lock().push(AppProcess {
                app: spec.app.clone(),
                job: spec.job.clone(),
                rank: *rank,
                replicas,
                pid: c.id(),
                root: spec.root.clone(),
            });
        }
        // Orders from the submitter; its disappearance kills the job here.
        let done = Arc::new(AtomicBool::new(false));
        {
            let pids = pids.clone();
            let done = done.clone();
            let _ = reader.set_read_timeout(None);
            std::thread::spawn(move || loop {
                match reader.recv::<JobControl>() {
                    Ok(Some(JobControl::Signal(sig))) => {
                        for &pid in &pids {
                            let _ = crate::os::signal(pid, sig);
                            if sig == libc::SIGTERM {
                                // A frozen (stopped) process acts on SIGTERM only once continued.
                                let _ = crate::os::signal(pid, libc::SIGCONT);
                            }
                        }
                    }
                    Ok(None) | Err(_) => {
                        if !done.load(Ordering::SeqCst) {
                            warn!("submitter {peer} went away: killing its processes");
                            for &pid in &pids {
                                let _ = crate::os::signal(pid, libc::SIGKILL);
                            }
                        }
                        return;
                    }
                }
            });
        }
        let job = &spec.job;
        let cg = cgroup.as_ref();
        // p2pmpi's staged library, resolved (a memory map names it so).
        let ours = staged_abi(&dir, &spec.env).and_then(|d| std::fs::canonicalize(d.join("libmpi.so.12")).ok());
        let ours = ours.as_deref();
        std::thread::scope(|s| {
            for (rank, mut child) in children {
                let writer = writer.clone();
                s.spawn(move || {
                    let out = child.stdout.take().map(|o| pump(o, rank, false, writer.clone()));
                    let err = child.stderr.take().map(|e| pump(e, rank, true, writer.clone()));
                    if let Some(ours) = ours {
                        watch_loading(&mut child, rank, ours, &writer);
                    }
                    let status = child.wait();
                    for h in [out, err].into_iter().flatten() {
                        let _ = h.join();
                    }
                    let (code, signal) = match status {
                        Ok(st) => (st.code(), st.signal()),
                        Err(_) => (None, Some(libc::SIGKILL)),
                    };
                    if let Some(why) = signal.and_then(|s| self.limit_notice(s, cg)) {
                        let data = format!("p2pmpi: rank {rank} stopped: {why}\n").into_bytes();
                        let _ = writer.lock().send(&JobEvent::Output { rank, stderr: true, data });
                    }
                    // `mpistat` shows running processes only.
                    self.apps.lock().retain(|a| !(a.job == *job && a.rank == rank));
                    let _ = writer.lock().send(&JobEvent::Exited { rank, code, signal });
                });
            }
        });
        if let Some(n) = cgroup.as_ref().map(|c| c.events().forks_refused).filter(|&n| n > 0) {
            let l = self.confiner.limits.processes;
            let data = format!(
                "p2pmpi: {n} fork(s) of the job refused on this host: process limit reached (JOB_PROCESSES={l} per process)\n"
            );
            let rank = spec.ranks.first().copied().unwrap_or(0);
            let _ = writer.lock().send(&JobEvent::Output { rank, stderr: true, data: data.into_bytes() });
        }
        if !spec.collect.is_empty() {
            self.send_collected(&writer, &dir, &spec.collect, &before);
        }
        done.store(true, Ordering::SeqCst);
        // Released before the submitter sees the end: the host is free once it does.
        drop(claim);
        writer.lock().shutdown();
        info!("job {} of {} ended here", spec.job, spec.app);
    }

    /// Starts the job's processes here, each confined (see [`crate::confine`]); on an error
    /// those already started are killed, and the words of the refusal returned.
    fn spawn_ranks(
        &self,
        spec: &LaunchSpec,
        dir: &std::path::Path,
        program: &std::path::Path,
        shm: &std::path::Path,
        cgroup: Option<&crate::confine::JobCgroup>,
    ) -> Result<Vec<(u32, std::process::Child)>, String> {
        let tmp = dir.join(".tmp");
        for d in [&tmp, &shm.to_path_buf()] {
            std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        }
        // The launcher's control port: the one port outside the grid's range a process needs.
        let root_port = spec.root.rsplit_once(':').and_then(|(_, p)| p.parse::<u16>().ok());
        let paths = crate::confine::JobPaths {
            job_dir: dir.to_path_buf(),
            tmp: tmp.clone(),
            shm: shm.to_path_buf(),
            connect: root_port.into_iter().chain(crate::ft::checkpoint::ports_of(&spec.env)).collect(),
        };
        let uid = self.confiner.uid_for(&spec.job);
        let abi = abi_dir(dir, &spec.env)?;
        // The processes' library path: the staged library's directory first.
        let library_path = abi.as_ref().map(|d| {
            let rest = spec.env.iter().rev().find(|(k, _)| k == "LD_LIBRARY_PATH").map(|(_, v)| v.clone());
            let rest = rest.or_else(|| std::env::var("LD_LIBRARY_PATH").ok()).filter(|v| !v.is_empty());
            rest.map_or(d.display().to_string(), |r| format!("{}:{r}", d.display()))
        });
        if let Some(d) = &abi {
            check_loading(spec, dir, program, d, library_path.clone())?;
        }
        let mut children = Vec::new();
        let fail = |children: &mut Vec<(u32, std::process::Child)>, why: String| {
            for (_, c) in children.iter_mut() {
                let _ = c.kill();
                let _ = c.wait();
            }
            Err(why)
        };
        for &rank in &spec.ranks {
            let mut cmd = Command::new(program);
            cmd.args(&spec.args)
                .current_dir(dir)
                .env("P2PMPI_RANK", rank.to_string())
                .env("P2PMPI_SIZE", spec.size.to_string())
                .env("P2PMPI_CONTROL", &spec.root)
                // The job key reaches the process in its environment (readable by this user
                // only), never on the network in clear.
                .env("P2PMPI_JOB_KEY", spec.job_key.to_hex())
                .env("P2PMPI_BIND", self.ip.to_string())
                .env("P2PMPI_PORTS", self.cfg.job_ports())
                .env("P2PMPI_JOB", &spec.job)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in &spec.env {
                cmd.env(k, v);
            }
            if let Some(p) = &library_path {
                cmd.env("LD_LIBRARY_PATH", p);
            }
            // The places a confined process may write (after the submitter's variables: they
            // win).
            cmd.env("TMPDIR", &tmp).env("P2PMPI_SHM_DIR", shm);
            crate::os::die_with_parent(&mut cmd);
            if let Some(uid) = uid {
                if let Err(e) = self.confiner.run_as(&mut cmd, uid, &paths) {
                    return fail(&mut children, format!("cannot run the job as user {uid}: {e}"));
                }
            }
            let ruleset = match self.confiner.ruleset(&paths) {
                Ok(r) => r,
                Err(e) => return fail(&mut children, format!("cannot prepare the confinement: {e}")),
            };
            if let Err(e) = self.confiner.confine_in(&mut cmd, ruleset, cgroup) {
                return fail(&mut children, format!("cannot enter the job's control group: {e}"));
            }
            match cmd.spawn() {
                Ok(c) => children.push((rank, c)),
                Err(e) => return fail(&mut children, format!("cannot start {}: {e}", spec.program)),
            }
        }
        Ok(children)
    }

    /// Words for the submitter when a process was killed by one of its limits.
    fn limit_notice(&self, signal: i32, cgroup: Option<&crate::confine::JobCgroup>) -> Option<String> {
        let l = &self.confiner.limits;
        let oom = signal == libc::SIGKILL && cgroup.is_some_and(|c| c.events().oom_kills > 0);
        if oom {
            return Some(format!(
                "killed: the job's memory on this host passed its limit (JOB_MEMORY_MB={} per process)",
                l.memory_mb
            ));
        }
        crate::confine::limit_signal(signal, l).or_else(|| {
            (signal == libc::SIGABRT && l.memory_mb > 0)
                .then(|| format!("aborted (an allocation past JOB_MEMORY_MB={} MiB fails)", l.memory_mb))
        })
    }

    /// `--collect`: sends the files of the job directory that match `patterns` and that the
    /// processes wrote, before the directory is removed.
    fn send_collected(
        &self,
        writer: &Mutex<SecureWriter>,
        dir: &std::path::Path,
        patterns: &[String],
        before: &HashMap<String, crate::collect::Stamp>,
    ) {
        const CHUNK: usize = 256 << 10;
        for p in patterns {
            if let Err(why) = crate::collect::check_pattern(p) {
                let _ = writer.lock().send(&JobEvent::NotCollected { name: p.clone(), why });
            }
        }
        let files = crate::collect::find(dir, patterns, before);
        info!("sending {} collected file(s) to the submitter", files.len());
        for (name, path) in files {
            let mut f = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) => {
                    let _ = writer.lock().send(&JobEvent::NotCollected { name, why: e.to_string() });
                    continue;
                }
            };
            let mut buf = vec![0u8; CHUNK];
            loop {
                let got = match read_full(&mut f, &mut buf) {
                    Ok(k) => k,
                    Err(e) => {
                        let _ = writer.lock().send(&JobEvent::NotCollected { name: name.clone(), why: e.to_string() });
                        break;
                    }
                };
                let last = got < CHUNK;
                let ev = JobEvent::Collected { name: name.clone(), data: buf[..got].to_vec(), last };
                if writer.lock().send(&ev).is_err() {
                    warn!("the submitter went away while files were collected");
                    return;
                }
                if last {
                    break;
                }
            }
        }
    }

    /// Cancels a reservation held here (unused, or a job's at its end). Jobs staged for it
    /// but never launched lose their directories. Returns whether it was held.
    fn cancel_here(&self, ticket: Ticket) -> bool {
        let (held, running) = {
            let mut gate = self.gate.lock();
            let running = gate.entries().iter().any(|(t, _, running)| *t == ticket.0 && *running);
            let held = matches!(
                ask_gate(&mut gate, self.clock(), Request::Cancel(ticket.0)),
                Some(Reply::Cancelled { existed: true, .. })
            );
            (held, running)
        };
        if !running {
            self.remove_staged(ticket);
        }
        held
    }

    /// Drops the reservations that lapsed unclaimed, and what was staged for them.
    fn release_lapsed(&self) {
        let lapsed = {
            let mut gate = self.gate.lock();
            gate.handle_timeout(self.clock());
            gate.drain_outputs()
        };
        for r in lapsed {
            if let Reply::Lapsed(t) = r {
                info!("reservation {} was never used: released", Ticket(t));
                self.remove_staged(Ticket(t));
            }
        }
    }

    /// Removes the directories of the jobs staged for `ticket` (never launched).
    fn remove_staged(&self, ticket: Ticket) {
        let jobs = self.staged.lock().remove(&ticket.0).unwrap_or_default();
        for job in jobs {
            info!("job {job} was staged for reservation {ticket} but never launched: its files are removed");
            ft::remove_job(&self.home.jobs(), &job);
        }
    }

    /// A launch claims its reservation: it becomes running (no longer lapses). The returned
    /// guard releases it when dropped, so a refused or failed launch never keeps the host
    /// reserved (with `MAX_JOBS=1` that would lock the host for good). One launch per
    /// reservation: a second one while it runs is refused (it would own nothing here).
    fn claim(&self, ticket: Ticket) -> Result<(u32, Claim<'_>), String> {
        let mut gate = self.gate.lock();
        if gate.entries().iter().any(|(t, _, running)| *t == ticket.0 && *running) {
            return Err(format!("reservation {ticket} is already running a launch here"));
        }
        let p = gate_claim(&mut gate, self.clock(), ticket.0).map_err(|e| format!("{e} (ticket {ticket})"))?;
        Ok((p, Claim { mpd: self, ticket, job: None }))
    }
}

/// A reservation claimed by a launch. When dropped — whichever way the launch ends — it
/// removes what the job left here (its processes' records for halt and `mpistat`, its
/// directory), then finishes the reservation.
struct Claim<'a> {
    mpd: &'a Mpd,
    ticket: Ticket,
    /// The job, once its id was checked.
    job: Option<String>,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if let Some(job) = &self.job {
            // Only the processes this launch started: the job's rank 0, announced by its
            // submitter on this same host, runs on.
            let pids = self.mpd.jobs.lock().remove(job).unwrap_or_default();
            self.mpd.apps.lock().retain(|a| !(a.job == *job && pids.contains(&a.pid)));
            ft::remove_job(&self.mpd.home.jobs(), job);
        }
        // Other jobs staged for this reservation will never run.
        let staged = self.mpd.staged.lock().remove(&self.ticket.0).unwrap_or_default();
        for other in staged.iter().filter(|j| Some(*j) != self.job.as_ref()) {
            ft::remove_job(&self.mpd.home.jobs(), other);
        }
        ask_gate(&mut self.mpd.gate.lock(), self.mpd.clock(), Request::Finish(self.ticket.0));
        info!("reservation {} released", self.ticket);
    }
}

/// Forwards a process's output to the submitter, a line (or up to 64 KiB) at a time.
fn pump(
    src: impl Read + Send + 'static,
    rank: u32,
    stderr: bool,
    w: Arc<Mutex<SecureWriter>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::with_capacity(64 * 1024, src);
        loop {
            let buf = match r.fill_buf() {
                Ok([]) | Err(_) => return,
                Ok(b) => b,
            };
            // Whole lines when there are some, else what is there.
            let take = match buf.iter().rposition(|&c| c == b'\n') {
                Some(i) => i + 1,
                None if buf.len() >= 64 * 1024 => buf.len(),
                None => {
                    // Wait for the rest of the line, unless the stream ends.
                    let mut line = buf.to_vec();
                    let n = buf.len();
                    r.consume(n);
                    let mut more = Vec::new();
                    let _ = r.read_until(b'\n', &mut more);
                    line.extend_from_slice(&more);
                    let _ = w.lock().send(&JobEvent::Output { rank, stderr, data: line });
                    if more.is_empty() {
                        return;
                    }
                    continue;
                }
            };
            let data = buf[..take].to_vec();
            r.consume(take);
            if w.lock().send(&JobEvent::Output { rank, stderr, data }).is_err() {
                // The submitter is gone; keep draining so the process is not blocked.
            }
        }
    })
}

/// Reads until `buf` is full or the file ends; how much was read.
fn read_full(f: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Jobs whose recent events an MPD keeps (the oldest job's are dropped first).
pub const HISTORY_JOBS: usize = 16;
/// Events kept per job (the oldest are dropped first).
pub const HISTORY_NOTICES: usize = 64;
/// Longest `detail` or `host` kept (longer ones are cut).
const NOTICE_TEXT: usize = 240;

/// Adds a job's notices to the bounded history (a job heard from again moves last).
fn record_notices(history: &mut VecDeque<JobHistory>, job: String, app: String, notices: Vec<JobNotice>) {
    let cut = |s: String| if s.len() <= NOTICE_TEXT { s } else { s.chars().take(NOTICE_TEXT).collect() };
    let mut h = match history.iter().position(|h| h.job == job) {
        Some(i) => history.remove(i).expect("position is in range"),
        None => JobHistory { job: cut(job), app: cut(app), notices: Vec::new() },
    };
    h.notices.extend(notices.into_iter().map(|n| JobNotice { host: cut(n.host), detail: cut(n.detail), ..n }));
    // Too many: placements go first (the running processes are in the report anyway), then
    // the oldest.
    let mut over = h.notices.len().saturating_sub(HISTORY_NOTICES);
    if over > 0 {
        h.notices.retain(|n| {
            let drop = over > 0 && n.kind == JobNoticeKind::Placed;
            over -= usize::from(drop);
            !drop
        });
        h.notices.drain(..over);
    }
    history.push_back(h);
    while history.len() > HISTORY_JOBS {
        history.pop_front();
    }
}

/// Reads the state of the peer daemon running for `home`, if it is alive.
pub fn running(home: &Home) -> Option<MpdState> {
    let st: MpdState = home::read_json(&home.mpd_state())?;
    home::pid_alive(st.pid).then_some(st)
}

/// One request to an MPD on a fresh connection (from this host's own address).
pub fn call(state_ip: Option<IpAddr>, addr: SocketAddr, secret: &GridSecret, req: &MpdRequest) -> Result<MpdResponse> {
    let mut c = SecureConn::connect_from(state_ip, addr, secret, CONNECT_TIMEOUT)
        .with_context(|| format!("cannot reach the MPD at {addr}"))?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    c.set_max_record(64 << 20);
    match c.call(req) {
        Ok(a) => Ok(a),
        Err(e) => bail!("the MPD at {addr} did not answer: {e}"),
    }
}

/// A connection the other side closed before answering (during the handshake or the
/// request): the host is alive (it accepted), maybe busy.
fn closed_early(e: &SecureError) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    match e {
        SecureError::Handshake(_) => true,
        SecureError::Io(e) => matches!(e.kind(), ConnectionReset | UnexpectedEof | BrokenPipe | ConnectionAborted),
        _ => false,
    }
}

/// How long after its start a process of a program of MPICH's ABI is watched for another MPI
/// library than the staged one (an `LD_PRELOAD` or a `dlopen` its program file does not show).
const LOADING_WATCH: Duration = Duration::from_secs(10);
/// How long a process that mapped p2pmpi's library is still watched (a `dlopen` of another
/// comes early, before `MPI_Init`).
const LOADING_SETTLED: Duration = Duration::from_secs(1);
/// The longest pause between two looks (the end of the process is seen as late).
const LOADING_PAUSE: Duration = Duration::from_millis(50);

/// The staged directory of p2pmpi's library a launch names ([`ABI_DIR_ENV`]), if any.
fn staged_abi(dir: &std::path::Path, env: &[(String, String)]) -> Option<std::path::PathBuf> {
    let (_, name) = env.iter().find(|(k, _)| k == ABI_DIR_ENV)?;
    ft::safe_join(dir, name).ok()
}

/// Watches `child` (rank `rank`) until it ends, for at most [`LOADING_WATCH`], and no longer
/// than [`LOADING_SETTLED`] once it mapped `ours`: one that maps another MPI library than
/// `ours` is killed, and the submitter told why on its standard error (it would run as a world
/// of its own, never joining). The child is not reaped before it ended, so its pid stays its
/// own while its map is read; its end is seen within [`LOADING_PAUSE`].
fn watch_loading(child: &mut std::process::Child, rank: u32, ours: &std::path::Path, writer: &Mutex<SecureWriter>) {
    let start = Instant::now();
    let mut pause = Duration::from_millis(5);
    while start.elapsed() < LOADING_WATCH && matches!(child.try_wait(), Ok(None)) {
        // Unreadable (another user's process, or gone): nothing to say.
        let Ok(maps) = std::fs::read_to_string(format!("/proc/{}/maps", child.id())) else { return };
        if start.elapsed() >= LOADING_SETTLED && maps.lines().any(|l| l.ends_with(&*ours.to_string_lossy())) {
            return;
        }
        if let Some(lib) = crate::ldso::foreign_in_maps(&maps, ours) {
            let data = format!(
                "p2pmpi: rank {rank} stopped: it loaded another MPI library, {lib}, not p2pmpi's (staged): it would \
                 run as an MPI world of its own (an LD_PRELOAD, a dlopen by path, or an RPATH to that library on \
                 this host)\n"
            );
            let _ = writer.lock().send(&JobEvent::Output { rank, stderr: true, data: data.into_bytes() });
            let _ = child.kill();
            return;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(LOADING_PAUSE);
    }
}

/// The staged directory of p2pmpi's library with MPICH's ABI, when the launch names one
/// ([`ABI_DIR_ENV`]): the library's other names made there (symlinks to `libmpi.so.12`, so
/// that a process loads one copy whatever name it asks for).
fn abi_dir(dir: &std::path::Path, env: &[(String, String)]) -> Result<Option<std::path::PathBuf>, String> {
    let Some((_, name)) = env.iter().find(|(k, _)| k == ABI_DIR_ENV) else { return Ok(None) };
    let d = ft::safe_join(dir, name).map_err(|e| format!("{ABI_DIR_ENV}: {e:#}"))?;
    if !std::fs::symlink_metadata(d.join("libmpi.so.12")).is_ok_and(|m| m.is_file()) {
        return Err(format!("{name}/libmpi.so.12 was not staged"));
    }
    for link in ["libmpi.so", "libmpich.so.12"] {
        let p = d.join(link);
        let _ = std::fs::remove_file(&p);
        std::os::unix::fs::symlink("libmpi.so.12", &p).map_err(|e| format!("cannot make {}: {e}", p.display()))?;
    }
    Ok(Some(d))
}

/// Refuses a program of MPICH's ABI whose processes here would load another MPI library than
/// the staged one (`abi`: its directory): an RPATH to a directory of this host, an
/// `LD_PRELOAD` (the job's, else this daemon's, which they inherit). The words name the file,
/// the cause and the remedy; they reach the submitter as the host's refusal.
fn check_loading(
    spec: &LaunchSpec,
    dir: &std::path::Path,
    program: &std::path::Path,
    abi: &std::path::Path,
    library_path: Option<String>,
) -> Result<(), String> {
    let given = spec.env.iter().rev().find(|(k, _)| k == "LD_PRELOAD").map(|(_, v)| v.clone());
    let preload = given.or_else(|| std::env::var("LD_PRELOAD").ok()).filter(|v| !v.is_empty());
    let env = crate::ldso::Env { library_path, preload, cwd: dir.to_path_buf() };
    match crate::ldso::foreign_mpi(program, &env, &abi.join("libmpi.so.12")) {
        // Named as the submitter knows them: the program by its name, the job directory so.
        Ok(Some(why)) => Err(why
            .replace(&program.display().to_string(), &spec.program)
            .replace(&format!("{}/", dir.display()), "<job directory>/")),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staged_abi_library_gets_its_other_names_and_nothing_escapes_the_job_directory() {
        let dir = std::env::temp_dir().join(format!("p2pmpi-abi-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(ABI_DIR)).unwrap();
        let env = |v: &str| vec![(ABI_DIR_ENV.to_string(), v.to_string())];
        assert_eq!(abi_dir(&dir, &[]), Ok(None));
        assert!(abi_dir(&dir, &env(ABI_DIR)).unwrap_err().contains("was not staged"));
        std::fs::write(dir.join(ABI_DIR).join("libmpi.so.12"), b"lib").unwrap();
        let d = abi_dir(&dir, &env(ABI_DIR)).unwrap().unwrap();
        assert_eq!(d, dir.join(ABI_DIR));
        for name in ["libmpi.so", "libmpich.so.12"] {
            assert_eq!(std::fs::read_link(d.join(name)).unwrap(), std::path::Path::new("libmpi.so.12"));
            assert_eq!(std::fs::read(d.join(name)).unwrap(), b"lib");
        }
        // Made again at the next launch of the job.
        assert!(abi_dir(&dir, &env(ABI_DIR)).is_ok());
        assert!(abi_dir(&dir, &env("../elsewhere")).is_err());
        assert!(abi_dir(&dir, &env("/tmp")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn notice(rank: u32, detail: &str) -> JobNotice {
        JobNotice { at_ms: 1, kind: JobNoticeKind::Failed, rank, replica: 0, host: "h".into(), detail: detail.into() }
    }

    #[test]
    fn job_history_is_bounded_in_jobs_notices_and_text() {
        let mut h = VecDeque::new();
        for j in 0..HISTORY_JOBS + 3 {
            record_notices(&mut h, format!("job{j}"), "app".into(), vec![notice(0, "x")]);
        }
        assert_eq!(h.len(), HISTORY_JOBS);
        assert_eq!(h.front().unwrap().job, "job3", "the oldest jobs went first");
        // A job heard from again keeps its events and moves last.
        record_notices(
            &mut h,
            "job5".into(),
            "app".into(),
            (0..HISTORY_NOTICES as u32 + 10).map(|r| notice(r, "y")).collect(),
        );
        let last = h.back().unwrap();
        assert_eq!(last.job, "job5");
        assert_eq!(last.notices.len(), HISTORY_NOTICES);
        assert_eq!(last.notices.last().unwrap().rank, HISTORY_NOTICES as u32 + 9, "the newest are kept");
        // Placements are dropped before failures.
        let mut many: Vec<JobNotice> =
            (0..200).map(|r| JobNotice { kind: JobNoticeKind::Placed, ..notice(r, "") }).collect();
        many.insert(3, notice(7, "failed early"));
        record_notices(&mut h, "big".into(), "app".into(), many);
        let big = h.back().unwrap();
        assert_eq!(big.notices.len(), HISTORY_NOTICES);
        assert_eq!(big.notices[0].detail, "failed early", "{:?}", big.notices[0]);
        record_notices(&mut h, "long".into(), "app".into(), vec![notice(0, &"é".repeat(10_000))]);
        assert_eq!(h.back().unwrap().notices[0].detail.chars().count(), NOTICE_TEXT);
    }
}
