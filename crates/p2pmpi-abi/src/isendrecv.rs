//! `MPI_Isendrecv` and `MPI_Isendrecv_replace` (and their `_c` forms).
//!
//! The request is the receive's: it completes, with the receive's status, when the message
//! is in. What is sent is a copy (packed, for any datatype) that the send owns, so the
//! program's send buffer is free as soon as the request completes, as MPI says, whether or
//! not the send is done by then; the sends still under way are kept, with their copies, and
//! their requests are completed by the next call (or stay until the process ends).

use crate::consts::*;
use crate::datatypes::values::MPI_PACKED;
use crate::datatypes::{datatype, MPI_Count};
use crate::handles::{comm, new_request};
use crate::ok;
use p2pmpi::ffi;
use parking_lot::Mutex;
use std::os::raw::{c_int, c_void};

/// A send under way and the copy it sends.
struct Sending {
    raw: ffi::MPI_Request,
    _copy: Vec<u8>,
}

// SAFETY: the library's request is a plain handle usable from any thread; the copy is owned.
unsafe impl Send for Sending {}

/// The sends still under way.
// Process-wide: the sends of any thread's calls.
static SENDING: Mutex<Vec<Sending>> = Mutex::new(Vec::new());

/// Completes the sends that are done (their copies go).
fn sweep() {
    let mut s = SENDING.lock();
    s.retain_mut(|x| {
        let (mut done, mut st) = (0, ffi::MPI_Status::default());
        // SAFETY: locals; the request's data is the copy kept with it.
        let rc = unsafe { ffi::MPI_Test(&mut x.raw, &mut done, &mut st) };
        rc == MPI_SUCCESS && done == 0
    });
}

/// Packs `count` elements of `dt` at `buf` (the library's packed format: their bytes).
///
/// # Safety
/// `buf` must hold `count` elements of `dt`.
unsafe fn packed(buf: *const c_void, count: c_int, dt: c_int) -> Result<Vec<u8>, c_int> {
    let (mut size, mut pos) = (0, 0);
    // SAFETY: locals.
    ok(unsafe { crate::pack::MPI_Pack_size(count, dt, MPI_COMM_SELF, &mut size) })?;
    let mut v = vec![0u8; size.max(0) as usize];
    if count > 0 {
        let out = v.as_mut_ptr() as *mut c_void;
        // SAFETY: the caller vouches for `count` elements at `buf`; `v` has `size` bytes.
        ok(unsafe { crate::pack::MPI_Pack(buf, count, dt, out, size, &mut pos, MPI_COMM_SELF) })?;
    }
    v.truncate(pos.max(0) as usize);
    Ok(v)
}

/// Starts the send of `copy` to `dest`, then the receive of `recvcount` elements of
/// `recvtype` into `recvbuf` from `source`; `*request` names the receive.
///
/// # Safety
/// `recvbuf` must be writable for the receive until it completes; `request` null or
/// writable.
#[allow(clippy::too_many_arguments)]
unsafe fn start(
    copy: Vec<u8>,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    source: c_int,
    recvtag: c_int,
    c: c_int,
    request: *mut c_int,
) -> Result<(), c_int> {
    let fc = comm(c)?;
    let fr = datatype(recvtype)?;
    crate::not_in_place(recvbuf)?;
    if request.is_null() {
        return Err(MPI_ERR_ARG);
    }
    sweep();
    // SAFETY: the predefined names are initialized statics that nothing writes.
    let (mut r, mut s) = unsafe { (ffi::RSMPI_REQUEST_NULL, ffi::RSMPI_REQUEST_NULL) };
    let n = c_int::try_from(copy.len()).map_err(|_| MPI_ERR_COUNT)?;
    let packed_type = datatype(MPI_PACKED)?;
    // (An empty vector's address, 1, could pass for the library's `MPI_IN_PLACE`.)
    let b = if n == 0 { crate::nz(std::ptr::null(), 0) } else { copy.as_ptr() as *const c_void };
    // The send first: if it is refused, nothing was posted (a receive withdrawn could have
    // taken a message meanwhile).
    // SAFETY: the copy lives with the send until it completes; `s` is a local.
    ok(unsafe { ffi::MPI_Isend(b, n, packed_type, dest, sendtag, fc, &mut s) })?;
    SENDING.lock().push(Sending { raw: s, _copy: copy });
    // SAFETY: the caller's contract; `r` is a local.
    ok(unsafe { ffi::MPI_Irecv(crate::nz_mut(recvbuf, recvcount), recvcount, fr, source, recvtag, fc, &mut r) })?;
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { request.write(new_request(r, None)) };
    Ok(())
}

/// Defines `MPI_Isendrecv` and `MPI_Isendrecv_replace` with counts of type `$t` (`MPI_Count`
/// in the `_c` forms: `MPI_ERR_COUNT` for one beyond `int`'s range).
macro_rules! isendrecv_forms {
    ($isendrecv:ident, $replace:ident, $t:ty, $doc:expr, $doc_replace:expr) => {
        mpi_fn! {
            #[doc = $doc]
            fn $isendrecv(
                sendbuf: *const c_void,
                sendcount: $t,
                sendtype: c_int,
                dest: c_int,
                sendtag: c_int,
                recvbuf: *mut c_void,
                recvcount: $t,
                recvtype: c_int,
                source: c_int,
                recvtag: c_int,
                c: c_int,
                request: *mut c_int,
            ) on c => {
                let sendcount = c_int::try_from(sendcount).map_err(|_| MPI_ERR_COUNT)?;
                let recvcount = c_int::try_from(recvcount).map_err(|_| MPI_ERR_COUNT)?;
                comm(c)?;
                datatype(sendtype)?;
                crate::not_in_place(sendbuf)?;
                if sendcount < 0 || recvcount < 0 {
                    return Err(MPI_ERR_COUNT);
                }
                // SAFETY: the caller's contract.
                let copy = unsafe { packed(sendbuf, sendcount, sendtype) }?;
                // SAFETY: the caller's contract.
                unsafe { start(copy, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag, c, request) }
            }
        }

        mpi_fn! {
            #[doc = $doc_replace]
            fn $replace(
                buf: *mut c_void,
                count: $t,
                dt: c_int,
                dest: c_int,
                sendtag: c_int,
                source: c_int,
                recvtag: c_int,
                c: c_int,
                request: *mut c_int,
            ) on c => {
                let count = c_int::try_from(count).map_err(|_| MPI_ERR_COUNT)?;
                comm(c)?;
                datatype(dt)?;
                crate::not_in_place(buf)?;
                if count < 0 {
                    return Err(MPI_ERR_COUNT);
                }
                // The copy is taken before the receive may overwrite the buffer.
                // SAFETY: the caller's contract.
                let copy = unsafe { packed(buf, count, dt) }?;
                // SAFETY: the caller's contract.
                unsafe { start(copy, dest, sendtag, buf, count, dt, source, recvtag, c, request) }
            }
        }
    };
}
isendrecv_forms!(
    MPI_Isendrecv,
    MPI_Isendrecv_replace,
    c_int,
    "Starts sending to `dest` and receiving from `source` at once; `*request` completes with both.",
    "Starts sending the `count` elements at `buf` to `dest` and receiving as many into `buf` from `source`."
);
isendrecv_forms!(
    MPI_Isendrecv_c,
    MPI_Isendrecv_replace_c,
    MPI_Count,
    "`MPI_Isendrecv` with large counts.",
    "`MPI_Isendrecv_replace` with a large count."
);
