//! Collective operations. This foundation provides `barrier`; the other collectives of rsmpi
//! (`broadcast_into`, `reduce_into`, `all_reduce_into`, …) arrive with the collectives issue.
//!
//! Collectives run on the communicator's collective context (MID communicator `2c + 1`), so
//! they never match user point-to-point traffic, and over the same MID-ordered messages as
//! point-to-point, so replication covers them without special cases.

use crate::device::SendMode;
use crate::environment::wait_req;
use crate::error::{OrFatal, Result};
use crate::point_to_point::{start_recv, start_send};
use crate::topology::{CommHandle, Communicator};

/// Internal tag of barrier messages (on the collective context).
const TAG_BARRIER: i32 = 1;

/// Collective operations on a communicator.
pub trait CommunicatorCollectives: Communicator {
    /// Blocks until every process of the communicator has called it.
    fn barrier(&self) {
        barrier_impl(self.handle()).or_fatal()
    }
}

impl<C: Communicator + ?Sized> CommunicatorCollectives for C {}

/// Dissemination barrier: ⌈log2 n⌉ rounds; in round k, send to rank + 2^k and receive from
/// rank − 2^k.
fn barrier_impl(h: &CommHandle) -> Result<()> {
    let (n, me) = (h.size(), h.rank());
    let mut dist = 1;
    let mut dummy = 0u8;
    while dist < n {
        let to = (me + dist) % n;
        let from = (me - dist).rem_euclid(n);
        let r = start_recv(h, h.coll_id(), from, TAG_BARRIER, &mut dummy, 0)?;
        let s = start_send(h, h.coll_id(), to, TAG_BARRIER, std::ptr::null(), 0, SendMode::Standard)?;
        wait_req(s.id, s.hint)?;
        r.wait()?;
        dist *= 2;
    }
    Ok(())
}

/// Re-exports for `use mpi::collective::traits::*`.
pub mod traits {
    pub use super::CommunicatorCollectives;
}
