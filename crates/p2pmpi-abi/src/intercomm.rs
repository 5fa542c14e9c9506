//! Intercommunicators: `MPI_Intercomm_create`, `MPI_Intercomm_merge`,
//! `MPI_Comm_remote_size`, `MPI_Comm_remote_group`, on the Rust library's intercommunicators.
//! Point-to-point on an intercommunicator names ranks of the other group; `MPI_Comm_size`,
//! `MPI_Comm_rank` and `MPI_Comm_group` answer for the local group, `MPI_Comm_test_inter`
//! says it is one; the collectives the library runs on intercommunicators (`MPI_Barrier`,
//! `MPI_Allreduce`, `MPI_Allgather`, `MPI_Alltoall`, `MPI_Reduce_scatter_block`) work across
//! them.

use crate::consts::*;
use crate::errors::{class_of_failure, inherit_handler};
use crate::handles::{comm, new_group, rust_comm, CommEntry, COMMS};
use p2pmpi::ffi;
use p2pmpi::topology::{try_create_intercommunicator, InterCommunicator, MergeOrder, SimpleCommunicator};
use p2pmpi::traits::{AsRaw, Communicator, FromRaw};
use std::os::raw::c_int;

/// The library's intercommunicator of MPICH handle `c` (`MPI_ERR_COMM` for another kind).
fn inter(c: c_int) -> Result<InterCommunicator, c_int> {
    let raw = comm(c)?;
    // SAFETY: `raw` names a live communicator (checked by `comm`); this object only shares it.
    unsafe { InterCommunicator::try_from_raw(raw) }.ok_or(MPI_ERR_COMM)
}

/// Keeps communicator `raw` (made just now, from `parent`) under a new MPICH handle.
fn keep(raw: ffi::MPI_Comm, parent: c_int) -> c_int {
    // SAFETY: `raw` names the communicator the library just made; the slab's object owns it.
    let rust = unsafe { SimpleCommunicator::from_raw(raw) };
    let h = COMMS.insert(CommEntry { raw, rust });
    inherit_handler(parent, h);
    h
}

mpi_fn! {
    /// Makes an intercommunicator of the group of `local_comm` and the group whose leader is
    /// rank `remote_leader` of `peer_comm` (significant at `local_leader` only), collectively
    /// over both groups.
    fn MPI_Intercomm_create(
        local_comm: c_int,
        local_leader: c_int,
        peer_comm: c_int,
        remote_leader: c_int,
        tag: c_int,
        newintercomm: *mut c_int,
    ) on local_comm => {
        let local = rust_comm(local_comm)?;
        if newintercomm.is_null() {
            return Err(MPI_ERR_ARG);
        }
        if tag < 0 {
            return Err(MPI_ERR_TAG);
        }
        // The peer communicator matters at the leader only: elsewhere it may be anything.
        let peer = rust_comm(if local.rank() == local_leader { peer_comm } else { local_comm })?;
        let ic = try_create_intercommunicator(&local, local_leader, &peer, remote_leader, tag).map_err(class_of_failure)?;
        let h = keep(ic.as_raw(), local_comm);
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { newintercomm.write(h) };
        Ok(())
    }
}

mpi_fn! {
    /// Merges the two groups of an intercommunicator into an intracommunicator: the group
    /// whose processes pass `high` = 0 first (ties broken the same way everywhere).
    fn MPI_Intercomm_merge(intercomm: c_int, high: c_int, newintracomm: *mut c_int) on intercomm => {
        let ic = inter(intercomm)?;
        if newintracomm.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let order = if high != 0 { MergeOrder::High } else { MergeOrder::Low };
        let merged = ic.try_merge(order).map_err(class_of_failure)?;
        let h = keep(merged.as_raw(), intercomm);
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { newintracomm.write(h) };
        Ok(())
    }
}

mpi_fn! {
    /// The size of the other group of an intercommunicator.
    fn MPI_Comm_remote_size(c: c_int, size: *mut c_int) on c => {
        let n = inter(c)?.remote_size();
        // SAFETY: the caller's contract.
        unsafe { crate::put(size, n) }
    }
}

mpi_fn! {
    /// The other group of an intercommunicator.
    fn MPI_Comm_remote_group(c: c_int, group: *mut c_int) on c => {
        let g = inter(c)?.remote_group();
        // SAFETY: the caller's contract.
        unsafe { crate::put(group, new_group(g.as_raw())) }
    }
}
