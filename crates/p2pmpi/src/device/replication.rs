//! The replica coordination protocol's side of the TCP device (thesis §4.3, SPEC §10): the
//! master's fan-out and commits, the backup table (copies and lent buffers), takeover and
//! resends, synchronous acknowledgements, suspicions and declared deaths (fencing), and the
//! choice points that keep replicas on their master's path. The decisions are the pure
//! [`p2pmpi_core::replication`] and [`p2pmpi_core::fencing`] machines; this module moves the
//! frames.

use super::conn::{Conn, Out, Payload, RState};
use super::failpoints;
use super::*;

/// One replicated send by a master (thesis algorithm 4): transmissions to the alive replicas
/// of the destination still being written; once all are, the MID is committed to this rank's
/// other replicas and the user's request (if any: resends after a takeover have none)
/// completes.
#[derive(Debug)]
pub(super) struct Fanout {
    pub(super) pending: usize,
    pub(super) mid: Mid,
    pub(super) user: Option<ReqId>,
    pub(super) subs: Vec<ReqId>,
    /// A synchronous send: the user's request also waits for a destination replica to say
    /// it matched the message.
    pub(super) sync: bool,
    pub(super) acked: bool,
    pub(super) written: bool,
}

/// Messages up to this size are copied into a non-master's backup table (its send returns at
/// once); larger ones are *lent*: the send completes only when the master commits the message
/// (or, after a takeover, when this replica transmitted it itself), so the user's buffer is
/// the backup and nothing is copied.
pub const BACKUP_COPY_LIMIT: usize = EAGER_LIMIT;

/// At most this many bytes of copies in a non-master's backup table: past it, sends are lent
/// too, so a replica running ahead of its master holds a bounded window of unsent payload.
pub const BACKUP_WINDOW: usize = 4 << 20;

/// At most this many bytes of recently committed messages a non-master keeps (and at most
/// [`RECENT_MAX`] of them), to send again if it takes over: a master's write counts as done
/// once its kernel accepted it, and a master killed with unread input resets its connections,
/// which discards what its kernel had not sent yet — messages it had already committed.
/// Receivers drop what they already have (the history table).
pub const RECENT_WINDOW: usize = 8 << 20;
/// At most this many recently committed messages kept.
pub const RECENT_MAX: usize = 1 << 16;

/// A message in a non-master's backup table (thesis algorithm 4).
#[derive(Debug)]
pub(super) enum Backup {
    /// A copy (small messages, within [`BACKUP_WINDOW`]).
    Copy(Vec<u8>),
    /// The user's own buffer, valid until request `req` completes.
    Lent { ptr: *const u8, len: usize, req: ReqId },
}

/// The replication state of a process of a job run with `-r R` (R > 1).
pub(super) struct Replication {
    pub(super) coord: Coordinator<Backup>,
    /// Bytes of copies in the backup table.
    pub(super) backup_bytes: usize,
    /// Copies of recently committed messages, oldest first ([`RECENT_WINDOW`]).
    pub(super) recent: VecDeque<(Mid, Vec<u8>)>,
    pub(super) recent_bytes: usize,
    pub(super) fanouts: Vec<Option<Fanout>>,
    pub(super) free_fanouts: Vec<usize>,
    /// MIDs whose transmissions are all written: to commit.
    pub(super) commits: VecDeque<Mid>,
    /// The backup table handed over by a takeover: to transmit and commit.
    pub(super) resends: VecDeque<(Mid, Backup)>,
    /// Messages that arrived before their turn, per (comm, source, tag), by sequence.
    pub(super) early: HashMap<(u32, i32, i32), EarlyQueue>,
    /// Synchronous messages accepted but not matched yet: (comm, source, tag, seq).
    pub(super) sync_unmatched: std::collections::HashSet<(u32, i32, i32, u64)>,
    /// Since when messages wait in `early` for an earlier one.
    pub(super) early_since: Option<Instant>,
    /// Slots this process suspects (reported to the launcher, which alone declares deaths):
    /// nothing more is sent to them or read from them.
    pub(super) suspected: Vec<bool>,
    /// Choice points of this replica ([`Choices`]): the master's outcomes it learned.
    pub(super) choices: Choices,
    /// The master's wildcard receives not complete yet: their choice point and communicator.
    pub(super) choice_of: HashMap<ReqId, (u64, u32)>,
    /// The message a wildcard receive of the master matched: source, tag, sequence.
    pub(super) matched: HashMap<ReqId, (i32, i32, u64)>,
    /// A non-master's wildcard receives waiting for their master's choice, by choice point.
    pub(super) deferred_recvs: std::collections::BTreeMap<u64, (ReqId, Pattern)>,
    /// Choices of this master to tell its replicas: communicator, point, outcome.
    pub(super) choice_out: VecDeque<(u32, u64, Outcome)>,
    /// Choice frames queued but not written yet (their completions): the master transmits
    /// nothing before they are, so that no message depending on a choice leaves before the
    /// choice reached the replicas.
    pub(super) choice_unwritten: std::collections::HashSet<ReqId>,
    /// Per slot: transmissions to a suspected replica, held until the launcher declares it
    /// dead. They do not count as written before that: a fan-out is committed only once every
    /// live destination has its copy (if the launcher excludes this process instead, its
    /// successor resends them from its backup table).
    pub(super) held: Vec<Vec<ReqId>>,
}

/// Messages of one channel that came before their turn, by sequence: the envelope, the data
/// and whether it is a synchronous send's.
pub(super) type EarlyQueue = BTreeMap<u64, (Envelope, Vec<u8>, bool)>;

pub(super) fn msg_id(m: &Mid) -> MsgId {
    MsgId { comm: m.comm, src: m.src, dst: m.dst, tag: m.tag, seq: m.seq }
}

pub(super) fn mid_of(m: &MsgId) -> Mid {
    Mid { comm: m.comm, src: m.src, dst: m.dst, tag: m.tag, seq: m.seq }
}

impl Engine {
    /// Keeps a copy of a message this replica's master committed, for a while
    /// ([`RECENT_WINDOW`]): sent again if this replica takes over.
    pub(super) fn keep_recent(&mut self, mid: Mid, v: Vec<u8>) {
        let Some(rp) = self.repl.as_mut() else { return };
        rp.recent_bytes += v.len();
        rp.recent.push_back((mid, v));
        while rp.recent_bytes > RECENT_WINDOW || rp.recent.len() > RECENT_MAX {
            let Some((_, v)) = rp.recent.pop_front() else { break };
            rp.recent_bytes -= v.len();
            crate::pool::give(v);
        }
    }

    /// The rank a slot runs.
    pub(super) fn rank_of(&self, slot: i32) -> i32 {
        match &self.layout {
            Some(l) if slot >= 0 => l.rank_of(slot as usize) as i32,
            _ => slot,
        }
    }

    /// A master's transmission of `mid` to the replicas `dests` of its destination; the
    /// commit follows once every one is written ([`Self::fanout_step`]).
    pub(super) fn transmit(&mut self, mid: Mid, data: TxData, dests: Vec<usize>, user: Option<ReqId>, sync: bool) {
        if user.is_some() {
            self.choice_barrier();
        }
        let len = match &data {
            TxData::Raw(_, n) => *n,
            TxData::Owned(v) => v.len(),
        };
        let Some(rp) = self.repl.as_mut() else { return };
        let f = Fanout {
            pending: dests.len() + 1,
            mid,
            user,
            subs: Vec::with_capacity(dests.len()),
            sync: sync && user.is_some(),
            acked: false,
            written: false,
        };
        let fid = match rp.free_fanouts.pop() {
            Some(i) => {
                rp.fanouts[i] = Some(f);
                i
            }
            None => {
                rp.fanouts.push(Some(f));
                rp.fanouts.len() - 1
            }
        };
        for (i, &d) in dests.iter().enumerate() {
            failpoints::before_transmission(i);
            let sub = self.new_req(std::ptr::null_mut(), 0, ReqState::Pending);
            self.reqs[sub].as_mut().expect("new request").parent = Some(fid);
            if let Some(f) = self.repl.as_mut().and_then(|rp| rp.fanouts[fid].as_mut()) {
                f.subs.push(sub);
            }
            let mut h = Header::new(FrameKind::Eager, mid, len as u64);
            if sync {
                h.flags |= p2pmpi_wire::frame::flags::SYNCHRONOUS;
            }
            let payload = match &data {
                _ if len == 0 => Payload::None,
                TxData::Raw(p, n) => Payload::Raw(*p, *n),
                TxData::Owned(v) => Payload::Owned(crate::pool::copy_of(v)),
            };
            let dead = self.repl.as_ref().is_some_and(|rp| rp.coord.is_dead(d));
            if !dead && self.repl.as_ref().is_some_and(|rp| rp.suspected[d]) {
                if let Some(rp) = self.repl.as_mut() {
                    rp.held[d].push(sub);
                }
                continue;
            }
            let cid = if dead { None } else { self.send_conn(d as i32).ok() };
            let cid = cid.filter(|_| self.repl.as_ref().is_some_and(|rp| !rp.suspected[d]));
            if let Some(cid) = cid {
                failpoints::partial_transmission(i, self.conns[cid].as_mut().map(|c| &mut c.stream), &h, &payload);
                let _ = self.push_out(cid, Out::with_completion(h, payload, sub));
                failpoints::written(self, cid);
            }
            // Not queued (its replica is dead or the write failed): it counts as done, unless
            // the replica became suspected meanwhile (then it waits for the verdict).
            let held = self.repl.as_ref().is_some_and(|rp| rp.held[d].contains(&sub));
            if !held
                && self.reqs[sub]
                    .as_ref()
                    .is_some_and(|r| r.parent == Some(fid) && matches!(r.state, ReqState::Pending))
                && !self.conns.iter().flatten().any(|c| c.has_completion(sub))
            {
                self.complete(sub, Ok(StatusInfo { source: d as i32, tag: mid.tag, len: 0, cancelled: false }));
            }
        }
        failpoints::after_transmissions();
        // The extra count taken above: the fan-out completes only once every transmission
        // was queued (a fast one must not commit before the others are even sent).
        self.fanout_step(fid);
    }

    /// Waits until every choice frame is written (or its replica is declared dead): what the
    /// master sends next may depend on those choices, and a replica that takes over must know
    /// them. Written at once unless a replica stopped reading for a long while.
    pub(super) fn choice_barrier(&mut self) {
        while self.fatal.is_none() && self.repl.as_ref().is_some_and(|rp| !rp.choice_unwritten.is_empty()) {
            self.progress(None, Some(Duration::from_millis(1)));
            if crate::failure::PENDING.load(std::sync::atomic::Ordering::Relaxed) {
                for k in crate::failure::take_pending() {
                    self.peer_failed(k);
                }
            }
            if let Some(limit) = crate::failure::send_timeout() {
                self.check_stalled_sends(limit);
            }
        }
    }

    /// One transmission of fan-out `f` is done; after the last, the MID goes to the commits.
    pub(super) fn fanout_step(&mut self, f: usize) {
        let Some(rp) = self.repl.as_mut() else { return };
        let Some(fo) = rp.fanouts[f].as_mut() else { return };
        if !fo.written {
            fo.pending -= 1;
            if fo.pending > 0 {
                return;
            }
            fo.written = true;
            rp.commits.push_back(fo.mid);
        }
        if fo.sync && !fo.acked {
            return;
        }
        let fo = rp.fanouts[f].take().expect("live fan-out");
        rp.free_fanouts.push(f);
        if let Some(u) = fo.user {
            let st = StatusInfo { source: fo.mid.dst as i32, tag: fo.mid.tag, len: 0, cancelled: false };
            self.complete(u, Ok(st));
        }
    }

    /// A destination replica matched synchronous message `mid`.
    pub(super) fn sync_acked(&mut self, mid: Mid) {
        let Some(rp) = self.repl.as_mut() else { return };
        let Some(f) = rp.fanouts.iter().position(|f| f.as_ref().is_some_and(|f| f.sync && f.mid == mid && !f.acked))
        else {
            return;
        };
        let fo = rp.fanouts[f].as_mut().expect("found");
        fo.acked = true;
        if fo.written {
            let fo = rp.fanouts[f].take().expect("found");
            rp.free_fanouts.push(f);
            if let Some(u) = fo.user {
                let st = StatusInfo { source: mid.dst as i32, tag: mid.tag, len: 0, cancelled: false };
                self.complete(u, Ok(st));
            }
        }
    }

    /// A synchronous message was matched by a receive here: tell every alive replica of its
    /// sender (whichever is master now).
    pub(super) fn ack_sync(&mut self, env: &Envelope) {
        let Some(rp) = self.repl.as_mut() else { return };
        rp.sync_unmatched.remove(&(env.comm, env.src, env.tag, env.seq));
        let mid = Mid { comm: env.comm, src: env.src as u32, dst: self.rank as u32, tag: env.tag, seq: env.seq };
        let to: Vec<usize> = rp.coord.alive_slots(env.src as usize).filter(|&s| !rp.suspected[s]).collect();
        for slot in to {
            self.deferred.push((slot as i32, Out::new(Header::new(FrameKind::ReadyToRecv, mid, 0), Payload::None)));
        }
    }

    /// A non-master's wildcard receives whose master's choice arrived are posted, exact; after
    /// a takeover, the ones still undecided are this master's to decide.
    pub(super) fn resolve_choices(&mut self) {
        loop {
            let Some(rp) = self.repl.as_mut() else { return };
            let Some((&c, _)) = rp.deferred_recvs.first_key_value() else { return };
            let pat = rp.deferred_recvs[&c].1;
            let o = match rp.choices.take(c) {
                Some(o) => {
                    if rp.coord.is_master() {
                        rp.choice_out.push_back((pat.comm, c, o));
                    }
                    Some(o)
                }
                None if rp.coord.is_master() => None,
                // Points are followed in order: a later one waits for this one.
                None => return,
            };
            let (r, pat) = rp.deferred_recvs.remove(&c).expect("present");
            match o {
                Some(o) => self.post(r, exact(pat, o)),
                None => {
                    rp_choice_of(self, r, c, pat.comm);
                    self.post(r, pat);
                }
            }
        }
    }

    /// Sends the pending commits, and after a takeover transmits the backup table.
    pub(super) fn flush_replication(&mut self) {
        self.resolve_choices();
        loop {
            let Some(rp) = self.repl.as_mut() else { return };
            if let Some((comm, c, o)) = rp.choice_out.pop_front() {
                // Before anything else: what follows may depend on the choice.
                let mid = match o {
                    Some((src, tag, _)) => Mid { comm, src: src as u32, dst: 0, tag, seq: c },
                    None => Mid { comm, src: 0, dst: 0, tag: 0, seq: c },
                };
                let mut h = Header::new(FrameKind::Choice, mid, o.map_or(0, |m| m.2));
                if o.is_none() {
                    h.flags |= p2pmpi_wire::frame::flags::NOTHING;
                }
                // In index order: the successor of a dying master is told first.
                let targets: Vec<usize> = rp.coord.commit_targets().into_iter().filter(|&t| !rp.suspected[t]).collect();
                for t in targets {
                    if let Ok(cid) = self.send_conn(t as i32) {
                        let req = self.new_req(std::ptr::null_mut(), 0, ReqState::Pending);
                        if let Some(rp) = self.repl.as_mut() {
                            rp.choice_unwritten.insert(req);
                        }
                        if self.push_out(cid, Out::with_completion(h, Payload::None, req)).is_err() {
                            self.complete(req, Ok(StatusInfo { source: t as i32, tag: 0, len: 0, cancelled: false }));
                        }
                    }
                }
                continue;
            }
            if let Some((mid, data)) = rp.resends.pop_front() {
                let dests = rp.coord.destinations(mid.dst as usize);
                match data {
                    Backup::Copy(v) => {
                        rp.backup_bytes -= v.len();
                        self.transmit(mid, TxData::Owned(v), dests, None, false)
                    }
                    // The lent send completes once this replica transmitted it.
                    Backup::Lent { ptr, len, req } => {
                        self.transmit(mid, TxData::Raw(ptr, len), dests, Some(req), false)
                    }
                }
                continue;
            }
            let Some(mid) = rp.commits.pop_front() else { return };
            let targets: Vec<usize> = rp.coord.commit_targets().into_iter().filter(|&t| !rp.suspected[t]).collect();
            for (i, t) in targets.into_iter().enumerate() {
                let h = Header::new(FrameKind::Commit, mid, 0);
                if let Ok(cid) = self.send_conn(t as i32) {
                    failpoints::partial_commit(i, self.conns[cid].as_mut().map(|c| &mut c.stream), &h);
                    let _ = self.push_out(cid, Out::new(h, Payload::None));
                    failpoints::written(self, cid);
                }
            }
            failpoints::after_commits();
        }
    }

    /// A replica was lost (its connection ended without `Bye`, the failure detector
    /// confirmed it, or a send to it stalled): algorithm 7.
    pub(super) fn slot_failed(&mut self, slot: i32, cause: &str) {
        let Some(rp) = self.repl.as_mut() else {
            self.set_fatal(Error::PeerLost { rank: slot, cause: cause.to_string() });
            return;
        };
        if slot < 0 || slot as usize >= self.peers.len() || self.peers[slot as usize].bye {
            return;
        }
        let rec = rp.coord.on_failure(slot as usize);
        match rec {
            Recovery::Nothing => return,
            Recovery::Replica { .. } => {}
            Recovery::TookOver { resend } => {
                if debug_replication() {
                    eprintln!(
                        "p2pmpi: slot {}: took over as master of rank {}, resending {}",
                        self.slot,
                        self.rank,
                        resend.len()
                    );
                }
                // What the dead master committed lately first (its last writes may have died
                // in its kernel), then what it had not committed.
                let recent = std::mem::take(&mut rp.recent);
                rp.recent_bytes = 0;
                for (m, v) in recent {
                    rp.backup_bytes += v.len();
                    rp.resends.push_back((m, Backup::Copy(v)));
                }
                rp.resends.extend(resend.into_iter().map(|(m, d)| (mid_of(&m), d)));
            }
            Recovery::RankLost { rank } => {
                self.set_fatal(Error::PeerLost {
                    rank: rank as i32,
                    cause: format!("all replicas for that rank failed (the last one: {cause})"),
                });
            }
        }
        if debug_replication() {
            eprintln!("p2pmpi: slot {}: slot {slot} failed: {cause}", self.slot);
        }
        self.drop_peer(slot, false);
        let held = self.repl.as_mut().map(|rp| std::mem::take(&mut rp.held[slot as usize])).unwrap_or_default();
        for r in held {
            self.complete(r, Ok(StatusInfo { source: slot, tag: 0, len: 0, cancelled: false }));
        }
    }

    /// This process suspects `slot` (its connection broke, or a send to it stalled). Only the
    /// launcher declares deaths (fencing, [`p2pmpi_core::fencing`]): the suspicion is reported
    /// to it, and [`Self::slot_failed`] runs when it announces the death. Meanwhile nothing
    /// more goes to the slot or is read from it (the launcher declares every suspect dead, so
    /// nothing is lost for a live process).
    pub(super) fn suspect_slot(&mut self, slot: i32, cause: &str) {
        let Some(rp) = self.repl.as_mut() else { return };
        if slot < 0 || slot as usize >= rp.suspected.len() || slot == self.slot {
            return;
        }
        let first = !std::mem::replace(&mut rp.suspected[slot as usize], true);
        if first && !rp.coord.is_dead(slot as usize) {
            if debug_replication() {
                eprintln!("p2pmpi: slot {}: suspects slot {slot}: {cause}", self.slot);
            }
            let l = rp.coord.layout();
            let detail =
                format!("rank {} replica {} failed: {cause}", l.rank_of(slot as usize), l.replica_of(slot as usize));
            crate::failure::suspect(self.slot as usize, slot as usize, &detail);
        }
        // A replica that said goodbye has everything it needs: nothing to wait for.
        let hold = !self.peers[slot as usize].bye;
        if !hold {
            let held = self.repl.as_mut().map(|rp| std::mem::take(&mut rp.held[slot as usize])).unwrap_or_default();
            for r in held {
                self.complete(r, Ok(StatusInfo { source: slot, tag: 0, len: 0, cancelled: false }));
            }
        }
        self.drop_peer(slot, hold);
    }

    /// Drops every connection with `slot`: nothing it might still send (a frozen process that
    /// wakes up) is read. Queued transmissions to it count as done, or with `hold` wait for
    /// the launcher's verdict.
    pub(super) fn drop_peer(&mut self, slot: i32, hold: bool) {
        let p = &mut self.peers[slot as usize];
        p.send_conn = None;
        let cids = std::mem::take(&mut p.conns);
        let mut done = Vec::new();
        for cid in cids {
            if let Some(mut conn) = self.conns[cid].take() {
                let _ = self.poll.registry().deregister(&mut conn.stream);
                done.extend(conn.take_completions());
                self.undo_stream(&mut conn);
            }
        }
        self.deferred.retain(|(p, _)| *p != slot);
        if hold {
            if let Some(rp) = self.repl.as_mut() {
                // Choice frames to a suspect of this very rank are moot: it will be declared.
                let (choices, held): (Vec<ReqId>, Vec<ReqId>) =
                    done.into_iter().partition(|r| rp.choice_unwritten.contains(r));
                rp.held[slot as usize].extend(held);
                for r in choices {
                    self.complete(r, Ok(StatusInfo { source: slot, tag: 0, len: 0, cancelled: false }));
                }
                return;
            }
        }
        for r in done {
            self.complete(r, Ok(StatusInfo { source: slot, tag: 0, len: 0, cancelled: false }));
        }
    }

    /// Writes a connection's queue out, waiting as long as it takes (fault injection only).
    #[cfg(feature = "failpoints")]
    pub(super) fn flush_blocking(&mut self, cid: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.conns[cid].as_ref().is_some_and(|c| !c.outq.is_empty()) && Instant::now() < deadline {
            self.flush_conn(cid);
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// A connection to a dead replica goes away in the middle of a message streaming into
    /// a receive: the receive waits again for the message, which the sender's successor
    /// will send.
    pub(super) fn undo_stream(&mut self, conn: &mut Conn) {
        let Some((env, pat, pos)) = conn.stream_undo.take() else { return };
        let RState::Stream { req, .. } = conn.rstate else { return };
        conn.rstate = RState::Header;
        if debug_replication() {
            eprintln!("p2pmpi: slot {}: undoing the match of {env:?} (its sender died mid-message)", self.slot);
        }
        if self.matcher.unarrive(&env, pat, pos, req) {
            if let Some(t) = self.trace.as_mut() {
                if let Some(i) = t.iter().rposition(|m| (m.0, m.1, m.2, m.3) == (env.comm, env.src, env.tag, env.seq)) {
                    t.remove(i);
                }
            }
        } else {
            self.complete(
                req,
                Err(Error::PeerLost {
                    rank: env.src,
                    cause: "it died in the middle of a message whose successors were already received".into(),
                }),
            );
        }
    }

    /// Whether a non-master still waits for commits (it must not leave before its master
    /// committed what it keeps: it might have to take over).
    pub fn backup_pending(&self) -> bool {
        self.repl.as_ref().is_some_and(|rp| !rp.coord.is_master() && rp.coord.backup_len() > 0)
    }

    /// A choice point of a probe (`immediate`: an immediate one): its number in a replicated
    /// job when its outcome may differ between replicas (a wildcard, or any immediate probe).
    pub fn probe_point(&mut self, pat: &Pattern, immediate: bool) -> Option<u64> {
        let rp = self.repl.as_mut()?;
        (immediate || pat.src.is_none() || pat.tag.is_none()).then(|| rp.choices.point())
    }

    /// The outcome of probe choice point `c` for this replica: `None` while it must wait (a
    /// non-master not told yet, or the chosen message not here yet; a blocking probe that
    /// found nothing), else what the probe returns. Without a choice point, a plain probe.
    pub fn probe_at(&mut self, c: Option<u64>, pat: Pattern, immediate: bool) -> Option<Option<Envelope>> {
        let Some(c) = c else {
            let found = self.probe(pat);
            return if immediate { Some(found) } else { found.map(Some) };
        };
        let rp = self.repl.as_mut().expect("choice points only with replicas");
        match rp.choices.knows(c) {
            Some(o) => {
                let found = match o {
                    None => None,
                    Some(_) => Some(self.probe(exact(pat, o))?),
                };
                let rp = self.repl.as_mut().expect("replicated");
                rp.choices.take(c);
                if rp.coord.is_master() {
                    rp.choice_out.push_back((pat.comm, c, o));
                    self.flush_deferred();
                }
                Some(found)
            }
            None if rp.coord.is_master() => {
                let found = self.probe(pat);
                if found.is_none() && !immediate {
                    return None;
                }
                let o = found.map(|e| (e.src, e.tag, e.seq));
                self.repl.as_mut().expect("replicated").choice_out.push_back((pat.comm, c, o));
                self.flush_deferred();
                Some(found)
            }
            None => None,
        }
    }

    /// A choice point of a test or a wait on several requests, in a replicated job (which of
    /// them completed depends on timing, which differs between replicas).
    pub fn completion_point(&mut self) -> Option<u64> {
        Some(self.repl.as_mut()?.choices.point())
    }

    /// Which of `ids` (`None`: an inactive slot) count as complete at choice point `c`:
    /// `None` while this replica must wait (its master's outcome not known yet, or a request
    /// the master saw complete not complete here yet; with `block`, nothing complete yet).
    /// Without a choice point, the requests complete now. At most 64 indices from the first
    /// are reported at once.
    pub fn completed_at(&mut self, c: Option<u64>, ids: &[Option<ReqId>], block: bool) -> Option<Vec<usize>> {
        let done_now = |e: &Engine| -> Vec<usize> {
            ids.iter().enumerate().filter_map(|(i, id)| id.filter(|&id| e.is_done(id)).map(|_| i)).collect()
        };
        let Some(c) = c else {
            let d = done_now(self);
            return (!(block && d.is_empty())).then_some(d);
        };
        let rp = self.repl.as_mut().expect("choice points only with replicas");
        let comm = u32::MAX;
        match rp.choices.knows(c) {
            Some(o) => {
                let want = indices_of(o);
                if !want.iter().all(|&i| ids.get(i).copied().flatten().is_some_and(|id| self.is_done(id))) {
                    return None;
                }
                let rp = self.repl.as_mut().expect("replicated");
                rp.choices.take(c);
                if rp.coord.is_master() {
                    rp.choice_out.push_back((comm, c, o));
                    self.flush_deferred();
                }
                Some(want)
            }
            None if rp.coord.is_master() => {
                let d = done_now(self);
                if block && d.is_empty() {
                    return None;
                }
                let o = outcome_of(&d);
                self.repl.as_mut().expect("replicated").choice_out.push_back((comm, c, o));
                self.flush_deferred();
                Some(indices_of(o))
            }
            None => None,
        }
    }

    /// Like [`Self::probe_at`], taking the message out (matched probes).
    pub fn mprobe_at(&mut self, c: Option<u64>, pat: Pattern, immediate: bool) -> Option<Option<Matched>> {
        if c.is_none() {
            let m = self.mprobe(pat);
            return if immediate { Some(m) } else { m.map(Some) };
        }
        let env = self.probe_at(c, pat, immediate)?;
        Some(env.map(|e| {
            let exact = Pattern { comm: e.comm, src: Some(e.src), tag: Some(e.tag) };
            self.mprobe(exact).expect("the probed message is queued")
        }))
    }
}

/// `pat` narrowed to the message a master chose (`None`: nothing chosen — unchanged).
pub(super) fn exact(pat: Pattern, o: Outcome) -> Pattern {
    match o {
        Some((src, tag, _)) => Pattern { comm: pat.comm, src: Some(src), tag: Some(tag) },
        None => pat,
    }
}

/// Registers a receive the master now decides (after a takeover).
pub(super) fn rp_choice_of(e: &mut Engine, r: ReqId, c: u64, comm: u32) {
    if let Some(rp) = e.repl.as_mut() {
        rp.choice_of.insert(r, (c, comm));
    }
}

/// A set of request indices as a choice's outcome: the first, how many, and a mask of the
/// (at most 64) indices from the first. `None`: the empty set.
pub(super) fn outcome_of(done: &[usize]) -> Outcome {
    let first = *done.first()?;
    let mask = done.iter().filter(|&&i| i - first < 64).fold(0u64, |m, &i| m | 1 << (i - first));
    Some((first as i32, mask.count_ones() as i32, mask))
}

/// The indices an outcome of [`outcome_of`] names.
pub(super) fn indices_of(o: Outcome) -> Vec<usize> {
    let Some((first, _, mask)) = o else { return Vec::new() };
    let first = first.max(0) as usize;
    (0..64).filter(|k| mask & (1 << k) != 0).map(|k| first + k).collect()
}
