//! Neighbourhood collectives on Cartesian, graph and distributed-graph communicators:
//! `MPI_Neighbor_allgather`, `MPI_Neighbor_allgatherv`, `MPI_Neighbor_alltoall`,
//! `MPI_Neighbor_alltoallv`, `MPI_Neighbor_alltoallw`, their nonblocking `MPI_Ineighbor_*`
//! forms and all `_c` forms (the persistent `_init` forms are [`crate::pcoll`]'s).
//!
//! The neighbours are MPI's, in MPI's order: for a Cartesian communicator, for each dimension
//! the process one step down then one step up (`MPI_Cart_shift` by 1; off a non-periodic edge
//! `MPI_PROC_NULL`, whose block is neither sent nor received); for a graph the node's edges;
//! for a distributed graph its sources (received from) and destinations (sent to). Each is
//! one [`crate::exchange`] on the communicator: block `k` to out-neighbour `k`, block `k` from
//! in-neighbour `k` (a process listed twice gets its blocks in order). `MPI_BOTTOM` works in
//! `MPI_Neighbor_alltoallw` (absolute displacements).

use crate::consts::*;
use crate::datatypes::{datatype_ref, MPI_Aint, MPI_Count};
use crate::exchange::{go, Block};
use crate::handles::{comm, rust_comm};
use crate::topologies::{self, Topology};
use p2pmpi::ffi;
use p2pmpi::traits::*;
use std::os::raw::{c_int, c_void};

/// This process's in-neighbours (sources) and out-neighbours (destinations) in `c`'s
/// topology, `MPI_PROC_NULL` included (`MPI_ERR_TOPOLOGY` without one).
pub(crate) fn neighbours(c: c_int) -> Result<(Vec<c_int>, Vec<c_int>), c_int> {
    let fc = comm(c)?;
    match topologies::get(c) {
        Some(Topology::Graph { index, edges }) => {
            let r = rust_comm(c)?.rank() as usize;
            let from = if r == 0 { 0 } else { index.get(r - 1).copied().unwrap_or(0) as usize };
            let to = index.get(r).copied().unwrap_or(0) as usize;
            let e = edges.get(from..to).ok_or(MPI_ERR_TOPOLOGY)?.to_vec();
            Ok((e.clone(), e))
        }
        Some(Topology::Dist { sources, dests, .. }) => Ok((sources, dests)),
        None => {
            let mut nd = 0;
            // SAFETY: `nd` is a local.
            if unsafe { ffi::MPI_Cartdim_get(fc, &mut nd) } != 0 {
                return Err(MPI_ERR_TOPOLOGY);
            }
            let mut v = Vec::with_capacity(2 * nd.max(0) as usize);
            for d in 0..nd {
                let (mut down, mut up) = (MPI_PROC_NULL, MPI_PROC_NULL);
                // SAFETY: locals only.
                crate::ok(unsafe { ffi::MPI_Cart_shift(fc, d, 1, &mut down, &mut up) })?;
                v.push(if down < 0 { MPI_PROC_NULL } else { down });
                v.push(if up < 0 { MPI_PROC_NULL } else { up });
            }
            Ok((v.clone(), v))
        }
    }
}

/// The extent of `dt` in bytes.
fn extent(dt: c_int) -> Result<isize, c_int> {
    Ok(datatype_ref(dt)?.type_map().extent())
}

/// `n` values at `p` as `T`s (`MPI_ERR_ARG` for a null array, `MPI_ERR_COUNT` for a value out
/// of range).
///
/// # Safety
/// `p` must be valid for `n` reads.
unsafe fn read<S: Copy + TryInto<T>, T>(p: *const S, n: usize) -> Result<Vec<T>, c_int> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: non-null; the caller vouches for `n` values.
    let s = unsafe { std::slice::from_raw_parts(p, n) };
    s.iter().map(|&x| x.try_into().map_err(|_| MPI_ERR_COUNT)).collect()
}

/// One side of a neighbourhood collective: per neighbour a count, a byte displacement and a
/// datatype.
struct Side {
    buf: *const c_void,
    counts: Vec<usize>,
    displs: Vec<isize>,
    types: Vec<c_int>,
}

impl Side {
    /// The same `count` elements of `dt` at `buf` for each of `n` neighbours (allgather's
    /// send side).
    fn same(buf: *const c_void, n: usize, count: usize, dt: c_int) -> Side {
        Side { buf, counts: vec![count; n], displs: vec![0; n], types: vec![dt; n] }
    }

    /// Consecutive blocks of `count` elements of `dt`, one per neighbour.
    fn blocks(buf: *const c_void, n: usize, count: usize, dt: c_int) -> Result<Side, c_int> {
        let step = extent(dt)?.checked_mul(count as isize).ok_or(MPI_ERR_COUNT)?;
        Ok(Side {
            buf,
            counts: vec![count; n],
            displs: (0..n as isize).map(|k| k * step).collect(),
            types: vec![dt; n],
        })
    }

    /// Blocks at displacements counted in elements of `dt`.
    fn varying(buf: *const c_void, counts: Vec<usize>, displs: Vec<isize>, dt: c_int) -> Result<Side, c_int> {
        let e = extent(dt)?;
        let displs = displs.iter().map(|&d| d.checked_mul(e).ok_or(MPI_ERR_COUNT)).collect::<Result<_, _>>()?;
        let n = counts.len();
        Ok(Side { buf, counts, displs, types: vec![dt; n] })
    }

    /// The blocks with real neighbours (`MPI_PROC_NULL`'s left out).
    fn to(&self, peers: &[c_int]) -> Result<Vec<Block>, c_int> {
        crate::not_in_place(self.buf)?;
        let mut v = Vec::with_capacity(peers.len());
        for (k, &p) in peers.iter().enumerate() {
            if p == MPI_PROC_NULL {
                continue;
            }
            let (count, dt) = (self.counts[k], self.types[k]);
            datatype_ref(dt)?;
            v.push(Block::at(p as usize, self.buf, self.displs[k], count, dt));
        }
        Ok(v)
    }
}

/// Runs (or starts, with a request) the neighbourhood exchange of `send` and `recv` on `c`.
///
/// # Safety
/// The buffers must hold the blocks (until completion, for a nonblocking one).
unsafe fn neighbor(c: c_int, send: &Side, recv: &Side, request: Option<*mut c_int>) -> Result<(), c_int> {
    let (sources, dests) = neighbours(c)?;
    let (sends, recvs) = (send.to(&dests)?, recv.to(&sources)?);
    // SAFETY: the caller's contract.
    unsafe { go(c, &sends, recvs, None, request) }
}

/// The request argument of a nonblocking form (`None` for a blocking one).
fn req(r: *mut c_int) -> Option<*mut c_int> {
    Some(r)
}

/// Defines the neighbourhood collectives of one count type `$t` and displacement type `$d`,
/// blocking (`$block`) or nonblocking (`$req`).
macro_rules! neighbor_family {
    ($ag:ident, $agv:ident, $a2a:ident, $a2av:ident, $a2aw:ident, $t:ty, $d:ty, ($($r:ident: $rt:ty)?), $wrap:expr) => {
        mpi_fn! {
            /// Gathers every in-neighbour's block (the same from each process to all its
            /// out-neighbours), in neighbour order.
            fn $ag(sendbuf: *const c_void, sendcount: $t, sendtype: c_int, recvbuf: *mut c_void, recvcount: $t,
                recvtype: c_int, c: c_int $(, $r: $rt)?) on c => {
                let (sources, dests) = neighbours(c)?;
                let s = Side::same(sendbuf, dests.len(), usize::try_from(sendcount).map_err(|_| MPI_ERR_COUNT)?, sendtype);
                let rc = usize::try_from(recvcount).map_err(|_| MPI_ERR_COUNT)?;
                let r = Side::blocks(recvbuf, sources.len(), rc, recvtype)?;
                // SAFETY: the caller's contract.
                unsafe { neighbor(c, &s, &r, $wrap($($r)?)) }
            }
        }
        mpi_fn! {
            /// Gathers every in-neighbour's block into its own count and displacement.
            fn $agv(sendbuf: *const c_void, sendcount: $t, sendtype: c_int, recvbuf: *mut c_void,
                recvcounts: *const $t, displs: *const $d, recvtype: c_int, c: c_int $(, $r: $rt)?) on c => {
                let (sources, dests) = neighbours(c)?;
                let s = Side::same(sendbuf, dests.len(), usize::try_from(sendcount).map_err(|_| MPI_ERR_COUNT)?, sendtype);
                // SAFETY: the caller vouches for one count and displacement per in-neighbour.
                let r = unsafe { Side::varying(recvbuf, read(recvcounts, sources.len())?, read(displs, sources.len())?, recvtype)? };
                // SAFETY: the caller's contract.
                unsafe { neighbor(c, &s, &r, $wrap($($r)?)) }
            }
        }
        mpi_fn! {
            /// Sends block `k` to out-neighbour `k` and receives block `k` from in-neighbour `k`.
            fn $a2a(sendbuf: *const c_void, sendcount: $t, sendtype: c_int, recvbuf: *mut c_void, recvcount: $t,
                recvtype: c_int, c: c_int $(, $r: $rt)?) on c => {
                let (sources, dests) = neighbours(c)?;
                let sc = usize::try_from(sendcount).map_err(|_| MPI_ERR_COUNT)?;
                let rc = usize::try_from(recvcount).map_err(|_| MPI_ERR_COUNT)?;
                let s = Side::blocks(sendbuf, dests.len(), sc, sendtype)?;
                let r = Side::blocks(recvbuf, sources.len(), rc, recvtype)?;
                // SAFETY: the caller's contract.
                unsafe { neighbor(c, &s, &r, $wrap($($r)?)) }
            }
        }
        mpi_fn! {
            /// `MPI_Neighbor_alltoall` with a count and displacement per neighbour.
            fn $a2av(sendbuf: *const c_void, sendcounts: *const $t, sdispls: *const $d, sendtype: c_int,
                recvbuf: *mut c_void, recvcounts: *const $t, rdispls: *const $d, recvtype: c_int,
                c: c_int $(, $r: $rt)?) on c => {
                let (sources, dests) = neighbours(c)?;
                let (ns, nr) = (dests.len(), sources.len());
                // SAFETY: the caller vouches for one count and displacement per neighbour.
                let (s, r) = unsafe {
                    (Side::varying(sendbuf, read(sendcounts, ns)?, read(sdispls, ns)?, sendtype)?,
                     Side::varying(recvbuf, read(recvcounts, nr)?, read(rdispls, nr)?, recvtype)?)
                };
                // SAFETY: the caller's contract.
                unsafe { neighbor(c, &s, &r, $wrap($($r)?)) }
            }
        }
        mpi_fn! {
            /// `MPI_Neighbor_alltoall` with a count, a byte displacement and a datatype per
            /// neighbour (`MPI_BOTTOM` with absolute displacements).
            fn $a2aw(sendbuf: *const c_void, sendcounts: *const $t, sdispls: *const MPI_Aint, sendtypes: *const c_int,
                recvbuf: *mut c_void, recvcounts: *const $t, rdispls: *const MPI_Aint, recvtypes: *const c_int,
                c: c_int $(, $r: $rt)?) on c => {
                let (sources, dests) = neighbours(c)?;
                let (ns, nr) = (dests.len(), sources.len());
                // SAFETY: the caller vouches for one count, displacement and datatype per neighbour.
                let (s, r) = unsafe {
                    (Side { buf: sendbuf, counts: read(sendcounts, ns)?, displs: read(sdispls, ns)?, types: read(sendtypes, ns)? },
                     Side { buf: recvbuf, counts: read(recvcounts, nr)?, displs: read(rdispls, nr)?, types: read(recvtypes, nr)? })
                };
                // SAFETY: the caller's contract.
                unsafe { neighbor(c, &s, &r, $wrap($($r)?)) }
            }
        }
    };
}

/// No request: the blocking forms.
fn blocking() -> Option<*mut c_int> {
    None
}

neighbor_family!(
    MPI_Neighbor_allgather,
    MPI_Neighbor_allgatherv,
    MPI_Neighbor_alltoall,
    MPI_Neighbor_alltoallv,
    MPI_Neighbor_alltoallw,
    c_int,
    c_int,
    (),
    blocking
);
neighbor_family!(
    MPI_Neighbor_allgather_c,
    MPI_Neighbor_allgatherv_c,
    MPI_Neighbor_alltoall_c,
    MPI_Neighbor_alltoallv_c,
    MPI_Neighbor_alltoallw_c,
    MPI_Count,
    MPI_Aint,
    (),
    blocking
);
neighbor_family!(
    MPI_Ineighbor_allgather, MPI_Ineighbor_allgatherv, MPI_Ineighbor_alltoall, MPI_Ineighbor_alltoallv,
    MPI_Ineighbor_alltoallw, c_int, c_int, (request: *mut c_int), req
);
neighbor_family!(
    MPI_Ineighbor_allgather_c, MPI_Ineighbor_allgatherv_c, MPI_Ineighbor_alltoall_c, MPI_Ineighbor_alltoallv_c,
    MPI_Ineighbor_alltoallw_c, MPI_Count, MPI_Aint, (request: *mut c_int), req
);
