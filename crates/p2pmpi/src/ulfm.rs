//! Fault-aware MPI, beyond rsmpi: agreement, shrinking and failure acknowledgement on a
//! communicator, with the semantics of ULFM (Open MPI 5's `MPIX_Comm_agree`,
//! `MPIX_Comm_shrink`, `MPIX_Comm_failure_ack` and `MPIX_Comm_failure_get_acked`, the MPI
//! Forum's fault-tolerance proposal).
//!
//! For programs that keep running when a process fails
//! (`mpi::failure::set_policy(Policy::Notify)` before `initialize`):
//!
//! ```no_run
//! # extern crate p2pmpi as mpi;
//! use mpi::traits::*;
//! use mpi::ulfm::FaultTolerant;
//!
//! mpi::failure::set_policy(mpi::failure::Policy::Notify);
//! let universe = mpi::initialize().unwrap();
//! let world = universe.world();
//! // ... a communication failed: which ranks are gone, and a communicator without them.
//! let survivors = world.shrink().expect("shrink");
//! world.failure_ack();
//! let all_done = world.agree(1).unwrap_or(0); // 1 only if every survivor said 1
//! # let _ = (survivors, all_done);
//! ```
//!
//! **How it works.** Agreement is decided where deaths are decided: by the job's launcher
//! ([`p2pmpi_core::agreement`]). Each member sends its flag over its authenticated control
//! connection; the launcher decides once every member has contributed or been declared
//! failed, and sends the same decision — the AND of the flags, the failed members, a number
//! unique in the job — to every member. So every survivor gets the same answer however
//! processes fail during the agreement, and it comes as soon as the failure detector has
//! declared the dead. A shrink is an agreement whose decision names the survivors and, by its
//! number, the new communicator's context: no other message is needed, so a failure during a
//! shrink cannot split the survivors. With `-r R`, a rank counts as failed only once every
//! replica of it has (replicas contribute the same values: they follow their master).

pub use crate::collective::{TryCollectives, TryImmediateCollectives, TryImmediateRoot, TryRoot};
use crate::topology::{Communicator, Rank, SimpleCommunicator};

/// Context ids of communicators made by [`FaultTolerant::shrink`]: this base plus the
/// agreement's number (the ids `split` and `duplicate` hand out stay far below).
const SHRINK_CTX_BASE: u32 = 0x4000_0000;

/// Why a fault-tolerant operation did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultError {
    /// Members failed that this process has not acknowledged ([`FaultTolerant::failure_ack`]):
    /// `failed` lists them (ranks of the communicator). `agreed` is the value the survivors
    /// agreed on all the same.
    #[error("rank(s) {failed:?} of the communicator failed (not acknowledged); the agreed value is {agreed:#x}")]
    ProcFailed { failed: Vec<Rank>, agreed: u32 },
    /// The launcher refused this process's contribution (it was declared failed, or the
    /// members disagree on the communicator).
    #[error("the agreement was refused: {0}")]
    Refused(String),
    /// This process stopped communicating (a fatal error of the library).
    #[error("{0}")]
    Library(String),
}

/// Communicator context `ctx` was revoked (told by the launcher, or by this process itself).
pub(crate) fn revoked(ctx: u32) {
    crate::device::revocations::told(ctx);
}

/// A decision: the agreed flag, the failed members (ranks of the communicator), its number.
struct Decided {
    flag: u32,
    failed: Vec<Rank>,
    id: u64,
}

/// Runs one agreement on `comm` with `flag`.
fn agreement<C: Communicator + ?Sized>(comm: &C, flag: u32) -> Result<Decided, FaultError> {
    let h = comm.handle();
    let ctx = h.0.ctx;
    let seq = {
        let mut g = crate::context::current().agreement_seq.lock();
        let s = g.entry(ctx).or_insert(0);
        *s += 1;
        *s - 1
    };
    let members: Vec<u32> = (0..h.size()).map(|r| h.world_rank(r) as u32).collect();
    let key = (ctx as u64, seq);
    crate::bootstrap::agreements::contribute(key, &members, flag);
    let outcome = crate::context::wait_until(None, |_| crate::bootstrap::agreements::take(key).map(Ok))
        .map_err(|e| FaultError::Library(e.to_string()))?;
    let (flag, failed_world, id) = outcome.map_err(FaultError::Refused)?;
    let failed = members.iter().enumerate().filter(|(_, w)| failed_world.contains(w)).map(|(r, _)| r as Rank).collect();
    Ok(Decided { flag, failed, id })
}

/// The world ranks known failed now. With `-r R` this is the master's view, which its
/// replicas follow (a choice point): what each one heard so far may differ.
fn failed_world() -> Vec<Rank> {
    let c = crate::context::with_engine(|e| e.replicated().then(|| e.completion_point()).flatten());
    match c {
        None => crate::failure::failed_ranks(),
        Some(c) => crate::context::wait_until(None, |e| e.lost_view_at(c).map(Ok))
            .unwrap_or_else(|_| crate::failure::failed_ranks()),
    }
}

/// Agreement, shrinking and failure acknowledgement (ULFM), on every communicator.
pub trait FaultTolerant: Communicator {
    /// Agrees with the members that did not fail on `flag`: every survivor gets the bitwise
    /// AND of the flags contributed (by the survivors, and by members that failed after
    /// contributing), even if members fail during the agreement. Collective over the
    /// communicator's survivors.
    ///
    /// `Err(ProcFailed)` when members failed that this process has not acknowledged with
    /// [`failure_ack`](FaultTolerant::failure_ack) — the agreed value is in the error: the
    /// survivors agreed all the same (and those that had acknowledged every failure got
    /// `Ok`).
    fn agree(&self, flag: u32) -> Result<u32, FaultError> {
        let d = agreement(self, flag)?;
        let acked = self.failure_get_acked();
        let unacked: Vec<Rank> = d.failed.iter().copied().filter(|r| !acked.contains(r)).collect();
        if unacked.is_empty() {
            Ok(d.flag)
        } else {
            Err(FaultError::ProcFailed { failed: unacked, agreed: d.flag })
        }
    }

    /// A new communicator of the members that did not fail, in the same order. Collective
    /// over the survivors; it succeeds even if members fail while it runs (they are then
    /// left out, or are in the new communicator and will be reported failed in it).
    fn shrink(&self) -> Result<SimpleCommunicator, FaultError> {
        let d = agreement(self, u32::MAX)?;
        let h = self.handle();
        let survivors: Vec<Rank> = (0..h.size()).filter(|r| !d.failed.contains(r)).map(|r| h.world_rank(r)).collect();
        let me = h.world_rank(h.rank());
        if !survivors.contains(&me) {
            return Err(FaultError::Refused("this process was declared failed".into()));
        }
        let ctx = SHRINK_CTX_BASE + (d.id as u32 & (SHRINK_CTX_BASE - 1));
        Ok(crate::topology::new_comm(ctx, survivors, me))
    }

    /// Revokes the communicator for every member (ULFM's `MPIX_Comm_revoke`): communication
    /// on it that is pending or started later fails with
    /// [`Error::Revoked`](crate::error::Error::Revoked) on every member, wherever it waits —
    /// also members that never talk to a failed process and would otherwise wait for one that
    /// gave up. Agreement, shrinking and failure acknowledgement still work on it. Not
    /// collective: any member may call it, once or several times. With `-r R`, a rank's
    /// master decides which of its operations the revocation fails, and its replicas follow.
    fn revoke(&self) -> Result<(), FaultError> {
        let ctx = self.handle().0.ctx;
        revoked(ctx);
        crate::bootstrap::revoke(ctx);
        Ok(())
    }

    /// Whether the communicator was revoked (by any member, as this process heard so far).
    fn is_revoked(&self) -> bool {
        crate::device::revocations::is_revoked(self.handle().0.ctx)
    }

    /// Acknowledges the failures of members known to this process now: later agreements no
    /// longer report them as errors.
    fn failure_ack(&self) {
        let failed = self.failed_members();
        let ctx = self.handle().0.ctx;
        crate::context::acknowledge(ctx, failed);
    }

    /// The members whose failure this process acknowledged (ranks of the communicator).
    fn failure_get_acked(&self) -> Vec<Rank> {
        let ctx = self.handle().0.ctx;
        crate::context::acknowledged(ctx)
    }

    /// The members known failed now (ranks of the communicator; the failure detectors'
    /// notices and the launcher's declarations).
    fn failed_members(&self) -> Vec<Rank> {
        let h = self.handle();
        let failed = failed_world();
        (0..h.size()).filter(|&r| failed.contains(&h.world_rank(r))).collect()
    }
}

impl<C: Communicator + ?Sized> FaultTolerant for C {}
