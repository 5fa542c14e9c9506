//! User reduction operations: `MPI_Op_create` (and `MPI_Op_create_c`), `MPI_Op_free`, `MPI_Op_commutative`, and the
//! reductions (`MPI_Reduce`, `MPI_Allreduce`, `MPI_Scan`, `MPI_Exscan`, `MPI_Reduce_local`)
//! with one. The program's function is called as C expects it, with MPICH's handle of the
//! datatype of the call: each call makes a Rust [`UserOperation`] around it, and runs on the
//! Rust API of `p2pmpi` (where a failed communication stops the job).

use crate::consts::*;
use crate::datatypes::{datatype_ref, stageable, MPI_Count};
use crate::handles::{object, rust_comm, Slab};
use crate::is_in_place;
use p2pmpi::collective::UserOperation;
use p2pmpi::collective::{TryCollectives, TryRoot};
use p2pmpi::datatype::{DynBuffer, DynBufferMut};
use p2pmpi::traits::*;
use std::os::raw::{c_int, c_void};

/// A user function (`MPI_User_function`): `(invec, inoutvec, len, datatype)`.
pub type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut c_int);

/// The caller of a user function of another language (`MPII_Op_set_cxx`, by which the C++
/// bindings call theirs): `(invec, inoutvec, len, datatype, function)`.
pub type OpCaller = unsafe extern "C" fn(*mut c_void, *mut c_void, c_int, c_int, UserFn);

/// A user function with a large count (`MPI_User_function_c`): `(invec, inoutvec, len,
/// datatype)` with `len` an `MPI_Count`.
pub type UserFnC = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut MPI_Count, *mut c_int);

/// The program's function: of `MPI_Op_create` or of `MPI_Op_create_c`.
#[derive(Clone, Copy)]
enum Function {
    Int(UserFn),
    Large(UserFnC),
}

/// An operation made by `MPI_Op_create` or `MPI_Op_create_c`.
#[derive(Clone, Copy)]
pub struct UserOp {
    f: Function,
    commute: bool,
    caller: Option<OpCaller>,
}

/// Makes the function of operation `h` called through `caller`; `false` if `h` names no
/// operation of the program.
pub fn set_caller(h: c_int, caller: OpCaller) -> bool {
    OPS.with_mut(h, |u| u.caller = Some(caller)).is_some()
}

/// The operations made by the program.
// Process-wide because a C handle is a plain integer any thread may hand to any function.
pub static OPS: Slab<UserOp> = Slab::new(object::OP);

/// The user operation of handle `h`, if it is one.
pub fn user_op(h: c_int) -> Option<UserOp> {
    OPS.get(h)
}

/// The Rust operation calling `u`'s function on elements of MPICH datatype `dt`.
pub(crate) fn rust_op(u: UserOp, dt: c_int) -> UserOperation<'static> {
    UserOperation::new(u.commute, move |a: DynBuffer, mut b: DynBufferMut| {
        let (x, y, mut d) = (a.as_ptr() as *mut c_void, b.as_mut_ptr(), dt);
        // SAFETY: the program's function (directly, or through its language's caller), on
        // `len` elements of `dt` at both buffers (the library's, valid during the call), as
        // `MPI_Op_create(_c)` promised it can take.
        unsafe {
            match (u.f, u.caller) {
                (Function::Int(f), Some(call)) => call(x, y, a.len() as c_int, d, f),
                (Function::Int(f), None) => f(x, y, &mut (a.len() as c_int), &mut d),
                (Function::Large(f), _) => f(x, y, &mut (a.len() as MPI_Count), &mut d),
            }
        }
    })
}

/// Which reduction.
#[derive(Clone, Copy)]
pub enum Reduction {
    /// `MPI_Reduce` to this root.
    Reduce(c_int),
    Allreduce,
    Scan,
    Exscan,
}

/// A copy of `recvbuf`'s `count` elements of `dt` (the input of an `MPI_IN_PLACE`
/// reduction), aligned for every predefined type.
///
/// # Safety
/// `recvbuf` must hold `count` elements of `dt`.
unsafe fn staged(recvbuf: *const c_void, count: c_int, dt: c_int) -> Result<Vec<u64>, c_int> {
    let bytes = count as usize * stageable(dt)?;
    let mut v = vec![0u64; bytes.div_ceil(8)];
    if bytes > 0 {
        // SAFETY: the caller vouches for `bytes` bytes at `recvbuf`; `v` is distinct.
        unsafe { std::ptr::copy_nonoverlapping(recvbuf as *const u8, v.as_mut_ptr() as *mut u8, bytes) };
    }
    Ok(v)
}

/// Runs reduction `which` with user operation `u`.
///
/// # Safety
/// The buffers as the reduction says.
#[allow(clippy::too_many_arguments)]
pub unsafe fn reduce(
    which: Reduction,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: c_int,
    u: UserOp,
    c: c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    let d = datatype_ref(dt)?;
    if count < 0 {
        return Err(MPI_ERR_COUNT);
    }
    let op = rust_op(u, dt);
    let me = rc.rank();
    let receives = match which {
        Reduction::Reduce(root) if !(0..rc.size()).contains(&root) => return Err(MPI_ERR_ROOT),
        Reduction::Reduce(root) => me == root,
        _ => true,
    };
    let copy;
    // SAFETY: the caller vouches for the buffers; in place, the input is a copy of `recvbuf`.
    let s = unsafe {
        if receives && is_in_place(sendbuf) {
            copy = staged(recvbuf, count, dt)?;
            DynBuffer::from_raw(copy.as_ptr() as *const c_void, count, d)
        } else {
            crate::not_in_place(sendbuf)?;
            DynBuffer::from_raw(crate::nz(sendbuf, count), count, d)
        }
    };
    if !receives {
        if let Reduction::Reduce(root) = which {
            rc.process_at_rank(root).try_reduce_into(&s, &op).map_err(crate::errors::class_of_failure)?;
        }
        return Ok(());
    }
    crate::not_in_place(recvbuf)?;
    // SAFETY: the caller vouches for `count` writable elements at `recvbuf`, apart from the
    // input.
    let mut r = unsafe { DynBufferMut::from_raw(crate::nz_mut(recvbuf, count), count, d) };
    match which {
        Reduction::Reduce(root) => rc.process_at_rank(root).try_reduce_into_root(&s, &mut r, &op),
        Reduction::Allreduce => rc.try_all_reduce_into(&s, &mut r, &op),
        Reduction::Scan => rc.try_scan_into(&s, &mut r, &op),
        Reduction::Exscan => rc.try_exclusive_scan_into(&s, &mut r, &op),
    }
    .map_err(crate::errors::class_of_failure)
}

/// `inoutbuf = inbuf ∘ inoutbuf` with user operation `u`.
///
/// # Safety
/// Both buffers must hold `count` elements of `dt`, apart from each other.
pub unsafe fn reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: c_int,
    dt: c_int,
    u: UserOp,
) -> Result<(), c_int> {
    let d = datatype_ref(dt)?;
    // SAFETY: the caller's contract.
    let (a, mut b) = unsafe {
        (
            DynBuffer::from_raw(crate::nz(inbuf, count), count, d),
            DynBufferMut::from_raw(crate::nz_mut(inoutbuf, count), count, d),
        )
    };
    p2pmpi::collective::reduce_local_into(&a, &mut b, rust_op(u, dt));
    Ok(())
}

mpi_fn! {
    /// Makes a reduction operation of `function` (associative; commutative if `commute`).
    fn MPI_Op_create(function: Option<UserFn>, commute: c_int, op: *mut c_int) on MPI_COMM_WORLD => {
        let Some(f) = function else { return Err(MPI_ERR_ARG) };
        if op.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let h = OPS.insert(UserOp { f: Function::Int(f), commute: commute != 0, caller: None });
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { op.write(h) };
        Ok(())
    }
}

mpi_fn! {
    /// Makes a reduction operation of a function taking a large count (`MPI_User_function_c`).
    fn MPI_Op_create_c(function: Option<UserFnC>, commute: c_int, op: *mut c_int) on MPI_COMM_WORLD => {
        let Some(f) = function else { return Err(MPI_ERR_ARG) };
        if op.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let h = OPS.insert(UserOp { f: Function::Large(f), commute: commute != 0, caller: None });
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { op.write(h) };
        Ok(())
    }
}

mpi_fn! {
    /// Frees an operation of `MPI_Op_create` and sets `*op` to `MPI_OP_NULL`.
    fn MPI_Op_free(op: *mut c_int) on MPI_COMM_WORLD => {
        if op.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        let h = unsafe { op.read() };
        OPS.take(h).ok_or(MPI_ERR_OP)?;
        // SAFETY: as above.
        unsafe { op.write(MPI_OP_NULL) };
        Ok(())
    }
}

mpi_fn! {
    /// Whether an operation is commutative (every predefined one is).
    fn MPI_Op_commutative(op: c_int, commute: *mut c_int) on MPI_COMM_WORLD => {
        let c = match user_op(op) {
            Some(u) => u.commute,
            // One-sided communication's own operations: not commutative, as MPICH says.
            None if op == crate::rma::MPI_REPLACE || op == crate::rma::MPI_NO_OP => false,
            None => {
                crate::ops::system_op(op)?;
                true
            }
        };
        // SAFETY: the caller's contract.
        unsafe { crate::put(commute, c as c_int) }
    }
}

/// `inoutbuf = inbuf ∘ inoutbuf` for `count` elements of `dt`.
///
/// # Safety
/// Both buffers must hold `count` elements of `dt`, apart from each other.
pub(crate) unsafe fn local_reduction(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: c_int,
    dt: c_int,
    o: c_int,
) -> Result<(), c_int> {
    if let Some(u) = user_op(o) {
        crate::not_in_place(inbuf)?;
        crate::not_in_place(inoutbuf)?;
        // SAFETY: the caller's contract.
        return unsafe { reduce_local(inbuf, inoutbuf, count, dt, u) };
    }
    let d = crate::datatypes::datatype(dt)?;
    let op = crate::ops::system_op(o)?;
    if count < 0 {
        return Err(MPI_ERR_COUNT);
    }
    crate::not_in_place(inbuf)?;
    crate::not_in_place(inoutbuf)?;
    if count > 0 && (inbuf.is_null() || inoutbuf.is_null()) {
        return Err(MPI_ERR_BUFFER);
    }
    // SAFETY: `d` names a predefined datatype (living for the whole run); the caller vouches
    // for the buffers.
    unsafe {
        let t = p2pmpi::datatype::DatatypeRef::from_raw(d);
        let a = DynBuffer::from_raw(crate::nz(inbuf, count), count, t);
        let mut b = DynBufferMut::from_raw(crate::nz_mut(inoutbuf, count), count, t);
        p2pmpi::collective::reduce_local_into(&a, &mut b, op);
    }
    Ok(())
}
