//! # p2pmpi-cli — the commands
//!
//! * `p2pmpirun -n N PROG [ARGS…]` (also `-np N`) and `p2pmpi run -n N …`: start a job. With no
//!   peer daemon running it runs the N processes on this host ([`launcher`]).
//!
//! The launcher plays, on one host, the part the seeds give the submitter's MPD and the root
//! process: it hands each process its rank, collects the processes' addresses, sends everyone
//! the communicator table (flat tree), forwards standard output and error, and stops the job
//! cleanly when a process dies.

pub mod launcher;
