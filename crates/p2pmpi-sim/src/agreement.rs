//! Fault-tolerant agreement under failures: the supervisor's [`p2pmpi_core::agreement::Registry`]
//! (the very code the launcher runs) driven by simulated processes that agree, shrink and
//! agree again while some of them crash, in virtual time.
//!
//! One schedule: `n` processes run `rounds` agreements. In each round every member sends its
//! contribution (a random flag) to the supervisor after a random delay, and waits for the
//! decision; the decision travels back to each contributor with its own delay; a member that
//! got it shrinks its communicator to the decision's survivors and starts the next round on
//! the new communicator. Processes crash at random times (also between contributing and
//! hearing the decision); the supervisor learns of a crash after a random detection delay
//! (the failure detector), and a contribution that arrives after that is refused (fencing).
//!
//! Checked: every process that never crashed finishes every round; in a round, every process
//! that got a decision got the same one; its flag is the AND of the contributions the
//! supervisor accepted; every process that never crashed is a survivor of every decision;
//! every rank a decision calls failed did crash; the survivors' communicators stay equal.

use crate::rng::Rng;
use p2pmpi_core::agreement::{Decision, Input, Key, Rank, Registry};
use p2pmpi_core::machine::Machine;
use std::collections::{BTreeMap, BinaryHeap};

/// One schedule's size.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub n: u32,
    pub rounds: u32,
    /// Probability that a process crashes at some time of the run.
    pub crash: f64,
}

/// What one schedule did.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    pub crashed: u32,
    pub decisions: u32,
    /// Contributions refused because they came from a rank already declared failed.
    pub refused: u32,
    /// Crashes that happened while an agreement was open (after contributing or before).
    pub during: u32,
    /// The first violated property, if any.
    pub violation: Option<String>,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A process starts round `round` (contributes).
    Start {
        p: Rank,
        round: u32,
    },
    /// Its contribution reaches the supervisor.
    Contribution {
        p: Rank,
        key: Key,
        members: Vec<Rank>,
        flag: u32,
    },
    /// The supervisor learns that `p` crashed.
    Detected {
        p: Rank,
    },
    /// A decision reaches `p`.
    Decided {
        p: Rank,
        round: u32,
        d: (u32, Vec<Rank>, u64),
    },
    Crash {
        p: Rank,
    },
}

struct Proc {
    alive: bool,
    round: u32,
    members: Vec<Rank>,
    waiting: bool,
}

/// Runs one schedule.
pub fn run(seed: u64, cfg: Config) -> Outcome {
    let mut rng = Rng::new(seed);
    let mut out = Outcome::default();
    let mut reg = Registry::new();
    let n = cfg.n;
    let mut procs: Vec<Proc> =
        (0..n).map(|_| Proc { alive: true, round: 0, members: (0..n).collect(), waiting: false }).collect();
    // Events by (time in µs, sequence).
    let mut q: BinaryHeap<std::cmp::Reverse<(u64, u64, Ev)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |q: &mut BinaryHeap<_>, t: u64, e: Ev| {
        seq += 1;
        q.push(std::cmp::Reverse((t, seq, e)));
    };
    let horizon = 1000 * cfg.rounds as u64 * 3;
    for p in 0..n {
        push(&mut q, rng.below(1000), Ev::Start { p, round: 0 });
        if rng.bernoulli(cfg.crash) {
            push(&mut q, rng.below(horizon), Ev::Crash { p });
        }
    }
    // Per round: the decision first received, and the accepted contributions.
    let mut decisions: BTreeMap<u32, (u32, Vec<Rank>, u64)> = BTreeMap::new();
    let mut accepted: BTreeMap<u32, BTreeMap<Rank, u32>> = BTreeMap::new();
    let mut comm_of_round: BTreeMap<u32, Vec<Rank>> = BTreeMap::new();
    let mut crashed = vec![false; n as usize];
    let key = |round: u32| Key { comm: 1000 + round as u64, seq: 0 };
    let fail = |o: &mut Outcome, why: String| {
        if o.violation.is_none() {
            o.violation = Some(why);
        }
    };
    while let Some(std::cmp::Reverse((t, _, e))) = q.pop() {
        match e {
            Ev::Crash { p } => {
                let pr = &mut procs[p as usize];
                if pr.alive && pr.round < cfg.rounds {
                    pr.alive = false;
                    crashed[p as usize] = true;
                    out.crashed += 1;
                    if pr.waiting {
                        out.during += 1;
                    }
                    push(&mut q, t + 50 + rng.below(400), Ev::Detected { p });
                }
            }
            Ev::Start { p, round } => {
                let pr = &mut procs[p as usize];
                if !pr.alive {
                    continue;
                }
                pr.waiting = true;
                let flag = (rng.next_u64() as u32) | (rng.next_u64() as u32);
                let members = pr.members.clone();
                match comm_of_round.get(&round) {
                    Some(m) if *m != members => {
                        fail(&mut out, format!("round {round}: rank {p} has members {members:?}, another {m:?}"))
                    }
                    Some(_) => {}
                    None => {
                        comm_of_round.insert(round, members.clone());
                    }
                }
                push(&mut q, t + 1 + rng.below(300), Ev::Contribution { p, key: key(round), members, flag });
            }
            Ev::Contribution { p, key: k, members, flag } => {
                let round = (k.comm - 1000) as u32;
                // A contribution after the decision is answered, not counted.
                let open = reg.decision(k).is_none();
                let now = std::time::Duration::from_micros(t);
                let contribution = Input::Contribute { key: k, from: p, members: members.clone(), flag };
                match reg.handle_input(now, contribution).map(|()| reg.poll_output().map(|o| o.decision)) {
                    Ok(d) => {
                        if open {
                            accepted.entry(round).or_default().insert(p, flag);
                        }
                        if let Some(d) = d.filter(|_| open) {
                            if let Some(v) = complete(&reg, &members, &d) {
                                fail(&mut out, format!("round {round}: {v}"));
                            }
                            deliver(&mut q, &mut push, &mut rng, t, &members, round, &d, &procs);
                        }
                    }
                    Err(_) => out.refused += 1,
                }
            }
            Ev::Detected { p } => {
                let _ = reg.handle_input(std::time::Duration::from_micros(t), Input::RankFailed(p));
                for (k, d) in reg.drain_outputs().into_iter().map(|o| (o.key, o.decision)) {
                    let round = (k.comm - 1000) as u32;
                    let members = comm_of_round.get(&round).cloned().unwrap_or_default();
                    if let Some(v) = complete(&reg, &members, &d) {
                        fail(&mut out, format!("round {round}: {v}"));
                    }
                    deliver(&mut q, &mut push, &mut rng, t, &members, round, &d, &procs);
                }
            }
            Ev::Decided { p, round, d } => {
                match decisions.get(&round) {
                    Some(first) if *first != d => {
                        fail(&mut out, format!("round {round}: rank {p} decided {d:?}, another {first:?}"))
                    }
                    Some(_) => {}
                    None => {
                        out.decisions += 1;
                        decisions.insert(round, d.clone());
                    }
                }
                let pr = &mut procs[p as usize];
                if !pr.alive || pr.round != round || !pr.waiting {
                    continue;
                }
                pr.waiting = false;
                let dec = Decision { flag: d.0, failed: d.1.clone(), id: d.2 };
                pr.members = dec.survivors(&pr.members);
                pr.round += 1;
                if pr.round < cfg.rounds {
                    push(&mut q, t + 1 + rng.below(200), Ev::Start { p, round: pr.round });
                }
            }
        }
    }
    // The properties.
    for (round, (flag, failed, _)) in &decisions {
        let acc = accepted.get(round).cloned().unwrap_or_default();
        let and = acc.values().fold(u32::MAX, |a, &v| a & v);
        if and != *flag {
            fail(&mut out, format!("round {round}: flag {flag:#x}, but the accepted contributions AND to {and:#x}"));
        }
        for r in failed {
            if !crashed[*r as usize] {
                fail(&mut out, format!("round {round}: rank {r} called failed but never crashed"));
            }
        }
        let members = comm_of_round.get(round).cloned().unwrap_or_default();
        for r in members.iter().filter(|r| !failed.contains(r)) {
            if !acc.contains_key(r) {
                fail(&mut out, format!("round {round}: survivor {r} did not contribute"));
            }
        }
    }
    for (p, pr) in procs.iter().enumerate() {
        if !crashed[p] && pr.round != cfg.rounds {
            fail(&mut out, format!("rank {p} never crashed but stopped at round {} of {}", pr.round, cfg.rounds));
        }
    }
    out
}

/// The decision names every member the supervisor knew failed when it decided: a shrink
/// must never keep a rank already declared dead.
fn complete(reg: &Registry, members: &[Rank], d: &Decision) -> Option<String> {
    let known: Vec<Rank> = members.iter().copied().filter(|r| reg.failed().contains(r)).collect();
    let mut want = known.clone();
    want.sort_unstable();
    (want != d.failed).then(|| format!("decision names {:?} failed, the supervisor knew {want:?}", d.failed))
}

/// Sends decision `d` of `round` to every member still alive (each with its own delay).
#[allow(clippy::too_many_arguments)]
fn deliver(
    q: &mut BinaryHeap<std::cmp::Reverse<(u64, u64, Ev)>>,
    push: &mut impl FnMut(&mut BinaryHeap<std::cmp::Reverse<(u64, u64, Ev)>>, u64, Ev),
    rng: &mut Rng,
    t: u64,
    members: &[Rank],
    round: u32,
    d: &Decision,
    procs: &[Proc],
) {
    for &m in members {
        if procs[m as usize].alive {
            push(q, t + 1 + rng.below(300), Ev::Decided { p: m, round, d: (d.flag, d.failed.clone(), d.id) });
        }
    }
}

/// Totals of many schedules.
#[derive(Debug, Default)]
pub struct Totals {
    pub schedules: u64,
    pub passed: u64,
    pub crashed: u64,
    pub during: u64,
    pub refused: u64,
    pub decisions: u64,
    /// The first failing schedules' seeds and what they violated.
    pub failures: Vec<(u64, String)>,
}

/// Runs `schedules` schedules (sizes 2–16, 1–6 rounds, crash probability up to 0.5), seeds
/// derived from `seed`.
pub fn run_many(seed: u64, schedules: u64) -> Totals {
    let mut t = Totals::default();
    for i in 0..schedules {
        let s = crate::rng::derive_seed(seed, &[0xa9, i]);
        let mut r = Rng::new(s ^ 0x5eed);
        let cfg = Config { n: 2 + r.below(15) as u32, rounds: 1 + r.below(6) as u32, crash: r.f64() * 0.5 };
        let o = run(s, cfg);
        t.schedules += 1;
        t.crashed += o.crashed as u64;
        t.during += o.during as u64;
        t.refused += o.refused as u64;
        t.decisions += o.decisions as u64;
        match o.violation {
            None => t.passed += 1,
            Some(v) if t.failures.len() < 10 => t.failures.push((s, format!("{cfg:?}: {v}"))),
            Some(_) => {}
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schedule_agrees_and_survivors_finish() {
        let t = run_many(42, 3000);
        assert!(t.failures.is_empty(), "{:?}", t.failures);
        assert_eq!(t.passed, 3000);
        // The schedules do exercise failures during agreements and fenced contributions.
        assert!(t.during > 100, "{t:?}");
        assert!(t.crashed > 1000, "{t:?}");
    }

    #[test]
    fn without_crashes_every_round_is_decided_once() {
        let cfg = Config { n: 6, rounds: 3, crash: 0.0 };
        let o = run(7, cfg);
        assert!(o.violation.is_none(), "{o:?}");
        assert_eq!(o.decisions, 3);
    }
}
