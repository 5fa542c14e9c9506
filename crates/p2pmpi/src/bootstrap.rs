//! How a process learns its place in the job.
//!
//! A process started by `p2pmpirun` finds in its environment its rank, the job size, the
//! address of its launcher's control port and the job's key ([`p2pmpi_wire::auth`]). It binds
//! its own data port, registers with the launcher (proving the key in a challenge-response:
//! the key itself is never sent), and receives the communicator table (rank → address) built
//! once every process registered (the seeds' execution preamble, step 10). The control
//! connection stays open: it carries `Finalized` and `Abort`, and if the launcher goes away the
//! process stops instead of lingering as an orphan.
//!
//! Without those variables the program runs as a one-process world.

use crate::error::{Error, Result};
use p2pmpi_wire::auth::JobKey;
use p2pmpi_wire::control::{self, Control};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Environment variables set by the launcher.
pub mod env {
    pub const RANK: &str = "P2PMPI_RANK";
    pub const SIZE: &str = "P2PMPI_SIZE";
    /// The number of processes the grid could give the job (`Universe::size`), when the
    /// launcher knows it; the job's size otherwise.
    pub const UNIVERSE_SIZE: &str = "P2PMPI_UNIVERSE_SIZE";
    pub const CONTROL: &str = "P2PMPI_CONTROL";
    /// The job's key: 64 hexadecimal digits ([`p2pmpi_wire::auth::JobKey::to_hex`]).
    pub const JOB_KEY: &str = "P2PMPI_JOB_KEY";
    /// `1`: seal every data connection after its opening (`p2pmpirun --encrypt`).
    pub const ENCRYPT: &str = "P2PMPI_ENCRYPT";
    pub const BIND: &str = "P2PMPI_BIND";
    pub const LOCAL_PROCS: &str = "P2PMPI_LOCAL_PROCS";
    pub const SPIN_US: &str = "P2PMPI_SPIN_US";
    /// Range of data ports (`MIN_PORT-MAX_PORT` of the peer's configuration; `0-0`: any).
    pub const PORTS: &str = "P2PMPI_PORTS";
    /// Replicas of every rank (`-r R`; absent: 1). When set, `P2PMPI_RANK` is the
    /// process's *slot* in [`p2pmpi_core::replication::Layout`] and `P2PMPI_SIZE` the number
    /// of ranks.
    pub const REPLICAS: &str = "P2PMPI_REPLICAS";
    /// A spawned process (`spawn`): the universe id of the spawn's first child (this
    /// process's world rank `P2PMPI_RANK` is counted from there).
    pub const SPAWN_BASE: &str = "P2PMPI_SPAWN_BASE";
    /// A spawned process: its parents, `id=address` separated by `;`, in the order of the
    /// spawning communicator (the remote group of `world().parent()`).
    pub const PARENTS: &str = "P2PMPI_PARENTS";
    /// A spawned process: the context id of the intercommunicator to its parents.
    pub const PARENT_CTX: &str = "P2PMPI_PARENT_CTX";
    /// A spawned process: which program of `spawn_multiple` it runs (`Universe::appnum`).
    pub const APPNUM: &str = "P2PMPI_APPNUM";
}

/// A spawned process's parents: the intercommunicator's context and remote group.
#[derive(Debug, Clone)]
pub(crate) struct Parents {
    pub ctx: u32,
    /// Universe ids of the parents, in the spawning communicator's order.
    pub ids: Vec<i32>,
}

pub(crate) struct Boot {
    pub rank: i32,
    pub size: i32,
    /// This process's slot (= rank without replicas).
    pub slot: i32,
    /// The replicas' layout, when the job runs more than one per rank.
    pub layout: Option<p2pmpi_core::replication::Layout>,
    pub key: JobKey,
    /// Seal the data connections (`--encrypt`).
    pub encrypt: bool,
    pub listener: Option<TcpListener>,
    pub addrs: Vec<SocketAddr>,
    pub local_procs: usize,
    /// Universe id of this job's world rank 0 (0 but in spawned processes) and its size.
    pub world_base: i32,
    pub world_size: i32,
    /// In a spawned process: its parents.
    pub parents: Option<Parents>,
}

use crate::launcher::{connected, send};
pub(crate) use crate::launcher::{finalizing, is_finalizing, report_finalized};

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|s| !s.is_empty())
}

fn parse<T: std::str::FromStr>(name: &str) -> Result<T> {
    let v = var(name).ok_or_else(|| Error::Bootstrap(format!("{name} is not set")))?;
    v.parse().map_err(|_| Error::Bootstrap(format!("{name}={v:?} is not valid")))
}

/// Reads the environment and, under a launcher, registers and receives the world.
pub(crate) fn boot() -> Result<Boot> {
    let Some(ctrl_addr) = var(env::CONTROL) else {
        return Ok(Boot {
            rank: 0,
            size: 1,
            slot: 0,
            layout: None,
            key: JobKey::from_bytes([0; 32]),
            encrypt: false,
            listener: None,
            addrs: Vec::new(),
            local_procs: 1,
            world_base: 0,
            world_size: 1,
            parents: None,
        });
    };
    let slot: i32 = parse(env::RANK)?;
    let size: i32 = parse(env::SIZE)?;
    let replicas: usize = if var(env::REPLICAS).is_some() { parse(env::REPLICAS)? } else { 1 };
    if size < 1 || replicas < 1 {
        return Err(Error::Bootstrap(format!("{size} ranks with {replicas} replicas is not valid")));
    }
    let layout = (replicas > 1).then(|| p2pmpi_core::replication::Layout::new(size as usize, replicas));
    let slots = layout.map_or(size as usize, |l| l.slots()) as i32;
    if slot < 0 || slot >= slots {
        return Err(Error::Bootstrap(format!("slot {slot} of {slots} processes is not valid")));
    }
    room_for_connections(slots as u64, rlimit_nofile, set_rlimit_nofile)?;
    let rank = layout.map_or(slot, |l| l.rank_of(slot as usize) as i32);
    if let Some(l) = layout {
        crate::failure::set_layout(&crate::context::current().failures, l);
    }
    let key = JobKey::from_hex(&var(env::JOB_KEY).unwrap_or_default())
        .ok_or_else(|| Error::Bootstrap(format!("{} is missing or not valid", env::JOB_KEY)))?;
    let local_procs = parse(env::LOCAL_PROCS).unwrap_or(size as usize);
    if size < 1 || rank < 0 || rank >= size {
        return Err(Error::Bootstrap(format!("rank {rank} of size {size} is not valid")));
    }
    let bind = var(env::BIND).unwrap_or_else(|| "127.0.0.1".into());
    let listener = bind_data_port(&bind, var(env::PORTS).as_deref())?;
    let data_addr = listener.local_addr()?;
    // The failure detector's socket, in the same port range (firewall-friendly).
    let (fd_socket, km_listener) = match bind_fd_port(&bind, var(env::PORTS).as_deref()) {
        Some((s, l)) => (Some(s), l),
        None => (None, None),
    };
    let fd_addr = fd_socket.as_ref().and_then(|s| s.local_addr().ok()).map(|a| a.to_string()).unwrap_or_default();
    let mut ctrl = connect_from(&bind, &ctrl_addr)
        .map_err(|e| Error::Bootstrap(format!("cannot reach the launcher at {ctrl_addr}: {e}")))?;
    let _ = ctrl.set_nodelay(true);
    let reg = control::Registration {
        rank: slot as u32,
        data_addr: data_addr.to_string(),
        pid: std::process::id(),
        fd_addr,
        tolerant: crate::failure::policy() == crate::failure::Policy::Notify,
    };
    ctrl.set_read_timeout(Some(Duration::from_secs(600)))?;
    control::register(&mut ctrl, &key, &reg).map_err(|e| Error::Bootstrap(format!("launcher: {e}")))?;
    let (addrs, fd, lease_us) = match control::read_msg(&mut ctrl) {
        Ok(Some(Control::World { addrs, fd, lease_us })) => (addrs, fd, lease_us),
        Ok(Some(Control::Stop { reason })) => return Err(Error::Bootstrap(format!("job stopped: {reason}"))),
        Ok(other) => return Err(Error::Bootstrap(format!("unexpected answer from the launcher: {other:?}"))),
        Err(e) => return Err(Error::Bootstrap(format!("launcher: {e}"))),
    };
    if addrs.len() != slots as usize {
        return Err(Error::Bootstrap(format!("world table has {} entries for {slots} processes", addrs.len())));
    }
    let addrs = addrs
        .iter()
        .map(|a| a.parse().map_err(|_| Error::Bootstrap(format!("bad address {a:?} in the world table"))))
        .collect::<Result<Vec<SocketAddr>>>()?;
    let received = Instant::now();
    if let (Some(fd), Some(sock)) = (fd, fd_socket) {
        if let (Some(l), Some(_)) = (layout, var(env::SPAWN_BASE)) {
            // A spawned replicated job's detector watches its own processes; the launcher
            // and the engine name them by universe slot (see `spawned`).
            crate::failure::set_slot_base(&crate::context::current().failures, parse::<usize>(env::SPAWN_BASE)? * l.r);
        }
        let setup = crate::failure::setup_from_wire(&fd, slots as usize, received).map_err(Error::Bootstrap)?;
        crate::failure::start(slot as usize, key.clone(), sock, km_listener, setup)
            .map_err(|e| Error::Bootstrap(format!("cannot start the failure detector: {e}")))?;
    }
    ctrl.set_read_timeout(None)?;
    // A write to a launcher that stopped reading must not hold this process forever.
    ctrl.set_write_timeout(Some(Duration::from_secs(10)))?;
    let reader = ctrl.try_clone()?;
    crate::launcher::connect(ctrl);
    if let (true, Some(l)) = (lease_us > 0, layout) {
        // The launcher names slots of the universe in its declarations: a spawned
        // process's slots follow its ancestors' (see `spawned`).
        let base: i32 = if var(env::SPAWN_BASE).is_some() { parse(env::SPAWN_BASE)? } else { 0 };
        fence::start(Duration::from_micros(lease_us), slot + base * l.r as i32)?;
    }
    std::thread::Builder::new()
        .name("p2pmpi-control".into())
        .spawn(move || watch_launcher(reader, rank))
        .map_err(|e| Error::Bootstrap(format!("cannot start the control thread: {e}")))?;
    let encrypt = var(env::ENCRYPT).is_some_and(|v| v == "1");
    let mut boot = Boot {
        rank,
        size,
        slot,
        layout,
        key,
        encrypt,
        listener: Some(listener),
        addrs,
        local_procs,
        world_base: 0,
        world_size: size,
        parents: None,
    };
    if var(env::SPAWN_BASE).is_some() {
        spawned(&mut boot)?;
    }
    Ok(boot)
}

/// A spawned process: its world starts at universe id `P2PMPI_SPAWN_BASE`, and its device
/// also knows its parents' addresses (universe ids below the base).
///
/// Replicated (`P2PMPI_REPLICAS` R > 1, the parents' degree): every universe id runs R
/// replicas, numbered in one layout over the universe, so this process is slot
/// `base·R + P2PMPI_RANK`, and `P2PMPI_PARENTS` lists every replica of the parents,
/// `slot=address`.
fn spawned(boot: &mut Boot) -> Result<()> {
    let r = boot.layout.map_or(1, |l| l.r) as i32;
    let base: i32 = parse(env::SPAWN_BASE)?;
    let ctx: u32 = parse(env::PARENT_CTX)?;
    let list = var(env::PARENTS).ok_or_else(|| Error::Bootstrap(format!("{} is not set", env::PARENTS)))?;
    let mut parents = Vec::new();
    for item in list.split(';').filter(|s| !s.is_empty()) {
        let bad = || Error::Bootstrap(format!("bad parent {item:?} in {}", env::PARENTS));
        let (id, addr) = item.split_once('=').ok_or_else(bad)?;
        let id: i32 = id.parse().map_err(|_| bad())?;
        let addr: SocketAddr = addr.parse().map_err(|_| bad())?;
        if id < 0 || id >= base.saturating_mul(r) {
            return Err(bad());
        }
        parents.push((id, addr));
    }
    if base < 1 || parents.is_empty() {
        return Err(Error::Bootstrap(format!("spawn base {base} with {} parents is not valid", parents.len())));
    }
    let unknown: SocketAddr = ([0, 0, 0, 0], 0).into();
    let mut addrs = vec![unknown; (base * r) as usize];
    for &(id, a) in &parents {
        addrs[id as usize] = a;
    }
    addrs.extend(boot.addrs.iter().copied());
    boot.addrs = addrs;
    boot.world_base = base;
    boot.world_size = boot.size;
    boot.rank += base;
    boot.slot += base * r;
    boot.size += base;
    boot.layout = boot.layout.map(|l| l.grown(boot.size as usize));
    // The parents' universe ids, in order (with replicas, each listed once per replica).
    let mut ids: Vec<i32> = Vec::new();
    for &(slot, _) in &parents {
        let id = slot / r;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    boot.parents = Some(Parents { ctx, ids });
    Ok(())
}

/// Spawning: the root's request to the launcher and its answer.
pub(crate) mod spawning {
    use super::*;
    use crate::context::Context;

    pub(super) fn answered(ctx: &Context, a: std::result::Result<u32, String>) {
        *ctx.answers.spawned.lock() = Some(a);
        ctx.answers.spawned_cv.notify_all();
    }

    /// Asks the launcher to start `apps` as children of `parents`; returns the universe id
    /// of the first child, or why they could not be started.
    pub(crate) fn request(
        apps: Vec<control::SpawnApp>,
        parents: Vec<(u32, String)>,
        ctx: u32,
        limit: Duration,
    ) -> std::result::Result<u32, String> {
        if !connected() {
            return Err("this process was not started by p2pmpirun: there is no launcher to start processes".into());
        }
        let answers = &crate::context::current().answers;
        let mut answer = answers.spawned.lock();
        *answer = None;
        send(&Control::Spawn { apps, parents, ctx });
        let deadline = Instant::now() + limit;
        while answer.is_none() {
            if answers.spawned_cv.wait_until(&mut answer, deadline).timed_out() {
                return Err(format!("the launcher did not answer within {limit:?}"));
            }
        }
        answer.take().expect("an answer")
    }
}

/// Connects to the launcher from this process's own address `bind` (on a local grid every
/// host has its own loopback address, and an unbound socket would leave from 127.0.0.1: a
/// host cut off by the network must be cut off from its launcher too).
fn connect_from(bind: &str, to: &str) -> std::io::Result<TcpStream> {
    let addr: SocketAddr = match to.parse() {
        Ok(a) => a,
        Err(_) => return TcpStream::connect(to),
    };
    let own = bind.parse::<std::net::IpAddr>().ok().filter(|ip| {
        !ip.is_unspecified() && *ip != std::net::IpAddr::from([127, 0, 0, 1]) && ip.is_ipv4() == addr.is_ipv4()
    });
    let Some(ip) = own else { return TcpStream::connect(addr) };
    let sock = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    sock.bind(&SocketAddr::new(ip, 0).into())?;
    sock.connect(&addr.into())?;
    Ok(sock.into())
}

/// Binds the data port: in the configured range when there is one (`MIN_PORT`..`MAX_PORT`,
/// starting at a pid-dependent offset so that processes of one host spread over it), else any.
/// `P2PMPI_PORTS`: `LO-HI`, the ports a process may listen on, optionally followed by `!` and
/// the ports of that range it must leave alone (`9801-9900!9897,9898,9899,9900`: the peer
/// daemons' service ports, which confined processes may not connect to; one of them, the
/// failure detector's, is UDP only, so its TCP port looks free here).
fn parse_ports(range: Option<&str>) -> Option<(u16, u16, Vec<u16>)> {
    let r = range?;
    let (span, skip) = r.split_once('!').unwrap_or((r, ""));
    let (a, b) = span.split_once('-')?;
    let skip = skip.split(',').filter_map(|p| p.trim().parse::<u16>().ok()).collect();
    Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?, skip))
}

/// Descriptors a process keeps beside one connection per other process of the job: its
/// listeners, the detector's sockets, the launcher's connection, the poll set, standard
/// streams, files the program opens (measured: 9 at 256 processes).
const SPARE_FDS: u64 = 64;

/// Makes room for a connection to every other process of a job of `slots` processes: raises
/// the soft limit of open files to the hard one when it is too low (a shell's 1024 against
/// a job of more), or fails at once, naming the limit, when the hard limit is too low too.
/// Without it such a job ran for a minute, its processes printing `accept failed: Too many
/// open files` hundreds of times, before one lost a peer it could not connect to.
fn room_for_connections(
    slots: u64,
    get: impl Fn() -> Option<(u64, u64)>,
    set: impl Fn(u64, u64) -> bool,
) -> Result<()> {
    let need = slots + SPARE_FDS;
    let Some((soft, hard)) = get() else { return Ok(()) };
    if soft >= need {
        return Ok(());
    }
    if hard < need {
        return Err(Error::Bootstrap(format!(
            "a job of {slots} processes needs {need} open files in each process, and this one may open {hard} \
             (hard limit, `ulimit -Hn`): raise it where the job starts (the MPD, or the shell of p2pmpirun)"
        )));
    }
    if !set(hard, hard) {
        return Err(Error::Bootstrap(format!(
            "a job of {slots} processes needs {need} open files in each process; the limit is {soft} and \
             raising it to {hard} failed"
        )));
    }
    Ok(())
}

/// The limits of open files (soft, hard) of this process.
fn rlimit_nofile() -> Option<(u64, u64)> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the struct it is given, which lives on this stack frame.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0).then_some((r.rlim_cur, r.rlim_max))
}

fn set_rlimit_nofile(soft: u64, hard: u64) -> bool {
    let r = libc::rlimit { rlim_cur: soft, rlim_max: hard };
    // SAFETY: setrlimit reads the struct it is given, which lives on this stack frame.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) == 0 }
}

/// The data port: every higher rank of the job connects to it during initialization, all at
/// once. `TcpListener::bind` queues 128 openings; past that the kernel drops SYNs and each
/// dropped one costs its sender a retransmission (1 s, then 3 s, ...): a 256-rank job took
/// 11-25 s in `initialize` on one host. So the queue is widened to the system's maximum
/// (`net.core.somaxconn`, which caps the value asked for).
fn bind_data_port(bind: &str, range: Option<&str>) -> Result<TcpListener> {
    let l = bind_data_port_narrow(bind, range)?;
    socket2::SockRef::from(&l)
        .listen(i32::MAX)
        .map_err(|e| Error::Bootstrap(format!("cannot widen the queue of the data port on {bind}: {e}")))?;
    Ok(l)
}

fn bind_data_port_narrow(bind: &str, range: Option<&str>) -> Result<TcpListener> {
    match parse_ports(range) {
        Some((lo, hi, skip)) if lo > 0 && lo <= hi => {
            let span = (hi - lo) as u32 + 1;
            let start = std::process::id() % span;
            for k in 0..span {
                let port = lo as u32 + (start + k) % span;
                if skip.contains(&(port as u16)) {
                    continue;
                }
                if let Ok(l) = TcpListener::bind((bind, port as u16)) {
                    return Ok(l);
                }
            }
            Err(Error::Bootstrap(format!("no free data port on {bind} between MIN_PORT={lo} and MAX_PORT={hi}")))
        }
        _ => TcpListener::bind((bind, 0))
            .map_err(|e| Error::Bootstrap(format!("cannot open a data port on {bind}: {e}"))),
    }
}

/// Binds the failure detector's UDP socket like the data port, and a TCP listener on the same
/// port number for the k-monitor detector: the first port of the range (from a pid-dependent
/// offset, half the range away from the data port's) where both are free, so that the data
/// ports of the host's other processes (consecutive pids take consecutive ports) never stand
/// in the way. Without a range, ports the system gives until one has both free. The listener
/// is `None` if no port had both free; `None` if no UDP port is free at all (the job then runs
/// without a detector for this process, and says so).
fn bind_fd_port(bind: &str, range: Option<&str>) -> Option<(UdpSocket, Option<TcpListener>)> {
    let mut udp_only = None;
    if let Some((lo, hi, skip)) = parse_ports(range).filter(|(lo, hi, _)| *lo > 0 && lo <= hi) {
        let span = (hi - lo) as u32 + 1;
        let start = (std::process::id() + span / 2) % span;
        for k in 0..span {
            let port = (lo as u32 + (start + k) % span) as u16;
            if skip.contains(&port) {
                continue;
            }
            let Ok(udp) = UdpSocket::bind((bind, port)) else { continue };
            if let Ok(l) = TcpListener::bind((bind, port)) {
                return Some((udp, Some(l)));
            }
            udp_only.get_or_insert(udp);
        }
    } else {
        // Sockets kept bound while trying, so that every try gets another port.
        let mut tried = Vec::new();
        for _ in 0..32 {
            let Ok(udp) = UdpSocket::bind((bind, 0)) else { break };
            let Ok(port) = udp.local_addr().map(|a| a.port()) else { break };
            if let Ok(l) = TcpListener::bind((bind, port)) {
                return Some((udp, Some(l)));
            }
            tried.push(udp);
        }
        udp_only = tried.into_iter().next();
    }
    if udp_only.is_none() {
        // Nothing free in the range: any port.
        udp_only = match UdpSocket::bind((bind, 0)) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("p2pmpi: warning: no port for the failure detector on {bind}: {e}");
                None
            }
        };
    }
    udp_only.map(|u| (u, None))
}

/// Follows the control connection: a `Stop` or the launcher's disappearance ends the process.
fn watch_launcher(mut conn: TcpStream, rank: i32) {
    let ctx = crate::context::current();
    loop {
        match control::read_msg(&mut conn) {
            Ok(Some(Control::Stop { reason })) => {
                if !is_finalizing() {
                    eprintln!("p2pmpi: rank {rank}: stopped by the launcher: {reason}");
                    crate::failure::leave();
                    crate::fatal::exit(143);
                }
                return;
            }
            Ok(Some(Control::Lease { stamp_us })) => fence::granted(stamp_us),
            Ok(Some(Control::Excluded { .. })) => fence::excluded(),
            Ok(Some(Control::Agreed { comm, seq, flag, failed, id })) => {
                agreements::decided(ctx, (comm, seq), Ok((flag, failed, id)));
            }
            Ok(Some(Control::AgreeRefused { comm, seq, reason })) => {
                agreements::decided(ctx, (comm, seq), Err(reason));
            }
            Ok(Some(Control::Revoked { comm })) => {
                if let Ok(ctx) = u32::try_from(comm) {
                    crate::device::revocations::told(ctx);
                }
            }
            Ok(Some(Control::Spawned { base, error })) => {
                spawning::answered(ctx, error.map_or(Ok(base), Err));
            }
            Ok(Some(Control::Dead { slots })) => {
                if fence::my_slot().is_some_and(|me| slots.contains(&me)) {
                    fence::excluded();
                }
                crate::failure::declared_dead(&ctx.failures, &slots);
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => {
                if fence::is_excluded() {
                    fence::excluded();
                }
                if !is_finalizing() {
                    eprintln!("p2pmpi: rank {rank}: lost contact with the launcher; stopping");
                    crate::failure::leave();
                    crate::fatal::exit(143);
                }
                return;
            }
        }
    }
}

/// Agreements of fault-aware programs: contributions go to the launcher, which decides
/// ([`p2pmpi_core::agreement`]); decisions come back on the control connection.
pub(crate) mod agreements {
    use super::*;
    use crate::context::Context;
    pub(crate) use crate::context::Outcome;

    pub(super) fn decided(ctx: &Context, key: (u64, u64), o: Outcome) {
        ctx.answers.decided.lock().insert(key, o);
    }

    /// Sends this process's contribution. Without a launcher (a program started alone, a
    /// world of one) the decision is taken here: every member is this process.
    pub(crate) fn contribute(key: (u64, u64), members: &[u32], flag: u32) {
        if !connected() {
            let ctx = crate::context::current();
            decided(ctx, key, Ok((flag, Vec::new(), ctx.answers.alone.fetch_add(1, Ordering::SeqCst))));
            return;
        }
        send(&Control::Agree { comm: key.0, seq: key.1, members: members.to_vec(), flag });
    }

    /// The decision of `key`, once it arrived (taken: each is asked for once).
    pub(crate) fn take(key: (u64, u64)) -> Option<Outcome> {
        crate::context::current().answers.decided.lock().remove(&key)
    }
}

/// The universe size (`MPI_UNIVERSE_SIZE`): the processes the grid could give, at least the
/// job's.
pub(crate) fn universe_size() -> usize {
    let job = crate::context::with_engine(|e| e.world_size as usize);
    let known = std::env::var(env::UNIVERSE_SIZE).ok().and_then(|v| v.trim().parse::<usize>().ok());
    known.map_or(job, |u| u.max(job))
}

/// The application number (`MPI_APPNUM`): in a process started by `spawn_multiple`, which
/// of its programs it runs; 0 otherwise.
pub(crate) fn appnum() -> isize {
    std::env::var(env::APPNUM).ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Asks the launcher to revoke communicator `ctx` everywhere (ULFM's revoke). Without a
/// launcher this process is the whole job.
pub(crate) fn revoke(ctx: u32) {
    send(&Control::Revoke { comm: u64::from(ctx) });
}

/// Tells the launcher this process aborts the job.
pub(crate) fn report_abort(rank: i32, code: i32, message: &str, lost: Option<i32>) {
    finalizing();
    // The launcher knows processes by slot: a lost rank is named by its first replica.
    let lost = lost.filter(|r| *r >= 0).map(|r| match crate::failure::layout() {
        Some(l) => l.slot(r as usize, 0) as u32,
        None => r as u32,
    });
    send(&Control::Abort { rank: rank.max(0) as u32, code, message: message.to_string(), lost });
}

/// Fencing in a replicated job (see [`p2pmpi_core::fencing`]): this process sends nothing
/// while its lease is not valid, renews it every quarter of its length through the control
/// connection, exits quietly when the launcher says it was excluded, and stops itself when it
/// cannot reach the launcher for [`Lease::stop_after`](p2pmpi_core::fencing::Lease::stop_after).
pub(crate) mod fence {
    use super::{send, Control, Error, Result};
    use crate::lease;
    use std::time::Duration;

    pub(crate) use crate::lease::{granted, is_excluded, my_slot};

    /// Starts fencing with leases of `length` and the renewal thread.
    pub(crate) fn start(length: Duration, slot: i32) -> Result<()> {
        let launcher = lease::Launcher { ask_renewal: |stamp_us| send(&Control::Renew { stamp_us }), excluded };
        if !lease::start(length, slot, launcher) {
            return Ok(());
        }
        std::thread::Builder::new()
            .name("p2pmpi-lease".into())
            .spawn(renew_loop)
            .map(|_| ())
            .map_err(|e| Error::Bootstrap(format!("cannot start the lease thread: {e}")))
    }

    fn renew_loop() {
        let every = lease::with_lease(|l| l.renew_every()).expect("started");
        loop {
            if super::is_finalizing() && crate::lifecycle::is_finalized() {
                return;
            }
            let t = lease::now().expect("started");
            send(&Control::Renew { stamp_us: t.as_micros() as u64 });
            let out = lease::with_lease(|l| l.out_of_contact(t)).unwrap_or(false);
            if out && !crate::lifecycle::is_finalized() {
                let l = lease::with_lease(|l| l.stop_after()).unwrap_or_default();
                eprintln!(
                    "p2pmpi: slot {}: no lease from the launcher for {:.1} s (cut off from it?); stopping",
                    my_slot().unwrap_or(0),
                    l.as_secs_f64()
                );
                crate::fatal::exit(1);
            }
            std::thread::sleep(every);
        }
    }

    /// The launcher excluded this process (it was frozen or cut off, and the job went on
    /// without it): it leaves quietly — the launcher reports it, and its output is no longer
    /// shown.
    pub(crate) fn excluded() -> ! {
        lease::set_excluded();
        if std::env::var_os("P2PMPI_REPL_DEBUG").is_some() {
            eprintln!("p2pmpi: slot {:?}: excluded from the job by the launcher; exiting", my_slot());
        }
        // The launcher learns that it came back (it reports it); a lock held by a thread
        // that froze mid-write is not waited for long.
        crate::launcher::try_send_within(&Control::Excluded { reason: "resumed".into() }, Duration::from_millis(100));
        crate::fatal::exit_at_once(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `P2PMPI_PORTS` with the peer daemons' service ports after `!`: never listened on, even
    /// when free for TCP (the failure detector's is UDP only), since confined processes may not
    /// connect to them. With every other port of a small range taken, binding fails rather than
    /// take the service port.
    #[test]
    fn the_service_ports_after_the_bang_are_never_taken() {
        assert_eq!(parse_ports(Some("9801-9900!9897,9899")), Some((9801, 9900, vec![9897, 9899])));
        assert_eq!(parse_ports(Some("9801-9900")), Some((9801, 9900, vec![])));
        assert_eq!(parse_ports(Some("x-9900")), None);
        let (lo, held) = (0..64u16)
            .map(|b| 30_000 + ((std::process::id() as u16 % 500) * 4 + b * 8) % 20_000)
            .find_map(|lo| {
                let held: Vec<TcpListener> =
                    (lo..lo + 3).map_while(|p| TcpListener::bind(("127.0.0.1", p)).ok()).collect();
                (held.len() == 3).then_some((lo, held))
            })
            .expect("three consecutive free ports");
        // Port lo + 1 free, but named a service port: not taken.
        drop(held);
        let _a = TcpListener::bind(("127.0.0.1", lo)).unwrap();
        let _c = TcpListener::bind(("127.0.0.1", lo + 2)).unwrap();
        let range = format!("{lo}-{}!{}", lo + 2, lo + 1);
        assert!(bind_data_port("127.0.0.1", Some(&range)).is_err());
        let l = bind_data_port("127.0.0.1", Some(&format!("{lo}-{}", lo + 2))).unwrap();
        assert_eq!(l.local_addr().unwrap().port(), lo + 1);
    }

    /// A job larger than the soft limit of open files raises it to the hard one; larger than
    /// the hard one, it stops at once with the numbers and what to raise.
    #[test]
    fn a_job_too_large_for_the_open_files_limit_is_named() {
        let set = std::cell::Cell::new(None);
        let get = || Some((1024, 4096));
        let record = |s, h| {
            set.set(Some((s, h)));
            true
        };
        room_for_connections(900, get, record).unwrap();
        assert_eq!(set.get(), None, "1024 leaves room for 900 processes");
        room_for_connections(2000, get, record).unwrap();
        assert_eq!(set.get(), Some((4096, 4096)), "the soft limit raised to the hard one");
        let e = room_for_connections(5000, get, record).unwrap_err().to_string();
        assert!(e.contains("5000 processes needs 5064 open files") && e.contains("may open 4096"), "{e}");
        let e = room_for_connections(2000, get, |_, _| false).unwrap_err().to_string();
        assert!(e.contains("raising it to 4096 failed"), "{e}");
        // This process: the real limits, read, and raised when a job needs it.
        let (soft, hard) = rlimit_nofile().unwrap();
        assert!(soft <= hard && hard > SPARE_FDS);
        let slots = soft.min(hard - SPARE_FDS);
        room_for_connections(slots, rlimit_nofile, set_rlimit_nofile).unwrap();
        assert!(rlimit_nofile().unwrap().0 >= slots + SPARE_FDS);
    }

    /// The data port takes the openings of a 257-rank job at once, none accepted yet: each
    /// connects without waiting for a retransmission of its SYN (with `bind`'s queue of 128
    /// the 129th would wait 1 s, and time out here).
    #[test]
    fn the_data_port_queues_the_openings_of_a_large_job() {
        let somaxconn = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(4096);
        let n = 256.min(somaxconn);
        let l = bind_data_port("127.0.0.1", None).unwrap();
        let addr = l.local_addr().unwrap();
        let conns: Vec<std::net::TcpStream> = (0..n)
            .map(|i| {
                std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(700))
                    .unwrap_or_else(|e| panic!("opening {i} of {n} not queued: {e}"))
            })
            .collect();
        assert_eq!(conns.len(), n);
    }

    /// With every port of the range but one taken for TCP (the data ports of the host's other
    /// processes), the detector still finds the one where both its UDP socket and its
    /// k-monitor listener fit. (It used to try two ports and run without the k-monitor
    /// detector: "no TCP port for the k-monitor detector".)
    #[test]
    fn the_detector_port_is_one_free_for_udp_and_tcp() {
        // Sixteen consecutive ports free for TCP, held but one.
        let base = 20_000 + (std::process::id() % 2000) as u16 * 16;
        let (lo, mut held) = (0..64u16)
            .map(|b| base.wrapping_add(b * 16) % 40_000 + 20_000)
            .find_map(|lo| {
                let held: Vec<TcpListener> =
                    (lo..lo + 16).map_while(|p| TcpListener::bind(("127.0.0.1", p)).ok()).collect();
                (held.len() == 16).then_some((lo, held))
            })
            .expect("16 free ports");
        let free = lo + 11;
        held.remove(11);
        let range = format!("{lo}-{}", lo + 15);
        let (udp, tcp) = bind_fd_port("127.0.0.1", Some(&range)).expect("a UDP port");
        assert_eq!(udp.local_addr().unwrap().port(), free);
        assert_eq!(tcp.expect("a k-monitor listener").local_addr().unwrap().port(), free);
        // None left with both free: UDP only, still in the range.
        let (udp2, tcp2) = bind_fd_port("127.0.0.1", Some(&range)).expect("a UDP port");
        let p = udp2.local_addr().unwrap().port();
        assert!((lo..=lo + 15).contains(&p) && p != free && tcp2.is_none());
    }
}
