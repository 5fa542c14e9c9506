//! The nonblocking collectives with a count per process: `MPI_Igatherv`, `MPI_Iscatterv`,
//! `MPI_Iallgatherv`, `MPI_Ialltoallv`, and the nonblocking reduce-scatters
//! `MPI_Ireduce_scatter_block` and `MPI_Ireduce_scatter` (and their `_c` forms), on the Rust
//! API's fallible immediate collectives, kept alive as [`crate::immediate`]'s are.
//!
//! `MPI_IN_PLACE` as in the blocking forms (the root's part of `MPI_Igatherv` and
//! `MPI_Iscatterv`, every process's part of `MPI_Iallgatherv`, the whole `recvbuf` of
//! `MPI_Ialltoallv` and of the reduce-scatters). `MPI_Ireduce_scatter` with counts that
//! differ runs the blocking reduce-scatter and answers a completed request.

use crate::consts::*;
use crate::datatypes::{datatype_ref as dtref, stageable, MPI_Aint, MPI_Count};
use crate::handles::rust_comm;
use crate::immediate::{check, mine};
use crate::intercoll;
use crate::ints;
use crate::is_in_place;
use crate::kept::{started, Kept};
use crate::user_ops::{rust_op, user_op};
use crate::varcount::{span, v_forms, Layout};
use p2pmpi::collective::{TryImmediateCollectives, TryImmediateRoot};
use p2pmpi::datatype::{Partition, PartitionMut};
use p2pmpi::request::StaticScope;
use p2pmpi::traits::*;
use std::os::raw::{c_int, c_void};

/// A failed start's class.
use crate::errors::class_of_failure as failed;

/// `MPI_Igatherv` once the counts are `int`s.
///
/// # Safety
/// As `MPI_Igatherv` says.
#[allow(clippy::too_many_arguments)]
unsafe fn igatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    counts: Vec<c_int>,
    displs: Vec<c_int>,
    recvtype: c_int,
    root: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    check(request, &[sendcount])?;
    if !(0..rc.size()).contains(&root) {
        return Err(MPI_ERR_ROOT);
    }
    let (me, p, mut kept) = (rc.rank() as usize, rc.process_at_rank(root), Kept::default());
    if rc.rank() != root {
        crate::not_in_place(sendbuf)?;
        // SAFETY: the caller's contract.
        let s = unsafe { kept.input(sendbuf, sendcount, sendtype, std::ptr::null(), 0)? };
        let r = p.try_immediate_gather_varcount_into(StaticScope, s).map_err(failed)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        return unsafe { started(r, kept, request) };
    }
    crate::not_in_place(recvbuf)?;
    // SAFETY: the caller's contract; in place, the root's part is a copy of its block.
    let s = unsafe { mine(&mut kept, sendbuf, sendcount, sendtype, recvbuf, counts[me], recvtype, displs[me])? };
    let total = span(&counts, &displs);
    // SAFETY: the caller's contract: `recvbuf` spans every part.
    let b = unsafe { kept.output(recvbuf, total, dtref(recvtype)?) };
    let parts = kept.hold(PartitionMut::new(b, counts, displs));
    let r = p.try_immediate_gather_varcount_into_root(StaticScope, s, parts).map_err(failed)?;
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { started(r, kept, request) }
}

/// `MPI_Iscatterv` once the counts are `int`s.
///
/// # Safety
/// As `MPI_Iscatterv` says.
#[allow(clippy::too_many_arguments)]
unsafe fn iscatterv(
    sendbuf: *const c_void,
    counts: Vec<c_int>,
    displs: Vec<c_int>,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    check(request, &[recvcount])?;
    if !(0..rc.size()).contains(&root) {
        return Err(MPI_ERR_ROOT);
    }
    let (me, p, mut kept) = (rc.rank() as usize, rc.process_at_rank(root), Kept::default());
    if rc.rank() != root {
        crate::not_in_place(recvbuf)?;
        // SAFETY: the caller's contract.
        let b = unsafe { kept.output(recvbuf, recvcount, dtref(recvtype)?) };
        let r = p.try_immediate_scatter_varcount_into(StaticScope, b).map_err(failed)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        return unsafe { started(r, kept, request) };
    }
    crate::not_in_place(sendbuf)?;
    let total = span(&counts, &displs);
    // SAFETY: the caller's contract: `sendbuf` spans every part.
    let s = unsafe { kept.input(sendbuf, total, sendtype, std::ptr::null(), 0)? };
    // In place, the root's part stays in `sendbuf`: it lands in a scratch copy.
    let b = if is_in_place(recvbuf) {
        let n = counts[me];
        let scratch = kept.hold(vec![0u64; (n as usize * stageable(sendtype)?).div_ceil(8)]);
        // SAFETY: the scratch buffer is kept as long as the request.
        unsafe { kept.output(scratch.as_mut_ptr() as *mut c_void, n, dtref(sendtype)?) }
    } else {
        // SAFETY: the caller's contract.
        unsafe { kept.output(recvbuf, recvcount, dtref(recvtype)?) }
    };
    let parts = kept.hold(Partition::new(s, counts, displs));
    let r = p.try_immediate_scatter_varcount_into_root(StaticScope, parts, b).map_err(failed)?;
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { started(r, kept, request) }
}

/// `MPI_Iallgatherv` once the counts are `int`s.
///
/// # Safety
/// As `MPI_Iallgatherv` says.
#[allow(clippy::too_many_arguments)]
unsafe fn iallgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    counts: Vec<c_int>,
    displs: Vec<c_int>,
    recvtype: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    check(request, &[sendcount])?;
    crate::not_in_place(recvbuf)?;
    let (me, mut kept) = (rc.rank() as usize, Kept::default());
    // SAFETY: the caller's contract; in place, this process's part is a copy of its block.
    let s = unsafe { mine(&mut kept, sendbuf, sendcount, sendtype, recvbuf, counts[me], recvtype, displs[me])? };
    let total = span(&counts, &displs);
    // SAFETY: the caller's contract: `recvbuf` spans every part.
    let b = unsafe { kept.output(recvbuf, total, dtref(recvtype)?) };
    let parts = kept.hold(PartitionMut::new(b, counts, displs));
    let r = rc.try_immediate_all_gather_varcount_into(StaticScope, s, parts).map_err(failed)?;
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { started(r, kept, request) }
}

/// `MPI_Ialltoallv` once the counts are `int`s (`send` is `None` in place).
///
/// # Safety
/// As `MPI_Ialltoallv` says.
#[allow(clippy::too_many_arguments)]
unsafe fn ialltoallv(
    sendbuf: *const c_void,
    send: Option<Layout>,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recv: Layout,
    recvtype: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    check(request, &[])?;
    crate::not_in_place(recvbuf)?;
    let mut kept = Kept::default();
    let rspan = span(&recv.counts, &recv.displs);
    // SAFETY: the caller's contract; in place, what is sent is a copy of `recvbuf`.
    let (s, send) = unsafe {
        match send {
            Some(l) => (kept.input(sendbuf, span(&l.counts, &l.displs), sendtype, std::ptr::null(), 0)?, l),
            None => (
                kept.input(sendbuf, rspan, recvtype, recvbuf, 0)?,
                Layout { counts: recv.counts.clone(), displs: recv.displs.clone() },
            ),
        }
    };
    // SAFETY: the caller's contract: `recvbuf` spans every part.
    let b = unsafe { kept.output(recvbuf, rspan, dtref(recvtype)?) };
    let sparts = kept.hold(Partition::new(s, send.counts, send.displs));
    let rparts = kept.hold(PartitionMut::new(b, recv.counts, recv.displs));
    let r = rc.try_immediate_all_to_all_varcount_into(StaticScope, sparts, rparts).map_err(failed)?;
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { started(r, kept, request) }
}

/// `MPI_Ireduce_scatter_block`.
///
/// # Safety
/// As `MPI_Ireduce_scatter_block` says.
unsafe fn ireduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    dt: c_int,
    o: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    check(request, &[recvcount])?;
    crate::not_in_place(recvbuf)?;
    let total = recvcount.checked_mul(rc.size()).ok_or(MPI_ERR_COUNT)?;
    let mut kept = Kept::default();
    // SAFETY: the caller's contract; in place, the input is a copy of `recvbuf`'s `total`
    // elements.
    let s = unsafe { kept.input(sendbuf, total, dt, recvbuf, 0)? };
    // SAFETY: the caller's contract.
    let b = unsafe { kept.output(recvbuf, recvcount, dtref(dt)?) };
    let r = match user_op(o) {
        Some(u) => rc.try_immediate_reduce_scatter_block_into(StaticScope, s, b, rust_op(u, dt)),
        None => rc.try_immediate_reduce_scatter_block_into(StaticScope, s, b, crate::ops::system_op(o)?),
    }
    .map_err(failed)?;
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { started(r, kept, request) }
}

v_forms!(
    [MPI_Igatherv, MPI_Iscatterv, MPI_Iallgatherv, MPI_Ialltoallv],
    [MPI_Igatherv_c, MPI_Iscatterv_c, MPI_Iallgatherv_c, MPI_Ialltoallv_c],
    by [igatherv, iscatterv, iallgatherv, ialltoallv],
    [
        "Starts a gather of a count per process at the root, at displacements",
        "Starts a scatter of a count per process from the root, at displacements",
        "Starts a gather of a count per process at every process, at displacements",
        "Starts sending a count to each process and receiving one from each"
    ],
    request
);

/// Defines the `int` and the large-count forms of the nonblocking reduce-scatters: `$t` is
/// the type of their counts.
macro_rules! ireduce_scatter_forms {
    ($irsb:ident, $irs:ident, $t:ty) => {
        mpi_fn! {
            /// Starts a reduction of every process's `sendbuf` whose block `i` (`recvcount`
            /// elements) goes to process `i`.
            fn $irsb(
                sendbuf: *const c_void,
                recvbuf: *mut c_void,
                recvcount: $t,
                dt: c_int,
                o: c_int,
                c: c_int,
                request: *mut c_int,
            ) on c => {
                let recvcount = c_int::try_from(recvcount).map_err(|_| MPI_ERR_COUNT)?;
                // SAFETY: the caller's contract.
                unsafe { ireduce_scatter_block(sendbuf, recvbuf, recvcount, dt, o, c, request) }
            }
        }

        mpi_fn! {
            /// Starts a reduction of every process's `sendbuf` whose part `i` (`recvcounts[i]`
            /// elements) goes to process `i`; with counts that differ, it runs at once.
            fn $irs(
                sendbuf: *const c_void,
                recvbuf: *mut c_void,
                recvcounts: *const $t,
                dt: c_int,
                o: c_int,
                c: c_int,
                request: *mut c_int,
            ) on c => {
                let n = rust_comm(c)?.size() as usize;
                if request.is_null() {
                    return Err(MPI_ERR_ARG);
                }
                // SAFETY: the caller vouches for the array.
                let counts = unsafe { ints(recvcounts, n, true)? };
                // SAFETY: the caller's contract.
                unsafe {
                    if counts.windows(2).all(|w| w[0] == w[1]) {
                        ireduce_scatter_block(sendbuf, recvbuf, counts.first().copied().unwrap_or(0), dt, o, c, request)
                    } else {
                        crate::ok(crate::collective::MPI_Reduce_scatter(sendbuf, recvbuf, counts.as_ptr(), dt, o, c))?;
                        crate::kept::completed(request)
                    }
                }
            }
        }
    };
}
ireduce_scatter_forms!(MPI_Ireduce_scatter_block, MPI_Ireduce_scatter, c_int);
ireduce_scatter_forms!(MPI_Ireduce_scatter_block_c, MPI_Ireduce_scatter_c, MPI_Count);
