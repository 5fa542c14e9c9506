//! Communicators and groups: `MPI_Comm_dup`, `MPI_Comm_split`, `MPI_Comm_create`,
//! `MPI_Comm_free`, `MPI_Comm_compare`, `MPI_Comm_group`, `MPI_Group_size`,
//! `MPI_Group_rank`, `MPI_Group_translate_ranks`, `MPI_Group_compare`, `MPI_Group_incl`,
//! `MPI_Group_excl`, `MPI_Group_union`, `MPI_Group_intersection`, `MPI_Group_difference`,
//! `MPI_Group_free`, `MPI_Group_range_incl`, `MPI_Group_range_excl`, `MPI_Comm_dup_with_info`,
//! names (`MPI_Comm_set_name`, `MPI_Comm_get_name`) and `MPI_Dims_create`.
//!
//! A new communicator gets its parent's error handler, as the standard says; a duplicate
//! gets its attributes as their copy callbacks decide, and freeing deletes them. The
//! communicators and groups are the library's (`p2pmpi::ffi`), named by handles of
//! [`COMMS`] and [`GROUPS`]. Intercommunicators and topologies are to come.

use crate::consts::*;
use crate::errors::{forget_handler, inherit_handler};
use crate::handles::{comm, group, new_comm, new_group, rust_comm, COMMS, GROUPS};
use crate::ok;
use p2pmpi::ffi;
use p2pmpi::traits::Communicator;
use std::os::raw::c_int;

/// Writes the new communicator `made` by the library at `out`, with `parent`'s handler.
///
/// # Safety
/// `out` must be valid for a write.
pub(crate) unsafe fn put_comm(out: *mut c_int, parent: c_int, made: ffi::MPI_Comm) {
    let h = new_comm(made);
    if h != MPI_COMM_NULL {
        inherit_handler(parent, h);
    }
    // SAFETY: the caller's contract.
    unsafe { out.write(h) };
}

/// The library's null communicator, to receive a new one.
pub(crate) fn null_comm() -> ffi::MPI_Comm {
    // SAFETY: the predefined names are initialized statics that nothing writes.
    unsafe { ffi::RSMPI_COMM_NULL }
}

/// The library's null group, to receive a new one.
fn null_group() -> ffi::MPI_Group {
    // SAFETY: the predefined names are initialized statics that nothing writes.
    unsafe { ffi::RSMPI_GROUP_NULL }
}

mpi_fn! {
    /// Duplicates `comm` (collective).
    fn MPI_Comm_dup(c: c_int, newcomm: *mut c_int) on c => {
        let fc = comm(c)?;
        if newcomm.is_null() {
            return Err(MPI_ERR_ARG);
        }
        if let Some(h) = crate::intercomm::split(c, 0, crate::handles::rust_comm(c)?.rank())? {
            // SAFETY: checked non-null; the caller vouches it is writable.
            unsafe { newcomm.write(h) };
            return crate::attributes::copy_all(c, h);
        }
        let mut d = null_comm();
        // SAFETY: `d` is a local.
        ok(unsafe { ffi::MPI_Comm_dup(fc, &mut d) })?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put_comm(newcomm, c, d) };
        // SAFETY: as above (just written).
        let d = unsafe { newcomm.read() };
        crate::topologies::copy(c, d);
        crate::attributes::copy_all(c, d)
    }
}

mpi_fn! {
    /// Splits `comm` by `color` (`MPI_UNDEFINED`: no new communicator), ordered by `key`.
    fn MPI_Comm_split(c: c_int, color: c_int, key: c_int, newcomm: *mut c_int) on c => {
        let fc = comm(c)?;
        if newcomm.is_null() {
            return Err(MPI_ERR_ARG);
        }
        if let Some(h) = crate::intercomm::split(c, color, key)? {
            // SAFETY: checked non-null; the caller vouches it is writable.
            unsafe { newcomm.write(h) };
            return Ok(());
        }
        let mut d = null_comm();
        // SAFETY: `d` is a local (`MPI_UNDEFINED` is the library's value too).
        ok(unsafe { ffi::MPI_Comm_split(fc, color, key, &mut d) })?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put_comm(newcomm, c, d) };
        Ok(())
    }
}

mpi_fn! {
    /// The communicator of the processes of `group`, a subgroup of `comm`'s (collective;
    /// `MPI_COMM_NULL` at the others).
    fn MPI_Comm_create(c: c_int, g: c_int, newcomm: *mut c_int) on c => {
        let (fc, fg) = (comm(c)?, group(g)?);
        if newcomm.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let mut d = null_comm();
        // SAFETY: `d` is a local.
        ok(unsafe { ffi::MPI_Comm_create(fc, fg, &mut d) })?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put_comm(newcomm, c, d) };
        Ok(())
    }
}

/// Frees communicator `*c` (its attributes deleted first) and sets it to `MPI_COMM_NULL`.
///
/// # Safety
/// `c` must be null or valid for reading and writing an `int`.
unsafe fn free(c: *mut c_int) -> Result<(), c_int> {
    if c.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: checked non-null; the caller vouches it is readable and writable.
    let h = unsafe { c.read() };
    comm(h)?;
    COMMS.with(h, |_| ()).ok_or(MPI_ERR_COMM)?;
    // The attributes' delete callbacks see the communicator still valid.
    let deleted = crate::attributes::delete_all(h);
    // Dropping the Rust object frees the communicator.
    drop(COMMS.take(h).ok_or(MPI_ERR_COMM)?);
    forget_handler(h);
    crate::topologies::forget(h);
    crate::intercoll::forget(h);
    // SAFETY: as above.
    unsafe { c.write(MPI_COMM_NULL) };
    deleted
}

mpi_fn! {
    /// Frees `*comm` and sets it to `MPI_COMM_NULL` (the world and self cannot be freed).
    fn MPI_Comm_free(c: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { free(c) }
    }
}

mpi_fn! {
    /// Disconnects `*comm` (of `MPI_Comm_spawn`'s, typically) and sets it to `MPI_COMM_NULL`:
    /// as `MPI_Comm_free`, the library's communication being complete once its requests are
    /// (the program completed them).
    fn MPI_Comm_disconnect(c: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { free(c) }
    }
}

mpi_fn! {
    /// Compares two communicators: `MPI_IDENT`, `MPI_CONGRUENT`, `MPI_SIMILAR` or
    /// `MPI_UNEQUAL`.
    fn MPI_Comm_compare(c1: c_int, c2: c_int, result: *mut c_int) on c1 => {
        let (a, b) = (comm(c1)?, comm(c2)?);
        if result.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable (the results have
        // MPICH's values).
        ok(unsafe { ffi::MPI_Comm_compare(a, b, result) })
    }
}

mpi_fn! {
    /// The group of `comm`.
    fn MPI_Comm_group(c: c_int, g: *mut c_int) on c => {
        let fc = comm(c)?;
        if g.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let mut fg = null_group();
        // SAFETY: `fg` is a local.
        ok(unsafe { ffi::MPI_Comm_group(fc, &mut fg) })?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { g.write(new_group(fg)) };
        Ok(())
    }
}

mpi_fn! {
    /// The number of processes of a group.
    fn MPI_Group_size(g: c_int, size: *mut c_int) on MPI_COMM_WORLD => {
        let fg = group(g)?;
        if size.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        ok(unsafe { ffi::MPI_Group_size(fg, size) })
    }
}

mpi_fn! {
    /// This process's rank in a group (`MPI_UNDEFINED` if it is not a member).
    fn MPI_Group_rank(g: c_int, rank: *mut c_int) on MPI_COMM_WORLD => {
        let fg = group(g)?;
        if rank.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        ok(unsafe { ffi::MPI_Group_rank(fg, rank) })
    }
}

mpi_fn! {
    /// Translates `n` ranks of `group1` into ranks of `group2` (`MPI_UNDEFINED` for those not
    /// in it).
    fn MPI_Group_translate_ranks(g1: c_int, n: c_int, ranks1: *const c_int, g2: c_int, ranks2: *mut c_int)
        on MPI_COMM_WORLD => {
        let (a, b) = (group(g1)?, group(g2)?);
        // SAFETY: the caller vouches for `n` ranks at each array.
        ok(unsafe { ffi::MPI_Group_translate_ranks(a, n, ranks1, b, ranks2) })
    }
}

mpi_fn! {
    /// Compares two groups: `MPI_IDENT`, `MPI_SIMILAR` or `MPI_UNEQUAL`.
    fn MPI_Group_compare(g1: c_int, g2: c_int, result: *mut c_int) on MPI_COMM_WORLD => {
        let (a, b) = (group(g1)?, group(g2)?);
        if result.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        ok(unsafe { ffi::MPI_Group_compare(a, b, result) })
    }
}

/// Makes a group from one: `f` calls the library with the library's handle and a local for
/// the new group, which is written at `out`.
///
/// # Safety
/// `out` must be null or valid for a write; `f` must be sound to call.
unsafe fn make_group(out: *mut c_int, f: impl FnOnce(*mut ffi::MPI_Group) -> c_int) -> Result<(), c_int> {
    if out.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let mut fg = null_group();
    ok(f(&mut fg))?;
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { out.write(new_group(fg)) };
    Ok(())
}

mpi_fn! {
    /// The group of the `n` processes of `group` at `ranks`, in that order.
    fn MPI_Group_incl(g: c_int, n: c_int, ranks: *const c_int, newgroup: *mut c_int) on MPI_COMM_WORLD => {
        let fg = group(g)?;
        // SAFETY: the caller vouches for `n` ranks.
        unsafe { make_group(newgroup, |out| ffi::MPI_Group_incl(fg, n, ranks, out)) }
    }
}

mpi_fn! {
    /// The group of the processes of `group` but the `n` at `ranks`.
    fn MPI_Group_excl(g: c_int, n: c_int, ranks: *const c_int, newgroup: *mut c_int) on MPI_COMM_WORLD => {
        let fg = group(g)?;
        // SAFETY: the caller vouches for `n` ranks.
        unsafe { make_group(newgroup, |out| ffi::MPI_Group_excl(fg, n, ranks, out)) }
    }
}

mpi_fn! {
    /// The processes of `group1`, then those of `group2` not in `group1`.
    fn MPI_Group_union(g1: c_int, g2: c_int, newgroup: *mut c_int) on MPI_COMM_WORLD => {
        let (a, b) = (group(g1)?, group(g2)?);
        // SAFETY: the library writes one handle at `out`.
        unsafe { make_group(newgroup, |out| ffi::MPI_Group_union(a, b, out)) }
    }
}

mpi_fn! {
    /// The processes of `group1` that are in `group2`.
    fn MPI_Group_intersection(g1: c_int, g2: c_int, newgroup: *mut c_int) on MPI_COMM_WORLD => {
        let (a, b) = (group(g1)?, group(g2)?);
        // SAFETY: the library writes one handle at `out`.
        unsafe { make_group(newgroup, |out| ffi::MPI_Group_intersection(a, b, out)) }
    }
}

mpi_fn! {
    /// The processes of `group1` that are not in `group2`.
    fn MPI_Group_difference(g1: c_int, g2: c_int, newgroup: *mut c_int) on MPI_COMM_WORLD => {
        let (a, b) = (group(g1)?, group(g2)?);
        // SAFETY: the library writes one handle at `out`.
        unsafe { make_group(newgroup, |out| ffi::MPI_Group_difference(a, b, out)) }
    }
}

mpi_fn! {
    /// Frees `*group` and sets it to `MPI_GROUP_NULL`.
    fn MPI_Group_free(g: *mut c_int) on MPI_COMM_WORLD => {
        if g.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        let h = unsafe { g.read() };
        if h != MPI_GROUP_EMPTY {
            let mut fg = GROUPS.take(h).ok_or(MPI_ERR_GROUP)?;
            // SAFETY: `fg` is a local.
            ok(unsafe { ffi::MPI_Group_free(&mut fg) })?;
        }
        // SAFETY: as above.
        unsafe { g.write(MPI_GROUP_NULL) };
        Ok(())
    }
}

mpi_fn! {
    /// Names `comm` (at most `MPI_MAX_OBJECT_NAME - 1` bytes are kept).
    fn MPI_Comm_set_name(c: c_int, name: *const std::os::raw::c_char) on c => {
        let rc = rust_comm(c)?;
        if name.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches for a NUL-terminated string.
        let s = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
        let mut end = s.len().min(MPI_MAX_OBJECT_NAME as usize - 1);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        if c == MPI_COMM_SELF {
            // The library does not keep a name for its "self" communicator: kept here.
            *SELF_NAME.lock() = Some(s[..end].to_string());
        } else {
            rc.set_name(&s[..end]);
        }
        Ok(())
    }
}

/// The name set on `MPI_COMM_SELF`, if any.
// Process-wide: one `MPI_COMM_SELF` per process.
static SELF_NAME: parking_lot::Mutex<Option<String>> = parking_lot::Mutex::new(None);

mpi_fn! {
    /// The name of `comm` (`MPI_COMM_WORLD`, `MPI_COMM_SELF`, or what was set; empty if none).
    fn MPI_Comm_get_name(c: c_int, name: *mut std::os::raw::c_char, resultlen: *mut c_int) on c => {
        let rc = rust_comm(c)?;
        let n = match c {
            MPI_COMM_SELF => SELF_NAME.lock().clone().unwrap_or_else(|| "MPI_COMM_SELF".to_string()),
            _ => rc.get_name(),
        };
        // SAFETY: the caller vouches for `MPI_MAX_OBJECT_NAME` bytes at `name`.
        unsafe { crate::put_string(&n, name, MPI_MAX_OBJECT_NAME, resultlen) }
    }
}

mpi_fn! {
    /// Fills the zero entries of `dims` (`ndims` of them) with a balanced factorization of
    /// `nnodes`.
    fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) on MPI_COMM_WORLD => {
        if ndims < 0 || (ndims > 0 && dims.is_null()) {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: the caller vouches for `ndims` entries at `dims`.
        ok(unsafe { ffi::MPI_Dims_create(nnodes, ndims, dims) })
    }
}

/// The ranks `n` ranges `(first, last, stride)` at `ranges` cover, in order.
///
/// # Safety
/// `ranges` must be valid for `n` triples.
unsafe fn expand(n: c_int, ranges: *const [c_int; 3]) -> Result<Vec<c_int>, c_int> {
    if n < 0 {
        return Err(MPI_ERR_ARG);
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    if ranges.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: non-null, and the caller vouches for `n` triples.
    let rs = unsafe { std::slice::from_raw_parts(ranges, n as usize) };
    let mut out = Vec::new();
    for &[first, last, stride] in rs {
        if stride == 0 || (stride > 0 && first > last) || (stride < 0 && first < last) {
            return Err(MPI_ERR_ARG);
        }
        let mut r = first;
        while (stride > 0 && r <= last) || (stride < 0 && r >= last) {
            out.push(r);
            r += stride;
        }
    }
    Ok(out)
}

mpi_fn! {
    /// The group of the processes of `group` in the ranges `(first, last, stride)`.
    fn MPI_Group_range_incl(g: c_int, n: c_int, ranges: *const [c_int; 3], newgroup: *mut c_int) on MPI_COMM_WORLD => {
        let fg = group(g)?;
        // SAFETY: the caller vouches for `n` ranges.
        let ranks = unsafe { expand(n, ranges)? };
        // SAFETY: `ranks` holds the ranks.
        unsafe { make_group(newgroup, |out| ffi::MPI_Group_incl(fg, ranks.len() as c_int, ranks.as_ptr(), out)) }
    }
}

mpi_fn! {
    /// The group of the processes of `group` outside the ranges `(first, last, stride)`.
    fn MPI_Group_range_excl(g: c_int, n: c_int, ranges: *const [c_int; 3], newgroup: *mut c_int) on MPI_COMM_WORLD => {
        let fg = group(g)?;
        // SAFETY: the caller vouches for `n` ranges.
        let ranks = unsafe { expand(n, ranges)? };
        // SAFETY: `ranks` holds the ranks.
        unsafe { make_group(newgroup, |out| ffi::MPI_Group_excl(fg, ranks.len() as c_int, ranks.as_ptr(), out)) }
    }
}

mpi_fn! {
    /// `MPI_Comm_dup` (the hints are not used).
    fn MPI_Comm_dup_with_info(c: c_int, _info: c_int, newcomm: *mut c_int) on c => {
        // SAFETY: the caller's contract.
        ok(unsafe { MPI_Comm_dup(c, newcomm) })
    }
}

mpi_fn! {
    /// The hints in use on `comm`: a new, empty info object (none are used).
    fn MPI_Comm_get_info(c: c_int, info: *mut c_int) on c => {
        comm(c)?;
        // SAFETY: the caller's contract.
        ok(unsafe { crate::info::MPI_Info_create(info) })
    }
}

mpi_fn! {
    /// Sets hints on `comm` (none are used).
    fn MPI_Comm_set_info(c: c_int, _info: c_int) on c => comm(c).map(drop)
}
