//! MPICH's `MPI_Status`: the received size in bytes in `count_lo` and the low 31 bits of
//! `count_hi_and_cancelled` (its bit 0 is the cancelled flag), then the public fields.

use crate::consts::{MPI_STATUS_IGNORE, MPI_UNDEFINED};
use p2pmpi::ffi;
use std::os::raw::c_int;

/// MPICH's `MPI_Status`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MPI_Status {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub MPI_SOURCE: c_int,
    pub MPI_TAG: c_int,
    pub MPI_ERROR: c_int,
}

impl MPI_Status {
    /// The status of a completion: `bytes` received from `source` with `tag`.
    pub fn new(bytes: u64, cancelled: bool, source: c_int, tag: c_int, error: c_int) -> MPI_Status {
        MPI_Status {
            count_lo: bytes as u32 as c_int,
            count_hi_and_cancelled: (((bytes >> 32) as u32 & 0x7fff_ffff) << 1) as c_int | cancelled as c_int,
            MPI_SOURCE: source,
            MPI_TAG: tag,
            MPI_ERROR: error,
        }
    }

    /// The number of bytes received.
    pub fn bytes(&self) -> u64 {
        (self.count_lo as u32 as u64) | (((self.count_hi_and_cancelled as u32 >> 1) as u64) << 32)
    }

    /// Whether the operation was cancelled.
    pub fn cancelled(&self) -> bool {
        self.count_hi_and_cancelled & 1 != 0
    }

    /// The number of whole elements of `size` bytes received (`MPI_UNDEFINED` if not whole
    /// or too many for an `int`).
    pub fn count(&self, size: usize) -> c_int {
        let bytes = self.bytes();
        match size as u64 {
            0 if bytes == 0 => 0,
            0 => MPI_UNDEFINED,
            s if bytes % s != 0 => MPI_UNDEFINED,
            s => c_int::try_from(bytes / s).unwrap_or(MPI_UNDEFINED),
        }
    }
}

impl From<&ffi::MPI_Status> for MPI_Status {
    fn from(s: &ffi::MPI_Status) -> MPI_Status {
        MPI_Status::new(s.byte_count(), s.is_cancelled(), s.MPI_SOURCE, s.MPI_TAG, s.MPI_ERROR)
    }
}

/// Whether a status argument asks for a status (neither null nor `MPI_STATUS_IGNORE`).
pub fn wanted(p: *mut MPI_Status) -> bool {
    !p.is_null() && p as usize != MPI_STATUS_IGNORE
}

/// Writes the status `s` converted at `out` unless `out` ignores it.
///
/// # Safety
/// `out` must be null, `MPI_STATUS_IGNORE`, or valid for a write.
pub unsafe fn put(out: *mut MPI_Status, s: &ffi::MPI_Status) {
    if wanted(out) {
        // SAFETY: a real pointer, which the caller vouches is writable.
        unsafe { out.write(MPI_Status::from(s)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_above_two_gigabytes_and_the_cancelled_flag_round_trip() {
        for bytes in [0u64, 1, 0x7fff_ffff, 0xffff_ffff, 0x1_0000_0001, (1 << 62) + 5] {
            for c in [false, true] {
                let s = MPI_Status::new(bytes, c, 3, 7, 0);
                assert_eq!((s.bytes(), s.cancelled()), (bytes, c), "{bytes}");
            }
        }
        assert_eq!(std::mem::size_of::<MPI_Status>(), 20);
    }

    #[test]
    fn counts_are_whole_elements_or_undefined() {
        let s = MPI_Status::new(12, false, 0, 0, 0);
        assert_eq!(s.count(4), 3);
        assert_eq!(s.count(8), MPI_UNDEFINED);
        assert_eq!(s.count(1), 12);
        assert_eq!(MPI_Status::new(0, false, 0, 0, 0).count(0), 0);
        assert_eq!(MPI_Status::new(1 << 40, false, 0, 0, 0).count(1), MPI_UNDEFINED);
    }
}
