//! Error handlers and error classes: `MPI_Comm_set_errhandler`, `MPI_Comm_get_errhandler`,
//! `MPI_Comm_create_errhandler`, `MPI_Errhandler_free`, `MPI_Comm_call_errhandler` (and
//! MPI-1's names), `MPI_Error_class`, `MPI_Error_string`, the program's own classes and codes
//! (`MPI_Add_error_class`, `MPI_Add_error_code`, `MPI_Add_error_string`), and [`raise`],
//! where every failed call ends.
//!
//! Each communicator has `MPI_ERRORS_ARE_FATAL` until the program sets another handler
//! (`MPI_ERRORS_RETURN`, `MPI_ERRORS_ABORT`, which stops the job as the fatal one does here,
//! or one of its own, called with the communicator and the code, after which the call
//! returns the code). The library's error codes are the error classes themselves.

use crate::consts::*;
use crate::handles::{comm, object, Slab};
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

thread_local! {
    /// The library's description of the last failed communication of this thread, added to
    /// the message of the fatal handler.
    static DETAIL: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Keeps `detail` for the message of the fatal handler of the next error raised by this
/// thread (a function that fails with a class of its own and knows why).
pub fn note_detail(detail: String) {
    DETAIL.with(|d| *d.borrow_mut() = Some(detail));
}

/// The error class of a failed communication of the Rust API (kept, with its description,
/// for the message of the fatal handler): `MPI_ERR_TRUNCATE` for a message larger than the
/// buffer, `MPIX_ERR_PROC_FAILED` for a lost process, `MPIX_ERR_REVOKED`, `MPI_ERR_RANK`,
/// `MPI_ERR_BUFFER` for a full buffer of buffered sends, `MPI_ERR_OP`, `MPI_ERR_TRUNCATE` for
/// mismatched counts in a collective, `MPI_ERR_OTHER` for the others.
pub fn class_of_failure(e: p2pmpi::CommError) -> c_int {
    use p2pmpi::CommError as E;
    let class = match &e {
        E::Truncated { .. } | E::Count { .. } | E::SizeMismatch { .. } => MPI_ERR_TRUNCATE,
        E::PeerLost { rank, .. } => {
            p2pmpi::environment::note_lost_rank(*rank);
            MPIX_ERR_PROC_FAILED
        }
        E::Revoked => MPIX_ERR_REVOKED,
        E::InvalidRank { .. } => MPI_ERR_RANK,
        E::BufferExhausted { .. } => MPI_ERR_BUFFER,
        E::Operation(_) => MPI_ERR_OP,
        // The library's collectives describe a count mismatch between ranks so (its
        // `Collective` error has no finer kind).
        E::Collective(m) if m.contains("mismatched counts") => MPI_ERR_TRUNCATE,
        _ => MPI_ERR_OTHER,
    };
    DETAIL.with(|d| *d.borrow_mut() = Some(e.to_string()));
    class
}

/// What a call of `function` that failed with `class` answers on communicator `c` (the
/// world's handler serves when `c` is no communicator): the class under
/// `MPI_ERRORS_RETURN`; under the other handlers the job stops, with a message naming the
/// rank, the function and the cause.
pub fn raise(c: c_int, function: &str, class: c_int) -> c_int {
    let on = if comm(c).is_ok() { c } else { MPI_COMM_WORLD };
    let h = handler_of(on);
    let detail = DETAIL.with(|d| d.take()).map_or_else(String::new, |d| format!(": {d}"));
    // Under the C++ bindings' handler the call returns, and the bindings throw.
    if h == MPI_ERRORS_RETURN || h == MPIR_ERRORS_THROW_EXCEPTIONS {
        return class;
    }
    if let Some(f) = USER_HANDLERS.get(h) {
        let (mut c, mut code) = (on, class);
        // SAFETY: the program's handler, called as MPI says (the communicator and the code,
        // by address; through its language's caller, for a communicator, if it has one); it
        // may return, and the call then returns the code.
        unsafe {
            match f.1 {
                Some(call) => call(0, &mut c, &mut code, f.0),
                None => f.0(&mut c, &mut code),
            }
        };
        return class;
    }
    let cause = match describe(class) {
        Some((name, text)) => format!("{text} ({name}){detail}"),
        None => USER_ERRORS
            .read()
            .iter()
            .find(|e| e.code == class)
            .map_or_else(|| format!("error code {class}"), |e| format!("{} (error code {class})", e.text)),
    };
    p2pmpi::environment::abort_with_message(class, &format!("{function}: {cause}"))
}

/// A handler function (`MPI_Comm_errhandler_function`, variadic in C).
pub type HandlerFn = unsafe extern "C" fn(*mut c_int, *mut c_int, ...);

/// The caller of a handler of another language (`MPII_Errhandler_set_cxx`, by which the C++
/// bindings call theirs): `(kind of object: 0 for a communicator, the object, the code, the
/// handler)`.
pub type HandlerCaller = unsafe extern "C" fn(c_int, *mut c_int, *mut c_int, HandlerFn);

/// MPICH's handler for the C++ bindings' `MPI::ERRORS_THROW_EXCEPTIONS`: the call returns
/// the code, and the bindings throw it.
pub const MPIR_ERRORS_THROW_EXCEPTIONS: c_int = 0x5400_0002;

/// A handler made by the program, and its language's caller if it has one.
#[derive(Clone, Copy)]
pub struct UserHandler(HandlerFn, Option<HandlerCaller>);

/// Makes handler `h` called through `caller`; `false` if `h` names no handler of the
/// program.
pub fn set_caller(h: c_int, caller: HandlerCaller) -> bool {
    USER_HANDLERS.with_mut(h, |u| u.1 = Some(caller)).is_some()
}

/// The handlers the program made.
// Process-wide because a C handle is a plain integer any thread may hand to any function.
static USER_HANDLERS: Slab<UserHandler> = Slab::new(object::ERRHANDLER);

/// Whether `h` names a handler (predefined or made by the program).
pub(crate) fn is_handler(h: c_int) -> bool {
    [MPI_ERRORS_ARE_FATAL, MPI_ERRORS_RETURN, MPI_ERRORS_ABORT, MPIR_ERRORS_THROW_EXCEPTIONS].contains(&h)
        || USER_HANDLERS.get(h).is_some()
}

/// Sets the handler of communicator `c`.
fn set_handler(c: c_int, errhandler: c_int) -> Result<(), c_int> {
    comm(c)?;
    if !is_handler(errhandler) {
        return Err(MPI_ERR_ARG);
    }
    HANDLERS.write().get_or_insert_with(HashMap::new).insert(c, errhandler);
    Ok(())
}

/// Makes a handler of `function`.
///
/// # Safety
/// `errhandler` must be null or valid for a write.
pub(crate) unsafe fn create_handler(function: Option<HandlerFn>, errhandler: *mut c_int) -> Result<(), c_int> {
    let Some(f) = function else { return Err(MPI_ERR_ARG) };
    let h = USER_HANDLERS.insert(UserHandler(f, None));
    // SAFETY: the caller's contract.
    unsafe { crate::put(errhandler, h) }
}

mpi_fn! {
    /// Sets the error handler of `comm` (`MPI_ERRORS_ARE_FATAL`, `MPI_ERRORS_RETURN`,
    /// `MPI_ERRORS_ABORT` or one of `MPI_Comm_create_errhandler`).
    fn MPI_Comm_set_errhandler(c: c_int, errhandler: c_int) on c => set_handler(c, errhandler)
}

mpi_fn! {
    /// MPI-1's name of `MPI_Comm_set_errhandler`.
    fn MPI_Errhandler_set(c: c_int, errhandler: c_int) on c => set_handler(c, errhandler)
}

mpi_fn! {
    /// Makes an error handler of `function`, called with the communicator and the error
    /// code when a call on a communicator it is set on fails.
    fn MPI_Comm_create_errhandler(function: Option<HandlerFn>, errhandler: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { create_handler(function, errhandler) }
    }
}

mpi_fn! {
    /// MPI-1's name of `MPI_Comm_create_errhandler`.
    fn MPI_Errhandler_create(function: Option<HandlerFn>, errhandler: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { create_handler(function, errhandler) }
    }
}

mpi_fn! {
    /// Frees a handler handle and sets it to `MPI_ERRHANDLER_NULL` (the communicators it is
    /// set on keep it).
    fn MPI_Errhandler_free(errhandler: *mut c_int) on MPI_COMM_WORLD => {
        if errhandler.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        let h = unsafe { errhandler.read() };
        if !is_handler(h) {
            return Err(MPI_ERR_ARG);
        }
        // A handler stays usable by the communicators it is set on: its slot is kept.
        // SAFETY: as above.
        unsafe { errhandler.write(MPI_ERRHANDLER_NULL) };
        Ok(())
    }
}

mpi_fn! {
    /// Raises `errorcode` on `comm` as a failed call would: its handler runs.
    fn MPI_Comm_call_errhandler(c: c_int, errorcode: c_int) on c => {
        comm(c)?;
        raise(c, "MPI_Comm_call_errhandler", errorcode);
        Ok(())
    }
}

/// Writes the handler of `c` at `errhandler`.
///
/// # Safety
/// `errhandler` must be null or valid for a write.
unsafe fn get_handler(c: c_int, errhandler: *mut c_int) -> Result<(), c_int> {
    comm(c)?;
    // SAFETY: the caller's contract.
    unsafe { crate::put(errhandler, handler_of(c)) }
}

mpi_fn! {
    /// The error handler of `comm`.
    fn MPI_Comm_get_errhandler(c: c_int, errhandler: *mut c_int) on c => {
        // SAFETY: the caller's contract.
        unsafe { get_handler(c, errhandler) }
    }
}

mpi_fn! {
    /// MPI-1's name of `MPI_Comm_get_errhandler`.
    fn MPI_Errhandler_get(c: c_int, errhandler: *mut c_int) on c => {
        // SAFETY: the caller's contract.
        unsafe { get_handler(c, errhandler) }
    }
}

/// Raises `class` in `function` on an object other than a communicator (a window, a file, a
/// session) whose handler is `handler`: returned under `MPI_ERRORS_RETURN`, the program's
/// handler called with `object` (the address of the object's handle, as MPI says), else
/// fatal as on a communicator.
pub(crate) fn raise_on(handler: c_int, object: *mut std::os::raw::c_void, function: &str, class: c_int) -> c_int {
    if handler == MPI_ERRORS_RETURN || handler == MPIR_ERRORS_THROW_EXCEPTIONS {
        return class;
    }
    if let Some(f) = USER_HANDLERS.get(handler) {
        let mut code = class;
        // SAFETY: the program's handler, called as MPI says (the object's handle and the code,
        // by address); it may return, and the call then returns the code.
        unsafe { f.0(object.cast(), &mut code) };
        return class;
    }
    raise(MPI_COMM_WORLD, function, class)
}

/// An error class or code the program added: its class (itself for a class) and its text.
struct UserError {
    code: c_int,
    class: c_int,
    text: String,
}

/// The error classes and codes the program added (`MPI_Add_error_class`, `_code`).
// Process-wide, as error codes are.
static USER_ERRORS: RwLock<Vec<UserError>> = RwLock::new(Vec::new());

/// The first number given to an added class or code: above `MPI_ERR_LASTCODE`, as MPICH's
/// (mpi4py checks it).
const FIRST_USER_ERROR: c_int = 0x3fff_ffff + 2;

/// The classes MPICH answers for without knowing them: every number below 128 is a class of
/// its own (MPI 4.1's `MPI_ERR_ERRHANDLER`, 80, for one, which mpi4py knows).
const CLASS_MASK: c_int = 0x7f;

/// The last error code in use (`MPI_LASTUSEDCODE`'s value; the attribute gives its address).
// Process-wide, as error codes are.
pub static LAST_USED_CODE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(MPIX_ERR_REVOKED);

/// The class of error code `code`, if it is one.
fn class_of(code: c_int) -> Option<c_int> {
    if describe(code).is_some() || (0..=CLASS_MASK).contains(&code) {
        return Some(code);
    }
    USER_ERRORS.read().iter().find(|e| e.code == code).map(|e| e.class)
}

/// Adds a class or (with `class`) a code; its number.
fn add_error(class: Option<c_int>) -> c_int {
    let mut all = USER_ERRORS.write();
    // Never a number given before, removed ones included.
    let code = (LAST_USED_CODE.load(std::sync::atomic::Ordering::Relaxed) + 1).max(FIRST_USER_ERROR);
    all.push(UserError { code, class: class.unwrap_or(code), text: String::new() });
    LAST_USED_CODE.store(code, std::sync::atomic::Ordering::Relaxed);
    code
}

mpi_fn! {
    /// The error class of an error code.
    fn MPI_Error_class(errorcode: c_int, errorclass: *mut c_int) on MPI_COMM_WORLD => {
        let class = class_of(errorcode).ok_or(MPI_ERR_ARG)?;
        // SAFETY: the caller's contract.
        unsafe { crate::put(errorclass, class) }
    }
}

mpi_fn! {
    /// The text of an error code, at most `MPI_MAX_ERROR_STRING` bytes with its NUL.
    fn MPI_Error_string(errorcode: c_int, string: *mut c_char, resultlen: *mut c_int) on MPI_COMM_WORLD => {
        let text = match describe(errorcode) {
            Some((name, text)) => format!("{name}: {text}"),
            None if (0..=CLASS_MASK).contains(&errorcode) => format!("error class {errorcode}"),
            None => USER_ERRORS.read().iter().find(|e| e.code == errorcode).map(|e| e.text.clone()).ok_or(MPI_ERR_ARG)?,
        };
        // SAFETY: the caller vouches for `MPI_MAX_ERROR_STRING` bytes at `string`.
        unsafe { crate::put_string(&text, string, MPI_MAX_ERROR_STRING, resultlen) }
    }
}

mpi_fn! {
    /// Adds an error class; its number.
    fn MPI_Add_error_class(errorclass: *mut c_int) on MPI_COMM_WORLD => {
        if errorclass.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { errorclass.write(add_error(None)) };
        Ok(())
    }
}

mpi_fn! {
    /// Adds an error code of class `errorclass`; its number.
    fn MPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) on MPI_COMM_WORLD => {
        if class_of(errorclass) != Some(errorclass) || errorcode.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { errorcode.write(add_error(Some(errorclass))) };
        Ok(())
    }
}

mpi_fn! {
    /// Sets the text of an added error class or code.
    fn MPI_Add_error_string(errorcode: c_int, string: *const c_char) on MPI_COMM_WORLD => {
        if string.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches for a NUL-terminated string.
        let text = unsafe { std::ffi::CStr::from_ptr(string) }.to_string_lossy().into_owned();
        let mut all = USER_ERRORS.write();
        let e = all.iter_mut().find(|e| e.code == errorcode).ok_or(MPI_ERR_ARG)?;
        e.text = text;
        Ok(())
    }
}

mpi_fn! {
    /// Removes an error class the program added (MPI 4.1's `MPI_Remove_error_class`): refused
    /// (`MPI_ERR_ARG`) while codes of it remain, or for a class the library defines.
    fn MPIX_Delete_error_class(errorclass: c_int) on MPI_COMM_WORLD => {
        let mut all = USER_ERRORS.write();
        let i = all.iter().position(|e| e.code == errorclass && e.class == errorclass).ok_or(MPI_ERR_ARG)?;
        if all.iter().any(|e| e.class == errorclass && e.code != errorclass) {
            return Err(MPI_ERR_ARG);
        }
        all.remove(i);
        Ok(())
    }
}

mpi_fn! {
    /// Removes an error code the program added (MPI 4.1's `MPI_Remove_error_code`).
    fn MPIX_Delete_error_code(errorcode: c_int) on MPI_COMM_WORLD => {
        let mut all = USER_ERRORS.write();
        let i = all.iter().position(|e| e.code == errorcode && e.class != errorcode).ok_or(MPI_ERR_ARG)?;
        all.remove(i);
        Ok(())
    }
}

mpi_fn! {
    /// Removes the text of an error class or code the program added (MPI 4.1's
    /// `MPI_Remove_error_string`).
    fn MPIX_Delete_error_string(errorcode: c_int) on MPI_COMM_WORLD => {
        let mut all = USER_ERRORS.write();
        let e = all.iter_mut().find(|e| e.code == errorcode).ok_or(MPI_ERR_ARG)?;
        e.text.clear();
        Ok(())
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
