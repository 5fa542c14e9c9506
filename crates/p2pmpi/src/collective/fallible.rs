//! Collectives that return their errors (beyond rsmpi, whose collectives stop the process on
//! an error): the `try_*` forms of [`CommunicatorCollectives`](super::CommunicatorCollectives)
//! and [`Root`](super::Root), for fault-aware programs (`failure::Policy::Notify`, see
//! [`crate::ulfm`]).
//!
//! A collective involving a failed rank returns [`Error::PeerLost`] on the processes that
//! talked to it, and one whose communicator was revoked returns [`Error::Revoked`]. Processes
//! that do not talk to the failed rank may wait for one that gave up: the ULFM way out is
//! that whoever sees an error revokes the communicator
//! ([`FaultTolerant::revoke`](crate::ulfm::FaultTolerant::revoke)), which makes every pending
//! operation on it fail everywhere; then the survivors shrink it. The algorithms are the same
//! as the plain forms'; on success the results are identical.

use super::{Buffer, BufferMut, Operation, PartitionedBuffer, PartitionedBufferMut};
use crate::error::{Error, Result};
use crate::topology::Communicator;

/// The fallible forms of the collectives of a whole communicator.
pub trait TryCollectives: Communicator {
    /// [`barrier`](super::CommunicatorCollectives::barrier), returning its error.
    fn try_barrier(&self) -> Result<()> {
        super::barrier_impl(self.handle())
    }

    /// [`all_gather_into`](super::CommunicatorCollectives::all_gather_into), returning its error.
    fn try_all_gather_into<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) -> Result<()> {
        super::all_gather_impl(self.handle(), sendbuf, recvbuf)
    }

    /// [`all_gather_varcount_into`](super::CommunicatorCollectives::all_gather_varcount_into),
    /// returning its error.
    fn try_all_gather_varcount_into<S: ?Sized + Buffer, R: ?Sized + PartitionedBufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) -> Result<()> {
        super::all_gather_varcount_impl(self.handle(), sendbuf, recvbuf)
    }

    /// [`all_to_all_into`](super::CommunicatorCollectives::all_to_all_into), returning its error.
    fn try_all_to_all_into<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) -> Result<()> {
        super::all_to_all_impl(self.handle(), sendbuf, recvbuf)
    }

    /// [`all_to_all_varcount_into`](super::CommunicatorCollectives::all_to_all_varcount_into),
    /// returning its error.
    fn try_all_to_all_varcount_into<S: ?Sized + PartitionedBuffer, R: ?Sized + PartitionedBufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) -> Result<()> {
        super::all_to_all_varcount_impl(self.handle(), sendbuf, recvbuf)
    }

    /// [`all_reduce_into`](super::CommunicatorCollectives::all_reduce_into), returning its error.
    fn try_all_reduce_into<S: ?Sized + Buffer, R: ?Sized + BufferMut, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) -> Result<()> {
        super::all_reduce_impl(self.handle(), sendbuf, recvbuf, &op)
    }

    /// [`reduce_scatter_block_into`](super::CommunicatorCollectives::reduce_scatter_block_into),
    /// returning its error.
    fn try_reduce_scatter_block_into<S: ?Sized + Buffer, R: ?Sized + BufferMut, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) -> Result<()> {
        super::reduce_scatter_block_impl(self.handle(), sendbuf, recvbuf, &op)
    }

    /// [`scan_into`](super::CommunicatorCollectives::scan_into), returning its error.
    fn try_scan_into<S: ?Sized + Buffer, R: ?Sized + BufferMut, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) -> Result<()> {
        super::scan_impl(self.handle(), sendbuf, recvbuf, &op)
    }

    /// [`exclusive_scan_into`](super::CommunicatorCollectives::exclusive_scan_into), returning
    /// its error.
    fn try_exclusive_scan_into<S: ?Sized + Buffer, R: ?Sized + BufferMut, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) -> Result<()> {
        super::exscan_impl(self.handle(), sendbuf, recvbuf, &op)
    }
}

impl<C: Communicator + ?Sized> TryCollectives for C {}

/// A wrong call (the root's form on another process, or the reverse): the plain forms stop
/// with the same message.
fn misuse(what: &str) -> Error {
    Error::Collective(what.to_string())
}

/// The fallible forms of the collectives with a root (called on the root's
/// [`Process`](crate::topology::Process)).
pub trait TryRoot: super::Root {
    /// [`broadcast_into`](super::Root::broadcast_into), returning its error.
    fn try_broadcast_into<Buf: ?Sized + BufferMut>(&self, buffer: &mut Buf) -> Result<()> {
        super::root_bcast_impl(self.root_handle(), self.root_rank(), buffer)
    }

    /// [`gather_into`](super::Root::gather_into) (on non-root processes), returning its error.
    fn try_gather_into<S: ?Sized + Buffer>(&self, sendbuf: &S) -> Result<()> {
        if self.as_communicator().rank() == self.root_rank() {
            return Err(misuse("gather_into must not be called on the root (use gather_into_root)"));
        }
        super::root_gather_impl(self.root_handle(), self.root_rank(), sendbuf)
    }

    /// [`gather_into_root`](super::Root::gather_into_root), returning its error.
    fn try_gather_into_root<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) -> Result<()> {
        if self.as_communicator().rank() != self.root_rank() {
            return Err(misuse("gather_into_root must be called on the root"));
        }
        super::root_gather_root_impl(self.root_handle(), sendbuf, recvbuf)
    }

    /// [`scatter_into`](super::Root::scatter_into), returning its error.
    fn try_scatter_into<R: ?Sized + BufferMut>(&self, recvbuf: &mut R) -> Result<()> {
        super::root_scatter_impl(self.root_handle(), self.root_rank(), recvbuf)
    }

    /// [`scatter_into_root`](super::Root::scatter_into_root), returning its error.
    fn try_scatter_into_root<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) -> Result<()> {
        super::root_scatter_root_impl(self.root_handle(), sendbuf, recvbuf)
    }

    /// [`reduce_into`](super::Root::reduce_into) (on non-root processes), returning its error.
    fn try_reduce_into<S: ?Sized + Buffer, O: Operation>(&self, sendbuf: &S, op: O) -> Result<()> {
        super::root_reduce_impl(self.root_handle(), self.root_rank(), sendbuf, &op)
    }

    /// [`reduce_into_root`](super::Root::reduce_into_root), returning its error.
    fn try_reduce_into_root<S: ?Sized + Buffer, R: ?Sized + BufferMut, O: Operation>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
        op: O,
    ) -> Result<()> {
        super::root_reduce_root_impl(self.root_handle(), sendbuf, recvbuf, &op)
    }
}

impl<T: super::Root + ?Sized> TryRoot for T {}
