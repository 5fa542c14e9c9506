//! Sessions (MPI 4), over the world the process joined at `MPI_Init`: `MPI_Session_init`,
//! `MPI_Session_finalize`, `MPI_Session_set_errhandler` and `MPI_Session_get_errhandler` (the
//! predefined handlers, recorded; an error goes to `MPI_COMM_WORLD`'s handler),
//! `MPI_Session_get_num_psets`, `MPI_Session_get_nth_pset`, `MPI_Session_get_info`,
//! `MPI_Session_get_pset_info` (`mpi_size`), `MPI_Group_from_session_pset` and
//! `MPI_Comm_create_from_group` for the two process sets `mpi://WORLD` and `mpi://SELF`.

use crate::consts::*;
use crate::handles::Slab;
use crate::{ok, put};
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};

/// A session: its error handler.
#[derive(Clone, Copy)]
struct Session {
    errhandler: c_int,
}

/// MPICH's kind of object of sessions (`MPI_SESSION_NULL` is 0x38000000).
const SESSION_OBJECT: u32 = 0xe;
const MPI_SESSION_NULL: c_int = 0x3800_0000;
/// `MPI_Group_compare`'s answer for the same members in the same order.
const MPI_IDENT: c_int = 0;

/// The open sessions.
// Process-wide because a C handle is a plain integer any thread may hand to any function.
static SESSIONS: Slab<Session> = Slab::new(SESSION_OBJECT);

/// The process sets, in order.
const PSETS: [&str; 2] = ["mpi://WORLD", "mpi://SELF"];

/// The session of handle `s`, or `MPI_ERR_SESSION`.
fn session(s: c_int) -> Result<Session, c_int> {
    SESSIONS.get(s).ok_or(MPI_ERR_SESSION)
}

/// The communicator of process set `name` (`MPI_ERR_ARG` for an unknown one).
///
/// # Safety
/// `name` must be null or a C string.
unsafe fn pset(name: *const c_char) -> Result<c_int, c_int> {
    if name.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: the caller's contract.
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    match name.to_ascii_lowercase().as_str() {
        "mpi://world" => Ok(MPI_COMM_WORLD),
        "mpi://self" => Ok(MPI_COMM_SELF),
        _ => Err(MPI_ERR_ARG),
    }
}

mpi_fn! {
    /// Opens a session (the process's MPI is initialized by `MPI_Init` first).
    fn MPI_Session_init(_info: c_int, errhandler: c_int, out: *mut c_int) on MPI_COMM_WORLD => {
        if out.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let errhandler = if errhandler == MPI_ERRHANDLER_NULL { MPI_ERRORS_ARE_FATAL } else { errhandler };
        if !crate::errors::is_handler(errhandler) {
            return Err(MPI_ERR_ARG);
        }
        let h = SESSIONS.insert(Session { errhandler });
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put(out, h) }
    }
}

mpi_fn! {
    /// Closes `*session` and sets it to `MPI_SESSION_NULL`.
    fn MPI_Session_finalize(s: *mut c_int) on MPI_COMM_WORLD => {
        if s.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        SESSIONS.take(unsafe { s.read() }).ok_or(MPI_ERR_SESSION)?;
        // SAFETY: as above.
        unsafe { put(s, MPI_SESSION_NULL) }
    }
}

mpi_fn! {
    /// Sets the error handler of a session (a predefined one).
    fn MPI_Session_set_errhandler(s: c_int, errhandler: c_int) on MPI_COMM_WORLD => {
        session(s)?;
        if !crate::errors::is_handler(errhandler) {
            return Err(MPI_ERR_ARG);
        }
        SESSIONS.with_mut(s, |e| e.errhandler = errhandler).ok_or(MPI_ERR_SESSION)
    }
}

mpi_fn! {
    /// The error handler of a session.
    fn MPI_Session_get_errhandler(s: c_int, errhandler: *mut c_int) on MPI_COMM_WORLD => {
        let e = session(s)?;
        if errhandler.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put(errhandler, e.errhandler) }
    }
}

mpi_fn! {
    /// The number of process sets: 2.
    fn MPI_Session_get_num_psets(s: c_int, _info: c_int, n: *mut c_int) on MPI_COMM_WORLD => {
        session(s)?;
        if n.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put(n, PSETS.len() as c_int) }
    }
}

mpi_fn! {
    /// The name of process set `n`; with `*pset_len` 0, only the room it needs (with its
    /// terminating null) goes to `*pset_len`.
    fn MPI_Session_get_nth_pset(s: c_int, _info: c_int, n: c_int, pset_len: *mut c_int, name: *mut c_char)
        on MPI_COMM_WORLD => {
        session(s)?;
        let pset = usize::try_from(n).ok().and_then(|n| PSETS.get(n)).ok_or(MPI_ERR_ARG)?;
        if pset_len.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        let room = unsafe { pset_len.read() };
        if room <= 0 {
            // SAFETY: as above.
            return unsafe { put(pset_len, pset.len() as c_int + 1) };
        }
        // As MPICH: the name is copied (cut to the room) and `*pset_len` is left as it was.
        let mut len = 0;
        // SAFETY: the caller vouches for `room` bytes at `name`.
        unsafe { crate::put_string(pset, name, room, &mut len) }
    }
}

/// A new info object with the pairs `kv`.
fn new_info(kv: &[(&str, String)], out: *mut c_int) -> Result<(), c_int> {
    if out.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let mut h = 0;
    // SAFETY: `h` is a local.
    ok(unsafe { crate::info::MPI_Info_create(&mut h) })?;
    for (k, v) in kv {
        let (k, v) = (CString::new(*k).map_err(|_| MPI_ERR_ARG)?, CString::new(v.as_str()).map_err(|_| MPI_ERR_ARG)?);
        // SAFETY: two C strings that live across the call.
        ok(unsafe { crate::info::MPI_Info_set(h, k.as_ptr(), v.as_ptr()) })?;
    }
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { put(out, h) }
}

mpi_fn! {
    /// The hints of a session: none.
    fn MPI_Session_get_info(s: c_int, info: *mut c_int) on MPI_COMM_WORLD => {
        session(s)?;
        new_info(&[], info)
    }
}

mpi_fn! {
    /// The hints of a process set: `mpi_size`, its number of processes.
    fn MPI_Session_get_pset_info(s: c_int, name: *const c_char, info: *mut c_int) on MPI_COMM_WORLD => {
        session(s)?;
        // SAFETY: the caller's contract.
        let c = unsafe { pset(name)? };
        let mut size = 0;
        // SAFETY: `size` is a local.
        ok(unsafe { crate::environment::MPI_Comm_size(c, &mut size) })?;
        new_info(&[("mpi_size", size.to_string())], info)
    }
}

mpi_fn! {
    /// The group of a process set.
    fn MPI_Group_from_session_pset(s: c_int, name: *const c_char, group: *mut c_int) on MPI_COMM_WORLD => {
        session(s)?;
        // SAFETY: the caller's contract.
        let c = unsafe { pset(name)? };
        // SAFETY: the caller vouches `group` is writable.
        ok(unsafe { crate::communicators::MPI_Comm_group(c, group) })
    }
}

mpi_fn! {
    /// A communicator of the processes of `group`, which must be those of a process set
    /// (`MPI_COMM_WORLD`'s or this process alone; `MPI_ERR_UNSUPPORTED_OPERATION` for another
    /// group). Collective over the group.
    fn MPI_Comm_create_from_group(
        group: c_int,
        _stringtag: *const c_char,
        _info: c_int,
        _errhandler: c_int,
        newcomm: *mut c_int,
    ) on MPI_COMM_WORLD => {
        for c in [MPI_COMM_WORLD, MPI_COMM_SELF] {
            let (mut g, mut result) = (0, 0);
            // SAFETY: locals.
            ok(unsafe { crate::communicators::MPI_Comm_group(c, &mut g) })?;
            // SAFETY: locals.
            let rc = unsafe { crate::communicators::MPI_Group_compare(group, g, &mut result) };
            // SAFETY: `g` was made above.
            unsafe { crate::communicators::MPI_Group_free(&mut g) };
            ok(rc)?;
            if result == MPI_IDENT {
                // SAFETY: the caller vouches `newcomm` is writable.
                return ok(unsafe { crate::communicators::MPI_Comm_dup(c, newcomm) });
            }
        }
        Err(MPI_ERR_UNSUPPORTED_OPERATION)
    }
}
