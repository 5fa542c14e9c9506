//! The collectives over intercommunicators that the library does not run itself: the rooted
//! ones (`MPI_Bcast`, `MPI_Reduce`, `MPI_Gather`, `MPI_Scatter`, `MPI_Gatherv`,
//! `MPI_Scatterv`, with `MPI_ROOT` at the root and `MPI_PROC_NULL` at the rest of its group),
//! `MPI_Allgatherv`, `MPI_Alltoallv`, `MPI_Alltoallw`, and the nonblocking forms of every
//! collective over an intercommunicator (`MPI_Ibarrier`, `MPI_Ibcast`, `MPI_Iallreduce`, ...).
//!
//! Each is one [`crate::exchange`] over the intercommunicator's *carrier*: both groups merged
//! into one intracommunicator, made once (collectively, at the first such collective: every
//! process of both groups calls it) and kept until the intercommunicator is freed. A process
//! sends its blocks to ranks of the other group and receives from them, as MPI's
//! intercommunicator semantics say (each group's result comes from the other); the processes
//! with nothing to do (`MPI_PROC_NULL`) take part with no block. A reduction receives the other
//! group's operands and combines them in their rank order (`MPI_Reduce_local`: the program's
//! operations too).

use crate::consts::*;
use crate::datatypes::{datatype_ref, stageable, MPI_Aint};
use crate::errors::{class_of_failure, inherit_handler};
use crate::exchange::{go, After, Block};
use crate::handles::{comm, CommEntry, COMMS};
use crate::ints;
use p2pmpi::topology::{InterCommunicator, MergeOrder};
use p2pmpi::traits::*;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::os::raw::{c_int, c_void};

/// The carriers of intercommunicators, by MPICH handle: the merged communicator's handle and
/// whether the local group comes first in it.
// Process-wide because a communicator handle is a plain integer any thread may use.
static CARRIERS: Mutex<BTreeMap<c_int, (c_int, bool)>> = Mutex::new(BTreeMap::new());

/// An intercommunicator's carrier.
pub(crate) struct Carrier {
    /// The merged communicator's MPICH handle.
    pub merged: c_int,
    local_first: bool,
    local: usize,
    /// The size of the remote group.
    pub remote: usize,
}

impl Carrier {
    /// This group's number in the carrier: 0 for the group that comes first, 1 for the other.
    pub fn group(&self) -> c_int {
        if self.local_first {
            0
        } else {
            1
        }
    }

    /// The carrier rank of remote rank `r`.
    fn at(&self, r: usize) -> usize {
        if self.local_first {
            self.local + r
        } else {
            r
        }
    }
}

/// The carrier of `c` if it is an intercommunicator (`None` for an intracommunicator); made
/// at the first call (collective over both groups).
pub(crate) fn carrier(c: c_int) -> Result<Option<Carrier>, c_int> {
    let raw = comm(c)?;
    // SAFETY: `raw` names a live communicator; the object only shares it.
    let Some(ic) = (unsafe { InterCommunicator::try_from_raw(raw) }) else { return Ok(None) };
    let (local, remote) = (ic.size() as usize, ic.remote_size() as usize);
    let known = CARRIERS.lock().get(&c).copied();
    let (merged, local_first) = match known {
        Some(k) => k,
        None => {
            let m = ic.try_merge(MergeOrder::Low).map_err(class_of_failure)?;
            let local_first = m.rank() == ic.rank();
            let h = COMMS.insert(CommEntry { raw: m.as_raw(), rust: m });
            inherit_handler(c, h);
            CARRIERS.lock().insert(c, (h, local_first));
            (h, local_first)
        }
    };
    Ok(Some(Carrier { merged, local_first, local, remote }))
}

/// Intercommunicator `c` was freed: its carrier goes too.
pub fn forget(c: c_int) {
    let k = CARRIERS.lock().remove(&c);
    if let Some((h, _)) = k {
        crate::errors::forget_handler(h);
        drop(COMMS.take(h));
    }
}

/// Where a process stands in a rooted collective over an intercommunicator.
enum Role {
    /// `MPI_ROOT`: the root, exchanging with the whole remote group.
    Root,
    /// `MPI_PROC_NULL`: another process of the root's group; nothing to do.
    Idle,
    /// A rank of the remote group: the root is that rank of the other group.
    Leaf(usize),
}

fn role(k: &Carrier, root: c_int) -> Result<Role, c_int> {
    match root {
        MPI_ROOT => Ok(Role::Root),
        MPI_PROC_NULL => Ok(Role::Idle),
        r if (0..k.remote as c_int).contains(&r) => Ok(Role::Leaf(r as usize)),
        _ => Err(MPI_ERR_ROOT),
    }
}

fn extent(dt: c_int) -> Result<isize, c_int> {
    Ok(datatype_ref(dt)?.type_map().extent())
}

fn count(n: impl TryInto<usize>) -> Result<usize, c_int> {
    n.try_into().map_err(|_| MPI_ERR_COUNT)
}

/// The block of `count` elements of `dt` at element `at * count` of `buf`, with remote rank
/// `r`.
fn nth(k: &Carrier, r: usize, buf: *const c_void, at: usize, count: usize, dt: c_int) -> Result<Block, c_int> {
    let displ = extent(dt)?.checked_mul((at * count) as isize).ok_or(MPI_ERR_COUNT)?;
    Ok(Block::at(k.at(r), buf, displ, count, dt))
}

/// `MPI_Bcast` (and `MPI_Ibcast`, with a request) over an intercommunicator.
///
/// # Safety
/// As `MPI_Bcast` says.
pub(crate) unsafe fn bcast(
    k: &Carrier,
    buf: *mut c_void,
    n: impl TryInto<usize>,
    dt: c_int,
    root: c_int,
    request: Option<*mut c_int>,
) -> Result<(), c_int> {
    let n = count(n)?;
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    match role(k, root)? {
        Role::Root => sends = (0..k.remote).map(|r| nth(k, r, buf, 0, n, dt)).collect::<Result<_, _>>()?,
        Role::Idle => {}
        Role::Leaf(r) => recvs.push(nth(k, r, buf, 0, n, dt)?),
    }
    // SAFETY: the caller's contract.
    unsafe { go(k.merged, &sends, recvs, None, request) }
}

/// The blocks of a gathering (`gather`: received at the root, sent by the leaves) or
/// scattering collective: the root's, one per remote rank (`count`, element displacement).
///
/// # Safety
/// As the collective says.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rooted(
    k: &Carrier,
    gather: bool,
    mine: (*const c_void, usize, c_int),
    theirs: (*const c_void, &[(usize, isize)], c_int),
    root: c_int,
    request: Option<*mut c_int>,
) -> Result<(), c_int> {
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    match role(k, root)? {
        Role::Root => {
            let (buf, parts, dt) = theirs;
            let e = extent(dt)?;
            if parts.len() < k.remote {
                return Err(MPI_ERR_ARG);
            }
            for (r, &(n, d)) in parts.iter().take(k.remote).enumerate() {
                let b = Block::at(k.at(r), buf, d.checked_mul(e).ok_or(MPI_ERR_COUNT)?, n, dt);
                if gather {
                    recvs.push(b)
                } else {
                    sends.push(b)
                }
            }
        }
        Role::Idle => {}
        Role::Leaf(r) => {
            let (buf, n, dt) = mine;
            let b = Block::at(k.at(r), buf, 0, n, dt);
            if gather {
                sends.push(b)
            } else {
                recvs.push(b)
            }
        }
    }
    // SAFETY: the caller's contract.
    unsafe { go(k.merged, &sends, recvs, None, request) }
}

/// The root's parts of `MPI_Gather`/`MPI_Scatter`: `count` elements per remote rank, one
/// after another.
pub(crate) fn even(k: &Carrier, root: c_int, n: impl TryInto<usize>) -> Result<Vec<(usize, isize)>, c_int> {
    if root != MPI_ROOT {
        return Ok(Vec::new());
    }
    let n = count(n)?;
    Ok((0..k.remote).map(|r| (n, (r * n) as isize)).collect())
}

/// The root's parts of the v-variants: `counts` and `displs` (`k.remote` of each, read at the
/// root only).
///
/// # Safety
/// The arrays must hold `k.remote` values at the root.
pub(crate) unsafe fn varying<T: Copy + TryInto<c_int>, D: Copy + TryInto<c_int>>(
    k: &Carrier,
    root: Option<c_int>,
    counts: *const T,
    displs: *const D,
) -> Result<Vec<(usize, isize)>, c_int> {
    if root.is_some_and(|r| r != MPI_ROOT) {
        return Ok(Vec::new());
    }
    // SAFETY: the caller's contract.
    let (c, d) = unsafe { (ints(counts, k.remote, true)?, ints(displs, k.remote, false)?) };
    Ok(c.iter().zip(&d).map(|(&c, &d)| (c as usize, d as isize)).collect())
}

/// Every block of `parts` (element displacements of `dt`) at `buf` with each remote rank.
fn each(k: &Carrier, buf: *const c_void, parts: &[(usize, isize)], dt: c_int) -> Result<Vec<Block>, c_int> {
    let e = extent(dt)?;
    parts
        .iter()
        .take(k.remote)
        .enumerate()
        .map(|(r, &(n, d))| Ok(Block::at(k.at(r), buf, d.checked_mul(e).ok_or(MPI_ERR_COUNT)?, n, dt)))
        .collect()
}

/// `MPI_Allgather(v)` and `MPI_Alltoall(v)` over an intercommunicator: `sparts` sent to each
/// remote rank (the same part to all for a gather), `rparts` received from each.
///
/// # Safety
/// As the collective says.
pub(crate) unsafe fn all(
    k: &Carrier,
    send: (*const c_void, &[(usize, isize)], c_int),
    recv: (*mut c_void, &[(usize, isize)], c_int),
    request: Option<*mut c_int>,
) -> Result<(), c_int> {
    crate::not_in_place(send.0)?;
    crate::not_in_place(recv.0)?;
    if send.1.len() < k.remote || recv.1.len() < k.remote {
        return Err(MPI_ERR_ARG);
    }
    let sends = each(k, send.0, send.1, send.2)?;
    let recvs = each(k, recv.0, recv.1, recv.2)?;
    // SAFETY: the caller's contract.
    unsafe { go(k.merged, &sends, recvs, None, request) }
}

/// `MPI_Alltoallw` over an intercommunicator: per remote rank a count, a byte displacement
/// and a datatype on each side.
///
/// # Safety
/// As `MPI_Alltoallw` says.
pub(crate) unsafe fn alltoallw(
    k: &Carrier,
    send: (*const c_void, &[(usize, isize, c_int)]),
    recv: (*mut c_void, &[(usize, isize, c_int)]),
    request: Option<*mut c_int>,
) -> Result<(), c_int> {
    crate::not_in_place(send.0)?;
    crate::not_in_place(recv.0)?;
    let blocks = |buf: *const c_void, parts: &[(usize, isize, c_int)]| -> Result<Vec<Block>, c_int> {
        parts
            .iter()
            .take(k.remote)
            .enumerate()
            .map(|(r, &(n, d, dt))| {
                datatype_ref(dt)?;
                Ok(Block::at(k.at(r), buf, d, n, dt))
            })
            .collect()
    };
    let (sends, recvs) = (blocks(send.0, send.1)?, blocks(recv.0, recv.1)?);
    // SAFETY: the caller's contract.
    unsafe { go(k.merged, &sends, recvs, None, request) }
}

/// A reduction over an intercommunicator: `MPI_Reduce` (`root` given: the root gets the
/// remote group's reduction, its leaves send) or `MPI_Allreduce` (`root` `None`: every
/// process sends to every remote one and gets the remote group's reduction).
///
/// # Safety
/// As the reduction says.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn reduce(
    k: &Carrier,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    n: impl TryInto<usize>,
    dt: c_int,
    op: c_int,
    root: Option<c_int>,
    request: Option<*mut c_int>,
) -> Result<(), c_int> {
    let n = count(n)?;
    let (gets, sends) = match root.map(|r| role(k, r)).transpose()? {
        None => (true, (0..k.remote).collect()),
        Some(Role::Root) => (true, Vec::new()),
        Some(Role::Idle) => (false, Vec::new()),
        Some(Role::Leaf(r)) => (false, vec![r]),
    };
    if !sends.is_empty() {
        crate::not_in_place(sendbuf)?;
    }
    let sends: Vec<Block> = sends.into_iter().map(|r| Block::at(k.at(r), sendbuf, 0, n, dt)).collect();
    let (mut recvs, mut after) = (Vec::new(), None);
    if gets && k.remote > 0 {
        crate::not_in_place(recvbuf)?;
        let size = stageable(dt)?;
        let bytes = n * size;
        let mut scratch = vec![0u64; (bytes * k.remote).div_ceil(8)];
        let base = scratch.as_mut_ptr() as usize;
        for r in 0..k.remote {
            recvs.push(Block { peer: k.at(r), addr: base + r * bytes, count: n, dt });
        }
        let (out, remote) = (recvbuf as usize, k.remote);
        let f: After = Box::new(move || {
            let at = |r: usize| (scratch.as_ptr() as usize + r * bytes) as *mut c_void;
            // The operands in rank order: the last one becomes x(r) op (... op x(last)).
            for r in (0..remote - 1).rev() {
                // SAFETY: two distinct blocks of `n` elements of the scratch buffer.
                let _ = unsafe { crate::user_ops::local_reduction(at(r), at(remote - 1), n as c_int, dt, op) };
            }
            // SAFETY: the program vouched for `n` writable elements at `recvbuf` until the
            // operation completes.
            unsafe { std::ptr::copy_nonoverlapping(at(remote - 1) as *const u8, out as *mut u8, bytes) };
        });
        after = Some(f);
    }
    // SAFETY: the caller's contract.
    unsafe { go(k.merged, &sends, recvs, after, request) }
}

/// `MPI_Barrier`/`MPI_Ibarrier` over an intercommunicator: an exchange of nothing, which
/// completes once every process of both groups started it.
///
/// # Safety
/// `request` as `MPI_Ibarrier` says.
pub(crate) unsafe fn barrier(k: &Carrier, request: Option<*mut c_int>) -> Result<(), c_int> {
    // SAFETY: no buffer is involved.
    unsafe { go(k.merged, &[], Vec::new(), None, request) }
}

/// The parts of `MPI_Alltoallw` (count, byte displacement, datatype per remote rank).
///
/// # Safety
/// The arrays must hold `n` values.
pub(crate) unsafe fn w_parts<C: Copy + TryInto<usize>, D: Copy + TryInto<MPI_Aint>>(
    n: usize,
    counts: *const C,
    displs: *const D,
    types: *const c_int,
) -> Result<Vec<(usize, isize, c_int)>, c_int> {
    if n > 0 && (counts.is_null() || displs.is_null() || types.is_null()) {
        return Err(MPI_ERR_ARG);
    }
    (0..n)
        .map(|i| {
            // SAFETY: `i < n`, within the arrays the caller vouches for.
            let (c, d, t) = unsafe { (*counts.add(i), *displs.add(i), *types.add(i)) };
            let d: MPI_Aint = d.try_into().map_err(|_| MPI_ERR_ARG)?;
            Ok((c.try_into().map_err(|_| MPI_ERR_COUNT)?, d as isize, t))
        })
        .collect()
}

/// A count significant only at some processes (ignored, as 0, where it is negative).
pub(crate) fn lenient(n: impl TryInto<usize>) -> usize {
    n.try_into().unwrap_or(0)
}
