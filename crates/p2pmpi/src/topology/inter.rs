//! Intercommunicators and dynamic processes (`spawn`, `spawn_multiple`, `parent`, `merge`).
//!
//! Every process of a job and of the jobs it spawns has a *universe id*: a job's world ranks
//! are ids `0..n`, and each spawn's children get the next free ids, handed out by the
//! launcher. The device addresses peers by universe id, so a message between a parent and a
//! child travels like any other: an intercommunicator is a context id agreed by both groups
//! and the remote group's ids (`process_at_rank(r)` names the remote group's rank `r`).
//!
//! A spawn, collective over the parents' communicator: the parents agree on a free context
//! id; the root asks its launcher to start the children (`Control::Spawn`: programs,
//! arguments, the parents' ids and addresses, the context); the launcher starts them through
//! the same path as a job's processes (their output goes to the submitter's terminal) as a
//! job of their own with their own world; the root broadcasts the answer, and the parents
//! wait until every child connected to each of them (the children know the parents'
//! addresses; the parents learn the children's from their connections).

use super::{sealed::AsHandle, CommHandle, CommInner, Communicator, Rank, SimpleCommunicator, UserGroup};
use crate::error::{Error, Result};
use crate::raw::{AsRaw, FromRaw};
use parking_lot::Mutex;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Errors of the calls that return a `Result` in rsmpi (`spawn`, `spawn_multiple`).
#[derive(thiserror::Error, Debug)]
pub enum MpiError {
    /// Failed to spawn some processes: how many failed, of how many asked.
    #[error("Failed to spawn {0} of {1} processes")]
    Spawn(Rank, Rank),
    /// A string for the new processes (program or argument) holds an interior 0 byte.
    #[error("An interior 0 byte was found in string")]
    StringNul(#[from] std::ffi::NulError),
}

/// How the groups of an intercommunicator are ordered by [`InterCommunicator::merge`]: if
/// one group says `Low` and the other `High`, the `Low` group comes first; if both say the
/// same, the parents come first.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MergeOrder {
    /// Ranks of this group come first in the merged communicator.
    Low,
    /// Ranks of this group come last in the merged communicator.
    High,
}

/// A communicator between two disjoint groups (here: a spawn's parents and children).
/// Point-to-point calls address the *remote* group: `process_at_rank(r)` is its rank `r`,
/// and a received message's source is a remote rank. `rank` and `size` are this process's
/// rank in its own group and that group's size. Collectives without a root (`barrier`,
/// `all_gather_into`, `all_to_all_into`, `all_reduce_into`, `reduce_scatter_block_into`)
/// work over an intercommunicator with MPI's semantics (each group's result comes from the
/// other group); the others are refused with an error (merge first).
#[derive(Debug, Clone)]
pub struct InterCommunicator {
    /// Context, this process's local rank, the remote group's universe ids.
    remote: CommHandle,
    /// The local group (the spawning communicator, or the children's world).
    local: CommHandle,
    /// Whether this side is the parents' (breaks `merge` ties).
    parents_side: bool,
}

impl InterCommunicator {
    fn new(ctx: u32, local: CommHandle, remote_ids: Vec<Rank>, parents_side: bool) -> Self {
        let remote = CommHandle(Arc::new(CommInner {
            ctx,
            rank: local.rank(),
            size: remote_ids.len() as Rank,
            members: Some(Arc::from(remote_ids)),
            name: Mutex::new(String::new()),
            immediate: Default::default(),
            attrs: Default::default(),
            hosts: Default::default(),
            inter_local: Some(local.clone()),
        }));
        InterCommunicator { remote, local, parents_side }
    }

    /// The intercommunicator whose remote side is `remote` (see `CommInner::inter_local`).
    pub(crate) fn from_remote(remote: CommHandle, parents_side: bool) -> Self {
        let local = remote.0.inter_local.clone().expect("the remote side of an intercommunicator");
        InterCommunicator { remote, local, parents_side }
    }

    /// The local group's communicator.
    pub(crate) fn local_handle(&self) -> &CommHandle {
        &self.local
    }

    /// The intercommunicator `raw` names, `None` if it names none (or an intracommunicator,
    /// or `RSMPI_COMM_NULL`).
    ///
    /// # Safety
    /// As for [`FromRaw::from_raw`].
    pub unsafe fn try_from_raw(raw: crate::handles::MPI_Comm) -> Option<Self> {
        let (h, kind) = super::handles::comm_from_raw(raw, false)?;
        h.0.inter_local.as_ref()?;
        let parents_side = matches!(kind, super::handles::CommKind::Inter { parents_side: true });
        super::handles::comm_from_raw(raw, true);
        Some(InterCommunicator::from_remote(h, parents_side))
    }

    /// The number of processes in the remote group.
    pub fn remote_size(&self) -> Rank {
        self.remote.size()
    }

    /// The remote group.
    pub fn remote_group(&self) -> UserGroup {
        UserGroup { members: self.remote.members().expect("an intercommunicator's remote group") }
    }

    /// Merges both groups into one intracommunicator (collective over both groups). See
    /// [`MergeOrder`].
    pub fn merge(&self, merge_order: MergeOrder) -> SimpleCommunicator {
        use crate::error::OrFatal;
        self.try_merge(merge_order).or_fatal()
    }

    /// [`merge`](Self::merge), returning an error if a process of either group was lost.
    pub fn try_merge(&self, merge_order: MergeOrder) -> Result<SimpleCommunicator> {
        let high = matches!(merge_order, MergeOrder::High) as u32;
        // A context id free in the local group...
        let mine = agree_ctx(&self.local, "intercommunicator merge")?;
        // ...exchanged by the leaders with the other group's, with each group's order.
        let mut theirs = [0u8; 8];
        if self.local.rank() == 0 {
            let mut out = [0u8; 8];
            out[..4].copy_from_slice(&mine.to_le_bytes());
            out[4..].copy_from_slice(&high.to_le_bytes());
            (super::creation().inter_exchange)(
                &self.remote,
                "intercommunicator merge",
                &out,
                &mut theirs,
                super::TAG_COMM_GROUP - 1,
            )?;
        }
        (super::creation().bcast)(&self.local, "intercommunicator merge", &mut theirs, 0)?;
        let their_ctx = u32::from_le_bytes(theirs[..4].try_into().expect("4 bytes"));
        let their_high = u32::from_le_bytes(theirs[4..].try_into().expect("4 bytes"));
        let ctx = mine.max(their_ctx);
        super::next_ctx().fetch_max(ctx + 1, Ordering::SeqCst);
        let local_first = if high != their_high { high == 0 } else { self.parents_side };
        let local: Vec<Rank> = (0..self.local.size()).map(|r| self.local.world_rank(r)).collect();
        let remote: Vec<Rank> = (0..self.remote.size()).map(|r| self.remote.world_rank(r)).collect();
        let members = if local_first { [local, remote].concat() } else { [remote, local].concat() };
        let me = self.local.world_rank(self.local.rank());
        Ok(super::new_comm(ctx, members, me))
    }
}

/// Makes an intercommunicator of the group of `local` and another group (MPI's
/// `Intercomm_create`): collective over both groups; `local_leader` (a rank of `local`) and
/// the other group's leader, rank `remote_leader` of `peer` (significant at the local leader
/// only, where `peer` holds both leaders), exchange their groups over `peer` with `tag`.
/// Every member of a group gets the leader's error (no one waits for a leader that gave up).
pub fn try_create_intercommunicator<L, P>(
    local: &L,
    local_leader: Rank,
    peer: &P,
    remote_leader: Rank,
    tag: crate::Tag,
) -> Result<InterCommunicator>
where
    L: Communicator + ?Sized,
    P: Communicator + ?Sized,
{
    let what = "intercommunicator creation";
    let lh = local.handle();
    if !(0..lh.size()).contains(&local_leader) {
        return Err(Error::InvalidRank { rank: local_leader, size: lh.size() });
    }
    // A context id free in the local group, then the leaders' exchange.
    let mine = agree_ctx(lh, what)?;
    // What the leader tells its group: whether the exchange went well, the context id, the
    // other group's size, whether this group comes first when merged; then the other group.
    let mut head = [0u8; 16];
    let mut remote: Vec<u8> = Vec::new();
    if lh.rank() == local_leader {
        match leaders_exchange(lh, mine, peer.handle(), remote_leader, tag) {
            Ok((ctx, first, theirs)) => {
                head[..4].copy_from_slice(&1u32.to_le_bytes());
                head[4..8].copy_from_slice(&ctx.to_le_bytes());
                head[8..12].copy_from_slice(&((theirs.len() / 4) as u32).to_le_bytes());
                head[12..].copy_from_slice(&(first as u32).to_le_bytes());
                remote = theirs;
            }
            Err(e) => {
                (super::creation().bcast)(lh, what, &mut head, local_leader)?;
                return Err(e);
            }
        }
    }
    (super::creation().bcast)(lh, what, &mut head, local_leader)?;
    let word = |i: usize| u32::from_le_bytes(head[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    if word(0) != 1 {
        return Err(Error::Collective(format!("{what}: the local leader (rank {local_leader}) failed")));
    }
    let (ctx, n, first) = (word(1), word(2) as usize, word(3) != 0);
    remote.resize(4 * n, 0);
    (super::creation().bcast)(lh, what, &mut remote, local_leader)?;
    super::next_ctx().fetch_max(ctx + 1, Ordering::SeqCst);
    let ids = remote.chunks_exact(4).map(|b| Rank::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
    Ok(InterCommunicator::new(ctx, lh.clone(), ids, first))
}

/// The leaders' part of [`try_create_intercommunicator`]: each sends its group's context id
/// and members (world ranks) to the other over `peer` (the one of lower world rank first, so
/// that neither waits for the other); the context id both use (free in both groups), whether
/// this group comes first, and the other group's members.
fn leaders_exchange(
    lh: &CommHandle,
    mine: u32,
    ph: &CommHandle,
    remote_leader: Rank,
    tag: crate::Tag,
) -> Result<(u32, bool, Vec<u8>)> {
    let what = "intercommunicator creation";
    if !(0..ph.size()).contains(&remote_leader) {
        return Err(Error::InvalidRank { rank: remote_leader, size: ph.size() });
    }
    let first = ph.world_rank(ph.rank()) < ph.world_rank(remote_leader);
    let c = super::creation();
    let swap = |out: &[u8], inp: &mut [u8]| -> Result<()> {
        if first {
            (c.send)(ph, what, remote_leader, tag, out)?;
            (c.recv)(ph, what, remote_leader, tag, inp)
        } else {
            (c.recv)(ph, what, remote_leader, tag, inp)?;
            (c.send)(ph, what, remote_leader, tag, out)
        }
    };
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&mine.to_le_bytes());
    out[4..].copy_from_slice(&(lh.size() as u32).to_le_bytes());
    let mut inp = [0u8; 8];
    swap(&out, &mut inp)?;
    let their_ctx = u32::from_le_bytes(inp[..4].try_into().expect("4 bytes"));
    let their_n = u32::from_le_bytes(inp[4..].try_into().expect("4 bytes")) as usize;
    let ids: Vec<u8> = (0..lh.size()).flat_map(|r| lh.world_rank(r).to_le_bytes()).collect();
    let mut theirs = vec![0u8; 4 * their_n];
    swap(&ids, &mut theirs)?;
    Ok((mine.max(their_ctx), first, theirs))
}

// SAFETY: the handle names this intercommunicator while it lives.
unsafe impl AsRaw for InterCommunicator {
    type Raw = crate::handles::MPI_Comm;
    fn as_raw(&self) -> crate::handles::MPI_Comm {
        super::handles::comm_to_raw(
            &self.remote,
            Some(super::handles::CommKind::Inter { parents_side: self.parents_side }),
        )
    }
}

impl FromRaw for InterCommunicator {
    /// The intercommunicator `handle` names.
    ///
    /// # Safety
    /// `handle` must name a live intercommunicator (panics otherwise).
    unsafe fn from_raw(handle: crate::handles::MPI_Comm) -> Self {
        // SAFETY: the caller's contract.
        unsafe { Self::try_from_raw(handle) }
            .unwrap_or_else(|| panic!("InterCommunicator::from_raw: {handle:?} names no live intercommunicator"))
    }
}

impl AsHandle for InterCommunicator {
    fn handle(&self) -> &CommHandle {
        &self.remote
    }
}

impl Communicator for InterCommunicator {
    fn target_size(&self) -> Rank {
        self.remote.size()
    }
    fn size(&self) -> Rank {
        self.local.size()
    }
    fn rank(&self) -> Rank {
        self.local.rank()
    }
}

impl super::AsCommunicator for InterCommunicator {
    type Out = InterCommunicator;
    fn as_communicator(&self) -> &InterCommunicator {
        self
    }
}

/// A context id free on every member of `h` (collective over `h`); marked used here.
fn agree_ctx(h: &CommHandle, what: &'static str) -> Result<u32> {
    let n = h.size() as usize;
    let mine = super::next_ctx().load(Ordering::SeqCst);
    let mut all = vec![0u8; 4 * n];
    let me = h.rank() as usize;
    all[4 * me..4 * me + 4].copy_from_slice(&mine.to_le_bytes());
    (super::creation().allgather)(h, what, &mut all, 4)?;
    let ctx = all.chunks_exact(4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))).max().unwrap_or(mine);
    super::next_ctx().fetch_max(ctx + 1, Ordering::SeqCst);
    Ok(ctx)
}

/// Initialization of a spawned process: connects to every parent, and keeps the
/// intercommunicator's context and the parents' universe ids.
pub(crate) fn set_parents(p: &crate::bootstrap::Parents) {
    super::next_ctx().fetch_max(p.ctx + 1, Ordering::SeqCst);
    let _ = crate::context::current().parent.set((p.ctx, p.ids.clone()));
}

/// `Universe::disconnect_parent`: the parent intercommunicator is no longer offered.
pub(crate) fn disconnect_parent() {
    crate::context::current().parent_disconnected.store(true, Ordering::SeqCst);
}

/// `Communicator::parent`.
pub(crate) fn parent() -> Option<InterCommunicator> {
    let c = crate::context::current();
    if c.parent_disconnected.load(Ordering::SeqCst) {
        return None;
    }
    let (ctx, ids) = c.parent.get()?;
    let world = SimpleCommunicator::world();
    Some(InterCommunicator::new(*ctx, world.0, ids.clone(), false))
}

/// The program, arguments, environment changes and working directory of a `Command`.
fn app_of(command: &Command, procs: Rank) -> std::result::Result<p2pmpi_wire::control::SpawnApp, MpiError> {
    let text = |s: &std::ffi::OsStr| -> std::result::Result<String, MpiError> {
        let t = s.to_string_lossy().into_owned();
        std::ffi::CString::new(t.as_bytes())?;
        Ok(t)
    };
    Ok(p2pmpi_wire::control::SpawnApp {
        program: text(command.get_program())?,
        args: command.get_args().map(text).collect::<std::result::Result<_, _>>()?,
        procs: u32::try_from(procs).expect("maxprocs should be positive"),
        env: command
            .get_envs()
            .map(|(k, v)| Ok((text(k)?, v.map(text).transpose()?)))
            .collect::<std::result::Result<_, MpiError>>()?,
        dir: command.get_current_dir().map(|d| text(d.as_os_str())).transpose()?,
    })
}

fn fatal(e: Error) -> ! {
    crate::error::fatal(&e)
}

/// How long the parents wait for their children to connect: `P2PMPI_SPAWN_TIMEOUT` seconds,
/// 60 by default.
fn children_limit() -> Duration {
    let s = std::env::var("P2PMPI_SPAWN_TIMEOUT").ok().and_then(|v| v.trim().parse::<u64>().ok());
    Duration::from_secs(s.unwrap_or(60).max(1))
}

/// `spawn`/`spawn_multiple` over communicator `h` with root `root` (collective over `h`).
pub(crate) fn spawn(
    h: &CommHandle,
    root: Rank,
    commands: &[Command],
    maxprocs: &[Rank],
) -> std::result::Result<InterCommunicator, MpiError> {
    assert_eq!(commands.len(), maxprocs.len());
    let total: Rank = maxprocs.iter().sum();
    let ctx = agree_ctx(h, "spawn").unwrap_or_else(|e| fatal(e));
    // The root asks its launcher; the answer (first universe id, or failed) goes to all.
    let mut answer = [0u8; 8];
    if h.rank() == root {
        let apps =
            commands.iter().zip(maxprocs).map(|(c, &n)| app_of(c, n)).collect::<std::result::Result<Vec<_>, _>>();
        let outcome = match apps {
            Err(e) => Err(e.to_string()),
            Ok(apps) => {
                let ids: Vec<i32> = (0..h.size()).map(|r| h.world_rank(r)).collect();
                // With replicas, every replica of every parent (the children connect to each).
                let parents = crate::context::with_engine(|e| e.spawn_parents(&ids));
                crate::device::failpoints::spawn_window("spawn_before_request");
                let answer = crate::bootstrap::spawning::request(apps, parents, ctx, Duration::from_secs(120));
                crate::device::failpoints::spawn_window("spawn_after_answer");
                answer
            }
        };
        match outcome {
            Ok(base) => answer[..4].copy_from_slice(&base.to_le_bytes()),
            Err(why) => {
                eprintln!("p2pmpi: rank {}: spawn failed: {why}", crate::lifecycle::own_rank());
                answer[4..].copy_from_slice(&(total as u32).to_le_bytes());
            }
        }
    }
    (super::creation().bcast)(h, "spawn", &mut answer, root).unwrap_or_else(|e| fatal(e));
    let base = u32::from_le_bytes(answer[..4].try_into().expect("4 bytes")) as Rank;
    let failed = u32::from_le_bytes(answer[4..].try_into().expect("4 bytes")) as Rank;
    if failed > 0 {
        return Err(MpiError::Spawn(failed, total));
    }
    let ids: Vec<Rank> = (base..base + total).collect();
    let connected = crate::context::with_engine(|e| {
        e.grow((base + total) as usize);
        e.await_connections(&ids, children_limit())
    });
    if let Err(e) = connected {
        eprintln!("p2pmpi: rank {}: spawn: {e}", crate::lifecycle::own_rank());
        return Err(MpiError::Spawn(total, total));
    }
    Ok(InterCommunicator::new(ctx, h.clone(), ids, true))
}
