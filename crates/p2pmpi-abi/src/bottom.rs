//! `MPI_BOTTOM`: the address 0 as a buffer, with a derived datatype whose displacements are
//! absolute addresses (`MPI_Get_address`). The library's C layer refuses a null buffer, so
//! these calls run on the Rust API, which reads and writes at the datatype's displacements
//! from the buffer's address: point-to-point (`MPI_Send` and its blocking modes, `MPI_Recv`)
//! and `MPI_Bcast`. A failed communication there stops the job (no error return).

use crate::consts::*;
use crate::datatypes::datatype_ref;
use crate::handles::rust_comm;
use crate::status::MPI_Status;
use p2pmpi::collective::TryRoot;
use p2pmpi::datatype::{DynBuffer, DynBufferMut};
use p2pmpi::ffi;
use p2pmpi::traits::*;
use std::os::raw::{c_int, c_void};

/// Whether a call's buffer is `MPI_BOTTOM` with data to move (a derived datatype: a
/// predefined one at address 0 is no buffer, and the library's check refuses it).
pub fn is_bottom(buf: *const c_void, count: c_int, dt: c_int) -> bool {
    buf.is_null() && count > 0 && crate::datatypes::predefined(dt).is_none()
}

/// Checks a rank argument of communicator `rc` (`MPI_PROC_NULL` is one).
fn rank_ok(rc: &impl Communicator, r: c_int) -> Result<(), c_int> {
    if r == MPI_PROC_NULL || (0..rc.size()).contains(&r) {
        Ok(())
    } else {
        Err(MPI_ERR_RANK)
    }
}

/// Sends `count` elements of `dt` at absolute addresses.
pub fn send(count: c_int, dt: c_int, dest: c_int, tag: c_int, c: c_int, synchronous: bool) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    let d = datatype_ref(dt)?;
    rank_ok(&rc, dest)?;
    if tag < 0 {
        return Err(MPI_ERR_TAG);
    }
    if dest == MPI_PROC_NULL {
        return Ok(());
    }
    // SAFETY: the program vouches that the datatype's displacements are valid addresses of
    // `count` elements (MPI_BOTTOM's contract).
    let b = unsafe { DynBuffer::from_raw(std::ptr::null::<u8>(), count, d) };
    let p = rc.process_at_rank(dest);
    if synchronous {
        p.try_synchronous_send_with_tag(&b, tag).map_err(crate::errors::class_of_failure)?;
    } else {
        p.try_send_with_tag(&b, tag).map_err(crate::errors::class_of_failure)?;
    }
    Ok(())
}

/// Receives `count` elements of `dt` at absolute addresses.
///
/// # Safety
/// `st` must be null, `MPI_STATUS_IGNORE` or writable.
pub unsafe fn recv(
    count: c_int,
    dt: c_int,
    source: c_int,
    tag: c_int,
    c: c_int,
    st: *mut MPI_Status,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    let d = datatype_ref(dt)?;
    if source != MPI_ANY_SOURCE {
        rank_ok(&rc, source)?;
    }
    if tag < 0 && tag != MPI_ANY_TAG {
        return Err(MPI_ERR_TAG);
    }
    if source == MPI_PROC_NULL {
        if crate::status::wanted(st) {
            // SAFETY: the caller's contract.
            unsafe { st.write(MPI_Status::new(0, false, MPI_PROC_NULL, MPI_ANY_TAG, MPI_SUCCESS)) };
        }
        return Ok(());
    }
    // SAFETY: the program vouches that the datatype's displacements are valid, writable
    // addresses of `count` elements (MPI_BOTTOM's contract).
    let mut b = unsafe { DynBufferMut::from_raw(std::ptr::null_mut::<u8>(), count, d) };
    let s = if source == MPI_ANY_SOURCE {
        rc.any_process().try_receive_into_with_tag(&mut b, tag).map_err(crate::errors::class_of_failure)?
    } else {
        rc.process_at_rank(source).try_receive_into_with_tag(&mut b, tag).map_err(crate::errors::class_of_failure)?
    };
    // SAFETY: the caller's contract.
    unsafe { crate::status::put(st, &ffi::MPI_Status::from(s)) };
    Ok(())
}

/// Broadcasts `count` elements of `dt` at absolute addresses from `root`.
pub fn bcast(count: c_int, dt: c_int, root: c_int, c: c_int) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    let d = datatype_ref(dt)?;
    if !(0..rc.size()).contains(&root) {
        return Err(MPI_ERR_ROOT);
    }
    // SAFETY: as in `recv` (the root reads, the others write).
    let mut b = unsafe { DynBufferMut::from_raw(std::ptr::null_mut::<u8>(), count, d) };
    rc.process_at_rank(root).try_broadcast_into(&mut b).map_err(crate::errors::class_of_failure)?;
    Ok(())
}
