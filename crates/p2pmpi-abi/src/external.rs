//! `MPI_Pack_external`, `MPI_Unpack_external`, `MPI_Pack_external_size` (and `_c`) for the
//! data representation `"external32"`: the packed bytes of [`crate::pack`] with every value
//! big-endian (a complex number's two parts each), at each kind's own size.

use crate::consts::*;
use crate::datatypes::{datatype_ref, MPI_Aint, MPI_Count};
use p2pmpi::datatype::Primitive;
use p2pmpi::traits::UncommittedDatatype;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

/// Checks that `datarep` is `"external32"` (`MPI_ERR_ARG` otherwise).
///
/// # Safety
/// `datarep` must be null or a C string.
unsafe fn external32(datarep: *const c_char) -> Result<(), c_int> {
    if datarep.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: the caller's contract.
    match unsafe { CStr::from_ptr(datarep) }.to_bytes() {
        b"external32" => Ok(()),
        _ => Err(MPI_ERR_ARG),
    }
}

/// The size of the units a value of `kind` is swapped by.
fn unit(kind: Primitive) -> usize {
    match kind {
        Primitive::C32 => 4,
        Primitive::C64 => 8,
        // (`long double` in its own x87 format, each part's 16 bytes reversed: no conversion
        // to external32's 128-bit float, which MPI names for it.)
        Primitive::C80 => 16,
        k => k.size(),
    }
}

/// Turns `count` packed elements of `dt` at the start of `bytes` from this machine's order to
/// big-endian, or back (the same swap).
fn swap(bytes: &mut [u8], count: usize, dt: c_int) -> Result<(), c_int> {
    if cfg!(target_endian = "big") {
        return Ok(());
    }
    let r = datatype_ref(dt)?;
    let blocks = r.type_map().blocks();
    let mut at = 0;
    for _ in 0..count {
        for b in blocks {
            let u = unit(b.kind);
            let end = at + b.len;
            if end > bytes.len() {
                return Err(MPI_ERR_TRUNCATE);
            }
            if u > 1 {
                bytes[at..end].chunks_exact_mut(u).for_each(<[u8]>::reverse);
            }
            at = end;
        }
    }
    Ok(())
}

/// `MPI_Pack_external_c`.
///
/// # Safety
/// As `MPI_Pack_external` says.
unsafe fn pack(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: MPI_Count,
    dt: c_int,
    outbuf: *mut c_void,
    outsize: MPI_Count,
    position: *mut MPI_Count,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    unsafe { external32(datarep) }?;
    if position.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: checked non-null; the caller vouches it is readable.
    let start = unsafe { position.read() };
    // SAFETY: the caller's contract.
    unsafe { crate::pack::pack(inbuf, incount, dt, outbuf, outsize, position, MPI_COMM_SELF) }?;
    // SAFETY: as above.
    let end = unsafe { position.read() };
    if end > start {
        // SAFETY: the bytes just packed, inside the caller's `outsize` bytes at `outbuf`.
        let packed =
            unsafe { std::slice::from_raw_parts_mut((outbuf as *mut u8).add(start as usize), (end - start) as usize) };
        swap(packed, incount as usize, dt)?;
    }
    Ok(())
}

/// `MPI_Unpack_external_c`.
///
/// # Safety
/// As `MPI_Unpack_external` says.
unsafe fn unpack(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: MPI_Count,
    position: *mut MPI_Count,
    outbuf: *mut c_void,
    outcount: MPI_Count,
    dt: c_int,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    unsafe { external32(datarep) }?;
    if position.is_null() || insize < 0 || outcount < 0 {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: checked non-null; the caller vouches it is readable.
    let start = unsafe { position.read() };
    let need = crate::pack::needed(outcount, dt)?;
    if start < 0 || start as usize + need > insize as usize {
        return Err(MPI_ERR_TRUNCATE);
    }
    // The input is the caller's (read-only): swapped in a copy.
    let mut copy = vec![0u8; need];
    if need > 0 {
        // SAFETY: `need` bytes from `start`, inside the caller's `insize` bytes at `inbuf`.
        unsafe { std::ptr::copy_nonoverlapping((inbuf as *const u8).add(start as usize), copy.as_mut_ptr(), need) };
    }
    swap(&mut copy, outcount as usize, dt)?;
    let mut p: MPI_Count = 0;
    let input = copy.as_ptr() as *const c_void;
    // SAFETY: the copy holds `need` bytes; the caller vouches for `outbuf`.
    unsafe { crate::pack::unpack(input, need as MPI_Count, &mut p, outbuf, outcount, dt, MPI_COMM_SELF) }?;
    // SAFETY: checked non-null above.
    unsafe { position.write(start + p) };
    Ok(())
}

/// The bytes `count` elements of `dt` take in `datarep`.
///
/// # Safety
/// `datarep` must be null or a C string.
unsafe fn size(datarep: *const c_char, count: MPI_Count, dt: c_int) -> Result<MPI_Count, c_int> {
    // SAFETY: the caller's contract.
    unsafe { external32(datarep) }?;
    Ok(crate::pack::needed(count, dt)? as MPI_Count)
}

/// Defines `MPI_Pack_external`, `MPI_Unpack_external` and `MPI_Pack_external_size` with counts
/// of type `$t` (`MPI_Count` in the `_c` forms; sizes and positions are `MPI_Aint`s, which are
/// `MPI_Count`s).
macro_rules! external_forms {
    ($pack:ident, $unpack:ident, $size:ident, $t:ty, $what:literal) => {
        mpi_fn! {
            #[doc = concat!("Packs `incount` elements of `dt` into `outbuf` at `*position` in `datarep` \
(`\"external32\"`)", $what, ".")]
            fn $pack(
                datarep: *const c_char,
                inbuf: *const c_void,
                incount: $t,
                dt: c_int,
                outbuf: *mut c_void,
                outsize: MPI_Aint,
                position: *mut MPI_Aint,
            ) on MPI_COMM_WORLD => {
                // SAFETY: the caller's contract.
                unsafe { pack(datarep, inbuf, MPI_Count::from(incount), dt, outbuf, outsize, position) }
            }
        }

        mpi_fn! {
            #[doc = concat!("Unpacks `outcount` elements of `dt` from `inbuf` at `*position` in `datarep` \
(`\"external32\"`)", $what, ".")]
            fn $unpack(
                datarep: *const c_char,
                inbuf: *const c_void,
                insize: MPI_Aint,
                position: *mut MPI_Aint,
                outbuf: *mut c_void,
                outcount: $t,
                dt: c_int,
            ) on MPI_COMM_WORLD => {
                // SAFETY: the caller's contract.
                unsafe { unpack(datarep, inbuf, insize, position, outbuf, MPI_Count::from(outcount), dt) }
            }
        }

        mpi_fn! {
            #[doc = concat!("The bytes `incount` elements of `dt` take in `datarep` (`\"external32\"`)", $what, ".")]
            fn $size(datarep: *const c_char, incount: $t, dt: c_int, out: *mut MPI_Aint) on MPI_COMM_WORLD => {
                // SAFETY: the caller's contract.
                let n = unsafe { size(datarep, MPI_Count::from(incount), dt) }?;
                // SAFETY: the caller's contract.
                unsafe { crate::put(out, n) }
            }
        }
    };
}
external_forms!(MPI_Pack_external, MPI_Unpack_external, MPI_Pack_external_size, c_int, "");
external_forms!(MPI_Pack_external_c, MPI_Unpack_external_c, MPI_Pack_external_size_c, MPI_Count, " (large counts)");
