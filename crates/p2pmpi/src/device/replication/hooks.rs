//! The replication layer as the engine's coordination: the frames a replicated job handles
//! itself, and the engine's hooks ([`Coordination`]) implemented with the replication state.

use super::*;

impl<S: Waits> Core<Replication, S> {
    /// A rendez-vous announcement of a replicated job arrived: matched (the data is pulled
    /// from the sender's replicas), queued, kept until its turn, or answered as a duplicate.
    pub(crate) fn accept_announcement(&mut self, env: Envelope, sync: bool) {
        let me = self.base.rank;
        self.coord.stay_awake();
        let mid = env_mid(&env, me);
        match self.matcher.arrive(&env) {
            Arrival::Matched(r) => {
                self.traced(&env);
                self.start_rndv_recv(r, &env);
            }
            Arrival::Unmatched => {
                self.traced(&env);
                self.matcher.enqueue(env, Body::Rendezvous);
            }
            Arrival::Duplicate => {
                let wire = mid;
                let queued = self
                    .matcher
                    .probe(Pattern { comm: env.comm, src: Some(env.src), tag: Some(env.tag) })
                    .is_some_and(|e| e.seq <= env.seq);
                let rp = &mut self.coord;
                if self.rndv_recv.contains_key(&wire) {
                    // Announced again by a new master while the data is awaited: pulled
                    // again (the old master may have died before sending it).
                    rp.ep.pull(mid);
                } else if !queued {
                    // Received already (a queued one is pulled when a receive matches it).
                    rp.ep.have(mid);
                }
            }
            Arrival::Early => {
                {
                    let rp = &mut self.coord;
                    let now = rp.now();
                    rp.ep.park(now, mid, Parked { data: Bytes::Owned(Vec::new()), sync, rts: Some(env.len) });
                }
                return;
            }
        }
        self.drain_kept(env.comm, env.src, env.tag);
    }

    /// Accepts the messages kept aside that are now next on their channel.
    pub(super) fn drain_kept(&mut self, comm: u32, src: i32, tag: i32) {
        loop {
            let next = self.matcher.next_expected(comm, src, tag);
            let rp = &mut self.coord;
            if rp.ep.early_len() == 0 {
                return;
            }
            let Some((mid, p)) = rp.ep.unpark(comm, src as u32, tag, next) else { return };
            let sync = p.sync;
            let data = p.data.into_vec();
            if let Some(len) = p.rts {
                self.accept_announcement(Envelope { comm, src, tag, seq: mid.seq, len }, sync);
                continue;
            }
            let env = Envelope { comm, src, tag, seq: mid.seq, len: data.len() as u64 };
            self.accept_eager(env, Eager::Owned(data), sync);
        }
    }

    /// A commit or a choice frame of a replicated job (from a replica of this rank): the
    /// endpoint takes it.
    pub(crate) fn replica_control_frame(&mut self, slot: i32, h: Header) -> std::result::Result<(), ConnError> {
        let mid = h.mid;
        if h.kind == FrameKind::Commit {
            let rp = &mut self.coord;
            if rp.ep.is_dead(slot as usize) {
                // Fencing: a declared-dead replica's commit counts for nothing.
                return Ok(());
            }
            let acked = h.flags & p2pmpi_wire::frame::flags::ACKED != 0;
            if !rp.on_commit(slot as usize, mid, acked) {
                return Err(ConnError::Protocol(format!(
                    "commit of {mid:?} from slot {slot}, not a replica of this rank"
                )));
            }
        } else {
            use p2pmpi_wire::frame::flags;
            let rp = &mut self.coord;
            if rp.ep.is_dead(slot as usize) {
                return Ok(());
            }
            let from = slot as usize;
            let ok = if h.flags & flags::ACK != 0 {
                rp.on_choice_ack(from, mid.seq)
            } else if h.flags & flags::QUERY != 0 {
                rp.on_choice_query(from)
            } else if h.flags & flags::TOLD != 0 {
                rp.on_choices_told(from)
            } else {
                let o = (h.flags & flags::NOTHING == 0).then_some((mid.src as i32, mid.tag, h.len));
                if failures::op_of_point(mid.seq).is_some() {
                    rp.words = true;
                }
                rp.on_choice(from, mid.seq, o)
            };
            if !ok {
                return Err(ConnError::Protocol(format!("choice from slot {slot}, not a replica of this rank")));
            }
        }
        Ok(())
    }

    /// An eager message of a replicated job too large for the connection's buffer: streamed
    /// into the matching receive, or kept whole until it is matched.
    pub(crate) fn replica_streamed_eager(&mut self, cid: usize, conn: &mut Conn, h: Header, peer: i32) {
        let mid = h.mid;
        let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
        let st = StatusInfo { source: peer, tag: mid.tag, len: h.len, cancelled: false };
        // Its turn, and a receive waits for it: straight into the receive's buffer,
        // undone if the sender dies half-way (a replica sends it again).
        if let Some((r, pat, pos)) = self.matcher.arrive_if_matched(&env) {
            self.traced(&env);
            self.note_match(r, &env);
            if h.flags & p2pmpi_wire::frame::flags::SYNCHRONOUS != 0 {
                self.ack_sync(&env);
            }
            self.begin_stream(conn, r, st);
            if let RState::Stream { discard: false, .. } = conn.rstate {
                self.coord.stream(cid).undo = Some((env, pat, pos));
            }
            return;
        }
        // Otherwise kept whole before it is matched: a sender dying mid-message
        // leaves no trace.
        // Not zero-filled: the stream writes every byte before the length is set.
        let mut data = crate::pool::with_room(h.len as usize);
        let ptr = data.as_mut_ptr();
        conn.stream_unexpected = Some((env, data));
        conn.stream_status = Some(StatusInfo { source: peer, tag: mid.tag, len: h.len, cancelled: false });
        let s = self.coord.stream(cid);
        s.kept = true;
        s.sync = h.flags & p2pmpi_wire::frame::flags::SYNCHRONOUS != 0;
        conn.rstate = RState::Stream { req: usize::MAX, ptr, left: h.len as usize, discard: false };
    }

    /// Records the message a master's wildcard receive matched (its choice).
    fn note_match(&mut self, r: ReqId, env: &Envelope) {
        let rp = &mut self.coord;
        if rp.choice_of.contains_key(&r) {
            rp.matched.insert(r, (env.src, env.tag, env.seq));
        }
    }

    /// A frame of a replicated job after the opening: the protocol's own (commits, choices,
    /// pulls, acknowledgements) and the messages, which it carries (`None`: the engine's,
    /// the same as without replicas).
    fn replica_frame(
        &mut self,
        cid: usize,
        conn: &mut Conn,
        h: Header,
        payload: Range<usize>,
        slot: i32,
        from_peer: bool,
    ) -> Option<std::result::Result<(), ConnError>> {
        use p2pmpi_wire::frame::flags;
        if self.coord.draining == Some(slot)
            && (!matches!(h.kind, FrameKind::Eager | FrameKind::ReadyToSend | FrameKind::Data)
                || h.flags & flags::SINGLE_COPY != 0)
        {
            // The connection is being dropped: its messages are taken (eager data,
            // rendez-vous announcements and data: what the sender's successor would send
            // again), its control frames count for nothing (fencing).
            return Some(Ok(()));
        }
        let mid = h.mid;
        let peer = self.coord.rank_of(slot);
        let sync = h.flags & flags::SYNCHRONOUS != 0;
        let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
        match h.kind {
            FrameKind::Commit | FrameKind::Choice => return Some(self.replica_control_frame(slot, h)),
            // Shared receives: its master's copy of a message of a rank lost whole.
            FrameKind::Data if h.flags & flags::RELAY != 0 => return Some(self.relay_frame(cid, conn, h, slot)),
            FrameKind::Eager if crate::device::conn::is_streamed(&h) => self.replica_streamed_eager(cid, conn, h, peer),
            FrameKind::Eager | FrameKind::ReadyToSend if !from_peer => return None,
            FrameKind::Eager => self.accept_eager(env, Eager::Borrowed(&conn.rbuf[payload]), sync),
            FrameKind::ReadyToSend => self.accept_announcement(env, sync),
            FrameKind::Data if from_peer => {
                let st = StatusInfo { source: peer, tag: mid.tag, len: h.len, cancelled: false };
                match self.rndv_recv.remove(&mid) {
                    Some(r) => {
                        self.begin_stream(conn, r, st);
                        if matches!(conn.rstate, RState::Stream { .. }) {
                            self.coord.stream(cid).rndv = Some((mid, r));
                        } else {
                            self.coord.ep.have(mid);
                            self.share_in(mid, r);
                        }
                    }
                    // Sent again by a new master after its predecessor's copy arrived whole.
                    None => {
                        conn.skip_payload(st, h.len as usize);
                    }
                }
            }
            FrameKind::ReadyToRecv => {
                // A destination replica pulls a rendez-vous message, has it, or acknowledges a
                // synchronous eager one.
                if mid.src as i32 == self.base.rank && mid.dst as i32 == peer {
                    let rp = &mut self.coord;
                    if h.flags & (flags::PULL | flags::HAVE) != 0 {
                        rp.on_pull(slot as usize, mid, h.flags & flags::HAVE != 0);
                    } else {
                        rp.on_sync_ack(slot as usize, mid);
                    }
                } else if peer == self.base.rank && mid.dst as i32 == self.base.rank && h.flags & flags::HAVE != 0 {
                    // Shared receives: a replica of this rank has a message of another.
                    self.coord.on_received(slot as usize, mid);
                }
            }
            _ => return None,
        }
        Some(Ok(()))
    }
}

impl Replication {
    /// The rank a slot runs.
    pub(super) fn rank_of(&self, slot: i32) -> i32 {
        if slot >= 0 {
            self.layout.rank_of(slot as usize) as i32
        } else {
            slot
        }
    }
}

/// The replica coordination protocol as the engine's coordination: every hook where a
/// replicated job differs from one without replicas.
impl Coordination for Replication {
    const PLAIN: bool = false;

    fn describe<S: Waits>(e: &Core<Self, S>) -> String {
        let rp = &e.coord;
        format!(" {} dead {:?}", rp.ep.summary(), rp.ep.coordinator().dead_slots())
    }
    fn rank_of<S: Waits>(e: &Core<Self, S>, slot: i32) -> i32 {
        e.coord.rank_of(slot)
    }
    fn per_id<S: Waits>(e: &Core<Self, S>) -> usize {
        e.coord.layout.r
    }
    fn world_slots<S: Waits>(e: &Core<Self, S>) -> (i32, i32) {
        let r = e.coord.layout.r as i32;
        (e.base.world_base * r, (e.base.world_base + e.base.world_size) * r)
    }
    fn slots_of_ids<S: Waits>(e: &Core<Self, S>, ids: &[i32]) -> Vec<i32> {
        let l = &e.coord.layout;
        ids.iter().flat_map(|&id| l.slots_of(id as usize).map(|s| s as i32)).collect()
    }
    /// The universe's layout grows: every universe id has as many replicas, numbered after
    /// the slots already known ([`Layout::grown`]).
    fn grow<S: Waits>(e: &mut Core<Self, S>, n: usize) -> usize {
        if n > e.coord.layout.n {
            e.coord.layout = e.coord.layout.grown(n);
            e.coord.grow(n);
            (e.base.upcalls.retell_failures)();
        }
        e.coord.layout.slots()
    }
    fn cut<S: Waits>(e: &Core<Self, S>, slot: i32) -> bool {
        e.coord.ep.is_cut(slot as usize)
    }
    fn refused<S: Waits>(e: &Core<Self, S>, dst: i32) -> Option<Error> {
        e.coord
            .ep
            .is_cut(dst as usize)
            .then(|| Error::PeerLost { rank: e.coord.rank_of(dst), cause: format!("slot {dst} failed") })
    }
    /// A replica outside the world (a spawn's parent) listens since before the spawn: a
    /// refused connection means it died, and its replicas are there instead.
    fn connect_retry<S: Waits>(_: &Core<Self, S>, outside: bool) -> Option<Duration> {
        outside.then_some(Duration::from_secs(1))
    }
    /// A replica that died during start-up: the others go on without it.
    fn start_failed<S: Waits>(e: &mut Core<Self, S>, slot: i32, err: Error) -> Result<()> {
        e.suspect_slot(slot, &err.to_string());
        Ok(())
    }
    /// The deaths the launcher declared since the last look, applied now (the start-up's
    /// waits: the program's calls apply them in [`crate::context`]'s waits).
    fn apply_declared<S: Waits>(e: &mut Core<Self, S>) {
        if (e.base.upcalls.failures_pending)() {
            for k in (e.base.upcalls.take_failures)() {
                e.peer_failed(k);
            }
        }
    }
    /// Fencing: nothing leaves a replica that holds no valid lease.
    fn before_write() {
        crate::lease::wait_lease();
    }
    fn drive<S: Waits>(e: &mut Core<Self, S>) {
        e.drive();
    }
    fn send_failed<S: Waits>(e: &mut Core<Self, S>, peer: i32, err: Error) {
        e.suspect_slot(peer, &err.to_string());
    }
    fn next_op<S: Waits>(e: &mut Core<Self, S>) -> Option<u64> {
        e.next_op()
    }
    fn post_failure<S: Waits>(e: &mut Core<Self, S>, op: Option<u64>, err: Option<Error>) -> Option<Error> {
        e.post_failure(op, err)
    }
    fn number<S: Waits>(e: &mut Core<Self, S>, r: ReqId, op: Option<u64>) {
        e.number(r, op);
    }
    /// Algorithm 4: the master transmits, a replica keeps the message until committed.
    fn send<S: Waits>(
        e: &mut Core<Self, S>,
        mid: Mid,
        ptr: *const u8,
        len: usize,
        sync: bool,
        op: Option<u64>,
    ) -> Option<ReqId> {
        let r = e.replicated_send(mid, ptr, len, sync, op.is_some());
        e.number(r, op);
        Some(r)
    }
    /// An ANY_SOURCE receive is a choice point: the master's match decides. (A receive
    /// naming its source is not, even with ANY_TAG: one source's messages arrive in its
    /// program order — on one connection, and after a takeover the new master resends before
    /// it sends anything new — and MPI's non-overtaking rule then makes the match the same
    /// on every replica.)
    fn receive<S: Waits>(e: &mut Core<Self, S>, r: ReqId, pat: Pattern) -> bool {
        if pat.src.is_some() {
            return false;
        }
        let rp = &mut e.coord;
        if let Some(post) = rp.wildcards.receive(&mut rp.ep, r, pat) {
            e.post_wildcard(post);
        }
        e.flush_deferred();
        true
    }
    fn matched<S: Waits>(e: &mut Core<Self, S>, r: ReqId, env: &Envelope) {
        e.note_match(r, env);
    }
    fn matched_sync<S: Waits>(e: &mut Core<Self, S>, env: &Envelope) {
        e.ack_sync(env);
    }
    fn sync_unmatched<S: Waits>(e: &mut Core<Self, S>, env: &Envelope) {
        let me = e.base.rank;
        e.coord.ep.sync_unmatched(env_mid(env, me));
    }
    /// A synchronous message queued unmatched is acknowledged now.
    fn consumed<S: Waits>(e: &mut Core<Self, S>, env: &Envelope) {
        let me = e.base.rank;
        e.coord.ep.consumed(env_mid(env, me));
        e.flush_deferred();
    }
    /// Shared receives: an eager message had whole is told.
    fn accepted<S: Waits>(e: &mut Core<Self, S>, env: &Envelope, data: &[u8]) {
        e.share_eager(env, data);
    }
    /// A new master resending a synchronous message waits for an acknowledgement its
    /// predecessor already had.
    fn duplicate<S: Waits>(e: &mut Core<Self, S>, env: &Envelope, sync: bool) {
        let me = e.base.rank;
        e.coord.ep.duplicate(env_mid(env, me), sync);
    }
    /// Kept until its turn (a new master's resends, a dead master's successor).
    fn early<S: Waits>(e: &mut Core<Self, S>, env: Envelope, data: Vec<u8>, sync: bool) {
        let me = e.base.rank;
        let rp = &mut e.coord;
        let now = rp.now();
        rp.ep.park(now, env_mid(&env, me), Parked { data: Bytes::Owned(data), sync, rts: None });
    }
    fn drain_early<S: Waits>(e: &mut Core<Self, S>, comm: u32, src: i32, tag: i32) {
        e.drain_kept(comm, src, tag);
    }
    /// Filled at once if its master relayed the data (its sender is lost whole); otherwise
    /// every alive replica of the sender is asked: whichever is master sends the data.
    fn rndv_matched<S: Waits>(e: &mut Core<Self, S>, r: ReqId, env: &Envelope, mid: Mid) -> bool {
        if !e.fill_relayed(r, env, mid) {
            e.coord.ep.pull(mid);
        }
        true
    }
    /// A new connection under a used id: nothing streams on it yet.
    fn conn_opened<S: Waits>(e: &mut Core<Self, S>, cid: usize) {
        *e.coord.stream(cid) = Streaming::default();
    }
    /// An eager message kept whole before its match (or a relay) is taken by the layer.
    fn keeps_stream<S: Waits>(e: &mut Core<Self, S>, cid: usize) -> bool {
        std::mem::take(&mut e.coord.stream(cid).kept)
    }
    /// The receive a message streams into is withdrawn: its match is not undone any more.
    fn stream_cancelled<S: Waits>(e: &mut Core<Self, S>, cid: usize) {
        e.coord.stream(cid).undo = None;
    }
    /// An eager message kept whole before its match, or a relay, is taken.
    fn stream_kept<S: Waits>(e: &mut Core<Self, S>, cid: usize, env: Envelope, data: Vec<u8>) {
        let s = e.coord.stream(cid);
        let sync = std::mem::take(&mut s.sync);
        if std::mem::take(&mut s.relay) {
            e.relayed(env, Eager::Owned(data));
        } else {
            e.accept_eager(env, Eager::Owned(data), sync);
        }
    }
    /// Its match is no longer undone; a message streamed into a receive is told (shared
    /// receives), a replicated rendez-vous message is whole here.
    fn stream_done<S: Waits>(e: &mut Core<Self, S>, cid: usize, into: Option<ReqId>) {
        let s = e.coord.stream(cid);
        let undo = s.undo.take();
        let rndv = s.rndv.take();
        if let Some(r) = into {
            let me = e.base.rank;
            if let Some(m) = undo.map(|u| env_mid(&u.0, me)).or(rndv.map(|s| s.0)) {
                e.share_in(m, r);
            }
        }
        if let Some((m, _)) = rndv {
            e.coord.ep.have(m);
        }
    }
    fn completing<S: Waits>(e: &mut Core<Self, S>, id: ReqId, st: &Result<StatusInfo>) -> bool {
        if let Some(tx) = e.reqs[id].as_ref().and_then(|r| r.token) {
            // A frame of the replication protocol is written.
            e.tx_written(id, tx);
            return true;
        }
        // A master's operation failed (a lost rank, a revocation): its replicas follow.
        e.decide_failure(id, st);
        // A master's wildcard receive completed: its replicas follow its choice.
        let rp = &mut e.coord;
        if let Some((c, comm)) = rp.choice_of.remove(&id) {
            if let Some(m) = rp.matched.remove(&id) {
                rp.ep.decided(comm, c, Some(m));
            }
        }
        false
    }
    fn taken<S: Waits>(e: &mut Core<Self, S>, id: ReqId, ok: bool) {
        e.taken(id, ok);
    }
    /// A lent backup or a transmission whose send is withdrawn: its buffer is about to go;
    /// the endpoint keeps a copy, and queued frames carrying it copy it.
    fn detach<S: Waits>(e: &mut Core<Self, S>, id: ReqId) {
        let rp = &mut e.coord;
        let subs: Vec<ReqId> = rp.ep.detach(id).iter().filter_map(|t| rp.tx_req.get(t).copied()).collect();
        for sub in subs {
            for conn in e.conns.iter_mut().flatten() {
                conn.detach(sub);
            }
        }
    }
    fn frame<S: Waits>(
        e: &mut Core<Self, S>,
        cid: usize,
        conn: &mut Conn,
        h: Header,
        payload: Range<usize>,
        slot: i32,
        from_peer: bool,
    ) -> Option<std::result::Result<(), ConnError>> {
        e.replica_frame(cid, conn, h, payload, slot, from_peer)
    }
    /// The peer takes data: its stall timer starts again.
    fn peer_takes_data<S: Waits>(e: &mut Core<Self, S>, peer: i32) {
        let rp = &mut e.coord;
        let now = rp.now();
        rp.ep.progress(now, peer as usize);
    }
    /// A replica is gone: suspected; the launcher decides (fencing).
    fn conn_lost<S: Waits>(e: &mut Core<Self, S>, cid: usize, conn: &mut Conn, peer: i32, cause: &str) -> bool {
        e.undo_stream(cid, conn);
        let done = conn.take_completions();
        e.forget_completions(done);
        e.suspect_slot(peer, cause);
        true
    }
    /// `id` is a slot: one replica.
    fn declared_dead<S: Waits>(e: &mut Core<Self, S>, id: i32) -> bool {
        e.slot_failed(id, "declared dead by the launcher");
        true
    }
    /// A non-master's operations fail when its master says (it applies the revocation
    /// itself only if it takes over).
    fn revocation<S: Waits>(e: &mut Core<Self, S>, ctx: u32) {
        if e.coord.ep.is_master() {
            e.revoke(ctx);
        } else {
            e.coord.unapplied.push(ctx);
        }
    }
    /// The endpoint's timers: transmissions and choices a replica does not take, a message
    /// waiting for an earlier one of its channel lost with a dead replica.
    fn timers<S: Waits>(e: &mut Core<Self, S>, limit: Duration) {
        e.coord.timers(limit);
    }
    fn stalled<S: Waits>(e: &mut Core<Self, S>, peer: i32, for_: Duration) -> bool {
        let cause = format!("a send to it made no progress for {:.1} s (2·T_cleanup)", for_.as_secs_f64());
        e.suspect_slot(peer, &cause);
        true
    }
    fn idle<S: Waits>(e: &Core<Self, S>) -> bool {
        e.coord.ep.idle()
    }
    fn hinted<S: Waits>(e: &Core<Self, S>, h: usize) -> (Range<usize>, Option<usize>) {
        let rp = &e.coord;
        let l = &rp.layout;
        // A replicated rank's data comes from its master alone: its other replicas send
        // only acknowledgements of this process's own transmissions (synchronous sends,
        // rendez-vous pulls), awaited only while some are under way. Reading their sockets
        // on every poll doubled the system calls of a wait at R = 2; they are read through
        // the kernel's readiness list.
        let slots = match rp.ep.coordinator().master_of(h) {
            Some(m) if rp.ep.idle() => m..m + 1,
            _ => l.slots_of(h),
        };
        // A replica holding backups awaits its master's commits for them: it reads the
        // master's socket too. Left to the readiness list (every 64th poll), the commits
        // piled up there, and their socket buffers, carved from the same page fragments as
        // the master's data, were freed last, by this process on its own core: the master's
        // core then refilled its page lists from the buddy allocator, which a VM's free-page
        // reporting makes slow (docs/benchmarks.md, "The slow phases found: commits read
        // late").
        let master = if !rp.ep.is_master() && rp.ep.coordinator().backup_len() > 0 {
            rp.ep.coordinator().master_of(rp.ep.coordinator().rank()).filter(|m| !slots.contains(m))
        } else {
            None
        };
        (slots, master)
    }
    /// A schedule (immediate collective) is posting: its operations are not numbered.
    fn scheduling<S: Waits>(e: &mut Core<Self, S>, on: bool) {
        e.coord.in_schedule = on;
    }
    fn schedule_word<S: Waits>(e: &mut Core<Self, S>, op: u64) -> Option<bool> {
        e.schedule_word_of(op)
    }
}
