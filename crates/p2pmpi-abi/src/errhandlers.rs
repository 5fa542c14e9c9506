//! Error handlers of windows and sessions made by the program:
//! `MPI_Win_create_errhandler`, `MPI_Session_create_errhandler` (handlers of the same table as
//! communicators'), and `MPI_Win_call_errhandler`, `MPI_Session_call_errhandler`, which call an
//! object's handler with the object. Above [`crate::errors`] and the objects' modules
//! ([`crate::rma`], [`crate::session`]), which set and keep the handlers. Files' handlers are
//! [`crate::file`]'s.

use crate::consts::*;
use crate::errors::HandlerFn;
use std::os::raw::c_int;

/// `MPI_X_call_errhandler` of an object other than a communicator: `handler` is its handler
/// (the object checked by the caller); `MPI_SUCCESS` once the handler returned.
fn call_on(handler: c_int, object: *mut std::os::raw::c_void, function: &str, code: c_int) -> Result<(), c_int> {
    crate::errors::raise_on(handler, object, function, code);
    Ok(())
}

mpi_fn! {
    /// Makes an error handler for windows.
    fn MPI_Win_create_errhandler(function: Option<HandlerFn>, errhandler: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { crate::errors::create_handler(function, errhandler) }
    }
}

mpi_fn! {
    /// Makes an error handler for sessions.
    fn MPI_Session_create_errhandler(function: Option<HandlerFn>, errhandler: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { crate::errors::create_handler(function, errhandler) }
    }
}

mpi_fn! {
    /// Raises `errorcode` on window `win` as a failed call would: its handler runs.
    fn MPI_Win_call_errhandler(win: c_int, errorcode: c_int) on MPI_COMM_WORLD => {
        if !crate::rma::is_window(win) {
            return Err(MPI_ERR_WIN);
        }
        let mut h = MPI_ERRORS_ARE_FATAL;
        // SAFETY: `h` is writable; the window was checked.
        unsafe { crate::rma::MPI_Win_get_errhandler(win, &mut h) };
        let mut w = win;
        call_on(h, (&mut w as *mut c_int).cast(), "MPI_Win_call_errhandler", errorcode)
    }
}

mpi_fn! {
    /// Raises `errorcode` on session `s` as a failed call would: its handler runs.
    fn MPI_Session_call_errhandler(s: c_int, errorcode: c_int) on MPI_COMM_WORLD => {
        let mut h = MPI_ERRORS_ARE_FATAL;
        // SAFETY: `h` is writable; a session that is not one answers an error.
        let rc = unsafe { crate::session::MPI_Session_get_errhandler(s, &mut h) };
        if rc != MPI_SUCCESS {
            return Err(rc);
        }
        let mut x = s;
        call_on(h, (&mut x as *mut c_int).cast(), "MPI_Session_call_errhandler", errorcode)
    }
}
