//! Errors of the library, and the fatal-error path that names the rank and the cause.

use thiserror::Error;

/// Something that went wrong in a communication. The plain rsmpi-style calls stop the process
/// with this error's message (naming the rank); the `try_*` variants return it.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The matched message does not fit in the receive buffer (MPI_ERR_TRUNCATE).
    #[error("message truncated: {message_bytes} bytes from rank {from_rank} (tag {tag}) do not fit in a receive buffer of {buffer_bytes} bytes")]
    Truncated { from_rank: i32, tag: i32, message_bytes: u64, buffer_bytes: usize },
    /// A peer process went away without finalizing.
    #[error("lost rank {rank}: {cause}")]
    PeerLost { rank: i32, cause: String },
    /// A peer violated the protocol.
    #[error("protocol error with rank {rank}: {detail}")]
    Protocol { rank: i32, detail: String },
    /// A rank outside the communicator was named.
    #[error("rank {rank} is out of range for a communicator of size {size}")]
    InvalidRank { rank: i32, size: i32 },
    /// Start-up failed.
    #[error("start-up failed: {0}")]
    Bootstrap(String),
    /// A received message's size is not a whole number of the expected type.
    #[error("received {bytes} bytes, which is not a whole number of {elem}-byte elements")]
    Count { bytes: u64, elem: usize },
    /// A receive for one value got a message of another size.
    #[error("expected a message of {expected} bytes, received {got} bytes")]
    SizeMismatch { expected: usize, got: u64 },
    /// A serialized (OBJECT) message could not be encoded or decoded.
    #[error("object (de)serialization failed: {0}")]
    Serialization(String),
    /// The buffer attached for buffered sends is too small.
    #[error("buffered send of {needed} bytes exceeds the attached buffer ({free} of {size} bytes free); call Universe::set_buffer_size")]
    BufferExhausted { needed: usize, free: usize, size: usize },
    /// A reduction operation is not defined on the datatype it was given.
    #[error("reduction operation: {0}")]
    Operation(String),
    /// Processes called a collective with mismatched arguments.
    #[error("collective operation: {0}")]
    Collective(String),
    /// An operating-system error.
    #[error("i/o error: {0}")]
    Io(String),
    /// The communicator was revoked by one of its members (`mpi::ulfm::FaultTolerant::revoke`,
    /// ULFM's `MPI_ERR_REVOKED`): its communication fails; agree, shrink and failure
    /// acknowledgement still work on it.
    #[error("the communicator was revoked by a member (only agree, shrink and failure_ack work on it now)")]
    Revoked,
}

/// Result of the fallible (`try_*`) calls.
pub type Result<T> = std::result::Result<T, Error>;

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e.to_string())
    }
}

/// Stops this process because of `err`: prints `p2pmpi: rank R: cause` on standard error,
/// tells the launcher, and exits with status 1 (through [`crate::fatal`]).
pub(crate) fn fatal(err: &Error) -> ! {
    let lost = match err {
        Error::PeerLost { rank, .. } => Some(*rank),
        _ => None,
    };
    crate::fatal::stop(err, lost)
}

/// Unwraps a communication result the way rsmpi's plain calls do: on error, stop the process.
pub(crate) trait OrFatal<T> {
    fn or_fatal(self) -> T;
}

impl<T> OrFatal<T> for Result<T> {
    #[inline]
    fn or_fatal(self) -> T {
        match self {
            Ok(v) => v,
            Err(e) => fatal(&e),
        }
    }
}
