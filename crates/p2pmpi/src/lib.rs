//! # p2pmpi — P2P-MPI in Rust
//!
//! An MPI library for Rust programs with the API of [rsmpi](https://docs.rs/mpi) 0.8 (crate
//! `mpi`): a program written for rsmpi runs on p2pmpi when its `Cargo.toml` says
//!
//! ```toml
//! mpi = { package = "p2pmpi", version = "0.1", features = ["derive"] }
//! ```
//!
//! with no C toolchain and no system MPI. Processes talk over TCP (see [`device`] for the
//! design); `p2pmpirun -n N program` starts a job.
//!
//! ```no_run
//! use mpi::traits::*;
//! # extern crate p2pmpi as mpi;
//! let universe = mpi::initialize().unwrap();
//! let world = universe.world();
//! if world.rank() == 0 {
//!     world.process_at_rank(1).send(&42i32);
//! } else if world.rank() == 1 {
//!     let (v, status) = world.process_at_rank(0).receive::<i32>();
//!     println!("got {v} from {}", status.source_rank());
//! }
//! ```
//!
//! Layers: [`p2pmpi_wire`] (frames and the MID), [`p2pmpi_core`] (pure protocol state machines:
//! matching), this crate's [`device`] (TCP progress engine) and the rsmpi-compatible modules.

// Signatures copy rsmpi's exactly (`Buf: ?Sized` in the generics, the trait bound in
// `where`), so that programs written for rsmpi, turbofish included, compile unchanged.
#![allow(clippy::multiple_bound_locations)]

pub mod attribute;
pub mod bootstrap;
pub mod checkpoint;
pub mod collective;
mod context;
pub mod datatype;
pub mod device;
pub mod environment;
mod error;
pub mod failure;
mod fatal;
pub mod ffi;
mod handles;
mod hosts;
mod launcher;
mod lease;
mod lifecycle;
pub mod point_to_point;
mod pool;
pub mod random;
pub mod raw;
pub mod request;
pub mod topology;
pub mod ulfm;

pub use crate::environment::{initialize, initialize_with_threading};
pub use crate::error::{Error as CommError, Result as CommResult};
pub use crate::lifecycle::{is_finalized, is_initialized, time, time_resolution, Threading};
pub use crate::topology::{MpiError, Rank};

/// Error code type (`c_int`), as in rsmpi.
pub type Error = std::os::raw::c_int;
/// Element counts.
pub type Count = std::os::raw::c_int;
/// Message tags.
pub type Tag = std::os::raw::c_int;
/// Byte displacements.
pub type Address = datatype::Address;

/// Everything a program usually imports: `use mpi::traits::*;`.
pub mod traits {
    pub use crate::attribute::traits::*;
    pub use crate::collective::traits::*;
    pub use crate::datatype::{
        AsDatatype, Buffer, BufferMut, Collection, Datatype, DatatypeInfo, Equivalence, Partitioned, PartitionedBuffer,
        PartitionedBufferMut, Pointer, PointerMut, UncommittedDatatype,
    };
    pub use crate::point_to_point::traits::*;
    pub use crate::raw::traits::*;
    pub use crate::topology::{AnyCommunicator, AsCommunicator, Communicator, Group};
    #[cfg(feature = "derive")]
    pub use p2pmpi_derive::Equivalence;
}

#[doc(hidden)]
pub mod internal {
    pub use once_cell;
}
