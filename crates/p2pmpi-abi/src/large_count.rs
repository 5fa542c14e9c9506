//! The large-count (`_c`) forms of the functions of [`crate::point_to_point`] and
//! [`crate::collective`]: the same calls with `MPI_Count` counts. A count above `INT_MAX` is
//! refused (`MPI_ERR_COUNT`) for now; an error of the call is raised by the `int` form,
//! whose name the message of `MPI_ERRORS_ARE_FATAL` carries.

use crate::collective::*;
use crate::consts::*;
use crate::datatypes::{size_of, MPI_Count};
use crate::ok;
use crate::point_to_point::*;
use crate::status::MPI_Status;
use std::os::raw::{c_int, c_void};

/// A large count as an `int` count.
fn int(n: MPI_Count) -> Result<c_int, c_int> {
    c_int::try_from(n).map_err(|_| MPI_ERR_COUNT)
}

mpi_fn! {
    /// `MPI_Send` with large counts.
    fn MPI_Send_c(buf: *const c_void, count: MPI_Count, dt: c_int, dest: c_int, tag: c_int, c: c_int) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Send(buf, int(count)?, dt, dest, tag, c) })
    }
}

mpi_fn! {
    /// `MPI_Ssend` with large counts.
    fn MPI_Ssend_c(buf: *const c_void, count: MPI_Count, dt: c_int, dest: c_int, tag: c_int, c: c_int) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Ssend(buf, int(count)?, dt, dest, tag, c) })
    }
}

mpi_fn! {
    /// `MPI_Rsend` with large counts.
    fn MPI_Rsend_c(buf: *const c_void, count: MPI_Count, dt: c_int, dest: c_int, tag: c_int, c: c_int) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Rsend(buf, int(count)?, dt, dest, tag, c) })
    }
}

mpi_fn! {
    /// `MPI_Isend` with large counts.
    fn MPI_Isend_c(
        buf: *const c_void,
        count: MPI_Count,
        dt: c_int,
        dest: c_int,
        tag: c_int,
        c: c_int,
        request: *mut c_int,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Isend(buf, int(count)?, dt, dest, tag, c, request) })
    }
}

mpi_fn! {
    /// `MPI_Issend` with large counts.
    fn MPI_Issend_c(
        buf: *const c_void,
        count: MPI_Count,
        dt: c_int,
        dest: c_int,
        tag: c_int,
        c: c_int,
        request: *mut c_int,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Issend(buf, int(count)?, dt, dest, tag, c, request) })
    }
}

mpi_fn! {
    /// `MPI_Irsend` with large counts.
    fn MPI_Irsend_c(
        buf: *const c_void,
        count: MPI_Count,
        dt: c_int,
        dest: c_int,
        tag: c_int,
        c: c_int,
        request: *mut c_int,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Irsend(buf, int(count)?, dt, dest, tag, c, request) })
    }
}

mpi_fn! {
    /// `MPI_Recv` with large counts.
    fn MPI_Recv_c(
        buf: *mut c_void,
        count: MPI_Count,
        dt: c_int,
        source: c_int,
        tag: c_int,
        c: c_int,
        st: *mut MPI_Status,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Recv(buf, int(count)?, dt, source, tag, c, st) })
    }
}

mpi_fn! {
    /// `MPI_Irecv` with large counts.
    fn MPI_Irecv_c(
        buf: *mut c_void,
        count: MPI_Count,
        dt: c_int,
        source: c_int,
        tag: c_int,
        c: c_int,
        request: *mut c_int,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Irecv(buf, int(count)?, dt, source, tag, c, request) })
    }
}

mpi_fn! {
    /// `MPI_Sendrecv` with large counts.
    fn MPI_Sendrecv_c(
        sendbuf: *const c_void,
        sendcount: MPI_Count,
        sendtype: c_int,
        dest: c_int,
        sendtag: c_int,
        recvbuf: *mut c_void,
        recvcount: MPI_Count,
        recvtype: c_int,
        source: c_int,
        recvtag: c_int,
        c: c_int,
        st: *mut MPI_Status,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe {
            MPI_Sendrecv(
                sendbuf,
                int(sendcount)?,
                sendtype,
                dest,
                sendtag,
                recvbuf,
                int(recvcount)?,
                recvtype,
                source,
                recvtag,
                c,
                st,
            )
        })
    }
}

mpi_fn! {
    /// `MPI_Bcast` with large counts.
    fn MPI_Bcast_c(buf: *mut c_void, count: MPI_Count, dt: c_int, root: c_int, c: c_int) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Bcast(buf, int(count)?, dt, root, c) })
    }
}

mpi_fn! {
    /// `MPI_Reduce` with large counts.
    fn MPI_Reduce_c(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: MPI_Count,
        dt: c_int,
        o: c_int,
        root: c_int,
        c: c_int,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Reduce(sendbuf, recvbuf, int(count)?, dt, o, root, c) })
    }
}

mpi_fn! {
    /// `MPI_Allreduce` with large counts.
    fn MPI_Allreduce_c(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: MPI_Count,
        dt: c_int,
        o: c_int,
        c: c_int,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Allreduce(sendbuf, recvbuf, int(count)?, dt, o, c) })
    }
}

mpi_fn! {
    /// `MPI_Scan` with large counts.
    fn MPI_Scan_c(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: MPI_Count,
        dt: c_int,
        o: c_int,
        c: c_int,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Scan(sendbuf, recvbuf, int(count)?, dt, o, c) })
    }
}

mpi_fn! {
    /// `MPI_Exscan` with large counts.
    fn MPI_Exscan_c(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: MPI_Count,
        dt: c_int,
        o: c_int,
        c: c_int,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Exscan(sendbuf, recvbuf, int(count)?, dt, o, c) })
    }
}

mpi_fn! {
    /// `MPI_Gather` with large counts.
    fn MPI_Gather_c(
        sendbuf: *const c_void,
        sendcount: MPI_Count,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: MPI_Count,
        recvtype: c_int,
        root: c_int,
        c: c_int,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Gather(sendbuf, int(sendcount)?, sendtype, recvbuf, int(recvcount)?, recvtype, root, c) })
    }
}

mpi_fn! {
    /// `MPI_Scatter` with large counts.
    fn MPI_Scatter_c(
        sendbuf: *const c_void,
        sendcount: MPI_Count,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: MPI_Count,
        recvtype: c_int,
        root: c_int,
        c: c_int,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Scatter(sendbuf, int(sendcount)?, sendtype, recvbuf, int(recvcount)?, recvtype, root, c) })
    }
}

mpi_fn! {
    /// `MPI_Allgather` with large counts.
    fn MPI_Allgather_c(
        sendbuf: *const c_void,
        sendcount: MPI_Count,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: MPI_Count,
        recvtype: c_int,
        c: c_int,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Allgather(sendbuf, int(sendcount)?, sendtype, recvbuf, int(recvcount)?, recvtype, c) })
    }
}

mpi_fn! {
    /// `MPI_Alltoall` with large counts.
    fn MPI_Alltoall_c(
        sendbuf: *const c_void,
        sendcount: MPI_Count,
        sendtype: c_int,
        recvbuf: *mut c_void,
        recvcount: MPI_Count,
        recvtype: c_int,
        c: c_int,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Alltoall(sendbuf, int(sendcount)?, sendtype, recvbuf, int(recvcount)?, recvtype, c) })
    }
}

mpi_fn! {
    /// `MPI_Get_count` with a large count.
    fn MPI_Get_count_c(st: *const MPI_Status, dt: c_int, count: *mut MPI_Count) on MPI_COMM_WORLD => {
        let size = size_of(dt)?;
        if st.is_null() || count.is_null() || st as usize == MPI_STATUS_IGNORE {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked to be a real pointer; the caller vouches it is readable, and `count`
        // writable.
        let st = unsafe { st.read() };
        let bytes = st.bytes();
        let n = match size {
            0 => 0,
            s if bytes % s as u64 != 0 => MPI_UNDEFINED as MPI_Count,
            s => (bytes / s as u64) as MPI_Count,
        };
        // SAFETY: as above.
        unsafe { count.write(n) };
        Ok(())
    }
}
