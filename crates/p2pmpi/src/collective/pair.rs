//! Collectives of two processes. Between two processes every collective is at most one
//! message each way, so these paths send it straight from the caller's packed bytes and
//! receive it straight into the result: no staging copy, no list of requests, and for
//! operands up to a few hundred bytes no pooled buffer (see [`Tmp`]). Both processes of a
//! two-process communicator take these paths (whatever `P2PMPI_COLL_<OPERATION>` forces),
//! so their messages match; the collective context and the per-(source, tag) order keep
//! consecutive collectives apart, as for the general algorithms.
//!
//! Reductions keep rank order (x0 ∘ x1, `combine(input, inout)` making `inout = input ∘
//! inout`), so non-commutative operations get the same result as on any other path.

use super::algorithms::{Coll, Tmp, TAG_ALLREDUCE, TAG_ALLTOALL, TAG_GATHER, TAG_REDUCE, TAG_SCATTER};
use super::ops::Operation;
use crate::datatype::TypeMap;
use crate::error::Result;

/// The other process, when `c` is a whole intracommunicator of two processes.
#[inline]
pub(crate) fn partner(c: &Coll) -> Option<i32> {
    (c.size == 2 && c.ranks.is_none() && !c.inter && c.h.0.inter_local.is_none()).then(|| 1 - c.rank)
}

/// Reduce at the root: the other process sends its operand (as the binomial tree's leaf
/// does), the root combines it with its own in rank order into `out` (`out = x0 ∘ x1`).
pub(crate) fn reduce_root(
    c: &Coll,
    other: i32,
    mine: &[u8],
    out: &mut [u8],
    map: &TypeMap,
    count: usize,
    op: &dyn Operation,
) -> Result<()> {
    if c.rank == 0 {
        // out = theirs, then mine ∘ out.
        c.recv(other, TAG_REDUCE, out)?;
        op.combine(map, count, mine, out);
    } else {
        let mut theirs = Tmp::zeroed(out.len());
        c.recv(other, TAG_REDUCE, &mut theirs)?;
        out.copy_from_slice(mine);
        op.combine(map, count, &theirs, out);
    }
    Ok(())
}

/// Reduce, not at the root: the operand goes to the root as it is.
pub(crate) fn reduce_leaf(c: &Coll, root: i32, mine: &[u8]) -> Result<()> {
    c.send(root, TAG_REDUCE, mine)
}

/// Allreduce: the operands cross (one message each way), each process combines them in rank
/// order into `out`.
pub(crate) fn allreduce(
    c: &Coll,
    other: i32,
    mine: &[u8],
    out: &mut [u8],
    map: &TypeMap,
    count: usize,
    op: &dyn Operation,
) -> Result<()> {
    if c.rank == 0 {
        c.sendrecv(other, mine, other, out, TAG_ALLREDUCE)?;
        op.combine(map, count, mine, out);
    } else {
        let mut theirs = Tmp::zeroed(out.len());
        c.sendrecv(other, mine, other, &mut theirs, TAG_ALLREDUCE)?;
        out.copy_from_slice(mine);
        op.combine(map, count, &theirs, out);
    }
    Ok(())
}

/// Reduce-scatter by blocks: each process sends the partner the block the partner keeps and
/// combines the block it keeps — one message each way, where reduce-then-scatter takes two in
/// a row. `mine` holds both blocks (block i for rank i), `out` one block of `count` elements.
pub(crate) fn reduce_scatter_block(
    c: &Coll,
    other: i32,
    mine: &[u8],
    out: &mut [u8],
    map: &TypeMap,
    count: usize,
    op: &dyn Operation,
) -> Result<()> {
    let b = out.len();
    let (me, o) = (c.rank as usize, other as usize);
    let (keep, give) = (&mine[me * b..(me + 1) * b], &mine[o * b..(o + 1) * b]);
    if c.rank == 0 {
        c.sendrecv(other, give, other, out, TAG_ALLREDUCE)?;
        op.combine(map, count, keep, out);
    } else {
        let mut theirs = Tmp::zeroed(b);
        c.sendrecv(other, give, other, &mut theirs, TAG_ALLREDUCE)?;
        out.copy_from_slice(keep);
        op.combine(map, count, &theirs, out);
    }
    Ok(())
}

/// Gather at the root: its own block copied, the other's received in place in `all`.
pub(crate) fn gather_root(c: &Coll, other: i32, mine: &[u8], all: &mut [u8]) -> Result<()> {
    let b = mine.len();
    let (me, o) = (c.rank as usize, other as usize);
    all[me * b..(me + 1) * b].copy_from_slice(mine);
    c.recv(other, TAG_GATHER, &mut all[o * b..(o + 1) * b])
}

/// Scatter at the root: the other's block sent from `all` in place, its own copied.
pub(crate) fn scatter_root(c: &Coll, other: i32, all: &[u8], mine: &mut [u8]) -> Result<()> {
    let b = mine.len();
    let (me, o) = (c.rank as usize, other as usize);
    c.send(other, TAG_SCATTER, &all[o * b..(o + 1) * b])?;
    mine.copy_from_slice(&all[me * b..(me + 1) * b]);
    Ok(())
}

/// All-to-all: the own block copied, the other's crossing in one message each way.
pub(crate) fn alltoall(c: &Coll, other: i32, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let b = send.len() / 2;
    let (me, o) = (c.rank as usize, other as usize);
    recv[me * b..(me + 1) * b].copy_from_slice(&send[me * b..(me + 1) * b]);
    c.sendrecv(other, &send[o * b..(o + 1) * b], other, &mut recv[o * b..(o + 1) * b], TAG_ALLTOALL)
}
