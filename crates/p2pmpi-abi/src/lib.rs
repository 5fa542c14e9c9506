//! p2pmpi under MPICH's binary interface (the "MPICH ABI" of MPICH, Intel MPI, Cray MPICH and
//! MVAPICH): built as `libmpi.so.12`, it runs unchanged the C and C++ programs linked by
//! `mpicc.mpich` (found first on the library path as `libmpich.so.12`) and the programs that
//! load an MPI library by name at run time (mpi4py's binary wheels: `libmpi.so`).
//!
//! **Structure.** One module per family of MPI functions ([`environment`],
//! [`point_to_point`], [`collective`], [`communicators`], ...); each function is defined once
//! with [`mpi_fn!`], which exports it under its `MPI_` and `PMPI_` names and sends its errors
//! to the error handler of its communicator ([`errors`]). The functions sit on the `p2pmpi`
//! library: its C layer (`p2pmpi::ffi`, rsmpi's `mpi::ffi`) and its Rust API. [`handles`]
//! translates MPICH's integer handles into the library's: predefined handles by tables
//! ([`datatypes`], [`ops`]), the others by a [`handles::Slab`] per kind of object. [`status`]
//! is MPICH's `MPI_Status`. The values are MPICH 4's ([`consts`], and `include/mpi.h` for C).
//! The functions not provided yet are [`stubs`] that fail with
//! `MPI_ERR_UNSUPPORTED_OPERATION`, and [`data`] holds the exported variables of the ABI.
//!
//! docs/mpich-abi.md lists the families covered and those still to come.
#![allow(non_snake_case, non_camel_case_types, non_upper_case_globals)]

#[macro_use]
mod export;
pub mod alltoallw;
pub mod attributes;
pub mod bottom;
pub mod checkpoint;
pub mod collective;
pub mod comm_more;
pub mod communicators;
pub mod consts;
pub mod conversions;
pub mod cxx;
pub mod darray;
pub mod data;
pub mod datatypes;
pub mod derived;
pub mod environment;
pub mod errhandlers;
pub mod errors;
pub mod exchange;
pub mod external;
pub mod f90_types;
pub mod fast;
pub mod file;
pub mod file_io;
pub mod gpu;
pub mod graph;
pub mod grequest;
pub mod handle_bits;
pub mod handles;
pub mod immediate;
pub mod info;
pub mod intercoll;
pub mod intercomm;
pub mod isendrecv;
pub mod ivarcount;
pub mod kept;
pub mod large_count;
pub mod matched;
pub mod more_types;
pub mod neighbor;
pub mod ops;
pub mod pack;
pub mod partitioned;
pub mod pcoll;
pub mod point_to_point;
pub mod removed;
pub mod reqtable;
pub mod rma;
pub mod session;
pub mod shm;
pub mod spawn;
pub mod status;
pub mod stubs;
pub mod topologies;
pub mod topology;
pub mod ulfm;
pub mod user_ops;
pub mod varcount;
pub mod win_pscw;
pub mod win_request;
pub mod win_shared;

/// The answer of a function of `p2pmpi::ffi` (whose error classes are MPICH's numbers) as a
/// result.
#[inline]
pub(crate) fn ok(rc: std::os::raw::c_int) -> Result<(), std::os::raw::c_int> {
    if rc == consts::MPI_SUCCESS {
        Ok(())
    } else {
        Err(rc)
    }
}

/// Whether a buffer argument is `MPI_IN_PLACE`.
#[inline]
pub(crate) fn is_in_place<T>(p: *const T) -> bool {
    std::ptr::eq(p as *const std::os::raw::c_void, consts::MPI_IN_PLACE)
}

/// A buffer argument where `MPI_IN_PLACE` does not apply: refused (`MPI_ERR_BUFFER`) rather
/// than read at address -1.
#[inline]
pub(crate) fn not_in_place<T>(p: *const T) -> Result<(), std::os::raw::c_int> {
    if is_in_place(p) {
        Err(consts::MPI_ERR_BUFFER)
    } else {
        Ok(())
    }
}

/// A buffer's address for the library: a null address of no elements becomes a dangling,
/// aligned one (the library may view the buffer as an empty slice, whose address must not be
/// null); any other address is kept.
#[inline]
pub(crate) fn nz(p: *const std::os::raw::c_void, count: std::os::raw::c_int) -> *const std::os::raw::c_void {
    nz_mut(p as *mut std::os::raw::c_void, count)
}

/// [`nz`] for a writable buffer.
#[inline]
pub(crate) fn nz_mut(p: *mut std::os::raw::c_void, count: std::os::raw::c_int) -> *mut std::os::raw::c_void {
    if p.is_null() && count == 0 {
        std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut std::os::raw::c_void
    } else {
        p
    }
}

/// Writes `v` at `out`, or answers `MPI_ERR_ARG` for a null pointer.
///
/// # Safety
/// `out` must be null or valid for a write.
pub unsafe fn put<T>(out: *mut T, v: T) -> Result<(), std::os::raw::c_int> {
    if out.is_null() {
        return Err(consts::MPI_ERR_ARG);
    }
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { out.write(v) };
    Ok(())
}

/// Copies `s` (cut to `max - 1` bytes) and a NUL to `buf`, and its length to `len`.
///
/// # Safety
/// `buf` must be valid for `max` bytes of writes, `len` for a write.
pub unsafe fn put_string(
    s: &str,
    buf: *mut std::os::raw::c_char,
    max: std::os::raw::c_int,
    len: *mut std::os::raw::c_int,
) -> Result<(), std::os::raw::c_int> {
    if buf.is_null() || len.is_null() {
        return Err(consts::MPI_ERR_ARG);
    }
    let n = s.len().min(max as usize - 1);
    // SAFETY: `n + 1 <= max` bytes, which the caller vouches are writable at `buf`; `s` has
    // at least `n` bytes and does not overlap the caller's buffer.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
        len.write(n as std::os::raw::c_int);
    }
    Ok(())
}

/// `n` counts or displacements at `p` as `int`s (`MPI_ERR_COUNT` for one out of range or a
/// negative count).
///
/// # Safety
/// `p` must be valid for `n` reads.
pub(crate) unsafe fn ints<T: Copy + TryInto<std::os::raw::c_int>>(
    p: *const T,
    n: usize,
    counts: bool,
) -> Result<Vec<std::os::raw::c_int>, std::os::raw::c_int> {
    if p.is_null() {
        return if n == 0 { Ok(Vec::new()) } else { Err(consts::MPI_ERR_ARG) };
    }
    // SAFETY: non-null, and the caller vouches for `n` elements.
    let s = unsafe { std::slice::from_raw_parts(p, n) };
    let v: Vec<std::os::raw::c_int> =
        s.iter().map(|&x| x.try_into().map_err(|_| consts::MPI_ERR_COUNT)).collect::<Result<_, _>>()?;
    if v.iter().any(|&x| x < 0) {
        return Err(if counts { consts::MPI_ERR_COUNT } else { consts::MPI_ERR_ARG });
    }
    Ok(v)
}
