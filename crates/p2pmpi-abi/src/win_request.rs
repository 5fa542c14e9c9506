//! Request-based one-sided operations: `MPI_Rput`, `MPI_Rget`, `MPI_Raccumulate`,
//! `MPI_Rget_accumulate` and their `_c` forms. Each starts its operation as
//! [`crate::rma`] does, waits until the target answered (the operation applied there, the
//! data of a get in the origin's buffer) and returns a request that is already complete:
//! `MPI_Wait`, `MPI_Test` and the others finish it at once. An operation on
//! `MPI_PROC_NULL` does nothing and returns a complete request too.

use crate::consts::*;
use crate::datatypes::{MPI_Aint, MPI_Count};
use crate::rma::{data, errc, flush, get, get_accumulate, int, put_or_acc, rma_fn, win, Target, ACC, PUT};
use std::os::raw::{c_int, c_void};

/// Waits for the answers from `target` on window `wh` (nothing for `MPI_PROC_NULL`) and
/// writes a complete request at `request`.
///
/// # Safety
/// `request` must be valid for a write.
unsafe fn complete(wh: c_int, target: c_int, request: *mut c_int) -> Result<(), c_int> {
    if target != MPI_PROC_NULL {
        flush(&*win(wh)?, Some(target))?;
    }
    let nothing = std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut c_void;
    // SAFETY: a receive of nothing from MPI_PROC_NULL, complete at once; the caller vouches
    // for `request`.
    crate::ok(unsafe {
        crate::point_to_point::MPI_Irecv(
            nothing,
            0,
            crate::datatypes::values::MPI_INT,
            MPI_PROC_NULL,
            0,
            MPI_COMM_SELF,
            request,
        )
    })
}

/// Runs `op`, an operation on window `wh` to `target`, as a request-based form: a null
/// `request` is refused before it starts; when it returns, the target answered and `*request`
/// is a complete request.
///
/// # Safety
/// `request` must be null or valid for a write.
unsafe fn requested(
    wh: c_int,
    target: c_int,
    request: *mut c_int,
    op: impl FnOnce() -> Result<(), c_int>,
) -> Result<(), c_int> {
    if request.is_null() {
        return Err(MPI_ERR_ARG);
    }
    op()?;
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { complete(wh, target, request) }
}

rma_fn! {
    /// `MPI_Put`, complete (applied at the target) when it returns; `*request` is complete.
    put MPI_Rput(c_int, request)
}

rma_fn! {
    /// `MPI_Rput` with large counts.
    put MPI_Rput_c(MPI_Count, request)
}

rma_fn! {
    /// `MPI_Get`, the data in the origin's buffer when it returns; `*request` is complete.
    get MPI_Rget(c_int, request)
}

rma_fn! {
    /// `MPI_Rget` with large counts.
    get MPI_Rget_c(MPI_Count, request)
}

rma_fn! {
    /// `MPI_Accumulate`, applied at the target when it returns; `*request` is complete.
    accumulate MPI_Raccumulate(c_int, request)
}

rma_fn! {
    /// `MPI_Raccumulate` with large counts.
    accumulate MPI_Raccumulate_c(MPI_Count, request)
}

rma_fn! {
    /// `MPI_Get_accumulate`, done (the old data in `result_addr`) when it returns;
    /// `*request` is complete.
    get_accumulate MPI_Rget_accumulate(c_int, request)
}

rma_fn! {
    /// `MPI_Rget_accumulate` with large counts.
    get_accumulate MPI_Rget_accumulate_c(MPI_Count, request)
}
