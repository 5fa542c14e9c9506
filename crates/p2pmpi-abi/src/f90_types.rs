//! The parameterized types of Fortran 90 (`MPI_Type_create_f90_integer`, `_real`, `_complex`,
//! one datatype per kind, made at first use: their combiner is `MPI_COMBINER_F90_*`, and they are
//! predefined: not to be freed) and `MPI_Type_match_size`, on [`crate::more_types`]'s
//! predefined types.

use crate::consts::*;
use crate::datatypes::{Contents, TypeEntry, DATATYPES};
use crate::more_types::EXTRA;
use p2pmpi::datatype::{Primitive, UserDatatype};
use parking_lot::Mutex;
use std::os::raw::c_int;

const MPI_COMBINER_F90_REAL: c_int = 15;
const MPI_COMBINER_F90_COMPLEX: c_int = 16;
const MPI_COMBINER_F90_INTEGER: c_int = 17;
const MPI_TYPECLASS_REAL: c_int = 1;
const MPI_TYPECLASS_INTEGER: c_int = 2;
const MPI_TYPECLASS_COMPLEX: c_int = 3;

/// The Fortran 90 datatypes made so far: (combiner, integers) and their handles.
// Process-wide, as the datatypes are.
static F90: Mutex<Vec<(c_int, Vec<c_int>, c_int)>> = Mutex::new(Vec::new());

/// The Fortran 90 datatype of `combiner` with `ints`, of kind `kind` (made at first use).
///
/// # Safety
/// `out` must be null or valid for a write.
unsafe fn f90(combiner: c_int, ints: Vec<c_int>, kind: Primitive, out: *mut c_int) -> Result<(), c_int> {
    if out.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let mut made = F90.lock();
    // (A program that freed one, which it may not, gets a new one.)
    made.retain(|&(_, _, h)| DATATYPES.with(h, |_| ()).is_some());
    let h = match made.iter().find(|(c, i, _)| *c == combiner && *i == ints) {
        Some(&(_, _, h)) => h,
        None => {
            let contents =
                Some(Box::new(Contents { combiner, ints: ints.clone(), aints: vec![], counts: vec![], types: vec![] }));
            let e = TypeEntry { dt: UserDatatype::primitive(kind), committed: true, contents, name: None };
            let h = DATATYPES.insert(e);
            made.push((combiner, ints, h));
            h
        }
    };
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { out.write(h) };
    Ok(())
}

/// Whether a requested precision or range `x` is at most `most` (`MPI_UNDEFINED`: any).
fn within(x: c_int, most: c_int) -> bool {
    x == MPI_UNDEFINED || (0..=most).contains(&x)
}

/// The real kind of precision `p` and range `r` (IEEE single or double), if any.
fn real_kind(p: c_int, r: c_int) -> Result<bool, c_int> {
    if p == MPI_UNDEFINED && r == MPI_UNDEFINED {
        return Err(MPI_ERR_ARG);
    }
    if within(p, 6) && within(r, 37) {
        Ok(false)
    } else if within(p, 15) && within(r, 307) {
        Ok(true)
    } else {
        Err(MPI_ERR_ARG)
    }
}

mpi_fn! {
    /// The Fortran 90 integer of at least `r` decimal digits.
    fn MPI_Type_create_f90_integer(r: c_int, newtype: *mut c_int) on MPI_COMM_WORLD => {
        let kind = match r {
            0..=2 => Primitive::I8,
            3..=4 => Primitive::I16,
            5..=9 => Primitive::I32,
            10..=18 => Primitive::I64,
            _ => return Err(MPI_ERR_ARG),
        };
        // SAFETY: the caller's contract.
        unsafe { f90(MPI_COMBINER_F90_INTEGER, vec![r], kind, newtype) }
    }
}

mpi_fn! {
    /// The Fortran 90 real of precision `p` and range `r` (either may be `MPI_UNDEFINED`).
    fn MPI_Type_create_f90_real(p: c_int, r: c_int, newtype: *mut c_int) on MPI_COMM_WORLD => {
        let kind = if real_kind(p, r)? { Primitive::F64 } else { Primitive::F32 };
        // SAFETY: the caller's contract.
        unsafe { f90(MPI_COMBINER_F90_REAL, vec![p, r], kind, newtype) }
    }
}

mpi_fn! {
    /// The Fortran 90 complex of precision `p` and range `r` (either may be `MPI_UNDEFINED`).
    fn MPI_Type_create_f90_complex(p: c_int, r: c_int, newtype: *mut c_int) on MPI_COMM_WORLD => {
        let kind = if real_kind(p, r)? { Primitive::C64 } else { Primitive::C32 };
        // SAFETY: the caller's contract.
        unsafe { f90(MPI_COMBINER_F90_COMPLEX, vec![p, r], kind, newtype) }
    }
}

mpi_fn! {
    /// The predefined Fortran datatype of class `typeclass` (`MPI_TYPECLASS_REAL`,
    /// `_INTEGER`, `_COMPLEX`) and `size` bytes (`MPI_ERR_ARG` if there is none).
    fn MPI_Type_match_size(typeclass: c_int, size: c_int, datatype: *mut c_int) on MPI_COMM_WORLD => {
        let name = match (typeclass, size) {
            (MPI_TYPECLASS_REAL, 4) => "MPI_REAL4",
            (MPI_TYPECLASS_REAL, 8) => "MPI_REAL8",
            (MPI_TYPECLASS_INTEGER, 1) => "MPI_INTEGER1",
            (MPI_TYPECLASS_INTEGER, 2) => "MPI_INTEGER2",
            (MPI_TYPECLASS_INTEGER, 4) => "MPI_INTEGER4",
            (MPI_TYPECLASS_INTEGER, 8) => "MPI_INTEGER8",
            (MPI_TYPECLASS_COMPLEX, 8) => "MPI_COMPLEX8",
            (MPI_TYPECLASS_COMPLEX, 16) => "MPI_COMPLEX16",
            _ => return Err(MPI_ERR_ARG),
        };
        let h = EXTRA.iter().find(|(_, n, _)| *n == name).map(|&(h, _, _)| h).ok_or(MPI_ERR_ARG)?;
        // SAFETY: the caller's contract.
        unsafe { crate::put(datatype, h) }
    }
}
