//! # p2pmpi-core — protocol logic without I/O
//!
//! Every protocol of p2pmpi is written here as a deterministic state machine: inputs (an
//! arriving message, a posted receive, later a timer tick or a failure notice) go in, decisions
//! come out, and nothing here touches a socket, a clock or a random generator. The library's
//! TCP device and the daemons are thin drivers around these machines, and tests (and later the
//! simulator) drive the very same code with virtual time.
//!
//! * [`advisor`]: how much replication — Weibull host failures, `P_app(p, r)`, the Amdahl
//!   duration model and the replication degree of least failure probability (SPEC §11).
//! * [`agreement`]: fault-tolerant agreement for fault-aware programs (ULFM's agree and
//!   shrink), decided by the job's supervisor like deaths: contributions and failures in, one
//!   decision out for every survivor.
//! * [`allocation`]: the reservation arithmetic (booking count with overbooking, *slist*,
//!   the feasibility test) and the *spread* / *concentrate* strategies with the rank
//!   distribution that keeps the copies of a rank on different hosts (thesis §3.3–§3.4).
//! * [`checkpoint`]: checkpoints kept on peers — where each rank's piece of a generation is
//!   stored (`K` copies on other hosts, a quota), which generation is complete and which are
//!   deleted, bad copies replaced, replicas reborn at a complete generation, the job restarted
//!   from it when a rank loses every replica; the launchers and the simulator drive it.
//! * [`codec`]: what the cores' binary encodings share — LEB128 integers and the one
//!   [`codec::DecodeError`] of every decoder.
//! * [`fd`]: the failure detector — gossip heartbeats with max-merge, target selection
//!   (random, round-robin, BRR, DBRR), suspicion, ping confirmation, the initial heartbeat
//!   adjustment, and the seeds' reliability analysis (FM §4–§5).
//! * [`fencing`]: deaths decided in one place — the launcher's [`fencing::Supervisor`]
//!   (suspicions in, exclusions and declarations out) and every process's [`fencing::Lease`],
//!   so that a replica frozen past detection, or cut off and reconnected, never disturbs the
//!   live ones.
//! * [`hosts`]: the supernode's *host list* (register, alive signals, expiry) and an MPD's
//!   *cached list* (refresh, RTT ranking, dead hosts, serde persistence) (SPEC §2).
//! * [`kmonitor`]: the self-organizing k-monitor detector (Horita et al., SPEC §13) — monitor
//!   requests, heartbeats to k random monitors, failures flooded on the established connections,
//!   the wide-area extension (clusters by subnet, k connections between clusters, NAT), and an
//!   optional confirmation by a second monitor.
//! * [`machine`]: the one vocabulary every core speaks — an input with its time, a timeout,
//!   outputs to poll, the next deadline ([`machine::Machine`]).
//! * [`matching`]: MPI message matching — the expected (posted) and unexpected queues, the
//!   message identifier (MID) sequence counters, and the per-source high-water marks that are
//!   the compact form of the seeds' *history table* (thesis §4.3.2).
//! * [`replication`]: transparent fault tolerance — the slot layout of replicas, master
//!   election, the backup and log tables and the takeover of algorithm 7 (thesis §4.3).
//! * [`reservation`]: both sides of discovery and reservation — the RS gatekeeper (J, P,
//!   HOST_DENY, tickets that lapse unless claimed) and the submitter's booking with
//!   overbooking, *rlist*, *slist* and the placement decision (thesis §3.3.2, SPEC §4).
//! * [`supervisor`]: the supervision of a job — registrations, ends, suspicions, agreements
//!   and spawns in; the table, declarations, stops, reports and the verdict out — composing
//!   [`fencing`], [`agreement`] and the spawn ledger; the launchers and the simulator drive it.
#![forbid(unsafe_code)]

pub mod advisor;
pub mod agreement;
pub mod allocation;
pub mod checkpoint;
pub mod codec;
pub mod fd;
pub mod fencing;
pub mod hosts;
pub mod jel;
pub mod kmonitor;
pub mod machine;
pub mod matching;
pub mod replication;
pub mod reservation;
pub mod supervisor;
