//! Hierarchical collectives: when several ranks of a communicator share a host and the
//! communicator spans several hosts, a collective runs in phases — among the ranks of each
//! host (shared memory), then among one representative per host (the network), then inside
//! each host again — so each host sends one copy of the data over the network instead of one
//! per rank.
//!
//! Which ranks share a host is known at start-up: the world table gives every process's
//! address, and distinct addresses are distinct hosts (a local grid gives each peer its own
//! loopback address). The layout of a communicator ([`HostLayout`]) is built on its first
//! collective and kept with it.
//!
//! Replicated jobs (`-r R`) keep the flat algorithms: the replicas of one rank live on
//! different hosts, so "the ranks of a host" is not a fixed set there. `P2PMPI_COLL_HIER=0`
//! turns the hierarchical algorithms off.
//!
//! Results: the phases of a reduction combine each host's ranks in rank order, then the hosts
//! in the order of their lowest ranks. That is rank order — what non-commutative operations
//! need — when every host holds a contiguous range of ranks; otherwise non-commutative
//! operations keep the flat algorithms.

use super::algorithms::{self, Coll};
use super::ops::Operation;
use crate::datatype::TypeMap;
use crate::error::Result;
use crate::hosts::HostLayout;
use std::sync::atomic::Ordering;

/// Tag offsets of the phases (the flat tags are below 32).
const TAG_LOCAL: i32 = 32;
const TAG_INTER: i32 = 64;

pub(crate) fn run_count() -> u64 {
    crate::context::try_current().map_or(0, |c| c.hier_runs.load(Ordering::Relaxed))
}

/// The layout of `c`'s communicator when `c` is the whole communicator and the hierarchical
/// algorithms apply to it.
pub(crate) fn layout<'a>(c: &Coll<'a>) -> Option<&'a HostLayout> {
    if c.ranks.is_some() || c.size < 3 {
        return None;
    }
    let inner: &'a crate::topology::CommInner = &c.h.0;
    let l = inner.hosts.get_or_init(|| HostLayout::build((0..c.size).map(|r| c.h.world_rank(r))));
    l.as_ref()
}

/// Counts a collective run hierarchically.
pub(crate) fn ran<T>(r: T) -> T {
    crate::context::current().hier_runs.fetch_add(1, Ordering::Relaxed);
    r
}

/// Fan-in to each host's leader, a flat barrier among the leaders, fan-out.
pub(crate) fn barrier(c: &Coll, l: &HostLayout) -> Result<()> {
    let me = c.rank;
    let host = &l.hosts[l.host_of[me as usize]];
    let local = c.sub(host, TAG_LOCAL);
    if local.rank != 0 {
        local.send(0, algorithms::TAG_BARRIER, &[])?;
        return local.recv(0, algorithms::TAG_BARRIER, &mut []);
    }
    for i in 1..local.size {
        local.recv(i, algorithms::TAG_BARRIER, &mut [])?;
    }
    algorithms::barrier(&c.sub(&l.leaders, TAG_INTER))?;
    for i in 1..local.size {
        local.send(i, algorithms::TAG_BARRIER, &[])?;
    }
    Ok(())
}

/// The root's data to one representative per host (the root for its own host), then from
/// each representative to its host's ranks.
pub(crate) fn bcast(c: &Coll, l: &HostLayout, buf: &mut [u8], root: i32) -> Result<()> {
    let me = c.rank;
    let (reps, root_i) = l.reps_with(root);
    let my_host = l.host_of[me as usize];
    let rep = reps[my_host];
    if me == rep {
        algorithms::bcast(&c.sub(&reps, TAG_INTER), buf, root_i)?;
    }
    let host = &l.hosts[my_host];
    let local = c.sub(host, TAG_LOCAL);
    let rep_i = host.iter().position(|&r| r == rep).expect("representative on its host") as i32;
    algorithms::bcast(&local, buf, rep_i)
}

/// Whether the phases may combine `op`'s operands in their order (see the module's notes).
fn order_kept(l: &HostLayout, op: &dyn Operation) -> bool {
    op.is_commutative() || l.contiguous
}

/// Each host reduces to its leader (in rank order), the leaders reduce to the root's host's
/// leader (in host order), which hands the result to the root. `None`: the operation needs
/// the flat algorithm (see [`order_kept`]).
pub(crate) fn reduce(
    c: &Coll,
    l: &HostLayout,
    acc: &mut Vec<u8>,
    map: &TypeMap,
    count: usize,
    op: &dyn Operation,
    root: i32,
) -> Option<Result<()>> {
    order_kept(l, op).then(|| reduce_phases(c, l, acc, map, count, op, root))
}

fn reduce_phases(
    c: &Coll,
    l: &HostLayout,
    acc: &mut Vec<u8>,
    map: &TypeMap,
    count: usize,
    op: &dyn Operation,
    root: i32,
) -> Result<()> {
    let me = c.rank;
    let host = &l.hosts[l.host_of[me as usize]];
    algorithms::reduce(&c.sub(host, TAG_LOCAL), acc, map, count, op, 0)?;
    let rh = l.host_of[root as usize];
    if me == host[0] {
        algorithms::reduce(&c.sub(&l.leaders, TAG_INTER), acc, map, count, op, rh as i32)?;
    }
    let lead = l.leaders[rh];
    if root != lead {
        if me == lead {
            c.send(root, algorithms::TAG_REDUCE + TAG_LOCAL, acc)?;
        } else if me == root {
            c.recv(lead, algorithms::TAG_REDUCE + TAG_LOCAL, acc)?;
        }
    }
    Ok(())
}

/// Each host reduces to its leader, the leaders all-reduce, each leader broadcasts the
/// result to its host. `None`: the operation needs the flat algorithm (see [`order_kept`]).
pub(crate) fn allreduce(
    c: &Coll,
    l: &HostLayout,
    acc: &mut Vec<u8>,
    map: &TypeMap,
    count: usize,
    op: &dyn Operation,
) -> Option<Result<()>> {
    order_kept(l, op).then(|| allreduce_phases(c, l, acc, map, count, op))
}

fn allreduce_phases(
    c: &Coll,
    l: &HostLayout,
    acc: &mut Vec<u8>,
    map: &TypeMap,
    count: usize,
    op: &dyn Operation,
) -> Result<()> {
    let host = &l.hosts[l.host_of[c.rank as usize]];
    let local = c.sub(host, TAG_LOCAL);
    algorithms::reduce(&local, acc, map, count, op, 0)?;
    if local.rank == 0 {
        algorithms::allreduce(&c.sub(&l.leaders, TAG_INTER), acc, map, count, op)?;
    }
    algorithms::bcast(&local, acc, 0)
}
