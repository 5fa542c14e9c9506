//! Immediate (non-blocking) collectives without a progress thread.
//!
//! An immediate collective is a **schedule**: a list of steps — post a send of a buffer to a
//! rank, post a receive from a rank into a buffer, wait for everything posted so far, run a
//! local computation (combine reduction operands, write the result into the user's buffer) —
//! that the device runs as far as it can whenever it makes progress. The schedule lives in the
//! device ([`crate::device::Engine`]) next to the point-to-point requests, and every call that
//! makes progress — a blocking send or receive, any `wait` or `test` (of any request), a
//! blocking collective, a probe — first moves every live schedule forward: completed
//! transfers are reaped, the next steps posted, computations run. A collective started with
//! `immediate_*` therefore advances while the program blocks in any other call, and needs no
//! thread of its own.
//!
//! The user sees an ordinary [`crate::request::Request`]: behind it is a device request that
//! the schedule completes when its last step is done (a "generalized request"), so `wait`,
//! `test`, `wait_any`, request collections and scopes work unchanged, and in a replicated job
//! the completion is a choice point like any other request's. A step that fails (a member
//! lost, the communicator revoked) fails the request and gives the schedule up (the
//! `try_immediate_*` forms of [`crate::ulfm`] and `Request::try_wait`/`try_test` return it).
//! In a fault-aware replicated job the schedule is numbered when it starts, and a replica
//! completes it only with its master's outcome, failure or success.
//!
//! The schedules are flat (one round of transfers wherever the operation allows it): every
//! process exchanges directly with the processes it needs, and reductions are combined
//! locally in rank order, so non-commutative operations give the sequential answer and every
//! process of an all-reduce the same bits. Barrier is the dissemination barrier (⌈log2 n⌉
//! rounds), broadcast a binomial tree. Each immediate collective of a communicator gets its own
//! tag from the communicator's count of immediate collectives (every process starts them in
//! the same order), so several may be in flight at once, beside blocking ones.

use super::ops::Operation;
use crate::datatype::TypeMap;
use crate::device::Schedule as _;
use crate::device::{Engine, ReqId, SendMode, StatusInfo};
use crate::error::{Error, Result};
use crate::request::Pending;
use crate::topology::{CommHandle, Rank};
use p2pmpi_core::matching::Pattern;
use std::collections::VecDeque;
use std::sync::Arc;

/// A local computation of a schedule, run once every transfer posted before it completed.
type Work = Box<dyn FnOnce(&mut [Vec<u8>]) -> Result<()> + Send>;

enum Step {
    /// Send slot `slot` to communicator rank `to`.
    Send { to: Rank, slot: usize },
    /// Receive exactly `slots[slot].len()` bytes from `from` into slot `slot`.
    Recv { from: Rank, slot: usize },
    /// Wait until every transfer posted so far completed.
    Fence,
    /// Run a computation (after a fence).
    Run(Work),
}

/// A transfer under way.
struct Active {
    id: ReqId,
    peer: Rank,
    /// For a receive: the slot and the number of bytes expected.
    recv: Option<(usize, usize)>,
}

/// The steps of one immediate collective, built before it starts.
#[derive(Default)]
pub(crate) struct Plan {
    slots: Vec<Vec<u8>>,
    steps: VecDeque<Step>,
}

impl Plan {
    /// A buffer owned by the schedule; returns its index.
    pub fn slot(&mut self, v: Vec<u8>) -> usize {
        self.slots.push(v);
        self.slots.len() - 1
    }
    pub fn send(&mut self, to: Rank, slot: usize) {
        self.steps.push_back(Step::Send { to, slot });
    }
    pub fn recv(&mut self, from: Rank, slot: usize) {
        self.steps.push_back(Step::Recv { from, slot });
    }
    pub fn fence(&mut self) {
        self.steps.push_back(Step::Fence);
    }
    /// Runs `f` on the slots once everything posted before completed.
    pub fn then(&mut self, f: impl FnOnce(&mut [Vec<u8>]) -> Result<()> + Send + 'static) {
        self.steps.push_back(Step::Run(Box::new(f)));
    }
}

/// A running immediate collective, owned by the device (as a [`crate::device::Schedule`]).
pub(crate) struct Schedule {
    comm: u32,
    members: Option<Arc<[Rank]>>,
    tag: i32,
    name: &'static str,
    slots: Vec<Vec<u8>>,
    steps: VecDeque<Step>,
    active: Vec<Active>,
}

impl Schedule {
    fn world(&self, r: Rank) -> Rank {
        match &self.members {
            None => r,
            Some(m) => m[r as usize],
        }
    }

    fn named(&self, e: Error, peer: Rank) -> Error {
        match e {
            Error::Truncated { message_bytes, buffer_bytes, .. } => Error::Collective(format!(
                "{}: rank {peer} sent {message_bytes} bytes where {buffer_bytes} were expected \
                 (mismatched counts or datatypes between ranks)",
                self.name
            )),
            Error::Collective(m) => Error::Collective(format!("{}: {m}", self.name)),
            e => e,
        }
    }

    /// A step failed: the sends of the current round (up to the next fence) are posted all
    /// the same, then the schedule is over. Every process that reaches a round posts all its
    /// sends, whichever step failed first: with `-r R` a replica (which does not fail steps
    /// by itself) posts the same sends as its master, so none waits for its master to send
    /// what it never would.
    fn give_up(&mut self, e: &mut Engine) {
        while let Some(Step::Send { .. } | Step::Recv { .. }) = self.steps.front() {
            if let Some(Step::Send { to, slot }) = self.steps.pop_front() {
                let b = &self.slots[slot];
                // A send that fails too (to a lost rank, on a revoked communicator) is left.
                if let Ok(id) = e.isend(self.comm, self.world(to), self.tag, b.as_ptr(), b.len(), SendMode::Standard) {
                    self.active.push(Active { id, peer: to, recv: None });
                }
            }
        }
        self.abort(e);
    }
}

impl crate::device::Schedule for Schedule {
    /// Runs the schedule as far as it goes now. `Some` once it is over (successfully or not):
    /// nothing in the device refers to its buffers any more.
    fn advance(&mut self, e: &mut Engine) -> Option<Result<StatusInfo>> {
        loop {
            // Reap what completed.
            let mut failed = None;
            let mut i = 0;
            while i < self.active.len() {
                match e.take_done(self.active[i].id) {
                    None => i += 1,
                    Some(r) => {
                        let a = self.active.swap_remove(i);
                        let r = r.and_then(|st| match a.recv {
                            Some((_, want)) if st.len as usize != want => Err(Error::Collective(format!(
                                "rank {} contributed {} bytes where {want} were expected \
                                 (mismatched counts or datatypes between ranks)",
                                a.peer, st.len
                            ))),
                            _ => Ok(()),
                        });
                        if let Err(err) = r {
                            failed.get_or_insert(self.named(err, a.peer));
                        }
                    }
                }
            }
            if let Some(err) = failed {
                self.give_up(e);
                return Some(Err(err));
            }
            // Post or run what comes next.
            match self.steps.front() {
                None if self.active.is_empty() => {
                    return Some(Ok(StatusInfo { source: -1, tag: -1, len: 0, cancelled: false }))
                }
                None => return None,
                Some(Step::Fence | Step::Run(_)) if !self.active.is_empty() => return None,
                Some(_) => {}
            }
            let step = self.steps.pop_front().expect("a step");
            let posted = match step {
                Step::Send { to, slot } => {
                    let b = &self.slots[slot];
                    e.isend(self.comm, self.world(to), self.tag, b.as_ptr(), b.len(), SendMode::Standard)
                        .map(|id| self.active.push(Active { id, peer: to, recv: None }))
                        .map_err(|err| self.named(err, to))
                }
                Step::Recv { from, slot } => {
                    let pat = Pattern { comm: self.comm, src: Some(self.world(from)), tag: Some(self.tag) };
                    let b = &mut self.slots[slot];
                    let want = b.len();
                    e.irecv(pat, b.as_mut_ptr(), want)
                        .map(|id| self.active.push(Active { id, peer: from, recv: Some((slot, want)) }))
                        .map_err(|err| self.named(err, from))
                }
                Step::Fence => Ok(()),
                Step::Run(f) => f(&mut self.slots).map_err(|err| self.named(err, -1)),
            };
            if let Err(err) = posted {
                self.give_up(e);
                return Some(Err(err));
            }
        }
    }

    /// The world rank of a peer in `lost` that a receive under way waits for.
    fn waits_for(&self, lost: &[Rank]) -> Option<Rank> {
        self.active.iter().filter(|a| a.recv.is_some()).map(|a| self.world(a.peer)).find(|w| lost.contains(w))
    }

    /// Withdraws every transfer still under way (their buffers are about to go).
    fn abort(&mut self, e: &mut Engine) {
        for a in self.active.drain(..) {
            e.detach(a.id);
        }
        self.steps.clear();
    }
}

/// The tag of a communicator's next immediate collective.
const TAG_IMMEDIATE: i32 = 1 << 24;

/// Starts `plan` as immediate collective `name` of communicator `h`; returns the pending
/// request that completes with it.
pub(crate) fn start(h: &CommHandle, name: &'static str, plan: Plan) -> Result<Pending> {
    if h.0.inter_local.is_some() {
        return Err(Error::Collective(format!("{name} over an intercommunicator is not supported (merge it first)")));
    }
    let tag = TAG_IMMEDIATE + (h.next_immediate() % (1 << 24)) as i32;
    let sched = Schedule {
        comm: h.coll_id(),
        members: h.members(),
        tag,
        name,
        slots: plan.slots,
        steps: plan.steps,
        active: Vec::new(),
    };
    let id = crate::context::with_engine(|e| e.start_schedule(Box::new(sched)));
    Ok(Pending::new(id, None, None))
}

/// A raw pointer that a schedule's computation may carry to whichever thread drives the
/// device.
pub(crate) struct SendPtr(pub *mut u8);

// SAFETY: the pointer is the receive buffer of the user's request, borrowed by that request
// until it completes; the schedule writes it (under the device's lock, on whichever thread
// makes progress) before completing the request, and never after.
unsafe impl Send for SendPtr {}

/// Where a schedule writes its result: the user's receive buffer, whole (`count` elements
/// of `map`, packed bytes unpacked into it) or in parts at byte offsets (contiguous layout).
pub(crate) struct Output {
    pub ptr: SendPtr,
    pub map: TypeMap,
    pub count: usize,
}

impl Output {
    /// Writes packed `data` (at most `count` elements) into the buffer.
    ///
    /// # Safety
    /// The buffer must still be borrowed by the request (not completed yet) and be writable for
    /// `count` elements of `map` (the `BufferMut` contract of the buffer it was made from).
    pub unsafe fn write(&self, data: &[u8]) {
        // SAFETY: the caller's contract; `unpack` writes valid values (`bool` data as 0 or 1)
        // and reads at most `data.len()` bytes.
        unsafe { self.map.unpack(data, self.ptr.0, self.count) };
    }

    /// Writes `data` at byte offset `off` of a contiguous buffer.
    ///
    /// # Safety
    /// The bytes `off..off + data.len()` from the pointer must be writable and borrowed by the
    /// request (checked against the partition when the collective started).
    pub unsafe fn write_at(&self, off: usize, data: &[u8]) {
        let mut fixed;
        let data = if self.map.receives_in_place() {
            data
        } else {
            fixed = data.to_vec();
            self.map.fix_bools(&mut fixed);
            &fixed[..]
        };
        // SAFETY: the caller's contract; `data` is the schedule's own buffer (or a copy),
        // not the user's memory, and its `bool` bytes are 0 or 1.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.0.add(off), data.len()) };
    }
}

/// An operation that a schedule may keep until it runs.
pub(crate) struct KeptOp(Box<dyn Operation + 'static>);

// SAFETY: rsmpi's operations are `Sync` function objects (`UserOperation` requires `F: Sync`,
// `SystemOperation` and `UnsafeUserOperation` are plain data), so calling one from the thread
// that drives the device is sound; it is called and dropped under the device's lock, by one
// thread at a time.
unsafe impl Send for KeptOp {}

impl KeptOp {
    /// The operation.
    pub fn get(&self) -> &dyn Operation {
        &*self.0
    }

    /// Keeps `op` for a schedule of a request borrowing for `'a`.
    ///
    /// # Safety
    /// The schedule must be over (and so the operation dropped) before `'a` ends: the request
    /// that owns the schedule completes only when it is, and a request cannot outlive `'a`
    /// without the scope's abort (the contract of every request).
    pub unsafe fn new<'a, O: Operation + 'a>(op: O) -> KeptOp {
        let b: Box<dyn Operation + 'a> = Box::new(op);
        // SAFETY: only the lifetime bound changes (same layout); see the contract above.
        KeptOp(unsafe { std::mem::transmute::<Box<dyn Operation + 'a>, Box<dyn Operation + 'static>>(b) })
    }
}

/// x0 ∘ x1 ∘ … in the given order (at least one part).
pub(crate) fn fold(op: &dyn Operation, map: &TypeMap, count: usize, parts: &[&[u8]]) -> Vec<u8> {
    let (last, rest) = parts.split_last().expect("at least one operand");
    let mut acc = last.to_vec();
    for p in rest.iter().rev() {
        op.combine(map, count, p, &mut acc);
    }
    acc
}

// ------------------------------------------------------------------------ plans

/// Dissemination barrier: in round k, signal rank + 2^k and hear from rank − 2^k.
pub(crate) fn barrier_plan(rank: Rank, size: Rank) -> Plan {
    let mut p = Plan::default();
    let empty = p.slot(Vec::new());
    let mut dist = 1;
    while dist < size {
        p.recv((rank - dist).rem_euclid(size), empty);
        p.send((rank + dist) % size, empty);
        p.fence();
        dist *= 2;
    }
    p
}

/// Binomial broadcast of `data` (the root's bytes; zeros of the same length elsewhere); on
/// non-roots `out` receives the result.
pub(crate) fn bcast_plan(rank: Rank, size: Rank, root: Rank, data: Vec<u8>, out: Option<Output>) -> Plan {
    let mut p = Plan::default();
    let buf = p.slot(data);
    let vrank = (rank - root).rem_euclid(size);
    let mut mask = 1;
    while mask < size {
        if vrank & mask != 0 {
            p.recv((vrank - mask + root) % size, buf);
            p.fence();
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if vrank + mask < size {
            p.send((vrank + mask + root) % size, buf);
        }
        mask >>= 1;
    }
    if let Some(out) = out {
        p.then(move |s| {
            // SAFETY: `out` is the request's receive buffer, still borrowed (the request
            // completes after this step) and writable for its elements.
            unsafe { out.write(&s[buf]) };
            Ok(())
        });
    }
    p
}

/// Every rank's bytes to every rank: `mine` goes to each other rank; `lens[r]` bytes come
/// from rank r; `finish` gets the slots of rank 0..n in order.
pub(crate) fn exchange_plan(
    rank: Rank,
    size: Rank,
    outgoing: Vec<Option<Vec<u8>>>,
    incoming: Vec<Option<usize>>,
    finish: impl FnOnce(Vec<Option<&[u8]>>) -> Result<()> + Send + 'static,
) -> Plan {
    let mut p = Plan::default();
    let n = size as usize;
    let mut rslot = vec![None; n];
    // Receives first, in rotation order (from rank − 1, rank − 2, …), then sends (to rank + 1, …).
    for i in 1..n {
        let src = (rank as usize + n - i) % n;
        if let Some(len) = incoming[src] {
            let s = p.slot(vec![0u8; len]);
            p.recv(src as Rank, s);
            rslot[src] = Some(s);
        }
    }
    let mut outgoing = outgoing;
    for i in 1..n {
        let dst = (rank as usize + i) % n;
        if let Some(v) = outgoing[dst].take() {
            let s = p.slot(v);
            p.send(dst as Rank, s);
        }
    }
    let own = outgoing[rank as usize].take().map(|v| p.slot(v));
    rslot[rank as usize] = own;
    p.then(move |slots| {
        let parts: Vec<Option<&[u8]>> = rslot.iter().map(|s| s.map(|i| &slots[i][..])).collect();
        finish(parts)
    });
    p
}
