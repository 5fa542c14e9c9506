//! Derived datatypes: `MPI_Type_contiguous`, `MPI_Type_vector`, `MPI_Type_create_hvector`,
//! `MPI_Type_indexed`, `MPI_Type_create_hindexed`, `MPI_Type_create_indexed_block`,
//! `MPI_Type_create_hindexed_block`, `MPI_Type_create_struct`, `MPI_Type_create_resized`,
//! `MPI_Type_create_subarray`, `MPI_Type_dup`, `MPI_Type_commit`,
//! `MPI_Type_free` (and MPI-1's `MPI_Type_hvector`, `MPI_Type_hindexed`, `MPI_Type_struct`),
//! on the Rust API's [`UserDatatype`] constructors; their decoding
//! (`MPI_Type_get_envelope`, `MPI_Type_get_contents`) and names (`MPI_Type_set_name`,
//! `MPI_Type_get_name`).
//!
//! A datatype is usable in communication once committed (`MPI_ERR_TYPE` before). A freed
//! datatype's layout is kept for the rest of the run (a pending operation may still use it,
//! as MPI allows), only its handle goes.

use crate::consts::*;
use crate::datatypes::{any_datatype, Contents, Inner, TypeEntry, DATATYPES};
use crate::datatypes::{MPI_Aint, MPI_Count};
use p2pmpi::datatype::{DatatypeRef, UserDatatype};
use p2pmpi::traits::{FromRaw, UncommittedDatatype};
use parking_lot::Mutex;
use std::os::raw::c_int;

const MPI_COMBINER_NAMED: c_int = 1;
const MPI_COMBINER_DUP: c_int = 2;
const MPI_COMBINER_CONTIGUOUS: c_int = 3;
const MPI_COMBINER_VECTOR: c_int = 4;
const MPI_COMBINER_HVECTOR: c_int = 6;
const MPI_COMBINER_INDEXED: c_int = 7;
const MPI_COMBINER_HINDEXED: c_int = 9;
const MPI_COMBINER_INDEXED_BLOCK: c_int = 10;
const MPI_COMBINER_STRUCT: c_int = 12;
const MPI_COMBINER_SUBARRAY: c_int = 13;
const MPI_COMBINER_RESIZED: c_int = 18;
const MPI_COMBINER_HINDEXED_BLOCK: c_int = 19;

/// The layouts of freed datatypes (see the module's comment).
// Process-wide, as the datatypes' handles are.
static RETIRED: Mutex<Vec<UserDatatype>> = Mutex::new(Vec::new());

/// The datatype of handle `h` (committed or not), borrowed for a constructor.
pub(crate) fn old(h: c_int) -> Result<DatatypeRef<'static>, c_int> {
    let d = any_datatype(h)?;
    // SAFETY: `d` names a live datatype; the reference is used during this call only (the
    // `'static` is not kept: a constructor copies the layout).
    Ok(unsafe { DatatypeRef::from_raw(d) })
}

/// Datatype `h` as an inner datatype of a constructor.
fn inner(h: c_int) -> Result<Inner, c_int> {
    if crate::datatypes::predefined(h).is_some() {
        return Ok((h, None));
    }
    let t = DATATYPES.with(h, |e| (e.dt.clone(), e.contents.clone())).ok_or(MPI_ERR_TYPE)?;
    Ok((h, Some(t)))
}

/// The contents of a datatype made by `combiner` from `ints`, `aints` and `types`.
pub(crate) fn contents(
    combiner: c_int,
    ints: Vec<c_int>,
    aints: Vec<MPI_Aint>,
    types: &[c_int],
) -> Result<Contents, c_int> {
    let types = types.iter().map(|&t| inner(t)).collect::<Result<_, _>>()?;
    Ok(Contents { combiner, ints, aints, counts: vec![], types })
}

/// Stores a new, uncommitted datatype made as `how` says; its handle written at `out`.
///
/// # Safety
/// `out` must be null or valid for a write.
pub(crate) unsafe fn made(out: *mut c_int, dt: UserDatatype, how: Contents) -> Result<(), c_int> {
    if out.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let h = DATATYPES.insert(TypeEntry { dt, committed: false, contents: Some(Box::new(how)), name: None });
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { out.write(h) };
    Ok(())
}

/// `n` values at `p` (none if `n` is 0), converted.
///
/// # Safety
/// `p` must be valid for `n` reads.
pub(crate) unsafe fn array<T: Copy, U: TryFrom<T>>(p: *const T, n: c_int) -> Result<Vec<U>, c_int> {
    if n < 0 {
        return Err(MPI_ERR_COUNT);
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: non-null, and the caller vouches for `n` values.
    let s = unsafe { std::slice::from_raw_parts(p, n as usize) };
    s.iter().map(|&x| U::try_from(x).map_err(|_| MPI_ERR_ARG)).collect()
}

/// The most data blocks a datatype may be built from. The library lays a datatype out block
/// by block (one per element of each part, merged afterwards), so a constructor of more would
/// take memory without bound (`MPI_Type_contiguous(INT_MAX, MPI_BYTE)`: billions of blocks);
/// it is refused with `MPI_ERR_UNSUPPORTED_OPERATION` instead.
const MAX_BLOCKS: u128 = 1 << 22;

/// Checks that the parts of a new datatype (repetitions of a datatype, by handle) make at
/// most [`MAX_BLOCKS`] blocks.
pub(crate) fn within(parts: &[(u128, c_int)]) -> Result<(), c_int> {
    let mut total: u128 = 0;
    for &(reps, h) in parts {
        let blocks = old(h)?.type_map().blocks().len().max(1) as u128;
        total = total.saturating_add(reps.saturating_mul(blocks));
    }
    if total > MAX_BLOCKS {
        Err(MPI_ERR_UNSUPPORTED_OPERATION)
    } else {
        Ok(())
    }
}

/// Whether datatype `h` is one run of data filling its extent: copies of it, one after the
/// other, are one run too (one block, however many: `MPI_Type_contiguous(INT_MAX, MPI_BYTE)`).
fn one_run(h: c_int) -> Result<bool, c_int> {
    let o = old(h)?;
    let m = o.type_map();
    Ok(matches!(m.blocks(), [b] if b.offset == m.lb() && b.len as isize == m.extent()))
}

/// `MPI_Type_contiguous_c`: beyond an `int`'s range, for a datatype of one run only (as
/// copies of copies; the count recorded as a large count).
///
/// # Safety
/// `newtype` must be null or valid for a write.
pub(crate) unsafe fn contiguous_c(n: MPI_Count, oldtype: c_int, newtype: *mut c_int) -> Result<(), c_int> {
    if let Ok(small) = c_int::try_from(n) {
        // SAFETY: the caller's contract.
        return crate::ok(unsafe { MPI_Type_contiguous(small, oldtype, newtype) });
    }
    if n < 0 {
        return Err(MPI_ERR_COUNT);
    }
    if !one_run(oldtype)? {
        return Err(MPI_ERR_UNSUPPORTED_OPERATION);
    }
    const PIECE: MPI_Count = 1 << 30;
    let o = old(oldtype)?;
    let (q, r) = (c_int::try_from(n / PIECE).map_err(|_| MPI_ERR_COUNT)?, (n % PIECE) as c_int);
    let big = UserDatatype::contiguous(q, &UserDatatype::contiguous(PIECE as c_int, &o));
    let t = if r == 0 {
        big
    } else {
        let at = (n - MPI_Count::from(r)) as isize * o.type_map().extent();
        UserDatatype::structured(&[1, 1], &[0, at], &[big, UserDatatype::contiguous(r, &o)])
    };
    let mut how = contents(MPI_COMBINER_CONTIGUOUS, vec![], vec![], &[oldtype])?;
    how.counts = vec![n];
    // SAFETY: the caller's contract.
    unsafe { made(newtype, t, how) }
}

/// The large counts datatype `h` was made with (none for most).
pub(crate) fn large_counts(h: c_int) -> Vec<MPI_Count> {
    DATATYPES.with(h, |e| e.contents.as_ref().map(|k| k.counts.clone())).flatten().unwrap_or_default()
}

/// The sum of `v`'s entries as repetitions (negative ones count 0).
fn total(v: &[c_int]) -> u128 {
    v.iter().map(|&x| x.max(0) as u128).sum()
}

/// A count argument.
fn count(n: c_int) -> Result<c_int, c_int> {
    if n < 0 {
        Err(MPI_ERR_COUNT)
    } else {
        Ok(n)
    }
}

mpi_fn! {
    /// `count` copies of `oldtype`, one after the other.
    fn MPI_Type_contiguous(n: c_int, oldtype: c_int, newtype: *mut c_int) on MPI_COMM_WORLD => {
        if !one_run(oldtype)? {
            within(&[(count(n)? as u128, oldtype)])?;
        }
        let t = UserDatatype::contiguous(count(n)?, &old(oldtype)?);
        let how = contents(MPI_COMBINER_CONTIGUOUS, vec![n], vec![], &[oldtype])?;
        // SAFETY: the caller's contract.
        unsafe { made(newtype, t, how) }
    }
}

mpi_fn! {
    /// `count` blocks of `blocklength` elements, `stride` elements apart.
    fn MPI_Type_vector(n: c_int, blocklength: c_int, stride: c_int, oldtype: c_int, newtype: *mut c_int)
        on MPI_COMM_WORLD => {
        within(&[(count(n)? as u128 * count(blocklength)? as u128, oldtype)])?;
        let t = UserDatatype::vector(count(n)?, count(blocklength)?, stride, &old(oldtype)?);
        let how = contents(MPI_COMBINER_VECTOR, vec![n, blocklength, stride], vec![], &[oldtype])?;
        // SAFETY: the caller's contract.
        unsafe { made(newtype, t, how) }
    }
}

/// Defines a datatype constructor under its name and MPI-1's (`MPI_Type_hvector`, ...): both
/// run `$work` on their arguments.
macro_rules! with_mpi1_name {
    ($(#[$m:meta])* fn $name:ident or $mpi1:ident($($a:ident: $t:ty),* $(,)?) => $work:ident) => {
        mpi_fn! {
            $(#[$m])*
            fn $name($($a: $t),*) on MPI_COMM_WORLD => {
                // SAFETY: the caller's contract.
                unsafe { $work($($a),*) }
            }
        }

        mpi_fn! {
            #[doc = concat!("MPI-1's name of `", stringify!($name), "`.")]
            fn $mpi1($($a: $t),*) on MPI_COMM_WORLD => {
                // SAFETY: the caller's contract.
                unsafe { $work($($a),*) }
            }
        }
    };
}

/// `MPI_Type_create_hvector`.
///
/// # Safety
/// `newtype` must be null or valid for a write.
unsafe fn hvector(
    n: c_int,
    blocklength: c_int,
    stride: MPI_Aint,
    oldtype: c_int,
    newtype: *mut c_int,
) -> Result<(), c_int> {
    within(&[(count(n)? as u128 * count(blocklength)? as u128, oldtype)])?;
    let t = UserDatatype::heterogeneous_vector(count(n)?, count(blocklength)?, stride as isize, &old(oldtype)?);
    let how = contents(MPI_COMBINER_HVECTOR, vec![n, blocklength], vec![stride], &[oldtype])?;
    // SAFETY: the caller's contract.
    unsafe { made(newtype, t, how) }
}

with_mpi1_name! {
    /// `count` blocks of `blocklength` elements, `stride` bytes apart.
    fn MPI_Type_create_hvector or MPI_Type_hvector(
        n: c_int,
        blocklength: c_int,
        stride: MPI_Aint,
        oldtype: c_int,
        newtype: *mut c_int,
    ) => hvector
}

mpi_fn! {
    /// Blocks of `blocklengths[i]` elements at `displacements[i]` elements.
    fn MPI_Type_indexed(n: c_int, blocklengths: *const c_int, displs: *const c_int, oldtype: c_int, newtype: *mut c_int)
        on MPI_COMM_WORLD => {
        // SAFETY: the caller vouches for `n` entries of each array.
        let (b, d): (Vec<c_int>, Vec<c_int>) = unsafe { (array(blocklengths, n)?, array(displs, n)?) };
        within(&[(total(&b), oldtype)])?;
        let t = UserDatatype::indexed(&b, &d, &old(oldtype)?);
        let ints = [&[n][..], &b, &d].concat();
        let how = contents(MPI_COMBINER_INDEXED, ints, vec![], &[oldtype])?;
        // SAFETY: the caller's contract.
        unsafe { made(newtype, t, how) }
    }
}

/// `MPI_Type_create_hindexed`.
///
/// # Safety
/// The arrays must hold `n` entries; `newtype` must be null or valid for a write.
unsafe fn hindexed(
    n: c_int,
    blocklengths: *const c_int,
    displs: *const MPI_Aint,
    oldtype: c_int,
    newtype: *mut c_int,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    let (b, d): (Vec<c_int>, Vec<isize>) = unsafe { (array(blocklengths, n)?, array(displs, n)?) };
    within(&[(total(&b), oldtype)])?;
    let t = UserDatatype::heterogeneous_indexed(&b, &d, &old(oldtype)?);
    let aints = d.iter().map(|&x| x as MPI_Aint).collect();
    let how = contents(MPI_COMBINER_HINDEXED, [&[n][..], &b].concat(), aints, &[oldtype])?;
    // SAFETY: the caller's contract.
    unsafe { made(newtype, t, how) }
}

with_mpi1_name! {
    /// Blocks of `blocklengths[i]` elements at byte `displacements[i]`.
    fn MPI_Type_create_hindexed or MPI_Type_hindexed(
        n: c_int,
        blocklengths: *const c_int,
        displs: *const MPI_Aint,
        oldtype: c_int,
        newtype: *mut c_int,
    ) => hindexed
}

mpi_fn! {
    /// Blocks of `blocklength` elements at `displacements[i]` elements.
    fn MPI_Type_create_indexed_block(
        n: c_int,
        blocklength: c_int,
        displs: *const c_int,
        oldtype: c_int,
        newtype: *mut c_int,
    ) on MPI_COMM_WORLD => {
        // SAFETY: the caller vouches for `n` displacements.
        let d: Vec<c_int> = unsafe { array(displs, n)? };
        within(&[(d.len() as u128 * count(blocklength)? as u128, oldtype)])?;
        let t = UserDatatype::indexed_block(count(blocklength)?, &d, &old(oldtype)?);
        let ints = [&[n, blocklength][..], &d].concat();
        let how = contents(MPI_COMBINER_INDEXED_BLOCK, ints, vec![], &[oldtype])?;
        // SAFETY: the caller's contract.
        unsafe { made(newtype, t, how) }
    }
}

mpi_fn! {
    /// Blocks of `blocklength` elements at byte `displacements[i]`.
    fn MPI_Type_create_hindexed_block(
        n: c_int,
        blocklength: c_int,
        displs: *const MPI_Aint,
        oldtype: c_int,
        newtype: *mut c_int,
    ) on MPI_COMM_WORLD => {
        // SAFETY: the caller vouches for `n` displacements.
        let d: Vec<isize> = unsafe { array(displs, n)? };
        within(&[(d.len() as u128 * count(blocklength)? as u128, oldtype)])?;
        let t = UserDatatype::heterogeneous_indexed_block(count(blocklength)?, &d, &old(oldtype)?);
        let aints = d.iter().map(|&x| x as MPI_Aint).collect();
        let how = contents(MPI_COMBINER_HINDEXED_BLOCK, vec![n, blocklength], aints, &[oldtype])?;
        // SAFETY: the caller's contract.
        unsafe { made(newtype, t, how) }
    }
}

/// `MPI_Type_create_struct`.
///
/// # Safety
/// The arrays must hold `n` entries; `newtype` must be null or valid for a write.
unsafe fn structure(
    n: c_int,
    blocklengths: *const c_int,
    displs: *const MPI_Aint,
    types: *const c_int,
    newtype: *mut c_int,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    let (b, d, ts): (Vec<c_int>, Vec<isize>, Vec<c_int>) =
        unsafe { (array(blocklengths, n)?, array(displs, n)?, array(types, n)?) };
    let refs: Vec<DatatypeRef<'static>> = ts.iter().map(|&t| old(t)).collect::<Result<_, _>>()?;
    within(&b.iter().zip(&ts).map(|(&x, &t)| (x.max(0) as u128, t)).collect::<Vec<_>>())?;
    let t = UserDatatype::structured(&b, &d, &refs);
    let aints = d.iter().map(|&x| x as MPI_Aint).collect();
    let how = contents(MPI_COMBINER_STRUCT, [&[n][..], &b].concat(), aints, &ts)?;
    // SAFETY: the caller's contract.
    unsafe { made(newtype, t, how) }
}

with_mpi1_name! {
    /// A structure: `blocklengths[i]` elements of `types[i]` at byte `displacements[i]`.
    fn MPI_Type_create_struct or MPI_Type_struct(
        n: c_int,
        blocklengths: *const c_int,
        displs: *const MPI_Aint,
        types: *const c_int,
        newtype: *mut c_int,
    ) => structure
}

/// `MPI_Type_create_resized`.
///
/// # Safety
/// `newtype` must be null or valid for a write.
unsafe fn resized(oldtype: c_int, lb: MPI_Count, extent: MPI_Count, newtype: *mut c_int) -> Result<(), c_int> {
    // A copy of the layout (`from_raw` copies), then resized.
    // SAFETY: `any_datatype` names a live datatype.
    let t = unsafe { UserDatatype::from_raw(any_datatype(oldtype)?) }.with_bounds(lb as isize, extent as isize);
    let how = contents(MPI_COMBINER_RESIZED, vec![], vec![lb, extent as MPI_Aint], &[oldtype])?;
    // SAFETY: the caller's contract.
    unsafe { made(newtype, t, how) }
}

mpi_fn! {
    /// The same layout with lower bound `lb` and extent `extent` (either of any sign).
    fn MPI_Type_create_resized(
        oldtype: c_int,
        lb: MPI_Aint,
        extent: MPI_Aint,
        newtype: *mut c_int,
    ) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { resized(oldtype, lb, extent, newtype) }
    }
}

mpi_fn! {
    /// `MPI_Type_create_resized` with large counts.
    fn MPI_Type_create_resized_c(oldtype: c_int, lb: MPI_Count, extent: MPI_Count, newtype: *mut c_int)
        on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { resized(oldtype, lb, extent, newtype) }
    }
}

mpi_fn! {
    /// A new handle for the same datatype (committed if `oldtype` is).
    fn MPI_Type_dup(oldtype: c_int, newtype: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: `any_datatype` names a live datatype.
        let t = unsafe { UserDatatype::from_raw(any_datatype(oldtype)?) };
        let committed = crate::datatypes::datatype(oldtype).is_ok();
        if newtype.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let how = Some(Box::new(contents(MPI_COMBINER_DUP, vec![], vec![], &[oldtype])?));
        let h = DATATYPES.insert(TypeEntry { dt: t, committed, contents: how, name: None });
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { newtype.write(h) };
        crate::attributes::copy_all(oldtype, h)
    }
}

mpi_fn! {
    /// Commits `*datatype` for communication (a predefined one is already).
    fn MPI_Type_commit(datatype: *mut c_int) on MPI_COMM_WORLD => {
        if datatype.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable.
        let h = unsafe { datatype.read() };
        if crate::datatypes::predefined(h).is_some() {
            return Ok(());
        }
        DATATYPES.with_mut(h, |e| e.committed = true).ok_or(MPI_ERR_TYPE)
    }
}

mpi_fn! {
    /// Frees `*datatype` (a datatype the program made) and sets it to `MPI_DATATYPE_NULL`.
    fn MPI_Type_free(datatype: *mut c_int) on MPI_COMM_WORLD => {
        if datatype.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        let h = unsafe { datatype.read() };
        if DATATYPES.with(h, |_| ()).is_none() {
            return Err(MPI_ERR_TYPE);
        }
        crate::attributes::delete_all(h)?;
        let e = DATATYPES.take(h).ok_or(MPI_ERR_TYPE)?;
        RETIRED.lock().push(e.dt);
        // SAFETY: as above.
        unsafe { datatype.write(MPI_DATATYPE_NULL) };
        Ok(())
    }
}

mpi_fn! {
    /// How `datatype` was made: the numbers of integers, addresses and datatypes
    /// `MPI_Type_get_contents` gives, and the combiner (`MPI_COMBINER_NAMED` for a predefined
    /// one).
    fn MPI_Type_get_envelope(dt: c_int, ni: *mut c_int, na: *mut c_int, nd: *mut c_int, combiner: *mut c_int)
        on MPI_COMM_WORLD => {
        let (i, a, d, c) = if crate::datatypes::predefined(dt).is_some() {
            (0, 0, 0, MPI_COMBINER_NAMED)
        } else {
            DATATYPES
                .with(dt, |e| {
                    e.contents.as_ref().map(|k| (k.ints.len(), k.aints.len(), k.types.len(), k.combiner))
                })
                .flatten()
                .ok_or(MPI_ERR_TYPE)?
        };
        // SAFETY: the caller's contract.
        unsafe {
            crate::put(ni, i as c_int)?;
            crate::put(na, a as c_int)?;
            crate::put(nd, d as c_int)?;
            crate::put(combiner, c)
        }
    }
}

mpi_fn! {
    /// The arguments `datatype` was made with; each derived datatype among them is a new
    /// handle (the program frees it).
    fn MPI_Type_get_contents(
        dt: c_int,
        max_integers: c_int,
        max_addresses: c_int,
        max_datatypes: c_int,
        integers: *mut c_int,
        addresses: *mut MPI_Aint,
        datatypes: *mut c_int,
    ) on MPI_COMM_WORLD => {
        let (ints, aints, types) = DATATYPES
            .with(dt, |e| {
                e.contents.as_ref().map(|k| {
                    (k.ints.clone(), k.aints.clone(), k.types.clone())
                })
            })
            .flatten()
            .ok_or(MPI_ERR_TYPE)?;
        if (ints.len() as c_int) > max_integers
            || (aints.len() as c_int) > max_addresses
            || (types.len() as c_int) > max_datatypes
        {
            return Err(MPI_ERR_ARG);
        }
        if (!ints.is_empty() && integers.is_null())
            || (!aints.is_empty() && addresses.is_null())
            || (!types.is_empty() && datatypes.is_null())
        {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null where written; the caller vouches for the maximum lengths,
        // checked above.
        unsafe {
            std::ptr::copy_nonoverlapping(ints.as_ptr(), integers, ints.len());
            std::ptr::copy_nonoverlapping(aints.as_ptr(), addresses, aints.len());
        }
        for (i, (h, t)) in types.into_iter().enumerate() {
            let out = match t {
                None => h,
                Some((dt, contents)) => DATATYPES.insert(TypeEntry { dt, committed: true, contents, name: None }),
            };
            // SAFETY: as above.
            unsafe { datatypes.add(i).write(out) };
        }
        Ok(())
    }
}

mpi_fn! {
    /// Names a datatype the program made (at most `MPI_MAX_OBJECT_NAME - 1` bytes are kept).
    fn MPI_Type_set_name(dt: c_int, name: *const std::os::raw::c_char) on MPI_COMM_WORLD => {
        if name.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches for a NUL-terminated string.
        let s = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned();
        let mut end = s.len().min(MPI_MAX_OBJECT_NAME as usize - 1);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let n = s[..end].to_string();
        if crate::datatypes::predefined(dt).is_some() {
            crate::more_types::set_name(dt, n);
            return Ok(());
        }
        DATATYPES.with_mut(dt, |e| e.name = Some(n)).ok_or(MPI_ERR_TYPE)
    }
}

mpi_fn! {
    /// The name of a datatype: a predefined one's MPI name, or what was set (empty if none).
    fn MPI_Type_get_name(dt: c_int, name: *mut std::os::raw::c_char, resultlen: *mut c_int) on MPI_COMM_WORLD => {
        let n = match crate::datatypes::predefined_name(dt) {
            Some(n) => crate::more_types::set_name_of(dt).unwrap_or_else(|| n.to_string()),
            None if dt == MPI_DATATYPE_NULL => "MPI_DATATYPE_NULL".to_string(),
            None => DATATYPES.with(dt, |e| e.name.clone().unwrap_or_default()).ok_or(MPI_ERR_TYPE)?,
        };
        // SAFETY: the caller vouches for `MPI_MAX_OBJECT_NAME` bytes at `name`.
        unsafe { crate::put_string(&n, name, MPI_MAX_OBJECT_NAME, resultlen) }
    }
}

/// `MPI_ORDER_C`: the last dimension varies fastest.
const MPI_ORDER_C: c_int = 56;
/// `MPI_ORDER_FORTRAN`: the first dimension varies fastest.
const MPI_ORDER_FORTRAN: c_int = 57;

/// The layout of a subarray: `subsizes` elements from `starts` of an array of `sizes` elements
/// of `old` (extent `ext`), dimensions listed from the fastest varying; lower bound 0 and the
/// whole array's extent.
fn subarray_layout(
    sizes: &[c_int],
    subsizes: &[c_int],
    starts: &[c_int],
    old: &DatatypeRef<'_>,
    ext: isize,
) -> UserDatatype {
    let mut t = UserDatatype::contiguous(subsizes[0], old);
    let mut stride = ext;
    let mut disp = starts[0] as isize * ext;
    for d in 1..sizes.len() {
        stride *= sizes[d - 1] as isize;
        t = UserDatatype::heterogeneous_vector(subsizes[d], 1, stride, &t);
        disp += starts[d] as isize * stride;
    }
    let total = stride * sizes[sizes.len() - 1] as isize;
    UserDatatype::heterogeneous_indexed(&[1], &[disp], &t).resized(total.max(0) as usize)
}

mpi_fn! {
    /// The subarray of `subsizes` elements from `starts` of an array of `sizes` elements of
    /// `oldtype` (`ndims` dimensions in `order`: `MPI_ORDER_C` or `MPI_ORDER_FORTRAN`).
    fn MPI_Type_create_subarray(
        ndims: c_int,
        sizes: *const c_int,
        subsizes: *const c_int,
        starts: *const c_int,
        order: c_int,
        oldtype: c_int,
        newtype: *mut c_int,
    ) on MPI_COMM_WORLD => {
        if ndims <= 0 || (order != MPI_ORDER_C && order != MPI_ORDER_FORTRAN) {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: the caller vouches for `ndims` entries of each array.
        let (sz, sub, st): (Vec<c_int>, Vec<c_int>, Vec<c_int>) =
            unsafe { (array(sizes, ndims)?, array(subsizes, ndims)?, array(starts, ndims)?) };
        let ok = (0..ndims as usize)
            .all(|d| sz[d] > 0 && sub[d] > 0 && sub[d] <= sz[d] && st[d] >= 0 && st[d] <= sz[d] - sub[d]);
        if !ok {
            return Err(MPI_ERR_ARG);
        }
        let o = old(oldtype)?;
        let ext = o.type_map().extent();
        // Listed from the fastest varying dimension.
        let fastest_first = |v: &[c_int]| -> Vec<c_int> {
            if order == MPI_ORDER_C { v.iter().rev().copied().collect() } else { v.to_vec() }
        };
        within(&[(sub.iter().map(|&x| x as u128).product(), oldtype)])?;
        let t = subarray_layout(&fastest_first(&sz), &fastest_first(&sub), &fastest_first(&st), &o, ext);
        let ints = [&[ndims][..], &sz, &sub, &st, &[order]].concat();
        let how = contents(MPI_COMBINER_SUBARRAY, ints, vec![], &[oldtype])?;
        // SAFETY: the caller's contract.
        unsafe { made(newtype, t, how) }
    }
}
