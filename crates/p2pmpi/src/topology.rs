//! Communicators and processes.
//!
//! A communicator is a context id (carried in every message's MID, so traffic of different
//! communicators never mixes) and an ordered set of processes. Point-to-point traffic of a
//! communicator with context `c` uses MID communicator `2c`, its collective traffic `2c + 1`.

use crate::datatype::{Buffer, BufferMut, Datatype, UncommittedDatatype};
use crate::error::{OrFatal, Result};
use crate::Count;
use parking_lot::Mutex;
use std::os::raw::c_int;
use std::sync::Arc;

/// Identifies a process in a communicator.
pub type Rank = c_int;
/// Orders processes in `split_by_color_with_key`.
pub type Key = c_int;

mod cartesian;
pub(crate) mod handles;
pub use cartesian::{CartesianCommunicator, CartesianLayout};
pub(crate) mod inter;
pub(crate) use inter::disconnect_parent;
pub use inter::{try_create_intercommunicator, InterCommunicator, MergeOrder, MpiError};

pub(crate) mod sealed {
    /// Access to a communicator's handle; sealed so users cannot implement `Communicator`.
    pub trait AsHandle {
        fn handle(&self) -> &super::CommHandle;
    }
}
use crate::raw::{AsRaw, FromRaw};
use sealed::AsHandle;

/// Whether `h` is this job's world communicator.
pub(crate) fn is_world(h: &CommHandle) -> bool {
    WORLD.get().is_some_and(|w| Arc::ptr_eq(&w.0, &h.0))
}

/// Whether `h` is a communicator of this process alone made by `self_comm` (context 1).
pub(crate) fn is_self(h: &CommHandle) -> bool {
    h.0.ctx == 1 && h.0.inter_local.is_none()
}

#[derive(Debug)]
pub(crate) struct CommInner {
    /// Context id.
    pub ctx: u32,
    /// This process's rank in the communicator.
    pub rank: Rank,
    /// World rank of each member, `None` for the world itself.
    pub members: Option<Arc<[Rank]>>,
    pub size: Rank,
    pub name: Mutex<String>,
    /// Immediate collectives started on this communicator (each gets its own tag).
    pub immediate: std::sync::atomic::AtomicU32,
    /// Attributes (`set_attr`/`get_attr`).
    pub attrs: Mutex<crate::attribute::Attributes>,
    /// Which members share a host, built on the first collective that asks (`None`: the
    /// hierarchical collectives do not apply).
    pub hosts: std::sync::OnceLock<Option<crate::hosts::HostLayout>>,
    /// For the remote side of an intercommunicator: the local group's communicator (the
    /// collectives over an intercommunicator run in both, see `collective::inter`).
    pub inter_local: Option<CommHandle>,
}

impl Drop for CommInner {
    /// Frees the communicator: its attributes' delete callbacks run, given a handle that
    /// names the communicator for the time of the calls.
    fn drop(&mut self) {
        let addr = self as *const CommInner as usize;
        let attrs = self.attrs.get_mut();
        if attrs.is_empty() {
            return;
        }
        let (comm, temporary) = handles::dying_comm(addr);
        crate::attribute::free_all(attrs, comm);
        if temporary {
            handles::forget_comm(comm);
        }
    }
}

/// The shared state behind a communicator.
#[derive(Debug, Clone)]
pub struct CommHandle(pub(crate) Arc<CommInner>);

impl CommHandle {
    /// The communicator's attributes, for [`crate::attribute`] (which knows no communicator):
    /// their table, and the handle naming the communicator for their callbacks.
    pub(crate) fn attributes(&self) -> crate::attribute::Holder<'_, impl Fn() -> crate::handles::MPI_Comm + '_> {
        crate::attribute::Holder { attrs: &self.0.attrs, comm: move || handles::comm_to_raw(self, None) }
    }
    /// MID communicator id of point-to-point traffic.
    #[inline]
    pub(crate) fn p2p_id(&self) -> u32 {
        self.0.ctx * 2
    }
    /// MID communicator id of collective traffic.
    #[inline]
    pub(crate) fn coll_id(&self) -> u32 {
        self.0.ctx * 2 + 1
    }
    /// World rank of communicator rank `r`.
    #[inline]
    pub(crate) fn world_rank(&self, r: Rank) -> Rank {
        match &self.0.members {
            None => r,
            Some(m) => m[r as usize],
        }
    }
    /// Members table (for translating statuses back), `None` for the world.
    pub(crate) fn members(&self) -> Option<Arc<[Rank]>> {
        self.0.members.clone()
    }
    pub(crate) fn size(&self) -> Rank {
        self.0.size
    }
    pub(crate) fn rank(&self) -> Rank {
        self.0.rank
    }
    /// Counts an immediate collective started on this communicator; returns its number.
    pub(crate) fn next_immediate(&self) -> u32 {
        self.0.immediate.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

/// Translates a world rank back to a communicator rank.
pub(crate) fn comm_rank_of(members: &Option<Arc<[Rank]>>, world: Rank) -> Rank {
    match members {
        None => world,
        Some(m) => m.iter().position(|&w| w == world).map_or(world, |p| p as Rank),
    }
}

/// Gives access to a communicator.
pub trait AsCommunicator {
    type Out: Communicator;
    fn as_communicator(&self) -> &Self::Out;
}

/// How two communicators relate.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum CommunicatorRelation {
    Identical,
    Congruent,
    Similar,
    Unequal,
}

/// A color for `split_by_color`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Color(c_int);

impl Color {
    /// Processes with this color get no communicator.
    pub fn undefined() -> Color {
        Color(-32766)
    }
    /// A defined color.
    pub fn with_value(value: c_int) -> Color {
        assert!(value >= 0, "Value of color must be non-negative.");
        Color(value)
    }
}

/// Operations every communicator offers.
pub trait Communicator: AsHandle + AsRaw<Raw = crate::handles::MPI_Comm> {
    /// Number of processes addressable by `process_at_rank`.
    fn target_size(&self) -> Rank {
        self.handle().size()
    }
    /// Number of processes in the communicator.
    fn size(&self) -> Rank {
        self.handle().size()
    }
    /// The rank of this process.
    fn rank(&self) -> Rank {
        self.handle().rank()
    }
    /// The process with rank `r`. Panics if `r` is out of range.
    fn process_at_rank(&self, r: Rank) -> Process<'_> {
        assert!(0 <= r && r < self.target_size(), "rank {r} out of range (size {})", self.target_size());
        Process { comm: AnyProcess(self.handle()), rank: r }
    }
    /// In a process started by `spawn`: the intercommunicator to its parents (the remote
    /// group is the spawning communicator). `None` in a process started by `p2pmpirun`.
    fn parent(&self) -> Option<InterCommunicator> {
        inter::parent()
    }
    /// Any process (for receives from `ANY_SOURCE`).
    fn any_process(&self) -> AnyProcess<'_> {
        AnyProcess(self.handle())
    }
    /// This process.
    fn this_process(&self) -> Process<'_> {
        let r = self.rank();
        Process { comm: AnyProcess(self.handle()), rank: r }
    }
    /// Compares two communicators.
    fn compare(&self, other: &dyn Communicator) -> CommunicatorRelation {
        let (a, b) = (self.handle(), other.handle());
        if Arc::ptr_eq(&a.0, &b.0) || a.0.ctx == b.0.ctx {
            CommunicatorRelation::Identical
        } else {
            let ma: Vec<Rank> = (0..a.size()).map(|r| a.world_rank(r)).collect();
            let mb: Vec<Rank> = (0..b.size()).map(|r| b.world_rank(r)).collect();
            if ma == mb {
                CommunicatorRelation::Congruent
            } else {
                let (mut sa, mut sb) = (ma.clone(), mb.clone());
                sa.sort_unstable();
                sb.sort_unstable();
                if sa == sb {
                    CommunicatorRelation::Similar
                } else {
                    CommunicatorRelation::Unequal
                }
            }
        }
    }
    /// A new communicator with the same processes and its own context (collective).
    fn duplicate(&self) -> SimpleCommunicator {
        self.try_duplicate().or_fatal()
    }
    /// [`Self::duplicate`], returning its error (a member lost) instead of stopping the
    /// process.
    fn try_duplicate(&self) -> crate::error::Result<SimpleCommunicator> {
        let dup = create(self.handle(), Spec::Duplicate)?.expect("every member gets the duplicate");
        let attrs = crate::attribute::for_duplicate(&self.handle().attributes());
        *dup.0 .0.attrs.lock() = attrs;
        Ok(dup)
    }
    /// Splits into one communicator per color (collective); ranks keep their relative order.
    /// `None` for `Color::undefined()`.
    fn split_by_color(&self, color: Color) -> Option<SimpleCommunicator> {
        self.split_by_color_with_key(color, 0)
    }
    /// Splits by color, ordering the new ranks by `key` then by current rank (collective).
    fn split_by_color_with_key(&self, color: Color, key: Key) -> Option<SimpleCommunicator> {
        create(self.handle(), Spec::Split { color: color.0, key }).or_fatal()
    }
    /// [`Self::split_by_color_with_key`], returning its error (a member lost) instead of
    /// stopping the process.
    fn try_split_by_color_with_key(&self, color: Color, key: Key) -> crate::error::Result<Option<SimpleCommunicator>> {
        create(self.handle(), Spec::Split { color: color.0, key })
    }
    /// Splits into communicators of processes sharing a host (collective).
    fn split_shared(&self, key: c_int) -> SimpleCommunicator {
        self.try_split_shared(key).or_fatal()
    }
    /// [`Self::split_shared`], returning its error instead of stopping the process.
    fn try_split_shared(&self, key: c_int) -> crate::error::Result<SimpleCommunicator> {
        let host = crate::lifecycle::processor_name().unwrap_or_default();
        let ip = crate::context::data_address().map(|a| a.ip().to_string()).unwrap_or_default();
        let color = (fnv(&format!("{host}/{ip}")) & 0x3fff_ffff) as c_int;
        Ok(create(self.handle(), Spec::Split { color, key })?.expect("every process has a host"))
    }
    /// The communicator of `group`'s members (collective over this communicator); `None` on
    /// processes outside the group.
    fn split_by_subgroup_collective(&self, group: &dyn Group) -> Option<SimpleCommunicator> {
        create(self.handle(), Spec::Subgroup(group.members_world().to_vec())).or_fatal()
    }
    /// The communicator of `group`'s members, called by the members only.
    fn split_by_subgroup(&self, group: &dyn Group) -> Option<SimpleCommunicator> {
        self.split_by_subgroup_with_tag(group, 0)
    }
    /// Like [`Self::split_by_subgroup`], with a tag to tell concurrent creations apart.
    fn split_by_subgroup_with_tag(&self, group: &dyn Group, tag: crate::Tag) -> Option<SimpleCommunicator> {
        create_in_group(self.handle(), group.members_world(), tag).or_fatal()
    }
    /// A communicator with the first `∏ dims` processes laid out on a grid of `dims`
    /// (collective; `reorder` is accepted and ranks are kept). `None` on the processes left out.
    fn create_cartesian_communicator(
        &self,
        dims: &[Count],
        periods: &[bool],
        reorder: bool,
    ) -> Option<CartesianCommunicator> {
        let _ = reorder;
        cartesian::create_cartesian(self.handle(), dims, periods)
    }
    /// This process's rank in a grid of `dims` (`MPI_Cart_map`), `None` if it is not in it.
    fn cartesian_map(&self, dims: &[Count], periods: &[bool]) -> Option<Rank> {
        cartesian::cartesian_map(self.handle(), dims, periods)
    }
    /// The group of this communicator's processes.
    fn group(&self) -> UserGroup {
        let h = self.handle();
        UserGroup { members: (0..h.size()).map(|r| h.world_rank(r)).collect::<Vec<_>>().into() }
    }

    /// Stops every process of the job with `errorcode`.
    fn abort(&self, errorcode: c_int) -> ! {
        let rank = crate::lifecycle::own_rank();
        let msg = format!("p2pmpi: rank {rank}: abort({errorcode}) called");
        crate::fatal::stop_with(rank, errorcode, &msg, None, if errorcode == 0 { 1 } else { errorcode & 0xff })
    }
    /// Whether this is an inter-communicator (`MPI_Comm_test_inter`): true for an
    /// [`InterCommunicator`](crate::topology::InterCommunicator) and for any communicator whose
    /// handle is an intercommunicator's (as `MPI_Comm_test_inter` sees it), false otherwise.
    fn test_inter(&self) -> bool {
        self.handle().0.inter_local.is_some()
    }
    /// Names the communicator.
    fn set_name(&self, name: &str) {
        *self.handle().0.name.lock() = name.to_string();
    }
    /// The communicator's name (`MPI_COMM_WORLD` for the world).
    fn get_name(&self) -> String {
        self.handle().0.name.lock().clone()
    }
    /// Bytes needed to pack `incount` elements of `datatype`.
    fn pack_size<Dt>(&self, incount: Count, datatype: &Dt) -> Count
    where
        Dt: Datatype,
        Self: Sized,
    {
        (datatype.type_map().size() * incount.max(0) as usize) as Count
    }
    /// Packs a buffer into bytes.
    fn pack<Buf>(&self, inbuf: &Buf) -> Vec<u8>
    where
        Buf: ?Sized + Buffer,
        Self: Sized,
    {
        let mut out = Vec::new();
        let dt = inbuf.as_datatype();
        // SAFETY: `Buffer`'s contract: `inbuf.pointer()` is readable for `count()` initialised
        // elements of its datatype while `inbuf` is borrowed.
        unsafe { dt.type_map().pack(inbuf.pointer() as *const u8, inbuf.count().max(0) as usize, &mut out) };
        out
    }
    /// Packs a buffer into `outbuf` at `position`; returns the new position.
    fn pack_into<Buf>(&self, inbuf: &Buf, outbuf: &mut [u8], position: Count) -> Count
    where
        Buf: ?Sized + Buffer,
        Self: Sized,
    {
        let packed = self.pack(inbuf);
        let p = position as usize;
        assert!(p + packed.len() <= outbuf.len(), "pack_into: output buffer too small");
        outbuf[p..p + packed.len()].copy_from_slice(&packed);
        (p + packed.len()) as Count
    }
    /// Unpacks bytes from `inbuf` at `position` into `outbuf`; returns the new position.
    ///
    /// # Safety
    /// The packed bytes must be valid values of `outbuf`'s element type. (Kept `unsafe` as in
    /// rsmpi; with the library's own buffer types every byte pattern is valid, `bool` data
    /// being unpacked to 0 or 1.)
    unsafe fn unpack_into<Buf>(&self, inbuf: &[u8], outbuf: &mut Buf, position: Count) -> Count
    where
        Buf: ?Sized + BufferMut,
        Self: Sized,
    {
        let dt = outbuf.as_datatype();
        let count = outbuf.count().max(0) as usize;
        // SAFETY: `BufferMut`'s contract: `outbuf.pointer_mut()` is writable for `count()`
        // elements of its datatype while `outbuf` is mutably borrowed; the bytes written are
        // valid there (the caller's promise, and `unpack` writes only 0 or 1 to `bool` data).
        let used = unsafe { dt.type_map().unpack(&inbuf[position as usize..], outbuf.pointer_mut() as *mut u8, count) };
        position + used as Count
    }
}

/// Attributes of any communicator (also `&mut dyn Communicator`).
pub trait AnyCommunicator: Communicator {
    /// The attribute of type `A`, if one was set.
    fn get_attr<A: crate::attribute::CommAttribute>(&self) -> Option<&A>;
    /// Sets the attribute of type `A` (replacing any previous one).
    fn set_attr<A: crate::attribute::CommAttribute>(&mut self, val: A);
}

impl<C: ?Sized + Communicator> AnyCommunicator for C {
    fn get_attr<A: crate::attribute::CommAttribute>(&self) -> Option<&A> {
        let p = crate::attribute::get::<A>(&self.handle().0.attrs)?;
        // SAFETY: the value is a `Box<A>` (its type is checked) in the communicator's
        // attributes, which with `A`'s default delete callback never free a value before the
        // communicator itself (a replaced one is kept), and never move it (the box's heap
        // address is stable); `self` keeps the communicator alive for the returned borrow,
        // and the value is only ever read (attributes are `Sync`). An overridden delete
        // callback takes this over (`unsafe extern "C" fn`, see `mpi::attribute`).
        Some(unsafe { &*p })
    }
    fn set_attr<A: crate::attribute::CommAttribute>(&mut self, val: A) {
        crate::attribute::set(&self.handle().attributes(), val);
    }
}

/// A communicator created by the library (the world, self, and those derived from them).
pub struct SimpleCommunicator(pub(crate) CommHandle);

// Process-wide because it is the object behind the predefined C handle `MPI_COMM_WORLD`,
// which any thread names without a context (the C handle tables).
static WORLD: std::sync::OnceLock<CommHandle> = std::sync::OnceLock::new();

impl SimpleCommunicator {
    /// The communicator of every process of the job (`MPI_COMM_WORLD`).
    pub fn world() -> SimpleCommunicator {
        let h = WORLD.get_or_init(|| {
            let (rank, base, size) = crate::context::with_engine(|e| (e.rank, e.world_base, e.world_size));
            // A spawned job's world: its ranks are universe ids from `base` on.
            let members = (base != 0).then(|| Arc::from((base..base + size).collect::<Vec<Rank>>()));
            CommHandle(Arc::new(CommInner {
                ctx: 0,
                rank: rank - base,
                members,
                size,
                name: Mutex::new("MPI_COMM_WORLD".into()),
                immediate: Default::default(),
                attrs: Default::default(),
                hosts: Default::default(),
                inter_local: None,
            }))
        });
        SimpleCommunicator(h.clone())
    }

    /// The communicator containing only this process (`MPI_COMM_SELF`).
    pub fn self_comm() -> SimpleCommunicator {
        let me = crate::context::with_engine(|e| e.rank);
        SimpleCommunicator(CommHandle(Arc::new(CommInner {
            ctx: 1,
            rank: 0,
            members: Some(Arc::from(vec![me])),
            size: 1,
            name: Mutex::new("MPI_COMM_SELF".into()),
            immediate: Default::default(),
            attrs: Default::default(),
            hosts: Default::default(),
            inter_local: None,
        })))
    }
}

/// The kind of topology attached to a communicator.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Topology {
    /// A graph (not supported: never returned).
    Graph,
    /// A Cartesian grid.
    Cartesian,
    /// A distributed graph (not supported: never returned).
    DistributedGraph,
    /// No topology.
    Undefined,
}

/// A communicator by the kind of its topology ([`SimpleCommunicator::into_topology`]).
pub enum IntoTopology {
    /// A graph (not supported: never returned).
    Graph(GraphCommunicator),
    /// A Cartesian grid.
    Cartesian(CartesianCommunicator),
    /// A distributed graph (not supported: never returned).
    DistributedGraph(DistributedGraphCommunicator),
    /// No topology.
    Undefined(SimpleCommunicator),
}

/// Graph topologies: a placeholder, as in rsmpi 0.8.1 (which offers no way to make or use
/// one); never returned.
#[allow(missing_copy_implementations)]
pub struct GraphCommunicator;
/// Distributed graph topologies: a placeholder, as in rsmpi 0.8.1; never returned.
#[allow(missing_copy_implementations)]
pub struct DistributedGraphCommunicator;

impl SimpleCommunicator {
    /// The topology of this communicator: a `SimpleCommunicator` has none (Cartesian
    /// communicators are [`CartesianCommunicator`]s from their creation on).
    /// A handle of a Cartesian communicator made into a `SimpleCommunicator` by `from_raw`
    /// says `Cartesian`.
    pub fn topology(&self) -> Topology {
        match handles::comm_kind(&self.0) {
            Some(handles::CommKind::Cart { .. }) => Topology::Cartesian,
            _ => Topology::Undefined,
        }
    }
    /// This communicator by the kind of its topology (see [`Self::topology`]).
    pub fn into_topology(self) -> IntoTopology {
        match handles::comm_kind(&self.0) {
            Some(handles::CommKind::Cart { dims, periods }) => {
                IntoTopology::Cartesian(CartesianCommunicator::from_parts(self, dims, periods))
            }
            _ => IntoTopology::Undefined(self),
        }
    }
}

// SAFETY: the handle names this communicator (the table keeps its address) while it lives.
unsafe impl AsRaw for SimpleCommunicator {
    type Raw = crate::handles::MPI_Comm;
    fn as_raw(&self) -> crate::handles::MPI_Comm {
        handles::comm_to_raw(&self.0, Some(handles::CommKind::Intra))
    }
}

impl FromRaw for SimpleCommunicator {
    /// The communicator `handle` names (the world for `RSMPI_COMM_WORLD`, this process's own
    /// for `RSMPI_COMM_SELF`); a handle that owned its communicator (`MPI_Comm_dup`) gives
    /// the ownership to the new object, and stays valid while it lives.
    ///
    /// # Safety
    /// `handle` must name a live communicator (panics otherwise, e.g. on `RSMPI_COMM_NULL`).
    unsafe fn from_raw(handle: crate::handles::MPI_Comm) -> Self {
        let (h, _) = handles::comm_from_raw(handle, true)
            .unwrap_or_else(|| panic!("SimpleCommunicator::from_raw: {handle:?} names no live communicator"));
        SimpleCommunicator(h)
    }
}

impl AsHandle for SimpleCommunicator {
    fn handle(&self) -> &CommHandle {
        &self.0
    }
}
impl Communicator for SimpleCommunicator {}
impl AsCommunicator for SimpleCommunicator {
    type Out = SimpleCommunicator;
    fn as_communicator(&self) -> &Self {
        self
    }
}

/// A process of a communicator, addressed by rank: a source and a destination.
#[derive(Copy, Clone)]
pub struct Process<'a> {
    comm: AnyProcess<'a>,
    rank: Rank,
}

impl<'a> Process<'a> {
    /// The rank of this process in its communicator.
    pub fn rank(&self) -> Rank {
        self.rank
    }
    /// Whether this is the calling process.
    pub fn is_self(&self) -> bool {
        self.comm.0.rank() == self.rank
    }
}

// SAFETY: a process's handle is its communicator's.
unsafe impl AsRaw for Process<'_> {
    type Raw = crate::handles::MPI_Comm;
    fn as_raw(&self) -> crate::handles::MPI_Comm {
        handles::comm_to_raw(self.handle(), None)
    }
}

impl AsHandle for Process<'_> {
    fn handle(&self) -> &CommHandle {
        self.comm.0
    }
}
impl Communicator for Process<'_> {}
impl<'a> AsCommunicator for Process<'a> {
    type Out = AnyProcess<'a>;
    fn as_communicator(&self) -> &AnyProcess<'a> {
        &self.comm
    }
}

/// Any process of a communicator: a source for `ANY_SOURCE` receives.
#[derive(Copy, Clone)]
pub struct AnyProcess<'a>(&'a CommHandle);

// SAFETY: as for `Process`.
unsafe impl AsRaw for AnyProcess<'_> {
    type Raw = crate::handles::MPI_Comm;
    fn as_raw(&self) -> crate::handles::MPI_Comm {
        handles::comm_to_raw(self.0, None)
    }
}

impl AsHandle for AnyProcess<'_> {
    fn handle(&self) -> &CommHandle {
        self.0
    }
}
impl Communicator for AnyProcess<'_> {}
impl AsCommunicator for AnyProcess<'_> {
    type Out = Self;
    fn as_communicator(&self) -> &Self {
        self
    }
}

impl<C: Communicator + ?Sized> AsHandle for &C {
    fn handle(&self) -> &CommHandle {
        (**self).handle()
    }
}
impl<C: Communicator + ?Sized> Communicator for &C {}

// ------------------------------------------------------------------ communicator creation

/// The next context id this process may use (0: world, 1: self).
fn next_ctx() -> &'static std::sync::atomic::AtomicU32 {
    &crate::context::current().next_ctx
}

enum Spec {
    Duplicate,
    Split { color: c_int, key: Key },
    Subgroup(Vec<Rank>),
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

pub(crate) fn new_comm(ctx: u32, members: Vec<Rank>, me_world: Rank) -> SimpleCommunicator {
    let rank = members.iter().position(|&w| w == me_world).expect("member") as Rank;
    let size = members.len() as Rank;
    let identity = members.iter().enumerate().all(|(i, &w)| i as Rank == w)
        && crate::context::with_engine(|e| e.world_base == 0 && e.world_size == size);
    SimpleCommunicator(CommHandle(Arc::new(CommInner {
        ctx,
        rank,
        members: (!identity).then(|| Arc::from(members)),
        size,
        name: Mutex::new(String::new()),
        immediate: Default::default(),
        attrs: Default::default(),
        hosts: Default::default(),
        inter_local: None,
    })))
}

/// Base of the tags of `split_by_subgroup_with_tag` on the collective context (the user's tag
/// is added), and of the intercommunicator merge's exchange (below it).
pub(crate) const TAG_COMM_GROUP: i32 = 1 << 20;

/// The collectives that creating a communicator runs over its parent (to agree on a context
/// id and on the members), over the parent's collective context. They are `collective`'s
/// algorithms, which run over communicators and so sit above this module: `collective`
/// installs them at initialization (`collective::install_creation_collectives`), as plain
/// functions; `what` names the operation in errors.
pub(crate) struct CreationCollectives {
    /// Allgather of one `block`-byte block per rank (`all` holds them in rank order).
    pub allgather: fn(h: &CommHandle, what: &'static str, all: &mut [u8], block: usize) -> Result<()>,
    /// Broadcast of `buf` from `root`.
    pub bcast: fn(h: &CommHandle, what: &'static str, buf: &mut [u8], root: Rank) -> Result<()>,
    /// Sends `data` to `dst` with `tag`.
    pub send: fn(h: &CommHandle, what: &'static str, dst: Rank, tag: crate::Tag, data: &[u8]) -> Result<()>,
    /// Receives exactly `buf.len()` bytes from `src` with `tag`.
    pub recv: fn(h: &CommHandle, what: &'static str, src: Rank, tag: crate::Tag, buf: &mut [u8]) -> Result<()>,
    /// Over an intercommunicator's remote group: sends `out` to the remote rank 0 while
    /// receiving exactly `inp.len()` bytes from it, with `tag`.
    pub inter_exchange: InterExchange,
}

/// [`CreationCollectives::inter_exchange`].
pub(crate) type InterExchange =
    fn(h: &CommHandle, what: &'static str, out: &[u8], inp: &mut [u8], tag: crate::Tag) -> Result<()>;

// Process-wide because it is code, not state: plain functions of the collective layer that
// the layer below calls (installed once, the same for any context).
static CREATION: std::sync::OnceLock<CreationCollectives> = std::sync::OnceLock::new();

/// Installs the collectives of communicator creation (once; later calls change nothing).
pub(crate) fn install_creation_collectives(c: CreationCollectives) {
    let _ = CREATION.set(c);
}

/// The installed collectives of communicator creation.
pub(crate) fn creation() -> &'static CreationCollectives {
    CREATION.get().expect("p2pmpi: a communicator is created before the library is initialized")
}

/// Creates a communicator collectively over `parent`: the members agree on a context id
/// (the maximum of their next free ids, so it is unused by every member) and on the members.
fn create(parent: &CommHandle, spec: Spec) -> Result<Option<SimpleCommunicator>> {
    use std::sync::atomic::Ordering;
    let n = parent.size() as usize;
    let (color, key) = match &spec {
        Spec::Split { color, key } => (*color, *key),
        _ => (0, 0),
    };
    let mine = next_ctx().load(Ordering::SeqCst);
    let mut all = vec![0u8; 12 * n];
    let me = parent.rank() as usize;
    all[12 * me..12 * me + 4].copy_from_slice(&mine.to_le_bytes());
    all[12 * me + 4..12 * me + 8].copy_from_slice(&color.to_le_bytes());
    all[12 * me + 8..12 * me + 12].copy_from_slice(&key.to_le_bytes());
    (creation().allgather)(parent, "communicator creation", &mut all, 12)?;
    let field = |r: usize, i: usize| i32::from_le_bytes(all[12 * r + 4 * i..12 * r + 4 * i + 4].try_into().unwrap());
    let ctx = (0..n).map(|r| field(r, 0) as u32).max().unwrap_or(mine);
    next_ctx().store(ctx + 1, Ordering::SeqCst);
    let me_world = parent.world_rank(parent.rank());
    let members: Vec<Rank> = match spec {
        Spec::Duplicate => (0..n).map(|r| parent.world_rank(r as Rank)).collect(),
        Spec::Split { color, .. } => {
            if color == Color::undefined().0 {
                return Ok(None);
            }
            let mut same: Vec<(Key, usize)> =
                (0..n).filter(|&r| field(r, 1) == color).map(|r| (field(r, 2), r)).collect();
            same.sort();
            same.into_iter().map(|(_, r)| parent.world_rank(r as Rank)).collect()
        }
        Spec::Subgroup(members) => {
            if !members.contains(&me_world) {
                return Ok(None);
            }
            members
        }
    };
    Ok(Some(new_comm(ctx, members, me_world)))
}

/// Creates a communicator among `members` only (MPI_Comm_create_group): the first member
/// collects the members' next free context ids and sends back the maximum.
fn create_in_group(parent: &CommHandle, members: &[Rank], tag: crate::Tag) -> Result<Option<SimpleCommunicator>> {
    use std::sync::atomic::Ordering;
    let me_world = parent.world_rank(parent.rank());
    if !members.contains(&me_world) {
        return Ok(None);
    }
    let c = creation();
    let what = "split_by_subgroup";
    let tag = TAG_COMM_GROUP + tag.rem_euclid(1 << 20);
    let to_parent =
        |w: Rank| -> Rank { (0..parent.size()).find(|&r| parent.world_rank(r) == w).expect("group member in parent") };
    let leader = to_parent(members[0]);
    let mine = next_ctx().load(Ordering::SeqCst);
    let ctx = if parent.rank() == leader {
        let mut ctx = mine;
        for &w in &members[1..] {
            let mut b = [0u8; 4];
            (c.recv)(parent, what, to_parent(w), tag, &mut b)?;
            ctx = ctx.max(u32::from_le_bytes(b));
        }
        for &w in &members[1..] {
            (c.send)(parent, what, to_parent(w), tag, &ctx.to_le_bytes())?;
        }
        ctx
    } else {
        (c.send)(parent, what, leader, tag, &mine.to_le_bytes())?;
        let mut b = [0u8; 4];
        (c.recv)(parent, what, leader, tag, &mut b)?;
        u32::from_le_bytes(b)
    };
    next_ctx().store(ctx.max(mine) + 1, Ordering::SeqCst);
    Ok(Some(new_comm(ctx, members.to_vec(), me_world)))
}

// ------------------------------------------------------------------ groups

/// How two groups relate.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum GroupRelation {
    /// Same members in the same order (the seeds' IDENT).
    Identical,
    /// Same members in another order (SIMILAR).
    Similar,
    /// Different members (UNEQUAL).
    Unequal,
}

/// An ordered set of processes.
pub trait Group: AsRaw<Raw = crate::handles::MPI_Group> {
    /// World ranks of the members, in group order. Not part of rsmpi's API.
    #[doc(hidden)]
    fn members_world(&self) -> &[Rank];

    /// Members of `self`, then those of `other` not in `self`.
    fn union<G>(&self, other: &G) -> UserGroup
    where
        G: Group,
        Self: Sized,
    {
        let mut m = self.members_world().to_vec();
        m.extend(other.members_world().iter().filter(|w| !self.members_world().contains(w)));
        UserGroup { members: m.into() }
    }
    /// Members of `self` that are also in `other`, in `self`'s order.
    fn intersection<G>(&self, other: &G) -> UserGroup
    where
        G: Group,
        Self: Sized,
    {
        let m: Vec<Rank> = self.members_world().iter().copied().filter(|w| other.members_world().contains(w)).collect();
        UserGroup { members: m.into() }
    }
    /// Members of `self` that are not in `other`.
    fn difference<G>(&self, other: &G) -> UserGroup
    where
        G: Group,
        Self: Sized,
    {
        let m: Vec<Rank> =
            self.members_world().iter().copied().filter(|w| !other.members_world().contains(w)).collect();
        UserGroup { members: m.into() }
    }
    /// The members at the given ranks of this group, in that order.
    fn include(&self, ranks: &[Rank]) -> UserGroup {
        let all = self.members_world();
        let m: Vec<Rank> = ranks
            .iter()
            .map(|&r| {
                *all.get(r as usize).unwrap_or_else(|| panic!("rank {r} is not in a group of size {}", all.len()))
            })
            .collect();
        UserGroup { members: m.into() }
    }
    /// The members except those at the given ranks.
    fn exclude(&self, ranks: &[Rank]) -> UserGroup {
        let m: Vec<Rank> = self
            .members_world()
            .iter()
            .enumerate()
            .filter(|(i, _)| !ranks.contains(&(*i as Rank)))
            .map(|(_, &w)| w)
            .collect();
        UserGroup { members: m.into() }
    }
    /// Number of members.
    fn size(&self) -> Rank {
        self.members_world().len() as Rank
    }
    /// This process's rank in the group, `None` if it is not a member.
    fn rank(&self) -> Option<Rank> {
        let me = crate::lifecycle::own_rank();
        self.members_world().iter().position(|&w| w == me).map(|p| p as Rank)
    }
    /// The rank in `other` of this group's member `rank`, if it is a member of `other`.
    fn translate_rank<G>(&self, rank: Rank, other: &G) -> Option<Rank>
    where
        G: Group,
        Self: Sized,
    {
        let w = *self.members_world().get(rank as usize)?;
        other.members_world().iter().position(|&x| x == w).map(|p| p as Rank)
    }
    /// [`Self::translate_rank`] for several ranks.
    fn translate_ranks<G>(&self, ranks: &[Rank], other: &G) -> Vec<Option<Rank>>
    where
        G: Group,
        Self: Sized,
    {
        ranks.iter().map(|&r| self.translate_rank(r, other)).collect()
    }
    /// How this group relates to `other`.
    fn compare<G>(&self, other: &G) -> GroupRelation
    where
        G: Group,
        Self: Sized,
    {
        let (a, b) = (self.members_world(), other.members_world());
        if a == b {
            GroupRelation::Identical
        } else {
            let (mut x, mut y) = (a.to_vec(), b.to_vec());
            x.sort_unstable();
            y.sort_unstable();
            if x == y {
                GroupRelation::Similar
            } else {
                GroupRelation::Unequal
            }
        }
    }
}

/// A group created by the library.
#[derive(Debug, Clone)]
pub struct UserGroup {
    members: Arc<[Rank]>,
}

impl UserGroup {
    pub(crate) fn from_members(members: Arc<[Rank]>) -> Self {
        UserGroup { members }
    }
    pub(crate) fn members_arc(&self) -> Arc<[Rank]> {
        self.members.clone()
    }
}

// SAFETY: the handle names this group's members (the table keeps their address) while it
// lives.
unsafe impl AsRaw for UserGroup {
    type Raw = crate::handles::MPI_Group;
    fn as_raw(&self) -> crate::handles::MPI_Group {
        handles::group_to_raw(&self.members)
    }
}

impl Group for UserGroup {
    fn members_world(&self) -> &[Rank] {
        &self.members
    }
}

/// Predefined groups.
#[derive(Copy, Clone, Debug)]
pub struct SystemGroup(());

impl SystemGroup {
    /// The group with no member.
    pub fn empty() -> SystemGroup {
        SystemGroup(())
    }
}

// SAFETY: the only system group is the empty one, `RSMPI_GROUP_EMPTY`.
unsafe impl AsRaw for SystemGroup {
    type Raw = crate::handles::MPI_Group;
    fn as_raw(&self) -> crate::handles::MPI_Group {
        crate::handles::predefined::RSMPI_GROUP_EMPTY
    }
}

impl Group for SystemGroup {
    fn members_world(&self) -> &[Rank] {
        &[]
    }
}
