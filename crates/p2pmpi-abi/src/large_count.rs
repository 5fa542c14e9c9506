//! The large-count (`_c`) forms of the functions of [`crate::point_to_point`],
//! [`crate::collective`], the buffer of buffered sends and [`crate::derived`]: the same calls
//! with `MPI_Count` counts. A count above `INT_MAX` is refused (`MPI_ERR_COUNT`) for now; an
//! error of the call is raised by the `int` form, whose name the message of
//! `MPI_ERRORS_ARE_FATAL` carries.

use crate::collective::*;
use crate::consts::*;
use crate::datatypes::{size_of, MPI_Aint, MPI_Count};
use crate::derived::*;
use crate::ok;
use crate::point_to_point::*;
use crate::status::MPI_Status;
use p2pmpi::traits::Communicator;
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

// ------------------------------------------------------------ the later families' `_c` forms

/// Defines the large-count form of a send or receive that takes a request.
macro_rules! request_c {
    ($name:ident, $int:path, $buf:ty) => {
        mpi_fn! {
            #[doc = concat!("`", stringify!($int), "` with a large count.")]
            fn $name(
                buf: $buf,
                count: MPI_Count,
                dt: c_int,
                peer: c_int,
                tag: c_int,
                c: c_int,
                request: *mut c_int,
            ) on c => {
                // SAFETY: the caller's contract is the `int` form's.
                ok(unsafe { $int(buf, int(count)?, dt, peer, tag, c, request) })
            }
        }
    };
}
request_c!(MPI_Send_init_c, MPI_Send_init, *const c_void);
request_c!(MPI_Ssend_init_c, MPI_Ssend_init, *const c_void);
request_c!(MPI_Rsend_init_c, MPI_Rsend_init, *const c_void);
request_c!(MPI_Bsend_init_c, MPI_Bsend_init, *const c_void);
request_c!(MPI_Recv_init_c, MPI_Recv_init, *mut c_void);
request_c!(MPI_Ibsend_c, MPI_Ibsend, *const c_void);

mpi_fn! {
    /// `MPI_Sendrecv_replace` with a large count.
    fn MPI_Sendrecv_replace_c(
        buf: *mut c_void,
        count: MPI_Count,
        dt: c_int,
        dest: c_int,
        sendtag: c_int,
        source: c_int,
        recvtag: c_int,
        c: c_int,
        st: *mut MPI_Status,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Sendrecv_replace(buf, int(count)?, dt, dest, sendtag, source, recvtag, c, st) })
    }
}

mpi_fn! {
    /// `MPI_Buffer_attach` with a large size.
    fn MPI_Buffer_attach_c(buffer: *mut c_void, size: MPI_Count) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { crate::environment::MPI_Buffer_attach(buffer, int(size)?) })
    }
}

mpi_fn! {
    /// `MPI_Buffer_detach` with a large size.
    fn MPI_Buffer_detach_c(buffer_addr: *mut c_void, size: *mut MPI_Count) on MPI_COMM_WORLD => {
        let mut n: c_int = 0;
        // SAFETY: the caller's contract is the `int` form's; `n` is a local.
        ok(unsafe { crate::environment::MPI_Buffer_detach(buffer_addr, &mut n) })?;
        // SAFETY: the caller's contract.
        unsafe { crate::put(size, n as MPI_Count) }
    }
}

mpi_fn! {
    /// `MPI_Reduce_scatter_block` with a large count.
    fn MPI_Reduce_scatter_block_c(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcount: MPI_Count,
        dt: c_int,
        o: c_int,
        c: c_int,
    ) on c => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Reduce_scatter_block(sendbuf, recvbuf, int(recvcount)?, dt, o, c) })
    }
}

/// `n` large counts at `p` as `int`s.
///
/// # Safety
/// `p` must be valid for `n` reads unless `n` is 0.
unsafe fn ints(p: *const MPI_Count, n: usize) -> Result<Vec<c_int>, c_int> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: non-null, and the caller vouches for `n` counts.
    unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|&x| int(x)).collect()
}

mpi_fn! {
    /// `MPI_Reduce_scatter` with large counts.
    fn MPI_Reduce_scatter_c(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcounts: *const MPI_Count,
        dt: c_int,
        o: c_int,
        c: c_int,
    ) on c => {
        let n = crate::handles::rust_comm(c)?.size() as usize;
        // SAFETY: the caller vouches for one count per process.
        let counts = unsafe { ints(recvcounts, n)? };
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Reduce_scatter(sendbuf, recvbuf, counts.as_ptr(), dt, o, c) })
    }
}

mpi_fn! {
    /// `MPI_Type_contiguous` with a large count.
    fn MPI_Type_contiguous_c(count: MPI_Count, oldtype: c_int, newtype: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { crate::derived::contiguous_c(count, oldtype, newtype) }
    }
}

mpi_fn! {
    /// `MPI_Type_vector` with large counts.
    fn MPI_Type_vector_c(count: MPI_Count, bl: MPI_Count, stride: MPI_Count, oldtype: c_int, newtype: *mut c_int)
        on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Type_vector(int(count)?, int(bl)?, int(stride)?, oldtype, newtype) })
    }
}

mpi_fn! {
    /// `MPI_Type_create_hvector` with large counts.
    fn MPI_Type_create_hvector_c(
        count: MPI_Count,
        bl: MPI_Count,
        stride: MPI_Count,
        oldtype: c_int,
        newtype: *mut c_int,
    ) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe { MPI_Type_create_hvector(int(count)?, int(bl)?, stride, oldtype, newtype) })
    }
}

mpi_fn! {
    /// `MPI_Type_indexed` with large counts.
    fn MPI_Type_indexed_c(
        count: MPI_Count,
        bls: *const MPI_Count,
        displs: *const MPI_Count,
        oldtype: c_int,
        newtype: *mut c_int,
    ) on MPI_COMM_WORLD => {
        let n = int(count)?;
        // SAFETY: the caller vouches for `count` entries of each array.
        let (b, d) = unsafe { (ints(bls, n.max(0) as usize)?, ints(displs, n.max(0) as usize)?) };
        // SAFETY: the arrays are locals of `n` entries.
        ok(unsafe { MPI_Type_indexed(n, b.as_ptr(), d.as_ptr(), oldtype, newtype) })
    }
}

mpi_fn! {
    /// `MPI_Type_create_hindexed` with large counts.
    fn MPI_Type_create_hindexed_c(
        count: MPI_Count,
        bls: *const MPI_Count,
        displs: *const MPI_Count,
        oldtype: c_int,
        newtype: *mut c_int,
    ) on MPI_COMM_WORLD => {
        let n = int(count)?;
        // SAFETY: the caller vouches for `count` entries of each array (displacements are
        // `MPI_Aint`s of the same size).
        let b = unsafe { ints(bls, n.max(0) as usize)? };
        // SAFETY: as above.
        ok(unsafe { MPI_Type_create_hindexed(n, b.as_ptr(), displs as *const MPI_Aint, oldtype, newtype) })
    }
}

mpi_fn! {
    /// `MPI_Type_create_indexed_block` with large counts.
    fn MPI_Type_create_indexed_block_c(
        count: MPI_Count,
        bl: MPI_Count,
        displs: *const MPI_Count,
        oldtype: c_int,
        newtype: *mut c_int,
    ) on MPI_COMM_WORLD => {
        let n = int(count)?;
        // SAFETY: the caller vouches for `count` displacements.
        let d = unsafe { ints(displs, n.max(0) as usize)? };
        // SAFETY: the array is a local of `n` entries.
        ok(unsafe { MPI_Type_create_indexed_block(n, int(bl)?, d.as_ptr(), oldtype, newtype) })
    }
}

mpi_fn! {
    /// `MPI_Type_create_hindexed_block` with large counts.
    fn MPI_Type_create_hindexed_block_c(
        count: MPI_Count,
        bl: MPI_Count,
        displs: *const MPI_Count,
        oldtype: c_int,
        newtype: *mut c_int,
    ) on MPI_COMM_WORLD => {
        let (n, b) = (int(count)?, int(bl)?);
        // SAFETY: the caller vouches for `count` displacements (`MPI_Aint`s of the same size).
        ok(unsafe { MPI_Type_create_hindexed_block(n, b, displs as *const MPI_Aint, oldtype, newtype) })
    }
}

mpi_fn! {
    /// `MPI_Type_create_struct` with large counts.
    fn MPI_Type_create_struct_c(
        count: MPI_Count,
        bls: *const MPI_Count,
        displs: *const MPI_Count,
        types: *const c_int,
        newtype: *mut c_int,
    ) on MPI_COMM_WORLD => {
        let n = int(count)?;
        // SAFETY: the caller vouches for `count` entries of each array (displacements are
        // `MPI_Aint`s of the same size).
        let b = unsafe { ints(bls, n.max(0) as usize)? };
        // SAFETY: as above.
        ok(unsafe { MPI_Type_create_struct(n, b.as_ptr(), displs as *const MPI_Aint, types, newtype) })
    }
}

mpi_fn! {
    /// `MPI_Type_create_subarray` with large counts.
    fn MPI_Type_create_subarray_c(
        ndims: c_int,
        sizes: *const MPI_Count,
        subsizes: *const MPI_Count,
        starts: *const MPI_Count,
        order: c_int,
        oldtype: c_int,
        newtype: *mut c_int,
    ) on MPI_COMM_WORLD => {
        let n = ndims.max(0) as usize;
        // SAFETY: the caller vouches for `ndims` entries of each array.
        let (a, b, s) = unsafe { (ints(sizes, n)?, ints(subsizes, n)?, ints(starts, n)?) };
        // SAFETY: the arrays are locals of `ndims` entries.
        ok(unsafe { MPI_Type_create_subarray(ndims, a.as_ptr(), b.as_ptr(), s.as_ptr(), order, oldtype, newtype) })
    }
}

mpi_fn! {
    /// `MPI_Type_get_envelope` with large counts (only a contiguous datatype of more than
    /// `INT_MAX` elements records one: the other constructors keep the `int` form's).
    fn MPI_Type_get_envelope_c(
        dt: c_int,
        ni: *mut MPI_Count,
        na: *mut MPI_Count,
        nl: *mut MPI_Count,
        nd: *mut MPI_Count,
        combiner: *mut c_int,
    ) on MPI_COMM_WORLD => {
        let (mut i, mut a, mut d) = (0, 0, 0);
        // SAFETY: locals, and the caller's contract for `combiner`.
        ok(unsafe { MPI_Type_get_envelope(dt, &mut i, &mut a, &mut d, combiner) })?;
        // SAFETY: the caller's contract.
        unsafe {
            crate::put(ni, i as MPI_Count)?;
            crate::put(na, a as MPI_Count)?;
            crate::put(nl, crate::derived::large_counts(dt).len() as MPI_Count)?;
            crate::put(nd, d as MPI_Count)
        }
    }
}

mpi_fn! {
    /// `MPI_Type_get_contents` with large counts.
    fn MPI_Type_get_contents_c(
        dt: c_int,
        max_integers: MPI_Count,
        max_addresses: MPI_Count,
        max_large_counts: MPI_Count,
        max_datatypes: MPI_Count,
        integers: *mut c_int,
        addresses: *mut MPI_Aint,
        large_counts: *mut MPI_Count,
        datatypes: *mut c_int,
    ) on MPI_COMM_WORLD => {
        let clamp = |n: MPI_Count| c_int::try_from(n).unwrap_or(c_int::MAX);
        let counts = crate::derived::large_counts(dt);
        if !counts.is_empty() {
            if (counts.len() as MPI_Count) > max_large_counts || large_counts.is_null() {
                return Err(MPI_ERR_ARG);
            }
            // SAFETY: the caller vouches for `max_large_counts` entries, checked above.
            unsafe { std::ptr::copy_nonoverlapping(counts.as_ptr(), large_counts, counts.len()) };
        }
        // SAFETY: the caller's contract is the `int` form's.
        ok(unsafe {
            MPI_Type_get_contents(
                dt,
                clamp(max_integers),
                clamp(max_addresses),
                clamp(max_datatypes),
                integers,
                addresses,
                datatypes,
            )
        })
    }
}
