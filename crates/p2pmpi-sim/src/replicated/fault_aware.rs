//! Fault-aware jobs (the parent module's "Fault-aware jobs"): the program handles failures,
//! whole ranks are lost on purpose, receives from them fail, and the replicas of a rank
//! follow their master's outcomes as the library's do (`crates/p2pmpi/src/device/replication.rs`:
//! `post_failure`, `decide_failure`, `apply_failures`, `check_stranded`). The launcher tolerates
//! the loss of a rank (`Supervisor::set_rank_loss_tolerated`), and a master finishes once its
//! replicas acknowledged its outcomes.
//!
//! **Shared receives** (`Endpoint::set_share_received`, [`JobConfig::share`]): the replicas
//! tell their possible masters each message they have, a master transmits nothing reached
//! after a message before its possible successors have it, and relays it when its sender is
//! lost whole. Without them (`share: false`), other faults besides a lost rank find a
//! divergence (`run(66, JobConfig { n: 4, r: 2, faults: 1, fault_aware: true, lose: 1, .. })`):
//! a master receives a message of a rank whose replicas all die before its own replica got
//! it, sends what depends on it, and crashes; its replica takes over, fails that receive and
//! sends other values under the same message ids.

use super::*;
use p2pmpi_core::replication::failures::{self, Failed};
use p2pmpi_core::replication::operations::Follow;
use p2pmpi_core::replication::stranded;

/// The source of a failed receive's result (never a rank); its value is the lost rank.
pub(super) const FAILED: i32 = -2;

/// Draws the programs of a fault-aware job: like [`super::programs`], but every receive
/// names its source and tag (a wildcard receive would wait for a lost rank's message
/// forever: ULFM fails it, which the simulated program does not model), and every send is
/// asynchronous: it completes whether or not its destination lives, as MPI allows (the
/// library fails a send to a rank known lost at its post, which is not modelled either).
pub fn programs(rng: &mut Rng, n: usize, messages: usize) -> Vec<Vec<Op>> {
    let mut progs: Vec<Vec<Op>> = vec![Vec::new(); n];
    if n < 2 {
        return progs;
    }
    let mut left = messages;
    while left > 0 {
        if rng.bernoulli(0.05) && left >= 2 * (n - 1) {
            // A gather to a root, then a broadcast from it.
            gather_then_broadcast(&mut progs, rng.below(n as u64) as usize);
            left -= 2 * (n - 1);
            continue;
        }
        left -= 1;
        let src = rng.below(n as u64) as usize;
        let mut dst = rng.below(n as u64 - 1) as usize;
        if dst >= src {
            dst += 1;
        }
        let tag = 1 + rng.below(3) as i32;
        let big = rng.bernoulli(0.2);
        progs[src].push(Op::Send { dst, tag, sync: false, big });
        progs[dst].push(Op::Recv { src: Some(src), tag: Some(tag) });
    }
    progs
}

/// Draws the ranks lost whole ([`JobConfig::lose`], at most all but one): every replica of
/// each crashes within 50 ms of a random time (a rank may finish its program first). Returns
/// them.
pub(super) fn draw_losses(sim: &mut Sim, faults: &mut Vec<String>) -> Vec<usize> {
    let n = sim.layout.n;
    let mut ranks: Vec<usize> = (0..n).collect();
    let mut doomed = Vec::new();
    for _ in 0..sim.cfg.lose.min(n.saturating_sub(1)) {
        let i = sim.rng.below(ranks.len() as u64) as usize;
        let k = ranks.swap_remove(i);
        // Early enough that the rank is mostly lost mid-run.
        let t = ms(sim.rng.below(400));
        for s in sim.layout.slots_of(k) {
            let d = ms(sim.rng.below(50));
            sim.at(t + d, Ev::Crash(s));
        }
        faults.push(format!("rank {k} lost whole at {:.3} s", t.as_secs_f64()));
        doomed.push(k);
    }
    doomed
}

impl Sim {
    /// An exact receive of a fault-aware program: numbered (the same number on every
    /// replica), failed at once if its master's outcome says so or if this process decides
    /// and its source is lost, posted otherwise.
    pub(super) fn numbered_recv(&mut self, s: usize, src: usize, tag: Option<i32>) -> u32 {
        let r = self.new_req(s);
        let p = &mut self.procs[s];
        let op = p.ops.next(true).expect("numbered");
        p.ops.number(r, op);
        p.recv_src.insert(r, src);
        let c = failures::failure_point(op);
        if let Some(o) = p.ep.choice_known(c) {
            if let Some((f, _)) = failures::outcome_failure(o) {
                // Its master failed it (at the post, or while pending there): followed.
                p.ep.take_choice(c);
                p.ep.decided(u32::MAX, c, o);
                self.followed += 1;
                self.fail(s, r, f);
                return r;
            }
        }
        if p.ep.may_decide() && p.lost.contains(&src) {
            let f = Failed::Lost(src as u32);
            p.ep.decided(u32::MAX, c, failures::failure_outcome(f, true));
            self.fail(s, r, f);
            return r;
        }
        self.post(s, r, Pattern { comm: 0, src: Some(src as i32), tag });
        r
    }

    /// Receive `r` fails with `f` (withdrawn from the matcher if posted).
    fn fail(&mut self, s: usize, r: u32, f: Failed) {
        let rank = match f {
            Failed::Lost(k) => u64::from(k),
            Failed::Revoked => u64::MAX,
        };
        let p = &mut self.procs[s];
        p.m.cancel(&r);
        p.rndv.retain(|_, q| *q != r);
        p.recv_src.remove(&r);
        p.reqs.insert(r, Some((FAILED, rank)));
    }

    /// The program took receive `r`'s outcome (`src` [`FAILED`]: a failure naming rank `v`).
    pub(super) fn took(&mut self, s: usize, r: u32, src: i32, v: u64) {
        let p = &mut self.procs[s];
        let follows = !p.ep.is_master();
        p.ops.taken(r, src != FAILED, follows);
        p.recv_src.remove(&r);
        if src == FAILED {
            p.failed_taken.push(v as usize);
        }
    }

    /// A fault-aware process's turn after its inputs: it follows the failures its master
    /// told; then, if it decides, it fails its pending receives from lost ranks (telling its
    /// replicas), or else it checks whether it is stranded.
    pub(super) fn fault_aware_turn(&mut self, s: usize) {
        self.follow_failures(s);
        if !self.runnable(s) {
            return;
        }
        if self.procs[s].ep.may_decide() {
            self.fail_lost(s);
        } else if !self.procs[s].ep.is_master() {
            self.check_stranded(s);
        }
    }

    fn follow_failures(&mut self, s: usize) {
        for (c, o) in self.procs[s].ep.known_failures() {
            let Some(op) = failures::op_of_point(c) else { continue };
            let Some((f, _)) = failures::outcome_failure(o) else { continue };
            let p = &mut self.procs[s];
            let r = match p.ops.master_failed(op, !p.ep.is_master()) {
                // Applied at its post.
                Follow::NotReached => continue,
                Follow::Diverged => {
                    let why = format!("its master failed operation {op}, whose success this replica took");
                    return self.leave(s, why);
                }
                Follow::Fail(r) => r,
            };
            p.ep.take_choice(c);
            p.ep.decided(u32::MAX, c, o);
            if let Some(r) = r {
                self.followed += 1;
                self.fail(s, r, f);
            }
        }
    }

    /// The master fails its pending receives from ranks lost whole, in request order.
    fn fail_lost(&mut self, s: usize) {
        let p = &self.procs[s];
        if p.lost.is_empty() {
            return;
        }
        let mut pending: Vec<(u32, usize)> = p
            .recv_src
            .iter()
            .filter(|(r, src)| p.lost.contains(src) && p.reqs.get(r).is_some_and(Option::is_none))
            .map(|(&r, &src)| (r, src))
            .collect();
        pending.sort_unstable();
        for (r, src) in pending {
            let op = self.procs[s].ops.op_of(&r).expect("numbered");
            let f = Failed::Lost(src as u32);
            self.procs[s].ep.decided(u32::MAX, failures::failure_point(op), failures::failure_outcome(f, false));
            self.fail(s, r, f);
        }
    }

    /// A non-master waiting for a lost rank's message that its master received: once the
    /// master is past the receive (or finished: the library's goodbye, here its state), the
    /// replica leaves ([`stranded::verdict`]).
    fn check_stranded(&mut self, s: usize) {
        let p = &self.procs[s];
        if p.lost.is_empty() {
            return;
        }
        let master_done = p.ep.coordinator().master_of(p.rank).is_some_and(|m| self.procs[m].done);
        let receive = || {
            p.recv_src
                .iter()
                .filter(|(r, src)| p.lost.contains(src) && p.reqs.get(r).is_some_and(Option::is_none))
                .filter_map(|(r, &src)| Some((p.ops.op_of(r)?, src as i32)))
                .min()
        };
        if let Some(v) = stranded::verdict(master_done, p.ep.master_ahead(), receive, || None) {
            self.leave(s, v.why());
        }
    }

    /// This replica cannot follow its master: it leaves (its rank goes on with its master).
    fn leave(&mut self, s: usize, why: String) {
        self.log.push(format!("{:.3} s: slot {s} leaves: {why}", self.now.as_secs_f64()));
        self.left += 1;
        self.exit(s);
    }

    /// The checks of a fault-aware job: the replicas of a rank that finished took the same
    /// failures, and every failure names a rank lost whole.
    pub(super) fn check_outcomes(&mut self) {
        if self.violation.is_some() {
            return;
        }
        for k in 0..self.layout.n {
            let fin: Vec<usize> = self.layout.slots_of(k).filter(|&s| self.finished_ok(s)).collect();
            if fin.windows(2).any(|w| self.procs[w[0]].failed_taken != self.procs[w[1]].failed_taken) {
                return self.violate(format!("the replicas of rank {k} that finished took different failures"));
            }
            if let Some(&s) = fin.first() {
                if let Some(bad) = self.procs[s].failed_taken.iter().find(|r| !self.lost_ranks.contains(r)) {
                    return self.violate(format!("slot {s}: a receive failed naming rank {bad}, which was not lost"));
                }
            }
        }
    }
}
