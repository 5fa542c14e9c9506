//! How a blocking wait on a socket spends its time: polling (spinning) or asleep in the
//! kernel, decided from what the machine does to this process.
//!
//! On an idle machine a wait polls for its spin budget (2 ms) before it sleeps: the reply of
//! a ping-pong comes in a few microseconds, and waking from a sleep costs more than that. On
//! a machine whose cores are taken by other work, polling is the wrong choice: a process
//! that polls uses its whole fair share, so the scheduler takes its core away for a whole
//! time slice of the other work (milliseconds), often just when its message arrives; a
//! process that sleeps until its socket is readable uses little of its share, and its
//! wake-up preempts the other work at once. Measured on 2 cores with a busy loop per core
//! (`bench/load.sh cpu`), a TCP ping-pong of 8 B: about 60 µs one way polling, 8–25 µs
//! sleeping at once.
//!
//! What the machine does is seen from the thread's count of involuntary context switches
//! (`getrusage`): a switch that this thread did not ask for by sleeping means that another
//! process took its core while it could run (preempted, or a `sched_yield` that another
//! process took). A wait on a socket reads the count when it ends, at most once every
//! [`SAMPLE_EVERY`] (one system call per a few milliseconds; an idle ping-pong's waits make
//! none in between). [`Waiting`] keeps the count, and the time spent spinning:
//!
//! - **Spin** (the start, and an idle machine): every wait polls for the whole budget. Two
//!   [`PREEMPTIONS_TO_BLOCK`] preemptions within [`WINDOW`] of spinning switch to Block
//!   (an idle machine preempts a spinning process seldom: a thread of its own waking on
//!   its core, a few times a second).
//! - **Block**: waits sleep at once (no spin). Sleeping shows nothing of the machine, so
//!   after a delay (first [`FIRST_BACKOFF`], doubled after each failed trial up to
//!   [`MAX_BACKOFF`]) the waits try spinning again:
//! - **Trial**: waits spin as in Spin; one preemption within [`TRIAL`] of spinning goes back
//!   to Block (the delay doubled), [`TRIAL`] of spinning without one goes back to Spin (the
//!   delay reset).
//!
//! Only waits on sockets follow it: a wait on shared-memory rings keeps polling (measured
//! under the same load, polling on rings stays ahead of MPICH's shared memory, and a sleep
//! there costs its peer a doorbell write). The policy is a pure state machine over
//! observations and instants, tested without timing.

use std::time::{Duration, Instant};

/// The count of involuntary switches is read at most this often.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(5);

/// Spin: preemptions counted over this much spinning (then the count starts again).
pub(crate) const WINDOW: Duration = Duration::from_millis(20);

/// Spin: preemptions within [`WINDOW`] that switch to Block.
pub(crate) const PREEMPTIONS_TO_BLOCK: u32 = 3;

/// Trial: spinning without a preemption that brings back Spin.
pub(crate) const TRIAL: Duration = Duration::from_millis(20);

/// Block: the first delay before a trial, and its bound as it doubles.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(50);
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Spin,
    Block,
    Trial,
}

/// What one wait saw while it spun.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    /// How long it spun (polled without sleeping).
    pub spun: Duration,
    /// The thread's involuntary context switches so far, read when [`Waiting::wants_count`]
    /// said so.
    pub switches: Option<u64>,
}

/// The waiting policy of one process (see the module's text).
#[derive(Clone, Debug)]
pub(crate) struct Waiting {
    /// `false`: the spin budget was set by hand (`P2PMPI_SPIN_US`, or `P2PMPI_WAIT=spin`):
    /// every wait spins for it, as before this policy.
    adaptive: bool,
    mode: Mode,
    /// Spinning and preemptions counted in the current window (Spin) or trial (Trial).
    spun: Duration,
    preempted: u32,
    /// Block: when the next trial starts, and the delay before the one after a failure.
    trial_at: Option<Instant>,
    backoff: Duration,
    /// The last reading of the count of involuntary switches, and when it was taken.
    count: u64,
    counted_at: Option<Instant>,
}

impl Default for Waiting {
    fn default() -> Self {
        Self::new(true)
    }
}

impl Waiting {
    pub(crate) fn new(adaptive: bool) -> Self {
        Waiting {
            adaptive,
            mode: Mode::Spin,
            spun: Duration::ZERO,
            preempted: 0,
            trial_at: None,
            backoff: FIRST_BACKOFF,
            count: 0,
            counted_at: None,
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// The spin budget of a wait on a socket starting at `now`, given the configured
    /// budget `full`.
    #[inline]
    pub(crate) fn budget(&mut self, full: Duration, now: Instant) -> Duration {
        if self.mode != Mode::Block {
            return full;
        }
        if self.trial_at.is_some_and(|t| now >= t) {
            self.mode = Mode::Trial;
            self.spun = Duration::ZERO;
            self.preempted = 0;
            return full;
        }
        Duration::ZERO
    }

    /// Whether a wait on a socket ending at `now` reads the count of involuntary switches.
    #[inline]
    pub(crate) fn wants_count(&self, now: Instant) -> bool {
        self.adaptive && self.counted_at.is_none_or(|t| now >= t + SAMPLE_EVERY)
    }

    /// Records what a wait on a socket saw, finished at `now`.
    pub(crate) fn seen(&mut self, seen: Seen, now: Instant) {
        if !self.adaptive {
            return;
        }
        if let Some(n) = seen.switches {
            if self.counted_at.is_some() {
                self.preempted = self.preempted.saturating_add(n.saturating_sub(self.count) as u32);
            }
            self.count = n;
            self.counted_at = Some(now);
        }
        self.spun += seen.spun;
        match self.mode {
            Mode::Spin => {
                if self.preempted >= PREEMPTIONS_TO_BLOCK {
                    self.block(now);
                } else if self.spun >= WINDOW {
                    self.spun = Duration::ZERO;
                    self.preempted = 0;
                }
            }
            Mode::Trial => {
                if self.preempted > 0 {
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                    self.block(now);
                } else if self.spun >= TRIAL {
                    self.mode = Mode::Spin;
                    self.backoff = FIRST_BACKOFF;
                    self.spun = Duration::ZERO;
                }
            }
            // (A wait that began before the switch.)
            Mode::Block => {}
        }
    }

    fn block(&mut self, now: Instant) {
        self.mode = Mode::Block;
        self.spun = Duration::ZERO;
        self.preempted = 0;
        self.trial_at = Some(now + self.backoff);
    }
}

/// The involuntary context switches of the calling thread so far.
pub(crate) fn involuntary_switches() -> u64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole `rusage` into the buffer it is given (zeroed first, so
    // that it is initialized even if the call failed).
    unsafe {
        libc::getrusage(libc::RUSAGE_THREAD, u.as_mut_ptr());
        u.assume_init().ru_nivcsw as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: Duration = Duration::from_millis(2);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A thread whose waits are fed to a policy: its count of involuntary switches, read
    /// when the policy asks.
    struct Thread {
        w: Waiting,
        switches: u64,
        t0: Instant,
    }

    impl Thread {
        fn new(adaptive: bool) -> Self {
            Thread { w: Waiting::new(adaptive), switches: 0, t0: Instant::now() }
        }

        /// A wait ending at `at` ms that spun `spun` ms, preempted `preempted` times.
        fn wait(&mut self, at: u64, spun: u64, preempted: u64) {
            self.switches += preempted;
            let now = self.t0 + ms(at);
            let switches = self.w.wants_count(now).then_some(self.switches);
            self.w.seen(Seen { spun: ms(spun), switches }, now);
        }

        fn budget(&mut self, at: u64) -> Duration {
            self.w.budget(FULL, self.t0 + ms(at))
        }
    }

    #[test]
    fn an_idle_machine_keeps_spinning() {
        let mut t = Thread::new(true);
        // Waits of 1 ms, one preemption (a thread of its own waking) every 60.
        for i in 0..2000 {
            assert_eq!(t.budget(i), FULL);
            t.wait(i, 1, u64::from(i % 60 == 59));
        }
        assert_eq!(t.w.mode(), Mode::Spin);
    }

    #[test]
    fn preemptions_while_spinning_switch_to_sleeping() {
        let mut t = Thread::new(true);
        t.wait(0, 1, 0);
        t.wait(5, 5, 1);
        t.wait(10, 5, 1);
        assert_eq!(t.budget(11), FULL, "two preemptions are not enough");
        t.wait(15, 5, 1);
        assert_eq!(t.w.mode(), Mode::Block);
        assert_eq!(t.budget(16), Duration::ZERO);
        // Waits that saw nothing change nothing.
        t.wait(17, 0, 0);
        assert_eq!(t.budget(18), Duration::ZERO);
    }

    #[test]
    fn the_count_is_read_every_few_milliseconds_and_first_as_a_baseline() {
        let mut t = Thread::new(true);
        // The first reading finds many switches (the start-up's): not counted.
        t.wait(0, 1, 100);
        assert_eq!(t.w.mode(), Mode::Spin);
        assert!(!t.w.wants_count(t.t0 + SAMPLE_EVERY - ms(1)));
        assert!(t.w.wants_count(t.t0 + SAMPLE_EVERY));
        // Preemptions between two readings are counted at the next.
        t.wait(1, 1, 2);
        t.wait(2, 1, 1);
        assert_eq!(t.w.mode(), Mode::Spin);
        t.wait(5, 1, 0);
        assert_eq!(t.w.mode(), Mode::Block);
    }

    #[test]
    fn preemptions_far_apart_do_not_switch() {
        let mut t = Thread::new(true);
        t.wait(0, 0, 0);
        // Five readings per window of spinning, one preemption in each second reading.
        for i in 1..200 {
            t.wait(5 * i, 5, u64::from(i % 2 == 0));
        }
        assert_eq!(t.w.mode(), Mode::Spin);
    }

    /// Switches `t` to Block at 0 ms (three preemptions counted at 5 ms).
    fn blocked() -> Thread {
        let mut t = Thread::new(true);
        t.wait(0, 0, 0);
        t.wait(5, 5, 3);
        assert_eq!(t.w.mode(), Mode::Block);
        t
    }

    #[test]
    fn a_trial_without_preemption_goes_back_to_spinning() {
        let mut t = blocked();
        let at = 5 + FIRST_BACKOFF.as_millis() as u64;
        assert_eq!(t.budget(at - 1), Duration::ZERO, "not before the delay");
        assert_eq!(t.budget(at), FULL, "the trial spins");
        assert_eq!(t.w.mode(), Mode::Trial);
        t.wait(at + 10, 10, 0);
        assert_eq!(t.w.mode(), Mode::Trial);
        t.wait(at + 20, 10, 0);
        assert_eq!(t.w.mode(), Mode::Spin);
        assert_eq!(t.budget(at + 21), FULL);
    }

    #[test]
    fn failed_trials_back_off_up_to_a_bound() {
        let mut t = blocked();
        let mut now = 5;
        let mut delay = FIRST_BACKOFF.as_millis() as u64;
        for _ in 0..10 {
            // Asleep until the delay is over, then a trial that is preempted.
            assert_eq!(t.budget(now + delay - 1), Duration::ZERO);
            now += delay;
            assert_eq!(t.budget(now), FULL);
            t.wait(now + 5, 5, 1);
            now += 5;
            assert_eq!(t.w.mode(), Mode::Block);
            delay = (delay * 2).min(MAX_BACKOFF.as_millis() as u64);
        }
        assert_eq!(delay, MAX_BACKOFF.as_millis() as u64);
        assert_eq!(t.budget(now + delay - 1), Duration::ZERO);
        now += delay;
        assert_eq!(t.budget(now), FULL);
        // A successful trial resets the delay.
        t.wait(now + TRIAL.as_millis() as u64, TRIAL.as_millis() as u64, 0);
        now += TRIAL.as_millis() as u64;
        assert_eq!(t.w.mode(), Mode::Spin);
        t.wait(now + 5, 5, 3);
        now += 5;
        assert_eq!(t.w.mode(), Mode::Block);
        assert_eq!(t.budget(now + FIRST_BACKOFF.as_millis() as u64), FULL);
    }

    #[test]
    fn a_budget_set_by_hand_is_kept() {
        let mut t = Thread::new(false);
        for i in 0..10 {
            t.wait(5 * i, 5, 5);
            assert_eq!(t.budget(5 * i), FULL);
        }
        assert_eq!(t.w.mode(), Mode::Spin);
        assert!(!t.w.wants_count(t.t0), "no system call for a budget set by hand");
    }
}
