//! Matched probes and receives: `MPI_Mprobe`, `MPI_Improbe`, `MPI_Mrecv`, `MPI_Imrecv` (and
//! their `_c` forms). A matched message is the Rust API's [`Message`], named by a handle of
//! [`MESSAGES`] until it is received; a probe of `MPI_PROC_NULL` gives
//! `MPI_MESSAGE_NO_PROC`. A failed communication stops the job (the Rust API's matched
//! receives have no error return here).

use crate::consts::*;
use crate::datatypes::{datatype, MPI_Count};
use crate::handles::{object, rust_comm, Slab};
use crate::status::{self, MPI_Status};
use p2pmpi::datatype::{DatatypeRef, DynBufferMut};
use p2pmpi::ffi;
use p2pmpi::point_to_point::{Message, Status};
use p2pmpi::traits::*;
use std::os::raw::{c_int, c_void};

/// `MPI_MESSAGE_NULL`.
pub const MPI_MESSAGE_NULL: c_int = 0x2c00_0000;
/// `MPI_MESSAGE_NO_PROC`: the message of a probe of `MPI_PROC_NULL`.
pub const MPI_MESSAGE_NO_PROC: c_int = 0x6c00_0000;

/// The matched messages not received yet (handles of kind 3, apart from the requests').
// Process-wide because a C handle is a plain integer any thread may hand to any function.
pub static MESSAGES: Slab<Message> = Slab::with_kind(3, object::REQUEST);

/// The status of a probe or a receive of `MPI_PROC_NULL`.
fn proc_null_status() -> MPI_Status {
    MPI_Status::new(0, false, MPI_PROC_NULL, MPI_ANY_TAG, MPI_SUCCESS)
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

/// The Rust API's status in MPICH's layout.
fn converted(st: Status) -> MPI_Status {
    MPI_Status::from(&ffi::MPI_Status::from(st))
}

/// Probes for a message from `source` with `tag` on `c` and takes it out of the queue:
/// blocking, or not (`None` when none is there).
fn matched_probe(source: c_int, tag: c_int, c: c_int, block: bool) -> Result<Option<(c_int, MPI_Status)>, c_int> {
    let rc = rust_comm(c)?;
    if tag < 0 && tag != MPI_ANY_TAG {
        return Err(MPI_ERR_TAG);
    }
    if source == MPI_PROC_NULL {
        return Ok(Some((MPI_MESSAGE_NO_PROC, proc_null_status())));
    }
    let found = if source == MPI_ANY_SOURCE {
        let p = rc.any_process();
        if block {
            Some(p.try_matched_probe_with_tag(tag).map_err(crate::errors::class_of_failure)?)
        } else {
            p.try_immediate_matched_probe_with_tag(tag).map_err(crate::errors::class_of_failure)?
        }
    } else {
        if !(0..rc.size()).contains(&source) {
            return Err(MPI_ERR_RANK);
        }
        let p = rc.process_at_rank(source);
        if block {
            Some(p.try_matched_probe_with_tag(tag).map_err(crate::errors::class_of_failure)?)
        } else {
            p.try_immediate_matched_probe_with_tag(tag).map_err(crate::errors::class_of_failure)?
        }
    };
    Ok(found.map(|(m, st)| (MESSAGES.insert(m), converted(st))))
}

mpi_fn! {
    /// Waits for a message from `source` with `tag` and takes it out of the queue: `*message`
    /// names it for `MPI_Mrecv`.
    fn MPI_Mprobe(source: c_int, tag: c_int, c: c_int, message: *mut c_int, st: *mut MPI_Status) on c => {
        if message.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let (m, s) = matched_probe(source, tag, c, true)?.ok_or(MPI_ERR_INTERN)?;
        // SAFETY: checked non-null; the caller's contract for both.
        unsafe {
            message.write(m);
            put_status(st, s);
        }
        Ok(())
    }
}

mpi_fn! {
    /// Whether a message from `source` with `tag` is there (`*flag`); if so it is taken out
    /// of the queue and `*message` names it.
    fn MPI_Improbe(source: c_int, tag: c_int, c: c_int, flag: *mut c_int, message: *mut c_int, st: *mut MPI_Status)
        on c => {
        if message.is_null() || flag.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let found = matched_probe(source, tag, c, false)?;
        // SAFETY: checked non-null; the caller's contract for all three.
        unsafe {
            flag.write(found.is_some() as c_int);
            if let Some((m, s)) = found {
                message.write(m);
                put_status(st, s);
            }
        }
        Ok(())
    }
}

/// Receives the matched message `*message` into `count` elements of `dt` at `buf`.
///
/// # Safety
/// `message` must be valid for a read and a write, `buf` writable for `count` elements of
/// `dt`, `st` null, `MPI_STATUS_IGNORE` or writable.
unsafe fn mrecv(
    buf: *mut c_void,
    count: c_int,
    dt: c_int,
    message: *mut c_int,
    st: *mut MPI_Status,
) -> Result<(), c_int> {
    let d = datatype(dt)?;
    if message.is_null() {
        return Err(MPI_ERR_ARG);
    }
    if count < 0 {
        return Err(MPI_ERR_COUNT);
    }
    crate::not_in_place(buf)?;
    // SAFETY: checked non-null; the caller vouches for it.
    let h = unsafe { message.read() };
    if h == MPI_MESSAGE_NO_PROC {
        // SAFETY: as above, and the caller's contract for `st`.
        unsafe {
            message.write(MPI_MESSAGE_NULL);
            put_status(st, proc_null_status());
        }
        return Ok(());
    }
    let m = MESSAGES.take(h).ok_or(MPI_ERR_REQUEST)?;
    // SAFETY: as above.
    unsafe { message.write(MPI_MESSAGE_NULL) };
    // SAFETY: `d` names a predefined datatype (living for the whole run); the caller vouches
    // for `count` writable elements at `buf`.
    let mut b = unsafe { DynBufferMut::from_raw(crate::nz_mut(buf, count), count, DatatypeRef::from_raw(d)) };
    let s = m.try_matched_receive_into(&mut b).map_err(crate::errors::class_of_failure)?;
    // SAFETY: the caller's contract.
    unsafe { put_status(st, converted(s)) };
    Ok(())
}

/// Defines `MPI_Mrecv` or `MPI_Imrecv` (by `$work`) and its `_c` form: the names, the last
/// argument (the status or the request), doc.
macro_rules! matched_forms {
    ($name:ident, $name_c:ident, $work:ident, $last:ident: $l:ty, $doc:literal) => {
        matched_forms!(@one $name, c_int, $work, $last: $l, $doc);
        matched_forms!(
            @one $name_c, MPI_Count, $work, $last: $l, concat!("`", stringify!($name), "` with a large count.")
        );
    };
    (@one $name:ident, $t:ty, $work:ident, $last:ident: $l:ty, $doc:expr) => {
        mpi_fn! {
            #[doc = $doc]
            fn $name(buf: *mut c_void, count: $t, dt: c_int, message: *mut c_int, $last: $l) on MPI_COMM_WORLD => {
                let count = c_int::try_from(count).map_err(|_| MPI_ERR_COUNT)?;
                // SAFETY: the caller's contract.
                unsafe { $work(buf, count, dt, message, $last) }
            }
        }
    };
}

matched_forms!(
    MPI_Mrecv,
    MPI_Mrecv_c,
    mrecv,
    st: *mut MPI_Status,
    "Receives the message `*message` names (from `MPI_Mprobe` or `MPI_Improbe`) and sets `*message` to \
     `MPI_MESSAGE_NULL`."
);

/// Starts receiving the matched message `*message` into `count` elements of `dt` at `buf`.
///
/// # Safety
/// `message` must be valid for a read and a write, `buf` writable for `count` elements of
/// `dt` until the request completes, `request` valid for a write.
unsafe fn imrecv(
    buf: *mut c_void,
    count: c_int,
    dt: c_int,
    message: *mut c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let d = crate::datatypes::datatype_ref(dt)?;
    if message.is_null() || request.is_null() {
        return Err(MPI_ERR_ARG);
    }
    if count < 0 {
        return Err(MPI_ERR_COUNT);
    }
    crate::not_in_place(buf)?;
    // SAFETY: checked non-null; the caller vouches for it.
    let h = unsafe { message.read() };
    if h == MPI_MESSAGE_NO_PROC {
        // Nothing to receive: a request that is complete at once (a receive from
        // `MPI_PROC_NULL`).
        // SAFETY: as above.
        unsafe { message.write(MPI_MESSAGE_NULL) };
        let mut r = 0;
        // SAFETY: a receive of nothing; `r` is a local.
        crate::ok(unsafe { crate::point_to_point::MPI_Irecv(buf, 0, dt, MPI_PROC_NULL, 0, MPI_COMM_SELF, &mut r) })?;
        // SAFETY: the caller's contract.
        unsafe { request.write(r) };
        return Ok(());
    }
    let m = MESSAGES.take(h).ok_or(MPI_ERR_REQUEST)?;
    // SAFETY: as above.
    unsafe { message.write(MPI_MESSAGE_NULL) };
    let mut kept = crate::kept::Kept::default();
    // SAFETY: the caller vouches for `count` writable elements at `buf` until completion.
    let b = unsafe { kept.output(buf, count, d) };
    let r = m.immediate_matched_receive_into(p2pmpi::request::StaticScope, b);
    // SAFETY: the caller's contract.
    unsafe { crate::kept::started(r, kept, request) }
}

matched_forms!(
    MPI_Imrecv,
    MPI_Imrecv_c,
    imrecv,
    request: *mut c_int,
    "Starts receiving the message `*message` names; `*message` becomes `MPI_MESSAGE_NULL`."
);
