//! The table behind the C handles of user reduction operations (`MPI_Op`), see
//! [`crate::handles`]: process-wide because a handle is a plain integer any thread may hand
//! to any function (`as_raw` here, the C functions of [`crate::ffi`]).

use super::ops::ClosureRef;
use super::{SystemOperation, UnsafeUserOperation};
use crate::datatype::TypeMap;
use crate::handles::predefined as k;
use crate::handles::table::Table;
use crate::handles::{lock, MPI_Op, OP_MAXLOC, OP_MINLOC};
use std::sync::{LazyLock, Mutex};

/// A user operation named by a handle.
#[derive(Clone, Copy)]
enum UserOp {
    Unsafe(UnsafeUserOperation),
    Closure(ClosureRef),
}

/// The user operations with handles. Keys: a C function's address times 2, plus 1 if
/// commutative (the top bit cleared), or a closure's address with the top bit set (user
/// addresses never have it on the platforms p2pmpi runs on).
// Process-wide because a C handle is a plain integer any thread may hand to any function, for
// objects that are not tied to a universe (the C handle tables, see `crate::handles`).
static OPS: LazyLock<Mutex<Table<usize, UserOp>>> = LazyLock::new(Default::default);

const CLOSURE_KEY: usize = 1 << (usize::BITS - 1);

/// The handle of a user operation (the same for the same function and commutativity).
pub(crate) fn op_to_raw(op: &UnsafeUserOperation) -> MPI_Op {
    let key = (op.function() as usize).wrapping_mul(2) + op.is_commutative_flag() as usize;
    let key = key & !CLOSURE_KEY;
    let mut ops = lock(&OPS);
    if let Some(id) = ops.find(key) {
        return MPI_Op(id);
    }
    MPI_Op(ops.insert(Some(key), UserOp::Unsafe(*op)))
}

/// The handle of a `UserOperation`'s closure.
pub(crate) fn closure_op_to_raw(c: ClosureRef) -> MPI_Op {
    let key = (c.f as *const () as usize) | CLOSURE_KEY;
    let mut ops = lock(&OPS);
    if let Some(id) = ops.find(key) {
        return MPI_Op(id);
    }
    MPI_Op(ops.insert(Some(key), UserOp::Closure(c)))
}

/// Forgets the handle of a `UserOperation`'s closure at `addr` (the operation is dropped).
pub(crate) fn forget_closure_op(addr: usize) {
    let mut ops = lock(&OPS);
    if let Some(id) = ops.find(addr | CLOSURE_KEY) {
        ops.remove(id);
    }
}

/// An operation named by a handle.
#[derive(Clone, Copy)]
pub(crate) enum AnyOp {
    System(SystemOperation),
    User(UnsafeUserOperation),
    Closure(ClosureRef),
}

// SAFETY: each kind of operation has its own handle.
unsafe impl crate::raw::AsRaw for AnyOp {
    type Raw = MPI_Op;
    fn as_raw(&self) -> MPI_Op {
        match self {
            AnyOp::System(o) => o.as_raw(),
            AnyOp::User(o) => o.as_raw(),
            AnyOp::Closure(o) => o.as_raw(),
        }
    }
}

impl super::Operation for AnyOp {
    fn is_commutative(&self) -> bool {
        match self {
            AnyOp::System(o) => o.is_commutative(),
            AnyOp::User(o) => o.is_commutative(),
            AnyOp::Closure(o) => o.is_commutative(),
        }
    }
    fn combine(&self, map: &TypeMap, count: usize, input: &[u8], inout: &mut [u8]) {
        match self {
            AnyOp::System(o) => o.combine(map, count, input, inout),
            AnyOp::User(o) => o.combine(map, count, input, inout),
            AnyOp::Closure(o) => o.combine(map, count, input, inout),
        }
    }
}

pub(crate) fn op_of(op: MPI_Op) -> Option<AnyOp> {
    let s = match op {
        k::RSMPI_MAX => SystemOperation::max(),
        k::RSMPI_MIN => SystemOperation::min(),
        k::RSMPI_SUM => SystemOperation::sum(),
        k::RSMPI_PROD => SystemOperation::product(),
        k::RSMPI_LAND => SystemOperation::logical_and(),
        k::RSMPI_BAND => SystemOperation::bitwise_and(),
        k::RSMPI_LOR => SystemOperation::logical_or(),
        k::RSMPI_BOR => SystemOperation::bitwise_or(),
        k::RSMPI_LXOR => SystemOperation::logical_xor(),
        k::RSMPI_BXOR => SystemOperation::bitwise_xor(),
        OP_MAXLOC => SystemOperation::max_loc(),
        OP_MINLOC => SystemOperation::min_loc(),
        _ => {
            return lock(&OPS).get(op.0).map(|u| match u {
                UserOp::Unsafe(u) => AnyOp::User(*u),
                UserOp::Closure(c) => AnyOp::Closure(*c),
            })
        }
    };
    Some(AnyOp::System(s))
}

/// A new handle naming a user operation made by `MPI_Op_create`.
pub(crate) fn new_user_op(u: UnsafeUserOperation) -> MPI_Op {
    MPI_Op(lock(&OPS).insert(None, UserOp::Unsafe(u)))
}

/// Frees a user operation's handle (`MPI_Op_free`); `false` if it names none.
pub(crate) fn free_op(o: MPI_Op) -> bool {
    lock(&OPS).remove(o.0).is_some()
}
