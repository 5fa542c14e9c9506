//! Communicators and processes.
//!
//! A communicator is a context id (carried in every message's MID, so traffic of different
//! communicators never mixes) and an ordered set of processes. Point-to-point traffic of a
//! communicator with context `c` uses MID communicator `2c`, its collective traffic `2c + 1`.

use crate::datatype::{Buffer, BufferMut, Datatype, UncommittedDatatype};
use crate::Count;
use parking_lot::Mutex;
use std::os::raw::c_int;
use std::sync::Arc;

/// Identifies a process in a communicator.
pub type Rank = c_int;
/// Orders processes in `split_by_color_with_key`.
pub type Key = c_int;

pub(crate) mod sealed {
    /// Access to a communicator's handle; sealed so users cannot implement `Communicator`.
    pub trait AsHandle {
        fn handle(&self) -> &super::CommHandle;
    }
}
use sealed::AsHandle;

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
}

/// The shared state behind a communicator.
#[derive(Debug, Clone)]
pub struct CommHandle(pub(crate) Arc<CommInner>);

impl CommHandle {
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
pub trait Communicator: AsHandle {
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
    /// Stops every process of the job with `errorcode`.
    fn abort(&self, errorcode: c_int) -> ! {
        let rank = crate::environment::own_rank();
        let msg = format!("p2pmpi: rank {rank}: abort({errorcode}) called");
        eprintln!("{msg}");
        crate::bootstrap::report_abort(rank, errorcode, &msg, None);
        std::process::exit(if errorcode == 0 { 1 } else { errorcode & 0xff })
    }
    /// Whether this is an inter-communicator (never, here).
    fn test_inter(&self) -> bool {
        false
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
        unsafe { dt.type_map().pack(inbuf.pointer() as *const u8, inbuf.count() as usize, &mut out) };
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
    /// The packed bytes must be valid values of `outbuf`'s element type.
    unsafe fn unpack_into<Buf>(&self, inbuf: &[u8], outbuf: &mut Buf, position: Count) -> Count
    where
        Buf: ?Sized + BufferMut,
        Self: Sized,
    {
        let dt = outbuf.as_datatype();
        let count = outbuf.count() as usize;
        let used = dt.type_map().unpack(&inbuf[position as usize..], outbuf.pointer_mut() as *mut u8, count);
        position + used as Count
    }
}

/// A communicator created by the library (the world, self, and those derived from them).
pub struct SimpleCommunicator(pub(crate) CommHandle);

static WORLD: std::sync::OnceLock<CommHandle> = std::sync::OnceLock::new();

impl SimpleCommunicator {
    /// The communicator of every process of the job (`MPI_COMM_WORLD`).
    pub fn world() -> SimpleCommunicator {
        let h = WORLD.get_or_init(|| {
            let (rank, size) = crate::environment::with_engine(|e| (e.rank, e.size));
            CommHandle(Arc::new(CommInner {
                ctx: 0,
                rank,
                members: None,
                size,
                name: Mutex::new("MPI_COMM_WORLD".into()),
            }))
        });
        SimpleCommunicator(h.clone())
    }

    /// The communicator containing only this process (`MPI_COMM_SELF`).
    pub fn self_comm() -> SimpleCommunicator {
        let me = crate::environment::with_engine(|e| e.rank);
        SimpleCommunicator(CommHandle(Arc::new(CommInner {
            ctx: 1,
            rank: 0,
            members: Some(Arc::from(vec![me])),
            size: 1,
            name: Mutex::new("MPI_COMM_SELF".into()),
        })))
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
