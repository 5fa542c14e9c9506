//! Files (MPI-IO), their first functions: `MPI_File_open` (a file of the local file system,
//! opened by every process of the communicator), `MPI_File_close` (`MPI_MODE_DELETE_ON_CLOSE`
//! honoured), `MPI_File_delete`, `MPI_File_get_amode`, `MPI_File_set_errhandler` and
//! `MPI_File_get_errhandler` (the predefined handlers; recorded, `MPI_ERRORS_RETURN` by
//! default as MPI says; an error goes to the file's handler, that of `MPI_FILE_NULL` for
//! `MPI_File_open`). Reading, writing, views and the other file functions are stubs.
//!
//! An `MPI_File` is a pointer in MPICH's ABI: ours points to the file's entry, and the live
//! ones are listed so that a wrong handle is refused (`MPI_ERR_FILE`).

use crate::consts::*;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::path::PathBuf;

/// MPICH's access modes.
const MPI_MODE_CREATE: c_int = 1;
const MPI_MODE_RDONLY: c_int = 2;
const MPI_MODE_WRONLY: c_int = 4;
const MPI_MODE_RDWR: c_int = 8;
const MPI_MODE_DELETE_ON_CLOSE: c_int = 16;
const MPI_MODE_EXCL: c_int = 64;
const MPI_MODE_APPEND: c_int = 128;

/// An open file.
struct FileEntry {
    _file: std::fs::File,
    path: PathBuf,
    amode: c_int,
    errhandler: c_int,
}

/// The addresses of the open files' entries.
// Process-wide because a C handle may be handed to any function by any thread.
static FILES: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

/// The files given a Fortran number (`MPI_File_c2f`): number `i + 1` is entry `i`.
// Process-wide, as above.
static NUMBERS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The Fortran number of file `fh` (given at the first call; 0 for the null file).
pub(crate) fn c2f(fh: *mut c_void) -> c_int {
    if fh.is_null() {
        return 0;
    }
    let mut n = NUMBERS.lock();
    let i = match n.iter().position(|&p| p == fh as usize) {
        Some(i) => i,
        None => {
            n.push(fh as usize);
            n.len() - 1
        }
    };
    i as c_int + 1
}

/// The file of Fortran number `f` (null for 0 or an unknown number).
pub(crate) fn f2c(f: c_int) -> *mut c_void {
    let n = NUMBERS.lock();
    usize::try_from(f - 1).ok().and_then(|i| n.get(i)).map_or(std::ptr::null_mut(), |&p| p as *mut c_void)
}

/// The entry of file handle `fh`, if it is an open file.
fn entry<R>(fh: *mut c_void, f: impl FnOnce(&mut FileEntry) -> R) -> Result<R, c_int> {
    let files = FILES.lock();
    if !files.contains(&(fh as usize)) {
        return Err(MPI_ERR_FILE);
    }
    // SAFETY: a live entry made by `Box::into_raw` below, used under the registry's lock.
    Ok(f(unsafe { &mut *(fh as *mut FileEntry) }))
}

/// A file name argument.
///
/// # Safety
/// `name` must be null or a C string.
unsafe fn path(name: *const c_char) -> Result<PathBuf, c_int> {
    if name.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: the caller's contract.
    let s = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
    // ROMIO's prefixes name a file system ("ufs:", "nfs:", ...): the rest is the path.
    let s = match s.split_once(':') {
        Some((fs, rest)) if fs.len() > 1 && !fs.contains('/') => rest.to_string(),
        _ => s,
    };
    Ok(PathBuf::from(s))
}

/// The error handler of files that fail to open (`MPI_FILE_NULL`'s).
static NULL_HANDLER: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(MPI_ERRORS_RETURN);

/// Defines a file function exported as `MPI_X` and `PMPI_X` whose error goes to the file's
/// handler (`$fh`, or `MPI_FILE_NULL`'s when null): returned under `MPI_ERRORS_RETURN`,
/// else raised as the other functions' errors are.
macro_rules! file_fn {
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) handler $fh:expr => $body:expr) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The C caller's contract: every pointer valid as the MPI standard says.
        pub unsafe fn $name($($a: $t),*) -> c_int {
            #[allow(clippy::redundant_closure_call)]
            let r: Result<(), c_int> = (|| $body)();
            match r {
                Ok(()) => MPI_SUCCESS,
                Err(class) => {
                    let fh: *mut c_void = $fh;
                    let h = if fh.is_null() {
                        NULL_HANDLER.load(std::sync::atomic::Ordering::Relaxed)
                    } else {
                        entry(fh, |e| e.errhandler).unwrap_or(MPI_ERRORS_RETURN)
                    };
                    let mut f = fh;
                    crate::errors::raise_on(h, (&mut f as *mut *mut c_void).cast(), stringify!($name), class)
                }
            }
        }
        const _: () = {
            #[export_name = stringify!($name)]
            unsafe extern "C" fn mpi($($a: $t),*) -> c_int {
                // SAFETY: the caller's contract is the function's.
                unsafe { $name($($a),*) }
            }
            #[export_name = concat!("P", stringify!($name))]
            unsafe extern "C" fn pmpi($($a: $t),*) -> c_int {
                // SAFETY: the caller's contract is the function's.
                unsafe { $name($($a),*) }
            }
        };
    };
}

/// MPI's class of an I/O error.
fn class(e: &std::io::Error) -> c_int {
    match e.kind() {
        std::io::ErrorKind::NotFound => MPI_ERR_NO_SUCH_FILE,
        std::io::ErrorKind::AlreadyExists => MPI_ERR_FILE_EXISTS,
        std::io::ErrorKind::PermissionDenied => MPI_ERR_ACCESS,
        _ => MPI_ERR_IO,
    }
}

file_fn! {
    /// Opens `filename` on every process of `comm` with access mode `amode`.
    fn MPI_File_open(c: c_int, filename: *const c_char, amode: c_int, _info: c_int, fh: *mut *mut c_void)
        handler std::ptr::null_mut() => {
        crate::handles::comm(c)?;
        if fh.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: the caller's contract.
        let p = unsafe { path(filename)? };
        let access = amode & (MPI_MODE_RDONLY | MPI_MODE_WRONLY | MPI_MODE_RDWR);
        let creates = amode & (MPI_MODE_CREATE | MPI_MODE_EXCL) != 0;
        if access.count_ones() != 1 || (access == MPI_MODE_RDONLY && creates) {
            return Err(MPI_ERR_AMODE);
        }
        let mut o = std::fs::OpenOptions::new();
        o.read(access != MPI_MODE_WRONLY)
            .write(access != MPI_MODE_RDONLY)
            .append(amode & MPI_MODE_APPEND != 0)
            .create(amode & MPI_MODE_CREATE != 0);
        if amode & MPI_MODE_EXCL != 0 {
            o.create_new(true);
        }
        let file = o.open(&p).map_err(|e| class(&e))?;
        let e = Box::new(FileEntry { _file: file, path: p, amode, errhandler: MPI_ERRORS_RETURN });
        let h = Box::into_raw(e);
        FILES.lock().insert(h as usize);
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { fh.write(h.cast()) };
        Ok(())
    }
}

file_fn! {
    /// Closes `*fh` (deleting the file if it was opened with `MPI_MODE_DELETE_ON_CLOSE`) and
    /// sets it to `MPI_FILE_NULL`.
    fn MPI_File_close(fh: *mut *mut c_void) handler std::ptr::null_mut() => {
        if fh.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        let h = unsafe { fh.read() };
        if !FILES.lock().remove(&(h as usize)) {
            return Err(MPI_ERR_FILE);
        }
        if let Some(p) = NUMBERS.lock().iter_mut().find(|p| **p == h as usize) {
            // The number names no file any more.
            *p = 0;
        }
        // SAFETY: made by `Box::into_raw` in `MPI_File_open`, now out of the registry.
        let e = unsafe { Box::from_raw(h as *mut FileEntry) };
        if e.amode & MPI_MODE_DELETE_ON_CLOSE != 0 {
            // Every process of the communicator may try: the first one deletes it.
            let _ = std::fs::remove_file(&e.path);
        }
        // SAFETY: as above.
        unsafe { fh.write(std::ptr::null_mut()) };
        Ok(())
    }
}

file_fn! {
    /// Deletes the file `filename`.
    fn MPI_File_delete(filename: *const c_char, _info: c_int) handler std::ptr::null_mut() => {
        // SAFETY: the caller's contract.
        let p = unsafe { path(filename)? };
        std::fs::remove_file(p).map_err(|e| class(&e))
    }
}

file_fn! {
    /// The access mode `fh` was opened with.
    fn MPI_File_get_amode(fh: *mut c_void, amode: *mut c_int) handler fh => {
        let a = entry(fh, |e| e.amode)?;
        // SAFETY: the caller vouches `amode` is writable.
        unsafe { crate::put(amode, a) }
    }
}

file_fn! {
    /// Sets the error handler of `fh` (a predefined one, or one of `MPI_File_create_errhandler`).
    fn MPI_File_set_errhandler(fh: *mut c_void, errhandler: c_int) handler fh => {
        if !crate::errors::is_handler(errhandler) {
            return Err(MPI_ERR_ARG);
        }
        if fh.is_null() {
            // MPI_FILE_NULL's handler: that of files that fail to open.
            NULL_HANDLER.store(errhandler, std::sync::atomic::Ordering::Relaxed);
            return Ok(());
        }
        entry(fh, |e| e.errhandler = errhandler)
    }
}

file_fn! {
    /// The error handler of `fh` (`MPI_ERRORS_RETURN` unless another was set).
    fn MPI_File_get_errhandler(fh: *mut c_void, errhandler: *mut c_int) handler fh => {
        let h = if fh.is_null() {
            NULL_HANDLER.load(std::sync::atomic::Ordering::Relaxed)
        } else {
            entry(fh, |e| e.errhandler)?
        };
        // SAFETY: the caller vouches `errhandler` is writable.
        unsafe { crate::put(errhandler, h) }
    }
}
