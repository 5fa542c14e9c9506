//! Application checkpoints (issue 41): [`Universe::checkpoint`](crate::environment::Universe::checkpoint)
//! saves the program's state with the library's, collectively over the world, and
//! [`Universe::restored`](crate::environment::Universe::restored) hands it back to a process
//! started again from the last complete checkpoint.
//!
//! A checkpoint is consistent: every message the program sent on a communicator was received
//! by the program (the point-to-point sequence counters the matcher keeps anyway, summed over
//! the world in the checkpoint's own all-reduce; nothing is counted per message). Its piece
//! holds the library's state ([`store::LibraryState`]: the next communicator context id, the
//! contexts used and every channel's sequence counters), the state's type name and the hash
//! of the program's executable; a restore into another type or another program stops the
//! process with an error that says so. The cost is one serialization and the write; nothing
//! when the feature is not used.
//!
//! Where the pieces go is a [`store::Store`]: the launcher of a local run names a directory
//! ([`env::DIR`]); a restarted process is told which generation to restore ([`env::RESTORE`])
//! and, until it called `restored()`, holds its engine aside, so that communicating before
//! is an error (the engine's usual check that the library runs, nothing more per message).

pub mod peers;
pub mod store;

use crate::collective::traits::*;
use crate::collective::SystemOperation;
use crate::context::current;
use crate::topology::Communicator;
use crate::topology::SimpleCommunicator;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use store::{Directory, LibraryState, Manifest, PieceHeader, Store, HASH_LEN};

/// The variables a launcher sets for checkpoints.
pub mod env {
    /// The directory where a local run keeps its checkpoints.
    pub const DIR: &str = "P2PMPI_CHECKPOINT_DIR";
    /// In a restarted process: the generation to restore.
    pub const RESTORE: &str = "P2PMPI_CHECKPOINT_RESTORE";
    /// Set by a launcher that reads checkpoint marks on the processes' output (it then
    /// suppresses, after a restart, the lines shown since the checkpoint restored).
    pub const MARKS: &str = "P2PMPI_CHECKPOINT_MARKS";
    /// A grid run: the FT addresses of the peers that may keep the checkpoints, comma-separated
    /// ([`super::peers::Peers`]).
    pub const PEERS: &str = "P2PMPI_CHECKPOINT_PEERS";
    /// A grid run: the job's checkpoint secret (64 hex digits).
    pub const KEY: &str = "P2PMPI_CHECKPOINT_KEY";
    /// A grid run: the id under which the peers keep the job's checkpoints.
    pub const JOB: &str = "P2PMPI_CHECKPOINT_JOB";
    /// A grid run: copies of each piece, each on another peer (`--checkpoint-copies`).
    pub const COPIES: &str = "P2PMPI_CHECKPOINT_COPIES";
}

/// The line a process writes on its standard output at each checkpoint, when the launcher
/// asked for marks ([`env::MARKS`]); the launcher removes it: `MARK_PREFIX` then the generation.
pub const MARK_PREFIX: &str = "\u{1}p2pmpi-checkpoint ";

/// Why a checkpoint was not taken.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Messages are in flight: over the world, the program sent more point-to-point messages
    /// than it received (every rank returns this error; nothing is stored).
    #[error("checkpoint at step {step}: messages are in flight ({sent} sent, {received} received over the world): receive every message before a checkpoint")]
    InFlight { step: u64, sent: u64, received: u64 },
    /// The ranks called the checkpoint at different steps.
    #[error("checkpoint: the ranks are at different steps ({min} to {max})")]
    Steps { min: u64, max: u64 },
    /// No store is configured (`p2pmpirun` sets one: a directory with `--local`, peers of the
    /// grid otherwise).
    #[error(
        "checkpoint: no store for checkpoints in this run (p2pmpirun sets one: {} with --local, {} on the grid)",
        env::DIR,
        env::PEERS
    )]
    NoStore,
    /// The state could not be serialized.
    #[error("checkpoint: cannot serialize the state: {0}")]
    Serialize(String),
    /// A rank could not write its piece, or rank 0 the manifest: the last complete checkpoint
    /// stays the one a restart uses.
    #[error("checkpoint at step {step}: {detail}")]
    Store { step: u64, detail: String },
}

/// The checkpoints of this process.
struct State {
    /// The last generation this process wrote or restored.
    generation: u64,
    /// The store, once opened.
    store: Option<Box<dyn Store>>,
    /// The hash of the program's executable, once computed.
    program: Option<[u8; 32]>,
    /// `restored()` handed its checkpoint out already.
    taken: bool,
}

// Process-wide because `Universe::checkpoint` and `restored` reach it from the program's
// calls as every MPI call reaches the running process, and the generation numbers follow
// one another over the process's life (the context below cannot name the store's type).
static STATE: Mutex<State> = Mutex::new(State { generation: 0, store: None, program: None, taken: false });

/// The generation a restarted process restores.
fn restore_generation() -> Option<u64> {
    std::env::var(env::RESTORE).ok().and_then(|v| v.parse().ok())
}

/// Whether this process was restarted from a checkpoint (and must call `restored()` before
/// it communicates).
pub(crate) fn restarting() -> bool {
    restore_generation().is_some()
}

/// The store this run names, if any: a directory ([`env::DIR`]) or peers of the grid
/// ([`env::PEERS`]; a description that does not hold is reported once and means none).
fn open_store() -> Option<Box<dyn Store>> {
    if let Some(d) = std::env::var_os(env::DIR).filter(|d| !d.is_empty()) {
        return Some(Box::new(Directory::new(d)));
    }
    std::env::var_os(env::PEERS)?;
    match peers::Peers::from_env() {
        Ok(p) => Some(Box::new(p)),
        Err(e) => {
            eprintln!("p2pmpi: rank {}: checkpoints: {e}", crate::lifecycle::own_rank());
            None
        }
    }
}

/// BLAKE3 hash of an executable's file, as a checkpoint's piece records it for the program
/// that wrote it (a launcher compares it before it restarts a job).
pub fn program_hash_of(path: &std::path::Path) -> std::io::Result<[u8; 32]> {
    let mut h = blake3::Hasher::new();
    std::io::copy(&mut std::fs::File::open(path)?, &mut h)?;
    Ok(*h.finalize().as_bytes())
}

/// BLAKE3 hash of this program's executable, computed once.
fn program_hash(st: &mut State) -> [u8; 32] {
    *st.program.get_or_insert_with(|| {
        program_hash_of(std::path::Path::new("/proc/self/exe"))
            .or_else(|_| program_hash_of(&std::env::current_exe()?))
            .unwrap_or_else(|_| *blake3::hash(b"unknown program").as_bytes())
    })
}

/// The library's state now, and the point-to-point messages this process sent and received.
/// A receive counter does not count what waits in the unexpected queue (the program did not
/// receive it): it goes back to the first sequence queued on its channel.
fn library_state() -> (LibraryState, u64, u64) {
    let (send, mut recv, queued) = crate::context::with_engine(|e| e.sequences_and_queue());
    for (comm, src, tag, seq) in queued {
        if let Ok(i) = recv.binary_search_by(|x| (x.0, x.1, x.2).cmp(&(comm, src, tag))) {
            recv[i].3 = recv[i].3.min(seq);
        }
    }
    // Point-to-point traffic is on even MID communicators (2c), collectives on odd ones.
    let sent = send.iter().filter(|x| x.0 % 2 == 0).map(|x| x.3).sum();
    let received = recv.iter().filter(|x| x.0 % 2 == 0).map(|x| x.3).sum();
    let mut comms: Vec<u32> = send.iter().chain(recv.iter()).map(|x| x.0).collect();
    comms.sort_unstable();
    comms.dedup();
    let ctx = current();
    let mut agreements: Vec<(u32, u64)> = ctx.agreement_seq.lock().iter().map(|(&c, &n)| (c, n)).collect();
    agreements.sort_unstable();
    let next_ctx = ctx.next_ctx.load(std::sync::atomic::Ordering::SeqCst);
    (LibraryState { next_ctx, comms, send, recv, agreements }, sent, received)
}

/// Set when the sequence counters were put back as the engine was made.
static EARLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The engine's sequence counters were put back from [`early_library_state`].
pub(crate) fn sequences_restored() {
    EARLY.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Puts the library's state back (a restarted process, before it communicates); the
/// sequence counters too unless they were put back when the engine was made.
fn set_library_state(l: &LibraryState) {
    let ctx = current();
    ctx.next_ctx.fetch_max(l.next_ctx, std::sync::atomic::Ordering::SeqCst);
    ctx.agreement_seq.lock().extend(l.agreements.iter().copied());
    if !EARLY.load(std::sync::atomic::Ordering::SeqCst) {
        crate::context::with_engine(|e| e.restore_sequences(&l.send, &l.recv));
    }
}

/// In a restarted process, at initialization (its rank known, no connection up yet): the
/// library's state of the piece it restores, for the engine's sequence counters. `None` on
/// a fresh start, or when the piece cannot be read (`restored()` then stops the process and
/// says why).
pub(crate) fn early_library_state() -> Option<LibraryState> {
    let generation = restore_generation()?;
    let store = open_store()?;
    let m = store.latest().ok().flatten().filter(|m| m.generation == generation)?;
    let data = store.get_piece(&m, crate::lifecycle::own_rank() as u32).ok()?;
    store::split_piece(&data).ok().map(|(h, _)| h.library)
}

/// `Universe::checkpoint`: see the module's documentation.
pub(crate) fn checkpoint<T: Serialize>(step: u64, state: &T) -> Result<(), Error> {
    let bytes = postcard::to_allocvec(state).map_err(|e| e.to_string());
    take(step, std::any::type_name::<T>(), bytes.as_deref().map_err(String::as_str))
}

/// A checkpoint of a state already serialized (`state`, of a type named `type_name`), for a
/// binding that serializes the program's state itself (the C ABI): what
/// [`Universe::checkpoint`](crate::environment::Universe::checkpoint) does after its
/// serialization. Collective over the world.
pub fn checkpoint_bytes(step: u64, type_name: &str, state: &[u8]) -> Result<(), Error> {
    take(step, type_name, Ok(state))
}

/// Takes a checkpoint of `state` (or of nothing, when this rank could not serialize it: the
/// collective goes on and fails everywhere).
fn take(step: u64, type_name: &str, state: Result<&[u8], &str>) -> Result<(), Error> {
    let world = SimpleCommunicator::world();
    let rank = world.rank() as u32;
    let size = world.size() as u32;
    let (library, sent, received) = library_state();
    let mut sums = [0u64; 2];
    world.all_reduce_into(&[sent, received][..], &mut sums[..], SystemOperation::sum());
    let mut steps = [0u64; 2];
    world.all_reduce_into(&[step, u64::MAX - step][..], &mut steps[..], SystemOperation::max());
    let (max, min) = (steps[0], u64::MAX - steps[1]);
    if min != max {
        return Err(Error::Steps { min, max });
    }
    if sums[0] != sums[1] {
        return Err(Error::InFlight { step, sent: sums[0], received: sums[1] });
    }
    let mut st = STATE.lock();
    if st.store.is_none() {
        st.store = open_store();
    }
    let generation = st.generation + 1;
    if std::env::var_os(env::MARKS).is_some() {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{MARK_PREFIX}{generation}");
        let _ = out.flush();
    }
    // This rank's piece: written, or why not (every rank goes on to the exchange below).
    let program = program_hash(&mut st);
    let written: Result<[u8; HASH_LEN], Error> = match st.store.as_mut() {
        None => Err(Error::NoStore),
        Some(store) => write_piece(store.as_mut(), (generation, step, rank, size), program, library, type_name, state),
    };
    let mut mine = [0u8; 1 + HASH_LEN];
    if let Ok(h) = &written {
        mine[0] = 1;
        mine[1..].copy_from_slice(h);
    }
    let mut all = vec![0u8; (1 + HASH_LEN) * size as usize];
    world.all_gather_into(&mine[..], &mut all[..]);
    let failed: Vec<usize> = all.chunks(1 + HASH_LEN).enumerate().filter(|(_, c)| c[0] == 0).map(|(r, _)| r).collect();
    let mut committed = [0u8; 1];
    if failed.is_empty() && rank == 0 {
        let pieces = all.chunks(1 + HASH_LEN).map(|c| c[1..].try_into().expect("hash length")).collect();
        let m = Manifest { generation, step, pieces };
        let store = st.store.as_mut().expect("written");
        committed[0] = match store.commit(&m) {
            Ok(()) => 1,
            Err(e) => {
                eprintln!("p2pmpi: rank 0: checkpoint generation {generation}: cannot write the manifest: {e}");
                0
            }
        };
    }
    world.process_at_rank(0).broadcast_into(&mut committed[..]);
    written?;
    if !failed.is_empty() {
        let detail = format!("rank(s) {failed:?} could not write their piece; generation {generation} is incomplete");
        return Err(Error::Store { step, detail });
    }
    if committed[0] == 0 {
        return Err(Error::Store {
            step,
            detail: format!("rank 0 could not write generation {generation}'s manifest"),
        });
    }
    st.generation = generation;
    Ok(())
}

/// Writes this rank's piece; returns its hash.
fn write_piece(
    store: &mut dyn Store,
    (generation, step, rank, size): (u64, u64, u32, u32),
    program: [u8; 32],
    library: LibraryState,
    type_name: &str,
    state: Result<&[u8], &str>,
) -> Result<[u8; HASH_LEN], Error> {
    let bytes = state.map_err(|e| Error::Serialize(e.to_string()))?;
    let header = PieceHeader {
        generation,
        step,
        rank,
        size,
        type_name: type_name.to_string(),
        program,
        library,
        state_len: bytes.len() as u64,
    };
    let prefix = store::piece_prefix(&header).map_err(Error::Serialize)?;
    store.put_piece(generation, rank, &[&prefix, bytes]).map_err(|e| Error::Store {
        step,
        detail: format!("rank {rank} cannot write its piece of generation {generation}: {e}"),
    })
}

/// Decodes a state's bytes (a piece's, after [`store::split_piece`]) as
/// [`Universe::checkpoint`](crate::environment::Universe::checkpoint) serialized it: for a
/// program or tool that reads a piece from its store itself.
pub fn decode_state<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    postcard::from_bytes(bytes).map_err(|e| e.to_string())
}

/// `Universe::restored`: the step and state of the generation this restarted process is
/// told to restore (`None` on a fresh start, or once taken). A piece that cannot be read,
/// is corrupted, holds another type or comes from another program stops the process with an
/// error that says so.
pub(crate) fn restored<T: DeserializeOwned>() -> Option<(u64, T)> {
    let want = std::any::type_name::<T>();
    let (step, bytes) = restored_bytes(want)?;
    let state: T = postcard::from_bytes(&bytes).unwrap_or_else(|e| {
        crate::fatal::stop(
            &format!("cannot restore the checkpoint of step {step}: the state does not decode as a {want}: {e}"),
            None,
        )
    });
    Some((step, state))
}

/// The step and serialized state of the checkpoint this restarted process restores, which
/// must be of the type named `type_name` (see [`checkpoint_bytes`]); `None` on a fresh start
/// or once taken. The library's state is restored with it, and communication may begin.
pub fn restored_bytes(type_name: &str) -> Option<(u64, Vec<u8>)> {
    let generation = restore_generation()?;
    let mut st = STATE.lock();
    if std::mem::replace(&mut st.taken, true) {
        return None;
    }
    let rank = crate::lifecycle::own_rank();
    let fail = |why: String| -> ! {
        crate::fatal::stop(&format!("cannot restore checkpoint generation {generation}: {why}"), None)
    };
    let store = open_store().unwrap_or_else(|| fail(format!("{} is not set", env::DIR)));
    let m = match store.latest() {
        Ok(Some(m)) if m.generation == generation => m,
        Ok(Some(m)) => fail(format!("the last complete generation is {}", m.generation)),
        Ok(None) => fail("no complete generation in the store".into()),
        Err(e) => fail(e.to_string()),
    };
    let data = store.get_piece(&m, rank as u32).unwrap_or_else(|e| fail(e.to_string()));
    let (h, bytes) = store::split_piece(&data).unwrap_or_else(|e| fail(format!("rank {rank}'s piece: {e}")));
    if h.type_name != type_name {
        fail(format!("the state stored is a {}, and the program asks for a {type_name}", h.type_name));
    }
    if h.program != program_hash(&mut st) {
        fail("it was written by another program (the executable's hash differs)".into());
    }
    if h.rank != rank as u32 || h.size as i32 != SimpleCommunicator::world().size() {
        fail(format!("the piece is rank {} of {}, this process rank {rank}", h.rank, h.size));
    }
    let (step, state) = (h.step, bytes.to_vec());
    drop(data);
    // The engine, held aside until now, comes back with the library's state.
    current().release_engine();
    set_library_state(&h.library);
    st.generation = generation;
    st.store = Some(store);
    Some((step, state))
}
