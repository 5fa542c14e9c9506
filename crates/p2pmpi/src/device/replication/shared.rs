//! Shared receives (a fault-aware replicated job, the endpoint's `set_share_received`): each
//! message of another rank this process has whole is told to its replicas of lower index
//! (a copy kept while one of higher index may lack it), and a relay — its master's copy of a
//! message of a rank lost whole — is taken like the message itself.

use super::*;

impl<S: Waits> Core<Replication, S> {
    /// This process has eager message `env` (`data`) whole, accepted in its turn. Its
    /// replicas of lower index are told; a copy is kept while one of higher index may lack it.
    pub(super) fn share_eager(&mut self, env: &Envelope, data: &[u8]) {
        let me = self.base.rank;
        self.coord.ep.received(env_mid(env, me), || Bytes::Owned(crate::pool::copy_of(data)));
    }

    /// Message `mid` is whole in receive `r`'s buffer (streamed, or rendez-vous data). Told
    /// even when the receive ended in an error (its master would otherwise wait for this
    /// replica until a verdict); the copy is then empty.
    pub(super) fn share_in(&mut self, mid: MsgId, r: ReqId) {
        let data = match self.reqs.get(r).and_then(Option::as_ref) {
            Some(q) if !q.ptr.is_null() => match q.state {
                // SAFETY: a completed receive's buffer holds `st.len <= cap` bytes written by
                // the device, and the program gets it back only when it takes the request.
                ReqState::Done(st) if st.len > 0 => unsafe { std::slice::from_raw_parts(q.ptr, st.len as usize) },
                _ => &[][..],
            },
            _ => &[][..],
        };
        self.coord.ep.received(mid, || Bytes::Owned(crate::pool::copy_of(data)));
    }

    /// A relay (`Data` with `RELAY`) from replica `slot`, this process's master: its copy of
    /// a message of a rank lost whole. Streamed into a buffer of its own, taken whole
    /// ([`Self::relayed`], from the `stream_kept` hook).
    pub(super) fn relay_frame(
        &mut self,
        cid: usize,
        conn: &mut Conn,
        h: Header,
        slot: i32,
    ) -> std::result::Result<(), ConnError> {
        let mid = h.mid;
        let me = self.base.rank;
        let ok =
            self.coord.rank_of(slot) == me && slot < self.base.slot && mid.dst as i32 == me && mid.src as i32 != me;
        if !ok {
            return Err(ConnError::Protocol(format!("relay of {mid:?} from slot {slot}")));
        }
        let env = Envelope { comm: mid.comm, src: mid.src as i32, tag: mid.tag, seq: mid.seq, len: h.len };
        if h.len == 0 {
            self.relayed(env, Eager::Owned(Vec::new()));
            return Ok(());
        }
        // Not zero-filled: the stream writes every byte before the length is set.
        let mut data = crate::pool::with_room(h.len as usize);
        let ptr = data.as_mut_ptr();
        conn.stream_unexpected = Some((env, data));
        conn.stream_status = Some(StatusInfo { source: env.src, tag: mid.tag, len: h.len, cancelled: false });
        let s = self.coord.stream(cid);
        s.kept = true;
        s.relay = true;
        conn.rstate = RState::Stream { req: usize::MAX, ptr, left: h.len as usize, discard: false };
        Ok(())
    }

    /// A relayed message whole: taken like the message itself — accepted if new here (the
    /// channel's predecessors missing here the master has as announcements only, whose data
    /// never came: accepted as such first), the data of a rendez-vous receive waiting for it,
    /// kept for the receive that will match its queued announcement, or had already.
    pub(super) fn relayed(&mut self, env: Envelope, data: Eager<'_>) {
        let me = self.base.rank;
        let mid = env_mid(&env, me);
        let next = self.matcher.next_expected(env.comm, env.src, env.tag);
        if next <= env.seq {
            for seq in next..env.seq {
                self.accept_announcement(Envelope { seq, len: 0, ..env }, false);
            }
            self.accept_eager(env, data, false);
            return;
        }
        self.share_eager(&env, data.bytes());
        if let Some(r) = self.rndv_recv.remove(&mid) {
            self.fill(r, &env, data.bytes());
            data.give();
            return;
        }
        let queued = self
            .matcher
            .probe(Pattern { comm: env.comm, src: Some(env.src), tag: Some(env.tag) })
            .is_some_and(|e| e.seq <= env.seq);
        if queued {
            self.coord.ep.keep_relayed(mid, Bytes::Owned(data.into_owned()));
        } else {
            data.give();
        }
    }

    /// Receive `r` matched the announcement of `mid` (`env`), whose data its master relayed
    /// (its sender is lost whole): filled now, and awaited no more. Whether it was.
    pub(super) fn fill_relayed(&mut self, r: ReqId, env: &Envelope, mid: MsgId) -> bool {
        let Some(d) = self.coord.ep.take_relayed(mid) else { return false };
        self.rndv_recv.remove(&mid);
        let env = Envelope { len: protocol::Payload::len(&d) as u64, ..*env };
        self.fill(r, &env, d.view());
        true
    }
}
