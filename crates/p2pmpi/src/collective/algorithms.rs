//! Collective algorithms on packed bytes, over the communicator's collective context.
//!
//! Every algorithm is built from the point-to-point layer's MID-stamped messages (so
//! replication covers collectives without special cases) and names its sources explicitly
//! (no `ANY_SOURCE`), so per-(source, tag) FIFO order is all it relies on.
//!
//! The thesis' algorithms (§5.4, table 5.1) are all here, and faster ones where they measure
//! faster on this machine. `P2PMPI_COLL_<OPERATION>=<algorithm>` forces a choice (see
//! [`Algorithm`]); the defaults are the fastest measured.

use super::hier;
use super::ops::Operation;
use crate::datatype::TypeMap;
use crate::device::{SendMode, DONE};
use crate::error::{Error, Result};
use crate::point_to_point::{start_recv, start_send};
use crate::request::Pending;
use crate::topology::CommHandle;

pub(crate) const TAG_BARRIER: i32 = 1;
pub(crate) const TAG_BCAST: i32 = 2;
pub(crate) const TAG_REDUCE: i32 = 3;
pub(crate) const TAG_ALLREDUCE: i32 = 4;
pub(crate) const TAG_GATHER: i32 = 5;
pub(crate) const TAG_SCATTER: i32 = 6;
pub(crate) const TAG_ALLGATHER: i32 = 7;
pub(crate) const TAG_ALLTOALL: i32 = 8;
pub(crate) const TAG_SCAN: i32 = 9;
pub(crate) const TAG_EXSCAN: i32 = 10;
// Tags from `topology::TAG_COMM_GROUP` (2^20) on are communicator creation's.

/// Algorithm names accepted by `P2PMPI_COLL_<OPERATION>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// Barrier: ⌈log2 n⌉ rounds of pairwise signals (default).
    Dissemination,
    /// Barrier: the thesis' 4-ary tree rooted at 0 (fan-in then fan-out).
    Tree4,
    /// Allreduce: butterfly / recursive doubling, order-preserving, any size (default below
    /// the large-message threshold).
    RecursiveDoubling,
    /// Allreduce: Rabenseifner (reduce-scatter by recursive halving, then allgather);
    /// commutative operations, large messages (default above the threshold).
    Rabenseifner,
    /// Allreduce: reduce to rank 0 then broadcast (thesis, non-power-of-two sizes).
    ReduceBcast,
    /// Allgather: gather to 0 then broadcast (thesis).
    GatherBcast,
    /// Allgather: ring, n − 1 steps.
    Ring,
    /// Bcast: binomial tree (thesis; default for small messages).
    Binomial,
    /// Bcast: scatter then ring allgather (van de Geijn), large messages.
    ScatterAllgather,
    /// Scan: a chain from rank 0 (small messages).
    Linear,
}

/// The algorithm `P2PMPI_COLL_<OP>` forces for collective `op`, if any. The environment is
/// read once per process: looking a variable up takes the environment's lock and scans it,
/// which cost more than a small collective itself when it was done on every call.
fn forced(op: &str) -> Option<Algorithm> {
    // Process-wide because it is a setting of the process's environment, read once.
    static FORCED: std::sync::OnceLock<Vec<(String, Algorithm)>> = std::sync::OnceLock::new();
    let all = FORCED.get_or_init(|| {
        std::env::vars()
            .filter_map(|(k, v)| Some((k.strip_prefix("P2PMPI_COLL_")?.to_string(), algorithm_named(&v)?)))
            .collect()
    });
    all.iter().find(|(k, _)| k == op).map(|(_, a)| *a)
}

fn algorithm_named(v: &str) -> Option<Algorithm> {
    Some(match v.to_ascii_lowercase().as_str() {
        "dissemination" => Algorithm::Dissemination,
        "tree" | "tree4" => Algorithm::Tree4,
        "recursive_doubling" | "butterfly" => Algorithm::RecursiveDoubling,
        "rabenseifner" => Algorithm::Rabenseifner,
        "reduce_bcast" => Algorithm::ReduceBcast,
        "gather_bcast" => Algorithm::GatherBcast,
        "ring" => Algorithm::Ring,
        "binomial" => Algorithm::Binomial,
        "scatter_allgather" => Algorithm::ScatterAllgather,
        "linear" => Algorithm::Linear,
        _ => return None,
    })
}

/// Messages at least this large use the bandwidth-oriented algorithms.
const LARGE: usize = 32 * 1024;
/// Messages below this use the latency-oriented pipelines.
const SMALL: usize = 1024;

/// The collective context of a communicator: blocking and immediate byte transfers.
///
/// A `Coll` may also stand for a subset of the communicator (see [`Coll::sub`]): `rank` and
/// `size` are then positions in `ranks`, which maps them back to communicator ranks, and
/// every tag is moved by `tag_off` (the hierarchical collectives' phases, [`super::hier`]).
pub(crate) struct Coll<'a> {
    pub h: &'a CommHandle,
    pub rank: i32,
    pub size: i32,
    /// The collective being run, for error messages.
    pub name: &'static str,
    /// Communicator rank of each member of a subset, `None` for the whole communicator.
    pub ranks: Option<&'a [i32]>,
    pub tag_off: i32,
    /// Whether this runs a phase of a collective that supports intercommunicators (see
    /// [`super::inter`]); every other collective over an intercommunicator is refused.
    pub inter: bool,
}

impl<'a> Coll<'a> {
    pub fn new(h: &'a CommHandle, name: &'static str) -> Self {
        Coll { h, rank: h.rank(), size: h.size(), name, ranks: None, tag_off: 0, inter: false }
    }
    /// The remote group of an intercommunicator, for the collectives that support it.
    pub fn new_inter(h: &'a CommHandle, name: &'static str) -> Self {
        Coll { inter: true, ..Coll::new(h, name) }
    }
    /// Refuses a collective over an intercommunicator that has no intercommunicator form.
    fn check_inter(&self) -> Result<()> {
        if self.h.0.inter_local.is_some() && !self.inter {
            return Err(Error::Collective(format!(
                "{} over an intercommunicator is not supported (merge it first, or use barrier, \
                 all_gather_into, all_to_all_into, all_reduce_into or reduce_scatter_block_into)",
                self.name
            )));
        }
        Ok(())
    }
    /// The subset `ranks` (communicator ranks, this process's among them) of `self`'s
    /// communicator, its tags moved by `tag_off`.
    pub fn sub(&self, ranks: &'a [i32], tag_off: i32) -> Coll<'a> {
        let me = ranks.iter().position(|&r| r == self.h.rank()).expect("member of the subset") as i32;
        Coll {
            h: self.h,
            rank: me,
            size: ranks.len() as i32,
            name: self.name,
            ranks: Some(ranks),
            tag_off,
            inter: self.inter,
        }
    }
    #[inline]
    fn peer(&self, r: i32) -> i32 {
        match self.ranks {
            None => r,
            Some(m) => m[r as usize],
        }
    }
    /// A receive that overflows inside a collective means the ranks disagree on sizes.
    fn named(&self, e: Error) -> Error {
        match e {
            Error::Truncated { from_rank, message_bytes, buffer_bytes, .. } => Error::Collective(format!(
                "{}: rank {from_rank} sent {message_bytes} bytes where at most {buffer_bytes} were expected \
                 (mismatched counts or datatypes between ranks)",
                self.name
            )),
            Error::Collective(m) if !m.starts_with(self.name) => Error::Collective(format!("{}: {m}", self.name)),
            e => e,
        }
    }
    pub(super) fn isend(&self, dst: i32, tag: i32, data: &[u8]) -> Result<Pending> {
        self.check_inter()?;
        let (dst, tag) = (self.peer(dst), tag + self.tag_off);
        start_send(self.h, self.h.coll_id(), dst, tag, data.as_ptr(), data.len(), SendMode::Standard)
    }
    pub(super) fn irecv(&self, src: i32, tag: i32, buf: &mut [u8]) -> Result<Pending> {
        self.check_inter()?;
        let (src, tag) = (self.peer(src), tag + self.tag_off);
        start_recv(self.h, self.h.coll_id(), src, tag, buf.as_mut_ptr(), buf.len())
    }
    pub fn send(&self, dst: i32, tag: i32, data: &[u8]) -> Result<()> {
        let p = self.isend(dst, tag, data)?;
        if p.id == DONE {
            // Finished on the spot (an eager send): no status to make.
            return Ok(());
        }
        p.wait().map(|_| ()).map_err(|e| self.named(e))
    }
    /// Starts sending `data` to `dst`; the request, unless the send finished on the spot (an
    /// eager send, the usual case for small data): then nothing is left to wait for.
    pub(super) fn isend_unless_done(&self, dst: i32, tag: i32, data: &[u8]) -> Result<Option<Pending>> {
        let p = self.isend(dst, tag, data)?;
        Ok((p.id != DONE).then_some(p))
    }
    /// Receives exactly `buf.len()` bytes.
    pub fn recv(&self, src: i32, tag: i32, buf: &mut [u8]) -> Result<()> {
        let want = buf.len();
        let st = self.irecv(src, tag, buf)?.wait().map_err(|e| self.named(e))?;
        if st.byte_count() as usize != want {
            return Err(self.named(mismatch(src, want, st.byte_count())));
        }
        Ok(())
    }
    /// Sends `out` to `dst` while receiving exactly `inp.len()` bytes from `src`.
    pub fn sendrecv(&self, dst: i32, out: &[u8], src: i32, inp: &mut [u8], tag: i32) -> Result<()> {
        let want = inp.len();
        let r = self.irecv(src, tag, inp)?;
        let s = self.isend_unless_done(dst, tag, out)?;
        let sent = s.map(Pending::wait);
        let st = r.wait().map_err(|e| self.named(e))?;
        if let Some(sent) = sent {
            sent.map_err(|e| self.named(e))?;
        }
        if st.byte_count() as usize != want {
            return Err(self.named(mismatch(src, want, st.byte_count())));
        }
        Ok(())
    }
    /// Waits for every request; the first error wins, named after the collective.
    pub(super) fn wait_all(&self, reqs: Vec<Pending>) -> Result<()> {
        wait_all(reqs).map_err(|e| self.named(e))
    }
}

/// The bytes `out` (to send) and `inp` (to receive into) of one buffer, two ranges that do
/// not overlap: sent in place, without a copy.
fn split_two(buf: &mut [u8], out: std::ops::Range<usize>, inp: std::ops::Range<usize>) -> (&[u8], &mut [u8]) {
    debug_assert!(out.end <= inp.start || inp.end <= out.start, "overlapping ranges");
    if out.end <= inp.start {
        let (lo, hi) = buf.split_at_mut(inp.start);
        (&lo[out], &mut hi[..inp.end - inp.start])
    } else {
        let (lo, hi) = buf.split_at_mut(out.start);
        (&hi[..out.end - out.start], &mut lo[inp])
    }
}

/// Scratch bytes for one operand: on the stack when small (no allocation, no look into the
/// pool of buffers), else a pooled buffer.
#[allow(clippy::large_enum_variant, reason = "the small operand lives on the stack on purpose: no allocation")]
pub(crate) enum Tmp {
    Stack([u8; TMP_STACK], usize),
    Pooled(crate::pool::Scratch),
}

/// Operands up to this many bytes are kept on the stack by [`Tmp`].
const TMP_STACK: usize = 256;

impl Tmp {
    pub(crate) fn zeroed(len: usize) -> Tmp {
        if len <= TMP_STACK {
            Tmp::Stack([0; TMP_STACK], len)
        } else {
            Tmp::Pooled(crate::pool::Scratch::zeroed(len))
        }
    }
}

impl std::ops::Deref for Tmp {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Tmp::Stack(b, n) => &b[..*n],
            Tmp::Pooled(v) => v,
        }
    }
}

impl std::ops::DerefMut for Tmp {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Tmp::Stack(b, n) => &mut b[..*n],
            Tmp::Pooled(v) => v,
        }
    }
}

fn mismatch(src: i32, want: usize, got: u64) -> Error {
    Error::Collective(format!(
        "rank {src} contributed {got} bytes where {want} were expected (mismatched counts or datatypes between ranks)"
    ))
}

fn wait_all(reqs: Vec<Pending>) -> Result<()> {
    let mut first = Ok(());
    for r in reqs {
        if let Err(e) = r.wait() {
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

// ---------------------------------------------------------------------------- barrier

pub(crate) fn barrier(c: &Coll) -> Result<()> {
    if let Some(l) = hier::layout(c) {
        return hier::ran(hier::barrier(c, l));
    }
    match forced("BARRIER") {
        Some(Algorithm::Tree4) => barrier_tree4(c),
        _ => barrier_dissemination(c),
    }
}

/// ⌈log2 n⌉ rounds; in round k, signal rank + 2^k and wait for rank − 2^k.
fn barrier_dissemination(c: &Coll) -> Result<()> {
    let mut dist = 1;
    while dist < c.size {
        let to = (c.rank + dist) % c.size;
        let from = (c.rank - dist).rem_euclid(c.size);
        c.sendrecv(to, &[], from, &mut [], TAG_BARRIER)?;
        dist *= 2;
    }
    Ok(())
}

/// The thesis' barrier: a 4-ary tree rooted at 0; children report up, the root releases down.
fn barrier_tree4(c: &Coll) -> Result<()> {
    let children: Vec<i32> = (1..=4).map(|k| 4 * c.rank + k).filter(|&ch| ch < c.size).collect();
    for &ch in &children {
        c.recv(ch, TAG_BARRIER, &mut [])?;
    }
    if c.rank != 0 {
        let parent = (c.rank - 1) / 4;
        c.send(parent, TAG_BARRIER, &[])?;
        c.recv(parent, TAG_BARRIER, &mut [])?;
    }
    let reqs = children.iter().map(|&ch| c.isend(ch, TAG_BARRIER, &[])).collect::<Result<Vec<_>>>()?;
    c.wait_all(reqs)
}

// ---------------------------------------------------------------------------- broadcast

pub(crate) fn bcast(c: &Coll, buf: &mut [u8], root: i32) -> Result<()> {
    if c.size == 1 {
        return Ok(());
    }
    if let Some(l) = hier::layout(c) {
        return hier::ran(hier::bcast(c, l, buf, root));
    }
    let algo = forced("BCAST").unwrap_or(if buf.len() >= 4 * LARGE && c.size > 2 {
        Algorithm::ScatterAllgather
    } else {
        Algorithm::Binomial
    });
    match algo {
        Algorithm::ScatterAllgather if buf.len() >= c.size as usize => bcast_scatter_allgather(c, buf, root),
        _ => bcast_binomial(c, buf, root),
    }
}

/// Binomial tree rooted at `root` (thesis).
fn bcast_binomial(c: &Coll, buf: &mut [u8], root: i32) -> Result<()> {
    let n = c.size;
    let vrank = (c.rank - root).rem_euclid(n);
    let mut mask = 1;
    while mask < n {
        if vrank & mask != 0 {
            let src = (vrank - mask + root) % n;
            c.recv(src, TAG_BCAST, buf)?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    // Only the sends that did not finish on the spot are kept: small broadcasts allocate
    // nothing (a `Vec` allocates on its first push).
    let mut reqs = Vec::new();
    while mask > 0 {
        if vrank + mask < n {
            reqs.extend(c.isend_unless_done((vrank + mask + root) % n, TAG_BCAST, buf)?);
        }
        mask >>= 1;
    }
    if reqs.is_empty() {
        return Ok(());
    }
    c.wait_all(reqs)
}

/// Split `len` bytes into `n` nearly equal chunks: (offset, length) of chunk `i`.
fn chunk(len: usize, n: usize, i: usize) -> (usize, usize) {
    let base = len / n;
    let extra = len % n;
    let off = i * base + i.min(extra);
    (off, base + usize::from(i < extra))
}

/// Large broadcast: the root scatters chunks (binomial), then a ring allgather completes
/// every copy. Moves about 2× the data instead of log2(n)×.
fn bcast_scatter_allgather(c: &Coll, buf: &mut [u8], root: i32) -> Result<()> {
    let n = c.size as usize;
    let vrank = (c.rank - root).rem_euclid(c.size) as usize;
    let len = buf.len();
    // Binomial scatter of chunk ranges [vrank, vrank + subtree).
    let mut mask = 1usize;
    while mask < n {
        if vrank & mask != 0 {
            let src = ((vrank - mask) as i32 + root) % c.size;
            let hi = (vrank + mask).min(n);
            let (o0, _) = chunk(len, n, vrank);
            let (o1, l1) = chunk(len, n, hi - 1);
            c.recv(src, TAG_BCAST, &mut buf[o0..o1 + l1])?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        let child = vrank + mask;
        if child < n {
            let hi = (child + mask).min(n);
            let (o0, _) = chunk(len, n, child);
            let (o1, l1) = chunk(len, n, hi - 1);
            c.send((child as i32 + root) % c.size, TAG_BCAST, &buf[o0..o1 + l1])?;
        }
        mask >>= 1;
    }
    // Ring allgather of the chunks (in virtual ranks).
    let right = ((vrank + 1) % n) as i32;
    let left = ((vrank + n - 1) % n) as i32;
    let (right, left) = ((right + root) % c.size, (left + root) % c.size);
    for step in 0..n - 1 {
        let send_i = (vrank + n - step) % n;
        let recv_i = (vrank + n - step - 1) % n;
        let (so, sl) = chunk(len, n, send_i);
        let (ro, rl) = chunk(len, n, recv_i);
        let (out, inp) = split_two(buf, so..so + sl, ro..ro + rl);
        c.sendrecv(right, out, left, inp, TAG_BCAST)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------- reduce

/// `acc` (packed, `count` elements of `map`) becomes the reduction at `root`; on other ranks
/// its content is unspecified afterwards.
pub(crate) fn reduce(
    c: &Coll,
    acc: &mut Vec<u8>,
    map: &TypeMap,
    count: usize,
    op: &dyn Operation,
    root: i32,
) -> Result<()> {
    if c.size == 1 {
        return Ok(());
    }
    if let Some(r) = hier::layout(c).and_then(|l| hier::reduce(c, l, acc, map, count, op, root)) {
        return hier::ran(r);
    }
    if op.is_commutative() {
        reduce_binomial(c, acc, map, count, op, root)
    } else {
        // Rank order matters: reduce towards rank 0 (ranges stay contiguous), then hand over.
        reduce_binomial(c, acc, map, count, op, 0)?;
        if root != 0 {
            if c.rank == 0 {
                c.send(root, TAG_REDUCE, acc)?;
            } else if c.rank == root {
                c.recv(0, TAG_REDUCE, acc)?;
            }
        }
        Ok(())
    }
}

/// Binomial reduction towards `root`; with root 0 each partial result covers a contiguous,
/// ordered range of ranks, so non-commutative operations are combined in rank order.
fn reduce_binomial(
    c: &Coll,
    acc: &mut Vec<u8>,
    map: &TypeMap,
    count: usize,
    op: &dyn Operation,
    root: i32,
) -> Result<()> {
    let n = c.size;
    let vrank = (c.rank - root).rem_euclid(n);
    let mut tmp = crate::pool::Scratch::zeroed(acc.len());
    let mut mask = 1;
    while mask < n {
        if vrank & mask == 0 {
            let src = vrank | mask;
            if src < n {
                c.recv((src + root) % n, TAG_REDUCE, &mut tmp)?;
                // acc covers the lower ranks: tmp = acc ∘ tmp.
                op.combine(map, count, acc, &mut tmp);
                std::mem::swap(acc, &mut *tmp);
            }
        } else {
            c.send(((vrank & !mask) + root) % n, TAG_REDUCE, acc)?;
            break;
        }
        mask <<= 1;
    }
    Ok(())
}

// ---------------------------------------------------------------------------- allreduce

pub(crate) fn allreduce(c: &Coll, acc: &mut Vec<u8>, map: &TypeMap, count: usize, op: &dyn Operation) -> Result<()> {
    if c.size == 1 {
        return Ok(());
    }
    if let Some(r) = hier::layout(c).and_then(|l| hier::allreduce(c, l, acc, map, count, op)) {
        return hier::ran(r);
    }
    let default = if acc.len() >= LARGE && op.is_commutative() && count >= c.size as usize {
        Algorithm::Rabenseifner
    } else {
        Algorithm::RecursiveDoubling
    };
    match forced("ALLREDUCE").unwrap_or(default) {
        Algorithm::ReduceBcast => {
            reduce(c, acc, map, count, op, 0)?;
            bcast(c, acc, 0)
        }
        Algorithm::Rabenseifner if op.is_commutative() && count >= c.size as usize => {
            allreduce_rabenseifner(c, acc, map, count, op)
        }
        _ => allreduce_recursive_doubling(c, acc, map, count, op),
    }
}

/// Folds the ranks beyond the largest power of two into their neighbours: returns this
/// process's rank among the power-of-two group, or `None` if it only contributed.
fn fold_extra(
    c: &Coll,
    acc: &mut [u8],
    map: &TypeMap,
    count: usize,
    op: &dyn Operation,
    tag: i32,
) -> Result<(Option<i32>, i32)> {
    let n = c.size;
    let pof2 = 1 << (31 - n.leading_zeros());
    let rem = n - pof2;
    if c.rank < 2 * rem {
        if c.rank % 2 == 0 {
            c.send(c.rank + 1, tag, acc)?;
            return Ok((None, pof2));
        }
        let mut tmp = crate::pool::Scratch::zeroed(acc.len());
        c.recv(c.rank - 1, tag, &mut tmp)?;
        op.combine(map, count, &tmp, acc); // acc = lower ∘ acc
        return Ok((Some(c.rank / 2), pof2));
    }
    Ok((Some(c.rank - rem), pof2))
}

fn real_rank(newrank: i32, rem: i32) -> i32 {
    if newrank < rem {
        newrank * 2 + 1
    } else {
        newrank + rem
    }
}

/// Butterfly (thesis, pairs s xor 2^i) extended to any size: extra ranks fold into their
/// neighbours first and get the result back at the end. Order-preserving.
fn allreduce_recursive_doubling(
    c: &Coll,
    acc: &mut Vec<u8>,
    map: &TypeMap,
    count: usize,
    op: &dyn Operation,
) -> Result<()> {
    let (newrank, pof2) = fold_extra(c, acc, map, count, op, TAG_ALLREDUCE)?;
    let rem = c.size - pof2;
    if let Some(nr) = newrank {
        let mut tmp = crate::pool::Scratch::zeroed(acc.len());
        let mut mask = 1;
        while mask < pof2 {
            let partner = nr ^ mask;
            let dst = real_rank(partner, rem);
            c.sendrecv(dst, acc, dst, &mut tmp, TAG_ALLREDUCE)?;
            if partner < nr {
                op.combine(map, count, &tmp, acc); // acc = theirs ∘ acc
            } else {
                op.combine(map, count, acc, &mut tmp); // tmp = acc ∘ theirs
                std::mem::swap(acc, &mut *tmp);
            }
            mask <<= 1;
        }
    }
    unfold_extra(c, acc, rem, TAG_ALLREDUCE)
}

fn unfold_extra(c: &Coll, acc: &mut [u8], rem: i32, tag: i32) -> Result<()> {
    if c.rank < 2 * rem {
        if c.rank % 2 == 1 {
            c.send(c.rank - 1, tag, acc)?;
        } else {
            c.recv(c.rank + 1, tag, acc)?;
        }
    }
    Ok(())
}

/// Rabenseifner: reduce-scatter by recursive halving, then allgather by recursive doubling,
/// over the power-of-two group. Each process moves ~2× the data instead of log2(n)×.
fn allreduce_rabenseifner(c: &Coll, acc: &mut [u8], map: &TypeMap, count: usize, op: &dyn Operation) -> Result<()> {
    let (newrank, pof2) = fold_extra(c, acc, map, count, op, TAG_ALLREDUCE)?;
    let rem = c.size - pof2;
    if let Some(nr) = newrank {
        let esize = map.size();
        let p = pof2 as usize;
        // Element ranges of the pof2 blocks.
        let block = |i: usize| chunk(count, p, i);
        let range = |lo: usize, hi: usize| {
            let (s, _) = block(lo);
            let (e, el) = block(hi - 1);
            (s * esize, (e + el) * esize)
        };
        let mut tmp = crate::pool::Scratch::zeroed(acc.len());
        // Reduce-scatter: keep halving the block range this process is responsible for.
        let (mut lo, mut hi) = (0usize, p);
        let mut mask = p / 2;
        while mask > 0 {
            let partner = nr ^ mask as i32;
            let dst = real_rank(partner, rem);
            let mid = (lo + hi) / 2;
            let (keep, give) = if (nr as usize) & mask == 0 { ((lo, mid), (mid, hi)) } else { ((mid, hi), (lo, mid)) };
            let (gs, ge) = range(give.0, give.1);
            let (ks, ke) = range(keep.0, keep.1);
            c.sendrecv(dst, &acc[gs..ge], dst, &mut tmp[ks..ke], TAG_ALLREDUCE)?;
            let kcount = (ke - ks) / esize;
            op.combine(map, kcount, &tmp[ks..ke], &mut acc[ks..ke]);
            (lo, hi) = keep;
            mask /= 2;
        }
        // Allgather: double the owned range back up.
        let mut mask = 1usize;
        while mask < p {
            let partner = nr ^ mask as i32;
            let dst = real_rank(partner, rem);
            let width = hi - lo;
            let (plo, phi) =
                if (nr as usize) & mask == 0 { (lo + width, hi + width) } else { (lo - width, hi - width) };
            let (os, oe) = range(lo, hi);
            let (ps, pe) = range(plo, phi);
            let (out, inp) = split_two(acc, os..oe, ps..pe);
            c.sendrecv(dst, out, dst, inp, TAG_ALLREDUCE)?;
            lo = lo.min(plo);
            hi = hi.max(phi);
            mask *= 2;
        }
    }
    unfold_extra(c, acc, rem, TAG_ALLREDUCE)
}

// ---------------------------------------------------------------------------- gather / scatter

/// Flat-tree gather (thesis): `parts[r]` receives rank r's bytes at the root.
pub(crate) fn gatherv(c: &Coll, mine: &[u8], parts: Option<Vec<&mut [u8]>>, root: i32) -> Result<()> {
    match parts {
        Some(mut parts) => {
            let mut reqs = Vec::new();
            for (r, part) in parts.iter_mut().enumerate() {
                let r = r as i32;
                if r == c.rank {
                    if part.len() != mine.len() {
                        return Err(c.named(mismatch(r, part.len(), mine.len() as u64)));
                    }
                    part.copy_from_slice(mine);
                } else {
                    let want = part.len();
                    reqs.push((r, want, c.irecv(r, TAG_GATHER, part)?));
                }
            }
            let mut first = Ok(());
            for (r, want, p) in reqs {
                match p.wait() {
                    Ok(st) if st.byte_count() as usize != want => {
                        first = first.and(Err(c.named(mismatch(r, want, st.byte_count()))));
                    }
                    Ok(_) => {}
                    Err(e) => first = first.and(Err(c.named(e))),
                }
            }
            first
        }
        None => c.send(root, TAG_GATHER, mine),
    }
}

/// Flat-tree scatter (thesis): the root sends `parts[r]` to rank r.
pub(crate) fn scatterv(c: &Coll, parts: Option<Vec<&[u8]>>, mine: &mut [u8], root: i32) -> Result<()> {
    match parts {
        Some(parts) => {
            let mut reqs = Vec::new();
            for (r, part) in parts.iter().enumerate() {
                let r = r as i32;
                if r == c.rank {
                    if part.len() != mine.len() {
                        return Err(c.named(mismatch(r, mine.len(), part.len() as u64)));
                    }
                    mine.copy_from_slice(part);
                } else {
                    reqs.extend(c.isend_unless_done(r, TAG_SCATTER, part)?);
                }
            }
            if reqs.is_empty() {
                return Ok(());
            }
            c.wait_all(reqs)
        }
        None => c.recv(root, TAG_SCATTER, mine),
    }
}

// ---------------------------------------------------------------------------- allgather

/// `all` holds n blocks of `block` bytes; this rank's own block must already be in place.
pub(crate) fn allgather(c: &Coll, all: &mut [u8], block: usize) -> Result<()> {
    if c.size == 1 {
        return Ok(());
    }
    let pof2 = c.size.count_ones() == 1;
    match forced("ALLGATHER") {
        Some(Algorithm::GatherBcast) => {
            let mine = all[c.rank as usize * block..(c.rank as usize + 1) * block].to_vec();
            let parts = (c.rank == 0).then(|| all.chunks_mut(block.max(1)).take(c.size as usize).collect::<Vec<_>>());
            if block == 0 {
                return barrier(c);
            }
            gatherv(c, &mine, parts, 0)?;
            bcast(c, all, 0)
        }
        Some(Algorithm::Ring) => allgather_ring(c, all, block),
        _ if pof2 => allgather_recursive_doubling(c, all, block),
        _ => allgather_ring(c, all, block),
    }
}

fn allgather_ring(c: &Coll, all: &mut [u8], block: usize) -> Result<()> {
    let n = c.size as usize;
    let me = c.rank as usize;
    let right = ((me + 1) % n) as i32;
    let left = ((me + n - 1) % n) as i32;
    for step in 0..n - 1 {
        let si = (me + n - step) % n;
        let ri = (me + n - step - 1) % n;
        let (out, inp) = split_two(all, si * block..(si + 1) * block, ri * block..(ri + 1) * block);
        c.sendrecv(right, out, left, inp, TAG_ALLGATHER)?;
    }
    Ok(())
}

/// Power-of-two sizes: log2(n) exchanges of doubling, aligned block ranges.
fn allgather_recursive_doubling(c: &Coll, all: &mut [u8], block: usize) -> Result<()> {
    let n = c.size as usize;
    let me = c.rank as usize;
    let mut mask = 1usize;
    while mask < n {
        let partner = me ^ mask;
        let my_lo = me & !(mask - 1);
        let their_lo = partner & !(mask - 1);
        let (out, inp) =
            split_two(all, my_lo * block..(my_lo + mask) * block, their_lo * block..(their_lo + mask) * block);
        c.sendrecv(partner as i32, out, partner as i32, inp, TAG_ALLGATHER)?;
        mask <<= 1;
    }
    Ok(())
}

/// Allgather with per-rank sizes: a ring over the parts themselves (only each part's own
/// bytes are written; whatever lies between parts is left alone). Step k passes part
/// (me − k) to the right and receives part (me − k − 1) from the left.
pub(crate) fn allgatherv(c: &Coll, all: &mut [u8], offsets: &[(usize, usize)]) -> Result<()> {
    let n = c.size as usize;
    let me = c.rank as usize;
    if n == 1 {
        return Ok(());
    }
    let right = ((me + 1) % n) as i32;
    let left = ((me + n - 1) % n) as i32;
    for step in 0..n - 1 {
        let si = (me + n - step) % n;
        let ri = (me + n - step - 1) % n;
        let (so, sl) = offsets[si];
        let (ro, rl) = offsets[ri];
        let out = crate::pool::Scratch::copy_of(&all[so..so + sl]);
        c.sendrecv(right, &out, left, &mut all[ro..ro + rl], TAG_ALLGATHER)?;
    }
    Ok(())
}

/// Disjoint mutable slices at (offset, length) — in any order, without overlap. Empty parts
/// may sit anywhere (MPI allows zero-count parts to share a displacement).
pub(crate) fn split_parts_mut<'b>(buf: &'b mut [u8], parts: &[(usize, usize)]) -> Result<Vec<&'b mut [u8]>> {
    let mut order: Vec<usize> = (0..parts.len()).filter(|&i| parts[i].1 > 0).collect();
    order.sort_by_key(|&i| parts[i].0);
    let mut out: Vec<Option<&'b mut [u8]>> = (0..parts.len()).map(|_| None).collect();
    let mut rest: &'b mut [u8] = buf;
    let mut pos = 0;
    for i in order {
        let (o, l) = parts[i];
        if o < pos || o + l > pos + rest.len() {
            return Err(Error::Collective(format!("overlapping or out-of-range parts at byte {o} (+{l})")));
        }
        let tail = std::mem::take(&mut rest);
        let (_, tail) = tail.split_at_mut(o - pos);
        let (part, tail) = tail.split_at_mut(l);
        out[i] = Some(part);
        rest = tail;
        pos = o + l;
    }
    Ok(out.into_iter().map(|p| p.unwrap_or_default()).collect())
}

// ---------------------------------------------------------------------------- all-to-all

/// Asynchronous rotation (thesis): at step i, send to (s + i) mod n and receive from
/// (s − i) mod n; every transfer is posted at once. `send[r]` goes to rank r, `recv[r]` comes
/// from rank r.
pub(crate) fn alltoallv(c: &Coll, send: &[&[u8]], recv: Vec<&mut [u8]>) -> Result<()> {
    let n = c.size;
    let me = c.rank;
    let mut recv: Vec<Option<&mut [u8]>> = recv.into_iter().map(Some).collect();
    let own = recv[me as usize].take().expect("own part");
    if own.len() != send[me as usize].len() {
        return Err(c.named(mismatch(me, own.len(), send[me as usize].len() as u64)));
    }
    own.copy_from_slice(send[me as usize]);
    let mut rreqs = Vec::new();
    for i in 1..n {
        let src = (me - i).rem_euclid(n);
        let part = recv[src as usize].take().expect("part");
        let want = part.len();
        rreqs.push((src, want, c.irecv(src, TAG_ALLTOALL, part)?));
    }
    let mut sreqs = Vec::new();
    for i in 1..n {
        let dst = (me + i) % n;
        sreqs.extend(c.isend_unless_done(dst, TAG_ALLTOALL, send[dst as usize])?);
    }
    let mut first = c.wait_all(sreqs);
    for (src, want, p) in rreqs {
        match p.wait() {
            Ok(st) if st.byte_count() as usize != want => {
                first = first.and(Err(c.named(mismatch(src, want, st.byte_count()))))
            }
            Ok(_) => {}
            Err(e) => first = first.and(Err(c.named(e))),
        }
    }
    first
}

// ---------------------------------------------------------------------------- scans

/// Inclusive scan: `result` = x0 ∘ … ∘ x_rank, in rank order. A linear chain for small
/// messages (each rank only waits for its left neighbour, so consecutive scans pipeline),
/// recursive doubling otherwise.
pub(crate) fn scan(c: &Coll, result: &mut [u8], map: &TypeMap, count: usize, op: &dyn Operation) -> Result<()> {
    let linear = match forced("SCAN") {
        Some(Algorithm::Linear) => true,
        Some(_) => false,
        // Two processes: the chain is one message, where recursive doubling sends one back.
        None => result.len() < SMALL || c.size == 2,
    };
    if linear {
        if c.rank > 0 {
            let mut left = Tmp::zeroed(result.len());
            c.recv(c.rank - 1, TAG_SCAN, &mut left)?;
            op.combine(map, count, &left, result);
        }
        if c.rank + 1 < c.size {
            c.send(c.rank + 1, TAG_SCAN, result)?;
        }
        return Ok(());
    }
    scan_recursive_doubling(c, result, map, count, op)
}

fn scan_recursive_doubling(c: &Coll, result: &mut [u8], map: &TypeMap, count: usize, op: &dyn Operation) -> Result<()> {
    let mine = crate::pool::Scratch::copy_of(result);
    prefix_recursive_doubling(c, &mine, result, true, map, count, op, TAG_SCAN).map(|_| ())
}

/// Exclusive scan: `result` = x0 ∘ … ∘ x_(rank−1); rank 0's result is left untouched.
/// Returns whether `result` was written.
pub(crate) fn exscan(
    c: &Coll,
    mine: &[u8],
    result: &mut [u8],
    map: &TypeMap,
    count: usize,
    op: &dyn Operation,
) -> Result<bool> {
    prefix_recursive_doubling(c, mine, result, false, map, count, op, TAG_EXSCAN)
}

/// Prefix reduction by recursive doubling (partners rank xor 2^k): `partial` covers this
/// rank's aligned block, `result` the lower blocks received so far (plus this rank's own
/// value when `inclusive`). Returns whether `result` holds anything.
#[allow(clippy::too_many_arguments)]
fn prefix_recursive_doubling(
    c: &Coll,
    mine: &[u8],
    result: &mut [u8],
    inclusive: bool,
    map: &TypeMap,
    count: usize,
    op: &dyn Operation,
    tag: i32,
) -> Result<bool> {
    let mut partial = crate::pool::Scratch::copy_of(mine);
    let mut tmp = crate::pool::Scratch::zeroed(mine.len());
    let mut have = inclusive;
    let mut mask = 1;
    while mask < c.size {
        let dst = c.rank ^ mask;
        if dst < c.size {
            c.sendrecv(dst, &partial, dst, &mut tmp, tag)?;
            if c.rank > dst {
                // The partner's block is lower: it goes in front.
                op.combine(map, count, &tmp, &mut partial);
                if have {
                    op.combine(map, count, &tmp, result);
                } else {
                    result.copy_from_slice(&tmp);
                    have = true;
                }
            } else {
                op.combine(map, count, &partial, &mut tmp); // tmp = partial ∘ theirs
                std::mem::swap(&mut *partial, &mut *tmp);
            }
        }
        mask <<= 1;
    }
    Ok(have)
}
