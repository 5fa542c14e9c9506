//! The bridge between p2pmpi's Rust objects and the handles of [`crate::ffi`] (rsmpi's
//! `mpi::raw`).
//!
//! p2pmpi has no C library: a raw handle (`MPI_Comm`, `MPI_Group`, `MPI_Op`, `MPI_Datatype`,
//! `MPI_Request`, ...) names an object in a process-wide table (kept by the module of the
//! objects of its kind, below [`crate::ffi`], which re-exports the handle types), or one of
//! the predefined objects (`RSMPI_COMM_WORLD`, `RSMPI_SUM`, `RSMPI_INT32_T`, ...). The traits
//! below carry the same names, methods and contracts as rsmpi's.

/// Re-exports for `use mpi::raw::traits::*` (also part of `mpi::traits`).
pub mod traits {
    pub use super::{AsRaw, AsRawMut, FromRaw, MatchesRaw};
}

/// A Rust object that can name itself by a raw handle of [`crate::ffi`].
///
/// # Safety
///
/// `as_raw` must return a handle that names this very object (or the predefined object it
/// stands for) for as long as the object lives.
pub unsafe trait AsRaw {
    /// The raw handle type.
    type Raw;
    /// The raw handle.
    fn as_raw(&self) -> Self::Raw;
}

// SAFETY: a reference names what its referent names.
unsafe impl<T> AsRaw for &T
where
    T: AsRaw + ?Sized,
{
    type Raw = <T as AsRaw>::Raw;
    fn as_raw(&self) -> Self::Raw {
        (**self).as_raw()
    }
}

/// A Rust object that can give a mutable pointer to its raw handle.
///
/// # Safety
///
/// The pointer must point to this object's raw handle, valid for as long as the object is
/// borrowed.
pub unsafe trait AsRawMut: AsRaw {
    /// A mutable pointer to the raw handle.
    fn as_raw_mut(&mut self) -> *mut <Self as AsRaw>::Raw;
}

/// Builds the Rust object, with all its semantics, from a raw handle.
pub trait FromRaw: AsRaw {
    /// Makes the Rust object of `handle`.
    ///
    /// # Safety
    ///
    /// `handle` must name a live object of the right kind. The Rust object takes over the
    /// handle's ownership where the handle owned the object (a communicator made by
    /// `MPI_Comm_dup` is freed when the Rust object is dropped).
    unsafe fn from_raw(handle: <Self as AsRaw>::Raw) -> Self;
}

/// Marks a Rust type whose representation is exactly its raw handle's, so that slices of it
/// can be passed where arrays of handles are expected.
///
/// # Safety
///
/// The type must be `#[repr(transparent)]` over its raw handle (or equivalent).
pub unsafe trait MatchesRaw: AsRaw {}
