//! Environment management: initialization, the universe, finalization, time.

use crate::bootstrap;
use crate::device::{Engine, ReqId, StatusInfo};
use crate::error::{Error, Result};
use crate::topology::SimpleCommunicator;
use parking_lot::Mutex;
use std::os::raw::{c_double, c_int};
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// Thread support levels, as in MPI.
#[derive(Copy, Clone, PartialEq, Eq, Debug, PartialOrd, Ord, Hash)]
pub enum Threading {
    /// Only one thread exists.
    Single,
    /// Only the initializing thread makes MPI calls.
    Funneled,
    /// Any thread may call, one at a time.
    Serialized,
    /// Any thread, concurrently.
    Multiple,
}

const UNINIT: u8 = 0;
const RUNNING: u8 = 1;
const FINALIZED: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static THREADING: AtomicU8 = AtomicU8::new(0);
static OWN_RANK: AtomicI32 = AtomicI32::new(-1);
static INIT_THREAD: OnceLock<ThreadId> = OnceLock::new();
static EPOCH: OnceLock<Instant> = OnceLock::new();
pub(crate) static ENGINE: Mutex<Option<Engine>> = Mutex::new(None);

/// This process's world rank (-1 before initialization), for messages.
pub(crate) fn own_rank() -> i32 {
    OWN_RANK.load(Ordering::Relaxed)
}

/// Whether the current thread is the one that initialized.
pub(crate) fn is_init_thread() -> bool {
    INIT_THREAD.get().is_some_and(|t| *t == std::thread::current().id())
}

/// The MPI environment: dropping it finalizes (after every message already sent is delivered
/// to the peers' sockets and every peer finalized).
pub struct Universe {
    buffer: Option<Vec<u8>>,
}

impl Universe {
    /// The communicator of all processes of the job.
    pub fn world(&self) -> SimpleCommunicator {
        SimpleCommunicator::world()
    }

    /// The universe size (`MPI_UNIVERSE_SIZE`): the number of processes the grid could give
    /// the job, when the launcher says so (`P2PMPI_UNIVERSE_SIZE`), else the job's size.
    pub fn size(&self) -> Option<usize> {
        Some(Self::size_now())
    }

    pub(crate) fn size_now() -> usize {
        let job = with_engine(|e| e.world_size as usize);
        let known = std::env::var(bootstrap::env::UNIVERSE_SIZE).ok().and_then(|v| v.trim().parse::<usize>().ok());
        known.map_or(job, |u| u.max(job))
    }

    pub(crate) fn appnum_now() -> isize {
        std::env::var(bootstrap::env::APPNUM).ok().and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    /// The application number: in a process started by `spawn_multiple`, which of its
    /// programs it runs; 0 otherwise.
    pub fn appnum(&self) -> Option<isize> {
        Some(Self::appnum_now())
    }

    /// Size of the buffer attached for buffered sends (0 if none).
    pub fn buffer_size(&self) -> usize {
        self.buffer.as_ref().map_or(0, Vec::len)
    }

    /// Attaches a buffer of `size` bytes for buffered sends (replacing any previous one).
    pub fn set_buffer_size(&mut self, size: usize) {
        self.detach_buffer();
        assert!(size <= c_int::MAX as usize, "Buffer length exceeds the range of a C int.");
        if size > 0 {
            self.buffer = Some(vec![0u8; size]);
            crate::point_to_point::set_bsend_capacity(size);
        }
    }

    /// Detaches the buffered-send buffer, waiting until the messages in it are sent.
    pub fn detach_buffer(&mut self) {
        if self.buffer.take().is_some() {
            crate::point_to_point::drain_bsend();
            crate::point_to_point::set_bsend_capacity(0);
        }
    }

    /// Disconnects from the parent job: afterwards `Communicator::parent` answers `None`, as
    /// MPI's `MPI_Comm_get_parent` does once the parent communicator is disconnected. What was
    /// sent to the parents is still delivered (the connections close, after every queued
    /// message, when the library finalizes).
    pub fn disconnect_parent(&mut self) {
        crate::topology::disconnect_parent();
    }
}

impl Drop for Universe {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A panicking rank cannot take part in the finalization handshake (its peers may
            // be waiting for it in a collective): stop the job instead of waiting forever. The
            // launcher is told the panic's message, and shows it with the rank on each line.
            let text = PANIC_TEXT.lock().take();
            abandon(text.as_deref().unwrap_or("the process panicked"));
            return;
        }
        self.detach_buffer();
        finalize();
    }
}

/// The message of a panic of the thread that initialized the library, kept by the panic hook
/// for the launcher ([`install_panic_hook`]).
static PANIC_TEXT: Mutex<Option<String>> = Mutex::new(None);

/// While the library runs under a launcher, a panic of the thread that initialized it is not
/// printed here: its message goes to the launcher with the abort (when the [`Universe`] is
/// dropped by the unwinding), which prints it with the rank on each line. Other threads'
/// panics, and panics before initialization or after finalization, print as usual; with
/// `RUST_BACKTRACE` set the usual report (with its backtrace) is printed too.
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let ours = INIT_THREAD.get() == Some(&std::thread::current().id());
        if !ours || STATE.load(Ordering::SeqCst) != RUNNING {
            return previous(info);
        }
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "Box<dyn Any>".into());
        let at = info.location().map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column())).unwrap_or_default();
        *PANIC_TEXT.lock() = Some(format!("panicked{at}:\n{msg}"));
        if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
            previous(info);
        }
    }));
}

/// Gives up the communication layer without the finalization handshake and asks the
/// launcher to stop the job.
fn abandon(why: &str) {
    if STATE.compare_exchange(RUNNING, FINALIZED, Ordering::SeqCst, Ordering::SeqCst).is_err() {
        return;
    }
    let rank = own_rank();
    bootstrap::report_abort(rank, 101, &format!("p2pmpi: rank {rank}: {why}"), None);
}

/// Whether `initialize` was called (still true after finalization, as in MPI).
pub fn is_initialized() -> bool {
    STATE.load(Ordering::SeqCst) != UNINIT
}

/// Whether the universe was finalized.
pub fn is_finalized() -> bool {
    STATE.load(Ordering::SeqCst) == FINALIZED
}

/// Initializes the library with [`Threading::Single`]. Returns `None` if it was initialized
/// before (also after finalization).
pub fn initialize() -> Option<Universe> {
    initialize_with_threading(Threading::Single).map(|x| x.0)
}

/// Initializes the library with the requested thread support; returns the universe and the
/// level provided (every level is supported). `None` if it was initialized before.
pub fn initialize_with_threading(threading: Threading) -> Option<(Universe, Threading)> {
    if STATE.compare_exchange(UNINIT, RUNNING, Ordering::SeqCst, Ordering::SeqCst).is_err() {
        return None;
    }
    EPOCH.get_or_init(Instant::now);
    let _ = INIT_THREAD.set(std::thread::current().id());
    THREADING.store(threading as u8, Ordering::SeqCst);
    let boot = match bootstrap::boot() {
        Ok(b) => b,
        Err(e) => {
            let rank = std::env::var(bootstrap::env::RANK).unwrap_or_else(|_| "?".into());
            eprintln!("p2pmpi: rank {rank}: {e}");
            std::process::exit(1);
        }
    };
    OWN_RANK.store(boot.rank - boot.world_base, Ordering::SeqCst);
    install_panic_hook();
    crate::random::set_job_seed(boot.key.seed("random"));
    #[cfg(feature = "failpoints")]
    arm_failpoints(boot.slot);
    crate::collective::hier::set_world_hosts(&boot.addrs, boot.world_base, boot.layout.is_some());
    let spin = spin_budget(boot.local_procs);
    let yield_spin = yield_budget(boot.local_procs);
    let engine = Engine::new(boot.rank, boot.size, boot.slot, boot.layout, boot.key, boot.listener, boot.addrs, spin)
        .map(|mut e| {
            e.yield_spin = yield_spin;
            e.encrypt = boot.encrypt;
            e.world_base = boot.world_base;
            e.world_size = boot.world_size;
            e
        });
    let parents = boot.parents;
    let engine = engine.and_then(|mut e| {
        e.connect_mesh(Duration::from_secs(120) * crate::device::load_factor())?;
        if let Some(p) = &parents {
            // A spawned process: its parents wait in `spawn` until it connected to each.
            e.connect_to(&p.ids, Duration::from_secs(60))?;
            crate::topology::inter::set_parents(p);
        }
        Ok(e)
    });
    match engine {
        Ok(e) => *ENGINE.lock() = Some(e),
        Err(e) => crate::error::fatal(&e),
    }
    Some((Universe { buffer: None }, threading))
}

/// Arms the fault-injection points of this process from `P2PMPI_FAILPOINTS_SLOT<slot>`:
/// `name=actions;name=actions`, with the `fail` crate's action syntax (`2*off->return`: the
/// third time the point is reached, the process dies there). Tests only.
#[cfg(feature = "failpoints")]
fn arm_failpoints(slot: i32) {
    let Ok(spec) = std::env::var(format!("P2PMPI_FAILPOINTS_SLOT{slot}")) else { return };
    for item in spec.split(';').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((name, actions)) = item.split_once('=') else {
            eprintln!("p2pmpi: slot {slot}: failpoint setting {item:?} is not name=actions");
            continue;
        };
        match fail::cfg(name.trim(), actions.trim()) {
            Ok(()) => crate::device::failpoints::ARMED.store(true, Ordering::SeqCst),
            Err(e) => eprintln!("p2pmpi: slot {slot}: failpoint {name}: {e}"),
        }
    }
}

/// How long a blocking call polls before sleeping: zero when the host runs more processes of
/// the job than it has cores (polling would take the core from the process we wait for).
fn spin_budget(local_procs: usize) -> Duration {
    if let Some(us) = std::env::var(bootstrap::env::SPIN_US).ok().and_then(|v| v.parse().ok()) {
        return Duration::from_micros(us);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if local_procs > cores {
        Duration::ZERO
    } else {
        Duration::from_millis(2)
    }
}

/// How long a blocking call keeps polling with `sched_yield` between polls (after the plain
/// spin) before sleeping in the kernel.
fn yield_budget(local_procs: usize) -> Duration {
    if let Some(us) = std::env::var("P2PMPI_YIELD_US").ok().and_then(|v| v.parse().ok()) {
        return Duration::from_micros(us);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if local_procs > cores {
        Duration::from_millis(2)
    } else {
        Duration::ZERO
    }
}

/// Finalizes: flushes every queued message, says goodbye to every peer, waits until they did
/// the same, and tells the launcher.
fn finalize() {
    if STATE.load(Ordering::SeqCst) != RUNNING {
        return;
    }
    bootstrap::finalizing();
    if crate::failure::policy() == crate::failure::Policy::Notify
        && !crate::failure::failed_ranks().is_empty()
        && crate::failure::layout().is_none()
    {
        // A program that handles failures, after one: the goodbye handshake would wait for
        // the dead; finish without it (what was sent is flushed as far as the living take it).
        // (With `-r R` the dead replicas' connections are gone already: the handshake runs
        // with the living, and a replica still waits for its master's commits.)
        let _ = wait_until(None, |e| e.all_sent().then_some(Ok(())));
        let rank = own_rank();
        *ENGINE.lock() = None;
        STATE.store(FINALIZED, Ordering::SeqCst);
        bootstrap::report_finalized(rank);
        crate::failure::leave();
        return;
    }
    let res = (|| -> Result<()> {
        // A replica also waits for its master to commit what it keeps: until then it may
        // have to take over (and a dead master is noticed meanwhile).
        wait_until(None, |e| (e.all_sent() && !e.backup_pending()).then_some(Ok(())))?;
        write_trace();
        with_engine(|e| e.send_byes());
        wait_until(None, |e| e.all_closed().then_some(Ok(())))
    })();
    if let Err(e) = res {
        crate::error::fatal(&e);
    }
    let rank = own_rank();
    *ENGINE.lock() = None;
    STATE.store(FINALIZED, Ordering::SeqCst);
    bootstrap::report_finalized(rank);
    crate::failure::leave();
}

/// Applies the peer failures and revocations told to this process since the last call
/// (their pending requests fail).
#[inline]
pub(crate) fn apply_notices(e: &mut Engine) {
    if crate::failure::PENDING.load(Ordering::Relaxed) {
        for k in crate::failure::take_pending() {
            e.peer_failed(k);
        }
    }
    if crate::ulfm::REVOKE_PENDING.load(Ordering::Relaxed) {
        e.is_revoked(0);
    }
}

/// With `P2PMPI_TRACE=DIR`, writes the messages this process accepted to
/// `DIR/trace-<slot>.txt` (tests of the replication protocol compare replicas).
fn write_trace() {
    let Some(dir) = std::env::var_os("P2PMPI_TRACE") else { return };
    let (slot, lines) = with_engine(|e| (e.slot, e.trace_lines()));
    if let Some(lines) = lines {
        let path = std::path::Path::new(&dir).join(format!("trace-{slot}.txt"));
        if let Err(e) = std::fs::write(&path, lines) {
            eprintln!("p2pmpi: cannot write {}: {e}", path.display());
        }
    }
}

/// The level of thread support provided.
pub fn threading_support() -> Threading {
    match THREADING.load(Ordering::SeqCst) {
        0 => Threading::Single,
        1 => Threading::Funneled,
        2 => Threading::Serialized,
        _ => Threading::Multiple,
    }
}

/// The address of this process's data port (`None` for a one-process world). Not in rsmpi.
pub fn data_address() -> Option<std::net::SocketAddr> {
    with_engine(|e| e.local_addr())
}

/// The MPI standard version this library follows.
pub fn version() -> (c_int, c_int) {
    (3, 1)
}

/// Identifies the library.
pub fn library_version() -> std::result::Result<String, std::string::FromUtf8Error> {
    Ok(format!("p2pmpi {} (P2P-MPI in Rust, TCP and shared-memory device)", env!("CARGO_PKG_VERSION")))
}

/// The name of this host.
pub fn processor_name() -> std::result::Result<String, std::string::FromUtf8Error> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`, which outlives the call
    // (no std API gives the host name).
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc != 0 {
        return Ok("localhost".into());
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec())
}

/// Seconds elapsed since an arbitrary point in the past (`MPI_Wtime`).
pub fn time() -> c_double {
    EPOCH.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// Resolution of [`time`] in seconds (`MPI_Wtick`).
pub fn time_resolution() -> c_double {
    1e-9
}

// ------------------------------------------------------------------- engine access

/// Runs `f` on the engine. Panics when used before `initialize` or after finalization.
pub(crate) fn with_engine<R>(f: impl FnOnce(&mut Engine) -> R) -> R {
    let mut g = ENGINE.lock();
    match g.as_mut() {
        Some(e) => f(e),
        None => panic!("{}", not_running()),
    }
}

fn not_running() -> &'static str {
    if is_finalized() {
        "p2pmpi: MPI was already finalized (the Universe was dropped)"
    } else {
        "p2pmpi: MPI is not initialized (call mpi::initialize() first)"
    }
}

/// How long one sleep in the kernel may last before conditions are checked again.
fn block_slice() -> Duration {
    if threading_support() == Threading::Multiple {
        Duration::from_millis(2)
    } else {
        Duration::from_millis(50)
    }
}

/// While spinning, give the core away every this many polls: the kernel finishes some TCP
/// transmissions in softirq context (autocorked small segments are pushed when the previous
/// one is freed), and two processes polling on two cores can starve it for milliseconds.
const YIELD_EVERY: u32 = 64;

/// While spinning for a peer on this host, looks at its rings this many times between two
/// progress rounds ([`Engine::await_ring`]).
const RING_LOOKS: u32 = 32;

/// A blocking wait reads the clock once every this many polls.
const CLOCK_EVERY: u32 = 8;

/// `P2PMPI_DEBUG` set: blocking waits print the device state (what is posted, queued, …).
fn debug_waits() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("P2PMPI_DEBUG").is_some())
}

/// Makes progress until `check` returns a value. `hint` is the peer whose data is awaited.
/// Polls without sleeping for the spin budget, then sleeps in `epoll_wait`. Returns the first
/// fatal communication error instead of waiting forever.
pub(crate) fn wait_until<T>(hint: Option<i32>, mut check: impl FnMut(&mut Engine) -> Option<Result<T>>) -> Result<T> {
    let mut start: Option<Instant> = None;
    let mut spins: u32 = 0;
    // The clock is read every CLOCK_EVERY rounds: a shared-memory poll costs a few loads,
    // and reading the clock on each round made the loop several times slower.
    let mut rounds: u32 = 0;
    let mut waited = Duration::ZERO;
    loop {
        let mut g = ENGINE.lock();
        let e = g.as_mut().unwrap_or_else(|| panic!("{}", not_running()));
        // Failures and revocations told since are applied before the check: a check that
        // answers at once (a master deciding a test's choice point) must see them, or a
        // program polling with `test` would never learn of them.
        apply_notices(e);
        if let Some(r) = check(e) {
            return r;
        }
        if let Some(f) = &e.fatal {
            return Err(f.clone());
        }
        // The clock starts after a first round: a message already there (the usual case
        // for a receiver behind its sender) is taken without reading it.
        if rounds > 0 {
            let t0 = *start.get_or_insert_with(Instant::now);
            if rounds % CLOCK_EVERY == 0 {
                waited = t0.elapsed();
            }
        }
        rounds = rounds.wrapping_add(1);
        if waited < e.spin {
            e.await_ring(hint, RING_LOOKS);
            match e.ring_poll(hint) {
                // A frame completed a receive: perhaps the awaited one, looked at under the
                // same lock.
                Some(true) => {
                    if let Some(r) = check(e) {
                        return r;
                    }
                }
                Some(false) | None => {
                    e.progress(hint, None);
                }
            }
            spins = spins.wrapping_add(1);
            if spins % YIELD_EVERY == 0 {
                drop(g);
                std::thread::yield_now();
            }
        } else if waited < e.yield_spin {
            // Oversubscribed: poll, and give the core to a runnable peer between polls —
            // unless the poll brought something (a receiver behind its sender takes a frame
            // per poll: it reads on rather than give its turn away after each).
            if !e.progress(hint, None) {
                drop(g);
                std::thread::yield_now();
            }
        } else {
            if debug_waits() {
                eprintln!("rank {} blocking: hint {:?} {}", e.rank, hint, e.debug_state());
            }
            e.progress(hint, Some(block_slice()));
            if let Some(limit) = crate::failure::send_timeout() {
                e.check_stalled_sends(limit);
            }
        }
    }
}

/// Waits for one request and frees it.
pub(crate) fn wait_req(id: ReqId, hint: Option<i32>) -> Result<StatusInfo> {
    wait_until(hint, |e| e.take_done(id))
}

pub(crate) fn fatal_error() -> Option<Error> {
    ENGINE.lock().as_ref().and_then(|e| e.fatal.clone())
}
