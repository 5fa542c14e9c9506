//! `MPI_Comm_idup`, `MPI_Comm_idup_with_info` (a duplicate made at once, answered with a
//! completed request) and `MPI_Comm_create_group` (collective over the group's members only).

use crate::consts::*;
use crate::errors::inherit_handler;
use crate::handles::{comm, group, rust_comm, CommEntry, COMMS};
use crate::ok;
use p2pmpi::ffi;
use p2pmpi::topology::{Group, SimpleCommunicator};
use p2pmpi::traits::AsRaw;
use p2pmpi::traits::Communicator;
use std::os::raw::c_int;

/// `MPI_Comm_idup`: the duplicate, then a completed request.
///
/// # Safety
/// `newcomm` and `request` must be null or writable.
unsafe fn idup(c: c_int, newcomm: *mut c_int, request: *mut c_int) -> Result<(), c_int> {
    if request.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: the caller's contract.
    ok(unsafe { crate::communicators::MPI_Comm_dup(c, newcomm) })?;
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { crate::kept::completed(request) }
}

mpi_fn! {
    /// Duplicates `comm` (at once); `*request` is complete.
    fn MPI_Comm_idup(c: c_int, newcomm: *mut c_int, request: *mut c_int) on c => {
        // SAFETY: the caller's contract.
        unsafe { idup(c, newcomm, request) }
    }
}

mpi_fn! {
    /// `MPI_Comm_idup` with hints (not used).
    fn MPI_Comm_idup_with_info(c: c_int, _info: c_int, newcomm: *mut c_int, request: *mut c_int) on c => {
        // SAFETY: the caller's contract.
        unsafe { idup(c, newcomm, request) }
    }
}

/// A group of the library as the Rust API's [`Group`]: its handle and its members' world
/// ranks.
struct Members {
    raw: ffi::MPI_Group,
    world: Vec<c_int>,
}

// SAFETY: `raw` names the group whose members `world` lists, live during the call using it.
unsafe impl AsRaw for Members {
    type Raw = ffi::MPI_Group;
    fn as_raw(&self) -> ffi::MPI_Group {
        self.raw
    }
}

impl Group for Members {
    fn members_world(&self) -> &[c_int] {
        &self.world
    }
}

/// The members of group `g` (MPICH handle), a subgroup of `parent`'s, by the library's
/// world ranks (those `parent`'s members have: the world's, or a spawned world's).
fn members(parent: &SimpleCommunicator, g: c_int) -> Result<Members, c_int> {
    let raw = group(g)?;
    let mut n = 0;
    // SAFETY: `n` is a local.
    ok(unsafe { ffi::MPI_Group_size(raw, &mut n) })?;
    let pg = parent.group();
    let ranks: Vec<c_int> = (0..n).collect();
    let mut at = vec![0; n as usize];
    // SAFETY: `n` ranks in, `n` out, locals; `pg` lives during the call.
    ok(unsafe { ffi::MPI_Group_translate_ranks(raw, n, ranks.as_ptr(), pg.as_raw(), at.as_mut_ptr()) })?;
    let of_parent = pg.members_world();
    let world = at
        .iter()
        .map(|&p| usize::try_from(p).ok().and_then(|p| of_parent.get(p).copied()).ok_or(MPI_ERR_GROUP))
        .collect::<Result<Vec<c_int>, c_int>>()?;
    Ok(Members { raw, world })
}

mpi_fn! {
    /// A communicator of `group`'s members (a subgroup of `comm`'s), called by them only;
    /// `tag` tells concurrent creations apart. `MPI_COMM_NULL` on a process outside the group.
    fn MPI_Comm_create_group(c: c_int, g: c_int, tag: c_int, newcomm: *mut c_int) on c => {
        let parent = rust_comm(c)?;
        comm(c)?;
        if newcomm.is_null() {
            return Err(MPI_ERR_ARG);
        }
        if tag < 0 {
            return Err(MPI_ERR_TAG);
        }
        let m = members(&parent, g)?;
        let made = parent.split_by_subgroup_with_tag(&m, tag);
        let h = match made {
            None => MPI_COMM_NULL,
            Some(rust) => {
                let raw = rust.as_raw();
                let h = COMMS.insert(CommEntry { raw, rust });
                inherit_handler(c, h);
                h
            }
        };
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { newcomm.write(h) };
        Ok(())
    }
}
