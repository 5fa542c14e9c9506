//! Application checkpoints for C programs (issue 41), the library's pair under MPICH-style
//! extension names: `MPIX_Checkpoint(step, state, size)` (collective over `MPI_COMM_WORLD`:
//! the program's state as bytes, kept with the library's) and `MPIX_Restored(&step, &state,
//! &size, &flag)` (in a process restarted from a checkpoint, the step and a copy of the state,
//! allocated as `MPI_Alloc_mem` does and freed by the caller with `MPI_Free_mem`; `flag` 0 on
//! a fresh start). They are [`p2pmpi::checkpoint::checkpoint_bytes`] and
//! [`p2pmpi::checkpoint::restored_bytes`]: a checkpoint is consistent (no message in flight),
//! a restore into another program stops the process with a message that says so.

use crate::consts::*;
use crate::datatypes::MPI_Count;
use crate::errors::{handler_of, note_detail};
use p2pmpi::checkpoint::Error;
use std::os::raw::{c_int, c_void};

/// The type name the pieces of C programs carry (their state is bytes).
const TYPE_NAME: &str = "C bytes (MPIX_Checkpoint)";

/// The error class of a checkpoint not taken.
fn class_of(e: &Error) -> c_int {
    match e {
        Error::InFlight { .. } => MPI_ERR_PENDING,
        Error::Steps { .. } => MPI_ERR_ARG,
        Error::Store { .. } => MPI_ERR_IO,
        Error::NoStore | Error::Serialize(_) => MPI_ERR_OTHER,
    }
}

mpi_fn! {
    /// `MPIX_Checkpoint`: every rank's `size` bytes at `state`, taken at `step`.
    fn MPIX_Checkpoint(step: MPI_Count, state: *const c_void, size: MPI_Count) on MPI_COMM_WORLD => {
        if step < 0 || size < 0 || (state.is_null() && size > 0) {
            return Err(MPI_ERR_ARG);
        }
        let bytes: &[u8] = if size == 0 {
            &[]
        } else {
            // SAFETY: non-null, and the caller vouches for `size` readable bytes at `state`.
            unsafe { std::slice::from_raw_parts(state as *const u8, size as usize) }
        };
        p2pmpi::checkpoint::checkpoint_bytes(step as u64, TYPE_NAME, bytes).map_err(|e| {
            if handler_of(MPI_COMM_WORLD) == MPI_ERRORS_RETURN {
                // The class alone would not say why: the cause goes to standard error.
                eprintln!("p2pmpi: MPIX_Checkpoint: {e}");
            }
            let class = class_of(&e);
            note_detail(e.to_string());
            class
        })
    }
}

mpi_fn! {
    /// `MPIX_Restored`: the checkpoint this restarted process resumes from (`*flag` 1), or
    /// nothing (`*flag` 0, `*state` NULL, `*step` and `*size` 0).
    fn MPIX_Restored(step: *mut MPI_Count, state: *mut *mut c_void, size: *mut MPI_Count, flag: *mut c_int) on MPI_COMM_WORLD => {
        if step.is_null() || state.is_null() || size.is_null() || flag.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let (s, p, n, f) = match p2pmpi::checkpoint::restored_bytes(TYPE_NAME) {
            None => (0, std::ptr::null_mut(), 0, 0),
            Some((s, bytes)) => {
                // SAFETY: malloc of a size (at least 1), as MPI_Alloc_mem does; freed by
                // MPI_Free_mem.
                let p = unsafe { libc::malloc(bytes.len().max(1)) };
                if p.is_null() {
                    return Err(MPI_ERR_NO_MEM);
                }
                // SAFETY: `p` holds `bytes.len()` bytes, and does not overlap `bytes`.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p as *mut u8, bytes.len()) };
                (s as MPI_Count, p, bytes.len() as MPI_Count, 1)
            }
        };
        // SAFETY: the four pointers checked non-null; the caller vouches they are writable.
        unsafe {
            step.write(s);
            state.write(p);
            size.write(n);
            flag.write(f);
        }
        Ok(())
    }
}
