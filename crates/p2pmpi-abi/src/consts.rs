//! MPICH 4's values of the predefined handles and constants that the library's code uses
//! (`include/mpi.h` has them all for C; a test compares that header with MPICH's).
//!
//! A handle is an `int`: its kind in bits 30-31 (1: predefined, 2 and 3: made at run time),
//! the kind of object in bits 26-29 (see [`crate::handles::object`]), an index below. A
//! predefined datatype also carries its size in bytes in bits 8-15.

use std::os::raw::c_int;

/// Reinterprets a 32-bit pattern as a C `int` (handles above 0x7fffffff are negative ints).
const fn h(bits: u32) -> c_int {
    bits as c_int
}

pub const MPI_COMM_NULL: c_int = h(0x0400_0000);
pub const MPI_COMM_WORLD: c_int = h(0x4400_0000);
pub const MPI_COMM_SELF: c_int = h(0x4400_0001);
pub const MPI_GROUP_NULL: c_int = h(0x0800_0000);
pub const MPI_GROUP_EMPTY: c_int = h(0x4800_0000);
pub const MPI_DATATYPE_NULL: c_int = h(0x0c00_0000);
pub const MPI_OP_NULL: c_int = h(0x1800_0000);
pub const MPI_REQUEST_NULL: c_int = h(0x2c00_0000);
pub const MPI_ERRHANDLER_NULL: c_int = h(0x1400_0000);
pub const MPI_ERRORS_ARE_FATAL: c_int = h(0x5400_0000);
pub const MPI_ERRORS_RETURN: c_int = h(0x5400_0001);
pub const MPI_ERRORS_ABORT: c_int = h(0x5400_0003);

pub const MPI_PROC_NULL: c_int = -1;
pub const MPI_ANY_SOURCE: c_int = -2;
pub const MPI_ROOT: c_int = -3;
pub const MPI_ANY_TAG: c_int = -1;
pub const MPI_UNDEFINED: c_int = -32766;

pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1;
pub const MPI_THREAD_SERIALIZED: c_int = 2;
pub const MPI_THREAD_MULTIPLE: c_int = 3;

pub const MPI_VERSION: c_int = 4;
pub const MPI_SUBVERSION: c_int = 0;
pub const MPI_MAX_PROCESSOR_NAME: c_int = 128;
pub const MPI_MAX_LIBRARY_VERSION_STRING: c_int = 8192;
pub const MPI_MAX_ERROR_STRING: c_int = 512;
pub const MPI_MAX_OBJECT_NAME: c_int = 128;

/// `MPI_IN_PLACE`: the address -1.
pub const MPI_IN_PLACE: *mut std::os::raw::c_void = usize::MAX as *mut std::os::raw::c_void;
/// `MPI_STATUS_IGNORE` and `MPI_STATUSES_IGNORE`: the address 1.
pub const MPI_STATUS_IGNORE: usize = 1;

/// The error classes (`MPI_SUCCESS` is 0), in their order; [`crate::errors`] describes each.
macro_rules! error_classes {
    ($($name:ident = $v:expr, $text:expr;)*) => {
        $(pub const $name: c_int = $v;)*
        /// Every error class with its name and description.
        pub const ERROR_CLASSES: &[(c_int, &str, &str)] = &[$(($v, stringify!($name), $text)),*];
    };
}

error_classes! {
    MPI_SUCCESS = 0, "no error";
    MPI_ERR_BUFFER = 1, "invalid buffer pointer";
    MPI_ERR_COUNT = 2, "invalid count argument";
    MPI_ERR_TYPE = 3, "invalid datatype";
    MPI_ERR_TAG = 4, "invalid tag";
    MPI_ERR_COMM = 5, "invalid communicator";
    MPI_ERR_RANK = 6, "invalid rank";
    MPI_ERR_ROOT = 7, "invalid root";
    MPI_ERR_GROUP = 8, "invalid group";
    MPI_ERR_OP = 9, "invalid reduction operation";
    MPI_ERR_TOPOLOGY = 10, "invalid topology";
    MPI_ERR_DIMS = 11, "invalid dimension argument";
    MPI_ERR_ARG = 12, "invalid argument";
    MPI_ERR_UNKNOWN = 13, "unknown error";
    MPI_ERR_TRUNCATE = 14, "message truncated on receive";
    MPI_ERR_OTHER = 15, "other error (a failed communication)";
    MPI_ERR_INTERN = 16, "internal error";
    MPI_ERR_IN_STATUS = 17, "error code is in the status";
    MPI_ERR_PENDING = 18, "pending request";
    MPI_ERR_REQUEST = 19, "invalid request";
    MPI_ERR_ACCESS = 20, "permission denied";
    MPI_ERR_AMODE = 21, "invalid file access mode";
    MPI_ERR_BAD_FILE = 22, "invalid file name";
    MPI_ERR_CONVERSION = 23, "data conversion failed";
    MPI_ERR_DUP_DATAREP = 24, "data representation already defined";
    MPI_ERR_FILE_EXISTS = 25, "file exists";
    MPI_ERR_FILE_IN_USE = 26, "file in use";
    MPI_ERR_FILE = 27, "invalid file handle";
    MPI_ERR_INFO = 28, "invalid info object";
    MPI_ERR_INFO_KEY = 29, "invalid info key";
    MPI_ERR_INFO_VALUE = 30, "invalid info value";
    MPI_ERR_INFO_NOKEY = 31, "info key not defined";
    MPI_ERR_IO = 32, "input/output error";
    MPI_ERR_NAME = 33, "invalid service name";
    MPI_ERR_NO_MEM = 34, "out of memory";
    MPI_ERR_NOT_SAME = 35, "collective arguments differ among processes";
    MPI_ERR_NO_SPACE = 36, "no space left";
    MPI_ERR_NO_SUCH_FILE = 37, "no such file";
    MPI_ERR_PORT = 38, "invalid port name";
    MPI_ERR_QUOTA = 39, "quota exceeded";
    MPI_ERR_READ_ONLY = 40, "read-only file";
    MPI_ERR_SERVICE = 41, "invalid service";
    MPI_ERR_SPAWN = 42, "could not spawn processes";
    MPI_ERR_UNSUPPORTED_DATAREP = 43, "unsupported data representation";
    MPI_ERR_UNSUPPORTED_OPERATION = 44, "operation not supported";
    MPI_ERR_WIN = 45, "invalid window";
    MPI_ERR_BASE = 46, "invalid base address";
    MPI_ERR_LOCKTYPE = 47, "invalid lock type";
    MPI_ERR_KEYVAL = 48, "invalid attribute key";
    MPI_ERR_RMA_CONFLICT = 49, "conflicting accesses to a window";
    MPI_ERR_RMA_SYNC = 50, "wrong synchronization of one-sided calls";
    MPI_ERR_SIZE = 51, "invalid size";
    MPI_ERR_DISP = 52, "invalid displacement";
    MPI_ERR_ASSERT = 53, "invalid assertion";
    MPI_ERR_RMA_RANGE = 55, "target memory outside the window";
    MPI_ERR_RMA_ATTACH = 56, "memory cannot be attached";
    MPI_ERR_RMA_SHARED = 57, "memory cannot be shared";
    MPI_ERR_RMA_FLAVOR = 58, "wrong window flavor";
    MPI_ERR_SESSION = 75, "invalid session";
    MPI_ERR_PROC_ABORTED = 76, "communication with an aborted process";
    MPI_ERR_VALUE_TOO_LARGE = 77, "value too large to store";
    MPIX_ERR_PROC_FAILED = 101, "a process failed";
    MPIX_ERR_PROC_FAILED_PENDING = 102, "a failure left the request pending";
    MPIX_ERR_REVOKED = 103, "the communicator was revoked";
}
