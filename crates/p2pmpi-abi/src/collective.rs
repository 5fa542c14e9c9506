//! Collective communication: `MPI_Barrier`, `MPI_Bcast`, `MPI_Reduce`, `MPI_Allreduce`,
//! `MPI_Scan`, `MPI_Exscan`, `MPI_Gather`, `MPI_Scatter`, `MPI_Allgather`, `MPI_Alltoall`,
//! `MPI_Reduce_scatter_block`, `MPI_Reduce_scatter`, and the local `MPI_Reduce_local`. The
//! reductions with a user operation are [`crate::user_ops`]'.
//!
//! `MPI_IN_PLACE` is honoured where the standard allows it for these functions (the roots of
//! `MPI_Reduce`, `MPI_Gather` and `MPI_Scatter`, every process of `MPI_Allreduce`,
//! `MPI_Scan`, `MPI_Exscan`, `MPI_Allgather` and `MPI_Alltoall`, by [`crate::alltoallw`]). An argument
//! the standard says is significant only at the root (the receive type of `MPI_Gather` at
//! another process, ...) may be any handle there.

use crate::consts::*;
use crate::datatypes::datatype;
use crate::datatypes::MPI_Count;
use crate::handles::comm;
use crate::intercoll;
use crate::ops::op;
use crate::user_ops::{self, user_op, Reduction};
use crate::{nz, nz_mut, ok};
use p2pmpi::collective::TryCollectives;
use p2pmpi::datatype::{DynBuffer, DynBufferMut};
use p2pmpi::ffi;
use p2pmpi::traits::*;
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
        if let Some(k) = intercoll::carrier(c)? {
            // SAFETY: the caller's contract.
            return unsafe { intercoll::bcast(&k, buf, count, dt, root, None) };
        }
        if crate::bottom::is_bottom(buf, count, dt) {
            return crate::bottom::bcast(count, dt, root, c);
        }
        let fc = comm(c)?;
        let fd = datatype(dt)?;
        crate::not_in_place(buf)?;
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Bcast(nz_mut(buf, count), count, fd, root, fc) })
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
        if let Some(k) = intercoll::carrier(c)? {
            // SAFETY: the caller's contract.
            return unsafe { intercoll::reduce(&k, sendbuf, recvbuf, count, dt, o, Some(root), None) };
        }
        if let Some(u) = user_op(o) {
            // SAFETY: the caller's contract.
            return unsafe { user_ops::reduce(Reduction::Reduce(root), sendbuf, recvbuf, count, dt, u, c) };
        }
        let fc = comm(c)?;
        let (fd, fo) = (datatype(dt)?, op(o)?);
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Reduce(nz(place(sendbuf), count), nz_mut(recvbuf, count), count, fd, fo, root, fc) })
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
        if let Some(k) = intercoll::carrier(c)? {
            // SAFETY: the caller's contract.
            return unsafe { intercoll::reduce(&k, sendbuf, recvbuf, count, dt, o, None, None) };
        }
        if let Some(u) = user_op(o) {
            // SAFETY: the caller's contract.
            return unsafe { user_ops::reduce(Reduction::Allreduce, sendbuf, recvbuf, count, dt, u, c) };
        }
        let fc = comm(c)?;
        let (fd, fo) = (datatype(dt)?, op(o)?);
        crate::not_in_place(recvbuf)?;
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Allreduce(nz(place(sendbuf), count), nz_mut(recvbuf, count), count, fd, fo, fc) })
    }
}

/// Defines the prefix reductions (each on the library's function of its name): name, which
/// ([`Reduction`]), doc.
macro_rules! prefix_reductions {
    ($($name:ident, $which:ident, $doc:literal;)*) => {$(
        mpi_fn! {
            #[doc = $doc]
            fn $name(sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, dt: c_int, o: c_int, c: c_int) on c => {
                if let Some(u) = user_op(o) {
                    // SAFETY: the caller's contract.
                    return unsafe { user_ops::reduce(Reduction::$which, sendbuf, recvbuf, count, dt, u, c) };
                }
                let fc = comm(c)?;
                let (fd, fo) = (datatype(dt)?, op(o)?);
                crate::not_in_place(recvbuf)?;
                // SAFETY: the caller's contract.
                ok(unsafe { ffi::$name(nz(place(sendbuf), count), nz_mut(recvbuf, count), count, fd, fo, fc) })
            }
        }
    )*};
}

prefix_reductions! {
    MPI_Scan, Scan, "The inclusive prefix reduction.";
    MPI_Exscan, Exscan, "The exclusive prefix reduction (rank 0's `recvbuf` is left alone).";
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
        if let Some(k) = intercoll::carrier(c)? {
            let parts = intercoll::even(&k, root, recvcount)?;
            let mine = (sendbuf, intercoll::lenient(sendcount), sendtype);
            // SAFETY: the caller's contract.
            return unsafe { intercoll::rooted(&k, true, mine, (recvbuf, &parts, recvtype), root, None) };
        }
        let fc = comm(c)?;
        let (st, rt) = (lenient(sendtype, recvtype)?, lenient(recvtype, sendtype)?);
        crate::not_in_place(recvbuf)?;
        let (s, r) = (nz(place(sendbuf), sendcount), nz_mut(recvbuf, recvcount));
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Gather(s, sendcount, st, r, recvcount, rt, root, fc) })
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
        if let Some(k) = intercoll::carrier(c)? {
            let parts = intercoll::even(&k, root, sendcount)?;
            let mine = (recvbuf as *const c_void, intercoll::lenient(recvcount), recvtype);
            // SAFETY: the caller's contract.
            return unsafe { intercoll::rooted(&k, false, mine, (sendbuf, &parts, sendtype), root, None) };
        }
        let fc = comm(c)?;
        let (st, rt) = (lenient(sendtype, recvtype)?, lenient(recvtype, sendtype)?);
        crate::not_in_place(sendbuf)?;
        let (s, r) = (nz(sendbuf, sendcount), nz_mut(place(recvbuf), recvcount));
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Scatter(s, sendcount, st, r, recvcount, rt, root, fc) })
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
        let (s, r) = (nz(place(sendbuf), sendcount), nz_mut(recvbuf, recvcount));
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Allgather(s, sendcount, st, r, recvcount, rt, fc) })
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
        if let Some(k) = intercoll::carrier(c)? {
            let s = intercoll::even(&k, MPI_ROOT, sendcount)?;
            let r = intercoll::even(&k, MPI_ROOT, recvcount)?;
            // SAFETY: the caller's contract.
            return unsafe { intercoll::all(&k, (sendbuf, &s, sendtype), (recvbuf, &r, recvtype), None) };
        }
        let fc = comm(c)?;
        if crate::is_in_place(sendbuf) {
            // SAFETY: the caller's contract.
            return unsafe { crate::alltoallw::alltoall_in_place(recvbuf, recvcount, recvtype, c) };
        }
        let (st, rt) = (datatype(sendtype)?, datatype(recvtype)?);
        crate::not_in_place(recvbuf)?;
        let (s, r) = (nz(sendbuf, sendcount), nz_mut(recvbuf, recvcount));
        // SAFETY: the caller's contract.
        ok(unsafe { ffi::MPI_Alltoall(s, sendcount, st, r, recvcount, rt, fc) })
    }
}

mpi_fn! {
    /// Combines locally: `inoutbuf = inbuf op inoutbuf`.
    fn MPI_Reduce_local(inbuf: *const c_void, inoutbuf: *mut c_void, count: c_int, dt: c_int, o: c_int)
        on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { user_ops::local_reduction(inbuf, inoutbuf, count, dt, o) }
    }
}

mpi_fn! {
    /// `MPI_Reduce_local` with a large count.
    fn MPI_Reduce_local_c(inbuf: *const c_void, inoutbuf: *mut c_void, count: MPI_Count, dt: c_int, o: c_int)
        on MPI_COMM_WORLD => {
        let count = c_int::try_from(count).map_err(|_| MPI_ERR_COUNT)?;
        // SAFETY: the caller's contract.
        unsafe { user_ops::local_reduction(inbuf, inoutbuf, count, dt, o) }
    }
}

mpi_fn! {
    /// Reduces every process's `sendbuf` (`size × recvcount` elements) with `op` and scatters
    /// the result: block `i` of `recvcount` elements to process `i`. `sendbuf` may be
    /// `MPI_IN_PLACE` (the input is then `recvbuf`).
    fn MPI_Reduce_scatter_block(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcount: c_int,
        dt: c_int,
        o: c_int,
        c: c_int,
    ) on c => {
        let rc = crate::handles::rust_comm(c)?;
        let d = crate::datatypes::datatype_ref(dt)?;
        if recvcount < 0 {
            return Err(MPI_ERR_COUNT);
        }
        crate::not_in_place(recvbuf)?;
        let total = recvcount.checked_mul(rc.size()).ok_or(MPI_ERR_COUNT)?;
        let copy;
        // SAFETY: the caller vouches for the buffers; in place, the input is a copy of
        // `recvbuf`'s `total` elements.
        let (s, mut r) = unsafe {
            let s = if crate::is_in_place(sendbuf) {
                let bytes = total as usize * crate::datatypes::stageable(dt)?;
                let mut v = vec![0u64; bytes.div_ceil(8)];
                std::ptr::copy_nonoverlapping(recvbuf as *const u8, v.as_mut_ptr() as *mut u8, bytes);
                copy = v;
                DynBuffer::from_raw(copy.as_ptr() as *const c_void, total, d)
            } else {
                DynBuffer::from_raw(nz(sendbuf, total), total, d)
            };
            (s, DynBufferMut::from_raw(nz_mut(recvbuf, recvcount), recvcount, d))
        };
        match user_op(o) {
            Some(u) => rc.try_reduce_scatter_block_into(&s, &mut r, user_ops::rust_op(u, dt)),
            None => rc.try_reduce_scatter_block_into(&s, &mut r, crate::ops::system_op(o)?),
        }
        .map_err(crate::errors::class_of_failure)
    }
}

mpi_fn! {
    /// Reduces every process's `sendbuf` (the sum of `recvcounts` elements) with `op` and
    /// scatters the result: `recvcounts[i]` elements to process `i`, in order. Done as a
    /// reduction to rank 0 and a scatter. `sendbuf` may be `MPI_IN_PLACE`.
    fn MPI_Reduce_scatter(
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        recvcounts: *const c_int,
        dt: c_int,
        o: c_int,
        c: c_int,
    ) on c => {
        let rc = crate::handles::rust_comm(c)?;
        let n = rc.size() as usize;
        if recvcounts.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: the caller vouches for one count per process.
        let counts = unsafe { std::slice::from_raw_parts(recvcounts, n) }.to_vec();
        if counts.iter().any(|&x| x < 0) {
            return Err(MPI_ERR_COUNT);
        }
        let displs: Vec<c_int> = counts.iter().scan(0, |at, &x| {
            let d = *at;
            *at += x;
            Some(d)
        }).collect();
        let total: c_int = counts.iter().sum();
        let size = crate::datatypes::stageable(dt)?;
        let me = rc.rank() as usize;
        let mut all = vec![0u64; if me == 0 { (total as usize * size).div_ceil(8) } else { 0 }];
        let input = if crate::is_in_place(sendbuf) { recvbuf as *const c_void } else { sendbuf };
        let mine = counts[me];
        // SAFETY: the caller vouches for `total` elements at the input and `recvcounts[me]`
        // writable ones at `recvbuf`; `all` holds `total` elements at rank 0.
        unsafe {
            ok(MPI_Reduce(input, all.as_mut_ptr() as *mut c_void, total, dt, o, 0, c))?;
            ok(crate::varcount::MPI_Scatterv(
                all.as_ptr() as *const c_void,
                counts.as_ptr(),
                displs.as_ptr(),
                dt,
                recvbuf,
                mine,
                dt,
                0,
                c,
            ))?;
        }
        Ok(())
    }
}
