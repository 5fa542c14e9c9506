//! Cartesian topologies: `MPI_Cart_create`, `MPI_Cart_coords`, `MPI_Cart_rank`,
//! `MPI_Cart_shift`, `MPI_Cart_get`, `MPI_Cartdim_get`, `MPI_Cart_sub`, `MPI_Topo_test`, on
//! the library's (`p2pmpi::ffi`); and `MPI_Comm_split_type` (`MPI_COMM_TYPE_SHARED`: the
//! processes of this host). Graph topologies are to come.

use crate::communicators::{null_comm, put_comm};
use crate::consts::*;
use crate::errors::inherit_handler;
use crate::handles::{comm, rust_comm, CommEntry, COMMS};
use crate::ok;
use p2pmpi::ffi;
use p2pmpi::traits::*;
use std::os::raw::c_int;

/// `MPI_COMM_TYPE_SHARED`.
const MPI_COMM_TYPE_SHARED: c_int = 1;
/// `MPI_COMM_TYPE_HW_GUIDED` and `MPI_COMM_TYPE_HW_UNGUIDED`.
const MPI_COMM_TYPE_HW_GUIDED: c_int = 2;
const MPI_COMM_TYPE_HW_UNGUIDED: c_int = 3;

mpi_fn! {
    /// A Cartesian communicator of `ndims` dimensions over `comm`'s first processes
    /// (`MPI_COMM_NULL` at the others).
    fn MPI_Cart_create(
        c: c_int,
        ndims: c_int,
        dims: *const c_int,
        periods: *const c_int,
        reorder: c_int,
        out: *mut c_int,
    ) on c => {
        let fc = comm(c)?;
        if out.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let mut d = null_comm();
        // SAFETY: the caller vouches for `ndims` entries of `dims` and `periods`; `d` is a local.
        ok(unsafe { ffi::MPI_Cart_create(fc, ndims, dims, periods, reorder, &mut d) })?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put_comm(out, c, d) };
        Ok(())
    }
}

mpi_fn! {
    /// The coordinates of `rank` in a Cartesian communicator.
    fn MPI_Cart_coords(c: c_int, rank: c_int, maxdims: c_int, coords: *mut c_int) on c => {
        let fc = comm(c)?;
        // SAFETY: the caller vouches for `maxdims` writable entries.
        ok(unsafe { ffi::MPI_Cart_coords(fc, rank, maxdims, coords) })
    }
}

mpi_fn! {
    /// The rank at `coords` in a Cartesian communicator.
    fn MPI_Cart_rank(c: c_int, coords: *const c_int, rank: *mut c_int) on c => {
        let fc = comm(c)?;
        // SAFETY: the caller vouches for the coordinates and `rank`.
        ok(unsafe { ffi::MPI_Cart_rank(fc, coords, rank) })
    }
}

mpi_fn! {
    /// The ranks `disp` steps before and after this process along `direction`
    /// (`MPI_PROC_NULL` off a non-periodic edge).
    fn MPI_Cart_shift(c: c_int, direction: c_int, disp: c_int, source: *mut c_int, dest: *mut c_int) on c => {
        let fc = comm(c)?;
        // SAFETY: the caller vouches for both outputs.
        ok(unsafe { ffi::MPI_Cart_shift(fc, direction, disp, source, dest) })
    }
}

mpi_fn! {
    /// The dimensions, periodicities and this process's coordinates.
    fn MPI_Cart_get(c: c_int, maxdims: c_int, dims: *mut c_int, periods: *mut c_int, coords: *mut c_int) on c => {
        let fc = comm(c)?;
        // SAFETY: the caller vouches for `maxdims` writable entries of each array.
        ok(unsafe { ffi::MPI_Cart_get(fc, maxdims, dims, periods, coords) })
    }
}

mpi_fn! {
    /// The number of dimensions of a Cartesian communicator.
    fn MPI_Cartdim_get(c: c_int, ndims: *mut c_int) on c => {
        let fc = comm(c)?;
        if ndims.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        ok(unsafe { ffi::MPI_Cartdim_get(fc, ndims) })
    }
}

mpi_fn! {
    /// The Cartesian communicator of the dimensions `remain_dims` keeps (collective).
    fn MPI_Cart_sub(c: c_int, remain_dims: *const c_int, out: *mut c_int) on c => {
        let fc = comm(c)?;
        if out.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let mut d = null_comm();
        // SAFETY: the caller vouches for one entry per dimension; `d` is a local.
        ok(unsafe { ffi::MPI_Cart_sub(fc, remain_dims, &mut d) })?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put_comm(out, c, d) };
        Ok(())
    }
}

mpi_fn! {
    /// The topology of `comm`: `MPI_CART`, `MPI_GRAPH`, `MPI_DIST_GRAPH` or `MPI_UNDEFINED`.
    fn MPI_Topo_test(c: c_int, status: *mut c_int) on c => {
        let fc = comm(c)?;
        if status.is_null() {
            return Err(MPI_ERR_ARG);
        }
        match crate::topologies::get(c) {
            // SAFETY: checked non-null; the caller vouches it is writable.
            Some(crate::topologies::Topology::Graph { .. }) => unsafe { status.write(crate::graph::MPI_GRAPH) },
            // SAFETY: as above.
            Some(crate::topologies::Topology::Dist { .. }) => unsafe { status.write(crate::graph::MPI_DIST_GRAPH) },
            // SAFETY: checked non-null; the caller vouches it is writable (MPICH's values).
            None => ok(unsafe { ffi::MPI_Topo_test(fc, status) })?,
        }
        Ok(())
    }
}

mpi_fn! {
    /// Splits `comm` by type: `MPI_COMM_TYPE_SHARED` gives the processes of this host, ordered
    /// by `key`; so does `MPI_COMM_TYPE_HW_GUIDED` with the hint `mpi_hw_resource_type` =
    /// `mpi_shared_memory`; `MPI_UNDEFINED`, `MPI_COMM_TYPE_HW_GUIDED` with another resource
    /// and `MPI_COMM_TYPE_HW_UNGUIDED` (no level below is known) give `MPI_COMM_NULL`.
    fn MPI_Comm_split_type(c: c_int, split_type: c_int, key: c_int, info: c_int, out: *mut c_int) on c => {
        let rc = rust_comm(c)?;
        if out.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let shmem = crate::info::value(info, "mpi_hw_resource_type").as_deref() == Some("mpi_shared_memory");
        let split_type = match split_type {
            MPI_COMM_TYPE_HW_GUIDED if shmem => MPI_COMM_TYPE_SHARED,
            MPI_COMM_TYPE_HW_GUIDED | MPI_COMM_TYPE_HW_UNGUIDED => MPI_UNDEFINED,
            t => t,
        };
        let color = if split_type == MPI_COMM_TYPE_SHARED { 0 } else { MPI_UNDEFINED };
        if let Some(h) = crate::intercomm::split(c, color, key)? {
            // SAFETY: checked non-null; the caller vouches it is writable.
            unsafe { out.write(h) };
            return Ok(());
        }
        let h = match split_type {
            MPI_UNDEFINED => {
                // Collective all the same: the others may split.
                let none = rc
                    .try_split_by_color_with_key(p2pmpi::topology::Color::undefined(), key)
                    .map_err(crate::errors::class_of_failure)?;
                debug_assert!(none.is_none());
                MPI_COMM_NULL
            }
            MPI_COMM_TYPE_SHARED => {
                let s = rc.try_split_shared(key).map_err(crate::errors::class_of_failure)?;
                let h = COMMS.insert(CommEntry { raw: s.as_raw(), rust: s });
                inherit_handler(c, h);
                h
            }
            _ => return Err(MPI_ERR_ARG),
        };
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { out.write(h) };
        Ok(())
    }
}

mpi_fn! {
    /// This process's rank in a grid of `dims` laid over `comm` (ranks kept, as
    /// `MPI_Cart_create` does): its rank if the grid holds it, else `MPI_UNDEFINED`.
    fn MPI_Cart_map(c: c_int, ndims: c_int, dims: *const c_int, _periods: *const c_int, newrank: *mut c_int) on c => {
        let rc = rust_comm(c)?;
        if ndims < 0 || (ndims > 0 && dims.is_null()) {
            return Err(MPI_ERR_DIMS);
        }
        // SAFETY: the caller vouches for `ndims` dimensions.
        let d = unsafe { std::slice::from_raw_parts(crate::nz(dims as *const std::os::raw::c_void, ndims) as *const c_int, ndims as usize) };
        if d.iter().any(|&x| x <= 0) {
            return Err(MPI_ERR_DIMS);
        }
        let cells = d.iter().try_fold(1i64, |p, &x| p.checked_mul(x as i64)).ok_or(MPI_ERR_DIMS)?;
        if cells > rc.size() as i64 {
            return Err(MPI_ERR_DIMS);
        }
        let r = if (rc.rank() as i64) < cells { rc.rank() } else { MPI_UNDEFINED };
        // SAFETY: the caller's contract.
        unsafe { crate::put(newrank, r) }
    }
}
