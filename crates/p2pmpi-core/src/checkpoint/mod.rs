//! Checkpoints kept on peers, replicas reborn, restarts: the coordination of a job's checkpoints
//! as one state machine (issue 41).
//!
//! Every rank of a job saves, at the same step, a *piece* (its share of the application's and
//! the library's state, as bytes the driver holds); the pieces of one step form a *generation*.
//! The [`Coordinator`] decides, with time passed in:
//!
//! * **where copies live**: each piece is stored on `K` peers ([`Config::copies`],
//!   `--checkpoint-copies`, default 2), never on a host where a process of the rank runs, on
//!   `K` different hosts, the least loaded first ([`Output::Store`]), and where possible not
//!   on two hosts that run replicas of one rank (the failures that take that rank would take
//!   the piece too, and the job could not restart); a copy whose store failed, timed out or
//!   whose peer left is placed elsewhere;
//! * **which generation is complete**: every rank's piece stored on `K` peers
//!   ([`Output::Complete`]); the older generations are then deleted ([`Output::Delete`]), and
//!   the last complete one never is, whatever else happens;
//! * **the quota**: a generation whose copies would take more bytes than the job's quota is
//!   refused ([`Output::Refused`], as when no peer can take a copy); the last complete one is
//!   kept and the job goes on;
//! * **bad copies**: a copy the driver found corrupted or missing (its hash did not match) is
//!   dropped, another copy is named ([`Output::Fetch`]) and a new copy made from a good one;
//! * **rebirth**: at each complete generation, a rank with fewer than `R` live replicas gets
//!   new ones, started from that generation on a free peer ([`Output::Rebirth`]); a reborn
//!   replica is never the rank's master ([`Output::Master`]) until the driver reports that it
//!   caught up ([`Input::CaughtUp`]);
//! * **restart**: a rank that loses every caught-up replica (also at `r = 1`) makes the whole
//!   job restart from the last complete generation ([`Output::Restart`]), within a budget
//!   ([`Config::max_restarts`]); without a complete generation, or once the budget is spent, the
//!   job fails with its reason ([`Output::Failed`]).
//!
//! The driver (the launcher with the job's MPDs, or the simulator) names processes by their
//! universe *slot* as the [`crate::supervisor`] does, storage peers by a [`Peer`] number and
//! failure domains by a [`Host`] number (two peers on one machine are two hosts only if the
//! driver says so: a local grid of MPDs may count each MPD as one). It carries out the
//! outputs and reports what happened; hashing, transfers and encryption stay with it.

mod placement;

use crate::machine::{Machine, Time};
use placement::Peers;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::Duration;

/// A storage peer (an MPD of the grid), numbered by the driver.
pub type Peer = u32;
/// A failure domain (a machine), numbered by the driver.
pub type Host = u32;
/// A process: its universe slot, as the supervisor numbers them.
pub type Slot = usize;

/// The default number of copies of each piece (`--checkpoint-copies`).
pub const DEFAULT_COPIES: u32 = 2;

/// How a job's checkpoints are coordinated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The number of ranks (logical processes).
    pub ranks: u32,
    /// The replication degree `R` the job keeps (rebirths bring a rank back to it).
    pub degree: u32,
    /// Copies of each piece, `K ≥ 1`, on `K` distinct hosts.
    pub copies: u32,
    /// The most bytes the job's copies may take on the grid (`None`: no quota).
    pub quota: Option<u64>,
    /// Start new replicas at each complete generation.
    pub rebirth: bool,
    /// How many times the job may restart from a complete generation.
    pub max_restarts: u32,
    /// A store not confirmed after this long counts as failed (`None`: wait for the driver).
    pub store_timeout: Option<Duration>,
}

impl Config {
    /// `ranks` ranks at degree `degree`, [`DEFAULT_COPIES`] copies, no quota, rebirth on,
    /// three restarts, stores confirmed within a minute.
    pub fn new(ranks: u32, degree: u32) -> Config {
        Config {
            ranks,
            degree,
            copies: DEFAULT_COPIES,
            quota: None,
            rebirth: true,
            max_restarts: 3,
            store_timeout: Some(Duration::from_secs(60)),
        }
    }
}

/// What the coordinator is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A storage peer is available (again, or new), on `host`.
    PeerUp { peer: Peer, host: Host },
    /// A storage peer left: the copies it held are gone.
    PeerDown { peer: Peer },
    /// A process of `rank` runs and is in step (at the job's start, or after a restart).
    Joined { slot: Slot, rank: u32, host: Host },
    /// A replica started on an [`Output::Rebirth`]: it runs, not yet caught up.
    Reborn { slot: Slot, rank: u32, host: Host },
    /// A rebirth asked for could not be carried out (no free peer): it is asked again at the
    /// next complete generation.
    RebirthFailed { rank: u32, reason: String },
    /// A reborn replica reached the step of its rank's master: it may become master.
    CaughtUp { slot: Slot },
    /// A process was declared dead (or stopped).
    Died { slot: Slot },
    /// `rank` saved its piece of generation `step`, `bytes` long (the driver holds it).
    Piece { step: u64, rank: u32, bytes: u64 },
    /// A copy of `rank`'s piece of `step` is stored on `peer`, its hash checked.
    Stored { step: u64, rank: u32, peer: Peer },
    /// Storing that copy failed (refused by the peer, transfer broken, bad hash).
    StoreFailed { step: u64, rank: u32, peer: Peer },
    /// A copy read back did not match its hash, or was missing.
    Corrupt { step: u64, rank: u32, peer: Peer },
}

/// What the coordinator decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Store a copy of `rank`'s piece of `step` on `to`: from the rank itself (`from: None`),
    /// or copied from the good copy on `from`. Then report [`Input::Stored`] or
    /// [`Input::StoreFailed`].
    Store { step: u64, rank: u32, to: Peer, from: Option<Peer> },
    /// Delete the copy of `rank`'s piece of `step` held by `peer`.
    Delete { step: u64, rank: u32, peer: Peer },
    /// Generation `step` is complete: every rank's piece is on `K` peers.
    Complete { step: u64 },
    /// Generation `step` is given up (quota, no peer); the last complete one is kept.
    Refused { step: u64, reason: String },
    /// Start a replica of `rank` from generation `step`, read from `from`, on a free peer
    /// whose host is none of `avoid` (the hosts of the rank's live processes); then report
    /// [`Input::Reborn`] or [`Input::RebirthFailed`].
    Rebirth { rank: u32, step: u64, from: Peer, avoid: Vec<Host> },
    /// Read `rank`'s piece of `step` from `from` instead of a copy found bad.
    Fetch { step: u64, rank: u32, from: Peer },
    /// `slot` is now the master of `rank` (its master died).
    Master { rank: u32, slot: Slot },
    /// Stop the survivors and restart every rank from generation `step`, rank `i` reading its
    /// piece from `sources[i]`; this is restart number `attempt`. Report the new processes
    /// with [`Input::Joined`].
    Restart { step: u64, attempt: u32, sources: Vec<Peer>, reason: String },
    /// Generation `step` lost every copy of a piece: it can no longer be restored.
    Lost { step: u64, rank: u32 },
    /// The job cannot go on. Nothing follows.
    Failed { reason: String },
}

/// Why an input was refused (it changes nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejected {
    /// A rank outside the job.
    Rank(u32),
    /// A slot the coordinator does not know (stopped by a restart, or never joined).
    Slot(Slot),
    /// A slot that is already known.
    Duplicate(Slot),
    /// A peer the coordinator does not know.
    Peer(Peer),
    /// A report about a copy the coordinator did not ask for, or no longer tracks.
    Copy { step: u64, rank: u32, peer: Peer },
    /// A piece of a generation older than the last complete one.
    Stale { step: u64 },
    /// The job failed: nothing more is decided.
    Failed,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejected::Rank(r) => write!(f, "rank {r} is not a rank of the job"),
            Rejected::Slot(s) => write!(f, "slot {s} is not a live process of the job"),
            Rejected::Duplicate(s) => write!(f, "slot {s} joined already"),
            Rejected::Peer(p) => write!(f, "peer {p} is unknown"),
            Rejected::Copy { step, rank, peer } => {
                write!(f, "no copy of rank {rank}'s piece of step {step} is tracked on peer {peer}")
            }
            Rejected::Stale { step } => write!(f, "step {step} is older than the last complete checkpoint"),
            Rejected::Failed => write!(f, "the job failed"),
        }
    }
}

/// A configuration that cannot work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigError {
    /// No rank.
    Ranks,
    /// A degree of 0.
    Degree,
    /// Fewer than one copy.
    Copies,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Ranks => write!(f, "a job has at least one rank"),
            ConfigError::Degree => write!(f, "the replication degree must be at least 1"),
            ConfigError::Copies => write!(f, "--checkpoint-copies must be at least 1"),
        }
    }
}

impl std::error::Error for ConfigError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyState {
    Pending,
    Stored,
}

#[derive(Debug, Clone, Default)]
struct Piece {
    bytes: u64,
    copies: BTreeMap<Peer, CopyState>,
    /// Peers that failed to store it (not asked again for this piece).
    tried: BTreeSet<Peer>,
}

impl Piece {
    fn stored(&self) -> usize {
        self.copies.values().filter(|c| **c == CopyState::Stored).count()
    }

    fn good(&self) -> Option<Peer> {
        self.copies.iter().find(|(_, c)| **c == CopyState::Stored).map(|(p, _)| *p)
    }
}

#[derive(Debug, Clone, Default)]
struct Generation {
    pieces: BTreeMap<u32, Piece>,
    /// Pieces stored on `K` peers.
    full: u32,
    complete: bool,
}

#[derive(Debug, Clone, Copy)]
struct Proc {
    rank: u32,
    host: Host,
    caught_up: bool,
}

/// The checkpoint coordinator of one job (see the module documentation).
#[derive(Debug, Clone)]
pub struct Coordinator {
    cfg: Config,
    procs: BTreeMap<Slot, Proc>,
    /// The ranks of the live processes on each host.
    host_ranks: BTreeMap<Host, Vec<u32>>,
    /// Live slots of each rank.
    live: Vec<BTreeSet<Slot>>,
    master: Vec<Option<Slot>>,
    /// Rebirths asked for and not yet reported, per rank.
    pending_births: Vec<u32>,
    peers: Peers,
    gens: BTreeMap<u64, Generation>,
    /// The last complete generation, while it can be restored.
    complete: Option<u64>,
    refused: BTreeSet<u64>,
    /// Store deadlines: (deadline, step, rank, peer).
    deadlines: BTreeSet<(Time, u64, u32, Peer)>,
    used: u64,
    restarts: u32,
    failed: bool,
    out: VecDeque<Output>,
}

impl Coordinator {
    /// A coordinator for a job that has not started: processes join with [`Input::Joined`],
    /// peers with [`Input::PeerUp`].
    pub fn new(cfg: Config) -> Result<Coordinator, ConfigError> {
        if cfg.ranks == 0 {
            return Err(ConfigError::Ranks);
        }
        if cfg.degree == 0 {
            return Err(ConfigError::Degree);
        }
        if cfg.copies == 0 {
            return Err(ConfigError::Copies);
        }
        let n = cfg.ranks as usize;
        Ok(Coordinator {
            cfg,
            procs: BTreeMap::new(),
            host_ranks: BTreeMap::new(),
            live: vec![BTreeSet::new(); n],
            master: vec![None; n],
            pending_births: vec![0; n],
            peers: Peers::default(),
            gens: BTreeMap::new(),
            complete: None,
            refused: BTreeSet::new(),
            deadlines: BTreeSet::new(),
            used: 0,
            restarts: 0,
            failed: false,
            out: VecDeque::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The last complete generation, while it can be restored.
    pub fn complete(&self) -> Option<u64> {
        self.complete
    }

    /// The generations tracked (complete or being stored), oldest first.
    pub fn generations(&self) -> Vec<u64> {
        self.gens.keys().copied().collect()
    }

    /// The copies of `rank`'s piece of `step`: each peer, and whether it is stored (else asked).
    pub fn copies(&self, step: u64, rank: u32) -> Vec<(Peer, bool)> {
        self.gens
            .get(&step)
            .and_then(|g| g.pieces.get(&rank))
            .map(|p| p.copies.iter().map(|(peer, c)| (*peer, *c == CopyState::Stored)).collect())
            .unwrap_or_default()
    }

    /// The host of a known peer.
    pub fn host_of(&self, peer: Peer) -> Option<Host> {
        self.peers.host(peer)
    }

    /// The live processes of `rank`.
    pub fn live(&self, rank: u32) -> Vec<Slot> {
        self.live.get(rank as usize).map(|s| s.iter().copied().collect()).unwrap_or_default()
    }

    /// The master of `rank`.
    pub fn master(&self, rank: u32) -> Option<Slot> {
        self.master.get(rank as usize).copied().flatten()
    }

    /// Whether `slot` is live and caught up.
    pub fn caught_up(&self, slot: Slot) -> bool {
        self.procs.get(&slot).is_some_and(|p| p.caught_up)
    }

    /// Rebirths asked for `rank` and not yet reported.
    pub fn pending_rebirths(&self, rank: u32) -> u32 {
        self.pending_births.get(rank as usize).copied().unwrap_or(0)
    }

    /// The restarts made so far.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// The bytes the copies (stored and asked for) take.
    pub fn used_bytes(&self) -> u64 {
        self.used
    }

    /// Whether the job failed.
    pub fn failed(&self) -> bool {
        self.failed
    }

    fn rank_ok(&self, rank: u32) -> Result<(), Rejected> {
        if rank < self.cfg.ranks {
            Ok(())
        } else {
            Err(Rejected::Rank(rank))
        }
    }

    fn join(&mut self, slot: Slot, rank: u32, host: Host, caught_up: bool) -> Result<(), Rejected> {
        self.rank_ok(rank)?;
        if self.procs.contains_key(&slot) {
            return Err(Rejected::Duplicate(slot));
        }
        self.procs.insert(slot, Proc { rank, host, caught_up });
        self.host_ranks.entry(host).or_default().push(rank);
        let r = rank as usize;
        self.live[r].insert(slot);
        if caught_up && self.master[r].is_none() {
            self.master[r] = Some(slot);
        }
        if !caught_up {
            self.pending_births[r] = self.pending_births[r].saturating_sub(1);
        }
        Ok(())
    }

    fn died(&mut self, slot: Slot) -> Result<(), Rejected> {
        let p = self.procs.remove(&slot).ok_or(Rejected::Slot(slot))?;
        if let Some(rs) = self.host_ranks.get_mut(&p.host) {
            if let Some(i) = rs.iter().position(|r| *r == p.rank) {
                rs.swap_remove(i);
            }
            if rs.is_empty() {
                self.host_ranks.remove(&p.host);
            }
        }
        let r = p.rank as usize;
        self.live[r].remove(&slot);
        if self.master[r] != Some(slot) {
            return Ok(());
        }
        self.master[r] = None;
        let next = self.live[r].iter().copied().find(|s| self.procs[s].caught_up);
        match next {
            Some(s) => {
                self.master[r] = Some(s);
                self.out.push_back(Output::Master { rank: p.rank, slot: s });
            }
            None => self.rank_lost(p.rank),
        }
        Ok(())
    }

    /// `rank` has no caught-up replica left: restart from the last complete generation, or fail.
    fn rank_lost(&mut self, rank: u32) {
        let left = self.live[rank as usize].len();
        let what = if left == 0 {
            format!("rank {rank} lost every replica")
        } else {
            format!("rank {rank} lost every replica in step ({left} reborn not caught up)")
        };
        let Some(step) = self.complete else {
            return self.fail(format!("{what} and no checkpoint is complete"));
        };
        if self.restarts >= self.cfg.max_restarts {
            let n = self.cfg.max_restarts;
            return self.fail(format!("{what} and the restart budget is spent ({n} restarts, --max-restarts {n})"));
        }
        self.restarts += 1;
        let newer: Vec<u64> = self.gens.range(step + 1..).map(|(s, _)| *s).collect();
        for s in newer {
            self.drop_generation(s);
        }
        // The restarted job numbers its next steps again from `step`.
        self.refused.clear();
        self.procs.clear();
        self.host_ranks.clear();
        self.live.iter_mut().for_each(BTreeSet::clear);
        self.master.iter_mut().for_each(|m| *m = None);
        self.pending_births.iter_mut().for_each(|b| *b = 0);
        let gen = &self.gens[&step];
        let sources = (0..self.cfg.ranks).map(|r| gen.pieces[&r].good().expect("a restorable piece")).collect();
        self.out.push_back(Output::Restart { step, attempt: self.restarts, sources, reason: what });
    }

    fn fail(&mut self, reason: String) {
        self.failed = true;
        self.out.push_back(Output::Failed { reason });
    }

    /// The hosts where `rank` runs.
    fn rank_hosts(&self, rank: u32) -> Vec<Host> {
        let mut h: Vec<Host> = self.live[rank as usize].iter().map(|s| self.procs[s].host).collect();
        h.sort_unstable();
        h.dedup();
        h
    }

    /// Asks for one more copy of `rank`'s piece of `step` on a new peer; false if none fits.
    fn place(&mut self, now: Time, step: u64, rank: u32) -> bool {
        let avoid = self.rank_hosts(rank);
        let piece = &self.gens[&step].pieces[&rank];
        let used: Vec<Host> = piece.copies.keys().filter_map(|p| self.peers.host(*p)).collect();
        let from = piece.good();
        let bytes = piece.bytes;
        let fits = |peer: Peer, host: Host| {
            !avoid.contains(&host)
                && !used.contains(&host)
                && !piece.copies.contains_key(&peer)
                && !piece.tried.contains(&peer)
        };
        // Better still, not on two hosts of one rank's replicas: the failures that take a rank
        // (all its hosts) would take the piece with it, and the job could not restart.
        let groups: Vec<u32> =
            used.iter().flat_map(|h| self.host_ranks.get(h).into_iter().flatten().copied()).collect();
        let apart = |peer: Peer, host: Host| {
            fits(peer, host) && self.host_ranks.get(&host).is_none_or(|rs| !rs.iter().any(|r| groups.contains(r)))
        };
        let Some(to) = self.peers.pick(apart).or_else(|| self.peers.pick(fits)) else {
            return false;
        };
        let piece = self.gens.get_mut(&step).and_then(|g| g.pieces.get_mut(&rank)).expect("piece");
        piece.copies.insert(to, CopyState::Pending);
        self.peers.add_load(to, bytes as i64);
        self.used += bytes;
        if let Some(t) = self.cfg.store_timeout {
            self.deadlines.insert((now + t, step, rank, to));
        }
        self.out.push_back(Output::Store { step, rank, to, from });
        true
    }

    /// Forgets the copy on `peer` (asked or stored), without telling the peer.
    fn forget_copy(&mut self, step: u64, rank: u32, peer: Peer) -> Option<CopyState> {
        let k = self.cfg.copies as usize;
        let gen = self.gens.get_mut(&step)?;
        let piece = gen.pieces.get_mut(&rank)?;
        let state = piece.copies.remove(&peer)?;
        if state == CopyState::Stored && piece.stored() + 1 == k {
            gen.full -= 1;
        }
        let bytes = piece.bytes;
        self.used -= bytes;
        self.peers.add_load(peer, -(bytes as i64));
        self.deadlines.retain(|d| !(d.1 == step && d.2 == rank && d.3 == peer));
        Some(state)
    }

    /// Deletes every copy of generation `step` and forgets it.
    fn drop_generation(&mut self, step: u64) {
        let Some(gen) = self.gens.get(&step) else { return };
        let copies: Vec<(u32, Peer)> =
            gen.pieces.iter().flat_map(|(r, p)| p.copies.keys().map(move |peer| (*r, *peer))).collect();
        for (rank, peer) in copies {
            self.forget_copy(step, rank, peer);
            self.out.push_back(Output::Delete { step, rank, peer });
        }
        self.gens.remove(&step);
    }

    fn refuse(&mut self, step: u64, reason: String) {
        self.drop_generation(step);
        self.refused.insert(step);
        self.out.push_back(Output::Refused { step, reason });
    }

    fn piece(&mut self, now: Time, step: u64, rank: u32, bytes: u64) -> Result<(), Rejected> {
        self.rank_ok(rank)?;
        if self.complete.is_some_and(|c| step <= c) {
            return Err(Rejected::Stale { step });
        }
        if self.refused.contains(&step) || self.gens.get(&step).is_some_and(|g| g.pieces.contains_key(&rank)) {
            return Ok(());
        }
        let k = u64::from(self.cfg.copies);
        if let Some(quota) = self.cfg.quota {
            let need = self.used.saturating_add(bytes.saturating_mul(k));
            if need > quota {
                let reason = format!(
                    "the checkpoint quota is exceeded: {need} bytes needed with rank {rank}'s piece ({bytes} bytes × {k} copies), quota {quota}"
                );
                self.refuse(step, reason);
                return Ok(());
            }
        }
        self.gens.entry(step).or_default().pieces.insert(rank, Piece { bytes, ..Piece::default() });
        for _ in 0..k {
            if !self.place(now, step, rank) {
                let reason = format!("no peer can take a copy of rank {rank}'s piece ({k} copies on distinct hosts, none where rank {rank} runs)");
                self.refuse(step, reason);
                return Ok(());
            }
        }
        Ok(())
    }

    fn stored(&mut self, step: u64, rank: u32, peer: Peer) -> Result<(), Rejected> {
        let k = self.cfg.copies as usize;
        let gen = self.gens.get_mut(&step).ok_or(Rejected::Copy { step, rank, peer })?;
        let piece = gen.pieces.get_mut(&rank).ok_or(Rejected::Copy { step, rank, peer })?;
        match piece.copies.get_mut(&peer) {
            Some(c @ CopyState::Pending) => *c = CopyState::Stored,
            _ => return Err(Rejected::Copy { step, rank, peer }),
        }
        if piece.stored() == k {
            gen.full += 1;
        }
        self.deadlines.retain(|d| !(d.1 == step && d.2 == rank && d.3 == peer));
        let gen = &self.gens[&step];
        if !gen.complete && gen.full == self.cfg.ranks {
            self.completed(step);
        }
        Ok(())
    }

    fn completed(&mut self, step: u64) {
        self.gens.get_mut(&step).expect("generation").complete = true;
        self.complete = Some(step);
        let older: Vec<u64> = self.gens.range(..step).map(|(s, _)| *s).collect();
        for s in older {
            self.drop_generation(s);
        }
        self.refused.retain(|s| *s > step);
        self.out.push_back(Output::Complete { step });
        if self.cfg.rebirth {
            self.rebirths(step);
        }
    }

    /// At complete generation `step`: new replicas for the ranks below the degree.
    fn rebirths(&mut self, step: u64) {
        for rank in 0..self.cfg.ranks {
            let r = rank as usize;
            let have = self.live[r].len() as u32 + self.pending_births[r];
            if have >= self.cfg.degree {
                continue;
            }
            let from = self.gens[&step].pieces[&rank].good().expect("a complete piece");
            let avoid = self.rank_hosts(rank);
            for _ in have..self.cfg.degree {
                self.pending_births[r] += 1;
                self.out.push_back(Output::Rebirth { rank, step, from, avoid: avoid.clone() });
            }
        }
    }

    /// A copy is gone (store failed or timed out, peer left, corrupted): place another.
    fn copy_gone(&mut self, now: Time, step: u64, rank: u32, peer: Peer) {
        if self.forget_copy(step, rank, peer).is_none() {
            return;
        }
        let gen = &self.gens[&step];
        let complete = gen.complete;
        let piece = &gen.pieces[&rank];
        if complete && piece.good().is_none() && !piece.copies.is_empty() {
            // Only copies being made from the lost ones: they cannot finish.
            let asked: Vec<Peer> = piece.copies.keys().copied().collect();
            for p in asked {
                self.forget_copy(step, rank, p);
                self.out.push_back(Output::Delete { step, rank, peer: p });
            }
        }
        let piece = &self.gens[&step].pieces[&rank];
        if complete && piece.copies.is_empty() {
            self.generation_lost(step, rank);
            return;
        }
        if (piece.copies.len() as u32) < self.cfg.copies && !self.place(now, step, rank) && !complete {
            let k = self.cfg.copies;
            self.refuse(step, format!("no peer left for a copy of rank {rank}'s piece ({k} copies on distinct hosts)"));
        }
    }

    fn generation_lost(&mut self, step: u64, rank: u32) {
        self.drop_generation(step);
        if self.complete == Some(step) {
            self.complete = None;
        }
        self.out.push_back(Output::Lost { step, rank });
    }

    fn peer_down(&mut self, now: Time, peer: Peer) -> Result<(), Rejected> {
        if self.peers.host(peer).is_none() {
            return Err(Rejected::Peer(peer));
        }
        let held: Vec<(u64, u32)> = self
            .gens
            .iter()
            .flat_map(|(s, g)| {
                g.pieces.iter().filter(|(_, p)| p.copies.contains_key(&peer)).map(move |(r, _)| (*s, *r))
            })
            .collect();
        self.peers.remove(peer);
        for (step, rank) in held {
            if self.gens.contains_key(&step) {
                self.copy_gone(now, step, rank, peer);
            }
        }
        Ok(())
    }

    /// A new peer: the complete generation's pieces below `K` copies get one.
    fn peer_up(&mut self, now: Time, peer: Peer, host: Host) {
        self.peers.insert(peer, host);
        let Some(step) = self.complete else { return };
        let short: Vec<u32> = self.gens[&step]
            .pieces
            .iter()
            .filter(|(_, p)| (p.copies.len() as u32) < self.cfg.copies && p.good().is_some())
            .map(|(r, _)| *r)
            .collect();
        for rank in short {
            self.place(now, step, rank);
        }
    }

    fn corrupt(&mut self, now: Time, step: u64, rank: u32, peer: Peer) -> Result<(), Rejected> {
        let tracked =
            self.gens.get(&step).and_then(|g| g.pieces.get(&rank)).is_some_and(|p| p.copies.contains_key(&peer));
        if !tracked {
            return Err(Rejected::Copy { step, rank, peer });
        }
        self.out.push_back(Output::Delete { step, rank, peer });
        if let Some(piece) = self.gens.get_mut(&step).and_then(|g| g.pieces.get_mut(&rank)) {
            piece.tried.insert(peer);
        }
        self.copy_gone(now, step, rank, peer);
        if let Some(from) = self.gens.get(&step).and_then(|g| g.pieces.get(&rank)).and_then(Piece::good) {
            self.out.push_back(Output::Fetch { step, rank, from });
        }
        Ok(())
    }

    fn store_failed(&mut self, now: Time, step: u64, rank: u32, peer: Peer) -> Result<(), Rejected> {
        let pending = self
            .gens
            .get(&step)
            .and_then(|g| g.pieces.get(&rank))
            .is_some_and(|p| p.copies.get(&peer) == Some(&CopyState::Pending));
        if !pending {
            return Err(Rejected::Copy { step, rank, peer });
        }
        if let Some(piece) = self.gens.get_mut(&step).and_then(|g| g.pieces.get_mut(&rank)) {
            piece.tried.insert(peer);
        }
        self.copy_gone(now, step, rank, peer);
        Ok(())
    }
}

impl Machine for Coordinator {
    type Input = Input;
    type Output = Output;
    type Rejected = Rejected;

    fn handle_input(&mut self, now: Time, input: Input) -> Result<(), Rejected> {
        if self.failed {
            return Err(Rejected::Failed);
        }
        match input {
            Input::PeerUp { peer, host } => {
                self.peer_up(now, peer, host);
                Ok(())
            }
            Input::PeerDown { peer } => self.peer_down(now, peer),
            Input::Joined { slot, rank, host } => self.join(slot, rank, host, true),
            Input::Reborn { slot, rank, host } => self.join(slot, rank, host, false),
            Input::RebirthFailed { rank, .. } => {
                self.rank_ok(rank)?;
                let b = &mut self.pending_births[rank as usize];
                *b = b.saturating_sub(1);
                Ok(())
            }
            Input::CaughtUp { slot } => {
                let p = self.procs.get_mut(&slot).ok_or(Rejected::Slot(slot))?;
                p.caught_up = true;
                Ok(())
            }
            Input::Died { slot } => self.died(slot),
            Input::Piece { step, rank, bytes } => self.piece(now, step, rank, bytes),
            Input::Stored { step, rank, peer } => self.stored(step, rank, peer),
            Input::StoreFailed { step, rank, peer } => self.store_failed(now, step, rank, peer),
            Input::Corrupt { step, rank, peer } => self.corrupt(now, step, rank, peer),
        }
    }

    /// Stores not confirmed in time count as failed.
    fn handle_timeout(&mut self, now: Time) {
        while let Some(&(at, step, rank, peer)) = self.deadlines.first() {
            if at > now || self.failed {
                break;
            }
            self.deadlines.pop_first();
            let _ = self.store_failed(now, step, rank, peer);
        }
    }

    fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.deadlines.first().map(|d| d.0)
    }
}

#[cfg(test)]
mod tests;
