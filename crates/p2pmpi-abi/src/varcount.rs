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
    counts: Vec<c_int>,
    displs: Vec<c_int>,
    recvtype: c_int,
    root: c_int,
    c: c_int,
) -> Result<(), c_int> {
    let (counts, displs) = (&counts[..], &displs[..]);
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
    counts: Vec<c_int>,
    displs: Vec<c_int>,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    c: c_int,
) -> Result<(), c_int> {
    let (counts, displs) = (&counts[..], &displs[..]);
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
    counts: Vec<c_int>,
    displs: Vec<c_int>,
    recvtype: c_int,
    c: c_int,
) -> Result<(), c_int> {
    let (counts, displs) = (&counts[..], &displs[..]);
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

/// The counts and displacements of one side of `MPI_Alltoallv`.
pub(crate) struct Layout {
    pub(crate) counts: Vec<c_int>,
    pub(crate) displs: Vec<c_int>,
}

/// `MPI_Alltoallv` once the counts are `int`s (`send` is `None` in place).
///
/// # Safety
/// The buffers as `MPI_Alltoallv` says.
unsafe fn alltoallv(
    sendbuf: *const c_void,
    send: Option<Layout>,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recv: Layout,
    recvtype: c_int,
    c: c_int,
) -> Result<(), c_int> {
    let (rcounts, rdispls) = (&recv.counts[..], &recv.displs[..]);
    let rc = rust_comm(c)?;
    let rt = dtref(recvtype)?;
    crate::not_in_place(recvbuf)?;
    let rspan = span(rcounts, rdispls);
    let staged;
    // SAFETY: the caller vouches for the buffers; in place, what is sent is a copy of
    // `recvbuf` with the receive counts.
    let (s, scounts, sdispls) = unsafe {
        match &send {
            None => {
                staged = stage(recvbuf, 0, rspan, recvtype)?;
                (DynBuffer::from_raw(staged.as_ptr() as *const c_void, rspan, rt), rcounts, rdispls)
            }
            Some(l) => {
                let sspan = span(&l.counts, &l.displs);
                (DynBuffer::from_raw(crate::nz(sendbuf, sspan), sspan, dtref(sendtype)?), &l.counts[..], &l.displs[..])
            }
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

/// Defines the v-variants `[gatherv, scatterv, allgatherv, alltoallv]` and their large-count
/// forms (`_c`: counts `MPI_Count`, displacements `MPI_Aint`), each run by a function of the
/// counts as `int`s (`by [...]`), with the docs given; with a last argument `request`, the
/// nonblocking forms ([`crate::ivarcount`]). On an intercommunicator they go to [`intercoll`].
macro_rules! v_forms {
    (
        [$($name:ident),*], [$($name_c:ident),*], by $by:tt, [$($doc:literal),*] $(, $request:ident)?
    ) => {
        v_forms!(@forms [$($name),*], by $by, [$(concat!($doc, ".")),*], c_int, c_int $(, $request)?);
        v_forms!(
            @forms [$($name_c),*], by $by, [$(concat!($doc, " (large counts).")),*], MPI_Count, MPI_Aint $(, $request)?
        );
    };
    (
        @forms [$gatherv:ident, $scatterv:ident, $allgatherv:ident, $alltoallv:ident],
        by [$gw:path, $sw:path, $aw:path, $vw:path],
        [$gdoc:expr, $sdoc:expr, $adoc:expr, $vdoc:expr],
        $t:ty, $d:ty $(, $request:ident)?
    ) => {
        mpi_fn! {
            #[doc = $gdoc]
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
                $($request: *mut c_int)?
            ) on c => {
                // The request to answer on an intercommunicator (none for a blocking form).
                let req = v_forms!(@req $($request)?);
                if let Some(k) = intercoll::carrier(c)? {
                    // SAFETY: the caller vouches for the arrays (at the root) and buffers.
                    return unsafe {
                        let parts = intercoll::varying(&k, Some(root), recvcounts, displs)?;
                        let mine = (sendbuf, intercoll::lenient(sendcount), sendtype);
                        intercoll::rooted(&k, true, mine, (recvbuf, &parts, recvtype), root, req)
                    };
                }
                let sendcount = c_int::try_from(sendcount).map_err(|_| MPI_ERR_COUNT)?;
                let rc = rust_comm(c)?;
                let n = if rc.rank() == root { rc.size() as usize } else { 0 };
                // SAFETY: the caller vouches for the arrays (read at the root only) and buffers.
                unsafe {
                    let (counts, displs) = (ints(recvcounts, n, true)?, ints(displs, n, false)?);
                    $gw(sendbuf, sendcount, sendtype, recvbuf, counts, displs, recvtype, root, c $(, $request)?)
                }
            }
        }

        mpi_fn! {
            #[doc = $sdoc]
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
                $($request: *mut c_int)?
            ) on c => {
                // The request to answer on an intercommunicator (none for a blocking form).
                let req = v_forms!(@req $($request)?);
                if let Some(k) = intercoll::carrier(c)? {
                    // SAFETY: the caller vouches for the arrays (at the root) and buffers.
                    return unsafe {
                        let parts = intercoll::varying(&k, Some(root), sendcounts, displs)?;
                        let mine = (recvbuf as *const c_void, intercoll::lenient(recvcount), recvtype);
                        intercoll::rooted(&k, false, mine, (sendbuf, &parts, sendtype), root, req)
                    };
                }
                let recvcount = c_int::try_from(recvcount).map_err(|_| MPI_ERR_COUNT)?;
                let rc = rust_comm(c)?;
                let n = if rc.rank() == root { rc.size() as usize } else { 0 };
                // SAFETY: the caller vouches for the arrays (read at the root only) and buffers.
                unsafe {
                    let (counts, displs) = (ints(sendcounts, n, true)?, ints(displs, n, false)?);
                    $sw(sendbuf, counts, displs, sendtype, recvbuf, recvcount, recvtype, root, c $(, $request)?)
                }
            }
        }

        mpi_fn! {
            #[doc = $adoc]
            fn $allgatherv(
                sendbuf: *const c_void,
                sendcount: $t,
                sendtype: c_int,
                recvbuf: *mut c_void,
                recvcounts: *const $t,
                displs: *const $d,
                recvtype: c_int,
                c: c_int,
                $($request: *mut c_int)?
            ) on c => {
                // The request to answer on an intercommunicator (none for a blocking form).
                let req = v_forms!(@req $($request)?);
                if let Some(k) = intercoll::carrier(c)? {
                    let mine = vec![(intercoll::lenient(sendcount), 0); k.remote];
                    // SAFETY: the caller vouches for the arrays and buffers.
                    return unsafe {
                        let parts = intercoll::varying(&k, None, recvcounts, displs)?;
                        intercoll::all(&k, (sendbuf, &mine, sendtype), (recvbuf, &parts, recvtype), req)
                    };
                }
                let sendcount = c_int::try_from(sendcount).map_err(|_| MPI_ERR_COUNT)?;
                let n = rust_comm(c)?.size() as usize;
                // SAFETY: the caller vouches for the arrays and buffers.
                unsafe {
                    let (counts, displs) = (ints(recvcounts, n, true)?, ints(displs, n, false)?);
                    $aw(sendbuf, sendcount, sendtype, recvbuf, counts, displs, recvtype, c $(, $request)?)
                }
            }
        }

        mpi_fn! {
            #[doc = $vdoc]
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
                $($request: *mut c_int)?
            ) on c => {
                // The request to answer on an intercommunicator (none for a blocking form).
                let req = v_forms!(@req $($request)?);
                if let Some(k) = intercoll::carrier(c)? {
                    // SAFETY: the caller vouches for the arrays and buffers.
                    return unsafe {
                        let s = intercoll::varying(&k, None, sendcounts, sdispls)?;
                        let r = intercoll::varying(&k, None, recvcounts, rdispls)?;
                        intercoll::all(&k, (sendbuf, &s, sendtype), (recvbuf, &r, recvtype), req)
                    };
                }
                let n = rust_comm(c)?.size() as usize;
                // SAFETY: the caller vouches for the arrays (the send ones unread in place) and
                // buffers.
                unsafe {
                    let send = if is_in_place(sendbuf) {
                        None
                    } else {
                        Some(Layout { counts: ints(sendcounts, n, true)?, displs: ints(sdispls, n, false)? })
                    };
                    let recv = Layout { counts: ints(recvcounts, n, true)?, displs: ints(rdispls, n, false)? };
                    $vw(sendbuf, send, sendtype, recvbuf, recv, recvtype, c $(, $request)?)
                }
            }
        }
    };
    (@req) => {
        None
    };
    (@req $request:ident) => {
        Some($request)
    };
}
pub(crate) use v_forms;

v_forms!(
    [MPI_Gatherv, MPI_Scatterv, MPI_Allgatherv, MPI_Alltoallv],
    [MPI_Gatherv_c, MPI_Scatterv_c, MPI_Allgatherv_c, MPI_Alltoallv_c],
    by [gatherv, scatterv, allgatherv, alltoallv],
    [
        "Gathers a count per process at the root, at displacements",
        "Scatters a count per process from the root, at displacements",
        "Gathers a count per process at every process, at displacements",
        "Sends a count to each process and receives one from each"
    ]
);
