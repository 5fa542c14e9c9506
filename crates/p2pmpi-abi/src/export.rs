//! [`mpi_fn!`]: one MPI function, exported under its `MPI_` and `PMPI_` names.

/// Defines an MPI function once and exports it twice: as `MPI_X` (the name programs call and
/// profiling tools intercept) and as `PMPI_X` (the name such tools call to reach the library).
/// Both symbols call the same Rust function, not each other, so a tool that defines its own
/// `MPI_X` and calls `PMPI_X` reaches the library.
///
/// Three forms:
/// - `fn MPI_X(args) on COMM { body }`: an MPI call answering an error code. `body` is an
///   expression of type `Result<(), c_int>` (it may use `?`); an error class goes to the error
///   handler of communicator `COMM` (an MPICH handle, an expression of the arguments) by
///   [`crate::errors::raise`], which stops the job under `MPI_ERRORS_ARE_FATAL` and returns the
///   class under `MPI_ERRORS_RETURN`.
/// - `fn MPI_X(args) handler FH { body }`: the same for a file function, whose error goes to
///   the handler of file `FH` (or `MPI_FILE_NULL`'s when null) by [`crate::file::file_error`].
/// - `fn MPI_X(args) -> T { body }`: a function returning `T` as it is (`MPI_Wtime`).
macro_rules! mpi_fn {
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) on $comm:expr => $body:expr) => {
        mpi_fn! { @checked $(#[$m])* fn $name($($a: $t),*) raise $crate::errors::raise, $comm => $body }
    };
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) handler $fh:expr => $body:expr) => {
        mpi_fn! { @checked $(#[$m])* fn $name($($a: $t),*) raise $crate::file::file_error, $fh => $body }
    };
    (@checked $(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),*) raise $raise:path, $on:expr => $body:expr) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The C caller's contract: every pointer valid as the MPI standard says for this
        /// function.
        #[allow(clippy::too_many_arguments, unused_unsafe)]
        pub unsafe fn $name($($a: $t),*) -> std::os::raw::c_int {
            #[allow(clippy::redundant_closure_call)]
            let r: Result<(), std::os::raw::c_int> = (|| $body)();
            match r {
                Ok(()) => $crate::consts::MPI_SUCCESS,
                Err(class) => $raise($on, stringify!($name), class),
            }
        }
        mpi_fn! { @export $name($($a: $t),*) -> std::os::raw::c_int }
    };
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) -> $r:ty => $body:expr) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The C caller's contract: every pointer valid as the MPI standard says for this
        /// function.
        #[allow(unused_unsafe)]
        pub unsafe fn $name($($a: $t),*) -> $r {
            $body
        }
        mpi_fn! { @export $name($($a: $t),*) -> $r }
    };
    (@export $name:ident($($a:ident: $t:ty),*) -> $r:ty) => {
        const _: () = {
            #[export_name = stringify!($name)]
            #[allow(clippy::too_many_arguments)]
            unsafe extern "C" fn mpi($($a: $t),*) -> $r {
                // SAFETY: the caller's contract is the function's.
                unsafe { $name($($a),*) }
            }
            #[export_name = concat!("P", stringify!($name))]
            #[allow(clippy::too_many_arguments)]
            unsafe extern "C" fn pmpi($($a: $t),*) -> $r {
                // SAFETY: the caller's contract is the function's.
                unsafe { $name($($a),*) }
            }
        };
    };
}
