//! The variables of MPICH's ABI that C programs use by name: markers compared by address
//! (`MPI_UNWEIGHTED`, `MPI_WEIGHTS_EMPTY`, the Fortran status markers) and the tools
//! interface's `MPI_T_PVAR_ALL_HANDLES`. None of them is ever read or written through.

use std::os::raw::c_int;

/// A data symbol holding an address (`int * const` in C).
#[repr(transparent)]
pub struct Address(*const c_int);
// SAFETY: the address is constant, and what it points to is never written.
unsafe impl Sync for Address {}

impl Address {
    /// The address (to compare an argument with).
    pub fn addr(&self) -> *const c_int {
        self.0
    }
}

/// What the markers point to: distinct addresses (only those matter).
static MARKS: [c_int; 7] = [0; 7];

/// `MPI_UNWEIGHTED`: a graph's edges have no weights.
#[no_mangle]
pub static MPI_UNWEIGHTED: Address = Address(&MARKS[0]);
/// `MPI_WEIGHTS_EMPTY`: a process has no edges, so no weights.
#[no_mangle]
pub static MPI_WEIGHTS_EMPTY: Address = Address(&MARKS[1]);
/// `MPI_F_STATUS_IGNORE`: a Fortran status (five `MPI_Fint`) not wanted.
#[no_mangle]
pub static MPI_F_STATUS_IGNORE: Address = Address(&MARKS[2]);
/// `MPI_F_STATUSES_IGNORE`: Fortran statuses not wanted.
#[no_mangle]
pub static MPI_F_STATUSES_IGNORE: Address = Address(&MARKS[3]);
/// `MPI_F08_STATUS_IGNORE`: a Fortran 2008 status not wanted.
#[no_mangle]
pub static MPI_F08_STATUS_IGNORE: Address = Address(&MARKS[4]);
/// `MPI_F08_STATUSES_IGNORE`: Fortran 2008 statuses not wanted.
#[no_mangle]
pub static MPI_F08_STATUSES_IGNORE: Address = Address(&MARKS[5]);
/// `MPI_T_PVAR_ALL_HANDLES`: every performance variable handle of a session.
#[no_mangle]
pub static MPI_T_PVAR_ALL_HANDLES: Address = Address(&MARKS[6]);
