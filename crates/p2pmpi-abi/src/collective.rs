//! Collective communication: `MPI_Barrier`, `MPI_Bcast`, `MPI_Reduce`, `MPI_Allreduce`,
//! `MPI_Scan`, `MPI_Exscan`, `MPI_Gather`, `MPI_Scatter`, `MPI_Allgather`, `MPI_Alltoall`.
//!
//! `MPI_IN_PLACE` is honoured where the standard allows it for these functions (the roots of
//! `MPI_Reduce`, `MPI_Gather` and `MPI_Scatter`, every process of `MPI_Allreduce`,
//! `MPI_Scan`, `MPI_Exscan` and `MPI_Allgather`), not yet for `MPI_Alltoall`. An argument
//! the standard says is significant only at the root (the receive type of `MPI_Gather` at
//! another process, ...) may be any handle there.

use crate::consts::*;
use crate::datatypes::datatype;
use crate::handles::comm;
use crate::ok;
use crate::ops::op;
use p2pmpi::ffi;
use std::os::raw::{c_int, c_void};

/// A buffer argument for the library: MPICH's `MPI_IN_PLACE` becomes the library's.
#[inline]
fn place<T>(p: *const T) -> *mut c_void {
    if crate::is_in_place(p) {
        // SAFETY: the predefined names are initialized statics that nothing writes.
        unsafe { ffi::RSMPI_IN_PLACE }
    } else {
        p as *mut c_void
    }
}

/// The datatype of an argument significant only at some processes: `h`'s, or where it is no
/// datatype (the argument is ignored here), `other`'s.
fn lenient(h: c_int, other: c_int) -> Result<ffi::MPI_Datatype, c_int> {
    datatype(h).or_else(|_| datatype(other))
}

mpi_fn! {
    /// Blocks until every process of `comm` called it.
    fn MPI_Barrier(c: c_int) on c => {
        let fc = comm(c)?;
        // SAFETY: no pointer is involved.
        ok(unsafe { ffi::MPI_Barrier(fc) })
    }
}

mpi_fn! {
    /// Broadcasts `count` elements of `datatype` from `root`.
    fn MPI_Bcast(buf: *mut c_void, count: c_int, dt: c_int, root: c_int, c: c_int) on c => {
        let fc = comm(c)?;
        let fd = datatype(dt)?;
        crate::not_in_place(buf)?;
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Bcast(buf, count, fd, root, fc) })
    }
}

mpi_fn! {
    /// Reduces every process's `sendbuf` with `op` into `recvbuf` at `root`.
    fn MPI_Reduce(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        dt: c_int,
        o: c_int,
        root: c_int,
        c: c_int,
    )
        on c => {
        let fc = comm(c)?;
        let (fd, fo) = (datatype(dt)?, op(o)?);
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Reduce(place(sendbuf), recvbuf, count, fd, fo, root, fc) })
    }
}

mpi_fn! {
    /// Reduces every process's `sendbuf` with `op` into every process's `recvbuf`.
    fn MPI_Allreduce(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        dt: c_int,
        o: c_int,
        c: c_int,
    ) on c => {
        let fc = comm(c)?;
        let (fd, fo) = (datatype(dt)?, op(o)?);
        crate::not_in_place(recvbuf)?;
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Allreduce(place(sendbuf), recvbuf, count, fd, fo, fc) })
    }
}

mpi_fn! {
    /// The inclusive prefix reduction.
    fn MPI_Scan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, dt: c_int, o: c_int, c: c_int) on c => {
        let fc = comm(c)?;
        let (fd, fo) = (datatype(dt)?, op(o)?);
        crate::not_in_place(recvbuf)?;
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Scan(place(sendbuf), recvbuf, count, fd, fo, fc) })
    }
}

mpi_fn! {
    /// The exclusive prefix reduction (rank 0's `recvbuf` is left alone).
    fn MPI_Exscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, dt: c_int, o: c_int, c: c_int) on c => {
        let fc = comm(c)?;
        let (fd, fo) = (datatype(dt)?, op(o)?);
        crate::not_in_place(recvbuf)?;
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Exscan(place(sendbuf), recvbuf, count, fd, fo, fc) })
    }
}

mpi_fn! {
    /// Gathers every process's `sendbuf` into `recvbuf` at `root`, in rank order.
    fn MPI_Gather(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        root: c_int,
        c: c_int,
    ) on c => {
        let fc = comm(c)?;
        let (st, rt) = (lenient(sendtype, recvtype)?, lenient(recvtype, sendtype)?);
        crate::not_in_place(recvbuf)?;
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Gather(place(sendbuf), sendcount, st, recvbuf, recvcount, rt, root, fc) })
    }
}

mpi_fn! {
    /// Scatters `root`'s `sendbuf` to every process's `recvbuf`, in rank order.
    fn MPI_Scatter(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        root: c_int,
        c: c_int,
    ) on c => {
        let fc = comm(c)?;
        let (st, rt) = (lenient(sendtype, recvtype)?, lenient(recvtype, sendtype)?);
        crate::not_in_place(sendbuf)?;
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Scatter(sendbuf, sendcount, st, place(recvbuf), recvcount, rt, root, fc) })
    }
}

mpi_fn! {
    /// Gathers every process's `sendbuf` into every process's `recvbuf`, in rank order.
    fn MPI_Allgather(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        c: c_int,
    ) on c => {
        let fc = comm(c)?;
        let (st, rt) = (lenient(sendtype, recvtype)?, datatype(recvtype)?);
        crate::not_in_place(recvbuf)?;
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Allgather(place(sendbuf), sendcount, st, recvbuf, recvcount, rt, fc) })
    }
}

mpi_fn! {
    /// Sends block `i` of `sendbuf` to process `i` and receives its block `i` into block
    /// `i` of `recvbuf`.
    fn MPI_Alltoall(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        c: c_int,
    ) on c => {
        let fc = comm(c)?;
        let (st, rt) = (datatype(sendtype)?, datatype(recvtype)?);
        if crate::is_in_place(sendbuf) {
            return Err(MPI_ERR_UNSUPPORTED_OPERATION);
        }
        crate::not_in_place(recvbuf)?;
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Alltoall(sendbuf, sendcount, st, recvbuf, recvcount, rt, fc) })
    }
}
