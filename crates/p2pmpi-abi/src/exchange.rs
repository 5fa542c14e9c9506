//! A collective exchange of typed blocks between chosen pairs of processes: what the
//! neighbourhood collectives ([`crate::neighbor`]), `MPI_Ialltoallw` ([`crate::alltoallw`]) and
//! the collectives over intercommunicators ([`crate::intercoll`]) are made of.
//!
//! Each process lists the blocks it sends (to a rank of the carrier, an intracommunicator: an
//! address, a count and a datatype each) and the blocks it receives. The blocks to one peer are
//! packed back to back in their order; one all-to-all of bytes with a count per process (the
//! Rust API's, blocking or immediate) carries them; the bytes from each peer are unpacked into
//! the blocks received from it, in their order (so the k-th block a process sends to a peer
//! lands in the k-th block that peer receives from it, as in MPICH). Every process of the
//! carrier takes part, with no block at all if need be. A nonblocking exchange unpacks when its
//! request completes: the [`Finish`] kept by the request does it when it is dropped, which the
//! completion does ([`crate::handles::Keep`]).

use crate::consts::*;
use crate::datatypes::datatype_ref;
use crate::handles::rust_comm;
use crate::kept::{started, Kept};
use p2pmpi::collective::{TryCollectives, TryImmediateCollectives};
use p2pmpi::datatype::{Partition, PartitionMut};
use p2pmpi::request::StaticScope;
use p2pmpi::traits::*;
use std::os::raw::c_int;

/// One block: `count` elements of datatype `dt` at address `addr`, to or from carrier rank
/// `peer`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Block {
    pub peer: usize,
    pub addr: usize,
    pub count: usize,
    pub dt: c_int,
}

impl Block {
    /// The block of `count` elements of `dt` at byte `displ` of `base`, with `peer`.
    pub fn at(peer: usize, base: *const std::os::raw::c_void, displ: isize, count: usize, dt: c_int) -> Block {
        Block { peer, addr: (base as usize).wrapping_add_signed(displ), count, dt }
    }
}

/// Work run once the received blocks are unpacked (the reduction of an intercommunicator's
/// `MPI_Reduce`).
pub(crate) type After = Box<dyn FnOnce() + Send>;

/// What is left once the bytes arrived: unpacking them into the received blocks.
pub(crate) struct Finish {
    inp: Vec<u8>,
    /// Each received block with the offset of its bytes in `inp`.
    recvs: Vec<(usize, Block)>,
    after: Option<After>,
    done: bool,
}

// SAFETY: the addresses are the program's buffers, written once by whichever thread completes
// the request, as MPI lets it.
unsafe impl Send for Finish {}

impl Finish {
    /// Unpacks every received block, then runs the work after.
    fn run(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        for &(at, b) in &self.recvs {
            if b.count == 0 {
                continue;
            }
            let Ok(d) = datatype_ref(b.dt) else { continue };
            let map = d.type_map();
            let end = (at + b.count * map.size()).min(self.inp.len());
            // SAFETY: the program vouched for `count` writable elements at the address, kept
            // valid until the operation completes (MPI's rule).
            unsafe { map.unpack(&self.inp[at..end], b.addr as *mut u8, b.count) };
        }
        if let Some(f) = self.after.take() {
            f();
        }
    }
}

/// A [`Finish`] that runs when the request keeping it is done with it.
struct OnCompletion(Finish);

impl Drop for OnCompletion {
    fn drop(&mut self) {
        self.0.run();
    }
}

/// The packed bytes to send and the counts of the all-to-all of bytes.
struct Prepared {
    out: Vec<u8>,
    scounts: Vec<c_int>,
    sdispls: Vec<c_int>,
    rcounts: Vec<c_int>,
    rdispls: Vec<c_int>,
    finish: Finish,
}

fn int(n: usize) -> Result<c_int, c_int> {
    c_int::try_from(n).map_err(|_| MPI_ERR_COUNT)
}

/// Packs `sends` (read now: the buffers may change once this returns) for a carrier of `n`
/// processes and lays out the bytes `recvs` expect.
///
/// # Safety
/// Every block's address must hold its elements (readable for a send, writable for a receive
/// until the exchange completes).
unsafe fn prepare(n: usize, sends: &[Block], recvs: Vec<Block>, after: Option<After>) -> Result<Prepared, c_int> {
    if sends.iter().chain(&recvs).any(|b| b.peer >= n) {
        return Err(MPI_ERR_RANK);
    }
    let mut out = Vec::new();
    let (mut scounts, mut sdispls) = (vec![0; n], vec![0; n]);
    for p in 0..n {
        let from = out.len();
        for b in sends.iter().filter(|b| b.peer == p && b.count > 0) {
            // SAFETY: the caller vouches for the elements at the address.
            unsafe { datatype_ref(b.dt)?.type_map().pack(b.addr as *const u8, b.count, &mut out) };
        }
        sdispls[p] = int(from)?;
        scounts[p] = int(out.len() - from)?;
    }
    let mut sizes = Vec::with_capacity(recvs.len());
    for b in &recvs {
        sizes.push(b.count.checked_mul(datatype_ref(b.dt)?.type_map().size()).ok_or(MPI_ERR_COUNT)?);
    }
    let (mut rcounts, mut rdispls, mut total) = (vec![0; n], vec![0; n], 0usize);
    let mut placed: Vec<(usize, Block)> = Vec::with_capacity(recvs.len());
    for p in 0..n {
        rdispls[p] = int(total)?;
        for (b, &size) in recvs.iter().zip(&sizes).filter(|(b, _)| b.peer == p) {
            placed.push((total, *b));
            total += size;
        }
        rcounts[p] = int(total)? - rdispls[p];
    }
    let finish = Finish { inp: vec![0u8; total], recvs: placed, after, done: false };
    Ok(Prepared { out, scounts, sdispls, rcounts, rdispls, finish })
}

/// Runs the exchange on carrier `c` (an MPICH handle of an intracommunicator) and returns once
/// every block arrived.
///
/// # Safety
/// As [`prepare`] says.
pub(crate) unsafe fn run(c: c_int, sends: &[Block], recvs: Vec<Block>, after: Option<After>) -> Result<(), c_int> {
    let rc = rust_comm(c)?;
    // SAFETY: the caller's contract.
    let mut p = unsafe { prepare(rc.size() as usize, sends, recvs, after)? };
    rc.try_all_to_all_varcount_into(
        &Partition::new(&p.out[..], &p.scounts[..], &p.sdispls[..]),
        &mut PartitionMut::new(&mut p.finish.inp[..], &p.rcounts[..], &p.rdispls[..]),
    )
    .map_err(crate::errors::class_of_failure)?;
    p.finish.run();
    Ok(())
}

/// Starts the exchange on carrier `c` and writes its request at `request`; the blocks
/// received are unpacked when the request completes.
///
/// # Safety
/// As [`prepare`] says; `request` valid for a write.
pub(crate) unsafe fn start(
    c: c_int,
    sends: &[Block],
    recvs: Vec<Block>,
    after: Option<After>,
    request: *mut c_int,
) -> Result<(), c_int> {
    if request.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let rc = rust_comm(c)?;
    // SAFETY: the caller's contract.
    let p = unsafe { prepare(rc.size() as usize, sends, recvs, after)? };
    let Prepared { out, scounts, sdispls, rcounts, rdispls, mut finish } = p;
    let mut kept = Kept::default();
    let (inp, len) = (finish.inp.as_mut_ptr(), finish.inp.len());
    let out: &'static Vec<u8> = kept.hold(out);
    let sparts = kept.hold(Partition::new(&out[..], scounts, sdispls));
    // SAFETY: `inp` is the heap buffer of `finish.inp`, which does not move or change size
    // while the request lives: the finish is kept by the request (below) and only reads it
    // once the request completed.
    let inp: &'static mut [u8] = unsafe { std::slice::from_raw_parts_mut(inp, len) };
    let rparts = kept.hold(PartitionMut::new(inp, rcounts, rdispls));
    let r = rc.try_immediate_all_to_all_varcount_into(StaticScope, sparts, rparts);
    let r = r.map_err(crate::errors::class_of_failure)?;
    kept.hold(OnCompletion(finish));
    // SAFETY: checked non-null; the caller vouches it is writable.
    unsafe { started(r, kept, request) }
}

/// Runs the exchange now (`request` null) or starts it.
///
/// # Safety
/// As [`run`] and [`start`] say.
pub(crate) unsafe fn go(
    c: c_int,
    sends: &[Block],
    recvs: Vec<Block>,
    after: Option<After>,
    request: Option<*mut c_int>,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    unsafe {
        match request {
            None => run(c, sends, recvs, after),
            Some(r) => start(c, sends, recvs, after, r),
        }
    }
}
