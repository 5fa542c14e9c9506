//! `MPI_Type_create_darray` (and `_c`): the part of a global array of `gsizes` elements that
//! process `rank` of a grid of `psizes` processes holds, each dimension distributed by block,
//! cyclically or not at all; laid out as the elements' runs in storage order (C or Fortran),
//! with lower bound 0 and the whole array's extent.

use crate::consts::*;
use crate::derived::{array, contents, made, old, within};
use p2pmpi::datatype::UserDatatype;
use p2pmpi::traits::UncommittedDatatype;
use std::os::raw::c_int;

const MPI_COMBINER_DARRAY: c_int = 14;
const MPI_ORDER_C: c_int = 56;
const MPI_ORDER_FORTRAN: c_int = 57;
const MPI_DISTRIBUTE_BLOCK: c_int = 121;
const MPI_DISTRIBUTE_CYCLIC: c_int = 122;
const MPI_DISTRIBUTE_NONE: c_int = 123;
const MPI_DISTRIBUTE_DFLT_DARG: c_int = -49767;

/// The runs (first index, length) of one dimension of `gsize` elements that the process at
/// `coord` of `psize` holds.
fn runs(gsize: i64, distrib: c_int, darg: c_int, psize: i64, coord: i64) -> Result<Vec<(i64, i64)>, c_int> {
    match distrib {
        MPI_DISTRIBUTE_NONE => Ok(vec![(0, gsize)]),
        MPI_DISTRIBUTE_BLOCK => {
            let b = if darg == MPI_DISTRIBUTE_DFLT_DARG { (gsize + psize - 1) / psize } else { darg as i64 };
            if b <= 0 || b * psize < gsize {
                return Err(MPI_ERR_ARG);
            }
            let start = coord * b;
            let len = b.min(gsize - start);
            Ok(if len > 0 { vec![(start, len)] } else { vec![] })
        }
        MPI_DISTRIBUTE_CYCLIC => {
            let d = if darg == MPI_DISTRIBUTE_DFLT_DARG { 1 } else { darg as i64 };
            if d <= 0 {
                return Err(MPI_ERR_ARG);
            }
            let mut v = Vec::new();
            let mut k = coord * d;
            while k < gsize {
                v.push((k, d.min(gsize - k)));
                k += psize * d;
            }
            Ok(v)
        }
        _ => Err(MPI_ERR_ARG),
    }
}

/// The element runs (offset in elements, length) of the local part, in storage order:
/// `dims` lists each dimension's runs and stride (in elements) from the slowest varying.
fn layout(dims: &[(Vec<(i64, i64)>, i64)]) -> Vec<(i64, i64)> {
    let Some(((inner, _), outer)) = dims.split_last() else { return vec![] };
    // Every combination of the outer dimensions' indices, in order.
    let mut bases = vec![0i64];
    for (rs, stride) in outer {
        bases = bases
            .iter()
            .flat_map(|&b| rs.iter().flat_map(move |&(s, l)| (s..s + l).map(move |i| b + i * stride)))
            .collect();
    }
    bases.iter().flat_map(|&b| inner.iter().map(move |&(s, l)| (b + s, l))).collect()
}

/// `MPI_Type_create_darray`, the arrays read.
#[allow(clippy::too_many_arguments)]
fn darray(
    size: c_int,
    rank: c_int,
    gsizes: &[i64],
    distribs: &[c_int],
    dargs: &[c_int],
    psizes: &[c_int],
    order: c_int,
    oldtype: c_int,
) -> Result<UserDatatype, c_int> {
    let n = gsizes.len();
    if size <= 0 || !(0..size).contains(&rank) || (order != MPI_ORDER_C && order != MPI_ORDER_FORTRAN) {
        return Err(MPI_ERR_ARG);
    }
    if gsizes.iter().any(|&g| g <= 0) || psizes.iter().any(|&p| p <= 0) {
        return Err(MPI_ERR_ARG);
    }
    if psizes.iter().map(|&p| p as i64).product::<i64>() != size as i64 {
        return Err(MPI_ERR_ARG);
    }
    // The process grid is row-major whatever the array's order.
    let mut coords = vec![0i64; n];
    let mut r = rank as i64;
    for d in (0..n).rev() {
        coords[d] = r % psizes[d] as i64;
        r /= psizes[d] as i64;
    }
    let mut per_dim = Vec::with_capacity(n);
    for d in 0..n {
        if distribs[d] == MPI_DISTRIBUTE_NONE && psizes[d] != 1 {
            return Err(MPI_ERR_ARG);
        }
        per_dim.push(runs(gsizes[d], distribs[d], dargs[d], psizes[d] as i64, coords[d])?);
    }
    // Dimensions from the slowest varying in storage, each with its stride in elements.
    let slowest_first: Vec<usize> = if order == MPI_ORDER_C { (0..n).collect() } else { (0..n).rev().collect() };
    let mut stride = 1i64;
    let mut dims = vec![(Vec::new(), 0i64); n];
    for (k, &d) in slowest_first.iter().enumerate().rev() {
        dims[k] = (per_dim[d].clone(), stride);
        stride *= gsizes[d];
    }
    let total = stride;
    let elements: i64 = per_dim.iter().map(|rs| rs.iter().map(|r| r.1).sum::<i64>()).product();
    within(&[(elements.max(0) as u128, oldtype)])?;
    let o = old(oldtype)?;
    let ext = o.type_map().extent() as i64;
    let runs = layout(&dims);
    let lens: Vec<c_int> =
        runs.iter().map(|r| c_int::try_from(r.1).map_err(|_| MPI_ERR_COUNT)).collect::<Result<_, _>>()?;
    let disps: Vec<isize> = runs.iter().map(|r| (r.0 * ext) as isize).collect();
    let t = UserDatatype::heterogeneous_indexed(&lens, &disps, &o);
    Ok(t.with_bounds(0, (total * ext) as isize))
}

/// Reads the arrays of `MPI_Type_create_darray` and makes the datatype.
///
/// # Safety
/// The arrays must hold `ndims` entries; `newtype` must be null or writable.
#[allow(clippy::too_many_arguments)]
unsafe fn create(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    gsizes: Vec<i64>,
    distribs: *const c_int,
    dargs: *const c_int,
    psizes: *const c_int,
    order: c_int,
    oldtype: c_int,
    newtype: *mut c_int,
) -> Result<(), c_int> {
    // SAFETY: the caller vouches for `ndims` entries of each array.
    let (di, da, ps): (Vec<c_int>, Vec<c_int>, Vec<c_int>) =
        unsafe { (array(distribs, ndims)?, array(dargs, ndims)?, array(psizes, ndims)?) };
    let t = darray(size, rank, &gsizes, &di, &da, &ps, order, oldtype)?;
    let g: Vec<c_int> =
        gsizes.iter().map(|&x| c_int::try_from(x).map_err(|_| MPI_ERR_COUNT)).collect::<Result<_, _>>()?;
    let ints = [&[size, rank, ndims][..], &g, &di, &da, &ps, &[order]].concat();
    let how = contents(MPI_COMBINER_DARRAY, ints, vec![], &[oldtype])?;
    // SAFETY: the caller's contract.
    unsafe { made(newtype, t, how) }
}

/// Defines `MPI_Type_create_darray` and its `_c` form: name, type of the global sizes, doc.
macro_rules! darray_forms {
    ($($name:ident($g:ty) $doc:literal;)*) => {$(
        mpi_fn! {
            #[doc = $doc]
            fn $name(
                size: c_int,
                rank: c_int,
                ndims: c_int,
                gsizes: *const $g,
                distribs: *const c_int,
                dargs: *const c_int,
                psizes: *const c_int,
                order: c_int,
                oldtype: c_int,
                newtype: *mut c_int,
            ) on MPI_COMM_WORLD => {
                if ndims <= 0 {
                    return Err(MPI_ERR_ARG);
                }
                // SAFETY: the caller vouches for `ndims` entries.
                let g: Vec<i64> = unsafe { array(gsizes, ndims)? };
                // SAFETY: the caller's contract.
                unsafe { create(size, rank, ndims, g, distribs, dargs, psizes, order, oldtype, newtype) }
            }
        }
    )*};
}

darray_forms! {
    MPI_Type_create_darray(c_int) "The part of a distributed array that process `rank` of `size` holds.";
    MPI_Type_create_darray_c(crate::datatypes::MPI_Count) "`MPI_Type_create_darray` with large global sizes.";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dimension_is_cut_by_blocks_or_cyclically() {
        let (b, c, dflt) = (MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_DFLT_DARG);
        assert_eq!(runs(10, b, dflt, 3, 0), Ok(vec![(0, 4)]));
        assert_eq!(runs(10, b, dflt, 3, 2), Ok(vec![(8, 2)]));
        assert_eq!(runs(9, b, 3, 4, 3), Ok(vec![]));
        assert_eq!(runs(10, b, 2, 3, 0), Err(MPI_ERR_ARG), "blocks of 2 do not cover 10 on 3");
        assert_eq!(runs(10, c, dflt, 3, 1), Ok(vec![(1, 1), (4, 1), (7, 1)]));
        assert_eq!(runs(10, c, 2, 3, 1), Ok(vec![(2, 2), (8, 2)]));
        assert_eq!(runs(5, MPI_DISTRIBUTE_NONE, dflt, 1, 0), Ok(vec![(0, 5)]));
    }

    #[test]
    fn the_runs_follow_storage_order() {
        // Rows 1..3 of 4 (stride 4), columns {0, 2} of 4: C order.
        let dims = vec![(vec![(1, 2)], 4), (vec![(0, 1), (2, 1)], 1)];
        assert_eq!(layout(&dims), vec![(4, 1), (6, 1), (8, 1), (10, 1)]);
    }
}
