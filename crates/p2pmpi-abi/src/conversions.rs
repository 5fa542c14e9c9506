//! Conversions and small utilities: `MPI_Aint_add`, `MPI_Aint_diff`, `MPI_Get_address`
//! (and MPI-1's `MPI_Address`), the C/Fortran conversions that are functions in MPICH's ABI
//! (`MPI_Status_c2f`, `MPI_Status_f2c`, `MPI_File_c2f`, `MPI_File_f2c` (numbers kept by
//! [`crate::file`]); those of the other
//! handles are macros of `mpi.h`, the handle itself), the status setters
//! (`MPI_Status_set_elements`, `_x`, `MPI_Status_set_cancelled`) and `MPI_Pcontrol`.

use crate::consts::*;
use crate::status::MPI_Status;
use std::os::raw::{c_int, c_long, c_void};

mpi_fn! {
    /// `base + disp`, as an address.
    fn MPI_Aint_add(base: c_long, disp: c_long) -> c_long => base.wrapping_add(disp)
}

mpi_fn! {
    /// `addr1 - addr2`, as a difference of addresses.
    fn MPI_Aint_diff(addr1: c_long, addr2: c_long) -> c_long => addr1.wrapping_sub(addr2)
}

/// Copies a status between C's layout and Fortran's (the same five integers in MPICH's ABI).
///
/// # Safety
/// `from` must be readable and `to` writable for a status, unless null or a marker.
unsafe fn copy_status(from: *const MPI_Status, to: *mut MPI_Status) -> Result<(), c_int> {
    if from.is_null() || to.is_null() || from as usize == MPI_STATUS_IGNORE || to as usize == MPI_STATUS_IGNORE {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: both checked to be real pointers; the caller vouches for them.
    unsafe { to.write(from.read()) };
    Ok(())
}

mpi_fn! {
    /// A C status as a Fortran one.
    fn MPI_Status_c2f(c_status: *const MPI_Status, f_status: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract (a Fortran status is five `MPI_Fint`).
        unsafe { copy_status(c_status, f_status as *mut MPI_Status) }
    }
}

mpi_fn! {
    /// A Fortran status as a C one.
    fn MPI_Status_f2c(f_status: *const c_int, c_status: *mut MPI_Status) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract (a Fortran status is five `MPI_Fint`).
        unsafe { copy_status(f_status as *const MPI_Status, c_status) }
    }
}

mpi_fn! {
    /// The Fortran handle of a file: its number in [`crate::file`]'s table (0 for the null
    /// file).
    fn MPI_File_c2f(file: *mut c_void) -> c_int => crate::file::c2f(file)
}

mpi_fn! {
    /// The C handle of a Fortran file handle (the null file for 0 or an unknown number).
    fn MPI_File_f2c(file: c_int) -> *mut c_void => crate::file::f2c(file)
}

mpi_fn! {
    /// The address of `location`, as an `MPI_Aint` (for displacements of structures).
    fn MPI_Get_address(location: *const c_void, address: *mut c_long) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { crate::put(address, location as c_long) }
    }
}

mpi_fn! {
    /// MPI-1's name of `MPI_Get_address`.
    fn MPI_Address(location: *const c_void, address: *mut c_long) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { crate::put(address, location as c_long) }
    }
}

mpi_fn! {
    /// Profiling control: nothing to do without a profiling layer.
    fn MPI_Pcontrol(_level: c_int) on MPI_COMM_WORLD => Ok(())
}

/// Sets a status's size to `count` elements of `dt`.
///
/// # Safety
/// `st` must be null, `MPI_STATUS_IGNORE` or writable.
unsafe fn set_elements(st: *mut MPI_Status, dt: c_int, count: c_long) -> Result<(), c_int> {
    let size = crate::datatypes::size_of(dt)?;
    if st.is_null() || st as usize == MPI_STATUS_IGNORE || count < 0 {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: checked to be a real pointer; the caller vouches it is readable and writable.
    unsafe {
        let s = st.read();
        st.write(MPI_Status::new(count as u64 * size as u64, s.cancelled(), s.MPI_SOURCE, s.MPI_TAG, s.MPI_ERROR));
    }
    Ok(())
}

mpi_fn! {
    /// Sets a status's size to `count` elements of `datatype` (generalized requests).
    fn MPI_Status_set_elements(st: *mut MPI_Status, dt: c_int, count: c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { set_elements(st, dt, count as c_long) }
    }
}

mpi_fn! {
    /// `MPI_Status_set_elements` with a large count.
    fn MPI_Status_set_elements_x(st: *mut MPI_Status, dt: c_int, count: c_long) on MPI_COMM_WORLD => {
        // SAFETY: the caller's contract.
        unsafe { set_elements(st, dt, count) }
    }
}

mpi_fn! {
    /// Sets a status's cancelled flag.
    fn MPI_Status_set_cancelled(st: *mut MPI_Status, flag: c_int) on MPI_COMM_WORLD => {
        if st.is_null() || st as usize == MPI_STATUS_IGNORE {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked to be a real pointer; the caller vouches it is readable and writable.
        unsafe {
            let s = st.read();
            st.write(MPI_Status::new(s.bytes(), flag != 0, s.MPI_SOURCE, s.MPI_TAG, s.MPI_ERROR));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_add_and_subtract() {
        // SAFETY: no pointer is involved.
        unsafe {
            assert_eq!(MPI_Aint_add(1000, -8), 992);
            assert_eq!(MPI_Aint_diff(1000, 8), 992);
        }
    }

    #[test]
    fn statuses_convert_both_ways_and_refuse_the_ignore_marker() {
        let c = MPI_Status::new(12, false, 3, 4, 0);
        let mut f = [0 as c_int; 5];
        let mut back = MPI_Status::default();
        // SAFETY: locals of the right sizes.
        unsafe {
            assert_eq!(MPI_Status_c2f(&c, f.as_mut_ptr()), MPI_SUCCESS);
            assert_eq!(f[2..4], [3, 4]);
            assert_eq!(MPI_Status_f2c(f.as_ptr(), &mut back), MPI_SUCCESS);
        }
        assert_eq!(back, c);
        let mut fs = [0 as c_int; 5];
        let ignore = MPI_STATUS_IGNORE as *const MPI_Status;
        // SAFETY: the marker is refused before any access.
        let r = unsafe { copy_status(ignore, fs.as_mut_ptr() as *mut MPI_Status) };
        assert_eq!(r, Err(MPI_ERR_ARG));
    }
}
