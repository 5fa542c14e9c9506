//! Attributes of datatypes: `MPI_Type_create_keyval`, `MPI_Type_free_keyval`,
//! `MPI_Type_set_attr`, `MPI_Type_get_attr`, `MPI_Type_delete_attr`. They live in
//! [`crate::attributes`]' table, keyed by the datatype's handle, with its keys: copied by the
//! keys' copy callbacks at `MPI_Type_dup`, deleted by their delete callbacks at
//! `MPI_Type_free` ([`crate::derived`]).

use crate::attributes::{self, CopyFn, DeleteFn};
use crate::consts::*;
use std::os::raw::{c_int, c_void};

/// Checks that `dt` names a datatype (predefined or the program's).
fn datatype_ok(dt: c_int) -> Result<(), c_int> {
    crate::datatypes::any_datatype(dt).map(|_| ())
}

mpi_fn! {
    /// Makes a key for attributes of datatypes (copied at `MPI_Type_dup`, deleted at
    /// `MPI_Type_free`).
    fn MPI_Type_create_keyval(copy: Option<CopyFn>, del: Option<DeleteFn>, keyval: *mut c_int, extra: *mut c_void)
        on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { attributes::create(copy, del, keyval, extra) }
    }
}

mpi_fn! {
    /// Frees a key of datatypes and sets it to `MPI_KEYVAL_INVALID`.
    fn MPI_Type_free_keyval(keyval: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { attributes::free(keyval) }
    }
}

mpi_fn! {
    /// Sets an attribute of datatype `dt`.
    fn MPI_Type_set_attr(dt: c_int, key: c_int, value: *mut c_void) on MPI_COMM_WORLD => {
        datatype_ok(dt)?;
        attributes::set_on(dt, key, value)
    }
}

mpi_fn! {
    /// Reads an attribute of datatype `dt` (`*flag` 0 if it is not set).
    fn MPI_Type_get_attr(dt: c_int, key: c_int, value: *mut c_void, flag: *mut c_int) on MPI_COMM_WORLD => {
        datatype_ok(dt)?;
        // SAFETY: the caller's contract.
        unsafe { attributes::get_on(dt, key, value, flag, false) }
    }
}

mpi_fn! {
    /// Deletes an attribute of datatype `dt` by its delete callback.
    fn MPI_Type_delete_attr(dt: c_int, key: c_int) on MPI_COMM_WORLD => {
        datatype_ok(dt)?;
        attributes::delete_on(dt, key)
    }
}
