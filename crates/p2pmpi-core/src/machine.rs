//! One vocabulary for every core: the [`Machine`] trait and its time type.
//!
//! Each protocol of this crate (the failure detectors, the reservation service, fencing,
//! agreement, JEL, the replication endpoint, the job supervisor) is a deterministic state
//! machine driven the same way, whatever it does:
//!
//! * an **input** goes in with the time it happened ([`Machine::handle_input`]): a message
//!   that arrived, a request of the local application, a failure notice;
//! * the passing of time goes in as a **timeout** ([`Machine::handle_timeout`]), called no
//!   later than [`Machine::poll_timeout`] said, and harmless when called early;
//! * **outputs** come out one at a time ([`Machine::poll_output`]) until it returns `None`:
//!   datagrams to send, events to report, decisions to carry out.
//!
//! Drivers (the daemons, the library's threads, the launchers) and the simulator call nothing
//! else to run a machine, so the same code runs on real sockets and under virtual time. A
//! machine never reads a clock: time is a [`Time`], the duration since an origin chosen by its
//! driver (the process start for a real driver, zero for the simulator). This is the style of
//! quinn-proto and foca.
//!
//! Fast paths may stay direct calls (the replication endpoint's per-send bookkeeping), and a
//! machine may offer queries (`&self` methods) beside the trait; but every state change that a
//! driver causes goes through it.

use std::time::Duration;

/// The time of every core: the duration since an origin chosen by the driver.
pub type Time = Duration;

/// A protocol core driven by inputs and time, producing outputs to poll.
pub trait Machine {
    /// What the driver feeds in (a message with its sender, a local request, a notice).
    type Input;
    /// What the driver carries out (a datagram to send, an event, a decision).
    type Output;
    /// Why an input was refused (a forged or stale message); `std::convert::Infallible` for
    /// machines that accept everything. A refused input changes nothing.
    type Rejected;

    /// Feeds one input, at `now`.
    fn handle_input(&mut self, now: Time, input: Self::Input) -> Result<(), Self::Rejected>;

    /// Lets time pass up to `now`: timers that are due fire. Called at the latest at
    /// [`poll_timeout`](Self::poll_timeout); calling it earlier or more often is harmless.
    fn handle_timeout(&mut self, now: Time);

    /// The next output, if any.
    fn poll_output(&mut self) -> Option<Self::Output>;

    /// When [`handle_timeout`](Self::handle_timeout) must be called next (`None`: no timer
    /// is armed, only an input can make progress).
    fn poll_timeout(&self) -> Option<Time>;

    /// Every pending output, in order (a convenience for drivers and tests).
    fn drain_outputs(&mut self) -> Vec<Self::Output> {
        std::iter::from_fn(|| self.poll_output()).collect()
    }
}
