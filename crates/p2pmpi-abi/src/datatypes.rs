//! The predefined datatypes: MPICH's handle of each, and the library's datatype it stands for
//! (a Rust type of the same size and kind), with `MPI_Type_size`, `MPI_Type_get_extent`,
//! `MPI_Type_get_true_extent` (and their `_c` forms); and the table of the datatypes the
//! program makes ([`crate::derived`]).

use crate::consts::{
    MPI_COMM_WORLD, MPI_DATATYPE_NULL, MPI_ERR_TYPE, MPI_ERR_UNSUPPORTED_OPERATION, MPI_ERR_VALUE_TOO_LARGE,
};
use crate::handles::{object, Slab};
use p2pmpi::datatype::{DatatypeRef, Primitive, UserDatatype};
use p2pmpi::ffi;
use p2pmpi::traits::{AsRaw, Equivalence};
use p2pmpi::traits::{FromRaw, UncommittedDatatype};
use std::os::raw::{c_int, c_long};

/// `MPI_Aint`.
pub type MPI_Aint = c_long;
/// `MPI_Count`.
pub type MPI_Count = c_long;

/// Makes the table of predefined datatypes: a constant per name (module [`values`]), the
/// translation [`builtin`], and the list [`PREDEFINED`].
macro_rules! predefined_datatypes {
    ($($name:ident = $bits:expr => $t:ty;)*) => {
        /// MPICH's handles of the predefined datatypes.
        pub mod values {
            use std::os::raw::c_int;
            $(pub const $name: c_int = $bits as u32 as c_int;)*
        }

        /// The library's datatype of a predefined MPICH datatype, `None` for another handle.
        #[inline]
        pub fn builtin(h: c_int) -> Option<ffi::MPI_Datatype> {
            match h {
                $(values::$name => Some(<$t as Equivalence>::equivalent_datatype().as_raw()),)*
                _ => None,
            }
        }

        /// Every predefined datatype: its name, its handle and the size of its Rust type.
        pub const PREDEFINED: &[(&str, c_int, usize)] =
            &[$((stringify!($name), values::$name, std::mem::size_of::<$t>())),*];
    };
}

// `long`, `MPI_Aint`, `MPI_Offset` and `MPI_Count` have 64 bits and `wchar_t` is a signed
// 32-bit integer on the 64-bit Linux targets this library is built for.
predefined_datatypes! {
    MPI_CHAR = 0x4c00_0101 => i8;
    MPI_SIGNED_CHAR = 0x4c00_0118 => i8;
    MPI_UNSIGNED_CHAR = 0x4c00_0102 => u8;
    MPI_BYTE = 0x4c00_010d => u8;
    MPI_WCHAR = 0x4c00_040e => i32;
    MPI_SHORT = 0x4c00_0203 => i16;
    MPI_UNSIGNED_SHORT = 0x4c00_0204 => u16;
    MPI_INT = 0x4c00_0405 => i32;
    MPI_UNSIGNED = 0x4c00_0406 => u32;
    MPI_LONG = 0x4c00_0807 => i64;
    MPI_UNSIGNED_LONG = 0x4c00_0808 => u64;
    MPI_FLOAT = 0x4c00_040a => f32;
    MPI_DOUBLE = 0x4c00_080b => f64;
    MPI_LONG_LONG_INT = 0x4c00_0809 => i64;
    MPI_UNSIGNED_LONG_LONG = 0x4c00_0819 => u64;
    MPI_PACKED = 0x4c00_010f => u8;
    MPI_INT8_T = 0x4c00_0137 => i8;
    MPI_INT16_T = 0x4c00_0238 => i16;
    MPI_INT32_T = 0x4c00_0439 => i32;
    MPI_INT64_T = 0x4c00_083a => i64;
    MPI_UINT8_T = 0x4c00_013b => u8;
    MPI_UINT16_T = 0x4c00_023c => u16;
    MPI_UINT32_T = 0x4c00_043d => u32;
    MPI_UINT64_T = 0x4c00_083e => u64;
    MPI_C_BOOL = 0x4c00_013f => bool;
    MPI_CXX_BOOL = 0x4c00_0133 => bool;
    MPI_AINT = 0x4c00_0843 => i64;
    MPI_OFFSET = 0x4c00_0844 => i64;
    MPI_COUNT = 0x4c00_0845 => i64;
}

/// A datatype the program made ([`crate::derived`]): the library's, and whether it was
/// committed.
pub struct TypeEntry {
    pub dt: UserDatatype,
    pub committed: bool,
    /// How it was made (`MPI_Type_get_envelope`, `MPI_Type_get_contents`).
    pub contents: Option<Box<Contents>>,
    /// Its name (`MPI_Type_set_name`).
    pub name: Option<String>,
}

/// The arguments a datatype was made with: the combiner (`MPI_COMBINER_...`), the integers,
/// the addresses and the datatypes (a predefined one by its handle, another by its layout
/// and its own contents, since the program may free it).
#[derive(Clone)]
pub struct Contents {
    pub combiner: c_int,
    pub ints: Vec<c_int>,
    pub aints: Vec<MPI_Aint>,
    /// The large counts (`MPI_Type_get_contents_c`'s), of a datatype made with a count
    /// beyond an `int`'s range.
    pub counts: Vec<MPI_Count>,
    pub types: Vec<Inner>,
}

/// A datatype inside another's contents: its handle, and unless predefined its layout and
/// its own contents.
pub type Inner = (c_int, Option<(UserDatatype, Option<Box<Contents>>)>);

/// The datatypes the program made (handles of kind 3: MPICH's pair types below have kind 2).
// Process-wide because a C handle is a plain integer any thread may hand to any function.
pub static DATATYPES: Slab<TypeEntry> = Slab::with_kind(3, object::DATATYPE);

/// MPICH's handles of the (value, index) pairs of `MPI_MINLOC` and `MPI_MAXLOC`.
pub mod pairs {
    use std::os::raw::c_int;
    pub const MPI_2INT: c_int = 0x4c00_0816;
    pub const MPI_FLOAT_INT: c_int = 0x8c00_0000_u32 as c_int;
    pub const MPI_DOUBLE_INT: c_int = 0x8c00_0001_u32 as c_int;
    pub const MPI_LONG_INT: c_int = 0x8c00_0002_u32 as c_int;
    pub const MPI_SHORT_INT: c_int = 0x8c00_0003_u32 as c_int;
    pub const MPI_LONG_DOUBLE_INT: c_int = 0x8c00_0004_u32 as c_int;
}

/// The pair types, laid out as C's structures `{ value; int }` (made once).
fn pair(h: c_int) -> Option<ffi::MPI_Datatype> {
    use pairs::*;
    // Process-wide: predefined datatypes, alive for the whole run.
    static PAIRS: std::sync::OnceLock<Vec<(c_int, UserDatatype)>> = std::sync::OnceLock::new();
    let all = PAIRS.get_or_init(|| {
        fn of<V: Equivalence<Out = DatatypeRef<'static>>>() -> UserDatatype {
            // The index follows the value at the next multiple of an int's alignment.
            let at = std::mem::size_of::<V>().next_multiple_of(std::mem::align_of::<c_int>()) as isize;
            let (v, i) = (V::equivalent_datatype(), c_int::equivalent_datatype());
            UserDatatype::structured(&[1, 1], &[0, at], &[v, i])
        }
        vec![
            (MPI_2INT, of::<c_int>()),
            (MPI_FLOAT_INT, of::<f32>()),
            (MPI_DOUBLE_INT, of::<f64>()),
            (MPI_LONG_INT, of::<i64>()),
            (MPI_SHORT_INT, of::<i16>()),
            (MPI_LONG_DOUBLE_INT, {
                // `{ long double; int }`: the index at 16, the extent 32 (a long double's
                // alignment).
                let (v, i) = (UserDatatype::primitive(Primitive::F80), c_int::equivalent_datatype());
                UserDatatype::structured(&[1, 1], &[0, 16], &[v.as_ref(), i])
            }),
        ]
    });
    all.iter().find(|(k, _)| *k == h).map(|(_, d)| d.as_raw())
}

/// The MPI name of a predefined datatype (pairs included).
pub fn predefined_name(h: c_int) -> Option<&'static str> {
    use pairs::*;
    let pair = [
        (MPI_2INT, "MPI_2INT"),
        (MPI_FLOAT_INT, "MPI_FLOAT_INT"),
        (MPI_DOUBLE_INT, "MPI_DOUBLE_INT"),
        (MPI_LONG_INT, "MPI_LONG_INT"),
        (MPI_SHORT_INT, "MPI_SHORT_INT"),
        (MPI_LONG_DOUBLE_INT, "MPI_LONG_DOUBLE_INT"),
    ];
    PREDEFINED
        .iter()
        .map(|&(n, k, _)| (k, n))
        .chain(pair)
        .find(|(k, _)| *k == h)
        .map(|(_, n)| n)
        .or_else(|| crate::more_types::extra_name(h))
}

/// The library's datatype of a predefined MPICH datatype (pairs included).
pub fn predefined(h: c_int) -> Option<ffi::MPI_Datatype> {
    builtin(h).or_else(|| pair(h)).or_else(|| crate::more_types::extra(h))
}

/// The library's datatype of MPICH datatype `h`, committed or not (for the constructors and
/// the queries), or `MPI_ERR_TYPE`.
pub fn any_datatype(h: c_int) -> Result<ffi::MPI_Datatype, c_int> {
    match predefined(h) {
        Some(d) => Ok(d),
        None => DATATYPES.with(h, |e| e.dt.as_raw()).ok_or(MPI_ERR_TYPE),
    }
}

/// The library's datatype of MPICH datatype `h` for communication: predefined or committed,
/// else `MPI_ERR_TYPE`.
#[inline]
pub fn datatype(h: c_int) -> Result<ffi::MPI_Datatype, c_int> {
    if h == MPI_DATATYPE_NULL {
        return Err(MPI_ERR_TYPE);
    }
    match builtin(h) {
        Some(d) => Ok(d),
        None => match DATATYPES.with(h, |e| e.committed.then(|| e.dt.as_raw())) {
            Some(d) => d.ok_or(MPI_ERR_TYPE),
            None => pair(h).or_else(|| crate::more_types::extra(h)).ok_or(MPI_ERR_TYPE),
        },
    }
}

/// The number of bytes of one element of `dt` when its data is one run from its start
/// (what an `MPI_IN_PLACE` input is copied by); `MPI_ERR_UNSUPPORTED_OPERATION` for a
/// datatype with holes or another lower bound, not yet copied in place.
pub fn stageable(dt: c_int) -> Result<usize, c_int> {
    let d = any_datatype(dt)?;
    // SAFETY: `d` names a live datatype, read during this call only.
    let r = unsafe { DatatypeRef::from_raw(d) };
    let m = r.type_map();
    if m.is_contiguous() && m.lb() == 0 && m.extent() == m.size() as isize {
        Ok(m.size())
    } else {
        Err(MPI_ERR_UNSUPPORTED_OPERATION)
    }
}

/// The library's datatype of MPICH datatype `h` as a Rust datatype reference, or
/// `MPI_ERR_TYPE`.
pub fn datatype_ref(h: c_int) -> Result<p2pmpi::datatype::DatatypeRef<'static>, c_int> {
    let d = datatype(h)?;
    // SAFETY: `d` names a predefined datatype, which lives for the whole run.
    Ok(unsafe { <p2pmpi::datatype::DatatypeRef<'static> as p2pmpi::traits::FromRaw>::from_raw(d) })
}

/// The size in bytes of one element of datatype `h`.
pub fn size_of(h: c_int) -> Result<usize, c_int> {
    let d = any_datatype(h)?;
    // SAFETY: `d` names a live datatype, read during this call only (its size may exceed an
    // `int`'s range).
    Ok(unsafe { DatatypeRef::from_raw(d) }.type_map().size())
}

/// Writes `v` at `out` (`MPI_ERR_ARG` for a null pointer).
///
/// # Safety
/// `out` must be null or valid for a write.
unsafe fn put<T>(out: *mut T, v: T) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    unsafe { crate::put(out, v) }
}

mpi_fn! {
    /// The number of data bytes in one element of `datatype`.
    fn MPI_Type_size(dt: c_int, size: *mut c_int) on MPI_COMM_WORLD => {
        let n = c_int::try_from(size_of(dt)?).unwrap_or(crate::consts::MPI_UNDEFINED);
        // SAFETY: the caller's contract.
        unsafe { put(size, n) }
    }
}

mpi_fn! {
    /// `MPI_Type_size` with a large count.
    fn MPI_Type_size_c(dt: c_int, size: *mut MPI_Count) on MPI_COMM_WORLD => {
        let n = size_of(dt)?;
        // SAFETY: the caller's contract.
        unsafe { put(size, n as MPI_Count) }
    }
}

/// The lower bound and extent of `dt` (`true_`: of its data only).
fn extent(dt: c_int, true_: bool) -> Result<(MPI_Count, MPI_Count), c_int> {
    let d = any_datatype(dt)?;
    // SAFETY: `d` names a live datatype, read during this call only.
    let r = unsafe { DatatypeRef::from_raw(d) };
    let m = r.type_map();
    if !true_ {
        return Ok((m.lb() as MPI_Count, m.extent() as MPI_Count));
    }
    let lo = m.blocks().iter().map(|b| b.offset).min().unwrap_or(0);
    let hi = m.blocks().iter().map(|b| b.offset + b.len as isize).max().unwrap_or(0);
    Ok((lo as MPI_Count, (hi - lo) as MPI_Count))
}

/// Writes a lower bound and an extent.
///
/// # Safety
/// Both pointers must be null or valid for a write.
unsafe fn put_extent<T: TryFrom<MPI_Count>>(dt: c_int, lb: *mut T, ext: *mut T, true_: bool) -> Result<(), c_int> {
    let (l, e) = extent(dt, true_)?;
    let (Ok(l), Ok(e)) = (T::try_from(l), T::try_from(e)) else { return Err(MPI_ERR_VALUE_TOO_LARGE) };
    // SAFETY: the caller's contract.
    unsafe {
        put(lb, l)?;
        put(ext, e)
    }
}

mpi_fn! {
    /// The lower bound and the extent of `datatype`.
    fn MPI_Type_get_extent(dt: c_int, lb: *mut MPI_Aint, ext: *mut MPI_Aint) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { put_extent(dt, lb, ext, false) }
    }
}

mpi_fn! {
    /// `MPI_Type_get_extent` with large counts.
    fn MPI_Type_get_extent_c(dt: c_int, lb: *mut MPI_Count, ext: *mut MPI_Count) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { put_extent(dt, lb, ext, false) }
    }
}

mpi_fn! {
    /// The lower bound and the extent of the data of `datatype`.
    fn MPI_Type_get_true_extent(dt: c_int, lb: *mut MPI_Aint, ext: *mut MPI_Aint) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { put_extent(dt, lb, ext, true) }
    }
}

mpi_fn! {
    /// `MPI_Type_get_true_extent` with large counts.
    fn MPI_Type_get_true_extent_c(dt: c_int, lb: *mut MPI_Count, ext: *mut MPI_Count) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { put_extent(dt, lb, ext, true) }
    }
}

mpi_fn! {
    /// MPI-3's name of `MPI_Type_size_c`.
    fn MPI_Type_size_x(dt: c_int, size: *mut MPI_Count) on MPI_COMM_WORLD => {
        let n = size_of(dt)?;
        // SAFETY: the caller's contract.
        unsafe { put(size, n as MPI_Count) }
    }
}

mpi_fn! {
    /// MPI-3's name of `MPI_Type_get_extent_c`.
    fn MPI_Type_get_extent_x(dt: c_int, lb: *mut MPI_Count, ext: *mut MPI_Count) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { put_extent(dt, lb, ext, false) }
    }
}

mpi_fn! {
    /// MPI-3's name of `MPI_Type_get_true_extent_c`.
    fn MPI_Type_get_true_extent_x(dt: c_int, lb: *mut MPI_Count, ext: *mut MPI_Count) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { put_extent(dt, lb, ext, true) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_predefined_datatype_has_the_size_its_handle_says() {
        for &(name, h, size) in PREDEFINED {
            assert_eq!((h as u32 >> 8) & 0xff, size as u32, "{name}");
            assert_eq!(size_of(h), Ok(size), "{name}");
            assert_eq!(crate::handles::object_of(h), crate::handles::object::DATATYPE, "{name}");
        }
    }

    #[test]
    fn the_pair_types_are_laid_out_as_cs_structures_and_apart_from_the_programs_handles() {
        use pairs::*;
        for (h, size, extent) in [
            (MPI_2INT, 8, 8),
            (MPI_FLOAT_INT, 8, 8),
            (MPI_DOUBLE_INT, 12, 16),
            (MPI_LONG_INT, 12, 16),
            (MPI_SHORT_INT, 6, 8),
        ] {
            assert_eq!(size_of(h), Ok(size), "{h:#x}");
            // SAFETY: a predefined datatype, read here only.
            let r = unsafe { DatatypeRef::from_raw(predefined(h).unwrap()) };
            assert_eq!(r.type_map().extent(), extent, "{h:#x}");
            assert!(DATATYPES.with(h, |_| ()).is_none());
        }
        let mine = DATATYPES.insert(TypeEntry {
            dt: UserDatatype::contiguous(1, &i32::equivalent_datatype()),
            committed: true,
            contents: None,
            name: None,
        });
        assert!(![MPI_FLOAT_INT, MPI_DOUBLE_INT, MPI_LONG_INT, MPI_SHORT_INT].contains(&mine));
        assert!(datatype(mine).is_ok());
        assert_eq!(size_of(mine), Ok(4));
        DATATYPES.take(mine);
    }

    #[test]
    fn the_null_datatype_and_unknown_handles_are_errors() {
        assert_eq!(datatype(MPI_DATATYPE_NULL).err(), Some(MPI_ERR_TYPE));
        assert_eq!(datatype(0x4c00_1234).err(), Some(MPI_ERR_TYPE));
        assert_eq!(datatype(crate::consts::MPI_COMM_WORLD).err(), Some(MPI_ERR_TYPE));
    }
}
