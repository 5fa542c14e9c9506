//! The transport's handshake: the opening of a connection ([`p2pmpi_wire::auth`]). The
//! connector sends `Hello` (its slot and nonce), the acceptor answers with its `Challenge`
//! (its nonce and its proof of the job key), the connector checks it and answers with its
//! own proof (`Auth`); with `--encrypt` both sides then seal their records under session keys
//! derived from the job key and the two nonces. Same-host connections offer a shared-memory
//! segment on the way (`Hello` and `Challenge` flagged `SHM`).
//!
//! This module does the exchange and its I/O on a [`Conn`] and reports what it learnt: a
//! `Hello` claiming a slot, a connection that proved a slot. Whether a slot is welcome (a
//! slot the job knows, one not failed), the table of peers and the shared-memory policy are
//! the engine's, which calls these functions. Moves bytes; knows no MPI matching and nothing
//! of the layers above the engine.

use super::conn::{Auth, Conn, ConnError, Out, Payload};
use super::shm::Link;
use mio::net::TcpStream;
use p2pmpi_wire::auth::{self, JobKey, Nonce, Role};
use p2pmpi_wire::frame::{flags, AUTH_LEN, CHALLENGE_LEN, HELLO_LEN};
use p2pmpi_wire::{FrameKind, Header, Mid};
use std::ops::Range;

/// What an opening needs: the job key, this process's slot, and whether records are sealed.
#[derive(Clone, Copy)]
pub(crate) struct Opening<'k> {
    pub key: &'k JobKey,
    pub me: i32,
    pub encrypt: bool,
}

/// A `Hello` an accepted connection received, not answered yet.
pub(crate) struct Hello {
    /// The slot it claims (not proved yet).
    pub slot: i32,
    /// The slot it is addressed to.
    pub dst: i32,
    /// Whether it offers a shared-memory segment.
    pub shm: bool,
    /// Its nonce (`None`: a malformed one, refused when answered).
    nc: Option<Nonce>,
}

/// What a frame of the opening brought.
pub(crate) enum Opened {
    /// An accepted connection's `Hello`: the engine checks its slot, then answers it
    /// ([`Opening::challenge`]).
    Hello(Hello),
    /// An accepted connection proved the job key for slot `slot` (its records sealed if the
    /// job encrypts): the engine checks it may take that slot, then makes it the
    /// connection's peer. `shm`: the segment mapped when answering its `Hello`, to activate.
    Proved { slot: i32, shm: Option<Box<Link>> },
    /// The acceptor of a connection this process opened to slot `slot` proved the job key:
    /// this process's proof is queued ahead of everything else and the gate is open.
    /// `shm`: the segment this process offered, which the acceptor mapped, to activate.
    Answered { slot: i32, shm: Option<Box<Link>> },
}

impl Opening<'_> {
    /// A connection this process opened to slot `dst` (`stream`): the connection, gated until
    /// the acceptor answers, and its `Hello` to queue. With `ring` (the peer is on this host
    /// and may share memory) a segment of that capacity is offered; `Err` in the third place
    /// says why none could be made (the connection then stays on TCP).
    pub fn open(&self, stream: TcpStream, dst: i32, ring: Option<usize>) -> (Conn, Out, Option<String>) {
        let nc = auth::nonce();
        let mut c = Conn::opened(stream, dst, nc);
        let mut hello = Header::new(
            FrameKind::Hello,
            Mid { comm: 0, src: self.me as u32, dst: dst as u32, tag: 0, seq: 0 },
            HELLO_LEN,
        );
        let mut refused = None;
        if let Some(cap) = ring {
            match Link::create(self.key, &nc, cap) {
                Ok(l) => {
                    c.shm_offer = Some(Box::new(l));
                    hello.flags |= flags::SHM;
                }
                Err(e) => refused = Some(e.to_string()),
            }
        }
        (c, Out::handshake(hello, Payload::Owned(nc.to_vec())), refused)
    }

    /// Frame `h` of the opening on `conn`, its payload at `payload` in the read buffer.
    pub fn frame(&self, conn: &mut Conn, h: Header, payload: Range<usize>) -> Result<Opened, ConnError> {
        let proto = |d: String| ConnError::Protocol(d);
        let bytes = conn.rbuf.get(payload).ok_or_else(|| proto("opening frame outside the buffer".into()))?;
        let me = self.me;
        let (src, dst) = (h.mid.src as i32, h.mid.dst as i32);
        match (conn.auth, h.kind) {
            (Auth::AwaitHello, FrameKind::Hello) => {
                Ok(Opened::Hello(Hello { slot: src, dst, shm: h.flags & flags::SHM != 0, nc: bytes.try_into().ok() }))
            }
            (Auth::AwaitProof { slot, nc, na }, FrameKind::Auth) => {
                if src != slot || dst != me {
                    return Err(proto(format!("Auth from slot {src} on slot {slot}'s opening")));
                }
                if bytes.len() != AUTH_LEN as usize
                    || !auth::verify_data_proof(self.key, Role::DataConnector, slot as u32, me as u32, &nc, &na, bytes)
                {
                    return Err(proto(format!(
                        "a process claiming slot {slot} failed to prove the job key (wrong key or replayed opening)"
                    )));
                }
                conn.auth = Auth::Done;
                conn.grow_rbuf();
                if self.encrypt {
                    let (c2a, a2c) = auth::session_keys(self.key, slot as u32, me as u32, &nc, &na);
                    conn.seal(&a2c, &c2a);
                }
                Ok(Opened::Proved { slot, shm: conn.shm_offer.take() })
            }
            (Auth::AwaitChallenge { nc }, FrameKind::Challenge) => {
                let peer = conn.peer.unwrap_or(-1);
                if src != peer || dst != me || bytes.len() != CHALLENGE_LEN as usize {
                    return Err(proto(format!("Challenge from slot {src} on the connection to slot {peer}")));
                }
                let (na, proof) = bytes.split_at(auth::NONCE_LEN);
                let na: Nonce = na.try_into().map_err(|_| proto("bad Challenge".into()))?;
                if !auth::verify_data_proof(self.key, Role::DataAcceptor, me as u32, peer as u32, &nc, &na, proof) {
                    return Err(proto(format!("the process at slot {peer}'s address failed to prove the job key")));
                }
                if self.encrypt {
                    let (c2a, a2c) = auth::session_keys(self.key, me as u32, peer as u32, &nc, &na);
                    conn.seal(&c2a, &a2c);
                }
                // Refused (another host, or shared memory off there): TCP, and the segment is
                // removed as the offer drops.
                let shm = conn.shm_offer.take().filter(|_| h.flags & flags::SHM != 0);
                let mine = auth::data_proof(self.key, Role::DataConnector, me as u32, peer as u32, &nc, &na);
                let mid = Mid { comm: 0, src: me as u32, dst: peer as u32, tag: 0, seq: 0 };
                conn.push_handshake_first(Out::handshake(
                    Header::new(FrameKind::Auth, mid, AUTH_LEN),
                    Payload::Owned(mine.to_vec()),
                ));
                conn.auth = Auth::Done;
                conn.gated = false;
                conn.kick = true;
                Ok(Opened::Answered { slot: peer, shm })
            }
            (state, kind) => Err(proto(format!(
                "{kind:?} frame during the opening ({})",
                match state {
                    Auth::AwaitHello => "expected Hello",
                    Auth::AwaitProof { .. } => "expected Auth",
                    Auth::AwaitChallenge { .. } => "expected Challenge",
                    Auth::Done => "done",
                }
            ))),
        }
    }

    /// Answers `hello`, which the engine let in, with this process's `Challenge`; `shm`:
    /// whether the engine lets its segment be shared (then it is mapped now and used once
    /// the connector proved the key). `Ok(Some(why))`: the segment could not be mapped (the
    /// connection stays on TCP). `fence` runs just before the frame is written (the
    /// engine's coordination may hold writes back).
    pub fn challenge(
        &self,
        conn: &mut Conn,
        hello: &Hello,
        shm: bool,
        fence: impl FnOnce(),
    ) -> Result<Option<String>, ConnError> {
        let nc = hello.nc.ok_or_else(|| ConnError::Protocol("bad Hello".into()))?;
        let (me, src) = (self.me, hello.slot);
        let na = auth::nonce();
        let proof = auth::data_proof(self.key, Role::DataAcceptor, src as u32, me as u32, &nc, &na);
        let mut p = Vec::with_capacity(CHALLENGE_LEN as usize);
        p.extend_from_slice(&na);
        p.extend_from_slice(&proof);
        let mid = Mid { comm: 0, src: me as u32, dst: src as u32, tag: 0, seq: 0 };
        fence();
        let mut challenge = Header::new(FrameKind::Challenge, mid, CHALLENGE_LEN);
        let mut refused = None;
        if hello.shm && shm {
            // Mapped (and unlinked) now, used once the connector proved the key.
            match Link::open(self.key, &nc) {
                Ok(l) => {
                    conn.shm_offer = Some(Box::new(l));
                    challenge.flags |= flags::SHM;
                }
                Err(e) => refused = Some(e),
            }
        }
        conn.push(Out::handshake(challenge, Payload::Owned(p)))?;
        conn.auth = Auth::AwaitProof { slot: src, nc, na };
        conn.kick = true;
        Ok(refused)
    }
}
