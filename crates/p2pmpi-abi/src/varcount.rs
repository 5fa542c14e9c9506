//! The collectives with a count per process (v-variants): `MPI_Gatherv`, `MPI_Scatterv`,
//! `MPI_Allgatherv`, `MPI_Alltoallv` and their large-count (`_c`) forms, on the Rust API of
//! `p2pmpi` (its `*_varcount_*` collectives), with `MPI_IN_PLACE` (the root's part of
//! `MPI_Gatherv` and `MPI_Scatterv`, every process's part of `MPI_Allgatherv`, the whole
//! `recvbuf` of `MPI_Alltoallv`).
//!
//! A failed communication stops the job (the Rust API's collectives have no error return
//! here); wrong arguments answer their class.

use crate::consts::*;
use crate::datatypes::{datatype_ref as dtref, stageable, MPI_Aint, MPI_Count};
use crate::handles::rust_comm;
use crate::intercoll;
use crate::ints;
use crate::is_in_place;
use p2pmpi::collective::{TryCollectives, TryRoot};
use p2pmpi::datatype::{DynBuffer, DynBufferMut, Partition, PartitionMut};
use p2pmpi::traits::*;
use std::os::raw::{c_int, c_void};

/// The number of elements a buffer with these parts spans.
pub(crate) fn span(counts: &[c_int], displs: &[c_int]) -> c_int {
    counts.iter().zip(displs).map(|(&c, &d)| c.saturating_add(d)).max().unwrap_or(0)
}

/// A copy of `count` elements of `dt` at element `at` of `buf` (an `MPI_IN_PLACE` part, sent
/// from the copy since the library's buffers may not overlap). Kept in `u64`s: aligned for
/// every predefined type.
///
/// # Safety
/// `buf` must hold the part.
unsafe fn stage(buf: *const c_void, at: c_int, count: c_int, dt: c_int) -> Result<Vec<u64>, c_int> {
    let size = stageable(dt)?;
    let bytes = count as usize * size;
    let mut v = vec![0u64; bytes.div_ceil(8)];
    if bytes > 0 {
        // SAFETY: the caller vouches for the part; `v` has room for `bytes` and is distinct.
        unsafe {
            std::ptr::copy_nonoverlapping((buf as *const u8).add(at as usize * size), v.as_mut_ptr() as *mut u8, bytes)
        };
    }
    Ok(v)
}

/// The rank of this process and the size of `comm`, and whether `root` is a rank of it.
fn place(c: &impl Communicator, root: c_int) -> Result<(c_int, usize), c_int> {
    let (me, n) = (c.rank(), c.size());
    if !(0..n).contains(&root) {
        return Err(MPI_ERR_ROOT);
    }
    Ok((me, n as usize))
}

/// `MPI_Gatherv` once the counts are `int`s.
///
/// # Safety
/// The buffers as `MPI_Gatherv` says.
#[allow(clippy::too_many_arguments)]
unsafe fn gatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    counts: &[c_int],
    displs: &[c_int],
    recvtype: c_int,
    root: c_int,
    c: c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    let (me, _) = place(&rc, root)?;
    let p = rc.process_at_rank(root);
    if me != root {
        crate::not_in_place(sendbuf)?;
        // SAFETY: the caller vouches for `sendcount` elements at `sendbuf`.
        let s = unsafe { DynBuffer::from_raw(crate::nz(sendbuf, sendcount), sendcount, dtref(sendtype)?) };
        p.try_gather_into(&s).map_err(crate::errors::class_of_failure)?;
        return Ok(());
    }
    let rt = dtref(recvtype)?;
    crate::not_in_place(recvbuf)?;
    let staged;
    // SAFETY: the caller vouches for the buffers; an in-place part is copied first.
    let s = unsafe {
        if is_in_place(sendbuf) {
            staged = stage(recvbuf, displs[me as usize], counts[me as usize], recvtype)?;
            DynBuffer::from_raw(staged.as_ptr() as *const c_void, counts[me as usize], rt)
        } else {
            DynBuffer::from_raw(crate::nz(sendbuf, sendcount), sendcount, dtref(sendtype)?)
        }
    };
    // SAFETY: the root's `recvbuf` spans every part, apart from `sendbuf`.
    let mut r =
        unsafe { DynBufferMut::from_raw(crate::nz_mut(recvbuf, span(counts, displs)), span(counts, displs), rt) };
    p.try_gather_varcount_into_root(&s, &mut PartitionMut::new(&mut r, counts, displs))
        .map_err(crate::errors::class_of_failure)?;
    Ok(())
}

/// `MPI_Scatterv` once the counts are `int`s.
///
/// # Safety
/// The buffers as `MPI_Scatterv` says.
#[allow(clippy::too_many_arguments)]
unsafe fn scatterv(
    sendbuf: *const c_void,
    counts: &[c_int],
    displs: &[c_int],
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    c: c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    let (me, _) = place(&rc, root)?;
    let p = rc.process_at_rank(root);
    if me != root {
        crate::not_in_place(recvbuf)?;
        // SAFETY: the caller vouches for `recvcount` writable elements at `recvbuf`.
        let mut r = unsafe { DynBufferMut::from_raw(crate::nz_mut(recvbuf, recvcount), recvcount, dtref(recvtype)?) };
        p.try_scatter_into(&mut r).map_err(crate::errors::class_of_failure)?;
        return Ok(());
    }
    let st = dtref(sendtype)?;
    crate::not_in_place(sendbuf)?;
    // SAFETY: the root's `sendbuf` spans every part.
    let s = unsafe { DynBuffer::from_raw(crate::nz(sendbuf, span(counts, displs)), span(counts, displs), st) };
    // In place, the root's part stays where it is: it is received into a scratch buffer.
    let mut scratch;
    // SAFETY: the caller vouches for `recvbuf`, apart from `sendbuf`.
    let mut r = unsafe {
        if is_in_place(recvbuf) {
            scratch = stage(sendbuf, displs[me as usize], counts[me as usize], sendtype)?;
            DynBufferMut::from_raw(scratch.as_mut_ptr() as *mut c_void, counts[me as usize], st)
        } else {
            DynBufferMut::from_raw(crate::nz_mut(recvbuf, recvcount), recvcount, dtref(recvtype)?)
        }
    };
    p.try_scatter_varcount_into_root(&Partition::new(&s, counts, displs), &mut r)
        .map_err(crate::errors::class_of_failure)?;
    Ok(())
}

/// `MPI_Allgatherv` once the counts are `int`s.
///
/// # Safety
/// The buffers as `MPI_Allgatherv` says.
#[allow(clippy::too_many_arguments)]
unsafe fn allgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    counts: &[c_int],
    displs: &[c_int],
    recvtype: c_int,
    c: c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    let me = rc.rank() as usize;
    let rt = dtref(recvtype)?;
    crate::not_in_place(recvbuf)?;
    let staged;
    // SAFETY: the caller vouches for the buffers; an in-place part is copied first.
    let s = unsafe {
        if is_in_place(sendbuf) {
            staged = stage(recvbuf, displs[me], counts[me], recvtype)?;
            DynBuffer::from_raw(staged.as_ptr() as *const c_void, counts[me], rt)
        } else {
            DynBuffer::from_raw(crate::nz(sendbuf, sendcount), sendcount, dtref(sendtype)?)
        }
    };
    // SAFETY: `recvbuf` spans every part, apart from `sendbuf`.
    let mut r =
        unsafe { DynBufferMut::from_raw(crate::nz_mut(recvbuf, span(counts, displs)), span(counts, displs), rt) };
    rc.try_all_gather_varcount_into(&s, &mut PartitionMut::new(&mut r, counts, displs))
        .map_err(crate::errors::class_of_failure)?;
    Ok(())
}

/// `MPI_Alltoallv` once the counts are `int`s.
///
/// # Safety
/// The buffers as `MPI_Alltoallv` says.
#[allow(clippy::too_many_arguments)]
unsafe fn alltoallv(
    sendbuf: *const c_void,
    scounts: &[c_int],
    sdispls: &[c_int],
    sendtype: c_int,
    recvbuf: *mut c_void,
    rcounts: &[c_int],
    rdispls: &[c_int],
    recvtype: c_int,
    c: c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    let rt = dtref(recvtype)?;
    crate::not_in_place(recvbuf)?;
    let rspan = span(rcounts, rdispls);
    let staged;
    // SAFETY: the caller vouches for the buffers; in place, what is sent is a copy of
    // `recvbuf` with the receive counts.
    let (s, scounts, sdispls) = unsafe {
        if is_in_place(sendbuf) {
            staged = stage(recvbuf, 0, rspan, recvtype)?;
            (DynBuffer::from_raw(staged.as_ptr() as *const c_void, rspan, rt), rcounts, rdispls)
        } else {
            (
                DynBuffer::from_raw(
                    crate::nz(sendbuf, span(scounts, sdispls)),
                    span(scounts, sdispls),
                    dtref(sendtype)?,
                ),
                scounts,
                sdispls,
            )
        }
    };
    // SAFETY: `recvbuf` spans every part, apart from `sendbuf`.
    let mut r = unsafe { DynBufferMut::from_raw(crate::nz_mut(recvbuf, rspan), rspan, rt) };
    rc.try_all_to_all_varcount_into(
        &Partition::new(&s, scounts, sdispls),
        &mut PartitionMut::new(&mut r, rcounts, rdispls),
    )
    .map_err(crate::errors::class_of_failure)?;
    Ok(())
}

/// The size of `comm` (for the length of the count arrays).
pub(crate) fn size(c: c_int) -> Result<usize, c_int> {
    Ok(rust_comm(c)?.size() as usize)
}

/// Whether this process is `root` of `comm` (the count arrays of the rooted v-variants are
/// read at the root only).
pub(crate) fn is_root(c: c_int, root: c_int) -> Result<bool, c_int> {
    Ok(rust_comm(c)?.rank() == root)
}

/// Defines the `int` and the large-count forms of the v-variants: `$t` is the type of their
/// counts and `$d` that of their displacements.
macro_rules! varcount_family {
    ($gatherv:ident, $scatterv:ident, $allgatherv:ident, $alltoallv:ident, $t:ty, $d:ty, $what:literal) => {
        mpi_fn! {
            #[doc = concat!("Gathers a count per process at the root, at displacements (", $what, ").")]
            fn $gatherv(
                sendbuf: *const c_void,
                sendcount: $t,
                sendtype: c_int,
                recvbuf: *mut c_void,
                recvcounts: *const $t,
                displs: *const $d,
                recvtype: c_int,
                root: c_int,
                c: c_int,
            ) on c => {
                if let Some(k) = intercoll::carrier(c)? {
                    // SAFETY: the caller vouches for the arrays (at the root) and buffers.
                    return unsafe {
                        let parts = intercoll::varying(&k, Some(root), recvcounts, displs)?;
                        let mine = (sendbuf, intercoll::lenient(sendcount), sendtype);
                        intercoll::rooted(&k, true, mine, (recvbuf, &parts, recvtype), root, None)
                    };
                }
                let sendcount = c_int::try_from(sendcount).map_err(|_| MPI_ERR_COUNT)?;
                let n = if is_root(c, root)? { size(c)? } else { 0 };
                // SAFETY: the caller vouches for the arrays (read at the root only) and buffers.
                unsafe {
                    let (counts, displs) = (ints(recvcounts, n, true)?, ints(displs, n, false)?);
                    gatherv(sendbuf, sendcount, sendtype, recvbuf, &counts, &displs, recvtype, root, c)
                }
            }
        }

        mpi_fn! {
            #[doc = concat!("Scatters a count per process from the root, at displacements (", $what, ").")]
            fn $scatterv(
                sendbuf: *const c_void,
                sendcounts: *const $t,
                displs: *const $d,
                sendtype: c_int,
                recvbuf: *mut c_void,
                recvcount: $t,
                recvtype: c_int,
                root: c_int,
                c: c_int,
            ) on c => {
                if let Some(k) = intercoll::carrier(c)? {
                    // SAFETY: the caller vouches for the arrays (at the root) and buffers.
                    return unsafe {
                        let parts = intercoll::varying(&k, Some(root), sendcounts, displs)?;
                        let mine = (recvbuf as *const c_void, intercoll::lenient(recvcount), recvtype);
                        intercoll::rooted(&k, false, mine, (sendbuf, &parts, sendtype), root, None)
                    };
                }
                let recvcount = c_int::try_from(recvcount).map_err(|_| MPI_ERR_COUNT)?;
                let n = if is_root(c, root)? { size(c)? } else { 0 };
                // SAFETY: the caller vouches for the arrays (read at the root only) and buffers.
                unsafe {
                    let (counts, displs) = (ints(sendcounts, n, true)?, ints(displs, n, false)?);
                    scatterv(sendbuf, &counts, &displs, sendtype, recvbuf, recvcount, recvtype, root, c)
                }
            }
        }

        mpi_fn! {
            #[doc = concat!("Gathers a count per process at every process, at displacements (", $what, ").")]
            fn $allgatherv(
                sendbuf: *const c_void,
                sendcount: $t,
                sendtype: c_int,
                recvbuf: *mut c_void,
                recvcounts: *const $t,
                displs: *const $d,
                recvtype: c_int,
                c: c_int,
            ) on c => {
                if let Some(k) = intercoll::carrier(c)? {
                    let mine = vec![(intercoll::lenient(sendcount), 0); k.remote];
                    // SAFETY: the caller vouches for the arrays and buffers.
                    return unsafe {
                        let parts = intercoll::varying(&k, None, recvcounts, displs)?;
                        intercoll::all(&k, (sendbuf, &mine, sendtype), (recvbuf, &parts, recvtype), None)
                    };
                }
                let sendcount = c_int::try_from(sendcount).map_err(|_| MPI_ERR_COUNT)?;
                let n = size(c)?;
                // SAFETY: the caller vouches for the arrays and buffers.
                unsafe {
                    let (counts, displs) = (ints(recvcounts, n, true)?, ints(displs, n, false)?);
                    allgatherv(sendbuf, sendcount, sendtype, recvbuf, &counts, &displs, recvtype, c)
                }
            }
        }

        mpi_fn! {
            #[doc = concat!("Sends a count to each process and receives one from each (", $what, ").")]
            fn $alltoallv(
                sendbuf: *const c_void,
                sendcounts: *const $t,
                sdispls: *const $d,
                sendtype: c_int,
                recvbuf: *mut c_void,
                recvcounts: *const $t,
                rdispls: *const $d,
                recvtype: c_int,
                c: c_int,
            ) on c => {
                if let Some(k) = intercoll::carrier(c)? {
                    // SAFETY: the caller vouches for the arrays and buffers.
                    return unsafe {
                        let s = intercoll::varying(&k, None, sendcounts, sdispls)?;
                        let r = intercoll::varying(&k, None, recvcounts, rdispls)?;
                        intercoll::all(&k, (sendbuf, &s, sendtype), (recvbuf, &r, recvtype), None)
                    };
                }
                let n = size(c)?;
                let m = if is_in_place(sendbuf) { 0 } else { n };
                // SAFETY: the caller vouches for the arrays (the send ones unread in place) and
                // buffers.
                unsafe {
                    let (sc, sd) = (ints(sendcounts, m, true)?, ints(sdispls, m, false)?);
                    let (rcn, rd) = (ints(recvcounts, n, true)?, ints(rdispls, n, false)?);
                    alltoallv(sendbuf, &sc, &sd, sendtype, recvbuf, &rcn, &rd, recvtype, c)
                }
            }
        }
    };
}

varcount_family!(MPI_Gatherv, MPI_Scatterv, MPI_Allgatherv, MPI_Alltoallv, c_int, c_int, "int counts");
varcount_family!(MPI_Gatherv_c, MPI_Scatterv_c, MPI_Allgatherv_c, MPI_Alltoallv_c, MPI_Count, MPI_Aint, "large counts");
