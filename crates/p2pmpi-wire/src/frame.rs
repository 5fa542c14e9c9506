//! Data-plane frames: a fixed header followed by `len` payload bytes.
//!
//! Layout (little endian), 40 bytes:
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0  | 4 | magic `P2PM` |
//! | 4  | 1 | version |
//! | 5  | 1 | kind ([`FrameKind`]) |
//! | 6  | 2 | flags |
//! | 8  | 4 | communicator id |
//! | 12 | 4 | source rank |
//! | 16 | 4 | destination rank |
//! | 20 | 4 | tag |
//! | 24 | 8 | sequence count (the MID's *count*) |
//! | 32 | 8 | payload length (for `ReadyToSend`: the announced message size) |

use thiserror::Error;

/// `b"P2PM"` read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"P2PM");
/// Version of the data-plane protocol (2: connections open with a challenge-response on the
/// job key).
pub const VERSION: u8 = 2;
/// Size of an encoded [`Header`].
pub const HEADER_LEN: usize = 40;
/// Payload of a `Hello` frame: the connector's nonce.
pub const HELLO_LEN: u64 = crate::auth::NONCE_LEN as u64;
/// Payload of a `Challenge` frame: the acceptor's nonce and proof.
pub const CHALLENGE_LEN: u64 = (crate::auth::NONCE_LEN + crate::auth::PROOF_LEN) as u64;
/// Payload of an `Auth` frame: the connector's proof.
pub const AUTH_LEN: u64 = crate::auth::PROOF_LEN as u64;

/// The message identifier of the seeds (thesis §4.3.2): which communicator, from which rank
/// to which rank, with which tag, and how many messages with the same (communicator, source,
/// destination, tag) were sent before it. It is computed locally by the sender and is the key
/// that orders messages and, under replication, detects duplicates.
///
/// One type for the whole code base: the protocol cores' [`p2pmpi_core::replication::MsgId`].
pub use p2pmpi_core::replication::MsgId as Mid;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// First frame on a connection: the connecting process names itself. `mid.src` is its
    /// slot, `mid.dst` the slot it connects to, the payload its nonce ([`HELLO_LEN`] bytes;
    /// see [`crate::auth`]).
    Hello = 1,
    /// A complete small message (eager protocol).
    Eager = 2,
    /// Rendez-vous step 1 (READY_TO_SEND): a message of `len` bytes is waiting.
    ReadyToSend = 3,
    /// Rendez-vous step 2 (READY_TO_RECV): the receiver matched the message; send the data.
    ReadyToRecv = 4,
    /// Rendez-vous step 3: the data of a message announced by `ReadyToSend`.
    Data = 5,
    /// The sender finalized: it will send nothing more on this connection.
    Bye = 6,
    /// Replication (thesis §4.3.2): the master of the sender's rank tells one of its replicas
    /// that the message `mid` was transmitted to every alive replica of its destination.
    Commit = 7,
    /// Replication: the master of this process's rank tells one of its replicas the outcome of
    /// a non-deterministic choice. `mid.seq` is the choice point's number, `mid.comm` the
    /// communicator; `mid.src`, `mid.tag` and `len` are the chosen message's source, tag and
    /// sequence, with `flags` [`flags::NOTHING`] when nothing was chosen (no payload).
    Choice = 8,
    /// The accepting process's answer to a `Hello`: `mid.src` is its slot, `mid.dst` the
    /// connector's, the payload its nonce and its proof ([`CHALLENGE_LEN`] bytes).
    Challenge = 9,
    /// The connecting process's proof, which ends the opening ([`AUTH_LEN`] bytes).
    Auth = 10,
}

impl FrameKind {
    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Hello,
            2 => Self::Eager,
            3 => Self::ReadyToSend,
            4 => Self::ReadyToRecv,
            5 => Self::Data,
            6 => Self::Bye,
            7 => Self::Commit,
            8 => Self::Choice,
            9 => Self::Challenge,
            10 => Self::Auth,
            _ => return None,
        })
    }
}

/// Why a frame was rejected.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WireError {
    #[error("bad magic number {0:#010x} (not a p2pmpi data connection)")]
    BadMagic(u32),
    #[error("unsupported protocol version {0} (this build speaks {VERSION})")]
    BadVersion(u8),
    #[error("unknown frame kind {0}")]
    BadKind(u8),
    #[error("{kind:?} frame announces {len} payload bytes, more than the {max} allowed")]
    TooLong { kind: FrameKind, len: u64, max: u64 },
    #[error("{kind:?} frame must have no payload, has {len} bytes")]
    UnexpectedPayload { kind: FrameKind, len: u64 },
    #[error("rank field {0} out of range")]
    BadRank(u32),
    #[error("{kind:?} frame of {len} payload bytes, must be {want}")]
    BadLength { kind: FrameKind, len: u64, want: u64 },
}

/// Flags of a frame header.
pub mod flags {
    /// Set on `ReadyToSend` frames of synchronous sends (informational).
    pub const SYNCHRONOUS: u16 = 1;
    /// On `Choice` frames: the master's choice found nothing (an immediate probe, a test).
    pub const NOTHING: u16 = 2;
    /// On `Choice` frames: a replica acknowledges choice point `seq`.
    pub const ACK: u16 = 4;
    /// On `Choice` frames: a new master asks a replica for every outcome it knows.
    pub const QUERY: u16 = 8;
    /// On `Choice` frames: the end of the answer to a query.
    pub const TOLD: u16 = 16;
    /// On `ReadyToRecv` frames of a replicated job: the receiver matched a rendez-vous
    /// announcement and pulls the data (without a flag: it acknowledges a synchronous eager
    /// message).
    pub const PULL: u16 = 32;
    /// On `ReadyToRecv` frames of a replicated job: the receiver has the whole message.
    pub const HAVE: u16 = 64;
    /// On `Hello`: the connector, on the same host, created a shared-memory segment for the
    /// connection. On `Challenge`: the acceptor mapped it; every frame after the opening
    /// goes through it.
    pub const SHM: u16 = 128;
    /// On `ReadyToSend` (same host, shared memory): the receiver copies the data straight
    /// from the sender's memory (`process_vm_readv`); a payload of [`SINGLE_COPY_LEN`]
    /// bytes follows (the data's address, a ticket's address, the ticket's value). On
    /// `ReadyToRecv`: the receiver is done with the sender's buffer (the send completes).
    pub const SINGLE_COPY: u16 = 256;
    /// On `Commit` frames: when the master wrote the commit, every alive destination
    /// replica's kernel had acknowledged everything the master had written to it (its
    /// replicas keep no copy of the message for a takeover).
    pub const ACKED: u16 = 512;
    /// On `Data` frames between replicas of one rank (a fault-aware replicated job): the
    /// master's copy of message `mid` of another rank, lost whole, for a replica that lacks
    /// it (`len` bytes follow, whatever the size).
    pub const RELAY: u16 = 1024;
}

/// Payload bytes of a `ReadyToSend` frame with the [`flags::SINGLE_COPY`] flag.
pub const SINGLE_COPY_LEN: u64 = 24;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: FrameKind,
    pub flags: u16,
    pub mid: Mid,
    /// Payload bytes following the header (for `ReadyToSend`: the announced message size,
    /// no payload follows).
    pub len: u64,
}

impl Header {
    pub fn new(kind: FrameKind, mid: Mid, len: u64) -> Self {
        Header { kind, flags: 0, mid, len }
    }

    /// Payload bytes that follow this header on the wire.
    pub fn payload_len(&self) -> u64 {
        match self.kind {
            FrameKind::ReadyToSend if self.flags & flags::SINGLE_COPY != 0 => SINGLE_COPY_LEN,
            FrameKind::ReadyToSend
            | FrameKind::ReadyToRecv
            | FrameKind::Bye
            | FrameKind::Commit
            | FrameKind::Choice => 0,
            _ => self.len,
        }
    }

    /// Encodes into exactly [`HEADER_LEN`] bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = VERSION;
        b[5] = self.kind as u8;
        b[6..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..12].copy_from_slice(&self.mid.comm.to_le_bytes());
        b[12..16].copy_from_slice(&self.mid.src.to_le_bytes());
        b[16..20].copy_from_slice(&self.mid.dst.to_le_bytes());
        b[20..24].copy_from_slice(&self.mid.tag.to_le_bytes());
        b[24..32].copy_from_slice(&self.mid.seq.to_le_bytes());
        b[32..40].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Decodes and validates a header. `max_eager` is the largest payload an `Eager` frame may
    /// carry; `Data` frames are validated by the receiver against the announced rendez-vous.
    pub fn decode(b: &[u8; HEADER_LEN], max_eager: u64) -> Result<Header, WireError> {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        if b[4] != VERSION {
            return Err(WireError::BadVersion(b[4]));
        }
        let kind = FrameKind::from_u8(b[5]).ok_or(WireError::BadKind(b[5]))?;
        let flags = u16::from_le_bytes([b[6], b[7]]);
        let mid = Mid { comm: u32_at(8), src: u32_at(12), dst: u32_at(16), tag: u32_at(20) as i32, seq: u64_at(24) };
        for r in [mid.src, mid.dst] {
            if r > i32::MAX as u32 {
                return Err(WireError::BadRank(r));
            }
        }
        let len = u64_at(32);
        let h = Header { kind, flags, mid, len };
        match kind {
            FrameKind::Hello if len != HELLO_LEN => Err(WireError::BadLength { kind, len, want: HELLO_LEN }),
            FrameKind::Challenge if len != CHALLENGE_LEN => {
                Err(WireError::BadLength { kind, len, want: CHALLENGE_LEN })
            }
            FrameKind::Auth if len != AUTH_LEN => Err(WireError::BadLength { kind, len, want: AUTH_LEN }),
            FrameKind::Eager if len > max_eager => Err(WireError::TooLong { kind, len, max: max_eager }),
            FrameKind::ReadyToRecv | FrameKind::Bye | FrameKind::Commit if len != 0 => {
                Err(WireError::UnexpectedPayload { kind, len })
            }
            _ => Ok(h),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn roundtrip() {
        let mid = Mid { comm: 3, src: 1, dst: 7, tag: -5, seq: 1 << 40 };
        let h = Header { kind: FrameKind::Eager, flags: 1, mid, len: 42 };
        assert_eq!(Header::decode(&h.encode(), 1 << 17).unwrap(), h);
    }

    #[test]
    fn rejects_bad_magic_version_kind_and_sizes() {
        let h = Header::new(FrameKind::Eager, Mid::default(), 10);
        let mut b = h.encode();
        b[0] ^= 1;
        assert!(matches!(Header::decode(&b, 100), Err(WireError::BadMagic(_))));
        let mut b = h.encode();
        b[4] = 9;
        assert_eq!(Header::decode(&b, 100), Err(WireError::BadVersion(9)));
        let mut b = h.encode();
        b[5] = 200;
        assert_eq!(Header::decode(&b, 100), Err(WireError::BadKind(200)));
        let big = Header::new(FrameKind::Eager, Mid::default(), 101).encode();
        assert!(matches!(Header::decode(&big, 100), Err(WireError::TooLong { .. })));
        let hello = Header::new(FrameKind::Hello, Mid::default(), 1 << 20).encode();
        assert!(matches!(Header::decode(&hello, 100), Err(WireError::BadLength { .. })));
        for (kind, want) in
            [(FrameKind::Hello, HELLO_LEN), (FrameKind::Challenge, CHALLENGE_LEN), (FrameKind::Auth, AUTH_LEN)]
        {
            assert!(Header::decode(&Header::new(kind, Mid::default(), want).encode(), 100).is_ok());
            for len in [0, want - 1, want + 1] {
                let b = Header::new(kind, Mid::default(), len).encode();
                assert!(matches!(Header::decode(&b, 100), Err(WireError::BadLength { .. })), "{kind:?} {len}");
            }
        }
        let bye = Header::new(FrameKind::Bye, Mid::default(), 1).encode();
        assert!(matches!(Header::decode(&bye, 100), Err(WireError::UnexpectedPayload { .. })));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::array::uniform32(any::<u8>()), tail in any::<[u8; 8]>()) {
            let mut b = [0u8; HEADER_LEN];
            b[..32].copy_from_slice(&bytes);
            b[32..].copy_from_slice(&tail);
            let _ = Header::decode(&b, 1 << 17);
        }

        #[test]
        fn encode_decode_roundtrip(comm in any::<u32>(), src in 0u32..=i32::MAX as u32,
                                   dst in 0u32..=i32::MAX as u32, tag in any::<i32>(),
                                   seq in any::<u64>(), len in 0u64..=1 << 17) {
            let h = Header::new(FrameKind::Eager, Mid { comm, src, dst, tag, seq }, len);
            prop_assert_eq!(Header::decode(&h.encode(), 1 << 17).unwrap(), h);
        }
    }
}
