//! # p2pmpi-wire — the bytes that travel between p2pmpi processes
//!
//! Two protocols live here, both decoded without trusting the peer:
//!
//! * [`frame`]: the **data plane** between MPI processes. Every frame starts with a fixed
//!   40-byte [`frame::Header`] that carries a magic number, a protocol version, the frame kind
//!   and the message identifier ([`Mid`], thesis §4.3: communicator, source, destination,
//!   tag and sequence count). Payload limits are enforced per kind, so an oversized or
//!   malformed frame is an error, never an allocation of attacker-chosen size or a panic.
//! * [`control`]: the **control plane** between a process and whoever launched it (the local
//!   launcher today, the peer daemon's MPD later): registration, the communicator table,
//!   finalization and abort. Messages are length-prefixed `postcard` (serde) records with a
//!   size cap.
//!
//! * [`auth`]: the **per-job key** that authenticates the openings of data and control
//!   connections (a challenge-response) and the failure detector's datagrams (a MAC).
//!
//! * [`secure`] and [`grid`]: the **grid control plane** between supernode, peer daemons
//!   (MPD, RS, FT) and commands: a Noise handshake keyed by the grid secret, then encrypted
//!   records (supernode, reservation, staging and launch requests).
//!
//! * [`identity`]: **member keys and certificates**: each member's key pair, the grid
//!   owner's signature over a member's name, key and roles, and their pure checks.
//!
//! `postcard` was chosen over `bincode` for the control plane because it is actively
//! maintained, compact, `no_std`-friendly and has a stable wire format specification.
#![forbid(unsafe_code)]

pub mod auth;
pub mod control;
pub mod frame;
pub mod grid;
pub mod identity;
pub mod secure;

pub use frame::{FrameKind, Header, Mid, WireError, HEADER_LEN, MAGIC, VERSION};
