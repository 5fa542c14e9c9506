//! More predefined datatypes: the complex types of C, C++ and Fortran (the library's complex
//! kinds: reductions are complex arithmetic), Fortran's `INTEGER`, `REAL`, `DOUBLE PRECISION`,
//! `LOGICAL`, `CHARACTER` and their sized forms; the parameterized types of Fortran 90
//! (`MPI_Type_create_f90_integer`, `_real`, `_complex`, one datatype per kind, made at first
//! use: their combiner is `MPI_COMBINER_F90_*`, and they are predefined: not to be freed) and
//! `MPI_Type_match_size`; names set on predefined datatypes. `long double` and its complex
//! type are not provided (no kind of the library computes with them).

use crate::consts::*;
use crate::datatypes::{Contents, TypeEntry, DATATYPES};
use p2pmpi::datatype::{Primitive, UserDatatype};
use p2pmpi::ffi;
use p2pmpi::traits::AsRaw;
use parking_lot::Mutex;
use std::os::raw::c_int;
use std::sync::OnceLock;

/// The predefined datatypes of this module: MPICH's handle, name, kind.
const EXTRA: &[(c_int, &str, Primitive)] = &[
    (0x4c00_0840, "MPI_C_FLOAT_COMPLEX", Primitive::C32),
    (0x4c00_1041, "MPI_C_DOUBLE_COMPLEX", Primitive::C64),
    (0x4c00_0834, "MPI_CXX_FLOAT_COMPLEX", Primitive::C32),
    (0x4c00_1035, "MPI_CXX_DOUBLE_COMPLEX", Primitive::C64),
    (0x4c00_081e, "MPI_COMPLEX", Primitive::C32),
    (0x4c00_1022, "MPI_DOUBLE_COMPLEX", Primitive::C64),
    (0x4c00_0828, "MPI_COMPLEX8", Primitive::C32),
    (0x4c00_102a, "MPI_COMPLEX16", Primitive::C64),
    (0x4c00_011a, "MPI_CHARACTER", Primitive::U8),
    (0x4c00_041d, "MPI_LOGICAL", Primitive::I32),
    (0x4c00_041b, "MPI_INTEGER", Primitive::I32),
    (0x4c00_041c, "MPI_REAL", Primitive::F32),
    (0x4c00_081f, "MPI_DOUBLE_PRECISION", Primitive::F64),
    (0x4c00_0427, "MPI_REAL4", Primitive::F32),
    (0x4c00_0829, "MPI_REAL8", Primitive::F64),
    (0x4c00_012d, "MPI_INTEGER1", Primitive::I8),
    (0x4c00_022f, "MPI_INTEGER2", Primitive::I16),
    (0x4c00_0430, "MPI_INTEGER4", Primitive::I32),
    (0x4c00_0831, "MPI_INTEGER8", Primitive::I64),
];

/// The library's datatypes of [`EXTRA`] (made once).
fn layouts() -> &'static [(c_int, UserDatatype)] {
    // Process-wide: predefined datatypes, alive for the whole run.
    static ALL: OnceLock<Vec<(c_int, UserDatatype)>> = OnceLock::new();
    ALL.get_or_init(|| EXTRA.iter().map(|&(h, _, k)| (h, UserDatatype::primitive(k))).collect())
}

/// The library's datatype of one of this module's predefined MPICH datatypes.
pub fn extra(h: c_int) -> Option<ffi::MPI_Datatype> {
    // (MPICH's predefined handles have the kind 1 in bits 30-31: a quick refusal of others.)
    if (h as u32) >> 30 != 1 {
        return None;
    }
    layouts().iter().find(|(k, _)| *k == h).map(|(_, d)| d.as_raw())
}

/// The MPI name of one of this module's predefined datatypes.
pub fn extra_name(h: c_int) -> Option<&'static str> {
    EXTRA.iter().find(|(k, _, _)| *k == h).map(|&(_, n, _)| n)
}

/// Names the program set on predefined datatypes.
// Process-wide, as the datatypes are.
static NAMES: Mutex<Vec<(c_int, String)>> = Mutex::new(Vec::new());

/// The name set on predefined datatype `h`, if any.
pub fn set_name_of(h: c_int) -> Option<String> {
    NAMES.lock().iter().find(|(k, _)| *k == h).map(|(_, n)| n.clone())
}

/// Names predefined datatype `h`.
pub fn set_name(h: c_int, name: String) {
    let mut n = NAMES.lock();
    n.retain(|(k, _)| *k != h);
    n.push((h, name));
}

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
