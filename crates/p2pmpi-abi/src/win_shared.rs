//! Shared-memory windows: `MPI_Win_allocate_shared` and `MPI_Win_shared_query` (and their
//! `_c` forms). The members of the communicator must all run on one host (a communicator
//! of `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`, or any on a local job), else every member
//! answers `MPI_ERR_RMA_SHARED`. Rank 0 makes one segment ([`crate::shm`]) holding every
//! member's part, contiguous in rank order (no padding); the others map it, then its name is
//! removed: a load or a store by one member is seen by the others at once (the memory model
//! is `MPI_WIN_UNIFIED`). The window is otherwise an ordinary one ([`crate::rma`]): its
//! server serves puts, gets and accumulates on it, and `MPI_Win_sync` is a memory fence.

use crate::consts::*;
use crate::datatypes::values::MPI_BYTE;
use crate::datatypes::{predefined, MPI_Aint};
use crate::handles::comm;
use crate::rma::{create, errc, int, win, Memory, MPI_WIN_FLAVOR_SHARED};
use crate::shm::{unlink, Segment};
use crate::{ok, put};
use p2pmpi::ffi;
use std::os::raw::{c_int, c_void};

/// Bytes of a segment's name as rank 0 sends it.
const NAME: usize = 64;

/// This host, as `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)` tells hosts apart (its name
/// and the process's data address), hashed (FNV-1a).
fn host_key() -> u64 {
    let host = p2pmpi::environment::processor_name().unwrap_or_default();
    let ip = p2pmpi::environment::data_address().map(|a| a.ip().to_string()).unwrap_or_default();
    format!("{host}/{ip}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// Every member's `mine` (`N` 8-byte words each), in rank order (collective over `fc`).
fn allgather<const N: usize>(fc: ffi::MPI_Comm, n: usize, mine: [i64; N]) -> Result<Vec<[i64; N]>, c_int> {
    let bytes = predefined(MPI_BYTE).ok_or(MPI_ERR_INTERN)?;
    let mut all = vec![[0i64; N]; n];
    let len = (8 * N) as c_int;
    // SAFETY: `mine` holds `len` bytes, `all` `n * len`.
    ok(unsafe { ffi::MPI_Allgather(mine.as_ptr().cast(), len, bytes, all.as_mut_ptr().cast(), len, bytes, fc) })?;
    Ok(all)
}

/// Maps one segment of `total` bytes on every member of `fc` (collective): rank 0 makes it
/// and sends its name, the others map it; `MPI_ERR_NO_MEM` everywhere if any failed.
fn map_segment(fc: ffi::MPI_Comm, me: usize, n: usize, total: usize) -> Result<Segment, c_int> {
    if n == 1 {
        return Segment::private(total).map_err(|_| MPI_ERR_NO_MEM);
    }
    let mut name = [0u8; NAME];
    let mut made = None;
    if me == 0 {
        let s = Segment::new_name();
        if let Ok(seg) = Segment::create(&s, total) {
            name[..s.len()].copy_from_slice(s.as_bytes());
            made = Some(seg);
        }
    }
    let bytes = predefined(MPI_BYTE).ok_or(MPI_ERR_INTERN)?;
    // SAFETY: `name` holds `NAME` bytes on every member.
    ok(unsafe { ffi::MPI_Bcast(name.as_mut_ptr().cast(), NAME as c_int, bytes, 0, fc) })?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(NAME);
    let s = std::str::from_utf8(&name[..end]).unwrap_or_default().to_string();
    if me != 0 && !s.is_empty() {
        made = Segment::open(&s, total).ok();
    }
    let oks = allgather(fc, n, [i64::from(made.is_some())]);
    if me == 0 && !s.is_empty() {
        // Every member mapped it (or gave up): the name is no longer needed.
        unlink(&s);
    }
    match (oks?.iter().all(|o| o[0] == 1), made) {
        (true, Some(seg)) => Ok(seg),
        _ => Err(MPI_ERR_NO_MEM),
    }
}

/// `MPI_Win_allocate_shared`'s work.
fn allocate_shared(
    size: MPI_Aint,
    disp_unit: c_int,
    c: c_int,
    baseptr: *mut c_void,
    out: *mut c_int,
) -> Result<(), c_int> {
    if out.is_null() || baseptr.is_null() {
        return Err(MPI_ERR_ARG);
    }
    if crate::rma::replicated() {
        return Err(MPI_ERR_UNSUPPORTED_OPERATION);
    }
    let fc = comm(c)?;
    let (mut me, mut n) = (0, 0);
    // SAFETY: locals.
    ok(unsafe { ffi::MPI_Comm_rank(fc, &mut me) })?;
    // SAFETY: locals.
    ok(unsafe { ffi::MPI_Comm_size(fc, &mut n) })?;
    let (me, n) = (me as usize, n as usize);
    // Every member checks every member's arguments: all refuse together, none waits.
    let all = allgather(fc, n, [host_key() as i64, size, i64::from(disp_unit)])?;
    if all.iter().any(|a| a[1] < 0) {
        return Err(MPI_ERR_SIZE);
    }
    if all.iter().any(|a| a[2] <= 0) {
        return Err(MPI_ERR_DISP);
    }
    if all.iter().any(|a| a[0] != all[0][0]) {
        return Err(MPI_ERR_RMA_SHARED);
    }
    let total = all.iter().try_fold(0usize, |t, a| t.checked_add(a[1] as usize)).ok_or(MPI_ERR_SIZE)?;
    let seg = map_segment(fc, me, n, total)?;
    let mut at = seg.addr() as usize;
    let parts: Vec<(usize, MPI_Aint, c_int)> = all
        .iter()
        .map(|a| {
            let p = (at, a[1], a[2] as c_int);
            at += a[1] as usize;
            p
        })
        .collect();
    let base = parts[me].0 as *mut c_void;
    let h = create(base, size, disp_unit, c, Memory::Shared(seg, parts), MPI_WIN_FLAVOR_SHARED)?;
    // SAFETY: checked non-null; the caller vouches `baseptr` is a writable `void *`.
    unsafe { (baseptr as *mut *mut c_void).write(base) };
    // SAFETY: as above.
    unsafe { put(out, h) }
}

mpi_fn! {
    /// Allocates `size` bytes (zeroed) in memory shared by `comm`'s members, which must all
    /// run on this host, and makes a window of them (collective); their address goes to
    /// `*baseptr`. The members' parts follow each other in rank order.
    fn MPI_Win_allocate_shared(size: MPI_Aint, disp_unit: c_int, _info: c_int, c: c_int, baseptr: *mut c_void, out: *mut c_int)
        on c => allocate_shared(size, disp_unit, c, baseptr, out)
}

mpi_fn! {
    /// `MPI_Win_allocate_shared` with a large displacement unit.
    fn MPI_Win_allocate_shared_c(size: MPI_Aint, disp_unit: MPI_Aint, _info: c_int, c: c_int, baseptr: *mut c_void, out: *mut c_int)
        on c => allocate_shared(size, int(disp_unit)?, c, baseptr, out)
}

/// The part of shared window `wh` of `rank` (`MPI_PROC_NULL`: the lowest rank whose part is
/// not empty): its address here, size and displacement unit.
fn query(wh: c_int, rank: c_int) -> Result<(usize, MPI_Aint, c_int), c_int> {
    let w = win(wh)?;
    let Memory::Shared(_, parts) = &w.memory else { return Err(MPI_ERR_RMA_FLAVOR) };
    if rank == MPI_PROC_NULL {
        return Ok(parts.iter().find(|p| p.1 > 0).copied().unwrap_or((0, 0, 1)));
    }
    usize::try_from(rank).ok().and_then(|r| parts.get(r)).copied().ok_or(MPI_ERR_RANK)
}

/// Writes a part's size and address.
///
/// # Safety
/// `size` must be null or valid for a write, `baseptr` null or a writable `void *`.
unsafe fn answer(part: (usize, MPI_Aint, c_int), size: *mut MPI_Aint, baseptr: *mut c_void) -> Result<(), c_int> {
    if baseptr.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: the caller's contract.
    unsafe {
        put(size, part.1)?;
        (baseptr as *mut *mut c_void).write(part.0 as *mut c_void);
    }
    Ok(())
}

mpi_fn! {
    /// The address (in this process), size and displacement unit of `rank`'s part of shared
    /// window `win` (`MPI_ERR_RMA_FLAVOR` for another window).
    fn MPI_Win_shared_query(wh: c_int, rank: c_int, size: *mut MPI_Aint, disp_unit: *mut c_int, baseptr: *mut c_void)
        on errc(wh) => {
        let part = query(wh, rank)?;
        // SAFETY: the caller vouches for the three pointers (null ones are refused).
        unsafe {
            put(disp_unit, part.2)?;
            answer(part, size, baseptr)
        }
    }
}

mpi_fn! {
    /// `MPI_Win_shared_query` with a large displacement unit.
    fn MPI_Win_shared_query_c(wh: c_int, rank: c_int, size: *mut MPI_Aint, disp_unit: *mut MPI_Aint, baseptr: *mut c_void)
        on errc(wh) => {
        let part = query(wh, rank)?;
        // SAFETY: the caller vouches for the three pointers (null ones are refused).
        unsafe {
            put(disp_unit, MPI_Aint::from(part.2))?;
            answer(part, size, baseptr)
        }
    }
}
