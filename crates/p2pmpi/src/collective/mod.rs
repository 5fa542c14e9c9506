//! Collective communication, with rsmpi's API: [`CommunicatorCollectives`] (operations of the
//! whole communicator) and [`Root`] (operations with a root process), plus the reduction
//! operations of [`ops`].
//!
//! Collectives run on the communicator's collective context (MID communicator `2c + 1`), so
//! they never match user point-to-point traffic, over the same MID-ordered messages as
//! point-to-point. The algorithms are in [`algorithms`].

pub mod algorithms;
mod fallible;
pub(crate) mod handles;
pub(crate) mod hier;
mod inter;
mod pair;
pub use fallible::{TryCollectives, TryImmediateCollectives, TryImmediateRoot, TryRoot};
pub(crate) mod immediate;
pub mod ops;

use crate::datatype::{
    Buffer, BufferMut, Partitioned, PartitionedBuffer, PartitionedBufferMut, TypeMap, UncommittedDatatype,
};
use crate::error::{Error, OrFatal, Result};
use crate::topology::{sealed::AsHandle, AsCommunicator, CommHandle, Communicator, Process, Rank};
use algorithms::Coll;
use std::borrow::Cow;
use std::marker::PhantomData;

/// How many collectives this process has run with the hierarchical algorithms (phases
/// inside each host, then across hosts; see docs/mpi-library.md). For tests and diagnostics.
#[doc(hidden)]
pub fn hierarchical_collectives() -> u64 {
    hier::run_count()
}

pub use ops::{reduce_local_into, Operation, SystemOperation, UnsafeUserFunction, UnsafeUserOperation, UserOperation};

/// A send buffer as packed bytes (borrowed in place when the layout is contiguous).
struct Packed<'a> {
    bytes: Cow<'a, [u8]>,
    map: TypeMap,
    count: usize,
}

fn packed<B: ?Sized + Buffer>(b: &B) -> Packed<'_> {
    let dt = b.as_datatype();
    let map = dt.type_map().clone();
    let count = b.count().max(0) as usize;
    let bytes = if map.is_contiguous() {
        // SAFETY: `Buffer`'s contract: `b.pointer()` is readable for `count` initialised
        // elements, which for a contiguous layout are `count * size` bytes with no gap; the
        // slice borrows `b`, so it cannot outlive that.
        Cow::Borrowed(unsafe { std::slice::from_raw_parts(b.pointer() as *const u8, count * map.size()) })
    } else {
        let mut v = Vec::new();
        // SAFETY: `Buffer`'s contract: `b.pointer()` is readable for `count` initialised
        // elements of the layout.
        unsafe { map.pack(b.pointer() as *const u8, count, &mut v) };
        Cow::Owned(v)
    };
    Packed { bytes, map, count }
}

/// A receive buffer as packed bytes: written in place when its layout allows it
/// ([`TypeMap::receives_in_place`]), else staged and unpacked by [`Target::finish`]. It holds
/// the buffer's mutable borrow.
struct Target<'b> {
    ptr: *mut u8,
    map: TypeMap,
    count: usize,
    tmp: Option<Vec<u8>>,
    buffer: PhantomData<&'b mut [u8]>,
}

fn target<B: ?Sized + BufferMut>(b: &mut B) -> Target<'_> {
    let dt = b.as_datatype();
    let map = dt.type_map().clone();
    let count = b.count().max(0) as usize;
    let ptr = b.pointer_mut() as *mut u8;
    let tmp = (!map.receives_in_place()).then(|| vec![0u8; count * map.size()]);
    Target { ptr, map, count, tmp, buffer: PhantomData }
}

impl Target<'_> {
    fn bytes(&mut self) -> &mut [u8] {
        let len = self.len();
        match &mut self.tmp {
            Some(v) => v,
            // SAFETY: in place: the layout is contiguous without `bool`, so the `count`
            // elements are `count * size` initialised bytes at `ptr`, readable and writable
            // (`BufferMut`'s contract) while the borrow `Target` holds lasts, and any byte
            // values are valid there. The slice borrows `self` mutably: it is the only view.
            None => unsafe { std::slice::from_raw_parts_mut(self.ptr, len) },
        }
    }
    fn len(&self) -> usize {
        self.count * self.map.size()
    }
    fn finish(self) {
        if let Some(v) = self.tmp {
            // SAFETY: `ptr` is writable for `count` elements of `map` (`BufferMut`'s contract,
            // borrow held by `self`); `unpack` writes valid bytes (`bool` data as 0 or 1).
            unsafe { self.map.unpack(&v, self.ptr, self.count) };
        }
    }
    fn finish_with(self, data: &[u8]) {
        match self.tmp {
            // SAFETY: as in `finish`.
            Some(_) => unsafe {
                self.map.unpack(data, self.ptr, self.count);
            },
            // SAFETY: in place (see `bytes`): the `count * size` bytes at `ptr` are writable
            // and take any value; at most that many are copied, from `data`, which is borrowed
            // shared and so is not that memory.
            None => unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr, data.len().min(self.len())) },
        }
    }
}

/// The byte range of each part of a partitioned buffer of contiguous layout `map`, and the
/// span from the buffer's address that covers them all. The counts and displacements are
/// read once, and checked against the number of elements the buffer holds when it says so.
fn parts<P: ?Sized + Partitioned>(p: &P, map: &TypeMap, what: &str) -> Result<(Vec<(usize, usize)>, usize)> {
    let (counts, displs) = (p.counts(), p.displs());
    if let Some(n) = p.element_limit() {
        for (&c, &d) in counts.iter().zip(displs) {
            if c < 0 || d < 0 || c as i64 + d as i64 > n as i64 {
                return Err(Error::Collective(format!(
                    "{what}: part [{d}, {d}+{c}) exceeds the buffer of {n} elements"
                )));
            }
        }
    }
    let ranges = part_ranges(counts, displs, map);
    let total = ranges.iter().map(|(o, l)| o + l).max().unwrap_or(0);
    Ok((ranges, total))
}

/// Runs `fill` on the `total` bytes at `ptr`, the parts of a partitioned receive buffer of
/// contiguous layout `map`: in place, or, for `bool` data, on a copy whose `bool` bytes are
/// then made valid before it is copied back (so no other value ever lands in a `bool`).
///
/// # Safety
/// The `total` bytes at `ptr` must be initialised, readable and writable, and used by
/// nothing else during the call; `map` must be contiguous and describe them.
unsafe fn fill_parts(
    ptr: *mut u8,
    total: usize,
    map: &TypeMap,
    fill: impl FnOnce(&mut [u8]) -> Result<()>,
) -> Result<()> {
    if map.receives_in_place() {
        // SAFETY: the caller's contract; without `bool` data any byte value is valid there.
        return fill(unsafe { std::slice::from_raw_parts_mut(ptr, total) });
    }
    // SAFETY: the caller's contract (initialised and readable).
    let mut staged = unsafe { std::slice::from_raw_parts(ptr, total) }.to_vec();
    fill(&mut staged)?;
    map.fix_bools(&mut staged);
    // SAFETY: the caller's contract (writable); `staged` is a separate allocation, whose
    // `bool` bytes are now 0 or 1 (the others take any value).
    unsafe { std::ptr::copy_nonoverlapping(staged.as_ptr(), ptr, total) };
    Ok(())
}

/// Byte (offset, length) of each part of a partitioned buffer, in packed terms when the
/// layout is contiguous. Non-contiguous partitioned layouts are packed part by part.
fn part_ranges(counts: &[crate::Count], displs: &[crate::Count], map: &TypeMap) -> Vec<(usize, usize)> {
    counts
        .iter()
        .zip(displs)
        .map(|(&c, &d)| (d.max(0) as usize * map.extent().max(0) as usize, c.max(0) as usize * map.size()))
        .collect()
}

fn require_contiguous(map: &TypeMap, what: &str) -> Result<()> {
    if map.is_contiguous() {
        Ok(())
    } else {
        Err(Error::Collective(format!("{what} supports contiguous datatypes only")))
    }
}

fn check_len(what: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(Error::Collective(format!(
            "{what}: the buffer holds {got} bytes, {want} are needed (mismatched counts or datatypes)"
        )));
    }
    Ok(())
}

// ------------------------------------------------------------------------ implementations

pub(super) fn barrier_impl(h: &CommHandle) -> Result<()> {
    match inter::local_of(h) {
        Some(local) => inter::barrier(h, local),
        None => algorithms::barrier(&Coll::new(h, "barrier")),
    }
}

fn all_gather_impl<S: ?Sized + Buffer, R: ?Sized + BufferMut>(h: &CommHandle, s: &S, r: &mut R) -> Result<()> {
    if let Some(local) = inter::local_of(h) {
        return inter::all_gather(h, local, s, r);
    }
    let c = Coll::new(h, "all_gather_into");
    let p = packed(s);
    let block = p.bytes.len();
    let mut t = target(r);
    check_len("all_gather_into", t.len(), block * c.size as usize)?;
    let me = c.rank as usize;
    t.bytes()[me * block..(me + 1) * block].copy_from_slice(&p.bytes);
    algorithms::allgather(&c, t.bytes(), block)?;
    t.finish();
    Ok(())
}

fn all_gather_varcount_impl<S: ?Sized + Buffer, R: ?Sized + PartitionedBufferMut>(
    h: &CommHandle,
    s: &S,
    r: &mut R,
) -> Result<()> {
    let c = Coll::new(h, "all_gather_varcount_into");
    let p = packed(s);
    let dt = r.as_datatype();
    let map = dt.type_map().clone();
    require_contiguous(&map, "all_gather_varcount_into")?;
    let (ranges, total) = parts(r, &map, "all_gather_varcount_into")?;
    let (o, l) = ranges[c.rank as usize];
    check_len("all_gather_varcount_into (own part)", p.bytes.len(), l)?;
    let fill = |buf: &mut [u8]| {
        buf[o..o + l].copy_from_slice(&p.bytes);
        algorithms::allgatherv(&c, buf, &ranges)
    };
    // SAFETY: `PartitionedBufferMut`'s contract (`PointerMut`): the pointer is readable and
    // writable for the initialised elements of the parts, which `total` bytes cover (the
    // layout is contiguous), or for `element_limit` elements, which `parts` checked them
    // against; `r` stays mutably borrowed for the call.
    unsafe { fill_parts(r.pointer_mut() as *mut u8, total, &map, fill) }
}

fn all_to_all_impl<S: ?Sized + Buffer, R: ?Sized + BufferMut>(h: &CommHandle, s: &S, r: &mut R) -> Result<()> {
    if inter::local_of(h).is_some() {
        return inter::all_to_all(h, s, r);
    }
    let c = Coll::new(h, "all_to_all_into");
    let n = c.size as usize;
    let p = packed(s);
    let mut t = target(r);
    check_len("all_to_all_into", t.len(), p.bytes.len())?;
    if p.bytes.len() % n != 0 {
        return Err(Error::Collective(format!(
            "all_to_all_into: {} bytes do not split into {n} blocks",
            p.bytes.len()
        )));
    }
    let block = p.bytes.len() / n;
    if let Some(other) = pair::partner(&c) {
        pair::alltoall(&c, other, &p.bytes, t.bytes())?;
        t.finish();
        return Ok(());
    }
    let send: Vec<&[u8]> = (0..n).map(|i| &p.bytes[i * block..(i + 1) * block]).collect();
    let recv: Vec<&mut [u8]> = t.bytes().chunks_mut(block.max(1)).take(n).collect();
    let recv = if block == 0 { (0..n).map(|_| <&mut [u8]>::default()).collect() } else { recv };
    algorithms::alltoallv(&c, &send, recv)?;
    t.finish();
    Ok(())
}

fn all_to_all_varcount_impl<S: ?Sized + PartitionedBuffer, R: ?Sized + PartitionedBufferMut>(
    h: &CommHandle,
    s: &S,
    r: &mut R,
) -> Result<()> {
    let c = Coll::new(h, "all_to_all_varcount_into");
    let sdt = s.as_datatype();
    let smap = sdt.type_map().clone();
    let rdt = r.as_datatype();
    let rmap = rdt.type_map().clone();
    require_contiguous(&smap, "all_to_all_varcount_into")?;
    require_contiguous(&rmap, "all_to_all_varcount_into")?;
    let (sr, stotal) = parts(s, &smap, "all_to_all_varcount_into")?;
    let (rr, rtotal) = parts(r, &rmap, "all_to_all_varcount_into")?;
    // SAFETY: `PartitionedBuffer`'s contract (`Pointer`): readable for the initialised
    // elements of the parts, which `stotal` bytes cover (contiguous layout), or for
    // `element_limit` elements, which `parts` checked them against; the slice borrows `s`.
    let sbuf = unsafe { std::slice::from_raw_parts(s.pointer() as *const u8, stotal) };
    let send: Vec<&[u8]> = sr.iter().map(|&(o, l)| &sbuf[o..o + l]).collect();
    let fill = |rbuf: &mut [u8]| {
        let recv = algorithms::split_parts_mut(rbuf, &rr)?;
        algorithms::alltoallv(&c, &send, recv)
    };
    // SAFETY: as in `all_gather_varcount_impl`; `r` and `s` are distinct borrows (one of them
    // mutable), so the receive bytes are not the send bytes.
    unsafe { fill_parts(r.pointer_mut() as *mut u8, rtotal, &rmap, fill) }
}

fn all_reduce_impl<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
    h: &CommHandle,
    s: &S,
    r: &mut R,
    op: &dyn Operation,
) -> Result<()> {
    if let Some(local) = inter::local_of(h) {
        return inter::all_reduce(h, local, s, r, op);
    }
    let c = Coll::new(h, "all_reduce_into");
    let p = packed(s);
    let mut t = target(r);
    check_len("all_reduce_into", t.len(), p.bytes.len())?;
    if let Some(other) = pair::partner(&c) {
        pair::allreduce(&c, other, &p.bytes, t.bytes(), &p.map, p.count, op)?;
        t.finish();
        return Ok(());
    }
    let mut acc = crate::pool::Scratch::copy_of(&p.bytes);
    algorithms::allreduce(&c, &mut acc, &p.map, p.count, op)?;
    t.finish_with(&acc);
    Ok(())
}

fn reduce_scatter_block_impl<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
    h: &CommHandle,
    s: &S,
    r: &mut R,
    op: &dyn Operation,
) -> Result<()> {
    if let Some(local) = inter::local_of(h) {
        return inter::reduce_scatter_block(h, local, s, r, op);
    }
    let c = Coll::new(h, "reduce_scatter_block_into");
    let n = c.size as usize;
    let p = packed(s);
    let mut t = target(r);
    check_len("reduce_scatter_block_into", t.len() * n, p.bytes.len())?;
    let block = t.len();
    if let Some(other) = pair::partner(&c) {
        let per_block = p.count / n;
        pair::reduce_scatter_block(&c, other, &p.bytes, t.bytes(), &p.map, per_block, op)?;
        t.finish();
        return Ok(());
    }
    let mut acc = crate::pool::Scratch::copy_of(&p.bytes);
    algorithms::reduce(&c, &mut acc, &p.map, p.count, op, 0)?;
    let parts = (c.rank == 0).then(|| (0..n).map(|i| &acc[i * block..(i + 1) * block]).collect::<Vec<_>>());
    algorithms::scatterv(&c, parts, t.bytes(), 0)?;
    t.finish();
    Ok(())
}

fn scan_impl<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
    h: &CommHandle,
    s: &S,
    r: &mut R,
    op: &dyn Operation,
) -> Result<()> {
    let c = Coll::new(h, "scan_into");
    let p = packed(s);
    let mut t = target(r);
    check_len("scan_into", t.len(), p.bytes.len())?;
    // The result starts as this process's operand, in the receive buffer itself.
    let out = t.bytes();
    out.copy_from_slice(&p.bytes);
    algorithms::scan(&c, out, &p.map, p.count, op)?;
    t.finish();
    Ok(())
}

fn exscan_impl<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
    h: &CommHandle,
    s: &S,
    r: &mut R,
    op: &dyn Operation,
) -> Result<()> {
    let c = Coll::new(h, "exclusive_scan_into");
    let p = packed(s);
    let t = target(r);
    check_len("exclusive_scan_into", t.len(), p.bytes.len())?;
    let mut acc = crate::pool::Scratch::copy_of(&p.bytes);
    if algorithms::exscan(&c, &p.bytes, &mut acc, &p.map, p.count, op)? {
        t.finish_with(&acc);
    }
    Ok(())
}

// ------------------------------------------------------------------------ traits

/// Collective operations of a whole communicator.
pub trait CommunicatorCollectives: Communicator {
    /// Blocks until every process of the communicator has called it.
    fn barrier(&self) {
        barrier_impl(self.handle()).or_fatal()
    }

    /// Gathers every process's `sendbuf` into every process's `recvbuf`, in rank order.
    fn all_gather_into<S: ?Sized, R: ?Sized>(&self, sendbuf: &S, recvbuf: &mut R)
    where
        S: Buffer,
        R: BufferMut,
    {
        all_gather_impl(self.handle(), sendbuf, recvbuf).or_fatal()
    }

    /// Like [`Self::all_gather_into`] with per-rank counts and displacements.
    fn all_gather_varcount_into<S: ?Sized, R: ?Sized>(&self, sendbuf: &S, recvbuf: &mut R)
    where
        S: Buffer,
        R: PartitionedBufferMut,
    {
        all_gather_varcount_impl(self.handle(), sendbuf, recvbuf).or_fatal()
    }

    /// Block i of `sendbuf` goes to rank i; block j of `recvbuf` comes from rank j.
    fn all_to_all_into<S: ?Sized, R: ?Sized>(&self, sendbuf: &S, recvbuf: &mut R)
    where
        S: Buffer,
        R: BufferMut,
    {
        all_to_all_impl(self.handle(), sendbuf, recvbuf).or_fatal()
    }

    /// Like [`Self::all_to_all_into`] with per-rank counts and displacements.
    fn all_to_all_varcount_into<S: ?Sized, R: ?Sized>(&self, sendbuf: &S, recvbuf: &mut R)
    where
        S: PartitionedBuffer,
        R: PartitionedBufferMut,
    {
        all_to_all_varcount_impl(self.handle(), sendbuf, recvbuf).or_fatal()
    }

    /// Reduces every process's `sendbuf` with `op` into every process's `recvbuf`.
    fn all_reduce_into<S: ?Sized, R: ?Sized, O>(&self, sendbuf: &S, recvbuf: &mut R, op: O)
    where
        S: Buffer,
        R: BufferMut,
        O: Operation,
    {
        all_reduce_impl(self.handle(), sendbuf, recvbuf, &op).or_fatal()
    }

    /// Reduces, then scatters equal blocks of the result: rank i gets block i.
    fn reduce_scatter_block_into<S: ?Sized, R: ?Sized, O>(&self, sendbuf: &S, recvbuf: &mut R, op: O)
    where
        S: Buffer,
        R: BufferMut,
        O: Operation,
    {
        reduce_scatter_block_impl(self.handle(), sendbuf, recvbuf, &op).or_fatal()
    }

    /// Inclusive prefix reduction: rank i gets x0 ∘ … ∘ xi.
    fn scan_into<S: ?Sized, R: ?Sized, O>(&self, sendbuf: &S, recvbuf: &mut R, op: O)
    where
        S: Buffer,
        R: BufferMut,
        O: Operation,
    {
        scan_impl(self.handle(), sendbuf, recvbuf, &op).or_fatal()
    }

    /// Exclusive prefix reduction: rank i gets x0 ∘ … ∘ x(i−1); rank 0's buffer is untouched.
    fn exclusive_scan_into<S: ?Sized, R: ?Sized, O>(&self, sendbuf: &S, recvbuf: &mut R, op: O)
    where
        S: Buffer,
        R: BufferMut,
        O: Operation,
    {
        exscan_impl(self.handle(), sendbuf, recvbuf, &op).or_fatal()
    }

    /// Starts a barrier; the request completes once every process started it.
    fn immediate_barrier(&self) -> Request<'static, ()> {
        fallible::TryImmediateCollectives::try_immediate_barrier(self).or_fatal()
    }

    /// Immediate [`Self::all_gather_into`].
    fn immediate_all_gather_into<'a, S: ?Sized, R: ?Sized, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer,
        R: 'a + BufferMut,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateCollectives::try_immediate_all_gather_into(self, scope, sendbuf, recvbuf).or_fatal()
    }

    /// Immediate [`Self::all_gather_varcount_into`].
    fn immediate_all_gather_varcount_into<'a, S: ?Sized, R: ?Sized, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer,
        R: 'a + PartitionedBufferMut,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateCollectives::try_immediate_all_gather_varcount_into(self, scope, sendbuf, recvbuf)
            .or_fatal()
    }

    /// Immediate [`Self::all_to_all_into`].
    fn immediate_all_to_all_into<'a, S: ?Sized, R: ?Sized, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer,
        R: 'a + BufferMut,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateCollectives::try_immediate_all_to_all_into(self, scope, sendbuf, recvbuf).or_fatal()
    }

    /// Immediate [`Self::all_to_all_varcount_into`].
    fn immediate_all_to_all_varcount_into<'a, S: ?Sized, R: ?Sized, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + PartitionedBuffer,
        R: 'a + PartitionedBufferMut,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateCollectives::try_immediate_all_to_all_varcount_into(self, scope, sendbuf, recvbuf)
            .or_fatal()
    }

    /// Immediate [`Self::all_reduce_into`].
    fn immediate_all_reduce_into<'a, S: ?Sized, R: ?Sized, O, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer,
        R: 'a + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateCollectives::try_immediate_all_reduce_into(self, scope, sendbuf, recvbuf, op).or_fatal()
    }

    /// Immediate [`Self::reduce_scatter_block_into`].
    fn immediate_reduce_scatter_block_into<'a, S: ?Sized, R: ?Sized, O, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer,
        R: 'a + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateCollectives::try_immediate_reduce_scatter_block_into(self, scope, sendbuf, recvbuf, op)
            .or_fatal()
    }

    /// Immediate [`Self::scan_into`].
    fn immediate_scan_into<'a, S: ?Sized, R: ?Sized, O, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer,
        R: 'a + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateCollectives::try_immediate_scan_into(self, scope, sendbuf, recvbuf, op).or_fatal()
    }

    /// Immediate [`Self::exclusive_scan_into`] (rank 0's buffer is left untouched).
    fn immediate_exclusive_scan_into<'a, S: ?Sized, R: ?Sized, O, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer,
        R: 'a + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateCollectives::try_immediate_exclusive_scan_into(self, scope, sendbuf, recvbuf, op)
            .or_fatal()
    }
}

impl<C: Communicator + ?Sized> CommunicatorCollectives for C {}

fn root_gather_impl<S: ?Sized + Buffer>(h: &CommHandle, root: Rank, s: &S) -> Result<()> {
    let c = Coll::new(h, "gather_into");
    let p = packed(s);
    algorithms::gatherv(&c, &p.bytes, None, root)
}

fn root_gather_root_impl<S: ?Sized + Buffer, R: ?Sized + BufferMut>(h: &CommHandle, s: &S, r: &mut R) -> Result<()> {
    let c = Coll::new(h, "gather_into_root");
    let n = c.size as usize;
    let p = packed(s);
    let block = p.bytes.len();
    let mut t = target(r);
    check_len("gather_into_root", t.len(), block * n)?;
    if let Some(other) = pair::partner(&c) {
        pair::gather_root(&c, other, &p.bytes, t.bytes())?;
        t.finish();
        return Ok(());
    }
    {
        let bytes = t.bytes();
        let parts: Vec<&mut [u8]> = if block == 0 {
            (0..n).map(|_| <&mut [u8]>::default()).collect()
        } else {
            bytes.chunks_mut(block).collect()
        };
        algorithms::gatherv(&c, &p.bytes, Some(parts), c.rank)?;
    }
    t.finish();
    Ok(())
}

fn root_gatherv_root_impl<S: ?Sized + Buffer, R: ?Sized + PartitionedBufferMut>(
    h: &CommHandle,
    s: &S,
    r: &mut R,
) -> Result<()> {
    let c = Coll::new(h, "gather_varcount_into_root");
    let p = packed(s);
    let dt = r.as_datatype();
    let map = dt.type_map().clone();
    require_contiguous(&map, "gather_varcount_into_root")?;
    let (ranges, total) = parts(r, &map, "gather_varcount_into_root")?;
    let fill = |buf: &mut [u8]| {
        let parts = algorithms::split_parts_mut(buf, &ranges)?;
        algorithms::gatherv(&c, &p.bytes, Some(parts), c.rank)
    };
    // SAFETY: as in `all_gather_varcount_impl`.
    unsafe { fill_parts(r.pointer_mut() as *mut u8, total, &map, fill) }
}

fn root_scatter_impl<R: ?Sized + BufferMut>(h: &CommHandle, root: Rank, r: &mut R) -> Result<()> {
    let c = Coll::new(h, "scatter_into");
    let mut t = target(r);
    algorithms::scatterv(&c, None, t.bytes(), root)?;
    t.finish();
    Ok(())
}

fn root_scatter_root_impl<S: ?Sized + Buffer, R: ?Sized + BufferMut>(h: &CommHandle, s: &S, r: &mut R) -> Result<()> {
    let c = Coll::new(h, "scatter_into_root");
    let n = c.size as usize;
    let p = packed(s);
    let mut t = target(r);
    let block = t.len();
    check_len("scatter_into_root", p.bytes.len(), block * n)?;
    if let Some(other) = pair::partner(&c) {
        pair::scatter_root(&c, other, &p.bytes, t.bytes())?;
        t.finish();
        return Ok(());
    }
    let parts: Vec<&[u8]> = (0..n).map(|i| &p.bytes[i * block..(i + 1) * block]).collect();
    algorithms::scatterv(&c, Some(parts), t.bytes(), c.rank)?;
    t.finish();
    Ok(())
}

fn root_scatterv_root_impl<S: ?Sized + PartitionedBuffer, R: ?Sized + BufferMut>(
    h: &CommHandle,
    s: &S,
    r: &mut R,
) -> Result<()> {
    let c = Coll::new(h, "scatter_varcount_into_root");
    let dt = s.as_datatype();
    let map = dt.type_map().clone();
    require_contiguous(&map, "scatter_varcount_into_root")?;
    let (ranges, total) = parts(s, &map, "scatter_varcount_into_root")?;
    // SAFETY: as for the send buffer of `all_to_all_varcount_impl`.
    let buf = unsafe { std::slice::from_raw_parts(s.pointer() as *const u8, total) };
    let parts: Vec<&[u8]> = ranges.iter().map(|&(o, l)| &buf[o..o + l]).collect();
    let mut t = target(r);
    algorithms::scatterv(&c, Some(parts), t.bytes(), c.rank)?;
    t.finish();
    Ok(())
}

fn root_bcast_impl<B: ?Sized + BufferMut>(h: &CommHandle, root: Rank, b: &mut B) -> Result<()> {
    let c = Coll::new(h, "broadcast_into");
    let mut t = target(b);
    if c.rank == root {
        if let Some(tmp) = &mut t.tmp {
            tmp.clear();
            // SAFETY: `BufferMut`'s contract: `t.ptr` is readable for `count` initialised
            // elements (the root's data), borrowed by `t`.
            unsafe { t.map.pack(t.ptr, t.count, tmp) };
        }
    }
    algorithms::bcast(&c, t.bytes(), root)?;
    if c.rank != root {
        t.finish();
    }
    Ok(())
}

fn root_reduce_impl<S: ?Sized + Buffer>(h: &CommHandle, root: Rank, s: &S, op: &dyn Operation) -> Result<()> {
    let c = Coll::new(h, "reduce_into");
    let p = packed(s);
    if pair::partner(&c).is_some() && root != c.rank && (0..2).contains(&root) {
        return pair::reduce_leaf(&c, root, &p.bytes);
    }
    let mut acc = crate::pool::Scratch::copy_of(&p.bytes);
    algorithms::reduce(&c, &mut acc, &p.map, p.count, op, root)
}

fn root_reduce_root_impl<S: ?Sized + Buffer, R: ?Sized + BufferMut>(
    h: &CommHandle,
    s: &S,
    r: &mut R,
    op: &dyn Operation,
) -> Result<()> {
    let c = Coll::new(h, "reduce_into_root");
    let p = packed(s);
    let mut t = target(r);
    check_len("reduce_into_root", t.len(), p.bytes.len())?;
    if let Some(other) = pair::partner(&c) {
        pair::reduce_root(&c, other, &p.bytes, t.bytes(), &p.map, p.count, op)?;
        t.finish();
        return Ok(());
    }
    let mut acc = crate::pool::Scratch::copy_of(&p.bytes);
    algorithms::reduce(&c, &mut acc, &p.map, p.count, op, c.rank)?;
    t.finish_with(&acc);
    Ok(())
}

/// Collective operations with a root process (called on the root's [`Process`]).
pub trait Root: AsCommunicator {
    /// The rank of the root.
    fn root_rank(&self) -> Rank;

    #[doc(hidden)]
    fn root_handle(&self) -> &CommHandle {
        self.as_communicator().handle()
    }

    /// Starts `maxprocs` processes of `command` (collective over the communicator; the
    /// root's arguments count): the root's launcher starts them as a job of their own, and
    /// the result is an intercommunicator whose remote group is the children's world.
    /// `Err(MpiError::Spawn(failed, asked))` when they could not be started (the root says
    /// why on standard error).
    fn spawn(
        &self,
        command: &std::process::Command,
        maxprocs: Rank,
    ) -> std::result::Result<crate::topology::InterCommunicator, crate::topology::MpiError> {
        crate::topology::inter::spawn(self.root_handle(), self.root_rank(), std::slice::from_ref(command), &[maxprocs])
    }

    /// Starts `maxprocs[i]` processes of each `commands[i]` in one world (their
    /// `Universe::appnum` is `i`); see [`spawn`](Self::spawn).
    fn spawn_multiple(
        &self,
        commands: &[std::process::Command],
        maxprocs: &[Rank],
    ) -> std::result::Result<crate::topology::InterCommunicator, crate::topology::MpiError> {
        crate::topology::inter::spawn(self.root_handle(), self.root_rank(), commands, maxprocs)
    }

    /// Broadcasts the root's `buffer` into every process's `buffer`.
    fn broadcast_into<Buf: ?Sized>(&self, buffer: &mut Buf)
    where
        Buf: BufferMut,
    {
        root_bcast_impl(self.root_handle(), self.root_rank(), buffer).or_fatal()
    }
    /// Sends `sendbuf` to the root's gather (on non-root processes).
    fn gather_into<S: ?Sized>(&self, sendbuf: &S)
    where
        S: Buffer,
    {
        assert_ne!(
            self.as_communicator().rank(),
            self.root_rank(),
            "gather_into must not be called on the root (use gather_into_root)"
        );
        root_gather_impl(self.root_handle(), self.root_rank(), sendbuf).or_fatal()
    }
    /// Gathers every process's `sendbuf` into `recvbuf`, in rank order (on the root).
    fn gather_into_root<S: ?Sized, R: ?Sized>(&self, sendbuf: &S, recvbuf: &mut R)
    where
        S: Buffer,
        R: BufferMut,
    {
        assert_eq!(self.as_communicator().rank(), self.root_rank(), "gather_into_root must be called on the root");
        root_gather_root_impl(self.root_handle(), sendbuf, recvbuf).or_fatal()
    }
    /// Sends `sendbuf` to the root's variable-count gather.
    fn gather_varcount_into<S: ?Sized>(&self, sendbuf: &S)
    where
        S: Buffer,
    {
        root_gather_impl(self.root_handle(), self.root_rank(), sendbuf).or_fatal()
    }
    /// Gathers parts of varying counts into `recvbuf` at the given displacements (on the root).
    fn gather_varcount_into_root<S: ?Sized, R: ?Sized>(&self, sendbuf: &S, recvbuf: &mut R)
    where
        S: Buffer,
        R: PartitionedBufferMut,
    {
        root_gatherv_root_impl(self.root_handle(), sendbuf, recvbuf).or_fatal()
    }
    /// Receives this process's block of the root's scatter.
    fn scatter_into<R: ?Sized>(&self, recvbuf: &mut R)
    where
        R: BufferMut,
    {
        root_scatter_impl(self.root_handle(), self.root_rank(), recvbuf).or_fatal()
    }
    /// Scatters equal blocks of `sendbuf` to every process (on the root).
    fn scatter_into_root<S: ?Sized, R: ?Sized>(&self, sendbuf: &S, recvbuf: &mut R)
    where
        S: Buffer,
        R: BufferMut,
    {
        root_scatter_root_impl(self.root_handle(), sendbuf, recvbuf).or_fatal()
    }
    /// Receives this process's part of the root's variable-count scatter.
    fn scatter_varcount_into<R: ?Sized>(&self, recvbuf: &mut R)
    where
        R: BufferMut,
    {
        root_scatter_impl(self.root_handle(), self.root_rank(), recvbuf).or_fatal()
    }
    /// Scatters parts of varying counts (on the root).
    fn scatter_varcount_into_root<S: ?Sized, R: ?Sized>(&self, sendbuf: &S, recvbuf: &mut R)
    where
        S: PartitionedBuffer,
        R: BufferMut,
    {
        root_scatterv_root_impl(self.root_handle(), sendbuf, recvbuf).or_fatal()
    }
    /// Contributes `sendbuf` to a reduction at the root (on non-root processes).
    fn reduce_into<S: ?Sized, O>(&self, sendbuf: &S, op: O)
    where
        S: Buffer,
        O: Operation,
    {
        root_reduce_impl(self.root_handle(), self.root_rank(), sendbuf, &op).or_fatal()
    }
    /// Reduces every process's `sendbuf` with `op` into `recvbuf` (on the root).
    fn reduce_into_root<S: ?Sized, R: ?Sized, O>(&self, sendbuf: &S, recvbuf: &mut R, op: O)
    where
        S: Buffer,
        R: BufferMut,
        O: Operation,
    {
        root_reduce_root_impl(self.root_handle(), sendbuf, recvbuf, &op).or_fatal()
    }

    /// Immediate [`Self::broadcast_into`].
    fn immediate_broadcast_into<'a, Buf: ?Sized, Sc>(&self, scope: Sc, buf: &'a mut Buf) -> Request<'a, Buf, Sc>
    where
        Buf: 'a + BufferMut,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateRoot::try_immediate_broadcast_into(self, scope, buf).or_fatal()
    }

    /// Immediate [`Self::gather_into`] (on non-root processes).
    fn immediate_gather_into<'a, S: ?Sized, Sc>(&self, scope: Sc, sendbuf: &'a S) -> Request<'a, S, Sc>
    where
        S: 'a + Buffer,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateRoot::try_immediate_gather_into(self, scope, sendbuf).or_fatal()
    }

    /// Immediate [`Self::gather_into_root`].
    fn immediate_gather_into_root<'a, S: ?Sized, R: ?Sized, Sc>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer,
        R: 'a + BufferMut,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateRoot::try_immediate_gather_into_root(self, scope, sendbuf, recvbuf).or_fatal()
    }

    /// Immediate [`Self::gather_varcount_into`].
    fn immediate_gather_varcount_into<'a, Sc, S: ?Sized>(&self, scope: Sc, sendbuf: &'a S) -> Request<'a, S, Sc>
    where
        S: 'a + Buffer,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateRoot::try_immediate_gather_varcount_into(self, scope, sendbuf).or_fatal()
    }

    /// Immediate [`Self::gather_varcount_into_root`].
    fn immediate_gather_varcount_into_root<'a, Sc, S: ?Sized, R: ?Sized>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer,
        R: 'a + PartitionedBufferMut,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateRoot::try_immediate_gather_varcount_into_root(self, scope, sendbuf, recvbuf).or_fatal()
    }

    /// Immediate [`Self::scatter_into`] (on non-root processes).
    fn immediate_scatter_into<'a, Sc, R: ?Sized>(&self, scope: Sc, recvbuf: &'a mut R) -> Request<'a, R, Sc>
    where
        R: 'a + BufferMut,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateRoot::try_immediate_scatter_into(self, scope, recvbuf).or_fatal()
    }

    /// Immediate [`Self::scatter_into_root`].
    fn immediate_scatter_into_root<'a, Sc, S: ?Sized, R: ?Sized>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer,
        R: 'a + BufferMut,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateRoot::try_immediate_scatter_into_root(self, scope, sendbuf, recvbuf).or_fatal()
    }

    /// Immediate [`Self::scatter_varcount_into`] (on non-root processes).
    fn immediate_scatter_varcount_into<'a, Sc, R: ?Sized>(&self, scope: Sc, recvbuf: &'a mut R) -> Request<'a, R, Sc>
    where
        R: 'a + BufferMut,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateRoot::try_immediate_scatter_varcount_into(self, scope, recvbuf).or_fatal()
    }

    /// Immediate [`Self::scatter_varcount_into_root`].
    fn immediate_scatter_varcount_into_root<'a, Sc, S: ?Sized, R: ?Sized>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + PartitionedBuffer,
        R: 'a + BufferMut,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateRoot::try_immediate_scatter_varcount_into_root(self, scope, sendbuf, recvbuf).or_fatal()
    }

    /// Immediate [`Self::reduce_into`] (on non-root processes).
    fn immediate_reduce_into<'a, Sc, S: ?Sized, O>(&self, scope: Sc, sendbuf: &'a S, op: O) -> Request<'a, S, Sc>
    where
        S: 'a + Buffer,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateRoot::try_immediate_reduce_into(self, scope, sendbuf, op).or_fatal()
    }

    /// Immediate [`Self::reduce_into_root`].
    fn immediate_reduce_into_root<'a, Sc, S: ?Sized, R: ?Sized, O>(
        &self,
        scope: Sc,
        sendbuf: &'a S,
        recvbuf: &'a mut R,
        op: O,
    ) -> Request<'a, R, Sc>
    where
        S: 'a + Buffer,
        R: 'a + BufferMut,
        O: 'a + Operation,
        Sc: Scope<'a>,
    {
        fallible::TryImmediateRoot::try_immediate_reduce_into_root(self, scope, sendbuf, recvbuf, op).or_fatal()
    }
}

impl Root for Process<'_> {
    fn root_rank(&self) -> Rank {
        self.rank()
    }
}

/// Installs in `topology` the collectives that creating a communicator runs (see
/// `topology::CreationCollectives`): this module's algorithms, over the parent's collective
/// context. Called once at initialization.
pub(crate) fn install_creation_collectives() {
    use algorithms::Coll;
    crate::topology::install_creation_collectives(crate::topology::CreationCollectives {
        allgather: |h, what, all, block| algorithms::allgather(&Coll::new(h, what), all, block),
        bcast: |h, what, buf, root| algorithms::bcast(&Coll::new(h, what), buf, root),
        send: |h, what, dst, tag, data| Coll::new(h, what).send(dst, tag, data),
        recv: |h, what, src, tag, buf| Coll::new(h, what).recv(src, tag, buf),
        inter_exchange: |h, what, out, inp, tag| Coll::new_inter(h, what).sendrecv(0, out, 0, inp, tag),
    });
}

/// Re-exports for `use mpi::collective::traits::*`.
pub mod traits {
    pub use super::{CommunicatorCollectives, Operation, Root};
}

// ------------------------------------------------------------------------ immediate collectives

use crate::request::{Pending, Request, Scope};
use immediate::{exchange_plan, KeptOp, Output, SendPtr};

fn output<B: ?Sized + BufferMut>(b: &mut B) -> Output {
    let dt = b.as_datatype();
    let map = dt.type_map().clone();
    Output { ptr: SendPtr(b.pointer_mut() as *mut u8), map, count: b.count().max(0) as usize }
}

fn out_len(o: &Output) -> usize {
    o.count * o.map.size()
}

/// Splits `bytes` into `n` equal blocks.
fn blocks(what: &str, bytes: &[u8], n: usize) -> Result<Vec<Vec<u8>>> {
    if bytes.len() % n != 0 {
        return Err(Error::Collective(format!("{what}: {} bytes do not split into {n} equal blocks", bytes.len())));
    }
    let b = bytes.len() / n;
    Ok((0..n).map(|i| bytes[i * b..(i + 1) * b].to_vec()).collect())
}

/// A contiguous partitioned receive buffer: where each rank's part goes.
fn parts_output<B: ?Sized + PartitionedBufferMut>(b: &mut B, what: &str) -> Result<(Output, Vec<(usize, usize)>)> {
    let dt = b.as_datatype();
    let map = dt.type_map().clone();
    require_contiguous(&map, what)?;
    let (ranges, _) = parts(b, &map, what)?;
    Ok((Output { ptr: SendPtr(b.pointer_mut() as *mut u8), map, count: 0 }, ranges))
}

/// The parts of a contiguous partitioned send buffer, copied.
fn send_parts<B: ?Sized + PartitionedBuffer>(b: &B, what: &str) -> Result<Vec<Vec<u8>>> {
    let dt = b.as_datatype();
    let map = dt.type_map().clone();
    require_contiguous(&map, what)?;
    let (ranges, total) = parts(b, &map, what)?;
    // SAFETY: `PartitionedBuffer`'s contract (`Pointer`): readable for the initialised elements
    // of the parts, which `total` bytes cover (contiguous layout), or for `element_limit`
    // elements, which `parts` checked them against; the slice borrows `b`.
    let buf = unsafe { std::slice::from_raw_parts(b.pointer() as *const u8, total) };
    Ok(ranges.iter().map(|&(o, l)| buf[o..o + l].to_vec()).collect())
}

fn write_parts(out: &Output, ranges: &[(usize, usize)], parts: &[Option<&[u8]>]) {
    for (&(o, _), part) in ranges.iter().zip(parts) {
        if let Some(d) = part {
            // SAFETY: the request's partitioned receive buffer, still borrowed (the request
            // completes after this step); each part `(o, l)` was checked against the buffer
            // when the collective started, and `d` is exactly `l` bytes (checked on receipt).
            unsafe { out.write_at(o, d) };
        }
    }
}

fn concat(parts: &[Option<&[u8]>]) -> Vec<u8> {
    parts.iter().flat_map(|p| p.unwrap_or_default().iter().copied()).collect()
}

fn i_all_gather(h: &CommHandle, mine: Vec<u8>, out: Output) -> Result<Pending> {
    let n = h.size() as usize;
    check_len("immediate_all_gather_into", out_len(&out), mine.len() * n)?;
    let len = mine.len();
    let plan = exchange_plan(h.rank(), h.size(), vec![Some(mine); n], vec![Some(len); n], move |parts| {
        // SAFETY: the request's receive buffer, still borrowed and writable (see `Output`).
        unsafe { out.write(&concat(&parts)) };
        Ok(())
    });
    immediate::start(h, "immediate_all_gather_into", plan)
}

fn i_all_gather_varcount(h: &CommHandle, mine: Vec<u8>, out: Output, ranges: Vec<(usize, usize)>) -> Result<Pending> {
    let n = h.size() as usize;
    let me = h.rank() as usize;
    check_len("immediate_all_gather_varcount_into (own part)", mine.len(), ranges[me].1)?;
    let incoming = ranges.iter().map(|&(_, l)| Some(l)).collect();
    let plan = exchange_plan(h.rank(), h.size(), vec![Some(mine); n], incoming, move |parts| {
        write_parts(&out, &ranges, &parts);
        Ok(())
    });
    immediate::start(h, "immediate_all_gather_varcount_into", plan)
}

fn i_all_to_all(h: &CommHandle, outgoing: Vec<Vec<u8>>, out: Output, what: &'static str) -> Result<Pending> {
    let total: usize = outgoing.iter().map(Vec::len).sum();
    check_len(what, out_len(&out), total)?;
    let n = h.size() as usize;
    let block = total / n;
    let plan = exchange_plan(
        h.rank(),
        h.size(),
        outgoing.into_iter().map(Some).collect(),
        vec![Some(block); n],
        move |parts| {
            // SAFETY: as in `i_all_gather`.
            unsafe { out.write(&concat(&parts)) };
            Ok(())
        },
    );
    immediate::start(h, what, plan)
}

fn i_all_to_all_varcount(
    h: &CommHandle,
    outgoing: Vec<Vec<u8>>,
    out: Output,
    ranges: Vec<(usize, usize)>,
) -> Result<Pending> {
    let what = "immediate_all_to_all_varcount_into";
    let me = h.rank() as usize;
    check_len(what, outgoing[me].len(), ranges[me].1)?;
    let incoming = ranges.iter().map(|&(_, l)| Some(l)).collect();
    let plan = exchange_plan(h.rank(), h.size(), outgoing.into_iter().map(Some).collect(), incoming, move |parts| {
        write_parts(&out, &ranges, &parts);
        Ok(())
    });
    immediate::start(h, what, plan)
}

/// Reductions combined in rank order from the operands of `from..to` (own bytes `mine` at
/// this rank's place), written to `out` if any: all-reduce, reduce at a root, scans.
#[allow(clippy::too_many_arguments)]
fn i_reduction(
    h: &CommHandle,
    what: &'static str,
    mine: Vec<u8>,
    map: TypeMap,
    count: usize,
    op: KeptOp,
    senders_to: impl Fn(Rank) -> bool,
    receives_from: impl Fn(Rank) -> bool,
    out: Option<Output>,
) -> Result<Pending> {
    let n = h.size();
    let me = h.rank();
    if let Some(o) = &out {
        check_len(what, out_len(o), mine.len())?;
    }
    let len = mine.len();
    let outgoing = (0..n).map(|r| (r == me || senders_to(r)).then(|| mine.clone())).collect();
    let incoming = (0..n).map(|r| (r != me && receives_from(r)).then_some(len)).collect();
    let own_counts = receives_from(me);
    let plan = exchange_plan(me, n, outgoing, incoming, move |parts| {
        let Some(out) = out else { return Ok(()) };
        let operands: Vec<&[u8]> =
            parts.iter().enumerate().filter(|(r, _)| *r as Rank != me || own_counts).filter_map(|(_, p)| *p).collect();
        if operands.is_empty() {
            return Ok(());
        }
        let r = immediate::fold(op.get(), &map, count, &operands);
        // SAFETY: as in `i_all_gather`.
        unsafe { out.write(&r) };
        Ok(())
    });
    immediate::start(h, what, plan)
}

fn i_reduce_scatter_block(h: &CommHandle, p: Packed<'_>, out: Output, op: KeptOp) -> Result<Pending> {
    let what = "immediate_reduce_scatter_block_into";
    let n = h.size() as usize;
    check_len(what, out_len(&out) * n, p.bytes.len())?;
    let outgoing = blocks(what, &p.bytes, n)?;
    let block = p.bytes.len() / n;
    let (map, count) = (p.map.clone(), p.count / n);
    let plan = exchange_plan(
        h.rank(),
        h.size(),
        outgoing.into_iter().map(Some).collect(),
        vec![Some(block); n],
        move |parts| {
            let operands: Vec<&[u8]> = parts.iter().map(|p| p.unwrap_or_default()).collect();
            let r = immediate::fold(op.get(), &map, count, &operands);
            // SAFETY: as in `i_all_gather`.
            unsafe { out.write(&r) };
            Ok(())
        },
    );
    immediate::start(h, what, plan)
}

fn i_send_to_root<S: ?Sized + Buffer>(h: &CommHandle, root: Rank, s: &S, what: &'static str) -> Result<Pending> {
    let n = h.size() as usize;
    let mut outgoing = vec![None; n];
    outgoing[root as usize] = Some(packed(s).bytes.into_owned());
    immediate::start(h, what, exchange_plan(h.rank(), h.size(), outgoing, vec![None; n], |_| Ok(())))
}

fn i_recv_from_root(h: &CommHandle, root: Rank, out: Output, what: &'static str) -> Result<Pending> {
    let n = h.size() as usize;
    let mut incoming = vec![None; n];
    incoming[root as usize] = Some(out_len(&out));
    let plan = exchange_plan(h.rank(), h.size(), vec![None; n], incoming, move |parts| {
        // SAFETY: the request's receive buffer, still borrowed and writable.
        unsafe { out.write(parts[root as usize].unwrap_or_default()) };
        Ok(())
    });
    immediate::start(h, what, plan)
}

fn i_scatter_root(h: &CommHandle, outgoing: Vec<Vec<u8>>, out: Output, what: &'static str) -> Result<Pending> {
    let me = h.rank() as usize;
    check_len(what, outgoing[me].len(), out_len(&out))?;
    let plan = exchange_plan(
        h.rank(),
        h.size(),
        outgoing.into_iter().map(Some).collect(),
        vec![None; h.size() as usize],
        move |parts| {
            // SAFETY: the request's receive buffer, still borrowed and writable.
            unsafe { out.write(parts[me].unwrap_or_default()) };
            Ok(())
        },
    );
    immediate::start(h, what, plan)
}
