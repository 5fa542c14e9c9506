//! rsmpi's `mpi::ffi`, without a C library: the MPI handle types, the predefined handles
//! (`RSMPI_COMM_WORLD`, `RSMPI_SUM`, `RSMPI_INT32_T`, ...) and a subset of the C functions of
//! MPI (`MPI_Comm_rank`, `MPI_Send`, `MPI_Allreduce`, ...) with the names and signatures
//! rsmpi's bindings give them, working on p2pmpi's own objects.
//!
//! **Handles.** `MPI_Comm`, `MPI_Group`, `MPI_Op`, `MPI_Request` and `MPI_Message` are opaque
//! integers naming objects in process-wide tables (see [`crate::raw`] for the conversions:
//! `as_raw` names a Rust object, `from_raw` makes one). `MPI_Datatype` is the address of a
//! datatype's layout. A handle made by `as_raw` names the Rust object without keeping it
//! alive; a handle made by a function here (`MPI_Comm_dup`, `MPI_Comm_group`, `MPI_Op_create`,
//! ...) owns its object until it is freed (`MPI_Comm_free`, ...) or taken over by `from_raw`.
//!
//! **Predefined names** are `extern` statics as in rsmpi, read in an `unsafe` block
//! (`unsafe { ffi::RSMPI_COMM_WORLD }`); they cannot be used in patterns.
//!
//! **Errors.** The functions return `MPI_SUCCESS` (0) or an error class (`MPI_ERR_COMM` for a
//! dead or unknown communicator handle, `MPI_ERR_RANK`, `MPI_ERR_COUNT`, ...,
//! `MPI_ERR_OTHER` for a failed communication; in a fault-aware program ULFM's classes under
//! MPICH's numbers: 101 for a lost peer, 103 for a revoked communicator). Errors are returned, never
//! fatal (as with `MPI_ERRORS_RETURN`).
//!
//! **Requests** made here (`MPI_Isend`, `MPI_Irecv`, ...) and those handed over by
//! `Request::into_raw` are completed by `MPI_Wait`, `MPI_Test`, `MPI_Waitall`, `MPI_Testall`,
//! `MPI_Waitany` or freed by `MPI_Request_free`.
//!
//! **Not provided**: files, windows, info objects, error handlers, the Fortran conversions
//! (`RSMPI_Comm_c2f`, ...), and every function not listed here (see docs/mpi-library.md).
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

use crate::collective::handles::{free_op, new_user_op, op_of, AnyOp};
use crate::collective::UnsafeUserOperation;
use crate::datatype::{DatatypeRef, DynBuffer, DynBufferMut, TypeMap};
pub use crate::handles::c_statics::*;
use crate::handles::{lock, predefined_names};
pub use crate::handles::{
    MPI_Comm, MPI_Comm_copy_attr_function, MPI_Comm_delete_attr_function, MPI_Datatype, MPI_Group, MPI_Message, MPI_Op,
    MPI_Request, MPI_Status, MPI_User_function, MPI_APPNUM, MPI_ERR_ARG, MPI_ERR_BUFFER, MPI_ERR_COMM, MPI_ERR_COUNT,
    MPI_ERR_GROUP, MPI_ERR_KEYVAL, MPI_ERR_OP, MPI_ERR_OTHER, MPI_ERR_RANK, MPI_ERR_REQUEST, MPI_ERR_ROOT, MPI_ERR_TAG,
    MPI_ERR_TRUNCATE, MPI_ERR_TYPE, MPI_KEYVAL_INVALID, MPI_SUCCESS, MPI_UNIVERSE_SIZE,
};
use crate::point_to_point::{Destination, Source};
use crate::request::{request_from_raw, Pending, REQUESTS};
use crate::topology::handles::{
    comm_from_raw, comm_owned, free_comm, free_group, group_members, group_owned, CommKind,
};
use crate::topology::{
    CartesianCommunicator, CommHandle, Communicator, CommunicatorRelation, Group, GroupRelation, InterCommunicator,
    Rank, SimpleCommunicator, UserGroup,
};
use crate::ulfm::{TryCollectives, TryRoot};
use std::collections::HashMap;
use std::os::raw::{c_double, c_int, c_void};
use std::sync::{Arc, LazyLock, Mutex};

// ------------------------------------------------------------------ predefined names

// The predefined handles of communicators, groups, requests, messages and operations are
// `crate::handles`' (re-exported above); these are the rest.
predefined_names! {
    /// `bool`.
    RSMPI_C_BOOL: MPI_Datatype = MPI_Datatype(&crate::datatype::MAP_BOOL as *const TypeMap as *const c_void);
    /// `f32`.
    RSMPI_FLOAT: MPI_Datatype = MPI_Datatype(&crate::datatype::MAP_F32 as *const TypeMap as *const c_void);
    /// `f64`.
    RSMPI_DOUBLE: MPI_Datatype = MPI_Datatype(&crate::datatype::MAP_F64 as *const TypeMap as *const c_void);
    /// `i8`.
    RSMPI_INT8_T: MPI_Datatype = MPI_Datatype(&crate::datatype::MAP_I8 as *const TypeMap as *const c_void);
    /// `i16`.
    RSMPI_INT16_T: MPI_Datatype = MPI_Datatype(&crate::datatype::MAP_I16 as *const TypeMap as *const c_void);
    /// `i32`.
    RSMPI_INT32_T: MPI_Datatype = MPI_Datatype(&crate::datatype::MAP_I32 as *const TypeMap as *const c_void);
    /// `i64`.
    RSMPI_INT64_T: MPI_Datatype = MPI_Datatype(&crate::datatype::MAP_I64 as *const TypeMap as *const c_void);
    /// `u8`.
    RSMPI_UINT8_T: MPI_Datatype = MPI_Datatype(&crate::datatype::MAP_U8 as *const TypeMap as *const c_void);
    /// `u16`.
    RSMPI_UINT16_T: MPI_Datatype = MPI_Datatype(&crate::datatype::MAP_U16 as *const TypeMap as *const c_void);
    /// `u32`.
    RSMPI_UINT32_T: MPI_Datatype = MPI_Datatype(&crate::datatype::MAP_U32 as *const TypeMap as *const c_void);
    /// `u64`.
    RSMPI_UINT64_T: MPI_Datatype = MPI_Datatype(&crate::datatype::MAP_U64 as *const TypeMap as *const c_void);
    /// A complex number of two `f32`.
    #[cfg(feature = "complex")]
    RSMPI_FLOAT_COMPLEX: MPI_Datatype = MPI_Datatype(&crate::datatype::MAP_C32 as *const TypeMap as *const c_void);
    /// A complex number of two `f64`.
    #[cfg(feature = "complex")]
    RSMPI_DOUBLE_COMPLEX: MPI_Datatype = MPI_Datatype(&crate::datatype::MAP_C64 as *const TypeMap as *const c_void);
    /// The null datatype.
    RSMPI_DATATYPE_NULL: MPI_Datatype = MPI_Datatype(std::ptr::null());
    /// Pass as a status argument to ignore the status.
    RSMPI_STATUS_IGNORE: *mut MPI_Status = std::ptr::null_mut();
    /// `MPI_IN_PLACE`, for the collectives that take it (`MPI_Reduce` at the root,
    /// `MPI_Allreduce`, `MPI_Scan`, `MPI_Gather` at the root, `MPI_Scatter` at the root,
    /// `MPI_Allgather`). Not a name of rsmpi 0.8.1 (whose bindings have no `MPI_IN_PLACE`).
    RSMPI_IN_PLACE: *mut c_void = more::IN_PLACE;
    /// Pass as an array of statuses to ignore them.
    RSMPI_STATUSES_IGNORE: *mut MPI_Status = std::ptr::null_mut();
    /// Matches any tag.
    RSMPI_ANY_TAG: crate::Tag = crate::point_to_point::ANY_TAG;
    /// Matches any source.
    RSMPI_ANY_SOURCE: Rank = crate::point_to_point::ANY_SOURCE;
    /// The null process: sends to it and receives from it complete at once, doing nothing.
    RSMPI_PROC_NULL: Rank = -1;
    /// "Undefined" (a rank not in a group, a split color, a count that is not whole).
    RSMPI_UNDEFINED: c_int = -32766;
    /// `MPI_Comm_split_type`'s shared-memory type.
    RSMPI_COMM_TYPE_SHARED: c_int = 1;
    /// `MPI_Comm_compare`/`MPI_Group_compare`: the same object.
    RSMPI_IDENT: c_int = 0;
    /// `MPI_Comm_compare`: the same members in the same order, another context.
    RSMPI_CONGRUENT: c_int = 1;
    /// The same members in another order.
    RSMPI_SIMILAR: c_int = 2;
    /// Different members.
    RSMPI_UNEQUAL: c_int = 3;
    /// Thread support levels.
    RSMPI_THREAD_SINGLE: c_int = 0;
    /// Thread support levels.
    RSMPI_THREAD_FUNNELED: c_int = 1;
    /// Thread support levels.
    RSMPI_THREAD_SERIALIZED: c_int = 2;
    /// Thread support levels.
    RSMPI_THREAD_MULTIPLE: c_int = 3;
    /// `MPI_Topo_test`: a graph topology (never here).
    RSMPI_GRAPH: c_int = 1;
    /// `MPI_Topo_test`: a Cartesian topology.
    RSMPI_CART: c_int = 2;
    /// `MPI_Topo_test`: a distributed graph topology (never here).
    RSMPI_DIST_GRAPH: c_int = 3;
    /// Longest library version string.
    RSMPI_MAX_LIBRARY_VERSION_STRING: c_int = 8192;
    /// Longest processor name.
    RSMPI_MAX_PROCESSOR_NAME: c_int = 128;
}
pub use c_statics::*;

/// The values of every predefined name, as constants (this module's and `crate::handles`').
mod k {
    pub(crate) use super::predefined::*;
    pub(crate) use crate::handles::predefined::*;
}

const SUCCESS: c_int = MPI_SUCCESS as c_int;
const ERR_COMM: c_int = MPI_ERR_COMM as c_int;
const ERR_GROUP: c_int = MPI_ERR_GROUP as c_int;
const ERR_ARG: c_int = MPI_ERR_ARG as c_int;
const ERR_COUNT: c_int = MPI_ERR_COUNT as c_int;
const ERR_TYPE: c_int = MPI_ERR_TYPE as c_int;
const ERR_RANK: c_int = MPI_ERR_RANK as c_int;
const ERR_ROOT: c_int = MPI_ERR_ROOT as c_int;
const ERR_OP: c_int = MPI_ERR_OP as c_int;
const ERR_REQUEST: c_int = MPI_ERR_REQUEST as c_int;

/// The error class of a failed communication, as this module's functions answer it (for
/// bindings that complete requests themselves, such as the MPICH ABI): a lost peer is noted
/// for the message of the fatal error that may follow.
pub fn error_class(e: &crate::CommError) -> c_int {
    err_class(e)
}

/// The error class of a failed communication.
fn err_class(e: &crate::CommError) -> c_int {
    match e {
        crate::CommError::Truncated { .. } => MPI_ERR_TRUNCATE as c_int,
        // ULFM's classes, MPICH's numbers (`MPIX_ERR_PROC_FAILED`, `MPIX_ERR_REVOKED`).
        crate::CommError::PeerLost { rank, .. } => {
            crate::fatal::note_lost(*rank);
            101
        }
        crate::CommError::Revoked => 103,
        _ => MPI_ERR_OTHER as c_int,
    }
}

/// The Rust communicator a handle stands for.
pub(crate) enum CommObj {
    Intra(SimpleCommunicator),
    Inter(InterCommunicator),
    Cart(CartesianCommunicator),
}

impl CommObj {
    pub(crate) fn of(h: CommHandle, kind: CommKind) -> CommObj {
        match kind {
            CommKind::Intra if h.0.inter_local.is_some() => CommObj::Inter(InterCommunicator::from_remote(h, false)),
            CommKind::Intra => CommObj::Intra(SimpleCommunicator(h)),
            CommKind::Inter { parents_side } => CommObj::Inter(InterCommunicator::from_remote(h, parents_side)),
            CommKind::Cart { dims, periods } => {
                CommObj::Cart(CartesianCommunicator::from_parts(SimpleCommunicator(h), dims, periods))
            }
        }
    }
}

/// Runs `$body` with `$c` bound to the Rust communicator of `$obj`.
macro_rules! with_comm {
    ($obj:expr, $c:ident => $body:expr) => {
        match $obj {
            CommObj::Intra($c) => $body,
            CommObj::Inter($c) => $body,
            CommObj::Cart($c) => $body,
        }
    };
}

/// The communicator of handle `c`, or `MPI_ERR_COMM` from the calling function.
macro_rules! comm_or_return {
    ($c:expr) => {
        match comm_from_raw($c, false) {
            Some((h, k)) => CommObj::of(h, k),
            None => return ERR_COMM,
        }
    };
}

// ------------------------------------------------------------------------- functions

/// Whether `initialize` was called (`MPI_Initialized`).
///
/// # Safety
/// `flag` must be valid for a write.
pub unsafe extern "C" fn MPI_Initialized(flag: *mut c_int) -> c_int {
    if flag.is_null() {
        return ERR_ARG;
    }
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { *flag = crate::is_initialized() as c_int };
    SUCCESS
}

/// Whether the library was finalized (`MPI_Finalized`).
///
/// # Safety
/// `flag` must be valid for a write.
pub unsafe extern "C" fn MPI_Finalized(flag: *mut c_int) -> c_int {
    if flag.is_null() {
        return ERR_ARG;
    }
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { *flag = crate::is_finalized() as c_int };
    SUCCESS
}

/// Writes `v` to `out`, or answers `MPI_ERR_ARG` for a null pointer.
///
/// # Safety
/// `out` must be null or valid for a write.
unsafe fn put<T>(out: *mut T, v: T) -> c_int {
    if out.is_null() {
        return ERR_ARG;
    }
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { out.write(v) };
    SUCCESS
}

/// This process's rank in `comm` (in its local group for an intercommunicator).
///
/// # Safety
/// `rank` must be valid for a write.
pub unsafe extern "C" fn MPI_Comm_rank(comm: MPI_Comm, rank: *mut c_int) -> c_int {
    let c = comm_or_return!(comm);
    // SAFETY: the caller's contract.
    unsafe { put(rank, with_comm!(c, c => c.rank())) }
}

/// The number of processes of `comm` (of its local group for an intercommunicator).
///
/// # Safety
/// `size` must be valid for a write.
pub unsafe extern "C" fn MPI_Comm_size(comm: MPI_Comm, size: *mut c_int) -> c_int {
    let c = comm_or_return!(comm);
    // SAFETY: the caller's contract.
    unsafe { put(size, with_comm!(c, c => c.size())) }
}

/// The size of an intercommunicator's remote group.
///
/// # Safety
/// `size` must be valid for a write.
pub unsafe extern "C" fn MPI_Comm_remote_size(comm: MPI_Comm, size: *mut c_int) -> c_int {
    match comm_or_return!(comm) {
        // SAFETY: the caller's contract.
        CommObj::Inter(c) => unsafe { put(size, c.remote_size()) },
        _ => ERR_COMM,
    }
}

/// Whether `comm` is an intercommunicator.
///
/// # Safety
/// `flag` must be valid for a write.
pub unsafe extern "C" fn MPI_Comm_test_inter(comm: MPI_Comm, flag: *mut c_int) -> c_int {
    let c = comm_or_return!(comm);
    // SAFETY: the caller's contract.
    unsafe { put(flag, matches!(c, CommObj::Inter(_)) as c_int) }
}

/// The topology of `comm`: `RSMPI_CART` or `RSMPI_UNDEFINED` (graphs are never made here).
///
/// # Safety
/// `status` must be valid for a write.
pub unsafe extern "C" fn MPI_Topo_test(comm: MPI_Comm, status: *mut c_int) -> c_int {
    let c = comm_or_return!(comm);
    let t = if matches!(c, CommObj::Cart(_)) { k::RSMPI_CART } else { k::RSMPI_UNDEFINED };
    // SAFETY: the caller's contract.
    unsafe { put(status, t) }
}

/// Duplicates `comm` (collective): `*newcomm` owns the new communicator until
/// `MPI_Comm_free` or a `from_raw`. Attributes are copied by their keys' copy callbacks.
///
/// # Safety
/// `newcomm` must be valid for a write.
pub unsafe extern "C" fn MPI_Comm_dup(comm: MPI_Comm, newcomm: *mut MPI_Comm) -> c_int {
    if newcomm.is_null() {
        return ERR_ARG;
    }
    let c = comm_or_return!(comm);
    if matches!(c, CommObj::Inter(_)) {
        return ERR_COMM;
    }
    let d = match with_comm!(c, c => c.try_duplicate()) {
        Ok(d) => d,
        Err(e) => return err_class(&e),
    };
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { put(newcomm, comm_owned(d.0, CommKind::Intra)) }
}

/// Splits `comm` by `color` (`RSMPI_UNDEFINED`: no new communicator, `*newcomm` is
/// `RSMPI_COMM_NULL`), ordered by `key` (collective).
///
/// # Safety
/// `newcomm` must be valid for a write.
pub unsafe extern "C" fn MPI_Comm_split(comm: MPI_Comm, color: c_int, key: c_int, newcomm: *mut MPI_Comm) -> c_int {
    if newcomm.is_null() {
        return ERR_ARG;
    }
    if color < 0 && color != k::RSMPI_UNDEFINED {
        return ERR_ARG;
    }
    let c = comm_or_return!(comm);
    if matches!(c, CommObj::Inter(_)) {
        return ERR_COMM;
    }
    let color = if color == k::RSMPI_UNDEFINED {
        crate::topology::Color::undefined()
    } else {
        crate::topology::Color::with_value(color)
    };
    let d = match with_comm!(c, c => c.try_split_by_color_with_key(color, key)) {
        Ok(d) => d,
        Err(e) => return err_class(&e),
    };
    let h = d.map_or(k::RSMPI_COMM_NULL, |d| comm_owned(d.0, CommKind::Intra));
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { put(newcomm, h) }
}

/// Frees the communicator `*comm` owns (its attributes' delete callbacks run once no Rust
/// object holds it any more) and sets `*comm` to `RSMPI_COMM_NULL`. The world and self
/// communicators cannot be freed.
///
/// # Safety
/// `comm` must be valid for a read and a write.
pub unsafe extern "C" fn MPI_Comm_free(comm: *mut MPI_Comm) -> c_int {
    if comm.is_null() {
        return ERR_ARG;
    }
    // SAFETY: checked non-null; the caller vouches it is readable and writable.
    let c = unsafe { *comm };
    if c == k::RSMPI_COMM_WORLD || c == k::RSMPI_COMM_SELF {
        return ERR_COMM;
    }
    let Some(dropped) = free_comm(c) else { return ERR_COMM };
    // Dropped outside the table's lock: the delete callbacks may use this module.
    drop(dropped);
    // SAFETY: as above.
    unsafe { *comm = k::RSMPI_COMM_NULL };
    SUCCESS
}

fn relation_code(r: CommunicatorRelation) -> c_int {
    match r {
        CommunicatorRelation::Identical => k::RSMPI_IDENT,
        CommunicatorRelation::Congruent => k::RSMPI_CONGRUENT,
        CommunicatorRelation::Similar => k::RSMPI_SIMILAR,
        CommunicatorRelation::Unequal => k::RSMPI_UNEQUAL,
    }
}

/// Compares two communicators: `RSMPI_IDENT`, `RSMPI_CONGRUENT`, `RSMPI_SIMILAR` or
/// `RSMPI_UNEQUAL`.
///
/// # Safety
/// `result` must be valid for a write.
pub unsafe extern "C" fn MPI_Comm_compare(comm1: MPI_Comm, comm2: MPI_Comm, result: *mut c_int) -> c_int {
    let a = comm_or_return!(comm1);
    let b = comm_or_return!(comm2);
    let r = with_comm!(a, a => with_comm!(&b, b => a.compare(b)));
    // SAFETY: the caller's contract.
    unsafe { put(result, relation_code(r)) }
}

/// The group of `comm` (its local group for an intercommunicator); `*group` owns it until
/// `MPI_Group_free`.
///
/// # Safety
/// `group` must be valid for a write.
pub unsafe extern "C" fn MPI_Comm_group(comm: MPI_Comm, group: *mut MPI_Group) -> c_int {
    let c = comm_or_return!(comm);
    let g = match &c {
        CommObj::Inter(i) => SimpleCommunicator(i.local_handle().clone()).group(),
        _ => with_comm!(c, c => c.group()),
    };
    // SAFETY: the caller's contract.
    unsafe { put(group, group_owned(g.members_arc())) }
}

/// The number of processes of a group.
///
/// # Safety
/// `size` must be valid for a write.
pub unsafe extern "C" fn MPI_Group_size(group: MPI_Group, size: *mut c_int) -> c_int {
    let Some(m) = group_members(group) else { return ERR_GROUP };
    // SAFETY: the caller's contract.
    unsafe { put(size, m.len() as c_int) }
}

/// This process's rank in a group, `RSMPI_UNDEFINED` if it is not a member.
///
/// # Safety
/// `rank` must be valid for a write.
pub unsafe extern "C" fn MPI_Group_rank(group: MPI_Group, rank: *mut c_int) -> c_int {
    let Some(m) = group_members(group) else { return ERR_GROUP };
    let r = UserGroup::from_members(m).rank().unwrap_or(k::RSMPI_UNDEFINED);
    // SAFETY: the caller's contract.
    unsafe { put(rank, r) }
}

/// Translates `n` ranks of `group1` into ranks of `group2` (`RSMPI_UNDEFINED` for those not
/// in it).
///
/// # Safety
/// `ranks1` must be valid for `n` reads and `ranks2` for `n` writes.
pub unsafe extern "C" fn MPI_Group_translate_ranks(
    group1: MPI_Group,
    n: c_int,
    ranks1: *const c_int,
    group2: MPI_Group,
    ranks2: *mut c_int,
) -> c_int {
    let (Some(a), Some(b)) = (group_members(group1), group_members(group2)) else { return ERR_GROUP };
    if n < 0 {
        return ERR_COUNT;
    }
    if n > 0 && (ranks1.is_null() || ranks2.is_null()) {
        return ERR_ARG;
    }
    for i in 0..n as usize {
        // SAFETY: `i < n`, and the caller vouches for `n` elements of each array.
        let r = unsafe { *ranks1.add(i) };
        let t = match usize::try_from(r).ok().and_then(|r| a.get(r)) {
            Some(w) => b.iter().position(|x| x == w).map_or(k::RSMPI_UNDEFINED, |p| p as c_int),
            None if r == k::RSMPI_PROC_NULL => k::RSMPI_PROC_NULL,
            None => return ERR_RANK,
        };
        // SAFETY: as above.
        unsafe { *ranks2.add(i) = t };
    }
    SUCCESS
}

/// Compares two groups: `RSMPI_IDENT`, `RSMPI_SIMILAR` or `RSMPI_UNEQUAL`.
///
/// # Safety
/// `result` must be valid for a write.
pub unsafe extern "C" fn MPI_Group_compare(group1: MPI_Group, group2: MPI_Group, result: *mut c_int) -> c_int {
    let (Some(a), Some(b)) = (group_members(group1), group_members(group2)) else { return ERR_GROUP };
    let r = match UserGroup::from_members(a).compare(&UserGroup::from_members(b)) {
        GroupRelation::Identical => k::RSMPI_IDENT,
        GroupRelation::Similar => k::RSMPI_SIMILAR,
        GroupRelation::Unequal => k::RSMPI_UNEQUAL,
    };
    // SAFETY: the caller's contract.
    unsafe { put(result, r) }
}

/// Frees a group handle made here (`MPI_Comm_group`) and sets `*group` to
/// `RSMPI_GROUP_NULL`. A handle from `as_raw` only stops naming its group.
///
/// # Safety
/// `group` must be valid for a read and a write.
pub unsafe extern "C" fn MPI_Group_free(group: *mut MPI_Group) -> c_int {
    if group.is_null() {
        return ERR_ARG;
    }
    // SAFETY: checked non-null; the caller vouches it is readable and writable.
    let g = unsafe { *group };
    if g == k::RSMPI_GROUP_EMPTY {
        // SAFETY: as above.
        unsafe { *group = k::RSMPI_GROUP_NULL };
        return SUCCESS;
    }
    if !free_group(g) {
        return ERR_GROUP;
    }
    // SAFETY: as above.
    unsafe { *group = k::RSMPI_GROUP_NULL };
    SUCCESS
}

/// Creates a user reduction operation; `*op` names it until `MPI_Op_free`.
///
/// # Safety
/// `function` must be sound to call on the buffers and datatypes the operation will be used
/// with, and implement an associative operation (commutative if `commute` is non-zero).
/// `op` must be valid for a write.
pub unsafe extern "C" fn MPI_Op_create(function: MPI_User_function, commute: c_int, op: *mut MPI_Op) -> c_int {
    let Some(f) = function else { return ERR_ARG };
    if op.is_null() {
        return ERR_ARG;
    }
    // SAFETY: the caller vouches for the function, as `UnsafeUserOperation::new` asks.
    let u = unsafe { UnsafeUserOperation::new(commute != 0, f) };
    let h = new_user_op(u);
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { put(op, h) }
}

/// Frees a user operation handle and sets `*op` to `RSMPI_OP_NULL`.
///
/// # Safety
/// `op` must be valid for a read and a write.
pub unsafe extern "C" fn MPI_Op_free(op: *mut MPI_Op) -> c_int {
    if op.is_null() {
        return ERR_ARG;
    }
    // SAFETY: checked non-null; the caller vouches it is readable and writable.
    let o = unsafe { *op };
    if !free_op(o) {
        return ERR_OP;
    }
    // SAFETY: as above.
    unsafe { *op = k::RSMPI_OP_NULL };
    SUCCESS
}

/// The number of data bytes in one element of `datatype`.
///
/// # Safety
/// `datatype` must name a live datatype; `size` must be valid for a write.
pub unsafe extern "C" fn MPI_Type_size(datatype: MPI_Datatype, size: *mut c_int) -> c_int {
    if datatype.is_null() {
        return ERR_TYPE;
    }
    // SAFETY: the caller vouches for the handle.
    let m = unsafe { datatype.map() };
    // SAFETY: the caller's contract.
    unsafe { put(size, m.size() as c_int) }
}

/// Checks a buffer's arguments: the datatype is not null, the count not negative, the
/// pointer not null when there is data.
fn check_buffer(buf: *const c_void, count: c_int, datatype: MPI_Datatype) -> Result<(), c_int> {
    if datatype.is_null() {
        return Err(ERR_TYPE);
    }
    if count < 0 {
        return Err(ERR_COUNT);
    }
    if (count > 0 && buf.is_null()) || std::ptr::eq(buf, more::IN_PLACE) {
        // (`RSMPI_IN_PLACE` where it does not apply is no buffer.)
        return Err(MPI_ERR_BUFFER as c_int);
    }
    Ok(())
}

fn check_rank(c: &CommObj, r: Rank) -> Result<(), c_int> {
    let n = with_comm!(c, c => c.target_size());
    if (0..n).contains(&r) {
        Ok(())
    } else {
        Err(ERR_RANK)
    }
}

/// Sends `count` elements of `datatype` from `buf` to rank `dest` of `comm` with `tag`
/// (blocking, standard mode). A send to `RSMPI_PROC_NULL` does nothing.
///
/// # Safety
/// `buf` must hold `count` valid elements of `datatype` (a live datatype).
pub unsafe extern "C" fn MPI_Send(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    let c = comm_or_return!(comm);
    if let Err(e) = check_buffer(buf, count, datatype) {
        return e;
    }
    if dest == k::RSMPI_PROC_NULL {
        return SUCCESS;
    }
    if let Err(e) = check_rank(&c, dest) {
        return e;
    }
    if tag < 0 {
        return MPI_ERR_TAG as c_int;
    }
    // SAFETY: the caller vouches for `count` elements of the live `datatype` at `buf`,
    // read only during this call.
    let data = unsafe { DynBuffer::from_raw(buf, count, DatatypeRef::from_map(datatype.map())) };
    match with_comm!(c, c => c.process_at_rank(dest).try_send_with_tag(&data, tag)) {
        Ok(()) => SUCCESS,
        Err(e) => err_class(&e),
    }
}

/// Receives at most `count` elements of `datatype` into `buf` from rank `source` of `comm`
/// (or `RSMPI_ANY_SOURCE`) with `tag` (or `RSMPI_ANY_TAG`); fills `*status` unless it is
/// `RSMPI_STATUS_IGNORE`. A receive from `RSMPI_PROC_NULL` completes at once with source
/// `RSMPI_PROC_NULL`, tag `RSMPI_ANY_TAG` and no data.
///
/// # Safety
/// `buf` must be writable for `count` elements of `datatype` (a live datatype); `status`
/// must be null or valid for a write.
pub unsafe extern "C" fn MPI_Recv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    let c = comm_or_return!(comm);
    if let Err(e) = check_buffer(buf, count, datatype) {
        return e;
    }
    if tag < 0 && tag != k::RSMPI_ANY_TAG {
        return MPI_ERR_TAG as c_int;
    }
    let st = if source == k::RSMPI_PROC_NULL {
        MPI_Status { MPI_SOURCE: k::RSMPI_PROC_NULL, MPI_TAG: k::RSMPI_ANY_TAG, ..Default::default() }
    } else {
        if source != k::RSMPI_ANY_SOURCE {
            if let Err(e) = check_rank(&c, source) {
                return e;
            }
        }
        // SAFETY: the caller vouches that `buf` is writable for `count` elements of the
        // live `datatype`, and nothing else uses it during this call.
        let mut data = unsafe { DynBufferMut::from_raw(buf, count, DatatypeRef::from_map(datatype.map())) };
        let r = with_comm!(c, c => if source == k::RSMPI_ANY_SOURCE {
            c.any_process().try_receive_into_with_tag(&mut data, tag)
        } else {
            c.process_at_rank(source).try_receive_into_with_tag(&mut data, tag)
        });
        match r {
            Ok(s) => MPI_Status::from(s),
            Err(e) => return err_class(&e),
        }
    };
    if !status.is_null() {
        // SAFETY: non-null, and the caller vouches it is writable.
        unsafe { *status = st };
    }
    SUCCESS
}

/// The number of whole elements of `datatype` a status's message held (`RSMPI_UNDEFINED`
/// if it is not a whole number).
///
/// # Safety
/// `status` must be valid for a read, `datatype` a live datatype, `count` valid for a write.
pub unsafe extern "C" fn MPI_Get_count(status: *const MPI_Status, datatype: MPI_Datatype, count: *mut c_int) -> c_int {
    if status.is_null() {
        return ERR_ARG;
    }
    if datatype.is_null() {
        return ERR_TYPE;
    }
    // SAFETY: checked non-null; the caller vouches it is readable.
    let bytes = unsafe { (*status).bytes };
    // SAFETY: the caller vouches for the handle.
    let size = unsafe { datatype.map() }.size() as u64;
    let n = match size {
        0 if bytes == 0 => 0,
        0 => k::RSMPI_UNDEFINED,
        s if bytes % s != 0 => k::RSMPI_UNDEFINED,
        s => c_int::try_from(bytes / s).unwrap_or(k::RSMPI_UNDEFINED),
    };
    // SAFETY: the caller's contract.
    unsafe { put(count, n) }
}

/// Blocks until every process of `comm` called it.
///
/// # Safety
/// None (the function is `unsafe` as in rsmpi's bindings).
pub unsafe extern "C" fn MPI_Barrier(comm: MPI_Comm) -> c_int {
    let c = comm_or_return!(comm);
    match with_comm!(c, c => c.try_barrier()) {
        Ok(()) => SUCCESS,
        Err(e) => err_class(&e),
    }
}

/// Broadcasts `count` elements of `datatype` at `buf` from rank `root` of `comm`
/// (collective over an intracommunicator).
///
/// # Safety
/// `buf` must be writable for `count` elements of `datatype` (a live datatype), and hold
/// them at the root.
pub unsafe extern "C" fn MPI_Bcast(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    let c = comm_or_return!(comm);
    if matches!(c, CommObj::Inter(_)) {
        return ERR_COMM;
    }
    if let Err(e) = check_buffer(buf, count, datatype) {
        return e;
    }
    if check_rank(&c, root).is_err() {
        return ERR_ROOT;
    }
    // SAFETY: the caller vouches for `count` writable elements of the live `datatype`.
    let mut data = unsafe { DynBufferMut::from_raw(buf, count, DatatypeRef::from_map(datatype.map())) };
    match with_comm!(c, c => c.process_at_rank(root).try_broadcast_into(&mut data)) {
        Ok(()) => SUCCESS,
        Err(e) => err_class(&e),
    }
}

/// Reduces `count` elements of `datatype` from every process's `sendbuf` with `op` into
/// `recvbuf` at rank `root` (`recvbuf` is not used elsewhere).
///
/// # Safety
/// `sendbuf` must hold `count` elements of `datatype` (a live datatype); at the root,
/// `recvbuf` must be writable for as many and not overlap `sendbuf`.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn MPI_Reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    let c = comm_or_return!(comm);
    if matches!(c, CommObj::Inter(_)) {
        return ERR_COMM;
    }
    if check_rank(&c, root).is_err() {
        return ERR_ROOT;
    }
    let me = with_comm!(&c, c => c.rank());
    // At the root, `RSMPI_IN_PLACE` takes the input from `recvbuf`.
    let (sendbuf, _staged) = if me == root {
        // SAFETY: the caller's contract.
        match unsafe { more::in_place_input(sendbuf, recvbuf, count, datatype) } {
            Ok(x) => x,
            Err(e) => return e,
        }
    } else {
        (sendbuf, None)
    };
    if let Err(e) = check_buffer(sendbuf, count, datatype) {
        return e;
    }
    let Some(op) = op_of(op) else { return ERR_OP };
    if me == root {
        if let Err(e) = check_buffer(recvbuf, count, datatype) {
            return e;
        }
    }
    // SAFETY: the caller vouches for `count` elements of the live `datatype` at `sendbuf`.
    let s = unsafe { DynBuffer::from_raw(sendbuf, count, DatatypeRef::from_map(datatype.map())) };
    let r = if me == root {
        // SAFETY: the root's `recvbuf` is writable for `count` elements, apart from `sendbuf`.
        let mut r = unsafe { DynBufferMut::from_raw(recvbuf, count, DatatypeRef::from_map(datatype.map())) };
        with_comm!(c, c => c.process_at_rank(root).try_reduce_into_root(&s, &mut r, op))
    } else {
        with_comm!(c, c => c.process_at_rank(root).try_reduce_into(&s, op))
    };
    match r {
        Ok(()) => SUCCESS,
        Err(e) => err_class(&e),
    }
}

/// Reduces `count` elements of `datatype` from every process's `sendbuf` with `op` into
/// every process's `recvbuf`.
///
/// # Safety
/// `sendbuf` must hold `count` elements of `datatype` (a live datatype), `recvbuf` be
/// writable for as many and not overlap `sendbuf`.
pub unsafe extern "C" fn MPI_Allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    let c = comm_or_return!(comm);
    // `RSMPI_IN_PLACE` takes the input from `recvbuf`.
    // SAFETY: the caller's contract.
    unsafe {
        more::whole_reduction(
            sendbuf,
            recvbuf,
            count,
            datatype,
            op,
            |s, r, op| with_comm!(c, c => c.try_all_reduce_into(s, r, op)),
        )
    }
}

/// Waits for the request `*request` names (one handed over by `Request::into_raw`), fills
/// `*status` unless it is `RSMPI_STATUS_IGNORE`, and sets `*request` to
/// `RSMPI_REQUEST_NULL`. Waiting for `RSMPI_REQUEST_NULL` returns at once.
///
/// # Safety
/// `request` must be valid for a read and a write, `status` null or valid for a write. The
/// request's buffer must still be valid (as `Request::into_raw` says).
pub unsafe extern "C" fn MPI_Wait(request: *mut MPI_Request, status: *mut MPI_Status) -> c_int {
    if request.is_null() {
        return ERR_ARG;
    }
    // SAFETY: checked non-null; the caller vouches it is readable and writable.
    let h = unsafe { *request };
    if h != k::RSMPI_REQUEST_NULL && !more::request_live(h) {
        return ERR_REQUEST;
    }
    // SAFETY: as above.
    unsafe { *request = k::RSMPI_REQUEST_NULL };
    let st = match more::wait_request(h) {
        Ok(st) => st,
        Err(e) => return e,
    };
    if !status.is_null() {
        // SAFETY: non-null, and the caller vouches it is writable.
        unsafe { *status = st };
    }
    SUCCESS
}

/// Tests the request `*request` names: if it completed, `*flag` is 1, `*status` filled and
/// `*request` set to `RSMPI_REQUEST_NULL`; else `*flag` is 0.
///
/// # Safety
/// As for [`MPI_Wait`]; `flag` must be valid for a write.
pub unsafe extern "C" fn MPI_Test(request: *mut MPI_Request, flag: *mut c_int, status: *mut MPI_Status) -> c_int {
    if request.is_null() || flag.is_null() {
        return ERR_ARG;
    }
    // SAFETY: checked non-null; the caller vouches it is readable and writable.
    let h = unsafe { *request };
    let st = match more::test_request(h) {
        Ok(Some(st)) => st,
        Ok(None) => {
            // SAFETY: checked non-null; the caller vouches it is writable.
            unsafe { *flag = 0 };
            return SUCCESS;
        }
        Err(e) => {
            if e != ERR_REQUEST {
                // SAFETY: as above: the request completed, failed.
                unsafe { *request = k::RSMPI_REQUEST_NULL };
            }
            return e;
        }
    };
    // SAFETY: as above.
    unsafe {
        *request = k::RSMPI_REQUEST_NULL;
        *flag = 1;
    }
    if !status.is_null() {
        // SAFETY: non-null, and the caller vouches it is writable.
        unsafe { *status = st };
    }
    SUCCESS
}

/// Seconds since an arbitrary point in the past.
///
/// # Safety
/// None (the function is `unsafe` as in rsmpi's bindings).
pub unsafe extern "C" fn MPI_Wtime() -> c_double {
    crate::time()
}

/// The resolution of [`MPI_Wtime`] in seconds.
///
/// # Safety
/// None (the function is `unsafe` as in rsmpi's bindings).
pub unsafe extern "C" fn MPI_Wtick() -> c_double {
    crate::time_resolution()
}

/// rsmpi's wrapper of `MPI_Wtime`.
///
/// # Safety
/// None (the function is `unsafe` as in rsmpi's bindings).
pub unsafe extern "C" fn RSMPI_Wtime() -> c_double {
    crate::time()
}

/// rsmpi's wrapper of `MPI_Wtick`.
///
/// # Safety
/// None (the function is `unsafe` as in rsmpi's bindings).
pub unsafe extern "C" fn RSMPI_Wtick() -> c_double {
    crate::time_resolution()
}

/// Stops every process of the job with `errorcode` (never returns). An invalid `comm`
/// aborts the job all the same.
///
/// # Safety
/// None (the function is `unsafe` as in rsmpi's bindings).
pub unsafe extern "C" fn MPI_Abort(comm: MPI_Comm, errorcode: c_int) -> c_int {
    match comm_from_raw(comm, false) {
        Some((h, k)) => with_comm!(CommObj::of(h, k), c => c.abort(errorcode)),
        None => SimpleCommunicator::world().abort(errorcode),
    }
}

mod more;
pub use more::*;

mod attr;
pub use attr::{
    MPI_Comm_create_keyval, MPI_Comm_delete_attr, MPI_Comm_free_keyval, MPI_Comm_get_attr, MPI_Comm_set_attr,
};

#[cfg(test)]
mod tests {
    use super::*;

    /// A lost peer and a revoked communicator answer ULFM's classes (MPICH's numbers); other
    /// failed communications `MPI_ERR_OTHER`.
    #[test]
    fn failures_answer_ulfms_classes() {
        assert_eq!(err_class(&crate::CommError::PeerLost { rank: 3, cause: "gone".into() }), 101);
        assert_eq!(err_class(&crate::CommError::Revoked), 103);
        assert_eq!(err_class(&crate::CommError::Io("x".into())), MPI_ERR_OTHER as c_int);
    }

    /// The predefined names read as rsmpi programs read them: `unsafe` is needed (the lint
    /// below makes an `unsafe` block that is not needed an error), and each name reads the
    /// value of its constant through its exported symbol.
    #[test]
    #[deny(unused_unsafe)]
    fn predefined_names_are_extern_statics_with_their_values() {
        // SAFETY: the predefined names are initialized statics that nothing writes.
        let (world, null, self_, sum, int32, any, undefined, ignore) = unsafe {
            (
                RSMPI_COMM_WORLD,
                RSMPI_COMM_NULL,
                RSMPI_COMM_SELF,
                RSMPI_SUM,
                RSMPI_INT32_T,
                RSMPI_ANY_SOURCE,
                RSMPI_UNDEFINED,
                RSMPI_STATUS_IGNORE,
            )
        };
        assert_eq!(world, k::RSMPI_COMM_WORLD);
        assert_eq!(null, k::RSMPI_COMM_NULL);
        assert_eq!(self_, k::RSMPI_COMM_SELF);
        assert_eq!(sum, k::RSMPI_SUM);
        assert_eq!(int32, MPI_Datatype::of(&crate::datatype::MAP_I32));
        assert_eq!(any, crate::point_to_point::ANY_SOURCE);
        assert_eq!(undefined, k::RSMPI_UNDEFINED);
        assert!(ignore.is_null());
        // The declaration and the definition are one object.
        let declared = &raw const RSMPI_COMM_WORLD as usize;
        assert_eq!(declared, &raw const crate::handles::exported::RSMPI_COMM_WORLD as usize);
    }
}
