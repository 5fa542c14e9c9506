//! `MPI_Alltoallw` (a count, a byte displacement and a datatype per process, and its `_c`
//! form) and `MPI_Alltoall` with `MPI_IN_PLACE`.
//!
//! Each process's parts are packed into one byte buffer (each with its own datatype), the
//! bytes exchanged by the Rust API's all-to-all with a count per process, and unpacked into
//! `recvbuf` with the receive datatypes. In place, the parts to send are packed from
//! `recvbuf` (with the receive arguments) before anything is received, which is what the
//! standard asks; this serves `MPI_Alltoall` in place as well, for any datatype.

use crate::consts::*;
use crate::datatypes::{datatype_ref, MPI_Aint, MPI_Count};
use crate::exchange::Block;
use crate::handles::rust_comm;
use crate::is_in_place;
use p2pmpi::collective::TryCollectives;
use p2pmpi::datatype::{Partition, PartitionMut};
use p2pmpi::traits::*;
use std::os::raw::{c_int, c_void};

/// One process's part: `count` elements of datatype `dt` at byte `displ` of a buffer.
#[derive(Clone, Copy)]
struct Part {
    count: c_int,
    displ: isize,
    dt: c_int,
}

/// The parts of `n` processes from the argument arrays (`MPI_ERR_ARG` for a null array,
/// `MPI_ERR_COUNT` for a count out of range).
///
/// # Safety
/// Each array must be valid for `n` reads.
unsafe fn parts<C: Copy + TryInto<c_int>, D: Copy + TryInto<isize>>(
    n: usize,
    counts: *const C,
    displs: *const D,
    types: *const c_int,
) -> Result<Vec<Part>, c_int> {
    if n > 0 && (counts.is_null() || displs.is_null() || types.is_null()) {
        return Err(MPI_ERR_ARG);
    }
    (0..n)
        .map(|i| {
            // SAFETY: `i < n`, within the arrays the caller vouches for.
            let (c, d, t) = unsafe { (*counts.add(i), *displs.add(i), *types.add(i)) };
            let count = c.try_into().map_err(|_| MPI_ERR_COUNT)?;
            if count < 0 {
                return Err(MPI_ERR_COUNT);
            }
            Ok(Part { count, displ: d.try_into().map_err(|_| MPI_ERR_ARG)?, dt: t })
        })
        .collect()
}

/// The all-to-all of `parts` (read from `sendbuf`, or in place from `recvbuf`) into `rparts`
/// of `recvbuf`.
///
/// # Safety
/// The buffers must hold the parts their arguments describe.
unsafe fn exchange(
    sendbuf: *const c_void,
    sparts: Option<&[Part]>,
    recvbuf: *mut c_void,
    rparts: &[Part],
    c: c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    crate::not_in_place(recvbuf)?;
    let (src, sparts) = match sparts {
        Some(p) => (sendbuf, p),
        None => (recvbuf as *const c_void, rparts),
    };
    let mut out = Vec::new();
    let (mut scounts, mut sdispls) = (Vec::with_capacity(sparts.len()), Vec::with_capacity(sparts.len()));
    for p in sparts {
        let d = datatype_ref(p.dt)?;
        sdispls.push(c_int::try_from(out.len()).map_err(|_| MPI_ERR_COUNT)?);
        if p.count > 0 {
            // SAFETY: the caller vouches for `count` elements of the datatype at that byte.
            unsafe { d.type_map().pack((src as *const u8).offset(p.displ), p.count as usize, &mut out) };
        }
        scounts.push(c_int::try_from(out.len()).map_err(|_| MPI_ERR_COUNT)? - sdispls.last().copied().unwrap_or(0));
    }
    let (mut rcounts, mut rdispls, mut total) = (Vec::with_capacity(rparts.len()), Vec::new(), 0usize);
    for p in rparts {
        let bytes = p.count as usize * datatype_ref(p.dt)?.type_map().size();
        rdispls.push(c_int::try_from(total).map_err(|_| MPI_ERR_COUNT)?);
        rcounts.push(c_int::try_from(bytes).map_err(|_| MPI_ERR_COUNT)?);
        total += bytes;
    }
    let mut inp = vec![0u8; total];
    rc.try_all_to_all_varcount_into(
        &Partition::new(&out[..], &scounts[..], &sdispls[..]),
        &mut PartitionMut::new(&mut inp[..], &rcounts[..], &rdispls[..]),
    )
    .map_err(crate::errors::class_of_failure)?;
    for (i, p) in rparts.iter().enumerate() {
        if p.count > 0 {
            let at = rdispls[i] as usize;
            let got = &inp[at..at + rcounts[i] as usize];
            // SAFETY: the caller vouches for `count` writable elements at that byte.
            unsafe {
                datatype_ref(p.dt)?.type_map().unpack(got, (recvbuf as *mut u8).offset(p.displ), p.count as usize)
            };
        }
    }
    Ok(())
}

/// `MPI_Alltoallw` and its `_c` form.
macro_rules! alltoallw_forms {
    ($name:ident, $count:ty, $displ:ty, $run:ident, $req:expr $(, $request:ident)?) => {
        mpi_fn! {
            /// Sends part `i` of `sendbuf` (its count, byte displacement and datatype) to
            /// process `i` and receives its part into part `i` of `recvbuf`; with
            /// `MPI_IN_PLACE`, `recvbuf`'s parts are sent and replaced.
            fn $name(
                sendbuf: *const c_void,
                sendcounts: *const $count,
                sdispls: *const $displ,
                sendtypes: *const c_int,
                recvbuf: *mut c_void,
                recvcounts: *const $count,
                rdispls: *const $displ,
                recvtypes: *const c_int,
                c: c_int,
                $($request: *mut c_int,)?
            ) on c => {
                if let Some(k) = crate::intercoll::carrier(c)? {
                    // SAFETY: the caller vouches for arrays of the remote group's size.
                    return unsafe {
                        let s = crate::intercoll::w_parts(k.remote, sendcounts, sdispls, sendtypes)?;
                        let r = crate::intercoll::w_parts(k.remote, recvcounts, rdispls, recvtypes)?;
                        crate::intercoll::alltoallw(&k, (sendbuf, &s), (recvbuf, &r), $req)
                    };
                }
                let n = rust_comm(c)?.size() as usize;
                // SAFETY: the caller vouches for arrays of the communicator's size.
                unsafe {
                    let r = parts(n, recvcounts, rdispls, recvtypes)?;
                    if is_in_place(sendbuf) {
                        $run(sendbuf, None, recvbuf, &r, c $(, $request)?)
                    } else {
                        let s = parts(n, sendcounts, sdispls, sendtypes)?;
                        $run(sendbuf, Some(&s), recvbuf, &r, c $(, $request)?)
                    }
                }
            }
        }
    };
}
alltoallw_forms!(MPI_Alltoallw, c_int, c_int, exchange, None);
alltoallw_forms!(MPI_Alltoallw_c, MPI_Count, MPI_Aint, exchange, None);
alltoallw_forms!(MPI_Ialltoallw, c_int, c_int, start, Some(request), request);
alltoallw_forms!(MPI_Ialltoallw_c, MPI_Count, MPI_Aint, start, Some(request), request);

/// Starts the all-to-all of `sparts` (read now from `sendbuf`, or in place from `recvbuf`)
/// into `rparts` of `recvbuf`, by [`crate::exchange`]: it completes with its request.
///
/// # Safety
/// The buffers must hold the parts their arguments describe, `recvbuf`'s until completion.
unsafe fn start(
    sendbuf: *const c_void,
    sparts: Option<&[Part]>,
    recvbuf: *mut c_void,
    rparts: &[Part],
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    crate::not_in_place(recvbuf)?;
    let (src, sparts) = match sparts {
        Some(p) => (sendbuf, p),
        None => (recvbuf as *const c_void, rparts),
    };
    let blocks = |buf: *const c_void, parts: &[Part]| -> Result<Vec<Block>, c_int> {
        parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                datatype_ref(p.dt)?;
                Ok(Block::at(i, buf, p.displ, p.count as usize, p.dt))
            })
            .collect()
    };
    let (sends, recvs) = (blocks(src, sparts)?, blocks(recvbuf, rparts)?);
    // SAFETY: the caller's contract (what is sent is packed before this returns).
    unsafe { crate::exchange::start(c, &sends, recvs, None, request) }
}

/// `MPI_Ialltoall` with `MPI_IN_PLACE`: as [`alltoall_in_place`], completed by the request.
///
/// # Safety
/// `recvbuf` must hold the communicator's size blocks until completion.
pub unsafe fn ialltoall_in_place(
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let r = blocks_in_place(recvcount, recvtype, c)?;
    // SAFETY: the caller's contract.
    unsafe { start(std::ptr::null(), None, recvbuf, &r, c, request) }
}

/// The parts of `MPI_Alltoall` in place: block `i` of `recvcount` elements of `recvtype`.
fn blocks_in_place(recvcount: c_int, recvtype: c_int, c: c_int) -> Result<Vec<Part>, c_int> {
    let n = rust_comm(c)?.size() as usize;
    if recvcount < 0 {
        return Err(MPI_ERR_COUNT);
    }
    let extent = datatype_ref(recvtype)?.type_map().extent();
    let block = extent.checked_mul(recvcount as isize).ok_or(MPI_ERR_COUNT)?;
    Ok((0..n).map(|i| Part { count: recvcount, displ: block * i as isize, dt: recvtype }).collect())
}

/// `MPI_Alltoall` with `MPI_IN_PLACE`: block `i` of `recvbuf` (`recvcount` elements of
/// `recvtype`) goes to process `i` and is replaced by its block.
///
/// # Safety
/// `recvbuf` must hold the communicator's size blocks.
pub unsafe fn alltoall_in_place(
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    c: c_int,
) -> Result<(), c_int> {
    let r = blocks_in_place(recvcount, recvtype, c)?;
    // SAFETY: the caller's contract.
    unsafe { exchange(std::ptr::null(), None, recvbuf, &r, c) }
}
