//! Collectives over an intercommunicator (MPI's intercommunicator semantics: each group's
//! result comes from the *other* group's contributions).
//!
//! They are the ones rsmpi's API can express over an intercommunicator — those without a
//! root: `barrier`, `all_gather_into`, `all_to_all_into`, `all_reduce_into`,
//! `reduce_scatter_block_into`. (A rooted collective over an intercommunicator needs MPI's
//! `MPI_ROOT`/`MPI_PROC_NULL` roots, which rsmpi's `Root` cannot name; scans are not defined
//! over intercommunicators.) Every other collective over one is refused with a clear error.
//!
//! Each runs in three phases: inside the local group (its communicator's own algorithms), an
//! exchange between the two groups' rank 0 (the *leaders*) over the intercommunicator's
//! collective context, and again inside the local group. `all_to_all_into` instead sends
//! every block straight to its remote rank.

use super::algorithms::{self, Coll, TAG_ALLGATHER, TAG_ALLREDUCE, TAG_ALLTOALL, TAG_BARRIER};
use super::{check_len, packed, target, Buffer, BufferMut, Operation};
use crate::error::{Error, Result};
use crate::topology::CommHandle;

/// The local group's communicator of the intercommunicator whose remote side is `h`.
pub(super) fn local_of(h: &CommHandle) -> Option<&CommHandle> {
    h.0.inter_local.as_ref()
}

/// The leaders exchange `out` for exactly `inp.len()` bytes.
fn leaders_exchange(remote: &CommHandle, name: &'static str, tag: i32, out: &[u8], inp: &mut [u8]) -> Result<()> {
    Coll::new_inter(remote, name).sendrecv(0, out, 0, inp, tag)
}

/// Returns once every process of both groups has entered.
pub(super) fn barrier(remote: &CommHandle, local: &CommHandle) -> Result<()> {
    let c = Coll::new(local, "barrier");
    algorithms::barrier(&c)?;
    if local.rank() == 0 {
        leaders_exchange(remote, "barrier", TAG_BARRIER, &[], &mut [])?;
    }
    // Nobody leaves before its leader has heard from the other group's, which entered only
    // once all of its group had.
    algorithms::barrier(&c)
}

/// Every process gets the remote group's contributions, in remote rank order.
pub(super) fn all_gather<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
    remote: &CommHandle,
    local: &CommHandle,
    s: &S,
    r: &mut R,
) -> Result<()> {
    let name = "all_gather_into";
    let c = Coll::new(local, name);
    let p = packed(s);
    let block = p.bytes.len();
    let mut t = target(r);
    let theirs = t.len();
    if theirs % remote.size().max(1) as usize != 0 {
        return Err(Error::Collective(format!(
            "{name}: a receive buffer of {theirs} bytes does not hold {} equal blocks",
            remote.size()
        )));
    }
    // The local group's blocks at its leader...
    if local.rank() == 0 {
        let mut all = vec![0u8; block * local.size() as usize];
        all[..block].copy_from_slice(&p.bytes);
        gather_to_leader(&c, &p.bytes, &mut all)?;
        // ...swapped for the remote group's...
        leaders_exchange(remote, name, TAG_ALLGATHER, &all, t.bytes())?;
    } else {
        gather_to_leader(&c, &p.bytes, &mut [])?;
    }
    // ...which every local process gets.
    algorithms::bcast(&c, t.bytes(), 0)?;
    t.finish();
    Ok(())
}

/// Gathers each local process's `mine` (all the same length) into `all` at rank 0.
fn gather_to_leader(c: &Coll, mine: &[u8], all: &mut [u8]) -> Result<()> {
    if c.rank == 0 {
        let parts = all.chunks_mut(mine.len().max(1)).take(c.size as usize).collect::<Vec<_>>();
        let parts = if mine.is_empty() { (0..c.size).map(|_| <&mut [u8]>::default()).collect() } else { parts };
        algorithms::gatherv(c, mine, Some(parts), 0)
    } else {
        algorithms::gatherv(c, mine, None, 0)
    }
}

/// Reduces the local group's `s` with `op` at its leader, which swaps the result for the
/// remote group's: written into `theirs` (whose length the caller knows) at the leader only.
fn reduce_and_swap<S: ?Sized + Buffer>(
    remote: &CommHandle,
    c: &Coll,
    s: &S,
    op: &dyn Operation,
    theirs: &mut [u8],
) -> Result<()> {
    let p = packed(s);
    let mut acc = crate::pool::Scratch::copy_of(&p.bytes);
    algorithms::reduce(c, &mut acc, &p.map, p.count, op, 0)?;
    if c.rank == 0 {
        leaders_exchange(remote, c.name, TAG_ALLREDUCE, &acc, theirs)?;
    }
    Ok(())
}

/// Every process gets the reduction, with `op`, of the remote group's contributions.
pub(super) fn all_reduce<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
    remote: &CommHandle,
    local: &CommHandle,
    s: &S,
    r: &mut R,
    op: &dyn Operation,
) -> Result<()> {
    let c = Coll::new(local, "all_reduce_into");
    let mut t = target(r);
    check_len(c.name, t.len(), packed(s).bytes.len())?;
    reduce_and_swap(remote, &c, s, op, t.bytes())?;
    algorithms::bcast(&c, t.bytes(), 0)?;
    t.finish();
    Ok(())
}

/// Each process gives one block per remote rank; local rank i gets block i of the
/// reduction, with `op`, of the remote group's vectors.
pub(super) fn reduce_scatter_block<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
    remote: &CommHandle,
    local: &CommHandle,
    s: &S,
    r: &mut R,
    op: &dyn Operation,
) -> Result<()> {
    let c = Coll::new(local, "reduce_scatter_block_into");
    let mut t = target(r);
    let block = t.len();
    let n = local.size() as usize;
    // The groups reduce their vectors and the leaders swap them, each then holding one block
    // per local rank...
    let mut theirs = vec![0u8; if local.rank() == 0 { block * n } else { 0 }];
    reduce_and_swap(remote, &c, s, op, &mut theirs)?;
    // ...which it scatters.
    let parts = (local.rank() == 0).then(|| theirs.chunks(block.max(1)).take(n).collect::<Vec<_>>());
    let parts = parts.map(|v| if block == 0 { vec![&[][..]; n] } else { v });
    algorithms::scatterv(&c, parts, t.bytes(), 0)?;
    t.finish();
    Ok(())
}

/// Block j of `s` goes to remote rank j; block j of `r` comes from remote rank j.
pub(super) fn all_to_all<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
    remote: &CommHandle,
    s: &S,
    r: &mut R,
) -> Result<()> {
    let name = "all_to_all_into";
    let c = Coll::new_inter(remote, name);
    let m = remote.size() as usize;
    let p = packed(s);
    let mut t = target(r);
    check_len(name, t.len(), p.bytes.len())?;
    if p.bytes.len() % m.max(1) != 0 {
        return Err(Error::Collective(format!("{name}: {} bytes do not split into {m} blocks", p.bytes.len())));
    }
    let block = p.bytes.len() / m.max(1);
    let recv: Vec<&mut [u8]> = if block == 0 {
        (0..m).map(|_| <&mut [u8]>::default()).collect()
    } else {
        t.bytes().chunks_mut(block).take(m).collect()
    };
    // Every receive is posted before any send.
    let mut reqs = Vec::with_capacity(2 * m);
    for (j, part) in recv.into_iter().enumerate() {
        reqs.push(c.irecv(j as i32, TAG_ALLTOALL, part)?);
    }
    for j in 0..m {
        reqs.push(c.isend(j as i32, TAG_ALLTOALL, &p.bytes[j * block..(j + 1) * block])?);
    }
    c.wait_all(reqs)?;
    t.finish();
    Ok(())
}
