//! More of `mpi::ffi`: non-blocking point-to-point and request sets, probes, `MPI_Sendrecv`,
//! `MPI_Ssend`, the gathering collectives and `MPI_Scan`, `MPI_Comm_create`, group and
//! datatype constructors, Cartesian topologies and `MPI_Dims_create`.

use super::*;
use crate::datatype::UserDatatype;
use crate::device::SendMode;
use crate::error::Error;
use crate::raw::AsRaw;
use crate::topology::sealed::AsHandle;
use std::collections::HashSet;

type Outcome = Result<crate::point_to_point::Status, Error>;

// ------------------------------------------------------------------------- requests

/// A request made here under a new handle (negative: see `request::request_into_new_raw`).
fn new_request(p: Pending) -> MPI_Request {
    crate::request::request_into_new_raw(p)
}

/// Requests that completed during an `MPI_Testall` that did not complete them all: their
/// outcome, kept for the next wait or test.
// Process-wide because a C handle is a plain integer any thread may hand to any function, for
// objects that are not tied to a universe (the C handle tables, see `crate::handles`).
static FINISHED: LazyLock<Mutex<crate::handles::NumberMap<Outcome>>> = LazyLock::new(Default::default);

/// Requests freed by `MPI_Request_free` before they completed: completed in the background
/// (tested at each later `MPI_Request_free`, waited for at no point).
// Process-wide because a C handle is a plain integer any thread may hand to any function, for
// objects that are not tied to a universe (the C handle tables, see `crate::handles`).
static DETACHED: LazyLock<Mutex<Vec<Pending>>> = LazyLock::new(Default::default);

/// Whether `h` names a live request (not the null request).
pub(super) fn request_live(h: MPI_Request) -> bool {
    lock(&FINISHED).contains_key(&h.0) || lock(&REQUESTS).contains_key(&h.0)
}

/// Whether `h` names a live request or is the null request.
fn request_known(h: MPI_Request) -> bool {
    h == k::RSMPI_REQUEST_NULL || request_live(h)
}

/// The status of a null request's completion.
fn empty_status() -> MPI_Status {
    MPI_Status { MPI_SOURCE: k::RSMPI_ANY_SOURCE, MPI_TAG: k::RSMPI_ANY_TAG, ..Default::default() }
}

/// The outcome as a status or an error class.
fn status_or_class(o: Outcome) -> Result<MPI_Status, c_int> {
    o.map(MPI_Status::from).map_err(|e| err_class(&e))
}

/// Waits for request `h` (already known to be live) and forgets it.
pub(super) fn wait_request(h: MPI_Request) -> Result<MPI_Status, c_int> {
    if h == k::RSMPI_REQUEST_NULL {
        return Ok(empty_status());
    }
    if let Some(o) = lock(&FINISHED).remove(&h.0) {
        return status_or_class(o);
    }
    let Some(p) = request_from_raw(h) else { return Err(ERR_REQUEST) };
    status_or_class(p.wait())
}

/// Tests request `h`: `Some` (and forgotten) if it completed, `None` (kept) if not.
pub(super) fn test_request(h: MPI_Request) -> Result<Option<MPI_Status>, c_int> {
    if h == k::RSMPI_REQUEST_NULL {
        return Ok(Some(empty_status()));
    }
    if let Some(o) = lock(&FINISHED).remove(&h.0) {
        return status_or_class(o).map(Some);
    }
    let Some(p) = request_from_raw(h) else { return Err(ERR_REQUEST) };
    match p.test() {
        Ok(o) => status_or_class(o).map(Some),
        Err(p) => {
            lock(&REQUESTS).insert(h.0, p);
            Ok(None)
        }
    }
}

/// The `count` handles at `requests`, all checked live.
///
/// # Safety
/// `requests` must be valid for `count` reads when `count > 0`.
unsafe fn request_array(count: c_int, requests: *const MPI_Request) -> Result<Vec<MPI_Request>, c_int> {
    if count < 0 {
        return Err(ERR_COUNT);
    }
    if count > 0 && requests.is_null() {
        return Err(ERR_ARG);
    }
    let hs: Vec<MPI_Request> = if count == 0 {
        Vec::new()
    } else {
        // SAFETY: non-null, and the caller vouches for `count` handles.
        unsafe { std::slice::from_raw_parts(requests, count as usize) }.to_vec()
    };
    if hs.iter().all(|&h| request_known(h)) {
        Ok(hs)
    } else {
        Err(ERR_REQUEST)
    }
}

/// Writes status `i` of an array unless it is `RSMPI_STATUSES_IGNORE`.
///
/// # Safety
/// `statuses` must be null or valid for a write at `i`.
unsafe fn put_status(statuses: *mut MPI_Status, i: usize, st: MPI_Status) {
    if !statuses.is_null() {
        // SAFETY: the caller's contract.
        unsafe { *statuses.add(i) = st };
    }
}

/// Starts sending: `*request` names the send until it is completed by `MPI_Wait`,
/// `MPI_Test`, ... (or freed by `MPI_Request_free`).
///
/// # Safety
/// `buf` must hold `count` elements of `datatype` (a live datatype) until the request
/// completes; `request` must be valid for a write.
#[allow(clippy::too_many_arguments)]
unsafe fn start_send(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
    mode: SendMode,
) -> c_int {
    if request.is_null() {
        return ERR_ARG;
    }
    let c = comm_or_return!(comm);
    if let Err(e) = check_buffer(buf, count, datatype) {
        return e;
    }
    let p = if dest == k::RSMPI_PROC_NULL {
        Pending::new(crate::device::DONE, None, None)
    } else {
        if let Err(e) = check_rank(&c, dest) {
            return e;
        }
        if tag < 0 {
            return MPI_ERR_TAG as c_int;
        }
        // SAFETY: the caller vouches for `count` elements of the live `datatype` at `buf`,
        // valid until the request completes (the device reads them until then).
        let data = unsafe { DynBuffer::from_raw(buf, count, DatatypeRef::from_map(datatype.map())) };
        match with_comm!(c, c => crate::point_to_point::try_isend(&c.process_at_rank(dest), &data, tag, mode)) {
            Ok(p) => p,
            Err(e) => return err_class(&e),
        }
    };
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { put(request, new_request(p)) }
}

/// Starts a standard-mode send of `count` elements of `datatype` from `buf` to rank `dest`
/// of `comm` with `tag`; `*request` names it. A send to `RSMPI_PROC_NULL` completes at once.
///
/// # Safety
/// `buf` must hold `count` elements of `datatype` (a live datatype) and stay valid until
/// the request completes; `request` must be valid for a write.
pub unsafe extern "C" fn MPI_Isend(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start_send(buf, count, datatype, dest, tag, comm, request, SendMode::Standard) }
}

/// Starts a synchronous-mode send (it completes once the receiver matched it).
///
/// # Safety
/// As for [`MPI_Isend`].
pub unsafe extern "C" fn MPI_Issend(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start_send(buf, count, datatype, dest, tag, comm, request, SendMode::Synchronous) }
}

/// Sends in synchronous mode: returns once the receiver matched the message.
///
/// # Safety
/// `buf` must hold `count` elements of `datatype` (a live datatype).
pub unsafe extern "C" fn MPI_Ssend(
    buf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> c_int {
    let mut r = k::RSMPI_REQUEST_NULL;
    // SAFETY: the caller's contract; the request is waited for before returning.
    let code = unsafe { start_send(buf, count, datatype, dest, tag, comm, &mut r, SendMode::Synchronous) };
    if code != SUCCESS {
        return code;
    }
    wait_request(r).map_or_else(|e| e, |_| SUCCESS)
}

/// Starts a receive of at most `count` elements of `datatype` into `buf` from rank
/// `source` (or `RSMPI_ANY_SOURCE`, `RSMPI_PROC_NULL`) with `tag` (or `RSMPI_ANY_TAG`);
/// `*request` names it.
///
/// # Safety
/// `buf` must be writable for `count` elements of `datatype` (a live datatype), used by
/// nothing else until the request completes; `request` must be valid for a write.
pub unsafe extern "C" fn MPI_Irecv(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    request: *mut MPI_Request,
) -> c_int {
    if request.is_null() {
        return ERR_ARG;
    }
    let c = comm_or_return!(comm);
    // SAFETY: the caller's contract.
    match unsafe { start_recv(&c, buf, count, datatype, source, tag) } {
        // SAFETY: checked non-null; the caller vouches it is writable.
        Ok(p) => unsafe { put(request, new_request(p)) },
        Err(e) => e,
    }
}

/// Starts a receive on `c` (see [`MPI_Irecv`]).
///
/// # Safety
/// As for [`MPI_Irecv`].
unsafe fn start_recv(
    c: &CommObj,
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
) -> Result<Pending, c_int> {
    check_buffer(buf, count, datatype)?;
    if tag < 0 && tag != k::RSMPI_ANY_TAG {
        return Err(MPI_ERR_TAG as c_int);
    }
    if source == k::RSMPI_PROC_NULL {
        return Ok(Pending::new(crate::device::DONE, None, None));
    }
    if source != k::RSMPI_ANY_SOURCE {
        check_rank(c, source)?;
    }
    // SAFETY: the caller vouches that `buf` is writable for `count` elements of the live
    // `datatype` until the request completes.
    let mut data = unsafe { DynBufferMut::from_raw(buf, count, DatatypeRef::from_map(datatype.map())) };
    let r = with_comm!(c, c => if source == k::RSMPI_ANY_SOURCE {
        crate::point_to_point::try_irecv(&c.any_process(), &mut data, tag)
    } else {
        crate::point_to_point::try_irecv(&c.process_at_rank(source), &mut data, tag)
    });
    r.map_err(|e| err_class(&e))
}

/// Waits for every request of the array (null ones count as complete), fills the statuses
/// (unless `RSMPI_STATUSES_IGNORE`) and sets the handles to `RSMPI_REQUEST_NULL`. Returns the
/// first failure's error class (every request is still waited for).
///
/// # Safety
/// `array_of_requests` must be valid for `count` reads and writes, `array_of_statuses` null
/// or valid for `count` writes; the requests' buffers must still be valid.
pub unsafe extern "C" fn MPI_Waitall(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    array_of_statuses: *mut MPI_Status,
) -> c_int {
    // SAFETY: the caller's contract.
    let hs = match unsafe { request_array(count, array_of_requests) } {
        Ok(hs) => hs,
        Err(e) => return e,
    };
    let mut code = SUCCESS;
    for (i, h) in hs.into_iter().enumerate() {
        let st = match wait_request(h) {
            Ok(st) => st,
            Err(e) => {
                if code == SUCCESS {
                    code = e;
                }
                MPI_Status { MPI_ERROR: e, ..empty_status() }
            }
        };
        // SAFETY: `i < count`; the caller vouches for both arrays.
        unsafe {
            *array_of_requests.add(i) = k::RSMPI_REQUEST_NULL;
            put_status(array_of_statuses, i, st);
        }
    }
    code
}

/// Tests every request of the array: if all completed, `*flag` is 1 and statuses and handles
/// are set as by [`MPI_Waitall`]; else `*flag` is 0 and every handle stays as it was (the
/// completed ones keep their outcome for a later wait or test).
///
/// # Safety
/// As for [`MPI_Waitall`]; `flag` must be valid for a write.
pub unsafe extern "C" fn MPI_Testall(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    flag: *mut c_int,
    array_of_statuses: *mut MPI_Status,
) -> c_int {
    if flag.is_null() {
        return ERR_ARG;
    }
    // SAFETY: the caller's contract.
    let hs = match unsafe { request_array(count, array_of_requests) } {
        Ok(hs) => hs,
        Err(e) => return e,
    };
    let mut all = true;
    for &h in &hs {
        if h == k::RSMPI_REQUEST_NULL || lock(&FINISHED).contains_key(&h.0) {
            continue;
        }
        let Some(p) = request_from_raw(h) else { return ERR_REQUEST };
        match p.test() {
            Ok(o) => {
                lock(&FINISHED).insert(h.0, o);
            }
            Err(p) => {
                lock(&REQUESTS).insert(h.0, p);
                all = false;
            }
        }
    }
    if !all {
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { *flag = 0 };
        return SUCCESS;
    }
    // SAFETY: as above.
    unsafe { *flag = 1 };
    // SAFETY: every request completed: the waits return at once.
    unsafe { MPI_Waitall(count, array_of_requests, array_of_statuses) }
}

/// Waits for any request of the array to complete: `*index` is its index (and its handle
/// becomes `RSMPI_REQUEST_NULL`), `*status` its status. With no active request (all null),
/// `*index` is `RSMPI_UNDEFINED` at once.
///
/// # Safety
/// `array_of_requests` must be valid for `count` reads and writes, `index` for a write,
/// `status` null or valid for a write; the requests' buffers must still be valid.
pub unsafe extern "C" fn MPI_Waitany(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    index: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    if index.is_null() {
        return ERR_ARG;
    }
    // SAFETY: the caller's contract.
    let hs = match unsafe { request_array(count, array_of_requests) } {
        Ok(hs) => hs,
        Err(e) => return e,
    };
    let active: Vec<usize> = (0..hs.len()).filter(|&i| hs[i] != k::RSMPI_REQUEST_NULL).collect();
    let chosen = if active.is_empty() {
        None
    } else if let Some(&i) = active.iter().find(|&&i| lock(&FINISHED).contains_key(&hs[i].0)) {
        Some(i)
    } else {
        // Take the pending requests out to wait for any of them, then put the others back.
        let mut taken: Vec<(usize, Pending)> = Vec::new();
        for &i in &active {
            if let Some(p) = request_from_raw(hs[i]) {
                taken.push((i, p));
            }
        }
        let which = crate::request::wait_any_pending(&taken.iter().map(|(_, p)| p).collect::<Vec<_>>());
        let mut requests = lock(&REQUESTS);
        let mut chosen = None;
        for (j, (i, p)) in taken.into_iter().enumerate() {
            if j == which {
                chosen = Some(i);
            }
            requests.insert(hs[i].0, p);
        }
        chosen
    };
    let Some(i) = chosen else {
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { *index = k::RSMPI_UNDEFINED };
        if !status.is_null() {
            // SAFETY: non-null, and the caller vouches it is writable.
            unsafe { *status = empty_status() };
        }
        return SUCCESS;
    };
    let r = wait_request(hs[i]);
    // SAFETY: `i < count`; the caller vouches for the array, `index` and `status`.
    unsafe {
        *array_of_requests.add(i) = k::RSMPI_REQUEST_NULL;
        *index = i as c_int;
        if let (Ok(st), false) = (&r, status.is_null()) {
            *status = *st;
        }
    }
    r.map_or_else(|e| e, |_| SUCCESS)
}

/// Tests the requests of the array in order: the first one that completed gives `*index`,
/// `*status`, `*flag` 1 (its handle becomes `RSMPI_REQUEST_NULL`); if none did, `*flag` is 0
/// and `*index` `RSMPI_UNDEFINED`. With no active request, `*flag` is 1 and `*index`
/// `RSMPI_UNDEFINED`.
///
/// # Safety
/// As for [`MPI_Waitany`]; `flag` must be valid for a write.
pub unsafe extern "C" fn MPI_Testany(
    count: c_int,
    array_of_requests: *mut MPI_Request,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    if index.is_null() || flag.is_null() {
        return ERR_ARG;
    }
    // SAFETY: the caller's contract.
    let hs = match unsafe { request_array(count, array_of_requests) } {
        Ok(hs) => hs,
        Err(e) => return e,
    };
    let mut any_active = false;
    for (i, &h) in hs.iter().enumerate() {
        if h == k::RSMPI_REQUEST_NULL {
            continue;
        }
        any_active = true;
        let r = match test_request(h) {
            Ok(None) => continue,
            Ok(Some(st)) => Ok(st),
            Err(e) => Err(e),
        };
        // SAFETY: `i < count`; the caller vouches for the array, `index`, `flag`, `status`.
        unsafe {
            *array_of_requests.add(i) = k::RSMPI_REQUEST_NULL;
            *index = i as c_int;
            *flag = 1;
            if let (Ok(st), false) = (&r, status.is_null()) {
                *status = *st;
            }
        }
        return r.map_or_else(|e| e, |_| SUCCESS);
    }
    // SAFETY: checked non-null; the caller vouches they are writable.
    unsafe {
        *index = k::RSMPI_UNDEFINED;
        *flag = (!any_active) as c_int;
        if !any_active && !status.is_null() {
            *status = empty_status();
        }
    }
    SUCCESS
}

/// Frees a request: a completed one is forgotten, one still active completes in the
/// background (its buffer must stay valid until it did). `*request` becomes
/// `RSMPI_REQUEST_NULL`.
///
/// # Safety
/// `request` must be valid for a read and a write.
pub unsafe extern "C" fn MPI_Request_free(request: *mut MPI_Request) -> c_int {
    if request.is_null() {
        return ERR_ARG;
    }
    // SAFETY: checked non-null; the caller vouches it is readable and writable.
    let h = unsafe { *request };
    if h == k::RSMPI_REQUEST_NULL {
        return ERR_REQUEST;
    }
    let finished = lock(&FINISHED).remove(&h.0).is_some();
    if !finished {
        let Some(p) = request_from_raw(h) else { return ERR_REQUEST };
        if let Err(p) = p.test() {
            lock(&DETACHED).push(p);
        }
    }
    // Those freed earlier that completed since are dropped.
    let earlier: Vec<Pending> = std::mem::take(&mut *lock(&DETACHED));
    let still: Vec<Pending> = earlier.into_iter().filter_map(|p| p.test().err()).collect();
    lock(&DETACHED).extend(still);
    // SAFETY: as above.
    unsafe { *request = k::RSMPI_REQUEST_NULL };
    SUCCESS
}

/// Asks for the cancellation of the request `*request` names: a receive not matched yet
/// completes as cancelled (`MPI_Test_cancelled` says so); any other operation (a send, a
/// receive already matched) completes normally. The request must still be completed.
///
/// # Safety
/// `request` must be valid for a read.
pub unsafe extern "C" fn MPI_Cancel(request: *const MPI_Request) -> c_int {
    if request.is_null() {
        return ERR_ARG;
    }
    // SAFETY: checked non-null; the caller vouches it is readable.
    let h = unsafe { *request };
    if lock(&FINISHED).contains_key(&h.0) {
        return SUCCESS;
    }
    match lock(&REQUESTS).get(&h.0) {
        Some(p) => {
            p.cancel();
            SUCCESS
        }
        None => ERR_REQUEST,
    }
}

/// Whether the request `request` names completed, without completing it: if so, `*flag` is 1
/// and `*status` filled (the request stays live for a wait, a test or `MPI_Request_free`).
///
/// # Safety
/// `flag` must be valid for a write, `status` null or valid for a write.
pub unsafe extern "C" fn MPI_Request_get_status(
    request: MPI_Request,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    if flag.is_null() {
        return ERR_ARG;
    }
    // (The lock of `FINISHED` is let go before the request is tested, which may add to it.)
    let finished = lock(&FINISHED).get(&request.0).cloned();
    let outcome = if request == k::RSMPI_REQUEST_NULL {
        Some(Ok(empty_status()))
    } else if let Some(o) = finished {
        Some(status_or_class(o))
    } else {
        let Some(p) = request_from_raw(request) else { return ERR_REQUEST };
        match p.test() {
            Ok(o) => {
                lock(&FINISHED).insert(request.0, o.clone());
                Some(status_or_class(o))
            }
            Err(p) => {
                lock(&REQUESTS).insert(request.0, p);
                None
            }
        }
    };
    let done = outcome.is_some();
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { *flag = done as c_int };
    match outcome {
        Some(Ok(st)) => {
            if !status.is_null() {
                // SAFETY: non-null, and the caller vouches it is writable.
                unsafe { *status = st };
            }
            SUCCESS
        }
        Some(Err(e)) => e,
        None => SUCCESS,
    }
}

// --------------------------------------------------------------------------- probes

/// A probe's status for `source == RSMPI_PROC_NULL`.
fn proc_null_status() -> MPI_Status {
    MPI_Status { MPI_SOURCE: k::RSMPI_PROC_NULL, MPI_TAG: k::RSMPI_ANY_TAG, ..Default::default() }
}

/// Checks a probe's source and tag.
fn check_probe(c: &CommObj, source: c_int, tag: c_int) -> Result<(), c_int> {
    if tag < 0 && tag != k::RSMPI_ANY_TAG {
        return Err(MPI_ERR_TAG as c_int);
    }
    if source != k::RSMPI_ANY_SOURCE && source != k::RSMPI_PROC_NULL {
        check_rank(c, source)?;
    }
    Ok(())
}

/// Waits for a message from `source` (or `RSMPI_ANY_SOURCE`) with `tag` (or `RSMPI_ANY_TAG`)
/// without receiving it; `*status` describes it (`MPI_Get_count` gives its size).
///
/// # Safety
/// `status` must be null or valid for a write.
pub unsafe extern "C" fn MPI_Probe(source: c_int, tag: c_int, comm: MPI_Comm, status: *mut MPI_Status) -> c_int {
    let c = comm_or_return!(comm);
    if let Err(e) = check_probe(&c, source, tag) {
        return e;
    }
    let st = if source == k::RSMPI_PROC_NULL {
        proc_null_status()
    } else {
        let r = with_comm!(c, c => if source == k::RSMPI_ANY_SOURCE {
            c.any_process().try_probe_with_tag(tag)
        } else {
            c.process_at_rank(source).try_probe_with_tag(tag)
        });
        match r {
            Ok(s) => MPI_Status::from(s),
            Err(e) => return err_class(&e),
        }
    };
    if !status.is_null() {
        // SAFETY: non-null, and the caller vouches it is writable.
        unsafe { *status = st };
    }
    SUCCESS
}

/// Whether a message from `source` with `tag` is waiting: `*flag` 1 and `*status` filled if
/// so, else `*flag` 0.
///
/// # Safety
/// `flag` must be valid for a write, `status` null or valid for a write.
pub unsafe extern "C" fn MPI_Iprobe(
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
    flag: *mut c_int,
    status: *mut MPI_Status,
) -> c_int {
    if flag.is_null() {
        return ERR_ARG;
    }
    let c = comm_or_return!(comm);
    if let Err(e) = check_probe(&c, source, tag) {
        return e;
    }
    let found = if source == k::RSMPI_PROC_NULL {
        Some(proc_null_status())
    } else {
        let r = with_comm!(c, c => if source == k::RSMPI_ANY_SOURCE {
            crate::point_to_point::try_iprobe(&c.any_process(), tag)
        } else {
            crate::point_to_point::try_iprobe(&c.process_at_rank(source), tag)
        });
        match r {
            Ok(s) => s.map(MPI_Status::from),
            Err(e) => return err_class(&e),
        }
    };
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { *flag = found.is_some() as c_int };
    if let (Some(st), false) = (found, status.is_null()) {
        // SAFETY: non-null, and the caller vouches it is writable.
        unsafe { *status = st };
    }
    SUCCESS
}

/// Sends `sendbuf` to `dest` and receives into `recvbuf` from `source` at the same time (the
/// receive is posted first, so pairs of processes exchanging do not block each other).
///
/// # Safety
/// `sendbuf` must hold `sendcount` elements of `sendtype`, `recvbuf` be writable for
/// `recvcount` elements of `recvtype` (live datatypes), apart from each other; `status` null
/// or valid for a write.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn MPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    source: c_int,
    recvtag: c_int,
    comm: MPI_Comm,
    status: *mut MPI_Status,
) -> c_int {
    let c = comm_or_return!(comm);
    if let Err(e) = check_buffer(sendbuf, sendcount, sendtype) {
        return e;
    }
    if dest != k::RSMPI_PROC_NULL {
        if let Err(e) = check_rank(&c, dest) {
            return e;
        }
        if sendtag < 0 {
            return MPI_ERR_TAG as c_int;
        }
    }
    // SAFETY: the caller's contract; the receive is completed or withdrawn below, before
    // returning.
    let recv = match unsafe { start_recv(&c, recvbuf, recvcount, recvtype, source, recvtag) } {
        Ok(p) => p,
        Err(e) => return e,
    };
    if dest != k::RSMPI_PROC_NULL {
        // SAFETY: the caller vouches for `sendcount` elements of the live `sendtype`.
        let data = unsafe { DynBuffer::from_raw(sendbuf, sendcount, DatatypeRef::from_map(sendtype.map())) };
        if let Err(e) = with_comm!(&c, c => c.process_at_rank(dest).try_send_with_tag(&data, sendtag)) {
            // The receive must not outlive this call: withdrawn.
            recv.abandon();
            return err_class(&e);
        }
    }
    let st = if source == k::RSMPI_PROC_NULL {
        // Complete the no-op request.
        let _ = recv.wait();
        proc_null_status()
    } else {
        match recv.wait() {
            Ok(s) => MPI_Status::from(s),
            Err(e) => return err_class(&e),
        }
    };
    if !status.is_null() {
        // SAFETY: non-null, and the caller vouches it is writable.
        unsafe { *status = st };
    }
    SUCCESS
}

// ---------------------------------------------------------------------- collectives

/// `MPI_IN_PLACE`'s address (p2pmpi's own name `RSMPI_IN_PLACE`: rsmpi 0.8.1 has none).
pub(super) const IN_PLACE: *mut c_void = std::ptr::dangling_mut::<c_void>();

fn is_in_place(p: *const c_void) -> bool {
    std::ptr::eq(p, IN_PLACE)
}

/// A copy of `count` elements of `datatype` at `buf` (bytes from the lower bound to the end
/// of the last element, at the same offsets), for `MPI_IN_PLACE`: the data a process sends is
/// read from its receive buffer, which the collective then overwrites.
pub(super) struct Staged {
    words: Vec<u64>,
}

impl Staged {
    /// # Safety
    /// `buf` must hold `count` elements of `datatype` (a live datatype).
    unsafe fn of(buf: *const c_void, count: c_int, datatype: MPI_Datatype) -> Result<Staged, c_int> {
        // SAFETY: the caller vouches for the handle.
        let m = unsafe { datatype.map() };
        if count == 0 {
            return Ok(Staged { words: Vec::new() });
        }
        if m.lb() < 0 || m.extent() <= 0 {
            return Err(ERR_TYPE);
        }
        let (lb, end) = (m.lb() as usize, (count as usize - 1) * m.extent() as usize + m.ub() as usize);
        let mut words = vec![0u64; end.div_ceil(8)];
        // SAFETY: the caller vouches for the elements at `buf`, which cover bytes `lb..end`;
        // `words` holds at least `end` bytes and is a fresh allocation.
        unsafe {
            std::ptr::copy_nonoverlapping((buf as *const u8).add(lb), (words.as_mut_ptr() as *mut u8).add(lb), end - lb)
        };
        Ok(Staged { words })
    }
    fn ptr(&self) -> *const c_void {
        self.words.as_ptr() as *const c_void
    }
}

/// The address of element `i` of `datatype` at `buf`.
///
/// # Safety
/// `datatype` must be live.
unsafe fn element(buf: *mut c_void, i: c_int, datatype: MPI_Datatype) -> *mut c_void {
    // SAFETY: the caller vouches for the handle.
    let ext = unsafe { datatype.map() }.extent();
    (buf as *mut u8).wrapping_offset(i as isize * ext) as *mut c_void
}

/// The intracommunicator of a handle, or `MPI_ERR_COMM`.
macro_rules! intra_or_return {
    ($c:expr) => {{
        let c = comm_or_return!($c);
        if matches!(c, CommObj::Inter(_)) {
            return ERR_COMM;
        }
        c
    }};
}

/// Gathers `sendcount` elements of `sendtype` from every process of `comm` into the root's
/// `recvbuf`, `recvcount` elements of `recvtype` per process in rank order. At the root,
/// `sendbuf` may be `RSMPI_IN_PLACE` (its own part is already in place).
///
/// # Safety
/// `sendbuf` must hold `sendcount` elements of `sendtype`; at the root `recvbuf` must be
/// writable for `size × recvcount` elements of `recvtype`, apart from `sendbuf`.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn MPI_Gather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    let c = intra_or_return!(comm);
    if check_rank(&c, root).is_err() {
        return ERR_ROOT;
    }
    let (me, n) = with_comm!(&c, c => (c.rank(), c.size()));
    let staged;
    let (sendbuf, sendcount, sendtype) = if me == root && is_in_place(sendbuf) {
        if let Err(e) = check_buffer(recvbuf, recvcount, recvtype) {
            return e;
        }
        // SAFETY: the root's own part of `recvbuf` (the caller's contract).
        staged = match unsafe { Staged::of(element(recvbuf, me * recvcount, recvtype), recvcount, recvtype) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        (staged.ptr(), recvcount, recvtype)
    } else {
        (sendbuf, sendcount, sendtype)
    };
    if let Err(e) = check_buffer(sendbuf, sendcount, sendtype) {
        return e;
    }
    // SAFETY: the caller vouches for `sendcount` elements of the live `sendtype`.
    let s = unsafe { DynBuffer::from_raw(sendbuf, sendcount, DatatypeRef::from_map(sendtype.map())) };
    let r = if me == root {
        if let Err(e) = check_buffer(recvbuf, recvcount.saturating_mul(n), recvtype) {
            return e;
        }
        // SAFETY: the root's `recvbuf` holds `n × recvcount` writable elements.
        let mut r = unsafe { DynBufferMut::from_raw(recvbuf, recvcount * n, DatatypeRef::from_map(recvtype.map())) };
        with_comm!(c, c => c.process_at_rank(root).try_gather_into_root(&s, &mut r))
    } else {
        with_comm!(c, c => c.process_at_rank(root).try_gather_into(&s))
    };
    r.map_or_else(|e| err_class(&e), |()| SUCCESS)
}

/// Scatters the root's `sendbuf`, `sendcount` elements of `sendtype` per process in rank
/// order, into every process's `recvbuf`. At the root, `recvbuf` may be `RSMPI_IN_PLACE` (it
/// keeps its part in `sendbuf`).
///
/// # Safety
/// At the root `sendbuf` must hold `size × sendcount` elements of `sendtype`; `recvbuf` must
/// be writable for `recvcount` elements of `recvtype`, apart from `sendbuf`.
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn MPI_Scatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    root: c_int,
    comm: MPI_Comm,
) -> c_int {
    let c = intra_or_return!(comm);
    if check_rank(&c, root).is_err() {
        return ERR_ROOT;
    }
    let (me, n) = with_comm!(&c, c => (c.rank(), c.size()));
    let r = if me == root {
        if let Err(e) = check_buffer(sendbuf, sendcount.saturating_mul(n), sendtype) {
            return e;
        }
        // SAFETY: the root's `sendbuf` holds `n × sendcount` elements (the caller's contract).
        let s = unsafe { DynBuffer::from_raw(sendbuf, sendcount * n, DatatypeRef::from_map(sendtype.map())) };
        if is_in_place(recvbuf) {
            // The root's own part goes to a scratch copy of it, dropped.
            // SAFETY: the root's part of `sendbuf`.
            let scratch = match unsafe {
                Staged::of(element(sendbuf as *mut c_void, me * sendcount, sendtype), sendcount, sendtype)
            } {
                Ok(st) => st,
                Err(e) => return e,
            };
            // SAFETY: `scratch` holds `sendcount` elements of `sendtype`, written only here.
            let mut r = unsafe {
                DynBufferMut::from_raw(scratch.ptr() as *mut c_void, sendcount, DatatypeRef::from_map(sendtype.map()))
            };
            with_comm!(c, c => c.process_at_rank(root).try_scatter_into_root(&s, &mut r))
        } else {
            if let Err(e) = check_buffer(recvbuf, recvcount, recvtype) {
                return e;
            }
            // SAFETY: the caller vouches for `recvcount` writable elements of `recvtype`.
            let mut r = unsafe { DynBufferMut::from_raw(recvbuf, recvcount, DatatypeRef::from_map(recvtype.map())) };
            with_comm!(c, c => c.process_at_rank(root).try_scatter_into_root(&s, &mut r))
        }
    } else {
        if let Err(e) = check_buffer(recvbuf, recvcount, recvtype) {
            return e;
        }
        // SAFETY: as above.
        let mut r = unsafe { DynBufferMut::from_raw(recvbuf, recvcount, DatatypeRef::from_map(recvtype.map())) };
        with_comm!(c, c => c.process_at_rank(root).try_scatter_into(&mut r))
    };
    r.map_or_else(|e| err_class(&e), |()| SUCCESS)
}

/// Gathers `sendcount` elements of `sendtype` from every process into every process's
/// `recvbuf` (`recvcount` elements of `recvtype` per process, in rank order). `sendbuf` may
/// be `RSMPI_IN_PLACE` (each process's part is already in place).
///
/// # Safety
/// `sendbuf` must hold `sendcount` elements of `sendtype`, `recvbuf` be writable for
/// `size × recvcount` elements of `recvtype`, apart from `sendbuf`.
pub unsafe extern "C" fn MPI_Allgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    // Over an intercommunicator, each group gets the other's parts (not in place).
    let c = comm_or_return!(comm);
    let (me, n) = with_comm!(&c, c => (c.rank(), c.target_size()));
    if let Err(e) = check_buffer(recvbuf, recvcount.saturating_mul(n), recvtype) {
        return e;
    }
    if is_in_place(sendbuf) && matches!(c, CommObj::Inter(_)) {
        return ERR_ARG;
    }
    let staged;
    let (sendbuf, sendcount, sendtype) = if is_in_place(sendbuf) {
        // SAFETY: this process's part of `recvbuf` (the caller's contract).
        staged = match unsafe { Staged::of(element(recvbuf, me * recvcount, recvtype), recvcount, recvtype) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        (staged.ptr(), recvcount, recvtype)
    } else {
        (sendbuf, sendcount, sendtype)
    };
    if let Err(e) = check_buffer(sendbuf, sendcount, sendtype) {
        return e;
    }
    // SAFETY: both buffers as the caller vouches (the staged copy for `RSMPI_IN_PLACE`).
    let (s, mut r) = unsafe {
        (
            DynBuffer::from_raw(sendbuf, sendcount, DatatypeRef::from_map(sendtype.map())),
            DynBufferMut::from_raw(recvbuf, recvcount * n, DatatypeRef::from_map(recvtype.map())),
        )
    };
    with_comm!(c, c => c.try_all_gather_into(&s, &mut r)).map_or_else(|e| err_class(&e), |()| SUCCESS)
}

/// Sends `sendcount` elements of `sendtype` to each process (the `i`-th block to rank `i`)
/// and receives `recvcount` elements of `recvtype` from each into `recvbuf`, in rank order.
///
/// # Safety
/// `sendbuf` must hold `size × sendcount` elements of `sendtype`, `recvbuf` be writable for
/// `size × recvcount` elements of `recvtype`, apart from `sendbuf`.
pub unsafe extern "C" fn MPI_Alltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: MPI_Datatype,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: MPI_Datatype,
    comm: MPI_Comm,
) -> c_int {
    // Over an intercommunicator, block `i` goes to (comes from) rank `i` of the other group.
    let c = comm_or_return!(comm);
    let n = with_comm!(&c, c => c.target_size());
    if let Err(e) = check_buffer(sendbuf, sendcount.saturating_mul(n), sendtype).and(check_buffer(
        recvbuf,
        recvcount.saturating_mul(n),
        recvtype,
    )) {
        return e;
    }
    // SAFETY: both buffers as the caller vouches.
    let (s, mut r) = unsafe {
        (
            DynBuffer::from_raw(sendbuf, sendcount * n, DatatypeRef::from_map(sendtype.map())),
            DynBufferMut::from_raw(recvbuf, recvcount * n, DatatypeRef::from_map(recvtype.map())),
        )
    };
    with_comm!(c, c => c.try_all_to_all_into(&s, &mut r)).map_or_else(|e| err_class(&e), |()| SUCCESS)
}

/// The inclusive prefix reduction: rank `i`'s `recvbuf` gets ranks `0..=i`'s `sendbuf`
/// reduced with `op`. `sendbuf` may be `RSMPI_IN_PLACE` (the input is taken from `recvbuf`).
///
/// # Safety
/// `sendbuf` must hold `count` elements of `datatype`, `recvbuf` be writable for as many,
/// apart from `sendbuf`.
pub unsafe extern "C" fn MPI_Scan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    let c = intra_or_return!(comm);
    // SAFETY: the caller's contract.
    unsafe {
        whole_reduction(sendbuf, recvbuf, count, datatype, op, |s, r, op| with_comm!(c, c => c.try_scan_into(s, r, op)))
    }
}

/// The exclusive prefix reduction: rank `i > 0`'s `recvbuf` gets ranks `0..i`'s `sendbuf`
/// reduced with `op`; rank 0's is left alone. `sendbuf` may be `RSMPI_IN_PLACE`.
///
/// # Safety
/// As for [`MPI_Scan`].
pub unsafe extern "C" fn MPI_Exscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    comm: MPI_Comm,
) -> c_int {
    let c = intra_or_return!(comm);
    // SAFETY: the caller's contract.
    unsafe {
        whole_reduction(
            sendbuf,
            recvbuf,
            count,
            datatype,
            op,
            |s, r, op| with_comm!(c, c => c.try_exclusive_scan_into(s, r, op)),
        )
    }
}

/// For `MPI_Reduce` and `MPI_Allreduce`: the send buffer, staged from `recvbuf` when it is
/// `RSMPI_IN_PLACE`.
///
/// # Safety
/// For `RSMPI_IN_PLACE`, `recvbuf` must hold `count` elements of `datatype` (a live one).
pub(super) unsafe fn in_place_input(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
) -> Result<(*const c_void, Option<Staged>), c_int> {
    if !is_in_place(sendbuf) {
        return Ok((sendbuf, None));
    }
    check_buffer(recvbuf, count, datatype)?;
    // SAFETY: the caller's contract.
    let s = unsafe { Staged::of(recvbuf, count, datatype) }?;
    Ok((s.ptr(), Some(s)))
}

/// The common part of the reductions over whole buffers (`MPI_Allreduce`, `MPI_Scan`,
/// `MPI_Exscan`): a `RSMPI_IN_PLACE` input staged from `recvbuf`, both buffers and the
/// operation checked, then `run` on them; its error becomes its MPI error class.
///
/// # Safety
/// `sendbuf` (unless `RSMPI_IN_PLACE`) must hold `count` elements of `datatype`, a live
/// datatype, and `recvbuf` be writable for as many, apart from `sendbuf`.
pub(super) unsafe fn whole_reduction(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    run: impl FnOnce(&DynBuffer<'_>, &mut DynBufferMut<'_>, AnyOp) -> Result<(), crate::CommError>,
) -> c_int {
    // SAFETY: the caller's contract.
    let (sendbuf, _staged) = match unsafe { in_place_input(sendbuf, recvbuf, count, datatype) } {
        Ok(x) => x,
        Err(e) => return e,
    };
    if let Err(e) = check_buffer(sendbuf, count, datatype).and(check_buffer(recvbuf, count, datatype)) {
        return e;
    }
    let Some(op) = op_of(op) else { return ERR_OP };
    // SAFETY: both buffers as the caller vouches (the staged copy for `RSMPI_IN_PLACE`).
    let (s, mut r) = unsafe {
        let d = DatatypeRef::from_map(datatype.map());
        (DynBuffer::from_raw(sendbuf, count, d), DynBufferMut::from_raw(recvbuf, count, d))
    };
    run(&s, &mut r, op).map_or_else(|e| err_class(&e), |()| SUCCESS)
}

// ------------------------------------------------------------- communicators, groups

/// The communicator of `group`'s members (a subset of `comm`'s), collective over `comm`;
/// `*newcomm` is `RSMPI_COMM_NULL` on processes outside the group.
///
/// # Safety
/// `newcomm` must be valid for a write.
pub unsafe extern "C" fn MPI_Comm_create(comm: MPI_Comm, group: MPI_Group, newcomm: *mut MPI_Comm) -> c_int {
    if newcomm.is_null() {
        return ERR_ARG;
    }
    let c = intra_or_return!(comm);
    let Some(m) = group_members(group) else { return ERR_GROUP };
    let all = with_comm!(&c, c => c.group()).members_arc();
    if !m.iter().all(|w| all.contains(w)) {
        return ERR_GROUP;
    }
    let g = UserGroup::from_members(m);
    let made = with_comm!(c, c => c.split_by_subgroup_collective(&g));
    let h = made.map_or(k::RSMPI_COMM_NULL, |d| comm_owned(d.0, CommKind::Intra));
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { put(newcomm, h) }
}

/// A new group handle for `members` (`RSMPI_GROUP_EMPTY` when there are none).
fn new_group(members: Arc<[Rank]>) -> MPI_Group {
    if members.is_empty() {
        k::RSMPI_GROUP_EMPTY
    } else {
        group_owned(members)
    }
}

/// The `n` ranks at `ranks`, each a rank of a group of `size`, distinct.
///
/// # Safety
/// `ranks` must be valid for `n` reads when `n > 0`.
unsafe fn distinct_ranks(n: c_int, ranks: *const c_int, size: usize) -> Result<Vec<Rank>, c_int> {
    if n < 0 {
        return Err(ERR_COUNT);
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    if ranks.is_null() {
        return Err(ERR_ARG);
    }
    // SAFETY: non-null, and the caller vouches for `n` ranks.
    let rs = unsafe { std::slice::from_raw_parts(ranks, n as usize) }.to_vec();
    let mut seen = HashSet::new();
    if rs.iter().all(|&r| (0..size as Rank).contains(&r) && seen.insert(r)) {
        Ok(rs)
    } else {
        Err(ERR_RANK)
    }
}

/// The group of the members of `group` at the `n` ranks `ranks`, in that order.
///
/// # Safety
/// `ranks` must be valid for `n` reads, `newgroup` for a write.
pub unsafe extern "C" fn MPI_Group_incl(
    group: MPI_Group,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut MPI_Group,
) -> c_int {
    let Some(m) = group_members(group) else { return ERR_GROUP };
    // SAFETY: the caller's contract.
    let rs = match unsafe { distinct_ranks(n, ranks, m.len()) } {
        Ok(rs) => rs,
        Err(e) => return e,
    };
    let g = UserGroup::from_members(m).include(&rs);
    // SAFETY: the caller's contract.
    unsafe { put(newgroup, new_group(g.members_arc())) }
}

/// The group of the members of `group` except those at the `n` ranks `ranks`.
///
/// # Safety
/// As for [`MPI_Group_incl`].
pub unsafe extern "C" fn MPI_Group_excl(
    group: MPI_Group,
    n: c_int,
    ranks: *const c_int,
    newgroup: *mut MPI_Group,
) -> c_int {
    let Some(m) = group_members(group) else { return ERR_GROUP };
    // SAFETY: the caller's contract.
    let rs = match unsafe { distinct_ranks(n, ranks, m.len()) } {
        Ok(rs) => rs,
        Err(e) => return e,
    };
    let g = UserGroup::from_members(m).exclude(&rs);
    // SAFETY: the caller's contract.
    unsafe { put(newgroup, new_group(g.members_arc())) }
}

/// A group made of two others by `f`.
///
/// # Safety
/// `newgroup` must be valid for a write.
unsafe fn group_op(
    group1: MPI_Group,
    group2: MPI_Group,
    newgroup: *mut MPI_Group,
    f: fn(&UserGroup, &UserGroup) -> UserGroup,
) -> c_int {
    let (Some(a), Some(b)) = (group_members(group1), group_members(group2)) else { return ERR_GROUP };
    let g = f(&UserGroup::from_members(a), &UserGroup::from_members(b));
    // SAFETY: the caller's contract.
    unsafe { put(newgroup, new_group(g.members_arc())) }
}

/// The members of `group1`, then those of `group2` not in `group1`.
///
/// # Safety
/// `newgroup` must be valid for a write.
pub unsafe extern "C" fn MPI_Group_union(group1: MPI_Group, group2: MPI_Group, newgroup: *mut MPI_Group) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { group_op(group1, group2, newgroup, |a, b| a.union(b)) }
}

/// The members of `group1` that are also in `group2`, in `group1`'s order.
///
/// # Safety
/// `newgroup` must be valid for a write.
pub unsafe extern "C" fn MPI_Group_intersection(
    group1: MPI_Group,
    group2: MPI_Group,
    newgroup: *mut MPI_Group,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { group_op(group1, group2, newgroup, |a, b| a.intersection(b)) }
}

/// The members of `group1` that are not in `group2`.
///
/// # Safety
/// `newgroup` must be valid for a write.
pub unsafe extern "C" fn MPI_Group_difference(group1: MPI_Group, group2: MPI_Group, newgroup: *mut MPI_Group) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { group_op(group1, group2, newgroup, |a, b| a.difference(b)) }
}

// ------------------------------------------------------------------------ datatypes

/// The datatypes made here, by handle (freed by `MPI_Type_free`).
// Process-wide because a C handle is a plain integer any thread may hand to any function, for
// objects that are not tied to a universe (the C handle tables, see `crate::handles`).
static TYPES: LazyLock<Mutex<HashMap<usize, UserDatatype>>> = LazyLock::new(Default::default);

/// Registers a datatype made here and writes its handle.
///
/// # Safety
/// `newtype` must be null or valid for a write.
unsafe fn new_type(d: UserDatatype, newtype: *mut MPI_Datatype) -> c_int {
    let h = d.as_raw();
    lock(&TYPES).insert(h.0 as usize, d);
    // SAFETY: the caller's contract.
    unsafe { put(newtype, h) }
}

/// `count` copies of `oldtype`, one after the other; `*newtype` names it until
/// `MPI_Type_free`.
///
/// # Safety
/// `oldtype` must be a live datatype, `newtype` valid for a write.
pub unsafe extern "C" fn MPI_Type_contiguous(count: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
    if oldtype.is_null() {
        return ERR_TYPE;
    }
    if count < 0 {
        return ERR_COUNT;
    }
    if newtype.is_null() {
        return ERR_ARG;
    }
    // SAFETY: the caller vouches for the handle; the layout is only read here.
    let d = UserDatatype::contiguous(count, &DatatypeRef::from_map(unsafe { oldtype.map() }));
    // SAFETY: the caller's contract.
    unsafe { new_type(d, newtype) }
}

/// `count` blocks of `blocklength` elements of `oldtype`, block starts `stride` elements
/// apart; `*newtype` names it until `MPI_Type_free`.
///
/// # Safety
/// As for [`MPI_Type_contiguous`].
pub unsafe extern "C" fn MPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    oldtype: MPI_Datatype,
    newtype: *mut MPI_Datatype,
) -> c_int {
    if oldtype.is_null() {
        return ERR_TYPE;
    }
    if count < 0 || blocklength < 0 {
        return ERR_COUNT;
    }
    if newtype.is_null() {
        return ERR_ARG;
    }
    // SAFETY: as for `MPI_Type_contiguous`.
    let d = UserDatatype::vector(count, blocklength, stride, &DatatypeRef::from_map(unsafe { oldtype.map() }));
    // SAFETY: the caller's contract.
    unsafe { new_type(d, newtype) }
}

/// Commits a datatype (p2pmpi's layouts are usable once made: this only checks the handle).
///
/// # Safety
/// `datatype` must be valid for a read.
pub unsafe extern "C" fn MPI_Type_commit(datatype: *mut MPI_Datatype) -> c_int {
    if datatype.is_null() {
        return ERR_ARG;
    }
    // SAFETY: checked non-null; the caller vouches it is readable.
    if unsafe { *datatype }.is_null() {
        ERR_TYPE
    } else {
        SUCCESS
    }
}

/// Frees a datatype made by `MPI_Type_contiguous`, `MPI_Type_vector`, ... and sets
/// `*datatype` to `RSMPI_DATATYPE_NULL`. Predefined datatypes and those of Rust objects
/// cannot be freed here (`MPI_ERR_TYPE`).
///
/// # Safety
/// `datatype` must be valid for a read and a write; no communication may still use it.
pub unsafe extern "C" fn MPI_Type_free(datatype: *mut MPI_Datatype) -> c_int {
    if datatype.is_null() {
        return ERR_ARG;
    }
    // SAFETY: checked non-null; the caller vouches it is readable and writable.
    let h = unsafe { *datatype };
    let Some(d) = lock(&TYPES).remove(&(h.0 as usize)) else { return ERR_TYPE };
    drop(d);
    // SAFETY: as above.
    unsafe { *datatype = k::RSMPI_DATATYPE_NULL };
    SUCCESS
}

// ------------------------------------------------------------------------ topologies

/// The `n` integers at `p`.
///
/// # Safety
/// `p` must be valid for `n` reads when `n > 0`.
unsafe fn ints(n: c_int, p: *const c_int) -> Result<Vec<c_int>, c_int> {
    if n < 0 {
        return Err(ERR_ARG);
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(ERR_ARG);
    }
    // SAFETY: non-null, and the caller vouches for `n` integers.
    Ok(unsafe { std::slice::from_raw_parts(p, n as usize) }.to_vec())
}

/// A handle owning a Cartesian communicator.
fn cart_owned(c: CartesianCommunicator) -> MPI_Comm {
    let layout = c.get_layout();
    comm_owned(c.handle().clone(), CommKind::Cart { dims: layout.dims, periods: layout.periods })
}

/// A Cartesian communicator over the first `∏ dims` processes of `comm` (collective; ranks
/// are kept whatever `reorder` says); `*comm_cart` is `RSMPI_COMM_NULL` on the others.
///
/// # Safety
/// `dims` and `periods` must be valid for `ndims` reads, `comm_cart` for a write.
pub unsafe extern "C" fn MPI_Cart_create(
    comm_old: MPI_Comm,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    reorder: c_int,
    comm_cart: *mut MPI_Comm,
) -> c_int {
    if comm_cart.is_null() {
        return ERR_ARG;
    }
    let c = intra_or_return!(comm_old);
    // SAFETY: the caller's contract.
    let (d, p) = match unsafe { ints(ndims, dims).and_then(|d| Ok((d, ints(ndims, periods)?))) } {
        Ok(x) => x,
        Err(e) => return e,
    };
    let n = with_comm!(&c, c => c.size()) as i64;
    if d.iter().any(|&x| x <= 0)
        || d.iter().map(|&x| x as i64).try_fold(1i64, |a, x| a.checked_mul(x).filter(|&v| v <= n)).is_none()
    {
        return ERR_ARG;
    }
    let p: Vec<bool> = p.iter().map(|&x| x != 0).collect();
    let made = with_comm!(c, c => c.create_cartesian_communicator(&d, &p, reorder != 0));
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { put(comm_cart, made.map_or(k::RSMPI_COMM_NULL, cart_owned)) }
}

/// The Cartesian communicator of a handle, or `MPI_ERR_COMM` (no Cartesian layout).
macro_rules! cart_or_return {
    ($c:expr) => {
        match comm_or_return!($c) {
            CommObj::Cart(c) => c,
            _ => return ERR_COMM,
        }
    };
}

/// The coordinates of `rank` in a Cartesian communicator (`maxdims` of them at most).
///
/// # Safety
/// `coords` must be valid for `maxdims` writes.
pub unsafe extern "C" fn MPI_Cart_coords(comm: MPI_Comm, rank: c_int, maxdims: c_int, coords: *mut c_int) -> c_int {
    let c = cart_or_return!(comm);
    if !(0..c.size()).contains(&rank) {
        return ERR_RANK;
    }
    let xs = c.rank_to_coordinates(rank);
    if maxdims < xs.len() as c_int || (!xs.is_empty() && coords.is_null()) {
        return ERR_ARG;
    }
    for (i, x) in xs.into_iter().enumerate() {
        // SAFETY: `i < ndims <= maxdims`; the caller vouches for `maxdims` writes.
        unsafe { *coords.add(i) = x };
    }
    SUCCESS
}

/// The number of dimensions of a Cartesian communicator.
///
/// # Safety
/// `ndims` must be valid for a write.
pub unsafe extern "C" fn MPI_Cartdim_get(comm: MPI_Comm, ndims: *mut c_int) -> c_int {
    let c = cart_or_return!(comm);
    // SAFETY: the caller's contract.
    unsafe { put(ndims, c.num_dimensions()) }
}

/// A Cartesian communicator's layout: its sizes, periodicities (1 or 0) and this process's
/// coordinates (`maxdims` of each at most).
///
/// # Safety
/// `dims`, `periods` and `coords` must be valid for `maxdims` writes.
pub unsafe extern "C" fn MPI_Cart_get(
    comm: MPI_Comm,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords: *mut c_int,
) -> c_int {
    let c = cart_or_return!(comm);
    let l = c.get_layout();
    if maxdims < l.dims.len() as c_int
        || (!l.dims.is_empty() && (dims.is_null() || periods.is_null() || coords.is_null()))
    {
        return ERR_ARG;
    }
    for i in 0..l.dims.len() {
        // SAFETY: `i < ndims <= maxdims`; the caller vouches for `maxdims` writes of each.
        unsafe {
            *dims.add(i) = l.dims[i];
            *periods.add(i) = l.periods[i] as c_int;
            *coords.add(i) = l.coords[i];
        }
    }
    SUCCESS
}

/// The rank at coordinates `coords` (one per dimension; wrapped around periodic dimensions,
/// `MPI_ERR_ARG` out of range of the others).
///
/// # Safety
/// `coords` must be valid for `ndims` reads, `rank` for a write.
pub unsafe extern "C" fn MPI_Cart_rank(comm: MPI_Comm, coords: *const c_int, rank: *mut c_int) -> c_int {
    let c = cart_or_return!(comm);
    let l = c.get_layout();
    // SAFETY: the caller's contract.
    let xs = match unsafe { ints(l.dims.len() as c_int, coords) } {
        Ok(xs) => xs,
        Err(e) => return e,
    };
    if xs.iter().zip(l.dims.iter().zip(&l.periods)).any(|(&x, (&d, &p))| !p && !(0..d).contains(&x)) {
        return ERR_ARG;
    }
    // SAFETY: the caller's contract.
    unsafe { put(rank, c.coordinates_to_rank(&xs)) }
}

/// The ranks this process receives from and sends to in a shift of `disp` along dimension
/// `direction` (`RSMPI_PROC_NULL` past the edge of a dimension that is not periodic).
///
/// # Safety
/// `rank_source` and `rank_dest` must be valid for a write.
pub unsafe extern "C" fn MPI_Cart_shift(
    comm: MPI_Comm,
    direction: c_int,
    disp: c_int,
    rank_source: *mut c_int,
    rank_dest: *mut c_int,
) -> c_int {
    let c = cart_or_return!(comm);
    if !(0..c.num_dimensions()).contains(&direction) || rank_source.is_null() || rank_dest.is_null() {
        return ERR_ARG;
    }
    let (s, d) = c.shift(direction, disp);
    // SAFETY: checked non-null; the caller vouches they are writable.
    unsafe {
        *rank_source = s.unwrap_or(k::RSMPI_PROC_NULL);
        *rank_dest = d.unwrap_or(k::RSMPI_PROC_NULL);
    }
    SUCCESS
}

/// The Cartesian sub-grids keeping the dimensions where `remain_dims` is non-zero
/// (collective): `*newcomm` is this process's.
///
/// # Safety
/// `remain_dims` must be valid for `ndims` reads, `newcomm` for a write.
pub unsafe extern "C" fn MPI_Cart_sub(comm: MPI_Comm, remain_dims: *const c_int, newcomm: *mut MPI_Comm) -> c_int {
    if newcomm.is_null() {
        return ERR_ARG;
    }
    let c = cart_or_return!(comm);
    // SAFETY: the caller's contract.
    let keep = match unsafe { ints(c.num_dimensions(), remain_dims) } {
        Ok(k) => k,
        Err(e) => return e,
    };
    let keep: Vec<bool> = keep.iter().map(|&x| x != 0).collect();
    let sub = c.subgroup(&keep);
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { put(newcomm, cart_owned(sub)) }
}

/// Balanced sizes for a grid of `nnodes` processes in `ndims` dimensions: the non-zero
/// entries of `dims` are kept, the zero ones filled (in non-increasing order) so that the
/// product is `nnodes`. `MPI_ERR_ARG` if the fixed entries do not divide `nnodes`.
///
/// # Safety
/// `dims` must be valid for `ndims` reads and writes.
pub unsafe extern "C" fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
    if nnodes <= 0 {
        return ERR_ARG;
    }
    // SAFETY: the caller's contract.
    let given = match unsafe { ints(ndims, dims) } {
        Ok(d) => d,
        Err(e) => return e,
    };
    let Some(filled) = dims_create(nnodes, &given) else { return ERR_ARG };
    for (i, d) in filled.into_iter().enumerate() {
        // SAFETY: `i < ndims`; the caller vouches for `ndims` writes.
        unsafe { *dims.add(i) = d };
    }
    SUCCESS
}

/// [`MPI_Dims_create`]'s answer: `given` with its zero entries filled, or `None` if that is
/// impossible (a negative entry, or fixed entries whose product does not divide `nnodes`).
pub(crate) fn dims_create(nnodes: c_int, given: &[c_int]) -> Option<Vec<c_int>> {
    if given.iter().any(|&d| d < 0) {
        return None;
    }
    let fixed: i64 = given.iter().filter(|&&d| d > 0).map(|&d| d as i64).product();
    if nnodes as i64 % fixed != 0 {
        return None;
    }
    let free = given.iter().filter(|&&d| d == 0).count();
    let mut rest = (nnodes as i64 / fixed) as c_int;
    if free == 0 {
        return (rest == 1).then(|| given.to_vec());
    }
    // The prime factors of the rest, largest first, each multiplied into the smallest size.
    let mut primes = Vec::new();
    let mut p = 2;
    while p * p <= rest {
        while rest % p == 0 {
            primes.push(p);
            rest /= p;
        }
        p += 1;
    }
    if rest > 1 {
        primes.push(rest);
    }
    let mut sizes = vec![1; free];
    for &q in primes.iter().rev() {
        let i = (0..free).min_by_key(|&i| sizes[i]).expect("free > 0");
        sizes[i] *= q;
    }
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let mut it = sizes.into_iter();
    Some(given.iter().map(|&d| if d == 0 { it.next().expect("one size per free entry") } else { d }).collect())
}

#[cfg(test)]
mod tests {
    use super::dims_create;

    #[test]
    fn dims_create_balances_and_keeps_fixed_entries() {
        assert_eq!(dims_create(6, &[0, 0]), Some(vec![3, 2]));
        assert_eq!(dims_create(12, &[0, 0]), Some(vec![4, 3]));
        assert_eq!(dims_create(8, &[0, 0, 0]), Some(vec![2, 2, 2]));
        assert_eq!(dims_create(7, &[0, 0]), Some(vec![7, 1]));
        assert_eq!(dims_create(12, &[0, 3, 0]), Some(vec![2, 3, 2]));
        assert_eq!(dims_create(1, &[0, 0]), Some(vec![1, 1]));
        assert_eq!(dims_create(6, &[4, 0]), None, "4 does not divide 6");
        assert_eq!(dims_create(6, &[2, 3]), Some(vec![2, 3]));
        assert_eq!(dims_create(6, &[2, 2]), None, "fixed entries must multiply to nnodes");
        assert_eq!(dims_create(5, &[-1]), None);
        assert_eq!(dims_create(3, &[]), None);
        assert_eq!(dims_create(1, &[]), Some(vec![]));
    }
}
