//! The environment: `MPI_Init`, `MPI_Init_thread`, `MPI_Query_thread`, `MPI_Is_thread_main`,
//! `MPI_Finalize`, `MPI_Finalized`, `MPI_Initialized`, `MPI_Abort`, `MPI_Get_processor_name`,
//! `MPI_Get_version`, `MPI_Get_library_version`, `MPI_Wtime`, `MPI_Wtick`, `MPI_Alloc_mem`,
//! `MPI_Free_mem`, the buffer of buffered sends (`MPI_Buffer_attach`, `MPI_Buffer_detach`),
//! and the size and rank of a communicator and whether it is an intercommunicator.

use crate::consts::*;
use crate::handles::comm;
use crate::{ok, put, put_string};
use p2pmpi::environment::Universe;
use p2pmpi::ffi;
use p2pmpi::Threading;
use parking_lot::Mutex;
use std::os::raw::{c_char, c_double, c_int, c_long, c_void};
use std::sync::OnceLock;
use std::thread::ThreadId;

/// The universe between `MPI_Init` and `MPI_Finalize` (dropping it finalizes the library).
// Process-wide because MPI's environment is: one initialization per process.
static UNIVERSE: Mutex<Option<Universe>> = Mutex::new(None);

/// The thread that initialized the library.
// Process-wide, as above.
static MAIN_THREAD: OnceLock<ThreadId> = OnceLock::new();

extern "C" {
    /// The C library's standard output stream.
    static stdout: *mut libc::FILE;
}

fn level_of(t: Threading) -> c_int {
    match t {
        Threading::Single => MPI_THREAD_SINGLE,
        Threading::Funneled => MPI_THREAD_FUNNELED,
        Threading::Serialized => MPI_THREAD_SERIALIZED,
        Threading::Multiple => MPI_THREAD_MULTIPLE,
    }
}

/// Initializes the library with thread support `required`; the level provided.
fn init(required: c_int) -> Result<c_int, c_int> {
    let t = match required {
        MPI_THREAD_SINGLE => Threading::Single,
        MPI_THREAD_FUNNELED => Threading::Funneled,
        MPI_THREAD_SERIALIZED => Threading::Serialized,
        MPI_THREAD_MULTIPLE => Threading::Multiple,
        _ => return Err(MPI_ERR_ARG),
    };
    let mut u = UNIVERSE.lock();
    crate::ulfm::policy_from_env();
    let Some((universe, provided)) = p2pmpi::initialize_with_threading(t) else { return Err(MPI_ERR_OTHER) };
    *u = Some(universe);
    let _ = MAIN_THREAD.set(std::thread::current().id());
    // Each line the program prints leaves at once, as under a terminal: a process that stops
    // (an abort, a replica's takeover) loses no line.
    // SAFETY: `stdout` is the C library's stream, valid for the life of the process; no output
    // was made through it by the library yet, and a buffer-less line mode is always accepted.
    unsafe { libc::setvbuf(stdout, std::ptr::null_mut(), libc::_IOLBF, 0) };
    Ok(level_of(provided))
}

mpi_fn! {
    /// Initializes the library (the arguments are not used: the launcher passes everything by
    /// the environment).
    fn MPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) on MPI_COMM_WORLD => init(MPI_THREAD_SINGLE).map(drop)
}

mpi_fn! {
    /// Initializes the library with thread support `required` (every level is provided).
    fn MPI_Init_thread(_argc: *mut c_int, _argv: *mut *mut *mut c_char, required: c_int, provided: *mut c_int)
        on MPI_COMM_WORLD => {
        if provided.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let level = init(required)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put(provided, level) }
    }
}

mpi_fn! {
    /// The thread support provided.
    fn MPI_Query_thread(provided: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { put(provided, level_of(p2pmpi::environment::threading_support())) }
    }
}

mpi_fn! {
    /// Whether the calling thread initialized the library.
    fn MPI_Is_thread_main(flag: *mut c_int) on MPI_COMM_WORLD => {
        let main = MAIN_THREAD.get().is_some_and(|t| *t == std::thread::current().id());
        // SAFETY: the caller's contract.
        unsafe { put(flag, main as c_int) }
    }
}

mpi_fn! {
    /// Finalizes the library (after every message sent is delivered and every process
    /// finalized).
    fn MPI_Finalize() on MPI_COMM_WORLD => {
        if UNIVERSE.lock().is_none() {
            return Err(MPI_ERR_OTHER);
        }
        // First, as if `MPI_COMM_SELF` were freed: its attributes' delete callbacks run (a
        // program's last words, which may still communicate).
        let deleted = crate::attributes::delete_all(MPI_COMM_SELF);
        crate::rma::stop_server();
        let u = UNIVERSE.lock().take().ok_or(MPI_ERR_OTHER)?;
        // SAFETY: `stdout` is the C library's stream; flushing it is always allowed.
        unsafe { libc::fflush(stdout) };
        drop(u);
        deleted
    }
}

mpi_fn! {
    /// Whether `MPI_Init` was called.
    fn MPI_Initialized(flag: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { put(flag, p2pmpi::is_initialized() as c_int) }
    }
}

mpi_fn! {
    /// Whether `MPI_Finalize` was called.
    fn MPI_Finalized(flag: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { put(flag, p2pmpi::is_finalized() as c_int) }
    }
}

mpi_fn! {
    /// Stops every process of the job with `errorcode` (never returns).
    fn MPI_Abort(c: c_int, errorcode: c_int) on c => {
        // SAFETY: `stdout` is the C library's stream; flushing it is always allowed.
        unsafe { libc::fflush(stdout) };
        // An invalid communicator aborts the job all the same.
        let c = comm(c).or_else(|_| comm(MPI_COMM_WORLD))?;
        // SAFETY: no pointer is involved.
        unsafe { ffi::MPI_Abort(c, errorcode) };
        Ok(())
    }
}

mpi_fn! {
    /// The name of this host, at most `MPI_MAX_PROCESSOR_NAME` bytes with its NUL.
    fn MPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) on MPI_COMM_WORLD => {
        let host = p2pmpi::environment::processor_name().map_err(|_| MPI_ERR_OTHER)?;
        // SAFETY: the caller vouches for `MPI_MAX_PROCESSOR_NAME` bytes at `name`.
        unsafe { put_string(&host, name, MPI_MAX_PROCESSOR_NAME, resultlen) }
    }
}

mpi_fn! {
    /// The version of the MPI standard of the interface (that of MPICH 4's header).
    fn MPI_Get_version(version: *mut c_int, subversion: *mut c_int) on MPI_COMM_WORLD => {
        if version.is_null() || subversion.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: both checked non-null; the caller vouches they are writable.
        unsafe {
            version.write(MPI_VERSION);
            subversion.write(MPI_SUBVERSION);
        }
        Ok(())
    }
}

/// The library's name and version, as `MPI_Get_library_version` gives them.
pub fn library_version() -> String {
    let lib = p2pmpi::environment::library_version().unwrap_or_default();
    format!("{lib}; MPICH ABI (libmpi.so.12)")
}

mpi_fn! {
    /// The library's name and version, at most `MPI_MAX_LIBRARY_VERSION_STRING` bytes with
    /// its NUL.
    fn MPI_Get_library_version(version: *mut c_char, resultlen: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller vouches for `MPI_MAX_LIBRARY_VERSION_STRING` bytes at `version`.
        unsafe { put_string(&library_version(), version, MPI_MAX_LIBRARY_VERSION_STRING, resultlen) }
    }
}

mpi_fn! {
    /// Seconds since an arbitrary point in the past.
    fn MPI_Wtime() -> c_double => p2pmpi::time()
}

mpi_fn! {
    /// The resolution of `MPI_Wtime` in seconds.
    fn MPI_Wtick() -> c_double => p2pmpi::time_resolution()
}

/// This process's rank in the world and the world's size, read once: they never change, and
/// asking the library costs a C program's every `MPI_Comm_rank` of the world ~15 ns.
// Process-wide, as the world is.
static WORLD_SHAPE: OnceLock<(c_int, c_int)> = OnceLock::new();

/// [`WORLD_SHAPE`] (to be called with the library initialized).
fn world_shape() -> Result<(c_int, c_int), c_int> {
    if let Some(s) = WORLD_SHAPE.get() {
        return Ok(*s);
    }
    let fc = comm(MPI_COMM_WORLD)?;
    let (mut rank, mut size) = (0, 0);
    // SAFETY: the world is a live communicator; locals to write.
    ok(unsafe { ffi::MPI_Comm_rank(fc, &mut rank) })?;
    // SAFETY: as above.
    ok(unsafe { ffi::MPI_Comm_size(fc, &mut size) })?;
    Ok(*WORLD_SHAPE.get_or_init(|| (rank, size)))
}

mpi_fn! {
    /// This process's rank in `comm`.
    fn MPI_Comm_rank(c: c_int, rank: *mut c_int) on c => {
        let fc = comm(c)?;
        if rank.is_null() {
            return Err(MPI_ERR_ARG);
        }
        if c == MPI_COMM_WORLD {
            // SAFETY: `rank` checked non-null, writable as the caller vouches.
            return unsafe { put(rank, world_shape()?.0) };
        }
        // SAFETY: `rank` checked non-null, writable as the caller vouches.
        match unsafe { ffi::MPI_Comm_rank(fc, rank) } {
            0 => Ok(()),
            e => Err(e),
        }
    }
}

mpi_fn! {
    /// The number of processes of `comm`.
    fn MPI_Comm_size(c: c_int, size: *mut c_int) on c => {
        let fc = comm(c)?;
        if size.is_null() {
            return Err(MPI_ERR_ARG);
        }
        if c == MPI_COMM_WORLD {
            // SAFETY: `size` checked non-null, writable as the caller vouches.
            return unsafe { put(size, world_shape()?.1) };
        }
        // SAFETY: `size` checked non-null, writable as the caller vouches.
        match unsafe { ffi::MPI_Comm_size(fc, size) } {
            0 => Ok(()),
            e => Err(e),
        }
    }
}

mpi_fn! {
    /// Whether `comm` is an intercommunicator.
    fn MPI_Comm_test_inter(c: c_int, flag: *mut c_int) on c => {
        let fc = comm(c)?;
        if flag.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: `flag` checked non-null, writable as the caller vouches.
        ok(unsafe { ffi::MPI_Comm_test_inter(fc, flag) })
    }
}

mpi_fn! {
    /// Allocates `size` bytes (`MPI_ERR_NO_MEM` if none are left); `*baseptr` (a `void *`
    /// written through `void *`) is their address, for `MPI_Free_mem`.
    fn MPI_Alloc_mem(size: c_long, _info: c_int, baseptr: *mut c_void) on MPI_COMM_WORLD => {
        if size < 0 || baseptr.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: malloc of a size; a zero size still gives a pointer MPI_Free_mem accepts.
        let p = unsafe { libc::malloc(size.max(1) as usize) };
        if p.is_null() {
            return Err(MPI_ERR_NO_MEM);
        }
        // SAFETY: checked non-null; the caller vouches it is writable for a pointer.
        unsafe { (baseptr as *mut *mut c_void).write(p) };
        Ok(())
    }
}

mpi_fn! {
    /// Frees memory of `MPI_Alloc_mem`.
    fn MPI_Free_mem(base: *mut c_void) on MPI_COMM_WORLD => {
        // SAFETY: the caller vouches that `base` came from `MPI_Alloc_mem` (malloc) and is
        // freed once.
        unsafe { libc::free(base) };
        Ok(())
    }
}

/// The buffer the program attached for buffered sends, as it gave it (for
/// `MPI_Buffer_detach`); the library keeps its own room of that size.
// Process-wide, as the attached buffer is.
static ATTACHED: Mutex<Option<(usize, c_int)>> = Mutex::new(None);

mpi_fn! {
    /// Attaches a buffer of `size` bytes for buffered sends (`MPI_Bsend`).
    fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) on MPI_COMM_WORLD => {
        if size < 0 {
            return Err(MPI_ERR_ARG);
        }
        let mut attached = ATTACHED.lock();
        if attached.is_some() {
            return Err(MPI_ERR_BUFFER);
        }
        UNIVERSE.lock().as_mut().ok_or(MPI_ERR_OTHER)?.set_buffer_size(size as usize);
        *attached = Some((buffer as usize, size));
        Ok(())
    }
}

mpi_fn! {
    /// Detaches the buffer (once every buffered send left it): `*buffer_addr` (a `void *`
    /// written through `void *`) and `*size` are those given to `MPI_Buffer_attach`.
    fn MPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) on MPI_COMM_WORLD => {
        if buffer_addr.is_null() || size.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let (b, n) = ATTACHED.lock().take().unwrap_or((0, 0));
        if let Some(u) = UNIVERSE.lock().as_mut() {
            u.detach_buffer();
        }
        // SAFETY: both checked non-null; the caller vouches they are writable.
        unsafe {
            (buffer_addr as *mut *mut c_void).write(b as *mut c_void);
            size.write(n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_cut_to_the_buffer_with_their_nul() {
        let mut buf = [1 as c_char; 8];
        let mut len = -1;
        // SAFETY: 8 writable bytes and a local length.
        unsafe { put_string("abcdefghij", buf.as_mut_ptr(), 8, &mut len) }.unwrap();
        assert_eq!(len, 7);
        assert_eq!(buf[7], 0);
        assert_eq!(buf[6] as u8, b'g');
    }

    #[test]
    fn the_version_is_the_headers() {
        let (mut v, mut s) = (0, 0);
        // SAFETY: two locals.
        assert_eq!(unsafe { MPI_Get_version(&mut v, &mut s) }, MPI_SUCCESS);
        assert_eq!((v, s), (4, 0));
        assert!(library_version().contains("p2pmpi"));
    }
}
