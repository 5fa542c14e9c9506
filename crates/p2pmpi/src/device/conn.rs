//! One TCP connection: a read buffer that frames are parsed from, a streaming state for
//! rendez-vous data, a queue of outgoing frames written with `writev`, and where the
//! connection's opening (the challenge-response on the job key) stands.

use mio::net::TcpStream;
use p2pmpi_wire::auth::{Nonce, Opener, Record, Sealer, RECORD_MAX};
use p2pmpi_wire::{FrameKind, Header, HEADER_LEN};
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};

/// Largest message sent with the eager protocol (the seeds' 128 KB).
pub const EAGER_LIMIT: usize = 128 * 1024;

/// Request handle inside the engine (the transport completes some: a send written whole).
pub(crate) type ReqId = usize;

/// What a completed receive learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatusInfo {
    pub source: i32,
    pub tag: i32,
    pub len: u64,
    pub cancelled: bool,
}

/// Why a connection ended.
#[derive(Debug)]
pub(crate) enum ConnError {
    Closed,
    Io(io::Error),
    Protocol(String),
}

/// Congestion control of a data link whose two ends are on this host (loopback).
///
/// On loopback there is no bottleneck to model, and BBR (the default of some distributions)
/// estimates its window as twice bandwidth × minimum RTT, a few microseconds here: about 20
/// segments. A reader that falls further behind than that — a process descheduled for a
/// millisecond — then never catches up: the sender's backlog waits for acknowledgements, so
/// it is sent from the reader's acknowledgements, on the reader's core, which slows the reader
/// more. A benchmark showed jobs stuck at 100 µs per 64 KiB round trip instead of 57
/// (docs/benchmarks.md, "a copy that falls behind stays behind"). A loss-based algorithm's
/// window grows as soon as the link is window-limited, and the backlog drains at once.
/// `cubic` needs privileges where it is not in `tcp_allowed_congestion_control`; `reno` is
/// always allowed. Other links keep the system's choice.
pub(crate) fn tune_loopback_link(sock: socket2::SockRef<'_>) {
    let loopback =
        |a: io::Result<socket2::SockAddr>| a.ok().and_then(|a| a.as_socket()).is_some_and(|a| a.ip().is_loopback());
    if !loopback(sock.peer_addr()) || !loopback(sock.local_addr()) {
        return;
    }
    if sock.tcp_congestion().is_ok_and(|ca| !ca.starts_with(b"bbr")) {
        return;
    }
    let _ = sock.set_tcp_congestion(b"cubic").or_else(|_| sock.set_tcp_congestion(b"reno"));
}

/// Read buffer size: a whole eager frame always fits.
pub(super) const RBUF: usize = 2 * EAGER_LIMIT + 2 * HEADER_LEN;

/// Read buffer of an accepted connection until it is authenticated: the opening's frames
/// fit (a connection that has not proved the job key costs little memory).
const HANDSHAKE_RBUF: usize = 512;

/// `--encrypt`: the sealed records of a connection after its opening.
pub(crate) struct Sec {
    sealer: Sealer,
    opener: Opener,
    /// Sealed bytes of the front frame of the queue not written yet (empty whenever the
    /// queue is: a frame counts as written once its records are).
    wbuf: Vec<u8>,
    wpos: usize,
    /// Received bytes not opened yet: `raw[raw_start..raw_end]`.
    raw: Box<[u8]>,
    raw_start: usize,
    raw_end: usize,
}

/// Size of the buffer of received ciphertext: a few whole records.
const RAW_BUF: usize = 4 * (RECORD_MAX + p2pmpi_wire::auth::RECORD_OVERHEAD);

/// Records sealed at once (one write for up to this many).
const SEAL_BATCH: usize = 4;

/// Where a connection's opening stands (see [`p2pmpi_wire::auth`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Auth {
    /// Opened by this process, `Hello` sent: waiting for the acceptor's `Challenge`.
    AwaitChallenge { nc: Nonce },
    /// Accepted: waiting for the connector's `Hello`.
    AwaitHello,
    /// Accepted, `Challenge` sent: waiting for the connector's proof (its `Auth` frame).
    AwaitProof { slot: i32, nc: Nonce, na: Nonce },
    /// Both sides proved the job key.
    Done,
}

#[derive(Clone, Copy)]
pub(crate) enum RState {
    /// Parsing frames from the read buffer.
    Header,
    /// Copying `left` bytes of rendez-vous data to `ptr` (or dropping them).
    Stream { req: ReqId, ptr: *mut u8, left: usize, discard: bool },
}

pub(crate) enum Payload {
    None,
    Owned(Vec<u8>),
    /// Memory the API layer keeps valid until the frame's request completes.
    Raw(*const u8, usize),
}

impl Payload {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Payload::None => &[],
            Payload::Owned(v) => v,
            // SAFETY: a `Raw` payload is a sender's buffer, `n` initialised bytes that the API
            // layer keeps valid until the frame's request completes; before it may go away
            // (`Core::detach`), the payload is replaced by a copy.
            Payload::Raw(p, n) => unsafe { std::slice::from_raw_parts(*p, *n) },
        }
    }
}

pub(crate) struct Out {
    hdr: [u8; HEADER_LEN],
    payload: Payload,
    /// Bytes of header + payload already written.
    pos: usize,
    pub(super) done: Option<ReqId>,
    /// A frame of the connection's opening: written while the connection is gated.
    handshake: bool,
}

impl Out {
    pub fn new(h: Header, payload: Payload) -> Out {
        Out { hdr: h.encode(), payload, pos: 0, done: None, handshake: false }
    }
    pub fn with_completion(h: Header, payload: Payload, req: ReqId) -> Out {
        Out { hdr: h.encode(), payload, pos: 0, done: Some(req), handshake: false }
    }
    /// A frame of the opening (`Hello`, `Challenge`, `Auth`).
    pub fn handshake(h: Header, payload: Payload) -> Out {
        Out { hdr: h.encode(), payload, pos: 0, done: None, handshake: true }
    }
    fn total(&self) -> usize {
        HEADER_LEN + self.payload.bytes().len()
    }
}

pub(crate) struct Conn {
    pub stream: TcpStream,
    pub peer: Option<i32>,
    #[allow(dead_code)]
    pub initiated: bool,
    pub rbuf: Box<[u8]>,
    rpos: usize,
    rend: usize,
    pub rstate: RState,
    /// Status of the rendez-vous message being streamed.
    pub stream_status: Option<StatusInfo>,
    /// A large eager message streaming into a pooled buffer (no receive was posted when its
    /// header arrived); matched when complete.
    pub stream_unexpected: Option<(p2pmpi_core::matching::Envelope, Vec<u8>)>,
    pub outq: VecDeque<Out>,
    pub want_write: bool,
    /// Since when queued frames wait without the socket taking a byte (a send blocked by a
    /// peer that does not read: frozen, or cut off by a firewall).
    pub stalled_since: Option<std::time::Instant>,
    pub shutdown_after_flush: bool,
    /// The peer closed its sending side after saying `Bye`.
    pub read_eof: bool,
    /// The opening's progress.
    pub auth: Auth,
    /// Only frames of the opening are written (a connection this process opened, until the
    /// acceptor proved the job key): the others wait in the queue.
    pub gated: bool,
    /// The opening moved on while the connection was checked out: flush it once put back.
    pub kick: bool,
    /// When the connection was opened or accepted.
    pub opened: std::time::Instant,
    /// `--encrypt`: its records, once the opening is done.
    sec: Option<Box<Sec>>,
    /// The bound on the payload length a frame header may announce (`Header::decode`).
    pub max_eager: u64,
    /// Same host: the shared-memory rings that carry every frame after the opening (the
    /// TCP connection then only carries doorbells and, by its end, the peer's death).
    pub shm: Option<Box<super::shm::Link>>,
    /// The segment offered (connector) or opened (acceptor) during the opening, used once
    /// it completes.
    pub shm_offer: Option<Box<super::shm::Link>>,
    /// The TCP socket of a shared-memory connection is readable (a doorbell or its end).
    pub sock_check: bool,
    /// The TCP side of a shared-memory connection reached its end: the peer closed it
    /// (after `Bye`) or died. The ring is read to its end, then the connection is closed.
    pub peer_eof: bool,
}

impl Conn {
    /// Reads and drops the `len` bytes of payload that follow a header (a duplicate).
    pub fn skip_payload(&mut self, st: StatusInfo, len: usize) {
        self.stream_status = Some(st);
        self.rstate = RState::Stream { req: usize::MAX, ptr: std::ptr::null_mut(), left: len, discard: true };
    }

    /// A connection this process opened to slot `peer`, whose opening starts with nonce `nc`:
    /// gated until the acceptor answers.
    pub fn opened(stream: TcpStream, peer: i32, nc: Nonce) -> Conn {
        let mut c = Conn::new(stream, true, RBUF);
        c.peer = Some(peer);
        c.auth = Auth::AwaitChallenge { nc };
        c.gated = true;
        c
    }

    /// A connection accepted from an unknown process: a small read buffer until it proves
    /// the job key.
    pub fn accepted(stream: TcpStream) -> Conn {
        Conn::new(stream, false, HANDSHAKE_RBUF)
    }

    fn new(stream: TcpStream, initiated: bool, rbuf: usize) -> Conn {
        Conn {
            stream,
            peer: None,
            initiated,
            rbuf: vec![0u8; rbuf].into_boxed_slice(),
            rpos: 0,
            rend: 0,
            rstate: RState::Header,
            stream_status: None,
            stream_unexpected: None,
            outq: VecDeque::new(),
            want_write: false,
            stalled_since: None,
            shutdown_after_flush: false,
            read_eof: false,
            auth: Auth::AwaitHello,
            gated: false,
            kick: false,
            opened: std::time::Instant::now(),
            sec: None,
            max_eager: EAGER_LIMIT as u64,
            shm: None,
            shm_offer: None,
            sock_check: false,
            peer_eof: false,
        }
    }

    pub fn buffered(&self) -> usize {
        self.rend - self.rpos
    }

    /// Whether both sides proved the job key.
    pub fn authenticated(&self) -> bool {
        self.auth == Auth::Done
    }

    /// The full read buffer, once the connection is authenticated (what was read is kept).
    pub fn grow_rbuf(&mut self) {
        if self.rbuf.len() < RBUF {
            let mut b = vec![0u8; RBUF].into_boxed_slice();
            b[..self.rend - self.rpos].copy_from_slice(&self.rbuf[self.rpos..self.rend]);
            self.rend -= self.rpos;
            self.rpos = 0;
            self.rbuf = b;
        }
    }

    /// Seals everything after the opening (`--encrypt`): frames this side sends with
    /// `tx`, what it receives with `rx`. Bytes already read past the opening are records.
    pub fn seal(&mut self, tx: &[u8; 32], rx: &[u8; 32]) {
        let mut raw = vec![0u8; RAW_BUF].into_boxed_slice();
        let left = self.rend - self.rpos;
        raw[..left].copy_from_slice(&self.rbuf[self.rpos..self.rend]);
        self.rpos = 0;
        self.rend = 0;
        self.sec = Some(Box::new(Sec {
            sealer: Sealer::new(tx),
            opener: Opener::new(rx),
            wbuf: Vec::new(),
            wpos: 0,
            raw,
            raw_start: 0,
            raw_end: left,
        }));
    }

    /// Whether the queue has a frame the socket may take now.
    pub fn wants_write(&self) -> bool {
        // A shared-memory connection writes its frames into the ring (flushed by every
        // progress call), the socket only the opening's.
        self.outq.front().is_some_and(|o| (!self.gated && self.shm.is_none()) || o.handshake)
    }

    /// A shared-memory connection with nothing to do on reading: no buffered byte, no
    /// stream under way, nothing in the ring, no socket event. Checked before the
    /// connection is taken out of the engine's table (polling an idle ring costs a few
    /// loads, not moving the whole connection twice).
    #[inline]
    pub fn ring_quiet(&self) -> bool {
        matches!(self.rstate, RState::Header)
            && self.rpos == self.rend
            && !self.sock_check
            && !self.peer_eof
            && self.shm.as_deref().is_some_and(|l| !l.has_data())
    }

    /// Frames queued for the ring of a shared-memory connection (flushed on progress).
    pub fn ring_backlog(&self) -> bool {
        self.shm.is_some() && self.outq.front().is_some_and(|o| !o.handshake && !self.gated)
    }

    /// Queues a frame of the opening ahead of the frames held back by the gate.
    pub fn push_handshake_first(&mut self, out: Out) {
        // While gated nothing but opening frames is written: the frames after them have not
        // started, so the new one can go before them.
        let at = self.outq.iter().take_while(|o| o.handshake).count();
        self.outq.insert(at, out);
    }

    pub fn peer_addr(&self) -> String {
        self.stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into())
    }

    /// Whether the peer's kernel acknowledged every byte written to this connection: it is
    /// established (a reset one may have dropped its queue) and nothing is left in its send
    /// queue (`SIOCOUTQ`: bytes not yet acknowledged, sent or not).
    pub fn kernel_acked(&self) -> bool {
        use std::os::fd::AsRawFd;
        let fd = self.stream.as_raw_fd();
        let mut outq: libc::c_int = -1;
        // SAFETY: `fd` is this connection's open socket; `SIOCOUTQ` (`TIOCOUTQ`) writes one
        // `c_int` through the pointer, which points at one.
        if unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut outq as *mut libc::c_int) } != 0 || outq != 0 {
            return false;
        }
        // SAFETY: `tcp_info` is plain data (all-zero is a valid value).
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: `info` is writable for `len` bytes, and the kernel writes at most `len`.
        let r = unsafe {
            libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, (&mut info as *mut libc::tcp_info).cast(), &mut len)
        };
        // 1: TCP_ESTABLISHED.
        r == 0 && len >= 1 && info.tcpi_state == 1
    }

    // ------------------------------------------------------------ writing

    /// Queues a frame and writes what the socket takes. Returns the requests whose frames
    /// were completely written.
    pub fn push(&mut self, mut out: Out) -> Result<Option<ReqId>, ConnError> {
        if self.outq.is_empty() && (!self.gated || out.handshake) {
            // Fast path: write directly, without queueing.
            write_out(&mut self.stream, self.sec.as_deref_mut(), self.shm.as_deref_mut(), &mut out)?;
            if out_done(self.sec.as_deref(), &out) {
                return Ok(out.done);
            }
        }
        if self.outq.is_empty() {
            self.stalled_since = Some(std::time::Instant::now());
        }
        self.outq.push_back(out);
        Ok(None)
    }

    /// A small frame written straight into the shared-memory ring, if this is a
    /// shared-memory connection with nothing queued and the frame fits in one piece; returns
    /// whether it was written (else nothing was, and the caller takes the general path).
    /// (Always inline: left to itself the compiler sometimes makes it a call, 40 instructions
    /// more per message on shared memory, depending on how the crate is split for codegen.)
    #[inline(always)]
    pub fn ring_write_now(&mut self, h: &Header, payload: &[u8]) -> Result<bool, ConnError> {
        let Some(l) = self.shm.as_deref_mut() else { return Ok(false) };
        if !self.outq.is_empty() || self.gated {
            return Ok(false);
        }
        match l.write_frame(&h.encode(), payload).map_err(ConnError::Protocol)? {
            Some(wake) => {
                if wake {
                    doorbell(&mut self.stream);
                }
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// [`Self::push`] of a frame without a request: `None` if it was written whole at once,
    /// else the frame as queued (its writing goes on later), to attach a request to.
    pub fn push_or_queue(&mut self, mut out: Out) -> Result<Option<&mut Out>, ConnError> {
        if self.outq.is_empty() && !self.gated {
            write_out(&mut self.stream, self.sec.as_deref_mut(), self.shm.as_deref_mut(), &mut out)?;
            if out_done(self.sec.as_deref(), &out) {
                return Ok(None);
            }
        }
        if self.outq.is_empty() {
            self.stalled_since = Some(std::time::Instant::now());
        }
        self.outq.push_back(out);
        Ok(self.outq.back_mut())
    }

    /// Fault injection: writes `bytes` (part of a frame) the way this connection's frames
    /// go — through its shared-memory ring, else its socket — waiting for room.
    #[cfg(feature = "failpoints")]
    pub fn write_prefix(&mut self, bytes: &[u8]) {
        let mut off = 0;
        while off < bytes.len() {
            let wrote = match self.shm.as_deref_mut() {
                Some(l) => match l.write(&bytes[off..]) {
                    Ok((n, wake)) => {
                        if wake {
                            doorbell(&mut self.stream);
                        }
                        Ok(n)
                    }
                    Err(_) => return,
                },
                None => self.stream.write(&bytes[off..]),
            };
            match wrote {
                Ok(0) => std::thread::sleep(std::time::Duration::from_millis(1)),
                Ok(n) => off += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(1))
                }
                Err(_) => return,
            }
        }
    }

    /// Replaces in-place payloads of request `id` by copies (see `Engine::detach`).
    pub fn detach(&mut self, id: ReqId) {
        for out in self.outq.iter_mut() {
            if out.done == Some(id) {
                if let Payload::Raw(p, n) = out.payload {
                    // SAFETY: the request is still pending (it is being detached, before its
                    // buffer goes away), so its `n` bytes at `p` are still valid.
                    let copy = crate::pool::copy_of(unsafe { std::slice::from_raw_parts(p, n) });
                    out.payload = Payload::Owned(copy);
                }
            }
        }
    }

    /// The requests of every frame still queued (the connection is being dropped; the
    /// caller says what they count as).
    pub fn take_completions(&mut self) -> Vec<ReqId> {
        self.outq.drain(..).filter_map(|o| o.done).collect()
    }

    /// Writes queued frames until the socket is full.
    pub fn flush(&mut self) -> Result<Vec<ReqId>, ConnError> {
        let mut done = Vec::new();
        let mut wrote = 0;
        while let Some(out) = self.outq.front_mut() {
            if self.gated && !out.handshake {
                break;
            }
            wrote += write_out(&mut self.stream, self.sec.as_deref_mut(), self.shm.as_deref_mut(), out)?;
            if !out_done(self.sec.as_deref(), out) {
                break;
            }
            if let Some(r) = out.done {
                done.push(r);
            }
            if let Some(Out { payload: Payload::Owned(v), .. }) = self.outq.pop_front() {
                crate::pool::give(v);
            }
        }
        if self.outq.is_empty() {
            self.stalled_since = None;
        } else if wrote > 0 {
            self.stalled_since = Some(std::time::Instant::now());
        }
        if self.outq.is_empty() && self.shutdown_after_flush {
            let _ = self.stream.shutdown(std::net::Shutdown::Write);
        }
        Ok(done)
    }

    // ------------------------------------------------------------ reading

    /// The poll loop's look at a socket it waits on: if this is a plain socket connection
    /// (no shared memory, no sealed records) at rest (opened, between frames, nothing
    /// buffered), one read into the empty buffer. `None`: not such a connection (read it
    /// the general way); `Some(Ok(0))`: nothing came; `Some(Ok(n))`: `n` bytes are buffered,
    /// for [`Conn::next_frame`]; `Some(Err(_))`: the connection closed or failed.
    #[inline]
    pub fn poll_idle(&mut self) -> Option<Result<usize, ConnError>> {
        if self.rpos != self.rend
            || !matches!(self.rstate, RState::Header)
            || self.shm.is_some()
            || self.sec.is_some()
            || self.read_eof
            || !self.authenticated()
        {
            return None;
        }
        self.rpos = 0;
        self.rend = 0;
        match recv_now(&self.stream, &mut self.rbuf) {
            Ok(0) => Some(Err(ConnError::Closed)),
            Ok(n) => {
                self.rend = n;
                Some(Ok(n))
            }
            Err(None) => Some(Ok(0)),
            // Interrupted: the general way reads again.
            Err(Some(e)) if e.kind() == io::ErrorKind::Interrupted => None,
            Err(Some(e)) => Some(Err(ConnError::Io(e))),
        }
    }

    /// Reads from the socket into the read buffer. Returns the bytes read (0: would block).
    pub fn fill(&mut self) -> Result<usize, ConnError> {
        if self.rpos == self.rend {
            self.rpos = 0;
            self.rend = 0;
        } else if self.rbuf.len() - self.rend < HEADER_LEN + EAGER_LIMIT && self.rpos > 0 {
            self.rbuf.copy_within(self.rpos..self.rend, 0);
            self.rend -= self.rpos;
            self.rpos = 0;
        }
        if self.sec.is_some() {
            return self.fill_sealed();
        }
        if let Some(l) = self.shm.as_deref_mut() {
            let rend = self.rend;
            let (n, wake) = l.read(&mut self.rbuf[rend..]).map_err(ConnError::Protocol)?;
            if wake {
                doorbell(&mut self.stream);
            }
            if n > 0 {
                self.rend += n;
                return Ok(n);
            }
            return self.ring_idle().map(|()| 0);
        }
        loop {
            match recv_now(&self.stream, &mut self.rbuf[self.rend..]) {
                Ok(0) => return Err(ConnError::Closed),
                Ok(n) => {
                    self.rend += n;
                    return Ok(n);
                }
                Err(None) => return Ok(0),
                Err(Some(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(Some(e)) => return Err(ConnError::Io(e)),
            }
        }
    }

    /// A shared-memory connection's ring is empty: reads the socket if it is readable
    /// (doorbells are dropped); at its end, once the ring is empty too, the connection is
    /// closed (what the peer published before it went is read first).
    fn ring_idle(&mut self) -> Result<(), ConnError> {
        if std::mem::take(&mut self.sock_check) {
            let mut bell = [0u8; 64];
            loop {
                match self.stream.read(&mut bell) {
                    Ok(0) => {
                        self.peer_eof = true;
                        break;
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        self.peer_eof = true;
                        break;
                    }
                }
            }
        }
        if self.peer_eof && !self.shm.as_deref().is_some_and(|l| l.has_data()) {
            return Err(ConnError::Closed);
        }
        Ok(())
    }

    /// `--encrypt`: opens into the read buffer the records that fit, reading the socket
    /// while none is whole. Returns the plaintext bytes added (0: would block).
    fn fill_sealed(&mut self) -> Result<usize, ConnError> {
        let sec = self.sec.as_mut().expect("sealed");
        loop {
            // The buffer always has room for a record: `fill` leaves at least an eager
            // frame's worth free, which is more than `RECORD_MAX`.
            if self.rbuf.len() - self.rend < RECORD_MAX {
                return Err(ConnError::Protocol("no room for a sealed record".into()));
            }
            let mut got = 0;
            while self.rbuf.len() - self.rend >= RECORD_MAX {
                match sec.opener.next(&mut sec.raw[sec.raw_start..sec.raw_end]) {
                    Record::Partial => break,
                    Record::Bad => {
                        return Err(ConnError::Protocol(
                            "a sealed record failed to open (altered, forged, replayed or wrong key)".into(),
                        ))
                    }
                    Record::Opened(w) => {
                        let plain = &sec.raw[sec.raw_start + 4..sec.raw_start + w - 16];
                        self.rbuf[self.rend..self.rend + plain.len()].copy_from_slice(plain);
                        self.rend += plain.len();
                        got += plain.len();
                        sec.raw_start += w;
                    }
                }
            }
            if sec.raw_start == sec.raw_end {
                sec.raw_start = 0;
                sec.raw_end = 0;
            }
            if got > 0 {
                return Ok(got);
            }
            if sec.raw.len() - sec.raw_end < RECORD_MAX + p2pmpi_wire::auth::RECORD_OVERHEAD {
                // Room for a whole record after the partial one.
                sec.raw.copy_within(sec.raw_start..sec.raw_end, 0);
                sec.raw_end -= sec.raw_start;
                sec.raw_start = 0;
            }
            match self.stream.read(&mut sec.raw[sec.raw_end..]) {
                Ok(0) => return Err(ConnError::Closed),
                Ok(n) => sec.raw_end += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ConnError::Io(e)),
            }
        }
    }

    /// The next complete frame in the buffer: its header and the range of its payload.
    /// Before the connection is authenticated only the opening's frames are accepted.
    /// Whether a frame header may be buffered (a cheaper test than [`Self::next_frame`]).
    #[inline]
    /// Nothing read is waiting in the read buffer.
    pub fn nothing_buffered(&self) -> bool {
        self.rpos == self.rend
    }

    /// Rings the peer's doorbell (a shared-memory connection whose peer waits for room).
    pub fn doorbell(&mut self) {
        doorbell(&mut self.stream);
    }

    pub fn header_buffered(&self) -> bool {
        self.rend - self.rpos >= HEADER_LEN
    }

    pub fn next_frame(&mut self) -> Result<Option<(Header, std::ops::Range<usize>)>, ConnError> {
        let avail = self.rend - self.rpos;
        if avail < HEADER_LEN {
            return Ok(None);
        }
        let hb: &[u8; HEADER_LEN] = self.rbuf[self.rpos..self.rpos + HEADER_LEN].try_into().unwrap();
        let h = Header::decode(hb, self.max_eager).map_err(|e| ConnError::Protocol(e.to_string()))?;
        if !self.authenticated() && !matches!(h.kind, FrameKind::Hello | FrameKind::Challenge | FrameKind::Auth) {
            return Err(ConnError::Protocol(format!("{:?} frame before the connection was authenticated", h.kind)));
        }
        // Rendez-vous data and large eager payloads are streamed to their destination, not
        // buffered: hand over the header alone.
        let body = if is_streamed(&h) { 0 } else { h.payload_len() as usize };
        if avail < HEADER_LEN + body {
            return Ok(None);
        }
        let start = self.rpos + HEADER_LEN;
        self.rpos = start + body;
        Ok(Some((h, start..start + body)))
    }

    /// Moves rendez-vous data to its destination: first what the read buffer holds, then
    /// straight from the socket. Returns bytes moved (0: would block).
    ///
    /// Unless `discard`, `ptr` is the destination of the whole stream, valid for writes of
    /// its `total` bytes (the status's length): a receive buffer of at least that capacity
    /// (`Engine::begin_stream`; valid until the receive completes or is detached, which turns
    /// the stream into `discard`), or an owned staging vector of that length. `left` counts
    /// the bytes still to come, which go to offsets `total - left..total`.
    pub fn fill_stream(&mut self, ptr: *mut u8, left: &mut usize, discard: bool) -> Result<usize, ConnError> {
        if self.sec.is_some() {
            // Sealed: through the read buffer, record by record.
            let mut moved = 0;
            loop {
                let buffered = (self.rend - self.rpos).min(*left);
                if buffered > 0 {
                    if !discard {
                        let off = self.stream_offset(*left);
                        // SAFETY: see `fill_stream`: bytes `off..off + buffered` of the stream's
                        // destination (`buffered <= left`), from this connection's read buffer.
                        unsafe {
                            std::ptr::copy_nonoverlapping(self.rbuf[self.rpos..].as_ptr(), ptr.add(off), buffered)
                        };
                    }
                    self.rpos += buffered;
                    *left -= buffered;
                    moved += buffered;
                }
                if *left == 0 {
                    return Ok(moved);
                }
                self.rpos = 0;
                self.rend = 0;
                if self.fill_sealed()? == 0 {
                    return Ok(moved);
                }
            }
        }
        let mut moved = 0;
        let buffered = (self.rend - self.rpos).min(*left);
        if buffered > 0 {
            if !discard {
                let off = self.stream_offset(*left);
                // SAFETY: see above: bytes `off..off + buffered` of the destination.
                unsafe { std::ptr::copy_nonoverlapping(self.rbuf[self.rpos..].as_ptr(), ptr.add(off), buffered) };
            }
            self.rpos += buffered;
            *left -= buffered;
            moved += buffered;
        }
        if self.shm.is_some() {
            while *left > 0 {
                let off = self.stream_offset(*left);
                let l = self.shm.as_deref_mut().expect("shared memory");
                let res = if discard {
                    let n = (*left).min(self.rbuf.len());
                    l.read(&mut self.rbuf[..n])
                } else {
                    // SAFETY: see above: the last `left` bytes of the destination,
                    // `off..total`, which is not the ring's memory.
                    unsafe { l.read_raw(ptr.add(off), *left) }
                };
                let (n, wake) = res.map_err(ConnError::Protocol)?;
                if wake {
                    doorbell(&mut self.stream);
                }
                if n == 0 {
                    self.ring_idle()?;
                    break;
                }
                *left -= n;
                moved += n;
            }
            return Ok(moved);
        }
        while *left > 0 {
            let res = if discard {
                let n = (*left).min(self.rbuf.len());
                self.stream.read(&mut self.rbuf[..n])
            } else {
                let off = self.stream_offset(*left);
                // SAFETY: see above: the last `left` bytes of the destination, `off..total`;
                // the slice lives for this read only.
                let dst = unsafe { std::slice::from_raw_parts_mut(ptr.add(off), *left) };
                self.stream.read(dst)
            };
            match res {
                Ok(0) => return Err(ConnError::Closed),
                Ok(n) => {
                    *left -= n;
                    moved += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ConnError::Io(e)),
            }
        }
        Ok(moved)
    }

    /// Offset into the destination given the bytes still missing.
    fn stream_offset(&self, left: usize) -> usize {
        let total = self.stream_status.map(|s| s.len as usize).unwrap_or(left);
        total - left
    }
}

/// Eager payloads at least this large are read straight to their destination.
pub(crate) const STREAM_MIN: u64 = 16 * 1024;

/// Whether a frame's payload is streamed rather than buffered.
pub(crate) fn is_streamed(h: &Header) -> bool {
    match h.kind {
        p2pmpi_wire::FrameKind::Data => true,
        p2pmpi_wire::FrameKind::Eager => h.len >= STREAM_MIN,
        _ => false,
    }
}

/// Writes what the socket takes of `out`, sealed after the opening with `--encrypt`;
/// returns the number of bytes written.
fn write_out(
    stream: &mut TcpStream,
    sec: Option<&mut Sec>,
    shm: Option<&mut super::shm::Link>,
    out: &mut Out,
) -> Result<usize, ConnError> {
    match (sec, shm) {
        (_, Some(l)) if !out.handshake => write_ring(stream, l, out),
        (Some(sec), _) if !out.handshake => write_sealed(stream, sec, out),
        _ => write_some(stream, out),
    }
}

/// Writes what the ring takes of `out` (a shared-memory connection), ringing the peer's
/// doorbell if it sleeps; returns the number of bytes written.
fn write_ring(stream: &mut TcpStream, l: &mut super::shm::Link, out: &mut Out) -> Result<usize, ConnError> {
    let total = out.total();
    let start = out.pos;
    if start == 0 {
        if let Some(wake) = l.write_frame(&out.hdr, out.payload.bytes()).map_err(ConnError::Protocol)? {
            out.pos = total;
            if wake {
                doorbell(stream);
            }
            return Ok(total);
        }
    }
    let mut wake = false;
    while out.pos < total {
        let (n, w) = if out.pos < HEADER_LEN {
            l.write_parts(&[&out.hdr[out.pos..], out.payload.bytes()])
        } else {
            l.write(&out.payload.bytes()[out.pos - HEADER_LEN..])
        }
        .map_err(ConnError::Protocol)?;
        wake |= w;
        if n == 0 {
            break;
        }
        out.pos += n;
    }
    if wake {
        doorbell(stream);
    }
    Ok(out.pos - start)
}

/// One nonblocking `recv` on `stream` into `buf`: the bytes read (0: the peer closed), or
/// `Err(None)` when nothing is there (`EAGAIN`), `Err(Some(e))` on another error. The poll
/// loop of a blocking wait calls it once per round, most often for nothing: the common
/// answer is told by `errno` alone, without making and dropping an `io::Error` (through
/// `Read` that was a third of the instructions of a round that found nothing).
#[inline]
pub(crate) fn recv_now(stream: &TcpStream, buf: &mut [u8]) -> Result<usize, Option<io::Error>> {
    use std::os::fd::AsRawFd;
    // SAFETY: `buf` is writable for `buf.len()` bytes, which is all the kernel writes; the
    // descriptor is the stream's, open while it is borrowed.
    let n = unsafe { libc::recv(stream.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n >= 0 {
        return Ok(n as usize);
    }
    // SAFETY: `__errno_location` gives this thread's `errno`, always valid to read.
    match unsafe { *libc::__errno_location() } {
        libc::EAGAIN => Err(None),
        code => Err(Some(io::Error::from_raw_os_error(code))),
    }
}

/// Wakes the peer of a shared-memory connection, asleep in `epoll_wait`: one byte on the TCP
/// connection (a full socket means a doorbell is pending already; a dead peer is noticed by
/// the reading side).
fn doorbell(stream: &mut TcpStream) {
    let _ = stream.write(&[0u8]);
}

/// Whether `out` is written out: all its bytes (sealed: all its records).
fn out_done(sec: Option<&Sec>, out: &Out) -> bool {
    out.pos == out.total() && sec.is_none_or(|s| s.wpos == s.wbuf.len())
}

/// `--encrypt`: seals `out` into records (a few at a time) and writes them.
fn write_sealed(stream: &mut TcpStream, sec: &mut Sec, out: &mut Out) -> Result<usize, ConnError> {
    let mut wrote = 0;
    loop {
        while sec.wpos < sec.wbuf.len() {
            match stream.write(&sec.wbuf[sec.wpos..]) {
                Ok(0) => return Err(ConnError::Closed),
                Ok(n) => {
                    sec.wpos += n;
                    wrote += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(wrote),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ConnError::Io(e)),
            }
        }
        sec.wbuf.clear();
        sec.wpos = 0;
        let total = out.total();
        if out.pos == total {
            return Ok(wrote);
        }
        for _ in 0..SEAL_BATCH {
            if out.pos == total {
                break;
            }
            let n = (total - out.pos).min(RECORD_MAX);
            let payload = out.payload.bytes();
            if out.pos < HEADER_LEN {
                let h = &out.hdr[out.pos..HEADER_LEN.min(out.pos + n)];
                let p = &payload[..n - h.len()];
                sec.sealer.seal_into(&[h, p], &mut sec.wbuf);
            } else {
                let from = out.pos - HEADER_LEN;
                sec.sealer.seal_into(&[&payload[from..from + n]], &mut sec.wbuf);
            }
            out.pos += n;
        }
    }
}

/// Writes what the socket takes of `out`; returns the number of bytes written.
fn write_some(stream: &mut TcpStream, out: &mut Out) -> Result<usize, ConnError> {
    let total = out.total();
    let start = out.pos;
    while out.pos < total {
        let payload = out.payload.bytes();
        let res = if out.pos < HEADER_LEN {
            let bufs = [IoSlice::new(&out.hdr[out.pos..]), IoSlice::new(payload)];
            stream.write_vectored(&bufs)
        } else {
            stream.write(&payload[out.pos - HEADER_LEN..])
        };
        match res {
            Ok(0) => return Err(ConnError::Closed),
            Ok(n) => out.pos += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(out.pos - start),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ConnError::Io(e)),
        }
    }
    Ok(out.pos - start)
}
