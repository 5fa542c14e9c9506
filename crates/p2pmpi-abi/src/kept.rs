//! What a nonblocking operation keeps alive until its request completes ([`Kept`]: the
//! descriptions of the program's buffers, the copy of an `MPI_IN_PLACE` input), and the hand-over
//! of a started request of the Rust API to a handle ([`started`]). Below the nonblocking
//! collectives ([`crate::immediate`], [`crate::ivarcount`]) and the exchanges
//! ([`crate::exchange`]) that share it.

use crate::consts::{MPI_COMM_SELF, MPI_PROC_NULL};
use crate::datatypes::{datatype_ref, stageable};
use crate::handles::{new_request, Keep};
use crate::is_in_place;
use p2pmpi::datatype::{DatatypeRef, DynBuffer, DynBufferMut};
use p2pmpi::request::{Request, StaticScope};
use std::any::Any;
use std::os::raw::{c_int, c_void};

/// A value moved to the heap for the life of a request, freed when the request's [`Keep`]
/// is dropped (after completion).
struct Owned<T>(*mut T);

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `Kept::hold`, dropped once; the request that
        // used it completed.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// What one nonblocking collective keeps alive.
#[derive(Default)]
pub(crate) struct Kept(Vec<Box<dyn Any>>);

impl Kept {
    /// Moves `t` to the heap until the request completes; a reference for the request.
    pub(crate) fn hold<T: 'static>(&mut self, t: T) -> &'static mut T {
        let p = Box::into_raw(Box::new(t));
        self.0.push(Box::new(Owned(p)));
        // SAFETY: `p` stays allocated until `self` (the request's keep) is dropped, after the
        // request, the only user of the reference, completed.
        unsafe { &mut *p }
    }

    /// A read-only description of `count` elements of `d` at `buf` (or, for `MPI_IN_PLACE`,
    /// of a copy of those at element `at` of `inplace`).
    ///
    /// # Safety
    /// The buffers must hold those elements until the request completes.
    pub(crate) unsafe fn input(
        &mut self,
        buf: *const c_void,
        count: c_int,
        dt: c_int,
        inplace: *const c_void,
        at: c_int,
    ) -> Result<&'static DynBuffer<'static>, c_int> {
        let d = datatype_ref(dt)?;
        let p = if is_in_place(buf) {
            let size = stageable(dt)?;
            let bytes = count.max(0) as usize * size;
            let copy = self.hold(vec![0u64; bytes.div_ceil(8)]);
            if bytes > 0 {
                // SAFETY: the caller vouches for the elements at `inplace`; the copy is new.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (inplace as *const u8).add(at as usize * size),
                        copy.as_mut_ptr() as *mut u8,
                        bytes,
                    )
                };
            }
            copy.as_ptr() as *const c_void
        } else {
            buf
        };
        // SAFETY: the caller's contract (or the copy, kept as long).
        let b = unsafe { DynBuffer::from_raw(crate::nz(p, count), count, d) };
        Ok(self.hold(b))
    }

    /// A writable description of `count` elements of `d` at `buf`.
    ///
    /// # Safety
    /// `buf` must be writable for those elements until the request completes.
    pub(crate) unsafe fn output(
        &mut self,
        buf: *mut c_void,
        count: c_int,
        d: DatatypeRef<'static>,
    ) -> &'static mut DynBufferMut<'static> {
        // SAFETY: the caller's contract.
        let b = unsafe { DynBufferMut::from_raw(crate::nz_mut(buf, count), count, d) };
        self.hold(b)
    }
}

/// Hands the request over to a handle written at `out`, with what it keeps alive.
///
/// # Safety
/// `out` must be valid for a write.
pub(crate) unsafe fn started<D: ?Sized>(
    r: Request<'static, D, StaticScope>,
    kept: Kept,
    out: *mut c_int,
) -> Result<(), c_int> {
    // SAFETY: the buffers' descriptions are kept with the request until it completes, and
    // the program keeps the buffers valid (MPI's rule).
    let (raw, _, _) = unsafe { r.into_raw() };
    // SAFETY: the caller's contract.
    unsafe { out.write(new_request(raw, Some(Keep(kept.0)))) };
    Ok(())
}

/// Writes at `request` a request that is already complete (a receive of nothing from
/// `MPI_PROC_NULL`): the answer of a nonblocking call done before it returns.
///
/// # Safety
/// `request` must be valid for a write.
pub(crate) unsafe fn completed(request: *mut c_int) -> Result<(), c_int> {
    let nothing = std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut c_void;
    let (fc, fd) =
        (crate::handles::comm(MPI_COMM_SELF)?, crate::datatypes::datatype(crate::datatypes::values::MPI_INT)?);
    let mut r = crate::handles::null_request();
    // SAFETY: a receive of nothing from MPI_PROC_NULL into a local request.
    crate::ok(unsafe { p2pmpi::ffi::MPI_Irecv(nothing, 0, fd, MPI_PROC_NULL, 0, fc, &mut r) })?;
    // SAFETY: the caller vouches `request` is writable.
    unsafe { request.write(crate::handles::new_request(r, None)) };
    Ok(())
}
