//! Cartesian topologies (MPI-1's `MPI_Cart_*`), with rsmpi's API: a communicator whose
//! processes are laid out on a grid of `dims`, row-major (the last dimension varies fastest),
//! each dimension periodic or not. Ranks are never reordered: rank r of the Cartesian
//! communicator is rank r of the communicator it was made from.

use super::sealed::AsHandle;
use super::{create, AsCommunicator, CommHandle, Communicator, Rank, SimpleCommunicator, Spec};
use crate::error::OrFatal;
use crate::raw::{AsRaw, FromRaw};
use crate::Count;

/// The layout of a Cartesian communicator, and this process's coordinates in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CartesianLayout {
    /// Number of processes along each dimension.
    pub dims: Vec<Count>,
    /// Whether each dimension wraps around.
    pub periods: Vec<bool>,
    /// This process's coordinates.
    pub coords: Vec<Count>,
}

/// A communicator with a Cartesian layout.
pub struct CartesianCommunicator {
    comm: SimpleCommunicator,
    dims: Vec<Count>,
    periods: Vec<bool>,
}

fn product(dims: &[Count]) -> i64 {
    dims.iter().map(|&d| d as i64).product()
}

/// Checks `create_cartesian_communicator`'s arguments against a communicator of `size`.
fn check_grid(dims: &[Count], periods: &[bool], size: Rank) {
    assert_eq!(dims.len(), periods.len(), "dims and periods must be parallel, equal-sized arrays");
    assert!(dims.iter().all(|&d| d >= 0), "dims must not be negative: {dims:?}");
    assert!(
        product(dims) <= size as i64,
        "a Cartesian grid of {dims:?} needs {} processes, the communicator has {size}",
        product(dims)
    );
}

/// Creates the Cartesian communicator over `parent` (collective): the first `∏ dims` ranks
/// are in it, the others get `None`.
pub(super) fn create_cartesian(parent: &CommHandle, dims: &[Count], periods: &[bool]) -> Option<CartesianCommunicator> {
    check_grid(dims, periods, parent.size());
    let inside = (parent.rank() as i64) < product(dims);
    let color = if inside { 0 } else { super::Color::undefined().0 };
    let comm = create(parent, Spec::Split { color, key: parent.rank() }).or_fatal()?;
    Some(CartesianCommunicator { comm, dims: dims.to_vec(), periods: periods.to_vec() })
}

/// `MPI_Cart_map`: this process's rank in a grid of `dims`, `None` if it is not in it.
pub(super) fn cartesian_map(h: &CommHandle, dims: &[Count], periods: &[bool]) -> Option<Rank> {
    check_grid(dims, periods, h.size());
    ((h.rank() as i64) < product(dims)).then_some(h.rank())
}

impl CartesianCommunicator {
    /// Number of dimensions of the grid.
    pub fn num_dimensions(&self) -> Count {
        self.dims.len() as Count
    }

    /// Writes the layout into the three slices (each `num_dimensions()` long).
    pub fn get_layout_into(&self, dims: &mut [Count], periods: &mut [bool], coords: &mut [Count]) {
        let n = self.dims.len();
        assert_eq!(dims.len(), n, "dims is not the same length as the number of dimensions");
        assert_eq!(periods.len(), n, "periods is not the same length as the number of dimensions");
        assert_eq!(coords.len(), n, "coords is not the same length as the number of dimensions");
        dims.copy_from_slice(&self.dims);
        periods.copy_from_slice(&self.periods);
        self.rank_to_coordinates_into(self.comm.rank(), coords);
    }

    /// The layout and this process's coordinates.
    pub fn get_layout(&self) -> CartesianLayout {
        CartesianLayout {
            dims: self.dims.clone(),
            periods: self.periods.clone(),
            coords: self.rank_to_coordinates(self.comm.rank()),
        }
    }

    /// The rank at `coords`; periodic dimensions wrap, the others must be in range.
    pub fn coordinates_to_rank(&self, coords: &[Count]) -> Rank {
        assert_eq!(coords.len(), self.dims.len(), "coords is not the same length as the number of dimensions");
        let mut r: i64 = 0;
        for ((&c, &d), &p) in coords.iter().zip(&self.dims).zip(&self.periods) {
            let c = if p {
                c.rem_euclid(d.max(1))
            } else {
                assert!(0 <= c && c < d, "coordinate {c} is out of range for a non-periodic dimension of size {d}");
                c
            };
            r = r * d as i64 + c as i64;
        }
        r as Rank
    }

    /// The coordinates of `rank`, into `coords`.
    pub fn rank_to_coordinates_into(&self, rank: Rank, coords: &mut [Count]) {
        assert!(0 <= rank && rank < self.comm.size(), "rank {rank} is out of range (size {})", self.comm.size());
        assert_eq!(coords.len(), self.dims.len(), "coords is not the same length as the number of dimensions");
        let mut r = rank;
        for (c, &d) in coords.iter_mut().zip(&self.dims).rev() {
            *c = r % d;
            r /= d;
        }
    }

    /// The coordinates of `rank`.
    pub fn rank_to_coordinates(&self, rank: Rank) -> Vec<Count> {
        let mut coords = vec![0; self.dims.len()];
        self.rank_to_coordinates_into(rank, &mut coords);
        coords
    }

    /// The ranks `displacement` steps before and after this process along `dimension`
    /// (`MPI_Cart_shift`): (source, destination), `None` past the edge of a non-periodic one.
    pub fn shift(&self, dimension: Count, displacement: Count) -> (Option<Rank>, Option<Rank>) {
        assert!(
            0 <= dimension && (dimension as usize) < self.dims.len(),
            "dimension {dimension} is out of range ({} dimensions)",
            self.dims.len()
        );
        let k = dimension as usize;
        let me = self.rank_to_coordinates(self.comm.rank());
        let at = |delta: Count| -> Option<Rank> {
            let mut c = me.clone();
            let v = c[k] as i64 + delta as i64;
            if !self.periods[k] && (v < 0 || v >= self.dims[k] as i64) {
                return None;
            }
            c[k] = v.rem_euclid(self.dims[k].max(1) as i64) as Count;
            Some(self.coordinates_to_rank(&c))
        };
        (at(-displacement), at(displacement))
    }

    /// The Cartesian communicators of the sub-grids that keep the dimensions marked in
    /// `retain` (`MPI_Cart_sub`, collective): this process's is returned.
    pub fn subgroup(&self, retain: &[bool]) -> CartesianCommunicator {
        assert_eq!(retain.len(), self.dims.len(), "retain is not the same length as the number of dimensions");
        let me = self.rank_to_coordinates(self.comm.rank());
        // Processes that agree on the dropped coordinates share a sub-grid, ordered by the kept ones.
        let (mut color, mut key) = (0i64, 0i64);
        for ((&c, &d), &keep) in me.iter().zip(&self.dims).zip(retain) {
            if keep {
                key = key * d as i64 + c as i64;
            } else {
                color = color * d as i64 + c as i64;
            }
        }
        let comm = create(self.comm.handle(), Spec::Split { color: color as i32, key: key as i32 })
            .or_fatal()
            .expect("every process of the grid is in a sub-grid");
        let keep = |v: &[Count]| v.iter().zip(retain).filter(|(_, &k)| k).map(|(&x, _)| x).collect::<Vec<_>>();
        let periods = self.periods.iter().zip(retain).filter(|(_, &k)| k).map(|(&p, _)| p).collect();
        CartesianCommunicator { comm, dims: keep(&self.dims), periods }
    }
}

impl CartesianCommunicator {
    pub(crate) fn from_parts(comm: SimpleCommunicator, dims: Vec<Count>, periods: Vec<bool>) -> Self {
        CartesianCommunicator { comm, dims, periods }
    }

    /// The Cartesian communicator `raw` names, `None` if it names none (or a communicator
    /// without a Cartesian layout, or `RSMPI_COMM_NULL`).
    ///
    /// # Safety
    /// As for [`FromRaw::from_raw`].
    pub unsafe fn try_from_raw(raw: crate::handles::MPI_Comm) -> Option<CartesianCommunicator> {
        let (h, kind) = super::handles::comm_from_raw(raw, false)?;
        let super::handles::CommKind::Cart { dims, periods } = kind else { return None };
        super::handles::comm_from_raw(raw, true);
        Some(CartesianCommunicator::from_parts(SimpleCommunicator(h), dims, periods))
    }
}

// SAFETY: the handle names this communicator, with its layout, while it lives.
unsafe impl AsRaw for CartesianCommunicator {
    type Raw = crate::handles::MPI_Comm;
    fn as_raw(&self) -> crate::handles::MPI_Comm {
        let kind = super::handles::CommKind::Cart { dims: self.dims.clone(), periods: self.periods.clone() };
        super::handles::comm_to_raw(self.comm.handle(), Some(kind))
    }
}

impl FromRaw for CartesianCommunicator {
    /// The Cartesian communicator `raw` names (see [`SimpleCommunicator::from_raw`] for
    /// ownership).
    ///
    /// # Safety
    /// `raw` must name a live Cartesian communicator (panics otherwise).
    unsafe fn from_raw(raw: crate::handles::MPI_Comm) -> Self {
        // SAFETY: the caller's contract.
        unsafe { Self::try_from_raw(raw) }
            .unwrap_or_else(|| panic!("CartesianCommunicator::from_raw: {raw:?} names no live Cartesian communicator"))
    }
}

impl AsHandle for CartesianCommunicator {
    fn handle(&self) -> &CommHandle {
        self.comm.handle()
    }
}
impl Communicator for CartesianCommunicator {}
impl AsCommunicator for CartesianCommunicator {
    type Out = CartesianCommunicator;
    fn as_communicator(&self) -> &Self {
        self
    }
}
