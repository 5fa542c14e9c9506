//! A grid job restarted from its checkpoints (issue 41, item 4): when a rank loses every copy
//! (at `-r 1` its process, at `-r R` every replica: killed, frozen past detection, or lost
//! with its host's peer daemon), the launcher stops the survivors (the supervisor does, as for
//! any failure), reserves hosts again through the RS without the hosts that stopped
//! answering, stages the program again and starts every rank from the last complete
//! checkpoint, up to `--max-restarts` times; the output goes on without repeating lines
//! ([`crate::output::Replay`]), and `p2pmpirun --resume DIR` restarts a grid job whose
//! launcher died, as it does a local one.
//!
//! Whether and from where to restart is decided by the core's checkpoint coordinator
//! ([`p2pmpi_core::checkpoint::Coordinator`], which the simulator runs too): this driver tells
//! it the processes that joined (slot, rank, host), the generations found complete in the
//! job's store, and the processes declared dead; it carries out its `Restart` or `Failed`.
//!
//! Where the pieces live is the job's store, the coordinator's one storage peer: the store on
//! the job's peers when it keeps its checkpoints there (`--checkpoint-copies K`, the default:
//! [`Job::peers_store`], `p2pmpi::checkpoint::peers`), else the directory its processes are
//! given ([`store_of`]), which every process must reach and write (`--checkpoint-dir`, else
//! `./p2pmpi-checkpoints/PROGRAM-PID`; on a local grid of unconfined jobs). The directory
//! holds the launcher's own files in both cases: the lock, the job's record, the journal.

use crate::options::RunArgs;
use crate::restart::{LocalCheckpoints, Run};
use anyhow::{Context, Result};
use p2pmpi::checkpoint::store::{Directory, Manifest, Store};
use p2pmpi_core::checkpoint::{Config, Coordinator, Host, Input, Output, Peer};
use p2pmpi_core::machine::{Machine, Time};
use p2pmpi_core::replication::Layout;
use p2pmpi_wire::grid::{PeerId, PeerInfo, Placement};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// One run of a grid job's processes: how it ended, and the host of each slot.
pub(crate) struct Attempt {
    pub(crate) ended: crate::supervise::Ended,
    pub(crate) hosts: Vec<PeerInfo>,
}

/// What the restart loop needs of a grid job (the submitter's `grid_run::GridJob`; a trait so
/// that this module does not name the start-up's, which calls it).
pub(crate) trait Job {
    /// A run of the job with this output and these checkpoint variables (a restart's).
    fn prepare(&mut self, output: crate::output::Output, ckpt_env: Vec<(String, String)>);
    fn layout(&self) -> Layout;
    fn output(&self) -> &crate::output::Output;
    /// The program here (rank 0's).
    fn program(&self) -> &std::path::Path;
    /// A ping of a host's peer daemon from this submitter.
    fn pinger(&self) -> crate::watch::Ping;
    /// The store on the job's peers (`--checkpoint-copies`), once granted: where its
    /// processes keep their checkpoints instead of the directory.
    fn peers_store(&self) -> Option<Box<dyn Store>>;
}

/// Starts one run (reservation without the hosts given, staging, launch, supervision); `None`
/// after `--dry-run`.
pub(crate) type Start<'s, J> = dyn Fn(&J, &[(PeerId, String)]) -> Result<Option<Attempt>> + 's;

/// The coordinator's storage peer: the job's directory store.
const STORE: Peer = 0;
/// Its failure domain: none of the hosts that run processes.
const STORE_HOST: Host = Host::MAX;

/// Whether a grid job keeps checkpoints and may restart (as for a local job).
pub(crate) fn wanted(opts: &RunArgs) -> bool {
    LocalCheckpoints::recorded(opts)
}

/// The host of each slot of a reservation (`assigned`: the slots of each placement).
pub(crate) fn slot_hosts(slots: usize, placements: &[Placement], assigned: &[Vec<u32>]) -> Vec<PeerInfo> {
    let mut hosts: Vec<Option<PeerInfo>> = vec![None; slots];
    for (p, s) in placements.iter().zip(assigned) {
        for &slot in s {
            if let Some(h) = hosts.get_mut(slot as usize) {
                *h = Some(p.info.clone());
            }
        }
    }
    hosts.into_iter().map(|h| h.expect("every slot placed")).collect()
}

/// The job's store, opened from its processes' variables (a directory for now).
pub(crate) fn store_of(env: &[(String, String)]) -> Option<Box<dyn Store>> {
    let dir = env.iter().find(|(k, _)| k == p2pmpi::checkpoint::env::DIR)?;
    Some(Box::new(Directory::new(&dir.1)))
}

/// Opens a directory store to the job's processes while it is held: a daemon running as root
/// runs them as users of their own (`JOB_UIDS`), who may not write a directory of root's. The
/// directory, and each generation's directory before a process writes it (one ahead of the
/// last one there), get mode 0777: a stopgap of the directory store on a grid of one machine,
/// until checkpoints are kept on peers.
struct OpenToJobs(Arc<std::sync::atomic::AtomicBool>);

impl OpenToJobs {
    fn start(dir: &std::path::Path) -> Option<OpenToJobs> {
        if !p2pmpi_peer::os::is_root() {
            return None;
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (dir, flag) = (dir.to_path_buf(), stop.clone());
        open_generations(&dir);
        std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                open_generations(&dir);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        Some(OpenToJobs(stop))
    }
}

impl Drop for OpenToJobs {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Mode 0777 on `dir` and its generations' directories, the next one made.
fn open_generations(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let open = |d: &std::path::Path| {
        let _ = std::fs::create_dir_all(d);
        if std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o777 != 0o777) {
            let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777));
        }
    };
    open(dir);
    let gens: Vec<u64> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("gen-")?.parse().ok())
        .collect();
    for g in &gens {
        open(&dir.join(format!("gen-{g}")));
    }
    let next = gens.iter().max().map_or(1, |g| g + 1);
    open(&dir.join(format!("gen-{next}")));
}

/// The restart decisions of one job: the coordinator, with the numbering of the hosts it
/// is told about.
pub(crate) struct Decider {
    coord: Coordinator,
    layout: Layout,
    hosts: BTreeMap<String, Host>,
    /// The application's step of each complete generation seen.
    steps: BTreeMap<u64, u64>,
    start: std::time::Instant,
}

/// What the coordinator decided once a run ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Restart every rank from `generation` (restart number `attempt`): `reason`.
    Restart { generation: u64, attempt: u32, reason: String },
    /// The job cannot go on: `reason`.
    Failed { reason: String },
    /// No rank lost every copy: the run's end stands.
    Stand,
}

impl Decider {
    pub(crate) fn new(layout: Layout, max_restarts: u32) -> Result<Decider> {
        let cfg = Config {
            copies: 1,
            quota: None,
            rebirth: false,
            max_restarts,
            store_timeout: None,
            ..Config::new(layout.n as u32, layout.r as u32)
        };
        let mut coord = Coordinator::new(cfg)?;
        let _ = coord.handle_input(Time::ZERO, Input::PeerUp { peer: STORE, host: STORE_HOST });
        Ok(Decider { coord, layout, hosts: BTreeMap::new(), steps: BTreeMap::new(), start: std::time::Instant::now() })
    }

    fn now(&self) -> Time {
        self.start.elapsed()
    }

    fn host(&mut self, id: &PeerId) -> Host {
        let next = self.hosts.len() as Host;
        *self.hosts.entry(id.to_string()).or_insert(next)
    }

    /// The processes of a run started: slot `s` on `hosts[s]`.
    pub(crate) fn joined(&mut self, hosts: &[PeerInfo]) {
        for (slot, h) in hosts.iter().enumerate() {
            let host = self.host(&h.id);
            let rank = self.layout.rank_of(slot) as u32;
            let now = self.now();
            let _ = self.coord.handle_input(now, Input::Joined { slot, rank, host });
        }
    }

    /// Generation `m` is complete in the store: every rank's piece is on its (one) peer.
    pub(crate) fn complete(&mut self, m: &Manifest) {
        if self.coord.complete().is_some_and(|c| c >= m.generation) {
            return;
        }
        self.steps.insert(m.generation, m.step);
        let now = self.now();
        for rank in 0..self.layout.n as u32 {
            let _ = self.coord.handle_input(now, Input::Piece { step: m.generation, rank, bytes: 0 });
        }
        self.drain_stores();
    }

    /// Reports every copy asked for as stored (the directory store holds every piece once
    /// the manifest names it); the other outputs are what the store did already.
    fn drain_stores(&mut self) {
        let mut stores = Vec::new();
        while let Some(o) = self.coord.poll_output() {
            if let Output::Store { step, rank, to, .. } = o {
                stores.push((step, rank, to));
            }
        }
        let now = self.now();
        for (step, rank, peer) in stores {
            let _ = self.coord.handle_input(now, Input::Stored { step, rank, peer });
        }
        while self.coord.poll_output().is_some() {}
    }

    /// The run ended: `deaths` were declared dead, and processes stopped saying they lost
    /// `lost` (at `-r R`, every replica of its rank). Returns the coordinator's decision.
    pub(crate) fn ended(&mut self, deaths: &[usize], lost: &[usize]) -> Decision {
        let now = self.now();
        for &slot in deaths {
            let _ = self.coord.handle_input(now, Input::Died { slot });
        }
        for &slot in lost {
            if slot < self.layout.slots() {
                for s in self.coord.live(self.layout.rank_of(slot) as u32) {
                    let _ = self.coord.handle_input(now, Input::Died { slot: s });
                }
            }
        }
        let mut decision = Decision::Stand;
        while let Some(o) = self.coord.poll_output() {
            match o {
                Output::Restart { step, attempt, reason, .. } if decision == Decision::Stand => {
                    decision = Decision::Restart { generation: step, attempt, reason }
                }
                Output::Failed { reason } => decision = Decision::Failed { reason },
                _ => {}
            }
        }
        decision
    }

    /// The application's step of a generation seen complete.
    pub(crate) fn step_of(&self, generation: u64) -> Option<u64> {
        self.steps.get(&generation).copied()
    }
}

/// The ranks every slot of which is in `dead`, with their hosts: `rank 1 (replica 0 on host
/// A, replica 1 on host B)`.
fn lost_ranks(layout: Layout, dead: &BTreeSet<usize>, hosts: &[PeerInfo]) -> Vec<String> {
    (0..layout.n)
        .filter(|&k| layout.slots_of(k).all(|s| dead.contains(&s)))
        .map(|k| {
            let on: Vec<String> = layout
                .slots_of(k)
                .enumerate()
                .map(|(j, s)| {
                    let h = hosts.get(s).map_or("?".to_string(), |h| h.id.to_string());
                    if layout.r > 1 {
                        format!("replica {j} on host {h}")
                    } else {
                        format!("on host {h}")
                    }
                })
                .collect();
            format!("rank {k} ({})", on.join(", "))
        })
        .collect()
}

/// The hosts of `slots` whose peer daemon does not answer a ping: given up on.
fn unanswering(job: &impl Job, slots: &BTreeSet<usize>, hosts: &[PeerInfo]) -> Vec<(PeerId, String)> {
    let ping = job.pinger();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for h in slots.iter().filter_map(|&s| hosts.get(s)) {
        if !seen.insert(h.id.to_string()) {
            continue;
        }
        if let Err(why) = ping(h) {
            out.push((h.id.clone(), format!("its peer daemon does not answer: {why}")));
        }
    }
    out
}

/// Runs a grid job that keeps checkpoints: again from the last complete one each time a rank
/// loses every copy, as the coordinator decides, up to `--max-restarts` times.
pub(crate) fn run<J: Job>(name: &str, opts: &RunArgs, job: &mut J, start: &Start<J>) -> Result<i32> {
    let layout = job.layout();
    let program = job.program().to_path_buf();
    let checkpoints = LocalCheckpoints::new(opts, &program)?;
    let _lock = checkpoints.lock()?;
    let (mut replay, mut restore) = match &opts.resume {
        Some(dir) => (
            crate::output::Journal::read(dir, layout.n)
                .with_context(|| format!("cannot read the journal in {}", dir.display()))?,
            checkpoints.latest()?.map(|m| m.generation),
        ),
        None => (crate::output::Replay::new(layout.n), None),
    };
    if opts.resume.is_none() {
        let mut rec = opts.clone();
        rec.grid = true;
        rec.local = false;
        checkpoints.record(&rec, &program)?;
    }
    let journal = Some(Arc::new(
        crate::output::Journal::open(checkpoints.dir(), &replay)
            .with_context(|| format!("cannot write the output's journal in {}", checkpoints.dir().display()))?,
    ));
    // The processes keep their checkpoints on the job's peers unless given a directory (a
    // resumed job's is its directory: `restart::resume` refuses one whose were on its peers).
    let on_peers = opts.checkpoint_copies > 0 && opts.checkpoint_dir.is_none() && opts.resume.is_none();
    let _open = if on_peers { None } else { OpenToJobs::start(checkpoints.dir()) };
    let mut decider = Decider::new(layout, opts.max_restarts)?;
    let mut exclude: Vec<(PeerId, String)> = Vec::new();
    let mut again = opts.resume.is_some();
    loop {
        let run = Run { dir: checkpoints.dir(), restore, again, replay: &mut replay, journal: journal.clone() };
        let mut env = run.env();
        if on_peers {
            env.retain(|(k, _)| k != p2pmpi::checkpoint::env::DIR);
        }
        let output = run.output(layout, opts)?;
        job.prepare(output, env.clone());
        let Some(attempt) = start(job, &exclude)? else {
            // `--dry-run`: nothing ran.
            checkpoints.finish(name, 0, true);
            return Ok(0);
        };
        if let Some(r) = job.output().replay() {
            replay = r;
        }
        let Attempt { ended, hosts } = attempt;
        decider.joined(&hosts);
        if ended.code == 0 || ended.code == crate::supervise::TIMEOUT_EXIT {
            checkpoints.finish(name, ended.code, true);
            return Ok(ended.code);
        }
        let store = if on_peers { job.peers_store() } else { store_of(&env) };
        match store.map(|s| s.latest()) {
            Some(Ok(Some(m))) => decider.complete(&m),
            Some(Err(e)) => eprintln!("{name}: cannot read the job's checkpoints: {e}"),
            Some(Ok(None)) | None => {}
        }
        let dead: BTreeSet<usize> = ended.deaths.iter().chain(&ended.lost).copied().collect();
        match decider.ended(&ended.deaths, &ended.lost) {
            Decision::Stand => {
                checkpoints.finish(name, ended.code, true);
                return Ok(ended.code);
            }
            Decision::Failed { reason } => {
                eprintln!("{name}: the job cannot restart: {reason}");
                checkpoints.finish(name, ended.code, true);
                return Ok(ended.code);
            }
            Decision::Restart { generation, attempt, reason } => {
                let mut lost = lost_ranks(layout, &dead, &hosts);
                if lost.is_empty() {
                    lost.push(reason);
                }
                let gone = unanswering(job, &dead, &hosts);
                let step = decider.step_of(generation).map_or(String::new(), |s| format!(" (step {s})"));
                let without = if gone.is_empty() {
                    String::new()
                } else {
                    let ids: Vec<String> = gone.iter().map(|(id, _)| id.to_string()).collect();
                    format!(", without host(s) {} (their peer daemon does not answer)", ids.join(", "))
                };
                eprintln!(
                    "{name}: restart {attempt} of {}: {} lost every copy; restarting every rank from checkpoint \
                     generation {generation}{step} on hosts reserved again{without}",
                    opts.max_restarts,
                    lost.join(", ")
                );
                exclude.extend(gone);
                restore = Some(generation);
                again = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(generation: u64, step: u64, n: usize) -> Manifest {
        Manifest { generation, step, pieces: vec![[0; p2pmpi::checkpoint::store::HASH_LEN]; n] }
    }

    fn hosts(n: usize) -> Vec<PeerInfo> {
        (0..n)
            .map(|i| PeerInfo {
                id: PeerId { ip: format!("127.0.0.{}", i + 1), mpd_port: 9000 },
                rs_port: 0,
                ft_port: 0,
                fd_port: 0,
                capacity: 1,
                name: String::new(),
            })
            .collect()
    }

    #[test]
    fn a_rank_that_loses_every_replica_restarts_from_the_last_complete_generation() {
        let l = Layout::new(3, 2);
        let mut d = Decider::new(l, 2).unwrap();
        d.joined(&hosts(6));
        d.complete(&manifest(2, 8, 3));
        // One replica of rank 1: the job goes on.
        assert_eq!(d.ended(&[2], &[]), Decision::Stand);
        let got = d.ended(&[3], &[]);
        assert!(
            matches!(&got, Decision::Restart { generation: 2, attempt: 1, reason } if reason.contains("rank 1")),
            "{got:?}"
        );
        assert_eq!(d.step_of(2), Some(8));
    }

    #[test]
    fn without_a_complete_generation_or_past_the_budget_the_job_fails() {
        let l = Layout::new(2, 1);
        let mut d = Decider::new(l, 1).unwrap();
        d.joined(&hosts(2));
        assert!(matches!(d.ended(&[1], &[]), Decision::Failed { reason } if reason.contains("no checkpoint")));
        let mut d = Decider::new(l, 1).unwrap();
        d.joined(&hosts(2));
        d.complete(&manifest(1, 4, 2));
        assert!(matches!(d.ended(&[1], &[]), Decision::Restart { generation: 1, attempt: 1, .. }));
        d.joined(&hosts(2));
        d.complete(&manifest(3, 12, 2));
        let got = d.ended(&[0], &[]);
        assert!(matches!(&got, Decision::Failed { reason } if reason.contains("--max-restarts 1")), "{got:?}");
    }

    #[test]
    fn a_process_that_says_it_lost_a_rank_counts_every_replica_of_it() {
        let l = Layout::new(3, 2);
        let mut d = Decider::new(l, 3).unwrap();
        d.joined(&hosts(6));
        d.complete(&manifest(1, 4, 3));
        assert!(matches!(d.ended(&[], &[5]), Decision::Restart { generation: 1, .. }));
    }

    #[test]
    fn the_report_names_the_ranks_lost_and_their_hosts() {
        let l = Layout::new(2, 2);
        let dead: BTreeSet<usize> = [1, 2, 3].into_iter().collect();
        let got = lost_ranks(l, &dead, &hosts(4));
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("rank 1 (replica 0 on host 127.0.0.3"), "{got:?}");
    }
}
