//! Generalized requests (`MPI_Grequest_start`, `MPI_Grequest_complete`), and the private
//! requests they and partitioned sends ([`crate::partitioned`]) stand on.
//!
//! **Placeholders.** A request that the program (or this layer) completes, not the library,
//! is a receive of an empty message posted on a private duplicate of `MPI_COMM_SELF` with a
//! tag of its own; completing it is sending that message to this process. Every wait and test
//! of the library (`MPI_Waitany` among others, mixed with other requests) then works on it
//! unchanged.
//!
//! **Generalized requests.** Their callbacks are called as MPI says: `query_fn` fills the
//! status when a wait or a test completes the request (the status starts as that of an empty
//! receive from `MPI_ANY_SOURCE` with `MPI_ANY_TAG`), then `free_fn`; the first error either
//! returns is the call's; `cancel_fn` at `MPI_Cancel`, told whether `MPI_Grequest_complete`
//! was called; `free_fn` at `MPI_Request_free` (at once if the request completed, else at its
//! `MPI_Grequest_complete`). The point-to-point functions ask [`finish`] and [`cancel`] about
//! each request they complete or cancel; with no generalized request alive that is one
//! atomic load.

use crate::consts::*;
use crate::datatypes::values::MPI_BYTE;
use crate::handles::{comm, new_comm};
use crate::ok;
use crate::status::MPI_Status;
use p2pmpi::ffi;
use parking_lot::Mutex;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// `MPI_Grequest_query_function`.
pub type QueryFn = unsafe extern "C" fn(*mut c_void, *mut MPI_Status) -> c_int;
/// `MPI_Grequest_free_function`.
pub type FreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `MPI_Grequest_cancel_function`.
pub type CancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

/// The private duplicate of `MPI_COMM_SELF` (its MPICH handle) the placeholders use.
// Process-wide: one per process, made at first use.
static PRIVATE: Mutex<Option<c_int>> = Mutex::new(None);
/// The next placeholder's tag.
// Process-wide, as the private communicator is.
static NEXT_TAG: AtomicI32 = AtomicI32::new(0);

/// The private communicator's MPICH handle (made at first use).
fn private() -> Result<c_int, c_int> {
    let mut p = PRIVATE.lock();
    if let Some(c) = *p {
        return Ok(c);
    }
    // SAFETY: the predefined names are initialized statics that nothing writes.
    let (self_, mut d) = unsafe { (ffi::RSMPI_COMM_SELF, ffi::RSMPI_COMM_NULL) };
    // SAFETY: `d` is a local; `MPI_COMM_SELF` is live between `MPI_Init` and `MPI_Finalize`.
    ok(unsafe { ffi::MPI_Comm_dup(self_, &mut d) })?;
    let h = new_comm(d);
    *p = Some(h);
    Ok(h)
}

/// A new placeholder: its tag and the library's pending request.
pub(crate) fn placeholder() -> Result<(c_int, ffi::MPI_Request), c_int> {
    let tag = new_tag();
    Ok((tag, post(tag)?))
}

/// A tag for placeholders of its own.
pub(crate) fn new_tag() -> c_int {
    NEXT_TAG.fetch_add(1, Ordering::Relaxed) & 0x3fff_ffff
}

/// The private communicator's MPICH handle (for a persistent request that posts a
/// placeholder at each start).
pub(crate) fn private_handle() -> Result<c_int, c_int> {
    private()
}

/// Posts the placeholder receive of tag `tag`.
pub(crate) fn post(tag: c_int) -> Result<ffi::MPI_Request, c_int> {
    let c = comm(private()?)?;
    let byte = crate::datatypes::datatype(MPI_BYTE)?;
    // SAFETY: the predefined names are initialized statics that nothing writes.
    let mut r = unsafe { ffi::RSMPI_REQUEST_NULL };
    let buf = crate::nz_mut(std::ptr::null_mut(), 0);
    // SAFETY: an empty receive (no byte is written at the dangling address); `r` a local.
    ok(unsafe { ffi::MPI_Irecv(buf, 0, byte, 0, tag, c, &mut r) })?;
    Ok(r)
}

/// Completes the placeholder of tag `tag` (its receive gets its empty message).
pub(crate) fn release(tag: c_int) -> Result<(), c_int> {
    let c = comm(private()?)?;
    let byte = crate::datatypes::datatype(MPI_BYTE)?;
    let buf = crate::nz(std::ptr::null(), 0);
    // SAFETY: an empty send to this process, whose receive is posted: it completes at once.
    ok(unsafe { ffi::MPI_Send(buf, 0, byte, 0, tag, c) })
}

/// A generalized request: its callbacks and state.
struct Greq {
    handle: c_int,
    query: Option<QueryFn>,
    free: Option<FreeFn>,
    cancel: Option<CancelFn>,
    extra: usize,
    tag: c_int,
    complete: bool,
    /// Freed by `MPI_Request_free` before its completion: `free_fn` at completion.
    freed: bool,
}

/// The live generalized requests (few at a time: a list).
// Process-wide because a C handle is a plain integer any thread may hand to any function.
static GREQS: Mutex<Vec<Greq>> = Mutex::new(Vec::new());
/// How many there are (read without the lock by every completion).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Whether a generalized request may be alive.
#[inline]
pub(crate) fn any() -> bool {
    LIVE.load(Ordering::Relaxed) > 0
}

/// Takes request `h` out of the table if it is a generalized one.
fn take(h: c_int) -> Option<Greq> {
    if !any() {
        return None;
    }
    let mut g = GREQS.lock();
    let i = g.iter().position(|q| q.handle == h && !q.freed)?;
    LIVE.fetch_sub(1, Ordering::Relaxed);
    Some(g.swap_remove(i))
}

/// Request `h` completed in a wait or a test: if it is a generalized request, its status by
/// `query_fn` (then `free_fn` is called), or the first error of the two.
pub(crate) fn finish(h: c_int) -> Option<Result<MPI_Status, c_int>> {
    let g = take(h)?;
    let mut st = MPI_Status::new(0, false, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS);
    let extra = g.extra as *mut c_void;
    // SAFETY: the program's callbacks, called with its extra state as MPI says.
    let q = g.query.map_or(MPI_SUCCESS, |f| unsafe { f(extra, &mut st) });
    // SAFETY: as above.
    let f = g.free.map_or(MPI_SUCCESS, |f| unsafe { f(extra) });
    Some(match (q, f) {
        (MPI_SUCCESS, MPI_SUCCESS) => Ok(st),
        (MPI_SUCCESS, e) | (e, _) => Err(e),
    })
}

/// The status `MPI_Request_get_status` gives of generalized request `h`: `None` if `h` is
/// not one, `Some(None)` while it is not complete, else `query_fn`'s status (or error).
pub(crate) fn peek(h: c_int) -> Option<Option<Result<MPI_Status, c_int>>> {
    if !any() {
        return None;
    }
    let (query, extra, complete) = {
        let g = GREQS.lock();
        let q = g.iter().find(|q| q.handle == h && !q.freed)?;
        (q.query, q.extra, q.complete)
    };
    if !complete {
        return Some(None);
    }
    let mut st = MPI_Status::new(0, false, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_SUCCESS);
    // SAFETY: the program's callback, called with its extra state as MPI says.
    let q = query.map_or(MPI_SUCCESS, |f| unsafe { f(extra as *mut c_void, &mut st) });
    Some(Some(if q == MPI_SUCCESS { Ok(st) } else { Err(q) }))
}

/// `MPI_Cancel` of request `h`: if it is a generalized request, `cancel_fn`'s answer.
pub(crate) fn cancel(h: c_int) -> Option<c_int> {
    if !any() {
        return None;
    }
    let (cancel, extra, complete) = {
        let g = GREQS.lock();
        let q = g.iter().find(|q| q.handle == h && !q.freed)?;
        (q.cancel, q.extra, q.complete)
    };
    // SAFETY: the program's callback, called with its extra state as MPI says.
    Some(cancel.map_or(MPI_SUCCESS, |f| unsafe { f(extra as *mut c_void, complete as c_int) }))
}

/// `MPI_Request_free` of request `h` (already out of the table of requests): if it is a generalized
/// request, `free_fn` now if it completed (its answer), else at its completion.
pub(crate) fn free(h: c_int) -> Option<c_int> {
    if !any() {
        return None;
    }
    let mut g = GREQS.lock();
    let i = g.iter().position(|q| q.handle == h && !q.freed)?;
    if !g[i].complete {
        g[i].freed = true;
        return Some(MPI_SUCCESS);
    }
    let q = g.swap_remove(i);
    LIVE.fetch_sub(1, Ordering::Relaxed);
    drop(g);
    // SAFETY: the program's callback, called with its extra state as MPI says.
    Some(q.free.map_or(MPI_SUCCESS, |f| unsafe { f(q.extra as *mut c_void) }))
}

mpi_fn! {
    /// Starts a generalized request: the program completes it with `MPI_Grequest_complete`;
    /// `query_fn`, `free_fn` and `cancel_fn` (each may be null) are called with `extra_state`.
    fn MPI_Grequest_start(
        query_fn: Option<QueryFn>,
        free_fn: Option<FreeFn>,
        cancel_fn: Option<CancelFn>,
        extra_state: *mut c_void,
        request: *mut c_int,
    ) on MPI_COMM_WORLD => {
        if request.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let (tag, raw) = placeholder()?;
        let handle = crate::handles::new_request(raw, None);
        let g = Greq {
            handle,
            query: query_fn,
            free: free_fn,
            cancel: cancel_fn,
            extra: extra_state as usize,
            tag,
            complete: false,
            freed: false,
        };
        GREQS.lock().push(g);
        LIVE.fetch_add(1, Ordering::Relaxed);
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { request.write(handle) };
        Ok(())
    }
}

mpi_fn! {
    /// Tells that generalized request `request` is complete: a wait on it returns, a test
    /// says so.
    fn MPI_Grequest_complete(request: c_int) on MPI_COMM_WORLD => {
        let (tag, gone) = {
            let mut g = GREQS.lock();
            let i = g.iter().position(|q| q.handle == request && !q.complete).ok_or(MPI_ERR_REQUEST)?;
            g[i].complete = true;
            let tag = g[i].tag;
            if g[i].freed {
                // Freed before: nothing waits for it; `free_fn` now.
                LIVE.fetch_sub(1, Ordering::Relaxed);
                (tag, Some(g.swap_remove(i)))
            } else {
                (tag, None)
            }
        };
        release(tag)?;
        if let Some(q) = gone {
            // SAFETY: the program's callback, called with its extra state as MPI says.
            ok(q.free.map_or(MPI_SUCCESS, |f| unsafe { f(q.extra as *mut c_void) }))?;
        }
        Ok(())
    }
}
