//! The bits of MPICH's integer handles (as in MPICH): the kind in bits 30-31 ([`BUILTIN`] for
//! the predefined objects, [`DIRECT`] for those made at run time here, 0 for the null
//! handles), the kind of object in bits 26-29 ([`object`]), an index in bits 0-25. Below both
//! tables of handles: [`crate::handles`]' slabs and [`crate::reqtable`]'s requests.

use std::os::raw::c_int;

/// The kind of a predefined handle.
pub const BUILTIN: u32 = 1;
/// The kind of a handle made at run time.
pub const DIRECT: u32 = 2;

/// The kinds of objects (bits 26-29 of a handle).
pub mod object {
    pub const COMM: u32 = 0x1;
    pub const GROUP: u32 = 0x2;
    pub const DATATYPE: u32 = 0x3;
    pub const FILE: u32 = 0x4;
    pub const ERRHANDLER: u32 = 0x5;
    pub const OP: u32 = 0x6;
    pub const INFO: u32 = 0x7;
    pub const WIN: u32 = 0x8;
    pub const KEYVAL: u32 = 0x9;
    pub const REQUEST: u32 = 0xb;
}

/// Bits of the index in a handle, and their mask.
pub const INDEX_BITS: u32 = 26;
pub const INDEX_MASK: u32 = (1 << INDEX_BITS) - 1;

/// The handle of kind `kind`, object `obj`, index `index`.
pub const fn make(kind: u32, obj: u32, index: u32) -> c_int {
    ((kind << 30) | (obj << INDEX_BITS) | (index & INDEX_MASK)) as c_int
}

/// The kind of object a handle names (any kind of handle, null ones included).
pub const fn object_of(h: c_int) -> u32 {
    ((h as u32) >> INDEX_BITS) & 0xf
}
