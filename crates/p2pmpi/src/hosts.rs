//! Which ranks share a host, for the hierarchical collectives (`collective::hier`): the host of
//! every rank of this process's world, recorded once at start-up from the world table, and the
//! [`HostLayout`] of a communicator, built on its first collective and kept with it
//! (`topology::CommInner::hosts`).

use std::sync::Arc;

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
    // The host numbers are in order of first appearance; `None` when the hierarchical
    // algorithms are off for this job (replicated, one host, turned off).
    let _ = crate::context::current().world_hosts.set(hosts.map(|h| (base, h)));
}

/// Which ranks of a communicator share a host.
#[derive(Debug)]
pub(crate) struct HostLayout {
    /// Communicator ranks of each host, ascending; hosts in the order of their lowest rank.
    pub(crate) hosts: Vec<Vec<i32>>,
    /// Host (index into `hosts`) of every communicator rank.
    pub(crate) host_of: Vec<usize>,
    /// The lowest rank of every host (its representative by default), ascending.
    pub(crate) leaders: Vec<i32>,
    /// Every host holds a contiguous range of ranks (so the phases keep rank order).
    pub(crate) contiguous: bool,
}

impl HostLayout {
    /// The layout of a communicator whose world ranks are `world[r]`, if hierarchical
    /// collectives apply: more than one host and fewer hosts than ranks.
    pub(crate) fn build(world: impl Iterator<Item = i32>) -> Option<HostLayout> {
        let (base, table) = crate::context::try_current()?.world_hosts.get()?.as_ref()?;
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
    pub(crate) fn reps_with(&self, root: i32) -> (Vec<i32>, i32) {
        let rh = self.host_of[root as usize];
        let mut reps = self.leaders.clone();
        reps[rh] = root;
        (reps, rh as i32)
    }
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
