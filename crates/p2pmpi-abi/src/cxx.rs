//! What the C++ bindings of Debian's MPICH (`libmpichcxx.so.12`, linked by `mpicxx.mpich`)
//! need of the C library besides the MPI functions: `MPII_Op_set_cxx`,
//! `MPII_Errhandler_set_cxx` and `MPII_Keyval_set_proxy`, with MPICH's meaning. The bindings
//! make their operations, error handlers and attribute keys with the C functions, giving
//! their C++ functions as C ones, then name a caller of their own that calls such a function
//! as C++ expects (with a `MPI::Datatype`, a `MPI::Comm&`, ...): from then on the library
//! calls the program's function through that caller.

use crate::attributes::{CopyProxy, DeleteProxy};
use crate::errors::HandlerCaller;
use crate::user_ops::OpCaller;
use std::os::raw::c_int;

/// The function of operation `op` is called through `caller`, as `caller(invec, inoutvec,
/// len, datatype, function)`.
///
/// # Safety
/// `caller` must be such a function, or null (ignored).
#[no_mangle]
pub unsafe extern "C" fn MPII_Op_set_cxx(op: c_int, caller: Option<OpCaller>) {
    if let Some(c) = caller {
        crate::user_ops::set_caller(op, c);
    }
}

/// The function of error handler `errhandler` is called through `caller`, as `caller(kind,
/// &object, &code, function)` (kind 0 for a communicator).
///
/// # Safety
/// `caller` must be such a function, or null (ignored).
#[no_mangle]
pub unsafe extern "C" fn MPII_Errhandler_set_cxx(errhandler: c_int, caller: Option<HandlerCaller>) {
    if let Some(c) = caller {
        crate::errors::set_caller(errhandler, c);
    }
}

/// The copy and delete callbacks of key `keyval` are called through `copy` and `delete`:
/// `copy(callback, object, key, extra state, kind of value, value, &copy, &flag)` and
/// `delete(callback, object, key, kind of value, value, extra state)`.
///
/// # Safety
/// `copy` and `delete` must be such functions, or null (then nothing changes).
#[no_mangle]
pub unsafe extern "C" fn MPII_Keyval_set_proxy(keyval: c_int, copy: Option<CopyProxy>, delete: Option<DeleteProxy>) {
    if let (Some(c), Some(d)) = (copy, delete) {
        crate::attributes::set_proxy(keyval, c, d);
    }
}
