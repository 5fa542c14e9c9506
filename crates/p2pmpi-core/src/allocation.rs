//! Reservation arithmetic and host allocation (thesis §3.3.2 and §3.4, algorithms 1–3).
//!
//! Pure functions over what the reservation service learned: hosts sorted by increasing
//! round-trip time, each with its `MAX_PROCESSES_PER_JOB` (P). They decide how many hosts to
//! book, which reserved hosts to keep (*slist*), whether the job fits, how many processes each
//! host gets (*spread* or *concentrate*) and which MPI ranks they are, so that the R copies of
//! a rank always land on R different hosts.

use std::fmt;
use std::str::FromStr;

/// How processes are spread over the selected hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// One process per host, hosts in increasing latency, round-robin when the list is
    /// exhausted: the most memory per process (algorithm 1; user-guide name `scatter`).
    Spread,
    /// Fill each host up to its capacity, hosts in increasing latency: the most locality
    /// (algorithm 2; user-guide name `gather`).
    Concentrate,
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "spread" | "scatter" => Ok(Strategy::Spread),
            "concentrate" | "gather" => Ok(Strategy::Concentrate),
            other => Err(format!("unknown allocation strategy {other:?} (use spread or concentrate)")),
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::Spread => "spread",
            Strategy::Concentrate => "concentrate",
        })
    }
}

/// Hosts to book for `n` ranks replicated `r` times: n×r plus an overbooking of
/// 3·log2(n×r) (rounded up) to anticipate hosts that refuse or do not answer.
pub fn booking_count(n: usize, r: usize) -> usize {
    let need = n * r;
    if need <= 1 {
        return need;
    }
    need + (3.0 * (need as f64).log2()).ceil() as usize
}

/// The hosts kept among those that accepted (*rlist*, in increasing latency): at most n×r
/// of them (*slist* = rlist[1 .. min(|rlist|, n×r)]); the others' reservations are cancelled.
pub fn select(accepted: usize, n: usize, r: usize) -> usize {
    accepted.min(n * r)
}

/// Why an allocation cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Infeasible {
    /// Fewer hosts than replicas: two copies of a rank would share a host.
    TooFewHosts { hosts: usize, replicas: usize },
    /// The hosts cannot hold every process.
    TooLittleCapacity { capacity: usize, needed: usize },
}

impl fmt::Display for Infeasible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Infeasible::TooFewHosts { hosts, replicas } => {
                write!(f, "{hosts} host(s) reserved, but {replicas} replicas need {replicas} different hosts")
            }
            Infeasible::TooLittleCapacity { capacity, needed } => {
                write!(f, "the reserved hosts can run {capacity} process(es), {needed} are needed")
            }
        }
    }
}

/// Capacity of each selected host: c_i = min(P_i, n) (more than n processes on one host
/// would put two copies of a rank there).
pub fn capacities(p: &[usize], n: usize) -> Vec<usize> {
    p.iter().map(|&pi| pi.min(n)).collect()
}

/// The feasibility test: |slist| ≥ r and Σ c_i ≥ n×r.
pub fn feasible(caps: &[usize], n: usize, r: usize) -> Result<(), Infeasible> {
    if caps.len() < r {
        return Err(Infeasible::TooFewHosts { hosts: caps.len(), replicas: r });
    }
    let capacity: usize = caps.iter().sum();
    if capacity < n * r {
        return Err(Infeasible::TooLittleCapacity { capacity, needed: n * r });
    }
    Ok(())
}

/// How many processes each host gets (u_i), by algorithm 1 (spread) or 2 (concentrate).
/// Call only when [`feasible`].
pub fn place(strategy: Strategy, caps: &[usize], n: usize, r: usize) -> Vec<usize> {
    let total = n * r;
    let mut u = vec![0usize; caps.len()];
    let mut d = 0;
    match strategy {
        Strategy::Spread => {
            // Round-robin over the hosts, one process per pass, skipping full hosts.
            while d < total {
                let before = d;
                for i in 0..caps.len() {
                    if d == total {
                        break;
                    }
                    if u[i] < caps[i] {
                        u[i] += 1;
                        d += 1;
                    }
                }
                if d == before {
                    break; // no capacity left (not feasible)
                }
            }
        }
        Strategy::Concentrate => {
            for i in 0..caps.len() {
                if d == total {
                    break;
                }
                u[i] = caps[i].min(total - d);
                d += u[i];
            }
        }
    }
    u
}

/// Algorithm 3: ranks 0 … n−1 assigned along the hosts according to u_i, wrapping to 0 after
/// n − 1. Returns the ranks each host runs (empty: cancel that host's reservation).
pub fn distribute_ranks(u: &[usize], n: usize) -> Vec<Vec<usize>> {
    let mut rank = 0;
    u.iter()
        .map(|&ui| {
            (0..ui)
                .map(|_| {
                    let r = rank;
                    rank = (rank + 1) % n.max(1);
                    r
                })
                .collect()
        })
        .collect()
}

/// The whole decision: from the P of each accepted host (in increasing latency) to the ranks
/// each selected host runs. Hosts beyond *slist* and hosts with no process get no ranks.
pub fn allocate(strategy: Strategy, accepted_p: &[usize], n: usize, r: usize) -> Result<Vec<Vec<usize>>, Infeasible> {
    let keep = select(accepted_p.len(), n, r);
    let caps = capacities(&accepted_p[..keep], n);
    feasible(&caps, n, r)?;
    let u = place(strategy, &caps, n, r);
    let mut ranks = distribute_ranks(&u, n);
    ranks.resize(accepted_p.len(), Vec::new());
    Ok(ranks)
}

/// Orders hosts by increasing measured round-trip time (ties keep their order), the ranking
/// allocation relies on. Returns the indices of `rtts` in that order.
pub fn by_latency<T: PartialOrd>(rtts: &[T]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..rtts.len()).collect();
    idx.sort_by(|&a, &b| rtts[a].partial_cmp(&rtts[b]).unwrap_or(std::cmp::Ordering::Equal));
    idx
}

#[cfg(test)]
mod tests {
    use super::Strategy;
    use super::*;
    use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest};

    #[test]
    fn names_and_booking() {
        assert_eq!("scatter".parse::<Strategy>(), Ok(Strategy::Spread));
        assert_eq!("GATHER".parse::<Strategy>(), Ok(Strategy::Concentrate));
        assert!("random".parse::<Strategy>().is_err());
        assert_eq!(booking_count(1, 1), 1);
        assert_eq!(booking_count(4, 1), 4 + 6);
        assert_eq!(booking_count(8, 2), 16 + 12);
        assert_eq!(booking_count(10, 1), 10 + 10); // 3·log2(10) = 9.97 → 10
    }

    #[test]
    fn spread_and_concentrate_as_in_the_thesis() {
        let caps = capacities(&[4, 4, 4], 6);
        assert_eq!(place(Strategy::Spread, &caps, 6, 1), vec![2, 2, 2]);
        assert_eq!(place(Strategy::Concentrate, &caps, 6, 1), vec![4, 2, 0]);
        let ranks = allocate(Strategy::Concentrate, &[4, 4, 4], 6, 1).unwrap();
        assert_eq!(ranks, vec![vec![0, 1, 2, 3], vec![4, 5], vec![]]);
        // spread wraps round-robin when hosts are fewer than processes
        assert_eq!(place(Strategy::Spread, &capacities(&[3, 1, 3], 5), 5, 1), vec![2, 1, 2]);
    }

    #[test]
    fn replicas_land_on_different_hosts() {
        let ranks = allocate(Strategy::Spread, &[2, 2, 2], 3, 2).unwrap();
        assert_eq!(ranks, vec![vec![0, 1], vec![2, 0], vec![1, 2]]);
    }

    #[test]
    fn infeasible_cases_say_why() {
        assert_eq!(feasible(&[4], 2, 2), Err(Infeasible::TooFewHosts { hosts: 1, replicas: 2 }));
        assert_eq!(
            allocate(Strategy::Spread, &[1, 1], 3, 1),
            Err(Infeasible::TooLittleCapacity { capacity: 2, needed: 3 })
        );
        assert!(Infeasible::TooLittleCapacity { capacity: 2, needed: 3 }.to_string().contains("3 are needed"));
        // P larger than n is capped: one host cannot hold two copies of a rank.
        assert_eq!(feasible(&capacities(&[10, 10], 3), 3, 3), Err(Infeasible::TooFewHosts { hosts: 2, replicas: 3 }));
    }

    #[test]
    fn latency_ranking() {
        assert_eq!(by_latency(&[3.0, 1.0, 2.0, 1.0]), vec![1, 3, 2, 0]);
    }

    proptest! {
        #[test]
        fn every_rank_gets_r_copies_on_r_distinct_hosts(
            p in proptest::collection::vec(1usize..6, 0..12),
            n in 1usize..12,
            r in 1usize..4,
            concentrate in any::<bool>(),
        ) {
            let s = if concentrate { Strategy::Concentrate } else { Strategy::Spread };
            match allocate(s, &p, n, r) {
                Ok(ranks) => {
                    let keep = select(p.len(), n, r);
                    prop_assert!(ranks[keep..].iter().all(Vec::is_empty), "only slist hosts get ranks");
                    for (i, host) in ranks.iter().enumerate() {
                        prop_assert!(host.len() <= p[i].min(n), "capacity respected");
                        let mut seen = host.clone();
                        seen.sort();
                        seen.dedup();
                        prop_assert_eq!(seen.len(), host.len(), "no two copies of a rank on one host");
                    }
                    for rank in 0..n {
                        let copies = ranks.iter().filter(|h| h.contains(&rank)).count();
                        prop_assert_eq!(copies, r, "rank {} has {} copies", rank, copies);
                    }
                    let u: Vec<usize> = ranks.iter().map(Vec::len).collect();
                    if concentrate {
                        // hosts fill in latency order: a later host is used only if earlier ones are full
                        for i in 0..keep {
                            if u[i + 1..keep].iter().any(|&x| x > 0) {
                                prop_assert_eq!(u[i], p[i].min(n));
                            }
                        }
                    } else {
                        // spread: loads differ by at most one among hosts that are not full
                        let open: Vec<usize> = (0..keep).filter(|&i| u[i] < p[i].min(n)).map(|i| u[i]).collect();
                        if let (Some(lo), Some(hi)) = (open.iter().min(), u[..keep].iter().max()) {
                            prop_assert!(hi - lo <= 1, "spread is balanced: {:?}", u);
                        }
                    }
                }
                Err(e) => {
                    let caps = capacities(&p[..select(p.len(), n, r)], n);
                    prop_assert!(caps.len() < r || caps.iter().sum::<usize>() < n * r, "{e}");
                }
            }
        }
    }
}
