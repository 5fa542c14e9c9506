//! # p2pmpi-peer — the grid's daemons
//!
//! * [`config`]: the `P2P-MPI.conf` file (thesis appendix C.1).
//! * [`supernode`]: the bootstrap service keeping the host list (SPEC §2).
//! * [`mpd`]: the peer daemon — MPD (membership, cached host list, latency, reservation
//!   coordination, launch), hosting the [`rs`] (reservation) and [`ft`] (file transfer)
//!   services.

pub mod config;
pub mod ft;
pub mod home;
pub mod mpd;
pub mod server;
pub mod supernode;
