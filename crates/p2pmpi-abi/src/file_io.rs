//! Reading and writing files (MPI-IO's data access, `int` and large-count forms): with an
//! explicit offset (`MPI_File_read_at`, `write_at`, ...), at the individual file pointer
//! (`MPI_File_read`, `write`), at the shared file pointer (`_shared`), in rank order
//! (`_ordered`), collective (`_all`), split collective (`_begin`/`_end`) and nonblocking
//! (`MPI_File_iread`, ...).
//!
//! An access packs the memory buffer's elements (the datatype machinery of the library) and
//! moves the bytes with positioned reads and writes of the OS, one per run of file bytes the
//! file's view ([`crate::file::View`]) gives. Offsets and pointers count etypes of the view.
//! A read past the end of the file stops there (the status tells the bytes read). The shared
//! file pointer is moved under the side file's lock before the access; an ordered access
//! gathers every process's size, rank 0 moves the shared pointer past them all, and each
//! process accesses its part. Collective forms do the independent access (MPI asks no
//! synchronisation of them); split collectives do it at `_begin` and answer its status at
//! `_end`; nonblocking ones do it at once and answer a completed request (whose status tells
//! the size: a message of that size the process sent itself).

use crate::consts::*;
use crate::datatypes::{datatype_ref, MPI_Count};
use crate::file::{
    entry, file_fn, FileEntry, MPI_Offset, State, View, MPI_MODE_RDONLY, MPI_MODE_SEQUENTIAL, MPI_MODE_WRONLY,
};
use crate::handles::rust_comm;
use crate::status::MPI_Status;
use p2pmpi::collective::{TryCollectives, TryRoot};
use p2pmpi::datatype::TypeMap;
use p2pmpi::ffi;
use p2pmpi::traits::*;
use parking_lot::Mutex;
use std::os::raw::{c_int, c_void};
use std::os::unix::fs::FileExt;

/// Which data position an access starts at.
#[derive(Clone, Copy)]
enum Ptr {
    /// An explicit offset in etypes.
    At(MPI_Offset),
    /// The individual file pointer (which moves past the data).
    Own,
    /// The shared file pointer (which moves past the data).
    Shared,
    /// The shared file pointer, the processes in rank order (collective).
    Ordered,
}

/// A count of either form as a large count.
fn wide<T: Into<MPI_Count>>(count: T) -> MPI_Count {
    count.into()
}

/// Checks that the file's access mode allows the access.
fn allowed(e: &FileEntry, p: Ptr, write: bool) -> Result<(), c_int> {
    if write && e.amode & MPI_MODE_RDONLY != 0 {
        return Err(MPI_ERR_READ_ONLY);
    }
    if !write && e.amode & MPI_MODE_WRONLY != 0 {
        return Err(MPI_ERR_ACCESS);
    }
    if e.amode & MPI_MODE_SEQUENTIAL != 0 && matches!(p, Ptr::At(_) | Ptr::Own) {
        return Err(MPI_ERR_UNSUPPORTED_OPERATION);
    }
    Ok(())
}

/// The etypes of `bytes` bytes of data in view `v` (`MPI_ERR_ARG` unless whole).
fn etypes(v: &View, bytes: u64) -> Result<i64, c_int> {
    if bytes % v.esize != 0 {
        return Err(MPI_ERR_ARG);
    }
    Ok((bytes / v.esize) as i64)
}

/// Reads `buf.len()` bytes at `off`, fewer at the end of the file; answers the bytes read.
fn read_full(f: &std::fs::File, buf: &mut [u8], off: u64) -> Result<usize, c_int> {
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], off + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(crate::file::class(&e)),
        }
    }
    Ok(got)
}

/// Moves `count` elements of memory layout `m` at `buf` to or from the file at data position
/// `start` (etypes) of the view of `st`; answers the bytes moved. In atomic mode the access
/// holds the data file's lock among the processes (shared to read, exclusive to write).
///
/// # Safety
/// `buf` must hold `count` elements of `m`, writable for a read.
unsafe fn transfer(
    e: &FileEntry,
    st: &State,
    start: i64,
    buf: *mut c_void,
    count: usize,
    m: &TypeMap,
    write: bool,
) -> Result<u64, c_int> {
    let v = &st.view;
    let bytes = (count * m.size()) as u64;
    if bytes == 0 {
        return Ok(0);
    }
    let start = u64::try_from(start).map_err(|_| MPI_ERR_ARG)?;
    let runs = v.runs(start * v.esize, bytes)?;
    let _atomic = if st.atomic { Some(e.lock_data(write)?) } else { None };
    let mut packed = Vec::new();
    if write {
        let data: &[u8] = if m.is_contiguous() {
            // SAFETY: a contiguous layout: the `bytes` data bytes are those at `buf`.
            unsafe { std::slice::from_raw_parts(buf as *const u8, bytes as usize) }
        } else {
            // SAFETY: the caller's contract.
            unsafe { m.pack(buf as *const u8, count, &mut packed) };
            &packed
        };
        let mut at = 0;
        for (off, len) in runs {
            let len = len as usize;
            e.file.write_all_at(&data[at..at + len], off).map_err(|x| crate::file::class(&x))?;
            at += len;
        }
        return Ok(bytes);
    }
    let direct = m.is_contiguous();
    if !direct {
        packed = vec![0u8; bytes as usize];
    }
    let data: &mut [u8] = if direct {
        // SAFETY: a contiguous layout: the `bytes` data bytes are those at `buf`, writable
        // per the caller's contract (any byte is a valid value of the C types there).
        unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, bytes as usize) }
    } else {
        &mut packed
    };
    let mut got = 0;
    for (off, len) in runs {
        let len = len as usize;
        let n = read_full(&e.file, &mut data[got..got + len], off)?;
        got += n;
        if n < len {
            break;
        }
    }
    if !direct {
        // SAFETY: the caller's contract; whole blocks only are written.
        unsafe { m.unpack(&packed[..got], buf as *mut u8, count) };
    }
    Ok(got as u64)
}

/// An access of `count` elements of `dt` at `buf` starting at `p`; answers the bytes moved.
///
/// # Safety
/// `buf` must hold `count` elements of `dt`, writable for a read.
unsafe fn run(
    fh: *mut c_void,
    p: Ptr,
    write: bool,
    buf: *mut c_void,
    count: MPI_Count,
    dt: c_int,
) -> Result<u64, c_int> {
    let e = entry(fh)?;
    if let Ptr::Ordered = p {
        // SAFETY: the caller's contract.
        return unsafe { ordered(e, write, buf, count, dt) };
    }
    allowed(e, p, write)?;
    let count = usize::try_from(count).map_err(|_| MPI_ERR_COUNT)?;
    let r = datatype_ref(dt)?;
    let m = r.type_map();
    let mut st = e.state.lock();
    let n = etypes(&st.view, (count * m.size()) as u64)?;
    let start = match p {
        Ptr::At(o) if o < 0 => return Err(MPI_ERR_ARG),
        Ptr::At(o) => o,
        Ptr::Own => st.pos,
        _ => e.shared_update(|s| s + n)?,
    };
    // SAFETY: the caller's contract.
    let done = unsafe { transfer(e, &st, start, buf, count, m, write)? };
    if let Ptr::Own = p {
        st.pos = start + (done / st.view.esize) as i64;
    }
    Ok(done)
}

/// An ordered access (collective): every process's size gathered, the shared file pointer
/// moved past them all by rank 0, each process's data after that of the lower ranks.
///
/// # Safety
/// As [`run`].
unsafe fn ordered(e: &FileEntry, write: bool, buf: *mut c_void, count: MPI_Count, dt: c_int) -> Result<u64, c_int> {
    let fail = crate::errors::class_of_failure;
    let rc = rust_comm(e.comm)?;
    let mine = (|| {
        allowed(e, Ptr::Ordered, write)?;
        let count = usize::try_from(count).map_err(|_| MPI_ERR_COUNT)?;
        let size = datatype_ref(dt)?.type_map().size();
        etypes(&e.state.lock().view, (count * size) as u64)
    })();
    // A process that cannot take part says so (a negative class) instead of its size.
    let said = mine.unwrap_or_else(|c| -(c as i64));
    let mut all = vec![0i64; rc.size() as usize];
    rc.try_all_gather_into(&said, &mut all[..]).map_err(fail)?;
    mine?;
    if let Some(&bad) = all.iter().find(|&&x| x < 0) {
        return Err(-bad as c_int);
    }
    let before: i64 = all[..rc.rank() as usize].iter().sum();
    let total: i64 = all.iter().sum();
    let mut base: [i64; 2] = [0, 0];
    if rc.rank() == 0 {
        base = match e.shared_update(|s| s + total) {
            Ok(s) => [s, 0],
            Err(c) => [0, c as i64],
        };
    }
    rc.process_at_rank(0).try_broadcast_into(&mut base[..]).map_err(fail)?;
    crate::ok(base[1] as c_int)?;
    let count = count as usize;
    let r = datatype_ref(dt)?;
    let st = e.state.lock();
    // SAFETY: the caller's contract.
    unsafe { transfer(e, &st, base[0] + before, buf, count, r.type_map(), write) }
}

/// Writes the size of a completed access into `status` (the other fields are left as they
/// are, as MPICH does).
///
/// # Safety
/// `status` must be null, `MPI_STATUS_IGNORE` or valid for a write.
unsafe fn set_status(status: *mut MPI_Status, bytes: u64) {
    if crate::status::wanted(status) {
        let s = MPI_Status::new(bytes, false, 0, 0, 0);
        // SAFETY: a real status, which the caller vouches is writable.
        unsafe {
            std::ptr::addr_of_mut!((*status).count_lo).write(s.count_lo);
            std::ptr::addr_of_mut!((*status).count_hi_and_cancelled).write(s.count_hi_and_cancelled);
        }
    }
}

/// A private duplicate of `MPI_COMM_SELF` for the messages that complete nonblocking
/// accesses (made at the first one).
fn self_comm() -> Result<ffi::MPI_Comm, c_int> {
    // Process-wide: one communicator of this process with itself.
    static SELF: Mutex<Option<c_int>> = Mutex::new(None);
    let mut s = SELF.lock();
    let h = match *s {
        Some(h) => h,
        None => {
            let mut h = MPI_COMM_NULL;
            // SAFETY: `h` is a local.
            crate::ok(unsafe { crate::communicators::MPI_Comm_dup(MPI_COMM_SELF, &mut h) })?;
            *s = Some(h);
            h
        }
    };
    crate::handles::comm(h)
}

/// Writes at `request` a request that completed already (an access of `bytes` bytes done at
/// once): a receive of that many bytes this process sent itself, so that its status tells
/// the size (a receive of nothing for sizes an `int` does not hold).
///
/// # Safety
/// `request` must be null or valid for a write.
unsafe fn completed(request: *mut c_int, bytes: u64) -> Result<(), c_int> {
    if request.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let c = self_comm()?;
    let n = c_int::try_from(bytes).unwrap_or(0);
    let byte = crate::datatypes::builtin(crate::datatypes::values::MPI_BYTE).ok_or(MPI_ERR_TYPE)?;
    // At least one byte each: an empty vector's address is `MPI_IN_PLACE`'s (a dangling 1).
    let len = (n as usize).max(1);
    let (src, mut dst) = (vec![0u8; len], vec![0u8; len].into_boxed_slice());
    // SAFETY: the predefined name is an initialized static that nothing writes.
    let mut raw = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: a receive into `dst` (kept alive with the request until it completes) matched
    // at once by the send from `src` on a communicator nobody else uses; `raw` is a local.
    unsafe {
        crate::ok(ffi::MPI_Irecv(dst.as_mut_ptr().cast(), n, byte, 0, 0, c, &mut raw))?;
        crate::ok(ffi::MPI_Send(src.as_ptr().cast(), n, byte, 0, 0, c))?;
    }
    let h = crate::handles::new_request(raw, Some(crate::handles::Keep(vec![Box::new(dst)])));
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { request.write(h) };
    Ok(())
}

/// Begins a split collective access (done at once; its size kept for the `_end`).
///
/// # Safety
/// As [`run`].
unsafe fn begin(
    fh: *mut c_void,
    p: Ptr,
    write: bool,
    buf: *mut c_void,
    count: MPI_Count,
    dt: c_int,
) -> Result<(), c_int> {
    if entry(fh)?.state.lock().split.is_some() {
        return Err(MPI_ERR_OTHER);
    }
    // SAFETY: the caller's contract.
    let n = unsafe { run(fh, p, write, buf, count, dt)? };
    entry(fh)?.state.lock().split = Some(n);
    Ok(())
}

/// Ends the split collective access begun on `fh`: its status.
///
/// # Safety
/// `status` as [`set_status`].
unsafe fn end(fh: *mut c_void, status: *mut MPI_Status) -> Result<(), c_int> {
    let n = entry(fh)?.state.lock().split.take().ok_or(MPI_ERR_OTHER)?;
    // SAFETY: the caller's contract.
    unsafe { set_status(status, n) };
    Ok(())
}

/// What an access answers: its status (blocking), a completed request (nonblocking), nothing
/// until the `_end` (the beginning of a split collective).
enum Then {
    Status(*mut MPI_Status),
    Request(*mut c_int),
    Split,
}

/// An access of `count` elements of `dt` at `buf` starting at `p`, answered as `then` says.
///
/// # Safety
/// As [`run`]; the pointer of `then` as [`set_status`] or [`completed`].
unsafe fn access(
    fh: *mut c_void,
    p: Ptr,
    write: bool,
    buf: *mut c_void,
    count: MPI_Count,
    dt: c_int,
    then: Then,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    unsafe {
        match then {
            Then::Status(status) => {
                let n = run(fh, p, write, buf, count, dt)?;
                set_status(status, n);
                Ok(())
            }
            Then::Request(request) => completed(request, run(fh, p, write, buf, count, dt)?),
            Then::Split => begin(fh, p, write, buf, count, dt),
        }
    }
}

/// Defines data accesses, each in its `int` and large-count forms. First what they answer
/// ([`Then`], with the functions' last argument if any), then a row per access: its two
/// names, where it starts (a variant of [`Ptr`]: `At(offset)` makes `offset` the functions'
/// second argument), whether it writes, and its doc.
macro_rules! access {
    ($then:tt $($name:ident, $name_c:ident($p:ident $(($offset:ident))?, $w:expr) $doc:literal;)*) => {$(
        access!(@fn $then $name(c_int, $p $(($offset))?, $w) $doc);
        access!(
            @fn $then $name_c(MPI_Count, $p $(($offset))?, $w) concat!("`", stringify!($name), "` with a large count.")
        );
    )*};
    (@fn [$then:ident $(($out:ident: $o:ty))?] $name:ident($t:ty, $p:ident $(($offset:ident))?, $w:expr) $doc:expr) => {
        file_fn! {
            #[doc = $doc]
            fn $name(fh: *mut c_void, $($offset: MPI_Offset,)? buf: *mut c_void, count: $t, dt: c_int $(, $out: $o)?)
                handler fh => {
                // SAFETY: the caller's contract.
                unsafe { access(fh, Ptr::$p $(($offset))?, $w, buf, wide(count), dt, Then::$then $(($out))?) }
            }
        }
    };
}

/// Ends of split collective accesses.
macro_rules! end {
    ($($name:ident $doc:literal;)*) => {$(
        file_fn! {
            #[doc = $doc]
            fn $name(fh: *mut c_void, _buf: *mut c_void, status: *mut MPI_Status) handler fh => {
                // SAFETY: the caller's contract.
                unsafe { end(fh, status) }
            }
        }
    )*};
}

access! {
    [Status(status: *mut MPI_Status)]
    MPI_File_read_at, MPI_File_read_at_c(At(offset), false) "Reads at an explicit offset.";
    MPI_File_read_at_all, MPI_File_read_at_all_c(At(offset), false) "Reads at an explicit offset (collective).";
    MPI_File_write_at, MPI_File_write_at_c(At(offset), true) "Writes at an explicit offset.";
    MPI_File_write_at_all, MPI_File_write_at_all_c(At(offset), true) "Writes at an explicit offset (collective).";
    MPI_File_read, MPI_File_read_c(Own, false) "Reads at the individual file pointer.";
    MPI_File_read_all, MPI_File_read_all_c(Own, false) "Reads at the individual file pointer (collective).";
    MPI_File_write, MPI_File_write_c(Own, true) "Writes at the individual file pointer.";
    MPI_File_write_all, MPI_File_write_all_c(Own, true) "Writes at the individual file pointer (collective).";
    MPI_File_read_shared, MPI_File_read_shared_c(Shared, false) "Reads at the shared file pointer.";
    MPI_File_write_shared, MPI_File_write_shared_c(Shared, true) "Writes at the shared file pointer.";
    MPI_File_read_ordered, MPI_File_read_ordered_c(Ordered, false)
        "Reads at the shared file pointer in rank order (collective).";
    MPI_File_write_ordered, MPI_File_write_ordered_c(Ordered, true)
        "Writes at the shared file pointer in rank order (collective).";
}

access! {
    [Request(request: *mut c_int)]
    MPI_File_iread_at, MPI_File_iread_at_c(At(offset), false) "Starts a read at an explicit offset.";
    MPI_File_iread_at_all, MPI_File_iread_at_all_c(At(offset), false)
        "Starts a read at an explicit offset (collective).";
    MPI_File_iwrite_at, MPI_File_iwrite_at_c(At(offset), true) "Starts a write at an explicit offset.";
    MPI_File_iwrite_at_all, MPI_File_iwrite_at_all_c(At(offset), true)
        "Starts a write at an explicit offset (collective).";
    MPI_File_iread, MPI_File_iread_c(Own, false) "Starts a read at the individual file pointer.";
    MPI_File_iread_all, MPI_File_iread_all_c(Own, false) "Starts a read at the individual file pointer (collective).";
    MPI_File_iwrite, MPI_File_iwrite_c(Own, true) "Starts a write at the individual file pointer.";
    MPI_File_iwrite_all, MPI_File_iwrite_all_c(Own, true)
        "Starts a write at the individual file pointer (collective).";
    MPI_File_iread_shared, MPI_File_iread_shared_c(Shared, false) "Starts a read at the shared file pointer.";
    MPI_File_iwrite_shared, MPI_File_iwrite_shared_c(Shared, true) "Starts a write at the shared file pointer.";
}

access! {
    [Split]
    MPI_File_read_at_all_begin, MPI_File_read_at_all_begin_c(At(offset), false)
        "Begins a split collective read at an explicit offset.";
    MPI_File_write_at_all_begin, MPI_File_write_at_all_begin_c(At(offset), true)
        "Begins a split collective write at an explicit offset.";
    MPI_File_read_all_begin, MPI_File_read_all_begin_c(Own, false)
        "Begins a split collective read at the individual file pointer.";
    MPI_File_write_all_begin, MPI_File_write_all_begin_c(Own, true)
        "Begins a split collective write at the individual file pointer.";
    MPI_File_read_ordered_begin, MPI_File_read_ordered_begin_c(Ordered, false) "Begins a split ordered read.";
    MPI_File_write_ordered_begin, MPI_File_write_ordered_begin_c(Ordered, true) "Begins a split ordered write.";
}

end! {
    MPI_File_read_at_all_end "Ends a split collective read at an explicit offset: its status.";
    MPI_File_write_at_all_end "Ends a split collective write at an explicit offset: its status.";
    MPI_File_read_all_end "Ends a split collective read at the individual file pointer: its status.";
    MPI_File_write_all_end "Ends a split collective write at the individual file pointer: its status.";
    MPI_File_read_ordered_end "Ends a split ordered read: its status.";
    MPI_File_write_ordered_end "Ends a split ordered write: its status.";
}
