//! MPICH's queries of GPU support (`MPIX_Query_cuda_support`, `MPIX_Query_hip_support`,
//! `MPIX_Query_ze_support`, `MPIX_GPU_query_support`): p2pmpi moves host memory only, so each
//! answers "not supported" (0), which a program reads as: stage device buffers through the host.

use crate::consts::*;
use std::os::raw::c_int;

/// Exports `$name` and its `PMPIX_` twin: a query without arguments answering 0.
macro_rules! unsupported {
    ($($name:literal $pname:literal),* $(,)?) => {
        $(
            const _: () = {
                #[export_name = $name]
                extern "C" fn query() -> c_int {
                    0
                }
                #[export_name = $pname]
                extern "C" fn pquery() -> c_int {
                    0
                }
            };
        )*
    };
}

unsupported! {
    "MPIX_Query_cuda_support" "PMPIX_Query_cuda_support",
    "MPIX_Query_hip_support" "PMPIX_Query_hip_support",
    "MPIX_Query_ze_support" "PMPIX_Query_ze_support",
}

mpi_fn! {
    /// Whether GPUs of `gpu_type` are supported: never (`*is_supported` = 0).
    fn MPIX_GPU_query_support(_gpu_type: c_int, is_supported: *mut c_int) on MPI_COMM_WORLD => {
        // SAFETY: the caller vouches `is_supported` is writable (checked non-null there).
        unsafe { crate::put(is_supported, 0) }
    }
}
