//! Partitioned communication (MPI 4): `MPI_Psend_init`, `MPI_Precv_init`, `MPI_Pready`,
//! `MPI_Pready_range`, `MPI_Pready_list`, `MPI_Parrived`.
//!
//! One message per start: the send goes out, whole, when its last partition is ready; the
//! receive is an ordinary persistent receive of every partition at once, so a partition has
//! arrived when the whole message has. A partitioned receive is a persistent receive
//! ([`crate::point_to_point`]'s `MPI_Start` posts it). A partitioned send is a persistent
//! request whose start posts a placeholder ([`crate::grequest`]): pending until the last
//! `MPI_Pready`, which starts the send and puts its request in the placeholder's stead, so
//! every wait and test works on it.

use crate::consts::*;
use crate::datatypes::values::MPI_BYTE;
use crate::datatypes::{datatype, MPI_Count};
use crate::handles::{comm, request as raw_request, Persistent, RequestEntry, REQUESTS};
use crate::ok;
use p2pmpi::ffi;
use parking_lot::Mutex;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A partitioned request.
struct Part {
    handle: c_int,
    partitions: c_int,
    /// A send: what it sends, and its partitions ready so far in this start.
    send: Option<Send>,
}

/// What a partitioned send sends once every partition is ready.
struct Send {
    buf: usize,
    count: c_int,
    dt: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    /// The placeholder's tag.
    ptag: c_int,
    ready: Vec<bool>,
    nready: c_int,
}

/// The live partitioned requests.
// Process-wide because a C handle is a plain integer any thread may hand to any function.
static PARTS: Mutex<Vec<Part>> = Mutex::new(Vec::new());
/// How many there are (read without the lock by `MPI_Request_free`).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Request `h` is freed: forgotten here if partitioned.
pub(crate) fn forget(h: c_int) {
    if LIVE.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut p = PARTS.lock();
    if let Some(i) = p.iter().position(|q| q.handle == h) {
        p.swap_remove(i);
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The count of `partitions` partitions of `count` elements, as one message's.
fn total(partitions: c_int, count: MPI_Count) -> Result<c_int, c_int> {
    if partitions < 0 || count < 0 {
        return Err(MPI_ERR_COUNT);
    }
    c_int::try_from(partitions as MPI_Count * count).map_err(|_| MPI_ERR_COUNT)
}

/// Stores a new partitioned request of `p` (an inactive persistent one) at `request`.
///
/// # Safety
/// `request` must be null or valid for a write.
unsafe fn make(p: Persistent, partitions: c_int, send: Option<Send>, request: *mut c_int) -> Result<(), c_int> {
    if request.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: the predefined names are initialized statics that nothing writes.
    let null = unsafe { ffi::RSMPI_REQUEST_NULL };
    let handle = REQUESTS.insert(RequestEntry { raw: null, keep: None, persistent: Some(p), direct: None });
    PARTS.lock().push(Part { handle, partitions, send });
    LIVE.fetch_add(1, Ordering::Relaxed);
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { request.write(handle) };
    Ok(())
}

mpi_fn! {
    /// Makes a partitioned send of `partitions` partitions of `count` elements of `dt` at
    /// `buf` to `dest` (inactive until `MPI_Start`; sent once `MPI_Pready` marked every
    /// partition).
    fn MPI_Psend_init(
        buf: *const c_void,
        partitions: c_int,
        count: MPI_Count,
        dt: c_int,
        dest: c_int,
        tag: c_int,
        c: c_int,
        _info: c_int,
        request: *mut c_int,
    ) on c => {
        comm(c)?;
        datatype(dt)?;
        crate::not_in_place(buf)?;
        let n = total(partitions, count)?;
        if tag < 0 {
            return Err(MPI_ERR_TAG);
        }
        let ptag = crate::grequest::new_tag();
        let private = crate::grequest::private_handle()?;
        let p = Persistent {
            recv: true,
            synchronous: false,
            collective: false,
            buf: 0,
            count: 0,
            dt: MPI_BYTE,
            peer: 0,
            tag: ptag,
            comm: private,
        };
        let ready = vec![false; partitions as usize];
        let s = Send { buf: buf as usize, count: n, dt, dest, tag, comm: c, ptag, ready, nready: 0 };
        // SAFETY: the caller's contract.
        unsafe { make(p, partitions, Some(s), request) }
    }
}

mpi_fn! {
    /// Makes a partitioned receive of `partitions` partitions of `count` elements of `dt`
    /// into `buf` from `source` (inactive until `MPI_Start`).
    fn MPI_Precv_init(
        buf: *mut c_void,
        partitions: c_int,
        count: MPI_Count,
        dt: c_int,
        source: c_int,
        tag: c_int,
        c: c_int,
        _info: c_int,
        request: *mut c_int,
    ) on c => {
        comm(c)?;
        datatype(dt)?;
        crate::not_in_place(buf)?;
        let n = total(partitions, count)?;
        let p = Persistent {
            recv: true,
            synchronous: false,
            collective: false,
            buf: buf as usize,
            count: n,
            dt,
            peer: source,
            tag,
            comm: c,
        };
        // SAFETY: the caller's contract.
        unsafe { make(p, partitions, None, request) }
    }
}

/// Marks partitions `which` of partitioned send `h` ready; the last one sends the message.
fn ready(h: c_int, which: impl Iterator<Item = c_int>) -> Result<(), c_int> {
    let placeholder = raw_request(h).ok_or(MPI_ERR_REQUEST)?;
    // SAFETY: the predefined names are initialized statics that nothing writes.
    if placeholder == unsafe { ffi::RSMPI_REQUEST_NULL } {
        // Not started.
        return Err(MPI_ERR_REQUEST);
    }
    let go = {
        let mut parts = PARTS.lock();
        let part = parts.iter_mut().find(|q| q.handle == h).ok_or(MPI_ERR_REQUEST)?;
        let n = part.partitions;
        let s = part.send.as_mut().ok_or(MPI_ERR_REQUEST)?;
        for i in which {
            if !(0..n).contains(&i) {
                return Err(MPI_ERR_ARG);
            }
            if !std::mem::replace(&mut s.ready[i as usize], true) {
                s.nready += 1;
            }
        }
        if s.nready < n {
            return Ok(());
        }
        s.ready.iter_mut().for_each(|r| *r = false);
        s.nready = 0;
        (s.buf, s.count, s.dt, s.dest, s.tag, s.comm, s.ptag)
    };
    let (buf, count, dt, dest, tag, c, ptag) = go;
    let (fc, fd) = (comm(c)?, datatype(dt)?);
    // SAFETY: the predefined names are initialized statics that nothing writes.
    let mut s = unsafe { ffi::RSMPI_REQUEST_NULL };
    let b = crate::nz(buf as *const c_void, count);
    // SAFETY: the program made the request with its buffer, valid while the request is
    // active (MPI's rule); `s` is a local.
    ok(unsafe { ffi::MPI_Isend(b, count, fd, dest, tag, fc, &mut s) })?;
    // The send stands in the placeholder's stead, which completes.
    REQUESTS.with_mut(h, |e| e.raw = s).ok_or(MPI_ERR_REQUEST)?;
    crate::grequest::release(ptag)?;
    let (mut r, mut st) = (placeholder, ffi::MPI_Status::default());
    // SAFETY: locals; the placeholder's receive just completed.
    ok(unsafe { ffi::MPI_Wait(&mut r, &mut st) })
}

mpi_fn! {
    /// Partition `partition` of partitioned send `request` is ready.
    fn MPI_Pready(partition: c_int, request: c_int) on MPI_COMM_WORLD => {
        ready(request, std::iter::once(partition))
    }
}

mpi_fn! {
    /// Partitions `low` to `high` (included) of partitioned send `request` are ready.
    fn MPI_Pready_range(low: c_int, high: c_int, request: c_int) on MPI_COMM_WORLD => {
        if low > high {
            return Err(MPI_ERR_ARG);
        }
        ready(request, low..=high)
    }
}

mpi_fn! {
    /// The `length` partitions listed at `partitions` of partitioned send `request` are
    /// ready.
    fn MPI_Pready_list(length: c_int, partitions: *const c_int, request: c_int) on MPI_COMM_WORLD => {
        if length < 0 || (length > 0 && partitions.is_null()) {
            return Err(MPI_ERR_ARG);
        }
        let list: &[c_int] = if length == 0 {
            &[]
        } else {
            // SAFETY: non-null, and the caller vouches for `length` entries.
            unsafe { std::slice::from_raw_parts(partitions, length as usize) }
        };
        ready(request, list.iter().copied())
    }
}

mpi_fn! {
    /// Whether partition `partition` of partitioned receive `request` arrived (`*flag`):
    /// once the message has (an inactive request: yes).
    fn MPI_Parrived(request: c_int, partition: c_int, flag: *mut c_int) on MPI_COMM_WORLD => {
        if flag.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let n = {
            let parts = PARTS.lock();
            let part = parts.iter().find(|q| q.handle == request).ok_or(MPI_ERR_REQUEST)?;
            if part.send.is_some() {
                return Err(MPI_ERR_REQUEST);
            }
            part.partitions
        };
        if !(0..n).contains(&partition) {
            return Err(MPI_ERR_ARG);
        }
        let r = raw_request(request).ok_or(MPI_ERR_REQUEST)?;
        // SAFETY: the predefined names are initialized statics that nothing writes.
        if r == unsafe { ffi::RSMPI_REQUEST_NULL } {
            // SAFETY: checked non-null; the caller vouches it is writable.
            unsafe { flag.write(1) };
            return Ok(());
        }
        let mut st = ffi::MPI_Status::default();
        // SAFETY: `flag` checked non-null; `st` a local; the request stays.
        ok(unsafe { ffi::MPI_Request_get_status(r, flag, &mut st) })
    }
}
