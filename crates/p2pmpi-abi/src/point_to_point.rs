//! Point-to-point communication: `MPI_Send` and its modes (`MPI_Ssend`, `MPI_Rsend`),
//! `MPI_Recv`, `MPI_Isend`, `MPI_Issend`, `MPI_Irsend`, `MPI_Ibsend`, `MPI_Irecv`,
//! `MPI_Sendrecv`, `MPI_Sendrecv_replace`, the completions (`MPI_Wait`, `MPI_Waitall`,
//! `MPI_Waitany`, `MPI_Test`, `MPI_Testall`, `MPI_Testany`, `MPI_Request_free`), `MPI_Probe`,
//! `MPI_Iprobe`, `MPI_Get_count`, the buffered send `MPI_Bsend`, `MPI_Get_elements`,
//! `MPI_Waitsome`, `MPI_Testsome`, `MPI_Test_cancelled`, and persistent requests
//! (`MPI_Send_init`, `MPI_Ssend_init`, `MPI_Rsend_init`, `MPI_Bsend_init`, `MPI_Recv_init`,
//! `MPI_Start`, `MPI_Startall`: a completed one stays, inactive, until `MPI_Request_free`).
//!
//! A ready-mode send (`MPI_Rsend`) is a standard send (which the standard allows). The
//! requests are the library's (`p2pmpi::ffi`), named by handles of [`REQUESTS`].

use crate::consts::*;
use crate::datatypes::MPI_Count;
use crate::datatypes::{datatype, size_of};
use crate::handles::{
    comm, new_request, null_request, request as raw_request, rust_comm, Persistent, RequestEntry, REQUESTS,
};
use crate::status::{self, MPI_Status};
use crate::{not_in_place, nz, nz_mut, ok};
use p2pmpi::datatype::{DatatypeRef, DynBuffer};
use p2pmpi::ffi;
use p2pmpi::traits::*;
use std::os::raw::{c_int, c_void};

/// The status of the completion of a null request (or of a receive from `MPI_PROC_NULL`).
fn empty_status() -> MPI_Status {
    MPI_Status::new(0, false, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS)
}

/// Writes `s` at `out` unless it is `MPI_STATUS_IGNORE`.
///
/// # Safety
/// `out` must be null, `MPI_STATUS_IGNORE` or valid for a write.
unsafe fn put_status(out: *mut MPI_Status, s: MPI_Status) {
    if status::wanted(out) {
        // SAFETY: the caller's contract.
        unsafe { out.write(s) };
    }
}

/// The ways to send.
#[derive(Clone, Copy)]
enum Mode {
    Standard,
    Synchronous,
}

/// Sends (blocking) in mode `m`.
///
/// # Safety
/// `buf` must hold `count` elements of `dt`.
unsafe fn send(
    m: Mode,
    buf: *const c_void,
    count: c_int,
    dt: c_int,
    dest: c_int,
    tag: c_int,
    c: c_int,
) -> Result<(), c_int> {
    if crate::bottom::is_bottom(buf, count, dt) {
        return crate::bottom::send(count, dt, dest, tag, c, matches!(m, Mode::Synchronous));
    }
    if let Mode::Standard = m {
        // SAFETY: the caller's contract.
        if let Some(r) = unsafe { crate::fast::send(buf, count, dt, dest, tag, c) } {
            return r;
        }
    }
    let fc = comm(c)?;
    let fd = datatype(dt)?;
    not_in_place(buf)?;
    // SAFETY: the caller's contract.
    ok(unsafe {
        match m {
            Mode::Standard => ffi::MPI_Send(nz(buf, count), count, fd, dest, tag, fc),
            Mode::Synchronous => ffi::MPI_Ssend(nz(buf, count), count, fd, dest, tag, fc),
        }
    })
}

/// Starts a send in mode `m`; `*request` names it.
///
/// # Safety
/// `buf` must hold `count` elements of `dt` until the request completes; `request` must be
/// valid for a write.
#[allow(clippy::too_many_arguments)]
unsafe fn isend(
    m: Mode,
    buf: *const c_void,
    count: c_int,
    dt: c_int,
    dest: c_int,
    tag: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let synchronous = matches!(m, Mode::Synchronous);
    // SAFETY: the caller's contract.
    if let Some(r) = unsafe { crate::fast::isend(buf, count, dt, dest, tag, c, synchronous, request) } {
        return r;
    }
    let fc = comm(c)?;
    let fd = datatype(dt)?;
    not_in_place(buf)?;
    if request.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let mut r = null_request();
    // SAFETY: the caller's contract; `r` is a local.
    ok(unsafe {
        match m {
            Mode::Standard => ffi::MPI_Isend(nz(buf, count), count, fd, dest, tag, fc, &mut r),
            Mode::Synchronous => ffi::MPI_Issend(nz(buf, count), count, fd, dest, tag, fc, &mut r),
        }
    })?;
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { request.write(new_request(r, None)) };
    Ok(())
}

mpi_fn! {
    /// Sends `count` elements of `datatype` to `dest` (blocking, standard mode).
    fn MPI_Send(buf: *const c_void, count: c_int, dt: c_int, dest: c_int, tag: c_int, c: c_int) on c => {
        // SAFETY: the caller's contract.
        unsafe { send(Mode::Standard, buf, count, dt, dest, tag, c) }
    }
}

mpi_fn! {
    /// Sends in synchronous mode: returns once the receiver matched the message.
    fn MPI_Ssend(buf: *const c_void, count: c_int, dt: c_int, dest: c_int, tag: c_int, c: c_int) on c => {
        // SAFETY: the caller's contract.
        unsafe { send(Mode::Synchronous, buf, count, dt, dest, tag, c) }
    }
}

mpi_fn! {
    /// Sends in ready mode (as a standard send).
    fn MPI_Rsend(buf: *const c_void, count: c_int, dt: c_int, dest: c_int, tag: c_int, c: c_int) on c => {
        // SAFETY: the caller's contract.
        unsafe { send(Mode::Standard, buf, count, dt, dest, tag, c) }
    }
}

mpi_fn! {
    /// Starts a standard send.
    fn MPI_Isend(buf: *const c_void, count: c_int, dt: c_int, dest: c_int, tag: c_int, c: c_int, request: *mut c_int)
        on c => {
        // SAFETY: the caller's contract.
        unsafe { isend(Mode::Standard, buf, count, dt, dest, tag, c, request) }
    }
}

mpi_fn! {
    /// Starts a synchronous send.
    fn MPI_Issend(buf: *const c_void, count: c_int, dt: c_int, dest: c_int, tag: c_int, c: c_int, request: *mut c_int)
        on c => {
        // SAFETY: the caller's contract.
        unsafe { isend(Mode::Synchronous, buf, count, dt, dest, tag, c, request) }
    }
}

mpi_fn! {
    /// Starts a ready-mode send (as a standard one).
    fn MPI_Irsend(buf: *const c_void, count: c_int, dt: c_int, dest: c_int, tag: c_int, c: c_int, request: *mut c_int)
        on c => {
        // SAFETY: the caller's contract.
        unsafe { isend(Mode::Standard, buf, count, dt, dest, tag, c, request) }
    }
}

mpi_fn! {
    /// Receives at most `count` elements of `datatype` from `source` (or `MPI_ANY_SOURCE`)
    /// with `tag` (or `MPI_ANY_TAG`).
    fn MPI_Recv(buf: *mut c_void, count: c_int, dt: c_int, source: c_int, tag: c_int, c: c_int, st: *mut MPI_Status)
        on c => {
        if crate::bottom::is_bottom(buf, count, dt) {
            // SAFETY: the caller's contract.
            return unsafe { crate::bottom::recv(count, dt, source, tag, c, st) };
        }
        // SAFETY: the caller's contract.
        if let Some(r) = unsafe { crate::fast::recv(buf, count, dt, source, tag, c, st) } {
            return r;
        }
        let fc = comm(c)?;
        let fd = datatype(dt)?;
        not_in_place(buf)?;
        let mut fs = ffi::MPI_Status::default();
        // SAFETY: the caller's contract; `fs` is a local.
        ok(unsafe { ffi::MPI_Recv(nz_mut(buf, count), count, fd, source, tag, fc, &mut fs) })?;
        // SAFETY: the caller's contract.
        unsafe { status::put(st, &fs) };
        Ok(())
    }
}

mpi_fn! {
    /// Starts a receive; `*request` names it.
    fn MPI_Irecv(buf: *mut c_void, count: c_int, dt: c_int, source: c_int, tag: c_int, c: c_int, request: *mut c_int)
        on c => {
        // SAFETY: the caller's contract.
        if let Some(r) = unsafe { crate::fast::irecv(buf, count, dt, source, tag, c, request) } {
            return r;
        }
        let fc = comm(c)?;
        let fd = datatype(dt)?;
        not_in_place(buf)?;
        if request.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let mut r = null_request();
        // SAFETY: the caller's contract; `r` is a local.
        ok(unsafe { ffi::MPI_Irecv(nz_mut(buf, count), count, fd, source, tag, fc, &mut r) })?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { request.write(new_request(r, None)) };
        Ok(())
    }
}

mpi_fn! {
    /// Sends to `dest` and receives from `source` at once.
    fn MPI_Sendrecv(
        sendbuf: *const c_void,
        sendcount: c_int,
        sendtype: c_int,
        dest: c_int,
        sendtag: c_int,
        recvbuf: *mut c_void,
        recvcount: c_int,
        recvtype: c_int,
        source: c_int,
        recvtag: c_int,
        c: c_int,
        st: *mut MPI_Status,
    ) on c => {
        let fc = comm(c)?;
        let (fs_t, fr_t) = (datatype(sendtype)?, datatype(recvtype)?);
        not_in_place(sendbuf)?;
        not_in_place(recvbuf)?;
        let mut fs = ffi::MPI_Status::default();
        let (s, r) = (nz(sendbuf, sendcount), nz_mut(recvbuf, recvcount));
        let (sc, rc_) = (sendcount, recvcount);
        // SAFETY: the caller's contract; `fs` is a local.
        let rc = unsafe { ffi::MPI_Sendrecv(s, sc, fs_t, dest, sendtag, r, rc_, fr_t, source, recvtag, fc, &mut fs) };
        ok(rc)?;
        // SAFETY: the caller's contract.
        unsafe { status::put(st, &fs) };
        Ok(())
    }
}

mpi_fn! {
    /// Waits for `*request` to complete and sets it to `MPI_REQUEST_NULL`.
    fn MPI_Wait(request: *mut c_int, st: *mut MPI_Status) on MPI_COMM_WORLD => {
        if request.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        let h = unsafe { request.read() };
        if h == MPI_REQUEST_NULL {
            // SAFETY: the caller's contract.
            unsafe { put_status(st, empty_status()) };
            return Ok(());
        }
        // One look at the table for a request that is not persistent (the common case).
        let Some(mut e) = REQUESTS.take_if(h, |e| e.persistent.is_none()) else {
            is_persistent(h)?;
            // SAFETY: the caller's contract.
            return unsafe { wait_persistent(h, st) };
        };
        if let Some(d) = e.direct.take() {
            // SAFETY: the caller's contract.
            return unsafe { crate::fast::wait(d, request, st) };
        }
        // SAFETY: as above.
        unsafe { request.write(MPI_REQUEST_NULL) };
        let (mut r, mut fs) = (e.raw, ffi::MPI_Status::default());
        // SAFETY: `r` and `fs` are locals; the request's buffer is the caller's to keep valid.
        let rc = unsafe { ffi::MPI_Wait(&mut r, &mut fs) };
        // What the request kept alive goes once it completed.
        drop(e.keep);
        ok(rc)?;
        if let Some(g) = crate::grequest::finish(h) {
            // SAFETY: the caller's contract.
            return g.map(|s| unsafe { put_status(st, s) });
        }
        // SAFETY: the caller's contract.
        unsafe { status::put(st, &fs) };
        Ok(())
    }
}

mpi_fn! {
    /// Tests whether `*request` completed: if so `*flag` is 1, the status filled and the
    /// request set to `MPI_REQUEST_NULL`.
    fn MPI_Test(request: *mut c_int, flag: *mut c_int, st: *mut MPI_Status) on MPI_COMM_WORLD => {
        if request.is_null() || flag.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        let h = unsafe { request.read() };
        if h == MPI_REQUEST_NULL {
            // SAFETY: checked non-null; the caller's contract for `st`.
            unsafe {
                flag.write(1);
                put_status(st, empty_status());
            }
            return Ok(());
        }
        // One claim of the request's slot (and one change below): a direct request is tested
        // in place, its slot lent meanwhile (one atomic operation in all).
        let (persistent, mut r) = match REQUESTS.lend(h, crate::fast::test_in).ok_or(MPI_ERR_REQUEST)? {
            crate::fast::Tested::General(persistent, r) => (persistent, r),
            // SAFETY: `request` and `flag` checked non-null, the caller's contract for all.
            direct => return unsafe { crate::fast::tested(direct, request, flag, st) },
        };
        let (mut done, mut fs) = (0, ffi::MPI_Status::default());
        if persistent && r == null_request() {
            // An inactive persistent request: complete, with an empty status.
            // SAFETY: `flag` checked non-null; the caller's contract for `st`.
            unsafe {
                flag.write(1);
                put_status(st, empty_status());
            }
            return Ok(());
        }
        // SAFETY: locals only; the request's buffer is the caller's to keep valid.
        let rc = unsafe { ffi::MPI_Test(&mut r, &mut done, &mut fs) };
        let mut greq = None;
        if done != 0 || r == null_request() {
            greq = crate::grequest::finish(h);
            if persistent {
                finished(h);
            } else {
                // (One change of the table: the entry, with what it kept alive, dropped
                // outside its lock.)
                drop(REQUESTS.take(h));
                // SAFETY: as above.
                unsafe { request.write(MPI_REQUEST_NULL) };
            }
        }
        ok(rc)?;
        if let Some(g) = greq {
            // SAFETY: `flag` checked non-null; the caller's contract for `st`.
            return g.map(|s| unsafe {
                flag.write(1);
                put_status(st, s)
            });
        }
        // SAFETY: `flag` checked non-null; the caller's contract for `st`.
        unsafe {
            flag.write(done);
            if done != 0 {
                status::put(st, &fs);
            }
        }
        Ok(())
    }
}

/// Runs `f` on the library's requests of the `count` MPICH handles at `requests` (the null
/// ones as the library's null request); afterwards each request that `f` completed (made
/// null) is freed and its handle set to `MPI_REQUEST_NULL`.
///
/// # Safety
/// `requests` must be valid for `count` reads and writes.
unsafe fn with_requests(
    count: c_int,
    requests: *mut c_int,
    f: impl FnOnce(&mut [ffi::MPI_Request]) -> c_int,
) -> Result<Greqs, c_int> {
    if count < 0 {
        return Err(MPI_ERR_COUNT);
    }
    if count > 0 && requests.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let ours: &mut [c_int] = if count == 0 {
        &mut []
    } else {
        // SAFETY: non-null, and the caller vouches for `count` handles.
        unsafe { std::slice::from_raw_parts_mut(requests, count as usize) }
    };
    let null = null_request();
    let mut theirs = Vec::with_capacity(ours.len());
    for &h in ours.iter() {
        theirs.push(if h == MPI_REQUEST_NULL { null } else { raw_request(h).ok_or(MPI_ERR_REQUEST)? });
    }
    let was: Vec<ffi::MPI_Request> = theirs.clone();
    let rc = f(&mut theirs);
    let mut greqs = Vec::new();
    for (i, ((h, r), w)) in ours.iter_mut().zip(&theirs).zip(&was).enumerate() {
        if *h != MPI_REQUEST_NULL && *r == null && *w != null {
            if let Some(g) = crate::grequest::finish(*h) {
                greqs.push((i, g));
            }
            // Completed: freed, or for a persistent request made inactive (its handle stays).
            if !finished(*h) {
                *h = MPI_REQUEST_NULL;
            }
        }
    }
    ok(rc)?;
    Ok(greqs)
}

/// The generalized requests an array operation completed: their indices and the statuses
/// their `query_fn` gave (or the error).
type Greqs = Vec<(usize, Result<MPI_Status, c_int>)>;

/// Writes the statuses of the generalized requests completed (`greqs`) at their places in
/// `out` (`place` maps a request's index to its place there; `None`: not reported); the
/// first error of their callbacks is the call's.
///
/// # Safety
/// `out` must be null, `MPI_STATUS(ES)_IGNORE` or valid for writes at every place.
unsafe fn put_greqs(greqs: Greqs, out: *mut MPI_Status, place: impl Fn(usize) -> Option<usize>) -> Result<(), c_int> {
    let mut first = Ok(());
    for (i, g) in greqs {
        match (g, place(i)) {
            (Ok(s), Some(k)) if status::wanted(out) => {
                // SAFETY: the caller's contract.
                unsafe { out.add(k).write(s) }
            }
            (Err(e), _) if first.is_ok() => first = Err(e),
            _ => {}
        }
    }
    first
}

/// The statuses of an array operation of `count` requests: the library's, then converted to
/// `out` (unless it is `MPI_STATUSES_IGNORE`).
struct Statuses {
    theirs: Vec<ffi::MPI_Status>,
    out: *mut MPI_Status,
}

impl Statuses {
    fn new(count: c_int, out: *mut MPI_Status) -> Statuses {
        Statuses { theirs: vec![ffi::MPI_Status::default(); count.max(0) as usize], out }
    }

    /// Converts the statuses to the caller's array.
    ///
    /// # Safety
    /// `out` must be null, `MPI_STATUSES_IGNORE` or valid for `count` writes.
    unsafe fn write(&self) {
        if status::wanted(self.out) {
            for (i, s) in self.theirs.iter().enumerate() {
                // SAFETY: `i < count`; the caller's contract.
                unsafe { self.out.add(i).write(MPI_Status::from(s)) };
            }
        }
    }
}

mpi_fn! {
    /// Waits for every request of the array.
    fn MPI_Waitall(count: c_int, requests: *mut c_int, statuses: *mut MPI_Status) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        if let Some(r) = unsafe { crate::fast::waitall(count, requests, statuses) } {
            return r;
        }
        let mut s = Statuses::new(count, statuses);
        // SAFETY: the caller's contract; the statuses are ours, `count` of them.
        let r = unsafe {
            with_requests(count, requests, |rs| ffi::MPI_Waitall(count, rs.as_mut_ptr(), s.theirs.as_mut_ptr()))
        };
        // SAFETY: the caller's contract.
        unsafe { s.write() };
        let r = match r {
            // SAFETY: the caller's contract.
            Ok(g) => unsafe { put_greqs(g, statuses, Some) },
            Err(e) => Err(e),
        };
        match r {
            Err(MPI_ERR_REQUEST) | Err(MPI_ERR_COUNT) | Err(MPI_ERR_ARG) | Ok(()) => r,
            // A failed request: its status says which (MPI_ERROR).
            Err(_) if status::wanted(statuses) => Err(MPI_ERR_IN_STATUS),
            Err(e) => Err(e),
        }
    }
}

mpi_fn! {
    /// Tests whether every request of the array completed (then completes them all).
    fn MPI_Testall(
        count: c_int,
        requests: *mut c_int,
        flag: *mut c_int,
        statuses: *mut MPI_Status,
    ) on MPI_COMM_WORLD => {
        if flag.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let mut s = Statuses::new(count, statuses);
        // SAFETY: the caller's contract; `flag` checked non-null, the statuses are ours.
        let g = unsafe {
            with_requests(count, requests, |rs| ffi::MPI_Testall(count, rs.as_mut_ptr(), flag, s.theirs.as_mut_ptr()))
        }?;
        // SAFETY: checked non-null above.
        if unsafe { flag.read() } != 0 {
            // SAFETY: the caller's contract.
            unsafe { s.write() };
            // SAFETY: as above.
            return unsafe { put_greqs(g, statuses, Some) };
        }
        Ok(())
    }
}

mpi_fn! {
    /// Waits for any request of the array to complete; `*index` is its index
    /// (`MPI_UNDEFINED` if none is active).
    fn MPI_Waitany(count: c_int, requests: *mut c_int, index: *mut c_int, st: *mut MPI_Status) on MPI_COMM_WORLD => {
        if index.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let mut fs = ffi::MPI_Status::default();
        // SAFETY: the caller's contract; `index` checked non-null, `fs` a local.
        let g = unsafe { with_requests(count, requests, |rs| ffi::MPI_Waitany(count, rs.as_mut_ptr(), index, &mut fs)) }?;
        // SAFETY: `index` checked non-null; the caller's contract for `st`.
        unsafe {
            if index.read() == MPI_UNDEFINED {
                put_status(st, empty_status());
            } else {
                status::put(st, &fs);
            }
        }
        // SAFETY: the caller's contract for `st` (one status).
        unsafe { put_greqs(g, st, |_| Some(0)) }
    }
}

mpi_fn! {
    /// Tests the requests of the array in order: the first completed one gives `*index`.
    fn MPI_Testany(count: c_int, requests: *mut c_int, index: *mut c_int, flag: *mut c_int, st: *mut MPI_Status)
        on MPI_COMM_WORLD => {
        if index.is_null() || flag.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let mut fs = ffi::MPI_Status::default();
        // SAFETY: the caller's contract; `index` and `flag` checked non-null, `fs` a local.
        let g = unsafe {
            with_requests(count, requests, |rs| ffi::MPI_Testany(count, rs.as_mut_ptr(), index, flag, &mut fs))
        }?;
        // SAFETY: both checked non-null; the caller's contract for `st`.
        unsafe {
            if index.read() != MPI_UNDEFINED {
                status::put(st, &fs);
            } else if flag.read() != 0 {
                put_status(st, empty_status());
            }
        }
        // SAFETY: the caller's contract for `st` (one status).
        unsafe { put_greqs(g, st, |_| Some(0)) }
    }
}

mpi_fn! {
    /// Frees a request (it completes in the background) and sets it to `MPI_REQUEST_NULL`.
    fn MPI_Request_free(request: *mut c_int) on MPI_COMM_WORLD => {
        if request.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        let h = unsafe { request.read() };
        let mut e = REQUESTS.take(h).ok_or(MPI_ERR_REQUEST)?;
        if e.persistent.is_some_and(|p| p.collective) {
            crate::pcoll::forget(h);
        }
        if e.persistent.is_some() {
            crate::partitioned::forget(h);
        }
        // SAFETY: as above.
        unsafe { request.write(MPI_REQUEST_NULL) };
        if let Some(rc) = crate::grequest::free(h) {
            ok(rc)?;
        }
        // (A direct request is handed over to the library's C layer, which completes it.)
        let mut r = e.raw();
        if r == null_request() {
            // An inactive persistent request: nothing runs.
            return Ok(());
        }
        // The request completes in the background, when no one looks: what it keeps alive
        // must outlive it, so it is never freed (a nonblocking collective's descriptions).
        std::mem::forget(e.keep);
        // SAFETY: `r` is a local.
        ok(unsafe { ffi::MPI_Request_free(&mut r) })
    }
}

mpi_fn! {
    /// Waits for a message from `source` with `tag` without receiving it; its status.
    fn MPI_Probe(source: c_int, tag: c_int, c: c_int, st: *mut MPI_Status) on c => {
        let fc = comm(c)?;
        let mut fs = ffi::MPI_Status::default();
        // SAFETY: `fs` is a local.
        ok(unsafe { ffi::MPI_Probe(source, tag, fc, &mut fs) })?;
        // SAFETY: the caller's contract.
        unsafe { status::put(st, &fs) };
        Ok(())
    }
}

mpi_fn! {
    /// Whether a message from `source` with `tag` is waiting (`*flag`), and its status.
    fn MPI_Iprobe(source: c_int, tag: c_int, c: c_int, flag: *mut c_int, st: *mut MPI_Status) on c => {
        let fc = comm(c)?;
        if flag.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let mut fs = ffi::MPI_Status::default();
        // SAFETY: `flag` checked non-null, writable as the caller vouches; `fs` a local.
        ok(unsafe { ffi::MPI_Iprobe(source, tag, fc, flag, &mut fs) })?;
        // SAFETY: as above, and the caller's contract for `st`.
        if unsafe { flag.read() } != 0 {
            // SAFETY: the caller's contract.
            unsafe { status::put(st, &fs) };
        }
        Ok(())
    }
}

mpi_fn! {
    /// The number of whole elements of `datatype` a status's message held (`MPI_UNDEFINED`
    /// if not whole).
    fn MPI_Get_count(st: *const MPI_Status, dt: c_int, count: *mut c_int) on MPI_COMM_WORLD => {
        let size = size_of(dt)?;
        if st.is_null() || count.is_null() || st as usize == MPI_STATUS_IGNORE {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked to be a real pointer; the caller vouches it is readable, and
        // `count` writable.
        unsafe { count.write((*st).count(size)) };
        Ok(())
    }
}

mpi_fn! {
    /// Sends through the buffer attached with `MPI_Buffer_attach` (returns once the message
    /// is copied there).
    fn MPI_Bsend(buf: *const c_void, count: c_int, dt: c_int, dest: c_int, tag: c_int, c: c_int) on c => {
        let rc = rust_comm(c)?;
        let d = datatype(dt)?;
        not_in_place(buf)?;
        if count < 0 {
            return Err(MPI_ERR_COUNT);
        }
        if count > 0 && buf.is_null() {
            return Err(MPI_ERR_BUFFER);
        }
        if tag < 0 {
            return Err(MPI_ERR_TAG);
        }
        if dest == MPI_PROC_NULL {
            return Ok(());
        }
        if !(0..rc.size()).contains(&dest) {
            return Err(MPI_ERR_RANK);
        }
        // SAFETY: `d` names a predefined datatype (living for the whole run); the caller
        // vouches for `count` elements at `buf`.
        let b = unsafe { DynBuffer::from_raw(nz(buf, count), count, DatatypeRef::from_raw(d)) };
        rc.process_at_rank(dest).buffered_send_with_tag(&b, tag);
        Ok(())
    }
}

mpi_fn! {
    /// `MPI_Bsend` with a large count.
    fn MPI_Bsend_c(buf: *const c_void, count: MPI_Count, dt: c_int, dest: c_int, tag: c_int, c: c_int) on c => {
        let count = c_int::try_from(count).map_err(|_| MPI_ERR_COUNT)?;
        // SAFETY: the caller's contract.
        ok(unsafe { MPI_Bsend(buf, count, dt, dest, tag, c) })
    }
}

/// The number of whole predefined elements a status's message held, as `MPI_Get_count`.
///
/// # Safety
/// `st` must be readable unless null or `MPI_STATUS_IGNORE`.
unsafe fn elements(st: *const MPI_Status, dt: c_int) -> Result<MPI_Count, c_int> {
    let size = size_of(dt)?;
    if st.is_null() || st as usize == MPI_STATUS_IGNORE {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: checked to be a real pointer; the caller vouches it is readable.
    let bytes = unsafe { st.read() }.bytes();
    Ok(match size as u64 {
        0 => 0,
        s if bytes % s != 0 => MPI_UNDEFINED as MPI_Count,
        s => (bytes / s) as MPI_Count,
    })
}

mpi_fn! {
    /// The number of basic elements a status's message held (for a predefined datatype, its
    /// count).
    fn MPI_Get_elements(st: *const MPI_Status, dt: c_int, count: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        let n = unsafe { elements(st, dt) }?;
        // SAFETY: the caller's contract.
        unsafe { crate::put(count, c_int::try_from(n).unwrap_or(MPI_UNDEFINED)) }
    }
}

mpi_fn! {
    /// `MPI_Get_elements` with a large count.
    fn MPI_Get_elements_c(st: *const MPI_Status, dt: c_int, count: *mut MPI_Count) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        let n = unsafe { elements(st, dt) }?;
        // SAFETY: the caller's contract.
        unsafe { crate::put(count, n) }
    }
}

mpi_fn! {
    /// MPI-3's name of `MPI_Get_elements_c`.
    fn MPI_Get_elements_x(st: *const MPI_Status, dt: c_int, count: *mut MPI_Count) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        let n = unsafe { elements(st, dt) }?;
        // SAFETY: the caller's contract.
        unsafe { crate::put(count, n) }
    }
}

/// Completes some of the requests of an array: with `wait`, at least one if any is active
/// (waiting for it); then every other that completed. Their indices and statuses are
/// written in order of discovery; `MPI_UNDEFINED` if none is active.
///
/// # Safety
/// The arrays as `MPI_Waitsome` says.
unsafe fn some(
    wait: bool,
    count: c_int,
    requests: *mut c_int,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MPI_Status,
) -> Result<(), c_int> {
    if outcount.is_null() || (count > 0 && indices.is_null()) {
        return Err(MPI_ERR_ARG);
    }
    let null = null_request();
    let mut done: Vec<(c_int, ffi::MPI_Status)> = Vec::new();
    let mut active = true;
    // SAFETY: the caller vouches for the requests; the library writes locals only.
    let g = unsafe {
        with_requests(count, requests, |rs| {
            active = rs.iter().any(|r| *r != null);
            if !active {
                return MPI_SUCCESS;
            }
            if wait {
                let (mut i, mut st) = (0, ffi::MPI_Status::default());
                let rc = ffi::MPI_Waitany(count, rs.as_mut_ptr(), &mut i, &mut st);
                if rc != MPI_SUCCESS {
                    return rc;
                }
                done.push((i, st));
            }
            for (j, r) in rs.iter_mut().enumerate() {
                if *r == null {
                    continue;
                }
                let (mut flag, mut st) = (0, ffi::MPI_Status::default());
                let rc = ffi::MPI_Test(r, &mut flag, &mut st);
                if rc != MPI_SUCCESS {
                    return rc;
                }
                if flag != 0 {
                    done.push((j as c_int, st));
                }
            }
            MPI_SUCCESS
        })
    }?;
    // SAFETY: `outcount` checked non-null; the caller vouches for `count` entries of
    // `indices` and (unless ignored) `statuses`.
    unsafe {
        if !active {
            outcount.write(MPI_UNDEFINED);
            return Ok(());
        }
        outcount.write(done.len() as c_int);
        for (k, (i, st)) in done.iter().enumerate() {
            indices.add(k).write(*i);
            if status::wanted(statuses) {
                statuses.add(k).write(MPI_Status::from(st));
            }
        }
        put_greqs(g, statuses, |i| done.iter().position(|(j, _)| *j as usize == i))
    }
}

mpi_fn! {
    /// Waits until at least one request of the array completes; `*outcount` of them, at
    /// `indices` (`MPI_UNDEFINED` if none is active).
    fn MPI_Waitsome(
        count: c_int,
        requests: *mut c_int,
        outcount: *mut c_int,
        indices: *mut c_int,
        statuses: *mut MPI_Status,
    ) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { some(true, count, requests, outcount, indices, statuses) }
    }
}

mpi_fn! {
    /// The requests of the array that completed: `*outcount` of them (maybe 0), at
    /// `indices` (`MPI_UNDEFINED` if none is active).
    fn MPI_Testsome(
        count: c_int,
        requests: *mut c_int,
        outcount: *mut c_int,
        indices: *mut c_int,
        statuses: *mut MPI_Status,
    ) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { some(false, count, requests, outcount, indices, statuses) }
    }
}

mpi_fn! {
    /// Whether the operation a status describes was cancelled.
    fn MPI_Test_cancelled(st: *const MPI_Status, flag: *mut c_int) on MPI_COMM_WORLD => {
        if st.is_null() || st as usize == MPI_STATUS_IGNORE {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked to be a real pointer; the caller vouches it is readable.
        let c = unsafe { st.read() }.cancelled();
        // SAFETY: the caller's contract.
        unsafe { crate::put(flag, c as c_int) }
    }
}

mpi_fn! {
    /// Asks for the cancellation of `*request`: a receive not matched yet completes as
    /// cancelled (`MPI_Test_cancelled` tells); a send, or a receive already matched, completes
    /// normally (MPI lets a cancellation fail). The request must still be completed.
    fn MPI_Cancel(request: *mut c_int) on MPI_COMM_WORLD => {
        if request.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable.
        let h = unsafe { request.read() };
        if crate::fast::cancel(h).is_some() {
            // A direct request, cancelled where it lies.
            return Ok(());
        }
        let r = raw_request(h).ok_or(MPI_ERR_REQUEST)?;
        if let Some(rc) = crate::grequest::cancel(h) {
            return ok(rc);
        }
        if r == null_request() {
            // An inactive persistent request: nothing to cancel.
            return Ok(());
        }
        // SAFETY: `r` is a local.
        ok(unsafe { ffi::MPI_Cancel(&r) })
    }
}

mpi_fn! {
    /// Whether `request` completed (`*flag`) and its status, without completing it: the
    /// request stays for a wait, a test or `MPI_Request_free`.
    fn MPI_Request_get_status(request: c_int, flag: *mut c_int, st: *mut MPI_Status) on MPI_COMM_WORLD => {
        if flag.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let r = if request == MPI_REQUEST_NULL { null_request() } else { raw_request(request).ok_or(MPI_ERR_REQUEST)? };
        if let Some(g) = crate::grequest::peek(request) {
            // SAFETY: `flag` checked non-null; the caller's contract for `st`.
            unsafe { flag.write(g.is_some() as c_int) };
            return match g {
                // SAFETY: the caller's contract.
                Some(s) => s.map(|s| unsafe { put_status(st, s) }),
                None => Ok(()),
            };
        }
        if r == null_request() {
            // The null request, or an inactive persistent one: complete, with an empty status.
            // SAFETY: `flag` checked non-null; the caller's contract for `st`.
            unsafe {
                flag.write(1);
                put_status(st, empty_status());
            }
            return Ok(());
        }
        let (mut done, mut fs) = (0, ffi::MPI_Status::default());
        // SAFETY: locals only.
        ok(unsafe { ffi::MPI_Request_get_status(r, &mut done, &mut fs) })?;
        // SAFETY: `flag` checked non-null; the caller's contract for `st`.
        unsafe {
            flag.write(done);
            if done != 0 {
                status::put(st, &fs);
            }
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ persistent requests

/// Whether request `h` is persistent (`MPI_ERR_REQUEST` if `h` names no request).
fn is_persistent(h: c_int) -> Result<bool, c_int> {
    REQUESTS.with(h, |e| e.persistent.is_some()).ok_or(MPI_ERR_REQUEST)
}

/// Request `h` completed: a persistent one becomes inactive (`true`), another is freed
/// (`false`).
fn finished(h: c_int) -> bool {
    let null = null_request();
    let (persistent, kept) = REQUESTS
        .with_mut(h, |e| {
            if e.persistent.is_some() {
                e.raw = null;
                (true, e.keep.take())
            } else {
                (false, None)
            }
        })
        .unwrap_or((false, None));
    // What a persistent collective kept goes once it completed (some finish their work
    // then: `crate::exchange`), outside the table's lock.
    drop(kept);
    if !persistent {
        REQUESTS.take(h);
    }
    persistent
}

/// `MPI_Wait` on persistent request `h`: completes the operation it started, if any; the
/// request stays, inactive.
///
/// # Safety
/// `st` must be null, `MPI_STATUS_IGNORE` or writable.
unsafe fn wait_persistent(h: c_int, st: *mut MPI_Status) -> Result<(), c_int> {
    let mut r = raw_request(h).ok_or(MPI_ERR_REQUEST)?;
    if r == null_request() {
        // SAFETY: the caller's contract.
        unsafe { put_status(st, empty_status()) };
        return Ok(());
    }
    let mut fs = ffi::MPI_Status::default();
    // SAFETY: `r` and `fs` are locals; the request's buffer is the caller's to keep valid.
    let rc = unsafe { ffi::MPI_Wait(&mut r, &mut fs) };
    finished(h);
    ok(rc)?;
    // SAFETY: the caller's contract.
    unsafe { status::put(st, &fs) };
    Ok(())
}

/// Makes an inactive persistent request of `p` at `request`.
///
/// # Safety
/// `request` must be null or valid for a write.
unsafe fn persistent(p: Persistent, request: *mut c_int) -> Result<(), c_int> {
    comm(p.comm)?;
    datatype(p.dt)?;
    if p.count < 0 {
        return Err(MPI_ERR_COUNT);
    }
    not_in_place(p.buf as *const c_void)?;
    if request.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let h = REQUESTS.insert(RequestEntry { raw: null_request(), keep: None, persistent: Some(p), direct: None });
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { request.write(h) };
    Ok(())
}

/// Starts persistent request `h` (inactive).
fn start(h: c_int) -> Result<(), c_int> {
    let (p, raw) = REQUESTS.with(h, |e| (e.persistent, e.raw)).ok_or(MPI_ERR_REQUEST)?;
    let Some(p) = p else { return Err(MPI_ERR_REQUEST) };
    if raw != null_request() {
        // Still active.
        return Err(MPI_ERR_REQUEST);
    }
    if p.collective {
        return crate::pcoll::start(h);
    }
    let (fc, fd) = (comm(p.comm)?, datatype(p.dt)?);
    let mut r = null_request();
    let buf = crate::nz_mut(p.buf as *mut c_void, p.count);
    // SAFETY: the program made the request with its buffer, which it keeps valid while the
    // request is active (MPI's rule); `r` is a local.
    ok(unsafe {
        match (p.recv, p.synchronous) {
            (true, _) => ffi::MPI_Irecv(buf, p.count, fd, p.peer, p.tag, fc, &mut r),
            (false, true) => ffi::MPI_Issend(buf, p.count, fd, p.peer, p.tag, fc, &mut r),
            (false, false) => ffi::MPI_Isend(buf, p.count, fd, p.peer, p.tag, fc, &mut r),
        }
    })?;
    REQUESTS.with_mut(h, |e| e.raw = r).ok_or(MPI_ERR_REQUEST)
}

/// Defines a persistent send's initialization.
macro_rules! send_init {
    ($name:ident, $sync:expr, $what:literal) => {
        mpi_fn! {
            #[doc = concat!("Makes a persistent ", $what, " (inactive until `MPI_Start`).")]
            fn $name(
                buf: *const c_void,
                count: c_int,
                dt: c_int,
                dest: c_int,
                tag: c_int,
                c: c_int,
                request: *mut c_int,
            ) on c => {
                let (recv, synchronous, buf) = (false, $sync, buf as usize);
                let p = Persistent { recv, synchronous, collective: false, buf, count, dt, peer: dest, tag, comm: c };
                // SAFETY: the caller's contract.
                unsafe { persistent(p, request) }
            }
        }
    };
}
send_init!(MPI_Send_init, false, "standard send");
send_init!(MPI_Ssend_init, true, "synchronous send");
send_init!(MPI_Rsend_init, false, "ready-mode send (a standard one)");
send_init!(MPI_Bsend_init, false, "buffered send (a standard one)");

mpi_fn! {
    /// Makes a persistent receive (inactive until `MPI_Start`).
    fn MPI_Recv_init(
        buf: *mut c_void,
        count: c_int,
        dt: c_int,
        source: c_int,
        tag: c_int,
        c: c_int,
        request: *mut c_int,
    ) on c => {
        let (recv, synchronous, buf) = (true, false, buf as usize);
        let p = Persistent { recv, synchronous, collective: false, buf, count, dt, peer: source, tag, comm: c };
        // SAFETY: the caller's contract.
        unsafe { persistent(p, request) }
    }
}

mpi_fn! {
    /// Starts the persistent request `*request`.
    fn MPI_Start(request: *mut c_int) on MPI_COMM_WORLD => {
        if request.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable.
        start(unsafe { request.read() })
    }
}

mpi_fn! {
    /// Starts the `count` persistent requests of the array.
    fn MPI_Startall(count: c_int, requests: *mut c_int) on MPI_COMM_WORLD => {
        if count < 0 {
            return Err(MPI_ERR_COUNT);
        }
        if count > 0 && requests.is_null() {
            return Err(MPI_ERR_ARG);
        }
        for i in 0..count as usize {
            // SAFETY: `i < count`, and the caller vouches for `count` handles.
            start(unsafe { requests.add(i).read() })?;
        }
        Ok(())
    }
}

mpi_fn! {
    /// Starts a buffered send (as a standard one: it completes without the receiver).
    fn MPI_Ibsend(buf: *const c_void, count: c_int, dt: c_int, dest: c_int, tag: c_int, c: c_int, request: *mut c_int)
        on c => {
        // SAFETY: the caller's contract.
        unsafe { isend(Mode::Standard, buf, count, dt, dest, tag, c, request) }
    }
}

mpi_fn! {
    /// Sends `count` elements of `datatype` at `buf` to `dest` and receives as many into
    /// the same buffer from `source`.
    fn MPI_Sendrecv_replace(
        buf: *mut c_void,
        count: c_int,
        dt: c_int,
        dest: c_int,
        sendtag: c_int,
        source: c_int,
        recvtag: c_int,
        c: c_int,
        st: *mut MPI_Status,
    ) on c => {
        if count < 0 {
            return Err(MPI_ERR_COUNT);
        }
        not_in_place(buf)?;
        // What is sent is a copy: the receive overwrites `buf`.
        let bytes = count as usize * crate::datatypes::stageable(dt)?;
        let mut copy = vec![0u64; bytes.div_ceil(8)];
        if bytes > 0 {
            if buf.is_null() {
                return Err(MPI_ERR_BUFFER);
            }
            // SAFETY: the caller vouches for `count` elements (one run of `bytes`) at `buf`;
            // `copy` is distinct.
            unsafe { std::ptr::copy_nonoverlapping(buf as *const u8, copy.as_mut_ptr() as *mut u8, bytes) };
        }
        let out = copy.as_ptr() as *const c_void;
        // SAFETY: the copy holds the elements to send; `buf` receives as many.
        ok(unsafe { MPI_Sendrecv(out, count, dt, dest, sendtag, buf, count, dt, source, recvtag, c, st) })
    }
}
