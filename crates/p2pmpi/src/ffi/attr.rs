//! The C functions of attributes (`MPI_Comm_create_keyval`, `MPI_Comm_set_attr`, ...) over
//! the attribute tables of [`crate::attribute`].

use super::{c_int, c_void, MPI_Comm, MPI_Comm_copy_attr_function, MPI_Comm_delete_attr_function};
use crate::attribute::{create_keyval, delete_value, lock, store, Value, KEYVALS};
use crate::handles::{
    MPI_APPNUM, MPI_ERR_ARG, MPI_ERR_COMM, MPI_ERR_KEYVAL, MPI_KEYVAL_INVALID, MPI_SUCCESS, MPI_UNIVERSE_SIZE,
};
use crate::topology::handles::comm_from_raw;

const SUCCESS: c_int = MPI_SUCCESS as c_int;

/// Makes a new attribute key with these callbacks (`None`: nothing to do: no copy,
/// nothing to free) and extra state, written to `*comm_keyval`.
///
/// # Safety
/// `comm_keyval` must be valid for a write. The callbacks must be sound on every value
/// set under the key.
pub unsafe extern "C" fn MPI_Comm_create_keyval(
    comm_copy_attr_fn: MPI_Comm_copy_attr_function,
    comm_delete_attr_fn: MPI_Comm_delete_attr_function,
    comm_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    if comm_keyval.is_null() {
        return MPI_ERR_ARG as c_int;
    }
    let k = create_keyval(comm_copy_attr_fn, comm_delete_attr_fn, extra_state);
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { *comm_keyval = k };
    SUCCESS
}

/// Frees a key (values already set keep their callbacks) and sets `*comm_keyval` to
/// `MPI_KEYVAL_INVALID`.
///
/// # Safety
/// `comm_keyval` must be valid for a read and a write.
pub unsafe extern "C" fn MPI_Comm_free_keyval(comm_keyval: *mut c_int) -> c_int {
    if comm_keyval.is_null() {
        return MPI_ERR_ARG as c_int;
    }
    // SAFETY: checked non-null; the caller vouches it is readable and writable.
    let k = unsafe { *comm_keyval };
    if lock(&KEYVALS).remove(&k).is_none() {
        return MPI_ERR_KEYVAL as c_int;
    }
    // SAFETY: as above.
    unsafe { *comm_keyval = MPI_KEYVAL_INVALID as c_int };
    SUCCESS
}

/// Sets the attribute `comm_keyval` of `comm` to `attribute_val`, running the key's
/// delete callback on the value it replaces (its code is returned).
///
/// # Safety
/// The key's callbacks must accept `attribute_val`.
pub unsafe extern "C" fn MPI_Comm_set_attr(comm: MPI_Comm, comm_keyval: c_int, attribute_val: *mut c_void) -> c_int {
    let Some((h, _)) = comm_from_raw(comm, false) else { return MPI_ERR_COMM as c_int };
    let Some(callbacks) = lock(&KEYVALS).get(&comm_keyval).copied() else { return MPI_ERR_KEYVAL as c_int };
    let code = store(&h.attributes(), comm_keyval, Value { ptr: attribute_val, type_id: None, callbacks });
    code
}

/// Reads the attribute `comm_keyval` of `comm`: `*flag` is 1 and `*(attribute_val as
/// *mut *mut c_void)` the value if there is one, else `*flag` is 0. The predefined
/// `MPI_UNIVERSE_SIZE` and `MPI_APPNUM` give a pointer to a `c_int`.
///
/// # Safety
/// `attribute_val` must be valid for a write of a pointer, `flag` for a write.
pub unsafe extern "C" fn MPI_Comm_get_attr(
    comm: MPI_Comm,
    comm_keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    if attribute_val.is_null() || flag.is_null() {
        return MPI_ERR_ARG as c_int;
    }
    let Some((h, _)) = comm_from_raw(comm, false) else { return MPI_ERR_COMM as c_int };
    let found = if comm_keyval == MPI_UNIVERSE_SIZE as c_int || comm_keyval == MPI_APPNUM as c_int {
        // The values live in the context, which stays where it is for the whole run: their
        // addresses, handed out, stay valid.
        let attrs = &crate::context::current().attr_values;
        let p: &'static c_int = if comm_keyval == MPI_APPNUM as c_int {
            attrs.appnum.get_or_init(|| crate::bootstrap::appnum().try_into().unwrap_or(0))
        } else {
            attrs.universe_size.get_or_init(|| crate::bootstrap::universe_size().try_into().unwrap_or(c_int::MAX))
        };
        Some(p as *const c_int as *mut c_void)
    } else {
        h.0.attrs.lock().values.get(&comm_keyval).map(|v| v.ptr)
    };
    // SAFETY: checked non-null; the caller vouches both are writable.
    unsafe {
        *flag = found.is_some() as c_int;
        if let Some(p) = found {
            *(attribute_val as *mut *mut c_void) = p;
        }
    }
    SUCCESS
}

/// Removes the attribute `comm_keyval` of `comm`, running its delete callback (whose
/// code is returned). Removing an attribute that is not set does nothing.
///
/// # Safety
/// None beyond the callbacks' own.
pub unsafe extern "C" fn MPI_Comm_delete_attr(comm: MPI_Comm, comm_keyval: c_int) -> c_int {
    let Some((h, _)) = comm_from_raw(comm, false) else { return MPI_ERR_COMM as c_int };
    let old = h.0.attrs.lock().values.remove(&comm_keyval);
    old.map_or(SUCCESS, |v| delete_value(&h.attributes(), comm_keyval, v))
}
