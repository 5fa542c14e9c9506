//! Fault-aware MPI under MPICH's names (ULFM): `MPIX_Comm_revoke`, `MPIX_Comm_shrink`,
//! `MPIX_Comm_agree`, `MPIX_Comm_failure_ack`, `MPIX_Comm_failure_get_acked` — the five
//! Debian's MPICH 4.0 exports — and the later `MPIX_Comm_ishrink`, on the library's
//! [`p2pmpi::ulfm::FaultTolerant`]; `MPI_Comm_idup` and `MPI_Comm_idup_with_info` (complete
//! when they return), which mpi4py's `Comm.Ishrink` calls on MPICH 4.0.
//!
//! **Making a job fault-aware.** As with MPICH, the environment variable
//! `MPIR_CVAR_ENABLE_FT` (or its aliases `MPICH_ENABLE_FT`, `MPIR_PARAM_ENABLE_FT`) set to
//! `1`, `yes`, `true` or `on` when `MPI_Init` runs: the library then keeps running when a
//! process fails (`p2pmpi::failure::Policy::Notify`) and the launcher lets the job go on.
//! Without it a failure stops the job, as before. The program sets `MPI_ERRORS_RETURN` (or
//! its own handler) on its communicators to see the errors: communication with a failed
//! process answers `MPIX_ERR_PROC_FAILED`, communication on a revoked communicator
//! `MPIX_ERR_REVOKED` (MPICH's numbers, 101 and 103).

use crate::consts::*;
use crate::errors::inherit_handler;
use crate::handles::{comm, new_group, rust_comm, CommEntry, COMMS};
use crate::{ok, put};
use p2pmpi::ffi;
use p2pmpi::traits::AsRaw;
use p2pmpi::ulfm::{FaultError, FaultTolerant};
use std::os::raw::c_int;

/// MPICH's names of the switch of fault tolerance.
const SWITCHES: [&str; 3] = ["MPIR_CVAR_ENABLE_FT", "MPICH_ENABLE_FT", "MPIR_PARAM_ENABLE_FT"];

/// Whether a switch's value turns it on.
fn on(v: &str) -> bool {
    matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "yes" | "true" | "on")
}

/// Before initialization: the job is fault-aware if MPICH's switch is on.
pub(crate) fn policy_from_env() {
    if SWITCHES.iter().any(|k| std::env::var(k).is_ok_and(|v| on(&v))) {
        p2pmpi::failure::set_policy(p2pmpi::failure::Policy::Notify);
    }
}

/// The error class of a failed fault-tolerant operation.
fn class(e: &FaultError) -> c_int {
    match e {
        FaultError::ProcFailed { .. } | FaultError::Refused(_) => MPIX_ERR_PROC_FAILED,
        FaultError::Library(_) => MPI_ERR_OTHER,
    }
}

mpi_fn! {
    /// Revokes `comm` for every member: their pending and later communication on it fails
    /// with `MPIX_ERR_REVOKED` (not collective).
    fn MPIX_Comm_revoke(c: c_int) on c => rust_comm(c)?.revoke().map_err(|e| class(&e))
}

mpi_fn! {
    /// A new communicator of the members of `comm` that did not fail, in the same order
    /// (collective over the survivors), with `comm`'s error handler.
    fn MPIX_Comm_shrink(c: c_int, newcomm: *mut c_int) on c => shrink(c, newcomm)
}

/// `MPIX_Comm_shrink`'s work.
fn shrink(c: c_int, newcomm: *mut c_int) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    if newcomm.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let s = rc.shrink().map_err(|e| class(&e))?;
    let h = COMMS.insert(CommEntry { raw: s.as_raw(), rust: s });
    inherit_handler(c, h);
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { put(newcomm, h) }
}

mpi_fn! {
    /// `MPIX_Comm_shrink`, done when it returns, with a request already complete at
    /// `*request` (not in Debian's MPICH 4.0 list; programs of later MPICHs call it).
    fn MPIX_Comm_ishrink(c: c_int, newcomm: *mut c_int, request: *mut c_int) on c => {
        if request.is_null() {
            return Err(MPI_ERR_ARG);
        }
        shrink(c, newcomm)?;
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { crate::kept::completed(request) }
    }
}

mpi_fn! {
    /// Agrees on `*flag` with the survivors of `comm`: `*flag` becomes the bitwise AND of
    /// their flags. `MPIX_ERR_PROC_FAILED` (with `*flag` set all the same) when members
    /// failed whose failure this process has not acknowledged.
    fn MPIX_Comm_agree(c: c_int, flag: *mut c_int) on c => {
        let rc = rust_comm(c)?;
        if flag.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: checked non-null; the caller vouches it is readable and writable.
        let mine = unsafe { flag.read() } as u32;
        let (agreed, r) = match rc.agree(mine) {
            Ok(v) => (v, Ok(())),
            Err(FaultError::ProcFailed { agreed, .. }) => (agreed, Err(MPIX_ERR_PROC_FAILED)),
            Err(e) => return Err(class(&e)),
        };
        // SAFETY: as above.
        unsafe { flag.write(agreed as c_int) };
        r
    }
}

mpi_fn! {
    /// Acknowledges the failures of members of `comm` known now: later agreements no longer
    /// report them.
    fn MPIX_Comm_failure_ack(c: c_int) on c => {
        rust_comm(c)?.failure_ack();
        Ok(())
    }
}

mpi_fn! {
    /// The group of the members of `comm` whose failure this process acknowledged (ranks in
    /// `comm`'s order; `MPI_GROUP_EMPTY` if none).
    fn MPIX_Comm_failure_get_acked(c: c_int, failedgrp: *mut c_int) on c => {
        let rc = rust_comm(c)?;
        if failedgrp.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let ranks: Vec<c_int> = rc.failure_get_acked().into_iter().map(|r| r as c_int).collect();
        if ranks.is_empty() {
            // SAFETY: checked non-null; the caller vouches it is writable.
            return unsafe { put(failedgrp, MPI_GROUP_EMPTY) };
        }
        // SAFETY: the predefined names are initialized statics that nothing writes.
        let (mut all, mut acked) = unsafe { (ffi::RSMPI_GROUP_NULL, ffi::RSMPI_GROUP_NULL) };
        // SAFETY: `all` and `acked` are locals; `ranks` holds `ranks.len()` ranks of `comm`.
        unsafe {
            ok(ffi::MPI_Comm_group(comm(c)?, &mut all))?;
            let r = ok(ffi::MPI_Group_incl(all, ranks.len() as c_int, ranks.as_ptr(), &mut acked));
            ffi::MPI_Group_free(&mut all);
            r?;
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { put(failedgrp, new_group(acked)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_takes_mpichs_values() {
        for v in ["1", "yes", "TRUE", " on "] {
            assert!(on(v), "{v}");
        }
        for v in ["0", "no", "", "false", "2"] {
            assert!(!on(v), "{v}");
        }
    }

    #[test]
    fn failures_answer_ulfms_classes() {
        assert_eq!(class(&FaultError::ProcFailed { failed: vec![1], agreed: 0 }), MPIX_ERR_PROC_FAILED);
        assert_eq!(class(&FaultError::Refused("x".into())), MPIX_ERR_PROC_FAILED);
        assert_eq!(class(&FaultError::Library("x".into())), MPI_ERR_OTHER);
    }
}
