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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// The first universe id of this process's world, and the host number of every rank of that
/// world (numbered in order of first appearance), or `None` when the hierarchical algorithms
/// are off for this job (replicated, one host, turned off).
static WORLD_HOSTS: OnceLock<Option<(i32, Arc<[u32]>)>> = OnceLock::new();

/// Collectives this process ran hierarchically (see [`super::hierarchical_collectives`]).
static RUN: AtomicU64 = AtomicU64::new(0);

/// Tag offsets of the phases (the flat tags are below 32).
const TAG_LOCAL: i32 = 32;
const TAG_INTER: i32 = 64;

/// Records the host of every rank of this process's world from the world table (`addrs[r]`'s
/// IP address, `base` the world's first universe id), once at start-up. `replicated`: the job
/// runs replicas (the hierarchy stays off).
///
/// Only the process's own world counts: a communicator with processes of other worlds (a
/// spawned job's parents or children, merged) keeps the flat algorithms, on both sides alike —
/// a spawned process knows its parents' addresses, but the parents do not know their
/// children's at start-up, and both sides must choose the same algorithm.
pub(crate) fn set_world_hosts(addrs: &[std::net::SocketAddr], base: i32, replicated: bool) {
    let off = replicated || matches!(std::env::var("P2PMPI_COLL_HIER").as_deref(), Ok("0"));
    let addrs = addrs.get(usize::try_from(base).unwrap_or(usize::MAX)..).unwrap_or_default();
    let hosts = (!off && addrs.len() > 1).then(|| {
        let mut seen: Vec<std::net::IpAddr> = Vec::new();
        addrs
            .iter()
            .map(|a| match seen.iter().position(|&ip| ip == a.ip()) {
                Some(i) => i as u32,
                None => {
                    seen.push(a.ip());
                    (seen.len() - 1) as u32
                }
            })
            .collect::<Arc<[u32]>>()
    });
    let _ = WORLD_HOSTS.set(hosts.map(|h| (base, h)));
}

pub(crate) fn run_count() -> u64 {
    RUN.load(Ordering::Relaxed)
}

/// Which ranks of a communicator share a host.
#[derive(Debug)]
pub(crate) struct HostLayout {
    /// Communicator ranks of each host, ascending; hosts in the order of their lowest rank.
    hosts: Vec<Vec<i32>>,
    /// Host (index into `hosts`) of every communicator rank.
    host_of: Vec<usize>,
    /// The lowest rank of every host (its representative by default), ascending.
    leaders: Vec<i32>,
    /// Every host holds a contiguous range of ranks (so the phases keep rank order).
    contiguous: bool,
}

impl HostLayout {
    /// The layout of a communicator whose world ranks are `world[r]`, if hierarchical
    /// collectives apply: more than one host and fewer hosts than ranks.
    pub(crate) fn build(world: impl Iterator<Item = i32>) -> Option<HostLayout> {
        let (base, table) = WORLD_HOSTS.get()?.as_ref()?;
        Self::build_from(table, world.map(|w| w - base))
    }

    /// As [`Self::build`], with `table[w]` the host of world rank `w` (a rank outside the
    /// table: no layout).
    fn build_from(table: &[u32], world: impl Iterator<Item = i32>) -> Option<HostLayout> {
        let mut ids: Vec<u32> = Vec::new();
        let mut hosts: Vec<Vec<i32>> = Vec::new();
        let mut host_of = Vec::new();
        for (r, w) in world.enumerate() {
            let id = *table.get(usize::try_from(w).ok()?)?;
            let h = match ids.iter().position(|&x| x == id) {
                Some(h) => h,
                None => {
                    ids.push(id);
                    hosts.push(Vec::new());
                    ids.len() - 1
                }
            };
            hosts[h].push(r as i32);
            host_of.push(h);
        }
        if hosts.len() < 2 || hosts.len() == host_of.len() {
            return None;
        }
        let leaders = hosts.iter().map(|m| m[0]).collect();
        let contiguous = hosts.iter().all(|m| m.windows(2).all(|w| w[1] == w[0] + 1));
        Some(HostLayout { hosts, host_of, leaders, contiguous })
    }

    /// The representatives of the hosts when `root` must be one of them: `root` stands for
    /// its own host. Returns them and `root`'s index among them.
    fn reps_with(&self, root: i32) -> (Vec<i32>, i32) {
        let rh = self.host_of[root as usize];
        let mut reps = self.leaders.clone();
        reps[rh] = root;
        (reps, rh as i32)
    }
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
    RUN.fetch_add(1, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_groups_ranks_by_host_in_rank_order() {
        // World ranks 0..6 on hosts 7, 7, 3, 3, 3, 9; the communicator holds 5, 0, 2, 3, 1.
        let table = [7, 7, 3, 3, 3, 9];
        let l = HostLayout::build_from(&table, [5, 0, 2, 3, 1].into_iter()).unwrap();
        assert_eq!(l.hosts, vec![vec![0], vec![1, 4], vec![2, 3]]);
        assert_eq!(l.host_of, vec![0, 1, 2, 2, 1]);
        assert_eq!(l.leaders, vec![0, 1, 2]);
        assert!(!l.contiguous, "host 7 holds ranks 1 and 4");
        assert_eq!(l.reps_with(4), (vec![0, 4, 2], 1));
        assert_eq!(l.reps_with(0), (vec![0, 1, 2], 0));

        let l = HostLayout::build_from(&table, 0..6).unwrap();
        assert_eq!(l.hosts, vec![vec![0, 1], vec![2, 3, 4], vec![5]]);
        assert!(l.contiguous);
    }

    #[test]
    fn no_layout_for_one_host_or_one_rank_per_host() {
        assert!(HostLayout::build_from(&[1, 1, 1, 1], 0..4).is_none(), "one host");
        assert!(HostLayout::build_from(&[0, 1, 2, 3], 0..4).is_none(), "one rank per host");
        assert!(HostLayout::build_from(&[0, 0, 1, 1], [0, 2].into_iter()).is_none(), "a subset: one per host");
        assert!(HostLayout::build_from(&[0, 0, 1, 1], [0, 1, 2].into_iter()).is_some());
        assert!(HostLayout::build_from(&[0, 0, 1, 1], [0, 1, 2, 4].into_iter()).is_none(), "another world's rank");
        assert!(HostLayout::build_from(&[0, 0, 1, 1], [-2, 0, 1, 2].into_iter()).is_none(), "a parent's rank");
    }
}
