//! More predefined datatypes: the complex types of C, C++ and Fortran (the library's complex
//! kinds: reductions are complex arithmetic), Fortran's `INTEGER`, `REAL`, `DOUBLE PRECISION`,
//! `LOGICAL`, `CHARACTER` and their sized forms; names set on predefined datatypes. Below
//! [`crate::datatypes`], which finds them here; the parameterized types of Fortran 90 are
//! [`crate::f90_types`]'s. C's `long double` and its complex types are x87's 80-bit floats in
//! 16 bytes (the library's kinds `F80` and `C80`, reduced in 80-bit precision on x86_64).

use p2pmpi::datatype::{Primitive, UserDatatype};
use p2pmpi::ffi;
use p2pmpi::traits::AsRaw;
use parking_lot::Mutex;
use std::os::raw::c_int;
use std::sync::OnceLock;

/// The predefined datatypes of this module: MPICH's handle, name, kind.
pub(crate) const EXTRA: &[(c_int, &str, Primitive)] = &[
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
    (0x4c00_100c, "MPI_LONG_DOUBLE", Primitive::F80),
    (0x4c00_2042, "MPI_C_LONG_DOUBLE_COMPLEX", Primitive::C80),
    (0x4c00_2036, "MPI_CXX_LONG_DOUBLE_COMPLEX", Primitive::C80),
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
