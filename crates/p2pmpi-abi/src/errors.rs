//! Error handlers and error classes: `MPI_Comm_set_errhandler`, `MPI_Comm_get_errhandler`,
//! `MPI_Error_class`, `MPI_Error_string`, and [`raise`], where every failed call ends.
//!
//! Each communicator has `MPI_ERRORS_ARE_FATAL` until the program sets another handler
//! (`MPI_ERRORS_RETURN`, or `MPI_ERRORS_ABORT`, which stops the job as the fatal one does
//! here). User handlers (`MPI_Comm_create_errhandler`) are to come. The error codes are the
//! error classes themselves.

use crate::consts::*;
use crate::handles::comm;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::os::raw::{c_char, c_int};

/// The handlers set on communicators (absent: `MPI_ERRORS_ARE_FATAL`).
// Process-wide because a communicator handle is a plain integer any thread may use.
static HANDLERS: RwLock<Option<HashMap<c_int, c_int>>> = RwLock::new(None);

/// The handler of communicator `c`.
pub fn handler_of(c: c_int) -> c_int {
    HANDLERS.read().as_ref().and_then(|m| m.get(&c).copied()).unwrap_or(MPI_ERRORS_ARE_FATAL)
}

/// Gives communicator `child` the handler of `parent` (a new communicator's).
pub fn inherit_handler(parent: c_int, child: c_int) {
    let h = handler_of(parent);
    let mut m = HANDLERS.write();
    let m = m.get_or_insert_with(HashMap::new);
    if h == MPI_ERRORS_ARE_FATAL {
        m.remove(&child);
    } else {
        m.insert(child, h);
    }
}

/// Forgets the handler of a freed communicator (its handle may name another one later).
pub fn forget_handler(c: c_int) {
    if let Some(m) = HANDLERS.write().as_mut() {
        m.remove(&c);
    }
}

/// The name and description of error class `class`.
pub fn describe(class: c_int) -> Option<(&'static str, &'static str)> {
    ERROR_CLASSES.iter().find(|(c, _, _)| *c == class).map(|&(_, n, t)| (n, t))
}

/// What a call of `function` that failed with `class` answers on communicator `c` (the
/// world's handler serves when `c` is no communicator): the class under
/// `MPI_ERRORS_RETURN`; under the other handlers the job stops, with a message naming the
/// rank, the function and the cause.
pub fn raise(c: c_int, function: &str, class: c_int) -> c_int {
    let on = if comm(c).is_ok() { c } else { MPI_COMM_WORLD };
    if handler_of(on) == MPI_ERRORS_RETURN {
        return class;
    }
    let (name, text) = describe(class).unwrap_or(("MPI_ERR_UNKNOWN", "unknown error"));
    p2pmpi::environment::abort_with_message(class, &format!("{function}: {text} ({name})"))
}

mpi_fn! {
    /// Sets the error handler of `comm` (`MPI_ERRORS_ARE_FATAL`, `MPI_ERRORS_RETURN` or
    /// `MPI_ERRORS_ABORT`).
    fn MPI_Comm_set_errhandler(c: c_int, errhandler: c_int) on c => {
        comm(c)?;
        if ![MPI_ERRORS_ARE_FATAL, MPI_ERRORS_RETURN, MPI_ERRORS_ABORT].contains(&errhandler) {
            return Err(MPI_ERR_ARG);
        }
        HANDLERS.write().get_or_insert_with(HashMap::new).insert(c, errhandler);
        Ok(())
    }
}

mpi_fn! {
    /// The error handler of `comm`.
    fn MPI_Comm_get_errhandler(c: c_int, errhandler: *mut c_int) on c => {
        comm(c)?;
        if errhandler.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { errhandler.write(handler_of(c)) };
        Ok(())
    }
}

mpi_fn! {
    /// The error class of an error code (here every code is its class).
    fn MPI_Error_class(errorcode: c_int, errorclass: *mut c_int) on MPI_COMM_WORLD => {
        if describe(errorcode).is_none() || errorclass.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { errorclass.write(errorcode) };
        Ok(())
    }
}

mpi_fn! {
    /// The text of an error code, at most `MPI_MAX_ERROR_STRING` bytes with its NUL.
    fn MPI_Error_string(errorcode: c_int, string: *mut c_char, resultlen: *mut c_int) on MPI_COMM_WORLD => {
        let Some((name, text)) = describe(errorcode) else { return Err(MPI_ERR_ARG) };
        // SAFETY: the caller vouches for `MPI_MAX_ERROR_STRING` bytes at `string`.
        unsafe { crate::environment::put_string(&format!("{name}: {text}"), string, MPI_MAX_ERROR_STRING, resultlen) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_is_described_once() {
        let mut seen = std::collections::HashSet::new();
        for &(c, n, t) in ERROR_CLASSES {
            assert!(seen.insert(c), "{n}");
            assert!(!t.is_empty());
        }
        assert_eq!(describe(MPI_ERR_RANK).map(|d| d.0), Some("MPI_ERR_RANK"));
        assert_eq!(describe(54), None);
    }

    #[test]
    fn the_default_handler_is_fatal() {
        assert_eq!(handler_of(MPI_COMM_WORLD), MPI_ERRORS_ARE_FATAL);
    }
}
