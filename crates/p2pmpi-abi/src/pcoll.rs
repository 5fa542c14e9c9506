//! Persistent collectives (MPI 4): `MPI_Barrier_init`, `MPI_Bcast_init`, `MPI_Reduce_init`,
//! `MPI_Allreduce_init`, `MPI_Scan_init`, `MPI_Exscan_init`, `MPI_Gather_init`,
//! `MPI_Scatter_init`, `MPI_Allgather_init`, `MPI_Alltoall_init`, the v-variants
//! (`MPI_Gatherv_init`, `MPI_Scatterv_init`, `MPI_Allgatherv_init`, `MPI_Alltoallv_init`),
//! `MPI_Reduce_scatter_block_init`, `MPI_Reduce_scatter_init`, and their `_c` forms.
//!
//! Each makes an inactive persistent request that remembers its arguments; `MPI_Start` runs
//! the nonblocking collective of the same arguments ([`crate::immediate`],
//! [`crate::ivarcount`]) and the persistent request takes over its library request and what
//! it keeps alive, so `MPI_Wait`, `MPI_Test` and the others complete it as any persistent
//! request. Count and displacement arrays are copied when the request is made (the program
//! may free them); other arguments are checked at `MPI_Start`; the info argument is not used.

use crate::alltoallw::{MPI_Ialltoallw, MPI_Ialltoallw_c};
use crate::consts::*;
use crate::datatypes::{MPI_Aint, MPI_Count};
use crate::handles::{Persistent, RequestEntry, REQUESTS};
use crate::immediate::*;
use crate::ivarcount::*;
use crate::neighbor::*;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::os::raw::{c_int, c_void};

/// What `MPI_Start` runs for a persistent collective: the nonblocking collective, writing the
/// handle of the request it started.
type Starter = Box<dyn Fn(*mut c_int) -> c_int + Send>;

/// The starters of the persistent collectives, by request handle.
// Process-wide because a C handle is a plain integer any thread may hand to any function.
static STARTERS: Mutex<BTreeMap<c_int, Starter>> = Mutex::new(BTreeMap::new());

/// The arguments of a persistent collective, moved into its starter. They are plain values
/// and the program's buffer addresses, which MPI says stay valid while the request exists.
struct Args<T>(T);
// SAFETY: the addresses are only handed back to MPI functions, by whichever thread starts
// the request, as the program allows.
unsafe impl<T> Send for Args<T> {}

impl<T: Copy> Args<T> {
    /// The arguments (a method, so that a closure captures the whole `Args`).
    fn get(&self) -> T {
        self.0
    }
}

/// Makes an inactive persistent collective request on `c` that runs `starter`.
fn make(c: c_int, starter: Starter, request: *mut c_int) -> Result<(), c_int> {
    crate::handles::comm(c)?;
    if request.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let p = Persistent {
        recv: false,
        synchronous: false,
        collective: true,
        buf: 0,
        count: 0,
        dt: MPI_DATATYPE_NULL,
        peer: MPI_PROC_NULL,
        tag: 0,
        comm: c,
    };
    let h = REQUESTS.insert(RequestEntry {
        raw: crate::handles::null_request(),
        keep: None,
        persistent: Some(p),
        direct: None,
    });
    STARTERS.lock().insert(h, starter);
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { request.write(h) };
    Ok(())
}

/// Starts persistent collective `h` (inactive): runs its nonblocking collective and takes
/// over the request it started.
pub(crate) fn start(h: c_int) -> Result<(), c_int> {
    let mut t = MPI_REQUEST_NULL;
    let rc = {
        let starters = STARTERS.lock();
        let f = starters.get(&h).ok_or(MPI_ERR_REQUEST)?;
        f(&mut t)
    };
    crate::ok(rc)?;
    let mut e = REQUESTS.take(t).ok_or(MPI_ERR_INTERN)?;
    REQUESTS
        .with_mut(h, |x| {
            x.raw = e.raw();
            x.keep = e.keep;
        })
        .ok_or(MPI_ERR_REQUEST)
}

/// Forgets the starter of a freed persistent collective (nothing for another request).
pub(crate) fn forget(h: c_int) {
    STARTERS.lock().remove(&h);
}

/// Defines a persistent collective's initialization: `$init(args..., info, request)` runs
/// `$start(args..., request)` at each `MPI_Start`.
macro_rules! persistent {
    ($init:ident => $start:ident($($a:ident: $t:ty),*) on $c:ident) => {
        mpi_fn! {
            #[doc = concat!("Makes a persistent collective (inactive until `MPI_Start`) running `",
                stringify!($start), "` with these arguments.")]
            fn $init($($a: $t,)* _info: c_int, request: *mut c_int) on $c => {
                let args = Args(($($a,)*));
                let starter: Starter = Box::new(move |out| {
                    let ($($a,)*) = args.get();
                    // SAFETY: the program's arguments, valid while the request exists (MPI's
                    // rule for persistent requests); `out` is the starter's caller's local.
                    unsafe { $start($($a,)* out) }
                });
                make($c, starter, request)
            }
        }
    };
}

persistent!(MPI_Barrier_init => MPI_Ibarrier(c: c_int) on c);

/// The forms of one count type.
macro_rules! persistent_family {
    ($t:ty, $d:ty, $bcast:ident, $reduce:ident, $allreduce:ident, $scan:ident, $exscan:ident,
     $gather:ident, $scatter:ident, $allgather:ident, $alltoall:ident, $rsb:ident,
     [$ibcast:ident, $ireduce:ident, $iallreduce:ident, $iscan:ident, $iexscan:ident,
      $igather:ident, $iscatter:ident, $iallgather:ident, $ialltoall:ident, $irsb:ident]) => {
        persistent!($bcast => $ibcast(buf: *mut c_void, count: $t, dt: c_int, root: c_int, c: c_int) on c);
        persistent!($reduce => $ireduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: $t, dt: c_int,
            op: c_int, root: c_int, c: c_int) on c);
        persistent!($allreduce => $iallreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count: $t,
            dt: c_int, op: c_int, c: c_int) on c);
        persistent!($scan => $iscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: $t, dt: c_int,
            op: c_int, c: c_int) on c);
        persistent!($exscan => $iexscan(sendbuf: *const c_void, recvbuf: *mut c_void, count: $t, dt: c_int,
            op: c_int, c: c_int) on c);
        persistent!($gather => $igather(sendbuf: *const c_void, sendcount: $t, sendtype: c_int,
            recvbuf: *mut c_void, recvcount: $t, recvtype: c_int, root: c_int, c: c_int) on c);
        persistent!($scatter => $iscatter(sendbuf: *const c_void, sendcount: $t, sendtype: c_int,
            recvbuf: *mut c_void, recvcount: $t, recvtype: c_int, root: c_int, c: c_int) on c);
        persistent!($allgather => $iallgather(sendbuf: *const c_void, sendcount: $t, sendtype: c_int,
            recvbuf: *mut c_void, recvcount: $t, recvtype: c_int, c: c_int) on c);
        persistent!($alltoall => $ialltoall(sendbuf: *const c_void, sendcount: $t, sendtype: c_int,
            recvbuf: *mut c_void, recvcount: $t, recvtype: c_int, c: c_int) on c);
        persistent!($rsb => $irsb(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: $t, dt: c_int,
            op: c_int, c: c_int) on c);
    };
}

persistent_family!(
    c_int,
    c_int,
    MPI_Bcast_init,
    MPI_Reduce_init,
    MPI_Allreduce_init,
    MPI_Scan_init,
    MPI_Exscan_init,
    MPI_Gather_init,
    MPI_Scatter_init,
    MPI_Allgather_init,
    MPI_Alltoall_init,
    MPI_Reduce_scatter_block_init,
    [
        MPI_Ibcast,
        MPI_Ireduce,
        MPI_Iallreduce,
        MPI_Iscan,
        MPI_Iexscan,
        MPI_Igather,
        MPI_Iscatter,
        MPI_Iallgather,
        MPI_Ialltoall,
        MPI_Ireduce_scatter_block
    ]
);
persistent_family!(
    MPI_Count,
    MPI_Aint,
    MPI_Bcast_init_c,
    MPI_Reduce_init_c,
    MPI_Allreduce_init_c,
    MPI_Scan_init_c,
    MPI_Exscan_init_c,
    MPI_Gather_init_c,
    MPI_Scatter_init_c,
    MPI_Allgather_init_c,
    MPI_Alltoall_init_c,
    MPI_Reduce_scatter_block_init_c,
    [
        MPI_Ibcast_c,
        MPI_Ireduce_c,
        MPI_Iallreduce_c,
        MPI_Iscan_c,
        MPI_Iexscan_c,
        MPI_Igather_c,
        MPI_Iscatter_c,
        MPI_Iallgather_c,
        MPI_Ialltoall_c,
        MPI_Ireduce_scatter_block_c
    ]
);

/// A copy of `n` counts or displacements at `p` (none if `p` is null): MPI lets the program
/// free its arrays once a persistent collective is made.
///
/// # Safety
/// `p` must be null or valid for `n` reads.
unsafe fn copy<T: Copy>(p: *const T, n: usize) -> Vec<T> {
    if p.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p, n) }.to_vec()
}

/// The number of entries of a count array: the size of `c` (0 if `c` is not a communicator,
/// or at a process other than `root` for a rooted collective), the remote group's over an
/// intercommunicator.
fn entries(c: c_int, root: Option<c_int>) -> usize {
    // Over an intercommunicator, one per remote process (at `MPI_ROOT` for a rooted one).
    if let Ok(Some(k)) = crate::intercoll::carrier(c) {
        return if root.is_some_and(|r| r != MPI_ROOT) { 0 } else { k.remote };
    }
    match root {
        Some(r) if !crate::varcount::is_root(c, r).unwrap_or(false) => 0,
        _ => crate::varcount::size(c).unwrap_or(0),
    }
}

/// The persistent collectives with count arrays, which are copied when the request is made.
macro_rules! persistent_v {
    ($t:ty, $d:ty, $gatherv:ident => $igatherv:ident, $scatterv:ident => $iscatterv:ident,
     $allgatherv:ident => $iallgatherv:ident, $alltoallv:ident => $ialltoallv:ident,
     $rs:ident => $irs:ident) => {
        mpi_fn! {
            #[doc = concat!("Makes a persistent `", stringify!($igatherv), "` (the arrays copied).")]
            fn $gatherv(sendbuf: *const c_void, sendcount: $t, sendtype: c_int, recvbuf: *mut c_void,
                recvcounts: *const $t, displs: *const $d, recvtype: c_int, root: c_int, c: c_int,
                _info: c_int, request: *mut c_int) on c => {
                let n = entries(c, Some(root));
                // SAFETY: the caller vouches for the arrays (at the root).
                let (rc, dp) = unsafe { (copy(recvcounts, n), copy(displs, n)) };
                let args = Args((sendbuf, sendcount, sendtype, recvbuf, recvtype, root, c));
                let starter: Starter = Box::new(move |out| {
                    let (sb, sc, st, rb, rt, root, c) = args.get();
                    // SAFETY: the program's buffers, valid while the request exists; the copied
                    // arrays live in this starter.
                    unsafe { $igatherv(sb, sc, st, rb, rc.as_ptr(), dp.as_ptr(), rt, root, c, out) }
                });
                make(c, starter, request)
            }
        }

        mpi_fn! {
            #[doc = concat!("Makes a persistent `", stringify!($iscatterv), "` (the arrays copied).")]
            fn $scatterv(sendbuf: *const c_void, sendcounts: *const $t, displs: *const $d, sendtype: c_int,
                recvbuf: *mut c_void, recvcount: $t, recvtype: c_int, root: c_int, c: c_int,
                _info: c_int, request: *mut c_int) on c => {
                let n = entries(c, Some(root));
                // SAFETY: the caller vouches for the arrays (at the root).
                let (sc, dp) = unsafe { (copy(sendcounts, n), copy(displs, n)) };
                let args = Args((sendbuf, sendtype, recvbuf, recvcount, recvtype, root, c));
                let starter: Starter = Box::new(move |out| {
                    let (sb, st, rb, rcount, rt, root, c) = args.get();
                    // SAFETY: as above.
                    unsafe { $iscatterv(sb, sc.as_ptr(), dp.as_ptr(), st, rb, rcount, rt, root, c, out) }
                });
                make(c, starter, request)
            }
        }

        mpi_fn! {
            #[doc = concat!("Makes a persistent `", stringify!($iallgatherv), "` (the arrays copied).")]
            fn $allgatherv(sendbuf: *const c_void, sendcount: $t, sendtype: c_int, recvbuf: *mut c_void,
                recvcounts: *const $t, displs: *const $d, recvtype: c_int, c: c_int,
                _info: c_int, request: *mut c_int) on c => {
                let n = entries(c, None);
                // SAFETY: the caller vouches for the arrays.
                let (rc, dp) = unsafe { (copy(recvcounts, n), copy(displs, n)) };
                let args = Args((sendbuf, sendcount, sendtype, recvbuf, recvtype, c));
                let starter: Starter = Box::new(move |out| {
                    let (sb, scount, st, rb, rt, c) = args.get();
                    // SAFETY: as above.
                    unsafe { $iallgatherv(sb, scount, st, rb, rc.as_ptr(), dp.as_ptr(), rt, c, out) }
                });
                make(c, starter, request)
            }
        }

        mpi_fn! {
            #[doc = concat!("Makes a persistent `", stringify!($ialltoallv), "` (the arrays copied).")]
            fn $alltoallv(sendbuf: *const c_void, sendcounts: *const $t, sdispls: *const $d, sendtype: c_int,
                recvbuf: *mut c_void, recvcounts: *const $t, rdispls: *const $d, recvtype: c_int, c: c_int,
                _info: c_int, request: *mut c_int) on c => {
                let n = entries(c, None);
                let m = if crate::is_in_place(sendbuf) { 0 } else { n };
                // SAFETY: the caller vouches for the arrays (the send ones unread in place).
                let (sc, sd) = unsafe { (copy(sendcounts, m), copy(sdispls, m)) };
                // SAFETY: as above.
                let (rc, rd) = unsafe { (copy(recvcounts, n), copy(rdispls, n)) };
                let args = Args((sendbuf, sendtype, recvbuf, recvtype, c));
                let starter: Starter = Box::new(move |out| {
                    let (sb, st, rb, rt, c) = args.get();
                    // SAFETY: as above.
                    unsafe { $ialltoallv(sb, sc.as_ptr(), sd.as_ptr(), st, rb, rc.as_ptr(), rd.as_ptr(), rt, c, out) }
                });
                make(c, starter, request)
            }
        }

        mpi_fn! {
            #[doc = concat!("Makes a persistent `", stringify!($irs), "` (the counts copied).")]
            fn $rs(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const $t, dt: c_int, op: c_int,
                c: c_int, _info: c_int, request: *mut c_int) on c => {
                // SAFETY: the caller vouches for the counts.
                let rc = unsafe { copy(recvcounts, entries(c, None)) };
                let args = Args((sendbuf, recvbuf, dt, op, c));
                let starter: Starter = Box::new(move |out| {
                    let (sb, rb, dt, op, c) = args.get();
                    // SAFETY: as above.
                    unsafe { $irs(sb, rb, rc.as_ptr(), dt, op, c, out) }
                });
                make(c, starter, request)
            }
        }
    };
}

persistent_v!(
    c_int, c_int, MPI_Gatherv_init => MPI_Igatherv, MPI_Scatterv_init => MPI_Iscatterv,
    MPI_Allgatherv_init => MPI_Iallgatherv, MPI_Alltoallv_init => MPI_Ialltoallv,
    MPI_Reduce_scatter_init => MPI_Ireduce_scatter
);
persistent_v!(
    MPI_Count, MPI_Aint, MPI_Gatherv_init_c => MPI_Igatherv_c, MPI_Scatterv_init_c => MPI_Iscatterv_c,
    MPI_Allgatherv_init_c => MPI_Iallgatherv_c, MPI_Alltoallv_init_c => MPI_Ialltoallv_c,
    MPI_Reduce_scatter_init_c => MPI_Ireduce_scatter_c
);

/// The numbers of in- and out-neighbours of `c` (none if it has no topology).
fn degrees(c: c_int) -> (usize, usize) {
    crate::neighbor::neighbours(c).map(|(s, d)| (s.len(), d.len())).unwrap_or((0, 0))
}

/// The persistent neighbourhood collectives and `MPI_Alltoallw_init` of one count type `$t`
/// and displacement type `$d` (the arrays copied).
macro_rules! persistent_more {
    ($t:ty, $d:ty, $ag:ident => $iag:ident, $agv:ident => $iagv:ident, $a2a:ident => $ia2a:ident,
     $a2av:ident => $ia2av:ident, $a2aw:ident => $ia2aw:ident, $w:ident => $iw:ident) => {
        persistent!($ag => $iag(sendbuf: *const c_void, sendcount: $t, sendtype: c_int, recvbuf: *mut c_void,
            recvcount: $t, recvtype: c_int, c: c_int) on c);
        persistent!($a2a => $ia2a(sendbuf: *const c_void, sendcount: $t, sendtype: c_int, recvbuf: *mut c_void,
            recvcount: $t, recvtype: c_int, c: c_int) on c);

        mpi_fn! {
            #[doc = concat!("Makes a persistent `", stringify!($iagv), "` (the arrays copied).")]
            fn $agv(sendbuf: *const c_void, sendcount: $t, sendtype: c_int, recvbuf: *mut c_void,
                recvcounts: *const $t, displs: *const $d, recvtype: c_int, c: c_int,
                _info: c_int, request: *mut c_int) on c => {
                let (n, _) = degrees(c);
                // SAFETY: the caller vouches for the arrays.
                let (rc, dp) = unsafe { (copy(recvcounts, n), copy(displs, n)) };
                let args = Args((sendbuf, sendcount, sendtype, recvbuf, recvtype, c));
                let starter: Starter = Box::new(move |out| {
                    let (sb, scount, st, rb, rt, c) = args.get();
                    // SAFETY: the program's buffers, valid while the request exists; the copied
                    // arrays live in this starter.
                    unsafe { $iagv(sb, scount, st, rb, rc.as_ptr(), dp.as_ptr(), rt, c, out) }
                });
                make(c, starter, request)
            }
        }

        mpi_fn! {
            #[doc = concat!("Makes a persistent `", stringify!($ia2av), "` (the arrays copied).")]
            fn $a2av(sendbuf: *const c_void, sendcounts: *const $t, sdispls: *const $d, sendtype: c_int,
                recvbuf: *mut c_void, recvcounts: *const $t, rdispls: *const $d, recvtype: c_int, c: c_int,
                _info: c_int, request: *mut c_int) on c => {
                let (nr, ns) = degrees(c);
                // SAFETY: the caller vouches for the arrays.
                let (sc, sd) = unsafe { (copy(sendcounts, ns), copy(sdispls, ns)) };
                // SAFETY: as above.
                let (rc, rd) = unsafe { (copy(recvcounts, nr), copy(rdispls, nr)) };
                let args = Args((sendbuf, sendtype, recvbuf, recvtype, c));
                let starter: Starter = Box::new(move |out| {
                    let (sb, st, rb, rt, c) = args.get();
                    // SAFETY: as above.
                    unsafe { $ia2av(sb, sc.as_ptr(), sd.as_ptr(), st, rb, rc.as_ptr(), rd.as_ptr(), rt, c, out) }
                });
                make(c, starter, request)
            }
        }

        mpi_fn! {
            #[doc = concat!("Makes a persistent `", stringify!($ia2aw), "` (the arrays copied).")]
            fn $a2aw(sendbuf: *const c_void, sendcounts: *const $t, sdispls: *const MPI_Aint, sendtypes: *const c_int,
                recvbuf: *mut c_void, recvcounts: *const $t, rdispls: *const MPI_Aint, recvtypes: *const c_int,
                c: c_int, _info: c_int, request: *mut c_int) on c => {
                let (nr, ns) = degrees(c);
                // SAFETY: the caller vouches for the arrays.
                let (sc, sd, stt) = unsafe { (copy(sendcounts, ns), copy(sdispls, ns), copy(sendtypes, ns)) };
                // SAFETY: as above.
                let (rc, rd, rtt) = unsafe { (copy(recvcounts, nr), copy(rdispls, nr), copy(recvtypes, nr)) };
                let args = Args((sendbuf, recvbuf, c));
                let starter: Starter = Box::new(move |out| {
                    let (sb, rb, c) = args.get();
                    // SAFETY: as above.
                    unsafe {
                        $ia2aw(sb, sc.as_ptr(), sd.as_ptr(), stt.as_ptr(), rb, rc.as_ptr(), rd.as_ptr(), rtt.as_ptr(), c, out)
                    }
                });
                make(c, starter, request)
            }
        }

        mpi_fn! {
            #[doc = concat!("Makes a persistent `", stringify!($iw), "` (the arrays copied).")]
            fn $w(sendbuf: *const c_void, sendcounts: *const $t, sdispls: *const $d, sendtypes: *const c_int,
                recvbuf: *mut c_void, recvcounts: *const $t, rdispls: *const $d, recvtypes: *const c_int,
                c: c_int, _info: c_int, request: *mut c_int) on c => {
                let n = match crate::intercoll::carrier(c)? {
                    Some(k) => k.remote,
                    None => entries(c, None),
                };
                let m = if crate::is_in_place(sendbuf) { 0 } else { n };
                // SAFETY: the caller vouches for the arrays (the send ones unread in place).
                let (sc, sd, stt) = unsafe { (copy(sendcounts, m), copy(sdispls, m), copy(sendtypes, m)) };
                // SAFETY: as above.
                let (rc, rd, rtt) = unsafe { (copy(recvcounts, n), copy(rdispls, n), copy(recvtypes, n)) };
                let args = Args((sendbuf, recvbuf, c));
                let starter: Starter = Box::new(move |out| {
                    let (sb, rb, c) = args.get();
                    // SAFETY: as above.
                    unsafe {
                        $iw(sb, sc.as_ptr(), sd.as_ptr(), stt.as_ptr(), rb, rc.as_ptr(), rd.as_ptr(), rtt.as_ptr(), c, out)
                    }
                });
                make(c, starter, request)
            }
        }
    };
}

persistent_more!(
    c_int, c_int, MPI_Neighbor_allgather_init => MPI_Ineighbor_allgather,
    MPI_Neighbor_allgatherv_init => MPI_Ineighbor_allgatherv, MPI_Neighbor_alltoall_init => MPI_Ineighbor_alltoall,
    MPI_Neighbor_alltoallv_init => MPI_Ineighbor_alltoallv, MPI_Neighbor_alltoallw_init => MPI_Ineighbor_alltoallw,
    MPI_Alltoallw_init => MPI_Ialltoallw
);
persistent_more!(
    MPI_Count, MPI_Aint, MPI_Neighbor_allgather_init_c => MPI_Ineighbor_allgather_c,
    MPI_Neighbor_allgatherv_init_c => MPI_Ineighbor_allgatherv_c,
    MPI_Neighbor_alltoall_init_c => MPI_Ineighbor_alltoall_c,
    MPI_Neighbor_alltoallv_init_c => MPI_Ineighbor_alltoallv_c,
    MPI_Neighbor_alltoallw_init_c => MPI_Ineighbor_alltoallw_c, MPI_Alltoallw_init_c => MPI_Ialltoallw_c
);
