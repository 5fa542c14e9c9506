//! The engine's frames: reading a connection's frames and handling each kind (eager,
//! rendez-vous announcements, their answers and data, streamed payloads), the same-host fast
//! path of small eager frames, and single copies from a sender's memory.

use super::*;

impl<C: Coordination, S: Waits> Core<C, S> {
    /// A single-copy announcement matched receive `r`: the data is copied straight from the
    /// sender's memory into the receive buffer, then the sender is told (its send
    /// completes). If the copy fails, the receive waits for the sender's connection to end
    /// (a sender that died) and fails with it, as with the TCP device; see `sc_broken`.
    pub(crate) fn single_copy(&mut self, r: ReqId, env: &Envelope, mid: Mid, src: ScSource) {
        let (ptr, cap) = {
            let q = self.reqs[r].as_ref().expect("live request");
            (q.ptr, q.cap)
        };
        let len = env.len as usize;
        let st = StatusInfo { source: env.src, tag: env.tag, len: env.len, cancelled: false };
        let res = if len > cap {
            Err(Error::Truncated { from_rank: env.src, tag: env.tag, message_bytes: env.len, buffer_bytes: cap })
        } else {
            // SAFETY: `ptr` is valid for writes of `cap >= len` bytes until the request
            // completes (`irecv`'s contract; it is pending and completes just below).
            match unsafe { shm::copy_from(src.pid, src.addr, len, ptr, src.ticket, src.value) } {
                Ok(()) => {
                    self.sc_count += 1;
                    Ok(st)
                }
                Err(e) => {
                    // Nothing is delivered: the receive waits like one whose data never came.
                    let why = match e {
                        shm::CopyError::Gone => "the sender's process is gone".to_string(),
                        shm::CopyError::Failed(d) => format!("single copy from the sender failed: {d}"),
                        shm::CopyError::Withdrawn => "the sender withdrew a message being copied".to_string(),
                    };
                    self.shm_note(&format!("single copy of {mid:?} from rank {}: {why}", env.src));
                    let gone = self.peers.get(src.slot as usize).is_none_or(|p| p.conns.is_empty());
                    if let Some(cause) = self.lost.get(&env.src).cloned() {
                        Err(Error::PeerLost { rank: env.src, cause })
                    } else if gone {
                        let cause = "connection closed before it finalized (process died?)".to_string();
                        Err(Error::PeerLost { rank: env.src, cause })
                    } else {
                        self.rndv_recv.insert(mid, r);
                        self.sc_broken.push((src.slot, Instant::now(), why));
                        return;
                    }
                }
            }
        };
        self.complete(r, res);
        let mut done = Header::new(FrameKind::ReadyToRecv, mid, 0);
        done.flags |= p2pmpi_wire::frame::flags::SINGLE_COPY;
        self.deferred.push((env.src, Out::new(done, Payload::None)));
    }

    /// A ticket for a single-copy send, and its value.
    pub(crate) fn take_ticket(&mut self) -> (&'static AtomicU64, u64) {
        let t = self.tickets.pop().unwrap_or_else(|| Box::leak(Box::new(AtomicU64::new(0))));
        let value = self.ticket_next;
        self.ticket_next = self.ticket_next.wrapping_add(1).max(1);
        t.store(value, Ordering::SeqCst);
        (t, value)
    }

    /// A rendez-vous send is over (or withdrawn): its ticket, if any, is cleared before the
    /// caller may let the buffer go (a receiver reading it then fails its check) and goes
    /// back to the pool. Returns the send's request.
    pub(crate) fn retire_send(&mut self, s: RndvSend) -> ReqId {
        if let Some(t) = s.ticket {
            t.store(0, Ordering::SeqCst);
            self.tickets.push(t);
        }
        s.req
    }

    /// Fails the connections of senders whose single copy failed and that are still up
    /// after [`SC_GRACE`] (a sender gone closes its connection first: see `single_copy`).
    pub(crate) fn check_single_copies(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.sc_broken.len() {
            let (slot, since, _) = self.sc_broken[i];
            let conns = self.peers.get(slot as usize).map(|p| p.conns.clone()).unwrap_or_default();
            if conns.is_empty() || self.base.fatal.is_some() {
                self.sc_broken.swap_remove(i);
                continue;
            }
            if now.duration_since(since) < SC_GRACE {
                i += 1;
                continue;
            }
            let (_, _, why) = self.sc_broken.swap_remove(i);
            for cid in conns {
                if self.conns.get(cid).is_some_and(Option::is_some) {
                    self.conn_failed(cid, slot, ConnError::Protocol(why.clone()));
                }
            }
        }
    }

    /// [`Self::read_conn`] for a connection the caller waits on: a plain socket at rest is
    /// read once first, and when nothing came (the common answer of a poll round) that is
    /// all (the general read costs several times the instructions of this look).
    #[inline]
    pub(crate) fn read_awaited(&mut self, cid: usize) -> bool {
        if let Some(conn) = self.conns.get_mut(cid).and_then(Option::as_deref_mut) {
            match conn.poll_idle() {
                None => {}
                Some(Ok(0)) => {
                    // Nothing buffered, nothing in the socket: not to be read again unasked
                    // (a connection left to read later keeps the rings' fast paths off).
                    if !self.conns.unread.is_empty() {
                        self.conns.unread.retain(|&c| c != cid);
                    }
                    return false;
                }
                // The frames now buffered are handled below.
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    let peer = conn.peer.unwrap_or(-1);
                    self.conn_failed(cid, peer, e);
                    return false;
                }
            }
        }
        self.read_conn(cid)
    }

    /// Reads everything available on a connection and handles the frames. Returns whether
    /// any byte was read.
    pub(crate) fn read_conn(&mut self, cid: usize) -> bool {
        if self.conns.get(cid).and_then(Option::as_ref).is_none_or(|c| c.read_eof || c.ring_quiet()) {
            return false;
        }
        let Some(mut conn) = self.conns.get_mut(cid).and_then(Option::take) else { return false };
        let mut got = false;
        // A sender faster than this process must not keep it here: past the budget it goes
        // back to its caller (whose request may be complete) and reads on at the next call.
        let mut budget = READ_BUDGET;
        let outcome = loop {
            // Streaming rendez-vous data straight into the receive buffer.
            if let RState::Stream { req, ptr, left, discard } = conn.rstate {
                let mut left = left;
                let res = conn.fill_stream(ptr, &mut left, discard);
                if let RState::Stream { left: l, .. } = &mut conn.rstate {
                    *l = left;
                }
                match res {
                    Ok(n) => {
                        got |= n > 0;
                        budget = budget.saturating_sub(n);
                        if left == 0 {
                            conn.rstate = RState::Header;
                            let mut into = None;
                            if let Some((env, mut data)) = conn.stream_unexpected.take() {
                                // SAFETY: the buffer was created empty with room for `env.len`
                                // bytes (`pool::with_room`), and the stream, now complete
                                // (`left == 0`), wrote all of them through its pointer.
                                unsafe { data.set_len(env.len as usize) };
                                conn.stream_status = None;
                                if C::keeps_stream(self, cid) {
                                    C::stream_kept(self, cid, env, data);
                                } else if let Some((r, Body::Eager(data))) =
                                    self.matcher.deliver_late(env, Body::Eager(data))
                                {
                                    self.fill(r, &env, &data);
                                    crate::pool::give(data);
                                }
                            } else if !discard {
                                if let Some(st) = conn.stream_status.take() {
                                    self.complete(req, Ok(st));
                                    into = Some(req);
                                }
                            }
                            C::stream_done(self, cid, into);
                            continue;
                        }
                        if n == 0 {
                            break Ok(());
                        }
                        if budget == 0 {
                            self.conns.read_later(cid);
                            break Ok(());
                        }
                        continue;
                    }
                    Err(e) => break Err(e),
                }
            }
            // Whole frames already buffered.
            match if conn.header_buffered() { conn.next_frame() } else { Ok(None) } {
                Ok(Some((h, payload_range))) => {
                    got = true;
                    self.filled = false;
                    if let Err(e) = self.handle_frame(cid, &mut conn, h, payload_range) {
                        break Err(e);
                    }
                    if self.filled {
                        // A receive completed: back to the caller, who may be waiting for just
                        // that one. On shared memory, as after `ring_eager`: what is still
                        // buffered is read at the next progress call (a shared-memory
                        // connection is looked at on each). On a socket, the read that would
                        // find nothing more (one system call, `EAGAIN`) is not made before the
                        // caller has its message: the connection is read again by the next
                        // progress call (epoll is edge-triggered: it says nothing of data
                        // already there).
                        if conn.shm.is_none() {
                            self.conns.read_later(cid);
                        }
                        break Ok(());
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => break Err(e),
            }
            if budget == 0 {
                self.conns.read_later(cid);
                break Ok(());
            }
            if conn.ring_quiet() {
                // A shared-memory connection with nothing more published: no need to look.
                break Ok(());
            }
            if C::PLAIN && conn.shm.is_some() && conn.nothing_buffered() {
                // Nothing buffered: a small eager frame is taken straight from the ring.
                match self.ring_eager(&mut conn) {
                    // A receive completed: back to the caller, who may be waiting for just
                    // that one (reading on would move what follows into the unexpected queue,
                    // to be copied twice, when the caller's next receive could take it
                    // straight from the ring).
                    Ok(Some(true)) => {
                        got = true;
                        break Ok(());
                    }
                    Ok(Some(false)) => {
                        got = true;
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => break Err(e),
                }
            }
            match conn.fill() {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    got = true;
                    budget = budget.saturating_sub(n);
                }
                Err(e) => break Err(e),
            }
        };
        let peer = conn.peer;
        let kick = std::mem::take(&mut conn.kick);
        self.conns[cid] = Some(conn);
        if let Err(e) = outcome {
            self.conn_failed(cid, peer.unwrap_or(-1), e);
        } else if kick {
            // The opening moved on: write its frame, and what waited behind the gate.
            self.flush_conn(cid);
        }
        got
    }

    /// The same-host fast path of an unreplicated job: an eager frame whose header and
    /// payload lie in one piece at the read position of a shared-memory connection is matched
    /// and copied straight from the ring into its receive (or into the unexpected queue),
    /// without passing through the connection's read buffer. Returns whether it took a frame
    /// (`None`: it did not), and whether that frame completed a receive; anything else (other kinds, a frame that wraps around the ring's end or is not whole
    /// yet, a connection still opening or streaming) is left to the general path.
    pub(crate) fn ring_eager(&mut self, conn: &mut Conn) -> std::result::Result<Option<bool>, ConnError> {
        if !matches!(conn.rstate, RState::Header) || !conn.authenticated() {
            return Ok(None);
        }
        let (Some(slot), Some(l)) = (conn.peer, conn.shm.as_deref_mut()) else { return Ok(None) };
        let Some((hb, contiguous)) =
            l.peek_header::<{ p2pmpi_wire::frame::HEADER_LEN }>().map_err(ConnError::Protocol)?
        else {
            return Ok(None);
        };
        let h = Header::decode(&hb, conn.max_eager).map_err(|e| ConnError::Protocol(e.to_string()))?;
        let mid = h.mid;
        let peer = C::rank_of(self, slot);
        let total = p2pmpi_wire::frame::HEADER_LEN + h.len as usize;
        if h.kind != FrameKind::Eager
            || conn::is_streamed(&h)
            || total > contiguous
            || mid.src as i32 != peer
            || mid.dst as i32 != self.base.rank
        {
            return Ok(None);
        }
        let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
        let data = l.at_head(p2pmpi_wire::frame::HEADER_LEN);
        let len = h.len as usize;
        let mut matched = false;
        match self.matcher.arrive(&env) {
            Arrival::Matched(r) => {
                matched = true;
                self.traced(&env);
                C::matched(self, r, &env);
                let req = self.req_mut(r);
                let st = if len > req.cap {
                    Err(Error::Truncated {
                        from_rank: env.src,
                        tag: env.tag,
                        message_bytes: env.len,
                        buffer_bytes: req.cap,
                    })
                } else {
                    if len != 0 {
                        // SAFETY: `data` points at the `len` payload bytes that `peek_header`
                        // found published in one piece (`total <= contiguous`), ours until
                        // `consume` below; `req.ptr` is valid for writes of `req.cap >= len`
                        // bytes until the request completes (`irecv`'s contract; it completes
                        // just below) and is not the ring's memory.
                        unsafe { std::ptr::copy_nonoverlapping(data, req.ptr, len) };
                    }
                    Ok(StatusInfo { source: env.src, tag: env.tag, len: env.len, cancelled: false })
                };
                self.complete(r, st);
            }
            Arrival::Unmatched => {
                self.traced(&env);
                let mut v = crate::pool::with_room(len);
                // SAFETY: as above for `data`; `v` has room for `len` bytes, all written by the
                // copy before its length is set.
                unsafe {
                    std::ptr::copy_nonoverlapping(data, v.as_mut_ptr(), len);
                    v.set_len(len);
                }
                self.matcher.enqueue(env, Body::Eager(v));
            }
            Arrival::Duplicate => {}
            Arrival::Early => return Err(ConnError::Protocol(format!("message {mid:?} out of order"))),
        }
        if l.consume(total) {
            conn.doorbell();
        }
        Ok(Some(matched))
    }

    pub(crate) fn handle_frame(
        &mut self,
        cid: usize,
        conn: &mut Conn,
        h: Header,
        payload: std::ops::Range<usize>,
    ) -> std::result::Result<(), ConnError> {
        if !conn.authenticated() {
            return self.opening_frame(cid, conn, h, payload);
        }
        let Some(peer) = conn.peer else {
            return Err(ConnError::Protocol("authenticated connection without a peer".into()));
        };
        let proto = |d: String| ConnError::Protocol(d);
        let mid = h.mid;
        // `peer` is a slot; messages name ranks.
        let slot = peer;
        let peer = C::rank_of(self, slot);
        let from_peer = mid.src as i32 == peer && mid.dst as i32 == self.base.rank;
        if let Some(done) = C::frame(self, cid, conn, h, payload.clone(), slot, from_peer) {
            // A frame the coordination takes (its own kinds, and the messages it carries).
            return done;
        }
        match h.kind {
            FrameKind::Hello | FrameKind::Challenge | FrameKind::Auth => {
                return Err(proto(format!("{:?} frame after the opening", h.kind)))
            }
            FrameKind::Bye => {
                self.peers[slot as usize].bye = true;
            }
            FrameKind::Commit | FrameKind::Choice => {
                return Err(proto(format!("{:?} frame in a job without replicas", h.kind)))
            }
            FrameKind::Eager | FrameKind::ReadyToSend if !from_peer => {
                return Err(proto(format!("{:?} frame with MID {mid:?} on rank {peer}'s connection", h.kind)))
            }
            FrameKind::Eager if conn::is_streamed(&h) => self.streamed_eager(conn, h, peer)?,
            FrameKind::Eager => {
                let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
                match self.matcher.arrive(&env) {
                    Arrival::Matched(r) => {
                        self.traced(&env);
                        self.fill(r, &env, &conn.rbuf[payload])
                    }
                    Arrival::Unmatched => {
                        self.traced(&env);
                        self.matcher.enqueue(env, Body::Eager(conn.rbuf[payload].to_vec()))
                    }
                    Arrival::Duplicate => {}
                    Arrival::Early => return Err(proto(format!("message {mid:?} out of order"))),
                }
            }
            FrameKind::ReadyToSend => self.announcement_frame(conn, h, payload, slot, peer)?,
            FrameKind::ReadyToRecv => self.ready_to_recv_frame(h, peer)?,
            FrameKind::Data => {
                if !from_peer {
                    return Err(proto(format!("data frame with MID {mid:?} from rank {peer}")));
                }
                let Some(r) = self.rndv_recv.remove(&mid) else {
                    return Err(proto(format!("data for unknown MID {mid:?}")));
                };
                let st = StatusInfo { source: peer, tag: mid.tag, len: h.len, cancelled: false };
                self.begin_stream(conn, r, st);
            }
        }
        Ok(())
    }

    /// An eager message too large for the connection's buffer: streamed into the matching
    /// receive, or into a buffer of its own until one matches.
    pub(crate) fn streamed_eager(
        &mut self,
        conn: &mut Conn,
        h: Header,
        peer: i32,
    ) -> std::result::Result<(), ConnError> {
        let mid = h.mid;
        let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
        let st = StatusInfo { source: peer, tag: mid.tag, len: h.len, cancelled: false };
        match self.matcher.arrive(&env) {
            Arrival::Matched(r) => {
                self.traced(&env);
                self.begin_stream(conn, r, st)
            }
            Arrival::Early => return Err(ConnError::Protocol(format!("message {mid:?} out of order"))),
            Arrival::Unmatched => {
                self.traced(&env);
                let mut data = crate::pool::with_room(h.len as usize);
                let ptr = data.as_mut_ptr();
                conn.stream_unexpected = Some((env, data));
                conn.stream_status = Some(st);
                conn.rstate = RState::Stream { req: usize::MAX, ptr, left: h.len as usize, discard: false };
            }
            Arrival::Duplicate => {
                conn.skip_payload(st, h.len as usize);
            }
        }
        Ok(())
    }

    /// A rendez-vous announcement (READY_TO_SEND; single-copy ones carry their ticket).
    pub(crate) fn announcement_frame(
        &mut self,
        conn: &mut Conn,
        h: Header,
        payload: std::ops::Range<usize>,
        slot: i32,
        peer: i32,
    ) -> std::result::Result<(), ConnError> {
        let mid = h.mid;
        let env = Envelope { comm: mid.comm, src: peer, tag: mid.tag, seq: mid.seq, len: h.len };
        if h.flags & p2pmpi_wire::frame::flags::SINGLE_COPY != 0 {
            let Some(pid) = conn.shm.as_deref().and_then(|l| l.peer_pid()) else {
                return Err(ConnError::Protocol(format!(
                    "single-copy announcement of {mid:?} that this process may not read"
                )));
            };
            let b = &conn.rbuf[payload];
            let word = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
            if b.len() != p2pmpi_wire::frame::SINGLE_COPY_LEN as usize || h.len == 0 {
                return Err(ConnError::Protocol(format!("bad single-copy announcement of {mid:?}")));
            }
            // Taken by the receive that matches it (now or once queued).
            self.sc_in.insert(mid, ScSource { slot, pid, addr: word(0), ticket: word(1), value: word(2) });
        }
        match self.matcher.arrive(&env) {
            Arrival::Matched(r) => {
                self.traced(&env);
                self.start_rndv_recv(r, &env)
            }
            Arrival::Unmatched => {
                self.traced(&env);
                self.matcher.enqueue(env, Body::Rendezvous)
            }
            Arrival::Duplicate => {
                self.sc_in.remove(&mid);
            }
            Arrival::Early => return Err(ConnError::Protocol(format!("message {mid:?} out of order"))),
        }
        Ok(())
    }

    /// The receiver of a rendez-vous message is ready (READY_TO_RECV): its data goes out, or,
    /// single-copy, the send is complete.
    pub(crate) fn ready_to_recv_frame(&mut self, h: Header, peer: i32) -> std::result::Result<(), ConnError> {
        let mid = h.mid;
        if mid.src as i32 != self.base.rank || mid.dst as i32 != peer {
            return Err(ConnError::Protocol(format!("READY_TO_RECV for MID {mid:?} from rank {peer}")));
        }
        if h.flags & p2pmpi_wire::frame::flags::SINGLE_COPY != 0 {
            // The receiver copied the data: the send is complete. (Unknown: a send
            // withdrawn meanwhile, whose ticket the receiver found cleared.)
            if let Some(s) = self.rndv_send.remove(&mid) {
                let req = self.retire_send(s);
                let st = StatusInfo { source: peer, tag: 0, len: 0, cancelled: false };
                self.complete(req, Ok(st));
            }
            return Ok(());
        }
        let Some(s) = self.rndv_send.remove(&mid) else {
            return Err(ConnError::Protocol(format!("READY_TO_RECV for unknown MID {mid:?}")));
        };
        if s.ticket.is_some() {
            return Err(ConnError::Protocol(format!("READY_TO_RECV for a single-copy send {mid:?}")));
        }
        let data = Header::new(FrameKind::Data, mid, s.len as u64);
        let payload = if s.len == 0 { Payload::None } else { Payload::Raw(s.ptr, s.len) };
        self.deferred.push((peer, Out::with_completion(data, payload, s.req)));
        Ok(())
    }

    /// Streams the payload announced by a header into receive `r`'s buffer (or drops it,
    /// failing the receive, if it does not fit).
    pub(crate) fn begin_stream(&mut self, conn: &mut Conn, r: ReqId, st: StatusInfo) {
        let (ptr, cap) = {
            let q = self.reqs[r].as_ref().expect("live request");
            (q.ptr, q.cap)
        };
        let len = st.len as usize;
        let discard = len > cap;
        if discard {
            let e = Error::Truncated { from_rank: st.source, tag: st.tag, message_bytes: st.len, buffer_bytes: cap };
            self.complete(r, Err(e));
        }
        conn.stream_status = Some(st);
        conn.rstate = RState::Stream { req: r, ptr, left: len, discard };
        if len == 0 && !discard {
            conn.rstate = RState::Header;
            self.complete(r, Ok(st));
        }
    }
}
