//! Every other function of MPICH's ABI: the functions Debian's `libmpich.so.12` (MPICH 4.0)
//! exports that this library does not provide yet, each under its name, so that a program
//! or a loader that binds every symbol at once (mpi4py's `RTLD_NOW`) finds them all. Each
//! one fails with `MPI_ERR_UNSUPPORTED_OPERATION`, raised on `MPI_COMM_WORLD` (under
//! `MPI_ERRORS_ARE_FATAL` the job stops with a message naming the function; under
//! `MPI_ERRORS_RETURN` the message is printed once per function and the class returned);
//! the tools interface (`MPI_T_`) answers `MPI_T_ERR_NOT_SUPPORTED` without a handler.
//!
//! A family implemented later removes its names here (a name both here and implemented is a
//! duplicate symbol, which the linker refuses); the test `tests/symbols.rs` checks that
//! every function of Debian's library is exported.

use crate::consts::{MPI_COMM_WORLD, MPI_ERR_UNSUPPORTED_OPERATION};
use parking_lot::Mutex;
use std::os::raw::c_int;

/// `MPI_T_ERR_NOT_SUPPORTED`.
const MPI_T_ERR_NOT_SUPPORTED: c_int = 78;

/// The functions whose missing support was already said (once each).
// Process-wide because the message is said once per process.
static SAID: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// What the stub of `symbol` (`MPI_X` or `PMPI_X`) does.
pub fn unsupported(symbol: &'static str) -> c_int {
    let name = symbol.strip_prefix('P').unwrap_or(symbol);
    if name.starts_with("MPI_T_") {
        return MPI_T_ERR_NOT_SUPPORTED;
    }
    if crate::errors::handler_of(MPI_COMM_WORLD) == crate::consts::MPI_ERRORS_RETURN {
        let mut said = SAID.lock();
        if !said.contains(&name) {
            said.push(name);
            eprintln!("p2pmpi: {name} is not provided yet (it answers MPI_ERR_UNSUPPORTED_OPERATION)");
        }
    }
    crate::errors::raise(MPI_COMM_WORLD, name, MPI_ERR_UNSUPPORTED_OPERATION)
}

/// Exports a stub under each name, and their list as the data symbol `p2pmpi_abi_stubs`
/// (the names, each followed by a newline), which `p2pmpi abi-check` reads from the file.
macro_rules! stubs {
    ($($name:literal)*) => {
        $(
            const _: () = {
                #[export_name = $name]
                extern "C" fn stub() -> c_int {
                    unsupported($name)
                }
            };
        )*
        const STUB_NAMES: &str = concat!($($name, "\n",)*);
        /// The stubs' names (read from the file by `p2pmpi abi-check`; never by a program).
        #[export_name = "p2pmpi_abi_stubs"]
        pub static STUB_LIST: [u8; STUB_NAMES.len()] = bytes_of(STUB_NAMES);
    };
}

/// The bytes of `s` as an array (for a static of a known length).
const fn bytes_of<const N: usize>(s: &str) -> [u8; N] {
    let b = s.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = b[i];
        i += 1;
    }
    out
}

stubs! {
    "MPIX_Grequest_class_allocate" "PMPIX_Grequest_class_allocate"
    "MPIX_Grequest_class_create" "PMPIX_Grequest_class_create"
    "MPIX_Grequest_start" "PMPIX_Grequest_start"
    "MPI_Close_port" "PMPI_Close_port"
    "MPI_Comm_accept" "PMPI_Comm_accept"
    "MPI_Comm_connect" "PMPI_Comm_connect"
    "MPI_Comm_join" "PMPI_Comm_join"
    "MPI_Lookup_name" "PMPI_Lookup_name"
    "MPI_Open_port" "PMPI_Open_port"
    "MPI_Publish_name" "PMPI_Publish_name"
    "MPI_T_category_changed" "PMPI_T_category_changed"
    "MPI_T_category_get_categories" "PMPI_T_category_get_categories"
    "MPI_T_category_get_cvars" "PMPI_T_category_get_cvars"
    "MPI_T_category_get_events" "PMPI_T_category_get_events"
    "MPI_T_category_get_index" "PMPI_T_category_get_index"
    "MPI_T_category_get_info" "PMPI_T_category_get_info"
    "MPI_T_category_get_num" "PMPI_T_category_get_num"
    "MPI_T_category_get_num_events" "PMPI_T_category_get_num_events"
    "MPI_T_category_get_pvars" "PMPI_T_category_get_pvars"
    "MPI_T_cvar_get_index" "PMPI_T_cvar_get_index"
    "MPI_T_cvar_get_info" "PMPI_T_cvar_get_info"
    "MPI_T_cvar_get_num" "PMPI_T_cvar_get_num"
    "MPI_T_cvar_handle_alloc" "PMPI_T_cvar_handle_alloc"
    "MPI_T_cvar_handle_free" "PMPI_T_cvar_handle_free"
    "MPI_T_cvar_read" "PMPI_T_cvar_read"
    "MPI_T_cvar_write" "PMPI_T_cvar_write"
    "MPI_T_enum_get_info" "PMPI_T_enum_get_info"
    "MPI_T_enum_get_item" "PMPI_T_enum_get_item"
    "MPI_T_event_callback_get_info" "PMPI_T_event_callback_get_info"
    "MPI_T_event_callback_set_info" "PMPI_T_event_callback_set_info"
    "MPI_T_event_copy" "PMPI_T_event_copy"
    "MPI_T_event_get_index" "PMPI_T_event_get_index"
    "MPI_T_event_get_info" "PMPI_T_event_get_info"
    "MPI_T_event_get_num" "PMPI_T_event_get_num"
    "MPI_T_event_get_source" "PMPI_T_event_get_source"
    "MPI_T_event_get_timestamp" "PMPI_T_event_get_timestamp"
    "MPI_T_event_handle_alloc" "PMPI_T_event_handle_alloc"
    "MPI_T_event_handle_free" "PMPI_T_event_handle_free"
    "MPI_T_event_handle_get_info" "PMPI_T_event_handle_get_info"
    "MPI_T_event_handle_set_info" "PMPI_T_event_handle_set_info"
    "MPI_T_event_read" "PMPI_T_event_read"
    "MPI_T_event_register_callback" "PMPI_T_event_register_callback"
    "MPI_T_event_set_dropped_handler" "PMPI_T_event_set_dropped_handler"
    "MPI_T_finalize" "PMPI_T_finalize"
    "MPI_T_init_thread" "PMPI_T_init_thread"
    "MPI_T_pvar_get_index" "PMPI_T_pvar_get_index"
    "MPI_T_pvar_get_info" "PMPI_T_pvar_get_info"
    "MPI_T_pvar_get_num" "PMPI_T_pvar_get_num"
    "MPI_T_pvar_handle_alloc" "PMPI_T_pvar_handle_alloc"
    "MPI_T_pvar_handle_free" "PMPI_T_pvar_handle_free"
    "MPI_T_pvar_read" "PMPI_T_pvar_read"
    "MPI_T_pvar_readreset" "PMPI_T_pvar_readreset"
    "MPI_T_pvar_reset" "PMPI_T_pvar_reset"
    "MPI_T_pvar_session_create" "PMPI_T_pvar_session_create"
    "MPI_T_pvar_session_free" "PMPI_T_pvar_session_free"
    "MPI_T_pvar_start" "PMPI_T_pvar_start"
    "MPI_T_pvar_stop" "PMPI_T_pvar_stop"
    "MPI_T_pvar_write" "PMPI_T_pvar_write"
    "MPI_T_source_get_info" "PMPI_T_source_get_info"
    "MPI_T_source_get_num" "PMPI_T_source_get_num"
    "MPI_T_source_get_timestamp" "PMPI_T_source_get_timestamp"
    "MPI_Unpublish_name" "PMPI_Unpublish_name"
}
