//! Environment management: initialization, the universe, finalization, time.

use crate::bootstrap;
use crate::context::Context;
use crate::device::Engine;
use crate::error::Result;
use crate::topology::SimpleCommunicator;
use std::os::raw::c_int;
use std::time::Duration;

pub use crate::context::data_address;
pub(crate) use crate::context::{wait_until, with_engine};
pub use crate::lifecycle::processor_name;
pub use crate::lifecycle::{is_finalized, is_initialized, threading_support, time, time_resolution, Threading};
pub(crate) use crate::lifecycle::{is_init_thread, own_rank};

/// The MPI environment: dropping it finalizes (after every message already sent is delivered
/// to the peers' sockets and every peer finalized). It owns the running process's context
/// (`crate::context::Context`), which its end finalizes.
pub struct Universe {
    buffer: Option<Vec<u8>>,
    ctx: &'static Context,
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
        crate::bootstrap::universe_size()
    }

    pub(crate) fn appnum_now() -> isize {
        crate::bootstrap::appnum()
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

    /// Saves a checkpoint of the program's `state` at `step`, with the library's own state:
    /// collective over the world, every rank at the same `step`. It is consistent or not taken:
    /// [`checkpoint::Error::InFlight`](crate::checkpoint::Error::InFlight) when a message sent
    /// was not received yet. The generation is complete (a restart may use it) once every
    /// rank's piece is written; the one before is then deleted. Costs one serialization of
    /// `state` and the write. See [`crate::checkpoint`].
    pub fn checkpoint<T: serde::Serialize>(
        &self,
        step: u64,
        state: &T,
    ) -> std::result::Result<(), crate::checkpoint::Error> {
        crate::checkpoint::checkpoint(step, state)
    }

    /// In a process restarted from a checkpoint, the step and state of the last complete
    /// checkpoint (call it before communicating); `None` on a fresh start. A restore into
    /// another type than the one saved, from another program, or from a corrupted piece stops
    /// the process with an error that says so.
    pub fn restored<T: serde::de::DeserializeOwned>(&self) -> Option<(u64, T)> {
        crate::checkpoint::restored::<T>()
    }
}

impl Drop for Universe {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A panicking rank cannot take part in the finalization handshake (its peers may
            // be waiting for it in a collective): stop the job instead of waiting forever. The
            // launcher is told the panic's message, and shows it with the rank on each line.
            let text = self.ctx.panic_text.lock().take();
            abandon(text.as_deref().unwrap_or("the process panicked"));
            return;
        }
        self.detach_buffer();
        finalize(self.ctx);
    }
}

/// While the library runs under a launcher, a panic of the thread that initialized it is not
/// printed here: its message goes to the launcher with the abort (when the [`Universe`] is
/// dropped by the unwinding), which prints it with the rank on each line. Other threads'
/// panics, and panics before initialization or after finalization, print as usual; with
/// `RUST_BACKTRACE` set the usual report (with its backtrace) is printed too.
fn install_panic_hook(ctx: &'static Context) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_init_thread() || !crate::lifecycle::is_running() {
            return previous(info);
        }
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "Box<dyn Any>".into());
        let at = info.location().map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column())).unwrap_or_default();
        *ctx.panic_text.lock() = Some(format!("panicked{at}:\n{msg}"));
        if std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0") {
            previous(info);
        }
    }));
}

/// Gives up the communication layer without the finalization handshake and asks the
/// launcher to stop the job.
fn abandon(why: &str) {
    if !crate::lifecycle::end() {
        return;
    }
    let rank = own_rank();
    bootstrap::report_abort(rank, 101, &format!("p2pmpi: rank {rank}: {why}"), None);
}

/// Stops every process of the job because of an error: prints `p2pmpi: rank R: cause` on
/// standard error, tells the launcher (which shows the message and stops the others), and
/// exits with `errorcode`'s low byte (1 if it is 0). What `MPI_ERRORS_ARE_FATAL` does in a
/// library with a C interface (`p2pmpi-abi`), where `cause` names the failed function.
pub fn abort_with_message(errorcode: c_int, cause: &str) -> ! {
    let rank = own_rank();
    let msg = format!("p2pmpi: rank {rank}: {cause}");
    let status = if errorcode & 0xff == 0 { 1 } else { errorcode & 0xff };
    // A call that failed because a rank was lost (ULFM's MPIX_ERR_PROC_FAILED, 101): the
    // launcher is told which, and reports that rank's own end as the job's cause.
    let lost = if errorcode == 101 { crate::fatal::take_lost() } else { None };
    crate::fatal::stop_with(rank, errorcode, &msg, lost, status)
}

/// Notes that this thread's last call failed because rank `rank` was lost (for a layer above
/// the library that maps the failure to an error code itself, such as the MPICH ABI): a later
/// [`abort_with_message`] with ULFM's `MPIX_ERR_PROC_FAILED` names that rank to the launcher.
pub fn note_lost_rank(rank: c_int) {
    crate::fatal::note_lost(rank);
}

/// Initializes the library with [`Threading::Single`]. Returns `None` if it was initialized
/// before (also after finalization).
pub fn initialize() -> Option<Universe> {
    initialize_with_threading(Threading::Single).map(|x| x.0)
}

/// Initializes the library with the requested thread support; returns the universe and the
/// level provided (every level is supported). `None` if it was initialized before.
pub fn initialize_with_threading(threading: Threading) -> Option<(Universe, Threading)> {
    if !crate::lifecycle::begin() {
        return None;
    }
    crate::lifecycle::set_threading(threading);
    let ctx = crate::context::create();
    let boot = match bootstrap::boot() {
        Ok(b) => b,
        Err(e) => {
            let rank = std::env::var(bootstrap::env::RANK).unwrap_or_else(|_| "?".into());
            eprintln!("p2pmpi: rank {rank}: {e}");
            crate::fatal::exit(1);
        }
    };
    crate::lifecycle::set_own_rank(boot.rank - boot.world_base);
    crate::fatal::install(crate::fatal::Farewell {
        report_abort: bootstrap::report_abort,
        report_finalized: bootstrap::report_finalized,
        leave: crate::failure::leave,
    });
    install_panic_hook(ctx);
    crate::random::set_job_seed(ctx, boot.key.seed("random"));
    crate::collective::install_creation_collectives();
    #[cfg(feature = "failpoints")]
    arm_failpoints(boot.slot);
    crate::hosts::set_world_hosts(&boot.addrs, boot.world_base, boot.layout.is_some());
    let spin = spin_budget(boot.local_procs);
    let yield_spin = yield_budget(boot.local_procs);
    let engine = Engine::new(boot.rank, boot.size, boot.slot, boot.layout, boot.key, boot.listener, boot.addrs, spin)
        .map(|mut e| {
            e.upcalls = crate::device::Upcalls {
                failures_pending: || crate::context::current().failures.pending(),
                take_failures: || crate::context::current().failures.take_pending(),
                retell_failures: || crate::context::current().failures.renotify(),
                suspect: crate::failure::suspect,
                rank_lost: crate::failure::rank_lost,
            };
            e.yield_spin = yield_spin;
            e.waiting = crate::device::Waiting::new(adaptive_wait());
            e.encrypt = boot.encrypt;
            e.world_base = boot.world_base;
            e.world_size = boot.world_size;
            e
        });
    let parents = boot.parents;
    let unreplicated = boot.layout.is_none();
    let engine = engine.and_then(|mut e| {
        // A restarted process numbers its messages from its checkpoint before any connection
        // is up: a peer restored sooner may send at once (its first messages must not be
        // taken for messages out of order while this one still connects).
        // (Replicated jobs put them back in `restored()`, as before: their replicas' logs
        // follow the counters.)
        if let Some(l) = unreplicated.then(crate::checkpoint::early_library_state).flatten() {
            e.restore_sequences(&l.send, &l.recv);
            crate::checkpoint::sequences_restored();
        }
        e.connect_mesh(Duration::from_secs(120) * crate::device::load_factor())?;
        if let Some(p) = &parents {
            // A spawned process: its parents wait in `spawn` until it connected to each.
            e.connect_to(&p.ids, Duration::from_secs(60))?;
            crate::topology::inter::set_parents(p);
        }
        Ok(e)
    });
    match engine {
        Ok(e) => ctx.run(e),
        Err(e) => crate::error::fatal(&e),
    }
    if crate::checkpoint::restarting() {
        // The world communicator is made now (it asks the engine): the program names it
        // before it restores its checkpoint.
        let _ = SimpleCommunicator::world();
        ctx.hold_engine();
    }
    Some((Universe { buffer: None, ctx }, threading))
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
            Ok(()) => crate::device::failpoints::ARMED.store(true, std::sync::atomic::Ordering::SeqCst),
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

/// Whether waits on sockets choose between spinning and sleeping from what the machine does
/// (`device::engine::waiting`): yes, unless the spin budget is set by hand
/// (`P2PMPI_SPIN_US`) or `P2PMPI_WAIT=spin` asks for the fixed budget.
fn adaptive_wait() -> bool {
    std::env::var_os(bootstrap::env::SPIN_US).is_none() && std::env::var("P2PMPI_WAIT").map_or(true, |v| v != "spin")
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
fn finalize(ctx: &Context) {
    if !crate::lifecycle::is_running() {
        return;
    }
    // A restarted process that never asked for its checkpoint finalizes all the same.
    ctx.release_engine();
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
        ctx.close();
        crate::lifecycle::end();
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
    ctx.close();
    crate::lifecycle::end();
    bootstrap::report_finalized(rank);
    crate::failure::leave();
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

/// The MPI standard version this library follows.
pub fn version() -> (c_int, c_int) {
    (3, 1)
}

/// Identifies the library.
pub fn library_version() -> std::result::Result<String, std::string::FromUtf8Error> {
    Ok(format!("p2pmpi {} (P2P-MPI in Rust, TCP and shared-memory device)", env!("CARGO_PKG_VERSION")))
}
