//! The predefined reduction operations: MPICH's handle of each and the library's operation.
//! User operations (`MPI_Op_create`) are to come.

use crate::consts::MPI_ERR_OP;
use p2pmpi::collective::SystemOperation;
use p2pmpi::ffi;
use p2pmpi::traits::AsRaw;
use std::os::raw::c_int;

/// Makes the table of predefined operations: a constant per name (module [`values`]) and
/// the translation [`op`].
macro_rules! predefined_ops {
    ($($name:ident = $bits:expr => $make:ident;)*) => {
        /// MPICH's handles of the predefined operations.
        pub mod values {
            use std::os::raw::c_int;
            $(pub const $name: c_int = $bits;)*
        }

        /// The library's predefined operation of MPICH handle `h`, or `MPI_ERR_OP`.
        #[inline]
        pub fn system_op(h: c_int) -> Result<SystemOperation, c_int> {
            match h {
                $(values::$name => Ok(SystemOperation::$make()),)*
                _ => Err(MPI_ERR_OP),
            }
        }

        /// The library's handle of the operation of MPICH handle `h`, or `MPI_ERR_OP`.
        #[inline]
        pub fn op(h: c_int) -> Result<ffi::MPI_Op, c_int> {
            system_op(h).map(|o| o.as_raw())
        }

        /// Every predefined operation: its name and handle.
        pub const PREDEFINED: &[(&str, c_int)] = &[$((stringify!($name), values::$name)),*];
    };
}

predefined_ops! {
    MPI_MAX = 0x5800_0001 => max;
    MPI_MIN = 0x5800_0002 => min;
    MPI_SUM = 0x5800_0003 => sum;
    MPI_PROD = 0x5800_0004 => product;
    MPI_LAND = 0x5800_0005 => logical_and;
    MPI_BAND = 0x5800_0006 => bitwise_and;
    MPI_LOR = 0x5800_0007 => logical_or;
    MPI_BOR = 0x5800_0008 => bitwise_or;
    MPI_LXOR = 0x5800_0009 => logical_xor;
    MPI_BXOR = 0x5800_000a => bitwise_xor;
    MPI_MINLOC = 0x5800_000b => min_loc;
    MPI_MAXLOC = 0x5800_000c => max_loc;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_predefined_operation_translates_and_others_do_not() {
        let mut seen = std::collections::HashSet::new();
        for &(name, h) in PREDEFINED {
            let o = op(h).unwrap_or_else(|_| panic!("{name}"));
            assert!(seen.insert(format!("{o:?}")), "{name} is another operation's");
        }
        assert_eq!(op(crate::consts::MPI_OP_NULL), Err(MPI_ERR_OP));
        assert_eq!(op(0x5800_000e), Err(MPI_ERR_OP), "MPI_NO_OP is not provided yet");
    }
}
