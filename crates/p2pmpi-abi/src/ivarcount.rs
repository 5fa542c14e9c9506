//! The nonblocking collectives with a count per process: `MPI_Igatherv`, `MPI_Iscatterv`,
//! `MPI_Iallgatherv`, `MPI_Ialltoallv` and their large-count (`_c`) forms, on the Rust API's
//! immediate v-variants in its static scope. As in [`crate::immediate`], the request keeps
//! the buffers' descriptions, the counts and displacements (copied) and the copy of an
//! `MPI_IN_PLACE` part until it completes; `MPI_IN_PLACE` works as in the blocking forms
//! ([`crate::varcount`]).

use crate::consts::*;
use crate::datatypes::{datatype_ref, stageable, MPI_Aint, MPI_Count};
use crate::handles::rust_comm;
use crate::immediate::{started, Kept};
use crate::is_in_place;
use crate::varcount::{ints, is_root, size, span};
use p2pmpi::datatype::{Partition, PartitionMut};
use p2pmpi::request::StaticScope;
use p2pmpi::traits::*;
use std::os::raw::{c_int, c_void};

/// Checks the request argument and a count.
fn check(request: *mut c_int, count: c_int) -> Result<(), c_int> {
    if request.is_null() {
        return Err(MPI_ERR_ARG);
    }
    if count < 0 {
        return Err(MPI_ERR_COUNT);
    }
    Ok(())
}

/// `MPI_Igatherv` once the counts are `int`s.
///
/// # Safety
/// The buffers as `MPI_Igatherv` says, valid until the request completes.
#[allow(clippy::too_many_arguments)]
unsafe fn igatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    (counts, displs): (Vec<c_int>, Vec<c_int>),
    recvtype: c_int,
    root: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    check(request, sendcount)?;
    let (me, n) = (rc.rank(), rc.size());
    if !(0..n).contains(&root) {
        return Err(MPI_ERR_ROOT);
    }
    let p = rc.process_at_rank(root);
    let mut kept = Kept::default();
    if me != root {
        crate::not_in_place(sendbuf)?;
        // SAFETY: the caller's contract.
        let s = unsafe { kept.input(sendbuf, sendcount, sendtype, std::ptr::null(), 0)? };
        let r = p.immediate_gather_varcount_into(StaticScope, s);
        // SAFETY: checked non-null; the caller vouches it is writable.
        return unsafe { started(r, kept, request) };
    }
    crate::not_in_place(recvbuf)?;
    let m = me as usize;
    // SAFETY: the caller's contract; in place, the root's part is a copy of its block.
    let s = unsafe {
        if is_in_place(sendbuf) {
            kept.input(sendbuf, counts[m], recvtype, recvbuf, displs[m])?
        } else {
            kept.input(sendbuf, sendcount, sendtype, std::ptr::null(), 0)?
        }
    };
    // SAFETY: the root's `recvbuf` spans every part.
    let b = unsafe { kept.output(recvbuf, span(&counts, &displs), datatype_ref(recvtype)?) };
    let part = kept.hold(PartitionMut::new(b, counts, displs));
    let r = p.immediate_gather_varcount_into_root(StaticScope, s, part);
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { started(r, kept, request) }
}

/// `MPI_Iscatterv` once the counts are `int`s.
///
/// # Safety
/// The buffers as `MPI_Iscatterv` says, valid until the request completes.
#[allow(clippy::too_many_arguments)]
unsafe fn iscatterv(
    sendbuf: *const c_void,
    (counts, displs): (Vec<c_int>, Vec<c_int>),
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    check(request, recvcount)?;
    let (me, n) = (rc.rank(), rc.size());
    if !(0..n).contains(&root) {
        return Err(MPI_ERR_ROOT);
    }
    let p = rc.process_at_rank(root);
    let mut kept = Kept::default();
    if me != root {
        crate::not_in_place(recvbuf)?;
        // SAFETY: the caller's contract.
        let b = unsafe { kept.output(recvbuf, recvcount, datatype_ref(recvtype)?) };
        let r = p.immediate_scatter_varcount_into(StaticScope, b);
        // SAFETY: checked non-null; the caller vouches it is writable.
        return unsafe { started(r, kept, request) };
    }
    crate::not_in_place(sendbuf)?;
    let m = me as usize;
    // In place, the root's part stays in `sendbuf`: it lands in a scratch buffer.
    let b = if is_in_place(recvbuf) {
        let bytes = counts[m] as usize * stageable(sendtype)?;
        let scratch = kept.hold(vec![0u64; bytes.div_ceil(8)]);
        // SAFETY: the scratch buffer is kept with the request and holds the part.
        unsafe { kept.output(scratch.as_mut_ptr() as *mut c_void, counts[m], datatype_ref(sendtype)?) }
    } else {
        // SAFETY: the caller's contract.
        unsafe { kept.output(recvbuf, recvcount, datatype_ref(recvtype)?) }
    };
    // SAFETY: the root's `sendbuf` spans every part.
    let s = unsafe { kept.input(sendbuf, span(&counts, &displs), sendtype, std::ptr::null(), 0)? };
    let part = kept.hold(Partition::new(s, counts, displs));
    let r = p.immediate_scatter_varcount_into_root(StaticScope, part, b);
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { started(r, kept, request) }
}

/// `MPI_Iallgatherv` once the counts are `int`s.
///
/// # Safety
/// The buffers as `MPI_Iallgatherv` says, valid until the request completes.
#[allow(clippy::too_many_arguments)]
unsafe fn iallgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    (counts, displs): (Vec<c_int>, Vec<c_int>),
    recvtype: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    check(request, sendcount)?;
    crate::not_in_place(recvbuf)?;
    let m = rc.rank() as usize;
    let mut kept = Kept::default();
    // SAFETY: the caller's contract; in place, this process's part is a copy of its block.
    let s = unsafe {
        if is_in_place(sendbuf) {
            kept.input(sendbuf, counts[m], recvtype, recvbuf, displs[m])?
        } else {
            kept.input(sendbuf, sendcount, sendtype, std::ptr::null(), 0)?
        }
    };
    // SAFETY: `recvbuf` spans every part.
    let b = unsafe { kept.output(recvbuf, span(&counts, &displs), datatype_ref(recvtype)?) };
    let part = kept.hold(PartitionMut::new(b, counts, displs));
    let r = rc.immediate_all_gather_varcount_into(StaticScope, s, part);
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { started(r, kept, request) }
}

/// `MPI_Ialltoallv` once the counts are `int`s (in place, the send parts are a copy of
/// `recvbuf` with the receive counts).
///
/// # Safety
/// The buffers as `MPI_Ialltoallv` says, valid until the request completes.
#[allow(clippy::too_many_arguments)]
unsafe fn ialltoallv(
    sendbuf: *const c_void,
    (sc, sd): (Vec<c_int>, Vec<c_int>),
    sendtype: c_int,
    recvbuf: *mut c_void,
    (rcn, rd): (Vec<c_int>, Vec<c_int>),
    recvtype: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    check(request, 0)?;
    crate::not_in_place(recvbuf)?;
    let mut kept = Kept::default();
    let rspan = span(&rcn, &rd);
    // SAFETY: the caller's contract.
    let (s, sc, sd) = unsafe {
        if is_in_place(sendbuf) {
            (kept.input(sendbuf, rspan, recvtype, recvbuf, 0)?, rcn.clone(), rd.clone())
        } else {
            let sspan = span(&sc, &sd);
            (kept.input(sendbuf, sspan, sendtype, std::ptr::null(), 0)?, sc, sd)
        }
    };
    let parts = kept.hold(Partition::new(s, sc, sd));
    // SAFETY: `recvbuf` spans every part.
    let b = unsafe { kept.output(recvbuf, rspan, datatype_ref(recvtype)?) };
    let into = kept.hold(PartitionMut::new(b, rcn, rd));
    let r = rc.immediate_all_to_all_varcount_into(StaticScope, parts, into);
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { started(r, kept, request) }
}

/// Defines the `int` and the large-count forms: `$t` is the type of their counts and `$d`
/// that of their displacements.
macro_rules! ivarcount_family {
    ($gatherv:ident, $scatterv:ident, $allgatherv:ident, $alltoallv:ident, $t:ty, $d:ty, $what:literal) => {
        mpi_fn! {
            #[doc = concat!("Starts a gather of a count per process at the root (", $what, ").")]
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
                request: *mut c_int,
            ) on c => {
                let sendcount = c_int::try_from(sendcount).map_err(|_| MPI_ERR_COUNT)?;
                let n = if is_root(c, root)? { size(c)? } else { 0 };
                // SAFETY: the caller vouches for the arrays (read at the root only) and buffers.
                unsafe {
                    let parts = (ints(recvcounts, n, true)?, ints(displs, n, false)?);
                    igatherv(sendbuf, sendcount, sendtype, recvbuf, parts, recvtype, root, c, request)
                }
            }
        }

        mpi_fn! {
            #[doc = concat!("Starts a scatter of a count per process from the root (", $what, ").")]
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
                request: *mut c_int,
            ) on c => {
                let recvcount = c_int::try_from(recvcount).map_err(|_| MPI_ERR_COUNT)?;
                let n = if is_root(c, root)? { size(c)? } else { 0 };
                // SAFETY: the caller vouches for the arrays (read at the root only) and buffers.
                unsafe {
                    let parts = (ints(sendcounts, n, true)?, ints(displs, n, false)?);
                    iscatterv(sendbuf, parts, sendtype, recvbuf, recvcount, recvtype, root, c, request)
                }
            }
        }

        mpi_fn! {
            #[doc = concat!("Starts a gather of a count per process at every process (", $what, ").")]
            fn $allgatherv(
                sendbuf: *const c_void,
                sendcount: $t,
                sendtype: c_int,
                recvbuf: *mut c_void,
                recvcounts: *const $t,
                displs: *const $d,
                recvtype: c_int,
                c: c_int,
                request: *mut c_int,
            ) on c => {
                let sendcount = c_int::try_from(sendcount).map_err(|_| MPI_ERR_COUNT)?;
                let n = size(c)?;
                // SAFETY: the caller vouches for the arrays and buffers.
                unsafe {
                    let parts = (ints(recvcounts, n, true)?, ints(displs, n, false)?);
                    iallgatherv(sendbuf, sendcount, sendtype, recvbuf, parts, recvtype, c, request)
                }
            }
        }

        mpi_fn! {
            #[doc = concat!("Starts sending a count to each process and receiving one from each (", $what, ").")]
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
                request: *mut c_int,
            ) on c => {
                let n = size(c)?;
                let m = if is_in_place(sendbuf) { 0 } else { n };
                // SAFETY: the caller vouches for the arrays (the send ones unread in place) and
                // buffers.
                unsafe {
                    let sends = (ints(sendcounts, m, true)?, ints(sdispls, m, false)?);
                    let recvs = (ints(recvcounts, n, true)?, ints(rdispls, n, false)?);
                    ialltoallv(sendbuf, sends, sendtype, recvbuf, recvs, recvtype, c, request)
                }
            }
        }
    };
}

ivarcount_family!(MPI_Igatherv, MPI_Iscatterv, MPI_Iallgatherv, MPI_Ialltoallv, c_int, c_int, "int counts");
ivarcount_family!(
    MPI_Igatherv_c,
    MPI_Iscatterv_c,
    MPI_Iallgatherv_c,
    MPI_Ialltoallv_c,
    MPI_Count,
    MPI_Aint,
    "large counts"
);
