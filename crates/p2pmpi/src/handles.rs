//! The C handles of the MPI objects (rsmpi's `mpi::ffi` types `MPI_Comm`, `MPI_Group`,
//! `MPI_Op`, `MPI_Request`, `MPI_Message`, `MPI_Datatype`, `MPI_Status`), their predefined
//! values, the error classes, and the [`table::Table`] of slots behind a kind of handle.
//!
//! The MPI operations name their objects by these handles (`as_raw`, `from_raw`), and
//! [`crate::ffi`], the C functions above them, re-exports everything public here. The tables
//! themselves are kept by the module of the objects they hold (communicators and groups in
//! `topology`, user operations in `collective`, requests in `request`).
//!
//! **Why process-wide.** A C handle is a plain integer a program may keep anywhere and hand
//! to any function from any thread (as with a C MPI library), so the tables behind them are
//! process-wide statics, each behind its own mutex; none is on the per-message path (a
//! handle is made or looked up by `as_raw`/`from_raw` and the C functions only).
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

pub(crate) mod table;

use std::os::raw::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

/// Locks a table (a panic while it was held leaves it usable: each change is one step).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The hasher of the tables keyed by a handle's number (the requests'): one multiplication.
/// The keys are numbers this library hands out, not chosen by an adversary; SipHash cost each
/// C request's making and completion a few hundred instructions.
#[derive(Default, Clone, Copy)]
pub(crate) struct NumberHasher(u64);

impl std::hash::Hasher for NumberHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_i32(&mut self, i: i32) {
        // Every bit of the key reaches the high bits (hashbrown's tags) and the low ones (its
        // buckets).
        self.0 = (u64::from(i as u32) ^ (self.0 << 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A table keyed by a handle's number, with [`NumberHasher`].
pub(crate) type NumberMap<V> = std::collections::HashMap<c_int, V, std::hash::BuildHasherDefault<NumberHasher>>;

/// A communicator handle.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MPI_Comm(pub(crate) c_int);

/// A group handle.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MPI_Group(pub(crate) c_int);

/// A reduction operation handle.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MPI_Op(pub(crate) c_int);

/// A request handle.
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MPI_Request(pub(crate) c_int);

/// A matched message handle (it names a [`crate::point_to_point::Message`]; no function here
/// takes one).
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MPI_Message(pub(crate) c_int);

impl MPI_Message {
    pub(crate) fn next() -> MPI_Message {
        // Process-wide because message handles are C handles (plain integers, any thread).
        static NEXT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(table::FIRST_USER);
        MPI_Message(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

/// A datatype handle: the address of the datatype's layout. It is valid while the datatype
/// lives (forever for the predefined ones).
#[repr(transparent)]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MPI_Datatype(pub(crate) *const c_void);

impl MPI_Datatype {
    pub(crate) fn is_null(self) -> bool {
        self.0.is_null()
    }
}

/// What a receive reports (`MPI_Status`): the public fields of C's, and the received size.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MPI_Status {
    /// The sender's rank.
    pub MPI_SOURCE: c_int,
    /// The message's tag.
    pub MPI_TAG: c_int,
    /// The error class of the operation (`MPI_SUCCESS`).
    pub MPI_ERROR: c_int,
    pub(crate) bytes: u64,
    pub(crate) cancelled: c_int,
}

impl MPI_Status {
    /// The number of bytes the message held (what `MPI_Get_count` divides by the datatype's
    /// size; read by libraries that keep their own status layout, such as `p2pmpi-abi`).
    pub fn byte_count(&self) -> u64 {
        self.bytes
    }

    /// Whether the operation was cancelled (`MPI_Test_cancelled`).
    pub fn is_cancelled(&self) -> bool {
        self.cancelled != 0
    }
}

/// The C signature of a user reduction function (`MPI_User_function`).
pub type MPI_User_function = Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut MPI_Datatype)>;
/// An attribute copy callback (`MPI_Comm_copy_attr_function`): `(oldcomm, keyval,
/// extra_state, attribute_val_in, attribute_val_out, flag)`.
pub type MPI_Comm_copy_attr_function =
    Option<unsafe extern "C" fn(MPI_Comm, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int>;
/// An attribute delete callback (`MPI_Comm_delete_attr_function`): `(comm, keyval,
/// attribute_val, extra_state)`.
pub type MPI_Comm_delete_attr_function =
    Option<unsafe extern "C" fn(MPI_Comm, c_int, *mut c_void, *mut c_void) -> c_int>;

// ------------------------------------------------------------------ predefined handles

/// Makes predefined names: in a module `predefined` as constants (this crate's own use, also in
/// patterns), and public as `extern` statics like rsmpi's (`unsafe { ffi::RSMPI_COMM_WORLD }`),
/// each defined under a symbol name of this crate's version and declared again in an
/// `extern "C"` block of a module `c_statics`, re-exported where the macro is used. Used here
/// for the handles of communicators, groups, requests, messages and operations, and by
/// [`crate::ffi`] for the rest (datatypes, ranks, tags, codes).
macro_rules! predefined_names {
    ($($(#[$m:meta])* $name:ident: $ty:ty = $val:expr;)*) => {
        /// The values of the predefined names, as constants.
        pub(crate) mod predefined {
            #[allow(unused_imports)]
            use super::*;
            $($(#[$m])* pub(crate) const $name: $ty = $val;)*
        }
        pub(crate) mod exported {
            #[allow(unused_imports)]
            use super::*;
            $(
                $(#[$m])*
                #[export_name = concat!("p2pmpi_", env!("CARGO_PKG_VERSION"), "_", stringify!($name))]
                // Process-wide because they are the predefined C handles, constants.
                pub(crate) static $name: $crate::handles::Shared<$ty> = $crate::handles::Shared(super::predefined::$name);
            )*
        }
        /// The predefined names as rsmpi's `extern` statics.
        pub(crate) mod c_statics {
            #[allow(unused_imports)]
            use super::*;
            extern "C" {
                $(
                    $(#[$m])*
                    #[link_name = concat!("p2pmpi_", env!("CARGO_PKG_VERSION"), "_", stringify!($name))]
                    // Process-wide because rsmpi exports them as `extern` statics.
                    pub static $name: $ty;
                )*
            }
        }
    };
}
pub(crate) use predefined_names;

/// A predefined value as an exported static (the pointers inside are never written).
#[repr(transparent)]
pub(crate) struct Shared<T>(pub(crate) T);
// SAFETY: the values are plain handles, never written.
unsafe impl<T> Sync for Shared<T> {}

predefined_names! {
    /// The null communicator.
    RSMPI_COMM_NULL: MPI_Comm = MPI_Comm(0);
    /// The world communicator.
    RSMPI_COMM_WORLD: MPI_Comm = MPI_Comm(1);
    /// The communicator of this process alone.
    RSMPI_COMM_SELF: MPI_Comm = MPI_Comm(2);
    /// The null group.
    RSMPI_GROUP_NULL: MPI_Group = MPI_Group(0);
    /// The empty group.
    RSMPI_GROUP_EMPTY: MPI_Group = MPI_Group(1);
    /// The null request.
    RSMPI_REQUEST_NULL: MPI_Request = MPI_Request(0);
    /// The null message.
    RSMPI_MESSAGE_NULL: MPI_Message = MPI_Message(0);
    /// The message of a probe of `MPI_PROC_NULL`.
    RSMPI_MESSAGE_NO_PROC: MPI_Message = MPI_Message(1);
    /// The null operation.
    RSMPI_OP_NULL: MPI_Op = MPI_Op(0);
    /// Maximum.
    RSMPI_MAX: MPI_Op = MPI_Op(1);
    /// Minimum.
    RSMPI_MIN: MPI_Op = MPI_Op(2);
    /// Sum.
    RSMPI_SUM: MPI_Op = MPI_Op(3);
    /// Product.
    RSMPI_PROD: MPI_Op = MPI_Op(4);
    /// Logical and.
    RSMPI_LAND: MPI_Op = MPI_Op(5);
    /// Bitwise and.
    RSMPI_BAND: MPI_Op = MPI_Op(6);
    /// Logical or.
    RSMPI_LOR: MPI_Op = MPI_Op(7);
    /// Bitwise or.
    RSMPI_BOR: MPI_Op = MPI_Op(8);
    /// Logical exclusive or.
    RSMPI_LXOR: MPI_Op = MPI_Op(9);
    /// Bitwise exclusive or.
    RSMPI_BXOR: MPI_Op = MPI_Op(10);
}

/// `MPI_MAXLOC` (not a predefined name of rsmpi; `SystemOperation::max_loc().as_raw()`).
pub(crate) const OP_MAXLOC: MPI_Op = MPI_Op(11);
/// `MPI_MINLOC`.
pub(crate) const OP_MINLOC: MPI_Op = MPI_Op(12);

/// The predefined attribute key of the universe size (read with `MPI_Comm_get_attr` on the
/// world: a pointer to a `c_int`).
pub const MPI_UNIVERSE_SIZE: u32 = 0x6440_0009;
/// The predefined attribute key of the application number.
pub const MPI_APPNUM: u32 = 0x6440_000b;
/// `MPI_Comm_create_keyval`'s answer when no key could be made (never).
pub const MPI_KEYVAL_INVALID: u32 = 0x2400_0000;

/// Success.
pub const MPI_SUCCESS: u32 = 0;
/// An invalid buffer pointer.
pub const MPI_ERR_BUFFER: u32 = 1;
/// An invalid count.
pub const MPI_ERR_COUNT: u32 = 2;
/// An invalid datatype.
pub const MPI_ERR_TYPE: u32 = 3;
/// An invalid tag.
pub const MPI_ERR_TAG: u32 = 4;
/// An invalid communicator.
pub const MPI_ERR_COMM: u32 = 5;
/// An invalid rank.
pub const MPI_ERR_RANK: u32 = 6;
/// An invalid root.
pub const MPI_ERR_ROOT: u32 = 7;
/// An invalid group.
pub const MPI_ERR_GROUP: u32 = 8;
/// An invalid operation.
pub const MPI_ERR_OP: u32 = 9;
/// An invalid argument.
pub const MPI_ERR_ARG: u32 = 12;
/// A message longer than the receive buffer.
pub const MPI_ERR_TRUNCATE: u32 = 14;
/// Another error (a failed communication).
pub const MPI_ERR_OTHER: u32 = 15;
/// An invalid request.
pub const MPI_ERR_REQUEST: u32 = 19;
/// An invalid attribute key.
pub const MPI_ERR_KEYVAL: u32 = 48;
