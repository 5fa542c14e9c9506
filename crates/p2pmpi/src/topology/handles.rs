//! The tables behind the C handles of communicators (`MPI_Comm`) and groups (`MPI_Group`), see
//! [`crate::handles`]: process-wide because a handle is a plain integer any thread may hand
//! to any function (`as_raw` here, the C functions of [`crate::ffi`]).

use super::{CommHandle, CommInner, Rank};
use crate::handles::predefined as k;
use crate::handles::table::Table;
use crate::handles::{lock, MPI_Comm, MPI_Group};
use crate::Count;
use std::sync::{Arc, LazyLock, Mutex, Weak};

/// What kind of Rust communicator a handle stands for.
#[derive(Clone, Debug)]
pub(crate) enum CommKind {
    Intra,
    Inter { parents_side: bool },
    Cart { dims: Vec<Count>, periods: Vec<bool> },
}

struct CommSlot {
    comm: Weak<CommInner>,
    kind: CommKind,
    /// The communicator, when the handle owns it.
    owned: Option<CommHandle>,
}

struct Comms {
    table: Table<usize, CommSlot>,
    /// Sweep dead slots once the table holds this many.
    sweep_at: usize,
}

// Process-wide because a C handle is a plain integer any thread may hand to any function, for
// objects that are not tied to a universe (the C handle tables, see `crate::handles`).
static COMMS: LazyLock<Mutex<Comms>> = LazyLock::new(|| Mutex::new(Comms { table: Table::default(), sweep_at: 64 }));

/// The handle of communicator `h`, registered if needed; `kind` says what Rust object it is
/// (`None`: unknown, e.g. from a `Process`).
pub(crate) fn comm_to_raw(h: &CommHandle, kind: Option<CommKind>) -> MPI_Comm {
    if super::is_world(h) {
        return k::RSMPI_COMM_WORLD;
    }
    if super::is_self(h) {
        return k::RSMPI_COMM_SELF;
    }
    let key = Arc::as_ptr(&h.0) as usize;
    let mut comms = lock(&COMMS);
    if let Some(id) = comms.table.find(key) {
        let slot = comms.table.get_mut(id).expect("a found slot");
        if slot.comm.upgrade().is_some_and(|c| Arc::ptr_eq(&c, &h.0)) {
            if let (CommKind::Intra, Some(k)) = (&slot.kind, kind) {
                slot.kind = k;
            }
            return MPI_Comm(id);
        }
    }
    if comms.table.len() >= comms.sweep_at {
        comms.table.sweep(|s| s.comm.strong_count() == 0);
        comms.sweep_at = (comms.table.len() * 2).max(64);
    }
    let kind = kind.unwrap_or_else(|| match h.0.inter_local {
        Some(_) => CommKind::Inter { parents_side: false },
        None => CommKind::Intra,
    });
    MPI_Comm(comms.table.insert(Some(key), CommSlot { comm: Arc::downgrade(&h.0), kind, owned: None }))
}

/// A new handle owning `c`.
pub(crate) fn comm_owned(c: CommHandle, kind: CommKind) -> MPI_Comm {
    let key = Arc::as_ptr(&c.0) as usize;
    let mut comms = lock(&COMMS);
    if let Some(id) = comms.table.find(key) {
        if let Some(slot) = comms.table.get_mut(id) {
            if slot.comm.strong_count() > 0 {
                slot.owned = Some(c);
                return MPI_Comm(id);
            }
        }
    }
    MPI_Comm(comms.table.insert(Some(key), CommSlot { comm: Arc::downgrade(&c.0), kind, owned: Some(c) }))
}

/// The communicator of a handle and its kind; `take` moves the handle's ownership out (to a
/// Rust object made by `from_raw`).
pub(crate) fn comm_from_raw(c: MPI_Comm, take: bool) -> Option<(CommHandle, CommKind)> {
    if c == k::RSMPI_COMM_WORLD {
        return Some((super::SimpleCommunicator::world().0, CommKind::Intra));
    }
    if c == k::RSMPI_COMM_SELF {
        return Some((super::SimpleCommunicator::self_comm().0, CommKind::Intra));
    }
    let mut comms = lock(&COMMS);
    let slot = comms.table.get_mut(c.0)?;
    let h = CommHandle(slot.comm.upgrade()?);
    if take {
        slot.owned = None;
    }
    Some((h, slot.kind.clone()))
}

/// A handle for a communicator being freed (at `addr`), for its attributes' delete
/// callbacks: its own if it has one, else a temporary one (`true`) that names nothing
/// usable, to be forgotten after the calls.
pub(crate) fn dying_comm(addr: usize) -> (MPI_Comm, bool) {
    let mut comms = lock(&COMMS);
    match comms.table.find(addr) {
        Some(id) => (MPI_Comm(id), false),
        None => {
            let slot = CommSlot { comm: Weak::new(), kind: CommKind::Intra, owned: None };
            (MPI_Comm(comms.table.insert(None, slot)), true)
        }
    }
}

/// Frees a temporary handle of [`dying_comm`].
pub(crate) fn forget_comm(c: MPI_Comm) {
    let slot = lock(&COMMS).table.remove(c.0);
    drop(slot);
}

/// The kind registered for communicator `h` (for `topology()`), without registering it.
pub(crate) fn comm_kind(h: &CommHandle) -> Option<CommKind> {
    let comms = lock(&COMMS);
    let id = comms.table.find(Arc::as_ptr(&h.0) as usize)?;
    comms.table.get(id).map(|s| s.kind.clone())
}

/// Frees the handle `c` (`MPI_Comm_free`): `None` if it names no live communicator, else the
/// communicator the handle owned, to be dropped by the caller outside the table's lock (its
/// attributes' delete callbacks may use the table).
pub(crate) fn free_comm(c: MPI_Comm) -> Option<Option<CommHandle>> {
    let mut comms = lock(&COMMS);
    let slot = comms.table.get_mut(c.0)?;
    if slot.comm.strong_count() == 0 {
        return None;
    }
    let owned = slot.owned.take();
    comms.table.remove(c.0);
    Some(owned)
}

// ------------------------------------------------------------------------ groups

struct GroupSlot {
    group: Weak<[Rank]>,
    owned: Option<Arc<[Rank]>>,
}

// Process-wide because a C handle is a plain integer any thread may hand to any function, for
// objects that are not tied to a universe (the C handle tables, see `crate::handles`).
static GROUPS: LazyLock<Mutex<Table<usize, GroupSlot>>> = LazyLock::new(Default::default);

/// The handle of a group with these members (world ranks).
pub(crate) fn group_to_raw(members: &Arc<[Rank]>) -> MPI_Group {
    let key = Arc::as_ptr(members) as *const Rank as usize;
    let mut groups = lock(&GROUPS);
    if let Some(id) = groups.find(key) {
        if groups.get(id).and_then(|s| s.group.upgrade()).is_some_and(|g| Arc::ptr_eq(&g, members)) {
            return MPI_Group(id);
        }
    }
    if groups.len() >= 64 {
        groups.sweep(|s| s.group.strong_count() == 0);
    }
    MPI_Group(groups.insert(Some(key), GroupSlot { group: Arc::downgrade(members), owned: None }))
}

pub(crate) fn group_owned(members: Arc<[Rank]>) -> MPI_Group {
    let key = Arc::as_ptr(&members) as *const Rank as usize;
    MPI_Group(lock(&GROUPS).insert(Some(key), GroupSlot { group: Arc::downgrade(&members), owned: Some(members) }))
}

/// The members (world ranks) of a group handle.
pub(crate) fn group_members(g: MPI_Group) -> Option<Arc<[Rank]>> {
    if g == k::RSMPI_GROUP_EMPTY {
        return Some(Arc::from(Vec::new()));
    }
    let groups = lock(&GROUPS);
    let slot = groups.get(g.0)?;
    slot.owned.clone().or_else(|| slot.group.upgrade())
}

/// Frees a group handle (`MPI_Group_free`); `false` if it names none.
pub(crate) fn free_group(g: MPI_Group) -> bool {
    lock(&GROUPS).remove(g.0).is_some()
}
