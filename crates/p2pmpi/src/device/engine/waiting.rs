//! How a blocking wait spends its time: polling (spinning) or asleep in the kernel, decided
//! from what the machine does to this process.
//!
//! On an idle machine a wait polls for its spin budget (2 ms) before it sleeps: the reply of
//! a ping-pong comes in a few microseconds, and waking from a sleep costs more than that. On
//! a machine whose cores are taken by other work, polling is the wrong choice: a process
//! that polls uses its whole fair share, so the scheduler takes its core away for a whole
//! time slice of the other work (milliseconds), often just when its message arrives; a
//! process that sleeps until its data comes (a readable socket, or the doorbell of a
//! shared-memory ring) uses little of its share, and its wake-up preempts the other work at
//! once. Measured on 2 cores with a busy loop per core (`bench/load.sh cpu`) and other work
//! beside it, a TCP ping-pong of 8 B took 60–90 µs one way polling and 8–25 µs sleeping at
//! once; on shared-memory rings, 4–5 ms polling (as MPICH's shared memory did) and 6 µs
//! sleeping, woken by the ring's doorbell.
//!
//! What the machine does is seen from the thread's **run-queue delay**: the time it spent
//! runnable but not running, which the kernel keeps per thread (the second field of
//! `/proc/thread-self/schedstat`). A wait that did not end at its first round reads it when
//! it ends, at most once every [`SAMPLE_EVERY`] (one `pread` per a few milliseconds; an idle
//! ping-pong's waits make no system call in between). Spinning pays off while the delay it
//! suffers per wait stays below what a sleep costs ([`WAKE_COST`]): a spinner that loses its
//! core for 3 ms once in 30 ms of 0.4 µs round trips on shared memory loses 0.03 µs per wait
//! and keeps spinning; one that loses it on every other message sleeps. [`Waiting`] counts
//! the waits and the delay over windows of [`WINDOW`]:
//!
//! - **Spin** (the start, and an idle machine): every wait polls for the whole budget. At
//!   least [`LOST`] of delay, and more than [`WAKE_COST`] per wait, switch to Block.
//! - **Block**: waits sleep at once (no spin). Sleeping shows nothing of the machine, so
//!   after a delay (first [`FIRST_BACKOFF`], doubled after each failed trial up to
//!   [`MAX_BACKOFF`]) the waits try spinning again:
//! - **Trial**: waits spin as in Spin for [`WINDOW`]; the same losses go back to Block (the
//!   delay doubled), a window without them goes back to Spin (the delay reset).
//!
//! Where the kernel does not keep the delay (no schedstat), nothing is seen and every wait
//! spins, as before the policy. The policy is a pure state machine over observations and
//! instants, tested without timing.

use std::time::{Duration, Instant};

/// The run-queue delay is read at most this often.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(5);

/// Waits and run-queue delay are counted over windows this long (then start again).
pub(crate) const WINDOW: Duration = Duration::from_millis(20);

/// The least run-queue delay within a window that may switch to Block.
pub(crate) const LOST: Duration = Duration::from_millis(1);

/// What a wait that sleeps costs more than one that spins (a wake-up: about 5–15 µs one
/// way on the VMs measured): spinning is given up when it loses more than this per wait.
pub(crate) const WAKE_COST: Duration = Duration::from_micros(10);

/// Block: the first delay before a trial, and its bound as it doubles.
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(50);
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Spin,
    Block,
    Trial,
}

/// What one wait saw: the thread's run-queue delay so far, read when
/// [`Waiting::wants_delay`] said so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub delay: Option<Duration>,
}

/// The waiting policy of one process (see the module's text).
#[derive(Clone, Debug)]
pub(crate) struct Waiting {
    /// `false`: the spin budget was set by hand (`P2PMPI_SPIN_US`, or `P2PMPI_WAIT=spin`):
    /// every wait spins for it, as before this policy.
    adaptive: bool,
    mode: Mode,
    /// The current window: its start, its waits and the run-queue delay in it.
    window: Option<Instant>,
    waits: u32,
    lost: Duration,
    /// Block: when the next trial starts, and the delay before the one after a failure.
    trial_at: Option<Instant>,
    backoff: Duration,
    /// The last reading of the run-queue delay, and when it was taken.
    delay: Duration,
    read_at: Option<Instant>,
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
            window: None,
            waits: 0,
            lost: Duration::ZERO,
            trial_at: None,
            backoff: FIRST_BACKOFF,
            delay: Duration::ZERO,
            read_at: None,
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// The spin budget of a wait starting at `now`, given the configured budget `full`.
    #[inline]
    pub(crate) fn budget(&mut self, full: Duration, now: Instant) -> Duration {
        if self.mode != Mode::Block {
            return full;
        }
        if self.trial_at.is_some_and(|t| now >= t) {
            self.mode = Mode::Trial;
            self.new_window(now);
            return full;
        }
        Duration::ZERO
    }

    /// Whether a wait ending at `now` reads the run-queue delay.
    #[inline]
    pub(crate) fn wants_delay(&self, now: Instant) -> bool {
        self.adaptive && self.read_at.is_none_or(|t| now >= t + SAMPLE_EVERY)
    }

    /// Records what a wait saw, finished at `now`.
    pub(crate) fn seen(&mut self, seen: Seen, now: Instant) {
        if !self.adaptive {
            return;
        }
        if let Some(d) = seen.delay {
            if self.read_at.is_some() {
                self.lost += d.saturating_sub(self.delay);
            }
            self.delay = d;
            self.read_at = Some(now);
        }
        self.waits = self.waits.saturating_add(1);
        let start = *self.window.get_or_insert(now);
        let losing = self.lost >= LOST && self.lost > WAKE_COST * self.waits;
        let over = now >= start + WINDOW;
        match self.mode {
            Mode::Spin if losing => self.block(now),
            Mode::Trial if losing => {
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                self.block(now);
            }
            Mode::Trial if over => {
                self.mode = Mode::Spin;
                self.backoff = FIRST_BACKOFF;
                self.new_window(now);
            }
            // (Delay counted while asleep is not held against spinning.)
            Mode::Block => self.new_window(now),
            _ if over => self.new_window(now),
            _ => {}
        }
    }

    fn new_window(&mut self, now: Instant) {
        self.window = Some(now);
        self.waits = 0;
        self.lost = Duration::ZERO;
    }

    fn block(&mut self, now: Instant) {
        self.mode = Mode::Block;
        self.new_window(now);
        self.trial_at = Some(now + self.backoff);
    }
}

thread_local! {
    /// This thread's `/proc/thread-self/schedstat`, opened at its first reading (`None`:
    /// it cannot be read here).
    static SCHEDSTAT: Option<std::fs::File> = std::fs::File::open("/proc/thread-self/schedstat").ok();
}

/// The calling thread's run-queue delay so far: the time it was runnable but not running
/// (`None` where the kernel does not keep it).
pub(crate) fn run_delay() -> Option<Duration> {
    use std::os::unix::fs::FileExt;
    SCHEDSTAT.with(|f| {
        let mut buf = [0u8; 96];
        let n = f.as_ref()?.read_at(&mut buf, 0).ok()?;
        parse_run_delay(&buf[..n])
    })
}

/// The run-queue delay of a `schedstat` line: "CPU_NS DELAY_NS SLICES".
fn parse_run_delay(line: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(line).ok()?;
    let ns = text.split_ascii_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: Duration = Duration::from_millis(2);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// A thread whose waits are fed to a policy: its run-queue delay, read when the policy
    /// asks.
    struct Thread {
        w: Waiting,
        delay: Duration,
        t0: Instant,
    }

    impl Thread {
        fn new(adaptive: bool) -> Self {
            Thread { w: Waiting::new(adaptive), delay: Duration::ZERO, t0: Instant::now() }
        }

        /// `n` waits ending at `at` ms (the last), `lost` lost before them.
        fn waits(&mut self, at: u64, n: u32, lost: Duration) {
            self.delay += lost;
            let now = self.t0 + ms(at);
            for _ in 0..n {
                let delay = self.w.wants_delay(now).then_some(self.delay);
                self.w.seen(Seen { delay }, now);
            }
        }

        fn budget(&mut self, at: u64) -> Duration {
            self.w.budget(FULL, self.t0 + ms(at))
        }
    }

    #[test]
    fn an_idle_machine_keeps_spinning() {
        let mut t = Thread::new(true);
        // A wait per millisecond, each losing a few microseconds (kernel workers, yields).
        for i in 0..2000 {
            assert_eq!(t.budget(i), FULL);
            t.waits(i, 1, us(8));
        }
        assert_eq!(t.w.mode(), Mode::Spin);
    }

    #[test]
    fn rare_long_losses_among_many_short_waits_keep_spinning() {
        // Shared memory under load, lucky: 0.4 µs round trips, the core lost for 3 ms
        // every 30 ms.
        let mut t = Thread::new(true);
        t.waits(0, 1, Duration::ZERO);
        for i in 1..100 {
            t.waits(5 * i, 12_000, if i % 6 == 0 { ms(3) } else { Duration::ZERO });
        }
        assert_eq!(t.w.mode(), Mode::Spin);
    }

    #[test]
    fn losing_the_core_on_every_few_waits_switches_to_sleeping() {
        let mut t = Thread::new(true);
        t.waits(0, 1, Duration::ZERO);
        // 50 waits in 5 ms, 0.4 ms lost: 8 µs a wait, less than a sleep costs.
        t.waits(5, 50, us(400));
        assert_eq!(t.w.mode(), Mode::Spin);
        // Then 0.8 ms lost over 10 waits: 1.2 ms over 61 waits, 20 µs a wait.
        t.waits(10, 10, us(800));
        assert_eq!(t.w.mode(), Mode::Block);
        assert_eq!(t.budget(11), Duration::ZERO);
    }

    #[test]
    fn the_delay_is_read_every_few_milliseconds_and_first_as_a_baseline() {
        let mut t = Thread::new(true);
        // The first reading finds the start-up's delay: not counted.
        t.waits(0, 1, ms(100));
        assert_eq!(t.w.mode(), Mode::Spin);
        assert!(!t.w.wants_delay(t.t0 + SAMPLE_EVERY - ms(1)));
        assert!(t.w.wants_delay(t.t0 + SAMPLE_EVERY));
        // What is lost between two readings is counted at the next.
        t.waits(1, 1, us(700));
        t.waits(2, 1, us(300));
        assert_eq!(t.w.mode(), Mode::Spin);
        t.waits(5, 1, Duration::ZERO);
        assert_eq!(t.w.mode(), Mode::Block);
    }

    #[test]
    fn losses_spread_over_windows_do_not_add_up() {
        let mut t = Thread::new(true);
        t.waits(0, 1, Duration::ZERO);
        // 0.6 ms lost in every window of 20 ms, over few waits.
        for i in 1..200 {
            t.waits(5 * i, 2, if i % 4 == 0 { us(600) } else { Duration::ZERO });
        }
        assert_eq!(t.w.mode(), Mode::Spin);
    }

    /// Switches `t` to Block at 5 ms.
    fn blocked() -> Thread {
        let mut t = Thread::new(true);
        t.waits(0, 1, Duration::ZERO);
        t.waits(5, 5, ms(3));
        assert_eq!(t.w.mode(), Mode::Block);
        t
    }

    #[test]
    fn delay_while_asleep_is_not_held_against_spinning() {
        let mut t = blocked();
        // Asleep, woken late now and then (the machine is busy): not counted.
        t.waits(10, 3, ms(2));
        let at = 5 + FIRST_BACKOFF.as_millis() as u64;
        assert_eq!(t.budget(at), FULL);
        t.waits(at + 10, 100, Duration::ZERO);
        t.waits(at + 20, 100, Duration::ZERO);
        assert_eq!(t.w.mode(), Mode::Spin);
    }

    #[test]
    fn a_trial_without_losses_goes_back_to_spinning() {
        let mut t = blocked();
        let at = 5 + FIRST_BACKOFF.as_millis() as u64;
        assert_eq!(t.budget(at - 1), Duration::ZERO, "not before the delay");
        assert_eq!(t.budget(at), FULL, "the trial spins");
        assert_eq!(t.w.mode(), Mode::Trial);
        t.waits(at + 10, 1000, us(100));
        assert_eq!(t.w.mode(), Mode::Trial);
        t.waits(at + 20, 1000, us(100));
        assert_eq!(t.w.mode(), Mode::Spin);
        assert_eq!(t.budget(at + 21), FULL);
    }

    #[test]
    fn failed_trials_back_off_up_to_a_bound() {
        let mut t = blocked();
        let mut now = 5;
        let mut delay = FIRST_BACKOFF.as_millis() as u64;
        for _ in 0..10 {
            // Asleep until the delay is over, then a trial that loses its core.
            assert_eq!(t.budget(now + delay - 1), Duration::ZERO);
            now += delay;
            assert_eq!(t.budget(now), FULL);
            t.waits(now + 5, 5, ms(2));
            now += 5;
            assert_eq!(t.w.mode(), Mode::Block);
            delay = (delay * 2).min(MAX_BACKOFF.as_millis() as u64);
        }
        assert_eq!(delay, MAX_BACKOFF.as_millis() as u64);
        assert_eq!(t.budget(now + delay - 1), Duration::ZERO);
        now += delay;
        assert_eq!(t.budget(now), FULL);
        // A successful trial resets the delay.
        let window = WINDOW.as_millis() as u64;
        t.waits(now + window, 100, Duration::ZERO);
        now += window;
        assert_eq!(t.w.mode(), Mode::Spin);
        t.waits(now + 5, 5, ms(3));
        now += 5;
        assert_eq!(t.w.mode(), Mode::Block);
        assert_eq!(t.budget(now + FIRST_BACKOFF.as_millis() as u64), FULL);
    }

    #[test]
    fn a_budget_set_by_hand_is_kept() {
        let mut t = Thread::new(false);
        for i in 0..10 {
            t.waits(5 * i, 1, ms(5));
            assert_eq!(t.budget(5 * i), FULL);
        }
        assert_eq!(t.w.mode(), Mode::Spin);
        assert!(!t.w.wants_delay(t.t0), "no system call for a budget set by hand");
    }

    #[test]
    fn schedstat_lines_are_read() {
        assert_eq!(parse_run_delay(b"153010 65208 2\n"), Some(Duration::from_nanos(65208)));
        assert_eq!(parse_run_delay(b"153010\n"), None);
        assert_eq!(parse_run_delay(b"1 x 2\n"), None);
        assert_eq!(parse_run_delay(b""), None);
    }

    #[test]
    fn this_thread_s_delay_is_read_and_never_decreases() {
        // Where the kernel keeps it (it does on the machines this runs on), it is read.
        if !std::path::Path::new("/proc/thread-self/schedstat").exists() {
            // Under CI the kernel must keep it: the policy is blind without it.
            assert!(std::env::var("CI").map_or(true, |v| v != "true"), "no /proc/thread-self/schedstat under CI");
            assert_eq!(run_delay(), None);
            return;
        }
        let a = run_delay().expect("schedstat read");
        std::thread::yield_now();
        let b = run_delay().expect("schedstat read again");
        assert!(b >= a);
    }
}
