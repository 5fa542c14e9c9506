//! Nonblocking collectives: `MPI_Ibarrier`, `MPI_Ibcast`, `MPI_Ireduce`, `MPI_Iallreduce`,
//! `MPI_Iscan`, `MPI_Iexscan`, `MPI_Igather`, `MPI_Iscatter`, `MPI_Iallgather`,
//! `MPI_Ialltoall` (and their `_c` forms), completed by `MPI_Wait`, `MPI_Test` and the other
//! completions like any request.
//!
//! They run on the Rust API's immediate collectives in its static scope: the descriptions of
//! the program's buffers (and the copy of an `MPI_IN_PLACE` input) are kept by the request
//! ([`Keep`]) until it completes; the request is then handed over to a raw handle of the
//! library (`Request::into_raw`). The program keeps its buffers valid until completion, as
//! MPI says. `MPI_IN_PLACE` works as in the blocking forms (not for `MPI_Ialltoall`).

use crate::consts::*;
use crate::datatypes::{datatype_ref, stageable, MPI_Count};
use crate::handles::rust_comm;
use crate::intercoll;
use crate::is_in_place;
use crate::kept::{started, Kept};
use crate::user_ops::{rust_op, user_op};
use p2pmpi::collective::{TryImmediateCollectives, TryImmediateRoot};
use p2pmpi::datatype::DynBuffer;
use p2pmpi::request::StaticScope;
use p2pmpi::traits::*;
use std::os::raw::{c_int, c_void};

/// Checks the request argument and the counts (every start of a nonblocking collective).
pub(crate) fn check(request: *mut c_int, counts: &[c_int]) -> Result<(), c_int> {
    if request.is_null() {
        return Err(MPI_ERR_ARG);
    }
    if counts.iter().any(|&n| n < 0) {
        return Err(MPI_ERR_COUNT);
    }
    Ok(())
}

/// This process's part of a gathering collective: `sendcount` elements of `sendtype` at
/// `sendbuf`, or in place a copy of its part of `recvbuf` (`count` elements of `recvtype` at
/// element `at`).
///
/// # Safety
/// The buffers must hold those elements until the request completes.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn mine(
    kept: &mut Kept,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *const c_void,
    count: c_int,
    recvtype: c_int,
    at: c_int,
) -> Result<&'static DynBuffer<'static>, c_int> {
    // SAFETY: the caller's contract.
    unsafe {
        if is_in_place(sendbuf) {
            kept.input(sendbuf, count, recvtype, recvbuf, at)
        } else {
            kept.input(sendbuf, sendcount, sendtype, std::ptr::null(), 0)
        }
    }
}

/// Runs `$body` with `$op` bound to the Rust operation of MPICH operation `$o` on datatype
/// `$dt`: a predefined one or the program's.
macro_rules! with_op {
    ($o:expr, $dt:expr, $op:ident => $body:expr) => {
        match user_op($o) {
            Some(u) => {
                let $op = rust_op(u, $dt);
                $body
            }
            None => {
                let $op = crate::ops::system_op($o)?;
                $body
            }
        }
    };
}

mpi_fn! {
    /// Starts a barrier.
    fn MPI_Ibarrier(c: c_int, request: *mut c_int) on c => {
        check(request, &[])?;
        if let Some(k) = intercoll::carrier(c)? {
            // SAFETY: checked non-null; the caller vouches it is writable.
            return unsafe { intercoll::barrier(&k, Some(request)) };
        }
        let rc = rust_comm(c)?;
        let r = rc.try_immediate_barrier().map_err(crate::errors::class_of_failure)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { started(r, Kept::default(), request) }
    }
}

/// `MPI_Ibcast`.
///
/// # Safety
/// As `MPI_Ibcast` says.
unsafe fn ibcast(
    buf: *mut c_void,
    count: c_int,
    dt: c_int,
    root: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    check(request, &[])?;
    if let Some(k) = intercoll::carrier(c)? {
        // SAFETY: the caller's contract.
        return unsafe { intercoll::bcast(&k, buf, count, dt, root, Some(request)) };
    }
    let rc = rust_comm(c)?;
    check(request, &[count])?;
    if !(0..rc.size()).contains(&root) {
        return Err(MPI_ERR_ROOT);
    }
    crate::not_in_place(buf)?;
    let mut kept = Kept::default();
    // SAFETY: the caller's contract.
    let b = unsafe { kept.output(buf, count, datatype_ref(dt)?) };
    let r = rc
        .process_at_rank(root)
        .try_immediate_broadcast_into(StaticScope, b)
        .map_err(crate::errors::class_of_failure)?;
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { started(r, kept, request) }
}

/// Which reduction.
#[derive(Clone, Copy)]
enum Reduction {
    Reduce(c_int),
    Allreduce,
    Scan,
    Exscan,
}

/// A nonblocking reduction.
///
/// # Safety
/// As the reduction says.
#[allow(clippy::too_many_arguments)]
unsafe fn ireduce(
    which: Reduction,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    dt: c_int,
    o: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    check(request, &[])?;
    if let Some(k) = intercoll::carrier(c)? {
        let root = match which {
            Reduction::Reduce(root) => Some(root),
            Reduction::Allreduce => None,
            _ => return Err(MPI_ERR_COMM),
        };
        // SAFETY: the caller's contract.
        return unsafe { intercoll::reduce(&k, sendbuf, recvbuf, count, dt, o, root, Some(request)) };
    }
    let rc = rust_comm(c)?;
    check(request, &[count])?;
    let d = datatype_ref(dt)?;
    let receives = match which {
        Reduction::Reduce(root) if !(0..rc.size()).contains(&root) => return Err(MPI_ERR_ROOT),
        Reduction::Reduce(root) => rc.rank() == root,
        _ => true,
    };
    if !receives {
        crate::not_in_place(sendbuf)?;
    }
    let mut kept = Kept::default();
    // SAFETY: the caller's contract; in place, the input is a copy of `recvbuf`.
    let s = unsafe { kept.input(sendbuf, count, dt, recvbuf, 0)? };
    if let (Reduction::Reduce(root), false) = (which, receives) {
        let r = with_op!(o, dt, op => rc.process_at_rank(root).try_immediate_reduce_into(StaticScope, s, op))
            .map_err(crate::errors::class_of_failure)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        return unsafe { started(r, kept, request) };
    }
    crate::not_in_place(recvbuf)?;
    // SAFETY: the caller's contract.
    let b = unsafe { kept.output(recvbuf, count, d) };
    let r = with_op!(o, dt, op => match which {
        Reduction::Reduce(root) => rc.process_at_rank(root).try_immediate_reduce_into_root(StaticScope, s, b, op),
        Reduction::Allreduce => rc.try_immediate_all_reduce_into(StaticScope, s, b, op),
        Reduction::Scan => rc.try_immediate_scan_into(StaticScope, s, b, op),
        Reduction::Exscan => rc.try_immediate_exclusive_scan_into(StaticScope, s, b, op),
    })
    .map_err(crate::errors::class_of_failure)?;
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { started(r, kept, request) }
}

/// Which gathering collective.
#[derive(Clone, Copy)]
enum Gathering {
    Gather(c_int),
    Scatter(c_int),
    Allgather,
    Alltoall,
}

/// A nonblocking gathering collective.
///
/// # Safety
/// As the collective says.
#[allow(clippy::too_many_arguments)]
unsafe fn igathering(
    which: Gathering,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    check(request, &[])?;
    if let Some(k) = intercoll::carrier(c)? {
        // SAFETY: the caller's contract.
        return unsafe {
            inter_gathering(&k, which, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, request)
        };
    }
    let rc = rust_comm(c)?;
    check(request, &[sendcount, recvcount])?;
    // Only a scatter's root may receive "in place".
    if !matches!(which, Gathering::Scatter(_)) {
        crate::not_in_place(recvbuf)?;
    }
    let (me, n) = (rc.rank(), rc.size());
    let mut kept = Kept::default();
    match which {
        Gathering::Gather(root) | Gathering::Scatter(root) if !(0..n).contains(&root) => Err(MPI_ERR_ROOT),
        Gathering::Gather(root) if me != root => {
            crate::not_in_place(sendbuf)?;
            // SAFETY: the caller's contract.
            let s = unsafe { kept.input(sendbuf, sendcount, sendtype, std::ptr::null(), 0)? };
            let r = rc
                .process_at_rank(root)
                .try_immediate_gather_into(StaticScope, s)
                .map_err(crate::errors::class_of_failure)?;
            // SAFETY: checked non-null; the caller vouches it is writable.
            unsafe { started(r, kept, request) }
        }
        Gathering::Gather(root) => {
            // SAFETY: the caller's contract; in place, the root's part is a copy of its block.
            let s =
                unsafe { mine(&mut kept, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, me * recvcount)? };
            // SAFETY: the caller's contract.
            let b = unsafe { kept.output(recvbuf, recvcount * n, datatype_ref(recvtype)?) };
            let r = rc
                .process_at_rank(root)
                .try_immediate_gather_into_root(StaticScope, s, b)
                .map_err(crate::errors::class_of_failure)?;
            // SAFETY: checked non-null; the caller vouches it is writable.
            unsafe { started(r, kept, request) }
        }
        Gathering::Scatter(root) if me != root => {
            crate::not_in_place(recvbuf)?;
            // SAFETY: the caller's contract.
            let b = unsafe { kept.output(recvbuf, recvcount, datatype_ref(recvtype)?) };
            let r = rc
                .process_at_rank(root)
                .try_immediate_scatter_into(StaticScope, b)
                .map_err(crate::errors::class_of_failure)?;
            // SAFETY: checked non-null; the caller vouches it is writable.
            unsafe { started(r, kept, request) }
        }
        Gathering::Scatter(root) => {
            crate::not_in_place(sendbuf)?;
            // SAFETY: the caller's contract.
            let s = unsafe { kept.input(sendbuf, sendcount * n, sendtype, std::ptr::null(), 0)? };
            // In place, the root's part stays in `sendbuf`: it lands in a scratch copy.
            let b = if is_in_place(recvbuf) {
                let size = stageable(sendtype)?;
                let scratch = kept.hold(vec![0u64; (sendcount.max(0) as usize * size).div_ceil(8)]);
                // SAFETY: the scratch buffer is kept as long as the request.
                unsafe { kept.output(scratch.as_mut_ptr() as *mut c_void, sendcount, datatype_ref(sendtype)?) }
            } else {
                // SAFETY: the caller's contract.
                unsafe { kept.output(recvbuf, recvcount, datatype_ref(recvtype)?) }
            };
            let r = rc
                .process_at_rank(root)
                .try_immediate_scatter_into_root(StaticScope, s, b)
                .map_err(crate::errors::class_of_failure)?;
            // SAFETY: checked non-null; the caller vouches it is writable.
            unsafe { started(r, kept, request) }
        }
        Gathering::Allgather => {
            // SAFETY: the caller's contract; in place, this process's part is a copy.
            let s =
                unsafe { mine(&mut kept, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, me * recvcount)? };
            // SAFETY: the caller's contract.
            let b = unsafe { kept.output(recvbuf, recvcount * n, datatype_ref(recvtype)?) };
            let r = rc.try_immediate_all_gather_into(StaticScope, s, b).map_err(crate::errors::class_of_failure)?;
            // SAFETY: checked non-null; the caller vouches it is writable.
            unsafe { started(r, kept, request) }
        }
        Gathering::Alltoall => {
            if is_in_place(sendbuf) {
                // SAFETY: the caller's contract.
                return unsafe { crate::alltoallw::ialltoall_in_place(recvbuf, recvcount, recvtype, c, request) };
            }
            // SAFETY: the caller's contract.
            let s = unsafe { kept.input(sendbuf, sendcount * n, sendtype, std::ptr::null(), 0)? };
            // SAFETY: the caller's contract.
            let b = unsafe { kept.output(recvbuf, recvcount * n, datatype_ref(recvtype)?) };
            let r = rc.try_immediate_all_to_all_into(StaticScope, s, b).map_err(crate::errors::class_of_failure)?;
            // SAFETY: checked non-null; the caller vouches it is writable.
            unsafe { started(r, kept, request) }
        }
    }
}

/// A nonblocking gathering collective over an intercommunicator.
///
/// # Safety
/// As the collective says.
#[allow(clippy::too_many_arguments)]
unsafe fn inter_gathering(
    k: &intercoll::Carrier,
    which: Gathering,
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let (sc, rc) = (intercoll::lenient(sendcount), intercoll::lenient(recvcount));
    let r = Some(request);
    // SAFETY: the caller's contract.
    unsafe {
        match which {
            Gathering::Gather(root) => {
                let parts = intercoll::even(k, root, recvcount)?;
                intercoll::rooted(k, true, (sendbuf, sc, sendtype), (recvbuf, &parts, recvtype), root, r)
            }
            Gathering::Scatter(root) => {
                let parts = intercoll::even(k, root, sendcount)?;
                intercoll::rooted(
                    k,
                    false,
                    (recvbuf as *const c_void, rc, recvtype),
                    (sendbuf, &parts, sendtype),
                    root,
                    r,
                )
            }
            Gathering::Allgather => {
                let s = vec![(sc, 0); k.remote];
                let parts = intercoll::even(k, MPI_ROOT, recvcount)?;
                intercoll::all(k, (sendbuf, &s, sendtype), (recvbuf, &parts, recvtype), r)
            }
            Gathering::Alltoall => {
                let s = intercoll::even(k, MPI_ROOT, sendcount)?;
                let parts = intercoll::even(k, MPI_ROOT, recvcount)?;
                intercoll::all(k, (sendbuf, &s, sendtype), (recvbuf, &parts, recvtype), r)
            }
        }
    }
}

/// Defines nonblocking collectives, each in its `int` and large-count forms (`$t`, the type of
/// their counts: `MPI_ERR_COUNT` for a large count beyond `int`'s range): a row per
/// collective, its two names, which it is (a variant of [`Reduction`] or [`Gathering`];
/// `(root)` adds the argument `root`) and what it starts.
macro_rules! forms {
    ($kind:ident: $($name:ident, $name_c:ident, $which:ident $(($root:ident))?, $what:literal;)*) => {$(
        forms!(@$kind $name, c_int, $which $(($root))?, concat!("Starts ", $what, "."));
        forms!(@$kind $name_c, MPI_Count, $which $(($root))?, concat!("Starts ", $what, " (large counts)."));
    )*};
    (@bcast $name:ident, $t:ty, $which:ident, $doc:expr) => {
        mpi_fn! {
            #[doc = $doc]
            fn $name(buf: *mut c_void, count: $t, dt: c_int, root: c_int, c: c_int, request: *mut c_int) on c => {
                let count = c_int::try_from(count).map_err(|_| MPI_ERR_COUNT)?;
                // SAFETY: the caller's contract.
                unsafe { ibcast(buf, count, dt, root, c, request) }
            }
        }
    };
    (@reduction $name:ident, $t:ty, $which:ident $(($root:ident))?, $doc:expr) => {
        mpi_fn! {
            #[doc = $doc]
            fn $name(
                sendbuf: *const c_void,
                recvbuf: *mut c_void,
                count: $t,
                dt: c_int,
                o: c_int,
                $($root: c_int,)?
                c: c_int,
                request: *mut c_int,
            ) on c => {
                let count = c_int::try_from(count).map_err(|_| MPI_ERR_COUNT)?;
                // SAFETY: the caller's contract.
                unsafe { ireduce(Reduction::$which $(($root))?, sendbuf, recvbuf, count, dt, o, c, request) }
            }
        }
    };
    (@gathering $name:ident, $t:ty, $which:ident $(($root:ident))?, $doc:expr) => {
        mpi_fn! {
            #[doc = $doc]
            fn $name(
                sendbuf: *const c_void,
                sendcount: $t,
                sendtype: c_int,
                recvbuf: *mut c_void,
                recvcount: $t,
                recvtype: c_int,
                $($root: c_int,)?
                c: c_int,
                request: *mut c_int,
            ) on c => {
                let sendcount = c_int::try_from(sendcount).map_err(|_| MPI_ERR_COUNT)?;
                let recvcount = c_int::try_from(recvcount).map_err(|_| MPI_ERR_COUNT)?;
                // SAFETY: the caller's contract.
                unsafe {
                    let which = Gathering::$which $(($root))?;
                    igathering(which, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, c, request)
                }
            }
        }
    };
}

forms! {
    bcast:
    MPI_Ibcast, MPI_Ibcast_c, Bcast, "a broadcast from `root`";
}

forms! {
    reduction:
    MPI_Ireduce, MPI_Ireduce_c, Reduce(root), "a reduction to `root`";
    MPI_Iallreduce, MPI_Iallreduce_c, Allreduce, "a reduction to every process";
    MPI_Iscan, MPI_Iscan_c, Scan, "an inclusive prefix reduction";
    MPI_Iexscan, MPI_Iexscan_c, Exscan, "an exclusive prefix reduction";
}

forms! {
    gathering:
    MPI_Igather, MPI_Igather_c, Gather(root), "a gather at `root`";
    MPI_Iscatter, MPI_Iscatter_c, Scatter(root), "a scatter from `root`";
    MPI_Iallgather, MPI_Iallgather_c, Allgather, "a gather at every process";
    MPI_Ialltoall, MPI_Ialltoall_c, Alltoall, "an all-to-all exchange";
}
