//! The common case of the blocking standard send and the receive straight on the Rust API
//! (and of the nonblocking sends and receive, whose requests the MPICH handles then hold
//! directly, completed by `MPI_Test`, `MPI_Wait` and `MPI_Waitall` (when every request of the
//! array is null or direct) and cancelled by `MPI_Cancel` without the library's C layer):
//! `MPI_COMM_WORLD`, a predefined datatype, a real buffer, a valid rank and tag. Through the
//! library's C layer (`p2pmpi::ffi`) each such call also looked the world up by its handle
//! (taking and dropping a reference to it: two atomic operations) and converted the status
//! twice; here the world is held once and the status is made in MPICH's layout directly.
//! Anything else (`MPI_PROC_NULL`, wildcards aside; another communicator; a derived datatype;
//! an argument to refuse) returns `None` and goes the general way, which checks and answers
//! it: the fast path never decides an error of the arguments.

use crate::consts::*;
use crate::handles::{new_direct_request, RequestEntry, REQUESTS};
use crate::status::{self, MPI_Status};
use crate::{nz, nz_mut};
use p2pmpi::datatype::{DatatypeRef, DynBuffer, DynBufferMut};
use p2pmpi::ffi;
use p2pmpi::request::Detached;
use p2pmpi::topology::SimpleCommunicator;
use p2pmpi::traits::*;
use p2pmpi::CommError;
use std::os::raw::{c_int, c_void};
use std::sync::OnceLock;

/// The world, with its size, taken once the library is initialized.
// Process-wide, as the world is.
static WORLD: OnceLock<(SimpleCommunicator, c_int)> = OnceLock::new();

/// The world, if the library is initialized and not finalized (else `None`: the general way
/// answers the error).
#[inline]
fn world() -> Option<&'static (SimpleCommunicator, c_int)> {
    if !p2pmpi::is_initialized() || p2pmpi::is_finalized() {
        return None;
    }
    Some(WORLD.get_or_init(|| {
        let w = SimpleCommunicator::world();
        let n = w.size();
        (w, n)
    }))
}

/// The layout of predefined datatype `dt`, for a buffer of `count` elements at `buf` that
/// the fast path may take (a real buffer: not null with data, not `MPI_IN_PLACE`).
#[inline]
fn layout(buf: *const c_void, count: c_int, dt: c_int) -> Option<DatatypeRef<'static>> {
    if count < 0 || (buf.is_null() && count > 0) || crate::is_in_place(buf) {
        return None;
    }
    let d = crate::datatypes::predefined(dt)?;
    // SAFETY: `d` names a predefined datatype, which lives for the whole run.
    Some(unsafe { <DatatypeRef<'static> as FromRaw>::from_raw(d) })
}

/// The error class of a failed communication, as the library's C layer answers it
/// (`MPI_ERR_TRUNCATE`, `MPIX_ERR_PROC_FAILED` with the lost rank noted for a fatal error's
/// message, `MPIX_ERR_REVOKED`, else `MPI_ERR_OTHER`).
#[inline]
fn class(e: &CommError) -> c_int {
    p2pmpi::ffi::error_class(e)
}

/// `MPI_Send` (standard mode) in the common case, or `None`.
///
/// # Safety
/// `buf` must hold `count` elements of `dt`.
#[inline]
pub unsafe fn send(
    buf: *const c_void,
    count: c_int,
    dt: c_int,
    dest: c_int,
    tag: c_int,
    c: c_int,
) -> Option<Result<(), c_int>> {
    if c != MPI_COMM_WORLD || tag < 0 {
        return None;
    }
    let (w, n) = world()?;
    if !(0..*n).contains(&dest) {
        return None;
    }
    let d = layout(buf, count, dt)?;
    // SAFETY: the caller vouches for `count` elements of `dt` at `buf`, read during this call.
    let data = unsafe { DynBuffer::from_raw(nz(buf, count), count, d) };
    Some(w.process_at_rank(dest).try_send_with_tag(&data, tag).map_err(|e| class(&e)))
}

/// `MPI_Recv` in the common case (a source rank or `MPI_ANY_SOURCE`, a tag or
/// `MPI_ANY_TAG`), or `None`.
///
/// # Safety
/// `buf` must be writable for `count` elements of `dt`; `st` null, `MPI_STATUS_IGNORE` or
/// writable.
#[inline]
pub unsafe fn recv(
    buf: *mut c_void,
    count: c_int,
    dt: c_int,
    source: c_int,
    tag: c_int,
    c: c_int,
    st: *mut MPI_Status,
) -> Option<Result<(), c_int>> {
    if c != MPI_COMM_WORLD || (tag < 0 && tag != MPI_ANY_TAG) {
        return None;
    }
    let (w, n) = world()?;
    if source != MPI_ANY_SOURCE && !(0..*n).contains(&source) {
        return None;
    }
    let d = layout(buf, count, dt)?;
    // SAFETY: the caller vouches that `buf` is writable for `count` elements of `dt`, and
    // nothing else uses it during this call.
    let mut data = unsafe { DynBufferMut::from_raw(nz_mut(buf, count), count, d) };
    let r = if source == MPI_ANY_SOURCE {
        w.any_process().try_receive_into_with_tag(&mut data, tag)
    } else {
        w.process_at_rank(source).try_receive_into_with_tag(&mut data, tag)
    };
    Some(r.map_err(|e| class(&e)).map(|s| {
        if status::wanted(st) {
            let m = MPI_Status::new(s.byte_count(), s.is_cancelled(), s.source_rank(), s.tag(), MPI_SUCCESS);
            // SAFETY: a real status pointer, which the caller vouches is writable.
            unsafe { st.write(m) };
        }
    }))
}

/// `MPI_Isend` (`synchronous`: `MPI_Issend`) in the common case, or `None`: the library's
/// request is held in the MPICH handle's entry itself ([`RequestEntry`]'s `direct`), not in
/// the library's C layer's table.
///
/// # Safety
/// `buf` must hold `count` elements of `dt` until the request completes; `request` null or
/// writable.
#[allow(clippy::too_many_arguments)]
#[inline]
pub unsafe fn isend(
    buf: *const c_void,
    count: c_int,
    dt: c_int,
    dest: c_int,
    tag: c_int,
    c: c_int,
    synchronous: bool,
    request: *mut c_int,
) -> Option<Result<(), c_int>> {
    if c != MPI_COMM_WORLD || tag < 0 || request.is_null() {
        return None;
    }
    let (w, n) = world()?;
    if !(0..*n).contains(&dest) {
        return None;
    }
    let d = layout(buf, count, dt)?;
    // SAFETY: the caller vouches for `count` elements of `dt` at `buf`; the description is
    // read while the send starts, the data until the request completes.
    let data = unsafe { DynBuffer::from_raw(nz(buf, count), count, d) };
    // SAFETY: the program keeps the buffer valid and unchanged until the request completes
    // (MPI's rule for a nonblocking send).
    let r = unsafe { Detached::send(&w.process_at_rank(dest), &data, tag, synchronous) };
    // SAFETY: checked non-null; the caller vouches it is writable.
    Some(r.map(|d| unsafe { request.write(new_direct_request(d)) }).map_err(|e| class(&e)))
}

/// `MPI_Irecv` in the common case (a source rank or `MPI_ANY_SOURCE`, a tag or
/// `MPI_ANY_TAG`), or `None`; the request is held as [`isend`]'s.
///
/// # Safety
/// `buf` must be writable for `count` elements of `dt`, and not used otherwise until the
/// request completes; `request` null or writable.
#[inline]
pub unsafe fn irecv(
    buf: *mut c_void,
    count: c_int,
    dt: c_int,
    source: c_int,
    tag: c_int,
    c: c_int,
    request: *mut c_int,
) -> Option<Result<(), c_int>> {
    if c != MPI_COMM_WORLD || (tag < 0 && tag != MPI_ANY_TAG) || request.is_null() {
        return None;
    }
    let (w, n) = world()?;
    if source != MPI_ANY_SOURCE && !(0..*n).contains(&source) {
        return None;
    }
    let d = layout(buf, count, dt)?;
    // SAFETY: the caller vouches that `buf` is writable for `count` elements of `dt`, used by
    // nothing else until the request completes.
    let mut data = unsafe { DynBufferMut::from_raw(nz_mut(buf, count), count, d) };
    // SAFETY: the program keeps the buffer valid, and does not read it, until the request
    // completes (MPI's rule for a nonblocking receive).
    let r = unsafe {
        if source == MPI_ANY_SOURCE {
            Detached::receive(&w.any_process(), &mut data, tag)
        } else {
            Detached::receive(&w.process_at_rank(source), &mut data, tag)
        }
    };
    // SAFETY: checked non-null; the caller vouches it is writable.
    Some(r.map(|d| unsafe { request.write(new_direct_request(d)) }).map_err(|e| class(&e)))
}

/// Writes the status of a completion at `st` unless it is ignored.
///
/// # Safety
/// `st` must be null, `MPI_STATUS_IGNORE` or writable.
#[inline]
unsafe fn put(st: *mut MPI_Status, s: &p2pmpi::request::Status) {
    if status::wanted(st) {
        let m = MPI_Status::new(s.byte_count(), s.is_cancelled(), s.source_rank(), s.tag(), MPI_SUCCESS);
        // SAFETY: a real status pointer, which the caller vouches is writable.
        unsafe { st.write(m) };
    }
}

/// What [`test_in`] found of a request.
pub enum Tested {
    /// Not a direct request: the general way tests it (whether it is persistent, the
    /// library's handle).
    General(bool, ffi::MPI_Request),
    /// A direct request, not finished.
    NotYet,
    /// A direct request that finished (its entry now dropped, its slot freed).
    Done(Result<p2pmpi::request::Status, CommError>),
}

/// Tests the request of a slot lent by [`REQUESTS`] (`Table::lend`) in place, if it is
/// direct: a finished one is taken out of the slot, which frees it.
#[inline]
pub fn test_in(slot: &mut Option<RequestEntry>) -> Tested {
    let Some(e) = slot else { return Tested::NotYet };
    let Some(d) = e.direct.as_mut() else { return Tested::General(e.persistent.is_some(), e.raw) };
    match d.test() {
        None => Tested::NotYet,
        Some(r) => {
            if e.keep.is_none() {
                // Nothing to drop: the request is spent (`Detached::test` answered), the
                // rest of the entry plain values. (Forgotten rather than dropped: the drop
                // glue would look at every field again.)
                std::mem::forget(slot.take());
            } else {
                *slot = None;
            }
            Tested::Done(r)
        }
    }
}

/// `MPI_Test`'s answer for a direct request tested by [`test_in`] (not `General`): if it
/// finished, `*request` set to `MPI_REQUEST_NULL` and the status written (a failure answers
/// its error class).
///
/// # Safety
/// `request` and `flag` must be writable, `st` null, `MPI_STATUS_IGNORE` or writable.
#[inline]
pub unsafe fn tested(t: Tested, request: *mut c_int, flag: *mut c_int, st: *mut MPI_Status) -> Result<(), c_int> {
    let Tested::Done(r) = t else {
        // SAFETY: the caller's contract.
        unsafe { flag.write(0) };
        return Ok(());
    };
    // SAFETY: the caller's contract.
    unsafe { request.write(MPI_REQUEST_NULL) };
    let s = r.map_err(|e| class(&e))?;
    // SAFETY: the caller's contract.
    unsafe {
        flag.write(1);
        put(st, &s);
    }
    Ok(())
}

/// `MPI_Wait` of direct request `d` (its entry already freed): `*request` is set to
/// `MPI_REQUEST_NULL`, the status written (a failure answers its error class).
///
/// # Safety
/// `request` must be writable, `st` null, `MPI_STATUS_IGNORE` or writable.
#[inline]
pub unsafe fn wait(d: Detached, request: *mut c_int, st: *mut MPI_Status) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    unsafe { request.write(MPI_REQUEST_NULL) };
    let s = d.wait().map_err(|e| class(&e))?;
    // SAFETY: the caller's contract.
    unsafe { put(st, &s) };
    Ok(())
}

/// `MPI_Waitall` when every request of the array is null or direct (else `None`: the general
/// way): each is taken out of the table (one lock each) and waited for, its status written,
/// its handle set to `MPI_REQUEST_NULL`. A failure is answered as the general way does:
/// every request is still waited for, a failed one's status holds its error class, and the
/// call answers `MPI_ERR_IN_STATUS` (the class itself when the statuses are ignored).
///
/// # Safety
/// `requests` must be null or valid for `count` reads and writes, `statuses` null,
/// `MPI_STATUSES_IGNORE` or valid for `count` writes.
pub unsafe fn waitall(count: c_int, requests: *mut c_int, statuses: *mut MPI_Status) -> Option<Result<(), c_int>> {
    if count <= 0 || requests.is_null() {
        return None;
    }
    // SAFETY: non-null, and the caller vouches for `count` handles.
    let hs = unsafe { std::slice::from_raw_parts_mut(requests, count as usize) };
    if !REQUESTS.all(hs, MPI_REQUEST_NULL, |e| e.direct.is_some()) {
        return None;
    }
    let mut failed = None;
    for (i, h) in hs.iter_mut().enumerate() {
        let r = if *h == MPI_REQUEST_NULL {
            Ok(None)
        } else {
            // (Gone since the look above only if another thread completed it meanwhile, which
            // MPI forbids: answered as an unknown request.)
            match REQUESTS.take_if(*h, |e| e.direct.is_some()).and_then(|mut e| e.direct.take()) {
                Some(d) => d.wait().map(Some).map_err(|e| class(&e)),
                None => Err(MPI_ERR_REQUEST),
            }
        };
        *h = MPI_REQUEST_NULL;
        if status::wanted(statuses) {
            // SAFETY: `i < count`; the caller vouches for the statuses.
            let out = unsafe { statuses.add(i) };
            match r {
                // SAFETY: as above.
                Ok(Some(s)) => unsafe { put(out, &s) },
                // SAFETY: as above.
                Ok(None) => unsafe { out.write(MPI_Status::new(0, false, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS)) },
                // SAFETY: as above.
                Err(c) => unsafe { out.write(MPI_Status::new(0, false, MPI_ANY_SOURCE, MPI_ANY_TAG, c)) },
            }
        }
        if let Err(c) = r {
            failed.get_or_insert(c);
        }
    }
    Some(match failed {
        None => Ok(()),
        Some(_) if status::wanted(statuses) => Err(MPI_ERR_IN_STATUS),
        Some(c) => Err(c),
    })
}

/// `MPI_Cancel` of a direct request, where it lies (`None`: not one).
pub fn cancel(h: c_int) -> Option<()> {
    REQUESTS.with(h, |e| e.direct.as_ref().map(Detached::cancel)).flatten()
}
