//! The driver of the replication endpoint: what the engine's hooks feed it (sends,
//! receives, choices, failures told), and its actions carried out on the engine (frames
//! written to slots, requests completed, suspicions reported, verdicts applied).

use super::*;

impl<S: Waits> Core<Replication, S> {
    /// A send of a replicated job (algorithm 4): the master transmits it, a replica keeps it
    /// until its master commits it.
    ///
    /// `follow` (a fault-aware program's numbered send): a non-master lends it whatever its
    /// size, so that it completes only when its master committed it — or fails when its
    /// master's outcome says so. A replica then never runs ahead of its master past a send,
    /// and never takes the success of a send its master failed (on a revoked communicator).
    pub(super) fn replicated_send(&mut self, mid: Mid, ptr: *const u8, len: usize, sync: bool, follow: bool) -> ReqId {
        let req = self.new_req(std::ptr::null_mut(), 0, ReqState::Pending);
        let rp = &mut self.coord;
        let payload = if rp.ep.is_master() || rp.ep.must_lend(len) || follow {
            Bytes::Lent(ptr, len)
        } else {
            let data = if len == 0 {
                &[][..]
            } else {
                // SAFETY: the caller of `isend` keeps `len` bytes at `ptr` valid for the call.
                unsafe { std::slice::from_raw_parts(ptr, len) }
            };
            Bytes::Owned(crate::pool::copy_of(data))
        };
        let now = rp.now();
        rp.ep.send(now, mid, payload, sync, req);
        rp.sending = true;
        self.flush_deferred();
        {
            let rp = &mut self.coord;
            rp.sending = false;
        }
        req
    }

    /// Carries out the endpoint's actions. Never called while a connection is checked out
    /// (frames are handled with their connection taken out of the table): the actions wait
    /// in the endpoint until the next [`Core::flush_deferred`].
    pub(super) fn drive(&mut self) {
        if self.base.fatal.is_some() {
            // Communication ended (a replica that cannot follow its master leaves).
            return;
        }
        self.resolve_choices();
        self.check_stranded();
        loop {
            let rp = &mut self.coord;
            let Some(a) = rp.ep.poll_output() else { return };
            match a {
                Output::Transmit { to, tx, frame, step } => self.transmit_frame(to, tx, frame, step),
                Output::FannedOut { .. } => failpoints::after_transmissions(),
                Output::Committed { .. } => failpoints::after_commits(),
                Output::Complete(u) => self.complete(u, Ok(DONE)),
                Output::Suspect { slot, cause } => {
                    if debug_replication() {
                        eprintln!("p2pmpi: slot {}: suspects slot {slot}: {cause}", self.base.slot);
                    }
                    let l = rp.ep.layout();
                    let detail = format!("rank {} replica {} failed: {cause}", l.rank_of(slot), l.replica_of(slot));
                    (self.base.upcalls.suspect)(self.base.slot as usize, slot, &detail);
                    self.drop_peer(slot as i32);
                }
                Output::TookOver { count } => {
                    if debug_replication() {
                        eprintln!(
                            "p2pmpi: slot {}: took over as master of rank {}, resending {count}",
                            self.base.slot, self.base.rank
                        );
                    }
                    self.now_master();
                }
                Output::Fatal { rank, cause } => self.set_fatal(Error::PeerLost { rank: rank as i32, cause }),
                Output::ChannelLost(lost) => {
                    let want = self.matcher.next_expected(lost.comm, lost.rank as i32, lost.tag);
                    self.set_fatal(Error::PeerLost { rank: lost.rank as i32, cause: lost.cause(want) });
                }
                Output::RankLost { rank } => self.rank_lost(rank as i32),
            }
        }
    }

    /// Writes one frame of the protocol to `to`.
    fn transmit_frame(&mut self, to: usize, tx: Option<TxId>, frame: Frame<Bytes>, step: Step) {
        use p2pmpi_wire::frame::flags;
        let choice = |seq: u64, fl: u16| {
            let mut h = Header::new(FrameKind::Choice, Mid { comm: 0, src: 0, dst: 0, tag: 0, seq }, 0);
            h.flags |= fl;
            h
        };
        let (h, payload, data) = match frame {
            Frame::Data { mid, payload, sync } => {
                failpoints::before_transmission(step.index);
                let mut h = Header::new(FrameKind::Eager, mid, protocol::Payload::len(&payload) as u64);
                if sync {
                    h.flags |= flags::SYNCHRONOUS;
                }
                (h, payload.into_payload(), true)
            }
            Frame::Commit { mid, acked } => {
                let mut h = Header::new(FrameKind::Commit, mid, 0);
                if acked && self.kernels_acked(mid.dst as usize) {
                    h.flags |= flags::ACKED;
                }
                (h, Payload::None, false)
            }
            Frame::Choice { comm, point, outcome } => {
                let mid = match outcome {
                    Some((src, tag, _)) => Mid { comm, src: src as u32, dst: 0, tag, seq: point },
                    None => Mid { comm, src: 0, dst: 0, tag: 0, seq: point },
                };
                let mut h = Header::new(FrameKind::Choice, mid, outcome.map_or(0, |m| m.2));
                if outcome.is_none() {
                    h.flags |= flags::NOTHING;
                }
                (h, Payload::None, false)
            }
            Frame::ChoiceAck { point } => (choice(point, flags::ACK), Payload::None, false),
            Frame::ChoiceQuery => (choice(0, flags::QUERY), Payload::None, false),
            Frame::ChoicesTold => (choice(0, flags::TOLD), Payload::None, false),
            Frame::SyncAck { mid } => (Header::new(FrameKind::ReadyToRecv, mid, 0), Payload::None, false),
            Frame::Rts { mid, len, sync } => {
                failpoints::before_transmission(step.index);
                let mut h = Header::new(FrameKind::ReadyToSend, mid, len);
                if sync {
                    h.flags |= flags::SYNCHRONOUS;
                }
                (h, Payload::None, false)
            }
            Frame::Rtr { mid } => {
                let mut h = Header::new(FrameKind::ReadyToRecv, mid, 0);
                h.flags |= flags::PULL;
                (h, Payload::None, false)
            }
            Frame::Have { mid } => {
                let mut h = Header::new(FrameKind::ReadyToRecv, mid, 0);
                h.flags |= flags::HAVE;
                (h, Payload::None, false)
            }
            Frame::RndvData { mid, payload } => {
                let h = Header::new(FrameKind::Data, mid, protocol::Payload::len(&payload) as u64);
                (h, payload.into_payload(), false)
            }
            // Shared receives (the endpoint's `set_share_received`): a replica has a message
            // of another rank (`mid.dst` is this rank, unlike a destination's `HAVE`), or
            // its master relays it.
            Frame::Received { mid } => {
                let mut h = Header::new(FrameKind::ReadyToRecv, mid, 0);
                h.flags |= flags::HAVE;
                (h, Payload::None, false)
            }
            Frame::Relay { mid, payload } => {
                let mut h = Header::new(FrameKind::Data, mid, protocol::Payload::len(&payload) as u64);
                h.flags |= flags::RELAY;
                (h, payload.into_payload(), false)
            }
        };
        let cid = match self.send_conn(to as i32) {
            Ok(c) => c,
            Err(e) => {
                // Nothing more for it: suspected (its transmission is held by the endpoint).
                {
                    let rp = &mut self.coord;
                    let now = rp.now();
                    rp.event(now, Input::Suspect { slot: to, cause: e.to_string(), bye: self.peers[to].bye });
                }
                return;
            }
        };
        if data {
            failpoints::partial_transmission(step.index, self.conns[cid].as_deref_mut(), &h, &payload);
        } else if h.kind == FrameKind::Commit {
            failpoints::partial_commit(step.index, self.conns[cid].as_deref_mut(), &h);
        }
        match tx {
            Some(tx) => self.push_transmission(cid, Out::new(h, payload), tx),
            None => {
                let _ = self.push_out(cid, Out::new(h, payload));
            }
        }
        if failpoints::hold_writes() {
            self.flush_blocking(cid);
        }
    }

    /// Writes transmission `tx` of the endpoint. Written whole at once (the usual case), the
    /// endpoint learns it there and then; otherwise a device request stands for the rest,
    /// and its completion tells the endpoint ([`Core::tx_written`]). The common path thus
    /// allocates no request and touches no map: it is the master's, on every message's
    /// critical path.
    fn push_transmission(&mut self, cid: usize, out: Out, tx: TxId) {
        // Fencing: nothing leaves a replica that holds no valid lease.
        crate::lease::wait_lease();
        let conn = self.conns[cid].as_mut().expect("live connection");
        let peer = conn.peer.unwrap_or(-1);
        match conn.push_or_queue(out) {
            Ok(None) => {
                {
                    let rp = &mut self.coord;
                    // Written while the send that made the endpoint transmit it is carried
                    // out: that send's time, without reading the clock again.
                    let now = if rp.sending { rp.ep.now() } else { rp.now() };
                    rp.ep.written(now, tx);
                }
            }
            Ok(Some(queued)) => {
                let r = Req { ptr: std::ptr::null_mut(), cap: 0, state: ReqState::Pending, token: Some(tx as usize) };
                let sub = alloc_req(&mut self.reqs, &mut self.free_reqs, r);
                queued.done = Some(sub);
                {
                    let rp = &mut self.coord;
                    rp.tx_req.insert(tx, sub);
                }
                self.update_interest(cid);
            }
            Err(e) => {
                // The connection is dropped and its slot suspected: the endpoint holds the
                // transmission until the verdict.
                let _ = self.write_failed(cid, peer, e);
            }
        }
    }

    /// A transmission's device request completed (its frame is written): the endpoint
    /// learns it.
    pub(super) fn tx_written(&mut self, sub: ReqId, tx: usize) {
        self.reqs[sub] = None;
        self.free_reqs.push(sub);
        {
            let rp = &mut self.coord;
            rp.tx_req.remove(&(tx as TxId));
            let now = rp.now();
            rp.ep.written(now, tx as TxId);
        }
    }

    /// Completions of frames that will never be written (their connection is gone): the
    /// protocol's transmissions are the endpoint's to account for (held until the verdict).
    pub(super) fn forget_completions(&mut self, done: Vec<ReqId>) {
        for r in done {
            if let Some(tx) = self.reqs[r].as_ref().and_then(|q| q.token) {
                self.reqs[r] = None;
                self.free_reqs.push(r);
                {
                    let rp = &mut self.coord;
                    rp.tx_req.remove(&(tx as TxId));
                }
            } else {
                self.complete(r, Ok(DONE));
            }
        }
    }

    /// A synchronous message was matched by a receive here: every alive replica of its
    /// sender is told.
    pub(super) fn ack_sync(&mut self, env: &Envelope) {
        let me = self.base.rank;
        {
            let rp = &mut self.coord;
            rp.ep.matched_sync(env_mid(env, me));
        }
    }

    /// A non-master's wildcard receives whose master's choice arrived are posted, exact; after
    /// a takeover, the ones still undecided are this master's to decide.
    pub(super) fn resolve_choices(&mut self) {
        if self.coord.words {
            self.apply_failures();
        }
        loop {
            let rp = &mut self.coord;
            let Some(post) = rp.wildcards.next(&mut rp.ep) else { return };
            self.post_wildcard(post);
        }
    }

    /// Posts wildcard receive as [`Wildcards`] says: exact, its master's choice; as it is,
    /// this process deciding; or failed, as its master failed it.
    pub(super) fn post_wildcard(&mut self, post: Post<ReqId>) {
        match post {
            Post::Exact { req, pat } => self.post(req, pat),
            Post::Decide { req, pat, point } => {
                {
                    let rp = &mut self.coord;
                    rp.choice_of.insert(req, (point, pat.comm));
                }
                self.post(req, pat);
            }
            Post::Fail { req, outcome } => {
                let err = failure_error(outcome).expect("a failure");
                self.complete(req, Err(err));
            }
        }
    }

    /// The number of the operation being posted, in a fault-aware replicated job (`None`
    /// otherwise, and for a schedule's operations).
    pub(super) fn next_op(&mut self) -> Option<u64> {
        let rp = &mut self.coord;
        rp.ops.next(rp.numbered && !rp.in_schedule)
    }

    /// Whether this process follows its master's outcomes (a non-master of a replicated
    /// job, or a new master still learning what its replicas know).
    pub(crate) fn follows(&self) -> bool {
        !self.coord.ep.may_decide()
    }

    /// Operation `op` fails at its post on the master with `err`: the replicas are told. On a
    /// non-master: the master's outcome at the post, if it failed there (known already).
    pub(super) fn post_failure(&mut self, op: Option<u64>, err: Option<Error>) -> Option<Error> {
        let Some(op) = op else { return err };
        let rp = &mut self.coord;
        let c = failures::failure_point(op);
        // A master's outcome known already (a new master's predecessor's) is followed.
        if let Some(o) = rp.ep.choice_known(c) {
            if failures::outcome_failure(o).is_some_and(|(_, at_post)| at_post) {
                rp.ep.take_choice(c);
                rp.ep.decided(u32::MAX, c, o);
                return failure_error(o);
            }
            return None;
        }
        if rp.ep.is_master() {
            let f = failed_of(err.as_ref()?)?;
            rp.ep.decided(u32::MAX, c, failures::failure_outcome(f, true));
            if debug_replication() {
                eprintln!("p2pmpi: slot {}: operation {op} fails at its post: {f:?}", self.base.slot);
            }
            self.flush_deferred();
            return err;
        }
        // Only the master's word counts (what this process heard may not be what it heard).
        None
    }

    /// Immediate collective `op` succeeded here: whether its request may complete with that
    /// success. `Some(told)` yes (`told`: this master told its replicas, a frame to flush);
    /// `None` not yet: this process follows its master, whose word has not come (a failure
    /// that came is applied by [`Self::apply_failures`], which fails the request).
    pub(super) fn schedule_word_of(&mut self, op: u64) -> Option<bool> {
        let rp = &mut self.coord;
        let c = failures::failure_point(op);
        let known = rp.ep.choice_known(c);
        match failures::collective_word(known, rp.ep.may_decide()) {
            failures::Word::Follow => {
                let o = rp.ep.take_choice(c).unwrap_or(failures::success_outcome());
                rp.ep.decided(u32::MAX, c, o);
                Some(false)
            }
            failures::Word::Decide => {
                rp.ep.decided(u32::MAX, c, failures::success_outcome());
                Some(true)
            }
            failures::Word::Await => {
                // A failure known: applied by `apply_failures`.
                rp.words |= known.is_some();
                None
            }
        }
    }

    /// Request `r` stands for operation `op` (a fault-aware replicated job).
    pub(super) fn number(&mut self, r: ReqId, op: Option<u64>) {
        let Some(op) = op else { return };
        let rp = &mut self.coord;
        rp.ops.number(r, op);
        if rp.ep.choice_known(failures::failure_point(op)).is_some() {
            rp.words = true;
            self.apply_failures();
        }
    }

    /// A master's request completes with `st`: a failure it must tell its replicas (a
    /// wildcard receive withdrawn, an operation failed by a lost rank or a revocation).
    pub(super) fn decide_failure(&mut self, id: ReqId, st: &Result<StatusInfo>) {
        let Err(e) = st else { return };
        let Some(f) = failed_of(e) else { return };
        let rp = &mut self.coord;
        if !rp.ep.is_master() {
            return;
        }
        if let Some((c, comm)) = rp.choice_of.remove(&id) {
            rp.matched.remove(&id);
            rp.ep.decided(comm, c, failures::failure_outcome(f, false));
        }
        if let Some(op) = rp.ops.op_of(&id) {
            rp.ep.decided(u32::MAX, failures::failure_point(op), failures::failure_outcome(f, false));
        }
    }

    /// The program took request `id`'s outcome.
    pub(super) fn taken(&mut self, id: ReqId, ok: bool) {
        let rp = &mut self.coord;
        let follows = !rp.ep.is_master();
        rp.ops.taken(id, ok, follows);
    }

    /// A non-master applies the failure outcomes its master told: the operations fail here
    /// too. One whose success the program already took cannot follow: this replica leaves
    /// (its rank goes on with its master).
    pub(super) fn apply_failures(&mut self) {
        let rp = &mut self.coord;
        if !std::mem::take(&mut rp.words) || self.base.fatal.is_some() {
            return;
        }
        let known = rp.ep.known_failures();
        for (c, o) in known {
            let Some(op) = failures::op_of_point(c) else { continue };
            if failures::outcome_failure(o).is_none() {
                // A success (an immediate collective's): taken when its schedule is over.
                continue;
            }
            let rp = &mut self.coord;
            let follow = rp.ops.master_failed(op, !rp.ep.is_master());
            if debug_replication() {
                let f = failures::outcome_failure(o);
                eprintln!("p2pmpi: slot {}: its master failed operation {op} ({f:?}): {follow:?}", self.base.slot);
            }
            let r = match follow {
                // Not reached yet: applied at its post.
                Follow::NotReached => continue,
                Follow::Diverged => {
                    let why = format!(
                        "its master's operation {op} failed ({}) where this replica's had succeeded",
                        failure_error(o).map(|e| e.to_string()).unwrap_or_default()
                    );
                    self.diverged(&why);
                    return;
                }
                Follow::Fail(r) => r,
            };
            let rp = &mut self.coord;
            rp.ep.take_choice(c);
            rp.ep.decided(u32::MAX, c, o);
            let Some(r) = r else { continue };
            let err = failure_error(o).expect("a failure outcome");
            if self.is_done(r) {
                // Done here and not taken yet: the master's outcome replaces it.
                self.req_mut(r).state = ReqState::Failed(err);
                continue;
            }
            self.drop_schedule(r);
            self.matcher.cancel(&r);
            self.rndv_recv.retain(|_, q| *q != r);
            {
                let rp = &mut self.coord;
                rp.wildcards.withdraw(r);
                // A lent send: its backup entry becomes a copy (the buffer may go now) and
                // no longer names the request.
                rp.ep.detach(r);
            }
            self.complete(r, Err(err));
        }
    }

    /// A non-master waiting for a message of a rank lost whole that its master received: the
    /// message will never come. The verdict ([`stranded::verdict`]) says whether and how this
    /// replica ends.
    pub(super) fn check_stranded(&mut self) {
        let rp = &self.coord;
        if rp.lost_ranks.is_empty() || rp.ep.is_master() || rp.ops.is_empty() {
            return;
        }
        let master_done = rp.ep.coordinator().master_of(self.base.rank as usize).is_some_and(|m| self.peers[m].bye);
        let receive = || {
            self.matcher.posted().find_map(|(p, r)| {
                let src = p.src.filter(|s| rp.lost_ranks.contains(s))?;
                rp.ops.op_of(r).map(|op| (op, src))
            })
        };
        // An immediate collective that its master completed (its word came), still waiting
        // here for a lost rank's message.
        let schedule = || {
            self.schedules.iter().find_map(|s| {
                let op = s.op?;
                let o = rp.ep.choice_known(failures::failure_point(op))?;
                failures::outcome_success(o).then(|| s.run.waits_for(&rp.lost_ranks)).flatten().map(|src| (op, src))
            })
        };
        match stranded::verdict(master_done, rp.ep.master_ahead(), receive, schedule) {
            None => {}
            Some(v @ Stranded::Finished { .. }) => {
                if debug_replication() {
                    eprintln!("p2pmpi: slot {}: {}; ending", self.base.slot, v.why());
                }
                crate::fatal::finished();
            }
            Some(v @ Stranded::Diverged { .. }) => self.diverged(&v.why()),
        }
    }

    /// This replica cannot take its master's path any more: communication ends here with
    /// an error naming the rank, the replica and why (every later call returns it); the
    /// replica stops on it, as a replica that failed, and its rank goes on with its master.
    /// Nothing more leaves it meanwhile ([`Self::drive`] does nothing once the error is set).
    pub(crate) fn diverged(&mut self, why: &str) {
        let replica = self.coord.ep.layout().replica_of(self.base.slot as usize);
        let detail = format!("replica {replica} cannot follow its master: {why}; leaving");
        self.set_fatal(Error::Protocol { rank: self.base.rank, detail });
    }

    /// Every replica of `rank` is lost and the program handles failures: the program is told
    /// (its failure notices), and the master fails what involves the rank (its replicas
    /// follow the master's outcomes).
    fn rank_lost(&mut self, rank: i32) {
        let rp = &mut self.coord;
        if rp.lost_ranks.contains(&rank) {
            return;
        }
        rp.lost_ranks.push(rank);
        let master = rp.ep.is_master();
        (self.base.upcalls.rank_lost)(rank);
        if master {
            self.lose_peer(rank, "all replicas for that rank failed".into(), Vec::new());
        }
    }

    /// This process became its rank's master: what it heard and its master did not get to
    /// apply is applied now (its operations fail, and its replicas are told).
    fn now_master(&mut self) {
        let rp = &mut self.coord;
        if let Some(tid) = rp.batched.take() {
            super::batch_end(tid);
        }
        let lost = rp.lost_ranks.clone();
        let revs = std::mem::take(&mut rp.unapplied);
        for r in lost {
            self.lose_peer(r, "all replicas for that rank failed".into(), Vec::new());
        }
        for ctx in revs {
            self.revoke(ctx);
        }
    }

    /// The master's view of the failed world ranks at choice point `c` (`failure_ack`,
    /// `failed_members`): `None` while this replica waits for its master's (the outcome of
    /// `c`, and of its extra points when ranks from 64 on failed).
    pub(crate) fn lost_view_at(&mut self, c: u64) -> Option<Vec<i32>> {
        let rp = &mut self.coord;
        if let Some(o) = rp.ep.choice_known(c) {
            let n = failures::lost_set_parts(o).unwrap_or(0);
            let points: Vec<u64> = (1..=n).map(|i| failures::lost_set_part_point(c, i)).collect();
            let mut parts = Vec::with_capacity(n);
            for &p in &points {
                // Told before `c`'s own outcome; after a takeover, they come again.
                parts.push(rp.ep.choice_known(p)?);
            }
            for (&p, &po) in points.iter().zip(&parts) {
                rp.ep.take_choice(p);
                rp.ep.decided(u32::MAX, p, po);
            }
            rp.ep.take_choice(c);
            rp.ep.decided(u32::MAX, c, o);
            // Not a set (never told by a master of this version): this process's own view.
            let view = failures::outcome_lost_set(o, &parts).map_or_else(
                || {
                    let mut v = self.coord.lost_ranks.clone();
                    v.sort_unstable();
                    v
                },
                |set| set.into_iter().map(|r| r as i32).collect(),
            );
            return Some(view);
        }
        if !rp.ep.may_decide() {
            return None;
        }
        let mut view = rp.lost_ranks.clone();
        view.sort_unstable();
        let ranks: Vec<u32> = view.iter().map(|&r| r as u32).collect();
        for (p, o) in failures::lost_set_outcomes(c, &ranks) {
            // Parts a dead master told before its death: this master's own replace them.
            if p != c {
                rp.ep.take_choice(p);
            }
            rp.ep.decided(u32::MAX, p, o);
        }
        self.flush_deferred();
        Some(view)
    }

    /// The master's failure outcome of choice point `c` (a probe's), if it told one: taken.
    pub(crate) fn choice_failure(&mut self, c: Option<u64>) -> Option<Error> {
        let c = c?;
        let rp = &mut self.coord;
        let o = rp.ep.choice_known(c)?;
        let err = failure_error(o)?;
        rp.ep.take_choice(c);
        rp.ep.decided(u32::MAX, c, o);
        Some(err)
    }

    /// A master's probe at choice point `c` fails with `err`: its replicas are told.
    pub(crate) fn decide_probe_failure(&mut self, c: Option<u64>, err: &Error) {
        let (Some(c), Some(f)) = (c, failed_of(err)) else { return };
        let rp = &mut self.coord;
        if rp.ep.may_decide() {
            rp.ep.decided(u32::MAX, c, failures::failure_outcome(f, false));
            self.flush_deferred();
        }
    }

    /// A replica was declared dead by the launcher (algorithm 7).
    pub(super) fn slot_failed(&mut self, slot: i32, cause: &str) {
        if slot < 0 || slot as usize >= self.peers.len() || slot == self.base.slot {
            return;
        }
        if debug_replication() {
            eprintln!("p2pmpi: slot {}: slot {slot} failed: {cause}", self.base.slot);
        }
        let rp = &mut self.coord;
        let now = rp.now();
        if self.peers[slot as usize].bye {
            // It finished: it has everything it needs, nothing is waited for.
            rp.event(now, Input::Suspect { slot: slot as usize, cause: cause.to_string(), bye: true });
        }
        rp.event(now, Input::DeclaredDead { slot: slot as usize });
        self.drop_peer(slot);
    }

    /// This process suspects `slot` (its connection broke, or a send to it stalled). Only the
    /// launcher declares deaths (fencing, [`p2pmpi_core::fencing`]): the endpoint reports the
    /// suspicion and holds what was meant for the slot until the verdict; nothing more is
    /// read from it.
    pub(super) fn suspect_slot(&mut self, slot: i32, cause: &str) {
        let rp = &mut self.coord;
        if slot < 0 || slot as usize >= self.peers.len() || slot == self.base.slot {
            return;
        }
        let now = rp.now();
        let bye = self.peers[slot as usize].bye;
        rp.event(now, Input::Suspect { slot: slot as usize, cause: cause.to_string(), bye });
        self.drop_peer(slot);
    }

    /// Whether every alive replica of `rank` has acknowledged, in its kernel, everything this
    /// process wrote to it: each of its connections is an established TCP connection
    /// (not shared memory) with nothing unacknowledged in its send queue (`SIOCOUTQ`).
    ///
    /// Off unless `P2PMPI_ACKED_COMMITS=1`: on loopback delayed acknowledgements leave most
    /// commits unflagged, it measured no gain, and a suspect that keeps writing while a
    /// destination drains and closes its connection is not covered (docs/replication.md).
    fn kernels_acked(&self, rank: usize) -> bool {
        if !acked_commits() {
            return false;
        }
        let rp = &self.coord;
        let l = rp.ep.layout();
        l.slots_of(rank).all(|d| {
            if rp.ep.is_dead(d) {
                return true;
            }
            let p = &self.peers[d];
            !p.conns.is_empty()
                && p.conns.iter().all(|&cid| {
                    self.conns.get(cid).and_then(Option::as_ref).is_some_and(|c| c.shm.is_none() && c.kernel_acked())
                })
        })
    }

    /// Drops every connection with `slot`: nothing it might still send (a frozen process that
    /// wakes up) is read — but for the data frames its kernel already holds from it, taken
    /// first (its master may have counted them delivered: a commit flagged acknowledged
    /// lets the replicas drop their copies).
    pub(super) fn drop_peer(&mut self, slot: i32) {
        if self.coord.draining == Some(slot) {
            // A connection failing while it is drained: dropped below, by the caller.
            return;
        }
        let before = self.coord.draining.replace(slot);
        for cid in self.peers[slot as usize].conns.clone() {
            // Bounded: a live suspect may keep writing.
            for _ in 0..64 {
                if !self.read_conn(cid) {
                    break;
                }
            }
        }
        self.coord.draining = before;
        let p = &mut self.peers[slot as usize];
        p.send_conn = None;
        let cids = std::mem::take(&mut p.conns);
        let mut done = Vec::new();
        for cid in cids {
            // Its ring is read no more either (fencing: a process that resumes may write into
            // its mapping, but nobody takes anything from it).
            if let Some(mut conn) = self.conns.remove(cid, &self.io) {
                done.extend(conn.take_completions());
                self.undo_stream(cid, &mut conn);
            }
        }
        self.deferred.retain(|(p, _)| *p != slot);
        self.forget_completions(done);
    }

    /// A connection to a dead replica goes away in the middle of a message streaming into
    /// a receive: the receive waits again for the message, which the sender's successor
    /// will send.
    pub(super) fn undo_stream(&mut self, cid: usize, conn: &mut Conn) {
        let s = self.coord.stream(cid);
        let (rndv, undo) = (s.rndv.take(), s.undo.take());
        if let Some((mid, r)) = rndv {
            // Rendez-vous data cut off: the receive waits for the data again.
            if let RState::Stream { .. } = conn.rstate {
                conn.rstate = RState::Header;
                self.rndv_recv.insert(mid, r);
            }
            return;
        }
        let Some((env, pat, pos)) = undo else { return };
        let RState::Stream { req, .. } = conn.rstate else { return };
        conn.rstate = RState::Header;
        if debug_replication() {
            eprintln!("p2pmpi: slot {}: undoing the match of {env:?} (its sender died mid-message)", self.base.slot);
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

    /// How long this process sleeps, instead of yielding, between two polls of a wait that
    /// brought nothing on a host with more of the job's processes than cores: a non-master's
    /// [`super::NAP`]; `None` for a master (its round trips are the job's), and for a
    /// non-master that large messages reached lately ([`super::AWAKE_AFTER_RNDV`]).
    /// A non-master that naps runs under `SCHED_BATCH` from its first nap on (one system
    /// call; back to the normal policy when a large message or a takeover wakes it).
    pub(crate) fn nap(&mut self) -> Option<Duration> {
        let rp = &mut self.coord;
        if rp.ep.is_master() || rp.announced.is_some_and(|t| t.elapsed() < super::AWAKE_AFTER_RNDV) {
            return None;
        }
        let nap = super::nap_setting()?;
        if rp.batched.is_none() {
            // (-1: the kernel refused; not asked again.)
            rp.batched = Some(super::batch_start().unwrap_or(-1));
        }
        Some(nap)
    }

    /// Whether a non-master still waits for commits (it must not leave before its master
    /// committed what it keeps: it might have to take over).
    pub fn backup_pending(&self) -> bool {
        // Messages to a rank lost whole are not waited for: its master's send failed, and
        // they would keep this replica from finishing forever. Nor messages on a revoked
        // communicator (an immediate collective's steps that its master, having given the
        // collective up, never posted: nobody receives them on it any more).
        let rp = &self.coord;
        rp.ep.backup_pending_beyond(|m| rp.lost_ranks.contains(&(m.dst as i32)) || revocations::is_revoked(m.comm / 2))
    }

    /// A choice point of a probe (`immediate`: an immediate one): its number in a replicated
    /// job when its outcome may differ between replicas (`ANY_SOURCE`, or any immediate
    /// probe; a blocking probe naming its source finds that source's next message).
    pub fn probe_point(&mut self, pat: &Pattern, immediate: bool) -> Option<u64> {
        let rp = &mut self.coord;
        // A fault-aware program's blocking probe naming its source may fail (a lost rank, a
        // revocation), which its master decides: a choice point too.
        let notify = crate::lifecycle::policy() == crate::lifecycle::Policy::Notify;
        (immediate || pat.src.is_none() || notify).then(|| rp.ep.choice_point())
    }

    /// The outcome of probe choice point `c` for this replica: `None` while it must wait (a
    /// non-master not told yet, or the chosen message not here yet; a blocking probe that
    /// found nothing), else what the probe returns. Without a choice point, a plain probe.
    pub fn probe_at(&mut self, c: Option<u64>, pat: Pattern, immediate: bool) -> Option<Option<Envelope>> {
        let Some(c) = c else {
            let found = self.probe(pat);
            return if immediate { Some(found) } else { found.map(Some) };
        };
        let rp = &mut self.coord;
        match rp.ep.choice_known(c) {
            Some(o) => {
                let found = match o {
                    None => None,
                    Some(_) => Some(self.probe(exact(pat, o))?),
                };
                let rp = &mut self.coord;
                rp.ep.take_choice(c);
                rp.ep.decided(pat.comm, c, o);
                self.flush_deferred();
                Some(found)
            }
            None if rp.ep.may_decide() => {
                let found = self.probe(pat);
                if found.is_none() && !immediate {
                    return None;
                }
                let o = found.map(|e| (e.src, e.tag, e.seq));
                self.coord.ep.decided(pat.comm, c, o);
                self.flush_deferred();
                Some(found)
            }
            None => None,
        }
    }

    /// A choice point of a test or a wait on several requests, in a replicated job (which of
    /// them completed depends on timing, which differs between replicas).
    pub fn completion_point(&mut self) -> Option<u64> {
        Some(self.coord.ep.choice_point())
    }

    /// Which of `ids` (`None`: an inactive slot) count as complete at choice point `c`:
    /// `None` while this replica must wait (its master's outcome not known yet, or a request
    /// the master saw complete not complete here yet; with `block`, nothing complete yet).
    /// Without a choice point, the requests complete now. At most 64 indices from the first
    /// are reported at once.
    pub fn completed_at(&mut self, c: Option<u64>, ids: &[Option<ReqId>], block: bool) -> Option<Vec<usize>> {
        let Some(c) = c else { return self.completed_now(ids, block) };
        let rp = &mut self.coord;
        let comm = u32::MAX;
        match rp.ep.choice_known(c) {
            Some(o) => {
                let want = indices_of(o);
                if !want.iter().all(|&i| ids.get(i).copied().flatten().is_some_and(|id| self.is_done(id))) {
                    return None;
                }
                let rp = &mut self.coord;
                rp.ep.take_choice(c);
                rp.ep.decided(comm, c, o);
                self.flush_deferred();
                Some(want)
            }
            None if rp.ep.may_decide() => {
                let d = self.completed_now(ids, block)?;
                let o = outcome_of(&d);
                self.coord.ep.decided(comm, c, o);
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
