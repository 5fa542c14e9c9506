//! Packing: `MPI_Pack`, `MPI_Unpack`, `MPI_Pack_size` (and their `_c` forms), in the
//! library's packed format (the data bytes of each element, in order: what `MPI_PACKED`
//! messages carry between p2pmpi processes); `external32` is in [`crate::external`].

use crate::consts::*;
use crate::datatypes::{datatype_ref, MPI_Count};
use crate::handles::rust_comm;
use p2pmpi::datatype::{DynBuffer, DynBufferMut};
use p2pmpi::traits::*;
use std::os::raw::{c_int, c_void};

/// The bytes `count` elements of `dt` pack into.
pub(crate) fn needed(count: MPI_Count, dt: c_int) -> Result<usize, c_int> {
    let n = usize::try_from(count).map_err(|_| MPI_ERR_COUNT)?;
    Ok(n * datatype_ref(dt)?.type_map().size())
}

/// Checks the position `*position` in a packed buffer of `size` bytes for `need` bytes more:
/// the position, or `None` when no byte moves.
///
/// # Safety
/// `position` must be null or valid for a read.
unsafe fn position_for(position: *mut MPI_Count, size: MPI_Count, need: usize) -> Result<Option<MPI_Count>, c_int> {
    if position.is_null() || size < 0 {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: checked non-null; the caller vouches it is readable.
    let pos = unsafe { position.read() };
    if pos < 0 || pos as usize + need > size as usize {
        return Err(MPI_ERR_TRUNCATE);
    }
    Ok((need > 0).then_some(pos))
}

/// Packs `incount` elements of `dt` at `inbuf` into `outbuf` (`outsize` bytes) at
/// `*position`, which moves past them.
///
/// # Safety
/// As `MPI_Pack` says.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn pack(
    inbuf: *const c_void,
    incount: MPI_Count,
    dt: c_int,
    outbuf: *mut c_void,
    outsize: MPI_Count,
    position: *mut MPI_Count,
    c: c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    let need = needed(incount, dt)?;
    // SAFETY: the caller's contract.
    let Some(pos) = (unsafe { position_for(position, outsize, need) })? else { return Ok(()) };
    let count = c_int::try_from(incount).map_err(|_| MPI_ERR_COUNT)?;
    // SAFETY: the caller vouches for `incount` elements at `inbuf` and `outsize` writable
    // bytes at `outbuf`, apart from each other.
    let (b, out) = unsafe {
        (
            DynBuffer::from_raw(crate::nz(inbuf, count), count, datatype_ref(dt)?),
            std::slice::from_raw_parts_mut(outbuf as *mut u8, outsize as usize),
        )
    };
    let end = rc.pack_into(&b, out, pos as c_int);
    // SAFETY: as above.
    unsafe { position.write(end as MPI_Count) };
    Ok(())
}

/// Unpacks `outcount` elements of `dt` into `outbuf` from `inbuf` (`insize` bytes) at
/// `*position`, which moves past them.
///
/// # Safety
/// As `MPI_Unpack` says.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn unpack(
    inbuf: *const c_void,
    insize: MPI_Count,
    position: *mut MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    dt: c_int,
    c: c_int,
) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    let need = needed(outcount, dt)?;
    // SAFETY: the caller's contract.
    let Some(pos) = (unsafe { position_for(position, insize, need) })? else { return Ok(()) };
    let count = c_int::try_from(outcount).map_err(|_| MPI_ERR_COUNT)?;
    // SAFETY: the caller vouches for `insize` bytes at `inbuf` and `outcount` writable
    // elements at `outbuf`, apart from each other; every byte pattern is a valid value of a
    // predefined type (the library writes 0 or 1 to booleans).
    let end = unsafe {
        let input = std::slice::from_raw_parts(inbuf as *const u8, insize as usize);
        let mut b = DynBufferMut::from_raw(crate::nz_mut(outbuf, count), count, datatype_ref(dt)?);
        rc.unpack_into(input, &mut b, pos as c_int)
    };
    // SAFETY: as above.
    unsafe { position.write(end as MPI_Count) };
    Ok(())
}

/// The type of the positions and sizes of a form: `c_int` (`MPI_Pack`, ...) or `MPI_Count`
/// (`MPI_Pack_c`, ...).
trait Form: Copy + Into<MPI_Count> {
    /// Runs `f` with `*position` as an `MPI_Count`, written back in this type.
    ///
    /// # Safety
    /// `position` must be null or valid for a read and a write.
    unsafe fn with_position(
        position: *mut Self,
        f: impl FnOnce(*mut MPI_Count) -> Result<(), c_int>,
    ) -> Result<(), c_int>;

    /// `n` bytes in this type.
    fn size(n: usize) -> Result<Self, c_int>;
}

impl Form for c_int {
    unsafe fn with_position(
        position: *mut c_int,
        f: impl FnOnce(*mut MPI_Count) -> Result<(), c_int>,
    ) -> Result<(), c_int> {
        if position.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches for it.
        let mut p = unsafe { position.read() } as MPI_Count;
        f(&mut p)?;
        // SAFETY: as above.
        unsafe { position.write(c_int::try_from(p).map_err(|_| MPI_ERR_COUNT)?) };
        Ok(())
    }

    fn size(n: usize) -> Result<c_int, c_int> {
        c_int::try_from(n).map_err(|_| MPI_ERR_COUNT)
    }
}

impl Form for MPI_Count {
    unsafe fn with_position(
        position: *mut MPI_Count,
        f: impl FnOnce(*mut MPI_Count) -> Result<(), c_int>,
    ) -> Result<(), c_int> {
        f(position)
    }

    fn size(n: usize) -> Result<MPI_Count, c_int> {
        Ok(n as MPI_Count)
    }
}

/// Defines `MPI_Pack`, `MPI_Unpack` and `MPI_Pack_size` with counts, sizes and positions of
/// type `$t` ([`Form`]).
macro_rules! pack_forms {
    ($pack:ident, $unpack:ident, $size:ident, $t:ty, $what:literal) => {
        mpi_fn! {
            #[doc = concat!("Packs `incount` elements of `datatype` into `outbuf` at `*position`", $what, ".")]
            fn $pack(
                inbuf: *const c_void,
                incount: $t,
                dt: c_int,
                outbuf: *mut c_void,
                outsize: $t,
                position: *mut $t,
                c: c_int,
            ) on c => {
                // SAFETY: the caller's contract.
                unsafe {
                    <$t>::with_position(position, |p| pack(inbuf, incount.into(), dt, outbuf, outsize.into(), p, c))
                }
            }
        }

        mpi_fn! {
            #[doc = concat!("Unpacks `outcount` elements of `datatype` from `inbuf` at `*position`", $what, ".")]
            fn $unpack(
                inbuf: *const c_void,
                insize: $t,
                position: *mut $t,
                outbuf: *mut c_void,
                outcount: $t,
                dt: c_int,
                c: c_int,
            ) on c => {
                // SAFETY: the caller's contract.
                unsafe {
                    <$t>::with_position(position, |p| unpack(inbuf, insize.into(), p, outbuf, outcount.into(), dt, c))
                }
            }
        }

        mpi_fn! {
            #[doc = concat!("The bytes `incount` elements of `datatype` pack into", $what, ".")]
            fn $size(incount: $t, dt: c_int, c: c_int, size: *mut $t) on c => {
                rust_comm(c)?;
                let n = <$t>::size(needed(incount.into(), dt)?)?;
                // SAFETY: the caller's contract.
                unsafe { crate::put(size, n) }
            }
        }
    };
}
pack_forms!(MPI_Pack, MPI_Unpack, MPI_Pack_size, c_int, "");
pack_forms!(MPI_Pack_c, MPI_Unpack_c, MPI_Pack_size_c, MPI_Count, " (large counts)");
