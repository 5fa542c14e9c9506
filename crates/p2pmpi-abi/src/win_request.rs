//! Request-based one-sided operations: `MPI_Rput`, `MPI_Rget`, `MPI_Raccumulate`,
//! `MPI_Rget_accumulate` and their `_c` forms. Each starts its operation as
//! [`crate::rma`] does, waits until the target answered (the operation applied there, the
//! data of a get in the origin's buffer) and returns a request that is already complete:
//! `MPI_Wait`, `MPI_Test` and the others finish it at once. An operation on
//! `MPI_PROC_NULL` does nothing and returns a complete request too.

use crate::consts::*;
use crate::datatypes::{MPI_Aint, MPI_Count};
use crate::rma::{errc, flush, get, get_accumulate, int, put_or_acc, win, ACC, PUT};
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

/// Refuses a null request argument before anything starts.
fn check(request: *mut c_int) -> Result<(), c_int> {
    if request.is_null() {
        Err(MPI_ERR_ARG)
    } else {
        Ok(())
    }
}

mpi_fn! {
    /// `MPI_Put`, complete (applied at the target) when it returns; `*request` is complete.
    fn MPI_Rput(
        oaddr: *const c_void,
        ocount: c_int,
        odt: c_int,
        target: c_int,
        disp: MPI_Aint,
        tcount: c_int,
        tdt: c_int,
        wh: c_int,
        request: *mut c_int,
    ) on errc(wh) => {
        check(request)?;
        put_or_acc(PUT, oaddr, ocount, odt, target, disp, tcount, tdt, 0, wh)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { complete(wh, target, request) }
    }
}

mpi_fn! {
    /// `MPI_Rput` with large counts.
    fn MPI_Rput_c(
        oaddr: *const c_void,
        ocount: MPI_Count,
        odt: c_int,
        target: c_int,
        disp: MPI_Aint,
        tcount: MPI_Count,
        tdt: c_int,
        wh: c_int,
        request: *mut c_int,
    ) on errc(wh) => {
        check(request)?;
        put_or_acc(PUT, oaddr, int(ocount)?, odt, target, disp, int(tcount)?, tdt, 0, wh)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { complete(wh, target, request) }
    }
}

mpi_fn! {
    /// `MPI_Get`, the data in the origin's buffer when it returns; `*request` is complete.
    fn MPI_Rget(
        oaddr: *mut c_void,
        ocount: c_int,
        odt: c_int,
        target: c_int,
        disp: MPI_Aint,
        tcount: c_int,
        tdt: c_int,
        wh: c_int,
        request: *mut c_int,
    ) on errc(wh) => {
        check(request)?;
        get(oaddr, ocount, odt, target, disp, tcount, tdt, wh)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { complete(wh, target, request) }
    }
}

mpi_fn! {
    /// `MPI_Rget` with large counts.
    fn MPI_Rget_c(
        oaddr: *mut c_void,
        ocount: MPI_Count,
        odt: c_int,
        target: c_int,
        disp: MPI_Aint,
        tcount: MPI_Count,
        tdt: c_int,
        wh: c_int,
        request: *mut c_int,
    ) on errc(wh) => {
        check(request)?;
        get(oaddr, int(ocount)?, odt, target, disp, int(tcount)?, tdt, wh)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { complete(wh, target, request) }
    }
}

mpi_fn! {
    /// `MPI_Accumulate`, applied at the target when it returns; `*request` is complete.
    fn MPI_Raccumulate(
        oaddr: *const c_void,
        ocount: c_int,
        odt: c_int,
        target: c_int,
        disp: MPI_Aint,
        tcount: c_int,
        tdt: c_int,
        op: c_int,
        wh: c_int,
        request: *mut c_int,
    ) on errc(wh) => {
        check(request)?;
        put_or_acc(ACC, oaddr, ocount, odt, target, disp, tcount, tdt, op, wh)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { complete(wh, target, request) }
    }
}

mpi_fn! {
    /// `MPI_Raccumulate` with large counts.
    fn MPI_Raccumulate_c(
        oaddr: *const c_void,
        ocount: MPI_Count,
        odt: c_int,
        target: c_int,
        disp: MPI_Aint,
        tcount: MPI_Count,
        tdt: c_int,
        op: c_int,
        wh: c_int,
        request: *mut c_int,
    ) on errc(wh) => {
        check(request)?;
        put_or_acc(ACC, oaddr, int(ocount)?, odt, target, disp, int(tcount)?, tdt, op, wh)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { complete(wh, target, request) }
    }
}

mpi_fn! {
    /// `MPI_Get_accumulate`, done (the old data in `result_addr`) when it returns;
    /// `*request` is complete.
    fn MPI_Rget_accumulate(
        oaddr: *const c_void,
        ocount: c_int,
        odt: c_int,
        result: *mut c_void,
        rcount: c_int,
        rdt: c_int,
        target: c_int,
        disp: MPI_Aint,
        tcount: c_int,
        tdt: c_int,
        op: c_int,
        wh: c_int,
        request: *mut c_int,
    ) on errc(wh) => {
        check(request)?;
        get_accumulate(oaddr, ocount, odt, result, rcount, rdt, target, disp, tcount, tdt, op, wh)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { complete(wh, target, request) }
    }
}

mpi_fn! {
    /// `MPI_Rget_accumulate` with large counts.
    fn MPI_Rget_accumulate_c(
        oaddr: *const c_void,
        ocount: MPI_Count,
        odt: c_int,
        result: *mut c_void,
        rcount: MPI_Count,
        rdt: c_int,
        target: c_int,
        disp: MPI_Aint,
        tcount: MPI_Count,
        tdt: c_int,
        op: c_int,
        wh: c_int,
        request: *mut c_int,
    ) on errc(wh) => {
        check(request)?;
        let (oc, rc, tc) = (int(ocount)?, int(rcount)?, int(tcount)?);
        get_accumulate(oaddr, oc, odt, result, rc, rdt, target, disp, tc, tdt, op, wh)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { complete(wh, target, request) }
    }
}
