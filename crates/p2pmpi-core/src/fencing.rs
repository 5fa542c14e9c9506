//! Fencing: in a replicated job, deaths are decided in one place, and a process declared dead
//! is out of the job for good.
//!
//! Machines we do not administer stop and come back (a laptop that sleeps, a VM paused or
//! migrated, a network that drops and heals). If every process decided deaths on its own, a
//! replica frozen past detection would wake up believing that everybody else died — their
//! connections to it were closed — and could stop the job, or a partition could make two
//! sides declare each other dead. So:
//!
//! * failure detectors and broken connections only **suspect**: they report to the job's
//!   supervisor (the launcher, on the submitter);
//! * the [`Supervisor`] **declares**: it excludes a suspect at once (no more leases for it)
//!   and announces it dead once its lease has run out; every process applies the announced
//!   dead set, and nothing from a declared-dead process is accepted afterwards (its commits,
//!   data connections, heartbeats and reports are refused where they arrive);
//! * every process holds a **lease** ([`Lease`]): it sends nothing while its lease is not
//!   valid. A lease is renewed by asking the supervisor, and runs `length` from the moment the
//!   renewal was *asked* (by the process's own clock), so the supervisor, which grants it
//!   later, knows an upper bound of when it ends: once an excluded process's last lease has
//!   run out it can no longer send, and declaring it dead is safe. A process woken from a
//!   freeze finds its lease expired, asks for a new one, and learns that it was excluded: it
//!   exits quietly. A process that cannot reach the supervisor for [`Lease::stop_after`] stops
//!   itself (a partition that does not heal).
//!
//! Both sides are plain state machines with time passed in (a `Duration` since an origin of
//! the caller's choosing), driven by the launcher and the library. The supervisor speaks the
//! crate's [`Machine`] vocabulary: [`Input`]s in (renewals, suspicions, ends), [`Output`]s out
//! (exclusions, declarations), an input from a fenced process refused with [`Fenced`].

use crate::machine::{Machine, Time};
use crate::replication::{DeadSet, Layout};
use std::time::Duration;

/// The longest a granted lease may outlive its supervisor's bound because of clock rates and
/// scheduling: `length / 50 + 10 ms`.
fn margin(length: Duration) -> Duration {
    length / 50 + Duration::from_millis(10)
}

/// The lease length of a job whose failure detector suspects a silent process after
/// `suspicion_after` (`T_cleanup + T_MAX_HANG`): the same, at least 1 s. A frozen process
/// stops renewing when it freezes, so by the time it is suspected its lease has run out and
/// the declaration waits for nothing.
pub fn lease_length(suspicion_after: Option<Duration>) -> Duration {
    suspicion_after.unwrap_or(Duration::from_secs(5)).max(Duration::from_secs(1))
}

/// The answer to a renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The lease is renewed: it runs `length` from when the process asked.
    Lease,
    /// The process was excluded (suspected, or declared dead): it must stop, quietly.
    Excluded,
}

/// A death the supervisor declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declaration {
    pub slot: usize,
    /// When it was declared.
    pub at: Duration,
    /// The process whose report caused it (`None`: the supervisor's own evidence).
    pub by: Option<usize>,
    /// Why it was suspected.
    pub why: String,
    /// Replicas its rank has left.
    pub left: usize,
}

/// What the supervisor is told (see [`Supervisor`]'s methods of the same names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// `slot` asks to renew its lease: refused ([`Fenced`]) when it was excluded.
    Renew(usize),
    /// A message came from `slot` (other than a renewal): refused when `slot` is fenced (the
    /// message is to be ignored); the supervisor remembers that it was heard from.
    Heard(usize),
    /// `by` (or the supervisor itself, `None`) suspects `slot`: see [`Supervisor`]'s rules.
    /// Refused when the accuser is fenced.
    Suspect { slot: usize, by: Option<usize>, why: String },
    /// A process of *another* job of the universe suspects `slot`.
    SuspectFromOutside { slot: usize, why: String },
    /// `slot`'s process is known to have ended: declared at once.
    Ended { slot: usize, why: String },
}

/// What the supervisor decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// `slot` is excluded: no more leases; declared once its last one ran out.
    Excluded(usize),
    /// A death declared.
    Declared(Declaration),
}

/// An input from (or a renewal of) a process that is excluded or dead: its word counts for
/// nothing. The refusal is remembered: the process was heard after its exclusion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced(pub usize);

#[derive(Debug, Clone, Default)]
struct SlotState {
    /// When the supervisor last granted a lease.
    last_grant: Option<Duration>,
    /// Suspected: no lease any more; declared once the last one ran out.
    excluded: Option<(Duration, Option<usize>, String)>,
    /// When it was declared dead.
    declared: Option<Duration>,
    /// It was heard from after it was excluded (it resumed, or its partition healed).
    heard_after: bool,
    /// Until when it counts as recently cut off: a renewal came after a silence of more than
    /// half a lease (renewals queued during a partition arrive together when it heals).
    silent_until: Duration,
}

/// The supervisor's side (the launcher): suspicions in, declarations out.
#[derive(Debug)]
pub struct Supervisor {
    lease: Duration,
    dead: DeadSet,
    slots: Vec<SlotState>,
    /// The program handles failures: losing a rank does not end the job, so an accusation
    /// is not disbelieved only because it would lose one (it is deferred instead).
    rank_loss_tolerated: bool,
    /// Accusations against the last replica of a rank that the supervisor still hears, in a
    /// job whose program handles failures: (suspect, accuser, why, since).
    deferred: Vec<(usize, usize, String, Duration)>,
    /// Outputs not polled yet.
    out: std::collections::VecDeque<Output>,
}

impl Supervisor {
    /// The supervisor of a job laid out as `layout`, granting leases of `lease`.
    pub fn new(layout: Layout, lease: Duration) -> Supervisor {
        Supervisor {
            lease,
            dead: DeadSet::new(layout),
            slots: vec![SlotState::default(); layout.slots()],
            rank_loss_tolerated: false,
            deferred: Vec::new(),
            out: Default::default(),
        }
    }

    /// The program handles failures (every process runs `Policy::Notify`): a rank that loses
    /// every replica is one more failure the program deals with, not the job's end. Then an
    /// accusation against the last replica of a rank that the supervisor still hears is
    /// **deferred** instead of turned against the accuser: the usual case is a real death
    /// whose exit the launcher has not seen yet (the accuser saw its connection break first),
    /// and excluding the healthy accuser would cost its rank a replica. The suspect is
    /// excluded as soon as the supervisor no longer hears it (a dead process renews nothing:
    /// within half a lease); if it keeps renewing for a whole lease, the accuser is excluded
    /// after all, as without the tolerance. The same for an accuser that was cut off lately
    /// (its renewals came late on a loaded host as much as after a partition).
    pub fn set_rank_loss_tolerated(&mut self, on: bool) {
        self.rank_loss_tolerated = on;
    }

    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The declared dead set.
    pub fn dead(&self) -> &DeadSet {
        &self.dead
    }

    pub fn is_dead(&self, slot: usize) -> bool {
        self.dead.is_dead(slot)
    }

    /// Whether `slot` is excluded or dead: its word counts for nothing.
    pub fn is_fenced(&self, slot: usize) -> bool {
        self.dead.is_dead(slot) || self.slots.get(slot).is_some_and(|s| s.excluded.is_some())
    }

    /// When `slot` was declared dead.
    pub fn declared_at(&self, slot: usize) -> Option<Duration> {
        self.slots.get(slot).and_then(|s| s.declared)
    }

    /// Whether `slot` was heard from after its exclusion.
    pub fn resumed(&self, slot: usize) -> bool {
        self.slots.get(slot).is_some_and(|s| s.heard_after)
    }

    /// Any message from `slot` arrived: returns true when the slot is fenced (the caller
    /// ignores the message), and remembers that it was heard from.
    fn heard_from(&mut self, slot: usize) -> bool {
        if !self.is_fenced(slot) {
            return false;
        }
        if let Some(s) = self.slots.get_mut(slot) {
            s.heard_after = true;
        }
        true
    }

    /// `slot` asks to renew its lease.
    fn renew(&mut self, now: Duration, slot: usize) -> Grant {
        if self.heard_from(slot) || slot >= self.slots.len() {
            return Grant::Excluded;
        }
        let lease = self.lease;
        let s = &mut self.slots[slot];
        if s.last_grant.is_some_and(|g| now.saturating_sub(g) > lease / 2) {
            s.silent_until = now + lease;
        }
        s.last_grant = Some(s.last_grant.map_or(now, |g| g.max(now)));
        Grant::Lease
    }

    /// Replicas of `rank` neither dead nor excluded, `but` aside.
    fn standing(&self, rank: usize, but: usize) -> usize {
        self.dead.alive_slots(rank).filter(|&s| s != but && !self.is_fenced(s)).count()
    }

    /// Whether the supervisor hears `slot` well: it renewed within half a lease, and was not
    /// silent for longer than that within the last lease.
    fn renews(&self, now: Duration, slot: usize) -> bool {
        let s = &self.slots[slot];
        s.last_grant.is_some_and(|g| now.saturating_sub(g) < self.lease / 2) && now >= s.silent_until
    }

    /// `by` (or the supervisor itself, `None`) suspects `slot`. Returns the slot excluded, if
    /// any: a suspicion from a fenced process, or of one already fenced, changes nothing.
    ///
    /// The **accuser** is excluded instead, when its rank has another replica standing and
    /// the supervisor still hears the suspect renew its lease, while
    /// * the accuser itself was silent lately (it was the one cut off: its accusations come
    ///   when its partition heals), or
    /// * the verdict would lose a rank (the suspect is the last replica of its rank
    ///   standing): an asymmetric partition, where one side must go;
    ///
    /// and also, whether or not the suspect renews, when an accuser that came back from a
    /// silence accuses the last replica of a rank.
    fn suspect(&mut self, now: Duration, slot: usize, by: Option<usize>, why: &str) -> Option<usize> {
        if slot >= self.slots.len() || self.is_fenced(slot) {
            return None;
        }
        if let Some(b) = by {
            if b >= self.slots.len() || self.heard_from(b) || b == slot {
                return None;
            }
            let l = self.dead.layout();
            let last = self.standing(l.rank_of(slot), slot) == 0;
            let cut_off = !self.renews(now, b);
            let heard = self.renews(now, slot);
            let came_back = now < self.slots[b].silent_until;
            // An accuser that came back from a silence (its renewals stopped, then resumed:
            // it was cut off) against the last replica of a rank is not believed even when the
            // suspect's own renewal is late (a loaded host): the verdict cannot be undone. A
            // suspect that really died is declared anyway, by the supervisor itself when its
            // lease runs out.
            if ((last || cut_off) && heard || last && came_back) && self.standing(l.rank_of(b), b) > 0 {
                if self.rank_loss_tolerated && last {
                    if !self.deferred.iter().any(|d| d.0 == slot && d.1 == b) {
                        self.deferred.push((slot, b, why.to_string(), now));
                    }
                    return None;
                }
                let why = if heard {
                    format!("it reported that slot {slot}, which the launcher still hears, failed ({why})")
                } else {
                    format!("it was cut off and reported that slot {slot}, the last of its rank, failed ({why})")
                };
                self.slots[b].excluded = Some((now, None, why));
                return Some(b);
            }
        }
        self.slots[slot].excluded = Some((now, by, why.to_string()));
        Some(slot)
    }

    /// A process of *another* job of the universe (a spawn's parents or children, with their
    /// own supervisor) suspects `slot`. There is no accuser here to exclude instead, so the
    /// suspicion is not believed against the last replica of a rank standing while the
    /// supervisor still hears it renew: the verdict would lose a rank on one foreign word. A
    /// suspect that really died is declared anyway when its end is seen or its lease runs
    /// out. Otherwise as [`Self::suspect`] by the supervisor itself.
    fn suspect_from_outside(&mut self, now: Duration, slot: usize, why: &str) -> Option<usize> {
        if slot >= self.slots.len() || self.is_fenced(slot) {
            return None;
        }
        let rank = self.dead.layout().rank_of(slot);
        if self.standing(rank, slot) == 0 && self.renews(now, slot) {
            return None;
        }
        self.suspect(now, slot, None, why)
    }

    /// When the last lease of `slot` ends, at the latest.
    fn lease_end(&self, slot: usize) -> Duration {
        self.slots[slot].last_grant.map_or(Duration::ZERO, |g| g + self.lease + margin(self.lease))
    }

    fn declare(&mut self, now: Duration, slot: usize) -> Option<Declaration> {
        if !self.dead.mark(slot) {
            return None;
        }
        let (_, by, why) = self.slots[slot].excluded.clone().unwrap_or((now, None, String::new()));
        self.slots[slot].declared = Some(now);
        let left = self.dead.alive(self.dead.layout().rank_of(slot));
        Some(Declaration { slot, at: now, by, why, left })
    }

    /// `slot`'s process is known to have ended (its exit status was seen): it can send no
    /// more, so it is declared at once. `None` if it already was.
    fn ended(&mut self, now: Duration, slot: usize, why: &str) -> Option<Declaration> {
        if slot >= self.slots.len() || self.dead.is_dead(slot) {
            return None;
        }
        if self.slots[slot].excluded.is_none() {
            self.slots[slot].excluded = Some((now, None, why.to_string()));
        }
        self.declare(now, slot)
    }

    /// The exclusions whose lease has run out: declared dead now.
    fn poll(&mut self, now: Duration) -> Vec<Declaration> {
        // Deferred accusations: the suspect went silent (believed), or kept renewing for a
        // lease (the accuser goes).
        let deferred = std::mem::take(&mut self.deferred);
        for (slot, by, why, since) in deferred {
            if self.is_fenced(slot) || self.is_fenced(by) {
                continue;
            }
            if !self.renews(now, slot) {
                self.slots[slot].excluded = Some((now, Some(by), why));
            } else if now.saturating_sub(since) >= self.lease {
                let why = format!("it reported that slot {slot}, which the launcher still hears, failed ({why})");
                self.slots[by].excluded = Some((now, None, why));
            } else {
                self.deferred.push((slot, by, why, since));
            }
        }
        let due: Vec<usize> = (0..self.slots.len())
            .filter(|&s| !self.dead.is_dead(s) && self.slots[s].excluded.is_some() && now >= self.lease_end(s))
            .collect();
        due.into_iter().filter_map(|s| self.declare(now, s)).collect()
    }

    /// When [`Self::poll`] will next declare something.
    fn next_deadline(&self) -> Option<Duration> {
        let deferred = self.deferred.iter().map(|&(slot, _, _, since)| {
            let silent = self.slots[slot].last_grant.map_or(since, |g| g + self.lease / 2);
            (since + self.lease).min(silent.max(since))
        });
        (0..self.slots.len())
            .filter(|&s| !self.dead.is_dead(s) && self.slots[s].excluded.is_some())
            .map(|s| self.lease_end(s))
            .chain(deferred)
            .min()
    }
}

impl Machine for Supervisor {
    type Input = Input;
    type Output = Output;
    type Rejected = Fenced;

    fn handle_input(&mut self, now: Time, input: Input) -> Result<(), Fenced> {
        match input {
            Input::Renew(slot) => match self.renew(now, slot) {
                Grant::Lease => Ok(()),
                Grant::Excluded => Err(Fenced(slot)),
            },
            Input::Heard(slot) => {
                if self.heard_from(slot) {
                    Err(Fenced(slot))
                } else {
                    Ok(())
                }
            }
            Input::Suspect { slot, by, why } => {
                if let Some(b) = by.filter(|&b| b < self.slots.len() && self.heard_from(b)) {
                    return Err(Fenced(b));
                }
                if let Some(x) = self.suspect(now, slot, by, &why) {
                    self.out.push_back(Output::Excluded(x));
                }
                Ok(())
            }
            Input::SuspectFromOutside { slot, why } => {
                if let Some(x) = self.suspect_from_outside(now, slot, &why) {
                    self.out.push_back(Output::Excluded(x));
                }
                Ok(())
            }
            Input::Ended { slot, why } => {
                if let Some(d) = self.ended(now, slot, &why) {
                    self.out.push_back(Output::Declared(d));
                }
                Ok(())
            }
        }
    }

    fn handle_timeout(&mut self, now: Time) {
        let before: Vec<bool> = self.slots.iter().map(|s| s.excluded.is_some()).collect();
        let declared = self.poll(now);
        for (slot, was) in before.into_iter().enumerate() {
            if !was && self.slots[slot].excluded.is_some() {
                self.out.push_back(Output::Excluded(slot));
            }
        }
        self.out.extend(declared.into_iter().map(Output::Declared));
    }

    fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.next_deadline()
    }
}

/// A process's side: may it send, and when must it ask again.
#[derive(Debug, Clone)]
pub struct Lease {
    length: Duration,
    valid_until: Option<Duration>,
    /// When this process started asking (the origin of "out of contact" before any grant).
    since: Duration,
}

impl Lease {
    /// A lease of `length`, not granted yet, asked for since `now`.
    pub fn new(length: Duration, now: Duration) -> Lease {
        Lease { length, valid_until: None, since: now }
    }

    pub fn length(&self) -> Duration {
        self.length
    }

    /// How often to ask for a renewal: a quarter of the length.
    pub fn renew_every(&self) -> Duration {
        self.length / 4
    }

    /// A renewal asked at `asked_at` was granted.
    pub fn granted(&mut self, asked_at: Duration) {
        let until = asked_at + self.length;
        self.valid_until = Some(self.valid_until.map_or(until, |v| v.max(until)));
    }

    /// Until when this process may send (`None`: never granted).
    pub fn valid_until(&self) -> Option<Duration> {
        self.valid_until
    }

    /// Whether this process may send at `now`.
    pub fn valid(&self, now: Duration) -> bool {
        self.valid_until.is_some_and(|v| now < v)
    }

    /// How long without contact before the process stops itself: three lease lengths since
    /// its last grant (two past its expiry).
    pub fn stop_after(&self) -> Duration {
        3 * self.length
    }

    /// Whether the process has been out of contact with its supervisor for
    /// [`Self::stop_after`] at `now`.
    pub fn out_of_contact(&self, now: Duration) -> bool {
        let from = self.valid_until.map_or(self.since, |v| v.saturating_sub(self.length));
        now >= from + self.stop_after()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const L: Duration = Duration::from_millis(1000);

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn a_foreign_suspicion_spares_the_last_replica_it_still_hears() {
        let layout = Layout::new(2, 2);
        let mut s = Supervisor::new(layout, L);
        for slot in 0..4 {
            assert_eq!(s.renew(ms(100), slot), Grant::Lease);
        }
        // Rank 1 keeps slot 2 standing: slot 3 is excluded.
        assert_eq!(s.suspect_from_outside(ms(200), 3, "connection closed"), Some(3));
        // Slot 2 is now rank 1's last replica, and it renews: not believed.
        assert_eq!(s.suspect_from_outside(ms(250), 2, "connection closed"), None);
        assert!(!s.is_fenced(2));
        // Once it stopped renewing (silent for more than half a lease), it is.
        assert_eq!(s.suspect_from_outside(ms(700), 2, "connection closed"), Some(2));
        assert_eq!(s.suspect_from_outside(ms(800), 2, "again"), None, "already fenced");
    }

    #[test]
    fn a_suspect_is_excluded_at_once_and_declared_when_its_lease_ran_out() {
        let layout = Layout::new(3, 2);
        let mut s = Supervisor::new(layout, L);
        assert_eq!(s.renew(ms(100), 3), Grant::Lease);
        assert_eq!(s.renew(ms(450), 1), Grant::Lease);
        assert_eq!(s.suspect(ms(650), 3, Some(1), "silent"), Some(3));
        // Excluded: no more leases, and a second suspicion changes nothing.
        assert_eq!(s.renew(ms(700), 3), Grant::Excluded);
        assert_eq!(s.suspect(ms(700), 3, Some(2), "again"), None);
        assert!(s.poll(ms(1000)).is_empty(), "its lease (asked at 100 ms at the latest) still runs");
        assert_eq!(s.next_deadline(), Some(ms(100) + L + margin(L)));
        let d = s.poll(ms(1200));
        assert_eq!(d, vec![Declaration { slot: 3, at: ms(1200), by: Some(1), why: "silent".into(), left: 1 }]);
        assert!(s.is_dead(3) && s.resumed(3));
        assert_eq!(s.dead().master_of(1), Some(2));
        assert!(s.poll(ms(5000)).is_empty());
    }

    #[test]
    fn a_fenced_process_s_word_counts_for_nothing() {
        let layout = Layout::new(3, 2);
        let mut s = Supervisor::new(layout, L);
        assert_eq!(s.suspect(ms(0), 3, Some(1), "silent"), Some(3));
        // The excluded process, waking up, suspects everybody: refused, and noted.
        assert_eq!(s.suspect(ms(10), 1, Some(3), "connection closed"), None);
        assert_eq!(s.suspect(ms(10), 2, Some(3), "connection closed"), None);
        assert!(s.resumed(3));
        assert!(!s.is_fenced(1) && !s.is_fenced(2));
        // A partition: 1 and 3 suspect each other; the first word wins, only one side goes.
        let mut s = Supervisor::new(layout, L);
        assert_eq!(s.suspect(ms(0), 1, Some(3), "cut"), Some(1));
        assert_eq!(s.suspect(ms(0), 3, Some(1), "cut"), None);
        assert_eq!(s.poll(ms(0)).iter().map(|d| d.slot).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn an_accusation_that_would_lose_a_rank_the_supervisor_still_hears_excludes_the_accuser() {
        // n = 3, r = 2: rank 0 is slots 0 and 1, rank 1 is 2 and 3, rank 2 is 4 and 5.
        let layout = Layout::new(3, 2);
        let mut s = Supervisor::new(layout, L);
        for slot in 0..6 {
            s.renew(ms(1000), slot);
        }
        s.ended(ms(1000), 1, "gone");
        // Slot 0 is the last of rank 0: slot 2 (rank 1, which has slot 3 too) accuses it
        // while the supervisor heard it 100 ms ago.
        assert_eq!(s.suspect(ms(1100), 0, Some(2), "silent"), Some(2));
        assert!(s.is_fenced(2) && !s.is_fenced(0));
        let d = s.poll(ms(3000));
        assert_eq!(d.len(), 1);
        assert!(d[0].slot == 2 && d[0].by.is_none() && d[0].why.contains("still hears"), "{d:?}");
        // Silent for longer than half a lease: the accusation stands (nobody else can be
        // blamed: slot 1 is the last of rank 1 now, so it is the suspect who goes).
        let mut s = Supervisor::new(layout, L);
        for slot in 0..6 {
            s.renew(ms(1000), slot);
        }
        s.ended(ms(1000), 1, "gone");
        assert_eq!(s.suspect(ms(1600), 0, Some(2), "silent"), Some(0));
        // An accuser whose rank has no other replica standing is believed.
        let mut s = Supervisor::new(layout, L);
        s.renew(ms(0), 0);
        s.renew(ms(0), 4);
        s.ended(ms(0), 1, "gone");
        s.suspect(ms(0), 5, None, "gone");
        assert_eq!(s.suspect(ms(100), 0, Some(4), "silent"), Some(0));
    }

    #[test]
    fn when_failures_are_tolerated_an_accusation_against_a_rank_s_last_replica_waits_for_its_silence() {
        // n = 3, r = 2: rank 0 is slots 0 and 1, rank 1 is 2 and 3, rank 2 is 4 and 5.
        let layout = Layout::new(3, 2);
        let start = |s: &mut Supervisor| {
            s.set_rank_loss_tolerated(true);
            for slot in 0..6 {
                s.renew(ms(1000), slot);
            }
            s.ended(ms(1000), 1, "gone");
        };
        // Slot 0 (the last of rank 0) really died: slot 2 saw its connection break before
        // the launcher saw it stop renewing. Deferred, then believed once it is silent.
        let mut s = Supervisor::new(layout, L);
        start(&mut s);
        s.renew(ms(1050), 2);
        assert_eq!(s.suspect(ms(1100), 0, Some(2), "connection closed"), None);
        assert!(!s.is_fenced(0) && !s.is_fenced(2));
        assert!(s.next_deadline().is_some_and(|t| t <= ms(1500)));
        s.renew(ms(1300), 2);
        assert!(s.poll(ms(1300)).is_empty());
        assert!(!s.is_fenced(0), "still heard");
        s.renew(ms(1550), 2);
        let d = s.poll(ms(1550));
        assert!(s.is_fenced(0) && !s.is_fenced(2), "silent for half a lease: believed");
        assert!(d.is_empty() || d[0].slot == 0);
        let d = s.poll(ms(2100));
        assert!(s.is_dead(0) && !s.is_dead(2), "{d:?}");
        // Slot 0 is alive and keeps renewing: after a lease, the accuser goes, as without
        // the tolerance.
        let mut s = Supervisor::new(layout, L);
        start(&mut s);
        assert_eq!(s.suspect(ms(1100), 0, Some(2), "silent"), None);
        for t in (1200..=2200).step_by(200) {
            s.renew(ms(t), 0);
            s.renew(ms(t), 2);
            s.poll(ms(t));
        }
        assert!(s.is_fenced(2) && !s.is_fenced(0));
        // An accuser back from a silence (late renewals) is deferred too: believed if the
        // suspect goes silent, excluded if the suspect renews for a lease.
        for suspect_lives in [false, true] {
            let mut s = Supervisor::new(layout, L);
            start(&mut s);
            s.renew(ms(1400), 0);
            s.renew(ms(1800), 0);
            s.renew(ms(2000), 2);
            assert_eq!(s.suspect(ms(2100), 0, Some(2), "silent"), None);
            for t in (2200..=3200).step_by(200) {
                if suspect_lives {
                    s.renew(ms(t), 0);
                }
                s.renew(ms(t), 2);
                s.poll(ms(t));
            }
            assert_eq!(s.is_fenced(2), suspect_lives);
            assert_eq!(s.is_fenced(0), !suspect_lives);
        }
    }

    #[test]
    fn an_accuser_that_was_cut_off_is_excluded_not_its_suspects() {
        // n = 3, r = 3. Slot 8 is cut off for 1.3 s; its renewals queued meanwhile arrive
        // when the partition heals, just before its accusations.
        let layout = Layout::new(3, 3);
        let mut s = Supervisor::new(layout, L);
        let mut t = 0;
        while t <= 1000 {
            for slot in 0..9 {
                if slot != 8 || t <= 200 {
                    s.renew(ms(t), slot);
                }
            }
            t += 250;
        }
        s.renew(ms(1500), 8);
        for slot in 0..8 {
            s.renew(ms(1500), slot);
        }
        assert_eq!(s.suspect(ms(1510), 3, Some(8), "silent"), Some(8), "the accuser goes");
        assert_eq!(s.suspect(ms(1510), 4, Some(8), "silent"), None, "and its word counts for nothing");
        // A suspect that really went silent is believed, from a well-heard accuser.
        let mut s = Supervisor::new(layout, L);
        for slot in 0..9 {
            s.renew(ms(0), slot);
        }
        for slot in 0..8 {
            s.renew(ms(400), slot);
        }
        assert_eq!(s.suspect(ms(600), 8, Some(3), "silent"), Some(8));
    }

    /// Seen in CI: a host cut off, its replica accusing the last replica of another rank
    /// whose renewal was late on a loaded machine. The accuser goes, not the rank.
    #[test]
    fn a_cut_off_accuser_never_costs_a_rank_even_when_the_suspect_renews_late() {
        // n = 3, r = 2: rank 1 is slots 2 and 3, rank 2 is slots 4 and 5.
        let layout = Layout::new(3, 2);
        let mut s = Supervisor::new(layout, L);
        for slot in 0..6 {
            s.renew(ms(0), slot);
        }
        // Slot 5 (rank 2) is gone; slot 3 is cut off from 100 ms on; slot 4 renews late.
        s.ended(ms(100), 5, "cut off");
        for slot in [0, 1, 2] {
            s.renew(ms(900), slot);
        }
        s.renew(ms(1400), 3);
        assert_eq!(s.suspect(ms(1410), 4, Some(3), "silent"), Some(3), "the accuser goes");
        assert!(!s.is_fenced(4));
        // Slot 4 really dead: the supervisor's own suspicion (its lease ran out) still counts.
        assert_eq!(s.suspect(ms(2500), 4, None, "lease ran out"), Some(4));
    }

    #[test]
    fn an_ended_process_is_declared_at_once_and_losing_every_replica_shows() {
        let layout = Layout::new(3, 2);
        let mut s = Supervisor::new(layout, L);
        s.renew(ms(0), 2);
        s.renew(ms(0), 3);
        assert_eq!(s.ended(ms(5), 3, "SIGKILL").map(|d| d.left), Some(1));
        assert!(s.ended(ms(6), 3, "again").is_none());
        assert_eq!(s.suspect(ms(7), 2, None, "control connection closed"), Some(2));
        let d = s.poll(ms(2000));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].left, 0);
        assert_eq!(s.dead().master_of(1), None);
    }

    #[test]
    fn a_lease_runs_from_when_it_was_asked() {
        let mut l = Lease::new(L, ms(0));
        assert!(!l.valid(ms(0)), "nothing is sent before the first grant");
        l.granted(ms(10));
        assert!(l.valid(ms(1009)) && !l.valid(ms(1010)));
        // A stale answer (asked long ago, read after a freeze) does not extend it.
        l.granted(ms(5));
        assert_eq!(l.valid_until(), Some(ms(1010)));
        assert!(!l.out_of_contact(ms(3009)));
        assert!(l.out_of_contact(ms(3010)));
        let never = Lease::new(L, ms(100));
        assert!(!never.out_of_contact(ms(3099)) && never.out_of_contact(ms(3100)));
    }

    proptest! {
        /// Whatever the interleaving of renewals, suspicions and time, a process is never
        /// declared dead while a lease it was granted may still be valid by its own clock
        /// (the process asks at `asked ≤ grant time`, its lease runs to `asked + L`).
        #[test]
        fn never_declared_while_its_lease_may_run(ops in proptest::collection::vec((0u8..3, 0usize..6, 0u64..400), 1..200)) {
            let layout = Layout::new(3, 2);
            let mut s = Supervisor::new(layout, L);
            let mut leases: Vec<Lease> = (0..6).map(|_| Lease::new(L, Duration::ZERO)).collect();
            let mut now = Duration::ZERO;
            for (op, slot, dt) in ops {
                now += ms(dt);
                match op {
                    0 => {
                        // Asked a little before it is granted (transit).
                        let asked = now.saturating_sub(ms(dt / 4));
                        if s.renew(now, slot) == Grant::Lease {
                            leases[slot].granted(asked);
                        }
                    }
                    1 => { s.suspect(now, slot, None, "x"); }
                    _ => {}
                }
                for d in s.poll(now) {
                    prop_assert!(!leases[d.slot].valid(now), "slot {} declared at {:?} with a lease until {:?}", d.slot, now, leases[d.slot].valid_until());
                }
            }
        }
    }
}
