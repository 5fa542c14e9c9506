//! Graph topologies: `MPI_Graph_create`, `MPI_Graphdims_get`, `MPI_Graph_get`,
//! `MPI_Graph_neighbors_count`, `MPI_Graph_neighbors`, `MPI_Graph_map`, and distributed
//! graphs: `MPI_Dist_graph_create_adjacent`, `MPI_Dist_graph_create`,
//! `MPI_Dist_graph_neighbors_count`, `MPI_Dist_graph_neighbors`; `MPI_Topo_test` answers
//! `MPI_GRAPH` and `MPI_DIST_GRAPH` for them ([`crate::topology`]).
//!
//! The new communicator is a duplicate of the old one (`MPI_Graph_create` keeps its first
//! `nnodes` processes), in the same order (`reorder` is not used), with its graph kept in
//! [`crate::topologies`]. `MPI_Dist_graph_create` gathers every process's edges at every
//! process (`MPI_Allgather`, `MPI_Allgatherv`) and keeps those in and out of this one.

use crate::consts::*;
use crate::handles::rust_comm;
use crate::topologies::{self, Topology};
use p2pmpi::traits::Communicator;
use std::os::raw::c_int;

/// `MPI_GRAPH`, `MPI_DIST_GRAPH`.
pub const MPI_GRAPH: c_int = 1;
pub const MPI_DIST_GRAPH: c_int = 3;

/// `n` `int`s at `p` (none for `n` = 0; `MPI_ERR_ARG` for a null array of some).
///
/// # Safety
/// `p` must be valid for `n` reads.
unsafe fn ints(p: *const c_int, n: c_int) -> Result<Vec<c_int>, c_int> {
    if n < 0 {
        return Err(MPI_ERR_ARG);
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(MPI_ERR_ARG);
    }
    // SAFETY: non-null, and the caller vouches for `n` elements.
    Ok(unsafe { std::slice::from_raw_parts(p, n as usize) }.to_vec())
}

/// Whether a weights argument says "no weights".
fn unweighted(w: *const c_int) -> bool {
    std::ptr::eq(w, crate::data::MPI_UNWEIGHTED.addr())
}

/// `n` weights at `w` (`None` for `MPI_UNWEIGHTED`; none for `MPI_WEIGHTS_EMPTY` or `n` = 0).
///
/// # Safety
/// `w` must be one of the markers or valid for `n` reads.
unsafe fn weights(w: *const c_int, n: c_int) -> Result<Option<Vec<c_int>>, c_int> {
    if unweighted(w) {
        return Ok(None);
    }
    if std::ptr::eq(w, crate::data::MPI_WEIGHTS_EMPTY.addr()) || n == 0 {
        return Ok(Some(Vec::new()));
    }
    // SAFETY: the caller's contract.
    unsafe { ints(w, n) }.map(Some)
}

/// The graph of communicator `c` (`MPI_ERR_TOPOLOGY` if it has none of that kind).
fn graph(c: c_int) -> Result<(Vec<c_int>, Vec<c_int>), c_int> {
    rust_comm(c)?;
    match topologies::get(c) {
        Some(Topology::Graph { index, edges }) => Ok((index, edges)),
        _ => Err(MPI_ERR_TOPOLOGY),
    }
}

/// Copies `v` to `out`, at most `max` elements.
///
/// # Safety
/// `out` must be valid for `max` writes (when `max` > 0).
unsafe fn put_ints(v: &[c_int], max: c_int, out: *mut c_int) -> Result<(), c_int> {
    let n = v.len().min(max.max(0) as usize);
    if n > 0 {
        if out.is_null() {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: the caller vouches for `max` >= `n` writable elements.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out, n) };
    }
    Ok(())
}

/// Checks a graph's index and edges on `nnodes` nodes.
fn check_graph(nnodes: c_int, index: &[c_int], edges: &[c_int]) -> Result<(), c_int> {
    if index.windows(2).any(|w| w[1] < w[0]) || index.first().is_some_and(|&i| i < 0) {
        return Err(MPI_ERR_ARG);
    }
    if edges.iter().any(|&e| !(0..nnodes).contains(&e)) {
        return Err(MPI_ERR_RANK);
    }
    Ok(())
}

mpi_fn! {
    /// Makes a communicator of the first `nnodes` processes of `comm_old` with the graph of
    /// `index` and `edges` (the others get `MPI_COMM_NULL`).
    fn MPI_Graph_create(
        comm_old: c_int,
        nnodes: c_int,
        index: *const c_int,
        edges: *const c_int,
        _reorder: c_int,
        comm_graph: *mut c_int,
    ) on comm_old => {
        let rc = rust_comm(comm_old)?;
        if comm_graph.is_null() {
            return Err(MPI_ERR_ARG);
        }
        if !(0..=rc.size()).contains(&nnodes) {
            return Err(MPI_ERR_ARG);
        }
        // SAFETY: the caller vouches for `nnodes` indices and as many edges as the last says.
        let (index, edges) = unsafe {
            let index = ints(index, nnodes)?;
            let edges = ints(edges, index.last().copied().unwrap_or(0))?;
            (index, edges)
        };
        check_graph(nnodes, &index, &edges)?;
        let color = if rc.rank() < nnodes { 0 } else { MPI_UNDEFINED };
        let mut out = MPI_COMM_NULL;
        // SAFETY: `out` is a local.
        crate::ok(unsafe { crate::communicators::MPI_Comm_split(comm_old, color, rc.rank(), &mut out) })?;
        if out != MPI_COMM_NULL {
            topologies::set(out, Topology::Graph { index, edges });
        }
        // SAFETY: checked non-null; the caller vouches it is writable.
        unsafe { comm_graph.write(out) };
        Ok(())
    }
}

mpi_fn! {
    /// The numbers of nodes and edges of `comm`'s graph.
    fn MPI_Graphdims_get(c: c_int, nnodes: *mut c_int, nedges: *mut c_int) on c => {
        let (index, edges) = graph(c)?;
        // SAFETY: the caller's contract.
        unsafe {
            crate::put(nnodes, index.len() as c_int)?;
            crate::put(nedges, edges.len() as c_int)
        }
    }
}

mpi_fn! {
    /// `comm`'s graph: at most `maxindex` indices and `maxedges` edges.
    fn MPI_Graph_get(c: c_int, maxindex: c_int, maxedges: c_int, index: *mut c_int, edges: *mut c_int) on c => {
        let (i, e) = graph(c)?;
        // SAFETY: the caller vouches for the arrays.
        unsafe {
            put_ints(&i, maxindex, index)?;
            put_ints(&e, maxedges, edges)
        }
    }
}

/// The neighbours of `rank` in `comm`'s graph.
fn neighbours(c: c_int, rank: c_int) -> Result<Vec<c_int>, c_int> {
    let (index, edges) = graph(c)?;
    if !(0..index.len() as c_int).contains(&rank) {
        return Err(MPI_ERR_RANK);
    }
    let r = rank as usize;
    let from = if r == 0 { 0 } else { index[r - 1] as usize };
    Ok(edges[from..index[r] as usize].to_vec())
}

mpi_fn! {
    /// The number of neighbours of `rank` in `comm`'s graph.
    fn MPI_Graph_neighbors_count(c: c_int, rank: c_int, nneighbors: *mut c_int) on c => {
        let n = neighbours(c, rank)?.len() as c_int;
        // SAFETY: the caller's contract.
        unsafe { crate::put(nneighbors, n) }
    }
}

mpi_fn! {
    /// The neighbours of `rank` in `comm`'s graph (at most `maxneighbors`).
    fn MPI_Graph_neighbors(c: c_int, rank: c_int, maxneighbors: c_int, out: *mut c_int) on c => {
        let v = neighbours(c, rank)?;
        // SAFETY: the caller vouches for the array.
        unsafe { put_ints(&v, maxneighbors, out) }
    }
}

mpi_fn! {
    /// The rank this process would have in a graph of `nnodes` nodes made from `comm`: its
    /// own (no reordering), or `MPI_UNDEFINED` beyond the graph.
    fn MPI_Graph_map(c: c_int, nnodes: c_int, _index: *const c_int, _edges: *const c_int, newrank: *mut c_int)
        on c => {
        let rc = rust_comm(c)?;
        if !(0..=rc.size()).contains(&nnodes) {
            return Err(MPI_ERR_ARG);
        }
        let r = if rc.rank() < nnodes { rc.rank() } else { MPI_UNDEFINED };
        // SAFETY: the caller's contract.
        unsafe { crate::put(newrank, r) }
    }
}

/// A duplicate of `comm_old` with distributed graph `t`, written at `out`.
///
/// # Safety
/// `out` must be valid for a write.
unsafe fn dist_comm(comm_old: c_int, t: Topology, out: *mut c_int) -> Result<(), c_int> {
    if out.is_null() {
        return Err(MPI_ERR_ARG);
    }
    let mut d = MPI_COMM_NULL;
    // SAFETY: `d` is a local.
    crate::ok(unsafe { crate::communicators::MPI_Comm_dup(comm_old, &mut d) })?;
    topologies::set(d, t);
    // SAFETY: the caller's contract.
    unsafe { out.write(d) };
    Ok(())
}

/// Checks neighbours' ranks against the size of `comm_old`.
fn check_ranks(n: c_int, ranks: &[c_int]) -> Result<(), c_int> {
    if ranks.iter().any(|&r| !(0..n).contains(&r)) {
        return Err(MPI_ERR_RANK);
    }
    Ok(())
}

mpi_fn! {
    /// Makes a duplicate of `comm_old` where this process has the given in and out
    /// neighbours (with weights, or `MPI_UNWEIGHTED`).
    fn MPI_Dist_graph_create_adjacent(
        comm_old: c_int,
        indegree: c_int,
        sources: *const c_int,
        sourceweights: *const c_int,
        outdegree: c_int,
        destinations: *const c_int,
        destweights: *const c_int,
        _info: c_int,
        _reorder: c_int,
        comm_dist_graph: *mut c_int,
    ) on comm_old => {
        let n = rust_comm(comm_old)?.size();
        // SAFETY: the caller vouches for the arrays.
        let t = unsafe {
            Topology::Dist {
                sources: ints(sources, indegree)?,
                sweights: weights(sourceweights, indegree)?,
                dests: ints(destinations, outdegree)?,
                dweights: weights(destweights, outdegree)?,
            }
        };
        if let Topology::Dist { sources, dests, .. } = &t {
            check_ranks(n, sources)?;
            check_ranks(n, dests)?;
        }
        // SAFETY: the caller's contract.
        unsafe { dist_comm(comm_old, t, comm_dist_graph) }
    }
}

mpi_fn! {
    /// Makes a duplicate of `comm_old` with the graph every process gives part of: edges
    /// from each of its `n` `sources[i]` to `degrees[i]` destinations (with weights, or
    /// `MPI_UNWEIGHTED`).
    fn MPI_Dist_graph_create(
        comm_old: c_int,
        n: c_int,
        sources: *const c_int,
        degrees: *const c_int,
        destinations: *const c_int,
        weights_in: *const c_int,
        _info: c_int,
        _reorder: c_int,
        comm_dist_graph: *mut c_int,
    ) on comm_old => {
        let rc = rust_comm(comm_old)?;
        let (me, size) = (rc.rank(), rc.size());
        // SAFETY: the caller vouches for the arrays.
        let (srcs, degs) = unsafe { (ints(sources, n)?, ints(degrees, n)?) };
        if degs.iter().any(|&d| d < 0) {
            return Err(MPI_ERR_ARG);
        }
        let total: c_int = degs.iter().sum();
        // SAFETY: as above.
        let (dsts, ws) = unsafe { (ints(destinations, total)?, weights(weights_in, total)?) };
        check_ranks(size, &srcs)?;
        check_ranks(size, &dsts)?;
        let is_weighted = (ws.is_some() as c_int, 0);
        // This process's edges as (source, destination, weight) triples.
        let mut mine = Vec::with_capacity(3 * total as usize);
        let mut k = 0usize;
        for (s, d) in srcs.iter().zip(&degs) {
            for _ in 0..*d {
                let w = ws.as_ref().map_or(1, |w| w.get(k).copied().unwrap_or(1));
                mine.extend_from_slice(&[*s, dsts[k], w]);
                k += 1;
            }
        }
        let all = gather_edges(comm_old, &mine, size as usize)?;
        let (mut sources, mut sw, mut dests, mut dw) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for e in all.chunks_exact(3) {
            if e[1] == me {
                sources.push(e[0]);
                sw.push(e[2]);
            }
            if e[0] == me {
                dests.push(e[1]);
                dw.push(e[2]);
            }
        }
        // Weighted if any process gave weights (MPI asks all to agree).
        let mut any = 0;
        // SAFETY: locals.
        crate::ok(unsafe {
            crate::collective::MPI_Allreduce(
                &is_weighted.0 as *const c_int as *const _,
                &mut any as *mut c_int as *mut _,
                1,
                crate::datatypes::values::MPI_INT,
                crate::ops::values::MPI_MAX,
                comm_old,
            )
        })?;
        let w = any != 0;
        let t = Topology::Dist { sources, sweights: w.then_some(sw), dests, dweights: w.then_some(dw) };
        // SAFETY: the caller's contract.
        unsafe { dist_comm(comm_old, t, comm_dist_graph) }
    }
}

/// Every process's edge triples, gathered at every process of `comm`.
fn gather_edges(comm: c_int, mine: &[c_int], size: usize) -> Result<Vec<c_int>, c_int> {
    let int = crate::datatypes::values::MPI_INT;
    let count = mine.len() as c_int;
    let mut counts = vec![0 as c_int; size];
    // SAFETY: locals of the right sizes.
    crate::ok(unsafe {
        crate::collective::MPI_Allgather(
            &count as *const c_int as *const _,
            1,
            int,
            counts.as_mut_ptr() as *mut _,
            1,
            int,
            comm,
        )
    })?;
    let displs: Vec<c_int> = counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect();
    let mut all = vec![0 as c_int; counts.iter().sum::<c_int>() as usize];
    // SAFETY: locals of the right sizes (a null buffer of no elements is allowed).
    crate::ok(unsafe {
        crate::varcount::MPI_Allgatherv(
            crate::nz(mine.as_ptr() as *const _, count),
            count,
            int,
            crate::nz_mut(all.as_mut_ptr() as *mut _, all.len() as c_int),
            counts.as_ptr(),
            displs.as_ptr(),
            int,
            comm,
        )
    })?;
    Ok(all)
}

/// A distributed graph's sources, their weights, destinations, their weights.
type Neighbours = (Vec<c_int>, Option<Vec<c_int>>, Vec<c_int>, Option<Vec<c_int>>);

/// The distributed graph of communicator `c`.
fn dist(c: c_int) -> Result<Neighbours, c_int> {
    rust_comm(c)?;
    match topologies::get(c) {
        Some(Topology::Dist { sources, sweights, dests, dweights }) => Ok((sources, sweights, dests, dweights)),
        _ => Err(MPI_ERR_TOPOLOGY),
    }
}

mpi_fn! {
    /// The numbers of in and out neighbours of this process, and whether the graph has
    /// weights.
    fn MPI_Dist_graph_neighbors_count(c: c_int, indegree: *mut c_int, outdegree: *mut c_int, weighted: *mut c_int)
        on c => {
        let (s, sw, d, _) = dist(c)?;
        // SAFETY: the caller's contract.
        unsafe {
            crate::put(indegree, s.len() as c_int)?;
            crate::put(outdegree, d.len() as c_int)?;
            crate::put(weighted, sw.is_some() as c_int)
        }
    }
}

mpi_fn! {
    /// The in and out neighbours of this process (at most `maxindegree` and
    /// `maxoutdegree`), with their weights unless an argument is `MPI_UNWEIGHTED`.
    fn MPI_Dist_graph_neighbors(
        c: c_int,
        maxindegree: c_int,
        sources: *mut c_int,
        sourceweights: *mut c_int,
        maxoutdegree: c_int,
        destinations: *mut c_int,
        destweights: *mut c_int,
    ) on c => {
        let (s, sw, d, dw) = dist(c)?;
        // SAFETY: the caller vouches for the arrays.
        unsafe {
            put_ints(&s, maxindegree, sources)?;
            put_ints(&d, maxoutdegree, destinations)?;
            if let (Some(w), false) = (sw, unweighted(sourceweights)) {
                put_ints(&w, maxindegree, sourceweights)?;
            }
            if let (Some(w), false) = (dw, unweighted(destweights)) {
                put_ints(&w, maxoutdegree, destweights)?;
            }
        }
        Ok(())
    }
}
