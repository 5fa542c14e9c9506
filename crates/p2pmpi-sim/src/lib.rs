//! # p2pmpi-sim — a discrete-event simulator for the failure detector
//!
//! Drives the very state machines of [`p2pmpi_core::fd`] (BRR, DBRR, round-robin, random
//! gossip; suspicion, ping confirmation, FM equation 4) with virtual time and a simulated
//! network, and reproduces the seeds' figures: detection time vs n (chapter figure 13),
//! the detector's own failure probability (chapter figure 12, FM figure 4), and the false
//! positive rate under random delays.
//!
//! ## Design
//!
//! * **Virtual time and one event queue** ([`sim::Sim`]). Time is a [`Duration`] since the
//!   start of the run. A binary heap holds four kinds of items: a detector's *start*, a
//!   *timer* (the wake-up time [`Machine::poll_timeout`] asks for), a message *delivery* and
//!   a *crash*; ties are broken by insertion order, so a run is a pure function of its
//!   configuration and seed. Every core is driven through [`Machine`], as the real drivers
//!   do. After a detector handles a timer or a message, the simulator drains `poll_output`
//!   (each transmit becomes a delivery item, each event is recorded with its time and
//!   observer) and re-arms the timer. A node has at most
//!   one live timer: an earlier deadline pushes a new item and older items are recognised as
//!   stale when they pop, so the queue never holds more than about one timer and the
//!   in-flight messages per process.
//! * **Network** ([`net::NetConfig`]): delay = base + jitter drawn from a seeded generator
//!   (none, uniform, exponential, Pareto or log-normal; capped, 120 s by default), optional
//!   loss, and by default per-link FIFO delivery as TCP gives (a message never overtakes an
//!   earlier one on the same link, so a long delay holds back the messages behind it).
//! * **Crashes** ([`sim::Sim::crash_at`], any number, at any times): a crashed process
//!   handles nothing more; messages addressed to it are dropped, so its pings go unanswered;
//!   messages it sent before crashing are still delivered. Every event a detector reports
//!   (`Suspected`, `Refuted`, `Failed`) is recorded with its time and observer; an event about
//!   a process that had not crashed is a *false* suspicion or detection
//!   ([`sim::Sim::false_events`]).
//! * **Start-up** ([`sim::StartMode`]): either every detector at time 0 with counter 0
//!   (the analysis' ideal), or the flat-tree start of FM §5.3 where process `i` gets the
//!   communicator `Δt_i` after the first one, starts its detector a random set-up time later
//!   and takes its initial counters from FM equation 4 ([`Start::adjusted`]); gossip phases
//!   then differ from process to process as on a real grid. The communicator travels with the
//!   base delay only (unless [`NetConfig::communicator_jitter`]): equation 4 counts from its
//!   receipt and cannot see its latency, so a
//!   process whose communicator was held up `D` runs `D/T_gossip` rounds behind for the whole
//!   run (with a heavy-tailed jitter on that message, such a process is suspected again and
//!   again, which is a start-up effect and not what the false-positive experiment measures).
//! * **Cost**. The simulator adds `O(log q)` per event (`q`: queue length, about `n` plus the
//!   messages in flight) and a hash lookup per message (FIFO). It calls
//!   [`Machine::poll_timeout`] (which scans all `n` entries) only after a timer, not after
//!   each delivery: handling a message never brings a detector's deadline forward (it creates
//!   no ping and does not move the gossip period), so the armed timer stays valid; debug
//!   builds assert this on every delivery. Everything else is the protocol's own work: a
//!   gossip message carries the whole table (`n` counters) and every wake-up scans `n`
//!   entries, so one gossip period costs `Θ(n²)` for the `n` processes together, about three
//!   million counter operations per period at n = 1024. A detection run of n = 1024 (20 s of
//!   warm-up plus the detection, about 70 periods, 130 000 events) takes about 1 s in release
//!   on one core, three quarters of it in `poll_timeout`, `handle_timeout` and
//!   `handle_input` of `p2pmpi-core`'s detector. Experiments run their independent trials on all
//!   cores ([`par::par_map`], scoped threads), each with its own seed derived from the
//!   experiment's seed and the trial's coordinates, so results do not depend on the number of
//!   threads.
//! * **Randomness** ([`rng`]): xoshiro256++ seeded by SplitMix64, written here so that a seed
//!   gives the same numbers on every platform and with every dependency version.
//!
//! ## Experiments
//!
//! * [`detection`]: one random process crashes after a warm-up; the time until the first and
//!   the last surviving process confirms it, beside `T_cleanup` (2⌈log2 n⌉·T_gossip for
//!   BRR, 3⌈log2 n⌉·T_gossip for DBRR); false suspicions and detections are counted.
//! * [`reliability`]: the probability that some process loses all its sources, exact for
//!   small n, crude Monte-Carlo as the seeds did it, and a conditional Monte-Carlo estimator
//!   that stays accurate for the tiny probabilities of large n.
//! * [`false_positives`]: no crash, heavy-tailed delays; false suspicions and false
//!   detections per process-hour vs `T_cleanup + T_MAX_HANG`.
//! * [`kmonitor`]: the k-monitor detector (Horita et al.).
//! * [`jobs`]: whole jobs through the launcher's supervisor
//!   ([`p2pmpi_core::supervisor::JobSupervisor`]) under failures — a master or a replica
//!   killed, a rank losing every replica, a freeze past detection, an agreement with a
//!   failure, a spawn — with their outcomes checked.
//! * [`checkpoint`]: jobs with checkpoints under Weibull host failures, through the
//!   launcher's checkpoint coordinator ([`p2pmpi_core::checkpoint::Coordinator`]): the
//!   probability that a job finishes and its expected run time with replication only, with
//!   rebirth at checkpoints, and with rebirth and restarts.
//! * [`verify`]: replicas that check each other (issue 42): the receiving side's digest
//!   verifier ([`p2pmpi_core::replication::verify::Verifier`]) in random schedules where a
//!   replica flips a bit, lies, or lies as master, with random deaths and arrival orders;
//!   no corrupted content may complete a receive unnoticed.
//! * [`jel`]: JEL resource tracking (Drost et al.): the join test over a bandwidth-limited
//!   network for each dissemination strategy of the central registry and for the distributed
//!   implementation, and the traffic of table II.
//!
//! Each experiment prints a table and can write Markdown, CSV and an SVG plot
//! ([`output`], [`plot`]: plotters' SVG backend only, with no font library).
//!
//! [`Duration`]: std::time::Duration
//! [`Machine`]: p2pmpi_core::machine::Machine
//! [`Machine::poll_timeout`]: p2pmpi_core::machine::Machine::poll_timeout
//! [`Start::adjusted`]: p2pmpi_core::fd::Start::adjusted
#![forbid(unsafe_code)]

pub mod agreement;
pub mod checkpoint;
pub mod detection;
pub mod false_positives;
pub mod jel;
pub mod jobs;
pub mod kmonitor;
pub mod net;
pub mod output;
pub mod par;
pub mod plot;
pub mod reliability;
pub mod replicated;
pub mod rng;
pub mod sim;
pub mod table;
pub mod verify;

pub use net::{Jitter, NetConfig};
pub use sim::{FalseEvents, NetStats, Record, Sim, SimConfig, StartMode};
