//! Files (MPI-IO) on the local file system, opened by every process of a communicator (the
//! processes of a local job see the same paths): opening and closing (`MPI_MODE_CREATE`,
//! `EXCL`, `APPEND`, `DELETE_ON_CLOSE` honoured), deleting, the access mode, size
//! (`MPI_File_set_size`, `get_size`, `preallocate`), group, info (kept, not used),
//! atomicity (in atomic mode an access holds the data file's `flock`, shared to read),
//! `MPI_File_sync`, views ([`View`]: a displacement, an etype, a filetype tiled from it and a
//! data representation), the individual and the shared file pointers (`MPI_File_seek`,
//! `seek_shared`, `get_position`, `get_position_shared`, `get_byte_offset`),
//! `MPI_File_get_type_extent`, `MPI_Register_datarep`, and error handlers (the predefined
//! ones and the program's, `MPI_File_create_errhandler`, `MPI_File_call_errhandler`;
//! `MPI_ERRORS_RETURN` by default as MPI says; an error goes to the file's handler, that of
//! `MPI_FILE_NULL` for `MPI_File_open`). Reading and writing are in [`crate::file_io`].
//!
//! An `MPI_File` is a pointer in MPICH's ABI: ours points to the file's entry, and the live
//! ones are listed so that a wrong handle is refused (`MPI_ERR_FILE`). Each file has a
//! private duplicate of its communicator for its collectives. The shared file pointer (in
//! etypes) lives in a small side file next to the data file (else in the temporary
//! directory), named by rank 0 at the opening: 8 bytes read and written under an exclusive
//! `flock`, so that any process may move it without the others' help; rank 0 deletes it at
//! the closing.

use crate::consts::*;
use crate::datatypes::{any_datatype, predefined, MPI_Aint, MPI_Count};
use crate::errors::HandlerFn;
use crate::handles::rust_comm;
use crate::info::MPI_INFO_NULL;
use p2pmpi::collective::{TryCollectives, TryRoot};
use p2pmpi::datatype::DatatypeRef;
use p2pmpi::traits::*;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// `MPI_Offset`.
pub type MPI_Offset = std::os::raw::c_long;

/// MPICH's access modes.
pub(crate) const MPI_MODE_CREATE: c_int = 1;
pub(crate) const MPI_MODE_RDONLY: c_int = 2;
pub(crate) const MPI_MODE_WRONLY: c_int = 4;
pub(crate) const MPI_MODE_RDWR: c_int = 8;
const MPI_MODE_DELETE_ON_CLOSE: c_int = 16;
const MPI_MODE_EXCL: c_int = 64;
const MPI_MODE_APPEND: c_int = 128;
pub(crate) const MPI_MODE_SEQUENTIAL: c_int = 256;

/// `MPI_SEEK_SET`, `MPI_SEEK_CUR`, `MPI_SEEK_END`.
const MPI_SEEK_SET: c_int = 600;
const MPI_SEEK_CUR: c_int = 602;
const MPI_SEEK_END: c_int = 604;
/// `MPI_MAX_DATAREP_STRING`.
const MPI_MAX_DATAREP_STRING: usize = 128;

/// A file view: where the data of a process lies in the file.
pub(crate) struct View {
    /// Displacement in bytes where the first tile of the filetype starts.
    pub disp: i64,
    /// The etype and the filetype: predefined handles, or private duplicates.
    pub etype: c_int,
    pub filetype: c_int,
    /// Bytes of one etype.
    pub esize: u64,
    /// The data runs of one tile of the filetype: (offset from the tile's start, bytes), in
    /// the filetype's order, adjacent runs merged, empty ones left out.
    pub runs: Vec<(i64, u64)>,
    /// Data bytes in one tile, and the tile's extent.
    pub fsize: u64,
    pub fextent: i64,
    pub datarep: String,
}

impl View {
    /// The view every file starts with: bytes from offset 0.
    fn bytes() -> View {
        let b = crate::datatypes::values::MPI_BYTE;
        View {
            disp: 0,
            etype: b,
            filetype: b,
            esize: 1,
            runs: vec![(0, 1)],
            fsize: 1,
            fextent: 1,
            datarep: "native".into(),
        }
    }

    /// Whether the view's data is one run from its start (tiles back to back).
    fn contiguous(&self) -> bool {
        self.runs.len() == 1 && self.runs[0].1 as i64 == self.fextent
    }

    /// The runs of file bytes (offset, length), in order, that hold `len` bytes of the view's
    /// data from data position `s` (bytes from the view's start); adjacent runs merged.
    pub fn runs(&self, s: u64, len: u64) -> Result<Vec<(u64, u64)>, c_int> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        if len == 0 {
            return Ok(out);
        }
        if self.fsize == 0 {
            return Err(MPI_ERR_ARG);
        }
        let at = |off: i64| u64::try_from(off).map_err(|_| MPI_ERR_ARG);
        if self.contiguous() {
            out.push((at(self.disp + self.runs[0].0 + s as i64)?, len));
            return Ok(out);
        }
        let (mut tile, mut i, mut within) = self.locate(s);
        let mut left = len;
        while left > 0 {
            let (off, blen) = self.runs[i];
            let n = (blen - within).min(left);
            let start = at(self.disp + tile * self.fextent + off + within as i64)?;
            match out.last_mut() {
                Some(last) if last.0 + last.1 == start => last.1 += n,
                _ => out.push((start, n)),
            }
            left -= n;
            within = 0;
            i += 1;
            if i == self.runs.len() {
                i = 0;
                tile += 1;
            }
        }
        Ok(out)
    }

    /// Where data position `s` lies: its tile, its run in the tile and the bytes before it in
    /// that run (`fsize` must not be 0).
    fn locate(&self, s: u64) -> (i64, usize, u64) {
        let tile = (s / self.fsize) as i64;
        let mut within = s % self.fsize;
        let mut i = 0;
        while within >= self.runs[i].1 {
            within -= self.runs[i].1;
            i += 1;
        }
        (tile, i, within)
    }

    /// The byte offset in the file of data position `s` (`MPI_File_get_byte_offset`).
    pub fn byte_offset(&self, s: u64) -> i64 {
        if self.fsize == 0 {
            return self.disp;
        }
        let (tile, i, within) = self.locate(s);
        self.disp + tile * self.fextent + self.runs[i].0 + within as i64
    }

    /// The bytes of the view's data that lie before file offset `end` (the data position of
    /// the end of a file of `end` bytes).
    fn data_before(&self, end: i64) -> u64 {
        let rel = end - self.disp;
        let (tiles, rest) =
            if rel > 0 && self.fextent > 0 { (rel / self.fextent, rel % self.fextent) } else { (0, rel) };
        let partial: u64 = self.runs.iter().map(|&(off, len)| (rest - off).clamp(0, len as i64) as u64).sum();
        tiles as u64 * self.fsize + partial
    }
}

/// What may change while a file is open.
pub(crate) struct State {
    pub view: View,
    /// The individual file pointer, in etypes.
    pub pos: i64,
    pub atomic: bool,
    /// A private copy of the hints set (`MPI_INFO_NULL` for none).
    pub info: c_int,
    /// The bytes moved by the split collective begun and not ended yet.
    pub split: Option<u64>,
}

/// An open file.
pub(crate) struct FileEntry {
    pub file: std::fs::File,
    path: PathBuf,
    pub amode: c_int,
    /// A private duplicate of the communicator.
    pub comm: c_int,
    /// The side file holding the shared file pointer, and its path.
    shared: std::fs::File,
    shared_path: PathBuf,
    errhandler: AtomicI32,
    pub state: Mutex<State>,
}

impl FileEntry {
    /// Moves the shared file pointer to `f(its value)` atomically among the processes;
    /// answers its value before.
    pub fn shared_update(&self, f: impl FnOnce(i64) -> i64) -> Result<i64, c_int> {
        let s = &self.shared;
        flock(s, libc::LOCK_EX)?;
        let r = (|| {
            let mut b = [0u8; 8];
            let n = s.read_at(&mut b, 0)?;
            let old = if n == 8 { i64::from_le_bytes(b) } else { 0 };
            s.write_all_at(&f(old).to_le_bytes(), 0)?;
            Ok(old)
        })();
        let unlocked = flock(s, libc::LOCK_UN);
        let old = r.map_err(|e: std::io::Error| class(&e))?;
        unlocked.map(|()| old)
    }

    /// Takes the lock of the data file among the processes (exclusive, or shared), held
    /// until the answer is dropped.
    pub fn lock_data(&self, exclusive: bool) -> Result<DataLock<'_>, c_int> {
        flock(&self.file, if exclusive { libc::LOCK_EX } else { libc::LOCK_SH })?;
        Ok(DataLock(&self.file))
    }

    /// The rank of this process in the file's group and the group's size.
    pub fn rank_size(&self) -> Result<(i32, i32), c_int> {
        let rc = rust_comm(self.comm)?;
        Ok((rc.rank(), rc.size()))
    }

    /// Waits for every process of the file's group.
    pub fn barrier(&self) -> Result<(), c_int> {
        rust_comm(self.comm)?.try_barrier().map_err(crate::errors::class_of_failure)
    }

    /// Runs `f` on rank 0 and gives its answer to every process (a class, 0 for success).
    fn on_root(&self, f: impl FnOnce() -> Result<(), c_int>) -> Result<(), c_int> {
        let rc = rust_comm(self.comm)?;
        let mut r: c_int = if rc.rank() == 0 { f().err().unwrap_or(MPI_SUCCESS) } else { 0 };
        rc.process_at_rank(0).try_broadcast_into(&mut r).map_err(crate::errors::class_of_failure)?;
        crate::ok(r)
    }
}

/// Takes (`LOCK_EX`) or releases (`LOCK_UN`) the lock of file `f` among the processes,
/// waiting for it if another process holds it.
fn flock(f: &std::fs::File, op: c_int) -> Result<(), c_int> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: an OS call on the descriptor of an open file, which `f` keeps open.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(class(&e));
        }
    }
}

/// The lock of a data file among the processes (atomic mode), released when dropped.
pub(crate) struct DataLock<'a>(&'a std::fs::File);

impl Drop for DataLock<'_> {
    fn drop(&mut self) {
        let _ = flock(self.0, libc::LOCK_UN);
    }
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
pub(crate) fn entry(fh: *mut c_void) -> Result<&'static FileEntry, c_int> {
    let files = FILES.lock();
    if !files.contains(&(fh as usize)) {
        return Err(MPI_ERR_FILE);
    }
    // SAFETY: a live entry made by `Box::into_raw` in `MPI_File_open`, only read through
    // shared references (what changes is behind its own lock or atomic). It is freed by
    // `MPI_File_close`, which MPI forbids while another call uses the file.
    Ok(unsafe { &*(fh as *const FileEntry) })
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
static NULL_HANDLER: AtomicI32 = AtomicI32::new(MPI_ERRORS_RETURN);

/// The error handler of file `fh` (`MPI_FILE_NULL`'s when null; `MPI_ERRORS_RETURN` for a
/// handle that names no open file).
fn handler(fh: *mut c_void) -> c_int {
    if fh.is_null() {
        NULL_HANDLER.load(Ordering::Relaxed)
    } else {
        entry(fh).map_or(MPI_ERRORS_RETURN, |e| e.errhandler.load(Ordering::Relaxed))
    }
}

/// The handlers `MPI_File_create_errhandler` made: their handle (in the table of handlers of
/// [`crate::errors`], so that `MPI_Errhandler_free` knows them) and their function, called
/// with the file and the code (`MPI_File_errhandler_function`, variadic in C).
// Process-wide because a C handle is a plain integer any thread may hand to any function.
static FILE_HANDLERS: Mutex<Vec<(c_int, HandlerFn)>> = Mutex::new(Vec::new());

/// The function of file handler `h`, if the program made it.
fn file_handler(h: c_int) -> Option<HandlerFn> {
    FILE_HANDLERS.lock().iter().find(|(k, _)| *k == h).map(|(_, f)| *f)
}

/// What the error `class` of function `name` on file `fh` (or `MPI_FILE_NULL`) answers:
/// returned under `MPI_ERRORS_RETURN`, and after the program's handler returns; under
/// `MPI_ERRORS_ARE_FATAL` and `MPI_ERRORS_ABORT` the job stops with a message naming the
/// function and the error.
pub(crate) fn file_error(fh: *mut c_void, name: &'static str, class: c_int) -> c_int {
    let h = handler(fh);
    if h == MPI_ERRORS_RETURN {
        return class;
    }
    if let Some(f) = file_handler(h) {
        let (mut file, mut code) = (fh, class);
        // SAFETY: the program's handler, called as MPI says: the file and the code, by
        // address (locals that outlive the call).
        unsafe { f(&mut file as *mut *mut c_void as *mut c_int, &mut code) };
        return class;
    }
    let cause =
        crate::errors::describe(class).map_or_else(|| format!("error code {class}"), |(n, t)| format!("{t} ({n})"));
    p2pmpi::environment::abort_with_message(class, &format!("{name}: {cause}"))
}

/// Defines a file function exported as `MPI_X` and `PMPI_X` whose error goes to the file's
/// handler (`$fh`, or `MPI_FILE_NULL`'s when null) by [`file_error`]: [`mpi_fn!`]'s `handler`
/// form.
macro_rules! file_fn {
    ($($f:tt)*) => {
        mpi_fn! { $($f)* }
    };
}
pub(crate) use file_fn;

/// MPI's class of an I/O error.
pub(crate) fn class(e: &std::io::Error) -> c_int {
    match e.kind() {
        std::io::ErrorKind::NotFound => MPI_ERR_NO_SUCH_FILE,
        std::io::ErrorKind::AlreadyExists => MPI_ERR_FILE_EXISTS,
        std::io::ErrorKind::PermissionDenied => MPI_ERR_ACCESS,
        std::io::ErrorKind::StorageFull => MPI_ERR_NO_SPACE,
        _ => MPI_ERR_IO,
    }
}

/// Opens the data file (with the creating flags on rank 0 only: the others open what rank 0
/// made).
fn open_data(p: &std::path::Path, amode: c_int, creator: bool) -> Result<std::fs::File, c_int> {
    let access = amode & (MPI_MODE_RDONLY | MPI_MODE_WRONLY | MPI_MODE_RDWR);
    let mut o = std::fs::OpenOptions::new();
    // Appending is where the pointers start (positioned writes ignore O_APPEND's offset
    // on Linux, so it is not asked of the OS).
    o.read(access != MPI_MODE_WRONLY).write(access != MPI_MODE_RDONLY);
    if creator {
        o.create(amode & MPI_MODE_CREATE != 0);
        if amode & MPI_MODE_EXCL != 0 {
            o.create_new(true);
        }
    }
    o.open(p).map_err(|e| class(&e))
}

/// Makes the side file of the shared file pointer (rank 0, at the opening), holding `start`:
/// next to the data file, else in the temporary directory.
fn make_side(data: &std::path::Path, start: i64) -> Result<PathBuf, c_int> {
    // Process-wide: the side files this process named (one name each).
    static MADE: AtomicU64 = AtomicU64::new(0);
    let tag = format!("p2pmpi-sfp-{}-{}", std::process::id(), MADE.fetch_add(1, Ordering::Relaxed));
    let name = data.file_name().map_or_else(|| tag.clone(), |n| format!(".{}.{tag}", n.to_string_lossy()));
    let beside = data.parent().map(|d| d.join(&name)).unwrap_or_else(|| PathBuf::from(&name));
    for p in [beside, std::env::temp_dir().join(&tag)] {
        if std::fs::write(&p, start.to_le_bytes()).is_ok() {
            return Ok(p);
        }
    }
    Err(MPI_ERR_IO)
}

/// Rank 0's part of the opening: opens (maybe creates) the file and makes the side file;
/// answers the file and the side file's path.
fn open_first(p: &std::path::Path, amode: c_int) -> Result<(std::fs::File, PathBuf), c_int> {
    let f = open_data(p, amode, true)?;
    let start = if amode & MPI_MODE_APPEND != 0 { f.metadata().map_err(|e| class(&e))?.len() as i64 } else { 0 };
    let side = make_side(p, start)?;
    Ok((f, side))
}

/// Gives rank 0's outcome (`Ok` with a path, or a class) to every process of `rc`.
fn share_outcome(rc: &p2pmpi::topology::SimpleCommunicator, mine: Result<&PathBuf, c_int>) -> Result<PathBuf, c_int> {
    let fail = crate::errors::class_of_failure;
    let bytes = mine.map(|p| p.as_os_str().as_encoded_bytes().to_vec());
    let mut head: [i64; 2] = match &bytes {
        Ok(b) => [0, b.len() as i64],
        Err(c) => [*c as i64, 0],
    };
    let root = rc.process_at_rank(0);
    root.try_broadcast_into(&mut head[..]).map_err(fail)?;
    if head[0] != 0 {
        return Err(head[0] as c_int);
    }
    let mut b = bytes.unwrap_or_else(|_| vec![0u8; head[1] as usize]);
    b.resize(head[1] as usize, 0);
    root.try_broadcast_into(&mut b[..]).map_err(fail)?;
    use std::os::unix::ffi::OsStringExt;
    Ok(PathBuf::from(std::ffi::OsString::from_vec(b)))
}

/// Opens `p` on every process of communicator `c` (collective): rank 0 first, then the
/// others; every process fails if one does.
fn open_all(c: c_int, p: PathBuf, amode: c_int) -> Result<Box<FileEntry>, c_int> {
    let rc = rust_comm(c)?;
    let fail = crate::errors::class_of_failure;
    let first = if rc.rank() == 0 { Some(open_first(&p, amode)) } else { None };
    let side_path =
        share_outcome(&rc, first.as_ref().map_or(Ok(&PathBuf::new()), |r| r.as_ref().map(|x| &x.1).map_err(|c| *c)));
    let side_path = match (side_path, &first) {
        (Err(c), Some(Ok((_, s)))) => {
            let _ = std::fs::remove_file(s);
            return Err(c);
        }
        (r, _) => r?,
    };
    let mine = match first {
        Some(r) => r.map(|(f, _)| f),
        None => open_data(&p, amode, false),
    };
    let side = mine.as_ref().ok().map(|_| std::fs::OpenOptions::new().read(true).write(true).open(&side_path));
    let code: c_int = match (&mine, &side) {
        (Err(c), _) => *c,
        (Ok(_), Some(Err(e))) => class(e),
        _ => 0,
    };
    let mut codes = vec![0 as c_int; rc.size() as usize];
    rc.try_all_gather_into(&code, &mut codes[..]).map_err(fail)?;
    if let Some(&bad) = codes.iter().find(|&&x| x != 0) {
        if rc.rank() == 0 {
            let _ = std::fs::remove_file(&side_path);
        }
        return Err(bad);
    }
    let (file, shared) = (mine?, side.ok_or(MPI_ERR_IO)?.map_err(|e| class(&e))?);
    let start = if amode & MPI_MODE_APPEND != 0 { file.metadata().map_err(|e| class(&e))?.len() as i64 } else { 0 };
    let mut dup = MPI_COMM_NULL;
    // SAFETY: `dup` is a local.
    crate::ok(unsafe { crate::communicators::MPI_Comm_dup(c, &mut dup) })?;
    let state = State { view: View::bytes(), pos: start, atomic: false, info: MPI_INFO_NULL, split: None };
    Ok(Box::new(FileEntry {
        file,
        path: p,
        amode,
        comm: dup,
        shared,
        shared_path: side_path,
        errhandler: AtomicI32::new(MPI_ERRORS_RETURN),
        state: Mutex::new(state),
    }))
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
        if amode & MPI_MODE_SEQUENTIAL != 0 && access == MPI_MODE_RDWR {
            return Err(MPI_ERR_AMODE);
        }
        let h = Box::into_raw(open_all(c, p, amode)?);
        FILES.lock().insert(h as usize);
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { fh.write(h.cast()) };
        Ok(())
    }
}

/// Frees the private duplicates of a view's datatypes.
fn free_types(v: &View) {
    for mut t in [v.etype, v.filetype] {
        if predefined(t).is_none() {
            // SAFETY: `t` is a local holding a private duplicate.
            unsafe { crate::derived::MPI_Type_free(&mut t) };
        }
    }
}

file_fn! {
    /// Closes `*fh` (collective; the file is deleted if it was opened with
    /// `MPI_MODE_DELETE_ON_CLOSE`) and sets it to `MPI_FILE_NULL`.
    fn MPI_File_close(fh: *mut *mut c_void) handler std::ptr::null_mut() => {
        if fh.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        let h = unsafe { fh.read() };
        let e = entry(h)?;
        // Every process is done with the file (and its shared pointer) before it goes.
        e.barrier()?;
        let (rank, _) = e.rank_size()?;
        if !FILES.lock().remove(&(h as usize)) {
            return Err(MPI_ERR_FILE);
        }
        if let Some(p) = NUMBERS.lock().iter_mut().find(|p| **p == h as usize) {
            // The number names no file any more.
            *p = 0;
        }
        // SAFETY: made by `Box::into_raw` in `MPI_File_open`, now out of the registry.
        let e = unsafe { Box::from_raw(h as *mut FileEntry) };
        if rank == 0 {
            let _ = std::fs::remove_file(&e.shared_path);
            if e.amode & MPI_MODE_DELETE_ON_CLOSE != 0 {
                let _ = std::fs::remove_file(&e.path);
            }
        }
        let st = e.state.lock();
        free_types(&st.view);
        if st.info != MPI_INFO_NULL {
            let mut i = st.info;
            // SAFETY: `i` is a local holding the private copy.
            unsafe { crate::info::MPI_Info_free(&mut i) };
        }
        let mut c = e.comm;
        // SAFETY: `c` is a local holding the private duplicate.
        unsafe { crate::communicators::MPI_Comm_free(&mut c) };
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
        let a = entry(fh)?.amode;
        // SAFETY: the caller vouches `amode` is writable.
        unsafe { crate::put(amode, a) }
    }
}

file_fn! {
    /// Sets the error handler of `fh` (a predefined one or one of
    /// `MPI_File_create_errhandler`).
    fn MPI_File_set_errhandler(fh: *mut c_void, errhandler: c_int) handler fh => {
        let predefined = [MPI_ERRORS_ARE_FATAL, MPI_ERRORS_RETURN, MPI_ERRORS_ABORT].contains(&errhandler);
        if !predefined && file_handler(errhandler).is_none() {
            return Err(MPI_ERR_ARG);
        }
        if fh.is_null() {
            // MPI_FILE_NULL's handler: that of files that fail to open.
            NULL_HANDLER.store(errhandler, Ordering::Relaxed);
            return Ok(());
        }
        entry(fh)?.errhandler.store(errhandler, Ordering::Relaxed);
        Ok(())
    }
}

file_fn! {
    /// Makes an error handler of `function`, called with the file and the error code when a
    /// call on a file it is set on fails.
    fn MPI_File_create_errhandler(function: Option<HandlerFn>, errhandler: *mut c_int)
        handler std::ptr::null_mut() => {
        let Some(f) = function else { return Err(MPI_ERR_ARG) };
        if errhandler.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        crate::ok(unsafe { crate::errors::MPI_Comm_create_errhandler(Some(f), errhandler) })?;
        // SAFETY: as above (just written).
        let h = unsafe { errhandler.read() };
        let mut all = FILE_HANDLERS.lock();
        // A handle freed and made again names the new function.
        all.retain(|(k, _)| *k != h);
        all.push((h, f));
        Ok(())
    }
}

file_fn! {
    /// Calls the error handler of `fh` with `errorcode` (returns under `MPI_ERRORS_RETURN`).
    fn MPI_File_call_errhandler(fh: *mut c_void, errorcode: c_int) handler fh => {
        if !fh.is_null() {
            entry(fh)?;
        }
        file_error(fh, "MPI_File_call_errhandler", errorcode);
        Ok(())
    }
}

file_fn! {
    /// The error handler of `fh` (`MPI_ERRORS_RETURN` unless another was set).
    fn MPI_File_get_errhandler(fh: *mut c_void, errhandler: *mut c_int) handler fh => {
        if !fh.is_null() {
            entry(fh)?;
        }
        let h = handler(fh);
        // SAFETY: the caller vouches `errhandler` is writable.
        unsafe { crate::put(errhandler, h) }
    }
}

file_fn! {
    /// Sets the size of the file (collective): truncated or extended with zeros.
    fn MPI_File_set_size(fh: *mut c_void, size: MPI_Offset) handler fh => {
        let e = entry(fh)?;
        let size = u64::try_from(size).map_err(|_| MPI_ERR_ARG)?;
        if e.amode & MPI_MODE_RDONLY != 0 {
            return Err(MPI_ERR_READ_ONLY);
        }
        // The accesses every process made before are done before the file shrinks.
        e.barrier()?;
        e.on_root(|| e.file.set_len(size).map_err(|x| class(&x)))
    }
}

file_fn! {
    /// Makes the file at least `size` bytes long (collective).
    fn MPI_File_preallocate(fh: *mut c_void, size: MPI_Offset) handler fh => {
        let e = entry(fh)?;
        let size = u64::try_from(size).map_err(|_| MPI_ERR_ARG)?;
        if e.amode & MPI_MODE_RDONLY != 0 {
            return Err(MPI_ERR_READ_ONLY);
        }
        e.on_root(|| {
            let now = e.file.metadata().map_err(|x| class(&x))?.len();
            if now < size {
                e.file.set_len(size).map_err(|x| class(&x))?;
            }
            Ok(())
        })
    }
}

file_fn! {
    /// The size of the file in bytes.
    fn MPI_File_get_size(fh: *mut c_void, size: *mut MPI_Offset) handler fh => {
        let n = entry(fh)?.file.metadata().map_err(|x| class(&x))?.len();
        // SAFETY: the caller vouches `size` is writable.
        unsafe { crate::put(size, n as MPI_Offset) }
    }
}

file_fn! {
    /// The group of the processes that opened the file.
    fn MPI_File_get_group(fh: *mut c_void, group: *mut c_int) handler fh => {
        let c = entry(fh)?.comm;
        // SAFETY: the caller's contract.
        crate::ok(unsafe { crate::communicators::MPI_Comm_group(c, group) })
    }
}

file_fn! {
    /// Sets the hints of the file (kept; none changes what the library does).
    fn MPI_File_set_info(fh: *mut c_void, info: c_int) handler fh => {
        let e = entry(fh)?;
        let mut copy = MPI_INFO_NULL;
        if info != MPI_INFO_NULL {
            // SAFETY: `copy` is a local.
            crate::ok(unsafe { crate::info::MPI_Info_dup(info, &mut copy) })?;
        }
        let mut old = std::mem::replace(&mut e.state.lock().info, copy);
        if old != MPI_INFO_NULL {
            // SAFETY: `old` is a local holding the previous private copy.
            unsafe { crate::info::MPI_Info_free(&mut old) };
        }
        Ok(())
    }
}

file_fn! {
    /// A new info object holding the hints of the file.
    fn MPI_File_get_info(fh: *mut c_void, info: *mut c_int) handler fh => {
        let kept = entry(fh)?.state.lock().info;
        if info.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        crate::ok(unsafe {
            if kept == MPI_INFO_NULL {
                crate::info::MPI_Info_create(info)
            } else {
                crate::info::MPI_Info_dup(kept, info)
            }
        })
    }
}

file_fn! {
    /// Sets the atomicity mode (collective).
    fn MPI_File_set_atomicity(fh: *mut c_void, flag: c_int) handler fh => {
        entry(fh)?.state.lock().atomic = flag != 0;
        Ok(())
    }
}

file_fn! {
    /// The atomicity mode.
    fn MPI_File_get_atomicity(fh: *mut c_void, flag: *mut c_int) handler fh => {
        let a = entry(fh)?.state.lock().atomic;
        // SAFETY: the caller vouches `flag` is writable.
        unsafe { crate::put(flag, a as c_int) }
    }
}

file_fn! {
    /// Writes the file's data to the storage device (collective).
    fn MPI_File_sync(fh: *mut c_void) handler fh => {
        let e = entry(fh)?;
        if e.amode & MPI_MODE_RDONLY == 0 {
            e.file.sync_data().map_err(|x| class(&x))?;
        }
        e.barrier()
    }
}

/// The data runs of a datatype or a view: (offset, bytes).
type Runs = Vec<(i64, u64)>;

/// The layout of datatype `h` (committed or not): its data runs merged, its data size, its
/// extent.
fn layout(h: c_int) -> Result<(Runs, u64, i64), c_int> {
    let d = any_datatype(h)?;
    // SAFETY: `d` names a live datatype, read during this call only.
    let r = unsafe { DatatypeRef::from_raw(d) };
    let m = r.type_map();
    let mut runs: Runs = Vec::new();
    for b in m.blocks().iter().filter(|b| b.len > 0) {
        match runs.last_mut() {
            Some(last) if last.0 + last.1 as i64 == b.offset as i64 => last.1 += b.len as u64,
            _ => runs.push((b.offset as i64, b.len as u64)),
        }
    }
    Ok((runs, m.size() as u64, m.extent() as i64))
}

/// A private handle of datatype `h` for a view: itself if predefined, else a duplicate.
fn keep_type(h: c_int) -> Result<c_int, c_int> {
    if predefined(h).is_some() {
        return Ok(h);
    }
    let mut d = MPI_DATATYPE_NULL;
    // SAFETY: `d` is a local.
    crate::ok(unsafe { crate::derived::MPI_Type_dup(h, &mut d) })?;
    Ok(d)
}

/// Whether `name` is a data representation: one of MPI's (`external32` excepted: its
/// conversions are not made) or one the program registered.
fn known_datarep(name: &str) -> Result<(), c_int> {
    match name {
        "native" | "internal" => Ok(()),
        n if DATAREPS.lock().iter().any(|d| d == n) => Ok(()),
        _ => Err(MPI_ERR_UNSUPPORTED_DATAREP),
    }
}

/// The data representations the program registered (`MPI_Register_datarep`).
// Process-wide: names the whole program shares.
static DATAREPS: Mutex<Vec<String>> = Mutex::new(Vec::new());

file_fn! {
    /// Sets the view of the file (collective): its data starts at byte `disp`, in `etype`
    /// units, where `filetype`'s tiles have data; both file pointers go back to 0.
    fn MPI_File_set_view(fh: *mut c_void, disp: MPI_Offset, etype: c_int, filetype: c_int, datarep: *const c_char,
        _info: c_int) handler fh => {
        let e = entry(fh)?;
        if datarep.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: non-null; the caller vouches for a C string.
        let rep = unsafe { CStr::from_ptr(datarep) }.to_string_lossy().into_owned();
        known_datarep(&rep)?;
        let (_, esize, _) = layout(etype)?;
        let (runs, fsize, fextent) = layout(filetype)?;
        if disp < 0 || esize == 0 || fsize % esize != 0 || fextent < 0 {
            return Err(MPI_ERR_ARG);
        }
        let (et, ft) = (keep_type(etype)?, keep_type(filetype)?);
        let view = View { disp, etype: et, filetype: ft, esize, runs, fsize, fextent, datarep: rep };
        {
            let mut st = e.state.lock();
            free_types(&st.view);
            st.view = view;
            st.pos = 0;
        }
        // The shared file pointer goes back to 0 once every process is done with it.
        e.barrier()?;
        e.on_root(|| e.shared_update(|_| 0).map(|_| ()))
    }
}

file_fn! {
    /// The view of the file: displacement, etype and filetype (new handles unless
    /// predefined), data representation.
    fn MPI_File_get_view(fh: *mut c_void, disp: *mut MPI_Offset, etype: *mut c_int, filetype: *mut c_int,
        datarep: *mut c_char) handler fh => {
        let st = entry(fh)?.state.lock();
        let v = &st.view;
        if disp.is_null() || etype.is_null() || filetype.is_null() || datarep.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let (et, ft) = (keep_type(v.etype)?, keep_type(v.filetype)?);
        let n = v.datarep.len().min(MPI_MAX_DATAREP_STRING - 1);
        // SAFETY: checked non-null; the caller vouches for writable arguments, `datarep` of
        // MPI_MAX_DATAREP_STRING bytes.
        unsafe {
            disp.write(v.disp);
            etype.write(et);
            filetype.write(ft);
            std::ptr::copy_nonoverlapping(v.datarep.as_ptr(), datarep as *mut u8, n);
            *datarep.add(n) = 0;
        }
        Ok(())
    }
}

/// The data position (etypes) `offset` from `whence` names, for `MPI_File_seek`.
fn sought(e: &FileEntry, v: &View, offset: i64, whence: c_int, current: i64) -> Result<i64, c_int> {
    let p = match whence {
        MPI_SEEK_SET => offset,
        MPI_SEEK_CUR => current + offset,
        MPI_SEEK_END => {
            let end = e.file.metadata().map_err(|x| class(&x))?.len() as i64;
            (v.data_before(end) / v.esize) as i64 + offset
        }
        _ => return Err(MPI_ERR_ARG),
    };
    if p < 0 {
        return Err(MPI_ERR_ARG);
    }
    Ok(p)
}

file_fn! {
    /// Moves the individual file pointer.
    fn MPI_File_seek(fh: *mut c_void, offset: MPI_Offset, whence: c_int) handler fh => {
        let e = entry(fh)?;
        let mut st = e.state.lock();
        st.pos = sought(e, &st.view, offset, whence, st.pos)?;
        Ok(())
    }
}

file_fn! {
    /// The individual file pointer, in etypes.
    fn MPI_File_get_position(fh: *mut c_void, offset: *mut MPI_Offset) handler fh => {
        let p = entry(fh)?.state.lock().pos;
        // SAFETY: the caller vouches `offset` is writable.
        unsafe { crate::put(offset, p) }
    }
}

file_fn! {
    /// Moves the shared file pointer (collective: every process gives the same arguments).
    fn MPI_File_seek_shared(fh: *mut c_void, offset: MPI_Offset, whence: c_int) handler fh => {
        let e = entry(fh)?;
        let st = e.state.lock();
        // Every process's accesses at the shared file pointer before are done before it moves.
        e.barrier()?;
        e.on_root(|| {
            let mut bad = Ok(());
            e.shared_update(|cur| match sought(e, &st.view, offset, whence, cur) {
                Ok(p) => p,
                Err(c) => {
                    bad = Err(c);
                    cur
                }
            })?;
            bad
        })
    }
}

file_fn! {
    /// The shared file pointer, in etypes.
    fn MPI_File_get_position_shared(fh: *mut c_void, offset: *mut MPI_Offset) handler fh => {
        let p = entry(fh)?.shared_update(|p| p)?;
        // SAFETY: the caller vouches `offset` is writable.
        unsafe { crate::put(offset, p) }
    }
}

file_fn! {
    /// The byte offset in the file of `offset` etypes of the view.
    fn MPI_File_get_byte_offset(fh: *mut c_void, offset: MPI_Offset, disp: *mut MPI_Offset) handler fh => {
        let e = entry(fh)?;
        let st = e.state.lock();
        let s = u64::try_from(offset).map_err(|_| MPI_ERR_ARG)? * st.view.esize;
        let b = st.view.byte_offset(s);
        // SAFETY: the caller vouches `disp` is writable.
        unsafe { crate::put(disp, b) }
    }
}

/// The extent of datatype `dt` in the file (that in memory: the data representations
/// accepted are the native one).
fn type_extent(fh: *mut c_void, dt: c_int) -> Result<i64, c_int> {
    entry(fh)?;
    Ok(layout(dt)?.2)
}

file_fn! {
    /// The extent of `datatype` in the file.
    fn MPI_File_get_type_extent(fh: *mut c_void, dt: c_int, extent: *mut MPI_Aint) handler fh => {
        let x = type_extent(fh, dt)?;
        // SAFETY: the caller vouches `extent` is writable.
        unsafe { crate::put(extent, x) }
    }
}

file_fn! {
    /// `MPI_File_get_type_extent` with a large count.
    fn MPI_File_get_type_extent_c(fh: *mut c_void, dt: c_int, extent: *mut MPI_Count) handler fh => {
        let x = type_extent(fh, dt)?;
        // SAFETY: the caller vouches `extent` is writable.
        unsafe { crate::put(extent, x) }
    }
}

/// Registers the data representation `name` (its conversion functions are not called: the
/// data is stored as in memory).
///
/// # Safety
/// `name` must be null or a C string.
unsafe fn register(name: *const c_char) -> Result<(), c_int> {
    if name.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: non-null; the caller vouches for a C string.
    let n = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
    if n.is_empty() || n.len() >= MPI_MAX_DATAREP_STRING {
        return Err(MPI_ERR_ARG);
    }
    let mut all = DATAREPS.lock();
    if ["native", "internal", "external32"].contains(&n.as_str()) || all.contains(&n) {
        return Err(MPI_ERR_DUP_DATAREP);
    }
    all.push(n);
    Ok(())
}

file_fn! {
    /// Registers a data representation (its name; the conversion functions are not used).
    fn MPI_Register_datarep(datarep: *const c_char, _read: *mut c_void, _write: *mut c_void, _extent: *mut c_void,
        _state: *mut c_void) handler std::ptr::null_mut() => {
        // SAFETY: the caller's contract.
        unsafe { register(datarep) }
    }
}

file_fn! {
    /// `MPI_Register_datarep` with large-count conversion functions.
    fn MPI_Register_datarep_c(datarep: *const c_char, _read: *mut c_void, _write: *mut c_void, _extent: *mut c_void,
        _state: *mut c_void) handler std::ptr::null_mut() => {
        // SAFETY: the caller's contract.
        unsafe { register(datarep) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(disp: i64, runs: &[(i64, u64)], fextent: i64, esize: u64) -> View {
        let fsize = runs.iter().map(|r| r.1).sum();
        View { disp, etype: 0, filetype: 0, esize, runs: runs.to_vec(), fsize, fextent, datarep: "native".into() }
    }

    #[test]
    fn a_contiguous_view_is_one_run_from_its_displacement() {
        let v = view(10, &[(0, 8)], 8, 8);
        assert_eq!(v.runs(16, 100), Ok(vec![(26, 100)]));
        assert_eq!(v.byte_offset(16), 26);
        assert_eq!(v.data_before(26), 16);
        assert_eq!(v.data_before(5), 0);
    }

    #[test]
    fn a_strided_view_tiles_its_filetype_and_merges_adjacent_runs() {
        // A vector of 2 blocks of 4 bytes, stride 12: data at 0..4 and 12..16, extent 16.
        let v = view(100, &[(0, 4), (12, 4)], 16, 4);
        assert_eq!(v.runs(0, 16), Ok(vec![(100, 4), (112, 8), (128, 4)]));
        assert_eq!(v.runs(6, 4), Ok(vec![(114, 4)]));
        assert_eq!(v.byte_offset(8), 116);
        assert_eq!(v.data_before(100 + 16 + 14), 8 + 4 + 2);
        assert_eq!(v.data_before(100 + 32), 16);
    }

    #[test]
    fn an_empty_filetype_holds_no_data() {
        let v = view(0, &[], 8, 4);
        assert_eq!(v.runs(0, 0), Ok(vec![]));
        assert_eq!(v.runs(0, 4), Err(MPI_ERR_ARG));
        assert_eq!(v.byte_offset(0), 0);
    }
}
