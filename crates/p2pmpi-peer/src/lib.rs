//! # p2pmpi-peer — the grid's daemons
//!
//! * [`config`]: the `P2P-MPI.conf` file (thesis appendix C.1).
//! * [`supernode`]: the bootstrap service keeping the host list (SPEC §2).
//! * [`mpd`]: the peer daemon — MPD (membership, cached host list, latency, reservation
//!   coordination, launch), hosting the [`rs`] (reservation) and [`ft`] (file transfer)
//!   services.
//! * [`collect`]: which files of a job directory `p2pmpirun --collect` brings back.
//! * [`os`]: the process-level system calls std lacks (signals, session, parent death),
//!   behind safe functions.
//! * [`confine`]: how the processes of other members' jobs are confined (Landlock, limits).
//! * [`elf`], [`ldso`]: what a program's ELF file says, and which libraries the dynamic loader
//!   would give its process (a program of MPICH's ABI must load p2pmpi's `libmpi.so.12`).

// Unsafe code is confined to the modules that make system calls std does not offer.
#![deny(unsafe_code)]

pub mod collect;
#[allow(unsafe_code, reason = "getpwuid_r: the account's home directory")]
pub mod config;
#[allow(unsafe_code, reason = "setrlimit, prctl and Landlock between fork and exec; the kernel's Landlock ABI")]
pub mod confine;
pub mod elf;
pub mod ft;
pub mod home;
pub mod ldso;
pub mod members;
pub mod mpd;
#[allow(unsafe_code, reason = "kill, geteuid, gethostname, setsid and prctl behind safe functions")]
pub mod os;
#[allow(unsafe_code, reason = "listen's backlog, a peek that never blocks, FIONREAD, the descriptor limit")]
pub mod server;
pub mod supernode;
