//! The consensus among the supernodes: the JEL registry's input log replicated with Raft.
//!
//! # Which Raft
//!
//! The issue asks for a well-kept Raft crate rather than a protocol of our own. Two were
//! weighed:
//!
//! * **`raft` (tikv/raft-rs, 0.7)** — the Raft of TiKV, a port of etcd's: a *sans-IO*
//!   state machine ([`RawNode`]): the driver calls `tick` on a timer, `step`s the messages
//!   it received, `propose`s entries, and takes a `Ready` out (messages to send, entries to
//!   store, entries committed). That is this project's rule — protocol logic pure, drivers
//!   thin — and it fits the daemons' style (blocking `std::net` over the grid's Noise
//!   channel, a thread per connection): the node is one thread fed by one channel, like the
//!   JEL member's driver. With `default-features = false, features = ["protobuf-codec"]` it
//!   builds here with nothing but cargo (its messages' code is generated in Rust, no
//!   `protoc`; no terminal logger).
//! * **`openraft`** — the issue's example: Raft with snapshots and membership changes,
//!   maintained by Databend Labs, but built on an async runtime (tokio) the grid's daemons
//!   do not use, with its network (`RaftNetwork`) and storage traits written against it; its
//!   newest line (0.10) is an alpha.
//!
//! raft-rs was chosen: it adds no runtime, and the only code of ours is the driver below —
//! the storage is raft-rs's own [`MemStorage`], the transport the grid's authenticated
//! channel.
//!
//! # What is replicated
//!
//! Each entry's data is one [`Command`] (postcard): a pool created (its configuration and
//! its seed: every supernode's `Server` must draw the same numbers), an input of a pool's
//! server ([`replica::encode`]'s bytes: a member's message, a connection's end, a tick,
//! stamped with the leader's clock), or a pool forgotten. Every supernode applies the
//! committed entries in order ([`Apply`]); only the leader's replicas carry their actions
//! out (registry.rs). Beside the pools, the log carries the grid's own records
//! ([`Command::Grid`]: the owner's revocations of members), which every supernode applies
//! to its list of revoked members.
//!
//! # The group
//!
//! Static: the supernodes of `SUPERNODE`, in that order, are Raft ids 1, 2, …, every
//! supernode started with the same list. Each message travels on a connection of the
//! grid's control channel (Noise, keyed by the grid secret), opened with
//! [`SnRequest::Raft`]; a message that does not decode, or claims another sender than its
//! connection's, closes that connection.
//!
//! # Storage
//!
//! The log is raft-rs's [`MemStorage`], mirrored in a file ([`Disk`]: the supernode's
//! `jel-raft.log`): every entry appended, every hard state (term, vote, commit) written
//! before the messages that depend on them are sent, and read back when the supernode
//! starts. Raft needs this: a supernode that came back having forgotten its votes and its
//! log could elect a leader missing committed entries (and raft-rs stops on a commit index
//! beyond its log). The file is written, not synced: it survives the process's death
//! (`kill -9`), not the host's. It is never compacted (the pools' inputs since the group
//! first started; a snapshot would need the pools' servers serializable): a supernode that
//! restarts replays it, then catches up from the leader. A file written for another
//! `SUPERNODE` list is set aside (`.old`) and the supernode starts empty.

use crate::net;
use p2pmpi_core::jel::central;
use p2pmpi_wire::grid::SnRequest;
use p2pmpi_wire::identity::{require_role, Role};
use p2pmpi_wire::secure::{GridSecret, SecureConn};
use parking_lot::Mutex;
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Message};
use raft::storage::MemStorage;
use raft::{RawNode, StateRole};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// One Raft tick.
pub const TICK: Duration = Duration::from_millis(100);
/// Ticks without a leader's word before a follower stands (1 to 2 s).
const ELECTION_TICKS: usize = 10;
/// The leader's heartbeat, in ticks.
const HEARTBEAT_TICKS: usize = 2;
/// Messages queued for a peer supernode that does not read, at most (then dropped: Raft
/// sends again).
const PEER_QUEUE: usize = 4096;

/// One entry of the replicated log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// The pool `pool` is created (if it does not exist when this entry applies).
    Create { pool: String, config: central::Config, seed: u64 },
    /// An input of the pool's server: [`p2pmpi_core::jel::replica::encode`]'s bytes.
    Input { pool: String, entry: Vec<u8> },
    /// The pool is forgotten if nothing was applied to it since its `applied`-th input
    /// (it was empty and idle when the leader proposed this).
    Forget { pool: String, applied: u64 },
    /// A record of the grid itself, which the supernode interprets (a member's revocation,
    /// signed by the grid's owner): handed to the registry's grid hook
    /// ([`crate::registry::Registry::replicated`]).
    Grid(Vec<u8>),
}

/// What the supernode does with the group's decisions (called on the node's thread, in
/// order).
pub trait Apply: Send + 'static {
    /// A committed command (the same sequence on every supernode).
    fn apply(&mut self, cmd: Command);
    /// This supernode leads (or stopped leading); `leader`: the leader's address if known.
    fn role(&mut self, leading: bool, leader: Option<SocketAddr>);
}

enum In {
    Step(Box<Message>),
    Propose(Vec<u8>),
    Unreachable(u64),
}

/// What the group looks like from this supernode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub me: u64,
    /// 0: none known.
    pub leader: u64,
    pub term: u64,
    pub commit: u64,
}

/// This supernode's member of the group: a thread owning the [`RawNode`].
#[derive(Debug)]
pub struct Node {
    me: u64,
    peers: HashMap<u64, SocketAddr>,
    tx: Mutex<Sender<In>>,
    leader: AtomicU64,
    term: AtomicU64,
    commit: AtomicU64,
}

impl Node {
    /// Starts this supernode's member of the group `peers` (in `SUPERNODE`'s order: the
    /// first is id 1), `me` being its index there from 0. `local` is the address its
    /// connections to the others leave from; `log` the file that keeps its log (`None`:
    /// memory only, for tests).
    pub fn start(
        peers: Vec<SocketAddr>,
        me: usize,
        secret: GridSecret,
        local: Option<IpAddr>,
        log: Option<PathBuf>,
        sm: impl Apply,
    ) -> Result<Arc<Node>, String> {
        let ids: Vec<u64> = (1..=peers.len() as u64).collect();
        let me_id = me as u64 + 1;
        let cfg = raft::Config {
            id: me_id,
            election_tick: ELECTION_TICKS,
            heartbeat_tick: HEARTBEAT_TICKS,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        cfg.validate().map_err(|e| e.to_string())?;
        let storage = MemStorage::new_with_conf_state(ConfState::from((ids.clone(), vec![])));
        let group = format!("p2pmpi jel raft 1 {me_id} {peers:?}");
        let disk = match log {
            Some(path) => Some(Disk::open(&path, &group, &storage).map_err(|e| format!("{}: {e}", path.display()))?),
            None => None,
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let raw = RawNode::new(&cfg, storage, &logger).map_err(|e| e.to_string())?;
        let (tx, rx) = std::sync::mpsc::channel();
        let node = Arc::new(Node {
            me: me_id,
            peers: ids.iter().copied().zip(peers.iter().copied()).collect(),
            tx: Mutex::new(tx.clone()),
            leader: AtomicU64::new(0),
            term: AtomicU64::new(0),
            commit: AtomicU64::new(0),
        });
        let n = node.clone();
        let driver = Driver { node: n, raw, rx, tx, secret, local, out: HashMap::new(), sm, disk };
        std::thread::Builder::new().name("jel-raft".into()).spawn(move || driver.run()).map_err(|e| e.to_string())?;
        info!("jel raft: supernode {me_id} of {} ({:?})", peers.len(), peers);
        Ok(node)
    }

    /// Proposes a command (dropped unless this supernode leads when the node reads it).
    pub fn propose(&self, cmd: &Command) {
        if let Ok(data) = postcard::to_allocvec(cmd) {
            let _ = self.tx.lock().send(In::Propose(data));
        }
    }

    pub fn status(&self) -> Status {
        Status {
            me: self.me,
            leader: self.leader.load(Ordering::SeqCst),
            term: self.term.load(Ordering::SeqCst),
            commit: self.commit.load(Ordering::SeqCst),
        }
    }

    /// This supernode leads.
    pub fn leads(&self) -> bool {
        self.leader.load(Ordering::SeqCst) == self.me
    }

    /// The leader's address, if one is known.
    pub fn leader_addr(&self) -> Option<SocketAddr> {
        self.peers.get(&self.leader.load(Ordering::SeqCst)).copied()
    }

    /// Reads the messages of the peer supernode `from` on `conn` (opened with
    /// [`SnRequest::Raft`]) until it ends; blocks.
    pub fn serve_peer(&self, mut conn: SecureConn, from: u64) {
        if from == self.me || !self.peers.contains_key(&from) {
            debug!("jel raft: a connection claims to be supernode {from}, not a peer: closed");
            return;
        }
        conn.set_max_record(net::MAX_RECORD);
        let _ = conn.set_read_timeout(None);
        loop {
            match conn.recv::<Vec<u8>>() {
                Ok(Some(bytes)) => {
                    let m = match Message::parse_from_bytes(&bytes) {
                        Ok(m) if m.from == from && m.to == self.me => m,
                        Ok(m) => {
                            debug!("jel raft: supernode {from} sent a message from {} to {}: closed", m.from, m.to);
                            return;
                        }
                        Err(e) => {
                            debug!("jel raft: supernode {from} sent a record that does not decode ({e}): closed");
                            return;
                        }
                    };
                    if self.tx.lock().send(In::Step(Box::new(m))).is_err() {
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    debug!("jel raft: connection of supernode {from} ended: {e}");
                    return;
                }
            }
        }
    }
}

struct Driver<A: Apply> {
    node: Arc<Node>,
    raw: RawNode<MemStorage>,
    rx: Receiver<In>,
    tx: Sender<In>,
    secret: GridSecret,
    local: Option<IpAddr>,
    out: HashMap<u64, (u64, SyncSender<Vec<u8>>)>,
    sm: A,
    disk: Option<Disk>,
}

impl<A: Apply> Driver<A> {
    fn run(mut self) {
        let mut next_tick = Instant::now() + TICK;
        let mut leading = false;
        let mut leader = 0u64;
        loop {
            let wait = next_tick.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(wait) {
                Ok(In::Step(m)) => {
                    if let Err(e) = self.raw.step(*m) {
                        debug!("jel raft: a message refused: {e}");
                    }
                }
                Ok(In::Propose(data)) => {
                    if self.raw.raft.state == StateRole::Leader {
                        if let Err(e) = self.raw.propose(vec![], data) {
                            debug!("jel raft: a proposal dropped: {e}");
                        }
                    }
                }
                Ok(In::Unreachable(id)) => self.raw.report_unreachable(id),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if Instant::now() >= next_tick {
                self.raw.tick();
                next_tick += TICK;
                if next_tick < Instant::now() {
                    next_tick = Instant::now() + TICK;
                }
            }
            if self.raw.has_ready() {
                self.ready();
            }
            let (l, role) = (self.raw.raft.leader_id, self.raw.raft.state);
            let now_leading = role == StateRole::Leader;
            self.node.term.store(self.raw.raft.term, Ordering::SeqCst);
            self.node.commit.store(self.raw.raft.raft_log.committed, Ordering::SeqCst);
            if l != leader || now_leading != leading {
                leader = l;
                leading = now_leading;
                self.node.leader.store(l, Ordering::SeqCst);
                info!(
                    "jel raft: term {}: {}",
                    self.raw.raft.term,
                    if leading {
                        "this supernode leads".to_string()
                    } else if l == 0 {
                        "no leader".to_string()
                    } else {
                        format!("supernode {l} leads")
                    }
                );
                self.sm.role(leading, self.node.peers.get(&l).copied());
            }
        }
    }

    fn ready(&mut self) {
        let mut rd = self.raw.ready();
        self.send(rd.take_messages());
        if !rd.snapshot().is_empty() {
            // Never produced: the log is not compacted (see the module's "Storage").
            if let Err(e) = self.raw.mut_store().wl().apply_snapshot(rd.snapshot().clone()) {
                warn!("jel raft: a snapshot refused: {e}");
            }
        }
        let committed = rd.take_committed_entries();
        self.apply(committed);
        if !rd.entries().is_empty() {
            if let Err(e) = self.raw.mut_store().wl().append(rd.entries()) {
                warn!("jel raft: entries not stored: {e}");
            }
            if let Some(d) = &mut self.disk {
                d.entries(rd.entries());
            }
        }
        if let Some(hs) = rd.hs() {
            self.raw.mut_store().wl().set_hardstate(hs.clone());
            if let Some(d) = &mut self.disk {
                d.hard_state(hs);
            }
        }
        if let Some(d) = &mut self.disk {
            d.flush();
        }
        self.send(rd.take_persisted_messages());
        let mut light = self.raw.advance(rd);
        if let Some(c) = light.commit_index() {
            self.raw.mut_store().wl().mut_hard_state().set_commit(c);
            if let Some(d) = &mut self.disk {
                d.commit(c);
                d.flush();
            }
        }
        self.send(light.take_messages());
        let committed = light.take_committed_entries();
        self.apply(committed);
        self.raw.advance_apply();
    }

    fn apply(&mut self, entries: Vec<Entry>) {
        for e in entries {
            if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
                // The leader's empty entry of its term; no membership changes are made.
                continue;
            }
            match postcard::from_bytes::<Command>(&e.data) {
                Ok(cmd) => self.sm.apply(cmd),
                Err(err) => warn!("jel raft: entry {} does not decode ({err}): skipped", e.index),
            }
        }
    }

    fn send(&mut self, msgs: Vec<Message>) {
        for m in msgs {
            let to = m.to;
            let Some(&addr) = self.node.peers.get(&to) else { continue };
            let Ok(bytes) = m.write_to_bytes() else { continue };
            if !self.out.contains_key(&to) {
                let (conn, qtx) = self.open(to, addr);
                self.out.insert(to, (conn, qtx));
            }
            let (_, q) = self.out.get(&to).expect("opened");
            match q.try_send(bytes) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {}
                Err(TrySendError::Disconnected(_)) => {
                    // Its writer ended: the next message opens a new connection.
                    self.out.remove(&to);
                    self.raw.report_unreachable(to);
                }
            }
        }
    }

    /// A connection to the peer `to`, written by a thread of its own from a bounded queue.
    fn open(&self, to: u64, addr: SocketAddr) -> (u64, SyncSender<Vec<u8>>) {
        let (qtx, qrx) = std::sync::mpsc::sync_channel::<Vec<u8>>(PEER_QUEUE);
        let conn = net::conn_id();
        let (secret, local, me, tx) = (self.secret.clone(), self.local, self.node.me, self.tx.clone());
        let started = net::spawn("jel-raft-out", move || {
            let opened = SecureConn::connect_from(local, addr, &secret, Duration::from_secs(2)).and_then(|mut c| {
                // Member mode: the peer must be a member with the supernode role.
                require_role(c.peer_member(), Role::Supernode)?;
                c.set_max_record(net::MAX_RECORD);
                c.send(&SnRequest::Raft { from: me })?;
                Ok(c)
            });
            let mut c = match opened {
                Ok(c) => c,
                Err(e) => {
                    debug!("jel raft: cannot reach supernode {to} at {addr}: {e}");
                    let _ = tx.send(In::Unreachable(to));
                    return;
                }
            };
            while let Ok(bytes) = qrx.recv() {
                if let Err(e) = c.send(&bytes) {
                    debug!("jel raft: connection to supernode {to} ended: {e}");
                    let _ = tx.send(In::Unreachable(to));
                    return;
                }
            }
        });
        if !started {
            let _ = self.tx.send(In::Unreachable(to));
        }
        (conn, qtx)
    }
}

/// The log's file: records `[tag u8][length u32 LE][payload]` — 0 the group (the first
/// record: which supernode of which `SUPERNODE` list wrote it), 1 a hard state, 2 an entry
/// (raft-rs's protobuf encoding both), 3 a commit index (u64 LE). Read back in order into
/// the [`MemStorage`] (an entry overwrites the ones from its index on, as when it was
/// appended); a record cut short by a crash ends the file.
struct Disk {
    file: std::io::BufWriter<std::fs::File>,
    path: PathBuf,
}

impl Disk {
    fn open(path: &Path, group: &str, storage: &MemStorage) -> std::io::Result<Disk> {
        let mut bytes = Vec::new();
        match std::fs::File::open(path) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut good = 0usize;
        let mut records = 0usize;
        let mut pos = 0usize;
        let mut ours = bytes.is_empty();
        while pos + 5 <= bytes.len() {
            let tag = bytes[pos];
            let len = u32::from_le_bytes(bytes[pos + 1..pos + 5].try_into().expect("4 bytes")) as usize;
            let Some(body) = bytes.get(pos + 5..pos + 5 + len) else { break };
            if records == 0 {
                if tag != 0 || body != group.as_bytes() {
                    break;
                }
                ours = true;
            } else {
                let last = raft::Storage::last_index(storage).unwrap_or(0);
                let mut core = storage.wl();
                let ok = match tag {
                    1 => HardState::parse_from_bytes(body).map(|hs| core.set_hardstate(hs)).is_ok(),
                    2 => match Entry::parse_from_bytes(body) {
                        Ok(e) if e.index >= 1 && e.index <= last + 1 => core.append(&[e]).is_ok(),
                        _ => false,
                    },
                    3 if len == 8 => {
                        let c = u64::from_le_bytes(body.try_into().expect("8 bytes"));
                        core.mut_hard_state().set_commit(c);
                        true
                    }
                    _ => false,
                };
                if !ok {
                    break;
                }
            }
            pos += 5 + len;
            good = pos;
            records += 1;
        }
        if !ours {
            let old = path.with_extension("old");
            warn!(
                "jel raft: {} was written for another group of supernodes: moved to {}",
                path.display(),
                old.display()
            );
            std::fs::rename(path, &old)?;
            good = 0;
            records = 0;
        }
        let file = std::fs::OpenOptions::new().create(true).write(true).truncate(false).open(path)?;
        // What follows the last whole record (a write cut short) is dropped.
        file.set_len(good as u64)?;
        let mut file = std::io::BufWriter::new(file);
        std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))?;
        let mut d = Disk { file, path: path.to_path_buf() };
        if records == 0 {
            d.record(0, group.as_bytes());
            d.flush();
        } else {
            let last = raft::Storage::last_index(storage).unwrap_or(0);
            let core = storage.rl();
            info!(
                "jel raft: {} read back: {last} entries, term {}, commit {}",
                path.display(),
                core.hard_state().term,
                core.hard_state().commit
            );
        }
        Ok(d)
    }

    fn record(&mut self, tag: u8, body: &[u8]) {
        let mut head = [tag, 0, 0, 0, 0];
        head[1..].copy_from_slice(&(body.len() as u32).to_le_bytes());
        if let Err(e) = self.file.write_all(&head).and_then(|()| self.file.write_all(body)) {
            warn!("jel raft: cannot write {}: {e}", self.path.display());
        }
    }

    fn entries(&mut self, ents: &[Entry]) {
        for e in ents {
            if let Ok(b) = e.write_to_bytes() {
                self.record(2, &b);
            }
        }
    }

    fn hard_state(&mut self, hs: &HardState) {
        if let Ok(b) = hs.write_to_bytes() {
            self.record(1, &b);
        }
    }

    fn commit(&mut self, c: u64) {
        self.record(3, &c.to_le_bytes());
    }

    fn flush(&mut self) {
        if let Err(e) = self.file.flush() {
            warn!("jel raft: cannot write {}: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage as _;

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        Entry { index, term, data: data.to_vec().into(), ..Default::default() }
    }

    fn storage() -> MemStorage {
        MemStorage::new_with_conf_state(ConfState::from((vec![1, 2, 3], vec![])))
    }

    fn entries(s: &MemStorage) -> Vec<(u64, u64, Vec<u8>)> {
        let last = s.last_index().unwrap();
        if last == 0 {
            return Vec::new();
        }
        let got = s.entries(1, last + 1, None, raft::GetEntriesContext::empty(false)).unwrap();
        got.into_iter().map(|e| (e.index, e.term, e.data.to_vec())).collect()
    }

    /// What was written is read back: entries (a later append overwriting a suffix, as Raft
    /// does when a new leader's log wins), the hard state, the commit; a record cut short
    /// by a crash is dropped and the file goes on after the last whole one; a file of
    /// another group is set aside.
    #[test]
    fn the_log_file_is_read_back_as_it_was_written() {
        let dir = std::env::temp_dir().join(format!("p2pmpi-jel-raft-disk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("jel-raft.log");
        let group = "p2pmpi jel raft 1 1 [a, b, c]";
        {
            let s = storage();
            let mut d = Disk::open(&path, group, &s).unwrap();
            d.entries(&[entry(1, 1, b"one"), entry(2, 1, b"two"), entry(3, 1, b"three")]);
            let hs = HardState { term: 2, vote: 3, ..Default::default() };
            d.hard_state(&hs);
            // A new leader's entries replace the third one.
            d.entries(&[entry(3, 2, b"three again"), entry(4, 2, b"four")]);
            d.commit(3);
            d.flush();
        }
        let s = storage();
        drop(Disk::open(&path, group, &s).unwrap());
        let want = vec![
            (1, 1, b"one".to_vec()),
            (2, 1, b"two".to_vec()),
            (3, 2, b"three again".to_vec()),
            (4, 2, b"four".to_vec()),
        ];
        assert_eq!(entries(&s), want);
        let hs = s.initial_state().unwrap().hard_state;
        assert_eq!((hs.term, hs.vote, hs.commit), (2, 3, 3));

        // A crash in the middle of a record: the whole ones are kept, and what is written
        // next follows them.
        let len = std::fs::metadata(&path).unwrap().len();
        {
            let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
            f.write_all(&[2, 200, 0, 0, 0, 1, 2, 3]).unwrap();
        }
        {
            let s = storage();
            let mut d = Disk::open(&path, group, &s).unwrap();
            assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
            d.entries(&[entry(5, 2, b"five")]);
            d.flush();
        }
        let s = storage();
        drop(Disk::open(&path, group, &s).unwrap());
        assert_eq!(entries(&s).len(), 5);

        // Another group's file is moved aside; the supernode starts empty.
        let s = storage();
        drop(Disk::open(&path, "p2pmpi jel raft 1 2 [x, y, z]", &s).unwrap());
        assert!(entries(&s).is_empty());
        assert!(path.with_extension("old").exists());
        let s = storage();
        drop(Disk::open(&path, "p2pmpi jel raft 1 2 [x, y, z]", &s).unwrap());
        assert!(entries(&s).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn commands_round_trip() {
        let cmds = [
            Command::Create { pool: "p".into(), config: central::Config::default(), seed: 7 },
            Command::Input { pool: "p".into(), entry: vec![1, 2, 3] },
            Command::Forget { pool: "p".into(), applied: 9 },
        ];
        for c in cmds {
            let b = postcard::to_allocvec(&c).unwrap();
            assert_eq!(postcard::from_bytes::<Command>(&b).unwrap(), c);
        }
    }
}
