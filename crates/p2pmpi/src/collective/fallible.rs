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

    /// [`gather_varcount_into_root`](super::Root::gather_varcount_into_root), returning its
    /// error.
    fn try_gather_varcount_into_root<S: ?Sized + Buffer, R: ?Sized + PartitionedBufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) -> Result<()> {
        if self.as_communicator().rank() != self.root_rank() {
            return Err(misuse("gather_varcount_into_root must be called on the root"));
        }
        super::root_gatherv_root_impl(self.root_handle(), sendbuf, recvbuf)
    }

    /// [`scatter_varcount_into_root`](super::Root::scatter_varcount_into_root), returning its
    /// error.
    fn try_scatter_varcount_into_root<S: ?Sized + PartitionedBuffer, R: ?Sized + BufferMut>(
        &self,
        sendbuf: &S,
        recvbuf: &mut R,
    ) -> Result<()> {
        super::root_scatterv_root_impl(self.root_handle(), sendbuf, recvbuf)
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

// ------------------------------------------------------------------------ immediate forms

use super::immediate::{self, exchange_plan, KeptOp};
use super::{
    blocks, check_len, concat, i_all_gather, i_all_gather_varcount, i_all_to_all, i_all_to_all_varcount,
    i_recv_from_root, i_reduce_scatter_block, i_reduction, i_scatter_root, i_send_to_root, out_len, output, packed,
    parts_output, send_parts, write_parts,
};
use crate::request::{Request, Scope, StaticScope};

/// A request that writes `buf`, started by `start` (its error returned, nothing left posted).
fn try_recv_request<'a, R: ?Sized + 'a, Sc: Scope<'a>>(
    buf: &'a mut R,
    scope: Sc,
    start: impl FnOnce(&mut R) -> Result<crate::request::Pending>,
) -> Result<Request<'a, R, Sc>> {
    Request::try_receive(buf, scope, start)
}

/// The fallible forms of the immediate collectives of a whole communicator: a wrong call
/// (mismatched buffer sizes, an intercommunicator) returns its error instead of stopping the
/// process, and a failure while the collective runs (a member lost, the communicator revoked)
/// fails its request: [`Request::try_wait`], [`Request::try_test`],
/// [`try_wait_any`](crate::request::try_wait_any) and a collection's `try_wait_any` /
/// `try_test_any` return it (the plain `wait` and `test` stop the process with it).
pub trait TryImmediateCollectives: Communicator {
    /// [`immediate_barrier`](super::CommunicatorCollectives::immediate_barrier), returning its
    /// error.
    fn try_immediate_barrier(&self) -> Result<Request<'static, ()>> {
        let h = self.handle();
        let plan = immediate::barrier_plan(h.rank(), h.size());
        Ok(Request::new(immediate::start(h, "immediate_barrier", plan)?, &(), StaticScope))
    }

    /// [`immediate_all_gather_into`](super::CommunicatorCollectives::immediate_all_gather_into),
    /// returning its error.
    fn try_immediate_all_gather_into<'a, S, R, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Result<Request<'a, R, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        R: 'a + ?Sized + BufferMut,
        Sc: Scope<'a>,
    {
        let mine = packed(sendbuf).bytes.into_owned();
        try_recv_request(recvbuf, scope, |r| i_all_gather(self.handle(), mine, output(r)))
    }

    /// [`immediate_all_gather_varcount_into`](super::CommunicatorCollectives::immediate_all_gather_varcount_into),
    /// returning its error.
    fn try_immediate_all_gather_varcount_into<'a, S, R, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Result<Request<'a, R, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        R: 'a + ?Sized + PartitionedBufferMut,
        Sc: Scope<'a>,
    {
        let mine = packed(sendbuf).bytes.into_owned();
        try_recv_request(recvbuf, scope, |r| {
            let (out, ranges) = parts_output(r, "immediate_all_gather_varcount_into")?;
            i_all_gather_varcount(self.handle(), mine, out, ranges)
        })
    }

    /// [`immediate_all_to_all_into`](super::CommunicatorCollectives::immediate_all_to_all_into),
    /// returning its error.
    fn try_immediate_all_to_all_into<'a, S, R, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Result<Request<'a, R, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        R: 'a + ?Sized + BufferMut,
        Sc: Scope<'a>,
    {
        let what = "immediate_all_to_all_into";
        let outgoing = blocks(what, &packed(sendbuf).bytes, self.handle().size() as usize)?;
        try_recv_request(recvbuf, scope, |r| i_all_to_all(self.handle(), outgoing, output(r), what))
    }

    /// [`immediate_all_to_all_varcount_into`](super::CommunicatorCollectives::immediate_all_to_all_varcount_into),
    /// returning its error.
    fn try_immediate_all_to_all_varcount_into<'a, S, R, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Result<Request<'a, R, Sc>>
    where
        S: 'a + ?Sized + PartitionedBuffer,
        R: 'a + ?Sized + PartitionedBufferMut,
        Sc: Scope<'a>,
    {
        let what = "immediate_all_to_all_varcount_into";
        let outgoing = send_parts(sendbuf, what)?;
        try_recv_request(recvbuf, scope, |r| {
            let (out, ranges) = parts_output(r, what)?;
            i_all_to_all_varcount(self.handle(), outgoing, out, ranges)
        })
    }

    /// [`immediate_all_reduce_into`](super::CommunicatorCollectives::immediate_all_reduce_into),
    /// returning its error.
    fn try_immediate_all_reduce_into<'a, S, R, O, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Result<Request<'a, R, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        R: 'a + ?Sized + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        let p = packed(sendbuf);
        let (map, count, mine) = (p.map, p.count, p.bytes.into_owned());
        // SAFETY: the schedule keeping `op` is over before the request completes, and the
        // request cannot outlive `'a` (see `KeptOp::new`).
        let op = unsafe { KeptOp::new(op) };
        try_recv_request(recvbuf, scope, |r| {
            let what = "immediate_all_reduce_into";
            i_reduction(self.handle(), what, mine, map, count, op, |_| true, |_| true, Some(output(r)))
        })
    }

    /// [`immediate_reduce_scatter_block_into`](super::CommunicatorCollectives::immediate_reduce_scatter_block_into),
    /// returning its error.
    fn try_immediate_reduce_scatter_block_into<'a, S, R, O, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Result<Request<'a, R, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        R: 'a + ?Sized + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        let p = packed(sendbuf);
        // SAFETY: as in `try_immediate_all_reduce_into`.
        let op = unsafe { KeptOp::new(op) };
        try_recv_request(recvbuf, scope, |r| i_reduce_scatter_block(self.handle(), p, output(r), op))
    }

    /// [`immediate_scan_into`](super::CommunicatorCollectives::immediate_scan_into), returning
    /// its error.
    fn try_immediate_scan_into<'a, S, R, O, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Result<Request<'a, R, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        R: 'a + ?Sized + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        let p = packed(sendbuf);
        let (map, count, mine) = (p.map, p.count, p.bytes.into_owned());
        // SAFETY: as in `try_immediate_all_reduce_into`.
        let op = unsafe { KeptOp::new(op) };
        let me = self.rank();
        try_recv_request(recvbuf, scope, |r| {
            let what = "immediate_scan_into";
            i_reduction(self.handle(), what, mine, map, count, op, |d| d > me, |s| s <= me, Some(output(r)))
        })
    }

    /// [`immediate_exclusive_scan_into`](super::CommunicatorCollectives::immediate_exclusive_scan_into),
    /// returning its error.
    fn try_immediate_exclusive_scan_into<'a, S, R, O, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Result<Request<'a, R, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        R: 'a + ?Sized + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        let p = packed(sendbuf);
        let (map, count, mine) = (p.map, p.count, p.bytes.into_owned());
        // SAFETY: as in `try_immediate_all_reduce_into`.
        let op = unsafe { KeptOp::new(op) };
        let me = self.rank();
        try_recv_request(recvbuf, scope, |r| {
            let what = "immediate_exclusive_scan_into";
            i_reduction(self.handle(), what, mine, map, count, op, |d| d > me, |s| s < me, Some(output(r)))
        })
    }
}

impl<C: Communicator + ?Sized> TryImmediateCollectives for C {}

/// The fallible forms of the immediate collectives with a root (called on the root's
/// [`Process`](crate::topology::Process)); see [`TryImmediateCollectives`] for how their
/// errors come out.
pub trait TryImmediateRoot: super::Root {
    /// [`immediate_broadcast_into`](super::Root::immediate_broadcast_into), returning its error.
    fn try_immediate_broadcast_into<'a, Buf, Sc>(&self, scope: Sc, buf: &'a mut Buf) -> Result<Request<'a, Buf, Sc>>
    where
        Buf: 'a + ?Sized + BufferMut,
        Sc: Scope<'a>,
    {
        let h = self.root_handle();
        let root = self.root_rank();
        try_recv_request(buf, scope, |b| {
            let out = output(b);
            let (data, out) = if h.rank() == root {
                let mut v = Vec::new();
                // SAFETY: `BufferMut`'s contract: readable for `count` initialised elements (the
                // root's data), borrowed for the call.
                unsafe { out.map.pack(out.ptr.0, out.count, &mut v) };
                (v, None)
            } else {
                (vec![0u8; out_len(&out)], Some(out))
            };
            let plan = immediate::bcast_plan(h.rank(), h.size(), root, data, out);
            immediate::start(h, "immediate_broadcast_into", plan)
        })
    }

    /// [`immediate_gather_into`](super::Root::immediate_gather_into) (on non-root processes),
    /// returning its error.
    fn try_immediate_gather_into<'a, S, Sc>(&self, scope: Sc, sendbuf: &'a S) -> Result<Request<'a, S, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        Sc: Scope<'a>,
    {
        if self.as_communicator().rank() == self.root_rank() {
            return Err(misuse(
                "immediate_gather_into must not be called on the root (use immediate_gather_into_root)",
            ));
        }
        let p = i_send_to_root(self.root_handle(), self.root_rank(), sendbuf, "immediate_gather_into")?;
        Ok(Request::new(p, sendbuf, scope))
    }

    /// [`immediate_gather_into_root`](super::Root::immediate_gather_into_root), returning its
    /// error.
    fn try_immediate_gather_into_root<'a, S, R, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Result<Request<'a, R, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        R: 'a + ?Sized + BufferMut,
        Sc: Scope<'a>,
    {
        let h = self.root_handle();
        let mine = packed(sendbuf).bytes.into_owned();
        try_recv_request(recvbuf, scope, |r| {
            let what = "immediate_gather_into_root";
            let out = output(r);
            let n = h.size() as usize;
            check_len(what, out_len(&out), mine.len() * n)?;
            let len = mine.len();
            let mut outgoing = vec![None; n];
            outgoing[h.rank() as usize] = Some(mine);
            let plan = exchange_plan(h.rank(), h.size(), outgoing, vec![Some(len); n], move |parts| {
                // SAFETY: the request's receive buffer, still borrowed and writable.
                unsafe { out.write(&concat(&parts)) };
                Ok(())
            });
            immediate::start(h, what, plan)
        })
    }

    /// [`immediate_gather_varcount_into`](super::Root::immediate_gather_varcount_into) (on
    /// non-root processes), returning its error.
    fn try_immediate_gather_varcount_into<'a, Sc, S>(&self, scope: Sc, sendbuf: &'a S) -> Result<Request<'a, S, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        Sc: Scope<'a>,
    {
        let what = "immediate_gather_varcount_into";
        let p = i_send_to_root(self.root_handle(), self.root_rank(), sendbuf, what)?;
        Ok(Request::new(p, sendbuf, scope))
    }

    /// [`immediate_gather_varcount_into_root`](super::Root::immediate_gather_varcount_into_root),
    /// returning its error.
    fn try_immediate_gather_varcount_into_root<'a, Sc, S, R>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Result<Request<'a, R, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        R: 'a + ?Sized + PartitionedBufferMut,
        Sc: Scope<'a>,
    {
        let h = self.root_handle();
        let mine = packed(sendbuf).bytes.into_owned();
        try_recv_request(recvbuf, scope, |r| {
            let what = "immediate_gather_varcount_into_root";
            let (out, ranges) = parts_output(r, what)?;
            let (n, me) = (h.size() as usize, h.rank() as usize);
            check_len(what, mine.len(), ranges[me].1)?;
            let mut outgoing = vec![None; n];
            outgoing[me] = Some(mine);
            let incoming = ranges.iter().map(|&(_, l)| Some(l)).collect();
            let plan = exchange_plan(h.rank(), h.size(), outgoing, incoming, move |parts| {
                write_parts(&out, &ranges, &parts);
                Ok(())
            });
            immediate::start(h, what, plan)
        })
    }

    /// [`immediate_scatter_into`](super::Root::immediate_scatter_into) (on non-root processes),
    /// returning its error.
    fn try_immediate_scatter_into<'a, Sc, R>(&self, scope: Sc, recvbuf: &'a mut R) -> Result<Request<'a, R, Sc>>
    where
        R: 'a + ?Sized + BufferMut,
        Sc: Scope<'a>,
    {
        let (h, root) = (self.root_handle(), self.root_rank());
        try_recv_request(recvbuf, scope, |r| i_recv_from_root(h, root, output(r), "immediate_scatter_into"))
    }

    /// [`immediate_scatter_into_root`](super::Root::immediate_scatter_into_root), returning its
    /// error.
    fn try_immediate_scatter_into_root<'a, Sc, S, R>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Result<Request<'a, R, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        R: 'a + ?Sized + BufferMut,
        Sc: Scope<'a>,
    {
        let h = self.root_handle();
        let what = "immediate_scatter_into_root";
        let outgoing = blocks(what, &packed(sendbuf).bytes, h.size() as usize)?;
        try_recv_request(recvbuf, scope, |r| i_scatter_root(h, outgoing, output(r), what))
    }

    /// [`immediate_scatter_varcount_into`](super::Root::immediate_scatter_varcount_into) (on
    /// non-root processes), returning its error.
    fn try_immediate_scatter_varcount_into<'a, Sc, R>(
        &self,
        scope: Sc,
        recvbuf: &'a mut R,
    ) -> Result<Request<'a, R, Sc>>
    where
        R: 'a + ?Sized + BufferMut,
        Sc: Scope<'a>,
    {
        let (h, root) = (self.root_handle(), self.root_rank());
        try_recv_request(recvbuf, scope, |r| i_recv_from_root(h, root, output(r), "immediate_scatter_varcount_into"))
    }

    /// [`immediate_scatter_varcount_into_root`](super::Root::immediate_scatter_varcount_into_root),
    /// returning its error.
    fn try_immediate_scatter_varcount_into_root<'a, Sc, S, R>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Result<Request<'a, R, Sc>>
    where
        S: 'a + ?Sized + PartitionedBuffer,
        R: 'a + ?Sized + BufferMut,
        Sc: Scope<'a>,
    {
        let h = self.root_handle();
        let what = "immediate_scatter_varcount_into_root";
        let outgoing = send_parts(sendbuf, what)?;
        try_recv_request(recvbuf, scope, |r| i_scatter_root(h, outgoing, output(r), what))
    }

    /// [`immediate_reduce_into`](super::Root::immediate_reduce_into) (on non-root processes),
    /// returning its error.
    fn try_immediate_reduce_into<'a, Sc, S, O>(&self, scope: Sc, sendbuf: &'a S, op: O) -> Result<Request<'a, S, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        let (h, root) = (self.root_handle(), self.root_rank());
        let p = packed(sendbuf);
        let (map, count, mine) = (p.map, p.count, p.bytes.into_owned());
        // SAFETY: the schedule keeping `op` is over before the request completes, and the
        // request cannot outlive `'a` (see `KeptOp::new`).
        let op = unsafe { KeptOp::new(op) };
        let what = "immediate_reduce_into";
        let p = i_reduction(h, what, mine, map, count, op, |d| d == root, |_| false, None)?;
        Ok(Request::new(p, sendbuf, scope))
    }

    /// [`immediate_reduce_into_root`](super::Root::immediate_reduce_into_root), returning its
    /// error.
    fn try_immediate_reduce_into_root<'a, Sc, S, R, O>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Result<Request<'a, R, Sc>>
    where
        S: 'a + ?Sized + Buffer,
        R: 'a + ?Sized + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        let h = self.root_handle();
        let p = packed(sendbuf);
        let (map, count, mine) = (p.map, p.count, p.bytes.into_owned());
        // SAFETY: as in `try_immediate_reduce_into`.
        let op = unsafe { KeptOp::new(op) };
        try_recv_request(recvbuf, scope, |r| {
            let what = "immediate_reduce_into_root";
            i_reduction(h, what, mine, map, count, op, |_| false, |_| true, Some(output(r)))
        })
    }
}

impl<T: super::Root + ?Sized> TryImmediateRoot for T {}
