//! MPI-1's functions of datatypes that MPI-3 removed and MPICH's library still exports (for
//! programs built against older headers): `MPI_Type_extent`, `MPI_Type_lb`, `MPI_Type_ub`, on
//! `MPI_Type_get_extent`.

use crate::consts::*;
use crate::datatypes::{MPI_Aint, MPI_Type_get_extent};
use std::os::raw::c_int;

/// The lower bound and the extent of `dt`.
fn extent(dt: c_int) -> Result<(MPI_Aint, MPI_Aint), c_int> {
    let (mut lb, mut ext) = (0, 0);
    // SAFETY: two locals, writable.
    match unsafe { MPI_Type_get_extent(dt, &mut lb, &mut ext) } {
        MPI_SUCCESS => Ok((lb, ext)),
        class => Err(class),
    }
}

/// Writes `v` at `out`.
///
/// # Safety
/// `out` must be null or valid for a write.
unsafe fn put(out: *mut MPI_Aint, v: MPI_Aint) -> Result<(), c_int> {
    if out.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { out.write(v) };
    Ok(())
}

mpi_fn! {
    /// The extent of `datatype` (MPI-1; `MPI_Type_get_extent` since).
    fn MPI_Type_extent(dt: c_int, extent_out: *mut MPI_Aint) on MPI_COMM_WORLD => {
        let (_, e) = extent(dt)?;
        // SAFETY: the caller's contract.
        unsafe { put(extent_out, e) }
    }
}

mpi_fn! {
    /// The lower bound of `datatype` (MPI-1).
    fn MPI_Type_lb(dt: c_int, displacement: *mut MPI_Aint) on MPI_COMM_WORLD => {
        let (lb, _) = extent(dt)?;
        // SAFETY: the caller's contract.
        unsafe { put(displacement, lb) }
    }
}

mpi_fn! {
    /// The upper bound of `datatype`: its lower bound plus its extent (MPI-1).
    fn MPI_Type_ub(dt: c_int, displacement: *mut MPI_Aint) on MPI_COMM_WORLD => {
        let (lb, e) = extent(dt)?;
        // SAFETY: the caller's contract.
        unsafe { put(displacement, lb + e) }
    }
}
