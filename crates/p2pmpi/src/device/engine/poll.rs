//! The engine over the transport: the poll loop (readiness, the rings, the spin phase of a
//! wait), the engine's side of the openings (which slots may prove the job key, what a
//! proved connection becomes; the exchange itself is the transport's `opening`), writing
//! frames out, and what a broken connection or the end of the job does.

use super::*;

impl<C: Coordination, S: Waits> Core<C, S> {
    /// Builds the full mesh at start-up: one connection per pair, initiated by the higher
    /// rank. Connecting both ways at once would give a pair two sockets, each carrying data
    /// one way only, so that every message costs a data segment plus a separate ACK instead of
    /// ACKs riding on replies (measured: +2–3 µs per message on loopback).
    pub fn connect_mesh(&mut self, limit: Duration) -> Result<()> {
        failpoints::at_start();
        // The world's slots (a spawned job's follow its ancestors').
        let (lo, hi) = C::world_slots(self);
        self.open_all(lo..self.base.slot)?;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(e) = &self.base.fatal {
                return Err(e.clone());
            }
            // A replica declared dead while the job starts (frozen, or cut off, before it
            // connected or answered) is not waited for.
            C::apply_declared(self);
            let slots = hi;
            let dead = |r: i32| C::cut(self, r);
            // Every higher slot connected and proved the key, and every connection this
            // process opened was answered (a lower slot waits for this process's proof: it
            // must be given before the program goes off computing).
            let missing = (self.base.slot + 1..slots).find(|&r| self.peers[r as usize].send_conn.is_none() && !dead(r));
            let unanswered = (lo..self.base.slot).find(|&r| {
                !dead(r)
                    && self.peers[r as usize]
                        .conns
                        .iter()
                        .any(|&c| self.conns[c].as_ref().is_some_and(|c| !c.authenticated()))
            });
            let Some(r) = missing.or(unanswered) else { return Ok(()) };
            if Instant::now() >= deadline {
                return Err(Error::PeerLost {
                    rank: C::rank_of(self, r),
                    cause: format!("it did not connect within {limit:?} of start-up"),
                });
            }
            self.progress(None, Some(Duration::from_millis(5)));
        }
    }

    /// Makes room for universe ids below `n` (processes outside the world: children of a
    /// spawn, whose addresses are unknown until they connect).
    /// In a replicated job the universe's layout grows: every universe id has as many
    /// replicas, numbered after the slots already known ([`Layout::grown`]).
    pub fn grow(&mut self, n: usize) {
        let slots = C::grow(self, n);
        if slots > self.peers.len() {
            self.peers.resize_with(slots, Peer::default);
            self.addrs.resize(slots, SocketAddr::from(([0, 0, 0, 0], 0)));
        }
        self.base.size = self.base.size.max(n as i32);
    }

    /// Opens a connection to each slot of `slots` that the coordination still counts on (the
    /// deaths declared so far applied before each).
    fn open_all(&mut self, slots: impl Iterator<Item = i32>) -> Result<()> {
        for r in slots {
            C::apply_declared(self);
            if C::cut(self, r) {
                continue;
            }
            if let Err(e) = self.send_conn(r) {
                C::start_failed(self, r, e)?;
            }
        }
        Ok(())
    }

    /// Opens connections to the processes `ids` (outside the world) and waits until each one
    /// proved the job key, or until `limit`.
    pub fn connect_to(&mut self, ids: &[i32], limit: Duration) -> Result<()> {
        let ids = &C::slots_of_ids(self, ids)[..];
        // Processes the coordination counts on no more (a spawn's parent that died before its
        // children started): not waited for.
        self.open_all(ids.iter().copied())?;
        let deadline = Instant::now() + limit;
        loop {
            if let Some(e) = &self.base.fatal {
                return Err(e.clone());
            }
            C::apply_declared(self);
            let pending = ids.iter().copied().find(|&r| {
                !C::cut(self, r)
                    && self.peers[r as usize]
                        .conns
                        .iter()
                        .any(|&c| self.conns[c].as_ref().is_some_and(|c| !c.authenticated()))
            });
            let Some(r) = pending else { return Ok(()) };
            if Instant::now() >= deadline {
                return Err(Error::PeerLost {
                    rank: C::rank_of(self, r),
                    cause: format!("it did not answer within {limit:?}"),
                });
            }
            self.progress(None, Some(Duration::from_millis(5)));
        }
    }

    /// Waits until every process of `ids` (spawned children, whose addresses this process
    /// does not know) connected and proved the job key, or until `limit`.
    pub fn await_connections(&mut self, ids: &[i32], limit: Duration) -> Result<()> {
        let slots = C::slots_of_ids(self, ids);
        self.await_slots(&slots, limit)
    }

    /// Waits until every slot of `ids` connected and proved the job key, or until `limit`.
    pub(crate) fn await_slots(&mut self, ids: &[i32], limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(e) = &self.base.fatal {
                return Err(e.clone());
            }
            let Some(r) = ids.iter().copied().find(|&r| self.peers[r as usize].send_conn.is_none() && !C::cut(self, r))
            else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(Error::PeerLost {
                    rank: C::rank_of(self, r),
                    cause: format!("the spawned process did not connect within {limit:?}"),
                });
            }
            self.progress(None, Some(Duration::from_millis(5)));
        }
    }

    /// The connection used to send to `dst`, connecting if there is none.
    pub(crate) fn send_conn(&mut self, dst: i32) -> Result<usize> {
        if let Some(c) = self.peers[dst as usize].send_conn {
            return Ok(c);
        }
        let id = C::rank_of(self, dst);
        let outside = id < self.base.world_base || id >= self.base.world_base + self.base.world_size;
        if outside && self.addrs[dst as usize].port() == 0 && !C::cut(self, dst) {
            // A process outside the world whose address is unknown (a spawned child): it
            // connects itself (see `await_connections`).
            self.await_slots(&[dst], Duration::from_secs(60))?;
            if let Some(c) = self.peers[dst as usize].send_conn {
                return Ok(c);
            }
        }
        if let Some(e) = C::refused(self, dst) {
            return Err(e);
        }
        let addr = self.addrs[dst as usize];
        let local = self.local_addr().map(|a| a.ip());
        let retry = C::connect_retry(self, outside).unwrap_or(Duration::from_secs(10) * load_factor());
        let std_stream = connect_with_retry(local, addr, retry).map_err(|e| Error::PeerLost {
            rank: C::rank_of(self, dst),
            cause: format!("cannot connect to {addr}: {e}"),
        })?;
        let mut stream = TcpStream::from_std(std_stream);
        let cid = self.conns.vacant();
        self.io.register(&mut stream, cid)?;
        // The opening: this process's nonce; what it sends waits until the acceptor proves
        // the job key (its `Challenge`), then follows this process's proof.
        let ring = (self.shm_allowed(dst) && self.same_host(dst)).then_some(self.shm_policy.ring);
        let (c, hello, refused) = self.opening().open(stream, dst, ring);
        if let Some(e) = refused {
            self.shm_note(&format!("no shared memory with slot {dst} (TCP instead): {e}"));
        }
        self.conns.fill(cid, Box::new(c));
        C::conn_opened(self, cid);
        let p = &mut self.peers[dst as usize];
        p.conns.push(cid);
        p.send_conn = Some(cid);
        self.push_out(cid, hello)?;
        Ok(cid)
    }

    /// Queues a frame on a connection and writes as much as the socket takes now.
    pub(crate) fn push_out(&mut self, cid: usize, out: Out) -> Result<()> {
        // Fencing, if the coordination fences its writes.
        C::before_write();
        let conn = self.conns[cid].as_mut().expect("live connection");
        let peer = conn.peer.unwrap_or(-1);
        let res = conn.push(out);
        let done = match res {
            Ok(done) => done,
            Err(e) => return Err(self.write_failed(cid, peer, e)),
        };
        if let Some(r) = done {
            let st = StatusInfo { source: peer, tag: 0, len: 0, cancelled: false };
            self.complete(r, Ok(st));
        }
        self.update_interest(cid);
        Ok(())
    }

    /// A write on connection `cid` (to `peer`) failed: the connection is dropped; returns the
    /// error the send reports.
    pub(crate) fn write_failed(&mut self, cid: usize, peer: i32, e: ConnError) -> Error {
        self.conn_failed(cid, peer, e);
        self.base.fatal.clone().unwrap_or(Error::PeerLost { rank: peer, cause: "connection failed".into() })
    }

    /// [`Self::push_out`] for an eager send's frame: [`DONE`] if the frame was written whole
    /// at once, else a request that completes when the rest is written.
    pub(crate) fn push_eager(&mut self, cid: usize, out: Out) -> Result<ReqId> {
        let conn = self.conns[cid].as_mut().expect("live connection");
        match conn.push_or_queue(out) {
            Ok(None) => Ok(DONE),
            Ok(Some(queued)) => {
                let r = Req { ptr: std::ptr::null_mut(), cap: 0, state: ReqState::Pending, token: None };
                let req = alloc_req(&mut self.reqs, &mut self.free_reqs, r);
                queued.done = Some(req);
                self.update_interest(cid);
                Ok(req)
            }
            Err(e) => {
                let peer = conn.peer.unwrap_or(-1);
                Err(self.write_failed(cid, peer, e))
            }
        }
    }

    /// Carries out what the coordination has to do, then sends the frames deferred.
    #[inline]
    pub(crate) fn flush_deferred(&mut self) {
        C::drive(self);
        if !self.deferred.is_empty() {
            self.send_deferred();
        }
    }

    fn send_deferred(&mut self) {
        while !self.deferred.is_empty() {
            let batch = std::mem::take(&mut self.deferred);
            for (peer, out) in batch {
                if self.base.fatal.is_some() {
                    return;
                }
                // Nothing more for a process the coordination counts on no more.
                if C::cut(self, peer) {
                    continue;
                }
                match self.send_conn(peer) {
                    Ok(cid) => {
                        let _ = self.push_out(cid, out);
                    }
                    Err(e) => C::send_failed(self, peer, e),
                }
            }
        }
    }

    pub(crate) fn update_interest(&mut self, cid: usize) {
        let Some(conn) = self.conns[cid].as_mut() else { return };
        let want = conn.wants_write();
        if want != conn.want_write {
            conn.want_write = want;
            self.io.reregister(&mut conn.stream, cid, want);
        }
    }

    // ----------------------------------------------------------------- receiving

    /// Makes progress: reads and writes what the sockets allow, then moves every immediate
    /// collective forward. With `timeout` `None` it never sleeps; `hint` names the peer a
    /// caller waits for, whose sockets are read directly before asking the kernel which
    /// others are ready.
    /// While a blocking call spins for a message from `hint`: watches that peer's
    /// shared-memory rings alone, up to `rounds` looks, until one shows something (or the
    /// peer has other connections, or the job is replicated: then it returns at once). A look
    /// is a load or three, where a progress round is a few hundred instructions: a frame is
    /// seen sooner after it is published.
    pub fn await_ring(&self, hint: Option<i32>, rounds: u32) {
        let Some(h) = hint.filter(|h| *h != self.base.rank && *h >= 0 && (*h as usize) < self.peers.len()) else {
            return;
        };
        if !C::PLAIN || !self.conns.unread.is_empty() || !self.schedules.is_empty() {
            return;
        }
        let conns = &self.peers[h as usize].conns;
        // Quiet both ways: a frame queued for the ring (waiting for room) is written by the
        // progress round, not watched for.
        let quiet = || {
            conns.iter().all(|&c| {
                self.conns[c].as_ref().is_some_and(|c| c.shm.is_some() && c.ring_quiet() && !c.ring_backlog())
            })
        };
        for _ in 0..rounds {
            if conns.is_empty() || !quiet() {
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// Whether a wait for `hint` is a wait on shared-memory rings only (every connection to
    /// that peer a ring): nothing of the kernel's has to run for its data to come.
    pub(crate) fn hint_on_rings(&self, hint: Option<i32>) -> bool {
        let Some(h) = hint.filter(|h| *h != self.base.rank && *h >= 0 && (*h as usize) < self.peers.len()) else {
            return false;
        };
        let conns = &self.peers[h as usize].conns;
        !conns.is_empty() && conns.iter().all(|&c| self.conns[c].as_ref().is_some_and(|c| c.shm.is_some()))
    }

    /// The spin phase of a blocking wait for `hint` on shared memory, once [`Self::await_ring`]
    /// saw something: takes a small eager frame straight from that peer's ring, without a
    /// whole progress round (the other connections, queued writes and immediate
    /// collectives are moved by the rounds the caller makes whenever this returns `None`).
    /// `Some(true)`: the frame completed a receive (the caller looks at its request at once);
    /// `Some(false)`: it went to the unexpected queue; `None`: the fast path does not apply
    /// (another kind of frame or none, a replicated job, a peer with several connections or
    /// bytes buffered, work pending elsewhere).
    #[inline]
    pub fn ring_poll(&mut self, hint: Option<i32>) -> Option<bool> {
        let h = hint.filter(|h| *h != self.base.rank && *h >= 0 && *h < self.base.size)? as usize;
        if !C::PLAIN || !self.conns.unread.is_empty() || !self.schedules.is_empty() || !self.sc_broken.is_empty() {
            return None;
        }
        let [cid] = self.peers.get(h)?.conns[..] else { return None };
        let mut conn = self.conns[cid].take()?;
        let ok = conn.shm.is_some() && !conn.read_eof && conn.nothing_buffered() && !conn.ring_backlog();
        let res = if ok { self.ring_eager(&mut conn) } else { Ok(None) };
        let peer = conn.peer;
        self.conns[cid] = Some(conn);
        match res {
            Ok(r) => r,
            Err(e) => {
                self.conn_failed(cid, peer.unwrap_or(-1), e);
                None
            }
        }
    }

    /// Returns whether a connection gave something (a frame, or data of one).
    pub(crate) fn progress_io(&mut self, hint: Option<i32>, timeout: Option<Duration>) -> bool {
        self.tick = self.tick.wrapping_add(1);
        if !self.sc_broken.is_empty() {
            self.check_single_copies();
        }
        if !self.conns.rings.is_empty() {
            self.flush_rings();
        }
        if timeout.is_none() {
            if let Some(h) = hint.filter(|h| *h != self.base.rank && *h >= 0 && *h < self.base.size) {
                let mut got = false;
                // The slots whose connections bring `h`'s data, and one more the
                // coordination awaits frames from.
                let (slots, extra) = C::hinted(self, h as usize);
                for slot in slots.chain(extra) {
                    let mut i = 0;
                    while let Some(&cid) = self.peers[slot].conns.get(i) {
                        got |= self.read_awaited(cid);
                        i += 1;
                    }
                }
                self.flush_deferred();
                if got || self.tick % 64 != 0 {
                    return got;
                }
            }
        }
        let mut t = if self.conns.unread.is_empty() { timeout.unwrap_or(Duration::ZERO) } else { Duration::ZERO };
        if !self.sc_broken.is_empty() {
            // A failed single copy is looked at again soon (see `check_single_copies`).
            t = t.min(Duration::from_millis(50));
        }
        let mut got = false;
        let unread = self.conns.take_unread();
        for &cid in &unread {
            got |= self.read_conn(cid);
        }
        self.conns.give_back_unread(unread);
        let armed = !t.is_zero() && !self.conns.rings.is_empty();
        if armed && self.arm_rings() {
            t = Duration::ZERO;
        }
        let polled = self.io.wait(t);
        if armed {
            for &cid in &self.conns.rings {
                if let Some(l) = self.conns[cid].as_ref().and_then(|c| c.shm.as_deref()) {
                    l.disarm();
                }
            }
        }
        let (ready, accept) = match polled {
            Ok(r) => r,
            Err(e) => {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.set_fatal(e.into());
                }
                return false;
            }
        };
        if accept {
            self.accept_all();
        }
        for &(cid, readable, writable) in &ready {
            if writable {
                self.flush_conn(cid);
            }
            if readable {
                if let Some(c) = self.conns.get_mut(cid).and_then(Option::as_mut) {
                    c.sock_check = true;
                }
                got |= self.read_conn(cid);
            }
        }
        self.io.give_back(ready);
        let mut i = 0;
        while let Some(&cid) = self.conns.rings.get(i) {
            got |= self.read_conn(cid);
            i += 1;
        }
        self.flush_deferred();
        got
    }

    // ----------------------------------------------------------------- shared memory

    /// Whether this process and slot `peer` may use shared memory (the policy, a peer of the
    /// world, and not an encrypted job: those keep TCP). `peer` is a slot: the world's are
    /// the coordination's (with replicas, R per rank; comparing it with the world's ranks
    /// instead left every pair beyond the first ranks' slots on TCP).
    pub(crate) fn shm_allowed(&self, peer: i32) -> bool {
        let (lo, hi) = C::world_slots(self);
        let in_world = peer >= lo && peer < hi;
        in_world && !self.base.encrypt && self.shm_policy.allows(self.base.slot, peer)
    }

    /// Whether slot `peer` listens on this process's own address: the host address the
    /// bootstrap knows. (Distinct loopback addresses are distinct hosts: a grid simulated on
    /// one machine gives each peer its own, and tests cut them apart with firewall rules.)
    /// The acceptor's check is the segment itself: on another host it does not exist.
    pub(crate) fn same_host(&self, peer: i32) -> bool {
        let Some(me) = self.local_addr().map(|a| a.ip()) else { return false };
        self.addrs[peer as usize].ip() == me
    }

    pub(crate) fn shm_note(&self, msg: &str) {
        if self.shm_policy.debug {
            eprintln!("p2pmpi: rank {}: {msg}", self.base.rank);
        }
    }

    /// The opening is done and both sides mapped the segment: every later frame goes
    /// through it.
    pub(crate) fn shm_activate(
        &mut self,
        cid: usize,
        conn: &mut Conn,
        mut link: Box<shm::Link>,
        peer: i32,
    ) -> std::result::Result<(), ConnError> {
        link.unlink();
        if conn.buffered() != 0 {
            return Err(ConnError::Protocol(format!("{} bytes on TCP after the opening", conn.buffered())));
        }
        let rank = C::rank_of(self, peer);
        if C::PLAIN {
            // (A coordination that carries the messages itself takes no single copy.)
            match link.probe_single_copy(self.shm_policy.single_copy) {
                Ok(pid) => self.shm_note(&format!("single copy from rank {rank} (pid {pid})")),
                Err(e) => self.shm_note(&format!("no single copy from rank {rank}: {e}")),
            }
        }
        conn.shm = Some(link);
        self.conns.watch_ring(cid);
        self.shm_note(&format!("shared memory with rank {rank}"));
        Ok(())
    }

    /// Writes what the rings take of the frames queued for them.
    pub(crate) fn flush_rings(&mut self) {
        let mut i = 0;
        while let Some(&cid) = self.conns.rings.get(i) {
            if self.conns[cid].as_ref().is_some_and(|c| c.ring_backlog()) {
                self.flush_conn(cid);
            }
            i += 1;
        }
    }

    /// Before sleeping: asks every ring's peer for a doorbell. Returns whether one of them
    /// is ready already (then the poll must not sleep).
    pub(crate) fn arm_rings(&self) -> bool {
        let mut ready = false;
        for &cid in &self.conns.rings {
            if let Some(c) = self.conns[cid].as_ref().filter(|c| !c.read_eof) {
                if let Some(l) = c.shm.as_deref() {
                    ready |= l.arm(c.ring_backlog());
                }
            }
        }
        ready
    }

    pub(crate) fn accept_all(&mut self) {
        loop {
            match self.io.accept() {
                Ok(Some(mut stream)) => {
                    self.prune_openings();
                    let cid = self.conns.vacant();
                    if self.io.register(&mut stream, cid).is_ok() {
                        self.conns.fill(cid, Box::new(Conn::accepted(stream)));
                        C::conn_opened(self, cid);
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    log_warn(self.base.rank, &format!("accept failed: {e}"));
                    return;
                }
            }
        }
    }

    /// Drops accepted connections that did not prove the job key within [`HANDSHAKE_LIMIT`],
    /// and the oldest ones beyond [`MAX_PENDING`] - 1 (room for one more) that waited more
    /// than [`PENDING_GRACE`].
    pub(crate) fn prune_openings(&mut self) {
        let mut pending: Vec<(Instant, usize)> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().filter(|c| c.peer.is_none()).map(|c| (c.opened, i)))
            .collect();
        pending.sort();
        let excess = pending.len().saturating_sub(MAX_PENDING - 1);
        for (k, (opened, cid)) in pending.into_iter().enumerate() {
            let late = opened.elapsed() > HANDSHAKE_LIMIT * load_factor();
            if (k < excess && opened.elapsed() > PENDING_GRACE) || late {
                let Some(c) = self.conns.remove(cid, &self.io) else { continue };
                let why = if late {
                    format!("it did not prove the job key within {} s", (HANDSHAKE_LIMIT * load_factor()).as_secs())
                } else {
                    format!("more than {MAX_PENDING} connections were waiting to prove the job key")
                };
                self.log_refusal(&format!("dropped a connection from {}: {why}", c.peer_addr()));
            }
        }
    }

    /// Logs a refused connection: at most 10 lines per 10 s, then how many were not shown.
    pub(crate) fn log_refusal(&mut self, msg: &str) {
        let (since, lines, hidden) = &mut self.refusals;
        if since.elapsed() > Duration::from_secs(10) {
            if *hidden > 0 {
                log_warn(self.base.rank, &format!("{hidden} more connection(s) refused and not shown"));
            }
            *since = Instant::now();
            *lines = 0;
            *hidden = 0;
        }
        if *lines < 10 {
            *lines += 1;
            log_warn(self.base.rank, msg);
        } else {
            *hidden += 1;
        }
    }

    pub(crate) fn flush_conn(&mut self, cid: usize) {
        C::before_write();
        let Some(conn) = self.conns[cid].as_mut() else { return };
        let peer = conn.peer.unwrap_or(-1);
        if peer >= 0 {
            // The peer takes data.
            C::peer_takes_data(self, peer);
        }
        let Some(conn) = self.conns[cid].as_mut() else { return };
        match conn.flush() {
            Ok(done) => {
                for r in done {
                    let st = StatusInfo { source: peer, tag: 0, len: 0, cancelled: false };
                    self.complete(r, Ok(st));
                }
                self.update_interest(cid);
            }
            Err(e) => self.conn_failed(cid, peer, e),
        }
    }

    /// The transport's opening ([`Opening`]) with this process's key and slot.
    fn opening(&self) -> Opening<'_> {
        Opening { key: &self.key, me: self.base.slot, encrypt: self.base.encrypt }
    }

    /// A frame of a connection's opening: the transport does the exchange ([`Opening`]); the
    /// engine lets in the slots it knows and has not given up, and keeps its table of peers.
    pub(crate) fn opening_frame(
        &mut self,
        cid: usize,
        conn: &mut Conn,
        h: Header,
        payload: std::ops::Range<usize>,
    ) -> std::result::Result<(), ConnError> {
        let proto = |d: String| ConnError::Protocol(d);
        let me = self.base.slot;
        // (A slot beyond the known ones is not failed: a spawned process, known once it
        // proved the job key.)
        let failed = |e: &Self, r: i32| (r as usize) < e.peers.len() && C::cut(e, r);
        match self.opening().frame(conn, h, payload)? {
            Opened::Hello(hello) => {
                // Beyond the known processes: one spawned by this job (or by a child of it),
                // known once it proved the job key (every process of a universe id).
                let (src, dst) = (hello.slot, hello.dst);
                let known = MAX_UNIVERSE as usize * C::per_id(self);
                if src < 0 || src as usize >= known || src == me || dst != me {
                    return Err(proto(format!("Hello from invalid slot {src} to slot {dst}")));
                }
                if failed(self, src) {
                    return Err(proto(format!("Hello from slot {src}, which failed")));
                }
                let shm = hello.shm && self.shm_allowed(src);
                if let Some(e) = self.opening().challenge(conn, &hello, shm, C::before_write)? {
                    self.shm_note(&format!("no shared memory with slot {src} (TCP instead): {e}"));
                }
                Ok(())
            }
            Opened::Proved { slot, shm } => {
                if failed(self, slot) {
                    return Err(proto(format!("Hello from slot {slot}, which failed")));
                }
                conn.peer = Some(slot);
                if let Some(l) = shm {
                    self.shm_activate(cid, conn, l, slot)?;
                }
                self.grow(C::rank_of(self, slot) as usize + 1);
                let p = &mut self.peers[slot as usize];
                p.conns.push(cid);
                if p.send_conn.is_none() {
                    p.send_conn = Some(cid);
                }
                Ok(())
            }
            Opened::Answered { slot, shm } => {
                if let Some(l) = shm {
                    self.shm_activate(cid, conn, l, slot)?;
                }
                Ok(())
            }
        }
    }

    pub(crate) fn conn_failed(&mut self, cid: usize, peer: i32, e: ConnError) {
        if peer >= 0 && matches!(e, ConnError::Closed) && self.peers[peer as usize].bye {
            // The peer finalized: its side is closed, ours stays open until we finalize too.
            if let Some(c) = self.conns[cid].as_mut() {
                c.read_eof = true;
            }
            return;
        }
        let Some(mut conn) = self.conns.remove(cid, &self.io) else { return };
        if peer >= 0 {
            let p = &mut self.peers[peer as usize];
            p.conns.retain(|c| *c != cid);
            if p.send_conn == Some(cid) {
                p.send_conn = None;
            }
            let clean = p.bye && matches!(e, ConnError::Closed);
            if !clean {
                let cause = match e {
                    ConnError::Closed => "connection closed before it finalized (process died?)".to_string(),
                    ConnError::Io(e) => format!("connection failed: {e}"),
                    ConnError::Protocol(d) => format!("protocol violation: {d}"),
                };
                if C::conn_lost(self, cid, &mut conn, peer, &cause) {
                    // The coordination takes the loss.
                    return;
                }
                let unsent = conn.take_completions();
                self.lose_peer(peer, cause, unsent);
            }
        } else if let ConnError::Protocol(d) = e {
            self.log_refusal(&format!("dropped a connection from {}: {d}", conn.peer_addr()));
        }
    }

    /// Writes a connection's queue out, waiting as long as it takes (fault injection only).
    pub(crate) fn flush_blocking(&mut self, cid: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.conns[cid].as_ref().is_some_and(|c| !c.outq.is_empty()) && Instant::now() < deadline {
            self.flush_conn(cid);
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Whether every queued frame has been written.
    pub fn all_sent(&self) -> bool {
        C::idle(self)
            && self.rndv_send.is_empty()
            && self.deferred.is_empty()
            && self.conns.iter().flatten().all(|c| c.outq.is_empty())
    }

    /// Says `Bye` on every connection to a peer and shuts down the sending side.
    pub fn send_byes(&mut self) {
        if self.sc_count > 0 {
            self.shm_note(&format!("{} messages received by single copy", self.sc_count));
        }
        for r in 0..self.peers.len() as i32 {
            if r == self.base.slot || self.peers[r as usize].conns.is_empty() {
                continue;
            }
            let conns = self.peers[r as usize].conns.clone();
            for cid in conns {
                let h = Header::new(
                    FrameKind::Bye,
                    Mid {
                        comm: 0,
                        src: C::rank_of(self, self.base.slot) as u32,
                        dst: C::rank_of(self, r) as u32,
                        tag: 0,
                        seq: 0,
                    },
                    0,
                );
                let _ = self.push_out(cid, Out::new(h, Payload::None));
                if let Some(c) = self.conns[cid].as_mut() {
                    c.shutdown_after_flush = true;
                    if c.outq.is_empty() {
                        let _ = c.stream.shutdown(std::net::Shutdown::Write);
                    }
                }
            }
        }
    }

    /// Whether every peer connection has been closed by the other side after its `Bye`.
    pub fn all_closed(&self) -> bool {
        self.peers
            .iter()
            .flat_map(|p| p.conns.iter())
            .all(|&cid| self.conns[cid].as_ref().is_none_or(|c| c.read_eof && c.outq.is_empty()))
    }
}
