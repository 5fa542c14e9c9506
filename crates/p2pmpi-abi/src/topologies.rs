//! The graph and distributed graph topologies of communicators (the library has none): kept
//! here, by MPICH handle, by [`crate::graph`]; forgotten when the communicator is freed,
//! copied when it is duplicated ([`crate::communicators`]).

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::os::raw::c_int;

/// A communicator's graph.
#[derive(Clone, Debug)]
pub enum Topology {
    /// `MPI_Graph_create`'s: the index and edges of every node.
    Graph { index: Vec<c_int>, edges: Vec<c_int> },
    /// `MPI_Dist_graph_create(_adjacent)`'s: this process's neighbours (weights if given).
    Dist { sources: Vec<c_int>, sweights: Option<Vec<c_int>>, dests: Vec<c_int>, dweights: Option<Vec<c_int>> },
}

/// The graphs of communicators.
// Process-wide because a communicator handle is a plain integer any thread may use.
static TOPOLOGIES: Mutex<BTreeMap<c_int, Topology>> = Mutex::new(BTreeMap::new());

/// Gives communicator `c` graph `t`.
pub fn set(c: c_int, t: Topology) {
    TOPOLOGIES.lock().insert(c, t);
}

/// The graph of communicator `c`, if it has one.
pub fn get(c: c_int) -> Option<Topology> {
    TOPOLOGIES.lock().get(&c).cloned()
}

/// Communicator `c` was freed.
pub fn forget(c: c_int) {
    TOPOLOGIES.lock().remove(&c);
}

/// Communicator `new` is a duplicate of `old`: it gets its graph.
pub fn copy(old: c_int, new: c_int) {
    if let Some(t) = get(old) {
        set(new, t);
    }
}
