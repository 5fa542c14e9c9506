//! MPICH's integer handles and the library's objects behind them.
//!
//! A handle's bits (as in MPICH): the kind in bits 30-31 ([`BUILTIN`] for the predefined
//! objects, [`DIRECT`] for those made at run time here, 0 for the null handles), the kind of
//! object in bits 26-29 ([`object`]), an index in bits 0-25. The predefined handles are
//! translated by tables ([`crate::datatypes`], [`crate::ops`], [`comm`] below); the others
//! name a slot of the [`Slab`] of their kind of object, which holds the library's handle
//! (`p2pmpi::ffi`'s).

use crate::consts::*;
use crate::reqtable::{Local, Table};
use p2pmpi::ffi;
use p2pmpi::request::Detached;
use p2pmpi::topology::SimpleCommunicator;
use p2pmpi::traits::FromRaw;
use parking_lot::RwLock;
use std::os::raw::c_int;

use crate::handle_bits::INDEX_MASK;
pub use crate::handle_bits::{make, object, object_of, BUILTIN, DIRECT};

/// A table of the objects of one kind made at run time: a slot per live handle, reused once
/// freed. Readers (every call that names the object) share the lock; only making and
/// freeing an object take it alone.
pub struct Slab<T> {
    kind: u32,
    obj: u32,
    slots: RwLock<Slots<T>>,
}

struct Slots<T> {
    v: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    /// An empty table of objects of kind `obj` (one of [`object`]), with handles of kind
    /// [`DIRECT`].
    pub const fn new(obj: u32) -> Slab<T> {
        Slab::with_kind(DIRECT, obj)
    }

    /// An empty table whose handles are of kind `kind` (to tell two tables of one kind of
    /// object apart: requests and messages).
    pub const fn with_kind(kind: u32, obj: u32) -> Slab<T> {
        Slab { kind, obj, slots: RwLock::new(Slots { v: Vec::new(), free: Vec::new() }) }
    }

    /// Stores `t`; returns its new handle.
    pub fn insert(&self, t: T) -> c_int {
        let mut s = self.slots.write();
        let i = match s.free.pop() {
            Some(i) => i,
            None => {
                s.v.push(None);
                (s.v.len() - 1) as u32
            }
        };
        assert!(i <= INDEX_MASK, "too many MPI handles of one kind");
        s.v[i as usize] = Some(t);
        make(self.kind, self.obj, i)
    }

    fn index(&self, h: c_int) -> Option<usize> {
        let bits = h as u32;
        (bits >> 30 == self.kind && object_of(h) == self.obj).then_some((bits & INDEX_MASK) as usize)
    }

    /// What `f` makes of the object of handle `h`, if `h` names a live one of this table.
    pub fn with<R>(&self, h: c_int, f: impl FnOnce(&T) -> R) -> Option<R> {
        let i = self.index(h)?;
        self.slots.read().v.get(i)?.as_ref().map(f)
    }

    /// What `f` makes of the object of handle `h`, changing it, if `h` names a live one.
    pub fn with_mut<R>(&self, h: c_int, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let i = self.index(h)?;
        self.slots.write().v.get_mut(i)?.as_mut().map(f)
    }

    /// Whether every handle of `hs` is `null` or names a live object of which `f` holds (one
    /// look, under one lock).
    pub fn all(&self, hs: &[c_int], null: c_int, f: impl Fn(&T) -> bool) -> bool {
        let s = self.slots.read();
        hs.iter().all(|&h| {
            h == null || self.index(h).and_then(|i| s.v.get(i)).is_some_and(|slot| slot.as_ref().is_some_and(&f))
        })
    }

    /// Frees the slot of `h` if `f` says so of what it holds; returns what it held.
    #[inline]
    pub fn take_if(&self, h: c_int, f: impl FnOnce(&T) -> bool) -> Option<T> {
        let i = self.index(h)?;
        let mut s = self.slots.write();
        let slot = s.v.get_mut(i)?;
        if !f(slot.as_ref()?) {
            return None;
        }
        let t = slot.take()?;
        s.free.push(i as u32);
        Some(t)
    }

    /// Frees the slot of `h`; returns what it held.
    pub fn take(&self, h: c_int) -> Option<T> {
        let i = self.index(h)?;
        let mut s = self.slots.write();
        let t = s.v.get_mut(i)?.take()?;
        s.free.push(i as u32);
        Some(t)
    }

    /// Number of live handles.
    pub fn len(&self) -> usize {
        let s = self.slots.read();
        s.v.len() - s.free.len()
    }

    /// Whether no handle is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Clone> Slab<T> {
    /// The object of handle `h`, if `h` names a live one of this table.
    pub fn get(&self, h: c_int) -> Option<T> {
        self.with(h, T::clone)
    }
}

/// A communicator made at run time: the library's handle (for `p2pmpi::ffi`) and the Rust
/// object, which owns the communicator (dropping it frees the communicator).
pub struct CommEntry {
    pub raw: ffi::MPI_Comm,
    pub rust: SimpleCommunicator,
}

/// Communicators made at run time (`MPI_Comm_dup`, `MPI_Comm_split`, ...).
// Process-wide because a C handle is a plain integer any thread may hand to any function.
pub static COMMS: Slab<CommEntry> = Slab::new(object::COMM);

/// What a request keeps alive until it completes (the descriptions of the buffers of a
/// nonblocking collective, a copy of an `MPI_IN_PLACE` input): dropped once it completed.
pub struct Keep(pub Vec<Box<dyn std::any::Any>>);

// SAFETY: what is kept is only dropped (by whichever thread completes the request), never
// used through this value; the objects are descriptions of buffers (raw addresses) and
// plain copies of data.
unsafe impl Send for Keep {}
// SAFETY: as above: a `Keep` is never read through a shared reference.
unsafe impl Sync for Keep {}

/// What a persistent request starts each time (`MPI_Start`): a send or a receive of
/// `count` elements of `dt` at `buf` with `peer` and `tag` on `comm` (MPICH handles).
#[derive(Clone, Copy, Debug)]
pub struct Persistent {
    pub recv: bool,
    pub synchronous: bool,
    /// A persistent collective: `MPI_Start` runs it ([`crate::pcoll`]); the other fields
    /// are unused.
    pub collective: bool,
    pub buf: usize,
    pub count: c_int,
    pub dt: c_int,
    pub peer: c_int,
    pub tag: c_int,
    pub comm: c_int,
}

/// A request of a nonblocking operation: the library's handle (its null request while a
/// persistent request is inactive), what it keeps alive, and for a persistent request what
/// it starts. A send or receive started in the common case ([`crate::fast`]) holds the
/// library's request itself (`direct`, `raw` null) rather than a handle of the library's C
/// layer: `MPI_Test`, `MPI_Wait`, `MPI_Waitall` of null and direct requests and `MPI_Cancel`
/// complete or cancel it directly, without the C layer's table; everything else (the other
/// array calls, `MPI_Request_get_status`, `MPI_Request_free`) takes its handle by
/// [`RequestEntry::raw`] (which moves it there).
pub struct RequestEntry {
    pub raw: ffi::MPI_Request,
    pub keep: Option<Keep>,
    pub persistent: Option<Persistent>,
    pub direct: Option<Detached>,
}

impl RequestEntry {
    /// The library's handle of the request, a direct one handed over to the library's C
    /// layer first (once: it then stays there).
    pub fn raw(&mut self) -> ffi::MPI_Request {
        if let Some(d) = self.direct.take() {
            self.raw = d.into_raw();
        }
        self.raw
    }
}

/// Requests of the nonblocking operations: a table without a lock ([`crate::reqtable`]), on
/// the hot path of every nonblocking call.
// Process-wide because a C handle is a plain integer any thread may hand to any function.
pub static REQUESTS: Table<RequestEntry> = Table::new(object::REQUEST, &FREE_REQUESTS);

thread_local! {
    // Per thread: the free indices of `REQUESTS` its completions gave back.
    static FREE_REQUESTS: Local = const { Local::new() };
}

/// The library's null request.
pub fn null_request() -> ffi::MPI_Request {
    // SAFETY: the predefined names are initialized statics that nothing writes.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

/// The MPICH handle of a request the library started.
pub fn new_request(raw: ffi::MPI_Request, keep: Option<Keep>) -> c_int {
    REQUESTS.insert(RequestEntry { raw, keep, persistent: None, direct: None })
}

/// The MPICH handle of a request started in the common case ([`crate::fast`]).
#[inline]
pub fn new_direct_request(d: Detached) -> c_int {
    REQUESTS.insert(RequestEntry { raw: null_request(), keep: None, persistent: None, direct: Some(d) })
}

/// The library's handle of request `h` (a direct request handed over to the library's C
/// layer first, see [`RequestEntry::raw`]).
pub fn request(h: c_int) -> Option<ffi::MPI_Request> {
    REQUESTS.with_mut(h, RequestEntry::raw)
}

/// Groups made at run time (`MPI_Comm_group`, `MPI_Group_incl`, ...).
// Process-wide because a C handle is a plain integer any thread may hand to any function.
pub static GROUPS: Slab<ffi::MPI_Group> = Slab::new(object::GROUP);

/// The library's group of MPICH handle `g`, or `MPI_ERR_GROUP`.
pub fn group(g: c_int) -> Result<ffi::MPI_Group, c_int> {
    match g {
        // SAFETY: the predefined names are initialized statics that nothing writes.
        MPI_GROUP_EMPTY => Ok(unsafe { ffi::RSMPI_GROUP_EMPTY }),
        _ => GROUPS.get(g).ok_or(MPI_ERR_GROUP),
    }
}

/// The MPICH handle of a group the library made (the empty and null groups are the
/// predefined handles).
pub fn new_group(g: ffi::MPI_Group) -> c_int {
    // SAFETY: the predefined names are initialized statics that nothing writes.
    let (empty, null) = unsafe { (ffi::RSMPI_GROUP_EMPTY, ffi::RSMPI_GROUP_NULL) };
    if g == empty {
        MPI_GROUP_EMPTY
    } else if g == null {
        MPI_GROUP_NULL
    } else {
        GROUPS.insert(g)
    }
}

/// The MPICH handle of a communicator the library just made (`MPI_COMM_NULL` for its null
/// one), which the slab then owns.
pub fn new_comm(c: ffi::MPI_Comm) -> c_int {
    // SAFETY: the predefined names are initialized statics that nothing writes.
    if c == unsafe { ffi::RSMPI_COMM_NULL } {
        MPI_COMM_NULL
    } else {
        // SAFETY: `c` names the live communicator the library just made; the Rust object
        // takes it over (and the handle stays valid while the object lives, in the slab).
        let rust = unsafe { SimpleCommunicator::from_raw(c) };
        COMMS.insert(CommEntry { raw: c, rust })
    }
}

/// The library's communicator of MPICH handle `c`, or `MPI_ERR_COMM` (also before
/// `MPI_Init` and after `MPI_Finalize`, when no communicator may be used).
pub fn comm(c: c_int) -> Result<ffi::MPI_Comm, c_int> {
    if !p2pmpi::is_initialized() || p2pmpi::is_finalized() {
        return Err(MPI_ERR_COMM);
    }
    match c {
        // SAFETY: the predefined names are initialized statics that nothing writes.
        MPI_COMM_WORLD => Ok(unsafe { ffi::RSMPI_COMM_WORLD }),
        // SAFETY: as above.
        MPI_COMM_SELF => Ok(unsafe { ffi::RSMPI_COMM_SELF }),
        _ => COMMS.with(c, |e| e.raw).ok_or(MPI_ERR_COMM),
    }
}

/// The Rust communicator of MPICH handle `c`, or `MPI_ERR_COMM`: another Rust object for the
/// same communicator (the one in the slab keeps owning it).
pub fn rust_comm(c: c_int) -> Result<SimpleCommunicator, c_int> {
    let raw = comm(c)?;
    // SAFETY: `raw` names a live communicator (the world, self, or one the slab owns, which
    // outlives this call's object: the program may not free a communicator it is using);
    // its ownership was taken over already, so this object only shares it.
    Ok(unsafe { SimpleCommunicator::from_raw(raw) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predefined_handles_follow_the_encoding() {
        assert_eq!(make(BUILTIN, object::COMM, 0), MPI_COMM_WORLD);
        assert_eq!(make(BUILTIN, object::COMM, 1), MPI_COMM_SELF);
        assert_eq!(make(0, object::REQUEST, 0), MPI_REQUEST_NULL);
        assert_eq!(make(BUILTIN, object::ERRHANDLER, 1), MPI_ERRORS_RETURN);
        assert_eq!(object_of(MPI_DATATYPE_NULL), object::DATATYPE);
        assert_eq!(object_of(MPI_OP_NULL), object::OP);
    }

    #[test]
    fn a_slab_names_its_objects_by_handles_of_its_kind_and_reuses_freed_slots() {
        let s: Slab<u32> = Slab::new(object::REQUEST);
        let a = s.insert(10);
        let b = s.insert(20);
        assert_ne!(a, b);
        assert_ne!(a, MPI_REQUEST_NULL);
        assert_eq!((a as u32) >> 30, DIRECT);
        assert_eq!(object_of(a), object::REQUEST);
        assert_eq!((s.get(a), s.get(b)), (Some(10), Some(20)));
        assert_eq!(s.get(MPI_REQUEST_NULL), None, "the null handle names nothing");
        assert_eq!(s.get(make(DIRECT, object::COMM, 0)), None, "another kind's handle names nothing");
        assert_eq!(s.take(a), Some(10));
        assert_eq!(s.get(a), None);
        assert_eq!(s.take(a), None, "a handle is freed once");
        assert_eq!(s.len(), 1);
        assert_eq!(s.insert(30), a, "the freed slot is reused");
    }

    #[test]
    fn no_communicator_before_initialization() {
        assert_eq!(comm(MPI_COMM_WORLD), Err(MPI_ERR_COMM));
    }
}
