//! Intercommunicators: `MPI_Intercomm_create`, `MPI_Intercomm_merge`,
//! `MPI_Comm_remote_size`, `MPI_Comm_remote_group`, on the Rust library's intercommunicators.
//! Point-to-point on an intercommunicator names ranks of the other group; `MPI_Comm_size`,
//! `MPI_Comm_rank` and `MPI_Comm_group` answer for the local group, `MPI_Comm_test_inter`
//! says it is one; the collectives the library runs on intercommunicators (`MPI_Barrier`,
//! `MPI_Allreduce`, `MPI_Allgather`, `MPI_Alltoall`, `MPI_Reduce_scatter_block`) work across
//! them.

use crate::consts::*;
use crate::errors::{class_of_failure, inherit_handler};
use crate::handles::{comm, group, new_group, rust_comm, CommEntry, COMMS};
use p2pmpi::collective::TryCollectives;
use p2pmpi::ffi;
use p2pmpi::topology::{try_create_intercommunicator, Color, InterCommunicator, MergeOrder, SimpleCommunicator};
use p2pmpi::traits::{AsRaw, Communicator, FromRaw, Group};
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

/// A tag of the library's for the intercommunicators made here (`MPI_Comm_split` over an
/// intercommunicator, `MPI_Intercomm_create_from_groups`).
const TAG_MADE: c_int = 0x3c5e;

/// `MPI_Comm_split` (and `MPI_Comm_dup`, `MPI_Comm_split_type`) over intercommunicator `c`:
/// the processes of each group with one `color` make an intercommunicator with those of the
/// other group with the same color, ordered by `key` then rank; `MPI_COMM_NULL` where the
/// color is `MPI_UNDEFINED` or the other group has no process of that color. Built on the
/// intercommunicator's carrier ([`crate::intercoll`]): every process learns every color, each
/// color's local group is split off the carrier, and its leader meets the other group's over
/// the carrier. `None` when `c` is an intracommunicator.
pub(crate) fn split(c: c_int, color: c_int, key: c_int) -> Result<Option<c_int>, c_int> {
    let Some(k) = crate::intercoll::carrier(c)? else { return Ok(None) };
    let merged = rust_comm(k.merged)?;
    let group = k.group();
    let mine = [group, color, key];
    let mut all = vec![0 as c_int; 3 * merged.size() as usize];
    merged.try_all_gather_into(&mine[..], &mut all[..]).map_err(class_of_failure)?;
    let local_color = if color == MPI_UNDEFINED {
        MPI_UNDEFINED
    } else {
        color.checked_mul(2).and_then(|x| x.checked_add(group)).ok_or(MPI_ERR_ARG)?
    };
    let color_of = if local_color == MPI_UNDEFINED { Color::undefined() } else { Color::with_value(local_color) };
    let part = merged.try_split_by_color_with_key(color_of, key).map_err(class_of_failure)?;
    // The other group's leader for this color: the least key, then the least rank.
    let leader = all
        .chunks_exact(3)
        .enumerate()
        .filter(|(_, e)| e[0] != group && e[1] == color && color != MPI_UNDEFINED)
        .min_by_key(|(r, e)| (e[2], *r))
        .map(|(r, _)| r as c_int);
    let (Some(part), Some(leader)) = (part, leader) else { return Ok(Some(MPI_COMM_NULL)) };
    let ic = try_create_intercommunicator(&part, 0, &merged, leader, TAG_MADE).map_err(class_of_failure)?;
    Ok(Some(keep(ic.as_raw(), c)))
}

mpi_fn! {
    /// Makes an intercommunicator of `local_group` (this process's) and `remote_group`, whose
    /// leaders are rank `local_leader` of the first and `remote_leader` of the second;
    /// collective over both groups. The groups' processes find each other through the world.
    fn MPI_Intercomm_create_from_groups(
        local_group: c_int,
        local_leader: c_int,
        remote_group: c_int,
        remote_leader: c_int,
        stringtag: *const std::os::raw::c_char,
        _info: c_int,
        _errhandler: c_int,
        newintercomm: *mut c_int,
    ) on MPI_COMM_WORLD => {
        if newintercomm.is_null() {
            return Err(MPI_ERR_ARG);
        }
        let world = SimpleCommunicator::world();
        let to_world = |g: c_int, ranks: &[c_int]| -> Result<Vec<c_int>, c_int> {
            let (fg, wg) = (group(g)?, world.group());
            let mut out = vec![0; ranks.len()];
            // SAFETY: `ranks` and `out` are locals of the same length.
            crate::ok(unsafe {
                ffi::MPI_Group_translate_ranks(fg, ranks.len() as c_int, ranks.as_ptr(), wg.as_raw(), out.as_mut_ptr())
            })?;
            Ok(out)
        };
        let mut n = 0;
        // SAFETY: `n` is a local.
        crate::ok(unsafe { ffi::MPI_Group_size(group(local_group)?, &mut n) })?;
        let members = to_world(local_group, &(0..n).collect::<Vec<_>>())?;
        let leader = *to_world(remote_group, &[remote_leader])?.first().ok_or(MPI_ERR_RANK)?;
        if leader < 0 {
            return Err(MPI_ERR_RANK);
        }
        // A tag from the string, the same in both groups.
        let tag = if stringtag.is_null() {
            TAG_MADE
        } else {
            // SAFETY: the caller vouches for a C string.
            let s = unsafe { std::ffi::CStr::from_ptr(stringtag) }.to_bytes();
            (s.iter().fold(2166136261u32, |h, &b| (h ^ b as u32).wrapping_mul(16777619)) & 0x3fff) as c_int
        };
        let local = world.split_by_subgroup_with_tag(&world.group().include(&members), tag).ok_or(MPI_ERR_GROUP)?;
        let ic = try_create_intercommunicator(&local, local_leader, &world, leader, tag).map_err(class_of_failure)?;
        let h = keep(ic.as_raw(), MPI_COMM_WORLD);
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { newintercomm.write(h) };
        Ok(())
    }
}
